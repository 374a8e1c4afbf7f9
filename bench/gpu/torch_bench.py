#!/usr/bin/env python3
"""bench/gpu/torch_bench.py: PyTorch's side of the GPU benchmarks, same work and timing
rules as bench/gpu/{train,gemm,elementwise}.lua, one JSON line on stdout.

  torch_bench.py train --model mlp|cnn [--steps 200] [--warmup 20] [--batch 128]
  torch_bench.py gemm [--sizes 4096,8192] [--dtypes float32,float16] [--reps 10]
  torch_bench.py elementwise [--numel 268435456] [--reps 20]
  common: --device cuda|cuda:N|cpu, --small (tiny sizes, for a check without a GPU)

Timing: untimed warm-up calls, then each timed call between two device synchronisations
(torch.cuda.synchronize), the median kept. PyTorch's own defaults are left as they are
(matmul TF32 off, cuDNN TF32 on for convolutions); the line records them.
On an error: {"bench": ..., "impl": "torch", "error": "..."} and exit status 1."""
import argparse
import json
import math
import statistics
import sys
import time


def sync(torch, device):
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def timed(torch, device, warmup, reps, fn):
    for _ in range(warmup):
        fn()
    sync(torch, device)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync(torch, device)
        times.append(1e3 * (time.perf_counter() - t0))
    return times


def model_of(torch, kind):
    nn = torch.nn
    if kind == "mlp":   # pipelines/fashion_mnist_mlp.yaml
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    # pipelines/fashion_mnist_cnn.yaml
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def train(torch, a):
    if a.small:
        a.steps, a.warmup, a.batch = min(a.steps, 5), min(a.warmup, 2), min(a.batch, 16)
    torch.manual_seed(a.seed)
    model = model_of(torch, a.model).to(a.device)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(a.batch, 1, 28, 28, device=a.device)
    y = torch.randint(0, 10, (a.batch,), device=a.device)
    state = {}

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        state["loss"] = loss

    times = sorted(timed(torch, a.device, a.warmup, a.steps, step))
    med = statistics.median(times)
    n = len(times)   # the percentiles as train.lua takes them (1-based ranks floor(n/10), ceil(9n/10))
    return {"model": a.model, "batch": a.batch, "steps": a.steps, "warmup": a.warmup, "median_ms": med,
            "p10_ms": times[max(1, n // 10) - 1], "p90_ms": times[max(1, math.ceil(0.9 * n)) - 1],
            "samples_per_s": a.batch / (med / 1e3), "final_loss": state["loss"].item()}


def gemm(torch, a):
    if a.small:
        a.sizes, a.reps, a.warmup = "128,256", min(a.reps, 3), 1
    results = []
    for dtype in a.dtypes.split(","):
        for size in a.sizes.split(","):
            n = int(size)
            try:
                x = torch.randn(n, n, device=a.device).to(getattr(torch, dtype))
                w = torch.randn(n, n, device=a.device).to(getattr(torch, dtype))
                times = timed(torch, a.device, a.warmup, a.reps, lambda: torch.matmul(x, w))
                ms = statistics.median(times)
                results.append({"n": n, "dtype": dtype, "median_ms": ms, "min_ms": min(times),
                                "tflops": 2 * n ** 3 / (ms / 1e3) / 1e12})
                del x, w
            except Exception as e:  # noqa: BLE001 - one case failing is reported in its entry
                results.append({"n": n, "dtype": dtype, "error": str(e).splitlines()[0]})
    return {"reps": a.reps, "results": results,
            "allow_tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32)}


def elementwise(torch, a):
    if a.small:
        a.numel, a.reps, a.warmup = 1024 * 1024, min(a.reps, 5), 1
    n = a.numel
    x = torch.rand(n, device=a.device)
    y = torch.rand(n, device=a.device)
    z = torch.empty(n, device=a.device)
    cases = [("copy", 8 * n, lambda: z.copy_(x)), ("add", 12 * n, lambda: x + y), ("mul", 12 * n, lambda: x * y)]
    results = {}
    for op, nbytes, fn in cases:
        times = timed(torch, a.device, a.warmup, a.reps, fn)
        ms = statistics.median(times)
        results[op] = {"median_ms": ms, "min_ms": min(times), "gb_per_s": nbytes / (ms / 1e3) / 1e9}
    for op in ("add", "mul"):
        results[op]["of_copy"] = results[op]["gb_per_s"] / results["copy"]["gb_per_s"]
    return {"numel": n, "dtype": "float32", "reps": a.reps, "results": results}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bench", choices=["train", "gemm", "elementwise"])
    p.add_argument("--device", default="cuda")
    p.add_argument("--small", action="store_true")
    p.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sizes", default="4096,8192")
    p.add_argument("--dtypes", default="float32,float16")
    p.add_argument("--reps", type=int, default=None)
    p.add_argument("--numel", type=int, default=256 * 1024 * 1024)
    a = p.parse_args()
    if a.warmup is None:
        a.warmup = {"train": 20, "gemm": 3, "elementwise": 3}[a.bench]
    if a.reps is None:
        a.reps = {"train": 0, "gemm": 10, "elementwise": 20}[a.bench]   # train times --steps
    out = {"bench": a.bench, "impl": "torch", "device": a.device}
    try:
        import torch
        out["version"] = torch.__version__
        if a.device.startswith("cuda"):
            if not torch.cuda.is_available():
                raise RuntimeError("torch %s sees no CUDA device" % torch.__version__)
            out["gpu"] = torch.cuda.get_device_name(a.device)
            out["cudnn_allow_tf32"] = bool(torch.backends.cudnn.allow_tf32)
        out.update({"train": train, "gemm": gemm, "elementwise": elementwise}[a.bench](torch, a))
        if a.small:
            out["small"] = True
    except Exception as e:  # noqa: BLE001 - the line must be written whatever failed
        out["error"] = ("%s: %s" % (type(e).__name__, e)).splitlines()[0]
        print(json.dumps(out), flush=True)
        print("torch_bench.py %s: %s" % (a.bench, out["error"]), file=sys.stderr)
        return 1
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
