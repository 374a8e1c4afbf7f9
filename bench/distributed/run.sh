#!/usr/bin/env bash
# bench/distributed/run.sh - ember's distributed benchmarks beside their peers (bench/README.md,
# "Distributed"):
#   allreduce  ember.dist.all_reduce against MPI_Allreduce called directly (same machine, same
#              mpirun flags), 4 KB .. 256 MB, bus bandwidth = algbw x 2(n-1)/n
#   ddp        step time of the Fashion-MNIST MLP and CNN at 1, 2 and 4 ranks x 1 thread,
#              ember's DistributedDataParallel beside PyTorch's (gloo), with scaling
#              efficiency and the share of communication hidden behind backward
#
#   bench/distributed/run.sh [-p allreduce,ddp] [-r rounds] [-n 1,2,4] [-m mlp,cnn] [-s steps] [-x max_bytes]
#
# Rounds alternate who goes first, so that other users' load falls on both sides; medians
# are reported, with the load averages before and after. Raw JSON lines are kept in
# $BUILD_DIR/bench-results/. Environment: BUILD_DIR (default build/), PYTHON (a python
# that imports torch; default .venv-bench/bin/python).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"

parts=allreduce,ddp rounds=3 ranks=1,2,4 models=mlp,cnn steps= max_bytes=$((256 << 20))
while getopts "p:r:n:m:s:x:h" flag; do
  case "$flag" in
    p) parts="$OPTARG" ;; r) rounds="$OPTARG" ;; n) ranks="$OPTARG" ;; m) models="$OPTARG" ;;
    s) steps="$OPTARG" ;; x) max_bytes="$OPTARG" ;;
    *) sed -n '2,18p' "$0" >&2; exit 2 ;;
  esac
done

build="${BUILD_DIR:-build}"
[[ "$build" = /* ]] || build="$root/$build"
log="$(mktemp)"
trap 'rm -f "$log" "$log".*' EXIT
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
fi
cmake --build "$build" -j 2 --target ember_host >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
[[ -f "$build/libember_mpi.so" ]] || { echo "dist/run.sh: $build has no MPI backend (install libopenmpi-dev)" >&2; exit 1; }
mkdir -p "$build/bench" "$build/bench-results"
mpicc -O2 bench/distributed/mpi_allreduce.c -o "$build/bench/mpi_allreduce"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x "$root/.venv-bench/bin/python" ]]; then python="$root/.venv-bench/bin/python"; else python=python3; fi
fi
raw="$build/bench-results/dist-$(date +%Y%m%d-%H%M%S).jsonl"
: >"$raw"
ember="$build/ember"
mpirun_flags=(--oversubscribe --bind-to none)
[[ "$(id -u)" == 0 ]] && mpirun_flags+=(--allow-run-as-root)
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
echo "dist/run.sh: parts $parts, $rounds rounds, load average $load_before" >&2

tag() { sed "s/^{/{\"round\":$1,/" >>"$raw"; }

# ---------------------------------------------------------------- allreduce
if [[ ",$parts," == *,allreduce,* ]]; then
  for ((r = 1; r <= rounds; r++)); do
    for n in 2 4; do
      [[ ",$ranks," == *,$n,* ]] || continue
      echo "dist/run.sh: allreduce round $r/$rounds, $n ranks" >&2
      run_e() { EMBER_NUM_THREADS=1 "$ember" launch -n "$n" --no-prefix bench/distributed/allreduce.lua 5 "$max_bytes" | tag "$r"; }
      # MPI twice: polling as it does by default, and yielding the core while it waits
      # (mpi_yield_when_idle, what Open MPI does itself when it knows the cores are
      # oversubscribed); the better of the two is the bound
      run_m() {
        mpirun -np "$n" "${mpirun_flags[@]}" "$build/bench/mpi_allreduce" -r 5 -m "$max_bytes" | tag "$r"
        mpirun -np "$n" "${mpirun_flags[@]}" --mca mpi_yield_when_idle 1 "$build/bench/mpi_allreduce" -r 5 \
          -m "$max_bytes" | sed 's/"impl":"mpi"/"impl":"mpi_yield"/' | tag "$r"
      }
      if ((r % 2)); then run_e; run_m; else run_m; run_e; fi
    done
  done
fi

# ---------------------------------------------------------------- ddp
if [[ ",$parts," == *,ddp,* ]]; then
  [[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]] || {
    echo "dist/run.sh: Fashion-MNIST is missing (apt-get install dataset-fashion-mnist)" >&2; exit 1; }
  "$python" -c 'import torch' 2>/dev/null || { echo "dist/run.sh: $python cannot import torch (scripts/setup-bench.sh)" >&2; exit 1; }
  run_ember() {   # model ranks steps warmup
    if [[ "$2" == 1 ]]; then
      EMBER_NUM_THREADS=1 "$ember" bench/distributed/ddp_fmnist.lua "$1" "$3" "$4" 128
    else
      "$ember" launch -n "$2" --threads 1 --no-prefix bench/distributed/ddp_fmnist.lua "$1" "$3" "$4" 128
    fi | grep '^{' | tag "$r"
  }
  run_torch() {   # model ranks steps warmup [paired]
    local port=$((29500 + RANDOM % 2000)) pids=() k
    for ((k = 0; k < $2; k++)); do
      RANK=$k WORLD_SIZE=$2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 \
        "$python" bench/distributed/torch_ddp_fmnist.py "$1" "$3" "$4" 128 1 ${5:-} >"$log.$k" 2>&1 &
      pids+=($!)
    done
    for k in "${pids[@]}"; do wait "$k" || { echo "dist/run.sh: torch failed:" >&2; cat "$log".* >&2; return 0; }; done
    grep '^{' "$log.0" | tag "$r"
  }
  IFS=, read -r -a model_list <<<"$models"
  IFS=, read -r -a rank_list <<<"$ranks"
  for ((r = 1; r <= rounds; r++)); do
    for m in "${model_list[@]}"; do
      s="${steps:-$([[ $m == mlp ]] && echo 300 || echo 40)}"
      w=$((s / 10 + 5))
      for n in "${rank_list[@]}"; do
        echo "dist/run.sh: ddp round $r/$rounds, $m, $n rank(s)" >&2
        if ((r % 2)); then run_ember "$m" "$n" "$s" "$w"; run_torch "$m" "$n" "$s" "$w"
        else run_torch "$m" "$n" "$s" "$w"; run_ember "$m" "$n" "$s" "$w"; fi
        if [[ "$n" != 1 ]]; then
          # the synchronisation cost alone: sync and no_sync blocks alternating in one run
          blocks=$([[ $m == mlp ]] && echo 10 || echo 3) per=$([[ $m == mlp ]] && echo 25 || echo 5)
          "$ember" launch -n "$n" --threads 1 --no-prefix bench/distributed/ddp_overhead.lua "$m" "$blocks" "$per" \
            | grep '^{' | tag "$r"
          run_torch "$m" "$n" "$blocks" "$per" paired
        fi
      done
    done
  done
fi
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
python3 bench/distributed/report.py "$raw" "$load_before" "$load_after"
