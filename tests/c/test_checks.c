/* test_checks.c - rules the runtime enforces for every front end (Lua, C, ctypes): the
 * in-place rule of autograd (em_check_inplace and the in-place ops that apply it), the
 * operand ranks of the fixed-rank products in their recorded forms, and optimizer
 * hyper-parameters checked on their own (an update of no parameters). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>
#include "ember/autograd.h"
#include "ember/cuda.h"
#include "ember/optim.h"

static const em_device CPU = {EM_CPU, 0};

static em_tensor *ones(int ndim, const int64_t *sizes) {
  em_tensor *t = NULL;
  assert_int_equal(em_ones(&t, ndim, sizes, EM_FLOAT32, CPU), EM_OK);
  return t;
}

static em_tensor *leaf(int ndim, const int64_t *sizes) {
  em_tensor *t = ones(ndim, sizes);
  assert_int_equal(em_requires_grad_(t, 1), EM_OK);
  return t;
}

static void expect_error(em_status st, em_status code, const char *fragment) {
  assert_int_equal(st, code);
  if (!strstr(em_last_error(), fragment)) fail_msg("error '%s' does not mention '%s'", em_last_error(), fragment);
}

/* ---- the in-place rule ---- */

static void test_inplace_rule(void **state) {
  (void)state;
  int64_t n = 3;
  em_tensor *w = leaf(1, &n), *x = ones(1, &n);
  assert_int_equal(em_check_inplace("op", x, NULL), EM_OK);
  assert_int_equal(em_check_inplace("op", x, x), EM_OK);
  expect_error(em_check_inplace("op", w, NULL), EM_ERR_ARGUMENT,
               "op: in-place operation on a tensor that requires grad (a leaf); run it inside no_grad()");
  expect_error(em_check_inplace("op", x, w), EM_ERR_ARGUMENT,
               "op: an in-place operation cannot record gradients for its operand that requires grad");

  /* a recorded result: not a leaf */
  em_tensor *y = NULL;
  assert_int_equal(em_ag_binary_scalar(EM_MUL, &y, w, 2.0, 0), EM_OK);
  expect_error(em_check_inplace("mul_", y, NULL), EM_ERR_ARGUMENT,
               "mul_: in-place operation on a tensor that "
               "requires grad; run it");

  /* grad mode off: everything goes */
  em_set_grad_enabled(0);
  assert_int_equal(em_check_inplace("op", w, w), EM_OK);
  assert_int_equal(em_fill(w, 1.0), EM_OK);
  em_set_grad_enabled(1);
  em_tensor_release(y), em_tensor_release(w), em_tensor_release(x);
}

