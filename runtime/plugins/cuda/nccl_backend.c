/* nccl_backend.c - the NCCL process group: ember.dist collectives on CUDA tensors.
 *
 * libember's dist layer (runtime/distributed) gets this table from the plugin (the extra
 * EM_CUDA_EXTRA_NCCL, em_gpu_nccl_backend) and attaches it to a group on the group's first CUDA collective, or
 * during dist.init with backend 'nccl'. The group's CPU backend (MPI) still numbers the
 * ranks; NCCL only moves GPU data.
 *
 * Connecting. A group connects on its first CUDA collective, which every rank reaches at
 * the same point of its sequence: the group's rank 0 makes an NCCL id and broadcasts its
 * 128 bytes (plus a flag saying whether it could) over the group's CPU backend; every rank
 * then creates its communicator on the GPU of that collective's tensor, non-blocking
 * (ncclConfig_t.blocking = 0) and polled, so that a rank that never comes makes a timeout
 * rather than a hang. One communicator per group and rank: a later CUDA collective on
 * another GPU of this rank is an error (NCCL wants one GPU per rank, and other ranks could
 * not know to connect again).
 *
 * Collectives. NCCL's own (ncclAllReduce, ncclBroadcast, ncclAllGather, ncclReduceScatter,
 * ncclReduce); all_to_all(_v), gather, scatter and all_gather_v as ncclSend/ncclRecv pairs
 * in one ncclGroupStart/End. all_to_all_v and all_gather_v first check their counts with
 * the other ranks over the CPU backend (check_counts), so that a mismatch is an error on
 * every rank rather than a GPU waiting for data that never comes.
 *
 * Ordering. Each group has a communication stream (non-blocking with respect to the legacy
 * default stream, at the highest priority, so that gradient buckets run while backward
 * kernels keep the GPU busy). A collective records an event on the caller's current stream
 * of the tensor's GPU, makes the communication stream wait for it (the tensor's producers
 * come first), queues the NCCL call and records a completion event. The work is done when
 * that event is.
 *
 * Completion. Pending works sit in one FIFO list. A thread that waits for one of them polls
 * the events itself (the backend's progress entry: no hand-off to another thread); a
 * poller thread, started with the first group, polls while nobody does (so that test()
 * and async handles finish), backing off from 20 us to 1 ms while nothing completes and
 * sleeping on a condition variable while nothing is pending.
 *
 * Memory. The communication stream is one of the device layer's streams, and each
 * collective records its tensors' blocks on it (record_stream): the caching allocator
 * does not reuse a block until the communication stream has passed the point where the
 * block was freed. The work also keeps its tensors referenced until the host has seen its
 * completion event, so in the ordinary case nothing is freed before NCCL is done anyway;
 * record_stream covers the rest (a work failed after an abort while a kernel was still
 * winding down).
 *
 * Timeouts and errors. A pending work past its deadline, an asynchronous NCCL error
 * (ncclCommGetAsyncError, checked every millisecond while work is pending) or a failing
 * NCCL call aborts the group's communicator (ncclCommAbort, which also ends its kernels)
 * and fails every work pending on it with a message naming the collective, the rank, the
 * GPU and the seconds. The group stays broken: later CUDA collectives on it fail at once
 * with the same reason. The error ends the script, whose non-zero exit ends the job (the
 * CPU backend aborts the other ranks).
 *
 * Shutdown. At exit with status 0 the pending work is finished; communicators are left to
 * the end of the process (the CUDA runtime may already be unloading, and ncclCommDestroy
 * could wait for ranks that have left). A subgroup freed by the program aborts its
 * communicator: nothing is pending on it then, and abort, unlike destroy, never waits for
 * peers. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "gpu_runtime.h"

#ifdef EMBER_HAVE_NCCL
#include <nccl.h>

/* Non-blocking communicators (timeouts on connect and enqueue) came with NCCL 2.14. */
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
#define NONBLOCKING_COMMS 1
#else
#define NONBLOCKING_COMMS 0
#endif

#define EVENT_POOL 16
#define DRAIN_GRACE_S 10.0 /* after an abort, how long kernels get to notice it */
#define ERROR_CHECK_S 1e-3 /* asynchronous NCCL errors, while work is pending */
#define MAX_NAP_NS 1000000L

typedef struct nccl_group {
  em_dist_group *g; /* the group (not retained: it owns this state) */
  pthread_mutex_t lock; /* connecting, every NCCL call on comm, aborting */
  ncclComm_t comm; /* NULL until connected, and after an abort */
  int device; /* -1 until connected */
  em_cuda_stream *cs; /* the communication stream (the device layer's, high priority) */
  cudaStream_t stream; /* its handle */
  cudaEvent_t ready; /* re-recorded on the caller's stream before each op */
  float *scratch; /* the barrier's one element, made on first use */
  atomic_int broken; /* aborted, or could not connect: CUDA collectives fail */
  _Atomic double broken_at;
  char why[EM_DIST_MSG]; /* set before broken */
  const em_dist_work *culprit; /* the work that timed out (compared, never followed) */
  pthread_mutex_t pool_lock; /* completion events to reuse (a leaf lock) */
  cudaEvent_t pool[EVENT_POOL];
  int pooled;
  unsigned checked_round; /* the poller's last asynchronous-error check */
} nccl_group;

