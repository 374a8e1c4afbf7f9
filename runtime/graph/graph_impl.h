/* graph_impl.h - the layout of a graph and the pieces the graph files share: memory,
 * timing, progress, mapped text files, the CSR builder and its edge sources, sorting and
 * checksums. Nothing outside runtime/graph (and its tests) includes it. */
#ifndef EMBER_GRAPH_IMPL_H
#define EMBER_GRAPH_IMPL_H

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "ember/graph.h"
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#define GR_MAX_VERTICES ((int64_t)UINT32_MAX) /* CSR ids are 32-bit */

struct em_graph {
  int64_t n, m; /* vertices; arcs in the CSR */
  bool directed;
  int64_t *offsets; /* [n + 1] in-arcs of internal vertex v: sources[offsets[v]..offsets[v+1]) */
  uint32_t *sources; /* [m] internal ids, sorted within each vertex */
  float *weights; /* [m] the weight of each arc, beside sources; NULL: unweighted (all 1) */
  uint32_t *out_degree; /* [n] by internal id */
  uint32_t *to_dense; /* [n] internal -> dense; NULL when both orders agree */
  uint32_t *to_internal; /* [n] dense -> internal; NULL likewise */
  int64_t *original; /* [n] dense -> original id, ascending; NULL: dense + id_base */
  int64_t id_base; /* 1 for Matrix Market, else 0 */
  int64_t *label_offsets; /* [n + 1] into label_data; NULL: no labels. Empty range: none */
  char *label_data; /* NUL-terminated names */
  void *map; /* the ember file the arrays may point into, or NULL */
  size_t map_bytes;
};

static inline uint32_t gr_internal(const em_graph *g, int64_t dense) {
  return g->to_internal ? g->to_internal[dense] : (uint32_t)dense;
}
static inline uint32_t gr_dense(const em_graph *g, int64_t internal) {
  return g->to_dense ? g->to_dense[internal] : (uint32_t)internal;
}

/* ---- memory: 64-byte aligned, counted in em_memory_allocated(); NULL when out of memory */
void *gr_alloc(size_t bytes);
void *gr_calloc(size_t bytes);
void gr_free(void *p);
/* Shrinks an allocation (in place for large ones); returns the possibly moved pointer. */
void *gr_shrink(void *p, size_t bytes);
/* Frees an array of g unless it lies in g's file mapping. */
void gr_free_array(em_graph *g, void *p);
em_graph *gr_graph_new(void);
em_status gr_oom(const char *op, size_t bytes);

/* ---- small utilities */
int gr_threads(void);
/* Reports progress on stderr (see em_graph_options.progress). Any thread may add. */
typedef struct gr_progress {
  bool on;
  const char *op, *what, *stage;
  int64_t total;
  atomic_llong done;
  atomic_int printing;
  double start, last;
} gr_progress;
void gr_progress_init(gr_progress *p, int mode, const char *op, const char *what, const char *stage, int64_t total);
void gr_progress_add(gr_progress *p, int64_t delta);
void gr_progress_end(gr_progress *p);

/* ---- mapped text files, cut into chunks at line starts */
typedef struct gr_text {
  const char *op, *path;
  const char *data;
  size_t size;
  int64_t num_chunks;
  size_t *chunk_begin; /* [num_chunks + 1] byte offsets, each at a line start */
  int64_t *chunk_lines; /* [num_chunks] lines in each chunk, filled by the caller's first pass */
  int64_t first_line; /* line number of byte `body` (after a header the caller parsed) */
} gr_text;
em_status gr_text_open(gr_text *t, const char *op, const char *path);
/* Cuts [body, size) into chunks; body is the offset of a line start. */
em_status gr_text_chunk(gr_text *t, size_t body, int64_t first_line);
/* Drops the chunk's pages from this process's resident set (the page cache keeps them). */
void gr_text_release(const gr_text *t, int64_t chunk);
void gr_text_close(gr_text *t);

/* A parse error found in a chunk: the first chunk with one wins, and its line number is
 * the lines of the chunks before it plus the line within it. */
