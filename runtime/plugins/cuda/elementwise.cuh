/* elementwise.cuh - the generic elementwise machinery of elementwise.cu, binary.cu,
 * unary.cu and random.cu: one functor per op, two kernels per (functor, dtype).
 *
 * A call is a functor F applied to K input operands (K = 0..3) of one shape, writing one
 * output. Inputs are tensors (broadcast ones arrive with zero strides) or immediates: a
 * value carried in the kernel's parameters (binary_scalar's scalar). Loads convert storage
 * to the compute type (float16/bfloat16 compute in float); F returns its result type and
 * the store converts it to the output's storage type.
 *
 * - the vector kernel: one merged dim, every operand contiguous or a single value, and
 *   the pointers aligned (elementwise_plan.h decides): each thread moves VEC elements,
 *   16 bytes of the widest operand, with one vector load or store per operand;
 * - the strided kernel: anything else; the linear index is split into a multi-index once
 *   per element (32-bit division when the sizes allow) and dotted with each operand's
 *   strides.
 * Both are grid-stride loops with int64 indices, so tensors beyond 2^31 elements work.
 *
 * Everything here is in an anonymous namespace: each .cu file gets its own copies, and no
 * template collides with another file of the plugin. */
#ifndef EMBER_GPU_ELEMENTWISE_CUH
#define EMBER_GPU_ELEMENTWISE_CUH

#include <initializer_list>
#include <type_traits>
#include <utility>
#include "elementwise_plan.h"
#include "kernels.cuh"

/* Entries shared between the family's files (C++ linkage, plugin-internal). */
em_status em_gpu_ew_unary(em_unop op, em_tensor *out, const em_tensor *a);
em_status em_gpu_ew_copy_same(const char *op, em_tensor *out, const em_tensor *a);
em_status em_gpu_ew_binary(em_binop op, em_tensor *out, const em_tensor *a, const em_tensor *b);
em_status em_gpu_ew_binary_scalar(em_binop op, em_tensor *out, const em_tensor *a, double s, int reversed);

