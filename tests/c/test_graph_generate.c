/* test_graph_generate.c - the generators and the CSR builder: Kronecker and uniform
 * graphs are the same whatever the thread count and builder strategy, the batched
 * Kronecker path equals its scalar reference, options (drops, direction) match a
 * reference computed from the raw edges, and bad arguments are errors. */
#include <stdint.h>
#include "test_util.h"
#include "ember/graph.h"
#include "graph/graph_impl.h"
#include "test_graph_util.h"

/* Arcs of g as (dense) int64 arrays; the caller releases. */
static void arcs_of(const em_graph *g, em_tensor **s, em_tensor **d) {
  *s = *d = NULL;
  assert_int_equal(em_graph_edges(g, s, d), EM_OK);
}

static void expect_equal_graphs(const em_graph *a, const em_graph *b) {
  assert_int_equal(em_graph_num_vertices(a), em_graph_num_vertices(b));
  assert_int_equal(em_graph_num_edges(a), em_graph_num_edges(b));
  em_tensor *sa, *da, *sb, *db;
  arcs_of(a, &sa, &da);
  arcs_of(b, &sb, &db);
  size_t bytes = (size_t)em_graph_num_edges(a) * 8;
  assert_memory_equal(em_tensor_data(sa), em_tensor_data(sb), bytes);
  assert_memory_equal(em_tensor_data(da), em_tensor_data(db), bytes);
  em_tensor_release(sa), em_tensor_release(da), em_tensor_release(sb), em_tensor_release(db);
}

static em_graph *kron(int scale, int ef, uint64_t seed, const em_graph_options *o) {
  em_graph *g = NULL;
  if (em_graph_kronecker(&g, scale, ef, seed, o)) fail_msg("kronecker: %s", em_last_error());
  return g;
}

/* Same graph for 1 and 2 threads, both builder strategies, and both vertex orders. */
static void test_deterministic(void **state) {
  (void)state;
  int saved = em_get_num_threads();
  em_graph_options o = tg_opts(1);
  em_set_num_threads(1);
  em_graph *ref = kron(12, 8, 42, &o);
  em_graph *uref = NULL;
  assert_int_equal(em_graph_uniform(&uref, 1000, 30000, 42, &o), EM_OK);
  em_set_num_threads(2);
  for (int strategy = 1; strategy <= 2; strategy++)
    for (int keep = -1; keep <= 1; keep += 2) { /* edges scanned twice, or kept and replayed */
      gr_build_strategy = strategy;
      gr_build_keep = keep;
      em_graph *g = kron(12, 8, 42, &o), *u = NULL;
      expect_equal_graphs(ref, g);
      assert_int_equal(em_graph_uniform(&u, 1000, 30000, 42, &o), EM_OK);
      expect_equal_graphs(uref, u);
      em_graph_free(g), em_graph_free(u);
    }
  gr_build_strategy = 0;
  /* undirected, reversed, loops and repeats dropped: kept edges replay the same arcs */
  em_graph_options x = o;
  x.directed = 0, x.reverse = 1, x.drop_self_loops = 1, x.drop_duplicates = 1;
  gr_build_keep = -1;
  em_graph *twice = kron(11, 8, 5, &x);
  gr_build_keep = 1;
  em_graph *kept = kron(11, 8, 5, &x);
  gr_build_keep = 0;
  expect_equal_graphs(twice, kept);
  assert_true(em_graph_num_edges(kept) > 0);
  em_graph_free(twice), em_graph_free(kept);
  o.reorder = 0;
  em_graph *plain = kron(12, 8, 42, &o);
  expect_equal_graphs(ref, plain);
  /* another seed, another graph */
  em_graph *other = kron(12, 8, 43, &o);
  em_tensor *s1, *d1, *s2, *d2;
  arcs_of(plain, &s1, &d1);
  arcs_of(other, &s2, &d2);
  assert_memory_not_equal(em_tensor_data(s1), em_tensor_data(s2), 4096);
  em_tensor_release(s1), em_tensor_release(d1), em_tensor_release(s2), em_tensor_release(d2);
  em_set_num_threads(saved);
  em_graph_free(ref), em_graph_free(uref), em_graph_free(plain), em_graph_free(other);
}

