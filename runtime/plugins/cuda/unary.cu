/* unary.cu - the unary ops on the GPU with cpu/unary.c's definitions:
 * - functions of reals on floats only (the core converts integers to float32): exp, log,
 *   sqrt, sin, cos, tanh, log1p, log2, log10, expm1, erf from CUDA's libm; sigmoid as the CPU writes it
 *   (e = exp(-|x|); 1/(1+e) or e/(1+e), accurate in both tails); silu = x sigmoid(x);
 *   gelu in its erf form, x Phi(x), for float32 through normcdff (accurate in the left
 *   tail, as the CPU's erfc-based float32 GELU), for float64 the CPU's
 *   x/2 (1 + erf(x/sqrt2)) as written; reciprocal and rsqrt as IEEE 1/x and 1/sqrt(x)
 *   (two roundings, as the CPU), sqrt IEEE: these three match the CPU to the bit;
 * - floor, ceil, round (half to even: rint), abs, neg, sign, relu, square on every dtype;
 *   on integers floor/ceil/round are the identity and abs/neg/square wrap around; on bool
 *   all of these but neg are the identity (neg is refused there by the core and here);
 * - neg is 0 - x as on the CPU (so -(+0) is +0); sign(NaN) is 0, relu(NaN) is NaN;
 *   logical_not writes bool.
 * float16/bfloat16 compute in float. The transcendental functions agree with the CPU to
 * within a few ulp, not to the bit (the CPU has its own float32 exp/tanh/erf/GELU). */
#include <math.h>
#include "elementwise.cuh"

namespace {

const char *const unop_names[EM_NUM_UNOPS] = {
    "neg", "abs", "exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "relu", "sign", "floor",
    "ceil", "round", "reciprocal", "square", "rsqrt", "log1p", "expm1", "erf", "gelu", "silu", "log2", "log10",
    "logical_not"};

constexpr bool is_real_function(int op) {
  return op == EM_EXP || op == EM_LOG || op == EM_SQRT || op == EM_SIN || op == EM_COS || op == EM_TANH ||
         op == EM_SIGMOID || op == EM_RECIPROCAL || op == EM_RSQRT || op == EM_LOG1P || op == EM_EXPM1 ||
         op == EM_ERF || op == EM_GELU || op == EM_SILU || op == EM_LOG2 || op == EM_LOG10;
}

template <int OP, int D> constexpr bool unop_supported() {
  if (is_real_function(OP)) return ew_is_float_dtype(D);
  if (OP == EM_NEG) return D != EM_BOOL;
  return true;
}

/* Float and double versions of the real functions. */
__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }
__device__ __forceinline__ float m_log(float x) { return logf(x); }
__device__ __forceinline__ double m_log(double x) { return log(x); }
__device__ __forceinline__ float m_sqrt(float x) { return __fsqrt_rn(x); }
__device__ __forceinline__ double m_sqrt(double x) { return __dsqrt_rn(x); }
__device__ __forceinline__ float m_recip(float x) { return __frcp_rn(x); }
__device__ __forceinline__ double m_recip(double x) { return __drcp_rn(x); }
__device__ __forceinline__ float m_sin(float x) { return sinf(x); }
__device__ __forceinline__ double m_sin(double x) { return sin(x); }
__device__ __forceinline__ float m_cos(float x) { return cosf(x); }
__device__ __forceinline__ double m_cos(double x) { return cos(x); }
__device__ __forceinline__ float m_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double m_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float m_log1p(float x) { return log1pf(x); }
__device__ __forceinline__ double m_log1p(double x) { return log1p(x); }
__device__ __forceinline__ float m_expm1(float x) { return expm1f(x); }
__device__ __forceinline__ double m_expm1(double x) { return expm1(x); }
__device__ __forceinline__ float m_erf(float x) { return erff(x); }
__device__ __forceinline__ float m_log2(float x) { return log2f(x); }
__device__ __forceinline__ double m_log2(double x) { return log2(x); }
__device__ __forceinline__ float m_log10(float x) { return log10f(x); }
__device__ __forceinline__ double m_log10(double x) { return log10(x); }
__device__ __forceinline__ double m_erf(double x) { return erf(x); }
__device__ __forceinline__ float m_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double m_abs(double x) { return fabs(x); }
__device__ __forceinline__ float m_floor(float x) { return floorf(x); }
__device__ __forceinline__ double m_floor(double x) { return floor(x); }
__device__ __forceinline__ float m_ceil(float x) { return ceilf(x); }
__device__ __forceinline__ double m_ceil(double x) { return ceil(x); }
__device__ __forceinline__ float m_rint(float x) { return rintf(x); }
__device__ __forceinline__ double m_rint(double x) { return rint(x); }

template <typename C> __device__ __forceinline__ C m_sigmoid(C x) {
  const C e = m_exp(-m_abs(x));
  return (x >= 0 ? (C)1 : e) / ((C)1 + e);
}
__device__ __forceinline__ float m_gelu(float x) { return x * normcdff(x); }
__device__ __forceinline__ double m_gelu(double x) { return 0.5 * x * (1 + erf(x * M_SQRT1_2)); }

