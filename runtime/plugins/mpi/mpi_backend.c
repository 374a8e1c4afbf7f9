/* mpi_backend.c - the MPI backend's table, and how one work becomes MPI calls.
 *
 * Every operation is non-blocking (MPI_Iallreduce, MPI_Ibcast, MPI_Iallgather,
 * MPI_Ireduce_scatter_block, MPI_Ibarrier, MPI_Isend/Irecv; the kinds from all_to_all on
 * are mpi_coll.c's), posted and tested by the
 * progress engine (mpi_thread.c). Reductions are MPI's own for the standard dtypes
 * (so the result is bit-identical on every rank: each algorithm combines the same
 * operands in the same order everywhere, and floating-point addition commutes), and
 * ember's for float16/bfloat16 (summed in float32, rounded once per step). 'avg' is a sum
 * scaled by 1/size once it completes. Buffers above 2^30 elements go as several
 * operations. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mpi_impl.h"

#define CHUNK_ELEMS ((int64_t)1 << 30)

/* ---------------------------------------------------------------- datatypes, reductions */

static MPI_Datatype datatype_of(em_dtype d) {
  switch (d) {
    case EM_FLOAT32: return MPI_FLOAT;
    case EM_FLOAT64: return MPI_DOUBLE;
    case EM_INT32: return MPI_INT32_T;
    case EM_INT64: return MPI_INT64_T;
    case EM_UINT8: return MPI_UINT8_T;
    case EM_BOOL: return MPI_C_BOOL;
    default: return MPI_UINT16_T; /* float16, bfloat16: reduced by the ops below */
  }
}

/* [0] float16, [1] bfloat16; by em_dist_redop (avg uses sum). */
static MPI_Op half_ops[2][EM_DIST_NUM_REDOPS];
static int half_ops_created;

#define HALF_OP(name, T, LOAD, STORE, EXPR)                             \
  static void name(void *in, void *inout, int *len, MPI_Datatype *dt) { \
    (void)dt;                                                           \
    const T *restrict a = in;                                           \
    T *restrict b = inout;                                              \
    for (int i = 0; i < *len; i++) {                                    \
      float x = LOAD(a[i]), y = LOAD(b[i]);                             \
      b[i] = STORE(EXPR);                                               \
    }                                                                   \
  }
#define F16_LOAD(v) ((float)(v))
#define F16_STORE(v) ((_Float16)(v))
HALF_OP(f16_sum, _Float16, F16_LOAD, F16_STORE, x + y)
HALF_OP(f16_max, _Float16, F16_LOAD, F16_STORE, x > y || x != x ? x : y)
HALF_OP(f16_min, _Float16, F16_LOAD, F16_STORE, x < y || x != x ? x : y)
HALF_OP(f16_prod, _Float16, F16_LOAD, F16_STORE, x *y)
HALF_OP(bf16_sum, uint16_t, em_bf16_to_float, em_float_to_bf16, x + y)
HALF_OP(bf16_max, uint16_t, em_bf16_to_float, em_float_to_bf16, x > y || x != x ? x : y)
HALF_OP(bf16_min, uint16_t, em_bf16_to_float, em_float_to_bf16, x < y || x != x ? x : y)
HALF_OP(bf16_prod, uint16_t, em_bf16_to_float, em_float_to_bf16, x *y)

void em_mpi_create_ops(void) {
  MPI_User_function *fns[2][EM_DIST_NUM_REDOPS] = {{f16_sum, f16_sum, f16_max, f16_min, f16_prod},
                                                   {bf16_sum, bf16_sum, bf16_max, bf16_min, bf16_prod}};
  for (int k = 0; k < 2; k++)
    for (int r = 0; r < EM_DIST_NUM_REDOPS; r++) MPI_Op_create(fns[k][r], 1, &half_ops[k][r]);
  half_ops_created = 1;
}

