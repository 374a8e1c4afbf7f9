/* ops_elementwise.c - differentiable elementwise ops and their backward functions. */
#include <math.h>
#include "autograd_impl.h"
#include "tensor/backend.h"

static const char *binop_name[EM_NUM_BINOPS] = {
    [EM_ADD] = "AddBackward",         [EM_SUB] = "SubBackward",   [EM_MUL] = "MulBackward",
    [EM_DIV] = "DivBackward",         [EM_POW] = "PowBackward",   [EM_MAXIMUM] = "MaximumBackward",
    [EM_MINIMUM] = "MinimumBackward", [EM_FMOD] = "FmodBackward", [EM_ATAN2] = "Atan2Backward",
};

static const char *unop_name[EM_NUM_UNOPS] = {
    [EM_NEG] = "NegBackward",       [EM_ABS] = "AbsBackward",     [EM_EXP] = "ExpBackward",
    [EM_LOG] = "LogBackward",       [EM_SQRT] = "SqrtBackward",   [EM_SIN] = "SinBackward",
    [EM_COS] = "CosBackward",       [EM_TANH] = "TanhBackward",   [EM_SIGMOID] = "SigmoidBackward",
    [EM_RELU] = "ReluBackward",     [EM_SIGN] = "SignBackward",   [EM_FLOOR] = "FloorBackward",
    [EM_CEIL] = "CeilBackward",     [EM_ROUND] = "RoundBackward", [EM_RECIPROCAL] = "ReciprocalBackward",
    [EM_SQUARE] = "SquareBackward", [EM_RSQRT] = "RsqrtBackward", [EM_LOG1P] = "Log1pBackward",
    [EM_EXPM1] = "Expm1Backward",   [EM_ERF] = "ErfBackward",     [EM_GELU] = "GeluBackward",
    [EM_SILU] = "SiluBackward",   [EM_LOG2] = "Log2Backward",   [EM_LOG10] = "Log10Backward",
};

static int is_differentiable_binop(em_binop op) { return op <= EM_ATAN2; }

/* ---- a op b ---- */

