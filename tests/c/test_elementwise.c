/* test_elementwise.c - em_binary, em_binary_scalar, em_unary, em_where, em_clamp and
 * em_add_scaled: values on known inputs per dtype, promotion, broadcasting, strided and
 * aliased operands, the parallel path against a serial reference, and every error. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "test_util.h"
#include "ember/tensor.h"
#include "tensor/tensor_impl.h"

/* ---- helpers ---- */

/* A contiguous tensor of dtype holding vals (row-major). */
static em_tensor *mk(em_dtype dtype, int ndim, const int64_t *sizes, const double *vals) {
  em_tensor *t = NULL;
  assert_int_equal(em_empty(&t, ndim, sizes, dtype, CPU), EM_OK);
  int64_t n = em_tensor_numel(t), idx[EM_MAX_DIMS];
  for (int64_t i = 0; i < n; i++) {
    int64_t r = i;
    for (int d = ndim - 1; d >= 0; d--) idx[d] = r % sizes[d], r /= sizes[d];
    assert_int_equal(em_tensor_set(t, idx, vals[i]), EM_OK);
  }
  return t;
}

static em_tensor *vec(em_dtype dtype, int64_t n, const double *vals) { return mk(dtype, 1, &n, vals); }

/* Checks t's dtype, shape and values (NaN matches NaN; tol is absolute + relative). */
static void expect(const em_tensor *t, em_dtype dtype, int ndim, const int64_t *sizes, const double *vals, double tol) {
  assert_non_null(t);
  assert_string_equal(em_dtype_name(em_tensor_dtype(t)), em_dtype_name(dtype));
  assert_int_equal(em_tensor_ndim(t), ndim);
  for (int d = 0; d < ndim; d++) assert_int_equal(em_tensor_size(t, d), sizes[d]);
  for (int64_t i = 0; i < em_tensor_numel(t); i++) {
    double got = tensor_flat_get(t, i), want = vals[i];
    if (isnan(want)) {
      if (!isnan(got)) fail_msg("element %lld: got %.17g, expected NaN", (long long)i, got);
    } else if (!(fabs(got - want) <= tol * (1 + fabs(want))) && got != want) {
      fail_msg("element %lld: got %.17g, expected %.17g", (long long)i, got, want);
    }
  }
}

static void expect_vec(const em_tensor *t, em_dtype dtype, int64_t n, const double *vals, double tol) {
  expect(t, dtype, 1, &n, vals, tol);
}

/* Runs a binary op on two new vectors and checks the result, then frees everything. */
static void check_bin(em_binop op, em_dtype da, em_dtype db, int64_t n, const double *a, const double *b,
                      em_dtype want_dtype, const double *want, double tol) {
  em_tensor *ta = vec(da, n, a), *tb = vec(db, n, b), *out = NULL;
  assert_int_equal(em_binary(op, &out, ta, tb), EM_OK);
  expect_vec(out, want_dtype, n, want, tol);
  em_tensor_release(ta), em_tensor_release(tb), em_tensor_release(out);
}

static void check_scalar(em_binop op, em_dtype da, int64_t n, const double *a, double s, int reversed,
                         em_dtype want_dtype, const double *want, double tol) {
  em_tensor *ta = vec(da, n, a), *out = NULL;
  if (em_binary_scalar(op, &out, ta, s, reversed) != EM_OK) fail_msg("%s", em_last_error());
  expect_vec(out, want_dtype, n, want, tol);
  em_tensor_release(ta), em_tensor_release(out);
}

static void check_unary(em_unop op, em_dtype da, int64_t n, const double *a, em_dtype want_dtype, const double *want,
                        double tol) {
  em_tensor *ta = vec(da, n, a), *out = NULL;
  if (em_unary(op, &out, ta) != EM_OK) fail_msg("%s", em_last_error());
  expect_vec(out, want_dtype, n, want, tol);
  em_tensor_release(ta), em_tensor_release(out);
}

#define N(arr) ((int64_t)(sizeof(arr) / sizeof(arr[0])))
static const em_dtype FLOATS[] = {EM_FLOAT32, EM_FLOAT64};
static const em_dtype INTS[] = {EM_INT32, EM_INT64};

/* ---- binary ops on known values ---- */

static void test_binary_float(void **state) {
  (void)state;
  const double a[] = {1.5, -2, 7, -7, 0.25, 3};
  const double b[] = {0.5, 4, 3, 3, -2, 0};
  const double add[] = {2, 2, 10, -4, -1.75, 3}, sub[] = {1, -6, 4, -10, 2.25, 3};
  const double mul[] = {0.75, -8, 21, -21, -0.5, 0}, div[] = {3, -0.5, 7.0 / 3, -7.0 / 3, -0.125, INFINITY};
  const double pw[] = {sqrt(1.5), 16, 343, -343, 16, 1}, mx[] = {1.5, 4, 7, 3, 0.25, 3};
  const double mn[] = {0.5, -2, 3, -7, -2, 0}, fm[] = {0, -2, 1, -1, 0.25, NAN}; /* sign of the dividend */
  for (int k = 0; k < 2; k++) {
    em_dtype d = FLOATS[k];
    double tol = d == EM_FLOAT32 ? 1e-6 : 1e-15;
    check_bin(EM_ADD, d, d, 6, a, b, d, add, 0);
    check_bin(EM_SUB, d, d, 6, a, b, d, sub, 0);
    check_bin(EM_MUL, d, d, 6, a, b, d, mul, 0);
    check_bin(EM_DIV, d, d, 6, a, b, d, div, tol);
    check_bin(EM_POW, d, d, 6, a, b, d, pw, tol);
    check_bin(EM_MAXIMUM, d, d, 6, a, b, d, mx, 0);
    check_bin(EM_MINIMUM, d, d, 6, a, b, d, mn, 0);
    check_bin(EM_FMOD, d, d, 6, a, b, d, fm, 0);
  }
}

static void test_binary_int(void **state) {
  (void)state;
  const double a[] = {7, -7, 3, -2, 0, 5};
  const double b[] = {2, 2, 4, 3, 5, -3};
  const double add[] = {9, -5, 7, 1, 5, 2}, sub[] = {5, -9, -1, -5, -5, 8}, mul[] = {14, -14, 12, -6, 0, -15};
  const double div[] = {3.5, -3.5, 0.75, -2.0 / 3, 0, -5.0 / 3};
  const double mx[] = {7, 2, 4, 3, 5, 5}, mn[] = {2, -7, 3, -2, 0, -3}, fm[] = {1, -1, 3, -2, 0, 2};
  const double pb[] = {2, 2, 4, 3, 5, 0}; /* pow exponents must not be negative */
  const double pw0[] = {49, 49, 81, -8, 0, 1};
  for (int k = 0; k < 2; k++) {
    em_dtype d = INTS[k];
    check_bin(EM_ADD, d, d, 6, a, b, d, add, 0);
    check_bin(EM_SUB, d, d, 6, a, b, d, sub, 0);
    check_bin(EM_MUL, d, d, 6, a, b, d, mul, 0);
    check_bin(EM_DIV, d, d, 6, a, b, EM_FLOAT32, div, 1e-7); /* true division */
    check_bin(EM_POW, d, d, 6, a, pb, d, pw0, 0);
    check_bin(EM_MAXIMUM, d, d, 6, a, b, d, mx, 0);
    check_bin(EM_MINIMUM, d, d, 6, a, b, d, mn, 0);
    check_bin(EM_FMOD, d, d, 6, a, b, d, fm, 0);
  }
  /* int / float64 divides in float64; int32 overflow wraps (as PyTorch) */
  const double num[] = {1}, den[] = {3}, third[] = {1.0 / 3};
  check_bin(EM_DIV, EM_INT32, EM_FLOAT64, 1, num, den, EM_FLOAT64, third, 0);
  const double big[] = {2147483647}, one[] = {1}, wrapped[] = {-2147483648.0};
  check_bin(EM_ADD, EM_INT32, EM_INT32, 1, big, one, EM_INT32, wrapped, 0);
  /* int64 pow wraps modulo 2^64 (3^41 does not fit) */
  const double p2[] = {2, 3, -1, 1}, e[] = {40, 41, 7, 63};
  em_tensor *ta = vec(EM_INT64, 4, p2), *tb = vec(EM_INT64, 4, e), *out = NULL;
  assert_int_equal(em_binary(EM_POW, &out, ta, tb), EM_OK);
  const int64_t *r = em_tensor_data(out);
  assert_true(r[0] == 1099511627776LL && r[2] == -1 && r[3] == 1);
  assert_true(r[1] == (int64_t)(12157665459056928801ULL * 3ULL)); /* 3^40 * 3 */
  em_tensor_release(ta), em_tensor_release(tb), em_tensor_release(out);
  /* uint8 wraps */
  const double u1[] = {3, 250}, u2[] = {5, 10}, usub[] = {254, 240}, uadd[] = {8, 4};
  check_bin(EM_SUB, EM_UINT8, EM_UINT8, 2, u1, u2, EM_UINT8, usub, 0);
  check_bin(EM_ADD, EM_UINT8, EM_UINT8, 2, u1, u2, EM_UINT8, uadd, 0);
}

