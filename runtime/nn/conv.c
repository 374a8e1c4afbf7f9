/* conv.c - 2-d convolution (PyTorch's conv2d: stride, padding, dilation, groups). The
 * kernels (forward, and one backward call for the input, weight and bias gradients that
 * are wanted) are the backend's; see cpu/nn_conv.c. */
#include "autograd/autocast.h"
#include "nn_impl.h"

static void params_to_node(em_node *n, const em_conv2d_params *p) {
  for (int k = 0; k < 2; k++) {
    n->i[k] = p->stride[k];
    n->i[2 + k] = p->pad[k];
    n->i[4 + k] = p->dilation[k];
  }
  n->i[6] = p->groups;
}

static em_conv2d_params params_of_node(const em_node *n) {
  em_conv2d_params p;
  for (int k = 0; k < 2; k++) {
    p.stride[k] = (int)n->i[k];
    p.pad[k] = (int)n->i[2 + k];
    p.dilation[k] = (int)n->i[4 + k];
  }
  p.groups = (int)n->i[6];
  return p;
}

static em_status conv2d_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  const em_tensor *x = n->saved[0], *w = n->saved[1];
  em_conv2d_params p = params_of_node(n);
  int64_t gshape[4] = {x->sizes[0], w->sizes[0], 0, 0};
  /* the output's spatial size, from the gradient (3-d when the input was unbatched) */
  gshape[2] = go[0]->sizes[go[0]->ndim - 2];
  gshape[3] = go[0]->sizes[go[0]->ndim - 1];
  em_tensor *gy = NULL, *gx = NULL, *gw = NULL, *gb = NULL;
  em_status st = nn_reshaped(&gy, go[0], 4, gshape);
  if (!st && em_node_needs_input_grad(n, 0)) st = em_empty(&gx, 4, x->sizes, x->dtype, x->storage->device);
  if (!st && em_node_needs_input_grad(n, 1)) st = em_empty(&gw, 4, w->sizes, w->dtype, w->storage->device);
  if (!st && em_node_needs_input_grad(n, 2)) st = em_empty(&gb, 1, w->sizes, w->dtype, w->storage->device);
  const em_backend *be = st ? NULL : nn_backend("conv2d", x);
  if (!st && !be) st = em_last_status();
  if (!st) st = be->conv2d_backward(gx, gw, gb, gy, x, w, &p);
  if (!st) {
    st = nn_set_grad(n, 0, gx, &gi[0]);
    gx = NULL;
  }
  if (!st) {
    gi[1] = gw, gi[2] = gb;
    gw = gb = NULL;
  }
  em_tensor *tmp[] = {gy, gx, gw, gb};
  nn_release(4, tmp);
  return st;
}

/* The output size along one dim; < 1 when the (dilated) kernel does not fit. */
static int64_t conv_out(int64_t in, int64_t k, int s, int pad, int dil) {
  int64_t span = (int64_t)dil * (k - 1) + 1, padded = in + 2 * (int64_t)pad;
  return padded < span ? 0 : (padded - span) / s + 1;
}

