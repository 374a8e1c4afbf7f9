/* pagerank.c - PageRank on the CPU, pull-based over the in-edge CSR.
 *
 * x(v) = d * sum_{u -> v} x(u) / outdeg(u) + ((1 - d) + d * dangling) * p(v)
 * where dangling is the score held by vertices without out-arcs and p the teleport
 * (personalisation) vector, uniform by default: the igraph / networkx definition, whose
 * scores sum to 1. The GAP benchmark's variant drops the dangling term (that mass leaks).
 *
 * Scores are float32; the per-vertex sums, the residual, the total and the dangling mass
 * accumulate in double. A Jacobi iteration is one pass over the vertices: the new score
 * from the in-neighbours' contributions c(u) = x(u) / outdeg(u) (precomputed: a multiply
 * per vertex instead of a divide per arc), its residual against the old score, and its
 * contribution for the next iteration (into a second buffer). The new scores are
 * normalised by the next pass, which scales what it gathers, rather than by a pass of
 * their own: the sum is 1 up to rounding, and the scale only stops rounding drift.
 * Work is cut into fixed vertex blocks of about equal arcs; Jacobi's reductions (scores,
 * residual, dangling mass) are exact fixed-point sums (gr_fix), so its results are the
 * same bits whatever the thread count, and whatever the rank count in pagerank_dist.c. Gauss-Seidel updates x and c in place (reading neighbours' fresh values,
 * possibly from another thread: chaotic relaxation, fewer iterations, not
 * bit-reproducible), then normalises in a second pass.
 *
 * With opts->device a CUDA device, the same iteration runs in the CUDA plugin
 * (pagerank_cuda.c prepares its job; runtime/plugins/cuda/pagerank.cu).
 *
 * Weighted graphs (opts->weights): u's share of its score goes to v in proportion to
 * w(u,v) / W(u), W(u) the sum of u's out-arc weights (in double, arc by arc in CSR order,
 * so the same on every run). Each arc's share nw = w / W is computed once; the sweep then
 * gathers x(u) * nw(u,v) (a product of two floats, exact in double) instead of c(u), and a
 * vertex with W(u) = 0 is dangling. The weighted sweeps are separate functions, chosen
 * once per pass, so that the unweighted kernels are untouched; they run as the plain pull
 * (prefetching when large), never tiled, binned or on a GPU (engine "cpu:weighted").
 *
 * Speed (Kronecker scale 22, see bench/graph): the graph's internal order by out-degree
 * keeps the most-read contributions together in cache; arcs from the remaining sources
 * are cache-blocked (pr_tiles.c) or propagation-blocked (pr_bins.c), see choose_blocking;
 * large arrays ask for 2 MiB pages (graph.c), which the random reads of contributions
 * need more than anything else. */
#include <math.h>
#include <unistd.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "graph_impl.h"
#include "tensor/tensor_impl.h"

#define PR_PARALLEL_WORK (1 << 18) /* arcs + vertices below which one thread iterates */

int gr_pr_prefetch = 0;

typedef struct pr_run {
  const em_graph *g;
  int method;
  double damping;
  float *x, *y, *contrib, *next, *inv_deg; /* next: Jacobi's second contribution buffer */
  double *tele; /* [n] internal order, sums to 1; NULL: uniform */
  int64_t nblocks;
  int64_t *block; /* [nblocks + 1] vertex boundaries */
  double *bsum, *bres, *bdang; /* per block (Gauss-Seidel) */
  int64_t *fsum, *fres, *fdang; /* per block, exact (Jacobi, GAPBS: see gr_fix) */
  gr_tiles tiles; /* cold arcs, cache-blocked (Jacobi and GAPBS; see pr_tiles.c) */
  float *acc; /* [n] each vertex's cold sum, when tiled */
  gr_bins bins; /* cold arcs, propagation-blocked (Jacobi and GAPBS; see pr_bins.c) */
  int64_t *cursors; /* [threads * bins.nbins] scatter scratch */
  bool prefetch; /* untiled, and the contributions outgrow L2: prefetch them */
  float *nw; /* [m] weighted: each arc's share w(u,v) / W(u) of its source's score; NULL: unweighted */
} pr_run;

int gr_bins_hot = 0;

