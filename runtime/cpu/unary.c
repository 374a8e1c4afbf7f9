/* unary.c - CPU kernels of the unary elementwise ops, and the float32 tanh, sigmoid,
 * erf and GELU they use.
 *
 * Why not libm for float32 exp/tanh/sigmoid/silu/erf/gelu: gcc vectorises a loop that
 * calls expf only under -ffast-math (through glibc's libmvec), and ember is not built
 * with it. The branch-free em_vexpf (vmath.h) and the functions below vectorise under
 * plain -O3, which is what lets these ops run at memory speed. float64 and the other
 * functions (log, sqrt, sin, ...) call libm per element; sqrt would vectorise under
 * -fno-math-errno. */
/* GCC targets 256-bit vectors on AVX-512 machines unless told; the transcendental bodies
 * here (exp, tanh, erf, GELU) are arithmetic-bound, and 512-bit vectors ran them about
 * twice as fast */
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
#pragma GCC target("prefer-vector-width=512")
#endif
#include <math.h>
#include "cpu_impl.h"
#include "vmath.h"

#pragma GCC diagnostic ignored "-Wtype-limits" /* generic bodies run on unsigned types too */

/* c ? a : b on the bits. A plain ?: lets gcc sink the costly arm into a branch, and then
 * it will not if-convert the trapping division in it, so the loop stays scalar. */
static inline float select_f(int c, float a, float b) {
  uint32_t m = -(uint32_t)(c != 0), ua, ub, r;
  memcpy(&ua, &a, 4);
  memcpy(&ub, &b, 4);
  r = (ua & m) | (ub & ~m);
  float f;
  memcpy(&f, &r, 4);
  return f;
}

/* tanh for float32: the Cephes odd polynomial below |x| = 0.625, where 1 - 2/(e^2x + 1)
 * would lose bits to cancellation, and that formula above it. Both are computed and one
 * is selected, so the loop stays branch-free. NaN gives NaN. */
static inline float em_tanhf(float x) {
  float ax = fabsf(x), z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  float small = p * z * x + x;
  float large = 1.0f - 2.0f / (em_vexpf(2.0f * ax) + 1.0f);
  large = select_f(x < 0, -large, large);
  return select_f(ax < 0.625f, small, large);
}

/* sigmoid from e = exp(-|x|), which never overflows: 1/(1+e) for x >= 0 and e/(1+e)
 * below, so results stay accurate down to the subnormal range (1/(1+exp(-x)) is 0 as
 * soon as exp(-x) overflows, at x = -88.7). */
static inline float em_sigmoidf(float x) {
  float e = em_vexpf(-fabsf(x));
  return (x >= 0 ? 1.0f : e) / (1.0f + e);
}
static inline double em_sigmoid(double x) {
  double e = exp(-fabs(x));
  return (x >= 0 ? 1.0 : e) / (1.0 + e);
}

/* erf and GELU for float32 without libm: glibc's erff costs ~15 ns an element here and
 * does not vectorise. |x| < 1: erf = x + x P(x^2). |x| >= 1: erfc(a) = e^(-a^2) h(1/a) / a,
 * where h(s) = a erfc(a) e^(a^2) is smooth for s in [1/10.5, 1] (beyond a = 10.5 erfc is 0
 * in float); a^2 is split exactly into hi + lo (fmaf) so that exp sees no rounding error.
 * The coefficients are least-squares fits on Chebyshev nodes (numpy, against math.erf/erfc)
 * rounded to float: erf is within 2 ulp and GELU within 8 ulp (tests/c/test_elementwise.c).
 * GELU takes erfc directly for negative x, so its left tail keeps its relative accuracy
 * where 1 + erf(x) would cancel. */
static inline float erf_small(float x) { /* |x| < 1 */
  float u = x * x, p = 7.898209878e-05f;
  p = p * u - 8.024353883e-04f;
  p = p * u + 5.190053489e-03f;
  p = p * u - 2.685480937e-02f;
  p = p * u + 1.128361225e-01f;
  p = p * u - 3.761262894e-01f;
  p = p * u + 1.283791661e-01f;
  return x + x * p;
}

/* erfc(a) for a in [1, 10.5], where a^2 = k y^2 (k = 1 or 1/2, so scaling is exact);
 * other a give values that the callers discard. */
