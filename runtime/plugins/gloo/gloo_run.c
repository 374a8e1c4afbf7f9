/* gloo_run.c - running works on Gloo.
 *
 * Collectives: one communication thread takes works from one FIFO and runs each to its end
 * (Gloo's collectives block), so they reach Gloo in the order the program posted them, the
 * same on every rank. A plain blocking call (no handle) runs on the caller's own thread
 * instead when nothing is queued before it (no hand-off, no wake-up): the thread running a
 * work holds `exec`, and the communication thread takes a work off the queue only while
 * holding it, so a direct call can never overtake one posted earlier.
 *
 * Signatures. Before the data moves, the ranks exchange what each of them called (kind,
 * number, dtype, element count, operation, root: 40 bytes through one small allgather);
 * when they differ, every rank fails the collective with the same message naming both
 * calls, and the group stays usable. all_to_all_v also exchanges every rank's counts, so a
 * rank that sends a peer more or less than the peer expects is an error everywhere too.
 * Without this Gloo would wait for data that never comes (a timeout) or, for two calls of
 * one byte size, combine unrelated buffers.
 *
 * Point to point: send and recv start on the posting thread (Gloo's pairs take concurrent
 * callers) with the user's tag as the slot (collectives use slots with a non-zero top byte);
 * see post_p2p for the header that makes a size mismatch an error.
 *
 * 'avg' is a sum scaled by 1/size afterwards; reduce_scatter is an allreduce of a copy of
 * the input of which each rank keeps its block; a barrier is the signature exchange alone
 * (an allgather completes on a rank only once every rank has entered it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gloo_impl.h"

static struct {
  pthread_t thread;
  int running, stopping, p2p_live;
  pthread_mutex_t qlock, exec, plock;
  pthread_cond_t qcond, pcond;
  em_dist_work *head, *tail; /* w->next; w->backend_data is its gl_group */
} R = {.qlock = PTHREAD_MUTEX_INITIALIZER,
       .exec = PTHREAD_MUTEX_INITIALIZER,
       .plock = PTHREAD_MUTEX_INITIALIZER,
       .qcond = PTHREAD_COND_INITIALIZER,
       .pcond = PTHREAD_COND_INITIALIZER};

/* ---------------------------------------------------------------- reductions */

static void reduce_cb(void *out, const void *a, const void *b, size_t n, void *arg) {
  intptr_t code = (intptr_t)arg;
  em_dtype dt = (em_dtype)(code >> 8);
  em_dist_redop op = (em_dist_redop)(code & 0xff);
  if (out == b) { /* the operations commute */
    emp_dist_combine(out, a, (int64_t)n, dt, op);
    return;
  }
  if (out != a) memcpy(out, a, n * em_dtype_size(dt));
  emp_dist_combine(out, b, (int64_t)n, dt, op);
}

static void *reduce_arg(em_dtype dt, em_dist_redop op) { return (void *)(((intptr_t)dt << 8) | (intptr_t)op); }

/* ---------------------------------------------------------------- signatures */

typedef struct sig {
  int32_t kind, dtype, redop, root;
  int64_t seq, n, hash; /* n: elements that must agree; hash: of counts (all_gather_v) */
} sig;

static const em_tensor *main_tensor(const em_dist_work *w) { return w->in ? w->in : w->out; }

static int is_rooted(em_dist_opkind k) {
  return k == EM_DIST_OP_BROADCAST || k == EM_DIST_OP_GATHER || k == EM_DIST_OP_SCATTER || k == EM_DIST_OP_REDUCE;
}
static int is_reducing(em_dist_opkind k) {
  return k == EM_DIST_OP_ALL_REDUCE || k == EM_DIST_OP_REDUCE_SCATTER || k == EM_DIST_OP_REDUCE;
}

static void fill_sig(sig *s, const em_dist_work *w, const gl_group *g) {
  memset(s, 0, sizeof *s);
  const em_tensor *t = main_tensor(w);
  s->kind = w->kind;
  s->dtype = t ? (int32_t)t->dtype : -1;
  s->redop = is_reducing(w->kind) ? (int32_t)w->redop : -1;
  s->root = is_rooted(w->kind) ? w->peer : -1;
  s->seq = w->seq;
  switch (w->kind) {
    case EM_DIST_OP_SCATTER: s->n = w->out ? em_tensor_numel(w->out) : 0; break;
    case EM_DIST_OP_ALL_TO_ALL_V: s->n = 0; break; /* the counts are checked next */
    case EM_DIST_OP_ALL_GATHER_V: {
      uint64_t h = 1469598103934665603ull;
      for (int r = 0; r < g->size; r++) {
        s->n += w->out_counts[r];
        h = (h ^ (uint64_t)w->out_counts[r]) * 1099511628211ull;
      }
      s->hash = (int64_t)h;
      break;
    }
    case EM_DIST_OP_BARRIER: break;
    default: s->n = t ? em_tensor_numel(t) : 0;
  }
}

