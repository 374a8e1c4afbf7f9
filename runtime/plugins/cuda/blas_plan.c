/* blas_plan.c - the cuBLAS layout of a batched GEMM (see blas_plan.h). No CUDA here. */
#include "blas_plan.h"

static int64_t at_least_1(int64_t v) { return v > 1 ? v : 1; }

int em_gemm_matrix_layout(em_gemm_matrix m, int *trans, int64_t *ld) {
  /* Column by column: element (i, j) at i + j * ld with ld >= rows. A single column has
   * no meaningful column stride, a single row no meaningful row stride. */
  if ((m.rs == 1 || m.rows == 1) && (m.cols == 1 || m.cs >= at_least_1(m.rows))) {
    *trans = 0;
    *ld = m.cols == 1 ? at_least_1(m.rows) : m.cs;
    return 1;
  }
  /* Row by row: the transpose of a column-major cols x rows matrix, with ld >= cols. */
  if ((m.cs == 1 || m.cols == 1) && (m.rows == 1 || m.rs >= at_least_1(m.cols))) {
    *trans = 1;
    *ld = m.rows == 1 ? at_least_1(m.cols) : m.rs;
    return 1;
  }
  return 0;
}

static em_gemm_matrix transposed(em_gemm_matrix m) {
  em_gemm_matrix t = {m.cols, m.rows, m.cs, m.rs};
  return t;
}

int em_gemm_plan(em_gemm_matrix out, em_gemm_matrix a, em_gemm_matrix b, em_gemm_layout *plan) {
  int out_trans;
  int64_t ldc;
  if (!em_gemm_matrix_layout(out, &out_trans, &ldc)) return 0;
  em_gemm_matrix first = a, second = b;
  plan->swap = out_trans;
  if (out_trans) { /* out lies row by row: cuBLAS writes out^T (N x M) column by column */
    first = transposed(b);
    second = transposed(a);
    out = transposed(out);
  }
  plan->m = out.rows;
  plan->n = out.cols;
  plan->k = first.cols;
  plan->ld[2] = ldc;
  return em_gemm_matrix_layout(first, &plan->trans[0], &plan->ld[0]) &&
         em_gemm_matrix_layout(second, &plan->trans[1], &plan->ld[1]);
}

int em_gemm_batch_split(int nbatch, const int64_t *sizes, const int64_t *const strides[3], int64_t inner_stride[3],
                        int64_t *inner_count) {
  int64_t count = 1;
  int seen = 0; /* a dim of size > 1 fixed the inner strides */
  for (int i = 0; i < 3; i++) inner_stride[i] = 0;
  int split = 0;
  for (int d = nbatch - 1; d >= 0; d--) {
    if (sizes[d] == 1) continue;
    if (!seen) {
      for (int i = 0; i < 3; i++) inner_stride[i] = strides[i][d];
      seen = 1;
    } else {
      int uniform = 1;
      for (int i = 0; i < 3 && uniform; i++) uniform = strides[i][d] == inner_stride[i] * count;
      if (!uniform) {
        split = d + 1;
        break;
      }
    }
    count *= sizes[d];
  }
  *inner_count = count;
  return split;
}

int64_t em_gemm_outer_offset(int split, const int64_t *sizes, const int64_t *strides, int64_t o) {
  int64_t off = 0;
  for (int d = split - 1; d >= 0; d--) {
    off += (o % sizes[d]) * strides[d];
    o /= sizes[d];
  }
  return off;
}
