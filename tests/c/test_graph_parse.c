/* test_graph_parse.c - text ingest: SNAP edge lists (id remapping, options, parallel
 * chunks), Matrix Market files, label files, and every parse error with its file:line. */
#include <stdint.h>
#include "test_util.h"
#include "ember/graph.h"
#include "test_graph_util.h"

/* tests/graph/<name>, found from this file's path */
static const char *fixture(const char *name) {
  static char buf[512];
  const char *slash = strrchr(__FILE__, '/');
  int dir = (int)(slash - __FILE__) - 2; /* strip "/c" */
  snprintf(buf, sizeof buf, "%.*s/graph/%s", dir, __FILE__, name);
  return buf;
}

typedef struct arc {
  int64_t s, d;
} arc;

static int cmp_arc(const void *a, const void *b) {
  const arc *x = a, *y = b;
  if (x->s != y->s) return x->s < y->s ? -1 : 1;
  return x->d < y->d ? -1 : x->d > y->d;
}

/* The graph's arcs, in original ids, equal the expected multiset. */
static void expect_arcs(const em_graph *g, int64_t m, const arc *expect) {
  assert_int_equal(em_graph_num_edges(g), m);
  em_tensor *s = NULL, *d = NULL;
  assert_int_equal(em_graph_edges(g, &s, &d), EM_OK);
  arc *got = malloc((size_t)(m + 1) * sizeof *got), *want = malloc((size_t)(m + 1) * sizeof *want);
  for (int64_t e = 0; e < m; e++) {
    got[e] = (arc){em_graph_original_id(g, ((int64_t *)em_tensor_data(s))[e]),
                   em_graph_original_id(g, ((int64_t *)em_tensor_data(d))[e])};
    want[e] = expect[e];
  }
  qsort(got, (size_t)m, sizeof *got, cmp_arc);
  qsort(want, (size_t)m, sizeof *want, cmp_arc);
  for (int64_t e = 0; e < m; e++)
    if (got[e].s != want[e].s || got[e].d != want[e].d)
      fail_msg("arc %lld: got %lld -> %lld, expected %lld -> %lld", (long long)e, (long long)got[e].s,
               (long long)got[e].d, (long long)want[e].s, (long long)want[e].d);
  free(got), free(want);
  em_tensor_release(s), em_tensor_release(d);
}

static em_graph *load(const char *path, const em_graph_options *o) {
  em_graph *g = NULL;
  if (em_graph_load(&g, path, o)) fail_msg("load %s: %s", path, em_last_error());
  return g;
}

static const arc SMALL[] = {{10, 20}, {20, 30}, {30, 10}, {10, 40}, {40, 10}, {30, 10}, {40, 40}, {50, 10}};

static void test_snap_fixture(void **state) {
  (void)state;
  for (int reorder = 0; reorder <= 1; reorder++) {
    em_graph_options o = tg_opts(reorder);
    em_graph *g = load(fixture("small.snap"), &o);
    assert_int_equal(em_graph_num_vertices(g), 5);
    assert_true(em_graph_is_directed(g));
    expect_arcs(g, 8, SMALL);
    /* dense ids follow the original ids */
    for (int64_t v = 0; v < 5; v++) assert_int_equal(em_graph_original_id(g, v), 10 * (v + 1));
    int64_t v;
    assert_int_equal(em_graph_find_vertex(g, 40, &v), EM_OK);
    assert_int_equal(v, 3);
    tg_expect_error(em_graph_find_vertex(g, 41, &v), EM_ERR_INDEX, "41 is not a vertex", NULL);
    assert_int_equal(em_graph_original_id(g, 5), -1);
    em_tensor *in = NULL, *out = NULL;
    assert_int_equal(em_graph_degrees(g, &in, &out), EM_OK);
    const int64_t *pi = em_tensor_data(in), *po = em_tensor_data(out);
    int64_t want_in[] = {4, 1, 1, 2, 0}, want_out[] = {2, 1, 2, 2, 1};
    for (int i = 0; i < 5; i++) assert_int_equal(pi[i], want_in[i]), assert_int_equal(po[i], want_out[i]);
    em_tensor_release(in), em_tensor_release(out);
    em_graph_free(g);
  }
}

