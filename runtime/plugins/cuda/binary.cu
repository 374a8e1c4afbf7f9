/* binary.cu - binary and binary_scalar on the GPU, with cpu/elementwise.c's semantics:
 * integer add/sub/mul wrap around; maximum/minimum propagate NaN; on bool, add and maximum
 * are or, mul and minimum are and; comparisons and logical ops write bool; integer pow
 * is exact with wrap-around and integer fmod takes the dividend's sign, both refusing
 * (as errors with the CPU's messages) negative exponents and zero divisors, which never
 * trap the GPU. float16/bfloat16 compute in float.
 *
 * One functor binop<OP, D> per (op, dtype) serves both entries: binary_scalar's scalar is
 * an immediate operand on the left or right of the same kernels. */
#include <math.h>
#include "core/host_device.h"
#include "elementwise.cuh"

namespace {

const char *const binop_names[EM_NUM_BINOPS] = {
    "add", "sub", "mul", "div", "pow", "maximum", "minimum", "fmod", "atan2", "eq", "ne", "lt", "le", "gt", "ge",
    "logical_and", "logical_or", "logical_xor"};

/* The CPU's tables: floats take every op, integers all but div (the core divides in
 * floating point), bool the ops that mean something on truth values. */
template <int OP, int D> constexpr bool binop_supported() {
  if (ew_is_float_dtype(D)) return true;
  if (D == EM_BOOL) return OP == EM_ADD || OP == EM_MUL || OP == EM_MAXIMUM || OP == EM_MINIMUM || OP >= EM_EQ;
  return OP != EM_DIV && OP != EM_ATAN2;
}

__device__ __forceinline__ float ew_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double ew_pow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ float ew_fmod(float x, float y) { return fmodf(x, y); }
__device__ __forceinline__ double ew_fmod(double x, double y) { return fmod(x, y); }
__device__ __forceinline__ float ew_atan2(float x, float y) { return atan2f(x, y); }
__device__ __forceinline__ double ew_atan2(double x, double y) { return atan2(x, y); }

template <int OP, int D> struct binop {
  typedef typename em_ctype<D>::type S;
  typedef ew_c<S> C;
  typedef ew_u<C> U;
  typedef typename std::conditional<(OP >= EM_EQ), uint8_t, C>::type R;
  int *err; /* integer pow/fmod: where to flag an operand they refuse; NULL when none can come */

  __device__ __forceinline__ R operator()(C x, C y) const {
    constexpr bool is_bool = D == EM_BOOL, is_float = ew_is_float_dtype(D);
    if constexpr (OP == EM_ADD || (is_bool && OP == EM_MAXIMUM)) {
      if constexpr (is_bool) return (R)((x != 0) | (y != 0));
      else return (R)((U)x + (U)y);
    } else if constexpr (OP == EM_MUL || (is_bool && OP == EM_MINIMUM)) {
      if constexpr (is_bool) return (R)((x != 0) & (y != 0));
      else return (R)((U)x * (U)y);
    } else if constexpr (OP == EM_SUB) {
      return (R)((U)x - (U)y);
    } else if constexpr (OP == EM_DIV) {
      return x / y;
    } else if constexpr (OP == EM_POW) {
      if constexpr (is_float) return ew_pow(x, y);
      else return (R)core_int_pow((int64_t)x, (int64_t)y, err);
    } else if constexpr (OP == EM_FMOD) {
      if constexpr (is_float) return ew_fmod(x, y);
      else return (R)core_int_mod((int64_t)x, (int64_t)y, err);
    } else if constexpr (OP == EM_ATAN2) {
      return ew_atan2(x, y);
    } else if constexpr (OP == EM_MAXIMUM) {
      return (x > y || x != x) ? x : y;
    } else if constexpr (OP == EM_MINIMUM) {
      return (x < y || x != x) ? x : y;
    } else if constexpr (OP == EM_EQ) {
      return x == y;
    } else if constexpr (OP == EM_NE) {
      return x != y;
    } else if constexpr (OP == EM_LT) {
      return x < y;
    } else if constexpr (OP == EM_LE) {
      return x <= y;
    } else if constexpr (OP == EM_GT) {
      return x > y;
    } else if constexpr (OP == EM_GE) {
      return x >= y;
    } else if constexpr (OP == EM_LOGICAL_AND) {
      return (x != 0) & (y != 0);
    } else if constexpr (OP == EM_LOGICAL_OR) {
      return (x != 0) | (y != 0);
    } else {
      static_assert(OP == EM_LOGICAL_XOR, "every em_binop is handled");
      return (x != 0) ^ (y != 0);
    }
  }
};

/* The scalar in the compute type, converted as cpu/elementwise.c's encode_scalar does
 * (the core has checked that it fits); float16/bfloat16 keep it in float. */
template <int D> ew_c<typename em_ctype<D>::type> scalar_value(double s) {
  if constexpr (D == EM_INT32) return (int32_t)s;
  else if constexpr (D == EM_INT64) return (int64_t)s;
  else if constexpr (D == EM_UINT8) return (uint8_t)(int64_t)s; /* -1 wraps to 255 */
  else if constexpr (D == EM_BOOL) return (uint8_t)(s != 0);
  else return (ew_c<typename em_ctype<D>::type>)s;
}

em_status flag_error(const char *name, em_dtype dtype, int code) {
  if (code == EW_ERR_NEG_POW)
    return em_set_error(EM_ERR_ARGUMENT, "%s: integers to negative integer powers are not allowed (%s tensors; "
                        "convert to float32 first)", name, em_dtype_name(dtype));
  return em_set_error(EM_ERR_ARGUMENT, "%s: integer division by zero (%s tensors)", name, em_dtype_name(dtype));
}

/* scalar == NULL: out = a op b. Otherwise out = a op s, or s op a when reversed. */
template <int OP, int D>
em_status binary_typed(em_tensor *out, const em_tensor *a, const em_tensor *b, const double *scalar, int reversed) {
  const char *name = binop_names[OP];
  if constexpr (!binop_supported<OP, D>()) {
    return ew_unsupported(name, (em_dtype)D);
  } else {
    typedef binop<OP, D> F;
    typedef typename F::S S;
    typedef typename std::conditional<(OP >= EM_EQ), uint8_t, S>::type O;
    if (em_tensor_numel(out) == 0) return EM_OK;
    /* The core refuses a negative exponent or zero divisor given as the right-hand
     * scalar; tensors and left-hand scalars are checked on the device. */
    constexpr bool checked = !ew_is_float_dtype(D) && (OP == EM_POW || OP == EM_FMOD);
    const bool use_flag = checked && (!scalar || reversed);
    F f;
    f.err = NULL;
    ew_flag fl;
    em_status st;
    if (use_flag) {
      if ((st = ew_flag_begin(name, out, &fl))) return st;
      f.err = fl.dev;
    }
    if (!scalar) st = ew_run<O>(name, f, out, ew_tensor_operand<S>(a), ew_tensor_operand<S>(b));
    else if (!reversed) st = ew_run<O>(name, f, out, ew_tensor_operand<S>(a), ew_immediate<S>(scalar_value<D>(*scalar)));
    else st = ew_run<O>(name, f, out, ew_immediate<S>(scalar_value<D>(*scalar)), ew_tensor_operand<S>(a));
    if (use_flag) {
      int code = 0;
      em_status fst = ew_flag_end(name, &fl, &code);
      if (!st) st = fst;
      if (!st && code) st = flag_error(name, (em_dtype)D, code);
    }
    return st;
  }
}

#define BINOP_CASE(OP) \
  case OP: EW_DISPATCH_ALL(dtype, return binary_typed<OP, D>(out, a, b, scalar, reversed)) break;

em_status binary_dispatch(em_binop op, em_tensor *out, const em_tensor *a, const em_tensor *b, const double *scalar,
                          int reversed) {
  const em_dtype dtype = a->dtype;
  switch (op) {
    BINOP_CASE(EM_ADD)
    BINOP_CASE(EM_SUB)
    BINOP_CASE(EM_MUL)
    BINOP_CASE(EM_DIV)
    BINOP_CASE(EM_POW)
    BINOP_CASE(EM_MAXIMUM)
    BINOP_CASE(EM_MINIMUM)
    BINOP_CASE(EM_FMOD)
    BINOP_CASE(EM_ATAN2)
    BINOP_CASE(EM_EQ)
    BINOP_CASE(EM_NE)
    BINOP_CASE(EM_LT)
    BINOP_CASE(EM_LE)
    BINOP_CASE(EM_GT)
    BINOP_CASE(EM_GE)
    BINOP_CASE(EM_LOGICAL_AND)
    BINOP_CASE(EM_LOGICAL_OR)
    BINOP_CASE(EM_LOGICAL_XOR)
    default: return em_set_error(EM_ERR_ARGUMENT, "binary: unknown op %d", (int)op);
  }
  return ew_unsupported(binop_names[op], dtype);
}

} // namespace

em_status em_gpu_ew_binary(em_binop op, em_tensor *out, const em_tensor *a, const em_tensor *b) {
  return binary_dispatch(op, out, a, b, NULL, 0);
}

em_status em_gpu_ew_binary_scalar(em_binop op, em_tensor *out, const em_tensor *a, double s, int reversed) {
  /* The CPU's shortcuts for common powers, kept so that results agree to the bit
   * (sqrt(-0) is -0 where pow(-0, 0.5) is +0). */
  if (op == EM_POW && !reversed) {
    const int floating = em_dtype_is_floating(a->dtype);
    if (s == 2.0) return em_gpu_ew_unary(EM_SQUARE, out, a);
    if (floating && s == 0.5) return em_gpu_ew_unary(EM_SQRT, out, a);
    if (floating && s == -1.0) return em_gpu_ew_unary(EM_RECIPROCAL, out, a);
    if (s == 1.0) return em_gpu_ew_copy_same("pow", out, a);
  }
  return binary_dispatch(op, out, a, NULL, &s, reversed);
}
