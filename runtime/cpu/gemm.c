/* gemm.c - batched matrix products on the CPU through OpenBLAS cblas.
 *
 * out[..., M, N] = alpha * a[..., M, K] @ b[..., K, N] + beta * out. Each matrix goes to
 * BLAS as it lies in memory: a unit stride in either dim and a valid leading dimension is
 * enough (a transposed view is passed as a transpose, not copied). An output stored
 * column by column is handled by computing out^T = b^T @ a^T. Only a matrix BLAS cannot
 * describe (two non-unit strides, or a broadcast dim) is copied to contiguous memory.
 * Shapes with a unit M or N go to gemv or dot, which OpenBLAS 0.3.21's gemm does not do
 * by itself. Integer dtypes use a plain loop (they are for exactness, not speed). */
#include <cblas.h>
#include <limits.h>
#include <omp.h>
#include <stdlib.h>
#include "cpu_impl.h"

/* A matrix as BLAS sees it: logical rows x cols at ptr with element strides rs, cs;
 * trans says whether it is stored row-major (0) or as its transpose (1), with ld. */
typedef struct mat {
  char *ptr;
  int64_t rows, cols, rs, cs, ld;
  int trans;
} mat;

static mat mat_t(mat m) { /* the transpose: same memory */
  mat t = {m.ptr, m.cols, m.rows, m.cs, m.rs, m.ld, !m.trans};
  return t;
}

static int64_t max1(int64_t v) { return v > 1 ? v : 1; }

/* Fills trans and ld when the layout is one BLAS takes; returns 0 otherwise. */
static int blas_layout(mat *m) {
  if ((m->cs == 1 || m->cols == 1) && (m->rows == 1 || m->rs >= max1(m->cols))) {
    m->trans = 0;
    m->ld = m->rows == 1 ? max1(m->cols) : m->rs;
    return m->ld <= INT_MAX;
  }
  if ((m->rs == 1 || m->rows == 1) && (m->cols == 1 || m->cs >= max1(m->rows))) {
    m->trans = 1;
    m->ld = m->cols == 1 ? max1(m->rows) : m->cs;
    return m->ld <= INT_MAX;
  }
  return 0;
}

/* Element stride of a vector of length n for BLAS (any value works when n == 1). */
static int inc(int64_t n, int64_t stride) { return n == 1 ? 1 : (int)stride; }

/* ---- float32 / float64: one body per type ---- */

#define DEFINE_BLAS_GEMM(T, PREFIX)                                                                        \
  /* y = alpha * m @ x + beta * y */                                                                       \
  static void gemv_##PREFIX(mat m, const T *x, int incx, T *y, int incy, T alpha, T beta) {                \
    if (beta == 0) /* never read y: it may be uninitialised memory holding NaN bit patterns */             \
      for (int64_t i = 0; i < m.rows; i++) y[i * incy] = 0;                                                \
    if (!m.trans)                                                                                          \
      cblas_##PREFIX##gemv(CblasRowMajor, CblasNoTrans, (int)m.rows, (int)m.cols, alpha, (const T *)m.ptr, \
                           (int)m.ld, x, incx, beta, y, incy);                                             \
    else                                                                                                   \
      cblas_##PREFIX##gemv(CblasRowMajor, CblasTrans, (int)m.cols, (int)m.rows, alpha, (const T *)m.ptr,   \
                           (int)m.ld, x, incx, beta, y, incy);                                             \
  }                                                                                                        \
  static void gemm_one_##PREFIX(mat a, mat b, mat c, T alpha, T beta) {                                    \
    if (c.trans) { /* column-major output: out^T = b^T @ a^T */                                            \
      mat at = mat_t(a);                                                                                   \
      a = mat_t(b), b = at, c = mat_t(c);                                                                  \
    }                                                                                                      \
    int64_t M = c.rows, N = c.cols, K = a.cols;                                                            \
    T *out = (T *)c.ptr;                                                                                   \
    if (K == 0) { /* nothing to multiply: out = beta * out */                                              \
      for (int64_t i = 0; i < M; i++)                                                                      \
        for (int64_t j = 0; j < N; j++) out[i * c.rs + j] = beta == 0 ? 0 : beta * out[i * c.rs + j];      \
    } else if (M == 1 && N == 1) {                                                                         \
      T d = cblas_##PREFIX##dot((int)K, (const T *)a.ptr, inc(K, a.cs), (const T *)b.ptr, inc(K, b.rs));   \
      out[0] = beta == 0 ? alpha * d : alpha * d + beta * out[0];                                          \
    } else if (N == 1) {                                                                                   \
      gemv_##PREFIX(a, (const T *)b.ptr, inc(K, b.rs), out, inc(M, c.rs), alpha, beta);                    \
    } else if (M == 1) {                                                                                   \
      gemv_##PREFIX(mat_t(b), (const T *)a.ptr, inc(K, a.cs), out, inc(N, c.cs), alpha, beta);             \
    } else {                                                                                               \
      cblas_##PREFIX##gemm(CblasRowMajor, a.trans ? CblasTrans : CblasNoTrans,                             \
                           b.trans ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, alpha,             \
                           (const T *)a.ptr, (int)a.ld, (const T *)b.ptr, (int)b.ld, beta, out, (int)c.ld);  \
    }                                                                                                      \
  }
