/* fuzz_wire.h - the data pipeline's messages as the trainer or reader receives them:
 * frames cut from the input, a fake trainer state for BATCH (one epoch plan of one item). */
#ifndef EMBER_FUZZ_WIRE_H
#define EMBER_FUZZ_WIRE_H
#include "fuzz.h"
#include "data/pipeline/loader_impl.h"

#define FZ_ITEM 8 /* ids in the fake plan's one item: 10, 11, ... */

/* Cuts the input into up to max frames: each a 2-byte little-endian length and its bytes
 * (the last takes what is left). Returns the frame count. */
static inline int fz_frames(const uint8_t *data, size_t size, zmq_msg_t *f, int max) {
  int n = 0;
  while (n < max) {
    size_t len = size;
    if (n < max - 1) {
      if (size < 2) break;
      len = (size_t)data[0] | (size_t)data[1] << 8;
      data += 2, size -= 2;
      if (len > size) len = size;
    }
    zmq_msg_init_size(&f[n], len);
    if (len) memcpy(zmq_msg_data(&f[n]), data, len);
    data += len, size -= len;
    n++;
    if (!size) break;
  }
  return n;
}

static inline em_loader *fz_loader(void) {
  static em_loader *l;
  static int64_t ids[FZ_ITEM], pos = 0, len = FZ_ITEM;
  if (l) return l;
  l = calloc(1, sizeof *l);
  for (int i = 0; i < FZ_ITEM; i++) ids[i] = 10 + i;
  l->c.session = 7;
  l->c.plan =
      (dp_plan){.id = 1, .epoch = 0, .n_ids = FZ_ITEM, .n_items = 1, .ids = ids, .item_pos = &pos, .item_len = &len};
  return l;
}

/* A BATCH's frames f[0..4] (routing id, header, descriptions, ids, data) as the coordinator
 * takes them: the header checked, the item in the plan (wanted_item), then every field
 * (dp_build_batch); the batch, if it came out whole, read and freed. */
static inline void fz_batch(zmq_msg_t *f, int n) {
  if (n != 5 || !dp_hdr_valid(zmq_msg_data(&f[1]), zmq_msg_size(&f[1]))) return;
  dp_hdr h;
  memcpy(&h, zmq_msg_data(&f[1]), sizeof h);
  em_loader *l = fz_loader();
  if (h.kind != DP_BATCH || h.item < 0 || h.item >= l->c.plan.n_items) return;
  char why[256];
  int lent = 0;
  em_loader_batch *b = dp_build_batch(l, f, &h, NULL, &lent, why, sizeof why);
  if (!b) return;
  for (int i = 0; i < b->ntensors; i++) {
    const volatile uint8_t *p = em_tensor_data(b->tensors[i]);
    size_t bytes = (size_t)em_tensor_numel(b->tensors[i]) * em_dtype_size(em_tensor_dtype(b->tensors[i]));
    for (size_t k = 0; k < bytes; k += 64) (void)p[k];
    if (bytes) (void)p[bytes - 1];
  }
  dp_batch_destroy(b);
}
#endif
