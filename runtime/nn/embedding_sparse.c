/* embedding_sparse.c - what embeddings need for recommendation models beyond embedding.c:
 * row-sparse weight gradients (ember/sparse.h), PyTorch's padding_idx for bags (the padding
 * index is dropped from its bag before anything is computed, so it counts in no mean and
 * gets no gradient), include_last_offset, and max_norm's in-place renormalisation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "nn_impl.h"

/* The row-sparse gradient for the weight of a lookup: gout [B, D] of bags over idx [L]
 * with offsets [B]. Delivers it to input 0 of n. */
static em_status deliver_rows(em_node *n, const char *op, const em_tensor *gout, const em_tensor *idx,
                              const em_tensor *off, const em_tensor *psw, const em_tensor *argmax, int mode,
                              int64_t num_rows, int64_t pad, int base, em_tensor **gi) {
  em_device dev = gout->storage->device;
  const em_backend *be = ag_sparse_backend(op, dev);
  if (!be) return em_last_status();
  int64_t L = em_tensor_numel(idx), D = gout->sizes[1], vshape[2] = {L, D}, nnz = 0;
  em_tensor *rows = NULL, *values = NULL, *r = NULL, *v = NULL;
  em_status st;
  if (!(st = em_empty(&rows, 1, &L, EM_INT64, dev)) && !(st = em_empty(&values, 2, vshape, gout->dtype, dev)) &&
      !(st = be->embedding_bag_sparse_backward(rows, values, &nnz, gout, idx, off, psw, argmax, mode, pad, base)) &&
      !(st = em_narrow(&r, rows, 0, 0, nnz)))
    st = em_narrow(&v, values, 0, 0, nnz);
  em_tensor_release(rows);
  em_tensor_release(values);
  if (st) {
    em_tensor_release(r);
    return st;
  }
  em_sparse_grad *g = ag_sparse_wrap(num_rows, r, v);
  if (!g) return em_last_status();
  return ag_sparse_deliver(n, 0, g, gi);
}

/* saved: weight, indices [L], offsets [B], per_sample_weights, argmax; i: mode, base, pad */
em_status nn_embedding_bag_sparse_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  const em_tensor *w = n->saved[0], *idx = n->saved[1], *off = n->saved[2], *psw = n->saved[3], *argmax = n->saved[4];
  int mode = (int)n->i[0], base = (int)n->i[1];
  em_tensor *gout = NULL, *gpsw = NULL;
  em_status st = nn_contiguous(&gout, go[0]);
  if (!st && em_node_needs_input_grad(n, 0))
    st = deliver_rows(n, "embedding_bag", gout, idx, off, psw, argmax, mode, w->sizes[0], n->i[2], base, &gi[0]);
  if (!st && em_node_needs_input_grad(n, 1)) {
    const em_backend *be = nn_backend("embedding_bag", w);
    if (!be) st = em_last_status();
    if (!st) st = em_empty(&gpsw, 1, idx->sizes, w->dtype, w->storage->device);
    if (!st) st = be->embedding_bag_backward(NULL, gpsw, gout, w, idx, off, psw, argmax, mode, base);
    if (!st) {
      st = nn_set_grad(n, 1, gpsw, &gi[1]);
      gpsw = NULL;
    }
  }
  em_tensor_release(gout);
  em_tensor_release(gpsw);
  return st;
}

/* saved: indices (flat [L]); i: padding_idx (from base, or < 0), base; shapes[0]: weight */
em_status nn_embedding_sparse_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  const em_tensor *idx = n->saved[0];
  int64_t pad = n->i[0], base = n->i[1], L = idx->sizes[0], D = n->shapes[0][1];
  int64_t rows2[2] = {L, D};
  em_tensor *g2 = NULL, *off = NULL;
  em_status st = nn_reshaped(&g2, go[0], 2, rows2);
  if (!st) st = em_arange(&off, 0, (double)L, 1, EM_INT64, g2->storage->device); /* one index per bag */
  if (!st)
    st = deliver_rows(n, "embedding", g2, idx, off, NULL, NULL, EM_BAG_SUM, n->shapes[0][0], pad >= 0 ? pad - base : -1,
                      (int)base, &gi[0]);
  em_tensor_release(g2);
  em_tensor_release(off);
  return st;
}

em_status nn_bag_last_offset(em_tensor **idx, em_tensor **off, em_tensor **psw) {
  const char *op = "embedding_bag";
  int64_t n = (*off)->sizes[0], L = (*idx)->sizes[0], last = 0;
  if (n < 1)
    return em_set_error(EM_ERR_SHAPE, "%s: include_last_offset needs offsets of B + 1 entries, got none", op);
  em_tensor *tail = NULL, *cut = NULL;
  em_status st = em_select(&tail, *off, 0, n - 1);
  if (!st) st = em_tensor_item_int64(tail, &last);
  em_tensor_release(tail);
  if (st) return st;
  if (last < 0 || last > L)
    return em_set_error(EM_ERR_INDEX, "%s: the last offset is %lld, expected 0..%lld (the number of indices)", op,
                        (long long)last, (long long)L);
  if ((st = em_narrow(&cut, *off, 0, 0, n - 1))) return st;
  em_tensor_release(*off);
  *off = cut;
  em_tensor *pieces[2] = {*idx, *psw};
  for (int k = 0; k < 2; k++) {
    if (!pieces[k]) continue;
    em_tensor *narrowed = NULL;
    if ((st = em_narrow(&narrowed, pieces[k], 0, 0, last))) return st;
    em_tensor_release(pieces[k]);
    pieces[k] = narrowed;
  }
  *idx = pieces[0];
  *psw = pieces[1];
  return EM_OK;
}

