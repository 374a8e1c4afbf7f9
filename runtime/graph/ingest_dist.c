/* ingest_dist.c - building partitioned graphs: each rank generates its slice of the
 * edges, or parses its own byte range of a SNAP or Matrix Market file, then partition.c
 * shuffles the arcs to their owners.
 *
 * Byte ranges: rank r takes the bytes [S*r/N, S*(r+1)/N) of the file's body, each end
 * moved forward to the next line start, so every line belongs to exactly one rank (the
 * rank whose range holds its first byte). Line numbers in errors count the lines of the
 * ranges before (one all_gather of each range's line count).
 * SNAP ids are remapped to dense ids as em_graph_load does (the rank of the id among the
 * ids present): one all_reduce (max) of a byte per id marks the ids present, so ids must
 * be below 2^32 here.
 * Weights: a Matrix Market real or integer matrix (not skew-symmetric) and a SNAP file
 * whose edge lines have a third field are weighted, as em_graph_load reads them (the same
 * checks, gr_parse_weight; a SNAP file needs a weight on every edge line or on none, which
 * the ranks settle together); each arc carries its weight to its owner (partition.c).
 * weights = 0 in the options loads the file unweighted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ember/dist.h"
#include "graph_impl.h"

typedef struct arcs {
  uint32_t *u, *v;
  float *w; /* weights; NULL: unweighted */
  int64_t len, cap;
} arcs;

static em_status arcs_init(arcs *a, const char *op, int64_t cap, bool weighted) {
  a->len = 0;
  a->cap = cap > 0 ? cap : 1;
  a->u = gr_alloc((size_t)a->cap * 4);
  a->v = gr_alloc((size_t)a->cap * 4);
  a->w = weighted ? gr_alloc((size_t)a->cap * 4) : NULL;
  if (!a->u || !a->v || (weighted && !a->w)) {
    gr_free(a->u), gr_free(a->v), gr_free(a->w);
    a->u = a->v = NULL;
    a->w = NULL;
    return gr_oom(op, (size_t)a->cap * 12);
  }
  return EM_OK;
}

/* The options of em_graph_options, applied as the single-process builder does: reversal,
 * then self-loop drops, then the second arc of an undirected edge. In place; a has room
 * for twice its arcs when undirected. */
static void apply_options(arcs *a, const em_graph_options *o, bool directed) {
  int64_t w = 0, len = a->len;
  for (int64_t i = 0; i < len; i++) {
    uint32_t u = a->u[i], v = a->v[i];
    if (o->reverse) u = a->v[i], v = a->u[i];
    if (u == v && o->drop_self_loops) continue;
    if (a->w) a->w[w] = a->w[i];
    a->u[w] = u, a->v[w++] = v;
  }
  a->len = w;
  if (!directed)
    for (int64_t i = 0; i < w; i++)
      if (a->u[i] != a->v[i]) {
        if (a->w) a->w[a->len] = a->w[i];
        a->u[a->len] = a->v[i], a->v[a->len++] = a->u[i];
      }
}

static em_status check_group(const char *op, em_dist_group *g) {
  if (!g) return em_set_error(EM_ERR_ARGUMENT, "%s: the process group is NULL", op);
  if (em_dist_rank(g) < 0) return em_set_error(EM_ERR_ARGUMENT, "%s: this process is not a member of the group", op);
  return EM_OK;
}

/* ---- generators */
static em_status generated(em_graph_part **out, em_dist_group *g, const char *op, int kind, int32_t scale, int64_t n,
                           int64_t m, uint64_t seed, const em_graph_options *opts) {
  em_graph_options defaults;
  if (!opts) em_graph_options_init(&defaults), opts = &defaults;
  int rank = em_dist_rank(g), size = em_dist_size(g);
  int64_t e0 = (int64_t)((__int128)m * rank / size), e1 = (int64_t)((__int128)m * (rank + 1) / size);
  arcs a;
  em_status st = arcs_init(&a, op, (e1 - e0) * (opts->directed ? 1 : 2), false);
  if (!st) {
    gr_generate_slice(kind, scale, n, seed, e0, e1, a.u, a.v);
    a.len = e1 - e0;
    apply_options(&a, opts, opts->directed);
  }
  if ((st = gr_agree(g, op, st))) return st;
  return gr_part_build(out, g, op, n, a.u, a.v, NULL, a.len, opts->drop_duplicates, opts->directed);
}

