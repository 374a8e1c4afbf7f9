/* random.cu - random fills on the GPU from the Philox stream.
 *
 * Element i (row-major logical order, any strides) is a function of (seed, offset, i)
 * alone, laid out as core/philox.h says: one thread per Philox block, that is per pair of
 * elements (2j, 2j+1), which also keeps a Box-Muller pair together. The values come from
 * core/philox_distributions.h, whose uniform, integer and Bernoulli values are cpu/random.c's bit
 * for bit (tests/c/test_philox_distributions.c checks them against it). Normals equal the CPU's
 * only once cpu/random.c also draws through em_philox_normal_f32/f64: today it calls
 * libm's log/sin/cos, and the two differ in the last bits (see philox_distributions.h).
 *
 * randperm is the CPU's serial Fisher-Yates, run on the host (em_philox_shuffle) and
 * copied to the device: equality with the CPU matters more than speed there, and the
 * copy waits for the stream once (randperm is not on a hot path). */
#include <stdlib.h>
#include "elementwise.cuh"

namespace {

struct random_args {
  uint64_t seed, offset;
  double a, b;     /* uniform: low and span; normal: mean and std; bernoulli: p = a */
  double top;      /* uniform float64: the largest value */
  float top_f;     /* uniform float32: the largest value */
  int64_t low;     /* randint */
  uint64_t range;
};

/* Integers and 0/1 into dtype D as cpu/random.c's store() converts them. */
template <int D> __device__ __forceinline__ typename em_ctype<D>::type from_int(int64_t v) {
  if constexpr (D == EM_BOOL) return (uint8_t)(v != 0);
  else return (typename em_ctype<D>::type)v;
}

template <int KIND, int D>
__global__ void __launch_bounds__(EM_GPU_THREADS)
    random_kernel(int64_t n, typename em_ctype<D>::type *p, em_geom g, random_args r) {
  typedef typename em_ctype<D>::type T;
  const int64_t pairs = (n + 1) / 2;
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < pairs; j += step) {
    const em_philox4 x = em_philox_block(r.seed, r.offset + (uint64_t)j);
    const uint64_t b0 = em_philox_u64(x.x[0], x.x[1]), b1 = em_philox_u64(x.x[2], x.x[3]);
    const bool second = 2 * j + 1 < n;
    T v0, v1;
    if constexpr (KIND == EM_RANDOM_UNIFORM && D == EM_FLOAT32) {
      v0 = em_philox_uniform_f32(b0, r.a, r.b, r.top_f);
      v1 = em_philox_uniform_f32(b1, r.a, r.b, r.top_f);
    } else if constexpr (KIND == EM_RANDOM_UNIFORM) {
      v0 = em_philox_uniform_f64(b0, r.a, r.b, r.top);
      v1 = em_philox_uniform_f64(b1, r.a, r.b, r.top);
    } else if constexpr (KIND == EM_RANDOM_NORMAL && D == EM_FLOAT32) {
      /* the CPU draws the angle from 0 when the pair's second element is past the end */
      em_philox_normal_f32(b0, second ? b1 : 0, r.a, r.b, &v0, &v1);
    } else if constexpr (KIND == EM_RANDOM_NORMAL) {
      em_philox_normal_f64(b0, second ? b1 : 0, r.a, r.b, &v0, &v1);
    } else if constexpr (KIND == EM_RANDOM_INT) {
      v0 = from_int<D>(em_philox_int(b0, r.low, r.range));
      v1 = from_int<D>(em_philox_int(b1, r.low, r.range));
    } else {
      static_assert(KIND == EM_RANDOM_BERNOULLI, "every fill kind is handled");
      v0 = from_int<D>(em_philox_bernoulli(b0, r.a));
      v1 = from_int<D>(em_philox_bernoulli(b1, r.a));
    }
    p[g.offset(2 * j)] = v0;
    if (second) p[g.offset(2 * j + 1)] = v1;
  }
}

template <int KIND, int D> em_status launch_fill(em_tensor *t, const random_args &r) {
  typedef typename em_ctype<D>::type T;
  constexpr bool floats_only = KIND == EM_RANDOM_UNIFORM || KIND == EM_RANDOM_NORMAL;
  if constexpr (D == EM_FLOAT16 || D == EM_BFLOAT16 || (floats_only && D != EM_FLOAT32 && D != EM_FLOAT64)) {
    return ew_unsupported("random", (em_dtype)D);
  } else {
    const int64_t n = em_tensor_numel(t);
    const int device = t->storage->device.index;
    cudaStream_t stream;
    em_status st = em_gpu_enter("random", device, &stream);
    if (st) return st;
    random_kernel<KIND, D><<<em_gpu_blocks((n + 1) / 2, device), EM_GPU_THREADS, 0, stream>>>(
        n, (T *)em_tensor_ptr(t), em_geom_of(t), r);
    return em_gpu_launch_check("random");
  }
}

