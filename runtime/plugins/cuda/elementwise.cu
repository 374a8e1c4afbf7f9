/* elementwise.cu - the elementwise family's backend entries on the GPU: fill, arange,
 * where, clamp, add_scaled and relu_backward here; binary and binary_scalar in binary.cu,
 * unary in unary.cu, all on the machinery of elementwise.cuh. Semantics are those of
 * cpu/copy.c, cpu/elementwise.c and cpu/nn_loss.c:
 * - fill stores the value converted on the host exactly as the CPU converts it, so the
 *   kernel only moves bytes (any strides: em_eye fills a diagonal view);
 * - arange's element i is start + i * step rounded once, fma(i, step, start) (the
 *   CPU's loop, which gcc contracts into that fma on FMA hardware), then converted;
 * - where moves bytes by element size; clamp fits its bounds to the dtype once (beyond
 *   the dtype's range or NaN: no bound; NaN inputs stay NaN; low > high gives high);
 * - add_scaled is a + alpha b with alpha in the dtype: one fma on floats (as the CPU's
 *   contracted loop), wrap-around on integers, a or (alpha and b) on bool;
 * - relu_backward is y > 0 ? gy : 0. */
#include <math.h>
#include "elementwise.cuh"

namespace {

/* ---- fill ---- */

template <typename T> struct constant {
  T value;
  __device__ __forceinline__ T operator()() const { return value; }
};

/* The bit pattern of value in dtype: cpu/copy.c's encode. */
uint64_t encode(em_dtype dtype, double v) {
  uint64_t bits = 0;
  switch (dtype) {
    case EM_FLOAT32: { float f = (float)v; memcpy(&bits, &f, 4); break; }
    case EM_FLOAT64: memcpy(&bits, &v, 8); break;
    case EM_FLOAT16: bits = em_float_to_half((float)v); break;
    case EM_BFLOAT16: bits = em_float_to_bf16((float)v); break;
    case EM_INT32: { int32_t i = (int32_t)v; memcpy(&bits, &i, 4); break; }
    case EM_INT64: { int64_t i = (int64_t)v; memcpy(&bits, &i, 8); break; }
    case EM_UINT8: bits = (uint8_t)(int64_t)v; break;
    case EM_BOOL: bits = v != 0; break;
    default: break;
  }
  return bits;
}

em_status gpu_fill(em_tensor *t, double value) {
  const uint64_t bits = encode(t->dtype, value);
  switch (em_dtype_size(t->dtype)) {
    case 1: return ew_run<uint8_t>("fill", constant<uint8_t>{(uint8_t)bits}, t);
    case 2: return ew_run<uint16_t>("fill", constant<uint16_t>{(uint16_t)bits}, t);
    case 4: return ew_run<uint32_t>("fill", constant<uint32_t>{(uint32_t)bits}, t);
    case 8: return ew_run<uint64_t>("fill", constant<uint64_t>{bits}, t);
    default: return ew_unsupported("fill", t->dtype);
  }
}

/* ---- arange ---- */

/* A double converted to dtype D as cpu/copy.c's STORE macros do. */
template <int D> __device__ __forceinline__ typename em_ctype<D>::type from_double(double v) {
  if constexpr (D == EM_FLOAT32) return (float)v;
  else if constexpr (D == EM_FLOAT64) return v;
  else if constexpr (D == EM_FLOAT16) return __float2half_rn((float)v);
  else if constexpr (D == EM_BFLOAT16) return __float2bfloat16_rn((float)v);
  else if constexpr (D == EM_INT32) return (int32_t)v;
  else if constexpr (D == EM_INT64) return (int64_t)v;
  else if constexpr (D == EM_UINT8) return (uint8_t)(int64_t)v;
  else return (uint8_t)(v != 0);
}

template <int D>
__global__ void __launch_bounds__(EM_GPU_THREADS)
    arange_kernel(int64_t n, typename em_ctype<D>::type *p, em_geom g, double start, double step) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    p[g.offset(i)] = from_double<D>(fma((double)i, step, start));
}

