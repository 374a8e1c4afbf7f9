/* loss.c - cross_entropy, nll_loss, mse_loss and binary_cross_entropy_with_logits.
 *
 * Class-index targets go through one fused backend kernel (log_softmax and the gather of
 * the target's log-probability in one pass, keeping only a logsumexp per sample; see
 * cpu/nn_loss.c). Probability targets, mse_loss and the logistic loss are composed from
 * tensor ops; the logistic loss records one node with its analytic gradient, because
 * composing it from relu/abs would give the wrong subgradient at logits of exactly 0. */
#include <math.h>
#include <string.h>
#include "autograd/autocast.h"
#include "nn_impl.h"

static em_status check_reduction(const char *op, em_reduction r) {
  if (r != EM_REDUCTION_NONE && r != EM_REDUCTION_MEAN && r != EM_REDUCTION_SUM)
    return em_set_error(EM_ERR_ARGUMENT, "%s: unknown reduction %d (expected none, mean or sum)", op, (int)r);
  return EM_OK;
}

/* ---- class indices: cross_entropy and nll_loss ---- */

static em_status class_loss_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  const em_tensor *x = n->saved[0], *lse = n->saved[1], *tw = n->saved[2], *target = n->saved[3], *w = n->saved[4];
  em_class_loss_params p = {n->i[0], n->d[0], (int)n->i[1], (int)n->i[2], (int)n->i[3]};
  const char *op = p.log_input ? "nll_loss" : "cross_entropy";
  em_tensor *gout = NULL, *gx = NULL;
  em_status st = nn_contiguous(&gout, go[0]);
  if (!st) st = em_empty(&gx, x->ndim, x->sizes, x->dtype, x->storage->device);
  const em_backend *be = st ? NULL : nn_backend(op, x);
  if (!st && !be) st = em_last_status();
  if (!st && !(st = be->class_loss_backward(gx, gout, x, lse, tw, target, w, &p))) {
    st = nn_set_grad(n, 0, gx, &gi[0]);
    gx = NULL;
  }
  em_tensor_release(gout);
  em_tensor_release(gx);
  return st;
}

static em_status class_loss(const char *op, em_tensor **out, const em_tensor *input, const em_tensor *target,
                            const em_tensor *weight, const em_class_loss_params *p) {
  em_status st;
  int cdim = input->ndim == 1 ? 0 : 1;
  int64_t C = input->sizes[cdim];
  if ((st = nn_check_vector(op, weight, "weight", C, input))) return st;
  /* target: the input's shape without the class dim */
  int64_t tshape[EM_MAX_DIMS], xshape[3] = {1, C, 1};
  int tnd = 0;
  for (int d = 0; d < input->ndim; d++)
    if (d != cdim) tshape[tnd++] = input->sizes[d];
  if (target->ndim != tnd || memcmp(target->sizes, tshape, sizeof(int64_t) * tnd))
    return em_set_error(EM_ERR_SHAPE,
                        "%s: target of shape %s does not fit input of shape %s (expected target shape %s)", op,
                        EM_SHAPE(target), EM_SHAPE(input), tn_shape_str(tnd, tshape));
  if (input->ndim > 1) xshape[0] = input->sizes[0];
  for (int d = 2; d < input->ndim; d++) xshape[2] *= input->sizes[d];
  const em_backend *be = nn_backend(op, input);
  if (!be) return em_last_status();
  int64_t ns = xshape[0] * xshape[2];
  em_tensor *x = NULL, *t = NULL, *wc = NULL, *lse = NULL, *tw = NULL;
  if (!(st = nn_reshaped(&x, input, 3, xshape)) && !(st = nn_contiguous(&t, target)) &&
      !(st = nn_contiguous(&wc, weight)) &&
      !(st = p->log_input ? EM_OK : em_empty(&lse, 1, &ns, input->dtype, input->storage->device)) &&
      !(st = em_empty(&tw, 0, NULL, input->dtype, input->storage->device)) &&
      !(st =
            em_empty(out, p->reduction == EM_REDUCTION_NONE ? tnd : 0, tshape, input->dtype, input->storage->device)) &&
      (st = be->class_loss(*out, lse, tw, x, t, wc, p))) {
    em_tensor_release(*out);
    *out = NULL;
  }
  const em_tensor *in[1] = {input};
  if (!st && ag_any_requires_grad(1, in)) {
    em_node *n =
        ag_node_new(p->log_input ? "NllLossBackward" : "CrossEntropyLossBackward", class_loss_backward, 1, in, 1);
    if (n) {
      n->i[0] = p->ignore_index, n->i[1] = p->reduction, n->i[2] = p->log_input, n->i[3] = p->base;
      n->d[0] = p->label_smoothing;
      if ((st = ag_node_save(n, 0, x)) || (st = ag_node_save(n, 1, lse)) || (st = ag_node_save(n, 2, tw)) ||
          (st = ag_node_save(n, 3, t)) || (st = ag_node_save(n, 4, wc))) {
        ag_node_release(n);
        n = NULL;
      }
    }
    st = ag_finish_record(out, n);
  }
  em_tensor *tmp[] = {x, t, wc, lse, tw};
  nn_release(5, tmp);
  return st;
}

