/* graph.c - a graph's life cycle and inspection, loading by format, and the small helpers
 * every graph file uses (memory, time, progress). */
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include "core/core_impl.h"
#include "graph_impl.h"
#include "tensor/tensor_impl.h"

/* ---- memory */

typedef struct alloc_header {
  size_t bytes, offset; /* offset: from the block malloc returned to the data */
  void *base;
} alloc_header;

static void *alloc_aligned(size_t bytes, bool zero) {
  if (bytes > SIZE_MAX - 128) return NULL;
  char *base = zero ? calloc(1, bytes + 128) : malloc(bytes + 128);
  if (!base) return NULL;
  char *p = (char *)(((uintptr_t)base + 127) & ~(uintptr_t)63); /* >= 64 bytes for the header */
  /* Large arrays (CSR, scores, contributions) are read at random: 2 MiB pages spare the
   * TLB. With transparent huge pages in "madvise" mode they must be asked for. */
  if (bytes >= ((size_t)8 << 20)) {
    uintptr_t a = ((uintptr_t)p + 4095) & ~(uintptr_t)4095, e = ((uintptr_t)p + bytes) & ~(uintptr_t)4095;
    if (e > a) madvise((void *)a, e - a, MADV_HUGEPAGE);
  }
  alloc_header *h = (alloc_header *)p - 1;
  h->bytes = bytes;
  h->offset = (size_t)(p - base);
  h->base = base;
  core_memory_count((int64_t)bytes);
  return p;
}

void *gr_alloc(size_t bytes) { return alloc_aligned(bytes, false); }
void *gr_calloc(size_t bytes) { return alloc_aligned(bytes, true); }

void gr_free(void *p) {
  if (!p) return;
  alloc_header *h = (alloc_header *)p - 1;
  core_memory_count(-(int64_t)h->bytes);
  free(h->base);
}

void *gr_shrink(void *p, size_t bytes) {
  alloc_header *h = (alloc_header *)p - 1;
  size_t old = h->bytes, off = h->offset;
  if (bytes >= old) return p;
  char *base = realloc(h->base, bytes + 128); /* large blocks shrink in place (mremap) */
  if (!base) return p; /* a failed shrink leaves the block as it was */
  char *q = (char *)(((uintptr_t)base + 127) & ~(uintptr_t)63);
  if (q != base + off) memmove(q, base + off, bytes);
  h = (alloc_header *)q - 1;
  h->bytes = bytes;
  h->offset = (size_t)(q - base);
  h->base = base;
  core_memory_count((int64_t)bytes - (int64_t)old);
  return q;
}

void gr_free_array(em_graph *g, void *p) {
  if (!p) return;
  if (g->map && (char *)p >= (char *)g->map && (char *)p < (char *)g->map + g->map_bytes) return;
  gr_free(p);
}

em_status gr_oom(const char *op, size_t bytes) {
  return em_set_error(EM_ERR_MEMORY, "%s: out of memory allocating %.1f MiB", op, (double)bytes / (1 << 20));
}

em_graph *gr_graph_new(void) {
  em_graph *g = calloc(1, sizeof *g);
  if (g) g->directed = true;
  return g;
}

void em_graph_free(em_graph *g) {
  if (!g) return;
  gr_free_array(g, g->offsets);
  gr_free_array(g, g->sources);
  gr_free_array(g, g->weights);
  gr_free_array(g, g->out_degree);
  gr_free_array(g, g->to_dense);
  gr_free_array(g, g->to_internal);
  gr_free_array(g, g->original);
  gr_free_array(g, g->label_offsets);
  gr_free_array(g, g->label_data);
  if (g->map) munmap(g->map, g->map_bytes);
  free(g);
}

/* ---- utilities */

int gr_threads(void) { return em_get_num_threads(); }

