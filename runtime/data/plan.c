/* plan.c - epoch plans: permutations keyed by (seed, stream).
 *
 * The global generator (runtime/tensor/random.c) keys Philox by its seed and leaves counter
 * words 2 and 3 at zero. A plan uses the same key but puts the stream (the epoch) in word 2
 * and a tag in word 3, so its numbers never coincide with the generator's and a loader's
 * order is a function of (seed, epoch) alone: model initialisation, dropout or another
 * loader drawing numbers in between change nothing, which is what resume and several
 * workers or ranks need. */
#include <stdlib.h>
#include "core/philox.h"
#include "ember/data.h"

#define PLAN_TAG 0x64617461u /* "data" */

/* 64 random bits for each Fisher-Yates step i0 .. i0 + n - 1 of the (seed, stream) plan:
 * the bits Philox-4x32-10 gives counter (i, stream, tag), words 0 and 1. One block at a
 * time (em_philox4x32_10) took 500 us of the 1-1.5 ms between the last batch of an epoch
 * and the first of the next (60,000 samples); the same rounds over PLAN_LANES counters
 * at once, laid out so that the compiler keeps them in vector registers, give the same
 * bits in a fraction of that. */
#define PLAN_LANES 256
static void plan_bits(uint64_t seed, uint64_t stream, uint64_t i0, int n, uint64_t *out) {
  uint32_t x0[PLAN_LANES], x1[PLAN_LANES], x2[PLAN_LANES], x3[PLAN_LANES];
  for (int l = 0; l < n; l++) {
    uint64_t i = i0 + (uint64_t)l;
    x0[l] = (uint32_t)i, x1[l] = (uint32_t)(i >> 32);
    x2[l] = (uint32_t)stream, x3[l] = (uint32_t)(stream >> 32) ^ PLAN_TAG;
  }
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int round = 0; round < 10; round++) {
    if (round) k0 += EM_PHILOX_W0, k1 += EM_PHILOX_W1;
    for (int l = 0; l < n; l++) {
      uint64_t p0 = (uint64_t)EM_PHILOX_M0 * x0[l], p1 = (uint64_t)EM_PHILOX_M1 * x2[l];
      uint32_t n0 = (uint32_t)(p1 >> 32) ^ x1[l] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ x3[l] ^ k1;
      x0[l] = n0, x1[l] = (uint32_t)p1, x2[l] = n2, x3[l] = (uint32_t)p0;
    }
  }
  for (int l = 0; l < n; l++) out[l] = em_philox_u64(x0[l], x1[l]);
}

em_status em_data_randperm(em_tensor **out, int64_t n, uint64_t seed, uint64_t stream, int64_t base) {
  if (!out || *out) return em_set_error(EM_ERR_ARGUMENT, "data_randperm: out must point to NULL (the result is new)");
  if (n < 0) return em_set_error(EM_ERR_ARGUMENT, "data_randperm: n is %lld, expected n >= 0", (long long)n);
  em_status st = em_empty(out, 1, &n, EM_INT64, (em_device){EM_CPU, 0});
  if (st) return st;
  int64_t *restrict p = em_tensor_data(*out);
  const int64_t count = n; /* n's address went to em_empty: a copy lets the loops keep it in a register */
  for (int64_t i = 0; i < count; i++) p[i] = i + base; /* the swaps move values, whatever they are */
  /* Fisher-Yates from the last position down: step i swaps i with a position in [0, i];
   * the bits of PLAN_LANES steps are made at once, then used in order. */
  uint64_t bits[PLAN_LANES];
  for (int64_t hi = count - 1; hi > 0; hi -= PLAN_LANES) {
    int64_t lo = hi - PLAN_LANES + 1 > 1 ? hi - PLAN_LANES + 1 : 1;
    plan_bits(seed, stream, (uint64_t)lo, (int)(hi - lo + 1), bits);
    for (int64_t i = hi; i >= lo; i--) {
      int64_t j = (int64_t)em_philox_below(bits[i - lo], (uint64_t)i + 1);
      int64_t tmp = p[i];
      p[i] = p[j];
      p[j] = tmp;
    }
  }
  return EM_OK;
}
