/* loss.cu - losses over class indices on the GPU: cross_entropy fused with its log_softmax
 * (label smoothing, class weights, ignore_index) and nll_loss on log-probabilities, as
 * cpu/nn_loss.c computes them (same formulas, same error for a target out of range).
 *
 * Forward: one pass over the logits per sample computes the logsumexp online (running max
 * and rescaled sum), the class weights' sums for the smoothing term and the loss; rows of
 * contiguous classes (S = 1) get a warp each (a block when C is large), strided samples
 * (S > 1) a thread each so that neighbouring threads read neighbouring logits. Per-sample
 * losses and weights go to a temporary buffer and are summed by a fixed two-stage tree:
 * the mean is deterministic. Targets are checked in the same pass: a bad one raises a
 * flag (its position), and the op's one synchronisation reads the flag back.
 *
 * Backward: one thread per logit, gx = (a + b W) exp(x - lse) - b w_c - a [c = t] with
 * a = g (1 - e) w_t and b = g e / C (see cpu/nn_loss.c); the total weight of the mean is
 * read on the device, so the backward never synchronises. */
#include <math.h>
#include "group_reduce.cuh"
#include "nn_gpu.h"

namespace {

struct loss_args {
  int64_t N, C, S;
  int64_t ignore_index;
  int base;
  int log_input;
  int reduction; /* 0 none, 1 mean, 2 sum */
  double smoothing;
};

/* Running logsumexp: max m and sum s of exp(x - m). -inf values add nothing (and would
 * give NaN through -inf - -inf); a +inf max makes the result NaN, as the CPU's
 * exp(inf - inf) does. */
template <typename A> struct lse_acc {
  A m, s;
};

template <typename A> __device__ __forceinline__ void lse_add(lse_acc<A> &r, A v) {
  if (v == -(A)INFINITY) return;
  if (v > r.m) {
    r.s = (r.m == -(A)INFINITY ? (A)0 : r.s * exp(r.m - v)) + (A)1;
    r.m = v;
  } else {
    r.s += exp(v - r.m); /* NaN v lands here and makes s NaN, as on the CPU */
  }
}

template <typename A> __device__ __forceinline__ lse_acc<A> lse_combine(lse_acc<A> a, lse_acc<A> b) {
  A m = a.m > b.m ? a.m : b.m;
  if (m == -(A)INFINITY) return a; /* both empty */
  lse_acc<A> r;
  r.m = m;
  r.s = (a.m == -(A)INFINITY ? (A)0 : a.s * exp(a.m - m)) + (b.m == -(A)INFINITY ? (A)0 : b.s * exp(b.m - m));
  return r;
}

template <typename A> __device__ __forceinline__ A lse_value(lse_acc<A> r) {
  if (r.m == -(A)INFINITY) return r.m; /* every logit -inf (or NaN): the CPU's -inf */
  if (r.m == (A)INFINITY) return (A)NAN;
  return r.m + log(r.s);
}

template <typename A> struct lse_shfl_op {
  __device__ __forceinline__ lse_acc<A> operator()(lse_acc<A> a, lse_acc<A> b) const { return lse_combine(a, b); }
};

/* Shuffles of the pair, for em_warp_reduce. */
template <typename A> __device__ __forceinline__ lse_acc<A> em_shfl_down(lse_acc<A> v, int delta) {
  lse_acc<A> r;
  r.m = __shfl_down_sync(EM_FULL_MASK, v.m, delta);
  r.s = __shfl_down_sync(EM_FULL_MASK, v.s, delta);
  return r;
}
template <typename A> __device__ __forceinline__ lse_acc<A> em_shfl(lse_acc<A> v, int lane) {
  lse_acc<A> r;
  r.m = __shfl_sync(EM_FULL_MASK, v.m, lane);
  r.s = __shfl_sync(EM_FULL_MASK, v.s, lane);
  return r;
}

/* The per-sample loss once the logsumexp l and (when smoothing) sum_c w_c x_c and
 * sum_c w_c are known; mirrors forward_##S_ of cpu/nn_loss.c. Returns false for a target
 * out of range (recorded by the caller). */
template <typename T, typename I, typename A>
__device__ __forceinline__ bool sample_loss(const T *xs, int64_t cstride, I target, const T *w, A l, double sxw,
                                            double sw, const loss_args &a, double *loss, double *wt) {
  int64_t t = (int64_t)target;
  if (t == a.ignore_index) {
    *loss = 0, *wt = 0;
    return true;
  }
  if (t < a.base || t >= a.base + a.C) {
    *loss = 0, *wt = 0;
    return false;
  }
  t -= a.base;
  double wt_ = w ? (double)em_cast<A>(w[t]) : 1.0;
  double v = -(1 - a.smoothing) * wt_ * ((double)em_cast<A>(xs[t * cstride]) - (double)l);
  if (a.smoothing > 0) v -= a.smoothing / (double)a.C * (sxw - (double)l * sw); /* sum_c w_c (x_c - l) */
  *loss = v, *wt = wt_;
  return true;
}

/* S == 1: a group (warp, or block when BLOCK) per sample row of C contiguous logits. */
template <typename T, typename I, bool BLOCK>
__global__ void loss_rows_kernel(const T *__restrict__ x, const I *__restrict__ target, const T *__restrict__ w,
                                 T *lse_out, double *loss, double *wt, unsigned long long *bad, loss_args a) {
  typedef typename em_ctype_of<T>::acc A;
  const int64_t rows_per_step = (int64_t)gridDim.x * blockDim.y;
  const bool smooth = a.smoothing > 0;
  for (int64_t n = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; n < a.N; n += rows_per_step) {
    const T *xr = x + n * a.C;
    lse_acc<A> r = {-(A)INFINITY, (A)0};
    double sxw = 0, sw = 0;
    for (int64_t c = threadIdx.x; c < a.C; c += blockDim.x) {
      A v = em_cast<A>(xr[c]);
      if (!a.log_input) lse_add(r, v);
      if (smooth) {
        double wc = w ? (double)em_cast<A>(w[c]) : 1.0;
        sxw += wc * (double)v, sw += wc;
      }
    }
    A l = 0;
    if (!a.log_input) {
      lse_acc<A> empty = {-(A)INFINITY, (A)0};
      l = lse_value(em_group_reduce(r, lse_shfl_op<A>(), empty));
    }
    if (smooth) {
      auto add = [](double p, double q) { return p + q; };
      sxw = em_group_reduce(sxw, add, 0.0);
      sw = em_group_reduce(sw, add, 0.0);
    }
    if (threadIdx.x == 0) {
      if (lse_out) lse_out[n] = em_cast<T>(l);
      if (!sample_loss<T, I, A>(xr, 1, target[n], w, l, sxw, sw, a, &loss[n], &wt[n])) em_flag_bad(bad, n);
    }
  }
}

/* S > 1: a thread per sample; neighbouring threads read neighbouring logits. */
template <typename T, typename I>
__global__ void loss_strided_kernel(const T *__restrict__ x, const I *__restrict__ target, const T *__restrict__ w,
                                    T *lse_out, double *loss, double *wt, unsigned long long *bad, loss_args a) {
  typedef typename em_ctype_of<T>::acc A;
  const int64_t ns = a.N * a.S;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < ns; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t n = i / a.S, s = i - n * a.S;
    const T *xs = x + n * a.C * a.S + s;
    lse_acc<A> r = {-(A)INFINITY, (A)0};
    double sxw = 0, sw = 0;
    for (int64_t c = 0; c < a.C; c++) {
      A v = em_cast<A>(xs[c * a.S]);
      if (!a.log_input) lse_add(r, v);
      if (a.smoothing > 0) {
        double wc = w ? (double)em_cast<A>(w[c]) : 1.0;
        sxw += wc * (double)v, sw += wc;
      }
    }
    A l = a.log_input ? (A)0 : lse_value(r);
    if (lse_out) lse_out[i] = em_cast<T>(l);
    if (!sample_loss<T, I, A>(xs, a.S, target[i], w, l, sxw, sw, a, &loss[i], &wt[i])) em_flag_bad(bad, i);
  }
}

