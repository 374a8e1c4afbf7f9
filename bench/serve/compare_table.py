#!/usr/bin/env python3
"""The summary of bench/serve/compare.sh: per model and batch delay, ember serve and
TorchServe side by side at the reference rate (p50/p99/p99.9 latency, achieved rate) and
their sustainable rate (p99 <= 10 ms; ladder then bisection), with ember's ratios (TorchServe's p99 / ember's,
ember's max rate / TorchServe's).
usage: compare_table.py build/bench-serve/compare.jsonl RATE"""
import json
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rate = float(sys.argv[2])
at, best = {}, {}
for r in rows:
    key = (r["model"], r["max_delay_us"], r["server"])
    if "max_ok_per_s" in r:
        best[key] = r["max_ok_per_s"]
    elif r.get("result") and abs(r["result"]["offered_per_s"] - rate) < 1e-6 and key not in at:
        at[key] = r["result"]
servers = []
for r in rows:
    if r["server"] not in servers:
        servers.append(r["server"])
print(f"{'model':<11} {'delay':>6} {'server':<14} {'p50 ms':>8} {'p99 ms':>8} {'p99.9 ms':>9} {'req/s':>8} "
      f"{'max req/s (p99<=10ms)':>22}")
for model in sorted({k[0] for k in at}):
    for delay in sorted({k[1] for k in at if k[0] == model}):
        for server in servers:
            r = at.get((model, delay, server))
            if not r:
                continue
            print(f"{model:<11} {delay / 1000:>5}ms {server:<14} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} "
                  f"{r['p999_ms']:>9.2f} {r['achieved_per_s']:>8.0f} {best.get((model, delay, server), 0):>22}")
        t = at.get((model, delay, "torchserve"))
        for server in servers:
            e = at.get((model, delay, server))
            if not (e and t and server.startswith("ember")):
                continue
            be, bt = best.get((model, delay, server), 0), best.get((model, delay, "torchserve"), 0)
            rate_ratio = f"{be / bt:.1f}x" if bt else "n/a (TorchServe never kept p99 <= 10 ms)"
            print(f"{'':<11} {'':>6} {'ratio':<14} {server}: p99 TorchServe/ember {t['p99_ms'] / max(e['p99_ms'], 1e-9):.1f}x, "
                  f"max rate ember/TorchServe {rate_ratio}")
