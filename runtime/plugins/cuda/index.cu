/* index.cu - indexing on the GPU: the index range check, index_select, gather, masked_fill,
 * masked_select, nonzero and count_nonzero, with cpu/index.c's semantics (scatter,
 * index_add, index_fill live in index_write.cu).
 *
 * Reads through an index use the CPU's trick: the indexed tensor is seen with the iteration
 * shape and a zero stride along dim, and the kernel adds (index - base) * stride(dim). All
 * stride sets of an op are merged together (reduce_plan.c) so that most ops address 1-d.
 *
 * Synchronisation. An index out of range must come back as an EM_ERR_INDEX that shows the
 * bad value, as on the CPU, and leave the target unchanged. So every op that takes an index
 * first queues a check kernel that records the smallest bad position with atomicMin in one
 * device word, copies that word back and waits for the stream: one synchronisation per
 * call, before any writing kernel is queued (which then runs asynchronously). The bad value
 * itself is read only on the error path. count_nonzero syncs too (its count goes to the
 * host: the core sizes the results of masked_select and nonzero with it); masked_select
 * and nonzero themselves do not. */
#include <string.h>
#include <cub/cub.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include "reduce_common.cuh"
#include "reduce_gpu.h"

namespace {

#define NO_BAD_INDEX 0xffffffffffffffffull

template <typename IT>
__global__ void __launch_bounds__(EM_RP_THREADS)
    check_range(const IT *__restrict__ idx, em_geom g, int64_t n, int64_t lo, int64_t hi, unsigned long long *bad) {
  for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < n; q += (int64_t)gridDim.x * blockDim.x) {
    int64_t v = idx[g.offset(q)];
    if (v < lo || v >= hi) atomicMin(bad, (unsigned long long)q);
  }
}

/* out = src read at index along dim; go, gs, gi: the iteration's geometries of out, of the
 * re-strided source (zero stride along dim) and of the index. */
template <typename E, typename IT>
__global__ void __launch_bounds__(EM_RP_THREADS)
    gather_kernel(E *out, const E *__restrict__ src, const IT *__restrict__ idx, em_geom go, em_geom gs, em_geom gi,
                  int64_t n, int64_t step, int64_t base) {
  for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < n; q += (int64_t)gridDim.x * blockDim.x) {
    int64_t k = (int64_t)idx[gi.offset(q)] - base;
    out[go.offset(q)] = src[gs.offset(q) + k * step];
  }
}

template <typename E>
__global__ void __launch_bounds__(EM_RP_THREADS)
    masked_fill_kernel(E *self, const uint8_t *__restrict__ mask, em_geom gs, em_geom gm, int64_t n, E value) {
  for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < n; q += (int64_t)gridDim.x * blockDim.x)
    if (mask[gm.offset(q)]) self[gs.offset(q)] = value;
}

template <typename E>
__global__ void __launch_bounds__(EM_RP_THREADS) strided_copy(E *out, int64_t stride, const E *__restrict__ in, int64_t n) {
  for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < n; q += (int64_t)gridDim.x * blockDim.x)
    out[q * stride] = in[q];
}

/* Row r of out [count, ndim] = the multi-index (from base) of linear position lin[r]. */
__global__ void __launch_bounds__(EM_RP_THREADS)
    unravel_kernel(int64_t *out, int64_t os0, int64_t os1, const int64_t *__restrict__ lin, int64_t count, em_geom shape,
                   int64_t base) {
  for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < count; r += (int64_t)gridDim.x * blockDim.x) {
    int64_t i = lin[r];
    for (int d = shape.ndim - 1; d >= 0; d--) {
      int64_t q = i / shape.sizes[d];
      out[r * os0 + d * os1] = i - q * shape.sizes[d] + base;
      i = q;
    }
  }
}

/* cpu/index.c's is_nonzero: +-0 are zero, NaN is not. */
template <typename T> __device__ __forceinline__ bool is_nonzero(T x) { return x != 0; }
template <> __device__ __forceinline__ bool is_nonzero<__half>(__half x) { return (__half_as_ushort(x) & 0x7fff) != 0; }
template <> __device__ __forceinline__ bool is_nonzero<__nv_bfloat16>(__nv_bfloat16 x) {
  return (__bfloat16_as_ushort(x) & 0x7fff) != 0;
}

