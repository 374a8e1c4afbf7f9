/* fuzz_wire_ring.c - a ring notice (pipeline/ring.c) as the trainer takes it: the input is
 * the raw bytes of the oldest entry of a reader's ring (its frame count and sizes, then the
 * frames), published by moving head; dp_ring_take checks and copies it out, and a 4-frame
 * notice then goes through the BATCH checks as the coordinator's drain does. */
#include "fuzz_wire.h"
#include "data/pipeline/ring.h"

enum { HEAD_AT = 128, TAIL_AT = 192, ENTRIES_AT = 256 };

static dp_ring *ring;
static struct dp_shm_map *map;

static void close_ring(void) {
  dp_shm_map_release(map);
  dp_ring_destroy(ring);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_once();
  static uint8_t *base;
  if (!ring) { /* the reader's ring, mapped again as the trainer maps it */
    if (!(ring = dp_ring_create())) abort();
    map = dp_shm_map_open(dp_ring_name(ring), getpid(), dp_ring_bytes(), dp_ring_id(ring));
    if (!map) abort();
    base = (uint8_t *)dp_shm_map_data(map);
    atexit(close_ring);
  }
  static size_t last = 64; /* what the previous input wrote: cleared, so runs do not depend on order */
  uint64_t bytes = dp_ring_bytes(), zero = 0, one = 1;
  size_t n = size < DP_RING_ENTRY_BYTES ? size : DP_RING_ENTRY_BYTES;
  memset(base + ENTRIES_AT, 0, last);
  memcpy(base + ENTRIES_AT, data, n);
  last = n > 64 ? n : 64;
  memcpy(base + TAIL_AT, &zero, 8);
  memcpy(base + HEAD_AT, &one, 8);
  zmq_msg_t f[1 + DP_RING_FRAMES];
  int nf = 0;
  if (dp_ring_take(base, bytes, &nf, &f[1]) != 1) return 0;
  zmq_msg_init_size(&f[0], 5);
  memcpy(zmq_msg_data(&f[0]), "Dfuzz", 5);
  fz_batch(f, 1 + nf);
  for (int i = 0; i <= nf; i++) zmq_msg_close(&f[i]);
  return 0;
}
