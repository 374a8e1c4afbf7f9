/* dist_impl.h - process groups and work handles, shared by the generic layer
 * (the files of runtime/distributed), the backends (self here, MPI in runtime/plugins/mpi as a plugin, NCCL
 * in the CUDA plugin, runtime/plugins/cuda/nccl_backend.c) and the data-parallel reducer (runtime/distributed).
 *
 * The generic layer checks arguments, numbers collectives and makes handles; a backend
 * only moves data. Each group holds one backend per device type (the table below): a
 * collective picks the entry of its tensor's device, so NCCL slots in for CUDA tensors
 * without touching any caller. */
#ifndef EMBER_DIST_IMPL_H
#define EMBER_DIST_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include "core/plugin_abi.h"
#include "ember/dist.h"

/* Raised whenever an entry of em_dist_backend, its contract or a struct below changes:
 * plugins built against another version are refused when they load (EM_DIST_ABI). */
#define EM_DIST_BACKEND_API_VERSION 3

#define EM_DIST_EXIT_TIMEOUT 124 /* exit status of a job aborted by a timeout */
#define EM_DIST_MSG 768

typedef enum em_dist_opkind {
  EM_DIST_OP_ALL_REDUCE = 0,
  EM_DIST_OP_BROADCAST,
  EM_DIST_OP_ALL_GATHER,
  EM_DIST_OP_REDUCE_SCATTER,
  EM_DIST_OP_BARRIER,
  EM_DIST_OP_SEND,
  EM_DIST_OP_RECV,
  EM_DIST_OP_ALL_TO_ALL, /* in, out: size * k elements; block r of in goes to rank r */
  EM_DIST_OP_ALL_TO_ALL_V, /* in_counts[r] elements of in go to rank r, out_counts[r] come from it */
  EM_DIST_OP_GATHER, /* peer = root; out (root only, else NULL): size * numel(in) */
  EM_DIST_OP_SCATTER, /* peer = root; in (root only, else NULL): size * numel(out) */
  EM_DIST_OP_REDUCE, /* peer = root; in == out, the result is defined on the root only */
  EM_DIST_OP_ALL_GATHER_V, /* out_counts[r] elements from rank r; in holds out_counts[rank] */
  EM_DIST_NUM_OPS
} em_dist_opkind;

typedef enum em_dist_state { EM_WORK_PENDING = 0, EM_WORK_DONE, EM_WORK_FAILED } em_dist_state;

/* One collective or point-to-point operation in flight. */
struct em_dist_work {
  atomic_int refcount;
  atomic_int state; /* em_dist_state */
  em_dist_opkind kind;
  em_dist_redop redop;
  int peer; /* root (broadcast), dst (send), src (recv): group ranks */
  int tag;
  em_tensor *in, *out; /* retained until completion; in == out for in-place ops; NULL where
                        * a rooted collective has no buffer on this rank */
  /* all_to_all_v, all_gather_v: elements per group rank (size(group) entries each), owned
   * by the work and freed with it; NULL for the other kinds. in_counts is NULL for
   * all_gather_v (this rank sends out_counts[rank] elements). */
  int64_t *in_counts, *out_counts;
  em_dist_group *group; /* retained */
  int64_t seq; /* collectives: 1, 2, ... per group on this rank; p2p: 0 */
  double posted_at; /* em_clock_monotonic() */
  _Atomic double deadline; /* posted_at + timeout; em_dist_work_wait may shorten it */
  double started_at; /* when the backend began moving data (after earlier work) */
  double finished_at;
  int on_stack; /* a direct call's work on the caller's stack: nobody else waits */
  int blocking; /* the caller waits at once: no need to wake a thread */
  int direct; /* a plain blocking call (no handle): the backend may run it as
                              * its own blocking collective. Decided by the call alone, so the
                              * same on every rank (MPI matches blocking and non-blocking
                              * collectives only with their own kind) */
  em_status status;
  char message[EM_DIST_MSG];
  struct em_dist_work *next; /* backend queue link */
  void *backend_data;
};

/* A backend: one per process-group kind and device type. Functions run on the calling
 * thread except that completions may arrive from a backend thread (emp_dist_work_done).
 * Every table is static and names every entry (NULL where an optional one is left out),
 * so that what each backend lacks is visible where it is defined. Entries marked optional
 * say what NULL means; the others are required of a CPU backend (the one that numbers the
 * ranks). A device backend (NCCL) has attach instead of init and new_group. */