static int describe_sig(char *buf, size_t cap, const sig *s) {
  int n = snprintf(buf, cap, "%s #%lld", emp_dist_op_name((em_dist_opkind)s->kind), (long long)s->seq);
  if (s->kind == EM_DIST_OP_BARRIER) return n;
  if (s->kind == EM_DIST_OP_ALL_TO_ALL_V)
    n += snprintf(buf + n, cap - n, " of %s", s->dtype >= 0 ? em_dtype_name((em_dtype)s->dtype) : "?");
  else if (s->kind == EM_DIST_OP_ALL_GATHER_V)
    n += snprintf(buf + n, cap - n, " of %lld %s elements in all (counts hash %llx)", (long long)s->n,
                  s->dtype >= 0 ? em_dtype_name((em_dtype)s->dtype) : "?", (unsigned long long)s->hash);
  else
    n += snprintf(buf + n, cap - n, " of %lld %s elements", (long long)s->n,
                  s->dtype >= 0 ? em_dtype_name((em_dtype)s->dtype) : "?");
  if (s->redop >= 0) n += snprintf(buf + n, cap - n, " (%s)", em_dist_redop_name((em_dist_redop)s->redop));
  if (s->root >= 0) n += snprintf(buf + n, cap - n, " (root %d)", s->root);
  return n;
}

/* GLX_OK when every rank called the same; GLX_ERROR with msg when not; else Gloo's code. */
static int check_signatures(em_dist_work *w, gl_group *g, const glx_op *o, char *msg, size_t cap) {
  sig mine, *all = malloc(sizeof(sig) * g->size);
  if (!all) return snprintf(msg, cap, "out of memory"), GLX_ERROR;
  fill_sig(&mine, w, g);
  int rc = glx_allgather(g->ctx, o, &mine, all, sizeof mine, 1);
  int bad = -1;
  for (int r = 0; rc == GLX_OK && r < g->size && bad < 0; r++)
    if (memcmp(&all[r], &all[0], sizeof mine)) bad = r;
  if (bad > 0) {
    char a[200], b[200];
    describe_sig(a, sizeof a, &all[0]);
    describe_sig(b, sizeof b, &all[bad]);
    snprintf(msg, cap,
             "the ranks called different collectives: rank 0 called %s, rank %d called %s (every rank must call the "
             "same collectives in the same order, with the same sizes, dtypes, operations and roots)",
             a, bad, b);
    rc = GLX_ERROR;
  }
  free(all);
  if (rc != GLX_OK || w->kind != EM_DIST_OP_ALL_TO_ALL_V) return rc;
  /* every rank's counts: what rank i sends rank r must be what r expects from i */
  int n = g->size;
  int64_t *mine2 = malloc(sizeof(int64_t) * 2 * n), *m = malloc(sizeof(int64_t) * 2 * n * n);
  if (!mine2 || !m) {
    free(mine2), free(m);
    return snprintf(msg, cap, "out of memory"), GLX_ERROR;
  }
  memcpy(mine2, w->in_counts, sizeof(int64_t) * n);
  memcpy(mine2 + n, w->out_counts, sizeof(int64_t) * n);
  glx_op o2 = *o;
  o2.tag ^= 0x40000000u;
  rc = glx_allgather(g->ctx, &o2, mine2, m, (size_t)2 * n, 8);
  for (int i = 0; rc == GLX_OK && i < n; i++)
    for (int r = 0; r < n; r++) {
      int64_t sends = m[(size_t)2 * n * i + r], expects = m[(size_t)2 * n * r + n + i];
      if (sends != expects) {
        snprintf(msg, cap,
                 "the counts do not match: rank %d sends %lld elements to rank %d, which expects %lld from it "
                 "(in_counts[r] on each rank must equal out_counts[this rank] on rank r)",
                 i, (long long)sends, r, (long long)expects);
        rc = GLX_ERROR;
        i = n;
        break;
      }
    }
  free(mine2);
  free(m);
  return rc;
}

