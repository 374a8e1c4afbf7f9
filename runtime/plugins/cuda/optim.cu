/* optim.cu - fused optimizer updates over whole parameter lists on the GPU: SGD (momentum,
 * dampening, nesterov, weight decay, maximize), Adam/AdamW, the gradient norm under
 * clip_grad_norm and the unscaling of gradients for loss scaling (amp_unscale). The
 * formulas are cpu/optim.c's, in the same order, so results match the CPU to rounding.
 *
 * Multi-tensor apply (after PyTorch's multi_tensor_apply): the contiguous tensors of a
 * call are cut into chunks of MT_CHUNK elements and one kernel launch runs one block per
 * chunk over all of them. The table of (pointers, numel) per tensor and (tensor, chunk)
 * per block travels as the kernel's argument (under 4 KB), so no table is copied to the
 * device and no launch waits; a list too long for one table takes a few launches.
 * Non-contiguous parameters (or gradients and states with other strides) fall back to a
 * strided kernel per tensor. float32/float64 compute in their own type; float16/bfloat16
 * tensors compute in float.
 *
 * The gradient norm reduces in two fixed stages (a partial per block, then one block over
 * the partials in order) into a device double that is copied to the host's *acc: that
 * copy is the one synchronisation of clip_grad_norm, inherent in its API (the host needs
 * the norm to decide the clipping factor). amp_unscale likewise syncs once to hand
 * found_inf to the host. */
#include <math.h>
#include "group_reduce.cuh"

namespace {

#define MT_CHUNK 65536
#define MT_THREADS 512
#define MT_MAX_BLOCKS 320

/* Tensors per table by the number of tensors per parameter, so that the argument stays
 * under the 4 KB that every CUDA version accepts. */
template <int DEPTH> struct mt_limit;
template <> struct mt_limit<1> { enum { tensors = 110 }; };
template <> struct mt_limit<2> { enum { tensors = 64 }; };
template <> struct mt_limit<3> { enum { tensors = 48 }; };
template <> struct mt_limit<4> { enum { tensors = 36 }; };

template <int DEPTH> struct mt_table {
  void *ptr[DEPTH][mt_limit<DEPTH>::tensors];
  int64_t numel[mt_limit<DEPTH>::tensors];
  int64_t first_block; /* this launch's first block among all of the call's (grad norm partials) */
  unsigned char tensor[MT_MAX_BLOCKS];
  int chunk[MT_MAX_BLOCKS];
};
static_assert(sizeof(mt_table<1>) < 3800 && sizeof(mt_table<2>) < 3800 && sizeof(mt_table<3>) < 3800 &&
                  sizeof(mt_table<4>) < 3800,
              "multi-tensor tables must leave room for the op's arguments within 4 KB");

/* Element access in the compute type. */
template <typename T> __device__ __forceinline__ typename em_ctype_of<T>::acc ld(const T *p) {
  return em_cast<typename em_ctype_of<T>::acc>(*p);
}
template <typename T> __device__ __forceinline__ void st(T *p, typename em_ctype_of<T>::acc v) { *p = em_cast<T>(v); }

/* ---- the element updates (cpu/optim.c) ---- */

template <typename T> struct sgd_op {
  typedef typename em_ctype_of<T>::acc A;
  A lr, wd, sign, mom, damp1;
  int has_wd, momentum, first, nesterov;
  __device__ __forceinline__ void operator()(T *const *e) const {
    A p = ld(e[0]), d = sign * ld(e[1]);
    if (has_wd) d += wd * p;
    if (momentum) {
      A b = first ? d : mom * ld(e[2]) + damp1 * d;
      st(e[2], b);
      d = nesterov ? d + mom * b : b;
    }
    st(e[0], p - lr * d);
  }
};

template <typename T> struct adam_op {
  typedef typename em_ctype_of<T>::acc A;
  A sign, wd, decay, omb1, b2, omb2, inv_bc2_sqrt, eps, step_size;
  int coupled_wd, decoupled_wd;
  __device__ __forceinline__ void operator()(T *const *e) const {
    A p0 = ld(e[0]), g = sign * ld(e[1]), m0 = ld(e[2]), v0 = ld(e[3]);
    if (coupled_wd) g += wd * p0;
    A p = decoupled_wd ? p0 * decay : p0;
    A m = m0 + omb1 * (g - m0);
    A v = b2 * v0 + omb2 * g * g;
    st(e[2], m);
    st(e[3], v);
    st(e[0], p - step_size * m / (sqrt(v) * inv_bc2_sqrt + eps));
  }
};

/* g *= inv_scale; found is set when g was inf or NaN before (PyTorch checks the scaled
 * value too). Every writer stores the same 1, so the race is benign. */
template <typename T> struct unscale_op {
  typedef typename em_ctype_of<T>::acc A;
  A inv_scale;
  int *found;
  __device__ __forceinline__ void operator()(T *const *e) const {
    A g = ld(e[0]);
    if (!isfinite(g)) *found = 1;
    st(e[0], g * inv_scale);
  }
};

/* ---- launches ---- */

template <typename T, int DEPTH, typename Op>
__global__ void __launch_bounds__(MT_THREADS) mt_apply_kernel(mt_table<DEPTH> tab, Op op) {
  const int t = tab.tensor[blockIdx.x];
  const int64_t start = (int64_t)tab.chunk[blockIdx.x] * MT_CHUNK;
  int64_t n = tab.numel[t] - start;
  if (n > MT_CHUNK) n = MT_CHUNK;
  T *base[DEPTH];
#pragma unroll
  for (int d = 0; d < DEPTH; d++) base[d] = (T *)tab.ptr[d][t] + start;
  for (int64_t i = threadIdx.x; i < n; i += MT_THREADS) {
    T *e[DEPTH];
#pragma unroll
    for (int d = 0; d < DEPTH; d++) e[d] = base[d] + i;
    op(e);
  }
}

template <int DEPTH> struct strided_set {
  em_geom g[DEPTH];
  void *base[DEPTH];
};

template <typename T, int DEPTH, typename Op>
__global__ void strided_apply_kernel(strided_set<DEPTH> s, int64_t n, Op op) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    T *e[DEPTH];
#pragma unroll
    for (int d = 0; d < DEPTH; d++) e[d] = (T *)s.base[d] + s.g[d].offset(i);
    op(e);
  }
}