/* Every in-place op of the tensor API applies the rule itself, under its own name. */
static void test_inplace_ops_refuse(void **state) {
  (void)state;
  int64_t n = 3;
  em_tensor *w = leaf(1, &n), *x = ones(1, &n), *mask = NULL, *idx = NULL;
  assert_int_equal(em_zeros(&mask, 1, &n, EM_BOOL, CPU), EM_OK);
  assert_int_equal(em_zeros(&idx, 1, &n, EM_INT64, CPU), EM_OK);
  const char *leaf_msg = "in-place operation on a tensor that requires grad (a leaf)";
  const char *src_msg = "an in-place operation cannot record gradients for its operand";
  em_tensor *out = w;
  expect_error(em_binary_scalar(EM_ADD, &out, w, 1.0, 0), EM_ERR_ARGUMENT, "add_: in-place operation");
  expect_error(em_binary(EM_MUL, &out, w, x), EM_ERR_ARGUMENT, "mul_: in-place operation");
  expect_error(em_unary(EM_EXP, &out, w), EM_ERR_ARGUMENT, "exp_: in-place operation");
  expect_error(em_clamp(&out, w, 0, 1), EM_ERR_ARGUMENT, "clamp_: in-place operation");
  expect_error(em_add_scaled(&out, w, x, 2.0), EM_ERR_ARGUMENT, "add_scaled_: in-place operation");
  expect_error(em_fill(w, 0), EM_ERR_ARGUMENT, leaf_msg);
  expect_error(em_copy_(w, x), EM_ERR_ARGUMENT, "copy_: in-place");
  expect_error(em_copy_async(w, x, 0), EM_ERR_ARGUMENT, "copy_: in-place");
  expect_error(em_uniform_(w, 0, 1), EM_ERR_ARGUMENT, "uniform_: in-place");
  expect_error(em_normal_(w, 0, 1), EM_ERR_ARGUMENT, "normal_: in-place");
  expect_error(em_bernoulli_(w, 0.5), EM_ERR_ARGUMENT, "bernoulli_: in-place");
  expect_error(em_index_fill_(w, 0, idx, 1.0, 0), EM_ERR_ARGUMENT, "index_fill_: in-place");
  expect_error(em_masked_fill_(w, mask, 1.0), EM_ERR_ARGUMENT, "masked_fill_: in-place");
  expect_error(em_scatter_value_(w, 0, idx, 1.0, 0), EM_ERR_ARGUMENT, "scatter_value_: in-place");
  expect_error(em_scatter_(w, 0, idx, x, 0, 0), EM_ERR_ARGUMENT, "scatter_: in-place");
  expect_error(em_index_add_(w, 0, idx, x, 1.0, 0), EM_ERR_ARGUMENT, "index_add_: in-place");

  /* writing a value that requires grad into a plain tensor */
  out = x;
  expect_error(em_binary(EM_ADD, &out, x, w), EM_ERR_ARGUMENT, src_msg);
  expect_error(em_scatter_(x, 0, idx, w, 0, 0), EM_ERR_ARGUMENT, src_msg);
  expect_error(em_index_add_(x, 0, idx, w, 1.0, 0), EM_ERR_ARGUMENT, src_msg);

  /* nothing was written; plain tensors take every in-place op */
  const float *pw = em_tensor_data(w);
  assert_true(pw[0] == 1.0f && pw[1] == 1.0f && pw[2] == 1.0f);
  assert_int_equal(em_binary_scalar(EM_ADD, &out, x, 1.0, 0), EM_OK);
  assert_int_equal(em_fill(x, 2.0), EM_OK);
  assert_int_equal(em_copy_(x, w), EM_OK); /* copy_ checks its destination only: it is the library's copy */
  em_tensor_release(mask), em_tensor_release(idx), em_tensor_release(w), em_tensor_release(x);
}

/* ---- products: ranks checked in the recorded forms too ---- */

