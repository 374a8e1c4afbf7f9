#!/usr/bin/python3
"""PageRank at 1, 2 and 4 ranks against one process and gapbs `pr`, in one run.

    bench/graph/run_scaling.py [--scale 22] [--edge-factor 16] [--threads 2] [--iters 20]
                               [--ranks 1 2 4] [--rounds 3] [--gapbs DIR]
                               [--bandwidth-gbs 12.5] [--latency-us 5] [--machines 32]

Two graphs, each run by every engine in turn, round after round (interleaved), medians:
  1. the GAP benchmark suite's Kronecker graph: gapbs `converter -g SCALE -k EF -b` writes
     the .sg file, then gapbs `pr` (OMP_NUM_THREADS=--threads) and ember's pagerank_bench
     on that same file with each way of reading far contributions (--blocking auto, none,
     tiles, bins), 20 fixed iterations each;
  2. ember's Kronecker graph (seed 1, simple: no self loops or repeated arcs, since the
     partitioned engine's ingest generates it on every rank): the PageRank job on one
     process (--threads threads) and under `ember launch -n N` for each N of --ranks
     (threads per rank: --threads / N, at least 1), tol 0 and --iters iterations.
gapbs is not part of ember: --gapbs names a checkout (built here with `make pr converter`),
else it is cloned from https://github.com/sbeamer/gapbs into ~/.cache/ember/gapbs.

  3. building: gapbs `pr -g SCALE -k EF` (its generator and CSR builder: an undirected graph
     without self loops or repeated edges, both arcs of each edge) against ember building the
     same kind of graph from its own generator (the job with graph.generate.directed=false,
     drop_self_loops, drop_duplicates; build_seconds, generation included).
Printed: GE/s (arcs x iterations / seconds) and the ratio to gapbs or to the single
process; per rank count, the bytes exchanged per iteration against the lower bound (4 bytes
for each distinct remote source a rank reads: its mirrors) and the split of time between
compute and exchange; and an estimate for --machines machines: compute scaled down from the
single-rank compute time (arcs split evenly), the mirrors per machine extrapolated from the
measured rank counts (a power law in N), sent at --bandwidth-gbs with --latency-us per peer.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(cmd, env=None, what=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **(env or {})))
    if r.returncode:
        sys.exit(f"{what or ' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r.stdout


def last_json(text):
    """The last JSON line (under `ember launch`, rank 0's, after its "[0] " prefix)."""
    for line in reversed(text.strip().splitlines()):
        line = line[4:] if line.startswith("[0] ") else line
        if line.startswith("{"):
            return json.loads(line)
    sys.exit("no JSON line in:\n" + text[-2000:])


def gapbs_dir(path):
    if not path:
        path = os.path.expanduser("~/.cache/ember/gapbs")
        if not os.path.exists(os.path.join(path, "Makefile")):
            run(["git", "clone", "--depth", "1", "https://github.com/sbeamer/gapbs", path], what="cloning gapbs")
    run(["make", "-C", path, "pr", "converter"], what="building gapbs")
    return path


def gapbs_seconds(out):
    for line in out.splitlines():
        if line.startswith("Average Time:"):
            return float(line.split()[-1])
    sys.exit("gapbs pr printed no 'Average Time:' line:\n" + out)


def gapbs_build(out):
    """(seconds to generate and build, arcs) from gapbs pr's output."""
    gen = build = arcs = None
    for line in out.splitlines():
        if line.startswith("Generate Time:"):
            gen = float(line.split()[-1])
        elif line.startswith("Build Time:"):
            build = float(line.split()[-1])
        elif line.startswith("Graph has"):
            arcs = 2 * int(line.split()[5])  # "... N nodes and E undirected edges ..."
    if gen is None or build is None or arcs is None:
        sys.exit("gapbs pr printed no Generate/Build Time or graph size:\n" + out)
    return gen + build, arcs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=int, default=22)
    ap.add_argument("--edge-factor", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--blockings", nargs="+", default=["auto", "none", "tiles", "bins"])
    ap.add_argument("--gapbs", help="a gapbs checkout (default: cloned into ~/.cache/ember/gapbs)")
    ap.add_argument("--no-gapbs", action="store_true", help="skip gapbs and its .sg graph")
    ap.add_argument("--bandwidth-gbs", type=float, default=12.5, help="network bandwidth per machine, GB/s")
    ap.add_argument("--latency-us", type=float, default=5.0, help="per-peer message latency, microseconds")
    ap.add_argument("--machines", type=int, default=32)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--keep", help="folder for the .sg file (default: a temporary one)")
    a = ap.parse_args()
    bench, ember = os.path.join(a.build, "bench", "pagerank_bench"), os.path.join(a.build, "ember")
    for f in (bench, ember):
        if not os.path.exists(f):
            sys.exit(f"{f} not found: build ember and the pagerank_bench target first")
    work = a.keep or tempfile.mkdtemp(prefix="ember_scaling_")
    os.makedirs(work, exist_ok=True)
    sg = os.path.join(work, f"kron{a.scale}_gapbs.sg")
    gap = None
    if not a.no_gapbs:
        gap = gapbs_dir(a.gapbs)
        if not os.path.exists(sg):
            run([os.path.join(gap, "converter"), "-g", str(a.scale), "-k", str(a.edge_factor), "-b", sg],
                env={"OMP_NUM_THREADS": str(a.threads)}, what="gapbs converter")
    job = [os.path.join(ROOT, "pipelines", "pagerank_kron.yaml"), f"graph.generate.scale={a.scale}",
           f"graph.generate.edge_factor={a.edge_factor}", "graph.generate.drop_self_loops=true",
           "graph.generate.drop_duplicates=true", "pagerank.tol=0", f"pagerank.max_iter={a.iters}",
           "output.top_k=0", "output.compare_indegree=null"]
    undirected = [os.path.join(ROOT, "pipelines", "pagerank_kron.yaml"), f"graph.generate.scale={a.scale}",
                  f"graph.generate.edge_factor={a.edge_factor}", "graph.generate.directed=false",
                  "graph.generate.drop_self_loops=true", "graph.generate.drop_duplicates=true", "pagerank.max_iter=1",
                  "output.top_k=0", "output.compare_indegree=null", f"threads={a.threads}"]
    build_rows = {}  # "gapbs" / "ember" -> [(seconds, arcs)]
    sg_rows = {}  # name -> [seconds for the iterations]
    arcs_sg = None
    job_rows = {}  # ranks (0: single process) -> [result JSON]
    for rnd in range(a.rounds):
        if gap:
            out = run([os.path.join(gap, "pr"), "-f", sg, "-i", str(a.iters), "-t", "0", "-n", "1"],
                      env={"OMP_NUM_THREADS": str(a.threads)}, what="gapbs pr")
            sg_rows.setdefault("gapbs pr", []).append(gapbs_seconds(out))
            for b in a.blockings:
                r = last_json(run([bench, "--file", sg, "--threads", str(a.threads), "--iters", str(a.iters),
                                   "--blocking", b]))
                arcs_sg = r["arcs"]
                sg_rows.setdefault(f"ember {b} ({r['engine']})", []).append(r["ms_per_iter"] * r["iterations"] / 1e3)
            out = run([os.path.join(gap, "pr"), "-g", str(a.scale), "-k", str(a.edge_factor), "-i", "1", "-n", "1"],
                      env={"OMP_NUM_THREADS": str(a.threads)}, what="gapbs pr -g")
            build_rows.setdefault("gapbs", []).append(gapbs_build(out))
            r = last_json(run([ember, "run", *undirected], what="ember's undirected build"))
            build_rows.setdefault("ember", []).append((r["build_seconds"], r["edges"]))
        r = last_json(run([ember, "run", *job, f"threads={a.threads}"], what="the single-process job"))
        job_rows.setdefault(0, []).append(r)
        for n in a.ranks:
            t = max(1, a.threads // n)
            r = last_json(run([ember, "launch", "-n", str(n), "--threads", str(t), "run", *job,
                               "distributed.backend=mpi"],   # the partitioned engine even on 1 rank
                              env={"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"},
                              what=f"the job on {n} ranks"))
            job_rows.setdefault(n, []).append(r)
        print(f"round {rnd + 1} of {a.rounds} done", file=sys.stderr)

    print(f"\nPageRank, Kronecker scale {a.scale}, edge factor {a.edge_factor}, {a.iters} fixed iterations, "
          f"{a.threads} threads, median of {a.rounds} interleaved rounds\n")
    if gap:
        print(f"gapbs's graph ({sg}, {arcs_sg} arcs), same file for every engine:")
        base = statistics.median(sg_rows["gapbs pr"])
        for name, secs in sg_rows.items():
            s = statistics.median(secs)
            print(f"  {name:<26} {s:8.2f} s  {arcs_sg * a.iters / s / 1e9:7.3f} GE/s  {base / s:6.2f}x gapbs")
    if build_rows:
        print(f"\nbuilding an undirected simple Kronecker graph (generation included), {a.threads} threads:")
        base = statistics.median(sec for sec, _ in build_rows["gapbs"])
        for name, rows in build_rows.items():
            sec = statistics.median(x for x, _ in rows)
            arcs = rows[0][1]
            print(f"  {name:<26} {sec:8.2f} s  {arcs} arcs  {arcs / sec / 1e6:7.1f} M arcs/s  {base / sec:6.2f}x gapbs")
    one = job_rows[0]
    single = statistics.median(r["edges_per_second"] for r in one)
    m = one[0]["edges"]
    print(f"\nember's graph ({m} arcs), the PageRank job:")
    print(f"  {'process':<26} {'GE/s':>7} {'ratio':>6} {'bytes/iter':>12} {'lower bound':>12} "
          f"{'compute s':>10} {'exchange s':>10} {'max MiB/rank':>12}")
    print(f"  {'1 process':<26} {single / 1e9:7.3f} {1:6.2f}")
    measured = {}
    for n in a.ranks:
        rows = job_rows[n]
        ge = statistics.median(r["edges_per_second"] for r in rows)
        r = rows[0]
        sent = statistics.median(x["bytes_per_iteration"] for x in rows)
        bound = 4 * sum(k["mirrors"] for k in r["ranks"])
        comp = statistics.median(max(k["compute_seconds"] for k in x["ranks"]) for x in rows)
        exch = statistics.median(max(k["exchange_seconds"] for k in x["ranks"]) for x in rows)
        mem = max(k["peak_rss_mb"] for k in r["ranks"])
        measured[n] = (comp / r["iterations"], bound)
        print(f"  {f'{n} ranks x {max(1, a.threads // n)} threads':<26} {ge / 1e9:7.3f} {ge / single:6.2f} "
              f"{sent:12.0f} {bound:12.0f} {comp:10.3f} {exch:10.3f} {mem:12.0f}")
    # the estimate for many machines
    multi = sorted(n for n in measured if n > 1)
    if 1 in measured and multi:
        p = a.machines
        c1 = measured[1][0]
        if len(multi) >= 2:
            n1, n2 = multi[0], multi[-1]
            b1, b2 = max(measured[n1][1], 1), max(measured[n2][1], 1)
            slope = math.log(b2 / b1) / math.log(n2 / n1)
        else:
            n2, b2, slope = multi[0], max(measured[multi[0]][1], 1), 1.0
        total = min(b2 * (p / n2) ** slope, 4.0 * one[0]["vertices"] * (p - 1))
        per_machine = total / p
        compute = c1 / p
        exchange = per_machine / (a.bandwidth_gbs * 1e9) + (p - 1) * a.latency_us * 1e-6
        print(f"\nestimate for {p} machines ({a.threads} threads each; network {a.bandwidth_gbs} GB/s per machine, "
              f"{a.latency_us} us per peer; mirrors ~ N^{slope:.2f} from {multi}):")
        print(f"  compute {1e3 * compute:.2f} ms + exchange {1e3 * exchange:.2f} ms per iteration "
              f"({per_machine / 2**20:.1f} MiB per machine): {m / (compute + exchange) / 1e9:.2f} GE/s, "
              f"{(m / (compute + exchange)) / single:.1f}x one process here")


if __name__ == "__main__":
    main()
