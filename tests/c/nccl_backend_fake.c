/* nccl_backend_fake.c - the NCCL backend (runtime/plugins/cuda/nccl_backend.c) on the CPU:
 * compiled into this test together with fake CUDA-runtime, NCCL and device-layer
 * functions, so that its bookkeeping runs without a GPU: connecting a group (the id over
 * the CPU backend, a non-blocking init polled until ready or timed out), completion of
 * works by the poller thread when their events complete, dtype and reduction mapping,
 * record_stream, a timeout that aborts the communicator and fails the work with a clear
 * message, asynchronous NCCL errors, broken groups, a second GPU refused. The GPU itself
 * (kernels, streams, real NCCL) is tested by tests/distributed/nccl_*.lua where GPUs exist.
 *
 * Registered by tests/extra.cmake as c/test_nccl_backend (not by the tests/c/test_*.c glob,
 * since it needs the CUDA and NCCL headers). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "test_util.h"
#include <nccl.h>
#include "cuda/cuda_plugin.h"
#include "plugins/cuda/gpu_runtime.h"
#include "distributed/dist_impl.h"
#include "tensor/tensor_impl.h"

/* ---------------------------------------------------------------- the fake GPU */

static struct {
  atomic_int gpu_done; /* every recorded event has completed */
  atomic_int init_rounds; /* init stays in progress for this many polls; -1 forever */
  atomic_int async_error; /* what ncclCommGetAsyncError reports once connected */
  atomic_int aborts, inits, ids, records, events_live, calls;
  atomic_int last_kind, last_dt, last_op, last_peer;
  atomic_llong last_count;
} F;

enum { K_ALLREDUCE = 1, K_BCAST, K_ALLGATHER, K_REDSCATTER, K_SEND, K_RECV, K_REDUCE };
static atomic_int group_depth, groups_ended, sends, recvs; /* ncclGroupStart/End, p2p calls */
static atomic_llong sent, received; /* elements */

cudaError_t cudaEventQuery(cudaEvent_t e) {
  (void)e;
  return atomic_load(&F.gpu_done) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
  (void)flags;
  *e = (cudaEvent_t)malloc(8);
  atomic_fetch_add(&F.events_live, 1);
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  free(e);
  atomic_fetch_sub(&F.events_live, 1);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return (void)e, (void)s, cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t e) { return (void)e, cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int f) {
  return (void)s, (void)e, (void)f, cudaSuccess;
}
cudaError_t cudaGetDevice(int *d) { return *d = 0, cudaSuccess; }
cudaError_t cudaMalloc(void **p, size_t n) { return *p = malloc(n), cudaSuccess; }
cudaError_t cudaFree(void *p) { return free(p), cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char *cudaGetErrorName(cudaError_t e) { return e == cudaSuccess ? "cudaSuccess" : "cudaErrorFake"; }
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "a fake error"; }

static struct em_cuda_stream fake_stream = {.handle = (cudaStream_t)0x5, .device = 0, .priority = -1};
em_status em_gpu_enter(const char *op, int device, cudaStream_t *stream) {
  if (device != 0) return em_set_error(EM_ERR_DEVICE, "%s: no cuda:%d here", op, device);
  *stream = (cudaStream_t)0x1;
  return EM_OK;
}
em_status em_gpu_stream_new(em_cuda_stream **out, int device, int priority) {
  (void)device, (void)priority;
  *out = &fake_stream;
  return EM_OK;
}
void em_gpu_stream_free(em_cuda_stream *s) { (void)s; }
em_status em_gpu_record_stream(void *ptr, int device, em_cuda_stream *s) {
  (void)ptr, (void)device;
  assert_ptr_equal(s, &fake_stream);
  atomic_fetch_add(&F.records, 1);
  return EM_OK;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  memset(id, 0x5a, sizeof *id);
  atomic_fetch_add(&F.ids, 1);
  return ncclSuccess;
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int n, ncclUniqueId id, int rank, ncclConfig_t *config) {
  assert_int_equal(config->blocking, 0); /* non-blocking, so that connecting can time out */
  assert_int_equal((unsigned char)id.internal[7], 0x5a); /* rank 0's id came through */
  assert_true(rank >= 0 && rank < n);
  *comm = (ncclComm_t)malloc(8);
  atomic_fetch_add(&F.inits, 1);
  return atomic_load(&F.init_rounds) ? ncclInProgress : ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *state) {
  (void)comm;
  int r = atomic_load(&F.init_rounds);
  if (r < 0) return *state = ncclInProgress, ncclSuccess;
  if (r > 0) {
    atomic_fetch_sub(&F.init_rounds, 1);
    return *state = ncclInProgress, ncclSuccess;
  }
  *state = (ncclResult_t)atomic_load(&F.async_error);
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  free(comm);
  atomic_fetch_add(&F.aborts, 1);
  atomic_store(&F.gpu_done, 1); /* an abort ends the communicator's kernels */
  return ncclSuccess;
}
const char *ncclGetErrorString(ncclResult_t r) { return r == ncclRemoteError ? "remote process exited" : "other"; }
const char *ncclGetLastError(ncclComm_t comm) { return (void)comm, "fake detail"; }

