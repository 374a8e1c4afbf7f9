/* norm.cu - batch and layer normalisation on the GPU, with the CPU's formulas
 * (runtime/cpu/nn_norm.c): the same shifted sums in float64, the same coefficients
 * rounded the same way, so results agree with the CPU's to the last few bits.
 *
 * Every sum is deterministic: formed by a fixed tree in each block and by fixed-order
 * passes over the blocks' partial results (no atomics), so the result never depends on
 * scheduling.
 * - per-channel sums over x [N, C, S] (batch-norm statistics, its backward, conv2d's bias
 *   gradient): a channel's N * S values are cut into chunks so that even a few channels
 *   fill the GPU; each block sums one chunk into a float64 partial, then one thread per
 *   channel adds the chunks in order;
 * - layer norm: one block per row for the row sums; the column sums of its backward (gw,
 *   gb) take 32 columns x a chunk of rows per block, then chunks are added in order.
 * float16/bfloat16 are read and written as such; arithmetic is in float (elementwise) and
 * float64 (sums). */
#include <math.h>
#include <stdint.h>
#include "kernels.cuh"
#include "nn_gpu.h"

namespace {

template <typename T> struct acc_of { typedef float type; };
template <> struct acc_of<double> { typedef double type; };

bool small_index(int64_t n) { return n < ((int64_t)1 << 30); }

/* ---- block reductions (fixed order: shuffles down the warp, then warp 0 over warps) */

__device__ __forceinline__ double warp_sum(double v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;
}

/* Sums a and b over the block (blockDim.x a multiple of 32, at most 1024); every thread
 * gets the totals. The block must call it together. */
__device__ void block_sum2(double *a, double *b) {
  __shared__ double sa[32], sb[32];
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  double x = warp_sum(*a), y = warp_sum(*b);
  __syncthreads(); /* sa, sb may still be read from a previous call */
  if (lane == 0) sa[warp] = x, sb[warp] = y;
  __syncthreads();
  if (warp == 0) {
    x = lane < nwarps ? sa[lane] : 0;
    y = lane < nwarps ? sb[lane] : 0;
    x = warp_sum(x), y = warp_sum(y);
    if (lane == 0) sa[0] = x, sb[0] = y;
  }
  __syncthreads();
  *a = sa[0], *b = sb[0];
}

/* ---- per-channel sums over [N, C, S] */

enum channel_mode {
  SUM,        /* a = x */
  STATS,      /* a = x - k, b = (x - k)^2, k = the channel's first value (shifted data) */
  BACKWARD    /* a = gy, b = gy * (x - mean) */
};

#define CHANNEL_THREADS 256

/* Block (c, j) sums chunk j of channel c into partials[(c * chunks + j) * 2 + {0, 1}]. */
template <typename T, int MODE>
__global__ void channel_partials(double *__restrict__ partials, const T *__restrict__ x, const T *__restrict__ gy,
                                 const T *__restrict__ mean, int64_t N, int64_t C, int64_t S, int64_t chunks) {
  int64_t c = blockIdx.x / chunks, j = blockIdx.x % chunks, L = N * S;
  int64_t e = j * L / chunks, end = (j + 1) * L / chunks;
  double shift = 0;
  if (MODE == STATS) shift = (double)em_cast<typename acc_of<T>::type>(x[c * S]);
  if (MODE == BACKWARD) shift = (double)em_cast<typename acc_of<T>::type>(mean[c]);
  double a = 0, b = 0;
  e += threadIdx.x;
  int64_t n = 0, s = 0; /* (n, s) of element e, advanced without dividing per element */
  if (e < end) n = e / S, s = e - n * S;
  for (; e < end; e += blockDim.x) {
    int64_t at = (n * C + c) * S + s;
    double v = (double)em_cast<typename acc_of<T>::type>(x[at]);
    if (MODE == SUM) {
      a += v;
    } else if (MODE == STATS) {
      v -= shift;
      a += v, b += v * v;
    } else {
      double d = (double)em_cast<typename acc_of<T>::type>(gy[at]);
      a += d, b += d * (v - shift);
    }
    s += blockDim.x;
    if (s >= S) {
      int64_t q = s / S;
      n += q, s -= q * S;
    }
  }
  block_sum2(&a, &b);
  if (threadIdx.x == 0) {
    partials[(c * chunks + j) * 2] = a;
    partials[(c * chunks + j) * 2 + 1] = b;
  }
}

/* The chunks of channel c, added in order. */
__device__ __forceinline__ void channel_total(const double *partials, int64_t c, int64_t chunks, double *a,
                                              double *b) {
  double x = 0, y = 0;
  for (int64_t j = 0; j < chunks; j++) x += partials[(c * chunks + j) * 2], y += partials[(c * chunks + j) * 2 + 1];
  *a = x, *b = y;
}

template <typename T>
__global__ void sums_finish(T *__restrict__ out, const double *__restrict__ partials, int64_t C, int64_t chunks) {
  for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < C; c += (int64_t)blockDim.x * gridDim.x) {
    double a, b;
    channel_total(partials, c, chunks, &a, &b);
    out[c] = em_cast<T>((typename acc_of<T>::type)a);
  }
}

