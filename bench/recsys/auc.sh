#!/bin/sh
# bench/recsys/auc.sh - ROC AUC of ember's pipelines/dlrm_synthetic.yaml against DLRM's own
# DLRM_Net (PyTorch) on the SAME data: bench/recsys/auc_data.lua writes the batches the
# pipeline trains and tests on (its split, its shuffling, in its order) once, to a
# safetensors file; `ember run` trains on them through the pipeline and
# bench/recsys/auc_torch.py trains DLRM_Net on the file: the same samples in the same order,
# the same steps, batch, SGD and learning rate. Only the initial weights differ (each
# framework draws its own), so both run over several seeds and the means are compared; the
# issue's bar is a difference within 0.005.
#   bench/recsys/auc.sh [SEEDS] [key.path=value ...]     (SEEDS: "0 1 2" by default;
#   the overrides go to the pipeline; EMBER=build/ember; DLRM_DIR as bench/recsys/setup.sh)
set -e
cd "$(dirname "$0")/../.."
seeds=${1:-0 1 2}
[ $# -gt 0 ] && shift
ember=${EMBER:-build/ember}
dlrm=$(bench/recsys/setup.sh | tail -1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$ember" bench/recsys/auc_data.lua "$tmp/data.safetensors" "$@"
# the pipeline's model and optimizer, for the peer (the file is checked by ember run --check)
cfg=$("$ember" run pipelines/dlrm_synthetic.yaml --check "$@")
read -r bot top rows lr <<EOF2
$(printf '%s' "$cfg" | python3 -c '
import json, sys
c = json.load(sys.stdin)
a, o = c["model"]["args"], c["optim"]
assert o["name"] == "sgd" and not o.get("momentum") and not o.get("weight_decay"), "the peer runs plain SGD"
rows = a["table_sizes"] if isinstance(a["table_sizes"], list) else [a["table_sizes"]]
bot = a["arch_mlp_bot"] if isinstance(a["arch_mlp_bot"], str) else "-".join(map(str, a["arch_mlp_bot"]))
top = a["arch_mlp_top"] if isinstance(a["arch_mlp_top"], str) else "-".join(map(str, a["arch_mlp_top"]))
print(bot, top, "-".join(map(str, rows)), o["lr"])')
EOF2
for s in $seeds; do
  "$ember" run pipelines/dlrm_synthetic.yaml seed="$s" log.progress=none log.dir=null checkpoint.dir=null "$@" \
    2>/dev/null | sed "s/^{/{\"peer\": \"ember\", \"seed\": $s, /" >> "$tmp/out"
  python3 bench/recsys/auc_torch.py "$dlrm" "$tmp/data.safetensors" --bot "$bot" --top "$top" --rows "$rows" \
    --lr "$lr" --seed "$s" 2>/dev/null | sed "s/^{/{\"seed\": $s, /" >> "$tmp/out"
done
python3 - "$tmp/out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
e = [r['test_roc_auc'] for r in rows if r['peer'] == 'ember']
t = [r['test_roc_auc'] for r in rows if r['peer'] != 'ember']
peer = next(r['peer'] for r in rows if r['peer'] != 'ember')
for r in rows:
    print(f"seed {r['seed']}: {r['peer']:<44} test ROC AUC {r['test_roc_auc']:.4f}")
d = statistics.mean(e) - statistics.mean(t)
print(f"mean over {len(e)} seeds: ember {statistics.mean(e):.4f} | {peer} {statistics.mean(t):.4f}"
      f" | difference {d:+.4f} ({'within' if abs(d) <= 0.005 else 'outside'} 0.005)")
PY
