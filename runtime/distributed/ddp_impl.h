/* ddp_impl.h - the data-parallel reducer's state, shared by
 *   reducer.c  buckets, leaf hooks, launching allreduces in bucket order, finishing an
 *              iteration, find_unused_parameters, statistics;
 *   setup.c    construction (model check across ranks, start-up broadcast), bucket
 *              rebuild, buffer broadcast, pre_forward and join. */
#ifndef EMBER_DDP_IMPL_H
#define EMBER_DDP_IMPL_H

#include <stdbool.h>
#include "distributed/dist_impl.h"
#include "tensor/tensor_impl.h"

typedef struct em_ddp em_ddp;

typedef struct ddp_param {
  em_ddp *owner;
  int index;
  em_tensor *param; /* retained */
  char *name;
  int bucket;
  int64_t offset; /* elements into the bucket */
  int64_t numel;
  em_tensor *view; /* the param's slice of its bucket, with the param's shape */
  int64_t hook_id;
  bool ready; /* this iteration */
  bool used; /* find_unused_parameters: reached from the outputs */
} ddp_param;

typedef struct ddp_bucket {
  em_dtype dtype;
  em_device device;
  int *params; /* indices, in layout order */
  int n_params;
  int64_t numel;
  em_tensor *flat; /* [numel]: the gradients (views point here) */
  em_tensor *wire; /* fp16/bf16 copy sent by the compression hooks, or NULL */
  em_dist_symm *symm; /* flat's memory, mapped by every rank (reduced in place), or NULL;
                       * with hier, by the ranks of this host only */
  dist_hier *hier; /* ranks on several hosts: reduced within the host in symm, across by
                    * the hosts' leaders (borrowed from the group), or NULL */
  int pending; /* parameters not ready yet this iteration */
  em_dist_work *work;
  double launched_at, finished_at;
} ddp_bucket;

struct em_ddp {
  em_dist_group *group;
  int rank, world;
  int n;
  ddp_param *p;
  int nb;
  ddp_bucket *b;
  em_ddp_options o;
  double scale; /* 1 / world: the average, applied while copying into buckets
                          * (MPI) or by the reduction (buckets in shared memory) */
  char shm_why[200]; /* why the buckets are not in shared memory, when they are not */
  /* pointer -> index of the parameters, for the graph walk */
  const em_tensor **lookup_keys;
  int *lookup_vals;
  int lookup_cap;
  /* the iteration */
  bool armed; /* the coming backward reduces */
  int n_ready;
  int n_hooked; /* ready through a hook (not marked unused) */
  int next_launch; /* the next bucket to launch: buckets start in order */
  em_tensor *used_map; /* int32 [n], find_unused_parameters */
  em_dist_work *used_work;
  bool in_finish;
  /* bucket rebuild: the order gradients arrived in the first synchronised iteration */
  int *arrival;
  int n_arrival;
  bool order_recorded, rebuild_pending, rebuilt;
  /* errors raised inside hooks, reported by the next call */
  em_status hook_status;
  char hook_error[1024];
  /* join */
  int authoritative;
  /* statistics */
  double st_iters, st_comm, st_exposed, st_buckets, st_bytes;
};

/* reducer.c */
em_status ddp_build_buckets(em_ddp *d, const int *order);
void ddp_free_buckets(ddp_bucket *b, int nb);
void ddp_hook(em_tensor *leaf, void *ctx);
/* Waits for what the iteration launched and forgets it (after an incomplete iteration). */
void ddp_drain(em_ddp *d);
/* Names the parameters that got no gradient into msg. */
void ddp_describe_unready(const em_ddp *d, char *msg, size_t cap);
/* Shadows one synchronised backward of the other ranks with zero gradients (join). */
em_status ddp_shadow_backward(em_ddp *d);

/* setup.c */
em_status ddp_rebuild(em_ddp *d);

#endif
