/* index.c - CPU indexing kernels: index_select, gather, scatter, index_add, index_fill,
 * masked_fill, masked_select, nonzero.
 *
 * Indirect ops run on the strided iterator with one trick (TensorIterator's): the tensor
 * indexed through `index` is re-strided to the iteration shape with a zero stride along
 * `dim`, and the kernel adds (index - base) * stride(dim) itself. Every index is checked
 * before anything is written, so a failed op leaves its target unchanged. Kernels that
 * write through an index run on one thread, as duplicate indices would race, but for
 * index_add_ of whole rows, whose threads split the columns instead. */
#include <omp.h>
#include <string.h>
#include "cpu_impl.h"
#include "plugins/plugin_api.h"

/* ---- shared helpers ---- */

static inline int64_t load_index(const char *p, int is64) { return is64 ? *(const int64_t *)p : *(const int32_t *)p; }

typedef struct range_ctx {
  int is64, found;
  int64_t lo, hi, bad; /* valid: lo <= v < hi */
} range_ctx;

static void range_loop(char **data, const int64_t *strides, int64_t n, void *vctx) {
  range_ctx *c = vctx;
  if (c->found) return;
  for (int64_t i = 0; i < n; i++) {
    int64_t v = load_index(data[0] + i * strides[0], c->is64);
    if (v < c->lo || v >= c->hi) {
      c->found = 1;
      c->bad = v;
      return;
    }
  }
}

/* Every value of index must lie in [base, base + size); the error shows the first one
 * that does not, and the dim, in the caller's base. */
static em_status check_indices(const char *op, const em_tensor *index, int dim, int64_t size, int base) {
  range_ctx c = {.is64 = index->dtype == EM_INT64, .lo = base, .hi = base + size};
  const em_tensor *ops[1] = {index};
  em_iter it;
  cpu_iter_init(&it, 1, ops);
  cpu_iter_for_each(&it, range_loop, &c, INT64_MAX); /* serial: report the first bad one */
  if (!c.found) return EM_OK;
  if (size == 0)
    return em_set_error(EM_ERR_INDEX, "%s: index %lld is out of range for dim %d of size 0 (the dim is empty)", op,
                        (long long)c.bad, dim + base);
  return em_set_error(EM_ERR_INDEX, "%s: index %lld is out of range for dim %d of size %lld (expected %lld..%lld)", op,
                      (long long)c.bad, dim + base, (long long)size, (long long)base, (long long)(base + size - 1));
}

/* t seen with the given sizes, its own strides, and stride 0 along dim (or along every
 * dim but dim when only_dim is set: how a 1-d index is spread over an iteration shape). */
static em_tensor *restride(const em_tensor *t, int ndim, const int64_t *sizes, int dim, int only_dim) {
  int64_t strides[EM_MAX_DIMS];
  for (int d = 0; d < ndim; d++) {
    if (only_dim) strides[d] = d == dim ? (t->ndim ? t->strides[0] : 1) : 0;
    else strides[d] = d == dim ? 0 : t->strides[d];
  }
  return tn_tensor_wrap(t->storage, t->dtype, ndim, sizes, strides, t->offset);
}

static void release_all(em_tensor **ts, int n) {
  for (int i = 0; i < n; i++) em_tensor_release(ts[i]);
}

/* ---- reads through an index: index_select, gather ---- */

typedef struct gather_ctx {
  int64_t stride; /* bytes between positions along dim in the source */
  int64_t base;
} gather_ctx;

/* data: out, source (zero stride along dim), index. */
#define DEFINE_GATHER(T, IT, NAME)                                                       \
  static void NAME(char **data, const int64_t *strides, int64_t n, void *vctx) {         \
    const gather_ctx *c = vctx;                                                          \
    char *out = data[0];                                                                 \
    const char *src = data[1], *idx = data[2];                                           \
    for (int64_t i = 0; i < n; i++) {                                                    \
      int64_t k = *(const IT *)(idx + i * strides[2]) - c->base;                         \
      *(T *)(out + i * strides[0]) = *(const T *)(src + i * strides[1] + k * c->stride); \
    }                                                                                    \
  }
