/* reduce_common.cuh - what the reduction, scan, softmax, sort and indexing files of the CUDA
 * backend share: element values in their compute types, NaN tests, storing a finished value
 * in any dtype, geometries from merged dims, the fixed-order combining tree of a block's
 * lanes, and temporary device memory released at the end of a scope. C++ (CUDA) only. */
#ifndef EMBER_GPU_REDUCE_COMMON_CUH
#define EMBER_GPU_REDUCE_COMMON_CUH

#include <math.h>
#include <string.h>
#include <type_traits>
#include "kernels.cuh"
#include "reduce_plan.h"

/* ---- values: half types compute in float, integers in int64, float and double as is;
 * wide is the accumulator of sums (double for float32, as the CPU's) */
template <typename T> struct em_red_types;
template <> struct em_red_types<float> { typedef float val; typedef double wide; static const bool is_float = true; };
template <> struct em_red_types<double> { typedef double val; typedef double wide; static const bool is_float = true; };
template <> struct em_red_types<__half> { typedef float val; typedef float wide; static const bool is_float = true; };
template <> struct em_red_types<__nv_bfloat16> { typedef float val; typedef float wide; static const bool is_float = true; };
template <> struct em_red_types<int32_t> { typedef int64_t val; typedef int64_t wide; static const bool is_float = false; };
template <> struct em_red_types<int64_t> { typedef int64_t val; typedef int64_t wide; static const bool is_float = false; };
template <> struct em_red_types<uint8_t> { typedef int64_t val; typedef int64_t wide; static const bool is_float = false; };

__device__ __forceinline__ float em_val(__half x) { return __half2float(x); }
__device__ __forceinline__ float em_val(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float em_val(float x) { return x; }
__device__ __forceinline__ double em_val(double x) { return x; }
__device__ __forceinline__ int64_t em_val(int32_t x) { return x; }
__device__ __forceinline__ int64_t em_val(int64_t x) { return x; }
__device__ __forceinline__ int64_t em_val(uint8_t x) { return x; }

__device__ __forceinline__ bool em_isnan(float x) { return x != x; }
__device__ __forceinline__ bool em_isnan(double x) { return x != x; }
__device__ __forceinline__ bool em_isnan(int64_t) { return false; }

__device__ __forceinline__ float em_exp(float x) { return expf(x); }
__device__ __forceinline__ double em_exp(double x) { return exp(x); }

/* Integer sums and products wrap around (as the CPU's, without signed overflow). */
__device__ __forceinline__ int64_t em_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
__device__ __forceinline__ int64_t em_mul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }
__device__ __forceinline__ double em_add(double a, double b) { return a + b; }
__device__ __forceinline__ double em_mul(double a, double b) { return a * b; }
__device__ __forceinline__ float em_add(float a, float b) { return a + b; }
__device__ __forceinline__ float em_mul(float a, float b) { return a * b; }

/* A compute value (float, double, int64) stored as element type O, rounded once. */
template <typename O, typename A> struct em_narrow_t {
  __device__ __forceinline__ static O go(A v) { return (O)v; }
};
template <typename A> struct em_narrow_t<__half, A> {
  __device__ __forceinline__ static __half go(A v) { return __double2half((double)v); }
};
template <typename A> struct em_narrow_t<__nv_bfloat16, A> {
  __device__ __forceinline__ static __nv_bfloat16 go(A v) { return __double2bfloat16((double)v); }
};
template <typename O, typename A> __device__ __forceinline__ O em_narrow(A v) { return em_narrow_t<O, A>::go(v); }

/* out[j] = a finished result (f, or i when use_int), converted to dtype as the CPU's put(). */
__device__ __forceinline__ void em_store_result(void *out, int dtype, int64_t j, double f, int64_t i, bool use_int) {
  switch (dtype) {
    case EM_FLOAT32: ((float *)out)[j] = use_int ? (float)i : (float)f; break;
    case EM_FLOAT64: ((double *)out)[j] = use_int ? (double)i : f; break;
    case EM_FLOAT16: ((__half *)out)[j] = __float2half_rn(use_int ? (float)i : (float)f); break;
    case EM_BFLOAT16: ((__nv_bfloat16 *)out)[j] = __float2bfloat16_rn(use_int ? (float)i : (float)f); break;
    case EM_INT32: ((int32_t *)out)[j] = (int32_t)i; break;
    case EM_INT64: ((int64_t *)out)[j] = i; break;
    case EM_UINT8: ((uint8_t *)out)[j] = (uint8_t)i; break;
    case EM_BOOL: ((uint8_t *)out)[j] = use_int ? i != 0 : f != 0; break;
    default: break;
  }
}

