/* optim.c - fused optimizer updates over whole parameter lists (ember/optim.h).
 *
 * This layer checks the hyper-parameters and every tensor (shape, dtype, device, state
 * present) before anything is written, so a bad call leaves all parameters untouched;
 * then it calls the device backend once per list. The updates write parameters in place
 * without going through autograd, as PyTorch's optimizers run under no_grad. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "optim_impl.h"

static bool same_shape(const em_tensor *a, const em_tensor *b) {
  return a->ndim == b->ndim && !memcmp(a->sizes, b->sizes, sizeof(int64_t) * a->ndim);
}

static bool same_device(em_device a, em_device b) { return a.type == b.type && a.index == b.index; }

/* Checks a state tensor (momentum buffer, moment) against its parameter. */
static em_status check_state(const char *op, int i, int n, const em_tensor *p, const em_tensor *s, const char *what) {
  if (!s)
    return em_set_error(EM_ERR_ARGUMENT, "%s: parameter %d of %d has a gradient but no %s (NULL)", op, i + 1, n, what);
  em_status st = tn_check_tensor(op, s, what);
  if (st) return st;
  if (!same_shape(p, s))
    return em_set_error(EM_ERR_SHAPE, "%s: parameter %d of %d has shape %s but its %s has shape %s", op, i + 1, n,
                        EM_SHAPE(p), what, EM_SHAPE(s));
  if (s->dtype != p->dtype)
    return em_set_error(EM_ERR_DTYPE, "%s: parameter %d of %d is %s but its %s is %s", op, i + 1, n,
                        em_dtype_name(p->dtype), what, em_dtype_name(s->dtype));
  if (!same_device(s->storage->device, p->storage->device))
    return em_set_error(EM_ERR_DEVICE, "%s: parameter %d of %d and its %s are on different devices", op, i + 1, n,
                        what);
  return EM_OK;
}

/* Checks parameter i and its gradient; *device is the device of the first parameter. */
static em_status check_param(const char *op, int i, int n, const em_tensor *p, const em_tensor *g, em_device *device) {
  if (!p) return em_set_error(EM_ERR_ARGUMENT, "%s: parameter %d of %d is NULL", op, i + 1, n);
  em_status st = tn_check_tensor(op, p, "parameter");
  if (st) return st;
  if (i == 0) *device = p->storage->device;
  else if (!same_device(p->storage->device, *device))
    return em_set_error(EM_ERR_DEVICE, "%s: parameter %d of %d is on another device than parameter 1", op, i + 1, n);
  if (!g) return EM_OK;
  if (p->dtype != EM_FLOAT32 && p->dtype != EM_FLOAT64)
    return em_set_error(EM_ERR_DTYPE, "%s: parameter %d of %d is %s, expected float32 or float64", op, i + 1, n,
                        em_dtype_name(p->dtype));
  if ((st = tn_check_tensor(op, g, "gradient"))) return st;
  if (!same_shape(p, g))
    return em_set_error(EM_ERR_SHAPE, "%s: parameter %d of %d has shape %s but its gradient has shape %s", op, i + 1, n,
                        EM_SHAPE(p), EM_SHAPE(g));
  if (g->dtype != p->dtype)
    return em_set_error(EM_ERR_DTYPE, "%s: parameter %d of %d is %s but its gradient is %s", op, i + 1, n,
                        em_dtype_name(p->dtype), em_dtype_name(g->dtype));
  if (!same_device(g->storage->device, p->storage->device))
    return em_set_error(EM_ERR_DEVICE, "%s: parameter %d of %d and its gradient are on different devices", op, i + 1,
                        n);
  return EM_OK;
}

static em_status check_list(const char *op, int n, const void *params, const void *grads) {
  if (n < 0) return em_set_error(EM_ERR_ARGUMENT, "%s: the number of parameters is %d, expected >= 0", op, n);
  if (n > 0 && (!params || !grads))
    return em_set_error(EM_ERR_ARGUMENT, "%s: expected arrays of parameters and gradients, got NULL", op);
  return EM_OK;
}

