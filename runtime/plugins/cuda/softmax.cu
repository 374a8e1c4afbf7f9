/* softmax.cu - softmax and log_softmax along a dim on the GPU, with cpu/softmax.c's
 * formulas: y = exp(x - max) * (1 / sum) and y = (x - max) - log(sum), sum of exp(x - max)
 * in double for float32 and float64 (float for float16/bfloat16).
 *
 * One pass finds max and sum together (online softmax): each lane keeps a running max m and
 * a sum s of exp(x - m), rescaled when m grows; lanes and chunks combine their (m, s) pairs
 * in a fixed tree. A second pass over the line writes y. The tensor core hands contiguous
 * tensors, seen as [outer, n, inner]: rows = outer * inner lines of n elements (stride
 * inner). Lines along the last dim get lanes of consecutive threads (coalesced along the
 * line); lines along another dim are spread across neighbouring threads (coalesced across
 * lines), as in reduce.cu. Few long lines are split across gridDim.y: per-chunk (m, s), a
 * warp per line combining them in chunk order, then an elementwise pass writes y.
 *
 * Special values follow the CPU's two-pass arithmetic exactly: a NaN anywhere makes the
 * line NaN; -inf elements add nothing unless every element is -inf (then the CPU computes
 * exp(-inf - -inf) = NaN, and so does this); a +inf makes exp(inf - inf) = NaN. out may be
 * the input itself: a line is read whole before any of it is written. */
#include "reduce_common.cuh"
#include "reduce_gpu.h"

namespace {

template <typename T> struct sm_types { typedef float V; typedef float S; };
template <> struct sm_types<float> { typedef float V; typedef double S; };
template <> struct sm_types<double> { typedef double V; typedef double S; };

template <typename T> struct sm_state {
  typename sm_types<T>::V m;
  typename sm_types<T>::S s;
};

template <typename T> __device__ __forceinline__ sm_state<T> sm_init() {
  sm_state<T> st;
  st.m = -INFINITY;
  st.s = 0;
  return st;
}

template <typename T> __device__ __forceinline__ void sm_update(sm_state<T> &st, typename sm_types<T>::V x) {
  typedef typename sm_types<T>::S S;
  if (x == -INFINITY) return; /* exp(-inf - max) = 0, unless the max is -inf: see sm_total */
  if (x > st.m) {
    /* the old sum rescaled; x's own term is exp(x - x): 1, or NaN for x = +inf as on the CPU */
    st.s = st.s * em_exp((S)st.m - (S)x) + (S)em_exp(x - x);
    st.m = x;
  } else {
    st.s += (S)em_exp(x - st.m); /* NaN x lands here */
  }
}

template <typename T> __device__ __forceinline__ sm_state<T> sm_combine(sm_state<T> a, sm_state<T> b) {
  typedef typename sm_types<T>::S S;
  sm_state<T> r;
  r.m = a.m > b.m ? a.m : b.m;
  S ta = a.m == r.m ? a.s : a.s * em_exp((S)a.m - (S)r.m);
  S tb = b.m == r.m ? b.s : b.s * em_exp((S)b.m - (S)r.m);
  r.s = ta + tb;
  return r;
}

/* The sum the CPU finds: NaN when no element was above -inf (all -inf, or NaN). */
template <typename T> __device__ __forceinline__ typename sm_types<T>::S sm_total(sm_state<T> st) {
  typedef typename sm_types<T>::S S;
  return st.m == -INFINITY ? (S)NAN : st.s;
}

template <typename T>
__device__ __forceinline__ T sm_output(typename sm_types<T>::V x, sm_state<T> st, typename sm_types<T>::V factor,
                                       int log_out) {
  typedef typename sm_types<T>::V V;
  V y = log_out ? (x - st.m) - factor : em_exp(x - st.m) * factor;
  return em_narrow<T>(y);
}

/* log(sum) for log_softmax, 1 / sum for softmax, rounded to V as the CPU does. */
template <typename T>
__device__ __forceinline__ typename sm_types<T>::V sm_factor(sm_state<T> st, int log_out) {
  typedef typename sm_types<T>::V V;
  double total = (double)sm_total(st);
  return log_out ? (V)log(total) : (V)(1.0 / total);
}

struct sm_shape {
  int64_t rows, n, inner, chunk, splits;
  int lanes, lanes_fast;
};

enum { MODE_FUSED, MODE_STATS };

/* Each slot takes line r (grid-stride) and chunk blockIdx.y: fused, it writes the line once
 * the lanes' (m, s) are combined; otherwise it leaves the chunk's (m, s) in partial. */
template <typename T>
__global__ void __launch_bounds__(EM_RP_THREADS)
    softmax_lines(const T *x, T *y, sm_shape sh, int log_out, int mode, sm_state<T> *partial) {
  typedef sm_state<T> S;
  __shared__ S sm[EM_RP_THREADS];
  em_lane_map m(sh.lanes, sh.lanes_fast);
  const int64_t split = blockIdx.y, begin = split * sh.chunk;
  const int64_t end = begin + sh.chunk < sh.n ? begin + sh.chunk : sh.n;
  for (int64_t r0 = (int64_t)blockIdx.x * m.slots; r0 < sh.rows; r0 += (int64_t)gridDim.x * m.slots) {
    const int64_t r = r0 + m.slot, o = r / sh.inner;
    const int64_t base = o * sh.n * sh.inner + (r - o * sh.inner);
    S st = sm_init<T>();
    if (r < sh.rows)
      for (int64_t d = begin + m.lane; d < end; d += sh.lanes) sm_update(st, em_val(x[base + d * sh.inner]));
    em_lane_tree(sm, st, m.slot, m.lane, sh.lanes, [](S a, S b) { return sm_combine(a, b); });
    if (r >= sh.rows) continue; /* no barrier below */
    const S line = sm[m.slot * sh.lanes];
    if (mode == MODE_STATS) {
      if (m.lane == 0) partial[r * sh.splits + split] = line;
      continue;
    }
    const auto factor = sm_factor(line, log_out);
    for (int64_t d = m.lane; d < sh.n; d += sh.lanes)
      y[base + d * sh.inner] = sm_output<T>(em_val(x[base + d * sh.inner]), line, factor, log_out);
  }
}

/* A warp per line folds the chunks' (m, s) in chunk order. */
template <typename T>
__global__ void __launch_bounds__(EM_RP_THREADS)
    softmax_combine(const sm_state<T> *__restrict__ partial, int64_t rows, int64_t splits, sm_state<T> *final_) {
  typedef sm_state<T> S;
  __shared__ S sm[EM_RP_THREADS];
  em_lane_map m(32, 1);
  for (int64_t r0 = (int64_t)blockIdx.x * m.slots; r0 < rows; r0 += (int64_t)gridDim.x * m.slots) {
    const int64_t r = r0 + m.slot;
    S st = sm_init<T>();
    if (r < rows)
      for (int64_t s = m.lane; s < splits; s += 32) st = sm_combine(st, partial[r * splits + s]);
    em_lane_tree(sm, st, m.slot, m.lane, 32, [](S a, S b) { return sm_combine(a, b); });
    if (m.lane == 0 && r < rows) final_[r] = sm[m.slot * 32];
  }
}

/* y from the lines' final (m, s), one element per thread. */
template <typename T>
__global__ void __launch_bounds__(EM_RP_THREADS)
    softmax_write(const T *x, T *y, int64_t numel, int64_t n, int64_t inner, const sm_state<T> *__restrict__ final_,
                  int log_out) {
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < numel; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t o = e / (n * inner), i = e % inner;
    const sm_state<T> line = final_[o * inner + i];
    y[e] = sm_output<T>(em_val(x[e]), line, sm_factor(line, log_out), log_out);
  }
}

