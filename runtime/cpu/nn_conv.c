/* nn_conv.c - 2-d convolution on the CPU: im2col + OpenBLAS GEMM, one image per task.
 *
 * For one image and one group, with K = C/groups * kH * kW and P = OH * OW:
 *   forward      out[Co/g, P]  = w[Co/g, K] @ col[K, P]          (+ bias, pre-filled)
 *   input grad   gcol[K, P]    = w^T[K, Co/g] @ gy[Co/g, P]      then col2im into gx
 *   weight grad  gw[Co/g, K]  += gy[Co/g, P] @ col^T[P, K]
 * col is the image unrolled (im2col) into a per-thread buffer that stays in cache, so
 * nothing of size N * K * P is ever stored. A 1x1 convolution with stride 1 and no
 * padding needs no unrolling: the image itself is col.
 *
 * Threads take whole images (OpenBLAS runs single-threaded inside a parallel region):
 * on the 2-core target, letting OpenBLAS thread each per-image GEMM instead was several
 * times slower (a barrier per small GEMM), and one GEMM over a batch-wide col would need
 * N * K * P floats that no cache holds. A batch of one image runs serially with
 * OpenBLAS's own threads.
 * Weight gradients are summed per fixed chunk of images and the chunks are added in
 * order, so the result does not depend on the thread count.
 *
 * float32 convolutions go to oneDNN instead where it is built in and measured faster
 * (cpu_dnnl.h; EMBER_DNNL=0 keeps them here), and always under bfloat16 autocast, which
 * only oneDNN computes; whatever oneDNN declines runs here. */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "autograd/autocast.h"
#include "cpu_dnnl.h"
#include "cpu_impl.h"

typedef struct conv_geom {
  int64_t N, C, H, W, Co, OH, OW, kh, kw;
  int64_t Cg, Cog, K, P; /* per group: input channels, output channels, col rows, col cols */
  int sh, sw, ph, pw, dh, dw, groups;
  int direct; /* 1x1, stride 1, no padding: the image is its own col */
} conv_geom;

static conv_geom geometry(const em_tensor *x, const em_tensor *w, const em_tensor *y, const em_conv2d_params *p) {
  conv_geom g = {.N = x->sizes[0],
                 .C = x->sizes[1],
                 .H = x->sizes[2],
                 .W = x->sizes[3],
                 .Co = w->sizes[0],
                 .OH = y->sizes[2],
                 .OW = y->sizes[3],
                 .kh = w->sizes[2],
                 .kw = w->sizes[3],
                 .sh = p->stride[0],
                 .sw = p->stride[1],
                 .ph = p->pad[0],
                 .pw = p->pad[1],
                 .dh = p->dilation[0],
                 .dw = p->dilation[1],
                 .groups = p->groups};
  g.Cg = g.C / g.groups;
  g.Cog = g.Co / g.groups;
  g.K = g.Cg * g.kh * g.kw;
  g.P = g.OH * g.OW;
  g.direct = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
  return g;
}

/* The output columns ow whose input column ow * s + off lies in [0, W): [*lo, *hi). */
static void valid_range(int64_t off, int64_t s, int64_t W, int64_t OW, int64_t *lo, int64_t *hi) {
  int64_t l = off >= 0 ? 0 : (-off + s - 1) / s;
  int64_t h = W - off <= 0 ? 0 : (W - off + s - 1) / s;
  if (l > OW) l = OW;
  if (h > OW) h = OW;
  if (h < l) h = l;
  *lo = l, *hi = h;
}

static int use_threads(int64_t tasks) { return tasks > 1 && em_get_num_threads() > 1 && !omp_in_parallel(); }

/* The per-thread unrolled images (K x P each) did not fit in memory. */
static em_status col_oom(const conv_geom *g, int threads, size_t elsize) {
  return em_set_error(EM_ERR_MEMORY, "conv2d: out of memory for %d unrolled images of %lld x %lld (%.1f MB)", threads,
                      (long long)g->K, (long long)g->P, (double)threads * g->K * g->P * elsize / 1e6);
}

