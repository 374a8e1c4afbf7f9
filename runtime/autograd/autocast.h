/* autocast.h - the cast policy of autocast (ember/autograd.h), applied by the ops it
 * covers at their entry: an op asks ag_autocast_prepare whether any operand must change
 * dtype; if so it calls itself again with the cast operands (which are then what the
 * policy wants, so the second call runs as it is) and releases the casts:
 *
 *   em_autocast_ops ac;
 *   if (ag_autocast_prepare(&ac, EM_AUTOCAST_LOWER, 3, (const em_tensor *[]){x, w, b}))
 *     return ag_autocast_finish(&ac, ac.status ? ac.status : em_nn_linear(out, ac.t[0], ac.t[1], ac.t[2]));
 *
 * The casts go through em_ag_to, so gradients flow back to the operands in their own
 * dtypes. With autocast off everywhere the check is one thread-local load. */
#ifndef EMBER_AUTOCAST_H
#define EMBER_AUTOCAST_H

#include "ember/autograd.h"
#include "tensor/tensor_impl.h"

typedef enum em_autocast_policy {
  EM_AUTOCAST_LOWER, /* matmul, addmm, linear, conv2d: float32/float16/bfloat16 operands to the autocast dtype */
  EM_AUTOCAST_FP32 /* softmax, losses, norms, sums: float16/bfloat16 operands to float32 */
} em_autocast_policy;

#define EM_AUTOCAST_MAX_OPERANDS 4

typedef struct em_autocast_ops {
  const em_tensor *t[EM_AUTOCAST_MAX_OPERANDS]; /* the operands to use */
  em_tensor *cast[EM_AUTOCAST_MAX_OPERANDS]; /* the casts made (released by finish) */
  int n;
  em_status status; /* a failed cast */
} em_autocast_ops;

/* The dtype that an operand of `dtype` on a device of device_type takes under policy in
 * this thread's autocast state (dtype itself when nothing changes). */
em_dtype ag_autocast_target(em_autocast_policy policy, int device_type, em_dtype dtype);

/* 0: the op runs as called (nothing to release). 1: ops->t holds the operands to run
 * with, or ops->status a failed cast; call ag_autocast_finish either way. NULL operands
 * and non-floating ones (targets, indices) are passed through. n <= 4. */
int ag_autocast_prepare(em_autocast_ops *ops, em_autocast_policy policy, int n, const em_tensor *const *in);
/* Releases the casts; returns st. */
em_status ag_autocast_finish(em_autocast_ops *ops, em_status st);

/* Turns autocast off for this thread until resumed (em_backward runs without it). */
typedef struct em_autocast_saved {
  unsigned char on[EM_NUM_DEVICE_TYPES];
} em_autocast_saved;
em_autocast_saved ag_autocast_suspend(void);
void ag_autocast_resume(em_autocast_saved saved);

/* Whether the CPU's float32 GEMMs and convolutions compute in bfloat16 now: under CPU
 * autocast with bfloat16, or in the backward of a node recorded under it. The tensors stay
 * float32 (the kernels round their operands, sum in float32; cpu/cpu_dnnl.h). */
int ag_autocast_cpu_bf16(void);
/* The engine's switch for a node's backward; returns the previous value. */
int ag_autocast_cpu_bf16_backward(int on);

/* For tests only: sets the state without em_autocast_set's checks, e.g. bfloat16 on the
 * CPU (whose backend has no bfloat16 math) to exercise the float32 policy there. */
void ag_autocast_force_(int device_type, int enabled, em_dtype dtype);

#endif
