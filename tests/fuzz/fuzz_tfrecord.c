/* fuzz_tfrecord.c - a TFRecord shard as a dataset: JPEG-encoded images (the first sample
 * decoded at open), and raw images of a fixed shape; the first records read either way.
 * Covers the record index, the CRCs, the tf.train.Example decoder and the JPEG decoder. */
#include "fuzz.h"
#include "ember/data.h"
#include "ember/tensor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_once();
  const char *path = fz_file(0, data, size);
  for (int encoded = 0; encoded <= 1; encoded++) {
    em_source_options o;
    memset(&o, 0, sizeof o);
    o.format = "tfrecord";
    o.paths = path;
    o.encoded = encoded;
    o.channels = encoded ? 0 : 1;
    o.ndim = 2;
    o.shape[0] = 2, o.shape[1] = 2;
    em_source *s = NULL;
    if (fz_failed(em_source_open(&s, &o))) continue;
    for (int64_t i = 0; i < em_source_size(s) && i < 3; i++) {
      em_tensor *x = NULL, *y = NULL;
      if (!fz_failed(em_source_get(s, i, 0, NULL, NULL, &x, &y))) {
        em_tensor_release(x);
        em_tensor_release(y);
      }
    }
    em_source_free(s);
  }
  return 0;
}
