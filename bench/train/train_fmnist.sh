#!/usr/bin/env bash
# bench/train/train_fmnist.sh - Fashion-MNIST training throughput, ember side by side with
# PyTorch (see bench/README.md, "Training").
#
#   bench/train/train_fmnist.sh [-m mlp,cnn] [-r rounds] [-e epochs] [-t threads] [-k] [-b]
#
# -k also runs ember with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset in its own command
# (ember then picks the kernels for this CPU itself and verifies them: `ember info`), beside
# the run with the machine's environment as it is; the kernels of each are printed.
# -b also runs ember with `amp=bfloat16` (matmuls and convolutions in bfloat16 with float32
# accumulation, on CPUs with AVX-512 BF16), reported beside the float32 figures with its accuracy.
#
# Each round runs, for each model, ember's pipeline (pipelines/fashion_mnist_<m>.yaml, no
# checkpoints, no metrics files) and ../shared/bench/torch_fmnist.py, each at `threads`
# threads and at 1 thread, alternating who goes first so that load from other users of a
# shared machine falls on both. Same models, batch 128, SGD with momentum 0.9, data in
# memory, full batches only, all epochs timed (evaluation excluded on both sides). Like the
# PyTorch script, which indexes tensors in memory, ember assembles batches in the training
# process (data.workers=0); the ZeroMQ readers are measured by bench/data/run.sh.
# The headline ratio is ember at `threads` threads over PyTorch at the better of its 1- and
# `threads`-thread medians (PyTorch on 2 busy cores is often faster on one thread); the
# same-thread and best-vs-best ratios are printed too. Then one JSON line
# {"train_bench": {...}}; raw lines are kept in $BUILD_DIR/bench-results/.
#
# Environment: BUILD_DIR (default build/), BUILD_JOBS (2), PYTHON (a python that imports
# torch; default .venv-bench/bin/python, else python3), TORCH_FMNIST (the peer script;
# default ../shared/bench/torch_fmnist.py next to the repository).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"

models=mlp,cnn rounds=3 epochs=1 threads=2 own_kernels=0 bf16=0
usage() {
  echo "usage: bench/train/train_fmnist.sh [-m mlp,cnn] [-r rounds] [-e epochs] [-t threads] [-k] [-b]" >&2
  exit 2
}
while getopts "m:r:e:t:kbh" flag; do
  case "$flag" in
    k) own_kernels=1 ;;
    b) bf16=1 ;;
    m) models="$OPTARG" ;;
    r) rounds="$OPTARG" ;;
    e) epochs="$OPTARG" ;;
    t) threads="$OPTARG" ;;
    *) usage ;;
  esac
done
for v in "$rounds" "$epochs" "$threads"; do [[ "$v" =~ ^[1-9][0-9]*$ ]] || usage; done
[[ "$models" =~ ^(mlp|cnn)(,(mlp|cnn))*$ ]] || usage