DEFINE_GATHER(uint8_t, int64_t, gather_1_i64)
DEFINE_GATHER(uint16_t, int64_t, gather_2_i64)
DEFINE_GATHER(uint32_t, int64_t, gather_4_i64)
DEFINE_GATHER(uint64_t, int64_t, gather_8_i64)
DEFINE_GATHER(uint8_t, int32_t, gather_1_i32)
DEFINE_GATHER(uint16_t, int32_t, gather_2_i32)
DEFINE_GATHER(uint32_t, int32_t, gather_4_i32)
DEFINE_GATHER(uint64_t, int32_t, gather_8_i32)

static em_loop_fn gather_fn(size_t elsize, em_dtype index_dtype) {
  int is64 = index_dtype == EM_INT64;
  switch (elsize) {
    case 1: return is64 ? gather_1_i64 : gather_1_i32;
    case 2: return is64 ? gather_2_i64 : gather_2_i32;
    case 4: return is64 ? gather_4_i64 : gather_4_i32;
    default: return is64 ? gather_8_i64 : gather_8_i32;
  }
}

/* out = src read at index along dim; src_r and idx_r already have out's shape. */
static em_status run_gather(em_tensor *out, const em_tensor *a, em_tensor *src_r, em_tensor *idx_r, int dim, int base) {
  em_status st = EM_OK;
  if (!src_r || !idx_r) {
    st = em_last_status();
  } else {
    gather_ctx c = {a->strides[dim] * (int64_t)em_dtype_size(a->dtype), base};
    const em_tensor *ops[3] = {out, src_r, idx_r};
    em_iter it;
    cpu_iter_init(&it, 3, ops);
    cpu_iter_for_each(&it, gather_fn(em_dtype_size(a->dtype), idx_r->dtype), &c, 0);
  }
  em_tensor *views[2] = {src_r, idx_r};
  release_all(views, 2);
  return st;
}

em_status cpu_index_select(em_tensor *out, const em_tensor *a, int dim, const em_tensor *index, int base) {
  em_status st = check_indices("index_select", index, dim, a->sizes[dim], base);
  if (st || em_tensor_numel(out) == 0) return st;
  return run_gather(out, a, restride(a, out->ndim, out->sizes, dim, 0), restride(index, out->ndim, out->sizes, dim, 1),
                    dim, base);
}

em_status cpu_gather(em_tensor *out, const em_tensor *a, int dim, const em_tensor *index, int base) {
  em_status st = check_indices("gather", index, dim, a->sizes[dim], base);
  if (st || em_tensor_numel(out) == 0) return st;
  em_tensor *idx = tn_tensor_alias(index);
  return run_gather(out, a, restride(a, index->ndim, index->sizes, dim, 0), idx, dim, base);
}

/* ---- writes through an index: scatter, index_add, index_fill ---- */

typedef enum { W_COPY, W_ADD, W_FILL } write_mode;

typedef struct write_ctx {
  write_mode mode;
  em_dtype dtype;
  int is64;
  int64_t stride, base; /* bytes between positions along dim in the target */
  double alpha;
  char value[8]; /* W_FILL: the value in the target's dtype */
} write_ctx;

/* data: target (zero stride along dim), index, src (W_COPY, W_ADD). */
static void write_loop(char **data, const int64_t *strides, int64_t n, void *vctx) {
  const write_ctx *c = vctx;
  size_t size = em_dtype_size(c->dtype);
  for (int64_t i = 0; i < n; i++) {
    int64_t k = load_index(data[1] + i * strides[1], c->is64) - c->base;
    char *dst = data[0] + i * strides[0] + k * c->stride;
    const char *src = c->mode == W_FILL ? c->value : data[2] + i * strides[2];
    if (c->mode != W_ADD) {
      memcpy(dst, src, size);
      continue;
    }
    switch (c->dtype) {
      case EM_FLOAT32: *(float *)dst += (float)(c->alpha * *(const float *)src); break;
      case EM_FLOAT64: *(double *)dst += c->alpha * *(const double *)src; break;
      case EM_INT32: *(int32_t *)dst += (int32_t)((int64_t)c->alpha * *(const int32_t *)src); break;
      case EM_INT64: *(int64_t *)dst += (int64_t)c->alpha * *(const int64_t *)src; break;
      case EM_UINT8: *(uint8_t *)dst += (uint8_t)((int64_t)c->alpha * *(const uint8_t *)src); break;
      case EM_BOOL: *(uint8_t *)dst = *(uint8_t *)dst || (c->alpha != 0 && *(const uint8_t *)src); break;
      default: break;
    }
  }
}

