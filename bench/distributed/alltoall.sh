#!/usr/bin/env bash
# bench/distributed/alltoall.sh - all_to_all and all_to_all_v bus bandwidth, 4 KB .. 256 MB per
# rank (float32), ember's MPI backend (bench/distributed/alltoall.lua) beside PyTorch's gloo
# process group (torch.distributed.all_to_all_single, bench/distributed/torch_alltoall.py), in
# one run: same sizes, same uneven splits, same timing (median of rounds of ~30 ms).
#
#   bench/distributed/alltoall.sh [-r rounds] [-n 2,4] [-x max_bytes] [-y min_bytes]
#
# Rounds alternate who goes first, so that other users' load falls on both sides; the
# report gives medians over rounds and the ratio ember busbw / torch busbw, with the load
# averages before and after. Raw JSON lines go to $BUILD_DIR/bench-results/. Environment:
# BUILD_DIR (default build/), PYTHON (a python that imports torch; default .venv-bench/bin/python
# if present, else python3).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"

rounds=3 ranks=2,4 max_bytes=$((256 << 20)) min_bytes=4096
while getopts "r:n:x:y:h" flag; do
  case "$flag" in
    r) rounds="$OPTARG" ;; n) ranks="$OPTARG" ;; x) max_bytes="$OPTARG" ;; y) min_bytes="$OPTARG" ;;
    *) sed -n '2,14p' "$0" >&2; exit 2 ;;
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
[[ -f "$build/libember_mpi.so" ]] || { echo "alltoall.sh: $build has no MPI backend (install libopenmpi-dev)" >&2; exit 1; }
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x "$root/.venv-bench/bin/python" ]]; then python="$root/.venv-bench/bin/python"; else python=python3; fi
fi
"$python" -c 'import torch.distributed' 2>/dev/null || { echo "alltoall.sh: $python cannot import torch" >&2; exit 1; }
mkdir -p "$build/bench-results"
raw="$build/bench-results/alltoall-$(date +%Y%m%d-%H%M%S).jsonl"
: >"$raw"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
echo "alltoall.sh: $rounds rounds, ranks $ranks, $min_bytes .. $max_bytes bytes, load average $load_before" >&2

tag() { sed "s/^{/{\"round\":$1,/" >>"$raw"; }
run_ember() {   # ranks round
  EMBER_NUM_THREADS=1 "$build/ember" launch -n "$1" --threads 1 --no-prefix bench/distributed/alltoall.lua 5 \
    "$max_bytes" "$min_bytes" | grep '^{' | tag "$2"
}
run_torch() {   # ranks round
  local port=$((29500 + RANDOM % 2000)) pids=() k
  for ((k = 0; k < $1; k++)); do
    RANK=$k WORLD_SIZE=$1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 \
      "$python" bench/distributed/torch_alltoall.py 5 "$max_bytes" "$min_bytes" >"$log.$k" 2>&1 &
    pids+=($!)
  done
  for k in "${pids[@]}"; do wait "$k" || { echo "alltoall.sh: torch failed:" >&2; cat "$log".* >&2; return 0; }; done
  grep '^{' "$log.0" | tag "$2"
}
IFS=, read -r -a rank_list <<<"$ranks"
for ((r = 1; r <= rounds; r++)); do
  for n in "${rank_list[@]}"; do
    echo "alltoall.sh: round $r/$rounds, $n ranks" >&2
    if ((r % 2)); then run_ember "$n" "$r"; run_torch "$n" "$r"; else run_torch "$n" "$r"; run_ember "$n" "$r"; fi
  done
done
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$raw" "$load_before" "$load_after" <<'PY'
import json, statistics, sys
raw, before, after = sys.argv[1:4]
rows = [json.loads(l) for l in open(raw) if l.strip()]
med = lambda xs: statistics.median(xs) if xs else None
fmt = lambda v, spec="%.3f": spec % v if v is not None else "-"
report = []
print("all_to_all(_v), float32, bytes per rank: median of rounds; busbw GB/s = bytes / time x (n-1)/n")
print("%-13s %5s %10s %10s %9s %10s %9s %8s" % ("op", "ranks", "bytes", "ember us", "busbw", "gloo us", "busbw",
                                               "e/gloo"))
for op in ("all_to_all", "all_to_all_v"):
    for n in sorted({r["ranks"] for r in rows}):
        for b in sorted({r["bytes"] for r in rows if r["ranks"] == n}):
            def pick(impl):
                sel = [r for r in rows if (r["op"], r["ranks"], r["bytes"], r["impl"]) == (op, n, b, impl)]
                return med([r["us"] for r in sel]), med([r["busbw"] for r in sel])
            (eu, eb), (tu, tb) = pick("ember"), pick("torch_gloo")
            ratio = eb / tb if eb and tb else None
            print("%-13s %5d %10d %10s %9s %10s %9s %8s" % (op, n, b, fmt(eu, "%.1f"), fmt(eb), fmt(tu, "%.1f"),
                                                           fmt(tb), fmt(ratio, "%.2f")))
            report.append({"op": op, "ranks": n, "bytes": b, "ember_us": eu, "ember_busbw": eb, "torch_us": tu,
                           "torch_busbw": tb, "ratio": ratio})
print("load average before %s, after %s; raw: %s" % (before, after, raw))
print(json.dumps({"alltoall_bench": report}))
PY
