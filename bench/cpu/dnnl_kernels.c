/* dnnl_kernels.c - ember's convolution and GEMM paths side by side: im2col + OpenBLAS (the
 * fallback) against oneDNN in float32, and float32 OpenBLAS against oneDNN's bfloat16
 * (what CPU autocast runs). The rule in runtime/cpu/dnnl.c (cpu_dnnl_conv_wanted) comes from
 * these numbers; bench/cpu/dnnl_kernels.sh runs them and prints the load average.
 *
 * For each shape, rounds of [fallback, oneDNN] (interleaved, so that the machine's load
 * falls on both alike), each a timed call after the first round's warm-up; prints per path
 * the median and the range over the rounds in ms, and the ratio of the medians.
 *
 * Usage: dnnl_kernels [-r rounds] [-t threads] [conv|gemm]... */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cpu/cpu_dnnl.h"
#include "cpu/cpu_impl.h"
#include "ember/autograd.h"
#include "ember/tensor.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void summary(const char *label, double *t, int n, double *median) {
  qsort(t, n, sizeof *t, cmp);
  *median = t[n / 2];
  printf("  %-26s median %9.3f ms  range %9.3f .. %9.3f\n", label, t[n / 2], t[0], t[n - 1]);
}

static em_tensor *filled(int nd, const int64_t *sizes) {
  em_tensor *t = NULL;
  em_device cpu = {EM_CPU, 0};
  if (em_empty(&t, nd, sizes, EM_FLOAT32, cpu)) exit(1);
  float *p = (float *)em_tensor_ptr(t);
  for (int64_t i = 0; i < em_tensor_numel(t); i++) p[i] = (float)((i * 7919 % 1000) / 500.0 - 1);
  return t;
}

typedef struct conv_shape {
  const char *name;
  int64_t N, C, H, W, Co, k;
  int stride, pad;
} conv_shape;

#define F(t) ((float *)em_tensor_ptr(t))

/* which = 0 forward, 1 backward data, 2 backward weights + bias; bf16: oneDNN in bfloat16 */
static double conv_once(const conv_shape *c, int which, int bf16, em_tensor *x, em_tensor *w, em_tensor *b,
                        em_tensor *y, em_tensor *gx, em_tensor *gw, em_tensor *gb) {
  em_conv2d_params p = {{c->stride, c->stride}, {c->pad, c->pad}, {1, 1}, 1};
  cpu_conv_shape s = {c->N, c->C, c->H, c->W, c->Co, c->k, c->k, y->sizes[2], y->sizes[3], c->stride, c->stride,
                      c->pad, c->pad, 1, 1, 1};
  double t0 = now_ms();
  if (bf16 && which == 0) cpu_dnnl_conv2d(F(y), F(x), F(w), F(b), &s, 1);
  else if (bf16 && which == 1) cpu_dnnl_conv2d_backward_data(F(gx), F(y), F(w), &s, 1);
  else if (bf16) cpu_dnnl_conv2d_backward_weights(F(gw), F(gb), F(y), F(x), &s, 1);
  else if (which == 0) cpu_conv2d(y, x, w, b, &p);
  else if (which == 1) cpu_conv2d_backward(gx, NULL, NULL, y, x, w, &p);
  else cpu_conv2d_backward(NULL, gw, gb, y, x, w, &p);
  return now_ms() - t0;
}

static void bench_conv(const conv_shape *c, int rounds) {
  int64_t OH = (c->H + 2 * c->pad - c->k) / c->stride + 1, OW = (c->W + 2 * c->pad - c->k) / c->stride + 1;
  em_tensor *x = filled(4, (int64_t[]){c->N, c->C, c->H, c->W}), *w = filled(4, (int64_t[]){c->Co, c->C, c->k, c->k});
  em_tensor *b = filled(1, (int64_t[]){c->Co}), *y = filled(4, (int64_t[]){c->N, c->Co, OH, OW});
  em_tensor *gx = filled(4, x->sizes), *gw = filled(4, w->sizes), *gb = filled(1, b->sizes);
  printf("conv %s: x [%lld, %lld, %lld, %lld], %lld x %lldx%lld, stride %d, pad %d\n", c->name, (long long)c->N,
         (long long)c->C, (long long)c->H, (long long)c->W, (long long)c->Co, (long long)c->k, (long long)c->k,
         c->stride, c->pad);
  const char *what[3] = {"forward", "backward data", "backward weights+bias"};
  for (int which = 0; which < 3; which++) {
    double *t[3] = {malloc(sizeof(double) * rounds), malloc(sizeof(double) * rounds),
                    malloc(sizeof(double) * rounds)},
           med[3];
    for (int r = -1; r < rounds; r++)
      for (int path = 0; path < 3; path++) {
        cpu_dnnl_force_(path > 0);
        double ms = conv_once(c, which, path == 2, x, w, b, y, gx, gw, gb);
        if (r >= 0) t[path][r] = ms;
      }
    char label[64];
    printf(" %s\n", what[which]);
    snprintf(label, sizeof label, "im2col + OpenBLAS");
    summary(label, t[0], rounds, &med[0]);
    snprintf(label, sizeof label, "oneDNN float32");
    summary(label, t[1], rounds, &med[1]);
    summary("oneDNN bfloat16", t[2], rounds, &med[2]);
    printf("  oneDNN f32 / fallback: %.2f   oneDNN bf16 / fallback: %.2f\n", med[1] / med[0], med[2] / med[0]);
    free(t[0]), free(t[1]), free(t[2]);
  }
  cpu_dnnl_force_(-1);
  em_tensor *all[] = {x, w, b, y, gx, gw, gb};
  for (int i = 0; i < 7; i++) em_tensor_release(all[i]);
}

