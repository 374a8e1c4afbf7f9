/* backend.h - the per-device dispatch table, in the manner of ggml's backend interface.
 *
 * The tensor core (runtime/tensor) checks arguments, promotes dtypes, broadcasts and
 * allocates the result once, then calls the backend of the inputs' device. Backends
 * receive tensors that already agree: same device, the shapes the op needs (broadcast
 * inputs arrive as expanded views with zero strides) and the dtype the op computes in.
 * A NULL entry means "not supported on this device" and the core reports it. */
#ifndef EMBER_BACKEND_H
#define EMBER_BACKEND_H

#include "tensor_impl.h"

typedef enum em_random_kind {
  EM_RANDOM_UNIFORM, EM_RANDOM_NORMAL, EM_RANDOM_INT, EM_RANDOM_BERNOULLI,
  EM_RANDOM_PERM /* t (1-d, n elements) receives a permutation of 0..n-1 */
} em_random_kind;

/* One fill from the Philox stream (see core/philox.h for the counter layout). */
typedef struct em_random_params {
  em_random_kind kind;
  double a, b;           /* uniform [a, b); normal mean a, std b; bernoulli p = a */
  int64_t low, high;     /* randint [low, high), exact over all of int64 */
  uint64_t seed, offset; /* Philox key and first block */
} em_random_params;

/* Hyper-parameters of one fused optimizer step (runtime/optim has checked them). */
typedef struct em_sgd_args {
  double lr, momentum, dampening, weight_decay;
  int nesterov, first_step, maximize;
} em_sgd_args;

typedef struct em_adam_args {
  double lr, beta1, beta2, eps, weight_decay;
  int decoupled, maximize;
  int64_t step;
} em_adam_args;

typedef struct em_backend {
  const char *name;
  /* memory */
  void *(*alloc)(size_t nbytes, em_device device);   /* NULL when out of memory */
  void (*free)(void *ptr, size_t nbytes, em_device device);
  /* dst and src have the same shape; dtypes may differ (converts) */
  em_status (*copy)(em_tensor *dst, const em_tensor *src);
  em_status (*fill)(em_tensor *t, double value);
  /* t[i] = start + i * step over the flattened contiguous tensor */
  em_status (*arange)(em_tensor *t, double start, double step);
  /* elementwise: out, a, b share a shape; a and b share the compute dtype; out is that
   * dtype, or bool for comparisons and logical ops */
  em_status (*binary)(em_binop op, em_tensor *out, const em_tensor *a, const em_tensor *b);
  em_status (*binary_scalar)(em_binop op, em_tensor *out, const em_tensor *a, double s, int reversed);
  em_status (*unary)(em_unop op, em_tensor *out, const em_tensor *a);
  em_status (*where)(em_tensor *out, const em_tensor *cond, const em_tensor *a, const em_tensor *b);
  em_status (*clamp)(em_tensor *out, const em_tensor *a, double low, double high);
  em_status (*add_scaled)(em_tensor *out, const em_tensor *a, const em_tensor *b, double alpha);
  /* reductions: a's last nreduce dims are reduced; out (and indices) are contiguous with
   * a's leading dims. p is the norm order for EM_NORM. Positions (indices, argmax) are
   * flat over the reduced dims, counted from base. The dtype is the input's; out is
   * int64 for integer sum/prod, bool for any/all, int64 for argmax/argmin.
   * scan and softmax: a and out are contiguous with one shape (out int64 for an integer
   * scan). sort: any strides; values and indices have a's shape with k along dim, hold
   * the first k of the sorted row; indices may be NULL. */
  em_status (*reduce)(em_redop op, em_tensor *out, em_tensor *indices, const em_tensor *a,
                      int nreduce, double p, int base);
  em_status (*var)(em_tensor *out, const em_tensor *a, int nreduce, double correction, int take_sqrt);
  em_status (*scan)(int prod, em_tensor *out, const em_tensor *a, int dim);
  em_status (*softmax)(em_tensor *out, const em_tensor *a, int dim, int log);
  em_status (*sort)(em_tensor *values, em_tensor *indices, const em_tensor *a, int dim,
                    int descending, int64_t k, int base);
  /* batched GEMM: out[...,M,N] = alpha * a[...,M,K] @ b[...,K,N] + beta * out; the three
   * share ndim >= 2 and the leading (batch) sizes; any strides (broadcast batch dims
   * arrive as zero strides); beta == 0 never reads out */
  em_status (*gemm)(em_tensor *out, const em_tensor *a, const em_tensor *b, double alpha, double beta);
  /* indexing */
  em_status (*index_select)(em_tensor *out, const em_tensor *a, int dim, const em_tensor *index, int base);
  em_status (*gather)(em_tensor *out, const em_tensor *a, int dim, const em_tensor *index, int base);
  em_status (*scatter)(em_tensor *self, int dim, const em_tensor *index, const em_tensor *src,
                       double value, int accumulate, int base);
  em_status (*index_add)(em_tensor *self, int dim, const em_tensor *index, const em_tensor *src,
                         double alpha, int base);
  em_status (*index_fill)(em_tensor *self, int dim, const em_tensor *index, double value, int base);
  em_status (*masked_fill)(em_tensor *self, const em_tensor *mask, double value);
  em_status (*masked_select)(em_tensor *out, const em_tensor *a, const em_tensor *mask);
  em_status (*nonzero)(em_tensor *out, const em_tensor *a, int base);
  /* how many elements of a are nonzero (sizes the results of masked_select and nonzero) */
  em_status (*count_nonzero)(const em_tensor *a, int64_t *count);
  /* random: fills t from the Philox stream (seed, offset) */
  em_status (*random)(em_tensor *t, const em_random_params *p);
  /* optim: fused in-place updates over lists of n parameters. grads[i] == NULL skips
   * parameter i; each parameter's gradient and state tensors share its shape and dtype
   * (float32/float64), any strides. bufs may be NULL when momentum == 0. grad_norm adds
   * sum |g|^p over every gradient to *acc (float64), or for p = inf takes the max |g|. */
  em_status (*optim_sgd)(int n, em_tensor *const *params, const em_tensor *const *grads, em_tensor *const *bufs,
                         const em_sgd_args *args);
  em_status (*optim_adam)(int n, em_tensor *const *params, const em_tensor *const *grads, em_tensor *const *exp_avgs,
                          em_tensor *const *exp_avg_sqs, const em_adam_args *args);
  em_status (*optim_grad_norm)(int n, const em_tensor *const *grads, double p, double *acc);
} em_backend;

/* The backend for a device, or NULL with an error naming op when it is not available. */
const em_backend *em_backend_for(const char *op, em_device device);
/* Call a backend entry, reporting a NULL entry as unsupported. */
#define EM_BACKEND_CALL(op_name, be, entry, ...)                                            \
  ((be)->entry ? (be)->entry(__VA_ARGS__)                                                    \
               : em_set_error(EM_ERR_UNSUPPORTED, "%s: not supported on device %s",          \
                              (op_name), (be)->name))

#endif
