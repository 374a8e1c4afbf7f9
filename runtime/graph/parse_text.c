/* parse_text.c - SNAP-style text edge lists: "u v" or "u v weight" per line, separated by
 * blanks, '#' comment lines, blank lines allowed. Ids are non-negative integers up to
 * 2^63-1, remapped to dense ids in the order of the original ids. A third field makes the
 * file weighted: then every edge line needs one (a line without is an error naming it),
 * each a finite number >= 0 within float32; fields after the third are ignored
 * (timestamps), and so is a third field starting with '#' (a trailing comment). A file
 * whose third column is not a weight (a timestamp) still loads as weighted: PageRank's
 * weighted = false then ignores the weights.
 *
 * The mapped file is parsed in parallel, chunk by chunk, three times: a first pass checks
 * every line and marks the ids seen; the CSR builder's count and fill passes parse it
 * again. Parsing twice more costs less than storing billions of id pairs. Ids below 2^32
 * are marked in a bitmap (a 512 MiB reservation of which only the touched pages become
 * memory), so the dense id of x is the number of marked ids below x (a popcount);
 * files with larger ids fall back to a sorted id array searched by bisection. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "graph_impl.h"

#define BITMAP_BITS ((uint64_t)1 << 32)

typedef enum { SCAN_CHECK, SCAN_COLLECT, SCAN_PUSH } scan_mode;

typedef struct snap_ctx {
  const char *op;
  gr_text text;
  gr_chunk_error *errors; /* [chunks] */
  int64_t *edges; /* [chunks] edges found by the check pass */
  int64_t *weighted_edges; /* [chunks] of those, lines with a weight */
  int64_t *first_with, *first_without; /* [chunks] chunk-relative line of the first edge with / without a weight; -1 */
  bool read_weights; /* em_graph_options.weights: else third fields are ignored */
  bool weighted; /* every edge line has a weight: push them */
  uint64_t *min_id, *max_id; /* [chunks] */
  bool *big; /* [chunks] an id >= 2^32 */
  uint64_t *bitmap; /* BITMAP_BITS bits, mapped lazily */
  uint32_t *rank; /* marked ids in the words before each word */
  uint64_t *ids; /* sparse: sorted distinct ids */
  int64_t *id_pos; /* sparse collect: where each chunk's ids go */
  int64_t n;
  bool sparse;
} snap_ctx;

static inline uint32_t dense_id(const snap_ctx *c, uint64_t id) {
  if (!c->sparse) {
    uint64_t w = id >> 6;
    return c->rank[w] + (uint32_t)__builtin_popcountll(c->bitmap[w] & ((1ULL << (id & 63)) - 1));
  }
  int64_t lo = 0, hi = c->n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (c->ids[mid] < id) lo = mid + 1;
    else hi = mid;
  }
  return (uint32_t)lo;
}

static inline void mark(uint64_t *bitmap, uint64_t id) {
  uint64_t bit = 1ULL << (id & 63), *w = bitmap + (id >> 6);
  if (!(__atomic_load_n(w, __ATOMIC_RELAXED) & bit)) __atomic_fetch_or(w, bit, __ATOMIC_RELAXED);
}

static em_status bad_line(gr_chunk_error *e, int64_t line, const char *s, const char *end, const char *what) {
  char quoted[64];
  gr_quote_line(quoted, sizeof quoted, s, end);
  e->status = EM_ERR_FORMAT;
  e->line = line;
  snprintf(e->msg, sizeof e->msg, "%s, got '%s'", what, quoted);
  return EM_ERR_FORMAT;
}

/* Reads one id at *p: digits followed by a blank, a newline or the end of the file. */
static inline int read_id(const char **p, const char *end, uint64_t *id) {
  int r = gr_parse_u64(p, end, id);
  if (r) return r;
  if (*id > (uint64_t)INT64_MAX) return 2;
  if (*p < end && !gr_is_blank(**p) && **p != '\n') return 1;
  return 0;
}

/* Parses chunk k in the given mode. SCAN_CHECK validates and marks; SCAN_COLLECT writes
 * the ids to c->ids; SCAN_PUSH sends dense edges to the sink. */
