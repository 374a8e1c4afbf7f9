/* norm.c - batch_norm (training with batch statistics and running-statistics updates, or
 * evaluation with the running statistics) and layer_norm. Each records one node whose
 * backward is one backend call (cpu/nn_norm.c). */
#include <math.h>
#include "autograd/autocast.h"
#include "nn_impl.h"

/* ---- batch norm ---- */

static em_status batch_norm_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  const em_tensor *x = n->saved[0], *mean = n->saved[1], *var = n->saved[2], *w = n->saved[3];
  em_tensor *gy = NULL, *gx = NULL, *gw = NULL, *gb = NULL;
  int64_t C = mean->sizes[0];
  em_status st = nn_reshaped(&gy, go[0], x->ndim, x->sizes);
  if (!st && em_node_needs_input_grad(n, 0)) st = em_empty(&gx, x->ndim, x->sizes, x->dtype, x->storage->device);
  if (!st && em_node_needs_input_grad(n, 1)) st = em_empty(&gw, 1, &C, x->dtype, x->storage->device);
  if (!st && em_node_needs_input_grad(n, 2)) st = em_empty(&gb, 1, &C, x->dtype, x->storage->device);
  const em_backend *be = st ? NULL : nn_backend("batch_norm", x);
  if (!st && !be) st = em_last_status();
  if (!st) st = be->batch_norm_backward(gx, gw, gb, gy, x, mean, var, w, n->d[0], (int)n->i[0]);
  if (!st) {
    st = nn_set_grad(n, 0, gx, &gi[0]);
    gi[1] = gw, gi[2] = gb;
    gx = gw = gb = NULL;
  }
  em_tensor *tmp[] = {gy, gx, gw, gb};
  nn_release(4, tmp);
  return st;
}

/* running = (1 - momentum) * running + momentum * value, in place */
static em_status update_running(em_tensor *running, const em_tensor *value, double momentum) {
  em_tensor *r = running;
  em_status st = em_binary_scalar(EM_MUL, &r, running, 1 - momentum, 0);
  return st ? st : em_add_scaled(&r, running, value, momentum);
}