/* Cross entropy against class probabilities, composed from differentiable ops (the
 * target may require grad): -sum_c w_c t_c log_softmax(x)_c, smoothed targets
 * t (1 - e) + e / C, and the mean taken over samples. */
static em_status soft_cross_entropy(em_tensor **out, const em_tensor *x, const em_tensor *target,
                                    const em_tensor *weight, double smoothing, em_reduction reduction) {
  const char *op = "cross_entropy";
  em_status st;
  if ((st = nn_check_like(op, target, "target", x))) return st;
  if (target->ndim != x->ndim || memcmp(target->sizes, x->sizes, sizeof(int64_t) * x->ndim))
    return em_set_error(EM_ERR_SHAPE, "cross_entropy: probability targets of shape %s must have the input's shape %s",
                        EM_SHAPE(target), EM_SHAPE(x));
  int cdim = x->ndim == 1 ? 0 : 1;
  int64_t C = x->sizes[cdim];
  if ((st = nn_check_vector(op, weight, "weight", C, x))) return st;
  em_tensor *t[8] = {NULL};
  em_tensor *logp = NULL, *tt = NULL, *prod = NULL, *wv = NULL, *s = NULL, *neg = NULL;
  const em_tensor *tgt = target;
  st = em_ag_softmax(&logp, x, cdim, 1);
  if (!st && smoothing > 0 && !(st = em_ag_binary_scalar(EM_MUL, &t[0], target, 1 - smoothing, 0)) &&
      !(st = em_ag_binary_scalar(EM_ADD, &tt, t[0], smoothing / (double)C, 0)))
    tgt = tt;
  if (!st) st = em_ag_binary(EM_MUL, &prod, logp, tgt);
  if (!st && weight) { /* w along the class dim: [C, 1, ...] */
    int64_t wshape[EM_MAX_DIMS];
    for (int d = 0; d < x->ndim - cdim; d++) wshape[d] = d == 0 ? C : 1;
    if (!(st = em_reshape(&wv, weight, x->ndim - cdim, wshape))) st = em_ag_binary(EM_MUL, &t[1], prod, wv);
    if (!st) {
      em_tensor_release(prod);
      prod = t[1];
      t[1] = NULL;
    }
  }
  if (!st) st = em_ag_reduce(EM_SUM, &s, NULL, prod, &cdim, 1, 0, 0);
  if (!st) st = em_ag_unary(EM_NEG, reduction == EM_REDUCTION_NONE ? out : &neg, s);
  if (!st && reduction != EM_REDUCTION_NONE)
    st = em_ag_reduce(reduction == EM_REDUCTION_MEAN ? EM_MEAN : EM_SUM, out, NULL, neg, NULL, 0, 0, 0);
  em_tensor *tmp[] = {t[0], t[1], logp, tt, prod, wv, s, neg};
  nn_release(8, tmp);
  return st;
}

