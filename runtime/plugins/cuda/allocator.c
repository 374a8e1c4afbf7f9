/* allocator.c - device memory through the caching allocator of runtime/cuda (one per
 * device, made on first use), the CUDA side of its ops table, pinned host memory, and the
 * backend's memory entries.
 *
 * The allocator's events come from a per-device pool of timing-free CUDA events (made once,
 * reused), so that freeing a block used on several streams costs no cudaEventCreate. */
#include <pthread.h>
#include <stdlib.h>
#include "gpu_runtime.h"

typedef struct device_ctx {
  int device;
  cudaError_t failure; /* cudaMalloc's last error other than "out of memory" */
  cudaEvent_t *events; /* the event pool (used under the allocator's lock) */
  size_t nevents, events_cap;
} device_ctx;

static device_ctx contexts[EM_GPU_MAX_DEVICES];
static em_device_cache *caches[EM_GPU_MAX_DEVICES];
static pthread_mutex_t caches_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- the ops table over the CUDA runtime (called with the allocator's lock held) */

static int raw_alloc(void *vctx, int device, size_t bytes, void **ptr) {
  device_ctx *c = vctx;
  int prev;
  *ptr = NULL;
  if (em_gpu_switch("cuda malloc", device, &prev)) return 1;
  cudaError_t err = cudaMalloc(ptr, bytes);
  em_gpu_restore(prev);
  if (err == cudaSuccess) return 0;
  (void)cudaGetLastError();
  if (err != cudaErrorMemoryAllocation) __atomic_store_n(&c->failure, err, __ATOMIC_RELAXED);
  *ptr = NULL;
  return 1;
}

static void raw_free(void *vctx, int device, void *ptr) {
  (void)vctx;
  int prev;
  if (em_gpu_switch("cuda free", device, &prev)) return;
  if (cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
  em_gpu_restore(prev);
}

/* An event after the work queued on stream; NULL after waiting for the stream when no
 * event can be made or recorded (the allocator then treats the stream as done). */
static void *event_record(void *vctx, int device, void *stream) {
  device_ctx *c = vctx;
  int prev;
  if (em_gpu_switch("cuda free", device, &prev)) return NULL;
  cudaEvent_t ev = NULL;
  cudaError_t err = cudaSuccess;
  if (c->nevents) ev = c->events[--c->nevents];
  else err = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (err == cudaSuccess) err = cudaEventRecord(ev, (cudaStream_t)stream);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (ev && cudaEventDestroy(ev) != cudaSuccess) (void)cudaGetLastError();
    if (cudaStreamSynchronize((cudaStream_t)stream) != cudaSuccess) (void)cudaGetLastError();
    ev = NULL;
  }
  em_gpu_restore(prev);
  return ev;
}

static int event_query(void *vctx, void *event) {
  (void)vctx;
  cudaError_t err = cudaEventQuery((cudaEvent_t)event);
  if (err == cudaSuccess) return 1;
  (void)cudaGetLastError();
  /* a failed device will never complete the event: count it as done */
  return err == cudaErrorNotReady ? 0 : 1;
}

static void event_synchronize(void *vctx, void *event) {
  (void)vctx;
  if (cudaEventSynchronize((cudaEvent_t)event) != cudaSuccess) (void)cudaGetLastError();
}

static void event_free(void *vctx, void *event) {
  device_ctx *c = vctx;
  if (c->nevents == c->events_cap) {
    size_t cap = c->events_cap ? 2 * c->events_cap : 32;
    cudaEvent_t *grown = realloc(c->events, cap * sizeof *grown);
    if (!grown) {
      if (cudaEventDestroy((cudaEvent_t)event) != cudaSuccess) (void)cudaGetLastError();
      return;
    }
    c->events = grown;
    c->events_cap = cap;
  }
  c->events[c->nevents++] = (cudaEvent_t)event;
}

static int mem_info(void *vctx, int device, int64_t *free_bytes, int64_t *total) {
  (void)vctx;
  int prev;
  if (em_gpu_switch("cuda memory info", device, &prev)) return 1;
  size_t f = 0, t = 0;
  cudaError_t err = cudaMemGetInfo(&f, &t);
  em_gpu_restore(prev);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return 1;
  }
  *free_bytes = (int64_t)f;
  *total = (int64_t)t;
  return 0;
}

/* ---- one allocator per device */

