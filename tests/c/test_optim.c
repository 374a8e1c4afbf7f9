/* test_optim.c - fused optimizer updates (ember/optim.h) against PyTorch's update
 * formulas, evaluated in float64 numpy over three steps (the generator is in the comment
 * of each table), the parallel and strided paths against the contiguous one, and every
 * error case. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "test_util.h"
#include "ember/optim.h"

/* The parameter and the three gradients every reference below starts from:
 *   p0 = [0.5, -1, 2, 0.25]; g1 = [0.1, -0.2, 0.3, 0.4]; g2 = [-0.5, 0.25, 0, 1];
 *   g3 = [0.3, 0.3, -0.7, -0.1]
 * The references come from numpy re-implementations of torch.optim's single-tensor
 * SGD/Adam (float64), e.g. SGD: g = -g if maximize; g += wd*p; buf = g (step 1) else
 * momentum*buf + (1-dampening)*g; g = g + momentum*buf if nesterov else buf; p -= lr*g. */
static const double P0[4] = {0.5, -1.0, 2.0, 0.25};
static const double G[3][4] = {{0.1, -0.2, 0.3, 0.4}, {-0.5, 0.25, 0.0, 1.0}, {0.3, 0.3, -0.7, -0.1}};

static em_tensor *vec(em_dtype dtype, int64_t n, const double *values) {
  em_tensor *t = NULL;
  assert_int_equal(em_zeros(&t, 1, &n, dtype, CPU), EM_OK);
  for (int64_t i = 0; values && i < n; i++) assert_int_equal(em_tensor_set(t, &i, values[i]), EM_OK);
  return t;
}

static void expect_values(const char *what, const em_tensor *t, const double *expected, int64_t n, double tol) {
  for (int64_t i = 0; i < n; i++) {
    double v;
    assert_int_equal(em_tensor_get(t, &i, &v), EM_OK);
    if (!(fabs(v - expected[i]) <= tol * (1 + fabs(expected[i]))))
      fail_msg("%s[%lld]: got %.17g, expected %.17g", what, (long long)i, v, expected[i]);
  }
}

/* ---- SGD ---- */

typedef struct {
  double lr, momentum, dampening, wd;
  int nesterov, maximize;
  double p[4], buf[4];
} sgd_case;

static const sgd_case SGD_CASES[] = {
    {0.1,
     0.9,
     0.1,
     0.01,
     0,
     0,
     {0.52873580649500007, -1.01028236299, 1.9711710340799999, -0.021511175102500071},
     {-0.041263564949999998, 0.28563462989999999, -0.33742234079999994, 1.0484740010250002}},
    {0.1,
     0.9,
     0,
     0,
     1,
     0,
     {0.54410999999999998, -1.0559699999999999, 2.02983, -0.13956000000000007},
     {-0.069000000000000006, 0.36299999999999999, -0.45699999999999996, 1.1240000000000001}},
    {0.05, 0, 0, 0.1, 0, 1, {0.48761256249999996, -0.96753762499999985, 1.9500001249999999, 0.31081921875000001}, {0}},
    {0.1,
     0.5,
     0,
     0,
     0,
     1,
     {0.47250000000000003, -0.96750000000000014, 1.9824999999999999, 0.46000000000000002},
     {-0.074999999999999983, -0.375, 0.625, -0.5}},
};

static void run_sgd_case(const sgd_case *c, em_dtype dtype, double tol) {
  em_tensor *p = vec(dtype, 4, P0), *buf = vec(dtype, 4, NULL);
  for (int s = 0; s < 3; s++) {
    em_tensor *g = vec(dtype, 4, G[s]);
    em_tensor *bufs[1] = {buf};
    assert_int_equal(em_optim_sgd(1, &p, &g, c->momentum != 0 ? bufs : NULL, c->lr, c->momentum, c->dampening, c->wd,
                                  c->nesterov, s == 0, c->maximize),
                     EM_OK);
    em_tensor_release(g);
  }
  expect_values("sgd param", p, c->p, 4, tol);
  if (c->momentum != 0) expect_values("sgd momentum buffer", buf, c->buf, 4, tol);
  em_tensor_release(p);
  em_tensor_release(buf);
}

