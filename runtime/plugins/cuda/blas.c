/* blas.c - batched matrix products on the GPU through cuBLAS (the backend's gemm entry).
 *
 * out[..., M, N] = alpha * a[..., M, K] @ b[..., K, N] + beta * out. The layout decision
 * (which operand goes as a transpose, leading dims, out^T = b^T a^T for a row-major output)
 * is blas_plan.c's; a matrix is copied to contiguous memory only when cuBLAS cannot read it
 * as it lies. Batch dims whose strides advance uniformly (broadcast ones included, with
 * stride 0) become one cublasGemmStridedBatchedEx call; the host loops over the others.
 *
 * Precision: float32 computes in float32 (CUBLAS_COMPUTE_32F: no TF32), so that results
 * differ from the CPU's only by the rounding of sums taken in another order;
 * EMBER_CUDA_TF32=1 in the environment allows TF32 tensor cores for float32 matmul and
 * convolution (read once per process). float16 and bfloat16 multiply on tensor cores,
 * accumulate in float32 and round once to the input dtype; float64 computes in float64.
 * Integer dtypes are refused (EM_ERR_DTYPE).
 *
 * Each cuBLAS handle gets its math mode once (it keeps split-K reductions in the compute
 * type) and host pointer mode on every call. Each (handle, stream) pair gets its own
 * workspace, held for the life of the process: cuBLAS is bitwise reproducible only when
 * streams do not share one, and cublasSetStream drops a workspace set before it, so the
 * workspace is set again on every call (cheap: it stores a pointer). */
#include <cublas_v2.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "blas_plan.h"
#include "nn_gpu.h"

/* ---- TF32 opt-in */

static int tf32_enabled;
static pthread_once_t tf32_once = PTHREAD_ONCE_INIT;
static void read_tf32(void) {
  const char *v = getenv("EMBER_CUDA_TF32");
  tf32_enabled = v && strcmp(v, "1") == 0;
}
int em_gpu_tf32_enabled(void) {
  pthread_once(&tf32_once, read_tf32);
  return tf32_enabled;
}

/* ---- errors */

static em_status blas_error(const char *what, cublasStatus_t s) {
  em_status code = s == CUBLAS_STATUS_ALLOC_FAILED    ? EM_ERR_MEMORY
                   : s == CUBLAS_STATUS_NOT_SUPPORTED ? EM_ERR_UNSUPPORTED
                   : s == CUBLAS_STATUS_ARCH_MISMATCH ? EM_ERR_UNSUPPORTED
                                                      : EM_ERR_RUNTIME;
  return em_set_error(code, "matmul: %s failed: %s (%s)", what, cublasGetStatusName(s), cublasGetStatusString(s));
}

/* ---- per-handle configuration and per-(handle, stream) workspaces */

#define MAX_HANDLES 64
#define MAX_WORKSPACES 64

typedef struct workspace {
  cublasHandle_t handle;
  cudaStream_t stream;
  void *ptr; /* NULL: could not be allocated; cuBLAS's own pool is used */
  size_t size;
} workspace;

static pthread_mutex_t config_lock = PTHREAD_MUTEX_INITIALIZER;
static cublasHandle_t configured[MAX_HANDLES];
static int nconfigured;
static workspace workspaces[MAX_WORKSPACES];
static int nworkspaces;

/* cuBLAS's recommendation: 32 MiB on Hopper and later, 4 MiB before. */
static size_t workspace_size(int device) {
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    (void)cudaGetLastError(); /* not sticky; the small size is safe */
    major = 0;
  }
  return major >= 9 ? (size_t)32 << 20 : (size_t)4 << 20;
}