/* One parameter's tensors (DEPTH of them, same shape). */
template <int DEPTH> struct param_set {
  const em_tensor *t[DEPTH];
};

template <int DEPTH> bool all_contiguous(const param_set<DEPTH> &p) {
  for (int d = 0; d < DEPTH; d++)
    if (!em_geom_is_contiguous(em_geom_of(p.t[d]))) return false;
  return true;
}

/* Calls launch(table, nblocks) for the contiguous sets, as few times as the table limits
 * allow. Chunks are numbered in list order, so block k of the whole call is always the
 * same piece of the same tensor. */
template <int DEPTH, typename Launch>
em_status mt_for_each(const char *op, int n, const param_set<DEPTH> *sets, Launch launch) {
  const int max_tensors = mt_limit<DEPTH>::tensors;
  mt_table<DEPTH> tab;
  int nt = 0, nb = 0;
  int64_t done_blocks = 0;
  tab.first_block = 0;
  for (int k = 0; k < n; k++) {
    int64_t numel = em_tensor_numel(sets[k].t[0]);
    if (numel == 0) continue;
    int64_t nchunks = (numel + MT_CHUNK - 1) / MT_CHUNK;
    if (nchunks > INT_MAX)
      return em_set_error(EM_ERR_UNSUPPORTED, "%s: a tensor of %lld elements is too large", op, (long long)numel);
    for (int d = 0; d < DEPTH; d++) tab.ptr[d][nt] = em_tensor_ptr(sets[k].t[d]);
    tab.numel[nt] = numel;
    for (int64_t c = 0; c < nchunks; c++) {
      tab.tensor[nb] = (unsigned char)nt;
      tab.chunk[nb] = (int)c;
      nb++;
      bool last_chunk = c == nchunks - 1;
      if (nb == MT_MAX_BLOCKS || (last_chunk && nt + 1 == max_tensors)) {
        em_status st = launch(tab, nb);
        if (st) return st;
        done_blocks += nb;
        tab.first_block = done_blocks;
        nb = 0;
        if (!last_chunk) { /* the rest of this tensor's chunks start the next table */
          for (int d = 0; d < DEPTH; d++) tab.ptr[d][0] = tab.ptr[d][nt];
          tab.numel[0] = tab.numel[nt];
          nt = 0;
        } else {
          nt = -1; /* the next tensor takes slot 0 */
        }
      }
    }
    nt++;
  }
  if (nb > 0) return launch(tab, nb);
  return EM_OK;
}

