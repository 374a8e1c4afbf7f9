/* pr_tiles.c - cache blocking of PageRank's "cold" arcs.
 *
 * With vertices ordered by out-degree, most arcs come from the first few hundred
 * thousand sources, whose contributions stay in the L2 cache while the pull pass
 * gathers them. The remaining arcs read contributions scattered over megabytes: each
 * such read fetches a 64-byte line from memory for 4 useful bytes, and on a graph like
 * Kronecker scale 22 those reads are half of all memory traffic.
 *
 * So the arcs whose source lies beyond the hot range are copied once into tiles: vertex
 * block b (destinations) x source segment s, both sized so that a segment's slice of the
 * contributions and a block's slice of the partial sums fit in L2 together. Each
 * iteration first sums every block's cold arcs tile by tile (one thread per block, in
 * segment order: deterministic), then the pull pass gathers each vertex's hot prefix (its
 * sources are sorted, so the hot ones come first) and adds the block's partial sum.
 * A tile re-reads the lines of its segment that its arcs touch, so tiling is used only
 * when that comes to fewer lines than the scattered reads fetch, and only when the copy
 * (one 32-bit word per cold arc, gr_tiles in graph_impl.h) takes at most half the memory
 * of the CSR's sources. The hot set is one segment, or the fewest whole segments that
 * bring the copy down to a quarter of the sources (EMBER_PAGERANK_HOT_SEGMENTS=K sets K
 * for measurements).
 *
 * The tiles are built over a gr_tiles_csr: rows (destinations) whose sources are slots
 * into the contributions, plus optionally each slot's key, the order that says which
 * sources are hot (key < hot) and which segment a cold one falls in (key >> shift). The
 * single process's graph is its own key (its internal order is by out-degree); a rank of
 * a partitioned graph (pagerank_dist.c) numbers its slots in the global key order, so its
 * hot slots are a prefix too, and segments cut by the global key make every vertex's sum
 * (per segment, then hot) the same whatever the partition. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "graph_impl.h"

int gr_tiles_slice = 0;
int gr_tiles_delta_bits = 0;

static int64_t l2_bytes(void) {
  long b = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return b > (1 << 18) ? b : (2 << 20);
}

void gr_tiles_free(gr_tiles *t) {
  gr_free(t->hot_len);
  gr_free(t->tile_word);
  gr_free(t->seg_slot);
  gr_free(t->word);
  memset(t, 0, sizeof *t);
}

/* The segment of slot u: its key's. */
static inline int64_t seg_of(const gr_tiles_csr *c, int shift, uint32_t u) {
  return (int64_t)(c->key ? c->key[u] : u) >> shift;
}

/* Walks v's cold sources (after its hot prefix) segment by segment. */
#define FOR_COLD_RUNS(c, t, v, SEG, BEGIN, END, ...)                           \
  do {                                                                         \
    int64_t j_ = (c)->offsets[v] + (t)->hot_len[v], e_ = (c)->offsets[(v) + 1]; \
    while (j_ < e_) {                                                          \
      int64_t SEG = seg_of(c, (t)->shift, (c)->sources[j_]), BEGIN = j_;       \
      while (j_ < e_ && seg_of(c, (t)->shift, (c)->sources[j_]) == SEG) j_++;  \
      int64_t END = j_;                                                        \
      __VA_ARGS__;                                                             \
    }                                                                          \
  } while (0)

em_status gr_tiles_build(gr_tiles *t, const em_graph *g, bool force) {
  int64_t sources = 0; /* vertices with out-arcs: the contributions that are ever read */
  for (int64_t v = 0; v < g->n; v++) sources += g->out_degree[v] > 0;
  gr_tiles_csr c = {.n = g->n, .m = g->m, .offsets = g->offsets, .sources = g->sources, .slots = g->n,
                    .keys = g->n, .active = sources, .out_degree = g->out_degree};
  return gr_tiles_build_csr(t, &c, force);
}