static ncclResult_t note(int kind, size_t count, ncclDataType_t dt, int op, int peer) {
  atomic_store(&F.last_kind, kind);
  atomic_store(&F.last_count, (long long)count);
  atomic_store(&F.last_dt, dt);
  atomic_store(&F.last_op, op);
  atomic_store(&F.last_peer, peer);
  atomic_fetch_add(&F.calls, 1);
  return ncclSuccess;
}
ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t st) {
  (void)s, (void)r, (void)c;
  assert_ptr_equal(st, fake_stream.handle); /* on the communication stream */
  return note(K_ALLREDUCE, n, dt, op, -1);
}
ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t dt, int root, ncclComm_t c,
                           cudaStream_t st) {
  (void)s, (void)r, (void)c, (void)st;
  return note(K_BCAST, n, dt, -1, root);
}
ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t dt, ncclComm_t c, cudaStream_t st) {
  (void)s, (void)r, (void)c, (void)st;
  return note(K_ALLGATHER, n, dt, -1, -1);
}
ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t st) {
  (void)s, (void)r, (void)c, (void)st;
  return note(K_REDSCATTER, n, dt, op, -1);
}
ncclResult_t ncclSend(const void *s, size_t n, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st) {
  (void)s, (void)c, (void)st;
  atomic_fetch_add(&sends, 1);
  atomic_fetch_add(&sent, (long long)n);
  return note(K_SEND, n, dt, -1, peer);
}
ncclResult_t ncclRecv(void *r, size_t n, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st) {
  (void)r, (void)c, (void)st;
  atomic_fetch_add(&recvs, 1);
  atomic_fetch_add(&received, (long long)n);
  return note(K_RECV, n, dt, -1, peer);
}
ncclResult_t ncclReduce(const void *s, void *r, size_t n, ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t c,
                        cudaStream_t st) {
  (void)s, (void)r, (void)c, (void)st;
  return note(K_REDUCE, n, dt, op, root);
}
ncclResult_t ncclGroupStart(void) {
  atomic_fetch_add(&group_depth, 1);
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd(void) {
  assert_true(atomic_fetch_sub(&group_depth, 1) > 0);
  atomic_fetch_add(&groups_ended, 1);
  return ncclSuccess;
}

/* ---------------------------------------------------------------- helpers */

static const em_dist_backend *be;
static int64_t next_seq;

static em_tensor *vec(int64_t n, em_dtype dtype) {
  em_tensor *t = NULL;
  assert_int_equal(em_zeros(&t, 1, &n, dtype, (em_device){EM_CPU, 0}), EM_OK); /* stands in for cuda:0 */
  return t;
}

/* A work as runtime/distributed/work.c makes it (two references: ours and the backend's). */
static em_dist_work *work(em_dist_group *g, em_dist_opkind kind, em_tensor *in, em_tensor *out, em_dist_redop op,
                          double timeout) {
  em_dist_work *w = calloc(1, sizeof *w);
  atomic_init(&w->refcount, 2);
  atomic_init(&w->state, EM_WORK_PENDING);
  w->kind = kind, w->redop = op, w->in = in, w->out = out, w->group = g;
  w->peer = kind == EM_DIST_OP_SEND || kind == EM_DIST_OP_RECV ? 0 : -1;
  em_tensor_retain(in);
  if (out != in) em_tensor_retain(out);
  em_dist_group_retain(g);
  w->seq = ++next_seq;
  w->posted_at = em_clock_monotonic();
  atomic_store(&w->deadline, w->posted_at + timeout);
  return w;
}

/* Posts; on a refused post returns its status with *out NULL (the work is freed). */
static em_status post(void *impl, em_dist_work *w, em_dist_work **out) {
  em_status st = be->post(impl, w);
  if (st) {
    atomic_store(&w->refcount, 1);
    em_dist_work_release(w);
    *out = NULL;
    return st;
  }
  *out = w;
  return EM_OK;
}

static void nap_ms(int ms) {
  struct timespec ts = {0, ms * 1000000L};
  nanosleep(&ts, NULL);
}

/* A fresh group with the NCCL state attached (each test breaks or connects its own). */
static em_dist_group *new_group(void **impl) {
  em_dist_group *g = NULL;
  int zero = 0;
  assert_int_equal(em_dist_new_group(&g, NULL, 1, &zero), EM_OK);
  assert_int_equal(be->attach(g, impl), EM_OK);
  return g;
}

static void reset_fakes(void) {
  atomic_store(&F.gpu_done, 0);
  atomic_store(&F.init_rounds, 0);
  atomic_store(&F.async_error, ncclSuccess);
}

static int setup(void **state) {
  (void)state;
  be = em_gpu_nccl_backend();
  if (!be || strcmp(be->name, "nccl") || !be->attach || !be->post || !be->progress) return -1;
  return em_dist_init("self", 60) == EM_OK ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  be->shutdown(0);
  em_dist_finalize();
  return 0;
}

/* ---------------------------------------------------------------- tests */

static void test_connect_and_complete(void **state) {
  (void)state;
  reset_fakes();
  atomic_store(&F.init_rounds, 3); /* init polled a few times before it is ready */
  void *impl;
  em_dist_group *g = new_group(&impl);
  em_tensor *t = vec(8, EM_FLOAT32);
  int ids = atomic_load(&F.ids), inits = atomic_load(&F.inits), records = atomic_load(&F.records);
  em_dist_work *w;
  assert_int_equal(post(impl, work(g, EM_DIST_OP_ALL_REDUCE, t, t, EM_DIST_SUM, 30), &w), EM_OK);
  assert_int_equal(atomic_load(&F.ids), ids + 1); /* rank 0 made the id */
  assert_int_equal(atomic_load(&F.inits), inits + 1);
  assert_int_equal(atomic_load(&F.init_rounds), 0); /* polled until ready */
  assert_int_equal(atomic_load(&F.last_kind), K_ALLREDUCE);
  assert_int_equal(atomic_load(&F.last_count), 8);
  assert_int_equal(atomic_load(&F.last_dt), ncclFloat32);
  assert_int_equal(atomic_load(&F.last_op), ncclSum);
  assert_int_equal(atomic_load(&F.records), records + 1); /* in == out: one record_stream */
  nap_ms(20);
  assert_int_equal(em_dist_work_test(w), 0); /* the GPU has not finished */
  atomic_store(&F.gpu_done, 1);
  for (int i = 0; i < 2000 && em_dist_work_test(w) == 0; i++) nap_ms(1);
  assert_int_equal(em_dist_work_test(w), 1); /* the poller thread saw the event */
  assert_int_equal(em_dist_work_wait(w, 0), EM_OK);
  em_dist_work_release(w);

  /* a second collective reuses the communicator (and a pooled event) */
  atomic_store(&F.gpu_done, 0);
  assert_int_equal(post(impl, work(g, EM_DIST_OP_ALL_REDUCE, t, t, EM_DIST_MAX, 30), &w), EM_OK);
  assert_int_equal(atomic_load(&F.inits), inits + 1);
  atomic_store(&F.gpu_done, 1);
  assert_int_equal(em_dist_work_wait(w, 0), EM_OK);
  em_dist_work_release(w);
  be->free_group(impl);
  em_dist_group_release(g);
  em_tensor_release(t);
}

static void test_mapping(void **state) {
  (void)state;
  reset_fakes();
  atomic_store(&F.gpu_done, 1);
  void *impl;
  em_dist_group *g = new_group(&impl);
  em_tensor *b = vec(3, EM_BOOL), *h = vec(6, EM_BFLOAT16), *d = vec(4, EM_FLOAT64), *i = vec(5, EM_INT64);
  em_tensor *small = vec(2, EM_FLOAT64);
  struct {
    em_dist_opkind kind;
    em_tensor *in, *out;
    em_dist_redop op;
    int want_kind, want_dt, want_op;
    long long want_count;
  } cases[] = {
      {EM_DIST_OP_ALL_REDUCE, b, b, EM_DIST_SUM, K_ALLREDUCE, ncclUint8, ncclMax, 3}, /* or */
      {EM_DIST_OP_ALL_REDUCE, b, b, EM_DIST_PRODUCT, K_ALLREDUCE, ncclUint8, ncclMin, 3}, /* and */
      {EM_DIST_OP_ALL_REDUCE, h, h, EM_DIST_AVG, K_ALLREDUCE, ncclBfloat16, ncclAvg, 6},
      {EM_DIST_OP_ALL_REDUCE, i, i, EM_DIST_PRODUCT, K_ALLREDUCE, ncclInt64, ncclProd, 5},
      {EM_DIST_OP_ALL_REDUCE, d, d, EM_DIST_MIN, K_ALLREDUCE, ncclFloat64, ncclMin, 4},
      {EM_DIST_OP_BROADCAST, d, d, EM_DIST_SUM, K_BCAST, ncclFloat64, -1, 4},
      {EM_DIST_OP_ALL_GATHER, small, d, EM_DIST_SUM, K_ALLGATHER, ncclFloat64, -1, 2}, /* count per rank */
      {EM_DIST_OP_REDUCE_SCATTER, d, small, EM_DIST_AVG, K_REDSCATTER, ncclFloat64, ncclAvg, 2},
      {EM_DIST_OP_SEND, i, i, EM_DIST_SUM, K_SEND, ncclInt64, -1, 5},
      {EM_DIST_OP_RECV, i, i, EM_DIST_SUM, K_RECV, ncclInt64, -1, 5},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    em_dist_work *w;
    assert_int_equal(post(impl, work(g, cases[k].kind, cases[k].in, cases[k].out, cases[k].op, 30), &w), EM_OK);
    assert_int_equal(atomic_load(&F.last_kind), cases[k].want_kind);
    assert_int_equal(atomic_load(&F.last_dt), cases[k].want_dt);
    if (cases[k].want_op >= 0) assert_int_equal(atomic_load(&F.last_op), cases[k].want_op);
    assert_int_equal(atomic_load(&F.last_count), cases[k].want_count);
    assert_int_equal(em_dist_work_wait(w, 0), EM_OK);
    em_dist_work_release(w);
  }
  /* nothing to move: done at once, NCCL not called */
  em_tensor *none = vec(0, EM_FLOAT32);
  int calls = atomic_load(&F.calls);
  em_dist_work *w;
  atomic_store(&F.gpu_done, 0);
  assert_int_equal(post(impl, work(g, EM_DIST_OP_ALL_REDUCE, none, none, EM_DIST_SUM, 30), &w), EM_OK);
  assert_int_equal(em_dist_work_test(w), 1);
  assert_int_equal(atomic_load(&F.calls), calls);
  em_dist_work_release(w);
  /* a tensor on another GPU than the group's communicator */
  d->storage->device.index = 1;
  assert_int_equal(post(impl, work(g, EM_DIST_OP_ALL_REDUCE, d, d, EM_DIST_SUM, 30), &w), EM_ERR_DEVICE);
  assert_non_null(strstr(em_last_error(), "is on cuda:0, this tensor is on cuda:1"));
  d->storage->device.index = 0;
  be->free_group(impl);
  em_dist_group_release(g);
  em_tensor_release(b), em_tensor_release(h), em_tensor_release(d), em_tensor_release(i);
  em_tensor_release(small), em_tensor_release(none);
}

/* The newer kinds in a world of one: ncclReduce, and send/recv pairs in one NCCL group
 * (zero counts left out); all_to_all_v and all_gather_v check their counts first through
 * the CPU backend ('self' here), and a mismatch is refused before NCCL sees anything. */
static void test_newer_kinds(void **state) {
  (void)state;
  reset_fakes();
  atomic_store(&F.gpu_done, 1);
  void *impl;
  em_dist_group *g = new_group(&impl);
  em_tensor *a = vec(6, EM_FLOAT32), *b = vec(6, EM_FLOAT32), *none = vec(0, EM_FLOAT32), *c = vec(6, EM_FLOAT32);
  em_dist_work *w;
  assert_int_equal(post(impl, work(g, EM_DIST_OP_REDUCE, a, a, EM_DIST_AVG, 30), &w), EM_OK);
  assert_int_equal(atomic_load(&F.last_kind), K_REDUCE);
  assert_int_equal(atomic_load(&F.last_op), ncclAvg);
  assert_int_equal(atomic_load(&F.last_count), 6);
  assert_int_equal(em_dist_work_wait(w, 0), EM_OK);
  em_dist_work_release(w);
  em_dist_opkind kinds[] = {EM_DIST_OP_ALL_TO_ALL, EM_DIST_OP_GATHER, EM_DIST_OP_SCATTER};
  for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
    int ended = atomic_load(&groups_ended), ns = atomic_load(&sends), nr = atomic_load(&recvs);
    em_dist_work *x = work(g, kinds[k], a, b, EM_DIST_SUM, 30);
    x->peer = 0; /* the root of gather and scatter */
    assert_int_equal(post(impl, x, &w), EM_OK);
    assert_int_equal(atomic_load(&groups_ended), ended + 1);
    assert_int_equal(atomic_load(&sends), ns + 1); /* to itself */
    assert_int_equal(atomic_load(&recvs), nr + 1);
    assert_int_equal(atomic_load(&F.last_count), 6);
    assert_int_equal(atomic_load(&group_depth), 0);
    assert_int_equal(em_dist_work_wait(w, 0), EM_OK);
    em_dist_work_release(w);
  }
  /* all_to_all_v: 6 elements to itself; then counts that disagree */
  long long s0 = atomic_load(&sent), r0 = atomic_load(&received);
  em_dist_work *x = work(g, EM_DIST_OP_ALL_TO_ALL_V, a, b, EM_DIST_SUM, 30);
  x->in_counts = malloc(sizeof(int64_t)), x->out_counts = malloc(sizeof(int64_t));
  x->in_counts[0] = x->out_counts[0] = 6;
  assert_int_equal(post(impl, x, &w), EM_OK);
  assert_int_equal(atomic_load(&sent), s0 + 6);
  assert_int_equal(atomic_load(&received), r0 + 6);
  assert_int_equal(em_dist_work_wait(w, 0), EM_OK);
  em_dist_work_release(w);
  int calls = atomic_load(&F.calls);
  x = work(g, EM_DIST_OP_ALL_TO_ALL_V, a, none, EM_DIST_SUM, 30);
  x->in_counts = malloc(sizeof(int64_t)), x->out_counts = malloc(sizeof(int64_t));
  x->in_counts[0] = 6, x->out_counts[0] = 0;
  assert_int_equal(post(impl, x, &w), EM_ERR_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "rank 0 sends 6 elements to rank 0, which expects 0"));
  assert_int_equal(atomic_load(&F.calls), calls); /* NCCL never saw it */
  /* all_gather_v with this rank sending nothing: nothing moves, done at once */
  x = work(g, EM_DIST_OP_ALL_GATHER_V, none, none, EM_DIST_SUM, 30);
  x->out_counts = calloc(1, sizeof(int64_t));
  assert_int_equal(post(impl, x, &w), EM_OK);
  assert_int_equal(em_dist_work_test(w), 1);
  assert_int_equal(atomic_load(&F.calls), calls);
  em_dist_work_release(w);
  be->free_group(impl);
  em_dist_group_release(g);
  em_tensor_release(a), em_tensor_release(b), em_tensor_release(none), em_tensor_release(c);
}

