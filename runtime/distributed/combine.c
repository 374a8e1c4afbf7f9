/* combine.c - the elementwise reductions of shared memory (symmetric.c) and of the backends
 * that reduce with callbacks of their own (Gloo, runtime/plugins/gloo), and the 1/size of 'avg'
 * (also MPI's). Contributions are combined one after the other in rank order (acc = r0; acc = acc
 * op r1; ...), at one place per element, so every rank ends with the same bits. Integers wrap (computed
 * unsigned); float16/bfloat16 are combined in float32 and rounded after every step, as the
 * MPI backend does; max/min propagate NaN. */
#include <string.h>
#include "core/core_impl.h"
#include "distributed/dist_impl.h"
#include "plugins/plugin_api.h"

/* Elements are read and written through memcpy: a contribution lies in a received
 * message at whatever offset its header left (UBSan flags a misaligned typed load), and
 * the compiler turns these into plain (unaligned) vector loads anyway. */
#define LOOP(T, EXPR)                             \
  do {                                            \
    char *restrict d_ = acc;                      \
    const char *restrict s_ = x;                  \
    for (int64_t i = 0; i < n; i++) {             \
      T y, v;                                     \
      memcpy(&y, d_ + i * sizeof(T), sizeof(T));  \
      memcpy(&v, s_ + i * sizeof(T), sizeof(T));  \
      T r_ = (EXPR);                              \
      memcpy(d_ + i * sizeof(T), &r_, sizeof(T)); \
    }                                             \
  } while (0)

#define FLOAT_OPS(T)                                           \
  switch (op) {                                                \
    case EM_DIST_MAX: LOOP(T, v > y || v != v ? v : y); break; \
    case EM_DIST_MIN: LOOP(T, v < y || v != v ? v : y); break; \
    case EM_DIST_PRODUCT: LOOP(T, y *v); break;                \
    default: LOOP(T, y + v); break;                            \
  }

#define INT_OPS(T, U)                                       \
  switch (op) {                                             \
    case EM_DIST_MAX: LOOP(T, v > y ? v : y); break;        \
    case EM_DIST_MIN: LOOP(T, v < y ? v : y); break;        \
    case EM_DIST_PRODUCT: LOOP(T, (T)((U)y * (U)v)); break; \
    default: LOOP(T, (T)((U)y + (U)v)); break;              \
  }

#define HALF_OPS(T, LOAD, STORE)                                                                          \
  switch (op) {                                                                                           \
    case EM_DIST_MAX: LOOP(T, STORE(LOAD(v) > LOAD(y) || LOAD(v) != LOAD(v) ? LOAD(v) : LOAD(y))); break; \
    case EM_DIST_MIN: LOOP(T, STORE(LOAD(v) < LOAD(y) || LOAD(v) != LOAD(v) ? LOAD(v) : LOAD(y))); break; \
    case EM_DIST_PRODUCT: LOOP(T, STORE(LOAD(y) * LOAD(v))); break;                                       \
    default: LOOP(T, STORE(LOAD(y) + LOAD(v))); break;                                                    \
  }

#ifdef __FLT16_MAX__ /* the compiler has a half type (gcc 12, clang 15 on x86) */
typedef _Float16 half_t;
#define F16_LOAD(h) ((float)(h))
#define F16_STORE(f) ((_Float16)(f))
#else /* clang 14 on x86 (the fuzz build): the same round-to-nearest-even in software */
typedef uint16_t half_t;
#define F16_LOAD(h) em_half_to_float(h)
#define F16_STORE(f) em_float_to_half(f)
#endif

void dist_combine(void *acc, const void *x, int64_t n, em_dtype dtype, em_dist_redop op) {
  switch (dtype) {
    case EM_FLOAT32: FLOAT_OPS(float) break;
    case EM_FLOAT64: FLOAT_OPS(double) break;
    case EM_INT32: INT_OPS(int32_t, uint32_t) break;
    case EM_INT64: INT_OPS(int64_t, uint64_t) break;
    case EM_UINT8: INT_OPS(uint8_t, unsigned) break;
    case EM_FLOAT16: HALF_OPS(half_t, F16_LOAD, F16_STORE) break;
    case EM_BFLOAT16: HALF_OPS(uint16_t, em_bf16_to_float, em_float_to_bf16) break;
    case EM_BOOL:
      if (op == EM_DIST_MIN || op == EM_DIST_PRODUCT) LOOP(uint8_t, (uint8_t)(y & v));
      else LOOP(uint8_t, (uint8_t)(y | v));
      break;
    default: break;
  }
}

void emp_dist_combine(void *acc, const void *x, int64_t n, em_dtype dtype, em_dist_redop op) {
  dist_combine(acc, x, n, dtype, op);
}

void emp_dist_scale(void *p, int64_t n, em_dtype dtype, double s) {
  if (dtype == EM_FLOAT32) {
    float *x = p, f = (float)s;
    for (int64_t i = 0; i < n; i++) x[i] *= f;
  } else if (dtype == EM_FLOAT64) {
    double *x = p;
    for (int64_t i = 0; i < n; i++) x[i] *= s;
  } else if (dtype == EM_FLOAT16) {
    half_t *x = p;
    for (int64_t i = 0; i < n; i++) x[i] = F16_STORE(F16_LOAD(x[i]) * (float)s);
  } else if (dtype == EM_BFLOAT16) {
    uint16_t *x = p;
    for (int64_t i = 0; i < n; i++) x[i] = em_float_to_bf16(em_bf16_to_float(x[i]) * (float)s);
  }
}
