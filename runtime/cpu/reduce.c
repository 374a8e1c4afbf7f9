/* reduce.c - CPU reductions: sum, mean, prod, max/min (with positions), argmax/argmin,
 * logsumexp, norms, any/all, and variance.
 *
 * Layout. The tensor core hands a view whose last nreduce dims are reduced and a
 * contiguous out over the leading (kept) dims. Both groups are simplified here (size-1
 * dims dropped, neighbours that are contiguous with each other merged), then one of two
 * walks runs:
 *  - inner: each output reduces its own elements, read as runs along the innermost
 *    reduced dim (contiguous in the usual "reduce the last dims" case) by a lane kernel
 *    with many independent accumulators, which the compiler vectorises. Long reductions
 *    are cut into blocks of RED_BLOCK elements; that partition depends only on the shape
 *    and partial results are combined in block order, so results do not depend on the
 *    number of threads.
 *  - outer: when the innermost kept dim is contiguous and the reduced dims are not (sum
 *    over dim 0 of a matrix), whole rows are accumulated into a strip of outputs, so
 *    memory is read row by row, never column by column.
 * Accumulators: double for float sums, products and norms, so float32 sums do not degrade
 * with size (contiguous float32 sums first add groups of four in float: see
 * seg_sum_f32_grouped); int64 with wrap-around for integer sums and products (as
 * PyTorch); the value itself (as double or int64, both exact) for max and min.
 * Two-pass ops run the walk twice: logsumexp (max, then sum of exp(x - max)) and
 * variance (mean, then sum of squared deviations); the first pass leaves one double per
 * output, the "center", that the second reads. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include "core/host_device.h"
#include "cpu_impl.h"
#include "vmath.h"
#include "plugins/plugin_api.h"

#define RED_BLOCK 32768 /* elements per block of a long reduction */
#define LANES 32 /* independent accumulators in a lane kernel */
#define STRIP 1024 /* at most this many outputs accumulated together by the outer walk */

/* Internal kinds: what is accumulated. Public ops map onto them (MEAN is SUM, ARGMAX is
 * MAXI, ...); the difference is in how the final value is written. */
typedef core_reduce_kind kind;

/* The state of one output. */
typedef struct red_state {
  double f; /* float accumulator; max/min value of float inputs */
  int64_t i; /* integer accumulator; max/min value of integer inputs */
  int64_t pos; /* position of the max/min within the reduced elements */
  double c; /* the center from the first pass (variance, logsumexp) */
} red_state;

/* Accumulators of the outer walk, one per output of a strip. */
typedef struct strip_buf {
  double f[STRIP];
  int64_t i[STRIP];
  int64_t pos[STRIP];
} strip_buf;

/* seg: accumulates n elements at x (stride in bytes), the first at position pos.
 * strip: accumulates one row of n contiguous elements (reduced position pos) into b;
 * center holds the n outputs' centers (NULL when the kind has none). */
typedef void (*seg_fn)(red_state *st, const char *x, int64_t n, int64_t stride, int64_t pos, double p);
typedef void (*strip_fn)(strip_buf *b, const char *x, int64_t n, int64_t pos, const double *center, double p);
typedef struct {
  seg_fn seg;
  strip_fn strip;
} red_kernel;

/* ---- element updates ----
 * Float accumulators are double, integer ones int64. IS_NAN is 0 for integer types. */
#define NAN_F(x) ((x) != (x))
#define NAN_I(x) 0
#define UPD_ADD(a, x) ((a) += (x))
#define UPD_MUL(a, x) ((a) *= (x))
#define UPD_IADD(a, x) ((a) = (int64_t)((uint64_t)(a) + (uint64_t)(int64_t)(x))) /* wraps, no UB */
#define UPD_IMUL(a, x) ((a) = (int64_t)((uint64_t)(a) * (uint64_t)(int64_t)(x)))
/* NaN wins: once the accumulator holds NaN nothing compares greater. */
#define UPD_MAX_(a, x, ISNAN) ((a) = ((x) > (a) || ISNAN(x)) ? (x) : (a))
#define UPD_MIN_(a, x, ISNAN) ((a) = ((x) < (a) || ISNAN(x)) ? (x) : (a))
#define UPD_MAX_F(a, x) UPD_MAX_(a, x, NAN_F)
#define UPD_MIN_F(a, x) UPD_MIN_(a, x, NAN_F)
#define UPD_MAX_I(a, x) UPD_MAX_(a, x, NAN_I)
#define UPD_MIN_I(a, x) UPD_MIN_(a, x, NAN_I)
#define UPD_OR(a, x) ((a) |= ((x) != 0))
#define UPD_AND(a, x) ((a) &= ((x) != 0))
#define UPD_SQ(a, x) ((a) += (double)(x) * (double)(x))
#define UPD_ABS(a, x) ((a) += fabs((double)(x)))
#define UPD_NZ(a, x) ((a) += ((x) != 0))
#define UPD_MAXABS(a, x) UPD_MAX_F(a, fabs((double)(x)))
#define UPD_MINABS(a, x) UPD_MIN_F(a, fabs((double)(x)))
#define UPD_POW(a, x) ((a) += pow(fabs((double)(x)), p))
#define UPD_SQDEV(a, x) ((a) += ((double)(x)-c_) * ((double)(x)-c_))
#define EXP_float(v) ((double)em_vexpf((float)(v)))
#define EXP_double(v) exp(v)

