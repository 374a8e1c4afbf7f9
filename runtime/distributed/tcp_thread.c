/* tcp_thread.c - the tcp backend's communication thread: it owns every socket after init.
 *
 * User threads queue works (post) and wake it through an eventfd; it starts each work at
 * once (its first messages go out), keeps every started work in one list in posting
 * order, and after each batch of arrivals lets each work take what it waits for from the
 * mailbox. So any number of collectives, on any groups, and point-to-point messages are in
 * flight together, and none can block another.
 *
 * Algorithms (every message goes straight to the rank that needs it, so a missing message
 * names a missing rank):
 *   all_reduce      up to SMALL_BYTES: every rank sends its buffer to every other and each
 *                   combines all of them in rank order; larger: reduce-scatter (rank k gets
 *                   everyone's k-th block and combines them in rank order), then all-gather
 *                   of the combined blocks. Each element is combined at one place in one
 *                   order, so every rank ends with the same bits; 'avg' scales the combined
 *                   block before it is sent back.
 *   broadcast       the root sends to every rank;
 *   all_gather      every rank sends its block to every other;
 *   reduce_scatter  the first phase of the large all_reduce;
 *   barrier         an empty message from every rank to every other;
 *   send/recv       one message; a receive takes the first matching (group, sender, tag).
 * Payloads are copied into messages, so a send is complete once queued (ZeroMQ delivers it
 * in the background, in order per pair of ranks).
 *
 * Failure. A peer whose connection closes without a goodbye (killed, crashed) or that has
 * been silent (no heartbeat) for EMBER_DIST_HEARTBEAT_TIMEOUT seconds is lost: the job
 * cannot go on, so this rank prints which collective waited for it and ends the job. A work
 * past its deadline asks the ranks it waits for how far they got (1.5 s for answers),
 * prints which are missing and why, and ends the job: every peer gets an ABORT message and
 * exits too, with the same status (124 for a timeout), as MPI_Abort does under mpirun. */
#define _GNU_SOURCE
#ifdef EMBER_HAVE_ZMQ
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>
#include "distributed/tcp_impl.h"
#include "tensor/tensor_impl.h"
#include "plugins/plugin_api.h"

#define HEARTBEAT_S 1.0
#define LOST_GRACE_S 1.0 /* a closed connection: how long its goodbye may still be on the way */
#define QUERY_GRACE_S 1.5
#define POLL_MS 50
#define SMALL_BYTES ((int64_t)32 << 10)
#define ABORT_LINGER_MS 1000
#define CLOSE_LINGER_MS 2000
#define MESH_FAILED "dist.init: its data connections to the other ranks did not all come up"

typedef struct mail {
  tcp_hdr h;
  zmq_msg_t body;
  struct mail *next;
} mail;

typedef struct peer {
  void *push, *monitor;
  double last_heard, closed_at;
  int bye;
} peer;

typedef struct tcp_op {
  em_dist_work *w;
  tcp_group *g;
  int phase;
  mail **got; /* [group size]: this phase's messages, by sender */
  struct tcp_op *next;
} tcp_op;

typedef struct task {
  em_dist_work *w;
  tcp_group *g;
  struct task *next;
} task;

static struct {
  pthread_t thread;
  atomic_int running;
  pthread_mutex_t lock; /* the queue, requests, mesh start-up */
  pthread_cond_t cond;
  task *head, *tail;
  int efd;
  int stopping, stop_now;
  atomic_int abort_requested;
  int abort_status;
  char abort_msg[EM_DIST_MSG];
  em_dist_work *diag_work; /* report_timeout's request */
  tcp_group *diag_group;
  int mesh_missing;
  /* the thread's own */
  void *ctx, *pull, *rendezvous;
  peer *peers;
  int rank, size;
  double timeout, hb_timeout, next_heartbeat;
  char master[160];
  mail *mailbox;
  int *mesh_seen;
  tcp_op *ops;
  int finished;
  /* a diagnosis in progress: answers by world rank */
  int diag_gid;
  int *answered;
  int64_t *answer_posted, *answer_completed;
  pthread_mutex_t groups_lock;
  tcp_group *groups;
  tcp_group *world;
} S = {.lock = PTHREAD_MUTEX_INITIALIZER,
       .cond = PTHREAD_COND_INITIALIZER,
       .groups_lock = PTHREAD_MUTEX_INITIALIZER,
       .efd = -1,
       .diag_gid = -1};

static void abort_now(const char *msg, int status) __attribute__((noreturn));

/* ---------------------------------------------------------------- groups */

void dist_tcp_register_group(tcp_group *g) {
  pthread_mutex_lock(&S.groups_lock);
  g->next = S.groups;
  S.groups = g;
  pthread_mutex_unlock(&S.groups_lock);
}

void dist_tcp_unregister_group(tcp_group *g) {
  pthread_mutex_lock(&S.groups_lock);
  for (tcp_group **p = &S.groups; *p; p = &(*p)->next)
    if (*p == g) {
      *p = g->next;
      break;
    }
  pthread_mutex_unlock(&S.groups_lock);
}

void dist_tcp_note_seq(void *group_impl, int64_t seq, int completed) {
  tcp_group *g = group_impl;
  if (completed) atomic_store(&g->completed_seq, seq);
  else atomic_store(&g->posted_seq, seq);
}

int dist_tcp_thread_running(void) { return atomic_load(&S.running); }

static int rank_text(char *buf, size_t cap, const tcp_group *g, int r) {
  if (g->id == 0) return snprintf(buf, cap, "rank %d", r);
  return snprintf(buf, cap, "rank %d (world rank %d)", r, g->world_ranks[r]);
}

/* ---------------------------------------------------------------- messages */

