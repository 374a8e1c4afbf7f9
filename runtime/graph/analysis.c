/* analysis.c - reading rankings: the top k vertices, and how two rankings agree over
 * their top k (overlap, and Kendall's tau-b over the union of the two lists), which is
 * how the Twitter study compared PageRank with follower counts. Ties rank the smaller
 * dense id first; NaN ranks last. Kendall's tau-b uses Knight's O(u log u) algorithm. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "graph_impl.h"
#include "tensor/tensor_impl.h"

typedef struct ranked {
  double score;
  int64_t id;
} ranked;

/* a ranks before b */
static inline bool before(ranked a, ranked b) { return a.score > b.score || (a.score == b.score && a.id < b.id); }

static void heap_down(ranked *h, int64_t i, int64_t n) { /* min-heap: the root ranks last */
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= n) return;
    if (c + 1 < n && before(h[c], h[c + 1])) c++;
    if (!before(h[i], h[c])) return;
    ranked t = h[i];
    h[i] = h[c], h[c] = t, i = c;
  }
}

static int cmp_rank(const void *a, const void *b) {
  ranked x = *(const ranked *)a, y = *(const ranked *)b;
  return before(x, y) ? -1 : before(y, x) ? 1 : 0;
}

/* The k best of v[0..n) into out (sorted); returns how many (min(k, n)). */
static int64_t select_top(ranked *out, const double *v, int64_t n, int64_t k) {
  if (k > n) k = n;
  if (k <= 0) return 0;
  int threads = gr_threads();
  ranked *heaps = malloc((size_t)threads * (size_t)k * sizeof *heaps);
  int64_t *sizes = calloc((size_t)threads, sizeof *sizes);
  if (!heaps || !sizes) {
    free(heaps), free(sizes);
    return -1;
  }
#pragma omp parallel num_threads(threads)
  {
    int t = omp_get_thread_num();
    ranked *h = heaps + (size_t)t * (size_t)k;
    int64_t size = 0;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; i++) {
      ranked r = {isnan(v[i]) ? -INFINITY : v[i], i};
      if (size < k) {
        h[size++] = r;
        if (size == k)
          for (int64_t j = k / 2 - 1; j >= 0; j--) heap_down(h, j, k);
      } else if (before(r, h[0])) {
        h[0] = r;
        heap_down(h, 0, k);
      }
    }
    sizes[t] = size;
  }
  int64_t total = 0;
  for (int t = 0; t < threads; t++) {
    memmove(heaps + total, heaps + (size_t)t * (size_t)k, (size_t)sizes[t] * sizeof *heaps);
    total += sizes[t];
  }
  qsort(heaps, (size_t)total, sizeof *heaps, cmp_rank);
  memcpy(out, heaps, (size_t)k * sizeof *out);
  free(heaps);
  free(sizes);
  return k;
}

static em_status values_of(const char *op, const em_tensor *t, double **v, int64_t *n) {
  em_status st = tn_check_tensor(op, t, "scores");
  if (st) return st;
  if (t->ndim != 1)
    return em_set_error(EM_ERR_SHAPE, "%s: got scores of shape %s, expected one dimension", op, EM_SHAPE(t));
  *n = t->sizes[0];
  return gr_tensor_values(op, t, *n, v);
}

em_status em_graph_topk(em_graph_ranked *out, int64_t *count, const em_tensor *scores, int64_t k, const em_graph *g) {
  const char *op = "graph topk";
  if (!out || !count) return em_set_error(EM_ERR_ARGUMENT, "%s: out or count is NULL", op);
  if (k < 0) return em_set_error(EM_ERR_ARGUMENT, "%s: k is %lld, expected >= 0", op, (long long)k);
  double *v = NULL;
  int64_t n = 0;
  em_status st = values_of(op, scores, &v, &n);
  if (st) return st;
  if (g && n != g->n) {
    gr_free(v);
    return em_set_error(EM_ERR_SHAPE, "%s: %lld scores for a graph of %lld vertices", op, (long long)n,
                        (long long)g->n);
  }
  ranked *top = malloc((size_t)(k < n ? k : n) * sizeof *top + 1);
  int64_t got = top ? select_top(top, v, n, k) : -1;
  gr_free(v);
  if (got < 0) {
    free(top);
    return gr_oom(op, (size_t)k * 16);
  }
  for (int64_t i = 0; i < got; i++) {
    int64_t id = top[i].id;
    out[i] = (em_graph_ranked){.vertex = id,
                               .original_id = g ? em_graph_original_id(g, id) : id,
                               .score = top[i].score,
                               .label = g ? em_graph_label(g, id) : NULL};
  }
  *count = got;
  free(top);
  return EM_OK;
}

