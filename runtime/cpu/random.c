/* random.c - CPU random fills from the Philox stream.
 *
 * Element i (logical, row-major order) is a function of (seed, offset, i) alone; see
 * core/philox.h for the layout. Work is cut into chunks of logical indices; each chunk is
 * generated into a small buffer and stored through the tensor's strides, so strided
 * outputs and any thread count give the same values. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include "core/philox_distributions.h"
#include "cpu_impl.h"

#define CHUNK 2048 /* elements per chunk; even, so that a chunk never splits a block */

/* Walks a tensor's elements in logical order, keeping the element offset. */
typedef struct walker {
  int ndim;
  int64_t off;
  int64_t idx[EM_MAX_DIMS];
  const int64_t *sizes, *strides;
} walker;

static void walker_init(walker *w, const em_tensor *t, int64_t begin) {
  w->ndim = t->ndim;
  w->sizes = t->sizes;
  w->strides = t->strides;
  w->off = 0;
  for (int d = t->ndim - 1; d >= 0; d--) {
    w->idx[d] = begin % t->sizes[d];
    begin /= t->sizes[d];
    w->off += w->idx[d] * t->strides[d];
  }
}

static inline void walker_next(walker *w) {
  for (int d = w->ndim - 1; d >= 0; d--) {
    w->off += w->strides[d];
    if (++w->idx[d] < w->sizes[d]) return;
    w->off -= w->sizes[d] * w->strides[d];
    w->idx[d] = 0;
  }
}

/* Stores n generated values (doubles, or int64 when iv is set) at logical positions
 * begin.. of t. Float values were already rounded where it matters, so the casts here
 * are exact. */
#define STORE_AS(CT, CONV)                                                                           \
  do {                                                                                               \
    CT *base = (CT *)em_tensor_ptr(t);                                                               \
    if (contiguous) {                                                                                \
      CT *restrict d = base + begin;                                                                 \
      if (iv)                                                                                        \
        for (int64_t i = 0; i < n; i++) d[i] = CONV(iv[i]);                                          \
      else                                                                                           \
        for (int64_t i = 0; i < n; i++) d[i] = CONV(dv[i]);                                          \
    } else {                                                                                         \
      walker w;                                                                                      \
      walker_init(&w, t, begin);                                                                     \
      for (int64_t i = 0; i < n; i++, walker_next(&w)) base[w.off] = iv ? CONV(iv[i]) : CONV(dv[i]); \
    }                                                                                                \
  } while (0)
#define CONV_PLAIN(v) (v)
#define CONV_BOOL(v) ((v) != 0)

static void store(em_tensor *t, int contiguous, int64_t begin, int64_t n, const double *dv, const int64_t *iv) {
  switch (t->dtype) {
    case EM_FLOAT32: STORE_AS(float, (float)CONV_PLAIN); break;
    case EM_FLOAT64: STORE_AS(double, (double)CONV_PLAIN); break;
    case EM_INT32: STORE_AS(int32_t, (int32_t)CONV_PLAIN); break;
    case EM_INT64: STORE_AS(int64_t, (int64_t)CONV_PLAIN); break;
    case EM_UINT8: STORE_AS(uint8_t, (uint8_t)CONV_PLAIN); break;
    case EM_BOOL: STORE_AS(uint8_t, (uint8_t)CONV_BOOL); break;
    default: break; /* the tensor core rejects float16/bfloat16 */
  }
}

/* Raw 64-bit draws of logical elements [begin, begin + n), begin even: one Philox call
 * per pair of elements. */
static void draw_bits(const em_random_params *p, int64_t begin, int64_t n, uint64_t *bits) {
  for (int64_t i = 0; i < n; i += 2) {
    em_philox4 r = em_philox_block(p->seed, p->offset + (uint64_t)(begin + i) / 2);
    bits[i] = em_philox_u64(r.x[0], r.x[1]);
    if (i + 1 < n) bits[i + 1] = em_philox_u64(r.x[2], r.x[3]);
  }
}

/* ---- generators: turn the draws of n elements into values ---- */

/* The values come from core/philox_distributions.h, which the CUDA backend shares: same bits on
 * every device and every build (no fma left to the compiler, no libm under Box-Muller). */
