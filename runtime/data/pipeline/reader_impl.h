/* pipeline/reader_impl.h - a reader's shared-memory arena (pipeline/shm.c), used by pipeline/reader.c. */
#ifndef EMBER_DP_READER_IMPL_H
#define EMBER_DP_READER_IMPL_H

#include "wire.h"

#define DP_ARENA_SLOTS 256
/* An arena has as many slots as fit this many bytes (8 to DP_ARENA_SLOTS): the trainer
 * lends slots to its batch tensors until Lua's collector frees them, which for small
 * batches is after some 16 MB of tensors (lua/ember/internal.lua, nudge_gc). */
#define DP_ARENA_BYTES (32ull << 20)

/* LOST: sent to a trainer this reader has forgotten. That trainer may still read it (its
 * tensors view it), so it is never filled again; an arena with nothing but LOST slots left
 * is replaced by a new one (the old memory lives on in the trainer's mapping). */
enum { SLOT_FREE, SLOT_FILLING, SLOT_SENT, SLOT_LOST };

typedef struct dp_arena {
  char name[64]; /* /proc/<pid>/fd/<fd>: how a trainer on this host opens it */
  uint64_t id; /* random: tells this arena from an earlier one with the same fd */
  int fd; /* a memfd */
  uint8_t *base;
  uint64_t bytes, slot_bytes;
  int nslots;
  int state[DP_ARENA_SLOTS];
  int owner[DP_ARENA_SLOTS]; /* the connection a SENT slot went to */
} dp_arena;

/* nslots 0: as many as fit DP_ARENA_BYTES, 8 to DP_ARENA_SLOTS. */
dp_arena *dp_arena_create(uint64_t slot_bytes, int nslots);
void dp_arena_destroy(dp_arena *a);

#endif
