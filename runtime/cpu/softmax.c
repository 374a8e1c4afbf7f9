/* softmax.c - CPU ops along one dim: softmax, log_softmax, cumsum and cumprod.
 *
 * The tensor core hands a contiguous input and a contiguous out of the same shape, seen
 * here as [outer, n, inner] around the dim. The last dim (inner == 1) runs row by row
 * with vectorised loops over the row; any other dim carries a strip of up to STRIP
 * columns down the dim together, so memory is read row by row and the loops vectorise
 * across the columns. Rows and strips are shared among OpenMP threads; each result is
 * computed by one thread in a fixed order, so it does not depend on the thread count.
 * out may be the input itself (in place): each element is read before it is written and
 * the pointers are not restrict-qualified (the compiler adds its own overlap checks). */
#include <math.h>
#include <omp.h>
#include "cpu_impl.h"
#include "vmath.h"

#define STRIP 256 /* columns carried together down a non-last dim */
#define LANES 16 /* independent accumulators in a row loop */
#define CHUNK 1024 /* elements summed in lanes before the sum moves to double */

typedef struct {
  int64_t outer, n, inner;
} dim_layout;

static dim_layout layout_of(const em_tensor *a, int dim) {
  dim_layout l = {1, 1, 1};
  for (int d = 0; d < a->ndim; d++) {
    if (d < dim) l.outer *= a->sizes[d];
    else if (d == dim) l.n = a->sizes[d];
    else l.inner *= a->sizes[d];
  }
  return l;
}

/* Work items: rows (inner == 1) or strips of columns. */
static int64_t work_items(dim_layout l) { return l.inner == 1 ? l.outer : l.outer * ((l.inner + STRIP - 1) / STRIP); }

static int use_threads(int64_t work, int64_t elements) {
  return work > 1 && elements >= EM_PARALLEL_GRAIN && em_get_num_threads() > 1 && !omp_in_parallel();
}

/* Items per dynamic chunk (about 16K elements): on a shared machine a thread that loses
 * its core leaves its rows to the others instead of holding up the whole op. */
static int64_t chunk_of(dim_layout l) {
  int64_t per_item = l.n * (l.inner == 1 ? 1 : (l.inner < STRIP ? l.inner : STRIP));
  return 16384 / (per_item ? per_item : 1) + 1;
}

/* ---- softmax ----
 * Numerically stable: exp(x - max). A NaN anywhere in a row makes the row NaN, as in
 * PyTorch, because it flows through the sum. float32 uses the vectorisable
 * em_vexpf_nonpos (within 2 ulp of libm; probabilities under FLT_MIN become 0); float64
 * uses libm's exp. Row sums go to double every CHUNK
 * elements. */
#define EXP_f32(v) em_vexpf_nonpos(v) /* v = x - max <= 0 */
#define EXP_f64(v) exp(v)

/* Each loop below does one thing, with no stores under a condition, so that GCC and
 * Clang vectorise all of them (a conditional store inside the exp loop kept it scalar). */
