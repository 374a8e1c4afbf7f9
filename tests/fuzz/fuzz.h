/* fuzz.h - what every harness in tests/fuzz shares.
 *
 * Each harness defines LLVMFuzzerTestOneInput (and, when it needs setup, calls fz_once from
 * it). Built with clang's -fsanitize=fuzzer it is a libFuzzer binary (scripts/fuzz.sh);
 * linked with replay.c instead it replays files and folders through the same entry point,
 * which is how the seed and regression corpora run as ordinary tests in every build.
 *
 * Parsers that take a path read the input from a memfd reopened through /proc/self/fd:
 * a regular file (mappable, with a size) that never touches the disk. Every harness
 * ignores the status it gets: a clean error is a pass, a crash, a leak, a sanitizer report
 * or a timeout is a finding. */
#ifndef EMBER_FUZZ_H
#define EMBER_FUZZ_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "ember/core.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_FILES 4

/* The input as file `slot` (0..FZ_FILES-1); returns its path (valid until the next call
 * with that slot). */
static inline const char *fz_file(int slot, const void *data, size_t size) {
  static int fd[FZ_FILES] = {-1, -1, -1, -1};
  static char path[FZ_FILES][64];
  if (fd[slot] < 0) {
    fd[slot] = memfd_create("ember-fuzz", MFD_CLOEXEC);
    if (fd[slot] < 0) abort();
    snprintf(path[slot], sizeof path[slot], "/proc/self/fd/%d", fd[slot]);
  }
  if (ftruncate(fd[slot], 0) != 0 || (size && pwrite(fd[slot], data, size, 0) != (ssize_t)size)) abort();
  return path[slot];
}

/* Splits the input in two: a 2-byte little-endian length, that many bytes (or what is
 * left), then the rest. */
static inline void fz_split(const uint8_t *data, size_t size, const uint8_t **a, size_t *na, const uint8_t **b,
                            size_t *nb) {
  size_t len = size >= 2 ? (size_t)data[0] | (size_t)data[1] << 8 : 0;
  size_t body = size >= 2 ? size - 2 : 0;
  if (len > body) len = body;
  *a = data + (size >= 2 ? 2 : size);
  *na = len;
  *b = *a + len;
  *nb = body - len;
}

/* FUZZ_VERBOSE=1: each refusal's message on stderr (to see which check an input meets). */
static inline int fz_failed(em_status st) {
  static int verbose = -1;
  if (verbose < 0) verbose = getenv("FUZZ_VERBOSE") != NULL;
  if (st != EM_OK && verbose) fprintf(stderr, "refused: %s\n", em_last_error());
  return st != EM_OK;
}

/* One thread: the harness is single-process, and libFuzzer's own -jobs give parallelism. */
static inline void fz_once(void) {
  static int done;
  if (done) return;
  done = 1;
  em_set_num_threads(1);
}

#endif
