/* test_graph_weighted.c - weighted graphs: Matrix Market values and SNAP third columns as
 * arc weights, the CSR builder carrying them (every strategy, duplicates added), .emg
 * round trips, weighted PageRank against a float64 reference computed here from the
 * test's own edge list (dangling vertices, zero weights, self-loops, duplicates, isolated
 * vertices), its determinism over thread counts, and every bad weight as a file:line error. */
#include <stdint.h>
#include "test_util.h"
#include "ember/graph.h"
#include "graph/graph_impl.h"
#include "test_graph_util.h"

typedef struct wedge {
  int64_t u, v; /* original ids */
  double w;
} wedge;

/* A small directed graph with everything at once. Ids 0..7 (SNAP) or 1..8 (Matrix
 * Market, + 1). Vertex 5 has only weight-0 out-arcs (dangling), 6 has no out-arcs
 * (dangling), 7 is named by no edge in SNAP (absent) and isolated in Matrix Market (the
 * size line declares it). 0 -> 1 appears twice, 2 -> 2 is a self-loop. */
static const wedge EDGES[] = {{0, 1, 1.5}, {0, 2, 0.5}, {0, 1, 2.5}, {1, 2, 3},    {2, 0, 1},   {2, 2, 0.25},
                              {2, 3, 2},   {3, 4, 1},   {4, 0, 0.125}, {4, 6, 7}, {5, 0, 0},   {5, 4, 0},
                              {3, 5, 1e-3}, {1, 6, 4},  {6, 6, 0}};
#define NEDGES ((int64_t)(sizeof EDGES / sizeof EDGES[0]))

/* float64 power iteration from an edge list (dense ids, n vertices), to 1e-15: the
 * weighted definition of ember/graph.h, computed without the library. undirected: each
 * edge u != v is both arcs. */
static double *reference(int64_t n, const wedge *e, int64_t m, bool undirected, double damping) {
  double *outw = calloc((size_t)n, sizeof *outw), *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * 8);
  for (int64_t k = 0; k < m; k++) {
    outw[e[k].u] += e[k].w;
    if (undirected && e[k].u != e[k].v) outw[e[k].v] += e[k].w;
  }
  for (int64_t v = 0; v < n; v++) x[v] = 1.0 / (double)n;
  for (int it = 0; it < 100000; it++) {
    double dangling = 0, diff = 0;
    for (int64_t v = 0; v < n; v++) {
      if (!(outw[v] > 0)) dangling += x[v];
      y[v] = 0;
    }
    for (int64_t k = 0; k < m; k++) { /* a source of out-weight 0 sends nothing: it is dangling */
      if (outw[e[k].u] > 0) y[e[k].v] += x[e[k].u] * e[k].w / outw[e[k].u];
      if (undirected && e[k].u != e[k].v && outw[e[k].v] > 0) y[e[k].u] += x[e[k].v] * e[k].w / outw[e[k].v];
    }
    for (int64_t v = 0; v < n; v++) {
      y[v] = damping * y[v] + ((1 - damping) + damping * dangling) / (double)n;
      diff += fabs(y[v] - x[v]);
    }
    double *t = x;
    x = y, y = t;
    if (diff < 1e-15) break;
  }
  free(y), free(outw);
  return x;
}

static const char *write_snap(const char *name, const wedge *e, int64_t m) {
  static char text[1 << 14];
  size_t len = (size_t)snprintf(text, sizeof text, "# weighted\n");
  for (int64_t k = 0; k < m; k++)
    len += (size_t)snprintf(text + len, sizeof text - len, "%lld\t%lld %.17g\n", (long long)e[k].u, (long long)e[k].v,
                            e[k].w);
  return tg_text(name, text);
}

static const char *write_mtx(const char *name, const char *banner, int64_t n, const wedge *e, int64_t m) {
  static char text[1 << 14];
  size_t len = (size_t)snprintf(text, sizeof text, "%%%%MatrixMarket matrix coordinate %s\n%% c\n%lld %lld %lld\n",
                                banner, (long long)n, (long long)n, (long long)m);
  for (int64_t k = 0; k < m; k++)
    len += (size_t)snprintf(text + len, sizeof text - len, "%lld %lld %.17g\n", (long long)e[k].u + 1,
                            (long long)e[k].v + 1, e[k].w);
  return tg_text(name, text);
}

static em_graph *load(const char *path, const em_graph_options *o) {
  em_graph *g = NULL;
  if (em_graph_load(&g, path, o)) fail_msg("load %s: %s", path, em_last_error());
  return g;
}