static void send_msg(int to, tcp_hdr *h, const void *data, size_t bytes) {
  peer *p = &S.peers[to];
  if (!p->push || p->bye) return;
  h->magic = TCP_MAGIC;
  h->src = S.rank;
  zmq_msg_t m;
  zmq_msg_init_size(&m, sizeof *h);
  memcpy(zmq_msg_data(&m), h, sizeof *h);
  if (zmq_msg_send(&m, p->push, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
    zmq_msg_close(&m);
    return; /* cannot happen with unlimited queues; a lost peer is noticed anyway */
  }
  zmq_msg_init_size(&m, bytes);
  if (bytes) memcpy(zmq_msg_data(&m), data, bytes);
  if (zmq_msg_send(&m, p->push, ZMQ_DONTWAIT) < 0) zmq_msg_close(&m);
}

static void send_simple(int to, int kind, int group, int64_t seq, int64_t aux, const void *data, size_t bytes) {
  tcp_hdr h;
  memset(&h, 0, sizeof h);
  h.kind = (uint8_t)kind;
  h.group = group;
  h.seq = seq;
  h.aux = aux;
  send_msg(to, &h, data, bytes);
}

static void free_mail(mail *m) {
  zmq_msg_close(&m->body);
  free(m);
}

static tcp_group *find_group(int id) {
  pthread_mutex_lock(&S.groups_lock);
  tcp_group *g = S.groups;
  while (g && g->id != id) g = g->next;
  pthread_mutex_unlock(&S.groups_lock);
  return g;
}

static void handle(mail *m) {
  int src = m->h.src;
  if (src < 0 || src >= S.size || src == S.rank) {
    free_mail(m);
    return;
  }
  S.peers[src].last_heard = em_clock_monotonic();
  switch (m->h.kind) {
    case TCP_MSG_COLL:
    case TCP_MSG_P2P: {
      mail **p = &S.mailbox; /* appended: arrival order is kept for point-to-point matching */
      while (*p) p = &(*p)->next;
      m->next = NULL;
      *p = m;
      return;
    }
    case TCP_MSG_BYE: S.peers[src].bye = 1; break;
    case TCP_MSG_ABORT: {
      size_t n = zmq_msg_size(&m->body);
      char why[EM_DIST_MSG];
      snprintf(why, sizeof why, "%.*s", (int)(n < sizeof why ? n : sizeof why - 1),
               (const char *)zmq_msg_data(&m->body));
      fprintf(stderr, "ember.dist: rank %d ended the job (exit status %lld)%s%s; rank %d exits too\n", src,
              (long long)m->h.aux, why[0] ? ": " : "", why, S.rank);
      fflush(stderr);
      _exit(m->h.aux > 0 && m->h.aux < 256 ? (int)m->h.aux : 1);
    }
    case TCP_MSG_QUERY: {
      tcp_group *g = find_group(m->h.group);
      int64_t posted = g ? atomic_load(&g->posted_seq) : -1, done = g ? atomic_load(&g->completed_seq) : -1;
      send_simple(src, TCP_MSG_ANSWER, m->h.group, posted, S.finished ? -2 : done, NULL, 0);
      break;
    }
    case TCP_MSG_ANSWER:
      if (S.answered && m->h.group == S.diag_gid) {
        S.answered[src] = 1;
        S.answer_posted[src] = m->h.seq;
        S.answer_completed[src] = m->h.aux;
      }
      break;
    case TCP_MSG_MESH_HELLO:
      if (!S.mesh_seen[src]) {
        S.mesh_seen[src] = 1;
        pthread_mutex_lock(&S.lock);
        if (--S.mesh_missing == 0) pthread_cond_broadcast(&S.cond);
        pthread_mutex_unlock(&S.lock);
      }
      break;
    default: break;
  }
  free_mail(m);
}

/* Reads everything that has arrived; 1 if anything did. */
static int drain_pull(void) {
  int any = 0;
  for (int i = 0; i < 1024; i++) {
    zmq_msg_t hm;
    zmq_msg_init(&hm);
    if (zmq_msg_recv(&hm, S.pull, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&hm);
      return any;
    }
    any = 1;
    mail *m = malloc(sizeof *m);
    int valid = m && zmq_msg_size(&hm) == sizeof(tcp_hdr);
    if (valid) {
      memcpy(&m->h, zmq_msg_data(&hm), sizeof m->h);
      valid = m->h.magic == TCP_MAGIC;
    }
    int more = zmq_msg_more(&hm);
    zmq_msg_close(&hm);
    if (m) zmq_msg_init(&m->body);
    if (more) {
      /* the other parts of a multipart message are already here */
      if (m) zmq_msg_recv(&m->body, S.pull, 0);
      while (m && zmq_msg_more(&m->body)) {
        zmq_msg_t extra;
        zmq_msg_init(&extra);
        zmq_msg_recv(&extra, S.pull, 0);
        int again = zmq_msg_more(&extra);
        zmq_msg_close(&extra);
        if (!again) break;
      }
    }
    if (!m) continue;
    if (!valid) {
      free_mail(m);
      continue;
    }
    handle(m);
  }
  return any;
}

static void drain_monitor(peer *p) {
  for (;;) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, p->monitor, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&m);
      return;
    }
    uint16_t ev = 0;
    if (zmq_msg_size(&m) >= 2) memcpy(&ev, zmq_msg_data(&m), 2);
    while (zmq_msg_more(&m)) {
      zmq_msg_close(&m);
      zmq_msg_init(&m);
      if (zmq_msg_recv(&m, p->monitor, 0) < 0) break;
    }
    zmq_msg_close(&m);
    if (ev == ZMQ_EVENT_DISCONNECTED && p->closed_at == 0) p->closed_at = em_clock_monotonic();
    if (ev == ZMQ_EVENT_CONNECTED) p->closed_at = 0;
  }
}

/* ---------------------------------------------------------------- works */

static const em_tensor *main_tensor(const em_dist_work *w) { return w->in ? w->in : w->out; }
static int64_t numel_of(const em_dist_work *w) { return main_tensor(w) ? em_tensor_numel(main_tensor(w)) : 0; }
static em_dtype dtype_of(const em_dist_work *w) { return main_tensor(w) ? main_tensor(w)->dtype : EM_UINT8; }
static char *bytes_of(const em_tensor *t) { return t && em_tensor_numel(t) ? (char *)em_tensor_data(t) : NULL; }
static int64_t block_lo(int64_t n, int k, int size) { return n * k / size; }
static int is_small(const em_dist_work *w) {
  return numel_of(w) * (int64_t)em_dtype_size(dtype_of(w)) <= SMALL_BYTES || numel_of(w) < w->group->size;
}