static void test_timeout_aborts(void **state) {
  (void)state;
  reset_fakes();
  void *impl;
  em_dist_group *g = new_group(&impl);
  em_tensor *t = vec(1000, EM_FLOAT32);
  int aborts = atomic_load(&F.aborts);
  double t0 = em_clock_monotonic();
  em_dist_work *w, *later;
  /* the GPU never finishes: a peer that never came */
  assert_int_equal(post(impl, work(g, EM_DIST_OP_ALL_REDUCE, t, t, EM_DIST_SUM, 0.3), &w), EM_OK);
  assert_int_equal(post(impl, work(g, EM_DIST_OP_BROADCAST, t, t, EM_DIST_SUM, 30), &later), EM_OK);
  assert_int_equal(em_dist_work_wait(w, 0), EM_ERR_RUNTIME);
  const char *msg = em_last_error();
  assert_non_null(strstr(msg, "all_reduce #"));
  assert_non_null(strstr(msg, "(3.9 KB of float32) did not finish within"));
  assert_non_null(strstr(msg, " s on rank 0 (cuda:0)"));
  assert_non_null(strstr(msg, "the NCCL communicator of group"));
  assert_non_null(strstr(msg, "was aborted"));
  assert_null(strstr(strstr(msg, "all_reduce #") + 1, "all_reduce #")); /* named once */
  assert_true(em_clock_monotonic() - t0 < 5);
  assert_int_equal(atomic_load(&F.aborts), aborts + 1);
  /* work queued behind it is cancelled, naming the culprit */
  assert_int_equal(em_dist_work_wait(later, 0), EM_ERR_RUNTIME);
  assert_non_null(strstr(em_last_error(), "broadcast #"));
  assert_non_null(strstr(em_last_error(), "cancelled: all_reduce #"));
  em_dist_work_release(w);
  em_dist_work_release(later);
  /* the group stays broken: refused at once, with the reason */
  assert_int_equal(post(impl, work(g, EM_DIST_OP_ALL_REDUCE, t, t, EM_DIST_SUM, 30), &w), EM_ERR_RUNTIME);
  assert_non_null(strstr(em_last_error(), "did not finish within"));
  be->free_group(impl);
  em_dist_group_release(g);
  em_tensor_release(t);
}

