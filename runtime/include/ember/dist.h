/* ember/dist.h - process groups, collectives and the data-parallel gradient reducer.
 *
 * Process groups (runtime/distributed). One API for collectives over a group of ranks; each
 * group holds one backend per device type, chosen when the world is initialised:
 *   cpu   "mpi"  (runtime/plugins/mpi, its own shared object libember_mpi.so, loaded on
 *                 demand so that processes that never call em_dist_init never load libmpi);
 *                 non-blocking MPI, progressed by the thread that waits for a result or,
 *                 while nobody waits, by a communication thread;
 *         "gloo" (runtime/plugins/gloo, libember_gloo.so, loaded on demand): Gloo's TCP
 *                 transport for torchrun-style starts (the real torchrun, or RANK, WORLD_SIZE,
 *                 MASTER_ADDR, MASTER_PORT by hand), rendezvous in the c10d store below;
 *                 collectives in posting order on a communication thread, each preceded by
 *                 a check that every rank called the same one (a mismatch is an error on
 *                 every rank);
 *         "self" (a world of one process: no launcher, no MPI);
 *   cuda  "nccl" (in the CUDA plugin, runtime/plugins/cuda/nccl_backend.c): collectives on a
 *                 communication stream of the tensor's GPU that first waits for the work
 *                 queued before on the current stream; a group's communicator connects on
 *                 its first CUDA collective (its NCCL id travels over the CPU backend), or
 *                 during init with backend "nccl". One GPU per rank: NCCL refuses two ranks
 *                 of one communicator on the same GPU. A timeout aborts the communicator
 *                 and fails the work (later CUDA collectives on that group fail too);
 *         "self" in a world of one process.
 * Ranks are 0-based everywhere, as every launcher numbers them.
 *
 * Ranks on one host share memory (runtime/distributed/symmetric.c): a plain all_reduce (work ==
 * NULL) of a CPU tensor (any dtype) goes through a scratch buffer every
 * rank maps, each rank combining its slice from all the others', instead of through the
 * backend; EMBER_DIST_SHM=0 turns that off. A call whose shape, dtype or operation differs
 * between ranks is then an error on every rank.
 *
 * Every collective is asynchronous underneath. With work == NULL the call waits for it;
 * otherwise *work receives a handle (wait, test, release). A handle keeps its tensors
 * alive until it completes. Tensors must be contiguous; in-place collectives (all_reduce,
 * broadcast, recv) write into the tensor given. Results are bit-identical on every rank.
 *
 * Timeouts: each collective must complete within the group's timeout (default 600 s,
 * EMBER_DIST_TIMEOUT, or the value given to em_dist_init). NCCL aborts its communicator and
 * fails the work with an error naming the collective, the rank and the seconds (the
 * error ends the script, which ends the job). MPI and Gloo cannot cancel a collective,
 * so a timeout prints which ranks did not take part ("all_reduce #12 on the world group:
 * timed out after 30 s on rank 0 waiting for rank 1 (no answer: dead or stopped)") and
 * aborts the whole job with exit status 124: a dead or stuck rank never hangs the others.
 *
 * Data-parallel reducer (runtime/distributed), the engine under nn.DistributedDataParallel:
 * parameters are grouped into buckets in reverse order (the first bucket up to
 * first_bucket_bytes, then up to bucket_bytes, per dtype); leaf hooks mark parameters
 * ready during backward, and a full bucket starts its allreduce at once, in bucket order
 * on every rank, while backward goes on. Gradients are views into the buckets; the
 * 1/world_size average is applied while each gradient is copied into its bucket, or, for
 * buckets in shared memory (CPU buckets of a floating dtype when every rank is on one host),
 * in the reduction itself: each rank sums its slice of the bucket straight from the other
 * ranks' memory, on the thread running backward. */
#ifndef EMBER_DIST_H
#define EMBER_DIST_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* EM_FFI_BEGIN */
typedef struct em_dist_group em_dist_group;
typedef struct em_dist_work em_dist_work;
typedef struct em_ddp em_ddp;

typedef enum em_dist_redop {
  EM_DIST_SUM = 0,
  EM_DIST_AVG,
  EM_DIST_MAX,
  EM_DIST_MIN,
  EM_DIST_PRODUCT,
  EM_DIST_NUM_REDOPS
} em_dist_redop;

