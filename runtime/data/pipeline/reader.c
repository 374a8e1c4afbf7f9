/* pipeline/reader.c - the reader (worker) side of the data pipeline.
 *
 * An I/O thread owns one DEALER socket per trainer served. It says hello until a trainer
 * welcomes it, answers with heartbeats, queues the leases it receives for the caller and
 * sends the caller's batches, so a slow sample (a large JPEG, a Lua dataset that blocks)
 * never looks like a dead reader. The caller (the Lua worker loop) takes a lease, gets the
 * batch's tensors from em_reader_alloc (living in the outgoing message, or in a slot of
 * the shared-memory arena for a trainer on this host), fills them and sends.
 *
 * The I/O thread is pipeline/reader_io.c; the state both halves share, reader_state.h.
 *
 * A spawned reader (parent_pid > 0) stops when its trainer says goodbye, falls silent for
 * the heartbeat timeout, or its parent process is gone. A reader started by hand serves
 * until it is stopped: trainers may come, go and come back. */
#include "ember/data_pipeline.h"
#ifdef EMBER_HAVE_ZMQ
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>
#include "reader_state.h"

static void wake(int efd) {
  uint64_t one = 1;
  ssize_t w = write(efd, &one, sizeof one);
  (void)w;
}

void rd_free_msg(rd_msg *m) {
  if (!m) return;
  for (int i = 0; i < m->nframes; i++) zmq_msg_close(&m->f[i]);
  free(m->ids);
  free(m);
}

void rd_append(rd_msg **head, rd_msg **tail, rd_msg *m) {
  m->next = NULL;
  if (*tail) (*tail)->next = m;
  else *head = m;
  *tail = m;
}

/* Under mu: the caller's loop ends with status 2 and this reason. */
void rd_stop(em_reader *r, const char *why) {
  if (!r->stopped) snprintf(r->stop_reason, sizeof r->stop_reason, "%s", why);
  r->stopped = 1;
  pthread_cond_broadcast(&r->cv);
}

int rd_send_frames(void *sock, const dp_hdr *h, const void *extra, size_t n, const void *extra2, size_t n2) {
  if (zmq_send(sock, h, sizeof *h, ZMQ_DONTWAIT | (extra ? ZMQ_SNDMORE : 0)) < 0) return -1;
  if (extra && zmq_send(sock, extra, n, extra2 ? ZMQ_SNDMORE : 0) < 0) return -1;
  if (extra2 && zmq_send(sock, extra2, n2, 0) < 0) return -1;
  return 0;
}

/* ---------------------------------------------------------------- create and close */
static em_status zmq_fail(const char *what, const char *arg) {
  return em_set_error(EM_ERR_RUNTIME, OP ": %s%s%s%s: %s", what, arg ? " '" : "", arg ? arg : "", arg ? "'" : "",
                      zmq_strerror(zmq_errno()));
}

/* A DEALER to endpoint with routing id kind + nonce ('R' control, 'D' data). */
static em_status dealer(em_reader *r, void **out, char kind, const char *endpoint, uint64_t nonce) {
  void *s = zmq_socket(r->zctx, ZMQ_DEALER);
  if (!s) return zmq_fail("cannot create a socket", NULL);
  *out = s;
  int one = 1, linger = 200, send_wait = 2000;
  uint8_t rid[9] = {(uint8_t)kind};
  memcpy(rid + 1, &nonce, 8);
  zmq_setsockopt(s, ZMQ_ROUTING_ID, rid, sizeof rid);
  zmq_setsockopt(s, ZMQ_IMMEDIATE, &one, sizeof one);
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(s, ZMQ_SNDTIMEO, &send_wait, sizeof send_wait);
  if (r->curve_server[0]) {
    if (zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, r->curve_server, 40) ||
        zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, r->curve_public, 40) ||
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, r->curve_secret, 40))
      return zmq_fail("cannot set the CurveZMQ keys", NULL);
  }
  if (zmq_connect(s, endpoint) != 0) return zmq_fail("cannot connect to", endpoint);
  return EM_OK;
}