em_status em_nn_cross_entropy(em_tensor **out, const em_tensor *logits, const em_tensor *target,
                              const em_tensor *weight, int64_t ignore_index, double label_smoothing,
                              em_reduction reduction, int base) {
  em_autocast_ops ac;
  if (ag_autocast_prepare(&ac, EM_AUTOCAST_FP32, 3, (const em_tensor *[]){logits, target, weight}))
    return ag_autocast_finish(&ac, ac.status ? ac.status
                                             : em_nn_cross_entropy(out, ac.t[0], ac.t[1], ac.t[2], ignore_index,
                                                                   label_smoothing, reduction, base));
  const char *op = "cross_entropy";
  em_status st;
  if ((st = nn_check_out(op, out)) || (st = nn_check_float(op, logits, "input")) ||
      (st = tn_check_tensor(op, target, "target")) || (st = check_reduction(op, reduction)))
    return st;
  if (logits->ndim < 1)
    return em_set_error(EM_ERR_SHAPE, "cross_entropy: expected an input [N, C, ...] or [C], got shape %s",
                        EM_SHAPE(logits));
  if (!(label_smoothing >= 0 && label_smoothing <= 1))
    return em_set_error(EM_ERR_ARGUMENT, "cross_entropy: got label_smoothing = %g, expected a value in [0, 1]",
                        label_smoothing);
  if (em_dtype_is_floating(target->dtype)) {
    if (ignore_index >= base)
      return em_set_error(EM_ERR_ARGUMENT,
                          "cross_entropy: ignore_index (%lld) is not supported with probability targets (dtype %s)",
                          (long long)ignore_index, em_dtype_name(target->dtype));
    return soft_cross_entropy(out, logits, target, weight, label_smoothing, reduction);
  }
  if ((st = nn_check_index(op, target, "target"))) return st;
  em_class_loss_params p = {ignore_index, label_smoothing, reduction, 0, base};
  return class_loss(op, out, logits, target, weight, &p);
}

em_status em_nn_nll_loss(em_tensor **out, const em_tensor *log_probs, const em_tensor *target, const em_tensor *weight,
                         int64_t ignore_index, em_reduction reduction, int base) {
  em_autocast_ops ac;
  if (ag_autocast_prepare(&ac, EM_AUTOCAST_FP32, 3, (const em_tensor *[]){log_probs, target, weight}))
    return ag_autocast_finish(
        &ac, ac.status ? ac.status : em_nn_nll_loss(out, ac.t[0], ac.t[1], ac.t[2], ignore_index, reduction, base));
  const char *op = "nll_loss";
  em_status st;
  if ((st = nn_check_out(op, out)) || (st = nn_check_float(op, log_probs, "input")) ||
      (st = nn_check_index(op, target, "target")) || (st = check_reduction(op, reduction)))
    return st;
  if (log_probs->ndim < 1)
    return em_set_error(EM_ERR_SHAPE, "nll_loss: expected an input [N, C, ...] or [C], got shape %s",
                        EM_SHAPE(log_probs));
  em_class_loss_params p = {ignore_index, 0, reduction, 1, base};
  return class_loss(op, out, log_probs, target, weight, &p);
}

/* ---- mse_loss: composed, (input - target)^2 then the reduction ---- */