static em_status scan_chunk(snap_ctx *c, int64_t k, scan_mode mode, gr_sink *sink) {
  const char *p = c->text.data + c->text.chunk_begin[k], *end = c->text.data + c->text.chunk_begin[k + 1];
  int64_t line = 0, edges = 0, pos = mode == SCAN_COLLECT ? c->id_pos[k] : 0;
  uint64_t lo = UINT64_MAX, hi = 0;
  bool big = false;
  gr_chunk_error *e = &c->errors[k];
  while (p < end) {
    const char *start = p;
    while (p < end && gr_is_blank(*p)) p++;
    if (p == end) break;
    if (*p == '\n' || *p == '#') { /* blank or comment line */
      const char *nl = *p == '\n' ? p : memchr(p, '\n', (size_t)(end - p));
      p = nl ? nl + 1 : end;
      line++;
      continue;
    }
    uint64_t u, v;
    int r = read_id(&p, end, &u);
    if (!r) {
      while (p < end && gr_is_blank(*p)) p++;
      r = p == end || *p == '\n' ? 3 : read_id(&p, end, &v);
    }
    if (r) {
      if (mode != SCAN_CHECK)
        return em_set_error(EM_ERR_FORMAT, "%s: %s changed while it was read", c->op, c->text.path);
      return bad_line(e, line, start, end,
                      r == 2   ? "a vertex id is larger than 2^63-1"
                      : r == 3 ? "expected two vertex ids, found one"
                               : "expected two non-negative integer vertex ids");
    }
    while (p < end && gr_is_blank(*p)) p++;
    bool has_weight = c->read_weights && p < end && *p != '\n' && *p != '#';
    float w = 1;
    if (has_weight && (mode == SCAN_CHECK || (mode == SCAN_PUSH && c->weighted))) {
      char msg[150];
      if (gr_parse_weight(&p, end, &w, msg, sizeof msg)) {
        if (mode != SCAN_CHECK)
          return em_set_error(EM_ERR_FORMAT, "%s: %s changed while it was read", c->op, c->text.path);
        e->status = EM_ERR_FORMAT;
        e->line = line;
        snprintf(e->msg, sizeof e->msg, "%s (the third field is the edge's weight)", msg);
        return EM_ERR_FORMAT;
      }
    }
    if (mode == SCAN_CHECK) {
      if (has_weight && c->first_with[k] < 0) c->first_with[k] = line;
      if (!has_weight && c->first_without[k] < 0) c->first_without[k] = line;
      c->weighted_edges[k] += has_weight;
    }
    const char *nl = p < end && *p != '\n' ? memchr(p, '\n', (size_t)(end - p)) : p;
    p = nl && nl < end ? nl + 1 : end;
    line++;
    edges++;
    switch (mode) {
      case SCAN_CHECK:
        lo = u < lo ? u : lo;
        lo = v < lo ? v : lo;
        hi = u > hi ? u : hi;
        hi = v > hi ? v : hi;
        if ((u | v) >= BITMAP_BITS) big = true;
        if (u < BITMAP_BITS) mark(c->bitmap, u);
        if (v < BITMAP_BITS) mark(c->bitmap, v);
        break;
      case SCAN_COLLECT:
        c->ids[pos++] = u;
        c->ids[pos++] = v;
        break;
      case SCAN_PUSH:
        if (c->weighted) gr_sink_push_w(sink, dense_id(c, u), dense_id(c, v), w);
        else gr_sink_push(sink, dense_id(c, u), dense_id(c, v));
        break;
    }
  }
  if (mode == SCAN_CHECK) {
    c->text.chunk_lines[k] = line;
    c->edges[k] = edges;
    c->min_id[k] = lo;
    c->max_id[k] = hi;
    c->big[k] = big;
  }
  return EM_OK;
}

/* A file is weighted when an edge line has a third field; then all must. The error names
 * the first line without one and the first with one (line numbers as gr_text_report's). */
