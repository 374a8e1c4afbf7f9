#!/usr/bin/env bash
# tests/gpu/run.sh DIR - the GPU checks and benchmarks, in one go, on a machine with a GPU:
#   1. configure and build a release build with CUDA into build-gpu (cmake -DEMBER_CUDA=ON);
#   2. run the Lua test suite on the GPU (EMBER_TEST_DEVICE=cuda, through ctest, -R ^lua/);
#   3. run the GPU benchmarks (bench/gpu): Fashion-MNIST MLP and CNN training steps, GEMM,
#      elementwise add/mul against a device-to-device copy, PageRank on a Kronecker graph of
#      1.07B arcs, and the partitioned graph's GPU sweep against it at scale 23; ember's side and
#      PyTorch's (when the python finds torch) one after the other;
#   4. write DIR/summary.json with every figure, the test counts and each step's status.
# Logs: DIR/build.log, DIR/tests.log, DIR/bench-<name>.log (stderr) and .json (the line).
#
# Every step runs under `timeout` within a total budget (EMBER_GPU_BUDGET seconds, 450 by
# default: under 8 minutes with the summary), so the script cannot hang; a step that fails
# or times out is recorded and the next one runs; summary.json is written whatever happens
# (also on Ctrl-C). Exit status: 0 when every step passed, 1 otherwise, 2 on bad usage.
#
# Without a GPU (nvidia-smi lists none) or with EMBER_GPU_DRY_RUN=1 it is a dry run: the
# same steps on the CPU with tiny sizes (--device cpu --small), a subset of the tests
# (EMBER_GPU_TEST_REGEX, default ^lua/graph), to check the script itself end to end.
#
# Environment: EMBER_GPU_BUILD_DIR (build-gpu), EMBER_GPU_SKIP_BUILD=1 (use that build as
# it is), EMBER_GPU_JOBS (build jobs: all cores), PYTHON (a python with torch; default
# python3, else .venv-bench/bin/python), EMBER_GPU_BUDGET, EMBER_GPU_DRY_RUN,
# EMBER_GPU_TEST_REGEX, EMBER_GPU_PAGERANK_SCALE (26).
set -u

if [ $# -ne 1 ] || [ "${1#-}" != "$1" ]; then
  echo "usage: tests/gpu/run.sh DIR   (logs and summary.json go into DIR)" >&2
  exit 2
fi
mkdir -p "$1" || exit 2
out="$(cd "$1" && pwd)"
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root" || exit 2

start=$(date +%s)
budget="${EMBER_GPU_BUDGET:-450}"
build="${EMBER_GPU_BUILD_DIR:-build-gpu}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
steps="$out/steps.tsv"
notes="$out/notes.txt"
: >"$steps"
: >"$notes"
rm -f "$out/summary.json" "$out"/bench-*.json
note() { echo "$*" >>"$notes"; echo "run.sh: $*" >&2; }

# ---------------------------------------------------------------- GPU or dry run
dry=0
if [ "${EMBER_GPU_DRY_RUN:-0}" = 1 ]; then
  dry=1
  note "dry run (EMBER_GPU_DRY_RUN=1): CPU, tiny sizes"
elif ! timeout 30 nvidia-smi -L >"$out/gpu.txt" 2>&1 || ! grep -q '^GPU ' "$out/gpu.txt"; then
  dry=1
  note "dry run: no GPU found ($(head -c 200 "$out/gpu.txt" | tr '\n' ' ')): CPU, tiny sizes"
fi
if [ $dry = 1 ]; then
  device=cpu small=--small cuda_flag=AUTO
  test_regex="${EMBER_GPU_TEST_REGEX:-^lua/graph}"
  jobs="${EMBER_GPU_JOBS:-2}" test_jobs=2
else
  device=cuda small="" cuda_flag=ON
  test_regex="${EMBER_GPU_TEST_REGEX:-^lua/}"
  jobs="${EMBER_GPU_JOBS:-$(nproc)}" test_jobs=8
  timeout 30 nvidia-smi >>"$out/gpu.txt" 2>&1
fi
echo "$dry" >"$out/dry_run"

# ---------------------------------------------------------------- steps
# run_step NAME CAP LOG CMD...: runs CMD with stdout and stderr in LOG under a timeout of
# CAP seconds or what is left of the budget, whichever is less; records NAME, status, exit
# code and seconds in steps.tsv. Skipped when fewer than 10 seconds are left.
run_step() {
  local name="$1" cap="$2" log="$3"
  shift 3
  local left=$((budget - ($(date +%s) - start)))
  local limit=$((cap < left ? cap : left))
  if [ "$limit" -lt 10 ]; then
    printf '%s\tskipped\t-1\t0\tout of time (%ss left of %ss)\n' "$name" "$left" "$budget" >>"$steps"
    note "$name: skipped, out of time"
    return 1
  fi
  echo "run.sh: $name (up to ${limit}s)" >&2
  local t0 rc status
  t0=$(date +%s)
  timeout -k 10 "$limit" "$@" >"$log" 2>&1 </dev/null
  rc=$?
  case $rc in
    0) status=ok ;;
    124 | 137) status=timeout ;;
    *) status=failed ;;
  esac
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$rc" "$(($(date +%s) - t0))" "limit ${limit}s" >>"$steps"
  [ $status = ok ] || note "$name: $status (exit $rc, log $log)"
  [ $status = ok ]
}

