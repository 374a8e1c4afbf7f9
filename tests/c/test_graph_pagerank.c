/* test_graph_pagerank.c - PageRank: closed-form answers on small graphs (dangling,
 * self-loops, isolated vertices, personalisation, the GAPBS variant), agreement with a
 * float64 power iteration on generated graphs, determinism, and every option error. */
#include <math.h>
#include <stdint.h>
#include "test_util.h"
#include "ember/graph.h"
#include "graph/graph_impl.h"
#include "test_graph_util.h"

static const double D = 0.85;

static em_pagerank_options tight(void) {
  em_pagerank_options po;
  em_pagerank_options_init(&po);
  po.tol = 1e-9;
  po.max_iter = 500;
  return po;
}

/* Runs both vertex orders: the answers must not depend on the internal order. */
static void check_scores(int64_t n, int64_t m, const int64_t *src, const int64_t *dst, const em_pagerank_options *po,
                         const double *expect, double tol) {
  for (int reorder = 0; reorder <= 1; reorder++) {
    em_graph_options o = tg_opts(reorder);
    em_graph *g = tg_graph(n, m, src, dst, &o);
    float *x = tg_pagerank(g, po, NULL);
    for (int64_t v = 0; v < n; v++)
      if (fabs(x[v] - expect[v]) > tol)
        fail_msg("reorder=%d: score[%lld] = %.9g, expected %.9g", reorder, (long long)v, x[v], expect[v]);
    free(x);
    em_graph_free(g);
  }
}

static void test_cycle_is_uniform(void **state) {
  (void)state;
  int64_t s[] = {0, 1, 2}, d[] = {1, 2, 0};
  double e[] = {1.0 / 3, 1.0 / 3, 1.0 / 3};
  em_pagerank_options po = tight();
  check_scores(3, 3, s, d, &po, e, 1e-7);
}

/* 0 -> 1, 1 dangling: x0 = (1-d)/2 + d x1/2 and x0 + x1 = 1 give x0 = 1/(2+d). */
static void test_dangling_mass_goes_to_teleport(void **state) {
  (void)state;
  int64_t s[] = {0}, d[] = {1};
  double e[] = {1 / (2 + D), (1 + D) / (2 + D)};
  em_pagerank_options po = tight();
  check_scores(2, 1, s, d, &po, e, 1e-7);
}

/* 0 -> 0, 0 -> 1, 1 -> 0: the self-loop counts in 0's out-degree; x1 = 1/(2+d). */
static void test_self_loop(void **state) {
  (void)state;
  int64_t s[] = {0, 0, 1}, d[] = {0, 1, 0};
  double e[] = {(1 + D) / (2 + D), 1 / (2 + D)};
  em_pagerank_options po = tight();
  check_scores(2, 3, s, d, &po, e, 1e-7);
}

/* 0 <-> 1 and an isolated vertex 2 (dangling): x2 = (1-d)/(3-d). */
static void test_isolated_vertex(void **state) {
  (void)state;
  int64_t s[] = {0, 1}, d[] = {1, 0};
  double x2 = (1 - D) / (3 - D), e[] = {(1 - x2) / 2, (1 - x2) / 2, x2};
  em_pagerank_options po = tight();
  check_scores(3, 2, s, d, &po, e, 1e-7);
}

/* 0 <-> 1 teleporting to 0 only: x0 = 1/(1+d). Also a teleport vector that is not
 * normalised (scaled by 5) and stored as float32: same answer. */
static void test_personalization(void **state) {
  (void)state;
  int64_t s[] = {0, 1}, d[] = {1, 0};
  double p[] = {5, 0}, e[] = {1 / (1 + D), D / (1 + D)};
  em_tensor *pt = tensor_from_doubles(2, p), *p32 = NULL;
  assert_int_equal(em_to(&p32, pt, EM_FLOAT32, (em_device){EM_CPU, 0}), EM_OK);
  em_pagerank_options po = tight();
  po.personalization = pt;
  check_scores(2, 2, s, d, &po, e, 1e-7);
  po.personalization = p32;
  check_scores(2, 2, s, d, &po, e, 1e-7);
  /* 0 -> 1, 1 dangling, teleport to 1 only: nothing ever reaches 0 */
  double p1[] = {0, 1}, e1[] = {0, 1};
  em_tensor *pt1 = tensor_from_doubles(2, p1);
  po.personalization = pt1;
  check_scores(2, 1, s, d, &po, e1, 1e-7);
  em_tensor_release(pt);
  em_tensor_release(p32);
  em_tensor_release(pt1);
}

