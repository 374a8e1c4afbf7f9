/* gloo_impl.h - the Gloo backend (libember_gloo.so), shared by its files:
 *   gloo_init.c    the backend table, the start (environment, the c10d store, rendezvous
 *                  checks, Gloo's TCP device, the world's context), groups, shutdown;
 *   gloo_run.c     the communication thread that runs collectives in posting order, the
 *                  signature check that makes mismatched calls an error on every rank,
 *                  send/recv, and the reductions;
 *   gloo_health.c  the heartbeat each rank publishes in the store, the watch on a peer,
 *                  the diagnosis of a timed-out or failed collective (which rank is missing
 *                  and why) and ending the job (exit status 124 for a timeout);
 *   gloo_shim.cpp  Gloo's C++ API behind the C interface of gloo_shim.h.
 *
 * Rendezvous goes through PyTorch's c10d TCPStore protocol (ember/dist.h em_dist_store_*):
 * under torchrun (TORCHELASTIC_USE_AGENT_STORE=True) the agent's store at
 * MASTER_ADDR:MASTER_PORT, otherwise one rank 0 hosts there. Gloo's full-mesh connections,
 * the heartbeats and the abort notice all live in that store under one key prefix. */
#ifndef EMBER_GLOO_IMPL_H
#define EMBER_GLOO_IMPL_H

#include <pthread.h>
#include "gloo_shim.h"
#include "plugins/plugin_api.h"

/* A group as Gloo sees it: its own context (keys "gloo/<id>/" of the store). */
typedef struct gl_group {
  int id, rank, size; /* rank -1: not a member (no context) */
  int *world_ranks;
  glx_context *ctx;
  _Atomic int64_t posted, completed; /* last collective started and finished (heartbeats) */
  struct gl_group *next;
} gl_group;

typedef struct gl_state {
  int rank, size, local_rank;
  double timeout;
  em_dist_store *store; /* rendezvous, groups, diagnosis (one request at a time) */
  int hosting; /* this rank runs the store's server (no launcher store) */
  char prefix[96]; /* every key of the job starts with it */
  char master[200]; /* "MASTER_ADDR:MASTER_PORT = host:port", for messages */
  char host[64]; /* gethostname */
  glx_device *dev;
  gl_group *world;
  pthread_mutex_t groups_lock;
  gl_group *groups;
  atomic_int aborting; /* a thread is ending the job */
} gl_state;
extern gl_state G;

/* prefix + the formatted name into buf */
void gl_key(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- gloo_run.c */
em_status gl_run_start(void);
void gl_run_stop(void); /* finishes what is queued */
em_status gl_post(void *group_impl, em_dist_work *w);
int gl_run_direct(void *group_impl, em_dist_work *w);

/* ---- gloo_health.c */
em_status gl_health_start(void); /* publishes the first heartbeat, starts the monitor */
void gl_health_stop(int finished);
/* w on g failed in Gloo (code GLX_TIMEOUT or GLX_IO, why: Gloo's message; w NULL with
 * what: a step without a work): names the missing ranks and why, ends the job. */
void gl_fail_job(gl_group *g, em_dist_work *w, const char *what, int code, const char *why) __attribute__((noreturn));
/* Prints message (may be NULL), tells every rank through the store, exits with status. */
void gl_abort_job(const char *message, int exit_status) __attribute__((noreturn));
void gl_report_timeout(void *group_impl, em_dist_work *w);
/* The store host, at a clean end: waits until every rank has finished (they may still
 * need the store), watching for an abort. */
void gl_wait_for_ranks(void);

#endif