static inline float erfc_tail(float a, float y, float k) {
  float hi = y * y, lo = fmaf(y, y, -hi);
  hi *= k, lo *= k;
  float s = 1.0f / a, t = s - 5.476190448e-01f, h = -2.899458073e-02f;
  h = h * t + 8.143159747e-02f;
  h = h * t - 7.556048781e-02f;
  h = h * t + 1.539925486e-02f;
  h = h * t + 5.083516985e-02f;
  h = h * t - 9.785358608e-02f;
  h = h * t + 9.924474359e-02f;
  h = h * t - 2.106258273e-02f;
  h = h * t - 1.699360907e-01f;
  h = h * t + 5.027581453e-01f;
  return em_vexpf(-hi) * (1.0f - lo) * h * s; /* e^-(hi+lo) = e^-hi (1 - lo): |lo| < 4e-6 */
}

/* erfc_tail runs for every x and its value is selected where it applies: |x| >= 1, and
 * |x| <= 10.5 (beyond, y*y may overflow and erf is +-1). NaN passes through. */
static inline float em_erff(float x) {
  float a = fabsf(x);
  float big = 1.0f - erfc_tail(a, a, 1.0f);
  big = select_f(a > 10.5f, 1.0f, big);
  big = select_f(x < 0, -big, big);
  return select_f(a < 1.0f, erf_small(x), big);
}

/* x/2 (1 + erf(x/sqrt2)): 1 + erf is 2 - erfc on the right and erfc on the left. */
static inline float em_geluf(float x) {
  float t = x * (float)M_SQRT1_2, a = fabsf(t);
  float tail = select_f(a > 10.5f, 0.0f, erfc_tail(a, fabsf(x), 0.5f));
  float cdf2 = select_f(t < 0, tail, 2.0f - tail);
  cdf2 = select_f(a < 1.0f, 1.0f + erf_small(t), cdf2);
  return 0.5f * x * cdf2;
}
static inline double em_gelu(double x) { return 0.5 * x * (1 + erf(x * M_SQRT1_2)); }

/* GELU's derivative Phi(x) + x phi(x), Phi from the same erfc pieces as em_geluf (so its
 * left tail keeps its relative accuracy); phi's argument is <= 0. */
static inline float em_gelu_gradf(float x) {
  float t = x * (float)M_SQRT1_2, a = fabsf(t);
  float tail = select_f(a > 10.5f, 0.0f, erfc_tail(a, fabsf(x), 0.5f));
  float cdf2 = select_f(t < 0, tail, 2.0f - tail);
  cdf2 = select_f(a < 1.0f, 1.0f + erf_small(t), cdf2);
  return 0.5f * cdf2 + x * 0.3989422804014327f * em_vexpf_nonpos(-0.5f * x * x);
}
static inline double em_gelu_grad(double x) {
  return 0.5 * (1 + erf(x * M_SQRT1_2)) + x * 0.3989422804014327 * exp(-0.5 * x * x);
}

/* GELU and its derivative from one evaluation of the normal CDF (the autograd keeps the
 * derivative, so the backward does not evaluate erf and exp a second time). */
static inline void em_gelu_and_gradf(float x, float *y, float *d) {
  float t = x * (float)M_SQRT1_2, a = fabsf(t);
  float tail = select_f(a > 10.5f, 0.0f, erfc_tail(a, fabsf(x), 0.5f));
  float cdf2 = select_f(t < 0, tail, 2.0f - tail);
  cdf2 = select_f(a < 1.0f, 1.0f + erf_small(t), cdf2);
  *y = 0.5f * x * cdf2;
  *d = 0.5f * cdf2 + x * 0.3989422804014327f * em_vexpf_nonpos(-0.5f * x * x);
}
static inline void em_gelu_and_grad(double x, double *y, double *d) {
  double cdf = 0.5 * (1 + erf(x * M_SQRT1_2));
  *y = x * cdf;
  *d = cdf + x * 0.3989422804014327 * exp(-0.5 * x * x);
}

/* floor and ceil through rint, which gcc vectorises without -fno-math-errno (floorf
 * does not). Exact: rint(x) is an integer within 0.5 of x, and r -/+ 1 is exact. */
