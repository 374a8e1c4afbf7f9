#!/usr/bin/env python3
"""Medians of bench/data/run.sh's JSON lines, ember beside PyTorch and the ceilings.
ceiling (raw) = memcpy GB/s / bytes per sample; each ember line says how it compares with
PyTorch's DataLoader with the same number of workers and batch size (in process: 1
worker). Configurations are told apart by batch size too; "of zmq" (ZeroMQ's message rate
at a 128-sample batch's size) is given at batch 128 only. "CPU us/batch": trainer and
reader processes together, per batch (ember lines)."""
import json, statistics, sys
from collections import defaultdict

rows = defaultdict(list)
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("{"):
        d = json.loads(line)
        name = d["bench"]
        if "batch" in d and name not in ("memcpy", "zmq push/pull ipc", "jpeg decode, one core"):
            name = (d["batch"], name)
        rows[name].append(d)

def med(name, key):
    v = [d[key] for d in rows.get(name, []) if key in d]
    return statistics.median(v) if v else None

memcpy = med("memcpy", "gb_per_s")
zmq_msgs, zmq_gbs = med("zmq push/pull ipc", "messages_per_s"), med("zmq push/pull ipc", "gb_per_s")
print(f"machine: memcpy {memcpy:.2f} GB/s (101376-byte blocks); ZeroMQ PUSH/PULL over ipc "
      f"{zmq_msgs:.0f} msg/s = {zmq_gbs:.2f} GB/s at 101376 bytes")
dec = med("jpeg decode, one core", "samples_per_s")
if dec:
    print(f"JPEG read + decode on one core: {dec:.0f} samples/s; ceiling with 2 cores: {2 * dec:.0f} samples/s")
print(f"{'configuration':44s} {'batch':>5s} {'samples/s':>11s} {'batches/s':>10s} {'MB/s':>7s} {'vs torch':>9s} "
      f"{'of ceiling':>10s} {'of zmq':>7s} {'CPU us/batch':>12s}")
for key in sorted(k for k in rows if isinstance(k, tuple)):
    bs, name = key
    s, b, mb = med(key, "samples_per_s"), med(key, "batches_per_s"), med(key, "mb_per_s")
    if s is None or b is None:
        continue
    bps = med(key, "bytes_per_sample")
    vs = ""
    if "torch" not in name:
        workers = rows[key][0].get("workers", 1)
        peer = (bs, f"{name.split('/')[0]}/torch DataLoader {workers} worker{'s' if workers > 1 else ''}")
        t = med(peer, "samples_per_s")
        vs = f"{s / t:8.1f}x" if t else ""
    ceil = f"{100 * s * bps / (memcpy * 1e9):9.0f}%" if name.startswith("raw/") and memcpy else ""
    ofz = f"{100 * b / zmq_msgs:6.0f}%" if name.startswith("raw/") and zmq_msgs and bs == 128 else ""
    if name.startswith("jpeg/") and dec:
        ceil = f"{100 * s / (2 * dec):9.0f}%"
    cpu = med(key, "cpu_us_per_batch")
    cpu = f"{cpu:12.0f}" if cpu is not None else ""
    print(f"{name:44s} {bs:5d} {s:11.0f} {b:10.0f} {mb:7.0f} {vs:>9s} {ceil:>10s} {ofz:>7s} {cpu:>12s}")
