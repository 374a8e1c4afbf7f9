/* nn_pool.c - 2-d max and average pooling on the CPU (PyTorch's window rules).
 *
 * Tensors are [N, C, H, W] seen as N * C independent planes, which OpenMP shares out;
 * every output is written by one thread, so results do not depend on the thread count.
 * Windows are computed once per output row and column, not per plane. Max pooling
 * records where each maximum came from (h * W + w in its plane, int32) so that its
 * backward is a scatter of the output gradient, with no second search. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_impl.h"
#include "nn_pool_avx512.h"

typedef struct pool_geom {
  int64_t planes, H, W, OH, OW;
} pool_geom;

static pool_geom geometry(const em_tensor *x, const em_tensor *y) {
  pool_geom g = {1, x->sizes[x->ndim - 2], x->sizes[x->ndim - 1], y->sizes[y->ndim - 2], y->sizes[y->ndim - 1]};
  for (int d = 0; d < x->ndim - 2; d++) g.planes *= x->sizes[d];
  return g;
}

static int use_threads(int64_t planes, int64_t work) {
  return planes > 1 && work >= EM_PARALLEL_GRAIN && em_get_num_threads() > 1 && !omp_in_parallel();
}

/* One window per output position along a dim: inputs [start, end) and the divisor's
 * factor (the window's size counting padding, or not). */
typedef struct span {
  int64_t start, end, count;
} span;

static span *avg_spans(int64_t in, int64_t out, int k, int s, int pad, const em_pool2d_params *p) {
  span *sp = malloc(sizeof *sp * (out ? out : 1));
  if (!sp) return NULL;
  for (int64_t o = 0; o < out; o++) {
    int64_t a, b, full;
    if (p->adaptive) {
      a = o * in / out; /* floor */
      b = ((o + 1) * in + out - 1) / out; /* ceil */
      full = b - a;
    } else {
      a = o * s - pad;
      b = a + k < in + pad ? a + k : in + pad;
      full = b - a;
      if (a < 0) a = 0;
      if (b > in) b = in;
    }
    sp[o] = (span){a, b, p->count_include_pad && !p->adaptive ? full : b - a};
  }
  return sp;
}