/* The batched (AVX-512 when built so) generator equals the scalar reference, edge by
 * edge; and the edges have the Kronecker shape: a few vertices hold many arcs. */
static void test_kronecker_reference(void **state) {
  (void)state;
  const int scale = 11, ef = 8;
  int64_t n = (int64_t)1 << scale, m = (int64_t)ef << scale;
  int64_t *s = malloc((size_t)m * 8), *d = malloc((size_t)m * 8);
  for (int64_t e = 0; e < m; e++) {
    uint32_t u, v;
    gr_kronecker_edge_ref(scale, 7, (uint64_t)e, &u, &v);
    s[e] = u, d[e] = v;
  }
  em_graph_options o = tg_opts(0);
  em_graph *want = tg_graph(n, m, s, d, &o), *got = kron(scale, ef, 7, &o);
  expect_equal_graphs(want, got);
  assert_int_equal(em_graph_num_edges(got), m);
  em_tensor *in = NULL;
  assert_int_equal(em_graph_degrees(got, &in, NULL), EM_OK);
  int64_t max = 0, zero = 0;
  for (int64_t v = 0; v < n; v++) {
    int64_t k = ((int64_t *)em_tensor_data(in))[v];
    max = k > max ? k : max;
    zero += k == 0;
  }
  assert_true(max > 20 * ef); /* heavy tail */
  assert_true(zero > n / 10); /* and many vertices without in-arcs */
  em_tensor_release(in);
  free(s), free(d);
  em_graph_free(want), em_graph_free(got);
}

/* The batched generator (16 lanes, 32-bit arithmetic when built for AVX-512) gives the
 * scalar reference's edges at every scale, including partial last blocks of levels and a
 * batch whose edge counter carries into its high word. */
static void test_kronecker_batched_every_scale(void **state) {
  (void)state;
  enum { COUNT = 16 * 40 + 7 };
  uint32_t u[COUNT], v[COUNT];
  const int64_t starts[] = {0, 5, ((int64_t)1 << 32) - 21};
  for (int scale = 1; scale <= 31; scale++) {
    for (size_t k = 0; k < sizeof starts / sizeof *starts; k++) {
      int64_t e0 = starts[k];
      gr_generate_slice(0, scale, (int64_t)1 << scale, 0x9e3779b97f4a7c15ull + (uint64_t)scale, e0, e0 + COUNT, u, v);
      for (int i = 0; i < COUNT; i++) {
        uint32_t ru, rv;
        gr_kronecker_edge_ref(scale, 0x9e3779b97f4a7c15ull + (uint64_t)scale, (uint64_t)(e0 + i), &ru, &rv);
        if (u[i] != ru || v[i] != rv)
          fail_msg("scale %d, edge %lld: batched %u -> %u, reference %u -> %u", scale, (long long)(e0 + i), u[i], v[i],
                   ru, rv);
        assert_true(u[i] < (1ull << scale) && v[i] < (1ull << scale));
      }
    }
  }
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* Each vertex's sources are sorted by length class (insertion, quicksort, 8-bit and 11-bit
 * radix): every class, its edges, and ids with high bits and many repeats, against qsort. */
