/* symmetric.c - symmetric memory: a buffer of the same size on every member of a group,
 * each member's mapped into every member's address space, for ranks that share a host.
 *
 * Why: the data-parallel reducer's buckets live here (runtime/distributed). A bucket allreduce
 * through MPI copies each rank's bucket into MPI's shared-memory queues, reduces, and copies
 * the result back out; with the buckets themselves shared, rank r reduces its own slice of
 * the bucket straight from every rank's memory and writes the sum back into every rank's
 * bucket. Each rank reads and writes numel elements once and nothing else moves; the 1/world
 * average is folded into that same pass. (PyTorch's SymmetricMemory, and NCCL's registered
 * buffers, rest on the same idea.)
 *
 * Each member makes a memfd (no name in /dev/shm: a process killed by any signal leaves
 * nothing behind), the members exchange (pid, fd) through the group's CPU backend, and each
 * maps the others' through /proc/<pid>/fd/<fd>. When any member cannot (another host, another
 * container, EMBER_DIST_SHM=0), every member learns it in the same collective and the caller
 * falls back to its backend.
 *
 * Synchronisation: the first cache line of each segment holds an epoch counter written only
 * by its owner. An allreduce is two meetings: every rank announces its bucket is written
 * (epoch 2k-1) and waits for all others to announce the same; each reduces its slice; every
 * rank announces it is done (epoch 2k) and waits again, after which every bucket holds the
 * sum and the next iteration may write its own bucket. Sums run in rank order and each
 * slice is written by one rank, so the result is bit-identical everywhere.
 *
 * A meeting spins (the peer is usually microseconds away), then sleeps on a futex in the
 * peer's segment, which the peer wakes when it arrives. Not sched_yield or timed naps: a
 * yielding rank hands its core to whatever else is runnable until the next scheduler tick,
 * and a napping one wakes late. How long it spins: EMBER_DIST_SPIN_US, which the ember host
 * sets to 20 ms when nothing of its priority outside the job is runnable as it starts
 * (bindings/ember/blas_env.c), else about half a millisecond. Beside low-priority work the
 * long spin is what keeps the rank's core: a rank that sleeps hands its core to the
 * low-priority process, and the scheduler may let that process finish its time slice
 * (up to a few ms) before the woken rank runs again, at every meeting. More ranks than
 * cores never spin. A collective numbered and
 * timed like any other: a member that does not arrive before the group's timeout is
 * diagnosed by the group's CPU backend as for its own collectives (which ranks are missing
 * and why) and the job ends with status 124. */
#define _GNU_SOURCE /* memfd_create */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "distributed/dist_impl.h"
#include "tensor/tensor_impl.h"
#include "plugins/plugin_api.h"

#define SYMM_HEADER 4096 /* the control line, padded to a page so data stays page-aligned */
#define SPIN_DEFAULT_S 0.0005 /* spin before sleeping on the futex, unless EMBER_DIST_SPIN_US says */
#define WAIT_SLICE_NS 2000000 /* futex waits of 2 ms at most, to check the deadline */

typedef struct symm_ctl {
  _Atomic uint64_t epoch; /* 2k-1: bucket k written; 2k: slice of allreduce k reduced */
  _Atomic uint32_t word; /* epoch's low 32 bits: the futex the others sleep on */
  _Atomic uint32_t sleepers; /* ranks asleep (or about to be) on word: wake them */
  int64_t numel; /* this rank's collective k, published with epoch 2k-1 so that */
  int32_t dtype, op, kind, peer; /* the others can refuse a mismatched call instead of summing garbage */
} symm_ctl;

struct em_dist_symm {
  atomic_int refcount;
  em_dist_group *group; /* retained */
  int rank, size;
  int64_t bytes; /* data bytes per member */
  size_t map_bytes; /* header + data, page-rounded */
  char **base; /* [size]: each member's segment in this process */
  uint64_t epoch; /* this rank's count of meetings */
  int group_weak; /* the group owns this symm (its scratch): no reference back */
  double spin_s; /* how long a meeting spins before it sleeps; 0 when the members outnumber
                  * the cores: spinning would only keep a waited-for rank off its core */
};