/* Under config_lock. */
static em_status configure_handle(cublasHandle_t h) {
  for (int i = 0; i < nconfigured; i++)
    if (configured[i] == h) return EM_OK;
  cublasStatus_t s;
  cublasMath_t mode = (cublasMath_t)((em_gpu_tf32_enabled() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH) |
                                     CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  if ((s = cublasSetMathMode(h, mode)) != CUBLAS_STATUS_SUCCESS) return blas_error("cublasSetMathMode", s);
  if (nconfigured < MAX_HANDLES) configured[nconfigured++] = h; /* (else configured again next time) */
  return EM_OK;
}

/* Under config_lock: the workspace of (h, stream), allocated on first use. */
static workspace *workspace_for(cublasHandle_t h, cudaStream_t stream, int device) {
  for (int i = 0; i < nworkspaces; i++)
    if (workspaces[i].handle == h && workspaces[i].stream == stream) return &workspaces[i];
  if (nworkspaces == MAX_WORKSPACES) return NULL; /* many streams: cuBLAS's own pool for the rest */
  workspace *w = &workspaces[nworkspaces++];
  w->handle = h;
  w->stream = stream;
  w->size = workspace_size(device);
  w->ptr = em_gpu_malloc(w->size, device);
  if (!w->ptr) em_clear_error(); /* not fatal: cuBLAS then allocates from its own pool */
  return w;
}

/* The device's handle, bound to stream, configured, with stream's workspace. */
static em_status handle_for(int device, cudaStream_t stream, cublasHandle_t *out) {
  cublasHandle_t h = (cublasHandle_t)em_gpu_cublas(device);
  if (!h) {
    char why[256];
    snprintf(why, sizeof why, "%s", em_last_error());
    return em_set_error(EM_ERR_DEVICE, "matmul: no cuBLAS handle for cuda:%d (%s)", device, why);
  }
  pthread_mutex_lock(&config_lock);
  em_status st = configure_handle(h);
  workspace *w = st ? NULL : workspace_for(h, stream, device);
  void *ws = w ? w->ptr : NULL;
  size_t size = w ? w->size : 0;
  pthread_mutex_unlock(&config_lock);
  if (st) return st;
  /* alpha and beta live on the host; set per call, as another user of the handle may
   * have switched it to device pointers */
  cublasStatus_t s = cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST);
  if (s != CUBLAS_STATUS_SUCCESS) return blas_error("cublasSetPointerMode", s);
  if (ws && (s = cublasSetWorkspace(h, ws, size)) != CUBLAS_STATUS_SUCCESS) return blas_error("cublasSetWorkspace", s);
  *out = h;
  return EM_OK;
}

/* ---- operands */

static em_gemm_matrix matrix_of(const em_tensor *t) {
  int n = t->ndim;
  em_gemm_matrix m = {t->sizes[n - 2], t->sizes[n - 1], t->strides[n - 2], t->strides[n - 1]};
  return m;
}

/* An output that repeats an element (a zero stride in a dim of size > 1) would have
 * several products race to one place: it is computed aside instead. */
static int repeats_elements(const em_tensor *t) {
  for (int d = 0; d < t->ndim; d++)
    if (t->sizes[d] > 1 && t->strides[d] == 0) return 1;
  return 0;
}

/* ---- the call */

typedef struct gemm_types {
  cudaDataType data;
  cublasComputeType_t compute;
  int scalar_double; /* alpha and beta are double (float64) or float (the rest) */
} gemm_types;

static em_status types_of(em_dtype dtype, gemm_types *t) {
  switch (dtype) {
    case EM_FLOAT32:
      *t = (gemm_types){CUDA_R_32F, em_gpu_tf32_enabled() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, 0};
      return EM_OK;
    case EM_FLOAT64: *t = (gemm_types){CUDA_R_64F, CUBLAS_COMPUTE_64F, 1}; return EM_OK;
    case EM_FLOAT16: *t = (gemm_types){CUDA_R_16F, CUBLAS_COMPUTE_32F, 0}; return EM_OK;
    case EM_BFLOAT16: *t = (gemm_types){CUDA_R_16BF, CUBLAS_COMPUTE_32F, 0}; return EM_OK;
    default:
      return em_set_error(EM_ERR_DTYPE,
                          "matmul: dtype %s is not supported on cuda (float32, float64, float16, bfloat16); convert "
                          "the operands to a floating dtype first",
                          em_dtype_name(dtype));
  }
}

typedef struct gemm_call {
  cublasHandle_t handle;
  gemm_types types;
  em_gemm_layout plan;
  const void *alpha, *beta;
  int64_t count; /* batches per call */
  int64_t stride[3]; /* first, second, out: elements between batches */
} gemm_call;

static em_status run(const gemm_call *c, const void *first, const void *second, void *out) {
  const em_gemm_layout *p = &c->plan;
  cublasOperation_t ta = p->trans[0] ? CUBLAS_OP_T : CUBLAS_OP_N, tb = p->trans[1] ? CUBLAS_OP_T : CUBLAS_OP_N;
  int fits = p->m <= INT_MAX && p->n <= INT_MAX && p->k <= INT_MAX && p->ld[0] <= INT_MAX && p->ld[1] <= INT_MAX &&
             p->ld[2] <= INT_MAX && c->count <= INT_MAX;
  cublasStatus_t s;
  if (fits)
    s = cublasGemmStridedBatchedEx(c->handle, ta, tb, (int)p->m, (int)p->n, (int)p->k, c->alpha, first, c->types.data,
                                   (int)p->ld[0], c->stride[0], second, c->types.data, (int)p->ld[1], c->stride[1],
                                   c->beta, out, c->types.data, (int)p->ld[2], c->stride[2], (int)c->count,
                                   c->types.compute, CUBLAS_GEMM_DEFAULT);
  else /* the 64-bit interface (cuBLAS 12+) only where a size needs it */
    s = cublasGemmStridedBatchedEx_64(c->handle, ta, tb, p->m, p->n, p->k, c->alpha, first, c->types.data, p->ld[0],
                                      c->stride[0], second, c->types.data, p->ld[1], c->stride[1], c->beta, out,
                                      c->types.data, p->ld[2], c->stride[2], c->count, c->types.compute,
                                      CUBLAS_GEMM_DEFAULT);
  return s == CUBLAS_STATUS_SUCCESS ? EM_OK : blas_error("cublasGemmStridedBatchedEx", s);
}