/* Element i in logical order of a strided tensor, as iterator functors for CUB. */
template <typename T> struct nonzero_at {
  const T *p;
  em_geom g;
  __device__ bool operator()(int64_t i) const { return is_nonzero(p[g.offset(i)]); }
};
template <typename T> struct nonzero_count_at {
  const T *p;
  em_geom g;
  __device__ int64_t operator()(int64_t i) const { return is_nonzero(p[g.offset(i)]) ? 1 : 0; }
};
template <typename E> struct element_at {
  const E *p;
  em_geom g;
  __device__ E operator()(int64_t i) const { return p[g.offset(i)]; }
};

struct index_call {
  const char *name;
  int device;
  cudaStream_t stream;
};

em_status enter(index_call &c, const char *name, const em_tensor *t) {
  c.name = name;
  c.device = t->storage->device.index;
  return em_gpu_enter(name, c.device, &c.stream);
}

uint32_t blocks_for(const index_call &c, int64_t n) { return em_gpu_blocks(n, c.device); }

/* out (iteration shape) = a read through idx_strides along dim (a's strides with 0 at dim) */
em_status run_gather(const index_call &c, em_tensor *out, const em_tensor *a, const em_tensor *index,
                     const int64_t *a_strides, const int64_t *idx_strides, int dim, int base) {
  int64_t n = em_tensor_numel(out);
  if (n == 0) return EM_OK;
  const int64_t *sp[3] = {out->strides, a_strides, idx_strides};
  em_geom g[3];
  em_geoms_merged(3, out->ndim, out->sizes, sp, g);
  BY_ELEMENT_SIZE(em_dtype_size(a->dtype), E, BY_INDEX_DTYPE(index->dtype, IT, {
    gather_kernel<E, IT><<<blocks_for(c, n), EM_RP_THREADS, 0, c.stream>>>(
        (E *)em_tensor_ptr(out), (const E *)em_tensor_ptr(a), (const IT *)em_tensor_ptr(index), g[0], g[1], g[2], n,
        a->strides[dim], base);
  }))
  return em_gpu_launch_check(c.name);
}

} // namespace

extern "C" em_status em_gpu_check_indices(const char *op, const em_tensor *index, int dim, int64_t size, int base,
                                          cudaStream_t stream) {
  int64_t n = em_tensor_numel(index);
  if (n == 0) return EM_OK;
  int device = index->storage->device.index;
  em_geom g;
  {
    int64_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS];
    int m = em_rp_simplify(index->ndim, index->sizes, index->strides, sizes, strides);
    g = em_geom_from(m, sizes, strides);
  }
  unsigned long long found = NO_BAD_INDEX;
  {
    em_gpu_temp tmp(device);
    unsigned long long *bad;
    EM_TEMP_OR_FAIL(bad = tmp.get<unsigned long long>(1));
    EM_GPU_CHECK(op, cudaMemsetAsync(bad, 0xff, sizeof *bad, stream));
    BY_INDEX_DTYPE(index->dtype, IT, {
      check_range<IT><<<em_gpu_blocks(n, device), EM_RP_THREADS, 0, stream>>>((const IT *)em_tensor_ptr(index), g, n,
                                                                              base, (int64_t)base + size, bad);
    })
    em_status st = em_gpu_launch_check(op);
    if (st) return st;
    EM_GPU_CHECK(op, cudaMemcpyAsync(&found, bad, sizeof found, cudaMemcpyDeviceToHost, stream));
    EM_GPU_CHECK(op, cudaStreamSynchronize(stream)); /* the op's one synchronisation */
  }
  if (found == NO_BAD_INDEX) return EM_OK;
  /* error path: read the bad value itself */
  int64_t value = 0;
  int32_t v32 = 0;
  const int is64 = index->dtype == EM_INT64;
  const char *at = em_tensor_ptr(index) + g.offset((int64_t)found) * (int64_t)em_dtype_size(index->dtype);
  EM_GPU_CHECK(op, cudaMemcpyAsync(is64 ? (void *)&value : (void *)&v32, at, is64 ? sizeof value : sizeof v32,
                                   cudaMemcpyDeviceToHost, stream));
  EM_GPU_CHECK(op, cudaStreamSynchronize(stream));
  if (!is64) value = v32;
  if (size == 0)
    return em_set_error(EM_ERR_INDEX, "%s: index %lld is out of range for dim %d of size 0 (the dim is empty)", op,
                        (long long)value, dim + base);
  return em_set_error(EM_ERR_INDEX, "%s: index %lld is out of range for dim %d of size %lld (expected %lld..%lld)", op,
                      (long long)value, dim + base, (long long)size, (long long)base, (long long)(base + size - 1));
}