void em_mpi_free_ops(void) {
  if (!half_ops_created) return;
  for (int k = 0; k < 2; k++)
    for (int r = 0; r < EM_DIST_NUM_REDOPS; r++) MPI_Op_free(&half_ops[k][r]);
  half_ops_created = 0;
}

static MPI_Op op_of(em_dist_redop r, em_dtype d) {
  if (d == EM_FLOAT16) return half_ops[0][r];
  if (d == EM_BFLOAT16) return half_ops[1][r];
  if (d == EM_BOOL) return r == EM_DIST_SUM || r == EM_DIST_MAX ? MPI_LOR : MPI_LAND;
  switch (r) {
    case EM_DIST_MAX: return MPI_MAX;
    case EM_DIST_MIN: return MPI_MIN;
    case EM_DIST_PRODUCT: return MPI_PROD;
    default: return MPI_SUM;
  }
}

void em_mpi_error_text(int code, char *buf, size_t cap) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "error code %d", code);
  snprintf(buf, cap, "MPI error: %s", text);
}

/* ---------------------------------------------------------------- starting and finishing */

static void *data_of(const em_tensor *t) {
  static char dummy[16]; /* MPI wants a valid address even for 0 elements */
  void *p = t ? em_tensor_data(t) : NULL;
  return p ? p : dummy;
}

/* A collective's send buffer, never at its receive buffer's address when it is empty:
 * Open MPI's non-blocking collectives read equal addresses as MPI_IN_PLACE, which changes
 * the message pattern on that rank alone, and two empty buffers can share one address
 * (both dummies here, or one caller's dummy for both): all_to_all_v hung with 4 ranks
 * partitioning a 3-vertex graph, the rank owning none sending and receiving nothing. */
void *em_mpi_send_buf(const em_dist_work *w) {
  static char other[16];
  void *s = data_of(w->in);
  return (!w->in || em_tensor_numel(w->in) == 0) && s == data_of(w->out) ? other : s;
}

static void fail_work(em_dist_work *w, const char *what, int code) {
  char msg[EM_DIST_MSG], desc[256], why[400];
  emp_dist_describe(w, desc, sizeof desc);
  if (code) em_mpi_error_text(code, why, sizeof why);
  else snprintf(why, sizeof why, "%s", what);
  snprintf(msg, sizeof msg, "%s: %s", desc, why);
  emp_dist_work_done(w, EM_ERR_RUNTIME, msg);
}

/* A plain blocking collective (w->direct) of up to 256 KB per rank runs as MPI's own
 * blocking collective (Open MPI's tuned algorithms): for small messages about half the
 * latency of the non-blocking ones, whose schedules cost more than the transfer. The choice
 * depends on the call alone, so every rank makes the same one (a blocking collective never
 * matches a non-blocking one). Only the waiting thread runs it, under the MPI lock, while
 * the communication thread watches the deadline (a blocking call cannot be interrupted to
 * ask the other ranks how far they got). Returns 1 when w was run (and completed). */
#define BLOCKING_MAX_BYTES ((int64_t)256 << 10)

