/* pagerank_dist.c - PageRank over a partitioned graph (partition.c), pull-based, Jacobi.
 *
 * Each rank keeps scores x and contributions c(u) = x(u) / outdeg(u) for its own vertices,
 * and contributions of its mirrors in the same array, so the in-arc lists index one array.
 * An iteration:
 *   1. sweep the own vertices as pagerank.c's sweep_jacobi does, term for term: the same
 *      gather, the same float and double roundings, the same exact (fixed-point) sums of
 *      scores, residual and dangling mass;
 *   2. exchange: pack the new contributions the other ranks mirror (the plan), one
 *      all_to_all_v of float32, placed into the mirrors' places of the new contribution
 *      array, and one all_reduce of the three int64 sums.
 * The integer sums make every global reduction exact, so the scores are the same bits
 * whatever the rank and thread counts.
 *
 * Places. The partition numbers a rank's sources own vertices first (by id), then mirrors
 * (by id): with vertices in dense order that scatters the high-degree sources, which are
 * most of the reads, over the whole array (about 14 MB a rank at Kronecker scale 22 on 2
 * ranks), and every read missed L2. So the run gives every vertex a global key, its place
 * in the order (out-degree bucket descending, id ascending) that every rank computes alike
 * from one all_gather of per-rank bucket counts (slot_keys), and lays the contributions out
 * by key: the most-read sources are a dense prefix, as the single process's degree order
 * makes them. Two ways to sum then:
 *   - plain (blocking none, weighted graphs, small graphs): each vertex's list keeps the
 *     partition's order (ascending global id), only renamed, so the sums are the same bits
 *     as em_graph_pagerank's untiled sweep on the graph with reorder = 'none';
 *   - tiles (blocking tiles, or auto where pr_tiles.c's cost check says they pay on every
 *     rank): the lists are sorted by key, the sources past the hot ones (key < seg) are
 *     cache-blocked by pr_tiles.c, segments cut by the global key. Each vertex's sum (its
 *     cold arcs segment by segment, then its hot prefix) depends on the global keys alone,
 *     so the tiled scores are the same bits at any rank and thread count too (not those of
 *     the single process, whose tiles follow its own order: equal within rounding).
 *
 * On a GPU (opts->device cuda:N, pagerank_dist_cuda.c) the plain lists go to the CUDA
 * plugin, which sweeps there; the exchange moves the same values between the GPUs through
 * the group's CUDA backend (NCCL).
 *
 * Weighted graphs (pagerank.c's sweep_weighted, term for term): the owners' out-weights
 * W(u) (partition.c sums them as pagerank.c does) reach the mirrors once, by the plan;
 * each arc's share nw = (float)(w / W(u)) is then the same float as pagerank.c's, the
 * contributions are x(u) itself (0 when W(u) = 0: dangling), and each vertex sums
 * x(u) * nw in double, arc by arc in the same order (plain, never tiled). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "ember/dist.h"
#include "graph_impl.h"

#define BLOCK 4096 /* vertices per unit of parallel work */
#define PARALLEL_WORK (1 << 18) /* arcs + vertices (whole graph) below which auto stays plain, as pagerank.c */
#define NBUCKET 160 /* out-degree buckets of the key order (bucket_of) */

typedef struct dist_run {
  const em_graph_part *p;
  double damping;
  bool gapbs;
  float *x, *y, *contrib, *next, *inv, *sendbuf, *recvbuf;
  float *nw; /* [ml] weighted: each arc's share of its source's score; NULL: unweighted */
  uint32_t *place; /* [nl + nmirror] the partition's slot -> its place in contrib */
  uint32_t *key; /* [nl + nmirror] the global key of each place (ascending) */
  uint32_t *src; /* [ml] the in-arcs' sources as places (plain: partition's order; tiles: ascending) */
  uint32_t *send; /* [nsend] the places of the values sent */
  uint32_t *ord; /* [nl] the own vertices in sweep (key) order: the partition's local ids */
  uint32_t *own; /* [nl] the place of each, in that order */
  int64_t *off; /* [nl + 1] their in-arcs in src */
  uint32_t gkey[NBUCKET]; /* the first key of each bucket, buckets descending (ascending keys) */
  gr_tiles tiles; /* cold arcs, cache-blocked; hot_len NULL: plain */
  float *acc; /* [nl] each vertex's cold sum, when tiled */
  double compute, exchange;
} dist_run;

