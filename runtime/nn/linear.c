/* linear.c - y = x @ w^T + b, and relu(x @ w^T + b) (em_nn_linear_relu), each recorded as
 * one node whose backward is two GEMMs and a column sum (after, for the ReLU, the output
 * gradient is kept where the output is positive). Leading dims of x are flattened into the
 * GEMM's rows.
 *
 * Forward: on the CPU in float32, where oneDNN measured faster for the GEMM's size
 * (cpu_dnnl_linear_wanted), one oneDNN matmul that adds the bias and applies the ReLU as it
 * writes each tile of y (cpu_dnnl_linear): no pass of their own over y. Otherwise addmm
 * (the bias written into the result first and the product added to it) and, for the ReLU,
 * one ReLU pass. */
#include "autograd/autocast.h"
#include "cpu/cpu_dnnl.h"
#include "cpu/cpu_impl.h"
#include "nn_impl.h"

/* The ReLU's backward and the bias gradient in one pass over the output gradient (float32
 * on the CPU, contiguous): *g2 becomes the masked gradient, *gb its column sum, with the
 * bits of the separate ReLU backward and em_reduce. 0 (nothing changed) when it does not
 * apply or an allocation failed: the caller takes the two-pass way. */
static int fused_relu_bias_cpu(em_tensor **g2, em_tensor **gb, const em_tensor *y) {
  const em_tensor *g = *g2;
  if (g->storage->device.type != EM_CPU || g->dtype != EM_FLOAT32 || y->dtype != EM_FLOAT32 ||
      y->storage->device.type != EM_CPU || !em_tensor_is_contiguous(g) || !em_tensor_is_contiguous(y) ||
      y->ndim != 2 || y->sizes[0] != g->sizes[0] || y->sizes[1] != g->sizes[1])
    return 0;
  em_tensor *masked = NULL, *b = NULL;
  if (em_empty(&masked, 2, g->sizes, EM_FLOAT32, g->storage->device) ||
      em_empty(&b, 1, &g->sizes[1], EM_FLOAT32, g->storage->device)) {
    em_tensor_release(masked);
    return 0;
  }
  cpu_relu_backward_colsum_f32((float *)em_tensor_ptr(masked), (float *)em_tensor_ptr(b), (const float *)em_tensor_ptr(g),
                               (const float *)em_tensor_ptr(y), g->sizes[0], g->sizes[1]);
  em_tensor_release(*g2);
  *g2 = masked;
  *gb = b;
  return 1;
}

static em_status linear_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  const em_tensor *x2 = n->saved[0], *w = n->saved[1];
  em_tensor *g2 = NULL, *g2t = NULL, *gx = NULL, *gw = NULL, *gb = NULL;
  int64_t shape[2] = {x2->sizes[0], w->sizes[0]};
  em_status st = em_reshape(&g2, go[0], 2, shape);
  if (!st && n->i[0] && em_node_needs_input_grad(n, 2) && fused_relu_bias_cpu(&g2, &gb, n->saved[2])) {
    /* masked and the bias gradient in one pass (gb set) */
  } else if (!st && n->i[0]) { /* the ReLU: the gradient passes where the output (saved[2]) is positive */
    const em_backend *be = nn_backend("linear_relu", g2);
    em_tensor *masked = NULL;
    st = be ? em_empty(&masked, 2, shape, g2->dtype, g2->storage->device) : em_last_status();
    if (!st) st = be->relu_backward(masked, g2, n->saved[2]);
    em_tensor_release(g2);
    g2 = masked;
  }
  if (!st && em_node_needs_input_grad(n, 0) && !(st = em_mm(&gx, g2, w))) {
    st = nn_set_grad(n, 0, gx, &gi[0]);
    gx = NULL;
  }
  /* the weight's gradient is written into its grad destination when it has one (a DDP
   * bucket's slice): no copy into the bucket afterwards */
  if (!st && em_node_needs_input_grad(n, 1) && !(st = em_transpose(&g2t, g2, 0, 1)) &&
      !(gw = ag_node_grad_destination(n, 1, 2, w->sizes, g2->dtype), st = em_mm(&gw, g2t, x2))) {
    gi[1] = gw;
    gw = NULL;
  }
  if (!st && gb) {
    gi[2] = gb;
    gb = NULL;
  } else if (!st && em_node_needs_input_grad(n, 2)) {
    /* float16/bfloat16 (autocast on a GPU): the column sum runs in float32, as the tensor
     * core sums float32/float64 only, and is rounded once */
    int dim0 = 0, half = g2->dtype == EM_FLOAT16 || g2->dtype == EM_BFLOAT16;
    em_tensor *g32 = NULL, *gb32 = NULL;
    if (half) st = em_to(&g32, g2, EM_FLOAT32, g2->storage->device);
    if (!st) st = em_reduce(EM_SUM, half ? &gb32 : &gb, NULL, half ? g32 : g2, &dim0, 1, 0, 0);
    if (!st && half) st = em_to(&gb, gb32, g2->dtype, g2->storage->device);
    em_tensor_release(g32);
    em_tensor_release(gb32);
    if (!st) {
      gi[2] = gb;
      gb = NULL;
    }
  }
  em_tensor *tmp[] = {g2, g2t, gx, gw, gb};
  nn_release(5, tmp);
  return st;
}

