/* csr_build.c - builds the in-edge CSR from an edge source without storing an edge list.
 *
 * The source is scanned twice. The count pass counts in- and out-degrees; the degrees give
 * the vertex order (by decreasing out-degree when reordering) and the offsets; the fill
 * pass writes each arc's source at its destination's next free slot. Every vertex's
 * sources are then sorted (in parallel), which also makes the result independent of the
 * thread count, and duplicates dropped on request. Memory beyond the final CSR is a few
 * arrays of n counters, so building holds well under 2.5 times the final size, plus the
 * kept edges when there are any (below).
 *
 * When the edges fit a memory budget (8 bytes each: KEEP_BYTES and a quarter of the free
 * memory), the count pass also keeps them, worker by worker, and the fill pass replays
 * them instead of asking the source again: one parse or generation instead of two (a
 * Kronecker build spent two fifths of its time generating; scale 21 built 15-20% faster,
 * its peak memory 254 -> 578 MiB). Larger graphs (Twitter's 1.8B arcs) scan twice.
 *
 * Work is cut into W "workers" (W = thread count), each owning a fixed range of chunks
 * in both passes. With few workers each has its own uint32 counters, so the passes need
 * no atomic instructions (a locked increment of a cache-missing counter costs 2-3 times a
 * plain one here); otherwise one shared array is updated atomically.
 *
 * A weighted source pushes a float weight with each edge; the fill pass writes it beside
 * the arc's source (kept edges carry it as a third word), the per-vertex sort orders
 * (source, weight) pairs, and dropping duplicates adds the weights of the repeated arcs
 * (in double, in that order: the result does not depend on the thread count). Unweighted
 * sources take the loops they always took. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "graph_impl.h"

int gr_build_strategy = 0;
int gr_build_keep = 0;

#define SINK_CAP 4096
#define PER_WORKER_BYTES ((size_t)2 << 30) /* counters' budget for the per-worker strategy */
#define KEEP_BYTES ((double)(6ull << 30)) /* the kept edges' budget (also <= free memory / 4) */

struct gr_builder {
  const gr_source *src;
  int pass; /* 0 count, 1 fill */
  bool directed, reverse, drop_loops, per_worker, weighted;
  int64_t n;
  uint32_t **in_cnt; /* per worker [n] by dense id: counts, then each worker's first slot within
                      * the vertex, then (in place) its next slot to fill, absolute: the
                      * per-worker strategy holds at most 2^32 arcs */
  uint32_t **out_cnt; /* per worker [n] */
  int64_t *in_shared; /* atomic strategy [n]: counts, then absolute fill cursors */
  int64_t *out_shared; /* atomic strategy [n] */
  bool keep; /* the count pass keeps the edges, the fill pass replays them */
  uint32_t **kept; /* per worker: (u, v) pairs, or (u, v, weight bits) triples when weighted,
                     * after reversal and loop removal */
  int64_t *kept_len, *kept_cap; /* per worker, in edges */
  int keep_failed;
  const uint32_t *newid; /* dense -> internal, NULL: identity */
  const int64_t *offsets; /* internal */
  uint32_t *sources;
  float *weights; /* weighted: beside sources */
};

static inline void count_arc(gr_builder *b, int w, uint32_t u, uint32_t v) {
  if (b->per_worker) {
    b->in_cnt[w][v]++;
    b->out_cnt[w][u]++;
  } else {
    __atomic_fetch_add(&b->in_shared[v], 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&b->out_shared[u], 1, __ATOMIC_RELAXED);
  }
}

static inline void fill_arc(gr_builder *b, int w, uint32_t u, uint32_t v) {
  int64_t pos = b->per_worker ? b->in_cnt[w][v]++ : __atomic_fetch_add(&b->in_shared[v], 1, __ATOMIC_RELAXED);
  b->sources[pos] = b->newid ? b->newid[u] : u;
}

static inline void fill_arc_w(gr_builder *b, int w, uint32_t u, uint32_t v, float wt) {
  int64_t pos = b->per_worker ? b->in_cnt[w][v]++ : __atomic_fetch_add(&b->in_shared[v], 1, __ATOMIC_RELAXED);
  b->sources[pos] = b->newid ? b->newid[u] : u;
  b->weights[pos] = wt;
}


