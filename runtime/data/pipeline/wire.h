/* pipeline/wire.h - the data pipeline's messages, and helpers both sides share.
 *
 * Every message starts with a frame holding a dp_hdr; kind-specific frames follow:
 *
 *   reader -> trainer (DEALER -> ROUTER, which prepends the reader's routing id)
 *     HELLO      [hdr][dp_hello][fingerprint text]
 *     BATCH      [hdr][dp_tdesc x ntensors][kept ids, int64 x n][data]      inline bytes
 *                [hdr][dp_tdesc x ntensors][kept ids, int64 x n][dp_shm_ref] a shared-memory slot
 *     ERROR      [hdr][message text]          the item failed (a bad record)
 *     FATAL      [hdr][message text]          the reader cannot work at all
 *     HEARTBEAT  [hdr]
 *   trainer -> reader
 *     WELCOME    [hdr]                        session, heartbeat times, flags
 *     REJECT     [hdr][reason text]
 *     RESET      [hdr]                        "who are you?": say hello again
 *     LEASE      [hdr][ids, int64 x n]        work item `item` of epoch `epoch`
 *                [hdr][ids, int64 x n][slot numbers, int64 x k]  and shared-memory slots given back
 *     SLOTS      [hdr][slot numbers, int64 x n]  shared-memory slots read and free again
 *     HEARTBEAT  [hdr]
 *     BYE        [hdr]                        the trainer is closing
 *
 * On one host a reader's ring (pipeline/ring.c) may carry BATCH notices of shared-memory
 * batches (without the routing id) one way, LEASE and SLOTS the other, framed alike.
 *
 * Every field is checked on receipt: a malformed message is dropped and counted, never
 * trusted (tensor sizes against the data frame, ids against the item leased). */
#ifndef EMBER_DP_WIRE_H
#define EMBER_DP_WIRE_H

#include <stdint.h>
#include <string.h>
#include "ember/data_pipeline.h"

#define DP_MAGIC 0x50444d45u /* "EMDP" */
#define DP_VERSION 5 /* 2: a LEASE may carry slots given back; dp_shm_ref names its arena; 3: HELLO names a ring;
                          4: tensor descriptions say which tensors are jagged (em_tensor_desc.lengths);
                          5: the ring carries LEASE and SLOTS from the trainer too (pipeline/ring.c) */
#define DP_ALIGN 64 /* tensors start at multiples of this in a batch's bytes */

enum dp_kind {
  DP_HELLO = 1,
  DP_WELCOME,
  DP_REJECT,
  DP_RESET,
  DP_LEASE,
  DP_BATCH,
  DP_ERROR,
  DP_FATAL,
  DP_HEARTBEAT,
  DP_BYE,
  DP_SLOTS,
  DP_NUM_KINDS
};

/* flags */
#define DP_FLAG_SKIP_BAD 1u /* WELCOME, LEASE: skip bad records */
#define DP_FLAG_SHM 2u /* WELCOME: shared memory welcome; HELLO: offered */

typedef struct dp_hdr {
  uint32_t magic;
  uint16_t version, kind;
  uint32_t flags;
  int32_t ntensors; /* BATCH */
  uint64_t session; /* the trainer's; 0 in HELLO */
  uint64_t plan; /* LEASE, BATCH, ERROR: which em_loader_begin the item belongs to */
  uint64_t epoch;
  int64_t item;
  int64_t n; /* LEASE, SLOTS: ids or slots; BATCH: kept rows */
  uint64_t seed; /* LEASE */
  int64_t skipped; /* BATCH: bad records left out */
  double times[4]; /* BATCH: read, decode, transform, send seconds */
  double heartbeat_s, heartbeat_timeout_s; /* WELCOME */
} dp_hdr;

typedef struct dp_hello {
  int64_t pid;
  int64_t dataset_size;
  uint64_t nonce; /* one per reader process: a repeated hello is not a new reader */
  char host[64];
  char boot_id[40]; /* with host: the same machine (shared memory possible) */
  char name[64];
  char ring[64]; /* its ring of batch notices (pipeline/ring.c): /proc/<pid>/fd/<memfd>; "" none */
  uint64_t ring_id, ring_bytes;
} dp_hello;

