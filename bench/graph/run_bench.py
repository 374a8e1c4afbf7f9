#!/usr/bin/python3
"""PageRank side by side: ember against igraph (and scipy) on the same Kronecker graphs.

    bench/graph/run_bench.py [--scales 22 23] [--edge-factor 16] [--threads 2] [--iters 20]
                             [--bench build/bench/pagerank_bench] [--keep DIR]

For each scale, ember (bench/graph/pagerank_bench) generates the Graph500 Kronecker graph
(seed 1, self-loops and repeated arcs dropped, so that every peer sees one simple directed
graph), runs 20 fixed iterations on --threads threads (best of 3 runs) and writes the
arcs as .npy. Each peer then runs in its own process on those arrays:
  - igraph (python3-igraph): Graph.pagerank(), PRPACK, which solves to its own tolerance
    (about 1e-10) and reports no iteration count: its row gives the total time, set
    against ember run to convergence (tol 1e-7, the float32 floor) on the same graph;
  - scipy: the power iteration networkx uses (a sparse matrix-vector product per step),
    20 fixed iterations, one thread (scipy.sparse has no threads).
Printed per peer: ms per iteration, GE/s (arcs x iterations / seconds), the ratio to
ember, peak resident memory of its process, and the L1 distance of its scores to ember's.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PEER = textwrap.dedent(r"""
    import json, resource, sys, time
    import numpy as np
    prefix, peer, iters = sys.argv[1], sys.argv[2], int(sys.argv[3])
    src = np.load(prefix + "_src.npy"); dst = np.load(prefix + "_dst.npy")
    n = int(max(src.max(), dst.max())) + 1 if len(src) else 0
    n = max(n, int(open(prefix + "_n.txt").read()))
    m = len(src)
    # igraph converges: compare with ember converged; scipy runs the same 20 steps as ember
    ours = np.fromfile(prefix + ("_conv.f32" if peer == "igraph" else "_scores.f32"), dtype=np.float32)
    ours = ours.astype(np.float64)
    out = {"peer": peer, "arcs": m}
    if peer == "igraph":
        import igraph as ig
        t = time.perf_counter()
        g = ig.Graph(n=n, edges=np.column_stack([src, dst]), directed=True)
        out["build_s"] = time.perf_counter() - t
        t = time.perf_counter()
        x = np.array(g.pagerank(damping=0.85))
        out["total_s"] = time.perf_counter() - t
    else:
        import scipy.sparse as sp
        t = time.perf_counter()
        A = sp.csr_matrix((np.ones(m), (dst, src)), shape=(n, n))   # A[v, u]: arc u -> v
        outdeg = np.bincount(src, minlength=n).astype(np.float64)
        inv = np.divide(1.0, outdeg, out=np.zeros(n), where=outdeg > 0)
        dangling = outdeg == 0
        out["build_s"] = time.perf_counter() - t
        x = np.full(n, 1.0 / n)
        t = time.perf_counter()
        for _ in range(iters):
            x = 0.85 * (A @ (x * inv)) + (0.15 + 0.85 * x[dangling].sum()) / n
        out["total_s"] = time.perf_counter() - t
        out["ms_per_iter"] = 1e3 * out["total_s"] / iters
        out["ge_per_s"] = m * iters / out["total_s"] / 1e9
    out["l1_to_ember"] = float(np.abs(x / x.sum() - ours).sum())
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))
""")


def run_json(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scales", type=int, nargs="+", default=[22])
    ap.add_argument("--edge-factor", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "bench", "pagerank_bench"))
    ap.add_argument("--peers", nargs="+", default=["igraph", "scipy"])
    ap.add_argument("--keep", help="folder for the .npy arcs (default: a temporary one)")
    a = ap.parse_args()
    if not os.path.exists(a.bench):
        sys.exit(f"{a.bench} not found: build the pagerank_bench target (bench/graph/CMakeLists.txt)")
    work = a.keep or tempfile.mkdtemp(prefix="ember_graph_bench_")
    os.makedirs(work, exist_ok=True)
    py = "/usr/bin/python3"
    rows = []
    for scale in a.scales:
        prefix = os.path.join(work, f"kron{scale}")
        base = [a.bench, "--scale", str(scale), "--edge-factor", str(a.edge_factor), "--threads", str(a.threads),
                "--dedup", "--no-self-loops"]
        # the converged run also exports the arcs, so that the timed run's peak memory is
        # PageRank's own
        fixed = run_json(base + ["--iters", str(a.iters), "--repeat", "3", "--scores", prefix + "_scores.f32"])
        conv = run_json(base + ["--iters", "200", "--tol", "1e-7", "--scores", prefix + "_conv.f32", "--edges-npy",
                                prefix])
        open(prefix + "_n.txt", "w").write(str(fixed["vertices"]))
        rows.append((scale, "ember", fixed, conv))
        for peer in a.peers:
            try:
                rows.append((scale, peer, run_json([py, "-c", PEER, prefix, peer, str(a.iters)]), None))
            except SystemExit as e:
                print(f"{peer}: skipped ({str(e).splitlines()[-1]})", file=sys.stderr)
        for f in ("_src.npy", "_dst.npy", "_scores.f32", "_conv.f32", "_n.txt"):
            if not a.keep:
                os.remove(prefix + f)
    print(f"\nPageRank, Kronecker graphs (Graph500, edge factor {a.edge_factor}, seed 1, simple), "
          f"{a.iters} fixed iterations, ember on {a.threads} threads\n")
    print(f"{'scale':>5} {'peer':<8} {'arcs':>11} {'ms/iter':>9} {'GE/s':>7} {'ratio':>7} {'total s':>8} "
          f"{'peak MiB':>9} {'L1 to ember':>12}")
    ember = {}
    for scale, peer, r, conv in rows:
        if peer == "ember":
            ember[scale] = (r, conv)
            print(f"{scale:>5} {'ember':<8} {r['arcs']:>11} {r['ms_per_iter']:>9.1f} {r['ge_per_s']:>7.3f} {'1.00':>7} "
                  f"{r['ms_per_iter'] * r['iterations'] / 1e3:>8.2f} {r['peak_rss_mib']:>9.0f} {'':>12}")
            print(f"{'':>5} {'  to 1e-7':<8} {'':>11} {conv['ms_per_iter']:>9.1f} {conv['ge_per_s']:>7.3f} {'':>7} "
                  f"{conv['ms_per_iter'] * conv['iterations'] / 1e3:>8.2f} {'':>9} {'':>12}  "
                  f"({conv['iterations']} iterations)")
        elif "ms_per_iter" in r:
            e = ember[scale][0]
            print(f"{scale:>5} {peer:<8} {r['arcs']:>11} {r['ms_per_iter']:>9.1f} {r['ge_per_s']:>7.3f} "
                  f"{r['ms_per_iter'] / e['ms_per_iter']:>7.2f} {r['total_s']:>8.2f} {r['peak_rss_mib']:>9.0f} "
                  f"{r['l1_to_ember']:>12.2e}")
        else:
            conv = ember[scale][1]
            total = conv["ms_per_iter"] * conv["iterations"] / 1e3
            print(f"{scale:>5} {peer:<8} {r['arcs']:>11} {'-':>9} {'-':>7} {r['total_s'] / total:>7.2f} "
                  f"{r['total_s']:>8.2f} {r['peak_rss_mib']:>9.0f} {r['l1_to_ember']:>12.2e}  (to convergence)")
    print("\nratio: the peer's time over ember's (fixed iterations; for igraph, time to convergence).")
    print("L1 to ember: igraph's scores against ember's converged ones (expect ~1e-7);"
          " scipy's 20th iterate against ember's (expect ~1e-7).")


if __name__ == "__main__":
    main()
