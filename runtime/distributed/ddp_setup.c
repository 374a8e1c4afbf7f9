/* setup.c - the reducer's life outside backward: construction (every rank must hold the
 * same model; rank 0's values win), the bucket rebuild after the first iteration,
 * broadcasting buffers before each forward, and join for uneven inputs.
 *
 * Every collective here runs in the same order on every rank, which is what lets a rank
 * that has run out of data (join) shadow the others: before each forward, ranks inside
 * join allreduce (MAX) four flags: [world - rank of the lowest rank still training, will
 * this backward reduce, are buffers broadcast, are buckets rebuilt]; a joined rank
 * contributes zeros and then takes part in exactly those collectives, with zero gradients.
 * Once every rank has joined, the parameters and buffers of the last authoritative rank
 * are broadcast so that all ranks end equal. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "autograd/autograd_impl.h"
#include "distributed/ddp_impl.h"
#include "ember/autograd.h"
#include "plugins/plugin_api.h"

/* ---------------------------------------------------------------- helpers */

static em_status new_cpu(em_tensor **out, int64_t n, em_dtype dtype) {
  *out = NULL;
  return em_zeros(out, 1, &n, dtype, (em_device){EM_CPU, 0});
}

static int same_device(em_device a, em_device b) { return a.type == b.type && a.index == b.index; }

/* Copies the tensors of dtype dt on device dev into consecutive slices of flat (pack) or
 * back (unpack). The parameters are written in place with grad mode off: a broadcast of
 * their values is not an operation autograd should see (em_check_inplace). */
static em_status copy_slices(em_tensor *flat, int n, em_tensor *const *ts, em_dtype dt, em_device dev, int pack) {
  int grad_was = em_grad_enabled();
  em_set_grad_enabled(0);
  em_status st = EM_OK;
  int64_t off = 0;
  for (int i = 0; i < n && !st; i++) {
    em_tensor *t = ts[i];
    if (t->dtype != dt || !same_device(t->storage->device, dev)) continue;
    int64_t strides[EM_MAX_DIMS];
    emp_contiguous_strides(t->ndim, t->sizes, strides);
    em_tensor *slice = NULL;
    st = em_as_strided(&slice, flat, t->ndim, t->sizes, strides, off);
    if (!st) st = pack ? em_copy_(slice, t) : em_copy_(t, slice);
    em_tensor_release(slice);
    off += em_tensor_numel(t);
  }
  em_set_grad_enabled(grad_was);
  return st;
}

/* Broadcasts the tensors from root, one collective per dtype and device (in the order of
 * the first tensor of each, the same on every rank of a matching model): packed into a
 * flat buffer on that device, sent by that device's backend, unpacked. */
static em_status broadcast_tensors(em_ddp *d, int n, em_tensor *const *ts, int root) {
  em_status st = EM_OK;
  for (int dt = 0; dt < EM_NUM_DTYPES && !st; dt++) {
    for (int first = 0; first < n && !st; first++) {
      if (ts[first]->dtype != (em_dtype)dt) continue;
      em_device dev = ts[first]->storage->device;
      int seen = 0; /* this device was done with an earlier tensor */
      for (int j = 0; j < first && !seen; j++)
        seen = ts[j]->dtype == (em_dtype)dt && same_device(ts[j]->storage->device, dev);
      if (seen) continue;
      int64_t total = 0;
      for (int i = first; i < n; i++)
        if (ts[i]->dtype == (em_dtype)dt && same_device(ts[i]->storage->device, dev)) total += em_tensor_numel(ts[i]);
      if (!total) continue;
      em_tensor *flat = NULL;
      if ((st = em_empty(&flat, 1, &total, dt, dev))) break;
      if (d->rank == root) st = copy_slices(flat, n, ts, dt, dev, 1);
      if (!st) st = emp_dist_post(d->group, EM_DIST_OP_BROADCAST, flat, flat, EM_DIST_SUM, root, 0, NULL);
      if (!st && d->rank != root) st = copy_slices(flat, n, ts, dt, dev, 0);
      em_tensor_release(flat);
    }
  }
  return st;
}

static void describe_tensor(char *buf, size_t cap, const char *name, const em_tensor *t) {
  snprintf(buf, cap, "'%s' %s %s", name, em_dtype_name(t->dtype), EM_SHAPE(t));
}

