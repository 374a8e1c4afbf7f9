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
#include <string.h>
#include "autograd/autocast.h"
#include "cpu_dnnl.h"
#include "cpu_impl.h"
#include "plugins/plugin_api.h"

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

#define DEFINE_BLAS_GEMM(T, PREFIX)                                                                                    \
  /* y = alpha * m @ x + beta * y */                                                                                   \
  static void gemv_##PREFIX(mat m, const T *x, int incx, T *y, int incy, T alpha, T beta) {                            \
    if (beta == 0) /* never read y: it may be uninitialised memory holding NaN bit patterns */                         \
      for (int64_t i = 0; i < m.rows; i++) y[i * incy] = 0;                                                            \
    if (!m.trans)                                                                                                      \
      cblas_##PREFIX##gemv(CblasRowMajor, CblasNoTrans, (int)m.rows, (int)m.cols, alpha, (const T *)m.ptr, (int)m.ld,  \
                           x, incx, beta, y, incy);                                                                    \
    else                                                                                                               \
      cblas_##PREFIX##gemv(CblasRowMajor, CblasTrans, (int)m.cols, (int)m.rows, alpha, (const T *)m.ptr, (int)m.ld, x, \
                           incx, beta, y, incy);                                                                       \
  }                                                                                                                    \
  static void gemm_one_##PREFIX(mat a, mat b, mat c, T alpha, T beta) {                                                \
    if (c.trans) { /* column-major output: out^T = b^T @ a^T */                                                        \
      mat at = mat_t(a);                                                                                               \
      a = mat_t(b), b = at, c = mat_t(c);                                                                              \
    }                                                                                                                  \
    int64_t M = c.rows, N = c.cols, K = a.cols;                                                                        \
    T *out = (T *)c.ptr;                                                                                               \
    if (K == 0) { /* nothing to multiply: out = beta * out */                                                          \
      for (int64_t i = 0; i < M; i++)                                                                                  \
        for (int64_t j = 0; j < N; j++) out[i * c.rs + j] = beta == 0 ? 0 : beta * out[i * c.rs + j];                  \
    } else if (M == 1 && N == 1) {                                                                                     \
      T d = cblas_##PREFIX##dot((int)K, (const T *)a.ptr, inc(K, a.cs), (const T *)b.ptr, inc(K, b.rs));               \
      out[0] = beta == 0 ? alpha * d : alpha * d + beta * out[0];                                                      \
    } else if (N == 1) {                                                                                               \
      gemv_##PREFIX(a, (const T *)b.ptr, inc(K, b.rs), out, inc(M, c.rs), alpha, beta);                                \
    } else if (M == 1) {                                                                                               \
      gemv_##PREFIX(mat_t(b), (const T *)a.ptr, inc(K, a.cs), out, inc(N, c.cs), alpha, beta);                         \
    } else {                                                                                                           \
      cblas_##PREFIX##gemm(CblasRowMajor, a.trans ? CblasTrans : CblasNoTrans, b.trans ? CblasTrans : CblasNoTrans,    \
                           (int)M, (int)N, (int)K, alpha, (const T *)a.ptr, (int)a.ld, (const T *)b.ptr, (int)b.ld,    \
                           beta, out, (int)c.ld);                                                                      \
    }                                                                                                                  \
  }
DEFINE_BLAS_GEMM(float, s)
DEFINE_BLAS_GEMM(double, d)

/* ---- integers: a plain loop (strided, any layout) ---- */

#define DEFINE_INT_GEMM(T, NAME)                                                                     \
  static void gemm_one_##NAME(mat a, mat b, mat c, T alpha, T beta) {                                \
    const T *A = (const T *)a.ptr, *B = (const T *)b.ptr;                                            \
    T *C = (T *)c.ptr;                                                                               \
    for (int64_t i = 0; i < c.rows; i++)                                                             \
      for (int64_t j = 0; j < c.cols; j++) {                                                         \
        T acc = 0;                                                                                   \
        for (int64_t k = 0; k < a.cols; k++) acc += A[i * a.rs + k * a.cs] * B[k * b.rs + j * b.cs]; \
        T *o = C + i * c.rs + j * c.cs;                                                              \
        *o = beta == 0 ? (T)(alpha * acc) : (T)(alpha * acc + beta * *o);                            \
      }                                                                                              \
  }
