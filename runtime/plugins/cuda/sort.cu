/* sort.cu - sort and top-k along a dim on the GPU, with cpu/sort.c's order: stable (equal
 * values keep their order, in either direction), NaN the largest value (last ascending,
 * first descending), -0.0 equal to +0.0. top-k sorts the row and keeps the first k.
 *
 * Every element becomes an unsigned key whose ascending order is the requested order:
 * floats by their sign-folded bits (after turning -0.0 into +0.0 and every NaN into one
 * NaN above +inf), integers with the sign bit flipped; descending complements the key, which
 * keeps equal keys in their original order. Then, by row length (em_rp_plan_sort):
 *  - rows of up to 2048 elements: a block sorts a tile of 2048 slots in shared memory with a
 *    bitonic network, several short rows per tile (each padded to a power of two). Bitonic
 *    is not stable by itself; comparing (key, position) pairs makes it so.
 *  - longer rows: CUB's radix sort of (key, position) pairs, stable by construction: one
 *    DeviceRadixSort for a single row, DeviceSegmentedRadixSort over rows otherwise (in
 *    batches, its item count being an int).
 * The values are then read from the input at the sorted positions, so they keep their exact
 * bits. a, values and indices may have any strides. */
#include <cub/cub.cuh>
#include "reduce_common.cuh"
#include "reduce_gpu.h"

namespace {

template <typename T> struct sort_key_t { typedef uint32_t type; static const int bits = 32; };
template <> struct sort_key_t<double> { typedef uint64_t type; static const int bits = 64; };
template <> struct sort_key_t<int64_t> { typedef uint64_t type; static const int bits = 64; };
template <> struct sort_key_t<uint8_t> { typedef uint32_t type; static const int bits = 8; };

__device__ __forceinline__ uint32_t float_key(float x) {
  if (x != x) return 0xffffffffu;
  uint32_t u = __float_as_uint(x == 0.0f ? 0.0f : x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ uint64_t double_key(double x) {
  if (x != x) return ~0ull;
  uint64_t u = (uint64_t)__double_as_longlong(x == 0.0 ? 0.0 : x);
  return (u & 0x8000000000000000ull) ? ~u : (u | 0x8000000000000000ull);
}

__device__ __forceinline__ uint32_t raw_key(float x) { return float_key(x); }
__device__ __forceinline__ uint32_t raw_key(__half x) { return float_key(__half2float(x)); }
__device__ __forceinline__ uint32_t raw_key(__nv_bfloat16 x) { return float_key(__bfloat162float(x)); }
__device__ __forceinline__ uint64_t raw_key(double x) { return double_key(x); }
__device__ __forceinline__ uint32_t raw_key(int32_t x) { return (uint32_t)x ^ 0x80000000u; }
__device__ __forceinline__ uint64_t raw_key(int64_t x) { return (uint64_t)x ^ 0x8000000000000000ull; }
__device__ __forceinline__ uint32_t raw_key(uint8_t x) { return x; }

template <typename T> __device__ __forceinline__ typename sort_key_t<T>::type sort_key(T x, int desc) {
  typedef typename sort_key_t<T>::type K;
  K mask = ~(K)0;
  if constexpr (sort_key_t<T>::bits < 8 * (int)sizeof(K)) mask = (K)(((K)1 << sort_key_t<T>::bits) - 1);
  K k = raw_key(x);
  return desc ? (K)(k ^ mask) : k;
}

/* Rows are the positions of the other dims; each tensor has its own offsets for them. */
template <typename T> struct sort_io {
  const T *a;
  T *values;
  int64_t *indices; /* or NULL */
  em_geom ga, gv, gi;
  int64_t a_step, v_step, i_step; /* along the sorted dim */
  int base;
  __device__ __forceinline__ void put(int64_t r, int64_t e, int64_t p) const {
    values[gv.offset(r) + e * v_step] = a[ga.offset(r) + p * a_step];
    if (indices) indices[gi.offset(r) + e * i_step] = p + base;
  }
};

#define TILE EM_RP_SORT_TILE

/* Rows r0 .. r0 + rows_per_block - 1 fill the tile, `padded` slots each (padding sorts last);
 * the bitonic network runs within each row's slots. */
template <typename T>
__global__ void __launch_bounds__(TILE / 2)
    sort_bitonic(sort_io<T> io, int64_t rows, int n, int padded, int rows_per_block, int64_t k, int desc) {
  __shared__ uint64_t key[TILE];
  __shared__ int32_t pos[TILE];
  for (int64_t r0 = (int64_t)blockIdx.x * rows_per_block; r0 < rows; r0 += (int64_t)gridDim.x * rows_per_block) {
    for (int s = threadIdx.x; s < TILE; s += blockDim.x) {
      const int64_t r = r0 + s / padded;
      const int e = s % padded;
      if (r < rows && e < n) {
        key[s] = (uint64_t)sort_key(io.a[io.ga.offset(r) + e * io.a_step], desc);
        pos[s] = e;
      } else {
        key[s] = ~0ull;
        pos[s] = INT32_MAX;
      }
    }
    __syncthreads();
    for (int size = 2; size <= padded; size <<= 1) {
      for (int stride = size >> 1; stride > 0; stride >>= 1) {
        const int i = em_rp_bitonic_low(threadIdx.x, stride), j = i + stride;
        const bool up = em_rp_bitonic_up(i, padded, size);
        const uint64_t ki = key[i], kj = key[j];
        const int32_t pi = pos[i], pj = pos[j];
        if ((ki > kj || (ki == kj && pi > pj)) == up) {
          key[i] = kj, key[j] = ki;
          pos[i] = pj, pos[j] = pi;
        }
        __syncthreads();
      }
    }
    for (int s = threadIdx.x; s < TILE; s += blockDim.x) {
      const int64_t r = r0 + s / padded;
      const int e = s % padded;
      if (r < rows && e < k) io.put(r, e, pos[s]);
    }
    __syncthreads();
  }
}

template <typename T, typename K>
__global__ void __launch_bounds__(EM_RP_THREADS)
    radix_keys(sort_io<T> io, int64_t rows, int64_t n, int desc, K *keys, int64_t *pos) {
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < rows * n; t += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = t / n, e = t - r * n;
    keys[t] = sort_key(io.a[io.ga.offset(r) + e * io.a_step], desc);
    pos[t] = e;
  }
}

template <typename T>
__global__ void __launch_bounds__(EM_RP_THREADS)
    radix_output(sort_io<T> io, const int64_t *__restrict__ sorted, int64_t rows, int64_t n, int64_t k) {
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < rows * k; t += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = t / k, e = t - r * k;
    io.put(r, e, sorted[r * n + e]);
  }
}

__global__ void segment_offsets(int *off, int64_t count, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i <= count; i += (int64_t)gridDim.x * blockDim.x)
    off[i] = (int)(i * n);
}

