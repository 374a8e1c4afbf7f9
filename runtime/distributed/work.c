/* work.c - collectives: argument checks, numbering, handles, waiting.
 *
 * A handle is shared by the caller and the backend (two references). The backend drops
 * its reference from whatever thread completes the work; a handle whose last reference
 * goes there is parked on a list and freed by the next call from a user thread, because
 * freeing releases tensors, and a tensor's deleter may be Lua code that must not run on a
 * backend thread.
 *
 * Waiting never hangs: the backend enforces each work's deadline (and aborts the job when
 * it passes, since MPI cannot cancel a collective); as a backstop, a waiter that sees the
 * deadline long gone asks the backend to abort itself. */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "distributed/dist_impl.h"
#include "tensor/tensor_impl.h"
#include "plugins/plugin_api.h"

#define BACKSTOP_GRACE_S 30.0

static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static em_dist_work *graveyard; /* finished handles nobody references, freed on a user thread */
static atomic_int graveyard_used;
static atomic_int waiters;

int emp_dist_num_waiters(void) { return atomic_load_explicit(&waiters, memory_order_relaxed); }

static const char *op_names[EM_DIST_NUM_OPS] = {
    "all_reduce", "broadcast", "all_gather", "reduce_scatter", "barrier", "send",        "recv",
    "all_to_all", "all_to_all_v", "gather", "scatter",         "reduce",  "all_gather_v"};
static const char *redop_names[EM_DIST_NUM_REDOPS] = {"sum", "avg", "max", "min", "product"};

const char *emp_dist_op_name(em_dist_opkind kind) { return kind < EM_DIST_NUM_OPS ? op_names[kind] : "?"; }
const char *em_dist_redop_name(em_dist_redop op) { return (unsigned)op < EM_DIST_NUM_REDOPS ? redop_names[op] : "?"; }

static void free_work(em_dist_work *w) {
  em_tensor_release(w->in);
  if (w->out != w->in) em_tensor_release(w->out);
  em_dist_group_release(w->group);
  free(w->in_counts);
  free(w->out_counts);
  free(w);
}

static void reap(void) {
  if (!atomic_load_explicit(&graveyard_used, memory_order_relaxed)) return;
  pthread_mutex_lock(&done_lock);
  atomic_store(&graveyard_used, 0);
  em_dist_work *w = graveyard;
  graveyard = NULL;
  pthread_mutex_unlock(&done_lock);
  while (w) {
    em_dist_work *next = w->next;
    free_work(w);
    w = next;
  }
}

void em_dist_work_release(em_dist_work *w) {
  if (w && atomic_fetch_sub(&w->refcount, 1) == 1) free_work(w);
  reap();
}

void emp_dist_work_done(em_dist_work *w, em_status st, const char *msg) {
  w->finished_at = em_clock_monotonic();
  w->status = st;
  if (st) snprintf(w->message, sizeof w->message, "%s", msg ? msg : "failed");
  if (w->kind != EM_DIST_OP_SEND && w->kind != EM_DIST_OP_RECV) atomic_fetch_add(&w->group->completed, 1);
  if (w->on_stack) { /* its caller is the thread completing it: nobody to wake */
    atomic_store(&w->state, st ? EM_WORK_FAILED : EM_WORK_DONE);
    return;
  }
  pthread_mutex_lock(&done_lock);
  atomic_store(&w->state, st ? EM_WORK_FAILED : EM_WORK_DONE);
  pthread_cond_broadcast(&done_cond);
  if (atomic_fetch_sub(&w->refcount, 1) == 1) {
    w->next = graveyard;
    graveyard = w;
    atomic_store(&graveyard_used, 1);
  }
  pthread_mutex_unlock(&done_lock);
}

/* The device whose backend runs w (a rooted collective may have only its input or output). */
static em_device_type work_device(const em_dist_work *w) {
  const em_tensor *t = w->in ? w->in : w->out;
  return t ? (em_device_type)t->storage->device.type : EM_CPU;
}