/* Blocks that mt_for_each launches for the contiguous sets (the grad norm's partials). */
template <int DEPTH> int64_t mt_block_count(int n, const param_set<DEPTH> *sets) {
  int64_t total = 0;
  for (int k = 0; k < n; k++) total += (em_tensor_numel(sets[k].t[0]) + MT_CHUNK - 1) / MT_CHUNK;
  return total;
}

template <typename T, int DEPTH, typename Op>
em_status apply_all(const char *op, int n, const param_set<DEPTH> *sets, const Op &fn, int device, cudaStream_t stream) {
  /* contiguous sets first, in one or a few launches */
  param_set<DEPTH> *flat = (param_set<DEPTH> *)malloc(sizeof(param_set<DEPTH>) * (n ? n : 1));
  if (!flat) return em_set_error(EM_ERR_MEMORY, "%s: out of host memory", op);
  int nflat = 0;
  for (int k = 0; k < n; k++)
    if (all_contiguous(sets[k])) flat[nflat++] = sets[k];
  em_status st = mt_for_each<DEPTH>(op, nflat, flat, [&](const mt_table<DEPTH> &tab, int nb) {
    mt_apply_kernel<T, DEPTH, Op><<<nb, MT_THREADS, 0, stream>>>(tab, fn);
    return em_gpu_launch_check(op);
  });
  free(flat);
  /* then each strided one */
  for (int k = 0; k < n && !st; k++) {
    if (all_contiguous(sets[k])) continue;
    int64_t numel = em_tensor_numel(sets[k].t[0]);
    if (numel == 0) continue;
    strided_set<DEPTH> s;
    em_geom_many(DEPTH, sets[k].t, s.g);
    for (int d = 0; d < DEPTH; d++) s.base[d] = em_tensor_ptr(sets[k].t[d]);
    strided_apply_kernel<T, DEPTH, Op><<<em_gpu_blocks(numel, device), EM_GPU_THREADS, 0, stream>>>(s, numel, fn);
    st = em_gpu_launch_check(op);
  }
  return st;
}

/* The parameters of one dtype that have gradients, as sets of DEPTH tensors. */
template <int DEPTH>
int gather_sets(int n, em_dtype dtype, const em_tensor *const *lists[DEPTH], param_set<DEPTH> *out) {
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (!lists[1 < DEPTH ? 1 : 0][i] || lists[0][i]->dtype != dtype) continue;
    for (int d = 0; d < DEPTH; d++) out[k].t[d] = lists[d][i];
    k++;
  }
  return k;
}

const em_dtype FLOAT_DTYPES[4] = {EM_FLOAT32, EM_FLOAT64, EM_FLOAT16, EM_BFLOAT16};

/* The device of the first parameter with a gradient, or -1 when none has one. */
int device_of(int n, const em_tensor *const *params, const em_tensor *const *grads) {
  for (int i = 0; i < n; i++)
    if (grads[i]) return params[i]->storage->device.index;
  return -1;
}

/* Runs body(T, DEPTH sets, count) for each floating dtype present. */
template <int DEPTH, typename Body>
em_status for_each_dtype(const char *op, int n, const em_tensor *const *lists[DEPTH], Body body) {
  param_set<DEPTH> *sets = (param_set<DEPTH> *)malloc(sizeof(param_set<DEPTH>) * (n ? n : 1));
  if (!sets) return em_set_error(EM_ERR_MEMORY, "%s: out of host memory", op);
  em_status st = EM_OK;
  for (int k = 0; k < 4 && !st; k++) {
    int m = gather_sets<DEPTH>(n, FLOAT_DTYPES[k], lists, sets);
    if (m) st = body(FLOAT_DTYPES[k], sets, m);
  }
  /* a parameter of another dtype was refused by runtime/optim; say so if one slips through */
  for (int i = 0; i < n && !st; i++) {
    const em_tensor *g = lists[1 < DEPTH ? 1 : 0][i];
    em_dtype d = g ? lists[0][i]->dtype : EM_FLOAT32;
    if (d != EM_FLOAT32 && d != EM_FLOAT64 && d != EM_FLOAT16 && d != EM_BFLOAT16)
      st = em_set_error(EM_ERR_DTYPE, "%s: expected floating tensors on cuda, got %s", op, em_dtype_name(d));
  }
  free(sets);
  return st;
}

