/* blas_plan.h - how a batched row-major GEMM is laid out for cuBLAS (column-major), as
 * plain host arithmetic with no CUDA dependency, so that tests/c/test_cuda_gemm_plan.c can
 * check it on a machine without a GPU.
 *
 * out[M, N] = a[M, K] @ b[K, N] for each batch. Every matrix is described by its logical
 * rows, cols and element strides. cuBLAS reads a matrix either as it lies column by column
 * (op N) or as the transpose of one that lies row by row (op T), with a leading dimension;
 * a transposed view is therefore passed as op T, never copied. An output that lies row by
 * row is computed as out^T = b^T @ a^T, which cuBLAS writes column by column. Only a matrix
 * neither reading fits (two non-unit strides, a zero stride in a dim of size > 1, a leading
 * dimension smaller than the matrix) needs a contiguous copy. */
#ifndef EMBER_GPU_BLAS_PLAN_H
#define EMBER_GPU_BLAS_PLAN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_gemm_matrix {
  int64_t rows, cols, rs, cs; /* logical sizes and element strides */
} em_gemm_matrix;

/* 1 when cuBLAS can read m where it lies: *trans is 0 (op N, column by column) or 1 (op T,
 * the transpose of a row-by-row matrix), *ld the leading dimension. 0: m needs a copy. */
int em_gemm_matrix_layout(em_gemm_matrix m, int *trans, int64_t *ld);

/* One cuBLAS call's layout: C(m x n) = op(first) @ op(second), all column-major. */
typedef struct em_gemm_layout {
  int swap; /* 1: computes out^T = b^T @ a^T (first = b, second = a) */
  int64_t m, n, k;
  int trans[2]; /* op of the first and second operand: 0 N, 1 T */
  int64_t ld[3]; /* leading dims of the first, second operand and of out */
} em_gemm_layout;

/* The layout for out = a @ b (out M x N, a M x K, b K x N). 0 when one of them cannot be
 * read as it lies (check each with em_gemm_matrix_layout and copy those first). */
int em_gemm_plan(em_gemm_matrix out, em_gemm_matrix a, em_gemm_matrix b, em_gemm_layout *plan);

/* The batch dims (shared sizes, per-operand strides; broadcast dims have stride 0) split
 * into an outer part that the host loops over and an inner part that one strided-batched
 * call covers: dims [split, nbatch) advance every operand by a constant stride
 * (inner_stride[i]) from one batch to the next. Returns split; *inner_count is the number
 * of batches in the inner part (1 when it is empty). Dims of size 1 never split. */
int em_gemm_batch_split(int nbatch, const int64_t *sizes, const int64_t *const strides[3], int64_t inner_stride[3],
                        int64_t *inner_count);

/* The element offset, in an operand with these batch strides, of batch o of the outer
 * part (o counts row-major over dims [0, split)). */
int64_t em_gemm_outer_offset(int split, const int64_t *sizes, const int64_t *strides, int64_t o);

#ifdef __cplusplus
}
#endif
#endif
