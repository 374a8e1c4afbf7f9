/* pool.cu - 2-d max and average pooling on the GPU, with the CPU's window rules
 * (runtime/cpu/nn_pool.c) and the same results: the order in which each value is summed
 * or compared is the CPU's, so float32 and float64 results match it bit for bit.
 *
 * Tensors are contiguous [P, H, W] planes. Custom kernels rather than cuDNN, which gives
 * neither the max positions (h * W + w in the plane, int32) nor ceil_mode with dilation.
 * - forwards: one thread per output, walking its window;
 * - average backward: one thread per input, gathering from the outputs whose windows
 *   cover it (in the CPU's output order);
 * - max backward: gy is scattered through the saved indices, and windows may overlap, so
 *   two outputs can name one input. One warp owns a plane and takes its outputs 32 at a
 *   time in order; lanes naming the same input are grouped (__match_any_sync) and the
 *   lowest adds their values in lane order. No atomics: each input's sum is formed in
 *   output order, as on the CPU, so the result is deterministic (and bitwise the CPU's).
 *   Parallelism is one warp per plane (N * C planes are plenty in a CNN).
 * float16/bfloat16 compare and sum in float. */
#include <math.h>
#include <stdint.h>
#include "kernels.cuh"
#include "nn_gpu.h"

namespace {

template <typename T> struct acc_of { typedef float type; };
template <> struct acc_of<double> { typedef double type; };

struct pool_geom {
  int64_t planes, H, W, OH, OW;
};

pool_geom geometry(const em_tensor *x, const em_tensor *y) {
  pool_geom g = {1, x->sizes[x->ndim - 2], x->sizes[x->ndim - 1], y->sizes[y->ndim - 2], y->sizes[y->ndim - 1]};
  for (int d = 0; d < x->ndim - 2; d++) g.planes *= x->sizes[d];
  return g;
}

/* 32-bit index arithmetic when every linear index, plus one grid stride, stays below 2^31. */
bool small_index(int64_t n) { return n < ((int64_t)1 << 30); }

/* ---- max */

template <typename T, typename I>
__global__ void max_pool_kernel(T *__restrict__ y, int32_t *__restrict__ idx, const T *__restrict__ x, pool_geom g,
                                em_pool2d_params p, int64_t total_) {
  typedef typename acc_of<T>::type A;
  const I total = (I)total_, OW = (I)g.OW, OH = (I)g.OH, plane_size = (I)(g.H * g.W);
  const int64_t H = g.H, W = g.W, dh = p.dilation[0], dw = p.dilation[1];
  for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < total; i += (I)blockDim.x * (I)gridDim.x) {
    I ow = i % OW, rest = i / OW, oh = rest % OH, plane = rest / OH;
    /* the window's rows [hs, he) and columns [ws, we), stepping by the dilation, with
     * the start moved to the first tap inside the input (as the CPU does) */
    int64_t hs = (int64_t)oh * p.stride[0] - p.pad[0], he = hs + (int64_t)(p.kernel[0] - 1) * dh + 1;
    int64_t ws = (int64_t)ow * p.stride[1] - p.pad[1], we = ws + (int64_t)(p.kernel[1] - 1) * dw + 1;
    if (he > H) he = H;
    if (we > W) we = W;
    if (hs < 0) hs += (-hs + dh - 1) / dh * dh;
    if (ws < 0) ws += (-ws + dw - 1) / dw * dw;
    const T *xp = x + plane * plane_size;
    A m = -INFINITY;
    int64_t mi = hs < he && ws < we ? hs * W + ws : -1; /* -1: an empty window (the shape rules exclude it) */
    for (int64_t h = hs; h < he; h += dh)
      for (int64_t w = ws; w < we; w += dw) {
        A v = em_cast<A>(xp[h * W + w]);
        if (v > m || isnan(v)) m = v, mi = h * W + w; /* NaN propagates, as in PyTorch */
      }
    y[i] = em_cast<T>(m);
    idx[i] = (int32_t)mi;
  }
}

#define WARPS_PER_BLOCK (EM_GPU_THREADS / 32)

