/* test_random.c - the Philox generator, the global (seed, offset) state and the random
 * fills: known answers, reproducibility, independence from threads and strides, and the
 * distributions' moments and ranges. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "test_util.h"
#include "core/philox.h"
#include "ember/tensor.h"

static em_tensor *empty1(int64_t n, em_dtype dtype) {
  em_tensor *t = NULL;
  assert_int_equal(em_empty(&t, 1, &n, dtype, CPU), EM_OK);
  return t;
}

/* Random123's published known-answer vectors for philox4x32-10 (kat_vectors). */
static void test_philox_known_answers(void **state) {
  (void)state;
  static const struct {
    uint32_t ctr[4], key[2], out[4];
  } kat[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (size_t k = 0; k < sizeof kat / sizeof *kat; k++) {
    em_philox4 ctr = {{kat[k].ctr[0], kat[k].ctr[1], kat[k].ctr[2], kat[k].ctr[3]}};
    em_philox4 r = em_philox4x32_10(ctr, kat[k].key[0], kat[k].key[1]);
    for (int i = 0; i < 4; i++) assert_int_equal(r.x[i], kat[k].out[i]);
  }
  /* The stream layout: block b of seed s is Philox of counter (b, 0, 0) under key s. */
  em_philox4 r = em_philox_block(0, 0);
  assert_int_equal(r.x[0], 0x6627e8d5);
  /* Conversions: the extremes of the bits map inside the documented intervals. */
  assert_true(em_philox_float01(0xffffffffu) < 1.0f);
  assert_true(em_philox_double01(UINT64_MAX) < 1.0);
  assert_true(em_philox_float_open0(0) > 0.0f);
  assert_true(em_philox_double_open0(0) > 0.0);
  assert_int_equal(em_philox_below(UINT64_MAX, 7), 6);
  assert_int_equal(em_philox_below(0, 7), 0);
}

static void test_same_seed_same_values(void **state) {
  (void)state;
  em_tensor *a = empty1(1001, EM_FLOAT32), *b = empty1(1001, EM_FLOAT32), *c = empty1(1001, EM_FLOAT32);
  em_manual_seed(42);
  assert_int_equal(em_normal_(a, 0, 1), EM_OK);
  assert_int_equal(em_normal_(c, 0, 1), EM_OK); /* a second call gives other numbers */
  em_manual_seed(42);
  assert_int_equal(em_normal_(b, 0, 1), EM_OK);
  assert_memory_equal(em_tensor_data(a), em_tensor_data(b), 1001 * sizeof(float));
  assert_memory_not_equal(em_tensor_data(a), em_tensor_data(c), 1001 * sizeof(float));
  /* The offset advances by the blocks of 1001 elements: ceil(1001 / 2). */
  uint64_t seed, offset;
  em_generator_get_state(&seed, &offset);
  assert_int_equal(seed, 42);
  assert_int_equal(offset, 501);
  /* set_state replays from any point. */
  em_generator_set_state(42, 501);
  assert_int_equal(em_normal_(b, 0, 1), EM_OK);
  assert_memory_equal(em_tensor_data(b), em_tensor_data(c), 1001 * sizeof(float));
  /* Another seed, other numbers. */
  em_manual_seed(43);
  assert_int_equal(em_normal_(b, 0, 1), EM_OK);
  assert_memory_not_equal(em_tensor_data(a), em_tensor_data(b), 1001 * sizeof(float));
  em_tensor_release(a), em_tensor_release(b), em_tensor_release(c);
}

/* Fills a big tensor with every kind under 1 and 2 threads: bit-identical. */
static void test_thread_count_independent(void **state) {
  (void)state;
  const int64_t n = 300001; /* above the parallel grain, odd */
  em_dtype dtypes[2] = {EM_FLOAT32, EM_FLOAT64};
  int saved = em_get_num_threads();
  for (int k = 0; k < 2; k++) {
    em_tensor *t[2];
    for (int th = 0; th < 2; th++) {
      em_set_num_threads(th + 1);
      t[th] = empty1(n, dtypes[k]);
      em_manual_seed(7);
      assert_int_equal(em_normal_(t[th], 1, 2), EM_OK);
    }
    assert_memory_equal(em_tensor_data(t[0]), em_tensor_data(t[1]), (size_t)n * (k ? 8 : 4));
    for (int th = 0; th < 2; th++) {
      em_set_num_threads(th + 1);
      em_manual_seed(8);
      assert_int_equal(em_uniform_(t[th], -1, 1), EM_OK);
    }
    assert_memory_equal(em_tensor_data(t[0]), em_tensor_data(t[1]), (size_t)n * (k ? 8 : 4));
    em_tensor_release(t[0]), em_tensor_release(t[1]);
  }
  em_tensor *r[2];
  for (int th = 0; th < 2; th++) {
    em_set_num_threads(th + 1);
    r[th] = empty1(n, EM_INT64);
    em_manual_seed(9);
    assert_int_equal(em_randint_(r[th], -1000000, 1000000), EM_OK);
  }
  assert_memory_equal(em_tensor_data(r[0]), em_tensor_data(r[1]), (size_t)n * 8);
  em_tensor_release(r[0]), em_tensor_release(r[1]);
  em_set_num_threads(saved);
}

/* A strided output receives, at each logical position, what a contiguous one would. */
static void test_strided_output(void **state) {
  (void)state;
  int64_t sizes[2] = {37, 29};
  em_tensor *base = NULL, *view = NULL, *flat = NULL;
  assert_int_equal(em_zeros(&base, 2, sizes, EM_FLOAT64, CPU), EM_OK);
  assert_int_equal(em_transpose(&view, base, 0, 1), EM_OK); /* [29, 37], strides (1, 29) */
  flat = empty1(29 * 37, EM_FLOAT64);
  em_manual_seed(5);
  assert_int_equal(em_normal_(view, 0, 1), EM_OK);
  em_manual_seed(5);
  assert_int_equal(em_normal_(flat, 0, 1), EM_OK);
  const double *f = em_tensor_data(flat), *b = em_tensor_data(base);
  for (int64_t i = 0; i < 29; i++)
    for (int64_t j = 0; j < 37; j++) assert_true(f[i * 37 + j] == b[j * 29 + i]); /* view[i][j] = base[j][i] */
  em_tensor_release(base), em_tensor_release(view), em_tensor_release(flat);
}

static void moments(const em_tensor *t, double *mean, double *var) {
  int64_t n = em_tensor_numel(t);
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < n; i++) {
    double v = em_tensor_dtype(t) == EM_FLOAT32 ? ((const float *)em_tensor_data(t))[i]
                                                : ((const double *)em_tensor_data(t))[i];
    s += v, s2 += v * v;
  }
  *mean = s / n;
  *var = s2 / n - *mean * *mean;
}

