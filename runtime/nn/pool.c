/* pool.c - max_pool2d, avg_pool2d and adaptive_avg_pool2d with PyTorch's output sizes
 * (ceil_mode, padding of at most half the dilated kernel, windows that must start inside
 * the input or its left padding). Inputs are [N, C, H, W] or unbatched [C, H, W]; the
 * backend pools every H x W plane (cpu/nn_pool.c). */
#include <limits.h>
#include "nn_impl.h"

/* The input as contiguous planes [P, H, W] (P = N * C, or C when unbatched). */
static em_status as_planes(const char *op, const em_tensor *x, em_tensor **planes) {
  em_status st = nn_check_float(op, x, "input");
  if (st) return st;
  if (x->ndim != 3 && x->ndim != 4)
    return em_set_error(EM_ERR_SHAPE, "%s: expected a 3-d [C, H, W] or 4-d [N, C, H, W] input, got shape %s", op,
                        EM_SHAPE(x));
  int64_t H = x->sizes[x->ndim - 2], W = x->sizes[x->ndim - 1];
  if (H < 1 || W < 1)
    return em_set_error(EM_ERR_SHAPE, "%s: the input of shape %s has an empty plane", op, EM_SHAPE(x));
  int64_t shape[3] = {em_tensor_numel(x) / (H * W), H, W};
  return nn_reshaped(planes, x, 3, shape);
}

/* The result's shape: x's with the last two dims replaced. */
static void out_shape(const em_tensor *x, int64_t oh, int64_t ow, int64_t *shape) {
  for (int d = 0; d < x->ndim - 2; d++) shape[d] = x->sizes[d];
  shape[x->ndim - 2] = oh;
  shape[x->ndim - 1] = ow;
}

static int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/* PyTorch's pooling_output_shape */
static int64_t pool_out(int64_t in, int k, int pad, int s, int dil, int ceil_mode) {
  int64_t out = floor_div(in + 2 * (int64_t)pad - (int64_t)dil * (k - 1) - 1 + (ceil_mode ? s - 1 : 0), s) + 1;
  if (ceil_mode && (out - 1) * s >= in + pad) out--; /* the last window must start inside */
  return out;
}

/* Checks the window and computes the output size. */
static em_status window(const char *op, const em_tensor *x, const em_pool2d_params *p, int64_t *oh, int64_t *ow) {
  const int *k = p->kernel, *s = p->stride, *pad = p->pad, *d = p->dilation;
  if (k[0] < 1 || k[1] < 1 || s[0] < 1 || s[1] < 1 || d[0] < 1 || d[1] < 1 || pad[0] < 0 || pad[1] < 0)
    return em_set_error(EM_ERR_ARGUMENT,
                        "%s: got kernel (%d, %d), stride (%d, %d), padding (%d, %d), dilation (%d, %d); expected "
                        "kernels, strides and dilations >= 1 and paddings >= 0",
                        op, k[0], k[1], s[0], s[1], pad[0], pad[1], d[0], d[1]);
  for (int i = 0; i < 2; i++)
    if (pad[i] > ((k[i] - 1) * d[i] + 1) / 2)
      return em_set_error(EM_ERR_ARGUMENT,
                          "%s: padding %d is more than half the effective kernel size %d (kernel (%d, %d), dilation "
                          "(%d, %d), padding (%d, %d))",
                          op, pad[i], (k[i] - 1) * d[i] + 1, k[0], k[1], d[0], d[1], pad[0], pad[1]);
  int64_t H = x->sizes[x->ndim - 2], W = x->sizes[x->ndim - 1];
  *oh = pool_out(H, k[0], pad[0], s[0], d[0], p->ceil_mode);
  *ow = pool_out(W, k[1], pad[1], s[1], d[1], p->ceil_mode);
  if (*oh < 1 || *ow < 1)
    return em_set_error(EM_ERR_SHAPE,
                        "%s: input of shape %s gives an output of %lld x %lld with kernel (%d, %d), "
                        "stride (%d, %d), padding (%d, %d), dilation (%d, %d): the output is too small",
                        op, EM_SHAPE(x), (long long)*oh, (long long)*ow, k[0], k[1], s[0], s[1], pad[0], pad[1], d[0],
                        d[1]);
  return EM_OK;
}

