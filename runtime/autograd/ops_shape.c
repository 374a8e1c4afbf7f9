/* ops_shape.c - differentiable views, copies, concatenation and indexing. */
#include <stdlib.h>
#include <string.h>
#include "autograd_impl.h"

#define RECORDING(name, nin, ...)                \
  const em_tensor *in_[nin] = {__VA_ARGS__};     \
  bool record_ = ag_any_requires_grad(nin, in_); \
  if (record_ && *out)                           \
    return em_set_error(EM_ERR_ARGUMENT, "%s: an output tensor cannot be given while recording gradients", name);

/* ---- views whose gradient is the gradient reshaped back (view, reshape, flatten,
 * squeeze, unsqueeze) or cast back (to, contiguous) or summed back (expand) ---- */

static em_status reshape_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  em_tensor *r = NULL;
  em_status st = em_reshape(&r, go[0], n->ndims[0], n->shapes[0]);
  return st ? st : ag_finish_input_grad(n, 0, r, &gi[0]);
}

static em_status identity_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  em_tensor_retain(go[0]);
  return ag_finish_input_grad(n, 0, go[0], &gi[0]); /* sums broadcast dims, casts dtype */
}

static em_status record_simple(em_tensor **out, const em_tensor *a, const char *name, em_backward_fn fn) {
  const em_tensor *in[1] = {a};
  return ag_finish_record(out, ag_node_new(name, fn, 1, in, 1));
}

#define RESHAPE_LIKE(fname, name, call)                   \
  {                                                       \
    RECORDING(name, 1, a)                                 \
    em_status st = (call);                                \
    if (st || !record_) return st;                        \
    return record_simple(out, a, name, reshape_backward); \
  }

em_status em_ag_view(em_tensor **out, const em_tensor *a, int ndim, const int64_t *sizes)
    RESHAPE_LIKE(view, "ViewBackward", em_view(out, a, ndim, sizes)) em_status
    em_ag_reshape(em_tensor **out, const em_tensor *a, int ndim, const int64_t *sizes)
        RESHAPE_LIKE(reshape, "ReshapeBackward", em_reshape(out, a, ndim, sizes)) em_status
    em_ag_flatten(em_tensor **out, const em_tensor *a, int start_dim, int end_dim)
        RESHAPE_LIKE(flatten, "FlattenBackward", em_flatten(out, a, start_dim, end_dim)) em_status
    em_ag_squeeze(em_tensor **out, const em_tensor *a, int dim, int all_dims)
        RESHAPE_LIKE(squeeze, "SqueezeBackward", em_squeeze(out, a, dim, all_dims)) em_status
    em_ag_unsqueeze(em_tensor **out, const em_tensor *a, int dim)
        RESHAPE_LIKE(unsqueeze, "UnsqueezeBackward", em_unsqueeze(out, a, dim))

            em_status em_ag_expand(em_tensor **out, const em_tensor *a, int ndim, const int64_t *sizes) {
  RECORDING("expand", 1, a)
  em_status st = em_expand(out, a, ndim, sizes);
  if (st || !record_) return st;
  return record_simple(out, a, "ExpandBackward", identity_backward);
}

em_status em_ag_contiguous(em_tensor **out, const em_tensor *a) {
  RECORDING("contiguous", 1, a)
  em_status st = em_contiguous(out, a);
  if (st || !record_) return st;
  if (*out == a) return EM_OK; /* already contiguous: the same tensor, same history */
  return record_simple(out, a, "ContiguousBackward", identity_backward);
}

em_status em_ag_to(em_tensor **out, const em_tensor *a, em_dtype dtype, em_device device) {
  RECORDING("to", 1, a)
  if (record_ && !em_dtype_is_floating(dtype)) record_ = false; /* integer results carry no gradient */
  em_status st = em_to(out, a, dtype, device);
  if (st || !record_ || *out == a) return st;
  return record_simple(out, a, "ToCopyBackward", identity_backward);
}

/* ---- narrow / select: the gradient goes into a zero tensor's slice ---- */

static em_status slice_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  em_tensor *z = NULL, *slice = NULL;
  em_status st = em_zeros(&z, n->ndims[0], n->shapes[0], go[0]->dtype, go[0]->storage->device);
  if (!st) {
    int dim = (int)n->i[1];
    st = n->i[0] == 2 ? em_slice(&slice, z, dim, n->i[2], n->i[3], n->i[4])
         : n->i[0]    ? em_select(&slice, z, dim, n->i[2])
                      : em_narrow(&slice, z, dim, n->i[2], n->i[3]);
  }
  if (!st) st = em_copy_(slice, go[0]);
  em_tensor_release(slice);
  if (st) {
    em_tensor_release(z);
    return st;
  }
  return ag_finish_input_grad(n, 0, z, &gi[0]);
}