typedef struct dp_tdesc {
  em_tensor_desc d; /* sizes[0] = rows sent (a jagged tensor: values sent) */
  int64_t offset; /* in the data frame or the slot */
  int64_t nbytes;
} dp_tdesc;

typedef struct dp_shm_ref {
  char name[64]; /* the reader's arena: /proc/<pid>/fd/<memfd> */
  uint64_t arena_id; /* one per arena: a remade arena may get the old one's fd number */
  int64_t nslots; /* slots in the arena: how many the trainer may keep lent to tensors */
  uint64_t arena_bytes;
  int64_t slot;
  uint64_t offset; /* of the slot in the arena */
  uint64_t nbytes; /* used in the slot */
} dp_shm_ref;

static inline void dp_hdr_init(dp_hdr *h, int kind) {
  memset(h, 0, sizeof *h);
  h->magic = DP_MAGIC;
  h->version = DP_VERSION;
  h->kind = (uint16_t)kind;
}

static inline int dp_hdr_valid(const void *data, size_t size) {
  if (size != sizeof(dp_hdr)) return 0;
  dp_hdr h;
  memcpy(&h, data, sizeof h);
  return h.magic == DP_MAGIC && h.version == DP_VERSION && h.kind >= DP_HELLO && h.kind < DP_NUM_KINDS;
}

/* ---- checks both ends apply to what a peer sent (the fuzz harnesses call them too) ---- */
/* A frame of exactly n elements of elem bytes. n comes from the peer: dividing, not
 * multiplying, so a huge n cannot wrap to the frame's size. */
static inline int dp_count_fits(int64_t n, size_t bytes, size_t elem) {
  return n >= 0 && bytes % elem == 0 && (uint64_t)(bytes / elem) == (uint64_t)n;
}
/* LEASE: [hdr][ids x n] or [hdr][ids x n][slots]; at least one id. */
static inline int dp_lease_valid(const dp_hdr *h, int nframes, size_t ids_bytes) {
  return (nframes == 2 || nframes == 3) && h->n >= 1 && dp_count_fits(h->n, ids_bytes, sizeof(int64_t));
}
/* SLOTS: [hdr][slots x n]. */
static inline int dp_slots_valid(const dp_hdr *h, int nframes, size_t bytes) {
  return nframes == 2 && dp_count_fits(h->n, bytes, sizeof(int64_t));
}
/* HELLO's body into *out with every string terminated; 0 when the frame is not one. */
static inline int dp_hello_read(dp_hello *out, const void *data, size_t size) {
  if (size != sizeof *out) return 0;
  memcpy(out, data, sizeof *out);
  out->host[sizeof out->host - 1] = out->boot_id[sizeof out->boot_id - 1] = 0;
  out->name[sizeof out->name - 1] = out->ring[sizeof out->ring - 1] = 0;
  return out->pid >= 0 && out->dataset_size >= 0;
}
/* WELCOME's heartbeat times: taken only when finite and within an hour. */
static inline int dp_seconds_valid(double s) { return s > 0 && s <= 3600; }

/* ---- jagged tensors (em_tensor_desc.lengths), pipeline/common.c ---- */
/* Whether descs[i] may count the values of jagged tensor j: an int64 row tensor of 1 or 2
 * dims that is not jagged itself. */
int dp_lengths_desc_valid(const em_tensor_desc *descs, int n, int j);
/* The sum of the first `rows` rows of a lengths tensor's counts (data: rows x keys int64);
 * -1 when a count is negative or the sum overflows. */
int64_t dp_lengths_sum(const int64_t *data, int64_t rows, int64_t keys);

/* ---- shared helpers (pipeline/common.c) ---- */
uint64_t dp_random64(void); /* from /dev/urandom, else time and pid */
void dp_host_identity(char host[64], char boot_id[40]);
/* Bytes of a tensor described by d (its dims product times the dtype size); -1 if invalid. */
int64_t dp_desc_bytes(const em_tensor_desc *d);
/* Copies at most cap - 1 bytes of a frame's text and terminates it. */
void dp_text(char *dst, size_t cap, const void *src, size_t n);

#endif
