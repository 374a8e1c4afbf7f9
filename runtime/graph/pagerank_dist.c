/* pagerank_dist.c - PageRank over a partitioned graph (partition.c), pull-based, Jacobi.
 *
 * Each rank keeps scores x and contributions c(u) = x(u) / outdeg(u) for its own vertices,
 * and contributions of its mirrors after them in the same array, so the in-arc lists
 * (local slots) index one array. An iteration:
 *   1. sweep the own vertices as pagerank.c's sweep_jacobi does, term for term: the same
 *      gather (in ascending global source id), the same float and double roundings, the
 *      same exact (fixed-point) sums of scores, residual and dangling mass;
 *   2. exchange: pack the new contributions the other ranks mirror (the plan), one
 *      all_to_all_v of float32 straight into the mirror part of the new contribution
 *      array, and one all_reduce of the three int64 sums.
 * The integer sums make every global reduction exact, so the scores are the same bits
 * whatever the rank and thread counts.
 *
 * Weighted graphs (pagerank.c's sweep_weighted, term for term): the owners' out-weights
 * W(u) (partition.c sums them as pagerank.c does) reach the mirrors once, by the plan;
 * each arc's share nw = (float)(w / W(u)) is then the same float as pagerank.c's, the
 * contributions are x(u) itself (0 when W(u) = 0: dangling), and each vertex sums
 * x(u) * nw in double, arc by arc in the same order. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "ember/dist.h"
#include "graph_impl.h"

#define BLOCK 4096 /* vertices per unit of parallel work */

typedef struct dist_run {
  const em_graph_part *p;
  double damping;
  bool gapbs;
  float *x, *y, *contrib, *next, *inv, *sendbuf;
  float *nw; /* [ml] weighted: each arc's share of its source's score; NULL: unweighted */
  double compute, exchange;
} dist_run;

/* Sweeps own vertices [b, e) (see sweep_jacobi in pagerank.c); adds to sums[3]. */
static void sweep(dist_run *r, int64_t b, int64_t e, double coef, double scale, int64_t *sums) {
  const em_graph_part *p = r->p;
  const int64_t *restrict off = p->offsets;
  const uint32_t *restrict src = p->sources;
  const float *restrict x = r->x, *restrict inv = r->inv, *restrict contrib = r->contrib;
  float *restrict y = r->y, *restrict next = r->next;
  const double d = r->damping * scale, t = coef / (double)p->n;
  int64_t s[3] = {0, 0, 0}; /* scores, residual, dangling mass */
  const float *restrict nw = r->nw;
  for (int64_t v = b; v < e; v++) {
    double in = 0;
    if (nw)
      for (int64_t j = off[v]; j < off[v + 1]; j++) in += (double)contrib[src[j]] * (double)nw[j];
    else in = gr_pr_gather(contrib, src + off[v], off[v + 1] - off[v]);
    gr_pr_update(y, next, x, inv, v, d, in, t, scale, s);
  }
  sums[0] += s[0];
  sums[1] += s[1];
  sums[2] += s[2];
}

/* The mirrors' values of buf (the own part filled) from their owners. */
static em_status exchange(dist_run *r, float *buf) {
  const em_graph_part *p = r->p;
  for (int64_t j = 0; j < p->nsend; j++) r->sendbuf[j] = buf[p->send[j]];
  return gr_alltoallv(p->group, buf + p->nl, p->recv_count, r->sendbuf, p->send_count, EM_FLOAT32);
}

/* Weighted: W of the mirrors from their owners, then each arc's share nw = w / W(u) as
 * pagerank.c's arc_shares computes it, and inv = 1 where W > 0, else 0 (dangling). */
static em_status shares(dist_run *r) {
  const em_graph_part *p = r->p;
  int64_t nl = p->nl, slots = nl + p->nmirror;
  double *W = gr_alloc((size_t)(slots ? slots : 1) * sizeof *W), *sendw = gr_alloc((size_t)(p->nsend ? p->nsend : 1) * 8);
  r->nw = gr_alloc((size_t)(p->ml ? p->ml : 1) * sizeof *r->nw);
  em_status st = EM_OK;
  if (!W || !sendw || !r->nw) st = gr_oom("graph part pagerank", (size_t)slots * 8 + (size_t)p->ml * 4);
  if ((st = gr_agree(p->group, "graph part pagerank", st))) goto done; /* before the exchange */
  if (nl) memcpy(W, p->out_weight, (size_t)nl * sizeof *W);
  for (int64_t j = 0; j < p->nsend; j++) sendw[j] = W[p->send[j]];
  if ((st = gr_alltoallv(p->group, W + nl, p->recv_count, sendw, p->send_count, EM_FLOAT64))) goto done;
  for (int64_t j = 0; j < p->ml; j++) {
    double w = W[p->sources[j]];
    r->nw[j] = w > 0 ? (float)(p->weights[j] / w) : 0.0f;
  }
  for (int64_t v = 0; v < nl; v++) r->inv[v] = W[v] > 0 ? 1.0f : 0.0f;
done:
  gr_free(W);
  gr_free(sendw);
  return st;
}

