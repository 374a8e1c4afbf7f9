/* pipeline/reader_state.h - a reader's state, shared by its two halves: pipeline/reader.c (the
 * caller's side: create, leases, batches, close) and pipeline/reader_io.c (the I/O thread).
 * Internal to libember (hidden visibility); rd_ names are not API. */
#ifndef EMBER_DP_READER_STATE_H
#define EMBER_DP_READER_STATE_H
#include <pthread.h>
#include <zmq.h>
#include "reader_impl.h"
#include "ring.h"

#define OP "reader"
#define RD_MAX_CONN 16
#define RD_MAX_FRAMES 5
#define RD_MAX_SLOTS_BACK 64 /* slot numbers in one SLOTS message or LEASE, at most */
#define RD_RING_POLL_MIN_S 50e-6 /* a reader out of work looks at its ring of leases after this, */
#define RD_RING_POLL_MAX_S 200e-6 /* then after twice as long, up to this; then it sleeps */

typedef struct rd_msg {
  struct rd_msg *next;
  int conn;
  dp_hdr hdr;
  int64_t *ids; /* a lease's ids */
  int skip_bad, shm_ok; /* the trainer's settings when the lease came */
  zmq_msg_t f[RD_MAX_FRAMES];
  int nframes;
  double give_up; /* outgoing: retried until then */
} rd_msg;

typedef struct rd_conn {
  void *sock; /* control: the I/O thread's */
  void *data; /* batches and errors, sent by the caller's thread */
  int welcomed, shm_ok, skip_bad, refused;
  uint64_t session;
  double hb, hb_timeout, last_seen, last_hello, last_hb, refused_at;
} rd_conn;

struct em_reader {
  em_reader_options o;
  char *connect, *name;
  char curve_server[41], curve_public[41], curve_secret[41];
  void *zctx;
  rd_conn conn[RD_MAX_CONN];
  int nconn;
  pthread_t io;
  int io_started, efd;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* --- under mu --- */
  rd_msg *leases, *leases_tail, *out, *out_tail;
  int quit, stopped, ready, fatal_pending;
  char stop_reason[1024];
  dp_hello hello;
  char fingerprint[1024];
  dp_arena *arena;
  dp_ring *ring; /* batch notices for a trainer on this host (pipeline/ring.c); NULL: none */
  /* --- the caller's --- */
  rd_msg *cur;
  int nt, slot, have_data;
  em_tensor *tensors[16];
  dp_tdesc descs[16];
  zmq_msg_t data;
  double last_send_s;
};

/* reader.c */
void rd_free_msg(rd_msg *m);
void rd_append(rd_msg **head, rd_msg **tail, rd_msg *m);
void rd_stop(em_reader *r, const char *why); /* under mu: the caller's loop ends with status 2 */
int rd_send_frames(void *sock, const dp_hdr *h, const void *extra, size_t n, const void *extra2, size_t n2);
/* reader_io.c */
void rd_free_slots(em_reader *r, int ci, const zmq_msg_t *frame);
int rd_take_ring_leases(em_reader *r);
void *rd_io_main(void *arg);

#endif