/* Room for `more` edges in worker w's kept edges; false when memory runs out. */
static bool keep_room(gr_builder *b, int w, int64_t more) {
  if (b->kept_len[w] + more <= b->kept_cap[w]) return true;
  int64_t cap = b->kept_cap[w] + b->kept_cap[w] / 2 + more + 4096;
  size_t words = b->weighted ? 3 : 2;
  uint32_t *p = realloc(b->kept[w], (size_t)cap * words * sizeof *p); /* large blocks: mremap, no copy */
  if (!p) return false;
  b->kept[w] = p;
  b->kept_cap[w] = cap;
  return true;
}

/* gr_sink_flush for weighted sources: the same steps, each edge with its weight. */
static void flush_weighted(gr_sink *s, uint32_t *keep) {
  gr_builder *b = s->b;
  int w = s->thread;
  uint32_t *keep0 = keep;
  for (int i = 0; i < s->len; i++) {
    uint32_t u = s->src[i], v = s->dst[i];
    float wt = s->w[i];
    if (b->reverse) {
      uint32_t t = u;
      u = v;
      v = t;
    }
    if (u == v && b->drop_loops) continue;
    if (b->pass == 0) {
      if (keep) *keep++ = u, *keep++ = v, *keep++ = gr_float_bits(wt);
      count_arc(b, w, u, v);
      if (!b->directed && u != v) count_arc(b, w, v, u);
    } else {
      fill_arc_w(b, w, u, v, wt);
      if (!b->directed && u != v) fill_arc_w(b, w, v, u, wt);
    }
  }
  if (keep) b->kept_len[w] += (keep - keep0) / 3;
  s->len = 0;
}

/* The count and fill loops of a flush, over edges already reversed and without the
 * dropped loops. Each arc is two or three cache misses into arrays of n counters (and the
 * CSR), so the counters and slots of the edge AHEAD places on are prefetched: the misses
 * then overlap instead of each stalling the loop (the build's largest cost at Twitter
 * scale, where those arrays are hundreds of MB). */
#define AHEAD 16

static void count_edges(gr_builder *b, int w, const uint32_t *U, const uint32_t *V, int len) {
  uint32_t *in = b->per_worker ? b->in_cnt[w] : NULL, *out = b->per_worker ? b->out_cnt[w] : NULL;
  for (int i = 0; i < len; i++) {
    if (i + AHEAD < len) {
      if (in) __builtin_prefetch(&in[V[i + AHEAD]], 1), __builtin_prefetch(&out[U[i + AHEAD]], 1);
      else __builtin_prefetch(&b->in_shared[V[i + AHEAD]], 1), __builtin_prefetch(&b->out_shared[U[i + AHEAD]], 1);
    }
    count_arc(b, w, U[i], V[i]);
    if (!b->directed && U[i] != V[i]) count_arc(b, w, V[i], U[i]);
  }
}

/* U[i * stride] -> V[i * stride]: the sink's two arrays, or kept (u, v) pairs. */
static void fill_edges(gr_builder *b, int w, const uint32_t *U, const uint32_t *V, int64_t stride, int64_t len) {
  for (int64_t i = 0; i < len; i++) {
    if (b->per_worker && i + 2 * AHEAD < len) {
      __builtin_prefetch(&b->in_cnt[w][V[(i + 2 * AHEAD) * stride]], 1);
      if (b->newid) __builtin_prefetch(&b->newid[U[(i + 2 * AHEAD) * stride]]);
    }
    if (b->per_worker && i + AHEAD < len) __builtin_prefetch(&b->sources[b->in_cnt[w][V[(i + AHEAD) * stride]]], 1);
    uint32_t u = U[i * stride], v = V[i * stride];
    fill_arc(b, w, u, v);
    if (!b->directed && u != v) fill_arc(b, w, v, u);
  }
}

