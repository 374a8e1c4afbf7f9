/* nn_impl.h - helpers shared by the neural-network ops (runtime/nn).
 *
 * An nn op does what the tensor core does for tensor ops (check its arguments, make its
 * operands contiguous, allocate its results, call the device backend through the table
 * in tensor/backend.h) and then, as a differentiable op of runtime/autograd does,
 * records one node whose backward calls the backend's backward kernel. */
#ifndef EMBER_NN_IMPL_H
#define EMBER_NN_IMPL_H

#include "autograd/autograd_impl.h"
#include "ember/nn.h"
#include "tensor/backend.h"

/* *out must be a place for a new result: non-NULL and holding NULL. */
em_status nn_check_out(const char *op, em_tensor **out);
/* t is a live float32 or float64 tensor (or float16/bfloat16 off the CPU). */
em_status nn_check_float(const char *op, const em_tensor *t, const char *what);
/* t (may be NULL) is a live tensor with like's dtype and device. */
em_status nn_check_like(const char *op, const em_tensor *t, const char *what, const em_tensor *like);
/* An EM_ERR_DEVICE error unless t (index tensors: "the indices") is NULL or on like's device:
 * a kernel must never read another device's memory. */
em_status nn_check_device(const char *op, const em_tensor *t, const char *what, const em_tensor *like,
                          const char *like_what);
/* t (may be NULL) is a live 1-d tensor of n elements with like's dtype and device. */
em_status nn_check_vector(const char *op, const em_tensor *t, const char *what, int64_t n, const em_tensor *like);
/* t is a live int32 or int64 tensor (class targets, embedding indices). */
em_status nn_check_index(const char *op, const em_tensor *t, const char *what);
/* The backend of t's device (NULL with the error set). */
const em_backend *nn_backend(const char *op, const em_tensor *t);

/* *c = a contiguous tensor with a's values (a new reference; NULL stays NULL). */
em_status nn_contiguous(em_tensor **c, const em_tensor *a);
/* A contiguous copy of a as a new tensor of the given shape (a view when a is contiguous). */
em_status nn_reshaped(em_tensor **out, const em_tensor *a, int ndim, const int64_t *sizes);

/* Makes n the grad_fn of *out, or on failure (n == NULL) releases *out and reports. */
/* Zeroed memory of size bytes owned by n (freed with its saved tensors), or NULL. */
void *nn_node_ctx(em_node *n, size_t size);
/* Takes over g (may be NULL) as the gradient of input i: reshaped to the input's recorded
 * shape when they differ in layout only. Inputs 0 and 1 only (their shapes are recorded). */
em_status nn_set_grad(em_node *n, int i, em_tensor *g, em_tensor **slot);
/* Releases every non-NULL tensor of the list. */
void nn_release(int n, em_tensor **ts);

/* embedding_sparse.c: the backward functions that give a weight row-sparse gradients (saved
 * state as embedding.c's dense ones; bags also keep the padding row, 0-based or -1, in i[2]),
 * and the bag preparations: include_last_offset (offsets [B + 1] -> [B], indices and weights
 * cut at the last offset) and padding (entries equal to pad, as stored, dropped). Each
 * replaces the tensors it is given. */
em_status nn_embedding_bag_sparse_backward(em_node *n, em_tensor *const *go, em_tensor **gi);
em_status nn_embedding_sparse_backward(em_node *n, em_tensor *const *go, em_tensor **gi);
em_status nn_bag_last_offset(em_tensor **idx, em_tensor **off, em_tensor **psw);
em_status nn_bag_drop_padding(em_tensor **idx, em_tensor **off, em_tensor **psw, int64_t pad);

#endif
