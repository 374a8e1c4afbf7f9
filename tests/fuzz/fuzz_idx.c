/* fuzz_idx.c - em_data_read_idx on a file (plain or gzipped), whole and with a limit. */
#include "fuzz.h"
#include "ember/data.h"
#include "ember/tensor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_once();
  const char *path = fz_file(0, data, size);
  for (int limit = -1; limit <= 2; limit += 3) {
    em_tensor *t = NULL;
    if (!fz_failed(em_data_read_idx(&t, path, limit))) em_tensor_release(t);
  }
  return 0;
}
