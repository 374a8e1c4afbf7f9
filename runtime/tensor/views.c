/* views.c - operations that return a new header over the same storage. */
#include <string.h>
#include "backend.h"
#include "plugins/plugin_api.h"

static em_status make_view(em_tensor **out, const em_tensor *a, int ndim, const int64_t *sizes, const int64_t *strides,
                           int64_t offset) {
  *out = tn_tensor_wrap(a->storage, a->dtype, ndim, sizes, strides, offset);
  return *out ? EM_OK : em_last_status();
}

/* Strides for viewing a as `sizes` without copying, if that is possible (the algorithm
 * PyTorch's computeStride uses: match groups of dims whose memory is contiguous). */
static int view_strides(const em_tensor *a, int ndim, const int64_t *sizes, int64_t *strides) {
  int64_t numel = em_tensor_numel(a);
  if (numel == 0 || a->ndim == 0) {
    emp_contiguous_strides(ndim, sizes, strides);
    return 1;
  }
  int view_d = ndim - 1;
  int64_t chunk_base_stride = a->strides[a->ndim - 1];
  int64_t tensor_numel = 1, view_numel = 1;
  for (int d = a->ndim - 1; d >= 0; d--) {
    tensor_numel *= a->sizes[d];
    if (d == 0 || (a->sizes[d - 1] != 1 && a->strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || sizes[view_d] == 1)) {
        strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= sizes[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return 0;
      if (d > 0) {
        chunk_base_stride = a->strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

static em_status infer_sizes(const char *op, const em_tensor *a, int ndim, const int64_t *in, int64_t *sizes) {
  if (ndim < 0 || ndim > EM_MAX_DIMS)
    return em_set_error(EM_ERR_SHAPE, "%s: %d dims requested, ember supports 0..%d", op, ndim, EM_MAX_DIMS);
  int infer = -1;
  int64_t known = 1, numel = em_tensor_numel(a), nonzero = 1;
  for (int d = 0; d < ndim; d++) {
    sizes[d] = in[d];
    if (in[d] == -1) {
      if (infer >= 0)
        return em_set_error(EM_ERR_SHAPE, "%s: only one dim can be -1, got shape %s", op, tn_shape_str(ndim, in));
      infer = d;
    } else if (in[d] < 0) {
      return em_set_error(EM_ERR_SHAPE, "%s: invalid size %lld in shape %s", op, (long long)in[d],
                          tn_shape_str(ndim, in));
    } else if (in[d]) {
      /* a zero makes the element count 0 whatever the other sizes, but strides still
       * multiply them: bound their product as empty() does */
      if (nonzero > INT64_MAX / 16 / in[d])
        return em_set_error(EM_ERR_SHAPE,
                            "%s: shape %s has too many elements (the product of its non-zero sizes "
                            "must stay below 2^59)",
                            op, tn_shape_str(ndim, in));
      nonzero *= in[d];
      known *= in[d];
    } else {
      known = 0;
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known)
      return em_set_error(EM_ERR_SHAPE, "%s: shape %s is invalid for a tensor of %lld elements (shape %s)", op,
                          tn_shape_str(ndim, in), (long long)numel, EM_SHAPE(a));
    sizes[infer] = numel / known;
    known = numel;
  }
  if (known != numel)
    return em_set_error(EM_ERR_SHAPE, "%s: shape %s is invalid for a tensor of %lld elements (shape %s)", op,
                        tn_shape_str(ndim, in), (long long)numel, EM_SHAPE(a));
  return EM_OK;
}

em_status em_view(em_tensor **out, const em_tensor *a, int ndim, const int64_t *in_sizes) {
  em_status st = tn_check_tensor("view", a, "tensor");
  if (st) return st;
  int64_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS];
  if ((st = infer_sizes("view", a, ndim, in_sizes, sizes))) return st;
  if (!view_strides(a, ndim, sizes, strides))
    return em_set_error(EM_ERR_SHAPE,
                        "view: a tensor of shape %s with these strides cannot be viewed as %s; call contiguous() "
                        "first or use reshape()",
                        EM_SHAPE(a), tn_shape_str(ndim, sizes));
  return make_view(out, a, ndim, sizes, strides, a->offset);
}

em_status em_reshape(em_tensor **out, const em_tensor *a, int ndim, const int64_t *in_sizes) {
  em_status st = tn_check_tensor("reshape", a, "tensor");
  if (st) return st;
  int64_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS];
  if ((st = infer_sizes("reshape", a, ndim, in_sizes, sizes))) return st;
  if (view_strides(a, ndim, sizes, strides)) return make_view(out, a, ndim, sizes, strides, a->offset);
  em_tensor *c = NULL;
  if ((st = em_clone(&c, a))) return st;
  st = make_view(out, c, ndim, sizes, NULL, 0);
  em_tensor_release(c);
  return st;
}

em_status em_narrow(em_tensor **out, const em_tensor *a, int dim, int64_t start, int64_t length) {
  em_status st = tn_check_tensor("narrow", a, "tensor");
  if (st || (st = tn_check_dim("narrow", &dim, a->ndim))) return st;
  if (a->ndim == 0) return em_set_error(EM_ERR_SHAPE, "narrow: cannot narrow a 0-d tensor");
  int64_t size = a->sizes[dim];
  if (start < 0) start += size;
  if (start < 0 || length < 0 || start + length > size)
    return em_set_error(EM_ERR_INDEX, "narrow: start %lld and length %lld out of range for dim %d of size %lld",
                        (long long)start, (long long)length, dim, (long long)size);
  int64_t sizes[EM_MAX_DIMS];
  memcpy(sizes, a->sizes, sizeof sizes);
  sizes[dim] = length;
  return make_view(out, a, a->ndim, sizes, a->strides, a->offset + start * a->strides[dim]);
}

em_status em_slice(em_tensor **out, const em_tensor *a, int dim, int64_t start, int64_t end, int64_t step) {
  em_status st = tn_check_tensor("slice", a, "tensor");
  if (st) return st;
  if (a->ndim == 0) return em_set_error(EM_ERR_SHAPE, "slice: cannot slice a 0-d tensor");
  if ((st = tn_check_dim("slice", &dim, a->ndim))) return st;
  if (step <= 0)
    return em_set_error(EM_ERR_ARGUMENT, "slice: step must be positive, got %lld (negative steps are not supported; use flip)",
                        (long long)step);
  int64_t size = a->sizes[dim];
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = start < 0 ? 0 : start > size ? size : start;
  end = end < start ? start : end > size ? size : end;
  int64_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS];
  memcpy(sizes, a->sizes, sizeof sizes);
  memcpy(strides, a->strides, sizeof strides);
  sizes[dim] = (end - start + step - 1) / step;
  strides[dim] = a->strides[dim] * step;
  return make_view(out, a, a->ndim, sizes, strides, a->offset + start * a->strides[dim]);
}

em_status em_select(em_tensor **out, const em_tensor *a, int dim, int64_t index) {
  em_status st = tn_check_tensor("select", a, "tensor");
  if (st) return st;
  if (a->ndim == 0) return em_set_error(EM_ERR_SHAPE, "select: cannot index a 0-d tensor");
  if ((st = tn_check_dim("select", &dim, a->ndim))) return st;
  int64_t size = a->sizes[dim];
  if (index < -size || index >= size)
    return em_set_error(EM_ERR_INDEX, "select: index %lld out of range for dim %d of size %lld", (long long)index, dim,
                        (long long)size);
  if (index < 0) index += size;
  int64_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS];
  int n = 0;
  for (int d = 0; d < a->ndim; d++) {
    if (d == dim) continue;
    sizes[n] = a->sizes[d];
    strides[n++] = a->strides[d];
  }
  return make_view(out, a, n, sizes, strides, a->offset + index * a->strides[dim]);
}

em_status em_transpose(em_tensor **out, const em_tensor *a, int dim0, int dim1) {
  em_status st = tn_check_tensor("transpose", a, "tensor");
  if (st || (st = tn_check_dim("transpose", &dim0, a->ndim)) || (st = tn_check_dim("transpose", &dim1, a->ndim)))
    return st;
  int64_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS];
  memcpy(sizes, a->sizes, sizeof sizes);
  memcpy(strides, a->strides, sizeof strides);
  if (a->ndim) {
    sizes[dim0] = a->sizes[dim1], sizes[dim1] = a->sizes[dim0];
    strides[dim0] = a->strides[dim1], strides[dim1] = a->strides[dim0];
  }
  return make_view(out, a, a->ndim, sizes, strides, a->offset);
}

