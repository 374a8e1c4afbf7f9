/* nn_norm.c - batch and layer normalisation on the CPU.
 *
 * Batch norm sees x as [N, C, S] (S: the spatial size). Statistics take one pass over x
 * per channel, summing x - K and (x - K)^2 in double with K the channel's first value
 * (the shifted-data algorithm: no cancellation when the mean is large against the
 * spread); the forward is a second pass, x * scale + shift per channel. Layer norm works
 * row by row on [M, D], with the row in cache for its two passes.
 *
 * Every sum is computed by one thread in a fixed order (channels, rows or column blocks
 * are what threads share), so results do not depend on the thread count. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include "cpu_impl.h"

static int use_threads(int64_t tasks, int64_t work) {
  return tasks > 1 && work >= EM_PARALLEL_GRAIN && em_get_num_threads() > 1 && !omp_in_parallel();
}

typedef struct bn_geom {
  int64_t N, C, S;
} bn_geom;

static bn_geom bn_geometry(const em_tensor *x) {
  bn_geom g = {x->sizes[0], x->sizes[1], 1};
  for (int d = 2; d < x->ndim; d++) g.S *= x->sizes[d];
  return g;
}

/* Sums over one row in 8 double lanes, so that the loops vectorise (one accumulator would
 * chain every addition). sum2: sum of (x - k) and of (x - k)^2; dot: sum of d and of
 * d * (x - k). */
#define LANES 8
#define DEFINE_SUMS(T, S_)                                                                                \
  static void sum2_##S_(const T *x, int64_t n, double k, double *s1, double *s2) {                        \
    double a[LANES] = {0}, b[LANES] = {0};                                                                \
    int64_t i = 0;                                                                                        \
    for (; i + LANES <= n; i += LANES)                                                                    \
      for (int j = 0; j < LANES; j++) {                                                                   \
        double v = (double)x[i + j] - k;                                                                  \
        a[j] += v, b[j] += v * v;                                                                         \
      }                                                                                                   \
    for (int j = 0; i + j < n; j++) {                                                                     \
      double v = (double)x[i + j] - k;                                                                    \
      a[j] += v, b[j] += v * v;                                                                           \
    }                                                                                                     \
    for (int j = 1; j < LANES; j++) a[0] += a[j], b[0] += b[j];                                           \
    *s1 += a[0], *s2 += b[0];                                                                             \
  }                                                                                                       \
  static void dot_##S_(const T *d, const T *x, const T *w, int64_t n, double k, double *s1, double *s2) { \
    double a[LANES] = {0}, b[LANES] = {0};                                                                \
    int64_t i = 0;                                                                                        \
    for (; i + LANES <= n; i += LANES)                                                                    \
      for (int j = 0; j < LANES; j++) {                                                                   \
        double dv = (double)d[i + j] * (w ? (double)w[i + j] : 1.0);                                      \
        a[j] += dv, b[j] += dv * ((double)x[i + j] - k);                                                  \
      }                                                                                                   \
    for (int j = 0; i + j < n; j++) {                                                                     \
      double dv = (double)d[i + j] * (w ? (double)w[i + j] : 1.0);                                        \
      a[j] += dv, b[j] += dv * ((double)x[i + j] - k);                                                    \
    }                                                                                                     \
    for (int j = 1; j < LANES; j++) a[0] += a[j], b[0] += b[j];                                           \
    *s1 += a[0], *s2 += b[0];                                                                             \
  }
DEFINE_SUMS(float, s)
DEFINE_SUMS(double, d)