template <typename T> sgd_op<T> make_sgd(const em_sgd_args *a) {
  typedef typename em_ctype_of<T>::acc A;
  sgd_op<T> o;
  o.lr = (A)a->lr, o.wd = (A)a->weight_decay, o.sign = (A)(a->maximize ? -1.0 : 1.0), o.mom = (A)a->momentum;
  o.damp1 = (A)(1.0 - a->dampening);
  o.has_wd = a->weight_decay != 0, o.momentum = a->momentum != 0, o.first = a->first_step, o.nesterov = a->nesterov;
  return o;
}

em_status gpu_optim_sgd(int n, em_tensor *const *params, const em_tensor *const *grads, em_tensor *const *bufs,
                        const em_sgd_args *a) {
  const char *op = "sgd";
  int device = device_of(n, (const em_tensor *const *)params, grads);
  if (device < 0) return EM_OK;
  cudaStream_t stream;
  em_status st = em_gpu_enter(op, device, &stream);
  if (st) return st;
  if (a->momentum != 0) {
    const em_tensor *const *lists[3] = {(const em_tensor *const *)params, grads, (const em_tensor *const *)bufs};
    return for_each_dtype<3>(op, n, lists, [&](em_dtype dt, const param_set<3> *sets, int m) -> em_status {
      EM_DISPATCH_FLOAT(op, dt, T, return apply_all<T, 3>(op, m, sets, make_sgd<T>(a), device, stream));
      return EM_OK;
    });
  }
  const em_tensor *const *lists[2] = {(const em_tensor *const *)params, grads};
  return for_each_dtype<2>(op, n, lists, [&](em_dtype dt, const param_set<2> *sets, int m) -> em_status {
    EM_DISPATCH_FLOAT(op, dt, T, return apply_all<T, 2>(op, m, sets, make_sgd<T>(a), device, stream));
    return EM_OK;
  });
}

em_status gpu_optim_adam(int n, em_tensor *const *params, const em_tensor *const *grads, em_tensor *const *exp_avgs,
                         em_tensor *const *exp_avg_sqs, const em_adam_args *a) {
  const char *op = a->decoupled ? "adamw" : "adam";
  int device = device_of(n, (const em_tensor *const *)params, grads);
  if (device < 0) return EM_OK;
  cudaStream_t stream;
  em_status st = em_gpu_enter(op, device, &stream);
  if (st) return st;
  const double bc1 = 1.0 - pow(a->beta1, (double)a->step), bc2 = 1.0 - pow(a->beta2, (double)a->step);
  const em_tensor *const *lists[4] = {(const em_tensor *const *)params, grads, (const em_tensor *const *)exp_avgs,
                                      (const em_tensor *const *)exp_avg_sqs};
  return for_each_dtype<4>(op, n, lists, [&](em_dtype dt, const param_set<4> *sets, int m) -> em_status {
    EM_DISPATCH_FLOAT(op, dt, T, {
      typedef typename em_ctype_of<T>::acc A;
      adam_op<T> o;
      o.sign = (A)(a->maximize ? -1.0 : 1.0), o.wd = (A)a->weight_decay, o.decay = (A)(1.0 - a->lr * a->weight_decay);
      o.omb1 = (A)(1.0 - a->beta1), o.b2 = (A)a->beta2, o.omb2 = (A)(1.0 - a->beta2);
      o.inv_bc2_sqrt = (A)(1.0 / sqrt(bc2)), o.eps = (A)a->eps, o.step_size = (A)(a->lr / bc1);
      o.coupled_wd = !a->decoupled && a->weight_decay != 0, o.decoupled_wd = a->decoupled && a->weight_decay != 0;
      return apply_all<T, 4>(op, m, sets, o, device, stream);
    });
    return EM_OK;
  });
}

/* ---- gradient norm ---- */

enum { NORM_SQUARES = 0, NORM_MAX = 1, NORM_POW = 2 };

