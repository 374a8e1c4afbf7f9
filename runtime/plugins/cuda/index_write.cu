/* index_write.cu - writes through an index on the GPU: scatter_ (a value or a source),
 * scatter_add_, index_add_ and index_fill_, with cpu/index.c's semantics. Every index is
 * checked first (em_gpu_check_indices: the op's one synchronisation), so a failed op leaves
 * its target unchanged.
 *
 * Fills (index_fill_, scatter_ of a value): one thread per written element; repeated
 * indices write the same bits, so their order does not matter.
 *
 * Copies and sums through an index, where repeated indices do matter, are deterministic
 * without atomics: each contribution's destination (its linear index in the target) is
 * sorted together with the contribution's position by CUB's radix sort, which is stable, so
 * the contributions to one destination come out in the CPU's (logical) order. The first
 * thread of each run of equal destinations then applies them one after another: the last
 * source wins for scatter_, and sums are the CPU's sequence of additions (float32 adds in
 * float32, as the CPU's *dst += (float)(alpha * src)), bit for bit. The price: a sort of the
 * contributions, and a destination that receives very many contributions is summed by one
 * thread. float16/bfloat16 targets accumulate through float (the CPU refuses them). */
#include <cub/cub.cuh>
#include "reduce_common.cuh"
#include "reduce_gpu.h"

namespace {

/* self[gs(q) + (index[gi(q)] - base) * step] = value */
template <typename E, typename IT>
__global__ void __launch_bounds__(EM_RP_THREADS)
    fill_kernel(E *self, const IT *__restrict__ idx, em_geom gs, em_geom gi, int64_t n, int64_t step, int64_t base,
                E value) {
  for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < n; q += (int64_t)gridDim.x * blockDim.x)
    self[gs.offset(q) + ((int64_t)idx[gi.offset(q)] - base) * step] = value;
}

/* keys[q] = the linear index in self that contribution q writes; order[q] = q. */
template <typename IT>
__global__ void __launch_bounds__(EM_RP_THREADS)
    dest_keys(const IT *__restrict__ idx, em_geom gi, em_geom gl, int64_t n, int64_t lin_step, int64_t base,
              uint64_t *keys, int64_t *order) {
  for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < n; q += (int64_t)gridDim.x * blockDim.x) {
    keys[q] = (uint64_t)(gl.offset(q) + ((int64_t)idx[gi.offset(q)] - base) * lin_step);
    order[q] = q;
  }
}

/* dst + alpha * src as cpu/index.c's write_loop computes it, per dtype. */
template <int D> __device__ __forceinline__ typename em_ctype<D>::type add_scaled(typename em_ctype<D>::type dst,
                                                                                   typename em_ctype<D>::type s,
                                                                                   double alpha) {
  if constexpr (D == EM_FLOAT32) return dst + (float)(alpha * (double)s);
  else if constexpr (D == EM_FLOAT64) return fma(alpha, s, dst); /* gcc -march=native fuses the cpu's += too */
  else if constexpr (D == EM_FLOAT16) return __float2half(__half2float(dst) + (float)(alpha * (double)__half2float(s)));
  else if constexpr (D == EM_BFLOAT16)
    return __float2bfloat16(__bfloat162float(dst) + (float)(alpha * (double)__bfloat162float(s)));
  else if constexpr (D == EM_INT32)
    return (int32_t)((uint32_t)dst + (uint32_t)(int32_t)(int64_t)((uint64_t)(int64_t)alpha * (uint64_t)(int64_t)s));
  else if constexpr (D == EM_INT64) return (int64_t)((uint64_t)dst + (uint64_t)(int64_t)alpha * (uint64_t)s);
  else if constexpr (D == EM_UINT8) return (uint8_t)(dst + (uint8_t)((int64_t)alpha * (int64_t)s));
  else return (uint8_t)(dst || (alpha != 0 && s)); /* bool */
}

/* Thread i starts the run of equal keys at sorted position i (when it is the first) and
 * applies its contributions in order: the last one (copy), or each one (add). */
