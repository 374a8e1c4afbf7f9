/* sparse_rows.cu - row-sparse gradients on the GPU besides the embedding bags' (embedding.cu):
 * the coalescing of a row list (distinct rows ascending, repeats summed in input order) and
 * the fused row-wise optimizer updates that read them: SGD, Adagrad and row-wise Adagrad
 * (the backend entries sparse_coalesce and optim_rows; cpu/sparse.c is the reference).
 *
 * Coalescing sorts (row, position) pairs (segments.cuh) and sums each row's run in order, as
 * the CPU does: no float atomics, the same result on every run; it reads the number of
 * distinct rows back to the host (one synchronisation, as PyTorch's coalesce).
 *
 * The update gives each touched row to one warp, which reads its gradient row once and
 * writes the parameter row and its accumulator in the same pass: the rows are distinct, so
 * no two warps touch the same memory. Row-wise Adagrad's mean of squares is reduced over
 * the warp in double (the CPU sums in double too, in another order), then lane 0 updates
 * the row's accumulator. The formulas are the CPU's, in the element type; results differ
 * from the CPU's only by nvcc's FMA contraction and sqrt rounding (a few ulps). */
#include <limits.h>
#include <math.h>
#include "ember/sparse.h"
#include "segments.cuh"

namespace {

const char *const OP_COALESCE = "sparse gradient";

__global__ void coalesce_keys_kernel(const int64_t *__restrict__ rows_in, int64_t K, unsigned long long *keys,
                                     int64_t *pos) {
  for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < K; k += (int64_t)gridDim.x * blockDim.x) {
    keys[k] = (unsigned long long)rows_in[k]; /* rows are >= 0 (ember/sparse.h) */
    pos[k] = k;
  }
}

/* rows[u] = the u-th distinct row, values[u] = the sum of its values_in rows in input order. */
template <typename T>
__global__ void coalesce_values_kernel(int64_t *__restrict__ rows, T *__restrict__ values, const T *__restrict__ in,
                                       const unsigned long long *__restrict__ uniq, const int64_t *__restrict__ counts,
                                       const int64_t *__restrict__ starts, const int64_t *__restrict__ num_runs,
                                       const int64_t *__restrict__ pos, int64_t D) {
  const int64_t runs = *num_runs;
  for (int64_t u = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; u < runs; u += (int64_t)gridDim.x * blockDim.y) {
    if (threadIdx.x == 0) rows[u] = (int64_t)uniq[u];
    int64_t p0 = starts[u], p1 = p0 + counts[u];
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      T acc = 0;
      for (int64_t p = p0; p < p1; p++) acc += in[pos[p] * D + j];
      values[u * D + j] = acc;
    }
  }
}

/* A warp per row: 32 lanes along D, 8 rows per block. */
const dim3 ROW_BLOCK(32, 8);

unsigned rows_grid(int64_t rows, int device) {
  int64_t g = (rows + ROW_BLOCK.y - 1) / ROW_BLOCK.y, cap = (int64_t)em_gpu_sm_count(device) * 16;
  if (g > cap) g = cap;
  return (unsigned)(g > 0 ? g : 1);
}

template <typename T>
em_status coalesce(em_tensor *rows, em_tensor *values, int64_t *nnz, const em_tensor *rows_in,
                   const em_tensor *values_in, int device, cudaStream_t stream) {
  int64_t K = em_tensor_numel(rows_in), D = values_in->sizes[1];
  *nnz = 0;
  if (K == 0) return EM_OK;
  if (K > INT_MAX)
    return em_set_error(EM_ERR_UNSUPPORTED, "%s: coalescing %lld rows, more than %d (CUB's limit) on cuda", OP_COALESCE,
                        (long long)K, INT_MAX);
  em_gpu_carver cv = {0, nullptr};
  em_gpu_segments sg;
  em_status st = em_gpu_plan_segments(OP_COALESCE, &cv, &sg, K);
  if (st) return st;
  char *tmp = (char *)em_gpu_malloc(cv.used, device);
  if (!tmp) return em_last_status();
  cv = {0, tmp};
  em_gpu_plan_segments(OP_COALESCE, &cv, &sg, K);
  coalesce_keys_kernel<<<em_gpu_blocks(K, device), EM_GPU_THREADS, 0, stream>>>(
      (const int64_t *)em_tensor_ptr(rows_in), K, sg.keys_in, sg.pos_in);
  st = em_gpu_launch_check(OP_COALESCE);
  /* all 63 bits: the entry is not told the table's size */
  if (!st) st = em_gpu_run_segments(OP_COALESCE, &sg, K, (unsigned long long)INT64_MAX, stream);
  if (!st) {
    coalesce_values_kernel<T><<<rows_grid(K, device), ROW_BLOCK, 0, stream>>>(
        (int64_t *)em_tensor_ptr(rows), (T *)em_tensor_ptr(values), (const T *)em_tensor_ptr(values_in), sg.uniq,
        sg.counts, sg.starts, sg.num_runs, sg.pos_out, D);
    st = em_gpu_launch_check(OP_COALESCE);
  }
  if (!st) st = em_gpu_read_count(OP_COALESCE, sg.num_runs, nnz, stream);
  em_gpu_free_ptr(tmp);
  return st;
}

