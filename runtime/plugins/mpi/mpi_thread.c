/* mpi_thread.c - the communication thread, and progress driven by waiting threads.
 *
 * Every MPI call after initialisation runs under one lock (S.mpi), taken by whichever
 * thread drives progress; MPI sees one caller at a time (MPI_THREAD_SERIALIZED). A round of
 * progress takes the tasks user threads queued (in order), posts them as non-blocking MPI
 * operations, MPI_Tests everything in flight (Open MPI has no progress thread of its own:
 * these tests are what moves the data), enforces deadlines and answers other ranks' status
 * queries.
 *
 * Who drives it: a thread that waits for a work does, itself, polling until its work is
 * done (no hand-off to another thread and no wake-up afterwards: a blocking collective
 * costs about what MPI's own costs). While nobody waits (asynchronous work, such as the
 * buckets a data-parallel backward starts while it goes on computing), the communication
 * thread does: polling continuously when this rank has a core to spare, otherwise with
 * short sleeps between rounds, so that it does not take the CPU from the computation it
 * overlaps with. With nothing in flight it sleeps, waking every 20 ms to answer queries.
 *
 * Timeouts. Every work carries a deadline. When one passes, the thread driving progress
 * asks each rank that should take part, on a private communicator, how far it got (a
 * rank's answer is the last collective it posted on that group), waits up to 1.5 s for the
 * answers, prints which ranks are missing and why, and aborts the job with MPI_Abort (exit
 * status 124): a collective cannot be cancelled, so the job cannot go on. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "mpi_impl.h"

#define TAG_QUERY 1
#define TAG_ANSWER 2
#define QUERY_GRACE_S 1.5
#define IDLE_WAKE_MS 20
#define ASIDE_WAKE_MS 1
#define MAX_BACKOFF_NS 200000

MPI_Comm em_mpi_world_comm = MPI_COMM_NULL;
static __thread int on_comm_thread; /* this thread is the communication thread */
int em_mpi_world_rank, em_mpi_world_size;

static struct {
  pthread_t thread;
  int running; /* the thread exists */
  pthread_mutex_t mpi; /* held around every MPI call after MPI_Init */
  pthread_mutex_t lock; /* the queue, task completion, start-up, stop */
  pthread_cond_t cond; /* queue not empty, task done, init done */
  mpi_task *head, *tail;
  atomic_int queued;
  int stopping;
  atomic_int abort_requested;
  int abort_status;
  char abort_msg[EM_DIST_MSG];
  /* start-up */
  int init_done;
  em_status init_st;
  char init_err[EM_DIST_MSG];
  double timeout;
  int local_rank;
  mpi_group *world;
  /* the thread's own */
  MPI_Comm ctrl;
  inflight *inflight, *inflight_tail;
  atomic_int n_inflight;
  atomic_int hold; /* collectives checking counts before their data: later tasks wait */
  mpi_group *groups;
  MPI_Request qreq;
  int64_t qbuf[2];
  int64_t *answers; /* [world_size][3], one outgoing answer buffer per asker */
  double last_query_check;
  int spin;
  int finalizing; /* past the end of the program: in the final barrier */
  /* the blocking call a waiting thread is inside, watched by the communication thread */
  atomic_int watching;
  _Atomic double watch_deadline, watch_posted;
  em_dist_work watch_copy; /* what the watched work was, described only on timeout */
} S = {.mpi = PTHREAD_MUTEX_INITIALIZER, .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

/* ---------------------------------------------------------------- registry */

void em_mpi_register_group(mpi_group *g) {
  g->next = S.groups;
  S.groups = g;
}

void em_mpi_unregister_group(mpi_group *g) {
  for (mpi_group **p = &S.groups; *p; p = &(*p)->next)
    if (*p == g) {
      *p = g->next;
      return;
    }
}

static mpi_group *find_group(int64_t id) {
  for (mpi_group *g = S.groups; g; g = g->next)
    if (g->id == id) return g;
  return NULL;
}

void em_mpi_hold(int delta) { atomic_fetch_add(&S.hold, delta); }

/* Puts tasks (a list) back at the front of the queue, in order. */
static void requeue_front(mpi_task *tasks) {
  mpi_task *last = tasks;
  while (last->next) last = last->next;
  pthread_mutex_lock(&S.lock);
  last->next = S.head;
  if (!S.head) S.tail = last;
  S.head = tasks;
  atomic_store(&S.queued, 1);
  pthread_mutex_unlock(&S.lock);
}

void em_mpi_track(inflight *f) {
  f->next = NULL;
  if (S.inflight_tail) S.inflight_tail->next = f;
  else S.inflight = f;
  S.inflight_tail = f;
  atomic_fetch_add(&S.n_inflight, 1);
}

/* ---------------------------------------------------------------- status queries */

/* Answers every query that has arrived: {group id, last posted, last completed}. */
static void service_queries(void) {
  for (;;) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Test(&S.qreq, &flag, &st) != MPI_SUCCESS || !flag) return;
    int src = st.MPI_SOURCE;
    mpi_group *g = find_group(S.qbuf[0]);
    int64_t *a = &S.answers[3 * src];
    a[0] = S.qbuf[0];
    a[1] = g ? g->posted_seq : -1;
    a[2] = S.finalizing ? -2 : g ? g->completed_seq : -1; /* -2: this rank has finished */
    MPI_Request r;
    if (MPI_Isend(a, 3, MPI_INT64_T, src, TAG_ANSWER, S.ctrl, &r) == MPI_SUCCESS) MPI_Request_free(&r);
    MPI_Irecv(S.qbuf, 2, MPI_INT64_T, MPI_ANY_SOURCE, TAG_QUERY, S.ctrl, &S.qreq);
  }
}

