/* test_amp.c - mixed precision on the CPU: the autocast state and its checks, the cast
 * policy (autograd/autocast.h) exercised through bfloat16 forced onto the CPU (the only
 * half-precision "device" here; the CPU backend does the float32 half of the policy, and
 * the lower-precision casts are checked on the operands), and em_amp_unscale_. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "test_util.h"
#include "autograd/autocast.h"
#include "cpu/cpu_dnnl.h"
#include "ember/autograd.h"
#include "ember/nn.h"
#include "ember/optim.h"

static em_tensor *mat(em_dtype dtype, int64_t rows, int64_t cols, double start) {
  int64_t sizes[2] = {rows, cols};
  em_tensor *t = NULL;
  assert_int_equal(em_zeros(&t, 2, sizes, dtype, CPU), EM_OK);
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) {
      int64_t at[2] = {i, j};
      assert_int_equal(em_tensor_set(t, at, start + 0.25 * (double)(i * cols + j)), EM_OK);
    }
  return t;
}

static double at2(const em_tensor *t, int64_t i, int64_t j) {
  int64_t at[2] = {i, j};
  double v;
  assert_int_equal(em_tensor_get(t, at, &v), EM_OK);
  return v;
}

static void reset_autocast(void) {
  ag_autocast_force_(EM_CPU, 0, EM_BFLOAT16);
  ag_autocast_force_(EM_CUDA, 0, EM_FLOAT16);
}

static void test_state_and_checks(void **unused) {
  (void)unused;
  reset_autocast();
  assert_int_equal(em_autocast_is_enabled(EM_CUDA), 0);
  assert_int_equal(em_autocast_is_enabled(-1), 0);
  assert_int_equal(em_autocast_get_dtype(EM_CUDA), EM_FLOAT16);
  assert_int_equal(em_autocast_get_dtype(EM_CPU), EM_BFLOAT16);
  /* the CPU computes bfloat16 through oneDNN only, float16 not at all: refused with the
   * reason; disabling is fine */
  assert_int_equal(em_autocast_set(EM_CPU, 1, EM_FLOAT16), EM_ERR_UNSUPPORTED);
  assert_non_null(strstr(em_last_error(), "dtype float16 on cpu is not supported"));
  assert_int_equal(em_autocast_is_enabled(EM_CPU), 0);
  if (cpu_dnnl_available()) {
    assert_int_equal(em_autocast_set(EM_CPU, 1, EM_BFLOAT16), EM_OK);
    assert_int_equal(em_autocast_is_enabled(EM_CPU), 1);
  } else {
    assert_int_equal(em_autocast_set(EM_CPU, 1, EM_BFLOAT16), EM_ERR_UNSUPPORTED);
    assert_non_null(strstr(em_last_error(), "needs oneDNN"));
  }
  assert_int_equal(em_autocast_set(EM_CPU, 0, EM_BFLOAT16), EM_OK);
  assert_int_equal(em_autocast_set(EM_CUDA, 1, EM_FLOAT32), EM_ERR_DTYPE);
  assert_int_equal(em_autocast_set((em_device_type)7, 1, EM_FLOAT16), EM_ERR_DEVICE);
  /* cuda can be enabled without a GPU: it is a flag for cuda tensors */
  assert_int_equal(em_autocast_set(EM_CUDA, 1, EM_BFLOAT16), EM_OK);
  assert_int_equal(em_autocast_is_enabled(EM_CUDA), 1);
  assert_int_equal(em_autocast_is_enabled(-1), 1);
  assert_int_equal(em_autocast_get_dtype(EM_CUDA), EM_BFLOAT16);
  assert_int_equal(ag_autocast_target(EM_AUTOCAST_LOWER, EM_CUDA, EM_FLOAT32), EM_BFLOAT16);
  assert_int_equal(ag_autocast_target(EM_AUTOCAST_LOWER, EM_CUDA, EM_FLOAT16), EM_BFLOAT16);
  assert_int_equal(ag_autocast_target(EM_AUTOCAST_LOWER, EM_CUDA, EM_FLOAT64), EM_FLOAT64);
  assert_int_equal(ag_autocast_target(EM_AUTOCAST_FP32, EM_CUDA, EM_BFLOAT16), EM_FLOAT32);
  assert_int_equal(ag_autocast_target(EM_AUTOCAST_FP32, EM_CUDA, EM_FLOAT32), EM_FLOAT32);
  assert_int_equal(ag_autocast_target(EM_AUTOCAST_LOWER, EM_CPU, EM_FLOAT32), EM_FLOAT32); /* off there */

  /* CPU tensors are untouched by cuda autocast */
  em_tensor *x = mat(EM_FLOAT32, 2, 3, -1), *w = mat(EM_FLOAT32, 4, 3, 0.5), *y = NULL;
  assert_int_equal(em_nn_linear(&y, x, w, NULL), EM_OK);
  assert_int_equal(em_tensor_dtype(y), EM_FLOAT32);
  em_tensor_release(y);
  /* suspend/resume around backward */
  em_autocast_saved saved = ag_autocast_suspend();
  assert_int_equal(em_autocast_is_enabled(EM_CUDA), 0);
  ag_autocast_resume(saved);
  assert_int_equal(em_autocast_is_enabled(EM_CUDA), 1);
  assert_int_equal(em_autocast_set(EM_CUDA, 0, EM_FLOAT16), EM_OK);
  assert_int_equal(em_autocast_is_enabled(-1), 0);
  em_tensor_release(x);
  em_tensor_release(w);
}