static void test_sgd_reference(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof SGD_CASES / sizeof SGD_CASES[0]; i++) {
    run_sgd_case(&SGD_CASES[i], EM_FLOAT64, 1e-14);
    run_sgd_case(&SGD_CASES[i], EM_FLOAT32, 2e-6);
  }
}

/* A parameter whose gradient is NULL is skipped (and needs no state). */
static void test_sgd_skips_missing_grads(void **state) {
  (void)state;
  em_tensor *p1 = vec(EM_FLOAT64, 4, P0), *p2 = vec(EM_FLOAT64, 4, P0), *g2 = vec(EM_FLOAT64, 4, G[0]);
  em_tensor *b2 = vec(EM_FLOAT64, 4, NULL);
  em_tensor *params[2] = {p1, p2}, *grads[2] = {NULL, g2}, *bufs[2] = {NULL, b2};
  assert_int_equal(em_optim_sgd(2, params, grads, bufs, 0.1, 0.9, 0, 0, 0, 1, 0), EM_OK);
  expect_values("untouched", p1, P0, 4, 0);
  double want[4];
  for (int i = 0; i < 4; i++) want[i] = P0[i] - 0.1 * G[0][i];
  expect_values("updated", p2, want, 4, 1e-15);
  expect_values("buffer = g on the first step", b2, G[0], 4, 0);
  /* Nothing to do at all is fine too. */
  assert_int_equal(em_optim_sgd(0, NULL, NULL, NULL, 0.1, 0, 0, 0, 0, 1, 0), EM_OK);
  em_tensor_release(p1), em_tensor_release(p2), em_tensor_release(g2), em_tensor_release(b2);
}

/* ---- Adam / AdamW ---- */

typedef struct {
  double lr, beta1, beta2, eps, wd;
  int decoupled, maximize;
  double p[4], m[4], v[4];
} adam_case;

static const adam_case ADAM_CASES[] = {
    {0.01,
     0.9,
     0.999,
     1e-8,
     0.1,
     0,
     0,
     {0.494242581482429, -0.98889966828037235, 1.9803079291094772, 0.22372133455927798},
     {0.0065094769055328225, 0.009416376458504655, 0.0082202188902383774, 0.1188905910939992},
     {0.00034779921499502491, 0.00015310539193696444, 0.00054096306181059916, 0.0012337117475176742}},
    {0.01,
     0.9,
     0.999,
     1e-8,
     0.1,
     1,
     0,
     {0.49524439264790915, -0.99393588977228464, 1.9811660325799849, 0.22324115842096612},
     {-0.0069000000000000034, 0.036299999999999992, -0.045699999999999991, 0.11239999999999997},
     {0.00034973001000000031, 0.00019235754000000016, 0.00057982009000000039, 0.0011686801600000009}},
    {0.1,
     0.8,
     0.99,
     1e-6,
     0,
     0,
     1,
     {0.53111909482529462, -1.0178177155647026, 2.1158255174319285, 0.50889620889047193},
     {0.0072000000000000119, -0.07439999999999998, 0.10159999999999997, -0.19119999999999998},
     {0.0034730100000000029, 0.0019107900000000016, 0.0057820900000000036, 0.01156816000000001}},
};

static void run_adam_case(const adam_case *c, em_dtype dtype, double tol) {
  em_tensor *p = vec(dtype, 4, P0), *m = vec(dtype, 4, NULL), *v = vec(dtype, 4, NULL);
  for (int s = 0; s < 3; s++) {
    em_tensor *g = vec(dtype, 4, G[s]);
    assert_int_equal(
        em_optim_adam(1, &p, &g, &m, &v, c->lr, c->beta1, c->beta2, c->eps, c->wd, c->decoupled, s + 1, c->maximize),
        EM_OK);
    em_tensor_release(g);
  }
  expect_values("adam param", p, c->p, 4, tol);
  expect_values("adam exp_avg", m, c->m, 4, tol);
  expect_values("adam exp_avg_sq", v, c->v, 4, tol);
  em_tensor_release(p), em_tensor_release(m), em_tensor_release(v);
}

static void test_adam_reference(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof ADAM_CASES / sizeof ADAM_CASES[0]; i++) {
    run_adam_case(&ADAM_CASES[i], EM_FLOAT64, 1e-12);
    run_adam_case(&ADAM_CASES[i], EM_FLOAT32, 2e-5);
  }
}