/* The GAP benchmark's definition: no dangling redistribution, the sum leaks. */
static void test_gapbs_mode(void **state) {
  (void)state;
  int64_t s[] = {0}, d[] = {1};
  double e[] = {(1 - D) / 2, (1 - D) / 2 + D * (1 - D) / 2};
  em_pagerank_options po = tight();
  po.method = EM_PAGERANK_GAPBS;
  check_scores(2, 1, s, d, &po, e, 1e-7);
}

/* Gauss-Seidel reaches the Jacobi answer in fewer iterations. */
static void test_gauss_seidel(void **state) {
  (void)state;
  em_graph_options o = tg_opts(EM_GRAPH_REORDER_DEGREE);
  em_graph *g = NULL;
  assert_int_equal(em_graph_kronecker(&g, 10, 8, 3, &o), EM_OK);
  em_pagerank_options po = tight();
  po.tol = 1e-7;
  em_pagerank_stats sj, sg;
  float *xj = tg_pagerank(g, &po, &sj);
  po.method = EM_PAGERANK_GAUSS_SEIDEL;
  float *xg = tg_pagerank(g, &po, &sg);
  double *ref = tg_reference(g, D, NULL);
  int64_t n = em_graph_num_vertices(g);
  assert_true(sj.converged && sg.converged);
  assert_true(sg.iterations < sj.iterations);
  assert_true(tg_l1(xj, ref, n) < 1e-6);
  assert_true(tg_l1(xg, ref, n) < 1e-6);
  free(xj), free(xg), free(ref);
  em_graph_free(g);
}

/* Generated graphs against the float64 reference, both vertex orders, with and without
 * a teleport vector. */
static void test_matches_float64_reference(void **state) {
  (void)state;
  for (int reorder = 0; reorder <= 1; reorder++) {
    em_graph_options o = tg_opts(reorder);
    em_graph *graphs[3] = {NULL};
    assert_int_equal(em_graph_kronecker(&graphs[0], 11, 16, 1, &o), EM_OK);
    assert_int_equal(em_graph_uniform(&graphs[1], 2000, 10000, 2, &o), EM_OK);
    o.directed = 0;
    o.drop_duplicates = 1;
    assert_int_equal(em_graph_kronecker(&graphs[2], 10, 8, 4, &o), EM_OK);
    for (int k = 0; k < 3; k++) {
      em_graph *g = graphs[k];
      int64_t n = em_graph_num_vertices(g);
      em_pagerank_options po = tight();
      po.tol = 1e-8;
      float *x = tg_pagerank(g, &po, NULL);
      double *ref = tg_reference(g, D, NULL);
      double l1 = tg_l1(x, ref, n);
      if (l1 > 1e-6) fail_msg("graph %d reorder %d: L1 %.3g from the float64 reference", k, reorder, l1);
      double *p = malloc((size_t)n * sizeof *p);
      for (int64_t v = 0; v < n; v++) p[v] = (double)(v % 7);
      em_tensor *pt = tensor_from_doubles(n, p);
      po.personalization = pt;
      float *xp = tg_pagerank(g, &po, NULL);
      double *refp = tg_reference(g, D, p);
      l1 = tg_l1(xp, refp, n);
      if (l1 > 1e-6) fail_msg("graph %d reorder %d personalised: L1 %.3g", k, reorder, l1);
      double sum = 0;
      for (int64_t v = 0; v < n; v++) sum += x[v];
      assert_true(fabs(sum - 1) < 1e-5);
      free(x), free(ref), free(p), free(xp), free(refp);
      em_tensor_release(pt);
      em_graph_free(g);
    }
  }
}