template <typename T>
__global__ void stats_finish(T *__restrict__ mean, T *__restrict__ var, const T *__restrict__ x,
                             const double *__restrict__ partials, int64_t C, int64_t S, int64_t chunks, double count) {
  typedef typename acc_of<T>::type A;
  for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < C; c += (int64_t)blockDim.x * gridDim.x) {
    double s1, s2;
    channel_total(partials, c, chunks, &s1, &s2);
    double k = (double)em_cast<A>(x[c * S]), d = s1 / count, v = s2 / count - d * d;
    mean[c] = em_cast<T>((A)(k + d));
    var[c] = em_cast<T>((A)(v > 0 ? v : 0));
  }
}

/* The chunk count of a channel reduction: enough blocks to fill the GPU a few times over,
 * at least 2048 values per block. */
int64_t channel_chunks(int64_t C, int64_t L, int device) {
  int64_t want = ((int64_t)em_gpu_sm_count(device) * 4 + C - 1) / (C > 0 ? C : 1);
  int64_t most = (L + 2047) / 2048;
  if (want > most) want = most;
  if (want > 1024) want = 1024;
  return want > 0 ? want : 1;
}

/* Queues the partial sums of mode over x (and gy, mean) [N, C, S]; *partials is a
 * temporary for the caller to pass on and free. */
template <typename T, int MODE>
em_status queue_partials(const char *op, double **partials, int64_t *chunks, const T *x, const T *gy, const T *mean,
                         int64_t N, int64_t C, int64_t S, int device, cudaStream_t stream) {
  *partials = NULL;
  *chunks = channel_chunks(C, N * S, device);
  if (C * *chunks > 0x7fffffff)
    return em_set_error(EM_ERR_SHAPE, "%s: %lld channels are too many for one launch", op, (long long)C);
  *partials = (double *)em_gpu_malloc(sizeof(double) * 2 * (size_t)(C * *chunks), device);
  if (!*partials) return em_last_status();
  channel_partials<T, MODE><<<(unsigned)(C * *chunks), CHANNEL_THREADS, 0, stream>>>(*partials, x, gy, mean, N, C,
                                                                                       S, *chunks);
  em_status st = em_gpu_launch_check(op);
  if (st) {
    em_gpu_free_ptr(*partials);
    *partials = NULL;
  }
  return st;
}

unsigned per_channel_blocks(int64_t C, int device) { return em_gpu_blocks(C, device); }

struct bn_geom {
  int64_t N, C, S;
};

bn_geom bn_geometry(const em_tensor *x) {
  bn_geom g = {x->sizes[0], x->sizes[1], 1};
  for (int d = 2; d < x->ndim; d++) g.S *= x->sizes[d];
  return g;
}

/* ---- batch norm forward: per-channel scale and shift, then y = x * scale + shift */

