/* ember/autograd.h - reverse-mode automatic differentiation.
 *
 * Sits above the tensor core, as PyTorch's autograd sits above its kernels: a
 * differentiable op (em_ag_*) calls the tensor op and, when grad mode is on and an input
 * requires grad, records a node on the tape. em_backward() walks the tape from a root in
 * reverse topological order (newest node first among those ready) and accumulates into the
 * leaves' .grad. The tensor core and kernels know nothing of gradients.
 *
 * Leaf hooks fire once a leaf's gradient for this backward pass is complete (all its
 * contributions summed), in a deterministic order, on the thread running backward. They
 * are plain C callbacks, cheap enough for a data-parallel reducer to start bucket
 * allreduces from them while backward goes on.
 *
 * Differentiable ops take `em_tensor **out` like the tensor core but always allocate
 * (*out must be NULL); in-place ops are refused on tensors that need grad while recording. */
#ifndef EMBER_AUTOGRAD_H
#define EMBER_AUTOGRAD_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* EM_FFI_BEGIN */
typedef void (*em_leaf_hook)(em_tensor *leaf, void *ctx);

/* Grad mode (thread-local; on by default). */
EM_API int em_grad_enabled(void);
EM_API void em_set_grad_enabled(int enabled);

/* The in-place rule. While grad mode is on, writing into t in place is refused when t
 * requires grad (a leaf's value is what its gradient is for; a recorded result's value may
 * be needed by the backward of the ops that read it), and when src (may be NULL), the value
 * written, requires grad (an in-place op records nothing, so src's gradient would be lost).
 * op names the call in the message. The tensor API's in-place forms check it themselves:
 * results written into a given tensor (*out non-NULL: binary, binary_scalar, unary, clamp,
 * add_scaled), fill, copy_ and copy_async (their destination), the random fills,
 * scatter_/scatter_value_/index_add_/index_fill_/masked_fill_. copy_ checks only its
 * destination: it is also the library's own copy. */
EM_API em_status em_check_inplace(const char *op, const em_tensor *t, const em_tensor *src);

/* Flags and gradients. em_grad returns a new reference or NULL when there is none. */
EM_API em_status em_requires_grad_(em_tensor *t, int requires_grad);
EM_API int em_requires_grad(const em_tensor *t);
EM_API int em_is_leaf(const em_tensor *t);
EM_API em_tensor *em_grad(const em_tensor *t);
EM_API em_status em_set_grad(em_tensor *t, em_tensor *grad); /* grad may be NULL (set to none) */
EM_API em_status em_retain_grad(em_tensor *t); /* keep .grad on a non-leaf */
/* Where a leaf's gradient should be written when backward finds it without a .grad: ops
 * that can (linear's weight gradient) write their result straight into dest, which
 * becomes .grad with no copy. The data-parallel reducer points each parameter at its slice
 * of a bucket, so that gradients are born in the bucket. dest must have the leaf's shape
 * and dtype and be contiguous; NULL clears it. Its memory is overwritten by any backward
 * that starts the leaf's gradient afresh. */
EM_API em_status em_set_grad_destination(em_tensor *leaf, em_tensor *dest);
EM_API const char *em_grad_fn_name(const em_tensor *t); /* NULL for leaves */
EM_API em_status em_detach(em_tensor **out, const em_tensor *a); /* shares storage, no history */

/* Backward from root. grad may be NULL for a one-element root (then 1). retain_graph
 * keeps saved tensors so that backward can run through the same graph again. */
EM_API em_status em_backward(em_tensor *root, const em_tensor *grad, int retain_graph);

/* Leaf hooks: fire after the leaf's gradient is fully accumulated. Returns an id > 0. */
EM_API int64_t em_add_leaf_hook(em_tensor *leaf, em_leaf_hook fn, void *ctx);
EM_API em_status em_remove_leaf_hook(em_tensor *leaf, int64_t id);

/* Autocast (mixed precision, after torch.autocast): thread-local, per device type, off by
 * default. While it is on for a device type, ops on that device's tensors apply a cast
 * policy to their floating operands:
 *  - matmul/addmm (em_ag_*), em_nn_linear, em_nn_conv2d compute in the autocast dtype:
 *    float32 (and the other half type) operands are cast to it, float64 ones are left
 *    alone, and the results come out in it;
 *  - softmax/log_softmax, the losses, layer/batch norm and the sum/mean/prod/logsumexp/
 *    norm/var/cumsum reductions compute in float32: float16/bfloat16 operands are cast up.
 * Casts are recorded by autograd, so gradients flow back to float32 parameters as float32.
 * dtype: EM_FLOAT16 or EM_BFLOAT16 (ignored when disabling). The CPU backend has no
 * float16/bfloat16 math, so enabling autocast for EM_CPU fails with EM_ERR_UNSUPPORTED
 * (disabling it is fine); EM_CUDA may be enabled without a GPU (CPU tensors are not
 * affected by it). Backward passes use the dtypes the forward chose, whatever the state. */
EM_API em_status em_autocast_set(em_device_type device_type, int enabled, em_dtype dtype);
EM_API int em_autocast_is_enabled(int device_type); /* device_type < 0: on for any device type */
EM_API em_dtype em_autocast_get_dtype(em_device_type device_type); /* float16 on cuda unless set */

