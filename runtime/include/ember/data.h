/* ember/data.h - reading datasets and planning epochs for the data loaders.
 *
 * IDX is the format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/): a
 * big-endian header (two zero bytes, a type code, the number of dims, then one uint32 per
 * dim) followed by the elements in row-major order. Files may be gzipped; zlib tells
 * them apart by their first bytes, so the same call reads both.
 *
 * Epoch plans are permutations keyed by (seed, stream) on their own Philox streams, so a
 * data loader's order never depends on the global generator (model initialisation, dropout),
 * on the thread count or on how many workers or ranks share the work.
 *
 * Formats (runtime/data/npy.c, tfrecord.c, jpeg.c, source.c) are read through em_source,
 * which fills a batch's tensors in one call: read, decode, augment (runtime/data/
 * transforms.c: random crop, flip, normalise), timed per stage. Randomness is keyed by
 * (seed, epoch, sample id) through em_sample_rng (Philox, counter words 2-3), so a batch is
 * the same whichever reader or loader made it and however many there are. Without
 * libturbojpeg at build time the JPEG calls fail with EM_ERR_UNSUPPORTED.
 *
 * The reader processes and trainers that move these batches: ember/data_pipeline.h. */
#ifndef EMBER_DATA_H
#define EMBER_DATA_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* EM_FFI_BEGIN */
typedef struct em_tensor em_tensor;
typedef struct em_source em_source;

/* One tensor of a batch: its name, dtype and shape (sizes[0] is the batch dim).
 * lengths = 0: a row tensor, sizes[0] = the batch's samples. lengths = k > 0: a jagged
 * tensor (variable-length features, as DLRM's offsets format and TorchRec's
 * KeyedJaggedTensor carry them): its rows are the values of every sample, sample after
 * sample, and tensor k - 1 of the same batch, an int64 row tensor [samples] or
 * [samples, keys] of counts >= 0, says how many belong to each (sample, key); sizes[0] is
 * the sum of those counts. When records are skipped, a jagged tensor keeps the values of
 * the samples kept: the first sum(lengths of kept rows). */
typedef struct em_tensor_desc {
  char name[32];
  int32_t dtype;
  int32_t ndim;
  int64_t sizes[8];
  int32_t lengths;
  int32_t pad_;
} em_tensor_desc;

/* Seconds spent per stage; readers report theirs with each batch. */
typedef struct em_stage_times {
  double read, decode, transform, send;
} em_stage_times;

/* Reads an IDX file (plain or gzipped) into a new CPU tensor with the file's dims. Type
 * codes: 0x08 unsigned byte -> uint8, 0x09 signed byte, 0x0B int16 and 0x0C int32 ->
 * int32, 0x0D float -> float32, 0x0E double -> float64. limit < 0 reads every item
 * (dim 0) and checks that the data fills the file exactly; limit >= 0 reads only the first
 * min(limit, dim 0) items. Errors name the file and what is wrong with it. *out must be NULL. */
EM_API em_status em_data_read_idx(em_tensor **out, const char *path, int64_t limit);

/* A permutation of base .. base + n - 1 (int64) from the Philox stream keyed by seed and
 * stream (a loader passes its epoch): the same arguments give the same permutation,
 * whatever the global generator's state. *out must be NULL. */
EM_API em_status em_data_randperm(em_tensor **out, int64_t n, uint64_t seed, uint64_t stream, int64_t base);
/* Batch assembly: the items (slices along dim 0) of src at the positions in index
 * (a 1-d int64 tensor, counted from base) gathered into a new float32 tensor
 * [len(index), src's other dims], each element converted as v * scale + shift (pixels:
 * scale = 1 / (255 std), shift = -mean / std). One pass, no intermediate tensors. src is a
 * contiguous CPU tensor of uint8, int32, float32 or float64. *out must be NULL. */
EM_API em_status em_data_gather_normalize(em_tensor **out, const em_tensor *src, const em_tensor *index, int64_t base,
                                          double scale, double shift);
/* ---------------------------------------------------------------- per-sample randomness */
/* Draw k of sample `id` in epoch `epoch` is Philox block (k, id >> 32, id, epoch ^ tag)
 * keyed by seed: a pure function of (seed, epoch, id, k). */
