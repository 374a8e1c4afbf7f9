#!/usr/bin/env python3
"""State dicts of sequence layers between ember and PyTorch, both ways, through safetensors.

  seq_state_dict.py EMBER WORKDIR

torch -> ember: PyTorch initialises nn.LSTM(8, 16, num_layers=2, batch_first=True) and a GPT
block (nn.TransformerEncoderLayer(32, 4, 128, dropout=0, activation='gelu', batch_first=True,
norm_first=True) under a causal mask), saves their state dicts, an input and its outputs;
ember loads them (tests/interop/seq_state_dict.lua check) and its outputs must match.
ember -> torch: ember initialises the same modules and saves the same files; PyTorch's
modules load ember's state dicts (strict: every name and shape) and must give ember's outputs.
float64 throughout. Exits 77 (skipped) without torch or safetensors.
"""
import os
import subprocess
import sys

try:
    import torch
    from safetensors.torch import load_file, save_file
except ImportError as e:
    print(f"skipped: {e} (pip install torch safetensors)")
    sys.exit(77)

EMBER, WORK = os.path.abspath(sys.argv[1]), sys.argv[2]
HERE = os.path.dirname(os.path.abspath(__file__))
LUA = os.path.join(HERE, "seq_state_dict.lua")
os.makedirs(WORK, exist_ok=True)
torch.set_default_dtype(torch.float64)
TOL = 1e-10
failures = []


def check(what, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + what + (f"  ({detail})" if detail else ""))
    if not ok:
        failures.append(what)


def make(name):
    if name == "lstm":
        return torch.nn.LSTM(8, 16, num_layers=2, batch_first=True)
    return torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=128, dropout=0.0, activation="gelu",
                                            batch_first=True, norm_first=True)


def run(name, m, x):
    with torch.no_grad():
        if name == "lstm":
            y, (h, c) = m(x)
            return {"y": y, "h": h, "c": c}
        mask = torch.nn.Transformer.generate_square_subsequent_mask(x.shape[1], dtype=x.dtype)
        return {"y": m(x, src_mask=mask, is_causal=True)}


SHAPES = {"lstm": (3, 5, 8), "block": (2, 7, 32)}

# torch -> ember
for i, name in enumerate(("lstm", "block")):
    torch.manual_seed(10 + i)
    m = make(name).eval()
    x = torch.randn(*SHAPES[name])
    save_file({k: v.contiguous() for k, v in m.state_dict().items()}, f"{WORK}/torch_{name}.safetensors")
    out = run(name, m, x)
    out["x"] = x
    save_file({k: v.contiguous() for k, v in out.items()}, f"{WORK}/torch_{name}_io.safetensors")
p = subprocess.run([EMBER, LUA, "check", WORK], capture_output=True, text=True, timeout=120)
print(p.stdout + p.stderr)
check("ember loads PyTorch's state dicts", p.returncode == 0, p.stderr[-500:])
diffs = {tuple(line.split()[:2]): float(line.split()[2]) for line in p.stdout.splitlines() if len(line.split()) == 3}
for key in (("lstm", "y"), ("lstm", "h"), ("lstm", "c"), ("block", "y")):
    d = diffs.get(key, float("inf"))
    check(f"torch -> ember: {key[0]} {key[1]} matches PyTorch's", d < TOL, f"max |diff| {d:.2e}")

# ember -> torch
p = subprocess.run([EMBER, LUA, "write", WORK], capture_output=True, text=True, timeout=120)
check("ember writes its state dicts", p.returncode == 0, p.stderr[-500:])
for name in ("lstm", "block"):
    m = make(name).eval()
    sd = load_file(f"{WORK}/ember_{name}.safetensors")
    m.load_state_dict(sd, strict=True)   # raises on a missing, extra or misshapen tensor
    io = load_file(f"{WORK}/ember_{name}_io.safetensors")
    out = run(name, m, io["x"])
    for k, v in out.items():
        d = (v - io[k]).abs().max().item()
        check(f"ember -> torch: {name} {k} matches ember's", d < TOL, f"max |diff| {d:.2e}")

print("FAILED: " + ", ".join(failures) if failures else "all ok")
sys.exit(1 if failures else 0)