extern "C" em_status em_gpu_index_select(em_tensor *out, const em_tensor *a, int dim, const em_tensor *index,
                                         int base) {
  index_call c;
  em_status st = enter(c, "index_select", a);
  if (st || (st = em_gpu_check_indices(c.name, index, dim, a->sizes[dim], base, c.stream))) return st;
  int64_t a_strides[EM_MAX_DIMS], idx_strides[EM_MAX_DIMS];
  for (int d = 0; d < out->ndim; d++) {
    a_strides[d] = d == dim ? 0 : a->strides[d];
    idx_strides[d] = d == dim ? index->strides[0] : 0;
  }
  return run_gather(c, out, a, index, a_strides, idx_strides, dim, base);
}

extern "C" em_status em_gpu_gather(em_tensor *out, const em_tensor *a, int dim, const em_tensor *index, int base) {
  index_call c;
  em_status st = enter(c, "gather", a);
  if (st || (st = em_gpu_check_indices(c.name, index, dim, a->sizes[dim], base, c.stream))) return st;
  int64_t a_strides[EM_MAX_DIMS];
  for (int d = 0; d < index->ndim; d++) a_strides[d] = d == dim ? 0 : a->strides[d];
  return run_gather(c, out, a, index, a_strides, index->strides, dim, base);
}

extern "C" em_status em_gpu_masked_fill(em_tensor *self, const em_tensor *mask, double value) {
  index_call c;
  em_status st = enter(c, "masked_fill_", self);
  int64_t n = em_tensor_numel(self);
  if (st || n == 0) return st;
  const int64_t *sp[2] = {self->strides, mask->strides};
  em_geom g[2];
  em_geoms_merged(2, self->ndim, self->sizes, sp, g);
  uint64_t bits = em_fill_bits(self->dtype, value);
  BY_ELEMENT_SIZE(em_dtype_size(self->dtype), E, {
    masked_fill_kernel<E><<<blocks_for(c, n), EM_RP_THREADS, 0, c.stream>>>(
        (E *)em_tensor_ptr(self), (const uint8_t *)em_tensor_ptr(mask), g[0], g[1], n, (E)bits);
  })
  return em_gpu_launch_check(c.name);
}

/* out [count] = a's elements where mask is set, in logical order (CUB's flagged select). */
extern "C" em_status em_gpu_masked_select(em_tensor *out, const em_tensor *a, const em_tensor *mask) {
  index_call c;
  em_status st = enter(c, "masked_select", a);
  int64_t n = em_tensor_numel(a), count = out->ndim ? out->sizes[0] : 1;
  if (st || n == 0 || count == 0) return st;
  const int64_t *sp[2] = {a->strides, mask->strides};
  em_geom g[2];
  em_geoms_merged(2, a->ndim, a->sizes, sp, g);
  em_gpu_temp tmp(c.device);
  int64_t *selected;
  EM_TEMP_OR_FAIL(selected = tmp.get<int64_t>(1));
  thrust::counting_iterator<int64_t> first(0);
  auto flags = thrust::make_transform_iterator(first, nonzero_at<uint8_t>{(const uint8_t *)em_tensor_ptr(mask), g[1]});
  int64_t stride = out->ndim ? out->strides[0] : 1;
  BY_ELEMENT_SIZE(em_dtype_size(a->dtype), E, {
    auto in = thrust::make_transform_iterator(first, element_at<E>{(const E *)em_tensor_ptr(a), g[0]});
    E *dst = (E *)em_tensor_ptr(out);
    if (stride != 1) EM_TEMP_OR_FAIL(dst = tmp.get<E>((size_t)count));
    size_t bytes = 0;
    EM_GPU_CHECK(c.name, cub::DeviceSelect::Flagged(nullptr, bytes, in, flags, dst, selected, n, c.stream));
    void *scratch;
    EM_TEMP_OR_FAIL(scratch = tmp.get<char>(bytes));
    EM_GPU_CHECK(c.name, cub::DeviceSelect::Flagged(scratch, bytes, in, flags, dst, selected, n, c.stream));
    if (stride != 1) {
      strided_copy<E><<<blocks_for(c, count), EM_RP_THREADS, 0, c.stream>>>((E *)em_tensor_ptr(out), stride, dst,
                                                                            count);
      if ((st = em_gpu_launch_check(c.name))) return st;
    }
  })
  return EM_OK;
}