/* clang-format off */
#define DEFINE_NORM(T, S_)                                                                                        \
  static void bn_stats_##S_(T *mean, T *var, const T *x, bn_geom g) {                                            \
    int par = use_threads(g.C, g.N * g.C * g.S);                                                                 \
    _Pragma("omp parallel for schedule(static) if(par) num_threads(em_get_num_threads())")                      \
    for (int64_t c = 0; c < g.C; c++) {                                                                          \
      double k = x[c * g.S], s1 = 0, s2 = 0;                                                                     \
      for (int64_t n = 0; n < g.N; n++) sum2_##S_(x + (n * g.C + c) * g.S, g.S, k, &s1, &s2);                   \
      double m = (double)(g.N * g.S), d = s1 / m, v = s2 / m - d * d;                                            \
      mean[c] = (T)(k + d);                                                                                      \
      var[c] = (T)(v > 0 ? v : 0);                                                                               \
    }                                                                                                            \
  }                                                                                                              \
  static void bn_forward_##S_(T *y, const T *x, const T *mean, const T *var, const T *w, const T *b, double eps, \
                              bn_geom g) {                                                                       \
    int par = use_threads(g.N * g.C, g.N * g.C * g.S);                                                           \
    _Pragma("omp parallel for schedule(static) if(par) num_threads(em_get_num_threads())")                      \
    for (int64_t nc = 0; nc < g.N * g.C; nc++) {                                                                 \
      int64_t c = nc % g.C;                                                                                      \
      double invstd = 1.0 / sqrt((double)var[c] + eps);                                                          \
      T scale = (T)(invstd * (w ? (double)w[c] : 1.0));                                                          \
      T shift = (T)((b ? (double)b[c] : 0.0) - (double)mean[c] * (double)scale);                                 \
      const T *restrict r = x + nc * g.S;                                                                        \
      T *restrict o = y + nc * g.S;                                                                              \
      for (int64_t i = 0; i < g.S; i++) o[i] = r[i] * scale + shift;                                             \
    }                                                                                                            \
  }                                                                                                              \
  static void bn_backward_##S_(T *gx, T *gw, T *gb, const T *gy, const T *x, const T *mean, const T *var,       \
                               const T *w, double eps, int training, bn_geom g, double *sums) {                  \
    /* per channel: sum(gy) and sum(gy * (x - mean)), kept in sums[2 C] */                                       \
    int par = use_threads(g.C, g.N * g.C * g.S);                                                                 \
    _Pragma("omp parallel for schedule(static) if(par) num_threads(em_get_num_threads())")                      \
    for (int64_t c = 0; c < g.C; c++) {                                                                          \
      double sdy = 0, sdyx = 0, m = mean[c];                                                                     \
      for (int64_t n = 0; n < g.N; n++)                                                                          \
        dot_##S_(gy + (n * g.C + c) * g.S, x + (n * g.C + c) * g.S, NULL, g.S, m, &sdy, &sdyx);                  \
      sums[2 * c] = sdy, sums[2 * c + 1] = sdyx;                                                                 \
      double invstd = 1.0 / sqrt((double)var[c] + eps);                                                          \
      if (gb) gb[c] = (T)sdy;                                                                                    \
      if (gw) gw[c] = (T)(sdyx * invstd);                                                                        \
    }                                                                                                            \
    if (gx) {                                                                                                    \
      double count = (double)(g.N * g.S);                                                                        \
      par = use_threads(g.N * g.C, g.N * g.C * g.S);                                                             \
      _Pragma("omp parallel for schedule(static) if(par) num_threads(em_get_num_threads())")                    \
      for (int64_t nc = 0; nc < g.N * g.C; nc++) {                                                               \
        int64_t c = nc % g.C;                                                                                    \
        double invstd = 1.0 / sqrt((double)var[c] + eps), wc = w ? (double)w[c] : 1.0;                           \
        const T *restrict r = x + nc * g.S, *restrict d = gy + nc * g.S;                                         \
        T *restrict o = gx + nc * g.S;                                                                           \
        if (!training) { /* the statistics are constants */                                                      \
          T k = (T)(invstd * wc);                                                                                \
          for (int64_t i = 0; i < g.S; i++) o[i] = d[i] * k;                                                     \
          continue;                                                                                              \
        }                                                                                                        \
        /* gx = (gy - mean(gy) - (x - mean) * invstd^2 * mean(gy * (x - mean))) * invstd * w */                  \
        T k = (T)(invstd * wc), m = mean[c];                                                                     \
        T dm = (T)(sums[2 * c] / count), proj = (T)(sums[2 * c + 1] / count * invstd * invstd);                  \
        for (int64_t i = 0; i < g.S; i++) o[i] = (d[i] - dm - (r[i] - m) * proj) * k;                            \
      }                                                                                                          \
    }                                                                                                            \
  }                                                                                                              \
  static void ln_forward_##S_(T *y, T *mean, T *rstd, const T *x, const T *w, const T *b, double eps, int64_t M, \
                              int64_t D) {                                                                       \
    int par = use_threads(M, M * D);                                                                             \
    _Pragma("omp parallel for schedule(static) if(par) num_threads(em_get_num_threads())")                      \
    for (int64_t r = 0; r < M; r++) {                                                                            \
      const T *restrict xr = x + r * D;                                                                          \
      T *restrict yr = y + r * D;                                                                                \
      double s = 0, q = 0, s_ = 0, q_ = 0; /* two passes: the mean, then the spread about it */                 \
      sum2_##S_(xr, D, 0, &s, &q_);                                                                              \
      double m = s / (double)D;                                                                                  \
      sum2_##S_(xr, D, m, &s_, &q);                                                                              \
      double rs = 1.0 / sqrt(q / (double)D + eps);                                                               \
      mean[r] = (T)m, rstd[r] = (T)rs;                                                                           \
      T tm = (T)m, trs = (T)rs;                                                                                  \
      if (w && b)                                                                                                \
        for (int64_t i = 0; i < D; i++) yr[i] = (xr[i] - tm) * trs * w[i] + b[i];                                \
      else if (w)                                                                                                \
        for (int64_t i = 0; i < D; i++) yr[i] = (xr[i] - tm) * trs * w[i];                                       \
      else if (b)                                                                                                \
        for (int64_t i = 0; i < D; i++) yr[i] = (xr[i] - tm) * trs + b[i];                                       \
      else                                                                                                       \
        for (int64_t i = 0; i < D; i++) yr[i] = (xr[i] - tm) * trs;                                              \
    }                                                                                                            \
  }                                                                                                              \
  static void ln_backward_##S_(T *gx, T *gw, T *gb, const T *gy, const T *x, const T *mean, const T *rstd,      \
                               const T *w, int64_t M, int64_t D) {                                               \
    if (gx) {                                                                                                    \
      int par = use_threads(M, M * D);                                                                           \
      _Pragma("omp parallel for schedule(static) if(par) num_threads(em_get_num_threads())")                    \
      for (int64_t r = 0; r < M; r++) {                                                                          \
        const T *restrict xr = x + r * D, *restrict dr = gy + r * D;                                             \
        T *restrict o = gx + r * D;                                                                              \
        T m = mean[r], rs = rstd[r];                                                                             \
        double a = 0, b = 0; /* sums of gy * w and gy * w * (x - mean) */                                        \
        dot_##S_(dr, xr, w, D, (double)m, &a, &b);                                                               \
        T ma = (T)(a / (double)D), mb = (T)(b * (double)rs / (double)D);                                         \
        for (int64_t i = 0; i < D; i++) {                                                                        \
          T xhat = (xr[i] - m) * rs;                                                                             \
          o[i] = ((w ? dr[i] * w[i] : dr[i]) - ma - xhat * mb) * rs;                                             \
        }                                                                                                        \
      }                                                                                                          \
    }                                                                                                            \
    if (gw || gb) { /* column sums: threads take blocks of columns and walk every row */                         \
      int64_t blocks = (D + 63) / 64;                                                                            \
      int par = use_threads(blocks, M * D);                                                                      \
      _Pragma("omp parallel for schedule(static) if(par) num_threads(em_get_num_threads())")                    \
      for (int64_t blk = 0; blk < blocks; blk++) {                                                               \
        int64_t j0 = blk * 64, j1 = j0 + 64 < D ? j0 + 64 : D;                                                   \
        double sw[64] = {0}, sb[64] = {0};                                                                       \
        for (int64_t r = 0; r < M; r++) {                                                                        \
          const T *xr = x + r * D, *dr = gy + r * D;                                                             \
          double m = mean[r], rs = rstd[r];                                                                      \
          for (int64_t j = j0; j < j1; j++) {                                                                    \
            sw[j - j0] += (double)dr[j] * ((double)xr[j] - m) * rs;                                              \
            sb[j - j0] += dr[j];                                                                                 \
          }                                                                                                      \
        }                                                                                                        \
        for (int64_t j = j0; j < j1; j++) {                                                                      \
          if (gw) gw[j] = (T)sw[j - j0];                                                                         \
          if (gb) gb[j] = (T)sb[j - j0];                                                                         \
        }                                                                                                        \
      }                                                                                                          \
    }                                                                                                            \
  }