typedef struct pending {
  em_dist_work *w;
  nccl_group *ng;
  cudaEvent_t done;
  cudaError_t seen; /* what the event said when the entry ended */
  struct pending *next;
} pending;

static struct {
  pthread_mutex_t lock; /* the list and the thread's state */
  pthread_cond_t cond;
  pending *head, *tail;
  pthread_t thread;
  int running; /* the poller thread exists */
  int stopping; /* 1: finish pending work and stop; 2: stop now */
  double last_error_check;
  unsigned round;
} S = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

/* ---------------------------------------------------------------- helpers */

static const em_dist_backend nccl_table;

static void nap_ns(long ns) {
  struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
  nanosleep(&ts, NULL);
}

static int nccl_type(em_dtype d, ncclDataType_t *out) {
  switch (d) {
    case EM_FLOAT32: *out = ncclFloat32; return 1;
    case EM_FLOAT64: *out = ncclFloat64; return 1;
    case EM_FLOAT16: *out = ncclFloat16; return 1;
    case EM_BFLOAT16: *out = ncclBfloat16; return 1;
    case EM_INT32: *out = ncclInt32; return 1;
    case EM_INT64: *out = ncclInt64; return 1;
    case EM_UINT8:
    case EM_BOOL: *out = ncclUint8; return 1;
    default: return 0;
  }
}

/* 'avg' is NCCL's own (sum and scale in one pass); booleans reduce as or/and, as MPI's
 * LOR/LAND do on the CPU, so that a sum of booleans stays 0 or 1. */
static ncclRedOp_t nccl_op(em_dist_redop r, em_dtype d) {
  if (d == EM_BOOL) return r == EM_DIST_SUM || r == EM_DIST_MAX ? ncclMax : ncclMin;
  switch (r) {
    case EM_DIST_AVG: return ncclAvg;
    case EM_DIST_MAX: return ncclMax;
    case EM_DIST_MIN: return ncclMin;
    case EM_DIST_PRODUCT: return ncclProd;
    default: return ncclSum;
  }
}

static int my_rank(const nccl_group *ng) { return ng->g->rank; }

/* "NCCL error <text> (<last error>)" into buf. */
static void nccl_text(ncclResult_t r, ncclComm_t comm, char *buf, size_t cap) {
  const char *last = ncclGetLastError(comm);
  snprintf(buf, cap, "NCCL error '%s'%s%s%s", ncclGetErrorString(r), last && *last ? " (" : "", last ? last : "",
           last && *last ? ")" : "");
}

static em_status cuda_error(cudaError_t e, const char *what, const char *desc) {
  return em_set_error(EM_ERR_DEVICE, "%s: %s: CUDA error %s (%s)", desc, what, cudaGetErrorName(e),
                      cudaGetErrorString(e));
}

/* Polls a non-blocking communicator until r is no longer ncclInProgress or the deadline
 * passes (*timed_out). NCCL's rule: after ncclInProgress, nothing else may be called on
 * the communicator until its state has settled. */
static ncclResult_t settle(ncclComm_t comm, ncclResult_t r, double deadline, int *timed_out) {
  *timed_out = 0;
  long nap = 1000;
  while (r == ncclInProgress) {
    if (em_clock_monotonic() > deadline) {
      *timed_out = 1;
      return r;
    }
    nap_ns(nap);
    nap = nap * 2 > MAX_NAP_NS ? MAX_NAP_NS : nap * 2;
    ncclResult_t state = ncclInProgress;
    ncclResult_t q = ncclCommGetAsyncError(comm, &state);
    r = q != ncclSuccess ? q : state;
  }
  return r;
}

/* ---------------------------------------------------------------- events */

static em_status take_event(nccl_group *ng, cudaEvent_t *out, const char *desc) {
  pthread_mutex_lock(&ng->pool_lock);
  int have = ng->pooled > 0;
  if (have) *out = ng->pool[--ng->pooled];
  pthread_mutex_unlock(&ng->pool_lock);
  if (have) return EM_OK;
  cudaError_t e = cudaEventCreateWithFlags(out, cudaEventDisableTiming); /* on ng->device: current */
  return e == cudaSuccess ? EM_OK : cuda_error(e, "creating an event", desc);
}

static void give_event(nccl_group *ng, cudaEvent_t e) {
  pthread_mutex_lock(&ng->pool_lock);
  int keep = ng->pooled < EVENT_POOL;
  if (keep) ng->pool[ng->pooled++] = e;
  pthread_mutex_unlock(&ng->pool_lock);
  if (!keep) cudaEventDestroy(e);
}

/* ---------------------------------------------------------------- breaking a group */

