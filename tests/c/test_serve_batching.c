/* test_serve_batching.c - when a batch that is neither full nor due closes (em_serve_model_policy):
 * under `spare` a lone request is dispatched at once while another worker of the model is idle;
 * under `deadline`, and under `spare` with a single worker, it waits the whole max_delay_us; a
 * full batch closes at once under either. The requests come over the ZeroMQ endpoint
 * (em_serve_client); the workers are plain threads running an identity forward. Skipped in a
 * build without serving or ZeroMQ. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "test_util.h"
#include "ember/serve.h"

#define DELAY_US 200000 /* long enough that a dispatch at once cannot pass for the deadline */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct worker {
  pthread_t thread;
  em_serve *server;
  int batches;
  int64_t max_rows;
} worker;

/* the forward: y = x, so each answer shows which rows came back */
static void *worker_main(void *arg) {
  worker *w = arg;
  for (;;) {
    em_serve_batch *b = NULL;
    if (em_serve_next_batch(w->server, 0, &b) != EM_OK || !b) break;
    em_tensor *x = NULL;
    if (em_serve_batch_input(b, 0, &x) != EM_OK) {
      em_serve_batch_fail(b, "no input");
      continue;
    }
    w->batches++;
    if (em_serve_batch_rows(b) > w->max_rows) w->max_rows = em_serve_batch_rows(b);
    em_serve_batch_complete(b, 1, &x);
    em_tensor_release(x);
  }
  return NULL;
}

typedef struct served {
  em_serve *server;
  worker workers[4];
  int n_workers;
} served;

/* A server of one model (x: float32 [4] -> y, max batch 4) with n workers under policy,
 * listening on a free loopback port; 0 when this build cannot serve over ZeroMQ. */
static int start(served *sv, int n_workers, em_serve_policy policy) {
  memset(sv, 0, sizeof *sv);
  em_status st = em_serve_create(&sv->server);
  if (st == EM_ERR_UNSUPPORTED) return 0;
  assert_int_equal(st, EM_OK);
  int index = -1;
  int64_t shape[1] = {4};
  assert_int_equal(em_serve_add_model(sv->server, "echo", 4, DELAY_US, 64, &index), EM_OK);
  assert_int_equal(em_serve_add_input(sv->server, index, "x", EM_FLOAT32, 1, shape), EM_OK);
  assert_int_equal(em_serve_add_output(sv->server, index, "y", EM_FLOAT32), EM_OK);
  assert_int_equal(em_serve_model_policy(sv->server, index, policy), EM_OK);
  st = em_serve_listen_zmq(sv->server, "tcp://127.0.0.1:*");
  if (st == EM_ERR_UNSUPPORTED) {
    em_serve_destroy(sv->server);
    return 0;
  }
  assert_int_equal(st, EM_OK);
  sv->n_workers = n_workers;
  for (int i = 0; i < n_workers; i++) {
    sv->workers[i].server = sv->server;
    assert_int_equal(pthread_create(&sv->workers[i].thread, NULL, worker_main, &sv->workers[i]), 0);
    assert_int_equal(em_serve_model_ready(sv->server, index), EM_OK);
  }
  /* every worker is waiting for work before the first request */
  struct timespec pause = {0, 50 * 1000000L};
  nanosleep(&pause, NULL);
  return 1;
}

static void stop(served *sv) {
  assert_int_equal(em_serve_shutdown(sv->server, 5.0), EM_OK);
  for (int i = 0; i < sv->n_workers; i++) pthread_join(sv->workers[i].thread, NULL);
  em_serve_destroy(sv->server);
}

/* One request of `rows` rows (row r holds r+1 in each column); returns the seconds until its
 * answer, which must echo the rows. */
