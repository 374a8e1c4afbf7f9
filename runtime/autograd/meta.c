/* meta.c - per-tensor autograd records, grad mode, nodes and their wiring. */
#include <stdlib.h>
#include <string.h>
#include "autocast.h"
#include "autograd_impl.h"

static _Thread_local int grad_disabled; /* inverted so that the zero default means "on" */
static atomic_ullong node_counter;

int em_grad_enabled(void) { return !grad_disabled; }
void em_set_grad_enabled(int enabled) { grad_disabled = !enabled; }

/* ---- nodes ---- */

void ag_node_retain(em_node *n) {
  if (n) atomic_fetch_add(&n->refcount, 1);
}

void ag_node_drop_saved(em_node *n) {
  for (int s = 0; s < EM_NODE_MAX_SAVED; s++) {
    em_tensor_release(n->saved[s]);
    n->saved[s] = NULL;
  }
  if (n->release_ctx) n->release_ctx(n);
  n->release_ctx = NULL;
  n->ctx = NULL;
}

/* Nodes are released iteratively: a long chain (an RNN unrolled over 10k steps) would
 * otherwise recurse 10k frames deep. */
void ag_node_release(em_node *n) {
  em_node *stack_local[64];
  em_node **stack = stack_local;
  int top = 0, cap = 64;
  if (n) stack[top++] = n;
  while (top) {
    em_node *cur = stack[--top];
    if (atomic_fetch_sub(&cur->refcount, 1) != 1) continue;
    ag_node_drop_saved(cur);
    if (cur->leaf) {
      em_autograd_meta *m = cur->leaf->autograd;
      if (m && m->accumulator == cur) m->accumulator = NULL;
      em_tensor_release(cur->leaf);
    }
    for (int k = 0; k < EM_NODE_MAX_OUTPUTS; k++)
      if (cur->retain[k]) ((em_autograd_meta *)cur->retain[k]->autograd)->retains_grad = false;
    for (int i = 0; i < cur->n_inputs; i++) {
      em_node *next = cur->next[i].node;
      if (!next) continue;
      if (top == cap) {
        em_node **grown = malloc(sizeof *grown * cap * 2);
        if (!grown) { /* cannot grow: fall back to recursion for this edge */
          ag_node_release(next);
          continue;
        }
        memcpy(grown, stack, sizeof *grown * top);
        if (stack != stack_local) free(stack);
        stack = grown;
        cap *= 2;
      }
      stack[top++] = next;
    }
    free(cur->next);
    em_sparse_grad_release(cur->sparse_in);
    free(cur->buffer);
    free(cur);
  }
  if (stack != stack_local) free(stack);
}

static em_node *node_alloc(const char *name, int n_inputs, int n_outputs) {
  em_node *n = calloc(1, sizeof *n);
  if (!n) return NULL;
  n->next = calloc(n_inputs ? n_inputs : 1, sizeof *n->next);
  if (!n->next) {
    free(n);
    return NULL;
  }
  atomic_init(&n->refcount, 1);
  n->name = name;
  n->n_inputs = n_inputs;
  n->n_outputs = n_outputs;
  n->seq = atomic_fetch_add(&node_counter, 1);
  return n;
}

/* The node that receives t's gradient: its grad_fn, or its leaf accumulator (shared by
 * every use of the leaf in the graph, so the engine knows when its gradient is complete). */
static em_node *gradient_edge(em_tensor *t, int *input_nr) {
  em_autograd_meta *m = t->autograd;
  *input_nr = 0;
  if (!m || !m->requires_grad) return NULL;
  if (m->grad_fn) {
    *input_nr = m->output_nr;
    ag_node_retain(m->grad_fn);
    return m->grad_fn;
  }
  if (m->accumulator) {
    ag_node_retain(m->accumulator);
    return m->accumulator;
  }
  em_node *acc = node_alloc("AccumulateGrad", 0, 1);
  if (!acc) return NULL;
  em_tensor_retain(t);
  acc->leaf = t;
  m->accumulator = acc;
  return acc;
}

