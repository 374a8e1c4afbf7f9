#!/usr/bin/env python3
"""The peer of bench/data/loader_bench.lua: PyTorch's DataLoader doing the same work.

Usage: torch_loader_bench.py [raw|jpeg|all] [epochs] [batch] [workers...]
raw:  Fashion-MNIST uint8 [1, 28, 28] + int64 label per sample (a map-style Dataset, the
      default collate), shuffled, batch 128.
jpeg: the training images as JPEG bytes (quality 90, made here with Pillow, held in memory),
      decoded with Pillow (libjpeg-turbo) and randomly cropped to 24x24 with padding 2 and
      flipped with probability 0.5, as torchvision's RandomCrop/RandomHorizontalFlip would.
The consumer only takes the batches. Epoch 0 warms up (worker start); the rest are timed.
Prints one JSON line per configuration.
"""
import gzip, io, json, struct, sys, time
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

ROOT = "/usr/share/datasets/fashion-mnist/"
what = sys.argv[1] if len(sys.argv) > 1 else "all"
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
bs = int(sys.argv[3]) if len(sys.argv) > 3 else 128
workers = [int(w) for w in sys.argv[4:]] or [1, 2]
torch.set_num_threads(1)


def idx(name):
    with gzip.open(ROOT + name) as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic == 2051:
        r, c = struct.unpack(">II", data[8:16])
        return np.frombuffer(data, np.uint8, offset=16).reshape(n, 1, r, c)
    return np.frombuffer(data, np.uint8, offset=8).astype(np.int64)


class Raw(Dataset):
    def __init__(self):
        self.x, self.y = idx("train-images-idx3-ubyte.gz"), idx("train-labels-idx1-ubyte.gz")

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return torch.from_numpy(self.x[i]), int(self.y[i])


class Jpeg(Dataset):
    def __init__(self):
        from PIL import Image
        x = idx("train-images-idx3-ubyte.gz")
        self.y = idx("train-labels-idx1-ubyte.gz")
        self.jpegs = []
        for img in x:
            b = io.BytesIO()
            Image.fromarray(img[0]).save(b, format="JPEG", quality=90)
            self.jpegs.append(b.getvalue())

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        from PIL import Image
        img = np.asarray(Image.open(io.BytesIO(self.jpegs[i])).convert("L"))
        padded = np.pad(img, 2)
        oy, ox = np.random.randint(0, padded.shape[0] - 24 + 1), np.random.randint(0, padded.shape[1] - 24 + 1)
        crop = padded[oy:oy + 24, ox:ox + 24]
        if np.random.rand() < 0.5:
            crop = crop[:, ::-1]
        return torch.from_numpy(np.ascontiguousarray(crop)[None]), int(self.y[i])


def run(name, ds, nw):
    loader = DataLoader(ds, batch_size=bs, shuffle=True, num_workers=nw, persistent_workers=nw > 0)
    for _ in loader:  # warm-up epoch
        pass
    samples = batches = nbytes = 0
    t0 = time.perf_counter()
    for _ in range(epochs):
        for x, y in loader:
            batches += 1
            samples += x.shape[0]
            nbytes += x.numel() * x.element_size() + y.numel() * y.element_size()
    dt = time.perf_counter() - t0
    print(json.dumps({"bench": name, "samples_per_s": samples / dt, "batches_per_s": batches / dt,
                      "mb_per_s": nbytes / dt / 1e6, "bytes_per_sample": nbytes / samples, "seconds": dt,
                      "batch": bs, "workers": nw, "torch": torch.__version__}), flush=True)


if what in ("raw", "all"):
    ds = Raw()
    for nw in workers:
        run(f"raw/torch DataLoader {nw} worker{'s' if nw > 1 else ''}", ds, nw)
if what in ("jpeg", "all"):
    ds = Jpeg()
    for nw in workers:
        run(f"jpeg/torch DataLoader {nw} worker{'s' if nw > 1 else ''}", ds, nw)
