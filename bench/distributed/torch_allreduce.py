"""bench/distributed/torch_allreduce.py - PyTorch's Gloo process group on the measurement of
bench/distributed/allreduce.lua: all_reduce (sum, float32, in place), broadcast or all_to_all
(all_to_all_single) from 4 KB to
max_bytes, rounds of back-to-back calls of ~30 ms each, the median round; rank 0 prints one
JSON line per size. Started by torchrun: torchrun --nproc-per-node 2 torch_allreduce.py
[rounds] [max_bytes] [all_reduce|broadcast|all_to_all]"""
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
outbuf = torch.zeros(max_bytes // 4) if op == "all_to_all" else None
factors = {"all_reduce": 2 * (size - 1) / size, "broadcast": 1.0, "all_to_all": (size - 1) / size}
if op not in factors:
    sys.exit(f"torch_allreduce.py: unknown collective {op} (all_reduce, broadcast or all_to_all)")
nbytes = 4096
while nbytes <= max_bytes:
    t = buf[: nbytes // 4]
    o = outbuf[: nbytes // 4] if outbuf is not None else None
    call = {"all_reduce": lambda x: dist.all_reduce(x), "broadcast": lambda x: dist.broadcast(x, 0),
            "all_to_all": lambda x: dist.all_to_all_single(o, x)}[op]
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
    factor = factors[op]
    if rank == 0:
        print(json.dumps({"impl": "torch_gloo", "op": op, "ranks": size, "bytes": nbytes, "us": sec * 1e6,
                          "algbw": algbw, "busbw": algbw * factor, "calls": calls}), flush=True)
    nbytes *= 4
dist.destroy_process_group()