static em_status binary_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  em_tensor *g = go[0];
  if (!g) return EM_OK;
  em_binop op = (em_binop)n->i[0];
  const em_tensor *a = n->saved[0], *b = n->saved[1], *out = n->saved[2];
  em_scratch sc = {0};
  em_tensor *ga = NULL, *gb = NULL;
  bool need_a = em_node_needs_input_grad(n, 0), need_b = em_node_needs_input_grad(n, 1);
  switch (op) {
    case EM_ADD: ga = g, gb = g; break;
    case EM_SUB:
      ga = g;
      if (need_b) gb = ag_sc_unary(&sc, EM_NEG, g);
      break;
    case EM_MUL:
      if (need_a) ga = ag_sc_binary(&sc, EM_MUL, g, b);
      if (need_b) gb = ag_sc_binary(&sc, EM_MUL, g, a);
      break;
    case EM_DIV:
      if (need_a) ga = ag_sc_binary(&sc, EM_DIV, g, b);
      if (need_b) gb = ag_sc_unary(&sc, EM_NEG, ag_sc_binary(&sc, EM_DIV, ag_sc_binary(&sc, EM_MUL, g, out), b));
      break;
    case EM_POW: /* d(a^b)/da = b a^(b-1); d/db = a^b ln a */
      if (need_a)
        ga = ag_sc_binary(&sc, EM_MUL, g,
                          ag_sc_binary(&sc, EM_MUL, b, ag_sc_binary(&sc, EM_POW, a, ag_sc_scalar(&sc, EM_SUB, b, 1))));
      if (need_b) gb = ag_sc_binary(&sc, EM_MUL, ag_sc_binary(&sc, EM_MUL, g, out), ag_sc_unary(&sc, EM_LOG, a));
      break;
    case EM_MAXIMUM:
    case EM_MINIMUM: { /* ties share the gradient equally, as PyTorch does */
      em_binop wins = op == EM_MAXIMUM ? EM_GT : EM_LT;
      em_tensor *half = ag_sc_scalar(&sc, EM_MUL, ag_sc_binary(&sc, EM_EQ, a, b), 0.5);
      if (need_a) ga = ag_sc_binary(&sc, EM_MUL, g, ag_sc_binary(&sc, EM_ADD, ag_sc_binary(&sc, wins, a, b), half));
      if (need_b) gb = ag_sc_binary(&sc, EM_MUL, g, ag_sc_binary(&sc, EM_ADD, ag_sc_binary(&sc, wins, b, a), half));
      break;
    }
    case EM_FMOD: /* fmod(a, b) = a - trunc(a/b) b: d/da = 1, d/db = -trunc(a/b) */
      ga = g;
      if (need_b) {
        em_tensor *q = ag_sc_binary(&sc, EM_DIV, a, b);
        em_tensor *tq = ag_sc_binary(&sc, EM_MUL, ag_sc_unary(&sc, EM_SIGN, q),
                                     ag_sc_unary(&sc, EM_FLOOR, ag_sc_unary(&sc, EM_ABS, q)));
        gb = ag_sc_unary(&sc, EM_NEG, ag_sc_binary(&sc, EM_MUL, g, tq));
      }
      break;
    case EM_ATAN2: { /* d/da = b / (a^2 + b^2), d/db = -a / (a^2 + b^2) */
      em_tensor *r2 = ag_sc_binary(&sc, EM_ADD, ag_sc_unary(&sc, EM_SQUARE, a), ag_sc_unary(&sc, EM_SQUARE, b));
      em_tensor *gr = ag_sc_binary(&sc, EM_DIV, g, r2);
      if (need_a) ga = ag_sc_binary(&sc, EM_MUL, gr, b);
      if (need_b) gb = ag_sc_unary(&sc, EM_NEG, ag_sc_binary(&sc, EM_MUL, gr, a));
      break;
    }
    default: return em_set_error(EM_ERR_UNSUPPORTED, "%s: no derivative", n->name);
  }
  if (!sc.st && need_a) {
    em_tensor_retain(ga);
    sc.st = ag_finish_input_grad(n, 0, ga, &gi[0]);
  }
  if (!sc.st && need_b) {
    em_tensor_retain(gb);
    sc.st = ag_finish_input_grad(n, 1, gb, &gi[1]);
  }
  return ag_sc_end(&sc);
}

em_status em_ag_binary(em_binop op, em_tensor **out, const em_tensor *a, const em_tensor *b) {
  const em_tensor *in[2] = {a, b};
  bool record = is_differentiable_binop(op) && ag_any_requires_grad(2, in);
  em_status st;
  if (record && (st = ag_check_out_free(binop_name[op], out))) return st;
  if ((st = em_binary(op, out, a, b)) || !record) return st;
  em_node *n = ag_node_new(binop_name[op], binary_backward, 2, in, 1);
  if (n) {
    n->i[0] = op;
    if (op == EM_MUL || op == EM_POW || op == EM_MAXIMUM || op == EM_MINIMUM || op == EM_FMOD || op == EM_ATAN2)
      ag_node_save(n, 0, a);
    if (op != EM_ADD && op != EM_SUB) ag_node_save(n, 1, b);
    if (op == EM_DIV || op == EM_POW) ag_node_save(n, 2, *out);
  }
  return ag_finish_record(out, n);
}

/* ---- a op s, s op a ---- */

