/* blas_gemm.c - OpenBLAS's cblas_sgemm called directly: the rate that ember's matmul (which
 * calls the same library) is held against in bench/tensor/run_tensor.sh. Whatever ember loses
 * beyond this is overhead of its own (argument checks, allocation of the result, the Lua
 * call), not BLAS.
 *
 * C = A B with A, B, C float32 row-major n x n (default n = 1024), 2 n^3 flops a call.
 * The result is written into the same C every time (no allocation inside the timing).
 *
 * Usage: blas_gemm [-n size] [-t threads] [-r reps] [-w warmup]
 * Prints one JSON line with every repetition's time in milliseconds. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_cli.h"

/* Declared by OpenBLAS's cblas.h too, but not by every cblas.h that may be found first. */
void openblas_set_num_threads(int num_threads);
char *openblas_get_config(void);


int main(int argc, char **argv) {
  long n = opt(argc, argv, "-n", 1024);
  int threads = (int)opt(argc, argv, "-t", 2);
  int reps = (int)opt(argc, argv, "-r", 10);
  int warmup = (int)opt(argc, argv, "-w", 2);
  /* Same knob as ember's em_set_num_threads: the OpenMP build of OpenBLAS takes its
   * threads from the OpenMP pool, so set both. */
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);

  size_t count = (size_t)n * (size_t)n;
  float *a = malloc(count * sizeof(float)), *b = malloc(count * sizeof(float));
  float *c = malloc(count * sizeof(float));
  double *t = malloc(sizeof(double) * reps);
  if (!a || !b || !c || !t) {
    fprintf(stderr, "blas_gemm: cannot allocate three %ld x %ld float32 matrices\n", n, n);
    return 1;
  }
  /* Values in [-1, 1): denormals and overflow cannot slow or break the run. */
  unsigned state = 12345u;
  for (size_t i = 0; i < count; i++) {
    state = state * 1664525u + 1013904223u;
    a[i] = (float)(state >> 8) / (float)(1u << 23) - 1.0f;
    state = state * 1664525u + 1013904223u;
    b[i] = (float)(state >> 8) / (float)(1u << 23) - 1.0f;
  }

  for (int r = -warmup; r < reps; r++) {
    double t0 = now_ms();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, a,
                (int)n, b, (int)n, 0.0f, c, (int)n);
    double dt = now_ms() - t0;
    if (r >= 0) t[r] = dt;
  }

  /* Check one entry against a plain dot product so a broken BLAS cannot report a rate. */
  double ref = 0.0;
  for (long k = 0; k < n; k++) ref += (double)a[k] * (double)b[k * n];
  if (fabs(ref - c[0]) > 1e-3 * (1.0 + fabs(ref))) {
    fprintf(stderr, "blas_gemm: wrong result c[0][0] = %g, expected %g\n", c[0], ref);
    return 1;
  }

  printf("{\"impl\":\"openblas\",\"op\":\"matmul\",\"n\":%ld,\"threads\":%d,\"bytes\":0,"
         "\"flops\":%.0f,\"config\":\"%s\",\"times_ms\":[", n, threads, 2.0 * n * n * n,
         openblas_get_config());
  for (int i = 0; i < reps; i++) printf("%s%.4f", i ? "," : "", t[i]);
  printf("]}\n");
  free(a);
  free(b);
  free(c);
  free(t);
  return 0;
}