void gr_quote_line(char *buf, size_t cap, const char *s, const char *end) {
  size_t n = 0;
  while (s + n < end && s[n] != '\n' && s[n] != '\r' && n < 40) n++;
  bool cut = s + n < end && s[n] != '\n' && s[n] != '\r';
  size_t w = 0;
  for (size_t i = 0; i < n && w + 2 < cap; i++) buf[w++] = (s[i] >= 32 && s[i] < 127) ? s[i] : '?';
  if (cut && w + 4 < cap) {
    memcpy(buf + w, "...", 3);
    w += 3;
  }
  buf[w] = 0;
}

void gr_progress_init(gr_progress *p, int mode, const char *op, const char *what, const char *stage, int64_t total) {
  p->on = mode == 1 || (mode < 0 && isatty(STDERR_FILENO));
  p->op = op;
  p->what = what;
  p->stage = stage;
  p->total = total > 0 ? total : 1;
  atomic_init(&p->done, 0);
  atomic_init(&p->printing, 0);
  p->start = p->last = em_clock_monotonic();
}

void gr_progress_add(gr_progress *p, int64_t delta) {
  long long done = atomic_fetch_add(&p->done, delta) + delta;
  if (!p->on) return;
  int expected = 0;
  if (!atomic_compare_exchange_strong(&p->printing, &expected, 1)) return;
  double now = em_clock_monotonic();
  if (now - p->last >= 0.5) {
    p->last = now;
    fprintf(stderr, "\r%s: %s: %s %5.1f%% (%.0f s)", p->op, p->what, p->stage, 100.0 * (double)done / (double)p->total,
            now - p->start);
    fflush(stderr);
  }
  atomic_store(&p->printing, 0);
}

void gr_progress_end(gr_progress *p) {
  if (p->on)
    fprintf(stderr, "\r%s: %s: %s done in %.1f s      \n", p->op, p->what, p->stage, em_clock_monotonic() - p->start);
}

/* ---- options and loading */

void em_graph_options_init(em_graph_options *opts) {
  *opts = (em_graph_options){.format = EM_GRAPH_FORMAT_AUTO,
                             .directed = 1,
                             .reverse = 0,
                             .drop_self_loops = 0,
                             .drop_duplicates = 0,
                             .reorder = EM_GRAPH_REORDER_DEGREE,
                             .progress = -1,
                             .verify = 1,
                             .weights = 1};
}

static bool ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && !strcasecmp(s + a - b, suffix);
}

em_status em_graph_load(em_graph **out, const char *path, const em_graph_options *opts) {
  em_graph_options defaults;
  if (!opts) em_graph_options_init(&defaults), opts = &defaults;
  if (!out) return em_set_error(EM_ERR_ARGUMENT, "graph load: out is NULL");
  *out = NULL;
  if (!path) return em_set_error(EM_ERR_ARGUMENT, "graph load: path is NULL");
  if (opts->reorder != EM_GRAPH_REORDER_NONE && opts->reorder != EM_GRAPH_REORDER_DEGREE)
    return em_set_error(EM_ERR_ARGUMENT, "graph load: reorder is %d, expected 0 (none) or 1 (degree)", opts->reorder);
  int format = opts->format;
  if (format == EM_GRAPH_FORMAT_AUTO && ends_with(path, ".wsg")) /* else it would be read as text */
    return em_set_error(EM_ERR_UNSUPPORTED,
                        "graph load: '%s': the GAP benchmark's weighted .wsg format is not supported (its .sg is); "
                        "expected .mtx, .sg, .emg or a text edge list ('u v weight' lines carry weights)",
                        path);
  if (format == EM_GRAPH_FORMAT_AUTO) {
    format = ends_with(path, ".mtx")   ? EM_GRAPH_FORMAT_MTX
             : ends_with(path, ".sg")  ? EM_GRAPH_FORMAT_SG
             : ends_with(path, ".emg") ? EM_GRAPH_FORMAT_EMBER
                                       : EM_GRAPH_FORMAT_SNAP;
  }
  switch (format) {
    case EM_GRAPH_FORMAT_SNAP: return gr_load_snap(out, path, opts);
    case EM_GRAPH_FORMAT_MTX: return gr_load_mtx(out, path, opts);
    case EM_GRAPH_FORMAT_SG: return gr_load_sg(out, path, opts);
    case EM_GRAPH_FORMAT_EMBER: return gr_load_ember(out, path, opts);
    default:
      return em_set_error(EM_ERR_ARGUMENT, "graph load: '%s': format %d is not one of auto, snap, mtx, sg, ember", path,
                          format);
  }
}