void gr_sink_flush(gr_sink *s) {
  gr_builder *b = s->b;
  int w = s->thread;
  uint32_t *keep = NULL;
  if (b->keep && b->pass == 0 && s->len > 0) { /* nothing to keep: no buffer yet, and no pointer into one */
    if (keep_room(b, w, s->len)) {
      keep = b->kept[w] + (b->weighted ? 3 : 2) * b->kept_len[w];
    } else {
      __atomic_store_n(&b->keep_failed, 1, __ATOMIC_RELAXED); /* the fill pass scans again */
    }
  }
  if (b->weighted) {
    flush_weighted(s, keep);
    return;
  }
  uint32_t *U = b->reverse ? s->dst : s->src, *V = b->reverse ? s->src : s->dst;
  int len = s->len;
  if (b->drop_loops) {
    int k = 0;
    for (int i = 0; i < len; i++)
      if (U[i] != V[i]) U[k] = U[i], V[k] = V[i], k++;
    len = k;
  }
  if (b->pass == 0) {
    if (keep) {
      for (int i = 0; i < len; i++) keep[2 * i] = U[i], keep[2 * i + 1] = V[i];
      b->kept_len[w] += len;
    }
    count_edges(b, w, U, V, len);
  } else {
    fill_edges(b, w, U, V, 1, len);
  }
  s->len = 0;
}

/* The fill pass from worker w's kept edges. */
static void replay(gr_builder *b, int w) {
  const uint32_t *p = b->kept[w];
  if (b->weighted) {
    for (int64_t i = 0; i < b->kept_len[w]; i++, p += 3) {
      fill_arc_w(b, w, p[0], p[1], gr_bits_float(p[2]));
      if (!b->directed && p[0] != p[1]) fill_arc_w(b, w, p[1], p[0], gr_bits_float(p[2]));
    }
  } else if (p) { /* NULL: this worker kept no edge */
    fill_edges(b, w, p, p + 1, 2, b->kept_len[w]);
  }
  free(b->kept[w]);
  b->kept[w] = NULL;
}

/* Runs one pass: worker w scans chunks [w*C/W, (w+1)*C/W). Returns the first error. */
static em_status run_pass(gr_builder *b, int workers, gr_progress *prog) {
  const gr_source *src = b->src;
  em_status first = EM_OK;
  int first_worker = workers;
  char msg[512] = "";
  int oom = 0;
#pragma omp parallel num_threads(workers) reduction(| : oom)
  {
    uint32_t *buf = malloc((b->weighted ? 3 : 2) * SINK_CAP * sizeof *buf);
    oom |= !buf;
#pragma omp for schedule(static, 1)
    for (int w = 0; w < workers; w++) {
      if (!buf) continue;
      gr_sink sink = {buf, buf + SINK_CAP, b->weighted ? (float *)(buf + 2 * SINK_CAP) : NULL, 0, SINK_CAP, b, w};
      int64_t begin = src->num_chunks * w / workers, end = src->num_chunks * (w + 1) / workers;
      if (b->pass == 1 && b->keep) {
        replay(b, w);
        gr_progress_add(prog, end - begin);
        continue;
      }
      for (int64_t c = begin; c < end; c++) {
        em_status st = src->scan(src->ctx, c, &sink);
        gr_sink_flush(&sink);
        if (src->text) gr_text_release(src->text, c);
        gr_progress_add(prog, 1);
        if (st) {
#pragma omp critical(gr_build_error)
          if (w < first_worker) { /* the message is thread-local: carry it over */
            first_worker = w;
            first = st;
            snprintf(msg, sizeof msg, "%s", em_last_error());
          }
          break;
        }
      }
    }
    free(buf);
  }
  if (oom) return gr_oom(src->op, 2 * SINK_CAP * 4);
  if (first) return em_set_error(first, "%s", msg);
  return EM_OK;
}

/* Dense ids sorted by decreasing out-degree, ties by id: a counting sort on degrees below
 * CAP, then a comparison sort of the few vertices above. newid[v] = position. */
#define DEGREE_BUCKETS 65536

static int cmp_desc_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

