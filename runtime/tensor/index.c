/* index.c - indexing: index_select, gather, scatter_, index_add_, index_fill_, masked ops,
 * nonzero, cat and stack.
 *
 * Index tensors are int64 or int32 and hold positions counted from `base` (0 from C, 1
 * from Lua). The shapes are checked here with PyTorch's rules; the values are checked by
 * the backend before it writes anything (reading them is device work). A 0-d tensor is
 * handed to the backend as a 1-d tensor of one element, so kernels see ndim >= 1. */
#include <stdio.h>
#include "backend.h"

static int same_device(const em_tensor *a, const em_tensor *b) {
  em_device x = a->storage->device, y = b->storage->device;
  return x.type == y.type && x.index == y.index;
}

/* t itself (retained), or a 1-element 1-d view when t is 0-d. */
static em_tensor *at_least_1d(const em_tensor *t) {
  if (t->ndim > 0) {
    em_tensor_retain((em_tensor *)t);
    return (em_tensor *)t;
  }
  int64_t one = 1;
  return tn_tensor_wrap(t->storage, t->dtype, 1, &one, &one, t->offset);
}

static int ndim1(const em_tensor *t) { return t->ndim ? t->ndim : 1; }
static int64_t size1(const em_tensor *t, int d) { return t->ndim ? t->sizes[d] : 1; }

static em_status check_index(const char *op, const em_tensor *self, const em_tensor *index, int max_ndim) {
  em_status st = tn_check_tensor(op, index, "index");
  if (st) return st;
  if (index->dtype != EM_INT64 && index->dtype != EM_INT32)
    return em_set_error(EM_ERR_DTYPE, "%s: the index must be an int64 or int32 tensor, got %s", op,
                        em_dtype_name(index->dtype));
  if (!same_device(self, index))
    return em_set_error(EM_ERR_DEVICE, "%s: the index is on another device than the tensor", op);
  if (max_ndim && index->ndim > max_ndim)
    return em_set_error(EM_ERR_SHAPE, "%s: the index must be 1-d, got shape %s", op, EM_SHAPE(index));
  return EM_OK;
}

static const em_backend *backend_of(const char *op, const em_tensor *t) {
  return tn_backend_for(op, t->storage->device);
}

/* ---- index_select, gather ---- */

em_status em_index_select(em_tensor **out, const em_tensor *a, int dim, const em_tensor *index, int base) {
  const char *op = "index_select";
  em_status st = tn_check_tensor(op, a, "tensor");
  if (st || (st = check_index(op, a, index, 1)) || (st = tn_check_dim(op, &dim, a->ndim))) return st;
  int64_t n = em_tensor_numel(index), sizes[EM_MAX_DIMS];
  if (a->ndim == 0 && n != 1)
    return em_set_error(EM_ERR_SHAPE, "%s: a 0-d tensor takes an index of one element, got shape %s", op,
                        EM_SHAPE(index));
  for (int d = 0; d < a->ndim; d++) sizes[d] = d == dim ? n : a->sizes[d];
  bool allocated;
  if ((st = tn_prepare_out(op, out, a->ndim, sizes, a->dtype, a->storage->device, &allocated))) return st;
  const em_backend *be = backend_of(op, a);
  em_tensor *o = at_least_1d(*out), *a1 = at_least_1d(a), *i1 = at_least_1d(index);
  if (!be || !o || !a1 || !i1) st = em_last_status();
  else st = EM_BACKEND_CALL(op, be, index_select, o, a1, dim, i1, base);
  em_tensor_release(o), em_tensor_release(a1), em_tensor_release(i1);
  if (st) tn_discard_out(out, allocated);
  return st;
}

/* PyTorch's rule for gather and scatter: index has the tensor's rank and, outside dim,
 * sizes no larger than the tensor's. */
