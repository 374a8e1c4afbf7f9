/* cuda_plugin.h - the table libember gets from the CUDA plugin (libember_cuda.so).
 *
 * libember (runtime/cuda/loader.c) dlopens the plugin on the first CUDA question and calls
 * its entry point em_cuda_plugin_entry(). Everything device-specific sits behind this
 * table: the tensor backend (runtime/tensor/backend.h), device queries, the caching
 * allocator's statistics, streams, events and pinned memory. The public functions of
 * ember/cuda.h forward here after checking arguments. */
#ifndef EMBER_CUDA_PLUGIN_H
#define EMBER_CUDA_PLUGIN_H

#include "ember/cuda.h"
#include "ember/graph.h"
#include "tensor/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EM_CUDA_PLUGIN_ABI 1

/* One PageRank run on a GPU. Arrays are the graph's host CSR in its internal vertex order
 * (see runtime/graph/graph_impl.h): in-arcs of v are sources[offsets[v] .. offsets[v+1]).
 * The plugin copies them to the device, iterates like the CPU Jacobi method (dangling
 * mass spread like the teleport vector; EM_PAGERANK_GAPBS lets it leak) and writes the
 * scores back to the host. Gauss-Seidel runs as Jacobi on the GPU (said in the stats). */
typedef struct em_cuda_pagerank_job {
  int device;
  int64_t n, m;
  const int64_t *offsets;       /* [n + 1] */
  const uint32_t *sources;      /* [m] */
  const uint32_t *out_degree;   /* [n] */
  const float *teleport;        /* [n] summing to 1, internal order; NULL: uniform */
  double damping, tol;
  int max_iter, method;         /* em_pagerank_method */
  float *scores;                /* out: [n] host, internal order */
  double *residuals;            /* out: [max_iter] host, or NULL */
  em_pagerank_stats *stats;     /* out: iterations, converged, residual, seconds, ... */
} em_cuda_pagerank_job;

struct em_dist_backend;

typedef struct em_cuda_plugin {
  int abi;                               /* EM_CUDA_PLUGIN_ABI */
  const em_backend *backend;
  /* devices: count returns 0 (and sets *why) when there is no driver or no GPU */
  int (*device_count)(const char **why);
  em_status (*device_props)(int device, em_cuda_device_props *out);
  em_status (*versions)(em_cuda_versions *out);
  em_status (*set_device)(int device);
  int (*current_device)(void);
  em_status (*synchronize)(int device);
  /* memory */
  em_status (*memory_stats)(int device, em_cuda_memory_stats *out);
  em_status (*reset_peak)(int device);
  em_status (*empty_cache)(void);
  em_status (*set_memory_limit)(int device, int64_t bytes);
  em_status (*record_stream)(void *device_ptr, int device, em_cuda_stream *s);
  void *(*host_alloc_pinned)(size_t nbytes);        /* NULL with the error set */
  void (*host_free_pinned)(void *ptr);
  /* streams and events */
  em_status (*stream_new)(em_cuda_stream **out, int device, int priority);
  void (*stream_free)(em_cuda_stream *s);
  em_status (*stream_synchronize)(em_cuda_stream *s);
  int (*stream_query)(em_cuda_stream *s);
  em_status (*stream_wait_event)(em_cuda_stream *s, em_cuda_event *e);
  int (*stream_device)(const em_cuda_stream *s);
  em_status (*set_stream)(int device, em_cuda_stream *s);
  em_cuda_stream *(*current_stream)(int device);
  em_status (*event_new)(em_cuda_event **out, int timing);
  void (*event_free)(em_cuda_event *e);
  em_status (*event_record)(em_cuda_event *e, em_cuda_stream *s);
  em_status (*event_synchronize)(em_cuda_event *e);
  int (*event_query)(em_cuda_event *e);
  em_status (*event_elapsed_ms)(em_cuda_event *a, em_cuda_event *b, double *ms);
  /* copies between any two devices; non_blocking as in em_copy_async */
  em_status (*copy_async)(em_tensor *dst, const em_tensor *src, int non_blocking);
  /* PageRank over a host CSR (runtime/graph/pagerank.c prepares the job) */
  em_status (*pagerank)(struct em_cuda_pagerank_job *job);
  /* The NCCL process-group backend for CUDA tensors (runtime/distributed/dist_impl.h), or NULL
   * (the slot, or its result) when the plugin was built without NCCL. */
  const struct em_dist_backend *(*nccl_backend)(void);
} em_cuda_plugin;

typedef const em_cuda_plugin *(*em_cuda_plugin_entry_fn)(void);

/* libember side: the loaded plugin, or NULL (with the reason in *why) */
const em_cuda_plugin *cuda_plugin_get(const char **why);

#ifdef __cplusplus
}
#endif
#endif
