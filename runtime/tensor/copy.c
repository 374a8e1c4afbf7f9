/* copy.c - copies between tensors: contiguous, clone, copy_ (broadcasting, converting)
 * and to (dtype and device). */
#include "backend.h"

static int same_device(em_device a, em_device b) { return a.type == b.type && a.index == b.index; }

/* The backend that moves data between src's and dst's devices: the non-CPU side owns
 * host<->device transfers, as cudaMemcpy does. */
static const em_backend *copy_backend(const em_tensor *dst, const em_tensor *src) {
  em_device d = dst->storage->device, s = src->storage->device;
  return tn_backend_for("copy", d.type != EM_CPU ? d : s);
}

em_status em_copy_(em_tensor *dst, const em_tensor *src) {
  em_status st;
  if ((st = tn_check_tensor("copy_", dst, "destination")) || (st = tn_check_tensor("copy_", src, "source"))) return st;
  em_tensor *expanded = NULL;
  if ((st = emp_broadcast_to("copy_", &expanded, src, dst->ndim, dst->sizes))) return st;
  const em_backend *be = copy_backend(dst, src);
  st = be ? EM_BACKEND_CALL("copy_", be, copy, dst, expanded) : em_last_status();
  em_tensor_release(expanded);
  return st;
}

em_status em_clone(em_tensor **out, const em_tensor *a) {
  em_status st = tn_check_tensor("clone", a, "tensor");
  if (st || (st = em_empty_like(out, a))) return st;
  if ((st = em_copy_(*out, a))) {
    em_tensor_release(*out);
    *out = NULL;
  }
  return st;
}

em_status em_contiguous(em_tensor **out, const em_tensor *a) {
  em_status st = tn_check_tensor("contiguous", a, "tensor");
  if (st) return st;
  if (em_tensor_is_contiguous(a)) {
    em_tensor_retain((em_tensor *)a);
    *out = (em_tensor *)a;
    return EM_OK;
  }
  return em_clone(out, a);
}

em_status em_to(em_tensor **out, const em_tensor *a, em_dtype dtype, em_device device) {
  em_status st = tn_check_tensor("to", a, "tensor");
  if (st) return st;
  if ((int)dtype < 0 || dtype >= EM_NUM_DTYPES) return em_set_error(EM_ERR_DTYPE, "to: invalid dtype %d", dtype);
  if (a->dtype == dtype && same_device(a->storage->device, device)) {
    em_tensor_retain((em_tensor *)a);
    *out = (em_tensor *)a;
    return EM_OK;
  }
  if ((st = em_empty(out, a->ndim, a->sizes, dtype, device))) return st;
  if ((st = em_copy_(*out, a))) {
    em_tensor_release(*out);
    *out = NULL;
  }
  return st;
}

/* A contiguous copy of t (only its layout when copy_values is 0) whose matrices a BLAS can
 * read. With keep_broadcast, broadcast (zero-stride) batch dims stay broadcast: a shared
 * operand is held and copied once, not once per batch, and viewed with stride 0 again. */
em_status emp_compact_matrices(const em_tensor *t, int keep_broadcast, int copy_values, em_tensor **out) {
  int64_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++)
    sizes[d] = keep_broadcast && d < t->ndim - 2 && t->strides[d] == 0 ? 1 : t->sizes[d];
  em_tensor *src = tn_tensor_wrap(t->storage, t->dtype, t->ndim, sizes, t->strides, t->offset), *tmp = NULL;
  if (!src) return em_last_status();
  em_status st = em_empty(&tmp, t->ndim, sizes, t->dtype, t->storage->device);
  if (!st && copy_values) st = em_copy_(tmp, src);
  em_tensor_release(src);
  if (st) {
    em_tensor_release(tmp);
    return st;
  }
  for (int d = 0; d < t->ndim; d++) strides[d] = sizes[d] == t->sizes[d] ? tmp->strides[d] : 0;
  *out = tn_tensor_wrap(tmp->storage, t->dtype, t->ndim, t->sizes, strides, 0);
  em_tensor_release(tmp);
  return *out ? EM_OK : em_last_status();
}
