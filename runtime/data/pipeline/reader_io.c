/* pipeline/reader_io.c - a reader's I/O thread (pipeline/reader.c is the caller's side; the
 * state they share is in reader_state.h): it owns the control sockets, says hello, answers
 * heartbeats, takes leases from the trainer's messages and from the ring, returns slots, and
 * sends what the caller queued. */
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

/* ---------------------------------------------------------------- the I/O thread */
/* Under mu: a trainer went away; what was queued for it is void. Slots it was sent stay out
 * of use (LOST): the trainer, if it lives, may still have tensors viewing them. */
static void forget_conn(em_reader *r, int ci) {
  r->conn[ci].welcomed = 0;
  dp_ring_forget(r->ring, r->conn[ci].session); /* a trainer killed outright never let go of the ring */
  for (rd_msg **p = &r->leases; *p;) {
    if ((*p)->conn == ci) {
      rd_msg *m = *p;
      *p = m->next;
      rd_free_msg(m);
    } else {
      p = &(*p)->next;
    }
  }
  r->leases_tail = NULL;
  for (rd_msg *m = r->leases; m; m = m->next) r->leases_tail = m;
  if (r->arena)
    for (int s = 0; s < r->arena->nslots; s++)
      if (r->arena->state[s] == SLOT_SENT && r->arena->owner[s] == ci) r->arena->state[s] = SLOT_LOST;
}

/* Under mu: slots a trainer gives back (a SLOTS message, or the third frame of a LEASE). */
void rd_free_slots(em_reader *r, int ci, const zmq_msg_t *frame) {
  size_t bytes = zmq_msg_size((zmq_msg_t *)frame);
  if (!r->arena || bytes % sizeof(int64_t) || bytes > RD_MAX_SLOTS_BACK * sizeof(int64_t)) return;
  int64_t s[RD_MAX_SLOTS_BACK]; /* copied: frames need not be aligned */
  size_t n = bytes / sizeof(int64_t);
  memcpy(s, zmq_msg_data((zmq_msg_t *)frame), bytes);
  for (size_t i = 0; i < n; i++)
    if (s[i] >= 0 && s[i] < r->arena->nslots && r->arena->owner[s[i]] == ci && r->arena->state[s[i]] == SLOT_SENT)
      r->arena->state[s[i]] = SLOT_FREE;
}

/* Under mu: a LEASE from trainer ci (through ZeroMQ or the ring) for the caller. */
static void queue_lease(em_reader *r, int ci, const dp_hdr *h, zmq_msg_t *f, int n) {
  if (!dp_lease_valid(h, n, zmq_msg_size(&f[1]))) return;
  if (n == 3) rd_free_slots(r, ci, &f[2]);
  rd_msg *m = calloc(1, sizeof *m);
  if (m) m->ids = malloc(zmq_msg_size(&f[1]));
  if (!m || !m->ids) {
    free(m);
    return;
  }
  memcpy(m->ids, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]));
  m->conn = ci;
  m->hdr = *h;
  m->skip_bad = (h->flags & DP_FLAG_SKIP_BAD) != 0;
  m->shm_ok = r->conn[ci].shm_ok;
  rd_append(&r->leases, &r->leases_tail, m);
  pthread_cond_broadcast(&r->cv);
}

/* Under mu: the leases (and SLOTS) the attached trainer wrote into the ring, handled as if
 * they had come through ZeroMQ (one for a session no welcomed connection has is dropped, as
 * there). Returns how many the ring held. */
int rd_take_ring_leases(em_reader *r) {
  int taken = 0;
  for (int k = 0; r->ring && k < DP_RING_LEASES; k++) {
    zmq_msg_t f[DP_RING_FRAMES];
    int n = 0, got = dp_ring_take_lease(r->ring, &n, f);
    if (got == 0) break;
    taken++;
    if (got < 0) continue;
    dp_hdr h;
    if (n >= 2 && dp_hdr_valid(zmq_msg_data(&f[0]), zmq_msg_size(&f[0]))) {
      memcpy(&h, zmq_msg_data(&f[0]), sizeof h);
      for (int ci = 0; ci < r->nconn; ci++)
        if (r->conn[ci].welcomed && r->conn[ci].session == h.session) {
          if (h.kind == DP_LEASE) queue_lease(r, ci, &h, f, n);
          else if (h.kind == DP_SLOTS && dp_slots_valid(&h, n, zmq_msg_size(&f[1]))) rd_free_slots(r, ci, &f[1]);
          break;
        }
    }
    for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
  }
  return taken;
}

