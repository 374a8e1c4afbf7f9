/* jpeg.c - JPEG decoding and encoding through libjpeg-turbo's TurboJPEG API.
 *
 * Datasets decode into a per-decoder buffer that grows to the largest image seen, so a
 * batch of JPEGs allocates nothing per image. Encoding exists for tests and benchmarks
 * (JPEG shards made from Fashion-MNIST). */
#include <stdlib.h>
#include <string.h>
#include "formats.h"

#ifdef EMBER_HAVE_TURBOJPEG
#include <turbojpeg.h>

struct dp_jpeg {
  tjhandle tj;
  uint8_t *buf;
  size_t cap;
};

dp_jpeg *dp_jpeg_new(void) {
  dp_jpeg *j = calloc(1, sizeof *j);
  if (!j) return NULL;
  j->tj = tjInitDecompress();
  if (!j->tj) {
    free(j);
    return NULL;
  }
  return j;
}

void dp_jpeg_free(dp_jpeg *j) {
  if (!j) return;
  tjDestroy(j->tj);
  free(j->buf);
  free(j);
}

/* A Huffman-coded JPEG spends at least one bit on each 8x8 block of its full-resolution
 * component, 512 pixels per byte; a header that promises more pixels per byte of the
 * file than 8 times that is refused before the image is allocated. */
#define JPEG_MAX_PIXELS_PER_BYTE 4096

em_status dp_jpeg_decode(dp_jpeg *j, const void *data, size_t n, int channels, const char *what, const uint8_t **pixels,
                         int *h, int *w, int *c) {
  int width = 0, height = 0, subsamp = -1, colorspace = -1;
  if (n > (size_t)0x7fffffff ||
      tjDecompressHeader3(j->tj, data, (unsigned long)n, &width, &height, &subsamp, &colorspace) != 0)
    return em_set_error(EM_ERR_FORMAT, "jpeg: %s: not a JPEG image (%s)", what, tjGetErrorStr2(j->tj));
  /* libjpeg-turbo accepts a tables-only stream (SOI, tables, EOI) as a header and leaves
   * the sizes unset: there is no image in it. */
  if (width < 1 || height < 1)
    return em_set_error(EM_ERR_FORMAT,
                        "jpeg: %s: %zu bytes without an image (no frame header: a tables-only or "
                        "empty stream), expected a JPEG image",
                        what, n);
  if ((double)width * height > (double)n * JPEG_MAX_PIXELS_PER_BYTE)
    return em_set_error(EM_ERR_FORMAT,
                        "jpeg: %s: the header says %dx%d pixels, more than %zu bytes can encode "
                        "(at most %d pixels per byte): truncated or crafted",
                        what, width, height, n, JPEG_MAX_PIXELS_PER_BYTE);
  int ch = channels ? channels : (colorspace == TJCS_GRAY ? 1 : 3);
  if (ch != 1 && ch != 3) return em_set_error(EM_ERR_ARGUMENT, "jpeg: %s: channels must be 1 or 3, got %d", what, ch);
  size_t need = (size_t)width * (size_t)height * (size_t)ch;
  if (need > j->cap) {
    uint8_t *b = realloc(j->buf, need);
    if (!b) return em_set_error(EM_ERR_MEMORY, "jpeg: %s: out of memory for a %dx%d image", what, width, height);
    j->buf = b;
    j->cap = need;
  }
  /* A warning means corrupt or missing data (a truncated file "decodes" to filler pixels):
   * stop on it. The scan limit bounds the work a crafted progressive file can ask for. */
  if (tjDecompress2(j->tj, data, (unsigned long)n, j->buf, width, 0, height, ch == 1 ? TJPF_GRAY : TJPF_RGB,
                    TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS) != 0)
    return em_set_error(EM_ERR_FORMAT, "jpeg: %s: cannot decode the %dx%d image of %zu bytes (%s)", what, width, height,
                        n, tjGetErrorStr2(j->tj));
  *pixels = j->buf;
  *h = height;
  *w = width;
  *c = ch;
  return EM_OK;
}

