/* pipeline/loader_impl.h - the trainer side's shared state: what the consumer (the caller of
 * em_loader_next, pipeline/loader.c) and the coordinator thread (pipeline/coordinator.c) exchange.
 *
 * Threads: the consumer and the coordinator share only what sits under `mu` (the queue of
 * batches ready for the consumer, the command for the next epoch, statistics, failures).
 * The consumer wakes the coordinator by writing to an eventfd that the coordinator polls
 * with its sockets; the coordinator wakes the consumer through the condition variable.
 * Everything in dp_coord belongs to the coordinator thread alone. */
#ifndef EMBER_DP_LOADER_IMPL_H
#define EMBER_DP_LOADER_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>
#include <zmq.h>
#include "wire.h"

#define DP_MAX_TENSORS 16
#define DP_MAX_CHILDREN 256
#define DP_FREE_SLOTS_MAX 64 /* slots given back in one message, at most */
#define DP_FREE_SLOTS_BATCH 4 /* without a lease to carry them, slots go back this many at once */

struct em_loader_batch {
  uint64_t generation;
  int64_t item;
  int64_t samples;
  int64_t bytes;
  int ntensors;
  char names[DP_MAX_TENSORS][32];
  int lengths[DP_MAX_TENSORS]; /* em_tensor_desc.lengths: 0, or 1 + the tensor counting a jagged one's values */
  em_tensor *tensors[DP_MAX_TENSORS];
  em_tensor *ids;
};

/* What the consumer's queue holds. */
enum { DP_OUT_BATCH, DP_OUT_ERROR, DP_OUT_END };
typedef struct dp_out {
  int kind;
  uint64_t generation;
  em_loader_batch *batch;
  char *message;
  struct dp_out *next;
} dp_out;

/* An epoch's plan as em_loader_begin hands it over. */
typedef struct dp_plan {
  uint64_t id, epoch, seed;
  int64_t n_ids, n_items;
  int64_t *ids, *item_pos, *item_len;
} dp_plan;

enum { IT_PENDING, IT_LEASED, IT_READY, IT_QUEUED, IT_DONE };
typedef struct dp_item {
  int state;
  int leases; /* outstanding leases (more than one after a re-issue) */
  double leased_at; /* the latest lease */
  em_loader_batch *batch;
  char *error; /* a failed item: the message the consumer raises */
} dp_item;

typedef struct dp_lease_ref {
  uint64_t plan;
  int64_t item;
} dp_lease_ref;

typedef struct dp_worker {
  uint8_t rid[256];
  size_t rid_len;
  uint64_t nonce;
  int64_t pid;
  char host[64], name[64];
  int same_host, spawned;
  double last_seen, joined;
  int nleases, cap;
  dp_lease_ref *leases;
  struct dp_shm_map *shm;
  struct dp_shm_map *ring; /* its ring of batch notices, read by this trainer (pipeline/ring.c); NULL: none */
  int64_t lent; /* slots of its arena lent to batch tensors now */
  int64_t free_slots[DP_FREE_SLOTS_MAX]; /* its shared-memory slots to give back */
  int nfree;
  int topping_up; /* lease_items: this turn, it may get leases */
  int in_session; /* it sent something with this trainer's session since its last hello: it took
                     the welcome, so a lease in its ring is not taken before it knows the session */
  int64_t batches;
  struct dp_worker *next;
} dp_worker;

typedef struct dp_coord {
  void *router, *zap;
  uint64_t session;
  dp_worker *workers;
  int nworkers;
  dp_plan plan; /* the current epoch (ids NULL before the first) */
  dp_item *items;
  int64_t next_pending; /* no PENDING item below this one */
  int64_t next_push; /* in order: the next item the consumer gets */
  int64_t pushed, ready; /* items queued for the consumer; READY, not yet queued */
  int64_t *arrived; /* arrival order: READY items, oldest first */
  int64_t n_arrived, arrived_head;
  int end_pushed;
  int64_t total_leases;
  char host[64], boot_id[40];
  double last_heartbeat, last_message, last_lease_check;
  double last_notice, notice_gap; /* rings: when the last notice came, the mean time between them */
  int64_t scan_from; /* items below are done: the lease-timeout scan starts here */
} dp_coord;

struct em_loader {
  em_loader_options o;
  char *endpoints_opt, *fingerprint, *curve_public, *curve_secret, *curve_clients;
  void *zctx;
  pthread_t thread;
  int thread_started;
  int efd;
  struct dp_lender *lender; /* shared-memory slots lent to batch tensors (pipeline/shm.c) */
  char dir[128]; /* private directory (ipc socket, spawn files) */
  char endpoints[1024];

  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* --- under mu --- */
  dp_out *head, *tail;
  int64_t queued; /* batches in the queue */
  uint64_t generation; /* em_loader_begin count */
  int ended; /* the current generation's END was taken */
  dp_plan *pending; /* a plan for the coordinator to take */
  int stop;
  char fatal[1024];
  char last_loss[256], last_reject[512], last_exit[256];
  em_loader_stats stats;
  int respawn_wanted;
  int64_t children[DP_MAX_CHILDREN];
  int nchildren;
  double last_message; /* when a reader last said anything */
  int64_t waiting_item, n_items;
  uint64_t cur_epoch;
  /* --- consumer only --- */
  char **argv;
  int argc, restarts_left, spawned_any;
  dp_coord c;
};

/* pipeline/batch_message.c: frames f[0..4] (routing id, header, descriptions, ids, data or slot) of a
 * BATCH for a wanted item; NULL with why filled when something does not add up. *slot_lent
 * is set when its shared-memory slot went to the tensors (and comes back through the
 * lender, even when the batch failed): the caller must not give it back itself. */
em_loader_batch *dp_build_batch(em_loader *l, zmq_msg_t *f, const dp_hdr *h, dp_worker *w, int *slot_lent, char *why,
                                size_t why_cap);
/* pipeline/coordinator.c */
void *dp_coordinator_main(void *arg);
void dp_batch_destroy(em_loader_batch *b);
void dp_plan_free(dp_plan *p);
void dp_wake(int efd);
/* Shared memory (pipeline/shm.c): the trainer's view of a reader's arena. */
struct dp_shm_map;
struct dp_shm_map *dp_shm_map_open(const char *name, int64_t pid, uint64_t bytes, uint64_t id);
void dp_shm_map_retain(struct dp_shm_map *m);
void dp_shm_map_release(struct dp_shm_map *m); /* the last reference unmaps */
uint64_t dp_shm_map_id(const struct dp_shm_map *m);
/* Slots lent to tensors (pipeline/shm.c): a loan per batch, released by its tensors' deleters
 * from any thread; the coordinator drains what came back each turn. */
typedef struct dp_lender dp_lender;
typedef struct dp_loan dp_loan;
dp_lender *dp_lender_new(void);
void dp_lender_close(dp_lender *ln);
int64_t dp_lender_lent(dp_lender *ln);
dp_loan *dp_loan_new(dp_lender *ln, struct dp_shm_map *map, int64_t slot, int64_t bytes);
void dp_loan_retain(dp_loan *o);
void dp_loan_release(void *data, void *ctx);
void dp_lender_drain(dp_lender *ln, void (*give)(void *ctx, struct dp_shm_map *map, int64_t slot), void *ctx);
const void *dp_shm_map_data(const struct dp_shm_map *m);
uint64_t dp_shm_map_bytes(const struct dp_shm_map *m);
const char *dp_shm_map_name(const struct dp_shm_map *m);

#endif