static void sleep_ns(long ns) {
  struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
  nanosleep(&ts, NULL);
}

/* Appends "rank r" (with its world rank when g is not the world) to buf. */
static int rank_text(char *buf, size_t cap, const mpi_group *g, int r) {
  if (g->id == 0) return snprintf(buf, cap, "rank %d", r);
  return snprintf(buf, cap, "rank %d (world rank %d)", r, g->world_ranks[r]);
}

/* Prints why f timed out and ends the job. Never returns. */
static void report_timeout(inflight *f, double now) {
  mpi_group *g = f->g;
  em_dist_work *w = f->w;
  char what[320];
  if (w) emp_dist_describe(w, what, sizeof what);
  else if (f->finalizing) snprintf(what, sizeof what, "the end of the job (every rank meets before MPI_Finalize)");
  else snprintf(what, sizeof what, "new_group on %s", g->id ? "a subgroup" : "the world group");
  double posted = w ? w->posted_at : f->deadline_fallback - S.timeout;
  int p2p = w && (w->kind == EM_DIST_OP_SEND || w->kind == EM_DIST_OP_RECV);
  int64_t seq = w ? w->seq : 0;

  /* Ask the ranks that should take part. */
  int np = 0, *peers = malloc(sizeof(int) * g->size);
  int64_t *ans = malloc(sizeof(int64_t) * 3 * g->size), (*query)[2] = malloc(sizeof *query * g->size);
  MPI_Request *rreq = malloc(sizeof(MPI_Request) * g->size);
  int *answered = calloc(g->size, sizeof(int));
  if (!peers || !ans || !query || !rreq || !answered) {
    fprintf(stderr, "ember.dist: %s: timed out after %.3g s on rank %d; aborting the job\n", what, now - posted,
            g->rank);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, EM_DIST_EXIT_TIMEOUT);
    _exit(EM_DIST_EXIT_TIMEOUT);
  }
  for (int r = 0; r < g->size; r++) {
    if (r == g->rank || (p2p && r != w->peer)) continue;
    int wr = g->world_ranks[r];
    query[np][0] = g->id;
    query[np][1] = seq;
    peers[np] = r;
    MPI_Request sreq;
    MPI_Irecv(&ans[3 * np], 3, MPI_INT64_T, wr, TAG_ANSWER, S.ctrl, &rreq[np]);
    if (MPI_Isend(query[np], 2, MPI_INT64_T, wr, TAG_QUERY, S.ctrl, &sreq) == MPI_SUCCESS) MPI_Request_free(&sreq);
    np++;
  }
  double until = em_clock_monotonic() + QUERY_GRACE_S;
  int left = np;
  while (left > 0 && em_clock_monotonic() < until) {
    for (int i = 0; i < np; i++) {
      int flag = 0;
      if (!answered[i] && MPI_Test(&rreq[i], &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag) answered[i] = 1, left--;
    }
    service_queries();
    sleep_ns(1000000);
  }

  char msg[2048];
  int n = snprintf(msg, sizeof msg, "ember.dist: %s: timed out after %.3g s on rank %d", what, now - posted, g->rank);
  int listed = 0;
  for (int i = 0; i < np && n < (int)sizeof msg - 300; i++) {
    int64_t *a = &ans[3 * i];
    if (answered[i] && (f->finalizing ? a[2] == -2 : !p2p && a[1] >= seq)) continue; /* it has reached it */
    n += snprintf(msg + n, sizeof msg - n, "%s", listed ? "; " : ", waiting for ");
    n += rank_text(msg + n, sizeof msg - n, g, peers[i]);
    if (!answered[i]) n += snprintf(msg + n, sizeof msg - n, " (no answer: dead, stopped or hung)");
    else if (f->finalizing)
      n += snprintf(msg + n, sizeof msg - n, " (alive, but still running: its last collective on this group is #%lld)",
                    (long long)a[1]);
    else if (p2p)
      n += snprintf(msg + n, sizeof msg - n, " (alive, its last collective on this group is #%lld, but no matching %s)",
                    (long long)a[1], w->kind == EM_DIST_OP_RECV ? "send arrived" : "receive was posted");
    else
      n += snprintf(msg + n, sizeof msg - n,
                    " (alive, but has not reached it: its last collective on this group is #%lld)", (long long)a[1]);
    listed++;
  }
  if (!listed && np > 0) {
    const char *also = "";
    if (w && (w->kind == EM_DIST_OP_GATHER || w->kind == EM_DIST_OP_SCATTER || w->kind == EM_DIST_OP_REDUCE ||
              w->kind == EM_DIST_OP_BROADCAST))
      also = ", or another root";
    else if (w && (w->kind == EM_DIST_OP_ALL_TO_ALL_V || w->kind == EM_DIST_OP_ALL_GATHER_V))
      also = " (their counts were checked to agree)";
    n += snprintf(msg + n, sizeof msg - n,
                  ": every rank has reached it, so the ranks called collectives that do not match (a different order, "
                  "or other sizes or dtypes on some rank%s)",
                  also);
  }
  snprintf(msg + n, sizeof msg - n, "; aborting the job");
  fprintf(stderr, "%s\n", msg);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, EM_DIST_EXIT_TIMEOUT);
  _exit(EM_DIST_EXIT_TIMEOUT);
}

