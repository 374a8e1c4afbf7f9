/* interaction.c - DLRM's dot interaction on the CPU: per sample, the dot products of every
 * pair of feature vectors (the bottom MLP's output and the pooled embeddings), the strictly
 * lower triangle (or with the diagonal) laid out after the bottom output.
 *
 * Samples are independent forward and backward, so threads share them; the n x n products
 * of one sample are small (27 x 27 for Criteo's 26 tables), so plain loops over rows of D
 * beat a batched GEMM plus a gather and never build the [B, n, n] matrix. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_impl.h"

static int use_threads(int64_t tasks, int64_t work) {
  return tasks > 1 && work >= EM_PARALLEL_GRAIN && em_get_num_threads() > 1 && !omp_in_parallel();
}

#define MAX_FEATURES 1024

/* Per sample, the features are an n x D matrix X and the products its Gram matrix X X^T.
 * One dot product per pair (a reduction of D = 16 into one number) wastes most of a vector
 * unit; instead X is transposed into a scratch [D, n] and row i of the products is built
 * for all j < i at once, d after d (vectors across j), rows padded to blocks of LANES.
 * Backward: with S the symmetric n x n matrix of the incoming gradients (a self pair twice
 * on the diagonal), dX = S X, four rows at a time summed in registers. Sums run over d
 * (forward) or j (backward) in a fixed order: results never depend on the thread count.
 * Scratch: one block per thread; if it cannot be had, the plain loops below run instead. */
#define STACK_SCRATCH 8192 /* bytes of scratch a thread keeps on its stack */
#define LANES 16 /* one AVX-512 vector of floats; fixed, so the compiler vectorises the block */
#define PAD(n) (((n) + LANES - 1) / LANES * LANES)