static void format_bytes(char *buf, size_t cap, double bytes) {
  if (bytes >= 1 << 30) snprintf(buf, cap, "%.1f GB", bytes / (1 << 30));
  else if (bytes >= 1 << 20) snprintf(buf, cap, "%.1f MB", bytes / (1 << 20));
  else if (bytes >= 1 << 10) snprintf(buf, cap, "%.1f KB", bytes / (1 << 10));
  else snprintf(buf, cap, "%.0f B", bytes);
}

void emp_dist_describe(const em_dist_work *w, char *buf, size_t cap) {
  char size[32] = "";
  const em_tensor *t = w->in ? w->in : w->out;
  if (t) format_bytes(size, sizeof size, (double)em_tensor_numel(t) * em_dtype_size(t->dtype));
  int n;
  if (w->kind == EM_DIST_OP_SEND || w->kind == EM_DIST_OP_RECV)
    n = snprintf(buf, cap, "%s %s rank %d (tag %d) on %s", op_names[w->kind],
                 w->kind == EM_DIST_OP_SEND ? "to" : "from", w->peer, w->tag, w->group->name);
  else if (w->kind == EM_DIST_OP_GATHER || w->kind == EM_DIST_OP_SCATTER || w->kind == EM_DIST_OP_REDUCE)
    n = snprintf(buf, cap, "%s #%lld (root %d) on %s", op_names[w->kind], (long long)w->seq, w->peer,
                 w->group->name);
  else n = snprintf(buf, cap, "%s #%lld on %s", op_names[w->kind], (long long)w->seq, w->group->name);
  if (t && n > 0 && (size_t)n < cap) snprintf(buf + n, cap - n, " (%s of %s)", size, em_dtype_name(t->dtype));
}

/* ---------------------------------------------------------------- posting */

/* in_counts/out_counts: NULL, or arrays from malloc that the work takes over (freed here
 * whatever happens). */
static em_status post_work(em_dist_group *g, em_dist_opkind kind, em_tensor *in, em_tensor *out, em_dist_redop op,
                           int peer, int tag, em_dist_work **work, int caller_waits, int64_t *in_counts,
                           int64_t *out_counts) {
  reap();
  const em_tensor *t = in ? in : out;
  em_device_type dev = t ? (em_device_type)t->storage->device.type : EM_CPU;
  void *impl = NULL;
  const em_dist_backend *be = dist_group_backend(g, dev, &impl, op_names[kind]);
  if (!be) {
    free(in_counts);
    free(out_counts);
    return em_last_status();
  }
  int64_t seq = kind != EM_DIST_OP_SEND && kind != EM_DIST_OP_RECV ? atomic_fetch_add(&g->seq, 1) + 1 : 0;
  double now = em_clock_monotonic();
  if (!work && be->run_direct) {
    /* A plain blocking call the backend may run at once on this thread: no handle on the
     * heap, no queue; the tensors are the caller's for the duration of the call. */
    em_dist_work d;
    memset(&d, 0, sizeof d);
    atomic_init(&d.refcount, 2);
    atomic_init(&d.state, EM_WORK_PENDING);
    d.kind = kind, d.redop = op, d.peer = peer, d.tag = tag, d.in = in, d.out = out, d.group = g;
    d.in_counts = in_counts, d.out_counts = out_counts;
    d.seq = seq, d.posted_at = now, d.blocking = d.direct = d.on_stack = 1;
    atomic_init(&d.deadline, now + g->timeout);
    if (be->run_direct(impl, &d)) {
      free(in_counts);
      free(out_counts);
      if (atomic_load(&d.state) == EM_WORK_FAILED) return em_set_error(d.status, "%s", d.message);
      return EM_OK;
    }
  }
  em_dist_work *w = calloc(1, sizeof *w);
  if (!w) {
    free(in_counts);
    free(out_counts);
    return em_set_error(EM_ERR_MEMORY, "%s: out of memory", op_names[kind]);
  }
  atomic_init(&w->refcount, 2); /* the caller's and the backend's */
  atomic_init(&w->state, EM_WORK_PENDING);
  w->kind = kind;
  w->redop = op;
  w->peer = peer;
  w->tag = tag;
  w->in = in;
  w->out = out;
  w->in_counts = in_counts;
  w->out_counts = out_counts;
  em_tensor_retain(in);
  if (out != in) em_tensor_retain(out);
  w->group = g;
  em_dist_group_retain(g);
  w->seq = seq;
  w->posted_at = now;
  w->blocking = caller_waits;
  w->direct = work == NULL;
  atomic_store(&w->deadline, w->posted_at + g->timeout);
  em_status st = be->post(impl, w);
  if (st) {
    /* never reached the backend: both references are ours */
    atomic_store(&w->refcount, 1);
    em_dist_work_release(w);
    return st;
  }
  if (work) {
    *work = w;
    return EM_OK;
  }
  st = em_dist_work_wait(w, 0);
  em_dist_work_release(w);
  return st;
}