typedef struct gr_chunk_error {
  em_status status;
  int64_t line; /* 0-based within the chunk */
  char msg[200];
} gr_chunk_error;
em_status gr_text_report(const gr_text *t, const gr_chunk_error *errors);

/* Reads an unsigned decimal integer at *p (< end); skips nothing. Returns 0 on success, 1
 * when there is no digit, 2 when the value exceeds UINT64_MAX. */
static inline int gr_parse_u64(const char **p, const char *end, uint64_t *out) {
  const char *s = *p;
  if (s >= end || (unsigned)(*s - '0') > 9) return 1;
  uint64_t v = 0;
  do {
    unsigned d = (unsigned)(*s - '0');
    if (v > (UINT64_MAX - d) / 10) return 2;
    v = v * 10 + d;
    s++;
  } while (s < end && (unsigned)(*s - '0') <= 9);
  *p = s;
  *out = v;
  return 0;
}
static inline bool gr_is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }
/* Reads an edge weight at *p (< end): a decimal number as strtod reads it, followed by a
 * blank, a newline or the end. Returns 0 and *out (finite, >= 0, within float32), else
 * fills msg (cap bytes) with what is wrong and returns GR_WEIGHT_*. */
enum { GR_WEIGHT_NOT_A_NUMBER = 1, GR_WEIGHT_NAN, GR_WEIGHT_INFINITE, GR_WEIGHT_NEGATIVE };
int gr_parse_weight(const char **p, const char *end, float *out, char *msg, size_t cap);
/* Matrix Market: checks a number at *p, [+-]digits[.digits][e[+-]digits] (integer:
 * [+-]digits) followed by a blank, a newline or the end; moves *p past it when true. */
bool gr_mtx_read_value(const char **p, const char *end, bool integer);
/* Shows at most 40 characters of the line at s for an error message. */
void gr_quote_line(char *buf, size_t cap, const char *s, const char *end);

/* ---- the CSR builder
 * A source pushes its edges (dense ids) chunk by chunk, into per-thread sinks. The builder
 * asks for the edges twice, once to count degrees and once to fill the CSR, so that no edge
 * list is ever stored: a source must push the same edges each time. */
typedef struct gr_sink gr_sink;
typedef struct gr_builder gr_builder;
struct gr_sink {
  uint32_t *src, *dst;
  float *w; /* weights, when the source is weighted (gr_sink_push_w); else NULL */
  int len, cap;
  gr_builder *b;
  int thread;
};
void gr_sink_flush(gr_sink *s);
static inline void gr_sink_push(gr_sink *s, uint32_t u, uint32_t v) {
  s->src[s->len] = u;
  s->dst[s->len] = v;
  if (++s->len == s->cap) gr_sink_flush(s);
}
static inline void gr_sink_push_w(gr_sink *s, uint32_t u, uint32_t v, float w) {
  s->w[s->len] = w;
  gr_sink_push(s, u, v);
}

typedef struct gr_source {
  const char *op; /* names the caller in errors and progress: "load_snap" */
  const char *what; /* the file, or the generator */
  int64_t n; /* vertices; pushed ids are below n */
  int64_t max_edges; /* an upper bound on the edges pushed by one pass */
  int64_t num_chunks;
  em_status (*scan)(void *ctx, int64_t chunk, gr_sink *sink);
  void *ctx;
  const gr_text *text; /* when set, chunks' pages are released after each pass */
  bool weighted; /* pushes weights (gr_sink_push_w): the graph gets g->weights */
} gr_source;

/* Builds the in-edge CSR of the source's edges under opts (direction, reversal, drops,
 * reordering). The result has no original ids or labels: the caller adds them. */
em_status gr_build(em_graph **out, const gr_source *src, const em_graph_options *opts);
/* Forces the builder's strategy in tests: 0 auto, 1 per-thread counters, 2 atomics. */
extern int gr_build_strategy;
/* Tests: 1 keeps the count pass's edges for the fill pass, -1 scans twice, 0 decides. */
extern int gr_build_keep;

