/* pagerank_plan.h - how the GPU PageRank (pagerank.cu) shares out the gather work, as
 * plain host arithmetic with no CUDA dependency, so that tests/c/test_cuda_pagerank_plan.c
 * can check it on a machine without a GPU.
 *
 * The gather of iteration k sums, for each vertex v, the contributions of its in-arcs
 * sources[offsets[v] .. offsets[v+1]). In-degrees of real graphs follow a power law: most
 * vertices have a handful of arcs, a few have millions. One thread per vertex would leave
 * a warp waiting on its heaviest lane; one warp per vertex would idle 31 lanes on most.
 * So:
 *   - a light vertex (in-degree < PR_LIGHT) is summed by the lane that updates it;
 *   - a heavy vertex's arcs are cut into chunks of at most PR_CHUNK arcs, each summed by
 *     one warp (a kernel of its own); its lane then adds up its chunk sums (the whole warp
 *     helps when there are several).
 * The update kernel gives warp w the 32 vertices of group w (vertices 32w .. 32w+31); a
 * lane finds its heavy vertex's index as group_first[w] plus the heavy lanes before it.
 * Every sum has an order fixed by the graph alone, so results are the same bits from run
 * to run. */
#ifndef EMBER_GPU_PAGERANK_PLAN_H
#define EMBER_GPU_PAGERANK_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include "ember/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PR_GROUP 32 /* vertices per warp in the update kernel */
#define PR_LIGHT 32 /* in-degree from which a vertex is heavy */
#define PR_CHUNK 2048 /* the most arcs in one chunk (64 per lane) */

typedef struct pr_plan {
  int64_t n; /* vertices */
  int64_t heavy; /* vertices of in-degree >= PR_LIGHT */
  int64_t groups; /* ceil(n / PR_GROUP) */
  int64_t *group_first; /* [groups + 1] heavy vertices in the groups before group g */
  int64_t nchunks;
  int64_t *chunk_first; /* [heavy + 1] first chunk of each heavy vertex (heavy index order) */
  int64_t *chunk_begin; /* [nchunks] the chunk's first arc */
  uint32_t *chunk_len; /* [nchunks] its arcs, 1 .. PR_CHUNK */
  int64_t max_chunks; /* the most chunks of one vertex */
} pr_plan;

/* The plan for a CSR of n vertices (offsets[n + 1]). EM_ERR_MEMORY when the host arrays
 * cannot be allocated. */
em_status pr_plan_build(pr_plan *p, int64_t n, const int64_t *offsets);
void pr_plan_free(pr_plan *p);
/* Bytes the plan takes on the device (its arrays plus one double per chunk for the sums). */
size_t pr_plan_device_bytes(const pr_plan *p);

#ifdef __cplusplus
}
#endif
#endif