static void test_normal_moments(void **state) {
  (void)state;
  em_dtype dtypes[2] = {EM_FLOAT32, EM_FLOAT64};
  for (int k = 0; k < 2; k++) {
    em_tensor *t = empty1(1000000, dtypes[k]);
    em_manual_seed(2024);
    assert_int_equal(em_normal_(t, 3, 2), EM_OK);
    double mean, var;
    moments(t, &mean, &var);
    /* Standard errors: mean 0.002, variance 4 * sqrt(2 / 1e6) = 0.0057. */
    assert_true(fabs(mean - 3) < 0.01);
    assert_true(fabs(var - 4) < 0.03);
    em_tensor_release(t);
  }
  /* std = 0 gives the mean exactly. */
  em_tensor *t = empty1(10, EM_FLOAT32);
  assert_int_equal(em_normal_(t, 1.5, 0), EM_OK);
  for (int i = 0; i < 10; i++) assert_true(((float *)em_tensor_data(t))[i] == 1.5f);
  em_tensor_release(t);
}

static void test_uniform_range(void **state) {
  (void)state;
  em_dtype dtypes[2] = {EM_FLOAT32, EM_FLOAT64};
  for (int k = 0; k < 2; k++) {
    em_tensor *t = empty1(200000, dtypes[k]);
    em_manual_seed(11);
    assert_int_equal(em_uniform_(t, 2, 3), EM_OK);
    double lo = 10, hi = -10, mean, var;
    for (int i = 0; i < 200000; i++) {
      double v = k ? ((double *)em_tensor_data(t))[i] : ((float *)em_tensor_data(t))[i];
      lo = fmin(lo, v), hi = fmax(hi, v);
    }
    assert_true(lo >= 2 && lo < 2.001);
    assert_true(hi < 3 && hi > 2.999);
    moments(t, &mean, &var);
    assert_true(fabs(mean - 2.5) < 0.005);
    assert_true(fabs(var - 1.0 / 12) < 0.002);
    em_tensor_release(t);
  }
  /* A range narrower than one float32 step still never reaches high. */
  em_tensor *t = empty1(1000, EM_FLOAT32);
  assert_int_equal(em_uniform_(t, 1.0, 1.0 + 1e-9), EM_OK);
  for (int i = 0; i < 1000; i++) assert_true(((float *)em_tensor_data(t))[i] == 1.0f);
  em_tensor_release(t);
}

