/* ops_reduce.c - differentiable reductions, softmax, cumsum and matrix products. */
#include <math.h>
#include <string.h>
#include "autograd_impl.h"
#include "autocast.h"

/* Saves the reduced dims as a bit mask in n->i[1] and keepdim in n->i[2]. */
static void save_dims(em_node *n, const em_tensor *a, const int *dims, int ndims, int keepdim) {
  int64_t mask = 0;
  if (!dims || ndims == 0) mask = (1 << a->ndim) - 1;
  for (int k = 0; dims && k < ndims; k++) mask |= (int64_t)1 << (dims[k] < 0 ? dims[k] + a->ndim : dims[k]);
  n->i[1] = mask;
  n->i[2] = keepdim;
}

/* A view of a reduced result (or its gradient) with the reduced dims put back as size 1,
 * expanded to the input's shape when expand is set. */
static em_tensor *unreduce(em_scratch *sc, em_node *n, const em_tensor *r, bool expand) {
  int64_t shape[EM_MAX_DIMS];
  for (int d = 0; d < n->ndims[0]; d++) shape[d] = (n->i[1] >> d) & 1 ? 1 : n->shapes[0][d];
  em_tensor *k = ag_sc_reshape(sc, r, n->ndims[0], shape);
  return expand ? ag_sc_expand(sc, k, n->ndims[0], n->shapes[0]) : k;
}

static int64_t reduced_count(const em_node *n) {
  int64_t c = 1;
  for (int d = 0; d < n->ndims[0]; d++)
    if ((n->i[1] >> d) & 1) c *= n->shapes[0][d];
  return c;
}

static em_status reduce_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  em_redop op = (em_redop)n->i[0];
  const em_tensor *a = n->saved[0], *out = n->saved[2];
  em_scratch sc = {0};
  em_tensor *g = unreduce(&sc, n, go[0], true), *ga = NULL;
  switch (op) {
    case EM_SUM: ga = g; break;
    case EM_MEAN: ga = ag_sc_scalar(&sc, EM_DIV, g, (double)reduced_count(n)); break;
    case EM_PROD: /* out / a; inputs with zeros are not supported (NaN) */
      ga = ag_sc_binary(&sc, EM_MUL, g, ag_sc_binary(&sc, EM_DIV, unreduce(&sc, n, out, true), a));
      break;
    case EM_MAX:
    case EM_MIN: { /* ties share the gradient evenly */
      em_tensor *hit = ag_sc_to(&sc, ag_sc_binary(&sc, EM_EQ, a, unreduce(&sc, n, out, true)), g->dtype);
      int dims[EM_MAX_DIMS], nd = 0;
      for (int d = 0; d < n->ndims[0]; d++)
        if ((n->i[1] >> d) & 1) dims[nd++] = d;
      em_tensor *ties = ag_sc_expand(&sc, ag_sc_sum(&sc, hit, dims, nd, 1), n->ndims[0], n->shapes[0]);
      ga = ag_sc_binary(&sc, EM_DIV, ag_sc_binary(&sc, EM_MUL, g, hit), ties);
      break;
    }
    case EM_LOGSUMEXP:
      ga = ag_sc_binary(&sc, EM_MUL, g,
                        ag_sc_unary(&sc, EM_EXP, ag_sc_binary(&sc, EM_SUB, a, unreduce(&sc, n, out, true))));
      break;
    default: ag_sc_end(&sc); return em_set_error(EM_ERR_UNSUPPORTED, "%s: no derivative", n->name);
  }
  if (!sc.st) sc.st = ag_finish_input_grad(n, 0, ag_sc_keep(&sc, ga), &gi[0]);
  return ag_sc_end(&sc);
}

static const char *redop_name(em_redop op) {
  switch (op) {
    case EM_SUM: return "SumBackward";
    case EM_MEAN: return "MeanBackward";
    case EM_PROD: return "ProdBackward";
    case EM_MAX: return "MaxBackward";
    case EM_MIN: return "MinBackward";
    case EM_LOGSUMEXP: return "LogsumexpBackward";
    default: return "ReduceBackward";
  }
}

/* ---- values chosen by position (sort, topk, max/min along a dim): the gradient goes back
 * to the positions the values came from. saved[0] holds the positions (from base i[2]) in
 * the result's shape; i[1] is the dim; i[3] says that the dim was reduced away (keepdim
 * off), so the positions and the gradient get it back as size 1 first. ---- */