static void swap(float **a, float **b) {
  float *t = *a;
  *a = *b;
  *b = t;
}

static int iterate(dist_run *r, const em_pagerank_options *o, double *residual, int *converged, double *scale_out,
                   em_status *st) {
  const em_graph_part *p = r->p;
  int threads = p->ml + p->nl < (1 << 18) ? 1 : gr_threads(), iters = 0;
  const float x0 = (float)(1.0 / (double)p->n);
  int64_t sinks = 0, nblocks = (p->nl + BLOCK - 1) / BLOCK;
  for (int64_t v = 0; v < p->nl; v++) {
    r->x[v] = x0;
    r->contrib[v] = x0 * r->inv[v];
    sinks += r->inv[v] == 0;
  }
  double t0 = em_clock_monotonic();
  *st = gr_allreduce(p->group, &sinks, 1, EM_INT64, EM_DIST_SUM);
  if (!*st) *st = exchange(r, r->contrib);
  r->exchange += em_clock_monotonic() - t0;
  if (*st) return 0;
  double dangling = gr_unfix(sinks * gr_fix(x0)), scale = 1;
  *converged = 0;
  while (iters < o->max_iter) {
    double coef = r->gapbs ? 1 - r->damping : (1 - r->damping) + r->damping * dangling;
    int64_t sums[3] = {0, 0, 0};
    double t1 = em_clock_monotonic();
#pragma omp parallel num_threads(threads)
    {
      int64_t mine[3] = {0, 0, 0};
#pragma omp for schedule(dynamic, 1)
      for (int64_t b = 0; b < nblocks; b++)
        sweep(r, b * BLOCK, (b + 1) * BLOCK < p->nl ? (b + 1) * BLOCK : p->nl, coef, scale, mine);
#pragma omp critical
      for (int k = 0; k < 3; k++) sums[k] += mine[k]; /* integers: any order gives the same */
    }
    double t2 = em_clock_monotonic();
    if ((*st = exchange(r, r->next)) || (*st = gr_allreduce(p->group, sums, 3, EM_INT64, EM_DIST_SUM))) return iters;
    r->compute += t2 - t1;
    r->exchange += em_clock_monotonic() - t2;
    double total = gr_unfix(sums[0]);
    scale = r->gapbs || !(total > 0) ? 1 : 1 / total;
    dangling = scale * gr_unfix(sums[2]);
    swap(&r->x, &r->y);
    swap(&r->contrib, &r->next);
    residual[iters++] = gr_unfix(sums[1]);
    if (residual[iters - 1] < o->tol) {
      *converged = 1;
      break;
    }
  }
  *scale_out = scale;
  return iters;
}

