/* elementwise.c - CPU kernels of the binary elementwise ops: binary, binary_scalar,
 * where, clamp and add_scaled. (Unary ops and the vector math under them are in unary.c.)
 *
 * Each op has one generic loop body, instantiated per dtype by macros, and a table
 * [op][dtype] of the resulting inner loops: the dtype and op are dispatched once per call,
 * never per element. Every inner loop has a contiguous fast path, fast paths for one
 * operand broadcast along the inner dim (stride 0: tensor-scalar ops), and a strided
 * general path. The tensor core has already promoted, converted and broadcast the inputs. */
#include <math.h>
#include <stdatomic.h>
#include "core/host_device.h"
#include "cpu_impl.h"

/* The generic bodies also run on unsigned types, where `x < 0` is always false. */
#pragma GCC diagnostic ignored "-Wtype-limits"

/* Shared by every inner loop of one call (and by all threads). */
typedef struct {
  atomic_int error; /* set by integer pow / fmod on a value they cannot take */
  em_loop_fn inner; /* binary_scalar: the tensor-tensor loop it wraps */
  int reversed; /* binary_scalar: the scalar is the left operand */
  double alpha, lo, hi; /* add_scaled; clamp */
  _Alignas(8) char scalar[8]; /* binary_scalar: the scalar in the compute dtype */
} elem_ctx;

enum { ERR_NEG_POW = CORE_INT_ERR_NEG_POW, ERR_ZERO_DIV = CORE_INT_ERR_ZERO_DIV };

static void flag(elem_ctx *c, int err) { atomic_store_explicit(&c->error, err, memory_order_relaxed); }

/* Integer pow and mod as the CUDA kernels compute them (core/host_device.h); an error is
 * flagged for the whole call. */
static inline int64_t ipow(int64_t x, int64_t y, elem_ctx *c) {
  int err = 0;
  int64_t r = core_int_pow(x, y, &err);
  if (err) flag(c, err);
  return r;
}

static inline int64_t imod(int64_t x, int64_t y, elem_ctx *c) {
  int err = 0;
  int64_t r = core_int_mod(x, y, &err);
  if (err) flag(c, err);
  return r;
}

/* ---- the generic two-input loop ----
 * data = {out, a, b}; the body sees `x` (from a), `y` (from b), `scalar_t`, `uscalar_t`
 * (its unsigned twin, for wrap-around integer arithmetic without undefined behaviour)
 * and `c` (the ctx). restrict is safe with exact in-place aliasing (out == a): element i
 * is read before it is written and no other element depends on it. */
#define BINARY_LOOPS(T, OT, EXPR)                                           \
  char *po = data[0];                                                       \
  const char *pa = data[1], *pb = data[2];                                  \
  const int64_t so = strides[0], sa = strides[1], sb = strides[2];          \
  if (so == sizeof(OT) && sa == sizeof(T) && sb == sizeof(T)) {             \
    OT *restrict o = (OT *)po;                                              \
    const T *restrict va = (const T *)pa, *restrict vb = (const T *)pb;     \
    for (int64_t i = 0; i < n; i++) {                                       \
      const T x = va[i], y = vb[i];                                         \
      o[i] = (OT)(EXPR);                                                    \
    }                                                                       \
  } else if (so == sizeof(OT) && sa == sizeof(T) && sb == 0) {              \
    OT *restrict o = (OT *)po;                                              \
    const T *restrict va = (const T *)pa;                                   \
    const T y = *(const T *)pb;                                             \
    for (int64_t i = 0; i < n; i++) {                                       \
      const T x = va[i];                                                    \
      o[i] = (OT)(EXPR);                                                    \
    }                                                                       \
  } else if (so == sizeof(OT) && sa == 0 && sb == sizeof(T)) {              \
    OT *restrict o = (OT *)po;                                              \
    const T *restrict vb = (const T *)pb;                                   \
    const T x = *(const T *)pa;                                             \
    for (int64_t i = 0; i < n; i++) {                                       \
      const T y = vb[i];                                                    \
      o[i] = (OT)(EXPR);                                                    \
    }                                                                       \
  } else {                                                                  \
    for (int64_t i = 0; i < n; i++) {                                       \
      const T x = *(const T *)(pa + i * sa), y = *(const T *)(pb + i * sb); \
      *(OT *)(po + i * so) = (OT)(EXPR);                                    \
    }                                                                       \
  }

