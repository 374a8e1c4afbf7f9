/* fuzz_mtx.c - em_graph_load of a Matrix Market coordinate file, then every walk over the graph (fuzz_graph.h). */
#include "fuzz_graph.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_once();
  fz_load_graph(fz_file(0, data, size), EM_GRAPH_FORMAT_MTX, 1);
  return 0;
}
