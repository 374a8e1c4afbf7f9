/* test_dnnl.c - oneDNN's convolution and matrix products (cpu/dnnl.c) against ember's own
 * im2col + OpenBLAS path, the reference: the forward and every gradient, float32, over
 * shapes with stride, padding, dilation, groups, 1x1 and unpadded kernels; bfloat16 against
 * the reference run on operands rounded to bfloat16 (products of bfloat16 values are exact
 * in float32, so only the order of the sums differs). Skipped where oneDNN is not built in. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "test_util.h"
#include "cpu/cpu_dnnl.h"
#include "cpu/cpu_impl.h"
#include "cpu/cpu_seq.h"
#include "autograd/autocast.h"
#include "ember/autograd.h"
#include "ember/nn.h"

static uint64_t seed = 12345;
static float next_value(void) { /* uniform in [-1, 1) */
  seed = seed * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((seed >> 40) / (double)(1ull << 24)) * 2 - 1;
}

static em_tensor *random_tensor(int nd, const int64_t *sizes) {
  em_tensor *t = NULL;
  assert_int_equal(em_empty(&t, nd, sizes, EM_FLOAT32, CPU), EM_OK);
  float *p = (float *)em_tensor_ptr(t);
  for (int64_t i = 0; i < em_tensor_numel(t); i++) p[i] = next_value();
  return t;
}

static em_tensor *empty_like(const em_tensor *like) {
  em_tensor *t = NULL;
  assert_int_equal(em_empty_like(&t, like), EM_OK);
  return t;
}

static void round_to_bf16(em_tensor *t) {
  float *p = (float *)em_tensor_ptr(t);
  for (int64_t i = 0; i < em_tensor_numel(t); i++) p[i] = em_bf16_to_float(em_float_to_bf16(p[i]));
}


typedef struct conv_case {
  const char *name;
  int64_t N, C, H, W, Co, kh, kw;
  int sh, sw, ph, pw, dh, dw, groups, bias;
} conv_case;

