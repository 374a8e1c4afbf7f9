/* test_reduce.c - reductions (sum, mean, prod, max/min, argmax/argmin, logsumexp, norm,
 * any/all, var/std), cumsum/cumprod, softmax/log_softmax, sort/topk: values against
 * numpy, every dims form, keepdim, strided inputs, every kernel path, ties and NaN,
 * empty tensors, thread-count independence, and each error with its message.
 *
 * The arrays below were generated with numpy from X (shape [2, 3, 4]):
 *   i = np.arange(24); X = (((i*7) % 11) - 5 + 0.25*(i % 3)).reshape(2, 3, 4)
 * e.g. SUM_D1 = X.sum(1), VAR1_D1 = X.var(1, ddof=1), SORTD_D1_I =
 * np.argsort(-X, 1, kind='stable'), LSE_D2 = log(sum(exp(X - max)) + max over dim 2. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "test_util.h"
#include "ember/tensor.h"
#include "cpu/vmath.h"

#define assert_ok(call)                                                  \
  do {                                                                   \
    em_status st_ = (call);                                              \
    if (st_ != EM_OK) fail_msg("%s failed: %s", #call, em_last_error()); \
  } while (0)

/* The call fails with code and a message that contains text. */
#define assert_error(call, code, text)                                                                      \
  do {                                                                                                      \
    em_status st_ = (call);                                                                                 \
    if (st_ != (code) || !strstr(em_last_error(), (text)))                                                  \
      fail_msg("%s: got status %d '%s', wanted %d with '%s'", #call, st_, em_last_error(), (code), (text)); \
  } while (0)

#define S(...) ((const int64_t[]){__VA_ARGS__})
#define D(...) ((const int[]){__VA_ARGS__})
#define V(...) ((const double[]){__VA_ARGS__})
#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const double X[] = {-5.0, 2.25,  -1.5, 5.0, 1.25,  -2.5, 4.0, 0.25,  -3.5, 3.0,  -0.75, -4.5,
                           2.0,  -1.75, 5.5,  1.0, -2.75, 4.5,  0.0, -3.75, 3.5,  -1.0, -4.75, 2.5};
static const double SUM_ALL[] = {3.0};
static const double SUM_D0[] = {-3.0, 0.5, 4.0, 6.0, -1.5, 2.0, 4.0, -3.5, 0.0, 2.0, -5.5, -2.0};
static const double SUM_D1[] = {-7.25, 2.75, 1.75, 0.75, 2.75, 1.75, 0.75, -0.25};
static const double SUM_D2[] = {0.75, 3.0, -5.75, 6.75, -2.0, 0.25};
static const double SUM_D02[] = {7.5, 1.0, -5.5};
static const double MEAN_D1[] = {
    -2.4166666666666665, 0.9166666666666666, 0.5833333333333334, 0.25, 0.9166666666666666, 0.5833333333333334, 0.25,
    -0.08333333333333333};
static const double MEAN_ALL[] = {0.125};
static const double PROD_D2[] = {84.375, -3.125, -35.4375, -19.25, 0.0, 41.5625};
static const double MAX_D1[] = {1.25, 3.0, 4.0, 5.0, 3.5, 4.5, 5.5, 2.5};
static const double MAX_D1_I[] = {1.0, 2.0, 1.0, 0.0, 2.0, 1.0, 0.0, 2.0};
static const double MIN_D2[] = {-5.0, -2.5, -4.5, -1.75, -3.75, -4.75};
static const double MIN_D2_I[] = {0.0, 1.0, 3.0, 1.0, 3.0, 2.0};
static const double ARGMAX_ALL[] = {14.0};
static const double ARGMIN_D0[] = {0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0};
static const double LSE_D2[] = {5.063422304958874, 4.0852130533756235, 3.025252718549675,
                                5.541157830296535, 4.512008043482327,  3.8215396529543093};
static const double LSE_D0[] = {2.000911466453774,  2.26814992791781,  5.500911466453775,   5.0181499279178094,
                                1.2681499279178097, 4.500911466453775, 4.0181499279178094,  0.2681499279178098,
                                3.500911466453774,  3.01814992791781,  -0.7318500720821902, 2.500911466453774};
static const double NORM2_ALL[] = {15.668439615992398};
static const double NORM1_D1[] = {9.75, 7.75, 6.25, 9.75, 8.25, 7.25, 10.25, 7.25};
static const double NORMINF_D0[] = {5.0, 2.25, 5.5, 5.0, 2.75, 4.5, 4.0, 3.75, 3.5, 3.0, 4.75, 4.5};
static const double NORMNINF_D2[] = {1.5, 0.25, 0.75, 1.0, 0.0, 1.0};
static const double NORM0_D2[] = {4.0, 4.0, 4.0, 4.0, 3.0, 4.0};
static const double NORM3_D2[] = {6.421264110248887, 4.337295029167833, 5.444869340325726,
                                  5.653884346957246, 5.480995010862864, 5.503269406019766};
static const double VAR1_D1[] = {10.645833333333332, 8.895833333333334,  8.895833333333334, 22.5625,
                                 10.645833333333332, 11.645833333333334, 26.3125,           10.645833333333332};
static const double VAR0_D02[] = {11.07421875, 8.203125, 10.04296875};
static const double STD1_ALL[] = {3.2645993162488063};
static const double CUMSUM_D2[] = {-5.0, -2.75, -4.25, 0.75, 1.25,  -1.25, 2.75, 3.0,  -3.5, -0.5, -1.25, -5.75,
                                   2.0,  0.25,  5.75,  6.75, -2.75, 1.75,  1.75, -2.0, 3.5,  2.5,  -2.25, 0.25};
static const double CUMSUM_D0[] = {-5.0, 2.25, -1.5, 5.0, 1.25, -2.5, 4.0, 0.25, -3.5, 3.0, -0.75, -4.5,
                                   -3.0, 0.5,  4.0,  6.0, -1.5, 2.0,  4.0, -3.5, 0.0,  2.0, -5.5,  -2.0};
static const double CUMPROD_D1[] = {-5.0, 2.25,  -1.5, 5.0, -6.25, -5.625, -6.0, 1.25,  21.875, -16.875, 4.5,  -5.625,
                                    2.0,  -1.75, 5.5,  1.0, -5.5,  -7.875, 0.0,  -3.75, -19.25, 7.875,   -0.0, -9.375};
static const double SOFTMAX_D2[] = {
    4.260996955489228e-05, 0.05999930471209829,   0.0014110483997563776, 0.9385470369185904,    0.058706016986305135,
    0.0013806331877024782, 0.9183166131036692,    0.021596736722323137,  0.0014659486278152157, 0.9750634642641539,
    0.022931294746044193,  0.0005392923619867042, 0.028979754012807054,  0.0006815384898428565, 0.9596776517858328,
    0.010661055711517323,  0.0007016975806995438, 0.9880637653565332,    0.010976396948908387,  0.0002581401138591012,
    0.7250318798014268,    0.008054376642829363,  0.0001894207829146368, 0.26672432277282926};
static const double SOFTMAX_D1[] = {
    0.0019102396945064905, 0.3199332786246573,    0.00403536704991221,   0.9913489467897164,    0.9895286599448979,
    0.002767965211995605,  0.9874217608383855,    0.008576848927559281,  0.008561100360595661,  0.677298756163347,
    0.00854287211170239,   7.420428272445498e-05, 0.18213805712684747,   0.0019189076361241517, 0.9958947932522224,
    0.18213805712684747,   0.0015758029551500583, 0.9940187648663229,    0.004069994396778259,  0.0015758029551500583,
    0.8162861399180024,    0.004062327497553017,  3.521235099933432e-05, 0.8162861399180024};
