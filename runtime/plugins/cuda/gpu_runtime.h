/* gpu_runtime.h - what the plugin's runtime layer shares between its files (device.c,
 * streams.c, handles.c, allocator.c, copy.cu, table.c): the stream and event objects of
 * ember/cuda.h, a device guard, and the functions of the plugin's core table (table.c).
 * Kernel files need only gpu.h. */
#ifndef EMBER_GPU_RUNTIME_H
#define EMBER_GPU_RUNTIME_H

#include "gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EM_GPU_MAX_DEVICES 64

/* A stream of ember/cuda.h. Streams are pooled, never destroyed (as in PyTorch): a handle
 * stays valid for the allocator's per-stream bookkeeping and for any thread that still has
 * it as its current stream. */
struct em_cuda_stream {
  cudaStream_t handle;
  int device;
  int priority; /* 0 normal, -1 high */
  struct em_cuda_stream *next_free;
};

/* An event; the CUDA event is made on its first record, on the stream's device. */
struct em_cuda_event {
  cudaEvent_t handle;
  int device;
  int timing;
  int recorded;
};

/* ---- device.c */
/* Why no device can be used ("" when one can). */
const char *em_gpu_unavailable_reason(void);
int em_gpu_plugin_device_count(const char **why);
/* Makes device current, remembering the previous one in *prev (restore with em_gpu_restore). */
em_status em_gpu_switch(const char *op, int device, int *prev);
void em_gpu_restore(int prev);
em_status em_gpu_check_device(const char *op, int device);
em_status em_gpu_device_props(int device, em_cuda_device_props *out);
em_status em_gpu_set_device(int device);
int em_gpu_current_device(void);
em_status em_gpu_synchronize(int device);

/* ---- streams.c: the per-thread current stream and the stream/event API */
em_status em_gpu_stream_new(em_cuda_stream **out, int device, int priority);
void em_gpu_stream_free(em_cuda_stream *s);
em_status em_gpu_stream_synchronize(em_cuda_stream *s);
int em_gpu_stream_query(em_cuda_stream *s);
em_status em_gpu_stream_wait_event(em_cuda_stream *s, em_cuda_event *e);
int em_gpu_stream_device(const em_cuda_stream *s);
em_status em_gpu_set_stream(int device, em_cuda_stream *s);
em_cuda_stream *em_gpu_get_stream(int device);
em_status em_gpu_event_new(em_cuda_event **out, int timing);
void em_gpu_event_free(em_cuda_event *e);
em_status em_gpu_event_record(em_cuda_event *e, em_cuda_stream *s);
em_status em_gpu_event_synchronize(em_cuda_event *e);
int em_gpu_event_query(em_cuda_event *e);
em_status em_gpu_event_elapsed_ms(em_cuda_event *a, em_cuda_event *b, double *ms);

/* ---- handles.c */
em_status em_gpu_versions(em_cuda_versions *out);

/* ---- allocator.c */
em_status em_gpu_memory_stats(int device, em_cuda_memory_stats *out);
em_status em_gpu_reset_peak(int device);
em_status em_gpu_empty_cache(void);
em_status em_gpu_set_memory_limit(int device, int64_t bytes);
em_status em_gpu_record_stream(void *ptr, int device, em_cuda_stream *s);
void *em_gpu_host_alloc_pinned(size_t nbytes);
void em_gpu_host_free_pinned(void *ptr);

/* ---- copy.cu (and the backend's copy entry, declared in gpu.h) */
em_status em_gpu_copy_async(em_tensor *dst, const em_tensor *src, int non_blocking);

#ifdef __cplusplus
}
#endif
#endif
