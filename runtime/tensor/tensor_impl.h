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
  em_deleter deleter; /* NULL: memory came from the device backend's allocator */
  void *deleter_ctx;
  bool borrowed; /* adopted memory with no deleter: never freed by ember */
} em_storage;

struct em_tensor {
  atomic_int refcount;
  em_dtype dtype;
  int ndim;
  bool freed; /* em_tensor_free() was called */
  int64_t sizes[EM_MAX_DIMS];
  int64_t strides[EM_MAX_DIMS]; /* in elements */
  int64_t offset; /* in elements */
  em_storage *storage;
  /* Owned by the autograd layer (runtime/autograd); the tensor core only frees it. */
  void *autograd;
  void (*autograd_free)(void *autograd);
};

/* What a plugin and libember must agree on about tensors (core/plugin_abi.h). */
#define EM_TENSOR_ABI(X) \
  X(EM_MAX_DIMS) X(EM_NUM_DEVICE_TYPES) X(sizeof(em_device)) X(sizeof(em_storage)) X(sizeof(em_tensor))

/* Storage */
em_status tn_storage_new(em_storage **out, size_t nbytes, em_device device);
void tn_storage_retain(em_storage *s);
void tn_storage_release(em_storage *s);

/* A new tensor header over `storage` (retained). */
em_tensor *tn_tensor_wrap(em_storage *storage, em_dtype dtype, int ndim, const int64_t *sizes, const int64_t *strides,
                          int64_t offset);
/* A header sharing a's storage with a's dtype (a view to be reshaped by the caller). */
em_tensor *tn_tensor_alias(const em_tensor *a);

/* Helpers for operations. */
static inline char *em_tensor_ptr(const em_tensor *t) {
  return (char *)t->storage->data + t->offset * (int64_t)em_dtype_size(t->dtype);
}
/* emp_shape_numel, emp_contiguous_strides, emp_broadcast_to and emp_compact_matrices: in
 * plugins/plugin_api.h (the CUDA plugin calls them too). */
/* Formats "[2, 3]" into buf (a static thread-local ring; valid for a few calls). */
const char *tn_shape_str(int ndim, const int64_t *sizes);
#define EM_SHAPE(t) tn_shape_str((t)->ndim, (t)->sizes)
/* Normalises a possibly negative dim against ndim; error names op. */
em_status tn_check_dim(const char *op, int *dim, int ndim);
/* Checks t is non-NULL and not freed. */
em_status tn_check_tensor(const char *op, const em_tensor *t, const char *what);

/* The in-place rule (em_check_inplace, ember/autograd.h) reads autograd's records, which
 * the tensor core does not know; runtime/autograd installs it here when libember loads, so
 * every in-place op of the tensor API applies it without the core calling up into the
 * layer above it. */
typedef em_status (*tn_inplace_rule_fn)(const char *op, const em_tensor *t, const em_tensor *src);
extern tn_inplace_rule_fn tn_inplace_rule;
static inline em_status tn_check_inplace(const char *op, const em_tensor *t, const em_tensor *src) {
  return tn_inplace_rule ? tn_inplace_rule(op, t, src) : EM_OK;
}
/* Resolves an out parameter: allocates when *out is NULL, else checks shape and dtype. */
em_status tn_prepare_out(const char *op, em_tensor **out, int ndim, const int64_t *sizes, em_dtype dtype,
                         em_device device, bool *allocated);
/* Broadcasts shapes a and b into out_sizes (ndim in *out_ndim). */
em_status tn_broadcast_shapes(const char *op, int na, const int64_t *a, int nb, const int64_t *b, int *out_ndim,
                              int64_t *out_sizes);
/* Undo a result allocated by tn_prepare_out after a failure. */
void tn_discard_out(em_tensor **out, bool allocated);
/* The operands mm, bmm, addmm, mv, dot and outer accept (ranks; bmm's equal batch sizes,
 * dot's equal lengths), for those functions and for their recorded forms (em_ag_mm, ...)
 * that go through em_ag_matmul. op is one of those names. runtime/tensor/linalg.c */
em_status tn_check_product_operands(const char *op, const em_tensor *a, const em_tensor *b);

#ifdef __cplusplus
}
#endif
#endif
