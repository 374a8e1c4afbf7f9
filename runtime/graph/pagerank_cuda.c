/* pagerank_cuda.c - PageRank on a GPU: prepares the CUDA plugin's job from the graph
 * (runtime/cuda/cuda_plugin.h, em_cuda_pagerank_job) and turns its answer into the same
 * tensors and stats as the CPU path of pagerank.c.
 *
 * The plugin gets the CSR as the graph holds it (internal order), the out-degrees and the
 * teleport vector mapped to internal order; it returns the scores in internal order, which
 * are put back in dense order here exactly as the CPU path does. Everything the plugin
 * cannot do (no plugin, no GPU, a plugin without PageRank) is an error naming the device. */
#include <stdlib.h>
#include <string.h>
#include "cuda/cuda_plugin.h"
#include "graph_impl.h"
#include "tensor/tensor_impl.h"

static const char *const op = "graph pagerank";

em_cuda_proc gr_cuda_extra(const char *op, em_device device, const char *name) {
  const char *why = NULL;
  const em_cuda_plugin *p = cuda_plugin_get(&why);
  int count = p ? p->device_count(&why) : 0;
  if (count <= 0) {
    em_set_error(EM_ERR_DEVICE, "%s: device cuda:%d is not available: %s", op, device.index,
                 why && *why ? why : "no CUDA device found");
    return NULL;
  }
  if (device.index >= count) {
    em_set_error(EM_ERR_DEVICE, "%s: device cuda:%d does not exist (%d CUDA devices)", op, device.index, count);
    return NULL;
  }
  return cuda_plugin_extra(op, name);
}

/* The teleport vector as the plugin takes it: float32, internal order, summing to 1. */
static em_status teleport_f32(const em_graph *g, const em_tensor *personalization, float **out) {
  *out = NULL;
  if (!personalization) return EM_OK;
  double *t;
  em_status st = gr_pagerank_teleport(g, personalization, &t);
  if (st) return st;
  float *f = gr_alloc((size_t)g->n * sizeof *f);
  if (!f) {
    gr_free(t);
    return gr_oom(op, (size_t)g->n * sizeof *f);
  }
  for (int64_t v = 0; v < g->n; v++) f[v] = (float)t[v];
  gr_free(t);
  *out = f;
  return EM_OK;
}

em_status gr_pagerank_cuda(em_tensor **scores, em_tensor **residuals, em_pagerank_stats *stats, const em_graph *g,
                           const em_pagerank_options *opts) {
  em_cuda_pagerank_fn pagerank = (em_cuda_pagerank_fn)gr_cuda_extra(op, opts->device, EM_CUDA_EXTRA_PAGERANK);
  if (!pagerank) return em_last_status();
  int64_t n = g->n;
  em_pagerank_stats local;
  memset(&local, 0, sizeof local);
  float *tele = NULL, *internal = gr_alloc((size_t)n * sizeof *internal);
  double *residual = malloc((size_t)opts->max_iter * sizeof *residual);
  em_status st = EM_OK;
  if (!internal || !residual) {
    st = gr_oom(op, (size_t)n * sizeof *internal + (size_t)opts->max_iter * sizeof *residual);
    goto done;
  }
  if ((st = teleport_f32(g, opts->personalization, &tele))) goto done;
  em_cuda_pagerank_job job = {.device = opts->device.index,
                              .n = n,
                              .m = g->m,
                              .offsets = g->offsets,
                              .sources = g->sources,
                              .out_degree = g->out_degree,
                              .teleport = tele,
                              .damping = opts->damping,
                              .tol = opts->tol,
                              .max_iter = opts->max_iter,
                              .method = opts->method,
                              .scores = internal,
                              .residuals = residual,
                              .stats = &local};
  if ((st = pagerank(&job))) goto done;
  if (!local.engine) local.engine = "cuda";

  if ((st = gr_pagerank_deliver(op, g, internal, 1.0, residual, local.iterations, scores, residuals))) goto done;
  if (stats) *stats = local;
done:
  gr_free(internal);
  gr_free(tele);
  free(residual);
  return st;
}
