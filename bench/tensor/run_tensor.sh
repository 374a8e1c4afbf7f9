#!/usr/bin/env bash
# bench/tensor/run_tensor.sh - ember's tensor benchmarks side by side with PyTorch, with the
# machine's own limits beside them (see bench/README.md for what each figure means).
#
#   bench/tensor/run_tensor.sh [-t threads] [-r rounds] [-k reps_per_round] [-w warmup]
#
# Builds what is missing (ember host in $BUILD_DIR, default build/; the C references
# stream and blas_gemm), then runs, round after round, ember (bench/tensor/tensor_ops.lua),
# PyTorch (bench/tensor/torch_tensor_ops.py), STREAM (bench/cpu/stream.c) and OpenBLAS
# (bench/cpu/blas_gemm.c), alternating which of ember and PyTorch goes first, so that noise
# from a shared machine falls on both. All run with the same thread count. Medians are
# taken over rounds x reps_per_round timed calls (warm-up calls excluded).
# Prints a table and one JSON line ("tensor_bench": {...}) with every figure.
# Raw per-call times are kept in $BUILD_DIR/bench-results/.
#
# PyTorch comes from .venv-bench/ (scripts/setup-bench.sh installs it) or, failing that,
# from the python in $PYTHON / python3 if it imports torch.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"

threads=2 rounds=5 reps=3 warmup=2
usage() {
  echo "usage: bench/tensor/run_tensor.sh [-t threads] [-r rounds] [-k reps_per_round] [-w warmup]" >&2
  exit 2
}
while getopts "t:r:k:w:h" flag; do
  case "$flag" in
    t) threads="$OPTARG" ;;
    r) rounds="$OPTARG" ;;
    k) reps="$OPTARG" ;;
    w) warmup="$OPTARG" ;;
    *) usage ;;
  esac
done
for v in "$threads" "$rounds" "$reps"; do [[ "$v" =~ ^[1-9][0-9]*$ ]] || usage; done
[[ "$warmup" =~ ^[0-9]+$ ]] || usage