em_node *ag_node_new(const char *name, em_backward_fn backward, int n_inputs, const em_tensor *const *inputs,
                     int n_outputs) {
  em_node *n = node_alloc(name, n_inputs, n_outputs);
  if (!n) {
    em_set_error(EM_ERR_MEMORY, "%s: out of memory recording the autograd graph", name);
    return NULL;
  }
  n->backward = backward;
  n->cpu_bf16 = ag_autocast_cpu_bf16();
  for (int i = 0; i < n_inputs; i++) {
    if (!inputs[i]) continue;
    n->next[i].node = gradient_edge((em_tensor *)inputs[i], &n->next[i].input_nr);
    if (i < 2) {
      n->ndims[i] = inputs[i]->ndim;
      memcpy(n->shapes[i], inputs[i]->sizes, sizeof(int64_t) * inputs[i]->ndim);
      n->dtypes[i] = inputs[i]->dtype;
    }
  }
  return n;
}

em_status ag_node_save(em_node *n, int slot, const em_tensor *t) {
  if (!t) return EM_OK;
  em_tensor_release(n->saved[slot]);
  n->saved[slot] = tn_tensor_alias(t);
  return n->saved[slot] ? EM_OK : em_last_status();
}

/* ---- per-tensor records ---- */

static void meta_free(void *p) {
  em_autograd_meta *m = p;
  em_tensor_release(m->grad);
  em_tensor_release(m->grad_dest);
  em_sparse_grad_release(m->sparse_grad);
  if (m->grad_fn) {
    for (int k = 0; k < EM_NODE_MAX_OUTPUTS; k++)
      if (m->grad_fn->retain[k] == m->self) m->grad_fn->retain[k] = NULL;
    ag_node_release(m->grad_fn);
  }
  free(m->hooks);
  free(m);
}

em_autograd_meta *ag_meta(em_tensor *t, bool create) {
  if (t->autograd || !create) return t->autograd;
  em_autograd_meta *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->self = t;
  t->autograd = m;
  t->autograd_free = meta_free;
  return m;
}

em_status ag_set_history(em_tensor *out, em_node *node, int nr) {
  em_autograd_meta *m = ag_meta(out, true);
  if (!m) {
    ag_node_release(node);
    return em_set_error(EM_ERR_MEMORY, "%s: out of memory recording the autograd graph", node->name);
  }
  if (nr < node->n_outputs - 1) ag_node_retain(node); /* one reference per output */
  if (m->grad_fn) ag_node_release(m->grad_fn);
  m->grad_fn = node;
  m->output_nr = nr;
  m->requires_grad = true;
  return EM_OK;
}

bool ag_any_requires_grad(int n, const em_tensor *const *inputs) {
  if (grad_disabled) return false;
  for (int i = 0; i < n; i++) {
    const em_autograd_meta *m = inputs[i] ? inputs[i]->autograd : NULL;
    if (m && m->requires_grad) return true;
  }
  return false;
}

em_status em_requires_grad_(em_tensor *t, int requires_grad) {
  em_status st = tn_check_tensor("requires_grad_", t, "tensor");
  if (st) return st;
  em_autograd_meta *m = ag_meta(t, requires_grad != 0);
  if (!m) return requires_grad ? em_set_error(EM_ERR_MEMORY, "requires_grad_: out of memory") : EM_OK;
  if (m->grad_fn && !requires_grad)
    return em_set_error(EM_ERR_ARGUMENT,
                        "requires_grad_: can only change the flag of leaf tensors; this one comes from %s (use "
                        "detach())",
                        m->grad_fn->name);
  if (requires_grad && !em_dtype_is_floating(t->dtype))
    return em_set_error(EM_ERR_DTYPE, "requires_grad_: only floating-point tensors can require grad, got %s",
                        em_dtype_name(t->dtype));
  m->requires_grad = requires_grad != 0;
  return EM_OK;
}

int em_requires_grad(const em_tensor *t) {
  const em_autograd_meta *m = t ? t->autograd : NULL;
  return m && m->requires_grad;
}

int em_is_leaf(const em_tensor *t) {
  const em_autograd_meta *m = t ? t->autograd : NULL;
  return !m || !m->grad_fn;
}

em_tensor *em_grad(const em_tensor *t) {
  const em_autograd_meta *m = t ? t->autograd : NULL;
  if (!m || !m->grad) return NULL;
  em_tensor_retain(m->grad);
  return m->grad;
}