/* path 0: OpenBLAS float32 (ember's matmul); 1: oneDNN float32; 2: oneDNN bfloat16 */
static double gemm_once(int path, em_tensor *c, em_tensor *a, em_tensor *b) {
  int64_t M = a->sizes[0], K = a->sizes[1], N = b->sizes[1];
  cpu_dnnl_mat cm = {(float *)em_tensor_ptr(c), N, 1}, am = {(float *)em_tensor_ptr(a), K, 1},
               bm = {(float *)em_tensor_ptr(b), N, 1};
  double t0 = now_ms();
  if (path == 0) cpu_gemm(c, a, b, 1, 0);
  else cpu_dnnl_matmul(cm, am, bm, M, N, K, 1, 0, path == 2);
  return now_ms() - t0;
}

static void bench_gemm(int64_t M, int64_t N, int64_t K, int rounds) {
  em_tensor *a = filled(2, (int64_t[]){M, K}), *b = filled(2, (int64_t[]){K, N}), *c = filled(2, (int64_t[]){M, N});
  printf("gemm [%lld x %lld] @ [%lld x %lld]\n", (long long)M, (long long)K, (long long)K, (long long)N);
  double *t[3], med[3];
  for (int p = 0; p < 3; p++) t[p] = malloc(sizeof(double) * rounds);
  cpu_dnnl_force_(1);
  for (int r = -1; r < rounds; r++)
    for (int p = 0; p < 3; p++) {
      double ms = gemm_once(p, c, a, b);
      if (r >= 0) t[p][r] = ms;
    }
  summary("OpenBLAS float32", t[0], rounds, &med[0]);
  summary("oneDNN float32", t[1], rounds, &med[1]);
  summary("oneDNN bfloat16", t[2], rounds, &med[2]);
  printf("  oneDNN f32 / OpenBLAS: %.2f   oneDNN bf16 / OpenBLAS: %.2f\n", med[1] / med[0], med[2] / med[0]);
  for (int p = 0; p < 3; p++) free(t[p]);
  cpu_dnnl_force_(-1);
  em_tensor_release(a), em_tensor_release(b), em_tensor_release(c);
}

int main(int argc, char **argv) {
  int rounds = 11, do_conv = 0, do_gemm = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-r") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-t") && i + 1 < argc) em_set_num_threads(atoi(argv[++i]));
    else if (!strcmp(argv[i], "conv")) do_conv = 1;
    else if (!strcmp(argv[i], "gemm")) do_gemm = 1;
    else {
      fprintf(stderr, "usage: dnnl_kernels [-r rounds] [-t threads] [conv] [gemm]\n");
      return 2;
    }
  }
  if (rounds < 1) rounds = 1;
  if (!do_conv && !do_gemm) do_conv = do_gemm = 1;
  cpu_dnnl_force_(1);
  if (!cpu_dnnl_available()) {
    printf("dnnl_kernels: oneDNN is not built in\n");
    return 0;
  }
  printf("%s; OpenBLAS %s kernels; %d threads; %d rounds\n", em_dnnl_config(), em_blas_corename(),
         em_get_num_threads(), rounds);
  const conv_shape convs[] = {
      {"fmnist conv1 (batch 128)", 128, 1, 28, 28, 32, 3, 1, 1},
      {"fmnist conv2 (batch 128)", 128, 32, 14, 14, 64, 3, 1, 1},
      {"resnet-like 64ch 3x3", 32, 64, 28, 28, 64, 3, 1, 1},
      {"16 -> 32 stride 2", 64, 16, 32, 32, 32, 3, 2, 1},
      {"1x1 128 -> 256", 32, 128, 14, 14, 256, 1, 1, 0},
  };
  if (do_conv)
    for (size_t i = 0; i < sizeof convs / sizeof *convs; i++) bench_conv(&convs[i], rounds);
  if (do_gemm) {
    const int64_t g[][3] = {{512, 512, 512}, {1024, 1024, 1024}, {128, 256, 784}, {128, 784, 256}, {256, 784, 128},
                            {128, 128, 3136}};
    for (size_t i = 0; i < sizeof g / sizeof *g; i++) bench_gemm(g[i][0], g[i][1], g[i][2], rounds);
  }
  return 0;
}