# run_bench NAME CAP CMD...: a benchmark printing one JSON line: stdout to bench-NAME.json,
# stderr to bench-NAME.log.
run_bench() {
  local name="$1" cap="$2"
  shift 2
  run_step "bench-$name" "$cap" "$out/bench-$name.log" sh -c '"$@" >"$0"' "$out/bench-$name.json" "$@"
}

finish() {
  trap - EXIT INT TERM
  echo "$(($(date +%s) - start))" >"$out/seconds"
  if command -v python3 >/dev/null 2>&1 &&
    timeout 60 python3 "$root/tests/gpu/summarise.py" "$out" >"$out/summary.log" 2>&1; then
    :
  else
    # no python3, or the summariser failed: the step table alone, still valid JSON
    {
      printf '{"dry_run": %s, "seconds": %s, "summary_error": "see summary.log", "steps": [' \
        "$([ $dry = 1 ] && echo true || echo false)" "$(cat "$out/seconds")"
      sep=""
      while IFS="$(printf '\t')" read -r n s c t _; do
        printf '%s{"name": "%s", "status": "%s", "rc": %s, "seconds": %s}' "$sep" "$n" "$s" "$c" "$t"
        sep=", "
      done <"$steps"
      printf ']}\n'
    } >"$out/summary.json"
  fi
  echo "run.sh: summary in $out/summary.json" >&2
  if [ "$failed" = 1 ] || grep -qv "	ok	" "$steps" 2>/dev/null; then exit 1; fi
  exit 0
}
failed=0
trap finish EXIT
trap 'failed=1; note "interrupted"; exit 1' INT TERM

# ---------------------------------------------------------------- 1. build
if [ "${EMBER_GPU_SKIP_BUILD:-0}" = 1 ]; then
  note "build: skipped (EMBER_GPU_SKIP_BUILD=1), using $build"
  printf 'build\tok\t0\t0\tskipped by request\n' >>"$steps"
else
  run_step build 300 "$out/build.log" sh -c 'cmake -S "$0" -B "$1" -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA="$2" &&
    cmake --build "$1" -j "$3"' "$root" "$build" "$cuda_flag" "$jobs"
fi
ember="$build/ember"
if [ ! -x "$ember" ]; then
  failed=1
  note "no $ember: nothing else can run"
  exit 1
fi
timeout 30 "$ember" info >"$out/info.txt" 2>&1

# ---------------------------------------------------------------- 2. tests
if [ $dry = 1 ]; then test_env="EMBER_TEST_DEVICE=cpu"; else test_env="EMBER_TEST_DEVICE=cuda"; fi
run_step tests 100 "$out/tests.log" env "$test_env" ctest --test-dir "$build" -R "$test_regex" -j "$test_jobs" \
  --timeout 90 --output-on-failure

# ---------------------------------------------------------------- 3. benchmarks
python="${PYTHON:-}"
if [ -z "$python" ]; then
  for p in python3 "$root/.venv-bench/bin/python"; do
    if timeout 60 "$p" -c 'import torch' >/dev/null 2>&1; then python="$p"; break; fi
  done
fi
if [ -n "$python" ] && ! timeout 60 "$python" -c 'import torch' >/dev/null 2>&1; then
  note "PYTHON=$python cannot import torch"
  python=""
fi
[ -n "$python" ] || note "no python with torch (python3 -c 'import torch' failed): PyTorch comparisons skipped"

export EMBER_NUM_THREADS="${EMBER_NUM_THREADS:-$(nproc)}"
for m in mlp cnn; do
  run_bench "train-$m" 60 "$ember" bench/gpu/train.lua --model "$m" --device "$device" $small
  [ -z "$python" ] || run_bench "torch-train-$m" 60 "$python" bench/gpu/torch_bench.py train --model "$m" \
    --device "$device" $small
done
run_bench gemm 60 "$ember" bench/gpu/gemm.lua --device "$device" $small
[ -z "$python" ] || run_bench torch-gemm 60 "$python" bench/gpu/torch_bench.py gemm --device "$device" $small
run_bench elementwise 45 "$ember" bench/gpu/elementwise.lua --device "$device" $small
[ -z "$python" ] || run_bench torch-elementwise 45 "$python" bench/gpu/torch_bench.py elementwise \
  --device "$device" $small
run_bench pagerank 150 "$ember" bench/gpu/pagerank.lua --device "$device" --scale "${EMBER_GPU_PAGERANK_SCALE:-26}" \
  $small
# the partitioned graph's GPU sweep (one rank: the kernels, not NCCL) against the custom engine
run_bench pagerank-partitioned 90 "$ember" bench/gpu/pagerank.lua --device "$device" --engines custom,partitioned \
  --scale 23 --repeat 1 $small
exit 0   # finish() writes the summary and sets the status