/* ---------------------------------------------------------------- set-up */

static uint64_t fnv1a(uint64_t h, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
  return h;
}

/* Equal for processes that can share memory: the host name and the kernel's boot id; with
 * EMBER_DIST_RANKS_PER_HOST=N, also the block of N consecutive world ranks, so that one
 * machine can play several hosts (tests of the hierarchical paths). */
int64_t dist_host_key(int world_rank) {
  char buf[300] = "";
  uint64_t h = 0xcbf29ce484222325ull;
  const char *per = getenv("EMBER_DIST_RANKS_PER_HOST");
  if (per && atoi(per) > 0) {
    snprintf(buf, sizeof buf, "simulated host %d;", world_rank / atoi(per));
    h = fnv1a(h, buf, strlen(buf));
  }
  if (gethostname(buf, sizeof buf - 1) == 0) h = fnv1a(h, buf, strlen(buf));
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    h = fnv1a(h, buf, n);
  }
  return (int64_t)(h & 0x7fffffffffffffffull);
}

static void unmap_all(em_dist_symm *s) {
  if (!s->base) return;
  for (int r = 0; r < s->size; r++)
    if (s->base[r]) munmap(s->base[r], s->map_bytes);
  free(s->base);
  s->base = NULL;
}

static em_status cpu_tensor(em_tensor **out, int64_t n) {
  return em_zeros(out, 1, &n, EM_INT64, (em_device){EM_CPU, 0});
}

/* EMBER_DIST_SPIN_US when it is a number of microseconds (at most 10 s), else the default. */
static double spin_seconds(void) {
  const char *e = getenv("EMBER_DIST_SPIN_US");
  char *end = NULL;
  double us = e && *e ? strtod(e, &end) : -1;
  return end && *end == '\0' && us >= 0 && us <= 1e7 ? us * 1e-6 : SPIN_DEFAULT_S;
}

int dist_symm_enabled(void) {
  const char *v = getenv("EMBER_DIST_SHM");
  return !(v && (!strcmp(v, "0") || !strcmp(v, "off") || !strcmp(v, "false")));
}