/* ---- edges from arrays */

typedef struct array_ctx {
  const int64_t *src, *dst;
  int64_t m;
} array_ctx;

#define ARRAY_CHUNK (1 << 20)

static em_status scan_arrays(void *ctx, int64_t chunk, gr_sink *sink) {
  const array_ctx *a = ctx;
  int64_t begin = chunk * ARRAY_CHUNK, end = begin + ARRAY_CHUNK < a->m ? begin + ARRAY_CHUNK : a->m;
  for (int64_t e = begin; e < end; e++) gr_sink_push(sink, (uint32_t)a->src[e], (uint32_t)a->dst[e]);
  return EM_OK;
}

em_status em_graph_from_edges(em_graph **out, int64_t num_vertices, int64_t num_edges, const int64_t *src,
                              const int64_t *dst, const em_graph_options *opts) {
  const char *op = "graph from_edges";
  if (!out) return em_set_error(EM_ERR_ARGUMENT, "%s: out is NULL", op);
  *out = NULL;
  if (num_vertices < 0 || num_vertices > GR_MAX_VERTICES)
    return em_set_error(EM_ERR_ARGUMENT, "%s: num_vertices is %lld, expected 0..%lld", op, (long long)num_vertices,
                        (long long)GR_MAX_VERTICES);
  if (num_edges < 0)
    return em_set_error(EM_ERR_ARGUMENT, "%s: num_edges is %lld, expected >= 0", op, (long long)num_edges);
  if (num_edges > 0 && (!src || !dst)) return em_set_error(EM_ERR_ARGUMENT, "%s: src or dst is NULL", op);
  for (int64_t e = 0; e < num_edges; e++) {
    if (src[e] < 0 || src[e] >= num_vertices || dst[e] < 0 || dst[e] >= num_vertices)
      return em_set_error(EM_ERR_INDEX, "%s: edge %lld is %lld -> %lld, expected ids in [0, %lld)", op, (long long)e,
                          (long long)src[e], (long long)dst[e], (long long)num_vertices);
  }
  em_graph_options defaults;
  if (!opts) em_graph_options_init(&defaults), opts = &defaults;
  array_ctx ctx = {src, dst, num_edges};
  gr_source source = {.op = op,
                      .what = "edge arrays",
                      .n = num_vertices,
                      .max_edges = num_edges,
                      .num_chunks = (num_edges + ARRAY_CHUNK - 1) / ARRAY_CHUNK,
                      .scan = scan_arrays,
                      .ctx = &ctx};
  return gr_build(out, &source, opts);
}

/* ---- inspection */

int64_t em_graph_num_vertices(const em_graph *g) { return g ? g->n : 0; }
int64_t em_graph_num_edges(const em_graph *g) { return g ? g->m : 0; }
int em_graph_is_directed(const em_graph *g) { return g && g->directed; }
int em_graph_is_weighted(const em_graph *g) { return g && g->weights; }

int64_t em_graph_original_id(const em_graph *g, int64_t v) {
  if (!g || v < 0 || v >= g->n) return -1;
  return g->original ? g->original[v] : v + g->id_base;
}

em_status em_graph_find_vertex(const em_graph *g, int64_t original_id, int64_t *v) {
  if (!g || !v) return em_set_error(EM_ERR_ARGUMENT, "graph find_vertex: graph or result is NULL");
  if (!g->original) {
    int64_t d = original_id - g->id_base;
    if (d >= 0 && d < g->n) {
      *v = d;
      return EM_OK;
    }
  } else {
    int64_t lo = 0, hi = g->n; /* original[] ascends */
    while (lo < hi) {
      int64_t mid = lo + (hi - lo) / 2;
      if (g->original[mid] < original_id) lo = mid + 1;
      else hi = mid;
    }
    if (lo < g->n && g->original[lo] == original_id) {
      *v = lo;
      return EM_OK;
    }
  }
  return em_set_error(EM_ERR_INDEX, "graph find_vertex: %lld is not a vertex id of this graph", (long long)original_id);
}