#define FLOOR(x) _Generic((x), float : floor_via_rintf, double : floor_via_rint)(x)
#define CEIL(x) _Generic((x), float : ceil_via_rintf, double : ceil_via_rint)(x)
static inline float floor_via_rintf(float x) {
  float r = rintf(x);
  return r > x ? r - 1.0f : r;
}
static inline double floor_via_rint(double x) {
  double r = rint(x);
  return r > x ? r - 1.0 : r;
}
static inline float ceil_via_rintf(float x) {
  float r = rintf(x);
  return r < x ? r + 1.0f : r;
}
static inline double ceil_via_rint(double x) {
  double r = rint(x);
  return r < x ? r + 1.0 : r;
}

/* Type-generic calls: float32 takes the vectorisable versions where there are some. */
#define M1(fn, x) _Generic((x), float : fn##f, double : fn)(x)
#define EXP(x) _Generic((x), float : em_vexpf, double : exp)(x)
#define TANH(x) _Generic((x), float : em_tanhf, double : tanh)(x)
#define SIGMOID(x) _Generic((x), float : em_sigmoidf, double : em_sigmoid)(x)
#define ERF(x) _Generic((x), float : em_erff, double : erf)(x)
#define GELU(x) _Generic((x), float : em_geluf, double : em_gelu)(x)

/* ---- the generic one-input loop: data = {out, a}; the body sees x, scalar_t, uscalar_t ---- */
#define DEFINE_UNARY(NAME, SUF, T, UT, OT, EXPR)                                        \
  static void NAME##_##SUF(char **data, const int64_t *strides, int64_t n, void *ctx) { \
    typedef T scalar_t __attribute__((unused));                                         \
    typedef UT uscalar_t __attribute__((unused));                                       \
    char *po = data[0];                                                                 \
    const char *pa = data[1];                                                           \
    const int64_t so = strides[0], sa = strides[1];                                     \
    if (so == sizeof(OT) && sa == sizeof(T)) {                                          \
      OT *restrict o = (OT *)po;                                                        \
      const T *restrict va = (const T *)pa;                                             \
      for (int64_t i = 0; i < n; i++) {                                                 \
        const T x = va[i];                                                              \
        o[i] = (OT)(EXPR);                                                              \
      }                                                                                 \
    } else {                                                                            \
      for (int64_t i = 0; i < n; i++) {                                                 \
        const T x = *(const T *)(pa + i * sa);                                          \
        *(OT *)(po + i * so) = (OT)(EXPR);                                              \
      }                                                                                 \
    }                                                                                   \
  }

/* Functions of floats (integer inputs were converted to float32 by the core). */
#define FLOAT_FUNCS(X, SUF, T)                      \
  X(exp, SUF, T, T, T, EXP(x))                      \
  X(log, SUF, T, T, T, M1(log, x))                  \
  X(sqrt, SUF, T, T, T, M1(sqrt, x))                \
  X(sin, SUF, T, T, T, M1(sin, x))                  \
  X(cos, SUF, T, T, T, M1(cos, x))                  \
  X(tanh, SUF, T, T, T, TANH(x))                    \
  X(sigmoid, SUF, T, T, T, SIGMOID(x))              \
  X(reciprocal, SUF, T, T, T, (scalar_t)1 / x)      \
  X(rsqrt, SUF, T, T, T, (scalar_t)1 / M1(sqrt, x)) \
  X(log1p, SUF, T, T, T, M1(log1p, x))              \
  X(log2, SUF, T, T, T, M1(log2, x))                \
  X(log10, SUF, T, T, T, M1(log10, x))              \
  X(expm1, SUF, T, T, T, M1(expm1, x))              \
  X(erf, SUF, T, T, T, ERF(x))                      \
  X(gelu, SUF, T, T, T, GELU(x))                    \
  X(silu, SUF, T, T, T, x *SIGMOID(x))              \
  X(abs, SUF, T, T, T, M1(fabs, x))                 \
  X(floor, SUF, T, T, T, FLOOR(x))                  \
  X(ceil, SUF, T, T, T, CEIL(x))                    \
  X(round, SUF, T, T, T, M1(rint, x)) /* half to even in the default rounding mode */
/* Integer versions of the dtype-keeping ops: floor/ceil/round are the identity. */
#define INT_FUNCS(X, SUF, T, UT)                                             \
  X(abs, SUF, T, UT, T, x < 0 ? (scalar_t)((uscalar_t)0 - (uscalar_t)x) : x) \
  X(floor, SUF, T, UT, T, x)                                                 \
  X(ceil, SUF, T, UT, T, x)                                                  \
  X(round, SUF, T, UT, T, x)