static void test_randint(void **state) {
  (void)state;
  em_tensor *t = empty1(10000, EM_INT64);
  em_manual_seed(3);
  assert_int_equal(em_randint_(t, -3, 4), EM_OK);
  int seen[7] = {0};
  for (int i = 0; i < 10000; i++) {
    int64_t v = ((int64_t *)em_tensor_data(t))[i];
    assert_true(v >= -3 && v < 4);
    seen[v + 3]++;
  }
  for (int k = 0; k < 7; k++) assert_true(seen[k] > 1200 && seen[k] < 1660); /* 1428 expected */
  /* The whole int64 range, exactly. */
  assert_int_equal(em_randint_(t, INT64_MIN, INT64_MAX), EM_OK);
  int negative = 0;
  for (int i = 0; i < 10000; i++) negative += ((int64_t *)em_tensor_data(t))[i] < 0;
  assert_true(negative > 4700 && negative < 5300);
  em_tensor_release(t);
  /* Other dtypes: uint8 up to 255, float32 holds the integers exactly. */
  em_tensor *u = empty1(5000, EM_UINT8), *f = empty1(5000, EM_FLOAT32), *b = empty1(100, EM_BOOL);
  assert_int_equal(em_randint_(u, 250, 256), EM_OK);
  for (int i = 0; i < 5000; i++) assert_true(((uint8_t *)em_tensor_data(u))[i] >= 250);
  assert_int_equal(em_randint_(f, -5, 5), EM_OK);
  for (int i = 0; i < 5000; i++) {
    float v = ((float *)em_tensor_data(f))[i];
    assert_true(v == floorf(v) && v >= -5 && v <= 4);
  }
  assert_int_equal(em_randint_(b, 0, 2), EM_OK);
  for (int i = 0; i < 100; i++) assert_true(((uint8_t *)em_tensor_data(b))[i] <= 1);
  /* Errors: an empty range, a range the dtype cannot hold. */
  assert_int_equal(em_randint_(u, 5, 5), EM_ERR_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "low=5 high=5"));
  assert_int_equal(em_randint_(u, 0, 257), EM_ERR_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "does not fit dtype uint8"));
  assert_int_equal(em_randint_(f, 0, (1ll << 24) + 2), EM_ERR_ARGUMENT);
  em_tensor_release(u), em_tensor_release(f), em_tensor_release(b);
}

static void test_bernoulli(void **state) {
  (void)state;
  em_tensor *t = empty1(100000, EM_FLOAT32), *b = empty1(1000, EM_BOOL);
  em_manual_seed(1);
  assert_int_equal(em_bernoulli_(t, 0.3), EM_OK);
  double mean, var;
  moments(t, &mean, &var);
  assert_true(fabs(mean - 0.3) < 0.006);
  assert_int_equal(em_bernoulli_(b, 1.0), EM_OK);
  for (int i = 0; i < 1000; i++) assert_int_equal(((uint8_t *)em_tensor_data(b))[i], 1);
  assert_int_equal(em_bernoulli_(b, 0.0), EM_OK);
  for (int i = 0; i < 1000; i++) assert_int_equal(((uint8_t *)em_tensor_data(b))[i], 0);
  assert_int_equal(em_bernoulli_(b, 1.5), EM_ERR_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "p=1.5"));
  assert_int_equal(em_bernoulli_(b, NAN), EM_ERR_ARGUMENT);
  em_tensor_release(t), em_tensor_release(b);
}