static const double LOGSOFTMAX_D0[] = {
    -7.000911466453774,     -0.01814992791780973, -7.000911466453774,     -0.01814992791780973,  -0.01814992791780973,
    -7.000911466453774,     -0.01814992791780973, -0.01814992791780973,   -7.000911466453774,    -0.01814992791780973,
    -0.01814992791780973,   -7.000911466453774,   -0.0009114664537742021, -4.0181499279178094,   -0.0009114664537742021,
    -4.0181499279178094,    -4.0181499279178094,  -0.0009114664537742021, -4.0181499279178094,   -4.0181499279178094,
    -0.0009114664537742021, -4.0181499279178094,  -4.0181499279178094,    -0.0009114664537742021};
static const double SORT_D2[] = {-5.0,  -1.5, 2.25, 5.0, -2.5,  0.25,  1.25, 4.0, -4.5,  -3.5, -0.75, 3.0,
                                 -1.75, 1.0,  2.0,  5.5, -3.75, -2.75, 0.0,  4.5, -4.75, -1.0, 2.5,   3.5};
static const double SORT_D2_I[] = {0.0, 2.0, 1.0, 3.0, 1.0, 3.0, 0.0, 2.0, 3.0, 0.0, 2.0, 1.0,
                                   1.0, 3.0, 0.0, 2.0, 3.0, 0.0, 2.0, 1.0, 2.0, 1.0, 3.0, 0.0};
static const double SORTD_D1[] = {1.25, 3.0, 4.0, 5.0, -3.5, 2.25, -0.75, 0.25, -5.0,  -2.5,  -1.5,  -4.5,
                                  3.5,  4.5, 5.5, 2.5, 2.0,  -1.0, 0.0,   1.0,  -2.75, -1.75, -4.75, -3.75};
static const double SORTD_D1_I[] = {1.0, 2.0, 1.0, 0.0, 2.0, 0.0, 2.0, 1.0, 0.0, 1.0, 0.0, 2.0,
                                    2.0, 1.0, 0.0, 2.0, 0.0, 2.0, 1.0, 0.0, 1.0, 0.0, 2.0, 1.0};

/* ---------------------------------------------------------------- helpers */

static em_tensor *make(int ndim, const int64_t *sizes, em_dtype dtype, const double *v) {
  em_tensor *t = NULL;
  assert_ok(em_empty(&t, ndim, sizes, dtype, CPU));
  int64_t n = em_tensor_numel(t), idx[EM_MAX_DIMS];
  for (int64_t f = 0; f < n; f++) {
    int64_t r = f;
    for (int d = ndim - 1; d >= 0; d--) idx[d] = r % sizes[d], r /= sizes[d];
    assert_ok(em_tensor_set(t, idx, v[f]));
  }
  return t;
}

static em_tensor *make_x(em_dtype dtype) { return make(3, S(2, 3, 4), dtype, X); }

/* t has dtype, shape (ndim, sizes) and values close to expected (relative tolerance
 * rtol; NaN matches NaN, infinities match exactly). */
static void check(const em_tensor *t, em_dtype dtype, int ndim, const int64_t *sizes, const double *expected,
                  double rtol) {
  assert_non_null(t);
  if (em_tensor_dtype(t) != dtype)
    fail_msg("dtype %s, expected %s", em_dtype_name(em_tensor_dtype(t)), em_dtype_name(dtype));
  assert_int_equal(em_tensor_ndim(t), ndim);
  for (int d = 0; d < ndim; d++) assert_int_equal(em_tensor_size(t, d), sizes[d]);
  int64_t n = em_tensor_numel(t), idx[EM_MAX_DIMS];
  for (int64_t f = 0; f < n; f++) {
    int64_t r = f;
    for (int d = ndim - 1; d >= 0; d--) idx[d] = r % sizes[d], r /= sizes[d];
    double v;
    assert_ok(em_tensor_get(t, idx, &v));
    double e = expected[f];
    int same = isnan(e) ? isnan(v) : isinf(e) ? v == e : fabs(v - e) <= rtol * fmax(1.0, fabs(e));
    if (!same) fail_msg("element %lld: got %.17g, expected %.17g", (long long)f, v, e);
  }
}

static double item(const em_tensor *t) {
  double v;
  assert_ok(em_tensor_item(t, &v));
  return v;
}

static void release(int n, ...) {
  va_list ap;
  va_start(ap, n);
  for (int i = 0; i < n; i++) {
    em_tensor **t = va_arg(ap, em_tensor **);
    em_tensor_release(*t);
    *t = NULL;
  }
  va_end(ap);
}

/* A deterministic pseudo-random float32 tensor in [-1, 1) (plus offset). */
static em_tensor *random_f32(int ndim, const int64_t *sizes, float offset) {
  em_tensor *t = NULL;
  assert_ok(em_empty(&t, ndim, sizes, EM_FLOAT32, CPU));
  float *p = em_tensor_data(t);
  uint64_t s = 88172645463325252ull;
  for (int64_t i = 0; i < em_tensor_numel(t); i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    p[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1) + offset;
  }
  return t;
}

static em_tensor *transposed_copy(const em_tensor *a, int d0, int d1) {
  em_tensor *t = NULL, *c = NULL;
  assert_ok(em_transpose(&t, a, d0, d1));
  assert_ok(em_clone(&c, t));
  em_tensor_release(t);
  return c;
}

/* a and b have one shape and dtype and agree within rtol. */
static void check_same(const em_tensor *a, const em_tensor *b, double rtol) {
  int64_t n = em_tensor_numel(a);
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  int64_t idx[EM_MAX_DIMS];
  int nd = em_tensor_ndim(a);
  for (int64_t f = 0; f < n; f++) {
    int64_t r = f;
    for (int d = nd - 1; d >= 0; d--) idx[d] = r % em_tensor_size(a, d), r /= em_tensor_size(a, d);
    assert_ok(em_tensor_get(a, idx, &v[f]));
  }
  check(b, em_tensor_dtype(a), nd, em_tensor_sizes(a), v, rtol);
  free(v);
}

/* ---------------------------------------------------------------- sum, mean, prod */

/* op over dims of x gives a result of dtype, shape (ndim, sizes) and values want. */
static void expect_reduce(em_redop op, const em_tensor *x, const int *dims, int nd, int keepdim, em_dtype dtype,
                          int ndim, const int64_t *sizes, const double *want, double rtol) {
  em_tensor *r = NULL;
  assert_ok(em_reduce(op, &r, NULL, x, dims, nd, keepdim, 0));
  check(r, dtype, ndim, sizes, want, rtol);
  em_tensor_release(r);
}

static void test_sum_dims(void **state) {
  (void)state;
  for (int k = 0; k < 2; k++) {
    em_dtype dt = k ? EM_FLOAT64 : EM_FLOAT32;
    em_tensor *x = make_x(dt);
    expect_reduce(EM_SUM, x, NULL, 0, 0, dt, 0, NULL, SUM_ALL, 1e-6);
    expect_reduce(EM_SUM, x, D(0), 1, 0, dt, 2, S(3, 4), SUM_D0, 1e-6);
    expect_reduce(EM_SUM, x, D(1), 1, 0, dt, 2, S(2, 4), SUM_D1, 1e-6);
    expect_reduce(EM_SUM, x, D(-1), 1, 0, dt, 2, S(2, 3), SUM_D2, 1e-6);
    expect_reduce(EM_SUM, x, D(2, 0), 2, 0, dt, 1, S(3), SUM_D02, 1e-6); /* order does not matter */
    expect_reduce(EM_SUM, x, D(0, -1), 2, 1, dt, 3, S(1, 3, 1), SUM_D02, 1e-6);
    expect_reduce(EM_SUM, x, NULL, 0, 1, dt, 3, S(1, 1, 1), SUM_ALL, 1e-6);
    expect_reduce(EM_SUM, x, D(1), 1, 1, dt, 3, S(2, 1, 4), SUM_D1, 1e-6);
    em_tensor_release(x);
  }
}

