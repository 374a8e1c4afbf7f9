#!/bin/sh
# Runs the whole test suite: the release build's tests, then the same tests in an
# AddressSanitizer + UndefinedBehaviorSanitizer build. Assumes scripts/setup.sh ran.
#   scripts/test.sh            both builds
#   SANITIZE=0 scripts/test.sh release build only
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
echo "== all tests passed"
