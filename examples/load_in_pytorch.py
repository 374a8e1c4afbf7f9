#!/usr/bin/env python3
"""An ember checkpoint in PyTorch: loads the safetensors file that examples/mlp.lua or
examples/cnn.lua wrote into the equivalent torch.nn model (ember saves PyTorch's state_dict
names and layouts, so load_state_dict(strict=True) takes it as is) and evaluates it on the same
Fashion-MNIST test images, normalised the same way. The accuracy printed equals ember's.

    build/ember examples/cnn.lua --epochs 1 --limit 2000
    python3 examples/load_in_pytorch.py runs/examples/cnn      # or .../model.safetensors

Needs torch and safetensors (pip install torch safetensors). Exits 1 if the accuracy differs
from the one ember recorded in the checkpoint.
"""
import gzip
import os
import sys

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from torch import nn

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"   # Debian's dataset-fashion-mnist


class FashionCNN(nn.Module):
    """examples/cnn.lua's FashionCNN, field for field."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = torch.max_pool2d(self.conv1(x).relu(), 2)
        x = torch.max_pool2d(self.conv2(x).relu(), 2)
        return self.fc2(self.fc1(x.flatten(1)).relu())


def make_model(kind):
    if kind == "cnn":
        return FashionCNN()
    if kind == "mlp":   # examples/mlp.lua's nn.Sequential: the same indices, so the same names
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    sys.exit(f"unknown model '{kind}' in the checkpoint's metadata (expected mlp or cnn)")


def read_idx(path, header):
    """An IDX file of unsigned bytes (gzipped): the payload after its header."""
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=header)


def test_set(mean, std, limit):
    images = read_idx(os.path.join(FASHION_MNIST, "t10k-images-idx3-ubyte.gz"), 16).reshape(-1, 1, 28, 28)
    labels = read_idx(os.path.join(FASHION_MNIST, "t10k-labels-idx1-ubyte.gz"), 8).astype(np.int64)
    if limit > 0:
        images, labels = images[:limit], labels[:limit]
    x = (torch.from_numpy(images.astype(np.float32)) / 255 - mean) / std
    return x, torch.from_numpy(labels)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    if os.path.isdir(path):
        path = os.path.join(path, "model.safetensors")
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
    model = make_model(meta.get("model"))
    model.load_state_dict(load_file(path))   # strict: every name and shape must match
    model.eval()

    x, y = test_set(float(meta["normalise_mean"]), float(meta["normalise_std"]), int(meta.get("test_limit", "0")))
    correct = 0
    with torch.no_grad():
        for i in range(0, len(y), 1000):
            correct += (model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum().item()
    accuracy = correct / len(y)
    ember_accuracy = float(meta["test_accuracy"])
    print(f"loaded {path} into {type(model).__name__} ({sum(p.numel() for p in model.parameters())} parameters, "
          f"epoch {meta.get('epoch')})")
    print(f"pytorch test accuracy: {accuracy:.6f} on {len(y)} images")
    print(f"ember test accuracy:   {ember_accuracy:.6f}")
    if abs(accuracy - ember_accuracy) > 1e-6:
        print("the accuracies differ", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