/* One expression for every dtype. sign(NaN) is 0 and relu(NaN) is NaN, as in PyTorch. */
#define GENERIC_FUNCS(X, SUF, T, UT)                                \
  X(neg, SUF, T, UT, T, (scalar_t)((uscalar_t)0 - (uscalar_t)x))    \
  X(sign, SUF, T, UT, T, (scalar_t)((x > 0) - (x < 0)))             \
  X(relu, SUF, T, UT, T, x < 0 ? (scalar_t)0 : x)                   \
  X(square, SUF, T, UT, T, (scalar_t)((uscalar_t)x * (uscalar_t)x)) \
  X(logical_not, SUF, T, UT, uint8_t, x == 0)

FLOAT_FUNCS(DEFINE_UNARY, f32, float)
FLOAT_FUNCS(DEFINE_UNARY, f64, double)
INT_FUNCS(DEFINE_UNARY, i32, int32_t, uint32_t)
INT_FUNCS(DEFINE_UNARY, i64, int64_t, uint64_t)
INT_FUNCS(DEFINE_UNARY, u8, uint8_t, uint8_t)
GENERIC_FUNCS(DEFINE_UNARY, f32, float, float)
GENERIC_FUNCS(DEFINE_UNARY, f64, double, double)
GENERIC_FUNCS(DEFINE_UNARY, i32, int32_t, uint32_t)
GENERIC_FUNCS(DEFINE_UNARY, i64, int64_t, uint64_t)
GENERIC_FUNCS(DEFINE_UNARY, u8, uint8_t, uint8_t)

/* Booleans use the uint8 loops: on 0/1 abs, sign, relu, square, floor, ceil and round
 * are the identity. Negating a bool is an error in the core. */
#define FROW(NAME) \
  { [EM_FLOAT32] = NAME##_f32, [EM_FLOAT64] = NAME##_f64 }
#define ROW(NAME)                                                                                           \
  {                                                                                                         \
    [EM_FLOAT32] = NAME##_f32, [EM_FLOAT64] = NAME##_f64, [EM_INT32] = NAME##_i32, [EM_INT64] = NAME##_i64, \
    [EM_UINT8] = NAME##_u8, [EM_BOOL] = NAME##_u8                                                           \
  }

static const em_loop_fn unary_loops[EM_NUM_UNOPS][EM_NUM_DTYPES] = {
    [EM_NEG] = {[EM_FLOAT32] = neg_f32,
                [EM_FLOAT64] = neg_f64,
                [EM_INT32] = neg_i32,
                [EM_INT64] = neg_i64,
                [EM_UINT8] = neg_u8},
    [EM_ABS] = ROW(abs),
    [EM_EXP] = FROW(exp),
    [EM_LOG] = FROW(log),
    [EM_SQRT] = FROW(sqrt),
    [EM_SIN] = FROW(sin),
    [EM_COS] = FROW(cos),
    [EM_TANH] = FROW(tanh),
    [EM_SIGMOID] = FROW(sigmoid),
    [EM_RELU] = ROW(relu),
    [EM_SIGN] = ROW(sign),
    [EM_FLOOR] = ROW(floor),
    [EM_CEIL] = ROW(ceil),
    [EM_ROUND] = ROW(round),
    [EM_RECIPROCAL] = FROW(reciprocal),
    [EM_SQUARE] = ROW(square),
    [EM_RSQRT] = FROW(rsqrt),
    [EM_LOG1P] = FROW(log1p),
    [EM_EXPM1] = FROW(expm1),
    [EM_ERF] = FROW(erf),
    [EM_GELU] = FROW(gelu),
    [EM_SILU] = FROW(silu),
    [EM_LOG2] = FROW(log2),
    [EM_LOG10] = FROW(log10),
    [EM_LOGICAL_NOT] = ROW(logical_not),
};

static const char *const unop_names[EM_NUM_UNOPS] = {"neg",   "abs",   "exp",        "log",    "sqrt",       "sin",
                                                     "cos",   "tanh",  "sigmoid",    "relu",   "sign",       "floor",
                                                     "ceil",  "round", "reciprocal", "square", "rsqrt",      "log1p",
                                                     "expm1", "erf",   "gelu",       "silu",   "log2",       "log10", "logical_not"};

em_status cpu_unary(em_unop op, em_tensor *out, const em_tensor *a) {
  em_loop_fn fn = unary_loops[op][a->dtype];
  if (!fn)
    return em_set_error(EM_ERR_DTYPE, "%s: not supported for %s tensors on the CPU", unop_names[op],
                        em_dtype_name(a->dtype));
  const em_tensor *ops[2] = {out, a};
  em_iter it;
  cpu_iter_init(&it, 2, ops);
  cpu_iter_for_each(&it, fn, NULL, 0);
  return EM_OK;
}

/* ---- GELU's backward, gx = gy (Phi(x) + x phi(x)), in one pass: composed from elementwise
 * ops it is ten passes and as many temporaries. data = {gx, gy, x}; gy may be broadcast ---- */
#define DEFINE_GELU_BACKWARD(T, S_, GRAD)                                                          \
  static void gelu_backward_##S_(char **data, const int64_t *strides, int64_t n, void *ctx) {      \
    (void)ctx;                                                                                     \
    if (strides[0] == sizeof(T) && strides[1] == sizeof(T) && strides[2] == sizeof(T)) {           \
      T *restrict o = (T *)data[0];                                                                \
      const T *restrict g = (const T *)data[1], *restrict x = (const T *)data[2];                  \
      for (int64_t i = 0; i < n; i++) o[i] = g[i] * GRAD(x[i]);                                    \
      return;                                                                                      \
    }                                                                                              \
    for (int64_t i = 0; i < n; i++) {                                                              \
      T xv = *(const T *)(data[2] + i * strides[2]), gv = *(const T *)(data[1] + i * strides[1]); \
      *(T *)(data[0] + i * strides[0]) = gv * GRAD(xv);                                            \
    }                                                                                              \
  }