/* Runs UPDATE over n elements into LANES independent accumulators (so the contiguous
 * loop vectorises), folds the lanes pairwise with FOLD, and folds that into RESULT. */
#define LANE_LOOP(T, ACC, INIT, UPDATE, FOLD, xp, n, s, RESULT)                                      \
  do {                                                                                               \
    if ((n) < LANES) { /* short runs: skip the lane set-up */                                        \
      for (int64_t i_ = 0; i_ < (n); i_++) UPDATE(RESULT, *(const T *)((xp) + i_ * (s)));            \
      break;                                                                                         \
    }                                                                                                \
    ACC lane_[LANES];                                                                                \
    for (int j_ = 0; j_ < LANES; j_++) lane_[j_] = (INIT);                                           \
    if ((s) == (int64_t)sizeof(T)) {                                                                 \
      const T *restrict x_ = (const T *)(xp);                                                        \
      int64_t i_ = 0;                                                                                \
      for (; i_ + LANES <= (n); i_ += LANES)                                                         \
        for (int j_ = 0; j_ < LANES; j_++) UPDATE(lane_[j_], x_[i_ + j_]);                           \
      for (int j_ = 0; i_ + j_ < (n); j_++) UPDATE(lane_[j_], x_[i_ + j_]);                          \
    } else {                                                                                         \
      for (int64_t i_ = 0; i_ < (n); i_++) UPDATE(lane_[i_ % LANES], *(const T *)((xp) + i_ * (s))); \
    }                                                                                                \
    for (int w_ = LANES / 2; w_; w_ /= 2)                                                            \
      for (int j_ = 0; j_ < w_; j_++) FOLD(lane_[j_], lane_[j_ + w_]);                               \
    FOLD(RESULT, lane_[0]);                                                                          \
  } while (0)

/* A kind that keeps one accumulator per output: lane kernel and strip kernel. FIELD is f
 * (double) or i (int64). */
#define DEF_SIMPLE(K, N, T, ACC, FIELD, INIT, UPDATE, FOLD)                                                           \
  static void seg_##K##_##N(red_state *st, const char *x, int64_t n, int64_t s, int64_t pos, double p) {              \
    LANE_LOOP(T, ACC, INIT, UPDATE, FOLD, x, n, s, st->FIELD);                                                        \
  }                                                                                                                   \
  static void strip_##K##_##N(strip_buf *b, const char *xp, int64_t n, int64_t pos, const double *center, double p) { \
    ACC *restrict acc = b->FIELD;                                                                                     \
    const T *restrict x = (const T *)xp;                                                                              \
    for (int64_t k = 0; k < n; k++) UPDATE(acc[k], x[k]);                                                             \
  }

/* Max/min with the position of the first winner (NaN counts as the winner). The lane
 * kernel finds the run's extreme at full vector speed; only when it beats the state is
 * the run searched again for its first position (rare after the first blocks). */