/* ---- large and strided tensors: the parallel loop and the strided path ---- */

static void expect_close(const char *what, const em_tensor *a, const em_tensor *b, double tol) {
  em_tensor *d = NULL, *mx = NULL;
  assert_int_equal(em_binary(EM_SUB, &d, a, b), EM_OK);
  assert_int_equal(em_norm(&mx, d, INFINITY, NULL, 0, 0), EM_OK);
  double v;
  assert_int_equal(em_tensor_item(mx, &v), EM_OK);
  if (!(v <= tol)) fail_msg("%s: max difference %g > %g", what, v, tol);
  em_tensor_release(d), em_tensor_release(mx);
}

/* A [300, 250] problem (above the parallel grain) in three layouts: contiguous on 2
 * threads, contiguous on 1 thread, and every tensor a transposed view. SGD results are
 * also checked element by element against a scalar loop. */
static void test_parallel_and_strided(void **state) {
  (void)state;
  int saved_threads = em_get_num_threads();
  const int64_t sz[2] = {300, 250};
  for (int dt = 0; dt < 2; dt++) {
    em_dtype dtype = dt ? EM_FLOAT64 : EM_FLOAT32;
    double tol = dt ? 1e-13 : 1e-5;
    em_tensor *p = uniform_tensor(dtype, 2, sz, -1, 1), *g = uniform_tensor(dtype, 2, sz, -1, 1);
    em_tensor *b = uniform_tensor(dtype, 2, sz, -1, 1), *v = uniform_tensor(dtype, 2, sz, 0, 1);
    /* contiguous, 2 threads */
    em_set_num_threads(2);
    em_tensor *p1 = clone_tensor(p), *b1 = clone_tensor(b), *m1 = clone_tensor(b), *v1 = clone_tensor(v),
              *q1 = clone_tensor(p);
    assert_int_equal(em_optim_sgd(1, &p1, &g, &b1, 0.1, 0.9, 0.2, 0.01, 0, 0, 0), EM_OK);
    assert_int_equal(em_optim_adam(1, &q1, &g, &m1, &v1, 0.01, 0.9, 0.999, 1e-8, 0.01, 1, 5, 0), EM_OK);
    /* scalar reference for SGD */
    int64_t n = em_tensor_numel(p);
    for (int64_t i = 0; i < n; i += 997) {
      int64_t idx[2] = {i / 250, i % 250};
      double pv, gv, bv, got_p, got_b;
      em_tensor_get(p, idx, &pv), em_tensor_get(g, idx, &gv), em_tensor_get(b, idx, &bv);
      em_tensor_get(p1, idx, &got_p), em_tensor_get(b1, idx, &got_b);
      double d = gv + 0.01 * pv, nb = 0.9 * bv + 0.8 * d, np = pv - 0.1 * nb;
      if (fabs(got_b - nb) > tol || fabs(got_p - np) > tol)
        fail_msg("sgd element %lld: got p %.10g b %.10g, expected p %.10g b %.10g", (long long)i, got_p, got_b, np, nb);
    }
    /* contiguous, 1 thread: same results */
    em_set_num_threads(1);
    em_tensor *p2 = clone_tensor(p), *b2 = clone_tensor(b), *m2 = clone_tensor(b), *v2 = clone_tensor(v),
              *q2 = clone_tensor(p);
    assert_int_equal(em_optim_sgd(1, &p2, &g, &b2, 0.1, 0.9, 0.2, 0.01, 0, 0, 0), EM_OK);
    assert_int_equal(em_optim_adam(1, &q2, &g, &m2, &v2, 0.01, 0.9, 0.999, 1e-8, 0.01, 1, 5, 0), EM_OK);
    expect_close("sgd 1 vs 2 threads", p1, p2, tol), expect_close("adam 1 vs 2 threads", q1, q2, tol);
    /* transposed views: the data laid out as [250, 300] and viewed back as [300, 250] */
    em_set_num_threads(2);
    em_tensor *views[6];
    em_tensor *srcs[6] = {p, g, b, b, v, p};
    for (int k = 0; k < 6; k++) {
      em_tensor *tt = NULL, *store = NULL;
      assert_int_equal(em_transpose(&tt, srcs[k], 0, 1), EM_OK); /* [250, 300] view */
      assert_int_equal(em_contiguous(&store, tt), EM_OK); /* packed [250, 300] */
      views[k] = NULL;
      assert_int_equal(em_transpose(&views[k], store, 0, 1), EM_OK); /* strided [300, 250] */
      assert_false(em_tensor_is_contiguous(views[k]));
      em_tensor_release(tt), em_tensor_release(store);
    }
    assert_int_equal(em_optim_sgd(1, &views[0], &views[1], &views[2], 0.1, 0.9, 0.2, 0.01, 0, 0, 0), EM_OK);
    assert_int_equal(
        em_optim_adam(1, &views[5], &views[1], &views[3], &views[4], 0.01, 0.9, 0.999, 1e-8, 0.01, 1, 5, 0), EM_OK);
    expect_close("sgd strided param", views[0], p1, tol), expect_close("sgd strided buffer", views[2], b1, tol);
    expect_close("adam strided param", views[5], q1, tol), expect_close("adam strided exp_avg", views[3], m1, tol);
    expect_close("adam strided exp_avg_sq", views[4], v1, tol);
    for (int k = 0; k < 6; k++) em_tensor_release(views[k]);
    em_tensor *all[] = {p, g, b, v, p1, b1, m1, v1, q1, p2, b2, m2, v2, q2};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) em_tensor_release(all[k]);
  }
  em_set_num_threads(saved_threads);
}