/* ---- Kendall's tau-b (Knight 1966): sort by (a, b), count ties, then count the
 * exchanges a merge sort by b makes: those are the discordant pairs. */

typedef struct pair {
  double a, b;
} pair;

static int cmp_ab(const void *x, const void *y) {
  const pair *p = x, *q = y;
  if (p->a != q->a) return p->a < q->a ? -1 : 1;
  return p->b < q->b ? -1 : p->b > q->b;
}

/* Exchanges a merge sort of a makes (the discordant pairs, once a is sorted by the other
 * ranking); a ends sorted. tmp: n words. */
static int64_t merge_count(uint64_t *a, uint64_t *tmp, int64_t n) {
  if (n < 2) return 0;
  int64_t h = n / 2, swaps = merge_count(a, tmp, h) + merge_count(a + h, tmp, n - h);
  int64_t i = 0, j = h, k = 0;
  while (i < h && j < n) {
    if (a[j] < a[i]) {
      swaps += h - i;
      tmp[k++] = a[j++];
    } else {
      tmp[k++] = a[i++];
    }
  }
  while (i < h) tmp[k++] = a[i++];
  while (j < n) tmp[k++] = a[j++];
  memcpy(a, tmp, (size_t)n * sizeof *a);
  return swaps;
}

/* A double's order as an unsigned key (no NaN here; -0 ties +0). */
static uint64_t order_key(double x) {
  if (x == 0) x = 0;
  uint64_t bits;
  memcpy(&bits, &x, sizeof bits);
  return bits >> 63 ? ~bits : bits | (1ull << 63);
}

/* Pairs within runs of equal neighbours, same(ctx, i) telling whether element i equals
 * element i - 1: the ties of a sorted sequence. */
static double tied_pairs(int64_t n, const void *ctx, bool (*same)(const void *, int64_t)) {
  double t = 0;
  int64_t run = 1;
  for (int64_t i = 1; i <= n; i++) {
    if (i < n && same(ctx, i)) {
      run++;
    } else {
      t += (double)run * (double)(run - 1) / 2;
      run = 1;
    }
  }
  return t;
}

static bool same_a(const void *p, int64_t i) { return ((const pair *)p)[i].a == ((const pair *)p)[i - 1].a; }
static bool same_b(const void *p, int64_t i) { return ((const pair *)p)[i].b == ((const pair *)p)[i - 1].b; }
static bool same_ab(const void *p, int64_t i) { return same_a(p, i) && same_b(p, i); }

static bool same_key(const void *k, int64_t i) { return ((const uint64_t *)k)[i] == ((const uint64_t *)k)[i - 1]; }

static double tau_b(double n, double n1, double n2, double n3, double swaps) {
  double n0 = n * (n - 1) / 2, denom = sqrt((n0 - n1) * (n0 - n2));
  return denom == 0 ? NAN : (n0 - n1 - n2 + n3 - 2 * swaps) / denom;
}

static double kendall_tau_b(pair *p, int64_t n) {
  if (n < 2) return NAN;
  uint64_t *b = malloc(2 * (size_t)n * sizeof *b);
  if (!b) return NAN;
  qsort(p, (size_t)n, sizeof *p, cmp_ab);
  double n1 = tied_pairs(n, p, same_a), n3 = tied_pairs(n, p, same_ab);
  for (int64_t i = 0; i < n; i++) b[i] = order_key(p[i].b);
  double swaps = (double)merge_count(b, b + n, n); /* now sorted by b */
  double n2 = tied_pairs(n, b, same_key);
  free(b);
  return tau_b((double)n, n1, n2, n3, swaps);
}

