/* reducer.c - buckets, leaf hooks and the reduction of one iteration.
 *
 * Parameters are laid out in buckets (flat buffers, one dtype and device each) in the
 * order their gradients are expected: reverse parameter order at first, the order they
 * really arrived after the first iteration (setup.c rebuilds once). Each parameter's
 * .grad becomes a view of its slice, so the gradient is reduced where the optimizer reads
 * it: no copy back.
 *
 * Buckets of CPU float gradients live in symmetric memory (runtime/distributed/symmetric.c) when
 * every rank is on one host: each rank's bucket is mapped by all, and the allreduce sums
 * each slice straight from the other ranks' buckets, on the thread running backward. That
 * replaces MPI's copies into and out of its own shared queues, which on a machine whose
 * cores all compute cost more than the sums themselves (and a communication thread would
 * only take turns with backward on the same cores).
 *
 * During a synchronised backward, the leaf hook of a parameter copies its gradient into
 * its slice, multiplied by 1/world_size for an MPI bucket (the average, folded into a copy
 * that happens anyway; when .grad already is the slice the product is taken in place; a
 * shared bucket's reduction applies it instead), and counts the bucket down. A bucket whose count reaches zero starts its allreduce at once, but only
 * after every bucket before it has started: buckets reach MPI in the same order on every
 * rank whatever order the hooks fire in. When the last parameter is ready, the hook waits
 * for the buckets still in flight, so backward returns with every gradient reduced and the
 * optimizer needs nothing else.
 *
 * A hook cannot return an error; one is kept and raised by the next call into the reducer.
 * A parameter that gets no gradient leaves the iteration incomplete (its bucket never
 * starts); the next forward reports it by name (setup.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "autograd/autograd_impl.h"
#include "distributed/ddp_impl.h"
#include "plugins/plugin_api.h"

/* ---------------------------------------------------------------- errors from hooks */

static void hook_fail(em_ddp *d, em_status st, const char *fmt, const char *name) {
  if (d->hook_status) return;
  char detail[700];
  snprintf(detail, sizeof detail, "%s", em_last_error());
  d->hook_status = st;
  int n = snprintf(d->hook_error, sizeof d->hook_error, "DistributedDataParallel: ");
  n += snprintf(d->hook_error + n, sizeof d->hook_error - n, fmt, name ? name : "", detail);
}

/* ---------------------------------------------------------------- buckets */

void ddp_free_buckets(ddp_bucket *b, int nb) {
  if (!b) return;
  for (int i = 0; i < nb; i++) {
    if (b[i].work) {
      em_dist_work_wait(b[i].work, 0);
      em_dist_work_release(b[i].work);
    }
    em_tensor_release(b[i].flat);
    em_tensor_release(b[i].wire);
    dist_symm_release(b[i].symm);
    free(b[i].params);
  }
  free(b);
}

static int same_device(em_device a, em_device b) { return a.type == b.type && a.index == b.index; }

/* A bucket in symmetric memory where it can be (b->flat set), or nothing (b->flat NULL).
 * Collective: every rank decides alike, from the same layout and options, and
 * dist_symm_new agrees on the rest. */
