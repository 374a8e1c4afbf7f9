/* mpi_coll.c - all_to_all, all_to_all_v, gather, scatter, reduce and all_gather_v on MPI.
 *
 * Each is MPI's own non-blocking collective (MPI_Ialltoall, Ialltoallv, Igather, Iscatter,
 * Ireduce, Iallgatherv), or its blocking one for a plain call of up to 256 KB per rank
 * (mpi_backend.c says why), progressed like the others (mpi_thread.c).
 *
 * Counts. all_to_all_v first exchanges its counts (an MPI_Ialltoall of one int64 per peer:
 * what this rank sends each one), so that each rank can compare what its peers will send
 * with what it expects, then gathers every rank's verdict (MPI_Iallgather of 4 int64): a
 * mismatch anywhere fails the collective on every rank with the same message, instead of
 * a truncation error on one rank and a hang on the others. all_gather_v checks that every
 * rank passed the same counts (its own count and a hash of the array, gathered) the same
 * way. Two small collectives of latency per call; the data follow only when all agree.
 *
 * Large counts. MPI's counts and displacements are ints. A block, count or displacement
 * above 2^31 - 1 elements (EMBER_DIST_MPI_P2P_ABOVE lowers that bound, for tests) sends
 * the data as point-to-point messages of at most that many elements each (reduce: as
 * several MPI_Ireduce). Whether a call goes that way is decided from what every rank knows
 * alike (the even block size, or the verdicts gathered above), so all ranks take the
 * same path. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mpi_impl.h"

#define TAG_P2P 32768 /* above the user's tags [0, 32767]: no user receive matches these */
#define MAX_INT_COUNT ((int64_t)INT_MAX)

static int64_t p2p_above = -1; /* counts above this go point to point */

static int64_t limit(void) {
  if (p2p_above < 0) {
    const char *e = getenv("EMBER_DIST_MPI_P2P_ABOVE");
    long long v = e ? atoll(e) : 0;
    p2p_above = v > 0 && v < MAX_INT_COUNT ? v : MAX_INT_COUNT;
  }
  return p2p_above;
}

static void *data_of(const em_tensor *t) {
  static char dummy[16]; /* MPI wants a valid address even for 0 elements */
  void *p = t ? em_tensor_data(t) : NULL;
  return p ? p : dummy;
}

static size_t esize_of(const em_dist_work *w) {
  const em_tensor *t = w->in ? w->in : w->out;
  return t ? em_dtype_size(t->dtype) : 1;
}

static void fail(inflight *f, em_status st, const char *what, int code) {
  char msg[EM_DIST_MSG], desc[256], why[400];
  emp_dist_describe(f->w, desc, sizeof desc);
  if (code) em_mpi_error_text(code, why, sizeof why);
  else snprintf(why, sizeof why, "%s", what);
  snprintf(msg, sizeof msg, "%s: %s", desc, why);
  if (f->w->seq) f->g->completed_seq = f->w->seq;
  emp_dist_work_done(f->w, st, msg);
}

static void release_hold(inflight *f) {
  if (f->holding) em_mpi_hold(-1);
  f->holding = 0;
}

void em_mpi_coll_free(inflight *f) {
  release_hold(f);
  free(f->scratch);
  free(f->ints);
  f->scratch = NULL;
  f->ints = NULL;
}

/* Room for n requests (the previous step's are all complete). */
static int reserve(inflight *f, int64_t n) {
  if (f->reqs != f->small) free(f->reqs);
  f->reqs = f->small;
  f->nreq = 0;
  if (n > 4) {
    if (n > INT_MAX || !(f->reqs = malloc(sizeof(MPI_Request) * (size_t)n))) {
      f->reqs = f->small;
      return 0;
    }
  }
  for (int64_t i = 0; i < (n > 4 ? n : 4); i++) f->reqs[i] = MPI_REQUEST_NULL;
  return 1;
}

/* ---------------------------------------------------------------- blocking */