void em_mpi_note_seq(void *group_impl, int64_t seq, int completed) {
  mpi_group *g = group_impl;
  if (completed) g->completed_seq = seq;
  else g->posted_seq = seq;
}

void em_mpi_report_timeout(void *group_impl, em_dist_work *w) {
  inflight f;
  memset(&f, 0, sizeof f);
  f.w = w;
  f.g = group_impl;
  pthread_mutex_lock(&S.mpi);
  report_timeout(&f, em_clock_monotonic());
}

/* ---------------------------------------------------------------- tasks */

static void finish_task(mpi_task *t, em_status st, const char *err) {
  pthread_mutex_lock(&S.lock);
  t->st = st;
  if (st) snprintf(t->err, sizeof t->err, "%s", err);
  t->done = 1;
  pthread_cond_broadcast(&S.cond);
  pthread_mutex_unlock(&S.lock);
}

/* Group creation, second half: everyone reached the barrier, so MPI_Comm_split (which
 * blocks) cannot wait for a missing rank. */
static void split_group(mpi_task *t) {
  mpi_group *parent = t->group, *g = calloc(1, sizeof *g);
  int pos = -1;
  for (int i = 0; i < t->n; i++)
    if (t->ranks[i] == parent->rank) pos = i;
  MPI_Comm comm = MPI_COMM_NULL;
  int rc = MPI_Comm_split(parent->comm, pos >= 0 ? 0 : MPI_UNDEFINED, pos, &comm);
  if (!g || !(g->world_ranks = malloc(sizeof(int) * t->n)) || rc != MPI_SUCCESS) {
    char err[300];
    if (rc != MPI_SUCCESS) em_mpi_error_text(rc, err, sizeof err);
    else snprintf(err, sizeof err, "out of memory");
    if (g) free(g->world_ranks);
    free(g);
    finish_task(t, EM_ERR_RUNTIME, err);
    return;
  }
  if (comm != MPI_COMM_NULL) MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  g->id = t->id;
  g->comm = comm;
  g->rank = pos;
  g->size = t->n;
  for (int i = 0; i < t->n; i++) g->world_ranks[i] = parent->world_ranks[t->ranks[i]];
  em_mpi_register_group(g);
  t->result = g;
  finish_task(t, EM_OK, NULL);
}

