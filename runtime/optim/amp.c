/* amp.c - loss scaling for mixed-precision training (ember/optim.h): unscaling the
 * gradients of a scaled loss and telling whether any of them overflowed, for GradScaler
 * (lua/ember/amp.lua). Every gradient is checked before anything is written. */
#include <math.h>
#include "optim_impl.h"

em_status em_amp_unscale_(int n, em_tensor *const *grads, double inv_scale, int *found_inf) {
  const char *op = "amp_unscale";
  if (!found_inf) return em_set_error(EM_ERR_ARGUMENT, "%s: found_inf must not be NULL", op);
  *found_inf = 0;
  if (!(isfinite(inv_scale) && inv_scale > 0))
    return em_set_error(EM_ERR_ARGUMENT, "%s: inv_scale is %g, expected a finite number > 0", op, inv_scale);
  const em_backend *be = NULL;
  em_status st = optim_check_grads(op, n, grads, true, &be);
  if (st || !be) return st;
  return be->amp_unscale(n, grads, inv_scale, found_inf);
}