const char *em_graph_label(const em_graph *g, int64_t v) {
  if (!g || !g->label_offsets || v < 0 || v >= g->n) return NULL;
  return g->label_offsets[v + 1] > g->label_offsets[v] ? g->label_data + g->label_offsets[v] : NULL;
}

static em_status new_int64(em_tensor **out, int64_t n) {
  return em_empty(out, 1, &n, EM_INT64, (em_device){EM_CPU, 0});
}

em_status em_graph_degrees(const em_graph *g, em_tensor **in_degree, em_tensor **out_degree) {
  if (!g) return em_set_error(EM_ERR_ARGUMENT, "graph degrees: graph is NULL");
  em_tensor *in = NULL, *outd = NULL;
  em_status st;
  if (in_degree && (st = new_int64(&in, g->n))) return st;
  if (out_degree && (st = new_int64(&outd, g->n))) {
    if (in) em_tensor_release(in);
    return st;
  }
  int64_t *pi = in ? em_tensor_data(in) : NULL, *po = outd ? em_tensor_data(outd) : NULL;
#pragma omp parallel for schedule(static) num_threads(gr_threads())
  for (int64_t v = 0; v < g->n; v++) {
    uint32_t i = gr_internal(g, v);
    if (pi) pi[v] = g->offsets[i + 1] - g->offsets[i];
    if (po) po[v] = g->out_degree[i];
  }
  if (in_degree) *in_degree = in;
  if (out_degree) *out_degree = outd;
  return EM_OK;
}

em_status em_graph_original_ids(const em_graph *g, em_tensor **out) {
  if (!g || !out) return em_set_error(EM_ERR_ARGUMENT, "graph original_ids: graph or out is NULL");
  em_status st = new_int64(out, g->n);
  if (st) return st;
  int64_t *p = em_tensor_data(*out);
#pragma omp parallel for schedule(static) num_threads(gr_threads())
  for (int64_t v = 0; v < g->n; v++) p[v] = g->original ? g->original[v] : v + g->id_base;
  return EM_OK;
}

em_status em_graph_edges(const em_graph *g, em_tensor **src, em_tensor **dst) {
  if (!g || !src || !dst) return em_set_error(EM_ERR_ARGUMENT, "graph edges: graph, src or dst is NULL");
  em_status st;
  em_tensor *s = NULL, *d = NULL;
  if ((st = new_int64(&s, g->m))) return st;
  if ((st = new_int64(&d, g->m))) {
    em_tensor_release(s);
    return st;
  }
  int64_t *ps = em_tensor_data(s), *pd = em_tensor_data(d);
  int64_t *start = gr_alloc((size_t)(g->n + 1) * sizeof *start);
  if (!start) {
    em_tensor_release(s);
    em_tensor_release(d);
    return gr_oom("graph edges", (size_t)(g->n + 1) * 8);
  }
  start[0] = 0; /* arcs of dense vertex v start at start[v] */
  for (int64_t v = 0; v < g->n; v++) {
    uint32_t i = gr_internal(g, v);
    start[v + 1] = start[v] + (g->offsets[i + 1] - g->offsets[i]);
  }
  int64_t max_deg = 0;
  for (int64_t i = 0; i < g->n; i++)
    if (g->offsets[i + 1] - g->offsets[i] > max_deg) max_deg = g->offsets[i + 1] - g->offsets[i];
  int failed = 0;
#pragma omp parallel num_threads(gr_threads()) reduction(| : failed)
  {
    /* sources are sorted by internal id; with a reordering they are re-sorted by dense id */
    uint32_t *buf = g->to_dense ? gr_alloc((size_t)(2 * max_deg + 1) * sizeof *buf) : NULL;
    failed |= g->to_dense && !buf;
#pragma omp for schedule(dynamic, 1024)
    for (int64_t v = 0; v < g->n; v++) {
      if (g->to_dense && !buf) continue;
      uint32_t i = gr_internal(g, v);
      int64_t k = start[v], deg = g->offsets[i + 1] - g->offsets[i];
      const uint32_t *from = g->sources + g->offsets[i];
      if (buf) {
        for (int64_t j = 0; j < deg; j++) buf[j] = g->to_dense[from[j]];
        gr_sort_u32(buf, deg, buf + deg);
        from = buf;
      }
      for (int64_t j = 0; j < deg; j++) {
        ps[k + j] = from[j];
        pd[k + j] = v;
      }
    }
    gr_free(buf);
  }
  if (failed) {
    gr_free(start);
    em_tensor_release(s);
    em_tensor_release(d);
    return gr_oom("graph edges", (size_t)(2 * max_deg + 1) * 4);
  }
  gr_free(start);
  *src = s;
  *dst = d;
  return EM_OK;
}

