/* fuzz_emg.c - ember's graph cache (.emg). Checksums are no defence (anyone can compute
 * them), so the harness recomputes every one before loading: what it tests is the
 * structure that lies behind valid checksums. Then every walk over the graph. */
#include "fuzz_graph.h"
#include "graph/graph_impl.h"

/* The header layout (runtime/graph/format.c): num_sections at 52, the section table of
 * 32-byte entries at 88, the header's checksum at 504. */
static void reseal(uint8_t *b, size_t len) {
  uint32_t ns;
  memcpy(&ns, b + 52, 4);
  for (uint32_t i = 0; i < ns && i < 12; i++) {
    uint32_t id, elem;
    uint64_t off, count, sum, bytes;
    uint8_t *s = b + 88 + 32 * i;
    memcpy(&id, s, 4), memcpy(&elem, s + 4, 4), memcpy(&off, s + 8, 8), memcpy(&count, s + 16, 8);
    if (off <= len && !__builtin_mul_overflow(count, (uint64_t)elem, &bytes) && bytes <= len - off &&
        gr_checksum(b + off, bytes, id, &sum) == EM_OK)
      memcpy(s + 24, &sum, 8);
  }
  uint64_t zero = 0, sum;
  memcpy(b + 504, &zero, 8);
  sum = gr_xxh64(b, 512, 1);
  memcpy(b + 504, &sum, 8);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_once();
  uint8_t *b = malloc(size ? size : 1);
  memcpy(b, data, size);
  if (size >= 512) reseal(b, size);
  fz_load_graph(fz_file(0, b, size), EM_GRAPH_FORMAT_EMBER, 1);
  free(b);
  return 0;
}