struct sort_call {
  const char *name;
  int64_t rows, n, k;
  int desc, device;
  cudaStream_t stream;
};

/* CUB's temporary storage for the plan's sort calls (the largest of them). */
template <typename K>
cudaError_t radix_bytes(const sort_call &c, const em_rp_sort &p, K *keys, int64_t *pos, int *off, size_t *bytes) {
  size_t b = 0, b2 = 0;
  cudaError_t err;
  if (p.method == EM_RP_SORT_RADIX_SEGMENTED) {
    int64_t last = c.rows % p.batch_rows ? c.rows % p.batch_rows : p.batch_rows;
    err = cub::DeviceSegmentedRadixSort::SortPairs(nullptr, b, keys, keys, pos, pos, (int)(p.batch_rows * c.n),
                                                   (int)p.batch_rows, off, off + 1, 0, p.key_bits, c.stream);
    if (err == cudaSuccess)
      err = cub::DeviceSegmentedRadixSort::SortPairs(nullptr, b2, keys, keys, pos, pos, (int)(last * c.n), (int)last,
                                                     off, off + 1, 0, p.key_bits, c.stream);
  } else {
    err = cub::DeviceRadixSort::SortPairs(nullptr, b, keys, keys, pos, pos, c.n, 0, p.key_bits, c.stream);
  }
  *bytes = b > b2 ? b : b2;
  return err;
}

template <typename T> em_status sort_radix(const sort_call &c, const em_rp_sort &p, const sort_io<T> &io) {
  typedef typename sort_key_t<T>::type K;
  const size_t total = (size_t)c.rows * (size_t)c.n;
  em_gpu_temp tmp(c.device);
  K *kin, *kout;
  int64_t *pin, *pout;
  int *off = nullptr;
  EM_TEMP_OR_FAIL(kin = tmp.get<K>(total));
  EM_TEMP_OR_FAIL(kout = tmp.get<K>(total));
  EM_TEMP_OR_FAIL(pin = tmp.get<int64_t>(total));
  EM_TEMP_OR_FAIL(pout = tmp.get<int64_t>(total));
  if (p.method == EM_RP_SORT_RADIX_SEGMENTED) {
    EM_TEMP_OR_FAIL(off = tmp.get<int>((size_t)p.batch_rows + 1));
    segment_offsets<<<em_rp_blocks(p.batch_rows + 1, EM_RP_THREADS, 65535), EM_RP_THREADS, 0, c.stream>>>(
        off, p.batch_rows, c.n);
    em_status st = em_gpu_launch_check(c.name);
    if (st) return st;
  }
  radix_keys<T, K><<<p.grid_x, EM_RP_THREADS, 0, c.stream>>>(io, c.rows, c.n, c.desc, kin, pin);
  em_status st = em_gpu_launch_check(c.name);
  if (st) return st;
  size_t bytes = 0;
  EM_GPU_CHECK(c.name, radix_bytes(c, p, kin, pin, off, &bytes));
  void *scratch;
  EM_TEMP_OR_FAIL(scratch = tmp.get<char>(bytes));
  if (p.method == EM_RP_SORT_RADIX_SEGMENTED) {
    for (int64_t r0 = 0; r0 < c.rows; r0 += p.batch_rows) {
      const int64_t nb = c.rows - r0 < p.batch_rows ? c.rows - r0 : p.batch_rows, at = r0 * c.n;
      EM_GPU_CHECK(c.name, cub::DeviceSegmentedRadixSort::SortPairs(scratch, bytes, kin + at, kout + at, pin + at,
                                                                     pout + at, (int)(nb * c.n), (int)nb, off, off + 1,
                                                                     0, p.key_bits, c.stream));
    }
  } else { /* one row, or rows too long for the segmented sort's int counts: one by one */
    for (int64_t r = 0; r < c.rows; r++) {
      const int64_t at = r * c.n;
      EM_GPU_CHECK(c.name, cub::DeviceRadixSort::SortPairs(scratch, bytes, kin + at, kout + at, pin + at, pout + at,
                                                            c.n, 0, p.key_bits, c.stream));
    }
  }
  radix_output<T><<<em_rp_blocks(c.rows * c.k, EM_RP_THREADS, EM_RP_MAX_GRID_X), EM_RP_THREADS, 0, c.stream>>>(
      io, pout, c.rows, c.n, c.k);
  return em_gpu_launch_check(c.name);
}