/* PRE runs once per call before the loop (e.g. to convert alpha to scalar_t). */
#define DEFINE_BINARY(NAME, SUF, T, UT, OT, PRE, EXPR)                                  \
  static void NAME##_##SUF(char **data, const int64_t *strides, int64_t n, void *ctx) { \
    typedef T scalar_t;                                                                 \
    typedef UT uscalar_t __attribute__((unused));                                       \
    elem_ctx *c = ctx;                                                                  \
    (void)c;                                                                            \
    PRE;                                                                                \
    BINARY_LOOPS(scalar_t, OT, EXPR)                                                    \
  }

/* Type-generic libm calls for the two float types. */
#define FM(fn, x, y) _Generic((x), float : fn##f, double : fn)(x, y)

/* Ops with one expression for every type; floats have uscalar_t == scalar_t. NaN
 * propagates through maximum/minimum (x != x is false for integers and folds away). */
#define GENERIC_OPS(X, SUF, T, UT)                                     \
  X(add, SUF, T, UT, T, , (scalar_t)((uscalar_t)x + (uscalar_t)y))     \
  X(sub, SUF, T, UT, T, , (scalar_t)((uscalar_t)x - (uscalar_t)y))     \
  X(mul, SUF, T, UT, T, , (scalar_t)((uscalar_t)x * (uscalar_t)y))     \
  X(maximum, SUF, T, UT, T, , (x > y || x != x) ? x : y)               \
  X(minimum, SUF, T, UT, T, , (x < y || x != x) ? x : y)               \
  X(eq, SUF, T, UT, uint8_t, , x == y)                                 \
  X(ne, SUF, T, UT, uint8_t, , x != y)                                 \
  X(lt, SUF, T, UT, uint8_t, , x < y)                                  \
  X(le, SUF, T, UT, uint8_t, , x <= y)                                 \
  X(gt, SUF, T, UT, uint8_t, , x > y)                                  \
  X(ge, SUF, T, UT, uint8_t, , x >= y)                                 \
  X(logical_and, SUF, T, UT, uint8_t, , (x != 0) & (y != 0))           \
  X(logical_or, SUF, T, UT, uint8_t, , (x != 0) | (y != 0))            \
  X(logical_xor, SUF, T, UT, uint8_t, , (x != 0) ^ (y != 0))           \
  X(add_scaled, SUF, T, UT, T, const scalar_t al = (scalar_t)c->alpha, \
    (scalar_t)((uscalar_t)x + (uscalar_t)al * (uscalar_t)y))
#define FLOAT_OPS(X, SUF, T, UT)         \
  X(div, SUF, T, UT, T, , x / y)         \
  X(pow, SUF, T, UT, T, , FM(pow, x, y)) \
  X(fmod, SUF, T, UT, T, , FM(fmod, x, y))   \
  X(atan2, SUF, T, UT, T, , FM(atan2, x, y))
#define INT_OPS(X, SUF, T, UT)                                       \
  X(pow, SUF, T, UT, T, , (scalar_t)ipow((int64_t)x, (int64_t)y, c)) \
  X(fmod, SUF, T, UT, T, , (scalar_t)imod((int64_t)x, (int64_t)y, c))

GENERIC_OPS(DEFINE_BINARY, f32, float, float)
GENERIC_OPS(DEFINE_BINARY, f64, double, double)
GENERIC_OPS(DEFINE_BINARY, i32, int32_t, uint32_t)
GENERIC_OPS(DEFINE_BINARY, i64, int64_t, uint64_t)
GENERIC_OPS(DEFINE_BINARY, u8, uint8_t, uint8_t)
FLOAT_OPS(DEFINE_BINARY, f32, float, float)
FLOAT_OPS(DEFINE_BINARY, f64, double, double)
INT_OPS(DEFINE_BINARY, i32, int32_t, uint32_t)
INT_OPS(DEFINE_BINARY, i64, int64_t, uint64_t)
INT_OPS(DEFINE_BINARY, u8, uint8_t, uint8_t)
/* bool: a + alpha * b is a or (alpha and b) */
DEFINE_BINARY(add_scaled, b8, uint8_t, uint8_t, uint8_t, const uint8_t al = c->alpha != 0, (x != 0) | ((y != 0) & al))

