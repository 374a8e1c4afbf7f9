/* fuzz_npy.c - em_data_read_npy on a file. */
#include "fuzz.h"
#include "ember/data.h"
#include "ember/tensor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_once();
  em_tensor *t = NULL;
  if (!fz_failed(em_data_read_npy(&t, fz_file(0, data, size)))) em_tensor_release(t);
  return 0;
}