static void send_coll(tcp_op *op, int to_group_rank, int phase, const void *data, size_t bytes) {
  em_dist_work *w = op->w;
  tcp_hdr h;
  memset(&h, 0, sizeof h);
  h.kind = TCP_MSG_COLL;
  h.op = (uint8_t)w->kind;
  h.dtype = (uint8_t)dtype_of(w);
  h.phase = (uint8_t)phase;
  h.group = op->g->id;
  h.seq = w->seq;
  h.total = numel_of(w);
  send_msg(op->g->world_ranks[to_group_rank], &h, data, bytes);
}

static void unlink_op(tcp_op *op) {
  for (tcp_op **p = &S.ops; *p; p = &(*p)->next)
    if (*p == op) {
      *p = op->next;
      break;
    }
  if (op->got)
    for (int k = 0; k < op->g->size; k++)
      if (op->got[k]) free_mail(op->got[k]);
  free(op->got);
  free(op);
}

static void finish_op(tcp_op *op, em_status st, const char *why) {
  em_dist_work *w = op->w;
  tcp_group *g = op->g;
  int64_t seq = w->seq;
  unlink_op(op);
  if (st) {
    char desc[256], msg[EM_DIST_MSG];
    emp_dist_describe(w, desc, sizeof desc);
    snprintf(msg, sizeof msg, "%s: %s", desc, why);
    emp_dist_work_done(w, st, msg);
  } else {
    if (w->redop == EM_DIST_AVG && (w->kind == EM_DIST_OP_REDUCE_SCATTER))
      emp_dist_scale(bytes_of(w->out), em_tensor_numel(w->out), w->out->dtype, 1.0 / g->size);
    emp_dist_work_done(w, EM_OK, NULL);
  }
  if (seq) atomic_store(&g->completed_seq, seq);
}

/* Does op's current phase wait for a message from group rank k (one not yet arrived)? */
static int waits_for(const tcp_op *op, int k) {
  const em_dist_work *w = op->w;
  const tcp_group *g = op->g;
  if (k == g->rank) return 0;
  int wk = g->world_ranks[k];
  if (w->kind == EM_DIST_OP_SEND) return 0;
  if (w->kind == EM_DIST_OP_RECV) {
    if (k != w->peer) return 0;
    for (mail *m = S.mailbox; m; m = m->next)
      if (m->h.kind == TCP_MSG_P2P && m->h.group == g->id && m->h.src == wk && m->h.seq == w->tag) return 0;
    return 1;
  }
  if (w->kind == EM_DIST_OP_BROADCAST && (g->rank == w->peer || k != w->peer)) return 0;
  if (op->got && op->got[k]) return 0;
  for (mail *m = S.mailbox; m; m = m->next)
    if (m->h.kind == TCP_MSG_COLL && m->h.group == g->id && m->h.seq == w->seq && m->h.phase == op->phase &&
        m->h.src == wk)
      return 0;
  return 1;
}

/* Moves this phase's arrived messages into op->got; 1 when every sender's is there.
 * A message that does not match (another collective at this number, another size or
 * dtype) fails op: *why says how. */
static int collect(tcp_op *op, int only, char *why, size_t cap) {
  const em_dist_work *w = op->w;
  const tcp_group *g = op->g;
  for (mail **p = &S.mailbox; *p;) {
    mail *m = *p;
    int k = m->h.src >= 0 && m->h.src < S.size ? g->group_rank[m->h.src] : -1;
    if (m->h.kind != TCP_MSG_COLL || m->h.group != g->id || m->h.seq != w->seq || m->h.phase != op->phase || k < 0 ||
        op->got[k]) {
      p = &m->next;
      continue;
    }
    *p = m->next;
    op->got[k] = m;
    char who[64];
    rank_text(who, sizeof who, g, k);
    if (m->h.op != w->kind) {
      snprintf(why, cap,
               "%s called %s as its collective #%lld on this group (the ranks called collectives in a "
               "different order)",
               who, emp_dist_op_name((em_dist_opkind)m->h.op), (long long)w->seq);
      return -1;
    }
    if (w->kind != EM_DIST_OP_BARRIER && (m->h.dtype != dtype_of(w) || m->h.total != numel_of(w))) {
      snprintf(why, cap,
               "%s passed %lld elements of %s, this rank %lld elements of %s (every rank must pass the "
               "same size and dtype)",
               who, (long long)m->h.total, em_dtype_name((em_dtype)m->h.dtype), (long long)numel_of(w),
               em_dtype_name(dtype_of(w)));
      return -1;
    }
  }
  for (int k = 0; k < g->size; k++)
    if (k != g->rank && (only < 0 || k == only) && !op->got[k]) return 0;
  return 1;
}

static const void *got_data(tcp_op *op, int k) { return zmq_msg_data(&op->got[k]->body); }

static void release_got(tcp_op *op) {
  for (int k = 0; k < op->g->size; k++)
    if (op->got[k]) {
      free_mail(op->got[k]);
      op->got[k] = NULL;
    }
}

/* Checks that every message of this phase holds `bytes(k)` bytes. */
static int sizes_ok(tcp_op *op, int64_t (*bytes)(tcp_op *, int), char *why, size_t cap) {
  for (int k = 0; k < op->g->size; k++) {
    if (!op->got[k]) continue;
    int64_t want = bytes(op, k), got = (int64_t)zmq_msg_size(&op->got[k]->body);
    if (got != want) {
      char who[64];
      rank_text(who, sizeof who, op->g, k);
      snprintf(why, cap, "%s sent %lld bytes in phase %d, expected %lld", who, (long long)got, op->phase,
               (long long)want);
      return 0;
    }
  }
  return 1;
}

static int64_t full_bytes(tcp_op *op, int k) {
  (void)k;
  return numel_of(op->w) * (int64_t)em_dtype_size(dtype_of(op->w));
}
/* reduce-scatter phase: everyone sends the receiver's block (this rank's) */
static int64_t my_block_bytes(tcp_op *op, int k) {
  (void)k;
  int64_t n = numel_of(op->w);
  int s = op->g->size, r = op->g->rank;
  return (block_lo(n, r + 1, s) - block_lo(n, r, s)) * (int64_t)em_dtype_size(dtype_of(op->w));
}
static int64_t their_block_bytes(tcp_op *op, int k) {
  int64_t n = numel_of(op->w);
  int s = op->g->size;
  return (block_lo(n, k + 1, s) - block_lo(n, k, s)) * (int64_t)em_dtype_size(dtype_of(op->w));
}
static int64_t rs_block_bytes(tcp_op *op, int k) {
  (void)k;
  return em_tensor_numel(op->w->out) * (int64_t)em_dtype_size(dtype_of(op->w));
}