/* Stage 1 of the sums: block g adds its contiguous range of loss[] and wt[]. */
__global__ void loss_partials_kernel(const double *loss, const double *wt, int64_t n, int64_t per_block,
                                     double *partials) {
  int64_t lo = (int64_t)blockIdx.x * per_block, hi = lo + per_block < n ? lo + per_block : n;
  double sl = 0, sw = 0;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) sl += loss[i], sw += wt[i];
  sl = em_block_sum(sl);
  sw = em_block_sum(sw);
  if (threadIdx.x == 0) partials[2 * blockIdx.x] = sl, partials[2 * blockIdx.x + 1] = sw;
}

/* Stage 2 (one block): the totals, the reduced loss and the total weight. */
template <typename T>
__global__ void loss_finish_kernel(const double *partials, int nparts, T *out, T *total_weight, int reduction) {
  double sl = 0, sw = 0;
  for (int g = threadIdx.x; g < nparts; g += blockDim.x) sl += partials[2 * g], sw += partials[2 * g + 1];
  sl = em_block_sum(sl);
  sw = em_block_sum(sw);
  if (threadIdx.x != 0) return;
  *total_weight = em_cast<T>((typename em_ctype_of<T>::acc)sw);
  if (reduction != 0) {
    double r = reduction == 1 ? sl / sw : sl; /* mean over nothing: 0 / 0 = NaN, as PyTorch */
    *out = em_cast<T>((typename em_ctype_of<T>::acc)r);
  }
}