em_status em_ag_narrow(em_tensor **out, const em_tensor *a, int dim, int64_t start, int64_t length) {
  RECORDING("narrow", 1, a)
  em_status st = em_narrow(out, a, dim, start, length);
  if (st || !record_) return st;
  em_node *n = ag_node_new("NarrowBackward", slice_backward, 1, in_, 1);
  if (n) {
    if (dim < 0) dim += a->ndim;
    if (start < 0) start += a->sizes[dim];
    n->i[0] = 0, n->i[1] = dim, n->i[2] = start, n->i[3] = length;
  }
  return ag_finish_record(out, n);
}

em_status em_ag_select(em_tensor **out, const em_tensor *a, int dim, int64_t index) {
  RECORDING("select", 1, a)
  em_status st = em_select(out, a, dim, index);
  if (st || !record_) return st;
  em_node *n = ag_node_new("SelectBackward", slice_backward, 1, in_, 1);
  if (n) {
    if (dim < 0) dim += a->ndim;
    if (index < 0) index += a->sizes[dim];
    n->i[0] = 1, n->i[1] = dim, n->i[2] = index;
  }
  return ag_finish_record(out, n);
}

em_status em_ag_slice(em_tensor **out, const em_tensor *a, int dim, int64_t start, int64_t end, int64_t step) {
  RECORDING("slice", 1, a)
  em_status st = em_slice(out, a, dim, start, end, step);
  if (st || !record_) return st;
  em_node *n = ag_node_new("SliceBackward", slice_backward, 1, in_, 1);
  if (n) { /* the same positions as the forward: start and end as given, normalised again */
    n->i[0] = 2, n->i[1] = dim < 0 ? dim + a->ndim : dim, n->i[2] = start, n->i[3] = end, n->i[4] = step;
  }
  return ag_finish_record(out, n);
}

/* ---- transpose / permute ---- */

static em_status permute_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  int inverse[EM_MAX_DIMS];
  for (int d = 0; d < n->ndims[0]; d++) inverse[n->i[d]] = d;
  em_tensor *r = NULL;
  em_status st = em_permute(&r, go[0], n->ndims[0], inverse);
  return st ? st : ag_finish_input_grad(n, 0, r, &gi[0]);
}

em_status em_ag_permute(em_tensor **out, const em_tensor *a, int ndim, const int *dims) {
  RECORDING("permute", 1, a)
  em_status st = em_permute(out, a, ndim, dims);
  if (st || !record_) return st;
  em_node *n = ag_node_new("PermuteBackward", permute_backward, 1, in_, 1);
  for (int d = 0; n && d < ndim; d++) n->i[d] = dims[d] < 0 ? dims[d] + ndim : dims[d];
  return ag_finish_record(out, n);
}

em_status em_ag_transpose(em_tensor **out, const em_tensor *a, int dim0, int dim1) {
  RECORDING("transpose", 1, a)
  em_status st = em_transpose(out, a, dim0, dim1);
  if (st || !record_) return st;
  em_node *n = ag_node_new("TransposeBackward", permute_backward, 1, in_, 1);
  if (n) {
    int nd = a->ndim;
    for (int d = 0; d < nd; d++) n->i[d] = d;
    if (nd) {
      if (dim0 < 0) dim0 += nd;
      if (dim1 < 0) dim1 += nd;
      n->i[dim0] = dim1, n->i[dim1] = dim0;
    }
  }
  return ag_finish_record(out, n);
}

/* ---- cat / stack: each input gets its slice of the gradient ---- */

typedef struct {
  int dim, stacked;
  int n;
  int64_t *lengths; /* along dim (1 each for stack) */
  em_dtype *dtypes;
} cat_ctx;

static void cat_release(em_node *n) {
  cat_ctx *c = n->ctx;
  if (!c) return;
  free(c->lengths);
  free(c->dtypes);
  free(c);
}

static em_status cat_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  cat_ctx *c = n->ctx;
  int64_t start = 0;
  for (int i = 0; i < c->n; i++) {
    int64_t len = c->lengths[i];
    if (em_node_needs_input_grad(n, i)) {
      em_tensor *slice = NULL, *cast = NULL;
      em_status st =
          c->stacked ? em_select(&slice, go[0], c->dim, start) : em_narrow(&slice, go[0], c->dim, start, len);
      if (!st) st = em_to(&cast, slice, c->dtypes[i], slice->storage->device);
      em_tensor_release(slice);
      if (st) return st;
      gi[i] = cast;
    }
    start += len;
  }
  return EM_OK;
}

