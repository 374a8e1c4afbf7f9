/* transforms.c - per-sample augmentation: pad and crop, flip, channel conversion, normalise,
 * fused into one pass from the decoded image to the batch row.
 *
 * Each output pixel is read once from the source and written once: the crop and the flip
 * only change which source column a row reads (padding reads as 0), and normalisation is
 * a multiply-add per channel on the way out. The random draws (crop y, crop x, flip) are
 * always made in this order and always all made when the transform is configured, so the
 * k-th draw of a sample means the same whatever the image looked like. */
#include <string.h>
#include "formats.h"

em_status dp_augment_shape(const em_augment *aug, int c, int h, int w, int *oc, int *oh, int *ow) {
  *oc = aug && aug->channels ? aug->channels : c;
  *oh = aug && aug->crop_h ? aug->crop_h : h;
  *ow = aug && aug->crop_w ? aug->crop_w : w;
  if (aug && (aug->crop_h < 0 || aug->crop_w < 0 || aug->pad < 0))
    return em_set_error(EM_ERR_ARGUMENT, "augment: crop %dx%d with padding %d: expected sizes >= 0", aug->crop_h,
                        aug->crop_w, aug->pad);
  if (aug && (aug->crop_h > h + 2 * aug->pad || aug->crop_w > w + 2 * aug->pad))
    return em_set_error(EM_ERR_SHAPE, "augment: a %dx%d crop does not fit a %dx%d image padded by %d", *oh, *ow, h, w,
                        aug->pad);
  if (*oc != 1 && *oc != 3 && *oc != c)
    return em_set_error(EM_ERR_ARGUMENT, "augment: channels must be 1 or 3, got %d", *oc);
  if (c != 1 && c != 3 && *oc != c)
    return em_set_error(EM_ERR_ARGUMENT, "augment: cannot convert %d channels to %d", c, *oc);
  if (aug && aug->normalise && *oc > 4)
    return em_set_error(EM_ERR_ARGUMENT, "augment: normalise takes at most 4 channels, the image has %d", *oc);
  return EM_OK;
}

/* Source value of channel oc at (y, x) of the unpadded image, converting channels. */
static inline float pixel(const uint8_t *src, int c, int h, int w, int last, int oc, int out_c, int y, int x) {
  (void)h;
  if (c == out_c || c == 1) {
    int ch = c == 1 ? 0 : oc;
    return last ? src[((size_t)y * w + x) * c + ch] : src[((size_t)ch * h + y) * w + x];
  }
  /* 3 -> 1: ITU-R BT.601 luma, as PIL's convert('L') */
  float r, g, b;
  if (last) {
    const uint8_t *p = src + ((size_t)y * w + x) * 3;
    r = p[0], g = p[1], b = p[2];
  } else {
    size_t plane = (size_t)h * w, at = (size_t)y * w + x;
    r = src[at], g = src[plane + at], b = src[2 * plane + at];
  }
  return 0.299f * r + 0.587f * g + 0.114f * b;
}

