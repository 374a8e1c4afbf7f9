/* embedding.c - embedding (rows of a weight picked by index, through the tensor core's
 * index_select / index_add) and embedding_bag (sums, means or maxima of bags of rows,
 * through the backend's kernels in cpu/nn_embedding.c). */
#include <stdio.h>
#include <string.h>
#include "nn_impl.h"

/* ---- embedding ---- */

static em_status embedding_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  const em_tensor *idx = n->saved[0];
  int64_t padding_idx = n->i[0], base = n->i[1];
  int64_t rows[2] = {idx->sizes[0], n->shapes[0][1]};
  em_tensor *g2 = NULL, *gw = NULL, *pad_row = NULL;
  em_status st = em_reshape(&g2, go[0], 2, rows);
  if (!st) st = em_zeros(&gw, 2, n->shapes[0], n->dtypes[0], go[0]->storage->device);
  if (!st) st = em_index_add_(gw, 0, idx, g2, 1.0, (int)base);
  if (!st && padding_idx >= 0 && !(st = em_select(&pad_row, gw, 0, padding_idx - base))) st = em_fill(pad_row, 0);
  if (!st) {
    gi[0] = gw;
    gw = NULL;
  }
  em_tensor *tmp[] = {g2, gw, pad_row};
  nn_release(3, tmp);
  return st;
}

/* Renames an index error of the tensor core's index_select as this op's. */
static em_status rename_index_error(em_status st, const char *op, int64_t rows) {
  if (st != EM_ERR_INDEX) return st;
  const char *msg = em_last_error(), *colon = strstr(msg, ": index ");
  char copy[512];
  snprintf(copy, sizeof copy, "%s", colon ? colon + 2 : msg);
  char *dim = strstr(copy, " for dim "); /* "index 12 is out of range for dim 0 of size 10 (...)" */
  if (dim) {
    char *paren = strchr(dim, '(');
    char tail[256];
    snprintf(tail, sizeof tail, "%s", paren ? paren : "");
    snprintf(dim, sizeof copy - (size_t)(dim - copy), " for %lld embeddings %s", (long long)rows, tail);
  }
  return em_set_error(EM_ERR_INDEX, "%s: %s", op, copy);
}

em_status em_nn_embedding(em_tensor **out, const em_tensor *weight, const em_tensor *indices, int64_t padding_idx,
                          int base) {
  return em_nn_embedding_ex(out, weight, indices, padding_idx, 0, base);
}

em_status em_nn_embedding_ex(em_tensor **out, const em_tensor *weight, const em_tensor *indices, int64_t padding_idx,
                             int sparse, int base) {
  const char *op = "embedding";
  em_status st;
  if ((st = nn_check_out(op, out)) || (st = nn_check_float(op, weight, "weight")) ||
      (st = nn_check_index(op, indices, "indices")))
    return st;
  if (weight->ndim != 2)
    return em_set_error(EM_ERR_SHAPE, "embedding: expected a 2-d weight [num_embeddings, dim], got shape %s",
                        EM_SHAPE(weight));
  if (indices->ndim + 1 > EM_MAX_DIMS)
    return em_set_error(EM_ERR_SHAPE, "embedding: indices of shape %s have too many dims", EM_SHAPE(indices));
  int64_t R = weight->sizes[0], D = weight->sizes[1];
  if (padding_idx >= 0 && (padding_idx < base || padding_idx >= R + base))
    return em_set_error(
        EM_ERR_INDEX,
        "embedding: padding_idx %lld is out of range for %lld embeddings (expected %d..%lld, or negative for none)",
        (long long)padding_idx, (long long)R, base, (long long)(R - 1 + base));
  int64_t L = em_tensor_numel(indices), shape[EM_MAX_DIMS];
  for (int d = 0; d < indices->ndim; d++) shape[d] = indices->sizes[d];
  shape[indices->ndim] = D;
  em_tensor *flat = NULL, *rows = NULL;
  if (!(st = nn_reshaped(&flat, indices, 1, &L)) &&
      !(st = rename_index_error(em_index_select(&rows, weight, 0, flat, base), op, R)))
    st = em_reshape(out, rows, indices->ndim + 1, shape);
  const em_tensor *in[1] = {weight};
  if (!st && ag_any_requires_grad(1, in)) {
    em_node *n = sparse ? ag_node_new("EmbeddingSparseBackward", nn_embedding_sparse_backward, 1, in, 1)
                        : ag_node_new("EmbeddingBackward", embedding_backward, 1, in, 1);
    if (n) {
      n->i[0] = padding_idx;
      n->i[1] = base;
      if ((st = ag_node_save(n, 0, flat))) {
        ag_node_release(n);
        n = NULL;
      }
    }
    st = ag_finish_record(out, n);
  }
  em_tensor_release(flat);
  em_tensor_release(rows);
  return st;
}

