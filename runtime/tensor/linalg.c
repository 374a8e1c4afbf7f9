/* linalg.c - matrix products: matmul (numpy's rules), mm, bmm, addmm, mv, dot, outer.
 *
 * Every product is reduced to one batched GEMM call on the backend:
 *   out[batch..., M, N] = alpha * a[batch..., M, K] @ b[batch..., K, N] + beta * out.
 * A 1-d left operand is promoted to [1, K] and a 1-d right operand to [K, 1]; the unit
 * dim is removed from the result (numpy). Batch dims broadcast. Operands are promoted to
 * one dtype; bool is rejected, and so are float16/bfloat16 on the CPU (storage-only there;
 * the CUDA backend multiplies them with float accumulation, for autocast). */
#include <string.h>
#include "backend.h"
#include "plugins/plugin_api.h"

static int same_device(const em_tensor *a, const em_tensor *b) {
  em_device x = a->storage->device, y = b->storage->device;
  return x.type == y.type && x.index == y.index;
}

/* Checks the operands and gives the dtype the product is computed in. */
static em_status check_operands(const char *op, const em_tensor *a, const em_tensor *b, const em_tensor *c,
                                em_dtype *dtype) {
  em_status st;
  if ((st = tn_check_tensor(op, a, "first operand")) || (st = tn_check_tensor(op, b, "second operand"))) return st;
  if (c && (st = tn_check_tensor(op, c, "added tensor"))) return st;
  if (!same_device(a, b) || (c && !same_device(a, c)))
    return em_set_error(EM_ERR_DEVICE, "%s: the operands are on different devices", op);
  em_dtype d = em_dtype_promote(a->dtype, b->dtype);
  if (c) d = em_dtype_promote(d, c->dtype);
  if ((d == EM_FLOAT16 || d == EM_BFLOAT16) && a->storage->device.type == EM_CPU)
    return em_set_error(EM_ERR_DTYPE, "%s: dtype %s is storage-only; convert the operands with to('float32') first", op,
                        em_dtype_name(d));
  if (d == EM_BOOL)
    return em_set_error(EM_ERR_DTYPE, "%s: bool operands cannot be multiplied; convert them to a numeric dtype first",
                        op);
  *dtype = d;
  return EM_OK;
}

/* A header for t seen as (ndim, sizes, strides); t's storage is shared. */
static em_status restride(em_tensor **out, const em_tensor *t, int ndim, const int64_t *sizes, const int64_t *strides) {
  *out = tn_tensor_wrap(t->storage, t->dtype, ndim, sizes, strides, t->offset);
  return *out ? EM_OK : em_last_status();
}

/* The product as numpy defines it, with c (may be NULL) added as beta * c. The operands
 * a and b are at least 1-d; callers check the rank rules of their own op first. */