em_status gr_tiles_build_csr(gr_tiles *t, const gr_tiles_csr *c, bool force) {
  memset(t, 0, sizeof *t);
  if (gr_tiles_slice < 0) return EM_OK;
  bool check = !gr_tiles_slice && !force; /* forced or test-sized tiles skip the cost checks */
  int64_t n = c->n, slice = gr_tiles_slice ? gr_tiles_slice : l2_bytes() / 2 / (int64_t)sizeof(float);
  int64_t sources = c->active;
  if (force && !gr_tiles_slice) /* forced on a small graph: tiles over a quarter of it */
    while (slice > 1 && slice * 4 > sources) slice /= 2;
  if (sources <= slice) return EM_OK; /* everything is hot already */
  t->shift = 0; /* segments of a power of two: a shift, not a division, per arc */
  while (((int64_t)2 << t->shift) <= slice) t->shift++;
  slice = (int64_t)1 << t->shift;
  t->seg = slice;
  t->nseg = (c->keys + slice - 1) / slice;
  t->dblock = slice;
  t->nblocks = (n + slice - 1) / slice;
  /* The hot sources: one segment's worth, or (out-degrees say how many arcs each keeps
   * from the copy) the fewest whole segments that leave a copy of at most a quarter of the
   * CSR's sources. A wider hot set reads contributions from beyond L2 but keeps the copy
   * affordable: at Twitter scale (1.81B arcs) one segment leaves 45% of the arcs cold,
   * eight 18%; the job took 33.9 s for 20 iterations at 13.4 GiB with one, 44.3 s at 11.4
   * GiB with eight, 56.9 s at 11.0 GiB untiled. Ranks of a partitioned graph (keys, no
   * out-degrees) keep one segment, which every rank agrees on. */
  t->hot = slice;
  if (c->out_degree) {
    int64_t hot_arcs = 0, u = 0;
    for (;; t->hot *= 2) {
      for (; u < t->hot && u < c->slots; u++) hot_arcs += c->out_degree[u];
      if ((double)(c->m - hot_arcs) * 4 <= (double)c->m || t->hot >= sources) break;
    }
    if (check && (double)(c->m - hot_arcs) * 4 > (double)c->m) {
      memset(t, 0, sizeof *t);
      return EM_OK;
    }
  }
  const char *env = getenv("EMBER_PAGERANK_HOT_SEGMENTS");
  if (env && atoi(env) > 0) t->hot = slice * atoi(env);
  if (sources <= t->hot) {
    memset(t, 0, sizeof *t);
    return EM_OK;
  }
  int64_t ntiles = t->nblocks * t->nseg;
  t->sbits = t->shift;
  int dbits = gr_tiles_delta_bits > 0 ? gr_tiles_delta_bits : t->sbits > 0 ? 32 - t->sbits : 31;
  if (t->sbits + dbits > 32 || dbits < 2) { /* segments wider than any cache: no tiles */
    memset(t, 0, sizeof *t);
    return EM_OK;
  }
  t->esc = ((uint32_t)1 << dbits) - 1;
  t->hot_len = gr_alloc((size_t)(n ? n : 1) * sizeof *t->hot_len);
  t->tile_word = gr_calloc((size_t)(ntiles + 1) * sizeof *t->tile_word);
  t->seg_slot = gr_alloc((size_t)(t->nseg + 1) * sizeof *t->seg_slot);
  if (!t->hot_len || !t->tile_word || !t->seg_slot) goto oom;
  /* the first slot of each segment (keys ascend with the slots; a segment holds at most
   * seg slots, so a slot's offset from its segment's first fits in sbits) */
  for (int64_t q = 0, u = 0; q <= t->nseg; q++) {
    while (u < c->slots && (c->key ? (int64_t)c->key[u] : u) < (q << t->shift)) u++;
    t->seg_slot[q] = u;
  }
  /* hot prefixes, and each tile's words (counted at tile + 1) */
  int64_t cold = 0;
  const uint64_t hot = (uint64_t)t->hot;
  const uint32_t *key = c->key;
  int failed = 0;
#pragma omp parallel num_threads(gr_threads())
  {
    int64_t *last = malloc((size_t)t->nseg * sizeof *last);
    if (!last) {
#pragma omp atomic write
      failed = 1;
    }
#pragma omp for schedule(dynamic, 1) reduction(+ : cold)
    for (int64_t b = 0; b < t->nblocks; b++) {
      if (!last) continue;
      int64_t v0 = b * t->dblock, v1 = v0 + t->dblock < n ? v0 + t->dblock : n;
      for (int64_t s = 0; s < t->nseg; s++) last[s] = v0;
      for (int64_t v = v0; v < v1; v++) {
        /* the list is sorted: the cold sources are its tail, read backwards (a bisection
         * would miss the cache at every probe) */
        int64_t first = c->offsets[v], j = c->offsets[v + 1];
        while (j > first && (key ? key[c->sources[j - 1]] : c->sources[j - 1]) >= hot) j--;
        t->hot_len[v] = (uint32_t)(j - first);
        FOR_COLD_RUNS(c, t, v, s, begin, end, {
          t->tile_word[b * t->nseg + s + 1] += end - begin + (v - last[s] >= t->esc ? 2 : 0);
          last[s] = v;
          cold += end - begin;
        });
      }
    }
    free(last);
  }
  if (failed) goto oom;
  /* Worth it? Unblocked, each cold arc fetches a cache line of contributions from far
   * away. A tile fetches each line of its segment that its arcs touch, once: for a arcs
   * over a segment of L lines, L (1 - e^(-a/L)) expected. Tiles when that comes to fewer
   * lines in all (their fetches also stay within one segment at a time, which the plain
   * pull's do not: at Twitter scale the model's 0.85 of the lines ran 1.28x faster). */
  double lines = (double)t->seg * sizeof(float) / 64, fetched = 0;
  for (int64_t k = 0; k < ntiles; k++) {
    double a = (double)t->tile_word[k + 1];
    if (a > 0) fetched += lines * -expm1(-a / lines);
    t->tile_word[k + 1] += t->tile_word[k];
  }
  int64_t words = t->tile_word[ntiles];
  /* The copy costs memory too: at most half the CSR's sources array (the hot set above
   * aims at a quarter). */
  if (check && (fetched > (double)cold || (double)words * 4 > (double)c->m * 2)) {
    gr_tiles_free(t);
    return EM_OK;
  }
  t->word = gr_alloc((size_t)(words ? words : 1) * sizeof *t->word);
  if (!t->word) goto oom;
#pragma omp parallel num_threads(gr_threads())
  {
    int64_t *last = malloc((size_t)t->nseg * sizeof *last), *at = malloc((size_t)t->nseg * sizeof *at);
    if (!last || !at) {
#pragma omp atomic write
      failed = 1;
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t b = 0; b < t->nblocks; b++) {
      if (!last || !at) continue;
      int64_t v0 = b * t->dblock, v1 = v0 + t->dblock < n ? v0 + t->dblock : n;
      for (int64_t s = 0; s < t->nseg; s++) last[s] = v0, at[s] = t->tile_word[b * t->nseg + s];
      for (int64_t v = v0; v < v1; v++)
        FOR_COLD_RUNS(c, t, v, s, begin, end, {
          uint32_t *w = t->word + at[s];
          int64_t delta = v - last[s], base = t->seg_slot[s];
          if (delta >= t->esc) { /* too far for the word's field: the gap in a word of its own */
            *w++ = t->esc << t->sbits;
            *w++ = (uint32_t)delta;
            delta = 0;
          }
          for (int64_t j = begin; j < end; j++, delta = 0) *w++ = (uint32_t)delta << t->sbits | (uint32_t)(c->sources[j] - base);
          at[s] = w - t->word;
          last[s] = v;
        });
    }
    free(last);
    free(at);
  }
  if (failed) goto oom;
  t->cold_arcs = cold;
  return EM_OK;
oom:
  gr_tiles_free(t);
  return gr_oom("graph pagerank", (size_t)n * 4);
}

