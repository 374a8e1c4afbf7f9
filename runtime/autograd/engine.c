/* engine.c - runs the tape backward.
 *
 * 1. Discover every node reachable from the root and count, for each, how many edges
 *    point at it (its dependencies).
 * 2. Run ready nodes (all dependencies delivered) newest first, leaf accumulators as soon
 *    as they are ready, so the order is the same on every run and on every rank. A node's
 *    incoming gradients are summed in its buffer.
 * 3. A leaf accumulator adds the finished gradient into leaf.grad (in place when .grad
 *    exists, so a data-parallel reducer can make .grad a view into its bucket) and then
 *    fires the leaf's hooks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "autocast.h"
#include "autograd_impl.h"

typedef struct {
  em_node **items;
  int n, cap;
} node_list;

static int push(node_list *l, em_node *n) {
  if (l->n == l->cap) {
    int cap = l->cap ? l->cap * 2 : 64;
    em_node **grown = realloc(l->items, sizeof *grown * cap);
    if (!grown) return 0;
    l->items = grown;
    l->cap = cap;
  }
  l->items[l->n++] = n;
  return 1;
}

/* Which ready node runs first. A leaf accumulator runs as soon as it is ready (in the order
 * the accumulators became ready), then the newest node. An accumulator is created once and
 * reused by every graph that uses its leaf while an older graph still holds it, so its seq
 * says when the garbage collector last freed that graph, not where it stands in this one:
 * ordering accumulators by seq made the point where a leaf's hooks fire (a data-parallel
 * bucket's allreduce) move against the backward's own collectives (a model-parallel
 * layer's all_to_all) differently on each rank, and the ranks deadlocked. Running them at
 * once is what PyTorch does too, and starts a bucket's reduction as early as it can. */
static int runs_before(const em_node *a, const em_node *b) {
  if (a->leaf || b->leaf) return a->leaf && (!b->leaf || a->ready_order < b->ready_order);
  return a->seq > b->seq;
}

/* A heap ordered by runs_before: its top runs next. */
static void heap_push(node_list *h, em_node *n) {
  int i = h->n - 1;
  (void)n;
  while (i > 0) {
    int parent = (i - 1) / 2;
    if (!runs_before(h->items[i], h->items[parent])) break;
    em_node *t = h->items[parent];
    h->items[parent] = h->items[i];
    h->items[i] = t;
    i = parent;
  }
}

static em_node *heap_pop(node_list *h) {
  em_node *top = h->items[0];
  h->items[0] = h->items[--h->n];
  int i = 0;
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    if (l < h->n && runs_before(h->items[l], h->items[m])) m = l;
    if (r < h->n && runs_before(h->items[r], h->items[m])) m = r;
    if (m == i) break;
    em_node *t = h->items[m];
    h->items[m] = h->items[i];
    h->items[i] = t;
    i = m;
  }
  return top;
}

/* buffer[slot] += g (takes over g). */
static em_status accumulate_into(em_tensor **slot, em_tensor *g) {
  if (!*slot) {
    *slot = g;
    return EM_OK;
  }
  em_tensor *sum = NULL;
  em_status st = em_binary(EM_ADD, &sum, *slot, g);
  em_tensor_release(g);
  if (st) return st;
  em_tensor_release(*slot);
  *slot = sum;
  return EM_OK;
}