static void run_task(mpi_task *t) {
  switch (t->kind) {
    case TASK_WORK:
      em_mpi_start_work(t->work, t->group, !on_comm_thread);
      free(t);
      break;
    case TASK_NEW_GROUP: {
      inflight *f = calloc(1, sizeof *f);
      int rc = f ? MPI_Ibarrier(t->group->comm, &f->small[0]) : MPI_ERR_NO_MEM;
      if (rc != MPI_SUCCESS) {
        char err[300];
        em_mpi_error_text(rc, err, sizeof err);
        free(f);
        finish_task(t, EM_ERR_RUNTIME, err);
        break;
      }
      f->task = t;
      f->g = t->group;
      f->reqs = f->small;
      f->nreq = 1;
      f->deadline_fallback = em_clock_monotonic() + S.timeout;
      em_mpi_track(f);
      break;
    }
    case TASK_FREE_GROUP: {
      mpi_group *g = t->group;
      em_mpi_unregister_group(g);
      if (g->comm != MPI_COMM_NULL) MPI_Comm_free(&g->comm);
      free(g->world_ranks);
      free(g);
      finish_task(t, EM_OK, NULL);
      break;
    }
    case TASK_STOP: break;
  }
}

/* 1 when f finished (and was freed). */
static int try_finish(inflight *f) {
  if (f->w) return em_mpi_try_finish(f);
  int flag = 0;
  if (MPI_Test(&f->small[0], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) flag = 1;
  if (!flag) return 0;
  split_group(f->task);
  free(f);
  return 1;
}

/* ---------------------------------------------------------------- the loop */

static int progress_all(void) {
  int progressed = 0;
  inflight *prev = NULL;
  for (inflight *f = S.inflight; f;) {
    inflight *next = f->next;
    if (try_finish(f)) {
      if (prev) prev->next = next;
      else S.inflight = next;
      if (S.inflight_tail == f) S.inflight_tail = prev;
      atomic_fetch_sub(&S.n_inflight, 1);
      progressed = 1;
    } else {
      prev = f;
    }
    f = next;
  }
  return progressed;
}

static void check_deadlines(double now) {
  for (inflight *f = S.inflight; f; f = f->next) {
    double deadline = f->w ? atomic_load(&f->w->deadline) : f->deadline_fallback;
    if (now > deadline) report_timeout(f, now);
  }
}

static void do_abort(void) {
  if (S.abort_msg[0]) {
    fprintf(stderr, "%s\n", S.abort_msg);
    fflush(stderr);
  }
  MPI_Abort(MPI_COMM_WORLD, S.abort_status);
  _exit(S.abort_status);
}

void em_mpi_watch_begin(const em_dist_work *w) {
  /* the fields a description needs; the tensors and group stay alive while watched */
  S.watch_copy.kind = w->kind;
  S.watch_copy.seq = w->seq;
  S.watch_copy.peer = w->peer;
  S.watch_copy.tag = w->tag;
  S.watch_copy.in = w->in;
  S.watch_copy.out = w->out;
  S.watch_copy.group = w->group;
  atomic_store(&S.watch_posted, w->posted_at);
  atomic_store(&S.watch_deadline, atomic_load(&w->deadline));
  atomic_store(&S.watching, 1);
}

void em_mpi_watch_end(void) { atomic_store(&S.watching, 0); }

/* On the communication thread, which cannot call MPI while the watched thread is inside a
 * call: a deadline passed there ends the job without asking the other ranks. */
static void check_watch(void) {
  if (!atomic_load(&S.watching)) return;
  double now = em_clock_monotonic();
  if (now <= atomic_load(&S.watch_deadline)) return;
  char what[320];
  emp_dist_describe(&S.watch_copy, what, sizeof what);
  fprintf(stderr,
          "ember.dist: %s: timed out after %.3g s on rank %d inside a blocking MPI call (a small blocking "
          "collective, run by MPI itself: the ranks that did not take part cannot be named); aborting the job\n",
          what, now - atomic_load(&S.watch_posted), em_mpi_world_rank);
  fflush(stderr);
  alarm(10); /* should MPI_Abort not get through while another thread is inside MPI */
  MPI_Abort(MPI_COMM_WORLD, EM_DIST_EXIT_TIMEOUT);
  _exit(EM_DIST_EXIT_TIMEOUT);
}

/* One round of progress; the caller holds S.mpi. Returns 1 if anything started or ended. */
static int progress_once(void) {
  mpi_task *tasks = NULL;
  if (atomic_load(&S.queued) && !atomic_load(&S.hold)) {
    pthread_mutex_lock(&S.lock);
    tasks = S.head;
    if (on_comm_thread) {
      /* Works whose caller waits are started by that caller (see em_mpi_start_work); this
       * thread takes only what comes before the first of them, and order is kept. */
      mpi_task **cut = &tasks;
      while (*cut && !((*cut)->kind == TASK_WORK && (*cut)->work->blocking)) cut = &(*cut)->next;
      S.head = *cut;
      if (!S.head) S.tail = NULL;
      *cut = NULL;
    } else {
      S.head = S.tail = NULL;
    }
    atomic_store(&S.queued, S.head != NULL);
    pthread_mutex_unlock(&S.lock);
  }
  int progressed = tasks != NULL;
  while (tasks) {
    if (atomic_load(&S.hold)) { /* a task just posted checks its counts first */
      requeue_front(tasks);
      break;
    }
    mpi_task *next = tasks->next;
    run_task(tasks);
    tasks = next;
  }
  if (S.inflight) progressed |= progress_all();
  double now = em_clock_monotonic();
  if (now - S.last_query_check > 0.005) {
    service_queries();
    S.last_query_check = now;
  }
  check_deadlines(now);
  return progressed;
}

/* The backend's progress entry: a round on the calling (waiting) thread, unless another
 * thread is in the middle of one. */
int em_mpi_progress(void) {
  if (!S.running) return -1;
  if (pthread_mutex_trylock(&S.mpi)) return 0;
  if (atomic_load(&S.abort_requested)) do_abort();
  int r = progress_once();
  pthread_mutex_unlock(&S.mpi);
  return r;
}

/* A plain blocking collective on the calling thread: after whatever was queued before it
 * (order), as MPI's blocking collective. 0 when not eligible (posted as usual). */
int em_mpi_run_direct(void *group_impl, em_dist_work *w) {
  if (!S.running || !em_mpi_direct_eligible(w)) return 0;
  pthread_mutex_lock(&S.mpi);
  if (atomic_load(&S.abort_requested)) do_abort();
  /* post what came first, all of it (a collective checking its counts holds the rest back) */
  while (atomic_load(&S.queued) || atomic_load(&S.hold)) progress_once();
  em_mpi_run_blocking(w, group_impl);
  pthread_mutex_unlock(&S.mpi);
  return 1;
}

static void timed_wait_ms(int ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += ms * 1000000L;
  if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
  pthread_cond_timedwait(&S.cond, &S.lock, &ts);
}

static void loop(void) {
  unsigned idle = 0;
  long backoff = 0;
  for (;;) {
    /* Sleep while there is nothing to do, or while a waiting thread drives progress. */
    pthread_mutex_lock(&S.lock);
    for (;;) {
      if (atomic_load(&S.abort_requested)) break;
      int busy = S.head || atomic_load(&S.n_inflight) > 0;
      if (S.stopping && !busy) {
        pthread_mutex_unlock(&S.lock);
        return;
      }
      if (busy && emp_dist_num_waiters() == 0) break;
      if (atomic_load(&S.watching)) {
        timed_wait_ms(ASIDE_WAKE_MS);
        check_watch();
      } else if (!busy) {
        timed_wait_ms(IDLE_WAKE_MS);
        if (!S.head && !S.stopping) break; /* woke with nothing queued: answer queries */
      } else {
        timed_wait_ms(ASIDE_WAKE_MS);
      }
    }
    pthread_mutex_unlock(&S.lock);
    if (pthread_mutex_trylock(&S.mpi)) { /* a waiting thread drives MPI (maybe inside a call) */
      check_watch();
      sleep_ns(ASIDE_WAKE_MS * 1000000L);
      continue;
    }
    if (atomic_load(&S.abort_requested)) do_abort();
    int progressed = progress_once();
    int inflight = S.inflight != NULL;
    pthread_mutex_unlock(&S.mpi);
    /* pacing: nobody waits (else this thread would be asleep) */
    if (progressed || !inflight) {
      idle = 0, backoff = 0;
    } else if (S.spin) {
      if ((++idle & 63) == 0) sched_yield();
    } else if (++idle > 16) {
      backoff = backoff ? (backoff * 2 > MAX_BACKOFF_NS ? MAX_BACKOFF_NS : backoff * 2) : 5000;
      sleep_ns(backoff);
    }
  }
}

/* How to poll: EMBER_DIST_POLL=spin or adaptive; by default spin when this rank has more
 * cores than compute threads (the thread then costs the computation nothing). */
static int choose_spin(int local_size) {
  const char *p = getenv("EMBER_DIST_POLL");
  if (p && !strcmp(p, "spin")) return 1;
  if (p && !strcmp(p, "adaptive")) return 0;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return cpus / (local_size > 0 ? local_size : 1) > em_get_num_threads();
}

/* Before MPI_Finalize, whose own wait for the other ranks has no timeout: every rank
 * meets here, and a rank that never comes is reported (and the job ended) rather than
 * hanging this one at exit. */
static void final_barrier(void) {
  inflight f;
  memset(&f, 0, sizeof f);
  f.g = S.world;
  f.finalizing = 1;
  f.deadline_fallback = em_clock_monotonic() + S.timeout;
  S.finalizing = 1;
  if (MPI_Ibarrier(em_mpi_world_comm, &f.small[0]) != MPI_SUCCESS) return;
  for (;;) {
    int flag = 0;
    if (MPI_Test(&f.small[0], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag) return;
    service_queries();
    double now = em_clock_monotonic();
    if (now > f.deadline_fallback) report_timeout(&f, now);
    sleep_ns(50000);
  }
}

static void init_failed(const char *fmt, int code) {
  char text[400] = "";
  if (code) em_mpi_error_text(code, text, sizeof text);
  pthread_mutex_lock(&S.lock);
  S.init_st = EM_ERR_RUNTIME;
  snprintf(S.init_err, sizeof S.init_err, fmt, text);
  S.init_done = 1;
  pthread_cond_broadcast(&S.cond);
  pthread_mutex_unlock(&S.lock);
}

static void *comm_main(void *arg) {
  (void)arg;
  on_comm_thread = 1;
  int provided = 0;
  int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
  if (rc != MPI_SUCCESS) {
    init_failed("dist.init: MPI_Init_thread failed: %s", rc);
    return NULL;
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &em_mpi_world_comm);
  MPI_Comm_dup(MPI_COMM_WORLD, &S.ctrl);
  MPI_Comm_set_errhandler(em_mpi_world_comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &em_mpi_world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &em_mpi_world_size);
  MPI_Comm node;
  int local_size = 1;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, em_mpi_world_rank, MPI_INFO_NULL, &node) ==
      MPI_SUCCESS) {
    MPI_Comm_rank(node, &S.local_rank);
    MPI_Comm_size(node, &local_size);
    MPI_Comm_free(&node);
  }
  mpi_group *w = calloc(1, sizeof *w);
  S.answers = calloc(3 * (size_t)em_mpi_world_size, sizeof(int64_t));
  if (!w || !S.answers || !(w->world_ranks = malloc(sizeof(int) * em_mpi_world_size))) {
    init_failed("dist.init: out of memory%s", 0);
    return NULL;
  }
  w->id = 0;
  w->comm = em_mpi_world_comm;
  w->rank = em_mpi_world_rank;
  w->size = em_mpi_world_size;
  for (int i = 0; i < w->size; i++) w->world_ranks[i] = i;
  em_mpi_register_group(w);
  em_mpi_create_ops();
  MPI_Irecv(S.qbuf, 2, MPI_INT64_T, MPI_ANY_SOURCE, TAG_QUERY, S.ctrl, &S.qreq);
  S.spin = choose_spin(local_size);
  pthread_mutex_lock(&S.lock);
  S.world = w;
  S.init_done = 1;
  pthread_cond_broadcast(&S.cond);
  pthread_mutex_unlock(&S.lock);

  loop();

  /* clean shutdown: nothing is in flight any more */
  pthread_mutex_lock(&S.mpi);
  final_barrier();
  MPI_Cancel(&S.qreq);
  MPI_Wait(&S.qreq, MPI_STATUS_IGNORE);
  for (mpi_group *g = S.groups; g; g = g->next)
    if (g->comm != MPI_COMM_NULL && g->comm != em_mpi_world_comm) MPI_Comm_free(&g->comm);
  em_mpi_free_ops();
  MPI_Comm_free(&S.ctrl);
  MPI_Comm_free(&em_mpi_world_comm);
  MPI_Finalize();
  pthread_mutex_unlock(&S.mpi);
  return NULL;
}