static em_status shared_bucket(em_ddp *d, ddp_bucket *b, int64_t numel) {
  if (!d->o.shared_memory || d->world < 2 || d->o.comm_hook != EM_DDP_HOOK_NONE || b->device.type != EM_CPU ||
      !dist_symm_supports(b->dtype) || !dist_symm_enabled()) {
    if (!d->shm_why[0])
      snprintf(d->shm_why, sizeof d->shm_why, "%s",
               !d->o.shared_memory                  ? "shared_memory = false"
               : d->world < 2                       ? "one rank"
               : d->o.comm_hook != EM_DDP_HOOK_NONE ? "a comm_hook compresses the buckets"
               : b->device.type != EM_CPU           ? "the bucket is not on the CPU"
               : !dist_symm_supports(b->dtype)      ? "the bucket's dtype is not a floating one"
                                                    : "EMBER_DIST_SHM=0");
    return EM_OK;
  }
  char why[200];
  dist_hier *h = NULL;
  em_status st = dist_hier_get(d->group, &h);
  if (st) return st;
  b->hier = h; /* hosts' leaders reduce across hosts; within a host, symmetric memory */
  em_dist_group *within = h ? dist_hier_local(h) : d->group;
  st = dist_symm_new(within, numel * (int64_t)em_dtype_size(b->dtype), &b->symm, why, sizeof why);
  if (st) return st;
  if (!b->symm) {
    if (!d->shm_why[0]) snprintf(d->shm_why, sizeof d->shm_why, "%s", why);
    return EM_OK;
  }
  return dist_symm_tensor(&b->flat, b->symm, b->dtype, numel);
}

/* Lays the parameters out in buckets in `order` (n indices): a bucket closes when it
 * reaches its cap (first_bucket_bytes for the first bucket of a dtype, then bucket_bytes),
 * so a parameter larger than the cap closes its bucket alone or after smaller ones.
 * Buckets are numbered by their first parameter's position in `order`. */
em_status ddp_build_buckets(em_ddp *d, const int *order) {
  int n = d->n, nb = 0;
  int *bucket_of = malloc(sizeof(int) * n);
  int64_t *cap = malloc(sizeof(int64_t) * n), *bytes = calloc(n, sizeof(int64_t));
  char *open = calloc(n, 1);
  ddp_bucket *b = calloc(n, sizeof *b);
  em_tensor **views = calloc(n, sizeof *views);
  em_status st = EM_OK;
  if (!bucket_of || !cap || !bytes || !open || !b || !views) {
    st = em_set_error(EM_ERR_MEMORY, "DistributedDataParallel: out of memory building buckets");
    goto done;
  }
  for (int k = 0; k < n; k++) {
    ddp_param *p = &d->p[order[k]];
    em_dtype dt = p->param->dtype;
    em_device dev = p->param->storage->device;
    int j = -1, seen = 0;
    for (int q = 0; q < nb; q++) {
      if (b[q].dtype != dt || !same_device(b[q].device, dev)) continue;
      seen = 1;
      if (open[q]) j = q;
    }
    if (j < 0) {
      j = nb++;
      b[j].dtype = dt;
      b[j].device = dev;
      cap[j] = seen ? d->o.bucket_bytes : d->o.first_bucket_bytes;
      open[j] = 1;
    }
    bucket_of[order[k]] = j;
    b[j].n_params++;
    b[j].numel += p->numel;
    bytes[j] += p->numel * (int64_t)em_dtype_size(dt);
    if (bytes[j] >= cap[j]) open[j] = 0;
  }
  for (int j = 0; j < nb && !st; j++) {
    b[j].params = malloc(sizeof(int) * b[j].n_params);
    int64_t len = b[j].numel;
    if (!b[j].params) st = em_set_error(EM_ERR_MEMORY, "DistributedDataParallel: out of memory building buckets");
    else if (!(st = shared_bucket(d, &b[j], len)) && !b[j].flat)
      st = em_zeros(&b[j].flat, 1, &len, b[j].dtype, b[j].device);
    if (!st && d->o.comm_hook != EM_DDP_HOOK_NONE)
      st = em_zeros(&b[j].wire, 1, &len, d->o.comm_hook == EM_DDP_HOOK_FP16 ? EM_FLOAT16 : EM_BFLOAT16, b[j].device);
    b[j].n_params = 0;
    b[j].numel = 0;
  }
  /* slices, made before anything of the old layout changes */
  for (int k = 0; k < n && !st; k++) {
    ddp_param *p = &d->p[order[k]];
    ddp_bucket *bk = &b[bucket_of[order[k]]];
    int64_t strides[EM_MAX_DIMS];
    emp_contiguous_strides(p->param->ndim, p->param->sizes, strides);
    st = em_as_strided(&views[order[k]], bk->flat, p->param->ndim, p->param->sizes, strides, bk->numel);
    bk->params[bk->n_params++] = p->index;
    bk->numel += p->numel;
  }
  if (st) {
    for (int i = 0; i < n; i++) em_tensor_release(views[i]);
    ddp_free_buckets(b, nb);
    b = NULL;
    goto done;
  }
  for (int i = 0; i < n; i++) {
    ddp_param *p = &d->p[i];
    p->bucket = bucket_of[i];
    p->offset = views[i]->offset;
    em_tensor_release(p->view);
    p->view = views[i];
    /* ops that can write a gradient in place (linear) write it into the bucket: the hook
     * then finds .grad already there, with nothing to copy */
    if (d->o.gradient_as_bucket_view && em_set_grad_destination(p->param, p->view)) em_clear_error();
  }
  ddp_free_buckets(d->b, d->nb);
  d->b = b;
  d->nb = nb;
  b = NULL;
done:
  free(b);
  free(views);
  free(bucket_of);
  free(cap);
  free(bytes);
  free(open);
  return st;
}

