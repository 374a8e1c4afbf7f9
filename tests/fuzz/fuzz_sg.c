/* fuzz_sg.c - em_graph_load of a GAP benchmark .sg file, then every walk over the graph (fuzz_graph.h). */
#include "fuzz_graph.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_once();
  fz_load_graph(fz_file(0, data, size), EM_GRAPH_FORMAT_SG, 1);
  return 0;
}