template <typename T>
__global__ void max_pool_backward_kernel(T *__restrict__ gx, const T *__restrict__ gy, const int32_t *__restrict__ idx,
                                         int64_t planes, int64_t in, int64_t out) {
  typedef typename acc_of<T>::type A;
  __shared__ A vals[WARPS_PER_BLOCK][32];
  const unsigned all = 0xffffffffu;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t plane = (int64_t)blockIdx.x * WARPS_PER_BLOCK + warp; plane < planes;
       plane += (int64_t)gridDim.x * WARPS_PER_BLOCK) {
    T *g = gx + plane * in;
    const T *d = gy + plane * out;
    const int32_t *ix = idx + plane * out;
    for (int64_t i = lane; i < in; i += 32) g[i] = em_cast<T>((A)0);
    __syncwarp();
    for (int64_t base = 0; base < out; base += 32) {
      int64_t o = base + lane;
      int32_t target = o < out ? ix[o] : -1;
      if (target >= in) target = -1; /* (indices come from the forward; never out of range) */
      vals[warp][lane] = o < out ? em_cast<A>(d[o]) : (A)0;
      unsigned same = __match_any_sync(all, target);
      __syncwarp();
      if (target >= 0 && lane == __ffs(same) - 1) { /* the lowest lane adds the group in lane order */
        A s = em_cast<A>(g[target]);
        for (unsigned m = same; m; m &= m - 1) s += vals[warp][__ffs(m) - 1];
        g[target] = em_cast<T>(s);
      }
      __syncwarp(); /* the next group may read what this one wrote, and vals is reused */
    }
  }
}

/* ---- average */

struct span {
  int64_t start, end, count;
};

/* Output o's window along one dim: inputs [start, end) and its divisor factor (the
 * window's size counting padding, or not), exactly as cpu/nn_pool.c's avg_spans. */
__device__ __forceinline__ span avg_span(int64_t o, int64_t in, int64_t out, int k, int s, int pad,
                                         const em_pool2d_params &p) {
  int64_t a, b, full;
  if (p.adaptive) {
    a = o * in / out;
    b = ((o + 1) * in + out - 1) / out;
    full = b - a;
  } else {
    a = o * s - pad;
    b = a + k < in + pad ? a + k : in + pad;
    full = b - a;
    if (a < 0) a = 0;
    if (b > in) b = in;
  }
  span r = {a, b, p.count_include_pad && !p.adaptive ? full : b - a};
  return r;
}

/* The outputs whose windows may hold input i along one dim, widened by one on each side
 * (each candidate is checked against its span, so a wider range only costs a test). */
__device__ __forceinline__ void covering(int64_t i, int64_t in, int64_t out, int k, int s, int pad,
                                         const em_pool2d_params &p, int64_t *lo, int64_t *hi) {
  int64_t l, h;
  if (p.adaptive) {
    l = i * out / in;
    h = ((i + 1) * out + in - 1) / in - 1;
  } else {
    l = i + pad < k ? 0 : (i + pad - k) / s + 1;
    h = (i + pad) / s;
  }
  l -= 1, h += 1;
  *lo = l < 0 ? 0 : l;
  *hi = h > out - 1 ? out - 1 : h;
}

template <typename T, typename I>
__global__ void avg_pool_kernel(T *__restrict__ y, const T *__restrict__ x, pool_geom g, em_pool2d_params p,
                                int64_t total_) {
  typedef typename acc_of<T>::type A;
  const I total = (I)total_, OW = (I)g.OW, OH = (I)g.OH, plane_size = (I)(g.H * g.W);
  for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < total; i += (I)blockDim.x * (I)gridDim.x) {
    I ow = i % OW, rest = i / OW, oh = rest % OH, plane = rest / OH;
    span hs = avg_span(oh, g.H, g.OH, p.kernel[0], p.stride[0], p.pad[0], p);
    span ws = avg_span(ow, g.W, g.OW, p.kernel[1], p.stride[1], p.pad[1], p);
    const T *xp = x + plane * plane_size;
    A s = 0;
    for (int64_t h = hs.start; h < hs.end; h++)
      for (int64_t w = ws.start; w < ws.end; w++) s += em_cast<A>(xp[h * g.W + w]);
    int64_t div = hs.count * ws.count;
    y[i] = em_cast<T>(div > 0 ? s / (A)div : (A)0); /* an all-padding window gives 0 */
  }
}

template <typename T, typename I>
__global__ void avg_pool_backward_kernel(T *__restrict__ gx, const T *__restrict__ gy, pool_geom g,
                                         em_pool2d_params p, int64_t total_) {
  typedef typename acc_of<T>::type A;
  const I total = (I)total_, W = (I)g.W, H = (I)g.H, out_size = (I)(g.OH * g.OW);
  for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < total; i += (I)blockDim.x * (I)gridDim.x) {
    I w = i % W, rest = i / W, h = rest % H, plane = rest / H;
    const T *d = gy + plane * out_size;
    int64_t oh0, oh1, ow0, ow1;
    covering(h, g.H, g.OH, p.kernel[0], p.stride[0], p.pad[0], p, &oh0, &oh1);
    covering(w, g.W, g.OW, p.kernel[1], p.stride[1], p.pad[1], p, &ow0, &ow1);
    A s = 0;
    for (int64_t oh = oh0; oh <= oh1; oh++) {
      span hs = avg_span(oh, g.H, g.OH, p.kernel[0], p.stride[0], p.pad[0], p);
      if (h < hs.start || h >= hs.end) continue;
      for (int64_t ow = ow0; ow <= ow1; ow++) {
        span ws = avg_span(ow, g.W, g.OW, p.kernel[1], p.stride[1], p.pad[1], p);
        if (w < ws.start || w >= ws.end) continue;
        int64_t div = hs.count * ws.count;
        if (div <= 0) continue;
        s += em_cast<A>(d[oh * g.OW + ow]) / (A)div;
      }
    }
    gx[i] = em_cast<T>(s);
  }
}