em_status gpu_arange(em_tensor *t, double start, double step) {
  const int64_t n = em_tensor_numel(t);
  if (n == 0) return EM_OK;
  const int device = t->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter("arange", device, &stream);
  if (st) return st;
  const em_geom g = em_geom_of(t);
  EW_DISPATCH_ALL(t->dtype, {
    arange_kernel<D><<<em_gpu_blocks(n, device), EM_GPU_THREADS, 0, stream>>>(
        n, (typename em_ctype<D>::type *)em_tensor_ptr(t), g, start, step);
    return em_gpu_launch_check("arange");
  })
  return ew_unsupported("arange", t->dtype);
}

/* ---- where ---- */

template <typename T> struct select_op {
  __device__ __forceinline__ T operator()(uint8_t c, T a, T b) const { return c ? a : b; }
};

template <typename T> em_status where_sized(em_tensor *out, const em_tensor *cond, const em_tensor *a,
                                            const em_tensor *b) {
  return ew_run<T>("where", select_op<T>(), out, ew_tensor_operand<uint8_t>(cond), ew_tensor_operand<T>(a),
                   ew_tensor_operand<T>(b));
}

em_status gpu_where(em_tensor *out, const em_tensor *cond, const em_tensor *a, const em_tensor *b) {
  if (cond->dtype != EM_BOOL && cond->dtype != EM_UINT8) return ew_unsupported("where (condition)", cond->dtype);
  switch (em_dtype_size(a->dtype)) {
    case 1: return where_sized<uint8_t>(out, cond, a, b);
    case 2: return where_sized<uint16_t>(out, cond, a, b);
    case 4: return where_sized<uint32_t>(out, cond, a, b);
    case 8: return where_sized<uint64_t>(out, cond, a, b);
    default: return ew_unsupported("where", a->dtype);
  }
}

/* ---- clamp ---- */

template <typename C> struct clamp_op {
  C lo, hi;
  __device__ __forceinline__ C operator()(C x) const {
    const C r = x < lo ? lo : x;
    return r > hi ? hi : r;
  }
};

/* The bounds of cpu/elementwise.c's DEFINE_CLAMP: beyond the dtype's range, or NaN, is no
 * bound. float16/bfloat16 clamp in float. */
template <int D> em_status clamp_typed(em_tensor *out, const em_tensor *a, double low, double high) {
  typedef typename em_ctype<D>::type S;
  typedef ew_c<S> C;
  if constexpr (D == EM_BOOL) {
    return ew_unsupported("clamp", (em_dtype)D);
  } else {
    double lowest, highest;
    if constexpr (ew_is_float_dtype(D)) lowest = -INFINITY, highest = INFINITY;
    else if constexpr (D == EM_INT32) lowest = INT32_MIN, highest = INT32_MAX;
    else if constexpr (D == EM_INT64) lowest = (double)INT64_MIN, highest = (double)INT64_MAX;
    else lowest = 0, highest = UINT8_MAX;
    clamp_op<C> f;
    if constexpr (D == EM_INT64) {
      f.lo = isnan(low) || low <= lowest ? INT64_MIN : (int64_t)low;
      f.hi = isnan(high) || high >= highest ? INT64_MAX : (int64_t)high;
    } else {
      f.lo = isnan(low) || low <= lowest ? (C)lowest : (C)low;
      f.hi = isnan(high) || high >= highest ? (C)highest : (C)high;
    }
    return ew_run<S>("clamp", f, out, ew_tensor_operand<S>(a));
  }
}

em_status gpu_clamp(em_tensor *out, const em_tensor *a, double low, double high) {
  EW_DISPATCH_ALL(a->dtype, return clamp_typed<D>(out, a, low, high))
  return ew_unsupported("clamp", a->dtype);
}

/* ---- add_scaled ---- */