static void test_sort_u32_every_size(void **state) {
  (void)state;
  enum { MAX = 5000 };
  uint32_t *a = malloc(MAX * sizeof *a), *b = malloc(MAX * sizeof *b), *want = malloc(MAX * sizeof *want),
           *tmp = malloc(MAX * sizeof *tmp);
  uint64_t seed = 99;
  const int64_t sizes[] = {0, 1, 2, 24, 25, 95, 96, 97, 200, 255, 256, 257, 1000, 2047, 2048, 2049, 4999};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
    for (int kind = 0; kind < 3; kind++) {
      int64_t n = sizes[k];
      for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        uint32_t r = (uint32_t)(seed >> 32);
        a[i] = kind == 0 ? r : kind == 1 ? r % 7 : (r & 0xff000000u) | (r % 3); /* few values; high bits */
        want[i] = a[i];
      }
      qsort(want, (size_t)n, sizeof *want, cmp_u32);
      for (int64_t i = 0; i < n; i++) b[i] = a[i];
      gr_sort_u32(a, n, tmp);
      gr_sort_u32(b, n, NULL); /* no scratch: the comparison sort at every length */
      if (n && (memcmp(a, want, (size_t)n * sizeof *a) || memcmp(b, want, (size_t)n * sizeof *b)))
        fail_msg("gr_sort_u32: %lld ids (kind %d) out of order", (long long)n, kind);
    }
  free(a), free(b), free(want), free(tmp);
}

