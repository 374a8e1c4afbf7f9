/* test_graph_analysis.c - top-k (order, ties, NaN, ids) and ranking comparison (overlap
 * and Kendall's tau-b, values checked against scipy.stats.kendalltau). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include "test_util.h"
#include "ember/graph.h"
#include "test_graph_util.h"

static void test_topk(void **state) {
  (void)state;
  double v[] = {0.1, 0.5, NAN, 0.5, 0.2, -1};
  em_tensor *t = tensor_from_doubles(6, v);
  em_graph_ranked top[6];
  int64_t count = -1;
  assert_int_equal(em_graph_topk(top, &count, t, 3, NULL), EM_OK);
  assert_int_equal(count, 3);
  int64_t want[] = {1, 3, 4}; /* ties: the smaller id first */
  for (int i = 0; i < 3; i++) {
    assert_int_equal(top[i].vertex, want[i]);
    assert_int_equal(top[i].original_id, want[i]);
    assert_null(top[i].label);
  }
  assert_true(top[0].score == 0.5 && top[2].score == 0.2);
  assert_int_equal(em_graph_topk(top, &count, t, 100, NULL), EM_OK);
  assert_int_equal(count, 6);
  assert_int_equal(top[4].vertex, 5); /* -1 */
  assert_int_equal(top[5].vertex, 2); /* NaN ranks last */
  assert_int_equal(em_graph_topk(top, &count, t, 0, NULL), EM_OK);
  assert_int_equal(count, 0);
  /* integer scores (degrees) work too */
  double deg[] = {3, 1, 2};
  em_tensor *d64 = tensor_from_doubles(3, deg), *i64 = NULL;
  assert_int_equal(em_to(&i64, d64, EM_INT64, (em_device){EM_CPU, 0}), EM_OK);
  assert_int_equal(em_graph_topk(top, &count, i64, 3, NULL), EM_OK);
  assert_int_equal(top[0].vertex, 0);
  assert_int_equal(top[1].vertex, 2);
  assert_true(top[1].score == 2);
  em_tensor_release(i64), em_tensor_release(d64);
  tg_expect_error(em_graph_topk(top, &count, t, -1, NULL), EM_ERR_ARGUMENT, "k is -1", NULL);
  int64_t sizes[] = {2, 3};
  em_tensor *m = NULL;
  assert_int_equal(em_view(&m, t, 2, sizes), EM_OK);
  tg_expect_error(em_graph_topk(top, &count, m, 2, NULL), EM_ERR_SHAPE, "[2, 3]", "one dimension", NULL);
  /* a graph fixes n and supplies original ids */
  em_graph_options o = tg_opts(1);
  em_graph *g = NULL;
  assert_int_equal(em_graph_load(&g, tg_text("ids.txt", "100 200\n200 300\n"), &o), EM_OK);
  tg_expect_error(em_graph_topk(top, &count, t, 2, g), EM_ERR_SHAPE, "6 scores for a graph of 3 vertices", NULL);
  double w[] = {0.2, 0.7, 0.1};
  em_tensor *x = tensor_from_doubles(3, w);
  assert_int_equal(em_graph_topk(top, &count, x, 1, g), EM_OK);
  assert_int_equal(top[0].vertex, 1);
  assert_int_equal(top[0].original_id, 200);
  em_tensor_release(x), em_tensor_release(m), em_tensor_release(t);
  em_graph_free(g);
}

static em_rank_comparison compare(int64_t n, const double *a, const double *b, int64_t k) {
  em_tensor *ta = tensor_from_doubles(n, a), *tb = tensor_from_doubles(n, b);
  em_rank_comparison c;
  if (em_graph_compare_rankings(&c, ta, tb, k)) fail_msg("compare: %s", em_last_error());
  em_tensor_release(ta), em_tensor_release(tb);
  return c;
}