static em_status open_conn(em_reader *r, const char *endpoint, uint64_t nonce) {
  if (r->nconn == RD_MAX_CONN) return em_set_error(EM_ERR_ARGUMENT, OP ": more than %d trainers", RD_MAX_CONN);
  rd_conn *c = &r->conn[r->nconn++];
  em_status st = dealer(r, &c->sock, 'R', endpoint, nonce);
  if (!st) st = dealer(r, &c->data, 'D', endpoint, nonce);
  if (st) return st;
  c->hb = r->o.heartbeat_s > 0 ? r->o.heartbeat_s : 0.5;
  c->hb_timeout = r->o.heartbeat_timeout_s > c->hb ? r->o.heartbeat_timeout_s : 10 * c->hb;
  c->last_seen = em_clock_monotonic();
  return EM_OK;
}

static em_status setup(em_reader *r) {
  const em_reader_options *o = &r->o;
  if (o->curve_server_key) {
    if (strlen(o->curve_server_key) != 40)
      return em_set_error(EM_ERR_ARGUMENT, OP ": the trainers' CurveZMQ key must be 40 Z85 characters");
    memcpy(r->curve_server, o->curve_server_key, 41);
    if (o->curve_public_key && o->curve_secret_key) {
      if (strlen(o->curve_public_key) != 40 || strlen(o->curve_secret_key) != 40)
        return em_set_error(EM_ERR_ARGUMENT, OP ": CurveZMQ keys are 40 Z85 characters");
      memcpy(r->curve_public, o->curve_public_key, 41);
      memcpy(r->curve_secret, o->curve_secret_key, 41);
    } else if (zmq_curve_keypair(r->curve_public, r->curve_secret) != 0) {
      return zmq_fail("cannot make a CurveZMQ key pair", NULL);
    }
  }
  r->zctx = zmq_ctx_new();
  if (!r->zctx) return zmq_fail("cannot create a ZeroMQ context", NULL);
  uint64_t nonce = dp_random64();
  r->hello.nonce = nonce;
  r->hello.pid = getpid();
  dp_host_identity(r->hello.host, r->hello.boot_id);
  snprintf(r->hello.name, sizeof r->hello.name, "%s", r->name ? r->name : "reader");
  if (o->shared_memory && (r->ring = dp_ring_create())) { /* without one, ZeroMQ carries every notice */
    snprintf(r->hello.ring, sizeof r->hello.ring, "%s", dp_ring_name(r->ring));
    r->hello.ring_id = dp_ring_id(r->ring);
    r->hello.ring_bytes = dp_ring_bytes();
  }
  const char *p = r->connect;
  while (*p) {
    size_t n = strcspn(p, ",");
    char ep[256];
    if (n == 0 || n >= sizeof ep) return em_set_error(EM_ERR_ARGUMENT, OP ": bad endpoint list '%s'", r->connect);
    memcpy(ep, p, n);
    ep[n] = 0;
    em_status st = open_conn(r, ep, nonce);
    if (st) return st;
    p += n + (p[n] == ',');
  }
  r->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (r->efd < 0) return em_set_error(EM_ERR_RUNTIME, OP ": eventfd: %s", strerror(errno));
  if (pthread_create(&r->io, NULL, rd_io_main, r) != 0)
    return em_set_error(EM_ERR_RUNTIME, OP ": cannot start the I/O thread");
  r->io_started = 1;
  return EM_OK;
}

em_status em_reader_create(em_reader **out, const em_reader_options *options) {
  if (!out || *out) return em_set_error(EM_ERR_ARGUMENT, OP ": out must point to NULL (the reader is new)");
  if (!options || !options->connect || !*options->connect)
    return em_set_error(EM_ERR_ARGUMENT, OP ": expected the endpoints of the trainers to connect to");
  em_reader *r = calloc(1, sizeof *r);
  if (!r) return em_set_error(EM_ERR_MEMORY, OP ": out of memory");
  r->o = *options;
  r->connect = strdup(options->connect);
  r->name = options->name ? strdup(options->name) : NULL;
  r->efd = -1;
  r->slot = -1;
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
  em_status st = r->connect ? setup(r) : em_set_error(EM_ERR_MEMORY, OP ": out of memory");
  if (st) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", em_last_error());
    em_reader_free(r);
    return em_set_error(st, "%s", msg);
  }
  *out = r;
  return EM_OK;
}

