#!/bin/sh
# Runs every libFuzzer harness (tests/fuzz) for SECONDS each, one after the other, in a
# clang build with ASan and UBSan (build-fuzz/, configured here). Fails on the first crash,
# sanitizer report, leak or timeout; the input that caused it is left in
# build-fuzz/artifacts/<harness>/ (copy it into tests/fuzz/regressions/<harness>/ with the fix).
#   scripts/fuzz.sh 20                   every harness, 20 s each (what scripts/test.sh runs)
#   scripts/fuzz.sh 3600 emg yaml        a longer campaign for some harnesses
#   FUZZ_JOBS=2 scripts/fuzz.sh 600 npy  libFuzzer -jobs/-workers (default 1: one process)
# Each harness keeps its growing corpus in build-fuzz/corpus/<harness>/ (seeded from the
# seed and regression corpora), so later runs start where earlier ones stopped.
set -eu
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-20}
[ $# -gt 0 ] && shift
BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
CC_FUZZ=${FUZZ_CC:-clang}
if ! command -v "$CC_FUZZ" >/dev/null 2>&1; then
  echo "fuzz: $CC_FUZZ not found (install clang and libclang-rt-dev: scripts/setup.sh does)" >&2
  exit 1
fi
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER="$CC_FUZZ" -DEMBER_FUZZ=ON \
    -DEMBER_CUDA=OFF ${FUZZ_CMAKE_ARGS:-} >"$BUILD.configure.log" 2>&1 || { cat "$BUILD.configure.log"; exit 1; }
fi
cmake --build "$BUILD" --target fuzz_harnesses -j "$(nproc 2>/dev/null || echo 2)"

if [ $# -gt 0 ]; then
  names="$*"
else
  names=$(ls tests/fuzz/fuzz_*.c | sed 's|.*/fuzz_||; s|\.c$||')
fi
status=0
for name in $names; do
  bin="$BUILD/fuzz/fuzz_$name"
  [ -x "$bin" ] || { echo "fuzz: no harness $bin (not built here?)" >&2; status=1; continue; }
  corpus="$BUILD/corpus/$name" artifacts="$BUILD/artifacts/$name"
  mkdir -p "$corpus" "$artifacts"
  for d in tests/fuzz/seeds/$name tests/fuzz/regressions/$name; do
    [ -d "$d" ] && cp -n "$d"/* "$corpus"/ 2>/dev/null || true
  done
  log="$BUILD/fuzz_$name.log"
  # -rss_limit_mb and -malloc_limit_mb: a parser that asks for gigabytes on a small input
  # is a finding; -timeout: one input may not take 10 s.
  # -jobs (even 1) makes libFuzzer fork workers that log to ./fuzz-N.log: only when asked
  jobs=""
  [ "${FUZZ_JOBS:-1}" -gt 1 ] && jobs="-jobs=$FUZZ_JOBS -workers=$FUZZ_JOBS"
  # shellcheck disable=SC2086
  if "$bin" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len=65536 \
       -print_final_stats=1 $jobs -artifact_prefix="$artifacts/" "$corpus" >"$log" 2>&1; then
    execs=$(grep -h 'stat::number_of_executed_units' "$log" | awk '{s += $2} END {print s + 0}')
    cov=$(grep -ho 'cov: [0-9]*' "$log" | tail -1)
    echo "fuzz: $name: ok ($execs runs, $cov, $(ls "$corpus" | wc -l) inputs in the corpus)"
  else
    echo "fuzz: $name: FAILED (log: $log; inputs: $artifacts/)" >&2
    grep -h -m1 -A25 'ERROR: \|==ERROR\|runtime error\|SUMMARY' "$log" >&2 || tail -40 "$log" >&2
    status=1
  fi
done
exit $status