em_status gr_check_weights(const char *op, int weights, bool weighted, const char *saved) {
  if (weights < EM_PAGERANK_WEIGHTS_AUTO || weights > EM_PAGERANK_WEIGHTS_OFF)
    return em_set_error(EM_ERR_ARGUMENT, "%s: weights is %d, expected 0 (auto), 1 (on) or 2 (off)", op, weights);
  if (weights == EM_PAGERANK_WEIGHTS_ON && !weighted)
    return em_set_error(EM_ERR_ARGUMENT,
                        "%s: weights = on, but the graph has no edge weights (expected a Matrix Market real or "
                        "integer file, a SNAP file with a third column, or %s saved from one)",
                        op, saved);
  return EM_OK;
}

/* AUTO: plain pull for small graphs; propagation blocking once the contributions
 * outgrow the last-level cache, where each cold read is a trip to memory (and only when
 * the bins' 8 bytes per cold arc fit in half the free memory); below that, where cold
 * reads hit L3, the tiles (which decide for themselves whether they pay, else a
 * prefetching pull). Measured (bench/graph/run_scaling.py, pagerank_bench --blocking) on
 * a heavily loaded 2-core VM with a large L3 (480 MiB reported; load average 4-16, so
 * +-50% run to run): at Kronecker scale 22 one run gave tiles 2.3x and bins 3.1x the
 * plain pull, interleaved runs put all three within noise of each other, and at scale 24
 * the plain pull led; so on such a machine AUTO keeps the pull forms. */
static int choose_blocking(const em_graph *g, const em_pagerank_options *o) {
  if (o->blocking != EM_PAGERANK_BLOCKING_AUTO) return o->blocking;
  if (g->m + g->n < PR_PARALLEL_WORK) return EM_PAGERANK_BLOCKING_NONE;
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  double llc = l3 > 0 ? (double)l3 : 32.0 * (1 << 20), free_bytes = pages > 0 && page > 0 ? (double)pages * page : 0;
  if ((double)g->n * sizeof(float) > llc && (double)g->m * 8 + (double)g->n * 8 < free_bytes / 2)
    return EM_PAGERANK_BLOCKING_BINS;
  return EM_PAGERANK_BLOCKING_AUTO;
}

static em_status check_options(const em_graph *g, const em_pagerank_options *o) {
  const char *op = "graph pagerank";
  if (!(o->damping >= 0 && o->damping <= 1))
    return em_set_error(EM_ERR_ARGUMENT, "%s: damping is %g, expected a value in [0, 1]", op, o->damping);
  if (!(o->tol >= 0) || isinf(o->tol))
    return em_set_error(EM_ERR_ARGUMENT, "%s: tol is %g, expected a finite value >= 0", op, o->tol);
  if (o->max_iter < 1) return em_set_error(EM_ERR_ARGUMENT, "%s: max_iter is %d, expected >= 1", op, o->max_iter);
  if (o->method < EM_PAGERANK_JACOBI || o->method > EM_PAGERANK_GAPBS)
    return em_set_error(EM_ERR_ARGUMENT, "%s: method is %d, expected 0 (jacobi), 1 (gauss-seidel) or 2 (gapbs)", op,
                        o->method);
  if (o->blocking < EM_PAGERANK_BLOCKING_AUTO || o->blocking > EM_PAGERANK_BLOCKING_BINS)
    return em_set_error(EM_ERR_ARGUMENT, "%s: blocking is %d, expected 0 (auto), 1 (none), 2 (tiles) or 3 (bins)", op,
                        o->blocking);
  em_status st = gr_check_weights(op, o->weights, g->weights != NULL, "an ember file");
  if (st) return st;
  if (g->n == 0) return em_set_error(EM_ERR_ARGUMENT, "%s: the graph has no vertices", op);
  if ((o->device.type != EM_CPU && o->device.type != EM_CUDA) || o->device.index < 0)
    return em_set_error(EM_ERR_DEVICE, "%s: device type %d index %d, expected cpu or cuda:N", op, o->device.type,
                        o->device.index);
  return EM_OK;
}

/* Teleport vector in internal order, normalised; checks its values. */
static em_status teleport(pr_run *r, const em_tensor *p) { return gr_pagerank_teleport(r->g, p, &r->tele); }