static void test_compare_logical(void **state) {
  (void)state;
  const double a[] = {1, 2, 3, NAN, 0, -1};
  const double b[] = {2, 2, 1, 1, NAN, 0};
  const double eq[] = {0, 1, 0, 0, 0, 0}, ne[] = {1, 0, 1, 1, 1, 1}, lt[] = {1, 0, 0, 0, 0, 1};
  const double le[] = {1, 1, 0, 0, 0, 1}, gt[] = {0, 0, 1, 0, 0, 0}, ge[] = {0, 1, 1, 0, 0, 0};
  /* NaN is nonzero, so it is true in logical ops (as in PyTorch) */
  const double land[] = {1, 1, 1, 1, 0, 0}, lor[] = {1, 1, 1, 1, 1, 1}, lxor[] = {0, 0, 0, 0, 1, 1};
  for (int k = 0; k < 2; k++) {
    em_dtype d = FLOATS[k];
    check_bin(EM_EQ, d, d, 6, a, b, EM_BOOL, eq, 0);
    check_bin(EM_NE, d, d, 6, a, b, EM_BOOL, ne, 0);
    check_bin(EM_LT, d, d, 6, a, b, EM_BOOL, lt, 0);
    check_bin(EM_LE, d, d, 6, a, b, EM_BOOL, le, 0);
    check_bin(EM_GT, d, d, 6, a, b, EM_BOOL, gt, 0);
    check_bin(EM_GE, d, d, 6, a, b, EM_BOOL, ge, 0);
    check_bin(EM_LOGICAL_AND, d, d, 6, a, b, EM_BOOL, land, 0);
    check_bin(EM_LOGICAL_OR, d, d, 6, a, b, EM_BOOL, lor, 0);
    check_bin(EM_LOGICAL_XOR, d, d, 6, a, b, EM_BOOL, lxor, 0);
  }
  const double ia[] = {1, 2, 3, 0}, ib[] = {2, 2, 1, 5};
  const double ilt[] = {1, 0, 0, 1}, iand[] = {1, 1, 1, 0}, ixor[] = {0, 0, 0, 1};
  check_bin(EM_LT, EM_INT32, EM_INT64, 4, ia, ib, EM_BOOL, ilt, 0);
  check_bin(EM_LOGICAL_AND, EM_INT64, EM_INT64, 4, ia, ib, EM_BOOL, iand, 0);
  check_bin(EM_LOGICAL_XOR, EM_INT32, EM_FLOAT32, 4, ia, ib, EM_BOOL, ixor, 0);
  /* bool with bool: add is or, mul is and, maximum/minimum too */
  const double p[] = {0, 0, 1, 1}, q[] = {0, 1, 0, 1}, por[] = {0, 1, 1, 1}, pand[] = {0, 0, 0, 1};
  check_bin(EM_ADD, EM_BOOL, EM_BOOL, 4, p, q, EM_BOOL, por, 0);
  check_bin(EM_MUL, EM_BOOL, EM_BOOL, 4, p, q, EM_BOOL, pand, 0);
  check_bin(EM_MAXIMUM, EM_BOOL, EM_BOOL, 4, p, q, EM_BOOL, por, 0);
  check_bin(EM_MINIMUM, EM_BOOL, EM_BOOL, 4, p, q, EM_BOOL, pand, 0);
  check_bin(EM_EQ, EM_BOOL, EM_BOOL, 4, p, q, EM_BOOL, (const double[]){1, 0, 0, 1}, 0);
}

static void test_nan_maximum_minimum(void **state) {
  (void)state;
  const double a[] = {NAN, 1, NAN, -INFINITY}, b[] = {1, NAN, NAN, 2};
  const double want_max[] = {NAN, NAN, NAN, 2}, want_min[] = {NAN, NAN, NAN, -INFINITY};
  for (int k = 0; k < 2; k++) {
    check_bin(EM_MAXIMUM, FLOATS[k], FLOATS[k], 4, a, b, FLOATS[k], want_max, 0);
    check_bin(EM_MINIMUM, FLOATS[k], FLOATS[k], 4, a, b, FLOATS[k], want_min, 0);
  }
  /* the scalar path (stride 0 operand) propagates too */
  check_scalar(EM_MAXIMUM, EM_FLOAT32, 4, a, 0.5, 0, EM_FLOAT32, (const double[]){NAN, 1, NAN, 0.5}, 0);
  check_scalar(EM_MINIMUM, EM_FLOAT32, 4, a, NAN, 0, EM_FLOAT32, (const double[]){NAN, NAN, NAN, NAN}, 0);
}

static void test_promotion(void **state) {
  (void)state;
  const double a[] = {1, 2}, b[] = {3, 4}, s[] = {4, 6};
  check_bin(EM_ADD, EM_INT32, EM_FLOAT32, 2, a, b, EM_FLOAT32, s, 0);
  check_bin(EM_ADD, EM_UINT8, EM_INT32, 2, a, b, EM_INT32, s, 0);
  check_bin(EM_ADD, EM_INT32, EM_INT64, 2, a, b, EM_INT64, s, 0);
  check_bin(EM_ADD, EM_FLOAT32, EM_FLOAT64, 2, a, b, EM_FLOAT64, s, 0);
  check_bin(EM_ADD, EM_BOOL, EM_UINT8, 2, (const double[]){1, 0}, b, EM_UINT8, (const double[]){4, 4}, 0);
  check_bin(EM_ADD, EM_INT64, EM_FLOAT32, 2, a, b, EM_FLOAT32, s, 0);
  check_bin(EM_MUL, EM_BOOL, EM_FLOAT64, 2, (const double[]){1, 0}, b, EM_FLOAT64, (const double[]){3, 0}, 0);
  check_bin(EM_DIV, EM_BOOL, EM_BOOL, 2, (const double[]){1, 0}, (const double[]){1, 1}, EM_FLOAT32,
            (const double[]){1, 0}, 0);
}

/* ---- shapes and layouts ---- */