/* Marks ng broken with reason why and aborts its communicator; the caller holds ng->lock.
 * Works still pending on it fail when the poller next sees them. */
static void break_locked(nccl_group *ng, const char *why) {
  if (atomic_load(&ng->broken)) return;
  snprintf(ng->why, sizeof ng->why, "%s", why);
  atomic_store(&ng->broken_at, em_clock_monotonic());
  atomic_store(&ng->broken, 1);
  if (ng->comm) ncclCommAbort(ng->comm); /* also makes its running kernels return */
  ng->comm = NULL;
}

/* ---------------------------------------------------------------- progress */

typedef struct doomed {
  nccl_group *ng;
  const em_dist_work *culprit; /* NULL for an asynchronous error */
  char why[EM_DIST_MSG];
} doomed;

/* Ends a pending entry: its work done (st 0) or failed with msg; the event goes back to
 * the pool while the work still holds the group (so ng is alive). */
static void finish(pending *p, em_status st, const char *msg, int reuse_event) {
  if (reuse_event) give_event(p->ng, p->done);
  else cudaEventDestroy(p->done);
  emp_dist_work_done(p->w, st, msg);
  free(p);
}

/* One round: completes what the GPU has finished, fails the works of broken groups, and
 * finds groups to abort (a deadline passed, an asynchronous NCCL error). wait_for_lock: the
 * poller thread; a waiting thread only tries. Returns the number of works ended. */
static int poll_once(int wait_for_lock) {
  if (wait_for_lock) pthread_mutex_lock(&S.lock);
  else if (pthread_mutex_trylock(&S.lock)) return 0;
  double now = em_clock_monotonic();
  int check_errors = now - S.last_error_check > ERROR_CHECK_S;
  if (check_errors) S.last_error_check = now, S.round++;
  pending *ended = NULL, **ended_tail = &ended;
  doomed to_break[4];
  int n_break = 0;
  pending *prev = NULL;
  for (pending *p = S.head; p;) {
    pending *next = p->next;
    nccl_group *ng = p->ng;
    int broken = atomic_load(&ng->broken);
    cudaError_t e = cudaEventQuery(p->done);
    int end = e != cudaErrorNotReady || (broken && now > atomic_load(&ng->broken_at) + DRAIN_GRACE_S);
    if (!end && !broken && n_break < (int)(sizeof to_break / sizeof *to_break)) {
      int seen = 0;
      for (int i = 0; i < n_break; i++) seen |= to_break[i].ng == ng;
      double deadline = atomic_load(&p->w->deadline);
      if (!seen && now > deadline) {
        char what[300];
        emp_dist_describe(p->w, what, sizeof what);
        doomed *d = &to_break[n_break++];
        d->ng = ng;
        d->culprit = p->w;
        snprintf(d->why, sizeof d->why,
                 "%s did not finish within %.3g s on rank %d (cuda:%d): a rank is dead, stuck, or called other "
                 "collectives or sizes; the NCCL communicator of %s was aborted (later CUDA collectives on it fail)",
                 what, now - p->w->posted_at, my_rank(ng), ng->device, ng->g->name);
        em_dist_group_retain(ng->g); /* alive until the abort, whoever ends its works */
      } else if (!seen && check_errors && ng->checked_round != S.round && !pthread_mutex_trylock(&ng->lock)) {
        /* one check per group and round; skipped while a user thread is inside NCCL */
        ng->checked_round = S.round;
        ncclResult_t state = ncclSuccess;
        if (ng->comm && ncclCommGetAsyncError(ng->comm, &state) == ncclSuccess && state != ncclSuccess &&
            state != ncclInProgress) {
          char text[400];
          nccl_text(state, ng->comm, text, sizeof text);
          doomed *d = &to_break[n_break++];
          d->ng = ng;
          d->culprit = NULL;
          snprintf(d->why, sizeof d->why, "%s on rank %d (cuda:%d); the NCCL communicator of %s was aborted", text,
                   my_rank(ng), ng->device, ng->g->name);
          em_dist_group_retain(ng->g);
        }
        pthread_mutex_unlock(&ng->lock);
      }
    }
    if (end) {
      if (prev) prev->next = next;
      else S.head = next;
      if (S.tail == p) S.tail = prev;
      p->next = NULL;
      *ended_tail = p;
      ended_tail = &p->next;
      if (e != cudaSuccess && e != cudaErrorNotReady) cudaGetLastError(); /* clear what is not sticky */
      p->seen = e;
    } else {
      prev = p;
    }
    p = next;
  }
  pthread_mutex_unlock(&S.lock);

  int n = 0;
  for (pending *p = ended; p;) {
    pending *next = p->next;
    cudaError_t e = p->seen;
    char what[300], msg[EM_DIST_MSG + 320];
    if (atomic_load(&p->ng->broken)) {
      emp_dist_describe(p->w, what, sizeof what);
      if (p->w == p->ng->culprit) snprintf(msg, sizeof msg, "%s", p->ng->why);
      else snprintf(msg, sizeof msg, "%s: cancelled: %s", what, p->ng->why);
      finish(p, EM_ERR_RUNTIME, msg, e == cudaSuccess);
    } else if (e != cudaSuccess) {
      emp_dist_describe(p->w, what, sizeof what);
      snprintf(msg, sizeof msg, "%s: CUDA error %s (%s) on rank %d (cuda:%d) while NCCL ran it", what,
               cudaGetErrorName(e), cudaGetErrorString(e), my_rank(p->ng), p->ng->device);
      finish(p, EM_ERR_DEVICE, msg, 0);
    } else {
      finish(p, EM_OK, NULL, 1);
    }
    n++;
    p = next;
  }

  for (int i = 0; i < n_break; i++) {
    nccl_group *ng = to_break[i].ng;
    pthread_mutex_lock(&ng->lock); /* a user thread inside NCCL leaves by its own deadline */
    if (!atomic_load(&ng->broken)) ng->culprit = to_break[i].culprit;
    break_locked(ng, to_break[i].why);
    pthread_mutex_unlock(&ng->lock);
    fprintf(stderr, "ember.dist: %s\n", to_break[i].why);
    em_dist_group_release(ng->g);
    n++; /* something changed: the next round fails its works */
  }
  return n;
}

