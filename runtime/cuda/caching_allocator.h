/* caching_allocator.h - the bookkeeping of a GPU's caching allocator, in the manner of
 * PyTorch's CUDACachingAllocator, written in plain C so that it runs (and is unit-tested)
 * without a GPU: the device is reached only through an ops table (the CUDA plugin fills it
 * with cudaMalloc, cudaFree and events; tests fill it with malloc and fake events).
 *
 * - Sizes round up to 512 bytes. Requests up to 1 MiB come from the small pool, carved out
 *   of 2 MiB segments; larger ones from the large pool, out of 20 MiB segments for requests
 *   under 10 MiB, else a segment of the request rounded up to 2 MiB.
 * - Free blocks sit in size-ordered lists per (pool, stream); a request takes the smallest
 *   block that fits (best fit) and splits off the rest when the rest is worth keeping
 *   (>= 512 B in the small pool, > 1 MiB in the large one). A freed block merges with its
 *   free neighbours of the same segment.
 * - A block belongs to the stream it was allocated on and is reused only by later work on
 *   that stream: stream order alone makes reuse safe. A block used on other streams too
 *   (emp_cache_record_stream) returns to its pool only when an event recorded on each of
 *   those streams at free time has completed; completed events are collected at each
 *   malloc.
 * - When the device (or the memory limit) refuses a new segment, every cached segment that
 *   is wholly free goes back to the device (after waiting for pending events) and the
 *   request is tried once more; then it fails with EM_ERR_MEMORY and a message that says
 *   how much was asked, in use by tensors, cached, and the limit.
 * Each allocator serves one device and is guarded by one mutex. */
#ifndef EMBER_CACHING_ALLOCATOR_H
#define EMBER_CACHING_ALLOCATOR_H

#include <stddef.h>
#include <stdint.h>
#include "ember/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EM_CACHE_ROUND ((size_t)512) /* every size is a multiple */
#define EM_CACHE_SMALL_REQUEST ((size_t)1 << 20) /* <= this: the small pool */
#define EM_CACHE_SMALL_SEGMENT ((size_t)2 << 20)
#define EM_CACHE_LARGE_SEGMENT ((size_t)20 << 20) /* for large requests under ... */
#define EM_CACHE_BIG_REQUEST ((size_t)10 << 20) /* ... this; above, a segment of its own */
#define EM_CACHE_SEGMENT_ROUND ((size_t)2 << 20)

/* How the allocator reaches its device. Streams and events are opaque handles (a NULL
 * stream is valid: the default stream). All calls are made with the allocator's lock held. */
typedef struct em_cache_ops {
  void *ctx;
  /* a new segment of bytes; returns 0 and sets *ptr, or nonzero when the device is out of memory */
  int (*raw_alloc)(void *ctx, int device, size_t bytes, void **ptr);
  void (*raw_free)(void *ctx, int device, void *ptr);
  /* an event marking the work queued so far on stream; NULL means that work has already
   * completed (the device layer returns NULL after synchronising when it cannot record) */
  void *(*event_record)(void *ctx, int device, void *stream);
  int (*event_query)(void *ctx, void *event); /* 1 when completed */
  void (*event_synchronize)(void *ctx, void *event); /* waits for it */
  void (*event_free)(void *ctx, void *event);
  /* optional (may be NULL): the device's free and total memory, for the OOM message */
  int (*mem_info)(void *ctx, int device, int64_t *free_bytes, int64_t *total_bytes);
} em_cache_ops;

typedef struct em_device_cache em_device_cache;

/* The allocator's calls that the CUDA plugin makes (new, malloc, free, record_stream,
 * empty, set_limit, stats, reset_peak) are declared in plugins/plugin_api.h; the rest here. */
/* Returns every segment to the device, in use or not (the device is going away). */
void cuda_cache_destroy(em_device_cache *c);
/* 1 when ptr is a live allocation of this allocator. */
int cuda_cache_owns(em_device_cache *c, void *ptr);
int64_t cuda_cache_limit(em_device_cache *c);

/* Sizes as the allocator sees them (exposed for tests). */
size_t cuda_cache_round_size(size_t nbytes);
size_t cuda_cache_segment_size(size_t rounded);
/* "512 B", "1.50 MiB", "2.00 GiB" into buf (n bytes); returns buf. */
const char *cuda_cache_format_bytes(char *buf, size_t n, int64_t bytes);

#ifdef __cplusplus
}
#endif
#endif
