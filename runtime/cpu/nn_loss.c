/* nn_loss.c - losses over class indices (cross_entropy fused with its log_softmax, and
 * nll_loss) and ReLU's backward, on the CPU.
 *
 * cross_entropy never stores log-probabilities: the forward keeps one logsumexp per
 * sample, and the backward writes the input gradient in one pass over the logits,
 *   gx_c = g * ((1 - e) w_t (p_c - [c = t]) + (e / C) (W p_c - w_c)),  p_c = exp(x_c - lse),
 * with e the label smoothing, w the class weights (W their sum) and t the target. Input is
 * [N, C, S]; samples are (n, s), classes C apart by S. Samples are shared among threads;
 * reductions add per-sample losses in sample order, so no result depends on the thread
 * count. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include "cpu_impl.h"
#include "vmath.h"

static inline int64_t load_target(const void *t, int is64, int64_t i) {
  return is64 ? ((const int64_t *)t)[i] : ((const int32_t *)t)[i];
}

static int use_threads(int64_t tasks, int64_t work) {
  return tasks > 1 && work >= EM_PARALLEL_GRAIN && em_get_num_threads() > 1 && !omp_in_parallel();
}

typedef struct loss_geom {
  int64_t N, C, S;
  int is64;
  double wsum; /* the sum of the class weights (C without weights) */
} loss_geom;

static loss_geom geometry(const em_tensor *x, const em_tensor *target) {
  loss_geom g = {x->sizes[0], x->sizes[1], 1, target->dtype == EM_INT64, 0};
  for (int d = 2; d < x->ndim; d++) g.S *= x->sizes[d];
  return g;
}

/* Every target is ignore_index or a class in [base, base + C). */
static em_status check_targets(const em_tensor *target, const loss_geom *g, const em_class_loss_params *p) {
  const void *t = em_tensor_ptr(target);
  for (int64_t i = 0; i < g->N * g->S; i++) {
    int64_t v = load_target(t, g->is64, i);
    if (v != p->ignore_index && (v < p->base || v >= p->base + g->C))
      return em_set_error(EM_ERR_INDEX, "%s: target %lld is out of range for %lld classes (expected %d..%lld%s)",
                          p->log_input ? "nll_loss" : "cross_entropy", (long long)v, (long long)g->C, p->base,
                          (long long)(p->base + g->C - 1), p->ignore_index < p->base ? "" : ", or ignore_index");
  }
  return EM_OK;
}

#define EXP_s(v) em_vexpf(v)
#define EXP_d(v) exp(v)