typedef struct em_dist_backend {
  const char *name;
  /* The world: fills rank/size/local_rank and the world group's private state. NULL in a
   * device backend. */
  em_status (*init)(double timeout_s, int *rank, int *size, int *local_rank, void **world_impl);
  /* Collective over parent: members get their rank in the new group, others -1. NULL in a
   * device backend (it attaches to each group on first use). */
  em_status (*new_group)(void *parent_impl, int group_id, int n, const int *ranks, void **impl, int *rank);
  void (*free_group)(void *impl);
  /* Starts w (already checked and numbered). Completion: emp_dist_work_done, on any thread. */
  em_status (*post)(void *group_impl, em_dist_work *w);
  /* exit_status 0: finish pending work and shut down cleanly; else end the job now with
   * that status (the other ranks may be blocked in a collective with this one). */
  void (*shutdown)(int exit_status);
  /* Ends every process of the job after printing message (this process's view of why). */
  void (*abort_job)(const char *message, int exit_status);
  /* Optional (NULL: waiters sleep until the backend's own thread completes the work): one
   * round of progress on the calling thread (a thread waiting for a work drives the
   * backend itself instead of sleeping until another thread wakes it). Returns 1 if
   * anything completed or started, 0 if not, -1 if the backend cannot. */
  int (*progress)(void);
  /* Optional (NULL: every work is posted): runs w, a plain blocking call (w->direct) on the
   * caller's stack, to completion on the calling thread and returns 1; or returns 0 (then
   * w is posted as usual). */
  int (*run_direct)(void *group_impl, em_dist_work *w);
  /* Device backends only (NULL in a CPU backend): the world's CPU backend numbers the
   * ranks; attach makes g's state on first use, without talking to other ranks (the first
   * collective on g connects it, through g's CPU backend). */
  em_status (*attach)(em_dist_group *g, void **impl);
  /* Optional (NULL: the backend keeps no per-rank progress to answer timeout queries
   * with), for collectives on g that ran outside the backend (symmetric.c): seq was posted
   * (completed 0) or completed (1), so that the backend's answers to other ranks' timeout
   * queries about this rank's progress stay true. */
  void (*note_seq)(void *group_impl, int64_t seq, int completed);
  /* Optional (NULL: w fails with a timeout error naming the rank it waited for, and the
   * job goes on): w, run outside the backend, passed its deadline: explain who is missing
   * as for the backend's own collectives, and end the job. Does not return. */
  void (*report_timeout)(void *group_impl, em_dist_work *w);
} em_dist_backend;

struct em_dist_group {
  atomic_int refcount;
  int id; /* creation number, equal on every rank */
  int rank, size; /* rank -1: this process is not a member */
  int *world_ranks; /* world rank of each member */
  double timeout;
  atomic_llong seq; /* collectives posted */
  atomic_llong completed; /* collectives completed */
  const em_dist_backend *backend[EM_NUM_DEVICE_TYPES];
  void *impl[EM_NUM_DEVICE_TYPES];
  struct em_dist_symm *symm; /* scratch in symmetric memory for plain CPU all_reduce */
  int symm_state; /* 0 not tried, 1 symm ready, -1 the ranks cannot share memory */
  struct dist_hier *hier; /* the host layout for hierarchical reduction (hier.c) */
  int hier_state; /* 0 not tried, 1 hier set, -1 flat (one host, or one rank per host) */
  char name[48];
};

/* ---- for backends ----
 * emp_dist_work_done, emp_dist_num_waiters, emp_dist_world_group, emp_dist_op_name,
 * emp_dist_describe, emp_dist_post and emp_dist_scale: in plugins/plugin_api.h (the MPI and
 * NCCL backends are plugins). */

/* The backend of g for tensors on dev, attaching a device backend (NCCL) to g on first
 * use; NULL with the error set (op named) when g has none. *impl receives g's state. */
const em_dist_backend *dist_group_backend(em_dist_group *g, em_device_type dev, void **impl, const char *op);

/* The built-in backend for a world of one process (any device: its copies dispatch). */
const em_dist_backend *dist_self_backend(void);

/* What a collective plugin's entry point (em_dist_mpi_backend in libember_mpi.so,
 * em_dist_gloo_backend in libember_gloo.so) returns: the
 * layout handshake (core/plugin_abi.h: EM_DIST_PLUGIN_ABI as the plugin was built),
 * checked before the backend is used. */
typedef struct em_dist_plugin {
  em_plugin_abi abi;
  const em_dist_backend *backend;
} em_dist_plugin;
typedef const em_dist_plugin *(*em_dist_plugin_entry)(void);

/* What a plugin holding a process-group backend and libember must agree on: the tensors it
 * moves and the structs of this header. EM_TENSOR_ABI comes from tensor/tensor_impl.h. */
#define EM_DIST_ABI(X)                                                                        \
  X(EM_DIST_BACKEND_API_VERSION)                                                              \
  X(EM_DIST_NUM_OPS) X(EM_DIST_MSG) X(sizeof(em_dist_backend)) X(sizeof(struct em_dist_work)) \
      X(sizeof(struct em_dist_group))
#define EM_DIST_PLUGIN_ABI(X) EM_TENSOR_ABI(X) EM_DIST_ABI(X) X(sizeof(em_dist_plugin))

