/* mpi_impl.h - the MPI backend (libember_mpi.so), shared by its two files:
 *   mpi_backend.c  the backend table (called on user threads), datatypes and reductions,
 *                  turning a work into MPI_I* calls and finishing it;
 *   mpi_thread.c   the communication thread and the progress engine.
 *
 * Threading: the communication thread initialises and finalizes MPI. Every MPI call in
 * between is made under one lock by the thread driving progress: a user thread waiting
 * for a work, or else the communication thread. Calls are never concurrent, so the backend
 * asks for MPI_THREAD_SERIALIZED; MPI_THREAD_MULTIPLE (a lock inside every MPI call in Open
 * MPI, and concurrent progress that buys nothing here) is not needed. User threads hand
 * work over through a queue; posting never blocks on MPI. */
#ifndef EMBER_DIST_MPI_IMPL_H
#define EMBER_DIST_MPI_IMPL_H

#include <mpi.h>
#include <pthread.h>
#include "plugins/plugin_api.h"

/* A group as MPI sees it; used under the MPI lock once created. */
typedef struct mpi_group {
  int id;
  MPI_Comm comm; /* MPI_COMM_NULL on ranks outside the group */
  int rank, size;
  int *world_ranks;
  _Atomic int64_t posted_seq; /* last collective handed to MPI or run in shared memory */
  _Atomic int64_t completed_seq; /* (queries read these; set from any thread) */
  struct mpi_group *next; /* registry */
} mpi_group;

typedef enum { TASK_WORK, TASK_NEW_GROUP, TASK_FREE_GROUP, TASK_STOP } mpi_task_kind;

/* What user threads hand to the communication thread, in one FIFO: the order in which
 * collectives reach MPI is the order the program called them, the same on every rank. */
typedef struct mpi_task {
  mpi_task_kind kind;
  em_dist_work *work; /* TASK_WORK */
  mpi_group *group; /* TASK_WORK, TASK_FREE_GROUP; TASK_NEW_GROUP: the parent */
  int n; /* TASK_NEW_GROUP */
  int *ranks;
  int id;
  mpi_group *result;
  /* synchronous tasks: the caller waits for done */
  int done;
  em_status st;
  char err[EM_DIST_MSG];
  struct mpi_task *next;
} mpi_task;

/* One operation in MPI's hands. */
typedef struct inflight {
  em_dist_work *w; /* NULL for the barrier of a group creation */
  mpi_task *task; /* that group creation */
  mpi_group *g;
  int nreq;
  MPI_Request *reqs;
  MPI_Request small[4];
  MPI_Datatype dt;
  int64_t count; /* elements received/reduced per rank */
  /* the collectives of mpi_coll.c: which step (counts checked, then data), whether this
   * entry holds back later work (em_mpi_hold), and its count arrays */
  int stage, holding;
  int64_t *scratch;
  int *ints;
  double deadline_fallback; /* for group creation and the final barrier */
  int finalizing; /* the barrier before MPI_Finalize */
  struct inflight *next;
} inflight;

/* ---- mpi_backend.c, run under the MPI lock ---- */
/* Hands w to MPI; on failure completes w with the error. Adds an inflight entry, or with
 * may_block (the calling thread waits for w anyway and is not the communication thread)
 * runs a small blocking collective to completion at once. */
void em_mpi_start_work(em_dist_work *w, mpi_group *g, int may_block);
/* Whether w runs as MPI's own blocking collective (a plain blocking call of up to 256 KB
 * per rank), and running it (under the MPI lock). */
int em_mpi_direct_eligible(const em_dist_work *w);
void em_mpi_run_blocking(em_dist_work *w, mpi_group *g);
/* The backend's run_direct entry (mpi_thread.c). */
int em_mpi_run_direct(void *group_impl, em_dist_work *w);
/* MPI_Test on f's requests; 1 when all are done (f's work then completed and f freed). */
int em_mpi_try_finish(inflight *f);
/* Custom reductions for float16/bfloat16, created after MPI_Init, freed before finalize. */
void em_mpi_create_ops(void);
void em_mpi_free_ops(void);
/* "MPI error: <text>" into buf. */
void em_mpi_error_text(int code, char *buf, size_t cap);
/* w's send buffer for MPI (a valid address, not the receive buffer's when empty). */
void *em_mpi_send_buf(const em_dist_work *w);

/* ---- mpi_coll.c: all_to_all(_v), gather, scatter, reduce, all_gather_v (under the MPI lock) ---- */
/* Bytes per rank that decide a blocking call (the same on every rank), or -1: never blocking. */
int64_t em_mpi_coll_direct_bytes(const em_dist_work *w);
/* Runs w as MPI's blocking collective; returns its MPI error code. */
int em_mpi_coll_blocking(em_dist_work *w, mpi_group *g, MPI_Datatype dt, MPI_Op op);
/* Posts w's first step into f (f->w, f->g, f->dt set); on failure completes w and frees f.
 * Returns 1 when f is in flight (the caller tracks it). */
int em_mpi_coll_start(inflight *f, MPI_Op op);
/* f's requests completed: posts the next step (returns 1: still in flight), or finishes
 * (0: the caller completes w), or has failed w (-1). */
int em_mpi_coll_advance(inflight *f);
void em_mpi_coll_free(inflight *f);

/* ---- mpi_thread.c ---- */
/* While a collective checks its counts with the other ranks before it posts its data,
 * nothing queued after it reaches MPI: every rank posts its collectives to MPI in program
 * order, as MPI requires of non-blocking collectives on one communicator. */
void em_mpi_hold(int delta);
/* Starts the thread and MPI (blocking until MPI is up). */
em_status em_mpi_thread_start(double timeout_s, int *rank, int *size, int *local_rank, mpi_group **world);
/* One round of progress on the calling thread (the backend's progress entry). */
int em_mpi_progress(void);
/* Around a blocking MPI call: the communication thread watches its deadline. */
void em_mpi_watch_begin(const em_dist_work *w);
void em_mpi_watch_end(void);
/* Queues a task; for synchronous kinds waits until the thread has run it. */
em_status em_mpi_submit(mpi_task *t, int wait);
/* The inflight list (under the MPI lock). */
void em_mpi_track(inflight *f);
void em_mpi_thread_stop(int exit_status);
void em_mpi_abort_job(const char *message, int exit_status);
/* For collectives run outside MPI (runtime/distributed/symmetric.c): progress for queries, and
 * a timeout diagnosed and reported as for MPI's own (does not return). */
void em_mpi_note_seq(void *group_impl, int64_t seq, int completed);
void em_mpi_report_timeout(void *group_impl, em_dist_work *w);
/* Registry lookups (under the MPI lock). */
void em_mpi_register_group(mpi_group *g);
void em_mpi_unregister_group(mpi_group *g);
extern MPI_Comm em_mpi_world_comm;
extern int em_mpi_world_rank, em_mpi_world_size;

#endif