static void test_mean_prod(void **state) {
  (void)state;
  em_tensor *x = make_x(EM_FLOAT32);
  expect_reduce(EM_MEAN, x, D(1), 1, 0, EM_FLOAT32, 2, S(2, 4), MEAN_D1, 1e-6);
  expect_reduce(EM_MEAN, x, NULL, 0, 0, EM_FLOAT32, 0, NULL, MEAN_ALL, 1e-6);
  expect_reduce(EM_PROD, x, D(2), 1, 0, EM_FLOAT32, 2, S(2, 3), PROD_D2, 1e-6);
  em_tensor_release(x);
}

/* ---------------------------------------------------------------- max, min, arg */

/* max/min (values want_v, positions want_i) or argmax/argmin (want_v NULL) over dims;
 * want_i counts from 0 and base is added here. */
static void expect_extreme(em_redop op, const em_tensor *x, const int *dims, int nd, int keepdim, int base, int ndim,
                           const int64_t *sizes, const double *want_v, const double *want_i) {
  em_tensor *v = NULL, *i = NULL;
  if (want_v) {
    assert_ok(em_reduce(op, &v, &i, x, dims, nd, keepdim, base));
    check(v, em_tensor_dtype(x), ndim, sizes, want_v, 0);
  } else {
    assert_ok(em_reduce(op, &i, NULL, x, dims, nd, keepdim, base));
  }
  double shifted[64];
  int64_t n = em_tensor_numel(i);
  for (int64_t k = 0; k < n; k++) shifted[k] = want_i[k] + base;
  check(i, EM_INT64, ndim, sizes, shifted, 0);
  release(2, &v, &i);
}

static void test_max_min_indices(void **state) {
  (void)state;
  em_tensor *x = make_x(EM_FLOAT32), *v = NULL;
  for (int base = 0; base < 2; base++) {
    expect_extreme(EM_MAX, x, D(1), 1, 0, base, 2, S(2, 4), MAX_D1, MAX_D1_I);
    expect_extreme(EM_MIN, x, D(-1), 1, 1, base, 3, S(2, 3, 1), MIN_D2, MIN_D2_I);
    expect_extreme(EM_ARGMAX, x, NULL, 0, 0, base, 0, NULL, NULL, ARGMAX_ALL);
    expect_extreme(EM_ARGMIN, x, D(0), 1, 0, base, 2, S(3, 4), NULL, ARGMIN_D0);
  }
  /* values only; positions over several dims are flat over them: [1, 2], [1, 1], [1, 0] */
  assert_ok(em_reduce(EM_MAX, &v, NULL, x, D(1), 1, 0, 0));
  check(v, EM_FLOAT32, 2, S(2, 4), MAX_D1, 0);
  expect_extreme(EM_MAX, x, D(0, 2), 2, 0, 0, 1, S(3), V(5.5, 4.5, 3.5), V(6, 5, 4));
  release(2, &v, &x);
}

static void test_ties_and_nan(void **state) {
  (void)state;
  em_tensor *x = make(2, S(2, 4), EM_FLOAT32, V(1, 3, 3, 2, 3, -1, -1, 0)), *v = NULL, *i = NULL;
  expect_extreme(EM_MAX, x, D(1), 1, 0, 0, 1, S(2), V(3, 3), V(1, 0)); /* first occurrence */
  expect_extreme(EM_ARGMIN, x, D(1), 1, 0, 1, 1, S(2), NULL, V(0, 1));
  em_tensor_release(x);
  /* NaN propagates and wins, at its first position, for max and min alike */
  x = make(2, S(2, 4), EM_FLOAT64, V(1, NAN, 5, NAN, -INFINITY, -INFINITY, -INFINITY, -INFINITY));
  expect_extreme(EM_MAX, x, D(1), 1, 0, 0, 1, S(2), V(NAN, -INFINITY), V(1, 0));
  expect_extreme(EM_MIN, x, D(1), 1, 0, 0, 1, S(2), V(NAN, -INFINITY), V(1, 0));
  expect_reduce(EM_SUM, x, D(1), 1, 0, EM_FLOAT64, 1, S(2), V(NAN, -INFINITY), 0);
  assert_ok(em_reduce(EM_MAX, &v, NULL, x, NULL, 0, 0, 0));
  assert_true(isnan(item(v)));
  release(2, &v, &x);
  /* a NaN in a later block of a long reduction still wins over a larger block max */
  int64_t n = 100000;
  assert_ok(em_zeros(&x, 1, &n, EM_FLOAT32, CPU));
  float *p = em_tensor_data(x);
  p[10] = 7, p[90000] = NAN, p[95000] = NAN;
  assert_ok(em_reduce(EM_ARGMAX, &i, NULL, x, NULL, 0, 0, 0));
  assert_int_equal((int64_t)item(i), 90000);
  release(1, &i);
  p[90000] = 0, p[95000] = 0, p[70000] = 7; /* a tie across blocks: the first */
  assert_ok(em_reduce(EM_ARGMAX, &i, NULL, x, NULL, 0, 0, 0));
  assert_int_equal((int64_t)item(i), 10);
  release(2, &i, &x);
}

static void test_integer_and_bool(void **state) {
  (void)state;
  em_tensor *x = make(2, S(2, 3), EM_INT32, V(100, -7, 3, 2000000000, 2000000000, 5)), *r = NULL, *i = NULL;
  expect_reduce(EM_SUM, x, D(1), 1, 0, EM_INT64, 1, S(2), V(96, 4000000005.0), 0); /* no int32 overflow */
  expect_reduce(EM_PROD, x, D(0), 1, 0, EM_INT64, 1, S(3), V(200000000000.0, -14000000000.0, 15), 0);
  expect_reduce(EM_ARGMIN, x, NULL, 0, 0, EM_INT64, 0, NULL, V(1), 0);
  expect_reduce(EM_ANY, x, D(0), 1, 0, EM_BOOL, 1, S(3), V(1, 1, 1), 0);
  assert_ok(em_reduce(EM_MAX, &r, &i, x, D(1), 1, 0, 0)); /* keeps int32 */
  check(r, EM_INT32, 1, S(2), V(100, 2000000000), 0);
  check(i, EM_INT64, 1, S(2), V(0, 0), 0);
  release(3, &r, &i, &x);
  /* int64 values beyond 2^53 stay exact */
  x = make(1, S(2), EM_INT64, V(0, 1));
  ((int64_t *)em_tensor_data(x))[0] = 9007199254740993LL;
  assert_ok(em_reduce(EM_MAX, &r, NULL, x, NULL, 0, 0, 0));
  assert_true(((int64_t *)em_tensor_data(r))[0] == 9007199254740993LL);
  release(1, &r);
  assert_ok(em_reduce(EM_SUM, &r, NULL, x, NULL, 0, 0, 0));
  assert_true(((int64_t *)em_tensor_data(r))[0] == 9007199254740994LL);
  release(2, &r, &x);
  /* bool: sum counts, any/all, max stays bool */
  x = make(2, S(2, 3), EM_BOOL, V(1, 0, 1, 0, 0, 0));
  expect_reduce(EM_SUM, x, D(1), 1, 0, EM_INT64, 1, S(2), V(2, 0), 0);
  expect_reduce(EM_ANY, x, D(1), 1, 0, EM_BOOL, 1, S(2), V(1, 0), 0);
  expect_reduce(EM_ALL, x, D(0), 1, 1, EM_BOOL, 2, S(1, 3), V(0, 0, 0), 0);
  expect_reduce(EM_MAX, x, D(1), 1, 0, EM_BOOL, 1, S(2), V(1, 0), 0);
  em_tensor_release(x);
  /* uint8: sums widen */
  x = make(1, S(3), EM_UINT8, V(200, 200, 200));
  expect_reduce(EM_SUM, x, NULL, 0, 0, EM_INT64, 0, NULL, V(600), 0);
  expect_reduce(EM_ALL, x, NULL, 0, 0, EM_BOOL, 0, NULL, V(1), 0);
  em_tensor_release(x);
  /* any/all of floats: NaN is nonzero */
  x = make(2, S(2, 2), EM_FLOAT32, V(0, NAN, 0, 0));
  expect_reduce(EM_ANY, x, D(1), 1, 0, EM_BOOL, 1, S(2), V(1, 0), 0);
  expect_reduce(EM_ALL, x, D(0), 1, 0, EM_BOOL, 1, S(2), V(0, 0), 0);
  em_tensor_release(x);
}