static void on_trainer_message(em_reader *r, int ci, zmq_msg_t *f, int n) {
  rd_conn *c = &r->conn[ci];
  if (n < 1 || !dp_hdr_valid(zmq_msg_data(&f[0]), zmq_msg_size(&f[0]))) return;
  dp_hdr h;
  memcpy(&h, zmq_msg_data(&f[0]), sizeof h);
  double now = em_clock_monotonic();
  c->last_seen = now;
  int spawned = r->o.parent_pid > 0;
  pthread_mutex_lock(&r->mu);
  switch (h.kind) {
    case DP_WELCOME:
      c->welcomed = 1;
      c->refused = 0;
      c->session = h.session;
      if (dp_seconds_valid(h.heartbeat_s)) c->hb = h.heartbeat_s;
      if (dp_seconds_valid(h.heartbeat_timeout_s) && h.heartbeat_timeout_s > c->hb)
        c->hb_timeout = h.heartbeat_timeout_s;
      c->shm_ok = (h.flags & DP_FLAG_SHM) && r->o.shared_memory;
      c->skip_bad = (h.flags & DP_FLAG_SKIP_BAD) != 0;
      break;
    case DP_REJECT: {
      char why[600];
      dp_text(why, sizeof why, n > 1 ? zmq_msg_data(&f[1]) : "", n > 1 ? zmq_msg_size(&f[1]) : 0);
      c->refused = 1;
      c->refused_at = now;
      if (spawned) {
        char msg[700];
        snprintf(msg, sizeof msg, "the trainer refused this reader: %s", why);
        rd_stop(r, msg);
      } else {
        fprintf(stderr, "ember reader: a trainer refused this reader: %s (retrying in 5 s)\n", why);
      }
      break;
    }
    case DP_RESET:
      forget_conn(r, ci);
      c->last_hello = 0;
      break;
    case DP_LEASE:
      if (c->welcomed && h.session == c->session) queue_lease(r, ci, &h, f, n);
      break;
    case DP_SLOTS:
      if (dp_slots_valid(&h, n, zmq_msg_size(&f[1]))) rd_free_slots(r, ci, &f[1]);
      break;
    case DP_BYE:
      forget_conn(r, ci);
      if (spawned) rd_stop(r, "the trainer closed");
      break;
    default: /* HEARTBEAT: also what wakes a reader sleeping while a lease went into its ring */
      pthread_cond_broadcast(&r->cv);
      break;
  }
  pthread_mutex_unlock(&r->mu);
}

static void timers(em_reader *r, double now) {
  int spawned = r->o.parent_pid > 0;
  pthread_mutex_lock(&r->mu);
  int ready = r->ready;
  dp_hello hello = r->hello;
  if (spawned && getppid() != (pid_t)r->o.parent_pid) rd_stop(r, "the trainer process is gone");
  pthread_mutex_unlock(&r->mu);
  for (int i = 0; i < r->nconn; i++) {
    rd_conn *c = &r->conn[i];
    if (!c->welcomed) {
      if (ready && (!c->refused || now - c->refused_at > 5) && now - c->last_hello >= 0.25) {
        c->last_hello = now;
        dp_hdr h;
        dp_hdr_init(&h, DP_HELLO);
        h.flags = r->o.shared_memory ? DP_FLAG_SHM : 0;
        if (rd_send_frames(c->sock, &h, &hello, sizeof hello, r->fingerprint, strlen(r->fingerprint)) == 0)
          c->last_seen = now; /* the trainer's silence counts from the hello */
      }
      continue;
    }
    if (now - c->last_hb >= c->hb) {
      c->last_hb = now;
      dp_hdr h;
      dp_hdr_init(&h, DP_HEARTBEAT);
      h.session = c->session;
      rd_send_frames(c->sock, &h, NULL, 0, NULL, 0);
    }
    if (now - c->last_seen > c->hb_timeout) {
      pthread_mutex_lock(&r->mu);
      forget_conn(r, i);
      if (spawned) rd_stop(r, "the trainer fell silent (no heartbeat)");
      pthread_mutex_unlock(&r->mu);
    }
  }
}