#define DEF_INDEXED(K, N, T, ACC, FIELD, CMP, ISNAN, UPD)                                                             \
  static void seg_##K##_##N(red_state *st, const char *x, int64_t n, int64_t s, int64_t pos, double p) {              \
    ACC best = *(const T *)x;                                                                                         \
    LANE_LOOP(T, ACC, best, UPD, UPD, x, n, s, best);                                                                 \
    if (!(best CMP st->FIELD || (ISNAN(best) && !ISNAN(st->FIELD)))) return;                                          \
    int64_t i = 0;                                                                                                    \
    if (ISNAN(best))                                                                                                  \
      while (!ISNAN(*(const T *)(x + i * s))) i++;                                                                    \
    else                                                                                                              \
      while (*(const T *)(x + i * s) != best) i++;                                                                    \
    st->FIELD = best, st->pos = pos + i;                                                                              \
  }                                                                                                                   \
  static void strip_##K##_##N(strip_buf *b, const char *xp, int64_t n, int64_t pos, const double *center, double p) { \
    ACC *restrict acc = b->FIELD;                                                                                     \
    int64_t *restrict at = b->pos;                                                                                    \
    const T *restrict x = (const T *)xp;                                                                              \
    for (int64_t k = 0; k < n; k++)                                                                                   \
      if (x[k] CMP acc[k] || (ISNAN(x[k]) && !ISNAN(acc[k]))) acc[k] = x[k], at[k] = pos;                             \
  }

/* Kinds for every dtype. */
#define DEF_ALL_KINDS(N, T, ACC, FIELD, ADD, MUL, MAX, MIN, ISNAN) \
  DEF_SIMPLE(sum, N, T, ACC, FIELD, 0, ADD, ADD)                   \
  DEF_SIMPLE(prod, N, T, ACC, FIELD, 1, MUL, MUL)                  \
  DEF_SIMPLE(maxv, N, T, ACC, FIELD, st->FIELD, MAX, MAX)          \
  DEF_SIMPLE(minv, N, T, ACC, FIELD, st->FIELD, MIN, MIN)          \
  DEF_SIMPLE(any, N, T, int64_t, i, 0, UPD_OR, UPD_OR)             \
  DEF_SIMPLE(all, N, T, int64_t, i, 1, UPD_AND, UPD_AND)           \
  DEF_INDEXED(maxi, N, T, ACC, FIELD, >, ISNAN, MAX)               \
  DEF_INDEXED(mini, N, T, ACC, FIELD, <, ISNAN, MIN)

DEF_ALL_KINDS(f32, float, double, f, UPD_ADD, UPD_MUL, UPD_MAX_F, UPD_MIN_F, NAN_F)
DEF_ALL_KINDS(f64, double, double, f, UPD_ADD, UPD_MUL, UPD_MAX_F, UPD_MIN_F, NAN_F)
DEF_ALL_KINDS(i32, int32_t, int64_t, i, UPD_IADD, UPD_IMUL, UPD_MAX_I, UPD_MIN_I, NAN_I)
DEF_ALL_KINDS(i64, int64_t, int64_t, i, UPD_IADD, UPD_IMUL, UPD_MAX_I, UPD_MIN_I, NAN_I)
DEF_ALL_KINDS(u8, uint8_t, int64_t, i, UPD_IADD, UPD_IMUL, UPD_MAX_I, UPD_MIN_I, NAN_I)

/* float32 sums, the hot case: converting every element to double costs more than reading
 * it from memory, so groups of four (x[i], x[i+32], x[i+64], x[i+96]) are first added in
 * float as a two-level tree, then converted and accumulated in double lanes. Each group
 * adds at most two float roundings of its own magnitude, so the error still does not
 * grow with the number of elements. Strided and short runs take the plain kernel. */
static void seg_sum_f32_grouped(red_state *st, const char *xp, int64_t n, int64_t s, int64_t pos, double p) {
  if (s != (int64_t)sizeof(float) || n < 4 * LANES) {
    seg_sum_f32(st, xp, n, s, pos, p);
    return;
  }
  const float *restrict x = (const float *)xp;
  double lane[LANES] = {0};
  int64_t i = 0;
  for (; i + 4 * LANES <= n; i += 4 * LANES)
    for (int j = 0; j < LANES; j++)
      lane[j] += (double)((x[i + j] + x[i + LANES + j]) + (x[i + 2 * LANES + j] + x[i + 3 * LANES + j]));
  for (int j = 0; i + j < n; j++) lane[j % LANES] += x[i + j];
  for (int w = LANES / 2; w; w /= 2)
    for (int j = 0; j < w; j++) lane[j] += lane[j + w];
  st->f += lane[0];
}

/* Float-only kinds: norms (the order p picks the update), squared deviations from the
 * center, and exp(x - center). */
