/* nn_gpu.h - the nn family of the CUDA backend, written in two parts that fill the table
 * together: em_gpu_register_nn (nn_register.c) calls both.
 *   conv, pooling, normalisation: conv.cu, pool.cu, norm.cu
 *   class losses, embedding bags: the loss/embedding files
 * and the helpers those files share with each other (C linkage, .c and .cu alike). */
#ifndef EMBER_GPU_NN_GPU_H
#define EMBER_GPU_NN_GPU_H

#include "gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

void em_gpu_register_conv_pool_norm(em_backend *be); /* conv2d*, *_pool2d*, batch_norm*, layer_norm* */
void em_gpu_register_loss_embedding(em_backend *be); /* class_loss*, embedding_bag* */

/* The entries of em_gpu_register_conv_pool_norm (backend.h says what each computes). */
em_status em_gpu_conv2d(em_tensor *out, const em_tensor *x, const em_tensor *w, const em_tensor *b,
                        const em_conv2d_params *p);
em_status em_gpu_conv2d_backward(em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *gy,
                                 const em_tensor *x, const em_tensor *w, const em_conv2d_params *p);
em_status em_gpu_max_pool2d(em_tensor *out, em_tensor *indices, const em_tensor *x, const em_pool2d_params *p);
em_status em_gpu_max_pool2d_backward(em_tensor *gx, const em_tensor *gy, const em_tensor *indices);
em_status em_gpu_avg_pool2d(em_tensor *out, const em_tensor *x, const em_pool2d_params *p);
em_status em_gpu_avg_pool2d_backward(em_tensor *gx, const em_tensor *gy, const em_pool2d_params *p);
em_status em_gpu_batch_norm_stats(em_tensor *mean, em_tensor *var, const em_tensor *x);
em_status em_gpu_batch_norm(em_tensor *out, const em_tensor *x, const em_tensor *mean, const em_tensor *var,
                            const em_tensor *w, const em_tensor *b, double eps);
em_status em_gpu_batch_norm_backward(em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *gy,
                                     const em_tensor *x, const em_tensor *mean, const em_tensor *var,
                                     const em_tensor *w, double eps, int training);
em_status em_gpu_layer_norm(em_tensor *out, em_tensor *mean, em_tensor *rstd, const em_tensor *x, const em_tensor *w,
                            const em_tensor *b, double eps);
em_status em_gpu_layer_norm_backward(em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *gy,
                                     const em_tensor *x, const em_tensor *mean, const em_tensor *rstd,
                                     const em_tensor *w);

/* sums[c] = the sum of x [N, C, S] over N and S, in a fixed order (conv2d's bias gradient;
 * norm.cu). sums has x's dtype and C elements. Queued on stream. */
em_status em_gpu_channel_sums(const char *op, em_tensor *sums, const em_tensor *x, cudaStream_t stream);

/* 1 when EMBER_CUDA_TF32=1: float32 matmul and convolution may round their inputs to TF32
 * on tensor cores (about 10 bits of mantissa). Off by default, so that float32 results
 * match the CPU's to float32 rounding (blas.c). */
int em_gpu_tf32_enabled(void);

#ifdef __cplusplus
}
#endif
#endif
