/* pagerank_dist_cuda.c - PageRank over a partitioned graph with each rank's sweeps on its
 * GPU (the CUDA plugin's EM_CUDA_EXTRA_PART_PAGERANK, runtime/plugins/cuda/pagerank_part.cu)
 * and the exchange between ranks through the group's CUDA backend: NCCL, on the GPU's
 * memory, with no copy through the host.
 *
 * An iteration, as pagerank_dist.c's on the CPU:
 *   1. sweep: the plugin queues the gather and update of the own vertices, the three exact
 *      sums and the pack of the values other ranks mirror (send buffer);
 *   2. all_to_all_v of the send buffers into the receive buffers (float32, exactly the
 *      mirrored values), then all_reduce of the three int64 sums, both on the device;
 *   3. the sums come to the host (24 bytes): the residual, the next normalisation and
 *      teleport coefficient, computed as on the CPU (gr_pr_close);
 *   4. receive: the plugin places the received values in the mirrors' places.
 * Both collectives wait for the work queued before them on the current stream (the
 * backend's ordering), and return once done on the GPU, so step 4 reads what arrived.
 * The sums are integers (fixed point), so the scores are the same bits at any rank count;
 * they differ from the CPU's in the last bits (the GPU gathers in another order). */
#include <stdlib.h>
#include <string.h>
#include "cuda/cuda_plugin.h"
#include "ember/cuda.h"
#include "ember/dist.h"
#include "graph_impl.h"

static const char *const op = "graph part pagerank";

typedef struct gpu_run {
  const em_cuda_part_pagerank_ops *ops;
  void *run;
  em_tensor *send, *recv, *sums, *host_sums;
} gpu_run;

static void release(gpu_run *g) {
  if (g->run) g->ops->close(g->run);
  em_tensor *ts[] = {g->send, g->recv, g->sums, g->host_sums};
  for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) em_tensor_release(ts[i]);
}

/* The device buffers of the exchange and the plugin's run (the graph copied to the GPU). */
static em_status open_run(gpu_run *g, const gr_part_layout *l, const em_pagerank_options *o) {
  const em_graph_part *p = l->p;
  em_device dev = o->device;
  int64_t three = 3;
  em_status st;
  if ((st = em_empty(&g->send, 1, &(int64_t){p->nsend}, EM_FLOAT32, dev)) ||
      (st = em_empty(&g->recv, 1, &(int64_t){p->nmirror}, EM_FLOAT32, dev)) ||
      (st = em_empty(&g->sums, 1, &three, EM_INT64, dev)) ||
      (st = em_empty(&g->host_sums, 1, &three, EM_INT64, (em_device){EM_CPU, 0})))
    return st;
  em_cuda_part_pagerank_job job = {.device = dev.index,
                                   .n = p->n,
                                   .nl = p->nl,
                                   .nslots = p->nl + p->nmirror,
                                   .ml = p->ml,
                                   .offsets = l->off,
                                   .sources = l->src,
                                   .own = l->own,
                                   .inv = l->inv,
                                   .nsend = p->nsend,
                                   .nmirror = p->nmirror,
                                   .send = l->send,
                                   .mirror = l->mirror,
                                   .send_buf = em_tensor_data(g->send),
                                   .recv_buf = em_tensor_data(g->recv),
                                   .sums = em_tensor_data(g->sums),
                                   .damping = o->damping};
  return g->ops->open(&job, &g->run);
}

/* Step 2 and the sums on the host. */
static em_status exchange(gpu_run *g, const em_graph_part *p, int64_t sums[3]) {
  em_status st = em_dist_all_to_all_v(p->group, g->recv, p->recv_count, g->send, p->send_count, NULL);
  if (!st && sums) {
    if (!(st = em_dist_all_reduce(p->group, g->sums, EM_DIST_SUM, NULL)) && !(st = em_copy_(g->host_sums, g->sums)))
      memcpy(sums, em_tensor_data(g->host_sums), 3 * sizeof *sums);
  }
  return st ? st : g->ops->receive(g->run);
}

em_status gr_part_pagerank_cuda(const gr_part_layout *l, const em_pagerank_options *o, gr_part_result *out) {
  const em_graph_part *p = l->p;
  const bool gapbs = o->method == EM_PAGERANK_GAPBS;
  gpu_run g = {0};
  em_cuda_part_pagerank_fn get = (em_cuda_part_pagerank_fn)gr_cuda_extra(op, o->device, EM_CUDA_EXTRA_PART_PAGERANK);
  em_status st = get ? EM_OK : em_last_status();
  if (!st) g.ops = get();
  double t0 = em_clock_monotonic();
  /* a rank without the GPU fails on every rank, before any CUDA collective could wait for it */
  if (!st) st = open_run(&g, l, o);
  if (!st) st = em_cuda_synchronize(o->device.index);
  if ((st = gr_agree(p->group, op, st))) goto done;
  double scale = 1, coef;
  out->setup = em_clock_monotonic() - t0;
  t0 = em_clock_monotonic();
  if ((st = gr_part_first_coef(p, l->inv, gapbs, o->damping, &coef)) || (st = exchange(&g, p, NULL))) goto done;
  out->exchange += em_clock_monotonic() - t0;
  out->iterations = out->converged = 0;
  while (out->iterations < o->max_iter) {
    int64_t sums[3];
    double t1 = em_clock_monotonic();
    /* waiting for the sweep (a few microseconds) keeps the compute/exchange split true */
    if ((st = g.ops->sweep(g.run, scale, coef)) || (st = em_cuda_synchronize(o->device.index))) goto done;
    double t2 = em_clock_monotonic();
    if ((st = exchange(&g, p, sums))) goto done;
    out->compute += t2 - t1;
    out->exchange += em_clock_monotonic() - t2;
    double res = gr_pr_close(sums, gapbs, o->damping, &scale, &coef);
    out->residual[out->iterations++] = res;
    if (res < o->tol) {
      out->converged = 1;
      break;
    }
  }
  st = g.ops->scores(g.run, scale, out->x);
  out->engine = "cuda:partitioned";
done:
  release(&g);
  return st;
}
