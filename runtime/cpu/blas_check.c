/* blas_check.c - a known-answer check of the BLAS routines ember calls.
 *
 * Why: OpenBLAS picks its kernels by CPU name (OPENBLAS_CORETYPE or its own detection),
 * and some builds have computed wrong results on some processors. ember runs the fastest
 * kernels a CPU supports only after they give right answers here: every routine and
 * layout gemm.c uses (sgemm/dgemm in all four transpose pairs, gemv both ways, dot, and
 * the shapes that cross kernel block edges: tiny, odd, unaligned leading dimensions, and a
 * product large enough to take the multi-threaded path), against a float64 reference
 * computed by plain loops. The host (bindings/ember/blas_env.c) falls back to safer kernels
 * when this fails.
 *
 * The inputs are small integers scaled by powers of two, so every product and partial
 * sum is exact in float64 and the float32 results are within a few ulps of the exact
 * value whatever the summation order; a wrong kernel is off by far more. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cpu/cpu_impl.h"

static void real_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda, const float *b,
                       int ldb, float beta, float *c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
}
static void real_dgemm(int ta, int tb, int m, int n, int k, double alpha, const double *a, int lda, const double *b,
                       int ldb, double beta, double *c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
}
static void real_sgemv(int t, int m, int n, float alpha, const float *a, int lda, const float *x, float beta,
                       float *y) {
  cblas_sgemv(CblasRowMajor, t ? CblasTrans : CblasNoTrans, m, n, alpha, a, lda, x, 1, beta, y, 1);
}
static float real_sdot(int n, const float *x, const float *y) { return cblas_sdot(n, x, 1, y, 1); }

const cpu_blas_fns cpu_blas_real = {real_sgemm, real_dgemm, real_sgemv, real_sdot};

/* Deterministic small values: k/8 for k in [-8, 8], from a fixed LCG. */
static void fill(double *v, int64_t n, uint32_t seed) {
  uint32_t s = seed * 2654435761u + 1;
  for (int64_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    v[i] = (double)((int)(s >> 27) - 16) / 8.0;
  }
}

/* element (i, j) of a stored rows x cols (logical) matrix, transposed in memory or not */
static double at(const double *m, int trans, int ld, int i, int j) { return trans ? m[j * ld + i] : m[i * ld + j]; }

/* |got - want| <= tol * (1 + sum of |terms|): float32 rounding of a k-term sum */
static int close_enough(double got, double want, double scale, double tol) {
  return fabs(got - want) <= tol * (1.0 + scale) && got == got;
}

typedef struct gemm_case {
  int m, n, k, ta, tb, pad; /* pad: extra leading-dimension elements */
} gemm_case;

/* The shapes: kernel edges (1, 2, 3, odd, unaligned ld) and one product large enough for
 * OpenBLAS's threaded path and its packing blocks. */
static const gemm_case CASES[] = {
    {2, 2, 1, 0, 0, 0},     {3, 5, 7, 0, 0, 1},     {17, 33, 65, 0, 1, 3},   {33, 17, 9, 1, 0, 0},
    {31, 63, 127, 1, 1, 5}, {64, 64, 64, 0, 0, 0},  {128, 10, 784, 0, 1, 0}, {100, 784, 128, 1, 0, 0},
    {5, 300, 2, 0, 0, 7},   {257, 129, 300, 0, 0, 1}, {256, 256, 256, 0, 1, 0},
};

