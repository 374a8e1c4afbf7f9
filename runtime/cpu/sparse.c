/* sparse.c - row-sparse gradients on the CPU: the weight gradient of an embedding bag as
 * distinct rows and their values, the coalescing of row lists, and the row-wise optimizer
 * updates that read them (SGD, Adagrad, row-wise Adagrad).
 *
 * Every contribution is first tagged with its row and its position, and the tags sorted
 * (row, then position). Each distinct row then sums its contributions in position order,
 * so rows can be shared out among threads and the result does not depend on their number.
 * Nothing here is ever as large as the table: the work and memory follow the indices. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_impl.h"
#include "ember/sparse.h"

typedef struct row_pos {
  int64_t row, pos;
} row_pos;

static int by_row_then_pos(const void *a, const void *b) {
  const row_pos *x = a, *y = b;
  if (x->row != y->row) return x->row < y->row ? -1 : 1;
  return (x->pos > y->pos) - (x->pos < y->pos);
}

static int use_threads(int64_t tasks, int64_t work) {
  return tasks > 1 && work >= EM_PARALLEL_GRAIN && em_get_num_threads() > 1 && !omp_in_parallel();
}

/* Sorts tags (given in ascending pos) by row then pos. A stable LSD radix sort on the row,
 * 11 bits a pass and only as many passes as the largest row needs (two for 4M rows), keeps
 * equal rows in pos order, so it gives qsort's order; qsort's comparisons through a
 * function pointer cost a recommendation model's step more than its lookups. qsort for few
 * tags, negative rows or no scratch. */
#define RADIX_BITS 11
static void sort_tags(row_pos *tags, int64_t n) {
  int64_t maxr = 0;
  for (int64_t k = 0; k < n && maxr >= 0; k++) maxr = tags[k].row < 0 ? -1 : (tags[k].row > maxr ? tags[k].row : maxr);
  row_pos *tmp = n >= 64 && maxr >= 0 ? malloc(sizeof *tmp * (size_t)n) : NULL;
  if (!tmp) {
    qsort(tags, (size_t)n, sizeof *tags, by_row_then_pos);
    return;
  }
  row_pos *src = tags, *dst = tmp;
  for (int shift = 0; shift < 63 && (maxr >> shift) > 0; shift += RADIX_BITS) {
    int64_t count[(1 << RADIX_BITS) + 1] = {0};
    const int64_t mask = (1 << RADIX_BITS) - 1;
    for (int64_t k = 0; k < n; k++) count[((src[k].row >> shift) & mask) + 1]++;
    for (int b = 0; b < (1 << RADIX_BITS); b++) count[b + 1] += count[b];
    for (int64_t k = 0; k < n; k++) dst[count[(src[k].row >> shift) & mask]++] = src[k];
    row_pos *t = src;
    src = dst, dst = t;
  }
  if (src != tags) memcpy(tags, src, sizeof *tags * (size_t)n);
  free(tmp);
}

/* Sorts the n tags and writes the distinct rows to rows_out and, in starts[0..nnz], where
 * each row's run of tags begins (starts[nnz] = n). starts needs n + 1 entries. */
static int64_t group_rows(row_pos *tags, int64_t n, int64_t *rows_out, int64_t *starts) {
  sort_tags(tags, n);
  int64_t nnz = 0;
  for (int64_t k = 0; k < n; k++)
    if (k == 0 || tags[k].row != tags[k - 1].row) {
      rows_out[nnz] = tags[k].row;
      starts[nnz++] = k;
    }
  starts[nnz] = n;
  return nnz;
}

static inline int64_t index_at(const em_tensor *idx, int64_t i, int base) {
  const char *p = em_tensor_ptr(idx);
  return (idx->dtype == EM_INT64 ? ((const int64_t *)p)[i] : ((const int32_t *)p)[i]) - base;
}