static void test_async_error(void **state) {
  (void)state;
  reset_fakes();
  void *impl;
  em_dist_group *g = new_group(&impl);
  em_tensor *t = vec(4, EM_FLOAT32);
  em_dist_work *w;
  atomic_store(&F.gpu_done, 1);
  assert_int_equal(post(impl, work(g, EM_DIST_OP_ALL_REDUCE, t, t, EM_DIST_SUM, 30), &w), EM_OK);
  assert_int_equal(em_dist_work_wait(w, 0), EM_OK);
  em_dist_work_release(w);
  atomic_store(&F.gpu_done, 0);
  assert_int_equal(post(impl, work(g, EM_DIST_OP_ALL_REDUCE, t, t, EM_DIST_SUM, 30), &w), EM_OK);
  atomic_store(&F.async_error, ncclRemoteError); /* a peer went away */
  assert_int_equal(em_dist_work_wait(w, 0), EM_ERR_RUNTIME);
  assert_non_null(strstr(em_last_error(), "all_reduce #"));
  assert_non_null(strstr(em_last_error(), "NCCL error 'remote process exited' (fake detail) on rank 0 (cuda:0)"));
  assert_non_null(strstr(em_last_error(), "was aborted"));
  em_dist_work_release(w);
  be->free_group(impl);
  em_dist_group_release(g);
  em_tensor_release(t);
}

