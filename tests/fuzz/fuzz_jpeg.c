/* fuzz_jpeg.c - em_data_jpeg_decode from memory, with the file's channels and as gray. */
#include "fuzz.h"
#include "ember/data.h"
#include "ember/tensor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  for (int c = 0; c <= 1; c++) {
    em_tensor *t = NULL;
    if (!fz_failed(em_data_jpeg_decode(&t, data, size, c, "fuzz input"))) em_tensor_release(t);
  }
  return 0;
}
