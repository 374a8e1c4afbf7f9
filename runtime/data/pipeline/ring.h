/* pipeline/ring.h - the ring of batch notices between a reader and a trainer on one host
 * (pipeline/ring.c says why and how). */
#ifndef EMBER_DP_RING_H
#define EMBER_DP_RING_H

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>
#include "wire.h"

#define DP_RING_ENTRIES 32 /* more than the leases a reader holds (worker_queue) */
#define DP_RING_ENTRY_BYTES (64u << 10) /* a notice: ~1 KB and 8 bytes per kept id (~7,000 ids) */
#define DP_RING_FRAMES 4 /* header, descriptions, ids, the slot's place */
#define DP_RING_LEASES 32 /* leases the trainer may have written and the reader not yet taken */
#define DP_RING_LEASE_BYTES (16u << 10) /* a lease: its header, ids (~1,900) and slots given back */

/* The size of a ring's memfd. */
uint64_t dp_ring_bytes(void);

/* Reader side. */
typedef struct dp_ring dp_ring;
dp_ring *dp_ring_create(void); /* NULL when no memfd can be made: ZeroMQ carries everything */
void dp_ring_destroy(dp_ring *r);
const char *dp_ring_name(const dp_ring *r); /* /proc/<pid>/fd/<fd>, as the trainer opens it */
uint64_t dp_ring_id(const dp_ring *r);
/* Publishes a notice of nframes frames for the trainer of `session`; 0 (and nothing
 * written) when that trainer is not attached, the ring is full or the notice too large. */
int dp_ring_put(dp_ring *r, uint64_t session, int nframes, const void *const *data, const size_t *size);
/* The oldest lease the trainer wrote, as frames ([hdr][ids][slots], the caller checks them
 * as a LEASE from ZeroMQ and closes them): 1 taken, 0 none, -1 a malformed one dropped. */
int dp_ring_take_lease(dp_ring *r, int *nframes, zmq_msg_t *frames);
/* The reader is about to sleep until ZeroMQ wakes it (1), or is awake (0). With 1, returns 1
 * when a lease came into the ring meanwhile (then it should not sleep). */
int dp_ring_set_waiting(dp_ring *r, int waiting);
/* The session of the trainer attached to the ring now; 0: none. */
uint64_t dp_ring_session(const dp_ring *r);
/* The trainer of `session` is gone (it may have died without detaching): free the ring for
 * the next one. */
void dp_ring_forget(dp_ring *r, uint64_t session);

/* Trainer side, on the mapped memfd (base, bytes). */
int dp_ring_attach(void *base, uint64_t bytes, uint64_t session); /* 1: this trainer reads it */
void dp_ring_detach(void *base, uint64_t bytes, uint64_t session);
/* The oldest notice as frames (initialised here; the caller closes them): 1 taken, 0 none,
 * -1 a malformed notice was dropped, -2 the ring is not usable (stop reading it). */
int dp_ring_take(void *base, uint64_t bytes, int *nframes, zmq_msg_t *frames);
/* Writes a LEASE (nframes frames) for the reader; 0 (nothing written) when this trainer is
 * not the one attached, the leases' ring is full or the lease too large. */
int dp_ring_put_lease(void *base, uint64_t bytes, uint64_t session, int nframes, const void *const *data,
                      const size_t *size);
/* Whether the reader sleeps until ZeroMQ wakes it (asked after a lease went into the ring:
 * 1, and the trainer must wake it). */
int dp_ring_reader_waiting(void *base, uint64_t bytes);

#endif
