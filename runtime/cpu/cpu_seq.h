/* cpu_seq.h - the CPU kernels of the sequence layers (runtime/nn/rnn.c, attention.c):
 * recurrent layers (rnn.c, one body per dtype in rnn_body.h) and fused attention
 * (attention.c, one body per dtype in attention_body.h).
 *
 * They take operands of one float dtype that the nn layer has checked and allocated
 * (contiguous, but for attention's strided layouts below), like the backend table's nn
 * entries. Attention's two are the CPU's entries of
 * the table (attention, attention_backward); the recurrent kernels are called directly on
 * the CPU (what they keep for the backward differs from a device's: runtime/nn/rnn.c). */
#ifndef EMBER_CPU_SEQ_H
#define EMBER_CPU_SEQ_H

#include "cpu_impl.h"

/* ---- recurrent layers ----
 * mode: em_rnn_mode (ember/nn.h). G gates per hidden unit: 1 (RNN), 4 (LSTM: i, f, g, o),
 * 3 (GRU: r, z, n). Time-major: x [T, B, I], y [T, B, H].
 * States: sh (and sc for LSTM) [T + 1, B, H], the state before and after every step: slot
 * t is before step t and slot t + 1 after it, or, walking in reverse, slot t + 1 before
 * and slot t after; the initial state sits in the first slot walked from (0, or T).
 * act [T, B, W] keeps what the backward needs of each step: the gates after their
 * nonlinearity (W = G * H), for the GRU also W_hn h + b_hn (W = 4H: r, z, n, hn); for the
 * plain RNN the new state itself (W = H).
 * lengths (NULL: all T): a step t >= lengths[b] leaves sequence b's state as it was and
 * writes zeros to its output, so the final state is the one after its last valid step. */
typedef em_rnn_params cpu_rnn_dims; /* tensor/backend.h */

/* Gates per unit and saved activations per row for a mode. */
int cpu_rnn_gates(int mode);
int64_t cpu_rnn_act_width(int mode, int64_t H);

/* Fills y, sh, sc (LSTM; else NULL) and act. h0, c0 [B, H] may be NULL (zeros); b_ih,
 * b_hh [G * H] may be NULL. */
em_status cpu_rnn_forward(const cpu_rnn_dims *d, em_tensor *y, em_tensor *sh, em_tensor *sc, em_tensor *act,
                          const em_tensor *x, const em_tensor *h0, const em_tensor *c0, const em_tensor *w_ih,
                          const em_tensor *w_hh, const em_tensor *b_ih, const em_tensor *b_hh);
/* Gradients (each may be NULL: not wanted) from gy [T, B, H] and gstate [S, B, H] (either
 * may be NULL: zero) and what the forward kept. gb_ih/gb_hh are written only when given. */
em_status cpu_rnn_backward(const cpu_rnn_dims *d, em_tensor *gx, em_tensor *gh0, em_tensor *gc0, em_tensor *gw_ih,
                           em_tensor *gw_hh, em_tensor *gb_ih, em_tensor *gb_hh, const em_tensor *gy,
                           const em_tensor *gstate, const em_tensor *x, const em_tensor *w_ih, const em_tensor *w_hh,
                           const em_tensor *sh, const em_tensor *sc, const em_tensor *act);

/* The float32 LSTM's time loop as one parallel region, the threads splitting the batch
 * rows (rnn_fused.c): wanted for H a multiple of 16 and T * B >= 32 unless forced. The forward runs
 * the steps once act holds the input projection (x @ w_ih^T) and the first state slots
 * are set; the backward fills the gate gradients dg [T*B, 4H] and carries dh, dc [B, H]
 * (in: the final states' gradients; out: the initial states'). gy may be NULL. bf16
 * (CPU autocast to bfloat16): the recurrent products in bfloat16 on AMX, where the CPU
 * has it and H is a multiple of 32 (float32 sums; the cell stays float32); the backward
 * then also hands back dg in bfloat16 (*dg16, malloc'd, [T*B, 4H]; else NULL) for the
 * products over all steps, and dg itself only when need32; bsum [4H] gets dg's column
 * sums (the biases' gradient), made in the loop. Both return nonzero, having done nothing, when out of memory. */
int cpu_lstm_fused_wanted(const cpu_rnn_dims *d);
int cpu_lstm_fused_forward(const cpu_rnn_dims *d, float *y, float *sh, float *sc, float *act, const float *whh,
                           const float *bih, const float *bhh, int bf16);
int cpu_lstm_fused_backward(const cpu_rnn_dims *d, float *dg, float *dh, float *dc, const float *gy, const float *whh,
                            const float *sc, const float *act, int bf16, uint16_t **dg16, double *bsum, int need32);
/* tests: 0 the general loop always, 1 the fused one where it applies, -1 the default;
 * whether the bfloat16 loops can run on AMX here, and how many have */
void cpu_rnn_fused_force_(int mode);
int cpu_rnn_amx_available_(void);
int64_t cpu_rnn_amx_runs_(void);

/* ---- fused attention ----
 * q [BH, Tq, D], k [BH, Tk, D], v [BH, Tk, Dv], out [BH, Tq, Dv] (laid out as the params'
 * row_stride and bh_offset say: contiguous by default), lse [BH, Tq] (each row's
 * logsumexp of its scaled, masked scores; -inf for a row with nothing to attend to, whose
 * output is zero). The mask, when given, is read through mask_ptr with element strides
 * (batch via mask_bh_offset[bh], rows, columns): bool (1 = attend) or the q dtype (added
 * to the scores). causal: query i sees keys j <= i (PyTorch's top-left alignment). Dropout on the probabilities with p > 0 keeps element
 * (bh, i, j) when word e % 4 of Philox block offset + e / 4, e = (bh * Tq + i) * Tk + j,
 * is at least p * 2^32; the backward regenerates the same mask. */
typedef em_attn_params cpu_attn_args; /* tensor/backend.h; the CPU reads mask_bh_offset */

em_status cpu_attention_forward(const cpu_attn_args *a, em_tensor *out, em_tensor *lse, const em_tensor *q,
                                const em_tensor *k, const em_tensor *v);
/* gq, gk, gv (each may be NULL) from gout and what the forward kept (out, lse). */
em_status cpu_attention_backward(const cpu_attn_args *a, em_tensor *gq, em_tensor *gk, em_tensor *gv,
                                 const em_tensor *gout, const em_tensor *q, const em_tensor *k, const em_tensor *v,
                                 const em_tensor *out, const em_tensor *lse);

#endif
