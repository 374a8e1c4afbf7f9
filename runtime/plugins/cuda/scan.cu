/* scan.cu - cumsum and cumprod along a dim on the GPU, as cpu/softmax.c computes them:
 * floats accumulate in double and keep their dtype, integers accumulate in int64 with
 * wrap-around and give int64.
 *
 * The tensor core hands a contiguous input and out of one shape, seen as [outer, n, inner]
 * around the dim (em_rp_plan_scan picks the layout):
 *  - the last dim (inner == 1): a warp scans a row 128 elements at a time, 4 consecutive
 *    elements per lane, a shuffle scan across the lanes, the running total carried on;
 *  - any other dim: a thread scans a column, consecutive threads on consecutive columns so
 *    that every step reads one contiguous run of memory.
 * A few long lines are cut into chunks, scanned in three steps: each chunk's total, an
 * exclusive scan of the totals along each line (in chunk order), and each chunk's scan
 * started from its carry. Chunks depend on the shape only: no look-back between blocks,
 * whose order of arrival would change float results. out may be the input itself: every
 * element is read before it is written, by the thread that writes it. */
#include "reduce_common.cuh"
#include "reduce_gpu.h"

namespace {

enum { PASS_FULL, PASS_TOTALS, PASS_WITH_CARRY };

template <typename A> __device__ __forceinline__ A scan_op(A a, A b, int prod) { return prod ? em_mul(a, b) : em_add(a, b); }

/* Warp w of the grid scans (line, chunk) = (w / nchunks, w % nchunks). */
template <typename T, typename A, typename O>
__global__ void __launch_bounds__(EM_RP_THREADS)
    scan_rows(const T *x, O *y, int64_t lines, int64_t n, int64_t chunk, int64_t nchunks, int prod, int pass, A *carry) {
  const int lane = threadIdx.x & 31;
  const int64_t first = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
  const A one = prod ? (A)1 : (A)0;
  for (int64_t w = first; w < lines * nchunks; w += nwarps) {
    const int64_t line = w / nchunks, c = w - line * nchunks;
    const int64_t begin = c * chunk, end = begin + chunk < n ? begin + chunk : n;
    const T *xr = x + line * n;
    O *yr = y + line * n;
    A run = pass == PASS_WITH_CARRY ? carry[w] : one;
    for (int64_t seg = begin; seg < end; seg += EM_RP_SCAN_SEGMENT) {
      const int64_t e0 = seg + lane * 4;
      A v[4], local = one;
#pragma unroll
      for (int k = 0; k < 4; k++) {
        if (e0 + k < end) local = scan_op(local, (A)em_val(xr[e0 + k]), prod);
        v[k] = local;
      }
      A incl = local; /* inclusive scan of the lanes' totals */
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        A t = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl = scan_op(t, incl, prod);
      }
      A excl = __shfl_up_sync(0xffffffffu, incl, 1);
      if (lane == 0) excl = one;
      if (pass != PASS_TOTALS) {
        const A before = scan_op(run, excl, prod);
#pragma unroll
        for (int k = 0; k < 4; k++)
          if (e0 + k < end) yr[e0 + k] = em_narrow<O>(scan_op(before, v[k], prod));
      }
      run = scan_op(run, __shfl_sync(0xffffffffu, incl, 31), prod);
    }
    if (pass == PASS_TOTALS && lane == 0) carry[w] = run;
  }
}

/* Thread t scans (column, chunk) = (t % lines, t / lines) of [outer, n, inner]. */
template <typename T, typename A, typename O>
__global__ void __launch_bounds__(EM_RP_THREADS)
    scan_cols(const T *x, O *y, int64_t lines, int64_t n, int64_t inner, int64_t chunk, int64_t nchunks, int prod,
              int pass, A *carry) {
  const A one = prod ? (A)1 : (A)0;
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < lines * nchunks;
       t += (int64_t)gridDim.x * blockDim.x) {
    const int64_t c = t / lines, col = t - c * lines, o = col / inner, i = col - o * inner;
    const int64_t begin = c * chunk, end = begin + chunk < n ? begin + chunk : n;
    const T *xc = x + o * n * inner + i;
    O *yc = y + o * n * inner + i;
    A run = pass == PASS_WITH_CARRY ? carry[col * nchunks + c] : one;
    for (int64_t d = begin; d < end; d++) {
      run = scan_op(run, (A)em_val(xc[d * inner]), prod);
      if (pass != PASS_TOTALS) yc[d * inner] = em_narrow<O>(run);
    }
    if (pass == PASS_TOTALS) carry[col * nchunks + c] = run;
  }
}

