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
  int ndim;                                    /* >= 1 after init */
  int64_t numel;
  int64_t sizes[EM_MAX_DIMS];                  /* outermost first */
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

#define EM_DISPATCH_MATH(dtype, opname, ...)                                                     \
  switch (dtype) {                                                                               \
    EM_DTYPE_CASE(EM_FLOAT32, float, __VA_ARGS__)                                                \
    EM_DTYPE_CASE(EM_FLOAT64, double, __VA_ARGS__)                                               \
    EM_DTYPE_CASE(EM_INT32, int32_t, __VA_ARGS__)                                                \
    EM_DTYPE_CASE(EM_INT64, int64_t, __VA_ARGS__)                                                \
    EM_DTYPE_CASE(EM_UINT8, uint8_t, __VA_ARGS__)                                                \
    EM_DTYPE_CASE(EM_BOOL, uint8_t, __VA_ARGS__)                                                 \
    default:                                                                                     \
      return em_set_error(EM_ERR_DTYPE, "%s: dtype %s is not supported on the CPU (convert with " \
                          "to('float32') first)", (opname), em_dtype_name(dtype));               \
  }

#define EM_DISPATCH_FLOAT(dtype, opname, ...)                                                      \
  switch (dtype) {                                                                                 \
    EM_DTYPE_CASE(EM_FLOAT32, float, __VA_ARGS__)                                                  \
    EM_DTYPE_CASE(EM_FLOAT64, double, __VA_ARGS__)                                                 \
    default:                                                                                       \
      return em_set_error(EM_ERR_DTYPE, "%s: expected a float32 or float64 tensor, got %s", (opname), \
                          em_dtype_name(dtype));                                                   \
  }

/* Aligned host allocation used by the CPU backend (64 bytes: one cache line, AVX-512). */
void *cpu_alloc(size_t nbytes, em_device device);
void cpu_free(void *ptr, size_t nbytes, em_device device);

/* Kernels, one group per file. */
em_status cpu_copy(em_tensor *dst, const em_tensor *src);
em_status cpu_fill(em_tensor *t, double value);
em_status cpu_arange(em_tensor *t, double start, double step);
/* elementwise (elementwise.c: binary ops, where, clamp, add_scaled; unary.c: unary ops) */
em_status cpu_binary(em_binop op, em_tensor *out, const em_tensor *a, const em_tensor *b);
em_status cpu_binary_scalar(em_binop op, em_tensor *out, const em_tensor *a, double s, int reversed);
em_status cpu_unary(em_unop op, em_tensor *out, const em_tensor *a);
em_status cpu_where(em_tensor *out, const em_tensor *cond, const em_tensor *a, const em_tensor *b);
em_status cpu_clamp(em_tensor *out, const em_tensor *a, double low, double high);
em_status cpu_add_scaled(em_tensor *out, const em_tensor *a, const em_tensor *b, double alpha);
/* linear algebra (gemm.c), indexing (index.c), random fills (random.c) */
em_status cpu_gemm(em_tensor *out, const em_tensor *a, const em_tensor *b, double alpha, double beta);
em_status cpu_index_select(em_tensor *out, const em_tensor *a, int dim, const em_tensor *index, int base);
em_status cpu_gather(em_tensor *out, const em_tensor *a, int dim, const em_tensor *index, int base);
em_status cpu_scatter(em_tensor *self, int dim, const em_tensor *index, const em_tensor *src, double value,
                         int accumulate, int base);
em_status cpu_index_add(em_tensor *self, int dim, const em_tensor *index, const em_tensor *src, double alpha,
                           int base);
em_status cpu_index_fill(em_tensor *self, int dim, const em_tensor *index, double value, int base);
em_status cpu_masked_fill(em_tensor *self, const em_tensor *mask, double value);
em_status cpu_masked_select(em_tensor *out, const em_tensor *a, const em_tensor *mask);
em_status cpu_nonzero(em_tensor *out, const em_tensor *a, int base);
em_status cpu_count_nonzero(const em_tensor *a, int64_t *count);
em_status cpu_random(em_tensor *t, const em_random_params *p);
/* reductions (reduce.c), softmax and scans along a dim (softmax.c), sort and top-k (sort.c) */
em_status cpu_reduce(em_redop op, em_tensor *out, em_tensor *indices, const em_tensor *a, int nreduce, double p,
                        int base);