static em_status pick_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  int dim = (int)n->i[1], base = (int)n->i[2];
  em_tensor *z = NULL, *g = NULL, *idx = NULL;
  em_status st = em_zeros(&z, n->ndims[0], n->shapes[0], go[0]->dtype, go[0]->storage->device);
  if (!st && n->i[3] && n->ndims[0] > 0) {
    if (!(st = em_unsqueeze(&g, go[0], dim))) st = em_unsqueeze(&idx, n->saved[0], dim);
  } else if (!st) {
    em_tensor_retain(go[0]), em_tensor_retain(n->saved[0]);
    g = go[0], idx = n->saved[0];
  }
  if (!st) st = em_scatter_(z, dim, idx, g, 1, base);
  em_tensor_release(g), em_tensor_release(idx);
  if (st) {
    em_tensor_release(z);
    return st;
  }
  return ag_finish_input_grad(n, 0, z, &gi[0]);
}

static em_status record_pick(const char *name, em_tensor **values, const em_tensor *a, const em_tensor *indices,
                             int dim, int base, int reduced) {
  const em_tensor *in[1] = {a};
  em_node *n = ag_node_new(name, pick_backward, 1, in, 1);
  if (n) {
    ag_node_save(n, 0, indices);
    n->i[1] = dim < 0 ? dim + (a->ndim ? a->ndim : 1) : dim;
    n->i[2] = base;
    n->i[3] = reduced;
  }
  return ag_finish_record(values, n);
}

/* Runs a sort-like op; while recording, with positions of its own when none are wanted. */
static em_status pick(const char *name, em_tensor **values, em_tensor **indices, const em_tensor *a, int64_t k,
                      int dim, int flag, int base, int is_topk) {
  const em_tensor *in[1] = {a};
  bool record = ag_any_requires_grad(1, in);
  em_status st;
  if (record && ((st = ag_check_out_free(name, values)) || (indices && (st = ag_check_out_free(name, indices)))))
    return st;
  em_tensor *own = NULL, **idx = indices ? indices : record ? &own : NULL;
  st = is_topk ? em_topk(values, idx, a, k, dim, flag, base) : em_sort(values, idx, a, dim, flag, base);
  if (!st && record) st = record_pick(is_topk ? "TopkBackward" : "SortBackward", values, a, *idx, dim, base, 0);
  em_tensor_release(own);
  return st;
}

em_status em_ag_sort(em_tensor **values, em_tensor **indices, const em_tensor *a, int dim, int descending, int base) {
  return pick("sort", values, indices, a, 0, dim, descending, base, 0);
}

em_status em_ag_topk(em_tensor **values, em_tensor **indices, const em_tensor *a, int64_t k, int dim, int largest,
                     int base) {
  return pick("topk", values, indices, a, k, dim, largest, base, 1);
}

em_status em_ag_reduce(em_redop op, em_tensor **out, em_tensor **indices, const em_tensor *a, const int *dims,
                       int ndims, int keepdim, int base) {
  em_autocast_ops ac;
  if ((op == EM_SUM || op == EM_MEAN || op == EM_PROD || op == EM_LOGSUMEXP) &&
      ag_autocast_prepare(&ac, EM_AUTOCAST_FP32, 1, &a))
    return ag_autocast_finish(
        &ac, ac.status ? ac.status : em_ag_reduce(op, out, indices, ac.t[0], dims, ndims, keepdim, base));
  const em_tensor *in[1] = {a};
  bool record =
      (op == EM_SUM || op == EM_MEAN || op == EM_PROD || op == EM_MAX || op == EM_MIN || op == EM_LOGSUMEXP) &&
      ag_any_requires_grad(1, in);
  em_status st;
  if (record && (st = ag_check_out_free(redop_name(op), out))) return st;
  if ((st = em_reduce(op, out, indices, a, dims, ndims, keepdim, base)) || !record) return st;
  if ((op == EM_MAX || op == EM_MIN) && indices && ndims == 1)
    return record_pick(op == EM_MAX ? "MaxBackward" : "MinBackward", out, a, *indices, dims[0], base, !keepdim);
  em_node *n = ag_node_new(redop_name(op), reduce_backward, 1, in, 1);
  if (n) {
    n->i[0] = op;
    save_dims(n, a, dims, ndims, keepdim);
    if (op != EM_SUM && op != EM_MEAN) {
      ag_node_save(n, 0, a);
      ag_node_save(n, 2, *out);
    }
  }
  return ag_finish_record(out, n);
}