static em_status scalar_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  em_tensor *g = go[0];
  if (!g) return EM_OK;
  em_binop op = (em_binop)n->i[0];
  int reversed = (int)n->i[1];
  double s = n->d[0];
  const em_tensor *a = n->saved[0], *out = n->saved[2];
  em_scratch sc = {0};
  em_tensor *ga = NULL;
  switch (op) {
    case EM_ADD: ga = g; break;
    case EM_SUB: ga = reversed ? ag_sc_unary(&sc, EM_NEG, g) : g; break;
    case EM_MUL: ga = ag_sc_scalar(&sc, EM_MUL, g, s); break;
    case EM_DIV:
      ga = reversed ? ag_sc_unary(&sc, EM_NEG, ag_sc_binary(&sc, EM_DIV, ag_sc_binary(&sc, EM_MUL, g, out), a))
                    : ag_sc_scalar(&sc, EM_DIV, g, s);
      break;
    case EM_POW:
      if (reversed) ga = ag_sc_scalar(&sc, EM_MUL, ag_sc_binary(&sc, EM_MUL, g, out), log(s));
      else if (s == 0) ga = ag_sc_scalar(&sc, EM_MUL, g, 0.0);
      else ga = ag_sc_binary(&sc, EM_MUL, g, ag_sc_scalar(&sc, EM_MUL, ag_sc_scalar(&sc, EM_POW, a, s - 1), s));
      break;
    case EM_MAXIMUM:
    case EM_MINIMUM: {
      em_binop wins = op == EM_MAXIMUM ? EM_GT : EM_LT;
      em_tensor *w = ag_sc_binary(&sc, EM_ADD, ag_sc_scalar(&sc, wins, a, s),
                                  ag_sc_scalar(&sc, EM_MUL, ag_sc_scalar(&sc, EM_EQ, a, s), 0.5));
      ga = ag_sc_binary(&sc, EM_MUL, g, w);
      break;
    }
    case EM_FMOD:
      if (!reversed) {
        ga = g;
        break;
      }
      /* fall through: s fmod a has derivative -trunc(s/a) in a */
      {
        em_tensor *q = ag_sc_rscalar(&sc, EM_DIV, s, a);
        em_tensor *tq = ag_sc_binary(&sc, EM_MUL, ag_sc_unary(&sc, EM_SIGN, q),
                                     ag_sc_unary(&sc, EM_FLOOR, ag_sc_unary(&sc, EM_ABS, q)));
        ga = ag_sc_unary(&sc, EM_NEG, ag_sc_binary(&sc, EM_MUL, g, tq));
      }
      break;
    case EM_ATAN2: { /* atan2(a, s): s / (a^2 + s^2); atan2(s, a): -s / (a^2 + s^2) */
      em_tensor *r2 = ag_sc_scalar(&sc, EM_ADD, ag_sc_unary(&sc, EM_SQUARE, a), s * s);
      ga = ag_sc_binary(&sc, EM_DIV, ag_sc_scalar(&sc, EM_MUL, g, reversed ? -s : s), r2);
      break;
    }
    default: return em_set_error(EM_ERR_UNSUPPORTED, "%s: no derivative", n->name);
  }
  if (!sc.st) {
    em_tensor_retain(ga);
    sc.st = ag_finish_input_grad(n, 0, ga, &gi[0]);
  }
  return ag_sc_end(&sc);
}

em_status em_ag_binary_scalar(em_binop op, em_tensor **out, const em_tensor *a, double s, int reversed) {
  const em_tensor *in[1] = {a};
  bool record = is_differentiable_binop(op) && ag_any_requires_grad(1, in);
  em_status st;
  if (record && (st = ag_check_out_free(binop_name[op], out))) return st;
  if ((st = em_binary_scalar(op, out, a, s, reversed)) || !record) return st;
  em_node *n = ag_node_new(binop_name[op], scalar_backward, 1, in, 1);
  if (n) {
    n->i[0] = op;
    n->i[1] = reversed;
    n->d[0] = s;
    if (op == EM_POW || op == EM_MAXIMUM || op == EM_MINIMUM || op == EM_ATAN2 || (op == EM_DIV && reversed) ||
        (op == EM_FMOD && reversed))
      ag_node_save(n, 0, a);
    if (op == EM_DIV || op == EM_POW) ag_node_save(n, 2, *out);
  }
  return ag_finish_record(out, n);
}

/* ---- unary ---- */

