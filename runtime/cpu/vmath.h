/* vmath.h - vectorisable float math for the CPU kernels.
 *
 * libm's expf is an opaque call, so a loop that calls it runs one element at a time. The
 * functions here are branch-free static inlines on plain arithmetic and bit casts, so
 * GCC and Clang turn a loop that calls them into SIMD code (checked: softmax.c). */
#ifndef EMBER_CPU_VMATH_H
#define EMBER_CPU_VMATH_H

#include <stdint.h>

typedef union {
  float f;
  uint32_t u;
  int32_t i;
} em_vbits;

/* exp(x) in float, within 2 ulp of libm for results in the normal range (tested in
 * tests/c/test_reduce.c); subnormal results are right to within float rounding, x below
 * -104 gives 0, x above 88.73 gives inf, NaN stays NaN.
 * Cody-Waite reduction x = n*ln2 + r with |r| <= ln2/2 (ln2 split in two so n*C1 is
 * exact without FMA), Cephes' degree-6 minimax polynomial for e^r, and 2^n applied in two
 * halves so that n down to -150 still gives normal scale factors. n is rounded with the
 * 1.5*2^23 trick, which reads it from the float's bits instead of converting a
 * possibly-NaN float to int (undefined in C). */
static inline float em_vexpf(float x) {
  /* Clamp to [-104, 89] with a bit-select rather than `x < lo ? lo : x`: GCC turns that
   * ternary into a branch and, the clamped path being constant, duplicates the code
   * around it, which keeps the caller's loop scalar. Comparisons are false for NaN, so
   * NaN passes through. */
  em_vbits xb = {.f = x};
  uint32_t below = 0u - (uint32_t)(x < -104.0f), above = 0u - (uint32_t)(x > 89.0f);
  xb.u = (xb.u & ~(below | above)) | (0xC2D00000u & below) | (0x42B20000u & above); /* -104.0f, 89.0f */
  x = xb.f;
  em_vbits t = {.f = x * 1.44269504088896341f + 12582912.0f};
  float n = t.f - 12582912.0f;
  int32_t ni = t.i - 0x4B400000;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t n1 = ni / 2, n2 = ni - n1; /* each in [-75, 65]: a normal power of two */
  em_vbits s1 = {.u = (uint32_t)(n1 + 127) << 23}, s2 = {.u = (uint32_t)(n2 + 127) << 23};
  return p * s1.f * s2.f;
}

/* exp(x) for x <= 0 (and NaN), the case of softmax's exp(x - max): about twice as fast
 * as em_vexpf, which it matches for results of at least FLT_MIN (x >= -87.33); below
 * that it gives 0 instead of a subnormal (off by less than 1.2e-38), and -inf gives 0.
 * One clamp (x below ln(FLT_MIN) is computed as 0 and masked to 0 at the end) and a
 * single power-of-two scale. Positive x up to 88 still come out right; beyond, garbage. */
static inline float em_vexpf_nonpos(float x) {
  em_vbits xb = {.f = x};
  uint32_t below = 0u - (uint32_t)(x < -87.33654f); /* false for NaN: it passes through */
  xb.u &= ~below;
  x = xb.f;
  em_vbits t = {.f = x * 1.44269504088896341f + 12582912.0f};
  float n = t.f - 12582912.0f;
  int32_t ni = t.i - 0x4B400000;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  em_vbits scale = {.u = (uint32_t)(ni + 127) << 23}, res = {.f = p * scale.f};
  res.u &= ~below;
  return res.f;
}

#endif