em_status em_nn_mse_loss(em_tensor **out, const em_tensor *input, const em_tensor *target, em_reduction reduction) {
  em_autocast_ops ac;
  if (ag_autocast_prepare(&ac, EM_AUTOCAST_FP32, 2, (const em_tensor *[]){input, target}))
    return ag_autocast_finish(&ac, ac.status ? ac.status : em_nn_mse_loss(out, ac.t[0], ac.t[1], reduction));
  const char *op = "mse_loss";
  em_status st;
  if ((st = nn_check_out(op, out)) || (st = nn_check_float(op, input, "input")) ||
      (st = nn_check_like(op, target, "target", input)) || (st = check_reduction(op, reduction)))
    return st;
  if (!target) return em_set_error(EM_ERR_ARGUMENT, "mse_loss: expected a target tensor, got nil");
  em_tensor *d = NULL, *sq = NULL;
  if (!(st = em_ag_binary(EM_SUB, &d, input, target)))
    st = em_ag_unary(EM_SQUARE, reduction == EM_REDUCTION_NONE ? out : &sq, d);
  if (!st && reduction != EM_REDUCTION_NONE)
    st = em_ag_reduce(reduction == EM_REDUCTION_MEAN ? EM_MEAN : EM_SUM, out, NULL, sq, NULL, 0, 0, 0);
  em_tensor_release(d);
  em_tensor_release(sq);
  return st;
}

/* ---- binary_cross_entropy_with_logits ----
 * loss = w ((1 - y) x + l sp),  sp = softplus(-x) = max(-x, 0) + log1p(exp(-|x|)),
 * l = 1 + (pos_weight - 1) y. dloss/dx = w ((1 - y) - l sigmoid(-x));
 * dloss/dy = w (-x + (pos_weight - 1) sp). */

/* softplus(-x), stable for any x */
static em_tensor *softplus_neg(em_scratch *sc, const em_tensor *x) {
  em_tensor *relu_neg = ag_sc_unary(sc, EM_RELU, ag_sc_unary(sc, EM_NEG, x));
  em_tensor *tail =
      ag_sc_unary(sc, EM_LOG1P, ag_sc_unary(sc, EM_EXP, ag_sc_unary(sc, EM_NEG, ag_sc_unary(sc, EM_ABS, x))));
  return ag_sc_binary(sc, EM_ADD, relu_neg, tail);
}

static em_status bce_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  const em_tensor *x = n->saved[0], *y = n->saved[1], *w = n->saved[2], *pw = n->saved[3];
  em_reduction red = (em_reduction)n->i[0];
  em_scratch sc = {0};
  em_tensor *g = red == EM_REDUCTION_MEAN ? ag_sc_scalar(&sc, EM_DIV, go[0], (double)em_tensor_numel(x)) : go[0];
  if (w) g = ag_sc_binary(&sc, EM_MUL, g, w);
  em_tensor *pw1 = pw ? ag_sc_scalar(&sc, EM_SUB, pw, 1.0) : NULL;
  if (em_node_needs_input_grad(n, 0)) {
    em_tensor *l = pw1 ? ag_sc_scalar(&sc, EM_ADD, ag_sc_binary(&sc, EM_MUL, pw1, y), 1.0) : NULL;
    em_tensor *s = ag_sc_unary(&sc, EM_SIGMOID, ag_sc_unary(&sc, EM_NEG, x));
    if (l) s = ag_sc_binary(&sc, EM_MUL, l, s);
    em_tensor *d = ag_sc_binary(&sc, EM_SUB, ag_sc_rscalar(&sc, EM_SUB, 1.0, y), s);
    em_tensor *gx = ag_sc_binary(&sc, EM_MUL, g, d);
    if (!sc.st) sc.st = ag_finish_input_grad(n, 0, ag_sc_keep(&sc, gx), &gi[0]);
  }
  if (em_node_needs_input_grad(n, 1)) {
    em_tensor *d = ag_sc_unary(&sc, EM_NEG, x);
    if (pw1) d = ag_sc_binary(&sc, EM_ADD, d, ag_sc_binary(&sc, EM_MUL, pw1, softplus_neg(&sc, x)));
    em_tensor *gy = ag_sc_binary(&sc, EM_MUL, g, d);
    if (!sc.st) sc.st = ag_finish_input_grad(n, 1, ag_sc_keep(&sc, gy), &gi[1]);
  }
  return ag_sc_end(&sc);
}