em_status emp_dist_post(em_dist_group *g, em_dist_opkind kind, em_tensor *in, em_tensor *out, em_dist_redop op,
                        int peer, int tag, em_dist_work **work) {
  return post_work(g, kind, in, out, op, peer, tag, work, work == NULL, NULL, NULL);
}

em_status dist_post_then_wait(em_dist_group *g, em_dist_opkind kind, em_tensor *in, em_tensor *out, em_dist_redop op,
                              em_dist_work **work) {
  return post_work(g, kind, in, out, op, -1, 0, work, 1, NULL, NULL);
}

/* ---------------------------------------------------------------- checks */

static em_status check_group(const char *op, em_dist_group *g) {
  if (!g) {
    if (!em_dist_world()) return em_set_error(EM_ERR_RUNTIME, "%s: call dist.init first", op);
    return em_set_error(EM_ERR_ARGUMENT, "%s: no process group given", op);
  }
  if (g->rank < 0) return em_set_error(EM_ERR_ARGUMENT, "%s: this rank is not a member of %s", op, g->name);
  return EM_OK;
}

static em_status check_buffer(const char *op, const em_tensor *t, const char *what) {
  em_status st = tn_check_tensor(op, t, what);
  if (st) return st;
  /* an empty tensor moves nothing, whatever its strides say */
  if (em_tensor_numel(t) > 0 && !em_tensor_is_contiguous(t))
    return em_set_error(EM_ERR_ARGUMENT,
                        "%s: the %s (shape %s) is not contiguous; collectives move contiguous memory (pass "
                        "t:contiguous() and copy the result back)",
                        op, what, EM_SHAPE(t));
  return EM_OK;
}

static em_status check_redop(const char *op, em_dist_redop r, const em_tensor *t) {
  if ((unsigned)r >= EM_DIST_NUM_REDOPS)
    return em_set_error(EM_ERR_ARGUMENT, "%s: unknown reduction %d (expected sum, avg, max, min or product)", op, r);
  if (r == EM_DIST_AVG && !em_dtype_is_floating(t->dtype))
    return em_set_error(EM_ERR_DTYPE, "%s: 'avg' needs a floating dtype, got %s (use 'sum')", op,
                        em_dtype_name(t->dtype));
  return EM_OK;
}

static em_status check_peer(const char *op, const em_dist_group *g, int peer, const char *what) {
  if (peer < 0 || peer >= g->size)
    return em_set_error(EM_ERR_INDEX, "%s: %s %d out of range for %s of %d ranks (ranks count from 0)", op, what, peer,
                        g->name, g->size);
  return EM_OK;
}

