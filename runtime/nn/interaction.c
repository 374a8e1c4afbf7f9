/* interaction.c - DLRM's dot interaction (ember/nn.h em_nn_dot_interaction): one fused
 * kernel forward and backward (cpu/interaction.c) instead of cat, view, bmm, a gather and
 * cat, so neither the [B, n, D] stack nor the [B, n, n] products are ever stored. */
#include <stdio.h>
#include <stdlib.h>
#include "nn_impl.h"

typedef struct interaction_ctx {
  int n, self;
  em_tensor **features; /* n contiguous history-free aliases */
} interaction_ctx;

static void release_ctx(em_node *node) {
  interaction_ctx *c = node->ctx;
  if (!c) return;
  for (int i = 0; i < c->n; i++) em_tensor_release(c->features[i]);
  free(c->features);
  free(c);
}

static em_status interaction_backward(em_node *node, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  interaction_ctx *c = node->ctx;
  em_tensor *gout = NULL;
  em_status st = nn_contiguous(&gout, go[0]);
  const em_backend *be = st ? NULL : nn_backend("dot_interaction", gout);
  if (!st && !be) st = em_last_status();
  for (int i = 0; i < c->n && !st; i++)
    if (em_node_needs_input_grad(node, i)) st = em_empty_like(&gi[i], c->features[i]);
  if (!st) st = be->dot_interaction_backward(gi, gout, c->features, c->n, c->self);
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
  for (int i = 1; i < n; i++) {
    char what[32];
    snprintf(what, sizeof what, "feature %d", i + 1);
    if ((st = nn_check_like(op, features[i], what, features[0]))) return st;
    if (features[i]->ndim != 2 || features[i]->sizes[0] != features[0]->sizes[0] ||
        features[i]->sizes[1] != features[0]->sizes[1])
      return em_set_error(EM_ERR_SHAPE, "%s: feature %d has shape %s, expected feature 1's %s", op, i + 1,
                          EM_SHAPE(features[i]), EM_SHAPE(features[0]));
  }
  const em_backend *be = nn_backend(op, features[0]);
  if (!be) return em_last_status();
  if (!be->dot_interaction || !be->dot_interaction_backward)
    return em_set_error(EM_ERR_UNSUPPORTED, "%s: not implemented on %s (only on the CPU and cuda)", op, be->name);
  interaction_ctx *c = calloc(1, sizeof *c);
  em_tensor **fs = calloc((size_t)n, sizeof *fs);
  if (!c || !fs) {
    free(c), free(fs);
    return em_set_error(EM_ERR_MEMORY, "%s: out of memory", op);
  }
  c->n = n, c->self = self_interaction != 0, c->features = fs;
  for (int i = 0; i < n && !st; i++) {
    em_tensor *contig = NULL;
    if (!(st = nn_contiguous(&contig, features[i]))) {
      fs[i] = tn_tensor_alias(contig); /* history-free: the node must not keep its inputs' graph */
      if (!fs[i]) st = em_last_status();
    }
    em_tensor_release(contig);
  }
  int64_t B = features[0]->sizes[0], D = features[0]->sizes[1];
  int64_t shape[2] = {B, D + (int64_t)n * (n - 1 + 2 * c->self) / 2};
  if (!st) st = em_empty(out, 2, shape, features[0]->dtype, features[0]->storage->device);
  if (!st && (st = be->dot_interaction(*out, fs, n, c->self))) {
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
