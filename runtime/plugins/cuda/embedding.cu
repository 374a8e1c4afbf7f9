/* embedding.cu - embedding bags on the GPU (sum, mean, max; per_sample_weights; empty bags
 * give zeros), as cpu/nn_embedding.c computes them, with the same index errors.
 *
 * Forward: a row of threads per bag runs along the embedding dim (coalesced reads of the
 * weight rows), several bags per block. Offsets and indices are checked in a pass of
 * their own that records the first bad position of each; the op's one synchronisation
 * reads those flags, and only on the error path is the bad value fetched.
 *
 * Backward, without float atomics so that the weight gradient is the same on every run:
 * the (row, position) pairs of the indices are sorted by row with CUB's stable radix
 * sort, so each row's contributions sit together in position order (the CPU's order);
 * run-length encoding gives the rows and their segments, and a row of threads per segment
 * adds gout's rows into its weight row. Max mode does the same with keys (argmax row,
 * column) over the elements of the output. The per_sample_weights' gradient is a dot
 * product per index (a warp each).
 *
 * The row-sparse backward (sparse = true) groups the same way (segments.cuh) but writes the
 * distinct rows and their summed values instead of a [R, D] table, so its memory follows
 * the indices, not the table; it reads the number of rows back to the host (one
 * synchronisation, as PyTorch's coalesce). Each value is the CPU's sum in the CPU's order
 * (cpu/sparse.c); they differ only where nvcc contracts a multiply-add into an FMA (one
 * rounding instead of two), a few ulps of the value's type. */
#include <limits.h>
#include "nn_gpu.h"
#include "segments.cuh"

namespace {

const char *const OP = "embedding_bag";

struct bag_args {
  int64_t R, D, L, B;
  int base;
  int mode; /* em_bag_mode: 0 sum, 1 mean, 2 max */
};

/* Bag b's index range, clamped so that a bad offset (reported by the check) never makes
 * a kernel read out of bounds. */
__device__ __forceinline__ void bag_range(const int64_t *off, int64_t b, const bag_args &a, int64_t *s, int64_t *e) {
  int64_t lo = off[b], hi = b + 1 < a.B ? off[b + 1] : a.L;
  lo = lo < 0 ? 0 : lo > a.L ? a.L : lo;
  hi = hi < lo ? lo : hi > a.L ? a.L : hi;
  *s = lo, *e = hi;
}

/* The bag holding position i: the last b with off[b] <= i (offsets rise from 0). */
__device__ __forceinline__ int64_t bag_of_position(const int64_t *off, int64_t B, int64_t i) {
  int64_t lo = 0, hi = B;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (off[mid] <= i) lo = mid + 1;
    else hi = mid;
  }
  return lo - 1;
}

/* bad[0]: the first offset out of order, bad[1]: the first index out of range. */
template <typename I>
__global__ void bag_check_kernel(const I *__restrict__ idx, const int64_t *__restrict__ off, bag_args a,
                                 unsigned long long *bad) {
  int64_t n = a.L > a.B ? a.L : a.B;
  for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x) {
    if (k < a.B) {
      int64_t o = off[k], prev = k ? off[k - 1] : 0;
      if ((k == 0 && o != 0) || o < prev || o > a.L) em_flag_bad(&bad[0], k);
    }
    if (k < a.L) {
      int64_t r = (int64_t)idx[k] - a.base;
      if (r < 0 || r >= a.R) em_flag_bad(&bad[1], k);
    }
  }
}