namespace {

/* ---- types ---- */

/* Compute type of a storage type. */
template <typename S> struct ew_compute { typedef S type; };
template <> struct ew_compute<__half> { typedef float type; };
template <> struct ew_compute<__nv_bfloat16> { typedef float type; };
template <typename S> using ew_c = typename ew_compute<S>::type;

/* The unsigned twin of an integer compute type, for wrap-around arithmetic without
 * undefined behaviour; floats are their own twin. */
template <typename C> struct ew_unsigned { typedef C type; };
template <> struct ew_unsigned<int32_t> { typedef uint32_t type; };
template <> struct ew_unsigned<int64_t> { typedef uint64_t type; };
template <typename C> using ew_u = typename ew_unsigned<C>::type;

/* Byte-moving types by element size (where, copies, fill). */
template <int SIZE> struct ew_bytes;
template <> struct ew_bytes<1> { typedef uint8_t type; };
template <> struct ew_bytes<2> { typedef uint16_t type; };
template <> struct ew_bytes<4> { typedef uint32_t type; };
template <> struct ew_bytes<8> { typedef uint64_t type; };

constexpr bool ew_is_float_dtype(int d) {
  return d == EM_FLOAT32 || d == EM_FLOAT64 || d == EM_FLOAT16 || d == EM_BFLOAT16;
}

/* Storage to compute and back. em_cast covers float16/bfloat16 <-> float; the rest are
 * plain conversions. */
template <typename C, typename S> __device__ __forceinline__ C ew_load_as(S v) { return em_cast<C>(v); }
template <typename O, typename R> __device__ __forceinline__ O ew_store_as(R v) { return em_cast<O>(v); }

/* Registers of VEC values, and the aligned vector that one load or store moves. */
template <typename T, int N> struct ew_regs { T v[N]; };
template <typename T, int N> struct alignas(sizeof(T) * N) ew_vec { T v[N]; };

/* Elements per vector step: 16 bytes of the widest operand. */
template <typename... T> constexpr int ew_vec_elems() {
  size_t widest = 1;
  for (size_t s : {sizeof(T)...}) widest = s > widest ? s : widest;
  return widest >= EM_EW_VECTOR_BYTES ? 1 : (int)(EM_EW_VECTOR_BYTES / widest);
}

/* ---- operands as kernels see them ---- */

struct ew_shape {
  int ndim;
  int narrow; /* every index fits 32 bits */
  int64_t sizes[EM_MAX_DIMS];
};

template <typename S> struct ew_in {
  const S *p;
  ew_c<S> imm;    /* an immediate's value */
  int is_imm;
  int64_t strides[EM_MAX_DIMS]; /* in elements; the vector kernel reads strides[0] (1 or 0) */
};

template <typename O> struct ew_out {
  O *p;
  int64_t strides[EM_MAX_DIMS];
};

template <typename S> __device__ __forceinline__ ew_c<S> ew_load(const ew_in<S> &a, int64_t off) {
  return a.is_imm ? a.imm : ew_load_as<ew_c<S>>(a.p[off]);
}

template <int VEC, typename S>
__device__ __forceinline__ ew_regs<ew_c<S>, VEC> ew_load_vec(const ew_in<S> &a, int64_t base) {
  ew_regs<ew_c<S>, VEC> r;
  if (a.is_imm || a.strides[0] == 0) {
    const ew_c<S> v = a.is_imm ? a.imm : ew_load_as<ew_c<S>>(a.p[0]);
#pragma unroll
    for (int j = 0; j < VEC; j++) r.v[j] = v;
  } else {
    const ew_vec<S, VEC> raw = *reinterpret_cast<const ew_vec<S, VEC> *>(a.p + base);
#pragma unroll
    for (int j = 0; j < VEC; j++) r.v[j] = ew_load_as<ew_c<S>>(raw.v[j]);
  }
  return r;
}

template <int VEC, typename F, typename O, typename... R>
__device__ __forceinline__ void ew_store_vec(O *out, const F &f, const R &...r) {
  ew_vec<O, VEC> o;
#pragma unroll
  for (int j = 0; j < VEC; j++) o.v[j] = ew_store_as<O>(f(r.v[j]...));
  *reinterpret_cast<ew_vec<O, VEC> *>(out) = o;
}

/* ---- the two kernels ---- */

template <int VEC, typename F, typename O, typename... S>
__global__ void __launch_bounds__(EM_GPU_THREADS)
    ew_vector_kernel(int64_t n, F f, O *out, ew_in<S>... in) {
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t nvec = n / VEC;
  for (int64_t v = first; v < nvec; v += step) {
    const int64_t base = v * VEC;
    ew_store_vec<VEC>(out + base, f, ew_load_vec<VEC>(in, base)...);
  }
  /* the last n % VEC elements, one per thread */
  for (int64_t i = nvec * VEC + first; i < n; i += step) out[i] = ew_store_as<O>(f(ew_load(in, i)...));
}

template <typename F, typename O, typename... S, size_t... I>
__device__ __forceinline__ void ew_strided_loop(std::index_sequence<I...>, int64_t n, const ew_shape &shape,
                                                const F &f, const ew_out<O> &out, const ew_in<S> &...in) {
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[sizeof...(S) + 1] = {};
    int64_t rest = i;
    /* Unrolled over every possible dim so that each size and stride is read from the
     * parameters at a constant index (a variable index copies them to local memory). */
#pragma unroll
    for (int d = EM_MAX_DIMS - 1; d >= 0; d--) {
      if (d >= shape.ndim) continue;
      int64_t c = rest;
      if (d > 0) {
        const int64_t size = shape.sizes[d];
        const int64_t q = shape.narrow ? (int64_t)((uint32_t)rest / (uint32_t)size) : rest / size;
        c = rest - q * size;
        rest = q;
      }
      off[0] += c * out.strides[d];
      (void)((off[I + 1] += c * in.strides[d]), ...);
    }
    out.p[off[0]] = ew_store_as<O>(f(ew_load(in, off[I + 1])...));
  }
}