static em_status unary_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  em_tensor *g = go[0];
  if (!g) return EM_OK;
  em_unop op = (em_unop)n->i[0];
  const em_tensor *a = n->saved[0], *out = n->saved[2];
  em_scratch sc = {0};
  em_tensor *ga = NULL;
  const double inv_sqrt_pi2 = 2.0 / sqrt(M_PI), inv_sqrt_2pi = 1.0 / sqrt(2 * M_PI);
  switch (op) {
    case EM_NEG: ga = ag_sc_unary(&sc, EM_NEG, g); break;
    case EM_ABS: ga = ag_sc_binary(&sc, EM_MUL, g, ag_sc_unary(&sc, EM_SIGN, a)); break;
    case EM_EXP: ga = ag_sc_binary(&sc, EM_MUL, g, out); break;
    case EM_LOG: ga = ag_sc_binary(&sc, EM_DIV, g, a); break;
    case EM_SQRT: ga = ag_sc_binary(&sc, EM_DIV, ag_sc_scalar(&sc, EM_MUL, g, 0.5), out); break;
    case EM_SIN: ga = ag_sc_binary(&sc, EM_MUL, g, ag_sc_unary(&sc, EM_COS, a)); break;
    case EM_COS: ga = ag_sc_unary(&sc, EM_NEG, ag_sc_binary(&sc, EM_MUL, g, ag_sc_unary(&sc, EM_SIN, a))); break;
    case EM_TANH: /* 1 - out^2 */
      ga = ag_sc_binary(&sc, EM_MUL, g, ag_sc_rscalar(&sc, EM_SUB, 1.0, ag_sc_unary(&sc, EM_SQUARE, out)));
      break;
    case EM_SIGMOID: /* out (1 - out) */
      ga = ag_sc_binary(&sc, EM_MUL, g, ag_sc_binary(&sc, EM_MUL, out, ag_sc_rscalar(&sc, EM_SUB, 1.0, out)));
      break;
    case EM_RELU: { /* one fused pass (g where out > 0), not a mask, a cast and a product */
      em_tensor *r = NULL;
      const em_backend *be = tn_backend_for("relu", g->storage->device);
      em_status st = be ? em_empty(&r, out->ndim, out->sizes, out->dtype, out->storage->device) : em_last_status();
      if (!st) st = be->relu_backward(r, g, out);
      ga = ag_sc_track(&sc, r, st);
      break;
    }
    case EM_SIGN:
    case EM_FLOOR:
    case EM_CEIL:
    case EM_ROUND: ga = ag_sc_scalar(&sc, EM_MUL, g, 0.0); break;
    case EM_RECIPROCAL:
      ga = ag_sc_unary(&sc, EM_NEG, ag_sc_binary(&sc, EM_MUL, g, ag_sc_unary(&sc, EM_SQUARE, out)));
      break;
    case EM_SQUARE: ga = ag_sc_binary(&sc, EM_MUL, g, ag_sc_scalar(&sc, EM_MUL, a, 2.0)); break;
    case EM_RSQRT: /* -0.5 out^3 */
      ga = ag_sc_binary(&sc, EM_MUL, g, ag_sc_scalar(&sc, EM_MUL, ag_sc_scalar(&sc, EM_POW, out, 3.0), -0.5));
      break;
    case EM_LOG1P: ga = ag_sc_binary(&sc, EM_DIV, g, ag_sc_scalar(&sc, EM_ADD, a, 1.0)); break;
    case EM_LOG2: ga = ag_sc_binary(&sc, EM_DIV, g, ag_sc_scalar(&sc, EM_MUL, a, M_LN2)); break;
    case EM_LOG10: ga = ag_sc_binary(&sc, EM_DIV, g, ag_sc_scalar(&sc, EM_MUL, a, M_LN10)); break;
    case EM_EXPM1: ga = ag_sc_binary(&sc, EM_MUL, g, ag_sc_scalar(&sc, EM_ADD, out, 1.0)); break;
    case EM_ERF: /* 2/sqrt(pi) exp(-a^2) */
      ga = ag_sc_binary(
          &sc, EM_MUL, g,
          ag_sc_scalar(&sc, EM_MUL, ag_sc_unary(&sc, EM_EXP, ag_sc_unary(&sc, EM_NEG, ag_sc_unary(&sc, EM_SQUARE, a))),
                       inv_sqrt_pi2));
      break;
    case EM_GELU: { /* Phi(a) + a phi(a): kept by the forward, or one fused pass where the backend has it */
      if (n->i[1] == 1) { /* the derivative, saved by gelu_record */
        ga = ag_sc_binary(&sc, EM_MUL, g, n->saved[1]);
        break;
      }
      const em_backend *be = tn_backend_for("gelu", g->storage->device);
      if (be && be->gelu_backward && g->dtype == a->dtype && (a->dtype == EM_FLOAT32 || a->dtype == EM_FLOAT64) &&
          g->storage->device.type == a->storage->device.type && g->storage->device.index == a->storage->device.index) {
        em_tensor *r = NULL;
        em_status st = em_empty(&r, a->ndim, a->sizes, a->dtype, a->storage->device);
        if (!st) st = be->gelu_backward(r, g, a);
        ga = ag_sc_track(&sc, r, st);
        break;
      }
      em_tensor *cdf = ag_sc_scalar(
          &sc, EM_MUL,
          ag_sc_scalar(&sc, EM_ADD, ag_sc_unary(&sc, EM_ERF, ag_sc_scalar(&sc, EM_MUL, a, M_SQRT1_2)), 1.0), 0.5);
      em_tensor *pdf = ag_sc_scalar(
          &sc, EM_MUL, ag_sc_unary(&sc, EM_EXP, ag_sc_scalar(&sc, EM_MUL, ag_sc_unary(&sc, EM_SQUARE, a), -0.5)),
          inv_sqrt_2pi);
      ga = ag_sc_binary(&sc, EM_MUL, g, ag_sc_binary(&sc, EM_ADD, cdf, ag_sc_binary(&sc, EM_MUL, a, pdf)));
      break;
    }
    case EM_SILU: { /* s (1 + a (1 - s)) */
      em_tensor *s = ag_sc_unary(&sc, EM_SIGMOID, a);
      em_tensor *inner =
          ag_sc_scalar(&sc, EM_ADD, ag_sc_binary(&sc, EM_MUL, a, ag_sc_rscalar(&sc, EM_SUB, 1.0, s)), 1.0);
      ga = ag_sc_binary(&sc, EM_MUL, g, ag_sc_binary(&sc, EM_MUL, s, inner));
      break;
    }
    default: return em_set_error(EM_ERR_UNSUPPORTED, "%s: no derivative", n->name);
  }
  if (!sc.st) {
    em_tensor_retain(ga);
    sc.st = ag_finish_input_grad(n, 0, ga, &gi[0]);
  }
  return ag_sc_end(&sc);
}