static void test_snap_options(void **state) {
  (void)state;
  em_graph_options o = tg_opts(1);
  o.drop_self_loops = 1;
  o.drop_duplicates = 1;
  em_graph *g = load(fixture("small.snap"), &o);
  const arc clean[] = {{10, 20}, {20, 30}, {30, 10}, {10, 40}, {40, 10}, {50, 10}};
  expect_arcs(g, 6, clean);
  em_tensor *out = NULL;
  assert_int_equal(em_graph_degrees(g, NULL, &out), EM_OK); /* out-degrees follow the drops */
  assert_int_equal(((int64_t *)em_tensor_data(out))[2], 1);
  assert_int_equal(((int64_t *)em_tensor_data(out))[3], 1);
  em_tensor_release(out);
  em_graph_free(g);

  o = tg_opts(0);
  o.reverse = 1;
  g = load(fixture("small.snap"), &o);
  arc rev[8];
  for (int i = 0; i < 8; i++) rev[i] = (arc){SMALL[i].d, SMALL[i].s};
  expect_arcs(g, 8, rev);
  em_graph_free(g);

  o = tg_opts(1);
  o.directed = 0;
  g = load(fixture("small.snap"), &o);
  assert_false(em_graph_is_directed(g));
  arc both[15];
  int k = 0;
  for (int i = 0; i < 8; i++) {
    both[k++] = SMALL[i];
    if (SMALL[i].s != SMALL[i].d) both[k++] = (arc){SMALL[i].d, SMALL[i].s};
  }
  expect_arcs(g, k, both);
  em_graph_free(g);
}

static void test_snap_ids(void **state) {
  (void)state;
  em_graph_options o = tg_opts(1);
  /* ids 0..n-1 are kept as they are */
  em_graph *g = load(tg_text("dense.txt", "0 1\n1 2\n2 0\n"), &o);
  em_tensor *ids = NULL;
  assert_int_equal(em_graph_original_ids(g, &ids), EM_OK);
  for (int v = 0; v < 3; v++) assert_int_equal(((int64_t *)em_tensor_data(ids))[v], v);
  em_tensor_release(ids);
  em_graph_free(g);
  /* 64-bit ids (beyond the bitmap) take the sorted-id path */
  g = load(tg_text("big.txt", "9223372036854775807 5\n5 4294967296\n4294967296 9223372036854775807\n"), &o);
  const arc big[] = {{INT64_MAX, 5}, {5, 4294967296LL}, {4294967296LL, INT64_MAX}};
  assert_int_equal(em_graph_num_vertices(g), 3);
  assert_int_equal(em_graph_original_id(g, 0), 5);
  assert_int_equal(em_graph_original_id(g, 2), INT64_MAX);
  expect_arcs(g, 3, big);
  em_graph_free(g);
}

/* A file of many chunks: the parallel parse sees every edge, and an error deep in the
 * file still names its line. */
static void test_snap_large_file(void **state) {
  (void)state;
  int lines = 200000;
  size_t cap = (size_t)lines * 24;
  char *text = malloc(cap), *p = text;
  p += sprintf(p, "# header\n");
  for (int i = 0; i < lines; i++) p += sprintf(p, "%d\t%d\n", i, (int)((i * 7919LL + 1) % lines));
  em_graph_options o = tg_opts(1);
  em_graph *g = load(tg_write("many.txt", text, (size_t)(p - text)), &o);
  assert_int_equal(em_graph_num_vertices(g), lines);
  assert_int_equal(em_graph_num_edges(g), lines);
  em_tensor *in = NULL;
  assert_int_equal(em_graph_degrees(g, &in, NULL), EM_OK);
  for (int v = 0; v < lines; v++) assert_int_equal(((int64_t *)em_tensor_data(in))[v], 1);
  em_tensor_release(in);
  em_graph_free(g);
  /* break line 190002 (the header is line 1) */
  char *bad = strstr(text + (size_t)(p - text) * 95 / 100, "\n") + 1;
  int line = 1;
  for (char *q = text; q < bad; q++) line += *q == '\n';
  bad[0] = 'x';
  char want[64];
  snprintf(want, sizeof want, "many_bad.txt:%d:", line);
  g = NULL;
  tg_expect_error(em_graph_load(&g, tg_write("many_bad.txt", text, (size_t)(p - text)), &o), EM_ERR_FORMAT, want,
                  "expected two non-negative integer vertex ids", NULL);
  assert_null(g);
  free(text);
}

static void snap_error(const char *name, const char *text, em_status code, const char *a, const char *b) {
  em_graph_options o = tg_opts(1);
  em_graph *g = NULL;
  tg_expect_error(em_graph_load(&g, tg_text(name, text), &o), code, a, b, NULL);
  assert_null(g);
}