static void drop_batch(em_reader *r) {
  for (int i = 0; i < r->nt; i++) {
    em_tensor_free(r->tensors[i]); /* a reference kept by mistake errors, never reads freed bytes */
    em_tensor_release(r->tensors[i]);
  }
  r->nt = 0;
  if (r->have_data) zmq_msg_close(&r->data);
  r->have_data = 0;
  if (r->slot >= 0) {
    pthread_mutex_lock(&r->mu);
    if (r->arena && r->arena->state[r->slot] == SLOT_FILLING) r->arena->state[r->slot] = SLOT_FREE;
    pthread_mutex_unlock(&r->mu);
  }
  r->slot = -1;
}

void em_reader_free(em_reader *r) {
  if (!r) return;
  drop_batch(r);
  if (r->io_started) {
    pthread_mutex_lock(&r->mu);
    r->quit = 1;
    pthread_mutex_unlock(&r->mu);
    wake(r->efd);
    pthread_join(r->io, NULL);
  }
  for (int i = 0; i < r->nconn; i++) {
    if (r->conn[i].sock) zmq_close(r->conn[i].sock);
    if (r->conn[i].data) zmq_close(r->conn[i].data);
  }
  if (r->zctx) zmq_ctx_term(r->zctx);
  if (r->efd >= 0) close(r->efd);
  dp_ring_destroy(r->ring);
  rd_free_msg(r->cur);
  for (rd_msg *m = r->leases, *n; m; m = n) n = m->next, rd_free_msg(m);
  for (rd_msg *m = r->out, *n; m; m = n) n = m->next, rd_free_msg(m);
  dp_arena_destroy(r->arena);
  free(r->connect);
  free(r->name);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv);
  free(r);
}

em_status em_reader_ready(em_reader *r, int64_t dataset_size, const char *fingerprint) {
  if (!r) return em_set_error(EM_ERR_ARGUMENT, OP ": ready on a NULL reader");
  pthread_mutex_lock(&r->mu);
  r->hello.dataset_size = dataset_size;
  snprintf(r->fingerprint, sizeof r->fingerprint, "%s", fingerprint ? fingerprint : "");
  r->ready = 1;
  pthread_mutex_unlock(&r->mu);
  wake(r->efd);
  return EM_OK;
}

/* ---------------------------------------------------------------- leases and batches */
em_status em_reader_next(em_reader *r, em_lease *lease, double timeout_s) {
  if (!r || !lease) return em_set_error(EM_ERR_ARGUMENT, OP ": next needs a reader and a lease");
  memset(lease, 0, sizeof *lease);
  drop_batch(r);
  rd_free_msg(r->cur);
  r->cur = NULL;
  double deadline = em_clock_monotonic() + (timeout_s > 0 ? timeout_s : 0);
  pthread_mutex_lock(&r->mu);
  /* While a trainer reads the ring it may write leases there, which wake nobody: the ring
   * is looked at after pauses growing from RD_RING_POLL_MIN_S to RD_RING_POLL_MAX_S (a
   * reader with work in hand finds them on its next call); after that the reader says it is
   * waiting, and sleeps until a lease or a heartbeat through ZeroMQ wakes it (the trainer
   * then sends it leases that way: pipeline/ring.c). */
  double pause = RD_RING_POLL_MIN_S;
  int waiting = 0;
  for (;;) {
    rd_take_ring_leases(r);
    if (r->leases || r->stopped) break;
    double now = em_clock_monotonic();
    if (now >= deadline) break;
    double wait = deadline - now;
    if (!waiting && dp_ring_session(r->ring) && wait > pause) {
      if (pause <= RD_RING_POLL_MAX_S) {
        wait = pause;
        pause *= 2;
      } else {
        waiting = 1;
        if (dp_ring_set_waiting(r->ring, 1)) continue; /* a lease came meanwhile */
      }
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)wait;
    ts.tv_nsec += (long)((wait - (double)(time_t)wait) * 1e9);
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&r->cv, &r->mu, &ts);
  }
  if (waiting) dp_ring_set_waiting(r->ring, 0);
  if (r->leases) {
    rd_msg *m = r->leases;
    r->leases = m->next;
    if (!r->leases) r->leases_tail = NULL;
    r->cur = m;
    lease->status = 1;
    lease->trainer = m->conn;
    lease->skip_bad = m->skip_bad;
    lease->session = m->hdr.session;
    lease->plan = m->hdr.plan;
    lease->epoch = m->hdr.epoch;
    lease->seed = m->hdr.seed;
    lease->item = m->hdr.item;
    lease->n = m->hdr.n;
    lease->ids = m->ids;
  } else if (r->stopped) {
    lease->status = 2;
    em_set_error(EM_ERR_RUNTIME, OP ": %s", r->stop_reason);
  }
  pthread_mutex_unlock(&r->mu);
  return EM_OK;
}