static int cmp_pair(const void *a, const void *b) {
  const int64_t *x = a, *y = b;
  if (x[1] != y[1]) return x[1] < y[1] ? -1 : 1;
  return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Drops and direction on a generated graph match a reference built from its raw edges. */
static void test_options_match_reference(void **state) {
  (void)state;
  em_graph_options o = tg_opts(0);
  em_graph *raw = kron(10, 16, 3, &o);
  em_tensor *st, *dt;
  arcs_of(raw, &st, &dt);
  int64_t m = em_graph_num_edges(raw), k = 0;
  const int64_t *s = em_tensor_data(st), *d = em_tensor_data(dt);
  int64_t(*p)[2] = malloc((size_t)m * 2 * sizeof *p);
  for (int64_t e = 0; e < m; e++) { /* undirected, no self-loops, no duplicates */
    if (s[e] == d[e]) continue;
    p[k][0] = s[e], p[k][1] = d[e], k++;
    p[k][0] = d[e], p[k][1] = s[e], k++;
  }
  qsort(p, (size_t)k, sizeof *p, cmp_pair);
  int64_t u = 0;
  for (int64_t i = 0; i < k; i++)
    if (!u || p[i][0] != p[u - 1][0] || p[i][1] != p[u - 1][1]) p[u][0] = p[i][0], p[u][1] = p[i][1], u++;
  o = tg_opts(1);
  o.directed = 0;
  o.drop_self_loops = 1;
  o.drop_duplicates = 1;
  em_graph *g = kron(10, 16, 3, &o);
  assert_int_equal(em_graph_num_edges(g), u);
  assert_true(u < k); /* Kronecker graphs repeat edges */
  em_tensor *gs, *gd, *out = NULL;
  arcs_of(g, &gs, &gd);
  for (int64_t i = 0; i < u; i++) {
    assert_int_equal(((int64_t *)em_tensor_data(gs))[i], p[i][0]);
    assert_int_equal(((int64_t *)em_tensor_data(gd))[i], p[i][1]);
  }
  /* out-degrees were fixed for the dropped repeats: undirected, so out = in */
  em_tensor *in = NULL;
  assert_int_equal(em_graph_degrees(g, &in, &out), EM_OK);
  assert_memory_equal(em_tensor_data(in), em_tensor_data(out), (size_t)em_graph_num_vertices(g) * 8);
  em_tensor_release(st), em_tensor_release(dt), em_tensor_release(gs), em_tensor_release(gd);
  em_tensor_release(in), em_tensor_release(out);
  free(p);
  em_graph_free(raw), em_graph_free(g);
}

static void test_uniform(void **state) {
  (void)state;
  em_graph_options o = tg_opts(0);
  em_graph *g = NULL;
  assert_int_equal(em_graph_uniform(&g, 777, 50000, 1, &o), EM_OK);
  assert_int_equal(em_graph_num_vertices(g), 777);
  assert_int_equal(em_graph_num_edges(g), 50000);
  em_tensor *in = NULL;
  assert_int_equal(em_graph_degrees(g, &in, NULL), EM_OK);
  int64_t max = 0;
  for (int v = 0; v < 777; v++)
    max = ((int64_t *)em_tensor_data(in))[v] > max ? ((int64_t *)em_tensor_data(in))[v] : max;
  assert_true(max < 2 * 50000 / 777); /* no heavy tail */
  em_tensor_release(in);
  em_graph_free(g);
}

/* The degree order: out-degrees above the counting sort's buckets (65535) are ordered by a
 * comparison sort; ties go to the smaller id. */
static void test_degree_order(void **state) {
  (void)state;
  const int64_t n = 10, m = 70000 + 66000 + 3 + 3;
  int64_t *s = malloc(m * sizeof *s), *d = malloc(m * sizeof *d), k = 0;
  for (int64_t i = 0; i < 70000; i++) s[k] = 5, d[k++] = i % n;
  for (int64_t i = 0; i < 66000; i++) s[k] = 8, d[k++] = i % n;
  for (int64_t i = 0; i < 3; i++) s[k] = 2, d[k++] = i, s[k] = 1, d[k++] = i;
  em_graph_options o = tg_opts(EM_GRAPH_REORDER_DEGREE);
  em_graph *g = tg_graph(n, m, s, d, &o);
  assert_int_equal(g->to_internal[5], 0);
  assert_int_equal(g->to_internal[8], 1);
  assert_int_equal(g->to_internal[1], 2); /* degree 3, the smaller id first */
  assert_int_equal(g->to_internal[2], 3);
  assert_int_equal(g->to_internal[0], 4); /* the rest: out-degree 0, by id */
  assert_int_equal(g->to_internal[9], 9);
  for (int64_t v = 0; v < n; v++) assert_int_equal(g->to_dense[g->to_internal[v]], v);
  em_tensor *out = NULL;
  assert_int_equal(em_graph_degrees(g, NULL, &out), EM_OK);
  assert_int_equal(((int64_t *)em_tensor_data(out))[5], 70000);
  assert_int_equal(((int64_t *)em_tensor_data(out))[8], 66000);
  em_tensor_release(out);
  free(s), free(d);
  em_graph_free(g);
}

static void test_errors(void **state) {
  (void)state;
  em_graph_options o = tg_opts(1);
  em_graph *g = NULL;
  tg_expect_error(em_graph_kronecker(&g, 0, 16, 1, &o), EM_ERR_ARGUMENT, "scale is 0", "1..31", NULL);
  tg_expect_error(em_graph_kronecker(&g, 32, 16, 1, &o), EM_ERR_ARGUMENT, "scale is 32", NULL);
  tg_expect_error(em_graph_kronecker(&g, 10, 0, 1, &o), EM_ERR_ARGUMENT, "edge_factor is 0", NULL);
  tg_expect_error(em_graph_kronecker(&g, 31, 1 << 12, 1, &o), EM_ERR_ARGUMENT, "edge_factor is 4096", NULL);
  tg_expect_error(em_graph_uniform(&g, 0, 10, 1, &o), EM_ERR_ARGUMENT, "num_vertices is 0", NULL);
  tg_expect_error(em_graph_uniform(&g, 10, -1, 1, &o), EM_ERR_ARGUMENT, "num_edges is -1", NULL);
  int64_t s[] = {0, 1}, d[] = {1, 5};
  tg_expect_error(em_graph_from_edges(&g, 3, 2, s, d, &o), EM_ERR_INDEX, "edge 1 is 1 -> 5", "[0, 3)", NULL);
  tg_expect_error(em_graph_from_edges(&g, -1, 0, s, d, &o), EM_ERR_ARGUMENT, "num_vertices is -1", NULL);
  tg_expect_error(em_graph_from_edges(&g, 3, 2, NULL, d, &o), EM_ERR_ARGUMENT, "NULL", NULL);
  assert_null(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_deterministic),
      cmocka_unit_test(test_kronecker_reference),
      cmocka_unit_test(test_kronecker_batched_every_scale),
      cmocka_unit_test(test_sort_u32_every_size),
      cmocka_unit_test(test_options_match_reference),
      cmocka_unit_test(test_uniform),
      cmocka_unit_test(test_degree_order),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, tg_setup, tg_cleanup);
}