static em_pagerank_options exact(void) {
  em_pagerank_options po;
  em_pagerank_options_init(&po);
  po.tol = 1e-10;
  po.max_iter = 1000;
  return po;
}

static void expect_close(const em_graph *g, const double *ref, const char *what) {
  em_pagerank_options po = exact();
  em_pagerank_stats st;
  float *x = tg_pagerank(g, &po, &st);
  int64_t n = em_graph_num_vertices(g);
  double l1 = tg_l1(x, ref, n);
  if (!(l1 <= 1e-6)) fail_msg("%s: L1 %g from the float64 reference", what, l1);
  assert_int_equal(st.weighted, 1);
  assert_string_equal(st.engine, "cpu:weighted");
  free(x);
}

static void test_pagerank_snap_and_mtx(void **state) {
  (void)state;
  double *ref = reference(7, EDGES, NEDGES, false, 0.85); /* SNAP: 7 vertices (id 7 absent) */
  const char *snap = write_snap("w.txt", EDGES, NEDGES);
  for (int reorder = 0; reorder <= 1; reorder++) {
    em_graph_options o = tg_opts(reorder);
    em_graph *g = load(snap, &o);
    assert_true(em_graph_is_weighted(g));
    assert_int_equal(em_graph_num_vertices(g), 7);
    assert_int_equal(em_graph_num_edges(g), NEDGES);
    expect_close(g, ref, reorder ? "snap, degree order" : "snap, dense order");
    em_graph_free(g);
    o.drop_duplicates = 1; /* 0 -> 1 becomes one arc of weight 4: the same ranking */
    g = load(snap, &o);
    assert_int_equal(em_graph_num_edges(g), NEDGES - 1);
    expect_close(g, ref, "snap, duplicates dropped (weights added)");
    em_graph_free(g);
  }
  free(ref);
  /* Matrix Market: vertex 8 (dense 7) is declared, isolated */
  ref = reference(8, EDGES, NEDGES, false, 0.85);
  for (int reorder = 0; reorder <= 1; reorder++) {
    em_graph_options o = tg_opts(reorder);
    em_graph *g = load(write_mtx("w.mtx", "real general", 8, EDGES, NEDGES), &o);
    assert_int_equal(em_graph_num_vertices(g), 8);
    expect_close(g, ref, "mtx real general");
    em_graph_free(g);
  }
  free(ref);
  /* symmetric: both arcs of an off-diagonal entry carry its value (integer and real) */
  static const wedge SYM[] = {{1, 0, 2}, {2, 0, 0.5}, {2, 2, 3}, {3, 1, 1}, {4, 3, 0}};
  static const wedge ISYM[] = {{1, 0, 2}, {2, 0, 1}, {2, 2, 3}, {3, 1, 1}, {4, 3, 0}};
  for (int k = 0; k < 2; k++) {
    ref = reference(6, k ? SYM : ISYM, 5, true, 0.85);
    em_graph_options o = tg_opts(1);
    em_graph *g = load(write_mtx("s.mtx", k ? "real symmetric" : "integer symmetric", 6, k ? SYM : ISYM, 5), &o);
    assert_false(em_graph_is_directed(g));
    assert_int_equal(em_graph_num_edges(g), 9);
    expect_close(g, ref, k ? "mtx real symmetric" : "mtx integer symmetric");
    em_graph_free(g);
    free(ref);
  }
}

static void test_weights_follow_the_arcs(void **state) {
  (void)state;
  em_graph_options o = tg_opts(1);
  o.drop_duplicates = 1;
  em_graph *g = load(write_snap("d.txt", EDGES, NEDGES), &o);
  em_tensor *s = NULL, *d = NULL, *w = NULL;
  assert_int_equal(em_graph_edges(g, &s, &d), EM_OK);
  assert_int_equal(em_graph_edge_weights(g, &w), EM_OK);
  const int64_t *ps = em_tensor_data(s), *pd = em_tensor_data(d);
  const float *pw = em_tensor_data(w);
  for (int64_t e = 0; e < em_graph_num_edges(g); e++) { /* each arc's weight: the sum of its copies in the list */
    double want = 0;
    for (int64_t k = 0; k < NEDGES; k++)
      if (EDGES[k].u == ps[e] && EDGES[k].v == pd[e]) want += EDGES[k].w;
    if ((float)want != pw[e])
      fail_msg("arc %lld -> %lld weighs %g, expected %g", (long long)ps[e], (long long)pd[e], pw[e], want);
  }
  em_tensor_release(s), em_tensor_release(d), em_tensor_release(w);
  em_graph_free(g);
  /* unweighted graphs report weight 1 */
  g = load(tg_text("u.txt", "0 1\n1 2\n"), &o);
  assert_false(em_graph_is_weighted(g));
  assert_int_equal(em_graph_edge_weights(g, &w), EM_OK);
  assert_true(((float *)em_tensor_data(w))[0] == 1 && ((float *)em_tensor_data(w))[1] == 1);
  em_tensor_release(w);
  em_graph_free(g);
}