static void test_compare_rankings(void **state) {
  (void)state;
  double a[] = {1, 2, 3, 4, 5}, same[] = {10, 20, 30, 40, 50}, rev[] = {5, 4, 3, 2, 1}, mix[] = {1, 3, 2, 5, 4};
  em_rank_comparison c = compare(5, a, same, 5);
  assert_int_equal(c.overlap, 5);
  assert_int_equal(c.union_size, 5);
  assert_true(fabs(c.kendall_tau - 1) < 1e-12);
  c = compare(5, a, rev, 5);
  assert_true(fabs(c.kendall_tau + 1) < 1e-12);
  c = compare(5, a, mix, 5); /* scipy: 0.6 */
  assert_true(fabs(c.kendall_tau - 0.6) < 1e-12);
  /* top 3 of each: {0,1,2} and {2,3,4}; tau-b over the union with ties (scipy: -4/9) */
  double p[] = {10, 9, 8, 1, 1, 1}, q[] = {1, 1, 10, 9, 8, 1};
  c = compare(6, p, q, 3);
  assert_int_equal(c.k, 3);
  assert_int_equal(c.overlap, 1);
  assert_int_equal(c.union_size, 5);
  assert_true(fabs(c.kendall_tau + 4.0 / 9.0) < 1e-12);
  /* k beyond n is clipped; constant scores give no tau */
  double flat[] = {1, 1, 1};
  c = compare(3, flat, flat, 10);
  assert_int_equal(c.k, 3);
  assert_true(isnan(c.kendall_tau));
  /* errors */
  em_tensor *ta = tensor_from_doubles(5, a), *tb = tensor_from_doubles(3, flat);
  tg_expect_error(em_graph_compare_rankings(&c, ta, tb, 2), EM_ERR_SHAPE, "rankings of 5 and 3 vertices", NULL);
  tg_expect_error(em_graph_compare_rankings(&c, ta, ta, 0), EM_ERR_ARGUMENT, "k is 0", NULL);
  em_tensor_release(ta), em_tensor_release(tb);
}

/* On a star every arc points at vertex 0: PageRank and in-degree agree on the leader. */
static void test_compare_indegree(void **state) {
  (void)state;
  int64_t s[] = {1, 2, 3, 4, 2, 3, 4, 4}, d[] = {0, 0, 0, 0, 1, 1, 1, 2};
  em_graph_options o = tg_opts(1);
  em_graph *g = tg_graph(5, 8, s, d, &o);
  em_tensor *x = NULL;
  assert_int_equal(em_graph_pagerank(&x, NULL, NULL, g, NULL), EM_OK);
  em_rank_comparison c;
  assert_int_equal(em_graph_compare_indegree(&c, g, x, 3), EM_OK);
  assert_int_equal(c.overlap, 3);
  assert_true(fabs(c.kendall_tau - 1) < 1e-12); /* in-degrees 4, 3, 1, 0, 0 rank as the scores do */
  tg_expect_error(em_graph_compare_indegree(&c, NULL, x, 3), EM_ERR_ARGUMENT, "graph is NULL", NULL);
  em_tensor_release(x);
  em_graph_free(g);
}

/* Kendall's tau-b by its definition, O(n^2): concordant minus discordant pairs over the
 * square root of the pairs untied in a times those untied in b. */
static double tau_b_brute(int64_t n, const double *a, const double *b) {
  double c = 0, d = 0, untied_a = 0, untied_b = 0;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = i + 1; j < n; j++) {
      double x = a[i] - a[j], y = b[i] - b[j];
      untied_a += x != 0;
      untied_b += y != 0;
      if (x * y > 0) c++;
      else if (x * y < 0) d++;
    }
  return (c - d) / sqrt(untied_a * untied_b);
}

/* Knight's O(n log n) tau-b (all vertices, and over a top-k union equal to everything)
 * against the brute-force definition, on random rankings with many ties and on ties-free
 * ones, at sizes that exercise the merge sort's odd splits. */