/* ---- embedding_bag ---- */

static em_status embedding_bag_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  const em_tensor *w = n->saved[0], *idx = n->saved[1], *off = n->saved[2], *psw = n->saved[3], *argmax = n->saved[4];
  int mode = (int)n->i[0], base = (int)n->i[1];
  em_tensor *gout = NULL, *gw = NULL, *gpsw = NULL;
  em_status st = nn_contiguous(&gout, go[0]);
  if (!st && em_node_needs_input_grad(n, 0)) st = em_empty(&gw, 2, w->sizes, w->dtype, w->storage->device);
  if (!st && em_node_needs_input_grad(n, 1)) st = em_empty(&gpsw, 1, idx->sizes, w->dtype, w->storage->device);
  const em_backend *be = st ? NULL : nn_backend("embedding_bag", w);
  if (!st && !be) st = em_last_status();
  if (!st) st = be->embedding_bag_backward(gw, gpsw, gout, w, idx, off, psw, argmax, mode, base);
  if (!st) {
    gi[0] = gw;
    gw = NULL;
    st = nn_set_grad(n, 1, gpsw, &gi[1]);
    gpsw = NULL;
  }
  em_tensor *tmp[] = {gout, gw, gpsw};
  nn_release(3, tmp);
  return st;
}

em_status em_nn_embedding_bag(em_tensor **out, const em_tensor *weight, const em_tensor *indices,
                              const em_tensor *offsets, em_bag_mode mode, const em_tensor *per_sample_weights,
                              int base) {
  return em_nn_embedding_bag_ex(out, weight, indices, offsets, mode, per_sample_weights, -1, 0, 0, base);
}