em_status dist_symm_new(em_dist_group *g, int64_t bytes, em_dist_symm **out, char *why, size_t why_cap) {
  *out = NULL;
  if (why_cap) why[0] = 0;
  if (!g || g->rank < 0 || bytes < 0) return em_set_error(EM_ERR_ARGUMENT, "symmetric memory: bad arguments");
  if (g->size < 2) {
    snprintf(why, why_cap, "one rank");
    return EM_OK;
  }
  em_dist_symm *s = calloc(1, sizeof *s);
  em_tensor *info = NULL, *all = NULL, *flag = NULL;
  int fd = -1;
  em_status st = EM_OK;
  if (!s || !(s->base = calloc(g->size, sizeof *s->base))) {
    free(s);
    return em_set_error(EM_ERR_MEMORY, "symmetric memory: out of memory");
  }
  atomic_init(&s->refcount, 1);
  s->rank = g->rank;
  s->size = g->size;
  s->bytes = bytes;
  long page = sysconf(_SC_PAGESIZE);
  s->map_bytes = (size_t)((SYMM_HEADER + bytes + page - 1) / page * page);

  /* this rank's segment; a failure is not an error yet, every rank must hear of it */
  int ok = dist_symm_enabled();
  if (!ok) snprintf(why, why_cap, "EMBER_DIST_SHM=0");
  if (ok) {
    fd = memfd_create("ember-symmetric", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)s->map_bytes) != 0) ok = 0;
    else {
      void *p = mmap(NULL, s->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED) ok = 0;
      else s->base[s->rank] = p;
    }
    if (!ok)
      snprintf(why, why_cap, "rank %d could not make a shared segment of %lld bytes: %s", s->rank,
               (long long)s->map_bytes, strerror(errno));
  }
  /* [ok, host, pid, fd] from everyone */
  if ((st = cpu_tensor(&info, 4)) || (st = cpu_tensor(&all, 4 * (int64_t)g->size)) || (st = cpu_tensor(&flag, 1)))
    goto done;
  int64_t *mine = em_tensor_data(info), *each = em_tensor_data(all);
  mine[0] = ok, mine[1] = dist_host_key(em_dist_world_rank_of(g, g->rank)), mine[2] = getpid(), mine[3] = fd;
  if ((st = emp_dist_post(g, EM_DIST_OP_ALL_GATHER, info, all, EM_DIST_SUM, -1, 0, NULL))) goto done;
  for (int r = 0; r < g->size && ok; r++) {
    if (!each[4 * r]) {
      ok = 0;
      if (!why[0]) snprintf(why, why_cap, "rank %d has no shared segment", r);
    } else if (each[4 * r + 1] != mine[1]) {
      ok = 0;
      snprintf(why, why_cap, "rank %d runs on another host", r);
    }
  }
  /* map the others' */
  for (int r = 0; r < g->size && ok; r++) {
    if (r == s->rank) continue;
    char path[64];
    snprintf(path, sizeof path, "/proc/%lld/fd/%lld", (long long)each[4 * r + 2], (long long)each[4 * r + 3]);
    int pfd = open(path, O_RDWR | O_CLOEXEC);
    struct stat sb;
    if (pfd < 0 || fstat(pfd, &sb) != 0 || (size_t)sb.st_size != s->map_bytes) {
      ok = 0;
      snprintf(why, why_cap, "rank %d cannot open rank %d's segment %s: %s", s->rank, r, path,
               pfd < 0 ? strerror(errno) : "wrong size");
    } else {
      void *p = mmap(NULL, s->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0);
      if (p == MAP_FAILED) {
        ok = 0;
        snprintf(why, why_cap, "rank %d cannot map rank %d's segment: %s", s->rank, r, strerror(errno));
      } else {
        s->base[r] = p;
      }
    }
    if (pfd >= 0) close(pfd);
  }
  /* everyone mapped everyone (or nobody goes on); the fds are no longer needed after this */
  ((int64_t *)em_tensor_data(flag))[0] = ok;
  if ((st = emp_dist_post(g, EM_DIST_OP_ALL_REDUCE, flag, flag, EM_DIST_MIN, -1, 0, NULL))) goto done;
  if (((int64_t *)em_tensor_data(flag))[0] == 1) {
    s->group = g;
    s->spin_s = g->size <= sysconf(_SC_NPROCESSORS_ONLN) ? spin_seconds() : 0;
    em_dist_group_retain(g);
    *out = s;
    s = NULL;
  } else if (!why[0]) {
    snprintf(why, why_cap, "another rank could not share memory");
  }
done:
  if (fd >= 0) close(fd);
  em_tensor_release(info);
  em_tensor_release(all);
  em_tensor_release(flag);
  if (s) {
    unmap_all(s);
    free(s);
  }
  return st;
}

void dist_symm_retain(em_dist_symm *s) {
  if (s) atomic_fetch_add(&s->refcount, 1);
}

void dist_symm_release(em_dist_symm *s) {
  if (!s || atomic_fetch_sub(&s->refcount, 1) != 1) return;
  unmap_all(s);
  if (!s->group_weak) em_dist_group_release(s->group);
  free(s);
}

void *dist_symm_data(const em_dist_symm *s) { return s ? s->base[s->rank] + SYMM_HEADER : NULL; }

static void release_from_tensor(void *data, void *ctx) {
  (void)data;
  dist_symm_release(ctx);
}

