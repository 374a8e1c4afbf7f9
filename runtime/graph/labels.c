/* labels.c - vertex names from a text file: "id name" per line, the id an original id of
 * the graph, the name the rest of the line (it may contain blanks; trailing blanks are
 * dropped). '#' lines and blank lines are skipped. An id the graph lacks, a second name
 * for a vertex or a line without a name is an error naming the file and line: a label
 * file that does not fit the graph is most likely the wrong file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "graph_impl.h"

typedef struct label_entry {
  int64_t vertex;
  size_t at, len; /* the name's bytes in the file */
} label_entry;

static em_status line_error(const gr_text *t, int64_t line, const char *s, const char *end, const char *what) {
  char quoted[64];
  gr_quote_line(quoted, sizeof quoted, s, end);
  return em_set_error(EM_ERR_FORMAT, "%s: %s:%lld: %s, got '%s'", t->op, t->path, (long long)line, what, quoted);
}

/* Parses the file into entries (one per labelled vertex). */
static em_status parse_labels(const gr_text *t, const em_graph *g, label_entry **out, int64_t *count) {
  int64_t cap = 1024, n = 0, line = 0;
  label_entry *e = malloc((size_t)cap * sizeof *e);
  int64_t *seen = calloc((size_t)g->n + 1, sizeof *seen); /* line of each vertex's label, 0: none */
  em_status st = EM_OK;
  if (!e || !seen) {
    st = gr_oom(t->op, (size_t)g->n * 8);
    goto fail;
  }
  const char *p = t->data, *end = t->data + t->size;
  while (p < end) {
    const char *s = p, *nl = memchr(p, '\n', (size_t)(end - p)), *eol = nl ? nl : end;
    p = nl ? nl + 1 : end;
    line++;
    const char *q = s;
    while (q < eol && gr_is_blank(*q)) q++;
    if (q == eol || *q == '#') continue;
    uint64_t id;
    int r = gr_parse_u64(&q, eol, &id);
    if (r || id > (uint64_t)INT64_MAX || (q < eol && !gr_is_blank(*q))) {
      st = line_error(t, line, s, end, "expected 'id name' with a non-negative integer id");
      goto fail;
    }
    while (q < eol && gr_is_blank(*q)) q++;
    const char *name_end = eol;
    while (name_end > q && gr_is_blank(name_end[-1])) name_end--;
    if (name_end == q) {
      st = line_error(t, line, s, end, "expected a name after the vertex id");
      goto fail;
    }
    int64_t v;
    if (em_graph_find_vertex(g, (int64_t)id, &v)) {
      char what[96];
      snprintf(what, sizeof what, "vertex %llu is not in the graph", (unsigned long long)id);
      st = line_error(t, line, s, end, what);
      goto fail;
    }
    if (seen[v]) {
      char what[96];
      snprintf(what, sizeof what, "vertex %llu already has a name (line %lld)", (unsigned long long)id,
               (long long)seen[v]);
      st = line_error(t, line, s, end, what);
      goto fail;
    }
    seen[v] = line;
    if (n == cap) {
      label_entry *grown = realloc(e, (size_t)(cap *= 2) * sizeof *e);
      if (!grown) {
        st = gr_oom(t->op, (size_t)cap * sizeof *e);
        goto fail;
      }
      e = grown;
    }
    e[n++] = (label_entry){v, (size_t)(q - t->data), (size_t)(name_end - q)};
  }
  free(seen);
  *out = e;
  *count = n;
  return EM_OK;
fail:
  free(e);
  free(seen);
  return st;
}

em_status em_graph_load_labels(em_graph *g, const char *path) {
  if (!g || !path) return em_set_error(EM_ERR_ARGUMENT, "load_labels: graph or path is NULL");
  gr_text t;
  em_status st = gr_text_open(&t, "load_labels", path);
  if (st) return st;
  label_entry *e = NULL;
  int64_t count = 0;
  if ((st = parse_labels(&t, g, &e, &count))) {
    gr_text_close(&t);
    return st;
  }
  int64_t *off = gr_calloc((size_t)(g->n + 1) * sizeof *off);
  size_t bytes = 1;
  for (int64_t i = 0; i < count; i++) bytes += e[i].len + 1;
  char *data = gr_alloc(bytes);
  if (!off || !data) {
    gr_free(off), gr_free(data), free(e), gr_text_close(&t);
    return gr_oom("load_labels", bytes);
  }
  for (int64_t i = 0; i < count; i++) off[e[i].vertex + 1] = (int64_t)e[i].len + 1;
  for (int64_t v = 0; v < g->n; v++) off[v + 1] += off[v];
  for (int64_t i = 0; i < count; i++) {
    memcpy(data + off[e[i].vertex], t.data + e[i].at, e[i].len);
    data[off[e[i].vertex] + (int64_t)e[i].len] = 0;
  }
  gr_free_array(g, g->label_offsets);
  gr_free_array(g, g->label_data);
  g->label_offsets = off;
  g->label_data = data;
  free(e);
  gr_text_close(&t);
  return EM_OK;
}