build="${BUILD_DIR:-build}"
[[ "$build" = /* ]] || build="$root/$build"
jobs="${BUILD_JOBS:-2}"

# ---------------------------------------------------------------- build
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
build_step() {   # run quietly; show the log when it fails
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    echo "run_tensor: build step failed: $*" >&2
    exit 1
  fi
}
[[ -f "$build/CMakeCache.txt" ]] || build_step cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release
build_step cmake --build "$build" -j "$jobs" --target ember_host
# The C references: targets of the top build once it has add_subdirectory(bench),
# otherwise a standalone build of bench/ inside the build folder.
if [[ -d "$build/bench/CMakeFiles" ]]; then
  build_step cmake --build "$build" -j "$jobs" --target bench_stream bench_blas_gemm
  refs="$build/bench"
else
  refs="$build/bench-standalone"
  [[ -f "$refs/CMakeCache.txt" ]] || build_step cmake -S "$root/bench" -B "$refs" -DCMAKE_BUILD_TYPE=Release
  build_step cmake --build "$refs" -j "$jobs"
fi

python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x "$root/.venv-bench/bin/python" ]]; then python="$root/.venv-bench/bin/python"; else python=python3; fi
fi
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "run_tensor: $python cannot import torch; run scripts/setup-bench.sh first" >&2
  exit 1
fi

# ---------------------------------------------------------------- run
# One knob for everyone: ember reads EMBER_NUM_THREADS (and sets OpenBLAS from it), the
# torch script calls torch.set_num_threads, the C references take -t; the OpenMP and BLAS
# variables keep any library from starting a pool of another size.
export EMBER_NUM_THREADS="$threads" OMP_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads" \
       MKL_NUM_THREADS="$threads"
# The same OpenMP wait policy for every program: ember's host sets passive itself (threads
# sleep between parallel regions, which a shared machine needs); PyTorch and the C
# references get it too, so that no side wins or loses by its spinning. Override to compare.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

# blas_gemm must run the same OpenBLAS kernels as ember. The ember host picks OpenBLAS's
# core type itself when OPENBLAS_CORETYPE is unset (bindings/ember/blas_env.c), so ask it which
# kernels it ended up with and give blas_gemm the same; a user's OPENBLAS_CORETYPE reaches
# both unchanged.
ember_blas="$("$build/ember" -e 'print(require("ffi").string(require("ember").C.em_blas_config()))' 2>/dev/null || true)"
blas_core="${OPENBLAS_CORETYPE:-$(awk '{for (i = 2; i <= NF; i++) if ($i ~ /^MAX_THREADS=/) print $(i - 1)}' <<<"$ember_blas")}"
run_blas_gemm() {
  if [[ -n "$blas_core" ]]; then
    OPENBLAS_CORETYPE="$blas_core" "$refs/blas_gemm" -t "$threads" -r "$reps" -w "$warmup" >>"$raw"
  else
    "$refs/blas_gemm" -t "$threads" -r "$reps" -w "$warmup" >>"$raw"
  fi
}

mkdir -p "$build/bench-results"
raw="$build/bench-results/tensor-$(date +%Y%m%d-%H%M%S).jsonl"
: >"$raw"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"

run_ember() {
  # An op the library lacks prints an "error" line; a crash of the whole script is noted
  # and the round goes on.
  if ! "$build/ember" bench/tensor/tensor_ops.lua -t "$threads" -r "$reps" -w "$warmup" >>"$raw"; then
    echo "{\"impl\":\"ember\",\"op\":\"*\",\"error\":\"ember bench/tensor/tensor_ops.lua exited with an error (see above)\"}" >>"$raw"
  fi
}
run_torch() { "$python" bench/tensor/torch_tensor_ops.py -t "$threads" -r "$reps" -w "$warmup" >>"$raw"; }

echo "run_tensor: $rounds rounds x $reps reps, $threads threads, load average $load_before" >&2
for ((r = 1; r <= rounds; r++)); do
  echo "run_tensor: round $r/$rounds" >&2
  if ((r % 2)); then run_ember; run_torch; else run_torch; run_ember; fi
  "$refs/stream" -t "$threads" -r "$reps" -w "$warmup" >>"$raw"
  run_blas_gemm
done
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

# ---------------------------------------------------------------- report
python3 - "$raw" "$threads" "$rounds" "$reps" "$load_before" "$load_after" "$ember_blas" <<'EOF'
import json, statistics, sys

raw, threads, rounds, reps, load_before, load_after, ember_blas = sys.argv[1:]
times, meta, errors = {}, {}, {}
for line in open(raw):
    d = json.loads(line)
    key = (d['impl'], d['op'])
    if 'error' in d:
        errors.setdefault(key, d['error'])
        continue
    times.setdefault(key, []).extend(d['times_ms'])
    meta[key] = d

def median(impl, op):
    t = times.get((impl, op))
    return statistics.median(t) if t else None

def rate(impl, op, field):   # GB/s for bytes, GFLOP/s for flops (1e9 per second)
    m, d = median(impl, op), meta.get((impl, op))
    return d[field] / m / 1e6 if m and d and d[field] else None

stream = {k: rate('stream', k, 'bytes') for k in ('copy', 'scale', 'add', 'triad', 'read')}
blas = rate('openblas', 'matmul', 'flops')
blas_config = meta.get(('openblas', 'matmul'), {}).get('config', '')

# What each op is held against: the STREAM kernel that moves the same arrays the same
# way, or OpenBLAS's sgemm for matmul.
bounds = {'add': ('stream add', stream['add'], 'bytes'),
          'add_out': ('stream add', stream['add'], 'bytes'),
          'add_': ('stream add', stream['add'], 'bytes'),
          'sum': ('stream read', stream['read'], 'bytes'),
          'softmax': ('stream copy', stream['copy'], 'bytes'),
          'matmul': ('openblas sgemm', blas, 'flops')}

def fmt(v, spec='%.2f'):
    return spec % v if v is not None else '-'

ops, rows = {}, []
for op in ('add', 'add_out', 'add_', 'sum', 'softmax', 'matmul'):
    bound_name, bound, field = bounds[op]
    e, t = median('ember', op), median('torch', op)
    er, tr = rate('ember', op, field), rate('torch', op, field)
    err = errors.get(('ember', op)) or errors.get(('ember', '*'))
    ops[op] = {'ember_ms': e, 'torch_ms': t, 'ratio': e / t if e and t else None,
               'ember_rate': er, 'torch_rate': tr,
               'rate_unit': 'GB/s' if field == 'bytes' else 'GFLOP/s',
               'bound': bound_name, 'bound_rate': bound,
               'ember_frac': er / bound if er and bound else None,
               'torch_frac': tr / bound if tr and bound else None,
               'ember_samples': len(times.get(('ember', op), [])),
               'torch_samples': len(times.get(('torch', op), [])),
               'ember_call': meta.get(('ember', op), {}).get('call')}
    if e is None and err:
        ops[op]['ember_error'] = err
    rows.append(op)

hdr = '%-8s %9s %9s %6s %8s %8s %-8s %-14s %8s %6s %6s'
print(hdr % ('op', 'ember ms', 'torch ms', 'e/t', 'ember', 'torch', 'unit', 'bound', 'bound',
             'e/bnd', 't/bnd'))
for op in rows:
    o = ops[op]
    print(hdr % (op, fmt(o['ember_ms'], '%.3f'), fmt(o['torch_ms'], '%.3f'), fmt(o['ratio']),
                 fmt(o['ember_rate'], '%.1f'), fmt(o['torch_rate'], '%.1f'), o['rate_unit'],
                 o['bound'], fmt(o['bound_rate'], '%.1f'), fmt(o['ember_frac']),
                 fmt(o['torch_frac'])))
print('rates: GB/s (bytes counted as STREAM does: add 3 x 64 MiB, sum 64 MiB, softmax 2 x 64 MiB)'
      ' or GFLOP/s (matmul 2 x 1024^3); e/t = ember time / torch time (> 1: ember slower)')
print('stream (GB/s, %s threads, 64 MiB arrays): ' % threads +
      ', '.join('%s %s' % (k, fmt(v, '%.1f')) for k, v in stream.items()))
print('openblas sgemm 1024: %s GFLOP/s (%s; ember runs %s)' % (fmt(blas, '%.1f'), blas_config,
      ember_blas or 'unknown'))
if ('ember', '*') in errors:
    print('ember: not measured: ' + errors[('ember', '*')])
for op, o in ops.items():
    if 'ember_error' in o and ('ember', op) in errors:
        print('ember %s: not measured: %s' % (op, o['ember_error'].splitlines()[0][:160]))
if ' Prescott ' in ' %s ' % (blas_config + ' ' + ember_blas):
    flags = open('/proc/cpuinfo').read()
    if 'avx2' in flags:
        print('note: OpenBLAS picked its generic Prescott kernels on a CPU with AVX2/AVX-512 '
              '(it does not recognise this CPU); OPENBLAS_CORETYPE=SkylakeX (or Haswell) in the '
              'environment selects the right ones for ember and blas_gemm alike')
if ember_blas and blas_config and ember_blas != blas_config:
    print('warning: blas_gemm and ember ran different OpenBLAS configurations')
print('load average before %s, after %s; raw times: %s' % (load_before, load_after, raw))

torch_meta = next((d for (i, _), d in meta.items() if i == 'torch'), {})
ember_meta = next((d for (i, _), d in meta.items() if i == 'ember'), {})
print(json.dumps({'tensor_bench': {
    'threads': int(threads), 'rounds': int(rounds), 'reps_per_round': int(reps),
    'ember_version': ember_meta.get('version'), 'torch_version': torch_meta.get('version'),
    'stream_gbs': stream, 'openblas_gflops': blas, 'openblas_config': blas_config,
    'ember_blas_config': ember_blas,
    'load_before': load_before, 'load_after': load_after, 'ops': ops, 'raw': raw}},
    separators=(',', ':')))
EOF
