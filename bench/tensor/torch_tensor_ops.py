"""PyTorch side of the tensor benchmarks (bench/tensor/run_tensor.sh runs it beside
bench/tensor/tensor_ops.lua, round by round, and compares medians).

Same ops, sizes, dtypes, warm-up and timing rules as the ember script:
  add       c = a + b, two 16M-element float32 tensors, result allocated every time
  add_out   torch.add(a, b, out=c), c allocated once
  add_      a.add_(b), in place
  sum       a.sum() over 16M float32
  softmax   torch.softmax(x, -1), x 4096 x 4096 float32
  matmul    a @ b, 1024 x 1024 float32
Each op runs `warmup` untimed calls, then `reps` timed ones (time.perf_counter_ns, a
monotonic clock). A result is dropped after its timing stops, so freeing is not timed (the
ember script frees its results outside the timing too).

Usage: python bench/tensor/torch_tensor_ops.py [-t threads] [-r reps] [-w warmup] [-o op,op]
Prints one JSON line per op: {"impl":"torch","op":...,"times_ms":[...], ...}.
"""
import argparse
import json
import sys
import time

import torch

N_ELEM = 16 * 1024 * 1024   # 16M float32 = 64 MiB per tensor
SOFTMAX_ROWS = SOFTMAX_COLS = 4096
MATMUL_N = 1024
F32 = 4


def timed(fn, reps, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        r = fn()
        t1 = time.perf_counter_ns()
        del r                    # freeing is outside the timing, as in the ember script
        times.append((t1 - t0) / 1e6)
    return times


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('-t', '--threads', type=int, default=2)
    p.add_argument('-r', '--reps', type=int, default=10)
    p.add_argument('-w', '--warmup', type=int, default=2)
    p.add_argument('-o', '--ops', default='add,add_out,add_,sum,softmax,matmul')
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    ops = args.ops.split(',')

    a = torch.randn(N_ELEM, dtype=torch.float32)
    b = torch.randn(N_ELEM, dtype=torch.float32)
    c = torch.empty(N_ELEM, dtype=torch.float32)
    x = torch.randn(SOFTMAX_ROWS, SOFTMAX_COLS, dtype=torch.float32)
    ma = torch.randn(MATMUL_N, MATMUL_N, dtype=torch.float32)
    mb = torch.randn(MATMUL_N, MATMUL_N, dtype=torch.float32)

    nbytes = N_ELEM * F32
    table = {
        # op: (function, bytes moved as STREAM counts them, flops)
        'add': (lambda: a + b, 3 * nbytes, N_ELEM),
        'add_out': (lambda: torch.add(a, b, out=c), 3 * nbytes, N_ELEM),
        'add_': (lambda: a.add_(b), 3 * nbytes, N_ELEM),
        'sum': (lambda: a.sum(), nbytes, N_ELEM),
        'softmax': (lambda: torch.softmax(x, -1), 2 * SOFTMAX_ROWS * SOFTMAX_COLS * F32, 0),
        'matmul': (lambda: ma @ mb, 0, 2 * MATMUL_N ** 3),
    }
    unknown = [o for o in ops if o not in table]
    if unknown:
        sys.exit(f"torch_tensor_ops: unknown op(s) {unknown}, expected some of {list(table)}")

    # add_ keeps adding b into a; sum then sees a with a larger spread, which costs the same.
    for op in ops:
        fn, nb, flops = table[op]
        times = timed(fn, args.reps, args.warmup)
        print(json.dumps({'impl': 'torch', 'op': op, 'threads': torch.get_num_threads(),
                          'bytes': nb, 'flops': flops, 'version': torch.__version__,
                          'times_ms': [round(t, 4) for t in times]}), flush=True)


if __name__ == '__main__':
    main()