/* Sends what the caller queued; a message that cannot go now (no connection yet, a full
 * queue) is retried until its give_up time. */
static void flush_out(em_reader *r, rd_msg **pending) {
  pthread_mutex_lock(&r->mu);
  rd_msg *list = r->out;
  r->out = r->out_tail = NULL;
  pthread_mutex_unlock(&r->mu);
  rd_msg **tail = pending;
  while (*tail) tail = &(*tail)->next;
  *tail = list;
  double now = em_clock_monotonic();
  for (rd_msg **p = pending; *p;) {
    rd_msg *m = *p;
    void *sock = r->conn[m->conn].sock;
    int ok = 1;
    for (int i = 0; i < m->nframes && ok; i++) {
      int flags = (i + 1 < m->nframes ? ZMQ_SNDMORE : 0) | (i == 0 ? ZMQ_DONTWAIT : 0);
      zmq_msg_t copy;
      zmq_msg_init(&copy);
      zmq_msg_copy(&copy, &m->f[i]); /* shares the bytes: a failed send keeps the original */
      if (zmq_msg_send(&copy, sock, flags) < 0) {
        zmq_msg_close(&copy);
        ok = 0;
      }
    }
    if (ok || now > m->give_up) {
      if (m->hdr.kind == DP_FATAL) {
        pthread_mutex_lock(&r->mu);
        r->fatal_pending--;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
      }
      *p = m->next;
      rd_free_msg(m);
    } else {
      p = &m->next;
    }
  }
}

void *rd_io_main(void *arg) {
  em_reader *r = arg;
  rd_msg *pending = NULL;
  double last_timers = 0;
  for (;;) {
    zmq_pollitem_t items[RD_MAX_CONN + 1];
    for (int i = 0; i < r->nconn; i++) items[i] = (zmq_pollitem_t){r->conn[i].sock, 0, ZMQ_POLLIN, 0};
    items[r->nconn] = (zmq_pollitem_t){NULL, r->efd, ZMQ_POLLIN, 0};
    if (zmq_poll(items, r->nconn + 1, pending ? 5 : 50) < 0 && zmq_errno() == ETERM) break;
    if (items[r->nconn].revents & ZMQ_POLLIN) {
      uint64_t v;
      ssize_t g = read(r->efd, &v, sizeof v);
      (void)g;
    }
    flush_out(r, &pending);
    pthread_mutex_lock(&r->mu);
    int quit = r->quit;
    pthread_mutex_unlock(&r->mu);
    if (quit) break;
    for (int i = 0; i < r->nconn; i++) {
      for (int k = 0; k < 256; k++) {
        zmq_msg_t f[RD_MAX_FRAMES];
        int n = 0, more = 1, bad = 0;
        while (more) {
          zmq_msg_t tmp;
          zmq_msg_init(&tmp);
          if (zmq_msg_recv(&tmp, r->conn[i].sock, n == 0 && !bad ? ZMQ_DONTWAIT : 0) < 0) {
            zmq_msg_close(&tmp);
            break;
          }
          more = zmq_msg_more(&tmp);
          if (n < RD_MAX_FRAMES) {
            f[n++] = tmp;
          } else {
            zmq_msg_close(&tmp);
            bad = 1;
          }
        }
        if (n == 0) break;
        if (!bad) on_trainer_message(r, i, f, n);
        for (int j = 0; j < n; j++) zmq_msg_close(&f[j]);
      }
    }
    double now = em_clock_monotonic();
    if (now - last_timers >= 0.02) {
      last_timers = now;
      timers(r, now);
    }
  }
  while (pending) {
    rd_msg *m = pending;
    pending = m->next;
    rd_free_msg(m);
  }
  return NULL;
}

#endif