static em_status check_hyper(const char *op, const char *name, double v, double lo, bool lo_open, double hi,
                             bool hi_open, const char *expected) {
  bool ok = isfinite(v) || (isinf(v) && isinf(hi) && v > 0 && !hi_open);
  if (ok) ok = lo_open ? v > lo : v >= lo;
  if (ok && isfinite(hi)) ok = hi_open ? v < hi : v <= hi;
  /* fabs: a NaN prints as nan whatever its sign bit */
  if (!ok)
    return em_set_error(EM_ERR_ARGUMENT, "%s: %s is %g, expected %s", op, name, isnan(v) ? fabs(v) : v, expected);
  return EM_OK;
}

em_status em_optim_sgd(int n, em_tensor *const *params, em_tensor *const *grads, em_tensor *const *momentum_bufs,
                       double lr, double momentum, double dampening, double weight_decay, int nesterov, int first_step,
                       int maximize) {
  const char *op = "sgd";
  em_status st;
  if ((st = check_list(op, n, params, grads)) ||
      (st = check_hyper(op, "lr", lr, 0, false, INFINITY, true, "a finite number >= 0")) ||
      (st = check_hyper(op, "momentum", momentum, 0, false, INFINITY, true, "a finite number >= 0")) ||
      (st = check_hyper(op, "dampening", dampening, 0, false, 1, false, "a number in [0, 1]")) ||
      (st = check_hyper(op, "weight_decay", weight_decay, 0, false, INFINITY, true, "a finite number >= 0")))
    return st;
  if (nesterov && (momentum <= 0 || dampening != 0))
    return em_set_error(EM_ERR_ARGUMENT,
                        "sgd: nesterov momentum requires momentum > 0 and dampening = 0, got momentum %g and "
                        "dampening %g",
                        momentum, dampening);
  if (momentum != 0 && n > 0 && !momentum_bufs)
    return em_set_error(EM_ERR_ARGUMENT, "sgd: momentum is %g but no momentum buffers were given (NULL)", momentum);
  em_device device = {0, 0};
  int any = 0;
  for (int i = 0; i < n; i++) {
    if ((st = check_param(op, i, n, params[i], grads[i], &device))) return st;
    if (!grads[i]) continue;
    any = 1;
    if (momentum != 0 && (st = check_state(op, i, n, params[i], momentum_bufs[i], "momentum buffer"))) return st;
  }
  if (!any) return EM_OK;
  const em_backend *be = tn_backend_for(op, device);
  if (!be) return em_last_status();
  em_sgd_args args = {.lr = lr,
                      .momentum = momentum,
                      .dampening = dampening,
                      .weight_decay = weight_decay,
                      .nesterov = nesterov != 0,
                      .first_step = first_step != 0,
                      .maximize = maximize != 0};
  return be->optim_sgd(n, params, (const em_tensor *const *)grads, momentum != 0 ? momentum_bufs : NULL, &args);
}

em_status em_optim_adam(int n, em_tensor *const *params, em_tensor *const *grads, em_tensor *const *exp_avgs,
                        em_tensor *const *exp_avg_sqs, double lr, double beta1, double beta2, double eps,
                        double weight_decay, int decoupled, int64_t step, int maximize) {
  const char *op = decoupled ? "adamw" : "adam";
  em_status st;
  if ((st = check_list(op, n, params, grads)) ||
      (st = check_hyper(op, "lr", lr, 0, false, INFINITY, true, "a finite number >= 0")) ||
      (st = check_hyper(op, "beta1", beta1, 0, false, 1, true, "a number in [0, 1)")) ||
      (st = check_hyper(op, "beta2", beta2, 0, false, 1, true, "a number in [0, 1)")) ||
      (st = check_hyper(op, "eps", eps, 0, false, INFINITY, true, "a finite number >= 0")) ||
      (st = check_hyper(op, "weight_decay", weight_decay, 0, false, INFINITY, true, "a finite number >= 0")))
    return st;
  if (step < 1)
    return em_set_error(EM_ERR_ARGUMENT, "%s: step is %lld, expected >= 1 (steps count from 1)", op, (long long)step);
  if (n > 0 && (!exp_avgs || !exp_avg_sqs))
    return em_set_error(EM_ERR_ARGUMENT, "%s: expected arrays of exp_avg and exp_avg_sq state tensors, got NULL", op);
  em_device device = {0, 0};
  int any = 0;
  for (int i = 0; i < n; i++) {
    if ((st = check_param(op, i, n, params[i], grads[i], &device))) return st;
    if (!grads[i]) continue;
    any = 1;
    if ((st = check_state(op, i, n, params[i], exp_avgs[i], "exp_avg")) ||
        (st = check_state(op, i, n, params[i], exp_avg_sqs[i], "exp_avg_sq")))
      return st;
  }
  if (!any) return EM_OK;
  const em_backend *be = tn_backend_for(op, device);
  if (!be) return em_last_status();
  em_adam_args args = {.lr = lr,
                       .beta1 = beta1,
                       .beta2 = beta2,
                       .eps = eps,
                       .weight_decay = weight_decay,
                       .decoupled = decoupled != 0,
                       .maximize = maximize != 0,
                       .step = step};
  return be->optim_adam(n, params, (const em_tensor *const *)grads, exp_avgs, exp_avg_sqs, &args);
}

