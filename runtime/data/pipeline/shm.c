/* pipeline/shm.c - shared memory between a reader and a trainer on the same host.
 *
 * A reader owns an arena (a memfd cut into equal slots). It fills a slot with a batch and
 * sends only the header through ZeroMQ; the trainer maps the arena (once, by opening
 * /proc/<reader pid>/fd/<fd>) and its batch tensors view the slot: no copy on the trainer's
 * side (on this machine the copy was as costly as the reader's whole gather, both being
 * bound by memory bandwidth). The slot goes back to the reader (SLOTS, or with a LEASE) when
 * the last of those tensors is released, which for Lua is when its collector runs. So the
 * arena has many slots (DP_ARENA_BYTES), the lent bytes count as allocated memory (the
 * collector is nudged by them as by any tensor), and the trainer copies instead of lending
 * once a reader's free slots run low (pipeline/batch_message.c): a batch kept for long never stalls the
 * reader, and the reader sends inline when it finds no free slot at all.
 *
 * Lifetimes: a mapping is counted (the coordinator's per reader, one per lent slot) and
 * unmapped by its last user, so tensors stay valid after their reader died or the loader
 * closed; a reader never refills a slot it sent to a trainer it has since forgotten
 * (SLOT_LOST). The mapping is writable: batch tensors are the trainer's to modify in place,
 * as copies were. A memfd has no name in /dev/shm, so a reader killed by any signal leaves
 * nothing behind: the memory goes when the last process mapping it unmaps it. */
#ifdef EMBER_HAVE_ZMQ
#define _GNU_SOURCE /* memfd_create */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/core_impl.h"
#include "loader_impl.h"
#include "reader_impl.h"

/* ---------------------------------------------------------------- trainer side */
struct dp_shm_map {
  char name[64];
  void *base;
  uint64_t bytes;
  uint64_t id;
  atomic_int refs;
};

struct dp_shm_map *dp_shm_map_open(const char *name, int64_t pid, uint64_t bytes, uint64_t id) {
  char want[64];
  int fdnum = -1, used = 0;
  snprintf(want, sizeof want, "/proc/%lld/fd/", (long long)pid);
  if (strncmp(name, want, strlen(want)) || sscanf(name + strlen(want), "%d%n", &fdnum, &used) != 1 ||
      name[strlen(want) + (size_t)used] || fdnum < 0 || bytes == 0) {
    em_set_error(EM_ERR_ARGUMENT, "shared memory: '%s' is not an arena of reader pid %lld", name, (long long)pid);
    return NULL;
  }
  int fd = open(name, O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    em_set_error(EM_ERR_IO, "shared memory: cannot open '%s': %s", name, strerror(errno));
    return NULL;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size != bytes) {
    close(fd);
    em_set_error(EM_ERR_FORMAT, "shared memory: '%s' holds %lld bytes, the reader said %llu", name,
                 (long long)sb.st_size, (unsigned long long)bytes);
    return NULL;
  }
  void *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    em_set_error(EM_ERR_IO, "shared memory: cannot map '%s': %s", name, strerror(errno));
    return NULL;
  }
  struct dp_shm_map *m = calloc(1, sizeof *m);
  if (!m) {
    munmap(base, bytes);
    em_set_error(EM_ERR_MEMORY, "shared memory: out of memory");
    return NULL;
  }
  snprintf(m->name, sizeof m->name, "%s", name);
  m->base = base;
  m->bytes = bytes;
  m->id = id;
  atomic_init(&m->refs, 1);
  return m;
}

void dp_shm_map_retain(struct dp_shm_map *m) { atomic_fetch_add(&m->refs, 1); }

void dp_shm_map_release(struct dp_shm_map *m) {
  if (!m || atomic_fetch_sub(&m->refs, 1) != 1) return;
  munmap(m->base, m->bytes);
  free(m);
}

uint64_t dp_shm_map_id(const struct dp_shm_map *m) { return m->id; }

/* ---------------------------------------------------------------- lent slots */
typedef struct dp_returned {
  struct dp_shm_map *map; /* counted: the entry holds a reference */
  int64_t slot;
} dp_returned;

struct dp_lender {
  pthread_mutex_t mu;
  atomic_int refs; /* the loader's, and one per loan */
  int closed; /* the loader is gone: returned slots have nobody to go to */
  dp_returned *ret;
  int nret, cap;
  atomic_llong lent; /* slots lent now, all readers */
};

typedef struct dp_loan {
  dp_lender *lender;
  struct dp_shm_map *map;
  int64_t slot;
  int64_t counted;
  atomic_int refs; /* the tensors viewing the slot (and their builder while it runs) */
} dp_loan;

dp_lender *dp_lender_new(void) {
  dp_lender *ln = calloc(1, sizeof *ln);
  if (!ln) return NULL;
  pthread_mutex_init(&ln->mu, NULL);
  atomic_init(&ln->refs, 1);
  atomic_init(&ln->lent, 0);
  return ln;
}