/* Jacobi gives the same bits with 1 and 2 threads; residuals and stats are reported. */
static void test_deterministic_and_reported(void **state) {
  (void)state;
  em_graph_options o = tg_opts(EM_GRAPH_REORDER_DEGREE);
  em_graph *g = NULL;
  assert_int_equal(em_graph_kronecker(&g, 15, 8, 9, &o), EM_OK); /* big enough for threads */
  int64_t n = em_graph_num_vertices(g);
  em_pagerank_options po;
  em_pagerank_options_init(&po);
  po.tol = 0; /* fixed iterations */
  po.max_iter = 15;
  int saved = em_get_num_threads();
  em_tensor *s1 = NULL, *s2 = NULL, *res = NULL;
  em_pagerank_stats st;
  em_set_num_threads(1);
  assert_int_equal(em_graph_pagerank(&s1, NULL, NULL, g, &po), EM_OK);
  em_set_num_threads(2);
  assert_int_equal(em_graph_pagerank(&s2, &res, &st, g, &po), EM_OK);
  em_set_num_threads(saved);
  assert_memory_equal(em_tensor_data(s1), em_tensor_data(s2), (size_t)n * 4);
  assert_int_equal(st.iterations, 15);
  assert_int_equal(st.converged, 0);
  assert_int_equal(em_tensor_numel(res), 15);
  assert_int_equal(em_tensor_dtype(res), EM_FLOAT64);
  const double *r = em_tensor_data(res);
  assert_true(r[0] > 0.1 && r[14] < r[0] / 100);
  assert_true(st.residual == r[14]);
  assert_true(st.seconds > 0 && st.edges_per_second > 0);
  /* converging stops early, with the last residual below tol */
  po.tol = 1e-5;
  em_tensor *s3 = NULL;
  assert_int_equal(em_graph_pagerank(&s3, NULL, &st, g, &po), EM_OK);
  assert_true(st.converged && st.residual < 1e-5 && st.iterations < 15);
  /* a preallocated scores tensor is filled in place */
  em_tensor *same = s3;
  assert_int_equal(em_graph_pagerank(&s3, NULL, NULL, g, &po), EM_OK);
  assert_ptr_equal(same, s3);
  em_tensor_release(s1), em_tensor_release(s2), em_tensor_release(s3), em_tensor_release(res);
  em_graph_free(g);
}

static void test_option_errors(void **state) {
  (void)state;
  int64_t s[] = {0, 1}, d[] = {1, 0};
  em_graph_options o = tg_opts(1);
  em_graph *g = tg_graph(2, 2, s, d, &o);
  em_tensor *x = NULL;
  em_pagerank_options po;
  em_pagerank_options_init(&po);
  po.damping = 1.5;
  tg_expect_error(em_graph_pagerank(&x, NULL, NULL, g, &po), EM_ERR_ARGUMENT, "damping is 1.5", "[0, 1]", NULL);
  em_pagerank_options_init(&po);
  po.tol = -1;
  tg_expect_error(em_graph_pagerank(&x, NULL, NULL, g, &po), EM_ERR_ARGUMENT, "tol is -1", NULL);
  em_pagerank_options_init(&po);
  po.max_iter = 0;
  tg_expect_error(em_graph_pagerank(&x, NULL, NULL, g, &po), EM_ERR_ARGUMENT, "max_iter is 0", NULL);
  em_pagerank_options_init(&po);
  po.method = 7;
  tg_expect_error(em_graph_pagerank(&x, NULL, NULL, g, &po), EM_ERR_ARGUMENT, "method is 7", NULL);
  em_pagerank_options_init(&po);
  double three[] = {1, 1, 1}, neg[] = {1, -2}, zero[] = {0, 0}, nan2[] = {NAN, 1};
  em_tensor *p = tensor_from_doubles(3, three);
  po.personalization = p;
  tg_expect_error(em_graph_pagerank(&x, NULL, NULL, g, &po), EM_ERR_SHAPE, "personalization", "[3]", "[2]", NULL);
  em_tensor_release(p);
  p = tensor_from_doubles(2, neg);
  po.personalization = p;
  tg_expect_error(em_graph_pagerank(&x, NULL, NULL, g, &po), EM_ERR_ARGUMENT, "personalization[1] is -2", NULL);
  em_tensor_release(p);
  p = tensor_from_doubles(2, nan2);
  po.personalization = p;
  tg_expect_error(em_graph_pagerank(&x, NULL, NULL, g, &po), EM_ERR_ARGUMENT, "personalization[0] is nan", NULL);
  em_tensor_release(p);
  p = tensor_from_doubles(2, zero);
  po.personalization = p;
  tg_expect_error(em_graph_pagerank(&x, NULL, NULL, g, &po), EM_ERR_ARGUMENT, "sums to 0", NULL);
  em_tensor_release(p);
  assert_null(x);
  /* a scores tensor of the wrong shape */
  int64_t three_n = 3;
  assert_int_equal(em_empty(&x, 1, &three_n, EM_FLOAT32, (em_device){EM_CPU, 0}), EM_OK);
  tg_expect_error(em_graph_pagerank(&x, NULL, NULL, g, NULL), EM_ERR_SHAPE, NULL);
  em_tensor_release(x);
  x = NULL;
  tg_expect_error(em_graph_pagerank(NULL, NULL, NULL, g, NULL), EM_ERR_ARGUMENT, "NULL", NULL);
  em_graph_free(g);
  /* no vertices */
  g = tg_graph(0, 0, NULL, NULL, &o);
  tg_expect_error(em_graph_pagerank(&x, NULL, NULL, g, NULL), EM_ERR_ARGUMENT, "no vertices", NULL);
  em_graph_free(g);
}