em_status em_nn_batch_norm(em_tensor **out, const em_tensor *x, const em_tensor *weight, const em_tensor *bias,
                           em_tensor *running_mean, em_tensor *running_var, int training, double momentum, double eps) {
  em_autocast_ops ac;
  if (ag_autocast_prepare(&ac, EM_AUTOCAST_FP32, 3, (const em_tensor *[]){x, weight, bias}))
    return ag_autocast_finish(&ac, ac.status ? ac.status
                                             : em_nn_batch_norm(out, ac.t[0], ac.t[1], ac.t[2], running_mean,
                                                                running_var, training, momentum, eps));
  const char *op = "batch_norm";
  em_status st;
  if ((st = nn_check_out(op, out)) || (st = nn_check_float(op, x, "input"))) return st;
  if (x->ndim < 2)
    return em_set_error(EM_ERR_SHAPE, "batch_norm: expected an input [N, C, ...] of at least 2 dims, got shape %s",
                        EM_SHAPE(x));
  int64_t C = x->sizes[1], count = em_tensor_numel(x) / (C ? C : 1);
  if ((st = nn_check_vector(op, weight, "weight", C, x)) || (st = nn_check_vector(op, bias, "bias", C, x)) ||
      (st = nn_check_vector(op, running_mean, "running_mean", C, x)) ||
      (st = nn_check_vector(op, running_var, "running_var", C, x)))
    return st;
  if (!(eps >= 0) || !(momentum >= 0 && momentum <= 1))
    return em_set_error(EM_ERR_ARGUMENT,
                        "batch_norm: got eps = %g and momentum = %g, expected eps >= 0 and momentum in [0, 1]", eps,
                        momentum);
  if (training && count <= 1)
    return em_set_error(EM_ERR_SHAPE,
                        "batch_norm: expected more than 1 value per channel when training, got input of shape %s",
                        EM_SHAPE(x));
  if (!training && (!running_mean || !running_var))
    return em_set_error(EM_ERR_ARGUMENT, "batch_norm: evaluation mode needs running_mean and running_var");
  if (training && ((running_mean && (st = ag_check_inplace(op, running_mean))) ||
                   (running_var && (st = ag_check_inplace(op, running_var)))))
    return st;
  const em_backend *be = nn_backend(op, x);
  if (!be) return em_last_status();
  em_tensor *xc = NULL, *wc = NULL, *bc = NULL, *mean = NULL, *var = NULL, *unbiased = NULL;
  if ((st = nn_contiguous(&xc, x)) || (st = nn_contiguous(&wc, weight)) || (st = nn_contiguous(&bc, bias))) goto done;
  if (training) {
    if ((st = em_empty(&mean, 1, &C, x->dtype, x->storage->device)) ||
        (st = em_empty(&var, 1, &C, x->dtype, x->storage->device)) || (st = be->batch_norm_stats(mean, var, xc)))
      goto done;
    if (running_mean && (st = update_running(running_mean, mean, momentum))) goto done;
    /* the running variance is the unbiased estimate, as PyTorch keeps it */
    if (running_var && ((st = em_binary_scalar(EM_MUL, &unbiased, var, (double)count / (double)(count - 1), 0)) ||
                        (st = update_running(running_var, unbiased, momentum))))
      goto done;
  } else { /* copies: the buffers may change before the backward runs */
    if ((st = em_clone(&mean, running_mean)) || (st = em_clone(&var, running_var))) goto done;
  }
  if ((st = em_empty(out, x->ndim, x->sizes, x->dtype, x->storage->device))) goto done;
  if ((st = be->batch_norm(*out, xc, mean, var, wc, bc, eps))) {
    em_tensor_release(*out);
    *out = NULL;
    goto done;
  }
  const em_tensor *in[3] = {x, weight, bias};
  if (ag_any_requires_grad(3, in)) {
    em_node *n = ag_node_new("BatchNormBackward", batch_norm_backward, 3, in, 1);
    if (n) {
      n->d[0] = eps;
      n->i[0] = training != 0;
      if ((st = ag_node_save(n, 0, xc)) || (st = ag_node_save(n, 1, mean)) || (st = ag_node_save(n, 2, var)) ||
          (st = ag_node_save(n, 3, wc))) {
        ag_node_release(n);
        n = NULL;
      }
    }
    st = ag_finish_record(out, n);
  }
done:;
  em_tensor *tmp[] = {xc, wc, bc, mean, var, unbiased};
  nn_release(6, tmp);
  return st;
}

/* ---- layer norm ---- */

static em_status layer_norm_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  const em_tensor *x = n->saved[0], *mean = n->saved[1], *rstd = n->saved[2], *w = n->saved[3];
  int nd = (int)n->i[0];
  const int64_t *pshape = x->sizes + (x->ndim - nd);
  em_tensor *gy = NULL, *gx = NULL, *gw = NULL, *gb = NULL;
  em_status st = nn_reshaped(&gy, go[0], x->ndim, x->sizes);
  if (!st && em_node_needs_input_grad(n, 0)) st = em_empty(&gx, x->ndim, x->sizes, x->dtype, x->storage->device);
  if (!st && em_node_needs_input_grad(n, 1)) st = em_empty(&gw, nd, pshape, x->dtype, x->storage->device);
  if (!st && em_node_needs_input_grad(n, 2)) st = em_empty(&gb, nd, pshape, x->dtype, x->storage->device);
  const em_backend *be = st ? NULL : nn_backend("layer_norm", x);
  if (!st && !be) st = em_last_status();
  if (!st) st = be->layer_norm_backward(gx, gw, gb, gy, x, mean, rstd, w);
  if (!st) {
    gi[0] = gx, gi[1] = gw, gi[2] = gb;
    gx = gw = gb = NULL;
  }
  em_tensor *tmp[] = {gy, gx, gw, gb};
  nn_release(4, tmp);
  return st;
}

