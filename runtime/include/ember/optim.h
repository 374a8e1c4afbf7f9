/* ember/optim.h - fused optimizer updates over whole parameter lists.
 *
 * One call updates every parameter (no per-parameter Lua loop, no temporaries): the CPU
 * backend runs one parallel loop per tensor. Parameters without a gradient (NULL entry in
 * grads) are skipped, as PyTorch does. State tensors (momentum buffers, Adam moments) are
 * owned by the caller and created zero-filled with the parameter's shape; `step` counts
 * from 1. Each parameter's gradient and state tensors share its shape and dtype
 * (float32/float64), any strides; all tensors of one call share one device. Every
 * tensor and hyper-parameter is checked before anything is written, so a failed call
 * leaves all parameters and state as they were; with n = 0 a call checks its
 * hyper-parameters alone (optimizers do so when they are made). */
#ifndef EMBER_OPTIM_H
#define EMBER_OPTIM_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* EM_FFI_BEGIN */
/* SGD with momentum (PyTorch semantics: buf = momentum*buf + (1-dampening)*g, first step
 * buf = g; nesterov uses g + momentum*buf). momentum_bufs may be NULL when momentum == 0.
 * first_step tells that the buffers hold no history yet. */
EM_API em_status em_optim_sgd(int n, em_tensor *const *params, em_tensor *const *grads, em_tensor *const *momentum_bufs,
                              double lr, double momentum, double dampening, double weight_decay, int nesterov,
                              int first_step, int maximize);
/* Adam / AdamW (decoupled = 1): exp_avg, exp_avg_sq per parameter, bias-corrected with step. */
EM_API em_status em_optim_adam(int n, em_tensor *const *params, em_tensor *const *grads, em_tensor *const *exp_avgs,
                               em_tensor *const *exp_avg_sqs, double lr, double beta1, double beta2, double eps,
                               double weight_decay, int decoupled, int64_t step, int maximize);
/* Global norm of all gradients (norm_type > 0, or INFINITY for max |g|; float64
 * accumulation); scales them in place by max_norm / (norm + 1e-6) when that is below 1,
 * as PyTorch's clip_grad_norm_ (a NaN norm leaves them as they are). NULL entries are
 * skipped. *total_norm receives the norm before clipping. */
EM_API em_status em_optim_clip_grad_norm(int n, em_tensor *const *grads, double max_norm, double norm_type,
                                         double *total_norm);
/* Loss scaling (GradScaler, lua/ember/amp.lua): multiplies every gradient by inv_scale in
 * place and sets *found_inf to 1 when any of them held an inf or NaN (checked before the
 * multiplication), else 0. One fused pass over all gradients (floating dtypes, any strides,
 * one device; NULL entries skipped); on a GPU, handing found_inf to the host is the one
 * synchronisation of the step. */
EM_API em_status em_amp_unscale_(int n, em_tensor *const *grads, double inv_scale, int *found_inf);
/* RMSprop (PyTorch's update, runtime/optim/rmsprop.c): g = grad (negated when maximize)
 * + weight_decay * p; square_avg = alpha * square_avg + (1 - alpha) * g^2; centered:
 * grad_avg = alpha * grad_avg + (1 - alpha) * g and avg = sqrt(square_avg - grad_avg^2) +
 * eps, else avg = sqrt(square_avg) + eps; momentum > 0: buf = momentum * buf + g / avg,
 * p -= lr * buf; else p -= lr * g / avg. grad_avgs may be NULL unless centered,
 * momentum_bufs unless momentum > 0. CPU tensors, contiguous (state made by zeros_like). */
EM_API em_status em_optim_rmsprop(int n, em_tensor *const *params, em_tensor *const *grads,
                                  em_tensor *const *square_avgs, em_tensor *const *momentum_bufs,
                                  em_tensor *const *grad_avgs, double lr, double alpha, double eps, double weight_decay,
                                  double momentum, int centered, int maximize);
/* Clamps every gradient (NULL entries skipped) into [-clip_value, clip_value] in place. */
EM_API em_status em_optim_clip_grad_value(int n, em_tensor *const *grads, double clip_value);
/* EM_FFI_END */

#ifdef __cplusplus
}
#endif
#endif