/* A source over an existing CSR of out-arcs or in-arcs (the .sg reader, rebuilds). */
typedef struct gr_csr_view {
  int64_t n;
  const int64_t *offsets;
  const void *neighbors; /* uint32 or int32 ids < n */
  bool in_arcs; /* true: neighbors[offsets[v]..] are sources of v */
  const uint32_t *relabel; /* ids pushed are relabel[id] when set */
  const float *weights; /* [offsets[n]] beside neighbors, or NULL */
} gr_csr_view;
void gr_csr_source(gr_source *src, gr_csr_view *view, const char *op, const char *what);

/* ---- sorting and checksums */
/* Sorts a[0..n); tmp (n elements, may be NULL: slower) serves lists of GR_SORT_TMP_FROM and up. */
#define GR_SORT_TMP_FROM 97
void gr_sort_u32(uint32_t *a, int64_t n, uint32_t *tmp);
/* A float's bits and back (weights travel and sort as uint32: for floats >= 0 the bits
 * order as the values). */
static inline uint32_t gr_float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
static inline float gr_bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
/* Sorts n (source, weight) pairs by source, then weight; with dedup the weights of a
 * repeated source add (in double, in that order) and, when out_degree is given, the
 * source's out-degree drops by its repeats. Returns the pairs kept. key: n words. The
 * single-process build and the partitioned one share it, so their arcs are the same. */
int64_t gr_sort_weighted(uint32_t *a, float *wt, int64_t n, bool dedup, uint64_t *key, uint32_t *out_degree);
/* PageRank's weights option (EM_PAGERANK_WEIGHTS_*) against a graph with or without
 * weights; `saved` names what else may carry them ("an ember file", "a cache"). */
em_status gr_check_weights(const char *op, int weights, bool weighted, const char *saved);
void gr_sort_u64(uint64_t *a, int64_t n); /* sparse id sets (not a hot path) */
void gr_radix_u64(uint64_t *a, int64_t n, uint64_t *tmp); /* tmp: n elements */
/* 64-bit checksum of bytes: XXH64 of fixed 1 MiB blocks (in parallel), then XXH64 of the
 * block hashes, so the value does not depend on the thread count. */
em_status gr_checksum(const void *data, size_t bytes, uint64_t seed, uint64_t *out);
uint64_t gr_xxh64(const void *data, size_t len, uint64_t seed);

/* ---- PageRank's cache blocking of cold arcs (pr_tiles.c) */
typedef struct gr_tiles {
  int64_t seg; /* source segment width (1 << shift) */
  int64_t hot; /* sources (keys) below hot are hot: a multiple of seg */
  int shift;
  int64_t nseg, dblock, nblocks;
  uint32_t *hot_len; /* [n] hot prefix of each vertex's sources; NULL: no tiles */
  int64_t *tile_word; /* [nblocks * nseg + 1] first word of tile (block, segment) */
  int64_t *seg_slot; /* [nseg + 1] the first slot of each segment */
  /* [words] tile by tile, a word per cold arc: (the destination's distance from the
   * previous arc's in the tile, from the block's first vertex for the first) << sbits |
   * the source's offset from its segment's first slot. A distance of esc or more takes
   * a word (esc << sbits) and a word with the distance before the arc's own (then 0). */
  uint32_t *word;
  int sbits;
  uint32_t esc;
  int64_t cold_arcs;
} gr_tiles;
/* What tiles are built over: rows of in-arcs whose sources are contribution slots, sorted
 * within each row, and the key of each slot (ascending with the slot) that makes a source
 * hot (key < seg) and gives its segment (key >> shift). */
