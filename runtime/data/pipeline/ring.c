/* pipeline/ring.c - batch notices from a reader to a trainer on the same host, without ZeroMQ.
 *
 * A shared-memory batch is a slot in the reader's arena plus a small notice (header, tensor
 * descriptions, kept ids, the slot's place). Sent through ZeroMQ, that notice cost the
 * reader a wake-up of its ZeroMQ I/O thread per batch (an eventfd write, an inter-processor
 * interrupt on a VM: a fifth of a reader's time at batch 1024), and the trainer two more.
 * Here the reader copies the notice into a ring in a memfd of its own and publishes it by
 * moving `head`; the trainer's coordinator polls the ring while it has leases out with that
 * reader. Nobody is woken.
 *
 * One trainer at a time uses a reader's ring: it writes its session into `attached` when it
 * welcomes the reader (compare-and-swap, so a second trainer on the host keeps ZeroMQ), and
 * clears it when it loses or leaves the reader. The reader writes a notice only while
 * `attached` holds the session of the trainer the batch is for, and only while the ring has
 * room; otherwise the notice goes through ZeroMQ as before, so nothing depends on the ring:
 * a notice left in it when the trainer lets go is the same as a message lost with a
 * connection (the trainer leases the item again; a late copy is a duplicate and dropped).
 *
 * Entries hold the four frames of a BATCH message as they would travel: the trainer builds
 * the same frames from them and handles them as a received message, with every check
 * (pipeline/batch_message.c). The reader's memory is not trusted: sizes are checked, and the frames are
 * copied out before anything reads them.
 *
 * The same memfd carries leases the other way (wire version 5): after the notices comes a
 * second ring, written by the attached trainer and read by the reader's main thread, with
 * LEASE messages ([hdr][ids][slots given back]). A lease through ZeroMQ woke the trainer's
 * ZeroMQ I/O thread, the reader's, and the reader's main thread through a condition
 * variable; from the ring the reader takes it when it asks for its next lease. The trainer
 * writes one only while it is attached and the reader still holds a lease of its own (so it
 * is awake and will look); otherwise the lease goes through ZeroMQ, which wakes it. A reader
 * out of work looks at the ring after short pauses for a while, then says it is `waiting`
 * and sleeps until ZeroMQ wakes it: the trainer sends leases through ZeroMQ to a waiting
 * reader, and wakes it with a heartbeat if it began to wait just as a lease went into the
 * ring (pipeline/reader.c). A lease left in the
 * ring when the trainer lets go is a lost message like a notice: the item is leased again
 * when the reader is lost, and a lease the reader takes for a session it does not serve is
 * dropped, as one from ZeroMQ is. The trainer's bytes are not trusted either: copied out and
 * checked as a LEASE from ZeroMQ is. */
#ifdef EMBER_HAVE_ZMQ
#define _GNU_SOURCE /* memfd_create */
#include "ring.h"
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define RING_MAGIC 0x474e495250444d45ull /* "EMDPRING" */

typedef struct ring_hdr {
  uint64_t magic, entries, entry_bytes, id;
  char pad0[32];
  _Atomic uint64_t attached; /* the session of the trainer reading it; 0: none */
  char pad1[56];
  _Atomic uint64_t head; /* notices published (the reader's) */
  char pad2[56];
  _Atomic uint64_t tail; /* notices taken (the trainer's) */
  char pad3[56];
} ring_hdr;

/* The leases' ring, after the notices' entries: the trainer moves head, the reader tail;
 * `waiting` is 1 while the reader sleeps until ZeroMQ wakes it (dp_ring_set_waiting). */
typedef struct lease_hdr {
  _Atomic uint64_t head;
  char pad0[56];
  _Atomic uint64_t tail;
  char pad1[56];
  _Atomic uint64_t waiting;
  char pad2[56];
} lease_hdr;

typedef struct ring_entry {
  uint32_t nframes, size[DP_RING_FRAMES];
  /* the frames' bytes follow, each at a multiple of 8 */
} ring_entry;

/* One direction: a single writer moves head, a single reader moves tail. */
typedef struct channel {
  _Atomic uint64_t *head, *tail;
  char *entries;
  uint64_t n, entry_bytes;
} channel;

static size_t round8(size_t n) { return (n + 7) & ~(size_t)7; }