/* What the launcher says about this process, read from Open MPI, PMI, Slurm or torchrun
 * variables (in that order); a process started on its own is rank 0 of 1. launcher is
 * "openmpi", "pmi", "slurm", "torchrun" or "none". Needs no initialisation. */
typedef struct em_dist_env {
  int32_t rank, world_size, local_rank, local_size;
  const char *launcher;
} em_dist_env;
EM_API void em_dist_env_detect(em_dist_env *out);

/* ---- the world ----
 * backend: "auto" (mpi when a launcher started several processes or MPI's variables are
 * set, else self; CUDA tensors through NCCL, attached on a group's first CUDA collective),
 * "mpi" (CPU tensors only), "self" or "nccl" (the CPU backend as for auto, plus NCCL
 * required: an error without the CUDA plugin, NCCL or a GPU; the current device becomes
 * local_rank mod the GPU count and the world's communicator connects during init).
 * timeout_s <= 0: the default. */
EM_API em_status em_dist_init(const char *backend, double timeout_s);
EM_API int em_dist_is_initialized(void);
EM_API const char *em_dist_backend_name(void); /* of the CPU backend; NULL before init */
/* The backend for tensors of a device type (EM_CPU, EM_CUDA): "mpi", "self", "nccl"; NULL
 * before init or when that device has none. */
EM_API const char *em_dist_device_backend_name(int device_type);
EM_API em_status em_dist_finalize(void); /* waits for pending work; also run at exit */
EM_API em_dist_group *em_dist_world(void); /* borrowed; NULL before init */
EM_API int em_dist_local_rank(void);

/* ---- groups ----
 * A subgroup of parent's ranks (listed in the order that numbers them in the new group).
 * Collective over parent: every rank of parent calls it with the same list. Ranks outside
 * the list receive a group whose rank is -1 (collectives on it are errors). */
EM_API em_status em_dist_new_group(em_dist_group **out, em_dist_group *parent, int n, const int *ranks);
EM_API void em_dist_group_retain(em_dist_group *g);
EM_API void em_dist_group_release(em_dist_group *g);
EM_API int em_dist_rank(const em_dist_group *g); /* -1: not a member */
EM_API int em_dist_size(const em_dist_group *g);
EM_API int em_dist_world_rank_of(const em_dist_group *g, int rank);
EM_API double em_dist_timeout(const em_dist_group *g);
EM_API em_status em_dist_set_timeout(em_dist_group *g, double timeout_s);

/* ---- collectives (work may be NULL: wait) ---- */
EM_API em_status em_dist_all_reduce(em_dist_group *g, em_tensor *t, em_dist_redop op, em_dist_work **work);
EM_API em_status em_dist_broadcast(em_dist_group *g, em_tensor *t, int root, em_dist_work **work);
/* out holds size(g) * numel(in) elements of in's dtype, rank 0's block first. */
EM_API em_status em_dist_all_gather(em_dist_group *g, em_tensor *out, const em_tensor *in, em_dist_work **work);
/* in holds size(g) * numel(out) elements; rank r receives the reduction of block r. */
EM_API em_status em_dist_reduce_scatter(em_dist_group *g, em_tensor *out, const em_tensor *in, em_dist_redop op,
                                        em_dist_work **work);
EM_API em_status em_dist_barrier(em_dist_group *g, em_dist_work **work);
/* Tensors only, no Python-style objects. Counts are elements (not bytes), one per group rank.
 * all_to_all: in and out hold size(g) * k elements; block r of in goes to rank r, block r of
 * out comes from rank r. all_to_all_v: in_counts[r] elements of in (in rank order) go to
 * rank r, out_counts[r] elements of out come from rank r; every rank's in_counts[r] must equal
 * rank r's out_counts[this rank] (a mismatch is an error, not a hang, where the backend can
 * tell). Zero counts are allowed. gather: the root's out holds size(g) * numel(in) (rank 0's
 * block first); out is ignored (may be NULL) elsewhere. scatter: the root's in holds
 * size(g) * numel(out); ignored (may be NULL) elsewhere. reduce: in place, the result is
 * defined on the root only (other ranks' t may be overwritten with partial results).
 * all_gather_v: out holds sum(counts) elements, counts[r] of them from rank r; in holds
 * counts[rank]. */