/* The lower-precision casts, checked on the operands that an op would run with. */
static void test_lower_policy_operands(void **unused) {
  (void)unused;
  reset_autocast();
  em_tensor *x = mat(EM_FLOAT32, 2, 3, -1), *d = mat(EM_FLOAT64, 2, 3, 0), *i = NULL;
  int64_t n = 3;
  assert_int_equal(em_zeros(&i, 1, &n, EM_INT64, CPU), EM_OK);
  assert_int_equal(em_requires_grad_(x, 1), EM_OK);
  em_autocast_ops ac;
  const em_tensor *in[4] = {x, d, i, NULL};
  assert_int_equal(ag_autocast_prepare(&ac, EM_AUTOCAST_LOWER, 4, in), 0); /* off: nothing to do */
  /* bfloat16 on the CPU casts nothing: its kernels round inside (test_dnnl, amp_spec) */
  ag_autocast_force_(EM_CPU, 1, EM_BFLOAT16);
  assert_int_equal(ag_autocast_prepare(&ac, EM_AUTOCAST_LOWER, 4, in), 0);
  /* the casts themselves, on the CPU under float16 (a state only this hook can set) */
  ag_autocast_force_(EM_CPU, 1, EM_FLOAT16);
  assert_int_equal(ag_autocast_prepare(&ac, EM_AUTOCAST_LOWER, 4, in), 1);
  assert_int_equal(ac.status, EM_OK);
  assert_int_equal(em_tensor_dtype(ac.t[0]), EM_FLOAT16);
  assert_non_null(em_grad_fn_name(ac.t[0])); /* recorded: gradients reach x as float32 */
  assert_ptr_equal(ac.t[1], d); /* float64 is left alone */
  assert_ptr_equal(ac.t[2], i); /* so are integers */
  assert_null(ac.t[3]);
  assert_true(fabs(at2(ac.t[0], 1, 2) - at2(x, 1, 2)) < 1e-2);
  /* already in the autocast dtype: nothing more to do (the op's second call) */
  const em_tensor *again[1] = {ac.t[0]};
  em_autocast_ops ac2;
  assert_int_equal(ag_autocast_prepare(&ac2, EM_AUTOCAST_LOWER, 1, again), 0);
  assert_int_equal(ag_autocast_finish(&ac, EM_OK), EM_OK);
  /* an op of the lower policy on the CPU: it casts, then the CPU refuses float16 math */
  em_tensor *w = mat(EM_FLOAT32, 4, 3, 0.5), *y = NULL;
  assert_int_equal(em_nn_linear(&y, x, w, NULL), EM_ERR_DTYPE);
  assert_non_null(strstr(em_last_error(), "float16"));
  assert_null(y);
  reset_autocast();
  em_tensor_release(x);
  em_tensor_release(d);
  em_tensor_release(i);
  em_tensor_release(w);
}

/* The float32 half of the policy runs on the CPU: bfloat16 inputs are computed in float32,
 * the results are float32 and the gradients come back in bfloat16. */
