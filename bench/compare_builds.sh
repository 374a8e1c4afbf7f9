#!/usr/bin/env bash
# bench/compare_builds.sh OLD_BUILD NEW_BUILD [-r rounds] [-s pagerank_scale] - has a change
# made ember slower? Runs two builds of ember (two commits, or two configurations) side by
# side, interleaved and alternating who goes first, on the two end-to-end jobs that exercise
# most of libember:
#   mlp       pipelines/fashion_mnist_mlp.yaml, 1 epoch, batches assembled in process:
#             train_samples_per_s
#   pagerank  pipelines/pagerank_kron.yaml at scale 20 (16.8M arcs), 20 Jacobi iterations
#             with tol 0: edges_per_second of the iterations, and the build seconds
# and prints each figure's median per build and the ratio NEW / OLD (> 1: NEW is faster,
# for the build seconds < 1 is faster). Both builds use the same threads (2), data and
# environment; run it once on a quiet machine and once beside a busy neighbour
# (e.g. `stress-ng --cpu 1` or another training job).
#
#   git worktree add /tmp/old HEAD~1 && (cd /tmp/old && scripts/setup.sh)
#   bench/compare_builds.sh /tmp/old/build build -r 5
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
[[ $# -ge 2 ]] || { sed -n '2,16p' "$0" >&2; exit 2; }
old="$1" new="$2"
shift 2
rounds=5 scale=20
while getopts "r:s:" flag; do
  case "$flag" in
    r) rounds="$OPTARG" ;;
    s) scale="$OPTARG" ;;
    *) exit 2 ;;
  esac
done
for b in "$old" "$new"; do
  [[ -x "$b/ember" ]] || { echo "compare_builds: $b/ember is missing (build it first)" >&2; exit 1; }
done

raw="$(mktemp)"
trap 'rm -f "$raw"' EXIT
run() {   # label build job
  local out
  case "$3" in
    mlp) out="$(EMBER_NUM_THREADS=2 "$2/ember" run pipelines/fashion_mnist_mlp.yaml epochs=1 data.workers=0 \
             checkpoint.dir=null log.dir=null log.progress=none 2>/dev/null)" ;;
    pagerank) out="$(EMBER_NUM_THREADS=2 "$2/ember" run pipelines/pagerank_kron.yaml graph.generate.scale="$scale" \
             pagerank.tol=0 pagerank.max_iter=20 threads=2 2>/dev/null)" ;;
  esac
  printf '{"build":"%s","job":"%s","result":%s}\n' "$1" "$3" "$out" >>"$raw"
}
echo "compare_builds: $rounds rounds, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for ((r = 1; r <= rounds; r++)); do
  for job in mlp pagerank; do
    if ((r % 2)); then run old "$old" "$job"; run new "$new" "$job"
    else run new "$new" "$job"; run old "$old" "$job"; fi
  done
  echo "compare_builds: round $r/$rounds done" >&2
done
echo "compare_builds: load average after $(cut -d' ' -f1-3 /proc/loadavg)" >&2

python3 - "$raw" "$old" "$new" <<'EOF'
import json, statistics, sys
raw, old, new = sys.argv[1:]
figures = {('mlp', 'train_samples_per_s'): 'MLP training, samples/s',
           ('pagerank', 'edges_per_second'): 'PageRank iterations, edges/s',
           ('pagerank', 'build_seconds'): 'PageRank graph build, s'}
vals = {}
for line in open(raw):
    d = json.loads(line)
    for (job, key) in figures:
        if d['job'] == job:
            vals.setdefault((job, key, d['build']), []).append(float(d['result'][key]))
print(f"old: {old}\nnew: {new}")
print(f"{'figure':32} {'old median':>14} {'new median':>14} {'new/old':>8}   runs (old; new)")
for (job, key), label in figures.items():
    o, n = vals[(job, key, 'old')], vals[(job, key, 'new')]
    mo, mn = statistics.median(o), statistics.median(n)
    runs = ' '.join(f'{v:.4g}' for v in o) + '; ' + ' '.join(f'{v:.4g}' for v in n)
    print(f"{label:32} {mo:14.4g} {mn:14.4g} {mn / mo:8.3f}   {runs}")
EOF
