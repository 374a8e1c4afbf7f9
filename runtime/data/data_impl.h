/* data_impl.h - what the data subsystem's files share beyond the public headers. */
#ifndef EMBER_DATA_IMPL_H
#define EMBER_DATA_IMPL_H

#include "ember/data.h"
#include "ember/data_pipeline.h"

/* em_data_epoch_plan without looking for a plan made ahead (sample.c). */
em_status data_epoch_plan_now(em_tensor **out, int64_t n, uint64_t seed, uint64_t epoch, int shuffle, int64_t rank,
                              int64_t world_size, int pad, int64_t base);
/* The plan made ahead for exactly these arguments (plan_ahead.c), waiting while it is being
 * made; 0 when there is none. */
int data_plan_take(em_tensor **out, int64_t n, uint64_t seed, uint64_t epoch, int shuffle, int64_t rank,
                   int64_t world_size, int pad, int64_t base);

/* Batch memory used again (batch_pool.c): a pool per source, closed with it; its tensors may
 * outlive it. dp_pool_empty: a CPU tensor whose memory comes from p (em_empty when p is
 * NULL). dp_pool_waiting: bytes waiting in p for the next batch. */
typedef struct dp_pool dp_pool;
dp_pool *dp_pool_new(void);
em_status dp_pool_empty(dp_pool *p, em_tensor **out, int ndim, const int64_t *sizes, em_dtype dtype);
void dp_pool_close(dp_pool *p);
int64_t dp_pool_waiting(dp_pool *p);

#endif
