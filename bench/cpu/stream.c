/* stream.c - a STREAM-like measurement of this machine's memory bandwidth, the reference
 * that bench/tensor/run_tensor.sh holds ember's and PyTorch's bandwidth-bound ops (add, sum)
 * against.
 *
 * Kernels, on float32 arrays of n elements each (the same element type and, by default,
 * the same size as the tensor benchmarks, so that both see the same cache behaviour):
 *   copy   c[i] = a[i]                 counted as 2 arrays moved (1 read + 1 write)
 *   scale  c[i] = s * a[i]             2 arrays
 *   add    c[i] = a[i] + b[i]          3 arrays (2 reads + 1 write)
 *   triad  c[i] = a[i] + s * b[i]      3 arrays
 *   read   sum += a[i]                 1 array (what a full reduction moves)
 * Bytes are counted as STREAM counts them: the write-allocate read that a normal store
 * causes is NOT added. The tensor benchmarks count their traffic the same way, so the ratio
 * "op rate / STREAM rate" compares like with like (both pay the hidden write-allocate).
 *
 * Usage: stream [-n elements] [-t threads] [-r reps] [-w warmup]
 * Prints one JSON line per kernel with every repetition's time in milliseconds. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_cli.h"


static void emit(const char *op, long n, int threads, double bytes, const double *t, int reps) {
  printf("{\"impl\":\"stream\",\"op\":\"%s\",\"n\":%ld,\"threads\":%d,\"bytes\":%.0f,\"flops\":0,"
         "\"times_ms\":[", op, n, threads, bytes);
  for (int i = 0; i < reps; i++) printf("%s%.4f", i ? "," : "", t[i]);
  printf("]}\n");
  fflush(stdout);
}

/* The kernels. Static schedules everywhere so that each thread touches the same pages it
 * first-touched at initialisation (matters on multi-socket machines, harmless elsewhere). */
static void k_copy(float *restrict c, const float *restrict a, long n) {
#pragma omp parallel for simd schedule(static)
  for (long i = 0; i < n; i++) c[i] = a[i];
}
static void k_scale(float *restrict c, const float *restrict a, float s, long n) {
#pragma omp parallel for simd schedule(static)
  for (long i = 0; i < n; i++) c[i] = s * a[i];
}
static void k_add(float *restrict c, const float *restrict a, const float *restrict b, long n) {
#pragma omp parallel for simd schedule(static)
  for (long i = 0; i < n; i++) c[i] = a[i] + b[i];
}
static void k_triad(float *restrict c, const float *restrict a, const float *restrict b, float s,
                    long n) {
#pragma omp parallel for simd schedule(static)
  for (long i = 0; i < n; i++) c[i] = a[i] + s * b[i];
}
static float k_read(const float *restrict a, long n) {
  float sum = 0.0f;
#pragma omp parallel for simd schedule(static) reduction(+ : sum)
  for (long i = 0; i < n; i++) sum += a[i];
  return sum;
}

int main(int argc, char **argv) {
  long n = opt(argc, argv, "-n", 16L << 20);
  int threads = (int)opt(argc, argv, "-t", 2);
  int reps = (int)opt(argc, argv, "-r", 10);
  int warmup = (int)opt(argc, argv, "-w", 2);
  omp_set_num_threads(threads);

  size_t bytes = (size_t)n * sizeof(float);
  size_t padded = (bytes + 63) / 64 * 64;   /* aligned_alloc wants a multiple of the alignment */
  float *a = aligned_alloc(64, padded), *b = aligned_alloc(64, padded), *c = aligned_alloc(64, padded);
  double *t = malloc(sizeof(double) * reps);
  if (!a || !b || !c || !t) {
    fprintf(stderr, "stream: cannot allocate 3 arrays of %ld float32\n", n);
    return 1;
  }
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; i++) {
    a[i] = 1.0f;
    b[i] = 2.0f;
    c[i] = 0.0f;
  }

  volatile float sink = 0.0f;   /* keeps the read kernel from being optimised away */
  const float s = 3.0f;
  const char *names[] = {"copy", "scale", "add", "triad", "read"};
  const double arrays[] = {2, 2, 3, 3, 1};
  for (int k = 0; k < 5; k++) {
    for (int r = -warmup; r < reps; r++) {
      double t0 = now_ms();
      switch (k) {
        case 0: k_copy(c, a, n); break;
        case 1: k_scale(c, a, s, n); break;
        case 2: k_add(c, a, b, n); break;
        case 3: k_triad(c, a, b, s, n); break;
        default: sink += k_read(a, n); break;
      }
      double dt = now_ms() - t0;
      if (r >= 0) t[r] = dt;
    }
    emit(names[k], n, threads, arrays[k] * (double)bytes, t, reps);
  }
  if (c[n / 2] != 1.0f + s * 2.0f || sink == 0.0f) {   /* triad ran last into c */
    fprintf(stderr, "stream: wrong result c[%ld] = %g\n", n / 2, c[n / 2]);
    return 1;
  }
  free(a);
  free(b);
  free(c);
  free(t);
  return 0;
}
