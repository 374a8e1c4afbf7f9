/* philox.h - the Philox-4x32-10 counter-based generator (Salmon, Moraes, Dror and Shaw,
 * "Parallel random numbers: as easy as 1, 2, 3", SC 2011), and how ember lays its streams
 * over it. Header-only so that the CPU backend and a future CUDA backend share one copy.
 *
 * A call maps a 128-bit counter and a 64-bit key to 128 random bits; nothing is carried
 * from one call to the next, so any element can be generated on its own, by any thread.
 *
 * ember's streams: key = the seed (low word, high word); counter = (block, 0, 0), where
 * block is a 64-bit number in words 0 and 1 and words 2 and 3 stay free for sub-streams
 * (data workers, ranks). Element i of a fill starting at `offset` draws 64 bits from block
 * offset + i / 2: words 0 and 1 when i is even, words 2 and 3 when odd. A normal pair
 * (elements 2j and 2j+1) shares block offset + j for its Box-Muller transform. A fill of n
 * elements therefore uses EM_PHILOX_BLOCKS(n) blocks whatever the thread count. */
#ifndef EMBER_PHILOX_H
#define EMBER_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define EM_PHILOX_FN static inline __host__ __device__
#else
#define EM_PHILOX_FN static inline
#endif

#define EM_PHILOX_M0 0xD2511F53u
#define EM_PHILOX_M1 0xCD9E8D57u
#define EM_PHILOX_W0 0x9E3779B9u /* golden ratio */
#define EM_PHILOX_W1 0xBB67AE85u /* sqrt(3) - 1 */

/* Blocks (counters) consumed by a fill of n elements. */
#define EM_PHILOX_BLOCKS(n) (((uint64_t)(n) + 1) / 2)

typedef struct em_philox4 {
  uint32_t x[4];
} em_philox4;

EM_PHILOX_FN em_philox4 em_philox4x32_10(em_philox4 ctr, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; round++) {
    if (round) { /* the key schedule: a Weyl sequence */
      k0 += EM_PHILOX_W0;
      k1 += EM_PHILOX_W1;
    }
    uint64_t p0 = (uint64_t)EM_PHILOX_M0 * ctr.x[0];
    uint64_t p1 = (uint64_t)EM_PHILOX_M1 * ctr.x[2];
    em_philox4 next = {
        {(uint32_t)(p1 >> 32) ^ ctr.x[1] ^ k0, (uint32_t)p1, (uint32_t)(p0 >> 32) ^ ctr.x[3] ^ k1, (uint32_t)p0}};
    ctr = next;
  }
  return ctr;
}

/* The 128 bits of block `block` in the stream keyed by seed. */
EM_PHILOX_FN em_philox4 em_philox_block(uint64_t seed, uint64_t block) {
  em_philox4 ctr = {{(uint32_t)block, (uint32_t)(block >> 32), 0, 0}};
  return em_philox4x32_10(ctr, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* 64 bits as two words: (hi << 32) | lo. */
EM_PHILOX_FN uint64_t em_philox_u64(uint32_t hi, uint32_t lo) { return ((uint64_t)hi << 32) | lo; }

/* Uniforms from raw bits. [0, 1) keeps the top 24 (float) or 53 (double) bits so that every
 * value is exactly representable; (0, 1] adds one ulp so that log() never sees 0. */
EM_PHILOX_FN float em_philox_float01(uint32_t w) { return (float)(w >> 8) * 0x1p-24f; }
EM_PHILOX_FN double em_philox_double01(uint64_t w) { return (double)(w >> 11) * 0x1p-53; }
EM_PHILOX_FN float em_philox_float_open0(uint32_t w) { return (float)((w >> 8) + 1) * 0x1p-24f; }
EM_PHILOX_FN double em_philox_double_open0(uint64_t w) { return (double)((w >> 11) + 1) * 0x1p-53; }

/* An integer in [0, range) by 64-bit multiply-shift (Lemire): the bias is below
 * range / 2^64, far under anything a test could see. */
EM_PHILOX_FN uint64_t em_philox_below(uint64_t w, uint64_t range) {
#ifdef __CUDA_ARCH__
  return __umul64hi(w, range);
#else
  return (uint64_t)(((unsigned __int128)w * range) >> 64);
#endif
}

#endif