/* ---------------------------------------------------------------- logsumexp, norm, var */

static void expect_norm(const em_tensor *x, double p, const int *dims, int nd, int keepdim, int ndim,
                        const int64_t *sizes, const double *want) {
  em_tensor *r = NULL;
  assert_ok(em_norm(&r, x, p, dims, nd, keepdim));
  check(r, em_tensor_dtype(x), ndim, sizes, want, 1e-6);
  em_tensor_release(r);
}

static void test_logsumexp_norm(void **state) {
  (void)state;
  em_tensor *x = make_x(EM_FLOAT32);
  expect_reduce(EM_LOGSUMEXP, x, D(2), 1, 0, EM_FLOAT32, 2, S(2, 3), LSE_D2, 1e-6);
  expect_reduce(EM_LOGSUMEXP, x, D(0), 1, 0, EM_FLOAT32, 2, S(3, 4), LSE_D0, 1e-6);
  expect_reduce(EM_NORM, x, NULL, 0, 0, EM_FLOAT32, 0, NULL, NORM2_ALL, 1e-6); /* the 2-norm */
  expect_norm(x, 1, D(1), 1, 0, 2, S(2, 4), NORM1_D1);
  expect_norm(x, INFINITY, D(0), 1, 1, 3, S(1, 3, 4), NORMINF_D0);
  expect_norm(x, -INFINITY, D(2), 1, 0, 2, S(2, 3), NORMNINF_D2);
  expect_norm(x, 0, D(2), 1, 0, 2, S(2, 3), NORM0_D2);
  expect_norm(x, 3, D(2), 1, 0, 2, S(2, 3), NORM3_D2);
  em_tensor_release(x);
  /* large values do not overflow; rows of -inf give -inf, +inf gives +inf */
  x = make(2, S(3, 3), EM_FLOAT32, V(1000, 1001, 1002, -INFINITY, -INFINITY, -INFINITY, 1, INFINITY, INFINITY));
  expect_reduce(EM_LOGSUMEXP, x, D(1), 1, 0, EM_FLOAT32, 1, S(3), V(1002.40760596, -INFINITY, INFINITY), 1e-6);
  em_tensor_release(x);
}

static void expect_var(const em_tensor *x, const int *dims, int nd, double correction, int keepdim, int take_sqrt,
                       int ndim, const int64_t *sizes, const double *want, double rtol) {
  em_tensor *r = NULL;
  assert_ok(em_var(&r, x, dims, nd, correction, keepdim, take_sqrt));
  check(r, em_tensor_dtype(x), ndim, sizes, want, rtol);
  em_tensor_release(r);
}

static void test_var_std(void **state) {
  (void)state;
  em_tensor *x = make_x(EM_FLOAT64);
  expect_var(x, D(1), 1, 1, 0, 0, 2, S(2, 4), VAR1_D1, 1e-12);
  expect_var(x, D(0, 2), 2, 0, 1, 0, 3, S(1, 3, 1), VAR0_D02, 1e-12);
  expect_var(x, NULL, 0, 1, 0, 1, 0, NULL, STD1_ALL, 1e-12);
  em_tensor_release(x);
  x = make_x(EM_FLOAT32);
  expect_var(x, D(1), 1, 1, 0, 0, 2, S(2, 4), VAR1_D1, 1e-6);
  em_tensor_release(x);
  /* correction >= count: division by max(0, n - correction), as PyTorch: inf or NaN */
  x = make(2, S(2, 2), EM_FLOAT32, V(1, 2, 3, 3));
  expect_var(x, D(1), 1, 2, 0, 0, 1, S(2), V(INFINITY, NAN), 0);
  expect_var(x, D(1), 1, 5, 0, 1, 1, S(2), V(INFINITY, NAN), 0);
  em_tensor_release(x);
  /* a large offset does not cost precision (two passes: mean, then deviations) */
  x = make(1, S(4), EM_FLOAT32, V(1e6 + 1, 1e6 + 2, 1e6 + 3, 1e6 + 4));
  expect_var(x, NULL, 0, 1, 0, 0, 0, NULL, V(5.0 / 3), 1e-6);
  em_tensor_release(x);
}

/* ---------------------------------------------------------------- empty tensors */

static void test_empty(void **state) {
  (void)state;
  em_tensor *x = NULL, *r = NULL, *i = NULL;
  assert_ok(em_empty(&x, 2, S(0, 3), EM_FLOAT32, CPU));
  struct {
    em_redop op;
    em_dtype dtype;
    double value;
  } cases[] = {{EM_SUM, EM_FLOAT32, 0},    {EM_PROD, EM_FLOAT32, 1},
               {EM_MEAN, EM_FLOAT32, NAN}, {EM_LOGSUMEXP, EM_FLOAT32, -INFINITY},
               {EM_NORM, EM_FLOAT32, 0},   {EM_ANY, EM_BOOL, 0},
               {EM_ALL, EM_BOOL, 1}};
  for (int c = 0; c < N(cases); c++) {
    assert_ok(em_reduce(cases[c].op, &r, NULL, x, D(0), 1, 0, 0));
    double e[3] = {cases[c].value, cases[c].value, cases[c].value};
    check(r, cases[c].dtype, 1, S(3), e, 0);
    release(1, &r);
  }
  assert_ok(em_var(&r, x, D(0), 1, 1, 0, 0));
  check(r, EM_FLOAT32, 1, S(3), V(NAN, NAN, NAN), 0);
  release(1, &r);
  /* integer sum of nothing is an int64 zero; reducing the non-empty dim gives [0] */
  em_tensor *xi = NULL;
  assert_ok(em_empty(&xi, 2, S(0, 3), EM_INT32, CPU));
  assert_ok(em_reduce(EM_SUM, &r, NULL, xi, NULL, 0, 0, 0));
  check(r, EM_INT64, 0, NULL, V(0), 0);
  release(2, &r, &xi);
  assert_ok(em_reduce(EM_MAX, &r, &i, x, D(1), 1, 0, 0));
  check(r, EM_FLOAT32, 1, S(0), NULL, 0);
  check(i, EM_INT64, 1, S(0), NULL, 0);
  release(2, &r, &i);
  /* max, min, argmax, argmin and the inf-norms have no identity */
  assert_error(em_reduce(EM_MAX, &r, &i, x, D(0), 1, 0, 0), EM_ERR_SHAPE,
               "max: cannot reduce over zero elements (input shape [0, 3], reduced dims [0])");
  assert_null(r);
  assert_null(i);
  assert_error(em_reduce(EM_MIN, &r, NULL, x, NULL, 0, 0, 0), EM_ERR_SHAPE, "min: cannot reduce over zero elements");
  assert_error(em_reduce(EM_ARGMAX, &r, NULL, x, NULL, 0, 0, 0), EM_ERR_SHAPE,
               "argmax: cannot reduce over zero elements (input shape [0, 3], reduced dims [0, 1])");
  assert_error(em_reduce(EM_ARGMIN, &r, NULL, x, D(0), 1, 1, 0), EM_ERR_SHAPE, "argmin: cannot reduce");
  assert_error(em_norm(&r, x, INFINITY, D(0), 1, 0), EM_ERR_SHAPE, "norm: cannot reduce over zero elements");
  assert_null(r);
  /* ops along a dim of an empty tensor give empty results */
  assert_ok(em_cumsum(&r, x, 0));
  check(r, EM_FLOAT32, 2, S(0, 3), NULL, 0);
  release(1, &r);
  assert_ok(em_softmax(&r, x, 1, 0));
  check(r, EM_FLOAT32, 2, S(0, 3), NULL, 0);
  release(1, &r);
  assert_ok(em_sort(&r, &i, x, 0, 0, 0));
  check(r, EM_FLOAT32, 2, S(0, 3), NULL, 0);
  release(3, &r, &i, &x);
  /* a 0-d tensor reduces to itself */
  assert_ok(em_full(&x, 0, NULL, 2.5, EM_FLOAT32, CPU));
  assert_ok(em_reduce(EM_SUM, &r, NULL, x, D(0), 1, 1, 0));
  check(r, EM_FLOAT32, 0, NULL, V(2.5), 0);
  release(1, &r);
  assert_ok(em_reduce(EM_ARGMAX, &r, NULL, x, NULL, 0, 0, 1));
  check(r, EM_INT64, 0, NULL, V(1), 0);
  release(1, &r);
  assert_ok(em_softmax(&r, x, -1, 0));
  check(r, EM_FLOAT32, 0, NULL, V(1), 0);
  release(2, &r, &x);
}