DEFINE_INT_GEMM(int32_t, i32)
DEFINE_INT_GEMM(int64_t, i64)
DEFINE_INT_GEMM(uint8_t, u8)

/* ---- the batch loop ---- */

typedef struct gemm_job {
  const em_tensor *ops[3]; /* out, a, b: BLAS-describable (or integer) */
  mat m[3]; /* the matrix of batch 0 of each */
  int nbatch_dims;
  int64_t nbatch;
  em_dtype dtype;
  double alpha, beta;
} gemm_job;

/* The matrices of one batch. */
static void batch_mats(const gemm_job *job, int64_t batch, mat *m) {
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
}

static void run_batch(const gemm_job *job, int64_t batch) {
  mat m[3];
  batch_mats(job, batch, m);
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

/* A single GEMM of medium size is cut into one piece per thread, each piece a single-
 * threaded OpenBLAS call inside one parallel region. OpenBLAS's own threading meets its
 * threads several times inside a call, polling with sched_yield in between, which at the
 * sizes of a training step (M = the batch, 128) costs 10-25% of a GEMM on 2 threads.
 *
 * Which way to cut is chosen for the steps around the GEMM more than for the GEMM itself:
 * the largest of the three matrices (in a training step, a weight or its gradient) is cut
 * along its rows as they lie in memory, so that each thread keeps the same rows of a layer
 * in its own cache from the forward GEMM through the gradient's to the optimizer's update,
 * which also goes by rows. Cut any other way, the update found half of every row in the
 * other core's cache: on 2 cores, the MLP's SGD step took 3x as long and the whole step
 * 10-20% longer, although the GEMMs alone were as fast or faster.
 * - The output's rows: slabs of output rows (M).
 * - A weight used as x @ w^T (b transposed): slabs of output columns (N).
 * - A matrix whose rows run along K (a transposed a, a plain b): K is cut, each thread
 *   multiplies its share of K, and the partial products (M x N, smaller than the matrix
 *   cut) are added in thread order afterwards, so results do not depend on timing.
 * Each thread packs the whole of the operand it does not cut (rows: b; columns: a); beyond
 * SPLIT_MAX_SHARED that copy costs more than OpenBLAS's meetings, and OpenBLAS threads the
 * call itself. Slabs start on multiples of 16, the width of OpenBLAS's kernels. Beyond
 * SPLIT_MAX, OpenBLAS's threading is left to it. */
#define SPLIT_MAX ((int64_t)1 << 28)
#define SPLIT_MIN_SLAB 32
#define SPLIT_MAX_SHARED ((int64_t)1 << 20)
#define SPLIT_MAX_PARTIALS ((int64_t)4 << 20)

typedef enum { SPLIT_NONE, SPLIT_ROWS, SPLIT_COLS, SPLIT_DEPTH } split_kind;

/* a, b and c as run_split sees them: c row-major, M x N = (M x K) @ (K x N) */
static split_kind choose_split(mat a, mat b, int64_t M, int64_t N, int64_t K, int threads, size_t es) {
  int64_t sa = M * K, sb = K * N, sc = M * N, min_len = (int64_t)SPLIT_MIN_SLAB * threads;
  split_kind kind = sc >= sa && sc >= sb ? SPLIT_ROWS
                    : sb >= sa           ? (b.trans ? SPLIT_COLS : SPLIT_DEPTH)
                                         : (a.trans ? SPLIT_DEPTH : SPLIT_ROWS);
  switch (kind) {
    case SPLIT_ROWS: return M >= min_len && sb * (int64_t)es <= SPLIT_MAX_SHARED ? kind : SPLIT_NONE;
    case SPLIT_COLS: return N >= min_len && sa * (int64_t)es <= SPLIT_MAX_SHARED ? kind : SPLIT_NONE;
    default: return K >= min_len && (threads - 1) * sc * (int64_t)es <= SPLIT_MAX_PARTIALS ? kind : SPLIT_NONE;
  }
}

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

/* Thread t's share [from, to) of len, cut on multiples of 16; the last thread takes the rest. */
static void share(int64_t len, int t, int nt, int64_t *from, int64_t *to) {
  *from = (len * t / nt) & ~(int64_t)15;
  *to = t == nt - 1 ? len : (len * (t + 1) / nt) & ~(int64_t)15;
}

static void gemm_piece(em_dtype dtype, mat a, mat b, mat c, double alpha, double beta) {
  if (dtype == EM_FLOAT32) gemm_one_s(a, b, c, (float)alpha, (float)beta);
  else gemm_one_d(a, b, c, alpha, beta);
}

/* c (row-major rows x cols, leading dim ld) += each of the n partial products that follow
 * one another in parts (contiguous rows x cols each), rows [r0, r1) only. */
#define DEFINE_ADD_PARTIALS(T, SUF)                                                                               \
  static void add_partials_##SUF(T *c, int64_t ld, const T *parts, int n, int64_t rows, int64_t cols, int64_t r0, \
                                 int64_t r1) {                                                                    \
    for (int p = 0; p < n; p++)                                                                                   \
      for (int64_t i = r0; i < r1; i++) {                                                                         \
        T *restrict ci = c + i * ld;                                                                              \
        const T *restrict pi = parts + (p * rows + i) * cols;                                                     \
        for (int64_t j = 0; j < cols; j++) ci[j] += pi[j];                                                        \
      }                                                                                                           \
  }