em_status gr_pagerank_teleport(const em_graph *g, const em_tensor *p, double **out) {
  const char *op = "graph pagerank";
  double *v;
  em_status st = gr_tensor_values("graph pagerank: personalization", p, g->n, &v);
  if (st) return st;
  double sum = 0;
  for (int64_t i = 0; i < g->n; i++) {
    if (!(v[i] >= 0) || isinf(v[i])) {
      st = em_set_error(EM_ERR_ARGUMENT, "%s: personalization[%lld] is %g, expected finite values >= 0", op,
                        (long long)i, v[i]);
      gr_free(v);
      return st;
    }
    sum += v[i];
  }
  if (!(sum > 0)) {
    gr_free(v);
    return em_set_error(EM_ERR_ARGUMENT, "%s: the personalization vector sums to 0, expected a positive sum", op);
  }
  double *tele = gr_alloc((size_t)g->n * sizeof *tele);
  if (!tele) {
    gr_free(v);
    return gr_oom(op, (size_t)g->n * 8);
  }
  for (int64_t i = 0; i < g->n; i++) tele[gr_internal(g, i)] = v[i] / sum;
  *out = tele;
  gr_free(v);
  return EM_OK;
}

/* Vertex blocks of about equal work (arcs + vertices), fixed by the graph alone. */
static em_status make_blocks(pr_run *r) {
  const em_graph *g = r->g;
  int64_t work = g->m + g->n, target = work / 2048 > 4096 ? work / 2048 : 4096;
  int64_t cap = work / target + 2;
  r->block = malloc((size_t)(cap + 1) * sizeof *r->block);
  r->bsum = malloc((size_t)cap * sizeof(double));
  r->bres = malloc((size_t)cap * sizeof(double));
  r->bdang = malloc((size_t)cap * sizeof(double));
  r->fsum = malloc((size_t)cap * sizeof(int64_t));
  r->fres = malloc((size_t)cap * sizeof(int64_t));
  r->fdang = malloc((size_t)cap * sizeof(int64_t));
  if (!r->block || !r->bsum || !r->bres || !r->bdang || !r->fsum || !r->fres || !r->fdang)
    return gr_oom("graph pagerank", (size_t)cap * 56);
  int64_t k = 0, acc = 0;
  r->block[0] = 0;
  for (int64_t v = 0; v < g->n; v++) {
    acc += g->offsets[v + 1] - g->offsets[v] + 1;
    if (acc >= target && k + 1 < cap) {
      r->block[++k] = v + 1;
      acc = 0;
    }
  }
  if (r->block[k] != g->n) r->block[++k] = g->n;
  r->nblocks = k;
  return EM_OK;
}

#define gather gr_pr_gather

/* The same sum for graphs whose contributions outgrow the caches (and are not tiled):
 * each read of a contribution is a trip to memory, so the reads PREFETCH arcs ahead (in
 * the flat sources array, across vertices) are requested early. */
#define PREFETCH 128
static inline __attribute__((always_inline)) double gather_prefetch(const float *restrict contrib,
                                                                    const uint32_t *restrict sources, int64_t begin,
                                                                    int64_t end, int64_t m) {
  double s = 0;
  for (int64_t j = begin; j < end; j++) {
    __builtin_prefetch(contrib + sources[j + PREFETCH < m ? j + PREFETCH : m - 1]);
    s += contrib[sources[j]];
  }
  return s;
}

/* Jacobi and GAPBS, one pass over block b: the new score from the in-neighbours'
 * contributions (scaled by `scale`, the normalisation of the previous iteration, applied
 * here rather than in a pass of its own), its residual against the old normalised score,
 * and its contribution for the next iteration (into the other buffer). */
static void sweep_jacobi(pr_run *r, int64_t b, double coef, double scale) {
  const em_graph *g = r->g;
  const int64_t *restrict off = g->offsets;
  const uint32_t *restrict src = g->sources;
  const float *restrict x = r->x, *restrict inv = r->inv_deg, *restrict contrib = r->contrib;
  float *restrict y = r->y, *restrict next = r->next;
  const float *restrict acc = r->acc;
  const uint32_t *restrict hot = r->tiles.hot_len, *restrict bhot = r->bins.hot_len;
  const double *restrict bacc = r->bins.acc;
  const double *restrict tele = r->tele;
  const double d = r->damping * scale, uniform = coef / (double)g->n;
  int64_t s[3] = {0, 0, 0}; /* scores, residual, dangling mass */
  for (int64_t v = r->block[b]; v < r->block[b + 1]; v++) {
    double t = tele ? coef * tele[v] : uniform;
    double in = bhot          ? bacc[v] + gather(contrib, src + off[v], bhot[v])
                : hot         ? acc[v] + gather(contrib, src + off[v], hot[v])
                : r->prefetch ? gather_prefetch(contrib, src, off[v], off[v + 1], g->m)
                              : gather(contrib, src + off[v], off[v + 1] - off[v]);
    gr_pr_update(y, next, x, inv, v, v, d, in, t, scale, s);
  }
  r->fsum[b] = s[0];
  r->fres[b] = s[1];
  r->fdang[b] = s[2];
}