/* Sweeps own vertices [b, e) (see sweep_jacobi in pagerank.c); adds to sums[3]. */
static void sweep(dist_run *r, int64_t b, int64_t e, double coef, double scale, int64_t *sums) {
  const em_graph_part *p = r->p;
  const int64_t *restrict off = r->off;
  const uint32_t *restrict src = r->src, *restrict place = r->own, *restrict hot = r->tiles.hot_len;
  const float *restrict x = r->x, *restrict inv = r->inv, *restrict contrib = r->contrib, *restrict acc = r->acc;
  float *restrict y = r->y, *restrict next = r->next;
  const double d = r->damping * scale, t = coef / (double)p->n;
  int64_t s[3] = {0, 0, 0}; /* scores, residual, dangling mass */
  const float *restrict nw = r->nw;
  for (int64_t v = b; v < e; v++) {
    double in = 0;
    if (nw)
      for (int64_t j = off[v]; j < off[v + 1]; j++) in += (double)contrib[src[j]] * (double)nw[j];
    else if (hot) in = acc[v] + gr_pr_gather(contrib, src + off[v], hot[v]);
    else in = gr_pr_gather(contrib, src + off[v], off[v + 1] - off[v]);
    gr_pr_update(y, next, x, inv, v, place[v], d, in, t, scale, s);
  }
  sums[0] += s[0];
  sums[1] += s[1];
  sums[2] += s[2];
}

/* The mirrors' values of buf (the own places filled) from their owners. */
static em_status exchange(dist_run *r, float *buf) {
  const em_graph_part *p = r->p;
  for (int64_t j = 0; j < p->nsend; j++) r->sendbuf[j] = buf[r->send[j]];
  em_status st = gr_alltoallv(p->group, r->recvbuf, p->recv_count, r->sendbuf, p->send_count, EM_FLOAT32);
  if (st) return st;
  const uint32_t *mplace = r->place + p->nl;
  for (int64_t i = 0; i < p->nmirror; i++) buf[mplace[i]] = r->recvbuf[i];
  return EM_OK;
}

/* Out-degree buckets: exact below 32, then 4 per power of two; higher is read more. */
static int bucket_of(uint32_t d) {
  if (d < 32) return (int)d;
  int l = 31 - __builtin_clz(d);
  return 32 + 4 * (l - 5) + (int)((d >> (l - 2)) & 3);
}

/* key[slot] for every slot: a permutation of [0, n) ordered by (bucket descending, global
 * id ascending), the same on every rank and for every partition of the graph: own
 * vertices from the bucket counts of all ranks (one all_gather), mirrors from their
 * owners along the plan. */