static void encode_value(em_dtype dtype, double v, char *out) {
  switch (dtype) {
    case EM_FLOAT32: {
      float f = (float)v;
      memcpy(out, &f, 4);
    } break;
    case EM_FLOAT64: memcpy(out, &v, 8); break;
    case EM_FLOAT16: {
      uint16_t h = em_float_to_half((float)v);
      memcpy(out, &h, 2);
    } break;
    case EM_BFLOAT16: {
      uint16_t h = em_float_to_bf16((float)v);
      memcpy(out, &h, 2);
    } break;
    case EM_INT32: {
      int32_t i = (int32_t)v;
      memcpy(out, &i, 4);
    } break;
    case EM_INT64: {
      int64_t i = (int64_t)v;
      memcpy(out, &i, 8);
    } break;
    case EM_UINT8: out[0] = (char)(uint8_t)(int64_t)v; break;
    case EM_BOOL: out[0] = v != 0; break;
    default: break;
  }
}

static em_status check_add_dtype(const char *op, em_dtype dtype) {
  if (dtype == EM_FLOAT16 || dtype == EM_BFLOAT16)
    return em_set_error(EM_ERR_DTYPE, "%s: dtype %s is storage-only and cannot accumulate (convert with to('float32'))",
                        op, em_dtype_name(dtype));
  return EM_OK;
}

/* Runs the write over target_r (iteration shape), idx_r and src (may be NULL); releases
 * the views it was given. */
static em_status run_write(write_ctx *c, const em_tensor *self, int dim, em_tensor *target_r, em_tensor *idx_r,
                           em_tensor *src) {
  em_tensor *views[3] = {target_r, idx_r, src};
  if (!target_r || !idx_r) {
    release_all(views, 3);
    return em_last_status();
  }
  c->dtype = self->dtype;
  c->is64 = idx_r->dtype == EM_INT64;
  c->stride = self->strides[dim] * (int64_t)em_dtype_size(self->dtype);
  const em_tensor *ops[3] = {target_r, idx_r, src};
  em_iter it;
  cpu_iter_init(&it, src ? 3 : 2, ops);
  cpu_iter_for_each(&it, write_loop, c, INT64_MAX); /* serial: indices may repeat */
  release_all(views, 3);
  return EM_OK;
}

em_status cpu_scatter(em_tensor *self, int dim, const em_tensor *index, const em_tensor *src, double value,
                      int accumulate, int base) {
  const char *op = src ? (accumulate ? "scatter_add_" : "scatter_") : "scatter_value_";
  em_status st;
  if ((accumulate && (st = check_add_dtype(op, self->dtype))) ||
      (st = check_indices(op, index, dim, self->sizes[dim], base)))
    return st;
  if (em_tensor_numel(index) == 0) return EM_OK;
  write_ctx c = {.mode = !src ? W_FILL : accumulate ? W_ADD : W_COPY, .base = base, .alpha = 1};
  if (!src) encode_value(self->dtype, value, c.value);
  em_tensor *src_r = NULL;
  if (src && !(src_r = tn_tensor_wrap(src->storage, src->dtype, index->ndim, index->sizes, src->strides, src->offset)))
    return em_last_status();
  return run_write(&c, self, dim, restride(self, index->ndim, index->sizes, dim, 0), tn_tensor_alias(index), src_r);
}

/* index_add_ along dim 0 of contiguous float rows (an embedding's backward): whole rows
 * added with vector loops, the columns split between threads (indices may repeat, so rows
 * cannot be), instead of one element at a time through the generic write. */
