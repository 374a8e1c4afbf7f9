#!/usr/bin/env python3
"""bench/distributed/torch_alltoall.py [rounds] [max_bytes] [min_bytes] - PyTorch's gloo process
group doing what bench/distributed/alltoall.lua does with ember: torch.distributed.all_to_all_single
on float32 tensors of 4 KB .. 256 MB per rank, even (all_to_all) and with the same uneven splits
(all_to_all_v: rank s sends rank d a share proportional to (s + d) % n + 1), timed the same way
(rounds of ~30 ms of back-to-back calls, the median). Started torchrun-style (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT); rank 0 prints one JSON line per size and kind."""
import json
import sys
import time

import torch
import torch.distributed as dist

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
max_bytes = int(sys.argv[2]) if len(sys.argv) > 2 else 256 << 20
min_bytes = int(sys.argv[3]) if len(sys.argv) > 3 else 4096
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, n = dist.get_rank(), dist.get_world_size()
inbuf, outbuf = torch.ones(max_bytes // 4), torch.zeros(max_bytes // 4)


def split(s, d, total):
    return total * ((s + d) % n + 1) // (n * (n + 1) // 2)


def measure(kind, nbytes):
    elems = nbytes // 4
    if kind == "all_to_all":
        k = elems // n
        i, o = inbuf[: k * n], outbuf[: k * n]

        def call():
            dist.all_to_all_single(o, i)
    else:
        ic = [split(rank, d, elems) for d in range(n)]
        oc = [split(d, rank, elems) for d in range(n)]
        i, o = inbuf[: sum(ic)], outbuf[: sum(oc)]

        def call():
            dist.all_to_all_single(o, i, output_split_sizes=oc, input_split_sizes=ic)
    call()
    t0 = time.perf_counter()
    call()
    one = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    dist.all_reduce(one, op=dist.ReduceOp.MAX)
    calls = max(1, min(200, int(0.03 / one.item())))
    times = []
    for _ in range(rounds):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - t0) / calls)
    times.sort()
    sec = times[rounds // 2]
    algbw = nbytes / sec / 1e9
    if rank == 0:
        print(json.dumps({"impl": "torch_gloo", "op": kind, "ranks": n, "bytes": nbytes, "us": round(sec * 1e6, 2),
                          "algbw": round(algbw, 3), "busbw": round(algbw * (n - 1) / n, 3), "calls": calls}),
              flush=True)


nbytes = min_bytes
while nbytes <= max_bytes:
    measure("all_to_all", nbytes)
    measure("all_to_all_v", nbytes)
    nbytes *= 4
dist.destroy_process_group()