int64_t em_mpi_coll_direct_bytes(const em_dist_work *w) {
  size_t es = esize_of(w);
  switch (w->kind) {
    case EM_DIST_OP_ALL_TO_ALL: return em_tensor_numel(w->in) / w->group->size * (int64_t)es;
    case EM_DIST_OP_GATHER: return em_tensor_numel(w->in) * (int64_t)es;
    case EM_DIST_OP_SCATTER: return em_tensor_numel(w->out) * (int64_t)es;
    case EM_DIST_OP_REDUCE: return em_tensor_numel(w->out) * (int64_t)es;
    default: return -1; /* the _v kinds check their counts first */
  }
}

int em_mpi_coll_blocking(em_dist_work *w, mpi_group *g, MPI_Datatype dt, MPI_Op op) {
  int root = w->peer, me = g->rank;
  switch (w->kind) {
    case EM_DIST_OP_ALL_TO_ALL: {
      int k = (int)(em_tensor_numel(w->in) / g->size);
      return MPI_Alltoall(em_mpi_send_buf(w), k, dt, data_of(w->out), k, dt, g->comm);
    }
    case EM_DIST_OP_GATHER: {
      int k = (int)em_tensor_numel(w->in);
      return MPI_Gather(em_mpi_send_buf(w), k, dt, data_of(w->out), k, dt, root, g->comm);
    }
    case EM_DIST_OP_SCATTER: {
      int k = (int)em_tensor_numel(w->out);
      return MPI_Scatter(em_mpi_send_buf(w), k, dt, data_of(w->out), k, dt, root, g->comm);
    }
    case EM_DIST_OP_REDUCE: {
      int n = (int)em_tensor_numel(w->out);
      int rc = me == root ? MPI_Reduce(MPI_IN_PLACE, data_of(w->out), n, dt, op, root, g->comm)
                          : MPI_Reduce(data_of(w->out), NULL, n, dt, op, root, g->comm);
      if (rc == MPI_SUCCESS && me == root && w->redop == EM_DIST_AVG)
        emp_dist_scale(data_of(w->out), n, w->out->dtype, 1.0 / g->size);
      return rc;
    }
    default: return MPI_ERR_OP;
  }
}

/* ---------------------------------------------------------------- point to point (large counts) */

/* plan: 4 arrays of size int64 (send count, send offset, receive count, receive offset,
 * per peer, in elements). Posts every message in pieces of at most limit() elements and
 * copies this rank's own block. */
static int post_p2p(inflight *f, const int64_t *plan) {
  int size = f->g->size, me = f->g->rank;
  const int64_t *sn = plan, *so = plan + size, *rn = plan + 2 * size, *ro = plan + 3 * size;
  int64_t piece = limit(), need = 0;
  for (int r = 0; r < size; r++)
    if (r != me) need += (sn[r] + piece - 1) / piece + (rn[r] + piece - 1) / piece;
  int *ub = NULL, flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  if (!flag || !ub || *ub < TAG_P2P) {
    fail(f, EM_ERR_UNSUPPORTED, "counts above 2^31 - 1 elements need MPI tags above 32767, which this MPI lacks", 0);
    return 0;
  }
  if (!reserve(f, need)) {
    fail(f, EM_ERR_MEMORY, "out of memory", 0);
    return 0;
  }
  size_t es = esize_of(f->w);
  char *in = data_of(f->w->in), *out = data_of(f->w->out);
  int rc = MPI_SUCCESS;
  /* receives first, so that the sends find them posted */
  for (int pass = 0; pass < 2 && rc == MPI_SUCCESS; pass++)
    for (int r = 0; r < size && rc == MPI_SUCCESS; r++) {
      int64_t n = pass ? sn[r] : rn[r];
      if (r == me || n == 0) continue;
      char *p = pass ? in + so[r] * (int64_t)es : out + ro[r] * (int64_t)es;
      for (int64_t off = 0; off < n && rc == MPI_SUCCESS; off += piece) {
        int cnt = (int)(n - off < piece ? n - off : piece);
        MPI_Request *q = &f->reqs[f->nreq++];
        rc = pass ? MPI_Isend(p + off * (int64_t)es, cnt, f->dt, r, TAG_P2P, f->g->comm, q)
                  : MPI_Irecv(p + off * (int64_t)es, cnt, f->dt, r, TAG_P2P, f->g->comm, q);
      }
    }
  if (rc != MPI_SUCCESS) {
    fail(f, EM_ERR_RUNTIME, NULL, rc);
    return 0;
  }
  if (rn[me] > 0) memcpy(out + ro[me] * (int64_t)es, in + so[me] * (int64_t)es, (size_t)rn[me] * es);
  return 1;
}