static em_status slot_keys(const em_graph_part *p, uint32_t *key, uint32_t *gkey) {
  int size = p->size;
  int64_t mine[NBUCKET] = {0}, start[NBUCKET], *all = malloc((size_t)size * NBUCKET * sizeof *all);
  uint32_t *sendk = gr_alloc((size_t)(p->nsend ? p->nsend : 1) * sizeof *sendk);
  em_status st = EM_OK;
  if (!all || !sendk) st = gr_oom("graph part pagerank", (size_t)size * NBUCKET * 8 + (size_t)p->nsend * 4);
  if ((st = gr_agree(p->group, "graph part pagerank", st))) goto done;
  for (int64_t v = 0; v < p->nl; v++) mine[bucket_of(p->out_degree[v])]++;
  if ((st = gr_allgather(p->group, all, mine, NBUCKET, EM_INT64))) goto done;
  int64_t at = 0;
  for (int b = NBUCKET - 1; b >= 0; b--) {
    start[b] = at;
    gkey[NBUCKET - 1 - b] = (uint32_t)at; /* group g = bucket NBUCKET - 1 - g starts at key gkey[g] */
    for (int r = 0; r < size; r++) at += all[(int64_t)r * NBUCKET + b];
    for (int r = 0; r < p->rank; r++) start[b] += all[(int64_t)r * NBUCKET + b];
  }
  for (int64_t v = 0; v < p->nl; v++) key[v] = (uint32_t)start[bucket_of(p->out_degree[v])]++;
  for (int64_t j = 0; j < p->nsend; j++) sendk[j] = key[p->send[j]];
  st = gr_alltoallv(p->group, key + p->nl, p->recv_count, sendk, p->send_count, EM_INT32);
done:
  free(all);
  gr_free(sendk);
  return st;
}

/* r->src: each own vertex's in-arcs (in sweep order) as places, in the partition's order. */
static void plain_lists(dist_run *r) {
  const em_graph_part *p = r->p;
  const uint32_t *place = r->place;
#pragma omp parallel for schedule(dynamic, 1024) num_threads(gr_threads())
  for (int64_t i = 0; i < p->nl; i++) {
    const uint32_t *from = p->sources + p->offsets[r->ord[i]];
    uint32_t *to = r->src + r->off[i];
    for (int64_t j = 0; j < r->off[i + 1] - r->off[i]; j++) to[j] = place[from[j]];
  }
}

/* The places (see the top): r->place, r->key, r->send; and the own vertices swept in key
 * order (r->ord), as the single process sweeps in degree order: neighbouring vertices then
 * have lists of like lengths (the gather's branches predict) and their contributions go
 * to ascending places. r->off, r->src (places, each list in the partition's order), r->own,
 * r->inv and r->nw follow that order. */
static em_status lay_out(dist_run *r) {
  const em_graph_part *p = r->p;
  int64_t nl = p->nl, slots = nl + p->nmirror;
  size_t sb = (size_t)(slots ? slots : 1), lb = (size_t)(nl ? nl : 1), mb = (size_t)(p->ml ? p->ml : 1);
  uint64_t *pair = gr_alloc(sb * sizeof *pair);
  float *inv = gr_alloc(lb * sizeof *inv), *nw = r->nw ? gr_alloc(mb * sizeof *nw) : NULL;
  r->place = gr_alloc(sb * sizeof *r->place);
  r->key = gr_alloc(sb * sizeof *r->key);
  r->src = gr_alloc(mb * sizeof *r->src);
  r->send = gr_alloc((size_t)(p->nsend ? p->nsend : 1) * sizeof *r->send);
  r->ord = gr_alloc(lb * sizeof *r->ord);
  r->own = gr_alloc(lb * sizeof *r->own);
  r->off = gr_alloc((lb + 1) * sizeof *r->off);
  em_status st = EM_OK;
  if (!pair || !inv || (r->nw && !nw) || !r->place || !r->key || !r->src || !r->send || !r->ord || !r->own || !r->off)
    st = gr_oom("graph part pagerank", sb * 16 + mb * 8);
  if ((st = gr_agree(p->group, "graph part pagerank", st)) || (st = slot_keys(p, r->key, r->gkey))) goto done;
  for (int64_t i = 0; i < slots; i++) pair[i] = (uint64_t)r->key[i] << 32 | (uint64_t)i;
  gr_sort_u64(pair, slots);
  int64_t k = 0;
  for (int64_t q = 0; q < slots; q++) {
    uint32_t slot = (uint32_t)pair[q];
    r->place[slot] = (uint32_t)q;
    r->key[q] = (uint32_t)(pair[q] >> 32);
    if (slot < nl) r->ord[k++] = slot;
  }
  r->off[0] = 0;
  for (int64_t i = 0; i < nl; i++) {
    uint32_t v = r->ord[i];
    r->off[i + 1] = r->off[i] + (p->offsets[v + 1] - p->offsets[v]);
    r->own[i] = r->place[v];
    inv[i] = r->inv[v];
  }
  const uint32_t *place = r->place;
  plain_lists(r);
  if (nw)
    for (int64_t i = 0; i < nl; i++)
      memcpy(nw + r->off[i], r->nw + p->offsets[r->ord[i]], (size_t)(r->off[i + 1] - r->off[i]) * sizeof *nw);
  for (int64_t j = 0; j < p->nsend; j++) r->send[j] = place[p->send[j]];
  if (nl) memcpy(r->inv, inv, (size_t)nl * sizeof *inv);
  if (nw) {
    gr_free(r->nw);
    r->nw = nw;
    nw = NULL;
  }
done:
  gr_free(pair);
  gr_free(inv);
  gr_free(nw);
  return st;
}