em_status em_graph_part_kronecker(em_graph_part **out, em_dist_group *g, int32_t scale, int32_t edge_factor,
                                  uint64_t seed, const em_graph_options *opts) {
  const char *op = "graph part kronecker";
  if (!out) return em_set_error(EM_ERR_ARGUMENT, "%s: out is NULL", op);
  *out = NULL;
  em_status st = check_group(op, g);
  if (st) return st;
  if (scale < 1 || scale > 31)
    return em_set_error(EM_ERR_ARGUMENT, "%s: scale is %d, expected 1..31 (2^scale vertices)", op, scale);
  if (edge_factor < 1 || ((int64_t)edge_factor << scale) > ((int64_t)1 << 40))
    return em_set_error(EM_ERR_ARGUMENT, "%s: edge_factor is %d, expected 1.. with edge_factor * 2^scale <= 2^40", op,
                        edge_factor);
  return generated(out, g, op, 0, scale, (int64_t)1 << scale, (int64_t)edge_factor << scale, seed, opts);
}

em_status em_graph_part_uniform(em_graph_part **out, em_dist_group *g, int64_t num_vertices, int64_t num_edges,
                                uint64_t seed, const em_graph_options *opts) {
  const char *op = "graph part uniform";
  if (!out) return em_set_error(EM_ERR_ARGUMENT, "%s: out is NULL", op);
  *out = NULL;
  em_status st = check_group(op, g);
  if (st) return st;
  if (num_vertices < 1 || num_vertices > GR_MAX_VERTICES)
    return em_set_error(EM_ERR_ARGUMENT, "%s: num_vertices is %lld, expected 1..%lld", op, (long long)num_vertices,
                        (long long)GR_MAX_VERTICES);
  if (num_edges < 0 || num_edges > ((int64_t)1 << 40))
    return em_set_error(EM_ERR_ARGUMENT, "%s: num_edges is %lld, expected 0..2^40", op, (long long)num_edges);
  return generated(out, g, op, 1, 0, num_vertices, num_edges, seed, opts);
}

/* ---- text files */
typedef struct text_range {
  const char *op, *path;
  const char *data;
  size_t body, begin, end; /* the body's start; this rank's lines */
  int64_t line0; /* the line number of the body's first line (1-based) */
  int64_t lines_before; /* lines of the ranges before this rank's */
  bool mtx;
  int field; /* Matrix Market: 0 pattern, 1 real, 2 integer */
  bool weighted; /* Matrix Market: the values are weights; SNAP: third fields are read */
  uint64_t rows; /* Matrix Market: the size line's */
  uint64_t max_id; /* SNAP: the largest id seen */
  int64_t with_weight; /* SNAP: edge lines with a third field */
  int64_t first_with, first_without; /* SNAP: their first line numbers; -1 none */
} text_range;

static size_t line_start(const text_range *t, size_t size, size_t pos) {
  if (pos <= t->body) return t->body;
  if (pos >= size) return size;
  if (t->data[pos - 1] == '\n') return pos;
  const char *nl = memchr(t->data + pos, '\n', size - pos);
  return nl ? (size_t)(nl - t->data) + 1 : size;
}

static int64_t count_lines(const char *s, const char *e) {
  int64_t n = 0;
  for (; s < e && (s = memchr(s, '\n', (size_t)(e - s))); s++) n++;
  return n;
}

static int64_t line_no(const text_range *t, const char *line) {
  return t->line0 + t->lines_before + count_lines(t->data + t->begin, line);
}

static em_status bad_line(const text_range *t, const char *line, const char *why) {
  char quoted[64];
  const char *e = t->data + t->end;
  gr_quote_line(quoted, sizeof quoted, line, e);
  return em_set_error(EM_ERR_FORMAT, "%s: %s:%lld: %s, got '%s'", t->op, t->path, (long long)line_no(t, line), why,
                      quoted);
}

