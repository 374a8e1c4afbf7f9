/* parse_mtx.c - Matrix Market coordinate files as graphs: entry (i, j) is the arc
 * i -> j (row to column, as networkx and scipy read adjacency matrices). Indices are
 * 1-based, so dense id = index - 1 and the original id is the index. Pattern, real and
 * integer fields are read: pattern files give unweighted graphs, real and integer ones
 * weighted graphs whose arc weights are the values (finite, >= 0, within float32; others
 * are errors naming file:line). General matrices give directed graphs, symmetric and
 * skew-symmetric ones undirected graphs (both arcs of an entry carry its value). A
 * skew-symmetric matrix's mirrored entries are the negated values, which no weight can
 * be: its values are checked as numbers and the graph is unweighted. The header is read
 * in order, the entries in parallel chunks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "graph_impl.h"

/* The vertices a size line may declare: any count up to MTX_MIN_ROWS, else this many per
 * byte of the file (isolated vertices are legal, but not billions from a 40-byte file). */
#define MTX_MIN_ROWS ((uint64_t)1 << 20)
#define MTX_ROWS_PER_BYTE 64

typedef enum { FIELD_PATTERN, FIELD_REAL, FIELD_INTEGER } mtx_field;

typedef struct mtx_ctx {
  const char *op;
  gr_text text;
  mtx_field field;
  bool symmetric, weighted;
  uint64_t rows, cols;
  gr_chunk_error *errors;
  int64_t *entries; /* [chunks] */
} mtx_ctx;

bool gr_mtx_read_value(const char **p, const char *end, bool integer) {
  const char *s = *p;
  if (s < end && (*s == '+' || *s == '-')) s++;
  const char *digits = s;
  while (s < end && (unsigned)(*s - '0') <= 9) s++;
  bool any = s > digits;
  if (!integer) {
    if (s < end && *s == '.') {
      s++;
      const char *frac = s;
      while (s < end && (unsigned)(*s - '0') <= 9) s++;
      any |= s > frac;
    }
    if (any && s < end && (*s == 'e' || *s == 'E')) {
      s++;
      if (s < end && (*s == '+' || *s == '-')) s++;
      const char *ex = s;
      while (s < end && (unsigned)(*s - '0') <= 9) s++;
      if (s == ex) return false;
    }
  }
  if (!any || (s < end && !gr_is_blank(*s) && *s != '\n')) return false;
  *p = s;
  return true;
}

static void skip_blanks(const char **p, const char *end) {
  while (*p < end && gr_is_blank(**p)) (*p)++;
}

static em_status entry_error(gr_chunk_error *e, int64_t line, const char *msg) {
  e->status = EM_ERR_FORMAT;
  e->line = line;
  snprintf(e->msg, sizeof e->msg, "%s", msg);
  return EM_ERR_FORMAT;
}

/* Reads an index in 1..limit; on failure fills e. */
static bool read_index(const char **p, const char *end, uint64_t limit, const char *what, gr_chunk_error *e,
                       int64_t line, const char *start, uint64_t *out) {
  skip_blanks(p, end);
  int r = gr_parse_u64(p, end, out);
  if (!r && *p < end && !gr_is_blank(**p) && **p != '\n') r = 1;
  char msg[160], quoted[64];
  if (r) {
    gr_quote_line(quoted, sizeof quoted, start, end);
    snprintf(msg, sizeof msg, "expected a %s index (a positive integer), got '%s'", what, quoted);
  } else if (*out == 0) {
    snprintf(msg, sizeof msg, "%s index 0: Matrix Market indices start at 1", what);
  } else if (*out > limit) {
    snprintf(msg, sizeof msg, "%s index %llu exceeds the matrix's %llu %ss", what, (unsigned long long)*out,
             (unsigned long long)limit, what);
  } else {
    return true;
  }
  entry_error(e, line, msg);
  return false;
}