static em_status check_same(const char *op, const em_tensor *out, const em_tensor *in) {
  if (out->dtype != in->dtype)
    return em_set_error(EM_ERR_DTYPE, "%s: output dtype %s, input dtype %s (they must match)", op,
                        em_dtype_name(out->dtype), em_dtype_name(in->dtype));
  if (out->storage->device.type != in->storage->device.type)
    return em_set_error(EM_ERR_DEVICE, "%s: input and output are on different devices", op);
  if (out->storage == in->storage)
    return em_set_error(EM_ERR_ARGUMENT, "%s: input and output share memory (pass separate tensors)", op);
  return EM_OK;
}

/* ---------------------------------------------------------------- the public collectives */

em_status em_dist_all_reduce(em_dist_group *g, em_tensor *t, em_dist_redop op, em_dist_work **work) {
  em_status st;
  if ((st = check_group("all_reduce", g)) || (st = check_buffer("all_reduce", t, "tensor")) ||
      (st = check_redop("all_reduce", op, t)))
    return st;
  /* a plain call on a host's ranks: straight through shared memory (symmetric.c) */
  if (!work && dist_symm_try_all_reduce(g, t, op, &st)) return st;
  /* ranks on several hosts, several on some: within hosts in shared memory, across by leaders */
  if (!work && dist_hier_try_all_reduce(g, t, op, &st)) return st;
  return emp_dist_post(g, EM_DIST_OP_ALL_REDUCE, t, t, op, -1, 0, work);
}

em_status em_dist_broadcast(em_dist_group *g, em_tensor *t, int root, em_dist_work **work) {
  em_status st;
  if ((st = check_group("broadcast", g)) || (st = check_buffer("broadcast", t, "tensor")) ||
      (st = check_peer("broadcast", g, root, "root")))
    return st;
  /* A plain call on a host's ranks: the root's copy read from its shared memory, 1.8-140x
   * Gloo's broadcast (bench/distributed/gloo.sh -o broadcast). Not under MPI, whose own
   * shared-memory broadcast copies once (single-copy) and measured faster from 16 KB up. */
  const char *be = em_dist_backend_name();
  if (!work && !(be && !strcmp(be, "mpi")) && dist_symm_try_broadcast(g, t, root, &st)) return st;
  return emp_dist_post(g, EM_DIST_OP_BROADCAST, t, t, EM_DIST_SUM, root, 0, work);
}

em_status em_dist_all_gather(em_dist_group *g, em_tensor *out, const em_tensor *in, em_dist_work **work) {
  em_status st;
  if ((st = check_group("all_gather", g)) || (st = check_buffer("all_gather", in, "input")) ||
      (st = check_buffer("all_gather", out, "output")) || (st = check_same("all_gather", out, in)))
    return st;
  int64_t n = em_tensor_numel(in);
  if (em_tensor_numel(out) != n * g->size)
    return em_set_error(EM_ERR_SHAPE,
                        "all_gather: the output has %lld elements, expected %lld (%d ranks x %lld, the input's %s)",
                        (long long)em_tensor_numel(out), (long long)(n * g->size), g->size, (long long)n, EM_SHAPE(in));
  return emp_dist_post(g, EM_DIST_OP_ALL_GATHER, (em_tensor *)in, out, EM_DIST_SUM, -1, 0, work);
}

em_status em_dist_reduce_scatter(em_dist_group *g, em_tensor *out, const em_tensor *in, em_dist_redop op,
                                 em_dist_work **work) {
  em_status st;
  if ((st = check_group("reduce_scatter", g)) || (st = check_buffer("reduce_scatter", in, "input")) ||
      (st = check_buffer("reduce_scatter", out, "output")) || (st = check_same("reduce_scatter", out, in)) ||
      (st = check_redop("reduce_scatter", op, in)))
    return st;
  int64_t n = em_tensor_numel(in);
  if (n % g->size)
    return em_set_error(EM_ERR_SHAPE,
                        "reduce_scatter: the input has %lld elements (shape %s), not a multiple of the %d ranks "
                        "(each rank receives numel / %d)",
                        (long long)n, EM_SHAPE(in), g->size, g->size);
  if (em_tensor_numel(out) != n / g->size)
    return em_set_error(EM_ERR_SHAPE, "reduce_scatter: the output has %lld elements, expected %lld (%lld / %d ranks)",
                        (long long)em_tensor_numel(out), (long long)(n / g->size), (long long)n, g->size);
  return emp_dist_post(g, EM_DIST_OP_REDUCE_SCATTER, (em_tensor *)in, out, op, -1, 0, work);
}

