/* dropout.c - inverted dropout: out = x * mask, mask = bernoulli(1 - p) / (1 - p).
 *
 * The mask comes from the global Philox generator (em_bernoulli_), whose element i is a
 * function of (seed, offset, i) alone: the same seed gives the same mask whatever the
 * thread count. The scaled mask is what the backward multiplies by. */
#include "nn_impl.h"

static em_status dropout_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  if (!go[0]) return EM_OK;
  em_tensor *g = NULL;
  em_status st = em_binary(EM_MUL, &g, go[0], n->saved[0]);
  return st ? st : nn_set_grad(n, 0, g, &gi[0]);
}

em_status em_nn_dropout(em_tensor **out, const em_tensor *x, double p, int training) {
  const char *op = "dropout";
  em_status st;
  if ((st = nn_check_out(op, out)) || (st = nn_check_float(op, x, "input"))) return st;
  if (!(p >= 0 && p <= 1))
    return em_set_error(EM_ERR_ARGUMENT, "dropout: got p = %g, expected a probability in [0, 1]", p);
  if (!training || p == 0) { /* the identity: x itself, as PyTorch returns it */
    em_tensor_retain((em_tensor *)x);
    *out = (em_tensor *)x;
    return EM_OK;
  }
  em_tensor *mask = NULL;
  if (!(st = em_empty(&mask, x->ndim, x->sizes, x->dtype, x->storage->device)) && !(st = em_bernoulli_(mask, 1 - p)) &&
      !(st = em_binary_scalar(EM_MUL, &mask, mask, p < 1 ? 1 / (1 - p) : 0, 0)))
    st = em_binary(EM_MUL, out, x, mask);
  const em_tensor *in[1] = {x};
  if (!st && ag_any_requires_grad(1, in)) {
    em_node *n = ag_node_new("DropoutBackward", dropout_backward, 1, in, 1);
    if (n && (st = ag_node_save(n, 0, mask))) {
      ag_node_release(n);
      n = NULL;
    }
    st = ag_finish_record(out, n);
  }
  em_tensor_release(mask);
  return st;
}
