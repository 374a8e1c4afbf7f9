/* fuzz_safetensors.c - em_safetensors_open on a file, then every tensor read in full. */
#include "fuzz.h"
#include "ember/io.h"
#include "ember/tensor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_once();
  em_safetensors *f = NULL;
  if (fz_failed(em_safetensors_open(&f, fz_file(0, data, size)))) return 0;
  for (int i = 0; i < em_safetensors_count(f); i++) {
    em_tensor *t = NULL;
    if (em_safetensors_get(f, i, &t) != EM_OK) continue;
    const volatile uint8_t *p = em_tensor_data(t);
    size_t bytes = (size_t)em_tensor_numel(t) * em_dtype_size(em_tensor_dtype(t));
    uint8_t sum = 0;
    for (size_t k = 0; k < bytes; k++) sum += p[k]; /* every byte the tensor claims is readable */
    (void)sum;
    em_tensor_release(t);
  }
  em_safetensors_close(f);
  return 0;
}
