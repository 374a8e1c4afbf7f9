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

/* 64 random bits for Fisher-Yates step i of the (seed, stream) plan. */
static uint64_t plan_bits(uint64_t seed, uint64_t stream, uint64_t i) {
  em_philox4 ctr = {{(uint32_t)i, (uint32_t)(i >> 32), (uint32_t)stream, (uint32_t)(stream >> 32) ^ PLAN_TAG}};
  em_philox4 r = em_philox4x32_10(ctr, (uint32_t)seed, (uint32_t)(seed >> 32));
  return em_philox_u64(r.x[0], r.x[1]);
}

em_status em_data_randperm(em_tensor **out, int64_t n, uint64_t seed, uint64_t stream, int64_t base) {
  if (!out || *out) return em_set_error(EM_ERR_ARGUMENT, "data_randperm: out must point to NULL (the result is new)");
  if (n < 0) return em_set_error(EM_ERR_ARGUMENT, "data_randperm: n is %lld, expected n >= 0", (long long)n);
  em_status st = em_empty(out, 1, &n, EM_INT64, (em_device){EM_CPU, 0});
  if (st) return st;
  int64_t *p = em_tensor_data(*out);
  for (int64_t i = 0; i < n; i++) p[i] = i;
  /* Fisher-Yates from the last position down: step i swaps i with a position in [0, i]. */
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)em_philox_below(plan_bits(seed, stream, (uint64_t)i), (uint64_t)i + 1);
    int64_t tmp = p[i];
    p[i] = p[j];
    p[j] = tmp;
  }
  if (base)
    for (int64_t i = 0; i < n; i++) p[i] += base;
  return EM_OK;
}
