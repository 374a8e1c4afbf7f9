/* cpu_impl.h - shared machinery of the CPU backend: the strided iterator that every
 * elementwise kernel runs on, and dtype dispatch macros. */
#ifndef EMBER_CPU_IMPL_H
#define EMBER_CPU_IMPL_H

#include "core/core_impl.h"
#include "tensor/backend.h"

/* ---- strided iteration ----
 * Operands share one shape (inputs may be broadcast views with zero strides). Dims of
 * size 1 are dropped and neighbouring dims that are contiguous in every operand are
 * merged, so most calls become one flat loop. Work is split into equal element ranges
 * across OpenMP threads when the tensor is large, so rows never limit the parallelism. */
#define EM_ITER_MAX_OPS 4

typedef struct em_iter {
  int nops;
  int ndim; /* >= 1 after init */
  int64_t numel;
  int64_t sizes[EM_MAX_DIMS]; /* outermost first */
  int64_t strides[EM_ITER_MAX_OPS][EM_MAX_DIMS]; /* bytes */
  char *data[EM_ITER_MAX_OPS];
} em_iter;

/* The inner loop: n elements along the innermost dim; strides in bytes. */
typedef void (*em_loop_fn)(char **data, const int64_t *strides, int64_t n, void *ctx);

void cpu_iter_init(em_iter *it, int nops, const em_tensor *const *ops);
/* Runs fn over every element; parallel when numel >= grain (0 means EM_PARALLEL_GRAIN). */
void cpu_iter_for_each(const em_iter *it, em_loop_fn fn, void *ctx, int64_t grain);
/* True when every operand's innermost stride equals its element size. */
static inline int em_iter_inner_contiguous(const int64_t *strides, const size_t *elsize, int nops) {
  for (int i = 0; i < nops; i++)
    if (strides[i] != (int64_t)elsize[i]) return 0;
  return 1;
}

/* ---- dtype dispatch ----
 * EM_DISPATCH(dtype, opname, BODY) runs BODY with `scalar_t` set to the C type. The
 * MATH variant covers types with native arithmetic (not float16/bfloat16). */
#define EM_DTYPE_CASE(ENUM, CTYPE, ...) \
  case ENUM: {                          \
    typedef CTYPE scalar_t;             \
    __VA_ARGS__;                        \
  } break;

#define EM_DISPATCH_MATH(dtype, opname, ...)                                        \
  switch (dtype) {                                                                  \
    EM_DTYPE_CASE(EM_FLOAT32, float, __VA_ARGS__)                                   \
    EM_DTYPE_CASE(EM_FLOAT64, double, __VA_ARGS__)                                  \
    EM_DTYPE_CASE(EM_INT32, int32_t, __VA_ARGS__)                                   \
    EM_DTYPE_CASE(EM_INT64, int64_t, __VA_ARGS__)                                   \
    EM_DTYPE_CASE(EM_UINT8, uint8_t, __VA_ARGS__)                                   \
    EM_DTYPE_CASE(EM_BOOL, uint8_t, __VA_ARGS__)                                    \
    default:                                                                        \
      return em_set_error(EM_ERR_DTYPE,                                             \
                          "%s: dtype %s is not supported on the CPU (convert with " \
                          "to('float32') first)",                                   \
                          (opname), em_dtype_name(dtype));                          \
  }

#define EM_DISPATCH_FLOAT(dtype, opname, ...)                                                         \
  switch (dtype) {                                                                                    \
    EM_DTYPE_CASE(EM_FLOAT32, float, __VA_ARGS__)                                                     \
    EM_DTYPE_CASE(EM_FLOAT64, double, __VA_ARGS__)                                                    \
    default:                                                                                          \
      return em_set_error(EM_ERR_DTYPE, "%s: expected a float32 or float64 tensor, got %s", (opname), \
                          em_dtype_name(dtype));                                                      \
  }

/* The backend's entries, cpu_<entry> for every entry of runtime/tensor/backend.h, one
 * group per file: the host allocator (64-byte aligned: one cache line, AVX-512) in
 * backend.c; copy.c (copy, fill, arange); elementwise.c (binary ops, where, clamp,
 * add_scaled) and unary.c; gemm.c; index.c; random.c; reduce.c; softmax.c (softmax and scans); sort.c;
 * optim.c (fused updates, gradient norm); amp.c (unscaling); nn_conv.c, nn_pool.c,
 * nn_norm.c, nn_loss.c (class-index losses, count_correct, ReLU's backward) and
 * nn_embedding.c. */
EM_BACKEND_PROTOTYPES(cpu)

/* nn_loss.c: a ReLU layer's backward and its bias gradient in one pass (runtime/nn/linear.c
 * calls it for float32 on the CPU): gx = y > 0 ? gy : 0 and gb[c] = the sum of gx[., c],
 * all [rows, cols] contiguous. The sum is em_reduce's (double accumulators, rows in order),
 * so gb has the bits of the column sum taken afterwards. */
void cpu_relu_backward_colsum_f32(float *gx, float *gb, const float *gy, const float *y, int64_t rows, int64_t cols);

/* blas_check.c: the BLAS routines ember calls (row-major; t/ta/tb: transposed), as a table
 * so that a test can hand the known-answer check a wrong one and see it caught. */
typedef struct cpu_blas_fns {
  void (*sgemm)(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda, const float *b, int ldb,
                float beta, float *c, int ldc);
  void (*dgemm)(int ta, int tb, int m, int n, int k, double alpha, const double *a, int lda, const double *b, int ldb,
                double beta, double *c, int ldc);
  void (*sgemv)(int t, int m, int n, float alpha, const float *a, int lda, const float *x, float beta, float *y);
  float (*sdot)(int n, const float *x, const float *y);
} cpu_blas_fns;
extern const cpu_blas_fns cpu_blas_real; /* OpenBLAS's cblas */
/* 1 when every case matches the float64 reference; else 0 and why names the first wrong one. */
int cpu_blas_check(const cpu_blas_fns *f, char *why, size_t cap);

#endif