/* ---------------------------------------------------------------- layouts and paths */

/* Reducing a non-last dim of a contiguous tensor accumulates rows into the outputs (outer
 * walk); a copy with that dim moved last reduces contiguous rows (inner walk). Both must
 * agree, and the kept dims come out in the same order. */
static void compare_walks(const int64_t *sizes, int dim, int other) {
  em_tensor *a = random_f32(3, sizes, 0.25f), *t = transposed_copy(a, dim, other);
  em_redop ops[] = {EM_SUM,    EM_MEAN,      EM_PROD, EM_MAX, EM_MIN, EM_ARGMAX,
                    EM_ARGMIN, EM_LOGSUMEXP, EM_NORM, EM_ANY, EM_ALL};
  for (int k = 0; k < N(ops); k++) {
    em_tensor *r1 = NULL, *r2 = NULL, *i1 = NULL, *i2 = NULL;
    int with_idx = ops[k] == EM_MAX || ops[k] == EM_MIN;
    assert_ok(em_reduce(ops[k], &r1, with_idx ? &i1 : NULL, a, &dim, 1, 0, 0));
    assert_ok(em_reduce(ops[k], &r2, with_idx ? &i2 : NULL, t, &other, 1, 0, 0));
    check_same(r2, r1, 1e-5); /* t's kept dims come in a's order */
    if (with_idx) check_same(i2, i1, 0);
    release(4, &r1, &r2, &i1, &i2);
  }
  double ps[] = {1, INFINITY, -INFINITY, 0, 3};
  for (int k = 0; k < N(ps); k++) {
    em_tensor *r1 = NULL, *r2 = NULL;
    assert_ok(em_norm(&r1, a, ps[k], &dim, 1, 0));
    assert_ok(em_norm(&r2, t, ps[k], &other, 1, 0));
    check_same(r2, r1, 1e-5);
    release(2, &r1, &r2);
  }
  for (int s = 0; s < 2; s++) {
    em_tensor *r1 = NULL, *r2 = NULL;
    assert_ok(em_var(&r1, a, &dim, 1, 1, 0, s));
    assert_ok(em_var(&r2, t, &other, 1, 1, 0, s));
    check_same(r2, r1, 1e-5);
    release(2, &r1, &r2);
  }
  release(2, &a, &t);
}

static void test_walks_agree(void **state) {
  (void)state;
  compare_walks(S(37, 70, 1), 0, 1); /* first dim of a matrix */
  compare_walks(S(3, 40, 20), 1, 2); /* a middle dim */
}

static void test_strided_inputs(void **state) {
  (void)state;
  em_tensor *base = random_f32(2, S(6, 20), 0), *v = NULL, *c = NULL;
  assert_ok(em_as_strided(&v, base, 2, S(3, 7), S(40, 3), 1)); /* every other row, every third column */
  assert_ok(em_clone(&c, v));
  int dims[][2] = {{0, 0}, {1, 0}, {0, 1}};
  int nd[] = {1, 1, 2};
  em_redop ops[] = {EM_SUM, EM_MAX, EM_ARGMIN, EM_LOGSUMEXP, EM_NORM};
  for (int k = 0; k < N(ops); k++)
    for (int j = 0; j < 3; j++) {
      em_tensor *r1 = NULL, *r2 = NULL;
      assert_ok(em_reduce(ops[k], &r1, NULL, v, dims[j], nd[j], 1, 0));
      assert_ok(em_reduce(ops[k], &r2, NULL, c, dims[j], nd[j], 1, 0));
      check_same(r2, r1, 1e-6);
      release(2, &r1, &r2);
    }
  /* a transposed input and a broadcast (zero-stride) one */
  em_tensor *x = make_x(EM_FLOAT32), *t = NULL, *r = NULL;
  assert_ok(em_transpose(&t, x, 0, 2)); /* [4, 3, 2] */
  assert_ok(em_reduce(EM_SUM, &r, NULL, t, D(1, 2), 2, 0, 0));
  const double by_last[] = {-3.0 - 1.5 + 0, 0.5 + 2 + 2, 4 + 4 - 5.5, 6 - 3.5 - 2}; /* SUM_D0's columns summed */
  check(r, EM_FLOAT32, 1, S(4), by_last, 1e-6);
  release(2, &r, &t);
  em_tensor *row = make(2, S(1, 3), EM_FLOAT32, V(1, 2, 3)), *e = NULL;
  assert_ok(em_expand(&e, row, 2, S(5, 3)));
  assert_ok(em_reduce(EM_SUM, &r, NULL, e, D(0), 1, 0, 0));
  check(r, EM_FLOAT32, 1, S(3), V(5, 10, 15), 0);
  release(1, &r);
  assert_ok(em_var(&r, e, D(0), 1, 1, 0, 0));
  check(r, EM_FLOAT32, 1, S(3), V(0, 0, 0), 0);
  release(7, &r, &e, &row, &x, &base, &v, &c);
}

static void test_out_param(void **state) {
  (void)state;
  em_tensor *x = make_x(EM_FLOAT32), *out = NULL, *keep = NULL;
  assert_ok(em_empty(&out, 2, S(2, 4), EM_FLOAT32, CPU));
  em_tensor *given = out;
  assert_ok(em_reduce(EM_SUM, &out, NULL, x, D(1), 1, 0, 0));
  assert_ptr_equal(out, given);
  check(out, EM_FLOAT32, 2, S(2, 4), SUM_D1, 1e-6);
  /* a non-contiguous out receives the values through a temporary */
  em_tensor *store = NULL, *tview = NULL;
  assert_ok(em_zeros(&store, 2, S(4, 2), EM_FLOAT32, CPU));
  assert_ok(em_transpose(&tview, store, 0, 1));
  given = tview;
  assert_ok(em_reduce(EM_SUM, &tview, NULL, x, D(1), 1, 0, 0));
  assert_ptr_equal(tview, given);
  check(tview, EM_FLOAT32, 2, S(2, 4), SUM_D1, 1e-6);
  em_tensor *idx = NULL;
  assert_ok(em_empty(&keep, 3, S(2, 1, 4), EM_FLOAT32, CPU));
  assert_ok(em_reduce(EM_MAX, &keep, &idx, x, D(1), 1, 1, 0));
  check(keep, EM_FLOAT32, 3, S(2, 1, 4), MAX_D1, 0);
  check(idx, EM_INT64, 3, S(2, 1, 4), MAX_D1_I, 0);
  /* wrong shape or dtype: an error, and the caller's tensor is left alone */
  em_tensor *bad = NULL;
  assert_ok(em_empty(&bad, 1, S(3), EM_FLOAT32, CPU));
  given = bad;
  assert_error(em_reduce(EM_SUM, &bad, NULL, x, D(1), 1, 0, 0), EM_ERR_SHAPE,
               "sum: output has shape [3], expected [2, 4]");
  assert_ptr_equal(bad, given);
  assert_error(em_reduce(EM_SUM, &out, NULL, x, D(1), 1, 1, 0), EM_ERR_SHAPE, "expected [2, 1, 4]");
  assert_error(em_reduce(EM_ARGMAX, &out, NULL, x, D(1), 1, 0, 0), EM_ERR_DTYPE,
               "argmax: output has dtype float32, expected int64");
  em_tensor *v = NULL;
  assert_error(em_reduce(EM_MAX, &v, &out, x, D(1), 1, 0, 0), EM_ERR_DTYPE,
               "max: output has dtype float32, expected int64");
  assert_null(v); /* allocated values were released when the indices failed */
  assert_error(em_softmax(&bad, x, 1, 0), EM_ERR_SHAPE, "softmax: output has shape [3], expected [2, 3, 4]");
  assert_error(em_cumsum(&bad, x, 1), EM_ERR_SHAPE, "cumsum: output has shape [3]");
  assert_error(em_sort(&bad, NULL, x, 1, 0, 0), EM_ERR_SHAPE, "sort: output has shape [3]");
  release(8, &x, &out, &keep, &store, &tview, &idx, &bad, &v);
}

