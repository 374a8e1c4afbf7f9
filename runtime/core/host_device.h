/* host_device.h - arithmetic rules the CPU kernels (runtime/cpu) and the CUDA kernels
 * (runtime/plugins/cuda) must agree on, written once and compiled by gcc and nvcc alike:
 * integer pow and mod (their wrap-around and their errors), and how a reduction op maps to
 * the accumulator kind a reduction kernel runs. */
#ifndef EMBER_CORE_HOST_DEVICE_H
#define EMBER_CORE_HOST_DEVICE_H

#include <stdint.h>
#include "ember/tensor.h"

#ifdef __CUDACC__
#define CORE_HD static __host__ __device__ __forceinline__
#else
#define CORE_HD static inline
#endif

/* Error codes the integer ops report through *err (0 stays 0 on success). */
enum { CORE_INT_ERR_NEG_POW = 1, CORE_INT_ERR_ZERO_DIV = 2 };

/* x**y in uint64 arithmetic: wraps as PyTorch's integer pow does; a negative exponent is
 * an error (integers have no fractions to give). */
CORE_HD int64_t core_int_pow(int64_t x, int64_t y, int *err) {
  if (y < 0) {
    if (err) *err = CORE_INT_ERR_NEG_POW;
    return 0;
  }
  uint64_t base = (uint64_t)x, r = 1;
  for (uint64_t e = (uint64_t)y; e; e >>= 1) {
    if (e & 1) r *= base;
    base *= base;
  }
  return (int64_t)r;
}

/* C's % (the sign of the dividend); a zero divisor is an error. y == -1 gives 0 without
 * dividing: INT64_MIN % -1 overflows (it traps on x86). */
CORE_HD int64_t core_int_mod(int64_t x, int64_t y, int *err) {
  if (y == 0) {
    if (err) *err = CORE_INT_ERR_ZERO_DIV;
    return 0;
  }
  return y == -1 ? 0 : x % y;
}

/* What a reduction kernel accumulates: a value (sum, product, max/min value), a value with
 * its position (max/min with indices, argmax/argmin), a flag (any/all), |x|^p (norm), squared
 * deviations (var) or exp(x - max) (logsumexp). */
typedef enum core_reduce_kind {
  RK_SUM,
  RK_PROD,
  RK_MAXV,
  RK_MINV,
  RK_MAXI,
  RK_MINI,
  RK_ANY,
  RK_ALL,
  RK_NORM,
  RK_SQDEV,
  RK_SUMEXP,
  RK_COUNT
} core_reduce_kind;

CORE_HD int core_reduce_kind_of(em_redop op, int with_indices) {
  switch (op) {
    case EM_PROD: return RK_PROD;
    case EM_MAX: return with_indices ? RK_MAXI : RK_MAXV;
    case EM_MIN: return with_indices ? RK_MINI : RK_MINV;
    case EM_ARGMAX: return RK_MAXI;
    case EM_ARGMIN: return RK_MINI;
    case EM_ANY: return RK_ANY;
    case EM_ALL: return RK_ALL;
    case EM_NORM: return RK_NORM;
    case EM_LOGSUMEXP: return RK_SUMEXP;
    default: return RK_SUM;
  }
}

#endif