/* clang-format off */
#define DEFINE_LOSS(T, S_)                                                                                      \
  /* log(sum(exp(x_c))) over the C values of a sample, C apart by stride */                                   \
  static double lse_##S_(const T *x, int64_t C, int64_t stride) {                                              \
    T m = -INFINITY;                                                                                           \
    for (int64_t c = 0; c < C; c++) m = x[c * stride] > m ? x[c * stride] : m;                                 \
    if (isinf(m) && m < 0) return -INFINITY;                                                                   \
    double s = 0;                                                                                              \
    if (stride == 1)                                                                                           \
      for (int64_t c = 0; c < C; c++) s += EXP_##S_(x[c] - m);                                                 \
    else                                                                                                       \
      for (int64_t c = 0; c < C; c++) s += EXP_##S_(x[c * stride] - m);                                        \
    return (double)m + log(s);                                                                                 \
  }                                                                                                            \
  static void forward_##S_(double *loss, double *wt, T *lse_out, const T *lse_pre, const T *x,                \
                           const void *target, const T *w, const loss_geom *g, const em_class_loss_params *p) { \
    double e = p->label_smoothing;                                                                             \
    int par = use_threads(g->N, g->N * g->C * g->S);                                                           \
    _Pragma("omp parallel for schedule(static) if(par) num_threads(em_get_num_threads())")                    \
    for (int64_t n = 0; n < g->N; n++)                                                                         \
      for (int64_t s = 0; s < g->S; s++) {                                                                     \
        int64_t i = n * g->S + s, t = load_target(target, g->is64, i);                                         \
        const T *xs = x + n * g->C * g->S + s;                                                                 \
        double l = p->log_input ? 0 : lse_pre ? (double)lse_pre[i] : lse_##S_(xs, g->C, g->S);                 \
        if (lse_out) lse_out[i] = (T)l;                                                                        \
        if (t == p->ignore_index) {                                                                            \
          loss[i] = 0, wt[i] = 0;                                                                              \
          continue;                                                                                            \
        }                                                                                                      \
        t -= p->base;                                                                                          \
        double wt_ = w ? (double)w[t] : 1.0, v = -(1 - e) * wt_ * ((double)xs[t * g->S] - l);                  \
        if (e > 0) { /* the smoothing term: -(e / C) sum_c w_c log p_c */                                      \
          double sm = 0;                                                                                       \
          for (int64_t c = 0; c < g->C; c++) sm += (w ? (double)w[c] : 1.0) * ((double)xs[c * g->S] - l);      \
          v -= e / (double)g->C * sm;                                                                          \
        }                                                                                                      \
        loss[i] = v, wt[i] = wt_;                                                                              \
      }                                                                                                        \
  }                                                                                                            \
  static void backward_##S_(T *gx, const T *gout, int per_sample, double scale, const T *x, const T *lse,      \
                            const void *target, const T *w, const loss_geom *g, const em_class_loss_params *p) { \
    T e = (T)p->label_smoothing, ec = (T)(p->label_smoothing / (double)g->C), W = (T)g->wsum;                  \
    int par = use_threads(g->N, g->N * g->C * g->S);                                                           \
    _Pragma("omp parallel for schedule(static) if(par) num_threads(em_get_num_threads())")                    \
    for (int64_t n = 0; n < g->N; n++)                                                                         \
      for (int64_t s = 0; s < g->S; s++) {                                                                     \
        int64_t i = n * g->S + s, t = load_target(target, g->is64, i), st = g->S;                              \
        const T *xs = x + n * g->C * st + s;                                                                   \
        T *o = gx + n * g->C * st + s;                                                                         \
        if (t == p->ignore_index) {                                                                            \
          for (int64_t c = 0; c < g->C; c++) o[c * st] = 0;                                                    \
          continue;                                                                                            \
        }                                                                                                      \
        t -= p->base;                                                                                          \
        T gs = (T)((double)gout[per_sample ? i : 0] * scale), wt = w ? w[t] : (T)1;                            \
        T a = gs * (1 - e) * wt; /* the class term's factor */                                                 \
        if (p->log_input) { /* d/dx_c of -(1-e) w_t x_t - (e/C) sum w_c x_c */                                 \
          for (int64_t c = 0; c < g->C; c++) o[c * st] = -gs * ec * (w ? w[c] : (T)1);                         \
          o[t * st] -= a;                                                                                      \
          continue;                                                                                            \
        }                                                                                                      \
        T l = lse[i], b = gs * ec; /* the smoothing term's factor */                                           \
        if (st == 1 && !w) {                                                                                   \
          T k = a + b * W;                                                                                     \
          for (int64_t c = 0; c < g->C; c++) o[c] = k * EXP_##S_(xs[c] - l) - b;                               \
        } else {                                                                                               \
          for (int64_t c = 0; c < g->C; c++)                                                                   \
            o[c * st] = (a + b * W) * EXP_##S_(xs[c * st] - l) - b * (w ? w[c] : (T)1);                        \
        }                                                                                                      \
        o[t * st] -= a;                                                                                        \
      }                                                                                                        \
  }
/* clang-format on */

DEFINE_LOSS(float, s)
DEFINE_LOSS(double, d)