/* ---------------------------------------------------------------- accuracy, threads */

static void test_sum_accuracy(void **state) {
  (void)state;
  int64_t n = (int64_t)1 << 22;
  em_tensor *a = NULL, *r = NULL;
  assert_ok(em_full(&a, 1, &n, 0.1, EM_FLOAT32, CPU));
  assert_ok(em_reduce(EM_SUM, &r, NULL, a, NULL, 0, 0, 0));
  /* a float accumulator would drift by percents here; the result is correctly rounded */
  assert_true((float)item(r) == (float)((double)0.1f * (double)n));
  release(1, &r);
  assert_ok(em_reduce(EM_MEAN, &r, NULL, a, NULL, 0, 0, 0));
  assert_true((float)item(r) == 0.1f);
  release(2, &r, &a);
  /* random values: within about one float rounding of the exact sum (a running float
   * sum is off by 3e-6 here) */
  a = random_f32(1, S(3000003), 0.5f);
  const float *x = em_tensor_data(a);
  double exact = 0;
  for (int64_t i = 0; i < 3000003; i++) exact += x[i];
  assert_ok(em_reduce(EM_SUM, &r, NULL, a, NULL, 0, 0, 0));
  if (fabs(item(r) - exact) > 1e-7 * fabs(exact)) fail_msg("sum %.9g, exact %.9g", item(r), exact);
  release(2, &r, &a);
}

/* Runs op with 1 and with 2 threads; the results must be bit for bit equal. */
static void same_with_threads(em_redop op, const em_tensor *a, const int *dims, int ndims) {
  em_tensor *r1 = NULL, *r2 = NULL;
  em_set_num_threads(1);
  assert_ok(em_reduce(op, &r1, NULL, a, dims, ndims, 0, 0));
  em_set_num_threads(2);
  assert_ok(em_reduce(op, &r2, NULL, a, dims, ndims, 0, 0));
  size_t bytes = (size_t)em_tensor_numel(r1) * em_dtype_size(em_tensor_dtype(r1));
  assert_memory_equal(em_tensor_data(r1), em_tensor_data(r2), bytes);
  release(2, &r1, &r2);
}

static void test_thread_independence(void **state) {
  (void)state;
  int saved = em_get_num_threads();
  em_tensor *a = random_f32(1, S(3000001), 0.5f), *m = random_f32(2, S(1500, 2000), 0), *d = NULL;
  same_with_threads(EM_SUM, a, NULL, 0);
  same_with_threads(EM_MEAN, a, NULL, 0);
  same_with_threads(EM_NORM, a, NULL, 0);
  same_with_threads(EM_LOGSUMEXP, a, NULL, 0);
  same_with_threads(EM_SUM, m, D(0), 1);
  same_with_threads(EM_SUM, m, D(1), 1);
  same_with_threads(EM_ARGMAX, m, NULL, 0);
  /* float64 values spread over 2^-40..2^40: sums are inexact, so any change in the order
   * of additions would show in the last bits */
  assert_ok(em_to(&d, a, EM_FLOAT64, CPU));
  double *dv = em_tensor_data(d);
  for (int64_t k = 0; k < em_tensor_numel(d); k++) dv[k] = ldexp(dv[k], (int)(k * 7919 % 81) - 40);
  same_with_threads(EM_SUM, d, NULL, 0);
  same_with_threads(EM_MEAN, d, NULL, 0);
  same_with_threads(EM_NORM, d, NULL, 0);
  em_tensor *r1 = NULL, *r2 = NULL;
  em_set_num_threads(1);
  assert_ok(em_softmax(&r1, m, 1, 0));
  em_set_num_threads(2);
  assert_ok(em_softmax(&r2, m, 1, 0));
  assert_memory_equal(em_tensor_data(r1), em_tensor_data(r2), sizeof(float) * 1500 * 2000);
  release(2, &r1, &r2);
  em_set_num_threads(1);
  assert_ok(em_var(&r1, m, D(0), 1, 1, 0, 0));
  em_set_num_threads(2);
  assert_ok(em_var(&r2, m, D(0), 1, 1, 0, 0));
  assert_memory_equal(em_tensor_data(r1), em_tensor_data(r2), sizeof(float) * 2000);
  release(5, &r1, &r2, &a, &m, &d);
  em_set_num_threads(saved);
}

/* ---------------------------------------------------------------- softmax */

static void test_vexpf(void **state) {
  (void)state;
  int64_t worst = 0;
  for (int64_t k = 0; k <= 4000000; k++) {
    float x = (float)(-87.3 + (88.7 + 87.3) * (double)k / 4000000.0);
    float got = em_vexpf(x), want = (float)exp((double)x);
    int32_t gi, wi;
    memcpy(&gi, &got, 4);
    memcpy(&wi, &want, 4);
    int64_t ulp = llabs((int64_t)gi - (int64_t)wi);
    if (ulp > worst) worst = ulp;
  }
  if (worst > 2) fail_msg("em_vexpf is %lld ulp from libm", (long long)worst);
  assert_true(em_vexpf(0) == 1.0f);
  assert_true(em_vexpf(-200) == 0.0f);
  assert_true(isinf(em_vexpf(100)) && em_vexpf(100) > 0);
  assert_true(isnan(em_vexpf(NAN)));
  assert_true(em_vexpf(-INFINITY) == 0.0f);
  float sub = em_vexpf(-100), ref = (float)exp(-100.0); /* a subnormal result */
  assert_true(fabsf(sub - ref) <= 2e-45f);
  /* the softmax variant, for x <= 0: the same accuracy down to FLT_MIN, then 0 */
  worst = 0;
  for (int64_t k = 0; k <= 2000000; k++) {
    float x = (float)(-87.33 * (double)k / 2000000.0);
    float got = em_vexpf_nonpos(x), want = (float)exp((double)x);
    int32_t gi, wi;
    memcpy(&gi, &got, 4);
    memcpy(&wi, &want, 4);
    if (llabs((int64_t)gi - (int64_t)wi) > worst) worst = llabs((int64_t)gi - (int64_t)wi);
  }
  if (worst > 2) fail_msg("em_vexpf_nonpos is %lld ulp from libm", (long long)worst);
  assert_true(em_vexpf_nonpos(0) == 1.0f);
  assert_true(em_vexpf_nonpos(-87.4f) == 0.0f && em_vexpf_nonpos(-1e30f) == 0.0f);
  assert_true(em_vexpf_nonpos(-INFINITY) == 0.0f);
  assert_true(isnan(em_vexpf_nonpos(NAN)));
}