em_status em_permute(em_tensor **out, const em_tensor *a, int ndim, const int *dims) {
  em_status st = tn_check_tensor("permute", a, "tensor");
  if (st) return st;
  if (ndim != a->ndim)
    return em_set_error(EM_ERR_SHAPE, "permute: got %d dims for a %d-d tensor of shape %s", ndim, a->ndim, EM_SHAPE(a));
  int64_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS];
  int seen[EM_MAX_DIMS] = {0};
  for (int i = 0; i < ndim; i++) {
    int d = dims[i];
    if ((st = tn_check_dim("permute", &d, ndim))) return st;
    if (seen[d]++) return em_set_error(EM_ERR_ARGUMENT, "permute: dim %d appears twice", dims[i]);
    sizes[i] = a->sizes[d];
    strides[i] = a->strides[d];
  }
  return make_view(out, a, ndim, sizes, strides, a->offset);
}

em_status em_expand(em_tensor **out, const em_tensor *a, int ndim, const int64_t *in_sizes) {
  em_status st = tn_check_tensor("expand", a, "tensor");
  if (st) return st;
  if (ndim > EM_MAX_DIMS) return em_set_error(EM_ERR_SHAPE, "expand: %d dims, ember supports %d", ndim, EM_MAX_DIMS);
  if (ndim < a->ndim)
    return em_set_error(EM_ERR_SHAPE, "expand: the target shape %s has fewer dims than the tensor (shape %s)",
                        tn_shape_str(ndim, in_sizes), EM_SHAPE(a));
  int64_t sizes[EM_MAX_DIMS], nonzero = 1;
  for (int i = 0; i < ndim; i++) {
    int j = i - (ndim - a->ndim);
    sizes[i] = in_sizes[i] == -1 && j >= 0 ? a->sizes[j] : in_sizes[i];
    if (sizes[i] < 0) return em_set_error(EM_ERR_SHAPE, "expand: invalid size -1 for a new leading dim");
    if (sizes[i] && nonzero > INT64_MAX / 16 / sizes[i])
      return em_set_error(EM_ERR_SHAPE,
                          "expand: shape %s has too many elements (the product of its non-zero sizes "
                          "must stay below 2^59)",
                          tn_shape_str(ndim, in_sizes));
    if (sizes[i]) nonzero *= sizes[i];
  }
  return emp_broadcast_to("expand", out, a, ndim, sizes);
}

