/* backend.h - the per-device dispatch table, in the manner of ggml's backend interface.
 *
 * The tensor core (runtime/tensor) checks arguments, promotes dtypes, broadcasts and
 * allocates the result once, then calls the backend of the inputs' device. Backends
 * receive tensors that already agree: same device, the shapes the op needs (broadcast
 * inputs arrive as expanded views with zero strides) and the dtype the op computes in.
 *
 * The table is one list, EM_BACKEND_OPS below, from which the struct, each backend's
 * prototypes and each backend's table are generated. Every entry is required unless the
 * list marks it optional: a backend that lacks a required kernel does not link, so the
 * core calls entries without checking them. An optional entry has a documented default
 * that the core applies when the entry is NULL; a backend states in its table file, for
 * each optional entry, whether it has the kernel (see EM_BACKEND_TABLE). */
#ifndef EMBER_BACKEND_H
#define EMBER_BACKEND_H

#include "tensor_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Raised whenever an entry, its parameters or one of the structs below changes: plugins
 * built against another version are refused when they load (see EM_BACKEND_ABI). */
#define EM_BACKEND_API_VERSION 5

typedef enum em_random_kind {
  EM_RANDOM_UNIFORM,
  EM_RANDOM_NORMAL,
  EM_RANDOM_INT,
  EM_RANDOM_BERNOULLI,
  EM_RANDOM_PERM /* t (1-d, n elements) receives a permutation of 0..n-1 */
} em_random_kind;

/* One fill from the Philox stream (see core/philox.h for the counter layout). */
typedef struct em_random_params {
  em_random_kind kind;
  double a, b; /* uniform [a, b); normal mean a, std b; bernoulli p = a */
  int64_t low, high; /* randint [low, high), exact over all of int64 */
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

/* One row-wise update (em_optim_rows, ember/optim.h): rule is an em_row_rule; lr is the
 * step's (Adagrad's decay applied). */
typedef struct em_row_optim_args {
  int rule, maximize;
  double lr, eps, weight_decay;
} em_row_optim_args;

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
  int64_t ignore_index; /* a target value (as stored, in base) whose samples are skipped */
  double label_smoothing; /* cross_entropy only */
  int reduction; /* em_reduction of ember/nn.h: 0 none, 1 mean, 2 sum */
  int log_input; /* 1: the input holds log-probabilities (nll_loss) */
  int base;
} em_class_loss_params;

/* One recurrent layer in one direction (runtime/nn/rnn.c has checked it): mode is an
 * em_rnn_mode (ember/nn.h); x [T, B, NI] time-major; lengths (host memory, [B], each in
 * 1..T for a backend entry) or NULL for all T; reverse walks time from T - 1 down to 0
 * (each sequence from its last valid step). */
typedef struct em_rnn_params {
  int mode, reverse;
  int64_t T, B, NI, H; /* NI: input size ("I" is complex.h's) */
  const int64_t *lengths;
} em_rnn_params;

/* Fused attention over BH = the product of the leading dims: q [BH, Tq, D], k [BH, Tk, D],
 * v [BH, Tk, Dv] (runtime/nn/attention.c has checked them). The mask (NULL mask_ptr:
 * none), expanded to [lead..., Tq, Tk], is read with element strides: rows mask_rs,
 * columns mask_cs, and per batch*head either mask_bh_offset[bh] (host memory, the CPU's)
 * or, on a device, mask_lead_sizes/strides over the mask_lead_ndim leading dims (bh
 * row-major over them). bool (1 = attend) or q's dtype (added). causal: key j is seen by
 * query i when j <= i. Dropout (p > 0) keeps (bh, i, j) when word e % 4 of Philox block
 * offset + e / 4, e = (bh * Tq + i) * Tk + j, is at least p * 2^32. */
typedef struct em_attn_params {
  int64_t BH, Tq, Tk, D, Dv;
  double scale;
  int causal;
  const char *mask_ptr;
  int mask_is_bool;
  const int64_t *mask_bh_offset;
  int64_t mask_rs, mask_cs;
  int mask_lead_ndim;
  int64_t mask_lead_sizes[EM_MAX_DIMS], mask_lead_strides[EM_MAX_DIMS];
  double dropout_p;
  uint64_t seed, offset;
  /* The CPU's operand layouts (other devices get contiguous operands and leave these zero):
   * operand i (EM_ATTN_Q, K, V, OUT, GOUT; gq, gk and gv share q's, k's and v's) has unit
   * stride along its last dim, rows row_stride[i] elements apart and batch*head bh's first
   * row at element bh_offset[i][bh]; a NULL bh_offset[i] means contiguous [BH, T, D]. */
  int64_t row_stride[5];
  const int64_t *bh_offset[5];
} em_attn_params;
enum { EM_ATTN_Q, EM_ATTN_K, EM_ATTN_V, EM_ATTN_OUT, EM_ATTN_GOUT };

