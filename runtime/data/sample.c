/* sample.c - per-sample randomness, per-rank epoch plans and row-by-row batch assembly.
 *
 * A sample's random numbers come from Philox keyed by the seed with the counter
 * (draw, id >> 32, id, epoch ^ tag): words 2 and 3 carry the sample and the epoch, as
 * runtime/core/philox.h reserves them for sub-streams, and the tag keeps these blocks apart
 * from the global generator's (words 2-3 zero) and from the epoch plans' (plan.c). So a
 * crop or flip depends on (seed, epoch, sample) alone: not on the reader that made the
 * batch, the number of readers or the batch it falls in. */
#include <math.h>
#include <string.h>
#include "core/philox.h"
#include "data_impl.h"
#include "ember/data.h"
#include "ember/data_pipeline.h"
#include "tensor/tensor_impl.h"

#define SAMPLE_TAG 0x73616d70u /* "samp" */

static em_philox4 sample_block(em_sample_rng *r) {
  uint64_t k = r->counter++;
  em_philox4 ctr = {{(uint32_t)k, (uint32_t)((uint64_t)r->id >> 32), (uint32_t)r->id, (uint32_t)r->epoch ^ SAMPLE_TAG}};
  return em_philox4x32_10(ctr, (uint32_t)r->seed, (uint32_t)(r->seed >> 32));
}

uint64_t em_sample_rng_u64(em_sample_rng *r) {
  em_philox4 b = sample_block(r);
  return em_philox_u64(b.x[0], b.x[1]);
}

double em_sample_rng_uniform(em_sample_rng *r) { return em_philox_double01(em_sample_rng_u64(r)); }

int64_t em_sample_rng_below(em_sample_rng *r, int64_t n) {
  if (n <= 1) {
    r->counter++; /* every call draws once, whatever n is: later draws do not shift */
    return 0;
  }
  return (int64_t)em_philox_below(em_sample_rng_u64(r), (uint64_t)n);
}

double em_sample_rng_normal(em_sample_rng *r) {
  em_philox4 b = sample_block(r);
  double u1 = em_philox_double_open0(em_philox_u64(b.x[0], b.x[1]));
  double u2 = em_philox_double01(em_philox_u64(b.x[2], b.x[3]));
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---------------------------------------------------------------- plans */
em_status em_data_epoch_plan(em_tensor **out, int64_t n, uint64_t seed, uint64_t epoch, int shuffle, int64_t rank,
                             int64_t world_size, int pad, int64_t base) {
  if (!out || *out) return em_set_error(EM_ERR_ARGUMENT, "data_epoch_plan: out must point to NULL (the result is new)");
  if (n < 0) return em_set_error(EM_ERR_ARGUMENT, "data_epoch_plan: n is %lld, expected n >= 0", (long long)n);
  if (world_size < 1 || rank < 0 || rank >= world_size)
    return em_set_error(EM_ERR_ARGUMENT,
                        "data_epoch_plan: rank %lld of world size %lld (expected 0 <= rank < world size)",
                        (long long)rank, (long long)world_size);
  if (data_plan_take(out, n, seed, epoch, shuffle, rank, world_size, pad, base)) return EM_OK; /* made ahead */
  return data_epoch_plan_now(out, n, seed, epoch, shuffle, rank, world_size, pad, base);
}

em_status data_epoch_plan_now(em_tensor **out, int64_t n, uint64_t seed, uint64_t epoch, int shuffle, int64_t rank,
                              int64_t world_size, int pad, int64_t base) {
  if (world_size == 1 && shuffle) return em_data_randperm(out, n, seed, epoch, base); /* no second copy */
  em_tensor *order = NULL;
  em_status st;
  if (shuffle) {
    st = em_data_randperm(&order, n, seed, epoch, 0);
  } else {
    st = em_empty(&order, 1, &n, EM_INT64, (em_device){EM_CPU, 0});
    if (!st) {
      int64_t *p = em_tensor_data(order);
      for (int64_t i = 0; i < n; i++) p[i] = i;
    }
  }
  if (st) return st;
  int64_t per = pad ? (n + world_size - 1) / world_size : n / world_size;
  if (n == 0) per = 0;
  st = em_empty(out, 1, &per, EM_INT64, (em_device){EM_CPU, 0});
  if (!st) {
    const int64_t *o = em_tensor_data(order);
    int64_t *p = em_tensor_data(*out);
    /* position j of this rank is j * world_size + rank of the order, wrapping past the end
     * only when padding (a division per sample cost as much as the shuffle itself) */
    for (int64_t j = 0; j < per; j++) {
      int64_t k = j * world_size + rank;
      if (k >= n) k %= n;
      p[j] = o[k] + base;
    }
  }
  em_tensor_release(order);
  return st;
}

/* ---------------------------------------------------------------- rows */
em_status em_data_put_row(em_tensor *dst, int64_t row, const em_tensor *src) {
  em_status st;
  if ((st = tn_check_tensor("data_put_row", dst, "dst")) || (st = tn_check_tensor("data_put_row", src, "src")))
    return st;
  if (dst->ndim != src->ndim + 1)
    return em_set_error(EM_ERR_SHAPE,
                        "data_put_row: a sample of shape %s does not fit a batch of shape %s "
                        "(expected the batch's shape without its first dim)",
                        EM_SHAPE(src), EM_SHAPE(dst));
  for (int d = 0; d < src->ndim; d++)
    if (dst->sizes[d + 1] != src->sizes[d])
      return em_set_error(EM_ERR_SHAPE,
                          "data_put_row: a sample of shape %s does not fit a batch of shape %s "
                          "(expected the batch's shape without its first dim)",
                          EM_SHAPE(src), EM_SHAPE(dst));
  if (row < 0 || row >= dst->sizes[0])
    return em_set_error(EM_ERR_INDEX, "data_put_row: row %lld out of range for a batch of %lld rows", (long long)row,
                        (long long)dst->sizes[0]);
  if (dst->dtype == src->dtype && em_tensor_is_contiguous(dst) && em_tensor_is_contiguous(src) &&
      em_tensor_device(src).type == EM_CPU && em_tensor_device(dst).type == EM_CPU) {
    size_t bytes = (size_t)em_tensor_numel(src) * em_dtype_size(src->dtype);
    memcpy(em_tensor_ptr(dst) + (size_t)row * bytes, em_tensor_ptr(src), bytes);
    return EM_OK;
  }
  em_tensor *view = NULL;
  if ((st = em_select(&view, dst, 0, row))) return st;
  st = em_copy_(view, src);
  em_tensor_release(view);
  return st;
}

em_status em_data_put_row_number(em_tensor *dst, int64_t row, double value) {
  em_status st;
  if ((st = tn_check_tensor("data_put_row", dst, "dst"))) return st;
  if (dst->ndim != 1)
    return em_set_error(EM_ERR_SHAPE, "data_put_row: a number fits a batch of shape [rows], not %s", EM_SHAPE(dst));
  if (row < 0 || row >= dst->sizes[0])
    return em_set_error(EM_ERR_INDEX, "data_put_row: row %lld out of range for a batch of %lld rows", (long long)row,
                        (long long)dst->sizes[0]);
  return em_tensor_set(dst, &row, value);
}