/* threadIdx.x runs along D, threadIdx.y picks the bag. */
template <typename T, typename I>
__global__ void bag_forward_kernel(T *__restrict__ out, int64_t *__restrict__ argmax, const T *__restrict__ w,
                                   const I *__restrict__ idx, const int64_t *__restrict__ off,
                                   const T *__restrict__ psw, bag_args a) {
  typedef typename em_ctype_of<T>::acc A;
  for (int64_t b = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; b < a.B; b += (int64_t)gridDim.x * blockDim.y) {
    int64_t s, e;
    bag_range(off, b, a, &s, &e);
    for (int64_t j = threadIdx.x; j < a.D; j += blockDim.x) {
      if (a.mode == 2) {
        A best = 0;
        int64_t am = -1;
        for (int64_t i = s; i < e; i++) {
          int64_t r = (int64_t)idx[i] - a.base;
          if (r < 0 || r >= a.R) continue;
          A v = em_cast<A>(w[r * a.D + j]);
          if (am < 0 || v > best || isnan(v)) best = v, am = r;
        }
        out[b * a.D + j] = em_cast<T>(best);
        argmax[b * a.D + j] = am;
      } else {
        A acc = 0;
        for (int64_t i = s; i < e; i++) {
          int64_t r = (int64_t)idx[i] - a.base;
          if (r < 0 || r >= a.R) continue;
          A k = psw ? em_cast<A>(psw[i]) : (A)1;
          acc += k * em_cast<A>(w[r * a.D + j]);
        }
        if (a.mode == 1 && e > s) acc /= (A)(e - s);
        out[b * a.D + j] = em_cast<T>(acc);
      }
    }
  }
}

/* Sort keys for sum/mean: each index's weight row (R for a bad one, which sorts last and
 * is skipped), with its position as the value. */
template <typename I>
__global__ void row_keys_kernel(const I *__restrict__ idx, bag_args a, unsigned long long *keys, int64_t *pos) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.L; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = (int64_t)idx[i] - a.base;
    keys[i] = (unsigned long long)(r >= 0 && r < a.R ? r : a.R);
    pos[i] = i;
  }
}

/* Each position's bag and factor: per_sample_weight, divided by the bag's size for the mean. */
template <typename T>
__global__ void position_coef_kernel(const int64_t *__restrict__ off, const T *__restrict__ psw, bag_args a,
                                     int64_t *bag_of, typename em_ctype_of<T>::acc *coef) {
  typedef typename em_ctype_of<T>::acc A;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.L; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t b = bag_of_position(off, a.B, i), s, e;
    bag_range(off, b, a, &s, &e);
    A k = psw ? em_cast<A>(psw[i]) : (A)1;
    if (a.mode == 1 && e > s) k /= (A)(e - s); /* divided, as the CPU does (not times 1 / size) */
    bag_of[i] = b;
    coef[i] = k;
  }
}

/* gw[row] = sum over the row's positions (in order) of coef * gout[bag]. */
template <typename T>
__global__ void row_segments_kernel(T *__restrict__ gw, const T *__restrict__ gout,
                                    const unsigned long long *__restrict__ rows, const int64_t *__restrict__ counts,
                                    const int64_t *__restrict__ starts, const int64_t *__restrict__ num_runs,
                                    const int64_t *__restrict__ pos, const int64_t *__restrict__ bag_of,
                                    const typename em_ctype_of<T>::acc *__restrict__ coef, bag_args a) {
  typedef typename em_ctype_of<T>::acc A;
  const int64_t runs = *num_runs;
  for (int64_t r = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; r < runs; r += (int64_t)gridDim.x * blockDim.y) {
    int64_t row = (int64_t)rows[r];
    if (row >= a.R) continue; /* bad indices (never after a successful forward) */
    int64_t p0 = starts[r], p1 = p0 + counts[r];
    for (int64_t j = threadIdx.x; j < a.D; j += blockDim.x) {
      A acc = 0;
      for (int64_t p = p0; p < p1; p++) {
        int64_t i = pos[p];
        acc += coef[i] * em_cast<A>(gout[bag_of[i] * a.D + j]);
      }
      gw[row * a.D + j] = em_cast<T>(acc);
    }
  }
}

/* Max mode: the key of output element (b, j) is the gradient element it feeds,
 * argmax * D + j (R * D for an empty bag, skipped). */
__global__ void max_keys_kernel(const int64_t *__restrict__ argmax, bag_args a, unsigned long long *keys,
                                int64_t *pos) {
  const int64_t n = a.B * a.D, none = a.R * a.D;
  for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x) {
    int64_t am = argmax[k], j = k % a.D;
    keys[k] = (unsigned long long)(am >= 0 && am < a.R ? am * a.D + j : none);
    pos[k] = k;
  }
}

