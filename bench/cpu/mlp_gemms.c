/* mlp_gemms.c - the GEMMs of one training step of the Fashion-MNIST MLP (784-256-128-10,
 * batch 128), each in the layout the Linear layer's forward and backward hand to cpu_gemm,
 * through OpenBLAS (oneDNN turned off) and through oneDNN's float32 matmul, side by side.
 * The size rule of runtime/cpu/dnnl.c (cpu_dnnl_gemm_wanted) is checked against these
 * numbers; the last shapes are DLRM's narrow layers (bench/recsys), which stay on OpenBLAS
 * (oneDNN threads them and loses at 2 threads).
 *
 * For each shape, rounds of [OpenBLAS, oneDNN] interleaved (load from other users of the
 * machine falls on both), each round `reps` calls; prints the best and the median round
 * in microseconds per call and the ratio of the medians.
 *
 * Usage: mlp_gemms [-r rounds] [-n reps] [-t threads] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cpu/cpu_dnnl.h"
#include "cpu/cpu_impl.h"
#include "ember/tensor.h"

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static em_tensor *filled(int64_t r, int64_t c) {
  em_tensor *t = NULL;
  em_device cpu = {EM_CPU, 0};
  if (em_empty(&t, 2, (int64_t[]){r, c}, EM_FLOAT32, cpu)) exit(1);
  float *p = (float *)em_tensor_ptr(t);
  for (int64_t i = 0; i < r * c; i++) p[i] = (float)((i * 7919 % 1000) / 500.0 - 1);
  return t;
}

/* An operand: rows x cols, stored transposed (a [cols, rows] tensor seen through a transpose) or not. */
static em_tensor *operand(int64_t rows, int64_t cols, int transposed) {
  if (!transposed) return filled(rows, cols);
  em_tensor *s = filled(cols, rows), *t = NULL;
  if (em_transpose(&t, s, 0, 1)) exit(1);
  em_tensor_release(s);
  return t;
}

typedef struct shape {
  const char *name;
  int64_t M, N, K;
  int at, bt; /* a, b stored transposed */
  double beta;
} shape;

static cpu_dnnl_mat dmat(em_tensor *t) {
  cpu_dnnl_mat m = {(float *)em_tensor_ptr(t), em_tensor_stride(t, 0), em_tensor_stride(t, 1)};
  return m;
}

/* path 0: cpu_gemm with oneDNN off (OpenBLAS, split over the threads as ember does);
 * 1: oneDNN's matmul called directly, whatever cpu_dnnl_gemm_wanted says of the size */
static double round_us(int path, const shape *s, em_tensor *c, em_tensor *a, em_tensor *b, int reps) {
  cpu_dnnl_force_(path);
  double t0 = now_us();
  for (int i = 0; i < reps; i++)
    if (path == 0) cpu_gemm(c, a, b, 1, s->beta);
    else cpu_dnnl_matmul(dmat(c), dmat(a), dmat(b), s->M, s->N, s->K, 1, (float)s->beta, 0);
  return (now_us() - t0) / reps;
}

int main(int argc, char **argv) {
  int rounds = 9, reps = 50;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-r") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-n") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-t") && i + 1 < argc) em_set_num_threads(atoi(argv[++i]));
    else {
      fprintf(stderr, "usage: mlp_gemms [-r rounds] [-n reps] [-t threads]\n");
      return 2;
    }
  }
  if (rounds < 1) rounds = 1;
  if (reps < 1) reps = 1;
  cpu_dnnl_force_(1);
  if (!cpu_dnnl_available()) {
    printf("mlp_gemms: oneDNN is not built in\n");
    return 0;
  }
  printf("%s; OpenBLAS %s kernels; %d threads; %d rounds of %d calls\n", em_dnnl_config(), em_blas_corename(),
         em_get_num_threads(), rounds, reps);
  /* y = x @ w^T (+ b: beta 1), gw = gy^T @ x, gx = gy @ w */
  const shape shapes[] = {
      {"fc1 forward", 128, 256, 784, 0, 1, 1}, {"fc1 grad w", 256, 784, 128, 1, 0, 0},
      {"fc2 forward", 128, 128, 256, 0, 1, 1}, {"fc2 grad w", 128, 256, 128, 1, 0, 0},
      {"fc2 grad x", 128, 256, 128, 0, 0, 0},  {"fc3 forward", 128, 10, 128, 0, 1, 1},
      {"fc3 grad w", 10, 128, 128, 1, 0, 0},   {"fc3 grad x", 128, 128, 10, 0, 0, 0},
      /* DLRM's MLPs (bottom 13-512-256-64-16, top 512-256-1, batch 128): the narrow forwards */
      {"dlrm 13->512", 128, 512, 13, 0, 1, 1}, {"dlrm 64->16", 128, 16, 64, 0, 1, 1},
      {"dlrm 256->1", 128, 1, 256, 0, 1, 1},
  };
  double tot[2] = {0, 0};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    const shape *s = &shapes[i];
    em_tensor *a = operand(s->M, s->K, s->at), *b = operand(s->K, s->N, s->bt), *c = filled(s->M, s->N);
    double *t[2];
    for (int p = 0; p < 2; p++) t[p] = malloc(sizeof(double) * rounds);
    for (int r = -1; r < rounds; r++)
      for (int p = 0; p < 2; p++) {
        double us = round_us(p, s, c, a, b, reps);
        if (r >= 0) t[p][r] = us;
      }
    for (int p = 0; p < 2; p++) qsort(t[p], rounds, sizeof(double), cmp);
    double gf = 2.0 * s->M * s->N * s->K / 1e3;
    printf("%-12s [%3lld x %3lld]%s @ [%3lld x %3lld]%s  OpenBLAS %7.1f us (best %7.1f, %5.1f GF/s)  oneDNN %7.1f us "
           "(best %7.1f, %5.1f GF/s)  ratio %.2f\n",
           s->name, (long long)s->M, (long long)s->K, s->at ? "^T" : "  ", (long long)s->K, (long long)s->N,
           s->bt ? "^T" : "  ", t[0][rounds / 2], t[0][0], gf / t[0][0], t[1][rounds / 2], t[1][0], gf / t[1][0],
           t[1][rounds / 2] / t[0][rounds / 2]);
    tot[0] += t[0][0], tot[1] += t[1][0];
    for (int p = 0; p < 2; p++) free(t[p]);
    em_tensor_release(a), em_tensor_release(b), em_tensor_release(c);
  }
  printf("sum of bests: OpenBLAS %.1f us, oneDNN %.1f us\n", tot[0], tot[1]);
  cpu_dnnl_force_(-1);
  return 0;
}