static uint64_t notices_bytes(void) { return sizeof(ring_hdr) + (uint64_t)DP_RING_ENTRIES * DP_RING_ENTRY_BYTES; }

static channel notices(ring_hdr *h) {
  return (channel){&h->head, &h->tail, (char *)(h + 1), DP_RING_ENTRIES, DP_RING_ENTRY_BYTES};
}

static lease_hdr *lease_header(ring_hdr *h) { return (lease_hdr *)((char *)h + notices_bytes()); }

static channel leases(ring_hdr *h) {
  lease_hdr *l = lease_header(h);
  return (channel){&l->head, &l->tail, (char *)(l + 1), DP_RING_LEASES, DP_RING_LEASE_BYTES};
}

/* Publishes nframes frames; 0 when the channel is full or the message too large. */
static int put(channel ch, int nframes, const void *const *data, const size_t *size) {
  if (nframes < 1 || nframes > DP_RING_FRAMES) return 0;
  uint64_t head = atomic_load_explicit(ch.head, memory_order_relaxed);
  if (head - atomic_load_explicit(ch.tail, memory_order_acquire) >= ch.n) return 0; /* full */
  size_t need = sizeof(ring_entry);
  for (int i = 0; i < nframes; i++) need += round8(size[i]);
  if (need > ch.entry_bytes) return 0;
  ring_entry *e = (ring_entry *)(ch.entries + (head % ch.n) * ch.entry_bytes);
  e->nframes = (uint32_t)nframes;
  char *p = (char *)(e + 1);
  for (int i = 0; i < nframes; i++) {
    e->size[i] = (uint32_t)size[i];
    if (size[i]) memcpy(p, data[i], size[i]);
    p += round8(size[i]);
  }
  atomic_store_explicit(ch.head, head + 1, memory_order_release);
  return 1;
}

/* The oldest message as frames: 1 taken, 0 none, -1 a malformed one dropped, -2 the writer
 * moved head further than it may. Sizes are checked on a copy of the entry's counts, and
 * the bytes copied out, before anything reads them. */
static int take(channel ch, int *nframes, zmq_msg_t *frames) {
  uint64_t tail = atomic_load_explicit(ch.tail, memory_order_relaxed);
  uint64_t head = atomic_load_explicit(ch.head, memory_order_acquire);
  if (head == tail) return 0;
  if (head - tail > ch.n) return -2;
  const ring_entry *e = (const ring_entry *)(ch.entries + (tail % ch.n) * ch.entry_bytes);
  ring_entry copy;
  memcpy(&copy, e, sizeof copy);
  int ok = copy.nframes >= 1 && copy.nframes <= DP_RING_FRAMES;
  size_t at = sizeof copy;
  for (uint32_t i = 0; ok && i < copy.nframes; i++) {
    if (copy.size[i] > ch.entry_bytes || at + round8(copy.size[i]) > ch.entry_bytes) ok = 0;
    else at += round8(copy.size[i]);
  }
  if (!ok) {
    atomic_store_explicit(ch.tail, tail + 1, memory_order_release);
    return -1;
  }
  const char *p = (const char *)(e + 1);
  for (uint32_t i = 0; i < copy.nframes; i++) {
    zmq_msg_init_size(&frames[i], copy.size[i]);
    if (copy.size[i]) memcpy(zmq_msg_data(&frames[i]), p, copy.size[i]);
    p += round8(copy.size[i]);
  }
  *nframes = (int)copy.nframes;
  atomic_store_explicit(ch.tail, tail + 1, memory_order_release);
  return 1;
}

uint64_t dp_ring_bytes(void) {
  return notices_bytes() + sizeof(lease_hdr) + (uint64_t)DP_RING_LEASES * DP_RING_LEASE_BYTES;
}

/* ---------------------------------------------------------------- reader side */
struct dp_ring {
  char name[64];
  int fd;
  ring_hdr *h;
};