#define DEF_FLOAT_KINDS(N, T)                                                                                          \
  static void seg_norm_##N(red_state *st, const char *x, int64_t n, int64_t s, int64_t pos, double p) {                \
    if (p == 2) LANE_LOOP(T, double, 0, UPD_SQ, UPD_ADD, x, n, s, st->f);                                              \
    else if (p == 1) LANE_LOOP(T, double, 0, UPD_ABS, UPD_ADD, x, n, s, st->f);                                        \
    else if (p == INFINITY) LANE_LOOP(T, double, 0, UPD_MAXABS, UPD_MAX_F, x, n, s, st->f);                            \
    else if (p == -INFINITY) LANE_LOOP(T, double, INFINITY, UPD_MINABS, UPD_MIN_F, x, n, s, st->f);                    \
    else if (p == 0) LANE_LOOP(T, double, 0, UPD_NZ, UPD_ADD, x, n, s, st->f);                                         \
    else LANE_LOOP(T, double, 0, UPD_POW, UPD_ADD, x, n, s, st->f);                                                    \
  }                                                                                                                    \
  static void strip_norm_##N(strip_buf *b, const char *xp, int64_t n, int64_t pos, const double *center, double p) {   \
    double *restrict acc = b->f;                                                                                       \
    const T *restrict x = (const T *)xp;                                                                               \
    if (p == 2)                                                                                                        \
      for (int64_t k = 0; k < n; k++) UPD_SQ(acc[k], x[k]);                                                            \
    else if (p == 1)                                                                                                   \
      for (int64_t k = 0; k < n; k++) UPD_ABS(acc[k], x[k]);                                                           \
    else if (p == INFINITY)                                                                                            \
      for (int64_t k = 0; k < n; k++) UPD_MAXABS(acc[k], x[k]);                                                        \
    else if (p == -INFINITY)                                                                                           \
      for (int64_t k = 0; k < n; k++) UPD_MINABS(acc[k], x[k]);                                                        \
    else if (p == 0)                                                                                                   \
      for (int64_t k = 0; k < n; k++) UPD_NZ(acc[k], x[k]);                                                            \
    else                                                                                                               \
      for (int64_t k = 0; k < n; k++) UPD_POW(acc[k], x[k]);                                                           \
  }                                                                                                                    \
  static void seg_sqdev_##N(red_state *st, const char *x, int64_t n, int64_t s, int64_t pos, double p) {               \
    const double c_ = st->c;                                                                                           \
    LANE_LOOP(T, double, 0, UPD_SQDEV, UPD_ADD, x, n, s, st->f);                                                       \
  }                                                                                                                    \
  static void strip_sqdev_##N(strip_buf *b, const char *xp, int64_t n, int64_t pos, const double *center, double p) {  \
    double *restrict acc = b->f;                                                                                       \
    const T *restrict x = (const T *)xp;                                                                               \
    for (int64_t k = 0; k < n; k++) {                                                                                  \
      const double c_ = center[k];                                                                                     \
      UPD_SQDEV(acc[k], x[k]);                                                                                         \
    }                                                                                                                  \
  }                                                                                                                    \
  static void seg_sumexp_##N(red_state *st, const char *x, int64_t n, int64_t s, int64_t pos, double p) {              \
    const T c_ = (T)st->c;                                                                                             \
    LANE_LOOP(T, double, 0, UPD_EXP_##N, UPD_ADD, x, n, s, st->f);                                                     \
  }                                                                                                                    \
  static void strip_sumexp_##N(strip_buf *b, const char *xp, int64_t n, int64_t pos, const double *center, double p) { \
    double *restrict acc = b->f;                                                                                       \
    const T *restrict x = (const T *)xp;                                                                               \
    for (int64_t k = 0; k < n; k++) {                                                                                  \
      const T c_ = (T)center[k];                                                                                       \
      UPD_EXP_##N(acc[k], x[k]);                                                                                       \
    }                                                                                                                  \
  }

/* exp(x - max) in the input's precision: the difference of two floats near each other
 * is exact, and float32 exp stays vectorisable. */
#define UPD_EXP_f32(a, x) ((a) += EXP_float((x)-c_))
#define UPD_EXP_f64(a, x) ((a) += EXP_double((x)-c_))
DEF_FLOAT_KINDS(f32, float)
DEF_FLOAT_KINDS(f64, double)

