#!/usr/bin/env python3
"""The PyTorch side of bench/seq/char_models.lua: the same corpus (the fortunes files in
sorted order, the sorted distinct bytes as the vocabulary), the same models (char-rnn's
2 x 128 LSTM; nanoGPT's 4 x 4-head x 128 pre-norm GPT with a tied head and nanoGPT's
initialisation), optimizers, batches (row r of step s starts at ((s*B + r) * 48271) mod
(train tokens - block - 1)) and validation blocks.
  torch_char_models.py lstm|gpt STEPS THREADS [VAL_BLOCKS]
"""
import glob
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

which, steps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
val_blocks = int(sys.argv[4]) if len(sys.argv) > 4 else 0
amp = len(sys.argv) > 5 and sys.argv[5] == "bfloat16"  # the forward under torch.autocast('cpu', bfloat16)
torch.set_num_threads(threads)
torch.manual_seed(0)
files = [f for f in sorted(glob.glob("/usr/share/games/fortunes/*"))
         if not (f.endswith(".dat") or f.endswith(".u8"))]
data = b"".join(open(f, "rb").read() for f in files)
vocab = sorted(set(data))
lut = torch.zeros(256, dtype=torch.long)
lut[torch.tensor(vocab)] = torch.arange(len(vocab))
tokens = lut[torch.frombuffer(bytearray(data), dtype=torch.uint8).long()]
V, n = len(vocab), len(tokens)
n_train = n - int(n * 0.1)
B, T = (50, 50) if which == "lstm" else (12, 64)


class CharLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, 128)
        self.lstm = nn.LSTM(128, 128, num_layers=2, batch_first=True)
        self.head = nn.Linear(128, V)

    def forward(self, x):
        return self.head(self.lstm(self.embed(x))[0])


class CharGPT(nn.Module):
    def __init__(self, L=4, E=128, H=4, block=64):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, E), nn.Embedding(block, E)
        self.h = nn.ModuleList(nn.TransformerEncoderLayer(E, H, 4 * E, dropout=0.0, activation="gelu",
                                                          batch_first=True, norm_first=True, bias=False)
                               for _ in range(L))
        self.ln_f = nn.LayerNorm(E, bias=False)
        self.lm_head = nn.Linear(E, V, bias=False)
        self.lm_head.weight = self.wte.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0, 0.02)
            if isinstance(m, nn.MultiheadAttention):
                nn.init.normal_(m.in_proj_weight, 0, 0.02)
        for b in self.h:
            nn.init.normal_(b.self_attn.out_proj.weight, 0, 0.02 / math.sqrt(2 * L))
            nn.init.normal_(b.linear2.weight, 0, 0.02 / math.sqrt(2 * L))
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(block), persistent=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for b in self.h:
            x = b(x, src_mask=self.mask[:t, :t], is_causal=True)
        return self.lm_head(self.ln_f(x))


if which == "lstm":
    model = CharLSTM()
    opt = torch.optim.RMSprop(model.parameters(), lr=2e-3, alpha=0.95)
    sched = None
    clip = lambda: nn.utils.clip_grad_value_(model.parameters(), 5)  # noqa: E731
else:
    model = CharGPT()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.99))
    warm = min(100, max(steps // 10, 1))

    def lr_at(e):  # nanoGPT's warm-up and cosine, as a factor of the base lr (ember's WarmupCosineLR)
        if e < warm:
            return (e + 1) / (warm + 1)
        if e > steps:
            return 0.1
        r = (e - warm) / (steps - warm)
        return (1e-4 + 0.5 * (1 + math.cos(math.pi * r)) * (1e-3 - 1e-4)) / 1e-3
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    clip = lambda: nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # noqa: E731

offs = torch.arange(T + 1)


def batch(starts):
    rows = tokens[torch.tensor(starts)[:, None] + offs]
    return rows[:, :-1], rows[:, 1:]


t0 = None
for s in range(steps):
    if s == 3:
        t0, c0 = time.perf_counter(), time.process_time()
    x, y = batch([((s * B + r) * 48271) % (n_train - T - 1) for r in range(B)])
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        loss = F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    clip()
    opt.step()
    if sched:
        sched.step()
dt, cdt = time.perf_counter() - t0, time.process_time() - c0
val = None
if val_blocks:
    model.eval()
    total = 0.0
    with torch.no_grad():
        for k in range(0, val_blocks, 50):
            starts = [n_train + r * T for r in range(k, min(k + 50, val_blocks))]
            x, y = batch(starts)
            total += F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1)).item() * len(starts)
    val = round(total / val_blocks, 4)
print(json.dumps({"impl": "torch_bf16" if amp else "torch", "model": which, "threads": threads, "steps": steps,
                  "tokens_per_s": round((steps - 3) * B * T / dt, 1),
                  "tokens_per_cpu_s": round((steps - 3) * B * T / cdt, 1), "loss": round(loss.item(), 4),
                  "val_loss": val}))
