/* pagerank_plan.c - the work split of the GPU PageRank (see pagerank_plan.h). Two passes
 * over the offsets: count the heavy vertices and their chunks, then fill the arrays. */
#include "pagerank_plan.h"
#include <stdlib.h>
#include <string.h>

static int64_t chunks_of(int64_t degree) { return (degree + PR_CHUNK - 1) / PR_CHUNK; }

void pr_plan_free(pr_plan *p) {
  free(p->group_first);
  free(p->chunk_first);
  free(p->chunk_begin);
  free(p->chunk_len);
  memset(p, 0, sizeof *p);
}

em_status pr_plan_build(pr_plan *p, int64_t n, const int64_t *offsets) {
  memset(p, 0, sizeof *p);
  p->n = n;
  p->groups = (n + PR_GROUP - 1) / PR_GROUP;
  int64_t heavy = 0, nchunks = 0, most = 0;
  for (int64_t v = 0; v < n; v++) {
    int64_t degree = offsets[v + 1] - offsets[v];
    if (degree < PR_LIGHT) continue;
    int64_t c = chunks_of(degree);
    heavy++;
    nchunks += c;
    if (c > most) most = c;
  }
  p->heavy = heavy;
  p->nchunks = nchunks;
  p->max_chunks = most;
  p->group_first = malloc((size_t)(p->groups + 1) * sizeof *p->group_first);
  p->chunk_first = malloc((size_t)(heavy + 1) * sizeof *p->chunk_first);
  /* at least one element each, so that an empty plan still has arrays to upload */
  p->chunk_begin = malloc((size_t)(nchunks > 0 ? nchunks : 1) * sizeof *p->chunk_begin);
  p->chunk_len = malloc((size_t)(nchunks > 0 ? nchunks : 1) * sizeof *p->chunk_len);
  if (!p->group_first || !p->chunk_first || !p->chunk_begin || !p->chunk_len) {
    size_t bytes = (size_t)(p->groups + heavy + 2) * 8 + (size_t)nchunks * 12;
    pr_plan_free(p);
    return em_set_error(EM_ERR_MEMORY, "graph pagerank: cannot allocate %zu bytes of host memory for the GPU work plan",
                        bytes);
  }
  int64_t h = 0, c = 0;
  for (int64_t v = 0; v < n; v++) {
    if (v % PR_GROUP == 0) p->group_first[v / PR_GROUP] = h;
    int64_t begin = offsets[v], degree = offsets[v + 1] - begin;
    if (degree < PR_LIGHT) continue;
    p->chunk_first[h++] = c;
    for (int64_t a = 0; a < degree; a += PR_CHUNK, c++) {
      p->chunk_begin[c] = begin + a;
      p->chunk_len[c] = (uint32_t)(degree - a < PR_CHUNK ? degree - a : PR_CHUNK);
    }
  }
  p->group_first[p->groups] = h;
  p->chunk_first[h] = c;
  return EM_OK;
}

size_t pr_plan_device_bytes(const pr_plan *p) {
  return (size_t)(p->groups + 1) * sizeof(int64_t) + (size_t)(p->heavy + 1) * sizeof(int64_t) +
         (size_t)(p->nchunks > 0 ? p->nchunks : 1) * (sizeof(int64_t) + sizeof(uint32_t) + sizeof(double));
}