/* The cache-blocked path (forced here with tiny tiles) agrees with the plain one and with
 * the reference, and stays thread-count independent. */
static void test_cache_blocking(void **state) {
  (void)state;
  em_graph_options o = tg_opts(EM_GRAPH_REORDER_DEGREE);
  em_graph *g = NULL;
  assert_int_equal(em_graph_kronecker(&g, 14, 16, 11, &o), EM_OK); /* big enough for threads */
  int64_t n = em_graph_num_vertices(g);
  em_pagerank_options po = tight();
  po.tol = 1e-8;
  po.max_iter = 120;
  int saved = em_get_num_threads();
  gr_tiles_slice = -1;
  float *plain = tg_pagerank(g, &po, NULL);
  gr_pr_prefetch = 1; /* the untiled path for large graphs */
  float *prefetched = tg_pagerank(g, &po, NULL);
  gr_pr_prefetch = 0;
  gr_tiles_slice = 1000;
  em_set_num_threads(1);
  float *one = tg_pagerank(g, &po, NULL);
  em_set_num_threads(2);
  float *two = tg_pagerank(g, &po, NULL);
  po.method = EM_PAGERANK_GAPBS;
  float *gapbs_tiled = tg_pagerank(g, &po, NULL);
  gr_tiles_slice = -1;
  float *gapbs_plain = tg_pagerank(g, &po, NULL);
  gr_tiles_slice = 0;
  em_set_num_threads(saved);
  double *ref = tg_reference(g, D, NULL);
  assert_memory_equal(one, two, (size_t)n * 4);
  assert_true(tg_l1(one, ref, n) < 1e-6);
  assert_true(tg_l1(plain, ref, n) < 1e-6);
  assert_true(tg_l1(prefetched, ref, n) < 1e-6);
  double diff = 0;
  for (int64_t v = 0; v < n; v++) diff += fabs((double)gapbs_tiled[v] - gapbs_plain[v]);
  assert_true(diff < 1e-6);
  free(plain), free(prefetched), free(one), free(two), free(gapbs_tiled), free(gapbs_plain), free(ref);
  em_graph_free(g);
}

/* Propagation blocking (forced, with a small hot set so most arcs are binned) agrees with
 * the plain pull and the reference, and gives the same bits at 1 and 2 threads. */
static void test_propagation_blocking(void **state) {
  (void)state;
  em_graph_options o = tg_opts(EM_GRAPH_REORDER_DEGREE);
  em_graph *g = NULL;
  assert_int_equal(em_graph_kronecker(&g, 14, 16, 11, &o), EM_OK);
  int64_t n = em_graph_num_vertices(g);
  em_pagerank_options po = tight();
  po.tol = 1e-8;
  po.max_iter = 120;
  int saved = em_get_num_threads();
  po.blocking = EM_PAGERANK_BLOCKING_NONE;
  float *plain = tg_pagerank(g, &po, NULL);
  po.blocking = EM_PAGERANK_BLOCKING_BINS;
  gr_bins_hot = 1000;
  em_pagerank_stats st;
  em_set_num_threads(1);
  float *one = tg_pagerank(g, &po, &st);
  assert_string_equal(st.engine, "cpu:bins");
  em_set_num_threads(2);
  float *two = tg_pagerank(g, &po, NULL);
  gr_bins_hot = 1; /* every source but vertex 0 binned */
  float *all = tg_pagerank(g, &po, NULL);
  gr_bins_hot = (int)n; /* nothing binned */
  float *none = tg_pagerank(g, &po, NULL);
  gr_bins_hot = 1000;
  po.method = EM_PAGERANK_GAPBS;
  float *gapbs_binned = tg_pagerank(g, &po, NULL);
  po.blocking = EM_PAGERANK_BLOCKING_NONE;
  float *gapbs_plain = tg_pagerank(g, &po, NULL);
  gr_bins_hot = 0;
  em_set_num_threads(saved);
  double *ref = tg_reference(g, D, NULL);
  assert_memory_equal(one, two, (size_t)n * 4);
  assert_true(tg_l1(one, ref, n) < 1e-6);
  assert_true(tg_l1(all, ref, n) < 1e-6);
  assert_true(tg_l1(none, ref, n) < 1e-6);
  assert_true(tg_l1(plain, ref, n) < 1e-6);
  double diff = 0;
  for (int64_t v = 0; v < n; v++) diff += fabs((double)gapbs_binned[v] - gapbs_plain[v]);
  assert_true(diff < 1e-6);
  /* a blocking outside the enum is refused */
  po.blocking = 7;
  em_tensor *x = NULL;
  tg_expect_error(em_graph_pagerank(&x, NULL, NULL, g, &po), EM_ERR_ARGUMENT, "blocking is 7", NULL);
  free(plain), free(one), free(two), free(all), free(none), free(gapbs_binned), free(gapbs_plain), free(ref);
  em_graph_free(g);
}