/* log(sum(exp(x))) of each row of x [N, C] (float32, classes contiguous), 16 rows at a time
 * so that the loops run across rows in vector lanes: a classifier's C is small (10 for
 * Fashion-MNIST), too short to vectorise along, and one row at a time the sum is a chain of
 * dependent additions (cross_entropy on [128, 10] went from 8.8 to 3.3 us). Same rule as
 * lse_s: the largest value is taken out first, a row of -inf gives -inf. */
static void lse_rows_s(float *out, const float *x, int64_t N, int64_t C) {
  for (int64_t n0 = 0; n0 < N; n0 += 16) {
    const float *xb = x + n0 * C;
    float m[16], s[16];
    if (N - n0 >= 16) {
      for (int r = 0; r < 16; r++) m[r] = -INFINITY, s[r] = 0;
      for (int64_t c = 0; c < C; c++)
        for (int r = 0; r < 16; r++) {
          float v = xb[r * C + c];
          m[r] = v > m[r] ? v : m[r];
        }
      for (int64_t c = 0; c < C; c++)
        for (int r = 0; r < 16; r++) s[r] += em_vexpf(xb[r * C + c] - m[r]);
      for (int r = 0; r < 16; r++) out[n0 + r] = isinf(m[r]) && m[r] < 0 ? -INFINITY : m[r] + logf(s[r]);
    } else {
      for (int64_t r = 0; r < N - n0; r++) out[n0 + r] = (float)lse_s(xb + r * C, C, 1);
    }
  }
}

em_status cpu_class_loss(em_tensor *out, em_tensor *lse, em_tensor *total_weight, const em_tensor *x,
                         const em_tensor *target, const em_tensor *weight, const em_class_loss_params *p) {
  loss_geom g = geometry(x, target);
  em_status st = check_targets(target, &g, p);
  if (st) return st;
  int64_t ns = g.N * g.S;
  double *buf = malloc(sizeof(double) * 2 * (ns ? ns : 1)), *loss = buf, *wt = buf + ns;
  if (!buf) return em_set_error(EM_ERR_MEMORY, "%s: out of memory", p->log_input ? "nll_loss" : "cross_entropy");
  const void *tp = em_tensor_ptr(target);
  if (x->dtype == EM_FLOAT32) {
    /* classes contiguous: the row sums first, 16 rows at a time (into lse when it is kept) */
    float *pre = NULL, *lse_p = lse ? (float *)em_tensor_ptr(lse) : NULL;
    if (g.S == 1 && !p->log_input && g.N > 0) {
      pre = lse_p ? lse_p : malloc(sizeof(float) * g.N);
      if (pre) lse_rows_s(pre, (const float *)em_tensor_ptr(x), g.N, g.C);
    }
    forward_s(loss, wt, lse_p, pre, (const float *)em_tensor_ptr(x), tp,
              weight ? (const float *)em_tensor_ptr(weight) : NULL, &g, p);
    if (pre != lse_p) free(pre);
  } else {
    forward_d(loss, wt, lse ? (double *)em_tensor_ptr(lse) : NULL, NULL, (const double *)em_tensor_ptr(x), tp,
              weight ? (const double *)em_tensor_ptr(weight) : NULL, &g, p);
  }
  double total = 0, wsum = 0;
  for (int64_t i = 0; i < ns; i++) total += loss[i], wsum += wt[i];
  int is32 = x->dtype == EM_FLOAT32;
  void *o = em_tensor_ptr(out), *tw = em_tensor_ptr(total_weight);
  if (is32) *(float *)tw = (float)wsum;
  else *(double *)tw = wsum;
  if (p->reduction == 0) {
    for (int64_t i = 0; i < ns; i++) {
      if (is32) ((float *)o)[i] = (float)loss[i];
      else ((double *)o)[i] = loss[i];
    }
  } else {
    double r = p->reduction == 1 ? total / wsum : total; /* mean over nothing: 0 / 0 = NaN, as PyTorch */
    if (is32) *(float *)o = (float)r;
    else *(double *)o = r;
  }
  free(buf);
  return EM_OK;
}