static int cmp_key(const void *x, const void *y) {
  uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
  return a < b ? -1 : a > b;
}

/* In em_graph_edges' order: by destination, then dense source; repeated arcs (same source)
 * by weight, which is the order the CSR builder sorted them in. */
em_status em_graph_edge_weights(const em_graph *g, em_tensor **out) {
  if (!g || !out) return em_set_error(EM_ERR_ARGUMENT, "graph edge_weights: graph or out is NULL");
  int64_t m = g->m;
  em_status st = em_empty(out, 1, &m, EM_FLOAT32, (em_device){EM_CPU, 0});
  if (st) return st;
  float *pw = em_tensor_data(*out);
  if (!g->weights) {
    for (int64_t j = 0; j < m; j++) pw[j] = 1;
    return EM_OK;
  }
  int64_t max_deg = 0, k = 0;
  for (int64_t i = 0; i < g->n; i++)
    if (g->offsets[i + 1] - g->offsets[i] > max_deg) max_deg = g->offsets[i + 1] - g->offsets[i];
  uint64_t *key = malloc((size_t)(max_deg ? max_deg : 1) * sizeof *key);
  if (!key) {
    em_tensor_release(*out);
    *out = NULL;
    return gr_oom("graph edge_weights", (size_t)max_deg * 8);
  }
  for (int64_t v = 0; v < g->n; v++) {
    uint32_t i = gr_internal(g, v);
    int64_t b = g->offsets[i], deg = g->offsets[i + 1] - b;
    for (int64_t j = 0; j < deg; j++) {
      uint32_t bits;
      memcpy(&bits, &g->weights[b + j], sizeof bits);
      key[j] = (uint64_t)gr_dense(g, g->sources[b + j]) << 32 | bits;
    }
    qsort(key, (size_t)deg, sizeof *key, cmp_key);
    for (int64_t j = 0; j < deg; j++) {
      uint32_t bits = (uint32_t)key[j];
      memcpy(&pw[k++], &bits, sizeof bits);
    }
  }
  free(key);
  return EM_OK;
}

em_status gr_tensor_values(const char *op, const em_tensor *t, int64_t n, double **out) {
  em_status st = tn_check_tensor(op, t, "scores");
  if (st) return st;
  if (t->ndim != 1 || t->sizes[0] != n)
    return em_set_error(EM_ERR_SHAPE, "%s: got a tensor of shape %s, expected [%lld]", op, EM_SHAPE(t), (long long)n);
  if (em_tensor_device(t).type != EM_CPU) return em_set_error(EM_ERR_DEVICE, "%s: expected a CPU tensor", op);
  double *v = gr_alloc((size_t)(n ? n : 1) * sizeof *v);
  if (!v) return gr_oom(op, (size_t)n * 8);
  em_tensor *view = NULL;
  st = em_from_blob(&view, v, 1, &n, NULL, EM_FLOAT64, (em_device){EM_CPU, 0}, NULL, NULL);
  if (!st) st = em_copy_(view, t);
  if (view) em_tensor_release(view);
  if (st) {
    gr_free(v);
    return st;
  }
  *out = v;
  return EM_OK;
}
