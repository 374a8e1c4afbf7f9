#!/bin/sh
# bench/recsys/run.sh - DLRM in its Criteo Kaggle configuration (bottom 13-512-256-64-16, top
# 512-256-1, dimension 16, 26 tables, batch 128) in ember and in PyTorch running DLRM's own
# DLRM_Net, on DLRM's random data, interleaved: one rank at 1 and at 2 threads (each side at the
# same count) and 2 ranks of one thread; prints
# samples/s and peak RSS of each, and the ratios of the medians; also samples per CPU-second
# of rank 0 (process CPU time), which a machine shared with other jobs measures more steadily.
#   bench/recsys/run.sh [STEPS] [ROWS] [REPEATS]     (EMBER=build/ember by default)
# CONFIG=benchmark runs DLRM's benchmark model instead (bench/dlrm_s_benchmark.sh: 512 dense
# inputs, bottom 512-512-64, top 1024-1024-1024-1, dimension 64, 8 tables, up to 100 indices
# per bag), at BATCH (default 2048 there, 128 for kaggle) with ROWS rows per table:
#   CONFIG=benchmark bench/recsys/run.sh 10 1000000 3    # 8 x 1M x 64 floats: 2 GB of tables
set -e
cd "$(dirname "$0")/../.."
steps=${1:-50}; rows=${2:-100000}; reps=${3:-3}
config=${CONFIG:-kaggle}
case $config in kaggle) batch=${BATCH:-128} ;; benchmark) batch=${BATCH:-2048} ;;
  *) echo "run.sh: CONFIG must be kaggle or benchmark, got $config" >&2; exit 2 ;; esac
ember=${EMBER:-build/ember}
dlrm=$(bench/recsys/setup.sh | tail -1)
out=$(mktemp)
tag() { sed -n "s/^\(\[0\] \)\{0,1\}{/{\"threads\":$1,/p"; }
for r in $(seq "$reps"); do
  for t in 1 2; do   # one rank at 1 and at 2 threads, each side at the same count
    EMBER_NUM_THREADS=$t "$ember" bench/recsys/ember_dlrm.lua "$steps" "$batch" "$rows" '' '' '' "$config" | tag "$t" >> "$out"
    python3 bench/recsys/torch_dlrm.py "$dlrm" --steps "$steps" --batch "$batch" --rows "$rows" --threads "$t" \
      --config "$config" 2>/dev/null | tag "$t" >> "$out"
  done
  "$ember" launch -n 2 --threads 1 bench/recsys/ember_dlrm.lua "$steps" "$batch" "$rows" '' '' '' "$config" | tag 1 >> "$out"
  OMP_NUM_THREADS=1 python3 -m torch.distributed.run --nproc-per-node 2 bench/recsys/torch_dlrm.py "$dlrm" \
    --steps "$steps" --batch "$batch" --rows "$rows" --config "$config" 2>/dev/null | tag 1 >> "$out"
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
for n, th in ((1, 1), (1, 2), (2, 1)):
    e = [r for r in rows if r['ranks'] == n and r['threads'] == th and r['peer'] == 'ember']
    t = [r for r in rows if r['ranks'] == n and r['threads'] == th and r['peer'] != 'ember']
    if not e or not t: continue
    es, ts = statistics.median(r['samples_per_s'] for r in e), statistics.median(r['samples_per_s'] for r in t)
    em, tm = statistics.median(r['peak_rss_mb'] for r in e), statistics.median(r['peak_rss_mb'] for r in t)
    ec = statistics.median(r['samples_per_cpu_s'] for r in e)
    tc = statistics.median(r['samples_per_cpu_s'] for r in t)
    print(f"{e[0].get('config', 'kaggle')}: {n} rank(s) x {th} thread(s): ember {es:.0f} samples/s, {em:.0f} MB | {t[0]['peer']} {ts:.0f} samples/s,"
          f" {tm:.0f} MB | ratio {es / ts:.2f}x samples/s, {em / tm:.2f}x memory")
    # per CPU-second of a rank (user + system time): what a loaded, shared machine still measures
    print(f"{n} rank(s) x {th} thread(s), per CPU-second of rank 0: ember {ec:.0f} | peer {tc:.0f} samples |"
          f" ratio {ec / tc:.2f}x")
PY
rm -f "$out"