typedef struct gr_tiles_csr {
  int64_t n, m; /* rows (destinations), arcs */
  const int64_t *offsets; /* [n + 1] */
  const uint32_t *sources; /* [m] slots */
  const uint32_t *key; /* [slots] ascending; NULL: each slot is its own key */
  int64_t slots, keys; /* contribution slots; the key space [0, keys) the segments cut */
  int64_t active; /* keys ever read (sources with out-arcs), over the whole graph: sizes forced tiles */
  const uint32_t *out_degree; /* [slots] arcs out of each slot (key NULL): an early cost check; or NULL */
} gr_tiles_csr;
/* Leaves t->hot_len NULL when tiling would not pay. */
extern int gr_tiles_slice; /* tests: > 0 forces tiles of this many vertices; < 0 disables */
extern int gr_tiles_delta_bits; /* tests: > 0 narrows the words' distance field (more escapes) */
/* force: build the tiles even where they would not pay (blocking = tiles). */
em_status gr_tiles_build(gr_tiles *t, const em_graph *g, bool force);
em_status gr_tiles_build_csr(gr_tiles *t, const gr_tiles_csr *c, bool force);
void gr_tiles_gather(const gr_tiles *t, int64_t block, const float *contrib, float *acc, int64_t n);
void gr_tiles_free(gr_tiles *t);
/* Tests: 1 forces PageRank's prefetching gather (untiled), -1 disables it, 0 decides. */
extern int gr_pr_prefetch;
/* Tests: > 0 sets the hot sources of propagation blocking (0: L2-sized). */
extern int gr_bins_hot;

/* ---- PageRank's propagation blocking of cold arcs (pr_bins.c) */
#define GR_BINS_CHUNKS 16
typedef struct gr_bins {
  int64_t hot; /* sources below stay in the pull pass */
  uint32_t *hot_len; /* [n] hot prefix of each vertex's sources */
  int64_t cold, nbins; /* cold arcs; bins of 65536 destinations */
  int64_t chunk[GR_BINS_CHUNKS + 1]; /* cold source boundaries of the scatter chunks */
  int64_t chunk_arc[GR_BINS_CHUNKS + 1]; /* their first cold out-arc */
  uint16_t *bin_of; /* [cold] bin of each cold out-arc, by source */
  uint16_t *dst; /* [cold] destination offset within its bin, bin by bin */
  float *val; /* [cold] the values scattered, laid out as dst */
  int64_t *bin_start; /* [nbins + 1] */
  int64_t *cursor0; /* [chunks * nbins] each chunk's first slot in each bin */
  double *acc; /* [n] each vertex's cold sum */
  int failed;
} gr_bins;
/* The sources whose contributions stay in L2 (a power of two): the hot ones. */
int64_t gr_pr_hot_sources(void);
em_status gr_bins_build(gr_bins *b, const em_graph *g, int64_t hot);
void gr_bins_scatter(const gr_bins *b, int chunk, const float *contrib, const uint32_t *out_degree, int64_t *cur);
void gr_bins_gather(const gr_bins *b, int64_t bin, int64_t n);
void gr_bins_free(gr_bins *b);

/* ---- PageRank's pieces shared with the GPU path (pagerank_cuda.c) */
/* The personalization vector p checked and normalised, in internal order (*out gr_alloc'd). */
em_status gr_pagerank_teleport(const em_graph *g, const em_tensor *p, double **out);
/* em_graph_pagerank with opts->device a CUDA device (options already checked). */
em_status gr_pagerank_deliver(const char *op, const em_graph *g, const float *x, double scale, const double *residual,
                              int64_t iters, em_tensor **scores, em_tensor **residuals);
em_status gr_pagerank_cuda(em_tensor **scores, em_tensor **residuals, em_pagerank_stats *stats, const em_graph *g,
                           const em_pagerank_options *opts);
/* The CUDA plugin's extra `name` (cuda_plugin.h) for work on `device`, or NULL with an
 * EM_ERR_DEVICE error naming op and the device when there is no such GPU. */
void (*gr_cuda_extra(const char *op, em_device device, const char *name))(void);

/* ---- format readers (one file each) */
em_status gr_load_snap(em_graph **out, const char *path, const em_graph_options *opts);
em_status gr_load_mtx(em_graph **out, const char *path, const em_graph_options *opts);
em_status gr_load_sg(em_graph **out, const char *path, const em_graph_options *opts);
em_status gr_load_ember(em_graph **out, const char *path, const em_graph_options *opts);