/* ---------------------------------------------------------------- user threads */

em_status em_mpi_thread_start(double timeout_s, int *rank, int *size, int *local_rank, mpi_group **world) {
  S.timeout = timeout_s;
  /* Open MPI's non-blocking allreduce (libnbc) takes its binomial tree for every in-place
   * call on fewer than 4 ranks: the whole buffer goes to one rank and back, about twice
   * the time of reduce-scatter + allgather on a large bucket. Unless the user chose an
   * algorithm, take reduce-scatter + allgather (Rabenseifner's; libnbc falls back to its
   * ring below one element per rank). Set before MPI starts, on this thread. */
  setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", 0);
  if (pthread_create(&S.thread, NULL, comm_main, NULL))
    return em_set_error(EM_ERR_RUNTIME, "dist.init: cannot start the communication thread (%s)", strerror(errno));
  pthread_mutex_lock(&S.lock);
  while (!S.init_done) pthread_cond_wait(&S.cond, &S.lock);
  pthread_mutex_unlock(&S.lock);
  if (S.init_st) {
    pthread_join(S.thread, NULL);
    return em_set_error(S.init_st, "%s", S.init_err);
  }
  S.running = 1;
  *rank = em_mpi_world_rank;
  *size = em_mpi_world_size;
  *local_rank = S.local_rank;
  *world = S.world;
  return EM_OK;
}