/* t (may be NULL) has the shape of x's last nd dims. */
static em_status check_param(const em_tensor *t, const char *what, const em_tensor *x, int nd) {
  em_status st = nn_check_like("layer_norm", t, what, x);
  if (st || !t) return st;
  const int64_t *want = x->sizes + (x->ndim - nd);
  int ok = t->ndim == nd;
  for (int d = 0; ok && d < nd; d++) ok = t->sizes[d] == want[d];
  if (!ok)
    return em_set_error(EM_ERR_SHAPE, "layer_norm: expected the %s to have shape %s (the input's last %d dims), got %s",
                        what, tn_shape_str(nd, want), nd, EM_SHAPE(t));
  return EM_OK;
}

em_status em_nn_layer_norm(em_tensor **out, const em_tensor *x, int n_dims, const em_tensor *weight,
                           const em_tensor *bias, double eps) {
  em_autocast_ops ac;
  if (ag_autocast_prepare(&ac, EM_AUTOCAST_FP32, 3, (const em_tensor *[]){x, weight, bias}))
    return ag_autocast_finish(&ac,
                              ac.status ? ac.status : em_nn_layer_norm(out, ac.t[0], n_dims, ac.t[1], ac.t[2], eps));
  const char *op = "layer_norm";
  em_status st;
  if ((st = nn_check_out(op, out)) || (st = nn_check_float(op, x, "input"))) return st;
  if (n_dims < 1 || n_dims > x->ndim)
    return em_set_error(EM_ERR_ARGUMENT,
                        "layer_norm: normalising over the last %d dims of an input of shape %s; expected 1..%d dims",
                        n_dims, EM_SHAPE(x), x->ndim);
  if ((st = check_param(weight, "weight", x, n_dims)) || (st = check_param(bias, "bias", x, n_dims))) return st;
  if (!(eps >= 0)) return em_set_error(EM_ERR_ARGUMENT, "layer_norm: got eps = %g, expected eps >= 0", eps);
  const em_backend *be = nn_backend(op, x);
  if (!be) return em_last_status();
  int64_t rows = 1;
  for (int d = 0; d < x->ndim - n_dims; d++) rows *= x->sizes[d];
  em_tensor *xc = NULL, *wc = NULL, *bc = NULL, *mean = NULL, *rstd = NULL;
  if (!(st = nn_contiguous(&xc, x)) && !(st = nn_contiguous(&wc, weight)) && !(st = nn_contiguous(&bc, bias)) &&
      !(st = em_empty(&mean, 1, &rows, x->dtype, x->storage->device)) &&
      !(st = em_empty(&rstd, 1, &rows, x->dtype, x->storage->device)) &&
      !(st = em_empty(out, x->ndim, x->sizes, x->dtype, x->storage->device)) &&
      (st = be->layer_norm(*out, mean, rstd, xc, wc, bc, eps))) {
    em_tensor_release(*out);
    *out = NULL;
  }
  const em_tensor *in[3] = {x, weight, bias};
  if (!st && ag_any_requires_grad(3, in)) {
    em_node *n = ag_node_new("LayerNormBackward", layer_norm_backward, 3, in, 1);
    if (n) {
      n->i[0] = n_dims;
      if ((st = ag_node_save(n, 0, xc)) || (st = ag_node_save(n, 1, mean)) || (st = ag_node_save(n, 2, rstd)) ||
          (st = ag_node_save(n, 3, wc))) {
        ag_node_release(n);
        n = NULL;
      }
    }
    st = ag_finish_record(out, n);
  }
  em_tensor *tmp[] = {xc, wc, bc, mean, rstd};
  nn_release(5, tmp);
  return st;
}
