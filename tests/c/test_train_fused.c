/* test_train_fused.c - the fused CPU kernels of a training step against the separate
 * kernels they replace:
 *   - a ReLU layer's backward with its bias gradient in one pass
 *     (cpu_relu_backward_colsum_f32) against the ReLU backward followed by em_reduce's
 *     column sum: the same bits, on 1 and 2 threads, in one strip and in several;
 *   - SGD over a whole parameter list in one parallel region (the contiguous path of
 *     cpu_optim_sgd) against the same update run tensor by tensor on strided views, for
 *     every option (momentum, dampening, weight decay, nesterov, maximize, the first
 *     step, no momentum), with a parameter whose gradient is missing; and 2 threads against
 *     1 (the same bits: the split must neither skip nor repeat an element). */
#include <math.h>
#include <string.h>
#include "test_util.h"
#include "cpu/cpu_impl.h"
#include "ember/optim.h"

static int same_bits(const em_tensor *a, const em_tensor *b) {
  return em_tensor_numel(a) == em_tensor_numel(b) &&
         !memcmp(em_tensor_ptr(a), em_tensor_ptr(b), (size_t)em_tensor_numel(a) * em_dtype_size(em_tensor_dtype(a)));
}

/* ---- ReLU backward + bias gradient ---- */

static void relu_colsum_matches_two_passes(void **state) {
  (void)state;
  int saved = em_get_num_threads();
  /* the MLP's two ReLU layers, one below the parallel grain with an odd width, and one
   * wider than a strip (several strips per thread) */
  const int64_t shapes[][2] = {{128, 256}, {128, 128}, {7, 33}, {300, 600}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    em_tensor *gy = uniform_tensor(EM_FLOAT32, 2, shapes[s], -1, 1),
              *y = uniform_tensor(EM_FLOAT32, 2, shapes[s], -1, 1);
    /* some outputs exactly 0: the ReLU's gradient does not pass there either */
    float *yp = (float *)em_tensor_ptr(y);
    for (int64_t i = 0; i < em_tensor_numel(y); i += 5) yp[i] = 0;
    em_tensor *want_gx = NULL, *want_gb = NULL;
    assert_int_equal(em_empty(&want_gx, 2, shapes[s], EM_FLOAT32, CPU), EM_OK);
    assert_int_equal(cpu_relu_backward(want_gx, gy, y), EM_OK);
    int dim0 = 0;
    assert_int_equal(em_reduce(EM_SUM, &want_gb, NULL, want_gx, &dim0, 1, 0, 0), EM_OK);
    for (int threads = 1; threads <= 2; threads++) {
      em_set_num_threads(threads);
      em_tensor *gx = NULL, *gb = NULL;
      assert_int_equal(em_empty(&gx, 2, shapes[s], EM_FLOAT32, CPU), EM_OK);
      assert_int_equal(em_empty(&gb, 1, &shapes[s][1], EM_FLOAT32, CPU), EM_OK);
      cpu_relu_backward_colsum_f32((float *)em_tensor_ptr(gx), (float *)em_tensor_ptr(gb),
                                   (const float *)em_tensor_ptr(gy), (const float *)em_tensor_ptr(y), shapes[s][0],
                                   shapes[s][1]);
      if (!same_bits(gx, want_gx))
        fail_msg("[%lld, %lld] on %d threads: the masked gradient differs from the ReLU backward",
                 (long long)shapes[s][0], (long long)shapes[s][1], threads);
      if (!same_bits(gb, want_gb))
        fail_msg("[%lld, %lld] on %d threads: the bias gradient differs from em_reduce's column sum",
                 (long long)shapes[s][0], (long long)shapes[s][1], threads);
      em_tensor_release(gx), em_tensor_release(gb);
    }
    em_tensor_release(gy), em_tensor_release(y), em_tensor_release(want_gx), em_tensor_release(want_gb);
  }
  em_set_num_threads(saved);
}

/* ---- SGD over a parameter list ---- */

enum { NP = 6 };
static const int64_t SIZES[NP][2] = {{300, 250}, {1, 17}, {40, 25}, {1, 3}, {64, 33}, {20, 20}};

typedef struct {
  double lr, momentum, dampening, wd;
  int nesterov, maximize;
} sgd_opts;

/* A parameter list (param 3's gradient missing), a copy per run, three steps. strided: every
 * tensor a transposed view (the tensor-by-tensor path). */
