/* cuda_plugin.h - the interface between libember and the CUDA plugin (libember_cuda.so), in
 * the manner of ggml's backend registry: a core every GPU plugin provides, and extras looked
 * up by name.
 *
 * libember (runtime/cuda/loader.c) dlopens the plugin on the first CUDA question and calls
 * its entry point em_cuda_plugin_entry(). The table it returns starts with the layout
 * handshake (core/plugin_abi.h), checked before anything else is read. Then comes the core:
 * the tensor backend (runtime/tensor/backend.h), devices, memory (the caching allocator's
 * statistics, pinned host memory), streams, events and copies; every entry is required.
 * Anything else a plugin offers (PageRank, the NCCL process-group backend) is an extra:
 * callers ask for it by name (cuda_plugin_extra) and get a clear error when this plugin
 * lacks it, so adding one never changes the core table. The public functions of
 * ember/cuda.h forward to the core after checking arguments. */
#ifndef EMBER_CUDA_PLUGIN_H
#define EMBER_CUDA_PLUGIN_H

#include "core/plugin_abi.h"
#include "ember/cuda.h"
#include "ember/graph.h"
#include "tensor/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Raised whenever the core table, an extra's signature or a struct below changes. */
#define EM_CUDA_PLUGIN_API_VERSION 3

/* One PageRank run on a GPU. Arrays are the graph's host CSR in its internal vertex order
 * (see runtime/graph/graph_impl.h): in-arcs of v are sources[offsets[v] .. offsets[v+1]).
 * The plugin copies them to the device, iterates like the CPU Jacobi method (dangling
 * mass spread like the teleport vector; EM_PAGERANK_GAPBS lets it leak) and writes the
 * scores back to the host. Gauss-Seidel runs as Jacobi on the GPU (said in the stats). */
typedef struct em_cuda_pagerank_job {
  int device;
  int64_t n, m;
  const int64_t *offsets; /* [n + 1] */
  const uint32_t *sources; /* [m] */
  const uint32_t *out_degree; /* [n] */
  const float *teleport; /* [n] summing to 1, internal order; NULL: uniform */
  double damping, tol;
  int max_iter, method; /* em_pagerank_method */
  float *scores; /* out: [n] host, internal order */
  double *residuals; /* out: [max_iter] host, or NULL */
  em_pagerank_stats *stats; /* out: iterations, converged, residual, seconds, ... */
} em_cuda_pagerank_job;

/* One rank's share of PageRank over a partitioned graph (runtime/graph/pagerank_dist_cuda.c
 * drives it). The rank's own vertices are numbered in sweep order 0 .. nl-1; every
 * contribution it reads, its own and its mirrors' (copies of other ranks' vertices), has a
 * place in one array of nslots floats. The host arrays are copied to the device at open
 * and may be freed after. Between two sweeps libember moves send_buf to the other ranks'
 * recv_buf (all_to_all_v through the group's CUDA backend, NCCL) and sums `sums` over the
 * ranks (all_reduce); the device buffers it passes are its own tensors'. Everything is
 * queued on the device's current stream, the stream the collectives wait for. */
typedef struct em_cuda_part_pagerank_job {
  int device;
  int64_t n; /* vertices in the whole graph */
  int64_t nl, nslots, ml; /* own vertices, places, in-arcs of the own vertices */
  const int64_t *offsets; /* [nl + 1] the in-arcs of own vertex i: sources[offsets[i] ..] */
  const uint32_t *sources; /* [ml] places */
  const uint32_t *own; /* [nl] the place of own vertex i */
  const float *inv; /* [nl] 1 / out-degree, 0 for a dangling vertex */
  int64_t nsend, nmirror;
  const uint32_t *send; /* [nsend] the places whose values fill send_buf, in its order */
  const uint32_t *mirror; /* [nmirror] the places recv_buf's values go to, in its order */
  float *send_buf, *recv_buf; /* device [nsend], [nmirror] */
  int64_t *sums; /* device [3]: the sweep's exact sums (graph_impl.h's gr_fix units) of the
                  * scores, the L1 change and the dangling mass */
  double damping;
} em_cuda_part_pagerank_job;