/* One generic body per float type: T is the C type, S the BLAS prefix (s or d). */
/* clang-format off */
#define DEFINE_CONV(T, S)                                                                                        \
  /* col[K, P] from x[Cg, H, W] (one group of one image). Row (c, i, j) of col holds x[c]           \
   * shifted by the kernel tap (i, j); padding reads as 0. With stride 1 and OW == W (same             \
   * padding along W) a row is one contiguous copy of the plane, after which the columns that          \
   * wrapped into the neighbouring image row are zeroed; other shapes copy row by row. */              \
  static void im2col_##S(T *restrict col, const T *restrict x, const conv_geom *g) {                             \
    int flat = g->sh == 1 && g->sw == 1 && g->OW == g->W;                                                      \
    for (int64_t c = 0; c < g->Cg; c++)                                                                          \
      for (int64_t i = 0; i < g->kh; i++)                                                                        \
        for (int64_t j = 0; j < g->kw; j++) {                                                                    \
          T *row = col + ((c * g->kh + i) * g->kw + j) * g->P;                                                   \
          const T *plane = x + c * g->H * g->W;                                                                  \
          int64_t off = j * g->dw - g->pw, ioff = i * g->dh - g->ph, lo, hi, oh0, oh1;                           \
          valid_range(off, g->sw, g->W, g->OW, &lo, &hi);                                                        \
          valid_range(ioff, g->sh, g->H, g->OH, &oh0, &oh1);                                                     \
          if (hi == lo) oh1 = oh0; /* no valid column: all zero */                                               \
          for (int64_t q = 0; q < oh0 * g->OW; q++) row[q] = 0;                                                  \
          for (int64_t q = oh1 * g->OW; q < g->P; q++) row[q] = 0;                                               \
          if (flat && oh1 > oh0) {                                                                               \
            T *dst = row + oh0 * g->OW;                                                                          \
            const T *src = plane + (oh0 + ioff) * g->W + off;                                                    \
            int64_t last = (oh1 - oh0 - 1) * g->OW + hi;                                                         \
            for (int64_t q = lo; q < last; q++) dst[q] = src[q];                                                 \
            for (int64_t r = 0; r < oh1 - oh0; r++) {                                                            \
              for (int64_t q = 0; q < lo; q++) dst[r * g->OW + q] = 0;                                           \
              for (int64_t q = hi; q < g->OW; q++) dst[r * g->OW + q] = 0;                                       \
            }                                                                                                    \
            continue;                                                                                            \
          }                                                                                                      \
          for (int64_t oh = oh0; oh < oh1; oh++) {                                                               \
            T *dst = row + oh * g->OW;                                                                           \
            const T *src = plane + (oh * g->sh + ioff) * g->W + off;                                             \
            for (int64_t ow = 0; ow < lo; ow++) dst[ow] = 0;                                                     \
            if (g->sw == 1)                                                                                      \
              for (int64_t ow = lo; ow < hi; ow++) dst[ow] = src[ow];                                            \
            else                                                                                                 \
              for (int64_t ow = lo; ow < hi; ow++) dst[ow] = src[ow * g->sw];                                    \
            for (int64_t ow = hi; ow < g->OW; ow++) dst[ow] = 0;                                                 \
          }                                                                                                      \
        }                                                                                                        \
  }                                                                                                              \
  /* x[Cg, H, W] = the sum of col's entries over the positions they were read from. col is              \
   * scratch: in the flat case its entries that fall on padding are zeroed, so that each row             \
   * is added in one contiguous pass. */                                                                 \
  static void col2im_##S(T *restrict x, T *restrict col, const conv_geom *g) {                                   \
    int flat = g->sh == 1 && g->sw == 1 && g->OW == g->W;                                                      \
    memset(x, 0, sizeof(T) * g->Cg * g->H * g->W);                                                              \
    for (int64_t c = 0; c < g->Cg; c++)                                                                          \
      for (int64_t i = 0; i < g->kh; i++)                                                                        \
        for (int64_t j = 0; j < g->kw; j++) {                                                                    \
          T *row = col + ((c * g->kh + i) * g->kw + j) * g->P;                                                   \
          T *plane = x + c * g->H * g->W;                                                                        \
          int64_t off = j * g->dw - g->pw, ioff = i * g->dh - g->ph, lo, hi, oh0, oh1;                           \
          valid_range(off, g->sw, g->W, g->OW, &lo, &hi);                                                        \
          valid_range(ioff, g->sh, g->H, g->OH, &oh0, &oh1);                                                     \
          if (hi == lo) continue;                                                                                \
          if (flat && oh1 > oh0) {                                                                               \
            T *src = row + oh0 * g->OW, *dst = plane + (oh0 + ioff) * g->W + off;                                \
            for (int64_t r = 0; r < oh1 - oh0; r++) {                                                            \
              for (int64_t q = 0; q < lo; q++) src[r * g->OW + q] = 0;                                           \
              for (int64_t q = hi; q < g->OW; q++) src[r * g->OW + q] = 0;                                       \
            }                                                                                                    \
            int64_t last = (oh1 - oh0 - 1) * g->OW + hi;                                                         \
            for (int64_t q = lo; q < last; q++) dst[q] += src[q];                                                \
            continue;                                                                                            \
          }                                                                                                      \
          for (int64_t oh = oh0; oh < oh1; oh++) {                                                               \
            const T *src = row + oh * g->OW;                                                                     \
            T *dst = plane + (oh * g->sh + ioff) * g->W + off;                                                   \
            if (g->sw == 1)                                                                                      \
              for (int64_t ow = lo; ow < hi; ow++) dst[ow] += src[ow];                                           \
            else                                                                                                 \
              for (int64_t ow = lo; ow < hi; ow++) dst[ow * g->sw] += src[ow];                                   \
          }                                                                                                      \
        }                                                                                                        \
  }                                                                                                              \
  /* sum of n values in 16 independent lanes (a single accumulator would keep the loop scalar) */            \
  static T row_sum_##S(const T *r, int64_t n) {                                                                  \
    T lane[16] = {0};                                                                                            \
    int64_t q = 0;                                                                                               \
    for (; q + 16 <= n; q += 16)                                                                                 \
      for (int j = 0; j < 16; j++) lane[j] += r[q + j];                                                          \
    for (int j = 0; q + j < n; j++) lane[j] += r[q + j];                                                         \
    T s = 0;                                                                                                     \
    for (int j = 0; j < 16; j++) s += lane[j];                                                                   \
    return s;                                                                                                    \
  }                                                                                                              \
  /* C[M, N] = A[M, K] @ B[K, N] (+ C when beta), row-major, A transposed when ta, B when tb */                  \
  static void gemm_##S(int ta, int tb, int64_t M, int64_t N, int64_t K, const T *A, const T *B, T beta, T *C) {  \
    cblas_##S##gemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M,       \
                    (int)N, (int)K, 1, A, ta ? (int)M : (int)K, B, tb ? (int)K : (int)N, beta, C, (int)N);       \
  }                                                                                                              \
  static void forward_image_##S(T *y, const T *x, const T *w, const T *b, T *col, const conv_geom *g) {          \
    for (int64_t gi = 0; gi < g->groups; gi++) {                                                                 \
      const T *xg = x + gi * g->Cg * g->H * g->W;                                                                \
      T *yg = y + gi * g->Cog * g->P;                                                                            \
      if (!g->direct) im2col_##S(col, xg, g);                                                                    \
      if (b)                                                                                                     \
        for (int64_t co = 0; co < g->Cog; co++)                                                                  \
          for (int64_t q = 0; q < g->P; q++) yg[co * g->P + q] = b[gi * g->Cog + co];                            \
      gemm_##S(0, 0, g->Cog, g->P, g->K, w + gi * g->Cog * g->K, g->direct ? xg : col, b ? 1 : 0, yg);           \
    }                                                                                                            \
  }                                                                                                              \
  static em_status forward_##S(em_tensor *out, const em_tensor *xt, const em_tensor *wt, const em_tensor *bt,    \
                               const conv_geom *g) {                                                             \
    const T *x = (const T *)em_tensor_ptr(xt), *w = (const T *)em_tensor_ptr(wt);                                \
    const T *b = bt ? (const T *)em_tensor_ptr(bt) : NULL;                                                       \
    T *y = (T *)em_tensor_ptr(out);                                                                              \
    int64_t xs = g->C * g->H * g->W, ys = g->Co * g->P;                                                          \
    int par = use_threads(g->N), nt = par ? em_get_num_threads() : 1;                                            \
    T *cols = g->direct ? NULL : malloc(sizeof(T) * nt * g->K * g->P);                                           \
    if (!g->direct && !cols) return col_oom(g, nt, sizeof(T));                                                   \
    _Pragma("omp parallel num_threads(nt) if(par)") {                                                            \
      T *col = cols ? cols + omp_get_thread_num() * g->K * g->P : NULL;                                          \
      _Pragma("omp for schedule(static)") for (int64_t n = 0; n < g->N; n++)                                     \
          forward_image_##S(y + n * ys, x + n * xs, w, b, col, g);                                               \
    }                                                                                                            \
    free(cols);                                                                                                  \
    return EM_OK;                                                                                                \
  }                                                                                                              \
  /* gx of one image: gcol = w^T @ gy, folded back (or written straight into gx when direct) */                  \
  static void input_grad_image_##S(T *gx, const T *gy, const T *w, T *gcol, const conv_geom *g) {                \
    for (int64_t gi = 0; gi < g->groups; gi++) {                                                                 \
      T *gxg = gx + gi * g->Cg * g->H * g->W;                                                                    \
      gemm_##S(1, 0, g->K, g->P, g->Cog, w + gi * g->Cog * g->K, gy + gi * g->Cog * g->P, 0,                     \
               g->direct ? gxg : gcol);                                                                          \
      if (!g->direct) col2im_##S(gxg, gcol, g);                                                                  \
    }                                                                                                            \
  }                                                                                                              \
  /* adds one image's contribution to gw [Co, K] and gb [Co] (either may be NULL) */                             \
  static void weight_grad_image_##S(T *gw, T *gb, const T *gy, const T *x, T *col, const conv_geom *g) {         \
    for (int64_t gi = 0; gi < g->groups; gi++) {                                                                 \
      const T *gyg = gy + gi * g->Cog * g->P;                                                                    \
      if (gw) {                                                                                                  \
        const T *xg = x + gi * g->Cg * g->H * g->W;                                                              \
        if (!g->direct) im2col_##S(col, xg, g);                                                                  \
        gemm_##S(0, 1, g->Cog, g->K, g->P, gyg, g->direct ? xg : col, 1, gw + gi * g->Cog * g->K);               \
      }                                                                                                          \
      if (gb)                                                                                                    \
        for (int64_t co = 0; co < g->Cog; co++) gb[gi * g->Cog + co] += row_sum_##S(gyg + co * g->P, g->P);      \
    }                                                                                                            \
  }                                                                                                              \
  static em_status backward_##S(em_tensor *gxt, em_tensor *gwt, em_tensor *gbt, const em_tensor *gyt,            \
                                const em_tensor *xt, const em_tensor *wt, const conv_geom *g) {                  \
    const T *gy = (const T *)em_tensor_ptr(gyt), *x = (const T *)em_tensor_ptr(xt);                              \
    const T *w = (const T *)em_tensor_ptr(wt);                                                                   \
    T *gx = gxt ? (T *)em_tensor_ptr(gxt) : NULL;                                                                \
    int64_t xs = g->C * g->H * g->W, ys = g->Co * g->P, wsz = g->Co * g->K;                                      \
    /* Chunk c sums images [c * N / nchunk, (c + 1) * N / nchunk) into its own buffer. */                        \
    int64_t nchunk = (gwt || gbt) ? (g->N < 16 ? g->N : 16) : 0;                                                 \
    int64_t per = wsz + g->Co;                                                                                   \
    if (nchunk > 1 && (double)nchunk * per * sizeof(T) > 256e6) nchunk = 1; /* huge layers: one chunk */        \
    T *part = nchunk ? calloc((size_t)(nchunk * per), sizeof(T)) : NULL;                                         \
    if (nchunk && !part) return em_set_error(EM_ERR_MEMORY, "conv2d backward: out of memory");                  \
    int64_t tasks = nchunk ? nchunk : g->N;                                                                      \
    int par = use_threads(tasks), nt = par ? em_get_num_threads() : 1;                                           \
    T *cols = g->direct ? NULL : malloc(sizeof(T) * nt * g->K * g->P);                                           \
    if (!g->direct && !cols) {                                                                                   \
      free(part);                                                                                                \
      return col_oom(g, nt, sizeof(T));                                                                          \
    }                                                                                                            \
    _Pragma("omp parallel num_threads(nt) if(par)") {                                                            \
      T *col = cols ? cols + omp_get_thread_num() * g->K * g->P : NULL;                                          \
      if (nchunk) {                                                                                              \
        _Pragma("omp for schedule(static)") for (int64_t c = 0; c < nchunk; c++) {                               \
          T *pw_ = part + c * per;                                                                               \
          for (int64_t n = c * g->N / nchunk; n < (c + 1) * g->N / nchunk; n++) {                                \
            weight_grad_image_##S(gwt ? pw_ : NULL, gbt ? pw_ + wsz : NULL, gy + n * ys, x + n * xs, col, g);   \
            if (gx) input_grad_image_##S(gx + n * xs, gy + n * ys, w, col, g);                                   \
          }                                                                                                      \
        }                                                                                                        \
      } else {                                                                                                   \
        _Pragma("omp for schedule(static)") for (int64_t n = 0; n < g->N; n++)                                   \
            input_grad_image_##S(gx + n * xs, gy + n * ys, w, col, g);                                           \
      }                                                                                                          \
    }                                                                                                            \
    free(cols);                                                                                                  \
    if (nchunk || gwt || gbt) { /* gradients of an empty batch are zero */                                       \
      T *gw = gwt ? (T *)em_tensor_ptr(gwt) : NULL, *gb = gbt ? (T *)em_tensor_ptr(gbt) : NULL;                  \
      if (gw) memset(gw, 0, sizeof(T) * wsz);                                                                    \
      if (gb) memset(gb, 0, sizeof(T) * g->Co);                                                                  \
      for (int64_t c = 0; c < nchunk; c++) {                                                                     \
        const T *p = part + c * per;                                                                             \
        if (gw)                                                                                                  \
          for (int64_t k = 0; k < wsz; k++) gw[k] += p[k];                                                       \
        if (gb)                                                                                                  \
          for (int64_t k = 0; k < g->Co; k++) gb[k] += p[wsz + k];                                               \
      }                                                                                                          \
    }                                                                                                            \
    free(part);                                                                                                  \
    return EM_OK;                                                                                                \
  }
