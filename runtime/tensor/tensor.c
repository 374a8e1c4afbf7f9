/* tensor.c - storages and tensor headers: lifetime, inspection and shared helpers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend.h"
#include "core/core_impl.h"
#include "plugins/plugin_api.h"

tn_inplace_rule_fn tn_inplace_rule; /* installed by runtime/autograd (meta.c) */

/* ---- storage ---- */

em_status tn_storage_new(em_storage **out, size_t nbytes, em_device device) {
  const em_backend *be = tn_backend_for("allocate", device);
  if (!be) return em_last_status();
  em_storage *s = calloc(1, sizeof *s);
  if (!s) return em_set_error(EM_ERR_MEMORY, "allocate: out of host memory for a storage header");
  /* Always allocate at least one byte so data is never NULL. A device allocator says
   * itself why it failed (asked, in use, cached): its message is kept. An error set
   * before (a caller cleaning up after a failure) survives a successful allocation. */
  char earlier[1024];
  em_status earlier_status = device.type != EM_CPU ? em_last_status() : EM_OK;
  if (earlier_status != EM_OK) snprintf(earlier, sizeof earlier, "%s", em_last_error());
  if (device.type != EM_CPU) em_clear_error();
  s->data = be->alloc(nbytes ? nbytes : 1, device);
  if (!s->data) {
    free(s);
    if (device.type != EM_CPU && em_last_status() != EM_OK) return em_last_status();
    return em_set_error(EM_ERR_MEMORY, "allocate: out of memory asking for %zu bytes on %s (ember holds %lld bytes)",
                        nbytes, be->name, (long long)em_memory_allocated());
  }
  if (earlier_status != EM_OK) em_set_error(earlier_status, "%s", earlier);
  atomic_init(&s->refcount, 1);
  s->device = device;
  s->nbytes = nbytes;
  core_memory_count((int64_t)nbytes);
  *out = s;
  return EM_OK;
}

void tn_storage_retain(em_storage *s) { atomic_fetch_add(&s->refcount, 1); }

void tn_storage_release(em_storage *s) {
  if (!s || atomic_fetch_sub(&s->refcount, 1) != 1) return;
  if (s->deleter) {
    s->deleter(s->data, s->deleter_ctx);
  } else if (!s->borrowed) {
    const em_backend *be = tn_backend_for("free", s->device);
    if (be) be->free(s->data, s->nbytes ? s->nbytes : 1, s->device);
    core_memory_count(-(int64_t)s->nbytes);
  }
  free(s);
}

/* ---- tensor headers ---- */

em_tensor *tn_tensor_wrap(em_storage *storage, em_dtype dtype, int ndim, const int64_t *sizes, const int64_t *strides,
                          int64_t offset) {
  em_tensor *t = calloc(1, sizeof *t);
  if (!t) {
    em_set_error(EM_ERR_MEMORY, "allocate: out of host memory for a tensor header");
    return NULL;
  }
  atomic_init(&t->refcount, 1);
  t->dtype = dtype;
  t->ndim = ndim;
  if (ndim) memcpy(t->sizes, sizes, sizeof(int64_t) * ndim);
  if (strides) {
    if (ndim) memcpy(t->strides, strides, sizeof(int64_t) * ndim);
  } else {
    emp_contiguous_strides(ndim, t->sizes, t->strides);
  }
  t->offset = offset;
  t->storage = storage;
  tn_storage_retain(storage);
  return t;
}

em_tensor *tn_tensor_alias(const em_tensor *a) {
  return tn_tensor_wrap(a->storage, a->dtype, a->ndim, a->sizes, a->strides, a->offset);
}

void em_tensor_retain(em_tensor *t) {
  if (t) atomic_fetch_add(&t->refcount, 1);
}

void em_tensor_release(em_tensor *t) {
  if (!t || atomic_fetch_sub(&t->refcount, 1) != 1) return;
  if (t->autograd && t->autograd_free) t->autograd_free(t->autograd);
  tn_storage_release(t->storage);
  free(t);
}

/* Frees the storage now (when no other view holds it) and turns t into an empty tensor
 * that every operation rejects. */