/* acc = contribution of rank 0 (op) rank 1 (op) ...; mine is this rank's own. */
static void combine_in_order(tcp_op *op, void *acc, const void *mine, int64_t n) {
  em_dist_work *w = op->w;
  size_t bytes = (size_t)n * em_dtype_size(dtype_of(w));
  for (int k = 0; k < op->g->size; k++) {
    const void *x = k == op->g->rank ? mine : got_data(op, k);
    if (k == 0) {
      if (bytes && acc != x) memcpy(acc, x, bytes);
    } else if (n) {
      dist_combine(acc, x, n, dtype_of(w), w->redop);
    }
  }
}

/* Runs op as far as the messages that have arrived allow; 1 when it finished. */
static int advance(tcp_op *op) {
  em_dist_work *w = op->w;
  tcp_group *g = op->g;
  int n = g->size, r = g->rank;
  char why[400] = "";
  size_t es = em_dtype_size(dtype_of(w));
  int64_t total = numel_of(w);
  int c;
  switch (w->kind) {
    case EM_DIST_OP_RECV: {
      int wk = g->world_ranks[w->peer];
      for (mail **p = &S.mailbox; *p; p = &(*p)->next) {
        mail *m = *p;
        if (m->h.kind != TCP_MSG_P2P || m->h.group != g->id || m->h.src != wk || m->h.seq != w->tag) continue;
        *p = m->next;
        int64_t got = (int64_t)zmq_msg_size(&m->body), want = total * (int64_t)es;
        if (got != want || m->h.dtype != dtype_of(w)) {
          snprintf(why, sizeof why, "expected %lld elements of %s, the sender sent %lld elements of %s",
                   (long long)total, em_dtype_name(dtype_of(w)),
                   (long long)(got / (int64_t)em_dtype_size((em_dtype)m->h.dtype)),
                   em_dtype_name((em_dtype)m->h.dtype));
          free_mail(m);
          finish_op(op, EM_ERR_SHAPE, why);
          return 1;
        }
        if (want) memcpy(bytes_of(w->out), zmq_msg_data(&m->body), (size_t)want);
        free_mail(m);
        finish_op(op, EM_OK, NULL);
        return 1;
      }
      return 0;
    }
    case EM_DIST_OP_BARRIER:
      if ((c = collect(op, -1, why, sizeof why)) == 0) return 0;
      break;
    case EM_DIST_OP_BROADCAST:
      if (r == w->peer) break;
      if ((c = collect(op, w->peer, why, sizeof why)) == 0) return 0;
      if (c > 0 && !sizes_ok(op, full_bytes, why, sizeof why)) c = -1;
      if (c > 0 && total) memcpy(bytes_of(w->out), got_data(op, w->peer), (size_t)total * es);
      break;
    case EM_DIST_OP_ALL_GATHER:
      if ((c = collect(op, -1, why, sizeof why)) == 0) return 0;
      if (c > 0 && !sizes_ok(op, full_bytes, why, sizeof why)) c = -1;
      if (c > 0 && total)
        for (int k = 0; k < n; k++)
          if (k != r) memcpy(bytes_of(w->out) + (size_t)k * total * es, got_data(op, k), (size_t)total * es);
      break;
    case EM_DIST_OP_REDUCE_SCATTER: {
      if ((c = collect(op, -1, why, sizeof why)) == 0) return 0;
      if (c > 0 && !sizes_ok(op, rs_block_bytes, why, sizeof why)) c = -1;
      int64_t m = em_tensor_numel(w->out);
      if (c > 0) combine_in_order(op, bytes_of(w->out), bytes_of(w->in) + (size_t)r * m * es, m);
      break;
    }
    case EM_DIST_OP_ALL_REDUCE: {
      char *buf = bytes_of(w->out);
      if (is_small(w)) {
        if ((c = collect(op, -1, why, sizeof why)) == 0) return 0;
        if (c > 0 && !sizes_ok(op, full_bytes, why, sizeof why)) c = -1;
        if (c > 0 && total) {
          void *acc = malloc((size_t)total * es);
          if (!acc) {
            finish_op(op, EM_ERR_MEMORY, "out of memory");
            return 1;
          }
          combine_in_order(op, acc, buf, total);
          if (w->redop == EM_DIST_AVG) emp_dist_scale(acc, total, dtype_of(w), 1.0 / n);
          memcpy(buf, acc, (size_t)total * es);
          free(acc);
        }
        break;
      }
      if (op->phase == 0) {
        if ((c = collect(op, -1, why, sizeof why)) == 0) return 0;
        if (c > 0 && !sizes_ok(op, my_block_bytes, why, sizeof why)) c = -1;
        if (c < 0) break;
        int64_t lo = block_lo(total, r, n), m = block_lo(total, r + 1, n) - lo;
        void *acc = malloc((size_t)m * es + 1);
        if (!acc) {
          finish_op(op, EM_ERR_MEMORY, "out of memory");
          return 1;
        }
        combine_in_order(op, acc, buf + (size_t)lo * es, m);
        if (w->redop == EM_DIST_AVG) emp_dist_scale(acc, m, dtype_of(w), 1.0 / n);
        memcpy(buf + (size_t)lo * es, acc, (size_t)m * es);
        free(acc);
        release_got(op);
        op->phase = 1;
        for (int k = 0; k < n; k++)
          if (k != r) send_coll(op, k, 1, buf + (size_t)lo * es, (size_t)m * es);
      }
      if ((c = collect(op, -1, why, sizeof why)) == 0) return 0;
      if (c > 0 && !sizes_ok(op, their_block_bytes, why, sizeof why)) c = -1;
      if (c > 0)
        for (int k = 0; k < n; k++)
          if (k != r) {
            int64_t lo = block_lo(total, k, n), m = block_lo(total, k + 1, n) - lo;
            if (m) memcpy(buf + (size_t)lo * es, got_data(op, k), (size_t)m * es);
          }
      break;
    }
    default: break;
  }
  if (why[0]) finish_op(op, EM_ERR_RUNTIME, why);
  else finish_op(op, EM_OK, NULL);
  return 1;
}