/* GELU under autograd where the backend evaluates GELU and its derivative in one pass: the
 * node keeps the derivative (as large as the input it would otherwise keep) and the backward
 * is one product. Returns EM_ERR_UNSUPPORTED, having done nothing, where that does not apply. */
static em_status gelu_record(em_tensor **out, const em_tensor *a) {
  const em_backend *be = tn_backend_for("gelu", a->storage->device);
  if (!be || !be->gelu_with_grad || !out || *out || a->freed || (a->dtype != EM_FLOAT32 && a->dtype != EM_FLOAT64))
    return EM_ERR_UNSUPPORTED; /* em_unary's path, with its checks and errors */
  em_tensor *y = NULL, *d = NULL;
  em_status st = em_empty(&y, a->ndim, a->sizes, a->dtype, a->storage->device);
  if (!st) st = em_empty(&d, a->ndim, a->sizes, a->dtype, a->storage->device);
  if (!st) st = be->gelu_with_grad(y, d, a);
  const em_tensor *in[1] = {a};
  em_node *n = st ? NULL : ag_node_new(unop_name[EM_GELU], unary_backward, 1, in, 1);
  if (n) {
    n->i[0] = EM_GELU;
    n->i[1] = 1;
    ag_node_save(n, 1, d);
  }
  em_tensor_release(d);
  if (st) {
    em_tensor_release(y);
    return st;
  }
  *out = y;
  return ag_finish_record(out, n);
}

