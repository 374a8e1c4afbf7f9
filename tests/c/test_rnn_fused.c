/* test_rnn_fused.c - the float32 LSTM's fused time loop (cpu/rnn_fused.c) against the
 * general one (rnn_body.h: a GEMM and an OpenMP loop per step), the reference: outputs,
 * states, saved activations and every gradient, over batch sizes that leave partial row
 * tiles, hidden sizes of 1-8 chunks, lengths (packed sequences), reverse, missing output
 * and state gradients, 1 and 2 threads; and under CPU bfloat16 autocast (the recurrent
 * products on AMX where the CPU has it) within bfloat16's rounding of the float32 results. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "test_util.h"
#include "autograd/autocast.h"
#include "cpu/cpu_seq.h"
#include "ember/nn.h"

static uint64_t seed = 777;
static float next_value(void) { /* uniform in [-1, 1) */
  seed = seed * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((seed >> 40) / (double)(1ull << 24)) * 2 - 1;
}

static em_tensor *random_tensor(int nd, const int64_t *sizes, float scale) {
  em_tensor *t = NULL;
  assert_int_equal(em_empty(&t, nd, sizes, EM_FLOAT32, CPU), EM_OK);
  float *p = (float *)em_tensor_ptr(t);
  for (int64_t i = 0; i < em_tensor_numel(t); i++) p[i] = next_value() * scale;
  return t;
}

static em_tensor *empty(int nd, const int64_t *sizes) {
  em_tensor *t = NULL;
  assert_int_equal(em_empty(&t, nd, sizes, EM_FLOAT32, CPU), EM_OK);
  memset(em_tensor_ptr(t), 0, (size_t)em_tensor_numel(t) * sizeof(float));
  return t;
}


enum { Y, SH, SC, ACT, GX, GH0, GC0, GWIH, GWHH, GBIH, GBHH, NOUT };
static const char *const NAMES[NOUT] = {"y", "sh", "sc", "act", "gx", "gh0", "gc0", "gw_ih", "gw_hh", "gb_ih", "gb_hh"};

typedef struct lstm_case {
  int64_t T, B, NI, H;
  int reverse, lengths, with_gy, with_gstate, threads;
} lstm_case;

typedef struct operands {
  em_tensor *x, *h0, *c0, *wih, *whh, *bih, *bhh, *gy, *gs;
  int64_t lengths[64];
} operands;

static operands make_operands(const lstm_case *c) {
  operands o;
  int64_t T = c->T, B = c->B, H = c->H;
  float ws = 1.0f / sqrtf((float)H); /* PyTorch's initialisation range: a recursion that does not blow up */
  o.x = random_tensor(3, (int64_t[]){T, B, c->NI}, 1);
  o.h0 = random_tensor(2, (int64_t[]){B, H}, 1), o.c0 = random_tensor(2, (int64_t[]){B, H}, 1);
  o.wih = random_tensor(2, (int64_t[]){4 * H, c->NI}, ws), o.whh = random_tensor(2, (int64_t[]){4 * H, H}, ws);
  o.bih = random_tensor(1, (int64_t[]){4 * H}, ws), o.bhh = random_tensor(1, (int64_t[]){4 * H}, ws);
  o.gy = c->with_gy ? random_tensor(3, (int64_t[]){T, B, H}, 1) : NULL;
  o.gs = c->with_gstate ? random_tensor(3, (int64_t[]){2, B, H}, 1) : NULL;
  for (int64_t b = 0; b < B && b < 64; b++) o.lengths[b] = (b * 7 + 3) % (T + 1); /* 0..T, unsorted */
  return o;
}

static void release_operands(operands *o) {
  em_tensor *all[] = {o->x, o->h0, o->c0, o->wih, o->whh, o->bih, o->bhh, o->gy, o->gs};
  for (int i = 0; i < 9; i++) em_tensor_release(all[i]);
}