/* t (may be NULL) broadcasts to x's shape. */
static em_status check_broadcast(const char *what, const em_tensor *t, const em_tensor *x) {
  const char *op = "binary_cross_entropy_with_logits";
  em_status st = nn_check_like(op, t, what, x);
  if (st || !t) return st;
  int nd;
  int64_t shape[EM_MAX_DIMS];
  if (tn_broadcast_shapes(op, t->ndim, t->sizes, x->ndim, x->sizes, &nd, shape) || nd != x->ndim ||
      memcmp(shape, x->sizes, sizeof(int64_t) * nd))
    return em_set_error(EM_ERR_SHAPE, "%s: the %s of shape %s does not broadcast to the input's shape %s", op, what,
                        EM_SHAPE(t), EM_SHAPE(x));
  return EM_OK;
}

em_status em_nn_binary_cross_entropy_with_logits(em_tensor **out, const em_tensor *logits, const em_tensor *target,
                                                 const em_tensor *weight, const em_tensor *pos_weight,
                                                 em_reduction reduction) {
  em_autocast_ops ac;
  if (ag_autocast_prepare(&ac, EM_AUTOCAST_FP32, 4, (const em_tensor *[]){logits, target, weight, pos_weight}))
    return ag_autocast_finish(
        &ac, ac.status ? ac.status
                       : em_nn_binary_cross_entropy_with_logits(out, ac.t[0], ac.t[1], ac.t[2], ac.t[3], reduction));
  const char *op = "binary_cross_entropy_with_logits";
  em_status st;
  if ((st = nn_check_out(op, out)) || (st = nn_check_float(op, logits, "input")) ||
      (st = nn_check_like(op, target, "target", logits)) || (st = check_reduction(op, reduction)) ||
      (st = check_broadcast("weight", weight, logits)) || (st = check_broadcast("pos_weight", pos_weight, logits)))
    return st;
  if (!target) return em_set_error(EM_ERR_ARGUMENT, "%s: expected a target tensor, got nil", op);
  if (target->ndim != logits->ndim || memcmp(target->sizes, logits->sizes, sizeof(int64_t) * logits->ndim))
    return em_set_error(EM_ERR_SHAPE, "%s: target of shape %s must have the input's shape %s", op, EM_SHAPE(target),
                        EM_SHAPE(logits));
  em_scratch sc = {0};
  const em_tensor *x = logits, *y = target;
  em_tensor *sp = softplus_neg(&sc, x);
  if (pos_weight)
    sp = ag_sc_binary(
        &sc, EM_MUL, sp,
        ag_sc_scalar(&sc, EM_ADD, ag_sc_binary(&sc, EM_MUL, ag_sc_scalar(&sc, EM_SUB, pos_weight, 1.0), y), 1.0));
  em_tensor *loss = ag_sc_binary(&sc, EM_ADD, ag_sc_binary(&sc, EM_MUL, ag_sc_rscalar(&sc, EM_SUB, 1.0, y), x), sp);
  if (weight) loss = ag_sc_binary(&sc, EM_MUL, loss, weight);
  if (reduction == EM_REDUCTION_NONE) {
    *out = ag_sc_keep(&sc, loss);
  } else if (!sc.st) {
    em_redop r = reduction == EM_REDUCTION_MEAN ? EM_MEAN : EM_SUM;
    sc.st = em_reduce(r, out, NULL, loss, NULL, 0, 0, 0);
  }
  if ((st = ag_sc_end(&sc))) {
    em_tensor_release(*out);
    *out = NULL;
    return st;
  }
  const em_tensor *in[2] = {logits, target};
  if (!ag_any_requires_grad(2, in)) return EM_OK;
  em_node *n = ag_node_new("BinaryCrossEntropyWithLogitsBackward", bce_backward, 2, in, 1);
  if (n) {
    n->i[0] = reduction;
    if ((st = ag_node_save(n, 0, x)) || (st = ag_node_save(n, 1, y)) || (st = ag_node_save(n, 2, weight)) ||
        (st = ag_node_save(n, 3, pos_weight))) {
      ag_node_release(n);
      n = NULL;
    }
  }
  return ag_finish_record(out, n);
}