static em_status degree_order(uint32_t *newid, const uint32_t *out_degree, int64_t n) {
  int64_t *start = calloc(DEGREE_BUCKETS + 1, sizeof *start);
  if (!start) return gr_oom("graph build", DEGREE_BUCKETS * 8);
  int64_t big = 0;
  for (int64_t v = 0; v < n; v++) {
    uint32_t d = out_degree[v];
    if (d >= DEGREE_BUCKETS - 1) big++;
    else start[DEGREE_BUCKETS - 1 - d]++; /* bucket 0 holds the largest degrees */
  }
  uint64_t *top = malloc((size_t)(big ? big : 1) * sizeof *top);
  if (!top) {
    free(start);
    return gr_oom("graph build", (size_t)big * 8);
  }
  int64_t sum = big, k = 0;
  for (int b = 1; b <= DEGREE_BUCKETS - 1; b++) {
    int64_t c = start[b];
    start[b] = sum;
    sum += c;
  }
  for (int64_t v = 0; v < n; v++) {
    uint32_t d = out_degree[v];
    if (d >= DEGREE_BUCKETS - 1) top[k++] = ((uint64_t)d << 32) | (UINT32_MAX - (uint32_t)v);
    else newid[v] = (uint32_t)start[DEGREE_BUCKETS - 1 - d]++;
  }
  qsort(top, (size_t)big, sizeof *top, cmp_desc_u64);
  for (int64_t i = 0; i < big; i++) newid[UINT32_MAX - (uint32_t)top[i]] = (uint32_t)i;
  free(top);
  free(start);
  return EM_OK;
}

/* Weighted: sorts vertex v's (source, weight) pairs (gr_sort_weighted), fixing the
 * out-degree of each repeated source when dedup. Returns the arcs kept. key: deg words. */
static int64_t sort_weighted_vertex(em_graph *g, int64_t v, bool dedup, uint64_t *key) {
  return gr_sort_weighted(g->sources + g->offsets[v], g->weights + g->offsets[v], g->offsets[v + 1] - g->offsets[v],
                          dedup, key, g->out_degree);
}

/* Sorts each vertex's sources and, when asked, drops repeats (fixing the out-degree of
 * each repeated source). Returns the new arc count; offsets are rewritten. */
static int64_t sort_and_dedup(em_graph *g, bool dedup, int workers) {
  int64_t n = g->n, max_deg = 0;
  for (int64_t v = 0; v < n; v++)
    if (g->offsets[v + 1] - g->offsets[v] > max_deg) max_deg = g->offsets[v + 1] - g->offsets[v];
  uint32_t *kept = dedup ? gr_alloc((size_t)n * sizeof *kept) : NULL;
  if (dedup && !kept) return -1;
  int oom = 0;
#pragma omp parallel num_threads(workers) reduction(| : oom)
  {
    uint32_t *tmp = max_deg >= GR_SORT_TMP_FROM ? malloc((size_t)max_deg * sizeof *tmp) : NULL;
    oom |= max_deg >= GR_SORT_TMP_FROM && !tmp;
    uint64_t *key = g->weights ? malloc((size_t)(max_deg ? max_deg : 1) * sizeof *key) : NULL;
    oom |= g->weights && !key;
#pragma omp for schedule(dynamic, 256)
    for (int64_t v = 0; v < n; v++) {
      if (g->weights) {
        if (!key) continue;
        int64_t k = sort_weighted_vertex(g, v, dedup, key);
        if (dedup) kept[v] = (uint32_t)k;
        continue;
      }
      uint32_t *a = g->sources + g->offsets[v];
      int64_t deg = g->offsets[v + 1] - g->offsets[v];
      if (deg >= GR_SORT_TMP_FROM && !tmp) continue;
      gr_sort_u32(a, deg, tmp);
      if (!dedup) continue;
      int64_t w = deg ? 1 : 0;
      for (int64_t i = 1; i < deg; i++) {
        if (a[i] != a[w - 1]) a[w++] = a[i];
        else __atomic_fetch_sub(&g->out_degree[a[i]], 1, __ATOMIC_RELAXED);
      }
      kept[v] = (uint32_t)w;
    }
    free(tmp);
    free(key);
  }
  if (oom) {
    gr_free(kept);
    return -1;
  }
  if (!dedup) return g->m;
  /* Compaction: each worker moves its vertices' kept arcs to the front of its own range
   * (in parallel, never overtaking unread data), then the ranges move down in order. */
  int64_t *range_begin = malloc((size_t)(workers + 1) * sizeof *range_begin);
  int64_t *range_kept = malloc((size_t)workers * sizeof *range_kept);
  if (!range_begin || !range_kept) {
    free(range_begin), free(range_kept), gr_free(kept);
    return -1;
  }
  for (int w = 0; w <= workers; w++) range_begin[w] = n * w / workers;
#pragma omp parallel for schedule(static, 1) num_threads(workers)
  for (int w = 0; w < workers; w++) {
    int64_t to = g->offsets[range_begin[w]];
    for (int64_t v = range_begin[w]; v < range_begin[w + 1]; v++) {
      memmove(g->sources + to, g->sources + g->offsets[v], kept[v] * sizeof *g->sources);
      if (g->weights) memmove(g->weights + to, g->weights + g->offsets[v], kept[v] * sizeof *g->weights);
      to += kept[v];
    }
    range_kept[w] = to - g->offsets[range_begin[w]];
  }
  int64_t to = 0;
  for (int w = 0; w < workers; w++) {
    memmove(g->sources + to, g->sources + g->offsets[range_begin[w]], (size_t)range_kept[w] * sizeof *g->sources);
    if (g->weights)
      memmove(g->weights + to, g->weights + g->offsets[range_begin[w]], (size_t)range_kept[w] * sizeof *g->weights);
    to += range_kept[w];
  }
  g->offsets[0] = 0;
  for (int64_t v = 0; v < n; v++) g->offsets[v + 1] = g->offsets[v] + kept[v];
  free(range_begin);
  free(range_kept);
  gr_free(kept);
  return to;
}