template <typename T>
__global__ void max_segments_kernel(T *__restrict__ gw, const T *__restrict__ gout,
                                    const unsigned long long *__restrict__ elems, const int64_t *__restrict__ counts,
                                    const int64_t *__restrict__ starts, const int64_t *__restrict__ num_runs,
                                    const int64_t *__restrict__ pos, bag_args a) {
  typedef typename em_ctype_of<T>::acc A;
  const int64_t runs = *num_runs, none = a.R * a.D;
  for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < runs; r += (int64_t)gridDim.x * blockDim.x) {
    int64_t e = (int64_t)elems[r];
    if (e >= none) continue;
    A acc = 0;
    for (int64_t p = starts[r], end = starts[r] + counts[r]; p < end; p++) acc += em_cast<A>(gout[pos[p]]);
    gw[e] = em_cast<T>(acc);
  }
}

/* gpsw[i] = w[row(i)] . gout[bag(i)], a warp per index. */
template <typename T, typename I>
__global__ void psw_grad_kernel(T *__restrict__ gpsw, const T *__restrict__ w, const T *__restrict__ gout,
                                const I *__restrict__ idx, const int64_t *__restrict__ off, bag_args a) {
  typedef typename em_ctype_of<T>::acc A;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; i < a.L; i += (int64_t)gridDim.x * blockDim.y) {
    int64_t b = bag_of_position(off, a.B, i), r = (int64_t)idx[i] - a.base;
    A s = 0;
    if (b >= 0 && r >= 0 && r < a.R)
      for (int64_t j = threadIdx.x; j < a.D; j += 32) s += em_cast<A>(w[r * a.D + j]) * em_cast<A>(gout[b * a.D + j]);
    s = em_warp_reduce(s, [](A p, A q) { return p + q; });
    if (threadIdx.x == 0) gpsw[i] = em_cast<T>(s);
  }
}

/* Threads along D (a multiple of 32, at most 256) and bags per block. */
dim3 row_block(int64_t D) {
  int64_t tx = (D + 31) / 32 * 32;
  if (tx > 256) tx = 256;
  if (tx < 32) tx = 32;
  return dim3((unsigned)tx, (unsigned)(256 / tx));
}

unsigned row_grid(int64_t rows, dim3 block, int device) {
  int64_t g = (rows + block.y - 1) / block.y, cap = (int64_t)em_gpu_sm_count(device) * 16;
  if (g > cap) g = cap;
  return (unsigned)(g > 0 ? g : 1);
}

template <typename T, typename I>
em_status bag_forward(em_tensor *out, em_tensor *argmax, const em_tensor *weight, const em_tensor *indices,
                      const em_tensor *offsets, const em_tensor *psw, const bag_args &a, int device,
                      cudaStream_t stream) {
  const I *idx = (const I *)em_tensor_ptr(indices);
  const int64_t *off = (const int64_t *)em_tensor_ptr(offsets);
  unsigned long long *bad = (unsigned long long *)em_gpu_malloc(2 * sizeof(unsigned long long), device);
  if (!bad) return em_last_status();
  em_status st = EM_OK;
  cudaError_t err = cudaMemsetAsync(bad, 0xff, 2 * sizeof(unsigned long long), stream);
  if (err != cudaSuccess) st = em_gpu_error(err, OP);
  int64_t nchk = a.L > a.B ? a.L : a.B;
  if (!st && nchk > 0) {
    bag_check_kernel<I><<<em_gpu_blocks(nchk, device), EM_GPU_THREADS, 0, stream>>>(idx, off, a, bad);
    st = em_gpu_launch_check(OP);
  }
  if (!st && a.B > 0 && a.D > 0) {
    dim3 block = row_block(a.D);
    bag_forward_kernel<T, I><<<row_grid(a.B, block, device), block, 0, stream>>>(
        (T *)em_tensor_ptr(out), argmax ? (int64_t *)em_tensor_ptr(argmax) : nullptr,
        (const T *)em_tensor_ptr(weight), idx, off, psw ? (const T *)em_tensor_ptr(psw) : nullptr, a);
    st = em_gpu_launch_check(OP);
  }
  unsigned long long first_bad[2] = {EM_NO_BAD_INDEX, EM_NO_BAD_INDEX};
  if (!st) st = em_gpu_read_flags(OP, bad, first_bad, 2, stream); /* the one synchronisation */
  em_gpu_free_ptr(bad);
  if (st) return st;
  int64_t v = 0;
  if (first_bad[0] != EM_NO_BAD_INDEX) {
    int64_t b = (int64_t)first_bad[0];
    if ((st = em_gpu_read_index(OP, off, 1, b, &v, stream))) return st;
    return em_set_error(EM_ERR_INDEX,
                        "embedding_bag: offsets[%lld] = %lld, expected offsets that start at 0 and rise to at most "
                        "%lld (the number of indices)",
                        (long long)b, (long long)v, (long long)a.L);
  }
  if (first_bad[1] != EM_NO_BAD_INDEX) {
    if ((st = em_gpu_read_index(OP, idx, sizeof(I) == 8, (int64_t)first_bad[1], &v, stream))) return st;
    return em_set_error(EM_ERR_INDEX, "embedding_bag: index %lld is out of range for %lld embeddings (expected %d..%lld)",
                        (long long)v, (long long)a.R, a.base, (long long)(a.R - 1 + a.base));
  }
  return EM_OK;
}

