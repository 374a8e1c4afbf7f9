#!/usr/bin/env python3
"""TensorBoard's own reader on ember's event files.

1. `ember run` trains a small pipeline (a synthetic Lua source) with log.dir set; TensorBoard's
   EventAccumulator must return, step by step, the per-step loss, learning rate and samples/s
   that steps.jsonl holds and, per epoch, the metrics of metrics.jsonl (as float32: an
   Event's simple_value is a float).
2. A script writes scalars and a histogram through ember.tensorboard.SummaryWriter; the
   reader returns them.

usage: tensorboard_roundtrip.py EMBER_EXECUTABLE
Exits 77 (skipped) when the tensorboard package is missing (pip install tensorboard).
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: the tensorboard package is missing ({e}): pip install tensorboard")
    sys.exit(77)

EMBER = os.path.abspath(sys.argv[1])

DATASET = """
local ember = require 'ember'
local ds = {}
function ds:size() return 96 end
function ds:get_batch(ids)
  local xs, ys = {}, {}
  for k = 1, ids:numel() do
    local i = ids[k]:item()
    local a, b = math.sin(i * 1.7), math.cos(i * 2.3)
    xs[k], ys[k] = { a, b }, (a + b > 0) and 2 or 1
  end
  return { x = ember.tensor(xs), y = ember.tensor(ys, { dtype = 'int64' }) }
end
return ds
"""

PIPELINE = """job: train
epochs: 3
model: [{linear: [2, 8]}, {relu: }, {linear: [8, 2]}]
data: {source: d.lua, split: {train: 0.75, test: 0.25}, batch_size: 8}
optim: {name: sgd, lr: 0.2, momentum: 0.9}
schedule: {name: cosine}
log: {dir: log, progress: none}
"""

SCRIPT = """
local w = ember.tensorboard.SummaryWriter(arg[1])
for step = 1, 5 do w:add_scalar('demo/square', step * step, step) end
w:add_scalar('demo/third', 1 / 3, 7)
w:add_histogram('demo/weights', ember.tensor({1, 2, 2, 3, 3, 3, 10}), 2, {bins = 3})
w:close()
"""

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def f32(x):
    return float(np.float32(x))


def accumulator(path):
    acc = EventAccumulator(path, size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    return acc


with tempfile.TemporaryDirectory() as tmp:
    with open(os.path.join(tmp, "d.lua"), "w") as f:
        f.write(DATASET)
    with open(os.path.join(tmp, "p.yaml"), "w") as f:
        f.write(PIPELINE)
    env = dict(os.environ, EMBER_NUM_THREADS="2")
    r = subprocess.run([EMBER, "run", "p.yaml", "log.dir=" + os.path.join(tmp, "log")], cwd=tmp, env=env,
                       capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"ember run exited {r.returncode}: {r.stderr}")
    logdir = os.path.join(tmp, "log")
    files = [n for n in os.listdir(logdir) if n.startswith("events.out.tfevents.")]
    check(len(files) == 1, f"one event file in {os.listdir(logdir)}")
    acc = accumulator(logdir)
    tags = acc.Tags()["scalars"]
    with open(os.path.join(logdir, "steps.jsonl")) as f:
        steps = [json.loads(line) for line in f]
    check(len(steps) == 3 * 9, f"27 step lines (72 samples / 8 x 3 epochs), got {len(steps)}")
    for key in ("loss", "lr", "samples_per_s"):
        tag = "train/" + key
        check(tag in tags, f"{tag} in {tags}")
        if tag not in tags:
            continue
        events = acc.Scalars(tag)
        check([e.step for e in events] == [s["step"] for s in steps], f"{tag}: the steps of steps.jsonl")
        check([e.value for e in events] == [f32(s[key]) for s in steps], f"{tag}: the values of steps.jsonl")
        check(all(e.wall_time > 1.6e9 for e in events), f"{tag}: wall times are Unix times")
    with open(os.path.join(logdir, "metrics.jsonl")) as f:
        epochs = [json.loads(line) for line in f]
    check(len(epochs) == 3, "three epoch lines")
    for key in ("train_loss", "train_accuracy", "test_loss", "test_accuracy", "lr"):
        tag = "epoch/" + key
        check(tag in tags, f"{tag} in {tags}")
        if tag not in tags:
            continue
        events = acc.Scalars(tag)
        check([e.step for e in events] == [m["step"] for m in epochs], f"{tag}: at each epoch's last step")
        check([e.value for e in events] == [f32(m[key]) for m in epochs], f"{tag}: the values of metrics.jsonl")
    # the learning rate follows the cosine schedule from 0.2
    check(abs(steps[0]["lr"] - 0.2) < 1e-12, "the first step's lr is the base lr")

    sdir = os.path.join(tmp, "script")
    with open(os.path.join(tmp, "w.lua"), "w") as f:
        f.write(SCRIPT)
    r = subprocess.run([EMBER, os.path.join(tmp, "w.lua"), sdir], env=env, capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, f"the script exited {r.returncode}: {r.stderr}")
    acc = accumulator(sdir)
    sq = acc.Scalars("demo/square")
    check([(e.step, e.value) for e in sq] == [(s, float(s * s)) for s in range(1, 6)], "demo/square")
    third = acc.Scalars("demo/third")
    check([(e.step, e.value) for e in third] == [(7, f32(1 / 3))], "demo/third")
    h = acc.Histograms("demo/weights")
    check(len(h) == 1 and h[0].step == 2, "one histogram at step 2")
    if h:
        hv = h[0].histogram_value
        check((hv.min, hv.max, hv.num, hv.sum, hv.sum_squares) == (1, 10, 7, 24, 1 + 4 + 4 + 27 + 100),
              f"histogram summary {hv}")
        check(list(hv.bucket_limit) == [4, 7, 10] and list(hv.bucket) == [6, 0, 1],
              f"histogram buckets {list(hv.bucket_limit)} {list(hv.bucket)}")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("tensorboard round trip: ok")