/* ---- Kendall's tau-b over every vertex, in 16 bytes a vertex instead of 64 */

/* An order-preserving 32-bit key for each element of t (float32, int32, or int64 within
 * [0, 2^32): PageRank scores and degrees), with NaN as -inf and -0 as +0 so that keys tie
 * exactly where the values compare equal. False for any other tensor (the double path
 * serves it). shift places the keys in the high or low half of keys[]. */
static bool keys32(const em_tensor *t, int64_t n, uint64_t *keys, int shift) {
  if (!em_tensor_is_contiguous(t) || em_tensor_device(t).type != EM_CPU) return false;
  const void *data = em_tensor_data(t);
  em_dtype dt = em_tensor_dtype(t);
  if (dt == EM_INT64) {
    const int64_t *v = data;
    for (int64_t i = 0; i < n; i++)
      if (v[i] < 0 || v[i] > (int64_t)UINT32_MAX) return false;
#pragma omp parallel for schedule(static) num_threads(gr_threads())
    for (int64_t i = 0; i < n; i++) keys[i] |= (uint64_t)v[i] << shift;
    return true;
  }
  if (dt == EM_INT32) {
    const int32_t *v = data;
#pragma omp parallel for schedule(static) num_threads(gr_threads())
    for (int64_t i = 0; i < n; i++) keys[i] |= (uint64_t)((uint32_t)v[i] ^ 0x80000000u) << shift;
    return true;
  }
  if (dt != EM_FLOAT32) return false;
  const float *v = data;
#pragma omp parallel for schedule(static) num_threads(gr_threads())
  for (int64_t i = 0; i < n; i++) {
    float x = isnan(v[i]) ? -INFINITY : v[i] == 0 ? 0.0f : v[i];
    uint32_t bits = gr_float_bits(x);
    keys[i] |= (uint64_t)(bits & 0x80000000u ? ~bits : bits | 0x80000000u) << shift;
  }
  return true;
}

static bool same_key_a(const void *k, int64_t i) { return ((const uint64_t *)k)[i] >> 32 == ((const uint64_t *)k)[i - 1] >> 32; }

/* Knight's algorithm on (a key << 32 | b key); tmp: n more words. */
static double kendall_tau_keys(uint64_t *key, uint64_t *tmp, int64_t n) {
  if (n < 2) return NAN;
  gr_radix_u64(key, n, tmp);
  double n1 = tied_pairs(n, key, same_key_a), n3 = tied_pairs(n, key, same_key);
  for (int64_t i = 0; i < n; i++) key[i] &= UINT32_MAX; /* b's keys, in (a, b) order */
  double swaps = (double)merge_count(key, tmp, n); /* now sorted by b */
  double n2 = tied_pairs(n, key, same_key);
  return tau_b((double)n, n1, n2, n3, swaps);
}