template <typename T, typename I>
em_status bag_backward(em_tensor *gw, em_tensor *gpsw, const em_tensor *gout, const em_tensor *weight,
                       const em_tensor *indices, const em_tensor *offsets, const em_tensor *psw,
                       const em_tensor *argmax, const bag_args &a, int device, cudaStream_t stream) {
  typedef typename em_ctype_of<T>::acc A;
  const I *idx = (const I *)em_tensor_ptr(indices);
  const int64_t *off = (const int64_t *)em_tensor_ptr(offsets);
  const T *go = (const T *)em_tensor_ptr(gout);
  em_status st = EM_OK;
  if (gw) {
    T *gwp = (T *)em_tensor_ptr(gw);
    EM_GPU_CHECK(OP, cudaMemsetAsync(gwp, 0, sizeof(T) * (size_t)(a.R * a.D), stream)); /* rows no index uses */
    const bool max_mode = a.mode == 2;
    const int64_t n = max_mode ? a.B * a.D : a.L;
    if (n > 0 && a.D > 0) {
      if (n > INT_MAX)
        return em_set_error(EM_ERR_UNSUPPORTED, "embedding_bag: the backward sorts %lld keys, more than %d (CUB's limit)",
                            (long long)n, INT_MAX);
      em_gpu_carver cv = {0, nullptr};
      em_gpu_segments sg;
      if ((st = em_gpu_plan_segments(OP, &cv, &sg, n))) return st;
      if (!max_mode) {
        cv.take<int64_t>(a.L);
        cv.take<A>(a.L);
      }
      char *tmp = (char *)em_gpu_malloc(cv.used, device);
      if (!tmp) return em_last_status();
      cv = {0, tmp};
      em_gpu_plan_segments(OP, &cv, &sg, n);
      int64_t *bag_of = max_mode ? nullptr : cv.take<int64_t>(a.L);
      A *coef = max_mode ? nullptr : cv.take<A>(a.L);
      unsigned blocks = em_gpu_blocks(n, device);
      if (max_mode) {
        max_keys_kernel<<<blocks, EM_GPU_THREADS, 0, stream>>>((const int64_t *)em_tensor_ptr(argmax), a, sg.keys_in,
                                                               sg.pos_in);
      } else {
        row_keys_kernel<I><<<blocks, EM_GPU_THREADS, 0, stream>>>(idx, a, sg.keys_in, sg.pos_in);
        if (!(st = em_gpu_launch_check(OP)))
          position_coef_kernel<T><<<blocks, EM_GPU_THREADS, 0, stream>>>(
              off, psw ? (const T *)em_tensor_ptr(psw) : nullptr, a, bag_of, coef);
      }
      if (!st) st = em_gpu_launch_check(OP);
      unsigned long long max_key = max_mode ? (unsigned long long)(a.R * a.D) : (unsigned long long)a.R;
      if (!st) st = em_gpu_run_segments(OP, &sg, n, max_key, stream);
      if (!st && max_mode) {
        max_segments_kernel<T><<<blocks, EM_GPU_THREADS, 0, stream>>>(gwp, go, sg.uniq, sg.counts, sg.starts,
                                                                      sg.num_runs, sg.pos_out, a);
        st = em_gpu_launch_check(OP);
      } else if (!st) {
        dim3 block = row_block(a.D);
        row_segments_kernel<T><<<row_grid(n, block, device), block, 0, stream>>>(
            gwp, go, sg.uniq, sg.counts, sg.starts, sg.num_runs, sg.pos_out, bag_of, coef, a);
        st = em_gpu_launch_check(OP);
      }
      em_gpu_free_ptr(tmp);
      if (st) return st;
    }
  }
  if (gpsw && a.L > 0) {
    psw_grad_kernel<T, I><<<row_grid(a.L, dim3(32, 8), device), dim3(32, 8), 0, stream>>>(
        (T *)em_tensor_ptr(gpsw), (const T *)em_tensor_ptr(weight), go, idx, off, a);
    st = em_gpu_launch_check(OP);
  }
  return st;
}