/* ---------------------------------------------------------------- collectives */

static void *data(const em_tensor *t) { return t ? em_tensor_data(t) : NULL; }

static int move_data(em_dist_work *w, gl_group *g, const glx_op *o) {
  const em_tensor *t = main_tensor(w);
  em_dtype dt = t ? t->dtype : EM_UINT8;
  size_t es = em_dtype_size(dt);
  void *arg = reduce_arg(dt, w->redop);
  int root = w->peer;
  switch (w->kind) {
    case EM_DIST_OP_ALL_REDUCE: {
      size_t n = (size_t)em_tensor_numel(w->out);
      return n ? glx_allreduce(g->ctx, o, data(w->out), n, es, reduce_cb, arg) : GLX_OK;
    }
    case EM_DIST_OP_REDUCE: {
      size_t n = (size_t)em_tensor_numel(w->out);
      return n ? glx_reduce(g->ctx, o, data(w->out), n, es, root, reduce_cb, arg) : GLX_OK;
    }
    case EM_DIST_OP_BROADCAST: {
      size_t n = (size_t)em_tensor_numel(w->out);
      return n ? glx_broadcast(g->ctx, o, data(w->out), n, es, root) : GLX_OK;
    }
    case EM_DIST_OP_ALL_GATHER: {
      size_t n = (size_t)em_tensor_numel(w->in);
      return n ? glx_allgather(g->ctx, o, data(w->in), data(w->out), n, es) : GLX_OK;
    }
    case EM_DIST_OP_REDUCE_SCATTER: {
      size_t n = (size_t)em_tensor_numel(w->in), k = n / (size_t)g->size;
      if (!k) return GLX_OK;
      char *tmp = malloc(n * es);
      if (!tmp) return snprintf(o->err, o->cap, "out of memory (%zu bytes)", n * es), GLX_ERROR;
      memcpy(tmp, data(w->in), n * es);
      int rc = glx_allreduce(g->ctx, o, tmp, n, es, reduce_cb, arg);
      if (rc == GLX_OK) memcpy(data(w->out), tmp + (size_t)g->rank * k * es, k * es);
      free(tmp);
      return rc;
    }
    case EM_DIST_OP_ALL_TO_ALL: {
      size_t n = (size_t)em_tensor_numel(w->in);
      return n ? glx_alltoall(g->ctx, o, data(w->in), data(w->out), n, es) : GLX_OK;
    }
    case EM_DIST_OP_ALL_TO_ALL_V: {
      /* the counts agree between ranks (checked); Gloo skips the empty parts */
      return glx_alltoallv(g->ctx, o, data(w->in), w->in_counts, data(w->out), w->out_counts, es);
    }
    case EM_DIST_OP_GATHER: {
      size_t n = (size_t)em_tensor_numel(w->in);
      return n ? glx_gather(g->ctx, o, data(w->in), data(w->out), n, es, root) : GLX_OK;
    }
    case EM_DIST_OP_SCATTER: {
      size_t n = (size_t)em_tensor_numel(w->out);
      return n ? glx_scatter(g->ctx, o, data(w->in), data(w->out), n, es, root) : GLX_OK;
    }
    case EM_DIST_OP_ALL_GATHER_V: {
      int64_t total = 0;
      for (int r = 0; r < g->size; r++) total += w->out_counts[r];
      return total ? glx_allgatherv(g->ctx, o, data(w->in), data(w->out), w->out_counts, es) : GLX_OK;
    }
    case EM_DIST_OP_BARRIER: return GLX_OK; /* the signature exchange was the barrier */
    default: return snprintf(o->err, o->cap, "%s is not a collective", emp_dist_op_name(w->kind)), GLX_ERROR;
  }
}

static void fail_work(em_dist_work *w, const char *why) {
  char msg[EM_DIST_MSG], desc[256];
  emp_dist_describe(w, desc, sizeof desc);
  snprintf(msg, sizeof msg, "%s: %s", desc, why);
  emp_dist_work_done(w, EM_ERR_RUNTIME, msg);
}