/* acc[v] = the sum of v's cold arcs' contributions, for the vertices of block b: each
 * run of one vertex's arcs in a segment summed in double, then added to acc in float. */
void gr_tiles_gather(const gr_tiles *t, int64_t b, const float *restrict contrib, float *restrict acc, int64_t n) {
  int64_t v0 = b * t->dblock, v1 = v0 + t->dblock < n ? v0 + t->dblock : n;
  float *restrict a = acc + v0;
  memset(a, 0, (size_t)(v1 - v0) * sizeof *a);
  const int sbits = t->sbits;
  const uint32_t esc = t->esc, smask = ((uint32_t)1 << sbits) - 1;
  for (int64_t s = 0; s < t->nseg; s++) {
    int64_t k = b * t->nseg + s;
    const float *restrict cs = contrib + t->seg_slot[s];
    const uint32_t *w = t->word + t->tile_word[k], *end = t->word + t->tile_word[k + 1];
    if (w == end) continue;
    uint32_t dst = 0;
    double sum = 0;
    for (; w < end; w++) {
      uint32_t d = *w >> sbits;
      if (d) { /* the next vertex's run: the last one's sum is complete (+0 before the first) */
        a[dst] += (float)sum;
        sum = 0;
        if (d == esc) {
          dst += *++w;
          continue;
        }
        dst += d;
      }
      sum += cs[*w & smask];
    }
    a[dst] += (float)sum;
  }
}