static em_status record_cat(em_tensor **out, em_tensor *const *tensors, int n, int dim, int stacked) {
  em_node *node =
      ag_node_new(stacked ? "StackBackward" : "CatBackward", cat_backward, n, (const em_tensor *const *)tensors, 1);
  if (!node) return ag_finish_record(out, NULL);
  cat_ctx *c = calloc(1, sizeof *c);
  if (c) {
    c->lengths = calloc(n, sizeof *c->lengths);
    c->dtypes = calloc(n, sizeof *c->dtypes);
  }
  if (!c || !c->lengths || !c->dtypes) {
    if (c) free(c->lengths), free(c->dtypes), free(c);
    ag_node_release(node);
    em_set_error(EM_ERR_MEMORY, "cat: out of memory recording the graph");
    return ag_finish_record(out, NULL);
  }
  int nd = (*out)->ndim;
  c->dim = dim < 0 ? dim + nd : dim;
  c->stacked = stacked;
  c->n = n;
  for (int i = 0; i < n; i++) {
    /* legacy rule: empty 1-d inputs were skipped by cat and get no gradient slice */
    c->lengths[i] = stacked ? 1 : (tensors[i]->ndim == nd ? tensors[i]->sizes[c->dim] : 0);
    c->dtypes[i] = tensors[i]->dtype;
  }
  node->ctx = c;
  node->release_ctx = cat_release;
  return ag_finish_record(out, node);
}

em_status em_ag_cat(em_tensor **out, em_tensor *const *tensors, int n, int dim) {
  bool record = ag_any_requires_grad(n, (const em_tensor *const *)tensors);
  if (record && *out)
    return em_set_error(EM_ERR_ARGUMENT, "cat: an output tensor cannot be given while recording gradients");
  em_status st = em_cat(out, tensors, n, dim);
  if (st || !record) return st;
  return record_cat(out, tensors, n, dim, 0);
}

em_status em_ag_stack(em_tensor **out, em_tensor *const *tensors, int n, int dim) {
  bool record = ag_any_requires_grad(n, (const em_tensor *const *)tensors);
  if (record && *out)
    return em_set_error(EM_ERR_ARGUMENT, "stack: an output tensor cannot be given while recording gradients");
  em_status st = em_stack(out, tensors, n, dim);
  if (st || !record) return st;
  return record_cat(out, tensors, n, dim, 1);
}

/* ---- indexing ---- */

static em_status index_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  em_tensor *z = NULL;
  const em_tensor *index = n->saved[0];
  int dim = (int)n->i[1], base = (int)n->i[2];
  em_status st = em_zeros(&z, n->ndims[0], n->shapes[0], go[0]->dtype, go[0]->storage->device);
  if (!st) st = n->i[0] ? em_scatter_(z, dim, index, go[0], 1, base) : em_index_add_(z, dim, index, go[0], 1.0, base);
  if (st) {
    em_tensor_release(z);
    return st;
  }
  return ag_finish_input_grad(n, 0, z, &gi[0]);
}

static em_status record_index(em_tensor **out, const em_tensor *a, const em_tensor *index, int dim, int base,
                              int gather) {
  const em_tensor *in[1] = {a};
  em_node *n = ag_node_new(gather ? "GatherBackward" : "IndexSelectBackward", index_backward, 1, in, 1);
  if (n) {
    ag_node_save(n, 0, index);
    n->i[0] = gather;
    n->i[1] = dim < 0 ? dim + a->ndim : dim;
    n->i[2] = base;
  }
  return ag_finish_record(out, n);
}

em_status em_ag_index_select(em_tensor **out, const em_tensor *a, int dim, const em_tensor *index, int base) {
  RECORDING("index_select", 1, a)
  em_status st = em_index_select(out, a, dim, index, base);
  if (st || !record_) return st;
  return record_index(out, a, index, dim, base, 0);
}

em_status em_ag_gather(em_tensor **out, const em_tensor *a, int dim, const em_tensor *index, int base) {
  RECORDING("gather", 1, a)
  em_status st = em_gather(out, a, dim, index, base);
  if (st || !record_) return st;
  return record_index(out, a, index, dim, base, 1);
}

static em_status masked_fill_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  em_tensor *g = NULL;
  em_status st = em_clone(&g, go[0]);
  if (!st) st = em_masked_fill_(g, n->saved[0], 0.0);
  if (st) {
    em_tensor_release(g);
    return st;
  }
  return ag_finish_input_grad(n, 0, g, &gi[0]);
}

em_status em_ag_masked_fill(em_tensor **out, const em_tensor *a, const em_tensor *mask, double value) {
  RECORDING("masked_fill", 1, a)
  em_status st = em_clone(out, a);
  if (!st) st = em_masked_fill_(*out, mask, value);
  if (st) {
    em_tensor_release(*out);
    *out = NULL;
    return st;
  }
  if (!record_) return EM_OK;
  em_node *n = ag_node_new("MaskedFillBackward", masked_fill_backward, 1, in_, 1);
  if (n) ag_node_save(n, 0, mask);
  return ag_finish_record(out, n);
}