static int nccl_progress(void) {
  if (!S.running) return -1;
  return poll_once(0) > 0;
}

static void *poller_main(void *arg) {
  (void)arg;
  long nap = 0;
  pthread_mutex_lock(&S.lock);
  for (;;) {
    if (S.stopping == 2 || (S.stopping && !S.head)) break;
    if (!S.head) {
      nap = 0;
      pthread_cond_wait(&S.cond, &S.lock);
      continue;
    }
    pthread_mutex_unlock(&S.lock);
    if (poll_once(1) > 0) nap = 0;
    else nap = nap ? (nap * 2 > MAX_NAP_NS ? MAX_NAP_NS : nap * 2) : 20000;
    if (nap) nap_ns(nap);
    pthread_mutex_lock(&S.lock);
  }
  pthread_mutex_unlock(&S.lock);
  return NULL;
}

/* ---------------------------------------------------------------- connecting */

/* The group's first CUDA collective: the id from the group's rank 0 over the CPU backend,
 * then the communicator on `device`. Called with ng->lock held. */
static em_status connect_group(nccl_group *ng, em_dist_work *w, int device, const char *desc) {
  em_dist_group *g = w->group;
  double deadline = atomic_load(&w->deadline);
  int64_t len = NCCL_UNIQUE_ID_BYTES + 1; /* the id, then 1 if rank 0 could make it */
  em_tensor *box = NULL;
  em_status st = em_zeros(&box, 1, &len, EM_UINT8, (em_device){EM_CPU, 0});
  if (st) return st;
  unsigned char *buf = em_tensor_data(box);
  char id_error[300] = "";
  if (g->rank == 0) {
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r == ncclSuccess) {
      memcpy(buf, &id, NCCL_UNIQUE_ID_BYTES);
      buf[NCCL_UNIQUE_ID_BYTES] = 1;
    } else {
      nccl_text(r, NULL, id_error, sizeof id_error);
    }
  }
  /* rank 0 takes part even when it failed, so that nobody waits for it */
  st = emp_dist_post(g, EM_DIST_OP_BROADCAST, box, box, EM_DIST_SUM, 0, 0, NULL);
  if (st) {
    em_tensor_release(box);
    return em_set_error(st, "%s: sending the NCCL id over the CPU backend failed: %s", desc, em_last_error());
  }
  ncclUniqueId id;
  memcpy(&id, buf, NCCL_UNIQUE_ID_BYTES);
  int have_id = buf[NCCL_UNIQUE_ID_BYTES] == 1;
  em_tensor_release(box);
  if (!have_id)
    return em_set_error(EM_ERR_RUNTIME, "%s: rank 0 of %s could not make an NCCL id%s%s", desc, g->name,
                        id_error[0] ? ": " : " (see rank 0's error)", id_error);

  cudaStream_t compute;
  if ((st = em_gpu_enter(desc, device, &compute))) return st;
  if ((st = em_gpu_stream_new(&ng->cs, device, -1))) /* non-blocking, highest priority */
    return em_set_error(st, "%s: creating the communication stream: %s", desc, em_last_error());
  ng->stream = ng->cs->handle;
  cudaError_t e = cudaEventCreateWithFlags(&ng->ready, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    em_gpu_stream_free(ng->cs);
    return cuda_error(e, "creating an event", desc);
  }
  ncclComm_t comm = NULL;
  int timed_out = 0;
#if NONBLOCKING_COMMS
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&comm, g->size, id, g->rank, &config);
  if (comm) r = settle(comm, r, deadline, &timed_out);
#else
  (void)deadline;
  ncclResult_t r = ncclCommInitRank(&comm, g->size, id, g->rank);