/* The position in rows[0..nnz) (ascending) of row r; rows holds it. */
static int64_t find_row(const int64_t *rows, int64_t nnz, int64_t r) {
  int64_t lo = 0, hi = nnz - 1;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (rows[mid] < r) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* clang-format off */
#define DEFINE_SPARSE(T, S_)                                                                                   \
  /* values [nnz, D] from tags grouped by row: values[u] = sum over the row's tags of k(pos) * src(pos) */     \
  static void sum_groups_##S_(T *values, const row_pos *tags, const int64_t *starts, int64_t nnz, int64_t D, \
                              const T *src, const int64_t *src_row, const T *scale) {                         \
    int par = use_threads(nnz, starts[nnz] * D);                                                              \
    _Pragma("omp parallel for schedule(static) if(par) num_threads(em_get_num_threads())")                   \
    for (int64_t u = 0; u < nnz; u++) {                                                                       \
      T *restrict v = values + u * D;                                                                         \
      for (int64_t j = 0; j < D; j++) v[j] = 0;                                                               \
      for (int64_t k = starts[u]; k < starts[u + 1]; k++) {                                                   \
        int64_t p = tags[k].pos;                                                                              \
        const T *restrict s = src + (src_row ? src_row[p] : p) * D;                                           \
        T c = scale ? scale[p] : (T)1;                                                                        \
        for (int64_t j = 0; j < D; j++) v[j] += c * s[j];                                                     \
      }                                                                                                       \
    }                                                                                                         \
  }                                                                                                           \
  /* max bags: each maximum's gradient goes to the row argmax names, column by column */                      \
  static void scatter_argmax_##S_(T *values, const int64_t *rows, int64_t nnz, const T *gout,                 \
                                  const int64_t *argmax, int64_t B, int64_t D, int64_t pad) {                 \
    memset(values, 0, sizeof(T) * nnz * D);                                                                   \
    for (int64_t b = 0; b < B; b++)                                                                           \
      for (int64_t j = 0; j < D; j++) {                                                                       \
        int64_t r = argmax[b * D + j];                                                                        \
        if (r < 0 || r == pad) continue;                                                                      \
        values[find_row(rows, nnz, r) * D + j] += gout[b * D + j];                                            \
      }                                                                                                       \
  }                                                                                                           \
  static void rows_update_##S_(T *w, const int64_t *rows, int64_t K, const T *g, T *state, int64_t D,        \
                               const em_row_optim_args *a) {                                                  \
    int par = use_threads(K, K * D);                                                                          \
    T lr = (T)a->lr, eps = (T)a->eps, wd = (T)a->weight_decay, sign = a->maximize ? (T)-1 : (T)1;             \
    _Pragma("omp parallel for schedule(static) if(par) num_threads(em_get_num_threads())")                   \
    for (int64_t k = 0; k < K; k++) {                                                                         \
      int64_t r = rows ? rows[k] : k;                                                                         \
      T *restrict wr = w + r * D;                                                                             \
      const T *restrict gr = g + k * D;                                                                       \
      if (a->rule == EM_ROWS_SGD) {                                                                           \
        for (int64_t j = 0; j < D; j++) wr[j] -= lr * (sign * gr[j] + wd * wr[j]);                            \
      } else if (a->rule == EM_ROWS_ADAGRAD) {                                                                \
        T *restrict sr = state + r * D;                                                                       \
        for (int64_t j = 0; j < D; j++) {                                                                     \
          T gj = sign * gr[j] + wd * wr[j];                                                                   \
          sr[j] += gj * gj;                                                                                   \
          wr[j] -= lr * gj / ((T)sqrt(sr[j]) + eps);                                                               \
        }                                                                                                     \
      } else { /* row-wise Adagrad: one accumulator per row, the mean of the squared gradient */              \
        double sq = 0;                                                                                        \
        for (int64_t j = 0; j < D; j++) {                                                                     \
          T gj = sign * gr[j] + wd * wr[j];                                                                   \
          sq += (double)gj * gj;                                                                              \
        }                                                                                                     \
        state[r] += (T)(sq / (double)D);                                                                      \
        T step = lr / ((T)sqrt(state[r]) + eps);                                                              \
        for (int64_t j = 0; j < D; j++) wr[j] -= step * (sign * gr[j] + wd * wr[j]);                          \
      }                                                                                                       \
    }                                                                                                         \
  }
/* clang-format on */

DEFINE_SPARSE(float, s)
DEFINE_SPARSE(double, d)

#define PTR(t, T) ((t) ? (T *)em_tensor_ptr(t) : NULL)