static em_status product(const char *op, em_tensor **out, const em_tensor *a, const em_tensor *b, const em_tensor *c,
                         double beta, double alpha) {
  em_dtype dtype = EM_FLOAT32;
  em_status st = check_operands(op, a, b, c, &dtype);
  if (st) return st;
  if (a->ndim == 0 || b->ndim == 0)
    return em_set_error(EM_ERR_SHAPE, "%s: both operands need at least 1 dim, got shapes %s and %s", op, EM_SHAPE(a),
                        EM_SHAPE(b));
  /* Matrix sizes of each side, with 1-d operands promoted. */
  int a_vec = a->ndim == 1, b_vec = b->ndim == 1;
  int64_t M = a_vec ? 1 : a->sizes[a->ndim - 2], K = a->sizes[a->ndim - 1];
  int64_t Kb = b_vec ? b->sizes[0] : b->sizes[b->ndim - 2], N = b_vec ? 1 : b->sizes[b->ndim - 1];
  if (K != Kb)
    return em_set_error(EM_ERR_SHAPE,
                        "%s: shapes %s and %s cannot be multiplied (the first's last dim %lld must equal the second's "
                        "%s dim %lld)",
                        op, EM_SHAPE(a), EM_SHAPE(b), (long long)K, b_vec ? "only" : "second-to-last", (long long)Kb);
  int na = a_vec ? 0 : a->ndim - 2, nb = b_vec ? 0 : b->ndim - 2, nbatch;
  int64_t batch[EM_MAX_DIMS];
  if (tn_broadcast_shapes(op, na, a->sizes, nb, b->sizes, &nbatch, batch))
    return em_set_error(EM_ERR_SHAPE, "%s: the batch dims %s of shape %s and %s of shape %s cannot be broadcast", op,
                        tn_shape_str(na, a->sizes), EM_SHAPE(a), tn_shape_str(nb, b->sizes), EM_SHAPE(b));
  /* The result drops the promoted unit dims. */
  int nd = nbatch + 2, nres = nbatch;
  int64_t res[EM_MAX_DIMS], full[EM_MAX_DIMS];
  for (int d = 0; d < nbatch; d++) res[d] = full[d] = batch[d];
  if (!a_vec) res[nres++] = M;
  if (!b_vec) res[nres++] = N;
  full[nbatch] = M, full[nbatch + 1] = N;
  if (c) {
    int nc;
    int64_t cs[EM_MAX_DIMS];
    if (tn_broadcast_shapes(op, c->ndim, c->sizes, nres, res, &nc, cs) || nc != nres ||
        emp_shape_numel(nc, cs) != emp_shape_numel(nres, res))
      return em_set_error(EM_ERR_SHAPE, "%s: the added tensor of shape %s does not broadcast to the product's shape %s",
                          op, EM_SHAPE(c), tn_shape_str(nres, res));
  }

  bool allocated;
  if ((st = tn_prepare_out(op, out, nres, res, dtype, a->storage->device, &allocated))) return st;
  if (emp_shape_numel(nres, res) == 0) return EM_OK;
  em_tensor *ac = NULL, *bc = NULL, *target = NULL, *a3 = NULL, *b3 = NULL, *o3 = NULL, *tmp = NULL;
  if ((st = em_to(&ac, a, dtype, a->storage->device)) || (st = em_to(&bc, b, dtype, b->storage->device))) goto fail;
  /* A product cannot be written over its own operands: compute aside, then copy. */
  target = *out;
  if (!allocated && ((*out)->storage == a->storage || (*out)->storage == b->storage)) {
    if ((st = em_empty(&target, nres, res, dtype, a->storage->device))) goto fail;
  } else {
    em_tensor_retain(target);
  }
  if (c && beta != 0) {
    if ((st = em_copy_(target, c))) goto fail;
  } else {
    beta = 0; /* c is ignored, NaNs included, as BLAS does */
  }
  /* The three operands as [batch..., rows, cols] views. */
  int64_t sz[EM_MAX_DIMS], str[EM_MAX_DIMS];
  if (a_vec) {
    int64_t s[2] = {1, K}, t[2] = {K * ac->strides[0], ac->strides[0]};
    st = restride(&tmp, ac, 2, s, t);
  } else {
    st = restride(&tmp, ac, ac->ndim, ac->sizes, ac->strides);
  }
  for (int d = 0; d < nbatch; d++) sz[d] = batch[d];
  sz[nbatch] = M, sz[nbatch + 1] = K;
  if (st || (st = emp_broadcast_to(op, &a3, tmp, nd, sz))) goto fail;
  em_tensor_release(tmp);
  tmp = NULL;
  if (b_vec) {
    int64_t s[2] = {K, 1}, t[2] = {bc->strides[0], 1};
    st = restride(&tmp, bc, 2, s, t);
  } else {
    st = restride(&tmp, bc, bc->ndim, bc->sizes, bc->strides);
  }
  sz[nbatch] = K, sz[nbatch + 1] = N;
  if (st || (st = emp_broadcast_to(op, &b3, tmp, nd, sz))) goto fail;
  /* The result's view re-inserts the dropped unit dims (their stride never matters). */
  for (int d = 0, j = 0; d < nd; d++) {
    int dropped = (d == nbatch && a_vec) || (d == nbatch + 1 && b_vec);
    str[d] = dropped ? 1 : target->strides[j++];
  }
  if ((st = restride(&o3, target, nd, full, str))) goto fail;
  const em_backend *be = tn_backend_for(op, a->storage->device);
  if (!be || (st = be->gemm(o3, a3, b3, alpha, beta))) {
    st = be ? st : em_last_status();
    goto fail;
  }
  if (target != *out) st = em_copy_(*out, target);
fail:
  em_tensor_release(tmp);
  em_tensor_release(ac);
  em_tensor_release(bc);
  em_tensor_release(a3);
  em_tensor_release(b3);
  em_tensor_release(o3);
  em_tensor_release(target);
  if (st) tn_discard_out(out, allocated);
  return st;
}