template <int KIND> em_status fill_kind(em_tensor *t, const random_args &r) {
  EW_DISPATCH_ALL(t->dtype, return launch_fill<KIND, D>(t, r))
  return ew_unsupported("random", t->dtype);
}

/* ---- randperm ---- */

template <typename T>
__global__ void __launch_bounds__(EM_GPU_THREADS) scatter_kernel(int64_t n, const T *src, T *dst, em_geom g) {
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) dst[g.offset(i)] = src[i];
}

/* Converts the int64 permutation in place to dtype (elements of at most 8 bytes written
 * front to back never overtake the int64s still to be read). */
template <typename T> void narrow_in_place(int64_t *perm, int64_t n) {
  T *out = (T *)perm;
  for (int64_t i = 0; i < n; i++) {
    const T v = (T)perm[i];
    memcpy(out + i, &v, sizeof v);
  }
}

template <typename T> em_status upload(em_tensor *t, const T *host, int64_t n) {
  const int device = t->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter("randperm", device, &stream);
  if (st) return st;
  const size_t nbytes = (size_t)n * sizeof(T);
  cudaError_t err;
  if (em_tensor_is_contiguous(t)) {
    err = cudaMemcpyAsync(em_tensor_ptr(t), host, nbytes, cudaMemcpyHostToDevice, stream);
  } else {
    T *staging = (T *)em_gpu_malloc(nbytes, device);
    if (!staging) return em_last_status();
    err = cudaMemcpyAsync(staging, host, nbytes, cudaMemcpyHostToDevice, stream);
    if (err == cudaSuccess) {
      scatter_kernel<T><<<em_gpu_blocks(n, device), EM_GPU_THREADS, 0, stream>>>(n, staging, (T *)em_tensor_ptr(t),
                                                                                 em_geom_of(t));
      err = cudaGetLastError();
    }
    em_gpu_free_ptr(staging);
  }
  /* the host buffer is freed on return: the copy must be done with it */
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  return err == cudaSuccess ? EM_OK : em_gpu_error(err, "randperm");
}

em_status gpu_randperm(em_tensor *t, const em_random_params *p) {
  const int64_t n = em_tensor_numel(t);
  int64_t *perm = (int64_t *)malloc((size_t)n * sizeof *perm);
  if (!perm) return em_set_error(EM_ERR_MEMORY, "randperm: out of host memory for %lld elements", (long long)n);
  em_philox_shuffle(perm, n, p->seed, p->offset);
  em_status st;
  switch (t->dtype) {
    case EM_INT64: st = upload(t, perm, n); break;
    case EM_INT32: narrow_in_place<int32_t>(perm, n); st = upload(t, (const int32_t *)perm, n); break;
    case EM_FLOAT32: narrow_in_place<float>(perm, n); st = upload(t, (const float *)perm, n); break;
    case EM_FLOAT64: narrow_in_place<double>(perm, n); st = upload(t, (const double *)perm, n); break;
    default: st = ew_unsupported("randperm", t->dtype); break;
  }
  free(perm);
  return st;
}

em_status gpu_random(em_tensor *t, const em_random_params *p) {
  if (em_tensor_numel(t) == 0) return EM_OK;
  if (p->kind == EM_RANDOM_PERM) return gpu_randperm(t, p);
  random_args r = {};
  r.seed = p->seed;
  r.offset = p->offset;
  switch (p->kind) {
    case EM_RANDOM_UNIFORM:
      r.a = p->a;
      r.b = p->b - p->a;
      r.top = nextafter(p->b, -INFINITY);
      r.top_f = em_philox_uniform_top_f32(p->a, p->b);
      return fill_kind<EM_RANDOM_UNIFORM>(t, r);
    case EM_RANDOM_NORMAL:
      r.a = p->a;
      r.b = p->b;
      return fill_kind<EM_RANDOM_NORMAL>(t, r);
    case EM_RANDOM_INT:
      r.low = p->low;
      r.range = (uint64_t)p->high - (uint64_t)p->low;
      return fill_kind<EM_RANDOM_INT>(t, r);
    case EM_RANDOM_BERNOULLI:
      r.a = p->a;
      return fill_kind<EM_RANDOM_BERNOULLI>(t, r);
    default: return em_set_error(EM_ERR_ARGUMENT, "random: unknown kind %d", (int)p->kind);
  }
}

} // namespace

/* The backend table's random entry (table.c). */
em_status em_gpu_random(em_tensor *t, const em_random_params *p) { return gpu_random(t, p); }
