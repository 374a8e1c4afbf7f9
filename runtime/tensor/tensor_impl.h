/* tensor_impl.h - the layout of tensors and storages, shared by the tensor core and the
 * device backends (runtime/cpu, runtime/cuda). Nothing outside runtime/ includes it; the
 * public API (ember/tensor.h) sees em_tensor as an opaque handle. */
#ifndef EMBER_TENSOR_IMPL_H
#define EMBER_TENSOR_IMPL_H

#ifdef __cplusplus
/* The CUDA plugin's .cu files are C++: the same layout through std::atomic. */
#include <atomic>
typedef std::atomic<int> atomic_int;
#else
#include <stdatomic.h>
#include <stdbool.h>
#endif
#include "ember/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_storage {
  atomic_int refcount;
  em_device device;
  void *data;
  size_t nbytes;
  em_deleter deleter;   /* NULL: memory came from the device backend's allocator */
  void *deleter_ctx;
  bool borrowed;        /* adopted memory with no deleter: never freed by ember */
} em_storage;

struct em_tensor {
  atomic_int refcount;
  em_dtype dtype;
  int ndim;
  bool freed;                 /* em_tensor_free() was called */
  int64_t sizes[EM_MAX_DIMS];
  int64_t strides[EM_MAX_DIMS]; /* in elements */
  int64_t offset;               /* in elements */
  em_storage *storage;
  /* Owned by the autograd layer (runtime/autograd); the tensor core only frees it. */
  void *autograd;
  void (*autograd_free)(void *autograd);
};

/* Storage */
em_status tn_storage_new(em_storage **out, size_t nbytes, em_device device);
void tn_storage_retain(em_storage *s);
void tn_storage_release(em_storage *s);

/* A new tensor header over `storage` (retained). */
em_tensor *tn_tensor_wrap(em_storage *storage, em_dtype dtype, int ndim, const int64_t *sizes,
                          const int64_t *strides, int64_t offset);
/* A header sharing a's storage with a's dtype (a view to be reshaped by the caller). */
em_tensor *tn_tensor_alias(const em_tensor *a);

/* Helpers for operations. */
static inline char *em_tensor_ptr(const em_tensor *t) {
  return (char *)t->storage->data + t->offset * (int64_t)em_dtype_size(t->dtype);
}
int64_t emp_shape_numel(int ndim, const int64_t *sizes);
void emp_contiguous_strides(int ndim, const int64_t *sizes, int64_t *strides);
/* Formats "[2, 3]" into buf (a static thread-local ring; valid for a few calls). */
const char *tn_shape_str(int ndim, const int64_t *sizes);
#define EM_SHAPE(t) tn_shape_str((t)->ndim, (t)->sizes)
/* Normalises a possibly negative dim against ndim; error names op. */
em_status tn_check_dim(const char *op, int *dim, int ndim);
/* Checks t is non-NULL and not freed. */
em_status tn_check_tensor(const char *op, const em_tensor *t, const char *what);
/* Resolves an out parameter: allocates when *out is NULL, else checks shape and dtype. */
em_status tn_prepare_out(const char *op, em_tensor **out, int ndim, const int64_t *sizes,
                         em_dtype dtype, em_device device, bool *allocated);
/* Broadcasts shapes a and b into out_sizes (ndim in *out_ndim). */
em_status tn_broadcast_shapes(const char *op, int na, const int64_t *a, int nb, const int64_t *b,
                              int *out_ndim, int64_t *out_sizes);
/* A view of a expanded to (ndim, sizes) with zero strides where broadcast. */
em_status emp_broadcast_to(const char *op, em_tensor **out, const em_tensor *a, int ndim,
                          const int64_t *sizes);
/* A contiguous copy of t (only its layout when copy_values is 0) for BLAS backends; with
 * keep_broadcast, zero-stride batch dims stay broadcast (copied once). runtime/tensor/copy.c */
em_status emp_compact_matrices(const em_tensor *t, int keep_broadcast, int copy_values, em_tensor **out);
/* Undo a result allocated by tn_prepare_out after a failure. */
void tn_discard_out(em_tensor **out, bool allocated);

#ifdef __cplusplus
}
#endif
#endif