static em_status check_rank(const char *op, const em_tensor *t, int ndim, const char *what) {
  em_status st = tn_check_tensor(op, t, what);
  if (st) return st;
  if (t->ndim != ndim)
    return em_set_error(EM_ERR_SHAPE, "%s: expected the %s to be %d-d, got shape %s", op, what, ndim, EM_SHAPE(t));
  return EM_OK;
}

em_status tn_check_product_operands(const char *op, const em_tensor *a, const em_tensor *b) {
  static const struct {
    const char *op, *what_a, *what_b;
    int rank_a, rank_b;
  } rules[] = {
      {"mm", "first operand", "second operand", 2, 2},  {"addmm", "first operand", "second operand", 2, 2},
      {"bmm", "first operand", "second operand", 3, 3}, {"mv", "matrix", "vector", 2, 1},
      {"dot", "first operand", "second operand", 1, 1}, {"outer", "first operand", "second operand", 1, 1},
  };
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
    if (strcmp(op, rules[i].op) != 0) continue;
    em_status st;
    if ((st = check_rank(op, a, rules[i].rank_a, rules[i].what_a)) ||
        (st = check_rank(op, b, rules[i].rank_b, rules[i].what_b)))
      return st;
    if (!strcmp(op, "bmm") && a->sizes[0] != b->sizes[0]) /* bmm does not broadcast, as in PyTorch */
      return em_set_error(EM_ERR_SHAPE, "bmm: batch sizes differ: shapes %s and %s", EM_SHAPE(a), EM_SHAPE(b));
    if (!strcmp(op, "dot") && a->sizes[0] != b->sizes[0])
      return em_set_error(EM_ERR_SHAPE, "dot: the vectors have different lengths: shapes %s and %s", EM_SHAPE(a),
                          EM_SHAPE(b));
    return EM_OK;
  }
  return em_set_error(EM_ERR_ARGUMENT,
                      "check_product_operands: unknown product '%s' (expected mm, addmm, bmm, mv, "
                      "dot or outer)",
                      op);
}

em_status em_matmul(em_tensor **out, const em_tensor *a, const em_tensor *b) {
  return product("matmul", out, a, b, NULL, 0, 1);
}

em_status em_mm(em_tensor **out, const em_tensor *a, const em_tensor *b) {
  em_status st = tn_check_product_operands("mm", a, b);
  return st ? st : product("mm", out, a, b, NULL, 0, 1);
}

em_status em_bmm(em_tensor **out, const em_tensor *a, const em_tensor *b) {
  em_status st = tn_check_product_operands("bmm", a, b);
  return st ? st : product("bmm", out, a, b, NULL, 0, 1);
}

em_status em_addmm(em_tensor **out, const em_tensor *c, const em_tensor *a, const em_tensor *b, double beta,
                   double alpha) {
  em_status st;
  if ((st = tn_check_product_operands("addmm", a, b)) || (st = tn_check_tensor("addmm", c, "added tensor"))) return st;
  return product("addmm", out, a, b, c, beta, alpha);
}

em_status em_mv(em_tensor **out, const em_tensor *a, const em_tensor *v) {
  em_status st = tn_check_product_operands("mv", a, v);
  return st ? st : product("mv", out, a, v, NULL, 0, 1);
}

em_status em_dot(em_tensor **out, const em_tensor *a, const em_tensor *b) {
  em_status st = tn_check_product_operands("dot", a, b);
  return st ? st : product("dot", out, a, b, NULL, 0, 1);
}

em_status em_outer(em_tensor **out, const em_tensor *a, const em_tensor *b) {
  em_status st = tn_check_product_operands("outer", a, b);
  if (st) return st;
  /* a as a column [n, 1] times b as a row [1, m]: a GEMM with K = 1. */
  em_tensor *col = NULL, *row = NULL;
  int64_t cs[2] = {a->sizes[0], 1}, cst[2] = {a->strides[0], 1};
  int64_t rs[2] = {1, b->sizes[0]}, rst[2] = {b->sizes[0] * b->strides[0], b->strides[0]};
  if (!(st = restride(&col, a, 2, cs, cst)) && !(st = restride(&row, b, 2, rs, rst)))
    st = product("outer", out, col, row, NULL, 0, 1);
  em_tensor_release(col);
  em_tensor_release(row);
  return st;
}
