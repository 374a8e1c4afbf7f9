/* metrics.c - count_correct: how many rows of logits [N, C] have their largest value at
 * the target class. A training loop counts this every step for its accuracy; composed as
 * argmax, eq, sum and item it was four results and four dispatches (16 us of an 800 us MLP
 * step on [128, 10]); the backend's fused loop takes ~1 us and allocates nothing. Devices
 * without the fused loop get the composition. Ties and NaN follow argmax: the first
 * largest value wins, and NaN counts as larger than any number. */
#include "nn_impl.h"

static em_status count_composed(int64_t *count, const em_tensor *x, const em_tensor *target, int base) {
  em_tensor *values = NULL, *at = NULL, *hit = NULL, *total = NULL, *lo = NULL, *hi = NULL;
  int dim = 1;
  int64_t least = 0, most = 0;
  em_status st = em_reduce(EM_MIN, &lo, NULL, target, NULL, 0, 0, 0);
  if (!st) st = em_reduce(EM_MAX, &hi, NULL, target, NULL, 0, 0, 0);
  if (!st) st = em_tensor_item_int64(lo, &least);
  if (!st) st = em_tensor_item_int64(hi, &most);
  if (!st && (least < base || most - base >= x->sizes[1])) {
    long long bad = least < base ? (long long)least : (long long)most;
    st = em_set_error(EM_ERR_INDEX, "count_correct: target %lld is out of range for %lld classes (expected %d..%lld)",
                      bad, (long long)x->sizes[1], base, (long long)(x->sizes[1] - 1 + base));
  }
  if (!st) st = em_reduce(EM_MAX, &values, &at, x, &dim, 1, 0, base);
  if (!st) st = em_binary(EM_EQ, &hit, at, target);
  if (!st) st = em_reduce(EM_SUM, &total, NULL, hit, NULL, 0, 0, 0);
  if (!st) st = em_tensor_item_int64(total, count);
  em_tensor *tmp[] = {values, at, hit, total, lo, hi};
  nn_release(6, tmp);
  return st;
}

em_status em_nn_count_correct(int64_t *count, const em_tensor *logits, const em_tensor *target, int base) {
  const char *op = "count_correct";
  em_status st;
  if (!count) return em_set_error(EM_ERR_ARGUMENT, "count_correct: count must not be NULL");
  *count = 0;
  if ((st = nn_check_float(op, logits, "logits")) || (st = nn_check_index(op, target, "target"))) return st;
  if (logits->ndim != 2)
    return em_set_error(EM_ERR_SHAPE, "count_correct: expected logits of shape [N, C], got %s", EM_SHAPE(logits));
  if (target->ndim != 1 || target->sizes[0] != logits->sizes[0])
    return em_set_error(EM_ERR_SHAPE,
                        "count_correct: expected a target of shape [%lld] (one class per row of logits %s), got %s",
                        (long long)logits->sizes[0], EM_SHAPE(logits), EM_SHAPE(target));
  if (em_tensor_device(target).type != em_tensor_device(logits).type ||
      em_tensor_device(target).index != em_tensor_device(logits).index)
    return em_set_error(EM_ERR_DEVICE, "count_correct: logits and target are on different devices");
  if (logits->sizes[0] == 0) return EM_OK;
  if (logits->sizes[1] == 0)
    return em_set_error(EM_ERR_SHAPE, "count_correct: logits %s have no classes", EM_SHAPE(logits));
  const em_backend *be = nn_backend(op, logits);
  if (!be) return em_last_status();
  if (!be->count_correct) return count_composed(count, logits, target, base);
  return be->count_correct(count, logits, target, base);
}