static void run_steps(em_tensor **out_p, em_tensor **out_b, em_tensor *const *p0, em_tensor *const *g0,
                      em_tensor *const *b0, const sgd_opts *o, int strided) {
  em_tensor *p[NP], *g[NP], *b[NP];
  for (int i = 0; i < NP; i++) {
    em_tensor *src[3] = {p0[i], g0[i], b0[i]}, **dst[3] = {&p[i], &g[i], &b[i]};
    for (int k = 0; k < 3; k++) {
      if (!strided) {
        *dst[k] = clone_tensor(src[k]);
        continue;
      }
      em_tensor *tt = NULL, *store = NULL;
      assert_int_equal(em_transpose(&tt, src[k], 0, 1), EM_OK);
      assert_int_equal(em_clone(&store, tt), EM_OK); /* a copy even where the view is contiguous ([1, n]) */
      *dst[k] = NULL;
      assert_int_equal(em_transpose(dst[k], store, 0, 1), EM_OK);
      em_tensor_release(tt), em_tensor_release(store);
    }
  }
  em_tensor *grads[NP];
  for (int step = 0; step < 3; step++) {
    for (int i = 0; i < NP; i++) grads[i] = i == 3 ? NULL : g[i];
    assert_int_equal(em_optim_sgd(NP, p, grads, o->momentum != 0 ? b : NULL, o->lr, o->momentum, o->dampening, o->wd,
                                  o->nesterov, step == 0, o->maximize),
                     EM_OK);
    for (int i = 0; i < NP; i++) { /* a new gradient, in place */
      em_tensor *same = g[i];
      assert_int_equal(em_binary_scalar(EM_MUL, &same, g[i], -0.75, 0), EM_OK);
      assert_ptr_equal(same, g[i]);
    }
  }
  for (int i = 0; i < NP; i++) {
    out_p[i] = clone_tensor(p[i]), out_b[i] = clone_tensor(b[i]);
    em_tensor_release(p[i]), em_tensor_release(g[i]), em_tensor_release(b[i]);
  }
}

static double max_rel_diff(const em_tensor *a, const em_tensor *b) {
  double worst = 0;
  for (int64_t i = 0; i < em_tensor_numel(a); i++) {
    double x = tensor_flat_get(a, i), y = tensor_flat_get(b, i), d = fabs(x - y) / (1 + fabs(y));
    if (!(d <= worst)) worst = d; /* NaN too */
  }
  return worst;
}

static void sgd_list_matches_per_tensor(void **state) {
  (void)state;
  int saved = em_get_num_threads();
  const sgd_opts opts[] = {
      {0.1, 0.9, 0, 0, 0, 0},   {0.05, 0.9, 0.1, 0.01, 0, 0}, {0.1, 0.9, 0, 0.001, 1, 0},
      {0.1, 0.5, 0.2, 0, 0, 1}, {0.05, 0, 0, 0.1, 0, 0},      {0.05, 0, 0, 0, 0, 1},
  };
  for (int dt = 0; dt < 2; dt++) {
    em_dtype dtype = dt ? EM_FLOAT64 : EM_FLOAT32;
    double tol = dt ? 1e-13 : 1e-6;
    em_tensor *p0[NP], *g0[NP], *b0[NP];
    for (int i = 0; i < NP; i++) {
      p0[i] = uniform_tensor(dtype, 2, SIZES[i], -1, 1), g0[i] = uniform_tensor(dtype, 2, SIZES[i], -1, 1);
      b0[i] = uniform_tensor(dtype, 2, SIZES[i], -1, 1);
    }
    for (size_t c = 0; c < sizeof opts / sizeof *opts; c++) {
      em_tensor *p[3][NP], *b[3][NP];
      em_set_num_threads(2);
      run_steps(p[0], b[0], p0, g0, b0, &opts[c], 0); /* the list path, 2 threads */
      em_set_num_threads(1);
      run_steps(p[1], b[1], p0, g0, b0, &opts[c], 0); /* the list path, 1 thread */
      em_set_num_threads(2);
      run_steps(p[2], b[2], p0, g0, b0, &opts[c], 1); /* tensor by tensor, strided */
      for (int i = 0; i < NP; i++) {
        if (!same_bits(p[0][i], p[1][i]) || !same_bits(b[0][i], b[1][i]))
          fail_msg("sgd case %zu %s param %d: 2 threads differ from 1", c, em_dtype_name(dtype), i);
        double e = max_rel_diff(p[0][i], p[2][i]), eb = opts[c].momentum != 0 ? max_rel_diff(b[0][i], b[2][i]) : 0;
        if (!(e <= tol && eb <= tol))
          fail_msg("sgd case %zu %s param %d: the list path differs from the per-tensor one by %g (buffer %g)", c,
                   em_dtype_name(dtype), i, e, eb);
        if (i == 3 && !same_bits(p[0][i], p0[i])) fail_msg("sgd case %zu: a parameter without a gradient moved", c);
        if (i != 3 && same_bits(p[0][i], p0[i])) fail_msg("sgd case %zu: param %d did not move", c, i);
      }
      for (int r = 0; r < 3; r++)
        for (int i = 0; i < NP; i++) em_tensor_release(p[r][i]), em_tensor_release(b[r][i]);
    }
    for (int i = 0; i < NP; i++) em_tensor_release(p0[i]), em_tensor_release(g0[i]), em_tensor_release(b0[i]);
  }
  em_set_num_threads(saved);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(relu_colsum_matches_two_passes),
      cmocka_unit_test(sgd_list_matches_per_tensor),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
