/* pr_bins.c - propagation blocking of PageRank's cold arcs (Beamer, Asanovic and
 * Patterson, "Reducing PageRank communication via propagation blocking", IPDPS 2017).
 *
 * With vertices ordered by out-degree, the contributions of the first `hot` sources fit
 * in L2 and the pull pass gathers them directly (each vertex's sources are sorted, so
 * the hot ones are a prefix). The other arcs read contributions scattered over the whole
 * array: once that array outgrows the caches each read costs a trip to memory for 4
 * useful bytes. pr_tiles.c blocks those reads when the graph is small enough for its
 * tiles to pay; this file removes them for any size, in two sequential passes per
 * iteration:
 *   scatter: every cold source, in ascending order, appends its contribution once per
 *            out-arc to the bin of the arc's destination (bins: destination ranges of
 *            65536 vertices, whose double sums fit L2);
 *   gather:  each bin adds its values into its destinations' sums, reading the
 *            destination offsets (16 bits) stored beside the values when the bins were
 *            planned.
 * Every arc then costs 2 bytes (its bin) + 4 (value written) + 4 (value read) + 2 (its
 * destination), all streamed, instead of a random read.
 *
 * Determinism: the cold sources are cut into NCHUNK chunks fixed by the graph alone;
 * chunk c writes its part of each bin after chunks 0..c-1, so every destination receives
 * its values in ascending source order and sums them in double in that order, whatever
 * the thread count or scheduling: the same bits at any thread count. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "graph_impl.h"

#define NCHUNK GR_BINS_CHUNKS /* units of scatter work; fixed, so the order of additions is too */
#define BIN_SHIFT 16 /* destinations per bin: offsets fit 16 bits, sums 512 KiB */

void gr_bins_free(gr_bins *b) {
  gr_free(b->hot_len);
  gr_free(b->bin_of);
  gr_free(b->dst);
  gr_free(b->val);
  gr_free(b->acc);
  free(b->bin_start);
  free(b->cursor0);
  memset(b, 0, sizeof *b);
}

int64_t gr_pr_hot_sources(void) {
  long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  int64_t slice = (l2 > (1 << 18) ? l2 : (2 << 20)) / 2 / (int64_t)sizeof(float);
  int64_t p = 1;
  while (p * 2 <= slice) p *= 2;
  return p;
}

