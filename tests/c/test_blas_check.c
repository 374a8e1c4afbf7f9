/* test_blas_check.c - the known-answer check of the BLAS routines: OpenBLAS's kernels pass;
 * a deliberately wrong GEMM, GEMV or dot is caught and named. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "test_util.h"
#include "cpu/cpu_impl.h"

/* Each wrong routine calls the real one, then spoils one result in a way a broken kernel
 * could: the last element of a block edge, a dropped accumulation step. */
static void sgemm_off_by_one_element(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                                     const float *b, int ldb, float beta, float *c, int ldc) {
  cpu_blas_real.sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (m > 16 && n > 16) c[(int64_t)16 * ldc + 16] += 1.0f / 64;
}
static void sgemm_transposed_b_ignored(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                                       const float *b, int ldb, float beta, float *c, int ldc) {
  (void)tb;
  if (tb && k != n) { /* a kernel that reads B as if untransposed cannot honour these strides */
    for (int64_t i = 0; i < (int64_t)m * ldc; i++) c[i] = 0;
    return;
  }
  cpu_blas_real.sgemm(ta, 0, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
static void dgemm_small_error(int ta, int tb, int m, int n, int k, double alpha, const double *a, int lda,
                              const double *b, int ldb, double beta, double *c, int ldc) {
  cpu_blas_real.dgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  c[0] *= 1 + 1e-9; /* far below float32's precision, far above float64's */
}
static void sgemv_drops_last_column(int t, int m, int n, float alpha, const float *a, int lda, const float *x,
                                    float beta, float *y) {
  cpu_blas_real.sgemv(t, m, t ? n : n - 1, alpha, a, lda, x, beta, y);
}
static float sdot_half_precision(int n, const float *x, const float *y) {
  return (float)(_Float16)cpu_blas_real.sdot(n, x, y);
}

static void test_openblas_passes(void **state) {
  (void)state;
  char why[300];
  int ok = cpu_blas_check(&cpu_blas_real, why, sizeof why);
  if (!ok) fprintf(stderr, "%s\n", why);
  assert_int_equal(ok, 1);
  assert_string_equal(why, "");
  assert_int_equal(em_blas_verify(why, sizeof why), 1);
  assert_non_null(em_blas_corename());
}

static void expect_caught(cpu_blas_fns f, const char *routine) {
  char why[300];
  assert_int_equal(cpu_blas_check(&f, why, sizeof why), 0);
  if (!strstr(why, routine)) fprintf(stderr, "expected '%s' in: %s\n", routine, why);
  assert_non_null(strstr(why, routine));
  assert_non_null(strstr(why, "expected"));
}

static void test_wrong_kernels_caught(void **state) {
  (void)state;
  cpu_blas_fns f = cpu_blas_real;
  f.sgemm = sgemm_off_by_one_element;
  expect_caught(f, "sgemm NT m=17 n=33 k=65: element (16, 16)");
  f = cpu_blas_real;
  f.sgemm = sgemm_transposed_b_ignored;
  expect_caught(f, "sgemm NT");
  f = cpu_blas_real;
  f.dgemm = dgemm_small_error;
  expect_caught(f, "dgemm NN m=2 n=2 k=1: element (0, 0)");
  f = cpu_blas_real;
  f.sgemv = sgemv_drops_last_column;
  expect_caught(f, "sgemv N m=67 n=129");
  f = cpu_blas_real;
  f.sdot = sdot_half_precision;
  expect_caught(f, "sdot n=129");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_openblas_passes),
      cmocka_unit_test(test_wrong_kernels_caught),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
