/* test_graph_util.h - helpers shared by the graph tests (tests/c/test_graph_*.c): graphs
 * from edge lists, temporary files, error expectations and a float64 PageRank reference.
 * Included after <cmocka.h>. */
#ifndef TEST_GRAPH_UTIL_H
#define TEST_GRAPH_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ember/graph.h"

static char tg_dir[64];

/* A fresh temporary folder for the test's files (removed by tg_cleanup). */
static inline int tg_setup(void **state) {
  (void)state;
  snprintf(tg_dir, sizeof tg_dir, "/tmp/ember_graph_test_XXXXXX");
  return mkdtemp(tg_dir) ? 0 : -1;
}

static inline int tg_cleanup(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tg_dir);
  return system(cmd) == 0 ? 0 : -1;
}

static inline const char *tg_path(const char *name) {
  static char buf[8][256];
  static int k;
  char *p = buf[k++ % 8];
  snprintf(p, 256, "%s/%s", tg_dir, name);
  return p;
}

static inline const char *tg_write(const char *name, const void *data, size_t len) {
  const char *p = tg_path(name);
  FILE *f = fopen(p, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, len, f), len);
  fclose(f);
  return p;
}

static inline const char *tg_text(const char *name, const char *text) { return tg_write(name, text, strlen(text)); }

static inline em_graph_options tg_opts(int reorder) {
  em_graph_options o;
  em_graph_options_init(&o);
  o.progress = 0;
  o.reorder = reorder;
  return o;
}

static inline em_graph *tg_graph(int64_t n, int64_t m, const int64_t *src, const int64_t *dst,
                                 const em_graph_options *o) {
  em_graph *g = NULL;
  if (em_graph_from_edges(&g, n, m, src, dst, o)) fail_msg("from_edges: %s", em_last_error());
  return g;
}

/* Expects status `code` and a message containing every string of the NULL-ended list. */
static inline void tg_expect_error(em_status st, em_status code, ...) {
  if (st != code) fail_msg("expected status %d, got %d: %s", code, st, em_last_error());
  va_list ap;
  va_start(ap, code);
  for (const char *s; (s = va_arg(ap, const char *));)
    if (!strstr(em_last_error(), s)) fail_msg("message '%s' lacks '%s'", em_last_error(), s);
  va_end(ap);
}

static inline float *tg_pagerank(const em_graph *g, const em_pagerank_options *po, em_pagerank_stats *stats) {
  em_tensor *t = NULL;
  em_pagerank_stats st;
  if (em_graph_pagerank(&t, NULL, stats ? stats : &st, g, po)) fail_msg("pagerank: %s", em_last_error());
  int64_t n = em_graph_num_vertices(g);
  float *out = malloc((size_t)n * sizeof *out);
  memcpy(out, em_tensor_data(t), (size_t)n * sizeof *out);
  em_tensor_release(t);
  return out;
}

/* float64 power iteration over the graph's arcs (dense ids), run to 1e-15: the
 * reference ember's float32 scores must match. p may be NULL (uniform). */
static inline double *tg_reference(const em_graph *g, double damping, const double *p) {
  em_tensor *s = NULL, *d = NULL, *outdeg = NULL;
  assert_int_equal(em_graph_edges(g, &s, &d), EM_OK);
  assert_int_equal(em_graph_degrees(g, NULL, &outdeg), EM_OK);
  int64_t n = em_graph_num_vertices(g), m = em_graph_num_edges(g);
  const int64_t *src = em_tensor_data(s), *dst = em_tensor_data(d), *deg = em_tensor_data(outdeg);
  double *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y), psum = 0;
  for (int64_t v = 0; v < n; v++) psum += p ? p[v] : 1;
  for (int64_t v = 0; v < n; v++) x[v] = 1.0 / (double)n;
  for (int it = 0; it < 10000; it++) {
    double dangling = 0, diff = 0;
    for (int64_t v = 0; v < n; v++) {
      if (!deg[v]) dangling += x[v];
      y[v] = 0;
    }
    for (int64_t e = 0; e < m; e++) y[dst[e]] += x[src[e]] / (double)deg[src[e]];
    for (int64_t v = 0; v < n; v++) {
      double t = (p ? p[v] : 1) / psum;
      y[v] = damping * y[v] + ((1 - damping) + damping * dangling) * t;
      diff += fabs(y[v] - x[v]);
    }
    double *tmp = x;
    x = y, y = tmp;
    if (diff < 1e-15) break;
  }
  free(y);
  em_tensor_release(s);
  em_tensor_release(d);
  em_tensor_release(outdeg);
  return x;
}

static inline double tg_l1(const float *a, const double *b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += fabs((double)a[i] - b[i]);
  return s;
}

#endif