/* out = beta * out when there is nothing to multiply (K = 0); beta = 0 never reads out. */
static em_status scale_only(em_tensor *out, double beta) {
  if (beta == 0) return em_fill(out, 0);
  em_tensor *o = out;
  return em_binary_scalar(EM_MUL, &o, out, beta, 0);
}

static em_status gemm_batches(const em_tensor *const ops[3], const em_gemm_layout *plan, gemm_call *call) {
  const em_tensor *out = ops[0];
  int nb = out->ndim - 2;
  /* cuBLAS's first operand is b when the plan swaps, else a */
  const em_tensor *first = plan->swap ? ops[2] : ops[1], *second = plan->swap ? ops[1] : ops[2];
  const em_tensor *order[3] = {first, second, out};
  const int64_t *strides[3] = {first->strides, second->strides, out->strides};
  int split = em_gemm_batch_split(nb, out->sizes, strides, call->stride, &call->count);
  int64_t outer = 1;
  for (int d = 0; d < split; d++) outer *= out->sizes[d];
  size_t elsize = em_dtype_size(out->dtype);
  for (int64_t o = 0; o < outer; o++) {
    char *ptr[3];
    for (int i = 0; i < 3; i++)
      ptr[i] =
          em_tensor_ptr(order[i]) + em_gemm_outer_offset(split, out->sizes, order[i]->strides, o) * (int64_t)elsize;
    em_status st = run(call, ptr[0], ptr[1], ptr[2]);
    if (st) return st;
  }
  return EM_OK;
}

em_status em_gpu_gemm(em_tensor *out, const em_tensor *a, const em_tensor *b, double alpha, double beta) {
  gemm_types types;
  em_status st = types_of(out->dtype, &types);
  if (st) return st;
  int n = out->ndim, device = out->storage->device.index;
  int64_t M = out->sizes[n - 2], N = out->sizes[n - 1], K = a->sizes[n - 1];
  if (emp_shape_numel(n - 2, out->sizes) == 0 || M == 0 || N == 0) return EM_OK;
  cudaStream_t stream;
  if ((st = em_gpu_enter("matmul", device, &stream))) return st;
  if (K == 0) return scale_only(out, beta);
  const em_tensor *ops[3] = {out, a, b};
  em_tensor *copies[3] = {NULL, NULL, NULL};
  for (int i = 0; i < 3 && !st; i++) {
    int trans;
    int64_t ld;
    if (em_gemm_matrix_layout(matrix_of(ops[i]), &trans, &ld) && !(i == 0 && repeats_elements(out))) continue;
    /* cuBLAS cannot read this one as it lies: work on a contiguous copy (the output's
     * values are needed only when beta reads them) */
    if (!(st = emp_compact_matrices(ops[i], i != 0, i > 0 || beta != 0, &copies[i]))) ops[i] = copies[i];
  }
  gemm_call call;
  if (!st && !em_gemm_plan(matrix_of(ops[0]), matrix_of(ops[1]), matrix_of(ops[2]), &call.plan))
    st = em_set_error(EM_ERR_RUNTIME, "matmul: no cuBLAS layout for [%lld, %lld] @ [%lld, %lld] after copying",
                      (long long)M, (long long)K, (long long)K, (long long)N);
  if (!st) st = handle_for(device, stream, &call.handle);
  if (!st) {
    float falpha = (float)alpha, fbeta = (float)beta;
    call.types = types;
    call.alpha = types.scalar_double ? (const void *)&alpha : (const void *)&falpha;
    call.beta = types.scalar_double ? (const void *)&beta : (const void *)&fbeta;
    st = gemm_batches(ops, &call.plan, &call);
  }
  if (!st && copies[0]) st = em_copy_(out, copies[0]); /* write back what was computed aside */
  for (int i = 0; i < 3; i++) em_tensor_release(copies[i]);
  return st;
}