/* Every builder strategy (per-worker counters or atomics, edges kept or scanned twice)
 * and any thread count give the same CSR, and PageRank the same bits. */
static void test_deterministic(void **state) {
  (void)state;
  /* a file of several chunks: 300000 lines of pseudo-random weighted arcs */
  size_t cap = 300000 * 32, len = 0;
  char *text = malloc(cap);
  uint64_t r = 12345;
  for (int i = 0; i < 300000; i++) {
    r = r * 6364136223846793005ULL + 1442695040888963407ULL;
    unsigned u = (unsigned)(r >> 33) % 5000, v = (unsigned)(r >> 17) % 5000, w = (unsigned)(r >> 5) % 1000;
    len += (size_t)snprintf(text + len, cap - len, "%u %u %u.%03u\n", u, v, w % 7, w);
  }
  const char *path = tg_write("big.txt", text, len);
  free(text);
  float *first[2] = {NULL, NULL}; /* by drop_duplicates: added weights round differently */
  int64_t n = 0;
  for (int k = 0; k < 6; k++) {
    int threads[] = {1, 2, 3, 4, 2, 2}, strategy[] = {0, 1, 2, 0, 1, 2}, keep[] = {0, 1, 1, -1, -1, 0};
    em_set_num_threads(threads[k]);
    gr_build_strategy = strategy[k];
    gr_build_keep = keep[k];
    em_graph_options o = tg_opts(1);
    o.drop_duplicates = k % 2;
    em_graph *g = load(path, &o);
    em_pagerank_options po = exact();
    po.tol = 0, po.max_iter = 30;
    float *x = tg_pagerank(g, &po, NULL);
    n = em_graph_num_vertices(g);
    if (!first[k % 2]) first[k % 2] = x;
    else {
      if (memcmp(first[k % 2], x, (size_t)n * sizeof *x)) fail_msg("run %d: scores differ from run %d's", k, k % 2);
      free(x);
    }
    em_graph_free(g);
  }
  gr_build_strategy = 0;
  gr_build_keep = 0;
  em_set_num_threads(2);
  free(first[0]), free(first[1]);
}

static void test_options(void **state) {
  (void)state;
  em_graph_options o = tg_opts(1);
  const char *snap = write_snap("o.txt", EDGES, NEDGES);
  em_graph *g = load(snap, &o);
  /* weights off: the scores of the same file loaded without its weights */
  em_pagerank_options po = exact();
  po.weights = EM_PAGERANK_WEIGHTS_OFF;
  em_pagerank_stats st;
  float *off = tg_pagerank(g, &po, &st);
  assert_int_equal(st.weighted, 0);
  assert_string_not_equal(st.engine, "cpu:weighted");
  o.weights = 0;
  em_graph *u = load(snap, &o);
  assert_false(em_graph_is_weighted(u));
  float *plain = tg_pagerank(u, &po, NULL);
  assert_memory_equal(off, plain, 7 * sizeof(float));
  double *ref = tg_reference(u, 0.85, NULL); /* the unweighted reference */
  assert_true(tg_l1(off, ref, 7) <= 1e-6);
  free(ref), free(off), free(plain);
  /* weights on: an unweighted graph is an error; a bad value too */
  po.weights = EM_PAGERANK_WEIGHTS_ON;
  em_tensor *t = NULL;
  tg_expect_error(em_graph_pagerank(&t, NULL, NULL, u, &po), EM_ERR_ARGUMENT, "weights = on", "no edge weights", NULL);
  po.weights = 7;
  tg_expect_error(em_graph_pagerank(&t, NULL, NULL, g, &po), EM_ERR_ARGUMENT, "weights is 7", NULL);
  /* blocking and Gauss-Seidel: weighted runs take the plain pull */
  po = exact();
  po.blocking = EM_PAGERANK_BLOCKING_TILES;
  double *wref = reference(7, EDGES, NEDGES, false, 0.85);
  float *x = tg_pagerank(g, &po, &st);
  assert_string_equal(st.engine, "cpu:weighted");
  assert_true(tg_l1(x, wref, 7) <= 1e-6);
  free(x);
  po.method = EM_PAGERANK_GAUSS_SEIDEL;
  x = tg_pagerank(g, &po, &st);
  assert_true(tg_l1(x, wref, 7) <= 1e-6);
  free(x), free(wref);
  em_graph_free(u);
  em_graph_free(g);
}

