/* ember/tensor.h - n-dimensional tensors: creation, views, math, indexing.
 *
 * A tensor is a dtype, a device, sizes, strides and an offset (both in elements) over a
 * reference-counted storage. Views share the storage; em_tensor_release() drops one
 * reference and frees the tensor when the last one goes.
 *
 * Calling convention. Operations are result-first: `em_tensor **out` is an in/out
 * parameter. When *out is NULL the operation allocates a new tensor and stores it there
 * (the caller owns one reference). When *out is a tensor, the result is written into it;
 * it must already have the result's shape (in-place forms pass the input itself).
 * Dims are 0-based and may be negative (counted from the end). Index tensors hold
 * positions counted from `base` (0 from C, 1 from Lua), so no conversion copy is needed.
 * Every function returns EM_OK or an error status with em_last_error() set. */
#ifndef EMBER_TENSOR_H
#define EMBER_TENSOR_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EM_MAX_DIMS 8

/* EM_FFI_BEGIN */
typedef struct em_tensor em_tensor;

typedef void (*em_deleter)(void *data, void *ctx);

typedef enum em_binop {
  EM_ADD = 0,
  EM_SUB,
  EM_MUL,
  EM_DIV,
  EM_POW,
  EM_MAXIMUM,
  EM_MINIMUM,
  EM_FMOD,
  EM_ATAN2, /* atan2(a, b): the angle of the point (b, a), floats */
  EM_EQ,
  EM_NE,
  EM_LT,
  EM_LE,
  EM_GT,
  EM_GE, /* comparisons give bool */
  EM_LOGICAL_AND,
  EM_LOGICAL_OR,
  EM_LOGICAL_XOR, /* give bool */
  EM_NUM_BINOPS
} em_binop;

typedef enum em_unop {
  EM_NEG = 0,
  EM_ABS,
  EM_EXP,
  EM_LOG,
  EM_SQRT,
  EM_SIN,
  EM_COS,
  EM_TANH,
  EM_SIGMOID,
  EM_RELU,
  EM_SIGN,
  EM_FLOOR,
  EM_CEIL,
  EM_ROUND,
  EM_RECIPROCAL,
  EM_SQUARE,
  EM_RSQRT,
  EM_LOG1P,
  EM_EXPM1,
  EM_ERF,
  EM_GELU,
  EM_SILU,
  EM_LOG2,
  EM_LOG10,
  EM_LOGICAL_NOT,
  EM_NUM_UNOPS
} em_unop;

typedef enum em_redop {
  EM_SUM = 0,
  EM_MEAN,
  EM_PROD,
  EM_MAX,
  EM_MIN,
  EM_ARGMAX,
  EM_ARGMIN,
  EM_LOGSUMEXP,
  EM_NORM,
  EM_ANY,
  EM_ALL,
  EM_NUM_REDOPS
} em_redop;

/* ---- lifetime and inspection ---- */
EM_API void em_tensor_retain(em_tensor *t);
EM_API void em_tensor_release(em_tensor *t);
EM_API em_status em_tensor_free(em_tensor *t); /* drop the storage now; later use is an error */
EM_API int em_tensor_is_freed(const em_tensor *t);
EM_API int em_tensor_ndim(const em_tensor *t);
EM_API int64_t em_tensor_size(const em_tensor *t, int dim);
EM_API int64_t em_tensor_stride(const em_tensor *t, int dim);
EM_API const int64_t *em_tensor_sizes(const em_tensor *t);
EM_API const int64_t *em_tensor_strides(const em_tensor *t);
EM_API int64_t em_tensor_offset(const em_tensor *t);
EM_API int64_t em_tensor_numel(const em_tensor *t);
EM_API em_dtype em_tensor_dtype(const em_tensor *t);
EM_API em_device em_tensor_device(const em_tensor *t);
EM_API void *em_tensor_data(const em_tensor *t); /* address of the first element */
EM_API size_t em_tensor_storage_nbytes(const em_tensor *t);
EM_API const void *em_tensor_storage_id(const em_tensor *t); /* equal for tensors sharing storage */
EM_API int em_tensor_is_contiguous(const em_tensor *t);
EM_API em_status em_tensor_item(const em_tensor *t, double *value); /* one-element tensors */
EM_API em_status em_tensor_item_int64(const em_tensor *t, int64_t *value);
EM_API em_status em_tensor_get(const em_tensor *t, const int64_t *index, double *value);
EM_API em_status em_tensor_set(em_tensor *t, const int64_t *index, double value);