template <typename F, typename O, typename... S>
__global__ void __launch_bounds__(EM_GPU_THREADS)
    ew_strided_kernel(int64_t n, ew_shape shape, F f, ew_out<O> out, ew_in<S>... in) {
  ew_strided_loop(std::index_sequence_for<S...>{}, n, shape, f, out, in...);
}

/* ---- host side ---- */

/* An input as the host describes it: a tensor (of the output's shape, any strides) or an
 * immediate value in the compute type. */
template <typename S> struct ew_operand {
  typedef S storage;
  const em_tensor *t;
  ew_c<S> imm;
};
template <typename S> static inline ew_operand<S> ew_tensor_operand(const em_tensor *t) {
  ew_operand<S> o;
  o.t = t;
  o.imm = ew_c<S>();
  return o;
}
template <typename S> static inline ew_operand<S> ew_immediate(ew_c<S> v) {
  ew_operand<S> o;
  o.t = NULL;
  o.imm = v;
  return o;
}

template <typename S> static ew_in<S> ew_make_in(const ew_operand<S> &x, const em_geom &g) {
  ew_in<S> in;
  in.p = x.t ? (const S *)em_tensor_ptr(x.t) : NULL;
  in.imm = x.imm;
  in.is_imm = x.t == NULL;
  for (int d = 0; d < EM_MAX_DIMS; d++) in.strides[d] = d < g.ndim ? g.strides[d] : 0;
  return in;
}

template <typename S> static em_ew_operand ew_plan_operand(const ew_operand<S> &x, const em_geom &g) {
  em_ew_operand o;
  o.addr = x.t ? (uintptr_t)em_tensor_ptr(x.t) : 0;
  o.elsize = (int)sizeof(S);
  o.stride = g.strides[0];
  o.immediate = x.t == NULL;
  return o;
}

template <typename F, typename O, typename... S, size_t... I>
static em_status ew_run_impl(std::index_sequence<I...>, const char *op, const F &f, em_tensor *out,
                             const ew_operand<S> &...in) {
  constexpr int K = sizeof...(S);
  const int64_t n = em_tensor_numel(out);
  if (n == 0) return EM_OK;
  const int device = out->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter(op, device, &stream);
  if (st) return st;
  /* An immediate has no tensor: the output stands in for it in the merge (it changes
   * nothing there) and its geometry is ignored. */
  const em_tensor *ts[K + 1] = {out, (in.t ? in.t : out)...};
  em_geom g[K + 1];
  em_geom_many(K + 1, ts, g);
  const em_ew_operand plan[K + 1] = {ew_plan_operand(ew_operand<O>{out, ew_c<O>()}, g[0]),
                                     ew_plan_operand(in, g[I + 1])...};
  constexpr int VEC = ew_vec_elems<O, S...>();
  if (em_ew_use_vector(K + 1, plan, g[0].ndim, VEC)) {
    const unsigned blocks = em_gpu_blocks((n + VEC - 1) / VEC, device);
    ew_vector_kernel<VEC><<<blocks, EM_GPU_THREADS, 0, stream>>>(n, f, (O *)em_tensor_ptr(out),
                                                                   ew_make_in(in, g[I + 1])...);
  } else {
    ew_shape shape;
    shape.ndim = g[0].ndim;
    shape.narrow = em_ew_index_fits_32(n);
    ew_out<O> o;
    o.p = (O *)em_tensor_ptr(out);
    for (int d = 0; d < EM_MAX_DIMS; d++) {
      shape.sizes[d] = d < g[0].ndim ? g[0].sizes[d] : 1;
      o.strides[d] = d < g[0].ndim ? g[0].strides[d] : 0;
    }
    ew_strided_kernel<<<em_gpu_blocks(n, device), EM_GPU_THREADS, 0, stream>>>(n, shape, f, o,
                                                                               ew_make_in(in, g[I + 1])...);
  }
  return em_gpu_launch_check(op);
}