em_status em_set_grad(em_tensor *t, em_tensor *grad) {
  em_status st = tn_check_tensor("set_grad", t, "tensor");
  if (st) return st;
  if (grad) {
    if ((st = tn_check_tensor("set_grad", grad, "gradient"))) return st;
    if (grad->ndim != t->ndim || memcmp(grad->sizes, t->sizes, sizeof(int64_t) * t->ndim))
      return em_set_error(EM_ERR_SHAPE, "set_grad: gradient has shape %s, the tensor has %s", EM_SHAPE(grad),
                          EM_SHAPE(t));
    if (grad->dtype != t->dtype)
      return em_set_error(EM_ERR_DTYPE, "set_grad: gradient has dtype %s, the tensor has %s",
                          em_dtype_name(grad->dtype), em_dtype_name(t->dtype));
  }
  em_autograd_meta *m = ag_meta(t, grad != NULL);
  if (!m) return grad ? em_set_error(EM_ERR_MEMORY, "set_grad: out of memory") : EM_OK;
  em_tensor_retain(grad);
  em_tensor_release(m->grad);
  m->grad = grad;
  em_sparse_grad_release(m->sparse_grad); /* one kind of gradient at a time */
  m->sparse_grad = NULL;
  return EM_OK;
}

em_status em_set_grad_destination(em_tensor *leaf, em_tensor *dest) {
  em_status st = tn_check_tensor("set_grad_destination", leaf, "tensor");
  if (st) return st;
  if (dest) {
    if ((st = tn_check_tensor("set_grad_destination", dest, "destination"))) return st;
    if (dest->ndim != leaf->ndim || memcmp(dest->sizes, leaf->sizes, sizeof(int64_t) * leaf->ndim) ||
        dest->dtype != leaf->dtype || !em_tensor_is_contiguous(dest) ||
        dest->storage->device.type != leaf->storage->device.type ||
        dest->storage->device.index != leaf->storage->device.index)
      return em_set_error(EM_ERR_ARGUMENT,
                          "set_grad_destination: the destination (%s %s) must be contiguous, with the tensor's shape "
                          "%s, dtype %s and device",
                          em_dtype_name(dest->dtype), EM_SHAPE(dest), EM_SHAPE(leaf), em_dtype_name(leaf->dtype));
  }
  em_autograd_meta *m = ag_meta(leaf, dest != NULL);
  if (!m) return dest ? em_set_error(EM_ERR_MEMORY, "set_grad_destination: out of memory") : EM_OK;
  em_tensor_retain(dest);
  em_tensor_release(m->grad_dest);
  m->grad_dest = dest;
  return EM_OK;
}

em_tensor *ag_node_grad_destination(const em_node *n, int i, int ndim, const int64_t *shape, em_dtype dtype) {
  const em_node *acc = n->next[i].node;
  if (!acc || acc->backward || !acc->leaf) return NULL; /* not a leaf's accumulator */
  const em_autograd_meta *m = acc->leaf->autograd;
  em_tensor *d = m ? m->grad_dest : NULL;
  /* not when a gradient for the leaf arrived already in this backward: it may be d itself */
  if (!d || m->grad || (acc->buffer && acc->buffer[0]) || d->dtype != dtype || d->ndim != ndim ||
      memcmp(d->sizes, shape, sizeof(int64_t) * ndim))
    return NULL;
  em_tensor_retain(d);
  return d;
}

em_status em_retain_grad(em_tensor *t) {
  em_autograd_meta *m = t ? t->autograd : NULL;
  if (!m || !m->requires_grad) return em_set_error(EM_ERR_ARGUMENT, "retain_grad: the tensor does not require grad");
  if (!m->grad_fn) return EM_OK; /* leaves keep their grad anyway */
  if (m->output_nr >= EM_NODE_MAX_OUTPUTS)
    return em_set_error(EM_ERR_UNSUPPORTED, "retain_grad: not supported on output %d of %s", m->output_nr,
                        m->grad_fn->name);
  m->grad_fn->retain[m->output_nr] = t;
  m->retains_grad = true;
  return EM_OK;
}

const char *em_grad_fn_name(const em_tensor *t) {
  const em_autograd_meta *m = t ? t->autograd : NULL;
  return m && m->grad_fn ? m->grad_fn->name : NULL;
}

em_status em_detach(em_tensor **out, const em_tensor *a) {
  em_status st = tn_check_tensor("detach", a, "tensor");
  if (st) return st;
  *out = tn_tensor_alias(a);
  return *out ? EM_OK : em_last_status();
}