em_status em_data_jpeg_decode(em_tensor **out, const void *data, size_t n, int channels, const char *what) {
  if (!out || *out) return em_set_error(EM_ERR_ARGUMENT, "jpeg_decode: out must point to NULL (the result is new)");
  if (!data && n) return em_set_error(EM_ERR_ARGUMENT, "jpeg_decode: data is NULL");
  if (channels != 0 && channels != 1 && channels != 3)
    return em_set_error(EM_ERR_ARGUMENT, "jpeg_decode: channels must be 0 (the file's), 1 or 3, got %d", channels);
  dp_jpeg *j = dp_jpeg_new();
  if (!j) return em_set_error(EM_ERR_MEMORY, "jpeg_decode: cannot start a decoder");
  const uint8_t *px;
  int h, w, c;
  em_status st = dp_jpeg_decode(j, data, n, channels, what ? what : "(bytes)", &px, &h, &w, &c);
  if (!st) {
    int64_t sizes[3] = {h, w, c};
    st = em_empty(out, 3, sizes, EM_UINT8, (em_device){EM_CPU, 0});
    if (!st) memcpy(em_tensor_data(*out), px, (size_t)h * (size_t)w * (size_t)c);
  }
  dp_jpeg_free(j);
  return st;
}

em_status em_data_jpeg_encode(em_tensor **out, const em_tensor *image, int quality) {
  if (!out || *out) return em_set_error(EM_ERR_ARGUMENT, "jpeg_encode: out must point to NULL (the result is new)");
  if (!image) return em_set_error(EM_ERR_ARGUMENT, "jpeg_encode: image must not be NULL");
  int nd = em_tensor_ndim(image);
  int64_t c = nd == 3 ? em_tensor_size(image, 2) : 1;
  if (em_tensor_dtype(image) != EM_UINT8 || (nd != 2 && nd != 3) || (c != 1 && c != 3))
    return em_set_error(EM_ERR_ARGUMENT,
                        "jpeg_encode: expected a uint8 image [H, W] or [H, W, 1 or 3], got %s "
                        "with %d dims",
                        em_dtype_name(em_tensor_dtype(image)), nd);
  if (quality < 1 || quality > 100)
    return em_set_error(EM_ERR_ARGUMENT, "jpeg_encode: quality must be 1 to 100, got %d", quality);
  em_tensor *src = NULL;
  em_status st = em_contiguous(&src, image);
  if (st) return st;
  tjhandle tj = tjInitCompress();
  unsigned char *buf = NULL;
  unsigned long size = 0;
  int w = (int)em_tensor_size(src, 1), h = (int)em_tensor_size(src, 0);
  if (!tj || tjCompress2(tj, em_tensor_data(src), w, 0, h, c == 1 ? TJPF_GRAY : TJPF_RGB, &buf, &size,
                         c == 1 ? TJSAMP_GRAY : TJSAMP_420, quality, 0) != 0) {
    st = em_set_error(EM_ERR_RUNTIME, "jpeg_encode: %s", tj ? tjGetErrorStr2(tj) : "cannot start an encoder");
  } else {
    int64_t n = (int64_t)size;
    st = em_empty(out, 1, &n, EM_UINT8, (em_device){EM_CPU, 0});
    if (!st) memcpy(em_tensor_data(*out), buf, size);
  }
  if (buf) tjFree(buf);
  if (tj) tjDestroy(tj);
  em_tensor_release(src);
  return st;
}

#else /* without libjpeg-turbo */
static em_status no_jpeg(void) {
  return em_set_error(EM_ERR_UNSUPPORTED, "jpeg: ember was built without libjpeg-turbo (install libturbojpeg0-dev)");
}
dp_jpeg *dp_jpeg_new(void) {
  no_jpeg();
  return NULL;
}
void dp_jpeg_free(dp_jpeg *j) { (void)j; }
em_status dp_jpeg_decode(dp_jpeg *j, const void *data, size_t n, int channels, const char *what, const uint8_t **pixels,
                         int *h, int *w, int *c) {
  (void)j, (void)data, (void)n, (void)channels, (void)what, (void)pixels, (void)h, (void)w, (void)c;
  return no_jpeg();
}
em_status em_data_jpeg_decode(em_tensor **out, const void *data, size_t n, int channels, const char *what) {
  (void)out, (void)data, (void)n, (void)channels, (void)what;
  return no_jpeg();
}
em_status em_data_jpeg_encode(em_tensor **out, const em_tensor *image, int quality) {
  (void)out, (void)image, (void)quality;
  return no_jpeg();
}
#endif
