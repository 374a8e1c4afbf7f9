/* dp_shm.c - shared memory between a reader and a trainer on the same host.
 *
 * A reader owns an arena (a memfd cut into equal slots). It fills a slot with a batch and
 * sends only the header through ZeroMQ; the trainer maps the arena (once, by opening
 * /proc/<reader pid>/fd/<fd>), copies the batch out into its own tensors and hands the slot
 * back (SLOTS). So a batch crosses with one copy on each side and no socket traffic for its
 * bytes. The trainer copies rather than lending the slot to its tensors: a tensor's lifetime
 * follows Lua's garbage collector, and a slot held until the next collection would stall the
 * reader. A memfd has no name in /dev/shm, so a reader killed by any signal leaves nothing
 * behind: the memory goes when the last process mapping it unmaps it. */
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
#include "dp_loader_impl.h"
#include "dp_reader_impl.h"

/* ---------------------------------------------------------------- trainer side */
struct dp_shm_map {
  char name[64];
  void *base;
  uint64_t bytes;
};

struct dp_shm_map *dp_shm_map_open(const char *name, int64_t pid, uint64_t bytes) {
  char want[64];
  int fdnum = -1, used = 0;
  snprintf(want, sizeof want, "/proc/%lld/fd/", (long long)pid);
  if (strncmp(name, want, strlen(want)) || sscanf(name + strlen(want), "%d%n", &fdnum, &used) != 1 ||
      name[strlen(want) + (size_t)used] || fdnum < 0 || bytes == 0) {
    em_set_error(EM_ERR_ARGUMENT, "shared memory: '%s' is not an arena of reader pid %lld", name, (long long)pid);
    return NULL;
  }
  int fd = open(name, O_RDONLY | O_CLOEXEC);
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
  void *base = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
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
  return m;
}

void dp_shm_map_release(struct dp_shm_map *m) {
  if (!m) return;
  munmap(m->base, m->bytes);
  free(m);
}

const void *dp_shm_map_data(const struct dp_shm_map *m) { return m->base; }
uint64_t dp_shm_map_bytes(const struct dp_shm_map *m) { return m->bytes; }
const char *dp_shm_map_name(const struct dp_shm_map *m) { return m->name; }

/* ---------------------------------------------------------------- reader side */
dp_arena *dp_arena_create(uint64_t slot_bytes, int nslots) {
  if (nslots < 1 || nslots > DP_ARENA_SLOTS || slot_bytes == 0) return NULL;
  slot_bytes = (slot_bytes + 4095) & ~(uint64_t)4095;
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
  return a;
}

void dp_arena_destroy(dp_arena *a) {
  if (!a) return;
  munmap(a->base, a->bytes);
  close(a->fd);
  free(a);
}
#endif