/* clang-format on */

DEFINE_CONV(float, s)
DEFINE_CONV(double, d)

static cpu_conv_shape dnnl_shape(const conv_geom *g) {
  cpu_conv_shape s = {g->N,  g->C,  g->H,  g->W,  g->Co, g->kh, g->kw, g->OH,
                      g->OW, g->sh, g->sw, g->ph, g->pw, g->dh, g->dw, g->groups};
  return s;
}

/* 0: plain float32 here; 1: float32 through oneDNN; 2: bfloat16 through oneDNN. */
static int dnnl_route(const em_tensor *x, const conv_geom *g) {
  if (x->dtype != EM_FLOAT32 || !cpu_dnnl_available()) return 0;
  cpu_conv_shape s = dnnl_shape(g);
  /* bfloat16 too only where oneDNN wins: on one input channel it was slower in bfloat16 than
   * ember in float32, and float32 loses nothing */
  if (!cpu_dnnl_conv_wanted(&s)) return 0;
  return ag_autocast_cpu_bf16() ? 2 : 1;
}

em_status cpu_conv2d(em_tensor *out, const em_tensor *x, const em_tensor *w, const em_tensor *b,
                     const em_conv2d_params *p) {
  conv_geom g = geometry(x, w, out, p);
  if (em_tensor_numel(out) == 0) return EM_OK;
  if (g.K == 0) return cpu_fill(out, 0); /* (the caller rejects empty kernels) */
  int route = dnnl_route(x, &g);
  if (route) {
    cpu_conv_shape s = dnnl_shape(&g);
    if (!cpu_dnnl_conv2d((float *)em_tensor_ptr(out), (float *)em_tensor_ptr(x), (float *)em_tensor_ptr(w),
                         b ? (float *)em_tensor_ptr(b) : NULL, &s, route == 2))
      return EM_OK;
  }
  return x->dtype == EM_FLOAT32 ? forward_s(out, x, w, b, &g) : forward_d(out, x, w, b, &g);
}

