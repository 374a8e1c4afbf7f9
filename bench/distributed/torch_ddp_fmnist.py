#!/usr/bin/env python3
"""bench/distributed/torch_ddp_fmnist.py - the peer of bench/distributed/ddp_fmnist.lua: PyTorch
DistributedDataParallel (gloo) on the Fashion-MNIST MLP or CNN of
../shared/bench/torch_fmnist.py, the same batch per rank, optimizer and timed loop
(batch gather + forward + backward + step, after warm-up steps), each rank on its shard,
reshuffled per epoch. One process per rank, started by bench/distributed/run.sh with RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT set; with WORLD_SIZE=1 it runs without DDP (the
baseline of the scaling efficiency). Rank 0 prints one JSON line.
  torch_ddp_fmnist.py mlp|cnn steps warmup batch threads [paired]
With `paired` (several ranks only), blocks of synchronised steps alternate with blocks of
no_sync steps, as bench/distributed/ddp_overhead.lua does for ember: steps counts the blocks,
warmup the steps per block."""
import gzip, json, os, struct, sys, time
import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

kind = sys.argv[1]
steps, warmup, bs, threads = (int(a) for a in sys.argv[2:6])
torch.set_num_threads(threads)
rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
if world > 1:
    dist.init_process_group("gloo", rank=rank, world_size=world)

D = "/usr/share/datasets/fashion-mnist/"
def idx(path):
    with gzip.open(D + path) as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic == 2051:
        r, c = struct.unpack(">II", data[8:16])
        return np.frombuffer(data, np.uint8, offset=16).reshape(n, r * c)
    return np.frombuffer(data, np.uint8, offset=8)

xtr = (torch.tensor(idx("train-images-idx3-ubyte.gz"), dtype=torch.float32) / 255.0 - 0.2860) / 0.3530
ytr = torch.tensor(idx("train-labels-idx1-ubyte.gz"), dtype=torch.int64)
torch.manual_seed(0)
if kind == "mlp":
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    shape = (-1, 784)
else:
    model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    shape = (-1, 1, 28, 28)
net = nn.parallel.DistributedDataParallel(model) if world > 1 else model
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
n = xtr.shape[0] // world * world
paired = len(sys.argv) > 6 and sys.argv[6] == "paired" and world > 1


def batches():
    epoch = 0
    while True:
        epoch += 1
        g = torch.Generator().manual_seed(epoch)
        mine = torch.randperm(n, generator=g)[rank::world]
        for i in range(0, len(mine) - bs + 1, bs):
            ids = mine[i:i + bs]
            yield xtr[ids].view(shape), ytr[ids]


if paired:
    import contextlib
    it = batches()

    def one(sync):
        x, y = next(it)
        opt.zero_grad(set_to_none=True)
        with (contextlib.nullcontext() if sync else net.no_sync()):
            F.cross_entropy(net(x), y).backward()
        opt.step()

    for _ in range(10):
        one(True)
    times = {True: [], False: []}
    for k in range(2 * steps):
        sync = k % 2 == 0
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(warmup):
            one(sync)
        if sync:
            dist.barrier()
        times[sync].append((time.perf_counter() - t0) / warmup)
    ts, tn = sorted(times[True])[len(times[True]) // 2], sorted(times[False])[len(times[False]) // 2]
    if rank == 0:
        print(json.dumps({"impl": "torch", "bench": "ddp_overhead", "model": kind, "ranks": world,
                          "step_sync_ms": ts * 1e3, "step_nosync_ms": tn * 1e3, "sync_overhead": ts / tn - 1,
                          "paired_efficiency": tn / ts}))
    dist.destroy_process_group()
    sys.exit(0)

done, epoch, t0 = 0, 0, None
while done < steps + warmup:
    epoch += 1
    g = torch.Generator().manual_seed(epoch)
    mine = torch.randperm(n, generator=g)[rank::world]
    for i in range(0, len(mine) - bs + 1, bs):
        if done == warmup:
            if world > 1:
                dist.barrier()
            t0 = time.perf_counter()
        ids = mine[i:i + bs]
        x, y = xtr[ids].view(shape), ytr[ids]
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        opt.step()
        done += 1
        if done == steps + warmup:
            break
if world > 1:
    dist.barrier()
dt = time.perf_counter() - t0
if rank == 0:
    print(json.dumps({"impl": "torch", "torch": torch.__version__, "model": kind, "ranks": world,
                      "threads": torch.get_num_threads(), "batch_per_rank": bs, "steps": steps, "seconds": dt,
                      "step_ms": dt / steps * 1e3, "global_samples_per_s": steps * bs * world / dt}))
if world > 1:
    dist.destroy_process_group()