/* The scalar reference of Kronecker edge e (tests check the batched generator with it). */
void gr_kronecker_edge_ref(int32_t scale, uint64_t seed, uint64_t e, uint32_t *u, uint32_t *v);

/* Reads a 1-D tensor of n values as doubles (converted, made contiguous). *out is gr_alloc'd. */
em_status gr_tensor_values(const char *op, const em_tensor *t, int64_t n, double **out);

/* ---- exact reductions: PageRank's sums (scores, residual, dangling mass) add terms in
 * [0, 1] as integers in units of 2^-60, so that their value does not depend on the order
 * of the additions, the block sizes, the thread count or the rank count. */
#define GR_FIX_ONE 0x1p60
static inline int64_t gr_fix(double x) { return (int64_t)(x * GR_FIX_ONE + 0.5); }
static inline double gr_unfix(int64_t s) { return (double)s / GR_FIX_ONE; }
/* A Jacobi iteration's end from its exact sums (scores, L1 change, dangling mass): the
 * next normalisation *scale (1 for GAPBS, whose mass leaks) and the next teleport
 * coefficient *coef; returns the residual. pagerank_dist.c and its GPU form share it. */
static inline double gr_pr_close(const int64_t sums[3], bool gapbs, double damping, double *scale, double *coef) {
  double total = gr_unfix(sums[0]);
  *scale = gapbs || !(total > 0) ? 1 : 1 / total;
  double dangling = *scale * gr_unfix(sums[2]);
  *coef = gapbs ? 1 - damping : (1 - damping) + damping * dangling;
  return gr_unfix(sums[1]);
}

/* The sum of contrib over a list of sources, in double. Short lists (most of them) take a
 * scalar loop; long ones 16 gathers at a time with AVX-512 when the build targets it.
 * Either way the order of additions depends on the list alone (pagerank.c and
 * pagerank_dist.c both sum with it, which is what makes their scores the same bits). */
/* One vertex of a Jacobi sweep (pagerank.c, pagerank_dist.c) from its gathered sum `in`:
 * its new score y[v] = d in + t, its contribution next[slot] = y inv (slot: where the
 * contributions keep v, v itself in one process), and the exact (fixed-point)
 * sums of scores, residual against scale x and dangling mass added to s[0..2]. */
static inline __attribute__((always_inline)) void gr_pr_update(float *restrict y, float *restrict next,
                                                               const float *restrict x, const float *restrict inv,
                                                               int64_t v, int64_t slot, double d, double in,
                                                               double t, double scale, int64_t *restrict s) {
  float nv = (float)(d * in + t);
  y[v] = nv;
  s[0] += gr_fix(nv);
  s[1] += gr_fix(fabs((double)nv - scale * (double)x[v]));
  next[slot] = nv * inv[v];
  s[2] += inv[v] == 0 ? gr_fix(nv) : 0;
}

static inline __attribute__((always_inline)) double gr_pr_gather(const float *restrict contrib,
                                                                 const uint32_t *restrict src, int64_t deg) {
  double s = 0;
  int64_t j = 0;
#ifdef __AVX512F__
  if (deg >= 16) {
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
    for (; j + 16 <= deg; j += 16) {
      __m512 g = _mm512_i32gather_ps(_mm512_loadu_si512(src + j), contrib, 4);
      lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(g)));
      hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(g), 1))));
    }
    s = _mm512_reduce_add_pd(_mm512_add_pd(lo, hi));
  }
#endif
  for (; j < deg; j++) s += contrib[src[j]];
  return s;
}