em_status dist_symm_tensor(em_tensor **out, em_dist_symm *s, em_dtype dtype, int64_t numel) {
  if (numel * (int64_t)em_dtype_size(dtype) > s->bytes)
    return em_set_error(EM_ERR_ARGUMENT, "symmetric memory: %lld elements of %s do not fit in %lld bytes",
                        (long long)numel, em_dtype_name(dtype), (long long)s->bytes);
  dist_symm_retain(s);
  em_status st =
      em_from_blob(out, dist_symm_data(s), 1, &numel, NULL, dtype, (em_device){EM_CPU, 0}, release_from_tensor, s);
  if (st) dist_symm_release(s);
  return st;
}

/* ---------------------------------------------------------------- meetings */

static symm_ctl *ctl(const em_dist_symm *s, int r) { return (symm_ctl *)s->base[r]; }

/* Shared (not FUTEX_PRIVATE): the word lives in memory other processes map. */
static void futex_wait(_Atomic uint32_t *word, uint32_t expected, long ns) {
  struct timespec ts = {0, ns};
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected, &ts, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *word) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/* Announces epoch e and waits until every member has. On timeout the group's CPU backend
 * explains who is missing and ends the job; without such a backend, an error. At an odd
 * epoch (data written) each member's call is compared with this one's. */
static em_status meet(em_dist_symm *s, uint64_t e, em_dist_work *w) {
  symm_ctl *mine = ctl(s, s->rank);
  if (e & 1) {
    mine->numel = em_tensor_numel(w->in);
    mine->dtype = (int32_t)w->in->dtype;
    mine->op = (int32_t)w->redop;
    mine->kind = (int32_t)w->kind;
    mine->peer = (int32_t)w->peer;
  }
  atomic_store(&mine->epoch, e);
  atomic_store(&mine->word, (uint32_t)e);
  if (atomic_load(&mine->sleepers)) futex_wake_all(&mine->word);
  for (int r = 0; r < s->size; r++) {
    if (r == s->rank) continue;
    symm_ctl *peer = ctl(s, r);
    long polls = 0;
    int spinning = s->spin_s > 0;
    double spin_until = spinning ? em_clock_monotonic() + s->spin_s : 0;
    while (atomic_load_explicit(&peer->epoch, memory_order_acquire) < e) {
      if (spinning && (++polls & 255 || em_clock_monotonic() < spin_until)) { /* the clock read 1 poll in 256 */
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        continue;
      }
      spinning = 0;
      /* asleep until the peer's word moves: counted first, then the epoch checked again,
       * so that a peer arriving in between either sees the count or is seen here */
      atomic_fetch_add(&peer->sleepers, 1);
      uint32_t seen = atomic_load(&peer->word);
      if (atomic_load(&peer->epoch) < e) futex_wait(&peer->word, seen, WAIT_SLICE_NS);
      atomic_fetch_sub(&peer->sleepers, 1);
      if (em_clock_monotonic() > atomic_load(&w->deadline)) {
        em_dist_group *g = s->group;
        const em_dist_backend *be = g->backend[EM_CPU];
        if (be && be->report_timeout) be->report_timeout(g->impl[EM_CPU], w); /* does not return */
        char what[320];
        emp_dist_describe(w, what, sizeof what);
        return em_set_error(EM_ERR_RUNTIME, "ember.dist: %s: timed out after %.3g s on rank %d, waiting for rank %d",
                            what, em_clock_monotonic() - w->posted_at, s->rank, r);
      }
    }
    const symm_ctl *theirs = ctl(s, r);
    if ((e & 1) && theirs->kind == mine->kind && mine->kind == EM_DIST_OP_BROADCAST && theirs->peer != mine->peer)
      return em_set_error(EM_ERR_ARGUMENT, "ember.dist: broadcast #%lld on %s: rank %d named root %d, rank %d root %d: "
                          "every rank must name the same root", (long long)w->seq, s->group->name, r, theirs->peer,
                          s->rank, mine->peer);
    if ((e & 1) && ((theirs->numel != mine->numel && mine->kind != EM_DIST_OP_ALL_TO_ALL_V) ||
                    theirs->dtype != mine->dtype || theirs->op != mine->op || theirs->kind != mine->kind)) {
      char what[320];
      emp_dist_describe(w, what, sizeof what);
      return em_set_error(EM_ERR_ARGUMENT,
                          "ember.dist: %s: rank %d called %s with %lld elements of %s (%s), rank %d %s with %lld of %s "
                          "(%s): every rank must pass the same shape, dtype and operation to the same call",
                          what, r, emp_dist_op_name((em_dist_opkind)theirs->kind), (long long)theirs->numel,
                          em_dtype_name((em_dtype)theirs->dtype), em_dist_redop_name((em_dist_redop)theirs->op),
                          s->rank, emp_dist_op_name(w->kind), (long long)mine->numel,
                          em_dtype_name((em_dtype)mine->dtype), em_dist_redop_name((em_dist_redop)mine->op));
    }
  }
  return EM_OK;
}

