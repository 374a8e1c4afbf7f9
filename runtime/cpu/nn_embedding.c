/* nn_embedding.c - embedding bags on the CPU: sums, means or maxima of weight rows.
 *
 * Bags are independent in the forward, so threads share them. The weight gradient adds
 * into rows that several bags may share, so threads share out column blocks instead: each
 * walks every bag over its own columns, which never races and keeps the order of the
 * additions (and so the result) independent of the thread count. */
#include <math.h>
#include <omp.h>
#include <string.h>
#include "cpu_impl.h"

typedef struct bag_geom {
  int64_t R, D, L, B;
  int is64;
  const void *idx;
  const int64_t *off;
  int base;
} bag_geom;

static inline int64_t row_of(const bag_geom *g, int64_t i) {
  return (g->is64 ? ((const int64_t *)g->idx)[i] : ((const int32_t *)g->idx)[i]) - g->base;
}

static inline int64_t bag_end(const bag_geom *g, int64_t b) { return b + 1 < g->B ? g->off[b + 1] : g->L; }

static int use_threads(int64_t tasks, int64_t work) {
  return tasks > 1 && work >= EM_PARALLEL_GRAIN && em_get_num_threads() > 1 && !omp_in_parallel();
}

static em_status check(const bag_geom *g) {
  for (int64_t b = 0; b < g->B; b++) {
    int64_t o = g->off[b], prev = b ? g->off[b - 1] : 0;
    if ((b == 0 && o != 0) || o < prev || o > g->L)
      return em_set_error(EM_ERR_INDEX,
                          "embedding_bag: offsets[%lld] = %lld, expected offsets that start at 0 and rise to at most "
                          "%lld (the number of indices)",
                          (long long)b, (long long)o, (long long)g->L);
  }
  for (int64_t i = 0; i < g->L; i++) {
    int64_t r = row_of(g, i);
    if (r < 0 || r >= g->R)
      return em_set_error(EM_ERR_INDEX,
                          "embedding_bag: index %lld is out of range for %lld embeddings (expected %d..%lld)",
                          (long long)(r + g->base), (long long)g->R, g->base, (long long)(g->R - 1 + g->base));
  }
  return EM_OK;
}

