/* test_dist.c - the C side of ember/dist.h in one process: launcher discovery from each
 * launcher's variables, the 'self' backend (a world of one), handles, groups, the reducer
 * built on one rank, and the error statuses and messages of bad calls. The multi-process
 * behaviour is tested through mpirun in tests/distributed/ (and torchrun-style, over Gloo, by
 * tests/distributed/torchrun.py, real_torchrun.py and gloo_failures.py). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "test_util.h"
#include "ember/autograd.h"
#include "ember/cuda.h"
#include "ember/dist.h"

static const char *launcher_vars[] = {"OMPI_COMM_WORLD_RANK",
                                      "OMPI_COMM_WORLD_SIZE",
                                      "OMPI_COMM_WORLD_LOCAL_RANK",
                                      "OMPI_COMM_WORLD_LOCAL_SIZE",
                                      "PMI_RANK",
                                      "PMI_SIZE",
                                      "MPI_LOCALRANKID",
                                      "MPI_LOCALNRANKS",
                                      "SLURM_PROCID",
                                      "SLURM_NTASKS",
                                      "SLURM_STEP_NUM_TASKS",
                                      "SLURM_LOCALID",
                                      "SLURM_STEP_TASKS_PER_NODE",
                                      "SLURM_TASKS_PER_NODE",
                                      "RANK",
                                      "WORLD_SIZE",
                                      "LOCAL_RANK",
                                      "LOCAL_WORLD_SIZE",
                                      "MASTER_ADDR",
                                      "MASTER_PORT"};

static void clear_launcher(void) {
  for (size_t i = 0; i < sizeof launcher_vars / sizeof *launcher_vars; i++) unsetenv(launcher_vars[i]);
}

static void check_env(int rank, int size, int local, int local_size, const char *launcher) {
  em_dist_env e;
  em_dist_env_detect(&e);
  assert_int_equal(e.rank, rank);
  assert_int_equal(e.world_size, size);
  assert_int_equal(e.local_rank, local);
  assert_int_equal(e.local_size, local_size);
  assert_string_equal(e.launcher, launcher);
}

static void test_env_detect(void **state) {
  (void)state;
  clear_launcher();
  check_env(0, 1, 0, 1, "none");
  setenv("RANK", "3", 1), setenv("WORLD_SIZE", "8", 1), setenv("LOCAL_RANK", "1", 1),
      setenv("LOCAL_WORLD_SIZE", "2", 1);
  check_env(3, 8, 1, 2, "torchrun");
  setenv("SLURM_PROCID", "5", 1), setenv("SLURM_NTASKS", "6", 1), setenv("SLURM_LOCALID", "2", 1);
  setenv("SLURM_TASKS_PER_NODE", "3(x2)", 1);
  check_env(5, 6, 2, 3, "slurm"); /* Slurm before torchrun's variables */
  setenv("PMI_RANK", "1", 1), setenv("PMI_SIZE", "4", 1), setenv("MPI_LOCALRANKID", "1", 1);
  setenv("MPI_LOCALNRANKS", "4", 1);
  check_env(1, 4, 1, 4, "pmi");
  setenv("OMPI_COMM_WORLD_RANK", "2", 1), setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1), setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1", 1);
  check_env(2, 3, 0, 1, "openmpi");
  setenv("OMPI_COMM_WORLD_SIZE", "x", 1); /* malformed: the next launcher's variables */
  check_env(1, 4, 1, 4, "pmi");
  clear_launcher();
  /* torchrun-style with several processes and no MPI: 'auto' takes Gloo, whose rendezvous
   * is the store rank 0 hosts at MASTER_ADDR:MASTER_PORT. Rank 1 with nobody listening
   * there: a timeout that names the address (without the Gloo plugin, an error saying so).
   * tests/distributed/gloo_failures.py covers the rest with real processes. */
  setenv("RANK", "1", 1), setenv("WORLD_SIZE", "2", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1), setenv("MASTER_PORT", "9", 1);
  em_status st = em_dist_init("auto", 0.3);
  assert_true(st == EM_ERR_RUNTIME || st == EM_ERR_UNSUPPORTED);
  if (st == EM_ERR_RUNTIME)
    assert_non_null(strstr(em_last_error(),
                           "rank 1 could not reach rank 0's store at MASTER_ADDR:MASTER_PORT = 127.0.0.1:9 "
                           "within 0.3 s"));
  else assert_non_null(strstr(em_last_error(), "the Gloo backend is not available"));
  assert_false(em_dist_is_initialized());
  setenv("RANK", "2", 1); /* checked before anything starts */
  st = em_dist_init("gloo", 0.3);
  if (st != EM_ERR_UNSUPPORTED) {
    assert_int_equal(st, EM_ERR_ARGUMENT);
    assert_non_null(strstr(em_last_error(), "RANK=2 is outside [0, WORLD_SIZE=2)"));
  }
  assert_false(em_dist_is_initialized());
  /* the home-made transport's names point to its replacement */
  assert_int_equal(em_dist_init("tcp", 0.3), EM_ERR_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "backend 'tcp' is gone"));
  assert_non_null(strstr(em_last_error(), "'gloo'"));
  clear_launcher();
}