/* An error as em_graph_load words it (file:line: what is wrong). */
static em_status bad_entry(const text_range *t, const char *line, const char *msg) {
  return em_set_error(EM_ERR_FORMAT, "%s: %s:%lld: %s", t->op, t->path, (long long)line_no(t, line), msg);
}
static em_status bad_weight(const text_range *t, const char *line, const char *msg) {
  char full[240];
  snprintf(full, sizeof full, "%s (the third field is the edge's weight)", msg);
  return bad_entry(t, line, full);
}

/* Matrix Market: the entry's value, then nothing but blanks, checked as parse_mtx.c does
 * (the weight's range when weighted, the number's syntax always). */
static em_status mtx_value(const text_range *t, const char *line, const char **pp, const char *end, float *w) {
  const char *p = *pp;
  char msg[200], quoted[64];
  while (p < end && gr_is_blank(*p)) p++;
  if (t->field) {
    if (p == end || *p == '\n') return bad_entry(t, line, "missing the entry's value");
    const char *value = p;
    int bad = t->weighted ? gr_parse_weight(&value, end, w, msg, sizeof msg) : 0;
    if (bad == GR_WEIGHT_NAN || bad == GR_WEIGHT_INFINITE) return bad_entry(t, line, msg);
    bool ok = gr_mtx_read_value(&p, end, t->field == 2);
    if (ok && bad) return bad_entry(t, line, msg);
    if (!ok) {
      gr_quote_line(quoted, sizeof quoted, line, end);
      snprintf(msg, sizeof msg, "expected %s value, got '%s'", t->field == 2 ? "an integer" : "a real", quoted);
      return bad_entry(t, line, msg);
    }
    while (p < end && gr_is_blank(*p)) p++;
  }
  if (p < end && *p != '\n') {
    gr_quote_line(quoted, sizeof quoted, line, end);
    snprintf(msg, sizeof msg, "unexpected text after the entry: '%s'", quoted);
    return bad_entry(t, line, msg);
  }
  *pp = p;
  return EM_OK;
}

/* Parses this rank's lines into a (1-based Matrix Market indices made 0-based). */
static em_status parse_range(text_range *t, arcs *a) {
  const char *p = t->data + t->begin, *end = t->data + t->end;
  while (p < end) {
    const char *line = p;
    while (p < end && gr_is_blank(*p)) p++;
    if (p == end) break;
    if (*p == '\n' || *p == '#' || *p == '%') {
      const char *nl = memchr(p, '\n', (size_t)(end - p));
      p = nl ? nl + 1 : end;
      continue;
    }
    uint64_t x[2];
    for (int k = 0; k < 2; k++) {
      if (k) {
        if (p == end || !gr_is_blank(*p)) return bad_line(t, line, "expected two ids separated by blanks");
        while (p < end && gr_is_blank(*p)) p++;
      }
      int r = gr_parse_u64(&p, end, &x[k]);
      if (r) return bad_line(t, line, r == 1 ? "expected a non-negative integer id" : "an id exceeds 2^64-1");
      if (t->mtx ? (x[k] < 1 || x[k] > t->rows) : x[k] >= ((uint64_t)1 << 32) - 1) {
        char why[120];
        if (t->mtx)
          snprintf(why, sizeof why, "index %llu is out of range, expected 1..%llu", (unsigned long long)x[k],
                   (unsigned long long)t->rows);
        else
          snprintf(why, sizeof why, "id %llu: distributed loading takes ids below 2^32 - 1", (unsigned long long)x[k]);
        return bad_line(t, line, why);
      }
    }
    if (p < end && !gr_is_blank(*p) && *p != '\n') return bad_line(t, line, "expected blanks after the two ids");
    float w = 1;
    if (t->mtx) {
      em_status st = mtx_value(t, line, &p, end, &w);
      if (st) return st;
      if (t->weighted) a->w[a->len] = w;
    } else if (t->weighted) {
      char msg[160];
      while (p < end && gr_is_blank(*p)) p++;
      bool has = p < end && *p != '\n' && *p != '#';
      if (has && gr_parse_weight(&p, end, &w, msg, sizeof msg)) return bad_weight(t, line, msg);
      if (has && t->first_with < 0) t->first_with = line_no(t, line);
      if (!has && t->first_without < 0) t->first_without = line_no(t, line);
      t->with_weight += has;
      a->w[a->len] = w;
    }
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    p = nl ? nl + 1 : end;
    uint64_t base = t->mtx ? 1 : 0;
    a->u[a->len] = (uint32_t)(x[0] - base);
    a->v[a->len++] = (uint32_t)(x[1] - base);
    if (x[0] > t->max_id) t->max_id = x[0];
    if (x[1] > t->max_id) t->max_id = x[1];
  }
  return EM_OK;
}