typedef struct em_sample_rng {
  uint64_t seed;
  uint64_t epoch;
  int64_t id;
  uint64_t counter;
} em_sample_rng;
EM_API uint64_t em_sample_rng_u64(em_sample_rng *r);
EM_API double em_sample_rng_uniform(em_sample_rng *r); /* [0, 1) */
EM_API int64_t em_sample_rng_below(em_sample_rng *r, int64_t n); /* [0, n) */
EM_API double em_sample_rng_normal(em_sample_rng *r); /* mean 0, std 1 */

/* ---------------------------------------------------------------- plans */
/* The sample ids (int64, counted from base) rank `rank` of world_size delivers in epoch
 * `epoch`: the epoch's order (a (seed, epoch) permutation when shuffle, else 0..n-1), then
 * every world_size-th entry from position rank. remainder 0 drops the n % world_size last
 * entries so every rank gets n / world_size; 1 pads the order by repeating its first entries
 * so every rank gets ceil(n / world_size). With shuffle and world_size 1 this is
 * em_data_randperm(n, seed, epoch) (the in-process DataLoader's order). */
EM_API em_status em_data_epoch_plan(em_tensor **out, int64_t n, uint64_t seed, uint64_t epoch, int shuffle,
                                    int64_t rank, int64_t world_size, int pad, int64_t base);
/* Starts making that plan on a thread of its own: the next em_data_epoch_plan with exactly
 * these arguments takes it (a loader asks for epoch e + 1 as epoch e starts). One plan is
 * made ahead at a time; asking for another replaces it. Never fails: without a thread, the
 * plan is made when asked for. */
EM_API em_status em_data_epoch_plan_ahead(int64_t n, uint64_t seed, uint64_t epoch, int shuffle, int64_t rank,
                                          int64_t world_size, int pad, int64_t base);

/* ---------------------------------------------------------------- formats */
/* CRC-32C (Castagnoli), as TFRecord and other storage formats use it. */
EM_API uint32_t em_data_crc32c(const void *data, size_t n, uint32_t crc);
/* TFRecord framing around a record's CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
EM_API uint32_t em_data_tfrecord_mask(uint32_t crc);
/* A .npy file (little-endian or byte dtypes, C order) as a tensor; float16 and bool too. */
EM_API em_status em_data_read_npy(em_tensor **out, const char *path);
EM_API em_status em_data_write_npy(const char *path, const em_tensor *t);
/* JPEG bytes (a uint8 tensor) from a uint8 image [H, W] or [H, W, 3]; and back, decoded to
 * [H, W, channels] (channels 1 or 3; 0 keeps the file's). */
EM_API em_status em_data_jpeg_encode(em_tensor **out, const em_tensor *image, int quality);
EM_API em_status em_data_jpeg_decode(em_tensor **out, const void *data, size_t n, int channels, const char *what);

/* ---------------------------------------------------------------- augmentation */
/* Applied per sample, in this order: pad (zeros) and crop (random offsets from the sample's
 * rng when random_crop, else centred) to crop_h x crop_w (0: no crop), flip left-right with
 * probability flip_p, then normalise ((x / 255 - mean[c]) / std[c] into float32) when
 * normalise, else keep uint8. Input: uint8 [C, H, W] (or [H, W, C] when channels_last).
 * Output: [C, crop_h, crop_w], channels first. Draws: crop y, crop x, then flip. */
typedef struct em_augment {
  int32_t crop_h, crop_w, pad, random_crop;
  double flip_p;
  int32_t normalise, channels; /* channels: 0 keeps the input's; 1 or 3 convert */
  double mean[4], std[4]; /* per channel; scale 1 / (255 std) and shift -mean / std are
                                    rounded to float32 once, as ember.data's gather_normalize does */
} em_augment;
EM_API em_status em_data_augment(em_tensor **out, const em_tensor *image, int channels_last, const em_augment *aug,
                                 em_sample_rng *rng);

/* ---------------------------------------------------------------- sources */
/* A source is a dataset in one of the built-in formats; sample i (0-based) is an image or
 * a raw row plus an int64 label. Labels read from files get label_offset added (1 turns
 * 0-based classes into ember's 1-based ones). */