/* Rows of the tables. Booleans reuse the uint8 loops where 0/1 behave as booleans:
 * comparisons and logical ops; add and maximum are or, mul and minimum are and (as in
 * PyTorch). DIV never sees integers (the core computes it in floating point). */
#define INT_AND_FLOAT(NAME)                                                                               \
  [EM_FLOAT32] = NAME##_f32, [EM_FLOAT64] = NAME##_f64, [EM_INT32] = NAME##_i32, [EM_INT64] = NAME##_i64, \
  [EM_UINT8] = NAME##_u8
#define ROW(NAME) \
  { INT_AND_FLOAT(NAME), [EM_BOOL] = NAME##_u8 }
#define ROW_NOBOOL(NAME) \
  { INT_AND_FLOAT(NAME) }
#define ROW_BOOL_AS(NAME, BOOL_FN) \
  { INT_AND_FLOAT(NAME), [EM_BOOL] = BOOL_FN }

static const em_loop_fn binary_loops[EM_NUM_BINOPS][EM_NUM_DTYPES] = {
    [EM_ADD] = ROW_BOOL_AS(add, logical_or_u8),
    [EM_SUB] = ROW_NOBOOL(sub),
    [EM_MUL] = ROW_BOOL_AS(mul, logical_and_u8),
    [EM_DIV] = {[EM_FLOAT32] = div_f32, [EM_FLOAT64] = div_f64},
    [EM_POW] = ROW_NOBOOL(pow),
    [EM_MAXIMUM] = ROW_BOOL_AS(maximum, logical_or_u8),
    [EM_MINIMUM] = ROW_BOOL_AS(minimum, logical_and_u8),
    [EM_FMOD] = ROW_NOBOOL(fmod),
    [EM_ATAN2] = {[EM_FLOAT32] = atan2_f32, [EM_FLOAT64] = atan2_f64},
    [EM_EQ] = ROW(eq),
    [EM_NE] = ROW(ne),
    [EM_LT] = ROW(lt),
    [EM_LE] = ROW(le),
    [EM_GT] = ROW(gt),
    [EM_GE] = ROW(ge),
    [EM_LOGICAL_AND] = ROW(logical_and),
    [EM_LOGICAL_OR] = ROW(logical_or),
    [EM_LOGICAL_XOR] = ROW(logical_xor),
};

static const em_loop_fn add_scaled_loops[EM_NUM_DTYPES] = ROW_BOOL_AS(add_scaled, add_scaled_b8);

static const char *const binop_names[EM_NUM_BINOPS] = {
    "add", "sub", "mul", "div", "pow", "maximum",     "minimum",    "fmod",       "atan2", "eq",
    "ne",  "lt",  "le",  "gt",  "ge",  "logical_and", "logical_or", "logical_xor"};

static em_status unsupported(const char *op, em_dtype dtype) {
  return em_set_error(EM_ERR_DTYPE, "%s: not supported for %s tensors on the CPU", op, em_dtype_name(dtype));
}

/* Turns an error flagged by a loop into a status. */
static em_status loop_status(const char *op, em_dtype dtype, elem_ctx *c) {
  switch (atomic_load(&c->error)) {
    case ERR_NEG_POW:
      return em_set_error(EM_ERR_ARGUMENT,
                          "%s: integers to negative integer powers are not allowed (%s tensors; "
                          "convert to float32 first)",
                          op, em_dtype_name(dtype));
    case ERR_ZERO_DIV:
      return em_set_error(EM_ERR_ARGUMENT, "%s: integer division by zero (%s tensors)", op, em_dtype_name(dtype));
    default: return EM_OK;
  }
}

static em_status run3(em_loop_fn fn, elem_ctx *c, em_tensor *out, const em_tensor *a, const em_tensor *b) {
  const em_tensor *ops[3] = {out, a, b};
  em_iter it;
  cpu_iter_init(&it, 3, ops);
  cpu_iter_for_each(&it, fn, c, 0);
  return EM_OK;
}

em_status cpu_binary(em_binop op, em_tensor *out, const em_tensor *a, const em_tensor *b) {
  em_loop_fn fn = binary_loops[op][a->dtype];
  if (!fn) return unsupported(binop_names[op], a->dtype);
  elem_ctx c = {.error = 0};
  run3(fn, &c, out, a, b);
  return loop_status(binop_names[op], a->dtype, &c);
}

/* ---- tensor op scalar: the tensor-tensor loop with the scalar as a stride-0 operand ---- */

static void scalar_loop(char **data, const int64_t *strides, int64_t n, void *vctx) {
  elem_ctx *c = vctx;
  int t = c->reversed ? 2 : 1, s = c->reversed ? 1 : 2; /* positions of tensor and scalar */
  char *d[3];
  int64_t st[3];
  d[0] = data[0], st[0] = strides[0];
  d[t] = data[1], st[t] = strides[1];
  d[s] = c->scalar, st[s] = 0;
  c->inner(d, st, n, c);
}

/* Stores v as a value of dtype (the core has checked that it is representable). */
static void encode_scalar(em_dtype dtype, double v, char *out) {
  switch (dtype) {
    case EM_FLOAT32: *(float *)out = (float)v; break;
    case EM_FLOAT64: *(double *)out = v; break;
    case EM_INT32: *(int32_t *)out = (int32_t)v; break;
    case EM_INT64: *(int64_t *)out = (int64_t)v; break;
    case EM_UINT8: *(uint8_t *)out = (uint8_t)(int64_t)v; break; /* -1 wraps to 255, as in PyTorch */
    case EM_BOOL: *(uint8_t *)out = v != 0; break;
    default: break;
  }
}

em_status cpu_binary_scalar(em_binop op, em_tensor *out, const em_tensor *a, double s, int reversed) {
  em_dtype dt = a->dtype;
  /* Common powers take the cheaper unary kernels, as PyTorch does. */
  if (op == EM_POW && !reversed) {
    if (s == 2.0) return cpu_unary(EM_SQUARE, out, a);
    if (em_dtype_is_floating(dt) && s == 0.5) return cpu_unary(EM_SQRT, out, a);
    if (em_dtype_is_floating(dt) && s == -1.0) return cpu_unary(EM_RECIPROCAL, out, a);
    if (s == 1.0) return cpu_copy(out, a);
  }
  elem_ctx c = {.error = 0, .inner = binary_loops[op][dt], .reversed = reversed};
  if (!c.inner) return unsupported(binop_names[op], dt);
  encode_scalar(dt, s, c.scalar);
  const em_tensor *ops[2] = {out, a};
  em_iter it;
  cpu_iter_init(&it, 2, ops);
  cpu_iter_for_each(&it, scalar_loop, &c, 0);
  return loop_status(binop_names[op], dt, &c);
}

em_status cpu_add_scaled(em_tensor *out, const em_tensor *a, const em_tensor *b, double alpha) {
  em_loop_fn fn = add_scaled_loops[a->dtype];
  if (!fn) return unsupported("add_scaled", a->dtype);
  elem_ctx c = {.error = 0, .alpha = alpha};
  return run3(fn, &c, out, a, b);
}

/* ---- where: a select that only moves bytes, so one loop per element size ---- */

#define DEFINE_WHERE(SUF, T)                                                                                           \
  static void where_##SUF(char **data, const int64_t *strides, int64_t n, void *ctx) {                                 \
    char *po = data[0];                                                                                                \
    const char *pc = data[1], *pa = data[2], *pb = data[3];                                                            \
    const int64_t so = strides[0], sc = strides[1], sa = strides[2], sb = strides[3];                                  \
    if (so == sizeof(T) && sc == 1 && sa == sizeof(T) && sb == sizeof(T)) {                                            \
      T *restrict o = (T *)po;                                                                                         \
      const uint8_t *restrict vc = (const uint8_t *)pc;                                                                \
      const T *restrict va = (const T *)pa, *restrict vb = (const T *)pb;                                              \
      for (int64_t i = 0; i < n; i++) o[i] = vc[i] ? va[i] : vb[i];                                                    \
    } else if (so == sizeof(T) && sc == 1 && sa == sizeof(T) && sb == 0) {                                             \
      T *restrict o = (T *)po;                                                                                         \
      const uint8_t *restrict vc = (const uint8_t *)pc;                                                                \
      const T *restrict va = (const T *)pa, y = *(const T *)pb;                                                        \
      for (int64_t i = 0; i < n; i++) o[i] = vc[i] ? va[i] : y;                                                        \
    } else {                                                                                                           \
      for (int64_t i = 0; i < n; i++)                                                                                  \
        *(T *)(po + i * so) = *(const uint8_t *)(pc + i * sc) ? *(const T *)(pa + i * sa) : *(const T *)(pb + i * sb); \
    }                                                                                                                  \
  }