em_status em_dist_barrier(em_dist_group *g, em_dist_work **work) {
  em_status st = check_group("barrier", g);
  if (st) return st;
  return emp_dist_post(g, EM_DIST_OP_BARRIER, NULL, NULL, EM_DIST_SUM, -1, 0, work);
}

static em_status check_p2p(const char *op, em_dist_group *g, const em_tensor *t, int peer, int tag) {
  em_status st;
  if ((st = check_group(op, g)) || (st = check_buffer(op, t, "tensor")) ||
      (st = check_peer(op, g, peer, !strcmp(op, "send") ? "destination rank" : "source rank")))
    return st;
  if (peer == g->rank)
    return em_set_error(EM_ERR_ARGUMENT, "%s: rank %d cannot %s itself", op, peer,
                        !strcmp(op, "send") ? "send to" : "receive from");
  if (tag < 0 || tag > 32767) return em_set_error(EM_ERR_ARGUMENT, "%s: tag %d out of range [0, 32767]", op, tag);
  return EM_OK;
}

em_status em_dist_send(em_dist_group *g, const em_tensor *t, int dst, int tag, em_dist_work **work) {
  em_status st = check_p2p("send", g, t, dst, tag);
  if (st) return st;
  return emp_dist_post(g, EM_DIST_OP_SEND, (em_tensor *)t, (em_tensor *)t, EM_DIST_SUM, dst, tag, work);
}

em_status em_dist_recv(em_dist_group *g, em_tensor *t, int src, int tag, em_dist_work **work) {
  em_status st = check_p2p("recv", g, t, src, tag);
  if (st) return st;
  return emp_dist_post(g, EM_DIST_OP_RECV, t, t, EM_DIST_SUM, src, tag, work);
}

/* ---------------------------------------------------------------- all_to_all, gather, scatter, reduce, *_v */

/* Sum of n counts into *sum; an error naming what when one is negative (or the sum absurd). */
static em_status sum_counts(const char *op, const char *what, const int64_t *counts, int n, int64_t *sum) {
  if (!counts) return em_set_error(EM_ERR_ARGUMENT, "%s: no %s given (expected %d counts, one per rank)", op, what, n);
  int64_t s = 0;
  for (int r = 0; r < n; r++) {
    if (counts[r] < 0)
      return em_set_error(EM_ERR_ARGUMENT, "%s: %s for rank %d is %lld; counts are numbers of elements (>= 0)", op,
                          what, r, (long long)counts[r]);
    if (counts[r] > INT64_MAX / 2 - s)
      return em_set_error(EM_ERR_ARGUMENT, "%s: %s add up to more than 2^62 elements", op, what);
    s += counts[r];
  }
  *sum = s;
  return EM_OK;
}

/* all_to_all(_v) through shared memory (symmetric.c) for plain calls on one host's ranks
 * (5-57x Gloo's from 1 MB down to 8 KB between 2 ranks here), except under MPI, whose own
 * shared-memory all_to_all was as fast or faster from 128 KB up. */
static int symm_all_to_all_wanted(void) {
  const char *be = em_dist_backend_name();
  return !(be && !strcmp(be, "mpi"));
}

static int64_t *copy_counts(const int64_t *counts, int n) {
  int64_t *c = malloc(sizeof(int64_t) * (n > 0 ? n : 1));
  if (c) memcpy(c, counts, sizeof(int64_t) * n);
  return c;
}