static int run_blocking(em_dist_work *w, mpi_group *g) {
  const em_tensor *t = w->in ? w->in : w->out;
  int64_t n = t ? em_tensor_numel(t) : 0;
  em_dtype dtype = t ? t->dtype : EM_UINT8;
  if (w->kind == EM_DIST_OP_SEND || w->kind == EM_DIST_OP_RECV) return 0;
  /* (the newer kinds were found eligible by a size all ranks share: em_mpi_direct_eligible) */
  if (w->kind < EM_DIST_OP_ALL_TO_ALL && n * (int64_t)em_dtype_size(dtype) > BLOCKING_MAX_BYTES) return 0;
  MPI_Datatype dt = datatype_of(dtype);
  MPI_Op op = op_of(w->redop, dtype);
  w->started_at = em_clock_monotonic();
  if (w->seq) g->posted_seq = w->seq;
  em_mpi_watch_begin(w);
  int rc = MPI_SUCCESS;
  switch (w->kind) {
    case EM_DIST_OP_ALL_REDUCE: rc = MPI_Allreduce(MPI_IN_PLACE, data_of(w->out), (int)n, dt, op, g->comm); break;
    case EM_DIST_OP_BROADCAST: rc = MPI_Bcast(data_of(w->out), (int)n, dt, w->peer, g->comm); break;
    case EM_DIST_OP_ALL_GATHER:
      rc = MPI_Allgather(em_mpi_send_buf(w), (int)n, dt, data_of(w->out), (int)n, dt, g->comm);
      break;
    case EM_DIST_OP_REDUCE_SCATTER:
      rc = MPI_Reduce_scatter_block(em_mpi_send_buf(w), data_of(w->out), (int)(n / g->size), dt, op, g->comm);
      break;
    case EM_DIST_OP_BARRIER: rc = MPI_Barrier(g->comm); break;
    default: rc = em_mpi_coll_blocking(w, g, dt, op); break; /* mpi_coll.c */
  }
  em_mpi_watch_end();
  if (rc != MPI_SUCCESS) {
    fail_work(w, NULL, rc);
    return 1;
  }
  if (w->redop == EM_DIST_AVG && (w->kind == EM_DIST_OP_ALL_REDUCE || w->kind == EM_DIST_OP_REDUCE_SCATTER))
    emp_dist_scale(data_of(w->out), em_tensor_numel(w->out), w->out->dtype, 1.0 / g->size);
  if (w->seq) g->completed_seq = w->seq;
  emp_dist_work_done(w, EM_OK, NULL);
  return 1;
}

int em_mpi_direct_eligible(const em_dist_work *w) {
  const em_tensor *t = w->in ? w->in : w->out;
  int64_t bytes = t ? em_tensor_numel(t) * (int64_t)em_dtype_size(t->dtype) : 0;
  /* the newer kinds: a size every rank computes alike (a scatter's root has a bigger input) */
  if (w->kind >= EM_DIST_OP_ALL_TO_ALL && (bytes = em_mpi_coll_direct_bytes(w)) < 0) return 0;
  return w->direct && w->kind != EM_DIST_OP_SEND && w->kind != EM_DIST_OP_RECV && bytes <= BLOCKING_MAX_BYTES;
}

void em_mpi_run_blocking(em_dist_work *w, mpi_group *g) { run_blocking(w, g); }