static em_status check_fits(const char *op, const em_tensor *index, const em_tensor *t, const char *what, int dim,
                            int every_dim) {
  if (ndim1(index) != ndim1(t))
    return em_set_error(EM_ERR_SHAPE, "%s: the index (shape %s) must have as many dims as the %s (shape %s)", op,
                        EM_SHAPE(index), what, EM_SHAPE(t));
  for (int d = 0; d < ndim1(t); d++)
    if ((every_dim || d != dim) && size1(index, d) > size1(t, d))
      return em_set_error(EM_ERR_SHAPE,
                          "%s: the index (shape %s) is larger than the %s (shape %s) at dim %d (%lld > %lld); "
                          "only the indexed dim may be larger",
                          op, EM_SHAPE(index), what, EM_SHAPE(t), d, (long long)size1(index, d),
                          (long long)size1(t, d));
  return EM_OK;
}

em_status em_gather(em_tensor **out, const em_tensor *a, int dim, const em_tensor *index, int base) {
  const char *op = "gather";
  em_status st = tn_check_tensor(op, a, "tensor");
  if (st || (st = check_index(op, a, index, 0)) || (st = tn_check_dim(op, &dim, a->ndim)) ||
      (st = check_fits(op, index, a, "tensor", dim, 0)))
    return st;
  bool allocated;
  if ((st = tn_prepare_out(op, out, index->ndim, index->sizes, a->dtype, a->storage->device, &allocated))) return st;
  const em_backend *be = backend_of(op, a);
  em_tensor *o = at_least_1d(*out), *a1 = at_least_1d(a), *i1 = at_least_1d(index);
  if (!be || !o || !a1 || !i1) st = em_last_status();
  else st = EM_BACKEND_CALL(op, be, gather, o, a1, dim, i1, base);
  em_tensor_release(o), em_tensor_release(a1), em_tensor_release(i1);
  if (st) tn_discard_out(out, allocated);
  return st;
}

/* ---- writes through an index ---- */

/* src converted to self's dtype (retained as is when it already matches). */
static em_status src_as(const char *op, const em_tensor *self, const em_tensor *src, em_tensor **out) {
  em_status st = tn_check_tensor(op, src, "source");
  if (st) return st;
  if (!same_device(self, src))
    return em_set_error(EM_ERR_DEVICE, "%s: the source is on another device than the tensor", op);
  em_tensor *conv = NULL;
  if ((st = em_to(&conv, src, self->dtype, self->storage->device))) return st;
  *out = at_least_1d(conv);
  em_tensor_release(conv);
  return *out ? EM_OK : em_last_status();
}

static em_status scatter(const char *op, em_tensor *self, int dim, const em_tensor *index, const em_tensor *src,
                         double value, int accumulate, int base) {
  em_status st = tn_check_tensor(op, self, "tensor");
  if (st || (st = check_index(op, self, index, 0)) || (st = tn_check_dim(op, &dim, self->ndim)) ||
      (st = check_fits(op, index, self, "tensor", dim, 0)) ||
      (src && (st = check_fits(op, index, src, "source", dim, 1))))
    return st;
  em_tensor *s1 = NULL;
  if (src && (st = src_as(op, self, src, &s1))) return st;
  const em_backend *be = backend_of(op, self);
  em_tensor *t1 = at_least_1d(self), *i1 = at_least_1d(index);
  if (!be || !t1 || !i1) st = em_last_status();
  else st = EM_BACKEND_CALL(op, be, scatter, t1, dim, i1, s1, value, accumulate, base);
  em_tensor_release(t1), em_tensor_release(i1), em_tensor_release(s1);
  return st;
}

em_status em_scatter_(em_tensor *self, int dim, const em_tensor *index, const em_tensor *src, int accumulate,
                      int base) {
  const char *op = accumulate ? "scatter_add_" : "scatter_";
  em_status st = tn_check_tensor(op, src, "source");
  return st ? st : scatter(op, self, dim, index, src, 0, accumulate, base);
}

em_status em_scatter_value_(em_tensor *self, int dim, const em_tensor *index, double value, int base) {
  return scatter("scatter_value_", self, dim, index, NULL, value, 0, base);
}

