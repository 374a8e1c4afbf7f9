#!/usr/bin/env bash
# bench/distributed/gloo.sh - collectives under the real torchrun, ember beside PyTorch's Gloo
# process group, 4 KB .. max_bytes, in one run:
#   ember_gloo  ember.dist over its Gloo backend (EMBER_DIST_SHM=0: every byte through Gloo)
#   ember_shm   ember.dist as it runs by default: ranks of one host reduce in shared memory
#   ember_mpi   ember.dist over MPI (ember launch, EMBER_DIST_SHM=0), for reference
#   torch_gloo  torch.distributed with backend gloo
# Each a median of rounds of ~30 ms of back-to-back calls (bench/distributed/allreduce.lua and
# torch_allreduce.py measure alike); rounds alternate who goes first. Bus bandwidth: all_reduce
# algbw x 2(n-1)/n, all_to_all algbw x (n-1)/n, broadcast algbw.
#   bench/distributed/gloo.sh [-n ranks] [-r rounds] [-x max_bytes] [-o all_reduce,broadcast,all_to_all]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
n=2 rounds=3 max_bytes=$((256 << 20)) ops=all_reduce
while getopts "n:r:x:o:h" flag; do
  case "$flag" in
    n) n="$OPTARG" ;; r) rounds="$OPTARG" ;; x) max_bytes="$OPTARG" ;; o) ops="$OPTARG" ;;
    *) sed -n '2,13p' "$0" >&2; exit 2 ;;
  esac
done
build="${BUILD_DIR:-build}"
ember="$build/ember"
command -v torchrun >/dev/null || { echo "gloo.sh: torchrun not found (pip install torch)" >&2; exit 1; }
raw="$(mktemp)"
trap 'rm -f "$raw"' EXIT
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
port() { echo $((20000 + RANDOM % 20000)); }
trun() { torchrun --nproc-per-node "$n" --master-port "$(port)" "$@" 2>/dev/null | grep '^{' >>"$raw"; }
IFS=, read -r -a op_list <<<"$ops"
for ((r = 1; r <= rounds; r++)); do
  for op in "${op_list[@]}"; do
    echo "gloo.sh: round $r/$rounds, $op, $n ranks" >&2
    e_gloo() { EMBER_DIST_SHM=0 trun --no-python "$ember" bench/distributed/allreduce.lua 5 "$max_bytes" "$op" ember_gloo; }
    e_shm() { trun --no-python "$ember" bench/distributed/allreduce.lua 5 "$max_bytes" "$op" ember_shm; }
    e_mpi() { EMBER_DIST_SHM=0 EMBER_NUM_THREADS=1 "$ember" launch -n "$n" --no-prefix bench/distributed/allreduce.lua 5 \
      "$max_bytes" "$op" ember_mpi | grep '^{' >>"$raw"; }
    t_gloo() { trun bench/distributed/torch_allreduce.py 5 "$max_bytes" "$op"; }
    if ((r % 2)); then e_gloo; t_gloo; e_shm; e_mpi; else e_mpi; e_shm; t_gloo; e_gloo; fi
  done
done
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$raw" "$n" "$load_before" "$load_after" <<'PY'
import json, statistics, sys
raw, n, before, after = sys.argv[1:]
rows = [json.loads(l) for l in open(raw) if l.startswith("{")]
impls = ("ember_gloo", "torch_gloo", "ember_shm", "ember_mpi")
report = []
for op in sorted({r.get("op", "all_reduce") for r in rows}):
    print(f"{op}, {n} ranks: bus bandwidth GB/s (median of rounds)")
    print("%10s" % "bytes" + "".join("%12s" % i for i in impls) + "%12s%12s" % ("gloo/torch", "shm/torch"))
    for b in sorted({r["bytes"] for r in rows if r.get("op", "all_reduce") == op}):
        m = {}
        for i in impls:
            v = [r["busbw"] for r in rows if r["impl"] == i and r["bytes"] == b and r.get("op", "all_reduce") == op]
            m[i] = statistics.median(v) if v else None
        ratio = m["ember_gloo"] / m["torch_gloo"] if m["ember_gloo"] and m["torch_gloo"] else None
        shm = m["ember_shm"] / m["torch_gloo"] if m["ember_shm"] and m["torch_gloo"] else None
        f = lambda x, s="%12.3f": s % x if x is not None else "%12s" % "-"
        print("%10d" % b + "".join(f(m[i]) for i in impls) + f(ratio, "%12.2f") + f(shm, "%12.2f"))
        report.append({"op": op, "bytes": b, **{i: m[i] for i in impls}, "gloo_over_torch": ratio})
print(f"load average: before {before}, after {after}")
print(json.dumps({"gloo_bench": {"ranks": int(n), "rows": report, "load_before": before, "load_after": after}}))
PY