template <typename T>
__global__ void bn_forward_coef(typename acc_of<T>::type *__restrict__ coef, const T *__restrict__ mean,
                                const T *__restrict__ var, const T *__restrict__ w, const T *__restrict__ b,
                                double eps, int64_t C) {
  typedef typename acc_of<T>::type A;
  for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < C; c += (int64_t)blockDim.x * gridDim.x) {
    double invstd = 1.0 / sqrt((double)em_cast<A>(var[c]) + eps);
    A scale = (A)(invstd * (w ? (double)em_cast<A>(w[c]) : 1.0));
    A shift = (A)((b ? (double)em_cast<A>(b[c]) : 0.0) - (double)em_cast<A>(mean[c]) * (double)scale);
    coef[2 * c] = scale, coef[2 * c + 1] = shift;
  }
}

template <typename T, typename I>
__global__ void bn_forward_apply(T *__restrict__ y, const T *__restrict__ x,
                                 const typename acc_of<T>::type *__restrict__ coef, int64_t C_, int64_t S_,
                                 int64_t total_) {
  const I total = (I)total_, C = (I)C_, S = (I)S_;
  for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < total; i += (I)blockDim.x * (I)gridDim.x) {
    I c = i / S % C;
    y[i] = em_cast<T>(em_cast<typename acc_of<T>::type>(x[i]) * coef[2 * c] + coef[2 * c + 1]);
  }
}

/* ---- batch norm backward: gb, gw from the channel sums, then gx per element with
 * coefficients k, mean, dm, proj per channel (coef[4 c ...]) */

template <typename T>
__global__ void bn_backward_finish(T *__restrict__ gw, T *__restrict__ gb, typename acc_of<T>::type *__restrict__ coef,
                                   const double *__restrict__ partials, int64_t chunks, const T *__restrict__ mean,
                                   const T *__restrict__ var, const T *__restrict__ w, double eps, double count,
                                   int64_t C, int training) {
  typedef typename acc_of<T>::type A;
  for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < C; c += (int64_t)blockDim.x * gridDim.x) {
    double sdy = 0, sdyx = 0;
    if (partials) channel_total(partials, c, chunks, &sdy, &sdyx);
    double invstd = 1.0 / sqrt((double)em_cast<A>(var[c]) + eps), wc = w ? (double)em_cast<A>(w[c]) : 1.0;
    if (gb) gb[c] = em_cast<T>((A)sdy);
    if (gw) gw[c] = em_cast<T>((A)(sdyx * invstd));
    if (coef) {
      coef[4 * c] = (A)(invstd * wc);
      coef[4 * c + 1] = em_cast<A>(mean[c]);
      coef[4 * c + 2] = training ? (A)(sdy / count) : (A)0;
      coef[4 * c + 3] = training ? (A)(sdyx / count * invstd * invstd) : (A)0;
    }
  }
}

template <typename T, typename I>
__global__ void bn_backward_apply(T *__restrict__ gx, const T *__restrict__ gy, const T *__restrict__ x,
                                  const typename acc_of<T>::type *__restrict__ coef, int64_t C_, int64_t S_,
                                  int64_t total_, int training) {
  typedef typename acc_of<T>::type A;
  const I total = (I)total_, C = (I)C_, S = (I)S_;
  for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < total; i += (I)blockDim.x * (I)gridDim.x) {
    I c = i / S % C;
    A d = em_cast<A>(gy[i]), k = coef[4 * c];
    if (!training) { /* the statistics are constants */
      gx[i] = em_cast<T>(d * k);
      continue;
    }
    /* gx = (gy - mean(gy) - (x - mean) * invstd^2 * mean(gy * (x - mean))) * invstd * w */
    A r = em_cast<A>(x[i]);
    gx[i] = em_cast<T>((d - coef[4 * c + 2] - (r - coef[4 * c + 1]) * coef[4 * c + 3]) * k);
  }
}

/* ---- layer norm */

/* Threads per row block: about a quarter of the row, a multiple of 32, 32..512. */
unsigned row_threads(int64_t D) {
  unsigned t = 32;
  while (t < 512 && (int64_t)t * 4 < D) t *= 2;
  return t;
}

unsigned row_blocks(int64_t M, int device) {
  int64_t cap = (int64_t)em_gpu_sm_count(device) * 32;
  return (unsigned)(M < cap ? M : cap);
}