static void test_broadcast(void **state) {
  (void)state;
  int64_t sa[] = {2, 1, 3}, sb[] = {4, 1}, so[] = {2, 4, 3};
  double av[6], bv[4], want_add[24], want_lt[24];
  for (int i = 0; i < 6; i++) av[i] = i;
  for (int i = 0; i < 4; i++) bv[i] = 10 * i - 15;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++)
      for (int k = 0; k < 3; k++) {
        want_add[i * 12 + j * 3 + k] = av[i * 3 + k] + bv[j];
        want_lt[i * 12 + j * 3 + k] = av[i * 3 + k] < bv[j];
      }
  em_dtype dts[] = {EM_FLOAT32, EM_FLOAT64, EM_INT32, EM_INT64};
  for (int k = 0; k < 4; k++) {
    em_tensor *a = mk(dts[k], 3, sa, av), *b = mk(dts[k], 2, sb, bv), *out = NULL, *cmp = NULL, *rev = NULL;
    assert_int_equal(em_binary(EM_ADD, &out, a, b), EM_OK);
    expect(out, dts[k], 3, so, want_add, 0);
    assert_int_equal(em_binary(EM_ADD, &rev, b, a), EM_OK); /* the other way round */
    expect(rev, dts[k], 3, so, want_add, 0);
    assert_int_equal(em_binary(EM_LT, &cmp, a, b), EM_OK);
    expect(cmp, EM_BOOL, 3, so, want_lt, 0);
    em_tensor_release(a), em_tensor_release(b), em_tensor_release(out);
    em_tensor_release(cmp), em_tensor_release(rev);
  }
  /* a 0-d tensor broadcasts against anything */
  em_tensor *z = NULL, *v = vec(EM_FLOAT32, 3, (const double[]){1, 2, 3}), *out = NULL;
  assert_int_equal(em_full(&z, 0, NULL, 10, EM_FLOAT32, CPU), EM_OK);
  assert_int_equal(em_binary(EM_SUB, &out, z, v), EM_OK);
  expect_vec(out, EM_FLOAT32, 3, (const double[]){9, 8, 7}, 0);
  em_tensor_release(z), em_tensor_release(v), em_tensor_release(out);
}

static void test_strided(void **state) {
  (void)state;
  /* a is [3, 4] transposed to [4, 3]; b is a contiguous [4, 3]; out written transposed too */
  int64_t s34[] = {3, 4}, s43[] = {4, 3};
  double av[12], bv[12], want[12];
  for (int i = 0; i < 12; i++) av[i] = i * 1.5, bv[i] = 100 - i;
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 3; j++) want[i * 3 + j] = av[j * 4 + i] * bv[i * 3 + j];
  for (int k = 0; k < 2; k++) {
    em_tensor *a = mk(FLOATS[k], 2, s34, av), *at = NULL, *b = mk(FLOATS[k], 2, s43, bv), *out = NULL;
    assert_int_equal(em_transpose(&at, a, 0, 1), EM_OK);
    assert_int_equal(em_binary(EM_MUL, &out, at, b), EM_OK);
    expect(out, FLOATS[k], 2, s43, want, 0);
    /* a transposed output buffer */
    em_tensor *buf = NULL, *outt = NULL;
    assert_int_equal(em_empty(&buf, 2, s34, FLOATS[k], CPU), EM_OK);
    assert_int_equal(em_transpose(&outt, buf, 0, 1), EM_OK);
    assert_int_equal(em_binary(EM_MUL, &outt, at, b), EM_OK);
    expect(outt, FLOATS[k], 2, s43, want, 0);
    /* unary and scalar ops on the strided view */
    em_tensor *neg = NULL, *half = NULL;
    assert_int_equal(em_unary(EM_NEG, &neg, at), EM_OK);
    assert_int_equal(em_binary_scalar(EM_MUL, &half, at, 0.5, 0), EM_OK);
    for (int i = 0; i < 12; i++) {
      assert_true(tensor_flat_get(neg, i) == -tensor_flat_get(at, i));
      assert_true(tensor_flat_get(half, i) == 0.5 * tensor_flat_get(at, i));
    }
    em_tensor_release(a), em_tensor_release(at), em_tensor_release(b), em_tensor_release(out);
    em_tensor_release(buf), em_tensor_release(outt), em_tensor_release(neg), em_tensor_release(half);
  }
}

static void test_inplace(void **state) {
  (void)state;
  int64_t s[] = {3, 3};
  double av[9], bv[9];
  for (int i = 0; i < 9; i++) av[i] = i, bv[i] = 2 * i + 1;
  em_tensor *a = mk(EM_FLOAT32, 2, s, av), *b = mk(EM_FLOAT32, 2, s, bv), *out = a;
  void *data = em_tensor_data(a);
  /* a += b: the result lands in a's memory */
  assert_int_equal(em_binary(EM_ADD, &out, a, b), EM_OK);
  assert_ptr_equal(out, a);
  assert_ptr_equal(em_tensor_data(a), data);
  for (int i = 0; i < 9; i++) assert_true(tensor_flat_get(a, i) == av[i] + bv[i]);
  /* a = a * a (out, a and b all the same tensor) */
  assert_int_equal(em_binary(EM_MUL, &out, a, a), EM_OK);
  for (int i = 0; i < 9; i++) assert_true(tensor_flat_get(a, i) == (av[i] + bv[i]) * (av[i] + bv[i]));
  /* a += a^T overlaps partially: computed from the old values, as if a^T were copied */
  em_tensor *c = mk(EM_FLOAT64, 2, s, av), *ct = NULL, *oc = c;
  assert_int_equal(em_transpose(&ct, c, 0, 1), EM_OK);
  assert_int_equal(em_binary(EM_ADD, &oc, c, ct), EM_OK);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) assert_true(tensor_flat_get(c, i * 3 + j) == av[i * 3 + j] + av[j * 3 + i]);
  /* c -= c[0] (row 0 broadcast over the rows it is about to overwrite) */
  double before[9];
  for (int i = 0; i < 9; i++) before[i] = tensor_flat_get(c, i);
  em_tensor *row = NULL;
  assert_int_equal(em_select(&row, c, 0, 0), EM_OK);
  assert_int_equal(em_binary(EM_SUB, &oc, c, row), EM_OK);
  for (int i = 0; i < 9; i++) assert_true(tensor_flat_get(c, i) == before[i] - before[i % 3]);
  /* unary, scalar, clamp, where, add_scaled in place */
  assert_int_equal(em_unary(EM_NEG, &oc, c), EM_OK);
  assert_int_equal(em_binary_scalar(EM_ADD, &oc, c, 1, 0), EM_OK);
  assert_int_equal(em_clamp(&oc, c, -5, 5), EM_OK);
  for (int i = 0; i < 9; i++) assert_true(tensor_flat_get(c, i) == fmin(5, fmax(-5, -(before[i] - before[i % 3]) + 1)));
  em_tensor *d = mk(EM_FLOAT64, 2, s, bv), *od = d;
  assert_int_equal(em_add_scaled(&od, d, c, -2), EM_OK);
  for (int i = 0; i < 9; i++) assert_true(tensor_flat_get(d, i) == bv[i] - 2 * tensor_flat_get(c, i));
  /* a float64 result goes into the float32 a (same kind: converted) */
  em_tensor *f64 = mk(EM_FLOAT64, 2, s, bv), *oa = a;
  assert_int_equal(em_binary(EM_SUB, &oa, a, f64), EM_OK); /* float64 result into float32 a */
  assert_int_equal(em_tensor_dtype(a), EM_FLOAT32);
  for (int i = 0; i < 9; i++) assert_true(tensor_flat_get(a, i) == (av[i] + bv[i]) * (av[i] + bv[i]) - bv[i]);
  em_tensor_release(a), em_tensor_release(b), em_tensor_release(c), em_tensor_release(ct), em_tensor_release(row);
  em_tensor_release(d), em_tensor_release(f64);
}

