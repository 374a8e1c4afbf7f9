#!/usr/bin/python3
"""ember's graph engine checked against networkx (and igraph, scipy when installed).

Usage: check_networkx.py path/to/libember.so

Drives libember through ctypes: generates and loads graphs, runs PageRank, and checks
  - scores against networkx.pagerank (L1 <= 1e-6) on Kronecker (multi-arcs kept, as a
    MultiDiGraph; and simple, as a DiGraph), uniform undirected and personalised graphs;
  - the same graphs against igraph's PRPACK (simple graphs: igraph and networkx agree);
  - a SNAP fixture's arcs against a parse in Python;
  - Kendall's tau of compare_indegree against scipy.stats.kendalltau.
Exits 77 (skipped) when networkx is missing (Debian: python3-networkx).
"""
import ctypes as C
import os
import sys

try:
    import networkx as nx
except ImportError:
    print("networkx is not installed (apt-get install python3-networkx): skipped")
    sys.exit(77)
try:
    import igraph
except ImportError:
    igraph = None
try:
    from scipy.stats import kendalltau
except ImportError:
    kendalltau = None

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import graph_ctypes as gc  # noqa: E402
from graph_ctypes import P, Comparison, GraphOptions, PagerankOptions, check  # noqa: E402

lib = gc.open_lib(sys.argv[1])


def call(status, what):
    if status:
        raise RuntimeError(f"{what}: {lib.em_last_error().decode()}")


def options(**kw):
    o = GraphOptions()
    lib.em_graph_options_init(C.byref(o))
    o.progress = 0
    for k, v in kw.items():
        setattr(o, k, v)
    return o


def tensor_values(t, ctype):
    n = lib.em_tensor_numel(t)
    return list((ctype * n).from_address(lib.em_tensor_data(t)))


def arcs(g):
    s, d = P(), P()
    call(lib.em_graph_edges(g, C.byref(s), C.byref(d)), "edges")
    out = list(zip(tensor_values(s, C.c_int64), tensor_values(d, C.c_int64)))
    lib.em_tensor_release(s)
    lib.em_tensor_release(d)
    return out


def pagerank(g, personalization=None):
    po = PagerankOptions()
    lib.em_pagerank_options_init(C.byref(po))
    po.tol, po.max_iter = 1e-9, 1000
    p = None
    if personalization is not None:
        n = C.c_int64(len(personalization))
        p = P()
        call(lib.em_empty(C.byref(p), 1, C.byref(n), 1, 0), "empty")  # float64 on the CPU
        (C.c_double * len(personalization)).from_address(lib.em_tensor_data(p))[:] = personalization
        po.personalization = p
    x = P()
    call(lib.em_graph_pagerank(C.byref(x), None, None, g, C.byref(po)), "pagerank")
    scores = tensor_values(x, C.c_float)
    lib.em_tensor_release(x)
    if p:
        lib.em_tensor_release(p)
    return scores


def l1(a, b):
    return sum(abs(x - y) for x, y in zip(a, b))


def compare(name, g, nxg, personalization=None, igraph_too=False):
    n = lib.em_graph_num_vertices(g)
    ours = pagerank(g, personalization)
    pers = {v: personalization[v] for v in range(n)} if personalization else None
    ref = nx.pagerank(nxg, alpha=0.85, personalization=pers, tol=1e-13, max_iter=1000)
    theirs = [ref[v] for v in range(n)]
    err = l1(ours, theirs)
    check(err <= 1e-6, f"{name}: L1 {err:.2e} from networkx ({n} vertices)")
    if igraph_too and igraph is not None:
        ig = igraph.Graph(n=n, edges=list(nxg.edges()), directed=nxg.is_directed())
        err = l1(ours, ig.pagerank(damping=0.85))
        check(err <= 1e-6, f"{name}: L1 {err:.2e} from igraph (PRPACK)")


def networkx_graph(g, kind):
    nxg = kind()
    nxg.add_nodes_from(range(lib.em_graph_num_vertices(g)))
    nxg.add_edges_from(arcs(g))
    return nxg


def main():
    lib.em_set_num_threads.argtypes = [C.c_int]
    lib.em_set_num_threads(2)

    # Kronecker, every generated arc kept: networkx weighs repeated arcs as a MultiDiGraph
    g = P()
    o = options()
    call(lib.em_graph_kronecker(C.byref(g), 10, 8, 1, C.byref(o)), "kronecker")
    compare("kronecker 10/8 multi-arcs", g, networkx_graph(g, nx.MultiDiGraph))
    lib.em_graph_free(g)

    # simple directed Kronecker graph, with a teleport vector; igraph agrees on simple graphs
    g = P()
    o = options(drop_duplicates=1, drop_self_loops=1)
    call(lib.em_graph_kronecker(C.byref(g), 10, 16, 2, C.byref(o)), "kronecker")
    nxg = networkx_graph(g, nx.DiGraph)
    compare("kronecker 10/16 simple", g, nxg, igraph_too=True)
    n = lib.em_graph_num_vertices(g)
    compare("kronecker 10/16 personalised", g, nxg, personalization=[float((v * 7) % 5) for v in range(n)])

    # in-degree comparison: Kendall's tau-b against scipy over the union of the top 50
    x = P()
    po = PagerankOptions()
    lib.em_pagerank_options_init(C.byref(po))
    call(lib.em_graph_pagerank(C.byref(x), None, None, g, C.byref(po)), "pagerank")
    cmp = Comparison()
    call(lib.em_graph_compare_indegree(C.byref(cmp), g, x, 50), "compare_indegree")
    scores = tensor_values(x, C.c_float)
    indeg = [0] * n
    for s, d in arcs(g):
        indeg[d] += 1
    rank = lambda v: sorted(range(n), key=lambda i: (-v[i], i))[:50]
    top_pr, top_deg = rank(scores), rank(indeg)
    union = top_pr + [v for v in top_deg if v not in set(top_pr)]
    check(cmp.overlap == len(set(top_pr) & set(top_deg)) and cmp.union_size == len(union),
          f"compare_indegree: overlap {cmp.overlap} of 50, union {cmp.union_size}")
    if kendalltau is not None:
        tau = kendalltau([scores[v] for v in union], [indeg[v] for v in union]).statistic
        check(abs(tau - cmp.kendall_tau) < 1e-9, f"compare_indegree: tau {cmp.kendall_tau:.6f}, scipy {tau:.6f}")
    lib.em_tensor_release(x)
    lib.em_graph_free(g)

    # uniform, undirected
    g = P()
    o = options(directed=0, drop_duplicates=1, drop_self_loops=1)
    call(lib.em_graph_uniform(C.byref(g), 2000, 8000, 3, C.byref(o)), "uniform")
    nxg = nx.Graph()
    nxg.add_nodes_from(range(2000))
    nxg.add_edges_from(arcs(g))
    compare("uniform undirected", g, nxg, igraph_too=True)
    lib.em_graph_free(g)

    # a SNAP file: arcs in original ids as Python reads them
    path = os.path.join(HERE, "small.snap")
    g = P()
    o = options()
    call(lib.em_graph_load(C.byref(g), path.encode(), C.byref(o)), "load")
    want = []
    for line in open(path):
        f = line.split()
        if f and not f[0].startswith("#"):
            want.append((int(f[0]), int(f[1])))
    got = [(lib.em_graph_original_id(g, s), lib.em_graph_original_id(g, d)) for s, d in arcs(g)]
    check(sorted(got) == sorted(want), f"small.snap: {len(got)} arcs as Python reads them")
    lib.em_graph_free(g)

    if gc.report():
        sys.exit(1)
    print("all graph checks passed")


main()