#define SEG_SUM_f32 seg_sum_f32_grouped
#define SEG_SUM_f64 seg_sum_f64
#define SEG_SUM_i32 seg_sum_i32
#define SEG_SUM_i64 seg_sum_i64
#define SEG_SUM_u8 seg_sum_u8
#define ROW_ALL(N)                                                                                  \
  {                                                                                                 \
    [RK_SUM] = {SEG_SUM_##N, strip_sum_##N}, [RK_PROD] = {seg_prod_##N, strip_prod_##N},            \
    [RK_MAXV] = {seg_maxv_##N, strip_maxv_##N}, [RK_MINV] = {seg_minv_##N, strip_minv_##N},         \
    [RK_MAXI] = {seg_maxi_##N, strip_maxi_##N}, [RK_MINI] = {seg_mini_##N, strip_mini_##N},         \
    [RK_ANY] = {seg_any_##N, strip_any_##N}, [RK_ALL] = {seg_all_##N, strip_all_##N}, ROW_FLOAT_##N \
  }
#define ROW_FLOAT_f32                                                                        \
  [RK_NORM] = {seg_norm_f32, strip_norm_f32}, [RK_SQDEV] = {seg_sqdev_f32, strip_sqdev_f32}, \
  [RK_SUMEXP] = {seg_sumexp_f32, strip_sumexp_f32},
#define ROW_FLOAT_f64                                                                        \
  [RK_NORM] = {seg_norm_f64, strip_norm_f64}, [RK_SQDEV] = {seg_sqdev_f64, strip_sqdev_f64}, \
  [RK_SUMEXP] = {seg_sumexp_f64, strip_sumexp_f64},
#define ROW_FLOAT_i32
#define ROW_FLOAT_i64
#define ROW_FLOAT_u8

/* bool is stored as bytes 0/1, so the uint8 kernels serve it. */
static const red_kernel kernels[EM_NUM_DTYPES][RK_COUNT] = {
    [EM_FLOAT32] = ROW_ALL(f32), [EM_FLOAT64] = ROW_ALL(f64), [EM_INT32] = ROW_ALL(i32),
    [EM_INT64] = ROW_ALL(i64),   [EM_UINT8] = ROW_ALL(u8),    [EM_BOOL] = ROW_ALL(u8),
};

/* The starting state of a kind (before any element). */
static void kind_init(kind k, double p, double *f, int64_t *i) {
  switch (k) {
    case RK_PROD: *f = 1, *i = 1; break;
    case RK_ALL: *f = 1, *i = 1; break;
    case RK_MAXV:
    case RK_MAXI: *f = -INFINITY, *i = INT64_MIN; break;
    case RK_MINV:
    case RK_MINI: *f = INFINITY, *i = INT64_MAX; break;
    case RK_NORM: *f = p == -INFINITY ? INFINITY : 0, *i = 0; break;
    default: *f = 0, *i = 0; break;
  }
}

/* Folds b (later elements) into a, for blocks of one output. */
static void kind_combine(kind k, int is_float, double p, red_state *a, const red_state *b) {
  switch (k) {
    case RK_PROD:
      if (is_float) a->f *= b->f;
      else UPD_IMUL(a->i, b->i);
      break;
    case RK_MAXV:
      if (is_float) UPD_MAX_F(a->f, b->f);
      else UPD_MAX_I(a->i, b->i);
      break;
    case RK_MINV:
      if (is_float) UPD_MIN_F(a->f, b->f);
      else UPD_MIN_I(a->i, b->i);
      break;
    case RK_MAXI:
      if (is_float ? (b->f > a->f || (NAN_F(b->f) && !NAN_F(a->f))) : b->i > a->i) *a = *b;
      break;
    case RK_MINI:
      if (is_float ? (b->f < a->f || (NAN_F(b->f) && !NAN_F(a->f))) : b->i < a->i) *a = *b;
      break;
    case RK_ANY: a->i |= b->i; break;
    case RK_ALL: a->i &= b->i; break;
    case RK_NORM:
      if (p == INFINITY) UPD_MAX_F(a->f, b->f);
      else if (p == -INFINITY) UPD_MIN_F(a->f, b->f);
      else a->f += b->f;
      break;
    default:
      if (is_float) a->f += b->f;
      else UPD_IADD(a->i, b->i);
      break;
  }
}

/* ---- layout ---- */

typedef struct red_layout {
  int nk, nr; /* kept / reduced dims after simplifying */
  int64_t ksize[EM_MAX_DIMS], kstride[EM_MAX_DIMS]; /* strides in bytes */
  int64_t rsize[EM_MAX_DIMS], rstride[EM_MAX_DIMS];
  int64_t nout, nred;
  int64_t el; /* element size */
  const char *base;
} red_layout;

/* Drops size-1 dims and merges a dim into the next inner one when stepping it equals a
 * full sweep of that one. Returns the new count (at least 1: a lone size-1 dim). */
static int simplify(int n, const int64_t *size, const int64_t *stride, int64_t elsize, int64_t *osize,
                    int64_t *ostride) {
  int m = 0;
  for (int d = 0; d < n; d++) {
    if (size[d] == 1) continue;
    if (m > 0 && ostride[m - 1] == stride[d] * elsize * size[d]) {
      osize[m - 1] *= size[d];
      ostride[m - 1] = stride[d] * elsize;
    } else {
      osize[m] = size[d];
      ostride[m++] = stride[d] * elsize;
    }
  }
  if (m == 0) osize[0] = 1, ostride[0] = elsize, m = 1;
  return m;
}

static void make_layout(red_layout *L, const em_tensor *a, int nreduce) {
  int64_t el = (int64_t)em_dtype_size(a->dtype);
  int nkeep = a->ndim - nreduce;
  L->nk = simplify(nkeep, a->sizes, a->strides, el, L->ksize, L->kstride);
  L->nr = simplify(nreduce, a->sizes + nkeep, a->strides + nkeep, el, L->rsize, L->rstride);
  L->nout = emp_shape_numel(nkeep, a->sizes);
  L->nred = emp_shape_numel(nreduce, a->sizes + nkeep);
  L->el = el;
  L->base = em_tensor_ptr(a);
}

/* Byte offset of the element with flat index `flat` over dims (size, stride). */
static int64_t flat_offset(int n, const int64_t *size, const int64_t *stride, int64_t flat) {
  int64_t off = 0;
  for (int d = n - 1; d >= 0; d--) {
    off += (flat % size[d]) * stride[d];
    flat /= size[d];
  }
  return off;
}

/* ---- what to do with a finished output ---- */

typedef struct red_job {
  kind k;
  const red_kernel *kern;
  int is_float;
  double p; /* norm order */
  const double *center; /* per output, from the first pass (or NULL) */
  double *center_out; /* first pass: write f * center_scale here instead of out */
  double center_scale;
  em_redop op; /* final write: how to turn the state into the value */
  int variance, take_sqrt;
  double correction;
  em_tensor *out, *indices;
  int base;
} red_job;

static void put(em_tensor *t, int64_t j, double f, int64_t i, int use_int) {
  char *p = em_tensor_ptr(t);
  switch (t->dtype) {
    case EM_FLOAT32: ((float *)p)[j] = use_int ? (float)i : (float)f; break;
    case EM_FLOAT64: ((double *)p)[j] = use_int ? (double)i : f; break;
    case EM_INT32: ((int32_t *)p)[j] = (int32_t)i; break;
    case EM_INT64: ((int64_t *)p)[j] = i; break;
    case EM_UINT8: ((uint8_t *)p)[j] = (uint8_t)i; break;
    case EM_BOOL: ((uint8_t *)p)[j] = use_int ? i != 0 : f != 0; break;
    default: break;
  }
}

static void emit(const red_job *job, int64_t j, const red_state *st, int64_t count) {
  if (job->center_out) {
    job->center_out[j] = st->f * job->center_scale;
    return;
  }
  if (job->variance) {
    double v = st->f / fmax(0.0, (double)count - job->correction);
    put(job->out, j, job->take_sqrt ? sqrt(v) : v, 0, 0);
    return;
  }
  int use_int = !job->is_float;
  double f = st->f;
  switch (job->op) {
    case EM_MEAN: f /= (double)count; break;
    case EM_ARGMAX:
    case EM_ARGMIN: put(job->out, j, 0, st->pos + job->base, 1); return;
    case EM_ANY:
    case EM_ALL: put(job->out, j, 0, st->i, 1); return;
    case EM_LOGSUMEXP: f = isfinite(st->c) ? st->c + log(st->f) : st->c; break; /* inf/NaN max: itself */
    case EM_NORM:
      if (job->p == 2) f = sqrt(f);
      else if (job->p != 1 && job->p != 0 && !isinf(job->p)) f = pow(f, 1.0 / job->p);
      break;
    default: break;
  }
  put(job->out, j, f, st->i, use_int);
  if (job->indices) put(job->indices, j, 0, st->pos + job->base, 1);
}

static void init_state(const red_job *job, red_state *st, int64_t j) {
  kind_init(job->k, job->p, &st->f, &st->i);
  st->pos = 0;
  st->c = job->center ? job->center[j] : 0;
}

/* ---- the two walks ---- */

/* Feeds reduced elements [begin, end) of the output at `base` to the lane kernel, one
 * run along the innermost reduced dim at a time. */
static void walk_runs(const red_job *job, const red_layout *L, red_state *st, const char *base, int64_t begin,
                      int64_t end) {
  int nr = L->nr;
  int64_t inner = L->rsize[nr - 1], s = L->rstride[nr - 1];
  for (int64_t pos = begin; pos < end;) {
    int64_t i = pos % inner, n = inner - i;
    if (n > end - pos) n = end - pos;
    const char *x = base + flat_offset(nr - 1, L->rsize, L->rstride, pos / inner) + i * s;
    job->kern->seg(st, x, n, s, pos, job->p);
    pos += n;
  }
}

/* Work items are handed out dynamically, in chunks of about 16K elements: on a shared
 * machine a thread that loses its core leaves its share to the others instead of holding
 * up the whole op. Which thread computes an item never changes its result. */
static int use_threads(int64_t work, int64_t elements) {
  return work > 1 && elements >= EM_PARALLEL_GRAIN && em_get_num_threads() > 1 && !omp_in_parallel();
}

static em_status inner_walk(const red_job *job, const red_layout *L) {
  int64_t nblocks = (L->nred + RED_BLOCK - 1) / RED_BLOCK, work = L->nout * nblocks;
  red_state *partial = NULL;
  if (nblocks > 1 && !(partial = malloc((size_t)work * sizeof *partial)))
    return em_set_error(EM_ERR_MEMORY, "reduce: out of memory for %lld partial results", (long long)work);
  int64_t per_item = L->nred < RED_BLOCK ? L->nred : RED_BLOCK, chunk = 16384 / per_item + 1;
#pragma omp parallel for schedule(dynamic, chunk) \
    num_threads(em_get_num_threads()) if (use_threads(work, L->nout * L->nred))
  for (int64_t w = 0; w < work; w++) {
    int64_t j = w / nblocks, b = w % nblocks;
    const char *base = L->base + flat_offset(L->nk, L->ksize, L->kstride, j);
    int64_t begin = b * RED_BLOCK, end = begin + RED_BLOCK < L->nred ? begin + RED_BLOCK : L->nred;
    red_state st;
    init_state(job, &st, j);
    walk_runs(job, L, &st, base, begin, end);
    if (partial) partial[w] = st;
    else emit(job, j, &st, L->nred);
  }
  if (!partial) return EM_OK;
#pragma omp parallel for schedule(static) num_threads(em_get_num_threads()) if (use_threads(L->nout, work))
  for (int64_t j = 0; j < L->nout; j++) {
    red_state st = partial[j * nblocks];
    for (int64_t b = 1; b < nblocks; b++) kind_combine(job->k, job->is_float, job->p, &st, &partial[j * nblocks + b]);
    emit(job, j, &st, L->nred);
  }
  free(partial);
  return EM_OK;
}

/* The innermost kept dim is contiguous: accumulate each reduced row into a strip of up
 * to STRIP outputs. Each output still sees its elements in reduced order, one thread per
 * strip, so the result does not depend on the thread count either. */
static em_status outer_walk(const red_job *job, const red_layout *L) {
  int64_t width = L->ksize[L->nk - 1], nouter = L->nout / width;
  /* Wide strips read long contiguous pieces of each row; narrower ones when there are
   * too few to keep every thread busy. Each output's result does not depend on it. */
  int64_t threads = em_get_num_threads(), strip = STRIP;
  if (nouter < threads) {
    int64_t per_outer = (threads + nouter - 1) / nouter;
    strip = ((width + per_outer - 1) / per_outer + 15) / 16 * 16;
    strip = strip < 64 ? 64 : strip > STRIP ? STRIP : strip;
  }
  int64_t nstrips = (width + strip - 1) / strip, work = nouter * nstrips;
  int failed = 0;
#pragma omp parallel num_threads(em_get_num_threads()) if (use_threads(work, L->nout * L->nred))
  {
    strip_buf *b = malloc(sizeof *b);
    if (!b) {
#pragma omp atomic write
      failed = 1;
    }
#pragma omp for schedule(dynamic)
    for (int64_t w = 0; w < work; w++) {
      if (!b) continue;
      int64_t o = w / nstrips, c0 = (w % nstrips) * strip, n = width - c0 < strip ? width - c0 : strip;
      int64_t j0 = o * width + c0;
      const char *base = L->base + flat_offset(L->nk - 1, L->ksize, L->kstride, o) + c0 * L->kstride[L->nk - 1];
      double f0;
      int64_t i0;
      kind_init(job->k, job->p, &f0, &i0);
      for (int64_t k = 0; k < n; k++) b->f[k] = f0, b->i[k] = i0, b->pos[k] = 0;
      const double *center = job->center ? job->center + j0 : NULL;
      for (int64_t r = 0; r < L->nred; r++)
        job->kern->strip(b, base + flat_offset(L->nr, L->rsize, L->rstride, r), n, r, center, job->p);
      for (int64_t k = 0; k < n; k++) {
        red_state st = {b->f[k], b->i[k], b->pos[k], center ? center[k] : 0};
        emit(job, j0 + k, &st, L->nred);
      }
    }
    free(b);
  }
  if (failed) return em_set_error(EM_ERR_MEMORY, "reduce: out of memory for a strip buffer");
  return EM_OK;
}

static em_status run(const red_job *job, const red_layout *L) {
  if (L->nout == 0) return EM_OK;
  if (L->nred == 0) { /* nothing to reduce: every output is the kind's starting value */
    for (int64_t j = 0; j < L->nout; j++) {
      red_state st;
      init_state(job, &st, j);
      emit(job, j, &st, 0);
    }
    return EM_OK;
  }
  /* Rows contiguous and wide enough to vectorise across outputs, reduction not
   * contiguous: the outer walk. */
  int outer =
      L->nout > 1 && L->kstride[L->nk - 1] == L->el && L->ksize[L->nk - 1] >= 16 && L->rstride[L->nr - 1] != L->el;
  return outer ? outer_walk(job, L) : inner_walk(job, L);
}

static em_status check_dtype(const char *op, const em_tensor *a, kind k) {
  if ((int)a->dtype < 0 || a->dtype >= EM_NUM_DTYPES || !kernels[a->dtype][RK_SUM].seg)
    return em_set_error(EM_ERR_DTYPE, "%s: dtype %s is not supported on the CPU (convert with to('float32') first)", op,
                        em_dtype_name(a->dtype));
  if (!kernels[a->dtype][k].seg)
    return em_set_error(EM_ERR_DTYPE, "%s: expected a float32 or float64 tensor, got %s", op, em_dtype_name(a->dtype));
  return EM_OK;
}

/* A two-pass op: the first job leaves one double per output that the second reads. */
static em_status run_two_pass(red_job *first, red_job *second, const red_layout *L) {
  double *center = malloc((size_t)(L->nout ? L->nout : 1) * sizeof *center);
  if (!center) return em_set_error(EM_ERR_MEMORY, "reduce: out of memory for %lld centers", (long long)L->nout);
  first->center_out = center;
  second->center = center;
  em_status st = run(first, L);
  if (!st) st = run(second, L);
  free(center);
  return st;
}

em_status cpu_reduce(em_redop op, em_tensor *out, em_tensor *indices, const em_tensor *a, int nreduce, double p,
                     int base) {
  kind k = (kind)core_reduce_kind_of(op, indices != NULL);
  em_status st = check_dtype("reduce", a, k);
  if (st) return st;
  red_layout L;
  make_layout(&L, a, nreduce);
  red_job job = {.k = k,
                 .kern = &kernels[a->dtype][k],
                 .is_float = em_dtype_is_floating(a->dtype),
                 .p = p,
                 .op = op,
                 .out = out,
                 .indices = indices,
                 .base = base,
                 .center_scale = 1};
  if (op != EM_LOGSUMEXP) return run(&job, &L);
  red_job first = job;
  first.k = RK_MAXV;
  first.kern = &kernels[a->dtype][RK_MAXV];
  return run_two_pass(&first, &job, &L);
}

em_status cpu_var(em_tensor *out, const em_tensor *a, int nreduce, double correction, int take_sqrt) {
  em_status st = check_dtype("var", a, RK_SQDEV);
  if (st) return st;
  red_layout L;
  make_layout(&L, a, nreduce);
  red_job mean = {.k = RK_SUM,
                  .kern = &kernels[a->dtype][RK_SUM],
                  .is_float = 1,
                  .op = EM_MEAN,
                  .center_scale = 1.0 / (double)L.nred};
  red_job dev = {.k = RK_SQDEV,
                 .kern = &kernels[a->dtype][RK_SQDEV],
                 .is_float = 1,
                 .variance = 1,
                 .take_sqrt = take_sqrt,
                 .correction = correction,
                 .out = out};
  return run_two_pass(&mean, &dev, &L);
}