static void test_out_preallocated(void **state) {
  (void)state;
  const double a[] = {1, 2, 3}, b[] = {4, 5, 6};
  em_tensor *ta = vec(EM_INT32, 3, a), *tb = vec(EM_INT32, 3, b), *out = NULL, *given;
  int64_t n = 3;
  /* same dtype: written in place of the given tensor */
  assert_int_equal(em_zeros(&out, 1, &n, EM_INT32, CPU), EM_OK);
  given = out;
  assert_int_equal(em_binary(EM_MUL, &out, ta, tb), EM_OK);
  assert_ptr_equal(out, given);
  expect_vec(out, EM_INT32, 3, (const double[]){4, 10, 18}, 0);
  em_tensor_release(out);
  /* int result into a float64 tensor: allowed (converted) */
  out = NULL;
  assert_int_equal(em_zeros(&out, 1, &n, EM_FLOAT64, CPU), EM_OK);
  assert_int_equal(em_binary(EM_ADD, &out, ta, tb), EM_OK);
  expect_vec(out, EM_FLOAT64, 3, (const double[]){5, 7, 9}, 0);
  /* a bool comparison into the float64 tensor: allowed */
  assert_int_equal(em_binary(EM_LT, &out, tb, (const em_tensor *)ta), EM_OK);
  expect_vec(out, EM_FLOAT64, 3, (const double[]){0, 0, 0}, 0);
  /* int64 result into an int32 tensor: allowed (same kind) */
  em_tensor *t64 = vec(EM_INT64, 3, b), *o32 = ta;
  assert_int_equal(em_binary(EM_ADD, &o32, ta, t64), EM_OK);
  expect_vec(ta, EM_INT32, 3, (const double[]){5, 7, 9}, 0);
  em_tensor_release(out), em_tensor_release(t64), em_tensor_release(ta), em_tensor_release(tb);
}

/* ---- scalars ---- */

static void test_scalar(void **state) {
  (void)state;
  const double a[] = {1, 2, 4, -3};
  check_scalar(EM_ADD, EM_INT32, 4, a, 2, 0, EM_INT32, (const double[]){3, 4, 6, -1}, 0);
  check_scalar(EM_ADD, EM_INT32, 4, a, 2.5, 0, EM_FLOAT32, (const double[]){3.5, 4.5, 6.5, -0.5}, 0);
  check_scalar(EM_ADD, EM_FLOAT64, 4, a, 0.1, 0, EM_FLOAT64, (const double[]){1.1, 2.1, 4.1, -2.9}, 0);
  check_scalar(EM_ADD, EM_FLOAT32, 4, a, 0.1, 0, EM_FLOAT32, (const double[]){1.1f, 2.1f, 4.1f, -2.9f},
               1e-7); /* the scalar is rounded to float32 */
  check_scalar(EM_SUB, EM_INT64, 4, a, 10, 0, EM_INT64, (const double[]){-9, -8, -6, -13}, 0);
  check_scalar(EM_SUB, EM_INT64, 4, a, 10, 1, EM_INT64, (const double[]){9, 8, 6, 13}, 0); /* 10 - a */
  check_scalar(EM_MUL, EM_FLOAT32, 4, a, -2, 0, EM_FLOAT32, (const double[]){-2, -4, -8, 6}, 0);
  check_scalar(EM_DIV, EM_INT32, 4, a, 2, 0, EM_FLOAT32, (const double[]){0.5, 1, 2, -1.5}, 0);
  check_scalar(EM_DIV, EM_FLOAT64, 4, a, 2, 1, EM_FLOAT64, (const double[]){2, 1, 0.5, -2.0 / 3}, 1e-15); /* 2 / a */
  check_scalar(EM_POW, EM_INT32, 4, a, 3, 0, EM_INT32, (const double[]){1, 8, 64, -27}, 0);
  check_scalar(EM_POW, EM_INT32, 4, a, 2, 0, EM_INT32, (const double[]){1, 4, 16, 9}, 0);
  check_scalar(EM_POW, EM_INT64, 3, a, 2, 1, EM_INT64, (const double[]){2, 4, 16}, 0); /* 2 ^ a */
  check_scalar(EM_POW, EM_FLOAT32, 3, a, 0.5, 0, EM_FLOAT32, (const double[]){1, sqrt(2), 2}, 1e-7);
  check_scalar(EM_POW, EM_FLOAT64, 4, a, -1, 0, EM_FLOAT64, (const double[]){1, 0.5, 0.25, -1.0 / 3}, 1e-15);
  check_scalar(EM_POW, EM_FLOAT64, 4, a, 1, 0, EM_FLOAT64, a, 0);
  check_scalar(EM_POW, EM_FLOAT64, 4, a, 2, 0, EM_FLOAT64, (const double[]){1, 4, 16, 9}, 0);
  check_scalar(EM_POW, EM_FLOAT64, 3, a, 1.5, 0, EM_FLOAT64, (const double[]){1, pow(2, 1.5), 8}, 1e-15);
  check_scalar(EM_POW, EM_INT32, 2, a, 0.5, 0, EM_FLOAT32, (const double[]){1, sqrt(2)}, 1e-7);
  check_scalar(EM_POW, EM_FLOAT32, 4, a, 2, 1, EM_FLOAT32, (const double[]){2, 4, 16, 0.125}, 0);
  check_scalar(EM_FMOD, EM_INT32, 4, a, 3, 0, EM_INT32, (const double[]){1, 2, 1, 0}, 0);
  check_scalar(EM_FMOD, EM_INT32, 4, a, 7, 1, EM_INT32, (const double[]){0, 1, 3, 1}, 0); /* 7 fmod a */
  check_scalar(EM_FMOD, EM_FLOAT64, 4, a, -1.5, 0, EM_FLOAT64, (const double[]){1, 0.5, 1, 0}, 0);
  check_scalar(EM_MAXIMUM, EM_INT32, 4, a, 2, 0, EM_INT32, (const double[]){2, 2, 4, 2}, 0);
  check_scalar(EM_LT, EM_INT32, 4, a, 2, 0, EM_BOOL, (const double[]){1, 0, 0, 1}, 0);
  check_scalar(EM_LT, EM_INT32, 4, a, 2, 1, EM_BOOL, (const double[]){0, 0, 1, 0}, 0); /* 2 < a */
  check_scalar(EM_LE, EM_INT32, 4, a, 1.5, 0, EM_BOOL, (const double[]){1, 0, 0, 1}, 0); /* compared as float */
  check_scalar(EM_GE, EM_FLOAT32, 4, a, 2, 0, EM_BOOL, (const double[]){0, 1, 1, 0}, 0);
  check_scalar(EM_EQ, EM_FLOAT64, 4, a, 4, 0, EM_BOOL, (const double[]){0, 0, 1, 0}, 0);
  check_scalar(EM_LOGICAL_AND, EM_FLOAT64, 4, a, 0, 0, EM_BOOL, (const double[]){0, 0, 0, 0}, 0);
  /* bool tensor with an integer scalar gives int64, with a float scalar float32 */
  const double t[] = {1, 0};
  check_scalar(EM_ADD, EM_BOOL, 2, t, 2, 0, EM_INT64, (const double[]){3, 2}, 0);
  check_scalar(EM_MUL, EM_BOOL, 2, t, 2.5, 0, EM_FLOAT32, (const double[]){2.5, 0}, 0);
  /* uint8 takes negative scalars by wrapping */
  check_scalar(EM_ADD, EM_UINT8, 2, (const double[]){1, 200}, -1, 0, EM_UINT8, (const double[]){0, 199}, 0);
  check_scalar(EM_ADD, EM_UINT8, 2, (const double[]){1, 200}, 100, 0, EM_UINT8, (const double[]){101, 44}, 0);
}

