/* test_util.h - what every C unit test shares: cmocka (with the headers it needs before
 * it), the CPU device, and checks of errors and tensor contents. Include it first among the
 * project headers. */
#ifndef EMBER_TEST_UTIL_H
#define EMBER_TEST_UTIL_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "ember/core.h"
#include "ember/tensor.h"

static const em_device CPU = {EM_CPU, 0};

/* A call failed with `want` and its message names `fragment`. */
static inline void expect_error(em_status got, em_status want, const char *fragment) {
  assert_int_equal(got, want);
  if (!strstr(em_last_error(), fragment)) fail_msg("error '%s' lacks '%s'", em_last_error(), fragment);
}

/* The i-th element in row-major order, whatever t's strides. */
static inline double tensor_flat_get(const em_tensor *t, int64_t i) {
  int64_t idx[EM_MAX_DIMS];
  for (int d = em_tensor_ndim(t) - 1; d >= 0; d--) idx[d] = i % em_tensor_size(t, d), i /= em_tensor_size(t, d);
  double v;
  assert_int_equal(em_tensor_get(t, idx, &v), EM_OK);
  return v;
}

/* A 1-d float64 CPU tensor holding v[0..n). */
static inline em_tensor *tensor_from_doubles(int64_t n, const double *v) {
  em_tensor *t = NULL;
  assert_int_equal(em_empty(&t, 1, &n, EM_FLOAT64, CPU), EM_OK);
  if (n) memcpy(em_tensor_data(t), v, (size_t)n * sizeof *v);
  return t;
}

static inline void check_shape(const em_tensor *t, int nd, const int64_t *sizes) {
  assert_int_equal(em_tensor_ndim(t), nd);
  for (int d = 0; d < nd; d++) assert_int_equal(em_tensor_size(t, d), sizes[d]);
}

/* A new CPU tensor of uniform values in [lo, hi) (seeded by the test's em_manual_seed). */
static inline em_tensor *uniform_tensor(em_dtype dtype, int ndim, const int64_t *sizes, double lo, double hi) {
  em_tensor *t = NULL;
  assert_int_equal(em_empty(&t, ndim, sizes, dtype, CPU), EM_OK);
  assert_int_equal(em_uniform_(t, lo, hi), EM_OK);
  return t;
}

static inline em_tensor *clone_tensor(const em_tensor *t) {
  em_tensor *c = NULL;
  assert_int_equal(em_clone(&c, t), EM_OK);
  return c;
}

/* max |a - b| over max |b| for float32 tensors of one size: the error relative to the size
 * of the result */
static inline double rel_diff(const em_tensor *a, const em_tensor *b) {
  const float *pa = (const float *)em_tensor_data(a), *pb = (const float *)em_tensor_data(b);
  double diff = 0, size = 1e-30;
  for (int64_t i = 0; i < em_tensor_numel(b); i++) {
    diff = fmax(diff, fabs((double)pa[i] - pb[i]));
    size = fmax(size, fabs((double)pb[i]));
  }
  return diff / size;
}

#endif