/* ---------------------------------------------------------------- allreduce */

#define BLOCK_BYTES 2048 /* combined in L1 before being written back to every rank */

/* Combines elements [lo, hi) of the n members' buffers at byte offset off, in rank order
 * (dist_combine's rules), times scale, into every member's buffer. */
static void reduce_range(char *const *base, int n, int64_t off, int64_t lo, int64_t hi, em_dtype dt, em_dist_redop op,
                         double scale) {
  int64_t es = (int64_t)em_dtype_size(dt), per = BLOCK_BYTES / es;
  _Alignas(64) char acc[BLOCK_BYTES];
  for (int64_t i = lo; i < hi; i += per) {
    int64_t m = hi - i < per ? hi - i : per, at = off + i * es;
    memcpy(acc, base[0] + at, (size_t)(m * es));
    for (int r = 1; r < n; r++) dist_combine(acc, base[r] + at, m, dt, op);
    if (scale != 1) emp_dist_scale(acc, m, dt, scale);
    for (int r = 0; r < n; r++) memcpy(base[r] + at, acc, (size_t)(m * es));
  }
}

/* This rank's slice of numel elements at byte offset off (from the data start): slices start
 * on 64-byte lines, so no two ranks write one line. */
static void reduce_my_slice(em_dist_symm *s, em_dtype dt, int64_t off, int64_t numel, em_dist_redop op, double scale) {
  int64_t es = (int64_t)em_dtype_size(dt), line = 64 / es, n = s->size;
  int64_t lo = numel * s->rank / n / line * line,
          hi = s->rank == n - 1 ? numel : numel * (s->rank + 1) / n / line * line;
  reduce_range(s->base, (int)n, off + SYMM_HEADER, lo, hi, dt, op, scale);
}

/* An allreduce run here is numbered like every collective on g, so that timeouts name it
 * and the backend's answers to other ranks' queries about this rank's progress stay true. */
static void begin_collective(em_dist_work *w, em_dist_group *g, em_dist_opkind kind, em_tensor *t, em_dist_redop op) {
  memset(w, 0, sizeof *w);
  w->kind = kind, w->redop = op, w->in = w->out = t, w->group = g, w->on_stack = 1;
  w->seq = atomic_fetch_add(&g->seq, 1) + 1;
  w->posted_at = em_clock_monotonic();
  atomic_init(&w->deadline, w->posted_at + g->timeout);
  const em_dist_backend *be = g->backend[EM_CPU];
  if (be && be->note_seq) be->note_seq(g->impl[EM_CPU], w->seq, 0);
}

static void end_collective(em_dist_work *w) {
  em_dist_group *g = w->group;
  atomic_fetch_add(&g->completed, 1);
  const em_dist_backend *be = g->backend[EM_CPU];
  if (be && be->note_seq) be->note_seq(g->impl[EM_CPU], w->seq, 1);
}

int dist_symm_supports(em_dtype dtype) { return em_dtype_is_floating(dtype); }

