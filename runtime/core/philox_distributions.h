/* philox_distributions.h - how the raw Philox bits of core/philox.h become uniform, normal,
 * integer and Bernoulli values and permutations, written so that every compiler and every
 * device computes the same bits. The CUDA backend draws through these functions; the
 * CPU's uniform, integer, Bernoulli and permutation values are theirs already (checked by
 * tests/c/test_philox_distributions.c), its normals once cpu/random.c calls em_philox_normal_*
 * instead of libm.
 *
 * Why this is its own code and not libm plus plain arithmetic:
 * - `low + span * u` is fused into one fma by gcc -march=native on FMA hardware and by
 *   nvcc by default, but not by a build without FMA: the value then depends on the build.
 *   Here every product that feeds a sum is an explicit fma(), and no other product feeds
 *   an addition, so there is nothing left for a compiler to contract (products by powers
 *   of two are exact, fused or not).
 * - libm's log, sin and cos differ between libraries (glibc's logf misrounds 0.7% of the
 *   2^24 float inputs that a uniform can take, sinf and cosf 1.3%; CUDA's are other
 *   approximations again), so Box-Muller cannot call them. em_det_log and em_det_sincos
 *   are built from IEEE +, *, /, fma and sqrt only, which are exact-rounded everywhere;
 *   both are within about 1 ulp (tests/c/test_philox_distributions.c).
 *
 * The layout of the stream (which bits feed which element) is core/philox.h's. */
#ifndef EMBER_PHILOX_DISTRIBUTIONS_H
#define EMBER_PHILOX_DISTRIBUTIONS_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "philox.h"

/* sqrtf is IEEE on the host; on the device __fsqrt_rn stays IEEE even under fast math. */
#ifdef __CUDA_ARCH__
#define EM_DET_SQRTF(x) __fsqrt_rn(x)
#else
#define EM_DET_SQRTF(x) sqrtf(x)
#endif

/* log(x) for positive normal x (the uniforms here lie in [2^-53, 1]). x = 2^e m with m in
 * [sqrt(1/2), sqrt(2)), f = m - 1 (exact), s = f / (2 + f); log(1 + f) = 2 atanh(s) =
 * f - hf + s (hf + R) with hf = f^2 / 2 and R = sum_k 2 s^2k / (2k + 1) (ten terms:
 * s^2 <= 0.0295, so the first term left out is below 2^-60 of the result); e ln2 is
 * added in two parts, the high one with 42 bits so that e * ln2_hi is exact. */