int em_ddp_num_buckets(const em_ddp *d) { return d ? d->nb : 0; }

int em_ddp_bucket_params(const em_ddp *d, int bucket, int *indices, int cap) {
  if (!d || bucket < 0 || bucket >= d->nb) return -1;
  const ddp_bucket *b = &d->b[bucket];
  for (int i = 0; i < b->n_params && i < cap; i++) indices[i] = b->params[i];
  return b->n_params;
}

/* ---------------------------------------------------------------- one parameter ready */

static int is_slice(const em_tensor *g, const em_tensor *view) {
  return g->storage == view->storage && g->offset == view->offset && em_tensor_is_contiguous(g);
}

/* Copies the parameter's local gradient (zero when it has none) into its slice, times
 * 1/world. hooked: the gradient came from this backward, so .grad becomes the slice. */
static em_status fill_slice(em_ddp *d, ddp_param *p, int hooked) {
  em_tensor *g = em_grad(p->param), *view = p->view;
  double scale = d->b[p->bucket].symm ? 1.0 : d->scale;
  em_status st;
  if (!g) st = em_fill(view, 0);
  else if (is_slice(g, view)) st = scale != 1.0 ? em_binary_scalar(EM_MUL, &view, view, scale, 0) : EM_OK;
  else {
    st = scale != 1.0 ? em_binary_scalar(EM_MUL, &view, g, scale, 0) : em_copy_(view, g);
    if (!st && hooked && d->o.gradient_as_bucket_view) st = em_set_grad(p->param, view);
  }
  em_tensor_release(g);
  return st;
}

/* A bucket in symmetric memory (or in a hierarchy), reduced here and now on the calling
 * thread: within the host in place in every rank's bucket, then (hierarchy) the hosts'
 * leaders all-reduce across hosts and each leader's result is copied to its host's ranks. */
static em_status reduce_shared(em_ddp *d, ddp_bucket *b, em_tensor *buf, double *started, double *finished) {
  em_status st = EM_OK;
  if (started) *started = em_clock_monotonic();
  /* a host whose ranks could not map each other's buckets goes through the backend */
  em_dist_group *local = b->hier && !b->symm ? dist_hier_local(b->hier) : NULL;
  int by_backend = local && em_dist_size(local) > 1;
  if (b->symm) st = dist_symm_all_reduce(b->symm, buf, d->scale, NULL, NULL);
  else if (by_backend) st = em_dist_all_reduce(local, buf, EM_DIST_SUM, NULL);
  if (!st && b->hier) {
    st = dist_hier_cross(b->hier, buf, EM_DIST_SUM);
    if (!st && b->symm) st = dist_symm_broadcast(b->symm, buf, 0);
    else if (!st && by_backend) st = em_dist_broadcast(local, buf, 0, NULL);
  }
  if (finished) *finished = em_clock_monotonic();
  return st;
}