/* Weighted: the sum of x(u) * nw over the arcs [begin, end) (contrib holds x(u), or 0 for
 * a dangling u). The prefetching form is gather_prefetch's. */
static inline __attribute__((always_inline)) double gather_w(const float *restrict contrib,
                                                             const uint32_t *restrict sources,
                                                             const float *restrict nw, int64_t begin, int64_t end,
                                                             int64_t m, bool prefetch) {
  double s = 0;
  if (prefetch) {
    for (int64_t j = begin; j < end; j++) {
      __builtin_prefetch(contrib + sources[j + PREFETCH < m ? j + PREFETCH : m - 1]);
      s += (double)contrib[sources[j]] * (double)nw[j];
    }
  } else {
    for (int64_t j = begin; j < end; j++) s += (double)contrib[sources[j]] * (double)nw[j];
  }
  return s;
}

/* sweep_jacobi for weighted graphs: the plain pull, arcs weighted by nw. */
static void sweep_weighted(pr_run *r, int64_t b, double coef, double scale) {
  const em_graph *g = r->g;
  const int64_t *restrict off = g->offsets;
  const float *restrict x = r->x, *restrict inv = r->inv_deg, *restrict contrib = r->contrib;
  float *restrict y = r->y, *restrict next = r->next;
  const double *restrict tele = r->tele;
  const double d = r->damping * scale, uniform = coef / (double)g->n;
  int64_t s[3] = {0, 0, 0}; /* scores, residual, dangling mass */
  for (int64_t v = r->block[b]; v < r->block[b + 1]; v++) {
    double t = tele ? coef * tele[v] : uniform;
    double in = gather_w(contrib, g->sources, r->nw, off[v], off[v + 1], g->m, r->prefetch);
    gr_pr_update(y, next, x, inv, v, v, d, in, t, scale, s);
  }
  r->fsum[b] = s[0];
  r->fres[b] = s[1];
  r->fdang[b] = s[2];
}

/* Gauss-Seidel, pass 1 over block b, weighted (as sweep_gauss_seidel). */
static void sweep_gauss_seidel_w(pr_run *r, int64_t b, double coef) {
  const em_graph *g = r->g;
  float *x = r->x, *y = r->y, *contrib = r->contrib;
  const float *inv = r->inv_deg;
  const double d = r->damping, uniform = coef / (double)g->n;
  double sum = 0;
  for (int64_t v = r->block[b]; v < r->block[b + 1]; v++) {
    double t = r->tele ? coef * r->tele[v] : uniform;
    float nv = (float)(d * gather_w(contrib, g->sources, r->nw, g->offsets[v], g->offsets[v + 1], g->m, false) + t);
    sum += nv;
    y[v] = x[v];
    x[v] = nv;
    contrib[v] = nv * inv[v];
  }
  r->bsum[b] = sum;
}

/* Gauss-Seidel, pass 1 over block b: in place, the old value kept in y. */
static void sweep_gauss_seidel(pr_run *r, int64_t b, double coef) {
  const em_graph *g = r->g;
  const int64_t *restrict off = g->offsets;
  const uint32_t *restrict src = g->sources;
  float *x = r->x, *y = r->y, *contrib = r->contrib;
  const float *inv = r->inv_deg;
  const double d = r->damping, uniform = coef / (double)g->n;
  double sum = 0;
  for (int64_t v = r->block[b]; v < r->block[b + 1]; v++) {
    double t = r->tele ? coef * r->tele[v] : uniform;
    float nv = (float)(d * gather(contrib, src + off[v], off[v + 1] - off[v]) + t);
    sum += nv;
    y[v] = x[v];
    x[v] = nv;
    contrib[v] = nv * inv[v];
  }
  r->bsum[b] = sum;
}

