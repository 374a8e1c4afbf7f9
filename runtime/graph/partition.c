/* partition.c - partitioned graphs: each rank of a process group owns a range of dense
 * vertices and the in-arcs of those vertices, plus mirrors of the remote sources it reads.
 *
 * Building from each rank's share of the arcs (parsed from its byte range of a file, or
 * generated), no rank ever holding the whole edge list:
 *   1. in-degrees of every vertex: counted locally, summed by one all_reduce of n int32
 *      (the one array of n entries a rank holds, for the build only; it is reused as the
 *      map from global id to local slot);
 *   2. the ranges: Gemini's chunking, each rank about (alpha * |V| + |E|) / ranks of work
 *      with alpha = 8 * (ranks - 1), from the in-degrees every rank now has;
 *   3. the shuffle: each arc to the owner of its target, one all_to_all_v;
 *   4. the local CSR, sources sorted by global id (the order em_graph_pagerank sums in),
 *      duplicates dropped on request;
 *   5. mirrors: the distinct remote sources, ascending; their owners learn which of their
 *      vertices each rank mirrors (all_to_all_v of the ids): the per-iteration plan;
 *   6. out-degrees: counted where the arcs are, mirrors' counts sent back to the owners
 *      along the plan reversed (so drops of duplicates are counted right).
 * Weighted graphs: each arc's weight travels with it in the shuffle; the per-vertex sort
 * orders (source, weight) pairs and drops of duplicates add the repeated arcs' weights in
 * double in that order, as csr_build.c does. The out-weight W(u) of each vertex must be
 * the same double that pagerank.c sums arc by arc in CSR order (targets ascending), so
 * the ranks holding u's arcs send them, in their CSR order, to u's owner, which adds the
 * ranks' lists in rank order (its own arcs at its own place): the same additions in the
 * same order. W of mirrors is exchanged when PageRank starts (pagerank_dist.c).
 * Every step is collective; a rank that fails says so to the others (gr_agree) before
 * the next collective, so a bad file is an error on every rank, not a hang. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ember/dist.h"
#include "graph_impl.h"

/* ---- collectives on raw arrays */
static em_status blob(em_tensor **t, const void *data, int64_t count, em_dtype dt) {
  static int64_t dummy[1];
  return em_from_blob(t, count ? (void *)data : dummy, 1, &count, NULL, dt, (em_device){EM_CPU, 0}, NULL, NULL);
}

em_status gr_allreduce(em_dist_group *g, void *data, int64_t count, em_dtype dt, int op) {
  em_tensor *t;
  em_status st = blob(&t, data, count, dt);
  if (st) return st;
  st = em_dist_all_reduce(g, t, (em_dist_redop)op, NULL);
  em_tensor_release(t);
  return st;
}

static int64_t total(const int64_t *c, int n) {
  int64_t s = 0;
  for (int i = 0; i < n; i++) s += c[i];
  return s;
}

em_status gr_alltoallv(em_dist_group *g, void *out, const int64_t *out_counts, const void *in,
                       const int64_t *in_counts, em_dtype dt) {
  int n = em_dist_size(g);
  em_tensor *to = NULL, *ti = NULL;
  em_status st = blob(&to, out, total(out_counts, n), dt);
  if (!st) st = blob(&ti, in, total(in_counts, n), dt);
  if (!st) st = em_dist_all_to_all_v(g, to, out_counts, ti, in_counts, NULL);
  if (to) em_tensor_release(to);
  if (ti) em_tensor_release(ti);
  return st;
}

em_status gr_allgather(em_dist_group *g, void *out, const void *in, int64_t count, em_dtype dt) {
  em_tensor *to = NULL, *ti = NULL;
  em_status st = blob(&to, out, count * em_dist_size(g), dt);
  if (!st) st = blob(&ti, in, count, dt);
  if (!st) st = em_dist_all_gather(g, to, ti, NULL);
  if (to) em_tensor_release(to);
  if (ti) em_tensor_release(ti);
  return st;
}