template <typename T>
__global__ void ln_forward(T *__restrict__ y, T *__restrict__ mean, T *__restrict__ rstd, const T *__restrict__ x,
                           const T *__restrict__ w, const T *__restrict__ b, double eps, int64_t M, int64_t D) {
  typedef typename acc_of<T>::type A;
  for (int64_t r = blockIdx.x; r < M; r += gridDim.x) {
    const T *xr = x + r * D;
    T *yr = y + r * D;
    double s = 0, unused = 0; /* two passes: the mean, then the spread about it */
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) s += (double)em_cast<A>(xr[i]);
    block_sum2(&s, &unused);
    double m = s / (double)D, q = 0;
    unused = 0;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
      double v = (double)em_cast<A>(xr[i]) - m;
      q += v * v;
    }
    block_sum2(&q, &unused);
    double rs = 1.0 / sqrt(q / (double)D + eps);
    if (threadIdx.x == 0) mean[r] = em_cast<T>((A)m), rstd[r] = em_cast<T>((A)rs);
    A tm = (A)m, trs = (A)rs;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
      A v = (em_cast<A>(xr[i]) - tm) * trs;
      if (w) v = v * em_cast<A>(w[i]);
      if (b) v = v + em_cast<A>(b[i]);
      yr[i] = em_cast<T>(v);
    }
  }
}

template <typename T>
__global__ void ln_backward_input(T *__restrict__ gx, const T *__restrict__ gy, const T *__restrict__ x,
                                  const T *__restrict__ mean, const T *__restrict__ rstd, const T *__restrict__ w,
                                  int64_t M, int64_t D) {
  typedef typename acc_of<T>::type A;
  for (int64_t r = blockIdx.x; r < M; r += gridDim.x) {
    const T *xr = x + r * D, *dr = gy + r * D;
    T *o = gx + r * D;
    A m = em_cast<A>(mean[r]), rs = em_cast<A>(rstd[r]);
    double a = 0, b = 0; /* sums of gy * w and gy * w * (x - mean) */
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
      double dv = (double)em_cast<A>(dr[i]) * (w ? (double)em_cast<A>(w[i]) : 1.0);
      a += dv, b += dv * ((double)em_cast<A>(xr[i]) - (double)m);
    }
    block_sum2(&a, &b);
    A ma = (A)(a / (double)D), mb = (A)(b * (double)rs / (double)D);
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
      A d = em_cast<A>(dr[i]), xhat = (em_cast<A>(xr[i]) - m) * rs;
      if (w) d = d * em_cast<A>(w[i]);
      o[i] = em_cast<T>((d - ma - xhat * mb) * rs);
    }
  }
}

#define LN_COLS 32
#define LN_ROW_LANES 8

/* Block (column block, chunk): sums of gy * xhat and gy over rows [chunk * M / chunks,
 * ...) for 32 columns, into partials[(chunk * D + col) * 2 + {0, 1}]. */
template <typename T>
__global__ void ln_column_partials(double *__restrict__ partials, const T *__restrict__ gy, const T *__restrict__ x,
                                   const T *__restrict__ mean, const T *__restrict__ rstd, int64_t M, int64_t D) {
  typedef typename acc_of<T>::type A;
  __shared__ double sw[LN_ROW_LANES][LN_COLS], sb[LN_ROW_LANES][LN_COLS];
  int64_t col = (int64_t)blockIdx.x * LN_COLS + threadIdx.x, chunk = blockIdx.y, chunks = gridDim.y;
  int64_t r0 = chunk * M / chunks, r1 = (chunk + 1) * M / chunks;
  double aw = 0, ab = 0;
  if (col < D)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += LN_ROW_LANES) {
      double d = (double)em_cast<A>(gy[r * D + col]);
      aw += d * ((double)em_cast<A>(x[r * D + col]) - (double)em_cast<A>(mean[r])) * (double)em_cast<A>(rstd[r]);
      ab += d;
    }
  sw[threadIdx.y][threadIdx.x] = aw, sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && col < D) {
    for (int k = 1; k < LN_ROW_LANES; k++) aw += sw[k][threadIdx.x], ab += sb[k][threadIdx.x];
    partials[(chunk * D + col) * 2] = aw;
    partials[(chunk * D + col) * 2 + 1] = ab;
  }
}

