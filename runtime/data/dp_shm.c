/* dp_shm.c - shared memory between a reader and a trainer on the same host.
 *
 * A reader owns an arena (a POSIX shared-memory object cut into equal slots). It fills a
 * slot with a batch and sends only the header through ZeroMQ; the trainer maps the arena
 * (once), copies the batch out into its own tensors and hands the slot back (SLOTS). So a
 * batch crosses with one copy on each side and no socket traffic for its bytes. The
 * trainer copies rather than lending the slot to its tensors: a tensor's lifetime follows
 * Lua's garbage collector, and a slot held until the next collection would stall the
 * reader. The reader unlinks the arena when it closes; the trainer unlinks the arena of a
 * reader that died (dp_shm_map_release with unlink). */
#ifdef EMBER_HAVE_ZMQ
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

struct dp_shm_map *dp_shm_map_open(const char *name, uint64_t bytes) {
  if (strncmp(name, "/ember-", 7) || strchr(name + 1, '/') || bytes == 0) {
    em_set_error(EM_ERR_ARGUMENT, "shared memory: '%s' is not an ember reader's arena", name);
    return NULL;
  }
  int fd = shm_open(name, O_RDONLY, 0);
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

void dp_shm_unlink(const char *name) { shm_unlink(name); }

const void *dp_shm_map_data(const struct dp_shm_map *m) { return m->base; }
uint64_t dp_shm_map_bytes(const struct dp_shm_map *m) { return m->bytes; }
const char *dp_shm_map_name(const struct dp_shm_map *m) { return m->name; }

/* ---------------------------------------------------------------- reader side */
dp_arena *dp_arena_create(uint64_t slot_bytes, int nslots) {
  if (nslots < 1 || nslots > DP_ARENA_SLOTS || slot_bytes == 0) return NULL;
  slot_bytes = (slot_bytes + 4095) & ~(uint64_t)4095;
  dp_arena *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  snprintf(a->name, sizeof a->name, "/ember-%d-%016llx", (int)getpid(), (unsigned long long)dp_random64());
  int fd = shm_open(a->name, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    free(a);
    return NULL;
  }
  a->bytes = slot_bytes * (uint64_t)nslots;
  if (ftruncate(fd, (off_t)a->bytes) != 0) {
    close(fd);
    shm_unlink(a->name);
    free(a);
    return NULL;
  }
  a->base = mmap(NULL, a->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (a->base == MAP_FAILED) {
    shm_unlink(a->name);
    free(a);
    return NULL;
  }
  a->slot_bytes = slot_bytes;
  a->nslots = nslots;
  return a;
}

void dp_arena_destroy(dp_arena *a) {
  if (!a) return;
  munmap(a->base, a->bytes);
  shm_unlink(a->name);
  free(a);
}
#endif