static em_device_cache *cache_for(const char *op, int device) {
  if (em_gpu_check_device(op, device)) return NULL;
  em_device_cache *c = __atomic_load_n(&caches[device], __ATOMIC_ACQUIRE);
  if (c) return c;
  pthread_mutex_lock(&caches_lock);
  c = caches[device];
  if (!c) {
    contexts[device].device = device;
    em_cache_ops ops = {
        .ctx = &contexts[device],
        .raw_alloc = raw_alloc,
        .raw_free = raw_free,
        .event_record = event_record,
        .event_query = event_query,
        .event_synchronize = event_synchronize,
        .event_free = event_free,
        .mem_info = mem_info,
    };
    c = emp_cache_new(device, &ops);
    if (c) __atomic_store_n(&caches[device], c, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&caches_lock);
  if (!c) em_set_error(EM_ERR_MEMORY, "%s: out of host memory for the allocator of cuda:%d", op, device);
  return c;
}

/* The allocator of device if it exists yet (no error when not). */
static em_device_cache *existing_cache(int device) {
  if (device < 0 || device >= EM_GPU_MAX_DEVICES) return NULL;
  return __atomic_load_n(&caches[device], __ATOMIC_ACQUIRE);
}

void *em_gpu_malloc(size_t nbytes, int device) {
  em_device_cache *c = cache_for("cuda malloc", device);
  if (!c) return NULL;
  void *p = NULL;
  if (emp_cache_malloc(c, nbytes, (void *)em_gpu_current_stream(device), &p)) {
    /* not out of memory but a failing device: say so rather than "out of memory" */
    cudaError_t err = __atomic_exchange_n(&contexts[device].failure, cudaSuccess, __ATOMIC_RELAXED);
    if (err != cudaSuccess) em_gpu_error(err, "cuda malloc");
    return NULL;
  }
  return p;
}

void em_gpu_free_ptr(void *ptr) {
  if (!ptr) return;
  for (int d = 0; d < EM_GPU_MAX_DEVICES; d++) {
    em_device_cache *c = existing_cache(d);
    if (c && emp_cache_free(c, ptr)) return;
  }
}

/* The backend table's memory entries (table.c); copy is copy.cu's. */
void *em_gpu_alloc(size_t nbytes, em_device device) { return em_gpu_malloc(nbytes, device.index); }

void em_gpu_free(void *ptr, size_t nbytes, em_device device) {
  (void)nbytes;
  em_device_cache *c = existing_cache(device.index);
  if (!c || !emp_cache_free(c, ptr)) em_gpu_free_ptr(ptr);
}

/* ---- statistics and control */

em_status em_gpu_memory_stats(int device, em_cuda_memory_stats *out) {
  em_device_cache *c = cache_for("cuda.memory_stats", device);
  if (!c) return em_last_status();
  emp_cache_stats(c, out);
  return EM_OK;
}

em_status em_gpu_reset_peak(int device) {
  em_device_cache *c = cache_for("cuda.reset_peak_memory_stats", device);
  if (!c) return em_last_status();
  emp_cache_reset_peak(c);
  return EM_OK;
}

em_status em_gpu_empty_cache(void) {
  for (int d = 0; d < EM_GPU_MAX_DEVICES; d++) {
    em_device_cache *c = existing_cache(d);
    if (c) emp_cache_empty(c);
  }
  return EM_OK;
}

em_status em_gpu_set_memory_limit(int device, int64_t bytes) {
  em_device_cache *c = cache_for("cuda.set_memory_limit", device);
  if (!c) return em_last_status();
  emp_cache_set_limit(c, bytes);
  return EM_OK;
}

em_status em_gpu_record_stream(void *ptr, int device, em_cuda_stream *s) {
  em_device_cache *c = cache_for("record_stream", device);
  if (!c) return em_last_status();
  if (s && s->device != device)
    return em_set_error(EM_ERR_DEVICE, "record_stream: the tensor is on cuda:%d and the stream on cuda:%d", device,
                        s->device);
  return emp_cache_record_stream(c, ptr, s ? (void *)s->handle : NULL);
}

/* ---- pinned host memory (portable: pinned for every device's context) */

void *em_gpu_host_alloc_pinned(size_t nbytes) {
  void *p = NULL;
  cudaError_t err = cudaHostAlloc(&p, nbytes, cudaHostAllocPortable);
  if (err != cudaSuccess) {
    em_gpu_error(err, "pin_memory");
    return NULL;
  }
  return p;
}

void em_gpu_host_free_pinned(void *ptr) {
  if (ptr && cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();
}