/* Chunk totals -> the exclusive scan of them along each line, in chunk order. */
template <typename A>
__global__ void __launch_bounds__(EM_RP_THREADS) scan_carries(A *carry, int64_t lines, int64_t nchunks, int prod) {
  for (int64_t line = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; line < lines;
       line += (int64_t)gridDim.x * blockDim.x) {
    A run = prod ? (A)1 : (A)0;
    for (int64_t c = 0; c < nchunks; c++) {
      A t = carry[line * nchunks + c];
      carry[line * nchunks + c] = run;
      run = scan_op(run, t, prod);
    }
  }
}

struct scan_call {
  const char *name;
  int64_t outer, n, inner;
  int prod, device;
  cudaStream_t stream;
};

template <typename T, typename A, typename O> em_status launch(const scan_call &c, O *y, const T *x) {
  em_rp_scan p;
  em_rp_plan_scan(c.outer, c.n, c.inner, &p);
  em_gpu_temp tmp(c.device);
  A *carry = nullptr;
  if (p.nchunks > 1) EM_TEMP_OR_FAIL(carry = tmp.get<A>((size_t)p.work));
  auto pass = [&](int which) {
    if (p.rows_layout)
      scan_rows<T, A, O><<<p.grid_x, EM_RP_THREADS, 0, c.stream>>>(x, y, p.lines, c.n, p.chunk, p.nchunks, c.prod,
                                                                    which, carry);
    else
      scan_cols<T, A, O><<<p.grid_x, EM_RP_THREADS, 0, c.stream>>>(x, y, p.lines, c.n, c.inner, p.chunk, p.nchunks,
                                                                    c.prod, which, carry);
    return em_gpu_launch_check(c.name);
  };
  if (p.nchunks == 1) return pass(PASS_FULL);
  em_status st = pass(PASS_TOTALS);
  if (st) return st;
  scan_carries<A><<<em_rp_blocks(p.lines, EM_RP_THREADS, EM_RP_MAX_GRID_X), EM_RP_THREADS, 0, c.stream>>>(
      carry, p.lines, p.nchunks, c.prod);
  if ((st = em_gpu_launch_check(c.name))) return st;
  return pass(PASS_WITH_CARRY);
}

} // namespace

extern "C" em_status em_gpu_scan(int prod, em_tensor *out, const em_tensor *a, int dim) {
  const char *name = prod ? "cumprod" : "cumsum";
  cudaStream_t stream;
  em_status st = em_gpu_enter(name, a->storage->device.index, &stream);
  if (st) return st;
  scan_call c = {name, 1, 1, 1, prod, a->storage->device.index, stream};
  for (int d = 0; d < a->ndim; d++) {
    if (d < dim) c.outer *= a->sizes[d];
    else if (d == dim) c.n = a->sizes[d];
    else c.inner *= a->sizes[d];
  }
  if (c.outer * c.n * c.inner == 0) return EM_OK;
  void *y = em_tensor_ptr(out);
  const void *x = em_tensor_ptr(a);
  switch (a->dtype) {
    case EM_FLOAT32: return launch<float, double, float>(c, (float *)y, (const float *)x);
    case EM_FLOAT64: return launch<double, double, double>(c, (double *)y, (const double *)x);
    case EM_FLOAT16: return launch<__half, double, __half>(c, (__half *)y, (const __half *)x);
    case EM_BFLOAT16:
      return launch<__nv_bfloat16, double, __nv_bfloat16>(c, (__nv_bfloat16 *)y, (const __nv_bfloat16 *)x);
    case EM_INT32: return launch<int32_t, int64_t, int64_t>(c, (int64_t *)y, (const int32_t *)x);
    case EM_INT64: return launch<int64_t, int64_t, int64_t>(c, (int64_t *)y, (const int64_t *)x);
    case EM_UINT8: case EM_BOOL: return launch<uint8_t, int64_t, int64_t>(c, (int64_t *)y, (const uint8_t *)x);
    default: return em_set_error(EM_ERR_DTYPE, "%s: dtype %s is not supported on cuda", name, em_dtype_name(a->dtype));
  }
}