EM_API em_status em_dist_all_to_all(em_dist_group *g, em_tensor *out, const em_tensor *in, em_dist_work **work);
EM_API em_status em_dist_all_to_all_v(em_dist_group *g, em_tensor *out, const int64_t *out_counts, const em_tensor *in,
                                      const int64_t *in_counts, em_dist_work **work);
EM_API em_status em_dist_gather(em_dist_group *g, em_tensor *out, const em_tensor *in, int root, em_dist_work **work);
EM_API em_status em_dist_scatter(em_dist_group *g, em_tensor *out, const em_tensor *in, int root, em_dist_work **work);
EM_API em_status em_dist_reduce(em_dist_group *g, em_tensor *t, em_dist_redop op, int root, em_dist_work **work);
EM_API em_status em_dist_all_gather_v(em_dist_group *g, em_tensor *out, const int64_t *counts, const em_tensor *in,
                                      em_dist_work **work);
/* On CUDA tensors (NCCL) sends and receives match in the order they are posted (tag is not
 * used), and each holds its communication stream until the peer's match runs: post them so
 * that pairs meet (e.g. even ranks send first, odd ranks receive first). */
EM_API em_status em_dist_send(em_dist_group *g, const em_tensor *t, int dst, int tag, em_dist_work **work);
EM_API em_status em_dist_recv(em_dist_group *g, em_tensor *t, int src, int tag, em_dist_work **work);

/* ---- handles ----
 * wait: until done; timeout_s > 0 shortens the deadline (expiry aborts the job, as above).
 * For CUDA tensors "done" means finished on the GPU (the host saw the communication
 * stream's event), so work queued afterwards on any stream reads the result. Tensors stay
 * referenced until then, so their memory is not reused while NCCL still reads or writes it.
 * test: 1 done, 0 pending, -1 failed (em_last_error says why). */
EM_API em_status em_dist_work_wait(em_dist_work *w, double timeout_s);
EM_API int em_dist_work_test(em_dist_work *w);
EM_API void em_dist_work_release(em_dist_work *w);
EM_API const char *em_dist_redop_name(em_dist_redop op);

/* ---- the store: a key-value service for rendezvous (runtime/distributed/store.c) ----
 * Client and server of PyTorch's c10d TCPStore wire protocol: torch.distributed.TCPStore
 * talks to an ember server and an ember client to torch's (torchrun's agent hosts one at
 * MASTER_ADDR:MASTER_PORT). Keys are strings, values bytes; keys carry the leading '/'
 * torch's client adds, so both see the same names.
 * open: is_server hosts a server on port (0: any free port) of every local address, then
 * connects a client to it; otherwise connects to host:port, retrying refused connections
 * until timeout_s (> 0) has passed. timeout_s is also the default for get and wait.
 * get waits for the key (up to the timeout); it copies at most cap bytes into buf and sets
 * *len to the value's full length. wait: every key present (timeout_s <= 0: the store's).
 * check: *ready = 1 when every key is present. add: adds delta to the integer held as
 * decimal text (absent: 0), *value (may be NULL) receives the sum. One request at a time
 * per handle (a mutex): threads that wait in parallel open their own handles (clone). */
typedef struct em_dist_store em_dist_store;
EM_API em_status em_dist_store_open(em_dist_store **out, const char *host, int port, int is_server, double timeout_s);
EM_API em_status em_dist_store_clone(em_dist_store **out, const em_dist_store *s);
EM_API void em_dist_store_close(em_dist_store *s);
EM_API int em_dist_store_port(const em_dist_store *s);
EM_API em_status em_dist_store_set(em_dist_store *s, const char *key, const void *value, size_t len);
EM_API em_status em_dist_store_get(em_dist_store *s, const char *key, void *buf, size_t cap, size_t *len);
EM_API em_status em_dist_store_add(em_dist_store *s, const char *key, int64_t delta, int64_t *value);
EM_API em_status em_dist_store_wait(em_dist_store *s, int n, const char *const *keys, double timeout_s);
EM_API em_status em_dist_store_check(em_dist_store *s, int n, const char *const *keys, int *ready);
EM_API em_status em_dist_store_delete(em_dist_store *s, const char *key, int *deleted);
EM_API em_status em_dist_store_num_keys(em_dist_store *s, int64_t *n);

