/* fuzz_wire_ring.c - a ring notice (pipeline/ring.c) as the trainer takes it: the input is
 * the raw bytes of the oldest entry of a reader's ring (its frame count and sizes, then the
 * frames), published by moving head; dp_ring_take checks and copies it out, and a 4-frame
 * notice then goes through the BATCH checks as the coordinator's drain does. The same bytes
 * are then the oldest entry of the leases' ring the other way (the trainer's writing, the
 * reader's taking, dp_ring_take_lease), and what comes out goes through the LEASE and SLOTS
 * checks as the reader's take_ring_leases does. */
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
  if (dp_ring_take(base, bytes, &nf, &f[1]) == 1) {
    zmq_msg_init_size(&f[0], 5);
    memcpy(zmq_msg_data(&f[0]), "Dfuzz", 5);
    fz_batch(f, 1 + nf);
    for (int i = 0; i <= nf; i++) zmq_msg_close(&f[i]);
  }
  /* the leases' ring: its head, tail and waiting lines, then the entries, at the memfd's end */
  static size_t last_lease = 64;
  uint8_t *lh = base + bytes - (uint64_t)DP_RING_LEASES * DP_RING_LEASE_BYTES - 192, *le = lh + 192;
  size_t m = size < DP_RING_LEASE_BYTES ? size : DP_RING_LEASE_BYTES;
  memset(le, 0, last_lease);
  memcpy(le, data, m);
  last_lease = m > 64 ? m : 64;
  memcpy(lh + 64, &zero, 8);
  memcpy(lh, &one, 8);
  nf = 0;
  if (dp_ring_take_lease(ring, &nf, f) != 1) return 0;
  if (nf >= 2 && dp_hdr_valid(zmq_msg_data(&f[0]), zmq_msg_size(&f[0]))) {
    dp_hdr h;
    memcpy(&h, zmq_msg_data(&f[0]), sizeof h);
    if (h.kind == DP_LEASE && dp_lease_valid(&h, nf, zmq_msg_size(&f[1]))) {
      const volatile uint8_t *p = zmq_msg_data(&f[1]); /* the ids, read as the reader reads them */
      for (int64_t k = 0; k < h.n; k++) (void)p[k * 8 + 7];
    } else if (h.kind == DP_SLOTS) {
      (void)dp_slots_valid(&h, nf, zmq_msg_size(&f[1]));
    }
  }
  for (int i = 0; i < nf; i++) zmq_msg_close(&f[i]);
  return 0;
}