/* a float's bits and back (for branch-free selects) */
static inline uint32_t bits_s(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float value_s(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint64_t bits_d(double f) {
  uint64_t u;
  memcpy(&u, &f, 8);
  return u;
}
static inline double value_d(uint64_t u) {
  double f;
  memcpy(&f, &u, 8);
  return f;
}

#define DEFINE_POOL(T, U, S)                                                                                          \
  /* a whole plane of a 2x2, stride 2 pool; base[q] is output q's top-left input. One loop               \
   * over the plane (rows are too short to vectorise one by one) with branch-free selects on             \
   * bit masks (random data defeats branch prediction), so that it vectorises with gathers. */            \
  static __attribute__((noinline)) void max2x2_plane_##S(T *restrict y, int32_t *restrict idx, const T *restrict x,   \
                                                         const int32_t *restrict base, int64_t n, int32_t W) {        \
    for (int64_t q = 0; q < n; q++) {                                                                                 \
      int32_t at = base[q];                                                                                           \
      T v[4] = {x[at], x[at + 1], x[at + W], x[at + W + 1]};                                                          \
      int32_t pos[4] = {at, at + 1, at + W, at + W + 1};                                                              \
      U m = bits_##S(v[0]);                                                                                           \
      uint32_t mi = (uint32_t)at;                                                                                     \
      for (int k = 1; k < 4; k++) {                                                                                   \
        int t = (v[k] > value_##S(m)) | (v[k] != v[k]); /* NaN wins, as in PyTorch */                                 \
        U kv = (U)0 - (U)t;                                                                                           \
        uint32_t ki = 0u - (uint32_t)t;                                                                               \
        m = (bits_##S(v[k]) & kv) | (m & ~kv);                                                                        \
        mi = ((uint32_t)pos[k] & ki) | (mi & ~ki);                                                                    \
      }                                                                                                               \
      y[q] = value_##S(m);                                                                                            \
      idx[q] = (int32_t)mi;                                                                                           \
    }                                                                                                                 \
  }                                                                                                                   \
  static void max_plane_##S(T *restrict y, int32_t *restrict idx, const T *restrict x, const pool_geom *g,            \
                            const em_pool2d_params *p, const int32_t *base) {                                         \
    if (base) {                                                                                                       \
      max2x2_plane_##S(y, idx, x, base, g->OH * g->OW, (int32_t)g->W);                                                \
      return;                                                                                                         \
    }                                                                                                                 \
    int kh = p->kernel[0], kw = p->kernel[1], sh = p->stride[0], sw = p->stride[1];                                   \
    int dh = p->dilation[0], dw = p->dilation[1];                                                                     \
    for (int64_t oh = 0; oh < g->OH; oh++) {                                                                          \
      int64_t hs = oh * sh - p->pad[0], he = hs + (int64_t)(kh - 1) * dh + 1;                                         \
      if (he > g->H) he = g->H;                                                                                       \
      while (hs < 0) hs += dh;                                                                                        \
      for (int64_t ow = 0; ow < g->OW; ow++) {                                                                        \
        int64_t ws = ow * sw - p->pad[1], we = ws + (int64_t)(kw - 1) * dw + 1;                                       \
        if (we > g->W) we = g->W;                                                                                     \
        while (ws < 0) ws += dw;                                                                                      \
        T m = -INFINITY;                                                                                              \
        int64_t mi = hs < he && ws < we ? hs * g->W + ws : -1; /* -1: an empty window (never, by the shape rules) */  \
        for (int64_t h = hs; h < he; h += dh)                                                                         \
          for (int64_t w = ws; w < we; w += dw) {                                                                     \
            T v = x[h * g->W + w];                                                                                    \
            if (v > m || isnan(v)) m = v, mi = h * g->W + w; /* NaN propagates, as in PyTorch */                      \
          }                                                                                                           \
        y[oh * g->OW + ow] = m;                                                                                       \
        idx[oh * g->OW + ow] = (int32_t)mi;                                                                           \
      }                                                                                                               \
    }                                                                                                                 \
  }                                                                                                                   \
  /* When the input is tiled by the 2x2 blocks of the outputs (the usual MaxPool2d(2)), each  \
   * input element belongs to one block: one pass writes gy or 0 to all of them, instead of   \
   * zeroing the plane and scattering. The pass runs over input columns with no branch, so    \
   * it vectorises (6x faster than a loop over windows that stops at a bad index); the check  \
   * that every index lies inside its block comes after it. Returns 0 (nothing to trust:     \
   * the caller redoes the plane) when one does not, i.e. the windows were not 2x2 tiles. */                       \
  static int max2x2_backward_plane_##S(T *restrict gx, const T *restrict gy, const int32_t *restrict idx, int64_t OH, \
                                       int64_t OW) {                                                                  \
    const int32_t W = (int32_t)(2 * OW);                                                                              \
    int bad = 0;                                                                                                      \
    for (int64_t oh = 0; oh < OH; oh++) {                                                                             \
      T *restrict r0 = gx + 2 * oh * W, *restrict r1 = r0 + W;                                                        \
      const int32_t *restrict iq = idx + oh * OW;                                                                     \
      const T *restrict gq = gy + oh * OW;                                                                            \
      const int32_t base = (int32_t)(2 * oh * W);                                                                     \
      for (int32_t w = 0; w < W; w++) {                                                                               \
        int32_t ow = w >> 1, d = iq[ow] - base - 2 * ow, col = w & 1;                                                 \
        T g = gq[ow];                                                                                                 \
        r0[w] = d == col ? g : (T)0;                                                                                  \
        r1[w] = d == W + col ? g : (T)0;                                                                              \
      }                                                                                                               \
      for (int32_t ow = 0; ow < (int32_t)OW; ow++) {                                                                  \
        int32_t d = iq[ow] - base - 2 * ow;                                                                           \
        bad |= (uint32_t)d > 1u && (uint32_t)(d - W) > 1u;                                                            \
      }                                                                                                               \
    }                                                                                                                 \
    return !bad;                                                                                                      \
  }                                                                                                                   \
  static void max_backward_plane_##S(T *restrict gx, const T *restrict gy, const int32_t *restrict idx, int64_t in,   \
                                     int64_t out, int64_t OH, int64_t OW, int tiled) {                                \
    if (tiled && max2x2_backward_plane_##S(gx, gy, idx, OH, OW)) return;                                              \
    memset(gx, 0, sizeof(T) * in);                                                                                    \
    for (int64_t o = 0; o < out; o++)                                                                                 \
      if (idx[o] >= 0) gx[idx[o]] += gy[o];                                                                           \
  }                                                                                                                   \
  static void avg_plane_##S(T *restrict y, const T *restrict x, const pool_geom *g, const span *hs, const span *ws) { \
    for (int64_t oh = 0; oh < g->OH; oh++)                                                                            \
      for (int64_t ow = 0; ow < g->OW; ow++) {                                                                        \
        T s = 0;                                                                                                      \
        for (int64_t h = hs[oh].start; h < hs[oh].end; h++)                                                           \
          for (int64_t w = ws[ow].start; w < ws[ow].end; w++) s += x[h * g->W + w];                                   \
        int64_t div = hs[oh].count * ws[ow].count;                                                                    \
        y[oh * g->OW + ow] = div > 0 ? s / (T)div : 0; /* an all-padding window gives 0 */                            \
      }                                                                                                               \
  }                                                                                                                   \
  static void avg_backward_plane_##S(T *restrict gx, const T *restrict gy, const pool_geom *g, const span *hs,        \
                                     const span *ws) {                                                                \
    memset(gx, 0, sizeof(T) * g->H * g->W);                                                                           \
    for (int64_t oh = 0; oh < g->OH; oh++)                                                                            \
      for (int64_t ow = 0; ow < g->OW; ow++) {                                                                        \
        int64_t div = hs[oh].count * ws[ow].count;                                                                    \
        if (div <= 0) continue;                                                                                       \
        T v = gy[oh * g->OW + ow] / (T)div;                                                                           \
        for (int64_t h = hs[oh].start; h < hs[oh].end; h++)                                                           \
          for (int64_t w = ws[ow].start; w < ws[ow].end; w++) gx[h * g->W + w] += v;                                  \
      }                                                                                                               \
  }