em_status em_dist_all_to_all(em_dist_group *g, em_tensor *out, const em_tensor *in, em_dist_work **work) {
  const char *op = "all_to_all";
  em_status st;
  if ((st = check_group(op, g)) || (st = check_buffer(op, in, "input")) || (st = check_buffer(op, out, "output")) ||
      (st = check_same(op, out, in)))
    return st;
  int64_t n = em_tensor_numel(in);
  if (n % g->size)
    return em_set_error(EM_ERR_SHAPE,
                        "%s: the input has %lld elements (shape %s), not a multiple of the %d ranks (block r of "
                        "numel / %d elements goes to rank r; all_to_all_v takes uneven splits)",
                        op, (long long)n, EM_SHAPE(in), g->size, g->size);
  if (em_tensor_numel(out) != n)
    return em_set_error(EM_ERR_SHAPE, "%s: the output has %lld elements (shape %s), expected %lld (as many as the input)",
                        op, (long long)em_tensor_numel(out), EM_SHAPE(out), (long long)n);
  if (!work && symm_all_to_all_wanted()) { /* a plain call on a host's ranks: through shared memory */
    int64_t *even = malloc(sizeof(int64_t) * (size_t)g->size);
    int done = 0;
    if (even) {
      for (int r = 0; r < g->size; r++) even[r] = n / g->size;
      done = dist_symm_try_all_to_all_v(g, out, even, in, even, EM_DIST_OP_ALL_TO_ALL, &st);
      free(even);
    }
    if (done) return st;
  }
  return emp_dist_post(g, EM_DIST_OP_ALL_TO_ALL, (em_tensor *)in, out, EM_DIST_SUM, -1, 0, work);
}

em_status em_dist_all_to_all_v(em_dist_group *g, em_tensor *out, const int64_t *out_counts, const em_tensor *in,
                               const int64_t *in_counts, em_dist_work **work) {
  const char *op = "all_to_all_v";
  em_status st;
  if ((st = check_group(op, g)) || (st = check_buffer(op, in, "input")) || (st = check_buffer(op, out, "output")) ||
      (st = check_same(op, out, in)))
    return st;
  int64_t n_in = 0, n_out = 0;
  if ((st = sum_counts(op, "in_counts", in_counts, g->size, &n_in)) ||
      (st = sum_counts(op, "out_counts", out_counts, g->size, &n_out)))
    return st;
  if (n_in != em_tensor_numel(in))
    return em_set_error(EM_ERR_SHAPE, "%s: in_counts add up to %lld elements, the input has %lld (shape %s)", op,
                        (long long)n_in, (long long)em_tensor_numel(in), EM_SHAPE(in));
  if (n_out != em_tensor_numel(out))
    return em_set_error(EM_ERR_SHAPE, "%s: out_counts add up to %lld elements, the output has %lld (shape %s)", op,
                        (long long)n_out, (long long)em_tensor_numel(out), EM_SHAPE(out));
  if (!work && symm_all_to_all_wanted() &&
      dist_symm_try_all_to_all_v(g, out, out_counts, in, in_counts, EM_DIST_OP_ALL_TO_ALL_V, &st))
    return st;
  int64_t *ic = copy_counts(in_counts, g->size), *oc = copy_counts(out_counts, g->size);
  if (!ic || !oc) {
    free(ic);
    free(oc);
    return em_set_error(EM_ERR_MEMORY, "%s: out of memory", op);
  }
  return post_work(g, EM_DIST_OP_ALL_TO_ALL_V, (em_tensor *)in, out, EM_DIST_SUM, -1, 0, work, work == NULL, ic, oc);
}