#endif
  if (r != ncclSuccess || timed_out) {
    char text[400];
    if (timed_out)
      snprintf(text, sizeof text, "not connected after %.3g s (did every rank of the group make this CUDA collective?)",
               em_clock_monotonic() - w->posted_at);
    else nccl_text(r, comm, text, sizeof text);
    if (comm) ncclCommAbort(comm);
    cudaEventDestroy(ng->ready);
    em_gpu_stream_free(ng->cs);
    return em_set_error(r == ncclInvalidUsage ? EM_ERR_DEVICE : EM_ERR_RUNTIME,
                        "%s: creating the NCCL communicator of %s on rank %d (cuda:%d, %d ranks) failed: %s%s", desc,
                        g->name, g->rank, device, g->size, text,
                        r == ncclInvalidUsage ? " (NCCL allows one rank per GPU in a communicator: give each local "
                                                "rank its own GPU, 'cuda:' .. dist.local_rank())"
                                              : "");
  }
  ng->comm = comm;
  ng->device = device;
  return EM_OK;
}

/* ---------------------------------------------------------------- the table */

static em_status nccl_attach(em_dist_group *g, void **impl) {
  nccl_group *ng = calloc(1, sizeof *ng);
  if (!ng) return em_set_error(EM_ERR_MEMORY, "nccl: out of memory");
  ng->g = g;
  ng->device = -1;
  pthread_mutex_init(&ng->lock, NULL);
  pthread_mutex_init(&ng->pool_lock, NULL);
  pthread_mutex_lock(&S.lock);
  int fail = 0;
  if (!S.running) {
    S.stopping = 0;
    fail = pthread_create(&S.thread, NULL, poller_main, NULL);
    S.running = !fail;
  }
  pthread_mutex_unlock(&S.lock);
  if (fail) {
    pthread_mutex_destroy(&ng->lock);
    pthread_mutex_destroy(&ng->pool_lock);
    free(ng);
    return em_set_error(EM_ERR_RUNTIME, "nccl: cannot start the completion thread");
  }
  *impl = ng;
  return EM_OK;
}

static void nccl_free_group(void *impl) {
  nccl_group *ng = impl;
  pthread_mutex_lock(&ng->lock);
  if (ng->comm) ncclCommAbort(ng->comm); /* nothing pending: works hold their group */
  ng->comm = NULL;
  if (ng->device >= 0) {
    cudaEventDestroy(ng->ready);
    em_gpu_stream_free(ng->cs); /* back to the device layer's pool */
    if (ng->scratch) cudaFree(ng->scratch);
  }
  pthread_mutex_unlock(&ng->lock);
  for (int i = 0; i < ng->pooled; i++) cudaEventDestroy(ng->pool[i]);
  pthread_mutex_destroy(&ng->lock);
  pthread_mutex_destroy(&ng->pool_lock);
  free(ng);
}

/* The point-to-point collectives (all_to_all(_v), gather, scatter, all_gather_v): ncclSend
 * and ncclRecv inside one ncclGroupStart/End, zero counts left out on both sides alike.
 * Returns the first error (the group is ended whatever happens). */
static ncclResult_t issue_p2p(nccl_group *ng, const em_dist_work *w, ncclDataType_t dt, size_t es) {
  char *in = w->in ? em_tensor_ptr(w->in) : NULL, *out = w->out ? em_tensor_ptr(w->out) : NULL;
  int size = ng->g->size, me = ng->g->rank, root = w->peer;
  size_t k = 0, in_off = 0, out_off = 0;
  if (w->kind == EM_DIST_OP_ALL_TO_ALL) k = (size_t)em_tensor_numel(w->in) / (size_t)size;
  else if (w->kind == EM_DIST_OP_GATHER) k = (size_t)em_tensor_numel(w->in);
  else if (w->kind == EM_DIST_OP_SCATTER) k = (size_t)em_tensor_numel(w->out);
  ncclResult_t r = ncclGroupStart(), q;
  for (int p = 0; p < size && r == ncclSuccess; p++) {
    size_t ns = 0, nr = 0; /* elements sent to and received from p */
    char *sp = in, *rp = out;
    switch (w->kind) {
      case EM_DIST_OP_ALL_TO_ALL: ns = nr = k, sp = in + p * k * es, rp = out + p * k * es; break;
      case EM_DIST_OP_ALL_TO_ALL_V:
        ns = (size_t)w->in_counts[p], nr = (size_t)w->out_counts[p];
        sp = in + in_off * es, rp = out + out_off * es;
        in_off += ns, out_off += nr;
        break;
      case EM_DIST_OP_GATHER:
        ns = p == root ? k : 0, nr = me == root ? k : 0;
        rp = out ? out + p * k * es : NULL;
        break;
      case EM_DIST_OP_SCATTER:
        ns = me == root ? k : 0, nr = p == root ? k : 0;
        sp = in ? in + p * k * es : NULL;
        break;
      default: /* all_gather_v */
        ns = (size_t)w->out_counts[me], nr = (size_t)w->out_counts[p];
        rp = out + out_off * es, out_off += nr;
        break;
    }
    if (ns && (q = ncclSend(sp, ns, dt, p, ng->comm, ng->stream)) != ncclSuccess) r = q;
    if (nr && r == ncclSuccess && (q = ncclRecv(rp, nr, dt, p, ng->comm, ng->stream)) != ncclSuccess) r = q;
  }
  q = ncclGroupEnd();
  return r != ncclSuccess ? r : q;
}

