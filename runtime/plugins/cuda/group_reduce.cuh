/* group_reduce.cuh - deterministic reductions inside a warp or a block, and the host side of
 * the "first bad index" flags that report out-of-range indices.
 *
 * Every reduction here combines values in a fixed tree (shuffle-down within a warp, then
 * warp 0 over the warps' partials in warp order), so a result depends only on the launch
 * geometry, never on scheduling: no atomics on floating-point values anywhere. */
#ifndef EMBER_GPU_GROUP_REDUCE_CUH
#define EMBER_GPU_GROUP_REDUCE_CUH

#include "kernels.cuh"

#define EM_FULL_MASK 0xffffffffu

/* The compute type of an element type (float for float16/bfloat16), as em_ctype<D>::acc. */
template <typename T> struct em_ctype_of { typedef T acc; };
template <> struct em_ctype_of<__half> { typedef float acc; };
template <> struct em_ctype_of<__nv_bfloat16> { typedef float acc; };

/* Warp shuffles; a struct type adds overloads next to its definition (found by ADL). */
template <typename T> __device__ __forceinline__ T em_shfl_down(T v, int delta) {
  return __shfl_down_sync(EM_FULL_MASK, v, delta);
}
template <typename T> __device__ __forceinline__ T em_shfl(T v, int lane) { return __shfl_sync(EM_FULL_MASK, v, lane); }

template <typename T, typename Op>
__device__ __forceinline__ T em_warp_reduce(T v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, em_shfl_down(v, o));
  return v;
}

/* The reduction of v over the threads of a "group": a warp when blockDim.x == 32 (each
 * threadIdx.y its own group, no block barrier, so warps may run different trip counts),
 * otherwise the whole block (blockDim.y == 1, every thread must call). The result reaches
 * every thread of the group. identity must be op's neutral value. */
template <typename T, typename Op>
__device__ __forceinline__ T em_group_reduce(T v, Op op, T identity) {
  v = em_warp_reduce(v, op);
  if (blockDim.x == 32) return em_shfl(v, 0);
  __shared__ T partial[32];
  __shared__ T result;
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  __syncthreads(); /* the previous call's readers are done with partial and result */
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < nwarps ? partial[lane] : identity;
    v = em_warp_reduce(v, op);
    if (lane == 0) result = v;
  }
  __syncthreads();
  return result;
}

/* Sum over a block of any size (a multiple of 32), result in thread 0 only. */
template <typename T>
__device__ __forceinline__ T em_block_sum(T v) {
  __shared__ T partial[32];
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  auto add = [](T a, T b) { return a + b; };
  v = em_warp_reduce(v, add);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < nwarps ? partial[lane] : T(0);
    v = em_warp_reduce(v, add);
  }
  return v;
}

/* ---- first-bad-index flags ----
 * A kernel that meets an invalid index records its position with atomicMin on a 64-bit
 * flag (initialised to EM_NO_BAD_INDEX), so the smallest bad position wins, as in the
 * CPU's sequential check. The host reads the flags back once (the op's one
 * synchronisation) and, on the error path only, the bad value itself. */
#define EM_NO_BAD_INDEX 0xffffffffffffffffull

__device__ __forceinline__ void em_flag_bad(unsigned long long *flag, int64_t position) {
  atomicMin(flag, (unsigned long long)position);
}

/* Copies n flags to the host and waits for the stream. */
static inline em_status em_gpu_read_flags(const char *op, const unsigned long long *dflags, unsigned long long *hflags,
                                          int n, cudaStream_t stream) {
  EM_GPU_CHECK(op, cudaMemcpyAsync(hflags, dflags, sizeof(unsigned long long) * n, cudaMemcpyDeviceToHost, stream));
  EM_GPU_CHECK(op, cudaStreamSynchronize(stream));
  return EM_OK;
}

/* Reads element i of an int32/int64 device array (error path only: one blocking copy). */
static inline em_status em_gpu_read_index(const char *op, const void *base, int is64, int64_t i, int64_t *value,
                                          cudaStream_t stream) {
  if (is64) {
    EM_GPU_CHECK(op, cudaMemcpyAsync(value, (const int64_t *)base + i, sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
  } else {
    int32_t v32 = 0;
    EM_GPU_CHECK(op, cudaMemcpyAsync(&v32, (const int32_t *)base + i, sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
    EM_GPU_CHECK(op, cudaStreamSynchronize(stream));
    *value = v32;
    return EM_OK;
  }
  EM_GPU_CHECK(op, cudaStreamSynchronize(stream));
  return EM_OK;
}

/* Carves consecutive pieces out of one temporary device block, each aligned to 256 bytes. */
struct em_gpu_carver {
  size_t used;
  char *base;
  template <typename T> T *take(size_t count) {
    size_t at = (used + 255) & ~(size_t)255;
    used = at + sizeof(T) * count;
    return base ? (T *)(base + at) : (T *)nullptr;
  }
};

#endif
