/* cuda.c - the public CUDA API (ember/cuda.h): argument checks, then the plugin. */
#include <string.h>
#include "cuda_plugin.h"
#include "tensor/tensor_impl.h"
#include "plugins/plugin_api.h"

/* The plugin when at least one GPU is usable; otherwise NULL with the error set (op named). */
static const em_cuda_plugin *usable(const char *op) {
  const char *why = NULL;
  const em_cuda_plugin *p = cuda_plugin_get(&why);
  if (!p) {
    em_set_error(EM_ERR_UNSUPPORTED, "%s: %s", op, why);
    return NULL;
  }
  if (p->device_count(&why) <= 0) {
    em_set_error(EM_ERR_DEVICE, "%s: no CUDA device is available (%s)", op, why ? why : "none found");
    return NULL;
  }
  return p;
}

static em_status check_device(const char *op, int device) {
  int n = em_cuda_device_count();
  if (device < 0 || device >= n)
    return em_set_error(EM_ERR_DEVICE, "%s: device cuda:%d does not exist (%d CUDA devices)", op, device, n);
  return EM_OK;
}

int em_cuda_is_built(void) { return cuda_plugin_get(NULL) != NULL; }

int em_cuda_device_count(void) {
  const em_cuda_plugin *p = cuda_plugin_get(NULL);
  return p ? p->device_count(NULL) : 0;
}

int em_cuda_is_available(void) { return em_cuda_device_count() > 0; }

const char *em_cuda_unavailable_reason(void) {
  const char *why = NULL;
  const em_cuda_plugin *p = cuda_plugin_get(&why);
  if (!p) return why;
  if (p->device_count(&why) > 0) return "";
  return why ? why : "no CUDA device found";
}

em_status em_cuda_get_device_props(int device, em_cuda_device_props *out) {
  const em_cuda_plugin *p = usable("cuda.get_device_properties");
  if (!p) return em_last_status();
  em_status st = check_device("cuda.get_device_properties", device);
  return st ? st : p->device_props(device, out);
}

em_status em_cuda_get_versions(em_cuda_versions *out) {
  memset(out, 0, sizeof *out);
  const em_cuda_plugin *p = cuda_plugin_get(NULL);
  if (!p) return em_set_error(EM_ERR_UNSUPPORTED, "cuda.versions: %s", em_cuda_unavailable_reason());
  return p->versions(out); /* works without a GPU: library versions still answer */
}

em_status em_cuda_set_device(int device) {
  const em_cuda_plugin *p = usable("cuda.set_device");
  if (!p) return em_last_status();
  em_status st = check_device("cuda.set_device", device);
  return st ? st : p->set_device(device);
}

int em_cuda_current_device(void) {
  const em_cuda_plugin *p = cuda_plugin_get(NULL);
  return p && p->device_count(NULL) > 0 ? p->current_device() : -1;
}

em_status em_cuda_synchronize(int device) {
  const em_cuda_plugin *p = usable("cuda.synchronize");
  if (!p) return em_last_status();
  if (device < 0) device = p->current_device();
  em_status st = check_device("cuda.synchronize", device);
  return st ? st : p->synchronize(device);
}

em_status em_cuda_get_memory_stats(int device, em_cuda_memory_stats *out) {
  memset(out, 0, sizeof *out);
  const em_cuda_plugin *p = usable("cuda.memory_stats");
  if (!p) return em_last_status();
  if (device < 0) device = p->current_device();
  em_status st = check_device("cuda.memory_stats", device);
  return st ? st : p->memory_stats(device, out);
}

em_status em_cuda_reset_peak_memory_stats(int device) {
  const em_cuda_plugin *p = usable("cuda.reset_peak_memory_stats");
  if (!p) return em_last_status();
  if (device < 0) device = p->current_device();
  em_status st = check_device("cuda.reset_peak_memory_stats", device);
  return st ? st : p->reset_peak(device);
}

em_status em_cuda_empty_cache(void) {
  const em_cuda_plugin *p = cuda_plugin_get(NULL);
  return p && p->device_count(NULL) > 0 ? p->empty_cache() : EM_OK; /* nothing cached */
}

em_status em_cuda_set_memory_limit(int device, int64_t bytes) {
  const em_cuda_plugin *p = usable("cuda.set_memory_limit");
  if (!p) return em_last_status();
  if (bytes < 0)
    return em_set_error(EM_ERR_ARGUMENT, "cuda.set_memory_limit: limit must be >= 0, got %lld", (long long)bytes);
  em_status st = check_device("cuda.set_memory_limit", device);
  return st ? st : p->set_memory_limit(device, bytes);
}

/* ---- streams and events ---- */

em_status em_cuda_stream_new(em_cuda_stream **out, int device, int priority) {
  *out = NULL;
  const em_cuda_plugin *p = usable("cuda.Stream");
  if (!p) return em_last_status();
  if (device < 0) device = p->current_device();
  em_status st = check_device("cuda.Stream", device);
  return st ? st : p->stream_new(out, device, priority);
}

void em_cuda_stream_free(em_cuda_stream *s) {
  const em_cuda_plugin *p = cuda_plugin_get(NULL);
  if (s && p) p->stream_free(s);
}

#define STREAM_FORWARD(ret_fail, call)        \
  const em_cuda_plugin *p = usable(__func__); \
  if (!p) return ret_fail;                    \
  return call