em_status em_tensor_free(em_tensor *t) {
  if (!t) return em_set_error(EM_ERR_ARGUMENT, "free: expected a tensor, got NULL");
  if (t->freed) return EM_OK;
  em_storage *empty;
  em_status st = tn_storage_new(&empty, 0, t->storage->device);
  if (st) return st;
  tn_storage_release(t->storage);
  t->storage = empty;
  t->ndim = 1;
  t->sizes[0] = 0;
  t->strides[0] = 1;
  t->offset = 0;
  t->freed = true;
  return EM_OK;
}

int em_tensor_is_freed(const em_tensor *t) { return t && t->freed; }
int em_tensor_ndim(const em_tensor *t) { return t->ndim; }
int64_t em_tensor_size(const em_tensor *t, int dim) { return dim >= 0 && dim < t->ndim ? t->sizes[dim] : 1; }
int64_t em_tensor_stride(const em_tensor *t, int dim) { return dim >= 0 && dim < t->ndim ? t->strides[dim] : 1; }
const int64_t *em_tensor_sizes(const em_tensor *t) { return t->sizes; }
const int64_t *em_tensor_strides(const em_tensor *t) { return t->strides; }
int64_t em_tensor_offset(const em_tensor *t) { return t->offset; }
int64_t em_tensor_numel(const em_tensor *t) { return emp_shape_numel(t->ndim, t->sizes); }
em_dtype em_tensor_dtype(const em_tensor *t) { return t->dtype; }
em_device em_tensor_device(const em_tensor *t) { return t->storage->device; }
void *em_tensor_data(const em_tensor *t) { return em_tensor_ptr(t); }
size_t em_tensor_storage_nbytes(const em_tensor *t) { return t->storage->nbytes; }
const void *em_tensor_storage_id(const em_tensor *t) { return t->storage; }

int em_tensor_is_contiguous(const em_tensor *t) {
  int64_t expected = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (t->sizes[d] == 1) continue;
    if (t->strides[d] != expected) return 0;
    expected *= t->sizes[d];
  }
  return 1;
}

/* ---- element access (slow path: one element) ---- */

static em_status element_offset(const char *op, const em_tensor *t, const int64_t *index, int64_t *off) {
  em_status st = tn_check_tensor(op, t, "tensor");
  if (st) return st;
  int64_t o = t->offset;
  for (int d = 0; d < t->ndim; d++) {
    if (index[d] < 0 || index[d] >= t->sizes[d])
      return em_set_error(EM_ERR_INDEX, "%s: index %lld out of range for dim %d of size %lld (shape %s)", op,
                          (long long)index[d], d, (long long)t->sizes[d], EM_SHAPE(t));
    o += index[d] * t->strides[d];
  }
  *off = o;
  return EM_OK;
}

static double load_as_double(const void *base, em_dtype dtype, int64_t i) {
  switch (dtype) {
    case EM_FLOAT32: return ((const float *)base)[i];
    case EM_FLOAT64: return ((const double *)base)[i];
    case EM_FLOAT16: return em_half_to_float(((const uint16_t *)base)[i]);
    case EM_BFLOAT16: return em_bf16_to_float(((const uint16_t *)base)[i]);
    case EM_INT32: return ((const int32_t *)base)[i];
    case EM_INT64: return (double)((const int64_t *)base)[i];
    case EM_UINT8:
    case EM_BOOL: return ((const uint8_t *)base)[i];
    default: return 0;
  }
}

static void store_double(void *base, em_dtype dtype, int64_t i, double v) {
  switch (dtype) {
    case EM_FLOAT32: ((float *)base)[i] = (float)v; break;
    case EM_FLOAT64: ((double *)base)[i] = v; break;
    case EM_FLOAT16: ((uint16_t *)base)[i] = em_float_to_half((float)v); break;
    case EM_BFLOAT16: ((uint16_t *)base)[i] = em_float_to_bf16((float)v); break;
    case EM_INT32: ((int32_t *)base)[i] = (int32_t)v; break;
    case EM_INT64: ((int64_t *)base)[i] = (int64_t)v; break;
    case EM_UINT8: ((uint8_t *)base)[i] = (uint8_t)(int64_t)v; break;
    case EM_BOOL: ((uint8_t *)base)[i] = v != 0; break;
    default: break;
  }
}