em_status cpu_class_loss_backward(em_tensor *gx, const em_tensor *gout, const em_tensor *x, const em_tensor *lse,
                                  const em_tensor *total_weight, const em_tensor *target, const em_tensor *weight,
                                  const em_class_loss_params *p) {
  loss_geom g = geometry(x, target);
  int is32 = x->dtype == EM_FLOAT32;
  double scale = 1;
  if (p->reduction == 1) {
    double tw = is32 ? *(const float *)em_tensor_ptr(total_weight) : *(const double *)em_tensor_ptr(total_weight);
    scale = 1.0 / tw;
  }
  g.wsum = (double)g.C;
  if (weight) {
    g.wsum = 0;
    for (int64_t c = 0; c < g.C; c++)
      g.wsum += is32 ? ((const float *)em_tensor_ptr(weight))[c] : ((const double *)em_tensor_ptr(weight))[c];
  }
  const void *tp = em_tensor_ptr(target);
  int per_sample = p->reduction == 0;
  if (is32)
    backward_s((float *)em_tensor_ptr(gx), (const float *)em_tensor_ptr(gout), per_sample, scale,
               (const float *)em_tensor_ptr(x), lse ? (const float *)em_tensor_ptr(lse) : NULL, tp,
               weight ? (const float *)em_tensor_ptr(weight) : NULL, &g, p);
  else
    backward_d((double *)em_tensor_ptr(gx), (const double *)em_tensor_ptr(gout), per_sample, scale,
               (const double *)em_tensor_ptr(x), lse ? (const double *)em_tensor_ptr(lse) : NULL, tp,
               weight ? (const double *)em_tensor_ptr(weight) : NULL, &g, p);
  return EM_OK;
}

/* ---- ReLU backward: gx = y > 0 ? gy : 0, on the strided iterator (gy may be a broadcast
 * view) with a contiguous fast path that vectorises ---- */

#define DEFINE_RELU_BACKWARD(T, S_)                                                               \
  static void relu_backward_##S_(char **data, const int64_t *strides, int64_t n, void *ctx) {     \
    (void)ctx;                                                                                    \
    if (strides[0] == sizeof(T) && strides[1] == sizeof(T) && strides[2] == sizeof(T)) {          \
      T *restrict o = (T *)data[0];                                                               \
      const T *restrict d = (const T *)data[1], *restrict y = (const T *)data[2];                 \
      for (int64_t i = 0; i < n; i++) o[i] = y[i] > 0 ? d[i] : (T)0;                              \
      return;                                                                                     \
    }                                                                                             \
    for (int64_t i = 0; i < n; i++) {                                                             \
      T yv = *(const T *)(data[2] + i * strides[2]), dv = *(const T *)(data[1] + i * strides[1]); \
      *(T *)(data[0] + i * strides[0]) = yv > 0 ? dv : (T)0;                                      \
    }                                                                                             \
  }
DEFINE_RELU_BACKWARD(float, s)
DEFINE_RELU_BACKWARD(double, d)

em_status cpu_relu_backward(em_tensor *gx, const em_tensor *gy, const em_tensor *y) {
  if (gx->dtype != EM_FLOAT32 && gx->dtype != EM_FLOAT64)
    return em_set_error(EM_ERR_DTYPE, "relu backward: expected float32 or float64, got %s", em_dtype_name(gx->dtype));
  const em_tensor *ops[3] = {gx, gy, y};
  em_iter it;
  cpu_iter_init(&it, 3, ops);
  cpu_iter_for_each(&it, gx->dtype == EM_FLOAT32 ? relu_backward_s : relu_backward_d, NULL, 0);
  return EM_OK;
}

/* The columns go to the threads in strips (each a multiple of 16 wide, at most 256); each
 * strip walks every row, writing its piece of gx and adding it into double accumulators.
 * One read of gy and y and one write of gx, where the ReLU backward and the column sum
 * after it read gx again in a second parallel region. */