template <typename T>
__global__ void loss_store_kernel(T *out, const double *loss, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = em_cast<T>((typename em_ctype_of<T>::acc)loss[i]);
}

/* The sum of the class weights (the smoothing term's W), in one block. */
template <typename T>
__global__ void weight_sum_kernel(const T *w, int64_t C, double *sum) {
  double s = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += (double)em_cast<typename em_ctype_of<T>::acc>(w[c]);
  s = em_block_sum(s);
  if (threadIdx.x == 0) *sum = s;
}

template <typename T, typename I>
__global__ void loss_backward_kernel(T *__restrict__ gx, const T *__restrict__ gout, int per_sample,
                                     const T *total_weight, const T *__restrict__ x, const T *__restrict__ lse,
                                     const I *__restrict__ target, const T *__restrict__ w, const double *wsum,
                                     loss_args a) {
  typedef typename em_ctype_of<T>::acc A;
  const int64_t total = a.N * a.C * a.S;
  const A e = (A)a.smoothing, ec = (A)(a.smoothing / (double)a.C);
  const A W = (A)(wsum ? *wsum : (double)a.C);
  const double scale = a.reduction == 1 ? 1.0 / (double)em_cast<A>(*total_weight) : 1.0;
  for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += (int64_t)gridDim.x * blockDim.x) {
    int64_t s = 0, q = k;
    if (a.S != 1) {
      q = k / a.S;
      s = k - q * a.S;
    }
    int64_t n = q / a.C, c = q - n * a.C, i = n * a.S + s;
    int64_t t = (int64_t)target[i];
    if (t == a.ignore_index || t < a.base || t >= a.base + a.C) { /* bad targets never pass the forward */
      gx[k] = em_cast<T>((A)0);
      continue;
    }
    t -= a.base;
    A gs = (A)((double)em_cast<A>(gout[per_sample ? i : 0]) * scale);
    A wt = w ? em_cast<A>(w[t]) : (A)1, wc = w ? em_cast<A>(w[c]) : (A)1;
    A g_a = gs * ((A)1 - e) * wt; /* the class term's factor */
    A g;
    if (a.log_input) {
      g = -gs * ec * wc;
    } else {
      A g_b = gs * ec; /* the smoothing term's factor */
      g = (g_a + g_b * W) * exp(em_cast<A>(x[k]) - em_cast<A>(lse[i])) - g_b * wc;
    }
    if (c == t) g -= g_a;
    gx[k] = em_cast<T>(g);
  }
}