/* Gauss-Seidel, pass 2 over block b: normalise x, residual against y, contributions. */
static void normalise_gauss_seidel(pr_run *r, int64_t b, double scale) {
  float *restrict x = r->x, *restrict contrib = r->contrib;
  const float *restrict y = r->y, *restrict inv = r->inv_deg;
  const float s = (float)scale;
  double res = 0, dang = 0;
  for (int64_t v = r->block[b]; v < r->block[b + 1]; v++) {
    float nv = x[v] * s;
    x[v] = nv;
    res += fabs((double)nv - (double)y[v]);
    contrib[v] = nv * inv[v];
    dang += inv[v] == 0 ? nv : 0;
  }
  r->bres[b] = res;
  r->bdang[b] = dang;
}

static double sum_blocks(const double *a, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += a[i];
  return s;
}

static double sum_fixed(const int64_t *a, int64_t n) {
  int64_t s = 0;
  for (int64_t i = 0; i < n; i++) s += a[i];
  return gr_unfix(s);
}

static void swap(float **a, float **b) {
  float *t = *a;
  *a = *b;
  *b = t;
}

/* Runs the iterations; residual[i] gets each one's L1 change. Returns the count. On
 * return r->x holds the scores, to be multiplied by *scale. */
static int iterate(pr_run *r, const em_pagerank_options *o, double *residual, int *converged, double *scale_out) {
  const em_graph *g = r->g;
  /* small graphs: waking threads each pass costs more than the pass */
  int threads = g->m + g->n < PR_PARALLEL_WORK ? 1 : gr_threads(), iters = 0;
  bool gapbs = r->method == EM_PAGERANK_GAPBS, gs = r->method == EM_PAGERANK_GAUSS_SEIDEL;
  const float x0 = (float)(1.0 / (double)g->n);
  double scale = 1;
  int64_t sinks = 0;
#pragma omp parallel for schedule(static) reduction(+ : sinks) num_threads(threads)
  for (int64_t v = 0; v < g->n; v++) {
    r->x[v] = x0;
    r->contrib[v] = x0 * r->inv_deg[v];
    sinks += r->inv_deg[v] == 0;
  }
  double dangling = gr_unfix(sinks * gr_fix(x0)); /* as the exact sums of the sweeps */
  *converged = 0;
  while (iters < o->max_iter) {
    /* dangling is the normalised dangling mass of the current scores */
    double coef = gapbs ? 1 - r->damping : (1 - r->damping) + r->damping * dangling;
    if (gs) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
      for (int64_t b = 0; b < r->nblocks; b++) {
        if (r->nw) sweep_gauss_seidel_w(r, b, coef);
        else sweep_gauss_seidel(r, b, coef);
      }
      double total = sum_blocks(r->bsum, r->nblocks);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
      for (int64_t b = 0; b < r->nblocks; b++) normalise_gauss_seidel(r, b, total > 0 ? 1 / total : 1);
      dangling = sum_blocks(r->bdang, r->nblocks);
    } else {
      if (r->acc) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
        for (int64_t b = 0; b < r->tiles.nblocks; b++) gr_tiles_gather(&r->tiles, b, r->contrib, r->acc, g->n);
      }
      if (r->bins.hot_len) {
#pragma omp parallel num_threads(threads)
        {
          int64_t *cur = r->cursors + (int64_t)omp_get_thread_num() * r->bins.nbins;
#pragma omp for schedule(dynamic, 1)
          for (int c = 0; c < GR_BINS_CHUNKS; c++) gr_bins_scatter(&r->bins, c, r->contrib, g->out_degree, cur);
#pragma omp for schedule(dynamic, 1)
          for (int64_t k = 0; k < r->bins.nbins; k++) gr_bins_gather(&r->bins, k, g->n);
        }
      }
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
      for (int64_t b = 0; b < r->nblocks; b++) {
        if (r->nw) sweep_weighted(r, b, coef, scale);
        else sweep_jacobi(r, b, coef, scale);
      }
      double total = sum_fixed(r->fsum, r->nblocks);
      scale = gapbs || !(total > 0) ? 1 : 1 / total;
      dangling = scale * sum_fixed(r->fdang, r->nblocks);
      swap(&r->x, &r->y);
      swap(&r->contrib, &r->next);
    }
    residual[iters++] = gs ? sum_blocks(r->bres, r->nblocks) : sum_fixed(r->fres, r->nblocks);
    if (residual[iters - 1] < o->tol) {
      *converged = 1;
      break;
    }
  }
  *scale_out = scale;
  return iters;
}

