/* fuzz_npy_source.c - an npy dataset (x and y files, fz_split), channels first and last:
 * opened, described, and its first samples read raw and through an augmentation. */
#include "fuzz.h"
#include "ember/data.h"
#include "ember/tensor.h"

static void read_some(em_source *s) {
  int64_t n = em_source_size(s);
  for (int64_t i = 0; i < n && i < 3; i++) {
    em_tensor *x = NULL, *y = NULL;
    if (em_source_get(s, i, 0, NULL, NULL, &x, &y) == EM_OK) {
      em_tensor_release(x);
      em_tensor_release(y);
    }
  }
  em_tensor_desc d[2];
  int k = em_source_describe(s, NULL, 2, d);
  if (k < 1 || n < 1) return;
  em_tensor *t[2] = {NULL, NULL};
  for (int i = 0; i < k; i++)
    if (em_empty(&t[i], d[i].ndim, d[i].sizes, (em_dtype)d[i].dtype, (em_device){EM_CPU, 0}) != EM_OK) goto done;
  int64_t ids[2] = {0, n - 1}, kept = 0, skipped = 0, kept_ids[2];
  em_stage_times times;
  memset(&times, 0, sizeof times);
  em_source_fill(s, ids, 2, 0, NULL, 1, 0, t[0], t[1], 1, &kept, kept_ids, &skipped, &times);
done:
  em_tensor_release(t[0]);
  em_tensor_release(t[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_once();
  const uint8_t *x, *y;
  size_t nx, ny;
  fz_split(data, size, &x, &nx, &y, &ny);
  char paths[200];
  snprintf(paths, sizeof paths, "%s\n%s", fz_file(0, x, nx), fz_file(1, y, ny));
  for (int last = 0; last <= 1; last++) {
    em_source_options o;
    memset(&o, 0, sizeof o);
    o.format = "npy";
    o.paths = ny ? paths : fz_file(0, x, nx);
    o.channels_last = last;
    em_source *s = NULL;
    if (fz_failed(em_source_open(&s, &o))) continue;
    read_some(s);
    em_source_free(s);
  }
  return 0;
}