em_status em_index_add_(em_tensor *self, int dim, const em_tensor *index, const em_tensor *src, double alpha,
                        int base) {
  const char *op = "index_add_";
  em_status st = tn_check_tensor(op, self, "tensor");
  if (st || (st = check_index(op, self, index, 1)) || (st = tn_check_dim(op, &dim, self->ndim)) ||
      (st = tn_check_tensor(op, src, "source")))
    return st;
  /* src is self's shape except along dim, where it has one slice per index. */
  int ok = ndim1(src) == ndim1(self) && size1(src, dim) == em_tensor_numel(index);
  for (int d = 0; ok && d < ndim1(self); d++) ok = d == dim || size1(src, d) == size1(self, d);
  if (!ok)
    return em_set_error(EM_ERR_SHAPE,
                        "%s: the source has shape %s; expected the tensor's shape %s with %lld (the index's length) "
                        "along dim %d",
                        op, EM_SHAPE(src), EM_SHAPE(self), (long long)em_tensor_numel(index), dim);
  em_tensor *s1 = NULL;
  if ((st = src_as(op, self, src, &s1))) return st;
  const em_backend *be = backend_of(op, self);
  em_tensor *t1 = at_least_1d(self), *i1 = at_least_1d(index);
  if (!be || !t1 || !i1) st = em_last_status();
  else st = EM_BACKEND_CALL(op, be, index_add, t1, dim, i1, s1, alpha, base);
  em_tensor_release(t1), em_tensor_release(i1), em_tensor_release(s1);
  return st;
}

em_status em_index_fill_(em_tensor *self, int dim, const em_tensor *index, double value, int base) {
  const char *op = "index_fill_";
  em_status st = tn_check_tensor(op, self, "tensor");
  if (st || (st = check_index(op, self, index, 1)) || (st = tn_check_dim(op, &dim, self->ndim))) return st;
  const em_backend *be = backend_of(op, self);
  em_tensor *t1 = at_least_1d(self), *i1 = at_least_1d(index);
  if (!be || !t1 || !i1) st = em_last_status();
  else st = EM_BACKEND_CALL(op, be, index_fill, t1, dim, i1, value, base);
  em_tensor_release(t1), em_tensor_release(i1);
  return st;
}

/* ---- masks ---- */

static em_status check_mask(const char *op, const em_tensor *a, const em_tensor *mask) {
  em_status st = tn_check_tensor(op, mask, "mask");
  if (st) return st;
  if (mask->dtype != EM_BOOL && mask->dtype != EM_UINT8)
    return em_set_error(EM_ERR_DTYPE, "%s: the mask must be bool or uint8, got %s", op, em_dtype_name(mask->dtype));
  if (!same_device(a, mask))
    return em_set_error(EM_ERR_DEVICE, "%s: the mask is on another device than the tensor", op);
  return EM_OK;
}

em_status em_masked_fill_(em_tensor *self, const em_tensor *mask, double value) {
  const char *op = "masked_fill_";
  em_status st = tn_check_tensor(op, self, "tensor");
  if (st || (st = check_mask(op, self, mask))) return st;
  em_tensor *m = NULL;
  if (emp_broadcast_to(op, &m, mask, self->ndim, self->sizes))
    return em_set_error(EM_ERR_SHAPE, "%s: the mask of shape %s does not broadcast to the tensor's shape %s", op,
                        EM_SHAPE(mask), EM_SHAPE(self));
  const em_backend *be = backend_of(op, self);
  st = be ? EM_BACKEND_CALL(op, be, masked_fill, self, m, value) : em_last_status();
  em_tensor_release(m);
  return st;
}

static em_status count_nonzero(const char *op, const em_tensor *t, int64_t *count) {
  const em_backend *be = backend_of(op, t);
  return be ? EM_BACKEND_CALL(op, be, count_nonzero, t, count) : em_last_status();
}