/* ---- norm, var/std ---- */

static em_status norm_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  const em_tensor *a = n->saved[0];
  double p = n->d[0];
  em_scratch sc = {0};
  em_tensor *g = unreduce(&sc, n, go[0], true), *out = unreduce(&sc, n, n->saved[2], true), *ga;
  if (p == 2) { /* a / ||a|| (0 where the norm is 0) */
    ga = ag_sc_binary(&sc, EM_MUL, g, ag_sc_binary(&sc, EM_DIV, a, out));
  } else if (p == 1) {
    ga = ag_sc_binary(&sc, EM_MUL, g, ag_sc_unary(&sc, EM_SIGN, a));
  } else { /* sign(a) |a|^(p-1) / ||a||^(p-1) */
    em_tensor *num = ag_sc_binary(&sc, EM_MUL, ag_sc_unary(&sc, EM_SIGN, a),
                                  ag_sc_scalar(&sc, EM_POW, ag_sc_unary(&sc, EM_ABS, a), p - 1));
    ga = ag_sc_binary(&sc, EM_MUL, g, ag_sc_binary(&sc, EM_DIV, num, ag_sc_scalar(&sc, EM_POW, out, p - 1)));
  }
  if (p == 2 && ga) { /* a zero norm gives 0/0: PyTorch's subgradient there is 0 */
    em_tensor *zero_mask = ag_sc_scalar(&sc, EM_EQ, out, 0.0);
    if (zero_mask) {
      em_status st = em_masked_fill_(ga, zero_mask, 0.0);
      if (st && !sc.st) sc.st = st;
    }
  }
  if (!sc.st) sc.st = ag_finish_input_grad(n, 0, ag_sc_keep(&sc, ga), &gi[0]);
  return ag_sc_end(&sc);
}

em_status em_ag_norm(em_tensor **out, const em_tensor *a, double p, const int *dims, int ndims, int keepdim) {
  em_autocast_ops ac;
  if (ag_autocast_prepare(&ac, EM_AUTOCAST_FP32, 1, &a))
    return ag_autocast_finish(&ac, ac.status ? ac.status : em_ag_norm(out, ac.t[0], p, dims, ndims, keepdim));
  const em_tensor *in[1] = {a};
  bool record = ag_any_requires_grad(1, in);
  em_status st;
  if (record && (st = ag_check_out_free("norm", out))) return st;
  if ((st = em_norm(out, a, p, dims, ndims, keepdim)) || !record) return st;
  if (isinf(p) || p == 0) {
    em_tensor_release(*out);
    *out = NULL;
    return em_set_error(EM_ERR_UNSUPPORTED, "norm: the gradient of the %g-norm is not implemented (use p >= 1)", p);
  }
  em_node *n = ag_node_new("NormBackward", norm_backward, 1, in, 1);
  if (n) {
    n->d[0] = p;
    save_dims(n, a, dims, ndims, keepdim);
    ag_node_save(n, 0, a);
    ag_node_save(n, 2, *out);
  }
  return ag_finish_record(out, n);
}

static em_status var_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  const em_tensor *a = n->saved[0];
  double correction = n->d[0];
  int take_sqrt = (int)n->i[3];
  int dims[EM_MAX_DIMS], nd = 0;
  for (int d = 0; d < n->ndims[0]; d++)
    if ((n->i[1] >> d) & 1) dims[nd++] = d;
  em_scratch sc = {0};
  em_tensor *g = unreduce(&sc, n, go[0], true);
  if (take_sqrt) g = ag_sc_binary(&sc, EM_DIV, ag_sc_scalar(&sc, EM_MUL, g, 0.5), unreduce(&sc, n, n->saved[2], true));
  double count = (double)reduced_count(n) - correction;
  em_tensor *mean = ag_sc_scalar(&sc, EM_DIV, ag_sc_sum(&sc, a, dims, nd, 1), (double)reduced_count(n));
  em_tensor *centered = ag_sc_binary(&sc, EM_SUB, a, mean);
  em_tensor *ga = ag_sc_binary(&sc, EM_MUL, g, ag_sc_scalar(&sc, EM_MUL, centered, 2.0 / count));
  if (!sc.st) sc.st = ag_finish_input_grad(n, 0, ag_sc_keep(&sc, ga), &gi[0]);
  return ag_sc_end(&sc);
}

