/* ember/graph.h - graphs: ingest, generators, PageRank on the CPU, ranking analysis.
 *
 * A graph is a compressed sparse row (CSR) structure of its in-edges (what a pull-based
 * PageRank reads) plus the out-degree of every vertex. Vertices have three kinds of ids:
 *   - dense ids 0..n-1, the ids callers see: score tensors, degree tensors and edge lists
 *     are indexed by them. Files with sparse or 64-bit ids are remapped so that dense ids
 *     follow the order of the original ids (a file using 0..n-1 keeps its ids);
 *   - original ids, those of the file (Matrix Market's 1-based indices, a SNAP file's
 *     64-bit ids, a generator's vertex labels), reported by top-k and em_graph_original_id;
 *   - internal ids, the order the CSR is stored in (by default sorted by out-degree, which
 *     makes PageRank faster). They never leak out of the library.
 * Vertex ids in the CSR are 32-bit, so a graph has at most 2^32 - 1 vertices.
 * A graph may be weighted: a float32 weight (finite, >= 0) per arc, from a Matrix Market
 * file's real or integer values or a SNAP file's third column. Undirected edges give both
 * arcs the edge's weight; with drop_duplicates, repeated arcs become one arc whose weight
 * is their sum (without it they stay separate arcs, which PageRank sums the same way).
 * Every function returns EM_OK or an error status with em_last_error() set; errors about a
 * file name the file and, for text files, the line. */
#ifndef EMBER_GRAPH_H
#define EMBER_GRAPH_H

#include "core.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* EM_FFI_BEGIN */
typedef struct em_graph em_graph;

typedef enum em_graph_format {
  EM_GRAPH_FORMAT_AUTO = 0, /* by extension: .mtx, .sg, .emg; anything else is SNAP text */
  EM_GRAPH_FORMAT_SNAP, /* text edge list: "u v" or "u v weight" per line, '#' comments */
  EM_GRAPH_FORMAT_MTX, /* Matrix Market coordinate (pattern/real/integer, general/symmetric);
                        * real and integer values are weights */
  EM_GRAPH_FORMAT_SG, /* the GAP benchmark suite's serialized graph (unweighted; .wsg refused) */
  EM_GRAPH_FORMAT_EMBER /* ember's checksummed, mmap-able CSR (em_graph_save), weights included */
} em_graph_format;

typedef enum em_graph_reorder {
  EM_GRAPH_REORDER_NONE = 0, /* store the CSR in dense-id order */
  EM_GRAPH_REORDER_DEGREE /* store it by decreasing out-degree (faster PageRank) */
} em_graph_reorder;

typedef struct em_graph_options {
  int32_t format; /* em_graph_format */
  int32_t directed; /* 1: "u v" is the arc u -> v; 0: an undirected edge (two arcs) */
  int32_t reverse; /* 1: "u v" is the arc v -> u (twitter_rv.net lists follows so) */
  int32_t drop_self_loops; /* 1: drop u -> u */
  int32_t drop_duplicates; /* 1: keep one copy of repeated arcs */
  int32_t reorder; /* em_graph_reorder */
  int32_t progress; /* -1: on stderr when it is a terminal; 0: never; 1: always */
  int32_t verify; /* ember format: 1 checks the checksums on load */
  int32_t weights; /* 1: a file's weights make a weighted graph; 0: ignore them (unweighted) */
} em_graph_options;

/* Defaults: auto format, directed, nothing reversed or dropped, degree order, progress on a
 * terminal, checksums verified, weights read. */
EM_API void em_graph_options_init(em_graph_options *opts);

/* ---- building (opts may be NULL: defaults) ---- */
EM_API em_status em_graph_load(em_graph **out, const char *path, const em_graph_options *opts);
/* Graph500 Kronecker graph: 2^scale vertices, edge_factor * 2^scale generated edges,
 * initiator A=0.57, B=C=0.19, vertices relabelled by a permutation drawn from seed. The
 * same seed gives the same graph whatever the thread count. */
EM_API em_status em_graph_kronecker(em_graph **out, int32_t scale, int32_t edge_factor, uint64_t seed,
                                    const em_graph_options *opts);
/* num_edges edges with both ends uniform over num_vertices vertices. */
EM_API em_status em_graph_uniform(em_graph **out, int64_t num_vertices, int64_t num_edges, uint64_t seed,
                                  const em_graph_options *opts);
