/* tcp_impl.h - the "tcp" backend: CPU collectives over ZeroMQ for processes started
 * torchrun-style (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; no MPI). Three files:
 *   tcp_backend.c  the table (user threads), the rendezvous at MASTER_ADDR:MASTER_PORT;
 *   tcp_thread.c   the communication thread: the mesh, matching, collectives, deadlines,
 *                  dead peers, diagnosis, abort;
 *   tcp_reduce.c   elementwise reductions for every dtype.
 *
 * Wiring: every rank binds one PULL socket (its data endpoint) and connects one PUSH socket
 * to each peer's; a message is a header frame and a payload frame. Only the communication
 * thread touches sockets after init. Collectives are matched by (group id, sequence number,
 * phase, sender), point-to-point messages by (group id, sender, tag) in arrival order, so
 * messages of different collectives can never mix. */
#ifndef EMBER_DIST_TCP_IMPL_H
#define EMBER_DIST_TCP_IMPL_H

#include <stdint.h>
#include "distributed/dist_impl.h"

#define TCP_MAGIC 0x454d4254u /* "EMBT" */

typedef enum {
  TCP_MSG_COLL = 1, /* one phase of a collective: seq, phase */
  TCP_MSG_P2P, /* send/recv: seq holds the tag */
  TCP_MSG_HEARTBEAT,
  TCP_MSG_BYE, /* the sender finished cleanly: its connections close next */
  TCP_MSG_ABORT, /* the sender ends the job: aux = exit status, payload = why */
  TCP_MSG_QUERY, /* how far did you get on group `group`? (seq: the collective asked about) */
  TCP_MSG_ANSWER, /* seq = last posted, aux = last completed (-2: finished) */
  TCP_MSG_MESH_HELLO, /* init: the data connection works */
} tcp_msg_kind;

/* Wire header (both ends run the same build on machines of one byte order). */
typedef struct tcp_hdr {
  uint32_t magic;
  uint8_t kind; /* tcp_msg_kind */
  uint8_t op; /* TCP_MSG_COLL: em_dist_opkind, checked against the receiver's */
  uint8_t dtype; /* em_dtype of the payload */
  uint8_t phase;
  int32_t src; /* world rank of the sender */
  int32_t group; /* group id */
  int64_t seq;
  int64_t aux;
  int64_t total; /* TCP_MSG_COLL: elements of the whole collective on the sender */
} tcp_hdr;

/* A group as this backend sees it. */
typedef struct tcp_group {
  int id, rank, size;
  int *world_ranks; /* group rank -> world rank */
  int *group_rank; /* world rank -> group rank, -1 for non-members */
  _Atomic int64_t posted_seq, completed_seq;
  struct tcp_group *next; /* registry (tcp_thread.c) */
} tcp_group;

/* ---- tcp_thread.c ---- */
typedef struct tcp_start {
  void *ctx;
  void *pull; /* this rank's data socket, bound */
  void *rendezvous; /* rank 0: the ROUTER at MASTER_ADDR:MASTER_PORT (answers latecomers) */
  char **endpoints; /* [world] data endpoints */
  int rank, size;
  double timeout;
  char master[160]; /* "127.0.0.1:29500", for messages */
} tcp_start;
/* Connects the mesh, starts the thread, waits until every peer answered over its data
 * connection (or the deadline); *world receives the world group. */
em_status dist_tcp_thread_start(tcp_start *s, double deadline, tcp_group **world);
em_status dist_tcp_submit(tcp_group *g, em_dist_work *w);
void dist_tcp_thread_stop(int exit_status);
void dist_tcp_abort_job(const char *message, int exit_status);
void dist_tcp_note_seq(void *group_impl, int64_t seq, int completed);
void dist_tcp_report_timeout(void *group_impl, em_dist_work *w);
void dist_tcp_register_group(tcp_group *g);
void dist_tcp_unregister_group(tcp_group *g);
int dist_tcp_thread_running(void);

#endif
