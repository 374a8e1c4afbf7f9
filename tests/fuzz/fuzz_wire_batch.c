/* fuzz_wire_batch.c - a BATCH with inline bytes as the trainer receives it (fz_batch). */
#include "fuzz_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_once();
  zmq_msg_t f[5];
  int n = fz_frames(data, size, f, 5);
  fz_batch(f, n);
  for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
  return 0;
}