/* ---- unary ---- */

static void test_unary_float(void **state) {
  (void)state;
  const double x0[] = {-2.5, -0.5, 0, 0.3, 1, 2.5};
  double w[6], x[6];
#define FOR_EACH(EXPR) \
  for (int i = 0; i < 6; i++) w[i] = (EXPR)
  for (int k = 0; k < 2; k++) {
    em_dtype d = FLOATS[k];
    for (int i = 0; i < 6; i++) x[i] = d == EM_FLOAT32 ? (float)x0[i] : x0[i]; /* the values the tensor holds */
    double tol = d == EM_FLOAT32 ? 3e-7 : 1e-15;
    FOR_EACH(-x[i]);
    check_unary(EM_NEG, d, 6, x, d, w, 0);
    FOR_EACH(fabs(x[i]));
    check_unary(EM_ABS, d, 6, x, d, w, 0);
    FOR_EACH(exp(x[i]));
    check_unary(EM_EXP, d, 6, x, d, w, tol);
    FOR_EACH(tanh(x[i]));
    check_unary(EM_TANH, d, 6, x, d, w, tol);
    FOR_EACH(1 / (1 + exp(-x[i])));
    check_unary(EM_SIGMOID, d, 6, x, d, w, tol);
    FOR_EACH(x[i] / (1 + exp(-x[i])));
    check_unary(EM_SILU, d, 6, x, d, w, tol);
    FOR_EACH(0.5 * x[i] * (1 + erf(x[i] / sqrt(2))));
    check_unary(EM_GELU, d, 6, x, d, w, tol);
    FOR_EACH(erf(x[i]));
    check_unary(EM_ERF, d, 6, x, d, w, tol);
    FOR_EACH(sin(x[i]));
    check_unary(EM_SIN, d, 6, x, d, w, tol);
    FOR_EACH(cos(x[i]));
    check_unary(EM_COS, d, 6, x, d, w, tol);
    FOR_EACH(expm1(x[i]));
    check_unary(EM_EXPM1, d, 6, x, d, w, tol);
    FOR_EACH(x[i] > 0 ? x[i] : 0);
    check_unary(EM_RELU, d, 6, x, d, w, 0);
    FOR_EACH((x[i] > 0) - (x[i] < 0));
    check_unary(EM_SIGN, d, 6, x, d, w, 0);
    FOR_EACH(x[i] * x[i]);
    check_unary(EM_SQUARE, d, 6, x, d, w, tol);
    FOR_EACH(floor(x[i]));
    check_unary(EM_FLOOR, d, 6, x, d, w, 0);
    FOR_EACH(ceil(x[i]));
    check_unary(EM_CEIL, d, 6, x, d, w, 0);
    FOR_EACH(x[i] == 0);
    check_unary(EM_LOGICAL_NOT, d, 6, x, EM_BOOL, w, 0);
    FOR_EACH(1 / x[i]);
    check_unary(EM_RECIPROCAL, d, 6, x, d, w, tol);
    const double p[] = {0.25, 1, 4, 9, 0, -1};
    const double plog[] = {log(0.25), 0, log(4), log(9), -INFINITY, NAN};
    const double psqrt[] = {0.5, 1, 2, 3, 0, NAN}, prsqrt[] = {2, 1, 0.5, 1.0 / 3, INFINITY, NAN};
    const double plog1p[] = {log1p(0.25), log(2), log(5), log(10), 0, -INFINITY};
    check_unary(EM_LOG, d, 6, p, d, plog, tol);
    check_unary(EM_SQRT, d, 6, p, d, psqrt, 0);
    check_unary(EM_RSQRT, d, 6, p, d, prsqrt, tol);
    check_unary(EM_LOG1P, d, 6, p, d, plog1p, tol);
    /* round is half to even; floor/ceil keep the sign of zero-crossing values */
    const double r[] = {0.5, 1.5, 2.5, -0.5, -1.5, 2.4999, -2.6, NAN};
    check_unary(EM_ROUND, d, 8, r, d, (const double[]){0, 2, 2, -0.0, -2, 2, -3, NAN}, 0);
    check_unary(EM_FLOOR, d, 8, r, d, (const double[]){0, 1, 2, -1, -2, 2, -3, NAN}, 0);
    check_unary(EM_CEIL, d, 8, r, d, (const double[]){1, 2, 3, -0.0, -1, 3, -2, NAN}, 0);
    /* NaN: sign gives 0 and relu keeps NaN (as PyTorch); inf edges */
    const double e[] = {NAN, INFINITY, -INFINITY};
    check_unary(EM_SIGN, d, 3, e, d, (const double[]){0, 1, -1}, 0);
    check_unary(EM_RELU, d, 3, e, d, (const double[]){NAN, INFINITY, 0}, 0);
    check_unary(EM_EXP, d, 3, e, d, (const double[]){NAN, INFINITY, 0}, 0);
    check_unary(EM_TANH, d, 3, e, d, (const double[]){NAN, 1, -1}, 0);
    check_unary(EM_SIGMOID, d, 3, e, d, (const double[]){NAN, 1, 0}, 0);
    check_unary(EM_ERF, d, 3, e, d, (const double[]){NAN, 1, -1}, 0);
    check_unary(EM_GELU, d, 2, e, d, (const double[]){NAN, INFINITY}, 0);
    const double far[] = {-30, -12, 12, 30, 1e30};
    check_unary(EM_ERF, d, 5, far, d, (const double[]){-1, -1, 1, 1, 1}, 0);
    check_unary(EM_GELU, d, 5, far, d, (const double[]){0, 0.5 * -12 * erfc(12 / sqrt(2)), 12, 30, 1e30}, 1e-6);
  }
  /* ceil(-0.5) is -0.0 */
  em_tensor *t = vec(EM_FLOAT32, 1, (const double[]){-0.5}), *c = NULL;
  assert_int_equal(em_unary(EM_CEIL, &c, t), EM_OK);
  assert_true(signbit(tensor_flat_get(c, 0)));
  em_tensor_release(t), em_tensor_release(c);
#undef FOR_EACH
}

static void test_unary_int(void **state) {
  (void)state;
  const double x[] = {-3, -1, 0, 2, 7};
  for (int k = 0; k < 2; k++) {
    em_dtype d = INTS[k];
    check_unary(EM_NEG, d, 5, x, d, (const double[]){3, 1, 0, -2, -7}, 0);
    check_unary(EM_ABS, d, 5, x, d, (const double[]){3, 1, 0, 2, 7}, 0);
    check_unary(EM_SIGN, d, 5, x, d, (const double[]){-1, -1, 0, 1, 1}, 0);
    check_unary(EM_RELU, d, 5, x, d, (const double[]){0, 0, 0, 2, 7}, 0);
    check_unary(EM_SQUARE, d, 5, x, d, (const double[]){9, 1, 0, 4, 49}, 0);
    check_unary(EM_FLOOR, d, 5, x, d, x, 0);
    check_unary(EM_CEIL, d, 5, x, d, x, 0);
    check_unary(EM_ROUND, d, 5, x, d, x, 0);
    check_unary(EM_LOGICAL_NOT, d, 5, x, EM_BOOL, (const double[]){0, 0, 1, 0, 0}, 0);
    /* functions of reals give float32 */
    check_unary(EM_EXP, d, 5, x, EM_FLOAT32, (const double[]){exp(-3), exp(-1), 1, exp(2), exp(7)}, 3e-7);
    check_unary(EM_SQRT, d, 5, x, EM_FLOAT32, (const double[]){NAN, NAN, 0, sqrt(2), sqrt(7)}, 3e-7);
    check_unary(EM_RECIPROCAL, d, 5, x, EM_FLOAT32, (const double[]){-1.0 / 3, -1, INFINITY, 0.5, 1.0 / 7}, 3e-7);
  }
  const double b[] = {1, 0};
  check_unary(EM_SIGMOID, EM_BOOL, 2, b, EM_FLOAT32, (const double[]){1 / (1 + exp(-1)), 0.5}, 3e-7);
  check_unary(EM_LOGICAL_NOT, EM_BOOL, 2, b, EM_BOOL, (const double[]){0, 1}, 0);
  check_unary(EM_ABS, EM_BOOL, 2, b, EM_BOOL, b, 0);
  check_unary(EM_NEG, EM_UINT8, 2, (const double[]){1, 0}, EM_UINT8, (const double[]){255, 0}, 0);
  check_unary(EM_ABS, EM_INT32, 1, (const double[]){-2147483648.0}, EM_INT32, (const double[]){-2147483648.0}, 0);
}

