/* table.c - the runtime layer's entries of the plugin table (plugin.c calls this; the
 * PageRank and NCCL entries are filled by their own files). */
#include "gpu_runtime.h"

void em_gpu_fill_plugin(em_cuda_plugin *p) {
  p->device_count = em_gpu_plugin_device_count;
  p->device_props = em_gpu_device_props;
  p->versions = em_gpu_versions;
  p->set_device = em_gpu_set_device;
  p->current_device = em_gpu_current_device;
  p->synchronize = em_gpu_synchronize;
  p->memory_stats = em_gpu_memory_stats;
  p->reset_peak = em_gpu_reset_peak;
  p->empty_cache = em_gpu_empty_cache;
  p->set_memory_limit = em_gpu_set_memory_limit;
  p->record_stream = em_gpu_record_stream;
  p->host_alloc_pinned = em_gpu_host_alloc_pinned;
  p->host_free_pinned = em_gpu_host_free_pinned;
  p->stream_new = em_gpu_stream_new;
  p->stream_free = em_gpu_stream_free;
  p->stream_synchronize = em_gpu_stream_synchronize;
  p->stream_query = em_gpu_stream_query;
  p->stream_wait_event = em_gpu_stream_wait_event;
  p->stream_device = em_gpu_stream_device;
  p->set_stream = em_gpu_set_stream;
  p->current_stream = em_gpu_get_stream;
  p->event_new = em_gpu_event_new;
  p->event_free = em_gpu_event_free;
  p->event_record = em_gpu_event_record;
  p->event_synchronize = em_gpu_event_synchronize;
  p->event_query = em_gpu_event_query;
  p->event_elapsed_ms = em_gpu_event_elapsed_ms;
  p->copy_async = em_gpu_copy_async;
}