static int current(const em_reader *r, const em_lease *lease) {
  return r->cur && lease && lease->status == 1 && r->cur->hdr.item == lease->item && r->cur->hdr.plan == lease->plan;
}

/* A free slot of an arena big enough for `bytes`, making or remaking the arena while no
 * slot is sent or being filled (too small, or only LOST slots left); -1: send inline. */
static int take_slot(em_reader *r, uint64_t bytes) {
  int slot = -1;
  pthread_mutex_lock(&r->mu);
  dp_arena *a = r->arena;
  if (a) {
    int busy = 0, free_slots = 0;
    for (int s = 0; s < a->nslots; s++) {
      busy |= a->state[s] == SLOT_SENT || a->state[s] == SLOT_FILLING;
      free_slots += a->state[s] == SLOT_FREE;
    }
    if (!busy && (a->slot_bytes < bytes || !free_slots)) {
      dp_arena_destroy(a); /* a trainer mapping it keeps its memory until it unmaps */
      r->arena = a = NULL;
    }
  }
  if (!a) r->arena = a = dp_arena_create(bytes + bytes / 8, 0);
  for (int again = 0; a && a->slot_bytes >= bytes && slot < 0 && again < 2; again++) {
    if (again) rd_take_ring_leases(r); /* slots given back through the ring, not yet seen */
    for (int s = 0; s < a->nslots; s++) /* the lowest: recently used, likely still in cache */
      if (a->state[s] == SLOT_FREE) {
        a->state[s] = SLOT_FILLING;
        slot = s;
        break;
      }
  }
  pthread_mutex_unlock(&r->mu);
  return slot;
}

