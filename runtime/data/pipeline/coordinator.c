/* pipeline/coordinator.c - the trainer's coordinator thread: readers, leases, credits, order.
 *
 * One loop polls the ROUTER socket, the ZAP socket (CurveZMQ client keys) and the eventfd
 * the consumer writes to. Each turn it handles what arrived, then, at most every 50 ms,
 * sends heartbeats, declares silent readers lost and reaps spawned readers that exited;
 * then it leases pending items while credits remain, and queues finished items for the
 * consumer in the planned order (or as they came).
 *
 * Items move PENDING -> LEASED -> READY -> QUEUED -> DONE. A lost reader's leases go back
 * to PENDING (re-issued, lowest item first); a second result for an item that is no longer
 * PENDING or LEASED is a duplicate and dropped. Credits: leases outstanding plus items
 * READY or QUEUED never exceed `prefetch`, so memory stays bounded whatever the speed of
 * the consumer. */
#ifdef EMBER_HAVE_ZMQ
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "core/core_impl.h"
#include "loader_impl.h"
#include "ring.h"
#include "coordinator_impl.h"


/* ---------------------------------------------------------------- small helpers */
void dp_wake(int efd) {
  uint64_t one = 1;
  ssize_t r = write(efd, &one, sizeof one);
  (void)r; /* a full counter (never in practice) still wakes the poller */
}

void dp_plan_free(dp_plan *p) {
  if (!p) return;
  free(p->ids);
  free(p->item_pos);
  free(p->item_len);
  p->ids = p->item_pos = p->item_len = NULL;
}

void dp_batch_destroy(em_loader_batch *b) {
  if (!b) return;
  for (int i = 0; i < b->ntensors; i++) em_tensor_release(b->tensors[i]);
  em_tensor_release(b->ids);
  free(b);
}