DEFINE_POOL(float, uint32_t, s)
DEFINE_POOL(double, uint64_t, d)

/* The 2x2, stride 2 case with whole windows and no padding (the usual one) gets its own loop. */
static int is_2x2(const pool_geom *g, const em_pool2d_params *p) {
  return p->kernel[0] == 2 && p->kernel[1] == 2 && p->stride[0] == 2 && p->stride[1] == 2 && p->dilation[0] == 1 &&
         p->dilation[1] == 1 && p->pad[0] == 0 && p->pad[1] == 0 && 2 * g->OH <= g->H && 2 * g->OW <= g->W;
}

em_status cpu_max_pool2d(em_tensor *out, em_tensor *indices, const em_tensor *x, const em_pool2d_params *p) {
  pool_geom g = geometry(x, out);
  int64_t in = g.H * g.W, on = g.OH * g.OW;
  int32_t *idx = (int32_t *)em_tensor_ptr(indices), *base = NULL;
  if (is_2x2(&g, p)) { /* each output's top-left input, shared by every plane */
    if (!(base = malloc(sizeof *base * (on ? on : 1)))) return em_set_error(EM_ERR_MEMORY, "max_pool2d: out of memory");
    for (int64_t oh = 0; oh < g.OH; oh++)
      for (int64_t ow = 0; ow < g.OW; ow++) base[oh * g.OW + ow] = (int32_t)(2 * oh * g.W + 2 * ow);
  }
  int par = use_threads(g.planes, g.planes * in);
  if (x->dtype == EM_FLOAT32) {
    const float *xp = (const float *)em_tensor_ptr(x);
    float *yp = (float *)em_tensor_ptr(out);
#pragma omp parallel for schedule(static) if (par) num_threads(em_get_num_threads())
    for (int64_t c = 0; c < g.planes; c++) max_plane_s(yp + c * on, idx + c * on, xp + c * in, &g, p, base);
  } else {
    const double *xp = (const double *)em_tensor_ptr(x);
    double *yp = (double *)em_tensor_ptr(out);
#pragma omp parallel for schedule(static) if (par) num_threads(em_get_num_threads())
    for (int64_t c = 0; c < g.planes; c++) max_plane_d(yp + c * on, idx + c * on, xp + c * in, &g, p, base);
  }
  free(base);
  return EM_OK;
}