static em_status run_accumulator(em_node *n) {
  em_tensor *leaf = n->leaf, *g = n->buffer[0];
  em_autograd_meta *m = leaf->autograd;
  em_status st;
  if (n->sparse_in || (g && m->sparse_grad)) { /* row-sparse gradients: sparse_grad.c */
    int done = 0;
    if ((st = ag_sparse_accumulate(n, &n->buffer[0], &done))) return st;
    g = n->buffer[0];
    if (done) goto hooks;
  }
  if (!g) return EM_OK;
  if (g->ndim != leaf->ndim || memcmp(g->sizes, leaf->sizes, sizeof(int64_t) * leaf->ndim))
    return em_set_error(EM_ERR_SHAPE, "backward: gradient of shape %s for a leaf of shape %s", EM_SHAPE(g),
                        EM_SHAPE(leaf));
  if (m->grad) {
    em_tensor *acc = m->grad;
    if ((st = em_binary(EM_ADD, &acc, m->grad, g))) return st; /* in place */
  } else if (g != m->grad_dest &&
             (g->dtype != leaf->dtype || !em_tensor_is_contiguous(g) || atomic_load(&g->refcount) > 1)) {
    /* Own a fresh contiguous copy: the buffer may alias a saved tensor or a broadcast view. */
    if ((st = em_to(&m->grad, g, leaf->dtype, leaf->storage->device))) return st;
    if (m->grad == g) {
      em_tensor_release(m->grad);
      m->grad = NULL;
      if ((st = em_clone(&m->grad, g))) return st;
    }
  } else {
    em_tensor_retain(g);
    m->grad = g;
  }
hooks:
  for (int i = 0; i < m->n_hooks; i++) m->hooks[i].fn(leaf, m->hooks[i].ctx);
  return EM_OK;
}

static void clear_buffer(em_node *n) {
  em_sparse_grad_release(n->sparse_in);
  n->sparse_in = NULL;
  if (!n->buffer) return;
  for (int k = 0; k < n->n_outputs; k++) em_tensor_release(n->buffer[k]);
  free(n->buffer);
  n->buffer = NULL;
}