/* The update's constants in the element type, as cpu/sparse.c converts them. */
template <typename T> struct row_rule {
  int rule;
  T lr, eps, wd, sign;
};

/* w [R, D], g [K, D] at rows [K] (NULL: row k is k), state NULL / [R, D] / [R]. */
template <typename T>
__global__ void rows_update_kernel(T *__restrict__ w, const int64_t *__restrict__ rows, int64_t K,
                                   const T *__restrict__ g, T *__restrict__ state, int64_t D, row_rule<T> a) {
  const int lane = threadIdx.x;
  for (int64_t k = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; k < K; k += (int64_t)gridDim.x * blockDim.y) {
    int64_t r = rows ? rows[k] : k;
    T *wr = w + r * D;
    const T *gr = g + k * D;
    if (a.rule == EM_ROWS_SGD) {
      for (int64_t j = lane; j < D; j += 32) wr[j] -= a.lr * (a.sign * gr[j] + a.wd * wr[j]);
    } else if (a.rule == EM_ROWS_ADAGRAD) {
      T *sr = state + r * D;
      for (int64_t j = lane; j < D; j += 32) {
        T gj = a.sign * gr[j] + a.wd * wr[j];
        T s = sr[j] + gj * gj;
        sr[j] = s;
        wr[j] -= a.lr * gj / (sqrt(s) + a.eps);
      }
    } else { /* row-wise Adagrad: one accumulator per row, the mean of the squared gradient */
      double sq = 0;
      for (int64_t j = lane; j < D; j += 32) {
        T gj = a.sign * gr[j] + a.wd * wr[j];
        sq += (double)gj * gj;
      }
      sq = em_warp_reduce(sq, [](double x, double y) { return x + y; });
      T s = 0;
      if (lane == 0) {
        s = state[r] + (T)(sq / (double)D);
        state[r] = s;
      }
      s = em_shfl(s, 0); /* the whole warp runs this loop the same number of times */
      T step = a.lr / (sqrt(s) + a.eps);
      for (int64_t j = lane; j < D; j += 32) wr[j] -= step * (a.sign * gr[j] + a.wd * wr[j]);
    }
  }
}

template <typename T>
em_status rows_update(em_tensor *param, const em_tensor *rows, const em_tensor *grad, em_tensor *state,
                      const em_row_optim_args *args, int device, cudaStream_t stream) {
  int64_t K = grad->sizes[0], D = grad->sizes[1];
  if (K == 0 || D == 0) return EM_OK;
  row_rule<T> a;
  a.rule = args->rule;
  a.lr = (T)args->lr, a.eps = (T)args->eps, a.wd = (T)args->weight_decay, a.sign = args->maximize ? (T)-1 : (T)1;
  rows_update_kernel<T><<<rows_grid(K, device), ROW_BLOCK, 0, stream>>>(
      (T *)em_tensor_ptr(param), rows ? (const int64_t *)em_tensor_ptr(rows) : nullptr, K,
      (const T *)em_tensor_ptr(grad), state ? (T *)em_tensor_ptr(state) : nullptr, D, a);
  return em_gpu_launch_check(args->rule == EM_ROWS_SGD       ? "sgd"
                             : args->rule == EM_ROWS_ADAGRAD ? "adagrad"
                                                             : "rowwise_adagrad");
}

}  // namespace

/* The backend table's entries (table.c; backend.h says what each computes). */
em_status em_gpu_sparse_coalesce(em_tensor *rows, em_tensor *values, int64_t *nnz, const em_tensor *rows_in,
                                 const em_tensor *values_in) {
  int device = values_in->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter(OP_COALESCE, device, &stream);
  if (st) return st;
  switch (values_in->dtype) {
    case EM_FLOAT32: return coalesce<float>(rows, values, nnz, rows_in, values_in, device, stream);
    case EM_FLOAT64: return coalesce<double>(rows, values, nnz, rows_in, values_in, device, stream);
    default:
      return em_set_error(EM_ERR_DTYPE, "%s: values are %s, expected float32 or float64 on cuda", OP_COALESCE,
                          em_dtype_name(values_in->dtype));
  }
}

em_status em_gpu_optim_rows(em_tensor *param, const em_tensor *rows, const em_tensor *grad, em_tensor *state,
                            const em_row_optim_args *args) {
  const char *op = args->rule == EM_ROWS_SGD ? "sgd" : args->rule == EM_ROWS_ADAGRAD ? "adagrad" : "rowwise_adagrad";
  int device = param->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter(op, device, &stream);
  if (st) return st;
  switch (param->dtype) {
    case EM_FLOAT32: return rows_update<float>(param, rows, grad, state, args, device, stream);
    case EM_FLOAT64: return rows_update<double>(param, rows, grad, state, args, device, stream);
    default:
      return em_set_error(EM_ERR_DTYPE, "%s: the parameter is %s, expected float32 or float64 on cuda", op,
                          em_dtype_name(param->dtype));
  }
}