/* A plan of 4 x size zeros in f->scratch past its first `keep` entries; NULL without memory. */
static int64_t *new_plan(inflight *f, int64_t keep) {
  int64_t *s = realloc(f->scratch, sizeof(int64_t) * (size_t)(keep + 4 * (int64_t)f->g->size));
  if (!s) return NULL;
  f->scratch = s;
  memset(s + keep, 0, sizeof(int64_t) * 4 * (size_t)f->g->size);
  return s + keep;
}

/* ---------------------------------------------------------------- the even kinds */

static int start_even(inflight *f, MPI_Op op) {
  em_dist_work *w = f->w;
  mpi_group *g = f->g;
  int size = g->size, me = g->rank, root = w->peer;
  int64_t k = w->kind == EM_DIST_OP_ALL_TO_ALL ? em_tensor_numel(w->in) / size
              : w->kind == EM_DIST_OP_GATHER   ? em_tensor_numel(w->in)
                                               : em_tensor_numel(w->out);
  int rc = MPI_SUCCESS;
  if (w->kind == EM_DIST_OP_REDUCE) { /* in pieces of at most limit() elements */
    int64_t piece = limit(), n = k, nreq = n ? (n + piece - 1) / piece : 1;
    if (!reserve(f, nreq)) {
      fail(f, EM_ERR_MEMORY, "out of memory", 0);
      return 0;
    }
    size_t es = esize_of(w);
    char *p = data_of(w->out);
    for (int64_t off = 0, i = 0; i < nreq && rc == MPI_SUCCESS; off += piece, i++) {
      int cnt = (int)(n - off < piece ? n - off : piece);
      char *q = p + off * (int64_t)es;
      rc = me == root ? MPI_Ireduce(MPI_IN_PLACE, q, cnt, f->dt, op, root, g->comm, &f->reqs[i])
                      : MPI_Ireduce(q, NULL, cnt, f->dt, op, root, g->comm, &f->reqs[i]);
      f->nreq = (int)i + 1;
    }
  } else if (k > limit()) {
    int64_t *plan = new_plan(f, 0);
    if (!plan) {
      fail(f, EM_ERR_MEMORY, "out of memory", 0);
      return 0;
    }
    int64_t *sn = plan, *so = plan + size, *rn = plan + 2 * size, *ro = plan + 3 * size;
    for (int r = 0; r < size; r++) {
      if (w->kind == EM_DIST_OP_ALL_TO_ALL) sn[r] = rn[r] = k, so[r] = ro[r] = r * k;
      else if (w->kind == EM_DIST_OP_GATHER) {
        if (me == root) rn[r] = k, ro[r] = r * k;
        if (r == root) sn[r] = k;
      } else { /* scatter */
        if (me == root) sn[r] = k, so[r] = r * k;
        if (r == root) rn[r] = k;
      }
    }
    return post_p2p(f, plan);
  } else {
    reserve(f, 1);
    f->nreq = 1;
    void *in = em_mpi_send_buf(w), *out = data_of(w->out);
    switch (w->kind) {
      case EM_DIST_OP_ALL_TO_ALL: rc = MPI_Ialltoall(in, (int)k, f->dt, out, (int)k, f->dt, g->comm, f->reqs); break;
      case EM_DIST_OP_GATHER: rc = MPI_Igather(in, (int)k, f->dt, out, (int)k, f->dt, root, g->comm, f->reqs); break;
      default: rc = MPI_Iscatter(in, (int)k, f->dt, out, (int)k, f->dt, root, g->comm, f->reqs); break;
    }
  }
  if (rc != MPI_SUCCESS) {
    fail(f, EM_ERR_RUNTIME, NULL, rc);
    return 0;
  }
  return 1;
}

/* ---------------------------------------------------------------- the counted kinds */