void em_mpi_start_work(em_dist_work *w, mpi_group *g, int may_block) {
  if (may_block && em_mpi_direct_eligible(w) && run_blocking(w, g)) return;
  inflight *f = calloc(1, sizeof *f);
  if (!f) {
    fail_work(w, "out of memory", 0);
    return;
  }
  f->w = w;
  f->g = g;
  w->started_at = em_clock_monotonic();
  const em_tensor *t = w->in ? w->in : w->out;
  int64_t n = t ? em_tensor_numel(t) : 0;
  em_dtype dtype = t ? t->dtype : EM_UINT8;
  size_t esize = em_dtype_size(dtype);
  MPI_Datatype dt = datatype_of(dtype);
  MPI_Op op = op_of(w->redop, dtype);
  f->dt = dt;
  f->count = n;
  if (w->kind >= EM_DIST_OP_ALL_TO_ALL) { /* mpi_coll.c */
    f->reqs = f->small;
    if (em_mpi_coll_start(f, op)) {
      if (w->seq) g->posted_seq = w->seq;
      em_mpi_track(f);
    }
    return;
  }
  int chunked = w->kind == EM_DIST_OP_ALL_REDUCE || w->kind == EM_DIST_OP_BROADCAST || w->kind == EM_DIST_OP_SEND ||
                w->kind == EM_DIST_OP_RECV;
  int nreq = chunked && n > CHUNK_ELEMS ? (int)((n + CHUNK_ELEMS - 1) / CHUNK_ELEMS) : 1;
  f->reqs = nreq <= 4 ? f->small : malloc(sizeof(MPI_Request) * nreq);
  if (!f->reqs) {
    free(f);
    fail_work(w, "out of memory", 0);
    return;
  }
  f->nreq = nreq;
  for (int i = 0; i < nreq; i++) f->reqs[i] = MPI_REQUEST_NULL;
  char *buf = data_of(w->out ? w->out : w->in);
  int rc = MPI_SUCCESS;
  if (!chunked && n > INT_MAX) {
    if (f->reqs != f->small) free(f->reqs);
    free(f);
    fail_work(w, "more than 2^31 - 1 elements per rank are not supported", 0);
    return;
  }
  for (int i = 0; i < nreq && rc == MPI_SUCCESS; i++) {
    int64_t off = (int64_t)i * CHUNK_ELEMS;
    int cnt = (int)(n - off < CHUNK_ELEMS ? n - off : CHUNK_ELEMS);
    char *p = buf + off * esize;
    switch (w->kind) {
      case EM_DIST_OP_ALL_REDUCE: rc = MPI_Iallreduce(MPI_IN_PLACE, p, cnt, dt, op, g->comm, &f->reqs[i]); break;
      case EM_DIST_OP_BROADCAST: rc = MPI_Ibcast(p, cnt, dt, w->peer, g->comm, &f->reqs[i]); break;
      case EM_DIST_OP_SEND: rc = MPI_Isend(p, cnt, dt, w->peer, w->tag, g->comm, &f->reqs[i]); break;
      case EM_DIST_OP_RECV: rc = MPI_Irecv(p, cnt, dt, w->peer, w->tag, g->comm, &f->reqs[i]); break;
      case EM_DIST_OP_ALL_GATHER:
        rc = MPI_Iallgather(em_mpi_send_buf(w), (int)n, dt, data_of(w->out), (int)n, dt, g->comm, &f->reqs[i]);
        break;
      case EM_DIST_OP_REDUCE_SCATTER:
        rc = MPI_Ireduce_scatter_block(em_mpi_send_buf(w), data_of(w->out), (int)(n / g->size), dt, op, g->comm,
                                       &f->reqs[i]);
        break;
      case EM_DIST_OP_BARRIER: rc = MPI_Ibarrier(g->comm, &f->reqs[i]); break;
      default: break;
    }
  }
  if (w->seq) g->posted_seq = w->seq;
  if (rc != MPI_SUCCESS) {
    /* Requests already started cannot be cancelled (collectives); the job is inconsistent
     * now, and the error says so. */
    if (f->reqs != f->small) free(f->reqs);
    free(f);
    fail_work(w, NULL, rc);
    return;
  }
  em_mpi_track(f);
}