/* ---- creation ---- */
EM_API em_status em_empty(em_tensor **out, int ndim, const int64_t *sizes, em_dtype dtype, em_device device);
EM_API em_status em_zeros(em_tensor **out, int ndim, const int64_t *sizes, em_dtype dtype, em_device device);
EM_API em_status em_ones(em_tensor **out, int ndim, const int64_t *sizes, em_dtype dtype, em_device device);
EM_API em_status em_full(em_tensor **out, int ndim, const int64_t *sizes, double value, em_dtype dtype,
                         em_device device);
EM_API em_status em_empty_like(em_tensor **out, const em_tensor *like);
EM_API em_status em_arange(em_tensor **out, double start, double end, double step, em_dtype dtype, em_device device);
EM_API em_status em_linspace(em_tensor **out, double start, double end, int64_t steps, em_dtype dtype,
                             em_device device);
EM_API em_status em_eye(em_tensor **out, int64_t n, int64_t m, em_dtype dtype, em_device device);
/* Adopt memory without copying. strides may be NULL (contiguous). deleter may be NULL
 * (the caller keeps the memory alive for as long as the tensor lives). */
EM_API em_status em_from_blob(em_tensor **out, void *data, int ndim, const int64_t *sizes, const int64_t *strides,
                              em_dtype dtype, em_device device, em_deleter deleter, void *deleter_ctx);
EM_API em_status em_fill(em_tensor *t, double value);

/* ---- random numbers: counter-based Philox, independent of the thread count ---- */
EM_API void em_manual_seed(uint64_t seed);
EM_API void em_generator_get_state(uint64_t *seed, uint64_t *offset);
EM_API void em_generator_set_state(uint64_t seed, uint64_t offset);
/* Advances the global generator past the numbers a fill of numel elements would draw (a
 * model-parallel rank skips the tables it does not hold, so the next draws match one
 * process's); numel < 0 is taken as 0. */
EM_API void em_generator_skip(int64_t numel);
EM_API em_status em_uniform_(em_tensor *t, double low, double high);
EM_API em_status em_normal_(em_tensor *t, double mean, double std);
EM_API em_status em_randint_(em_tensor *t, int64_t low, int64_t high); /* [low, high) */
EM_API em_status em_bernoulli_(em_tensor *t, double p);
EM_API em_status em_randperm(em_tensor **out, int64_t n, em_dtype dtype, em_device device);

/* ---- views (share storage) ---- */
EM_API em_status em_view(em_tensor **out, const em_tensor *a, int ndim, const int64_t *sizes); /* one size may be -1 */
EM_API em_status em_reshape(em_tensor **out, const em_tensor *a, int ndim, const int64_t *sizes); /* view if it can */
EM_API em_status em_narrow(em_tensor **out, const em_tensor *a, int dim, int64_t start, int64_t length);
EM_API em_status em_select(em_tensor **out, const em_tensor *a, int dim, int64_t index);
/* Positions start, start + step, ... below end of dim (PyTorch's a[start:end:step]): a view.
 * start and end are clamped to 0..size (negative ones count from the end first); step > 0
 * (a negative step cannot be a view with these strides and is refused, as in PyTorch). */
EM_API em_status em_slice(em_tensor **out, const em_tensor *a, int dim, int64_t start, int64_t end, int64_t step);
EM_API em_status em_transpose(em_tensor **out, const em_tensor *a, int dim0, int dim1);
EM_API em_status em_permute(em_tensor **out, const em_tensor *a, int ndim, const int *dims);
EM_API em_status em_expand(em_tensor **out, const em_tensor *a, int ndim, const int64_t *sizes); /* -1 keeps */
EM_API em_status em_squeeze(em_tensor **out, const em_tensor *a, int dim, int all_dims);
EM_API em_status em_unsqueeze(em_tensor **out, const em_tensor *a, int dim);
EM_API em_status em_flatten(em_tensor **out, const em_tensor *a, int start_dim, int end_dim);
EM_API em_status em_as_strided(em_tensor **out, const em_tensor *a, int ndim, const int64_t *sizes,
                               const int64_t *strides, int64_t offset);

/* ---- copies and conversion ---- */
EM_API em_status em_contiguous(em_tensor **out, const em_tensor *a); /* retains a if already so */
EM_API em_status em_clone(em_tensor **out, const em_tensor *a);
EM_API em_status em_copy_(em_tensor *dst, const em_tensor *src); /* broadcasts, converts dtype */
EM_API em_status em_to(em_tensor **out, const em_tensor *a, em_dtype dtype, em_device device);

