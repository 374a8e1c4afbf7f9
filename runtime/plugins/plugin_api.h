/* plugin_api.h - what libember offers its plugins (runtime/plugins/mpi, runtime/plugins/cuda)
 * beyond the public API (runtime/include/ember/). A plugin includes this header, the
 * public headers and the headers of its own folder: nothing else of libember's.
 *
 * The functions below are libember internals that a plugin calls across the shared-object
 * boundary. They carry the emp_ prefix and EM_PLUGIN_API, which exports them from libember
 * (built with hidden visibility) exactly as EM_API exports the public API;
 * tests/api/check_exports.lua fails when libember exports anything but these two sets.
 * They are no API for programs: they change whenever libember and its plugins change
 * together.
 *
 * The internal headers included below, and why a plugin needs each:
 *   tensor/tensor_impl.h        struct em_tensor and em_storage: backends read sizes,
 *                               strides, offsets and data pointers in place.
 *   tensor/backend.h            the per-device table of tensor ops that the CUDA plugin fills.
 *   cuda/cuda_plugin.h          the CUDA plugin's handshake with libember: em_cuda_plugin,
 *                               its entry point and ABI version.
 *   cuda/caching_allocator.h    em_cache_ops and em_device_cache: the CUDA plugin's device
 *                               memory goes through libember's caching allocator (the
 *                               bookkeeping lives in libember, cudaMalloc in the plugin).
 *   core/core_impl.h            float16/bfloat16 conversions (static inline): a plugin
 *                               rounds exactly as the CPU does.
 *   core/philox_distributions.h the CPU's random streams (static inline), so that a GPU
 *                               draws the same numbers.
 *   core/plugin_abi.h           the layout handshake a plugin's table starts with (struct
 *                               sizes, the dimension limit, API versions), checked when
 *                               libember loads it.
 *   distributed/dist_impl.h     struct em_dist_work, em_dist_group and em_dist_backend: the
 *                               table a collective backend fills (MPI; NCCL in the CUDA
 *                               plugin). It uses C11 atomics, so C++ (the .cu files) does
 *                               not see it, nor the emp_dist_ functions that need it. */
#ifndef EMBER_PLUGIN_API_H
#define EMBER_PLUGIN_API_H

#include <stddef.h>
#include <stdint.h>
#include "core/core_impl.h"
#include "core/philox_distributions.h"
#include "core/plugin_abi.h"
#include "cuda/caching_allocator.h"
#include "cuda/cuda_plugin.h"
#include "ember/cuda.h"
#include "ember/tensor.h"
#include "tensor/backend.h"
#include "tensor/tensor_impl.h"
#ifndef __cplusplus
#include "distributed/dist_impl.h"
#endif

/* Exported like EM_API; its own name so that readers (and check_exports.lua) tell the
 * plugin-facing functions from the public API. */
#define EM_PLUGIN_API EM_API

#ifdef __cplusplus
extern "C" {
#endif

/* ---- tensor layouts (runtime/tensor) */
EM_PLUGIN_API int64_t emp_shape_numel(int ndim, const int64_t *sizes);
EM_PLUGIN_API void emp_contiguous_strides(int ndim, const int64_t *sizes, int64_t *strides);
/* A view of a expanded to (ndim, sizes) with zero strides where broadcast. */
EM_PLUGIN_API em_status emp_broadcast_to(const char *op, em_tensor **out, const em_tensor *a, int ndim,
                                         const int64_t *sizes);
/* A contiguous copy of t (only its layout when copy_values is 0) for BLAS backends; with
 * keep_broadcast, zero-stride batch dims stay broadcast (copied once). runtime/tensor/copy.c */
EM_PLUGIN_API em_status emp_compact_matrices(const em_tensor *t, int keep_broadcast, int copy_values, em_tensor **out);

/* ---- the caching allocator (runtime/cuda/caching_allocator.c; caching_allocator.h says
 * how it works) */
/* A new allocator for device (ops is copied), or NULL when the host is out of memory. */
EM_PLUGIN_API em_device_cache *emp_cache_new(int device, const em_cache_ops *ops);
/* nbytes on stream; nbytes 0 gives a block of 512 bytes. On failure *ptr is NULL and the
 * error is set (EM_ERR_MEMORY). */
EM_PLUGIN_API em_status emp_cache_malloc(em_device_cache *c, size_t nbytes, void *stream, void **ptr);
/* 1 when ptr was allocated here (it is freed), 0 when this allocator does not know it. */
EM_PLUGIN_API int emp_cache_free(em_device_cache *c, void *ptr);
/* The block holding ptr is in use by work on stream too (ptr: any live allocation's start). */
EM_PLUGIN_API em_status emp_cache_record_stream(em_device_cache *c, void *ptr, void *stream);
/* Returns every cached, wholly free segment to the device (waits for pending events first). */
EM_PLUGIN_API void emp_cache_empty(em_device_cache *c);
/* Caps the bytes reserved from the device (0: no cap). Lowering it below what is reserved
 * frees nothing by itself: later segments are refused until enough is released. */
EM_PLUGIN_API void emp_cache_set_limit(em_device_cache *c, int64_t bytes);
EM_PLUGIN_API void emp_cache_stats(em_device_cache *c, em_cuda_memory_stats *out);
EM_PLUGIN_API void emp_cache_reset_peak(em_device_cache *c);

#ifndef __cplusplus
/* ---- for collective backends (runtime/distributed) */
/* Marks w finished (st == EM_OK: done; otherwise failed with msg) and wakes its waiters;
 * releases the tensors it held. Safe from any thread. */
EM_PLUGIN_API void emp_dist_work_done(em_dist_work *w, em_status st, const char *msg);
/* How many threads are blocked in em_dist_work_wait right now: a backend thread may poll
 * harder while someone waits, and leave the CPU to computation while nobody does. */
EM_PLUGIN_API int emp_dist_num_waiters(void);
/* The world group (NULL before init), for backends resolving ids of other groups. */
EM_PLUGIN_API em_dist_group *emp_dist_world_group(void);
/* "all_reduce", "broadcast", ... */
EM_PLUGIN_API const char *emp_dist_op_name(em_dist_opkind kind);
/* "all_reduce #12 on the world group (940 KB of float32)" into buf. */
EM_PLUGIN_API void emp_dist_describe(const em_dist_work *w, char *buf, size_t cap);
/* Posts an operation on g (checks done by the caller); *work receives the handle. */
EM_PLUGIN_API em_status emp_dist_post(em_dist_group *g, em_dist_opkind kind, em_tensor *in, em_tensor *out,
                                      em_dist_redop op, int peer, int tag, em_dist_work **work);
/* acc[i] = acc[i] (op) x[i] for n elements, as shared memory combines them (runtime/distributed/combine.c:
 * 'avg' as 'sum', integers wrap, float16/bfloat16 in float32 rounded every step, NaN propagates);
 * for backends that reduce with their own callbacks (Gloo). */
EM_PLUGIN_API void emp_dist_combine(void *acc, const void *x, int64_t n, em_dtype dtype, em_dist_redop op);
/* p[i] *= s for floating dtypes (the 1/size of 'avg', after the sum); others untouched. */
EM_PLUGIN_API void emp_dist_scale(void *p, int64_t n, em_dtype dtype, double s);
#endif

#ifdef __cplusplus
}
#endif
#endif