template <typename T, typename I>
em_status class_loss_typed(const char *op, em_tensor *out, em_tensor *lse, em_tensor *total_weight,
                           const em_tensor *x, const em_tensor *target, const em_tensor *weight, const loss_args &a,
                           int device, cudaStream_t stream) {
  const int64_t ns = a.N * a.S;
  /* deterministic split of the sums: depends on ns only */
  const int64_t per_block = 4096;
  int64_t nparts64 = (ns + per_block - 1) / per_block;
  int nparts = (int)(nparts64 < 1 ? 1 : nparts64 > 1024 ? 1024 : nparts64);
  int64_t chunk = (ns + nparts - 1) / nparts;
  if (chunk < 1) chunk = 1;
  em_gpu_carver cv = {0, nullptr};
  cv.take<unsigned long long>(1);
  cv.take<double>(ns ? ns : 1);
  cv.take<double>(ns ? ns : 1);
  cv.take<double>(2 * (size_t)nparts);
  char *tmp = (char *)em_gpu_malloc(cv.used, device);
  if (!tmp) return em_last_status();
  cv = {0, tmp};
  unsigned long long *bad = cv.take<unsigned long long>(1);
  double *loss = cv.take<double>(ns ? ns : 1), *wt = cv.take<double>(ns ? ns : 1);
  double *partials = cv.take<double>(2 * (size_t)nparts);

  em_status st = EM_OK;
  const T *xp = (const T *)em_tensor_ptr(x), *wp = weight ? (const T *)em_tensor_ptr(weight) : nullptr;
  const I *tp = (const I *)em_tensor_ptr(target);
  T *lp = lse ? (T *)em_tensor_ptr(lse) : nullptr;
  cudaError_t err = cudaMemsetAsync(bad, 0xff, sizeof *bad, stream);
  if (err != cudaSuccess) st = em_gpu_error(err, op);
  if (!st && ns > 0) {
    int sms = em_gpu_sm_count(device);
    if (a.S == 1 && a.C >= 1024) { /* a block per row */
      int64_t blocks = a.N < (int64_t)sms * 8 ? a.N : (int64_t)sms * 8;
      loss_rows_kernel<T, I, true><<<(unsigned)blocks, dim3(256, 1), 0, stream>>>(xp, tp, wp, lp, loss, wt, bad, a);
    } else if (a.S == 1) { /* a warp per row, 8 rows per block */
      int64_t blocks = (a.N + 7) / 8;
      if (blocks > (int64_t)sms * 32) blocks = (int64_t)sms * 32;
      loss_rows_kernel<T, I, false><<<(unsigned)blocks, dim3(32, 8), 0, stream>>>(xp, tp, wp, lp, loss, wt, bad, a);
    } else {
      loss_strided_kernel<T, I><<<em_gpu_blocks(ns, device), EM_GPU_THREADS, 0, stream>>>(xp, tp, wp, lp, loss, wt,
                                                                                         bad, a);
    }
    st = em_gpu_launch_check(op);
  }
  if (!st) {
    loss_partials_kernel<<<(unsigned)nparts, 256, 0, stream>>>(loss, wt, ns, chunk, partials);
    st = em_gpu_launch_check(op);
  }
  T *op_out = (T *)em_tensor_ptr(out);
  if (!st) {
    loss_finish_kernel<T><<<1, 256, 0, stream>>>(partials, nparts, op_out, (T *)em_tensor_ptr(total_weight),
                                                 a.reduction);
    st = em_gpu_launch_check(op);
  }
  if (!st && a.reduction == 0 && ns > 0) {
    loss_store_kernel<T><<<em_gpu_blocks(ns, device), EM_GPU_THREADS, 0, stream>>>(op_out, loss, ns);
    st = em_gpu_launch_check(op);
  }
  /* The one synchronisation: was any target out of range? */
  unsigned long long first_bad = EM_NO_BAD_INDEX;
  if (!st) st = em_gpu_read_flags(op, bad, &first_bad, 1, stream);
  em_gpu_free_ptr(tmp);
  if (st || first_bad == EM_NO_BAD_INDEX) return st;
  int64_t v = 0;
  if ((st = em_gpu_read_index(op, tp, sizeof(I) == 8, (int64_t)first_bad, &v, stream))) return st;
  return em_set_error(EM_ERR_INDEX, "%s: target %lld is out of range for %lld classes (expected %d..%lld%s)", op,
                      (long long)v, (long long)a.C, a.base, (long long)(a.base + a.C - 1),
                      a.ignore_index < a.base ? "" : ", or ignore_index");
}

