/* attention.c - fused scaled-dot-product attention, recorded as one node (kernels in
 * runtime/cpu/attention.c). The forward keeps each query row's logsumexp ([..., Tq]), not
 * the [Tq, Tk] probabilities: the backward recomputes them tile by tile, so memory grows
 * with T, not T^2. The mask takes no gradient (as a constant of the graph). */
#include <math.h>
#include <stdlib.h>
#include "cpu/cpu_seq.h"
#include "nn_impl.h"
#include "plugins/plugin_api.h"

static const char *const OP = "scaled_dot_product_attention";

typedef struct attn_ctx {
  cpu_attn_args a;
  int64_t bh_offset[]; /* [6 * BH]: the mask's offset per batch*head, then the CPU's operands' (layout_of) */
} attn_ctx;

/* On the CPU the kernels read q, k, v, out and the incoming gradient where they lie, when
 * each is a permutation of a dense block with unit stride along its last dim (what
 * MultiheadAttention's head split gives: [B, H, T, hd] over [B, T, H, hd]); the copies to
 * and from contiguous [B, H, T, hd] were several percent of a char-GPT step. */
static bool dense_permuted(const em_tensor *t) {
  int nd = t->ndim, order[EM_MAX_DIMS], n = 0;
  if (t->sizes[nd - 1] > 1 && t->strides[nd - 1] != 1) return false;
  for (int d = 0; d < nd; d++)
    if (t->sizes[d] > 1) order[n++] = d;
  for (int i = 1; i < n; i++) /* by decreasing stride: insertion sort of a few dims */
    for (int j = i; j > 0 && t->strides[order[j]] > t->strides[order[j - 1]]; j--) {
      int x = order[j];
      order[j] = order[j - 1], order[j - 1] = x;
    }
  int64_t want = 1;
  for (int i = n - 1; i >= 0; i--) {
    if (t->strides[order[i]] != want) return false;
    want *= t->sizes[order[i]];
  }
  return true;
}

/* A new tensor of t's sizes (last dim `last`) laid out in t's order of strides. */
static em_status alloc_like(em_tensor **out, const em_tensor *t, int64_t last) {
  int nd = t->ndim, order[EM_MAX_DIMS];
  int64_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS], numel = 1;
  for (int d = 0; d < nd; d++) order[d] = d, sizes[d] = d == nd - 1 ? last : t->sizes[d], numel *= sizes[d];
  for (int i = 1; i < nd; i++) /* decreasing stride; ties (size-1 dims) keep their order */
    for (int j = i; j > 0 && t->strides[order[j]] > t->strides[order[j - 1]]; j--) {
      int x = order[j];
      order[j] = order[j - 1], order[j - 1] = x;
    }
  int64_t st = 1;
  for (int i = nd - 1; i >= 0; i--) strides[order[i]] = st, st *= sizes[order[i]];
  em_tensor *flat = NULL;
  em_status e = em_empty(&flat, 1, &numel, t->dtype, t->storage->device);
  if (!e) e = em_as_strided(out, flat, nd, sizes, strides, 0);
  em_tensor_release(flat);
  return e;
}

/* Operand i's layout in a: its row stride and each batch*head's first element. */
static void layout_of(cpu_attn_args *a, int i, const em_tensor *t, int64_t *offsets) {
  int nd = t->ndim;
  int64_t rs = t->strides[nd - 2];
  a->row_stride[i] = rs >= t->sizes[nd - 1] && rs > 0 ? rs : t->sizes[nd - 1]; /* one row: any stride */
  for (int64_t bh = 0; bh < a->BH; bh++) {
    int64_t rest = bh, off = 0;
    for (int d = nd - 3; d >= 0; d--) {
      off += (rest % t->sizes[d]) * t->strides[d];
      rest /= t->sizes[d];
    }
    offsets[bh] = off;
  }
  a->bh_offset[i] = offsets;
}

/* The operand as the kernels read it: itself where they can (the CPU, dense_permuted),
 * else a contiguous copy. */
static em_status operand(em_tensor **out, const em_tensor *t, bool cpu) {
  if (cpu && dense_permuted(t)) {
    em_tensor_retain((em_tensor *)t);
    *out = (em_tensor *)t;
    return EM_OK;
  }
  return em_contiguous(out, t);
}

static void free_ctx(em_node *n) { free(n->ctx); }

/* saved: 0 q, 1 k, 2 v (as the kernels read them: operand()), 3 out, 4 lse, 5 the expanded
 * mask (or NULL). The gradients of q, k and v take their layouts. */