/* Launches kernel<T, I> over n items (T from the dispatch), with I = int32_t when every
 * element offset the kernel forms (up to extent) allows it. */
#define LAUNCH_INDEXED(kernel, n, extent, device, stream, ...)                                              \
  do {                                                                                                      \
    unsigned blocks_ = em_gpu_blocks((n), (device));                                                        \
    if (small_index(extent)) kernel<T, int32_t><<<blocks_, EM_GPU_THREADS, 0, (stream)>>>(__VA_ARGS__);     \
    else kernel<T, int64_t><<<blocks_, EM_GPU_THREADS, 0, (stream)>>>(__VA_ARGS__);                         \
  } while (0)

int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

} // namespace

extern "C" em_status em_gpu_max_pool2d(em_tensor *out, em_tensor *indices, const em_tensor *x,
                                       const em_pool2d_params *p) {
  const char *op = "max_pool2d";
  pool_geom g = geometry(x, out);
  int64_t total = g.planes * g.OH * g.OW;
  if (total == 0) return EM_OK;
  int device = x->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter(op, device, &stream);
  if (st) return st;
  int64_t span_n = max64(total, g.planes * g.H * g.W);
  EM_DISPATCH_FLOAT(op, x->dtype, T,
                    LAUNCH_INDEXED(max_pool_kernel, total, span_n, device, stream, (T *)em_tensor_ptr(out),
                                   (int32_t *)em_tensor_ptr(indices), (const T *)em_tensor_ptr(x), g, *p, total));
  return em_gpu_launch_check(op);
}

extern "C" em_status em_gpu_max_pool2d_backward(em_tensor *gx, const em_tensor *gy, const em_tensor *indices) {
  const char *op = "max_pool2d backward";
  pool_geom g = geometry(gx, gy);
  int64_t in = g.H * g.W, out = g.OH * g.OW;
  if (g.planes == 0 || in == 0) return EM_OK;
  int device = gx->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter(op, device, &stream);
  if (st) return st;
  unsigned blocks = em_gpu_blocks(g.planes * 32, device); /* one warp per plane */
  EM_DISPATCH_FLOAT(op, gx->dtype, T,
                    max_pool_backward_kernel<T><<<blocks, EM_GPU_THREADS, 0, stream>>>(
                        (T *)em_tensor_ptr(gx), (const T *)em_tensor_ptr(gy), (const int32_t *)em_tensor_ptr(indices),
                        g.planes, in, out));
  return em_gpu_launch_check(op);
}

extern "C" em_status em_gpu_avg_pool2d(em_tensor *out, const em_tensor *x, const em_pool2d_params *p) {
  const char *op = p->adaptive ? "adaptive_avg_pool2d" : "avg_pool2d";
  pool_geom g = geometry(x, out);
  int64_t total = g.planes * g.OH * g.OW;
  if (total == 0) return EM_OK;
  int device = x->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter(op, device, &stream);
  if (st) return st;
  int64_t span_n = max64(total, g.planes * g.H * g.W);
  EM_DISPATCH_FLOAT(op, x->dtype, T,
                    LAUNCH_INDEXED(avg_pool_kernel, total, span_n, device, stream, (T *)em_tensor_ptr(out),
                                   (const T *)em_tensor_ptr(x), g, *p, total));
  return em_gpu_launch_check(op);
}

extern "C" em_status em_gpu_avg_pool2d_backward(em_tensor *gx, const em_tensor *gy, const em_pool2d_params *p) {
  const char *op = p->adaptive ? "adaptive_avg_pool2d backward" : "avg_pool2d backward";
  pool_geom g = geometry(gx, gy);
  int64_t total = g.planes * g.H * g.W;
  if (total == 0) return EM_OK;
  int device = gx->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter(op, device, &stream);
  if (st) return st;
  int64_t span_n = max64(total, g.planes * g.OH * g.OW);
  EM_DISPATCH_FLOAT(op, gx->dtype, T,
                    LAUNCH_INDEXED(avg_pool_backward_kernel, total, span_n, device, stream, (T *)em_tensor_ptr(gx),
                                   (const T *)em_tensor_ptr(gy), g, *p, total));
  return em_gpu_launch_check(op);
}