#define DEFINE_ROWS_ADD(T, S_)                                                                                   \
  static void rows_add_##S_(T *restrict self, const T *restrict src, const char *idx, int is64, int64_t base,    \
                            int64_t n, int64_t D, T alpha) {                                                     \
    int64_t blocks = (D + 63) / 64;                                                                              \
    int par = blocks > 1 && n * D >= EM_PARALLEL_GRAIN && em_get_num_threads() > 1 && !omp_in_parallel();       \
    _Pragma("omp parallel for schedule(static) if(par) num_threads(em_get_num_threads())")                      \
    for (int64_t blk = 0; blk < blocks; blk++) {                                                                 \
      int64_t j0 = blk * 64, j1 = j0 + 64 < D ? j0 + 64 : D;                                                     \
      for (int64_t i = 0; i < n; i++) {                                                                          \
        T *restrict o = self + (load_index(idx + i * (is64 ? 8 : 4), is64) - base) * D;                          \
        const T *restrict r = src + i * D;                                                                       \
        for (int64_t j = j0; j < j1; j++) o[j] += alpha * r[j];                                                  \
      }                                                                                                          \
    }                                                                                                            \
  }
DEFINE_ROWS_ADD(float, f32)
DEFINE_ROWS_ADD(double, f64)

static bool rows_add(em_tensor *self, int dim, const em_tensor *index, const em_tensor *src, double alpha, int base) {
  if (dim != 0 || self->ndim != src->ndim || index->ndim != 1 || self->dtype != src->dtype ||
      (self->dtype != EM_FLOAT32 && self->dtype != EM_FLOAT64) || !em_tensor_is_contiguous(self) ||
      !em_tensor_is_contiguous(src) || !em_tensor_is_contiguous(index) || src->sizes[0] != index->sizes[0])
    return false;
  int64_t D = 1;
  for (int d = 1; d < self->ndim; d++) {
    if (self->sizes[d] != src->sizes[d]) return false;
    D *= self->sizes[d];
  }
  int is64 = index->dtype == EM_INT64;
  if (self->dtype == EM_FLOAT32)
    rows_add_f32((float *)em_tensor_ptr(self), (const float *)em_tensor_ptr(src), em_tensor_ptr(index), is64, base,
                 src->sizes[0], D, (float)alpha);
  else
    rows_add_f64((double *)em_tensor_ptr(self), (const double *)em_tensor_ptr(src), em_tensor_ptr(index), is64, base,
                 src->sizes[0], D, alpha);
  return true;
}

em_status cpu_index_add(em_tensor *self, int dim, const em_tensor *index, const em_tensor *src, double alpha,
                        int base) {
  em_status st;
  if ((st = check_add_dtype("index_add_", self->dtype)) ||
      (st = check_indices("index_add_", index, dim, self->sizes[dim], base)))
    return st;
  if (em_tensor_numel(src) == 0) return EM_OK;
  if (rows_add(self, dim, index, src, alpha, base)) return EM_OK;
  write_ctx c = {.mode = W_ADD, .base = base, .alpha = alpha};
  em_tensor *src_v = tn_tensor_alias(src);
  return run_write(&c, self, dim, restride(self, src->ndim, src->sizes, dim, 0),
                   restride(index, src->ndim, src->sizes, dim, 1), src_v);
}

em_status cpu_index_fill(em_tensor *self, int dim, const em_tensor *index, double value, int base) {
  em_status st = check_indices("index_fill_", index, dim, self->sizes[dim], base);
  if (st) return st;
  int64_t sizes[EM_MAX_DIMS];
  memcpy(sizes, self->sizes, sizeof sizes);
  sizes[dim] = em_tensor_numel(index);
  if (emp_shape_numel(self->ndim, sizes) == 0) return EM_OK;
  write_ctx c = {.mode = W_FILL, .base = base};
  encode_value(self->dtype, value, c.value);
  return run_write(&c, self, dim, restride(self, self->ndim, sizes, dim, 0), restride(index, self->ndim, sizes, dim, 1),
                   NULL);
}

/* ---- masks ---- */

static inline int is_nonzero(const char *p, em_dtype dtype) {
  switch (dtype) {
    case EM_FLOAT32: return *(const float *)p != 0;
    case EM_FLOAT64: return *(const double *)p != 0;
    case EM_FLOAT16:
    case EM_BFLOAT16: return (*(const uint16_t *)p & 0x7fff) != 0; /* +-0 are zero, NaN is not */
    case EM_INT32: return *(const int32_t *)p != 0;
    case EM_INT64: return *(const int64_t *)p != 0;
    default: return *(const uint8_t *)p != 0;
  }
}

