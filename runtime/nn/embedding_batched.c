/* embedding_batched.c - table-batched embedding bags (ember/nn.h em_nn_embedding_bags_batched):
 * n tables stored one after another in one weight [sum of rows, D], looked up in one call.
 *
 * A recommendation model looks up a few rows in each of tens of tables per step; one call
 * per table pays the per-op costs (checks, a graph node, an output, a sparse gradient to
 * sort and an optimizer update) tens of times for a few kilobytes of work each. Here the
 * tables' bags are renumbered into one lookup over the shared weight (table t's row r is
 * row row_base[t] + r), so the forward, the row-sparse gradient and the optimizer's update
 * happen once per step, as FBGEMM's table-batched embeddings do. The result is [n * B, D],
 * table after table, so that table t's [B, D] is a contiguous slice. */
#include <stdlib.h>
#include "nn_impl.h"

static const int64_t *ptr64(const em_tensor *t) { return (const int64_t *)em_tensor_ptr(t); }

/* indices[t] (int64, contiguous CPU) as 0-based rows of the shared weight; offsets[t] the
 * 0-based start of each of the B bags in it (NULL: 2-d indices [B, L]). Checks every row
 * against its own table's size: a row past table t must not read table t + 1. */
static em_status renumber(const char *op, int n, em_tensor *const *idx, em_tensor *const *off, const int64_t *rows,
                          int base, int64_t B, int64_t *gidx, int64_t *goff) {
  int64_t at = 0, first = 0;
  for (int t = 0; t < n; t++) {
    const int64_t *ix = ptr64(idx[t]);
    int64_t L = em_tensor_numel(idx[t]);
    for (int64_t i = 0; i < L; i++) {
      int64_t r = ix[i] - base;
      if (r < 0 || r >= rows[t])
        return em_set_error(EM_ERR_INDEX, "%s: table %d: index %lld is out of range for %lld rows (expected %d..%lld)",
                            op, t + base, (long long)ix[i], (long long)rows[t], base, (long long)(rows[t] - 1 + base));
      gidx[at + i] = first + r;
    }
    if (off[t]) {
      const int64_t *o = ptr64(off[t]);
      for (int64_t b = 0; b < B; b++) {
        int64_t s = o[b] - base, prev = b ? o[b - 1] - base : 0;
        if ((b == 0 && s != 0) || s < prev || s > L)
          return em_set_error(EM_ERR_INDEX,
                              "%s: table %d: offsets[%lld] = %lld, expected bag starts from %d rising to at most %lld",
                              op, t + base, (long long)(b + base), (long long)o[b], base, (long long)(L + base));
        goff[t * B + b] = at + s;
      }
    } else {
      int64_t per = B ? L / B : 0;
      for (int64_t b = 0; b < B; b++) goff[t * B + b] = at + b * per;
    }
    at += L, first += rows[t];
  }
  return EM_OK;
}

em_status em_nn_embedding_bags_batched(em_tensor **out, const em_tensor *weight, int n, em_tensor *const *indices,
                                       em_tensor *const *offsets, const int64_t *rows, em_bag_mode mode, int sparse,
                                       int base) {
  const char *op = "embedding_bags_batched";
  em_status st;
  if ((st = nn_check_out(op, out)) || (st = nn_check_float(op, weight, "weight"))) return st;
  if (n < 1 || !indices || !rows)
    return em_set_error(EM_ERR_ARGUMENT, "%s: expected at least one table's indices and sizes, got %d", op, n);
  if (weight->ndim != 2)
    return em_set_error(EM_ERR_SHAPE, "%s: expected a 2-d weight [rows of all tables, dim], got shape %s", op,
                        EM_SHAPE(weight));
  if (weight->storage->device.type != EM_CPU)
    return em_set_error(EM_ERR_UNSUPPORTED,
                        "%s: the weight is on %s; table-batched bags run on the CPU only for now (on a GPU, one "
                        "nn.EmbeddingBag per table)", op, weight->storage->device.type == EM_CUDA ? "cuda" : "another device");
  int64_t total = 0, B = -1, L = 0;
  for (int t = 0; t < n; t++) {
    const em_tensor *ix = indices[t], *of = offsets ? offsets[t] : NULL;
    if ((st = nn_check_index(op, ix, "indices"))) return st;
    if (rows[t] < 1) return em_set_error(EM_ERR_ARGUMENT, "%s: table %d has %lld rows", op, t + base, (long long)rows[t]);
    if (ix->storage->device.type != EM_CPU)
      return em_set_error(EM_ERR_UNSUPPORTED, "%s: indices must be on the CPU", op);
    int64_t b;
    if (of) {
      if ((st = nn_check_index(op, of, "offsets"))) return st;
      if (ix->ndim != 1 || of->ndim != 1)
        return em_set_error(EM_ERR_SHAPE, "%s: table %d: expected 1-d indices and offsets, got shapes %s and %s", op,
                            t + base, EM_SHAPE(ix), EM_SHAPE(of));
      b = of->sizes[0];
    } else {
      if (ix->ndim != 2)
        return em_set_error(EM_ERR_SHAPE, "%s: table %d: 2-d indices [B, L] without offsets, got shape %s", op,
                            t + base, EM_SHAPE(ix));
      b = ix->sizes[0];
    }
    if (B >= 0 && b != B)
      return em_set_error(EM_ERR_SHAPE, "%s: table %d has %lld bags, table %d has %lld (one bag per sample)", op,
                          t + base, (long long)b, base, (long long)B);
    B = b, total += rows[t], L += em_tensor_numel(ix);
  }
  if (total != weight->sizes[0])
    return em_set_error(EM_ERR_SHAPE, "%s: the tables hold %lld rows in all, the weight %lld", op, (long long)total,
                        (long long)weight->sizes[0]);
  /* int64, contiguous copies where needed (the pipeline delivers them so: no copy) */
  em_tensor **ix = calloc((size_t)n * 2, sizeof *ix), **of = ix ? ix + n : NULL;
  em_tensor *gidx = NULL, *goff = NULL;
  int64_t nb = (int64_t)n * B;
  if (!ix) return em_set_error(EM_ERR_MEMORY, "%s: out of memory", op);
  for (int t = 0; t < n && !st; t++) {
    em_tensor *c = NULL;
    if (!(st = em_to(&c, indices[t], EM_INT64, indices[t]->storage->device))) st = nn_contiguous(&ix[t], c);
    em_tensor_release(c);
    if (!st && offsets && offsets[t]) {
      c = NULL;
      if (!(st = em_to(&c, offsets[t], EM_INT64, offsets[t]->storage->device))) st = nn_contiguous(&of[t], c);
      em_tensor_release(c);
    }
  }
  if (!st) st = em_empty(&gidx, 1, &L, EM_INT64, weight->storage->device);
  if (!st) st = em_empty(&goff, 1, &nb, EM_INT64, weight->storage->device);
  if (!st)
    st = renumber(op, n, ix, of, rows, base, B, (int64_t *)em_tensor_ptr(gidx), (int64_t *)em_tensor_ptr(goff));
  if (!st) st = em_nn_embedding_bag_ex(out, weight, gidx, goff, mode, NULL, -1, 0, sparse, 0);
  for (int t = 0; t < 2 * n; t++) em_tensor_release(ix[t]);
  free(ix);
  em_tensor_release(gidx);
  em_tensor_release(goff);
  return st;
}