/* float32 exp/tanh/sigmoid/silu/erf/gelu are polynomial code, not libm: check them in ulps
 * over dense sweeps (which also run the vector loop and the parallel split). */
static double ulp_err(float got, double want) {
  if (isnan(want)) return isnan(got) ? 0 : INFINITY;
  if (isinf(want) || (float)want == 0 || isinf((float)want)) return got == (float)want ? 0 : INFINITY;
  float w = (float)want;
  /* Subnormal results carry fewer bits (silu multiplies that error by |x| <= 104): they
   * are checked to an absolute 2^-142, about 1e-43. */
  if (fabs(want) < FLT_MIN) return fabs((double)got - want) <= ldexp(1, -142) ? 0 : INFINITY;
  double ulp = nextafterf(fabsf(w), INFINITY) - fabsf(w);
  return fabs((double)got - want) / ulp;
}

static double reference(em_unop op, double v) {
  switch (op) {
    case EM_EXP: return exp(v);
    case EM_TANH: return tanh(v);
    case EM_SIGMOID: return 1 / (1 + exp(-v));
    case EM_SILU: return v / (1 + exp(-v));
    case EM_ERF: return erf(v);
    default: return v < -5 ? 0.5 * v * erfc(-v / sqrt(2)) : 0.5 * v * (1 + erf(v / sqrt(2))); /* gelu */
  }
}

static void test_vector_math_accuracy(void **state) {
  (void)state;
  em_set_num_threads(2);
  struct {
    em_unop op;
    double lo, hi, max_ulp;
  } cases[] = {{EM_EXP, -104, 89, 2},  {EM_TANH, -20, 20, 3}, {EM_SIGMOID, -104, 89, 3},
               {EM_SILU, -104, 89, 4}, {EM_ERF, -12, 12, 2},  {EM_GELU, -16, 16, 8}};
  int64_t n = 400001;
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    em_tensor *x = NULL, *y = NULL;
    assert_int_equal(em_linspace(&x, cases[c].lo, cases[c].hi, n, EM_FLOAT32, CPU), EM_OK);
    assert_int_equal(em_unary(cases[c].op, &y, x), EM_OK);
    const float *xv = em_tensor_data(x), *yv = em_tensor_data(y);
    double worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
      double v = xv[i], want = reference(cases[c].op, v);
      double e = ulp_err(yv[i], want);
      /* below x = -87.3 sigmoid(x) is subnormal, and silu = x * sigmoid(x) keeps its
       * absolute error (PyTorch gives 0 there): check that error instead */
      if (cases[c].op == EM_SILU && v < -87.3) e = fabs(yv[i] - want) <= ldexp(-v, -147) ? 0 : INFINITY;
      if (e > worst) worst = e, at = i;
    }
    if (worst > cases[c].max_ulp)
      fail_msg("op %d: %.2f ulp at x = %.9g (got %.9g, expected %.9g)", cases[c].op, worst, xv[at], yv[at],
               reference(cases[c].op, xv[at]));
    em_tensor_release(x), em_tensor_release(y);
  }
}

/* ---- where, clamp, add_scaled ---- */

static void test_where(void **state) {
  (void)state;
  int64_t sc[] = {2, 1}, sa[] = {3};
  em_tensor *c = mk(EM_BOOL, 2, sc, (const double[]){1, 0}), *a = mk(EM_INT32, 1, sa, (const double[]){1, 2, 3});
  em_tensor *b = vec(EM_FLOAT32, 1, (const double[]){-0.5}), *out = NULL;
  assert_int_equal(em_where(&out, c, a, b), EM_OK);
  int64_t so[] = {2, 3};
  expect(out, EM_FLOAT32, 2, so, (const double[]){1, 2, 3, -0.5, -0.5, -0.5}, 0);
  em_tensor_release(out);
  /* uint8 condition, float64, int64 and bool values */
  em_tensor *cu = vec(EM_UINT8, 3, (const double[]){0, 7, 1});
  const em_dtype dts[] = {EM_FLOAT64, EM_INT64, EM_BOOL, EM_FLOAT16};
  for (int k = 0; k < 4; k++) {
    em_tensor *x = vec(dts[k], 3, (const double[]){1, 1, 1}), *y = vec(dts[k], 3, (const double[]){0, 0, 0});
    out = NULL;
    assert_int_equal(em_where(&out, cu, x, y), EM_OK);
    expect_vec(out, dts[k], 3, (const double[]){0, 1, 1}, 0);
    em_tensor_release(x), em_tensor_release(y), em_tensor_release(out);
  }
  /* errors: non-bool condition, three shapes that do not broadcast */
  out = NULL;
  expect_error(em_where(&out, a, a, b), EM_ERR_DTYPE, "condition must be a bool");
  em_tensor *bad = vec(EM_FLOAT32, 2, (const double[]){0, 0});
  expect_error(em_where(&out, cu, a, bad), EM_ERR_SHAPE, "shapes [3] (condition), [3] and [2] cannot be broadcast");
  assert_null(out);
  em_tensor_release(c), em_tensor_release(a), em_tensor_release(b), em_tensor_release(cu), em_tensor_release(bad);
}

static void test_clamp(void **state) {
  (void)state;
  const double x[] = {-3, -1, 0, 2, 7, NAN};
  for (int k = 0; k < 2; k++) {
    em_dtype d = FLOATS[k];
    em_tensor *t = vec(d, 6, x), *o = NULL;
    assert_int_equal(em_clamp(&o, t, -1.5, 2.5), EM_OK);
    expect_vec(o, d, 6, (const double[]){-1.5, -1, 0, 2, 2.5, NAN}, 0);
    em_tensor_release(o), o = NULL;
    assert_int_equal(em_clamp(&o, t, NAN, 1), EM_OK); /* no lower bound */
    expect_vec(o, d, 6, (const double[]){-3, -1, 0, 1, 1, NAN}, 0);
    em_tensor_release(o), o = NULL;
    assert_int_equal(em_clamp(&o, t, 0, NAN), EM_OK); /* no upper bound */
    expect_vec(o, d, 6, (const double[]){0, 0, 0, 2, 7, NAN}, 0);
    em_tensor_release(o), o = NULL;
    assert_int_equal(em_clamp(&o, t, 3, 1), EM_OK); /* low > high: high */
    expect_vec(o, d, 6, (const double[]){1, 1, 1, 1, 1, NAN}, 0);
    em_tensor_release(o), em_tensor_release(t);
  }
  const double xi[] = {-3, -1, 0, 2, 7};
  em_tensor *ti = vec(EM_INT32, 5, xi), *o = NULL;
  assert_int_equal(em_clamp(&o, ti, -1, 2), EM_OK);
  expect_vec(o, EM_INT32, 5, (const double[]){-1, -1, 0, 2, 2}, 0);
  em_tensor_release(o), o = NULL;
  assert_int_equal(em_clamp(&o, ti, -1e12, 1e12), EM_OK); /* bounds beyond int32: no bound */
  expect_vec(o, EM_INT32, 5, xi, 0);
  em_tensor_release(o), o = NULL;
  assert_int_equal(em_clamp(&o, ti, 0.5, 2.5), EM_OK); /* float bounds promote, as PyTorch */
  expect_vec(o, EM_FLOAT32, 5, (const double[]){0.5, 0.5, 0.5, 2, 2.5}, 0);
  em_tensor_release(o), o = NULL;
  em_tensor *tu = vec(EM_UINT8, 3, (const double[]){0, 100, 255});
  assert_int_equal(em_clamp(&o, tu, 50, 300), EM_OK);
  expect_vec(o, EM_UINT8, 3, (const double[]){50, 100, 255}, 0);
  em_tensor_release(o), em_tensor_release(ti), em_tensor_release(tu);
}