em_status em_dist_gather(em_dist_group *g, em_tensor *out, const em_tensor *in, int root, em_dist_work **work) {
  const char *op = "gather";
  em_status st;
  if ((st = check_group(op, g)) || (st = check_peer(op, g, root, "root")) || (st = check_buffer(op, in, "input")))
    return st;
  if (g->rank != root) out = NULL; /* the root's alone */
  else {
    if (!out)
      return em_set_error(EM_ERR_ARGUMENT, "%s: rank %d is the root and needs an output of %d x %lld elements", op,
                          root, g->size, (long long)em_tensor_numel(in));
    if ((st = check_buffer(op, out, "output")) || (st = check_same(op, out, in))) return st;
    int64_t n = em_tensor_numel(in);
    if (em_tensor_numel(out) != n * g->size)
      return em_set_error(EM_ERR_SHAPE, "%s: the root's output has %lld elements, expected %lld (%d ranks x %lld, the "
                          "input's %s)", op, (long long)em_tensor_numel(out), (long long)(n * g->size), g->size,
                          (long long)n, EM_SHAPE(in));
  }
  return emp_dist_post(g, EM_DIST_OP_GATHER, (em_tensor *)in, out, EM_DIST_SUM, root, 0, work);
}

em_status em_dist_scatter(em_dist_group *g, em_tensor *out, const em_tensor *in, int root, em_dist_work **work) {
  const char *op = "scatter";
  em_status st;
  if ((st = check_group(op, g)) || (st = check_peer(op, g, root, "root")) || (st = check_buffer(op, out, "output")))
    return st;
  if (g->rank != root) in = NULL;
  else {
    if (!in)
      return em_set_error(EM_ERR_ARGUMENT, "%s: rank %d is the root and needs an input of %d x %lld elements", op,
                          root, g->size, (long long)em_tensor_numel(out));
    if ((st = check_buffer(op, in, "input")) || (st = check_same(op, out, in))) return st;
    int64_t n = em_tensor_numel(out);
    if (em_tensor_numel(in) != n * g->size)
      return em_set_error(EM_ERR_SHAPE, "%s: the root's input has %lld elements, expected %lld (%d ranks x %lld, the "
                          "output's %s)", op, (long long)em_tensor_numel(in), (long long)(n * g->size), g->size,
                          (long long)n, EM_SHAPE(out));
  }
  return emp_dist_post(g, EM_DIST_OP_SCATTER, (em_tensor *)in, out, EM_DIST_SUM, root, 0, work);
}

em_status em_dist_reduce(em_dist_group *g, em_tensor *t, em_dist_redop op, int root, em_dist_work **work) {
  em_status st;
  if ((st = check_group("reduce", g)) || (st = check_buffer("reduce", t, "tensor")) ||
      (st = check_redop("reduce", op, t)) || (st = check_peer("reduce", g, root, "root")))
    return st;
  return emp_dist_post(g, EM_DIST_OP_REDUCE, t, t, op, root, 0, work);
}

em_status em_dist_all_gather_v(em_dist_group *g, em_tensor *out, const int64_t *counts, const em_tensor *in,
                               em_dist_work **work) {
  const char *op = "all_gather_v";
  em_status st;
  if ((st = check_group(op, g)) || (st = check_buffer(op, in, "input")) || (st = check_buffer(op, out, "output")) ||
      (st = check_same(op, out, in)))
    return st;
  int64_t total = 0;
  if ((st = sum_counts(op, "counts", counts, g->size, &total))) return st;
  if (counts[g->rank] != em_tensor_numel(in))
    return em_set_error(EM_ERR_SHAPE, "%s: counts for rank %d (this rank) is %lld, the input has %lld elements (shape %s)",
                        op, g->rank, (long long)counts[g->rank], (long long)em_tensor_numel(in), EM_SHAPE(in));
  if (total != em_tensor_numel(out))
    return em_set_error(EM_ERR_SHAPE, "%s: counts add up to %lld elements, the output has %lld (shape %s)", op,
                        (long long)total, (long long)em_tensor_numel(out), EM_SHAPE(out));
  int64_t *oc = copy_counts(counts, g->size);
  if (!oc) return em_set_error(EM_ERR_MEMORY, "%s: out of memory", op);
  return post_work(g, EM_DIST_OP_ALL_GATHER_V, (em_tensor *)in, out, EM_DIST_SUM, -1, 0, work, work == NULL, NULL,
                   oc);
}