static em_status check_weight_column(snap_ctx *c, int64_t edges) {
  int64_t weighted = 0, line = c->text.first_line, with = -1, without = -1;
  for (int64_t k = 0; k < c->text.num_chunks; k++) {
    weighted += c->weighted_edges[k];
    if (with < 0 && c->first_with[k] >= 0) with = line + c->first_with[k];
    if (without < 0 && c->first_without[k] >= 0) without = line + c->first_without[k];
    line += c->text.chunk_lines[k];
  }
  c->weighted = weighted > 0;
  if (weighted == 0 || weighted == edges) return EM_OK;
  return em_set_error(EM_ERR_FORMAT,
                      "%s: %s:%lld: the edge has no weight (a third field), but line %lld has one: in a weighted "
                      "file every edge needs a weight",
                      c->op, c->text.path, (long long)without, (long long)with);
}

static em_status scan_push(void *ctx, int64_t chunk, gr_sink *sink) { return scan_chunk(ctx, chunk, SCAN_PUSH, sink); }

/* Dense ids from the bitmap: rank[w] counts the ids marked before word w. */
static em_status map_dense(snap_ctx *c, uint64_t max_id, int64_t **original) {
  size_t words = (size_t)(max_id >> 6) + 1;
  c->rank = gr_alloc(words * sizeof *c->rank);
  if (!c->rank) return gr_oom(c->op, words * 4);
  uint64_t sum = 0;
  for (size_t w = 0; w < words; w++) {
    c->rank[w] = (uint32_t)sum;
    sum += (uint64_t)__builtin_popcountll(c->bitmap[w]);
  }
  if (sum > (uint64_t)GR_MAX_VERTICES)
    return em_set_error(EM_ERR_UNSUPPORTED,
                        "%s: %s: %llu distinct vertex ids, more than the %lld that 32-bit ids allow", c->op,
                        c->text.path, (unsigned long long)sum, (long long)GR_MAX_VERTICES);
  c->n = (int64_t)sum;
  *original = NULL;
  if (sum == max_id + 1) return EM_OK; /* ids are exactly 0..n-1 */
  int64_t *orig = gr_alloc((size_t)sum * sizeof *orig);
  if (!orig) return gr_oom(c->op, (size_t)sum * 8);
#pragma omp parallel for schedule(static) num_threads(gr_threads())
  for (size_t w = 0; w < words; w++) {
    uint64_t bits = c->bitmap[w];
    uint32_t r = c->rank[w];
    while (bits) {
      orig[r++] = (int64_t)(w * 64 + (uint64_t)__builtin_ctzll(bits));
      bits &= bits - 1;
    }
  }
  *original = orig;
  return EM_OK;
}

/* Sorted distinct ids for files with ids of 2^32 and above. */
static em_status map_sparse(snap_ctx *c, int64_t total_edges, int64_t **original) {
  int64_t chunks = c->text.num_chunks;
  c->sparse = true;
  c->id_pos = malloc((size_t)chunks * sizeof *c->id_pos);
  c->ids = gr_alloc((size_t)total_edges * 2 * sizeof *c->ids);
  if (!c->id_pos || !c->ids) return gr_oom(c->op, (size_t)total_edges * 16);
  int64_t pos = 0;
  for (int64_t k = 0; k < chunks; k++) c->id_pos[k] = pos, pos += 2 * c->edges[k];
  int failed = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(| : failed) num_threads(gr_threads())
  for (int64_t k = 0; k < chunks; k++) failed |= scan_chunk(c, k, SCAN_COLLECT, NULL) != EM_OK;
  if (failed) return em_set_error(EM_ERR_FORMAT, "%s: %s changed while it was read", c->op, c->text.path);
  gr_sort_u64(c->ids, pos);
  int64_t n = 0;
  for (int64_t i = 0; i < pos; i++)
    if (i == 0 || c->ids[i] != c->ids[n - 1]) c->ids[n++] = c->ids[i];
  if (n > GR_MAX_VERTICES)
    return em_set_error(EM_ERR_UNSUPPORTED,
                        "%s: %s: %lld distinct vertex ids, more than the %lld that 32-bit ids allow", c->op,
                        c->text.path, (long long)n, (long long)GR_MAX_VERTICES);
  c->ids = gr_shrink(c->ids, (size_t)n * sizeof *c->ids);
  c->n = n;
  int64_t *orig = gr_alloc((size_t)n * sizeof *orig);
  if (!orig) return gr_oom(c->op, (size_t)n * 8);
  memcpy(orig, c->ids, (size_t)n * sizeof *orig);
  *original = orig;
  return EM_OK;
}