/* The element of t at storage offset off, through a one-element copy when t is on a device
 * (which waits for the device: reading a value back is a synchronisation point). */
static em_status read_element(const em_tensor *t, int64_t off, void *buf) {
  size_t size = em_dtype_size(t->dtype);
  if (t->storage->device.type == EM_CPU) {
    memcpy(buf, (const char *)t->storage->data + off * (int64_t)size, size);
    return EM_OK;
  }
  em_tensor *view = tn_tensor_wrap(t->storage, t->dtype, 0, NULL, NULL, off), *host = NULL;
  if (!view) return em_last_status();
  em_status st = em_empty(&host, 0, NULL, t->dtype, (em_device){EM_CPU, 0});
  if (!st) st = em_copy_(host, view);
  if (!st) memcpy(buf, host->storage->data, size);
  em_tensor_release(host);
  em_tensor_release(view);
  return st;
}

static em_status write_element(em_tensor *t, int64_t off, const void *buf) {
  size_t size = em_dtype_size(t->dtype);
  if (t->storage->device.type == EM_CPU) {
    memcpy((char *)t->storage->data + off * (int64_t)size, buf, size);
    return EM_OK;
  }
  em_tensor *view = tn_tensor_wrap(t->storage, t->dtype, 0, NULL, NULL, off), *host = NULL;
  if (!view) return em_last_status();
  em_status st = em_empty(&host, 0, NULL, t->dtype, (em_device){EM_CPU, 0});
  if (!st) {
    memcpy(host->storage->data, buf, size);
    st = em_copy_(view, host);
  }
  em_tensor_release(host);
  em_tensor_release(view);
  return st;
}

em_status em_tensor_get(const em_tensor *t, const int64_t *index, double *value) {
  int64_t off = 0;
  _Alignas(8) unsigned char buf[8];
  em_status st = element_offset("get", t, index, &off);
  if (!st) st = read_element(t, off, buf);
  if (st) return st;
  *value = load_as_double(buf, t->dtype, 0);
  return EM_OK;
}

em_status em_tensor_set(em_tensor *t, const int64_t *index, double value) {
  int64_t off = 0;
  _Alignas(8) unsigned char buf[8];
  em_status st = element_offset("set", t, index, &off);
  if (st) return st;
  store_double(buf, t->dtype, 0, value);
  return write_element(t, off, buf);
}

em_status em_tensor_item(const em_tensor *t, double *value) {
  em_status st = tn_check_tensor("item", t, "tensor");
  if (st) return st;
  if (em_tensor_numel(t) != 1)
    return em_set_error(EM_ERR_SHAPE, "item: expected a tensor with one element, got shape %s (%lld elements)",
                        EM_SHAPE(t), (long long)em_tensor_numel(t));
  int64_t zeros[EM_MAX_DIMS] = {0};
  return em_tensor_get(t, zeros, value);
}

em_status em_tensor_item_int64(const em_tensor *t, int64_t *value) {
  em_status st = tn_check_tensor("item", t, "tensor");
  if (st) return st;
  if (em_tensor_numel(t) != 1)
    return em_set_error(EM_ERR_SHAPE, "item: expected a tensor with one element, got shape %s", EM_SHAPE(t));
  _Alignas(8) unsigned char buf[8];
  if ((st = read_element(t, t->offset, buf))) return st; /* one element: it sits at the offset */
  if (t->dtype == EM_INT64) memcpy(value, buf, sizeof *value);
  else *value = (int64_t)load_as_double(buf, t->dtype, 0);
  return EM_OK;
}

/* ---- shared helpers ---- */

int64_t emp_shape_numel(int ndim, const int64_t *sizes) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= sizes[d];
  return n;
}

void emp_contiguous_strides(int ndim, const int64_t *sizes, int64_t *strides) {
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    strides[d] = s;
    s *= sizes[d] > 0 ? sizes[d] : 1;
  }
}

const char *tn_shape_str(int ndim, const int64_t *sizes) {
  static _Thread_local char ring[4][160];
  static _Thread_local int next;
  char *buf = ring[next++ & 3];
  int n = snprintf(buf, 160, "[");
  for (int d = 0; d < ndim && n < 140; d++) n += snprintf(buf + n, 160 - n, d ? ", %lld" : "%lld", (long long)sizes[d]);
  snprintf(buf + n, 160 - n, "]");
  return buf;
}