typedef struct em_source_options {
  const char *format; /* "idx", "npy", "tfrecord", "jpeg" */
  const char *paths; /* newline-separated: idx: images, labels; npy: x, [y];
                              tfrecord: shard files; jpeg: files (see labels) or one
                              directory with a folder per class */
  const int64_t *labels; /* jpeg files: one label each (NULL: none) */
  int64_t limit; /* > 0: the first `limit` samples */
  int64_t label_offset;
  const char *image_key; /* tfrecord: the tf.Example features (default "image", "label") */
  const char *label_key;
  int32_t encoded; /* tfrecord: 1 the image feature holds JPEG bytes, 0 raw bytes */
  int32_t channels_last; /* npy / raw images: [H, W, C] rather than [C, H, W] */
  int32_t channels; /* decoded JPEG channels: 1 or 3 */
  int32_t ndim; /* raw tfrecord images: the sample shape */
  int64_t shape[4];
} em_source_options;

EM_API em_status em_source_open(em_source **out, const em_source_options *options);
EM_API void em_source_free(em_source *s);
EM_API int64_t em_source_size(const em_source *s);
/* What fill writes for aug (NULL: raw samples): descs[0] "x", descs[1] "y" when the source
 * has labels; sizes[0] = rows. Returns the number of tensors (1 or 2) or -1 on error. */
EM_API int em_source_describe(em_source *s, const em_augment *aug, int64_t rows, em_tensor_desc *descs);
/* Reads ids[0..n) (counted from base) into rows of x (and y), augmenting with rng keyed by
 * (seed, epoch, id). skip_bad: a bad record is left out and counted in *skipped (its
 * message in the error slot, status EM_OK), else the call fails naming file and offset.
 * *kept receives the rows written and kept_ids their ids (may be NULL). */
EM_API em_status em_source_fill(em_source *s, const int64_t *ids, int64_t n, int64_t base, const em_augment *aug,
                                uint64_t seed, uint64_t epoch, em_tensor *x, em_tensor *y, int skip_bad, int64_t *kept,
                                int64_t *kept_ids, int64_t *skipped, em_stage_times *times);
/* One batch in new tensors, in one call (what an in-process loader does per batch): out[0]
 * x and out[1] y as em_source_describe says (y NULL without labels), out[2] the kept ids
 * (int64 [kept], as given). Filled as em_source_fill fills them; with skip_bad the tensors
 * hold only the kept rows (all three may have 0 rows). out: room for 3 tensors, all NULL. */
EM_API em_status em_source_batch(em_tensor **out, em_source *s, const int64_t *ids, int64_t n, int64_t base,
                                 const em_augment *aug, uint64_t seed, uint64_t epoch, int skip_bad, int64_t *skipped,
                                 em_stage_times *times);
/* One sample as tensors (x as the augmentation leaves it; *y may stay NULL without labels). */
EM_API em_status em_source_get(em_source *s, int64_t index, int64_t base, const em_augment *aug, em_sample_rng *rng,
                               em_tensor **x, em_tensor **y);

/* Copies src into row `row` of dst (dst's dims after the first must equal src's; dtypes
 * are converted). Batch assembly for datasets that return samples one at a time. */
EM_API em_status em_data_put_row(em_tensor *dst, int64_t row, const em_tensor *src);
EM_API em_status em_data_put_row_number(em_tensor *dst, int64_t row, double value);

/* A jagged batch field (em_tensor_desc.lengths) split by key, as a model reads it (DLRM's
 * lS_i / lS_o, TorchRec's KeyedJaggedTensor.to_dict): values [total, ...] hold, sample
 * after sample, the values of each of the K keys; lengths (int64 [n, K], or [n] for one
 * key) count them. values_out[k] receives key k's values [total_k, ...] (samples in order)
 * and offsets_out[k] int64 [n], the start of each sample's bag in them, counted from base
 * (0 as DLRM's offsets, 1 for Lua). Both arrays have room for K new tensors. */
EM_API em_status em_data_jagged_split(em_tensor **values_out, em_tensor **offsets_out, const em_tensor *values,
                                      const em_tensor *lengths, int64_t base);
/* EM_FFI_END */

#ifdef __cplusplus
}
#endif
#endif