void em_pagerank_options_init(em_pagerank_options *opts) {
  *opts = (em_pagerank_options){.damping = 0.85,
                                .tol = 1e-6,
                                .max_iter = 100,
                                .method = EM_PAGERANK_JACOBI,
                                .personalization = NULL,
                                .device = {EM_CPU, 0},
                                .blocking = EM_PAGERANK_BLOCKING_AUTO,
                                .weights = EM_PAGERANK_WEIGHTS_AUTO};
}

static void run_free(pr_run *r) {
  gr_free(r->x);
  gr_free(r->y);
  gr_free(r->contrib);
  gr_free(r->next);
  gr_free(r->inv_deg);
  gr_free(r->nw);
  gr_free(r->tele);
  free(r->block);
  free(r->bsum);
  free(r->bres);
  free(r->bdang);
  free(r->fsum);
  free(r->fres);
  free(r->fdang);
  gr_tiles_free(&r->tiles);
  gr_free(r->acc);
  gr_bins_free(&r->bins);
  free(r->cursors);
}

/* Weighted: W(u), the out-weight of each source, summed in double arc by arc (one thread,
 * CSR order: the same bits at any thread count), then each arc's share nw = w / W(u), and
 * inv_deg[u] = 1 for sources with W(u) > 0, else 0 (dangling), so that the contributions
 * the sweeps keep are x(u) itself. */
static em_status arc_shares(pr_run *r) {
  const em_graph *g = r->g;
  int64_t n = g->n, m = g->m;
  double *outw = gr_calloc((size_t)n * sizeof *outw);
  r->nw = gr_alloc((size_t)(m ? m : 1) * sizeof *r->nw);
  if (!outw || !r->nw) {
    gr_free(outw);
    return gr_oom("graph pagerank", (size_t)n * 8 + (size_t)m * 4);
  }
  for (int64_t j = 0; j < m; j++) outw[g->sources[j]] += g->weights[j];
#pragma omp parallel for schedule(static) num_threads(gr_threads())
  for (int64_t j = 0; j < m; j++) {
    double w = outw[g->sources[j]];
    r->nw[j] = w > 0 ? (float)(g->weights[j] / w) : 0.0f;
  }
#pragma omp parallel for schedule(static) num_threads(gr_threads())
  for (int64_t v = 0; v < n; v++) r->inv_deg[v] = outw[v] > 0 ? 1.0f : 0.0f;
  gr_free(outw);
  return EM_OK;
}

/* Hands a run's results to the caller, whichever engine ran it: scores[v] = scale * x[i]
 * for each internal vertex i (x in the graph's internal order, v its dense id) into
 * *scores (a new float32 tensor, or the caller's contiguous one), and the first `iters`
 * residuals into a new float64 tensor when residuals is not NULL. On failure nothing the
 * call allocated is left behind. */
em_status gr_pagerank_deliver(const char *op, const em_graph *g, const float *x, double scale, const double *residual,
                              int64_t iters, em_tensor **scores, em_tensor **residuals) {
  int64_t n = g->n;
  bool allocated = false;
  em_status st = tn_prepare_out(op, scores, 1, &n, EM_FLOAT32, (em_device){EM_CPU, 0}, &allocated);
  if (st) return st;
  if (!em_tensor_is_contiguous(*scores)) {
    tn_discard_out(scores, allocated);
    return em_set_error(EM_ERR_ARGUMENT, "%s: the scores tensor given must be contiguous", op);
  }
  float *out = em_tensor_data(*scores);
#pragma omp parallel for schedule(static) num_threads(gr_threads())
  for (int64_t i = 0; i < n; i++) out[gr_dense(g, i)] = (float)(scale * x[i]);
  if (residuals) {
    *residuals = NULL;
    if ((st = em_empty(residuals, 1, &iters, EM_FLOAT64, (em_device){EM_CPU, 0}))) {
      tn_discard_out(scores, allocated);
      return st;
    }
    memcpy(em_tensor_data(*residuals), residual, (size_t)iters * sizeof *residual);
  }
  return EM_OK;
}