/* dist.init{backend = 'nccl'} where NCCL cannot run (no GPU here; or no CUDA plugin, or one
 * built without NCCL): a clear error that says which, before any backend starts. */
static void check_nccl_refused(void) {
  em_status st = em_dist_init("nccl", 0);
  const char *msg = em_last_error();
  assert_true(st == EM_ERR_DEVICE || st == EM_ERR_UNSUPPORTED);
  assert_non_null(strstr(msg, "dist.init: backend 'nccl' is not available: "));
  if (st == EM_ERR_DEVICE) assert_non_null(strstr(msg, "no CUDA device is available"));
  else assert_true(strstr(msg, "CUDA backend is not built") || strstr(msg, "built without NCCL"));
}

static void test_backend_selection(void **state) {
  (void)state;
  clear_launcher();
  if (em_cuda_device_count() > 0) skip(); /* 'nccl' would start: tests/distributed/nccl_*.lua cover it */
  check_nccl_refused();
  assert_false(em_dist_is_initialized()); /* nothing was started */
  assert_null(em_dist_device_backend_name(EM_CUDA));
  /* torchrun-style several processes without MPI: NCCL is refused before the rendezvous
   * (Gloo, which would carry its id) starts */
  setenv("RANK", "1", 1), setenv("WORLD_SIZE", "2", 1), setenv("LOCAL_RANK", "1", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1), setenv("MASTER_PORT", "9", 1);
  check_nccl_refused();
  assert_false(em_dist_is_initialized());
  clear_launcher();
  assert_int_equal(em_dist_init("bogus", 0), EM_ERR_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "expected auto, mpi, gloo, self or nccl"));
  assert_false(em_dist_is_initialized());
}

static em_tensor *vec(int64_t n, em_dtype dtype) {
  em_tensor *t = NULL;
  assert_int_equal(em_ones(&t, 1, &n, dtype, CPU), EM_OK);
  return t;
}

