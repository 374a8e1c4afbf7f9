#!/usr/bin/env python3
"""tests/gpu/summarise.py DIR: gathers what tests/gpu/run.sh left in DIR (steps.tsv,
tests.log, bench-*.json, notes.txt, gpu.txt) into DIR/summary.json, with the ratios the
issue's targets are about:
  train:       torch_ms / ember_ms per model (>= 1: ember's step at least as fast);
  gemm:        ember TFLOP/s / torch TFLOP/s (cuBLAS's own rate) per size and dtype (target 0.9);
  elementwise: GB/s of add and mul, and as a fraction of the device-to-device copy;
  pagerank:    GE/s (target 100) per engine; pagerank_partitioned: the partitioned GPU
               sweep (one rank) against the custom engine on the same graph.
A figure that is missing (a step failed or was skipped) is null; nothing here raises on a
missing or malformed file."""
import json
import os
import re
import sys


def read(path, default=""):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return default


def bench(out, name):
    """The JSON line a benchmark printed, or {"error": why} when there is none."""
    text = read(os.path.join(out, "bench-%s.json" % name), None)
    if text is None:
        return None
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    return {"error": "no JSON line in bench-%s.json" % name}


def ratio(a, b):
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0 else None


def steps_of(out):
    steps = []
    for line in read(os.path.join(out, "steps.tsv")).splitlines():
        f = line.split("\t")
        if len(f) >= 4:
            steps.append({"name": f[0], "status": f[1], "rc": int(f[2]), "seconds": int(f[3]),
                          "note": f[4] if len(f) > 4 else ""})
    return steps


def tests_of(out):
    log = read(os.path.join(out, "tests.log"))
    t = {"passed": None, "failed": None, "total": None, "failed_names": []}
    m = re.search(r"(\d+)% tests passed, (\d+) tests? failed out of (\d+)", log)
    if m:
        t["failed"], t["total"] = int(m.group(2)), int(m.group(3))
        t["passed"] = t["total"] - t["failed"]
    elif "No tests were found" in log:
        t.update(passed=0, failed=0, total=0)
    t["failed_names"] = re.findall(r"^\s*\d+ - (\S+) \((?:Failed|Timeout|SEGFAULT|Subprocess aborted|Not Run)", log,
                                   re.M)
    return t


def train_of(out):
    res = {}
    for m in ("mlp", "cnn"):
        e, t = bench(out, "train-" + m), bench(out, "torch-train-" + m)
        if e is None and t is None:
            continue
        e, t = e or {}, t or {}
        res[m] = {"ember_median_ms": e.get("median_ms"), "torch_median_ms": t.get("median_ms"),
                  "ember_samples_per_s": e.get("samples_per_s"), "torch_samples_per_s": t.get("samples_per_s"),
                  "speed_vs_torch": ratio(t.get("median_ms"), e.get("median_ms")),
                  "ember_error": e.get("error"), "torch_error": t.get("error")}
    return res


def gemm_of(out):
    e, t = bench(out, "gemm") or {}, bench(out, "torch-gemm") or {}
    torch_by = {(r.get("n"), r.get("dtype")): r for r in t.get("results", [])}
    rows = []
    for r in e.get("results", []):
        tr = torch_by.get((r.get("n"), r.get("dtype")), {})
        rows.append({"n": r.get("n"), "dtype": r.get("dtype"), "ember_tflops": r.get("tflops"),
                     "cublas_tflops": tr.get("tflops"), "of_cublas": ratio(r.get("tflops"), tr.get("tflops")),
                     "ember_error": r.get("error"), "torch_error": tr.get("error")})
    return {"cases": rows, "torch_allow_tf32_matmul": t.get("allow_tf32_matmul"), "ember_error": e.get("error"),
            "torch_error": t.get("error")}


def elementwise_of(out):
    e, t = bench(out, "elementwise") or {}, bench(out, "torch-elementwise") or {}
    er, tr = e.get("results", {}), t.get("results", {})
    res = {"numel": e.get("numel"), "ember_error": e.get("error"), "torch_error": t.get("error")}
    for op in ("copy", "add", "mul"):
        res[op] = {"ember_gb_per_s": er.get(op, {}).get("gb_per_s"), "torch_gb_per_s": tr.get(op, {}).get("gb_per_s"),
                   "ember_of_copy": er.get(op, {}).get("of_copy")}
    ceiling = max([x for x in (res["copy"]["ember_gb_per_s"], res["copy"]["torch_gb_per_s"]) if x] or [0]) or None
    res["copy_ceiling_gb_per_s"] = ceiling
    for op in ("add", "mul"):
        res[op]["ember_of_ceiling"] = ratio(res[op]["ember_gb_per_s"], ceiling)
        res[op]["torch_of_ceiling"] = ratio(res[op]["torch_gb_per_s"], ceiling)
    return res


def main():
    out = sys.argv[1]
    dry = read(os.path.join(out, "dry_run")).strip() == "1"
    seconds = read(os.path.join(out, "seconds")).strip()
    steps = steps_of(out)
    gpu = re.search(r"^GPU \d+: (.*?)(?: \(UUID.*)?$", read(os.path.join(out, "gpu.txt")), re.M)
    s = {
        "dry_run": dry,
        "device": "cpu" if dry else "cuda",
        "gpu": gpu.group(1) if gpu else None,
        "seconds": int(seconds) if seconds.isdigit() else None,
        "steps": steps,
        "steps_ok": sum(1 for x in steps if x["status"] == "ok"),
        "steps_failed": sum(1 for x in steps if x["status"] != "ok"),
        "tests": tests_of(out),
        "train": train_of(out),
        "gemm": gemm_of(out),
        "elementwise": elementwise_of(out),
        "pagerank": bench(out, "pagerank"),
        "pagerank_partitioned": bench(out, "pagerank-partitioned"),
        "notes": [n for n in read(os.path.join(out, "notes.txt")).splitlines() if n],
    }
    pr = s["pagerank"] or {}
    gemm_ratios = [c["of_cublas"] for c in s["gemm"]["cases"] if c["of_cublas"] is not None]
    train_ratios = [m["speed_vs_torch"] for m in s["train"].values() if m["speed_vs_torch"] is not None]
    s["targets"] = None if dry else {
        "train_at_least_torch": min(train_ratios) >= 1.0 if len(train_ratios) == 2 else None,
        "gemm_90pct_of_cublas": min(gemm_ratios) >= 0.9 if gemm_ratios else None,
        "pagerank_100_ge_per_s": pr.get("ge_per_s") >= 100 if isinstance(pr.get("ge_per_s"), (int, float)) else None,
    }
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(s, f, indent=1, sort_keys=False)
        f.write("\n")
    print(json.dumps({"steps_ok": s["steps_ok"], "steps_failed": s["steps_failed"], "tests": s["tests"]}))


if __name__ == "__main__":
    main()