static em_status attention_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  attn_ctx *c = n->ctx;
  cpu_attn_args a = c->a;
  a.mask_bh_offset = c->bh_offset;
  a.mask_ptr = n->saved[5] ? em_tensor_ptr(n->saved[5]) : NULL;
  em_tensor *g = NULL, *grads[3] = {NULL};
  const em_backend *be = nn_backend(OP, n->saved[0]);
  if (!be) return em_last_status();
  bool cpu = n->saved[0]->storage->device.type == EM_CPU;
  em_status st = operand(&g, go[0], cpu);
  for (int i = 0; i < 3 && !st; i++) st = alloc_like(&grads[i], n->saved[i], n->saved[i]->sizes[n->saved[i]->ndim - 1]);
  if (!st && cpu) {
    for (int i = 0; i < 4; i++) layout_of(&a, i, n->saved[i], c->bh_offset + (i + 1) * a.BH);
    layout_of(&a, EM_ATTN_GOUT, g, c->bh_offset + 5 * a.BH);
  }
  if (!st)
    st = be->attention_backward(&a, grads[0], grads[1], grads[2], g, n->saved[0], n->saved[1], n->saved[2], n->saved[3],
                                n->saved[4]);
  for (int i = 0; i < 3; i++) {
    if (!st && em_node_needs_input_grad(n, i)) gi[i] = grads[i];
    else em_tensor_release(grads[i]);
  }
  em_tensor_release(g);
  return st;
}

static em_status check_qkv(const em_tensor *q, const em_tensor *k, const em_tensor *v) {
  em_status st;
  if ((st = nn_check_float(OP, q, "query")) || (st = tn_check_tensor(OP, k, "key")) ||
      (st = tn_check_tensor(OP, v, "value")) || (st = nn_check_like(OP, k, "key", q)) ||
      (st = nn_check_like(OP, v, "value", q)))
    return st;
  if (q->dtype != EM_FLOAT32 && q->dtype != EM_FLOAT64)
    return em_set_error(EM_ERR_UNSUPPORTED, "%s: only float32/float64 tensors are supported so far, got %s", OP,
                        em_dtype_name(q->dtype));
  const em_backend *be = nn_backend(OP, q);
  if (!be) return em_last_status();
  if (!be->attention || !be->attention_backward)
    return em_set_error(EM_ERR_UNSUPPORTED, "%s: not supported on %s tensors (the %s backend has no kernel for it)",
                        OP, be->name, be->name);
  int nd = q->ndim;
  if (nd < 2 || k->ndim != nd || v->ndim != nd)
    return em_set_error(EM_ERR_SHAPE,
                        "%s: expected query, key and value with the same number of dims (at least 2: [..., T, D]), "
                        "got %s, %s and %s",
                        OP, EM_SHAPE(q), EM_SHAPE(k), EM_SHAPE(v));
  for (int d = 0; d < nd - 2; d++)
    if (k->sizes[d] != q->sizes[d] || v->sizes[d] != q->sizes[d])
      return em_set_error(EM_ERR_SHAPE, "%s: the leading (batch, head) dims differ: query %s, key %s, value %s", OP,
                          EM_SHAPE(q), EM_SHAPE(k), EM_SHAPE(v));
  if (q->sizes[nd - 1] < 1)
    return em_set_error(EM_ERR_SHAPE, "%s: expected a head dim of at least 1, got query %s", OP, EM_SHAPE(q));
  if (k->sizes[nd - 1] != q->sizes[nd - 1] || v->sizes[nd - 2] != k->sizes[nd - 2])
    return em_set_error(EM_ERR_SHAPE,
                        "%s: expected key [..., S, %lld] (query's last dim) and value [..., S, Dv] (key's S), got "
                        "query %s, key %s, value %s",
                        OP, (long long)q->sizes[nd - 1], EM_SHAPE(q), EM_SHAPE(k), EM_SHAPE(v));
  return EM_OK;
}

/* The mask expanded to [lead..., Tq, Tk] (a view) and each batch*head's offset into it. */
static em_status prepare_mask(em_tensor **em, cpu_attn_args *a, int64_t *offsets, const em_tensor *mask,
                              const em_tensor *q, int64_t Tk) {
  em_status st = tn_check_tensor(OP, mask, "mask");
  if (st) return st;
  if (mask->dtype != EM_BOOL && mask->dtype != q->dtype)
    return em_set_error(EM_ERR_DTYPE, "%s: expected the mask to be bool or %s (the query's dtype), got %s", OP,
                        em_dtype_name(q->dtype), em_dtype_name(mask->dtype));
  if (mask->storage->device.type != q->storage->device.type || mask->storage->device.index != q->storage->device.index)
    return em_set_error(EM_ERR_DEVICE, "%s: the mask is on another device than the query", OP);
  int nd = q->ndim;
  int64_t shape[EM_MAX_DIMS];
  for (int d = 0; d < nd - 1; d++) shape[d] = q->sizes[d];
  shape[nd - 1] = Tk;
  int ok = mask->ndim <= nd;
  for (int d = 0; ok && d < mask->ndim; d++) {
    int64_t m = mask->sizes[mask->ndim - 1 - d], want = shape[nd - 1 - d];
    ok = m == want || m == 1;
  }
  if (!ok)
    return em_set_error(EM_ERR_SHAPE, "%s: a mask of shape %s does not broadcast to %s ([..., L, S] of the scores)", OP,
                        EM_SHAPE(mask), tn_shape_str(nd, shape));
  if ((st = em_expand(em, mask, nd, shape))) return st;
  a->mask_lead_ndim = nd - 2; /* a device computes the offsets itself */
  for (int d = 0; d < nd - 2; d++) a->mask_lead_sizes[d] = shape[d], a->mask_lead_strides[d] = (*em)->strides[d];
  int64_t BH = emp_shape_numel(nd - 2, shape);
  for (int64_t bh = 0; bh < BH; bh++) {
    int64_t rest = bh, off = 0; /* from the view's first element */
    for (int d = nd - 3; d >= 0; d--) {
      off += (rest % shape[d]) * (*em)->strides[d];
      rest /= shape[d];
    }
    offsets[bh] = off;
  }
  return EM_OK;
}