/* clang-format on */

DEFINE_NORM(float, s)
DEFINE_NORM(double, d)

#define P(t, T) ((t) ? (T *)em_tensor_ptr(t) : NULL)

em_status cpu_batch_norm_stats(em_tensor *mean, em_tensor *var, const em_tensor *x) {
  bn_geom g = bn_geometry(x);
  if (g.N * g.S == 0) return EM_OK; /* (the caller rejects empty batches in training) */
  if (x->dtype == EM_FLOAT32) bn_stats_s(P(mean, float), P(var, float), P(x, const float), g);
  else bn_stats_d(P(mean, double), P(var, double), P(x, const double), g);
  return EM_OK;
}

em_status cpu_batch_norm(em_tensor *out, const em_tensor *x, const em_tensor *mean, const em_tensor *var,
                         const em_tensor *w, const em_tensor *b, double eps) {
  bn_geom g = bn_geometry(x);
  if (x->dtype == EM_FLOAT32)
    bn_forward_s(P(out, float), P(x, const float), P(mean, const float), P(var, const float), P(w, const float),
                 P(b, const float), eps, g);
  else
    bn_forward_d(P(out, double), P(x, const double), P(mean, const double), P(var, const double), P(w, const double),
                 P(b, const double), eps, g);
  return EM_OK;
}