em_status cpu_var(em_tensor *out, const em_tensor *a, int nreduce, double correction, int take_sqrt);
em_status cpu_scan(int prod, em_tensor *out, const em_tensor *a, int dim);
em_status cpu_softmax(em_tensor *out, const em_tensor *a, int dim, int log);
em_status cpu_sort(em_tensor *values, em_tensor *indices, const em_tensor *a, int dim, int descending, int64_t k,
                      int base);
/* fused optimizer updates and the gradient norm (optim.c) */
em_status cpu_optim_sgd(int n, em_tensor *const *params, const em_tensor *const *grads, em_tensor *const *bufs,
                           const em_sgd_args *args);
em_status cpu_optim_adam(int n, em_tensor *const *params, const em_tensor *const *grads,
                            em_tensor *const *exp_avgs, em_tensor *const *exp_avg_sqs, const em_adam_args *args);
em_status cpu_optim_grad_norm(int n, const em_tensor *const *grads, double p, double *acc);
/* loss scaling: unscale gradients and look for infs/NaNs (amp.c) */
em_status cpu_amp_unscale(int n, em_tensor *const *grads, double inv_scale, int *found_inf);
/* nn kernels: convolution (nn_conv.c), pooling (nn_pool.c), normalisation (nn_norm.c),
 * class-index losses and ReLU's backward (nn_loss.c), embedding bags (nn_embedding.c) */
em_status cpu_conv2d(em_tensor *out, const em_tensor *x, const em_tensor *w, const em_tensor *b,
                        const em_conv2d_params *p);
em_status cpu_conv2d_backward(em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *gy,
                                 const em_tensor *x, const em_tensor *w, const em_conv2d_params *p);
em_status cpu_max_pool2d(em_tensor *out, em_tensor *indices, const em_tensor *x, const em_pool2d_params *p);
em_status cpu_max_pool2d_backward(em_tensor *gx, const em_tensor *gy, const em_tensor *indices);
em_status cpu_avg_pool2d(em_tensor *out, const em_tensor *x, const em_pool2d_params *p);
em_status cpu_avg_pool2d_backward(em_tensor *gx, const em_tensor *gy, const em_pool2d_params *p);
em_status cpu_batch_norm_stats(em_tensor *mean, em_tensor *var, const em_tensor *x);
em_status cpu_batch_norm(em_tensor *out, const em_tensor *x, const em_tensor *mean, const em_tensor *var,
                            const em_tensor *w, const em_tensor *b, double eps);
em_status cpu_batch_norm_backward(em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *gy,
                                     const em_tensor *x, const em_tensor *mean, const em_tensor *var,
                                     const em_tensor *w, double eps, int training);
em_status cpu_layer_norm(em_tensor *out, em_tensor *mean, em_tensor *rstd, const em_tensor *x, const em_tensor *w,
                            const em_tensor *b, double eps);
em_status cpu_layer_norm_backward(em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *gy,
                                     const em_tensor *x, const em_tensor *mean, const em_tensor *rstd,
                                     const em_tensor *w);
em_status cpu_class_loss(em_tensor *out, em_tensor *lse, em_tensor *total_weight, const em_tensor *x,
                            const em_tensor *target, const em_tensor *weight, const em_class_loss_params *p);
em_status cpu_class_loss_backward(em_tensor *gx, const em_tensor *gout, const em_tensor *x, const em_tensor *lse,
                                     const em_tensor *total_weight, const em_tensor *target, const em_tensor *weight,
                                     const em_class_loss_params *p);
em_status cpu_count_correct(int64_t *count, const em_tensor *x, const em_tensor *target, int base);
em_status cpu_embedding_bag(em_tensor *out, em_tensor *argmax, const em_tensor *weight, const em_tensor *indices,
                               const em_tensor *offsets, const em_tensor *psw, int mode, int base);
em_status cpu_embedding_bag_backward(em_tensor *gw, em_tensor *gpsw, const em_tensor *gout, const em_tensor *weight,
                                        const em_tensor *indices, const em_tensor *offsets, const em_tensor *psw,
                                        const em_tensor *argmax, int mode, int base);
em_status cpu_relu_backward(em_tensor *gx, const em_tensor *gy, const em_tensor *y);

#endif