/* Queues w's NCCL call on the communication stream (ng->lock held, connected). */
static ncclResult_t issue(nccl_group *ng, const em_dist_work *w, ncclDataType_t dt, em_dtype dtype) {
  void *in = w->in ? em_tensor_ptr(w->in) : NULL, *out = w->out ? em_tensor_ptr(w->out) : NULL;
  size_t n_in = w->in ? (size_t)em_tensor_numel(w->in) : 0, n_out = w->out ? (size_t)em_tensor_numel(w->out) : 0;
  switch (w->kind) {
    case EM_DIST_OP_REDUCE:
      return ncclReduce(out, out, n_out, dt, nccl_op(w->redop, dtype), w->peer, ng->comm, ng->stream);
    case EM_DIST_OP_ALL_TO_ALL:
    case EM_DIST_OP_ALL_TO_ALL_V:
    case EM_DIST_OP_GATHER:
    case EM_DIST_OP_SCATTER:
    case EM_DIST_OP_ALL_GATHER_V: return issue_p2p(ng, w, dt, em_dtype_size(dtype));
    case EM_DIST_OP_ALL_REDUCE:
      return ncclAllReduce(out, out, n_out, dt, nccl_op(w->redop, dtype), ng->comm, ng->stream);
    case EM_DIST_OP_BROADCAST: return ncclBroadcast(out, out, n_out, dt, w->peer, ng->comm, ng->stream);
    case EM_DIST_OP_ALL_GATHER: return ncclAllGather(in, out, n_in, dt, ng->comm, ng->stream);
    case EM_DIST_OP_REDUCE_SCATTER:
      return ncclReduceScatter(in, out, n_out, dt, nccl_op(w->redop, dtype), ng->comm, ng->stream);
    case EM_DIST_OP_BARRIER:
      return ncclAllReduce(ng->scratch, ng->scratch, 1, ncclFloat32, ncclSum, ng->comm, ng->stream);
    case EM_DIST_OP_SEND: return ncclSend(in, n_in, dt, w->peer, ng->comm, ng->stream);
    case EM_DIST_OP_RECV: return ncclRecv(out, n_out, dt, w->peer, ng->comm, ng->stream);
    default: return ncclInvalidArgument;
  }
}

/* The allocator keeps t's block until the communication stream is past this point. Memory
 * that is not the allocator's (adopted, borrowed) is the owner's to keep alive. */
static void record_on_comm_stream(nccl_group *ng, const em_tensor *t) {
  if (!t || t->storage->deleter || t->storage->borrowed || !t->storage->data) return;
  if (em_gpu_record_stream(t->storage->data, ng->device, ng->cs)) em_clear_error(); /* the work's reference stays */
}

/* all_to_all_v, all_gather_v: counts that do not match between ranks would leave NCCL
 * waiting on the GPU until the timeout. They are checked first over the group's CPU
 * backend (two small blocking collectives on this thread: the counts are host memory
 * anyway), and a mismatch fails the collective on every rank with the same message. */
