#!/usr/bin/env python3
"""Training throughput (tokens/s) of both character models, ember against PyTorch, at 1 and
2 threads: ROUNDS interleaved rounds (ember, PyTorch[, ember bf16], ember, ...) of STEPS
steps each, the median per (model, implementation, threads), and the ratio of ember's
median to PyTorch's best (of 1 and 2 threads). The same model, corpus, batches and steps on
both sides (bench/seq/char_models.lua, bench/seq/torch_char_models.py); the validation loss
after the steps of the last round is printed beside it (VAL_BLOCKS held-out blocks).
Beside wall-clock tokens/s it gives tokens per second of process CPU time: on a shared
machine that moves less with the load (at 2 threads it counts both threads' time, spinning
included). BF16=1 adds ember and PyTorch under bfloat16 autocast (ember: oneDNN's bf16
matmuls; PyTorch: torch.autocast('cpu', bfloat16), which also takes its LSTM to oneDNN's
bf16 RNN): each ember is then compared with PyTorch's best of both precisions and both
thread counts, and with PyTorch at its own precision.
  python3 bench/seq/char_models.py [STEPS=30] [ROUNDS=3] [VAL_BLOCKS=0]   (from the repository root)
"""
import json
import os
import statistics
import subprocess
import sys

steps = sys.argv[1] if len(sys.argv) > 1 else "30"
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
val = sys.argv[3] if len(sys.argv) > 3 else "0"
ember = os.environ.get("EMBER", "build/ember")
impls = [("ember", [ember, "bench/seq/char_models.lua"], []),
         ("torch", [sys.executable, "bench/seq/torch_char_models.py"], [])]
if os.environ.get("BF16") == "1":
    impls.append(("ember_bf16", [ember, "bench/seq/char_models.lua"], ["bfloat16"]))
    impls.append(("torch_bf16", [sys.executable, "bench/seq/torch_char_models.py"], ["bfloat16"]))
res = {}
for r in range(rounds):
    for model in ("lstm", "gpt"):
        for th in ("1", "2"):
            for impl, cmd, extra in impls:
                v = val if r == rounds - 1 else "0"
                out = subprocess.run(cmd + [model, steps, th, v] + extra, check=True, capture_output=True,
                                     text=True).stdout
                res.setdefault((model, impl, th), []).append(json.loads(out.strip().splitlines()[-1]))


def med(model, impl, th, key="tokens_per_s"):
    return statistics.median(r[key] for r in res[(model, impl, th)])


print(f"{'model':6} {'impl':10} {'threads':>7} {'tokens/s':>10} {'tokens/cpu-s':>13} {'val_loss':>9}")
for (model, impl, th), rows in sorted(res.items()):
    print(f"{model:6} {impl:10} {th:>7} {med(model, impl, th):>10.0f} "
          f"{med(model, impl, th, 'tokens_per_cpu_s'):>13.0f} {str(rows[-1]['val_loss']):>9}")
torches = [i[0] for i in impls if i[0].startswith("torch")]
for model in ("lstm", "gpt"):
    for impl in [i[0] for i in impls if i[0].startswith("ember")]:
        peer = "torch_bf16" if impl.endswith("bf16") else "torch"  # PyTorch at the same precision
        for key, what in (("tokens_per_s", "wall"), ("tokens_per_cpu_s", "cpu")):
            best_torch, which_torch = max((med(model, tp, t, key), f"{tp}@{t}") for tp in torches for t in ("1", "2"))
            best = max(med(model, impl, t, key) for t in ("1", "2"))
            print(f"{model} {impl} ({what}): best / PyTorch best ({which_torch}) = {best / best_torch:.2f}x "
                  f"(against {peer}: 1 thread {med(model, impl, '1', key) / med(model, peer, '1', key):.2f}x, "
                  f"2 threads {med(model, impl, '2', key) / med(model, peer, '2', key):.2f}x)")