/* keep = indices != pad; the kept indices and weights; offsets counted again over them:
 * new_off[b] = the number kept before off[b] = [0, cumsum(keep)...][off[b]]. */
em_status nn_bag_drop_padding(em_tensor **idx, em_tensor **off, em_tensor **psw, int64_t pad) {
  em_tensor *keep = NULL, *kept = NULL, *kept_w = NULL, *k64 = NULL, *csum = NULL, *zero = NULL, *ex = NULL,
            *noff = NULL;
  int64_t one = 1;
  em_status st = em_binary_scalar(EM_NE, &keep, *idx, (double)pad, 0);
  if (!st) st = em_masked_select(&kept, *idx, keep);
  if (!st && *psw) st = em_masked_select(&kept_w, *psw, keep);
  if (!st) st = em_to(&k64, keep, EM_INT64, keep->storage->device);
  if (!st) st = em_cumsum(&csum, k64, 0);
  if (!st) st = em_zeros(&zero, 1, &one, EM_INT64, keep->storage->device);
  em_tensor *parts[2] = {zero, csum};
  if (!st) st = em_cat(&ex, parts, 2, 0);
  if (!st) st = em_index_select(&noff, ex, 0, *off, 0);
  if (!st) {
    em_tensor_release(*idx);
    em_tensor_release(*off);
    *idx = kept, *off = noff, kept = noff = NULL;
    if (*psw) {
      em_tensor_release(*psw);
      *psw = kept_w;
      kept_w = NULL;
    }
  }
  em_tensor *tmp[] = {keep, kept, kept_w, k64, csum, zero, ex, noff};
  nn_release(8, tmp);
  return st;
}

/* ---- max_norm ---- */

/* clang-format off */
#define DEFINE_RENORM(T, S_)                                                                                   \
  static void renorm_##S_(T *w, int64_t D, const int64_t *rows, int64_t n, double max_norm, double p) {      \
    for (int64_t k = 0; k < n; k++) {                                                                         \
      T *r = w + rows[k] * D;                                                                                 \
      double s = 0;                                                                                           \
      for (int64_t j = 0; j < D; j++) {                                                                       \
        double a = fabs((double)r[j]);                                                                        \
        if (isinf(p)) s = fmax(s, a);                                                                         \
        else s += p == 2 ? a * a : pow(a, p);                                                                 \
      }                                                                                                       \
      double norm = p == 2 ? sqrt(s) : isinf(p) ? s : pow(s, 1.0 / p);                                        \
      if (norm > max_norm) {                                                                                  \
        T scale = (T)(max_norm / (norm + 1e-7));                                                              \
        for (int64_t j = 0; j < D; j++) r[j] *= scale;                                                        \
      }                                                                                                       \
    }                                                                                                         \
  }
/* clang-format on */
DEFINE_RENORM(float, s)
DEFINE_RENORM(double, d)

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* PyTorch's embedding_renorm_: each distinct row looked up whose norm exceeds max_norm is
 * scaled by max_norm / (norm + 1e-7), in place and outside autograd. */
em_status em_nn_embedding_renorm_(em_tensor *weight, const em_tensor *indices, double max_norm, double norm_type,
                                  int base) {
  const char *op = "embedding_renorm_";
  em_status st;
  if ((st = nn_check_float(op, weight, "weight")) || (st = nn_check_index(op, indices, "indices"))) return st;
  if (weight->ndim != 2 || !em_tensor_is_contiguous(weight))
    return em_set_error(EM_ERR_SHAPE, "%s: expected a contiguous 2-d weight, got shape %s", op, EM_SHAPE(weight));
  if (weight->storage->device.type != EM_CPU)
    return em_set_error(EM_ERR_UNSUPPORTED, "%s: max_norm is implemented on the CPU only", op);
  if (!(max_norm > 0) || !(norm_type > 0))
    return em_set_error(EM_ERR_ARGUMENT, "%s: max_norm %g and norm_type %g, expected both > 0", op, max_norm,
                        norm_type);
  em_tensor *flat = NULL;
  int64_t L = em_tensor_numel(indices), R = weight->sizes[0];
  if ((st = em_to(&flat, indices, EM_INT64, indices->storage->device))) return st;
  em_tensor *c = NULL;
  st = em_contiguous(&c, flat);
  em_tensor_release(flat);
  if (st) return st;
  int64_t *rows = malloc(sizeof *rows * (size_t)(L ? L : 1));
  if (!rows) {
    em_tensor_release(c);
    return em_set_error(EM_ERR_MEMORY, "%s: out of memory", op);
  }
  const int64_t *src = (const int64_t *)em_tensor_ptr(c);
  for (int64_t i = 0; i < L && !st; i++) {
    rows[i] = src[i] - base;
    if (rows[i] < 0 || rows[i] >= R)
      st = em_set_error(EM_ERR_INDEX, "%s: index %lld is out of range for %lld embeddings (expected %d..%lld)", op,
                        (long long)src[i], (long long)R, base, (long long)(R - 1 + base));
  }
  em_tensor_release(c);
  if (!st) {
    qsort(rows, (size_t)L, sizeof *rows, cmp_i64);
    int64_t n = 0;
    for (int64_t i = 0; i < L; i++)
      if (!n || rows[i] != rows[n - 1]) rows[n++] = rows[i];
    if (weight->dtype == EM_FLOAT32)
      renorm_s((float *)em_tensor_ptr(weight), weight->sizes[1], rows, n, max_norm, norm_type);
    else renorm_d((double *)em_tensor_ptr(weight), weight->sizes[1], rows, n, max_norm, norm_type);
  }
  free(rows);
  return st;
}