em_status em_masked_select(em_tensor **out, const em_tensor *a, const em_tensor *mask) {
  const char *op = "masked_select";
  em_status st = tn_check_tensor(op, a, "tensor");
  if (st || (st = check_mask(op, a, mask))) return st;
  int nd;
  int64_t sizes[EM_MAX_DIMS], count = 0;
  if (tn_broadcast_shapes(op, a->ndim, a->sizes, mask->ndim, mask->sizes, &nd, sizes))
    return em_set_error(EM_ERR_SHAPE, "%s: the tensor of shape %s and the mask of shape %s cannot be broadcast", op,
                        EM_SHAPE(a), EM_SHAPE(mask));
  em_tensor *ab = NULL, *mb = NULL;
  bool allocated = false;
  const em_backend *be = backend_of(op, a);
  if (!be) return em_last_status();
  if ((st = emp_broadcast_to(op, &ab, a, nd, sizes)) || (st = emp_broadcast_to(op, &mb, mask, nd, sizes)) ||
      (st = count_nonzero(op, mb, &count)) ||
      (st = tn_prepare_out(op, out, 1, &count, a->dtype, a->storage->device, &allocated)))
    goto done;
  if (count > 0 && (st = EM_BACKEND_CALL(op, be, masked_select, *out, ab, mb))) tn_discard_out(out, allocated);
done:
  em_tensor_release(ab), em_tensor_release(mb);
  return st;
}

em_status em_nonzero(em_tensor **out, const em_tensor *a, int base) {
  const char *op = "nonzero";
  em_status st = tn_check_tensor(op, a, "tensor");
  int64_t count = 0;
  if (st || (st = count_nonzero(op, a, &count))) return st;
  int64_t sizes[2] = {count, a->ndim};
  bool allocated;
  if ((st = tn_prepare_out(op, out, 2, sizes, EM_INT64, a->storage->device, &allocated))) return st;
  const em_backend *be = backend_of(op, a);
  st = be ? EM_BACKEND_CALL(op, be, nonzero, *out, a, base) : em_last_status();
  if (st) tn_discard_out(out, allocated);
  return st;
}

/* ---- cat, stack: copies into views of the result ---- */

/* "1st", "2nd", "3rd", "4th", ... (positions read the same from C and Lua). */
static const char *ordinal(int i, char *buf) {
  int n = i + 1, teen = n % 100 >= 11 && n % 100 <= 13;
  const char *suffix = teen ? "th" : n % 10 == 1 ? "st" : n % 10 == 2 ? "nd" : n % 10 == 3 ? "rd" : "th";
  snprintf(buf, 24, "%d%s", n, suffix);
  return buf;
}

/* Checks the list and gives the promoted dtype. */
static em_status check_list(const char *op, em_tensor *const *ts, int n, em_dtype *dtype) {
  char buf[24];
  if (!ts || n <= 0) return em_set_error(EM_ERR_ARGUMENT, "%s: expected a non-empty list of tensors, got %d", op, n);
  for (int i = 0; i < n; i++) {
    if (!ts[i]) return em_set_error(EM_ERR_ARGUMENT, "%s: the %s tensor is nil", op, ordinal(i, buf));
    if (ts[i]->freed) return em_set_error(EM_ERR_ARGUMENT, "%s: the %s tensor was freed", op, ordinal(i, buf));
    if (!same_device(ts[0], ts[i]))
      return em_set_error(EM_ERR_DEVICE, "%s: the %s tensor is on another device than the 1st", op, ordinal(i, buf));
    *dtype = i ? em_dtype_promote(*dtype, ts[i]->dtype) : ts[i]->dtype;
  }
  return EM_OK;
}

/* PyTorch's legacy rule: 1-d empty tensors take no part in cat. */
static int skipped(const em_tensor *t) { return t->ndim == 1 && t->sizes[0] == 0; }

