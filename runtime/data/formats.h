/* formats.h - what the file-format readers (npy.c, tfrecord.c, jpeg.c) and the augmentation
 * kernel (transforms.c) offer source.c, which puts them together into datasets. */
#ifndef EMBER_DATA_FORMATS_H
#define EMBER_DATA_FORMATS_H

#include <stddef.h>
#include <stdint.h>
#include "ember/data_pipeline.h"

/* ---- npy.c ---- */
typedef struct dp_npy {
  char path[512];
  em_dtype dtype;
  int ndim;
  int64_t shape[8];
  int64_t data_offset; /* where the elements start in the file */
  const uint8_t *map; /* the whole file, mapped read-only (NULL if only the header was read) */
  size_t map_bytes;
} dp_npy;
/* Parses the header of path (and maps the file when map is 1). Errors name the file. */
em_status dp_npy_open(dp_npy *out, const char *path, int map);
void dp_npy_close(dp_npy *n);

/* ---- tfrecord.c ---- */
typedef struct dp_record {
  int32_t file;
  int64_t offset; /* of the record's 12-byte header */
  int64_t length; /* of its data */
} dp_record;
/* Appends the records of path (file number `file`) to *recs, checking each length's CRC. */
em_status dp_tfrecord_index(const char *path, int file, dp_record **recs, int64_t *n, int64_t *cap);
/* Reads record r's data from fd into *buf (grown as needed) and checks its CRC. */
em_status dp_tfrecord_read(int fd, const char *path, const dp_record *r, int64_t index, uint8_t **buf, size_t *cap);
/* Finds bytes feature `image_key` and int64 feature `label_key` (label_key may be NULL) of a
 * serialised tf.train.Example. what names the record in messages. */
em_status dp_example_find(const uint8_t *p, size_t n, const char *image_key, const char *label_key,
                          const uint8_t **image, size_t *image_len, int64_t *label, const char *what);

/* ---- jpeg.c ---- */
typedef struct dp_jpeg dp_jpeg; /* a decoder with its scratch buffer; one thread at a time */
dp_jpeg *dp_jpeg_new(void);
void dp_jpeg_free(dp_jpeg *j);
/* Decodes into the decoder's buffer as [h, w, channels]; channels 0 keeps the file's (1 for
 * grayscale, else 3). *pixels stays valid until the next call. */
em_status dp_jpeg_decode(dp_jpeg *j, const void *data, size_t n, int channels, const char *what, const uint8_t **pixels,
                         int *h, int *w, int *c);

/* ---- transforms.c ---- */
/* The output geometry of aug for an input of c x h x w; an error when the crop does not fit. */
em_status dp_augment_shape(const em_augment *aug, int c, int h, int w, int *oc, int *oh, int *ow);
/* One sample: src uint8 (c x h x w, or h x w x c when channels_last) to dst, which is uint8
 * or float32 (aug->normalise) [oc, oh, ow]. rng may be NULL when nothing is random. */
void dp_augment_sample(const uint8_t *src, int c, int h, int w, int channels_last, const em_augment *aug,
                       em_sample_rng *rng, void *dst);

#endif