em_status cpu_batch_norm_backward(em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *gy, const em_tensor *x,
                                  const em_tensor *mean, const em_tensor *var, const em_tensor *w, double eps,
                                  int training) {
  bn_geom g = bn_geometry(x);
  double *sums = malloc(sizeof(double) * 2 * (g.C ? g.C : 1));
  if (!sums) return em_set_error(EM_ERR_MEMORY, "batch_norm backward: out of memory");
  if (x->dtype == EM_FLOAT32)
    bn_backward_s(P(gx, float), P(gw, float), P(gb, float), P(gy, const float), P(x, const float), P(mean, const float),
                  P(var, const float), P(w, const float), eps, training, g, sums);
  else
    bn_backward_d(P(gx, double), P(gw, double), P(gb, double), P(gy, const double), P(x, const double),
                  P(mean, const double), P(var, const double), P(w, const double), eps, training, g, sums);
  free(sums);
  return EM_OK;
}

em_status cpu_layer_norm(em_tensor *out, em_tensor *mean, em_tensor *rstd, const em_tensor *x, const em_tensor *w,
                         const em_tensor *b, double eps) {
  int64_t M = em_tensor_numel(mean), D = M ? em_tensor_numel(x) / M : 0;
  if (x->dtype == EM_FLOAT32)
    ln_forward_s(P(out, float), P(mean, float), P(rstd, float), P(x, const float), P(w, const float), P(b, const float),
                 eps, M, D);
  else
    ln_forward_d(P(out, double), P(mean, double), P(rstd, double), P(x, const double), P(w, const double),
                 P(b, const double), eps, M, D);
  return EM_OK;
}

em_status cpu_layer_norm_backward(em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *gy, const em_tensor *x,
                                  const em_tensor *mean, const em_tensor *rstd, const em_tensor *w) {
  int64_t M = em_tensor_numel(mean), D = M ? em_tensor_numel(x) / M : (gw ? em_tensor_numel(gw) : 0);
  if (x->dtype == EM_FLOAT32)
    ln_backward_s(P(gx, float), P(gw, float), P(gb, float), P(gy, const float), P(x, const float), P(mean, const float),
                  P(rstd, const float), P(w, const float), M, D);
  else
    ln_backward_d(P(gx, double), P(gw, double), P(gb, double), P(gy, const double), P(x, const double),
                  P(mean, const double), P(rstd, const double), P(w, const double), M, D);
  return EM_OK;
}