/* clang-format off */
#define DEFINE_INTERACTION(T, S_)                                                                              \
  static void sample_forward_##S_(T *restrict o, const T *const *f, int64_t b, int n, int64_t D, int self,     \
                                  T *restrict xt) {                                                           \
    int np = PAD(n);                                                                                          \
    memcpy(o, f[0] + b * D, sizeof(T) * D);                                                                   \
    for (int j = 0; j < n; j++) {                                                                             \
      const T *x = f[j] + b * D;                                                                              \
      for (int64_t d = 0; d < D; d++) xt[d * np + j] = x[d];                                                  \
    }                                                                                                         \
    /* four rows i at a time: eight independent accumulator vectors hide the FMA latency */         \
    for (int i0 = 0; i0 < n; i0 += 4) {                                                                       \
      int nr = n - i0 < 4 ? n - i0 : 4, mmax = i0 + nr - 1 + self;                                            \
      const T *x0 = f[i0] + b * D, *x1 = f[i0 + (nr > 1)] + b * D;                                            \
      const T *x2 = f[i0 + (nr > 2) * 2] + b * D, *x3 = f[i0 + (nr > 3) * 3] + b * D;                         \
      for (int j0 = 0; j0 < mmax; j0 += LANES) {                                                              \
        T a0[LANES] = {0}, a1[LANES] = {0}, a2[LANES] = {0}, a3[LANES] = {0};                                 \
        for (int64_t d = 0; d < D; d++) {                                                                     \
          const T *restrict row = xt + d * np + j0;                                                           \
          T c0 = x0[d], c1 = x1[d], c2 = x2[d], c3 = x3[d];                                                   \
          for (int l = 0; l < LANES; l++) {                                                                   \
            a0[l] += c0 * row[l], a1[l] += c1 * row[l];                                                       \
            a2[l] += c2 * row[l], a3[l] += c3 * row[l];                                                       \
          }                                                                                                   \
        }                                                                                                     \
        T *acc[4] = {a0, a1, a2, a3};                                                                         \
        for (int r = 0; r < nr; r++) {                                                                        \
          int i = i0 + r, m = i + self, w = m - j0 < LANES ? m - j0 : LANES;                                  \
          if (w > 0) memcpy(o + D + (int64_t)i * (i - 1 + 2 * self) / 2 + j0, acc[r], sizeof(T) * (size_t)w); \
        }                                                                                                     \
      }                                                                                                       \
    }                                                                                                         \
  }                                                                                                           \
  static void forward_##S_(T *out, const T *const *f, int n, int64_t B, int64_t D, int self) {                \
    int64_t W = D + (int64_t)n * (n - 1 + 2 * self) / 2;                                                      \
    int par = use_threads(B, B * W * D);                                                                      \
    _Pragma("omp parallel if(par) num_threads(em_get_num_threads())")                                         \
    {                                                                                                         \
      /* scratch on the stack when it is small (Criteo's 27 x 16: 2 KB): a malloc per thread per   \
       * call showed in the step's serial time */                                                       \
      T local[STACK_SCRATCH / sizeof(T)];                                                                     \
      size_t xn = (size_t)(PAD(n) * D);                                                                       \
      T *xt = xn <= sizeof local / sizeof(T) ? local : calloc(xn, sizeof(T)); /* the padding stays 0 */       \
      if (xt == local) memset(local, 0, xn * sizeof(T));                                                      \
      _Pragma("omp for schedule(static)")                                                                     \
      for (int64_t b = 0; b < B; b++) {                                                                       \
        T *o = out + b * W;                                                                                   \
        if (xt) { sample_forward_##S_(o, f, b, n, D, self, xt); continue; }                                  \
        memcpy(o, f[0] + b * D, sizeof(T) * D);                                                               \
        int64_t k = D;                                                                                        \
        for (int i = 0; i < n; i++)                                                                           \
          for (int j = 0; j < i + self; j++) {                                                                \
            const T *xi = f[i] + b * D, *xj = f[j] + b * D;                                                   \
            T s = 0;                                                                                          \
            for (int64_t d = 0; d < D; d++) s += xi[d] * xj[d];                                               \
            o[k++] = s;                                                                                       \
          }                                                                                                   \
      }                                                                                                       \
      if (xt != local) free(xt);                                                                              \
    }                                                                                                         \
  }                                                                                                           \
  /* d out[k] / d x_i = x_j and / d x_j = x_i for the pair (i, j) at k: a self pair counts twice.      \
   * So dX = S X with S the symmetric n x n matrix of the incoming gradients (2x on a self            \
   * pair's diagonal). Four rows of dX at a time, LANES columns at a time, are summed in registers      \
   * over j in ascending order (no read-modify-write of a scratch row per j); S's entries for the     \
   * four rows are gathered from gout first. */                                                      \
  static void sample_backward_##S_(T *const *g, const T *restrict go, const T *const *f, int64_t b, int n,     \
                                   int64_t D, int self, T *restrict cs) {                                     \
    for (int i0 = 0; i0 < n; i0 += 4) {                                                                       \
      int nr = n - i0 < 4 ? n - i0 : 4;                                                                       \
      for (int r = 0; r < 4; r++) {                                                                           \
        int i = i0 + r;                                                                                       \
        T *c = cs + r * n;                                                                                    \
        if (r >= nr) { memset(c, 0, sizeof(T) * (size_t)n); continue; }                                      \
        const T *own = go + D + (int64_t)i * (i - 1 + 2 * self) / 2; /* row i's pairs j < i (+ itself) */    \
        memcpy(c, own, sizeof(T) * (size_t)i);                                                                \
        c[i] = self ? 2 * own[i] : 0;                                                                         \
        for (int j = i + 1; j < n; j++) c[j] = go[D + (int64_t)j * (j - 1 + 2 * self) / 2 + i];              \
      }                                                                                                       \
      for (int64_t d0 = 0; d0 < D; d0 += LANES) {                                                             \
        int64_t w = D - d0 < LANES ? D - d0 : LANES;                                                          \
        T a0[LANES] = {0}, a1[LANES] = {0}, a2[LANES] = {0}, a3[LANES] = {0};                                 \
        for (int j = 0; j < n; j++) {                                                                         \
          T pad[LANES] = {0}; /* a ragged last block reads through zeros */                                    \
          const T *restrict xj = f[j] + b * D + d0;                                                           \
          if (w < LANES) xj = memcpy(pad, xj, sizeof(T) * (size_t)w);                                         \
          T c0 = cs[j], c1 = cs[n + j], c2 = cs[2 * n + j], c3 = cs[3 * n + j];                               \
          for (int l = 0; l < LANES; l++) {                                                                   \
            a0[l] += c0 * xj[l], a1[l] += c1 * xj[l];                                                         \
            a2[l] += c2 * xj[l], a3[l] += c3 * xj[l];                                                         \
          }                                                                                                   \
        }                                                                                                     \
        T *acc[4] = {a0, a1, a2, a3};                                                                         \
        for (int r = 0; r < nr; r++) {                                                                        \
          int i = i0 + r;                                                                                     \
          if (!g[i]) continue;                                                                                \
          T *gi = g[i] + b * D + d0;                                                                          \
          for (int64_t l = 0; l < w; l++) gi[l] = (i == 0 ? go[d0 + l] : 0) + acc[r][l];                      \
        }                                                                                                     \
      }                                                                                                       \
    }                                                                                                         \
  }                                                                                                           \
  static void backward_##S_(T *const *g, const T *gout, const T *const *f, int n, int64_t B, int64_t D,        \
                            int self) {                                                                       \
    int64_t W = D + (int64_t)n * (n - 1 + 2 * self) / 2;                                                      \
    int par = use_threads(B, B * W * D);                                                                      \
    _Pragma("omp parallel if(par) num_threads(em_get_num_threads())")                                         \
    {                                                                                                         \
      T local[STACK_SCRATCH / sizeof(T)];                                                                     \
      T *sm = (size_t)(4 * n) <= sizeof local / sizeof(T) ? local : malloc(sizeof(T) * (size_t)(4 * n));       \
      _Pragma("omp for schedule(static)")                                                                     \
      for (int64_t b = 0; b < B; b++) {                                                                       \
        const T *go = gout + b * W;                                                                           \
        if (sm) { sample_backward_##S_(g, go, f, b, n, D, self, sm); continue; }                             \
        for (int i = 0; i < n; i++)                                                                           \
          if (g[i]) {                                                                                         \
            if (i == 0) memcpy(g[0] + b * D, go, sizeof(T) * D);                                              \
            else memset(g[i] + b * D, 0, sizeof(T) * D);                                                      \
          }                                                                                                   \
        int64_t k = D;                                                                                        \
        for (int i = 0; i < n; i++) {                                                                         \
          const T *xi = f[i] + b * D;                                                                         \
          for (int j = 0; j < i + self; j++, k++) {                                                           \
            const T *xj = f[j] + b * D;                                                                       \
            T c = go[k];                                                                                      \
            if (g[i]) for (int64_t d = 0; d < D; d++) g[i][b * D + d] += c * xj[d];                           \
            if (g[j]) for (int64_t d = 0; d < D; d++) g[j][b * D + d] += c * xi[d];                           \
          }                                                                                                   \
        }                                                                                                     \
      }                                                                                                       \
      if (sm != local) free(sm);                                                                              \
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
