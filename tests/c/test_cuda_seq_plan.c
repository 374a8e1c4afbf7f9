/* test_cuda_seq_plan.c - the host-side arithmetic of the sequence layers on cuda
 * (runtime/plugins/cuda/seq_plan.c), checked on the CPU: the attention kernels' tile and
 * shared memory against a count of the arrays the kernels carve out of it, and the places
 * of cuDNN's linear layers in ember's RNN parameters, which must cover every element of
 * w_ih, w_hh, b_ih and b_hh exactly once, gate by gate in PyTorch's order. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "test_util.h"
#include "ember/nn.h"
/* plain C, no CUDA: the library ember_cuda_plans, linked into this test as into the plugin */
#include "plugins/cuda/seq_plan.h"

/* The arrays each kernel of attention.cu keeps in shared memory, counted one by one. */
static int64_t count_arrays(int backward, int64_t t, int64_t D, int64_t Dv) {
  int64_t qrow = t * (D + 1), vrow = t * (Dv + 1), tile = t * (t + 1);
  if (backward) return qrow /* K */ + vrow /* V */ + qrow /* dK */ + vrow /* dV */ + qrow /* Q */ + vrow /* dO */ +
                       tile /* P */ + tile /* dS */ + t /* lse */ + t /* Drow */;
  return qrow /* Q */ + qrow /* K */ + vrow /* V */ + tile /* S */ + vrow /* O */ + 3 * t /* m, l, alpha */;
}

static void test_attention_tiles(void **state) {
  (void)state;
  const size_t optin = 227 * 1024; /* an H100/H200's opt-in maximum */
  int64_t dims[][2] = {{8, 8}, {16, 8}, {64, 64}, {128, 128}, {128, 96}, {256, 256}};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
    for (int bw = 0; bw < 2; bw++)
      for (size_t es = 4; es <= 8; es += 4) {
        int64_t D = dims[i][0], Dv = dims[i][1];
        size_t smem = 0;
        int tile = em_attn_plan_tile(bw, D, Dv, es, optin, &smem);
        assert_int_equal(em_attn_plan_elems(bw, 32, D, Dv), count_arrays(bw, 32, D, Dv));
        assert_int_equal(em_attn_plan_elems(bw, 16, D, Dv), count_arrays(bw, 16, D, Dv));
        size_t at32 = (size_t)count_arrays(bw, 32, D, Dv) * es, at16 = (size_t)count_arrays(bw, 16, D, Dv) * es;
        if (at32 <= 48 * 1024) { /* the larger tile whenever it fits without opting in */
          assert_int_equal(tile, 32);
          assert_int_equal(smem, at32);
        } else if (at16 <= optin) {
          assert_int_equal(tile, 16);
          assert_int_equal(smem, at16);
        } else {
          assert_int_equal(tile, 0);
        }
      }
  size_t smem = 1;
  /* small heads take 32 in float32; the float32 backward at D = 64 needs the smaller tile */
  assert_int_equal(em_attn_plan_tile(0, 64, 64, 4, optin, &smem), 32);
  assert_int_equal(em_attn_plan_tile(1, 64, 64, 4, optin, &smem), 16);
  /* without opting in (optin 0), the small tile still fits 48 KB for moderate heads */
  assert_int_equal(em_attn_plan_tile(1, 96, 96, 4, 0, &smem), 16);
  assert_true(smem <= 48 * 1024);
  assert_int_equal(em_attn_plan_tile(1, 128, 128, 4, 0, &smem), 0); /* 16 needs 50.6 KB: opting in */
  /* heads too large for any tile are refused (0), with no shared memory claimed */
  assert_int_equal(em_attn_plan_tile(1, 4096, 4096, 8, optin, &smem), 0);
  assert_int_equal(smem, 0);
}

static void test_rnn_places(void **state) {
  (void)state;
  int modes[] = {EM_RNN_TANH, EM_RNN_RELU, EM_RNN_LSTM, EM_RNN_GRU}, gates[] = {1, 1, 4, 3};
  const int64_t NI = 5, H = 3;
  for (int m = 0; m < 4; m++) {
    int G = em_rnn_plan_gates(modes[m]);
    assert_int_equal(G, gates[m]);
    /* how often each element of w_ih [G*H, NI], w_hh [G*H, H], b_ih, b_hh [G*H] is named */
    int *wi = calloc((size_t)(G * H * NI), sizeof(int)), *wh = calloc((size_t)(G * H * H), sizeof(int));
    int *bi = calloc((size_t)(G * H), sizeof(int)), *bh = calloc((size_t)(G * H), sizeof(int));
    for (int id = 0; id < 2 * G; id++) {
      em_rnn_param_place p = em_rnn_plan_place(modes[m], NI, H, id);
      assert_int_equal(p.recurrent, id >= G);
      assert_int_equal(p.w_count, H * (p.recurrent ? H : NI));
      assert_int_equal(p.b_count, H);
      /* gate id % G holds rows [g*H, (g+1)*H) of PyTorch's matrix: i, f, g, o / r, z, n */
      assert_int_equal(p.w_offset, (id % G) * p.w_count);
      assert_int_equal(p.b_offset, (id % G) * H);
      int *w = p.recurrent ? wh : wi, *b = p.recurrent ? bh : bi;
      for (int64_t e = 0; e < p.w_count; e++) w[p.w_offset + e]++;
      for (int64_t e = 0; e < p.b_count; e++) b[p.b_offset + e]++;
    }
    for (int64_t e = 0; e < G * H * NI; e++) assert_int_equal(wi[e], 1);
    for (int64_t e = 0; e < G * H * H; e++) assert_int_equal(wh[e], 1);
    for (int64_t e = 0; e < G * H; e++) assert_int_equal(bi[e], 1), assert_int_equal(bh[e], 1);
    free(wi), free(wh), free(bi), free(bh);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_attention_tiles),
      cmocka_unit_test(test_rnn_places),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
