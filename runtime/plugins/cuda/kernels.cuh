/* kernels.cuh - device-side helpers shared by the plugin's .cu files: dtype dispatch,
 * strided addressing of up to EM_MAX_DIMS dims, launch geometry. C++ (CUDA) only. */
#ifndef EMBER_GPU_KERNELS_CUH
#define EMBER_GPU_KERNELS_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include "gpu.h"

/* Element types by em_dtype. float16/bfloat16 compute in float (acc_t). */
template <int D> struct em_ctype;
template <> struct em_ctype<EM_FLOAT32> { typedef float type; typedef float acc; };
template <> struct em_ctype<EM_FLOAT64> { typedef double type; typedef double acc; };
template <> struct em_ctype<EM_FLOAT16> { typedef __half type; typedef float acc; };
template <> struct em_ctype<EM_BFLOAT16> { typedef __nv_bfloat16 type; typedef float acc; };
template <> struct em_ctype<EM_INT32> { typedef int32_t type; typedef int64_t acc; };
template <> struct em_ctype<EM_INT64> { typedef int64_t type; typedef int64_t acc; };
template <> struct em_ctype<EM_UINT8> { typedef uint8_t type; typedef int64_t acc; };
template <> struct em_ctype<EM_BOOL> { typedef uint8_t type; typedef int64_t acc; };

/* Conversions through the compute type; bool stores 0/1. */
template <typename To, typename From> __device__ __forceinline__ To em_cast(From v) { return (To)v; }
template <> __device__ __forceinline__ float em_cast<float, __half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float em_cast<float, __nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ __half em_cast<__half, float>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 em_cast<__nv_bfloat16, float>(float v) { return __float2bfloat16_rn(v); }

/* EM_DISPATCH(dtype, T, body): runs body with T the element type of dtype (every dtype);
 * EM_DISPATCH_FLOAT: float32/float64/float16/bfloat16 only. The default case sets an
 * EM_ERR_DTYPE error naming op and evaluates to it via `st`. */
#define EM_DISPATCH_CASE(D, T, ...) case D: { typedef em_ctype<D>::type T; __VA_ARGS__; } break;
#define EM_DISPATCH(op, dtype, T, ...)                                                       \
  switch (dtype) {                                                                           \
    EM_DISPATCH_CASE(EM_FLOAT32, T, __VA_ARGS__)                                             \
    EM_DISPATCH_CASE(EM_FLOAT64, T, __VA_ARGS__)                                             \
    EM_DISPATCH_CASE(EM_FLOAT16, T, __VA_ARGS__)                                             \
    EM_DISPATCH_CASE(EM_BFLOAT16, T, __VA_ARGS__)                                            \
    EM_DISPATCH_CASE(EM_INT32, T, __VA_ARGS__)                                               \
    EM_DISPATCH_CASE(EM_INT64, T, __VA_ARGS__)                                               \
    EM_DISPATCH_CASE(EM_UINT8, T, __VA_ARGS__)                                               \
    EM_DISPATCH_CASE(EM_BOOL, T, __VA_ARGS__)                                                \
    default: return em_set_error(EM_ERR_DTYPE, "%s: dtype %s is not supported on cuda", (op), \
                                 em_dtype_name((em_dtype)(dtype)));                          \
  }
#define EM_DISPATCH_FLOAT(op, dtype, T, ...)                                                 \
  switch (dtype) {                                                                           \
    EM_DISPATCH_CASE(EM_FLOAT32, T, __VA_ARGS__)                                             \
    EM_DISPATCH_CASE(EM_FLOAT64, T, __VA_ARGS__)                                             \
    EM_DISPATCH_CASE(EM_FLOAT16, T, __VA_ARGS__)                                             \
    EM_DISPATCH_CASE(EM_BFLOAT16, T, __VA_ARGS__)                                            \
    default: return em_set_error(EM_ERR_DTYPE, "%s: expected a floating dtype on cuda, got %s", \
                                 (op), em_dtype_name((em_dtype)(dtype)));                    \
  }

/* Strided addressing: a tensor's geometry passed by value to kernels. Linear index i (row
 * major over sizes) maps to an element offset. Dims of size 1 are dropped and contiguous
 * runs merged on the host (em_geom_make) so that most tensors become 1-d. */
struct em_geom {
  int ndim;
  int64_t sizes[EM_MAX_DIMS];
  int64_t strides[EM_MAX_DIMS];
  __host__ __device__ __forceinline__ int64_t offset(int64_t i) const {
    int64_t off = 0;
    for (int d = ndim - 1; d > 0; d--) {
      int64_t s = sizes[d];
      int64_t q = i / s;
      off += (i - q * s) * strides[d];
      i = q;
    }
    return off + i * (ndim > 0 ? strides[0] : 0);
  }
};

/* The geometry of t (its own strides) in elements, starting at em_tensor_ptr(t). */
static inline em_geom em_geom_of(const em_tensor *t) {
  em_geom g;
  g.ndim = 0;
  for (int d = 0; d < t->ndim; d++) {
    if (t->sizes[d] == 1) continue;
    if (g.ndim > 0 && g.strides[g.ndim - 1] == t->strides[d] * t->sizes[d]) {
      g.sizes[g.ndim - 1] *= t->sizes[d];          /* merges with the previous dim */
      g.strides[g.ndim - 1] = t->strides[d];
      continue;
    }
    g.sizes[g.ndim] = t->sizes[d];
    g.strides[g.ndim] = t->strides[d];
    g.ndim++;
  }
  if (g.ndim == 0) { g.ndim = 1; g.sizes[0] = 1; g.strides[0] = 1; }
  return g;
}
/* Geometries of several tensors of one shape merged together: a dim is merged only
 * when it merges in all of them (keeps the linear index common). */
static inline void em_geom_many(int n, const em_tensor *const *ts, em_geom *out) {
  const em_tensor *t0 = ts[0];
  for (int k = 0; k < n; k++) out[k].ndim = 0;
  for (int d = 0; d < t0->ndim; d++) {
    if (t0->sizes[d] == 1) continue;
    bool merge = out[0].ndim > 0;
    for (int k = 0; k < n && merge; k++)
      merge = out[k].strides[out[k].ndim - 1] == ts[k]->strides[d] * t0->sizes[d];
    for (int k = 0; k < n; k++) {
      em_geom &g = out[k];
      if (merge) {
        g.sizes[g.ndim - 1] *= t0->sizes[d];
        g.strides[g.ndim - 1] = ts[k]->strides[d];
      } else {
        g.sizes[g.ndim] = t0->sizes[d];
        g.strides[g.ndim] = ts[k]->strides[d];
        g.ndim++;
      }
    }
  }
  for (int k = 0; k < n; k++)
    if (out[k].ndim == 0) { out[k].ndim = 1; out[k].sizes[0] = 1; out[k].strides[0] = 1; }
}
static inline bool em_geom_is_contiguous(const em_geom &g) { return g.ndim == 1 && g.strides[0] == 1; }

/* Launch geometry: grid-stride loops over n items with 256-thread blocks, enough blocks to
 * fill the GPU a few times over. */
#define EM_GPU_THREADS 256
static inline unsigned em_gpu_blocks(int64_t n, int device) {
  int64_t want = (n + EM_GPU_THREADS - 1) / EM_GPU_THREADS;
  int64_t cap = (int64_t)em_gpu_sm_count(device) * 32;
  if (want > cap) want = cap;
  return (unsigned)(want > 0 ? want : 1);
}

#endif
