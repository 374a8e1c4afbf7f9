/* data/jagged.c - a jagged batch field split by key (em_data_jagged_split, ember/data.h).
 *
 * The data pipeline carries a jagged field sample-major (each sample's values for key 1,
 * then key 2, ...), the order a reader produces them in; an embedding bag per key wants
 * them key-major with offsets. One pass over the lengths gives every key's totals, a second
 * copies each (sample, key) run of rows to its place. */
#include <string.h>
#include "core/core_impl.h"
#include "ember/data.h"

#define OP "data.jagged_split"

em_status em_data_jagged_split(em_tensor **values_out, em_tensor **offsets_out, const em_tensor *values,
                               const em_tensor *lengths, int64_t base) {
  if (!values_out || !offsets_out || !values || !lengths)
    return em_set_error(EM_ERR_ARGUMENT, OP ": expects output arrays, values and lengths");
  int ld = em_tensor_ndim(lengths);
  if (em_tensor_dtype(lengths) != EM_INT64 || (ld != 1 && ld != 2) || em_tensor_device(lengths).type != EM_CPU)
    return em_set_error(EM_ERR_ARGUMENT, OP ": lengths must be a CPU int64 tensor [n] or [n, keys], got %d dims", ld);
  if (em_tensor_ndim(values) < 1 || em_tensor_device(values).type != EM_CPU)
    return em_set_error(EM_ERR_ARGUMENT, OP ": values must be a CPU tensor of at least 1 dim");
  em_tensor *L = NULL, *V = NULL;
  em_status st;
  if ((st = em_contiguous(&L, lengths))) return st;
  if ((st = em_contiguous(&V, values))) {
    em_tensor_release(L);
    return st;
  }
  int64_t n = em_tensor_size(L, 0), keys = ld == 2 ? em_tensor_size(L, 1) : 1;
  const int64_t *len = em_tensor_data(L);
  int64_t total = em_tensor_size(V, 0);
  int64_t row_bytes = (int64_t)em_dtype_size(em_tensor_dtype(V));
  for (int d = 1; d < em_tensor_ndim(V); d++) row_bytes *= em_tensor_size(V, d);
  int64_t sum = 0;
  for (int64_t i = 0; i < n * keys; i++) {
    if (len[i] < 0 || len[i] > total - sum) {
      em_tensor_release(L), em_tensor_release(V);
      return em_set_error(EM_ERR_ARGUMENT, OP ": lengths count %s values, the values tensor has %lld rows",
                          len[i] < 0 ? "negative" : "more", (long long)total);
    }
    sum += len[i];
  }
  if (sum != total) {
    em_tensor_release(L), em_tensor_release(V);
    return em_set_error(EM_ERR_ARGUMENT, OP ": lengths count %lld values, the values tensor has %lld rows",
                        (long long)sum, (long long)total);
  }
  for (int64_t k = 0; k < keys; k++) values_out[k] = offsets_out[k] = NULL;
  int64_t sizes[8];
  for (int d = 0; d < em_tensor_ndim(V); d++) sizes[d] = em_tensor_size(V, d);
  const uint8_t *src = em_tensor_data(V);
  for (int64_t k = 0; k < keys && !st; k++) {
    int64_t tk = 0;
    for (int64_t i = 0; i < n; i++) tk += len[i * keys + k];
    sizes[0] = tk;
    if ((st = em_empty(&values_out[k], em_tensor_ndim(V), sizes, em_tensor_dtype(V), (em_device){EM_CPU, 0}))) break;
    if ((st = em_empty(&offsets_out[k], 1, &n, EM_INT64, (em_device){EM_CPU, 0}))) break;
    uint8_t *dst = em_tensor_data(values_out[k]);
    int64_t *off = em_tensor_data(offsets_out[k]);
    int64_t at = 0, from = 0; /* rows written to key k; the row where sample i's values start */
    for (int64_t i = 0; i < n; i++) {
      int64_t skip = 0;
      for (int64_t j = 0; j < k; j++) skip += len[i * keys + j];
      int64_t c = len[i * keys + k];
      off[i] = at + base;
      if (c) memcpy(dst + at * row_bytes, src + (from + skip) * row_bytes, (size_t)(c * row_bytes));
      at += c;
      for (int64_t j = 0; j < keys; j++) from += len[i * keys + j];
    }
  }
  em_tensor_release(L), em_tensor_release(V);
  if (st)
    for (int64_t k = 0; k < keys; k++) {
      em_tensor_release(values_out[k]), em_tensor_release(offsets_out[k]);
      values_out[k] = offsets_out[k] = NULL;
    }
  return st;
}