/* Matrix Market's banner and size line; sets body, line0, rows, *symmetric, *entries. */
static em_status mtx_header(text_range *t, size_t size, bool *symmetric, uint64_t *entries, bool read_weights) {
  const char *d = t->data, *end = d + size;
  const char *nl = memchr(d, '\n', size);
  const char *le = nl ? nl : end;
  char banner[256];
  size_t len = (size_t)(le - d) < sizeof banner - 1 ? (size_t)(le - d) : sizeof banner - 1;
  memcpy(banner, d, len);
  banner[len] = 0;
  char w[5][64];
  if (sscanf(banner, "%63s %63s %63s %63s %63s", w[0], w[1], w[2], w[3], w[4]) != 5 ||
      strcmp(w[0], "%%MatrixMarket") || strcasecmp(w[1], "matrix") || strcasecmp(w[2], "coordinate"))
    return em_set_error(EM_ERR_FORMAT,
                        "%s: %s:1: expected '%%%%MatrixMarket matrix coordinate FIELD SYMMETRY', got '%.60s'", t->op,
                        t->path, banner);
  *symmetric = !strcasecmp(w[4], "symmetric") || !strcasecmp(w[4], "skew-symmetric");
  if (!*symmetric && strcasecmp(w[4], "general"))
    return em_set_error(EM_ERR_FORMAT, "%s: %s:1: the symmetry must be general, symmetric or skew-symmetric: '%s'",
                        t->op, t->path, w[4]);
  if (strcasecmp(w[3], "pattern") && strcasecmp(w[3], "real") && strcasecmp(w[3], "integer"))
    return em_set_error(EM_ERR_FORMAT, "%s: %s:1: the field must be pattern, real or integer: '%s'", t->op, t->path,
                        w[3]);
  t->field = !strcasecmp(w[3], "pattern") ? 0 : !strcasecmp(w[3], "real") ? 1 : 2;
  t->weighted = read_weights && t->field && strcasecmp(w[4], "skew-symmetric");
  const char *p = nl ? nl + 1 : end;
  int64_t line = 2;
  for (; p < end; line++) {
    const char *e = memchr(p, '\n', (size_t)(end - p));
    e = e ? e : end;
    const char *s = p;
    while (s < e && gr_is_blank(*s)) s++;
    if (s < e && *s != '%') {
      unsigned long long r, c, k;
      char buf[128];
      size_t n = (size_t)(e - s) < sizeof buf - 1 ? (size_t)(e - s) : sizeof buf - 1;
      memcpy(buf, s, n);
      buf[n] = 0;
      if (sscanf(buf, "%llu %llu %llu", &r, &c, &k) != 3 || r >= ((uint64_t)1 << 32) - 1)
        return em_set_error(EM_ERR_FORMAT, "%s: %s:%lld: expected the size line 'rows columns entries', got '%.60s'",
                            t->op, t->path, (long long)line, buf);
      t->rows = r > c ? r : c;
      *entries = k;
      t->body = e < end ? (size_t)(e - d) + 1 : size;
      t->line0 = line + 1;
      return EM_OK;
    }
    p = e < end ? e + 1 : end;
  }
  return em_set_error(EM_ERR_FORMAT, "%s: %s: the file ends before the size line 'rows columns entries'", t->op,
                      t->path);
}

