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

#ifdef __cplusplus
extern "C" {
#endif

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

/* Geometry of a 2-d convolution or pooling window (runtime/nn has checked it). */
typedef struct em_conv2d_params {
  int stride[2], pad[2], dilation[2], groups; /* [0] along H, [1] along W */
} em_conv2d_params;

typedef struct em_pool2d_params {
  int kernel[2], stride[2], pad[2], dilation[2];
  int ceil_mode, count_include_pad;
  int adaptive; /* avg only: output i averages [floor(i * in / out), ceil((i + 1) * in / out)) */
} em_pool2d_params;

/* Losses over class indices: cross_entropy on logits, or nll_loss on log-probabilities. */
typedef struct em_class_loss_params {
  int64_t ignore_index;   /* a target value (as stored, in base) whose samples are skipped */
  double label_smoothing; /* cross_entropy only */
  int reduction;          /* em_reduction of ember/nn.h: 0 none, 1 mean, 2 sum */
  int log_input;          /* 1: the input holds log-probabilities (nll_loss) */
  int base;
} em_class_loss_params;

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
  /* loss scaling: multiplies every gradient (floating, any strides; NULL entries skipped)
   * by inv_scale in place, and sets *found_inf to 1 when any value was inf or NaN before
   * the multiplication, else 0: one pass over all gradients, one host synchronisation */
  em_status (*amp_unscale)(int n, em_tensor *const *grads, double inv_scale, int *found_inf);
  /* nn (runtime/nn): contiguous operands of one float dtype, NCHW images, results
   * allocated (contiguous) by the caller; NULL optional inputs are absent and NULL
   * gradient outputs are not wanted. conv2d: x [N, C, H, W], w [Co, C / groups, kH, kW],
   * b [Co], out [N, Co, OH, OW]. Pooling runs over [P, H, W] planes; max_pool2d's indices
   * (int32) hold each maximum's position h * W + w in its input plane. */
  em_status (*conv2d)(em_tensor *out, const em_tensor *x, const em_tensor *w, const em_tensor *b,
                      const em_conv2d_params *p);
  em_status (*conv2d_backward)(em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *gy, const em_tensor *x,
                               const em_tensor *w, const em_conv2d_params *p);
  em_status (*max_pool2d)(em_tensor *out, em_tensor *indices, const em_tensor *x, const em_pool2d_params *p);
  em_status (*max_pool2d_backward)(em_tensor *gx, const em_tensor *gy, const em_tensor *indices);
  em_status (*avg_pool2d)(em_tensor *out, const em_tensor *x, const em_pool2d_params *p);
  em_status (*avg_pool2d_backward)(em_tensor *gx, const em_tensor *gy, const em_pool2d_params *p);
  /* batch norm over x [N, C, S]: stats gives each channel's mean and biased variance [C];
   * the forward normalises with (mean, var, eps); backward in training form (the
   * statistics depend on x) or evaluation form (they are constants). */
  em_status (*batch_norm_stats)(em_tensor *mean, em_tensor *var, const em_tensor *x);
  em_status (*batch_norm)(em_tensor *out, const em_tensor *x, const em_tensor *mean, const em_tensor *var,
                          const em_tensor *w, const em_tensor *b, double eps);
  em_status (*batch_norm_backward)(em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *gy,
                                   const em_tensor *x, const em_tensor *mean, const em_tensor *var,
                                   const em_tensor *w, double eps, int training);
  /* layer norm over the rows of x [M, D]; mean and rstd [M] are written by the forward */
  em_status (*layer_norm)(em_tensor *out, em_tensor *mean, em_tensor *rstd, const em_tensor *x, const em_tensor *w,
                          const em_tensor *b, double eps);
  em_status (*layer_norm_backward)(em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *gy,
                                   const em_tensor *x, const em_tensor *mean, const em_tensor *rstd,
                                   const em_tensor *w);
  /* class-index losses: x [N, C, S], target [N, S] (int32/int64), weight [C]; out is [N, S]
   * (no reduction) or 0-d; lse [N, S] (each sample's logsumexp; NULL for log inputs) and
   * total_weight (0-d: the summed weight of the samples not ignored) are kept for the
   * backward, where gout is out's gradient. A target out of range is an EM_ERR_INDEX that
   * shows its value. */
  em_status (*class_loss)(em_tensor *out, em_tensor *lse, em_tensor *total_weight, const em_tensor *x,
                          const em_tensor *target, const em_tensor *weight, const em_class_loss_params *p);
  em_status (*class_loss_backward)(em_tensor *gx, const em_tensor *gout, const em_tensor *x, const em_tensor *lse,
                                   const em_tensor *total_weight, const em_tensor *target, const em_tensor *weight,
                                   const em_class_loss_params *p);
  /* *count = rows of x [N, C] whose first largest value (NaN largest) is at target[i] - base;
   * target int32/int64 [N]; NULL: the nn layer composes argmax, eq and sum */
  em_status (*count_correct)(int64_t *count, const em_tensor *x, const em_tensor *target, int base);
  /* embedding bags (mode: em_bag_mode of ember/nn.h): weight [R, D], indices [L] (int32/
   * int64, from base), offsets [B] int64 (bag b holds indices[offsets[b] .. offsets[b+1]),
   * the last bag runs to L), per_sample_weights [L]; out [B, D]; argmax [B, D] int64 (max
   * mode: the weight row of each maximum, -1 in empty bags). An index out of range is an
   * EM_ERR_INDEX that shows its value. */
  em_status (*embedding_bag)(em_tensor *out, em_tensor *argmax, const em_tensor *weight, const em_tensor *indices,
                             const em_tensor *offsets, const em_tensor *psw, int mode, int base);
  em_status (*embedding_bag_backward)(em_tensor *gw, em_tensor *gpsw, const em_tensor *gout, const em_tensor *weight,
                                      const em_tensor *indices, const em_tensor *offsets, const em_tensor *psw,
                                      const em_tensor *argmax, int mode, int base);
  /* gx = y > 0 ? gy : 0, ReLU's backward from its output (one pass, no mask tensor) */
  em_status (*relu_backward)(em_tensor *gx, const em_tensor *gy, const em_tensor *y);
} em_backend;

/* The backend for a device, or NULL with an error naming op when it is not available. */
const em_backend *tn_backend_for(const char *op, em_device device);
/* Call a backend entry, reporting a NULL entry as unsupported. */
#define EM_BACKEND_CALL(op_name, be, entry, ...)                                            \
  ((be)->entry ? (be)->entry(__VA_ARGS__)                                                    \
               : em_set_error(EM_ERR_UNSUPPORTED, "%s: not supported on device %s",          \
                              (op_name), (be)->name))

#ifdef __cplusplus
}
#endif
#endif