EM_PHILOX_FN double em_det_log(double x) {
  uint64_t bits;
  memcpy(&bits, &x, sizeof bits);
  int e = (int)(bits >> 52) - 1023;
  bits = (bits & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull;
  double m;
  memcpy(&m, &bits, sizeof m);
  if (m > 1.4142135623730951) {
    m *= 0.5;
    e += 1;
  }
  const double f = m - 1.0;
  const double s = f / (2.0 + f), z = s * s;
  double p = 0x1.8618618618618p-4; /* 2/21 */
  p = fma(p, z, 0x1.af286bca1af28p-4);
  p = fma(p, z, 0x1.e1e1e1e1e1e1ep-4);
  p = fma(p, z, 0x1.1111111111111p-3);
  p = fma(p, z, 0x1.3b13b13b13b14p-3);
  p = fma(p, z, 0x1.745d1745d1746p-3);
  p = fma(p, z, 0x1.c71c71c71c71cp-3);
  p = fma(p, z, 0x1.2492492492492p-2);
  p = fma(p, z, 0x1.999999999999ap-2);
  p = fma(p, z, 0x1.5555555555555p-1); /* 2/3 */
  const double de = (double)e;
  const double hf = 0.5 * (f * f);
  const double hr = fma(z, p, hf); /* hf + R */
  const double t = fma(s, hr, de * 0x1.ef35793c7673p-45); /* s (hf + R) + e ln2_lo */
  return fma(de, 0x1.62e42fefa38p-1, f - (hf - t)); /* + e ln2_hi */
}

/* sin and cos of x for 0 <= x <= 8 (Box-Muller's angles lie in [0, 2 pi)). n = x / (pi/2)
 * rounded; r = x - n pi/2 with pi/2 in three parts (n * part 1 and the first difference
 * are exact); Taylor series of sin and cos on |r| <= pi/4 to degree 21 and 20, the first
 * terms left out being below 2^-57 of the result. */
EM_PHILOX_FN void em_det_sincos(double x, double *sin_out, double *cos_out) {
  const double n = rint(x * 0x1.45f306dc9c883p-1); /* x * 2/pi */
  double r = fma(-n, 0x1.921fb544p+0, x);
  r = fma(-n, 0x1.0b4611a6p-34, r);
  r = fma(-n, 0x1.3198a2e037p-69, r);
  const double z = r * r;
  double ps = 0x1.71b8ef6dcf572p-66; /* 1/21! */
  ps = fma(ps, z, -0x1.2f49b46814157p-57);
  ps = fma(ps, z, 0x1.952c77030ad4ap-49);
  ps = fma(ps, z, -0x1.ae7f3e733b81fp-41);
  ps = fma(ps, z, 0x1.6124613a86d09p-33);
  ps = fma(ps, z, -0x1.ae64567f544e4p-26);
  ps = fma(ps, z, 0x1.71de3a556c734p-19);
  ps = fma(ps, z, -0x1.a01a01a01a01ap-13);
  ps = fma(ps, z, 0x1.1111111111111p-7);
  ps = fma(ps, z, -0x1.5555555555555p-3); /* -1/3! */
  double pc = 0x1.e542ba4020225p-62; /* 1/20! */
  pc = fma(pc, z, -0x1.6827863b97d97p-53);
  pc = fma(pc, z, 0x1.ae7f3e733b81fp-45);
  pc = fma(pc, z, -0x1.93974a8c07c9dp-37);
  pc = fma(pc, z, 0x1.1eed8eff8d898p-29);
  pc = fma(pc, z, -0x1.27e4fb7789f5cp-22);
  pc = fma(pc, z, 0x1.a01a01a01a01ap-16);
  pc = fma(pc, z, -0x1.6c16c16c16c17p-10);
  pc = fma(pc, z, 0x1.5555555555555p-5);
  pc = fma(pc, z, -0.5);
  const double s = fma(r * z, ps, r), c = fma(z, pc, 1.0);
  switch ((int)n & 3) {
    case 0: *sin_out = s, *cos_out = c; break;
    case 1: *sin_out = c, *cos_out = -s; break;
    case 2: *sin_out = -s, *cos_out = -c; break;
    default: *sin_out = -c, *cos_out = s; break;
  }
}

/* ---- the distributions; bits is an element's 64 bits (philox.h) ---- */

/* The largest float32 a uniform over [low, high) may return: rounding to float can reach
 * high, and such values step back to it. */
static inline float em_philox_uniform_top_f32(double low, double high) {
  float top = nextafterf((float)high, -INFINITY);
  return top < (float)low ? (float)low : top;
}

/* Uniform on [low, low + span): 24 bits (float32) or 53 bits (float64), scaled in double. */
EM_PHILOX_FN float em_philox_uniform_f32(uint64_t bits, double low, double span, float top) {
  float f = (float)fma(span, (double)em_philox_float01((uint32_t)(bits >> 32)), low);
  return span > 0 && f > top ? top : f;
}
EM_PHILOX_FN double em_philox_uniform_f64(uint64_t bits, double low, double span, double top) {
  double d = fma(span, em_philox_double01(bits), low);
  return span > 0 && d > top ? top : d;
}

/* Box-Muller: the bits of elements 2j and 2j+1 (b1 = 0 when 2j+1 is past the end) give
 * the normals of both. float32 keeps the float radius and angle of the float path. */
EM_PHILOX_FN void em_philox_normal_f32(uint64_t b0, uint64_t b1, double mean, double std, float *v0, float *v1) {
  const float lg = (float)em_det_log((double)em_philox_float_open0((uint32_t)(b0 >> 32)));
  const float radius = EM_DET_SQRTF(-2.0f * lg);
  const float theta = 6.2831853071795864f * em_philox_float01((uint32_t)(b1 >> 32));
  double s, c;
  em_det_sincos((double)theta, &s, &c);
  const float z0 = radius * (float)c, z1 = radius * (float)s;
  *v0 = (float)fma(std, (double)z0, mean);
  *v1 = (float)fma(std, (double)z1, mean);
}
EM_PHILOX_FN void em_philox_normal_f64(uint64_t b0, uint64_t b1, double mean, double std, double *v0, double *v1) {
  const double radius = sqrt(-2.0 * em_det_log(em_philox_double_open0(b0)));
  const double theta = 6.283185307179586 * em_philox_double01(b1);
  double s, c;
  em_det_sincos(theta, &s, &c);
  const double z0 = radius * c, z1 = radius * s;
  *v0 = fma(std, z0, mean);
  *v1 = fma(std, z1, mean);
}

/* An integer in [low, low + range), range = high - low computed in uint64. */
EM_PHILOX_FN int64_t em_philox_int(uint64_t bits, int64_t low, uint64_t range) {
  return (int64_t)((uint64_t)low + em_philox_below(bits, range));
}

EM_PHILOX_FN int em_philox_bernoulli(uint64_t bits, double p) { return em_philox_double01(bits) < p; }

/* A random permutation of 0..n-1 (randperm): Fisher-Yates from the last position down,
 * step i drawing element i's 64 bits, so that it depends on (seed, offset, n) alone.
 * Serial by nature; the CUDA backend runs it on the host too. */
static inline void em_philox_shuffle(int64_t *perm, int64_t n, uint64_t seed, uint64_t offset) {
  for (int64_t i = 0; i < n; i++) perm[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    em_philox4 r = em_philox_block(seed, offset + (uint64_t)i / 2);
    uint64_t bits = i & 1 ? em_philox_u64(r.x[2], r.x[3]) : em_philox_u64(r.x[0], r.x[1]);
    int64_t j = (int64_t)em_philox_below(bits, (uint64_t)i + 1);
    int64_t tmp = perm[i];
    perm[i] = perm[j];
    perm[j] = tmp;
  }
}

#endif
