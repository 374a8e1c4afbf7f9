#!/bin/sh
# bench/recsys/run.sh - DLRM in its Criteo Kaggle configuration (bottom 13-512-256-64-16, top
# 512-256-1, dimension 16, 26 tables, batch 128) in ember and in PyTorch running DLRM's own
# DLRM_Net, on DLRM's random data, 1 and 2 ranks, one thread per rank, interleaved; prints
# samples/s and peak RSS of each, and the ratios of the medians; also samples per CPU-second
# of rank 0 (process CPU time), which a machine shared with other jobs measures more steadily.
#   bench/recsys/run.sh [STEPS] [ROWS] [REPEATS]     (EMBER=build/ember by default)
set -e
cd "$(dirname "$0")/../.."
steps=${1:-50}; rows=${2:-100000}; reps=${3:-3}
ember=${EMBER:-build/ember}
dlrm=$(bench/recsys/setup.sh | tail -1)
out=$(mktemp)
for r in $(seq "$reps"); do
  for n in 1 2; do
    if [ "$n" = 1 ]; then
      "$ember" bench/recsys/ember_dlrm.lua "$steps" 128 "$rows" >> "$out"
      python3 bench/recsys/torch_dlrm.py "$dlrm" --steps "$steps" --rows "$rows" >> "$out"
    else
      "$ember" launch -n 2 --threads 1 bench/recsys/ember_dlrm.lua "$steps" 128 "$rows" | sed 's/^\[0\] //' >> "$out"
      OMP_NUM_THREADS=1 python3 -m torch.distributed.run --nproc-per-node 2 bench/recsys/torch_dlrm.py "$dlrm" \
        --steps "$steps" --rows "$rows" 2>/dev/null | grep '^{' >> "$out"
    fi
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
for n in (1, 2):
    e = [r for r in rows if r['ranks'] == n and r['peer'] == 'ember']
    t = [r for r in rows if r['ranks'] == n and r['peer'] != 'ember']
    if not e or not t: continue
    es, ts = statistics.median(r['samples_per_s'] for r in e), statistics.median(r['samples_per_s'] for r in t)
    em, tm = statistics.median(r['peak_rss_mb'] for r in e), statistics.median(r['peak_rss_mb'] for r in t)
    ec = statistics.median(r['samples_per_cpu_s'] for r in e)
    tc = statistics.median(r['samples_per_cpu_s'] for r in t)
    print(f"{n} rank(s): ember {es:.0f} samples/s, {em:.0f} MB | {t[0]['peer']} {ts:.0f} samples/s, {tm:.0f} MB"
          f" | ratio {es / ts:.2f}x samples/s, {em / tm:.2f}x memory")
    # per CPU-second of a rank (user + system time): what a loaded, shared machine still measures
    print(f"{n} rank(s), per CPU-second of rank 0: ember {ec:.0f} | peer {tc:.0f} samples | ratio {ec / tc:.2f}x")
PY
rm -f "$out"
