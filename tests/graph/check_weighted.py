#!/usr/bin/python3
"""ember's weighted PageRank checked against numpy (float64) and networkx.

Usage: check_weighted.py path/to/libember.so

Writes random weighted graphs (repeated arcs, self-loops, weight-0 arcs, vertices whose
out-arcs all weigh 0, vertices without out-arcs, isolated vertices) as SNAP text and
Matrix Market files, loads them through libember (ctypes), and checks the scores
  - against a float64 power iteration written here with numpy (L1 <= 1e-6), for the
    degree and dense orders, with and without drop_duplicates, 1 and 2 threads (the same
    bits), and a graph large enough for several threads;
  - against networkx.pagerank(weight='weight') on a MultiDiGraph (repeated arcs add),
    when networkx is installed (Debian python3-networkx).
Exits 77 (skipped) without numpy.
"""
import ctypes as C
import os
import random
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("numpy is not installed: skipped")
    sys.exit(77)
try:
    import networkx as nx
except ImportError:
    nx = None

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import graph_ctypes as gc  # noqa: E402
from graph_ctypes import P, GraphOptions, PagerankOptions, PagerankStats, check  # noqa: E402

lib = gc.open_lib(sys.argv[1])


def load(path, **kw):
    o = GraphOptions()
    lib.em_graph_options_init(C.byref(o))
    o.progress = 0
    for k, v in kw.items():
        setattr(o, k, v)
    g = P()
    if lib.em_graph_load(C.byref(g), path.encode(), C.byref(o)):
        raise RuntimeError(lib.em_last_error().decode())
    return g


def pagerank(g, **kw):
    po = PagerankOptions()
    lib.em_pagerank_options_init(C.byref(po))
    po.tol, po.max_iter = 1e-10, 1000
    for k, v in kw.items():
        setattr(po, k, v)
    x, st = P(), PagerankStats()
    if lib.em_graph_pagerank(C.byref(x), None, C.byref(st), g, C.byref(po)):
        raise RuntimeError(lib.em_last_error().decode())
    n = lib.em_tensor_numel(x)
    scores = np.ctypeslib.as_array((C.c_float * n).from_address(lib.em_tensor_data(x))).astype(np.float64)
    lib.em_tensor_release(x)
    return scores, st


def reference(n, src, dst, w, d=0.85):
    """float64 power iteration of x = (1-d)/n + d (A^T (x / W) + dangling / n)."""
    outw = np.bincount(src, weights=w, minlength=n)
    share = np.where(outw[src] > 0, w / np.where(outw[src] > 0, outw[src], 1), 0.0)
    dangling = outw == 0
    x = np.full(n, 1.0 / n)
    for _ in range(10000):
        y = np.bincount(dst, weights=x[src] * share, minlength=n)
        y = d * y + ((1 - d) + d * x[dangling].sum()) / n
        diff = np.abs(y - x).sum()
        x = y
        if diff < 1e-15:
            break
    return x


def random_graph(rng, n, m):
    """Arcs among vertices 0..n-1 with the cases that matter: repeats, loops, weight 0,
    a vertex whose out-arcs weigh 0, one without out-arcs, the last one isolated."""
    src, dst, w = [], [], []
    for _ in range(m):
        u, v = rng.randrange(n - 3), rng.randrange(n - 1)
        src.append(u), dst.append(v), w.append(rng.choice([0.0, 0.25, 1.0, 2.5, rng.random() * 100]))
    for u in range(0, n - 3, 7):  # repeated arcs
        src.append(u), dst.append(src[u]), w.append(0.5)
        src.append(u), dst.append(src[u]), w.append(1.5)
    src += [5, 9, n - 3, n - 3]  # loops (one of weight 0); n-3's out-arcs all weigh 0
    dst += [5, 9, 1, 2]
    w += [3.0, 0.0, 0.0, 0.0]
    # n-2 has no out-arcs (a target above), n-1 appears nowhere
    src.append(1), dst.append(n - 2), w.append(1.0)
    return np.array(src), np.array(dst), np.array(w, dtype=np.float32).astype(np.float64)


def write_snap(path, src, dst, w, ids):
    with open(path, "w") as f:
        f.write("# u v weight\n")
        for u, v, x in zip(src, dst, w):
            f.write(f"{ids[u]}\t{ids[v]} {x!r}\n")


def write_mtx(path, n, src, dst, w):
    with open(path, "w") as f:
        f.write(f"%%MatrixMarket matrix coordinate real general\n{n} {n} {len(src)}\n")
        for u, v, x in zip(src, dst, w):
            f.write(f"{u + 1} {v + 1} {x!r}\n")


def main():
    rng = random.Random(7)
    tmp = tempfile.mkdtemp()
    for n, m, threads in [(300, 2000, (1, 2)), (30000, 300000, (1, 2, 4))]:
        src, dst, w = random_graph(rng, n, m)
        # Matrix Market: every vertex (the last is isolated)
        mtx = os.path.join(tmp, f"g{n}.mtx")
        write_mtx(mtx, n, src, dst, w)
        ref = reference(n, src, dst, w)
        # SNAP: sparse ids (x 3 + 10); the isolated vertex is absent there
        ids = [3 * i + 10 for i in range(n)]
        snap = os.path.join(tmp, f"g{n}.txt")
        write_snap(snap, src, dst, w, ids)
        present = sorted(set(src.tolist()) | set(dst.tolist()))
        dense = {v: i for i, v in enumerate(present)}
        sref = reference(len(present), np.array([dense[u] for u in src]), np.array([dense[v] for v in dst]), w)
        for path, want, what in [(mtx, ref, "mtx"), (snap, sref, "snap")]:
            for reorder in (0, 1):
                for dedup in (0, 1):
                    first = None
                    for t in threads:
                        lib.em_set_num_threads(t)
                        g = load(path, reorder=reorder, drop_duplicates=dedup)
                        x, st = pagerank(g)
                        name = f"{what} n={n} reorder={reorder} dedup={dedup} threads={t}"
                        if first is None:
                            err = np.abs(x - want).sum()
                            check(lib.em_graph_is_weighted(g) == 1 and st.weighted == 1 and
                                  st.engine == b"cpu:weighted" and err <= 1e-6, f"{name}: L1 {err:.2e} from numpy")
                            first = x
                        else:
                            check(np.array_equal(first, x), f"{name}: the same bits as {threads[0]} thread(s)")
                        lib.em_graph_free(g)
            if nx is not None and n <= 1000:
                G = nx.MultiDiGraph()
                G.add_nodes_from(range(len(want)))
                d = dense if what == "snap" else {i: i for i in range(n)}
                G.add_weighted_edges_from((d[u], d[v], x) for u, v, x in zip(src.tolist(), dst.tolist(), w.tolist()))
                pr = nx.pagerank(G, alpha=0.85, weight="weight", tol=1e-13, max_iter=10000)
                g = load(path)
                x, _ = pagerank(g)
                lib.em_graph_free(g)
                err = sum(abs(x[i] - pr[i]) for i in range(len(want)))
                check(err <= 1e-6, f"{what} n={n}: L1 {err:.2e} from networkx (weight='weight')")
    lib.em_set_num_threads(2)
    if gc.report():
        sys.exit(1)
    print("all weighted graph checks passed")


main()
