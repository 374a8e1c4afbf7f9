"""libember's graph API through ctypes, for the graph checks in this folder.

    import graph_ctypes as gc
    lib = gc.open_lib(sys.argv[1])
    ... gc.check(ok, "what") ...; sys.exit(gc.report())

The structures mirror runtime/include/ember/graph.h field for field (its *_init functions
write every field): change them there and here together.
"""
import ctypes as C

P = C.c_void_p


class GraphOptions(C.Structure):  # em_graph_options
    _fields_ = [(name, C.c_int32) for name in
                ("format", "directed", "reverse", "drop_self_loops", "drop_duplicates", "reorder", "progress",
                 "verify", "weights")]


class PagerankOptions(C.Structure):  # em_pagerank_options
    _fields_ = [("damping", C.c_double), ("tol", C.c_double), ("max_iter", C.c_int32), ("method", C.c_int32),
                ("personalization", C.c_void_p), ("device_type", C.c_int32), ("device_index", C.c_int32),
                ("blocking", C.c_int32), ("weights", C.c_int32)]


class PagerankStats(C.Structure):  # em_pagerank_stats
    _fields_ = [("iterations", C.c_int32), ("converged", C.c_int32), ("residual", C.c_double),
                ("seconds", C.c_double), ("setup_seconds", C.c_double), ("edges_per_second", C.c_double),
                ("method", C.c_int32), ("weighted", C.c_int32), ("engine", C.c_char_p)]


class Comparison(C.Structure):  # em_rank_comparison
    _fields_ = [("k", C.c_int64), ("overlap", C.c_int64), ("union_size", C.c_int64), ("kendall_tau", C.c_double)]


SIGNATURES = [
    ("em_last_error", C.c_char_p, []),
    ("em_graph_options_init", None, [P]),
    ("em_pagerank_options_init", None, [P]),
    ("em_graph_kronecker", C.c_int, [P, C.c_int32, C.c_int32, C.c_uint64, P]),
    ("em_graph_uniform", C.c_int, [P, C.c_int64, C.c_int64, C.c_uint64, P]),
    ("em_graph_load", C.c_int, [P, C.c_char_p, P]),
    ("em_graph_free", None, [P]),
    ("em_graph_num_vertices", C.c_int64, [P]),
    ("em_graph_num_edges", C.c_int64, [P]),
    ("em_graph_is_weighted", C.c_int, [P]),
    ("em_graph_original_id", C.c_int64, [P, C.c_int64]),
    ("em_graph_edges", C.c_int, [P, P, P]),
    ("em_graph_pagerank", C.c_int, [P, P, P, P, P]),
    ("em_graph_compare_indegree", C.c_int, [P, P, P, C.c_int64]),
    ("em_graph_degrees", C.c_int, [P, P, P]),
    ("em_tensor_data", P, [P]),
    ("em_tensor_numel", C.c_int64, [P]),
    ("em_tensor_release", None, [P]),
    ("em_empty", C.c_int, [P, C.c_int, P, C.c_int, C.c_int64]),
    ("em_set_num_threads", None, [C.c_int]),
]


def open_lib(path):
    """libember at path, with the signatures above declared."""
    lib = C.CDLL(path)
    for name, res, args in SIGNATURES:
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib


failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def report():
    """The exit status: 1 (and how many failed) when any check failed, else 0."""
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    return 0
