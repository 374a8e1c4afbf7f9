/* test_philox_distributions.c - core/philox_distributions.h, the value functions that the CUDA backend's
 * random fills run (runtime/plugins/cuda/random.cu): they must give the CPU backend's values
 * bit for bit, which this checks on the CPU, element by element, against cpu/random.c
 * through the public fills. Also: the accuracy of em_det_log and em_det_sincos (the
 * libm-free log and sin/cos under Box-Muller) against libm.
 *
 * Normal fills included: cpu/random.c draws through em_philox_normal_f32/f64, so the
 * CUDA normals equal the CPU's bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "test_util.h"
#include "core/philox_distributions.h"
#include "ember/tensor.h"

static em_tensor *empty1(int64_t n, em_dtype dtype) {
  em_tensor *t = NULL;
  assert_int_equal(em_empty(&t, 1, &n, dtype, CPU), EM_OK);
  return t;
}

/* Element i's 64 bits in the stream (seed, offset): philox.h's layout. */
static uint64_t element_bits(uint64_t seed, uint64_t offset, int64_t i) {
  em_philox4 r = em_philox_block(seed, offset + (uint64_t)i / 2);
  return i & 1 ? em_philox_u64(r.x[2], r.x[3]) : em_philox_u64(r.x[0], r.x[1]);
}

static const uint64_t SEEDS[] = {0, 42, 0x123456789abcdefull};
static const uint64_t OFFSETS[] = {0, 7, 1ull << 40};
#define N 4099 /* odd, and more than two of the CPU's chunks */

static void test_uniform_matches_cpu(void **state) {
  (void)state;
  static const double ranges[][2] = {{0, 1}, {-3, 7.5}, {2, 2}, {-1e-3, 1e-3}, {0.1, 0.1 + 1e-12}, {-1e30, 1e30}};
  for (size_t s = 0; s < 3; s++)
    for (size_t r = 0; r < sizeof ranges / sizeof *ranges; r++) {
      const double low = ranges[r][0], high = ranges[r][1], span = high - low;
      em_tensor *f = empty1(N, EM_FLOAT32), *d = empty1(N, EM_FLOAT64);
      em_generator_set_state(SEEDS[s], OFFSETS[s]);
      assert_int_equal(em_uniform_(f, low, high), EM_OK);
      const uint64_t off_d = OFFSETS[s] + EM_PHILOX_BLOCKS(N);
      assert_int_equal(em_uniform_(d, low, high), EM_OK);
      const float *fv = em_tensor_data(f);
      const double *dv = em_tensor_data(d);
      const float top_f = em_philox_uniform_top_f32(low, high);
      const double top = nextafter(high, -INFINITY);
      for (int64_t i = 0; i < N; i++) {
        float ef = em_philox_uniform_f32(element_bits(SEEDS[s], OFFSETS[s], i), low, span, top_f);
        double ed = em_philox_uniform_f64(element_bits(SEEDS[s], off_d, i), low, span, top);
        if (memcmp(&ef, &fv[i], sizeof ef) || memcmp(&ed, &dv[i], sizeof ed))
          fail_msg("uniform [%g, %g) seed %llu element %lld: cpu %a / %a, shared %a / %a", low, high,
                   (unsigned long long)SEEDS[s], (long long)i, fv[i], dv[i], ef, ed);
      }
      em_tensor_release(f);
      em_tensor_release(d);
    }
}

static void test_int_matches_cpu(void **state) {
  (void)state;
  static const struct {
    em_dtype dtype;
    int64_t low, high;
  } cases[] = {{EM_INT64, INT64_MIN, INT64_MAX},
               {EM_INT64, -5, 3},
               {EM_INT32, INT32_MIN, INT32_MAX},
               {EM_UINT8, 0, 256},
               {EM_BOOL, 0, 2},
               {EM_FLOAT32, -(1ll << 24), 1ll << 24},
               {EM_FLOAT64, -100, 100}};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    em_tensor *t = empty1(N, cases[c].dtype);
    em_generator_set_state(SEEDS[c % 3], OFFSETS[c % 3]);
    assert_int_equal(em_randint_(t, cases[c].low, cases[c].high), EM_OK);
    const uint64_t range = (uint64_t)cases[c].high - (uint64_t)cases[c].low;
    for (int64_t i = 0; i < N; i++) {
      int64_t e = em_philox_int(element_bits(SEEDS[c % 3], OFFSETS[c % 3], i), cases[c].low, range), got;
      switch (cases[c].dtype) {
        case EM_INT64: got = ((const int64_t *)em_tensor_data(t))[i]; break;
        case EM_INT32: got = ((const int32_t *)em_tensor_data(t))[i]; break;
        case EM_UINT8:
        case EM_BOOL: got = ((const uint8_t *)em_tensor_data(t))[i]; break;
        case EM_FLOAT32: got = (int64_t)((const float *)em_tensor_data(t))[i]; break;
        default: got = (int64_t)((const double *)em_tensor_data(t))[i]; break;
      }
      if (got != e)
        fail_msg("randint case %zu element %lld: cpu %lld, shared %lld", c, (long long)i, (long long)got, (long long)e);
    }
    em_tensor_release(t);
  }
}

