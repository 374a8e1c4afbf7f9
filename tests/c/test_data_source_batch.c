/* test_data_source_batch.c - em_source_batch (a whole batch in one call: x, y and the kept
 * ids) and the pool its memory comes from (runtime/data/batch_pool.c): the batch is what
 * em_source_fill writes, a released batch's memory serves the next one, buffers waiting in
 * the pool are not counted as allocated, tensors outlive their source (and may be released
 * on another thread), the pool keeps at most its cap, and a failed call leaks nothing. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "test_util.h"
#include "data/data_impl.h"

enum { ROWS = 50, COLS = 6 };

typedef struct fixture {
  char dir[64], x[96], y[96];
  em_source *src;
} fixture;

/* x.npy: uint8 [ROWS, COLS] with x[i][j] = (7 i + j) % 251; y.npy: int64 [ROWS] = 100 + i. */
static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  snprintf(f->dir, sizeof f->dir, "/tmp/ember-source-batch-XXXXXX");
  if (!mkdtemp(f->dir)) return -1;
  snprintf(f->x, sizeof f->x, "%s/x.npy", f->dir);
  snprintf(f->y, sizeof f->y, "%s/y.npy", f->dir);
  em_tensor *x = NULL, *y = NULL;
  int64_t xs[2] = {ROWS, COLS}, ys = ROWS;
  if (em_empty(&x, 2, xs, EM_UINT8, CPU) || em_empty(&y, 1, &ys, EM_INT64, CPU)) return -1;
  uint8_t *xd = em_tensor_data(x);
  int64_t *yd = em_tensor_data(y);
  for (int i = 0; i < ROWS; i++) {
    yd[i] = 100 + i;
    for (int j = 0; j < COLS; j++) xd[i * COLS + j] = (uint8_t)((7 * i + j) % 251);
  }
  if (em_data_write_npy(f->x, x) || em_data_write_npy(f->y, y)) return -1;
  em_tensor_release(x);
  em_tensor_release(y);
  char paths[200];
  snprintf(paths, sizeof paths, "%s\n%s", f->x, f->y);
  em_source_options o = {.format = "npy", .paths = paths};
  if (em_source_open(&f->src, &o)) return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  em_source_free(f->src);
  unlink(f->x);
  unlink(f->y);
  rmdir(f->dir);
  free(f);
  return 0;
}

static void release3(em_tensor **t) {
  for (int i = 0; i < 3; i++) em_tensor_release(t[i]), t[i] = NULL;
}

/* The batch holds rows ids - base of the data, their labels and the ids as given. */
static void check_batch(em_tensor **t, const int64_t *ids, int64_t n, int64_t base) {
  assert_int_equal(em_tensor_dtype(t[0]), EM_UINT8);
  assert_int_equal(em_tensor_size(t[0], 0), n);
  assert_int_equal(em_tensor_size(t[0], 1), COLS);
  assert_int_equal(em_tensor_size(t[1], 0), n);
  assert_int_equal(em_tensor_size(t[2], 0), n);
  const uint8_t *x = em_tensor_data(t[0]);
  const int64_t *y = em_tensor_data(t[1]), *kept = em_tensor_data(t[2]);
  for (int64_t i = 0; i < n; i++) {
    int64_t r = ids[i] - base;
    assert_int_equal(kept[i], ids[i]);
    assert_int_equal(y[i], 100 + r);
    for (int j = 0; j < COLS; j++) assert_int_equal(x[i * COLS + j], (7 * r + j) % 251);
  }
}

static void test_batch_is_what_fill_writes(void **state) {
  fixture *f = *state;
  int64_t ids[5] = {3, 50, 1, 17, 3}; /* 1-based, a repeat allowed */
  em_tensor *t[3] = {NULL, NULL, NULL};
  em_stage_times times = {0};
  int64_t skipped = 0;
  assert_int_equal(em_source_batch(t, f->src, ids, 5, 1, NULL, 1, 0, 0, &skipped, &times), EM_OK);
  check_batch(t, ids, 5, 1);
  assert_int_equal(skipped, 0);
  assert_true(times.read >= 0);
  /* the same rows through em_source_fill into tensors of the caller's */
  em_tensor *x = NULL, *y = NULL;
  int64_t xs[2] = {5, COLS}, n = 5, kept = 0, kept_ids[5];
  assert_int_equal(em_empty(&x, 2, xs, EM_UINT8, CPU), EM_OK);
  assert_int_equal(em_empty(&y, 1, &n, EM_INT64, CPU), EM_OK);
  assert_int_equal(em_source_fill(f->src, ids, 5, 1, NULL, 1, 0, x, y, 0, &kept, kept_ids, NULL, NULL), EM_OK);
  assert_int_equal(kept, 5);
  assert_memory_equal(em_tensor_data(x), em_tensor_data(t[0]), 5 * COLS);
  assert_memory_equal(em_tensor_data(y), em_tensor_data(t[1]), 5 * sizeof(int64_t));
  em_tensor_release(x);
  em_tensor_release(y);
  release3(t);
  /* an empty batch: three tensors of 0 rows */
  assert_int_equal(em_source_batch(t, f->src, ids, 0, 1, NULL, 1, 0, 0, NULL, NULL), EM_OK);
  for (int i = 0; i < 3; i++) assert_int_equal(em_tensor_size(t[i], 0), 0);
  release3(t);
}