__host__ __device__ __forceinline__ double norm_combine(int kind, double acc, double v) {
  if (kind == NORM_MAX) return (v > acc || v != v) ? v : acc; /* NaN wins, as on the CPU */
  return acc + v;
}

template <typename T> __device__ __forceinline__ double norm_term(int kind, double p, T x) {
  double v = (double)ld(&x);
  if (kind == NORM_SQUARES) return v * v;
  if (kind == NORM_MAX) return fabs(v);
  return pow(fabs(v), p);
}

/* The block's combination of its threads' values, in a fixed tree; valid in thread 0. */
__device__ __forceinline__ double norm_block(int kind, double v) {
  if (kind == NORM_MAX) return em_group_reduce(v, [](double a, double b) { return norm_combine(NORM_MAX, a, b); }, 0.0);
  return em_block_sum(v);
}

template <typename T>
__global__ void __launch_bounds__(MT_THREADS) mt_norm_kernel(mt_table<1> tab, int kind, double p, double *partials) {
  const int t = tab.tensor[blockIdx.x];
  const int64_t start = (int64_t)tab.chunk[blockIdx.x] * MT_CHUNK;
  int64_t n = tab.numel[t] - start;
  if (n > MT_CHUNK) n = MT_CHUNK;
  const T *g = (const T *)tab.ptr[0][t] + start;
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += MT_THREADS) acc = norm_combine(kind, acc, norm_term(kind, p, g[i]));
  acc = norm_block(kind, acc);
  if (threadIdx.x == 0) partials[tab.first_block + blockIdx.x] = acc;
}