/* SNAP: the ids present (a byte per id up to the largest, max over ranks), then dense ids. */
static em_status remap_snap(em_dist_group *g, const char *op, arcs *a, uint64_t max_id, int64_t *n,
                            uint8_t **present) {
  int64_t ids = (int64_t)max_id + 1;
  uint8_t *seen = gr_calloc((size_t)ids);
  uint32_t *dense = gr_alloc((size_t)ids * 4);
  em_status st = EM_OK;
  if (!seen || !dense) st = gr_oom(op, (size_t)ids * 5);
  if ((st = gr_agree(g, op, st))) goto fail;
  for (int64_t i = 0; i < a->len; i++) seen[a->u[i]] = seen[a->v[i]] = 1;
  if ((st = gr_allreduce(g, seen, ids, EM_UINT8, EM_DIST_MAX))) goto fail;
  int64_t k = 0;
  for (int64_t x = 0; x < ids; x++) {
    dense[x] = (uint32_t)k;
    k += seen[x];
  }
  for (int64_t i = 0; i < a->len; i++) a->u[i] = dense[a->u[i]], a->v[i] = dense[a->v[i]];
  gr_free(dense);
  *n = k;
  *present = seen;
  return EM_OK;
fail:
  gr_free(seen);
  gr_free(dense);
  return st;
}

/* The original ids of this rank's vertices from the ids present. */
static em_status snap_originals(em_graph_part *p, const uint8_t *seen, int64_t ids) {
  if (p->n == ids) return EM_OK; /* ids are exactly 0..n-1 */
  if (!(p->original = gr_alloc((size_t)(p->nl ? p->nl : 1) * 8))) return gr_oom("graph part load", (size_t)p->nl * 8);
  int64_t k = 0, j = 0;
  for (int64_t x = 0; x < ids && j < p->nl; x++)
    if (seen[x]) {
      if (k >= p->begin) p->original[j++] = x;
      k++;
    }
  return EM_OK;
}