template <typename T>
__global__ void ln_column_finish(T *__restrict__ gw, T *__restrict__ gb, const double *__restrict__ partials,
                                 int64_t D, int64_t chunks) {
  typedef typename acc_of<T>::type A;
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < D; j += (int64_t)blockDim.x * gridDim.x) {
    double aw = 0, ab = 0;
    for (int64_t k = 0; k < chunks; k++) aw += partials[(k * D + j) * 2], ab += partials[(k * D + j) * 2 + 1];
    if (gw) gw[j] = em_cast<T>((A)aw);
    if (gb) gb[j] = em_cast<T>((A)ab);
  }
}

#define P(t, T) ((t) ? (T *)em_tensor_ptr(t) : (T *)NULL)

/* Launches kernel<T, I> over n items, I = int32_t when the indices allow. */
#define LAUNCH_INDEXED(kernel, n, device, stream, ...)                                                    \
  do {                                                                                                    \
    unsigned blocks_ = em_gpu_blocks((n), (device));                                                      \
    if (small_index(n)) kernel<T, int32_t><<<blocks_, EM_GPU_THREADS, 0, (stream)>>>(__VA_ARGS__);       \
    else kernel<T, int64_t><<<blocks_, EM_GPU_THREADS, 0, (stream)>>>(__VA_ARGS__);                       \
  } while (0)

em_status zero(const char *op, em_tensor *t, cudaStream_t stream) {
  if (!t) return EM_OK;
  size_t n = (size_t)em_tensor_numel(t) * em_dtype_size(t->dtype);
  EM_GPU_CHECK(op, cudaMemsetAsync(em_tensor_ptr(t), 0, n, stream)); /* 0 bits are 0.0 in every float dtype */
  return EM_OK;
}

template <typename T>
em_status channel_sums(const char *op, em_tensor *sums, const em_tensor *x, int device, cudaStream_t stream) {
  bn_geom g = bn_geometry(x);
  if (g.C == 0) return EM_OK;
  double *partials = NULL;
  int64_t chunks = 0;
  em_status st = queue_partials<T, SUM>(op, &partials, &chunks, P(x, const T), (const T *)NULL, (const T *)NULL, g.N,
                                        g.C, g.S, device, stream);
  if (st) return st;
  sums_finish<T><<<per_channel_blocks(g.C, device), EM_GPU_THREADS, 0, stream>>>(P(sums, T), partials, g.C, chunks);
  st = em_gpu_launch_check(op);
  em_gpu_free_ptr(partials);
  return st;
}

template <typename T>
em_status bn_stats(const char *op, em_tensor *mean, em_tensor *var, const em_tensor *x, int device,
                   cudaStream_t stream) {
  bn_geom g = bn_geometry(x);
  double *partials = NULL;
  int64_t chunks = 0;
  em_status st = queue_partials<T, STATS>(op, &partials, &chunks, P(x, const T), (const T *)NULL, (const T *)NULL,
                                          g.N, g.C, g.S, device, stream);
  if (st) return st;
  stats_finish<T><<<per_channel_blocks(g.C, device), EM_GPU_THREADS, 0, stream>>>(
      P(mean, T), P(var, T), P(x, const T), partials, g.C, g.S, chunks, (double)(g.N * g.S));
  st = em_gpu_launch_check(op);
  em_gpu_free_ptr(partials);
  return st;
}

template <typename T>
em_status bn_forward(const char *op, em_tensor *out, const em_tensor *x, const em_tensor *mean, const em_tensor *var,
                     const em_tensor *w, const em_tensor *b, double eps, int device, cudaStream_t stream) {
  typedef typename acc_of<T>::type A;
  bn_geom g = bn_geometry(x);
  int64_t total = g.N * g.C * g.S;
  A *coef = (A *)em_gpu_malloc(sizeof(A) * 2 * (size_t)g.C, device);
  if (!coef) return em_last_status();
  bn_forward_coef<T><<<per_channel_blocks(g.C, device), EM_GPU_THREADS, 0, stream>>>(
      coef, P(mean, const T), P(var, const T), P(w, const T), P(b, const T), eps, g.C);
  em_status st = em_gpu_launch_check(op);
  if (!st) {
    LAUNCH_INDEXED(bn_forward_apply, total, device, stream, P(out, T), P(x, const T), coef, g.C, g.S, total);
    st = em_gpu_launch_check(op);
  }
  em_gpu_free_ptr(coef);
  return st;
}

