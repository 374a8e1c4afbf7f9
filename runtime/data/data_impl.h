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

#endif
