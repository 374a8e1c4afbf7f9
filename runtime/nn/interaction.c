/* interaction.c - DLRM's dot interaction (ember/nn.h em_nn_dot_interaction): one fused
 * kernel forward and backward (cpu/interaction.c) instead of cat, view, bmm, a gather and
 * cat, so neither the [B, n, D] stack nor the [B, n, n] products are ever stored. */
#include <stdio.h>
#include <stdlib.h>
#include "nn_impl.h"

typedef struct interaction_ctx {
  int n, self; /* n features for the kernel */
  int nin; /* inputs: a [B, D] tensor is one feature, a [T, B, D] tensor T of them */
  int *count; /* features per input, then (count + nin) whether the input is 3-d */
  em_tensor **features; /* n contiguous history-free aliases (slices of a 3-d input) */
} interaction_ctx;

static void release_ctx(em_node *node) {
  interaction_ctx *c = node->ctx;
  if (!c) return;
  for (int i = 0; i < c->n; i++) em_tensor_release(c->features[i]);
  free(c->features);
  free(c->count);
  free(c);
}

static em_status interaction_backward(em_node *node, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  interaction_ctx *c = node->ctx;
  em_tensor *gout = NULL, **slots = calloc((size_t)c->n, sizeof *slots);
  if (!slots) return em_set_error(EM_ERR_MEMORY, "dot_interaction: out of memory");
  em_status st = nn_contiguous(&gout, go[0]);
  const em_backend *be = st ? NULL : nn_backend("dot_interaction", gout);
  if (!st && !be) st = em_last_status();
  /* one gradient per input; a 3-d input's features write into slices of its [T, B, D] */
  for (int i = 0, f = 0; i < c->nin && !st; f += c->count[i], i++) {
    if (!em_node_needs_input_grad(node, i)) continue;
    const em_tensor *x = c->features[f];
    if (!c->count[c->nin + i]) {
      if (!(st = em_empty_like(&gi[i], x))) {
        em_tensor_retain(gi[i]);
        slots[f] = gi[i];
      }
      continue;
    }
    int64_t shape[3] = {c->count[i], x->sizes[0], x->sizes[1]};
    st = em_empty(&gi[i], 3, shape, x->dtype, x->storage->device);
    for (int k = 0; k < c->count[i] && !st; k++) st = em_select(&slots[f + k], gi[i], 0, k);
  }
  if (!st) st = be->dot_interaction_backward(slots, gout, c->features, c->n, c->self);
  for (int f = 0; f < c->n; f++) em_tensor_release(slots[f]);
  free(slots);
  em_tensor_release(gout);
  return st;
}

em_status em_nn_dot_interaction(em_tensor **out, em_tensor *const *features, int n, int self_interaction) {
  const char *op = "dot_interaction";
  em_status st;
  if ((st = nn_check_out(op, out))) return st;
  if (n < 1 || !features) return em_set_error(EM_ERR_ARGUMENT, "%s: expected at least one feature tensor, got %d", op, n);
  if ((st = nn_check_float(op, features[0], "feature 1"))) return st;
  if (features[0]->ndim != 2)
    return em_set_error(EM_ERR_SHAPE, "%s: expected features of shape [B, D], feature 1 has shape %s", op,
                        EM_SHAPE(features[0]));
  int64_t B = features[0]->sizes[0], D = features[0]->sizes[1];
  int total = 0;
  for (int i = 0; i < n; i++) {
    char what[32];
    snprintf(what, sizeof what, "feature %d", i + 1);
    if (i && (st = nn_check_like(op, features[i], what, features[0]))) return st;
    const em_tensor *x = features[i];
    int nd = x->ndim;
    if (!((nd == 2 && x->sizes[0] == B && x->sizes[1] == D) ||
          (i > 0 && nd == 3 && x->sizes[1] == B && x->sizes[2] == D && x->sizes[0] <= 65536)))
      return em_set_error(EM_ERR_SHAPE, "%s: feature %d has shape %s, expected feature 1's %s (or [T, %lld, %lld]: T "
                          "features stacked)", op, i + 1, EM_SHAPE(x), EM_SHAPE(features[0]), (long long)B, (long long)D);
    total += nd == 3 ? (int)x->sizes[0] : 1;
  }
  const em_backend *be = nn_backend(op, features[0]);
  if (!be) return em_last_status();
  if (!be->dot_interaction || !be->dot_interaction_backward)
    return em_set_error(EM_ERR_UNSUPPORTED, "%s: not implemented on %s (only on the CPU and cuda)", op, be->name);
  interaction_ctx *c = calloc(1, sizeof *c);
  em_tensor **fs = calloc((size_t)(total ? total : 1), sizeof *fs);
  int *count = calloc((size_t)n * 2, sizeof *count);
  if (!c || !fs || !count) {
    free(c), free(fs), free(count);
    return em_set_error(EM_ERR_MEMORY, "%s: out of memory", op);
  }
  c->n = total, c->self = self_interaction != 0, c->features = fs, c->nin = n, c->count = count;
  for (int i = 0, f = 0; i < n && !st; i++) {
    em_tensor *contig = NULL;
    count[i] = features[i]->ndim == 3 ? (int)features[i]->sizes[0] : 1;
    count[n + i] = features[i]->ndim == 3;
    if ((st = nn_contiguous(&contig, features[i]))) break;
    em_tensor *alias = tn_tensor_alias(contig); /* history-free: the node must not keep its inputs' graph */
    em_tensor_release(contig);
    if (!alias) {
      st = em_last_status();
      break;
    }
    if (features[i]->ndim == 2) {
      fs[f++] = alias;
      continue;
    }
    for (int k = 0; k < count[i] && !st; k++) st = em_select(&fs[f++], alias, 0, k);
    em_tensor_release(alias);
  }
  int64_t shape[2] = {B, D + (int64_t)total * (total - 1 + 2 * c->self) / 2};
  if (!st) st = em_empty(out, 2, shape, features[0]->dtype, features[0]->storage->device);
  if (!st && (st = be->dot_interaction(*out, fs, total, c->self))) {
    em_tensor_release(*out);
    *out = NULL;
  }
  if (!st && ag_any_requires_grad(n, (const em_tensor *const *)features)) {
    em_node *node = ag_node_new("DotInteractionBackward", interaction_backward, n, (const em_tensor *const *)features, 1);
    if (node) {
      node->ctx = c;
      node->release_ctx = release_ctx;
      c = NULL;
    }
    st = ag_finish_record(out, node);
  }
  if (c) {
    em_node tmp = {.ctx = c};
    release_ctx(&tmp);
  }
  return st;
}