em_status em_nn_conv2d(em_tensor **out, const em_tensor *x, const em_tensor *w, const em_tensor *b, int stride_h,
                       int stride_w, int pad_h, int pad_w, int dilation_h, int dilation_w, int groups) {
  em_autocast_ops ac;
  if (ag_autocast_prepare(&ac, EM_AUTOCAST_LOWER, 3, (const em_tensor *[]){x, w, b}))
    return ag_autocast_finish(&ac, ac.status ? ac.status
                                             : em_nn_conv2d(out, ac.t[0], ac.t[1], ac.t[2], stride_h, stride_w, pad_h,
                                                            pad_w, dilation_h, dilation_w, groups));
  const char *op = "conv2d";
  em_status st;
  if ((st = nn_check_out(op, out)) || (st = nn_check_float(op, x, "input")) || (st = nn_check_float(op, w, "weight")) ||
      (st = nn_check_like(op, w, "weight", x)))
    return st;
  if (x->ndim != 3 && x->ndim != 4)
    return em_set_error(EM_ERR_SHAPE, "conv2d: expected a 3-d [C, H, W] or 4-d [N, C, H, W] input, got shape %s",
                        EM_SHAPE(x));
  if (w->ndim != 4)
    return em_set_error(EM_ERR_SHAPE, "conv2d: expected a 4-d weight [C_out, C_in / groups, kH, kW], got shape %s",
                        EM_SHAPE(w));
  if (stride_h < 1 || stride_w < 1 || dilation_h < 1 || dilation_w < 1 || pad_h < 0 || pad_w < 0 || groups < 1)
    return em_set_error(EM_ERR_ARGUMENT,
                        "conv2d: got stride (%d, %d), padding (%d, %d), dilation (%d, %d), groups %d; expected "
                        "strides, dilations and groups >= 1 and paddings >= 0",
                        stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups);
  int batched = x->ndim == 4;
  int64_t N = batched ? x->sizes[0] : 1, C = x->sizes[batched], H = x->sizes[batched + 1], W = x->sizes[batched + 2];
  int64_t Co = w->sizes[0], kh = w->sizes[2], kw = w->sizes[3];
  if (Co < 1 || kh < 1 || kw < 1 || w->sizes[1] < 1)
    return em_set_error(EM_ERR_SHAPE, "conv2d: the weight of shape %s is empty", EM_SHAPE(w));
  if (C % groups || Co % groups)
    return em_set_error(EM_ERR_SHAPE,
                        "conv2d: groups = %d must divide both the input channels (%lld, input shape %s) and the "
                        "output channels (%lld, weight shape %s)",
                        groups, (long long)C, EM_SHAPE(x), (long long)Co, EM_SHAPE(w));
  if (w->sizes[1] * groups != C)
    return em_set_error(EM_ERR_SHAPE,
                        "conv2d: the input has %lld channels (shape %s) but the weight of shape %s with groups = %d "
                        "expects %lld",
                        (long long)C, EM_SHAPE(x), EM_SHAPE(w), groups, (long long)(w->sizes[1] * groups));
  if ((st = nn_check_vector(op, b, "bias", Co, x))) return st;
  int64_t OH = conv_out(H, kh, stride_h, pad_h, dilation_h), OW = conv_out(W, kw, stride_w, pad_w, dilation_w);
  if (OH < 1 || OW < 1)
    return em_set_error(EM_ERR_SHAPE,
                        "conv2d: the padded input is %lld x %lld (input shape %s, padding (%d, %d)) but the dilated "
                        "kernel is %lld x %lld: the kernel cannot be larger than the input",
                        (long long)(H + 2 * pad_h), (long long)(W + 2 * pad_w), EM_SHAPE(x), pad_h, pad_w,
                        (long long)(dilation_h * (kh - 1) + 1), (long long)(dilation_w * (kw - 1) + 1));
  em_conv2d_params p = {{stride_h, stride_w}, {pad_h, pad_w}, {dilation_h, dilation_w}, groups};
  const em_backend *be = nn_backend(op, x);
  if (!be) return em_last_status();
  int64_t xshape[4] = {N, C, H, W}, yshape[4] = {N, Co, OH, OW};
  em_tensor *xc = NULL, *wc = NULL, *bc = NULL, *y = NULL;
  if (!(st = nn_reshaped(&xc, x, 4, xshape)) && !(st = nn_contiguous(&wc, w)) && !(st = nn_contiguous(&bc, b)) &&
      !(st = em_empty(&y, 4, yshape, x->dtype, x->storage->device)))
    st = be->conv2d(y, xc, wc, bc, &p);
  if (!st) st = batched ? (em_tensor_retain(y), *out = y, EM_OK) : em_reshape(out, y, 3, yshape + 1);
  const em_tensor *in[3] = {x, w, b};
  if (!st && ag_any_requires_grad(3, in)) {
    em_node *n = ag_node_new("Conv2dBackward", conv2d_backward, 3, in, 1);
    if (n) {
      params_to_node(n, &p);
      if ((st = ag_node_save(n, 0, xc)) || (st = ag_node_save(n, 1, wc))) {
        ag_node_release(n);
        n = NULL;
      }
    }
    st = ag_finish_record(out, n);
  }
  em_tensor *tmp[] = {xc, wc, bc, y};
  nn_release(4, tmp);
  return st;
}