static uint64_t hash_counts(const int64_t *c, int n) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a over the bytes */
  const unsigned char *p = (const unsigned char *)c;
  for (size_t i = 0; i < sizeof(int64_t) * (size_t)n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/* Step 0, checking the counts. all_to_all_v: scratch = [size] what this rank sends each
 * peer, [size] what each peer sends it, [4] this rank's verdict, [4 * size] everyone's.
 * all_gather_v: scratch = [2] (counts[rank], hash), [2 * size] everyone's. */
static int start_check(inflight *f) {
  em_dist_work *w = f->w;
  int size = f->g->size;
  int rc;
  reserve(f, 1);
  f->nreq = 1;
  if (w->kind == EM_DIST_OP_ALL_TO_ALL_V) {
    if (!(f->scratch = calloc(6 * (size_t)size + 4, sizeof(int64_t)))) {
      fail(f, EM_ERR_MEMORY, "out of memory", 0);
      return 0;
    }
    memcpy(f->scratch, w->in_counts, sizeof(int64_t) * size);
    rc = MPI_Ialltoall(f->scratch, 1, MPI_INT64_T, f->scratch + size, 1, MPI_INT64_T, f->g->comm, f->reqs);
  } else {
    if (!(f->scratch = calloc(2 * (size_t)size + 2, sizeof(int64_t)))) {
      fail(f, EM_ERR_MEMORY, "out of memory", 0);
      return 0;
    }
    f->scratch[0] = w->out_counts[f->g->rank];
    f->scratch[1] = (int64_t)hash_counts(w->out_counts, size);
    rc = MPI_Iallgather(f->scratch, 2, MPI_INT64_T, f->scratch + 2, 2, MPI_INT64_T, f->g->comm, f->reqs);
  }
  if (rc != MPI_SUCCESS) {
    fail(f, EM_ERR_RUNTIME, NULL, rc);
    return 0;
  }
  f->holding = 1;
  em_mpi_hold(1);
  return 1;
}

/* all_to_all_v, step 1: this rank's verdict, gathered. */
static int a2av_verdict(inflight *f) {
  em_dist_work *w = f->w;
  int size = f->g->size;
  int64_t *got = f->scratch + size, *mine = f->scratch + 2 * size, *all = mine + 4;
  mine[0] = -1;
  for (int r = 0; r < size; r++)
    if (got[r] != w->out_counts[r]) {
      mine[0] = r, mine[1] = got[r], mine[2] = w->out_counts[r];
      break;
    }
  int64_t in_off = 0, out_off = 0, lim = limit();
  for (int r = 0; r < size; r++) {
    if (w->in_counts[r] > lim || w->out_counts[r] > lim || in_off > lim || out_off > lim) mine[3] = 1;
    in_off += w->in_counts[r], out_off += w->out_counts[r];
  }
  reserve(f, 1);
  f->nreq = 1;
  int rc = MPI_Iallgather(mine, 4, MPI_INT64_T, all, 4, MPI_INT64_T, f->g->comm, f->reqs);
  if (rc != MPI_SUCCESS) {
    release_hold(f);
    fail(f, EM_ERR_RUNTIME, NULL, rc);
    return 0;
  }
  return 1;
}

/* The data step of the counted kinds, once every rank's verdict is here (the same
 * everywhere): fails w on every rank alike, or posts the data. */
static int start_data(inflight *f) {
  em_dist_work *w = f->w;
  mpi_group *g = f->g;
  int size = g->size, me = g->rank;
  int large = 0;
  char why[400] = "";
  release_hold(f); /* whatever follows, this rank's place in the order is taken */
  if (w->kind == EM_DIST_OP_ALL_TO_ALL_V) {
    const int64_t *all = f->scratch + 2 * size + 4;
    for (int r = 0; r < size && !why[0]; r++)
      if (all[4 * r] >= 0)
        snprintf(why, sizeof why,
                 "rank %d sends %lld elements to rank %d, which expects %lld (every rank's in_counts[r] must equal "
                 "rank r's out_counts[that rank]); no data moved, on any rank",
                 (int)all[4 * r], (long long)all[4 * r + 1], r, (long long)all[4 * r + 2]);
    for (int r = 0; r < size; r++) large |= all[4 * r + 3] != 0;
  } else {
    const int64_t *all = f->scratch + 2;
    int64_t total = 0;
    for (int r = 0; r < size && !why[0]; r++) {
      if (all[2 * r + 1] != all[1])
        snprintf(why, sizeof why,
                 "rank %d passed other counts than rank 0 (every rank must pass the same counts); no data moved, "
                 "on any rank",
                 r);
      else if (all[2 * r] != w->out_counts[r])
        snprintf(why, sizeof why, "rank %d sends %lld elements, counts[%d] says %lld; no data moved, on any rank", r,
                 (long long)all[2 * r], r, (long long)w->out_counts[r]);
    }
    for (int r = 0; r < size; r++) {
      if (w->out_counts[r] > limit() || total > limit()) large = 1;
      total += w->out_counts[r];
    }
  }
  if (why[0]) {
    fail(f, EM_ERR_ARGUMENT, why, 0);
    return 0;
  }
  f->stage = 2;
  if (large) {
    int64_t *plan = new_plan(f, 0);
    if (!plan) {
      fail(f, EM_ERR_MEMORY, "out of memory", 0);
      return 0;
    }
    int64_t *sn = plan, *so = plan + size, *rn = plan + 2 * size, *ro = plan + 3 * size, in_off = 0, out_off = 0;
    for (int r = 0; r < size; r++) {
      rn[r] = w->out_counts[r], ro[r] = out_off, out_off += rn[r];
      if (w->kind == EM_DIST_OP_ALL_TO_ALL_V) sn[r] = w->in_counts[r], so[r] = in_off, in_off += sn[r];
      else sn[r] = w->out_counts[me], so[r] = 0;
    }
    return post_p2p(f, plan);
  }
  /* int counts and displacements: [size] send counts, [size] send displs, [size] receive
   * counts, [size] receive displs */
  if (!(f->ints = malloc(sizeof(int) * 4 * (size_t)size))) {
    fail(f, EM_ERR_MEMORY, "out of memory", 0);
    return 0;
  }
  int *sc = f->ints, *sd = sc + size, *rc_ = sd + size, *rd = rc_ + size, in_off = 0, out_off = 0;
  for (int r = 0; r < size; r++) {
    rc_[r] = (int)w->out_counts[r], rd[r] = out_off, out_off += rc_[r];
    if (w->in_counts) sc[r] = (int)w->in_counts[r], sd[r] = in_off, in_off += sc[r];
  }
  reserve(f, 1);
  f->nreq = 1;
  int rc = w->kind == EM_DIST_OP_ALL_TO_ALL_V
               ? MPI_Ialltoallv(em_mpi_send_buf(w), sc, sd, f->dt, data_of(w->out), rc_, rd, f->dt, g->comm, f->reqs)
               : MPI_Iallgatherv(em_mpi_send_buf(w), (int)w->out_counts[me], f->dt, data_of(w->out), rc_, rd, f->dt,
                                 g->comm, f->reqs);
  if (rc != MPI_SUCCESS) {
    fail(f, EM_ERR_RUNTIME, NULL, rc);
    return 0;
  }
  return 1;
}

/* ---------------------------------------------------------------- entries */

int em_mpi_coll_start(inflight *f, MPI_Op op) {
  int ok = f->w->kind == EM_DIST_OP_ALL_TO_ALL_V || f->w->kind == EM_DIST_OP_ALL_GATHER_V ? start_check(f)
                                                                                           : start_even(f, op);
  if (ok) return 1;
  em_mpi_coll_free(f);
  if (f->reqs != f->small) free(f->reqs);
  free(f);
  return 0;
}

int em_mpi_coll_advance(inflight *f) {
  em_dist_work *w = f->w;
  int ok;
  if (w->kind == EM_DIST_OP_ALL_TO_ALL_V && f->stage == 0) {
    f->stage = 1;
    ok = a2av_verdict(f);
  } else if ((w->kind == EM_DIST_OP_ALL_TO_ALL_V && f->stage == 1) ||
             (w->kind == EM_DIST_OP_ALL_GATHER_V && f->stage == 0)) {
    ok = start_data(f);
  } else {
    if (w->kind == EM_DIST_OP_REDUCE && w->redop == EM_DIST_AVG && f->g->rank == w->peer)
      emp_dist_scale(data_of(w->out), em_tensor_numel(w->out), w->out->dtype, 1.0 / f->g->size);
    return 0;
  }
  return ok ? 1 : -1;
}