int dp_recv_frames(void *sock, frames *m) {
  m->n = 0;
  m->more = 0;
  for (;;) {
    zmq_msg_t tmp;
    zmq_msg_init(&tmp);
    if (zmq_msg_recv(&tmp, sock, m->n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
      zmq_msg_close(&tmp);
      return m->n > 0 ? 1 : 0;
    }
    int more = zmq_msg_more(&tmp);
    if (m->n < MAX_FRAMES) {
      m->f[m->n++] = tmp;
    } else {
      zmq_msg_close(&tmp);
      m->more = 1; /* too many frames: the message is malformed */
    }
    if (!more) return 1;
  }
}

void dp_close_frames(frames *m) {
  for (int i = 0; i < m->n; i++) zmq_msg_close(&m->f[i]);
  m->n = 0;
}

/* Sends [rid][hdr][extra (optional)][extra2 (optional)] to a reader; returns 0, or -1
 * with errno. */
static int send_to2(dp_coord *c, const dp_worker *w, const uint8_t *rid, size_t rid_len, const dp_hdr *h,
                    const void *extra, size_t extra_len, const void *extra2, size_t extra2_len) {
  if (w) rid = w->rid, rid_len = w->rid_len;
  if (zmq_send(c->router, rid, rid_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) return -1;
  if (zmq_send(c->router, h, sizeof *h, (extra ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) < 0) return -1;
  if (extra && zmq_send(c->router, extra, extra_len, (extra2 ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) < 0) return -1;
  if (extra && extra2 && zmq_send(c->router, extra2, extra2_len, ZMQ_DONTWAIT) < 0) return -1;
  return 0;
}

int dp_send_to(dp_coord *c, const dp_worker *w, const uint8_t *rid, size_t rid_len, const dp_hdr *h,
               const void *extra, size_t extra_len) {
  return send_to2(c, w, rid, rid_len, h, extra, extra_len, NULL, 0);
}

/* A LEASE or SLOTS through w's ring (pipeline/ring.c) rather than ZeroMQ, once the reader
 * has shown it took the welcome (a message it found in the ring before that would be for a
 * session it does not know, and dropped). A LEASE (`lease` 1) goes this way only while the
 * reader holds a lease it has not answered, so it is at work and takes it when it asks for
 * its next lease (a reader out of work looks at its ring for a while, then sleeps until
 * ZeroMQ wakes it); SLOTS always can: a reader looks at the ring before it finds itself
 * short of slots. Returns 1 when the message went. */
static int to_ring(dp_coord *c, dp_worker *w, int lease, int nframes, const void *const *data, const size_t *size) {
  if (!w->ring || !w->in_session || (lease && w->nleases == 0)) return 0;
  void *base = (void *)dp_shm_map_data(w->ring);
  uint64_t bytes = dp_shm_map_bytes(w->ring);
  if (lease && dp_ring_reader_waiting(base, bytes)) return 0; /* asleep: ZeroMQ wakes it */
  if (!dp_ring_put_lease(base, bytes, c->session, nframes, data, size)) return 0;
  if (lease && dp_ring_reader_waiting(base, bytes)) { /* it went to sleep just now: wake it */
    dp_hdr h;
    dp_hdr_init(&h, DP_HEARTBEAT);
    h.session = c->session;
    dp_send_to(c, w, NULL, 0, &h, NULL, 0);
  }
  return 1;
}

/* Shared-memory slots the trainer is done with go back to their reader in batches: on the
 * next LEASE to that reader (a third frame), or in a SLOTS message once several have
 * gathered or the reader has no lease left to carry them. A message per slot cost a
 * wake-up of both processes' I/O threads per batch. A reader short of slots meanwhile
 * sends inline (slower, never stuck). */
static void send_slots(dp_coord *c, dp_worker *w) {
  if (!w->nfree) return;
  dp_hdr h;
  dp_hdr_init(&h, DP_SLOTS);
  h.session = c->session;
  h.n = w->nfree;
  const void *data[2] = {&h, w->free_slots};
  size_t size[2] = {sizeof h, (size_t)w->nfree * sizeof(int64_t)};
  if (!to_ring(c, w, 0, 2, data, size)) dp_send_to(c, w, NULL, 0, &h, w->free_slots, size[1]);
  w->nfree = 0; /* a failed send: the reader is going; its slots go with it */
}

static void give_back_slot(dp_coord *c, dp_worker *w, int64_t slot) {
  if (w->nfree == DP_FREE_SLOTS_MAX) send_slots(c, w);
  w->free_slots[w->nfree++] = slot;
}

/* A slot whose tensors were all released: back to its reader, if that reader and its
 * arena are still the ones it came from. */
static void slot_returned(void *ctx, struct dp_shm_map *map, int64_t slot) {
  dp_coord *c = ctx;
  for (dp_worker *w = c->workers; w; w = w->next)
    if (w->shm == map) {
      w->lent--;
      give_back_slot(c, w, slot);
      return;
    }
}

/* End of a turn: slots no lease carried go now if enough have gathered, no lease is out to
 * that reader (the next lease may be far off), or its ring can take them (no wake-up to
 * save: slots kept back here were what left a reader short of slots, sending inline). */
static void flush_slots(dp_coord *c) {
  for (dp_worker *w = c->workers; w; w = w->next)
    if (w->nfree &&
        (w->nfree >= DP_FREE_SLOTS_BATCH || w->nleases == 0 || (w->ring && w->in_session)))
      send_slots(c, w);
}

dp_hdr dp_header(em_loader *l, int kind) {
  dp_hdr h;
  dp_hdr_init(&h, kind);
  h.session = l->c.session;
  return h;
}

/* ---------------------------------------------------------------- readers */
/* A reader has two connections: control ('R' + nonce: hello, heartbeats, leases) and data
 * ('D' + nonce: its batches, sent straight from its main thread). Both find it. */
static dp_worker *find_worker(dp_coord *c, const zmq_msg_t *rid) {
  size_t n = zmq_msg_size((zmq_msg_t *)rid);
  const uint8_t *p = zmq_msg_data((zmq_msg_t *)rid);
  for (dp_worker *w = c->workers; w; w = w->next)
    if (w->rid_len == n && n > 1 && (p[0] == w->rid[0] || (p[0] == 'D' && w->rid[0] == 'R')) &&
        !memcmp(w->rid + 1, p + 1, n - 1))
      return w;
  return NULL;
}

static void stats_workers(em_loader *l) {
  pthread_mutex_lock(&l->mu);
  l->stats.workers = l->c.nworkers;
  l->stats.leased = l->c.total_leases;
  pthread_mutex_unlock(&l->mu);
}

/* Forgets reader w: its leases go back to PENDING where no other lease is out. */
/* Stops reading w's ring: the reader sends its notices through ZeroMQ again. */
static void drop_ring(dp_coord *c, dp_worker *w) {
  if (!w->ring) return;
  dp_ring_detach((void *)dp_shm_map_data(w->ring), dp_shm_map_bytes(w->ring), c->session);
  dp_shm_map_release(w->ring);
  w->ring = NULL;
}

/* Reads the ring of a reader on this host that offers one, if no other trainer does, and
 * if the readers on this host leave a core to the trainer: polling the rings takes turns
 * with the readers otherwise (2 readers on 2 cores: 30% fewer batches at batch 128 than
 * with every notice through ZeroMQ). Decided at the hello, before the reader can use it. */
static void take_ring(em_loader *l, dp_worker *w, const dp_hello *hello) {
  dp_coord *c = &l->c;
  if (w->ring || !hello->ring[0] || !w->same_host || !l->o.shared_memory) return;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  pthread_mutex_lock(&l->mu);
  long here = l->nchildren; /* spawned readers (all started before any says hello) */
  pthread_mutex_unlock(&l->mu);
  for (const dp_worker *o = c->workers; o; o = o->next) here += o->same_host && !o->spawned;
  if (cpus > 0 && here + 1 > cpus) return;
  struct dp_shm_map *m = dp_shm_map_open(hello->ring, hello->pid, hello->ring_bytes, hello->ring_id);
  if (!m) return; /* not fatal: the notices come through ZeroMQ */
  if (dp_ring_attach((void *)dp_shm_map_data(m), dp_shm_map_bytes(m), c->session)) w->ring = m;
  else dp_shm_map_release(m);
}

void dp_lose_worker(em_loader *l, dp_worker *w, const char *why) {
  dp_coord *c = &l->c;
  int64_t reissued = 0;
  for (int i = 0; i < w->nleases; i++) {
    dp_lease_ref r = w->leases[i];
    c->total_leases--;
    if (r.plan != c->plan.id || !c->items) continue;
    dp_item *it = &c->items[r.item];
    it->leases--;
    if (it->state == IT_LEASED && it->leases == 0) {
      it->state = IT_PENDING;
      if (r.item < c->next_pending) c->next_pending = r.item;
      reissued++;
    }
  }
  for (dp_worker **p = &c->workers; *p; p = &(*p)->next)
    if (*p == w) {
      *p = w->next;
      break;
    }
  c->nworkers--;
  pthread_mutex_lock(&l->mu);
  l->stats.reissued += reissued;
  l->stats.workers_lost++;
  snprintf(l->last_loss, sizeof l->last_loss, "reader pid %lld on %s (%s) lost: %s", (long long)w->pid, w->host,
           w->name, why);
  pthread_mutex_unlock(&l->mu);
  if (w->shm) dp_shm_map_release(w->shm);
  drop_ring(c, w);
  free(w->leases);
  free(w);
  stats_workers(l);
}

static int is_child(em_loader *l, int64_t pid) {
  int found = 0;
  pthread_mutex_lock(&l->mu);
  for (int i = 0; i < l->nchildren; i++) found |= l->children[i] == pid;
  pthread_mutex_unlock(&l->mu);
  return found;
}

static void reject(em_loader *l, const zmq_msg_t *rid, const char *reason) {
  dp_hdr h = dp_header(l, DP_REJECT);
  dp_send_to(&l->c, NULL, zmq_msg_data((zmq_msg_t *)rid), zmq_msg_size((zmq_msg_t *)rid), &h, reason, strlen(reason));
  pthread_mutex_lock(&l->mu);
  l->stats.workers_rejected++;
  snprintf(l->last_reject, sizeof l->last_reject, "%s", reason);
  pthread_mutex_unlock(&l->mu);
}

static void on_hello(em_loader *l, frames *m) {
  dp_coord *c = &l->c;
  dp_hello hello;
  if (m->n != 4 || !dp_hello_read(&hello, zmq_msg_data(&m->f[2]), zmq_msg_size(&m->f[2]))) return;
  char fp[1024];
  dp_text(fp, sizeof fp, zmq_msg_data(&m->f[3]), zmq_msg_size(&m->f[3]));
  dp_worker *w = find_worker(c, &m->f[0]);
  if (w && w->nonce == hello.nonce) { /* a repeated hello: the welcome was lost, or the reader forgot
                                           this trainer and set aside (LOST) every slot it had sent */
    w->nfree = 0;
  } else {
    if (w) dp_lose_worker(l, w, "it said hello again as a new reader");
    char why[600];
    if (hello.dataset_size != l->o.dataset_size) {
      snprintf(why, sizeof why, "reader %s (pid %lld on %s) has %lld samples, this trainer's dataset has %lld",
               hello.name, (long long)hello.pid, hello.host, (long long)hello.dataset_size,
               (long long)l->o.dataset_size);
      reject(l, &m->f[0], why);
      return;
    }
    if (strcmp(fp, l->fingerprint)) {
      snprintf(why, sizeof why, "reader %s (pid %lld on %s) reads different data: %.200s; this trainer: %.200s",
               hello.name, (long long)hello.pid, hello.host, fp, l->fingerprint);
      reject(l, &m->f[0], why);
      return;
    }
    size_t rid_len = zmq_msg_size(&m->f[0]);
    w = calloc(1, sizeof *w);
    if (!w || rid_len > sizeof w->rid) {
      free(w);
      return;
    }
    memcpy(w->rid, zmq_msg_data(&m->f[0]), rid_len);
    w->rid_len = rid_len;
    w->nonce = hello.nonce;
    w->pid = hello.pid;
    memcpy(w->host, hello.host, sizeof w->host);
    memcpy(w->name, hello.name, sizeof w->name);
    w->same_host = !strcmp(hello.host, c->host) && !strcmp(hello.boot_id, c->boot_id);
    w->spawned = w->same_host && is_child(l, w->pid);
    w->joined = em_clock_monotonic();
    w->next = c->workers;
    c->workers = w;
    c->nworkers++;
    pthread_mutex_lock(&l->mu);
    l->stats.workers_seen++;
    pthread_mutex_unlock(&l->mu);
    stats_workers(l);
  }
  w->last_seen = em_clock_monotonic();
  w->in_session = 0; /* until it answers under the session this welcome gives */
  dp_hdr h = dp_header(l, DP_WELCOME);
  h.heartbeat_s = l->o.heartbeat_s;
  h.heartbeat_timeout_s = l->o.heartbeat_timeout_s;
  h.flags = (l->o.skip_bad ? DP_FLAG_SKIP_BAD : 0) |
            (l->o.shared_memory && w->same_host && (hello.pid > 0) ? DP_FLAG_SHM : 0);
  if (h.flags & DP_FLAG_SHM) take_ring(l, w, &hello);
  dp_send_to(c, w, NULL, 0, &h, NULL, 0);
}

/* Drops the lease (plan, item) from w's list; returns 1 if it was there. */
static int take_lease(dp_coord *c, dp_worker *w, uint64_t plan, int64_t item) {
  if (!w) return 0;
  for (int i = 0; i < w->nleases; i++)
    if (w->leases[i].plan == plan && w->leases[i].item == item) {
      w->leases[i] = w->leases[--w->nleases];
      c->total_leases--;
      return 1;
    }
  return 0;
}

/* The item a result is for, if it is still wanted; NULL for a stale or duplicate result. */
static dp_item *wanted_item(em_loader *l, dp_worker *w, const dp_hdr *h) {
  dp_coord *c = &l->c;
  int held = take_lease(c, w, h->plan, h->item);
  if (h->session != c->session || h->plan != c->plan.id || !c->items || h->item < 0 || h->item >= c->plan.n_items)
    return NULL;
  dp_item *it = &c->items[h->item];
  if (held) it->leases--;
  if (it->state != IT_PENDING && it->state != IT_LEASED) {
    pthread_mutex_lock(&l->mu);
    l->stats.duplicates++;
    pthread_mutex_unlock(&l->mu);
    return NULL;
  }
  return it;
}

static void item_ready(dp_coord *c, dp_item *it, int64_t index) {
  it->state = IT_READY;
  c->ready++;
  c->arrived[c->n_arrived++] = index;
}

/* Returns 1 when the batch was taken (0: stale, duplicate or malformed). */
static int on_batch(em_loader *l, frames *m, dp_worker *w) {
  dp_coord *c = &l->c;
  dp_hdr h;
  memcpy(&h, zmq_msg_data(&m->f[1]), sizeof h);
  int shm = h.flags & DP_FLAG_SHM;
  dp_item *it = m->n == 5 ? wanted_item(l, w, &h) : NULL;
  if (w) w->last_seen = em_clock_monotonic();
  char why[256] = "";
  int lent = 0;
  em_loader_batch *b = it ? dp_build_batch(l, m->f, &h, w, &lent, why, sizeof why) : NULL;
  if (shm && w && !lent && zmq_msg_size(&m->f[4]) == sizeof(dp_shm_ref)) { /* the slot is free again */
    dp_shm_ref ref;
    memcpy(&ref, zmq_msg_data(&m->f[4]), sizeof ref);
    give_back_slot(c, w, ref.slot);
  }
  if (it && !b) { /* a malformed batch: treat the item as not done */
    if (it->state == IT_LEASED && it->leases == 0) {
      it->state = IT_PENDING;
      if (h.item < c->next_pending) c->next_pending = h.item;
    }
    pthread_mutex_lock(&l->mu);
    snprintf(l->last_reject, sizeof l->last_reject, "a batch from reader pid %lld was dropped: %s",
             w ? (long long)w->pid : -1LL, why);
    pthread_mutex_unlock(&l->mu);
    return 0;
  }
  if (!b) return 0;
  it->batch = b;
  item_ready(c, it, h.item);
  if (w) w->batches++;
  pthread_mutex_lock(&l->mu);
  l->stats.received++;
  l->stats.skipped += h.skipped;
  l->stats.shm_batches += shm ? 1 : 0;
  l->stats.shm_lent += lent;
  l->stats.read_s += h.times[0];
  l->stats.decode_s += h.times[1];
  l->stats.transform_s += h.times[2];
  l->stats.send_s += h.times[3];
  pthread_mutex_unlock(&l->mu);
  return 1;
}

static void on_error(em_loader *l, frames *m, dp_worker *w) {
  dp_hdr h;
  memcpy(&h, zmq_msg_data(&m->f[1]), sizeof h);
  char text[900];
  dp_text(text, sizeof text, m->n >= 3 ? zmq_msg_data(&m->f[2]) : "", m->n >= 3 ? zmq_msg_size(&m->f[2]) : 0);
  if (h.kind == DP_FATAL) {
    pthread_mutex_lock(&l->mu);
    snprintf(l->fatal, sizeof l->fatal, "a reader failed: %s", text);
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    if (w) dp_lose_worker(l, w, "it failed");
    return;
  }
  dp_item *it = wanted_item(l, w, &h);
  if (!it) return;
  char *msg = malloc(1024);
  if (!msg) return;
  snprintf(msg, 1024, "%s (reader pid %lld on %s)", text, w ? (long long)w->pid : -1LL, w ? w->host : "?");
  it->error = msg;
  item_ready(&l->c, it, h.item);
}

static void on_message(em_loader *l, frames *m) {
  dp_coord *c = &l->c;
  if (m->more || m->n < 2 || !dp_hdr_valid(zmq_msg_data(&m->f[1]), zmq_msg_size(&m->f[1]))) return;
  dp_hdr h;
  memcpy(&h, zmq_msg_data(&m->f[1]), sizeof h);
  double now = em_clock_monotonic();
  c->last_message = now;
  if (h.kind == DP_HELLO) {
    on_hello(l, m);
    return;
  }
  dp_worker *w = find_worker(c, &m->f[0]);
  if (w) w->last_seen = now;
  if (w && h.session == c->session) w->in_session = 1;
  if (!w && (h.kind == DP_BATCH || h.kind == DP_ERROR || h.kind == DP_FATAL)) {
    /* Only a reader that said hello (and was welcomed) may deliver results or end the run:
     * anyone who can reach the endpoint could send a FATAL. A reader whose dataset fails
     * to load says FATAL before it can say hello: its text is kept as the likely reason
     * when the readers are all gone, and nothing more. */
    char text[400] = "";
    if (h.kind == DP_FATAL && m->n >= 3) dp_text(text, sizeof text, zmq_msg_data(&m->f[2]), zmq_msg_size(&m->f[2]));
    pthread_mutex_lock(&l->mu);
    if (h.kind == DP_FATAL)
      snprintf(l->last_reject, sizeof l->last_reject, "a reader failed before it said hello (unverified): %s", text);
    else
      snprintf(l->last_reject, sizeof l->last_reject, "a %s from a peer that never said hello was ignored",
               h.kind == DP_BATCH ? "BATCH" : "ERROR");
    pthread_mutex_unlock(&l->mu);
  } else {
    switch (h.kind) {
      case DP_BATCH: on_batch(l, m, w); break;
      case DP_ERROR:
      case DP_FATAL: on_error(l, m, w); break;
      default: break; /* HEARTBEAT: last_seen is all */
    }
  }
  if (!w && h.kind != DP_FATAL) { /* a reader this trainer does not know (lost, or a restart) */
    dp_hdr r = dp_header(l, DP_RESET);
    uint8_t rid[256];
    size_t n = zmq_msg_size(&m->f[0]);
    if (n > sizeof rid) return;
    memcpy(rid, zmq_msg_data(&m->f[0]), n);
    if (n > 1 && rid[0] == 'D') rid[0] = 'R'; /* the data connection never reads: tell the control one */
    dp_send_to(c, NULL, rid, n, &r, NULL, 0);
  }
}

/* ---------------------------------------------------------------- rings */
/* Notices waiting in the rings of readers on this host, handled as received BATCH
 * messages; returns how many were taken. */
static int drain_rings(em_loader *l) {
  dp_coord *c = &l->c;
  int taken = 0;
  for (dp_worker *w = c->workers; w; w = w->next) {
    for (int k = 0; w->ring && k < DP_RING_ENTRIES; k++) {
      frames m;
      int nf = 0;
      int r = dp_ring_take((void *)dp_shm_map_data(w->ring), dp_shm_map_bytes(w->ring), &nf, &m.f[1]);
      if (r == 0) break;
      if (r == -2) { /* the reader broke its ring: ZeroMQ only from now on */
        drop_ring(c, w);
        break;
      }
      taken++;
      if (r == -1) continue;
      zmq_msg_init_size(&m.f[0], w->rid_len);
      memcpy(zmq_msg_data(&m.f[0]), w->rid, w->rid_len);
      m.n = 1 + nf;
      m.more = 0;
      dp_hdr h;
      if (m.n == 5 && dp_hdr_valid(zmq_msg_data(&m.f[1]), zmq_msg_size(&m.f[1])) &&
          (memcpy(&h, zmq_msg_data(&m.f[1]), sizeof h), h.kind == DP_BATCH)) {
        double now = em_clock_monotonic();
        if (c->last_notice > 0) { /* the mean gap, over the last ~8 notices */
          double gap = now - c->last_notice;
          c->notice_gap = c->notice_gap > 0 ? c->notice_gap + (gap - c->notice_gap) / 8 : gap;
        }
        c->last_message = w->last_seen = c->last_notice = now;
        if (h.session == c->session) w->in_session = 1;
        if (on_batch(l, &m, w)) {
          pthread_mutex_lock(&l->mu);
          l->stats.ring_batches++;
          pthread_mutex_unlock(&l->mu);
        }
      }
      dp_close_frames(&m);
    }
  }
  return taken;
}

/* While a reader whose ring this trainer reads holds leases, the coordinator looks at the
 * rings again after a pause instead of sleeping until a socket wakes it: a batch found late
 * leaves its reader without a new lease meanwhile. The pause is half the mean time between
 * notices, but at least RING_POLL_FLOOR_US unless that is more than a quarter of the time
 * the reader takes to make the worker_queue / 2 batches it still holds when it is topped
 * up (tiny batches); RING_POLL_MIN_US to RING_POLL_MAX_US in all. Half the time between
 * notices alone woke the coordinator twice a batch at batch 128 (10 us pauses), each
 * wake-up taking turns with the reader on these 2 cores: 1 reader at batch 128, the
 * trainer's CPU per batch fell from 23-31 us to 14-16 us on a loaded machine (10 -> 50 us
 * pauses; 12-13 us on a quieter one, where pauses of 4x the gap did worse). */
#define RING_POLL_MIN_US 10
#define RING_POLL_FLOOR_US 50
#define RING_POLL_MAX_US 200
#define RING_ZMQ_EVERY_S 200e-6
static long ring_pause_ns(const em_loader *l) {
  double gap = l->c.notice_gap * 1e6, us = gap * 0.5, held = gap * l->o.worker_queue / 4;
  double floor = held < RING_POLL_FLOOR_US ? held : RING_POLL_FLOOR_US;
  if (!(us >= floor)) us = floor;
  if (!(us >= RING_POLL_MIN_US)) us = RING_POLL_MIN_US;
  if (us > RING_POLL_MAX_US) us = RING_POLL_MAX_US;
  return (long)(us * 1000);
}
static int rings_busy(const dp_coord *c) {
  for (const dp_worker *w = c->workers; w; w = w->next)
    if (w->ring && w->nleases > 0) return 1;
  return 0;
}

/* ---------------------------------------------------------------- the epoch */
static void drop_items(dp_coord *c) {
  if (!c->items) return;
  for (int64_t i = 0; i < c->plan.n_items; i++) {
    dp_batch_destroy(c->items[i].batch);
    free(c->items[i].error);
  }
  free(c->items);
  free(c->arrived);
  c->items = NULL;
  c->arrived = NULL;
}

static void install_plan(em_loader *l, dp_plan *p) {
  dp_coord *c = &l->c;
  drop_items(c);
  dp_plan_free(&c->plan);
  c->plan = *p;
  free(p);
  c->items = calloc((size_t)c->plan.n_items + 1, sizeof *c->items);
  c->arrived = calloc((size_t)c->plan.n_items + 1, sizeof *c->arrived);
  c->next_pending = c->next_push = c->pushed = c->ready = c->scan_from = 0;
  c->n_arrived = c->arrived_head = 0;
  c->end_pushed = 0;
  if (!c->items || !c->arrived) { /* out of memory: the consumer hears of it */
    pthread_mutex_lock(&l->mu);
    snprintf(l->fatal, sizeof l->fatal, "out of memory for the plan of %lld items", (long long)c->plan.n_items);
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    c->plan.n_items = 0;
  }
}

static int64_t outstanding(em_loader *l) {
  pthread_mutex_lock(&l->mu);
  int64_t queued = l->queued;
  pthread_mutex_unlock(&l->mu);
  return l->c.total_leases + l->c.ready + queued;
}

static dp_worker *pick_worker(dp_coord *c, int queue) {
  dp_worker *best = NULL;
  for (dp_worker *w = c->workers; w; w = w->next)
    if (w->topping_up && w->nleases < queue && (!best || w->nleases < best->nleases)) best = w;
  return best;
}

static void lease_items(em_loader *l) {
  dp_coord *c = &l->c;
  if (!c->items) return;
  /* Leases go out in bursts: a reader is topped up to worker_queue once it is down to
   * half of it, not after every batch it sends. Two or more LEASE messages sent together
   * cross to the reader in one wake-up of each side's I/O threads, where one at a time
   * cost those wake-ups per batch; the reader still holds leases to work on meanwhile. */
  int low = l->o.worker_queue - (l->o.worker_queue + 1) / 2;
  for (dp_worker *w = c->workers; w; w = w->next) w->topping_up = w->nleases <= low;
  int64_t out = outstanding(l), max_out = out, via_ring = 0;
  while (out < l->o.prefetch) {
    while (c->next_pending < c->plan.n_items && c->items[c->next_pending].state != IT_PENDING) c->next_pending++;
    if (c->next_pending >= c->plan.n_items) break;
    dp_worker *w = pick_worker(c, l->o.worker_queue);
    if (!w) break;
    int64_t k = c->next_pending;
    if (w->nleases == w->cap) {
      int cap = w->cap ? 2 * w->cap : 4;
      dp_lease_ref *p = realloc(w->leases, (size_t)cap * sizeof *p);
      if (!p) break;
      w->leases = p;
      w->cap = cap;
    }
    dp_hdr h = dp_header(l, DP_LEASE);
    h.plan = c->plan.id;
    h.epoch = c->plan.epoch;
    h.seed = c->plan.seed;
    h.item = k;
    h.n = c->plan.item_len[k];
    h.flags = l->o.skip_bad ? DP_FLAG_SKIP_BAD : 0;
    const void *data[3] = {&h, c->plan.ids + c->plan.item_pos[k], w->free_slots};
    size_t size[3] = {sizeof h, (size_t)h.n * sizeof(int64_t), (size_t)w->nfree * sizeof(int64_t)};
    int ring = to_ring(c, w, 1, w->nfree ? 3 : 2, data, size);
    if (!ring && w->nfree && w->ring && w->in_session) {
      /* slots given back go through the ring ahead of a lease through ZeroMQ: the ring's
       * next leases could overtake that lease, leaving the reader short of slots */
      send_slots(c, w);
      size[2] = 0;
    }
    if (ring) {
      via_ring++;
    } else if (send_to2(c, w, NULL, 0, &h, data[1], size[1], size[2] ? w->free_slots : NULL, size[2])) {
      if (errno != EHOSTUNREACH) break; /* its queue is full: later */
      dp_lose_worker(l, w, "its connection closed");
      continue;
    }
    w->nfree = 0; /* the slots went with the lease */
    w->leases[w->nleases++] = (dp_lease_ref){c->plan.id, k};
    c->items[k].leased_at = em_clock_monotonic();
    c->items[k].state = IT_LEASED;
    c->items[k].leases++;
    c->total_leases++;
    out++;
    if (out > max_out) max_out = out;
  }
  pthread_mutex_lock(&l->mu);
  if (max_out > l->stats.max_outstanding) l->stats.max_outstanding = max_out;
  l->stats.leased = c->total_leases;
  l->stats.ring_leases += via_ring;
  pthread_mutex_unlock(&l->mu);
}

static void push_out(em_loader *l, dp_out *o) {
  pthread_mutex_lock(&l->mu);
  if (l->tail) l->tail->next = o;
  else l->head = o;
  l->tail = o;
  if (o->kind == DP_OUT_BATCH) l->queued++;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

/* Hands finished items to the consumer: in plan order, or oldest arrival first. */
static void push_ready(em_loader *l) {
  dp_coord *c = &l->c;
  if (!c->items) return;
  for (;;) {
    int64_t k;
    if (l->o.in_order) {
      if (c->next_push >= c->plan.n_items) break;
      k = c->next_push;
      if (c->items[k].state != IT_READY) break;
      c->next_push++;
    } else {
      if (c->arrived_head >= c->n_arrived) break;
      k = c->arrived[c->arrived_head++];
    }
    dp_item *it = &c->items[k];
    if (it->batch && it->batch->samples == 0) { /* every record was bad and skipped */
      dp_batch_destroy(it->batch);
      it->batch = NULL;
      it->state = IT_DONE;
      c->ready--;
      c->pushed++;
      continue;
    }
    dp_out *o = calloc(1, sizeof *o);
    if (!o) break;
    o->generation = c->plan.id;
    if (it->error) {
      o->kind = DP_OUT_ERROR;
      o->message = it->error;
      it->error = NULL;
    } else {
      o->kind = DP_OUT_BATCH;
      o->batch = it->batch;
      o->batch->generation = c->plan.id;
      it->batch = NULL;
    }
    it->state = IT_QUEUED;
    c->ready--;
    c->pushed++;
    push_out(l, o);
  }
  if (!c->end_pushed && c->pushed == c->plan.n_items) {
    dp_out *o = calloc(1, sizeof *o);
    if (o) {
      o->kind = DP_OUT_END;
      o->generation = c->plan.id;
      c->end_pushed = 1;
      push_out(l, o);
    }
  }
  pthread_mutex_lock(&l->mu);
  l->waiting_item = l->o.in_order ? c->next_push : -1;
  l->n_items = c->plan.n_items;
  l->cur_epoch = c->plan.epoch;
  l->stats.buffered = c->ready + l->queued;
  pthread_mutex_unlock(&l->mu);
}

/* ---------------------------------------------------------------- the loop */
void *dp_coordinator_main(void *arg) {
  em_loader *l = arg;
  dp_coord *c = &l->c;
  dp_host_identity(c->host, c->boot_id);
  prctl(PR_SET_TIMERSLACK, 1000UL); /* the ring's short pauses: 1 us late, not the default 50 */
  double last_tick = 0, last_poll = 0;
  for (;;) {
    zmq_pollitem_t items[3] = {
        {c->router, 0, ZMQ_POLLIN, 0}, {NULL, l->efd, ZMQ_POLLIN, 0}, {c->zap, 0, ZMQ_POLLIN, 0}};
    int n = c->zap ? 3 : 2, polling = rings_busy(c), ready = 0;
    /* While notices come through the rings, the sockets are polled every RING_ZMQ_EVERY_S,
     * not every turn: a poll is a system call or two (libzmq asks getpid), about one a batch
     * at batch 128, and what ZeroMQ carries meanwhile is rare (heartbeats; a batch when a
     * ring is full). Messages already queued are still received every turn below. */
    double t = em_clock_monotonic();
    if (!(polling && t - c->last_notice < RING_ZMQ_EVERY_S && t - last_poll < RING_ZMQ_EVERY_S)) {
      ready = zmq_poll(items, n, polling ? 0 : (long)(TICK_S * 1000));
      if (ready < 0 && zmq_errno() == ETERM) break;
      last_poll = t;
    }
    if (items[1].revents & ZMQ_POLLIN) {
      uint64_t v;
      ssize_t r = read(l->efd, &v, sizeof v);
      (void)r;
    }
    pthread_mutex_lock(&l->mu);
    int stop = l->stop;
    dp_plan *p = l->pending;
    l->pending = NULL;
    pthread_mutex_unlock(&l->mu);
    if (stop) {
      dp_plan_free(p);
      free(p);
      break;
    }
    if (p) install_plan(l, p);
    if (n == 3 && (items[2].revents & ZMQ_POLLIN)) dp_on_zap(l);
    for (int i = 0; i < 512; i++) { /* bounded, so timers and the consumer are served */
      frames m;
      if (!dp_recv_frames(c->router, &m)) break;
      on_message(l, &m);
      dp_close_frames(&m);
    }
    int noticed = drain_rings(l);
    if (polling && ready == 0 && noticed == 0) { /* nothing yet: look again shortly */
      struct timespec pause = {0, ring_pause_ns(l)};
      nanosleep(&pause, NULL);
    }
    double now = em_clock_monotonic();
    if (now - last_tick >= TICK_S) {
      last_tick = now;
      dp_tick(l, now);
    }
    if (l->lender) dp_lender_drain(l->lender, slot_returned, c);
    push_ready(l);
    lease_items(l);
    flush_slots(c);
  }
  dp_hdr bye = dp_header(l, DP_BYE);
  while (c->workers) {
    dp_worker *w = c->workers;
    dp_send_to(c, w, NULL, 0, &bye, NULL, 0);
    c->workers = w->next;
    if (w->shm) dp_shm_map_release(w->shm);
    drop_ring(c, w);
    free(w->leases);
    free(w);
  }
  drop_items(c);
  dp_plan_free(&c->plan);
  return NULL;
}
#endif