static void test_softmax(void **state) {
  (void)state;
  for (int k = 0; k < 2; k++) {
    em_dtype dt = k ? EM_FLOAT64 : EM_FLOAT32;
    double tol = k ? 1e-12 : 1e-6;
    em_tensor *x = make_x(dt), *r = NULL;
    assert_ok(em_softmax(&r, x, 2, 0));
    check(r, dt, 3, S(2, 3, 4), SOFTMAX_D2, tol);
    release(1, &r);
    assert_ok(em_softmax(&r, x, 1, 0));
    check(r, dt, 3, S(2, 3, 4), SOFTMAX_D1, tol);
    release(1, &r);
    assert_ok(em_softmax(&r, x, -3, 1));
    check(r, dt, 3, S(2, 3, 4), LOGSOFTMAX_D0, tol);
    release(2, &r, &x);
  }
  /* rows sum to 1 and match a double reference, along the last dim and along dim 0 */
  em_tensor *a = random_f32(2, S(64, 300), 0), *r = NULL, *s = NULL;
  for (int k = 0; k < 64 * 300; k++) ((float *)em_tensor_data(a))[k] *= 8; /* a spread of magnitudes */
  assert_ok(em_softmax(&r, a, 1, 0));
  assert_ok(em_reduce(EM_SUM, &s, NULL, r, D(1), 1, 0, 0));
  const float *x = em_tensor_data(a), *y = em_tensor_data(r), *sums = em_tensor_data(s);
  for (int i = 0; i < 64; i++) {
    assert_true(fabsf(sums[i] - 1.0f) < 2e-6f);
    double m = -INFINITY, total = 0;
    for (int j = 0; j < 300; j++) m = fmax(m, x[i * 300 + j]);
    for (int j = 0; j < 300; j++) total += exp(x[i * 300 + j] - m);
    for (int j = 0; j < 300; j++) {
      double want = exp(x[i * 300 + j] - m) / total;
      if (fabs(y[i * 300 + j] - want) > 1e-6 * want + 1e-12)
        fail_msg("softmax[%d][%d] %g vs %g", i, j, y[i * 300 + j], want);
    }
  }
  em_tensor *t = transposed_copy(a, 0, 1), *r0 = NULL, *r0t = NULL;
  assert_ok(em_softmax(&r0, t, 0, 0)); /* strips of columns */
  assert_ok(em_transpose(&r0t, r0, 0, 1));
  check_same(r, r0t, 1e-6);
  release(3, &r0, &r0t, &s);
  /* a transposed (non-contiguous) input */
  em_tensor *tv = NULL;
  assert_ok(em_transpose(&tv, t, 0, 1));
  assert_ok(em_softmax(&r0, tv, 1, 0));
  check_same(r, r0, 0);
  release(3, &r0, &tv, &t);
  /* in place, both forms */
  em_tensor *c = NULL, *lr = NULL;
  assert_ok(em_clone(&c, a));
  assert_ok(em_softmax(&c, c, 1, 0));
  check_same(r, c, 0);
  release(1, &c);
  assert_ok(em_clone(&c, a));
  assert_ok(em_softmax(&lr, a, 1, 1));
  assert_ok(em_softmax(&c, c, 1, 1));
  check_same(lr, c, 0);
  release(4, &c, &lr, &r, &a);
  /* large values: no overflow; a NaN makes its row NaN and leaves the others */
  const double big[] = {1000, 1001, 1002, -1e30, 0, 1e30, 1, NAN, 2};
  a = make(2, S(3, 3), EM_FLOAT32, big);
  assert_ok(em_softmax(&r, a, 1, 1));
  check(r, EM_FLOAT32, 2, S(3, 3),
        V(-2.4076059644443806, -1.4076059644443806, -0.4076059644443806, -2e30, -1e30, 0, NAN, NAN, NAN), 1e-6);
  release(1, &r);
  assert_ok(em_softmax(&r, a, 1, 0));
  check(r, EM_FLOAT32, 2, S(3, 3),
        V(0.09003057317038046, 0.24472847105479767, 0.6652409557748219, 0, 0, 1, NAN, NAN, NAN), 1e-6);
  release(2, &r, &a);
}

/* ---------------------------------------------------------------- cumsum, cumprod */

static void expect_scan(int prod, const em_tensor *x, int dim, em_dtype dtype, const double *want) {
  em_tensor *r = NULL;
  assert_ok(prod ? em_cumprod(&r, x, dim) : em_cumsum(&r, x, dim));
  check(r, dtype, em_tensor_ndim(x), em_tensor_sizes(x), want, 1e-6);
  em_tensor_release(r);
}

static void test_scan(void **state) {
  (void)state;
  em_tensor *x = make_x(EM_FLOAT32), *r = NULL;
  expect_scan(0, x, 2, EM_FLOAT32, CUMSUM_D2);
  expect_scan(0, x, 0, EM_FLOAT32, CUMSUM_D0);
  expect_scan(1, x, -2, EM_FLOAT32, CUMPROD_D1);
  em_tensor *t = NULL, *tc = NULL, *r2 = NULL; /* a transposed input */
  assert_ok(em_transpose(&t, x, 0, 2));
  assert_ok(em_clone(&tc, t));
  assert_ok(em_cumsum(&r, t, 1));
  assert_ok(em_cumsum(&r2, tc, 1));
  check_same(r2, r, 0);
  release(4, &t, &tc, &r, &r2);
  assert_ok(em_clone(&r, x)); /* in place */
  assert_ok(em_cumsum(&r, r, 2));
  check(r, EM_FLOAT32, 3, S(2, 3, 4), CUMSUM_D2, 1e-6);
  release(2, &r, &x);
  /* integers and bool give int64 */
  x = make(2, S(2, 3), EM_INT32, V(2000000000, 2000000000, 1, -3, 4, 5));
  expect_scan(0, x, 1, EM_INT64, V(2000000000, 4000000000.0, 4000000001.0, -3, 1, 6));
  expect_scan(1, x, 0, EM_INT64, V(2000000000, 2000000000, 1, -6000000000.0, 8000000000.0, 5));
  em_tensor_release(x);
  x = make(1, S(4), EM_BOOL, V(1, 0, 1, 1));
  expect_scan(0, x, 0, EM_INT64, V(1, 1, 2, 3));
  em_tensor_release(x);
}

/* ---------------------------------------------------------------- sort, topk */

static void test_sort(void **state) {
  (void)state;
  em_tensor *x = make_x(EM_FLOAT32), *v = NULL, *i = NULL;
  assert_ok(em_sort(&v, &i, x, 2, 0, 0));
  check(v, EM_FLOAT32, 3, S(2, 3, 4), SORT_D2, 0);
  check(i, EM_INT64, 3, S(2, 3, 4), SORT_D2_I, 0);
  release(2, &v, &i);
  double idx1[24];
  for (int k = 0; k < 24; k++) idx1[k] = SORTD_D1_I[k] + 1;
  assert_ok(em_sort(&v, &i, x, 1, 1, 1)); /* descending, along a strided dim, base 1 */
  check(v, EM_FLOAT32, 3, S(2, 3, 4), SORTD_D1, 0);
  check(i, EM_INT64, 3, S(2, 3, 4), idx1, 0);
  release(2, &v, &i);
  assert_ok(em_sort(&v, NULL, x, -1, 0, 0)); /* values only */
  check(v, EM_FLOAT32, 3, S(2, 3, 4), SORT_D2, 0);
  release(1, &v);
  /* top-k: the k largest (or smallest) in order */
  double tv[12], ti[12];
  for (int r = 0; r < 6; r++)
    for (int k = 0; k < 2; k++) tv[r * 2 + k] = SORT_D2[r * 4 + 3 - k], ti[r * 2 + k] = SORT_D2_I[r * 4 + 3 - k];
  assert_ok(em_topk(&v, &i, x, 2, 2, 1, 0));
  check(v, EM_FLOAT32, 3, S(2, 3, 2), tv, 0);
  check(i, EM_INT64, 3, S(2, 3, 2), ti, 0);
  release(2, &v, &i);
  for (int r = 0; r < 6; r++)
    for (int k = 0; k < 2; k++) tv[r * 2 + k] = SORT_D2[r * 4 + k], ti[r * 2 + k] = SORT_D2_I[r * 4 + k];
  assert_ok(em_topk(&v, &i, x, 2, -1, 0, 0));
  check(v, EM_FLOAT32, 3, S(2, 3, 2), tv, 0);
  check(i, EM_INT64, 3, S(2, 3, 2), ti, 0);
  release(2, &v, &i);
  assert_ok(em_topk(&v, &i, x, 0, 1, 1, 0));
  check(v, EM_FLOAT32, 3, S(2, 0, 4), NULL, 0);
  release(3, &v, &i, &x);
  /* stable on ties in both directions; NaN is the largest */
  x = make(1, S(5), EM_INT32, V(2, 1, 2, 1, 2));
  assert_ok(em_sort(&v, &i, x, 0, 0, 0));
  check(v, EM_INT32, 1, S(5), V(1, 1, 2, 2, 2), 0);
  check(i, EM_INT64, 1, S(5), V(1, 3, 0, 2, 4), 0);
  release(2, &v, &i);
  assert_ok(em_sort(&v, &i, x, 0, 1, 0));
  check(i, EM_INT64, 1, S(5), V(0, 2, 4, 1, 3), 0);
  release(3, &v, &i, &x);
  x = make(1, S(5), EM_FLOAT64, V(3, NAN, 1, NAN, 2));
  assert_ok(em_sort(&v, &i, x, 0, 0, 0));
  check(v, EM_FLOAT64, 1, S(5), V(1, 2, 3, NAN, NAN), 0);
  check(i, EM_INT64, 1, S(5), V(2, 4, 0, 1, 3), 0);
  release(2, &v, &i);
  assert_ok(em_topk(&v, &i, x, 3, 0, 1, 0));
  check(v, EM_FLOAT64, 1, S(3), V(NAN, NAN, 3), 0);
  check(i, EM_INT64, 1, S(3), V(1, 3, 0), 0);
  release(3, &v, &i, &x);
  /* a long row: sorted, and each index points at its value */
  x = random_f32(1, S(5000), 0);
  assert_ok(em_sort(&v, &i, x, 0, 0, 0));
  const float *xs = em_tensor_data(x), *vs = em_tensor_data(v);
  const int64_t *is = em_tensor_data(i);
  for (int k = 0; k < 5000; k++) {
    if (k) assert_true(vs[k - 1] <= vs[k]);
    assert_true(xs[is[k]] == vs[k]);
  }
  release(3, &v, &i, &x);
}