em_status em_graph_part_pagerank(em_tensor **scores, em_tensor **residuals, em_pagerank_stats *stats,
                                 em_pagerank_dist_stats *dstats, const em_graph_part *p,
                                 const em_pagerank_options *opts) {
  const char *op = "graph part pagerank";
  if (!scores || !p) return em_set_error(EM_ERR_ARGUMENT, "%s: scores or graph is NULL", op);
  em_pagerank_options defaults;
  if (!opts) em_pagerank_options_init(&defaults), opts = &defaults;
  /* the options are the same on every rank, so every rank refuses them alike */
  if (!(opts->damping >= 0 && opts->damping <= 1))
    return em_set_error(EM_ERR_ARGUMENT, "%s: damping is %g, expected a value in [0, 1]", op, opts->damping);
  if (!(opts->tol >= 0) || isinf(opts->tol))
    return em_set_error(EM_ERR_ARGUMENT, "%s: tol is %g, expected a finite value >= 0", op, opts->tol);
  if (opts->max_iter < 1) return em_set_error(EM_ERR_ARGUMENT, "%s: max_iter is %d, expected >= 1", op, opts->max_iter);
  if (opts->method != EM_PAGERANK_JACOBI && opts->method != EM_PAGERANK_GAPBS)
    return em_set_error(EM_ERR_ARGUMENT, "%s: method is %d, expected 0 (jacobi) or 2 (gapbs): Gauss-Seidel does not "
                        "partition", op, opts->method);
  if (opts->personalization)
    return em_set_error(EM_ERR_ARGUMENT, "%s: personalization is not supported on a partitioned graph", op);
  if (opts->device.type != EM_CPU)
    return em_set_error(EM_ERR_DEVICE, "%s: a partitioned graph ranks on the CPU, got device type %d", op,
                        opts->device.type);
  em_status wst = gr_check_weights(op, opts->weights, p->weights != NULL, "a cache");
  if (wst) return wst;
  bool weighted = p->weights && opts->weights != EM_PAGERANK_WEIGHTS_OFF;
  double t0 = em_clock_monotonic();
  int64_t nl = p->nl, slots = p->nl + p->nmirror;
  size_t fbytes = (size_t)(slots ? slots : 1) * sizeof(float);
  dist_run r = {.p = p, .damping = opts->damping, .gapbs = opts->method == EM_PAGERANK_GAPBS};
  double *residual = malloc((size_t)opts->max_iter * sizeof *residual);
  r.x = gr_alloc((size_t)(nl ? nl : 1) * sizeof(float));
  r.y = gr_alloc((size_t)(nl ? nl : 1) * sizeof(float));
  r.inv = gr_alloc((size_t)(nl ? nl : 1) * sizeof(float));
  r.contrib = gr_alloc(fbytes);
  r.next = gr_alloc(fbytes);
  r.sendbuf = gr_alloc((size_t)(p->nsend ? p->nsend : 1) * sizeof(float));
  em_status st = EM_OK;
  if (!residual || !r.x || !r.y || !r.inv || !r.contrib || !r.next || !r.sendbuf) st = gr_oom(op, fbytes * 2);
  if ((st = gr_agree(p->group, op, st))) goto done;
  if (weighted) st = shares(&r);
  else
    for (int64_t v = 0; v < nl; v++) r.inv[v] = p->out_degree[v] ? 1.0f / (float)p->out_degree[v] : 0.0f;
  if ((st = gr_agree(p->group, op, st))) goto done;
  double t1 = em_clock_monotonic();
  int converged = 0;
  double scale = 1;
  int iters = iterate(&r, opts, residual, &converged, &scale, &st);
  double t2 = em_clock_monotonic();
  if (st) goto done;
  if ((st = em_empty(scores, 1, &nl, EM_FLOAT32, (em_device){EM_CPU, 0}))) goto done;
  float *out = em_tensor_data(*scores);
  for (int64_t v = 0; v < nl; v++) out[v] = (float)(scale * r.x[v]);
  if (residuals) {
    int64_t ni = iters;
    if ((st = em_empty(residuals, 1, &ni, EM_FLOAT64, (em_device){EM_CPU, 0}))) {
      em_tensor_release(*scores);
      *scores = NULL;
      goto done;
    }
    memcpy(em_tensor_data(*residuals), residual, (size_t)iters * sizeof *residual);
  }
  if (stats) {
    memset(stats, 0, sizeof *stats);
    stats->iterations = iters;
    stats->converged = converged;
    stats->residual = residual[iters - 1];
    stats->seconds = t2 - t1;
    stats->setup_seconds = t1 - t0;
    stats->edges_per_second = t2 > t1 ? (double)p->m * iters / (t2 - t1) : 0;
    stats->method = opts->method;
    stats->engine = weighted ? "cpu:partitioned:weighted" : "cpu:partitioned";
    stats->weighted = weighted;
  }
  if (dstats) {
    dstats->compute_seconds = r.compute;
    dstats->exchange_seconds = r.exchange;
    dstats->bytes_sent = p->nsend * (int64_t)sizeof(float);
    dstats->bytes_received = p->nmirror * (int64_t)sizeof(float);
  }
done:
  free(residual);
  gr_free(r.x);
  gr_free(r.y);
  gr_free(r.inv);
  gr_free(r.contrib);
  gr_free(r.next);
  gr_free(r.sendbuf);
  gr_free(r.nw);
  return st;
}