template <int OP, int D> struct unop {
  typedef typename em_ctype<D>::type S;
  typedef ew_c<S> C;
  typedef ew_u<C> U;
  typedef typename std::conditional<OP == EM_LOGICAL_NOT, uint8_t, C>::type R;

  __device__ __forceinline__ R operator()(C x) const {
    constexpr bool is_float = ew_is_float_dtype(D);
    if constexpr (OP == EM_EXP) return m_exp(x);
    else if constexpr (OP == EM_LOG) return m_log(x);
    else if constexpr (OP == EM_SQRT) return m_sqrt(x);
    else if constexpr (OP == EM_SIN) return m_sin(x);
    else if constexpr (OP == EM_COS) return m_cos(x);
    else if constexpr (OP == EM_TANH) return m_tanh(x);
    else if constexpr (OP == EM_SIGMOID) return m_sigmoid(x);
    else if constexpr (OP == EM_RECIPROCAL) return m_recip(x);
    else if constexpr (OP == EM_RSQRT) return m_recip(m_sqrt(x));
    else if constexpr (OP == EM_LOG1P) return m_log1p(x);
    else if constexpr (OP == EM_EXPM1) return m_expm1(x);
    else if constexpr (OP == EM_ERF) return m_erf(x);
    else if constexpr (OP == EM_LOG2) return m_log2(x);
    else if constexpr (OP == EM_LOG10) return m_log10(x);
    else if constexpr (OP == EM_GELU) return m_gelu(x);
    else if constexpr (OP == EM_SILU) return x * m_sigmoid(x);
    else if constexpr (OP == EM_ABS) {
      if constexpr (is_float) return m_abs(x);
      else if constexpr (std::is_signed<C>::value) return x < 0 ? (C)((U)0 - (U)x) : x;
      else return x;
    } else if constexpr (OP == EM_FLOOR) {
      if constexpr (is_float) return m_floor(x);
      else return x;
    } else if constexpr (OP == EM_CEIL) {
      if constexpr (is_float) return m_ceil(x);
      else return x;
    } else if constexpr (OP == EM_ROUND) {
      if constexpr (is_float) return m_rint(x);
      else return x;
    } else if constexpr (OP == EM_NEG) return (C)((U)0 - (U)x);
    else if constexpr (OP == EM_SIGN) {
      if constexpr (std::is_signed<C>::value || is_float) return (C)((x > 0) - (x < 0));
      else return (C)(x > 0);
    }
    else if constexpr (OP == EM_RELU) {
      if constexpr (std::is_signed<C>::value || is_float) return x < 0 ? (C)0 : x;
      else return x;
    } else if constexpr (OP == EM_SQUARE) return (C)((U)x * (U)x);
    else {
      static_assert(OP == EM_LOGICAL_NOT, "every em_unop is handled");
      return x == 0;
    }
  }
};

template <int OP, int D> em_status unary_typed(em_tensor *out, const em_tensor *a) {
  const char *name = unop_names[OP];
  if constexpr (!unop_supported<OP, D>()) {
    return ew_unsupported(name, (em_dtype)D);
  } else {
    typedef unop<OP, D> F;
    typedef typename F::S S;
    typedef typename std::conditional<OP == EM_LOGICAL_NOT, uint8_t, S>::type O;
    return ew_run<O>(name, F(), out, ew_tensor_operand<S>(a));
  }
}

#define UNOP_CASE(OP) \
  case OP: EW_DISPATCH_ALL(dtype, return unary_typed<OP, D>(out, a)) break;

/* Bytes as they are: pow(x, 1), which the CPU answers with a copy. */
template <typename T> struct identity {
  __device__ __forceinline__ T operator()(T x) const { return x; }
};

} // namespace

em_status em_gpu_ew_unary(em_unop op, em_tensor *out, const em_tensor *a) {
  const em_dtype dtype = a->dtype;
  switch (op) {
    UNOP_CASE(EM_NEG)
    UNOP_CASE(EM_ABS)
    UNOP_CASE(EM_EXP)
    UNOP_CASE(EM_LOG)
    UNOP_CASE(EM_SQRT)
    UNOP_CASE(EM_SIN)
    UNOP_CASE(EM_COS)
    UNOP_CASE(EM_TANH)
    UNOP_CASE(EM_SIGMOID)
    UNOP_CASE(EM_RELU)
    UNOP_CASE(EM_SIGN)
    UNOP_CASE(EM_FLOOR)
    UNOP_CASE(EM_CEIL)
    UNOP_CASE(EM_ROUND)
    UNOP_CASE(EM_RECIPROCAL)
    UNOP_CASE(EM_SQUARE)
    UNOP_CASE(EM_RSQRT)
    UNOP_CASE(EM_LOG1P)
    UNOP_CASE(EM_EXPM1)
    UNOP_CASE(EM_ERF)
    UNOP_CASE(EM_GELU)
    UNOP_CASE(EM_SILU)
    UNOP_CASE(EM_LOG2)
    UNOP_CASE(EM_LOG10)
    UNOP_CASE(EM_LOGICAL_NOT)
    default: return em_set_error(EM_ERR_ARGUMENT, "unary: unknown op %d", (int)op);
  }
  return ew_unsupported(unop_names[op], dtype);
}

/* out = a for one dtype, by element size. */
em_status em_gpu_ew_copy_same(const char *op, em_tensor *out, const em_tensor *a) {
  switch (em_dtype_size(a->dtype)) {
    case 1: return ew_run<uint8_t>(op, identity<uint8_t>(), out, ew_tensor_operand<uint8_t>(a));
    case 2: return ew_run<uint16_t>(op, identity<uint16_t>(), out, ew_tensor_operand<uint16_t>(a));
    case 4: return ew_run<uint32_t>(op, identity<uint32_t>(), out, ew_tensor_operand<uint32_t>(a));
    case 8: return ew_run<uint64_t>(op, identity<uint64_t>(), out, ew_tensor_operand<uint64_t>(a));
    default: return ew_unsupported(op, a->dtype);
  }
}