/* ---- data-parallel reducer ---- */
typedef enum em_ddp_comm_hook { EM_DDP_HOOK_NONE = 0, EM_DDP_HOOK_FP16, EM_DDP_HOOK_BF16 } em_ddp_comm_hook;

typedef struct em_ddp_options {
  int64_t bucket_bytes; /* cap of every bucket after the first */
  int64_t first_bucket_bytes; /* cap of the first bucket (PyTorch: 1 MiB) */
  int32_t find_unused_parameters;
  int32_t gradient_as_bucket_view;
  int32_t comm_hook; /* em_ddp_comm_hook */
  int32_t rebuild_buckets; /* once, after the first synchronised iteration */
  int32_t shared_memory; /* CPU float buckets of ranks on one host live in memory
                                  * every rank maps, and are reduced in place (no MPI copies;
                                  * EMBER_DIST_SHM=0 turns it off) */
} em_ddp_options;

/* Checks that every rank holds the same parameters (count, names, shapes, dtypes) and the
 * same options (an error naming the first mismatch, on every rank), broadcasts rank 0's
 * parameters and buffers, builds the buckets and installs the leaf hooks. names may be
 * NULL (parameters are then called by position). */
EM_API em_status em_ddp_new(em_ddp **out, em_dist_group *g, int n_params, em_tensor *const *params,
                            const char *const *names, int n_buffers, em_tensor *const *buffers,
                            const em_ddp_options *opts);
EM_API void em_ddp_release(em_ddp *d);

/* Before a forward pass: raises the error left by the previous iteration (unused
 * parameters, ...), rebuilds the buckets once, and inside join runs the round that tells
 * ranks which have run out of data what to shadow. sync: this iteration's backward
 * reduces (0 inside no_sync). n_buffers/buffers: broadcast from the authoritative rank
 * (rank 0, or inside join the lowest rank still training); n_buffers = 0: none. */
EM_API em_status em_ddp_pre_forward(em_ddp *d, int sync, int joining, int n_buffers, em_tensor *const *buffers);
/* After the forward pass, when the coming backward must reduce: arms the hooks. With
 * find_unused_parameters, walks the graph from the outputs and marks the parameters
 * it does not reach as ready. */
EM_API em_status em_ddp_pre_backward(em_ddp *d, int n_outputs, em_tensor *const *outputs);
/* Waits for this iteration's reduction if the hooks did not finish it (e.g. unused
 * parameters without find_unused_parameters: then an error names them). */
EM_API em_status em_ddp_finish(em_ddp *d);
/* join: one shadow round on a rank that has run out of data. *others_active receives 1
 * while some rank still trains (this rank then took part in its iteration's collectives
 * with zero gradients), 0 once every rank has joined; then rank `authoritative`'s
 * parameters and buffers are broadcast so all ranks end equal. */
EM_API em_status em_ddp_join_round(em_ddp *d, int n_buffers, em_tensor *const *buffers, int *others_active);

/* Introspection: counts, bucket layout and timings for tests and benchmarks.
 * stats: [0] synchronised iterations, [1] seconds of communication (bucket launch to
 * completion, overlapping intervals merged), [2] seconds backward waited for it
 * (exposed), [3] buckets launched, [4] bytes reduced, [5] rebuilt (0/1), [6] buckets in
 * shared memory now. */
EM_API int em_ddp_num_buckets(const em_ddp *d);
EM_API int em_ddp_bucket_params(const em_ddp *d, int bucket, int *indices, int cap);
EM_API void em_ddp_stats(const em_ddp *d, double *stats, int n);
EM_API void em_ddp_reset_stats(em_ddp *d);
/* Why some bucket is not in shared memory ("shared_memory = false", "rank 1 runs on
 * another host", ...), or "" when all are. */
EM_API const char *em_ddp_shared_memory_note(const em_ddp *d);
/* EM_FFI_END */

#ifdef __cplusplus
}
#endif
#endif