em_status em_graph_compare_rankings(em_rank_comparison *out, const em_tensor *a, const em_tensor *b, int64_t k) {
  const char *op = "graph compare_rankings";
  if (!out) return em_set_error(EM_ERR_ARGUMENT, "%s: out is NULL", op);
  if (k < 1) return em_set_error(EM_ERR_ARGUMENT, "%s: k is %lld, expected >= 1", op, (long long)k);
  double *va = NULL, *vb = NULL;
  int64_t na = 0, nb = 0;
  em_status st = values_of(op, a, &va, &na);
  if (st) return st;
  if ((st = values_of(op, b, &vb, &nb))) {
    gr_free(va);
    return st;
  }
  ranked *ta = NULL, *tb = NULL;
  pair *pairs = NULL;
  char *seen = NULL;
  if (na != nb) {
    st = em_set_error(EM_ERR_SHAPE, "%s: rankings of %lld and %lld vertices", op, (long long)na, (long long)nb);
    goto done;
  }
  if (k > na) k = na;
  for (int64_t i = 0; i < na; i++) { /* NaN ranks last, and must not reach the sorts */
    if (isnan(va[i])) va[i] = -INFINITY;
    if (isnan(vb[i])) vb[i] = -INFINITY;
  }
  ta = malloc((size_t)k * sizeof *ta + 1);
  tb = malloc((size_t)k * sizeof *tb + 1);
  pairs = malloc(2 * (size_t)k * sizeof *pairs + 1);
  seen = calloc((size_t)na + 1, 1); /* 1: in a's list, 2: in b's, 3: both */
  if (!ta || !tb || !pairs || !seen || select_top(ta, va, na, k) < 0 || select_top(tb, vb, na, k) < 0) {
    st = gr_oom(op, (size_t)na);
    goto done;
  }
  int64_t overlap = 0, u = 0;
  for (int64_t i = 0; i < k; i++) seen[ta[i].id] |= 1;
  for (int64_t i = 0; i < k; i++) seen[tb[i].id] |= 2;
  for (int64_t i = 0; i < k; i++) {
    int64_t id = ta[i].id;
    overlap += seen[id] == 3;
    pairs[u++] = (pair){va[id], vb[id]};
  }
  for (int64_t i = 0; i < k; i++)
    if (seen[tb[i].id] == 2) pairs[u++] = (pair){va[tb[i].id], vb[tb[i].id]};
  *out = (em_rank_comparison){.k = k, .overlap = overlap, .union_size = u, .kendall_tau = kendall_tau_b(pairs, u)};
done:
  gr_free(va);
  gr_free(vb);
  free(ta);
  free(tb);
  free(pairs);
  free(seen);
  return st;
}

em_status em_graph_kendall_tau(double *tau, const em_tensor *a, const em_tensor *b) {
  const char *op = "graph kendall_tau";
  if (!tau) return em_set_error(EM_ERR_ARGUMENT, "%s: tau is NULL", op);
  if (!tn_check_tensor(op, a, "scores") && !tn_check_tensor(op, b, "scores") && a->ndim == 1 && b->ndim == 1 &&
      a->sizes[0] == b->sizes[0]) { /* scores and degrees: 32-bit keys, a quarter of the memory */
    int64_t n = a->sizes[0];
    uint64_t *key = gr_calloc((size_t)(n ? n : 1) * sizeof *key), *tmp = gr_alloc((size_t)(n ? n : 1) * sizeof *tmp);
    bool ok = key && tmp && keys32(a, n, key, 32) && keys32(b, n, key, 0);
    if (ok) *tau = kendall_tau_keys(key, tmp, n);
    gr_free(key);
    gr_free(tmp);
    if (ok) return EM_OK;
  }
  double *va = NULL, *vb = NULL;
  int64_t na = 0, nb = 0;
  em_status st = values_of(op, a, &va, &na);
  if (st) return st;
  if ((st = values_of(op, b, &vb, &nb))) {
    gr_free(va);
    return st;
  }
  pair *pairs = NULL;
  if (na != nb) {
    st = em_set_error(EM_ERR_SHAPE, "%s: rankings of %lld and %lld vertices, expected equal counts", op,
                      (long long)na, (long long)nb);
    goto done;
  }
  if (!(pairs = gr_alloc((size_t)na * sizeof *pairs + 1))) {
    st = gr_oom(op, (size_t)na * sizeof *pairs);
    goto done;
  }
  for (int64_t i = 0; i < na; i++) /* NaN ranks last, and must not reach the sorts */
    pairs[i] = (pair){isnan(va[i]) ? -INFINITY : va[i], isnan(vb[i]) ? -INFINITY : vb[i]};
  *tau = kendall_tau_b(pairs, na);
done:
  gr_free(va);
  gr_free(vb);
  gr_free(pairs);
  return st;
}

em_status em_graph_compare_indegree(em_rank_comparison *out, const em_graph *g, const em_tensor *scores, int64_t k) {
  if (!g) return em_set_error(EM_ERR_ARGUMENT, "graph compare_indegree: graph is NULL");
  em_tensor *indeg = NULL;
  em_status st = em_graph_degrees(g, &indeg, NULL);
  if (st) return st;
  st = em_graph_compare_rankings(out, scores, indeg, k);
  em_tensor_release(indeg);
  return st;
}