em_status em_ag_var(em_tensor **out, const em_tensor *a, const int *dims, int ndims, double correction, int keepdim,
                    int take_sqrt) {
  em_autocast_ops ac;
  if (ag_autocast_prepare(&ac, EM_AUTOCAST_FP32, 1, &a))
    return ag_autocast_finish(
        &ac, ac.status ? ac.status : em_ag_var(out, ac.t[0], dims, ndims, correction, keepdim, take_sqrt));
  const em_tensor *in[1] = {a};
  bool record = ag_any_requires_grad(1, in);
  em_status st;
  if (record && (st = ag_check_out_free(take_sqrt ? "std" : "var", out))) return st;
  if ((st = em_var(out, a, dims, ndims, correction, keepdim, take_sqrt)) || !record) return st;
  em_node *n = ag_node_new(take_sqrt ? "StdBackward" : "VarBackward", var_backward, 1, in, 1);
  if (n) {
    n->d[0] = correction;
    n->i[3] = take_sqrt;
    save_dims(n, a, dims, ndims, keepdim);
    ag_node_save(n, 0, a);
    if (take_sqrt) ag_node_save(n, 2, *out);
  }
  return ag_finish_record(out, n);
}

/* ---- cumsum: the gradient is the reversed cumulative sum ---- */

static em_status cumsum_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  int dim = (int)n->i[0];
  em_scratch sc = {0};
  em_tensor *g = go[0], *c = NULL;
  em_status st = em_cumsum(&c, g, dim);
  ag_sc_track(&sc, c, st);
  /* sum_{j >= i} g_j = total - cumsum_i + g_i */
  em_tensor *total = ag_sc_sum(&sc, g, &dim, 1, 1);
  em_tensor *ga = ag_sc_binary(&sc, EM_ADD, ag_sc_binary(&sc, EM_SUB, total, c), g);
  if (!sc.st) sc.st = ag_finish_input_grad(n, 0, ag_sc_keep(&sc, ga), &gi[0]);
  return ag_sc_end(&sc);
}

em_status em_ag_cumsum(em_tensor **out, const em_tensor *a, int dim) {
  em_autocast_ops ac;
  if (ag_autocast_prepare(&ac, EM_AUTOCAST_FP32, 1, &a))
    return ag_autocast_finish(&ac, ac.status ? ac.status : em_ag_cumsum(out, ac.t[0], dim));
  const em_tensor *in[1] = {a};
  bool record = ag_any_requires_grad(1, in);
  em_status st;
  if (record && (st = ag_check_out_free("cumsum", out))) return st;
  if ((st = em_cumsum(out, a, dim)) || !record) return st;
  em_node *n = ag_node_new("CumsumBackward", cumsum_backward, 1, in, 1);
  if (n) n->i[0] = dim < 0 ? dim + (a->ndim ? a->ndim : 1) : dim;
  return ag_finish_record(out, n);
}

/* ---- softmax / log_softmax ---- */

static em_status softmax_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  int dim = (int)n->i[0], log = (int)n->i[1];
  const em_tensor *y = n->saved[2], *g = go[0];
  em_scratch sc = {0};
  em_tensor *ga;
  if (log) /* g - exp(y) sum(g) */
    ga = ag_sc_binary(&sc, EM_SUB, g,
                      ag_sc_binary(&sc, EM_MUL, ag_sc_unary(&sc, EM_EXP, y), ag_sc_sum(&sc, g, &dim, 1, 1)));
  else /* y (g - sum(g y)) */
    ga = ag_sc_binary(&sc, EM_MUL, y,
                      ag_sc_binary(&sc, EM_SUB, g, ag_sc_sum(&sc, ag_sc_binary(&sc, EM_MUL, g, y), &dim, 1, 1)));
  if (!sc.st) sc.st = ag_finish_input_grad(n, 0, ag_sc_keep(&sc, ga), &gi[0]);
  return ag_sc_end(&sc);
}