dp_ring *dp_ring_create(void) {
  dp_ring *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->fd = memfd_create("ember-reader-ring", MFD_CLOEXEC);
  if (r->fd < 0 || ftruncate(r->fd, (off_t)dp_ring_bytes()) != 0) {
    if (r->fd >= 0) close(r->fd);
    free(r);
    return NULL;
  }
  r->h = mmap(NULL, dp_ring_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
  if (r->h == MAP_FAILED) {
    close(r->fd);
    free(r);
    return NULL;
  }
  r->h->magic = RING_MAGIC;
  r->h->entries = DP_RING_ENTRIES;
  r->h->entry_bytes = DP_RING_ENTRY_BYTES;
  r->h->id = dp_random64();
  snprintf(r->name, sizeof r->name, "/proc/%d/fd/%d", (int)getpid(), r->fd);
  return r;
}

void dp_ring_destroy(dp_ring *r) {
  if (!r) return;
  munmap(r->h, dp_ring_bytes());
  close(r->fd);
  free(r);
}

const char *dp_ring_name(const dp_ring *r) { return r->name; }
uint64_t dp_ring_id(const dp_ring *r) { return r->h->id; }

int dp_ring_put(dp_ring *r, uint64_t session, int nframes, const void *const *data, const size_t *size) {
  if (!r || session == 0) return 0;
  if (atomic_load_explicit(&r->h->attached, memory_order_acquire) != session) return 0;
  return put(notices(r->h), nframes, data, size);
}

int dp_ring_take_lease(dp_ring *r, int *nframes, zmq_msg_t *frames) {
  if (!r) return 0;
  channel ch = leases(r->h);
  int got = take(ch, nframes, frames);
  if (got == -2) { /* the trainer wrote past what it may: drop what is there, keep the ring */
    atomic_store_explicit(ch.tail, atomic_load_explicit(ch.head, memory_order_acquire), memory_order_release);
    return -1;
  }
  return got;
}

int dp_ring_set_waiting(dp_ring *r, int waiting) {
  if (!r) return 0;
  lease_hdr *l = lease_header(r->h);
  atomic_store_explicit(&l->waiting, waiting ? 1 : 0, memory_order_seq_cst);
  if (!waiting) return 0;
  /* the trainer writes a lease, then reads `waiting`; this side writes `waiting`, then reads
   * head: with a full fence on each side, one of the two sees the other's write */
  atomic_thread_fence(memory_order_seq_cst);
  return atomic_load_explicit(&l->head, memory_order_acquire) != atomic_load_explicit(&l->tail, memory_order_relaxed);
}

uint64_t dp_ring_session(const dp_ring *r) {
  return r ? atomic_load_explicit(&r->h->attached, memory_order_acquire) : 0;
}

void dp_ring_forget(dp_ring *r, uint64_t session) {
  if (!r || session == 0) return;
  uint64_t mine = session;
  atomic_compare_exchange_strong(&r->h->attached, &mine, 0);
}

/* ---------------------------------------------------------------- trainer side */
static ring_hdr *valid(const void *base, uint64_t bytes) {
  ring_hdr *h = (ring_hdr *)base;
  if (!h || bytes != dp_ring_bytes() || h->magic != RING_MAGIC || h->entries != DP_RING_ENTRIES ||
      h->entry_bytes != DP_RING_ENTRY_BYTES)
    return NULL;
  return h;
}

int dp_ring_attach(void *base, uint64_t bytes, uint64_t session) {
  ring_hdr *h = valid(base, bytes);
  if (!h || session == 0) return 0;
  uint64_t none = 0;
  if (atomic_compare_exchange_strong(&h->attached, &none, session)) return 1;
  return none == session;
}

void dp_ring_detach(void *base, uint64_t bytes, uint64_t session) {
  ring_hdr *h = valid(base, bytes);
  if (!h) return;
  uint64_t mine = session;
  atomic_compare_exchange_strong(&h->attached, &mine, 0);
}

int dp_ring_take(void *base, uint64_t bytes, int *nframes, zmq_msg_t *frames) {
  ring_hdr *h = valid(base, bytes);
  if (!h) return -2;
  return take(notices(h), nframes, frames);
}

int dp_ring_put_lease(void *base, uint64_t bytes, uint64_t session, int nframes, const void *const *data,
                      const size_t *size) {
  ring_hdr *h = valid(base, bytes);
  if (!h || session == 0 || atomic_load_explicit(&h->attached, memory_order_acquire) != session) return 0;
  return put(leases(h), nframes, data, size);
}

int dp_ring_reader_waiting(void *base, uint64_t bytes) {
  ring_hdr *h = valid(base, bytes);
  if (!h) return 0;
  atomic_thread_fence(memory_order_seq_cst); /* after the lease's head (dp_ring_set_waiting) */
  return atomic_load_explicit(&lease_header(h)->waiting, memory_order_seq_cst) != 0;
}
#endif