em_status em_graph_pagerank(em_tensor **scores, em_tensor **residuals, em_pagerank_stats *stats, const em_graph *g,
                            const em_pagerank_options *opts) {
  const char *op = "graph pagerank";
  if (!scores || !g) return em_set_error(EM_ERR_ARGUMENT, "%s: scores or graph is NULL", op);
  em_pagerank_options defaults;
  if (!opts) em_pagerank_options_init(&defaults), opts = &defaults;
  em_status st = check_options(g, opts);
  if (st) return st;
  bool weighted = g->weights && opts->weights != EM_PAGERANK_WEIGHTS_OFF;
  if (opts->device.type == EM_CUDA && !weighted) {
    st = gr_pagerank_cuda(scores, residuals, stats, g, opts);
    if (!st && stats) stats->weighted = 0;
    return st;
  }
  double t0 = em_clock_monotonic();
  int64_t n = g->n;
  pr_run r = {.g = g, .method = opts->method, .damping = opts->damping};
  double *residual = malloc((size_t)opts->max_iter * sizeof *residual);
  r.x = gr_alloc((size_t)n * sizeof(float));
  r.y = gr_alloc((size_t)n * sizeof(float));
  r.contrib = gr_alloc((size_t)n * sizeof(float));
  if (opts->method != EM_PAGERANK_GAUSS_SEIDEL) r.next = gr_alloc((size_t)n * sizeof(float));
  r.inv_deg = gr_alloc((size_t)n * sizeof(float));
  if (!residual || !r.x || !r.y || !r.contrib || !r.inv_deg || (opts->method != EM_PAGERANK_GAUSS_SEIDEL && !r.next)) {
    st = gr_oom(op, (size_t)n * 16);
    goto done;
  }
  if ((st = make_blocks(&r)) || (opts->personalization && (st = teleport(&r, opts->personalization)))) goto done;
  int blocking = opts->method == EM_PAGERANK_GAUSS_SEIDEL || weighted ? EM_PAGERANK_BLOCKING_NONE
                                                                      : choose_blocking(g, opts);
  if (blocking == EM_PAGERANK_BLOCKING_TILES || (blocking == EM_PAGERANK_BLOCKING_AUTO && g->m + g->n >= PR_PARALLEL_WORK)) {
    if ((st = gr_tiles_build(&r.tiles, g, blocking == EM_PAGERANK_BLOCKING_TILES))) goto done;
    if (r.tiles.hot_len && !(r.acc = gr_alloc((size_t)n * sizeof *r.acc))) {
      st = gr_oom(op, (size_t)n * 4);
      goto done;
    }
  }
  if (blocking == EM_PAGERANK_BLOCKING_BINS) {
    int64_t hot = gr_pr_hot_sources();
    while (hot > 1 && hot * 4 > n) hot /= 2; /* small graphs (forced): bin three quarters */
    if ((st = gr_bins_build(&r.bins, g, gr_bins_hot ? gr_bins_hot : hot))) goto done;
    if (!(r.cursors = malloc((size_t)gr_threads() * (size_t)r.bins.nbins * sizeof *r.cursors))) {
      st = gr_oom(op, (size_t)gr_threads() * (size_t)r.bins.nbins * 8);
      goto done;
    }
  }
  r.prefetch = !r.tiles.hot_len && !r.bins.hot_len && blocking != EM_PAGERANK_BLOCKING_BINS &&
               g->m + g->n >= PR_PARALLEL_WORK &&
               (gr_pr_prefetch ? gr_pr_prefetch > 0 : (size_t)n * sizeof(float) > ((size_t)4 << 20));
  if (weighted) {
    if ((st = arc_shares(&r))) goto done;
  } else {
#pragma omp parallel for schedule(static) num_threads(gr_threads())
    for (int64_t v = 0; v < n; v++) r.inv_deg[v] = g->out_degree[v] ? 1.0f / (float)g->out_degree[v] : 0.0f;
  }
  double t1 = em_clock_monotonic();
  int converged;
  double scale;
  int iters = iterate(&r, opts, residual, &converged, &scale);
  double t2 = em_clock_monotonic();

  if ((st = gr_pagerank_deliver(op, g, r.x, scale, residual, iters, scores, residuals))) goto done;
  if (stats) {
    stats->iterations = iters;
    stats->converged = converged;
    stats->residual = residual[iters - 1];
    stats->seconds = t2 - t1;
    stats->setup_seconds = t1 - t0;
    stats->edges_per_second = t2 > t1 ? (double)g->m * iters / (t2 - t1) : 0;
    stats->method = opts->method;
    stats->weighted = weighted;
    stats->engine = weighted ? "cpu:weighted" : r.bins.hot_len ? "cpu:bins" : r.tiles.hot_len ? "cpu:tiles" : "cpu";
  }
done:
  free(residual);
  run_free(&r);
  return st;
}