/* ---------------------------------------------------------------- waiting */

em_status em_dist_work_wait(em_dist_work *w, double timeout_s) {
  if (!w) return em_set_error(EM_ERR_ARGUMENT, "wait: no work handle");
  if (timeout_s > 0) {
    double d = em_clock_monotonic() + timeout_s;
    if (d < atomic_load(&w->deadline)) atomic_store(&w->deadline, d);
  }
  if (atomic_load(&w->state) != EM_WORK_PENDING) goto finished;
  atomic_fetch_add(&waiters, 1);
  const em_dist_backend *be = w->group->backend[work_device(w)];
  if (be && be->progress) {
    /* Drive the backend from this thread: no hand-off, no wake-up; the backend enforces
     * the deadline (and ends the job) from here too. Poll hard for the first 100 us (a small collective is done by then, and a yield on a
     * busy machine can cost a whole time slice), then yield now and then, and after 5 ms
     * (a rank is waiting for a much slower one) nap between rounds, so that the core goes to
     * whoever can use it. Naps stay short: the peer's data moves only while this side polls
     * too. Any progress starts the sequence again. */
    double phase = em_clock_monotonic();
    long nap = 0;
    unsigned idle = 0;
    while (atomic_load(&w->state) == EM_WORK_PENDING) {
      int r = be->progress();
      if (r < 0) break; /* the backend cannot: sleep below */
      if (r > 0) {
        phase = em_clock_monotonic(), idle = 0, nap = 0;
        continue;
      }
      double waited = em_clock_monotonic() - phase;
      if (waited < 100e-6) continue;
      if (waited < 5e-3) {
        if (++idle % 16 == 0) sched_yield();
        continue;
      }
      nap = nap ? (nap * 2 > 50000 ? 50000 : nap * 2) : 10000;
      struct timespec ts = {0, nap};
      nanosleep(&ts, NULL);
    }
  }
  pthread_mutex_lock(&done_lock);
  while (atomic_load(&w->state) == EM_WORK_PENDING) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    pthread_cond_timedwait(&done_cond, &done_lock, &ts);
    if (atomic_load(&w->state) == EM_WORK_PENDING &&
        em_clock_monotonic() > atomic_load(&w->deadline) + BACKSTOP_GRACE_S) {
      pthread_mutex_unlock(&done_lock);
      atomic_fetch_sub(&waiters, 1);
      char what[256], msg[512];
      emp_dist_describe(w, what, sizeof what);
      snprintf(msg, sizeof msg, "%s: timed out after %.0f s (the backend did not end it)", what,
               em_clock_monotonic() - w->posted_at);
      const em_dist_backend *be = w->group->backend[work_device(w)];
      if (be) be->abort_job(msg, EM_DIST_EXIT_TIMEOUT);
      fprintf(stderr, "ember.dist: %s\n", msg);
      exit(EM_DIST_EXIT_TIMEOUT);
    }
  }
  pthread_mutex_unlock(&done_lock);
  atomic_fetch_sub(&waiters, 1);
finished:
  reap();
  if (atomic_load(&w->state) == EM_WORK_FAILED) return em_set_error(w->status, "%s", w->message);
  return EM_OK;
}

int em_dist_work_test(em_dist_work *w) {
  if (!w) {
    em_set_error(EM_ERR_ARGUMENT, "test: no work handle");
    return -1;
  }
  int s = atomic_load(&w->state);
  if (s == EM_WORK_PENDING) return 0;
  if (s == EM_WORK_FAILED) {
    em_set_error(w->status, "%s", w->message);
    return -1;
  }
  return 1;
}