static void test_released_memory_serves_the_next_batch(void **state) {
  fixture *f = *state;
  int64_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8}, ids2[8] = {9, 10, 11, 12, 13, 14, 15, 16};
  em_tensor *t[3] = {NULL, NULL, NULL};
  int64_t before = em_memory_allocated();
  assert_int_equal(em_source_batch(t, f->src, ids, 8, 1, NULL, 0, 0, 0, NULL, NULL), EM_OK);
  /* a batch out counts as allocated: Lua's collector is nudged by it as by any tensor */
  assert_true(em_memory_allocated() - before >= 8 * COLS + 2 * 8 * 8);
  void *first = em_tensor_data(t[0]);
  release3(t);
  assert_int_equal(em_memory_allocated(), before); /* waiting in the pool: not counted */
  assert_int_equal(em_source_batch(t, f->src, ids2, 8, 1, NULL, 0, 0, 0, NULL, NULL), EM_OK);
  assert_ptr_equal(em_tensor_data(t[0]), first); /* the same memory, refilled */
  check_batch(t, ids2, 8, 1);
  release3(t);
}

static void *release_on_thread(void *arg) {
  release3(arg);
  return NULL;
}

static void test_tensors_outlive_their_source(void **state) {
  fixture *f = *state;
  char paths[200];
  snprintf(paths, sizeof paths, "%s\n%s", f->x, f->y);
  em_source_options o = {.format = "npy", .paths = paths};
  em_source *s = NULL;
  assert_int_equal(em_source_open(&s, &o), EM_OK);
  int64_t ids[3] = {10, 20, 30};
  em_tensor *a[3] = {NULL, NULL, NULL}, *b[3] = {NULL, NULL, NULL};
  assert_int_equal(em_source_batch(a, s, ids, 3, 1, NULL, 0, 0, 0, NULL, NULL), EM_OK);
  assert_int_equal(em_source_batch(b, s, ids, 3, 1, NULL, 0, 0, 0, NULL, NULL), EM_OK);
  em_source_free(s); /* the pool lives on with the buffers still out */
  check_batch(a, ids, 3, 1);
  release3(a);
  pthread_t th; /* the last buffer comes back on another thread and frees the pool (ASan: no leak) */
  assert_int_equal(pthread_create(&th, NULL, release_on_thread, b), 0);
  pthread_join(th, NULL);
}

static void test_failures_leak_nothing(void **state) {
  fixture *f = *state;
  int64_t before = em_memory_allocated();
  int64_t ids[3] = {1, 51, 2}; /* 51 is past the 50 samples */
  em_tensor *t[3] = {NULL, NULL, NULL};
  expect_error(em_source_batch(t, f->src, ids, 3, 1, NULL, 0, 0, 0, NULL, NULL), EM_ERR_INDEX, "out of range");
  for (int i = 0; i < 3; i++) assert_null(t[i]);
  assert_int_equal(em_memory_allocated(), before);
  em_tensor *x = NULL;
  int64_t one = 1;
  assert_int_equal(em_empty(&x, 1, &one, EM_UINT8, CPU), EM_OK);
  t[1] = x; /* out must be empty */
  expect_error(em_source_batch(t, f->src, ids, 1, 1, NULL, 0, 0, 0, NULL, NULL), EM_ERR_ARGUMENT, "3 NULL tensors");
  em_tensor_release(x);
  t[1] = NULL;
  em_augment crop = {.crop_h = 2, .crop_w = 2}; /* rows, not images: nothing to crop */
  expect_error(em_source_batch(t, f->src, ids, 1, 1, &crop, 0, 0, 0, NULL, NULL), EM_ERR_ARGUMENT, "take uint8 images");
  for (int i = 0; i < 3; i++) assert_null(t[i]);
}

static void test_pool_keeps_at_most_its_cap(void **state) {
  (void)state;
  dp_pool *p = dp_pool_new();
  assert_non_null(p);
  enum { N = 40 };
  em_tensor *t[N];
  int64_t mb = 1 << 20, before = em_memory_allocated();
  for (int i = 0; i < N; i++) {
    t[i] = NULL;
    assert_int_equal(dp_pool_empty(p, &t[i], 1, &mb, EM_UINT8), EM_OK);
  }
  assert_int_equal(em_memory_allocated() - before, N * mb);
  for (int i = 0; i < N; i++) em_tensor_release(t[i]);
  assert_int_equal(em_memory_allocated(), before);
  int64_t waiting = dp_pool_waiting(p);
  assert_true(waiting >= 16 * mb && waiting <= 32 * mb); /* the cap, 32 MiB: the rest were freed */
  /* sizes the pool has no stack for get memory of their own */
  int64_t sizes[6] = {1, 2, 3, 4, 5, 6};
  em_tensor *u[6];
  for (int i = 0; i < 6; i++) {
    u[i] = NULL;
    assert_int_equal(dp_pool_empty(p, &u[i], 1, &sizes[i], EM_INT64), EM_OK);
    memset(em_tensor_data(u[i]), 0xab, (size_t)sizes[i] * 8);
  }
  for (int i = 0; i < 6; i++) em_tensor_release(u[i]);
  dp_pool_close(p);
  em_tensor *v = NULL; /* no pool: plain memory */
  assert_int_equal(dp_pool_empty(NULL, &v, 1, &mb, EM_UINT8), EM_OK);
  em_tensor_release(v);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(test_batch_is_what_fill_writes, setup, teardown),
    cmocka_unit_test_setup_teardown(test_released_memory_serves_the_next_batch, setup, teardown),
    cmocka_unit_test_setup_teardown(test_tensors_outlive_their_source, setup, teardown),
    cmocka_unit_test_setup_teardown(test_failures_leak_nothing, setup, teardown),
    cmocka_unit_test(test_pool_keeps_at_most_its_cap),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