/* y2 [rows, out] through oneDNN in one primitive; 0 when it declined (the caller computes it
 * the other way). */
static int fused_cpu(em_tensor **y2, const em_tensor *x2, const em_tensor *w, const em_tensor *b, int relu) {
  int64_t M = x2->sizes[0], K = x2->sizes[1], N = w->sizes[0];
  if (x2->storage->device.type != EM_CPU || x2->dtype != EM_FLOAT32 || ag_autocast_cpu_bf16() ||
      !cpu_dnnl_linear_wanted(M, N, K) || x2->strides[1] != 1 || x2->strides[0] < K || w->strides[1] != 1 ||
      w->strides[0] < K || (b && b->strides[0] != 1))
    return 0;
  em_tensor *y = NULL;
  if (em_empty(&y, 2, (int64_t[]){M, N}, EM_FLOAT32, x2->storage->device)) return 0;
  cpu_dnnl_mat ym = {(float *)em_tensor_ptr(y), N, 1}, xm = {(float *)em_tensor_ptr(x2), x2->strides[0], 1},
               wt = {(float *)em_tensor_ptr(w), 1, w->strides[0]}; /* w [N, K] read as w^T [K, N] */
  if (cpu_dnnl_linear(ym, xm, wt, b ? (const float *)em_tensor_ptr(b) : NULL, relu, M, N, K)) {
    em_tensor_release(y);
    return 0;
  }
  *y2 = y;
  return 1;
}

static em_status linear(const char *op, em_tensor **out, const em_tensor *x, const em_tensor *w, const em_tensor *b,
                        int relu) {
  em_autocast_ops ac;
  if (ag_autocast_prepare(&ac, EM_AUTOCAST_LOWER, 3, (const em_tensor *[]){x, w, b}))
    return ag_autocast_finish(&ac, ac.status ? ac.status : linear(op, out, ac.t[0], ac.t[1], ac.t[2], relu));
  em_status st;
  if ((st = nn_check_out(op, out)) || (st = nn_check_float(op, x, "input")) || (st = nn_check_like(op, w, "weight", x)))
    return st;
  if (!w) return em_set_error(EM_ERR_ARGUMENT, "%s: expected a weight tensor, got nil", op);
  if (w->ndim != 2)
    return em_set_error(EM_ERR_SHAPE, "%s: expected the weight to be 2-d [out_features, in_features], got %s", op,
                        EM_SHAPE(w));
  int64_t nout = w->sizes[0], nin = w->sizes[1];
  if ((st = nn_check_vector(op, b, "bias", nout, x))) return st;
  if (x->ndim < 1 || x->sizes[x->ndim - 1] != nin)
    return em_set_error(EM_ERR_SHAPE,
                        "%s: input of shape %s does not fit weight of shape %s (expected the last dim to be %lld)", op,
                        EM_SHAPE(x), EM_SHAPE(w), (long long)nin);
  /* x as rows [M, in]; y as [M, out], then back to x's leading dims */
  int64_t rows = 1, yshape[EM_MAX_DIMS];
  for (int d = 0; d < x->ndim - 1; d++) rows *= yshape[d] = x->sizes[d];
  yshape[x->ndim - 1] = nout;
  int64_t xs[2] = {rows, nin};
  em_tensor *x2 = NULL, *wt = NULL, *y2 = NULL, *lin = NULL;
  if (!(st = em_reshape(&x2, x, 2, xs)) && !fused_cpu(&y2, x2, w, b, relu)) {
    if (!(st = em_transpose(&wt, w, 0, 1))) st = b ? em_addmm(&lin, b, x2, wt, 1, 1) : em_mm(&lin, x2, wt);
    if (!st && relu) st = em_unary(EM_RELU, &y2, lin);
    else if (!st) y2 = lin, lin = NULL;
  }
  if (!st) st = x->ndim == 2 ? (em_tensor_retain(y2), *out = y2, EM_OK) : em_reshape(out, y2, x->ndim, yshape);
  const em_tensor *in[3] = {x, w, b};
  if (!st && ag_any_requires_grad(3, in)) {
    em_node *n = ag_node_new(relu ? "LinearReluBackward" : "LinearBackward", linear_backward, 3, in, 1);
    if (n) {
      n->i[0] = relu;
      if ((st = ag_node_save(n, 0, x2)) || (st = ag_node_save(n, 1, w)) || (relu && (st = ag_node_save(n, 2, y2)))) {
        ag_node_release(n);
        n = NULL;
      }
    }
    st = ag_finish_record(out, n);
  }
  em_tensor *tmp[] = {x2, wt, y2, lin};
  nn_release(4, tmp);
  return st;
}

em_status em_nn_linear(em_tensor **out, const em_tensor *x, const em_tensor *w, const em_tensor *b) {
  return linear("linear", out, x, w, b, 0);
}

em_status em_nn_linear_relu(em_tensor **out, const em_tensor *x, const em_tensor *w, const em_tensor *b) {
  return linear("linear_relu", out, x, w, b, 1);
}