static em_status check_counts(em_dist_work *w, const char *desc) {
  em_dist_group *g = w->group;
  int n = g->size, a2av = w->kind == EM_DIST_OP_ALL_TO_ALL_V;
  int64_t n_send = a2av ? n : 0, n_mine = a2av ? 4 : 2, n_all = n_mine * n;
  em_device cpu = {EM_CPU, 0};
  em_tensor *send = NULL, *got = NULL, *mine = NULL, *all = NULL;
  em_status st = em_zeros(&mine, 1, &n_mine, EM_INT64, cpu);
  if (!st) st = em_zeros(&all, 1, &n_all, EM_INT64, cpu);
  if (!st && a2av) st = em_zeros(&send, 1, &n_send, EM_INT64, cpu);
  if (!st && a2av) st = em_zeros(&got, 1, &n_send, EM_INT64, cpu);
  int64_t *m = st ? NULL : em_tensor_data(mine);
  if (!st && a2av) { /* what this rank sends each peer; what each will send it */
    memcpy(em_tensor_data(send), w->in_counts, sizeof(int64_t) * n);
    st = emp_dist_post(g, EM_DIST_OP_ALL_TO_ALL, send, got, EM_DIST_SUM, -1, 0, NULL);
    const int64_t *from = st ? NULL : em_tensor_data(got);
    m[0] = -1;
    for (int r = 0; from && r < n; r++)
      if (from[r] != w->out_counts[r]) {
        m[0] = r, m[1] = from[r], m[2] = w->out_counts[r];
        break;
      }
  } else if (!st) { /* this rank's count, and a hash of the array (FNV-1a) */
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)w->out_counts;
    for (size_t i = 0; i < sizeof(int64_t) * (size_t)n; i++) h = (h ^ p[i]) * 1099511628211ull;
    m[0] = w->out_counts[g->rank], m[1] = (int64_t)h;
  }
  if (!st) st = emp_dist_post(g, EM_DIST_OP_ALL_GATHER, mine, all, EM_DIST_SUM, -1, 0, NULL);
  if (st) st = em_set_error(st, "%s: checking the counts over the CPU backend failed: %s", desc, em_last_error());
  const int64_t *a = st ? NULL : em_tensor_data(all);
  for (int r = 0; a && r < n && !st; r++) {
    if (a2av && a[4 * r] >= 0)
      st = em_set_error(EM_ERR_ARGUMENT,
                        "%s: rank %d sends %lld elements to rank %d, which expects %lld (every rank's in_counts[r] "
                        "must equal rank r's out_counts[that rank]); no data moved, on any rank",
                        desc, (int)a[4 * r], (long long)a[4 * r + 1], r, (long long)a[4 * r + 2]);
    else if (!a2av && a[2 * r + 1] != a[1])
      st = em_set_error(EM_ERR_ARGUMENT,
                        "%s: rank %d passed other counts than rank 0 (every rank must pass the same counts); no data "
                        "moved, on any rank",
                        desc, r);
    else if (!a2av && a[2 * r] != w->out_counts[r])
      st = em_set_error(EM_ERR_ARGUMENT, "%s: rank %d sends %lld elements, counts[%d] says %lld; no data moved, on any "
                        "rank", desc, r, (long long)a[2 * r], r, (long long)w->out_counts[r]);
  }
  em_tensor_release(send), em_tensor_release(got), em_tensor_release(mine), em_tensor_release(all);
  return st;
}

static em_status nccl_post(void *impl, em_dist_work *w) {
  nccl_group *ng = impl;
  char desc[256];
  emp_dist_describe(w, desc, sizeof desc);
  /* (a subgroup kept past dist.finalize still has this backend; the poller is gone) */
  if (S.stopping || !S.running) return em_set_error(EM_ERR_RUNTIME, "%s: the distributed world was finalized", desc);
  const em_tensor *t = w->in ? w->in : w->out;
  if (w->in && w->out && w->in->storage->device.index != w->out->storage->device.index)
    return em_set_error(EM_ERR_DEVICE,
                        "%s: the input is on cuda:%d and the output on cuda:%d (NCCL needs both on "
                        "this rank's GPU)",
                        desc, w->in->storage->device.index, w->out->storage->device.index);
  ncclDataType_t dt = ncclFloat32;
  em_dtype dtype = t ? t->dtype : EM_FLOAT32;
  if (t && !nccl_type(dtype, &dt))
    return em_set_error(EM_ERR_DTYPE, "%s: NCCL cannot move %s tensors", desc, em_dtype_name(dtype));
  int device = t ? t->storage->device.index : -1;
  if (w->kind == EM_DIST_OP_ALL_TO_ALL_V || w->kind == EM_DIST_OP_ALL_GATHER_V) {
    em_status cst = check_counts(w, desc);
    if (cst) return cst;
  }

  pthread_mutex_lock(&ng->lock);
  em_status st = EM_OK;
  if (atomic_load(&ng->broken)) {
    st = em_set_error(EM_ERR_RUNTIME, "%s: %s", desc, ng->why);
    goto out;
  }
  if (device < 0) device = ng->device;
  if (device < 0 && cudaGetDevice(&device) != cudaSuccess) device = 0; /* a barrier first */
  if (!ng->comm) {
    if ((st = connect_group(ng, w, device, desc))) {
      /* other ranks may have connected: a later attempt would not match theirs */
      char why[EM_DIST_MSG];
      snprintf(why, sizeof why, "its NCCL communicator could not be created (%s)", em_last_error());
      break_locked(ng, why);
      goto out;
    }
  }
  if (device != ng->device) {
    st = em_set_error(EM_ERR_DEVICE,
                      "%s: the NCCL communicator of %s is on cuda:%d, this tensor is on cuda:%d (one GPU per rank: "
                      "a group connects on the GPU of its first CUDA collective)",
                      desc, ng->g->name, ng->device, device);
    goto out;
  }
  /* nothing moves, on any rank: a size every rank shares (all_to_all_v has none; a rank
   * of all_gather_v may send nothing while the others do) */
  int64_t shared = w->kind == EM_DIST_OP_ALL_TO_ALL_V    ? -1
                   : w->kind == EM_DIST_OP_ALL_GATHER_V ? em_tensor_numel(w->out)
                   : t                                  ? em_tensor_numel(t)
                                                        : -1;
  if (shared == 0) {
    w->started_at = em_clock_monotonic();
    pthread_mutex_unlock(&ng->lock);
    emp_dist_work_done(w, EM_OK, NULL);
    return EM_OK;
  }
  cudaStream_t compute;
  if ((st = em_gpu_enter(desc, ng->device, &compute))) goto out;
  cudaError_t e = cudaSuccess;
  if (w->kind == EM_DIST_OP_BARRIER && !ng->scratch) {
    e = cudaMalloc((void **)&ng->scratch, sizeof(float));
    if (e != cudaSuccess) {
      st = cuda_error(e, "allocating the barrier's element", desc);
      goto out;
    }
  }
  cudaEvent_t done;
  if ((st = take_event(ng, &done, desc))) goto out;
  /* the tensors' producers, queued on the caller's stream, come first */
  e = cudaEventRecord(ng->ready, compute);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(ng->stream, ng->ready, 0);
  if (e != cudaSuccess) {
    give_event(ng, done);
    st = cuda_error(e, "ordering the communication stream after the current stream", desc);
    goto out;
  }
  w->started_at = em_clock_monotonic();
  int timed_out = 0;
  ncclResult_t r = issue(ng, w, dt, dtype);
#if NONBLOCKING_COMMS
  r = settle(ng->comm, r, atomic_load(&w->deadline), &timed_out);
#endif
  if (r == ncclSuccess && !timed_out) e = cudaEventRecord(done, ng->stream);
  if (r != ncclSuccess || timed_out || e != cudaSuccess) {
    char text[320], why[EM_DIST_MSG];
    if (timed_out)
      snprintf(text, sizeof text, "NCCL did not accept it within %.3g s", em_clock_monotonic() - w->posted_at);
    else if (r != ncclSuccess) nccl_text(r, ng->comm, text, sizeof text);
    else snprintf(text, sizeof text, "CUDA error %s recording its completion", cudaGetErrorName(e));
    snprintf(why, sizeof why,
             "%s failed on rank %d (cuda:%d): %s; the NCCL communicator of %s was aborted (later "
             "CUDA collectives on it fail)",
             desc, my_rank(ng), ng->device, text, ng->g->name);
    break_locked(ng, why);
    cudaEventDestroy(done);
    st = em_set_error(timed_out ? EM_ERR_RUNTIME : EM_ERR_DEVICE, "%s", why);
    goto out;
  }
  record_on_comm_stream(ng, w->in);
  if (w->out != w->in) record_on_comm_stream(ng, w->out);
  pthread_mutex_unlock(&ng->lock);

  pending *p = malloc(sizeof *p);
  if (!p) {
    /* queued on the GPU already: wait for it here rather than lose track of it */
    cudaEventSynchronize(done);
    give_event(ng, done);
    emp_dist_work_done(w, EM_OK, NULL);
    return EM_OK;
  }
  p->w = w;
  p->ng = ng;
  p->done = done;
  p->seen = cudaErrorNotReady;
  p->next = NULL;
  pthread_mutex_lock(&S.lock);
  if (S.tail) S.tail->next = p;
  else S.head = p;
  S.tail = p;
  pthread_cond_broadcast(&S.cond);
  pthread_mutex_unlock(&S.lock);
  return EM_OK;
out:
  pthread_mutex_unlock(&ng->lock);
  return st;
}