/* ---------------------------------------------------------------- errors */

static void test_errors(void **state) {
  (void)state;
  em_tensor *x = make_x(EM_FLOAT32), *r = NULL, *i = NULL, *xi = NULL, *h = NULL;
  assert_error(em_reduce(EM_SUM, &r, NULL, x, D(1, -2), 2, 0, 0), EM_ERR_ARGUMENT,
               "sum: dim -2 appears more than once in dims (shape [2, 3, 4])");
  assert_error(em_reduce(EM_SUM, &r, NULL, x, D(3), 1, 0, 0), EM_ERR_INDEX, "sum: dim 3 out of range for a 3-d tensor");
  assert_error(em_reduce(EM_SUM, &r, NULL, x, D(0), 9, 0, 0), EM_ERR_ARGUMENT, "sum: 9 dims given, expected 0..8");
  assert_error(em_reduce(EM_SUM, &r, &i, x, NULL, 0, 0, 0), EM_ERR_ARGUMENT,
               "sum: indices are only returned by max and min");
  assert_error(em_reduce((em_redop)99, &r, NULL, x, NULL, 0, 0, 0), EM_ERR_ARGUMENT, "reduce: unknown reduction 99");
  assert_error(em_reduce(EM_SUM, &r, NULL, NULL, NULL, 0, 0, 0), EM_ERR_ARGUMENT, "sum: expected a tensor for input");
  assert_error(em_norm(&r, x, NAN, NULL, 0, 0), EM_ERR_ARGUMENT, "norm: the order p is NaN");
  assert_error(em_var(&r, x, NULL, 0, NAN, 0, 0), EM_ERR_ARGUMENT, "var: correction is NaN");
  assert_ok(em_to(&xi, x, EM_INT32, CPU));
  assert_error(em_reduce(EM_MEAN, &r, NULL, xi, NULL, 0, 0, 0), EM_ERR_DTYPE,
               "mean: expected a float32 or float64 tensor, got int32");
  assert_error(em_reduce(EM_LOGSUMEXP, &r, NULL, xi, D(0), 1, 0, 0), EM_ERR_DTYPE, "logsumexp: expected a float32");
  assert_error(em_norm(&r, xi, 2, NULL, 0, 0), EM_ERR_DTYPE, "norm: expected a float32 or float64 tensor, got int32");
  assert_error(em_var(&r, xi, NULL, 0, 1, 0, 0), EM_ERR_DTYPE, "var: expected a float32 or float64 tensor, got int32");
  assert_error(em_var(&r, xi, NULL, 0, 1, 0, 1), EM_ERR_DTYPE, "std: expected a float32");
  assert_error(em_softmax(&r, xi, 0, 0), EM_ERR_DTYPE, "softmax: expected a float32 or float64 tensor, got int32");
  assert_error(em_softmax(&r, xi, 0, 1), EM_ERR_DTYPE, "log_softmax: expected a float32");
  assert_ok(em_to(&h, x, EM_FLOAT16, CPU));
  assert_error(em_reduce(EM_SUM, &r, NULL, h, NULL, 0, 0, 0), EM_ERR_DTYPE,
               "sum: dtype float16 is storage-only (convert with to('float32') first)");
  assert_error(em_cumsum(&r, h, 0), EM_ERR_DTYPE, "cumsum: dtype float16 is storage-only");
  assert_error(em_sort(&r, NULL, h, 0, 0, 0), EM_ERR_DTYPE, "sort: dtype float16 is storage-only");
  assert_error(em_var(&r, h, NULL, 0, 1, 0, 0), EM_ERR_DTYPE, "var: dtype float16 is storage-only");
  assert_error(em_softmax(&r, x, 3, 0), EM_ERR_INDEX, "softmax: dim 3 out of range");
  assert_error(em_cumprod(&r, x, -4), EM_ERR_INDEX, "cumprod: dim -4 out of range");
  assert_error(em_sort(&r, &i, x, 5, 0, 0), EM_ERR_INDEX, "sort: dim 5 out of range");
  assert_error(em_sort(NULL, &i, x, 0, 0, 0), EM_ERR_ARGUMENT, "sort: values must not be NULL");
  assert_error(em_topk(&r, &i, x, 5, 2, 1, 0), EM_ERR_INDEX,
               "topk: k = 5 is out of range for dim 2 of size 4 (shape [2, 3, 4], expected 0..4)");
  assert_error(em_topk(&r, &i, x, -1, 0, 1, 0), EM_ERR_INDEX, "topk: k = -1 is out of range");
  assert_null(r);
  assert_null(i);
  em_tensor *gone = make_x(EM_FLOAT32);
  assert_ok(em_tensor_free(gone));
  assert_error(em_reduce(EM_MAX, &r, NULL, gone, NULL, 0, 0, 0), EM_ERR_ARGUMENT, "max: the input was freed");
  assert_error(em_softmax(&r, gone, 0, 0), EM_ERR_ARGUMENT, "softmax: the input was freed");
  assert_error(em_topk(&r, NULL, gone, 1, 0, 1, 0), EM_ERR_ARGUMENT, "topk: the input was freed");
  release(4, &x, &xi, &h, &gone);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sum_dims),
      cmocka_unit_test(test_mean_prod),
      cmocka_unit_test(test_max_min_indices),
      cmocka_unit_test(test_ties_and_nan),
      cmocka_unit_test(test_integer_and_bool),
      cmocka_unit_test(test_logsumexp_norm),
      cmocka_unit_test(test_var_std),
      cmocka_unit_test(test_empty),
      cmocka_unit_test(test_walks_agree),
      cmocka_unit_test(test_strided_inputs),
      cmocka_unit_test(test_out_param),
      cmocka_unit_test(test_sum_accuracy),
      cmocka_unit_test(test_thread_independence),
      cmocka_unit_test(test_vexpf),
      cmocka_unit_test(test_softmax),
      cmocka_unit_test(test_scan),
      cmocka_unit_test(test_sort),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