bag_args args_of(const em_tensor *weight, const em_tensor *indices, const em_tensor *offsets, int mode, int base) {
  bag_args a;
  a.R = weight->sizes[0], a.D = weight->sizes[1];
  a.L = em_tensor_numel(indices), a.B = em_tensor_numel(offsets);
  a.base = base, a.mode = mode;
  return a;
}

em_status check_dtypes(const em_tensor *indices, const em_tensor *offsets) {
  if (indices->dtype != EM_INT32 && indices->dtype != EM_INT64)
    return em_set_error(EM_ERR_DTYPE, "embedding_bag: expected int32 or int64 indices, got %s",
                        em_dtype_name(indices->dtype));
  if (offsets->dtype != EM_INT64)
    return em_set_error(EM_ERR_DTYPE, "embedding_bag: expected int64 offsets, got %s", em_dtype_name(offsets->dtype));
  return EM_OK;
}

em_status gpu_embedding_bag(em_tensor *out, em_tensor *argmax, const em_tensor *weight, const em_tensor *indices,
                            const em_tensor *offsets, const em_tensor *psw, int mode, int base) {
  int device = weight->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter(OP, device, &stream);
  if (st || (st = check_dtypes(indices, offsets))) return st;
  if (mode == 2 && !argmax) return em_set_error(EM_ERR_ARGUMENT, "embedding_bag: max mode needs an argmax tensor");
  bag_args a = args_of(weight, indices, offsets, mode, base);
  bool is64 = indices->dtype == EM_INT64;
  EM_DISPATCH_FLOAT(OP, weight->dtype, T,
                    st = is64 ? bag_forward<T, int64_t>(out, argmax, weight, indices, offsets, psw, a, device, stream)
                              : bag_forward<T, int32_t>(out, argmax, weight, indices, offsets, psw, a, device, stream));
  return st;
}

em_status gpu_embedding_bag_backward(em_tensor *gw, em_tensor *gpsw, const em_tensor *gout, const em_tensor *weight,
                                     const em_tensor *indices, const em_tensor *offsets, const em_tensor *psw,
                                     const em_tensor *argmax, int mode, int base) {
  int device = weight->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter(OP, device, &stream);
  if (st || (st = check_dtypes(indices, offsets))) return st;
  if (mode == 2 && gw && !argmax) return em_set_error(EM_ERR_ARGUMENT, "embedding_bag: max mode needs the argmax");
  bag_args a = args_of(weight, indices, offsets, mode, base);
  bool is64 = indices->dtype == EM_INT64;
  EM_DISPATCH_FLOAT(OP, weight->dtype, T,
                    st = is64 ? bag_backward<T, int64_t>(gw, gpsw, gout, weight, indices, offsets, psw, argmax, a,
                                                         device, stream)
                              : bag_backward<T, int32_t>(gw, gpsw, gout, weight, indices, offsets, psw, argmax, a,
                                                         device, stream));
  return st;
}

/* ---- the row-sparse weight gradient (backend entry embedding_bag_sparse_backward) ----
 * The same grouping as the dense backward, written as (distinct rows, their values) instead
 * of into a [R, D] table: the entry is never told R, so a skipped index (the padding row,
 * or an empty bag's argmax) gets the key SPARSE_NONE, which sorts after every row. */