em_status em_nn_embedding_bag_ex(em_tensor **out, const em_tensor *weight, const em_tensor *indices,
                                 const em_tensor *offsets, em_bag_mode mode, const em_tensor *per_sample_weights,
                                 int64_t padding_idx, int include_last_offset, int sparse, int base) {
  const char *op = "embedding_bag";
  const em_tensor *psw = per_sample_weights;
  em_status st;
  if ((st = nn_check_out(op, out)) || (st = nn_check_float(op, weight, "weight")) ||
      (st = nn_check_index(op, indices, "indices")) || (offsets && (st = nn_check_index(op, offsets, "offsets"))))
    return st;
  if (weight->ndim != 2)
    return em_set_error(EM_ERR_SHAPE, "embedding_bag: expected a 2-d weight [num_embeddings, dim], got shape %s",
                        EM_SHAPE(weight));
  if (mode != EM_BAG_SUM && mode != EM_BAG_MEAN && mode != EM_BAG_MAX)
    return em_set_error(EM_ERR_ARGUMENT, "embedding_bag: unknown mode %d (expected sum, mean or max)", (int)mode);
  if (indices->ndim == 2 && offsets)
    return em_set_error(EM_ERR_ARGUMENT, "embedding_bag: 2-d indices %s make one bag per row; offsets must be nil",
                        EM_SHAPE(indices));
  if (indices->ndim == 1 && !offsets)
    return em_set_error(EM_ERR_ARGUMENT, "embedding_bag: 1-d indices %s need offsets (the start of each bag)",
                        EM_SHAPE(indices));
  if (indices->ndim != 1 && indices->ndim != 2)
    return em_set_error(EM_ERR_SHAPE,
                        "embedding_bag: expected 1-d indices with offsets or 2-d indices [B, L], got shape %s",
                        EM_SHAPE(indices));
  if (offsets && offsets->ndim != 1)
    return em_set_error(EM_ERR_SHAPE, "embedding_bag: expected 1-d offsets, got shape %s", EM_SHAPE(offsets));
  if ((st = nn_check_device(op, indices, "indices", weight, "weight")) ||
      (st = nn_check_device(op, offsets, "offsets", weight, "weight")))
    return st;
  if (psw) {
    if ((st = nn_check_like(op, psw, "per_sample_weights", weight))) return st;
    if (mode != EM_BAG_SUM)
      return em_set_error(EM_ERR_ARGUMENT, "embedding_bag: per_sample_weights are only supported with mode sum");
    if (psw->ndim != indices->ndim || memcmp(psw->sizes, indices->sizes, sizeof(int64_t) * indices->ndim))
      return em_set_error(EM_ERR_SHAPE, "embedding_bag: per_sample_weights of shape %s must have the indices' shape %s",
                          EM_SHAPE(psw), EM_SHAPE(indices));
  }
  if (padding_idx >= 0 && (padding_idx < base || padding_idx >= weight->sizes[0] + base))
    return em_set_error(
        EM_ERR_INDEX,
        "embedding_bag: padding_idx %lld is out of range for %lld embeddings (expected %d..%lld, or negative for none)",
        (long long)padding_idx, (long long)weight->sizes[0], base, (long long)(weight->sizes[0] - 1 + base));
  const em_backend *be = nn_backend(op, weight);
  if (!be) return em_last_status();
  int64_t L = em_tensor_numel(indices), B = offsets ? offsets->sizes[0] : indices->sizes[0];
  int64_t oshape[2] = {B, weight->sizes[1]};
  em_tensor *idx = NULL, *off = NULL, *pswc = NULL, *wc = NULL, *argmax = NULL;
  if ((st = nn_reshaped(&idx, indices, 1, &L)) || (st = nn_contiguous(&wc, weight))) goto done;
  if (psw && (st = nn_reshaped(&pswc, psw, 1, &L))) goto done;
  if (offsets) {
    st = em_to(&off, offsets, EM_INT64, offsets->storage->device);
    if (!st && !em_tensor_is_contiguous(off)) {
      em_tensor *c = NULL;
      st = em_contiguous(&c, off);
      em_tensor_release(off);
      off = c;
    }
  } else { /* row b of a 2-d input is the bag starting at b * L */
    st = em_arange(&off, 0, (double)L, (double)(indices->sizes[1] ? indices->sizes[1] : 1), EM_INT64,
                   weight->storage->device);
    if (!st && off->sizes[0] != B) { /* rows of length 0: B empty bags */
      em_tensor_release(off);
      off = NULL;
      st = em_zeros(&off, 1, &B, EM_INT64, weight->storage->device);
    }
  }
  if (st) goto done;
  if (offsets && include_last_offset && (st = nn_bag_last_offset(&idx, &off, &pswc))) goto done;
  if (padding_idx >= 0 && (st = nn_bag_drop_padding(&idx, &off, &pswc, padding_idx))) goto done;
  oshape[0] = off->sizes[0];
  if (mode == EM_BAG_MAX && (st = em_empty(&argmax, 2, oshape, EM_INT64, weight->storage->device))) goto done;
  if ((st = em_empty(out, 2, oshape, weight->dtype, weight->storage->device))) goto done;
  if ((st = be->embedding_bag(*out, argmax, wc, idx, off, pswc, (int)mode, base))) {
    em_tensor_release(*out);
    *out = NULL;
    goto done;
  }
  const em_tensor *in[2] = {weight, psw};
  if (ag_any_requires_grad(2, in)) {
    em_node *n = sparse ? ag_node_new("EmbeddingBagSparseBackward", nn_embedding_bag_sparse_backward, 2, in, 1)
                        : ag_node_new("EmbeddingBagBackward", embedding_bag_backward, 2, in, 1);
    if (n) {
      n->i[0] = mode;
      n->i[1] = base;
      n->i[2] = -1; /* the padding index is out of the bags already */
      if ((st = ag_node_save(n, 0, wc)) || (st = ag_node_save(n, 1, idx)) || (st = ag_node_save(n, 2, off)) ||
          (st = ag_node_save(n, 3, pswc)) || (st = ag_node_save(n, 4, argmax))) {
        ag_node_release(n);
        n = NULL;
      }
    }
    st = ag_finish_record(out, n);
  }
done:;
  em_tensor *tmp[] = {idx, off, pswc, wc, argmax};
  nn_release(5, tmp);
  return st;
}