DEFINE_ADD_PARTIALS(float, s)
DEFINE_ADD_PARTIALS(double, d)

/* Runs the one GEMM of job (floats, nbatch 1) split over threads; returns 0 when the
 * shape does not suit a split (the caller runs it whole). */
static int run_split(const gemm_job *job, int threads) {
  mat a = job->m[1], b = job->m[2], c = job->m[0];
  if (c.trans) { /* a column-major output: split out^T = b^T @ a^T, whose output is row-major */
    mat at = mat_t(a);
    a = mat_t(b), b = at, c = mat_t(c);
  }
  int64_t M = c.rows, N = c.cols, K = a.cols, mnk = M * N * K;
  if (threads < 2 || mnk < SMALL_GEMM || mnk > SPLIT_MAX || omp_in_parallel()) return 0;
  size_t es = em_dtype_size(job->dtype);
  split_kind kind = choose_split(a, b, M, N, K, threads, es);
  if (kind == SPLIT_NONE) return 0;
  char *partials = NULL; /* SPLIT_DEPTH: the products of threads 1.. over their share of K */
  if (kind == SPLIT_DEPTH && !(partials = malloc((size_t)((threads - 1) * M * N) * es))) return 0;
  em_dtype dtype = job->dtype;
  double alpha = job->alpha, beta = job->beta;
#pragma omp parallel num_threads(threads)
  {
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t from, to;
    if (kind == SPLIT_DEPTH) {
      /* thread 0 writes alpha * its product + beta * out into out; the others write alpha *
       * theirs into partials, added to out in thread order once all are done */
      share(K, t, nt, &from, &to);
      mat cs = c;
      if (t > 0) {
        cs.ptr = partials + (size_t)((t - 1) * M * N) * es;
        cs.rs = cs.ld = N, cs.cs = 1;
      }
      if (to > from) gemm_piece(dtype, slab(a, 0, from, to, es), slab(b, 1, from, to, es), cs, alpha, t ? 0 : beta);
      else if (t > 0) memset(cs.ptr, 0, (size_t)(M * N) * es);
      else gemm_piece(dtype, slab(a, 0, 0, 0, es), slab(b, 1, 0, 0, es), cs, alpha, beta); /* out = beta * out */
#pragma omp barrier
      share(M, t, nt, &from, &to);
      if (dtype == EM_FLOAT32) add_partials_s((float *)c.ptr, c.ld, (const float *)partials, nt - 1, M, N, from, to);
      else add_partials_d((double *)c.ptr, c.ld, (const double *)partials, nt - 1, M, N, from, to);
    } else {
      int by_rows = kind == SPLIT_ROWS;
      share(by_rows ? M : N, t, nt, &from, &to);
      if (to > from)
        gemm_piece(dtype, by_rows ? slab(a, 1, from, to, es) : a, by_rows ? b : slab(b, 0, from, to, es),
                   slab(c, by_rows, from, to, es), alpha, beta);
    }
  }
  free(partials);
  return 1;
}

