/* nn_pool_avx512.h - the backward of the usual MaxPool2d(2) (2x2 windows, stride 2, no
 * padding, inputs exactly tiled) of float32 planes with AVX-512, included by nn_pool.c.
 *
 * Why: the portable loop runs over input columns and reads its output's gradient and index
 * at w / 2, which the compiler vectorises poorly on rows as short as the Fashion-MNIST CNN's
 * (14 and 28): 5-8 GB/s, against 29 GB/s for a ReLU over the same tensor. Here each output
 * row's 16 gradients are spread to four vectors (one per window position) by masked moves,
 * and interleaved into the two input rows by one permute per 16 inputs: 0.53 ms instead of
 * 1.61 ms for [128, 64, 14, 14], 0.92 instead of 1.52 for [128, 32, 28, 28] (one thread).
 * (The forward stays portable: its gathers measured as fast as plain loads and permutes.) */
#ifndef EMBER_NN_POOL_AVX512_H
#define EMBER_NN_POOL_AVX512_H
#if defined(__AVX512F__)
#include <immintrin.h>
#define POOL_AVX512 1

/* the first n of 16 lanes; the first and the last 16 of 2n input columns */
static inline __mmask16 lanes16(int64_t n) { return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1); }
static inline __mmask16 lanes32_lo(int64_t n) { return lanes16(2 * n); }
static inline __mmask16 lanes32_hi(int64_t n) { return lanes16(2 * n - 16 > 0 ? 2 * n - 16 : 0); }

/* The backward of one plane whose inputs are exactly tiled by the windows (H = 2 OH, W = 2 OW):
 * every input gets its output's gradient when it was the maximum, else 0, in one pass with
 * no zeroing first. Returns 0 (gx not to be trusted) when an index lies outside its window. */
static int max2x2_backward_plane_avx512(float *restrict gx, const float *restrict gy, const int32_t *restrict idx,
                                        int64_t OH, int64_t OW) {
  const int64_t W = 2 * OW;
  const __m512i lo_mix = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi_mix = _mm512_add_epi32(lo_mix, _mm512_set1_epi32(8));
  const __m512i lane2 = _mm512_slli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 1);
  const __m512i one = _mm512_set1_epi32(1), w_row = _mm512_set1_epi32((int32_t)W), w_one = _mm512_add_epi32(w_row, one);
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t oh = 0; oh < OH; oh++) {
    float *r0 = gx + 2 * oh * W, *r1 = r0 + W;
    for (int64_t ow = 0; ow < OW; ow += 16) {
      int64_t n = OW - ow < 16 ? OW - ow : 16;
      __mmask16 out = lanes16(n), lo = lanes32_lo(n), hi = lanes32_hi(n);
      __m512 g = _mm512_maskz_loadu_ps(out, gy + oh * OW + ow);
      __m512i at = _mm512_add_epi32(_mm512_set1_epi32((int32_t)(2 * oh * W + 2 * ow)), lane2);
      __m512i d = _mm512_sub_epi32(_mm512_maskz_loadu_epi32(out, idx + oh * OW + ow), at);
      __mmask16 p0 = _mm512_cmpeq_epi32_mask(d, _mm512_setzero_si512()), p1 = _mm512_cmpeq_epi32_mask(d, one),
                p2 = _mm512_cmpeq_epi32_mask(d, w_row), p3 = _mm512_cmpeq_epi32_mask(d, w_one);
      if ((__mmask16)((p0 | p1 | p2 | p3) & out) != out) return 0;
      __m512 v0 = _mm512_mask_mov_ps(zero, p0, g), v1 = _mm512_mask_mov_ps(zero, p1, g);
      __m512 v2 = _mm512_mask_mov_ps(zero, p2, g), v3 = _mm512_mask_mov_ps(zero, p3, g);
      _mm512_mask_storeu_ps(r0 + 2 * ow, lo, _mm512_permutex2var_ps(v0, lo_mix, v1));
      _mm512_mask_storeu_ps(r0 + 2 * ow + 16, hi, _mm512_permutex2var_ps(v0, hi_mix, v1));
      _mm512_mask_storeu_ps(r1 + 2 * ow, lo, _mm512_permutex2var_ps(v2, lo_mix, v3));
      _mm512_mask_storeu_ps(r1 + 2 * ow + 16, hi, _mm512_permutex2var_ps(v2, hi_mix, v3));
    }
  }
  return 1;
}
#endif
#endif