/* clang-format off */
#define DEF_SOFTMAX(N, T)                                                                   \
  static T row_max_##N(const T *x, int64_t n) {                                             \
    T lane[LANES];                                                                          \
    for (int j = 0; j < LANES; j++) lane[j] = -INFINITY;                                    \
    int64_t i = 0;                                                                          \
    for (; i + LANES <= n; i += LANES)                                                      \
      for (int j = 0; j < LANES; j++) lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];    \
    for (int j = 0; i + j < n; j++) lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];      \
    T m = lane[0];                                                                          \
    for (int j = 1; j < LANES; j++) m = lane[j] > m ? lane[j] : m;                          \
    return m;                                                                               \
  }                                                                                         \
  /* sum of exp(x - m), also stored in y unless y is NULL (log_softmax reads x again).   \
   * Lanes add in T over chunks of CHUNK elements (cheap), chunks add into a double. */    \
  static double exp_sum_##N(T *y, const T *x, int64_t n, T m) {                             \
    double total = 0;                                                                       \
    for (int64_t c0 = 0; c0 < n; c0 += CHUNK) {                                             \
      int64_t c1 = c0 + CHUNK < n ? c0 + CHUNK : n, i = c0;                                 \
      T sum[LANES] = {0};                                                                   \
      if (y) {                                                                              \
        for (; i + LANES <= c1; i += LANES)                                                 \
          for (int j = 0; j < LANES; j++) {                                                 \
            T e = EXP_##N(x[i + j] - m);                                                    \
            y[i + j] = e;                                                                   \
            sum[j] += e;                                                                    \
          }                                                                                 \
        for (; i < c1; i++) sum[0] += y[i] = EXP_##N(x[i] - m);                            \
      } else {                                                                              \
        for (; i + LANES <= c1; i += LANES)                                                 \
          for (int j = 0; j < LANES; j++) sum[j] += EXP_##N(x[i + j] - m);                  \
        for (; i < c1; i++) sum[0] += EXP_##N(x[i] - m);                                   \
      }                                                                                     \
      for (int w = LANES / 2; w; w /= 2)                                                    \
        for (int j = 0; j < w; j++) sum[j] += sum[j + w];                                   \
      total += sum[0];                                                                      \
    }                                                                                       \
    return total;                                                                           \
  }                                                                                         \
  static void softmax_row_##N(T *y, const T *x, int64_t n, int log_out) {                   \
    T m = row_max_##N(x, n);                                                                \
    if (log_out) {                                                                          \
      T ls = (T)log(exp_sum_##N(NULL, x, n, m));                                            \
      for (int64_t i = 0; i < n; i++) y[i] = (x[i] - m) - ls;                               \
    } else {                                                                                \
      T inv = (T)(1.0 / exp_sum_##N(y, x, n, m));                                           \
      for (int64_t i = 0; i < n; i++) y[i] *= inv;                                          \
    }                                                                                       \
  }                                                                                         \
  /* w columns at x (row stride `inner` elements), down n rows */                           \
  static void softmax_strip_##N(T *y, const T *x, int64_t n, int64_t inner, int64_t w,      \
                                int log_out) {                                              \
    T m[STRIP], f[STRIP];                                                                   \
    double sum[STRIP];                                                                      \
    for (int64_t c = 0; c < w; c++) m[c] = -INFINITY, sum[c] = 0;                           \
    for (int64_t d = 0; d < n; d++)                                                         \
      for (int64_t c = 0; c < w; c++) m[c] = x[d * inner + c] > m[c] ? x[d * inner + c] : m[c]; \
    if (log_out) {                                                                          \
      for (int64_t d = 0; d < n; d++)                                                       \
        for (int64_t c = 0; c < w; c++) sum[c] += EXP_##N(x[d * inner + c] - m[c]);         \
      for (int64_t c = 0; c < w; c++) f[c] = (T)log(sum[c]);                                \
      for (int64_t d = 0; d < n; d++)                                                       \
        for (int64_t c = 0; c < w; c++) y[d * inner + c] = (x[d * inner + c] - m[c]) - f[c]; \
    } else {                                                                                \
      for (int64_t d = 0; d < n; d++)                                                       \
        for (int64_t c = 0; c < w; c++) {                                                   \
          T e = EXP_##N(x[d * inner + c] - m[c]);                                           \
          y[d * inner + c] = e;                                                             \
          sum[c] += e;                                                                      \
        }                                                                                   \
      for (int64_t c = 0; c < w; c++) f[c] = (T)(1.0 / sum[c]);                             \
      for (int64_t d = 0; d < n; d++)                                                       \
        for (int64_t c = 0; c < w; c++) y[d * inner + c] *= f[c];                           \
    }                                                                                       \
  }                                                                                         \
  static void softmax_##N(T *y, const T *x, dim_layout l, int log_out) {                    \
    int64_t nstrips = (l.inner + STRIP - 1) / STRIP, work = work_items(l), chunk = chunk_of(l); \
    _Pragma("omp parallel for schedule(dynamic, chunk) num_threads(em_get_num_threads()) if (use_threads(work, l.outer * l.n * l.inner))") \
    for (int64_t w = 0; w < work; w++) {                                                    \
      if (l.inner == 1) {                                                                   \
        softmax_row_##N(y + w * l.n, x + w * l.n, l.n, log_out);                            \
      } else {                                                                              \
        int64_t o = w / nstrips, c0 = (w % nstrips) * STRIP;                                \
        int64_t width = l.inner - c0 < STRIP ? l.inner - c0 : STRIP;                        \
        int64_t off = o * l.n * l.inner + c0;                                               \
        softmax_strip_##N(y + off, x + off, l.n, l.inner, width, log_out);                  \
      }                                                                                     \
    }                                                                                       \
  }
/* clang-format on */

DEF_SOFTMAX(f32, float)
DEF_SOFTMAX(f64, double)