DEFINE_WHERE(1, uint8_t)
DEFINE_WHERE(2, uint16_t)
DEFINE_WHERE(4, uint32_t)
DEFINE_WHERE(8, uint64_t)

em_status cpu_where(em_tensor *out, const em_tensor *cond, const em_tensor *a, const em_tensor *b) {
  em_loop_fn fn;
  switch (em_dtype_size(a->dtype)) {
    case 1: fn = where_1; break;
    case 2: fn = where_2; break;
    case 4: fn = where_4; break;
    case 8: fn = where_8; break;
    default: return unsupported("where", a->dtype);
  }
  const em_tensor *ops[4] = {out, cond, a, b};
  em_iter it;
  cpu_iter_init(&it, 4, ops);
  cpu_iter_for_each(&it, fn, NULL, 0);
  return EM_OK;
}

/* ---- clamp: bounds arrive as doubles (NaN: none) and are fitted to the dtype once ---- */

#define DEFINE_CLAMP(SUF, T, LOWEST, HIGHEST)                                          \
  static void clamp_##SUF(char **data, const int64_t *strides, int64_t n, void *ctx) { \
    const elem_ctx *c = ctx;                                                           \
    /* Bounds beyond the dtype's range are no bound. A NaN input stays NaN: both */    \
    /* comparisons are false. low > high gives high, as in PyTorch. */                 \
    const T lo = isnan(c->lo) || c->lo <= (double)(LOWEST) ? (LOWEST) : (T)c->lo;      \
    const T hi = isnan(c->hi) || c->hi >= (double)(HIGHEST) ? (HIGHEST) : (T)c->hi;    \
    char *po = data[0];                                                                \
    const char *pa = data[1];                                                          \
    const int64_t so = strides[0], sa = strides[1];                                    \
    if (so == sizeof(T) && sa == sizeof(T)) {                                          \
      T *restrict o = (T *)po;                                                         \
      const T *restrict va = (const T *)pa;                                            \
      for (int64_t i = 0; i < n; i++) {                                                \
        T r = va[i] < lo ? lo : va[i];                                                 \
        o[i] = r > hi ? hi : r;                                                        \
      }                                                                                \
    } else {                                                                           \
      for (int64_t i = 0; i < n; i++) {                                                \
        T x = *(const T *)(pa + i * sa), r = x < lo ? lo : x;                          \
        *(T *)(po + i * so) = r > hi ? hi : r;                                         \
      }                                                                                \
    }                                                                                  \
  }
DEFINE_CLAMP(f32, float, -INFINITY, INFINITY)
DEFINE_CLAMP(f64, double, -INFINITY, INFINITY)
DEFINE_CLAMP(i32, int32_t, INT32_MIN, INT32_MAX)
DEFINE_CLAMP(i64, int64_t, INT64_MIN, INT64_MAX)
DEFINE_CLAMP(u8, uint8_t, 0, UINT8_MAX)

static const em_loop_fn clamp_loops[EM_NUM_DTYPES] = {
    [EM_FLOAT32] = clamp_f32, [EM_FLOAT64] = clamp_f64, [EM_INT32] = clamp_i32,
    [EM_INT64] = clamp_i64,   [EM_UINT8] = clamp_u8,
};

em_status cpu_clamp(em_tensor *out, const em_tensor *a, double low, double high) {
  em_loop_fn fn = clamp_loops[a->dtype];
  if (!fn) return unsupported("clamp", a->dtype);
  elem_ctx c = {.error = 0, .lo = low, .hi = high};
  const em_tensor *ops[2] = {out, a};
  em_iter it;
  cpu_iter_init(&it, 2, ops);
  cpu_iter_for_each(&it, fn, &c, 0);
  return EM_OK;
}