em_status optim_check_grads(const char *op, int n, em_tensor *const *grads, bool any_float, const em_backend **be) {
  *be = NULL;
  if (n < 0) return em_set_error(EM_ERR_ARGUMENT, "%s: the number of gradients is %d, expected >= 0", op, n);
  if (n > 0 && !grads) return em_set_error(EM_ERR_ARGUMENT, "%s: expected an array of gradients, got NULL", op);
  em_device device = {0, 0};
  int first = -1;
  em_status st;
  for (int i = 0; i < n; i++) {
    const em_tensor *g = grads[i];
    if (!g) continue;
    if ((st = tn_check_tensor(op, g, "gradient"))) return st;
    bool ok = any_float ? em_dtype_is_floating(g->dtype) : g->dtype == EM_FLOAT32 || g->dtype == EM_FLOAT64;
    if (!ok)
      return em_set_error(EM_ERR_DTYPE, "%s: gradient %d of %d is %s, expected %s", op, i + 1, n,
                          em_dtype_name(g->dtype), any_float ? "a floating dtype" : "float32 or float64");
    if (first < 0) first = i, device = g->storage->device;
    else if (!same_device(g->storage->device, device))
      return em_set_error(EM_ERR_DEVICE, "%s: gradient %d of %d is on another device than gradient %d", op, i + 1, n,
                          first + 1);
  }
  if (first < 0) return EM_OK;
  *be = tn_backend_for(op, device);
  return *be ? EM_OK : em_last_status();
}

/* PyTorch's clip_grad_norm_: total = the norm of all gradients together; when
 * max_norm / (total + 1e-6) < 1 every gradient is scaled by it. */
em_status em_optim_clip_grad_norm(int n, em_tensor *const *grads, double max_norm, double norm_type,
                                  double *total_norm) {
  const char *op = "clip_grad_norm";
  em_status st;
  if (!total_norm) return em_set_error(EM_ERR_ARGUMENT, "%s: total_norm must not be NULL", op);
  *total_norm = 0;
  if ((st = check_hyper(op, "max_norm", max_norm, 0, false, INFINITY, false, "a number >= 0"))) return st;
  if (!(norm_type > 0))
    return em_set_error(EM_ERR_ARGUMENT, "%s: norm_type is %g, expected a number > 0 (or inf)", op, norm_type);
  const em_backend *be = NULL;
  if ((st = optim_check_grads(op, n, grads, false, &be)) || !be) return st;
  double acc = 0;
  if ((st = be->optim_grad_norm(n, (const em_tensor *const *)grads, norm_type, &acc))) return st;
  double total = isinf(norm_type) ? acc : norm_type == 2 ? sqrt(acc) : pow(acc, 1.0 / norm_type);
  *total_norm = total;
  double coef = max_norm / (total + 1e-6);
  if (!(coef < 1)) return EM_OK; /* also a NaN norm: nothing sensible to scale by */
  for (int i = 0; i < n; i++) {
    if (!grads[i]) continue;
    em_tensor *g = grads[i];
    if ((st = em_binary_scalar(EM_MUL, &g, g, coef, 0))) return st;
  }
  return EM_OK;
}