em_status em_nn_scaled_dot_product_attention(em_tensor **out, const em_tensor *q, const em_tensor *k,
                                             const em_tensor *v, const em_tensor *mask, int causal, double dropout_p,
                                             double scale) {
  em_status st;
  if ((st = nn_check_out(OP, out)) || (st = check_qkv(q, k, v))) return st;
  if (!(dropout_p >= 0 && dropout_p < 1))
    return em_set_error(EM_ERR_ARGUMENT, "%s: dropout_p must be in [0, 1), got %g", OP, dropout_p);
  if (!(scale == scale) || isinf(scale))
    return em_set_error(EM_ERR_ARGUMENT, "%s: scale must be a finite number, got %g", OP, scale);
  int nd = q->ndim;
  int64_t Tq = q->sizes[nd - 2], Tk = k->sizes[nd - 2], D = q->sizes[nd - 1], Dv = v->sizes[nd - 1];
  int64_t BH = emp_shape_numel(nd - 2, q->sizes);
  attn_ctx *c = calloc(1, sizeof(attn_ctx) + (size_t)(BH > 0 ? 6 * BH : 1) * sizeof(int64_t));
  if (!c) return em_set_error(EM_ERR_MEMORY, "%s: out of memory", OP);
  c->a = (cpu_attn_args){.BH = BH,
                         .Tq = Tq,
                         .Tk = Tk,
                         .D = D,
                         .Dv = Dv,
                         .causal = causal != 0,
                         .scale = scale > 0 ? scale : (D > 0 ? 1 / sqrt((double)D) : 1),
                         .dropout_p = dropout_p};
  em_tensor *cq = NULL, *ck = NULL, *cv = NULL, *m = NULL, *lse = NULL, *res = NULL;
  if (mask && !(st = prepare_mask(&m, &c->a, c->bh_offset, mask, q, Tk))) {
    c->a.mask_is_bool = m->dtype == EM_BOOL;
    c->a.mask_rs = m->strides[nd - 2], c->a.mask_cs = m->strides[nd - 1];
  }
  if (dropout_p > 0) { /* reserve this call's Philox blocks */
    uint64_t seed, offset;
    em_generator_get_state(&seed, &offset);
    em_generator_set_state(seed, offset + ((uint64_t)(BH * Tq * Tk) + 3) / 4);
    c->a.seed = seed, c->a.offset = offset;
  }
  int64_t oshape[EM_MAX_DIMS];
  for (int d = 0; d < nd - 1; d++) oshape[d] = q->sizes[d];
  oshape[nd - 1] = Dv;
  bool cpu = q->storage->device.type == EM_CPU;
  if (!st && !(st = operand(&cq, q, cpu)) && !(st = operand(&ck, k, cpu)) && !(st = operand(&cv, v, cpu)) &&
      !(st = cpu ? alloc_like(&res, cq, Dv) : em_empty(&res, nd, oshape, q->dtype, q->storage->device)) &&
      !(st = em_empty(&lse, 2, (int64_t[]){BH, Tq}, q->dtype, q->storage->device))) {
    cpu_attn_args a = c->a;
    a.mask_bh_offset = c->bh_offset;
    a.mask_ptr = m ? em_tensor_ptr(m) : NULL;
    if (cpu) {
      const em_tensor *ops[4] = {cq, ck, cv, res};
      for (int i = 0; i < 4; i++) layout_of(&a, i, ops[i], c->bh_offset + (i + 1) * BH);
    }
    st = nn_backend(OP, q)->attention(&a, res, lse, cq, ck, cv);
  }
  const em_tensor *in[3] = {q, k, v};
  if (!st) {
    *out = res;
    res = NULL;
    if (ag_any_requires_grad(3, in)) {
      em_node *n = ag_node_new("ScaledDotProductAttentionBackward", attention_backward, 3, in, 1);
      if (n) {
        n->ctx = c, n->release_ctx = free_ctx;
        c = NULL;
        if (ag_node_save(n, 0, cq) || ag_node_save(n, 1, ck) || ag_node_save(n, 2, cv) || ag_node_save(n, 3, *out) ||
            ag_node_save(n, 4, lse) || ag_node_save(n, 5, m)) {
          ag_node_release(n);
          n = NULL;
        }
      }
      st = ag_finish_record(out, n);
    }
  }
  free(c);
  em_tensor *tmp[] = {cq, ck, cv, m, lse, res};
  nn_release(6, tmp);
  return st;
}