static void test_product_ranks(void **state) {
  (void)state;
  int64_t s23[2] = {2, 3}, s3 = 3, s2 = 2, s223[3] = {2, 2, 3}, s234[3] = {3, 3, 4};
  em_tensor *a = leaf(2, s23), *v = leaf(1, &s3), *u = leaf(1, &s2), *b3 = leaf(3, s223), *c3 = ones(3, s234);
  em_tensor *r = NULL;
  expect_error(em_ag_mm(&r, a, v), EM_ERR_SHAPE, "mm: expected the second operand to be 2-d, got shape [3]");
  expect_error(em_ag_mv(&r, v, v), EM_ERR_SHAPE, "mv: expected the matrix to be 2-d, got shape [3]");
  expect_error(em_ag_dot(&r, a, v), EM_ERR_SHAPE, "dot: expected the first operand to be 1-d, got shape [2, 3]");
  expect_error(em_ag_dot(&r, u, v), EM_ERR_SHAPE, "dot: the vectors have different lengths");
  expect_error(em_ag_outer(&r, a, v), EM_ERR_SHAPE, "outer: expected the first operand to be 1-d");
  expect_error(em_ag_bmm(&r, a, a), EM_ERR_SHAPE, "bmm: expected the first operand to be 3-d");
  expect_error(em_ag_bmm(&r, b3, c3), EM_ERR_SHAPE, "bmm: batch sizes differ");
  assert_null(r);

  /* recorded: gradients flow as through matmul */
  assert_int_equal(em_ag_outer(&r, u, v), EM_OK);
  assert_int_equal(em_tensor_ndim(r), 2);
  assert_int_equal(em_tensor_size(r, 0), 2);
  assert_int_equal(em_tensor_size(r, 1), 3);
  assert_int_equal(em_is_leaf(r), 0);
  em_tensor *sum = NULL;
  assert_int_equal(em_ag_reduce(EM_SUM, &sum, NULL, r, NULL, 0, 0, 0), EM_OK);
  assert_int_equal(em_backward(sum, NULL, 0), EM_OK);
  em_tensor *gu = em_grad(u); /* d sum(u v^T) / du = sum(v) = 3 */
  assert_non_null(gu);
  const float *pg = em_tensor_data(gu);
  assert_true(pg[0] == 3.0f && pg[1] == 3.0f);
  em_tensor_release(gu), em_tensor_release(sum), em_tensor_release(r);
  r = NULL;

  /* not recorded: the plain products */
  em_set_grad_enabled(0);
  assert_int_equal(em_ag_mv(&r, a, v), EM_OK);
  assert_int_equal(em_is_leaf(r), 1);
  em_set_grad_enabled(1);
  em_tensor_release(r), em_tensor_release(a), em_tensor_release(v), em_tensor_release(u), em_tensor_release(b3),
      em_tensor_release(c3);
}

/* ---- optimizers: hyper-parameters on their own ---- */

static void test_optim_hyper_only(void **state) {
  (void)state;
  assert_int_equal(em_optim_sgd(0, NULL, NULL, NULL, 0.1, 0.9, 0, 0, 1, 1, 0), EM_OK);
  expect_error(em_optim_sgd(0, NULL, NULL, NULL, -1, 0, 0, 0, 0, 1, 0), EM_ERR_ARGUMENT,
               "sgd: lr is -1, expected a finite number >= 0");
  expect_error(em_optim_sgd(0, NULL, NULL, NULL, NAN, 0, 0, 0, 0, 1, 0), EM_ERR_ARGUMENT, "sgd: lr is nan");
  expect_error(em_optim_sgd(0, NULL, NULL, NULL, 0.1, 0, 0, 0, 1, 1, 0), EM_ERR_ARGUMENT,
               "sgd: nesterov momentum requires momentum > 0 and dampening = 0, got momentum 0 and dampening 0");
  expect_error(em_optim_sgd(0, NULL, NULL, NULL, 0.1, 0.9, 0, -0.5, 0, 1, 0), EM_ERR_ARGUMENT,
               "sgd: weight_decay is -0.5, expected a finite number >= 0");
  assert_int_equal(em_optim_adam(0, NULL, NULL, NULL, NULL, 1e-3, 0.9, 0.999, 1e-8, 0, 0, 1, 0), EM_OK);
  expect_error(em_optim_adam(0, NULL, NULL, NULL, NULL, 1e-3, 0.9, 1.0, 1e-8, 0, 0, 1, 0), EM_ERR_ARGUMENT,
               "adam: beta2 is 1, expected a number in [0, 1)");
  expect_error(em_optim_adam(0, NULL, NULL, NULL, NULL, 1e-3, 0.9, 0.999, -1e-8, 0, 1, 1, 0), EM_ERR_ARGUMENT,
               "adamw: eps is -1e-08, expected a finite number >= 0");
  expect_error(em_optim_adam(0, NULL, NULL, NULL, NULL, INFINITY, 0.9, 0.999, 1e-8, 0, 0, 1, 0), EM_ERR_ARGUMENT,
               "adam: lr is inf");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_inplace_rule),
      cmocka_unit_test(test_inplace_ops_refuse),
      cmocka_unit_test(test_product_ranks),
      cmocka_unit_test(test_optim_hyper_only),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