/* forward and backward with the fused loop on (1) or off (0) */
static void run(const lstm_case *c, const operands *o, int fused, em_tensor **r) {
  int64_t T = c->T, B = c->B, H = c->H;
  cpu_rnn_dims d = {.mode = EM_RNN_LSTM,
                    .reverse = c->reverse,
                    .T = T,
                    .B = B,
                    .NI = c->NI,
                    .H = H,
                    .lengths = c->lengths ? o->lengths : NULL};
  r[Y] = empty(3, (int64_t[]){T, B, H});
  r[SH] = empty(3, (int64_t[]){T + 1, B, H}), r[SC] = empty(3, (int64_t[]){T + 1, B, H});
  r[ACT] = empty(3, (int64_t[]){T, B, 4 * H});
  r[GX] = empty(3, (int64_t[]){T, B, c->NI});
  r[GH0] = empty(2, (int64_t[]){B, H}), r[GC0] = empty(2, (int64_t[]){B, H});
  r[GWIH] = empty(2, (int64_t[]){4 * H, c->NI}), r[GWHH] = empty(2, (int64_t[]){4 * H, H});
  r[GBIH] = empty(1, (int64_t[]){4 * H}), r[GBHH] = empty(1, (int64_t[]){4 * H});
  cpu_rnn_fused_force_(fused);
  em_set_num_threads(c->threads);
  assert_int_equal(cpu_rnn_forward(&d, r[Y], r[SH], r[SC], r[ACT], o->x, o->h0, o->c0, o->wih, o->whh, o->bih, o->bhh),
                   EM_OK);
  assert_int_equal(cpu_rnn_backward(&d, r[GX], r[GH0], r[GC0], r[GWIH], r[GWHH], r[GBIH], r[GBHH], o->gy, o->gs, o->x,
                                    o->wih, o->whh, r[SH], r[SC], r[ACT]),
                   EM_OK);
  cpu_rnn_fused_force_(-1);
}

static const lstm_case CASES[] = {
    /* char-rnn's layer (2 chunks per thread, 50 rows: 8 full tiles of 6 and one of 2) */
    {8, 50, 64, 128, 0, 0, 1, 1, 2},
    {8, 50, 64, 128, 0, 0, 1, 1, 1},
    /* packed sequences, reverse, no output gradient, no state gradient */
    {7, 13, 5, 48, 0, 1, 1, 1, 2},
    {7, 13, 5, 48, 1, 1, 1, 0, 2},
    {5, 9, 3, 32, 1, 0, 0, 1, 2},
    {6, 40, 17, 96, 1, 1, 0, 0, 1},
    /* one chunk: a one-thread team; more threads than chunks */
    {4, 3, 2, 16, 0, 1, 1, 1, 2},
    {3, 64, 33, 256, 0, 0, 1, 0, 2},
};

static void fused_matches_general_float32(void **state) {
  (void)state;
  int threads_before = em_get_num_threads();
  for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
    const lstm_case *c = &CASES[k];
    cpu_rnn_fused_force_(1); /* as run() has it: the small cases too */
    assert_true(
        cpu_lstm_fused_wanted(&(cpu_rnn_dims){.mode = EM_RNN_LSTM, .T = c->T, .B = c->B, .NI = c->NI, .H = c->H}));
    cpu_rnn_fused_force_(-1);
    operands o = make_operands(c);
    em_tensor *ref[NOUT], *got[NOUT];
    run(c, &o, 0, ref);
    run(c, &o, 1, got);
    for (int i = 0; i < NOUT; i++) {
      double e = rel_diff(got[i], ref[i]);
      /* the same arithmetic in another order (and the cell's reciprocal and exp) */
      if (!(e < 2e-5))
        fail_msg("case %zu (T %lld B %lld H %lld reverse %d lengths %d, %d threads): %s differs by %g (relative)", k,
                 (long long)c->T, (long long)c->B, (long long)c->H, c->reverse, c->lengths, c->threads, NAMES[i], e);
    }
    for (int i = 0; i < NOUT; i++) em_tensor_release(ref[i]), em_tensor_release(got[i]);
    release_operands(&o);
  }
  em_set_num_threads(threads_before);
}