/* ---- partitioned graphs (partition.c, ingest_dist.c, part_io.c, pagerank_dist.c) */
struct em_dist_group;
struct em_graph_part {
  struct em_dist_group *group; /* retained */
  int rank, size;
  int64_t n, m; /* the whole graph's vertices and arcs */
  int64_t *bounds; /* [size + 1] rank r owns dense vertices [bounds[r], bounds[r+1]) */
  int64_t begin, end, nl, ml; /* this rank's range, its vertex count and in-arc count */
  int64_t *offsets; /* [nl + 1] */
  uint32_t *sources; /* [ml] slots: v - begin for own sources, nl + i for mirror i */
  float *weights; /* [ml] each in-arc's weight, beside sources; NULL: unweighted */
  double *out_weight; /* [nl] W(u), the sum of u's out-arc weights (as pagerank.c sums them); with weights */
  int64_t nmirror;
  uint32_t *mirror; /* [nmirror] global ids, ascending (so grouped by owner, in rank order) */
  int64_t *recv_count; /* [size] mirrors owned by each rank: values received per iteration */
  int64_t *send_count; /* [size] own vertices each rank mirrors: values sent */
  int64_t nsend;
  uint32_t *send; /* [nsend] local ids of own vertices to send, rank by rank, ascending */
  uint32_t *out_degree; /* [nl] */
  int64_t *original; /* [nl] original ids; NULL: dense id + id_base */
  int64_t id_base;
  bool directed;
};

/* Collectives on raw arrays (counts in elements; zero counts allowed). */
em_status gr_allreduce(struct em_dist_group *g, void *data, int64_t count, em_dtype dt, int op);
em_status gr_alltoallv(struct em_dist_group *g, void *out, const int64_t *out_counts, const void *in,
                       const int64_t *in_counts, em_dtype dt);
em_status gr_allgather(struct em_dist_group *g, void *out, const void *in, int64_t count, em_dtype dt);
/* Ranks agree on failure: every rank passes its status; when any rank failed, the others
 * return an error naming the first that did (its own message is on its stderr). */
em_status gr_agree(struct em_dist_group *g, const char *op, em_status st);
/* ---- PageRank over a partitioned graph (pagerank_dist.c) and its GPU form (pagerank_dist_cuda.c) */
/* The first iteration's teleport coefficient: every score 1/n, the dangling vertices (inv
 * 0) counted over the group (collective). */
em_status gr_part_first_coef(const em_graph_part *p, const float *inv, bool gapbs, double damping, double *coef);
/* One rank's lists as pagerank_dist.c lays them out: own vertex i (sweep order) has in-arcs
 * src[off[i] ..] (places), its contribution at place own[i]; the values sent are those of
 * the places send[0 .. p->nsend), the values received go to mirror[0 .. p->nmirror). */
typedef struct gr_part_layout {
  const em_graph_part *p;
  const int64_t *off;
  const uint32_t *src, *own, *send, *mirror;
  const float *inv;
} gr_part_layout;
/* What the iterations give back: x[nl] the normalised scores in sweep order, residual[]
 * one per iteration, and the time split. */
typedef struct gr_part_result {
  float *x;
  double *residual;
  int iterations, converged;
  double setup, compute, exchange; /* setup: copying the lists to the GPU */
  const char *engine;
} gr_part_result;
/* The Jacobi (or GAPBS) iterations on the GPU opts->device, the exchange through the
 * group's CUDA backend (NCCL); collective. */
em_status gr_part_pagerank_cuda(const gr_part_layout *l, const em_pagerank_options *o, gr_part_result *out);

/* Builds rank's partition from its share of the arcs (src[i] -> dst[i] with weight wt[i],
 * dense ids < n, the options already applied; wt NULL: unweighted), which it frees
 * (gr_free) in any case. */
em_status gr_part_build(em_graph_part **out, struct em_dist_group *g, const char *op, int64_t n, uint32_t *src,
                        uint32_t *dst, float *wt, int64_t count, bool drop_duplicates, bool directed);
/* keep_weights false: a weighted cache loads unweighted (em_graph_options.weights = 0). */
em_status gr_part_load_cache(em_graph_part **out, struct em_dist_group *g, const char *path, bool verify,
                             bool keep_weights);
/* Edges [e0, e1) of em_graph_kronecker (kind 0) or em_graph_uniform (kind 1), before options. */
void gr_generate_slice(int kind, int32_t scale, int64_t n, uint64_t seed, int64_t e0, int64_t e1, uint32_t *u,
                       uint32_t *v);

#endif