static em_status scan_chunk(mtx_ctx *c, int64_t k, gr_sink *sink) {
  const char *p = c->text.data + c->text.chunk_begin[k], *end = c->text.data + c->text.chunk_begin[k + 1];
  int64_t line = 0, entries = 0;
  gr_chunk_error *e = &c->errors[k];
  while (p < end) {
    const char *start = p;
    skip_blanks(&p, end);
    if (p == end) break;
    if (*p == '\n' || *p == '%') {
      const char *nl = memchr(p, '\n', (size_t)(end - p));
      p = nl ? nl + 1 : end;
      line++;
      continue;
    }
    uint64_t i, j;
    if (!read_index(&p, end, c->rows, "row", e, line, start, &i) ||
        !read_index(&p, end, c->cols, "column", e, line, start, &j))
      return EM_ERR_FORMAT;
    skip_blanks(&p, end);
    float w = 1;
    if (c->field != FIELD_PATTERN) {
      if (p == end || *p == '\n') return entry_error(e, line, "missing the entry's value");
      /* the syntax first (Matrix Market's, stricter than strtod's), then the weight's range;
       * a spelled-out NaN or infinity is named as such */
      const char *value = p;
      char msg[200];
      int bad = c->weighted ? gr_parse_weight(&value, end, &w, msg, sizeof msg) : 0;
      if (bad == GR_WEIGHT_NAN || bad == GR_WEIGHT_INFINITE) return entry_error(e, line, msg);
      bool ok = gr_mtx_read_value(&p, end, c->field == FIELD_INTEGER);
      if (ok && bad) return entry_error(e, line, msg);
      if (!ok) {
        char quoted[64], msg[120];
        gr_quote_line(quoted, sizeof quoted, start, end);
        snprintf(msg, sizeof msg, "expected %s value, got '%s'", c->field == FIELD_INTEGER ? "an integer" : "a real",
                 quoted);
        return entry_error(e, line, msg);
      }
      skip_blanks(&p, end);
    }
    if (p < end && *p != '\n') {
      char quoted[64], msg[120];
      gr_quote_line(quoted, sizeof quoted, start, end);
      snprintf(msg, sizeof msg, "unexpected text after the entry: '%s'", quoted);
      return entry_error(e, line, msg);
    }
    p = p < end ? p + 1 : end;
    line++;
    entries++;
    if (sink && c->weighted) gr_sink_push_w(sink, (uint32_t)(i - 1), (uint32_t)(j - 1), w);
    else if (sink) gr_sink_push(sink, (uint32_t)(i - 1), (uint32_t)(j - 1));
  }
  if (!sink) {
    c->text.chunk_lines[k] = line;
    c->entries[k] = entries;
  }
  return EM_OK;
}

static em_status scan_push(void *ctx, int64_t chunk, gr_sink *sink) {
  mtx_ctx *c = ctx;
  em_status st = scan_chunk(c, chunk, sink);
  if (st) return em_set_error(st, "%s: %s changed while it was read", c->op, c->text.path);
  return EM_OK;
}

/* The next line [*s, *e) from pos; returns the position after it. */
static size_t next_line(const gr_text *t, size_t pos, const char **s, const char **e) {
  *s = t->data + pos;
  const char *nl = memchr(*s, '\n', t->size - pos);
  *e = nl ? nl : t->data + t->size;
  return nl ? (size_t)(nl - t->data) + 1 : t->size;
}

static em_status header_error(const mtx_ctx *c, int64_t line, const char *fmt, const char *s, const char *e) {
  char quoted[64];
  gr_quote_line(quoted, sizeof quoted, s, e);
  char msg[200];
  snprintf(msg, sizeof msg, fmt, quoted);
  return em_set_error(EM_ERR_FORMAT, "%s: %s:%lld: %s", c->op, c->text.path, (long long)line, msg);
}

