/* cpu_dnnl.h - convolution and matrix products through oneDNN (dnnl.c), when libember is
 * built with it (EMBER_HAVE_DNNL). Every entry returns 0 when it computed the result and
 * nonzero when it did not (oneDNN absent, turned off, or no primitive for the shape): the
 * caller then runs its own im2col + OpenBLAS path, which stays the reference.
 *
 * EMBER_DNNL (read once): 0 never uses oneDNN; 1 uses it for every float32 convolution;
 * unset, it is used where it measured faster (cpu_dnnl_conv_wanted, and for float32 GEMMs
 * cpu_dnnl_gemm_wanted, whatever EMBER_DNNL=1 says). bfloat16 math
 * (autocast on the CPU) always goes through oneDNN: nothing else here computes it. */
#ifndef EMBER_CPU_DNNL_H
#define EMBER_CPU_DNNL_H

#include <stdint.h>

/* One 2-d convolution, NCHW input [N, C, H, W], weight [Co, C/groups, kh, kw], output
 * [N, Co, OH, OW], all float32 and contiguous; dilation as ember counts it (1: none). */
typedef struct cpu_conv_shape {
  int64_t N, C, H, W, Co, kh, kw, OH, OW;
  int64_t sh, sw, ph, pw, dh, dw, groups;
} cpu_conv_shape;

/* 1 when oneDNN is built in and not turned off by EMBER_DNNL=0. */
int cpu_dnnl_available(void);
/* Whether a float32 convolution of this shape should go through oneDNN (the mode and the
 * measured rule). */
int cpu_dnnl_conv_wanted(const cpu_conv_shape *s);
/* Whether a float32 GEMM of this size should go through cpu_dnnl_matmul (measured rule;
 * 0 when oneDNN is off). */
int cpu_dnnl_gemm_wanted(int64_t M, int64_t N, int64_t K);
/* Whether a Linear layer's forward x [M, K] @ w^T [K, N] (+ bias, + ReLU) should go through
 * cpu_dnnl_linear: cpu_dnnl_gemm_wanted's sizes, and smaller ones with a long K (the
 * MLP's last layer), where the fused bias also spares the separate pass addmm makes. */
int cpu_dnnl_linear_wanted(int64_t M, int64_t N, int64_t K);
/* For tests: -1 back to EMBER_DNNL's choice, 0 never, 1 always. */
void cpu_dnnl_force_(int mode);
/* For tests: how many oneDNN primitives have run in this process. */
int64_t cpu_dnnl_runs_(void);

/* y = conv(x, w) + b (b may be NULL). bf16: x and w rounded to bfloat16, float32 sums. */
int cpu_dnnl_conv2d(float *y, const float *x, const float *w, const float *b, const cpu_conv_shape *s, int bf16);
/* gx from gy and w. */
int cpu_dnnl_conv2d_backward_data(float *gx, const float *gy, const float *w, const cpu_conv_shape *s, int bf16);
/* gw (and gb when not NULL) from gy and x; both overwritten. */
int cpu_dnnl_conv2d_backward_weights(float *gw, float *gb, const float *gy, const float *x, const cpu_conv_shape *s,
                                     int bf16);

/* c[M, N] = alpha * a[M, K] @ b[K, N] + beta * c, each matrix at its element strides
 * (rs, cs). bf16: a and b rounded to bfloat16, float32 sums and result. */
typedef struct cpu_dnnl_mat {
  float *ptr;
  int64_t rs, cs;
} cpu_dnnl_mat;
int cpu_dnnl_matmul(cpu_dnnl_mat c, cpu_dnnl_mat a, cpu_dnnl_mat b, int64_t M, int64_t N, int64_t K, float alpha,
                    float beta, int bf16);
/* c = a @ b in bfloat16 with a already in bfloat16 (strides a_rs, a_cs): the LSTM's gate
 * gradients, which its AMX backward (rnn_fused.c) rounds as it makes them, are then not
 * converted again for each of the three products that read them. */
int cpu_dnnl_matmul_a16(cpu_dnnl_mat c, const uint16_t *a, int64_t a_rs, int64_t a_cs, cpu_dnnl_mat b, int64_t M,
                        int64_t N, int64_t K);
/* A Linear layer's forward in float32: y[M, N] = x[M, K] @ wt[K, N] + b (b: N floats, or
 * NULL), then max(y, 0) when relu, in one primitive (the bias and the ReLU applied as the
 * tiles of y are written: no pass over y of their own). */
int cpu_dnnl_linear(cpu_dnnl_mat y, cpu_dnnl_mat x, cpu_dnnl_mat wt, const float *b, int relu, int64_t M, int64_t N,
                    int64_t K);

#endif