em_status dist_symm_all_reduce(em_dist_symm *s, em_tensor *t, double scale, double *started, double *finished) {
  em_dist_group *g = s->group;
  char *data = dist_symm_data(s);
  size_t es = em_dtype_size(t->dtype);
  int64_t numel = em_tensor_numel(t);
  char *at = (char *)em_tensor_data(t);
  if (!dist_symm_supports(t->dtype) || !em_tensor_is_contiguous(t) || at < data ||
      at + numel * (int64_t)es > data + s->bytes)
    return em_set_error(EM_ERR_ARGUMENT,
                        "symmetric all_reduce: the tensor (%s %s) is not a contiguous floating tensor in "
                        "this group's symmetric memory",
                        em_dtype_name(t->dtype), EM_SHAPE(t));
  em_dist_work w;
  begin_collective(&w, g, EM_DIST_OP_ALL_REDUCE, t, EM_DIST_SUM);
  if (started) *started = w.posted_at;

  s->epoch += 2;
  em_status st = meet(s, s->epoch - 1, &w);
  if (!st) {
    reduce_my_slice(s, t->dtype, (int64_t)(at - data), numel, EM_DIST_SUM, scale);
    st = meet(s, s->epoch, &w);
  }
  end_collective(&w);
  if (finished) *finished = em_clock_monotonic();
  return st;
}

/* ---------------------------------------------------------------- user allreduce */

/* 256 KiB: a chunk, and the peers' slices read from their scratch, stay in cache; with
 * 8 MiB chunks 4-16 MB allreduces ran at 0.75-0.8 of MPI's speed, with 256 KiB 1.16-1.2. */
#define SCRATCH_BYTES ((int64_t)256 << 10)

/* A plain all_reduce (the caller waits) of a CPU tensor, on a group whose ranks share a
 * host: through the group's scratch buffer in symmetric memory, in chunks of 256 KiB.
 * Each chunk is copied in, each rank combines its slice from every rank's scratch (in rank
 * order: identical bits everywhere), and copied back: three passes over the data, where
 * MPI's shared-memory path makes several copies and hand-offs (bench/distributed/run.sh: 1.2-3.4x
 * MPI_Allreduce's bus bandwidth from 4 KB to 256 MB on 2 ranks).
 * The scratch is made on the group's first such call (collectively: every rank makes the
 * same call); if the ranks cannot share memory, the group never tries again. */
static em_dist_symm *scratch_of(em_dist_group *g, em_status *st) {
  *st = EM_OK;
  if (!g->symm_state) {
    char why[200];
    em_dist_symm *s = NULL;
    if ((*st = dist_symm_new(g, SCRATCH_BYTES, &s, why, sizeof why))) return NULL;
    if (!s) {
      g->symm_state = -1;
      return NULL;
    }
    s->group_weak = 1; /* the group holds it: no reference the other way */
    em_dist_group_release(g);
    g->symm = s;
    g->symm_state = 1;
  }
  return g->symm_state > 0 ? g->symm : NULL;
}

int dist_symm_try_all_reduce(em_dist_group *g, em_tensor *t, em_dist_redop op, em_status *st) {
  em_dtype dt = t->dtype; /* every dtype: dist_combine takes them all */
  if (g->size < 2 || g->rank < 0 || t->storage->device.type != EM_CPU || !em_tensor_is_contiguous(t) ||
      g->symm_state < 0)
    return 0;
  em_dist_symm *s = scratch_of(g, st);
  if (!s) return *st != EM_OK;
  int64_t numel = em_tensor_numel(t), es = (int64_t)em_dtype_size(dt), per = SCRATCH_BYTES / es;
  char *data = dist_symm_data(s), *at = (char *)em_tensor_data(t);
  double scale = op == EM_DIST_AVG ? 1.0 / g->size : 1.0;
  em_dist_redop combine = op == EM_DIST_AVG ? EM_DIST_SUM : op;
  em_dist_work w;
  begin_collective(&w, g, EM_DIST_OP_ALL_REDUCE, t, op);
  *st = EM_OK;
  int64_t done = 0;
  do { /* at least one round, so that an empty tensor meets too (and is checked) */
    int64_t m = numel - done < per ? numel - done : per;
    memcpy(data, at + done * es, (size_t)(m * es));
    s->epoch += 2;
    if ((*st = meet(s, s->epoch - 1, &w))) break;
    reduce_my_slice(s, dt, 0, m, combine, scale);
    if ((*st = meet(s, s->epoch, &w))) break;
    memcpy(at + done * es, data, (size_t)(m * es));
    done += m;
  } while (done < numel);
  end_collective(&w);
  return 1;
}