static void launch_in_order(em_ddp *d) {
  while (d->next_launch < d->nb && d->b[d->next_launch].pending == 0) {
    ddp_bucket *b = &d->b[d->next_launch++];
    em_tensor *buf = b->flat;
    em_status st = EM_OK;
    if (b->wire) {
      st = em_copy_(b->wire, b->flat); /* compress: fp32 -> fp16/bf16 */
      buf = b->wire;
    }
    b->launched_at = em_clock_monotonic();
    if (!st && (b->symm || b->hier)) /* reduced here and now */
    {
      st = reduce_shared(d, b, b->flat, &b->launched_at, &b->finished_at);
      d->st_exposed += b->finished_at - b->launched_at; /* backward waited for all of it */
    }
    /* the last bucket is waited for at once: its wait starts it, no thread is woken */
    else if (!st && d->n_ready == d->n)
      st = dist_post_then_wait(d->group, EM_DIST_OP_ALL_REDUCE, buf, buf, EM_DIST_SUM, &b->work);
    else if (!st) st = emp_dist_post(d->group, EM_DIST_OP_ALL_REDUCE, buf, buf, EM_DIST_SUM, -1, 0, &b->work);
    if (st) hook_fail(d, st, "starting the allreduce of a bucket%s failed: %s", NULL);
    d->st_buckets++;
    d->st_bytes += (double)em_tensor_numel(buf) * em_dtype_size(buf->dtype);
  }
}

static em_status finish_iteration(em_ddp *d);

static void mark_ready(em_ddp *d, ddp_param *p, int hooked) {
  p->ready = true;
  d->n_ready++;
  em_status st = fill_slice(d, p, hooked);
  if (st) hook_fail(d, st, "copying the gradient of '%s' into its bucket failed: %s", p->name);
  if (--d->b[p->bucket].pending == 0) launch_in_order(d);
  if (d->n_ready == d->n && !d->in_finish) finish_iteration(d);
}

void ddp_hook(em_tensor *leaf, void *ctx) {
  (void)leaf;
  ddp_param *p = ctx;
  em_ddp *d = p->owner;
  if (!d->armed || d->hook_status) return; /* no_sync, or a backward DDP did not prepare */
  if (p->ready) {
    em_set_error(EM_ERR_RUNTIME, "no further detail");
    hook_fail(d, EM_ERR_RUNTIME,
              p->used || !d->o.find_unused_parameters
                  ? "parameter '%s' received a second gradient in one iteration (did backward run twice after one "
                    "forward? accumulate with no_sync instead)%.0s"
                  : "parameter '%s' received a gradient, but find_unused_parameters found no path to it from the "
                    "model's outputs (is it used outside the model's forward?)%.0s",
              p->name);
    return;
  }
  d->n_hooked++;
  if (d->arrival && !d->order_recorded && d->n_arrival < d->n) d->arrival[d->n_arrival++] = p->index;
  mark_ready(d, p, 1);
}

/* ---------------------------------------------------------------- finishing */

static em_status give_reduced_grad(ddp_param *p, int as_view) {
  if (as_view) return em_set_grad(p->param, p->view);
  em_tensor *g = em_grad(p->param);
  em_status st;
  if (g) {
    st = em_copy_(g, p->view);
    em_tensor_release(g);
    return st;
  }
  em_tensor *copy = NULL;
  if ((st = em_clone(&copy, p->view))) return st;
  st = em_set_grad(p->param, copy);
  em_tensor_release(copy);
  return st;
}

/* Waits for the buckets (in order) and the used-parameter counts, decompresses, hands
 * parameters their reduced gradients where they are not views already. */
