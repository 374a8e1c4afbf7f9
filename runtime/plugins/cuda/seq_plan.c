/* seq_plan.c - see seq_plan.h. */
#include "seq_plan.h"
#include "ember/nn.h"

int64_t em_attn_plan_elems(int backward, int64_t tile, int64_t D, int64_t Dv) {
  if (backward) /* K, dK, Q; V, dV, dO; P, dS; lse, Drow */
    return tile * (D + 1) * 3 + tile * (Dv + 1) * 3 + 2 * tile * (tile + 1) + 2 * tile;
  /* Q, K; V, O; S; m, l, alpha */
  return tile * (D + 1) * 2 + tile * (Dv + 1) * 2 + tile * (tile + 1) + 3 * tile;
}

int em_attn_plan_tile(int backward, int64_t D, int64_t Dv, size_t elem_size, size_t optin, size_t *smem) {
  const size_t base = 48 * 1024;
  for (int tile = 32; tile >= 16; tile /= 2) {
    size_t bytes = (size_t)em_attn_plan_elems(backward, tile, D, Dv) * elem_size;
    if (bytes <= base || (tile == 16 && bytes <= optin)) {
      *smem = bytes;
      return tile;
    }
  }
  *smem = 0;
  return 0;
}

int em_rnn_plan_gates(int mode) { return mode == EM_RNN_LSTM ? 4 : mode == EM_RNN_GRU ? 3 : 1; }

em_rnn_param_place em_rnn_plan_place(int mode, int64_t NI, int64_t H, int id) {
  int G = em_rnn_plan_gates(mode), g = id % G;
  em_rnn_param_place p;
  p.recurrent = id >= G;
  int64_t cols = p.recurrent ? H : NI;
  p.w_count = H * cols;
  p.w_offset = g * p.w_count;
  p.b_count = H;
  p.b_offset = g * H;
  return p;
}