static void test_fp32_policy_on_cpu(void **unused) {
  (void)unused;
  reset_autocast();
  em_tensor *x32 = mat(EM_FLOAT32, 2, 4, -1), *x = NULL, *ref = NULL;
  assert_int_equal(em_to(&x, x32, EM_BFLOAT16, CPU), EM_OK);
  assert_int_equal(em_requires_grad_(x, 1), EM_OK);
  em_tensor *xr = NULL;
  assert_int_equal(em_to(&xr, x, EM_FLOAT32, CPU), EM_OK);
  assert_int_equal(em_softmax(&ref, xr, 1, 0), EM_OK);
  em_tensor *y = NULL;
  assert_int_equal(em_ag_softmax(&y, x, 1, 0), EM_ERR_DTYPE); /* autocast off: bfloat16 has no math */
  ag_autocast_force_(EM_CPU, 1, EM_BFLOAT16);
  assert_int_equal(em_ag_softmax(&y, x, 1, 0), EM_OK);
  assert_int_equal(em_tensor_dtype(y), EM_FLOAT32);
  for (int64_t r = 0; r < 2; r++)
    for (int64_t c = 0; c < 4; c++) assert_true(fabs(at2(y, r, c) - at2(ref, r, c)) < 1e-6);
  /* a loss: cross_entropy on bfloat16 logits, against the same loss in float32 */
  em_tensor *t = NULL, *loss = NULL, *loss_ref = NULL;
  int64_t n = 2;
  assert_int_equal(em_zeros(&t, 1, &n, EM_INT64, CPU), EM_OK);
  assert_int_equal(em_nn_cross_entropy(&loss, x, t, NULL, -100, 0.1, EM_REDUCTION_MEAN, 0), EM_OK);
  assert_int_equal(em_tensor_dtype(loss), EM_FLOAT32);
  reset_autocast();
  assert_int_equal(em_requires_grad_(xr, 1), EM_OK);
  assert_int_equal(em_nn_cross_entropy(&loss_ref, xr, t, NULL, -100, 0.1, EM_REDUCTION_MEAN, 0), EM_OK);
  double lv, lr;
  assert_int_equal(em_tensor_get(loss, NULL, &lv), EM_OK);
  assert_int_equal(em_tensor_get(loss_ref, NULL, &lr), EM_OK);
  assert_true(fabs(lv - lr) < 1e-6);
  /* backward (run with autocast on: em_backward turns it off while it runs) */
  ag_autocast_force_(EM_CPU, 1, EM_BFLOAT16);
  assert_int_equal(em_backward(loss, NULL, 0), EM_OK);
  assert_int_equal(em_autocast_is_enabled(EM_CPU), 1);
  reset_autocast();
  assert_int_equal(em_backward(loss_ref, NULL, 0), EM_OK);
  em_tensor *g = em_grad(x), *g_ref = em_grad(xr);
  assert_non_null(g);
  assert_int_equal(em_tensor_dtype(g), EM_BFLOAT16);
  for (int64_t r = 0; r < 2; r++)
    for (int64_t c = 0; c < 4; c++) assert_true(fabs(at2(g, r, c) - at2(g_ref, r, c)) < 4e-3);
  reset_autocast();
  em_tensor *tmp[] = {x32, x, ref, xr, y, t, loss, loss_ref, g, g_ref};
  for (size_t k = 0; k < sizeof tmp / sizeof tmp[0]; k++) em_tensor_release(tmp[k]);
}

static void test_unscale(void **unused) {
  (void)unused;
  em_tensor *a = mat(EM_FLOAT32, 3, 4, -2), *b = mat(EM_FLOAT64, 2, 2, 1), *c = mat(EM_FLOAT32, 4, 3, 0), *ct = NULL;
  assert_int_equal(em_transpose(&ct, c, 0, 1), EM_OK); /* a strided gradient */
  em_tensor *grads[4] = {a, NULL, b, ct};
  int found = -1;
  assert_int_equal(em_amp_unscale_(4, grads, 0.5, &found), EM_OK);
  assert_int_equal(found, 0);
  assert_true(at2(a, 2, 3) == 0.5 * (-2 + 0.25 * 11));
  assert_true(at2(b, 1, 1) == 0.5 * (1 + 0.25 * 3));
  assert_true(at2(ct, 2, 1) == 0.5 * (0.25 * (1 * 3 + 2)));
  /* an inf anywhere is found (and the rest is still unscaled); so is a NaN */
  int64_t at[2] = {1, 1};
  assert_int_equal(em_tensor_set(b, at, INFINITY), EM_OK);
  assert_int_equal(em_amp_unscale_(4, grads, 0.5, &found), EM_OK);
  assert_int_equal(found, 1);
  assert_true(at2(a, 2, 3) == 0.25 * (-2 + 0.25 * 11));
  assert_int_equal(em_tensor_set(b, at, 1), EM_OK);
  assert_int_equal(em_tensor_set(a, at, NAN), EM_OK);
  assert_int_equal(em_amp_unscale_(4, grads, 1, &found), EM_OK);
  assert_int_equal(found, 1);
  assert_int_equal(em_tensor_set(a, at, 0), EM_OK);
  assert_int_equal(em_amp_unscale_(4, grads, 1, &found), EM_OK);
  assert_int_equal(found, 0);
  /* nothing to do, and the errors */
  assert_int_equal(em_amp_unscale_(0, NULL, 1, &found), EM_OK);
  assert_int_equal(found, 0);
  assert_int_equal(em_amp_unscale_(4, grads, 0, &found), EM_ERR_ARGUMENT);
  assert_int_equal(em_amp_unscale_(4, grads, INFINITY, &found), EM_ERR_ARGUMENT);
  assert_int_equal(em_amp_unscale_(4, grads, 1, NULL), EM_ERR_ARGUMENT);
  em_tensor *i = NULL;
  int64_t n = 2;
  assert_int_equal(em_zeros(&i, 1, &n, EM_INT32, CPU), EM_OK);
  em_tensor *bad[2] = {a, i};
  assert_int_equal(em_amp_unscale_(2, bad, 1, &found), EM_ERR_DTYPE);
  assert_non_null(strstr(em_last_error(), "gradient 2 of 2 is int32"));
  em_tensor *tmp[] = {a, b, c, ct, i};
  for (size_t k = 0; k < sizeof tmp / sizeof tmp[0]; k++) em_tensor_release(tmp[k]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_state_and_checks),
      cmocka_unit_test(test_lower_policy_operands),
      cmocka_unit_test(test_fp32_policy_on_cpu),
      cmocka_unit_test(test_unscale),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