em_status em_mpi_submit(mpi_task *t, int wait) {
  pthread_mutex_lock(&S.lock);
  if (!S.running || S.stopping) {
    pthread_mutex_unlock(&S.lock);
    return em_set_error(EM_ERR_RUNTIME, "dist: the distributed world was finalized");
  }
  t->next = NULL;
  if (S.tail) S.tail->next = t;
  else S.head = t;
  S.tail = t;
  atomic_store(&S.queued, 1);
  /* a blocking work is posted by its caller's own wait; anything else wakes the thread */
  if (!(t->kind == TASK_WORK && t->work->blocking)) pthread_cond_broadcast(&S.cond);
  if (wait)
    while (!t->done) pthread_cond_wait(&S.cond, &S.lock);
  pthread_mutex_unlock(&S.lock);
  if (wait && t->st) return em_set_error(t->st, "%s", t->err);
  return EM_OK;
}

void em_mpi_abort_job(const char *message, int exit_status) {
  if (!S.running) {
    if (message) fprintf(stderr, "%s\n", message);
    _exit(exit_status);
  }
  pthread_mutex_lock(&S.lock);
  snprintf(S.abort_msg, sizeof S.abort_msg, "%s", message ? message : "");
  S.abort_status = exit_status;
  atomic_store(&S.abort_requested, 1);
  pthread_cond_broadcast(&S.cond);
  pthread_mutex_unlock(&S.lock);
  /* whoever drives progress lets go of MPI between rounds */
  pthread_mutex_lock(&S.mpi);
  do_abort();
}

void em_mpi_thread_stop(int exit_status) {
  if (!S.running) return;
  if (exit_status) em_mpi_abort_job(NULL, exit_status);
  pthread_mutex_lock(&S.lock);
  S.stopping = 1;
  pthread_cond_broadcast(&S.cond);
  pthread_mutex_unlock(&S.lock);
  pthread_join(S.thread, NULL);
  S.running = 0;
}