em_status em_reader_alloc(em_reader *r, const em_lease *lease, int n, const em_tensor_desc *descs,
                          em_tensor **tensors) {
  if (!r || !current(r, lease))
    return em_set_error(EM_ERR_ARGUMENT, OP ": alloc for a lease this reader is not serving");
  if (n < 1 || n > 16 || !descs || !tensors)
    return em_set_error(EM_ERR_ARGUMENT, OP ": alloc expects 1 to 16 tensor descriptions, got %d", n);
  drop_batch(r);
  uint64_t total = 0;
  for (int i = 0; i < n; i++) {
    em_tensor_desc d = descs[i];
    d.name[31] = 0;
    int64_t bytes = dp_desc_bytes(&d);
    if (d.lengths && (bytes < 0 || !dp_lengths_desc_valid(descs, n, i)))
      return em_set_error(EM_ERR_ARGUMENT,
                          OP ": jagged tensor '%s': lengths = %d must name another tensor of the batch (1 to %d), an "
                             "int64 row tensor [samples] or [samples, keys] that is not jagged itself",
                          d.name, d.lengths, n);
    if (bytes < 0 || (!d.lengths && d.sizes[0] != lease->n))
      return em_set_error(EM_ERR_ARGUMENT,
                          OP
                          ": tensor '%s': a bad description (dtype %d, %d dims, %lld rows for a "
                          "lease of %lld samples)",
                          d.name, d.dtype, d.ndim, (long long)d.sizes[0], (long long)lease->n);
    total = (total + DP_ALIGN - 1) / DP_ALIGN * DP_ALIGN;
    r->descs[i].d = d;
    r->descs[i].offset = (int64_t)total;
    r->descs[i].nbytes = bytes;
    total += (uint64_t)bytes;
  }
  uint8_t *base;
  r->slot = r->cur->shm_ok ? take_slot(r, total) : -1;
  if (r->slot >= 0) {
    base = r->arena->base + (uint64_t)r->slot * r->arena->slot_bytes;
  } else {
    if (zmq_msg_init_size(&r->data, total ? total : 1) != 0)
      return em_set_error(EM_ERR_MEMORY, OP ": out of memory for a batch of %llu bytes", (unsigned long long)total);
    r->have_data = 1;
    base = zmq_msg_data(&r->data);
  }
  for (int i = 0; i < n; i++) {
    const em_tensor_desc *d = &r->descs[i].d;
    em_tensor *t = NULL;
    em_status st = em_from_blob(&t, base + r->descs[i].offset, d->ndim, d->sizes, NULL, (em_dtype)d->dtype,
                                (em_device){EM_CPU, 0}, NULL, NULL);
    if (st) {
      for (int j = 0; j < i; j++) em_tensor_release(tensors[j]);
      drop_batch(r);
      return st;
    }
    em_tensor_retain(t);
    r->tensors[r->nt++] = t;
    tensors[i] = t;
  }
  return EM_OK;
}

static void queue_out(em_reader *r, rd_msg *m) {
  pthread_mutex_lock(&r->mu);
  rd_append(&r->out, &r->out_tail, m);
  pthread_mutex_unlock(&r->mu);
  wake(r->efd);
}

/* Batches and errors go out on the data connection, from the caller's thread: no hand-over
 * to the I/O thread, and the batch's message is sent as it is (zmq takes it, no copy). A
 * send blocks at most 2 s (ZMQ_SNDTIMEO) when the trainer is not reachable, and is then
 * dropped: the trainer leases the item again when it loses this reader. */
static void send_direct(em_reader *r, rd_msg *m) {
  void *sock = r->conn[m->conn].data;
  for (int i = 0; i < m->nframes; i++)
    if (zmq_msg_send(&m->f[i], sock, i + 1 < m->nframes ? ZMQ_SNDMORE : 0) < 0) break;
  rd_free_msg(m);
}

static rd_msg *new_out(em_reader *r, int conn, const dp_hdr *h) {
  rd_msg *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->conn = conn;
  m->hdr = *h;
  m->give_up = em_clock_monotonic() + r->conn[conn].hb_timeout;
  zmq_msg_init_size(&m->f[0], sizeof *h);
  memcpy(zmq_msg_data(&m->f[0]), h, sizeof *h);
  m->nframes = 1;
  return m;
}

static void add_frame(rd_msg *m, const void *data, size_t n) {
  zmq_msg_init_size(&m->f[m->nframes], n);
  if (n) memcpy(zmq_msg_data(&m->f[m->nframes]), data, n);
  m->nframes++;
}

static dp_hdr reply_header(const rd_msg *lease, int kind) {
  dp_hdr h;
  dp_hdr_init(&h, kind);
  h.session = lease->hdr.session;
  h.plan = lease->hdr.plan;
  h.epoch = lease->hdr.epoch;
  h.item = lease->hdr.item;
  return h;
}

