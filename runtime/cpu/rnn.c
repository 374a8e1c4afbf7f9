/* rnn.c - the CPU kernels of the recurrent layers (see cpu_seq.h), one body per dtype
 * (rnn_body.h), plus the scratch they need. */
/* GCC targets 256-bit vectors on AVX-512 machines unless told; the cell and tile loops are
 * arithmetic (exp, division) on data in L1, where 512-bit ones measured faster */
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
#pragma GCC target("prefer-vector-width=512")
#endif
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "autograd/autocast.h"
#include "cpu_dnnl.h"
#include "cpu_seq.h"
#include "ember/nn.h"
#include "vmath.h"

/* float32 gates through vmath.h's expf, so that the cell loops vectorise (libm's calls
 * keep them scalar); tanh as 1 - 2 / (1 + e^2v): within ~1e-7 absolute, saturating to
 * +-1 where e^2v overflows or vanishes. float64 keeps libm. */
static inline float rnn_tanhf(float v) { return 1.0f - 2.0f / (1.0f + em_vexpf(2.0f * v)); }

int cpu_rnn_gates(int mode) { return mode == EM_RNN_LSTM ? 4 : mode == EM_RNN_GRU ? 3 : 1; }
int64_t cpu_rnn_act_width(int mode, int64_t H) { return mode == EM_RNN_GRU ? 4 * H : cpu_rnn_gates(mode) * H; }

/* cblas_sgemm's row-major call, through oneDNN where it measured faster (the recurrent
 * [B, H] @ [H, 4H] of every step above all: OpenBLAS packs both operands on each call).
 * bf16: in bfloat16 (oneDNN, float32 sums) under CPU autocast - only the products over all
 * steps (input projection, input and weight gradients) take it: each step's recurrent
 * product keeps the state's recursion in float32, and at [B, H] it measured no faster. */
static void rnn_sgemm_(int bf16, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                       const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc) {
  if (bf16 || cpu_dnnl_gemm_wanted(M, N, K)) {
    cpu_dnnl_mat cm = {c, ldc, 1}, am = {(float *)a, ta == CblasNoTrans ? lda : 1, ta == CblasNoTrans ? 1 : lda},
                 bm = {(float *)b, tb == CblasNoTrans ? ldb : 1, tb == CblasNoTrans ? 1 : ldb};
    if (!cpu_dnnl_matmul(cm, am, bm, M, N, K, alpha, beta, bf16)) return;
  }
  cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
}
#define RNN_SGEMM(BF16, ORDER, ...) rnn_sgemm_(BF16, __VA_ARGS__)

/* c [M, N] (row stride ldc) = a [M, K] (bfloat16, strides a_rs, a_cs) @ b [K, N] (strides
 * ldb, b_cs) through oneDNN. When it does not run, a's n elements are widened into wide_to
 * (once: *widened) and 1 returned, for the caller's float32 GEMM. Only the fused float32
 * LSTM makes a (dg16): c, b and wide_to are float32 then. */
static int rnn_a16_gemm(void *c, int64_t ldc, const uint16_t *a, int64_t a_rs, int64_t a_cs, const void *b, int64_t ldb,
                        int64_t b_cs, int64_t M, int64_t N, int64_t K, void *wide_to, int64_t n, int *widened) {
  cpu_dnnl_mat cm = {c, ldc, 1}, bm = {(float *)b, ldb, b_cs};
  if (cpu_dnnl_available() && !cpu_dnnl_matmul_a16(cm, a, a_rs, a_cs, bm, M, N, K)) return 0;
  if (!*widened)
    for (int64_t i = 0; i < n; i++) {
      uint32_t u = (uint32_t)a[i] << 16;
      memcpy((float *)wide_to + i, &u, 4);
    }
  *widened = 1;
  return 1;
}

#define SCALAR float
#define SFX _f32
#define GEMM(...) RNN_SGEMM(ag_autocast_cpu_bf16() && cpu_dnnl_available(), __VA_ARGS__)
#define GEMM_STEP(...) RNN_SGEMM(0, __VA_ARGS__)
#define EXP em_vexpf
#define TANH rnn_tanhf
#define FUSED_FORWARD cpu_lstm_fused_forward
#define FUSED_BACKWARD cpu_lstm_fused_backward
#include "rnn_body.h"
#undef FUSED_FORWARD
#undef FUSED_BACKWARD
#undef SCALAR
#undef SFX
#undef GEMM
#undef GEMM_STEP
#undef EXP
#undef TANH

#define SCALAR double
#define SFX _f64
#define GEMM cblas_dgemm
#define GEMM_STEP cblas_dgemm
#define EXP exp
#define TANH tanh
#include "rnn_body.h"
#undef SCALAR
#undef SFX
#undef GEMM
#undef GEMM_STEP
#undef EXP
#undef TANH

#define PTR(t) ((t) ? (void *)em_tensor_ptr(t) : NULL)