em_status em_graph_part_load(em_graph_part **out, em_dist_group *g, const char *path, const em_graph_options *opts) {
  const char *op = "graph part load";
  if (!out || !path) return em_set_error(EM_ERR_ARGUMENT, "%s: out or path is NULL", op);
  *out = NULL;
  em_status st = check_group(op, g);
  if (st) return st;
  em_graph_options defaults;
  if (!opts) em_graph_options_init(&defaults), opts = &defaults;
  size_t plen = strlen(path);
  int fmt = opts->format;
  if (fmt == EM_GRAPH_FORMAT_AUTO) {
    fmt = plen > 4 && !strcmp(path + plen - 4, ".emp")   ? EM_GRAPH_FORMAT_EMBER
          : plen > 4 && !strcmp(path + plen - 4, ".mtx") ? EM_GRAPH_FORMAT_MTX
          : plen > 3 && !strcmp(path + plen - 3, ".sg")  ? EM_GRAPH_FORMAT_SG
                                                         : EM_GRAPH_FORMAT_SNAP;
  }
  if (fmt == EM_GRAPH_FORMAT_EMBER) return gr_part_load_cache(out, g, path, opts->verify != 0, opts->weights != 0);
  if (fmt == EM_GRAPH_FORMAT_SG)
    return em_set_error(EM_ERR_ARGUMENT, "%s: %s: .sg files load on one process only (em_graph_load), expected SNAP or "
                        "Matrix Market text, or a partitioned cache (.emp)", op, path);
  gr_text text;
  if ((st = gr_agree(g, op, gr_text_open(&text, op, path)))) return st;
  text_range t = {.op = op,
                  .path = path,
                  .data = text.data,
                  .line0 = 1,
                  .mtx = fmt == EM_GRAPH_FORMAT_MTX,
                  .weighted = fmt != EM_GRAPH_FORMAT_MTX && opts->weights != 0,
                  .first_with = -1,
                  .first_without = -1};
  bool symmetric = false, directed = opts->directed != 0;
  uint64_t entries = 0;
  arcs a = {0};
  uint8_t *seen = NULL;
  em_graph_part *p = NULL;
  if (t.mtx) st = mtx_header(&t, text.size, &symmetric, &entries, opts->weights != 0);
  if ((st = gr_agree(g, op, st))) goto done;
  if (symmetric) directed = false;
  int rank = em_dist_rank(g), size = em_dist_size(g);
  size_t span = text.size - t.body;
  t.begin = line_start(&t, text.size, t.body + (size_t)((__int128)span * rank / size));
  t.end = line_start(&t, text.size, t.body + (size_t)((__int128)span * (rank + 1) / size));
  int64_t lines = count_lines(t.data + t.begin, t.data + t.end) + 1;
  int64_t *all = malloc((size_t)size * sizeof *all);
  if (!all) st = gr_oom(op, 64);
  if ((st = gr_agree(g, op, st))) goto done;
  st = gr_allgather(g, all, &lines, 1, EM_INT64);
  for (int r = 0; r < rank; r++) t.lines_before += all[r] - 1;
  free(all);
  if (st) goto done;
  st = arcs_init(&a, op, lines * (directed ? 1 : 2), t.weighted);
  if (!st) st = parse_range(&t, &a);
  if ((st = gr_agree(g, op, st))) goto done;
  if (!t.mtx && t.weighted) { /* SNAP: weighted when any edge line has a weight; then all must */
    int64_t counts[2] = {t.with_weight, a.len}, lines2[2] = {t.first_with, t.first_without};
    for (int k = 0; k < 2; k++) lines2[k] = lines2[k] < 0 ? INT64_MAX : lines2[k];
    if ((st = gr_allreduce(g, counts, 2, EM_INT64, EM_DIST_SUM)) || (st = gr_allreduce(g, lines2, 2, EM_INT64, EM_DIST_MIN)))
      goto done;
    if (counts[0] > 0 && counts[0] < counts[1]) {
      st = em_set_error(EM_ERR_FORMAT,
                        "%s: %s:%lld: the edge has no weight (a third field), but line %lld has one: in a weighted "
                        "file every edge needs a weight",
                        op, path, (long long)lines2[1], (long long)lines2[0]);
      goto done;
    }
    if (counts[0] == 0) {
      gr_free(a.w);
      a.w = NULL;
    }
  }
  int64_t n, ids = 0;
  if (t.mtx) {
    int64_t found = a.len;
    if ((st = gr_allreduce(g, &found, 1, EM_INT64, EM_DIST_SUM))) goto done;
    if ((uint64_t)found != entries) {
      st = em_set_error(EM_ERR_FORMAT, "%s: %s:%lld: the size line announces %llu entries, the file has %lld", op, path,
                        (long long)(t.line0 - 1), (unsigned long long)entries, (long long)found);
      goto done;
    }
    n = (int64_t)t.rows;
  } else {
    int64_t max_id = (int64_t)t.max_id, any = a.len;
    if ((st = gr_allreduce(g, &max_id, 1, EM_INT64, EM_DIST_MAX)) ||
        (st = gr_allreduce(g, &any, 1, EM_INT64, EM_DIST_SUM)))
      goto done;
    if (!any) {
      st = em_set_error(EM_ERR_FORMAT, "%s: %s: no edges (only comments or blank lines)", op, path);
      goto done;
    }
    ids = max_id + 1;
    if ((st = remap_snap(g, op, &a, (uint64_t)max_id, &n, &seen))) goto done;
  }
  gr_text_close(&text);
  text.data = NULL;
  apply_options(&a, opts, directed);
  st = gr_part_build(&p, g, op, n, a.u, a.v, a.w, a.len, opts->drop_duplicates, directed);
  a.u = a.v = NULL;
  a.w = NULL;
  if (st) goto done;
  if (t.mtx) p->id_base = 1;
  else if ((st = gr_agree(g, op, snap_originals(p, seen, ids)))) goto done;
  *out = p;
  p = NULL;
done:
  if (text.data) gr_text_close(&text);
  gr_free(a.u);
  gr_free(a.v);
  gr_free(a.w);
  gr_free(seen);
  em_graph_part_free(p);
  return st;
}
