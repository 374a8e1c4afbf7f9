/* core_impl.h - runtime-internal helpers of the core subsystem. */
#ifndef EMBER_CORE_IMPL_H
#define EMBER_CORE_IMPL_H

#include <stdint.h>
#include <string.h>
#include "ember/core.h"

/* Writes a file through a temporary one, fsync'ed and renamed over path, then fsyncs the
 * folder (file_replace.c says why). write_contents writes into fd and returns its status
 * with the error set; `what` names the caller in messages ("graph save"). Every writer
 * of a file another run may read (checkpoints, graph caches, tensors) goes through it. */
typedef em_status (*core_file_writer)(int fd, void *ctx);
em_status core_replace_file(const char *what, const char *path, core_file_writer write_contents, void *ctx);
/* write(2) until done or a real error (EINTR retried); EM_ERR_IO with errno set. */
em_status core_write_all(int fd, const void *data, size_t n);

/* Adds delta bytes to the allocation counters (storages call it). */
void core_memory_count(int64_t delta);

/* Element count below which a loop stays on one thread: thread start-up costs more. It
 * depends on how OpenMP's idle threads wait (runtime.c): spinning, a parallel region
 * starts in a microsecond and 8192 elements pay for it (a Fashion-MNIST MLP step, whose
 * ReLUs and smaller weights are 16-32 K elements, ran 3.5% faster than with 32768);
 * sleeping (OMP_WAIT_POLICY=passive, what ember picks on a busy machine), waking them
 * costs tens of microseconds, and 32768 it stays. EMBER_PARALLEL_GRAIN overrides. */
extern int64_t core_parallel_grain;
#define EM_PARALLEL_GRAIN core_parallel_grain

/* float16 / bfloat16 conversion (storage types; math runs in float32). */
static inline float em_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else { /* subnormal: normalise */
      exp = 127 - 15 + 1;
      while (!(man & 0x400)) {
        man <<= 1;
        exp--;
      }
      man &= 0x3ff;
      bits = sign | (exp << 23) | (man << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static inline uint16_t em_float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
  uint32_t man = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0)); /* inf/nan */
  if (exp >= 0x1f) return (uint16_t)(sign | 0x7c00); /* overflow */
  if (exp <= 0) { /* subnormal */
    if (exp < -10) return (uint16_t)sign;
    man |= 0x800000;
    uint32_t shift = (uint32_t)(14 - exp);
    uint32_t half_man = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_man & 1))) half_man++;
    return (uint16_t)(sign | half_man);
  }
  uint32_t h = sign | ((uint32_t)exp << 10) | (man >> 13);
  uint32_t rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; /* round to nearest even */
  return (uint16_t)h;
}

static inline float em_bf16_to_float(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static inline uint16_t em_float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
  x += 0x7fff + ((x >> 16) & 1); /* nearest even */
  return (uint16_t)(x >> 16);
}

#endif
