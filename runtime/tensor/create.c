/* create.c - tensors from nothing: empty, zeros, full, ranges, eye, adopted memory. */
#include <math.h>
#include <stdlib.h>
#include "backend.h"
#include "plugins/plugin_api.h"

static em_status check_sizes(const char *op, int ndim, const int64_t *sizes) {
  if (ndim < 0 || ndim > EM_MAX_DIMS)
    return em_set_error(EM_ERR_SHAPE, "%s: %d dims requested, ember supports 0..%d", op, ndim, EM_MAX_DIMS);
  /* Strides are products of the sizes with zeros counted as ones, so a zero beside huge
   * sizes must not let those products overflow either. */
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) {
    if (sizes[d] < 0)
      return em_set_error(EM_ERR_SHAPE, "%s: size %lld at dim %d is negative (shape %s)", op, (long long)sizes[d], d,
                          tn_shape_str(ndim, sizes));
    if (sizes[d] && n > INT64_MAX / 16 / sizes[d])
      return em_set_error(EM_ERR_SHAPE,
                          "%s: shape %s has too many elements (the product of its non-zero sizes "
                          "must stay below 2^59)",
                          op, tn_shape_str(ndim, sizes));
    if (sizes[d]) n *= sizes[d];
  }
  return EM_OK;
}

static em_status check_dtype(const char *op, em_dtype dtype) {
  if ((int)dtype < 0 || dtype >= EM_NUM_DTYPES) return em_set_error(EM_ERR_DTYPE, "%s: invalid dtype %d", op, dtype);
  return EM_OK;
}

em_status em_empty(em_tensor **out, int ndim, const int64_t *sizes, em_dtype dtype, em_device device) {
  em_status st;
  if ((st = check_sizes("empty", ndim, sizes)) || (st = check_dtype("empty", dtype))) return st;
  em_storage *s;
  size_t nbytes = (size_t)emp_shape_numel(ndim, sizes) * em_dtype_size(dtype);
  if ((st = tn_storage_new(&s, nbytes, device))) return st;
  *out = tn_tensor_wrap(s, dtype, ndim, sizes, NULL, 0);
  tn_storage_release(s);
  return *out ? EM_OK : em_last_status();
}

em_status em_empty_like(em_tensor **out, const em_tensor *like) {
  em_status st = tn_check_tensor("empty_like", like, "tensor");
  return st ? st : em_empty(out, like->ndim, like->sizes, like->dtype, like->storage->device);
}

em_status em_fill(em_tensor *t, double value) {
  em_status st = tn_check_tensor("fill", t, "tensor");
  if (st || (st = tn_check_inplace("fill", t, NULL))) return st;
  const em_backend *be = tn_backend_for("fill", t->storage->device);
  if (!be) return em_last_status();
  return be->fill(t, value);
}

em_status em_full(em_tensor **out, int ndim, const int64_t *sizes, double value, em_dtype dtype, em_device device) {
  em_status st = em_empty(out, ndim, sizes, dtype, device);
  if (st) return st;
  if ((st = em_fill(*out, value))) {
    em_tensor_release(*out);
    *out = NULL;
  }
  return st;
}

em_status em_zeros(em_tensor **out, int ndim, const int64_t *sizes, em_dtype dtype, em_device device) {
  return em_full(out, ndim, sizes, 0.0, dtype, device);
}

em_status em_ones(em_tensor **out, int ndim, const int64_t *sizes, em_dtype dtype, em_device device) {
  return em_full(out, ndim, sizes, 1.0, dtype, device);
}

static em_status affine_fill(const char *op, em_tensor **out, int64_t n, double start, double step, em_dtype dtype,
                             em_device device) {
  em_status st = em_empty(out, 1, &n, dtype, device);
  if (st) return st;
  const em_backend *be = tn_backend_for(op, device);
  if (!be) st = em_last_status();
  else st = be->arange(*out, start, step);
  if (st) {
    em_tensor_release(*out);
    *out = NULL;
  }
  return st;
}