static void free_kept(gr_builder *b, int workers) {
  for (int w = 0; b->kept && w < workers; w++) free(b->kept[w]);
  free(b->kept);
  free(b->kept_len);
  free(b->kept_cap);
  b->kept = NULL;
  b->kept_len = b->kept_cap = NULL;
  b->keep = false;
}

/* Keep the edges of the count pass? Within KEEP_BYTES and a quarter of the free memory
 * (gr_build_keep forces either way in tests). */
static void plan_keep(gr_builder *b, int workers) {
  long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  double bytes = (double)b->src->max_edges * (b->weighted ? 12 : 8), free_bytes = pages > 0 && page > 0 ? (double)pages * page : 0;
  b->keep = gr_build_keep > 0 || (gr_build_keep == 0 && bytes <= KEEP_BYTES && bytes <= free_bytes / 4);
  if (!b->keep) return;
  b->kept = calloc((size_t)workers, sizeof *b->kept);
  b->kept_len = calloc((size_t)workers, sizeof *b->kept_len);
  b->kept_cap = calloc((size_t)workers, sizeof *b->kept_cap);
  if (!b->kept || !b->kept_len || !b->kept_cap) free_kept(b, workers);
}

static void builder_free(gr_builder *b, int workers) {
  free_kept(b, workers);
  for (int w = 0; w < workers; w++) {
    if (b->in_cnt) gr_free(b->in_cnt[w]);
    if (b->out_cnt) gr_free(b->out_cnt[w]);
  }
  free(b->in_cnt);
  free(b->out_cnt);
  gr_free(b->in_shared);
  gr_free(b->out_shared);
  b->in_cnt = b->out_cnt = NULL;
  b->in_shared = b->out_shared = NULL;
}

/* After the count pass: out-degrees (dense order) into g->out_degree, in-degrees into
 * indeg, and per-worker counts turned into each worker's first slot within a vertex. */
static em_status merge_counts(gr_builder *b, em_graph *g, int64_t *indeg, int workers) {
  int64_t n = b->n;
  int too_big = 0;
#pragma omp parallel for schedule(static) reduction(| : too_big) num_threads(workers)
  for (int64_t v = 0; v < n; v++) {
    uint64_t in = 0, out = 0;
    if (b->per_worker) {
      for (int w = 0; w < workers; w++) {
        uint32_t c = b->in_cnt[w][v];
        b->in_cnt[w][v] = (uint32_t)in;
        in += c;
        out += b->out_cnt[w][v];
      }
    } else {
      in = (uint64_t)b->in_shared[v];
      out = (uint64_t)b->out_shared[v];
    }
    too_big |= in > UINT32_MAX || out > UINT32_MAX;
    indeg[v] = (int64_t)in;
    g->out_degree[v] = (uint32_t)out;
  }
  if (too_big)
    return em_set_error(EM_ERR_UNSUPPORTED, "%s: %s: a vertex has more than %u arcs, the limit of 32-bit degrees",
                        b->src->op, b->src->what, UINT32_MAX);
  if (b->per_worker)
    for (int w = 0; w < workers; w++) gr_free(b->out_cnt[w]), b->out_cnt[w] = NULL;
  return EM_OK;
}