static em_status finish_iteration(em_ddp *d) {
  d->in_finish = true;
  launch_in_order(d);
  double t0 = em_clock_monotonic(), span_start = 0, span_end = -1, comm = 0;
  em_status st = EM_OK;
  if (d->used_work) {
    st = em_dist_work_wait(d->used_work, 0);
    em_dist_work_release(d->used_work);
    d->used_work = NULL;
  }
  for (int i = 0; i < d->nb; i++) {
    ddp_bucket *b = &d->b[i];
    if (b->work) {
      em_status s2 = em_dist_work_wait(b->work, 0);
      if (!st) st = s2;
      b->finished_at = b->work->finished_at;
      em_dist_work_release(b->work);
      b->work = NULL;
    } else if ((!b->symm && !b->hier) || i >= d->next_launch) {
      continue;
    }
    double fin = b->finished_at;
    if (b->launched_at > span_end) {
      if (span_end > span_start) comm += span_end - span_start;
      span_start = b->launched_at;
      span_end = fin;
    } else if (fin > span_end) {
      span_end = fin;
    }
    if (!st && b->wire) st = em_copy_(b->flat, b->wire); /* decompress */
  }
  if (span_end > span_start) comm += span_end - span_start;
  d->st_exposed += em_clock_monotonic() - t0;
  d->st_comm += comm;
  d->st_iters++;
  const int32_t *counts = d->used_map ? em_tensor_data(d->used_map) : NULL;
  for (int i = 0; i < d->n && !st; i++) {
    ddp_param *p = &d->p[i];
    if (d->o.find_unused_parameters && !p->used) {
      /* unused here: it gets the reduced gradient only if some rank used it */
      if (counts && counts[i] > 0) st = give_reduced_grad(p, d->o.gradient_as_bucket_view);
    } else if (!d->o.gradient_as_bucket_view) {
      st = give_reduced_grad(p, 0);
    }
  }
  if (d->arrival && !d->order_recorded) {
    /* parameters that were not hooked go last, in reverse order */
    char *seen = calloc(d->n, 1);
    if (seen) {
      for (int k = 0; k < d->n_arrival; k++) seen[d->arrival[k]] = 1;
      for (int i = d->n - 1; i >= 0; i--)
        if (!seen[i]) d->arrival[d->n_arrival++] = i;
      free(seen);
      d->order_recorded = true;
      if (d->o.rebuild_buckets && !d->rebuilt) d->rebuild_pending = true;
    }
  }
  d->armed = false;
  d->in_finish = false;
  if (st) hook_fail(d, st, "finishing the gradient reduction failed%s: %s", NULL);
  return st;
}

em_status em_ddp_finish(em_ddp *d) {
  if (!d) return em_set_error(EM_ERR_ARGUMENT, "DistributedDataParallel.finish: no reducer");
  if (d->armed && d->n_ready < d->n) {
    char msg[900];
    ddp_describe_unready(d, msg, sizeof msg);
    ddp_drain(d);
    return em_set_error(EM_ERR_RUNTIME, "%s", msg);
  }
  if (d->hook_status) {
    em_status st = d->hook_status;
    d->hook_status = EM_OK;
    return em_set_error(st, "%s", d->hook_error);
  }
  return EM_OK;
}

void ddp_drain(em_ddp *d) {
  if (d->used_work) {
    em_dist_work_wait(d->used_work, 0);
    em_dist_work_release(d->used_work);
    d->used_work = NULL;
  }
  for (int i = 0; i < d->nb; i++)
    if (d->b[i].work) {
      em_dist_work_wait(d->b[i].work, 0);
      em_dist_work_release(d->b[i].work);
      d->b[i].work = NULL;
    }
  d->armed = false;
}