/* ---- differentiable ops ---- */
EM_API em_status em_ag_binary(em_binop op, em_tensor **out, const em_tensor *a, const em_tensor *b);
EM_API em_status em_ag_binary_scalar(em_binop op, em_tensor **out, const em_tensor *a, double s, int reversed);
EM_API em_status em_ag_unary(em_unop op, em_tensor **out, const em_tensor *a);
EM_API em_status em_ag_where(em_tensor **out, const em_tensor *cond, const em_tensor *a, const em_tensor *b);
EM_API em_status em_ag_clamp(em_tensor **out, const em_tensor *a, double low, double high);
EM_API em_status em_ag_reduce(em_redop op, em_tensor **out, em_tensor **indices, const em_tensor *a, const int *dims,
                              int ndims, int keepdim, int base);
EM_API em_status em_ag_norm(em_tensor **out, const em_tensor *a, double p, const int *dims, int ndims, int keepdim);
EM_API em_status em_ag_var(em_tensor **out, const em_tensor *a, const int *dims, int ndims, double correction,
                           int keepdim, int take_sqrt);
EM_API em_status em_ag_cumsum(em_tensor **out, const em_tensor *a, int dim);
/* sort and topk record the values' gradient: scattered back to the positions they came
 * from (indices may be NULL when not wanted). em_ag_reduce's EM_MAX/EM_MIN with indices
 * (the max(dim) form) likewise sends each gradient to the one position chosen, as PyTorch
 * does; without indices (amax, a full max) ties share it evenly. */
EM_API em_status em_ag_sort(em_tensor **values, em_tensor **indices, const em_tensor *a, int dim, int descending,
                            int base);
EM_API em_status em_ag_topk(em_tensor **values, em_tensor **indices, const em_tensor *a, int64_t k, int dim,
                            int largest, int base);
EM_API em_status em_ag_softmax(em_tensor **out, const em_tensor *a, int dim, int log);
EM_API em_status em_ag_matmul(em_tensor **out, const em_tensor *a, const em_tensor *b);
/* mm, bmm, mv, dot and outer with their own operand checks (ranks, as em_mm ... make them),
 * recorded (and autocast) through em_ag_matmul; without either they are em_mm ... */
EM_API em_status em_ag_mm(em_tensor **out, const em_tensor *a, const em_tensor *b);
EM_API em_status em_ag_bmm(em_tensor **out, const em_tensor *a, const em_tensor *b);
EM_API em_status em_ag_mv(em_tensor **out, const em_tensor *a, const em_tensor *v);
EM_API em_status em_ag_dot(em_tensor **out, const em_tensor *a, const em_tensor *b);
EM_API em_status em_ag_outer(em_tensor **out, const em_tensor *a, const em_tensor *b);
EM_API em_status em_ag_addmm(em_tensor **out, const em_tensor *c, const em_tensor *a, const em_tensor *b, double beta,
                             double alpha);
/* views and shape ops */
EM_API em_status em_ag_view(em_tensor **out, const em_tensor *a, int ndim, const int64_t *sizes);
EM_API em_status em_ag_reshape(em_tensor **out, const em_tensor *a, int ndim, const int64_t *sizes);
EM_API em_status em_ag_narrow(em_tensor **out, const em_tensor *a, int dim, int64_t start, int64_t length);
EM_API em_status em_ag_select(em_tensor **out, const em_tensor *a, int dim, int64_t index);
EM_API em_status em_ag_slice(em_tensor **out, const em_tensor *a, int dim, int64_t start, int64_t end, int64_t step);
EM_API em_status em_ag_transpose(em_tensor **out, const em_tensor *a, int dim0, int dim1);
EM_API em_status em_ag_permute(em_tensor **out, const em_tensor *a, int ndim, const int *dims);
EM_API em_status em_ag_expand(em_tensor **out, const em_tensor *a, int ndim, const int64_t *sizes);
EM_API em_status em_ag_squeeze(em_tensor **out, const em_tensor *a, int dim, int all_dims);
EM_API em_status em_ag_unsqueeze(em_tensor **out, const em_tensor *a, int dim);
EM_API em_status em_ag_flatten(em_tensor **out, const em_tensor *a, int start_dim, int end_dim);
EM_API em_status em_ag_contiguous(em_tensor **out, const em_tensor *a);
EM_API em_status em_ag_to(em_tensor **out, const em_tensor *a, em_dtype dtype, em_device device);
EM_API em_status em_ag_cat(em_tensor **out, em_tensor *const *tensors, int n, int dim);
EM_API em_status em_ag_stack(em_tensor **out, em_tensor *const *tensors, int n, int dim);
EM_API em_status em_ag_index_select(em_tensor **out, const em_tensor *a, int dim, const em_tensor *index, int base);
EM_API em_status em_ag_gather(em_tensor **out, const em_tensor *a, int dim, const em_tensor *index, int base);
EM_API em_status em_ag_masked_fill(em_tensor **out, const em_tensor *a, const em_tensor *mask, double value);

/* Custom functions: backward written by the caller (e.g. in Lua through an FFI callback).
 * The callback receives the gradients of the outputs and must store a new tensor (or NULL)
 * for each input into grad_inputs. */
typedef em_status (*em_custom_backward)(void *ctx, int n_outputs, em_tensor *const *grad_outputs, int n_inputs,
                                        em_tensor **grad_inputs);
typedef void (*em_custom_release)(void *ctx);
EM_API em_status em_ag_custom(int n_inputs, em_tensor *const *inputs, int n_outputs, em_tensor *const *outputs,
                              em_custom_backward backward, em_custom_release release, void *ctx, const char *name);
/* EM_FFI_END */

#ifdef __cplusplus
}
#endif
#endif