int64_t em_add_leaf_hook(em_tensor *leaf, em_leaf_hook fn, void *ctx) {
  static atomic_llong next_id = 1;
  if (!leaf || !fn) {
    em_set_error(EM_ERR_ARGUMENT, "add_leaf_hook: expected a tensor and a function");
    return 0;
  }
  em_autograd_meta *m = ag_meta(leaf, true);
  if (!m) return em_set_error(EM_ERR_MEMORY, "add_leaf_hook: out of memory"), 0;
  if (m->grad_fn) {
    em_set_error(EM_ERR_ARGUMENT, "add_leaf_hook: the tensor is not a leaf (it comes from %s)", m->grad_fn->name);
    return 0;
  }
  if (m->n_hooks == m->cap_hooks) {
    int cap = m->cap_hooks ? m->cap_hooks * 2 : 2;
    em_leaf_hook_entry *h = realloc(m->hooks, sizeof *h * cap);
    if (!h) return em_set_error(EM_ERR_MEMORY, "add_leaf_hook: out of memory"), 0;
    m->hooks = h;
    m->cap_hooks = cap;
  }
  int64_t id = atomic_fetch_add(&next_id, 1);
  m->hooks[m->n_hooks++] = (em_leaf_hook_entry){id, fn, ctx};
  return id;
}

em_status em_remove_leaf_hook(em_tensor *leaf, int64_t id) {
  em_autograd_meta *m = leaf ? leaf->autograd : NULL;
  for (int i = 0; m && i < m->n_hooks; i++) {
    if (m->hooks[i].id != id) continue;
    memmove(m->hooks + i, m->hooks + i + 1, sizeof *m->hooks * (m->n_hooks - i - 1));
    m->n_hooks--;
    return EM_OK;
  }
  return em_set_error(EM_ERR_ARGUMENT, "remove_leaf_hook: no hook with id %lld on this tensor", (long long)id);
}

em_status em_check_inplace(const char *op, const em_tensor *t, const em_tensor *src) {
  if (!em_grad_enabled()) return EM_OK;
  const em_autograd_meta *m = t ? t->autograd : NULL;
  if (m && m->requires_grad)
    return em_set_error(EM_ERR_ARGUMENT,
                        "%s: in-place operation on a tensor that requires grad%s; run it inside no_grad() or on a "
                        "detached copy",
                        op, m->grad_fn ? "" : " (a leaf)");
  const em_autograd_meta *s = src ? src->autograd : NULL;
  if (s && s->requires_grad)
    return em_set_error(EM_ERR_ARGUMENT,
                        "%s: an in-place operation cannot record gradients for its operand that requires grad; use "
                        "the out-of-place form",
                        op);
  return EM_OK;
}

em_status ag_check_inplace(const char *op, const em_tensor *t) { return em_check_inplace(op, t, NULL); }

/* The tensor core applies the rule through its hook (tensor_impl.h). */
__attribute__((constructor)) static void install_inplace_rule(void) { tn_inplace_rule = em_check_inplace; }

em_status ag_sum_to(em_tensor **out, const em_tensor *grad, int ndim, const int64_t *shape) {
  int lead = grad->ndim - ndim;
  int dims[EM_MAX_DIMS], nd = 0;
  for (int d = 0; d < grad->ndim; d++)
    if (d < lead || (shape[d - lead] == 1 && grad->sizes[d] != 1)) dims[nd++] = d;
  em_tensor *summed = NULL;
  em_status st;
  if (nd == 0) {
    em_tensor_retain((em_tensor *)grad);
    summed = (em_tensor *)grad;
  } else if ((st = em_reduce(EM_SUM, &summed, NULL, grad, dims, nd, 1, 0))) {
    return st;
  }
  st = em_reshape(out, summed, ndim, shape);
  em_tensor_release(summed);
  return st;
}

em_status ag_finish_input_grad(em_node *n, int i, em_tensor *g, em_tensor **slot) {
  em_tensor *summed = NULL, *cast = NULL;
  em_status st = ag_sum_to(&summed, g, n->ndims[i], n->shapes[i]);
  em_tensor_release(g);
  if (st) return st;
  st = em_to(&cast, summed, n->dtypes[i], summed->storage->device);
  em_tensor_release(summed);
  if (!st) *slot = cast;
  return st;
}

em_status ag_finish_record(em_tensor **out, em_node *n) {
  if (!n) {
    em_tensor_release(*out);
    *out = NULL;
    return em_last_status();
  }
  return ag_set_history(*out, n, 0);
}

em_status ag_check_out_free(const char *op, em_tensor **out) {
  if (*out) return em_set_error(EM_ERR_ARGUMENT, "%s: an output tensor cannot be given while recording gradients", op);
  return EM_OK;
}