em_status cpu_gemm(em_tensor *out, const em_tensor *a, const em_tensor *b, double alpha, double beta) {
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
  gemm_job job = {.ops = {out, a, b},
                  .nbatch_dims = n - 2,
                  .nbatch = emp_shape_numel(n - 2, out->sizes),
                  .dtype = dtype,
                  .alpha = alpha,
                  .beta = beta};
  if (job.nbatch == 0 || M == 0 || N == 0) return EM_OK;
  int is_float = dtype == EM_FLOAT32 || dtype == EM_FLOAT64;
  em_tensor *copies[3] = {NULL, NULL, NULL};
  em_status st = EM_OK;
  for (int i = 0; i < 3 && !st; i++) {
    job.m[i] = matrix_of(job.ops[i]);
    if (!is_float || blas_layout(&job.m[i])) continue;
    /* BLAS cannot read this one as it lies: work on a contiguous copy. */
    if ((st = emp_compact_matrices(job.ops[i], 1, i > 0 || beta != 0, &copies[i]))) break;
    job.ops[i] = copies[i];
    job.m[i] = matrix_of(copies[i]);
    blas_layout(&job.m[i]);
  }
  if (st) goto done;
  /* bfloat16 autocast on the CPU: oneDNN's bfloat16 kernels (AMX, AVX512-BF16), float32
   * sums; a GEMM oneDNN declines runs in float32 below */
  if (dtype == EM_FLOAT32 && K > 0 && ag_autocast_cpu_bf16() && cpu_dnnl_available()) {
    int64_t done_batches = 0;
    for (; done_batches < job.nbatch; done_batches++) {
      mat m[3];
      batch_mats(&job, done_batches, m);
      cpu_dnnl_mat c = {(float *)m[0].ptr, m[0].rs, m[0].cs}, x = {(float *)m[1].ptr, m[1].rs, m[1].cs},
                   y = {(float *)m[2].ptr, m[2].rs, m[2].cs};
      if (cpu_dnnl_matmul(c, x, y, M, N, K, (float)alpha, (float)beta, 1)) break;
    }
    if (done_batches == job.nbatch) goto written;
    for (int64_t batch = done_batches; batch < job.nbatch; batch++) run_batch(&job, batch);
    goto written;
  }
  /* float32 products of a size where oneDNN measured faster (cpu_dnnl_gemm_wanted); one
   * it declines runs on OpenBLAS below */
  if (dtype == EM_FLOAT32 && job.nbatch == 1 && cpu_dnnl_gemm_wanted(M, N, K)) {
    mat m[3];
    batch_mats(&job, 0, m);
    cpu_dnnl_mat c = {(float *)m[0].ptr, m[0].rs, m[0].cs}, x = {(float *)m[1].ptr, m[1].rs, m[1].cs},
                 y = {(float *)m[2].ptr, m[2].rs, m[2].cs};
    if (!cpu_dnnl_matmul(c, x, y, M, N, K, (float)alpha, (float)beta, 0)) goto written;
  }
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
written:
  if (copies[0]) st = cpu_copy(out, copies[0]); /* write back what was computed aside */
done:
  for (int i = 0; i < 3; i++) em_tensor_release(copies[i]);
  return st;
}