static em_status alloc_counters(gr_builder *b, int workers) {
  size_t n = (size_t)b->n ? (size_t)b->n : 1;
  if (b->per_worker) {
    b->in_cnt = calloc((size_t)workers, sizeof *b->in_cnt);
    b->out_cnt = calloc((size_t)workers, sizeof *b->out_cnt);
    if (!b->in_cnt || !b->out_cnt) return gr_oom(b->src->op, (size_t)workers * 16);
    for (int w = 0; w < workers; w++) {
      b->in_cnt[w] = gr_calloc(n * sizeof(uint32_t));
      b->out_cnt[w] = gr_calloc(n * sizeof(uint32_t));
      if (!b->in_cnt[w] || !b->out_cnt[w]) return gr_oom(b->src->op, n * 8);
    }
  } else {
    b->in_shared = gr_calloc(n * sizeof(int64_t));
    b->out_shared = gr_calloc(n * sizeof(int64_t));
    if (!b->in_shared || !b->out_shared) return gr_oom(b->src->op, n * 16);
  }
  return EM_OK;
}

/* Internal order, offsets and fill cursors, once the degrees are known. */
static em_status lay_out(gr_builder *b, em_graph *g, int64_t *indeg, bool reorder, int workers) {
  int64_t n = g->n;
  if (reorder && n > 1) {
    g->to_internal = gr_alloc((size_t)n * sizeof *g->to_internal);
    g->to_dense = gr_alloc((size_t)n * sizeof *g->to_dense);
    if (!g->to_internal || !g->to_dense) return gr_oom(b->src->op, (size_t)n * 8);
    em_status st = degree_order(g->to_internal, g->out_degree, n);
    if (st) return st;
    uint32_t *out_int = gr_alloc((size_t)n * sizeof *out_int);
    if (!out_int) return gr_oom(b->src->op, (size_t)n * 4);
#pragma omp parallel for schedule(static) num_threads(workers)
    for (int64_t v = 0; v < n; v++) {
      uint32_t i = g->to_internal[v];
      g->to_dense[i] = (uint32_t)v;
      out_int[i] = g->out_degree[v];
      g->offsets[i + 1] = indeg[v];
    }
    gr_free(g->out_degree);
    g->out_degree = out_int;
    b->newid = g->to_internal;
  } else {
    memcpy(g->offsets + 1, indeg, (size_t)n * sizeof *indeg);
  }
  g->offsets[0] = 0;
  for (int64_t i = 0; i < n; i++) g->offsets[i + 1] += g->offsets[i];
  g->m = g->offsets[n];
  b->offsets = g->offsets;
  if (!b->per_worker) { /* absolute cursors, by dense id */
    for (int64_t v = 0; v < n; v++) b->in_shared[v] = g->offsets[b->newid ? b->newid[v] : v];
  } else { /* each worker's absolute cursors, in place of its first slots: one random access
            * per arc in the fill pass, not three, and no fresh memory */
    for (int w = 0; w < workers; w++) {
      uint32_t *c = b->in_cnt[w];
#pragma omp parallel for schedule(static) num_threads(workers)
      for (int64_t v = 0; v < n; v++) c[v] = (uint32_t)(g->offsets[b->newid ? b->newid[v] : v] + c[v]);
    }
  }
  g->sources = gr_alloc((size_t)(g->m ? g->m : 1) * sizeof *g->sources);
  if (!g->sources) return gr_oom(b->src->op, (size_t)g->m * 4);
  b->sources = g->sources;
  if (b->weighted) {
    g->weights = gr_alloc((size_t)(g->m ? g->m : 1) * sizeof *g->weights);
    if (!g->weights) return gr_oom(b->src->op, (size_t)g->m * 4);
    b->weights = g->weights;
  }
  return EM_OK;
}