template <int D> struct add_scaled_op {
  typedef typename em_ctype<D>::type S;
  typedef ew_c<S> C;
  C alpha;
  __device__ __forceinline__ C operator()(C x, C y) const {
    if constexpr (D == EM_BOOL) return (C)((x != 0) | ((y != 0) & (alpha != 0)));
    else if constexpr (std::is_same<C, float>::value) return fmaf(alpha, y, x);
    else if constexpr (std::is_same<C, double>::value) return fma(alpha, y, x);
    else return (C)((ew_u<C>)x + (ew_u<C>)alpha * (ew_u<C>)y);
  }
};

template <int D> em_status add_scaled_typed(em_tensor *out, const em_tensor *a, const em_tensor *b, double alpha) {
  typedef add_scaled_op<D> F;
  typedef typename F::S S;
  typedef typename F::C C;
  F f;
  if constexpr (ew_is_float_dtype(D)) f.alpha = (C)alpha;
  else if constexpr (D == EM_BOOL) f.alpha = alpha != 0;
  else f.alpha = (C)(int64_t)alpha; /* the core checked that alpha is an integer the dtype holds */
  return ew_run<S>("add_scaled", f, out, ew_tensor_operand<S>(a), ew_tensor_operand<S>(b));
}

em_status gpu_add_scaled(em_tensor *out, const em_tensor *a, const em_tensor *b, double alpha) {
  EW_DISPATCH_ALL(a->dtype, return add_scaled_typed<D>(out, a, b, alpha))
  return ew_unsupported("add_scaled", a->dtype);
}

/* ---- relu_backward ---- */

template <typename C> struct relu_backward_op {
  __device__ __forceinline__ C operator()(C gy, C y) const { return y > 0 ? gy : (C)0; }
};

em_status gpu_relu_backward(em_tensor *gx, const em_tensor *gy, const em_tensor *y) {
  EW_DISPATCH_ALL(gx->dtype, {
    if constexpr (ew_is_float_dtype(D)) {
      typedef typename em_ctype<D>::type S;
      return ew_run<S>("relu backward", relu_backward_op<ew_c<S>>(), gx, ew_tensor_operand<S>(gy),
                       ew_tensor_operand<S>(y));
    }
  })
  return em_set_error(EM_ERR_DTYPE, "relu backward: expected a floating dtype on cuda, got %s",
                      em_dtype_name(gx->dtype));
}

} // namespace

/* The family's entries of the backend table (table.c; backend.h says what each computes). */
em_status em_gpu_fill(em_tensor *t, double value) { return gpu_fill(t, value); }
em_status em_gpu_arange(em_tensor *t, double start, double step) { return gpu_arange(t, start, step); }
em_status em_gpu_binary(em_binop op, em_tensor *out, const em_tensor *a, const em_tensor *b) {
  return em_gpu_ew_binary(op, out, a, b);
}
em_status em_gpu_binary_scalar(em_binop op, em_tensor *out, const em_tensor *a, double s, int reversed) {
  return em_gpu_ew_binary_scalar(op, out, a, s, reversed);
}
em_status em_gpu_unary(em_unop op, em_tensor *out, const em_tensor *a) { return em_gpu_ew_unary(op, out, a); }
em_status em_gpu_where(em_tensor *out, const em_tensor *cond, const em_tensor *a, const em_tensor *b) {
  return gpu_where(out, cond, a, b);
}
em_status em_gpu_clamp(em_tensor *out, const em_tensor *a, double low, double high) {
  return gpu_clamp(out, a, low, high);
}
em_status em_gpu_add_scaled(em_tensor *out, const em_tensor *a, const em_tensor *b, double alpha) {
  return gpu_add_scaled(out, a, b, alpha);
}
em_status em_gpu_relu_backward(em_tensor *gx, const em_tensor *gy, const em_tensor *y) {
  return gpu_relu_backward(gx, gy, y);
}