/* ---- clip_grad_norm ---- */

static void test_clip_grad_norm(void **state) {
  (void)state;
  /* grads [3, 4] and [12]; max_norm 5; references from numpy (PyTorch's formula:
   * coef = max_norm / (total + 1e-6), applied when < 1). */
  static const struct {
    double norm_type, total, g1[2], g2;
  } cases[] = {
      {2.0, 13, {1.1538460650887643, 1.5384614201183524}, 4.6153842603550572},
      {INFINITY, 12, {1.249999895833342, 1.6666665277777895}, 4.9999995833333681},
      {1.0, 19, {0.78947364265928199, 1.0526315235457093}, 3.157894570637128},
      {3.0, 12.207054953820636, {1.2287975132370237, 1.6383966843160316}, 4.9151900529480947},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    for (int dt = 0; dt < 2; dt++) {
      em_dtype dtype = dt ? EM_FLOAT64 : EM_FLOAT32;
      double tol = dt ? 1e-14 : 1e-6;
      em_tensor *g1 = vec(dtype, 2, (double[]){3, 4}), *g2 = vec(dtype, 1, (double[]){12});
      em_tensor *grads[3] = {g1, NULL, g2};
      double total = -1;
      assert_int_equal(em_optim_clip_grad_norm(3, grads, 5.0, cases[c].norm_type, &total), EM_OK);
      if (fabs(total - cases[c].total) > tol * cases[c].total)
        fail_msg("norm_type %g: total %.17g, expected %.17g", cases[c].norm_type, total, cases[c].total);
      expect_values("clipped g1", g1, cases[c].g1, 2, tol);
      expect_values("clipped g2", g2, &cases[c].g2, 1, tol);
      em_tensor_release(g1), em_tensor_release(g2);
    }
  }
  /* Below the limit: untouched. */
  em_tensor *g = vec(EM_FLOAT32, 2, (double[]){3, 4});
  double total;
  assert_int_equal(em_optim_clip_grad_norm(1, &g, 10, 2, &total), EM_OK);
  assert_true(fabs(total - 5) < 1e-6);
  expect_values("unclipped", g, (double[]){3, 4}, 2, 0);
  /* A large gradient: the parallel sum, against the closed form (sum of i^2). */
  int64_t n = 100000;
  em_tensor *big = NULL;
  assert_int_equal(em_arange(&big, 0, (double)n, 1, EM_FLOAT32, CPU), EM_OK);
  em_set_num_threads(2);
  assert_int_equal(em_optim_clip_grad_norm(1, &big, INFINITY, 2, &total), EM_OK);
  double want = sqrt((double)(n - 1) * n * (2 * n - 1) / 6);
  if (fabs(total - want) > 1e-12 * want) fail_msg("large norm %.17g, expected %.17g", total, want);
  assert_int_equal(em_optim_clip_grad_norm(1, &big, INFINITY, INFINITY, &total), EM_OK);
  assert_true(total == (double)(n - 1));
  /* No gradients at all: norm 0. */
  em_tensor *none[1] = {NULL};
  assert_int_equal(em_optim_clip_grad_norm(1, none, 1, 2, &total), EM_OK);
  assert_true(total == 0);
  em_tensor_release(g), em_tensor_release(big);
}