/* The last g with bpos[g] <= q (bpos: 256 ascending, bpos[0] = 0): q's bucket group. */
static inline int group_of(const uint32_t *bpos, uint32_t q) {
  int g = 0;
  for (int step = 128; step; step >>= 1) g += bpos[g + step] <= q ? step : 0;
  return g;
}

/* Sorts a list of places that is in ascending global id. Places order by (bucket
 * descending, id ascending), so within a bucket the list is in place order already, and
 * sorting it is a stable sort by bucket: linear, one pass to count, one to place. */
static void sort_list(uint32_t *a, int64_t d, const uint32_t *bpos, uint8_t *grp, uint32_t *tmp) {
  int64_t j = 1;
  while (j < d && a[j - 1] <= a[j]) j++;
  if (j >= d) return; /* in order (one bucket, most short lists) */
  if (d <= 32) {
    gr_sort_u32(a, d, NULL);
    return;
  }
  int64_t at[257] = {0};
  for (j = 0; j < d; j++) {
    grp[j] = (uint8_t)group_of(bpos, a[j]);
    at[grp[j] + 1]++;
  }
  for (int g = 0; g < 256; g++) at[g + 1] += at[g];
  for (j = 0; j < d; j++) tmp[at[grp[j]]++] = a[j];
  memcpy(a, tmp, (size_t)d * sizeof *a);
}

/* Tiles over the local arcs, each list sorted by place (= by key; sort_list), when `blocking` asks for
 * them and (auto) every rank finds they pay; else the plain lists stay. */
