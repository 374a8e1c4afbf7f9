#!/usr/bin/env python3
"""Exports an ember training checkpoint of the Fashion-MNIST MLP or CNN to a TorchServe model
archive, for bench/serve/compare.sh: the same weights (ember saves PyTorch's state_dict
names and layouts: examples/load_in_pytorch.py), traced to TorchScript, archived with
bench/serve/ts_handler.py.

    python3 bench/serve/torchserve_export.py runs/fashion_mnist_mlp/checkpoints mlp STORE_DIR
    python3 bench/serve/torchserve_export.py ... --check BODY.json ANSWER.json

--check compares the exported model's logits on a KServe request body with ember serve's
answer to the same body (exits 1 when they differ by more than 1e-4)."""
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors import safe_open
from torch import nn


def model_of(kind):
    # the pipelines' `model:` lists as nn.Sequential: the same indices, so the same names
    if kind == "mlp":  # pipelines/fashion_mnist_mlp.yaml
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    if kind == "cnn":  # pipelines/fashion_mnist_cnn.yaml
        return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))
    sys.exit(f"unknown model kind '{kind}' (mlp or cnn)")


def load(path, kind):
    if os.path.isdir(path):
        with open(os.path.join(path, "latest")) as f:
            name = f.read().strip()
        path = name if os.path.isabs(name) else os.path.join(path, name)
    sd = {}
    with safe_open(path, framework="pt") as f:
        for k in f.keys():
            if k.startswith("model/"):
                sd[k[len("model/"):]] = f.get_tensor(k)
            elif "/" not in k:
                sd[k] = f.get_tensor(k)
    model = model_of(kind)
    model.load_state_dict(sd)  # strict: every name and shape must match
    return model.eval()


def main():
    args = sys.argv[1:]
    check = None
    if "--check" in args:
        i = args.index("--check")
        check = args[i + 1:i + 3]
        args = args[:i]
    ckpt, kind, store = args
    model = load(ckpt, kind)
    name = f"fmnist_{kind}"
    if check:
        with open(check[0]) as f:
            inp = json.load(f)["inputs"][0]
        with open(check[1]) as f:
            want = torch.tensor(json.load(f)["outputs"][0]["data"])
        with torch.no_grad():
            got = model(torch.tensor(inp["data"], dtype=torch.float32).reshape(inp["shape"])).flatten()
        diff = (got - want).abs().max().item()
        print(f"{name}: PyTorch's logits vs ember serve's: max difference {diff:.2e}")
        sys.exit(0 if diff <= 1e-4 else 1)
    os.makedirs(store, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        traced = torch.jit.trace(model, torch.zeros(1, 1, 28, 28))
        pt = os.path.join(tmp, "model.pt")
        traced.save(pt)
        handler = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ts_handler.py")
        subprocess.run(["torch-model-archiver", "--model-name", name, "--version", "1", "--serialized-file", pt,
                        "--handler", handler, "--export-path", store, "--force"], check=True)
    print(f"{store}/{name}.mar")


if __name__ == "__main__":
    main()