em_status cpu_rnn_forward(const cpu_rnn_dims *d, em_tensor *y, em_tensor *sh, em_tensor *sc, em_tensor *act,
                          const em_tensor *x, const em_tensor *h0, const em_tensor *c0, const em_tensor *w_ih,
                          const em_tensor *w_hh, const em_tensor *b_ih, const em_tensor *b_hh) {
  size_t es = em_dtype_size(x->dtype);
  int64_t GH = cpu_rnn_gates(d->mode) * d->H;
  int gru = d->mode == EM_RNN_GRU;
  /* the GRU keeps its input projection apart from the saved activations, and needs room
   * for one step's hidden projection */
  void *scratch = gru ? malloc((size_t)((d->T + 1) * d->B * GH) * es) : NULL;
  if (gru && !scratch) return em_set_error(EM_ERR_MEMORY, "rnn: out of memory for the GRU's projections");
  /* a missing bias reads as zeros, so that the cell loops need no branch */
  void *zero_bias = (!b_ih || !b_hh) ? calloc((size_t)GH, es) : NULL;
  if ((!b_ih || !b_hh) && !zero_bias) {
    free(scratch);
    return em_set_error(EM_ERR_MEMORY, "rnn: out of memory");
  }
  void *bi = b_ih ? PTR(b_ih) : zero_bias, *bh = b_hh ? PTR(b_hh) : zero_bias;
  void *pre = gru ? scratch : PTR(act);
  void *gh = gru ? (char *)scratch + (size_t)(d->T * d->B * GH) * es : NULL;
  if (x->dtype == EM_FLOAT32)
    rnn_forward_f32(d, PTR(y), PTR(sh), PTR(sc), PTR(act), pre, gh, PTR(x), PTR(h0), PTR(c0), PTR(w_ih), PTR(w_hh), bi,
                    bh);
  else
    rnn_forward_f64(d, PTR(y), PTR(sh), PTR(sc), PTR(act), pre, gh, PTR(x), PTR(h0), PTR(c0), PTR(w_ih), PTR(w_hh), bi,
                    bh);
  free(scratch);
  free(zero_bias);
  return EM_OK;
}

em_status cpu_rnn_backward(const cpu_rnn_dims *d, em_tensor *gx, em_tensor *gh0, em_tensor *gc0, em_tensor *gw_ih,
                           em_tensor *gw_hh, em_tensor *gb_ih, em_tensor *gb_hh, const em_tensor *gy,
                           const em_tensor *gstate, const em_tensor *x, const em_tensor *w_ih, const em_tensor *w_hh,
                           const em_tensor *sh, const em_tensor *sc, const em_tensor *act) {
  size_t es = em_dtype_size(x->dtype);
  int64_t GH = cpu_rnn_gates(d->mode) * d->H, rows = d->T * d->B, BH = d->B * d->H;
  int gru = d->mode == EM_RNN_GRU;
  size_t n = (size_t)((gru ? 2 : 1) * rows * GH + 4 * BH);
  /* on cache lines: the fused LSTM's threads write their own columns of dgi, dh, dc, acc */
  char *scratch = aligned_alloc(64, (n * es + 63) & ~(size_t)63);
  double *acc = aligned_alloc(64, ((size_t)GH * sizeof(double) + 63) & ~(size_t)63);
  if (!scratch || !acc) {
    free(scratch), free(acc);
    scratch = NULL;
  }
  if (!scratch) return em_set_error(EM_ERR_MEMORY, "rnn: out of memory for the backward's gate gradients");
  char *dgi = scratch, *dgh = gru ? dgi + (size_t)(rows * GH) * es : dgi;
  char *dh = dgh + (size_t)(rows * GH) * es, *dhn = dh + (size_t)BH * es, *dc = dhn + (size_t)BH * es;
  char *zeros = dc + (size_t)BH * es;
  memset(zeros, 0, (size_t)BH * es);
  if (x->dtype == EM_FLOAT32)
    rnn_backward_f32(d, PTR(gx), PTR(gh0), PTR(gc0), PTR(gw_ih), PTR(gw_hh), PTR(gb_ih), PTR(gb_hh), PTR(gy),
                     PTR(gstate), PTR(x), PTR(w_ih), PTR(w_hh), PTR(sh), PTR(sc), PTR(act), (float *)dgi, (float *)dgh,
                     (float *)dh, (float *)dhn, (float *)dc, acc, (const float *)zeros);
  else
    rnn_backward_f64(d, PTR(gx), PTR(gh0), PTR(gc0), PTR(gw_ih), PTR(gw_hh), PTR(gb_ih), PTR(gb_hh), PTR(gy),
                     PTR(gstate), PTR(x), PTR(w_ih), PTR(w_hh), PTR(sh), PTR(sc), PTR(act), (double *)dgi,
                     (double *)dgh, (double *)dh, (double *)dhn, (double *)dc, acc, (const double *)zeros);
  free(scratch);
  free(acc);
  return EM_OK;
}