/* The op table. X(P, name, return type, parameters...) is an entry every backend provides;
 * O(P, ...) is an optional entry, whose comment starts with its default. P is passed
 * through untouched (the prefix of a backend's function names, see below). */
#define EM_BACKEND_OPS(X, O, P)                                                                                        \
  /* nbytes (> 0) of memory on device, or NULL when out of memory */                                                   \
  X(P, alloc, void *, size_t nbytes, em_device device)                                                                 \
  /* frees what alloc returned; nbytes and device as given to alloc */                                                 \
  X(P, free, void, void *ptr, size_t nbytes, em_device device)                                                         \
  /* dst and src have the same shape; dtypes may differ (converts) */                                                  \
  X(P, copy, em_status, em_tensor *dst, const em_tensor *src)                                                          \
  /* every element of t = value */                                                                                     \
  X(P, fill, em_status, em_tensor *t, double value)                                                                    \
  /* t[i] = start + i * step over the flattened contiguous tensor */                                                   \
  X(P, arange, em_status, em_tensor *t, double start, double step)                                                     \
  /* out = a (op) b: out, a, b share a shape; a and b share the compute dtype; out is that dtype, or bool for    \
   * comparisons and logical ops */     \
  X(P, binary, em_status, em_binop op, em_tensor *out, const em_tensor *a, const em_tensor *b)                         \
  /* out = a (op) s, or s (op) a when reversed; dtypes as for binary */                                                \
  X(P, binary_scalar, em_status, em_binop op, em_tensor *out, const em_tensor *a, double s, int reversed)              \
  /* out = op(a): out and a share a shape; out has a's dtype, or bool for logical_not */                               \
  X(P, unary, em_status, em_unop op, em_tensor *out, const em_tensor *a)                                               \
  /* out = cond ? a : b; all four share a shape, cond is bool, a, b and out share a dtype */                           \
  X(P, where, em_status, em_tensor *out, const em_tensor *cond, const em_tensor *a, const em_tensor *b)                \
  /* out = min(max(a, low), high), a NaN bound being no bound; out and a share shape and dtype */                      \
  X(P, clamp, em_status, em_tensor *out, const em_tensor *a, double low, double high)                                  \
  /* out = a + alpha * b; out, a, b share shape and dtype */                                                           \
  X(P, add_scaled, em_status, em_tensor *out, const em_tensor *a, const em_tensor *b, double alpha)                    \
  /* a's last nreduce dims are reduced; out (and indices) are contiguous with a's leading dims. p is the norm    \
   * order for EM_NORM. Positions (indices, argmax) are flat over the reduced dims, counted from base. The dtype \
   * is the input's; out is int64 for integer sum/prod, bool for any/all, int64 for argmax/argmin */     \
  X(P, reduce, em_status, em_redop op, em_tensor *out, em_tensor *indices, const em_tensor *a, int nreduce, double p,  \
    int base)                                                                                                          \
  /* variance (or its square root) over a's last nreduce dims, with the given correction; out as for reduce */         \
  X(P, var, em_status, em_tensor *out, const em_tensor *a, int nreduce, double correction, int take_sqrt)              \
  /* cumulative sum (or product) along dim: a and out are contiguous with one shape (out int64 for an integer    \
   * scan) */     \
  X(P, scan, em_status, int prod, em_tensor *out, const em_tensor *a, int dim)                                         \
  /* (log-)softmax along dim: a and out are contiguous with one shape */                                               \
  X(P, softmax, em_status, em_tensor *out, const em_tensor *a, int dim, int log)                                       \
  /* any strides; values and indices have a's shape with k along dim and hold the first k of the sorted row;     \
   * indices may be NULL */     \
  X(P, sort, em_status, em_tensor *values, em_tensor *indices, const em_tensor *a, int dim, int descending, int64_t k, \
    int base)                                                                                                          \
  /* batched GEMM: out[...,M,N] = alpha * a[...,M,K] @ b[...,K,N] + beta * out; the three share ndim >= 2 and    \
   * the leading (batch) sizes; any strides (broadcast batch dims arrive as zero strides); beta == 0 never reads \
   * out */     \
  X(P, gemm, em_status, em_tensor *out, const em_tensor *a, const em_tensor *b, double alpha, double beta)             \
  /* out = a's slices along dim at index (int32/int64, from base) */                                                   \
  X(P, index_select, em_status, em_tensor *out, const em_tensor *a, int dim, const em_tensor *index, int base)         \
  /* out[i][j] = a[index[i][j]][j] along dim; out has index's shape */                                                 \
  X(P, gather, em_status, em_tensor *out, const em_tensor *a, int dim, const em_tensor *index, int base)               \
  /* self[index[i][j]][j] = src[i][j] (or value when src is NULL) along dim, added when accumulate */                  \
  X(P, scatter, em_status, em_tensor *self, int dim, const em_tensor *index, const em_tensor *src, double value,       \
    int accumulate, int base)                                                                                          \
  /* self's slices along dim at index += alpha * src's */                                                              \
  X(P, index_add, em_status, em_tensor *self, int dim, const em_tensor *index, const em_tensor *src, double alpha,     \
    int base)                                                                                                          \
  /* self's slices along dim at index = value */                                                                       \
  X(P, index_fill, em_status, em_tensor *self, int dim, const em_tensor *index, double value, int base)                \
  /* self = value where mask (bool, self's shape) */                                                                   \
  X(P, masked_fill, em_status, em_tensor *self, const em_tensor *mask, double value)                                   \
  /* out (1-d, sized by count_nonzero of mask) = a's elements where mask */                                            \
  X(P, masked_select, em_status, em_tensor *out, const em_tensor *a, const em_tensor *mask)                            \
  /* out [count, ndim] int64 = the positions (from base) of a's nonzero elements, in row-major order */                \
  X(P, nonzero, em_status, em_tensor *out, const em_tensor *a, int base)                                               \
  /* how many elements of a are nonzero (sizes the results of masked_select and nonzero) */                            \
  X(P, count_nonzero, em_status, const em_tensor *a, int64_t *count)                                                   \
  /* fills t from the Philox stream (seed, offset) */                                                                  \
  X(P, random, em_status, em_tensor *t, const em_random_params *p)                                                     \
  /* fused in-place SGD over n parameters. grads[i] == NULL skips parameter i; each parameter's gradient and     \
   * buffer share its shape and dtype (float32/float64), any strides; bufs may be NULL when momentum == 0 */     \
  X(P, optim_sgd, em_status, int n, em_tensor *const *params, const em_tensor *const *grads, em_tensor *const *bufs,   \
    const em_sgd_args *args)                                                                                           \
  /* fused in-place Adam/AdamW over n parameters; grads and state as for optim_sgd */                                  \
  X(P, optim_adam, em_status, int n, em_tensor *const *params, const em_tensor *const *grads,                          \
    em_tensor *const *exp_avgs, em_tensor *const *exp_avg_sqs, const em_adam_args *args)                               \
  /* adds sum |g|^p over every gradient (NULL entries skipped) to *acc (float64), or for p = inf takes the max   \
   * |g| */     \
  X(P, optim_grad_norm, em_status, int n, const em_tensor *const *grads, double p, double *acc)                        \
  /* loss scaling: multiplies every gradient (floating, any strides; NULL entries skipped) by inv_scale in       \
   * place, and sets *found_inf to 1 when any value was inf or NaN before the multiplication, else 0: one pass   \
   * over all gradients, one host synchronisation */     \
  X(P, amp_unscale, em_status, int n, em_tensor *const *grads, double inv_scale, int *found_inf)                       \
  /* nn entries (runtime/nn): contiguous operands of one float dtype, NCHW images, results allocated             \
   * (contiguous) by the caller; NULL optional inputs are absent and NULL gradient outputs are not wanted.       \
   * conv2d: x [N, C, H, W], w [Co, C / groups, kH, kW], b [Co], out [N, Co, OH, OW] */     \
  X(P, conv2d, em_status, em_tensor *out, const em_tensor *x, const em_tensor *w, const em_tensor *b,                  \
    const em_conv2d_params *p)                                                                                         \
  /* gx, gw, gb (each may be NULL) from gy [N, Co, OH, OW]; shapes as for conv2d */                                    \
  X(P, conv2d_backward, em_status, em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *gy,                   \
    const em_tensor *x, const em_tensor *w, const em_conv2d_params *p)                                                 \
  /* over [P, H, W] planes; indices (int32) hold each maximum's position h * W + w in its input plane */               \
  X(P, max_pool2d, em_status, em_tensor *out, em_tensor *indices, const em_tensor *x, const em_pool2d_params *p)       \
  /* gx (zeroed by the backend) receives gy at the positions max_pool2d's indices name */                              \
  X(P, max_pool2d_backward, em_status, em_tensor *gx, const em_tensor *gy, const em_tensor *indices)                   \
  /* over [P, H, W] planes */                                                                                          \
  X(P, avg_pool2d, em_status, em_tensor *out, const em_tensor *x, const em_pool2d_params *p)                           \
  /* gx [P, H, W] from gy, the window geometry p */                                                                    \
  X(P, avg_pool2d_backward, em_status, em_tensor *gx, const em_tensor *gy, const em_pool2d_params *p)                  \
  /* each channel's mean and biased variance [C] of x [N, C, S] */                                                     \
  X(P, batch_norm_stats, em_status, em_tensor *mean, em_tensor *var, const em_tensor *x)                               \
  /* out = (x - mean) / sqrt(var + eps) * w + b per channel of x [N, C, S]; w, b [C] may be NULL */                    \
  X(P, batch_norm, em_status, em_tensor *out, const em_tensor *x, const em_tensor *mean, const em_tensor *var,         \
    const em_tensor *w, const em_tensor *b, double eps)                                                                \
  /* in training form (the statistics depend on x) or evaluation form (they are constants) */                          \
  X(P, batch_norm_backward, em_status, em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *gy,               \
    const em_tensor *x, const em_tensor *mean, const em_tensor *var, const em_tensor *w, double eps, int training)     \
  /* layer norm over the rows of x [M, D]; mean and rstd [M] are written for the backward */                           \
  X(P, layer_norm, em_status, em_tensor *out, em_tensor *mean, em_tensor *rstd, const em_tensor *x,                    \
    const em_tensor *w, const em_tensor *b, double eps)                                                                \
  /* gx, gw, gb (each may be NULL) from gy [M, D] and the forward's mean and rstd */                                   \
  X(P, layer_norm_backward, em_status, em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *gy,               \
    const em_tensor *x, const em_tensor *mean, const em_tensor *rstd, const em_tensor *w)                              \
  /* class-index losses: x [N, C, S], target [N, S] (int32/int64), weight [C]; out is [N, S] (no reduction) or   \
   * 0-d; lse [N, S] (each sample's logsumexp; NULL for log inputs) and total_weight (0-d: the summed weight of  \
   * the samples not ignored) are kept for the backward. A target out of range is an EM_ERR_INDEX that shows     \
   * its value */     \
  X(P, class_loss, em_status, em_tensor *out, em_tensor *lse, em_tensor *total_weight, const em_tensor *x,             \
    const em_tensor *target, const em_tensor *weight, const em_class_loss_params *p)                                   \
  /* gx [N, C, S] from gout (out's gradient) and what class_loss kept */                                               \
  X(P, class_loss_backward, em_status, em_tensor *gx, const em_tensor *gout, const em_tensor *x, const em_tensor *lse, \
    const em_tensor *total_weight, const em_tensor *target, const em_tensor *weight, const em_class_loss_params *p)    \
  /* default (NULL): the nn layer composes argmax, eq and sum. *count = rows of x [N, C] whose first largest     \
   * value (NaN largest) is at target[i] - base; target int32/int64 [N] */     \
  O(P, count_correct, em_status, int64_t *count, const em_tensor *x, const em_tensor *target, int base)                \
  /* embedding bags (mode: em_bag_mode of ember/nn.h): weight [R, D], indices [L] (int32/int64, from base),      \
   * offsets [B] int64 (bag b holds indices[offsets[b] .. offsets[b+1]), the last bag runs to L),                \
   * per_sample_weights [L]; out [B, D]; argmax [B, D] int64 (max mode: the weight row of each maximum, -1 in    \
   * empty bags). An index out of range is an EM_ERR_INDEX that shows its value */     \
  X(P, embedding_bag, em_status, em_tensor *out, em_tensor *argmax, const em_tensor *weight, const em_tensor *indices, \
    const em_tensor *offsets, const em_tensor *psw, int mode, int base)                                                \
  /* gw [R, D] and gpsw [L] (each may be NULL) from gout [B, D] and the forward's argmax */                            \
  X(P, embedding_bag_backward, em_status, em_tensor *gw, em_tensor *gpsw, const em_tensor *gout,                       \
    const em_tensor *weight, const em_tensor *indices, const em_tensor *offsets, const em_tensor *psw,                 \
    const em_tensor *argmax, int mode, int base)                                                                       \
  /* default (NULL): unsupported on the device. The row-sparse weight gradient of embedding_bag: rows [L] int64   \
   * and values [L, D] (allocated by the caller with room for one row per index) receive, in their first *nnz   \
   * entries, the distinct rows looked up (0-based, ascending; row pad, if >= 0, left out) and their summed     \
   * gradients; the other inputs as for embedding_bag_backward */                                               \
  O(P, embedding_bag_sparse_backward, em_status, em_tensor *rows, em_tensor *values, int64_t *nnz,                     \
    const em_tensor *gout, const em_tensor *indices, const em_tensor *offsets, const em_tensor *psw,                   \
    const em_tensor *argmax, int mode, int64_t pad, int base)                                                          \
  /* default (NULL): unsupported. rows_in [K] int64 (0-based, any order, repeats) and values_in [K, D] -> rows   \
   * [K], values [K, D]: their first *nnz entries hold the distinct rows ascending, repeats summed in input order */ \
  O(P, sparse_coalesce, em_status, em_tensor *rows, em_tensor *values, int64_t *nnz, const em_tensor *rows_in,        \
    const em_tensor *values_in)                                                                                        \
  /* default (NULL): unsupported. In-place SGD / Adagrad / row-wise Adagrad of param [R, D] (contiguous) from    \
   * grad [R, D] (rows NULL) or grad [K, D] at rows [K] (int64, 0-based, distinct); state NULL (SGD), [R, D]     \
   * (Adagrad's sums) or [R] (row-wise sums); all contiguous, one float dtype */                                   \
  O(P, optim_rows, em_status, em_tensor *param, const em_tensor *rows, const em_tensor *grad, em_tensor *state,        \
    const em_row_optim_args *args)                                                                                     \
  /* default (NULL): unsupported. DLRM's dot interaction: features, n tensors [B, D] (contiguous, one dtype);  \
   * out [B, D + P] = features[0], then the dot products of each pair (i, j), j < i (j <= i with              \
   * self_interaction), i ascending then j: P = n(n-1)/2 (or n(n+1)/2) */                                            \
  O(P, dot_interaction, em_status, em_tensor *out, em_tensor *const *features, int n, int self_interaction)           \
  /* default (NULL): unsupported. grads[i] [B, D] (allocated; each may be NULL) from gout [B, D + P] */              \
  O(P, dot_interaction_backward, em_status, em_tensor *const *grads, const em_tensor *gout,                           \
    em_tensor *const *features, int n, int self_interaction)                                                           \
  /* default (NULL): unsupported on the device (the CPU's kernels are called directly). One recurrent layer (p):  \
   * y [T, B, H] and state [S, B, H] (the final h, and c for the LSTM: S = 2) from x, h0, c0 [B, H] (NULL:     \
   * zeros), w_ih [G*H, NI], w_hh [G*H, H], b_ih, b_hh [G*H] (NULL: none), PyTorch's layout. When saved is not  \
   * NULL the backend stores in *saved a new tensor on the device with what its backward needs */     \
  O(P, rnn_layer, em_status, const em_rnn_params *p, em_tensor *y, em_tensor *state, em_tensor **saved,                      \
    const em_tensor *x, const em_tensor *h0, const em_tensor *c0, const em_tensor *w_ih, const em_tensor *w_hh,         \
    const em_tensor *b_ih, const em_tensor *b_hh)                                                                      \
  /* default (NULL): unsupported. The gradients (each may be NULL: not wanted) from gy [T, B, H] and gstate          \
   * [S, B, H] (either may be NULL: zeros), the forward's x, h0, c0 and y, and what it saved (the weights are   \
   * the backend's to keep there) */     \
  O(P, rnn_layer_backward, em_status, const em_rnn_params *p, em_tensor *gx, em_tensor *gh0, em_tensor *gc0,           \
    em_tensor *gw_ih, em_tensor *gw_hh, em_tensor *gb_ih, em_tensor *gb_hh, const em_tensor *gy,                       \
    const em_tensor *gstate, const em_tensor *x, const em_tensor *h0, const em_tensor *c0, const em_tensor *y,         \
    const em_tensor *saved)                                                                                            \
  /* default (NULL): unsupported on the device. Fused attention (p): out [BH, Tq, Dv] and lse [BH, Tq] (each row's logsumexp of  \
   * its scaled, masked scores; -inf, with a zero output row, where no key is visible) */     \
  O(P, attention, em_status, const em_attn_params *p, em_tensor *out, em_tensor *lse, const em_tensor *q,               \
    const em_tensor *k, const em_tensor *v)                                                                            \
  /* default (NULL): unsupported. gq, gk, gv (allocated, all three) from gout and the forward's out and lse */           \
  O(P, attention_backward, em_status, const em_attn_params *p, em_tensor *gq, em_tensor *gk, em_tensor *gv,            \
    const em_tensor *gout, const em_tensor *q, const em_tensor *k, const em_tensor *v, const em_tensor *out,           \
    const em_tensor *lse)                                                                                              \
  /* default (NULL): the autograd composes it from elementwise ops. gx = gy (Phi(x) + x phi(x)), the exact      \
   * (erf) GELU's backward in one pass; gy may be broadcast, x and gx share a shape */                                \
  O(P, gelu_backward, em_status, em_tensor *gx, const em_tensor *gy, const em_tensor *x)                             \
  /* default (NULL): the autograd keeps GELU's input and runs gelu_backward. y = GELU(x) and d = GELU'(x) in one   \
   * pass (x, y, d one shape): the autograd then keeps d, and the backward is one product */                           \
  O(P, gelu_with_grad, em_status, em_tensor *y, em_tensor *d, const em_tensor *x)                                    \
  /* gx = y > 0 ? gy : 0, ReLU's backward from its output (one pass, no mask tensor) */                                \
  X(P, relu_backward, em_status, em_tensor *gx, const em_tensor *gy, const em_tensor *y)