static void test_kendall_tau_brute_force(void **state) {
  (void)state;
  uint64_t seed = 12345;
  for (int trial = 0; trial < 40; trial++) {
    int64_t n = 2 + trial * 7;
    double *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
    int levels = trial % 3 == 0 ? 1000000 : 2 + trial % 5; /* few levels: many ties */
    for (int64_t i = 0; i < n; i++) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      a[i] = (double)((seed >> 33) % (uint64_t)levels);
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      /* b leans on a (so tau is not near 0) plus noise */
      b[i] = trial % 2 ? a[i] + (double)((seed >> 33) % 3) : (double)((seed >> 33) % (uint64_t)levels);
    }
    double want = tau_b_brute(n, a, b), got = NAN;
    em_tensor *ta = tensor_from_doubles(n, a), *tb = tensor_from_doubles(n, b);
    assert_int_equal(em_graph_kendall_tau(&got, ta, tb), EM_OK);
    if (isnan(want)) {
      assert_true(isnan(got));
    } else {
      if (fabs(got - want) > 1e-12) fail_msg("n %lld levels %d: tau %.15g, brute force %.15g", (long long)n, levels, got, want);
      em_rank_comparison c = compare(n, a, b, n); /* the top-n union is every vertex */
      assert_true(fabs(c.kendall_tau - want) < 1e-12);
    }
    em_tensor_release(ta), em_tensor_release(tb);
    free(a), free(b);
  }
  /* errors name the call */
  double x[] = {1, 2, 3};
  em_tensor *t3 = tensor_from_doubles(3, x), *t2 = tensor_from_doubles(2, x);
  double tau;
  tg_expect_error(em_graph_kendall_tau(&tau, t3, t2), EM_ERR_SHAPE, "graph kendall_tau", "3 and 2", NULL);
  tg_expect_error(em_graph_kendall_tau(NULL, t3, t3), EM_ERR_ARGUMENT, "tau is NULL", NULL);
  double same[] = {5, 5, 5};
  em_tensor *flat = tensor_from_doubles(3, same);
  assert_int_equal(em_graph_kendall_tau(&tau, t3, flat), EM_OK);
  assert_true(isnan(tau)); /* one ranking all ties: undefined */
  em_tensor_release(t3), em_tensor_release(t2), em_tensor_release(flat);
}

static em_tensor *converted(const em_tensor *t, em_dtype dtype) {
  em_tensor *c = NULL;
  assert_int_equal(em_to(&c, t, dtype, (em_device){EM_CPU, 0}), EM_OK);
  return c;
}

/* Scores (float32) against degrees (int64 or int32) take 32-bit keys instead of doubles:
 * the same tau as the brute force, with ties, NaN (ranks last), -0 tied with +0, and
 * degrees beyond 32 bits or negative (the double path). */
static void test_kendall_tau_keys(void **state) {
  (void)state;
  uint64_t seed = 777;
  for (int trial = 0; trial < 24; trial++) {
    int64_t n = 3 + trial * 11;
    double *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b), *ra = malloc((size_t)n * sizeof *ra);
    int levels = trial % 2 ? 4 : 100000;
    for (int64_t i = 0; i < n; i++) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      a[i] = (double)((seed >> 33) % (uint64_t)levels) / 8; /* exact in float32 */
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      b[i] = (double)((seed >> 33) % (uint64_t)levels) + (trial % 4 == 3 ? 5e9 : 0); /* beyond 32 bits: doubles */
      if (trial % 3 == 1 && b[i] > 2) b[i] = -b[i]; /* negative: doubles */
      ra[i] = a[i];
      if (a[i] == 0 && i % 2) a[i] = -0.0, ra[i] = 0;
      if (i % 13 == 5) a[i] = NAN, ra[i] = -1; /* ranks below every score */
    }
    double want = tau_b_brute(n, ra, b), got = NAN, got32 = NAN;
    em_tensor *ta = tensor_from_doubles(n, a), *tb = tensor_from_doubles(n, b);
    em_tensor *fa = converted(ta, EM_FLOAT32), *ib = converted(tb, EM_INT64), *jb = NULL;
    assert_int_equal(em_graph_kendall_tau(&got, fa, ib), EM_OK);
    if (fabs(got - want) > 1e-12) fail_msg("trial %d n %lld: tau %.15g, brute force %.15g", trial, (long long)n, got, want);
    if (trial % 4 != 3) { /* int32 degrees */
      jb = converted(tb, EM_INT32);
      assert_int_equal(em_graph_kendall_tau(&got32, jb, fa), EM_OK);
      assert_true(fabs(got32 - want) < 1e-12); /* symmetric */
    }
    em_tensor_release(ta), em_tensor_release(tb), em_tensor_release(fa), em_tensor_release(ib);
    if (jb) em_tensor_release(jb);
    free(a), free(b), free(ra);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_topk),
      cmocka_unit_test(test_compare_rankings),
      cmocka_unit_test(test_compare_indegree),
      cmocka_unit_test(test_kendall_tau_brute_force),
      cmocka_unit_test(test_kendall_tau_keys),
  };
  return cmocka_run_group_tests(tests, tg_setup, tg_cleanup);
}