/* ---- max ---- */

static em_status max_pool2d_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  const em_tensor *idx = n->saved[0];
  int64_t in_shape[3] = {idx->sizes[0], n->shapes[0][n->ndims[0] - 2], n->shapes[0][n->ndims[0] - 1]};
  em_tensor *gy = NULL, *gx = NULL;
  em_status st = nn_reshaped(&gy, go[0], 3, idx->sizes);
  if (!st) st = em_empty(&gx, 3, in_shape, n->dtypes[0], idx->storage->device);
  const em_backend *be = st ? NULL : nn_backend("max_pool2d", idx);
  if (!st && !be) st = em_last_status();
  if (!st && !(st = be->max_pool2d_backward(gx, gy, idx))) {
    st = nn_set_grad(n, 0, gx, &gi[0]);
    gx = NULL;
  }
  em_tensor_release(gy);
  em_tensor_release(gx);
  return st;
}

em_status em_nn_max_pool2d(em_tensor **out, const em_tensor *x, int kernel_h, int kernel_w, int stride_h, int stride_w,
                           int pad_h, int pad_w, int dilation_h, int dilation_w, int ceil_mode) {
  const char *op = "max_pool2d";
  em_pool2d_params p = {
      {kernel_h, kernel_w}, {stride_h, stride_w}, {pad_h, pad_w}, {dilation_h, dilation_w}, ceil_mode != 0, 0, 0};
  em_tensor *xc = NULL, *y = NULL, *idx = NULL;
  int64_t oh = 0, ow = 0, shape[4];
  em_status st = nn_check_out(op, out);
  if (!st) st = as_planes(op, x, &xc);
  if (!st) st = window(op, x, &p, &oh, &ow);
  if (!st && xc->sizes[1] * xc->sizes[2] > INT32_MAX)
    st = em_set_error(EM_ERR_SHAPE, "%s: planes of %lld x %lld are too large (at most 2^31 elements)", op,
                      (long long)xc->sizes[1], (long long)xc->sizes[2]);
  int64_t pshape[3] = {xc ? xc->sizes[0] : 0, oh, ow};
  const em_backend *be = st ? NULL : nn_backend(op, x);
  if (!st && !be) st = em_last_status();
  if (!st && !(st = em_empty(&y, 3, pshape, x->dtype, x->storage->device)) &&
      !(st = em_empty(&idx, 3, pshape, EM_INT32, x->storage->device)))
    st = be->max_pool2d(y, idx, xc, &p);
  if (!st) {
    out_shape(x, oh, ow, shape);
    st = em_reshape(out, y, x->ndim, shape);
  }
  const em_tensor *in[1] = {x};
  if (!st && ag_any_requires_grad(1, in)) {
    em_node *n = ag_node_new("MaxPool2dBackward", max_pool2d_backward, 1, in, 1);
    if (n && (st = ag_node_save(n, 0, idx))) {
      ag_node_release(n);
      n = NULL;
    }
    st = ag_finish_record(out, n);
  }
  em_tensor *tmp[] = {xc, y, idx};
  nn_release(3, tmp);
  return st;
}

/* ---- average (fixed windows or adaptive) ---- */

