/* pagerank_kernels.cuh - the PageRank kernels (pagerank.cu) as the two GPU drivers share
 * them: one process's whole graph (pagerank.cu) and one rank's share of a partitioned
 * graph (pagerank_part.cu). C++ (CUDA) only.
 *
 * pr_chunks sums the chunks of the heavy vertices' arcs (pagerank_plan.h); pr_update gives
 * each vertex its new score and contribution and reduces the iteration's sums, either into
 * per-block doubles (one process: pr_finish sums them in order) or, with `fixed` set, into
 * three exact fixed-point totals (gr_fix's units, graph_impl.h), whose value does not
 * depend on the order of the additions: the partitioned run sums them over ranks too. */
#ifndef EMBER_GPU_PAGERANK_KERNELS_CUH
#define EMBER_GPU_PAGERANK_KERNELS_CUH

#include <stdint.h>
#include "gpu.h"
#include "pagerank_plan.h"

#define PR_THREADS 256 /* a multiple of PR_GROUP: warps line up with vertex groups */

/* What the iterations carry from one to the next, in device memory (one process). */
struct pr_state {
  double scale; /* normalisation of the current scores: 1 / their sum (1 for GAPBS) */
  double coef; /* teleport coefficient of the next iteration */
  double residual; /* the last iteration's L1 change */
  int iterations; /* iterations done */
  int done; /* 1 once converged: the kernels still queued do nothing */
};

struct pr_update_args {
  int64_t n; /* vertices updated */
  double total; /* vertices in the graph: the uniform teleport is coef / total */
  const int64_t *off;
  const uint32_t *src;
  const float *contrib; /* this iteration's contributions */
  const float *x; /* the previous scores (times scale: normalised) */
  float *y, *next; /* the new scores and the next iteration's contributions */
  const uint32_t *own; /* vertex v's contribution goes to next[own[v]]; NULL: next[v] */
  const float *inv, *tele; /* tele NULL: uniform */
  const float *gathered; /* cuSPARSE: the sums, already gathered; NULL: gather here */
  const int64_t *group_first, *chunk_first;
  const double *chunk_sum;
  double damping;
  const pr_state *st; /* scale, coef and the done flag; NULL: scale and coef below */
  double scale, coef;
  double *partial; /* [gridDim.x][3]: sum of scores, residual, dangling mass */
  unsigned long long *fixed; /* [3] exact sums added here instead (partial unused) */
};

/* Device memory a run holds, for the error that names what did not fit. */
struct pr_memory {
  const char *op;
  int device;
  size_t need, held; /* bytes the run needs on the device; allocated so far */
};
/* count elements of device memory (at least one) from the allocator; EM_ERR_MEMORY naming
 * `what`, the sizes and the allocator's reason when they are not there. */
em_status pr_alloc_bytes(pr_memory *m, void **out, size_t bytes, const char *what);
template <typename T>
static inline em_status pr_alloc(pr_memory *m, T **out, int64_t count, const char *what) {
  void *p = NULL;
  em_status st = pr_alloc_bytes(m, &p, (size_t)(count > 0 ? count : 1) * sizeof(T), what);
  *out = (T *)p;
  return st;
}

/* The work plan (pagerank_plan.h) on the device, with room for the chunk sums. */
struct pr_plan_device {
  int64_t *group_first, *chunk_first, *chunk_begin;
  uint32_t *chunk_len;
  double *chunk_sum;
};
em_status pr_plan_upload(pr_memory *m, const pr_plan *p, pr_plan_device *d, cudaStream_t s);
void pr_plan_device_free(pr_plan_device *d);
/* Queues pr_chunks over the plan's chunks (none: nothing) on s. */
em_status pr_chunks_queue(const pr_state *st, const pr_plan *p, const pr_plan_device *d, const uint32_t *src,
                          const float *contrib, cudaStream_t s);

/* What both drivers give pr_update alike: n vertices of a graph of `total`, their lists,
 * the scores and contributions read (index cur) and written (cur ^ 1), the inverse
 * out-degrees, the plan and the damping; the rest zero (the caller sets what it uses). */
pr_update_args pr_update_base(int64_t n, double total, const int64_t *off, const uint32_t *src, float *const x[2],
                              float *const contrib[2], int cur, const float *inv, const pr_plan_device *d,
                              double damping);

/* One warp per chunk (PR_THREADS / PR_GROUP chunks a block); st may be NULL. */
__global__ void pr_chunks(const pr_state *__restrict__ st, int64_t nchunks, const int64_t *__restrict__ chunk_begin,
                          const uint32_t *__restrict__ chunk_len, const uint32_t *__restrict__ src,
                          const float *__restrict__ contrib, double *__restrict__ chunk_sum);
/* One thread per vertex, blocks of PR_THREADS. */
__global__ void __launch_bounds__(PR_THREADS) pr_update(const pr_update_args a);

#endif
