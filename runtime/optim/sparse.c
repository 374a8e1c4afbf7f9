/* sparse.c - row-wise optimizer updates (ember/sparse.h em_optim_rows): SGD, Adagrad and
 * row-wise Adagrad over a dense gradient or a row-sparse one, whose untouched rows are
 * never read or written. Checks everything before the backend writes anything. */
#include <math.h>
#include <string.h>
#include "autograd/autograd_impl.h"
#include "optim_impl.h"

static em_status check_like(const char *op, const char *what, const em_tensor *t, const em_tensor *param,
                            int64_t rows_only) {
  em_status st = tn_check_tensor(op, t, what);
  if (st) return st;
  bool shape_ok = rows_only >= 0 ? (t->ndim == 1 && t->sizes[0] == rows_only)
                                 : (t->ndim == param->ndim && !memcmp(t->sizes, param->sizes, sizeof(int64_t) * t->ndim));
  if (!shape_ok)
    return em_set_error(EM_ERR_SHAPE, "%s: the parameter has shape %s but its %s has shape %s%s", op,
                        EM_SHAPE(param), what, EM_SHAPE(t), rows_only >= 0 ? " (expected one value per row)" : "");
  if (t->dtype != param->dtype)
    return em_set_error(EM_ERR_DTYPE, "%s: the parameter is %s but its %s is %s", op, em_dtype_name(param->dtype), what,
                        em_dtype_name(t->dtype));
  if (t->storage->device.type != param->storage->device.type || t->storage->device.index != param->storage->device.index)
    return em_set_error(EM_ERR_DEVICE, "%s: the parameter and its %s are on different devices", op, what);
  return EM_OK;
}

em_status em_optim_rows(em_row_rule rule, em_tensor *param, const em_tensor *grad, const em_sparse_grad *sgrad,
                        em_tensor *state, double lr, double eps, double weight_decay, int maximize) {
  const char *names[] = {"sgd", "adagrad", "rowwise_adagrad"};
  if ((int)rule < 0 || rule > EM_ROWS_ROWWISE_ADAGRAD)
    return em_set_error(EM_ERR_ARGUMENT, "optim_rows: unknown rule %d (expected sgd, adagrad or rowwise_adagrad)",
                        (int)rule);
  const char *op = names[rule];
  em_status st;
  if (!(isfinite(lr) && lr >= 0)) return em_set_error(EM_ERR_ARGUMENT, "%s: lr is %g, expected a finite number >= 0", op, lr);
  if (!(isfinite(eps) && eps >= 0)) return em_set_error(EM_ERR_ARGUMENT, "%s: eps is %g, expected a finite number >= 0", op, eps);
  if (!(isfinite(weight_decay) && weight_decay >= 0))
    return em_set_error(EM_ERR_ARGUMENT, "%s: weight_decay is %g, expected a finite number >= 0", op, weight_decay);
  if ((st = tn_check_tensor(op, param, "parameter"))) return st;
  if (param->dtype != EM_FLOAT32 && param->dtype != EM_FLOAT64)
    return em_set_error(EM_ERR_DTYPE, "%s: the parameter is %s, expected float32 or float64", op,
                        em_dtype_name(param->dtype));
  if (!em_tensor_is_contiguous(param))
    return em_set_error(EM_ERR_ARGUMENT, "%s: the parameter (shape %s) must be contiguous", op, EM_SHAPE(param));
  if (param->ndim < 1) return em_set_error(EM_ERR_SHAPE, "%s: the parameter is 0-d, expected rows", op);
  if (!grad == !sgrad)
    return em_set_error(EM_ERR_ARGUMENT, "%s: expected either a dense or a sparse gradient (got %s)", op,
                        grad ? "both" : "neither");
  int64_t R = param->sizes[0], D = R ? em_tensor_numel(param) / R : 0;
  if (sgrad) {
    if (weight_decay != 0)
      return em_set_error(EM_ERR_ARGUMENT, "%s: weight_decay is %g but the gradient is sparse (weight decay would "
                          "touch every row; as in PyTorch, it is not supported with sparse gradients)", op, weight_decay);
    if (em_sparse_grad_num_rows(sgrad) != R || param->ndim != 2)
      return em_set_error(EM_ERR_SHAPE, "%s: a sparse gradient of %lld rows for a parameter of shape %s", op,
                          (long long)em_sparse_grad_num_rows(sgrad), EM_SHAPE(param));
  } else if ((st = check_like(op, "gradient", grad, param, -1))) {
    return st;
  }
  if (rule == EM_ROWS_SGD && state)
    return em_set_error(EM_ERR_ARGUMENT, "%s: takes no state tensor", op);
  if (rule != EM_ROWS_SGD) {
    if (!state) return em_set_error(EM_ERR_ARGUMENT, "%s: the state tensor (the sums of squares) is NULL", op);
    if ((st = check_like(op, "state", state, param, rule == EM_ROWS_ROWWISE_ADAGRAD ? R : -1))) return st;
    if (!em_tensor_is_contiguous(state)) return em_set_error(EM_ERR_ARGUMENT, "%s: the state must be contiguous", op);
  }
  const em_backend *be = ag_sparse_backend(op, param->storage->device);
  if (!be) return em_last_status();
  em_tensor *rows = sgrad ? em_sparse_grad_indices(sgrad) : NULL;
  em_tensor *values = sgrad ? em_sparse_grad_values(sgrad) : NULL, *g2 = NULL;
  int64_t gshape[2] = {sgrad ? rows->sizes[0] : R, D};
  if (sgrad && (values->dtype != param->dtype || values->sizes[1] != D))
    st = em_set_error(EM_ERR_DTYPE, "%s: the parameter is %s %s, its sparse gradient's values %s %s", op,
                      em_dtype_name(param->dtype), EM_SHAPE(param), em_dtype_name(values->dtype), EM_SHAPE(values));
  else st = em_reshape(&g2, sgrad ? values : grad, 2, gshape); /* a contiguous [K, D] (copied if need be) */
  if (!st && !em_tensor_is_contiguous(g2)) {
    em_tensor *c = NULL;
    st = em_contiguous(&c, g2);
    em_tensor_release(g2);
    g2 = c;
  }
  if (!st) {
    em_row_optim_args args = {.rule = rule, .maximize = maximize != 0, .lr = lr, .eps = eps, .weight_decay = weight_decay};
    st = be->optim_rows(param, rows, g2, state, &args);
  }
  em_tensor_release(rows);
  em_tensor_release(values);
  em_tensor_release(g2);
  return st;
}