void ddp_describe_unready(const em_ddp *d, char *msg, size_t cap) {
  int missing = d->n - d->n_ready, listed = 0;
  int n = snprintf(msg, cap,
                   "DistributedDataParallel: the previous iteration's backward produced no gradient for %d "
                   "parameter%s on rank %d: ",
                   missing, missing == 1 ? "" : "s", d->rank);
  for (int i = 0; i < d->n && n < (int)cap - 200; i++) {
    if (d->p[i].ready) continue;
    if (listed == 8) {
      n += snprintf(msg + n, cap - n, ", ...");
      break;
    }
    n += snprintf(msg + n, cap - n, "%s'%s' (index %d)", listed ? ", " : "", d->p[i].name, i + 1);
    listed++;
  }
  snprintf(msg + n, cap - n,
           ". They took no part in computing the loss: pass find_unused_parameters = true, or make every parameter "
           "contribute (that iteration's gradients were not synchronised)");
}

/* ---------------------------------------------------------------- find_unused_parameters */

static int lookup(const em_ddp *d, const em_tensor *t) {
  size_t h = ((uintptr_t)t >> 4) * 0x9E3779B97F4A7C15ull;
  for (int k = 0; k < d->lookup_cap; k++) {
    int s = (int)((h + k) & (d->lookup_cap - 1));
    if (!d->lookup_keys[s]) return -1;
    if (d->lookup_keys[s] == t) return d->lookup_vals[s];
  }
  return -1;
}

/* Marks the parameters reachable from the outputs' graph as used. */
static em_status walk_graph(em_ddp *d, int n_out, em_tensor *const *outs) {
  for (int i = 0; i < d->n; i++) d->p[i].used = false;
  int cap = 64, top = 0, seen_cap = 256, seen_n = 0;
  em_node **stack = malloc(sizeof *stack * cap), **seen = calloc(seen_cap, sizeof *seen);
  if (!stack || !seen) goto oom;
  for (int k = 0; k < n_out; k++) {
    em_tensor *t = outs[k];
    em_autograd_meta *m = t ? t->autograd : NULL;
    if (!m) continue;
    if (m->grad_fn) stack[top++] = m->grad_fn;
    else if (m->requires_grad && lookup(d, t) >= 0) d->p[lookup(d, t)].used = true;
    if (top == cap) {
      em_node **g = realloc(stack, sizeof *stack * (cap *= 2));
      if (!g) goto oom;
      stack = g;
    }
  }
  while (top) {
    em_node *nd = stack[--top];
    /* visited set: open addressing over node pointers */
    size_t h = ((uintptr_t)nd >> 4) * 0x9E3779B97F4A7C15ull;
    int s = (int)(h & (seen_cap - 1));
    while (seen[s] && seen[s] != nd) s = (s + 1) & (seen_cap - 1);
    if (seen[s]) continue;
    seen[s] = nd;
    if (++seen_n * 2 > seen_cap) {
      int ncap = seen_cap * 2;
      em_node **ns = calloc(ncap, sizeof *ns);
      if (!ns) goto oom;
      for (int i = 0; i < seen_cap; i++) {
        if (!seen[i]) continue;
        size_t hh = ((uintptr_t)seen[i] >> 4) * 0x9E3779B97F4A7C15ull;
        int q = (int)(hh & (ncap - 1));
        while (ns[q]) q = (q + 1) & (ncap - 1);
        ns[q] = seen[i];
      }
      free(seen);
      seen = ns;
      seen_cap = ncap;
    }
    if (nd->leaf) {
      int idx = lookup(d, nd->leaf);
      if (idx >= 0) d->p[idx].used = true;
    }
    for (int i = 0; i < nd->n_inputs; i++) {
      if (!nd->next[i].node) continue;
      if (top == cap) {
        em_node **g = realloc(stack, sizeof *stack * (cap *= 2));
        if (!g) goto oom;
        stack = g;
      }
      stack[top++] = nd->next[i].node;
    }
  }
  free(stack);
  free(seen);
  return EM_OK;
oom:
  free(stack);
  free(seen);
  return em_set_error(EM_ERR_MEMORY, "DistributedDataParallel: out of memory walking the graph");
}