/* Tiles over a CSR whose slots carry keys (as a rank of a partitioned graph builds them,
 * pagerank_dist.c): a source is hot when its key is below the segment width, a cold one
 * falls in segment key >> shift, and each vertex's cold sum is its segments' float sums
 * in ascending order. Checked against that definition, computed here directly, with keys
 * spread over a key space three times the slots (gaps: the slots are a subset). */
static void check_tiles_keys(const gr_tiles_csr *c, const uint32_t *key, const float *contrib, float *acc, int bits);

static void test_tiles_keys(void **state) {
  (void)state;
  enum { N = 300, SLOTS = 500, DEG = 40 };
  uint32_t key[SLOTS], src[N * DEG];
  int64_t off[N + 1];
  float contrib[SLOTS], acc[N];
  uint64_t r = 12345;
  for (int u = 0, k = 0; u < SLOTS; u++) key[u] = (uint32_t)(k += 1 + (int)((r = r * 6364136223846793005u + 1) >> 62));
  for (int u = 0; u < SLOTS; u++) contrib[u] = (float)((r = r * 6364136223846793005u + 1) >> 40) * 0x1p-24f;
  off[0] = 0;
  for (int v = 0; v < N; v++) { /* ascending distinct slots, v % DEG of them */
    int64_t j = off[v];
    for (int u = 0; u < SLOTS && j - off[v] < v % DEG; u++)
      if (((r = r * 6364136223846793005u + 1) >> 59) < 3) src[j++] = (uint32_t)u;
    off[v + 1] = j;
  }
  gr_tiles_csr c = {.n = N, .m = off[N], .offsets = off, .sources = src, .key = key, .slots = SLOTS,
                    .keys = key[SLOTS - 1] + 1, .active = SLOTS};
  /* the words' distance field as wide as it comes (no escapes here), then 2 bits: a
   * distance of 3 or more (most) takes an escape; then two segments hot */
  for (int bits = 0; bits <= 2; bits += 2) check_tiles_keys(&c, key, contrib, acc, bits);
  setenv("EMBER_PAGERANK_HOT_SEGMENTS", "2", 1);
  check_tiles_keys(&c, key, contrib, acc, 0);
  unsetenv("EMBER_PAGERANK_HOT_SEGMENTS");
}

static void check_tiles_keys(const gr_tiles_csr *c, const uint32_t *key, const float *contrib, float *acc, int bits) {
  enum { N = 300 };
  const int64_t *off = c->offsets;
  const uint32_t *src = c->sources;
  gr_tiles t;
  gr_tiles_slice = 64;
  gr_tiles_delta_bits = bits;
  assert_int_equal(gr_tiles_build_csr(&t, c, true), EM_OK);
  gr_tiles_slice = 0;
  gr_tiles_delta_bits = 0;
  assert_non_null(t.hot_len);
  assert_int_equal(t.seg, 64);
  assert_int_equal(t.esc, bits ? 3 : (1u << 26) - 1);
  const uint32_t hot_keys = (uint32_t)t.hot;
  assert_true(hot_keys == 64 || (hot_keys == 128 && getenv("EMBER_PAGERANK_HOT_SEGMENTS")));
  int64_t words = t.tile_word[t.nblocks * t.nseg];
  for (int64_t b = 0; b < t.nblocks; b++) gr_tiles_gather(&t, b, contrib, acc, N);
  int64_t cold = 0;
  for (int v = 0; v < N; v++) {
    int64_t j = off[v], hot = 0;
    while (j < off[v + 1] && key[src[j]] < hot_keys) j++, hot++;
    assert_int_equal(t.hot_len[v], hot);
    float want = 0;
    while (j < off[v + 1]) {
      uint32_t seg = key[src[j]] >> 6;
      double sum = 0;
      for (; j < off[v + 1] && key[src[j]] >> 6 == seg; j++, cold++) sum += contrib[src[j]];
      want += (float)sum;
    }
    if (acc[v] != want) fail_msg("vertex %d: cold sum %.9g, expected %.9g", v, acc[v], want);
  }
  assert_int_equal(t.cold_arcs, cold);
  assert_true(cold > off[N] / 3); /* many arcs are cold: the test exercises the tiles */
  if (bits) assert_true(words > cold); /* escapes taken */
  else assert_int_equal(words, cold);
  gr_tiles_free(&t);
}