static void test_self_world(void **state) {
  (void)state;
  assert_null(em_dist_world());
  em_tensor *t = vec(4, EM_FLOAT32), *out = vec(4, EM_FLOAT32), *bad = vec(5, EM_FLOAT32);
  assert_int_equal(em_dist_all_reduce(NULL, t, EM_DIST_SUM, NULL), EM_ERR_RUNTIME);
  assert_non_null(strstr(em_last_error(), "call dist.init first"));
  assert_int_equal(em_dist_init("bogus", 0), EM_ERR_ARGUMENT);
  if (em_cuda_device_count() == 0) check_nccl_refused();
  assert_null(em_dist_device_backend_name(EM_CPU));
  assert_int_equal(em_dist_init("self", 5), EM_OK);
  assert_int_equal(em_dist_init("auto", 0), EM_OK); /* again: no-op */
  assert_string_equal(em_dist_backend_name(), "self");
  /* a world of one takes CUDA tensors on the self backend too (no communicator needed) */
  assert_string_equal(em_dist_device_backend_name(EM_CPU), "self");
  assert_string_equal(em_dist_device_backend_name(EM_CUDA), "self");
  assert_null(em_dist_device_backend_name(7));
  /* switching is refused (without a GPU, 'nccl' itself is refused first) */
  em_status switched = em_dist_init("nccl", 0);
  if (em_cuda_device_count() > 0) {
    assert_int_equal(switched, EM_ERR_ARGUMENT);
    assert_non_null(strstr(em_last_error(), "already initialised with backend 'self', cannot switch to 'nccl'"));
  } else {
    assert_true(switched == EM_ERR_DEVICE || switched == EM_ERR_UNSUPPORTED);
  }
  em_dist_group *w = em_dist_world();
  assert_int_equal(em_dist_rank(w), 0);
  assert_int_equal(em_dist_size(w), 1);
  assert_true(em_dist_timeout(w) == 5.0);
  assert_int_equal(em_dist_set_timeout(w, 0), EM_ERR_ARGUMENT);

  em_dist_work *h = NULL;
  assert_int_equal(em_dist_all_reduce(w, t, EM_DIST_AVG, &h), EM_OK);
  assert_int_equal(em_dist_work_test(h), 1);
  assert_int_equal(em_dist_work_wait(h, 1), EM_OK);
  em_dist_work_release(h);
  assert_int_equal(em_dist_all_gather(w, out, t, NULL), EM_OK);
  assert_int_equal(em_dist_reduce_scatter(w, out, t, EM_DIST_MAX, NULL), EM_OK);
  assert_int_equal(em_dist_barrier(w, NULL), EM_OK);
  assert_int_equal(em_dist_broadcast(w, t, 0, NULL), EM_OK);

  /* errors: status and message */
  assert_int_equal(em_dist_all_gather(w, bad, t, NULL), EM_ERR_SHAPE);
  assert_non_null(strstr(em_last_error(), "all_gather: the output has 5 elements, expected 4"));
  assert_int_equal(em_dist_all_reduce(w, t, (em_dist_redop)9, NULL), EM_ERR_ARGUMENT);
  assert_int_equal(em_dist_broadcast(w, t, 1, NULL), EM_ERR_INDEX);
  assert_int_equal(em_dist_send(w, t, 0, 0, NULL), EM_ERR_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "send: rank 0 cannot send to itself"));
  em_tensor *ints = vec(3, EM_INT64);
  assert_int_equal(em_dist_all_reduce(w, ints, EM_DIST_AVG, NULL), EM_ERR_DTYPE);
  assert_int_equal(em_dist_all_reduce(w, ints, EM_DIST_PRODUCT, NULL), EM_OK);
  assert_int_equal(em_dist_work_wait(NULL, 0), EM_ERR_ARGUMENT);
  assert_int_equal(em_dist_work_test(NULL), -1);
  assert_string_equal(em_dist_redop_name(EM_DIST_AVG), "avg");

  /* groups */
  em_dist_group *g = NULL;
  int one = 0, two[2] = {0, 0};
  assert_int_equal(em_dist_new_group(&g, w, 2, two), EM_ERR_ARGUMENT);
  assert_int_equal(em_dist_new_group(&g, NULL, 1, &one), EM_OK);
  assert_int_equal(em_dist_rank(g), 0);
  assert_int_equal(em_dist_world_rank_of(g, 0), 0);
  assert_int_equal(em_dist_world_rank_of(g, 1), -1);
  assert_int_equal(em_dist_all_reduce(g, t, EM_DIST_SUM, NULL), EM_OK);
  em_dist_group_release(g);

  /* a reducer over two parameters on one rank: gradients become views of one bucket */
  em_tensor *p[2] = {vec(3, EM_FLOAT64), vec(2, EM_FLOAT64)};
  for (int i = 0; i < 2; i++) assert_int_equal(em_requires_grad_(p[i], 1), EM_OK);
  em_ddp_options o = {
      .bucket_bytes = 1 << 20, .first_bucket_bytes = 1 << 20, .gradient_as_bucket_view = 1, .rebuild_buckets = 1};
  em_ddp *d = NULL;
  em_ddp_options bad_opts = o;
  bad_opts.bucket_bytes = 0;
  assert_int_equal(em_ddp_new(&d, NULL, 2, p, NULL, 0, NULL, &bad_opts), EM_ERR_ARGUMENT);
  assert_int_equal(em_ddp_new(&d, NULL, 2, p, NULL, 0, NULL, &o), EM_OK);
  assert_int_equal(em_ddp_num_buckets(d), 1);
  int idx[2] = {-1, -1};
  assert_int_equal(em_ddp_bucket_params(d, 0, idx, 2), 2);
  assert_int_equal(idx[0], 1); /* reverse order */
  assert_int_equal(idx[1], 0);
  assert_int_equal(em_ddp_pre_forward(d, 1, 0, 0, NULL), EM_OK);
  em_tensor *s0 = NULL, *s1 = NULL, *loss = NULL;
  assert_int_equal(em_ag_reduce(EM_SUM, &s0, NULL, p[0], NULL, 0, 0, 0), EM_OK);
  assert_int_equal(em_ag_reduce(EM_SUM, &s1, NULL, p[1], NULL, 0, 0, 0), EM_OK);
  assert_int_equal(em_ag_binary(EM_ADD, &loss, s0, s1), EM_OK);
  assert_int_equal(em_ddp_pre_backward(d, 1, &loss), EM_OK);
  assert_int_equal(em_backward(loss, NULL, 0), EM_OK);
  assert_int_equal(em_ddp_finish(d), EM_OK);
  em_tensor *g0 = em_grad(p[0]), *g1 = em_grad(p[1]);
  assert_ptr_equal(em_tensor_storage_id(g0), em_tensor_storage_id(g1));
  double v;
  int64_t i0 = 0;
  assert_int_equal(em_tensor_get(g0, &i0, &v), EM_OK);
  assert_true(v == 1.0);
  double stats[6];
  em_ddp_stats(d, stats, 6);
  assert_true(stats[0] == 1.0 && stats[3] == 1.0 && stats[4] == 5 * 8.0);
  em_tensor_release(g0), em_tensor_release(g1);
  em_tensor_release(s0), em_tensor_release(s1), em_tensor_release(loss);
  em_ddp_release(d);

  assert_int_equal(em_dist_finalize(), EM_OK);
  assert_null(em_dist_world());
  assert_int_equal(em_dist_barrier(w = NULL, NULL), EM_ERR_RUNTIME);
  for (int i = 0; i < 2; i++) em_tensor_release(p[i]);
  em_tensor_release(t), em_tensor_release(out), em_tensor_release(bad), em_tensor_release(ints);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_env_detect),
      cmocka_unit_test(test_backend_selection),
      cmocka_unit_test(test_self_world),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