em_status cpu_softmax(em_tensor *out, const em_tensor *a, int dim, int log_out) {
  dim_layout l = layout_of(a, dim);
  if (l.outer * l.n * l.inner == 0) return EM_OK;
  switch (a->dtype) {
    case EM_FLOAT32: softmax_f32((void *)em_tensor_ptr(out), (void *)em_tensor_ptr(a), l, log_out); return EM_OK;
    case EM_FLOAT64: softmax_f64((void *)em_tensor_ptr(out), (void *)em_tensor_ptr(a), l, log_out); return EM_OK;
    default:
      return em_set_error(EM_ERR_DTYPE, "%s: expected a float32 or float64 tensor, got %s",
                          log_out ? "log_softmax" : "softmax", em_dtype_name(a->dtype));
  }
}

/* ---- cumsum / cumprod ----
 * Floats accumulate in double and keep their dtype; integers accumulate in int64 (with
 * wrap-around, never signed overflow) and give int64. */
#define SCAN_ADD(acc, x) ((acc) = (ACC)((UACC)(acc) + (UACC)(x)))
#define SCAN_MUL(acc, x) ((acc) = (ACC)((UACC)(acc) * (UACC)(x)))

/* clang-format off */
#define DEF_SCAN(N, T, OUT, ACC_T, UACC_T)                                                  \
  static void scan_##N(OUT *y, const T *x, dim_layout l, int prod) {                        \
    typedef ACC_T ACC;                                                                      \
    typedef UACC_T UACC;                                                                    \
    int64_t nstrips = (l.inner + STRIP - 1) / STRIP, work = work_items(l), chunk = chunk_of(l); \
    _Pragma("omp parallel for schedule(dynamic, chunk) num_threads(em_get_num_threads()) if (use_threads(work, l.outer * l.n * l.inner))") \
    for (int64_t w = 0; w < work; w++) {                                                    \
      if (l.inner == 1) {                                                                   \
        const T *xr = x + w * l.n;                                                          \
        OUT *yr = y + w * l.n;                                                              \
        ACC acc = prod;                                                                     \
        if (prod)                                                                           \
          for (int64_t i = 0; i < l.n; i++) SCAN_MUL(acc, xr[i]), yr[i] = (OUT)acc;         \
        else                                                                                \
          for (int64_t i = 0; i < l.n; i++) SCAN_ADD(acc, xr[i]), yr[i] = (OUT)acc;         \
      } else {                                                                              \
        int64_t o = w / nstrips, c0 = (w % nstrips) * STRIP;                                \
        int64_t width = l.inner - c0 < STRIP ? l.inner - c0 : STRIP;                        \
        const T *xs = x + o * l.n * l.inner + c0;                                           \
        OUT *ys = y + o * l.n * l.inner + c0;                                               \
        ACC acc[STRIP];                                                                     \
        for (int64_t c = 0; c < width; c++) acc[c] = prod;                                  \
        for (int64_t d = 0; d < l.n; d++) {                                                 \
          if (prod)                                                                         \
            for (int64_t c = 0; c < width; c++) SCAN_MUL(acc[c], xs[d * l.inner + c]);      \
          else                                                                              \
            for (int64_t c = 0; c < width; c++) SCAN_ADD(acc[c], xs[d * l.inner + c]);      \
          for (int64_t c = 0; c < width; c++) ys[d * l.inner + c] = (OUT)acc[c];            \
        }                                                                                   \
      }                                                                                     \
    }                                                                                       \
  }
/* clang-format on */

DEF_SCAN(f32, float, float, double, double)
DEF_SCAN(f64, double, double, double, double)
DEF_SCAN(i32, int32_t, int64_t, int64_t, uint64_t)
DEF_SCAN(i64, int64_t, int64_t, int64_t, uint64_t)
DEF_SCAN(u8, uint8_t, int64_t, int64_t, uint64_t)

em_status cpu_scan(int prod, em_tensor *out, const em_tensor *a, int dim) {
  dim_layout l = layout_of(a, dim);
  if (l.outer * l.n * l.inner == 0) return EM_OK;
  void *y = em_tensor_ptr(out);
  const void *x = em_tensor_ptr(a);
  switch (a->dtype) {
    case EM_FLOAT32: scan_f32(y, x, l, prod); return EM_OK;
    case EM_FLOAT64: scan_f64(y, x, l, prod); return EM_OK;
    case EM_INT32: scan_i32(y, x, l, prod); return EM_OK;
    case EM_INT64: scan_i64(y, x, l, prod); return EM_OK;
    case EM_UINT8:
    case EM_BOOL: scan_u8(y, x, l, prod); return EM_OK;
    default:
      return em_set_error(EM_ERR_DTYPE, "%s: dtype %s is not supported on the CPU (convert with to('float32') first)",
                          prod ? "cumprod" : "cumsum", em_dtype_name(a->dtype));
  }
}