static void test_connect_timeout(void **state) {
  (void)state;
  reset_fakes();
  atomic_store(&F.init_rounds, -1); /* never connects: a rank did not make this collective */
  void *impl;
  em_dist_group *g = new_group(&impl);
  em_tensor *t = vec(4, EM_FLOAT32);
  em_dist_work *w;
  int aborts = atomic_load(&F.aborts);
  assert_int_equal(post(impl, work(g, EM_DIST_OP_ALL_REDUCE, t, t, EM_DIST_SUM, 0.2), &w), EM_ERR_RUNTIME);
  assert_non_null(strstr(em_last_error(), "creating the NCCL communicator of group"));
  assert_non_null(strstr(em_last_error(), "not connected after"));
  assert_int_equal(atomic_load(&F.aborts), aborts + 1); /* the half-made communicator */
  atomic_store(&F.init_rounds, 0);
  assert_int_equal(post(impl, work(g, EM_DIST_OP_ALL_REDUCE, t, t, EM_DIST_SUM, 30), &w), EM_ERR_RUNTIME);
  assert_non_null(strstr(em_last_error(), "its NCCL communicator could not be created"));
  be->free_group(impl);
  em_dist_group_release(g);
  em_tensor_release(t);
}

/* every event made (completion events, pooled ones, each group's ready event) was freed
 * with its group */
static void test_no_leaked_events(void **state) {
  (void)state;
  assert_int_equal(atomic_load(&F.events_live), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_connect_and_complete), cmocka_unit_test(test_mapping), cmocka_unit_test(test_newer_kinds),
      cmocka_unit_test(test_timeout_aborts),       cmocka_unit_test(test_async_error),
      cmocka_unit_test(test_connect_timeout),      cmocka_unit_test(test_no_leaked_events),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
