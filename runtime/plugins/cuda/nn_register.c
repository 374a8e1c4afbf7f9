/* nn_register.c - the nn family's table entries, which two sets of files provide:
 * convolution, pooling and normalisation (conv.cu, pool.cu, norm.cu) and the class losses
 * and embedding bags (the loss/embedding files). Each part is weak so that the table
 * still builds while the other is missing; its entries then stay NULL (unsupported). */
#include "nn_gpu.h"

__attribute__((weak)) void em_gpu_register_loss_embedding(em_backend *be);

void em_gpu_register_conv_pool_norm(em_backend *be) {
  be->conv2d = em_gpu_conv2d;
  be->conv2d_backward = em_gpu_conv2d_backward;
  be->max_pool2d = em_gpu_max_pool2d;
  be->max_pool2d_backward = em_gpu_max_pool2d_backward;
  be->avg_pool2d = em_gpu_avg_pool2d;
  be->avg_pool2d_backward = em_gpu_avg_pool2d_backward;
  be->batch_norm_stats = em_gpu_batch_norm_stats;
  be->batch_norm = em_gpu_batch_norm;
  be->batch_norm_backward = em_gpu_batch_norm_backward;
  be->layer_norm = em_gpu_layer_norm;
  be->layer_norm_backward = em_gpu_layer_norm_backward;
}

void em_gpu_register_nn(em_backend *be) {
  em_gpu_register_conv_pool_norm(be);
  if (em_gpu_register_loss_embedding) em_gpu_register_loss_embedding(be);
}