static em_status avg_pool2d_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  const em_pool2d_params *p = n->ctx;
  int nd = n->ndims[0];
  int64_t planes = 1;
  for (int d = 0; d < nd - 2; d++) planes *= n->shapes[0][d];
  int64_t gshape[3] = {planes, go[0]->sizes[nd - 2], go[0]->sizes[nd - 1]};
  int64_t in_shape[3] = {planes, n->shapes[0][nd - 2], n->shapes[0][nd - 1]};
  em_tensor *gy = NULL, *gx = NULL;
  em_status st = nn_reshaped(&gy, go[0], 3, gshape);
  if (!st) st = em_empty(&gx, 3, in_shape, n->dtypes[0], go[0]->storage->device);
  const char *op = p->adaptive ? "adaptive_avg_pool2d" : "avg_pool2d";
  const em_backend *be = st ? NULL : nn_backend(op, go[0]);
  if (!st && !be) st = em_last_status();
  if (!st && !(st = be->avg_pool2d_backward(gx, gy, p))) {
    st = nn_set_grad(n, 0, gx, &gi[0]);
    gx = NULL;
  }
  em_tensor_release(gy);
  em_tensor_release(gx);
  return st;
}

static em_status avg_common(const char *op, em_tensor **out, const em_tensor *x, const em_pool2d_params *p, int64_t oh,
                            int64_t ow, em_tensor *xc) {
  int64_t pshape[3] = {xc->sizes[0], oh, ow}, shape[4];
  em_tensor *y = NULL;
  const em_backend *be = nn_backend(op, x);
  em_status st = be ? em_empty(&y, 3, pshape, x->dtype, x->storage->device) : em_last_status();
  if (!st) st = be->avg_pool2d(y, xc, p);
  if (!st) {
    out_shape(x, oh, ow, shape);
    st = em_reshape(out, y, x->ndim, shape);
  }
  const em_tensor *in[1] = {x};
  if (!st && ag_any_requires_grad(1, in)) {
    em_node *n =
        ag_node_new(p->adaptive ? "AdaptiveAvgPool2dBackward" : "AvgPool2dBackward", avg_pool2d_backward, 1, in, 1);
    em_pool2d_params *saved = n ? nn_node_ctx(n, sizeof *saved) : NULL;
    if (n && !saved) {
      ag_node_release(n);
      n = NULL;
      em_set_error(EM_ERR_MEMORY, "%s: out of memory recording the autograd graph", op);
    }
    if (saved) *saved = *p;
    st = ag_finish_record(out, n);
  }
  em_tensor_release(y);
  return st;
}

em_status em_nn_avg_pool2d(em_tensor **out, const em_tensor *x, int kernel_h, int kernel_w, int stride_h, int stride_w,
                           int pad_h, int pad_w, int ceil_mode, int count_include_pad) {
  const char *op = "avg_pool2d";
  em_pool2d_params p = {
      {kernel_h, kernel_w}, {stride_h, stride_w}, {pad_h, pad_w}, {1, 1}, ceil_mode != 0, count_include_pad != 0, 0};
  em_tensor *xc = NULL;
  int64_t oh = 0, ow = 0;
  em_status st = nn_check_out(op, out);
  if (!st) st = as_planes(op, x, &xc);
  if (!st) st = window(op, x, &p, &oh, &ow);
  if (!st) st = avg_common(op, out, x, &p, oh, ow, xc);
  em_tensor_release(xc);
  return st;
}

em_status em_nn_adaptive_avg_pool2d(em_tensor **out, const em_tensor *x, int64_t out_h, int64_t out_w) {
  const char *op = "adaptive_avg_pool2d";
  em_pool2d_params p = {.adaptive = 1};
  em_tensor *xc = NULL;
  em_status st = nn_check_out(op, out);
  if (!st) st = as_planes(op, x, &xc);
  if (!st && (out_h < 1 || out_w < 1))
    st = em_set_error(EM_ERR_ARGUMENT, "%s: expected an output size of at least 1 x 1, got %lld x %lld", op,
                      (long long)out_h, (long long)out_w);
  if (!st) st = avg_common(op, out, x, &p, out_h, out_w, xc);
  em_tensor_release(xc);
  return st;
}