static void execute(em_dist_work *w, gl_group *g) {
  char err[EM_DIST_MSG] = "";
  w->started_at = em_clock_monotonic();
  if (w->seq) atomic_store(&g->posted, w->seq);
  glx_op o = {.timeout_s = atomic_load(&w->deadline) - w->started_at, .tag = (uint32_t)(w->seq * 2), .err = err,
              .cap = sizeof err};
  if (o.timeout_s <= 0) gl_fail_job(g, w, NULL, GLX_TIMEOUT, "its deadline passed before it could start");
  int rc = check_signatures(w, g, &o, err, sizeof err);
  if (rc == GLX_OK) {
    o.tag++;
    o.timeout_s = atomic_load(&w->deadline) - em_clock_monotonic();
    rc = o.timeout_s > 0 ? move_data(w, g, &o) : GLX_TIMEOUT;
  }
  if (rc == GLX_TIMEOUT || rc == GLX_IO) gl_fail_job(g, w, NULL, rc, err);
  if (w->seq) atomic_store(&g->completed, w->seq);
  if (rc != GLX_OK) {
    fail_work(w, err);
    return;
  }
  if (w->redop == EM_DIST_AVG &&
      (w->kind == EM_DIST_OP_ALL_REDUCE || w->kind == EM_DIST_OP_REDUCE_SCATTER ||
       (w->kind == EM_DIST_OP_REDUCE && g->rank == w->peer)))
    emp_dist_scale(data(w->out), em_tensor_numel(w->out), w->out->dtype, 1.0 / g->size);
  emp_dist_work_done(w, EM_OK, NULL);
}

static void *comm_main(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&R.qlock);
    while (!R.head && !R.stopping) pthread_cond_wait(&R.qcond, &R.qlock);
    int done = !R.head && R.stopping;
    pthread_mutex_unlock(&R.qlock);
    if (done) return NULL;
    pthread_mutex_lock(&R.exec);
    pthread_mutex_lock(&R.qlock);
    em_dist_work *w = R.head;
    if (w && !(R.head = w->next)) R.tail = NULL;
    pthread_mutex_unlock(&R.qlock);
    if (w) execute(w, w->backend_data);
    pthread_mutex_unlock(&R.exec);
  }
}

int gl_run_direct(void *group_impl, em_dist_work *w) {
  if (!R.running || w->kind == EM_DIST_OP_SEND || w->kind == EM_DIST_OP_RECV) return 0;
  pthread_mutex_lock(&R.exec);
  pthread_mutex_lock(&R.qlock);
  int empty = R.head == NULL;
  pthread_mutex_unlock(&R.qlock);
  if (empty) execute(w, group_impl);
  pthread_mutex_unlock(&R.exec);
  return empty;
}

/* ---------------------------------------------------------------- send, recv */

#define HEADER_SLOT ((uint64_t)1 << 40) /* a send's header goes on tag | this */

/* Gloo's receive completes with fewer bytes than posted without saying so: every message
 * is preceded by a header (elements, dtype), and a receive posts its data buffer only once
 * the header agrees (a disagreeing message is taken into scratch memory, so the pair stays
 * in step, and the receive fails naming both sizes). Each operation is waited for on a
 * thread of its own: completions in posting order could make a receive wait for one
 * posted before it that the peer only sends later. */
typedef struct p2p_op {
  em_dist_work *w;
  gl_group *g;
  int64_t header[2], peer_header[2]; /* elements, dtype */
  glx_p2p *hdr, *body;
} p2p_op;

static int wait_op(p2p_op *p, glx_p2p *x, char *err, size_t cap) {
  double left = atomic_load(&p->w->deadline) - em_clock_monotonic();
  int rc = left > 0 ? glx_p2p_wait(x, left, err, cap) : GLX_TIMEOUT;
  if (rc == GLX_TIMEOUT || rc == GLX_IO) gl_fail_job(p->g, p->w, NULL, rc, err);
  return rc;
}

