#!/usr/bin/env python3
"""bench/distributed/report.py RAW.jsonl LOAD_BEFORE LOAD_AFTER - the tables of bench/distributed/run.sh.

allreduce: per rank count and size, median time and bus bandwidth of ember and of raw
MPI_Allreduce, and their ratio (ember busbw / MPI busbw; 1 = as fast as MPI itself).
ddp: per model and rank count, median global samples/s of ember and PyTorch, scaling
efficiency (samples/s at n ranks / (n x samples/s at 1 rank)), ember / PyTorch, and for
ember the communication per step, the part backward waited for (exposed) and the share
hidden behind backward. Then one JSON line {"dist_bench": {...}}."""
import json
import statistics
import sys

raw, load_before, load_after = sys.argv[1:4]
rows = [json.loads(l) for l in open(raw) if l.strip()]
report = {"allreduce": [], "ddp": [], "load_before": load_before, "load_after": load_after, "raw": raw}


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(v, spec="%.2f"):
    return spec % v if v is not None else "-"


ar = [r for r in rows if r.get("impl") in ("ember", "mpi", "mpi_yield") and "bytes" in r]
if ar:
    print("allreduce (float32 sum, in place): median of rounds")
    print("%5s %10s %10s %9s %10s %9s %10s %9s %8s" % ("ranks", "bytes", "ember us", "busbw", "MPI us", "busbw",
                                                     "yield us", "busbw", "e/MPI"))
    for n in sorted({r["ranks"] for r in ar}):
        for b in sorted({r["bytes"] for r in ar if r["ranks"] == n}):
            def pick(impl):
                sel = [r for r in ar if r["ranks"] == n and r["bytes"] == b and r["impl"] == impl]
                return med([r["us"] for r in sel]), med([r["busbw"] for r in sel])
            (eu, eb), (mu, mb), (yu, yb) = pick("ember"), pick("mpi"), pick("mpi_yield")
            bound = max([x for x in (mb, yb) if x] or [0]) or None
            ratio = eb / bound if eb and bound else None
            print("%5d %10d %10s %9s %10s %9s %10s %9s %8s" % (n, b, fmt(eu, "%.1f"), fmt(eb, "%.3f"), fmt(mu, "%.1f"),
                                                             fmt(mb, "%.3f"), fmt(yu, "%.1f"), fmt(yb, "%.3f"),
                                                             fmt(ratio)))
            report["allreduce"].append({"ranks": n, "bytes": b, "ember_us": eu, "ember_busbw": eb, "mpi_us": mu,
                                        "mpi_busbw": mb, "mpi_yield_us": yu, "mpi_yield_busbw": yb, "ratio": ratio})
    print("busbw in GB/s = bytes / time x 2(n-1)/n; MPI: MPI_Allreduce polling (Open MPI's default), yield: with "
          "mpi_yield_when_idle=1; e/MPI = ember busbw / the better MPI busbw")

ov = [r for r in rows if r.get("bench") == "ddp_overhead"]
dd = [r for r in rows if "global_samples_per_s" in r]
if dd:
    print("\nDDP step, Fashion-MNIST, batch %s per rank, 1 thread per rank: median global samples/s"
          % dd[0].get("batch_per_rank"))
    print("%5s %5s %10s %6s %10s %6s %7s %8s %8s %7s" % ("model", "ranks", "ember", "eff", "torch", "eff",
                                                         "e/torch", "comm ms", "exposed", "hidden"))
    for model in ("mlp", "cnn"):
        base = {}
        for n in sorted({r["ranks"] for r in dd if r["model"] == model}):
            out = {"model": model, "ranks": n}
            for impl in ("ember", "torch"):
                sel = [r for r in dd if r["model"] == model and r["ranks"] == n and r["impl"] == impl]
                sps = med([r["global_samples_per_s"] for r in sel])
                if n == 1:
                    base[impl] = sps
                eff = sps / (n * base[impl]) if sps and base.get(impl) else None
                out[impl + "_samples_per_s"], out[impl + "_efficiency"] = sps, eff
                out[impl + "_runs"] = [r["global_samples_per_s"] for r in sel]
                if impl == "ember":
                    out["comm_ms_per_step"] = med([r.get("comm_ms_per_step") for r in sel])
                    out["exposed_ms_per_step"] = med([r.get("exposed_ms_per_step") for r in sel])
                    out["hidden_share"] = med([r.get("hidden_share") for r in sel]) if n > 1 else None
                    out["buckets"] = med([r.get("buckets") for r in sel])
                else:
                    out["torch_version"] = sel[0].get("torch") if sel else None
            ratio = (out["ember_samples_per_s"] / out["torch_samples_per_s"]
                     if out["ember_samples_per_s"] and out["torch_samples_per_s"] else None)
            out["ratio"] = ratio
            report["ddp"].append(out)
            print("%5s %5d %10s %6s %10s %6s %7s %8s %8s %7s" % (
                model, n, fmt(out["ember_samples_per_s"], "%.0f"), fmt(out["ember_efficiency"], "%.0f%%" if False else "%.2f"),
                fmt(out["torch_samples_per_s"], "%.0f"), fmt(out["torch_efficiency"]), fmt(ratio),
                fmt(out["comm_ms_per_step"], "%.3f"), fmt(out["exposed_ms_per_step"], "%.3f"),
                fmt(out["hidden_share"])))
    print("eff = samples/s at n ranks / (n x samples/s at 1 rank); e/torch = ember / PyTorch samples/s; comm = "
          "bucket allreduce time per step (launch to completion), exposed = the part backward waited for, "
          "hidden = 1 - exposed/comm")
if ov:
    print("\nsynchronisation cost alone (sync and no_sync blocks alternating in one run, medians of blocks): "
          "the efficiency if each rank had its core to itself")
    print("%5s %5s %13s %13s %9s %13s %13s %9s" % ("model", "ranks", "ember sync ms", "no_sync ms", "eff",
                                                  "torch sync ms", "no_sync ms", "eff"))
    report["paired"] = []
    for model in ("mlp", "cnn"):
        for n in sorted({r["ranks"] for r in ov if r["model"] == model}):
            row = {"model": model, "ranks": n}
            for impl in ("ember", "torch"):
                sel = [r for r in ov if r["model"] == model and r["ranks"] == n and r["impl"] == impl]
                row[impl + "_sync_ms"] = med([r["step_sync_ms"] for r in sel])
                row[impl + "_nosync_ms"] = med([r["step_nosync_ms"] for r in sel])
                row[impl + "_paired_efficiency"] = med([r["paired_efficiency"] for r in sel])
            report["paired"].append(row)
            print("%5s %5d %13s %13s %9s %13s %13s %9s" % (
                model, n, fmt(row["ember_sync_ms"], "%.3f"), fmt(row["ember_nosync_ms"], "%.3f"),
                fmt(row["ember_paired_efficiency"]), fmt(row["torch_sync_ms"], "%.3f"),
                fmt(row["torch_nosync_ms"], "%.3f"), fmt(row["torch_paired_efficiency"])))
print("load average: before %s, after %s (2 shared cores: compare ratios, rerun with -r when high)"
      % (load_before, load_after))
print(json.dumps({"dist_bench": report}))
