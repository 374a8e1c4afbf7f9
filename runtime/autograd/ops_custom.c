/* ops_custom.c - differentiable functions whose backward the caller writes (for example
 * in Lua through an FFI callback): ember.autograd.Function. */
#include <stdlib.h>
#include <string.h>
#include "autograd_impl.h"

typedef struct {
  em_custom_backward backward;
  em_custom_release release;
  void *ctx;
  int n_inputs;
  int *ndims;
  int64_t (*shapes)[EM_MAX_DIMS];
} custom_ctx;

static void custom_release(em_node *n) {
  custom_ctx *c = n->ctx;
  if (!c) return;
  if (c->release) c->release(c->ctx);
  free(c->ndims);
  free(c->shapes);
  free(c);
}

static em_status custom_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  custom_ctx *c = n->ctx;
  em_status st = c->backward(c->ctx, n->n_outputs, go, n->n_inputs, gi);
  if (st) return st;
  for (int i = 0; i < n->n_inputs; i++) {
    em_tensor *g = gi[i];
    if (!g) continue;
    if (!em_node_needs_input_grad(n, i)) {
      em_tensor_release(g);
      gi[i] = NULL;
      continue;
    }
    if (g->ndim != c->ndims[i] || memcmp(g->sizes, c->shapes[i], sizeof(int64_t) * g->ndim))
      return em_set_error(EM_ERR_SHAPE, "%s: backward returned a gradient of shape %s for input %d of shape %s",
                          n->name, EM_SHAPE(g), i + 1, tn_shape_str(c->ndims[i], c->shapes[i]));
  }
  return EM_OK;
}

em_status em_ag_custom(int n_inputs, em_tensor *const *inputs, int n_outputs, em_tensor *const *outputs,
                       em_custom_backward backward, em_custom_release release, void *ctx, const char *name) {
  if (!backward || n_outputs < 1 || n_inputs < 0)
    return em_set_error(EM_ERR_ARGUMENT, "Function: expected a backward function and at least one output");
  if (!ag_any_requires_grad(n_inputs, (const em_tensor *const *)inputs)) {
    if (release) release(ctx);
    return EM_OK;
  }
  em_node *n = ag_node_new(name ? name : "CustomBackward", custom_backward, n_inputs, (const em_tensor *const *)inputs,
                           n_outputs);
  custom_ctx *c = n ? calloc(1, sizeof *c) : NULL;
  if (c) {
    c->ndims = calloc(n_inputs ? n_inputs : 1, sizeof *c->ndims);
    c->shapes = calloc(n_inputs ? n_inputs : 1, sizeof *c->shapes);
  }
  if (!c || !c->ndims || !c->shapes) {
    if (c) free(c->ndims), free(c->shapes), free(c);
    ag_node_release(n);
    if (release) release(ctx);
    return em_set_error(EM_ERR_MEMORY, "Function: out of memory recording the graph");
  }
  c->backward = backward, c->release = release, c->ctx = ctx, c->n_inputs = n_inputs;
  for (int i = 0; i < n_inputs; i++) {
    if (!inputs[i]) continue;
    c->ndims[i] = inputs[i]->ndim;
    memcpy(c->shapes[i], inputs[i]->sizes, sizeof(int64_t) * inputs[i]->ndim);
  }
  n->ctx = c;
  n->release_ctx = custom_release;
  for (int k = 0; k < n_outputs; k++) {
    em_status st = ag_set_history(outputs[k], n, k);
    if (st) return st;
  }
  return EM_OK;
}