static void snap_free(snap_ctx *c) {
  free(c->errors);
  free(c->edges);
  free(c->weighted_edges);
  free(c->first_with);
  free(c->first_without);
  free(c->min_id);
  free(c->max_id);
  free(c->big);
  free(c->id_pos);
  if (c->bitmap) munmap(c->bitmap, BITMAP_BITS / 8);
  gr_free(c->rank);
  gr_free(c->ids);
  gr_text_close(&c->text);
}

em_status gr_load_snap(em_graph **out, const char *path, const em_graph_options *opts) {
  snap_ctx c = {.op = "load_snap", .read_weights = opts->weights != 0};
  int64_t *original = NULL;
  em_status st = gr_text_open(&c.text, c.op, path);
  if (st) return st;
  if ((st = gr_text_chunk(&c.text, 0, 1))) goto done;
  int64_t chunks = c.text.num_chunks;
  size_t nc = (size_t)(chunks ? chunks : 1);
  c.errors = calloc(nc, sizeof *c.errors);
  c.edges = calloc(nc, sizeof *c.edges);
  c.weighted_edges = calloc(nc, sizeof *c.weighted_edges);
  c.first_with = malloc(nc * sizeof *c.first_with);
  c.first_without = malloc(nc * sizeof *c.first_without);
  c.min_id = calloc(nc, sizeof *c.min_id);
  c.max_id = calloc(nc, sizeof *c.max_id);
  c.big = calloc(nc, sizeof *c.big);
  void *bm = mmap(NULL, BITMAP_BITS / 8, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  c.bitmap = bm == MAP_FAILED ? NULL : bm;
  if (!c.errors || !c.edges || !c.weighted_edges || !c.first_with || !c.first_without || !c.min_id || !c.max_id || !c.big || !c.bitmap) {
    st = gr_oom(c.op, BITMAP_BITS / 8);
    goto done;
  }
  for (int64_t k = 0; k < chunks; k++) c.first_with[k] = c.first_without[k] = -1;
  gr_progress prog;
  gr_progress_init(&prog, opts->progress, c.op, path, "checking lines", chunks);
#pragma omp parallel for schedule(dynamic, 1) num_threads(gr_threads())
  for (int64_t k = 0; k < chunks; k++) {
    scan_chunk(&c, k, SCAN_CHECK, NULL);
    gr_text_release(&c.text, k);
    gr_progress_add(&prog, 1);
  }
  gr_progress_end(&prog);
  if ((st = gr_text_report(&c.text, c.errors))) goto done;
  int64_t edges = 0, lines = c.text.first_line - 1;
  uint64_t max_id = 0;
  bool big = false;
  for (int64_t k = 0; k < chunks; k++) {
    edges += c.edges[k];
    lines += c.text.chunk_lines[k];
    if (c.edges[k] && c.max_id[k] > max_id) max_id = c.max_id[k];
    big |= c.big[k];
  }
  if ((st = check_weight_column(&c, edges))) goto done;
  if (edges == 0) {
    st = em_set_error(EM_ERR_FORMAT, "%s: %s: no edges found (%lld lines, all comments or blank)", c.op, path,
                      (long long)(lines + (c.text.size && c.text.data[c.text.size - 1] != '\n')));
    goto done;
  }
  /* The dense map costs 4 bytes per 64 ids up to the largest (a rank per bitmap word), the
   * sparse one 16 bytes per edge: a few edges with a large id ("0 3000000000") take the
   * sparse one, so memory and time follow the file, not the ids it names. */
  if (!big && (max_id >> 6) > 8 * (uint64_t)edges + 65536) big = true;
  if ((st = big ? map_sparse(&c, edges, &original) : map_dense(&c, max_id, &original))) goto done;
  gr_source src = {.op = c.op,
                   .what = path,
                   .n = c.n,
                   .max_edges = edges,
                   .num_chunks = chunks,
                   .scan = scan_push,
                   .ctx = &c,
                   .text = &c.text,
                   .weighted = c.weighted};
  if ((st = gr_build(out, &src, opts))) goto done;
  (*out)->original = original;
  original = NULL;
done:
  gr_free(original);
  snap_free(&c);
  return st;
}
