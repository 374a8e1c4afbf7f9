/* streams.c - streams, events and the current stream.
 *
 * The current stream is per thread and per device, as in PyTorch. Until a thread sets one,
 * a device's current stream is the legacy default stream (handle 0), which orders itself
 * with every blocking stream of the device. Streams made here are non-blocking: work on
 * them runs concurrently with the default stream, and ordering across streams is the
 * caller's (events, wait_stream), as in PyTorch. */
#include <pthread.h>
#include <stdlib.h>
#include "gpu_runtime.h"

static _Thread_local em_cuda_stream *current[EM_GPU_MAX_DEVICES];

cudaStream_t em_gpu_current_stream(int device) {
  if (device < 0 || device >= EM_GPU_MAX_DEVICES) return 0;
  em_cuda_stream *s = current[device];
  return s ? s->handle : 0;
}

em_cuda_stream *em_gpu_get_stream(int device) {
  return device >= 0 && device < EM_GPU_MAX_DEVICES ? current[device] : NULL;
}

em_status em_gpu_set_stream(int device, em_cuda_stream *s) {
  em_status st = em_gpu_check_device("cuda.set_stream", device);
  if (st) return st;
  if (s && s->device != device)
    return em_set_error(EM_ERR_DEVICE, "cuda.set_stream: the stream belongs to cuda:%d, not cuda:%d", s->device,
                        device);
  current[device] = s;
  return EM_OK;
}

/* ---- streams, pooled per device and priority */

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static em_cuda_stream *pool[EM_GPU_MAX_DEVICES][2];

em_status em_gpu_stream_new(em_cuda_stream **out, int device, int priority) {
  const char *op = "cuda.Stream";
  *out = NULL;
  if (priority != 0 && priority != -1)
    return em_set_error(EM_ERR_ARGUMENT, "%s: priority must be 0 (normal) or -1 (high), got %d", op, priority);
  em_status st = em_gpu_check_device(op, device);
  if (st) return st;
  int high = priority < 0;
  pthread_mutex_lock(&pool_lock);
  em_cuda_stream *s = pool[device][high];
  if (s) pool[device][high] = s->next_free;
  pthread_mutex_unlock(&pool_lock);
  if (s) {
    s->next_free = NULL;
    *out = s;
    return EM_OK;
  }
  s = calloc(1, sizeof *s);
  if (!s) return em_set_error(EM_ERR_MEMORY, "%s: out of host memory", op);
  int prev;
  if ((st = em_gpu_switch(op, device, &prev))) {
    free(s);
    return st;
  }
  int least = 0, greatest = 0; /* greatest is the numerically lowest: the highest priority */
  cudaError_t err = cudaDeviceGetStreamPriorityRange(&least, &greatest);
  if (err == cudaSuccess)
    err = cudaStreamCreateWithPriority(&s->handle, cudaStreamNonBlocking, high ? greatest : least);
  em_gpu_restore(prev);
  if (err != cudaSuccess) {
    free(s);
    return em_gpu_error(err, op);
  }
  s->device = device;
  s->priority = high ? -1 : 0;
  *out = s;
  return EM_OK;
}

/* Back to the pool; if it is this thread's current stream, the default stream takes over.
 * (Another thread that still has it current keeps a valid handle: pooled streams live on.) */
void em_gpu_stream_free(em_cuda_stream *s) {
  if (!s) return;
  if (s->device >= 0 && s->device < EM_GPU_MAX_DEVICES && current[s->device] == s) current[s->device] = NULL;
  pthread_mutex_lock(&pool_lock);
  s->next_free = pool[s->device][s->priority < 0];
  pool[s->device][s->priority < 0] = s;
  pthread_mutex_unlock(&pool_lock);
}

int em_gpu_stream_device(const em_cuda_stream *s) { return s ? s->device : em_gpu_current_device(); }

/* The handle and device of s (NULL: the current device's default stream); switches to it. */
static em_status stream_enter(const char *op, em_cuda_stream *s, cudaStream_t *h, int *prev) {
  int device = em_gpu_stream_device(s);
  *h = s ? s->handle : 0;
  return em_gpu_switch(op, device, prev);
}