/* Sends op's first messages; 1 if it finished at once. */
static int start(tcp_op *op) {
  em_dist_work *w = op->w;
  tcp_group *g = op->g;
  int n = g->size, r = g->rank;
  size_t es = em_dtype_size(dtype_of(w));
  int64_t total = numel_of(w);
  w->started_at = em_clock_monotonic();
  switch (w->kind) {
    case EM_DIST_OP_SEND: {
      tcp_hdr h;
      memset(&h, 0, sizeof h);
      h.kind = TCP_MSG_P2P;
      h.dtype = (uint8_t)dtype_of(w);
      h.group = g->id;
      h.seq = w->tag;
      h.total = total;
      send_msg(g->world_ranks[w->peer], &h, bytes_of(w->in), (size_t)total * es);
      finish_op(op, EM_OK, NULL);
      return 1;
    }
    case EM_DIST_OP_RECV: break;
    case EM_DIST_OP_BARRIER:
      for (int k = 0; k < n; k++)
        if (k != r) send_coll(op, k, 0, NULL, 0);
      break;
    case EM_DIST_OP_BROADCAST:
      if (r == w->peer)
        for (int k = 0; k < n; k++)
          if (k != r) send_coll(op, k, 0, bytes_of(w->in), (size_t)total * es);
      break;
    case EM_DIST_OP_ALL_GATHER:
      for (int k = 0; k < n; k++)
        if (k != r) send_coll(op, k, 0, bytes_of(w->in), (size_t)total * es);
      if (total) memcpy(bytes_of(w->out) + (size_t)r * total * es, bytes_of(w->in), (size_t)total * es);
      break;
    case EM_DIST_OP_REDUCE_SCATTER: {
      int64_t m = em_tensor_numel(w->out);
      for (int k = 0; k < n; k++)
        if (k != r) send_coll(op, k, 0, m ? bytes_of(w->in) + (size_t)k * m * es : NULL, (size_t)m * es);
      break;
    }
    case EM_DIST_OP_ALL_REDUCE:
      for (int k = 0; k < n; k++) {
        if (k == r) continue;
        if (is_small(w)) {
          send_coll(op, k, 0, bytes_of(w->in), (size_t)total * es);
        } else {
          int64_t lo = block_lo(total, k, n), m = block_lo(total, k + 1, n) - lo;
          send_coll(op, k, 0, bytes_of(w->in) + (size_t)lo * es, (size_t)m * es);
        }
      }
      break;
    default: break;
  }
  return advance(op);
}

/* ---------------------------------------------------------------- ending the job */

static void close_all(int linger_ms) {
  for (int p = 0; p < S.size; p++) {
    if (S.peers[p].push) {
      /* a peer that has left needs nothing more (and would hold the close for the linger) */
      int linger = S.peers[p].bye || S.peers[p].closed_at > 0 ? 0 : linger_ms;
      zmq_setsockopt(S.peers[p].push, ZMQ_LINGER, &linger, sizeof linger);
      zmq_socket_monitor(S.peers[p].push, NULL, 0);
      zmq_close(S.peers[p].push);
      S.peers[p].push = NULL;
    }
    if (S.peers[p].monitor) {
      int zero = 0;
      zmq_setsockopt(S.peers[p].monitor, ZMQ_LINGER, &zero, sizeof zero);
      zmq_close(S.peers[p].monitor);
      S.peers[p].monitor = NULL;
    }
  }
  int zero = 0;
  if (S.pull) zmq_setsockopt(S.pull, ZMQ_LINGER, &zero, sizeof zero), zmq_close(S.pull), S.pull = NULL;
  if (S.rendezvous)
    zmq_setsockopt(S.rendezvous, ZMQ_LINGER, &zero, sizeof zero), zmq_close(S.rendezvous), S.rendezvous = NULL;
  if (S.ctx) zmq_ctx_term(S.ctx), S.ctx = NULL;
}

/* Prints msg, tells every peer to end (with msg and status) and exits. Thread only. */
static void abort_now(const char *msg, int status) {
  if (msg && *msg) {
    fprintf(stderr, "%s\n", msg);
    fflush(stderr);
  }
  for (int p = 0; p < S.size; p++)
    if (p != S.rank && !S.peers[p].bye && !(S.peers[p].closed_at > 0))
      send_simple(p, TCP_MSG_ABORT, 0, 0, status, msg ? msg : "", msg ? strlen(msg) : 0);
  close_all(ABORT_LINGER_MS);
  _exit(status);
}

/* Asks the ranks in `ask` (world ranks, -1 ended) of g how far they got on g, for up to
 * QUERY_GRACE_S; answers land in S.answered/answer_*. */
static void ask_progress(const tcp_group *g, int64_t seq, const int *ask, int n) {
  memset(S.answered, 0, sizeof(int) * S.size);
  S.diag_gid = g->id;
  int left = 0;
  for (int i = 0; i < n; i++) {
    int wr = ask[i];
    if (S.peers[wr].bye || S.peers[wr].closed_at > 0) continue;
    send_simple(wr, TCP_MSG_QUERY, g->id, seq, 0, NULL, 0);
    left++;
  }
  double until = em_clock_monotonic() + QUERY_GRACE_S;
  while (left > 0 && em_clock_monotonic() < until) {
    zmq_pollitem_t it = {S.pull, 0, ZMQ_POLLIN, 0};
    zmq_poll(&it, 1, 10);
    drain_pull();
    left = 0;
    for (int i = 0; i < n; i++)
      if (!S.answered[ask[i]] && !S.peers[ask[i]].bye && !(S.peers[ask[i]].closed_at > 0)) left++;
  }
}

/* w on g passed its deadline (op: the backend's own work for w, or NULL for one run
 * outside the backend): which ranks it waits for and why; ends the job. */