static void gen_uniform(const em_random_params *p, em_dtype dtype, const uint64_t *bits, int64_t n, double *v) {
  double low = p->a, span = p->b - p->a;
  if (dtype == EM_FLOAT32) {
    float top = em_philox_uniform_top_f32(p->a, p->b);
    for (int64_t i = 0; i < n; i++) v[i] = em_philox_uniform_f32(bits[i], low, span, top);
  } else {
    double top = nextafter(p->b, -INFINITY);
    for (int64_t i = 0; i < n; i++) v[i] = em_philox_uniform_f64(bits[i], low, span, top);
  }
}

/* Box-Muller: the draws of elements 2j and 2j+1 (one block) give both their normals. */
static void gen_normal(const em_random_params *p, em_dtype dtype, const uint64_t *bits, int64_t n, double *v) {
  for (int64_t i = 0; i < n; i += 2) {
    uint64_t b0 = bits[i], b1 = i + 1 < n ? bits[i + 1] : 0;
    if (dtype == EM_FLOAT32) {
      float z0, z1;
      em_philox_normal_f32(b0, b1, p->a, p->b, &z0, &z1);
      v[i] = z0;
      if (i + 1 < n) v[i + 1] = z1;
    } else {
      double z0, z1;
      em_philox_normal_f64(b0, b1, p->a, p->b, &z0, &z1);
      v[i] = z0;
      if (i + 1 < n) v[i + 1] = z1;
    }
  }
}

static void gen_int(const em_random_params *p, const uint64_t *bits, int64_t n, int64_t *v) {
  uint64_t range = (uint64_t)p->high - (uint64_t)p->low; /* high > low: no overflow in uint64 */
  for (int64_t i = 0; i < n; i++) v[i] = em_philox_int(bits[i], p->low, range);
}

static void gen_bernoulli(const em_random_params *p, const uint64_t *bits, int64_t n, double *v) {
  for (int64_t i = 0; i < n; i++) v[i] = em_philox_bernoulli(bits[i], p->a);
}

static void fill_chunk(em_tensor *t, int contiguous, const em_random_params *p, int64_t begin, int64_t n) {
  uint64_t bits[CHUNK];
  union {
    double d[CHUNK];
    int64_t i[CHUNK];
  } buf;
  draw_bits(p, begin, n, bits);
  switch (p->kind) {
    case EM_RANDOM_UNIFORM: gen_uniform(p, t->dtype, bits, n, buf.d); break;
    case EM_RANDOM_NORMAL: gen_normal(p, t->dtype, bits, n, buf.d); break;
    case EM_RANDOM_BERNOULLI: gen_bernoulli(p, bits, n, buf.d); break;
    case EM_RANDOM_INT: gen_int(p, bits, n, buf.i); break;
    default: return;
  }
  store(t, contiguous, begin, n, p->kind == EM_RANDOM_INT ? NULL : buf.d, p->kind == EM_RANDOM_INT ? buf.i : NULL);
}

/* Fisher-Yates (core/philox_distributions.h): depends on (seed, offset, n) alone. Serial by nature. */
static em_status fill_perm(em_tensor *t, const em_random_params *p) {
  int64_t n = em_tensor_numel(t);
  int64_t *perm = malloc((size_t)n * sizeof *perm);
  if (!perm) return em_set_error(EM_ERR_MEMORY, "randperm: out of memory for %lld elements", (long long)n);
  em_philox_shuffle(perm, n, p->seed, p->offset);
  store(t, em_tensor_is_contiguous(t), 0, n, NULL, perm);
  free(perm);
  return EM_OK;
}

em_status cpu_random(em_tensor *t, const em_random_params *p) {
  if (p->kind == EM_RANDOM_PERM) return fill_perm(t, p);
  int64_t n = em_tensor_numel(t);
  int contiguous = em_tensor_is_contiguous(t);
  int64_t chunks = (n + CHUNK - 1) / CHUNK;
  if (n < EM_PARALLEL_GRAIN || em_get_num_threads() <= 1 || omp_in_parallel()) {
    for (int64_t c = 0; c < chunks; c++) {
      int64_t begin = c * CHUNK;
      fill_chunk(t, contiguous, p, begin, begin + CHUNK > n ? n - begin : CHUNK);
    }
    return EM_OK;
  }
#pragma omp parallel for schedule(static) num_threads(em_get_num_threads())
  for (int64_t c = 0; c < chunks; c++) {
    int64_t begin = c * CHUNK;
    fill_chunk(t, contiguous, p, begin, begin + CHUNK > n ? n - begin : CHUNK);
  }
  return EM_OK;
}