/* One line per parameter, after an options line: what every rank must agree on. */
static char *signature(const em_ddp *d) {
  size_t cap = 256, len = 0;
  for (int i = 0; i < d->n; i++) cap += strlen(d->p[i].name) + 160;
  char *s = malloc(cap);
  if (!s) return NULL;
  len += snprintf(s + len, cap - len,
                  "bucket_cap_bytes %lld, first_bucket_bytes %lld, find_unused_parameters %d, "
                  "gradient_as_bucket_view %d, comm_hook %d, shared_memory %d\n",
                  (long long)d->o.bucket_bytes, (long long)d->o.first_bucket_bytes, d->o.find_unused_parameters,
                  d->o.gradient_as_bucket_view, d->o.comm_hook, d->o.shared_memory);
  for (int i = 0; i < d->n; i++) {
    char t[600];
    describe_tensor(t, sizeof t, d->p[i].name, d->p[i].param);
    len += snprintf(s + len, cap - len, "%s\n", t);
  }
  return s;
}

/* The line'th line of s (0-based) into buf; 0 when s has fewer lines. */
static int line_of(const char *s, int line, char *buf, size_t cap) {
  for (int i = 0; i < line; i++) {
    s = strchr(s, '\n');
    if (!s) return 0;
    s++;
  }
  const char *e = strchr(s, '\n');
  if (!e) return 0;
  snprintf(buf, cap, "%.*s", (int)(e - s), s);
  return 1;
}

/* Every rank holds the same options and parameters as rank 0, or every rank fails with
 * an error naming the first difference. */
static em_status check_models(em_ddp *d) {
  char *mine = signature(d);
  em_tensor *len = NULL, *text = NULL, *where = NULL, *all = NULL;
  em_status st =
      mine ? new_cpu(&len, 1, EM_INT64) : em_set_error(EM_ERR_MEMORY, "DistributedDataParallel: out of memory");
  if (!st) {
    ((int64_t *)em_tensor_data(len))[0] = (int64_t)strlen(mine) + 1;
    st = emp_dist_post(d->group, EM_DIST_OP_BROADCAST, len, len, EM_DIST_SUM, 0, 0, NULL);
  }
  if (!st) st = new_cpu(&text, ((int64_t *)em_tensor_data(len))[0], EM_UINT8);
  if (!st && d->rank == 0) memcpy(em_tensor_data(text), mine, strlen(mine) + 1);
  if (!st) st = emp_dist_post(d->group, EM_DIST_OP_BROADCAST, text, text, EM_DIST_SUM, 0, 0, NULL);
  int first = -1; /* line of the first difference here: 0 options, i + 1 parameter i */
  char here[700] = "", there[700] = "";
  if (!st) {
    const char *theirs = em_tensor_data(text);
    for (int line = 0; line <= d->n + 1 && first < 0; line++) {
      int a = line_of(mine, line, here, sizeof here), b = line_of(theirs, line, there, sizeof there);
      if (a != b || (a && strcmp(here, there))) first = line;
      if (!a && !b) break;
    }
    st = new_cpu(&where, 1, EM_INT64);
  }
  if (!st) {
    ((int64_t *)em_tensor_data(where))[0] = first;
    st = new_cpu(&all, d->world, EM_INT64);
  }
  if (!st) st = emp_dist_post(d->group, EM_DIST_OP_ALL_GATHER, where, all, EM_DIST_SUM, -1, 0, NULL);
  if (!st) {
    const int64_t *w = em_tensor_data(all);
    int bad = -1;
    for (int r = 0; r < d->world && bad < 0; r++)
      if (w[r] >= 0) bad = r;
    if (bad >= 0) {
      const char *theirs = em_tensor_data(text);
      char msg[1600];
      if (first >= 0) {
        /* this rank differs: show both sides */
        int have_here = line_of(mine, first, here, sizeof here),
            have_there = line_of(theirs, first, there, sizeof there);
        if (first == 0)
          snprintf(msg, sizeof msg,
                   "DistributedDataParallel: the options differ between rank %d and rank 0 (here: %s; "
                   "rank 0: %s)",
                   d->rank, here, there);
        else if (have_here && have_there)
          snprintf(msg, sizeof msg,
                   "DistributedDataParallel: rank %d's model differs from rank 0's at parameter %d: %s "
                   "here, %s on rank 0 (every rank must build the same model)",
                   d->rank, first, here, there);
        else
          snprintf(msg, sizeof msg,
                   "DistributedDataParallel: rank %d's model has %d parameters, rank 0's has a "
                   "different number: parameter %d is %s (every rank must build the same model)",
                   d->rank, d->n, first, have_here ? here : there);
      } else {
        int64_t line = w[bad];
        int have = line_of(theirs, (int)line, there, sizeof there);
        if (line == 0)
          snprintf(msg, sizeof msg, "DistributedDataParallel: rank %d's options differ from rank 0's (rank 0: %s)", bad,
                   there);
        else
          snprintf(msg, sizeof msg,
                   "DistributedDataParallel: rank %d's model differs from rank 0's at parameter %lld "
                   "(%s on rank 0; see rank %d's error); every rank must build the same model",
                   bad, (long long)line, have ? there : "missing", bad);
      }
      st = em_set_error(EM_ERR_SHAPE, "%s", msg);
    }
  }
  free(mine);
  em_tensor_release(len);
  em_tensor_release(text);
  em_tensor_release(where);
  em_tensor_release(all);
  return st;
}