static void test_ember_format(void **state) {
  (void)state;
  em_graph_options o = tg_opts(1);
  em_graph *g = load(write_snap("f.txt", EDGES, NEDGES), &o);
  const char *path = tg_path("w.emg");
  assert_int_equal(em_graph_save(g, path), EM_OK);
  FILE *f = fopen(path, "rb");
  uint32_t version = 0;
  assert_int_equal(fseek(f, 8, SEEK_SET), 0);
  assert_int_equal(fread(&version, 4, 1, f), 1);
  fclose(f);
  assert_int_equal(version, 2); /* weighted files are version 2 */
  em_graph *h = load(path, &o);
  assert_true(em_graph_is_weighted(h));
  em_pagerank_options po = exact();
  float *a = tg_pagerank(g, &po, NULL), *b = tg_pagerank(h, &po, NULL);
  assert_memory_equal(a, b, 7 * sizeof(float));
  free(b);
  em_graph_free(h);
  /* rebuilt on load (dense order, undirected): the weights travel */
  o.reorder = 0;
  h = load(path, &o);
  assert_true(em_graph_is_weighted(h));
  b = tg_pagerank(h, &po, NULL);
  double *ref = reference(7, EDGES, NEDGES, false, 0.85);
  assert_true(tg_l1(b, ref, 7) <= 1e-6);
  free(a), free(b), free(ref);
  em_graph_free(h);
  o.weights = 0; /* loaded without its weights */
  h = load(path, &o);
  assert_false(em_graph_is_weighted(h));
  em_graph_free(h);
  em_graph_free(g);
  /* an unweighted graph is still written as version 1 */
  o = tg_opts(1);
  g = load(tg_text("u.txt", "0 1\n1 2\n"), &o);
  assert_int_equal(em_graph_save(g, path), EM_OK);
  f = fopen(path, "rb");
  assert_int_equal(fseek(f, 8, SEEK_SET), 0);
  assert_int_equal(fread(&version, 4, 1, f), 1);
  fclose(f);
  assert_int_equal(version, 1);
  em_graph_free(g);
  /* a damaged weight (checksums off, so the structure check finds it) */
  o = tg_opts(1);
  g = load(write_snap("f.txt", EDGES, NEDGES), &o);
  assert_int_equal(em_graph_save(g, path), EM_OK);
  em_graph_free(g);
  f = fopen(path, "r+b");
  char head[512];
  assert_int_equal(fread(head, 1, sizeof head, f), sizeof head);
  uint64_t where = 0;
  for (int i = 0; i < 12; i++) { /* the section table: 32-byte entries from byte 88 (id, size, offset, ...) */
    uint32_t id;
    memcpy(&id, head + 88 + 32 * i, 4);
    if (id == 9) memcpy(&where, head + 88 + 32 * i + 8, 8); /* 9: weights */
  }
  assert_true(where >= 512);
  float bad = -1;
  assert_int_equal(fseek(f, (long)where, SEEK_SET), 0);
  assert_int_equal(fwrite(&bad, 4, 1, f), 1);
  fclose(f);
  o.verify = 1;
  tg_expect_error(em_graph_load(&g, path, &o), EM_ERR_FORMAT, "checksum mismatch in section 'weights'", NULL);
  o.verify = 0;
  tg_expect_error(em_graph_load(&g, path, &o), EM_ERR_FORMAT, "section 'weights' element 0 is -1", NULL);
}

static void load_error(const char *name, const char *text, const char *a, const char *b) {
  em_graph_options o = tg_opts(1);
  em_graph *g = NULL;
  tg_expect_error(em_graph_load(&g, tg_text(name, text), &o), EM_ERR_FORMAT, a, b, NULL);
  assert_null(g);
}