static void test_snap_errors(void **state) {
  (void)state;
  snap_error("letters.txt", "1 2\nfoo bar\n", EM_ERR_FORMAT, "letters.txt:2:", "got 'foo bar'");
  snap_error("one.txt", "# c\n1 2\n3\n", EM_ERR_FORMAT, "one.txt:3:", "found one");
  snap_error("one_blank.txt", "1 2\n3   \r\n", EM_ERR_FORMAT, "one_blank.txt:2:", "found one");
  snap_error("neg.txt", "1 -2\n", EM_ERR_FORMAT, "neg.txt:1:", "non-negative integer");
  snap_error("glued.txt", "1 2\n3 4x\n", EM_ERR_FORMAT, "glued.txt:2:", "'3 4x'");
  snap_error("float.txt", "1.5 2\n", EM_ERR_FORMAT, "float.txt:1:", "non-negative integer");
  snap_error("big63.txt", "1 9223372036854775808\n", EM_ERR_FORMAT, "big63.txt:1:", "larger than 2^63-1");
  snap_error("big64.txt", "1 2\n2 99999999999999999999999\n", EM_ERR_FORMAT, "big64.txt:2:", "larger than 2^63-1");
  snap_error("comments.txt", "# only\n# comments\n\n", EM_ERR_FORMAT, "comments.txt: no edges found", "3 lines");
  snap_error("empty.txt", "", EM_ERR_FORMAT, "empty.txt: no edges found", "0 lines");
  em_graph *g = NULL;
  em_graph_options o = tg_opts(1);
  tg_expect_error(em_graph_load(&g, tg_path("missing.txt"), &o), EM_ERR_IO, "cannot open", "missing.txt",
                  "No such file", NULL);
  tg_expect_error(em_graph_load(&g, tg_dir, &o), EM_ERR_IO, "not a regular file", NULL);
  o.format = 42;
  tg_expect_error(em_graph_load(&g, fixture("small.snap"), &o), EM_ERR_ARGUMENT, "format 42", NULL);
  o = tg_opts(5);
  tg_expect_error(em_graph_load(&g, fixture("small.snap"), &o), EM_ERR_ARGUMENT, "reorder is 5", NULL);
  assert_null(g);
}

static void test_mtx(void **state) {
  (void)state;
  em_graph_options o = tg_opts(1);
  em_graph *g = load(fixture("small.mtx"), &o);
  const arc want[] = {{1, 2}, {2, 3}, {3, 1}, {1, 4}, {4, 1}};
  assert_int_equal(em_graph_num_vertices(g), 4);
  assert_int_equal(em_graph_original_id(g, 0), 1); /* Matrix Market indices are 1-based */
  expect_arcs(g, 5, want);
  em_graph_free(g);
  /* symmetric: each off-diagonal entry is both arcs; the diagonal once */
  g = load(tg_text("sym.mtx", "%%MatrixMarket matrix coordinate pattern symmetric\n%c\n3 3 3\n2 1\n3 3\n3 1\n"), &o);
  const arc sym[] = {{2, 1}, {1, 2}, {3, 3}, {3, 1}, {1, 3}};
  assert_false(em_graph_is_directed(g));
  expect_arcs(g, 5, sym);
  em_graph_free(g);
  g = load(tg_text("int.MTX", "%%matrixmarket MATRIX Coordinate integer general\n2 2 2\n1 2 7\n2 1 +3\n"), &o);
  expect_arcs(g, 2, (const arc[]){{1, 2}, {2, 1}});
  em_graph_free(g);
  /* no entries: a graph of isolated vertices, as the size line says */
  g = load(tg_text("none.mtx", "%%MatrixMarket matrix coordinate pattern general\n3 3 0\n"), &o);
  assert_int_equal(em_graph_num_vertices(g), 3);
  assert_int_equal(em_graph_num_edges(g), 0);
  em_graph_free(g);
}

static void mtx_error(const char *name, const char *text, const char *a, const char *b) {
  em_graph_options o = tg_opts(1);
  em_graph *g = NULL;
  tg_expect_error(em_graph_load(&g, tg_text(name, text), &o), EM_ERR_FORMAT, a, b, NULL);
  assert_null(g);
}

