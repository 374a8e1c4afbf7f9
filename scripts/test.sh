#!/bin/sh
# Runs the whole test suite: the release build's tests, then the same tests in an
# AddressSanitizer + UndefinedBehaviorSanitizer build, then a bounded run of every fuzz
# harness (scripts/fuzz.sh, clang). Assumes scripts/setup.sh ran.
#   scripts/test.sh            all three
#   SANITIZE=0 scripts/test.sh release build only (and no fuzzing)
#   FUZZ_SECONDS=0             no fuzzing; FUZZ_SECONDS=60: a minute per harness (default 15)
set -eu
cd "$(dirname "$0")/.."
JOBS=$(nproc 2>/dev/null || echo 2)

echo "== tests (release build)"
ctest --test-dir build --output-on-failure -j "$JOBS"

if [ "${SANITIZE:-1}" != 0 ]; then
  echo "== tests (ASan + UBSan build)"
  # The CUDA plugin is not instrumented (nvcc code) and cannot run here: the release pass
  # builds it; this pass skips it to halve the compile time.
  BUILD_DIR=build-asan BUILD_TYPE=RelWithDebInfo CMAKE_ARGS="-DEMBER_SANITIZE=ON -DEMBER_WERROR=ON -DEMBER_CUDA=OFF" \
    scripts/setup.sh
  ctest --test-dir build-asan --output-on-failure -j "$JOBS"

fi
if [ "${SANITIZE:-1}" != 0 ] && [ "${FUZZ_SECONDS:-15}" != 0 ]; then
  echo "== fuzzing (every harness, ${FUZZ_SECONDS:-15} s each)"
  scripts/fuzz.sh "${FUZZ_SECONDS:-15}"
fi
echo "== all tests passed"
