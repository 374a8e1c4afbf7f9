#!/usr/bin/env python3
"""Medians of bench/data/run.sh's JSON lines, ember beside PyTorch and the ceilings.
ceiling (raw) = memcpy GB/s / bytes per sample; each ember line says how it compares with
PyTorch's DataLoader with the same number of workers (in process: 1 worker)."""
import json, statistics, sys
from collections import defaultdict

rows = defaultdict(list)
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("{"):
        d = json.loads(line)
        rows[d["bench"]].append(d)

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
print(f"{'configuration':44s} {'samples/s':>11s} {'batches/s':>10s} {'MB/s':>7s} {'vs torch':>9s} {'of ceiling':>10s} {'of zmq':>7s}")
for name in sorted(rows):
    s, b, mb = med(name, "samples_per_s"), med(name, "batches_per_s"), med(name, "mb_per_s")
    if s is None or b is None:
        continue
    bps = med(name, "bytes_per_sample")
    vs = ""
    if "torch" not in name:
        workers = rows[name][0].get("workers", 1)
        peer = f"{name.split('/')[0]}/torch DataLoader {workers} worker{'s' if workers > 1 else ''}"
        t = med(peer, "samples_per_s")
        vs = f"{s / t:8.1f}x" if t else ""
    ceil = f"{100 * s * bps / (memcpy * 1e9):9.0f}%" if name.startswith("raw/") and memcpy else ""
    ofz = f"{100 * b / zmq_msgs:6.0f}%" if name.startswith("raw/") and zmq_msgs else ""
    if name.startswith("jpeg/") and dec:
        ceil = f"{100 * s / (2 * dec):9.0f}%"
    print(f"{name:44s} {s:11.0f} {b:10.0f} {mb:7.0f} {vs:>9s} {ceil:>10s} {ofz:>7s}")