em_status gr_agree(em_dist_group *g, const char *op, em_status st) {
  int size = em_dist_size(g);
  int32_t first = st ? em_dist_rank(g) : size;
  char saved[512];
  if (st) snprintf(saved, sizeof saved, "%s", em_last_error());
  em_status cst = gr_allreduce(g, &first, 1, EM_INT32, EM_DIST_MIN);
  if (cst) return cst;
  if (st) return em_set_error(st, "%s", saved);
  if (first < size)
    return em_set_error(EM_ERR_ARGUMENT, "%s: rank %d failed (its message is on its standard error)", op, (int)first);
  return EM_OK;
}

/* ---- building */
static int owner_of(const int64_t *bounds, int size, uint32_t v) {
  int lo = 0, hi = size - 1; /* the last r with bounds[r] <= v */
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (bounds[mid] <= (int64_t)v) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/* Gemini's chunking: rank r's range ends where the work (alpha per vertex plus its
 * in-arcs) before it first reaches r+1 shares of the total. */
static void chunk(int64_t *bounds, int size, const int32_t *indeg, int64_t n) {
  int64_t alpha = 8 * (int64_t)(size - 1), work = 0;
  for (int64_t v = 0; v < n; v++) work += alpha + indeg[v];
  int r = 1;
  __int128 acc = 0;
  bounds[0] = 0;
  for (int64_t v = 0; v < n && r < size; v++) {
    while (r < size && acc * size >= (__int128)work * r) bounds[r++] = v;
    acc += alpha + indeg[v];
  }
  while (r <= size) bounds[r++] = n;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}


static void sort_sources(uint32_t *a, int64_t n) {
  if (n > 32) {
    qsort(a, (size_t)n, sizeof *a, cmp_u32);
    return;
  }
  for (int64_t i = 1; i < n; i++) {
    uint32_t x = a[i];
    int64_t j = i;
    for (; j > 0 && a[j - 1] > x; j--) a[j] = a[j - 1];
    a[j] = x;
  }
}

void em_graph_part_free(em_graph_part *p) {
  if (!p) return;
  if (p->group) em_dist_group_release(p->group);
  free(p->bounds);
  gr_free(p->offsets);
  gr_free(p->sources);
  gr_free(p->weights);
  gr_free(p->out_weight);
  gr_free(p->mirror);
  free(p->recv_count);
  free(p->send_count);
  gr_free(p->send);
  gr_free(p->out_degree);
  gr_free(p->original);
  free(p);
}

/* Steps 3 and 4: the shuffle and the local CSR (global source ids, sorted). */
static em_status shuffle(em_graph_part *p, const char *op, uint32_t *src, uint32_t *dst, float *wt, int64_t count,
                         bool dedup) {
  int size = p->size;
  int64_t *sc = calloc((size_t)size, sizeof *sc), *rc = calloc((size_t)size, sizeof *rc),
          *pos = calloc((size_t)size, sizeof *pos);
  uint64_t *out = gr_alloc((size_t)(count ? count : 1) * 8), *in = NULL;
  float *outw = wt ? gr_alloc((size_t)(count ? count : 1) * 4) : NULL, *inw = NULL;
  em_status st = EM_OK;
  if (!sc || !rc || !pos || !out || (wt && !outw)) {
    st = gr_oom(op, (size_t)count * 12);
    goto done;
  }
  for (int64_t i = 0; i < count; i++) sc[owner_of(p->bounds, size, dst[i])]++;
  for (int r = 1; r < size; r++) pos[r] = pos[r - 1] + sc[r - 1];
  for (int64_t i = 0; i < count; i++) {
    int64_t k = pos[owner_of(p->bounds, size, dst[i])]++;
    out[k] = (uint64_t)dst[i] << 32 | src[i];
    if (wt) outw[k] = wt[i];
  }
  gr_free(src);
  gr_free(dst);
  gr_free(wt);
  src = dst = NULL;
  wt = NULL;
  /* the counts first (one int64 per rank), then the arcs */
  {
    int64_t *ones = malloc((size_t)size * sizeof *ones);
    if (!ones) {
      st = gr_oom(op, (size_t)size * 8);
      goto done;
    }
    for (int r = 0; r < size; r++) ones[r] = 1;
    st = gr_alltoallv(p->group, rc, ones, sc, ones, EM_INT64);
    free(ones);
    if (st) goto done;
  }
  int64_t received = total(rc, size);
  in = gr_alloc((size_t)(received ? received : 1) * 8);
  if (!in) {
    st = gr_oom(op, (size_t)received * 8);
    goto done;
  }
  if ((st = gr_alltoallv(p->group, in, rc, out, sc, EM_INT64))) goto done;
  gr_free(out);
  out = NULL;
  if (outw) {
    if (!(inw = gr_alloc((size_t)(received ? received : 1) * 4))) {
      st = gr_oom(op, (size_t)received * 4);
      goto done;
    }
    if ((st = gr_alltoallv(p->group, inw, rc, outw, sc, EM_FLOAT32))) goto done;
    gr_free(outw);
    outw = NULL;
    if (!(p->weights = gr_alloc((size_t)(received ? received : 1) * sizeof *p->weights))) {
      st = gr_oom(op, (size_t)received * 4);
      goto done;
    }
  }
  p->offsets = gr_calloc((size_t)(p->nl + 1) * sizeof *p->offsets);
  p->sources = gr_alloc((size_t)(received ? received : 1) * sizeof *p->sources);
  if (!p->offsets || !p->sources) {
    st = gr_oom(op, (size_t)received * 4);
    goto done;
  }
  for (int64_t i = 0; i < received; i++) p->offsets[(in[i] >> 32) - (uint64_t)p->begin + 1]++;
  for (int64_t v = 0; v < p->nl; v++) p->offsets[v + 1] += p->offsets[v];
  int64_t *cur = gr_alloc((size_t)(p->nl ? p->nl : 1) * sizeof *cur);
  if (!cur) {
    st = gr_oom(op, (size_t)p->nl * 8);
    goto done;
  }
  memcpy(cur, p->offsets, (size_t)p->nl * sizeof *cur);
  for (int64_t i = 0; i < received; i++) {
    int64_t k = cur[(in[i] >> 32) - (uint64_t)p->begin]++;
    p->sources[k] = (uint32_t)in[i];
    if (inw) p->weights[k] = inw[i];
  }
  gr_free(cur);
  if (p->weights) {
    int64_t max_deg = 0, w = 0;
    for (int64_t v = 0; v < p->nl; v++)
      if (p->offsets[v + 1] - p->offsets[v] > max_deg) max_deg = p->offsets[v + 1] - p->offsets[v];
    uint64_t *key = gr_alloc((size_t)(max_deg ? max_deg : 1) * sizeof *key);
    if (!key) {
      st = gr_oom(op, (size_t)max_deg * 8);
      goto done;
    }
    /* one thread: kept arcs move down in place */
    for (int64_t v = 0; v < p->nl; v++) {
      int64_t b = p->offsets[v], deg = p->offsets[v + 1] - b;
      int64_t k = gr_sort_weighted(p->sources + b, p->weights + b, deg, dedup, key, NULL);
      memmove(p->sources + w, p->sources + b, (size_t)k * sizeof *p->sources);
      memmove(p->weights + w, p->weights + b, (size_t)k * sizeof *p->weights);
      p->offsets[v] = w;
      w += k;
    }
    p->offsets[p->nl] = w;
    received = w;
    gr_free(key);
    dedup = false;
  } else {
#pragma omp parallel for schedule(dynamic, 1024) num_threads(gr_threads())
    for (int64_t v = 0; v < p->nl; v++) sort_sources(p->sources + p->offsets[v], p->offsets[v + 1] - p->offsets[v]);
  }
  if (dedup) {
    int64_t w = 0;
    for (int64_t v = 0; v < p->nl; v++) {
      int64_t b = p->offsets[v], e = p->offsets[v + 1];
      p->offsets[v] = w;
      for (int64_t j = b; j < e; j++)
        if (j == b || p->sources[j] != p->sources[j - 1]) p->sources[w++] = p->sources[j];
    }
    p->offsets[p->nl] = w;
    received = w;
  }
  p->ml = received;
done:
  free(sc);
  free(rc);
  free(pos);
  gr_free(out);
  gr_free(in);
  gr_free(outw);
  gr_free(inw);
  gr_free(src);
  gr_free(dst);
  gr_free(wt);
  return st;
}

/* Weighted: W(u) of the own vertices (see the top). count: arcs per slot; back: the arcs
 * out of each vertex sent (p->send) that its mirroring rank holds. */
static em_status out_weights(em_graph_part *p, const char *op, const uint32_t *count, const uint32_t *back) {
  int size = p->size;
  int64_t nl = p->nl, nm = p->nmirror, sent = 0, got = 0;
  for (int64_t i = 0; i < nm; i++) sent += count[nl + i];
  for (int64_t j = 0; j < p->nsend; j++) got += back[j];
  int64_t *sc = calloc((size_t)size, sizeof *sc), *rc = calloc((size_t)size, sizeof *rc);
  int64_t *cur = gr_alloc((size_t)(nm ? nm : 1) * sizeof *cur);
  float *sw = gr_alloc((size_t)(sent ? sent : 1) * 4), *rw = gr_alloc((size_t)(got ? got : 1) * 4);
  p->out_weight = gr_calloc((size_t)(nl ? nl : 1) * sizeof *p->out_weight);
  em_status st = EM_OK;
  if (!sc || !rc || !cur || !sw || !rw || !p->out_weight) {
    st = gr_oom(op, (size_t)(sent + got) * 4 + (size_t)nl * 8);
    goto done;
  }
  /* mirrors ascend, so they are grouped by owner in rank order; each one's weights in
   * this rank's CSR order */
  int64_t i = 0, at = 0;
  for (int r = 0; r < size; r++)
    for (int64_t c = 0; c < p->recv_count[r]; c++, i++) {
      cur[i] = at;
      at += count[nl + i];
      sc[r] += count[nl + i];
    }
  for (int64_t j = 0; j < p->ml; j++)
    if (p->sources[j] >= nl) sw[cur[p->sources[j] - nl]++] = p->weights[j];
  int64_t j = 0;
  for (int r = 0; r < size; r++)
    for (int64_t c = 0; c < p->send_count[r]; c++) rc[r] += back[j++];
  if ((st = gr_alltoallv(p->group, rw, rc, sw, sc, EM_FLOAT32))) goto done;
  double *W = p->out_weight;
  int64_t pos = 0;
  j = 0;
  for (int r = 0; r < size; r++) {
    if (r == p->rank)
      for (int64_t a = 0; a < p->ml; a++)
        if (p->sources[a] < nl) W[p->sources[a]] += p->weights[a];
    for (int64_t c = 0; c < p->send_count[r]; c++, j++)
      for (uint32_t k = 0; k < back[j]; k++) W[p->send[j]] += rw[pos++];
  }
done:
  free(sc);
  free(rc);
  gr_free(cur);
  gr_free(sw);
  gr_free(rw);
  return st;
}

/* Steps 5 and 6: mirrors, the exchange plan, out-degrees. slot: n uint32 of scratch. */
static em_status plan(em_graph_part *p, const char *op, uint32_t *slot) {
  const uint32_t MARK = UINT32_MAX;
  int size = p->size;
  em_status st = EM_OK;
  for (int64_t v = 0; v < p->n; v++) slot[v] = 0;
  for (int64_t j = 0; j < p->ml; j++) {
    uint32_t s = p->sources[j];
    if (s < p->begin || s >= p->end) slot[s] = MARK;
  }
  int64_t k = 0;
  for (int64_t v = 0; v < p->n; v++) k += slot[v] == MARK;
  p->nmirror = k;
  p->mirror = gr_alloc((size_t)(k ? k : 1) * sizeof *p->mirror);
  p->recv_count = calloc((size_t)size, sizeof *p->recv_count);
  p->send_count = calloc((size_t)size, sizeof *p->send_count);
  uint32_t *count = gr_calloc((size_t)(p->nl + k + 1) * sizeof *count), *back = NULL;
  if (!p->mirror || !p->recv_count || !p->send_count || !count) {
    st = gr_oom(op, (size_t)k * 8);
    goto done;
  }
  k = 0;
  for (int64_t v = 0; v < p->n; v++)
    if (slot[v] == MARK) {
      p->mirror[k] = (uint32_t)v;
      slot[v] = (uint32_t)(p->nl + k++);
      p->recv_count[owner_of(p->bounds, size, (uint32_t)v)]++;
    }
  for (int64_t j = 0; j < p->ml; j++) {
    uint32_t s = p->sources[j];
    s = s >= p->begin && s < p->end ? (uint32_t)(s - p->begin) : slot[s];
    p->sources[j] = s;
    count[s]++;
  }
  int64_t *ones = malloc((size_t)size * sizeof *ones);
  if (!ones) {
    st = gr_oom(op, (size_t)size * 8);
    goto done;
  }
  for (int r = 0; r < size; r++) ones[r] = 1;
  st = gr_alltoallv(p->group, p->send_count, ones, p->recv_count, ones, EM_INT64);
  free(ones);
  if (st) goto done;
  p->nsend = total(p->send_count, size);
  p->send = gr_alloc((size_t)(p->nsend ? p->nsend : 1) * sizeof *p->send);
  back = gr_alloc((size_t)(p->nsend ? p->nsend : 1) * sizeof *back);
  p->out_degree = gr_alloc((size_t)(p->nl ? p->nl : 1) * sizeof *p->out_degree);
  if (!p->send || !back || !p->out_degree) {
    st = gr_oom(op, (size_t)p->nsend * 8);
    goto done;
  }
  if ((st = gr_alltoallv(p->group, p->send, p->send_count, p->mirror, p->recv_count, EM_INT32))) goto done;
  for (int64_t j = 0; j < p->nsend; j++) p->send[j] -= (uint32_t)p->begin;
  /* out-degrees: the arcs out of a mirror are counted by the rank holding them */
  if ((st = gr_alltoallv(p->group, back, p->send_count, count + p->nl, p->recv_count, EM_INT32))) goto done;
  for (int64_t v = 0; v < p->nl; v++) p->out_degree[v] = count[v];
  for (int64_t j = 0; j < p->nsend; j++) p->out_degree[p->send[j]] += back[j];
  if (p->weights) st = out_weights(p, op, count, back);
done:
  gr_free(count);
  gr_free(back);
  return st;
}

em_status gr_part_build(em_graph_part **out, em_dist_group *g, const char *op, int64_t n, uint32_t *src,
                        uint32_t *dst, float *wt, int64_t count, bool drop_duplicates, bool directed) {
  *out = NULL;
  em_graph_part *p = calloc(1, sizeof *p);
  int32_t *indeg = gr_calloc((size_t)(n ? n : 1) * sizeof *indeg);
  em_status st = EM_OK;
  if (!p || !indeg) {
    st = gr_oom(op, (size_t)n * 4);
    gr_free(src);
    gr_free(dst);
    gr_free(wt);
    goto done;
  }
  em_dist_group_retain(g);
  p->group = g;
  p->rank = em_dist_rank(g);
  p->size = em_dist_size(g);
  p->n = n;
  p->directed = directed;
  for (int64_t i = 0; i < count; i++) indeg[dst[i]]++;
  if ((st = gr_allreduce(g, indeg, n, EM_INT32, EM_DIST_SUM))) goto fail;
  if (!(p->bounds = malloc((size_t)(p->size + 1) * sizeof *p->bounds))) {
    st = gr_oom(op, 64);
    goto fail;
  }
  chunk(p->bounds, p->size, indeg, n);
  p->begin = p->bounds[p->rank];
  p->end = p->bounds[p->rank + 1];
  p->nl = p->end - p->begin;
  st = shuffle(p, op, src, dst, wt, count, drop_duplicates);
  src = dst = NULL;
  wt = NULL;
  if ((st = gr_agree(g, op, st)) || (st = gr_agree(g, op, plan(p, op, (uint32_t *)indeg)))) goto done;
  p->m = p->ml;
  if ((st = gr_allreduce(g, &p->m, 1, EM_INT64, EM_DIST_SUM))) goto done;
  gr_free(indeg);
  *out = p;
  return EM_OK;
fail:
  gr_free(src);
  gr_free(dst);
  gr_free(wt);
done:
  gr_free(indeg);
  em_graph_part_free(p);
  return st;
}

/* ---- inspection */
int em_graph_part_is_weighted(const em_graph_part *p) { return p && p->weights ? 1 : 0; }

void em_graph_part_get_info(const em_graph_part *p, em_graph_part_info *o) {
  memset(o, 0, sizeof *o);
  if (!p) return;
  o->num_vertices = p->n;
  o->num_edges = p->m;
  o->begin = p->begin;
  o->end = p->end;
  o->local_edges = p->ml;
  o->mirrors = p->nmirror;
  o->values_sent = p->nsend;
  o->values_received = p->nmirror;
  o->bytes = (p->nl + 1) * 8 + p->ml * 4 + p->nmirror * 4 + p->nsend * 4 + p->nl * 4 + (p->original ? p->nl * 8 : 0) +
             (p->weights ? p->ml * 4 + p->nl * 8 : 0);
  o->rank = p->rank;
  o->world_size = p->size;
}

static em_status local_int64(em_tensor **out, int64_t nl) {
  return em_empty(out, 1, &nl, EM_INT64, (em_device){EM_CPU, 0});
}

em_status em_graph_part_degrees(const em_graph_part *p, em_tensor **in_degree, em_tensor **out_degree) {
  if (!p) return em_set_error(EM_ERR_ARGUMENT, "graph part degrees: the graph is NULL");
  em_status st;
  if (in_degree) {
    if ((st = local_int64(in_degree, p->nl))) return st;
    int64_t *d = em_tensor_data(*in_degree);
    for (int64_t v = 0; v < p->nl; v++) d[v] = p->offsets[v + 1] - p->offsets[v];
  }
  if (out_degree) {
    if ((st = local_int64(out_degree, p->nl))) {
      if (in_degree) em_tensor_release(*in_degree), *in_degree = NULL;
      return st;
    }
    int64_t *d = em_tensor_data(*out_degree);
    for (int64_t v = 0; v < p->nl; v++) d[v] = p->out_degree[v];
  }
  return EM_OK;
}

em_status em_graph_part_original_ids(const em_graph_part *p, em_tensor **out) {
  if (!p || !out) return em_set_error(EM_ERR_ARGUMENT, "graph part original_ids: the graph or out is NULL");
  em_status st = local_int64(out, p->nl);
  if (st) return st;
  int64_t *d = em_tensor_data(*out);
  for (int64_t v = 0; v < p->nl; v++) d[v] = p->original ? p->original[v] : p->begin + v + p->id_base;
  return EM_OK;
}

em_status em_graph_part_gather(em_tensor **out, const em_graph_part *p, const em_tensor *local, int root) {
  const char *op = "graph part gather";
  if (!out || !p || !local) return em_set_error(EM_ERR_ARGUMENT, "%s: out, graph or tensor is NULL", op);
  *out = NULL;
  if (em_tensor_ndim(local) != 1 || em_tensor_numel(local) != p->nl || !em_tensor_is_contiguous(local))
    return em_set_error(EM_ERR_ARGUMENT, "%s: expected a contiguous 1-D tensor of %lld values (this rank's vertices)",
                        op, (long long)p->nl);
  if (root >= p->size)
    return em_set_error(EM_ERR_ARGUMENT, "%s: root is %d, expected a rank below %d", op, root, p->size);
  int64_t *counts = malloc((size_t)p->size * sizeof *counts);
  if (!counts) return gr_oom(op, 64);
  for (int r = 0; r < p->size; r++) counts[r] = p->bounds[r + 1] - p->bounds[r];
  em_tensor *full = NULL;
  em_status st = em_empty(&full, 1, &p->n, em_tensor_dtype(local), (em_device){EM_CPU, 0});
  if (!st) st = em_dist_all_gather_v(p->group, full, counts, local, NULL);
  free(counts);
  if (st || (root >= 0 && root != p->rank)) {
    if (full) em_tensor_release(full);
    return st;
  }
  *out = full;
  return EM_OK;
}