/* out[i] = f(in[i]...) over out's elements; O is out's storage type, S... the inputs'. */
template <typename O, typename F, typename... S>
static em_status ew_run(const char *op, const F &f, em_tensor *out, const ew_operand<S> &...in) {
  return ew_run_impl<F, O>(std::index_sequence_for<S...>{}, op, f, out, in...);
}

/* ---- error flags: integer pow and fmod report bad operands as the CPU does ----
 * A device int set by the kernel, copied back once; the only synchronisation is on these
 * integer paths, which need the answer before returning. */
enum { EW_ERR_NEG_POW = 1, EW_ERR_ZERO_DIV = 2 }; /* = CORE_INT_ERR_* (core/host_device.h) */

struct ew_flag {
  int *dev;
  int device;
  cudaStream_t stream;
};

inline em_status ew_flag_begin(const char *op, const em_tensor *on, ew_flag *fl) {
  fl->dev = NULL;
  fl->device = on->storage->device.index;
  em_status st = em_gpu_enter(op, fl->device, &fl->stream);
  if (st) return st;
  fl->dev = (int *)em_gpu_malloc(sizeof(int), fl->device);
  if (!fl->dev) return em_last_status();
  cudaError_t err = cudaMemsetAsync(fl->dev, 0, sizeof(int), fl->stream);
  if (err != cudaSuccess) {
    em_gpu_free_ptr(fl->dev);
    fl->dev = NULL;
    return em_gpu_error(err, op);
  }
  return EM_OK;
}

/* Reads the flag (waiting for the kernel) and frees it; *value receives it. */
inline em_status ew_flag_end(const char *op, ew_flag *fl, int *value) {
  *value = 0;
  if (!fl->dev) return EM_OK;
  cudaError_t err = cudaMemcpyAsync(value, fl->dev, sizeof(int), cudaMemcpyDeviceToHost, fl->stream);
  em_gpu_free_ptr(fl->dev); /* stream-ordered: reused only by work queued after the copy */
  fl->dev = NULL;
  if (err == cudaSuccess) err = cudaStreamSynchronize(fl->stream);
  return err == cudaSuccess ? EM_OK : em_gpu_error(err, op);
}

/* ---- dtype dispatch with the dtype as a constant D (bool and uint8 share a storage type
 * but not semantics, so the dtype, not the C type, keys the functors) ---- */
#define EW_CASE(D_, ...)     \
  case D_: {                 \
    constexpr int D = D_;    \
    __VA_ARGS__;             \
  } break;
#define EW_DISPATCH_ALL(dtype, ...)                 \
  switch (dtype) {                                  \
    EW_CASE(EM_FLOAT32, __VA_ARGS__)                \
    EW_CASE(EM_FLOAT64, __VA_ARGS__)                \
    EW_CASE(EM_FLOAT16, __VA_ARGS__)                \
    EW_CASE(EM_BFLOAT16, __VA_ARGS__)               \
    EW_CASE(EM_INT32, __VA_ARGS__)                  \
    EW_CASE(EM_INT64, __VA_ARGS__)                  \
    EW_CASE(EM_UINT8, __VA_ARGS__)                  \
    EW_CASE(EM_BOOL, __VA_ARGS__)                   \
    default: break;                                 \
  }

static inline em_status ew_unsupported(const char *op, em_dtype dtype) {
  return em_set_error(EM_ERR_DTYPE, "%s: not supported for %s tensors on cuda", op, em_dtype_name(dtype));
}

} // namespace

#endif