static void test_bad_weights(void **state) {
  (void)state;
  load_error("neg.txt", "0 1 1\n1 2 -0.5\n", "neg.txt:2:", "negative");
  load_error("nan.txt", "# c\n0 1 nan\n", "nan.txt:2:", "NaN");
  load_error("inf.txt", "0 1 1\n\n1 2 inf\n", "inf.txt:3:", "infinite");
  load_error("big.txt", "0 1 1e39\n", "big.txt:1:", "beyond float32");
  load_error("abc.txt", "0 1 1\n1 2 abc\n", "abc.txt:2:", "expected a weight");
  load_error("num.txt", "0 1 1.5x\n", "num.txt:1:", "expected a weight");
  load_error("mixed.txt", "0 1 1\n1 2\n2 0 3\n", "mixed.txt:2:", "line 1 has one");
  load_error("mixed2.txt", "# c\n0 1\n1 2 2.5\n", "mixed2.txt:2:", "line 3 has one");
  const char *H = "%%MatrixMarket matrix coordinate real general\n3 3 2\n";
  char text[256];
  snprintf(text, sizeof text, "%s1 2 1\n2 3 -1\n", H);
  load_error("neg.mtx", text, "neg.mtx:4:", "negative");
  snprintf(text, sizeof text, "%s1 2 nan\n2 3 1\n", H);
  load_error("nan.mtx", text, "nan.mtx:3:", "NaN");
  snprintf(text, sizeof text, "%s1 2 1\n2 3 -inf\n", H);
  load_error("inf.mtx", text, "inf.mtx:4:", "infinite");
  snprintf(text, sizeof text, "%s1 2 1e400\n2 3 1\n", H);
  load_error("big.mtx", text, "big.mtx:3:", "beyond float32");
  snprintf(text, sizeof text, "%s1 2 0x10\n2 3 1\n", H);
  load_error("hex.mtx", text, "hex.mtx:3:", "expected a real value");
  load_error("negint.mtx", "%%MatrixMarket matrix coordinate integer general\n2 2 1\n1 2 -3\n", "negint.mtx:3:",
             "negative");
  /* a bad weight after many good lines: the line number crosses chunks */
  size_t cap = 200000 * 16, len = 0;
  char *big = malloc(cap);
  for (int i = 0; i < 200000; i++) len += (size_t)snprintf(big + len, cap - len, "%d %d 1\n", i % 977, i % 991);
  len += (size_t)snprintf(big + len, cap - len, "5 6 -2\n");
  em_graph_options o = tg_opts(1);
  em_graph *g = NULL;
  tg_expect_error(em_graph_load(&g, tg_write("late.txt", big, len), &o), EM_ERR_FORMAT, "late.txt:200001:",
                  "negative", NULL);
  len -= 7;
  len += (size_t)snprintf(big + len, cap - len, "5 6\n");
  tg_expect_error(em_graph_load(&g, tg_write("late2.txt", big, len), &o), EM_ERR_FORMAT, "late2.txt:200001:",
                  "line 1 has one", NULL);
  free(big);
  /* skew-symmetric values are no weights: an unweighted graph, negative values allowed */
  g = NULL;
  assert_int_equal(em_graph_load(&g,
                                 tg_text("skew.mtx", "%%MatrixMarket matrix coordinate real skew-symmetric\n3 3 1\n2 1 "
                                                     "-4\n"),
                                 &o),
                   EM_OK);
  assert_false(em_graph_is_weighted(g));
  em_graph_free(g);
  /* weights = 0: values are not weights (still numbers) */
  o.weights = 0;
  snprintf(text, sizeof text, "%s1 2 1\n2 3 -1\n", H);
  g = NULL;
  assert_int_equal(em_graph_load(&g, tg_text("neg0.mtx", text), &o), EM_OK);
  assert_false(em_graph_is_weighted(g));
  em_graph_free(g);
  assert_int_equal(em_graph_load(&g, tg_text("mixed0.txt", "0 1 x\n1 2\n"), &o), EM_OK);
  em_graph_free(g);
  /* a trailing comment is no weight; gapbs's .wsg is refused by name */
  o = tg_opts(1);
  assert_int_equal(em_graph_load(&g, tg_text("c.txt", "0 1 # note\n1 2\n"), &o), EM_OK);
  assert_false(em_graph_is_weighted(g));
  em_graph_free(g);
  g = NULL;
  tg_expect_error(em_graph_load(&g, tg_text("x.wsg", "0 1 1\n"), &o), EM_ERR_UNSUPPORTED, "x.wsg", ".wsg", NULL);
}

int main(void) {
  em_set_num_threads(2);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pagerank_snap_and_mtx), cmocka_unit_test(test_weights_follow_the_arcs),
      cmocka_unit_test(test_deterministic),         cmocka_unit_test(test_options),
      cmocka_unit_test(test_ember_format),          cmocka_unit_test(test_bad_weights),
  };
  return cmocka_run_group_tests(tests, tg_setup, tg_cleanup);
}