/* ---------------------------------------------------------------- construction */

static em_status check_param(em_dist_group *g, int i, em_tensor *p, const char *name) {
  em_status st = tn_check_tensor("DistributedDataParallel", p, "parameter");
  if (st) return st;
  if (!em_is_leaf(p) || !em_requires_grad(p))
    return em_set_error(EM_ERR_ARGUMENT,
                        "DistributedDataParallel: parameter '%s' (number %d) is not a leaf that "
                        "requires grad",
                        name, i + 1);
  if (p->dtype != EM_FLOAT32 && p->dtype != EM_FLOAT64)
    return em_set_error(EM_ERR_DTYPE,
                        "DistributedDataParallel: parameter '%s' has dtype %s (expected float32 or "
                        "float64)",
                        name, em_dtype_name(p->dtype));
  void *impl; /* attaches NCCL to the group for CUDA parameters (no communication yet) */
  char op[300];
  snprintf(op, sizeof op, "DistributedDataParallel: parameter '%s'", name);
  return dist_group_backend(g, (em_device_type)p->storage->device.type, &impl, op) ? EM_OK : em_last_status();
}

void em_ddp_release(em_ddp *d) {
  if (!d) return;
  ddp_drain(d);
  for (int i = 0; i < d->n; i++) {
    ddp_param *p = &d->p[i];
    if (p->param) {
      if (p->hook_id > 0) em_remove_leaf_hook(p->param, p->hook_id);
      em_autograd_meta *m = p->param->autograd;
      if (m && p->view && m->grad_dest == p->view) em_set_grad_destination(p->param, NULL);
      em_tensor_release(p->param);
    }
    em_tensor_release(p->view);
    free(p->name);
  }
  ddp_free_buckets(d->b, d->nb);
  em_tensor_release(d->used_map);
  free(d->p);
  free(d->arrival);
  free(d->lookup_keys);
  free(d->lookup_vals);
  em_dist_group_release(d->group);
  free(d);
}

