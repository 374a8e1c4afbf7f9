/* fuzz_wire_hello.c - a HELLO as the trainer receives it ([rid][hdr][dp_hello][fingerprint],
 * fz_frames): the header, the hello's sizes and strings, the fingerprint text. */
#include "fuzz_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  zmq_msg_t f[4];
  int n = fz_frames(data, size, f, 4);
  if (n == 4 && dp_hdr_valid(zmq_msg_data(&f[1]), zmq_msg_size(&f[1]))) {
    dp_hello hello;
    if (dp_hello_read(&hello, zmq_msg_data(&f[2]), zmq_msg_size(&f[2]))) {
      char fp[1024];
      dp_text(fp, sizeof fp, zmq_msg_data(&f[3]), zmq_msg_size(&f[3]));
      volatile size_t k =
          strlen(hello.host) + strlen(hello.boot_id) + strlen(hello.name) + strlen(hello.ring) + strlen(fp);
      (void)k;
    }
  }
  for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
  return 0;
}