template <typename T>
em_status bn_backward(const char *op, em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *gy,
                      const em_tensor *x, const em_tensor *mean, const em_tensor *var, const em_tensor *w, double eps,
                      int training, int device, cudaStream_t stream) {
  typedef typename acc_of<T>::type A;
  bn_geom g = bn_geometry(x);
  int64_t total = g.N * g.C * g.S;
  double *partials = NULL;
  int64_t chunks = 0;
  A *coef = NULL;
  em_status st = EM_OK;
  if (gw || gb || (gx && training))
    st = queue_partials<T, BACKWARD>(op, &partials, &chunks, P(x, const T), P(gy, const T), P(mean, const T), g.N,
                                     g.C, g.S, device, stream);
  if (!st && gx && total > 0 && !(coef = (A *)em_gpu_malloc(sizeof(A) * 4 * (size_t)g.C, device)))
    st = em_last_status();
  if (!st && (gw || gb || coef)) {
    bn_backward_finish<T><<<per_channel_blocks(g.C, device), EM_GPU_THREADS, 0, stream>>>(
        P(gw, T), P(gb, T), coef, partials, chunks, P(mean, const T), P(var, const T), P(w, const T), eps,
        (double)(g.N * g.S), g.C, training);
    st = em_gpu_launch_check(op);
  }
  if (!st && coef) {
    LAUNCH_INDEXED(bn_backward_apply, total, device, stream, P(gx, T), P(gy, const T), P(x, const T), coef, g.C, g.S,
                   total, training);
    st = em_gpu_launch_check(op);
  }
  if (partials) em_gpu_free_ptr(partials);
  if (coef) em_gpu_free_ptr(coef);
  return st;
}

template <typename T>
em_status ln_forward_run(const char *op, em_tensor *out, em_tensor *mean, em_tensor *rstd, const em_tensor *x,
                         const em_tensor *w, const em_tensor *b, double eps, int64_t M, int64_t D, int device,
                         cudaStream_t stream) {
  ln_forward<T><<<row_blocks(M, device), row_threads(D), 0, stream>>>(
      P(out, T), P(mean, T), P(rstd, T), P(x, const T), P(w, const T), P(b, const T), eps, M, D);
  return em_gpu_launch_check(op);
}

template <typename T>
em_status ln_backward_run(const char *op, em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *gy,
                          const em_tensor *x, const em_tensor *mean, const em_tensor *rstd, const em_tensor *w,
                          int64_t M, int64_t D, int device, cudaStream_t stream) {
  em_status st = EM_OK;
  if (gx && M > 0 && D > 0) {
    ln_backward_input<T><<<row_blocks(M, device), row_threads(D), 0, stream>>>(
        P(gx, T), P(gy, const T), P(x, const T), P(mean, const T), P(rstd, const T), P(w, const T), M, D);
    if ((st = em_gpu_launch_check(op))) return st;
  }
  if (!(gw || gb) || D == 0) return EM_OK;
  if (M == 0) { /* no rows: the column sums are zero */
    if ((st = zero(op, gw, stream))) return st;
    return zero(op, gb, stream);
  }
  int64_t col_blocks = (D + LN_COLS - 1) / LN_COLS;
  int64_t chunks = ((int64_t)em_gpu_sm_count(device) * 4 + col_blocks - 1) / col_blocks, most = (M + 63) / 64;
  if (chunks > most) chunks = most;
  if (chunks > 1024) chunks = 1024;
  if (chunks < 1) chunks = 1;
  if (col_blocks > 0x7fffffff)
    return em_set_error(EM_ERR_SHAPE, "%s: %lld columns are too many for one launch", op, (long long)D);
  double *partials = (double *)em_gpu_malloc(sizeof(double) * 2 * (size_t)(chunks * D), device);
  if (!partials) return em_last_status();
  ln_column_partials<T><<<dim3((unsigned)col_blocks, (unsigned)chunks), dim3(LN_COLS, LN_ROW_LANES), 0, stream>>>(
      partials, P(gy, const T), P(x, const T), P(mean, const T), P(rstd, const T), M, D);
  st = em_gpu_launch_check(op);
  if (!st) {
    ln_column_finish<T><<<em_gpu_blocks(D, device), EM_GPU_THREADS, 0, stream>>>(P(gw, T), P(gb, T), partials, D,
                                                                                  chunks);
    st = em_gpu_launch_check(op);
  }
  em_gpu_free_ptr(partials);
  return st;
}

} // namespace