static void test_bernoulli_matches_cpu(void **state) {
  (void)state;
  static const double ps[] = {0, 0.3, 1};
  static const em_dtype dtypes[] = {EM_FLOAT32, EM_FLOAT64, EM_INT32, EM_BOOL};
  for (size_t k = 0; k < 3; k++)
    for (size_t d = 0; d < 4; d++) {
      em_tensor *t = empty1(N, dtypes[d]);
      em_generator_set_state(SEEDS[k], OFFSETS[k]);
      assert_int_equal(em_bernoulli_(t, ps[k]), EM_OK);
      for (int64_t i = 0; i < N; i++) {
        double got;
        assert_int_equal(em_tensor_get(t, &i, &got), EM_OK);
        int e = em_philox_bernoulli(element_bits(SEEDS[k], OFFSETS[k], i), ps[k]);
        if (got != (double)e) fail_msg("bernoulli p=%g element %lld: cpu %g, shared %d", ps[k], (long long)i, got, e);
      }
      em_tensor_release(t);
    }
}

static void test_perm_matches_cpu(void **state) {
  (void)state;
  static const int64_t sizes[] = {0, 1, 2, 3, 1001};
  static const em_dtype dtypes[] = {EM_INT64, EM_INT32, EM_FLOAT32, EM_FLOAT64};
  for (size_t s = 0; s < 5; s++)
    for (size_t d = 0; d < 4; d++) {
      const int64_t n = sizes[s];
      em_generator_set_state(SEEDS[d % 3], OFFSETS[d % 3]);
      em_tensor *t = NULL;
      assert_int_equal(em_randperm(&t, n, dtypes[d], CPU), EM_OK);
      int64_t *perm = malloc((size_t)(n ? n : 1) * sizeof *perm);
      em_philox_shuffle(perm, n, SEEDS[d % 3], OFFSETS[d % 3]);
      for (int64_t i = 0; i < n; i++) {
        double got;
        assert_int_equal(em_tensor_get(t, &i, &got), EM_OK);
        if (got != (double)perm[i])
          fail_msg("randperm(%lld) element %lld: cpu %g, shared %lld", (long long)n, (long long)i, got,
                   (long long)perm[i]);
      }
      free(perm);
      em_tensor_release(t);
    }
}

/* |a - b| within k ulp of the larger, in float (f) or double. */
static int within_ulps(double a, double b, double k, int f) {
  if (a == b) return 1;
  double m = fmax(fabs(a), fabs(b));
  int e;
  frexp(m, &e);
  double ulp = ldexp(1.0, e - (f ? 24 : 53));
  if (f && ulp < ldexp(1.0, -149)) ulp = ldexp(1.0, -149);
  return fabs(a - b) <= k * ulp;
}