em_status em_ag_softmax(em_tensor **out, const em_tensor *a, int dim, int log) {
  em_autocast_ops ac;
  if (ag_autocast_prepare(&ac, EM_AUTOCAST_FP32, 1, &a))
    return ag_autocast_finish(&ac, ac.status ? ac.status : em_ag_softmax(out, ac.t[0], dim, log));
  const em_tensor *in[1] = {a};
  bool record = ag_any_requires_grad(1, in);
  em_status st;
  if (record && (st = ag_check_out_free(log ? "log_softmax" : "softmax", out))) return st;
  if ((st = em_softmax(out, a, dim, log)) || !record) return st;
  em_node *n = ag_node_new(log ? "LogSoftmaxBackward" : "SoftmaxBackward", softmax_backward, 1, in, 1);
  if (n) {
    n->i[0] = dim < 0 ? dim + (a->ndim ? a->ndim : 1) : dim;
    n->i[1] = log;
    ag_node_save(n, 2, *out);
  }
  return ag_finish_record(out, n);
}

/* ---- matmul, addmm ---- */

/* Matmul gradients with numpy's 1-d rules: a 1-d a acts as [1, K], a 1-d b as [K, 1]. */
static em_status matmul_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  const em_tensor *a = n->saved[0], *b = n->saved[1];
  em_scratch sc = {0};
  em_tensor *a2 = (em_tensor *)a, *b2 = (em_tensor *)b, *g = go[0];
  if (a->ndim == 1) a2 = ag_sc_reshape(&sc, a, 2, (int64_t[]){1, a->sizes[0]});
  if (b->ndim == 1) b2 = ag_sc_reshape(&sc, b, 2, (int64_t[]){b->sizes[0], 1});
  if (sc.st) return ag_sc_end(&sc);
  /* the gradient with the dims that 1-d operands removed put back */
  int64_t gshape[EM_MAX_DIMS + 2];
  int gnd = 0;
  for (int d = 0; d < g->ndim; d++) gshape[gnd++] = g->sizes[d];
  if (a->ndim == 1) { /* insert the M = 1 dim before the last (or as the first of two) */
    int pos = b->ndim == 1 ? gnd : gnd - 1;
    memmove(gshape + pos + 1, gshape + pos, sizeof(int64_t) * (gnd - pos));
    gshape[pos] = 1, gnd++;
  }
  if (b->ndim == 1) gshape[gnd++] = 1;
  em_tensor *g2 = ag_sc_reshape(&sc, g, gnd, gshape);
  if (em_node_needs_input_grad(n, 0)) {
    em_tensor *ga = ag_sc_matmul(&sc, g2, ag_sc_transpose(&sc, b2, -1, -2));
    if (!sc.st) sc.st = ag_finish_input_grad(n, 0, ag_sc_keep(&sc, ga), &gi[0]);
  }
  if (em_node_needs_input_grad(n, 1)) {
    em_tensor *gb = ag_sc_matmul(&sc, ag_sc_transpose(&sc, a2, -1, -2), g2);
    if (gb && b->ndim == 1) gb = ag_sc_reshape(&sc, gb, gb->ndim - 1, gb->sizes); /* drop the trailing 1 */
    if (!sc.st) sc.st = ag_finish_input_grad(n, 1, ag_sc_keep(&sc, gb), &gi[1]);
  }
  return ag_sc_end(&sc);
}

em_status em_ag_matmul(em_tensor **out, const em_tensor *a, const em_tensor *b) {
  em_autocast_ops ac;
  if (ag_autocast_prepare(&ac, EM_AUTOCAST_LOWER, 2, (const em_tensor *[]){a, b}))
    return ag_autocast_finish(&ac, ac.status ? ac.status : em_ag_matmul(out, ac.t[0], ac.t[1]));
  const em_tensor *in[2] = {a, b};
  bool record = ag_any_requires_grad(2, in);
  em_status st;
  if (record && (st = ag_check_out_free("matmul", out))) return st;
  if ((st = em_matmul(out, a, b)) || !record) return st;
  em_node *n = ag_node_new("MatmulBackward", matmul_backward, 2, in, 1);
  if (n) {
    ag_node_save(n, 0, a);
    ag_node_save(n, 1, b);
  }
  return ag_finish_record(out, n);
}

