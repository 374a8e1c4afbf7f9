/* dp_reader_impl.h - a reader's shared-memory arena (dp_shm.c), used by dp_reader.c. */
#ifndef EMBER_DP_READER_IMPL_H
#define EMBER_DP_READER_IMPL_H

#include "dp_wire.h"

#define DP_ARENA_SLOTS 16

enum { SLOT_FREE, SLOT_FILLING, SLOT_SENT };

typedef struct dp_arena {
  char name[64];               /* /proc/<pid>/fd/<fd>: how a trainer on this host opens it */
  int fd;                      /* a memfd */
  uint8_t *base;
  uint64_t bytes, slot_bytes;
  int nslots;
  int state[DP_ARENA_SLOTS];
  int owner[DP_ARENA_SLOTS];   /* the connection a SENT slot went to */
} dp_arena;

dp_arena *dp_arena_create(uint64_t slot_bytes, int nslots);
void dp_arena_destroy(dp_arena *a);

#endif
