/* checksum.c - XXH64 (Yann Collet's xxHash, 64-bit variant, written from its public
 * specification) and a block-parallel checksum over large arrays: the hash of each fixed
 * 1 MiB block, then the hash of those hashes. The value depends on the bytes only, never
 * on the thread count, and runs at memory speed on all cores. */
#include <stdlib.h>
#include <string.h>
#include "graph_impl.h"

#define P1 0x9E3779B185EBCA87ULL
#define P2 0xC2B2AE3D27D4EB4FULL
#define P3 0x165667B19E3779F9ULL
#define P4 0x85EBCA77C2B2AE63ULL
#define P5 0x27D4EB2F165667C5ULL

static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t read64(const unsigned char *p) {
  uint64_t v;
  memcpy(&v, p, 8); /* little-endian hosts only; the file format checks the byte order */
  return v;
}
static inline uint32_t read32(const unsigned char *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
static inline uint64_t round64(uint64_t acc, uint64_t lane) { return rotl(acc + lane * P2, 31) * P1; }
static inline uint64_t merge64(uint64_t acc, uint64_t v) { return (acc ^ round64(0, v)) * P1 + P4; }

uint64_t gr_xxh64(const void *data, size_t len, uint64_t seed) {
  const unsigned char *p = data, *end = p + len;
  uint64_t h;
  if (len >= 32) {
    uint64_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
    const unsigned char *limit = end - 32;
    do {
      v1 = round64(v1, read64(p));
      v2 = round64(v2, read64(p + 8));
      v3 = round64(v3, read64(p + 16));
      v4 = round64(v4, read64(p + 24));
      p += 32;
    } while (p <= limit);
    h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
    h = merge64(h, v1);
    h = merge64(h, v2);
    h = merge64(h, v3);
    h = merge64(h, v4);
  } else {
    h = seed + P5;
  }
  h += (uint64_t)len;
  for (; p + 8 <= end; p += 8) h = rotl(h ^ round64(0, read64(p)), 27) * P1 + P4;
  if (p + 4 <= end) {
    h = rotl(h ^ ((uint64_t)read32(p) * P1), 23) * P2 + P3;
    p += 4;
  }
  for (; p < end; p++) h = rotl(h ^ (*p * P5), 11) * P1;
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}

#define BLOCK ((size_t)1 << 20)

em_status gr_checksum(const void *data, size_t bytes, uint64_t seed, uint64_t *out) {
  size_t blocks = (bytes + BLOCK - 1) / BLOCK;
  if (blocks <= 1) {
    *out = gr_xxh64(data, bytes, seed);
    return EM_OK;
  }
  uint64_t *h = malloc(blocks * sizeof *h);
  if (!h) return gr_oom("graph checksum", blocks * sizeof *h);
#pragma omp parallel for schedule(dynamic, 16) num_threads(gr_threads())
  for (size_t b = 0; b < blocks; b++) {
    size_t len = b + 1 < blocks ? BLOCK : bytes - b * BLOCK;
    h[b] = gr_xxh64((const char *)data + b * BLOCK, len, seed);
  }
  *out = gr_xxh64(h, blocks * sizeof *h, seed);
  free(h);
  return EM_OK;
}