em_status cpu_embedding_bag_sparse_backward(em_tensor *rows, em_tensor *values, int64_t *nnz, const em_tensor *gout,
                                            const em_tensor *indices, const em_tensor *offsets, const em_tensor *psw,
                                            const em_tensor *argmax, int mode, int64_t pad, int base) {
  int64_t L = em_tensor_numel(indices), B = em_tensor_numel(offsets), D = gout->sizes[1];
  const int64_t *off = PTR(offsets, const int64_t);
  row_pos *tags = malloc(sizeof *tags * (size_t)(L ? L : 1));
  int64_t *starts = malloc(sizeof *starts * (size_t)(L + 1));
  int64_t *bag = malloc(sizeof *bag * (size_t)(L ? L : 1));
  void *scale = malloc(em_dtype_size(gout->dtype) * (size_t)(L ? L : 1));
  if (!tags || !starts || !bag || !scale) {
    free(tags), free(starts), free(bag), free(scale);
    return em_set_error(EM_ERR_MEMORY, "embedding_bag: out of memory for the sparse gradient of %lld indices",
                        (long long)L);
  }
  /* Which bag each index is in, and its factor (per-sample weight, 1 / bag size for means). */
  for (int64_t b = 0; b < B; b++) {
    int64_t s = off[b], e = b + 1 < B ? off[b + 1] : L;
    for (int64_t i = s; i < e; i++) {
      bag[i] = b;
      double k = psw ? (psw->dtype == EM_FLOAT32 ? PTR(psw, const float)[i] : PTR(psw, const double)[i]) : 1.0;
      if (mode == 1) k /= (double)(e - s);
      if (gout->dtype == EM_FLOAT32) ((float *)scale)[i] = (float)k;
      else ((double *)scale)[i] = k;
    }
  }
  int64_t n = 0;
  for (int64_t i = 0; i < L; i++) {
    int64_t r = index_at(indices, i, base);
    if (r != pad) tags[n++] = (row_pos){r, i};
  }
  int64_t *rows_out = PTR(rows, int64_t);
  *nnz = group_rows(tags, n, rows_out, starts);
  int sparse_max = mode == 2;
  if (gout->dtype == EM_FLOAT32) {
    if (sparse_max) scatter_argmax_s(PTR(values, float), rows_out, *nnz, PTR(gout, const float),
                                     PTR(argmax, const int64_t), B, D, pad);
    else sum_groups_s(PTR(values, float), tags, starts, *nnz, D, PTR(gout, const float), bag, scale);
  } else {
    if (sparse_max) scatter_argmax_d(PTR(values, double), rows_out, *nnz, PTR(gout, const double),
                                     PTR(argmax, const int64_t), B, D, pad);
    else sum_groups_d(PTR(values, double), tags, starts, *nnz, D, PTR(gout, const double), bag, scale);
  }
  free(tags), free(starts), free(bag), free(scale);
  return EM_OK;
}

em_status cpu_sparse_coalesce(em_tensor *rows, em_tensor *values, int64_t *nnz, const em_tensor *rows_in,
                              const em_tensor *values_in) {
  int64_t K = em_tensor_numel(rows_in), D = values_in->sizes[1];
  row_pos *tags = malloc(sizeof *tags * (size_t)(K ? K : 1));
  int64_t *starts = malloc(sizeof *starts * (size_t)(K + 1));
  if (!tags || !starts) {
    free(tags), free(starts);
    return em_set_error(EM_ERR_MEMORY, "sparse gradient: out of memory coalescing %lld rows", (long long)K);
  }
  const int64_t *in = PTR(rows_in, const int64_t);
  for (int64_t k = 0; k < K; k++) tags[k] = (row_pos){in[k], k};
  *nnz = group_rows(tags, K, PTR(rows, int64_t), starts);
  if (values_in->dtype == EM_FLOAT32)
    sum_groups_s(PTR(values, float), tags, starts, *nnz, D, PTR(values_in, const float), NULL, NULL);
  else sum_groups_d(PTR(values, double), tags, starts, *nnz, D, PTR(values_in, const double), NULL, NULL);
  free(tags), free(starts);
  return EM_OK;
}

em_status cpu_optim_rows(em_tensor *param, const em_tensor *rows, const em_tensor *grad, em_tensor *state,
                         const em_row_optim_args *args) {
  int64_t K = grad->sizes[0], D = grad->sizes[1];
  if (param->dtype == EM_FLOAT32)
    rows_update_s(PTR(param, float), PTR(rows, const int64_t), K, PTR(grad, const float), PTR(state, float), D, args);
  else
    rows_update_d(PTR(param, double), PTR(rows, const int64_t), K, PTR(grad, const double), PTR(state, double), D,
                  args);
  return EM_OK;
}