/* Box-Muller: the CPU's normals are em_philox_normal_f32/f64's, bit for bit. */
static void test_normal_matches_cpu(void **state) {
  (void)state;
  static const double params[][2] = {{0, 1}, {3, 2}, {-1e3, 1e-2}};
  for (size_t k = 0; k < 3; k++) {
    const double mean = params[k][0], std = params[k][1];
    em_tensor *f = empty1(N, EM_FLOAT32), *d = empty1(N, EM_FLOAT64);
    em_generator_set_state(SEEDS[k], OFFSETS[k]);
    assert_int_equal(em_normal_(f, mean, std), EM_OK);
    assert_int_equal(em_normal_(d, mean, std), EM_OK);
    const uint64_t off_d = OFFSETS[k] + EM_PHILOX_BLOCKS(N);
    const float *fv = em_tensor_data(f);
    const double *dv = em_tensor_data(d);
    for (int64_t i = 0; i < N; i += 2) {
      const int second = i + 1 < N;
      float ef[2];
      double ed[2];
      em_philox_normal_f32(element_bits(SEEDS[k], OFFSETS[k], i),
                           second ? element_bits(SEEDS[k], OFFSETS[k], i + 1) : 0, mean, std, &ef[0], &ef[1]);
      em_philox_normal_f64(element_bits(SEEDS[k], off_d, i), second ? element_bits(SEEDS[k], off_d, i + 1) : 0, mean,
                           std, &ed[0], &ed[1]);
      for (int h = 0; h < 1 + second; h++) {
        if (memcmp(&ef[h], &fv[i + h], sizeof ef[h]) || memcmp(&ed[h], &dv[i + h], sizeof ed[h]))
          fail_msg("normal(%g, %g) element %lld: cpu %a / %a, shared %a / %a", mean, std, (long long)(i + h), fv[i + h],
                   dv[i + h], ef[h], ed[h]);
      }
    }
    em_tensor_release(f);
    em_tensor_release(d);
  }
}

static void test_det_log_accuracy(void **state) {
  (void)state;
  assert_true(em_det_log(1.0) == 0.0);
  assert_true(within_ulps(em_det_log(0.5), -M_LN2, 1, 0));
  assert_true(within_ulps(em_det_log(0x1p-53), -53 * M_LN2, 1, 0));
  double worst = 0;
  for (uint64_t j = 0; j < 400000; j++) {
    uint64_t bits = element_bits(7, 0, (int64_t)j);
    double u = j & 1 ? em_philox_double_open0(bits) : (double)em_philox_float_open0((uint32_t)(bits >> 32));
    double got = em_det_log(u), ref = log(u);
    int e;
    frexp(ref, &e);
    double ulps = fabs(got - ref) / ldexp(1.0, e - 53);
    if (ulps > worst) worst = ulps;
    /* within 1 ulp of the true value, and libm within 0.52: 2 between them */
    if (!within_ulps(got, ref, 2, 0)) fail_msg("em_det_log(%a) = %a, libm %a", u, got, ref);
  }
  print_message("em_det_log: largest distance from libm %.2f ulp\n", worst);
}

static void test_det_sincos_accuracy(void **state) {
  (void)state;
  double s, c;
  em_det_sincos(0, &s, &c);
  assert_true(s == 0 && c == 1);
  static const double edges[] = {1e-300,     0x1p-30,           M_PI_4,       M_PI_2, M_PI,
                                 3 * M_PI_2, 6.283185307179586, 0x1.921fb6p+2 /* 2 pi rounded to float */};
  for (size_t k = 0; k < sizeof edges / sizeof *edges; k++) {
    em_det_sincos(edges[k], &s, &c);
    /* near a zero of sin or cos, compare in absolute terms (ulp of 1e-16 there) */
    if (!(within_ulps(s, sin(edges[k]), 3, 0) || fabs(s - sin(edges[k])) < 1e-31) ||
        !(within_ulps(c, cos(edges[k]), 3, 0) || fabs(c - cos(edges[k])) < 1e-31))
      fail_msg("em_det_sincos(%a) = %a, %a; libm %a, %a", edges[k], s, c, sin(edges[k]), cos(edges[k]));
  }
  for (uint64_t j = 0; j < 400000; j++) {
    uint64_t bits = element_bits(11, 0, (int64_t)j);
    double x = j & 1 ? 6.283185307179586 * em_philox_double01(bits)
                     : (double)(6.2831853071795864f * em_philox_float01((uint32_t)(bits >> 32)));
    em_det_sincos(x, &s, &c);
    /* within 1.5 ulp of the true values, libm within about 0.55 */
    if (!within_ulps(s, sin(x), 3, 0) || !within_ulps(c, cos(x), 3, 0))
      fail_msg("em_det_sincos(%a) = %a, %a; libm %a, %a", x, s, c, sin(x), cos(x));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_uniform_matches_cpu),   cmocka_unit_test(test_int_matches_cpu),
      cmocka_unit_test(test_bernoulli_matches_cpu), cmocka_unit_test(test_perm_matches_cpu),
      cmocka_unit_test(test_normal_matches_cpu),    cmocka_unit_test(test_det_log_accuracy),
      cmocka_unit_test(test_det_sincos_accuracy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