/* ---- errors: every one names the op and what was wrong, and changes nothing ---- */

static void test_errors(void **state) {
  (void)state;
  em_tensor *p = vec(EM_FLOAT32, 4, P0), *g = vec(EM_FLOAT32, 4, G[0]), *buf = vec(EM_FLOAT32, 4, NULL);
  em_tensor *g3 = vec(EM_FLOAT32, 3, G[0]), *g64 = vec(EM_FLOAT64, 4, G[0]), *b3 = vec(EM_FLOAT32, 3, NULL);
  em_tensor *pi = vec(EM_INT64, 4, P0), *p16 = NULL;
  assert_int_equal(em_to(&p16, p, EM_FLOAT16, CPU), EM_OK);
  em_tensor *p_ok = vec(EM_FLOAT32, 4, P0);

  /* hyper-parameters */
  expect_error(em_optim_sgd(1, &p, &g, NULL, -0.1, 0, 0, 0, 0, 1, 0), EM_ERR_ARGUMENT, "sgd: lr is -0.1");
  expect_error(em_optim_sgd(1, &p, &g, NULL, NAN, 0, 0, 0, 0, 1, 0), EM_ERR_ARGUMENT, "sgd: lr is nan");
  expect_error(em_optim_sgd(1, &p, &g, &buf, 0.1, -0.5, 0, 0, 0, 1, 0), EM_ERR_ARGUMENT, "momentum is -0.5");
  expect_error(em_optim_sgd(1, &p, &g, &buf, 0.1, 0.9, 1.5, 0, 0, 1, 0), EM_ERR_ARGUMENT,
               "dampening is 1.5, expected a number in [0, 1]");
  expect_error(em_optim_sgd(1, &p, &g, NULL, 0.1, 0, 0, -1, 0, 1, 0), EM_ERR_ARGUMENT, "weight_decay is -1");
  expect_error(em_optim_sgd(1, &p, &g, &buf, 0.1, 0.9, 0.1, 0, 1, 1, 0), EM_ERR_ARGUMENT,
               "nesterov momentum requires momentum > 0 and dampening = 0");
  expect_error(em_optim_sgd(1, &p, &g, NULL, 0.1, 0, 0, 0, 1, 1, 0), EM_ERR_ARGUMENT, "nesterov");
  expect_error(em_optim_sgd(1, &p, &g, NULL, 0.1, 0.9, 0, 0, 0, 1, 0), EM_ERR_ARGUMENT, "no momentum buffers");
  expect_error(em_optim_sgd(-1, &p, &g, NULL, 0.1, 0, 0, 0, 0, 1, 0), EM_ERR_ARGUMENT, "expected >= 0");
  expect_error(em_optim_adam(1, &p, &g, &buf, &buf, 0.1, 1.0, 0.999, 1e-8, 0, 0, 1, 0), EM_ERR_ARGUMENT,
               "adam: beta1 is 1, expected a number in [0, 1)");
  expect_error(em_optim_adam(1, &p, &g, &buf, &buf, 0.1, 0.9, -0.1, 1e-8, 0, 1, 1, 0), EM_ERR_ARGUMENT,
               "adamw: beta2 is -0.1");
  expect_error(em_optim_adam(1, &p, &g, &buf, &buf, 0.1, 0.9, 0.999, -1, 0, 0, 1, 0), EM_ERR_ARGUMENT, "eps is -1");
  expect_error(em_optim_adam(1, &p, &g, &buf, &buf, 0.1, 0.9, 0.999, 1e-8, 0, 0, 0, 0), EM_ERR_ARGUMENT,
               "adam: step is 0, expected >= 1");
  expect_error(em_optim_adam(1, &p, &g, NULL, &buf, 0.1, 0.9, 0.999, 1e-8, 0, 0, 1, 0), EM_ERR_ARGUMENT,
               "exp_avg and exp_avg_sq");

  /* tensors; the first parameter is valid and must stay untouched when the second fails */
  em_tensor *params[2] = {p_ok, p}, *grads[2] = {g, g3}, *bufs[2] = {buf, buf};
  expect_error(em_optim_sgd(2, params, grads, bufs, 0.1, 0.9, 0, 0, 0, 1, 0), EM_ERR_SHAPE,
               "sgd: parameter 2 of 2 has shape [4] but its gradient has shape [3]");
  expect_values("untouched after an error", p_ok, P0, 4, 0);
  expect_values("buffer untouched after an error", buf, (double[]){0, 0, 0, 0}, 4, 0);
  grads[1] = g64;
  expect_error(em_optim_sgd(2, params, grads, NULL, 0.1, 0, 0, 0, 0, 1, 0), EM_ERR_DTYPE,
               "sgd: parameter 2 of 2 is float32 but its gradient is float64");
  grads[1] = g, bufs[1] = b3;
  expect_error(em_optim_sgd(2, params, grads, bufs, 0.1, 0.9, 0, 0, 0, 1, 0), EM_ERR_SHAPE,
               "parameter 2 of 2 has shape [4] but its momentum buffer has shape [3]");
  bufs[1] = NULL;
  expect_error(em_optim_sgd(2, params, grads, bufs, 0.1, 0.9, 0, 0, 0, 1, 0), EM_ERR_ARGUMENT,
               "parameter 2 of 2 has a gradient but no momentum buffer");
  expect_values("untouched after the errors", p_ok, P0, 4, 0);
  expect_error(em_optim_sgd(1, &pi, &g, NULL, 0.1, 0, 0, 0, 0, 1, 0), EM_ERR_DTYPE,
               "sgd: parameter 1 of 1 is int64, expected float32 or float64");
  expect_error(em_optim_sgd(1, &p16, &g, NULL, 0.1, 0, 0, 0, 0, 1, 0), EM_ERR_DTYPE, "is float16");
  em_tensor *exp_sq[1] = {b3};
  expect_error(em_optim_adam(1, &p, &g, &buf, exp_sq, 0.1, 0.9, 0.999, 1e-8, 0, 0, 1, 0), EM_ERR_SHAPE,
               "adam: parameter 1 of 1 has shape [4] but its exp_avg_sq has shape [3]");
  em_tensor *nullp[1] = {NULL};
  expect_error(em_optim_sgd(1, nullp, &g, NULL, 0.1, 0, 0, 0, 0, 1, 0), EM_ERR_ARGUMENT, "parameter 1 of 1 is NULL");

  /* clip_grad_norm */
  double total;
  expect_error(em_optim_clip_grad_norm(1, &g, -1, 2, &total), EM_ERR_ARGUMENT, "clip_grad_norm: max_norm is -1");
  expect_error(em_optim_clip_grad_norm(1, &g, 1, 0, &total), EM_ERR_ARGUMENT, "norm_type is 0");
  expect_error(em_optim_clip_grad_norm(1, &pi, 1, 2, &total), EM_ERR_DTYPE,
               "clip_grad_norm: gradient 1 of 1 is int64, expected float32 or float64");
  expect_error(em_optim_clip_grad_norm(1, &g, 1, 2, NULL), EM_ERR_ARGUMENT, "total_norm");
  expect_values("gradient untouched after the errors", g, G[0], 4, 1e-7);

  /* a freed tensor */
  em_tensor *freed = vec(EM_FLOAT32, 4, P0);
  assert_int_equal(em_tensor_free(freed), EM_OK);
  expect_error(em_optim_sgd(1, &freed, &g, NULL, 0.1, 0, 0, 0, 0, 1, 0), EM_ERR_ARGUMENT, "freed");

  em_tensor *all[] = {p, g, buf, g3, g64, b3, pi, p16, p_ok, freed};
  for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) em_tensor_release(all[k]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sgd_reference),  cmocka_unit_test(test_sgd_skips_missing_grads),
      cmocka_unit_test(test_adam_reference), cmocka_unit_test(test_parallel_and_strided),
      cmocka_unit_test(test_clip_grad_norm), cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