static void report_timeout(tcp_op *op, em_dist_work *w, tcp_group *g) __attribute__((noreturn));
static void report_timeout(tcp_op *op, em_dist_work *w, tcp_group *g) {
  double now = em_clock_monotonic();
  char what[320];
  emp_dist_describe(w, what, sizeof what);
  int p2p = w->kind == EM_DIST_OP_SEND || w->kind == EM_DIST_OP_RECV;
  int *ask = malloc(sizeof(int) * g->size), *gr = malloc(sizeof(int) * g->size), n = 0;
  for (int k = 0; ask && gr && k < g->size; k++) {
    if (k == g->rank) continue;
    if (op ? !waits_for(op, k) : (p2p && k != w->peer)) continue;
    gr[n] = k;
    ask[n++] = g->world_ranks[k];
  }
  if (ask && gr) ask_progress(g, w->seq, ask, n);
  char msg[2048];
  int len =
      snprintf(msg, sizeof msg, "ember.dist: %s: timed out after %.3g s on rank %d", what, now - w->posted_at, g->rank);
  int listed = 0;
  for (int i = 0; i < n && len < (int)sizeof msg - 300; i++) {
    int wr = ask[i];
    if (!op && !p2p && S.answered[wr] && S.answer_posted[wr] >= w->seq) continue; /* it got there */
    len += snprintf(msg + len, sizeof msg - len, "%s", listed++ ? "; " : ", waiting for ");
    len += rank_text(msg + len, sizeof msg - len, g, gr[i]);
    const char *state;
    char buf[200];
    if (S.peers[wr].bye) state = " (it has finished and left the job)";
    else if (S.peers[wr].closed_at > 0) state = " (its connection closed: dead)";
    else if (!S.answered[wr]) state = " (no answer: dead, stopped or hung)";
    else if (S.answer_completed[wr] == -2) state = " (it has finished the script and is leaving)";
    else if (p2p) {
      snprintf(buf, sizeof buf, " (alive, its last collective on this group is #%lld, but no matching %s)",
               (long long)S.answer_posted[wr], w->kind == EM_DIST_OP_RECV ? "send arrived" : "receive was posted");
      state = buf;
    } else if (S.answer_posted[wr] < w->seq) {
      snprintf(buf, sizeof buf, " (alive, but has not reached it: its last collective on this group is #%lld)",
               (long long)S.answer_posted[wr]);
      state = buf;
    } else {
      snprintf(buf, sizeof buf,
               " (alive and past it: its last collective on this group is #%lld, but its data has "
               "not arrived)",
               (long long)S.answer_posted[wr]);
      state = buf;
    }
    len += snprintf(msg + len, sizeof msg - len, "%s", state);
  }
  if (!listed && n > 0)
    len +=
        snprintf(msg + len, sizeof msg - len,
                 ": every rank has reached it, so the ranks called collectives that do not match (a different order, "
                 "or other sizes or dtypes on some rank)");
  snprintf(msg + len, sizeof msg - len, "; aborting the job");
  abort_now(msg, EM_DIST_EXIT_TIMEOUT);
}

/* The first started work that waits for world rank wr, with its group rank in *k. */
static tcp_op *op_waiting_for(int wr, int *k) {
  for (tcp_op *op = S.ops; op; op = op->next) {
    int gk = op->g->group_rank[wr];
    if (gk >= 0 && waits_for(op, gk)) {
      *k = gk;
      return op;
    }
  }
  return NULL;
}

/* Peers that are gone, works that wait for a rank that has left, deadlines. */
static void check_health(double now) {
  for (int p = 0; p < S.size; p++) {
    if (p == S.rank) continue;
    peer *pe = &S.peers[p];
    const char *why = NULL;
    if (pe->bye) {
      int k;
      tcp_op *op = op_waiting_for(p, &k);
      if (!op) continue;
      char what[320], who[64], msg[800];
      emp_dist_describe(op->w, what, sizeof what);
      rank_text(who, sizeof who, op->g, k);
      snprintf(msg, sizeof msg,
               "ember.dist: %s: on rank %d, waiting for %s, which has finished and left the job "
               "without taking part (the ranks called different collectives); aborting the job",
               what, op->g->rank, who);
      abort_now(msg, EM_DIST_EXIT_TIMEOUT);
    }
    if (pe->closed_at > 0 && now - pe->closed_at > LOST_GRACE_S)
      why = "its connection closed without a goodbye: killed or crashed";
    else if (S.mesh_seen[p] && now - pe->last_heard > S.hb_timeout) why = "no heartbeat: stopped, hung or unreachable";
    if (!why) continue;
    char msg[1200];
    int k;
    tcp_op *op = op_waiting_for(p, &k);
    if (op) {
      char what[320], who[64];
      emp_dist_describe(op->w, what, sizeof what);
      rank_text(who, sizeof who, op->g, k);
      snprintf(msg, sizeof msg,
               "ember.dist: %s: rank %d lost %s (%s, %.3g s ago) while waiting for it; aborting the job", what,
               op->g->rank, who, why, now - (pe->closed_at > 0 ? pe->closed_at : pe->last_heard));
    } else {
      /* a collective run outside the backend (shared memory) is known by its number only */
      char busy[200] = "";
      pthread_mutex_lock(&S.groups_lock);
      for (tcp_group *g = S.groups; g && !busy[0]; g = g->next)
        if (g->rank >= 0 && g->group_rank[p] >= 0 && atomic_load(&g->posted_seq) > atomic_load(&g->completed_seq)) {
          char name[48];
          if (g->id) snprintf(name, sizeof name, "group %d", g->id);
          else snprintf(name, sizeof name, "the world group");
          snprintf(busy, sizeof busy, " while collective #%lld on %s is in progress",
                   (long long)atomic_load(&g->posted_seq), name);
        }
      pthread_mutex_unlock(&S.groups_lock);
      snprintf(msg, sizeof msg, "ember.dist: rank %d lost rank %d (%s)%s; the job cannot go on; aborting the job",
               S.rank, p, why, busy);
    }
    abort_now(msg, EM_DIST_EXIT_TIMEOUT);
  }
  for (tcp_op *op = S.ops; op; op = op->next)
    if (now > atomic_load(&op->w->deadline)) report_timeout(op, op->w, op->g);
}

/* ---------------------------------------------------------------- the loop */

