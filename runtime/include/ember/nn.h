/* ember/nn.h - neural-network operations: stateless, differentiable functions in the
 * manner of THNN (the stateful parts, weights and buffers, live in Lua modules).
 *
 * Each op computes its result through the device backend and, when grad mode is on and an
 * input requires grad, records its backward on the autograd tape (see autograd.h). Results
 * are always newly allocated (*out must be NULL). Layouts follow PyTorch: images are NCHW,
 * conv weights [C_out, C_in / groups, kH, kW], linear weights [out_features, in_features].
 * Class targets and embedding indices count from `base` (0 from C, 1 from Lua). */
#ifndef EMBER_NN_H
#define EMBER_NN_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* EM_FFI_BEGIN */
typedef enum em_reduction { EM_REDUCTION_NONE = 0, EM_REDUCTION_MEAN, EM_REDUCTION_SUM } em_reduction;
typedef enum em_bag_mode { EM_BAG_SUM = 0, EM_BAG_MEAN, EM_BAG_MAX } em_bag_mode;

/* y = x @ w^T + b; x [..., in], w [out, in], b [out] or NULL */
EM_API em_status em_nn_linear(em_tensor **out, const em_tensor *x, const em_tensor *w, const em_tensor *b);
/* y = relu(x @ w^T + b), one op (nn.Sequential runs a Linear and the ReLU after it so): on
 * the CPU in float32 one oneDNN matmul with the bias and the ReLU fused where oneDNN is
 * faster for the size; its backward keeps the gradient where y > 0, then runs linear's */
EM_API em_status em_nn_linear_relu(em_tensor **out, const em_tensor *x, const em_tensor *w, const em_tensor *b);

/* x [N, C, H, W] (or [C, H, W]), w [C_out, C / groups, kH, kW], b [C_out] or NULL */
EM_API em_status em_nn_conv2d(em_tensor **out, const em_tensor *x, const em_tensor *w, const em_tensor *b, int stride_h,
                              int stride_w, int pad_h, int pad_w, int dilation_h, int dilation_w, int groups);
EM_API em_status em_nn_max_pool2d(em_tensor **out, const em_tensor *x, int kernel_h, int kernel_w, int stride_h,
                                  int stride_w, int pad_h, int pad_w, int dilation_h, int dilation_w, int ceil_mode);
EM_API em_status em_nn_avg_pool2d(em_tensor **out, const em_tensor *x, int kernel_h, int kernel_w, int stride_h,
                                  int stride_w, int pad_h, int pad_w, int ceil_mode, int count_include_pad);
EM_API em_status em_nn_adaptive_avg_pool2d(em_tensor **out, const em_tensor *x, int64_t out_h, int64_t out_w);

/* Batch norm over dim 1 of [N, C], [N, C, L] or [N, C, H, W]. In training, batch statistics
 * normalise and running_mean/running_var (may be NULL) are updated in place with momentum
 * (unbiased variance, as PyTorch); in evaluation the running statistics normalise. */
EM_API em_status em_nn_batch_norm(em_tensor **out, const em_tensor *x, const em_tensor *weight, const em_tensor *bias,
                                  em_tensor *running_mean, em_tensor *running_var, int training, double momentum,
                                  double eps);
/* Normalises over the last n_dims dims; weight and bias (may be NULL) have those dims' shape. */
EM_API em_status em_nn_layer_norm(em_tensor **out, const em_tensor *x, int n_dims, const em_tensor *weight,
                                  const em_tensor *bias, double eps);
/* Zeroes elements with probability p and scales the rest by 1/(1-p) (Philox stream: the
 * same seed gives the same mask whatever the thread count). Outside training, or with
 * p = 0, *out is x itself (a new reference), as PyTorch returns its input. */
EM_API em_status em_nn_dropout(em_tensor **out, const em_tensor *x, double p, int training);

/* weight [num, dim]; indices of any shape -> [..., dim]. padding_idx (counted from base)
 * rows get no gradient; pass a negative value for none. */
EM_API em_status em_nn_embedding(em_tensor **out, const em_tensor *weight, const em_tensor *indices,
                                 int64_t padding_idx, int base);
/* Bags of rows: indices 1-d with offsets [B] (start of each bag, counted from 0 in any
 * base), or indices 2-d [B, L] with offsets NULL. per_sample_weights (may be NULL) only
 * with EM_BAG_SUM. Empty bags give zeros. */
EM_API em_status em_nn_embedding_bag(em_tensor **out, const em_tensor *weight, const em_tensor *indices,
                                     const em_tensor *offsets, em_bag_mode mode, const em_tensor *per_sample_weights,
                                     int base);

/* The same with PyTorch's further options. sparse != 0: the weight's gradient is row-sparse
 * (ember/sparse.h; CPU only). Bags: padding_idx (from base; negative for none) entries are
 * left out of their bag (no value, no count in a mean, no gradient); include_last_offset:
 * offsets hold B + 1 entries, the last one ending the last bag (indices after it unused).
 * max_norm is a separate in-place step before the lookup, as in PyTorch:
 * em_nn_embedding_renorm_ scales each distinct row looked up whose norm_type-norm exceeds
 * max_norm to max_norm / (norm + 1e-7) of it (outside autograd; contiguous CPU weights). */
EM_API em_status em_nn_embedding_ex(em_tensor **out, const em_tensor *weight, const em_tensor *indices,
                                    int64_t padding_idx, int sparse, int base);
EM_API em_status em_nn_embedding_bag_ex(em_tensor **out, const em_tensor *weight, const em_tensor *indices,
                                        const em_tensor *offsets, em_bag_mode mode,
                                        const em_tensor *per_sample_weights, int64_t padding_idx,
                                        int include_last_offset, int sparse, int base);