/* Under bfloat16 autocast: the fused loop (recurrent products on AMX where there is one)
 * against the general loop in float32; bfloat16 keeps 8 bits, and the gradients sum T*B
 * rounded products. Outputs past a sequence's end stay exactly zero. */
static void fused_bfloat16_within_rounding(void **state) {
  (void)state;
  int threads_before = em_get_num_threads();
  const lstm_case cases[] = {{8, 50, 64, 128, 0, 0, 1, 1, 2},
                             {7, 13, 5, 64, 1, 1, 1, 1, 2},
                             {6, 40, 17, 96, 0, 1, 0, 1, 1},
                             {5, 33, 8, 48, 0, 0, 1, 0, 2},
                             /* 16 M multiply-adds a step: the AMX loops split over 2 threads */
                             {3, 64, 16, 256, 0, 1, 1, 1, 2},
                             {3, 64, 16, 256, 1, 0, 1, 0, 2}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    const lstm_case *c = &cases[k];
    operands o = make_operands(c);
    em_tensor *ref[NOUT], *got[NOUT];
    run(c, &o, 0, ref);
    int64_t before = cpu_rnn_amx_runs_();
    ag_autocast_force_(EM_CPU, 1, EM_BFLOAT16);
    run(c, &o, 1, got);
    ag_autocast_force_(EM_CPU, 0, EM_FLOAT32);
    /* where the CPU has AMX, the forward and the backward both ran on it (H % 32 == 0) */
    if (cpu_rnn_amx_available_() && c->H % 32 == 0) assert_int_equal(cpu_rnn_amx_runs_(), before + 2);
    for (int i = 0; i < NOUT; i++) {
      double e = rel_diff(got[i], ref[i]);
      if (!(e < 3e-2)) fail_msg("bfloat16 case %zu: %s differs by %g (relative)", k, NAMES[i], e);
    }
    if (c->lengths) {
      const float *y = (const float *)em_tensor_ptr(got[Y]);
      for (int64_t t = 0; t < c->T; t++)
        for (int64_t b = 0; b < c->B; b++)
          if (t >= o.lengths[b])
            for (int64_t j = 0; j < c->H; j++) assert_true(y[(t * c->B + b) * c->H + j] == 0.0f);
    }
    for (int i = 0; i < NOUT; i++) em_tensor_release(ref[i]), em_tensor_release(got[i]);
    release_operands(&o);
  }
  em_set_num_threads(threads_before);
}

/* where the fused loop is taken: float32 LSTM, hidden size a multiple of 16, 32 rows over
 * all steps at least, not forced off */
static void wanted_only_where_it_applies(void **state) {
  (void)state;
  cpu_rnn_dims d = {.mode = EM_RNN_LSTM, .T = 2, .B = 16, .NI = 3, .H = 32};
  assert_true(cpu_lstm_fused_wanted(&d));
  d.B = 8;
  assert_false(cpu_lstm_fused_wanted(&d)); /* 16 rows */
  cpu_rnn_fused_force_(1);
  assert_true(cpu_lstm_fused_wanted(&d));
  cpu_rnn_fused_force_(-1);
  d.B = 16;
  d.H = 24;
  assert_false(cpu_lstm_fused_wanted(&d));
  d.H = 32, d.mode = EM_RNN_GRU;
  assert_false(cpu_lstm_fused_wanted(&d));
  d.mode = EM_RNN_LSTM;
  cpu_rnn_fused_force_(0);
  assert_false(cpu_lstm_fused_wanted(&d));
  cpu_rnn_fused_force_(-1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(fused_matches_general_float32),
      cmocka_unit_test(fused_bfloat16_within_rounding),
      cmocka_unit_test(wanted_only_where_it_applies),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