/* The fixed-rank products: checked as their plain forms check, then recorded as matmul
 * (outer as a column times a row) when an input requires grad or autocast is on. */
static em_status ag_product(const char *op, em_status (*plain)(em_tensor **, const em_tensor *, const em_tensor *),
                            em_tensor **out, const em_tensor *a, const em_tensor *b) {
  em_status st = tn_check_product_operands(op, a, b);
  if (st) return st;
  const em_tensor *in[2] = {a, b};
  if (!ag_any_requires_grad(2, in) && !em_autocast_is_enabled(-1)) return plain(out, a, b);
  if (strcmp(op, "outer") != 0) return em_ag_matmul(out, a, b);
  em_tensor *col = NULL, *row = NULL;
  if (!(st = em_ag_unsqueeze(&col, a, 1)) && !(st = em_ag_unsqueeze(&row, b, 0))) st = em_ag_matmul(out, col, row);
  em_tensor_release(col);
  em_tensor_release(row);
  return st;
}

em_status em_ag_mm(em_tensor **out, const em_tensor *a, const em_tensor *b) {
  return ag_product("mm", em_mm, out, a, b);
}
em_status em_ag_bmm(em_tensor **out, const em_tensor *a, const em_tensor *b) {
  return ag_product("bmm", em_bmm, out, a, b);
}
em_status em_ag_mv(em_tensor **out, const em_tensor *a, const em_tensor *v) {
  return ag_product("mv", em_mv, out, a, v);
}
em_status em_ag_dot(em_tensor **out, const em_tensor *a, const em_tensor *b) {
  return ag_product("dot", em_dot, out, a, b);
}
em_status em_ag_outer(em_tensor **out, const em_tensor *a, const em_tensor *b) {
  return ag_product("outer", em_outer, out, a, b);
}

static em_status addmm_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  const em_tensor *a = n->saved[0], *b = n->saved[1], *g = go[0];
  double beta = n->d[0], alpha = n->d[1];
  em_scratch sc = {0};
  if (em_node_needs_input_grad(n, 0)) {
    em_tensor *gc = beta == 1 ? (em_tensor *)g : ag_sc_scalar(&sc, EM_MUL, g, beta);
    if (!sc.st) sc.st = ag_finish_input_grad(n, 0, ag_sc_keep(&sc, gc), &gi[0]);
  }
  if (em_node_needs_input_grad(n, 1)) {
    em_tensor *ga = ag_sc_matmul(&sc, g, ag_sc_transpose(&sc, b, 0, 1));
    if (alpha != 1) ga = ag_sc_scalar(&sc, EM_MUL, ga, alpha);
    if (!sc.st) sc.st = ag_finish_input_grad(n, 1, ag_sc_keep(&sc, ga), &gi[1]);
  }
  if (em_node_needs_input_grad(n, 2)) {
    em_tensor *gb = ag_sc_matmul(&sc, ag_sc_transpose(&sc, a, 0, 1), g);
    if (alpha != 1) gb = ag_sc_scalar(&sc, EM_MUL, gb, alpha);
    if (gb && !sc.st) gi[2] = ag_sc_keep(&sc, gb);
  }
  return ag_sc_end(&sc);
}

em_status em_ag_addmm(em_tensor **out, const em_tensor *c, const em_tensor *a, const em_tensor *b, double beta,
                      double alpha) {
  em_autocast_ops ac;
  if (ag_autocast_prepare(&ac, EM_AUTOCAST_LOWER, 3, (const em_tensor *[]){c, a, b}))
    return ag_autocast_finish(&ac, ac.status ? ac.status : em_ag_addmm(out, ac.t[0], ac.t[1], ac.t[2], beta, alpha));
  const em_tensor *in[3] = {c, a, b};
  bool record = ag_any_requires_grad(3, in);
  em_status st;
  if (record && (st = ag_check_out_free("addmm", out))) return st;
  if ((st = em_addmm(out, c, a, b, beta, alpha)) || !record) return st;
  em_node *n = ag_node_new("AddmmBackward", addmm_backward, 3, in, 1);
  if (n) {
    /* shapes[0..1] hold c and a; gradients of c are summed back to its shape */
    ag_node_save(n, 0, a);
    ag_node_save(n, 1, b);
    n->d[0] = beta;
    n->d[1] = alpha;
  }
  return ag_finish_record(out, n);
}