/* ---- for the reducer ---- */
/* The same, for a caller that waits for the work right after (and keeps the handle): no
 * backend thread is woken to start it, the wait does. */
em_status dist_post_then_wait(em_dist_group *g, em_dist_opkind kind, em_tensor *in, em_tensor *out, em_dist_redop op,
                              em_dist_work **work);

/* ---- elementwise reductions (combine.c), for backends that reduce themselves ----
 * acc[i] = acc[i] (op) x[i] for n elements of dtype ('avg' combines as 'sum'; integers wrap;
 * float16/bfloat16 in float32, rounded every step; max/min propagate NaN). Either pointer
 * may be misaligned (contributions read in place from a received message). */
void dist_combine(void *acc, const void *x, int64_t n, em_dtype dtype, em_dist_redop op);

/* ---- symmetric memory (symmetric.c) ----
 * A buffer of `bytes` on every member of g, each member's mapped by all members, when all
 * of them share one host: collectives on it read and write the other ranks' memory
 * directly. Collective over g. *out is NULL (EM_OK) when the members cannot share memory
 * (one rank, other hosts, EMBER_DIST_SHM=0, a mapping refused): why says which, and every
 * member gets NULL alike. */
typedef struct em_dist_symm em_dist_symm;
em_status dist_symm_new(em_dist_group *g, int64_t bytes, em_dist_symm **out, char *why, size_t why_cap);
void dist_symm_retain(em_dist_symm *s);
void dist_symm_release(em_dist_symm *s);
void *dist_symm_data(const em_dist_symm *s); /* this rank's buffer */
int dist_symm_enabled(void); /* EMBER_DIST_SHM is not 0 */
int dist_symm_supports(em_dtype dtype); /* dtypes the allreduce sums */
/* A flat CPU tensor over the first numel elements of this rank's buffer (holds s). */
em_status dist_symm_tensor(em_tensor **out, em_dist_symm *s, em_dtype dtype, int64_t numel);
/* Sums t (a contiguous floating tensor inside s's buffer) over the members, times
 * scale, into every member's t, on the calling thread; every member calls it in the same
 * order relative to its other collectives on s's group. started/finished (may be NULL)
 * receive em_clock_monotonic() at entry and exit. */
em_status dist_symm_all_reduce(em_dist_symm *s, em_tensor *t, double scale, double *started, double *finished);
/* A blocking all_reduce of t on g through g's scratch symmetric memory: returns 1 when it
 * ran (*st says how), 0 when it does not apply (not a CPU tensor of a supported dtype, or
 * g's ranks cannot share memory): then the caller posts it to the backend. */
int dist_symm_try_all_reduce(em_dist_group *g, em_tensor *t, em_dist_redop op, em_status *st);

/* A plain broadcast from root through g's scratch symmetric memory; 0 when it does not
 * apply (as dist_symm_try_all_reduce). */
int dist_symm_try_broadcast(em_dist_group *g, em_tensor *t, int root, em_status *st);
/* A blocking all_to_all_v (kind EM_DIST_OP_ALL_TO_ALL for even counts) of CPU tensors through
 * g's scratch, counts checked on every rank: 1 when done here (*st its status), 0 when it does
 * not apply (as dist_symm_try_all_reduce). */
int dist_symm_try_all_to_all_v(em_dist_group *g, em_tensor *out, const int64_t *out_counts, const em_tensor *in,
                               const int64_t *in_counts, em_dist_opkind kind, em_status *st);
/* The root's t (inside s's memory, e.g. a bucket) into every member's t. */
em_status dist_symm_broadcast(em_dist_symm *s, em_tensor *t, int root);
/* Equal on ranks that share a host (EMBER_DIST_RANKS_PER_HOST=N: N consecutive world ranks
 * play one host). */
int64_t dist_host_key(int world_rank);

/* ---- hierarchical reduction (hier.c) ----
 * For a group spanning several hosts with several ranks on some: ranks of a host reduce in
 * symmetric memory, one leader per host crosses hosts through the backend, the result comes
 * back in symmetric memory. dist_hier_get is collective over g on its first call; *out is
 * NULL when the flat paths fit (one host, or one rank per host). */
typedef struct dist_hier dist_hier;
em_status dist_hier_get(em_dist_group *g, dist_hier **out);
void dist_hier_free(dist_hier *h);
em_dist_group *dist_hier_local(const dist_hier *h); /* this host's ranks, leader first */
int dist_hier_is_leader(const dist_hier *h);
/* The leaders' all_reduce of t (a no-op on the other ranks). */
em_status dist_hier_cross(dist_hier *h, em_tensor *t, em_dist_redop op);
/* A plain all_reduce over g through the hierarchy; 0 when it does not apply. */
int dist_hier_try_all_reduce(em_dist_group *g, em_tensor *t, em_dist_redop op, em_status *st);

#endif