/* Plans the bins for graph g, sources below `hot` staying in the pull pass. */
em_status gr_bins_build(gr_bins *b, const em_graph *g, int64_t hot) {
  const char *op = "graph pagerank";
  memset(b, 0, sizeof *b);
  int64_t n = g->n;
  if (hot > n) hot = n;
  b->hot = hot;
  b->nbins = (n + ((int64_t)1 << BIN_SHIFT) - 1) >> BIN_SHIFT;
  uint32_t *outdst = NULL;
  int64_t *pos = NULL, *count = NULL;
  b->hot_len = gr_alloc((size_t)n * sizeof *b->hot_len);
  b->acc = gr_alloc((size_t)n * sizeof *b->acc);
  b->bin_start = calloc((size_t)b->nbins + 1, sizeof *b->bin_start);
  b->cursor0 = calloc((size_t)NCHUNK * (size_t)b->nbins, sizeof *b->cursor0);
  count = calloc((size_t)NCHUNK * (size_t)b->nbins, sizeof *count);
  pos = malloc((size_t)(n - hot + 1) * sizeof *pos);
  if (!b->hot_len || !b->acc || !b->bin_start || !b->cursor0 || !count || !pos) goto oom;
  /* each vertex's hot prefix: its sources are sorted, the cold ones are the tail */
  int64_t cold = 0;
  const uint32_t h32 = (uint32_t)hot;
#pragma omp parallel for schedule(static) reduction(+ : cold) num_threads(gr_threads())
  for (int64_t v = 0; v < n; v++) {
    int64_t first = g->offsets[v], j = g->offsets[v + 1];
    while (j > first && g->sources[j - 1] >= h32) j--;
    b->hot_len[v] = (uint32_t)(j - first);
    cold += g->offsets[v + 1] - j;
  }
  /* the cold out-arcs, source by source (out-degrees give their offsets) */
  pos[0] = 0;
  for (int64_t u = hot; u < n; u++) pos[u - hot + 1] = pos[u - hot] + g->out_degree[u];
  if (pos[n - hot] != cold) {
    int64_t by_degree = pos[n - hot];
    free(pos), free(count);
    gr_bins_free(b);
    return em_set_error(EM_ERR_RUNTIME, "%s: %lld cold arcs by out-degree, %lld in the CSR, expected equal", op,
                        (long long)by_degree, (long long)cold);
  }
  b->cold = cold;
  /* chunks of about equal arcs, boundaries fixed by the graph */
  b->chunk[0] = hot;
  for (int c = 1; c < NCHUNK; c++) {
    int64_t target = cold * c / NCHUNK;
    int64_t lo = 0, hi = n - hot; /* first source index whose offset reaches target */
    while (lo < hi) {
      int64_t mid = (lo + hi) / 2;
      if (pos[mid] >= target) hi = mid;
      else lo = mid + 1;
    }
    b->chunk[c] = hot + lo > b->chunk[c - 1] ? hot + lo : b->chunk[c - 1];
  }
  b->chunk[NCHUNK] = n;
  for (int c = 0; c <= NCHUNK; c++) b->chunk_arc[c] = pos[b->chunk[c] - hot];
  outdst = gr_alloc((size_t)(cold ? cold : 1) * sizeof *outdst);
  b->bin_of = gr_alloc((size_t)(cold ? cold : 1) * sizeof *b->bin_of);
  b->dst = gr_alloc((size_t)(cold ? cold : 1) * sizeof *b->dst);
  b->val = gr_alloc((size_t)(cold ? cold : 1) * sizeof *b->val);
  if (!outdst || !b->bin_of || !b->dst || !b->val) goto oom;
  /* transpose the cold arcs: destinations ascend within each source (one pass) */
  for (int64_t v = 0; v < n; v++)
    for (int64_t j = g->offsets[v] + b->hot_len[v]; j < g->offsets[v + 1]; j++)
      outdst[pos[g->sources[j] - hot]++] = (uint32_t)v;
  free(pos);
  pos = NULL;
  /* arcs per (chunk, bin), then each chunk's first slot in each bin */
  const int64_t nb = b->nbins;
#pragma omp parallel for schedule(dynamic, 1) num_threads(gr_threads())
  for (int c = 0; c < NCHUNK; c++)
    for (int64_t k = b->chunk_arc[c]; k < b->chunk_arc[c + 1]; k++) count[c * nb + (outdst[k] >> BIN_SHIFT)]++;
  int64_t at = 0;
  for (int64_t k = 0; k < nb; k++) {
    b->bin_start[k] = at;
    for (int c = 0; c < NCHUNK; c++) {
      b->cursor0[c * nb + k] = at;
      at += count[c * nb + k];
    }
  }
  b->bin_start[nb] = at;
  free(count);
  count = NULL;
  /* each arc's bin, and its destination's offset at its place in the bin */
#pragma omp parallel num_threads(gr_threads())
  {
    int64_t *cur = malloc((size_t)nb * sizeof *cur);
#pragma omp for schedule(dynamic, 1)
    for (int c = 0; c < NCHUNK; c++) {
      if (!cur) continue;
      memcpy(cur, b->cursor0 + c * nb, (size_t)nb * sizeof *cur);
      for (int64_t k = b->chunk_arc[c]; k < b->chunk_arc[c + 1]; k++) {
        uint32_t v = outdst[k], bin = v >> BIN_SHIFT;
        b->bin_of[k] = (uint16_t)bin;
        b->dst[cur[bin]++] = (uint16_t)(v & 0xffff);
      }
    }
    if (!cur) b->failed = 1;
    free(cur);
  }
  gr_free(outdst);
  outdst = NULL;
  if (b->failed) goto oom;
  return EM_OK;
oom:
  gr_free(outdst);
  free(pos), free(count);
  gr_bins_free(b);
  return gr_oom(op, (size_t)n * 16);
}

/* Scatter, chunk c: each cold source's contribution into the bins of its out-arcs. cur:
 * nbins scratch slots. */
void gr_bins_scatter(const gr_bins *b, int c, const float *restrict contrib, const uint32_t *restrict out_degree,
                     int64_t *restrict cur) {
  const int64_t nb = b->nbins;
  memcpy(cur, b->cursor0 + c * nb, (size_t)nb * sizeof *cur);
  const uint16_t *restrict bin = b->bin_of + b->chunk_arc[c];
  float *restrict val = b->val;
  for (int64_t u = b->chunk[c]; u < b->chunk[c + 1]; u++) {
    float x = contrib[u];
    for (uint32_t k = out_degree[u]; k; k--) val[cur[*bin++]++] = x;
  }
}

/* Gather, bin k: acc[v] = the sum of the values binned for v, for the bin's vertices. */
void gr_bins_gather(const gr_bins *b, int64_t k, int64_t n) {
  int64_t v0 = k << BIN_SHIFT, v1 = v0 + ((int64_t)1 << BIN_SHIFT) < n ? v0 + ((int64_t)1 << BIN_SHIFT) : n;
  double *restrict acc = b->acc + v0;
  memset(acc, 0, (size_t)(v1 - v0) * sizeof *acc);
  const uint16_t *restrict dst = b->dst;
  const float *restrict val = b->val;
  for (int64_t j = b->bin_start[k]; j < b->bin_start[k + 1]; j++) acc[dst[j]] += (double)val[j];
}
