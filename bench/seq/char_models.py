#!/usr/bin/env python3
"""Training throughput (tokens/s) of both character models, ember against PyTorch, at 1 and
2 threads: ROUNDS interleaved rounds (ember, PyTorch, ember, ...) of STEPS steps each, the
median per (model, implementation, threads), and the ratio of ember's median to PyTorch's
best (of 1 and 2 threads). The same model, corpus, batches and steps on both sides
(bench/seq/char_models.lua, bench/seq/torch_char_models.py); the validation loss after the
steps of the last round is printed beside it (VAL_BLOCKS held-out blocks).
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
res = {}
for r in range(rounds):
    for model in ("lstm", "gpt"):
        for th in ("1", "2"):
            for impl, cmd in (("ember", [ember, "bench/seq/char_models.lua"]),
                              ("torch", [sys.executable, "bench/seq/torch_char_models.py"])):
                out = subprocess.run(cmd + [model, steps, th, val if r == rounds - 1 else "0"], check=True,
                                     capture_output=True, text=True).stdout
                row = json.loads(out.strip().splitlines()[-1])
                res.setdefault((model, impl, th), []).append(row)
print(f"{'model':6} {'impl':6} {'threads':>7} {'tokens/s (median)':>18} {'val_loss':>9}")
for (model, impl, th), rows in sorted(res.items()):
    med = statistics.median(r["tokens_per_s"] for r in rows)
    print(f"{model:6} {impl:6} {th:>7} {med:>18.0f} {str(rows[-1]['val_loss']):>9}")
for model in ("lstm", "gpt"):
    med = {(impl, th): statistics.median(r["tokens_per_s"] for r in res[(model, impl, th)])
           for impl in ("ember", "torch") for th in ("1", "2")}
    best_torch = max(med[("torch", "1")], med[("torch", "2")])
    best_ember = max(med[("ember", "1")], med[("ember", "2")])
    print(f"{model}: ember best / PyTorch best = {best_ember / best_torch:.2f}x "
          f"(1 thread {med[('ember', '1')] / med[('torch', '1')]:.2f}x, "
          f"2 threads {med[('ember', '2')] / med[('torch', '2')]:.2f}x)")
