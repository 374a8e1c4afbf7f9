/* seq_plan.h - the host-side arithmetic of the sequence layers on cuda (attention.cu,
 * rnn.cu), plain C with no CUDA dependency, so that tests/c/test_cuda_seq_plan.c checks it
 * on a machine without a GPU:
 * - the fused attention kernels' tile and shared memory for head dims D, Dv;
 * - where each of cuDNN's linear layers of one RNN layer lies in ember's (PyTorch's)
 *   parameter tensors, which is what rnn.cu copies into and out of cuDNN's weight space. */
#ifndef EMBER_GPU_SEQ_PLAN_H
#define EMBER_GPU_SEQ_PLAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Shared memory of a kernel (backward or forward) in elements for a tile: Q, K, V, the
 * score tile and the accumulator (forward), with dK, dV, dO and dS (backward); rows padded
 * by one element, plus the per-row statistics. */
int64_t em_attn_plan_elems(int backward, int64_t tile, int64_t D, int64_t Dv);

/* The tile: 32 when its shared memory fits the 48 KB every block may have, else 16 when it
 * fits optin (the device's opt-in maximum per block); 0 when neither (the head dims are too
 * large). *smem receives the bytes for the chosen tile. */
int em_attn_plan_tile(int backward, int64_t D, int64_t Dv, size_t elem_size, size_t optin, size_t *smem);

/* Gates per hidden unit of an em_rnn_mode: 1 (RNN), 4 (LSTM), 3 (GRU). */
int em_rnn_plan_gates(int mode);

/* cuDNN's linear layer id (0 .. 2G - 1) of a one-layer network: ids below G are the input
 * side (w_ih, b_ih), the others the recurrent side (w_hh, b_hh); gate g = id % G in the
 * order i, f, g, o (LSTM) or r, z, n (GRU), which PyTorch's layout shares. Offsets and
 * counts are in elements of ember's tensors ([G*H, NI] or [G*H, H], and [G*H]). */
typedef struct em_rnn_param_place {
  int recurrent;
  int64_t w_offset, w_count, b_offset, b_count;
} em_rnn_param_place;

em_rnn_param_place em_rnn_plan_place(int mode, int64_t NI, int64_t H, int id);

#ifdef __cplusplus
}
#endif
#endif