/* The hot set widens by whole segments until the copy is at most a quarter of the sources
 * (a graph whose arcs spread over many sources, tiles of 64): each vertex's hot prefix and
 * cold sums then follow the wider threshold. */
static void test_tiles_hot_widens(void **state) {
  (void)state;
  enum { N = 2048, S = 1024 };
  static int64_t off[N + 1];
  static uint32_t src[N * S / 8], outdeg[N];
  static float contrib[N], acc[N];
  off[0] = 0;
  for (int v = 0; v < N; v++) {
    int64_t j = off[v];
    for (uint32_t u = 0; u < S; u++) /* source u in about 1 / (u / 64 + 1) of the lists */
      if (((uint32_t)(v * 2654435761u) ^ (u * 40503u)) % (u / 64 + 1) == 0 && j - off[v] < S / 8) src[j++] = u;
    off[v + 1] = j;
  }
  for (int64_t j = 0; j < off[N]; j++) outdeg[src[j]]++;
  for (int u = 0; u < N; u++) contrib[u] = (float)(u % 13 + 1) * 0x1p-10f;
  int64_t want = 64, hot_arcs = 0, u = 0; /* the rule, from the out-degrees */
  for (;; want *= 2) {
    for (; u < want; u++) hot_arcs += outdeg[u];
    if ((off[N] - hot_arcs) * 4 <= off[N]) break;
  }
  assert_true(want > 64);
  gr_tiles_csr c = {.n = N, .m = off[N], .offsets = off, .sources = src, .slots = N, .keys = N, .active = S,
                    .out_degree = outdeg};
  gr_tiles t;
  gr_tiles_slice = 64;
  assert_int_equal(gr_tiles_build_csr(&t, &c, true), EM_OK);
  gr_tiles_slice = 0;
  assert_non_null(t.hot_len);
  assert_int_equal(t.hot, want);
  for (int64_t b = 0; b < t.nblocks; b++) gr_tiles_gather(&t, b, contrib, acc, N);
  for (int v = 0; v < N; v++) {
    int64_t j = off[v];
    while (j < off[v + 1] && src[j] < want) j++;
    assert_int_equal(t.hot_len[v], j - off[v]);
    float sum = 0;
    while (j < off[v + 1]) {
      double seg = 0;
      for (uint32_t s = src[j] >> 6; j < off[v + 1] && src[j] >> 6 == s; j++) seg += contrib[src[j]];
      sum += (float)seg;
    }
    if (acc[v] != sum) fail_msg("vertex %d: cold sum %.9g, expected %.9g", v, acc[v], sum);
  }
  gr_tiles_free(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_propagation_blocking),
      cmocka_unit_test(test_cycle_is_uniform),
      cmocka_unit_test(test_dangling_mass_goes_to_teleport),
      cmocka_unit_test(test_self_loop),
      cmocka_unit_test(test_isolated_vertex),
      cmocka_unit_test(test_personalization),
      cmocka_unit_test(test_gapbs_mode),
      cmocka_unit_test(test_gauss_seidel),
      cmocka_unit_test(test_matches_float64_reference),
      cmocka_unit_test(test_deterministic_and_reported),
      cmocka_unit_test(test_cache_blocking),
      cmocka_unit_test(test_tiles_keys),
      cmocka_unit_test(test_tiles_hot_widens),
      cmocka_unit_test(test_option_errors),
  };
  return cmocka_run_group_tests(tests, tg_setup, tg_cleanup);
}