build="${BUILD_DIR:-build}"
[[ "$build" = /* ]] || build="$root/$build"
peer="${TORCH_FMNIST:-$root/../shared/bench/torch_fmnist.py}"
[[ -f "$peer" ]] || { echo "train_fmnist: the PyTorch script $peer is missing (set TORCH_FMNIST)" >&2; exit 1; }

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
fi
cmake --build "$build" -j "${BUILD_JOBS:-2}" --target ember_host >"$log" 2>&1 || { cat "$log" >&2; exit 1; }

python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x "$root/.venv-bench/bin/python" ]]; then python="$root/.venv-bench/bin/python"; else python=python3; fi
fi
"$python" -c 'import torch' 2>/dev/null || {
  echo "train_fmnist: $python cannot import torch; run scripts/setup-bench.sh first" >&2; exit 1; }

mkdir -p "$build/bench-results"
raw="$build/bench-results/train_fmnist-$(date +%Y%m%d-%H%M%S).jsonl"
: >"$raw"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"

# Each side with its own OpenMP wait policy: PyTorch's libgomp spins for a long while,
# ember's host spins briefly when the cores are free as it starts and sleeps at once when
# they are not (bindings/ember/blas_env.c). WAIT_POLICY=passive (or active) imposes one on both.
if [[ -n "${WAIT_POLICY:-}" ]]; then export OMP_WAIT_POLICY="$WAIT_POLICY"; fi

# The kernels ember runs with the machine's environment, and with ember's own choice.
kernels_env="$("$build/ember" info | sed -n 's/^kernels: *//p')"
kernels_own="$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$build/ember" info | sed -n 's/^kernels: *//p')"
echo "train_fmnist: ember's BLAS kernels: $kernels_env (OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset})" >&2
((own_kernels)) && echo "train_fmnist: ember-own runs (OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset): $kernels_own" >&2

# One JSON line per run: {"impl", "model", "threads", "train_samples_per_s", ...}.
run_ember() {   # model threads [own: unset OpenBLAS's kernel variables in this command | bf16: amp=bfloat16]
  local out impl=ember unset=() amp=off
  [[ "${3:-}" == own ]] && { impl=ember-own; unset=(-u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE); }
  [[ "${3:-}" == bf16 ]] && { impl=ember-bf16; amp=bfloat16; }
  if out="$(env "${unset[@]}" EMBER_NUM_THREADS="$2" OMP_NUM_THREADS="$2" OPENBLAS_NUM_THREADS="$2" \
      "$build/ember" run "pipelines/fashion_mnist_$1.yaml" epochs="$epochs" data.workers=0 checkpoint.dir=null log.dir=null \
      log.progress=none amp="$amp" 2>"$log")"; then
    printf '{"impl":"%s","model":"%s","threads":%s,"result":%s}\n' "$impl" "$1" "$2" "$out" >>"$raw"
  else
    echo "train_fmnist: ember failed on $1:" >&2; cat "$log" >&2
  fi
}
run_torch() {   # model threads
  local out
  if out="$(OMP_NUM_THREADS="$2" MKL_NUM_THREADS="$2" "$python" "$peer" "$1" "$epochs" "$2" 128 2>"$log")"; then
    printf '{"impl":"torch","model":"%s","threads":%s,"line":"%s"}\n' "$1" "$2" "$out" >>"$raw"
  else
    echo "train_fmnist: torch failed on $1:" >&2; cat "$log" >&2
  fi
}

echo "train_fmnist: models $models, $rounds rounds, $epochs epoch(s) each, ember at $threads threads," \
  "load average $load_before" >&2
IFS=, read -r -a model_list <<<"$models"
for ((r = 1; r <= rounds; r++)); do
  for m in "${model_list[@]}"; do
    echo "train_fmnist: round $r/$rounds, $m" >&2
    if ((r % 2)); then
      run_ember "$m" "$threads"; ((own_kernels)) && run_ember "$m" "$threads" own; ((bf16)) && run_ember "$m" "$threads" bf16
      run_torch "$m" "$threads"
      [[ "$threads" == 1 ]] || { run_ember "$m" 1; run_torch "$m" 1; }
    else
      [[ "$threads" == 1 ]] || { run_torch "$m" 1; run_ember "$m" 1; }
      run_torch "$m" "$threads"; ((bf16)) && run_ember "$m" "$threads" bf16; ((own_kernels)) && run_ember "$m" "$threads" own
      run_ember "$m" "$threads"
    fi
  done
done
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$raw" "$threads" "$rounds" "$epochs" "$load_before" "$load_after" "$kernels_env" "$kernels_own" <<'EOF'
import json, re, statistics, sys

raw, threads, rounds, epochs, load_before, load_after, kernels_env, kernels_own = sys.argv[1:]
rates, acc, rss, version = {}, {}, {}, None
for line in open(raw):
    d = json.loads(line)
    key = (d['impl'], d['model'], d['threads'])
    if d['impl'] in ('ember', 'ember-own', 'ember-bf16'):
        r = d['result']
        rates.setdefault(key, []).append(r['train_samples_per_s'])
        acc.setdefault(key, []).append(r.get('test_accuracy'))
        rss.setdefault(key, []).append(r.get('peak_rss_mb'))
    else:
        m = re.search(r'train_samples_per_s=(\d+) test_acc=([\d.]+)', d['line'])
        rates.setdefault(key, []).append(float(m.group(1)))
        acc.setdefault(key, []).append(float(m.group(2)))
        version = d['line'].split()[1]

def med(key, table=rates):
    v = [x for x in table.get(key, []) if x is not None]
    return statistics.median(v) if v else None

def fmt(v, spec='%.0f'):
    return spec % v if v is not None else '-'

t = int(threads)
report = {}
hdr = '%-5s %11s %11s %11s %11s %11s %11s %6s %6s %9s %9s'
print(hdr % ('model', 'ember@1', 'ember@%d' % t, 'torch@1', 'torch@%d' % t, 'ember best', 'torch best', 'same',
             'best', 'ember acc', 'torch acc'))
for model in ('mlp', 'cnn'):
    e1, en = med(('ember', model, 1)), med(('ember', model, t))
    t1, tn = med(('torch', model, 1)), med(('torch', model, t))
    if en is None and e1 is None:
        continue
    def best_of(a, b):
        c = [(x, th) for x, th in ((a, 1), (b, t)) if x is not None]
        return max(c) if c else (None, None)
    eb, ebt = best_of(e1, en)
    tb, tbt = best_of(t1, tn)
    same = en / tn if en and tn else None            # the same thread count on both sides
    ratio = en / tb if en and tb else None           # ember at `threads` vs PyTorch at its better count
    best = eb / tb if eb and tb else None
    report[model] = {'ember_samples_per_s': en, 'ember_1thread_samples_per_s': e1, 'ember_best_threads': ebt,
                     'torch_%dthreads_samples_per_s' % t: tn, 'torch_1thread_samples_per_s': t1,
                     'torch_best_samples_per_s': tb, 'torch_best_threads': tbt,
                     'ratio': ratio, 'ratio_same_threads': same, 'ratio_best_vs_best': best,
                     'runs': {'%s@%d' % k[::2]: v for k, v in rates.items() if k[1] == model},
                     'ember_test_accuracy': med(('ember', model, t), acc),
                     'torch_test_accuracy': med(('torch', model, tbt), acc),
                     'ember_peak_rss_mb': med(('ember', model, t), rss)}
    print(hdr % (model, fmt(e1), fmt(en), fmt(t1), fmt(tn), fmt(eb), fmt(tb), fmt(same, '%.2f'),
                 fmt(best, '%.2f'), fmt(report[model]['ember_test_accuracy'], '%.4f'),
                 fmt(report[model]['torch_test_accuracy'], '%.4f')))
    print('%-5s ratio (ember@%d / torch at its better of 1 and %d threads): %s' % (model, t, t, fmt(ratio, '%.2f')))
    own = med(('ember-own', model, t))
    if own is not None:
        report[model]['ember_own_kernels_samples_per_s'] = own
        report[model]['ratio_own_kernels'] = own / tb if tb else None
        print('%-5s ember@%d with its own kernel choice: %s samples/s, ratio %s' % (
            model, t, fmt(own), fmt(own / tb if tb else None, '%.2f')))
    bf = med(('ember-bf16', model, t))
    if bf is not None:
        bf_acc = med(('ember-bf16', model, t), acc)
        report[model].update({'ember_bf16_samples_per_s': bf, 'ratio_bf16': bf / tb if tb else None,
                              'ember_bf16_test_accuracy': bf_acc})
        print('%-5s ember@%d in bfloat16 (amp=bfloat16): %s samples/s, ratio %s, test accuracy %s' % (
            model, t, fmt(bf), fmt(bf / tb if tb else None, '%.2f'), fmt(bf_acc, '%.4f')))
print('samples/s: medians of %s runs of %s epoch(s) (60,000 samples each, batch 128); same = ember@%s / torch@%s; '
      'best = the better ember figure / the better PyTorch figure (> 1: ember faster); torch %s'
      % (rounds, epochs, threads, threads, version))
print('BLAS kernels: %s; with OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE unset: %s' % (kernels_env, kernels_own))
print('load average: before %s, after %s (the machine is shared: compare ratios, rerun with -r when high)'
      % (load_before, load_after))
print(json.dumps({'train_bench': {'models': report, 'threads': t, 'rounds': int(rounds), 'epochs': int(epochs),
                                  'torch_version': version, 'blas_kernels': kernels_env,
                                  'blas_kernels_own': kernels_own, 'load_before': load_before, 'load_after': load_after,
                                  'raw': raw}}))
EOF
