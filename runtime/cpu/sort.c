/* sort.c - CPU sort and top-k along a dim.
 *
 * Each row along the dim is copied into (value, position) pairs and merge-sorted: stable
 * (equal values keep their order, in either direction), NaN ordered as the largest value
 * (last ascending, first descending), as PyTorch's stable sort. top-k sorts the row and
 * keeps the first k. Rows are shared among OpenMP threads, each with its own buffers. */
#include <stdlib.h>
#include <omp.h>
#include "cpu_impl.h"

#define RUN 16 /* insertion-sorted runs before merging */

#define NAN_F(x) ((x) != (x))
#define NAN_I(x) 0

/* clang-format off */
#define DEF_SORT(N, T, ISNAN)                                                               \
  typedef struct {                                                                          \
    T v;                                                                                    \
    int64_t i;                                                                              \
  } pair_##N;                                                                               \
  /* a strictly before b in the requested order (NaN is the largest value) */               \
  static inline int before_##N(T a, T b, int desc) {                                        \
    return desc ? (a > b || (ISNAN(a) && !ISNAN(b))) : (a < b || (ISNAN(b) && !ISNAN(a)));  \
  }                                                                                         \
  /* Sorts p[0..n) using tmp (n pairs); returns whichever buffer holds the result. */       \
  static pair_##N *msort_##N(pair_##N *p, pair_##N *tmp, int64_t n, int desc) {             \
    for (int64_t lo = 0; lo < n; lo += RUN) {                                               \
      int64_t hi = lo + RUN < n ? lo + RUN : n;                                             \
      for (int64_t i = lo + 1; i < hi; i++) {                                               \
        pair_##N x = p[i];                                                                  \
        int64_t j = i;                                                                      \
        for (; j > lo && before_##N(x.v, p[j - 1].v, desc); j--) p[j] = p[j - 1];           \
        p[j] = x;                                                                           \
      }                                                                                     \
    }                                                                                       \
    for (int64_t width = RUN; width < n; width *= 2) {                                      \
      for (int64_t lo = 0; lo < n; lo += 2 * width) {                                       \
        int64_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n; \
        int64_t a = lo, b = mid, o = lo;                                                    \
        /* take from the right only when strictly before: stable */                        \
        while (a < mid && b < hi) tmp[o++] = before_##N(p[b].v, p[a].v, desc) ? p[b++] : p[a++]; \
        while (a < mid) tmp[o++] = p[a++];                                                  \
        while (b < hi) tmp[o++] = p[b++];                                                   \
      }                                                                                     \
      pair_##N *t = p;                                                                      \
      p = tmp, tmp = t;                                                                     \
    }                                                                                       \
    return p;                                                                               \
  }                                                                                         \
  static int sort_rows_##N(const sort_job *job) {                                           \
    int failed = 0;                                                                         \
    int64_t n = job->n;                                                                     \
    _Pragma("omp parallel num_threads(em_get_num_threads()) if (use_threads(job))")         \
    {                                                                                       \
      pair_##N *buf = malloc(2 * (size_t)(n ? n : 1) * sizeof *buf);                        \
      if (!buf) {                                                                           \
        _Pragma("omp atomic write")                                                         \
        failed = 1;                                                                         \
      }                                                                                     \
      _Pragma("omp for schedule(dynamic)") /* a thread that loses its core holds up less */  \
      for (int64_t r = 0; r < job->rows; r++) {                                             \
        if (!buf) continue;                                                                 \
        int64_t off[3];                                                                     \
        row_offsets(job, r, off);                                                           \
        const char *x = job->a + off[0];                                                    \
        for (int64_t i = 0; i < n; i++) buf[i].v = *(const T *)(x + i * job->step[0]), buf[i].i = i; \
        pair_##N *s = msort_##N(buf, buf + n, n, job->desc);                                \
        for (int64_t i = 0; i < job->k; i++) {                                              \
          *(T *)(job->values + off[1] + i * job->step[1]) = s[i].v;                         \
          if (job->indices) *(int64_t *)(job->indices + off[2] + i * job->step[2]) = s[i].i + job->base; \
        }                                                                                   \
      }                                                                                     \
      free(buf);                                                                            \
    }                                                                                       \
    return failed;                                                                          \
  }
/* clang-format on */

/* Rows are every position of the other dims; offsets in bytes for a, values, indices. */
typedef struct {
  int nother;
  int64_t size[EM_MAX_DIMS], stride[3][EM_MAX_DIMS];
  int64_t rows, n, k, step[3];
  const char *a;
  char *values, *indices;
  int desc, base;
} sort_job;

static void row_offsets(const sort_job *job, int64_t r, int64_t *off) {
  off[0] = off[1] = off[2] = 0;
  for (int d = job->nother - 1; d >= 0; d--) {
    int64_t i = r % job->size[d];
    r /= job->size[d];
    for (int t = 0; t < 3; t++) off[t] += i * job->stride[t][d];
  }
}

static int use_threads(const sort_job *job) {
  return job->rows > 1 && job->rows * job->n >= EM_PARALLEL_GRAIN / 4 && em_get_num_threads() > 1 && !omp_in_parallel();
}

DEF_SORT(f32, float, NAN_F)
DEF_SORT(f64, double, NAN_F)
DEF_SORT(i32, int32_t, NAN_I)
DEF_SORT(i64, int64_t, NAN_I)
DEF_SORT(u8, uint8_t, NAN_I)

em_status cpu_sort(em_tensor *values, em_tensor *indices, const em_tensor *a, int dim, int descending, int64_t k,
                   int base) {
  sort_job job = {.a = em_tensor_ptr(a),
                  .values = em_tensor_ptr(values),
                  .indices = indices ? em_tensor_ptr(indices) : NULL,
                  .desc = descending,
                  .base = base,
                  .k = k,
                  .rows = 1};
  const em_tensor *t[3] = {a, values, indices};
  for (int d = 0; d < a->ndim; d++) {
    if (d == dim) continue;
    job.size[job.nother] = a->sizes[d];
    for (int i = 0; i < 3; i++)
      job.stride[i][job.nother] = t[i] ? t[i]->strides[d] * (int64_t)em_dtype_size(t[i]->dtype) : 0;
    job.rows *= a->sizes[d];
    job.nother++;
  }
  job.n = a->ndim ? a->sizes[dim] : 1;
  for (int i = 0; i < 3; i++)
    job.step[i] = t[i] && t[i]->ndim ? t[i]->strides[dim] * (int64_t)em_dtype_size(t[i]->dtype) : 0;
  if (job.rows == 0 || job.k == 0) return EM_OK;
  int failed;
  switch (a->dtype) {
    case EM_FLOAT32: failed = sort_rows_f32(&job); break;
    case EM_FLOAT64: failed = sort_rows_f64(&job); break;
    case EM_INT32: failed = sort_rows_i32(&job); break;
    case EM_INT64: failed = sort_rows_i64(&job); break;
    case EM_UINT8:
    case EM_BOOL: failed = sort_rows_u8(&job); break;
    default:
      return em_set_error(EM_ERR_DTYPE, "sort: dtype %s is not supported on the CPU (convert with to('float32') first)",
                          em_dtype_name(a->dtype));
  }
  if (failed) return em_set_error(EM_ERR_MEMORY, "sort: out of memory for rows of %lld elements", (long long)job.n);
  return EM_OK;
}