void dp_augment_sample(const uint8_t *src, int c, int h, int w, int last, const em_augment *aug, em_sample_rng *rng,
                       void *dst) {
  int oc, oh, ow;
  if (dp_augment_shape(aug, c, h, w, &oc, &oh, &ow)) return; /* checked by the callers */
  int pad = aug ? aug->pad : 0, oy = 0, ox = 0, flip = 0;
  if (aug && (aug->crop_h || aug->crop_w)) {
    int room_y = h + 2 * pad - oh, room_x = w + 2 * pad - ow;
    if (aug->random_crop && rng) {
      oy = (int)em_sample_rng_below(rng, room_y + 1);
      ox = (int)em_sample_rng_below(rng, room_x + 1);
    } else {
      oy = room_y / 2;
      ox = room_x / 2;
    }
  }
  if (aug && aug->flip_p > 0 && rng) flip = em_sample_rng_uniform(rng) < aug->flip_p;
  int norm = aug && aug->normalise;
  float scale[4] = {1, 1, 1, 1}, shift[4] = {0, 0, 0, 0};
  if (norm)
    for (int k = 0; k < oc && k < 4; k++) {
      double sd = aug->std[k] > 0 ? aug->std[k] : 1;
      scale[k] = (float)(1.0 / (255.0 * sd));
      shift[k] = (float)(-aug->mean[k] / sd);
    }
  int simple = !last && (c == oc || c == 1); /* rows of the source are contiguous */
  for (int k = 0; k < oc; k++) {
    for (int y = 0; y < oh; y++) {
      int sy = y + oy - pad;
      size_t row = ((size_t)k * oh + y) * ow;
      if (sy < 0 || sy >= h) { /* a padding row */
        if (norm) {
          float *d = (float *)dst + row;
          for (int x = 0; x < ow; x++) d[x] = shift[k];
        } else {
          memset((uint8_t *)dst + row, 0, (size_t)ow);
        }
        continue;
      }
      const uint8_t *srow = simple ? src + ((size_t)(c == 1 ? 0 : k) * h + sy) * w : NULL;
      if (norm) {
        float *restrict d = (float *)dst + row;
        float sc = scale[k], sh = shift[k];
        for (int x = 0; x < ow; x++) {
          int sx = (flip ? ow - 1 - x : x) + ox - pad;
          float v = sx < 0 || sx >= w ? 0.0f : srow ? (float)srow[sx] : pixel(src, c, h, w, last, k, oc, sy, sx);
          d[x] = v * sc + sh;
        }
      } else {
        uint8_t *restrict d = (uint8_t *)dst + row;
        if (srow && !flip && ox - pad >= 0 && ox - pad + ow <= w) { /* a straight copy */
          memcpy(d, srow + ox - pad, (size_t)ow);
          continue;
        }
        for (int x = 0; x < ow; x++) {
          int sx = (flip ? ow - 1 - x : x) + ox - pad;
          float v = sx < 0 || sx >= w ? 0.0f : srow ? (float)srow[sx] : pixel(src, c, h, w, last, k, oc, sy, sx);
          d[x] = (uint8_t)(v + 0.5f);
        }
      }
    }
  }
}

em_status em_data_augment(em_tensor **out, const em_tensor *image, int channels_last, const em_augment *aug,
                          em_sample_rng *rng) {
  if (!out || *out) return em_set_error(EM_ERR_ARGUMENT, "augment: out must point to NULL (the result is new)");
  if (!image) return em_set_error(EM_ERR_ARGUMENT, "augment: image must not be NULL");
  int nd = em_tensor_ndim(image);
  if (em_tensor_dtype(image) != EM_UINT8 || nd < 2 || nd > 3 || em_tensor_device(image).type != EM_CPU)
    return em_set_error(EM_ERR_ARGUMENT,
                        "augment: expected a uint8 CPU image [C, H, W], [H, W, C] or [H, W], got "
                        "%s with %d dims",
                        em_dtype_name(em_tensor_dtype(image)), nd);
  int c, h, w;
  if (nd == 2) {
    c = 1, h = (int)em_tensor_size(image, 0), w = (int)em_tensor_size(image, 1);
    channels_last = 0;
  } else if (channels_last) {
    h = (int)em_tensor_size(image, 0), w = (int)em_tensor_size(image, 1), c = (int)em_tensor_size(image, 2);
  } else {
    c = (int)em_tensor_size(image, 0), h = (int)em_tensor_size(image, 1), w = (int)em_tensor_size(image, 2);
  }
  int oc, oh, ow;
  em_status st = dp_augment_shape(aug, c, h, w, &oc, &oh, &ow);
  if (st) return st;
  if (aug && (aug->random_crop || aug->flip_p > 0) && !rng)
    return em_set_error(EM_ERR_ARGUMENT, "augment: a random crop or flip needs the sample's rng");
  em_tensor *src = NULL;
  if ((st = em_contiguous(&src, image))) return st;
  int64_t sizes[3] = {oc, oh, ow};
  st = em_empty(out, 3, sizes, aug && aug->normalise ? EM_FLOAT32 : EM_UINT8, (em_device){EM_CPU, 0});
  if (!st) dp_augment_sample(em_tensor_data(src), c, h, w, channels_last, aug, rng, em_tensor_data(*out));
  em_tensor_release(src);
  return st;
}