typedef struct fill_ctx {
  size_t size;
  char value[8];
} fill_ctx;

/* data: self, mask (bool or uint8, broadcast). */
static void masked_fill_loop(char **data, const int64_t *strides, int64_t n, void *vctx) {
  const fill_ctx *c = vctx;
  for (int64_t i = 0; i < n; i++)
    if (*(const uint8_t *)(data[1] + i * strides[1])) memcpy(data[0] + i * strides[0], c->value, c->size);
}

em_status cpu_masked_fill(em_tensor *self, const em_tensor *mask, double value) {
  fill_ctx c = {.size = em_dtype_size(self->dtype)};
  encode_value(self->dtype, value, c.value);
  const em_tensor *ops[2] = {self, mask};
  em_iter it;
  cpu_iter_init(&it, 2, ops);
  cpu_iter_for_each(&it, masked_fill_loop, &c, 0);
  return EM_OK;
}

typedef struct select_ctx {
  char *out;
  int64_t out_stride; /* bytes */
  size_t size;
} select_ctx;

/* data: a, mask (same shape); appends selected elements in logical order. */
static void masked_select_loop(char **data, const int64_t *strides, int64_t n, void *vctx) {
  select_ctx *c = vctx;
  for (int64_t i = 0; i < n; i++) {
    if (!*(const uint8_t *)(data[1] + i * strides[1])) continue;
    memcpy(c->out, data[0] + i * strides[0], c->size);
    c->out += c->out_stride;
  }
}

em_status cpu_masked_select(em_tensor *out, const em_tensor *a, const em_tensor *mask) {
  size_t size = em_dtype_size(a->dtype);
  select_ctx c = {em_tensor_ptr(out), out->strides[0] * (int64_t)size, size};
  const em_tensor *ops[2] = {a, mask};
  em_iter it;
  cpu_iter_init(&it, 2, ops);
  cpu_iter_for_each(&it, masked_select_loop, &c, INT64_MAX); /* serial: output order is input order */
  return EM_OK;
}

typedef struct count_ctx {
  em_dtype dtype;
  int64_t count;
} count_ctx;

static void count_loop(char **data, const int64_t *strides, int64_t n, void *vctx) {
  count_ctx *c = vctx;
  int64_t k = 0;
  for (int64_t i = 0; i < n; i++) k += is_nonzero(data[0] + i * strides[0], c->dtype);
#pragma omp atomic
  c->count += k;
}

em_status cpu_count_nonzero(const em_tensor *a, int64_t *count) {
  count_ctx c = {a->dtype, 0};
  const em_tensor *ops[1] = {a};
  em_iter it;
  cpu_iter_init(&it, 1, ops);
  cpu_iter_for_each(&it, count_loop, &c, 0);
  *count = c.count;
  return EM_OK;
}

/* Rows of out ([count, ndim] int64) receive the positions of nonzero elements, from base,
 * in logical order. The walk keeps the multi-index, so strided inputs need no copy. */
em_status cpu_nonzero(em_tensor *out, const em_tensor *a, int base) {
  int64_t n = em_tensor_numel(a), row = 0, nrows = out->sizes[0];
  if (n == 0 || nrows == 0) return EM_OK;
  int nd = a->ndim;
  size_t size = em_dtype_size(a->dtype);
  int64_t idx[EM_MAX_DIMS] = {0}, off = 0;
  int64_t *o = (int64_t *)em_tensor_ptr(out);
  const char *p = em_tensor_ptr(a);
  for (int64_t e = 0; e < n && row < nrows; e++) {
    if (is_nonzero(p + off * (int64_t)size, a->dtype)) {
      for (int d = 0; d < nd; d++) o[row * out->strides[0] + d * out->strides[1]] = idx[d] + base;
      row++;
    }
    for (int d = nd - 1; d >= 0; d--) { /* next element in logical order */
      off += a->strides[d];
      if (++idx[d] < a->sizes[d]) break;
      off -= a->sizes[d] * a->strides[d];
      idx[d] = 0;
    }
  }
  return EM_OK;
}