/* A fill value in dtype's bits, low bytes first (cpu/index.c's encode_value). */
static inline uint64_t em_fill_bits(em_dtype dtype, double v) {
  uint64_t bits = 0;
  switch (dtype) {
    case EM_FLOAT32: { float f = (float)v; memcpy(&bits, &f, 4); } break;
    case EM_FLOAT64: memcpy(&bits, &v, 8); break;
    case EM_FLOAT16: { __half h = __float2half((float)v); memcpy(&bits, &h, 2); } break;
    case EM_BFLOAT16: { __nv_bfloat16 h = __float2bfloat16((float)v); memcpy(&bits, &h, 2); } break;
    case EM_INT32: bits = (uint32_t)(int32_t)v; break;
    case EM_INT64: bits = (uint64_t)(int64_t)v; break;
    case EM_UINT8: bits = (uint8_t)(int64_t)v; break;
    default: bits = v != 0; break;
  }
  return bits;
}

/* Dispatch: elements as unsigned integers of their size (copies move bits, whatever the
 * dtype), and index tensors (int64, else int32). */
#define BY_ELEMENT_SIZE(size, E, ...)                       \
  switch (size) {                                           \
    case 1: { typedef uint8_t E; __VA_ARGS__; } break;      \
    case 2: { typedef uint16_t E; __VA_ARGS__; } break;     \
    case 4: { typedef uint32_t E; __VA_ARGS__; } break;     \
    default: { typedef uint64_t E; __VA_ARGS__; } break;    \
  }
#define BY_INDEX_DTYPE(dtype, IT, ...)                                          \
  if ((dtype) == EM_INT64) { typedef int64_t IT; __VA_ARGS__; }                 \
  else { typedef int32_t IT; __VA_ARGS__; }

/* ---- geometry */
static inline em_geom em_geom_from(int n, const int64_t *sizes, const int64_t *strides) {
  em_geom g;
  g.ndim = n;
  for (int d = 0; d < n; d++) g.sizes[d] = sizes[d], g.strides[d] = strides[d];
  return g;
}

/* Geometries of nt stride sets over one shape, merged together (reduce_plan.c). */
static inline void em_geoms_merged(int nt, int ndim, const int64_t *sizes, const int64_t *const *strides, em_geom *out) {
  int64_t msizes[EM_RP_DIMS], mstrides[4][EM_RP_DIMS];
  int m = em_rp_merge(nt, ndim, sizes, strides, msizes, mstrides);
  for (int k = 0; k < nt; k++) out[k] = em_geom_from(m, msizes, mstrides[k]);
}

/* ---- lanes of a block of EM_RP_THREADS threads: `slots` groups of `lanes` threads. In the
 * row layout a slot's lanes are consecutive threads; in the column layout consecutive
 * threads are consecutive slots. */
struct em_lane_map {
  int lane, slot, slots;
  __device__ __forceinline__ em_lane_map(int lanes, int lanes_fast) {
    slots = EM_RP_THREADS / lanes;
    if (lanes_fast) lane = threadIdx.x % lanes, slot = threadIdx.x / lanes;
    else slot = threadIdx.x % slots, lane = threadIdx.x / slots;
  }
};

/* Combines the lanes' states of every slot in a fixed tree (lane i takes lane i + w, for
 * w = lanes/2 ... 1) and leaves the result in sm[slot * lanes]. Every thread of the block
 * calls it the same number of times. */
template <typename S, typename F>
__device__ __forceinline__ void em_lane_tree(S *sm, S st, int slot, int lane, int lanes, F combine) {
  S *mine = sm + slot * lanes;
  __syncthreads(); /* readers of the previous round are done */
  mine[lane] = st;
  __syncthreads();
  for (int w = lanes / 2; w > 0; w >>= 1) {
    if (lane < w) mine[lane] = combine(mine[lane], mine[lane + w]);
    __syncthreads();
  }
}

/* ---- temporary device memory: blocks from the caching allocator, handed back when the
 * scope ends. The allocator is stream-ordered, so freeing right after queueing the kernels
 * that use a block is safe. */
struct em_gpu_temp {
  void *blocks[8];
  int count;
  int device;
  explicit em_gpu_temp(int dev) : count(0), device(dev) {}
  ~em_gpu_temp() {
    for (int i = 0; i < count; i++) em_gpu_free_ptr(blocks[i]);
  }
  template <typename T> T *get(size_t n) {
    if (count == 8) {
      em_set_error(EM_ERR_RUNTIME, "em_gpu_temp: more than 8 temporary blocks in one op");
      return nullptr;
    }
    void *p = em_gpu_malloc(n ? n * sizeof(T) : 1, device);
    if (p) blocks[count++] = p;
    return (T *)p;
  }
  em_gpu_temp(const em_gpu_temp &) = delete;
  em_gpu_temp &operator=(const em_gpu_temp &) = delete;
};

#define EM_TEMP_OR_FAIL(ptr) \
  do {                       \
    if (!(ptr)) return em_last_status(); \
  } while (0)

#endif