static void test_mtx_errors(void **state) {
  (void)state;
  const char *H = "%%MatrixMarket matrix coordinate real general\n";
  char buf[256];
#define WITH_HEADER(body) (snprintf(buf, sizeof buf, "%s%s", H, body), buf)
  mtx_error("banner.mtx", "1 2\n", "banner.mtx:1:", "expected the banner");
  mtx_error("array.mtx", "%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n", "array.mtx:1:", "coordinate");
  mtx_error("complex.mtx", "%%MatrixMarket matrix coordinate complex general\n1 1 1\n1 1 1 0\n",
            "complex.mtx:1:", "pattern, real or integer");
  mtx_error("herm.mtx", "%%MatrixMarket matrix coordinate real hermitian\n1 1 1\n1 1 1\n",
            "herm.mtx:1:", "general, symmetric");
  mtx_error("nosize.mtx", WITH_HEADER("% only a comment\n"), "nosize.mtx:3:", "ends before the size line");
  mtx_error("badsize.mtx", WITH_HEADER("3 3\n"), "badsize.mtx:2:", "size line");
  mtx_error("rect.mtx", WITH_HEADER("3 4 1\n1 1 1\n"), "rect.mtx:2:", "square matrix, got 3 x 4");
  mtx_error("zero.mtx", WITH_HEADER("3 3 2\n1 2 1\n0 1 1\n"), "zero.mtx:4:", "row index 0");
  mtx_error("range.mtx", WITH_HEADER("3 3 2\n1 2 1\n1 4 1\n"), "range.mtx:4:", "column index 4 exceeds the matrix's 3");
  mtx_error("noval.mtx", WITH_HEADER("3 3 1\n1 2\n"), "noval.mtx:3:", "missing the entry's value");
  mtx_error("badval.mtx", WITH_HEADER("3 3 1\n1 2 x1\n"), "badval.mtx:3:", "expected a real value");
  mtx_error("badint.mtx", "%%MatrixMarket matrix coordinate integer general\n3 3 1\n1 2 1.5\n",
            "badint.mtx:3:", "expected an integer value");
  mtx_error("extra.mtx", "%%MatrixMarket matrix coordinate pattern general\n3 3 1\n1 2 3\n",
            "extra.mtx:3:", "unexpected text");
  mtx_error("badidx.mtx", WITH_HEADER("3 3 1\n1 b 1\n"), "badidx.mtx:3:", "expected a column index");
  mtx_error("few.mtx", WITH_HEADER("3 3 3\n1 2 1\n2 3 1\n"), "few.mtx:2:", "announces 3 entries, the file has 2");
  mtx_error("many.mtx", WITH_HEADER("3 3 1\n1 2 1\n2 3 1\n"), "many.mtx:2:", "announces 1 entries, the file has 2");
  /* sizes taken on trust: billions of vertices or entries from a few bytes */
  mtx_error("rows.mtx", WITH_HEADER("4000000000 4000000000 1\n1 2 1\n"),
            "rows.mtx:2:", "declares 4000000000 vertices, more than a file of");
  mtx_error("nnz.mtx", WITH_HEADER("3 3 18446744073709551615\n1 2 1\n"),
            "nnz.mtx:2:", "announces 18446744073709551615 entries, the 6 bytes after it hold at most 2");
#undef WITH_HEADER
}

static void test_labels(void **state) {
  (void)state;
  em_graph_options o = tg_opts(1);
  em_graph *g = load(fixture("small.snap"), &o);
  assert_null(em_graph_label(g, 0));
  assert_int_equal(em_graph_load_labels(g, fixture("small_labels.txt")), EM_OK);
  assert_string_equal(em_graph_label(g, 0), "alice");
  assert_string_equal(em_graph_label(g, 1), "bob the builder");
  assert_string_equal(em_graph_label(g, 2), "carol"); /* trailing blanks dropped */
  assert_null(em_graph_label(g, 3)); /* 40 has no name */
  assert_string_equal(em_graph_label(g, 4), "eve");
  assert_null(em_graph_label(g, 5));
  /* top-k reports original ids and names */
  em_tensor *x = NULL;
  assert_int_equal(em_graph_pagerank(&x, NULL, NULL, g, NULL), EM_OK);
  em_graph_ranked top[2];
  int64_t count;
  assert_int_equal(em_graph_topk(top, &count, x, 2, g), EM_OK);
  assert_int_equal(count, 2);
  assert_int_equal(top[0].original_id, 10);
  assert_string_equal(top[0].label, "alice");
  em_tensor_release(x);
  /* errors name the line; a failed load keeps the labels it had */
  tg_expect_error(em_graph_load_labels(g, tg_text("l1.txt", "10 a\n11 b\n")), EM_ERR_FORMAT,
                  "l1.txt:2:", "vertex 11 is not in the graph", NULL);
  tg_expect_error(em_graph_load_labels(g, tg_text("l2.txt", "# c\n10 a\n10 b\n")), EM_ERR_FORMAT,
                  "l2.txt:3:", "vertex 10 already has a name (line 2)", NULL);
  tg_expect_error(em_graph_load_labels(g, tg_text("l3.txt", "10 \n")), EM_ERR_FORMAT, "l3.txt:1:", "expected a name",
                  NULL);
  tg_expect_error(em_graph_load_labels(g, tg_text("l4.txt", "x10 a\n")), EM_ERR_FORMAT,
                  "l4.txt:1:", "expected 'id name'", NULL);
  tg_expect_error(em_graph_load_labels(g, tg_path("nope.txt")), EM_ERR_IO, "cannot open", NULL);
  assert_string_equal(em_graph_label(g, 0), "alice");
  em_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_snap_fixture),    cmocka_unit_test(test_snap_options), cmocka_unit_test(test_snap_ids),
      cmocka_unit_test(test_snap_large_file), cmocka_unit_test(test_snap_errors),  cmocka_unit_test(test_mtx),
      cmocka_unit_test(test_mtx_errors),      cmocka_unit_test(test_labels),
  };
  return cmocka_run_group_tests(tests, tg_setup, tg_cleanup);
}