/* Banner, comments and the size line. *body is where the entries start, *line its number. */
static em_status read_header(mtx_ctx *c, size_t *body, int64_t *line, uint64_t *nnz) {
  const char *s, *e;
  size_t pos = next_line(&c->text, 0, &s, &e);
  char w[5][32] = {{0}};
  int got = 0;
  {
    char buf[200];
    size_t len = (size_t)(e - s) < sizeof buf - 1 ? (size_t)(e - s) : sizeof buf - 1;
    memcpy(buf, s, len);
    buf[len] = 0;
    got = sscanf(buf, "%31s %31s %31s %31s %31s", w[0], w[1], w[2], w[3], w[4]);
  }
  if (got < 5 || strcasecmp(w[0], "%%MatrixMarket") || strcasecmp(w[1], "matrix"))
    return header_error(c, 1, "expected the banner '%%%%MatrixMarket matrix coordinate <field> <symmetry>', got '%s'",
                        s, e);
  if (strcasecmp(w[2], "coordinate"))
    return header_error(c, 1, "only the coordinate format makes a graph (dense 'array' matrices do not): '%s'", s, e);
  if (!strcasecmp(w[3], "pattern")) c->field = FIELD_PATTERN;
  else if (!strcasecmp(w[3], "real") || !strcasecmp(w[3], "double")) c->field = FIELD_REAL;
  else if (!strcasecmp(w[3], "integer")) c->field = FIELD_INTEGER;
  else return header_error(c, 1, "the field must be pattern, real or integer: '%s'", s, e);
  if (!strcasecmp(w[4], "general")) c->symmetric = false;
  else if (!strcasecmp(w[4], "symmetric") || !strcasecmp(w[4], "skew-symmetric")) c->symmetric = true;
  else return header_error(c, 1, "the symmetry must be general, symmetric or skew-symmetric: '%s'", s, e);
  c->weighted = c->field != FIELD_PATTERN && strcasecmp(w[4], "skew-symmetric") != 0;
  int64_t n = 1;
  for (;;) {
    if (pos >= c->text.size)
      return em_set_error(EM_ERR_FORMAT, "%s: %s:%lld: the file ends before the size line 'rows columns entries'",
                          c->op, c->text.path, (long long)n + 1);
    pos = next_line(&c->text, pos, &s, &e);
    n++;
    const char *p = s;
    skip_blanks(&p, e);
    if (p == e || *p == '%') continue;
    uint64_t v[3];
    for (int i = 0; i < 3; i++) {
      skip_blanks(&p, e);
      if (gr_parse_u64(&p, e, &v[i]) || (p < e && !gr_is_blank(*p)))
        return header_error(c, n, "expected the size line 'rows columns entries', got '%s'", s, e);
    }
    skip_blanks(&p, e);
    if (p != e) return header_error(c, n, "expected the size line 'rows columns entries', got '%s'", s, e);
    if (v[0] != v[1]) {
      char msg[100];
      snprintf(msg, sizeof msg, "a graph needs a square matrix, got %llu x %llu ('%%s')", (unsigned long long)v[0],
               (unsigned long long)v[1]);
      return header_error(c, n, msg, s, e);
    }
    if (v[0] > (uint64_t)GR_MAX_VERTICES)
      return header_error(c, n, "more rows than the 2^32-1 vertices 32-bit ids allow: '%s'", s, e);
    /* Declared vertices that no entry names cost nothing in the file and about 20 bytes
     * each to build: the size line may not ask for more than the file could plausibly
     * describe. An entry takes at least 4 bytes ("1 1\n"), so the entry count is bounded
     * by the bytes after the size line. */
    uint64_t rest = c->text.size - pos, max_rows = MTX_MIN_ROWS + MTX_ROWS_PER_BYTE * (uint64_t)c->text.size;
    if (v[0] > max_rows) {
      char msg[200];
      snprintf(msg, sizeof msg,
               "the size line declares %llu vertices, more than a file of %zu bytes may (at most "
               "%llu): '%%s'",
               (unsigned long long)v[0], c->text.size, (unsigned long long)max_rows);
      return header_error(c, n, msg, s, e);
    }
    if (v[2] > rest / 4 + 1) {
      char msg[200];
      snprintf(msg, sizeof msg,
               "the size line announces %llu entries, the %llu bytes after it hold at most %llu: '%%s'",
               (unsigned long long)v[2], (unsigned long long)rest, (unsigned long long)(rest / 4 + 1));
      return header_error(c, n, msg, s, e);
    }
    c->rows = v[0];
    c->cols = v[1];
    *nnz = v[2];
    *body = pos;
    *line = n + 1;
    return EM_OK;
  }
}

em_status gr_load_mtx(em_graph **out, const char *path, const em_graph_options *opts) {
  mtx_ctx c = {.op = "load_mtx"};
  em_status st = gr_text_open(&c.text, c.op, path);
  if (st) return st;
  size_t body = 0;
  int64_t first_line = 0;
  uint64_t nnz = 0;
  if ((st = read_header(&c, &body, &first_line, &nnz)) || (st = gr_text_chunk(&c.text, body, first_line))) goto done;
  c.weighted &= opts->weights != 0; /* else values are checked as numbers only */
  int64_t chunks = c.text.num_chunks;
  c.errors = calloc((size_t)(chunks ? chunks : 1), sizeof *c.errors);
  c.entries = calloc((size_t)(chunks ? chunks : 1), sizeof *c.entries);
  if (!c.errors || !c.entries) {
    st = gr_oom(c.op, (size_t)chunks * sizeof *c.errors);
    goto done;
  }
  gr_progress prog;
  gr_progress_init(&prog, opts->progress, c.op, path, "checking entries", chunks);
#pragma omp parallel for schedule(dynamic, 1) num_threads(gr_threads())
  for (int64_t k = 0; k < chunks; k++) {
    scan_chunk(&c, k, NULL);
    gr_text_release(&c.text, k);
    gr_progress_add(&prog, 1);
  }
  gr_progress_end(&prog);
  if ((st = gr_text_report(&c.text, c.errors))) goto done;
  uint64_t entries = 0;
  for (int64_t k = 0; k < chunks; k++) entries += (uint64_t)c.entries[k];
  if (entries != nnz) {
    st = em_set_error(EM_ERR_FORMAT, "%s: %s:%lld: the size line announces %llu entries, the file has %llu", c.op, path,
                      (long long)(first_line - 1), (unsigned long long)nnz, (unsigned long long)entries);
    goto done;
  }
  em_graph_options o = *opts;
  if (c.symmetric) o.directed = 0;
  gr_source src = {.op = c.op,
                   .what = path,
                   .n = (int64_t)c.rows,
                   .max_edges = (int64_t)entries,
                   .num_chunks = chunks,
                   .scan = scan_push,
                   .ctx = &c,
                   .text = &c.text,
                   .weighted = c.weighted};
  if ((st = gr_build(out, &src, &o))) goto done;
  (*out)->id_base = 1;
done:
  free(c.errors);
  free(c.entries);
  gr_text_close(&c.text);
  return st;
}