/* clang-format off */
#define DEFINE_BAG(T, S_)                                                                                       \
  static void forward_##S_(T *out, int64_t *argmax, const T *w, const T *psw, int mode, const bag_geom *g) {   \
    int par = use_threads(g->B, g->L * g->D);                                                                  \
    _Pragma("omp parallel for schedule(static) if(par) num_threads(em_get_num_threads())")                    \
    for (int64_t b = 0; b < g->B; b++) {                                                                       \
      T *restrict o = out + b * g->D;                                                                          \
      int64_t s = g->off[b], e = bag_end(g, b);                                                                \
      if (mode == 2) { /* max */                                                                               \
        int64_t *am = argmax + b * g->D;                                                                       \
        for (int64_t j = 0; j < g->D; j++) o[j] = 0, am[j] = -1;                                               \
        for (int64_t i = s; i < e; i++) {                                                                      \
          int64_t r = row_of(g, i);                                                                            \
          const T *wr = w + r * g->D;                                                                          \
          for (int64_t j = 0; j < g->D; j++)                                                                   \
            if (am[j] < 0 || wr[j] > o[j] || isnan(wr[j])) o[j] = wr[j], am[j] = r;                            \
        }                                                                                                      \
        continue;                                                                                              \
      }                                                                                                        \
      for (int64_t j = 0; j < g->D; j++) o[j] = 0;                                                             \
      for (int64_t i = s; i < e; i++) {                                                                        \
        const T *restrict wr = w + row_of(g, i) * g->D;                                                        \
        T k = psw ? psw[i] : (T)1;                                                                             \
        for (int64_t j = 0; j < g->D; j++) o[j] += k * wr[j];                                                  \
      }                                                                                                        \
      if (mode == 1 && e > s)                                                                                  \
        for (int64_t j = 0; j < g->D; j++) o[j] /= (T)(e - s);                                                 \
    }                                                                                                          \
  }                                                                                                            \
  static void backward_##S_(T *gw, T *gpsw, const T *gout, const T *w, const T *psw, const int64_t *argmax,    \
                            int mode, const bag_geom *g) {                                                     \
    int64_t blocks = gw ? (g->D + 15) / 16 : 0;                                                                \
    if (gw) memset(gw, 0, sizeof(T) * g->R * g->D);                                                            \
    int par = use_threads(blocks, g->L * g->D);                                                                \
    _Pragma("omp parallel for schedule(static) if(par) num_threads(em_get_num_threads())")                    \
    for (int64_t blk = 0; blk < blocks; blk++) {                                                               \
      int64_t j0 = blk * 16, j1 = j0 + 16 < g->D ? j0 + 16 : g->D;                                             \
      for (int64_t b = 0; b < g->B; b++) {                                                                     \
        const T *go = gout + b * g->D;                                                                         \
        if (mode == 2) {                                                                                       \
          const int64_t *am = argmax + b * g->D;                                                               \
          for (int64_t j = j0; j < j1; j++)                                                                    \
            if (am[j] >= 0) gw[am[j] * g->D + j] += go[j];                                                     \
          continue;                                                                                            \
        }                                                                                                      \
        int64_t s = g->off[b], e = bag_end(g, b);                                                              \
        T scale = mode == 1 && e > s ? (T)1 / (T)(e - s) : (T)1;                                               \
        for (int64_t i = s; i < e; i++) {                                                                      \
          T k = (psw ? psw[i] : (T)1) * scale;                                                                 \
          T *gr = gw + row_of(g, i) * g->D;                                                                    \
          for (int64_t j = j0; j < j1; j++) gr[j] += k * go[j];                                                \
        }                                                                                                      \
      }                                                                                                        \
    }                                                                                                          \
    if (!gpsw) return;                                                                                         \
    par = use_threads(g->B, g->L * g->D);                                                                      \
    _Pragma("omp parallel for schedule(static) if(par) num_threads(em_get_num_threads())")                    \
    for (int64_t b = 0; b < g->B; b++) {                                                                       \
      const T *go = gout + b * g->D;                                                                           \
      for (int64_t i = g->off[b]; i < bag_end(g, b); i++) {                                                    \
        const T *wr = w + row_of(g, i) * g->D;                                                                 \
        T s = 0;                                                                                               \
        for (int64_t j = 0; j < g->D; j++) s += wr[j] * go[j];                                                 \
        gpsw[i] = s;                                                                                           \
      }                                                                                                        \
    }                                                                                                          \
  }
/* clang-format on */

DEFINE_BAG(float, s)
DEFINE_BAG(double, d)

static bag_geom geometry(const em_tensor *weight, const em_tensor *indices, const em_tensor *offsets, int base) {
  bag_geom g = {weight->sizes[0],
                weight->sizes[1],
                em_tensor_numel(indices),
                em_tensor_numel(offsets),
                indices->dtype == EM_INT64,
                em_tensor_ptr(indices),
                (const int64_t *)em_tensor_ptr(offsets),
                base};
  return g;
}

#define PTR(t, T) ((t) ? (T *)em_tensor_ptr(t) : NULL)

em_status cpu_embedding_bag(em_tensor *out, em_tensor *argmax, const em_tensor *weight, const em_tensor *indices,
                            const em_tensor *offsets, const em_tensor *psw, int mode, int base) {
  bag_geom g = geometry(weight, indices, offsets, base);
  em_status st = check(&g);
  if (st) return st;
  if (weight->dtype == EM_FLOAT32)
    forward_s(PTR(out, float), PTR(argmax, int64_t), PTR(weight, const float), PTR(psw, const float), mode, &g);
  else forward_d(PTR(out, double), PTR(argmax, int64_t), PTR(weight, const double), PTR(psw, const double), mode, &g);
  return EM_OK;
}

em_status cpu_embedding_bag_backward(em_tensor *gw, em_tensor *gpsw, const em_tensor *gout, const em_tensor *weight,
                                     const em_tensor *indices, const em_tensor *offsets, const em_tensor *psw,
                                     const em_tensor *argmax, int mode, int base) {
  bag_geom g = geometry(weight, indices, offsets, base);
  if (weight->dtype == EM_FLOAT32)
    backward_s(PTR(gw, float), PTR(gpsw, float), PTR(gout, const float), PTR(weight, const float),
               PTR(psw, const float), PTR(argmax, const int64_t), mode, &g);
  else
    backward_d(PTR(gw, double), PTR(gpsw, double), PTR(gout, const double), PTR(weight, const double),
               PTR(psw, const double), PTR(argmax, const int64_t), mode, &g);
  return EM_OK;
}