em_status em_ag_unary(em_unop op, em_tensor **out, const em_tensor *a) {
  const em_tensor *in[1] = {a};
  bool record = op != EM_LOGICAL_NOT && ag_any_requires_grad(1, in);
  em_status st;
  if (record && (st = ag_check_out_free(unop_name[op], out))) return st;
  if (record && op == EM_GELU && (st = gelu_record(out, a)) != EM_ERR_UNSUPPORTED) return st;
  if ((st = em_unary(op, out, a)) || !record) return st;
  em_node *n = ag_node_new(unop_name[op], unary_backward, 1, in, 1);
  if (n) {
    n->i[0] = op;
    switch (op) {
      case EM_EXP:
      case EM_SQRT:
      case EM_TANH:
      case EM_SIGMOID:
      case EM_RELU:
      case EM_RECIPROCAL:
      case EM_RSQRT:
      case EM_EXPM1: ag_node_save(n, 2, *out); break;
      case EM_NEG:
      case EM_SIGN:
      case EM_FLOOR:
      case EM_CEIL:
      case EM_ROUND: break;
      default: ag_node_save(n, 0, a);
    }
  }
  return ag_finish_record(out, n);
}

/* ---- where, clamp ---- */

static em_status where_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  em_tensor *g = go[0];
  if (!g) return EM_OK;
  const em_tensor *cond = n->saved[0];
  em_scratch sc = {0};
  em_tensor *zero = ag_sc_zeros(&sc, 0, NULL, g->dtype, g->storage->device);
  for (int i = 0; i < 2 && !sc.st; i++) {
    if (!em_node_needs_input_grad(n, i)) continue;
    em_tensor *r = NULL;
    em_status st = i == 0 ? em_where(&r, cond, g, zero) : em_where(&r, cond, zero, g);
    if (st) {
      sc.st = st;
      break;
    }
    sc.st = ag_finish_input_grad(n, i, r, &gi[i]);
  }
  return ag_sc_end(&sc);
}

em_status em_ag_where(em_tensor **out, const em_tensor *cond, const em_tensor *a, const em_tensor *b) {
  const em_tensor *in[2] = {a, b};
  bool record = ag_any_requires_grad(2, in);
  em_status st;
  if (record && (st = ag_check_out_free("where", out))) return st;
  if ((st = em_where(out, cond, a, b)) || !record) return st;
  em_node *n = ag_node_new("WhereBackward", where_backward, 2, in, 1);
  if (n) ag_node_save(n, 0, cond);
  return ag_finish_record(out, n);
}

static em_status clamp_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  em_tensor *g = go[0];
  if (!g) return EM_OK;
  const em_tensor *a = n->saved[0];
  double lo = n->d[0], hi = n->d[1];
  em_scratch sc = {0};
  em_tensor *mask = NULL;
  if (!isnan(lo)) mask = ag_sc_scalar(&sc, EM_GE, a, lo);
  if (!isnan(hi)) {
    em_tensor *m2 = ag_sc_scalar(&sc, EM_LE, a, hi);
    mask = mask ? ag_sc_binary(&sc, EM_LOGICAL_AND, mask, m2) : m2;
  }
  em_tensor *ga = mask ? ag_sc_binary(&sc, EM_MUL, g, mask) : g;
  if (!sc.st) {
    em_tensor_retain(ga);
    sc.st = ag_finish_input_grad(n, 0, ga, &gi[0]);
  }
  return ag_sc_end(&sc);
}

em_status em_ag_clamp(em_tensor **out, const em_tensor *a, double low, double high) {
  const em_tensor *in[1] = {a};
  bool record = ag_any_requires_grad(1, in);
  em_status st;
  if (record && (st = ag_check_out_free("clamp", out))) return st;
  if ((st = em_clamp(out, a, low, high)) || !record) return st;
  em_node *n = ag_node_new("ClampBackward", clamp_backward, 1, in, 1);
  if (n) {
    ag_node_save(n, 0, a);
    n->d[0] = low;
    n->d[1] = high;
  }
  return ag_finish_record(out, n);
}