em_status em_ddp_new(em_ddp **out, em_dist_group *g, int n, em_tensor *const *params, const char *const *names,
                     int n_buffers, em_tensor *const *buffers, const em_ddp_options *opts) {
  if (!out) return em_set_error(EM_ERR_ARGUMENT, "DistributedDataParallel: out is NULL");
  *out = NULL;
  if (!g) g = em_dist_world();
  if (!g) return em_set_error(EM_ERR_RUNTIME, "DistributedDataParallel: call ember.dist.init() first");
  if (g->rank < 0) return em_set_error(EM_ERR_ARGUMENT, "DistributedDataParallel: this rank is not in the group");
  if (n < 1 || !params) return em_set_error(EM_ERR_ARGUMENT, "DistributedDataParallel: the model has no parameters");
  if (!opts || opts->bucket_bytes < 1 || opts->first_bucket_bytes < 1)
    return em_set_error(EM_ERR_ARGUMENT, "DistributedDataParallel: bucket caps must be > 0 bytes");
  if ((unsigned)opts->comm_hook > EM_DDP_HOOK_BF16)
    return em_set_error(EM_ERR_ARGUMENT, "DistributedDataParallel: unknown comm_hook %d", opts->comm_hook);
  for (int i = 0; i < n_buffers; i++) {
    em_status st = tn_check_tensor("DistributedDataParallel", buffers[i], "buffer");
    if (st) return st;
  }
  em_ddp *d = calloc(1, sizeof *d);
  if (!d || !(d->p = calloc(n, sizeof *d->p))) {
    free(d);
    return em_set_error(EM_ERR_MEMORY, "DistributedDataParallel: out of memory");
  }
  d->group = g;
  em_dist_group_retain(g);
  d->rank = g->rank;
  d->world = g->size;
  d->n = n;
  d->o = *opts;
  d->scale = 1.0 / g->size;
  em_status st = EM_OK;
  for (int i = 0; i < n && !st; i++) {
    ddp_param *p = &d->p[i];
    char fallback[32];
    snprintf(fallback, sizeof fallback, "parameter %d", i + 1);
    p->owner = d;
    p->index = i;
    p->name = strdup(names && names[i] ? names[i] : fallback);
    if (!p->name) st = em_set_error(EM_ERR_MEMORY, "DistributedDataParallel: out of memory");
    if (!st) st = check_param(g, i, params[i], p->name);
    if (st) break;
    p->param = params[i];
    em_tensor_retain(p->param);
    p->numel = em_tensor_numel(p->param);
  }
  /* pointer -> index table (power-of-two open addressing) */
  if (!st) {
    int cap = 16;
    while (cap < 2 * n) cap *= 2;
    d->lookup_cap = cap;
    d->lookup_keys = calloc(cap, sizeof *d->lookup_keys);
    d->lookup_vals = malloc(sizeof(int) * cap);
    if (!d->lookup_keys || !d->lookup_vals) st = em_set_error(EM_ERR_MEMORY, "DistributedDataParallel: out of memory");
    for (int i = 0; i < n && !st; i++) {
      size_t h = ((uintptr_t)d->p[i].param >> 4) * 0x9E3779B97F4A7C15ull;
      int s = (int)(h & (cap - 1));
      while (d->lookup_keys[s] && d->lookup_keys[s] != d->p[i].param) s = (s + 1) & (cap - 1);
      if (d->lookup_keys[s])
        st = em_set_error(EM_ERR_ARGUMENT, "DistributedDataParallel: parameter '%s' appears twice", d->p[i].name);
      d->lookup_keys[s] = d->p[i].param;
      d->lookup_vals[s] = i;
    }
  }
  if (!st && opts->find_unused_parameters) st = new_cpu(&d->used_map, n, EM_INT32);
  if (!st) st = check_models(d);
  if (!st) st = broadcast_tensors(d, n, params, 0);
  if (!st && n_buffers) st = broadcast_tensors(d, n_buffers, buffers, 0);
  int *order = st ? NULL : malloc(sizeof(int) * n);
  if (!st && !order) st = em_set_error(EM_ERR_MEMORY, "DistributedDataParallel: out of memory");
  if (!st) {
    for (int k = 0; k < n; k++) order[k] = n - 1 - k; /* gradients arrive roughly in reverse */
    st = ddp_build_buckets(d, order);
  }
  free(order);
  for (int i = 0; i < n && !st; i++) {
    d->p[i].hook_id = em_add_leaf_hook(d->p[i].param, ddp_hook, &d->p[i]);
    if (d->p[i].hook_id <= 0) st = em_last_status() ? em_last_status() : EM_ERR_MEMORY;
  }
  if (st) {
    em_ddp_release(d);
    return st;
  }
  *out = d;
  return EM_OK;
}

/* ---------------------------------------------------------------- rebuild */

em_status ddp_rebuild(em_ddp *d) {
  em_tensor *order = NULL;
  em_status st = new_cpu(&order, d->n, EM_INT32);
  if (st) return st;
  int32_t *o = em_tensor_data(order);
  for (int k = 0; k < d->n; k++) o[k] = d->order_recorded ? d->arrival[k] : d->n - 1 - k;
  st = emp_dist_post(d->group, EM_DIST_OP_BROADCAST, order, order, EM_DIST_SUM, 0, 0, NULL);
  int *ord = malloc(sizeof(int) * d->n);
  char *seen = calloc(d->n, 1);
  em_tensor **old = calloc(d->n, sizeof *old);
  if (!st && (!ord || !seen || !old)) st = em_set_error(EM_ERR_MEMORY, "DistributedDataParallel: out of memory");
  for (int k = 0; k < d->n && !st; k++) {
    int i = o[k];
    if (i < 0 || i >= d->n || seen[i])
      st = em_set_error(EM_ERR_RUNTIME, "DistributedDataParallel: rank 0 sent an invalid bucket order");
    else seen[i] = 1, ord[k] = i;
  }
  if (!st) {
    for (int i = 0; i < d->n; i++) old[i] = d->p[i].view, em_tensor_retain(old[i]);
    st = ddp_build_buckets(d, ord);
  }
  /* gradients that live in the old buckets move to the new ones */
  for (int i = 0; i < d->n && !st; i++) {
    em_tensor *g = em_grad(d->p[i].param);
    if (g && g->storage == old[i]->storage && g->offset == old[i]->offset) {
      st = em_copy_(d->p[i].view, g);
      if (!st) st = em_set_grad(d->p[i].param, d->p[i].view);
    }
    em_tensor_release(g);
  }
  if (old)
    for (int i = 0; i < d->n; i++) em_tensor_release(old[i]);
  free(old);
  free(seen);
  free(ord);
  em_tensor_release(order);
  d->rebuild_pending = false;
  if (!st) d->rebuilt = true;
  return st;
}

