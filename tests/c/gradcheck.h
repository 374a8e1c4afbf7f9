/* gradcheck.h - the float64 finite-difference gradient check shared by the C tests of
 * differentiable ops (test_autograd.c, test_nn.c). Include after test_util.h.
 *
 * gradcheck(name, f, n, inputs) runs loss = sum(f(inputs) * w) for a fixed random w of
 * f's output shape, backpropagates, and compares each gradient entry of every input that
 * requires grad with the central difference (eps 1e-6, tolerance 1e-5 relative). Inputs
 * must be contiguous float64 tensors; anything else f needs comes from the test's own
 * statics. */
#ifndef EMBER_TEST_GRADCHECK_H
#define EMBER_TEST_GRADCHECK_H

#include <math.h>
#include "ember/autograd.h"
#include "test_util.h"

static em_tensor *randn64(int ndim, const int64_t *sizes, int requires_grad) {
  em_tensor *t = NULL;
  assert_int_equal(em_empty(&t, ndim, sizes, EM_FLOAT64, CPU), EM_OK);
  assert_int_equal(em_normal_(t, 0, 1), EM_OK);
  if (requires_grad) assert_int_equal(em_requires_grad_(t, 1), EM_OK);
  return t;
}

static double get_flat(const em_tensor *t, int64_t i) {
  /* contiguous float64 test tensors only */
  return ((const double *)em_tensor_data(t))[i];
}

static void set_flat(em_tensor *t, int64_t i, double v) { ((double *)em_tensor_data(t))[i] = v; }

typedef em_status (*op_fn)(em_tensor **out, em_tensor **in);

/* loss = sum(f(inputs) * w) for a fixed random w of f's output shape. */
static double eval_loss(op_fn f, em_tensor **in, em_tensor *w, em_tensor **loss_out) {
  em_tensor *y = NULL, *prod = NULL, *loss = NULL;
  em_status st = f(&y, in);
  if (st) fail_msg("forward failed: %s", em_last_error());
  assert_int_equal(em_ag_binary(EM_MUL, &prod, y, w), EM_OK);
  assert_int_equal(em_ag_reduce(EM_SUM, &loss, NULL, prod, NULL, 0, 0, 0), EM_OK);
  double v;
  assert_int_equal(em_tensor_item(loss, &v), EM_OK);
  em_tensor_release(y);
  em_tensor_release(prod);
  if (loss_out) *loss_out = loss;
  else em_tensor_release(loss);
  return v;
}

/* Checks analytic gradients of every input against central differences. */
static void gradcheck(const char *name, op_fn f, int n_in, em_tensor **in) {
  em_tensor *y = NULL;
  if (f(&y, in)) fail_msg("%s: forward failed: %s", name, em_last_error());
  em_tensor *w = randn64(em_tensor_ndim(y), em_tensor_sizes(y), 0);
  em_tensor_release(y);
  em_tensor *loss = NULL;
  eval_loss(f, in, w, &loss);
  if (em_backward(loss, NULL, 0)) fail_msg("%s: backward failed: %s", name, em_last_error());
  em_tensor_release(loss);
  const double eps = 1e-6;
  for (int k = 0; k < n_in; k++) {
    if (!em_requires_grad(in[k])) continue;
    em_tensor *g = em_grad(in[k]);
    if (!g) fail_msg("%s: input %d got no gradient", name, k);
    em_tensor *gc = NULL;
    assert_int_equal(em_contiguous(&gc, g), EM_OK);
    int64_t n = em_tensor_numel(in[k]);
    em_set_grad_enabled(0);
    for (int64_t i = 0; i < n; i++) {
      double x0 = get_flat(in[k], i);
      set_flat(in[k], i, x0 + eps);
      double up = eval_loss(f, in, w, NULL);
      set_flat(in[k], i, x0 - eps);
      double down = eval_loss(f, in, w, NULL);
      set_flat(in[k], i, x0);
      double numeric = (up - down) / (2 * eps), analytic = get_flat(gc, i);
      if (fabs(numeric - analytic) > 1e-5 * (1 + fabs(numeric)))
        fail_msg("%s: d/d input %d [%lld]: analytic %.10g, numeric %.10g", name, k, (long long)i, analytic, numeric);
    }
    em_set_grad_enabled(1);
    em_tensor_release(g);
    em_tensor_release(gc);
    em_set_grad(in[k], NULL);
  }
  em_tensor_release(w);
}

#endif
