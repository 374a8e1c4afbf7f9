/* amp.c - loss scaling for mixed-precision training (ember/optim.h): unscaling the
 * gradients of a scaled loss and telling whether any of them overflowed, for GradScaler
 * (lua/ember/amp.lua). Every gradient is checked before anything is written. */
#include <math.h>
#include "ember/optim.h"
#include "tensor/backend.h"

static bool same_device(em_device a, em_device b) { return a.type == b.type && a.index == b.index; }

em_status em_amp_unscale_(int n, em_tensor *const *grads, double inv_scale, int *found_inf) {
  const char *op = "amp_unscale";
  if (!found_inf) return em_set_error(EM_ERR_ARGUMENT, "%s: found_inf must not be NULL", op);
  *found_inf = 0;
  if (n < 0) return em_set_error(EM_ERR_ARGUMENT, "%s: the number of gradients is %d, expected >= 0", op, n);
  if (n > 0 && !grads) return em_set_error(EM_ERR_ARGUMENT, "%s: expected an array of gradients, got NULL", op);
  if (!(isfinite(inv_scale) && inv_scale > 0))
    return em_set_error(EM_ERR_ARGUMENT, "%s: inv_scale is %g, expected a finite number > 0", op, inv_scale);
  em_device device = {0, 0};
  int first = -1;
  em_status st;
  for (int i = 0; i < n; i++) {
    const em_tensor *g = grads[i];
    if (!g) continue;
    if ((st = tn_check_tensor(op, g, "gradient"))) return st;
    if (!em_dtype_is_floating(g->dtype))
      return em_set_error(EM_ERR_DTYPE, "%s: gradient %d of %d is %s, expected a floating dtype", op, i + 1, n,
                          em_dtype_name(g->dtype));
    if (first < 0) first = i, device = g->storage->device;
    else if (!same_device(g->storage->device, device))
      return em_set_error(EM_ERR_DEVICE, "%s: gradient %d of %d is on another device than gradient %d", op, i + 1, n,
                          first + 1);
  }
  if (first < 0) return EM_OK;
  const em_backend *be = tn_backend_for(op, device);
  if (!be) return em_last_status();
  return EM_BACKEND_CALL(op, be, amp_unscale, n, grads, inv_scale, found_inf);
}