/* ---------------------------------------------------------------- broadcast */

/* Copies the root's t into every member's t, where t lies in s's memory (a bucket): each
 * member reads the root's copy straight from the root's segment. */
em_status dist_symm_broadcast(em_dist_symm *s, em_tensor *t, int root) {
  char *data = dist_symm_data(s), *at = (char *)em_tensor_data(t);
  int64_t bytes = em_tensor_numel(t) * (int64_t)em_dtype_size(t->dtype);
  if (!em_tensor_is_contiguous(t) || at < data || at + bytes > data + s->bytes)
    return em_set_error(EM_ERR_ARGUMENT, "symmetric broadcast: the tensor (%s %s) is not in this group's symmetric memory",
                        em_dtype_name(t->dtype), EM_SHAPE(t));
  em_dist_work w;
  begin_collective(&w, s->group, EM_DIST_OP_BROADCAST, t, EM_DIST_SUM);
  w.peer = root;
  s->epoch += 2;
  em_status st = meet(s, s->epoch - 1, &w);
  if (!st && s->rank != root) memcpy(at, s->base[root] + SYMM_HEADER + (at - data), (size_t)bytes);
  if (!st) st = meet(s, s->epoch, &w);
  end_collective(&w);
  return st;
}

/* A plain broadcast of a CPU tensor through g's scratch, in chunks: the root copies a chunk
 * in, the others copy it out of the root's segment. 0 when it does not apply. */
int dist_symm_try_broadcast(em_dist_group *g, em_tensor *t, int root, em_status *st) {
  if (g->size < 2 || g->rank < 0 || t->storage->device.type != EM_CPU || !em_tensor_is_contiguous(t) ||
      g->symm_state < 0)
    return 0;
  em_dist_symm *s = scratch_of(g, st);
  if (!s) return *st != EM_OK;
  int64_t bytes = em_tensor_numel(t) * (int64_t)em_dtype_size(t->dtype), done = 0;
  char *data = dist_symm_data(s), *at = (char *)em_tensor_data(t);
  em_dist_work w;
  begin_collective(&w, g, EM_DIST_OP_BROADCAST, t, EM_DIST_SUM);
  w.peer = root;
  do {
    int64_t m = bytes - done < SCRATCH_BYTES ? bytes - done : SCRATCH_BYTES;
    if (s->rank == root) memcpy(data, at + done, (size_t)m);
    s->epoch += 2;
    if ((*st = meet(s, s->epoch - 1, &w))) break;
    if (s->rank != root) memcpy(at + done, s->base[root] + SYMM_HEADER, (size_t)m);
    if ((*st = meet(s, s->epoch, &w))) break;
    done += m;
  } while (done < bytes);
  end_collective(&w);
  return 1;
}

/* ---------------------------------------------------------------- all_to_all(_v) */

/* A plain all_to_all_v (all_to_all: even counts) of CPU tensors on a group whose ranks share
 * a host, through g's scratch. Each rank publishes its counts (in_counts, then out_counts) at
 * the head of its scratch and every rank checks the whole matrix, so counts that disagree
 * are the same error on every rank. Then, round by round, each rank copies the next piece
 * of every block into its scratch, one slot per destination, and every rank copies its
 * pieces straight out of the others' slots: two copies of each byte and no messages, where
 * Gloo's all_to_all (and PyTorch's Gloo process group alike) took ~0.5 ms for 64 KB between
 * two local ranks (bench/distributed/gloo.sh -o all_to_all). 0 when it does not apply. */