int em_mpi_try_finish(inflight *f) {
  em_dist_work *w = f->w;
  int flag = 0;
  MPI_Status small_st[4];
  MPI_Status *sts = w->kind == EM_DIST_OP_RECV ? (f->nreq <= 4 ? small_st : malloc(sizeof(MPI_Status) * f->nreq))
                                               : MPI_STATUSES_IGNORE;
  if (!sts) sts = MPI_STATUSES_IGNORE;
  int rc = MPI_Testall(f->nreq, f->reqs, &flag, sts);
  int next = 0; /* mpi_coll.c: 1 its next step is posted, -1 it failed w */
  if (rc == MPI_SUCCESS && flag && w->kind >= EM_DIST_OP_ALL_TO_ALL) next = em_mpi_coll_advance(f);
  if (next == 1) return 0;
  if (rc != MPI_SUCCESS) {
    fail_work(w, NULL, rc);
    flag = 1;
  } else if (flag && next == 0) {
    const char *problem = NULL;
    char msg[200];
    if (w->kind == EM_DIST_OP_RECV && sts != MPI_STATUSES_IGNORE) {
      int64_t got = 0;
      for (int i = 0; i < f->nreq; i++) {
        int c = 0;
        MPI_Get_count(&sts[i], f->dt, &c);
        got += c;
      }
      if (got != f->count) {
        snprintf(msg, sizeof msg, "expected %lld elements, the sender sent %lld", (long long)f->count, (long long)got);
        problem = msg;
      }
    }
    if (problem) {
      fail_work(w, problem, 0);
    } else {
      if (w->redop == EM_DIST_AVG && (w->kind == EM_DIST_OP_ALL_REDUCE || w->kind == EM_DIST_OP_REDUCE_SCATTER))
        emp_dist_scale(data_of(w->out), em_tensor_numel(w->out), w->out->dtype, 1.0 / f->g->size);
      if (w->seq) f->g->completed_seq = w->seq;
      emp_dist_work_done(w, EM_OK, NULL);
    }
  }
  if (sts != MPI_STATUSES_IGNORE && sts != small_st) free(sts);
  if (!flag) return 0;
  em_mpi_coll_free(f);
  if (f->reqs != f->small) free(f->reqs);
  free(f);
  return 1;
}

/* ---------------------------------------------------------------- the table (user threads) */

static em_status mpi_init(double timeout_s, int *rank, int *size, int *local_rank, void **impl) {
  mpi_group *world = NULL;
  em_status st = em_mpi_thread_start(timeout_s, rank, size, local_rank, &world);
  *impl = world;
  return st;
}

static em_status mpi_new_group(void *parent, int id, int n, const int *ranks, void **impl, int *rank) {
  mpi_task t = {.kind = TASK_NEW_GROUP, .group = parent, .n = n, .id = id};
  t.ranks = malloc(sizeof(int) * n);
  if (!t.ranks) return em_set_error(EM_ERR_MEMORY, "new_group: out of memory");
  memcpy(t.ranks, ranks, sizeof(int) * n);
  em_status st = em_mpi_submit(&t, 1);
  free(t.ranks);
  if (st) return st;
  *impl = t.result;
  *rank = t.result->rank;
  return EM_OK;
}

static void mpi_free_group(void *impl) {
  mpi_task t = {.kind = TASK_FREE_GROUP, .group = impl};
  if (em_mpi_submit(&t, 1)) {
    /* the thread is gone (after finalize): only the memory is left */
    mpi_group *g = impl;
    free(g->world_ranks);
    free(g);
  }
}

static em_status mpi_post(void *impl, em_dist_work *w) {
  mpi_task *t = calloc(1, sizeof *t);
  if (!t) return em_set_error(EM_ERR_MEMORY, "%s: out of memory", emp_dist_op_name(w->kind));
  t->kind = TASK_WORK;
  t->work = w;
  t->group = impl;
  em_status st = em_mpi_submit(t, 0);
  if (st) free(t);
  return st;
}

static const em_dist_backend mpi_backend = {
    .name = "mpi",
    .init = mpi_init,
    .new_group = mpi_new_group,
    .free_group = mpi_free_group,
    .post = mpi_post,
    .shutdown = em_mpi_thread_stop,
    .abort_job = em_mpi_abort_job,
    .progress = em_mpi_progress,
    .run_direct = em_mpi_run_direct,
    .attach = NULL, /* a CPU backend: init and new_group number the ranks */
    .note_seq = em_mpi_note_seq,
    .report_timeout = em_mpi_report_timeout,
};

/* The layout this plugin was built with, checked by libember before it uses the table. */
static const em_plugin_abi_item abi_items[] = {EM_DIST_PLUGIN_ABI(EM_PLUGIN_ABI_ITEM)};
static const em_dist_plugin plugin = {.abi = EM_PLUGIN_ABI_OF(abi_items), .backend = &mpi_backend};

__attribute__((visibility("default"))) const em_dist_plugin *em_dist_mpi_backend(void) { return &plugin; }