DEFINE_BLAS_GEMM(float, s)
DEFINE_BLAS_GEMM(double, d)

/* ---- integers: a plain loop (strided, any layout) ---- */

#define DEFINE_INT_GEMM(T, NAME)                                                      \
  static void gemm_one_##NAME(mat a, mat b, mat c, T alpha, T beta) {                 \
    const T *A = (const T *)a.ptr, *B = (const T *)b.ptr;                             \
    T *C = (T *)c.ptr;                                                                \
    for (int64_t i = 0; i < c.rows; i++)                                              \
      for (int64_t j = 0; j < c.cols; j++) {                                          \
        T acc = 0;                                                                    \
        for (int64_t k = 0; k < a.cols; k++) acc += A[i * a.rs + k * a.cs] * B[k * b.rs + j * b.cs]; \
        T *o = C + i * c.rs + j * c.cs;                                               \
        *o = beta == 0 ? (T)(alpha * acc) : (T)(alpha * acc + beta * *o);             \
      }                                                                               \
  }
DEFINE_INT_GEMM(int32_t, i32)
DEFINE_INT_GEMM(int64_t, i64)
DEFINE_INT_GEMM(uint8_t, u8)

/* ---- the batch loop ---- */

typedef struct gemm_job {
  const em_tensor *ops[3]; /* out, a, b: BLAS-describable (or integer) */
  mat m[3];                /* the matrix of batch 0 of each */
  int nbatch_dims;
  int64_t nbatch;
  em_dtype dtype;
  double alpha, beta;
} gemm_job;

static void run_batch(const gemm_job *job, int64_t batch) {
  mat m[3];
  for (int i = 0; i < 3; i++) {
    m[i] = job->m[i];
    const em_tensor *t = job->ops[i];
    int64_t rest = batch, off = 0;
    for (int d = job->nbatch_dims - 1; d >= 0; d--) {
      off += (rest % t->sizes[d]) * t->strides[d];
      rest /= t->sizes[d];
    }
    m[i].ptr += off * (int64_t)em_dtype_size(t->dtype);
  }
  switch (job->dtype) {
    case EM_FLOAT32: gemm_one_s(m[1], m[2], m[0], (float)job->alpha, (float)job->beta); break;
    case EM_FLOAT64: gemm_one_d(m[1], m[2], m[0], job->alpha, job->beta); break;
    case EM_INT32: gemm_one_i32(m[1], m[2], m[0], (int32_t)job->alpha, (int32_t)job->beta); break;
    case EM_INT64: gemm_one_i64(m[1], m[2], m[0], (int64_t)job->alpha, (int64_t)job->beta); break;
    case EM_UINT8: gemm_one_u8(m[1], m[2], m[0], (uint8_t)job->alpha, (uint8_t)job->beta); break;
    default: break;
  }
}

static mat matrix_of(const em_tensor *t) {
  int n = t->ndim;
  mat m = {em_tensor_ptr(t), t->sizes[n - 2], t->sizes[n - 1], t->strides[n - 2], t->strides[n - 1], 0, 0};
  return m;
}

/* Per-GEMM work (M*N*K) under which OpenBLAS runs one thread anyway: then the batches,
 * not the GEMMs, are spread over the threads. */
#define SMALL_GEMM (64 * 64 * 64)

/* A single GEMM of medium size is cut into one slab of output rows (or columns) per
 * thread, each slab a single-threaded OpenBLAS call inside one parallel region. OpenBLAS's
 * own threading meets its threads several times inside a call, polling with sched_yield in
 * between, which at the sizes of a training step (M = the batch, 128) costs 10-25% of a
 * GEMM on 2 threads. The slab direction matters as much: each thread packs all of the
 * operand it does not split, and splitting the MLP's first layer the wrong way made the
 * whole step 13% slower; duplicating the smaller operand made it 4% faster than OpenBLAS's
 * threading (bench/train_fmnist.sh). Slabs start on multiples of 16, the width of
 * OpenBLAS's kernels. Beyond SPLIT_MAX, OpenBLAS's threading is left to it. */
#define SPLIT_MAX ((int64_t)1 << 28)
#define SPLIT_MIN_SLAB 32
#define SPLIT_MAX_SHARED ((int64_t)1 << 20)

static mat slab(mat m, int rows_not_cols, int64_t from, int64_t to, size_t es) {
  if (rows_not_cols) {
    m.ptr += from * m.rs * (int64_t)es;
    m.rows = to - from;
  } else {
    m.ptr += from * m.cs * (int64_t)es;
    m.cols = to - from;
  }
  return m;
}

