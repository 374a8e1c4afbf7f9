/* fuzz_labels.c - em_graph_load_labels ("id name" lines) onto a small graph with sparse
 * original ids, then every label read. */
#include "fuzz_graph.h"

static em_graph *graph(void) {
  static em_graph *g;
  if (g) return g;
  em_graph_options o;
  em_graph_options_init(&o);
  o.progress = 0;
  o.format = EM_GRAPH_FORMAT_SNAP;
  static const char text[] = "# sparse ids\n100 7\n7 100\n100 3000000000\n5 7\n0 1\n";
  if (em_graph_load(&g, fz_file(1, text, sizeof text - 1), &o) != EM_OK) abort();
  return g;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_once();
  em_graph *g = graph();
  if (fz_failed(em_graph_load_labels(g, fz_file(0, data, size)))) return 0;
  for (int64_t v = 0; v < em_graph_num_vertices(g); v++) {
    const char *l = em_graph_label(g, v);
    if (l) (void)strlen(l);
  }
  return 0;
}