/* Status 0: finish what is pending (deadlines bound it), stop the poller. Otherwise the job
 * is being ended by the CPU backend: just let go. Communicators stay (see the top). */
static void nccl_shutdown(int exit_status) {
  pthread_mutex_lock(&S.lock);
  if (!S.running) {
    pthread_mutex_unlock(&S.lock);
    return;
  }
  S.stopping = exit_status ? 2 : 1;
  pthread_cond_broadcast(&S.cond);
  pthread_mutex_unlock(&S.lock);
  if (exit_status) return;
  pthread_join(S.thread, NULL);
  pthread_mutex_lock(&S.lock);
  S.running = 0;
  S.stopping = 0;
  pthread_mutex_unlock(&S.lock);
}

/* Ends the job through the CPU backend, which can reach the other ranks. */
static void nccl_abort_job(const char *message, int exit_status) {
  em_dist_group *w = emp_dist_world_group();
  const em_dist_backend *cpu = w ? w->backend[EM_CPU] : NULL;
  if (cpu && cpu != &nccl_table && cpu->abort_job) cpu->abort_job(message, exit_status);
  if (message) fprintf(stderr, "%s\n", message);
  fflush(stderr);
  _exit(exit_status);
}

static const em_dist_backend nccl_table = {
    .name = "nccl",
    .init = NULL, /* a device backend: the world's CPU backend numbers the ranks */
    .new_group = NULL,
    .free_group = nccl_free_group,
    .post = nccl_post,
    .shutdown = nccl_shutdown,
    .abort_job = nccl_abort_job,
    .progress = nccl_progress,
    .run_direct = NULL,
    .attach = nccl_attach,
    .note_seq = NULL, /* asked of CPU backends only (symmetric memory is CPU memory) */
    .report_timeout = NULL,
};

const em_dist_backend *em_gpu_nccl_backend(void) { return &nccl_table; }

#endif /* EMBER_HAVE_NCCL; without it the plugin has no EM_CUDA_EXTRA_NCCL (plugin.c) */