em_status em_squeeze(em_tensor **out, const em_tensor *a, int dim, int all_dims) {
  em_status st = tn_check_tensor("squeeze", a, "tensor");
  if (st) return st;
  if (!all_dims && (st = tn_check_dim("squeeze", &dim, a->ndim))) return st;
  int64_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS];
  int n = 0;
  for (int d = 0; d < a->ndim; d++) {
    if (a->sizes[d] == 1 && (all_dims || d == dim)) continue;
    sizes[n] = a->sizes[d];
    strides[n++] = a->strides[d];
  }
  return make_view(out, a, n, sizes, strides, a->offset);
}

em_status em_unsqueeze(em_tensor **out, const em_tensor *a, int dim) {
  em_status st = tn_check_tensor("unsqueeze", a, "tensor");
  if (st) return st;
  if (a->ndim >= EM_MAX_DIMS) return em_set_error(EM_ERR_SHAPE, "unsqueeze: tensor already has %d dims", a->ndim);
  int n = a->ndim + 1;
  if (dim < -n || dim >= n)
    return em_set_error(EM_ERR_INDEX, "unsqueeze: dim %d out of range for a %d-d result (expected %d..%d)", dim, n, -n,
                        n - 1);
  if (dim < 0) dim += n;
  int64_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS];
  for (int d = 0, s = 0; d < n; d++) {
    if (d == dim) {
      sizes[d] = 1;
      strides[d] = s < a->ndim ? a->strides[s] * a->sizes[s] : 1;
    } else {
      sizes[d] = a->sizes[s];
      strides[d] = a->strides[s++];
    }
  }
  return make_view(out, a, n, sizes, strides, a->offset);
}

