/* test_cuda_pagerank_plan.c - the GPU PageRank's work split (runtime/plugins/cuda/pagerank_plan.c),
 * checked on the CPU: the chunks of every heavy vertex cover its arcs exactly, in order,
 * none longer than PR_CHUNK; a lane finds its heavy vertex's index the way the update kernel
 * does (group_first plus the heavy lanes before it in its warp); and the gather, executed
 * by a loop that follows the kernels' reading order (lanes striding over a chunk, the
 * warp's tree, then the chunk sums in order), gives each vertex the sum of its in-arcs. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "test_util.h"
/* plain C, no CUDA: the library ember_cuda_plans, linked into this test as into the plugin */
#include "plugins/cuda/pagerank_plan.h"

/* A CSR whose vertex v has degree[v] in-arcs, sources drawn from a fixed generator. */
typedef struct csr {
  int64_t n, m;
  int64_t *off;
  uint32_t *src;
} csr;

static csr make_csr(int64_t n, const int64_t *degree) {
  csr g = {.n = n};
  g.off = malloc((size_t)(n + 1) * sizeof *g.off);
  g.off[0] = 0;
  for (int64_t v = 0; v < n; v++) g.off[v + 1] = g.off[v] + degree[v];
  g.m = g.off[n];
  g.src = malloc((size_t)(g.m > 0 ? g.m : 1) * sizeof *g.src);
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (int64_t j = 0; j < g.m; j++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    g.src[j] = (uint32_t)(s % (uint64_t)n);
  }
  return g;
}

static void free_csr(csr *g) {
  free(g->off);
  free(g->src);
}

/* One warp's sum of a chunk: lane l adds arcs l, l + 32, ...; then pairs at distance 16,
 * 8, 4, 2, 1 (the kernels' shuffle-down tree). */
static double chunk_sum(const csr *g, const double *contrib, int64_t begin, uint32_t len) {
  double lane[PR_GROUP] = {0};
  for (int l = 0; l < PR_GROUP; l++)
    for (uint32_t j = (uint32_t)l; j < len; j += PR_GROUP) lane[l] += contrib[g->src[begin + j]];
  for (int o = PR_GROUP / 2; o > 0; o >>= 1)
    for (int l = 0; l < o; l++) lane[l] += lane[l + o];
  return lane[0];
}

/* The in-sum of v as the update kernel forms it from the plan. */
static double planned_sum(const pr_plan *p, const csr *g, const double *contrib, const double *sums, int64_t v) {
  int64_t begin = g->off[v], degree = g->off[v + 1] - begin;
  if (degree < PR_LIGHT) {
    double s = 0;
    for (int64_t j = begin; j < begin + degree; j++) s += contrib[g->src[j]];
    return s;
  }
  /* the heavy lanes before v in its group: the kernel's popc(ballot & lanes below) */
  int64_t first = v / PR_GROUP * PR_GROUP, k = p->group_first[v / PR_GROUP];
  for (int64_t u = first; u < v; u++) k += g->off[u + 1] - g->off[u] >= PR_LIGHT;
  int64_t c0 = p->chunk_first[k], c1 = p->chunk_first[k + 1];
  assert_true(c1 > c0);
  assert_int_equal(p->chunk_begin[c0], begin); /* the chunks of v, and no other's */
  double s = 0;
  for (int64_t c = c0; c < c1; c++) s += sums[c];
  return s;
}