/* Table-batched embedding bags (FBGEMM's layout): n tables one after another in weight
 * [sum of rows, D] (table t's row r at row rows[0] + ... + rows[t-1] + r); per table,
 * indices[t] with offsets[t] (bag starts) or, offsets NULL or offsets[t] NULL, 2-d [B, L];
 * every table has B bags. -> out [n * B, D], table after table; one lookup, one graph node,
 * one row-sparse gradient when sparse. Indices and offsets count from base; each index is
 * checked against its own table's rows. CPU only. */
EM_API em_status em_nn_embedding_bags_batched(em_tensor **out, const em_tensor *weight, int n,
                                              em_tensor *const *indices, em_tensor *const *offsets,
                                              const int64_t *rows, em_bag_mode mode, int sparse, int base);
EM_API em_status em_nn_embedding_renorm_(em_tensor *weight, const em_tensor *indices, double max_norm,
                                         double norm_type, int base);
/* DLRM's dot interaction: features, n >= 1 tensors [B, D] (the bottom MLP's output first,
 * then the pooled embeddings) -> [B, D + P]: features[0], then the dot products of each
 * pair (i, j) with j < i (j <= i when self_interaction), i ascending then j, as
 * dlrm_s_pytorch.py's interact_features ('dot'). Differentiable; CPU only. */
EM_API em_status em_nn_dot_interaction(em_tensor **out, em_tensor *const *features, int n, int self_interaction);

/* logits [N, C] (or [N, C, d...]), target class indices [N] (int64, from base) or class
 * probabilities of the logits' shape. weight [C] or NULL. ignore_index is compared with
 * the target values as stored (so -100 means "none" from any base); probability targets
 * take no ignore_index (pass a value below base). */
EM_API em_status em_nn_cross_entropy(em_tensor **out, const em_tensor *logits, const em_tensor *target,
                                     const em_tensor *weight, int64_t ignore_index, double label_smoothing,
                                     em_reduction reduction, int base);
EM_API em_status em_nn_nll_loss(em_tensor **out, const em_tensor *log_probs, const em_tensor *target,
                                const em_tensor *weight, int64_t ignore_index, em_reduction reduction, int base);
EM_API em_status em_nn_mse_loss(em_tensor **out, const em_tensor *input, const em_tensor *target,
                                em_reduction reduction);
EM_API em_status em_nn_binary_cross_entropy_with_logits(em_tensor **out, const em_tensor *logits,
                                                        const em_tensor *target, const em_tensor *weight,
                                                        const em_tensor *pos_weight, em_reduction reduction);
/* *count = the rows of logits [N, C] whose largest value is at class target[i] (int32/
 * int64 [N], from base): argmax's choice (the first largest; NaN above any number). A
 * target outside base..base+C-1 is an EM_ERR_INDEX that shows its value. */
EM_API em_status em_nn_count_correct(int64_t *count, const em_tensor *logits, const em_tensor *target, int base);
/* ---- sequence layers (runtime/nn/rnn.c, attention.c) ---- */
typedef enum em_rnn_mode { EM_RNN_TANH = 0, EM_RNN_RELU, EM_RNN_LSTM, EM_RNN_GRU } em_rnn_mode;
/* One recurrent layer in one direction over a whole sequence, recorded as one node.
 * x [T, B, I] (time-major); w_ih [G*H, I], w_hh [G*H, H], b_ih and b_hh [G*H] (or NULL),
 * PyTorch's layout: G = 1 (RNN), 4 (LSTM, gates i, f, g, o), 3 (GRU, gates r, z, n with
 * n = tanh(W_in x + b_in + r * (W_hn h + b_hn))). h0 [B, H] and, for the LSTM only, c0
 * [B, H] may be NULL (zeros). lengths (NULL, or int32/int64 [B] on the CPU, each in 0..T):
 * a sequence's steps at and past its length output zeros and leave its state as it was,
 * so its final state is the one after its last valid step (PyTorch's packed sequences).
 * reverse walks time from T - 1 down to 0 (a bidirectional layer's second direction).
 * float32/float64 on the CPU, and on a device whose backend has the layer (cuda: cuDNN's
 * RNN, where a length of 0 is refused).
 * Results: *out [T, B, H] and *state [S, B, H], the final h (and c for the LSTM, S = 2). */
EM_API em_status em_nn_rnn(em_tensor **out, em_tensor **state, em_rnn_mode mode, const em_tensor *x,
                           const em_tensor *h0, const em_tensor *c0, const em_tensor *w_ih, const em_tensor *w_hh,
                           const em_tensor *b_ih, const em_tensor *b_hh, const em_tensor *lengths, int reverse);
/* softmax(q k^T * scale + mask) v, fused: tiled with an online softmax, so no [Tq, Tk]
 * matrix is made; each row's logsumexp is kept for the backward, which recomputes the
 * tiles. q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] with the same leading dims (at
 * least one); *out [..., Tq, Dv]. mask (NULL: none) broadcasts to [..., Tq, Tk]: bool
 * (true = may attend) or q's dtype (added to the scores). causal: query i attends to keys
 * j <= i (the mask and causal may be combined). dropout_p on the attention probabilities
 * (Philox, as em_nn_dropout). scale <= 0 means 1/sqrt(D). A query row that may attend to
 * no key gets zeros. float32/float64, on the CPU and cuda (the same Philox dropout mask). */
EM_API em_status em_nn_scaled_dot_product_attention(em_tensor **out, const em_tensor *q, const em_tensor *k,
                                                    const em_tensor *v, const em_tensor *mask, int causal,
                                                    double dropout_p, double scale);
/* EM_FFI_END */

#ifdef __cplusplus
}
#endif
#endif