em_status em_cat(em_tensor **out, em_tensor *const *tensors, int n, int dim) {
  const char *op = "cat";
  em_dtype dtype = EM_FLOAT32;
  em_status st = check_list(op, tensors, n, &dtype);
  if (st) return st;
  char b1[24], b2[24];
  int ref = -1;
  for (int i = 0; i < n && ref < 0; i++)
    if (!skipped(tensors[i])) ref = i;
  if (ref < 0) { /* nothing but empty tensors */
    int64_t zero = 0;
    bool allocated;
    return tn_prepare_out(op, out, 1, &zero, dtype, tensors[0]->storage->device, &allocated);
  }
  const em_tensor *r = tensors[ref];
  if (r->ndim == 0)
    return em_set_error(EM_ERR_SHAPE, "%s: the %s tensor is 0-d; 0-d tensors cannot be concatenated (stack them)", op,
                        ordinal(ref, b1));
  if ((st = tn_check_dim(op, &dim, r->ndim))) return st;
  int64_t sizes[EM_MAX_DIMS];
  for (int d = 0; d < r->ndim; d++) sizes[d] = r->sizes[d];
  sizes[dim] = 0;
  for (int i = 0; i < n; i++) {
    const em_tensor *t = tensors[i];
    if (skipped(t)) continue;
    int ok = t->ndim == r->ndim;
    for (int d = 0; ok && d < r->ndim; d++) ok = d == dim || t->sizes[d] == r->sizes[d];
    if (!ok)
      return em_set_error(EM_ERR_SHAPE,
                          "%s: the %s tensor has shape %s, which does not match the %s tensor's shape %s outside the "
                          "concatenated dim",
                          op, ordinal(i, b1), EM_SHAPE(t), ordinal(ref, b2), EM_SHAPE(r));
    sizes[dim] += t->sizes[dim];
  }
  bool allocated;
  if ((st = tn_prepare_out(op, out, r->ndim, sizes, dtype, r->storage->device, &allocated))) return st;
  int64_t start = 0;
  for (int i = 0; i < n && !st; i++) {
    const em_tensor *t = tensors[i];
    if (skipped(t) || t->sizes[dim] == 0) continue;
    em_tensor *slot = NULL;
    if (!(st = em_narrow(&slot, *out, dim, start, t->sizes[dim]))) st = em_copy_(slot, t);
    em_tensor_release(slot);
    start += t->sizes[dim];
  }
  if (st) tn_discard_out(out, allocated);
  return st;
}

em_status em_stack(em_tensor **out, em_tensor *const *tensors, int n, int dim) {
  const char *op = "stack";
  em_dtype dtype = EM_FLOAT32;
  em_status st = check_list(op, tensors, n, &dtype);
  if (st) return st;
  char b1[24];
  const em_tensor *r = tensors[0];
  if (r->ndim + 1 > EM_MAX_DIMS)
    return em_set_error(EM_ERR_SHAPE, "%s: stacking %d-d tensors needs %d dims, ember supports %d", op, r->ndim,
                        r->ndim + 1, EM_MAX_DIMS);
  if ((st = tn_check_dim(op, &dim, r->ndim + 1))) return st;
  for (int i = 1; i < n; i++) {
    const em_tensor *t = tensors[i];
    int ok = t->ndim == r->ndim;
    for (int d = 0; ok && d < r->ndim; d++) ok = t->sizes[d] == r->sizes[d];
    if (!ok)
      return em_set_error(EM_ERR_SHAPE, "%s: the %s tensor has shape %s, expected the 1st tensor's shape %s", op,
                          ordinal(i, b1), EM_SHAPE(t), EM_SHAPE(r));
  }
  int64_t sizes[EM_MAX_DIMS];
  for (int d = 0, j = 0; d <= r->ndim; d++) sizes[d] = d == dim ? n : r->sizes[j++];
  bool allocated;
  if ((st = tn_prepare_out(op, out, r->ndim + 1, sizes, dtype, r->storage->device, &allocated))) return st;
  for (int i = 0; i < n && !st; i++) {
    em_tensor *slot = NULL;
    if (!(st = em_select(&slot, *out, dim, i))) st = em_copy_(slot, tensors[i]);
    em_tensor_release(slot);
  }
  if (st) tn_discard_out(out, allocated);
  return st;
}