static void test_add_scaled(void **state) {
  (void)state;
  int64_t sa[] = {2, 2};
  em_tensor *a = mk(EM_FLOAT32, 2, sa, (const double[]){1, 2, 3, 4});
  em_tensor *b = vec(EM_FLOAT32, 2, (const double[]){10, 20});
  em_tensor *out = NULL;
  assert_int_equal(em_add_scaled(&out, a, b, 0.5), EM_OK);
  expect(out, EM_FLOAT32, 2, sa, (const double[]){6, 12, 8, 14}, 0);
  em_tensor_release(out), out = NULL;
  em_tensor *ai = vec(EM_INT64, 2, (const double[]){1, 2}), *bi = vec(EM_INT32, 2, (const double[]){5, -5});
  assert_int_equal(em_add_scaled(&out, ai, bi, -3), EM_OK);
  expect_vec(out, EM_INT64, 2, (const double[]){-14, 17}, 0);
  em_tensor_release(out), out = NULL;
  assert_int_equal(em_add_scaled(&out, ai, b, 0.5), EM_OK); /* int64 + float32 */
  expect_vec(out, EM_FLOAT32, 2, (const double[]){6, 12}, 0);
  em_tensor_release(out), out = NULL;
  em_tensor *f64 = vec(EM_FLOAT64, 2, (const double[]){0.1, 0.2});
  assert_int_equal(em_add_scaled(&out, f64, f64, 1e-3), EM_OK);
  expect_vec(out, EM_FLOAT64, 2, (const double[]){0.1 + 1e-4, 0.2 + 2e-4}, 1e-16);
  em_tensor_release(out), out = NULL;
  expect_error(em_add_scaled(&out, ai, bi, 0.5), EM_ERR_ARGUMENT, "alpha 0.5 must be an integer for int64");
  assert_null(out);
  em_tensor_release(a), em_tensor_release(b), em_tensor_release(ai), em_tensor_release(bi), em_tensor_release(f64);
}

/* ---- the parallel path against a serial reference ---- */

static void test_large_parallel(void **state) {
  (void)state;
  em_set_num_threads(2);
  int64_t rows = 1001, cols = 257, s2[] = {rows, cols}, n = rows * cols; /* well above the parallel grain */
  em_tensor *a = NULL, *b = NULL, *col = NULL, *at = NULL;
  assert_int_equal(em_empty(&a, 2, s2, EM_FLOAT32, CPU), EM_OK);
  assert_int_equal(em_empty(&b, 2, s2, EM_FLOAT32, CPU), EM_OK);
  assert_int_equal(em_empty(&col, 2, (const int64_t[]){rows, 1}, EM_FLOAT32, CPU), EM_OK);
  float *av = em_tensor_data(a), *bv = em_tensor_data(b), *cv = em_tensor_data(col);
  for (int64_t i = 0; i < n; i++) av[i] = (float)((i * 7919) % 1000) / 100 - 5, bv[i] = (float)(i % 13) - 6;
  for (int64_t i = 0; i < rows; i++) cv[i] = (float)i / 100;
  em_tensor *add = NULL, *bc = NULL, *gt = NULL, *ex = NULL, *wh = NULL, *mx = NULL, *sc = NULL, *tr = NULL;
  assert_int_equal(em_binary(EM_ADD, &add, a, b), EM_OK);
  assert_int_equal(em_binary(EM_MUL, &bc, a, col), EM_OK);
  assert_int_equal(em_binary(EM_GT, &gt, a, b), EM_OK);
  assert_int_equal(em_unary(EM_TANH, &ex, a), EM_OK);
  assert_int_equal(em_where(&wh, gt, a, col), EM_OK);
  assert_int_equal(em_binary(EM_MAXIMUM, &mx, a, b), EM_OK);
  assert_int_equal(em_binary_scalar(EM_SUB, &sc, a, 1.5, 1), EM_OK);
  /* a transposed operand: the strided path, split across threads */
  em_tensor *bt = NULL, *b2 = NULL;
  assert_int_equal(em_empty(&b2, 2, (const int64_t[]){cols, rows}, EM_FLOAT32, CPU), EM_OK);
  float *b2v = em_tensor_data(b2);
  for (int64_t i = 0; i < n; i++) b2v[i] = (float)(i % 101);
  assert_int_equal(em_transpose(&bt, b2, 0, 1), EM_OK);
  assert_int_equal(em_binary(EM_SUB, &tr, a, bt), EM_OK);
  const float *r_add = em_tensor_data(add), *r_bc = em_tensor_data(bc), *r_ex = em_tensor_data(ex);
  const float *r_wh = em_tensor_data(wh), *r_mx = em_tensor_data(mx), *r_sc = em_tensor_data(sc);
  const float *r_tr = em_tensor_data(tr);
  const uint8_t *r_gt = em_tensor_data(gt);
  int bad = 0;
  for (int64_t i = 0; i < n && !bad; i++) {
    int64_t r = i / cols, c = i % cols;
    bad |= r_add[i] != av[i] + bv[i];
    bad |= r_bc[i] != av[i] * cv[r];
    bad |= r_gt[i] != (av[i] > bv[i]);
    bad |= fabs(r_ex[i] - tanh(av[i])) > 3e-7;
    bad |= r_wh[i] != (av[i] > bv[i] ? av[i] : cv[r]);
    bad |= r_mx[i] != fmaxf(av[i], bv[i]);
    bad |= r_sc[i] != 1.5f - av[i];
    bad |= r_tr[i] != av[i] - b2v[c * rows + r];
    if (bad) fail_msg("element %lld differs from the serial reference", (long long)i);
  }
  em_tensor *list[] = {a, b, col, at, add, bc, gt, ex, wh, mx, sc, tr, bt, b2};
  for (size_t i = 0; i < sizeof list / sizeof *list; i++) em_tensor_release(list[i]);
}

/* ---- errors ---- */