int dist_symm_try_all_to_all_v(em_dist_group *g, em_tensor *out, const int64_t *out_counts, const em_tensor *in,
                               const int64_t *in_counts, em_dist_opkind kind, em_status *st) {
  *st = EM_OK;
  int n = g->size;
  if (n < 2 || g->rank < 0 || in->storage->device.type != EM_CPU || out->storage->device.type != EM_CPU ||
      !em_tensor_is_contiguous(in) || !em_tensor_is_contiguous(out) || g->symm_state < 0)
    return 0;
  int64_t es = (int64_t)em_dtype_size(in->dtype), head = ((int64_t)16 * n + 63) / 64 * 64;
  int64_t slot = (SCRATCH_BYTES - head) / n / 64 * 64 / es; /* elements of one block per round */
  if (slot < 1) return 0; /* more ranks than the scratch has slots for */
  int64_t *off = malloc(sizeof(int64_t) * 2 * (size_t)n); /* each block's start in in, then in out */
  if (!off) return 0;
  em_dist_symm *s = scratch_of(g, st);
  if (!s) {
    free(off);
    return *st != EM_OK;
  }
  for (int r = 0; r < n; r++) off[r] = r ? off[r - 1] + in_counts[r - 1] : 0;
  for (int r = 0; r < n; r++) off[n + r] = r ? off[n + r - 1] + out_counts[r - 1] : 0;
  char *data = dist_symm_data(s);
  memcpy(data, in_counts, sizeof(int64_t) * (size_t)n);
  memcpy(data + 8 * n, out_counts, sizeof(int64_t) * (size_t)n);
  em_dist_work w;
  begin_collective(&w, g, kind, (em_tensor *)in, EM_DIST_SUM);
  w.out = out;
  s->epoch += 2;
  *st = meet(s, s->epoch - 1, &w);
  int64_t rounds = 0;
  char msg[256] = "";
  for (int i = 0; !*st && !msg[0] && i < n; i++)
    for (int r = 0; r < n; r++) {
      int64_t sends = ((const int64_t *)(s->base[i] + SYMM_HEADER))[r];
      int64_t expects = ((const int64_t *)(s->base[r] + SYMM_HEADER))[n + i];
      if (sends != expects) {
        snprintf(msg, sizeof msg,
                 "the counts do not match: rank %d sends %lld elements to rank %d, which expects %lld from it "
                 "(in_counts[r] on each rank must equal out_counts[this rank] on rank r)",
                 i, (long long)sends, r, (long long)expects);
        break;
      }
      if ((sends + slot - 1) / slot > rounds) rounds = (sends + slot - 1) / slot;
    }
  if (!*st && (msg[0] || rounds == 0)) { /* nothing to move: meet once more, so no rank rewrites its counts */
    *st = meet(s, s->epoch, &w);    /* while another still reads them */
    if (!*st && msg[0]) {
      char what[320];
      emp_dist_describe(&w, what, sizeof what);
      *st = em_set_error(EM_ERR_ARGUMENT, "ember.dist: %s: %s", what, msg);
    }
  }
  const char *src = (const char *)em_tensor_data(in);
  char *dst = (char *)em_tensor_data(out);
  for (int64_t k = 0; !*st && !msg[0] && k < rounds; k++) {
    int64_t lo = k * slot;
    for (int q = 0; q < n; q++) {
      int64_t m = in_counts[q] - lo < slot ? in_counts[q] - lo : slot;
      if (m > 0) memcpy(data + head + (int64_t)q * slot * es, src + (off[q] + lo) * es, (size_t)(m * es));
    }
    s->epoch += 2;
    if ((*st = meet(s, s->epoch - 1, &w))) break;
    for (int r = 0; r < n; r++) {
      int64_t m = out_counts[r] - lo < slot ? out_counts[r] - lo : slot;
      if (m > 0)
        memcpy(dst + (off[n + r] + lo) * es, s->base[r] + SYMM_HEADER + head + (int64_t)s->rank * slot * es,
               (size_t)(m * es));
    }
    *st = meet(s, s->epoch, &w);
  }
  end_collective(&w);
  free(off);
  return 1;
}