template <typename T>
em_status launch(const char *name, T *y, const T *x, int64_t outer, int64_t n, int64_t inner, int log_out, int device,
                 cudaStream_t stream) {
  em_rp_softmax p;
  em_rp_plan_softmax(outer, n, inner, sizeof(sm_state<T>), &p);
  sm_shape sh = {p.rows, n, inner, p.chunk, p.splits, p.lanes, p.lanes_fast};
  if (p.splits == 1) {
    softmax_lines<T><<<dim3(p.grid_x, 1), EM_RP_THREADS, 0, stream>>>(x, y, sh, log_out, MODE_FUSED, nullptr);
    return em_gpu_launch_check(name);
  }
  em_gpu_temp tmp(device);
  sm_state<T> *partial, *final_;
  EM_TEMP_OR_FAIL(partial = tmp.get<sm_state<T>>((size_t)p.rows * (size_t)p.splits));
  EM_TEMP_OR_FAIL(final_ = tmp.get<sm_state<T>>((size_t)p.rows));
  softmax_lines<T><<<dim3(p.grid_x, p.grid_y), EM_RP_THREADS, 0, stream>>>(x, y, sh, log_out, MODE_STATS, partial);
  em_status st = em_gpu_launch_check(name);
  if (st) return st;
  softmax_combine<T><<<em_rp_combine_grid(p.rows), EM_RP_THREADS, 0, stream>>>(partial, p.rows, p.splits, final_);
  if ((st = em_gpu_launch_check(name))) return st;
  int64_t numel = outer * n * inner;
  softmax_write<T><<<em_rp_blocks(numel, EM_RP_THREADS, EM_RP_MAX_GRID_X), EM_RP_THREADS, 0, stream>>>(
      x, y, numel, n, inner, final_, log_out);
  return em_gpu_launch_check(name);
}

} // namespace

extern "C" em_status em_gpu_softmax(em_tensor *out, const em_tensor *a, int dim, int log_out) {
  const char *name = log_out ? "log_softmax" : "softmax";
  int device = a->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter(name, device, &stream);
  if (st) return st;
  int64_t outer = 1, n = 1, inner = 1;
  for (int d = 0; d < a->ndim; d++) {
    if (d < dim) outer *= a->sizes[d];
    else if (d == dim) n = a->sizes[d];
    else inner *= a->sizes[d];
  }
  if (outer * n * inner == 0) return EM_OK;
  void *y = em_tensor_ptr(out);
  const void *x = em_tensor_ptr(a);
  switch (a->dtype) {
    case EM_FLOAT32: return launch<float>(name, (float *)y, (const float *)x, outer, n, inner, log_out, device, stream);
    case EM_FLOAT64:
      return launch<double>(name, (double *)y, (const double *)x, outer, n, inner, log_out, device, stream);
    case EM_FLOAT16:
      return launch<__half>(name, (__half *)y, (const __half *)x, outer, n, inner, log_out, device, stream);
    case EM_BFLOAT16:
      return launch<__nv_bfloat16>(name, (__nv_bfloat16 *)y, (const __nv_bfloat16 *)x, outer, n, inner, log_out,
                                   device, stream);
    default:
      return em_set_error(EM_ERR_DTYPE, "%s: expected a floating tensor on cuda, got %s", name,
                          em_dtype_name(a->dtype));
  }
}