template <typename T>
static em_status nonzero_typed(const index_call &c, em_tensor *out, const em_tensor *a, const em_geom &g, int base) {
  int64_t n = em_tensor_numel(a), count = out->sizes[0];
  em_gpu_temp tmp(c.device);
  int64_t *lin, *selected;
  EM_TEMP_OR_FAIL(lin = tmp.get<int64_t>((size_t)count));
  EM_TEMP_OR_FAIL(selected = tmp.get<int64_t>(1));
  thrust::counting_iterator<int64_t> first(0);
  nonzero_at<T> pred = {(const T *)em_tensor_ptr(a), g};
  size_t bytes = 0;
  EM_GPU_CHECK(c.name, cub::DeviceSelect::If(nullptr, bytes, first, lin, selected, n, pred, c.stream));
  void *scratch;
  EM_TEMP_OR_FAIL(scratch = tmp.get<char>(bytes));
  EM_GPU_CHECK(c.name, cub::DeviceSelect::If(scratch, bytes, first, lin, selected, n, pred, c.stream));
  em_geom shape;
  int64_t ones[EM_MAX_DIMS] = {0};
  shape = em_geom_from(a->ndim, a->sizes, ones);
  unravel_kernel<<<blocks_for(c, count), EM_RP_THREADS, 0, c.stream>>>(
      (int64_t *)em_tensor_ptr(out), out->strides[0], out->strides[1], lin, count, shape, base);
  return em_gpu_launch_check(c.name);
}

template <typename T> static em_status count_typed(const index_call &c, const em_tensor *a, const em_geom &g, int64_t *count) {
  int64_t n = em_tensor_numel(a);
  em_gpu_temp tmp(c.device);
  int64_t *total;
  EM_TEMP_OR_FAIL(total = tmp.get<int64_t>(1));
  auto flags = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0),
                                               nonzero_count_at<T>{(const T *)em_tensor_ptr(a), g});
  size_t bytes = 0;
  EM_GPU_CHECK(c.name, cub::DeviceReduce::Sum(nullptr, bytes, flags, total, n, c.stream));
  void *scratch;
  EM_TEMP_OR_FAIL(scratch = tmp.get<char>(bytes));
  EM_GPU_CHECK(c.name, cub::DeviceReduce::Sum(scratch, bytes, flags, total, n, c.stream));
  EM_GPU_CHECK(c.name, cudaMemcpyAsync(count, total, sizeof *count, cudaMemcpyDeviceToHost, c.stream));
  EM_GPU_CHECK(c.name, cudaStreamSynchronize(c.stream)); /* the count goes to the host */
  return EM_OK;
}

#define BY_DTYPE(dtype, T, ...)                                                     \
  switch (dtype) {                                                                  \
    case EM_FLOAT32: { typedef float T; __VA_ARGS__; } break;                       \
    case EM_FLOAT64: { typedef double T; __VA_ARGS__; } break;                      \
    case EM_FLOAT16: { typedef __half T; __VA_ARGS__; } break;                      \
    case EM_BFLOAT16: { typedef __nv_bfloat16 T; __VA_ARGS__; } break;              \
    case EM_INT32: { typedef int32_t T; __VA_ARGS__; } break;                       \
    case EM_INT64: { typedef int64_t T; __VA_ARGS__; } break;                       \
    default: { typedef uint8_t T; __VA_ARGS__; } break;                             \
  }

static em_geom logical_geom(const em_tensor *a) {
  int64_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS];
  int m = em_rp_simplify(a->ndim, a->sizes, a->strides, sizes, strides);
  return em_geom_from(m, sizes, strides);
}

extern "C" em_status em_gpu_nonzero(em_tensor *out, const em_tensor *a, int base) {
  index_call c;
  em_status st = enter(c, "nonzero", a);
  if (st || em_tensor_numel(a) == 0 || out->sizes[0] == 0 || a->ndim == 0) return st;
  em_geom g = logical_geom(a);
  BY_DTYPE(a->dtype, T, st = nonzero_typed<T>(c, out, a, g, base))
  return st;
}

extern "C" em_status em_gpu_count_nonzero(const em_tensor *a, int64_t *count) {
  index_call c;
  em_status st = enter(c, "count_nonzero", a);
  *count = 0;
  if (st || em_tensor_numel(a) == 0) return st;
  em_geom g = logical_geom(a);
  BY_DTYPE(a->dtype, T, st = count_typed<T>(c, a, g, count))
  return st;
}