const unsigned long long SPARSE_NONE = 0x7fffffffffffffffull; /* above any row (or row * D + j) */

/* Sum/mean keys: each index's row, SPARSE_NONE for the padding row. */
template <typename I>
__global__ void sparse_keys_kernel(const I *__restrict__ idx, int64_t L, int base, int64_t pad,
                                   unsigned long long *keys, int64_t *pos) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < L; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = (int64_t)idx[i] - base;
    keys[i] = r >= 0 && r != pad ? (unsigned long long)r : SPARSE_NONE;
    pos[i] = i;
  }
}

/* *nnz = the runs that are rows (SPARSE_NONE, if present, is the last run). One thread. */
__global__ void sparse_count_kernel(int64_t *nnz, const unsigned long long *__restrict__ uniq,
                                    const int64_t *__restrict__ num_runs) {
  int64_t n = *num_runs;
  if (n > 0 && uniq[n - 1] == SPARSE_NONE) n--;
  *nnz = n;
}

/* rows[u] = the u-th distinct row; values[u] (when values is not NULL) = the sum over that
 * row's positions, in order, of coef * gout[bag] (the CPU's sum_groups, same order). */
template <typename T>
__global__ void sparse_row_values_kernel(int64_t *__restrict__ rows, T *__restrict__ values, const T *__restrict__ gout,
                                         const unsigned long long *__restrict__ uniq,
                                         const int64_t *__restrict__ counts, const int64_t *__restrict__ starts,
                                         const int64_t *__restrict__ num_runs, const int64_t *__restrict__ pos,
                                         const int64_t *__restrict__ bag_of,
                                         const typename em_ctype_of<T>::acc *__restrict__ coef, int64_t D) {
  typedef typename em_ctype_of<T>::acc A;
  const int64_t runs = *num_runs;
  for (int64_t u = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; u < runs; u += (int64_t)gridDim.x * blockDim.y) {
    if (uniq[u] == SPARSE_NONE) continue;
    if (threadIdx.x == 0) rows[u] = (int64_t)uniq[u];
    if (!values) continue;
    int64_t p0 = starts[u], p1 = p0 + counts[u];
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      A acc = 0;
      for (int64_t p = p0; p < p1; p++) {
        int64_t i = pos[p];
        acc += coef[i] * em_cast<A>(gout[bag_of[i] * D + j]);
      }
      values[u * D + j] = em_cast<T>(acc);
    }
  }
}

/* Max keys: output element k = (b, j) feeds row argmax[k], column j: key argmax * D + j
 * (SPARSE_NONE for an empty bag or the padding row). */
__global__ void sparse_max_keys_kernel(const int64_t *__restrict__ argmax, int64_t n, int64_t D, int64_t pad,
                                       unsigned long long *keys, int64_t *pos) {
  for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x) {
    int64_t am = argmax[k];
    keys[k] = am >= 0 && am != pad ? (unsigned long long)(am * D + k % D) : SPARSE_NONE;
    pos[k] = k;
  }
}

/* values[u * D + j] = the sum, bag by bag, of the maxima that row rows[u] gave in column j;
 * u found by bisection in the nnz distinct rows (ascending). values starts zeroed. */
template <typename T>
__global__ void sparse_max_values_kernel(T *__restrict__ values, const T *__restrict__ gout,
                                         const int64_t *__restrict__ rows, const int64_t *__restrict__ nnz,
                                         const unsigned long long *__restrict__ elems,
                                         const int64_t *__restrict__ counts, const int64_t *__restrict__ starts,
                                         const int64_t *__restrict__ num_runs, const int64_t *__restrict__ pos,
                                         int64_t D) {
  typedef typename em_ctype_of<T>::acc A;
  const int64_t runs = *num_runs, n = *nnz;
  for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < runs; r += (int64_t)gridDim.x * blockDim.x) {
    unsigned long long e = elems[r];
    if (e == SPARSE_NONE) continue;
    int64_t row = (int64_t)(e / (unsigned long long)D), j = (int64_t)(e % (unsigned long long)D), lo = 0, hi = n;
    while (lo < hi) {
      int64_t mid = lo + (hi - lo) / 2;
      if (rows[mid] < row) lo = mid + 1;
      else hi = mid;
    }
    if (lo >= n || rows[lo] != row) continue; /* an argmax no index names (never after the forward) */
    A acc = 0;
    for (int64_t p = starts[r], end = starts[r] + counts[r]; p < end; p++) acc += em_cast<A>(gout[pos[p]]);
    values[lo * D + j] = em_cast<T>(acc);
  }
}

