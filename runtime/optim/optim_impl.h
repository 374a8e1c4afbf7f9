/* optim_impl.h - what the optimizer files (optim.c, amp.c) share beyond ember/optim.h. */
#ifndef EMBER_OPTIM_IMPL_H
#define EMBER_OPTIM_IMPL_H

#include <stdbool.h>
#include "ember/optim.h"
#include "tensor/backend.h"

/* Checks a list of n gradients (NULL entries are skipped): an array when n > 0, each a
 * valid tensor of a floating dtype (float32/float64 only unless any_float, which also takes
 * float16/bfloat16), all on one device. *be receives that device's backend, or NULL when
 * every entry is NULL (nothing to do). Errors name op, the gradient's position and the
 * dtype or device that is wrong. */
em_status optim_check_grads(const char *op, int n, em_tensor *const *grads, bool any_float, const em_backend **be);

#endif