/* ---- elementwise, with broadcasting and dtype promotion ---- */
EM_API em_status em_binary(em_binop op, em_tensor **out, const em_tensor *a, const em_tensor *b);
/* a op s, or s op a when reversed is nonzero. The scalar does not promote the tensor's
 * dtype unless it is a float and the tensor is integral (then float32). */
EM_API em_status em_binary_scalar(em_binop op, em_tensor **out, const em_tensor *a, double s, int reversed);
EM_API em_status em_unary(em_unop op, em_tensor **out, const em_tensor *a);
EM_API em_status em_where(em_tensor **out, const em_tensor *cond, const em_tensor *a, const em_tensor *b);
EM_API em_status em_clamp(em_tensor **out, const em_tensor *a, double low, double high); /* NaN: no bound */
/* out = a + alpha * b, a common fused form (optimizers, residuals). */
EM_API em_status em_add_scaled(em_tensor **out, const em_tensor *a, const em_tensor *b, double alpha);

/* ---- reductions ----
 * dims == NULL or ndims == 0 reduces over every dim. indices (may be NULL) receives the
 * positions for EM_MAX / EM_MIN (int64, counted from base). */
EM_API em_status em_reduce(em_redop op, em_tensor **out, em_tensor **indices, const em_tensor *a, const int *dims,
                           int ndims, int keepdim, int base);
EM_API em_status em_norm(em_tensor **out, const em_tensor *a, double p, const int *dims, int ndims, int keepdim);
EM_API em_status em_var(em_tensor **out, const em_tensor *a, const int *dims, int ndims, double correction, int keepdim,
                        int take_sqrt);
EM_API em_status em_cumsum(em_tensor **out, const em_tensor *a, int dim);
EM_API em_status em_cumprod(em_tensor **out, const em_tensor *a, int dim);
EM_API em_status em_softmax(em_tensor **out, const em_tensor *a, int dim, int log);
EM_API em_status em_sort(em_tensor **values, em_tensor **indices, const em_tensor *a, int dim, int descending,
                         int base);
EM_API em_status em_topk(em_tensor **values, em_tensor **indices, const em_tensor *a, int64_t k, int dim, int largest,
                         int base);

/* ---- linear algebra (OpenBLAS on the CPU) ---- */
EM_API em_status em_matmul(em_tensor **out, const em_tensor *a, const em_tensor *b); /* numpy rules */
EM_API em_status em_mm(em_tensor **out, const em_tensor *a, const em_tensor *b);
EM_API em_status em_bmm(em_tensor **out, const em_tensor *a, const em_tensor *b);
/* out = beta * c + alpha * (a @ b); c broadcasts to the result */
EM_API em_status em_addmm(em_tensor **out, const em_tensor *c, const em_tensor *a, const em_tensor *b, double beta,
                          double alpha);
EM_API em_status em_mv(em_tensor **out, const em_tensor *a, const em_tensor *v);
EM_API em_status em_dot(em_tensor **out, const em_tensor *a, const em_tensor *b);
EM_API em_status em_outer(em_tensor **out, const em_tensor *a, const em_tensor *b);

/* ---- indexing ---- */
EM_API em_status em_index_select(em_tensor **out, const em_tensor *a, int dim, const em_tensor *index, int base);
EM_API em_status em_gather(em_tensor **out, const em_tensor *a, int dim, const em_tensor *index, int base);
/* In place on self: self[index[i][j]][j] = src[i][j] (dim 0), or += when accumulate. */
EM_API em_status em_scatter_(em_tensor *self, int dim, const em_tensor *index, const em_tensor *src, int accumulate,
                             int base);
EM_API em_status em_scatter_value_(em_tensor *self, int dim, const em_tensor *index, double value, int base);
EM_API em_status em_index_add_(em_tensor *self, int dim, const em_tensor *index, const em_tensor *src, double alpha,
                               int base);
EM_API em_status em_index_fill_(em_tensor *self, int dim, const em_tensor *index, double value, int base);
EM_API em_status em_masked_fill_(em_tensor *self, const em_tensor *mask, double value);
EM_API em_status em_masked_select(em_tensor **out, const em_tensor *a, const em_tensor *mask);
EM_API em_status em_nonzero(em_tensor **out, const em_tensor *a, int base); /* [n, ndim] int64 */
EM_API em_status em_cat(em_tensor **out, em_tensor *const *tensors, int n, int dim);
EM_API em_status em_stack(em_tensor **out, em_tensor *const *tensors, int n, int dim);
/* EM_FFI_END */

#ifdef __cplusplus
}
#endif
#endif