em_status em_reader_send(em_reader *r, const em_lease *lease, int64_t kept, const int64_t *kept_ids, int64_t skipped,
                         const em_stage_times *times) {
  double t0 = em_clock_monotonic();
  if (!r || !current(r, lease) || (r->nt == 0 && kept != 0))
    return em_set_error(EM_ERR_ARGUMENT, OP ": send without a batch allocated for this lease");
  if (kept < 0 || kept > lease->n || (kept && !kept_ids))
    return em_set_error(EM_ERR_ARGUMENT, OP ": send of %lld rows for a lease of %lld samples", (long long)kept,
                        (long long)lease->n);
  dp_hdr h = reply_header(r->cur, DP_BATCH);
  h.n = kept;
  h.skipped = skipped;
  h.ntensors = r->nt;
  if (times) {
    h.times[0] = times->read;
    h.times[1] = times->decode;
    h.times[2] = times->transform;
    h.times[3] = times->send;
  }
  h.times[3] += r->last_send_s;
  dp_tdesc descs[16];
  uint64_t used = 0;
  for (int i = 0; i < r->nt; i++) {
    descs[i] = r->descs[i];
    int64_t rows = descs[i].d.sizes[0];
    int64_t row_bytes = rows ? descs[i].nbytes / rows : 0;
    int64_t keep = kept;
    if (descs[i].d.lengths) { /* the values of the kept samples, as their lengths count them */
      const em_tensor *L = r->tensors[descs[i].d.lengths - 1];
      int64_t keys = em_tensor_ndim(L) == 2 ? em_tensor_size(L, 1) : 1;
      keep = dp_lengths_sum(em_tensor_data(L), kept, keys);
      if (keep < 0 || keep > rows) { /* the trainer is told (it raises), not left waiting */
        char msg[300];
        snprintf(msg, sizeof msg,
                 OP ": jagged tensor '%s': its lengths count %lld values for the %lld samples kept, expected 0 to "
                    "%lld (the values allocated), none negative",
                 descs[i].d.name, (long long)keep, (long long)kept, (long long)rows);
        em_reader_send_error(r, lease, msg);
        return em_set_error(EM_ERR_ARGUMENT, "%s", msg);
      }
    }
    descs[i].d.sizes[0] = keep;
    descs[i].nbytes = row_bytes * keep;
    if ((uint64_t)(descs[i].offset + descs[i].nbytes) > used) used = (uint64_t)(descs[i].offset + descs[i].nbytes);
  }
  int shm = r->slot >= 0;
  dp_shm_ref ref;
  if (shm) {
    h.flags |= DP_FLAG_SHM;
    memset(&ref, 0, sizeof ref);
    pthread_mutex_lock(&r->mu);
    memcpy(ref.name, r->arena->name, sizeof ref.name); /* terminated: snprintf made it (no snprintf per batch) */
    ref.arena_id = r->arena->id;
    ref.nslots = r->arena->nslots;
    ref.arena_bytes = r->arena->bytes;
    ref.slot = r->slot;
    ref.offset = (uint64_t)r->slot * r->arena->slot_bytes;
    ref.nbytes = used;
    r->arena->state[r->slot] = SLOT_SENT;
    r->arena->owner[r->slot] = r->cur->conn;
    pthread_mutex_unlock(&r->mu);
    r->slot = -1;
    /* the notice straight into the ring when the trainer that leased the item reads it */
    const void *data[DP_RING_FRAMES] = {&h, descs, kept_ids, &ref};
    size_t size[DP_RING_FRAMES] = {sizeof h, (size_t)r->nt * sizeof(dp_tdesc), (size_t)kept * sizeof(int64_t),
                                   sizeof ref};
    if (r->ring && dp_ring_put(r->ring, h.session, DP_RING_FRAMES, data, size)) {
      drop_batch(r);
      r->last_send_s = em_clock_monotonic() - t0;
      return EM_OK;
    }
  }
  rd_msg *m = new_out(r, r->cur->conn, &h);
  if (!m) {
    if (shm) { /* nothing went out: the slot is free again */
      pthread_mutex_lock(&r->mu);
      if (r->arena && r->arena->id == ref.arena_id) r->arena->state[ref.slot] = SLOT_FREE;
      pthread_mutex_unlock(&r->mu);
    }
    return em_set_error(EM_ERR_MEMORY, OP ": out of memory");
  }
  add_frame(m, descs, (size_t)r->nt * sizeof(dp_tdesc));
  add_frame(m, kept_ids, (size_t)kept * sizeof(int64_t));
  if (shm) {
    add_frame(m, &ref, sizeof ref);
  } else if (!r->have_data) { /* every sample was a bad record: an empty batch */
    add_frame(m, NULL, 0);
  } else { /* the batch's own message goes out as it is: no copy */
    zmq_msg_init(&m->f[m->nframes]);
    zmq_msg_move(&m->f[m->nframes], &r->data);
    m->nframes++;
    zmq_msg_close(&r->data);
    r->have_data = 0;
  }
  drop_batch(r);
  send_direct(r, m);
  r->last_send_s = em_clock_monotonic() - t0;
  return EM_OK;
}