template <typename T> em_status sort_typed(const sort_call &c, const sort_io<T> &io) {
  em_rp_sort p;
  em_rp_plan_sort(c.rows, c.n, sort_key_t<T>::bits, &p);
  if (p.method != EM_RP_SORT_BITONIC) return sort_radix<T>(c, p, io);
  sort_bitonic<T><<<p.grid_x, TILE / 2, 0, c.stream>>>(io, c.rows, (int)c.n, p.padded, p.rows_per_block, c.k, c.desc);
  return em_gpu_launch_check(c.name);
}

template <typename T>
em_status sort_dispatch(const sort_call &c, em_tensor *values, em_tensor *indices, const em_tensor *a, int dim,
                        int base) {
  sort_io<T> io;
  io.a = (const T *)em_tensor_ptr(a);
  io.values = (T *)em_tensor_ptr(values);
  io.indices = indices ? (int64_t *)em_tensor_ptr(indices) : nullptr;
  io.base = base;
  const em_tensor *t[3] = {a, values, indices ? indices : values};
  int64_t sizes[EM_MAX_DIMS], strides[3][EM_MAX_DIMS];
  int nother = 0;
  for (int d = 0; d < a->ndim; d++) {
    if (d == dim) continue;
    sizes[nother] = a->sizes[d];
    for (int i = 0; i < 3; i++) strides[i][nother] = t[i]->strides[d];
    nother++;
  }
  const int64_t *sp[3] = {strides[0], strides[1], strides[2]};
  em_geom g[3];
  em_geoms_merged(3, nother, sizes, sp, g);
  io.ga = g[0], io.gv = g[1], io.gi = g[2];
  io.a_step = a->ndim ? a->strides[dim] : 0;
  io.v_step = values->ndim ? values->strides[dim] : 0;
  io.i_step = indices && indices->ndim ? indices->strides[dim] : 0;
  return sort_typed<T>(c, io);
}

} // namespace

extern "C" em_status em_gpu_sort(em_tensor *values, em_tensor *indices, const em_tensor *a, int dim, int descending,
                                 int64_t k, int base) {
  const char *name = "sort";
  int device = a->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter(name, device, &stream);
  if (st) return st;
  sort_call c = {name, 1, a->ndim ? a->sizes[dim] : 1, k, descending, device, stream};
  for (int d = 0; d < a->ndim; d++)
    if (d != dim) c.rows *= a->sizes[d];
  if (c.rows == 0 || c.k == 0) return EM_OK;
  switch (a->dtype) {
    case EM_FLOAT32: return sort_dispatch<float>(c, values, indices, a, dim, base);
    case EM_FLOAT64: return sort_dispatch<double>(c, values, indices, a, dim, base);
    case EM_FLOAT16: return sort_dispatch<__half>(c, values, indices, a, dim, base);
    case EM_BFLOAT16: return sort_dispatch<__nv_bfloat16>(c, values, indices, a, dim, base);
    case EM_INT32: return sort_dispatch<int32_t>(c, values, indices, a, dim, base);
    case EM_INT64: return sort_dispatch<int64_t>(c, values, indices, a, dim, base);
    case EM_UINT8: case EM_BOOL: return sort_dispatch<uint8_t>(c, values, indices, a, dim, base);
    default: return em_set_error(EM_ERR_DTYPE, "sort: dtype %s is not supported on cuda", em_dtype_name(a->dtype));
  }
}