template <typename T, typename I>
em_status bag_sparse_backward(em_tensor *rows, em_tensor *values, int64_t *nnz, const em_tensor *gout,
                              const em_tensor *indices, const em_tensor *offsets, const em_tensor *psw,
                              const em_tensor *argmax, const bag_args &a, int64_t pad, int device,
                              cudaStream_t stream) {
  typedef typename em_ctype_of<T>::acc A;
  const bool max_mode = a.mode == 2;
  const int64_t n2 = max_mode ? a.B * a.D : 0;
  *nnz = 0;
  if (a.L == 0) return EM_OK;
  if (a.L > INT_MAX || n2 > INT_MAX)
    return em_set_error(EM_ERR_UNSUPPORTED,
                        "embedding_bag: the sparse backward sorts %lld keys, more than %d (CUB's limit)",
                        (long long)(a.L > n2 ? a.L : n2), INT_MAX);
  /* Measure, allocate once, carve again. */
  em_gpu_carver cv = {0, nullptr};
  em_gpu_segments sg, sg2;
  em_status st = em_gpu_plan_segments(OP, &cv, &sg, a.L);
  if (!st && max_mode) st = em_gpu_plan_segments(OP, &cv, &sg2, n2);
  if (st) return st;
  cv.take<int64_t>(a.L);
  cv.take<A>(a.L);
  cv.take<int64_t>(1);
  char *tmp = (char *)em_gpu_malloc(cv.used, device);
  if (!tmp) return em_last_status();
  cv = {0, tmp};
  em_gpu_plan_segments(OP, &cv, &sg, a.L);
  if (max_mode) em_gpu_plan_segments(OP, &cv, &sg2, n2);
  int64_t *bag_of = cv.take<int64_t>(a.L), *dnnz;
  A *coef = cv.take<A>(a.L);
  dnnz = cv.take<int64_t>(1);
  int64_t *rows_p = (int64_t *)em_tensor_ptr(rows);
  T *vals = (T *)em_tensor_ptr(values);
  const T *go = (const T *)em_tensor_ptr(gout);
  unsigned blocks = em_gpu_blocks(a.L, device);
  dim3 block = row_block(a.D);
  sparse_keys_kernel<I><<<blocks, EM_GPU_THREADS, 0, stream>>>((const I *)em_tensor_ptr(indices), a.L, a.base, pad,
                                                               sg.keys_in, sg.pos_in);
  st = em_gpu_launch_check(OP);
  if (!st && !max_mode) {
    position_coef_kernel<T><<<blocks, EM_GPU_THREADS, 0, stream>>>(
        (const int64_t *)em_tensor_ptr(offsets), psw ? (const T *)em_tensor_ptr(psw) : nullptr, a, bag_of, coef);
    st = em_gpu_launch_check(OP);
  }
  if (!st) st = em_gpu_run_segments(OP, &sg, a.L, SPARSE_NONE, stream);
  if (!st) {
    sparse_count_kernel<<<1, 1, 0, stream>>>(dnnz, sg.uniq, sg.num_runs);
    st = em_gpu_launch_check(OP);
  }
  if (!st) {
    sparse_row_values_kernel<T><<<row_grid(a.L, block, device), block, 0, stream>>>(
        rows_p, max_mode ? nullptr : vals, go, sg.uniq, sg.counts, sg.starts, sg.num_runs, sg.pos_out, bag_of, coef,
        a.D);
    st = em_gpu_launch_check(OP);
  }
  if (!st && max_mode && n2 > 0) {
    cudaError_t err = cudaMemsetAsync(vals, 0, sizeof(T) * (size_t)(a.L * a.D), stream); /* rows no maximum used */
    if (err != cudaSuccess) st = em_gpu_error(err, OP);
    unsigned blocks2 = em_gpu_blocks(n2, device);
    if (!st) {
      sparse_max_keys_kernel<<<blocks2, EM_GPU_THREADS, 0, stream>>>((const int64_t *)em_tensor_ptr(argmax), n2, a.D,
                                                                      pad, sg2.keys_in, sg2.pos_in);
      st = em_gpu_launch_check(OP);
    }
    if (!st) st = em_gpu_run_segments(OP, &sg2, n2, SPARSE_NONE, stream);
    if (!st) {
      sparse_max_values_kernel<T><<<blocks2, EM_GPU_THREADS, 0, stream>>>(
          vals, go, rows_p, dnnz, sg2.uniq, sg2.counts, sg2.starts, sg2.num_runs, sg2.pos_out, a.D);
      st = em_gpu_launch_check(OP);
    }
  } else if (!st && max_mode && a.L * a.D > 0) { /* no output elements: every value is 0 */
    cudaError_t err = cudaMemsetAsync(vals, 0, sizeof(T) * (size_t)(a.L * a.D), stream);
    if (err != cudaSuccess) st = em_gpu_error(err, OP);
  }
  if (!st) st = em_gpu_read_count(OP, dnnz, nnz, stream);
  em_gpu_free_ptr(tmp);
  return st;
}