/* Runs the one GEMM of job (floats, nbatch 1) split over threads; returns 0 when the
 * shape does not suit a split (the caller runs it whole). */
static int run_split(const gemm_job *job, int threads) {
  mat a = job->m[1], b = job->m[2], c = job->m[0];
  int64_t M = c.rows, N = c.cols, K = a.cols, mnk = M * N * K;
  if (threads < 2 || mnk < SMALL_GEMM || mnk > SPLIT_MAX || omp_in_parallel()) return 0;
  int rows_ok = M >= (int64_t)SPLIT_MIN_SLAB * threads, cols_ok = N >= (int64_t)SPLIT_MIN_SLAB * threads;
  if (!rows_ok && !cols_ok) return 0;
  /* every thread packs the whole of the operand it does not split: duplicate the smaller
   * (a slab of rows shares b, K x N; a slab of columns shares a, M x K) */
  int by_rows = rows_ok && (!cols_ok || M > N);
  /* ... and only when that copy stays small next to a core's cache: packing a large
   * operand twice costs more than OpenBLAS's meetings (the CNN's 128 x 3136 layer) */
  if ((by_rows ? K * N : M * K) * (int64_t)em_dtype_size(job->dtype) > SPLIT_MAX_SHARED) return 0;
  int64_t len = by_rows ? M : N;
  size_t es = em_dtype_size(job->dtype);
#pragma omp parallel num_threads(threads)
  {
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t from = (len * t / nt) & ~(int64_t)15, to = t == nt - 1 ? len : (len * (t + 1) / nt) & ~(int64_t)15;
    if (to > from) {
      mat as = by_rows ? slab(a, 1, from, to, es) : a, bs = by_rows ? b : slab(b, 0, from, to, es);
      mat cs = slab(c, by_rows, from, to, es);
      if (job->dtype == EM_FLOAT32) gemm_one_s(as, bs, cs, (float)job->alpha, (float)job->beta);
      else gemm_one_d(as, bs, cs, job->alpha, job->beta);
    }
  }
  return 1;
}

em_status em_cpu_gemm(em_tensor *out, const em_tensor *a, const em_tensor *b, double alpha, double beta) {
  em_dtype dtype = out->dtype;
  if (dtype != EM_FLOAT32 && dtype != EM_FLOAT64 && dtype != EM_INT32 && dtype != EM_INT64 && dtype != EM_UINT8)
    return em_set_error(EM_ERR_DTYPE,
                        "matmul: dtype %s is not supported on the CPU (float32, float64, int32, int64, uint8)",
                        em_dtype_name(dtype));
  int n = out->ndim;
  int64_t M = out->sizes[n - 2], N = out->sizes[n - 1], K = a->sizes[n - 1];
  if (M > INT_MAX || N > INT_MAX || K > INT_MAX)
    return em_set_error(EM_ERR_SHAPE, "matmul: a dim of [%lld, %lld] @ [%lld, %lld] exceeds BLAS's 32-bit sizes",
                        (long long)M, (long long)K, (long long)K, (long long)N);
  gemm_job job = {.ops = {out, a, b}, .nbatch_dims = n - 2, .nbatch = em_shape_numel(n - 2, out->sizes),
                  .dtype = dtype, .alpha = alpha, .beta = beta};
  if (job.nbatch == 0 || M == 0 || N == 0) return EM_OK;
  int is_float = dtype == EM_FLOAT32 || dtype == EM_FLOAT64;
  em_tensor *copies[3] = {NULL, NULL, NULL};
  em_status st = EM_OK;
  for (int i = 0; i < 3 && !st; i++) {
    job.m[i] = matrix_of(job.ops[i]);
    if (!is_float || blas_layout(&job.m[i])) continue;
    /* BLAS cannot read this one as it lies: work on a contiguous copy. */
    if ((st = em_compact_matrices(job.ops[i], 1, i > 0 || beta != 0, &copies[i]))) break;
    job.ops[i] = copies[i];
    job.m[i] = matrix_of(copies[i]);
    blas_layout(&job.m[i]);
  }
  if (st) goto done;
  int64_t mnk = M * N * K;
  int threads = em_get_num_threads();
  if (job.nbatch > 1 && mnk <= SMALL_GEMM && job.nbatch * mnk >= EM_PARALLEL_GRAIN && threads > 1 &&
      !omp_in_parallel()) {
    /* Inside a parallel region OpenBLAS (OpenMP build) runs each call on one thread. */
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t batch = 0; batch < job.nbatch; batch++) run_batch(&job, batch);
  } else if (!(job.nbatch == 1 && is_float && run_split(&job, threads))) {
    for (int64_t batch = 0; batch < job.nbatch; batch++) run_batch(&job, batch);
  }
  if (copies[0]) st = em_cpu_copy(out, copies[0]); /* write back what was computed aside */
done:
  for (int i = 0; i < 3; i++) em_tensor_release(copies[i]);
  return st;
}