static const conv_case CASES[] = {
    {"fashion-mnist conv1", 8, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
    {"fashion-mnist conv2", 8, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
    {"stride 2, uneven padding", 3, 8, 11, 9, 16, 3, 2, 2, 2, 1, 0, 1, 1, 1, 1},
    {"dilation 2", 2, 8, 12, 10, 8, 3, 3, 1, 1, 2, 2, 2, 2, 1, 0},
    {"groups 4", 2, 16, 9, 9, 32, 3, 3, 1, 1, 1, 1, 1, 1, 4, 1},
    {"depthwise", 2, 16, 8, 8, 16, 3, 3, 2, 1, 1, 1, 1, 1, 16, 1},
    {"1x1", 4, 16, 7, 7, 24, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1},
    {"5x5 no padding, stride 3", 2, 4, 17, 16, 8, 5, 5, 3, 3, 0, 0, 1, 1, 1, 0},
};

typedef struct conv_run {
  em_tensor *y, *gx, *gw, *gb;
} conv_run;

static conv_run run_conv(const conv_case *c, const em_tensor *x, const em_tensor *w, const em_tensor *b,
                         const em_tensor *gy) {
  em_conv2d_params p = {{c->sh, c->sw}, {c->ph, c->pw}, {c->dh, c->dw}, c->groups};
  conv_run r = {empty_like(gy), empty_like(x), empty_like(w), b ? empty_like(b) : NULL};
  assert_int_equal(cpu_conv2d(r.y, x, w, b, &p), EM_OK);
  assert_int_equal(cpu_conv2d_backward(r.gx, r.gw, r.gb, gy, x, w, &p), EM_OK);
  return r;
}

static void release_run(conv_run r) {
  em_tensor_release(r.y);
  em_tensor_release(r.gx);
  em_tensor_release(r.gw);
  em_tensor_release(r.gb);
}

static void make_operands(const conv_case *c, em_tensor **x, em_tensor **w, em_tensor **b, em_tensor **gy) {
  int64_t OH = (c->H + 2 * c->ph - c->dh * (c->kh - 1) - 1) / c->sh + 1;
  int64_t OW = (c->W + 2 * c->pw - c->dw * (c->kw - 1) - 1) / c->sw + 1;
  *x = random_tensor(4, (int64_t[]){c->N, c->C, c->H, c->W});
  *w = random_tensor(4, (int64_t[]){c->Co, c->C / c->groups, c->kh, c->kw});
  *b = c->bias ? random_tensor(1, (int64_t[]){c->Co}) : NULL;
  *gy = random_tensor(4, (int64_t[]){c->N, c->Co, OH, OW});
}

static void check_run(const char *what, const conv_case *c, conv_run got, conv_run want, double tol) {
  double d[4] = {rel_diff(got.y, want.y), rel_diff(got.gx, want.gx), rel_diff(got.gw, want.gw),
                 want.gb ? rel_diff(got.gb, want.gb) : 0};
  const char *names[4] = {"output", "input grad", "weight grad", "bias grad"};
  for (int i = 0; i < 4; i++) {
    if (d[i] > tol)
      fprintf(stderr, "%s, %s: %s differs by %.3g (relative; tolerance %.3g)\n", what, c->name, names[i], d[i], tol);
    assert_true(d[i] <= tol);
  }
}

static void conv_float32_matches(void **state) {
  for (size_t k = 0; k < sizeof CASES / sizeof *CASES; k++) {
    const conv_case *c = &CASES[k];
    em_tensor *x, *w, *b, *gy;
    make_operands(c, &x, &w, &b, &gy);
    cpu_dnnl_force_(0);
    int64_t before = cpu_dnnl_runs_();
    conv_run want = run_conv(c, x, w, b, gy);
    assert_int_equal(cpu_dnnl_runs_(), before); /* the reference did not use oneDNN */
    cpu_dnnl_force_(1);
    conv_run got = run_conv(c, x, w, b, gy);
    assert_int_equal(cpu_dnnl_runs_(), before + 3); /* forward, backward data, backward weights */
    check_run("float32", c, got, want, 1e-5);
    release_run(want);
    release_run(got);
    em_tensor *all[] = {x, w, b, gy};
    for (int i = 0; i < 4; i++) em_tensor_release(all[i]);
  }
  cpu_dnnl_force_(-1);
}

static void conv_bfloat16_matches_rounded_operands(void **state) {
  for (size_t k = 0; k < sizeof CASES / sizeof *CASES; k++) {
    const conv_case *c = &CASES[k];
    em_tensor *x, *w, *b, *gy;
    make_operands(c, &x, &w, &b, &gy);
    em_conv2d_params p = {{c->sh, c->sw}, {c->ph, c->pw}, {c->dh, c->dw}, c->groups};
    cpu_conv_shape s = {c->N,         c->C,  c->H,  c->W,  c->Co, c->kh, c->kw, gy->sizes[2],
                        gy->sizes[3], c->sh, c->sw, c->ph, c->pw, c->dh, c->dw, c->groups};
    cpu_dnnl_force_(1);
    conv_run got = {empty_like(gy), empty_like(x), empty_like(w), b ? empty_like(b) : NULL};
    assert_int_equal(cpu_dnnl_conv2d((float *)em_tensor_ptr(got.y), (float *)em_tensor_ptr(x),
                                     (float *)em_tensor_ptr(w), b ? (float *)em_tensor_ptr(b) : NULL, &s, 1),
                     0);
    assert_int_equal(cpu_dnnl_conv2d_backward_data((float *)em_tensor_ptr(got.gx), (float *)em_tensor_ptr(gy),
                                                   (float *)em_tensor_ptr(w), &s, 1),
                     0);
    assert_int_equal(
        cpu_dnnl_conv2d_backward_weights((float *)em_tensor_ptr(got.gw), b ? (float *)em_tensor_ptr(got.gb) : NULL,
                                         (float *)em_tensor_ptr(gy), (float *)em_tensor_ptr(x), &s, 1),
        0);
    /* the reference: float32 math on the operands rounded as oneDNN rounds them */
    round_to_bf16(x), round_to_bf16(w), round_to_bf16(gy);
    cpu_dnnl_force_(0);
    conv_run want = run_conv(c, x, w, b, gy);
    (void)p;
    check_run("bfloat16", c, got, want, 1e-4);
    release_run(want);
    release_run(got);
    em_tensor *all[] = {x, w, b, gy};
    for (int i = 0; i < 4; i++) em_tensor_release(all[i]);
  }
  cpu_dnnl_force_(-1);
}

/* c = alpha * a @ b + beta * c with a stored transposed and c with a row pitch, in float64 */
static void matmul_case(int bf16) {
  const int64_t M = 37, N = 29, K = 53, ldc = 40;
  float *a = malloc(sizeof(float) * K * M), *b = malloc(sizeof(float) * K * N);
  float *c = malloc(sizeof(float) * M * ldc), *c0 = malloc(sizeof(float) * M * ldc);
  for (int64_t i = 0; i < K * M; i++) a[i] = next_value();
  for (int64_t i = 0; i < K * N; i++) b[i] = next_value();
  for (int64_t i = 0; i < M * ldc; i++) c0[i] = c[i] = next_value();
  const float alpha = 0.5f, beta = 1.0f;
  cpu_dnnl_force_(1);
  cpu_dnnl_mat cm = {c, ldc, 1}, am = {a, 1, M}, bm = {b, N, 1}; /* a[i, k] at a[k * M + i] */
  assert_int_equal(cpu_dnnl_matmul(cm, am, bm, M, N, K, alpha, beta, bf16), 0);
  double worst = 0;
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double acc = 0;
      for (int64_t k = 0; k < K; k++) {
        float x = a[k * M + i], y = b[k * N + j];
        if (bf16) x = em_bf16_to_float(em_float_to_bf16(x)), y = em_bf16_to_float(em_float_to_bf16(y));
        acc += (double)x * y;
      }
      worst = fmax(worst, fabs(c[i * ldc + j] - (alpha * acc + beta * c0[i * ldc + j])));
    }
  for (int64_t i = 0; i < M; i++) /* the pitch's padding is not written */
    for (int64_t j = N; j < ldc; j++) assert_true(c[i * ldc + j] == c0[i * ldc + j]);
  assert_true(worst < 1e-4);
  free(a), free(b), free(c), free(c0);
  cpu_dnnl_force_(-1);
}

static void matmul_float32(void **state) { matmul_case(0); }
static void matmul_bfloat16(void **state) { matmul_case(1); }

/* In bfloat16 a row-major float32 operand is rounded to bfloat16 by ember's own pass
 * (dnnl.c, round_rows), not a reorder: against the identity, a @ I is a rounded to nearest
 * even exactly, for values on both sides of each rounding tie, rows with a pitch, and a
 * row length that is not a multiple of 16 */
static void matmul_bfloat16_rounds_to_nearest_even(void **state) {
  const int64_t M = 70, K = 37, lda = 45;
  float *a = calloc((size_t)(M * lda), sizeof(float)), *id = calloc((size_t)(K * K), sizeof(float));
  float *c = calloc((size_t)(M * K), sizeof(float));
  for (int64_t i = 0; i < M; i++)
    for (int64_t k = 0; k < K; k++) {
      uint32_t bits = 0x3f800000u + (uint32_t)((i * K + k) * 2654435761u % 0x1000000u); /* [1, 4): any low bits */
      if ((i + k) % 5 == 0) bits = (bits & 0xffff0000u) | 0x8000u; /* an exact tie */
      float x;
      memcpy(&x, &bits, 4);
      a[i * lda + k] = (i + k) % 3 ? x : -x;
    }
  for (int64_t k = 0; k < K; k++) id[k * K + k] = 1;
  cpu_dnnl_force_(1);
  cpu_dnnl_mat cm = {c, K, 1}, am = {a, lda, 1}, bm = {id, K, 1};
  assert_int_equal(cpu_dnnl_matmul(cm, am, bm, M, K, K, 1, 0, 1), 0);
  int64_t wrong = 0;
  for (int64_t i = 0; i < M; i++)
    for (int64_t k = 0; k < K; k++) wrong += c[i * K + k] != em_bf16_to_float(em_float_to_bf16(a[i * lda + k]));
  assert_int_equal(wrong, 0);
  free(a), free(id), free(c);
  cpu_dnnl_force_(-1);
}

/* float32 products from about a million multiply-adds go through oneDNN (the measured rule)
 * and match OpenBLAS's: a Linear's [50, 128] @ [128, 512]^T through cpu_gemm, and small
 * ones stay on OpenBLAS */
static void gemm_float32_routes_by_size(void **state) {
  assert_true(cpu_dnnl_gemm_wanted(50, 512, 128));
  assert_false(cpu_dnnl_gemm_wanted(64, 64, 32));
  /* a Linear layer's forward also from the MLP's last layer, not with a short K */
  assert_true(cpu_dnnl_linear_wanted(128, 10, 128));
  assert_false(cpu_dnnl_gemm_wanted(128, 10, 128));
  assert_false(cpu_dnnl_linear_wanted(128, 512, 13));
  assert_false(cpu_dnnl_linear_wanted(128, 16, 64));
  em_tensor *a = random_tensor(2, (int64_t[]){50, 128}), *w = random_tensor(2, (int64_t[]){512, 128});
  em_tensor *wt = NULL, *c[2] = {NULL, NULL};
  assert_int_equal(em_transpose(&wt, w, 0, 1), EM_OK);
  for (int i = 0; i < 2; i++) {
    cpu_dnnl_force_(i == 0 ? 0 : -1);
    int64_t before = cpu_dnnl_runs_();
    assert_int_equal(em_empty(&c[i], 2, (int64_t[]){50, 512}, EM_FLOAT32, CPU), EM_OK);
    assert_int_equal(cpu_gemm(c[i], a, wt, 1, 0), EM_OK);
    assert_int_equal(cpu_dnnl_runs_(), before + i); /* the reference did not use oneDNN; the default did */
  }
  assert_true(rel_diff(c[1], c[0]) < 1e-5);
  em_tensor *all[] = {a, w, wt, c[0], c[1]};
  for (int i = 0; i < 5; i++) em_tensor_release(all[i]);
  cpu_dnnl_force_(-1);
}

/* Linear layers (and Linear + ReLU, em_nn_linear_relu) forward and backward, with oneDNN's
 * fused bias and ReLU against OpenBLAS's GEMM, the bias added first and a ReLU pass: the
 * Fashion-MNIST MLP's layers (784-256-128-10, batch 128: the last reaches oneDNN through
 * cpu_dnnl_linear_wanted, its long K), one of DLRM's (batch 128, 13 -> 512) and one without a bias, over an
 * input with leading dims [2, 64] */
static void linear_fused_matches_openblas(void **state) {
  const struct {
    int64_t rows, in, out;
    int bias, relu, lead2; /* lead2: x is [2, rows / 2, in] */
  } cases[] = {
      {128, 784, 256, 1, 1, 0}, {128, 256, 128, 1, 1, 0}, {128, 128, 10, 1, 0, 0},
      {128, 13, 512, 1, 1, 0},  {128, 784, 256, 0, 1, 1}, {128, 256, 128, 1, 0, 0},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    int64_t R = cases[c].rows, I = cases[c].in, O = cases[c].out;
    em_tensor *x = random_tensor(cases[c].lead2 ? 3 : 2, cases[c].lead2 ? (int64_t[]){2, R / 2, I} : (int64_t[]){R, I});
    em_tensor *w = random_tensor(2, (int64_t[]){O, I}), *b = cases[c].bias ? random_tensor(1, (int64_t[]){O}) : NULL;
    em_tensor *gy = random_tensor(cases[c].lead2 ? 3 : 2, cases[c].lead2 ? (int64_t[]){2, R / 2, O} : (int64_t[]){R, O});
    em_tensor *leaves[3] = {x, w, b}, *r[2][4];
    for (int i = 0; i < 2; i++) {
      cpu_dnnl_force_(i == 0 ? 0 : -1);
      for (int k = 0; k < 3; k++)
        if (leaves[k]) assert_int_equal(em_requires_grad_(leaves[k], 1), EM_OK);
      int64_t before = cpu_dnnl_runs_();
      em_tensor *y = NULL;
      em_status st = cases[c].relu ? em_nn_linear_relu(&y, x, w, b) : em_nn_linear(&y, x, w, b);
      assert_int_equal(st, EM_OK);
      int64_t fwd_runs = cpu_dnnl_runs_() - before;
      if (i == 0) assert_int_equal(fwd_runs, 0); /* the reference did not use oneDNN */
      else assert_int_equal(fwd_runs, cpu_dnnl_linear_wanted(R, O, I)); /* one primitive: GEMM, bias, ReLU */
      assert_string_equal(em_grad_fn_name(y), cases[c].relu ? "LinearReluBackward" : "LinearBackward");
      assert_int_equal(em_backward(y, gy, 0), EM_OK);
      r[i][0] = y;
      for (int k = 0; k < 3; k++) {
        r[i][k + 1] = leaves[k] ? em_grad(leaves[k]) : NULL;
        if (leaves[k]) assert_int_equal(em_set_grad(leaves[k], NULL), EM_OK); /* the next run starts afresh */
      }
    }
    for (int k = 0; k < 4; k++) {
      if (!r[0][k]) continue;
      double e = rel_diff(r[1][k], r[0][k]);
      if (!(e < 1e-5))
        fail_msg("linear %lld -> %lld (relu %d) output %d: oneDNN and OpenBLAS differ by %g (relative)", (long long)I,
                 (long long)O, cases[c].relu, k, e);
    }
    if (cases[c].relu) { /* the ReLU did cut: some outputs are 0, their gradients did not pass */
      const float *y = (const float *)em_tensor_ptr(r[1][0]);
      int64_t zeros = 0;
      for (int64_t i = 0; i < R * O; i++) zeros += y[i] == 0;
      assert_true(zeros > R * O / 4 && zeros < R * O * 3 / 4);
    }
    for (int i = 0; i < 2; i++)
      for (int k = 0; k < 4; k++) em_tensor_release(r[i][k]);
    em_tensor *all[] = {x, w, b, gy};
    for (int k = 0; k < 4; k++) em_tensor_release(all[k]);
  }
  cpu_dnnl_force_(-1);
}

/* char-rnn's LSTM layer (batch 50, 128 units: the recurrent GEMMs reach oneDNN) forward and
 * backward, against the same kernels on OpenBLAS alone; and under bfloat16 autocast (the
 * products over all steps in bfloat16), within bfloat16's rounding of the float32 results */
static void lstm_float32_matches_openblas(void **state) {
  const int64_t T = 6, B = 50, NI = 96, H = 128;
  cpu_rnn_dims d = {.mode = EM_RNN_LSTM, .T = T, .B = B, .NI = NI, .H = H};
  em_tensor *x = random_tensor(3, (int64_t[]){T, B, NI}), *h0 = random_tensor(2, (int64_t[]){B, H});
  em_tensor *c0 = random_tensor(2, (int64_t[]){B, H}), *wih = random_tensor(2, (int64_t[]){4 * H, NI});
  em_tensor *whh = random_tensor(2, (int64_t[]){4 * H, H}), *bih = random_tensor(1, (int64_t[]){4 * H});
  em_tensor *bhh = random_tensor(1, (int64_t[]){4 * H}), *gy = random_tensor(3, (int64_t[]){T, B, H});
  em_tensor *gs = random_tensor(3, (int64_t[]){2, B, H});
  for (int m = 0; m < 2; m++) { /* PyTorch's initialisation range, 1/sqrt(H): a recursion that does not blow up */
    float *w = (float *)em_tensor_ptr(m ? whh : wih);
    for (int64_t i = 0; i < em_tensor_numel(m ? whh : wih); i++) w[i] /= sqrtf((float)H);
  }
  enum { Y, SH, SC, ACT, GX, GH0, GC0, GWIH, GWHH, GBIH, GBHH, NOUT };
  em_tensor *r[3][NOUT];
  cpu_rnn_fused_force_(0); /* the general loop's per-step products (tests/c/test_rnn_fused.c: the fused one) */
  for (int i = 0; i < 3; i++) {
    cpu_dnnl_force_(i == 0 ? 0 : -1);
    if (i == 2) ag_autocast_force_(EM_CPU, 1, EM_BFLOAT16);
    int64_t before = cpu_dnnl_runs_();
    em_tensor *const like[NOUT] = {gy, NULL, NULL, NULL, x, h0, c0, wih, whh, bih, bhh};
    for (int k = 0; k < NOUT; k++) {
      r[i][k] = NULL;
      if (like[k]) r[i][k] = empty_like(like[k]);
    }
    assert_int_equal(em_empty(&r[i][SH], 3, (int64_t[]){T + 1, B, H}, EM_FLOAT32, CPU), EM_OK);
    assert_int_equal(em_empty(&r[i][SC], 3, (int64_t[]){T + 1, B, H}, EM_FLOAT32, CPU), EM_OK);
    assert_int_equal(em_empty(&r[i][ACT], 3, (int64_t[]){T, B, 4 * H}, EM_FLOAT32, CPU), EM_OK);
    assert_int_equal(cpu_rnn_forward(&d, r[i][Y], r[i][SH], r[i][SC], r[i][ACT], x, h0, c0, wih, whh, bih, bhh), EM_OK);
    assert_int_equal(cpu_rnn_backward(&d, r[i][GX], r[i][GH0], r[i][GC0], r[i][GWIH], r[i][GWHH], r[i][GBIH],
                                      r[i][GBHH], gy, gs, x, wih, whh, r[i][SH], r[i][SC], r[i][ACT]),
                     EM_OK);
    if (i == 2) ag_autocast_force_(EM_CPU, 0, EM_FLOAT32);
    if (i == 0) assert_int_equal(cpu_dnnl_runs_(), before);
    else assert_true(cpu_dnnl_runs_() >= before + 2 * T); /* a recurrent GEMM each way per step at least */
  }
  for (int k = 0; k < NOUT; k++) {
    double e = rel_diff(r[1][k], r[0][k]), eb = rel_diff(r[2][k], r[0][k]);
    if (!(e < 1e-4)) fail_msg("LSTM output %d: oneDNN and OpenBLAS differ by %g (relative)", k, e);
    /* bfloat16 keeps 8 bits: products of rounded operands, and the gradients sum T*B of them */
    if (!(eb < 3e-2) || !(eb > 1e-5)) fail_msg("LSTM output %d: bfloat16 differs by %g (relative)", k, eb);
  }
  for (int i = 0; i < 3; i++)
    for (int k = 0; k < NOUT; k++) em_tensor_release(r[i][k]);
  em_tensor *all[] = {x, h0, c0, wih, whh, bih, bhh, gy, gs};
  for (int i = 0; i < 9; i++) em_tensor_release(all[i]);
  cpu_dnnl_force_(-1);
  cpu_rnn_fused_force_(-1);
}

/* EMBER_DNNL=0's switch: nothing reaches oneDNN, the convolution still runs */
static void forced_off_uses_the_fallback(void **state) {
  const conv_case *c = &CASES[1];
  em_tensor *x, *w, *b, *gy;
  make_operands(c, &x, &w, &b, &gy);
  cpu_dnnl_force_(0);
  int64_t before = cpu_dnnl_runs_();
  conv_run r = run_conv(c, x, w, b, gy);
  assert_int_equal(cpu_dnnl_runs_(), before);
  assert_false(cpu_dnnl_available());
  release_run(r);
  em_tensor *all[] = {x, w, b, gy};
  for (int i = 0; i < 4; i++) em_tensor_release(all[i]);
  cpu_dnnl_force_(-1);
}

int main(void) {
  cpu_dnnl_force_(1);
  if (!cpu_dnnl_available()) {
    printf("test_dnnl: oneDNN is not built in; skipped\n");
    return 0;
  }
  cpu_dnnl_force_(-1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(conv_float32_matches),
      cmocka_unit_test(conv_bfloat16_matches_rounded_operands),
      cmocka_unit_test(matmul_float32),
      cmocka_unit_test(matmul_bfloat16),
      cmocka_unit_test(matmul_bfloat16_rounds_to_nearest_even),
      cmocka_unit_test(forced_off_uses_the_fallback),
      cmocka_unit_test(gemm_float32_routes_by_size),
      cmocka_unit_test(lstm_float32_matches_openblas),
      cmocka_unit_test(linear_fused_matches_openblas),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