em_status gr_build(em_graph **out, const gr_source *src, const em_graph_options *opts) {
  *out = NULL;
  if (src->n < 0 || src->n > GR_MAX_VERTICES)
    return em_set_error(EM_ERR_UNSUPPORTED, "%s: %s: %lld vertices, more than the %lld that 32-bit ids allow", src->op,
                        src->what, (long long)src->n, (long long)GR_MAX_VERTICES);
  int workers = gr_threads();
  gr_builder b = {.src = src,
                  .directed = opts->directed != 0,
                  .reverse = opts->reverse != 0,
                  .drop_loops = opts->drop_self_loops != 0,
                  .weighted = src->weighted,
                  .n = src->n};
  /* Per-worker counters when they fit the budget and no worker's count can pass 2^32. */
  uint64_t arcs = (uint64_t)src->max_edges * (b.directed ? 1 : 2);
  b.per_worker =
      gr_build_strategy == 1 ||
      (gr_build_strategy == 0 && (size_t)workers * (size_t)src->n * 8 <= PER_WORKER_BYTES && arcs <= UINT32_MAX);
  em_graph *g = gr_graph_new();
  int64_t *indeg = NULL;
  em_status st = EM_OK;
  if (!g) return gr_oom(src->op, sizeof *g);
  g->n = src->n;
  g->directed = b.directed;
  g->offsets = gr_alloc((size_t)(g->n + 1) * sizeof *g->offsets);
  g->out_degree = gr_alloc((size_t)(g->n ? g->n : 1) * sizeof *g->out_degree);
  indeg = gr_alloc((size_t)(g->n ? g->n : 1) * sizeof *indeg);
  if (!g->offsets || !g->out_degree || !indeg) {
    st = gr_oom(src->op, (size_t)g->n * 20);
    goto fail;
  }
  gr_progress prog;
  gr_progress_init(&prog, opts->progress, src->op, src->what, "building the CSR", 2 * src->num_chunks);
  plan_keep(&b, workers);
  if ((st = alloc_counters(&b, workers)) || (st = run_pass(&b, workers, &prog))) goto fail;
  if (b.keep_failed) free_kept(&b, workers); /* out of memory while keeping: scan again */
  if ((st = merge_counts(&b, g, indeg, workers))) goto fail;
  if ((st = lay_out(&b, g, indeg, opts->reorder == EM_GRAPH_REORDER_DEGREE, workers))) goto fail;
  gr_free(indeg);
  indeg = NULL;
  b.pass = 1;
  if ((st = run_pass(&b, workers, &prog))) goto fail;
  builder_free(&b, workers);
  int64_t m = sort_and_dedup(g, opts->drop_duplicates != 0, workers);
  if (m < 0) {
    st = gr_oom(src->op, (size_t)g->n * 4);
    goto fail;
  }
  if (m < g->m) g->sources = gr_shrink(g->sources, (size_t)(m ? m : 1) * sizeof *g->sources);
  if (m < g->m && g->weights) g->weights = gr_shrink(g->weights, (size_t)(m ? m : 1) * sizeof *g->weights);
  g->m = m;
  gr_progress_end(&prog);
  *out = g;
  return EM_OK;
fail:
  builder_free(&b, workers);
  gr_free(indeg);
  em_graph_free(g);
  return st;
}

/* ---- a source over an existing CSR */

#define CSR_CHUNK_VERTICES 65536

static em_status scan_csr(void *ctx, int64_t chunk, gr_sink *sink) {
  const gr_csr_view *c = ctx;
  int64_t begin = chunk * CSR_CHUNK_VERTICES,
          end = begin + CSR_CHUNK_VERTICES < c->n ? begin + CSR_CHUNK_VERTICES : c->n;
  const uint32_t *nb = c->neighbors;
  for (int64_t v = begin; v < end; v++) {
    uint32_t x = c->relabel ? c->relabel[v] : (uint32_t)v;
    for (int64_t j = c->offsets[v]; j < c->offsets[v + 1]; j++) {
      uint32_t y = c->relabel ? c->relabel[nb[j]] : nb[j];
      if (c->weights) {
        if (c->in_arcs) gr_sink_push_w(sink, y, x, c->weights[j]);
        else gr_sink_push_w(sink, x, y, c->weights[j]);
      } else if (c->in_arcs) gr_sink_push(sink, y, x);
      else gr_sink_push(sink, x, y);
    }
  }
  return EM_OK;
}

void gr_csr_source(gr_source *src, gr_csr_view *view, const char *op, const char *what) {
  *src = (gr_source){.op = op,
                     .what = what,
                     .n = view->n,
                     .max_edges = view->offsets[view->n],
                     .num_chunks = (view->n + CSR_CHUNK_VERTICES - 1) / CSR_CHUNK_VERTICES,
                     .scan = scan_csr,
                     .ctx = view,
                     .weighted = view->weights != NULL};
}
