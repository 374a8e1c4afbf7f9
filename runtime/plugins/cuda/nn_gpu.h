/* nn_gpu.h - what the files of the CUDA backend's nn family share (C linkage, .c and .cu
 * alike). The family's backend entries (declared in gpu.h, from the list of backend.h):
 *   conv, pooling, normalisation: conv.cu, pool.cu, norm.cu
 *   class losses, embedding bags (dense and row-sparse backward): loss.cu, embedding.cu
 *   DLRM's dot interaction: interaction.cu */
#ifndef EMBER_GPU_NN_GPU_H
#define EMBER_GPU_NN_GPU_H

#include "gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

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