DEFINE_GELU_BACKWARD(float, f32, em_gelu_gradf)
DEFINE_GELU_BACKWARD(double, f64, em_gelu_grad)

/* ---- GELU with its derivative: data = {y, d, x}, one shape ---- */
#define DEFINE_GELU_WITH_GRAD(T, S_, BOTH)                                                           \
  static void gelu_with_grad_##S_(char **data, const int64_t *strides, int64_t n, void *ctx) {      \
    (void)ctx;                                                                                     \
    if (strides[0] == sizeof(T) && strides[1] == sizeof(T) && strides[2] == sizeof(T)) {           \
      T *restrict y = (T *)data[0], *restrict d = (T *)data[1];                                     \
      const T *restrict x = (const T *)data[2];                                                    \
      for (int64_t i = 0; i < n; i++) BOTH(x[i], &y[i], &d[i]);                                    \
      return;                                                                                      \
    }                                                                                              \
    for (int64_t i = 0; i < n; i++)                                                                \
      BOTH(*(const T *)(data[2] + i * strides[2]), (T *)(data[0] + i * strides[0]),               \
           (T *)(data[1] + i * strides[1]));                                                       \
  }
DEFINE_GELU_WITH_GRAD(float, f32, em_gelu_and_gradf)
DEFINE_GELU_WITH_GRAD(double, f64, em_gelu_and_grad)

em_status cpu_gelu_with_grad(em_tensor *y, em_tensor *d, const em_tensor *x) {
  if (x->dtype != EM_FLOAT32 && x->dtype != EM_FLOAT64)
    return em_set_error(EM_ERR_DTYPE, "gelu: expected float32 or float64, got %s", em_dtype_name(x->dtype));
  const em_tensor *ops[3] = {y, d, x};
  em_iter it;
  cpu_iter_init(&it, 3, ops);
  cpu_iter_for_each(&it, x->dtype == EM_FLOAT32 ? gelu_with_grad_f32 : gelu_with_grad_f64, NULL, 0);
  return EM_OK;
}

em_status cpu_gelu_backward(em_tensor *gx, const em_tensor *gy, const em_tensor *x) {
  if (gx->dtype != EM_FLOAT32 && gx->dtype != EM_FLOAT64)
    return em_set_error(EM_ERR_DTYPE, "gelu backward: expected float32 or float64, got %s", em_dtype_name(gx->dtype));
  const em_tensor *ops[3] = {gx, gy, x};
  em_iter it;
  cpu_iter_init(&it, 3, ops);
  cpu_iter_for_each(&it, gx->dtype == EM_FLOAT32 ? gelu_backward_f32 : gelu_backward_f64, NULL, 0);
  return EM_OK;
}