/* Edges u -> v from arrays of dense ids in [0, num_vertices). */
EM_API em_status em_graph_from_edges(em_graph **out, int64_t num_vertices, int64_t num_edges, const int64_t *src,
                                     const int64_t *dst, const em_graph_options *opts);
/* Vertex names: "id name" per line ('#' comments), id an original id of g. */
EM_API em_status em_graph_load_labels(em_graph *g, const char *path);
/* Writes ember's binary format (a temporary file renamed into place). */
EM_API em_status em_graph_save(const em_graph *g, const char *path);
EM_API void em_graph_free(em_graph *g);

/* ---- inspection ---- */
EM_API int64_t em_graph_num_vertices(const em_graph *g);
EM_API int64_t em_graph_num_edges(const em_graph *g); /* arcs: an undirected edge counts twice */
EM_API int em_graph_is_directed(const em_graph *g);
EM_API int em_graph_is_weighted(const em_graph *g); /* 1 when the arcs carry weights */
EM_API int64_t em_graph_original_id(const em_graph *g, int64_t v); /* -1 when v is not a dense id */
EM_API em_status em_graph_find_vertex(const em_graph *g, int64_t original_id, int64_t *v);
EM_API const char *em_graph_label(const em_graph *g, int64_t v); /* NULL when v has none */
/* int64 tensors of [n] by dense id; either pointer may be NULL. */
EM_API em_status em_graph_degrees(const em_graph *g, em_tensor **in_degree, em_tensor **out_degree);
EM_API em_status em_graph_original_ids(const em_graph *g, em_tensor **out);
/* Every arc as int64 [m] tensors of dense ids, sorted by (dst, src). */
EM_API em_status em_graph_edges(const em_graph *g, em_tensor **src, em_tensor **dst);
/* The weights of those arcs, float32 [m] in the same order (all 1 when g is unweighted). */
EM_API em_status em_graph_edge_weights(const em_graph *g, em_tensor **out);

/* ---- PageRank ---- */
typedef enum em_pagerank_method {
  EM_PAGERANK_JACOBI = 0, /* deterministic whatever the thread count */
  EM_PAGERANK_GAUSS_SEIDEL, /* updates in place: fewer iterations, not bit-reproducible */
  EM_PAGERANK_GAPBS /* the GAP benchmark's definition: dangling mass leaks, sum < 1 */
} em_pagerank_method;

typedef struct em_pagerank_options {
  double damping; /* 0.85 */
  double tol; /* stop when the L1 change of the scores is below; 0: never */
  int32_t max_iter; /* 100 */
  int32_t method; /* em_pagerank_method */
  const em_tensor *personalization; /* NULL: uniform; else [n] float, >= 0, by dense id */
  em_device device; /* cpu (the default) or cuda:N (the CUDA plugin's kernels) */
  int32_t blocking; /* em_pagerank_blocking: how the CPU reads contributions beyond L2 */
  int32_t weights; /* em_pagerank_weights */
} em_pagerank_options;

/* Whether PageRank follows arc weights: x(v) = (1-d) p(v) + d * (sum over u -> v of
 * x(u) w(u,v) / W(u) + dangling p(v)), W(u) the sum of u's out-arc weights, and dangling
 * the score of the vertices with W(u) = 0 (no out-arcs, or only weight-0 ones). Weighted
 * iterations run on the CPU's plain pull (stats.engine "cpu:weighted"), whatever the
 * blocking or device asked for: the blocked and CUDA engines have no weights. */
typedef enum em_pagerank_weights {
  EM_PAGERANK_WEIGHTS_AUTO = 0, /* use the graph's weights when it has them */
  EM_PAGERANK_WEIGHTS_ON, /* use them; an unweighted graph is an error */
  EM_PAGERANK_WEIGHTS_OFF /* ignore them: every arc counts 1 */
} em_pagerank_weights;

/* How the CPU's Jacobi and GAPBS iterations read the contributions of sources beyond the
 * L2-sized hot set (vertices ordered by out-degree put the most-read ones first). AUTO
 * picks by the graph's size against the caches (see pagerank.c); the others force. */