static void test_errors(void **state) {
  (void)state;
  int64_t s23[] = {2, 3}, s4[] = {4};
  em_tensor *a = NULL, *b = NULL, *out = NULL, *h = NULL, *i32 = NULL;
  assert_int_equal(em_zeros(&a, 2, s23, EM_FLOAT32, CPU), EM_OK);
  assert_int_equal(em_zeros(&b, 1, s4, EM_FLOAT32, CPU), EM_OK);
  assert_int_equal(em_zeros(&h, 2, s23, EM_FLOAT16, CPU), EM_OK);
  assert_int_equal(em_zeros(&i32, 2, s23, EM_INT32, CPU), EM_OK);
  em_tensor *mask = NULL, *f = NULL, *row = NULL, *ex = NULL, *g = NULL;
  assert_int_equal(em_zeros(&mask, 2, s23, EM_BOOL, CPU), EM_OK);
  assert_int_equal(em_zeros(&f, 2, s23, EM_FLOAT32, CPU), EM_OK);
  assert_int_equal(em_tensor_free(f), EM_OK);
  assert_int_equal(em_zeros(&row, 2, (const int64_t[]){1, 3}, EM_FLOAT32, CPU), EM_OK);
  assert_int_equal(em_expand(&ex, row, 2, s23), EM_OK);
  assert_int_equal(em_zeros(&g, 2, s23, EM_FLOAT32, CPU), EM_OK);
  em_tensor *neg = vec(EM_INT32, 3, (const double[]){1, -1, 2}), *zero = vec(EM_INT64, 3, (const double[]){1, 0, 2});
  int64_t mem = em_memory_allocated();

  /* shapes */
  expect_error(em_binary(EM_ADD, &out, a, b), EM_ERR_SHAPE, "add: shapes [2, 3] and [4] cannot be broadcast");
  expect_error(em_add_scaled(&out, a, b, 1), EM_ERR_SHAPE, "[2, 3] and [4]");
  assert_null(out);
  /* a given output of the wrong shape */
  em_tensor *o4 = b;
  expect_error(em_binary(EM_MUL, &o4, a, a), EM_ERR_SHAPE, "mul: output has shape [4], expected [2, 3]");
  expect_error(em_unary(EM_EXP, &o4, a), EM_ERR_SHAPE, "exp: output has shape [4], expected [2, 3]");
  /* float16 is storage only */
  expect_error(em_binary(EM_ADD, &out, h, a), EM_ERR_DTYPE, "add: float16 tensors are storage only");
  assert_non_null(strstr(em_last_error(), "to('float32')"));
  expect_error(em_unary(EM_TANH, &out, h), EM_ERR_DTYPE, "tanh: float16");
  expect_error(em_binary_scalar(EM_MUL, &out, h, 2, 0), EM_ERR_DTYPE, "mul: float16");
  expect_error(em_clamp(&out, h, 0, 1), EM_ERR_DTYPE, "clamp: float16");
  /* a float result cannot go into an int tensor, nor a non-bool into a bool one */
  em_tensor *oi = i32;
  expect_error(em_binary(EM_ADD, &oi, i32, a), EM_ERR_DTYPE,
               "add_: result dtype float32 cannot be written to an int32 tensor");
  expect_error(em_binary_scalar(EM_ADD, &oi, i32, 2.5, 0), EM_ERR_DTYPE,
               "add_: result dtype float32 cannot be written to an int32");
  expect_error(em_binary_scalar(EM_DIV, &oi, i32, 2, 0), EM_ERR_DTYPE, "div_: result dtype float32");
  expect_error(em_unary(EM_SQRT, &oi, i32), EM_ERR_DTYPE, "sqrt_: result dtype float32");
  em_tensor *om = mask;
  expect_error(em_binary(EM_ADD, &om, i32, i32), EM_ERR_DTYPE,
               "add: result dtype int32 cannot be written to a bool tensor");
  /* freed tensors, NULL */
  expect_error(em_binary(EM_ADD, &out, a, f), EM_ERR_ARGUMENT, "add: the second input was freed");
  expect_error(em_unary(EM_RELU, &out, f), EM_ERR_ARGUMENT, "relu: the input was freed");
  expect_error(em_where(&out, f, a, a), EM_ERR_ARGUMENT, "where: the condition was freed");
  em_tensor *of = f;
  expect_error(em_binary(EM_ADD, &of, a, a), EM_ERR_ARGUMENT, "add: the output was freed");
  expect_error(em_binary(EM_ADD, &out, NULL, a), EM_ERR_ARGUMENT, "add: expected a tensor for first input");
  expect_error(em_binary(EM_ADD, NULL, a, a), EM_ERR_ARGUMENT, "add: out must not be NULL");
  expect_error(em_binary((em_binop)99, &out, a, a), EM_ERR_ARGUMENT, "unknown op 99");
  expect_error(em_unary((em_unop)-1, &out, a), EM_ERR_ARGUMENT, "unknown op -1");
  /* bool and integer rules */
  expect_error(em_binary(EM_SUB, &out, mask, mask), EM_ERR_DTYPE, "sub: subtracting bool tensors is not supported");
  expect_error(em_unary(EM_NEG, &out, mask), EM_ERR_DTYPE, "neg: negating a bool tensor");
  expect_error(em_binary_scalar(EM_POW, &out, i32, -2, 0), EM_ERR_ARGUMENT, "negative integer powers");
  expect_error(em_binary_scalar(EM_FMOD, &out, i32, 0, 0), EM_ERR_ARGUMENT, "fmod: integer division by zero");
  expect_error(em_binary_scalar(EM_ADD, &out, i32, 3e9, 0), EM_ERR_ARGUMENT, "scalar 3e+09 is out of range for int32");
  expect_error(em_binary(EM_POW, &out, neg, neg), EM_ERR_ARGUMENT, "pow: integers to negative integer powers");
  expect_error(em_binary_scalar(EM_POW, &out, neg, 2, 1), EM_ERR_ARGUMENT, "pow: integers to negative");
  expect_error(em_binary(EM_FMOD, &out, zero, zero), EM_ERR_ARGUMENT, "fmod: integer division by zero");
  expect_error(em_binary_scalar(EM_FMOD, &out, zero, 5, 1), EM_ERR_ARGUMENT, "fmod: integer division by zero");
  assert_null(out);
  /* an expanded (overlapping) output */
  em_tensor *oe = ex;
  expect_error(em_binary(EM_ADD, &oe, a, a), EM_ERR_ARGUMENT, "several elements in one memory location");
  /* devices must match (a CPU tensor relabelled as CUDA: the check runs before any access) */
  g->storage->device = (em_device){EM_CUDA, 0};
  expect_error(em_binary(EM_ADD, &out, a, g), EM_ERR_DEVICE, "add: tensors are on different devices (cpu and cuda:0)");
  expect_error(em_where(&out, mask, a, g), EM_ERR_DEVICE, "different devices");
  expect_error(em_add_scaled(&out, g, a, 1), EM_ERR_DEVICE, "different devices (cuda:0 and cpu)");
  g->storage->device = CPU;
  assert_null(out);

  /* nothing leaked on any of these paths */
  assert_int_equal(em_memory_allocated(), mem);
  em_tensor *list[] = {a, b, h, i32, mask, f, neg, zero, row, ex, g};
  for (size_t i = 0; i < sizeof list / sizeof *list; i++) em_tensor_release(list[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_binary_float),
      cmocka_unit_test(test_binary_int),
      cmocka_unit_test(test_compare_logical),
      cmocka_unit_test(test_nan_maximum_minimum),
      cmocka_unit_test(test_promotion),
      cmocka_unit_test(test_broadcast),
      cmocka_unit_test(test_strided),
      cmocka_unit_test(test_inplace),
      cmocka_unit_test(test_out_preallocated),
      cmocka_unit_test(test_scalar),
      cmocka_unit_test(test_unary_float),
      cmocka_unit_test(test_unary_int),
      cmocka_unit_test(test_vector_math_accuracy),
      cmocka_unit_test(test_where),
      cmocka_unit_test(test_clamp),
      cmocka_unit_test(test_add_scaled),
      cmocka_unit_test(test_large_parallel),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