static em_status tile(dist_run *r, int blocking) {
  const char *op = "graph part pagerank";
  const em_graph_part *p = r->p;
  int64_t active = 0, maxdeg = 0;
  for (int64_t v = 0; v < p->nl; v++) {
    active += p->out_degree[v] > 0;
    if (r->off[v + 1] - r->off[v] > maxdeg) maxdeg = r->off[v + 1] - r->off[v];
  }
  em_status st = gr_allreduce(p->group, &active, 1, EM_INT64, EM_DIST_SUM);
  if (st) return st;
  int threads = gr_threads();
  uint32_t *sorted = r->src; /* in place: the plain lists are made again if no tiles */
  size_t per = (size_t)(maxdeg ? maxdeg : 1);
  uint32_t *tmp = gr_alloc((size_t)threads * per * sizeof *tmp);
  uint8_t *grp = gr_alloc((size_t)threads * per);
  if (!tmp || !grp) st = gr_oom(op, (size_t)threads * per * 5);
  if (!st) {
    uint32_t bpos[257]; /* the first place of each bucket group; 256 and up: none */
    int64_t slots = p->nl + p->nmirror;
    for (int g = 0; g < 257; g++) {
      int64_t lo = 0, hi = slots;
      while (g < NBUCKET && lo < hi) { /* the first place with key >= gkey[g] */
        int64_t mid = lo + (hi - lo) / 2;
        if (r->key[mid] < r->gkey[g]) lo = mid + 1;
        else hi = mid;
      }
      bpos[g] = g < NBUCKET ? (uint32_t)lo : UINT32_MAX;
    }
#pragma omp parallel for schedule(dynamic, 1024) num_threads(threads)
    for (int64_t v = 0; v < p->nl; v++) {
      int64_t t = omp_get_thread_num();
      sort_list(sorted + r->off[v], r->off[v + 1] - r->off[v], bpos, grp + t * (int64_t)per, tmp + t * (int64_t)per);
    }
    gr_tiles_csr c = {.n = p->nl, .m = p->ml, .offsets = r->off, .sources = sorted, .key = r->key,
                      .slots = p->nl + p->nmirror, .keys = p->n, .active = active};
    st = gr_tiles_build_csr(&r->tiles, &c, blocking == EM_PAGERANK_BLOCKING_TILES);
    if (!st && r->tiles.hot_len && !(r->acc = gr_alloc((size_t)(p->nl ? p->nl : 1) * sizeof *r->acc)))
      st = gr_oom(op, (size_t)p->nl * 4);
  }
  gr_free(tmp);
  gr_free(grp);
  int32_t built = !st && r->tiles.hot_len;
  if ((st = gr_agree(p->group, op, st)) || (st = gr_allreduce(p->group, &built, 1, EM_INT32, EM_DIST_MIN)) || !built) {
    gr_tiles_free(&r->tiles); /* some rank has none: all sum plainly */
    gr_free(r->acc);
    r->acc = NULL;
    plain_lists(r);
    return st;
  }
  return EM_OK;
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

em_status gr_part_first_coef(const em_graph_part *p, const float *inv, bool gapbs, double damping, double *coef) {
  int64_t sinks = 0;
  for (int64_t v = 0; v < p->nl; v++) sinks += inv[v] == 0;
  em_status st = gr_allreduce(p->group, &sinks, 1, EM_INT64, EM_DIST_SUM);
  double dangling = gr_unfix(sinks * gr_fix((float)(1.0 / (double)p->n)));
  *coef = gapbs ? 1 - damping : (1 - damping) + damping * dangling;
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
  int64_t nblocks = (p->nl + BLOCK - 1) / BLOCK;
  for (int64_t v = 0; v < p->nl; v++) {
    r->x[v] = x0;
    r->contrib[r->own[v]] = x0 * r->inv[v];
  }
  double t0 = em_clock_monotonic(), scale = 1, coef;
  *st = gr_part_first_coef(p, r->inv, r->gapbs, r->damping, &coef);
  if (!*st) *st = exchange(r, r->contrib);
  r->exchange += em_clock_monotonic() - t0;
  if (*st) return 0;
  *converged = 0;
  while (iters < o->max_iter) {
    int64_t sums[3] = {0, 0, 0};
    double t1 = em_clock_monotonic();
#pragma omp parallel num_threads(threads)
    {
      int64_t mine[3] = {0, 0, 0};
      if (r->acc) {
#pragma omp for schedule(dynamic, 1)
        for (int64_t b = 0; b < r->tiles.nblocks; b++) gr_tiles_gather(&r->tiles, b, r->contrib, r->acc, p->nl);
      }
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
    swap(&r->x, &r->y);
    swap(&r->contrib, &r->next);
    residual[iters++] = gr_pr_close(sums, r->gapbs, r->damping, &scale, &coef);
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
  if (opts->blocking < EM_PAGERANK_BLOCKING_AUTO || opts->blocking > EM_PAGERANK_BLOCKING_TILES)
    return em_set_error(EM_ERR_ARGUMENT, "%s: blocking is %d, expected 0 (auto), 1 (none) or 2 (tiles): propagation "
                        "blocking does not partition", op, opts->blocking);
  if (opts->personalization)
    return em_set_error(EM_ERR_ARGUMENT, "%s: personalization is not supported on a partitioned graph", op);
  bool cuda = opts->device.type == EM_CUDA;
  if ((!cuda && opts->device.type != EM_CPU) || opts->device.index < 0)
    return em_set_error(EM_ERR_DEVICE, "%s: device type %d index %d, expected cpu or cuda:N", op, opts->device.type,
                        opts->device.index);
  em_status wst = gr_check_weights(op, opts->weights, p->weights != NULL, "a cache");
  if (wst) return wst;
  bool weighted = p->weights && opts->weights != EM_PAGERANK_WEIGHTS_OFF;
  if (cuda && weighted)
    return em_set_error(EM_ERR_UNSUPPORTED, "%s: weighted arcs rank on the CPU only (device cuda:%d asked; "
                        "weighted = false ranks the arcs unweighted on the GPU)", op, opts->device.index);
  if (cuda && opts->blocking == EM_PAGERANK_BLOCKING_TILES)
    return em_set_error(EM_ERR_ARGUMENT, "%s: blocking 'tiles' is a CPU layout; the GPU (cuda:%d) takes auto or none",
                        op, opts->device.index);
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
  r.recvbuf = gr_alloc((size_t)(p->nmirror ? p->nmirror : 1) * sizeof(float));
  em_status st = EM_OK;
  if (!residual || !r.x || !r.y || !r.inv || !r.contrib || !r.next || !r.sendbuf || !r.recvbuf)
    st = gr_oom(op, fbytes * 3);
  if ((st = gr_agree(p->group, op, st))) goto done;
  if (weighted) st = shares(&r);
  else
    for (int64_t v = 0; v < nl; v++) r.inv[v] = p->out_degree[v] ? 1.0f / (float)p->out_degree[v] : 0.0f;
  if ((st = gr_agree(p->group, op, st)) || (st = lay_out(&r))) goto done;
  /* auto: plain on small graphs (as pagerank.c), else tiles where they pay */
  int blocking = cuda || weighted || (opts->blocking == EM_PAGERANK_BLOCKING_AUTO && p->m + p->n < PARALLEL_WORK)
                     ? EM_PAGERANK_BLOCKING_NONE
                     : opts->blocking;
  if (blocking != EM_PAGERANK_BLOCKING_NONE && (st = tile(&r, blocking))) goto done;
  double t1 = em_clock_monotonic();
  int converged = 0, iters = 0;
  double scale = 1;
  const char *engine = weighted ? "cpu:partitioned:weighted" : r.acc ? "cpu:partitioned:tiles" : "cpu:partitioned";
  if (cuda) {
    gr_part_layout lay = {.p = p, .off = r.off, .src = r.src, .own = r.own, .send = r.send,
                          .mirror = r.place + nl, .inv = r.inv};
    gr_part_result res = {.x = r.x, .residual = residual};
    st = gr_part_pagerank_cuda(&lay, opts, &res); /* the scores come back normalised */
    iters = res.iterations;
    converged = res.converged;
    r.compute = res.compute;
    r.exchange = res.exchange;
    engine = res.engine;
    t1 += res.setup;
  } else
    iters = iterate(&r, opts, residual, &converged, &scale, &st);
  double t2 = em_clock_monotonic();
  if (st) goto done;
  if ((st = em_empty(scores, 1, &nl, EM_FLOAT32, (em_device){EM_CPU, 0}))) goto done;
  float *out = em_tensor_data(*scores);
  for (int64_t i = 0; i < nl; i++) out[r.ord[i]] = (float)(scale * r.x[i]);
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
    stats->engine = engine;
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
  gr_free(r.recvbuf);
  gr_free(r.nw);
  gr_free(r.place);
  gr_free(r.key);
  gr_free(r.src);
  gr_free(r.send);
  gr_free(r.ord);
  gr_free(r.own);
  gr_free(r.off);
  gr_tiles_free(&r.tiles);
  gr_free(r.acc);
  return st;
}
