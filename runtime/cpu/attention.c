/* attention.c - the CPU kernels of fused scaled-dot-product attention (see cpu_seq.h),
 * one body per dtype (attention_body.h). Tiles of ATTN_BR query rows by ATTN_BC keys keep
 * the working set (scores, output accumulator) within the L2 cache for head dims up to
 * a few hundred, and the tasks (batch*head x query blocks) are spread over OpenMP threads;
 * each GEMM inside a task runs on its thread alone. */
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
#include "core/philox.h"
#include "cpu_seq.h"
#include "vmath.h"

#define ATTN_BR 64
#define ATTN_BC 64

#define SCALAR float
#define SFX _f32
#define GEMM cblas_sgemm
#define EXP em_vexpf /* vectorisable (vmath.h) */
#define EXPNP em_vexpf_nonpos /* exp(x - max): x - max <= 0 */
#define LOG logf
#include "attention_body.h"
#undef SCALAR
#undef SFX
#undef GEMM
#undef EXP
#undef EXPNP
#undef LOG

#define SCALAR double
#define SFX _f64
#define GEMM cblas_dgemm
#define EXP exp
#define EXPNP exp
#define LOG log
#include "attention_body.h"
#undef SCALAR
#undef SFX
#undef GEMM
#undef EXP
#undef EXPNP
#undef LOG

static int attn_threads(void) { return omp_in_parallel() ? 1 : em_get_num_threads(); }

em_status cpu_attention_forward(const cpu_attn_args *a, em_tensor *out, em_tensor *lse, const em_tensor *q,
                                const em_tensor *k, const em_tensor *v) {
  int failed;
  if (q->dtype == EM_FLOAT32)
    failed =
        attn_forward_f32(a, (float *)em_tensor_ptr(out), (float *)em_tensor_ptr(lse), (const float *)em_tensor_ptr(q),
                         (const float *)em_tensor_ptr(k), (const float *)em_tensor_ptr(v), attn_threads());
  else
    failed = attn_forward_f64(a, (double *)em_tensor_ptr(out), (double *)em_tensor_ptr(lse),
                              (const double *)em_tensor_ptr(q), (const double *)em_tensor_ptr(k),
                              (const double *)em_tensor_ptr(v), attn_threads());
  return failed ? em_set_error(EM_ERR_MEMORY, "scaled_dot_product_attention: out of memory for the tiles") : EM_OK;
}

em_status cpu_attention_backward(const cpu_attn_args *a, em_tensor *gq, em_tensor *gk, em_tensor *gv,
                                 const em_tensor *gout, const em_tensor *q, const em_tensor *k, const em_tensor *v,
                                 const em_tensor *out, const em_tensor *lse) {
  int failed;
#define P(T, t) ((T *)em_tensor_ptr(t))
  if (q->dtype == EM_FLOAT32)
    failed = attn_backward_f32(a, P(float, gq), P(float, gk), P(float, gv), P(const float, gout), P(const float, q),
                               P(const float, k), P(const float, v), P(const float, out), P(const float, lse),
                               attn_threads());
  else
    failed = attn_backward_f64(a, P(double, gq), P(double, gk), P(double, gv), P(const double, gout),
                               P(const double, q), P(const double, k), P(const double, v), P(const double, out),
                               P(const double, lse), attn_threads());
#undef P
  return failed ? em_set_error(EM_ERR_MEMORY, "scaled_dot_product_attention: out of memory for the tiles") : EM_OK;
}