em_status tn_check_dim(const char *op, int *dim, int ndim) {
  int n = ndim ? ndim : 1; /* a 0-d tensor accepts dim 0 and -1, as in PyTorch */
  if (*dim < -n || *dim >= n)
    return em_set_error(EM_ERR_INDEX, "%s: dim %d out of range for a %d-d tensor (expected %d..%d)", op, *dim, ndim, -n,
                        n - 1);
  if (*dim < 0) *dim += n;
  return EM_OK;
}

em_status tn_check_tensor(const char *op, const em_tensor *t, const char *what) {
  if (!t) return em_set_error(EM_ERR_ARGUMENT, "%s: expected a tensor for %s, got nil", op, what);
  if (t->freed) return em_set_error(EM_ERR_ARGUMENT, "%s: the %s was freed with free()", op, what);
  return EM_OK;
}

em_status tn_prepare_out(const char *op, em_tensor **out, int ndim, const int64_t *sizes, em_dtype dtype,
                         em_device device, bool *allocated) {
  *allocated = false;
  if (!out) return em_set_error(EM_ERR_ARGUMENT, "%s: out must not be NULL", op);
  if (!*out) {
    em_status st = em_empty(out, ndim, sizes, dtype, device);
    if (st) return st;
    *allocated = true;
    return EM_OK;
  }
  em_tensor *o = *out;
  em_status st = tn_check_tensor(op, o, "output");
  if (st) return st;
  if (o->ndim != ndim || memcmp(o->sizes, sizes, sizeof(int64_t) * ndim))
    return em_set_error(EM_ERR_SHAPE, "%s: output has shape %s, expected %s", op, EM_SHAPE(o),
                        tn_shape_str(ndim, sizes));
  if (o->dtype != dtype)
    return em_set_error(EM_ERR_DTYPE, "%s: output has dtype %s, expected %s", op, em_dtype_name(o->dtype),
                        em_dtype_name(dtype));
  if (o->storage->device.type != device.type || o->storage->device.index != device.index)
    return em_set_error(EM_ERR_DEVICE, "%s: output is on another device than the inputs", op);
  return EM_OK;
}

void tn_discard_out(em_tensor **out, bool allocated) {
  if (allocated && out && *out) {
    em_tensor_release(*out);
    *out = NULL;
  }
}

em_status tn_broadcast_shapes(const char *op, int na, const int64_t *a, int nb, const int64_t *b, int *out_ndim,
                              int64_t *out_sizes) {
  int n = na > nb ? na : nb;
  for (int i = 0; i < n; i++) {
    int64_t sa = i < n - na ? 1 : a[i - (n - na)];
    int64_t sb = i < n - nb ? 1 : b[i - (n - nb)];
    if (sa != sb && sa != 1 && sb != 1)
      return em_set_error(EM_ERR_SHAPE, "%s: shapes %s and %s cannot be broadcast together", op, tn_shape_str(na, a),
                          tn_shape_str(nb, b));
    out_sizes[i] = sa == 1 ? sb : sa;
  }
  *out_ndim = n;
  return EM_OK;
}

em_status emp_broadcast_to(const char *op, em_tensor **out, const em_tensor *a, int ndim, const int64_t *sizes) {
  if (ndim < a->ndim)
    return em_set_error(EM_ERR_SHAPE, "%s: cannot broadcast shape %s to %s", op, EM_SHAPE(a),
                        tn_shape_str(ndim, sizes));
  int64_t strides[EM_MAX_DIMS];
  for (int i = 0; i < ndim; i++) {
    int j = i - (ndim - a->ndim);
    if (j < 0) {
      strides[i] = 0;
    } else if (a->sizes[j] == sizes[i]) {
      strides[i] = a->strides[j];
    } else if (a->sizes[j] == 1) {
      strides[i] = 0;
    } else {
      return em_set_error(EM_ERR_SHAPE, "%s: cannot broadcast shape %s to %s", op, EM_SHAPE(a),
                          tn_shape_str(ndim, sizes));
    }
  }
  *out = tn_tensor_wrap(a->storage, a->dtype, ndim, sizes, strides, a->offset);
  return *out ? EM_OK : em_last_status();
}