static void check_plan(int64_t n, const int64_t *degree) {
  csr g = make_csr(n, degree);
  pr_plan p;
  assert_int_equal(pr_plan_build(&p, g.n, g.off), EM_OK);
  assert_int_equal(p.n, n);
  assert_int_equal(p.groups, (n + PR_GROUP - 1) / PR_GROUP);
  int64_t heavy = 0, chunks = 0, most = 0;
  for (int64_t v = 0; v < n; v++) {
    if (degree[v] < PR_LIGHT) continue;
    int64_t c = (degree[v] + PR_CHUNK - 1) / PR_CHUNK;
    heavy++, chunks += c, most = c > most ? c : most;
  }
  assert_int_equal(p.heavy, heavy);
  assert_int_equal(p.nchunks, chunks);
  assert_int_equal(p.max_chunks, most);
  assert_int_equal(p.group_first[0], 0);
  assert_int_equal(p.group_first[p.groups], heavy);
  assert_int_equal(p.chunk_first[heavy], chunks);
  /* chunks: consecutive pieces of one vertex's arcs, 1..PR_CHUNK long, all but the last full */
  for (int64_t k = 0; k < heavy; k++) {
    int64_t c0 = p.chunk_first[k], c1 = p.chunk_first[k + 1];
    assert_true(c1 > c0);
    for (int64_t c = c0; c < c1; c++) {
      assert_true(p.chunk_len[c] >= 1 && p.chunk_len[c] <= PR_CHUNK);
      if (c + 1 < c1) {
        assert_int_equal(p.chunk_len[c], PR_CHUNK);
        assert_int_equal(p.chunk_begin[c + 1], p.chunk_begin[c] + PR_CHUNK);
      }
    }
  }
  assert_true(pr_plan_device_bytes(&p) >= (size_t)(p.groups + 1) * 8 + (size_t)chunks * 20);

  /* the gather through the plan against the plain sum; small integers keep both exact */
  double *contrib = malloc((size_t)n * sizeof *contrib);
  double *sums = malloc((size_t)(chunks > 0 ? chunks : 1) * sizeof *sums);
  for (int64_t v = 0; v < n; v++) contrib[v] = (double)(v % 13) + 1;
  for (int64_t c = 0; c < chunks; c++) sums[c] = chunk_sum(&g, contrib, p.chunk_begin[c], p.chunk_len[c]);
  for (int64_t v = 0; v < n; v++) {
    double plain = 0;
    for (int64_t j = g.off[v]; j < g.off[v + 1]; j++) plain += contrib[g.src[j]];
    assert_true(planned_sum(&p, &g, contrib, sums, v) == plain);
  }
  free(contrib);
  free(sums);
  pr_plan_free(&p);
  assert_null(p.group_first);
  free_csr(&g);
}

/* Degrees around every threshold, in a vertex count that is not a multiple of a warp. */
static void test_thresholds(void **state) {
  (void)state;
  const int64_t edges[] = {
      0, 1, PR_LIGHT - 1, PR_LIGHT, PR_LIGHT + 1, PR_CHUNK - 1, PR_CHUNK, PR_CHUNK + 1, 2 * PR_CHUNK, 5 * PR_CHUNK + 7,
      3, 0};
  enum { N = 101 };
  int64_t degree[N];
  for (int64_t v = 0; v < N; v++) degree[v] = edges[(v * 7) % (int64_t)(sizeof edges / sizeof *edges)];
  check_plan(N, degree);
}

/* Whole warps of heavy vertices (several per group, the update kernel's cooperative case),
 * then long runs of light ones. */
static void test_heavy_groups(void **state) {
  (void)state;
  enum { N = 32 * 9 + 5 };
  int64_t degree[N];
  for (int64_t v = 0; v < N; v++) degree[v] = v < 70 ? 40 + (v * 977) % 9000 : v % 5;
  check_plan(N, degree);
}

static void test_small_and_empty(void **state) {
  (void)state;
  int64_t none[33] = {0}, one[1] = {PR_CHUNK * 3};
  check_plan(33, none); /* no arcs at all */
  check_plan(1, one); /* a single heavy vertex: one group, three chunks */
  int64_t light[64];
  for (int v = 0; v < 64; v++) light[v] = v % PR_LIGHT;
  check_plan(64, light); /* no heavy vertex */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_thresholds),
      cmocka_unit_test(test_heavy_groups),
      cmocka_unit_test(test_small_and_empty),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