static em_status run_backward(em_tensor *root, const em_tensor *grad, int retain_graph) {
  em_status st = tn_check_tensor("backward", root, "tensor");
  if (st) return st;
  em_autograd_meta *m = root->autograd;
  if (!m || !m->requires_grad)
    return em_set_error(EM_ERR_ARGUMENT,
                        "backward: the tensor does not require grad and has no grad_fn (did a parameter set "
                        "requires_grad, and was the forward run outside no_grad?)");
  em_tensor *seed = NULL;
  if (grad) {
    if ((st = tn_check_tensor("backward", grad, "gradient"))) return st;
    if (grad->ndim != root->ndim || memcmp(grad->sizes, root->sizes, sizeof(int64_t) * root->ndim))
      return em_set_error(EM_ERR_SHAPE, "backward: gradient has shape %s, the tensor has %s", EM_SHAPE(grad),
                          EM_SHAPE(root));
    em_tensor_retain((em_tensor *)grad);
    seed = (em_tensor *)grad;
  } else {
    if (em_tensor_numel(root) != 1)
      return em_set_error(EM_ERR_SHAPE,
                          "backward: the tensor has shape %s; a gradient can be implied only for one-element "
                          "outputs (pass a gradient of the same shape)",
                          EM_SHAPE(root));
    if ((st = em_ones(&seed, root->ndim, root->sizes, root->dtype, root->storage->device))) return st;
  }

  /* The node that receives the seed: the root's grad_fn, or for a leaf root its
   * accumulator (created here when no graph uses the leaf). */
  em_node *start;
  int start_nr = 0;
  if (m->grad_fn) {
    start = m->grad_fn;
    start_nr = m->output_nr;
    ag_node_retain(start);
  } else {
    const em_tensor *self[1] = {root};
    em_node *wrapper = ag_node_new("backward", NULL, 1, self, 1);
    if (!wrapper) {
      em_tensor_release(seed);
      return em_last_status();
    }
    start = wrapper->next[0].node;
    ag_node_retain(start);
    ag_node_release(wrapper);
  }
  if (start->released) {
    ag_node_release(start);
    em_tensor_release(seed);
    return em_set_error(EM_ERR_ARGUMENT,
                        "backward: trying to run backward through the graph a second time (its saved tensors were "
                        "freed); pass retain_graph = true to the first backward");
  }

  /* 1. discovery */
  node_list all = {0}, stack = {0}, ready = {0};
  st = EM_OK;
  if (!push(&all, start) || !push(&stack, start)) st = em_set_error(EM_ERR_MEMORY, "backward: out of memory");
  start->deps = 0;
  start->buffer = NULL;
  while (!st && stack.n) {
    em_node *n = stack.items[--stack.n];
    for (int i = 0; i < n->n_inputs; i++) {
      em_node *next = n->next[i].node;
      if (!next) continue;
      /* A node's buffer doubles as its "seen" mark during discovery. */
      if (!next->buffer) {
        next->buffer = calloc(next->n_outputs, sizeof *next->buffer);
        next->deps = 0;
        if (!next->buffer || !push(&all, next) || !push(&stack, next)) {
          st = em_set_error(EM_ERR_MEMORY, "backward: out of memory");
          break;
        }
      }
      next->deps++;
    }
  }
  if (!st && !start->buffer) {
    start->buffer = calloc(start->n_outputs, sizeof *start->buffer);
    if (!start->buffer) st = em_set_error(EM_ERR_MEMORY, "backward: out of memory");
  }
  if (!st) {
    start->buffer[start_nr] = seed;
    seed = NULL;
    start->ready_order = 0;
    if (start->deps == 0 && push(&ready, start)) heap_push(&ready, start);
  }

  /* 2. execution */
  em_tensor *grad_in_local[16];
  uint64_t n_became_ready = 0;
  while (!st && ready.n) {
    em_node *n = heap_pop(&ready);
    if (n->leaf) {
      st = run_accumulator(n);
    } else if (n->released) {
      st = em_set_error(EM_ERR_ARGUMENT,
                        "backward: trying to run backward through the graph a second time (the saved tensors of %s "
                        "were freed); pass retain_graph = true to the first backward",
                        n->name);
    } else {
      /* Gradients for non-leaves that asked for them. */
      for (int k = 0; k < n->n_outputs && k < EM_NODE_MAX_OUTPUTS; k++) {
        em_tensor *t = n->retain[k];
        if (!t || !n->buffer[k]) continue;
        em_tensor *copy = NULL;
        if ((st = em_clone(&copy, n->buffer[k]))) break;
        em_autograd_meta *tm = t->autograd;
        em_tensor_release(tm->grad);
        tm->grad = copy;
      }
      if (st) break;
      em_tensor **grad_in = n->n_inputs <= 16 ? grad_in_local : calloc(n->n_inputs, sizeof *grad_in);
      if (!grad_in) {
        st = em_set_error(EM_ERR_MEMORY, "backward: out of memory");
        break;
      }
      memset(grad_in, 0, sizeof *grad_in * n->n_inputs);
      int bf16_was = ag_autocast_cpu_bf16_backward(n->cpu_bf16);
      st = n->backward(n, n->buffer, grad_in);
      ag_autocast_cpu_bf16_backward(bf16_was);
      for (int i = 0; i < n->n_inputs; i++) {
        em_node *next = n->next[i].node;
        if (!next) {
          em_tensor_release(grad_in[i]);
          continue;
        }
        if (!st && grad_in[i]) st = accumulate_into(&next->buffer[n->next[i].input_nr], grad_in[i]);
        else em_tensor_release(grad_in[i]);
        if (--next->deps == 0 && !st) {
          next->ready_order = ++n_became_ready;
          if (!push(&ready, next)) st = em_set_error(EM_ERR_MEMORY, "backward: out of memory");
          else heap_push(&ready, next);
        }
      }
      if (grad_in != grad_in_local) free(grad_in);
      if (st && !strstr(em_last_error(), n->name)) {
        char msg[900];
        snprintf(msg, sizeof msg, "%s", em_last_error());
        em_set_error(em_last_status(), "backward of %s: %s", n->name, msg);
      }
    }
    clear_buffer(n);
    if (!retain_graph && !n->leaf) {
      /* Drop saved tensors now: memory comes back during backward, not after. */
      ag_node_drop_saved(n);
      n->released = true;
    }
  }

  /* 3. cleanup (also on errors) */
  for (int i = 0; i < all.n; i++) clear_buffer(all.items[i]);
  em_tensor_release(seed);
  ag_node_release(start);
  free(all.items);
  free(stack.items);
  free(ready.items);
  return st;
}

/* Backward runs in the dtypes the forward chose: autocast (autocast.h) is off while it runs,
 * also for Lua backward functions and hooks, whatever region backward is called in. */
em_status em_backward(em_tensor *root, const em_tensor *grad, int retain_graph) {
  em_autocast_saved saved = ag_autocast_suspend();
  em_status st = run_backward(root, grad, retain_graph);
  ag_autocast_resume(saved);
  return st;
}