#define EM_BACKEND_MEMBER_(P, name, ret, ...) ret (*name)(__VA_ARGS__);
typedef struct em_backend {
  const char *name;
  EM_BACKEND_OPS(EM_BACKEND_MEMBER_, EM_BACKEND_MEMBER_, )
} em_backend;

/* The prototypes of a backend whose functions are named P_<entry> (cpu_copy, ...),
 * optional entries included (a backend without one never defines it). */
#define EM_BACKEND_PROTOTYPE_(P, name, ret, ...) ret P##_##name(__VA_ARGS__);
#define EM_BACKEND_PROTOTYPES(P) EM_BACKEND_OPS(EM_BACKEND_PROTOTYPE_, EM_BACKEND_PROTOTYPE_, P)

/* The designated initialisers of a backend's table: .copy = P_copy, ... A required entry
 * the backend does not define is an undefined reference when its library links. Each
 * optional entry takes P_optional_<entry>, a macro the backend's table file defines as its
 * kernel or as EM_BACKEND_DEFAULT; leaving one undefined is a compile error, so every
 * backend decides. */
#define EM_BACKEND_DEFAULT NULL
#define EM_BACKEND_ENTRY_(P, name, ...) .name = P##_##name,
#define EM_BACKEND_OPTIONAL_ENTRY_(P, name, ...) .name = P##_optional_##name,
#define EM_BACKEND_TABLE(P) EM_BACKEND_OPS(EM_BACKEND_ENTRY_, EM_BACKEND_OPTIONAL_ENTRY_, P)

/* What a plugin and libember must agree on about this table (core/plugin_abi.h): checked
 * when a plugin that provides a backend loads. */
#define EM_BACKEND_ABI(X)                                                                            \
  EM_TENSOR_ABI(X)                                                                                   \
  X(EM_BACKEND_API_VERSION) X(sizeof(em_backend)) X(sizeof(em_random_params)) X(sizeof(em_sgd_args)) \
      X(sizeof(em_adam_args)) X(sizeof(em_row_optim_args)) X(sizeof(em_conv2d_params)) X(sizeof(em_pool2d_params)) X(sizeof(em_class_loss_params)) X(sizeof(em_rnn_params)) X(sizeof(em_attn_params))

/* The backend for a device, or NULL with an error naming op when it is not available. */
const em_backend *tn_backend_for(const char *op, em_device device);

#ifdef __cplusplus
}
#endif
#endif