template <int D>
__global__ void __launch_bounds__(EM_RP_THREADS)
    apply_sorted(typename em_ctype<D>::type *self, em_geom gself, const uint64_t *__restrict__ keys,
                 const int64_t *__restrict__ order, int64_t n, const typename em_ctype<D>::type *__restrict__ src,
                 em_geom gsrc, int add, double alpha) {
  typedef typename em_ctype<D>::type T;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const uint64_t key = keys[i];
    if (i > 0 && keys[i - 1] == key) continue;
    T *dst = self + gself.offset((int64_t)key);
    int64_t j = i;
    if (!add) {
      while (j + 1 < n && keys[j + 1] == key) j++;
      *dst = src[gsrc.offset(order[j])];
      continue;
    }
    T acc = *dst;
    for (; j < n && keys[j] == key; j++) acc = add_scaled<D>(acc, src[gsrc.offset(order[j])], alpha);
    *dst = acc;
  }
}

struct write_call {
  const char *name;
  int device;
  cudaStream_t stream;
};

em_status enter(write_call &c, const char *name, const em_tensor *self) {
  c.name = name;
  c.device = self->storage->device.index;
  return em_gpu_enter(name, c.device, &c.stream);
}

/* Iteration over (ndim, sizes): self at self_strides (0 along dim) plus the index's
 * position times self's stride along dim receives value. */
em_status run_fill(const write_call &c, em_tensor *self, const em_tensor *index, int ndim, const int64_t *sizes,
                   const int64_t *self_strides, const int64_t *idx_strides, int dim, int base, double value) {
  int64_t n = emp_shape_numel(ndim, sizes);
  if (n == 0) return EM_OK;
  const int64_t *sp[2] = {self_strides, idx_strides};
  em_geom g[2];
  em_geoms_merged(2, ndim, sizes, sp, g);
  uint64_t bits = em_fill_bits(self->dtype, value);
  BY_ELEMENT_SIZE(em_dtype_size(self->dtype), E, BY_INDEX_DTYPE(index->dtype, IT, {
    fill_kernel<E, IT><<<em_gpu_blocks(n, c.device), EM_RP_THREADS, 0, c.stream>>>(
        (E *)em_tensor_ptr(self), (const IT *)em_tensor_ptr(index), g[0], g[1], n, self->strides[dim], base, (E)bits);
  }))
  return em_gpu_launch_check(c.name);
}

template <int D>
em_status apply_typed(const write_call &c, em_tensor *self, const em_tensor *src, const em_geom &gsrc,
                      const uint64_t *keys, const int64_t *order, int64_t n, int add, double alpha) {
  typedef typename em_ctype<D>::type T;
  int64_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS];
  int m = em_rp_simplify(self->ndim, self->sizes, self->strides, sizes, strides);
  apply_sorted<D><<<em_gpu_blocks(n, c.device), EM_RP_THREADS, 0, c.stream>>>(
      (T *)em_tensor_ptr(self), em_geom_from(m, sizes, strides), keys, order, n, (const T *)em_tensor_ptr(src), gsrc,
      add, alpha);
  return em_gpu_launch_check(c.name);
}

/* Contributions over (ndim, sizes): src at src_strides goes to self at the index's position
 * along dim (index at idx_strides), copied or added (times alpha). */
