/* ember/cuda.h - GPUs: devices, memory, streams, events and pinned host memory.
 *
 * The CUDA backend lives in a plugin (libember_cuda.so, built when the CUDA toolkit is
 * found) that libember opens the first time anything asks about CUDA: processes that never
 * touch a GPU never load cudart, cuBLAS or cuDNN. Without the plugin, or without a GPU,
 * every call here works and reports that no device is present (count 0) or fails with
 * EM_ERR_DEVICE / EM_ERR_UNSUPPORTED and a message that says which.
 *
 * Ordering follows CUDA's: each device has a current stream (the legacy default stream
 * until em_cuda_set_stream changes it); every op on that device's tensors is queued on the
 * current stream and returns without waiting. Reading a value back to the host (item,
 * copies to the CPU) waits for the stream; nothing else synchronises the device. */
#ifndef EMBER_CUDA_H
#define EMBER_CUDA_H

#include "core.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* EM_FFI_BEGIN */
typedef struct em_cuda_device_props {
  char name[256];
  int major, minor; /* compute capability */
  int64_t total_memory; /* bytes */
  int multiprocessors;
  int64_t free_memory; /* bytes, as cudaMemGetInfo reports now */
} em_cuda_device_props;

typedef struct em_cuda_versions {
  int driver, runtime; /* 13000 = 13.0 (0 when unknown) */
  int cublas, cudnn, nccl; /* each library's own encoding; 0 when not linked */
} em_cuda_versions;

/* The caching allocator's counters for one device (bytes unless named otherwise). */
typedef struct em_cuda_memory_stats {
  int64_t allocated; /* in live tensors */
  int64_t reserved; /* held from the driver: allocated + cached */
  int64_t peak_allocated, peak_reserved;
  int64_t cached_blocks; /* free blocks kept for reuse */
  int64_t num_allocs, num_frees;
  int64_t num_device_allocs, num_device_frees; /* cudaMalloc / cudaFree calls */
  int64_t num_ooms; /* allocations that failed after flush-and-retry */
  int64_t num_flushes; /* times the cache was emptied to satisfy a request */
} em_cuda_memory_stats;

typedef struct em_cuda_stream em_cuda_stream;
typedef struct em_cuda_event em_cuda_event;

EM_API int em_cuda_is_available(void); /* 1 when at least one GPU can be used */
EM_API int em_cuda_device_count(void);
EM_API int em_cuda_is_built(void); /* 1 when libember_cuda.so could be loaded */
/* Why CUDA is unavailable (plugin missing, no driver, no device), or "" when it is. */
EM_API const char *em_cuda_unavailable_reason(void);
EM_API em_status em_cuda_get_device_props(int device, em_cuda_device_props *out);
EM_API em_status em_cuda_get_versions(em_cuda_versions *out);
EM_API em_status em_cuda_set_device(int device); /* the device of "cuda" without an index */
EM_API int em_cuda_current_device(void);
EM_API em_status em_cuda_synchronize(int device); /* device < 0: the current device */

EM_API em_status em_cuda_get_memory_stats(int device, em_cuda_memory_stats *out);
EM_API em_status em_cuda_reset_peak_memory_stats(int device);
EM_API em_status em_cuda_empty_cache(void); /* returns cached blocks to the driver */
/* Caps what the allocator reserves on a device (bytes; 0 = no cap). For tests of OOM. */
EM_API em_status em_cuda_set_memory_limit(int device, int64_t bytes);

/* Streams. priority: 0 normal, -1 high. A NULL stream means the device's default. */
EM_API em_status em_cuda_stream_new(em_cuda_stream **out, int device, int priority);
EM_API void em_cuda_stream_free(em_cuda_stream *s);
EM_API em_status em_cuda_stream_synchronize(em_cuda_stream *s);
EM_API int em_cuda_stream_query(em_cuda_stream *s); /* 1 when all work is done */
EM_API em_status em_cuda_stream_wait_event(em_cuda_stream *s, em_cuda_event *e);
EM_API int em_cuda_stream_device(const em_cuda_stream *s);
/* The current stream of s's device becomes s (NULL: back to the default stream). */
EM_API em_status em_cuda_set_stream(int device, em_cuda_stream *s);
EM_API em_cuda_stream *em_cuda_current_stream(int device); /* NULL: the default stream */
/* t's memory is in use by work queued on s: its block is not reused until that work ends
 * (PyTorch's record_stream). */
EM_API em_status em_cuda_record_stream(em_tensor *t, em_cuda_stream *s);

/* Events. timing: 1 to measure elapsed time between two events. */
EM_API em_status em_cuda_event_new(em_cuda_event **out, int timing);
EM_API void em_cuda_event_free(em_cuda_event *e);
EM_API em_status em_cuda_event_record(em_cuda_event *e, em_cuda_stream *s); /* s NULL: current stream */
EM_API em_status em_cuda_event_synchronize(em_cuda_event *e);
EM_API int em_cuda_event_query(em_cuda_event *e);
EM_API em_status em_cuda_event_elapsed_ms(em_cuda_event *start, em_cuda_event *end, double *ms);

/* Pinned (page-locked) host memory: a CPU tensor copied to or from a GPU without a
 * staging copy, and asynchronously with non_blocking. */
EM_API em_status em_pin_memory(em_tensor **out, const em_tensor *a);
/* A new CPU tensor in pinned memory, uninitialised (the destination of a non_blocking
 * copy from a GPU). */
EM_API em_status em_empty_pinned(em_tensor **out, int ndim, const int64_t *sizes, em_dtype dtype);
EM_API int em_tensor_is_pinned(const em_tensor *t);
/* Copies src into dst (any devices, same shape); non_blocking: return once queued on the
 * current stream when the host side is pinned (otherwise it is a synchronous copy). */
EM_API em_status em_copy_async(em_tensor *dst, const em_tensor *src, int non_blocking);
/* EM_FFI_END */

#ifdef __cplusplus
}
#endif
#endif