#define COLSUM_STRIP 256
void cpu_relu_backward_colsum_f32(float *gx, float *gb, const float *gy, const float *y, int64_t rows, int64_t cols) {
  int threads = em_get_num_threads();
  if (rows * cols < EM_PARALLEL_GRAIN || omp_in_parallel()) threads = 1;
  int64_t strip = (cols + threads - 1) / threads;
  strip = (strip + 15) / 16 * 16;
  if (strip > COLSUM_STRIP) strip = COLSUM_STRIP;
  int64_t nstrips = (cols + strip - 1) / strip;
  if (nstrips < threads) threads = (int)nstrips;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t s = 0; s < nstrips; s++) {
    int64_t c0 = s * strip, n = cols - c0 < strip ? cols - c0 : strip;
    double acc[COLSUM_STRIP];
    for (int64_t k = 0; k < n; k++) acc[k] = 0;
    /* the select and the widening add in separate loops, each of which vectorises (in one,
     * GCC kept scalar code with a branch); the adds four rows at a time, in row order (the
     * same roundings as one row at a time), with a quarter of the accumulator traffic */
    int64_t r = 0;
    for (; r < rows; r++) {
      float *restrict o = gx + r * cols + c0;
      const float *restrict d = gy + r * cols + c0, *restrict yv = y + r * cols + c0;
      for (int64_t k = 0; k < n; k++) o[k] = yv[k] > 0 ? d[k] : 0.0f;
      if ((r & 3) != 3) continue;
      const float *restrict o0 = o - 3 * cols, *restrict o1 = o - 2 * cols, *restrict o2 = o - cols;
      for (int64_t k = 0; k < n; k++) acc[k] = (((acc[k] + o0[k]) + o1[k]) + o2[k]) + o[k];
    }
    for (int64_t q = r & ~(int64_t)3; q < rows; q++) { /* the last rows short of four */
      const float *restrict o = gx + q * cols + c0;
      for (int64_t k = 0; k < n; k++) acc[k] += o[k];
    }
    for (int64_t k = 0; k < n; k++) gb[c0 + k] = (float)acc[k];
  }
}

/* ---- count_correct: the rows whose first largest logit (NaN largest, as argmax) is at the
 * target. Scalar on purpose: a row is a few classes, and the whole count is ~1 us. */
#define ROW_ARGMAX(T)                                              \
  do {                                                             \
    const T *restrict row = (const T *)em_tensor_data(x) + i * rs; \
    T best = row[0];                                               \
    for (int64_t k = 1; k < classes; k++) {                        \
      T v = row[k * cs];                                           \
      if (v > best || (v != v && best == best)) best = v, at = k;  \
    }                                                              \
  } while (0)

em_status cpu_count_correct(int64_t *count, const em_tensor *x, const em_tensor *target, int base) {
  int64_t rows = x->sizes[0], classes = x->sizes[1], rs = x->strides[0], cs = x->strides[1];
  int64_t ts = target->strides[0], n = 0;
  const char *tp = em_tensor_data(target);
  int t64 = target->dtype == EM_INT64;
  for (int64_t i = 0; i < rows; i++) {
    int64_t want = t64 ? ((const int64_t *)tp)[i * ts] : ((const int32_t *)tp)[i * ts];
    if (want < base || want - base >= classes)
      return em_set_error(EM_ERR_INDEX,
                          "count_correct: target %lld at position %lld is out of range for %lld classes "
                          "(expected %d..%lld)",
                          (long long)want, (long long)(i + base), (long long)classes, base,
                          (long long)(classes - 1 + base));
    int64_t at = 0;
    if (x->dtype == EM_FLOAT32) ROW_ARGMAX(float);
    else ROW_ARGMAX(double);
    n += at == want - base;
  }
  *count = n;
  return EM_OK;
}