typedef enum em_pagerank_blocking {
  EM_PAGERANK_BLOCKING_AUTO = 0,
  EM_PAGERANK_BLOCKING_NONE, /* plain pull: a random read per arc (prefetched when large) */
  EM_PAGERANK_BLOCKING_TILES, /* cache-blocked pull over destination x source tiles */
  EM_PAGERANK_BLOCKING_BINS /* propagation blocking: scatter into destination bins, then sum */
} em_pagerank_blocking;

typedef struct em_pagerank_stats {
  int32_t iterations;
  int32_t converged; /* 1 when the residual fell below tol */
  double residual; /* the last iteration's L1 change */
  double seconds; /* the iterations */
  double setup_seconds; /* buffers, contributions, teleport vector; GPU: copying the graph */
  double edges_per_second; /* arcs * iterations / seconds */
  int32_t method; /* the method that ran: on a GPU Gauss-Seidel runs as Jacobi */
  int32_t weighted; /* 1 when the arcs' weights were used */
  const char *engine; /* what computed the scores: "cpu" (plain pull), "cpu:tiles", "cpu:bins",
                       * "cpu:weighted" (weighted pull), "cuda:custom" or "cuda:cusparse"; partitioned:
                       * "cpu:partitioned", "cpu:partitioned:weighted" */
} em_pagerank_stats;

EM_API void em_pagerank_options_init(em_pagerank_options *opts);
/* Scores: float32 [n] by dense id, summing to 1 (except EM_PAGERANK_GAPBS). Dangling mass
 * is spread like the teleport vector (the igraph and networkx definition). residuals
 * (float64 [iterations], may be NULL) receives the L1 change of each iteration; stats may
 * be NULL. opts may be NULL: defaults. With opts->device a GPU, the iterations run there
 * (the graph is copied over for the call); scores and residuals are CPU tensors either way. */
EM_API em_status em_graph_pagerank(em_tensor **scores, em_tensor **residuals, em_pagerank_stats *stats,
                                   const em_graph *g, const em_pagerank_options *opts);

/* ---- analysis ---- */
typedef struct em_graph_ranked {
  int64_t vertex; /* dense id */
  int64_t original_id;
  double score;
  const char *label; /* NULL when none; owned by the graph */
} em_graph_ranked;

typedef struct em_rank_comparison {
  int64_t k;
  int64_t overlap; /* vertices in both top-k lists */
  int64_t union_size; /* vertices in either */
  double kendall_tau; /* tau-b of the two scores over the union (NaN when undefined) */
} em_rank_comparison;

/* The k highest scores (ties: smaller dense id first) into out[0..*count). scores is any 1-D
 * real or integer tensor; g may be NULL (original ids are then the dense ids). */
EM_API em_status em_graph_topk(em_graph_ranked *out, int64_t *count, const em_tensor *scores, int64_t k,
                               const em_graph *g);
/* How two rankings agree over their top k: overlap and Kendall's tau-b. */
EM_API em_status em_graph_compare_rankings(em_rank_comparison *out, const em_tensor *a, const em_tensor *b, int64_t k);
/* Kendall's tau-b of two rankings over all their n vertices (ties counted as tau-b does;
 * NaN ranks last), in O(n log n) (Knight's algorithm). *tau is NaN when undefined (n < 2,
 * or one ranking all ties). */
EM_API em_status em_graph_kendall_tau(double *tau, const em_tensor *a, const em_tensor *b);
/* compare_rankings(scores, in-degree): the Twitter study's question. */
EM_API em_status em_graph_compare_indegree(em_rank_comparison *out, const em_graph *g, const em_tensor *scores,
                                           int64_t k);
/* ---- partitioned graphs (runtime/graph/partition.c, ingest_dist.c, pagerank_dist.c) ----
 * A graph spread over the ranks of a process group: rank r owns the dense vertices
 * [begin, end) of a 1-D chunking balanced on alpha * |V| + |E| (Gemini's, alpha =
 * 8 * (ranks - 1)), holds the in-arcs of those vertices (for pull PageRank), and a mirror
 * of every remote source it reads. Each PageRank iteration sends every rank exactly the
 * contributions of the vertices it mirrors (one all_to_all_v) and sums three scalars (one
 * all_reduce of int64 fixed-point values, so that every reduction is exact). Per-vertex
 * sums add contributions in ascending global source id, as em_graph_pagerank does on a
 * graph built with reorder = none: the scores are the same bits at any rank and thread
 * count, and those of the single process on such a graph while its cache blocking is off
 * (graphs below 2^18 arcs + vertices); within float32 rounding otherwise.
 * Ingest never gathers the edge list: each rank parses its own byte range of a file (or
 * generates its own slice of the edges) and sends each arc to the owner of its target.
 * Every function is collective over the group: every rank calls it, with the same
 * arguments. The vertex order is always the dense one (opts->reorder is ignored). */