static void test_randperm(void **state) {
  (void)state;
  em_tensor *p = NULL, *q = NULL, *r = NULL;
  em_manual_seed(99);
  assert_int_equal(em_randperm(&p, 1000, EM_INT64, CPU), EM_OK);
  em_manual_seed(99);
  assert_int_equal(em_randperm(&q, 1000, EM_INT32, CPU), EM_OK);
  int seen[1000] = {0}, fixed = 0;
  for (int i = 0; i < 1000; i++) {
    int64_t v = ((int64_t *)em_tensor_data(p))[i];
    assert_true(v >= 0 && v < 1000);
    seen[v]++;
    fixed += v == i;
    assert_int_equal(v, ((int32_t *)em_tensor_data(q))[i]); /* same seed, same permutation */
  }
  for (int i = 0; i < 1000; i++) assert_int_equal(seen[i], 1);
  assert_true(fixed < 10); /* a shuffle, not the identity (1 fixed point expected) */
  /* The next call gives another permutation. */
  assert_int_equal(em_randperm(&r, 1000, EM_INT64, CPU), EM_OK);
  assert_memory_not_equal(em_tensor_data(p), em_tensor_data(r), 8000);
  em_tensor_release(p), em_tensor_release(q), em_tensor_release(r);
  p = NULL;
  assert_int_equal(em_randperm(&p, 0, EM_INT64, CPU), EM_OK);
  assert_int_equal(em_tensor_numel(p), 0);
  em_tensor_release(p);
  p = NULL;
  assert_int_equal(em_randperm(&p, -1, EM_INT64, CPU), EM_ERR_ARGUMENT);
  assert_int_equal(em_randperm(&p, 300, EM_UINT8, CPU), EM_ERR_DTYPE);
  assert_null(p);
}

static void test_errors(void **state) {
  (void)state;
  em_tensor *i = empty1(4, EM_INT32), *h = empty1(4, EM_FLOAT16), *f = empty1(4, EM_FLOAT32);
  assert_int_equal(em_uniform_(i, 0, 1), EM_ERR_DTYPE);
  assert_non_null(strstr(em_last_error(), "uniform_: expected a float32 or float64 tensor, got int32"));
  assert_int_equal(em_normal_(h, 0, 1), EM_ERR_DTYPE);
  assert_non_null(strstr(em_last_error(), "float16 is storage-only"));
  assert_int_equal(em_uniform_(f, 1, 0), EM_ERR_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "low=1 high=0"));
  assert_int_equal(em_normal_(f, 0, -1), EM_ERR_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "std=-1"));
  assert_int_equal(em_uniform_(NULL, 0, 1), EM_ERR_ARGUMENT);
  /* A failed call consumes no numbers. */
  uint64_t s0, o0, s1, o1;
  em_generator_get_state(&s0, &o0);
  assert_int_equal(em_uniform_(f, INFINITY, 2), EM_ERR_ARGUMENT);
  em_generator_get_state(&s1, &o1);
  assert_true(s0 == s1 && o0 == o1);
  em_tensor_release(i), em_tensor_release(h), em_tensor_release(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_philox_known_answers),
      cmocka_unit_test(test_same_seed_same_values),
      cmocka_unit_test(test_thread_count_independent),
      cmocka_unit_test(test_strided_output),
      cmocka_unit_test(test_normal_moments),
      cmocka_unit_test(test_uniform_range),
      cmocka_unit_test(test_randint),
      cmocka_unit_test(test_bernoulli),
      cmocka_unit_test(test_randperm),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