/* The steps of such a run (EM_CUDA_EXTRA_PART_PAGERANK). open: uploads, sets every score
 * to 1/n, packs send_buf with the first contributions. sweep: one Jacobi sweep (scale: the
 * previous scores' normalisation, coef: the teleport coefficient, as pagerank_dist.c's),
 * then sums and send_buf. receive: recv_buf into the mirrors' places; the sweep's output
 * becomes the next sweep's input (call it after open's exchange too). scores: the current
 * scores times scale, to the host [nl] in sweep order (waits for the device). */
typedef struct em_cuda_part_pagerank_ops {
  em_status (*open)(const em_cuda_part_pagerank_job *job, void **run);
  em_status (*sweep)(void *run, double scale, double coef);
  em_status (*receive)(void *run);
  em_status (*scores)(void *run, double scale, float *out);
  void (*close)(void *run); /* waits for the device, frees the run */
} em_cuda_part_pagerank_ops;

struct em_dist_backend;

/* What extras are returned as; cast to the extra's own type (EM_CUDA_EXTRA_* below). */
typedef void (*em_cuda_proc)(void);

typedef struct em_cuda_plugin {
  em_plugin_abi abi; /* first: EM_CUDA_PLUGIN_ABI as the plugin was built */
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
  void *(*host_alloc_pinned)(size_t nbytes); /* NULL with the error set */
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
  /* the extra called name (EM_CUDA_EXTRA_*), or NULL when this plugin was built without it */
  em_cuda_proc (*get_proc)(const char *name);
} em_cuda_plugin;

/* ---- extras */
/* PageRank over a host CSR (runtime/graph/pagerank_cuda.c prepares the job). */
#define EM_CUDA_EXTRA_PAGERANK "pagerank"
typedef em_status (*em_cuda_pagerank_fn)(em_cuda_pagerank_job *job);
/* The NCCL process-group backend for CUDA tensors (runtime/distributed/dist_impl.h); absent
 * when the plugin was built without NCCL. */
#define EM_CUDA_EXTRA_NCCL "nccl_backend"
typedef const struct em_dist_backend *(*em_cuda_nccl_backend_fn)(void);
/* One rank's share of a partitioned PageRank (em_cuda_part_pagerank_job above). */
#define EM_CUDA_EXTRA_PART_PAGERANK "part_pagerank"
typedef const em_cuda_part_pagerank_ops *(*em_cuda_part_pagerank_fn)(void);

/* What the plugin and libember must agree on (core/plugin_abi.h): the tensor backend, the
 * structs of the core and the extras, and the process-group structs NCCL shares (expanded
 * where runtime/distributed/dist_impl.h is included too). */
#define EM_CUDA_PLUGIN_ABI(X)                                                                            \
  EM_BACKEND_ABI(X)                                                                                      \
  EM_DIST_ABI(X) X(EM_CUDA_PLUGIN_API_VERSION) X(sizeof(em_cuda_plugin)) X(sizeof(em_cuda_device_props)) \
      X(sizeof(em_cuda_memory_stats)) X(sizeof(em_cuda_versions)) X(sizeof(em_cuda_pagerank_job))        \
          X(sizeof(em_pagerank_stats)) X(sizeof(em_cuda_part_pagerank_job))                             \
              X(sizeof(em_cuda_part_pagerank_ops))

typedef const em_cuda_plugin *(*em_cuda_plugin_entry_fn)(void);

/* libember side: the loaded plugin, or NULL (with the reason in *why) */
const em_cuda_plugin *cuda_plugin_get(const char **why);
/* libember side: the plugin's extra called name (EM_CUDA_EXTRA_*), or NULL with an error
 * (EM_ERR_UNSUPPORTED) that names op, the extra and why it is absent: no plugin, or a
 * plugin built without it. */
em_cuda_proc cuda_plugin_extra(const char *op, const char *name);

#ifdef __cplusplus
}
#endif
#endif
