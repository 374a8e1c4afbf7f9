/* ember/io.h - checkpoints in the safetensors format (Hugging Face).
 *
 * A safetensors file is an 8-byte little-endian header length N, N bytes of UTF-8 JSON
 * ({"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
 * "__metadata__": {"key": "value"}}), then the tensors' bytes, packed, C order, little
 * endian. PyTorch, NumPy and Hugging Face tools read and write it.
 *
 * Saving writes PATH.tmp.<pid> in the same folder, syncs it and renames it over PATH: a
 * failed save leaves an existing PATH untouched. Tensors may have any layout, dtype and
 * device (they are written contiguous, from host memory).
 *
 * Loading maps the file (copy-on-write) and checks the whole header before trusting any
 * of it; tensors from em_safetensors_get share the mapping (no copy) and keep it alive
 * after em_safetensors_close. Writing into them never changes the file. Tensors whose
 * data is not aligned to their element size in the file are copied instead. As with any
 * mapped file, another process truncating the file in place while tensors use it makes
 * their pages unreadable (SIGBUS); ember's own saves replace files by rename, never so. */
#ifndef EMBER_IO_H
#define EMBER_IO_H

#include "core.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* EM_FFI_BEGIN */
/* Repeated from tensor.h (C11 allows an identical typedef): bindings/ffi/gen_cdefs.lua emits
 * the headers' declarations in name order, so io.h's come before tensor.h's. */
typedef struct em_tensor em_tensor;
typedef struct em_safetensors em_safetensors;

/* Writes n tensors under names (distinct, UTF-8, not "__metadata__") and nmeta string
 * pairs of metadata (may be 0 with NULL arrays). */
EM_API em_status em_safetensors_save(const char *path, int n, const char *const *names, em_tensor *const *tensors,
                                     int nmeta, const char *const *meta_keys, const char *const *meta_values);

/* Opens and validates a file. */
EM_API em_status em_safetensors_open(em_safetensors **out, const char *path);
EM_API void em_safetensors_close(em_safetensors *f); /* NULL is fine; loaded tensors stay valid */

/* Tensors are numbered 0..count-1 in name order (byte-wise). */
EM_API int em_safetensors_count(const em_safetensors *f);
EM_API const char *em_safetensors_name(const em_safetensors *f, int i); /* NULL when out of range */
EM_API int em_safetensors_find(const em_safetensors *f, const char *name); /* -1 when absent */
/* Dtype and shape without loading; sizes needs room for EM_MAX_DIMS (8) values. */
EM_API em_status em_safetensors_info(const em_safetensors *f, int i, em_dtype *dtype, int *ndim, int64_t *sizes);
/* Tensor i. When *out is NULL it receives a new tensor sharing the file's mapping; when
 * *out is a tensor of the same shape, the values are copied into it (converting dtype
 * and device as em_copy_ does). */
EM_API em_status em_safetensors_get(const em_safetensors *f, int i, em_tensor **out);
EM_API em_status em_safetensors_get_by_name(const em_safetensors *f, const char *name, em_tensor **out);

/* The "__metadata__" string pairs, in key order. */
EM_API int em_safetensors_metadata_count(const em_safetensors *f);
EM_API const char *em_safetensors_metadata_key(const em_safetensors *f, int i); /* NULL when out of range */
EM_API const char *em_safetensors_metadata_value(const em_safetensors *f, int i);
EM_API const char *em_safetensors_metadata_get(const em_safetensors *f, const char *key); /* NULL when absent */
/* EM_FFI_END */

#ifdef __cplusplus
}
#endif
#endif