static int take_tasks(void) {
  pthread_mutex_lock(&S.lock);
  task *t = S.head;
  int any = t != NULL;
  S.head = S.tail = NULL;
  pthread_mutex_unlock(&S.lock);
  while (t) {
    task *next = t->next;
    tcp_op *op = calloc(1, sizeof *op);
    if (op) op->got = calloc(t->g->size, sizeof(mail *));
    if (!op || !op->got) {
      free(op);
      emp_dist_work_done(t->w, EM_ERR_MEMORY, "tcp backend: out of memory");
    } else {
      op->w = t->w;
      op->g = t->g;
      tcp_op **p = &S.ops; /* posting order */
      while (*p) p = &(*p)->next;
      *p = op;
      start(op);
    }
    free(t);
    t = next;
  }
  return any;
}

static void progress_ops(void) {
  for (tcp_op *op = S.ops; op;) {
    tcp_op *next = op->next; /* advance frees op when it finishes */
    advance(op);
    op = next;
  }
}

void dist_tcp_rendezvous_refuse(void *router, const char *master, int size);

static void *comm_main(void *arg) {
  (void)arg;
  int n_items = 2 + S.size + 1;
  zmq_pollitem_t *items = calloc(n_items, sizeof *items);
  int *item_peer = calloc(n_items, sizeof(int));
  for (int p = 0; p < S.size; p++)
    if (p != S.rank) send_simple(p, TCP_MSG_MESH_HELLO, 0, 0, 0, NULL, 0);
  S.next_heartbeat = em_clock_monotonic() + HEARTBEAT_S;
  for (;;) {
    int ni = 0;
    items[ni++] = (zmq_pollitem_t){S.pull, 0, ZMQ_POLLIN, 0};
    items[ni++] = (zmq_pollitem_t){NULL, S.efd, ZMQ_POLLIN, 0};
    for (int p = 0; p < S.size; p++)
      if (S.peers[p].monitor) item_peer[ni] = p, items[ni++] = (zmq_pollitem_t){S.peers[p].monitor, 0, ZMQ_POLLIN, 0};
    int rdv_item = -1;
    if (S.rendezvous) rdv_item = ni, items[ni++] = (zmq_pollitem_t){S.rendezvous, 0, ZMQ_POLLIN, 0};
    zmq_poll(items, ni, POLL_MS);
    if (items[1].revents & ZMQ_POLLIN) {
      uint64_t v;
      if (read(S.efd, &v, sizeof v) < 0) { /* nothing to read: another round drained it */
      }
    }
    pthread_mutex_lock(&S.lock);
    int stop_now = S.stop_now, stopping = S.stopping;
    em_dist_work *dw = S.diag_work;
    tcp_group *dg = S.diag_group;
    pthread_mutex_unlock(&S.lock);
    if (atomic_load(&S.abort_requested)) abort_now(S.abort_msg, S.abort_status);
    if (stop_now) break;
    int any = drain_pull();
    for (int i = 2; i < ni; i++)
      if (i != rdv_item && (items[i].revents & ZMQ_POLLIN)) drain_monitor(&S.peers[item_peer[i]]);
    if (rdv_item >= 0 && (items[rdv_item].revents & ZMQ_POLLIN))
      dist_tcp_rendezvous_refuse(S.rendezvous, S.master, S.size);
    if (take_tasks()) any = 1;
    if (any && S.ops) progress_ops();
    double now = em_clock_monotonic();
    if (now >= S.next_heartbeat) {
      for (int p = 0; p < S.size; p++)
        if (p != S.rank) send_simple(p, TCP_MSG_HEARTBEAT, 0, 0, 0, NULL, 0);
      S.next_heartbeat = now + HEARTBEAT_S;
    }
    if (dw) report_timeout(NULL, dw, dg);
    check_health(now);
    if (stopping && !S.ops && !S.head) break;
  }
  free(items);
  free(item_peer);
  /* a clean end: every work finished; the peers learn that this rank leaves on purpose */
  S.finished = 1;
  for (int p = 0; p < S.size; p++)
    if (p != S.rank) {
      if (S.stop_now == 2) send_simple(p, TCP_MSG_ABORT, 0, 0, 1, MESH_FAILED, strlen(MESH_FAILED));
      else send_simple(p, TCP_MSG_BYE, 0, 0, 0, NULL, 0);
    }
  /* Peers that leave at the same moment: learn it (their goodbye, or their connection
   * closing) so as not to linger on messages nobody will read. The rest get up to
   * CLOSE_LINGER_MS to take what is still queued for them (their ZeroMQ threads read it
   * whatever their scripts are doing). */
  double until = em_clock_monotonic() + 0.1;
  for (;;) {
    int alive = 0;
    for (int p = 0; p < S.size; p++)
      if (p != S.rank && !S.peers[p].bye && !(S.peers[p].closed_at > 0)) alive++;
    if (!alive || em_clock_monotonic() > until) break;
    zmq_pollitem_t it = {S.pull, 0, ZMQ_POLLIN, 0};
    zmq_poll(&it, 1, 5);
    drain_pull();
    for (int p = 0; p < S.size; p++)
      if (S.peers[p].monitor) drain_monitor(&S.peers[p]);
  }
  close_all(CLOSE_LINGER_MS);
  return NULL;
}

/* ---------------------------------------------------------------- user threads */