em_status cpu_max_pool2d_backward(em_tensor *gx, const em_tensor *gy, const em_tensor *indices) {
  pool_geom g = geometry(gx, gy);
  int64_t in = g.H * g.W, on = g.OH * g.OW;
  const int32_t *idx = (const int32_t *)em_tensor_ptr(indices);
  int par = use_threads(g.planes, g.planes * in);
  int tiled = g.H == 2 * g.OH && g.W == 2 * g.OW;
  if (gx->dtype == EM_FLOAT32) {
    float *gxp = (float *)em_tensor_ptr(gx);
    const float *gyp = (const float *)em_tensor_ptr(gy);
#pragma omp parallel for schedule(static) if (par) num_threads(em_get_num_threads())
    for (int64_t c = 0; c < g.planes; c++) {
#ifdef POOL_AVX512
      if (tiled && max2x2_backward_plane_avx512(gxp + c * in, gyp + c * on, idx + c * on, g.OH, g.OW)) continue;
      max_backward_plane_s(gxp + c * in, gyp + c * on, idx + c * on, in, on, g.OH, g.OW, 0);
#else
      max_backward_plane_s(gxp + c * in, gyp + c * on, idx + c * on, in, on, g.OH, g.OW, tiled);
#endif
    }
  } else {
    double *gxp = (double *)em_tensor_ptr(gx);
    const double *gyp = (const double *)em_tensor_ptr(gy);
#pragma omp parallel for schedule(static) if (par) num_threads(em_get_num_threads())
    for (int64_t c = 0; c < g.planes; c++)
      max_backward_plane_d(gxp + c * in, gyp + c * on, idx + c * on, in, on, g.OH, g.OW, tiled);
  }
  return EM_OK;
}

/* Runs the average pooling forward (backward = 0) or backward over every plane. */
static em_status avg_run(em_tensor *a, const em_tensor *b, const em_pool2d_params *p, int backward) {
  /* forward: a = out, b = x; backward: a = gx, b = gy */
  pool_geom g = backward ? geometry(a, b) : geometry(b, a);
  span *hs = avg_spans(g.H, g.OH, p->kernel[0], p->stride[0], p->pad[0], p);
  span *ws = avg_spans(g.W, g.OW, p->kernel[1], p->stride[1], p->pad[1], p);
  if (!hs || !ws) {
    free(hs), free(ws);
    return em_set_error(EM_ERR_MEMORY, "avg_pool2d: out of memory");
  }
  int64_t in = g.H * g.W, on = g.OH * g.OW;
  int par = use_threads(g.planes, g.planes * in);
  if (a->dtype == EM_FLOAT32) {
    float *ap = (float *)em_tensor_ptr(a);
    const float *bp = (const float *)em_tensor_ptr(b);
#pragma omp parallel for schedule(static) if (par) num_threads(em_get_num_threads())
    for (int64_t c = 0; c < g.planes; c++) {
      if (backward) avg_backward_plane_s(ap + c * in, bp + c * on, &g, hs, ws);
      else avg_plane_s(ap + c * on, bp + c * in, &g, hs, ws);
    }
  } else {
    double *ap = (double *)em_tensor_ptr(a);
    const double *bp = (const double *)em_tensor_ptr(b);
#pragma omp parallel for schedule(static) if (par) num_threads(em_get_num_threads())
    for (int64_t c = 0; c < g.planes; c++) {
      if (backward) avg_backward_plane_d(ap + c * in, bp + c * on, &g, hs, ws);
      else avg_plane_d(ap + c * on, bp + c * in, &g, hs, ws);
    }
  }
  free(hs);
  free(ws);
  return EM_OK;
}

em_status cpu_avg_pool2d(em_tensor *out, const em_tensor *x, const em_pool2d_params *p) {
  return avg_run(out, x, p, 0);
}

em_status cpu_avg_pool2d_backward(em_tensor *gx, const em_tensor *gy, const em_pool2d_params *p) {
  return avg_run(gx, gy, p, 1);
}