/* ---------------------------------------------------------------- before each forward */

static em_status take_hook_error(em_ddp *d) {
  if (!d->hook_status) return EM_OK;
  ddp_drain(d);
  em_status st = d->hook_status;
  d->hook_status = EM_OK;
  return em_set_error(st, "%s", d->hook_error);
}

/* An iteration left armed: silently dropped when no backward ran at all (a forward
 * without backward, e.g. evaluation with gradients on); an error naming the parameters
 * that got no gradient otherwise. */
static em_status close_previous(em_ddp *d) {
  if (!d->armed) return EM_OK;
  if (d->n_hooked == 0) {
    ddp_drain(d);
    return EM_OK;
  }
  char msg[1200];
  ddp_describe_unready(d, msg, sizeof msg);
  ddp_drain(d);
  return em_set_error(EM_ERR_RUNTIME, "%s", msg);
}

static em_status join_flags(em_ddp *d, int64_t f0, int64_t f1, int64_t f2, int64_t f3, int64_t *out) {
  em_tensor *t = NULL;
  em_status st = new_cpu(&t, 4, EM_INT64);
  if (st) return st;
  int64_t *v = em_tensor_data(t);
  v[0] = f0, v[1] = f1, v[2] = f2, v[3] = f3;
  st = emp_dist_post(d->group, EM_DIST_OP_ALL_REDUCE, t, t, EM_DIST_MAX, -1, 0, NULL);
  if (!st) memcpy(out, v, sizeof(int64_t) * 4);
  em_tensor_release(t);
  return st;
}

em_status em_ddp_pre_forward(em_ddp *d, int sync, int joining, int n_buffers, em_tensor *const *buffers) {
  if (!d) return em_set_error(EM_ERR_ARGUMENT, "DistributedDataParallel: no reducer");
  em_status st;
  if ((st = take_hook_error(d)) || (st = close_previous(d))) return st;
  int root = 0;
  if (joining) {
    int64_t f[4];
    st = join_flags(d, d->world - d->rank, sync != 0, n_buffers > 0, sync && d->rebuild_pending, f);
    if (st) return st;
    d->authoritative = root = (int)(d->world - f[0]);
  }
  if (sync && d->rebuild_pending && (st = ddp_rebuild(d))) return st;
  if (n_buffers > 0) st = broadcast_tensors(d, n_buffers, buffers, root);
  return st;
}

em_status em_ddp_join_round(em_ddp *d, int n_buffers, em_tensor *const *buffers, int *others_active) {
  if (!d || !others_active) return em_set_error(EM_ERR_ARGUMENT, "DistributedDataParallel.join: bad arguments");
  *others_active = 0;
  em_status st;
  if ((st = take_hook_error(d)) || (st = close_previous(d))) return st;
  int64_t f[4];
  if ((st = join_flags(d, 0, 0, 0, 0, f))) return st;
  if (f[0] == 0) {
    /* everyone has joined: all ranks take the last authoritative rank's model */
    em_tensor **ps = malloc(sizeof *ps * d->n);
    if (!ps) return em_set_error(EM_ERR_MEMORY, "DistributedDataParallel.join: out of memory");
    for (int i = 0; i < d->n; i++) ps[i] = d->p[i].param;
    st = broadcast_tensors(d, d->n, ps, d->authoritative);
    free(ps);
    if (!st && n_buffers > 0) st = broadcast_tensors(d, n_buffers, buffers, d->authoritative);
    return st;
  }
  d->authoritative = (int)(d->world - f[0]);
  if (f[3] && (st = ddp_rebuild(d))) return st;
  if (f[2] && n_buffers > 0 && (st = broadcast_tensors(d, n_buffers, buffers, d->authoritative))) return st;
  if (f[1] && (st = ddp_shadow_backward(d))) return st;
  *others_active = 1;
  return EM_OK;
}
