/* fuzz_wire_lease.c - a LEASE or SLOTS as the reader receives it ([hdr][ids][slots],
 * fz_frames): the checks of pipeline/wire.h, then the leased ids read from a small npy
 * dataset as a reader does (em_source_fill with a batch sized by the lease). */
#include "fuzz_wire.h"
#include "ember/data.h"
#include "ember/tensor.h"

static em_source *source(void) {
  static em_source *s;
  if (s) return s;
  /* 4 uint8 images of 2 x 2 */
  static const char hdr[] = "{'descr': '|u1', 'fortran_order': False, 'shape': (4, 2, 2), }";
  uint8_t file[144] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
  size_t hl = 128 - 10;
  file[8] = (uint8_t)hl;
  memset(file + 10, ' ', hl);
  memcpy(file + 10, hdr, sizeof hdr - 1);
  file[127] = '\n';
  for (int i = 0; i < 16; i++) file[128 + i] = (uint8_t)i;
  em_source_options o;
  memset(&o, 0, sizeof o);
  o.format = "npy";
  o.paths = fz_file(1, file, sizeof file);
  if (em_source_open(&s, &o) != EM_OK) abort();
  return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_once();
  zmq_msg_t f[3];
  int n = fz_frames(data, size, f, 3);
  if (n >= 2 && dp_hdr_valid(zmq_msg_data(&f[0]), zmq_msg_size(&f[0]))) {
    dp_hdr h;
    memcpy(&h, zmq_msg_data(&f[0]), sizeof h);
    if (h.kind == DP_SLOTS) {
      (void)dp_slots_valid(&h, n, zmq_msg_size(&f[1]));
    } else if (h.kind == DP_LEASE && dp_lease_valid(&h, n, zmq_msg_size(&f[1])) && h.n <= 64) {
      int64_t ids[64], kept = 0, kept_ids[64], skipped = 0;
      memcpy(ids, zmq_msg_data(&f[1]), (size_t)h.n * sizeof ids[0]);
      em_source *s = source();
      em_tensor_desc d[2];
      int k = em_source_describe(s, NULL, h.n, d);
      em_tensor *x = NULL;
      if (k >= 1 && em_empty(&x, d[0].ndim, d[0].sizes, (em_dtype)d[0].dtype, (em_device){EM_CPU, 0}) == EM_OK) {
        em_stage_times times;
        memset(&times, 0, sizeof times);
        em_source_fill(s, ids, h.n, 0, NULL, h.seed, h.epoch, x, NULL, (h.flags & DP_FLAG_SKIP_BAD) != 0, &kept,
                       kept_ids, &skipped, &times);
        em_tensor_release(x);
      }
    }
  }
  for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
  return 0;
}