template <typename T, typename I>
em_status class_loss_backward_typed(const char *op, em_tensor *gx, const em_tensor *gout, const em_tensor *x,
                                    const em_tensor *lse, const em_tensor *total_weight, const em_tensor *target,
                                    const em_tensor *weight, const loss_args &a, int device, cudaStream_t stream) {
  const int64_t total = a.N * a.C * a.S;
  if (total == 0) return EM_OK;
  double *wsum = nullptr;
  em_status st = EM_OK;
  if (weight && a.smoothing > 0 && !a.log_input) { /* W matters only through the smoothing term */
    wsum = (double *)em_gpu_malloc(sizeof(double), device);
    if (!wsum) return em_last_status();
    weight_sum_kernel<T><<<1, 256, 0, stream>>>((const T *)em_tensor_ptr(weight), a.C, wsum);
    st = em_gpu_launch_check(op);
  }
  if (!st) {
    loss_backward_kernel<T, I><<<em_gpu_blocks(total, device), EM_GPU_THREADS, 0, stream>>>(
        (T *)em_tensor_ptr(gx), (const T *)em_tensor_ptr(gout), a.reduction == 0,
        a.reduction == 1 ? (const T *)em_tensor_ptr(total_weight) : nullptr, (const T *)em_tensor_ptr(x),
        lse ? (const T *)em_tensor_ptr(lse) : nullptr, (const I *)em_tensor_ptr(target),
        weight ? (const T *)em_tensor_ptr(weight) : nullptr, wsum, a);
    st = em_gpu_launch_check(op);
  }
  if (wsum) em_gpu_free_ptr(wsum);
  return st;
}

loss_args args_of(const em_tensor *x, const em_class_loss_params *p) {
  loss_args a;
  a.N = x->sizes[0], a.C = x->sizes[1], a.S = 1;
  for (int d = 2; d < x->ndim; d++) a.S *= x->sizes[d];
  a.ignore_index = p->ignore_index;
  a.base = p->base;
  a.log_input = p->log_input;
  a.reduction = p->reduction;
  a.smoothing = p->label_smoothing;
  return a;
}

em_status gpu_class_loss(em_tensor *out, em_tensor *lse, em_tensor *total_weight, const em_tensor *x,
                         const em_tensor *target, const em_tensor *weight, const em_class_loss_params *p) {
  const char *op = p->log_input ? "nll_loss" : "cross_entropy";
  int device = x->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter(op, device, &stream);
  if (st) return st;
  loss_args a = args_of(x, p);
  if (target->dtype != EM_INT32 && target->dtype != EM_INT64)
    return em_set_error(EM_ERR_DTYPE, "%s: expected int32 or int64 targets, got %s", op, em_dtype_name(target->dtype));
  bool is64 = target->dtype == EM_INT64;
  EM_DISPATCH_FLOAT(op, x->dtype, T,
                    st = is64 ? class_loss_typed<T, int64_t>(op, out, lse, total_weight, x, target, weight, a, device,
                                                             stream)
                              : class_loss_typed<T, int32_t>(op, out, lse, total_weight, x, target, weight, a, device,
                                                             stream));
  return st;
}

em_status gpu_class_loss_backward(em_tensor *gx, const em_tensor *gout, const em_tensor *x, const em_tensor *lse,
                                  const em_tensor *total_weight, const em_tensor *target, const em_tensor *weight,
                                  const em_class_loss_params *p) {
  const char *op = p->log_input ? "nll_loss" : "cross_entropy";
  int device = x->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter(op, device, &stream);
  if (st) return st;
  loss_args a = args_of(x, p);
  if (target->dtype != EM_INT32 && target->dtype != EM_INT64)
    return em_set_error(EM_ERR_DTYPE, "%s: expected int32 or int64 targets, got %s", op, em_dtype_name(target->dtype));
  bool is64 = target->dtype == EM_INT64;
  EM_DISPATCH_FLOAT(op, x->dtype, T,
                    st = is64 ? class_loss_backward_typed<T, int64_t>(op, gx, gout, x, lse, total_weight, target,
                                                                      weight, a, device, stream)
                              : class_loss_backward_typed<T, int32_t>(op, gx, gout, x, lse, total_weight, target,
                                                                      weight, a, device, stream));
  return st;
}

}  // namespace

/* The class losses' entries of the backend table (table.c; backend.h says what each computes). */
em_status em_gpu_class_loss(em_tensor *out, em_tensor *lse, em_tensor *total_weight, const em_tensor *x,
                            const em_tensor *target, const em_tensor *weight, const em_class_loss_params *p) {
  return gpu_class_loss(out, lse, total_weight, x, target, weight, p);
}
em_status em_gpu_class_loss_backward(em_tensor *gx, const em_tensor *gout, const em_tensor *x, const em_tensor *lse,
                                     const em_tensor *total_weight, const em_tensor *target, const em_tensor *weight,
                                     const em_class_loss_params *p) {
  return gpu_class_loss_backward(gx, gout, x, lse, total_weight, target, weight, p);
}