em_status em_arange(em_tensor **out, double start, double end, double step, em_dtype dtype, em_device device) {
  if (step == 0 || isnan(step) || isnan(start) || isnan(end) || isinf(start) || isinf(end))
    return em_set_error(EM_ERR_ARGUMENT, "arange: got start=%g end=%g step=%g, expected finite values and step != 0",
                        start, end, step);
  if ((end - start) / step < 0)
    return em_set_error(EM_ERR_ARGUMENT,
                        "arange: step %g points away from end (start=%g end=%g); the range would be empty by sign",
                        step, start, end);
  double count = ceil((end - start) / step);
  if (count > 1e12) return em_set_error(EM_ERR_ARGUMENT, "arange: %g elements is too many", count);
  return affine_fill("arange", out, (int64_t)count, start, step, dtype, device);
}

em_status em_linspace(em_tensor **out, double start, double end, int64_t steps, em_dtype dtype, em_device device) {
  if (steps < 0) return em_set_error(EM_ERR_ARGUMENT, "linspace: steps is %lld, expected >= 0", (long long)steps);
  double step = steps > 1 ? (end - start) / (double)(steps - 1) : 0;
  em_status st = affine_fill("linspace", out, steps, start, step, dtype, device);
  /* Pin the last element to `end` exactly, as numpy does (one element copied on a GPU). */
  if (!st && steps > 1) {
    int64_t last = steps - 1;
    if ((st = em_tensor_set(*out, &last, end))) {
      em_tensor_release(*out);
      *out = NULL;
    }
  }
  return st;
}

em_status em_eye(em_tensor **out, int64_t n, int64_t m, em_dtype dtype, em_device device) {
  if (m < 0) m = n;
  int64_t sizes[2] = {n, m};
  em_status st = em_zeros(out, 2, sizes, dtype, device);
  if (st) return st;
  /* The diagonal is a strided view: fill it through the backend. */
  int64_t k = n < m ? n : m, stride = m + 1;
  em_tensor *diag = tn_tensor_wrap((*out)->storage, dtype, 1, &k, &stride, 0);
  if (!diag) return em_last_status();
  st = em_fill(diag, 1.0);
  em_tensor_release(diag);
  return st;
}

em_status em_from_blob(em_tensor **out, void *data, int ndim, const int64_t *sizes, const int64_t *strides,
                       em_dtype dtype, em_device device, em_deleter deleter, void *deleter_ctx) {
  em_status st;
  if ((st = check_sizes("from_blob", ndim, sizes)) || (st = check_dtype("from_blob", dtype))) return st;
  if (!data && emp_shape_numel(ndim, sizes) > 0)
    return em_set_error(EM_ERR_ARGUMENT, "from_blob: data is NULL for shape %s", tn_shape_str(ndim, sizes));
  /* The storage records the extent the tensor can reach, for bookkeeping only. */
  int64_t extent = 1;
  for (int d = 0; d < ndim; d++) {
    int64_t stride = strides ? strides[d] : 0;
    if (stride < 0) return em_set_error(EM_ERR_ARGUMENT, "from_blob: negative stride at dim %d", d);
    int64_t reach;
    if (strides && sizes[d] > 0 &&
        (__builtin_mul_overflow(sizes[d] - 1, stride, &reach) || __builtin_add_overflow(extent, reach, &extent)))
      return em_set_error(EM_ERR_ARGUMENT, "from_blob: shape %s with stride %lld at dim %d reaches past 2^63 elements",
                          tn_shape_str(ndim, sizes), (long long)stride, d);
  }
  if (!strides) extent = emp_shape_numel(ndim, sizes);
  em_storage *s = calloc(1, sizeof *s);
  if (!s) return em_set_error(EM_ERR_MEMORY, "from_blob: out of host memory");
  atomic_init(&s->refcount, 1);
  s->device = device;
  s->data = data;
  s->nbytes = (size_t)extent * em_dtype_size(dtype);
  s->deleter = deleter;
  s->deleter_ctx = deleter_ctx;
  s->borrowed = deleter == NULL;
  *out = tn_tensor_wrap(s, dtype, ndim, sizes, strides, 0);
  tn_storage_release(s);
  return *out ? EM_OK : em_last_status();
}
