/* common.c - argument checks and autograd plumbing shared by the nn ops. */
#include <stdlib.h>
#include <string.h>
#include "nn_impl.h"

em_status nn_check_out(const char *op, em_tensor **out) {
  if (!out) return em_set_error(EM_ERR_ARGUMENT, "%s: out must not be NULL", op);
  if (*out)
    return em_set_error(EM_ERR_ARGUMENT, "%s: results are always new tensors; pass a pointer to NULL as out", op);
  return EM_OK;
}

em_status nn_check_float(const char *op, const em_tensor *t, const char *what) {
  em_status st = tn_check_tensor(op, t, what);
  if (st) return st;
  /* float16/bfloat16 are computed by the CUDA backend (autocast); the CPU only stores them */
  if ((t->dtype == EM_FLOAT16 || t->dtype == EM_BFLOAT16) && t->storage->device.type != EM_CPU) return EM_OK;
  if (t->dtype != EM_FLOAT32 && t->dtype != EM_FLOAT64)
    return em_set_error(EM_ERR_DTYPE, "%s: expected the %s to be float32 or float64, got %s", op, what,
                        em_dtype_name(t->dtype));
  return EM_OK;
}

static int same_device(const em_tensor *a, const em_tensor *b) {
  return a->storage->device.type == b->storage->device.type && a->storage->device.index == b->storage->device.index;
}

em_status nn_check_like(const char *op, const em_tensor *t, const char *what, const em_tensor *like) {
  if (!t) return EM_OK;
  em_status st = tn_check_tensor(op, t, what);
  if (st) return st;
  if (t->dtype != like->dtype)
    return em_set_error(EM_ERR_DTYPE, "%s: the %s is %s but the input is %s (convert one of them)", op, what,
                        em_dtype_name(t->dtype), em_dtype_name(like->dtype));
  if (!same_device(t, like))
    return em_set_error(EM_ERR_DEVICE, "%s: the %s is on another device than the input", op, what);
  return EM_OK;
}

em_status nn_check_device(const char *op, const em_tensor *t, const char *what, const em_tensor *like,
                          const char *like_what) {
  if (!t || same_device(t, like)) return EM_OK;
  return em_set_error(EM_ERR_DEVICE, "%s: the %s are on another device than the %s (move them with :to)", op, what,
                      like_what);
}

em_status nn_check_vector(const char *op, const em_tensor *t, const char *what, int64_t n, const em_tensor *like) {
  em_status st = nn_check_like(op, t, what, like);
  if (st || !t) return st;
  if (t->ndim != 1 || t->sizes[0] != n)
    return em_set_error(EM_ERR_SHAPE, "%s: expected the %s to have shape [%lld], got %s", op, what, (long long)n,
                        EM_SHAPE(t));
  return EM_OK;
}

em_status nn_check_index(const char *op, const em_tensor *t, const char *what) {
  em_status st = tn_check_tensor(op, t, what);
  if (st) return st;
  if (t->dtype != EM_INT64 && t->dtype != EM_INT32)
    return em_set_error(EM_ERR_DTYPE, "%s: expected the %s to be int64 or int32, got %s", op, what,
                        em_dtype_name(t->dtype));
  return EM_OK;
}

const em_backend *nn_backend(const char *op, const em_tensor *t) { return tn_backend_for(op, t->storage->device); }

em_status nn_contiguous(em_tensor **c, const em_tensor *a) {
  *c = NULL;
  return a ? em_contiguous(c, a) : EM_OK;
}

em_status nn_reshaped(em_tensor **out, const em_tensor *a, int ndim, const int64_t *sizes) {
  em_tensor *c = NULL;
  em_status st = em_contiguous(&c, a);
  if (!st) st = em_reshape(out, c, ndim, sizes);
  em_tensor_release(c);
  return st;
}

static void free_ctx(em_node *n) { free(n->ctx); }

void *nn_node_ctx(em_node *n, size_t size) {
  n->ctx = calloc(1, size);
  if (n->ctx) n->release_ctx = free_ctx;
  return n->ctx;
}

em_status nn_set_grad(em_node *n, int i, em_tensor *g, em_tensor **slot) {
  if (!g) return EM_OK;
  if (g->ndim == n->ndims[i] && !memcmp(g->sizes, n->shapes[i], sizeof(int64_t) * g->ndim)) {
    *slot = g;
    return EM_OK;
  }
  em_status st = em_reshape(slot, g, n->ndims[i], n->shapes[i]);
  em_tensor_release(g);
  return st;
}

void nn_release(int n, em_tensor **ts) {
  for (int i = 0; i < n; i++) em_tensor_release(ts[i]);
}