static double infer_seconds(served *sv, int64_t rows) {
  em_serve_client *c = NULL;
  assert_int_equal(em_serve_client_open(&c, em_serve_zmq_endpoint(sv->server), 10.0), EM_OK);
  em_tensor *x = NULL;
  int64_t shape[2] = {rows, 4};
  assert_int_equal(em_empty(&x, 2, shape, EM_FLOAT32, CPU), EM_OK);
  float *d = em_tensor_data(x);
  for (int64_t i = 0; i < rows * 4; i++) d[i] = (float)(i / 4 + 1);
  const char *names[1] = {"x"};
  int n_out = 0;
  double t0 = now_s();
  em_status st = em_serve_client_infer(c, "echo", 1, names, &x, &n_out);
  double took = now_s() - t0;
  if (st != EM_OK) fail_msg("infer: %s", em_last_error());
  assert_int_equal(n_out, 1);
  em_tensor *y = NULL;
  assert_int_equal(em_serve_client_output(c, 0, &y), EM_OK);
  assert_int_equal(em_tensor_size(y, 0), rows);
  for (int64_t i = 0; i < rows * 4; i++) assert_true(tensor_flat_get(y, i) == (double)(i / 4 + 1));
  em_tensor_release(y);
  em_tensor_release(x);
  em_serve_client_close(c);
  return took;
}

static void test_spare_dispatches_at_once_with_two_idle_workers(void **state) {
  (void)state;
  served sv;
  if (!start(&sv, 2, EM_SERVE_SPARE)) skip();
  double took = infer_seconds(&sv, 1);
  stop(&sv);
  if (took >= 0.1) fail_msg("spare, 2 idle workers: a lone request took %.3f s (delay %.3f s)", took, DELAY_US * 1e-6);
}

static void test_deadline_waits_the_delay(void **state) {
  (void)state;
  served sv;
  if (!start(&sv, 2, EM_SERVE_DEADLINE)) skip();
  double took = infer_seconds(&sv, 1);
  stop(&sv);
  if (took < DELAY_US * 1e-6) fail_msg("deadline: a lone request took %.3f s, under the delay %.3f s", took, DELAY_US * 1e-6);
}

static void test_spare_with_one_worker_waits_the_delay(void **state) {
  (void)state;
  served sv;
  if (!start(&sv, 1, EM_SERVE_SPARE)) skip();
  double took = infer_seconds(&sv, 1);
  stop(&sv);
  if (took < DELAY_US * 1e-6) fail_msg("spare, 1 worker: a lone request took %.3f s, under the delay %.3f s", took, DELAY_US * 1e-6);
}

static void test_full_batch_closes_at_once(void **state) {
  (void)state;
  served sv;
  if (!start(&sv, 1, EM_SERVE_DEADLINE)) skip();
  double took = infer_seconds(&sv, 4); /* max_batch rows */
  stop(&sv);
  assert_int_equal(sv.workers[0].max_rows, 4);
  if (took >= 0.1) fail_msg("deadline: a full batch took %.3f s (delay %.3f s)", took, DELAY_US * 1e-6);
}

static void test_policy_checked(void **state) {
  (void)state;
  em_serve *s = NULL;
  if (em_serve_create(&s) == EM_ERR_UNSUPPORTED) skip();
  int index = -1;
  assert_int_equal(em_serve_add_model(s, "m", 4, 0, 4, &index), EM_OK);
  expect_error(em_serve_model_policy(s, index, (em_serve_policy)7), EM_ERR_ARGUMENT, "expected EM_SERVE_DEADLINE");
  expect_error(em_serve_model_policy(s, 3, EM_SERVE_SPARE), EM_ERR_INDEX, "model 3 does not exist");
  em_serve_destroy(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_spare_dispatches_at_once_with_two_idle_workers),
      cmocka_unit_test(test_deadline_waits_the_delay),
      cmocka_unit_test(test_spare_with_one_worker_waits_the_delay),
      cmocka_unit_test(test_full_batch_closes_at_once),
      cmocka_unit_test(test_policy_checked),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
