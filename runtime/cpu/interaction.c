/* interaction.c - DLRM's dot interaction on the CPU: per sample, the dot products of every
 * pair of feature vectors (the bottom MLP's output and the pooled embeddings), the strictly
 * lower triangle (or with the diagonal) laid out after the bottom output.
 *
 * Samples are independent forward and backward, so threads share them; the n x n products
 * of one sample are small (27 x 27 for Criteo's 26 tables), so plain loops over rows of D
 * beat a batched GEMM plus a gather and never build the [B, n, n] matrix. */
#include <omp.h>
#include <string.h>
#include "cpu_impl.h"

static int use_threads(int64_t tasks, int64_t work) {
  return tasks > 1 && work >= EM_PARALLEL_GRAIN && em_get_num_threads() > 1 && !omp_in_parallel();
}

#define MAX_FEATURES 1024

/* A dot product of two rows of D: eight independent partial sums (one vector register;
 * the sequential sum is a chain of D dependent additions, which dominated at D = 16), added
 * pairwise at the end. The order depends on D only, never on the thread count. */
#define DEFINE_DOT(T, S_)                                                                                      \
  static inline T dot_##S_(const T *restrict x, const T *restrict y, int64_t D) {                             \
    T p[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                                                        \
    int64_t d = 0;                                                                                            \
    for (; d + 8 <= D; d += 8)                                                                                \
      for (int l = 0; l < 8; l++) p[l] += x[d + l] * y[d + l];                                                \
    T s = ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));                                  \
    for (; d < D; d++) s += x[d] * y[d];                                                                      \
    return s;                                                                                                 \
  }                                                                                                           \
  static inline void axpy_##S_(T *restrict y, T a, const T *restrict x, int64_t D) {                          \
    for (int64_t d = 0; d < D; d++) y[d] += a * x[d];                                                         \
  }

/* clang-format off */
#define DEFINE_INTERACTION(T, S_)                                                                              \
  DEFINE_DOT(T, S_)                                                                                           \
  static void forward_##S_(T *out, const T *const *f, int n, int64_t B, int64_t D, int self) {                \
    int64_t W = D + (int64_t)n * (n - 1 + 2 * self) / 2;                                                      \
    int par = use_threads(B, B * W * D);                                                                      \
    _Pragma("omp parallel for schedule(static) if(par) num_threads(em_get_num_threads())")                   \
    for (int64_t b = 0; b < B; b++) {                                                                         \
      T *o = out + b * W;                                                                                     \
      memcpy(o, f[0] + b * D, sizeof(T) * D);                                                                 \
      int64_t k = D;                                                                                          \
      for (int i = 0; i < n; i++) {                                                                           \
        const T *xi = f[i] + b * D;                                                                           \
        for (int j = 0; j < i + self; j++) o[k++] = dot_##S_(xi, f[j] + b * D, D);                            \
      }                                                                                                       \
    }                                                                                                         \
  }                                                                                                           \
  /* d out[k] / d x_i = x_j and / d x_j = x_i for the pair (i, j) at k: a self pair counts twice */            \
  static void backward_##S_(T *const *g, const T *gout, const T *const *f, int n, int64_t B, int64_t D,        \
                            int self) {                                                                       \
    int64_t W = D + (int64_t)n * (n - 1 + 2 * self) / 2;                                                      \
    int par = use_threads(B, B * W * D);                                                                      \
    _Pragma("omp parallel for schedule(static) if(par) num_threads(em_get_num_threads())")                   \
    for (int64_t b = 0; b < B; b++) {                                                                         \
      const T *go = gout + b * W;                                                                             \
      for (int i = 0; i < n; i++)                                                                             \
        if (g[i]) {                                                                                           \
          if (i == 0) memcpy(g[0] + b * D, go, sizeof(T) * D);                                                \
          else memset(g[i] + b * D, 0, sizeof(T) * D);                                                        \
        }                                                                                                     \
      int64_t k = D;                                                                                          \
      for (int i = 0; i < n; i++) {                                                                           \
        const T *xi = f[i] + b * D;                                                                           \
        T *gi = g[i] ? g[i] + b * D : NULL;                                                                   \
        for (int j = 0; j < i + self; j++, k++) {                                                             \
          T c = go[k];                                                                                        \
          if (gi) axpy_##S_(gi, c, f[j] + b * D, D);                                                          \
          if (g[j]) axpy_##S_(g[j] + b * D, c, xi, D);                                                        \
        }                                                                                                     \
      }                                                                                                       \
    }                                                                                                         \
  }
/* clang-format on */

DEFINE_INTERACTION(float, s)
DEFINE_INTERACTION(double, d)

em_status cpu_dot_interaction(em_tensor *out, em_tensor *const *features, int n, int self_interaction) {
  if (n > MAX_FEATURES)
    return em_set_error(EM_ERR_ARGUMENT, "dot_interaction: %d features, expected at most %d", n, MAX_FEATURES);
  const void *f[MAX_FEATURES];
  for (int i = 0; i < n; i++) f[i] = em_tensor_ptr(features[i]);
  int64_t B = features[0]->sizes[0], D = features[0]->sizes[1];
  if (out->dtype == EM_FLOAT32)
    forward_s((float *)em_tensor_ptr(out), (const float *const *)f, n, B, D, self_interaction != 0);
  else forward_d((double *)em_tensor_ptr(out), (const double *const *)f, n, B, D, self_interaction != 0);
  return EM_OK;
}

em_status cpu_dot_interaction_backward(em_tensor *const *grads, const em_tensor *gout, em_tensor *const *features,
                                       int n, int self_interaction) {
  if (n > MAX_FEATURES)
    return em_set_error(EM_ERR_ARGUMENT, "dot_interaction: %d features, expected at most %d", n, MAX_FEATURES);
  const void *f[MAX_FEATURES];
  void *g[MAX_FEATURES];
  for (int i = 0; i < n; i++) {
    f[i] = em_tensor_ptr(features[i]);
    g[i] = grads[i] ? em_tensor_ptr(grads[i]) : NULL;
  }
  int64_t B = features[0]->sizes[0], D = features[0]->sizes[1];
  if (gout->dtype == EM_FLOAT32)
    backward_s((float *const *)g, (const float *)em_tensor_ptr(gout), (const float *const *)f, n, B, D,
               self_interaction != 0);
  else
    backward_d((double *const *)g, (const double *)em_tensor_ptr(gout), (const double *const *)f, n, B, D,
               self_interaction != 0);
  return EM_OK;
}
