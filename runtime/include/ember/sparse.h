/* ember/sparse.h - row-sparse gradients and the optimizer updates that read them.
 *
 * An embedding table of R rows looked up at a few indices per sample gets a gradient that
 * is zero outside those rows. With sparse = 1 (em_nn_embedding_ex, em_nn_embedding_bag_ex)
 * the backward hands the table a row-sparse gradient instead of a dense [R, D] tensor: the
 * distinct rows looked up (int64, counted from 0, ascending: "coalesced") and their
 * gradient values [nnz, D], as PyTorch's sparse=True embeddings do. The leaf keeps it as
 * its sparse gradient (em_grad_sparse); a second backward, or a second lookup of the same
 * table in one graph, adds rows (concatenated, then coalesced). A dense gradient meeting a
 * sparse one makes the sum dense. Weights that are not leaves get dense gradients.
 *
 * The row-wise optimizer update (em_optim_rows) reads either kind of gradient and touches
 * only the rows a sparse one names. On the CPU and CUDA (EM_ERR_UNSUPPORTED on other devices). */
#ifndef EMBER_SPARSE_H
#define EMBER_SPARSE_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* EM_FFI_BEGIN */
typedef struct em_sparse_grad em_sparse_grad;

/* A row-sparse gradient of a [num_rows, D] tensor from rows indices [K] (int32/int64,
 * counted from base, any order, repeats summed) and values [K, D] (float32/float64). */
EM_API em_status em_sparse_grad_new(em_sparse_grad **out, int64_t num_rows, const em_tensor *indices,
                                    const em_tensor *values, int base);
EM_API void em_sparse_grad_retain(em_sparse_grad *g);
EM_API void em_sparse_grad_release(em_sparse_grad *g);
EM_API int64_t em_sparse_grad_num_rows(const em_sparse_grad *g);
EM_API int64_t em_sparse_grad_nnz(const em_sparse_grad *g);
/* New references: the rows (int64 [nnz], from 0, ascending) and their values [nnz, D],
 * which share the gradient's memory (writing into them changes it). */
EM_API em_tensor *em_sparse_grad_indices(const em_sparse_grad *g);
EM_API em_tensor *em_sparse_grad_values(const em_sparse_grad *g);
EM_API em_status em_sparse_grad_to_dense(em_tensor **out, const em_sparse_grad *g);

/* A leaf's sparse gradient (a new reference), or NULL; em_grad gives only dense ones. A
 * leaf holds one kind at a time: em_set_grad (to a tensor or to none) also drops the
 * sparse one. em_set_grad_sparse(t, NULL) drops it too. */
EM_API em_sparse_grad *em_grad_sparse(const em_tensor *t);
EM_API em_status em_set_grad_sparse(em_tensor *t, em_sparse_grad *g);

/* In-place updates of one parameter [R, ...] (viewed as [R, D]) from its dense gradient
 * (grad, sgrad NULL) or its row-sparse one (sgrad, grad NULL; only those rows change):
 *  EM_ROWS_SGD              w -= lr * g                               (state NULL)
 *  EM_ROWS_ADAGRAD          s += g^2; w -= lr * g / (sqrt(s) + eps)   (state [R, ...], PyTorch's Adagrad)
 *  EM_ROWS_ROWWISE_ADAGRAD  s[r] += mean(g[r]^2); w[r] -= lr * g[r] / (sqrt(s[r]) + eps)  (state [R],
 *                           one accumulator per row, as DLRM's and FBGEMM's)
 * g = grad (+ weight_decay * w; dense gradients only, as PyTorch refuses it for sparse
 * ones), negated first when maximize. lr is the step's (the caller applies any decay). The
 * parameter and state must be contiguous, of one float dtype with the gradient. */
typedef enum em_row_rule { EM_ROWS_SGD = 0, EM_ROWS_ADAGRAD, EM_ROWS_ROWWISE_ADAGRAD } em_row_rule;
EM_API em_status em_optim_rows(em_row_rule rule, em_tensor *param, const em_tensor *grad, const em_sparse_grad *sgrad,
                               em_tensor *state, double lr, double eps, double weight_decay, int maximize);
/* EM_FFI_END */

#ifdef __cplusplus
}
#endif
#endif