em_status cpu_conv2d_backward(em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *gy, const em_tensor *x,
                              const em_tensor *w, const em_conv2d_params *p) {
  conv_geom g = geometry(x, w, gy, p);
  if (g.P == 0 || g.Cog == 0 || g.K == 0) { /* no product to form: every gradient is zero */
    em_tensor *all[3] = {gx, gw, gb};
    for (int i = 0; i < 3; i++)
      if (all[i]) memset(em_tensor_ptr(all[i]), 0, em_tensor_numel(all[i]) * em_dtype_size(all[i]->dtype));
    return EM_OK;
  }
  int route = dnnl_route(x, &g);
  if (route) { /* what oneDNN does not do (a bias gradient alone, a shape it declines) is done here */
    cpu_conv_shape s = dnnl_shape(&g);
    if (gx && !cpu_dnnl_conv2d_backward_data((float *)em_tensor_ptr(gx), (float *)em_tensor_ptr(gy),
                                             (float *)em_tensor_ptr(w), &s, route == 2))
      gx = NULL;
    if (gw && !cpu_dnnl_conv2d_backward_weights((float *)em_tensor_ptr(gw), gb ? (float *)em_tensor_ptr(gb) : NULL,
                                                (float *)em_tensor_ptr(gy), (float *)em_tensor_ptr(x), &s, route == 2))
      gw = gb = NULL;
    if (!gx && !gw && !gb) return EM_OK;
  }
  if (x->dtype == EM_FLOAT32) return backward_s(gx, gw, gb, gy, x, w, &g);
  return backward_d(gx, gw, gb, gy, x, w, &g);
}
