/* sort.c - sorting vertex ids: each vertex's sources after the CSR fill (many short runs,
 * a few very long ones), the id sets of files with sparse 64-bit ids, and the 64-bit keys
 * of a ranking comparison over every vertex (analysis.c). */
#include <stdlib.h>
#include <string.h>
#include "graph_impl.h"

static void insertion_u32(uint32_t *a, int64_t n) {
  for (int64_t i = 1; i < n; i++) {
    uint32_t x = a[i];
    int64_t j = i;
    while (j > 0 && a[j - 1] > x) a[j] = a[j - 1], j--;
    a[j] = x;
  }
}

static void sift_down(uint32_t *a, int64_t i, int64_t n) {
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= n) return;
    if (c + 1 < n && a[c + 1] > a[c]) c++;
    if (a[i] >= a[c]) return;
    uint32_t t = a[i];
    a[i] = a[c], a[c] = t, i = c;
  }
}

static void heapsort_u32(uint32_t *a, int64_t n) {
  for (int64_t i = n / 2 - 1; i >= 0; i--) sift_down(a, i, n);
  for (int64_t e = n - 1; e > 0; e--) {
    uint32_t t = a[0];
    a[0] = a[e], a[e] = t;
    sift_down(a, 0, e);
  }
}

/* Quicksort (median of three) with a depth limit that falls back to heapsort. */
static void quick_u32(uint32_t *a, int64_t n, int depth) {
  while (n > 24) {
    if (depth-- == 0) {
      heapsort_u32(a, n);
      return;
    }
    uint32_t x = a[0], y = a[n / 2], z = a[n - 1];
    uint32_t pivot = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
    int64_t i = 0, j = n - 1;
    for (;;) { /* Hoare partition */
      while (a[i] < pivot) i++;
      while (a[j] > pivot) j--;
      if (i >= j) break;
      uint32_t t = a[i];
      a[i++] = a[j], a[j--] = t;
    }
    /* recurse into the smaller side, loop on the larger */
    if (j + 1 < n - j - 1) {
      quick_u32(a, j + 1, depth);
      a += j + 1, n -= j + 1;
    } else {
      quick_u32(a + j + 1, n - j - 1, depth);
      n = j + 1;
    }
  }
  insertion_u32(a, n);
}

/* LSD radix sort on BITS-bit digits; digits every key shares are skipped. 11-bit digits
 * (three passes) for long lists; 8-bit ones for lists of a few hundred, whose histograms
 * must stay small. Either beats quicksort there: on random ids its comparisons mispredict
 * about every other time. */
static inline void radix_u32(uint32_t *a, int64_t n, uint32_t *tmp, const int BITS) {
  const int buckets = 1 << BITS, digits = (32 + BITS - 1) / BITS;
  const uint32_t mask = (uint32_t)buckets - 1;
  uint32_t hist[4 << 11];
  memset(hist, 0, (size_t)digits * (size_t)buckets * sizeof *hist);
  for (int64_t i = 0; i < n; i++)
    for (int d = 0; d < digits; d++) hist[d * buckets + ((a[i] >> (d * BITS)) & mask)]++;
  uint32_t *from = a, *to = tmp;
  for (int d = 0; d < digits; d++) {
    uint32_t *h = hist + d * buckets, sum = 0;
    if (h[(from[0] >> (d * BITS)) & mask] == (uint32_t)n) continue; /* one bucket: nothing moves */
    for (int b = 0; b < buckets; b++) {
      uint32_t c = h[b];
      h[b] = sum;
      sum += c;
    }
    for (int64_t i = 0; i < n; i++) to[h[(from[i] >> (d * BITS)) & mask]++] = from[i];
    uint32_t *t = from;
    from = to, to = t;
  }
  if (from != a) memcpy(a, from, (size_t)n * sizeof *a);
}

void gr_sort_u32(uint32_t *a, int64_t n, uint32_t *tmp) {
  if (n < 2) return;
  if (n <= 24) insertion_u32(a, n);
  else if (n < GR_SORT_TMP_FROM || !tmp) quick_u32(a, n, 64); /* shorter: a radix sort's histograms cost more */
  else if (n <= 2048) radix_u32(a, n, tmp, 8);
  else radix_u32(a, n, tmp, 11);
}

void gr_radix_u64(uint64_t *a, int64_t n, uint64_t *tmp) {
  enum { BITS = 8, BUCKETS = 1 << BITS, DIGITS = 8 };
  int64_t hist[DIGITS][BUCKETS] = {{0}};
  for (int64_t i = 0; i < n; i++)
    for (int d = 0; d < DIGITS; d++) hist[d][(a[i] >> (d * BITS)) & (BUCKETS - 1)]++;
  uint64_t *from = a, *to = tmp;
  for (int d = 0; d < DIGITS && n > 0; d++) {
    int64_t *h = hist[d], sum = 0;
    if (h[(from[0] >> (d * BITS)) & (BUCKETS - 1)] == n) continue; /* one bucket: nothing moves */
    for (int b = 0; b < BUCKETS; b++) {
      int64_t c = h[b];
      h[b] = sum;
      sum += c;
    }
    for (int64_t i = 0; i < n; i++) to[h[(from[i] >> (d * BITS)) & (BUCKETS - 1)]++] = from[i];
    uint64_t *t = from;
    from = to, to = t;
  }
  if (from != a) memcpy(a, from, (size_t)n * sizeof *a);
}

static int cmp_u64(const void *x, const void *y) {
  uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
  return a < b ? -1 : a > b;
}

void gr_sort_u64(uint64_t *a, int64_t n) { qsort(a, (size_t)n, sizeof *a, cmp_u64); }

int64_t gr_sort_weighted(uint32_t *a, float *wt, int64_t n, bool dedup, uint64_t *key, uint32_t *out_degree) {
  for (int64_t i = 0; i < n; i++) key[i] = (uint64_t)a[i] << 32 | gr_float_bits(wt[i]);
  if (n <= 24) {
    for (int64_t i = 1; i < n; i++) {
      uint64_t x = key[i];
      int64_t j = i;
      while (j > 0 && key[j - 1] > x) key[j] = key[j - 1], j--;
      key[j] = x;
    }
  } else {
    qsort(key, (size_t)n, sizeof *key, cmp_u64);
  }
  int64_t w = 0;
  for (int64_t i = 0; i < n;) {
    uint32_t u = (uint32_t)(key[i] >> 32);
    if (!dedup) {
      a[i] = u, wt[i] = gr_bits_float((uint32_t)key[i]);
      i++;
      continue;
    }
    double sum = 0;
    int64_t j = i;
    for (; j < n && (uint32_t)(key[j] >> 32) == u; j++) sum += gr_bits_float((uint32_t)key[j]);
    if (out_degree && j - i > 1) __atomic_fetch_sub(&out_degree[u], (uint32_t)(j - i - 1), __ATOMIC_RELAXED);
    a[w] = u, wt[w] = (float)sum;
    w++;
    i = j;
  }
  return dedup ? w : n;
}