static void *p2p_main(void *arg) {
  p2p_op *p = arg;
  em_dist_work *w = p->w;
  char err[EM_DIST_MSG] = "";
  void *scratch = NULL;
  int rc = wait_op(p, p->hdr, err, sizeof err);
  if (!rc && w->kind == EM_DIST_OP_RECV) {
    em_tensor *t = w->out;
    void *dst = data(t);
    int64_t n = p->peer_header[0], dt = p->peer_header[1];
    size_t bytes = (size_t)n * (dt >= 0 && dt < EM_NUM_DTYPES ? em_dtype_size((em_dtype)dt) : 1);
    int agree = n == em_tensor_numel(t) && dt == (int64_t)t->dtype;
    if (!agree) dst = scratch = malloc(bytes ? bytes : 1);
    rc = dst ? glx_p2p_start(p->g->ctx, dst, bytes, 0, w->peer, (uint64_t)w->tag, &p->body, err, sizeof err)
             : (snprintf(err, sizeof err, "out of memory"), GLX_ERROR);
    if (!rc) rc = wait_op(p, p->body, err, sizeof err);
    if (!rc && !agree) {
      snprintf(err, sizeof err, "expected %lld elements of %s, the sender sent %lld elements of %s",
               (long long)em_tensor_numel(t), em_dtype_name(t->dtype), (long long)n,
               dt >= 0 && dt < EM_NUM_DTYPES ? em_dtype_name((em_dtype)dt) : "?");
      rc = GLX_ERROR;
    }
  } else if (!rc) {
    rc = wait_op(p, p->body, err, sizeof err);
  }
  glx_p2p_free(p->hdr);
  glx_p2p_free(p->body);
  free(scratch);
  free(p);
  if (rc) fail_work(w, err);
  else emp_dist_work_done(w, EM_OK, NULL);
  pthread_mutex_lock(&R.plock);
  if (--R.p2p_live == 0) pthread_cond_broadcast(&R.pcond);
  pthread_mutex_unlock(&R.plock);
  return NULL;
}

static em_status post_p2p(gl_group *g, em_dist_work *w) {
  p2p_op *p = calloc(1, sizeof *p);
  if (!p) return em_set_error(EM_ERR_MEMORY, "%s: out of memory", emp_dist_op_name(w->kind));
  em_tensor *t = w->in ? w->in : w->out;
  char err[EM_DIST_MSG] = "";
  int send = w->kind == EM_DIST_OP_SEND;
  p->w = w, p->g = g;
  p->header[0] = em_tensor_numel(t), p->header[1] = t->dtype;
  w->started_at = em_clock_monotonic();
  uint64_t slot = (uint64_t)w->tag;
  int rc = glx_p2p_start(g->ctx, send ? p->header : p->peer_header, sizeof p->header, send, w->peer,
                         slot | HEADER_SLOT, &p->hdr, err, sizeof err);
  if (!rc && send)
    rc = glx_p2p_start(g->ctx, data(t), (size_t)p->header[0] * em_dtype_size(t->dtype), 1, w->peer, slot, &p->body,
                       err, sizeof err);
  pthread_t th;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_mutex_lock(&R.plock);
  R.p2p_live++;
  pthread_mutex_unlock(&R.plock);
  if (rc || pthread_create(&th, &attr, p2p_main, p)) {
    pthread_mutex_lock(&R.plock);
    R.p2p_live--;
    pthread_mutex_unlock(&R.plock);
    pthread_attr_destroy(&attr);
    glx_p2p_free(p->hdr);
    glx_p2p_free(p->body);
    free(p);
    char desc[256];
    emp_dist_describe(w, desc, sizeof desc);
    return em_set_error(EM_ERR_RUNTIME, "%s: %s", desc, rc ? err : "cannot start a thread");
  }
  pthread_attr_destroy(&attr);
  return EM_OK;
}

/* ---------------------------------------------------------------- the queue */

em_status gl_post(void *group_impl, em_dist_work *w) {
  gl_group *g = group_impl;
  if (!R.running) return em_set_error(EM_ERR_RUNTIME, "%s: the distributed world was finalized", emp_dist_op_name(w->kind));
  if (w->kind == EM_DIST_OP_SEND || w->kind == EM_DIST_OP_RECV) return post_p2p(g, w);
  w->backend_data = g;
  w->next = NULL;
  pthread_mutex_lock(&R.qlock);
  if (R.tail) R.tail->next = w;
  else R.head = w;
  R.tail = w;
  pthread_cond_signal(&R.qcond);
  pthread_mutex_unlock(&R.qlock);
  return EM_OK;
}

em_status gl_run_start(void) {
  R.stopping = 0;
  if (pthread_create(&R.thread, NULL, comm_main, NULL))
    return em_set_error(EM_ERR_RUNTIME, "dist.init: cannot start the communication thread");
  R.running = 1;
  return EM_OK;
}

void gl_run_stop(void) {
  if (!R.running) return;
  pthread_mutex_lock(&R.qlock);
  R.stopping = 1;
  pthread_cond_broadcast(&R.qcond);
  pthread_mutex_unlock(&R.qlock);
  pthread_join(R.thread, NULL);
  pthread_mutex_lock(&R.plock); /* sends and receives still in flight end by their deadline */
  while (R.p2p_live > 0) pthread_cond_wait(&R.pcond, &R.plock);
  pthread_mutex_unlock(&R.plock);
  R.running = 0;
}
