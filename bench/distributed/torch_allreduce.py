"""bench/distributed/torch_allreduce.py - PyTorch's Gloo process group on the measurement of
bench/distributed/allreduce.lua: all_reduce (sum, float32, in place) or broadcast from 4 KB to
max_bytes, rounds of back-to-back calls of ~30 ms each, the median round; rank 0 prints one
JSON line per size. Started by torchrun: torchrun --nproc-per-node 2 torch_allreduce.py
[rounds] [max_bytes] [all_reduce|broadcast]"""
import json
import sys
import time

import torch
import torch.distributed as dist

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
max_bytes = int(sys.argv[2]) if len(sys.argv) > 2 else 256 << 20
op = sys.argv[3] if len(sys.argv) > 3 else "all_reduce"
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, size = dist.get_rank(), dist.get_world_size()
buf = torch.ones(max_bytes // 4)
call = (lambda t: dist.all_reduce(t)) if op == "all_reduce" else (lambda t: dist.broadcast(t, 0))
nbytes = 4096
while nbytes <= max_bytes:
    t = buf[: nbytes // 4]
    call(t)
    t0 = time.perf_counter()
    call(t)
    one = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    dist.all_reduce(one, op=dist.ReduceOp.MAX)
    calls = max(1, min(200, int(0.03 / one.item())))
    times = []
    for _ in range(rounds):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(calls):
            call(t)
        times.append((time.perf_counter() - t0) / calls)
    times.sort()
    sec = times[rounds // 2]
    algbw = nbytes / sec / 1e9
    factor = 2 * (size - 1) / size if op == "all_reduce" else 1.0
    if rank == 0:
        print(json.dumps({"impl": "torch_gloo", "op": op, "ranks": size, "bytes": nbytes, "us": sec * 1e6,
                          "algbw": algbw, "busbw": algbw * factor, "calls": calls}), flush=True)
    nbytes *= 4
dist.destroy_process_group()