em_status em_flatten(em_tensor **out, const em_tensor *a, int start_dim, int end_dim) {
  em_status st = tn_check_tensor("flatten", a, "tensor");
  if (st || (st = tn_check_dim("flatten", &start_dim, a->ndim)) || (st = tn_check_dim("flatten", &end_dim, a->ndim)))
    return st;
  if (a->ndim == 0) {
    int64_t one = 1;
    return em_reshape(out, a, 1, &one);
  }
  if (start_dim > end_dim)
    return em_set_error(EM_ERR_ARGUMENT, "flatten: start_dim %d comes after end_dim %d", start_dim, end_dim);
  int64_t sizes[EM_MAX_DIMS];
  int n = 0;
  for (int d = 0; d < a->ndim; d++) {
    if (d > start_dim && d <= end_dim) sizes[n - 1] *= a->sizes[d];
    else sizes[n++] = a->sizes[d];
  }
  return em_reshape(out, a, n, sizes);
}

em_status em_as_strided(em_tensor **out, const em_tensor *a, int ndim, const int64_t *sizes, const int64_t *strides,
                        int64_t offset) {
  em_status st = tn_check_tensor("as_strided", a, "tensor");
  if (st) return st;
  if (ndim < 0 || ndim > EM_MAX_DIMS) return em_set_error(EM_ERR_SHAPE, "as_strided: %d dims", ndim);
  /* Refuse views that reach outside the storage: that would read foreign memory. */
  int64_t last = offset, nonzero = 1, reach;
  for (int d = 0; d < ndim; d++) {
    if (sizes[d] < 0 || strides[d] < 0)
      return em_set_error(EM_ERR_ARGUMENT, "as_strided: negative size or stride at dim %d", d);
    if (sizes[d] && nonzero > INT64_MAX / 16 / sizes[d]) /* zero strides let any size through the bound below */
      return em_set_error(EM_ERR_SHAPE,
                          "as_strided: shape %s has too many elements (the product of its non-zero "
                          "sizes must stay below 2^59)",
                          tn_shape_str(ndim, sizes));
    if (sizes[d]) nonzero *= sizes[d];
    if (sizes[d] == 0) last = -1;
    if (last >= 0 &&
        (__builtin_mul_overflow(sizes[d] - 1, strides[d], &reach) || __builtin_add_overflow(last, reach, &last)))
      return em_set_error(EM_ERR_INDEX, "as_strided: size %lld with stride %lld at dim %d reaches past 2^63 elements",
                          (long long)sizes[d], (long long)strides[d], d);
  }
  int64_t capacity = (int64_t)(a->storage->nbytes / em_dtype_size(a->dtype));
  if (offset < 0 || last >= capacity)
    return em_set_error(EM_ERR_INDEX, "as_strided: the view reaches element %lld but the storage holds %lld",
                        (long long)last, (long long)capacity);
  return make_view(out, a, ndim, sizes, strides, offset);
}