template <typename T>
__global__ void strided_norm_kernel(em_geom geom, const T *base, int64_t n, int kind, double p, double *partials) {
  double acc = 0;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    acc = norm_combine(kind, acc, norm_term(kind, p, base[geom.offset(i)]));
  acc = norm_block(kind, acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void norm_finish_kernel(const double *partials, int64_t n, int kind, double *result) {
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc = norm_combine(kind, acc, partials[i]);
  acc = norm_block(kind, acc);
  if (threadIdx.x == 0) *result = acc;
}

em_status gpu_optim_grad_norm(int n, const em_tensor *const *grads, double p, double *acc) {
  const char *op = "clip_grad_norm";
  int device = device_of(n, grads, grads);
  if (device < 0) return EM_OK;
  cudaStream_t stream;
  em_status st = em_gpu_enter(op, device, &stream);
  if (st) return st;
  const int kind = isinf(p) ? NORM_MAX : p == 2 ? NORM_SQUARES : NORM_POW;
  const em_tensor *const *lists[1] = {grads};
  /* 1. how many partials: a block per chunk of the contiguous gradients, a fixed grid per
   * strided one, in list order by dtype */
  int64_t nparts = 0;
  st = for_each_dtype<1>(op, n, lists, [&](em_dtype, const param_set<1> *sets, int m) -> em_status {
    for (int k = 0; k < m; k++) {
      int64_t numel = em_tensor_numel(sets[k].t[0]);
      if (all_contiguous(sets[k])) nparts += (numel + MT_CHUNK - 1) / MT_CHUNK;
      else if (numel) nparts += em_gpu_blocks(numel, device);
    }
    return EM_OK;
  });
  if (st || nparts == 0) return st;
  double *partials = (double *)em_gpu_malloc(sizeof(double) * (size_t)(nparts + 1), device);
  if (!partials) return em_last_status();
  /* 2. the partials, 3. their combination */
  int64_t at = 0;
  st = for_each_dtype<1>(op, n, lists, [&](em_dtype dt, const param_set<1> *sets, int m) -> em_status {
    param_set<1> *flat = (param_set<1> *)malloc(sizeof(param_set<1>) * m);
    if (!flat) return em_set_error(EM_ERR_MEMORY, "%s: out of host memory", op);
    int nflat = 0;
    for (int k = 0; k < m; k++)
      if (all_contiguous(sets[k])) flat[nflat++] = sets[k];
    int64_t base = at;
    em_status s2 = mt_for_each<1>(op, nflat, flat, [&](const mt_table<1> &tab, int nb) -> em_status {
      EM_DISPATCH_FLOAT(op, dt, T, mt_norm_kernel<T><<<nb, MT_THREADS, 0, stream>>>(tab, kind, p, partials + base));
      return em_gpu_launch_check(op);
    });
    at += mt_block_count<1>(nflat, flat);
    free(flat);
    for (int k = 0; k < m && !s2; k++) {
      if (all_contiguous(sets[k])) continue;
      int64_t numel = em_tensor_numel(sets[k].t[0]);
      if (!numel) continue;
      unsigned blocks = em_gpu_blocks(numel, device);
      em_geom g = em_geom_of(sets[k].t[0]);
      EM_DISPATCH_FLOAT(op, dt, T,
                        strided_norm_kernel<T><<<blocks, EM_GPU_THREADS, 0, stream>>>(
                            g, (const T *)em_tensor_ptr(sets[k].t[0]), numel, kind, p, partials + at));
      s2 = em_gpu_launch_check(op);
      at += blocks;
    }
    return s2;
  });
  double result = 0;
  if (!st) {
    norm_finish_kernel<<<1, 512, 0, stream>>>(partials, nparts, kind, partials + nparts);
    st = em_gpu_launch_check(op);
  }
  if (!st) { /* the one synchronisation: the host needs the norm */
    cudaError_t err = cudaMemcpyAsync(&result, partials + nparts, sizeof result, cudaMemcpyDeviceToHost, stream);
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
    if (err != cudaSuccess) st = em_gpu_error(err, op);
  }
  em_gpu_free_ptr(partials);
  if (st) return st;
  *acc = norm_combine(kind, *acc, result);
  return EM_OK;
}

/* ---- loss scaling ---- */

em_status gpu_amp_unscale(int n, em_tensor *const *grads, double inv_scale, int *found_inf) {
  const char *op = "amp_unscale";
  *found_inf = 0;
  const em_tensor *const *cg = (const em_tensor *const *)grads;
  int device = device_of(n, cg, cg);
  if (device < 0) return EM_OK;
  cudaStream_t stream;
  em_status st = em_gpu_enter(op, device, &stream);
  if (st) return st;
  int *flag = (int *)em_gpu_malloc(sizeof(int), device);
  if (!flag) return em_last_status();
  cudaError_t err = cudaMemsetAsync(flag, 0, sizeof(int), stream);
  if (err != cudaSuccess) st = em_gpu_error(err, op);
  const em_tensor *const *lists[1] = {cg};
  if (!st)
    st = for_each_dtype<1>(op, n, lists, [&](em_dtype dt, const param_set<1> *sets, int m) -> em_status {
      EM_DISPATCH_FLOAT(op, dt, T, {
        unscale_op<T> o;
        o.inv_scale = (typename em_ctype_of<T>::acc)inv_scale;
        o.found = flag;
        return apply_all<T, 1>(op, m, sets, o, device, stream);
      });
      return EM_OK;
    });
  int host_flag = 0;
  if (!st) { /* the one synchronisation of a scaler step */
    err = cudaMemcpyAsync(&host_flag, flag, sizeof host_flag, cudaMemcpyDeviceToHost, stream);
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
    if (err != cudaSuccess) st = em_gpu_error(err, op);
  }
  em_gpu_free_ptr(flag);
  if (!st) *found_inf = host_flag != 0;
  return st;
}

}  // namespace

/* The family's entries of the backend table (table.c; backend.h says what each computes). */
em_status em_gpu_optim_sgd(int n, em_tensor *const *params, const em_tensor *const *grads, em_tensor *const *bufs,
                           const em_sgd_args *args) {
  return gpu_optim_sgd(n, params, grads, bufs, args);
}
em_status em_gpu_optim_adam(int n, em_tensor *const *params, const em_tensor *const *grads,
                            em_tensor *const *exp_avgs, em_tensor *const *exp_avg_sqs, const em_adam_args *args) {
  return gpu_optim_adam(n, params, grads, exp_avgs, exp_avg_sqs, args);
}
em_status em_gpu_optim_grad_norm(int n, const em_tensor *const *grads, double p, double *acc) {
  return gpu_optim_grad_norm(n, grads, p, acc);
}
em_status em_gpu_amp_unscale(int n, em_tensor *const *grads, double inv_scale, int *found_inf) {
  return gpu_amp_unscale(n, grads, inv_scale, found_inf);
}