em_status dist_tcp_thread_start(tcp_start *s, double deadline, tcp_group **world) {
  S.ctx = s->ctx;
  S.pull = s->pull;
  S.rendezvous = s->rendezvous;
  S.rank = s->rank;
  S.size = s->size;
  S.timeout = s->timeout;
  snprintf(S.master, sizeof S.master, "%s", s->master);
  const char *hb = getenv("EMBER_DIST_HEARTBEAT_TIMEOUT");
  S.hb_timeout = hb && atof(hb) > 0 ? atof(hb) : 60.0;
  S.peers = calloc(S.size, sizeof *S.peers);
  S.mesh_seen = calloc(S.size, sizeof(int));
  S.answered = calloc(S.size, sizeof(int));
  S.answer_posted = calloc(S.size, sizeof(int64_t));
  S.answer_completed = calloc(S.size, sizeof(int64_t));
  tcp_group *g = calloc(1, sizeof *g);
  if (!S.peers || !S.mesh_seen || !S.answered || !S.answer_posted || !S.answer_completed || !g ||
      !(g->world_ranks = malloc(sizeof(int) * S.size)) || !(g->group_rank = malloc(sizeof(int) * S.size)))
    return em_set_error(EM_ERR_MEMORY, "dist.init: out of memory");
  g->id = 0, g->rank = S.rank, g->size = S.size;
  for (int i = 0; i < S.size; i++) g->world_ranks[i] = g->group_rank[i] = i;
  double now = em_clock_monotonic();
  char err[300] = "";
  for (int p = 0; p < S.size && !err[0]; p++) {
    S.peers[p].last_heard = now;
    if (p == S.rank) continue;
    void *push = zmq_socket(S.ctx, ZMQ_PUSH), *mon = zmq_socket(S.ctx, ZMQ_PAIR);
    int zero = 0;
    char mon_ep[64];
    snprintf(mon_ep, sizeof mon_ep, "inproc://ember-tcp-monitor-%d", p);
    if (!push || !mon || zmq_setsockopt(push, ZMQ_SNDHWM, &zero, sizeof zero) ||
        zmq_socket_monitor(push, mon_ep, ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECTED) || zmq_connect(mon, mon_ep) ||
        zmq_connect(push, s->endpoints[p]))
      snprintf(err, sizeof err, "connecting to rank %d at %s: %s", p, s->endpoints[p], zmq_strerror(zmq_errno()));
    S.peers[p].push = push;
    S.peers[p].monitor = mon;
  }
  if (err[0] || (S.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
    close_all(0);
    return em_set_error(EM_ERR_RUNTIME, "dist.init: %s", err[0] ? err : strerror(errno));
  }
  S.mesh_missing = S.size - 1;
  S.world = g;
  dist_tcp_register_group(g);
  if (pthread_create(&S.thread, NULL, comm_main, NULL)) {
    close_all(0);
    return em_set_error(EM_ERR_RUNTIME, "dist.init: cannot start the communication thread (%s)", strerror(errno));
  }
  atomic_store(&S.running, 1);
  /* every peer's data connection works before init returns */
  pthread_mutex_lock(&S.lock);
  while (S.mesh_missing > 0 && em_clock_monotonic() < deadline) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 20 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&S.cond, &S.lock, &ts);
  }
  int missing = S.mesh_missing;
  pthread_mutex_unlock(&S.lock);
  if (missing > 0) {
    char list[400];
    int len = 0, shown = 0;
    for (int p = 0; p < S.size && len < (int)sizeof list - 40; p++)
      if (p != S.rank && !S.mesh_seen[p])
        len += snprintf(list + len, sizeof list - len, "%s%d", shown++ ? ", " : "", p);
    pthread_mutex_lock(&S.lock);
    S.stop_now = 2; /* the peers must not wait for this rank either */
    pthread_mutex_unlock(&S.lock);
    uint64_t one = 1;
    if (write(S.efd, &one, sizeof one) < 0) { /* the thread polls anyway */
    }
    pthread_join(S.thread, NULL);
    atomic_store(&S.running, 0);
    return em_set_error(EM_ERR_RUNTIME,
                        "dist.init: rank %d: the rendezvous at %s succeeded, but rank%s %s did not answer over "
                        "its data connection within %.3g s (can the ranks reach each other's addresses?)",
                        S.rank, S.master, missing > 1 ? "s" : "", list, S.timeout);
  }
  *world = g;
  return EM_OK;
}

em_status dist_tcp_submit(tcp_group *g, em_dist_work *w) {
  task *t = malloc(sizeof *t);
  if (!t) return em_set_error(EM_ERR_MEMORY, "%s: out of memory", emp_dist_op_name(w->kind));
  t->w = w;
  t->g = g;
  t->next = NULL;
  pthread_mutex_lock(&S.lock);
  if (!atomic_load(&S.running) || S.stopping || S.stop_now) {
    pthread_mutex_unlock(&S.lock);
    free(t);
    return em_set_error(EM_ERR_RUNTIME, "dist: the distributed world was finalized");
  }
  if (w->seq) atomic_store(&g->posted_seq, w->seq);
  if (S.tail) S.tail->next = t;
  else S.head = t;
  S.tail = t;
  pthread_mutex_unlock(&S.lock);
  uint64_t one = 1;
  if (write(S.efd, &one, sizeof one) < 0) { /* the counter is full: the thread is awake anyway */
  }
  return EM_OK;
}

static void wake(void) {
  uint64_t one = 1;
  if (S.efd >= 0 && write(S.efd, &one, sizeof one) < 0) { /* awake already */
  }
}

void dist_tcp_abort_job(const char *message, int exit_status) {
  if (!atomic_load(&S.running) || pthread_equal(pthread_self(), S.thread)) {
    if (message && *message) fprintf(stderr, "%s\n", message);
    if (atomic_load(&S.running)) abort_now(NULL, exit_status);
    _exit(exit_status);
  }
  pthread_mutex_lock(&S.lock);
  snprintf(S.abort_msg, sizeof S.abort_msg, "%s", message ? message : "");
  S.abort_status = exit_status;
  atomic_store(&S.abort_requested, 1);
  pthread_mutex_unlock(&S.lock);
  wake();
  sleep(5); /* the thread tells the peers and exits the process */
  _exit(exit_status);
}

void dist_tcp_report_timeout(void *group_impl, em_dist_work *w) {
  if (!atomic_load(&S.running)) {
    char what[320];
    emp_dist_describe(w, what, sizeof what);
    fprintf(stderr, "ember.dist: %s: timed out after %.3g s; aborting the job\n", what,
            em_clock_monotonic() - w->posted_at);
    _exit(EM_DIST_EXIT_TIMEOUT);
  }
  pthread_mutex_lock(&S.lock);
  S.diag_group = group_impl;
  S.diag_work = w;
  pthread_mutex_unlock(&S.lock);
  wake();
  sleep(10); /* the thread reports and exits the process */
  _exit(EM_DIST_EXIT_TIMEOUT);
}

void dist_tcp_thread_stop(int exit_status) {
  if (!atomic_load(&S.running)) return;
  if (exit_status) dist_tcp_abort_job(NULL, exit_status);
  pthread_mutex_lock(&S.lock);
  S.stopping = 1;
  pthread_mutex_unlock(&S.lock);
  wake();
  pthread_join(S.thread, NULL);
  atomic_store(&S.running, 0);
  close(S.efd);
  S.efd = -1;
}
#endif