em_status gpu_embedding_bag_sparse_backward(em_tensor *rows, em_tensor *values, int64_t *nnz, const em_tensor *gout,
                                            const em_tensor *indices, const em_tensor *offsets, const em_tensor *psw,
                                            const em_tensor *argmax, int mode, int64_t pad, int base) {
  int device = gout->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter(OP, device, &stream);
  if (st || (st = check_dtypes(indices, offsets))) return st;
  if (mode == 2 && !argmax) return em_set_error(EM_ERR_ARGUMENT, "embedding_bag: max mode needs the argmax");
  bag_args a;
  a.R = 0; /* unknown here, and not needed: the forward has checked the indices */
  a.D = gout->sizes[1], a.L = em_tensor_numel(indices), a.B = em_tensor_numel(offsets);
  a.base = base, a.mode = mode;
  bool is64 = indices->dtype == EM_INT64;
  switch (gout->dtype) {
#define SPARSE_CASE(DT, T)                                                                                         \
  case DT:                                                                                                         \
    return is64 ? bag_sparse_backward<T, int64_t>(rows, values, nnz, gout, indices, offsets, psw, argmax, a, pad,  \
                                                  device, stream)                                                  \
                : bag_sparse_backward<T, int32_t>(rows, values, nnz, gout, indices, offsets, psw, argmax, a, pad,  \
                                                  device, stream);
    SPARSE_CASE(EM_FLOAT32, float)
    SPARSE_CASE(EM_FLOAT64, double)
#undef SPARSE_CASE
    default:
      return em_set_error(EM_ERR_DTYPE, "embedding_bag: sparse gradients are float32 or float64, got %s on cuda",
                          em_dtype_name(gout->dtype));
  }
}

}  // namespace

/* The embedding bags' entries of the backend table (table.c; backend.h says what each computes). */
em_status em_gpu_embedding_bag(em_tensor *out, em_tensor *argmax, const em_tensor *weight, const em_tensor *indices,
                               const em_tensor *offsets, const em_tensor *psw, int mode, int base) {
  return gpu_embedding_bag(out, argmax, weight, indices, offsets, psw, mode, base);
}
em_status em_gpu_embedding_bag_backward(em_tensor *gw, em_tensor *gpsw, const em_tensor *gout, const em_tensor *weight,
                                        const em_tensor *indices, const em_tensor *offsets, const em_tensor *psw,
                                        const em_tensor *argmax, int mode, int base) {
  return gpu_embedding_bag_backward(gw, gpsw, gout, weight, indices, offsets, psw, argmax, mode, base);
}
em_status em_gpu_embedding_bag_sparse_backward(em_tensor *rows, em_tensor *values, int64_t *nnz, const em_tensor *gout,
                                               const em_tensor *indices, const em_tensor *offsets, const em_tensor *psw,
                                               const em_tensor *argmax, int mode, int64_t pad, int base) {
  return gpu_embedding_bag_sparse_backward(rows, values, nnz, gout, indices, offsets, psw, argmax, mode, pad, base);
}