static void lender_unref(dp_lender *ln) {
  if (atomic_fetch_sub(&ln->refs, 1) != 1) return;
  for (int i = 0; i < ln->nret; i++) dp_shm_map_release(ln->ret[i].map);
  free(ln->ret);
  pthread_mutex_destroy(&ln->mu);
  free(ln);
}

void dp_lender_close(dp_lender *ln) {
  if (!ln) return;
  pthread_mutex_lock(&ln->mu);
  ln->closed = 1;
  for (int i = 0; i < ln->nret; i++) dp_shm_map_release(ln->ret[i].map);
  ln->nret = 0;
  pthread_mutex_unlock(&ln->mu);
  lender_unref(ln);
}

int64_t dp_lender_lent(dp_lender *ln) { return ln ? (int64_t)atomic_load(&ln->lent) : 0; }

dp_loan *dp_loan_new(dp_lender *ln, struct dp_shm_map *map, int64_t slot, int64_t bytes) {
  dp_loan *o = calloc(1, sizeof *o);
  if (!o) return NULL;
  atomic_fetch_add(&ln->refs, 1);
  dp_shm_map_retain(map);
  o->lender = ln;
  o->map = map;
  o->slot = slot;
  o->counted = bytes;
  atomic_init(&o->refs, 1);
  atomic_fetch_add(&ln->lent, 1);
  core_memory_count(bytes); /* Lua's collector is nudged by lent bytes as by allocated ones */
  return o;
}

void dp_loan_retain(dp_loan *o) { atomic_fetch_add(&o->refs, 1); }

/* A tensor's deleter (any thread): the last one queues the slot for the coordinator, which
 * gives it back to its reader on its next turn (no wake-up of its own: a turn comes with
 * the next batch, and a reader short of slots sends inline meanwhile). */
void dp_loan_release(void *data, void *ctx) {
  (void)data;
  dp_loan *o = ctx;
  if (atomic_fetch_sub(&o->refs, 1) != 1) return;
  dp_lender *ln = o->lender;
  core_memory_count(-o->counted);
  atomic_fetch_sub(&ln->lent, 1);
  int queued = 0;
  pthread_mutex_lock(&ln->mu);
  if (!ln->closed) {
    if (ln->nret == ln->cap) {
      int cap = ln->cap ? 2 * ln->cap : 64;
      dp_returned *p = realloc(ln->ret, (size_t)cap * sizeof *p);
      if (p) ln->ret = p, ln->cap = cap;
    }
    if (ln->nret < ln->cap) {
      ln->ret[ln->nret++] = (dp_returned){o->map, o->slot};
      queued = 1;
    }
  }
  pthread_mutex_unlock(&ln->mu);
  if (!queued) dp_shm_map_release(o->map); /* out of memory: the slot stays with the trainer */
  lender_unref(ln);
  free(o);
}

void dp_lender_drain(dp_lender *ln, void (*give)(void *ctx, struct dp_shm_map *map, int64_t slot), void *ctx) {
  pthread_mutex_lock(&ln->mu);
  for (int i = 0; i < ln->nret; i++) {
    give(ctx, ln->ret[i].map, ln->ret[i].slot);
    dp_shm_map_release(ln->ret[i].map);
  }
  ln->nret = 0;
  pthread_mutex_unlock(&ln->mu);
}

const void *dp_shm_map_data(const struct dp_shm_map *m) { return m->base; }
uint64_t dp_shm_map_bytes(const struct dp_shm_map *m) { return m->bytes; }
const char *dp_shm_map_name(const struct dp_shm_map *m) { return m->name; }

/* ---------------------------------------------------------------- reader side */
dp_arena *dp_arena_create(uint64_t slot_bytes, int nslots) {
  slot_bytes = (slot_bytes + 4095) & ~(uint64_t)4095;
  if (nslots == 0 && slot_bytes) { /* as many as fit DP_ARENA_BYTES */
    uint64_t fit = DP_ARENA_BYTES / slot_bytes;
    nslots = fit < 8 ? 8 : fit > DP_ARENA_SLOTS ? DP_ARENA_SLOTS : (int)fit;
  }
  if (nslots < 1 || nslots > DP_ARENA_SLOTS || slot_bytes == 0) return NULL;
  dp_arena *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  a->fd = memfd_create("ember-reader-arena", MFD_CLOEXEC);
  a->bytes = slot_bytes * (uint64_t)nslots;
  if (a->fd < 0 || ftruncate(a->fd, (off_t)a->bytes) != 0) {
    if (a->fd >= 0) close(a->fd);
    free(a);
    return NULL;
  }
  a->base = mmap(NULL, a->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0);
  if (a->base == MAP_FAILED) {
    close(a->fd);
    free(a);
    return NULL;
  }
  snprintf(a->name, sizeof a->name, "/proc/%d/fd/%d", (int)getpid(), a->fd);
  a->slot_bytes = slot_bytes;
  a->nslots = nslots;
  a->id = dp_random64();
  return a;
}

void dp_arena_destroy(dp_arena *a) {
  if (!a) return;
  munmap(a->base, a->bytes);
  close(a->fd);
  free(a);
}
#endif