static void reset_iteration(em_ddp *d) {
  for (int i = 0; i < d->n; i++) d->p[i].ready = false;
  for (int j = 0; j < d->nb; j++) d->b[j].pending = d->b[j].n_params;
  d->n_ready = d->n_hooked = d->next_launch = 0;
}

em_status em_ddp_pre_backward(em_ddp *d, int n_outputs, em_tensor *const *outputs) {
  if (!d) return em_set_error(EM_ERR_ARGUMENT, "DistributedDataParallel: no reducer");
  if (d->armed) ddp_drain(d);
  reset_iteration(d);
  if (!d->order_recorded) {
    /* recording (again, when the last recording iteration did not finish) */
    if (!d->arrival && !(d->arrival = malloc(sizeof(int) * d->n)))
      return em_set_error(EM_ERR_MEMORY, "DistributedDataParallel: out of memory");
    d->n_arrival = 0;
  }
  d->armed = true;
  if (!d->o.find_unused_parameters) return EM_OK;
  em_status st = walk_graph(d, n_outputs, outputs);
  if (st) {
    d->armed = false;
    return st;
  }
  int32_t *map = em_tensor_data(d->used_map);
  for (int i = 0; i < d->n; i++) map[i] = d->p[i].used;
  /* posted before any bucket, as join's shadow expects */
  if ((st = emp_dist_post(d->group, EM_DIST_OP_ALL_REDUCE, d->used_map, d->used_map, EM_DIST_SUM, -1, 0,
                          &d->used_work))) {
    d->armed = false;
    return st;
  }
  for (int i = 0; i < d->n; i++)
    if (!d->p[i].used) mark_ready(d, &d->p[i], 0);
  return EM_OK;
}

em_status ddp_shadow_backward(em_ddp *d) {
  em_status st = EM_OK;
  if (d->o.find_unused_parameters) {
    if ((st = em_fill(d->used_map, 0))) return st;
    if ((st = emp_dist_post(d->group, EM_DIST_OP_ALL_REDUCE, d->used_map, d->used_map, EM_DIST_SUM, -1, 0,
                            &d->used_work)))
      return st;
  }
  for (int i = 0; i < d->nb && !st; i++) {
    ddp_bucket *b = &d->b[i];
    em_tensor *buf = b->wire ? b->wire : b->flat;
    if ((st = em_fill(buf, 0))) break;
    /* a shared bucket's reduction applies the average on whichever rank sums each slice */
    if (b->symm || b->hier) st = reduce_shared(d, b, buf, NULL, NULL);
    else st = emp_dist_post(d->group, EM_DIST_OP_ALL_REDUCE, buf, buf, EM_DIST_SUM, -1, 0, &b->work);
  }
  ddp_drain(d);
  return st;
}

/* ---------------------------------------------------------------- statistics */

void em_ddp_stats(const em_ddp *d, double *stats, int n) {
  double v[7] = {0};
  if (d) {
    v[0] = d->st_iters, v[1] = d->st_comm, v[2] = d->st_exposed, v[3] = d->st_buckets, v[4] = d->st_bytes;
    v[5] = d->rebuilt;
    for (int i = 0; i < d->nb; i++) v[6] += d->b[i].symm != NULL;
  }
  for (int i = 0; i < n && i < 7; i++) stats[i] = v[i];
}

const char *em_ddp_shared_memory_note(const em_ddp *d) {
  if (!d) return "";
  for (int i = 0; i < d->nb; i++)
    if (!d->b[i].symm) return d->shm_why[0] ? d->shm_why : "not shared";
  return "";
}

void em_ddp_reset_stats(em_ddp *d) {
  if (d) d->st_iters = d->st_comm = d->st_exposed = d->st_buckets = d->st_bytes = 0;
}