em_status em_cuda_stream_synchronize(em_cuda_stream *s) { STREAM_FORWARD(em_last_status(), p->stream_synchronize(s)); }
int em_cuda_stream_query(em_cuda_stream *s) { STREAM_FORWARD(1, p->stream_query(s)); }
em_status em_cuda_stream_wait_event(em_cuda_stream *s, em_cuda_event *e) {
  if (!e) return em_set_error(EM_ERR_ARGUMENT, "cuda.Stream:wait_event: expected an event, got nil");
  STREAM_FORWARD(em_last_status(), p->stream_wait_event(s, e));
}
int em_cuda_stream_device(const em_cuda_stream *s) { STREAM_FORWARD(-1, p->stream_device(s)); }

em_status em_cuda_set_stream(int device, em_cuda_stream *s) {
  const em_cuda_plugin *p = usable("cuda.set_stream");
  if (!p) return em_last_status();
  if (s) device = p->stream_device(s);
  if (device < 0) device = p->current_device();
  em_status st = check_device("cuda.set_stream", device);
  return st ? st : p->set_stream(device, s);
}

em_cuda_stream *em_cuda_current_stream(int device) {
  const em_cuda_plugin *p = cuda_plugin_get(NULL);
  if (!p || p->device_count(NULL) <= 0) return NULL;
  return p->current_stream(device < 0 ? p->current_device() : device);
}

em_status em_cuda_record_stream(em_tensor *t, em_cuda_stream *s) {
  em_status st = tn_check_tensor("record_stream", t, "tensor");
  if (st) return st;
  if (t->storage->device.type != EM_CUDA)
    return em_set_error(EM_ERR_DEVICE, "record_stream: the tensor is on the CPU, not a GPU");
  const em_cuda_plugin *p = usable("record_stream");
  if (!p) return em_last_status();
  if (t->storage->deleter || t->storage->borrowed) return EM_OK; /* not the allocator's memory */
  return p->record_stream(t->storage->data, t->storage->device.index, s);
}

em_status em_cuda_event_new(em_cuda_event **out, int timing) {
  *out = NULL;
  STREAM_FORWARD(em_last_status(), p->event_new(out, timing));
}
void em_cuda_event_free(em_cuda_event *e) {
  const em_cuda_plugin *p = cuda_plugin_get(NULL);
  if (e && p) p->event_free(e);
}
em_status em_cuda_event_record(em_cuda_event *e, em_cuda_stream *s) {
  STREAM_FORWARD(em_last_status(), p->event_record(e, s));
}
em_status em_cuda_event_synchronize(em_cuda_event *e) { STREAM_FORWARD(em_last_status(), p->event_synchronize(e)); }
int em_cuda_event_query(em_cuda_event *e) { STREAM_FORWARD(1, p->event_query(e)); }
em_status em_cuda_event_elapsed_ms(em_cuda_event *a, em_cuda_event *b, double *ms) {
  STREAM_FORWARD(em_last_status(), p->event_elapsed_ms(a, b, ms));
}

/* ---- pinned memory and copies ---- */

static void free_pinned(void *ptr, void *ctx) {
  (void)ctx;
  const em_cuda_plugin *p = cuda_plugin_get(NULL);
  if (p) p->host_free_pinned(ptr);
}

em_status em_empty_pinned(em_tensor **out, int ndim, const int64_t *sizes, em_dtype dtype) {
  *out = NULL;
  if (ndim < 0 || ndim > EM_MAX_DIMS)
    return em_set_error(EM_ERR_ARGUMENT, "pin_memory: %d dims, expected 0..%d", ndim, EM_MAX_DIMS);
  if ((int)dtype < 0 || dtype >= EM_NUM_DTYPES)
    return em_set_error(EM_ERR_DTYPE, "pin_memory: invalid dtype %d", dtype);
  for (int d = 0; d < ndim; d++)
    if (sizes[d] < 0)
      return em_set_error(EM_ERR_ARGUMENT, "pin_memory: size %lld at dim %d, expected >= 0", (long long)sizes[d], d);
  const em_cuda_plugin *p = usable("pin_memory");
  if (!p) return em_last_status();
  size_t nbytes = (size_t)emp_shape_numel(ndim, sizes) * em_dtype_size(dtype);
  void *mem = p->host_alloc_pinned(nbytes ? nbytes : 1);
  if (!mem) return em_last_status();
  em_status st = em_from_blob(out, mem, ndim, sizes, NULL, dtype, (em_device){EM_CPU, 0}, free_pinned, NULL);
  if (st) p->host_free_pinned(mem);
  return st;
}

em_status em_pin_memory(em_tensor **out, const em_tensor *a) {
  *out = NULL;
  em_status st = tn_check_tensor("pin_memory", a, "tensor");
  if (st) return st;
  if (a->storage->device.type != EM_CPU)
    return em_set_error(EM_ERR_DEVICE, "pin_memory: only CPU tensors can be pinned (this one is on cuda:%d)",
                        a->storage->device.index);
  em_tensor *t = NULL;
  if ((st = em_empty_pinned(&t, a->ndim, a->sizes, a->dtype))) return st;
  if ((st = em_copy_(t, a))) {
    em_tensor_release(t);
    return st;
  }
  *out = t;
  return EM_OK;
}

int em_tensor_is_pinned(const em_tensor *t) {
  return t && !t->freed && t->storage->device.type == EM_CPU && t->storage->deleter == free_pinned;
}

em_status em_copy_async(em_tensor *dst, const em_tensor *src, int non_blocking) {
  em_status st = tn_check_tensor("copy", dst, "destination");
  if (!st) st = tn_check_tensor("copy", src, "source");
  if (!st) st = tn_check_inplace("copy_", dst, NULL);
  if (st) return st;
  if (dst->storage->device.type == EM_CPU && src->storage->device.type == EM_CPU) return em_copy_(dst, src);
  const em_cuda_plugin *p = usable("copy");
  if (!p) return em_last_status();
  return p->copy_async(dst, src, non_blocking);
}