em_status em_reader_send_error(em_reader *r, const em_lease *lease, const char *message) {
  if (!r || !current(r, lease))
    return em_set_error(EM_ERR_ARGUMENT, OP ": send_error for a lease this reader is not serving");
  drop_batch(r);
  dp_hdr h = reply_header(r->cur, DP_ERROR);
  rd_msg *m = new_out(r, r->cur->conn, &h);
  if (!m) return em_set_error(EM_ERR_MEMORY, OP ": out of memory");
  add_frame(m, message ? message : "", message ? strlen(message) : 0);
  send_direct(r, m);
  return EM_OK;
}

em_status em_reader_fatal(em_reader *r, const char *message) {
  if (!r) return em_set_error(EM_ERR_ARGUMENT, OP ": fatal on a NULL reader");
  for (int i = 0; i < r->nconn; i++) {
    dp_hdr h;
    dp_hdr_init(&h, DP_FATAL);
    rd_msg *m = new_out(r, i, &h);
    if (!m) break;
    m->give_up = em_clock_monotonic() + 2.0;
    add_frame(m, message ? message : "", message ? strlen(message) : 0);
    pthread_mutex_lock(&r->mu);
    r->fatal_pending++;
    pthread_mutex_unlock(&r->mu);
    queue_out(r, m);
  }
  /* wait (a little) until the messages are out: the process exits next */
  double deadline = em_clock_monotonic() + 2.5;
  pthread_mutex_lock(&r->mu);
  while (r->fatal_pending > 0 && em_clock_monotonic() < deadline) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 20000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&r->cv, &r->mu, &ts);
  }
  pthread_mutex_unlock(&r->mu);
  return EM_OK;
}

#else /* without ZeroMQ */
static em_status no_zmq(void) {
  return em_set_error(EM_ERR_UNSUPPORTED, "reader: ember was built without ZeroMQ (install libzmq3-dev and rebuild)");
}
em_status em_reader_create(em_reader **out, const em_reader_options *options) {
  (void)out, (void)options;
  return no_zmq();
}
em_status em_reader_ready(em_reader *r, int64_t dataset_size, const char *fingerprint) {
  (void)r, (void)dataset_size, (void)fingerprint;
  return no_zmq();
}
em_status em_reader_next(em_reader *r, em_lease *lease, double timeout_s) {
  (void)r, (void)lease, (void)timeout_s;
  return no_zmq();
}
em_status em_reader_alloc(em_reader *r, const em_lease *lease, int n, const em_tensor_desc *descs,
                          em_tensor **tensors) {
  (void)r, (void)lease, (void)n, (void)descs, (void)tensors;
  return no_zmq();
}
em_status em_reader_send(em_reader *r, const em_lease *lease, int64_t kept, const int64_t *kept_ids, int64_t skipped,
                         const em_stage_times *times) {
  (void)r, (void)lease, (void)kept, (void)kept_ids, (void)skipped, (void)times;
  return no_zmq();
}
em_status em_reader_send_error(em_reader *r, const em_lease *lease, const char *message) {
  (void)r, (void)lease, (void)message;
  return no_zmq();
}
em_status em_reader_fatal(em_reader *r, const char *message) {
  (void)r, (void)message;
  return no_zmq();
}
void em_reader_free(em_reader *r) { (void)r; }
#endif