em_status em_gpu_stream_synchronize(em_cuda_stream *s) {
  const char *op = "cuda.Stream:synchronize";
  cudaStream_t h;
  int prev;
  em_status st = stream_enter(op, s, &h, &prev);
  if (st) return st;
  cudaError_t err = cudaStreamSynchronize(h);
  em_gpu_restore(prev);
  return err == cudaSuccess ? EM_OK : em_gpu_error(err, op);
}

/* 1 when done, 0 when work is pending, -1 on an error (set). */
int em_gpu_stream_query(em_cuda_stream *s) {
  const char *op = "cuda.Stream:query";
  cudaStream_t h;
  int prev;
  if (stream_enter(op, s, &h, &prev)) return -1;
  cudaError_t err = cudaStreamQuery(h);
  em_gpu_restore(prev);
  if (err == cudaSuccess) return 1;
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return 0;
  }
  em_gpu_error(err, op);
  return -1;
}

em_status em_gpu_stream_wait_event(em_cuda_stream *s, em_cuda_event *e) {
  const char *op = "cuda.Stream:wait_event";
  if (!e->recorded) return EM_OK; /* nothing to wait for, as cudaStreamWaitEvent on an unrecorded event */
  cudaStream_t h;
  int prev;
  em_status st = stream_enter(op, s, &h, &prev);
  if (st) return st;
  cudaError_t err = cudaStreamWaitEvent(h, e->handle, 0);
  em_gpu_restore(prev);
  return err == cudaSuccess ? EM_OK : em_gpu_error(err, op);
}

/* ---- events */

em_status em_gpu_event_new(em_cuda_event **out, int timing) {
  em_cuda_event *e = calloc(1, sizeof *e);
  if (!e) return em_set_error(EM_ERR_MEMORY, "cuda.Event: out of host memory");
  e->device = -1;
  e->timing = timing != 0;
  *out = e;
  return EM_OK;
}

void em_gpu_event_free(em_cuda_event *e) {
  if (!e) return;
  if (e->handle && cudaEventDestroy(e->handle) != cudaSuccess) (void)cudaGetLastError();
  free(e);
}

em_status em_gpu_event_record(em_cuda_event *e, em_cuda_stream *s) {
  const char *op = "cuda.Event:record";
  int device = em_gpu_stream_device(s);
  if (e->handle && e->device != device)
    return em_set_error(EM_ERR_DEVICE, "%s: the event belongs to cuda:%d and the stream to cuda:%d", op, e->device,
                        device);
  cudaStream_t h;
  int prev;
  em_status st = stream_enter(op, s, &h, &prev);
  if (st) return st;
  cudaError_t err = cudaSuccess;
  if (!e->handle) {
    err = cudaEventCreateWithFlags(&e->handle, e->timing ? cudaEventDefault : cudaEventDisableTiming);
    if (err == cudaSuccess) e->device = device;
    else e->handle = NULL;
  }
  if (err == cudaSuccess) err = cudaEventRecord(e->handle, h);
  em_gpu_restore(prev);
  if (err != cudaSuccess) return em_gpu_error(err, op);
  e->recorded = 1;
  return EM_OK;
}

em_status em_gpu_event_synchronize(em_cuda_event *e) {
  if (!e->recorded) return EM_OK;
  EM_GPU_CHECK("cuda.Event:synchronize", cudaEventSynchronize(e->handle));
  return EM_OK;
}

int em_gpu_event_query(em_cuda_event *e) {
  if (!e->recorded) return 1;
  cudaError_t err = cudaEventQuery(e->handle);
  if (err == cudaSuccess) return 1;
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return 0;
  }
  em_gpu_error(err, "cuda.Event:query");
  return -1;
}

em_status em_gpu_event_elapsed_ms(em_cuda_event *a, em_cuda_event *b, double *ms) {
  const char *op = "cuda.Event:elapsed_time";
  *ms = 0;
  if (!a->timing || !b->timing)
    return em_set_error(EM_ERR_ARGUMENT, "%s: both events must be made with timing = true", op);
  if (!a->recorded || !b->recorded)
    return em_set_error(EM_ERR_ARGUMENT, "%s: both events must be recorded first (start %s, end %s)", op,
                        a->recorded ? "recorded" : "not recorded", b->recorded ? "recorded" : "not recorded");
  float f = 0;
  EM_GPU_CHECK(op, cudaEventElapsedTime(&f, a->handle, b->handle));
  *ms = f;
  return EM_OK;
}