struct em_dist_group; /* ember/dist.h */
typedef struct em_graph_part em_graph_part;

typedef struct em_graph_part_info {
  int64_t num_vertices, num_edges; /* the whole graph's */
  int64_t begin, end; /* this rank's dense vertices */
  int64_t local_edges; /* in-arcs of those vertices */
  int64_t mirrors; /* distinct remote sources read (the lower bound of values received) */
  int64_t values_sent, values_received; /* contributions per iteration */
  int64_t bytes; /* memory the partition holds on this rank */
  int32_t rank, world_size;
} em_graph_part_info;

/* SNAP text (ids < 2^32, remapped to dense ids as em_graph_load does) or Matrix Market, by
 * opts->format or the extension; a partitioned cache (em_graph_part_save's manifest, .emp)
 * is loaded instead when format is EMBER or the path ends in .emp. A file's weights (as
 * em_graph_load reads them; opts->weights = 0 ignores them) travel with the arcs, so
 * em_graph_part_pagerank can follow them. */
EM_API em_status em_graph_part_load(em_graph_part **out, struct em_dist_group *group, const char *path,
                                    const em_graph_options *opts);
/* The graphs of em_graph_kronecker / em_graph_uniform, each rank generating its slice. */
EM_API em_status em_graph_part_kronecker(em_graph_part **out, struct em_dist_group *group, int32_t scale,
                                         int32_t edge_factor, uint64_t seed, const em_graph_options *opts);
EM_API em_status em_graph_part_uniform(em_graph_part **out, struct em_dist_group *group, int64_t num_vertices,
                                       int64_t num_edges, uint64_t seed, const em_graph_options *opts);
/* One file per rank (path.RANK-of-N, checksummed) plus the manifest at path, written by
 * rank 0 once every rank's file is in place. Loading it needs the same number of ranks. */
EM_API em_status em_graph_part_save(const em_graph_part *p, const char *path);
EM_API void em_graph_part_free(em_graph_part *p);
EM_API int em_graph_part_is_weighted(const em_graph_part *p); /* 1 when the arcs carry weights */
EM_API void em_graph_part_get_info(const em_graph_part *p, em_graph_part_info *out);
/* int64 tensors of [end - begin]: this rank's vertices' degrees and original ids. */
EM_API em_status em_graph_part_degrees(const em_graph_part *p, em_tensor **in_degree, em_tensor **out_degree);
EM_API em_status em_graph_part_original_ids(const em_graph_part *p, em_tensor **out);
/* A [end - begin] tensor of every rank gathered into [n] on root (root < 0: on every
 * rank); *out is NULL on the other ranks. */
EM_API em_status em_graph_part_gather(em_tensor **out, const em_graph_part *p, const em_tensor *local, int root);

typedef struct em_pagerank_dist_stats {
  double compute_seconds; /* the sweeps over this rank's vertices */
  double exchange_seconds; /* packing, the all_to_all_v and the all_reduce */
  int64_t bytes_sent, bytes_received; /* per iteration, this rank */
} em_pagerank_dist_stats;

/* PageRank (Jacobi or GAPBS; no personalization) of a partitioned graph: scores are
 * float32 [end - begin], this rank's vertices; residuals and stats as em_graph_pagerank
 * (the same on every rank); dstats (may be NULL) this rank's split of the time. With
 * opts->device cuda:N each rank sweeps on that GPU (unweighted; blocking auto or none) and
 * the ranks exchange through the group's CUDA backend (NCCL): the same bits at any rank
 * count, equal to the CPU's within rounding. */
EM_API em_status em_graph_part_pagerank(em_tensor **scores, em_tensor **residuals, em_pagerank_stats *stats,
                                        em_pagerank_dist_stats *dstats, const em_graph_part *p,
                                        const em_pagerank_options *opts);
/* EM_FFI_END */

#ifdef __cplusplus
}
#endif
#endif