em_status run_sorted(const write_call &c, em_tensor *self, const em_tensor *index, const em_tensor *src, int ndim,
                     const int64_t *sizes, const int64_t *idx_strides, const int64_t *src_strides, int dim, int base,
                     int add, double alpha) {
  int64_t n = emp_shape_numel(ndim, sizes);
  if (n == 0) return EM_OK;
  int64_t lin[EM_MAX_DIMS];
  emp_contiguous_strides(self->ndim, self->sizes, lin);
  const int64_t lin_step = lin[dim];
  lin[dim] = 0;
  const int64_t *sp[3] = {idx_strides, lin, src_strides};
  em_geom g[3];
  em_geoms_merged(3, ndim, sizes, sp, g);
  em_gpu_temp tmp(c.device);
  uint64_t *kin, *kout;
  int64_t *oin, *oout;
  EM_TEMP_OR_FAIL(kin = tmp.get<uint64_t>((size_t)n));
  EM_TEMP_OR_FAIL(kout = tmp.get<uint64_t>((size_t)n));
  EM_TEMP_OR_FAIL(oin = tmp.get<int64_t>((size_t)n));
  EM_TEMP_OR_FAIL(oout = tmp.get<int64_t>((size_t)n));
  BY_INDEX_DTYPE(index->dtype, IT, {
    dest_keys<IT><<<em_gpu_blocks(n, c.device), EM_RP_THREADS, 0, c.stream>>>((const IT *)em_tensor_ptr(index), g[0],
                                                                               g[1], n, lin_step, base, kin, oin);
  })
  em_status st = em_gpu_launch_check(c.name);
  if (st) return st;
  const int bits = em_rp_bits_for((uint64_t)(em_tensor_numel(self) - 1));
  size_t bytes = 0;
  EM_GPU_CHECK(c.name, cub::DeviceRadixSort::SortPairs(nullptr, bytes, kin, kout, oin, oout, n, 0, bits, c.stream));
  void *scratch;
  EM_TEMP_OR_FAIL(scratch = tmp.get<char>(bytes));
  EM_GPU_CHECK(c.name, cub::DeviceRadixSort::SortPairs(scratch, bytes, kin, kout, oin, oout, n, 0, bits, c.stream));
  switch (self->dtype) {
    case EM_FLOAT32: return apply_typed<EM_FLOAT32>(c, self, src, g[2], kout, oout, n, add, alpha);
    case EM_FLOAT64: return apply_typed<EM_FLOAT64>(c, self, src, g[2], kout, oout, n, add, alpha);
    case EM_FLOAT16: return apply_typed<EM_FLOAT16>(c, self, src, g[2], kout, oout, n, add, alpha);
    case EM_BFLOAT16: return apply_typed<EM_BFLOAT16>(c, self, src, g[2], kout, oout, n, add, alpha);
    case EM_INT32: return apply_typed<EM_INT32>(c, self, src, g[2], kout, oout, n, add, alpha);
    case EM_INT64: return apply_typed<EM_INT64>(c, self, src, g[2], kout, oout, n, add, alpha);
    case EM_UINT8: return apply_typed<EM_UINT8>(c, self, src, g[2], kout, oout, n, add, alpha);
    case EM_BOOL: return apply_typed<EM_BOOL>(c, self, src, g[2], kout, oout, n, add, alpha);
    default:
      return em_set_error(EM_ERR_DTYPE, "%s: dtype %s is not supported on cuda", c.name, em_dtype_name(self->dtype));
  }
}

} // namespace

extern "C" em_status em_gpu_scatter(em_tensor *self, int dim, const em_tensor *index, const em_tensor *src,
                                    double value, int accumulate, int base) {
  write_call c;
  em_status st = enter(c, src ? (accumulate ? "scatter_add_" : "scatter_") : "scatter_value_", self);
  if (st || (st = em_gpu_check_indices(c.name, index, dim, self->sizes[dim], base, c.stream))) return st;
  if (src)
    return run_sorted(c, self, index, src, index->ndim, index->sizes, index->strides, src->strides, dim, base,
                      accumulate, 1.0);
  int64_t self_strides[EM_MAX_DIMS];
  for (int d = 0; d < index->ndim; d++) self_strides[d] = d == dim ? 0 : self->strides[d];
  return run_fill(c, self, index, index->ndim, index->sizes, self_strides, index->strides, dim, base, value);
}

extern "C" em_status em_gpu_index_add(em_tensor *self, int dim, const em_tensor *index, const em_tensor *src,
                                      double alpha, int base) {
  write_call c;
  em_status st = enter(c, "index_add_", self);
  if (st || (st = em_gpu_check_indices(c.name, index, dim, self->sizes[dim], base, c.stream))) return st;
  int64_t idx_strides[EM_MAX_DIMS];
  for (int d = 0; d < src->ndim; d++) idx_strides[d] = d == dim ? index->strides[0] : 0;
  return run_sorted(c, self, index, src, src->ndim, src->sizes, idx_strides, src->strides, dim, base, 1, alpha);
}

extern "C" em_status em_gpu_index_fill(em_tensor *self, int dim, const em_tensor *index, double value, int base) {
  write_call c;
  em_status st = enter(c, "index_fill_", self);
  if (st || (st = em_gpu_check_indices(c.name, index, dim, self->sizes[dim], base, c.stream))) return st;
  int64_t sizes[EM_MAX_DIMS], self_strides[EM_MAX_DIMS], idx_strides[EM_MAX_DIMS];
  for (int d = 0; d < self->ndim; d++) {
    sizes[d] = d == dim ? em_tensor_numel(index) : self->sizes[d];
    self_strides[d] = d == dim ? 0 : self->strides[d];
    idx_strides[d] = d == dim ? index->strides[0] : 0;
  }
  return run_fill(c, self, index, self->ndim, sizes, self_strides, idx_strides, dim, base, value);
}