extern "C" em_status em_gpu_channel_sums(const char *op, em_tensor *sums, const em_tensor *x, cudaStream_t stream) {
  int device = x->storage->device.index;
  EM_DISPATCH_FLOAT(op, x->dtype, T, return channel_sums<T>(op, sums, x, device, stream));
  return EM_OK;
}

extern "C" em_status em_gpu_batch_norm_stats(em_tensor *mean, em_tensor *var, const em_tensor *x) {
  const char *op = "batch_norm";
  bn_geom g = bn_geometry(x);
  if (g.N * g.S == 0 || g.C == 0) return EM_OK; /* (the caller rejects empty batches in training) */
  int device = x->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter(op, device, &stream);
  if (st) return st;
  EM_DISPATCH_FLOAT(op, x->dtype, T, return bn_stats<T>(op, mean, var, x, device, stream));
  return EM_OK;
}

extern "C" em_status em_gpu_batch_norm(em_tensor *out, const em_tensor *x, const em_tensor *mean,
                                       const em_tensor *var, const em_tensor *w, const em_tensor *b, double eps) {
  const char *op = "batch_norm";
  if (em_tensor_numel(x) == 0) return EM_OK;
  int device = x->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter(op, device, &stream);
  if (st) return st;
  EM_DISPATCH_FLOAT(op, x->dtype, T, return bn_forward<T>(op, out, x, mean, var, w, b, eps, device, stream));
  return EM_OK;
}

extern "C" em_status em_gpu_batch_norm_backward(em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *gy,
                                                const em_tensor *x, const em_tensor *mean, const em_tensor *var,
                                                const em_tensor *w, double eps, int training) {
  const char *op = "batch_norm backward";
  if (x->sizes[1] == 0 || !(gx || gw || gb)) return EM_OK;
  int device = x->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter(op, device, &stream);
  if (st) return st;
  EM_DISPATCH_FLOAT(op, x->dtype, T,
                    return bn_backward<T>(op, gx, gw, gb, gy, x, mean, var, w, eps, training, device, stream));
  return EM_OK;
}

extern "C" em_status em_gpu_layer_norm(em_tensor *out, em_tensor *mean, em_tensor *rstd, const em_tensor *x,
                                       const em_tensor *w, const em_tensor *b, double eps) {
  const char *op = "layer_norm";
  int64_t M = em_tensor_numel(mean), D = M ? em_tensor_numel(x) / M : 0;
  if (M == 0) return EM_OK;
  int device = x->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter(op, device, &stream);
  if (st) return st;
  EM_DISPATCH_FLOAT(op, x->dtype, T, return ln_forward_run<T>(op, out, mean, rstd, x, w, b, eps, M, D, device, stream));
  return EM_OK;
}

extern "C" em_status em_gpu_layer_norm_backward(em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *gy,
                                                const em_tensor *x, const em_tensor *mean, const em_tensor *rstd,
                                                const em_tensor *w) {
  const char *op = "layer_norm backward";
  int64_t M = em_tensor_numel(mean), D = M ? em_tensor_numel(x) / M : (gw ? em_tensor_numel(gw) : 0);
  if (gb && !gw && M == 0) D = em_tensor_numel(gb);
  if (!(gx || gw || gb)) return EM_OK;
  int device = x->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter(op, device, &stream);
  if (st) return st;
  EM_DISPATCH_FLOAT(op, x->dtype, T,
                    return ln_backward_run<T>(op, gx, gw, gb, gy, x, mean, rstd, w, M, D, device, stream));
  return EM_OK;
}