static int check_gemm(const cpu_blas_fns *f, const gemm_case *c, int dbl, char *why, size_t cap) {
  int m = c->m, n = c->n, k = c->k;
  int lda = (c->ta ? m : k) + c->pad, ldb = (c->tb ? k : n) + c->pad, ldc = n + c->pad;
  int64_t na = (int64_t)(c->ta ? k : m) * lda, nb = (int64_t)(c->tb ? n : k) * ldb, nc = (int64_t)m * ldc;
  double *A = malloc(sizeof(double) * na), *B = malloc(sizeof(double) * nb), *C0 = malloc(sizeof(double) * nc);
  void *a = malloc((dbl ? 8 : 4) * na), *b = malloc((dbl ? 8 : 4) * nb), *cc = malloc((dbl ? 8 : 4) * nc);
  int ok = A && B && C0 && a && b && cc;
  if (!ok) snprintf(why, cap, "out of memory");
  if (ok) {
    fill(A, na, (uint32_t)(m * 7 + k));
    fill(B, nb, (uint32_t)(n * 13 + k));
    fill(C0, nc, (uint32_t)(m + n));
    for (int64_t i = 0; i < na; i++) dbl ? (((double *)a)[i] = A[i]) : (((float *)a)[i] = (float)A[i]);
    for (int64_t i = 0; i < nb; i++) dbl ? (((double *)b)[i] = B[i]) : (((float *)b)[i] = (float)B[i]);
    for (int64_t i = 0; i < nc; i++) dbl ? (((double *)cc)[i] = C0[i]) : (((float *)cc)[i] = (float)C0[i]);
    const double alpha = 1.5, beta = c->pad & 1 ? 0.5 : 0.0;
    if (dbl) f->dgemm(c->ta, c->tb, m, n, k, alpha, a, lda, b, ldb, beta, cc, ldc);
    else f->sgemm(c->ta, c->tb, m, n, k, (float)alpha, a, lda, b, ldb, (float)beta, cc, ldc);
    double tol = dbl ? 1e-13 : 4e-6;
    for (int i = 0; i < m && ok; i++)
      for (int j = 0; j < n && ok; j++) {
        double want = 0, scale = 0;
        for (int p = 0; p < k; p++) {
          double t = at(A, c->ta, lda, i, p) * at(B, c->tb, ldb, p, j);
          want += t, scale += fabs(t);
        }
        want = alpha * want + beta * C0[(int64_t)i * ldc + j];
        scale = alpha * scale + fabs(beta * C0[(int64_t)i * ldc + j]);
        double got = dbl ? ((double *)cc)[(int64_t)i * ldc + j] : ((float *)cc)[(int64_t)i * ldc + j];
        if (!close_enough(got, want, scale, tol)) {
          ok = 0;
          snprintf(why, cap, "%cgemm %s%s m=%d n=%d k=%d: element (%d, %d) is %.9g, expected %.9g", dbl ? 'd' : 's',
                   c->ta ? "T" : "N", c->tb ? "T" : "N", m, n, k, i, j, got, want);
        }
      }
  }
  free(A), free(B), free(C0), free(a), free(b), free(cc);
  return ok;
}

static int check_gemv_dot(const cpu_blas_fns *f, char *why, size_t cap) {
  enum { M = 67, N = 129, LD = 131 };
  double *A = malloc(sizeof(double) * M * LD), x[N], want[N];
  float *a = malloc(sizeof(float) * M * LD), xf[N], y[N];
  int ok = A && a;
  if (!ok) snprintf(why, cap, "out of memory");
  for (int t = 0; t < 2 && ok; t++) { /* y = A x (t = 0) and y = A^T x (t = 1) */
    int rows = t ? N : M, cols = t ? M : N;
    fill(A, (int64_t)M * LD, 99 + t);
    fill(x, cols, 7 + t);
    for (int i = 0; i < M * LD; i++) a[i] = (float)A[i];
    for (int i = 0; i < cols; i++) xf[i] = (float)x[i];
    f->sgemv(t, M, N, 1.0f, a, LD, xf, 0.0f, y);
    for (int i = 0; i < rows && ok; i++) {
      double w = 0, scale = 0;
      for (int j = 0; j < cols; j++) {
        double v = (t ? A[(int64_t)j * LD + i] : A[(int64_t)i * LD + j]) * x[j];
        w += v, scale += fabs(v);
      }
      want[i] = w;
      if (!close_enough(y[i], w, scale, 4e-6)) {
        ok = 0;
        snprintf(why, cap, "sgemv %s m=%d n=%d: element %d is %.9g, expected %.9g", t ? "T" : "N", M, N, i, y[i], w);
      }
    }
  }
  if (ok) {
    fill(x, N, 5);
    double w = 0, scale = 0;
    for (int i = 0; i < N; i++) xf[i] = (float)x[i], w += x[i] * x[i], scale += x[i] * x[i];
    float d = f->sdot(N, xf, xf);
    if (!close_enough(d, w, scale, 4e-6)) {
      ok = 0;
      snprintf(why, cap, "sdot n=%d: %.9g, expected %.9g", N, d, w);
    }
  }
  (void)want;
  free(A), free(a);
  return ok;
}

int cpu_blas_check(const cpu_blas_fns *f, char *why, size_t cap) {
  if (cap) why[0] = 0;
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
    for (int dbl = 0; dbl < 2; dbl++)
      if (!check_gemm(f, &CASES[i], dbl, why, cap)) return 0;
  return check_gemv_dot(f, why, cap);
}

int em_blas_verify(char *why, size_t cap) { return cpu_blas_check(&cpu_blas_real, why, cap); }

/* OpenBLAS's name for the kernels it runs ("SkylakeX", "Haswell", ...). */
char *openblas_get_corename(void);
const char *em_blas_corename(void) { return openblas_get_corename(); }
