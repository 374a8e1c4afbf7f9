/* test_data_pipeline.c - the data pipeline's C API: CRC-32C known answers, per-rank epoch
 * plans, the augmentation kernel, per-sample generators, .npy errors, option checks, and a
 * trainer and a reader (a thread of this process) exchanging an epoch over tcp on
 * loopback: exactly once, in order, a reader with other data refused, a timeout that
 * says what the pipeline is doing. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "test_util.h"
#include "ember/data.h"
#include "data/data_impl.h"
#include "ember/data_pipeline.h"

static void test_crc32c(void **state) {
  (void)state;
  assert_int_equal(em_data_crc32c("123456789", 9, 0), 0xE3069283u);
  assert_int_equal(em_data_crc32c("", 0, 0), 0);
  /* incremental: crc(ab) = crc(b, crc(a)) */
  uint32_t a = em_data_crc32c("12345", 5, 0);
  assert_int_equal(em_data_crc32c("6789", 4, a), 0xE3069283u);
  char zeros[32] = {0};
  assert_int_equal(em_data_crc32c(zeros, 32, 0), 0x8A9136AAu);
  assert_int_equal(em_data_tfrecord_mask(0), 0xa282ead8u);
}

/* A plan asked for ahead (made on its own thread) is handed over only for exactly the
 * arguments it was made for, and equals the plan made on the spot; asking ahead for
 * another replaces it. */
static void test_epoch_plan_ahead(void **state) {
  (void)state;
  const int64_t n = 5000;
  for (int round = 0; round < 20; round++) {
    uint64_t epoch = 100 + (uint64_t)round;
    int64_t rank = round % 3, world = 3;
    int pad = round % 2;
    assert_int_equal(em_data_epoch_plan_ahead(n, 9, epoch, 1, rank, world, pad, 1), EM_OK);
    if (round % 4 == 3) /* replaced before it is used: the first one is never handed over */
      assert_int_equal(em_data_epoch_plan_ahead(n, 9, epoch + 50, 1, rank, world, pad, 1), EM_OK);
    em_tensor *got = NULL, *want = NULL, *other = NULL;
    /* different arguments (another rank) never get the plan made ahead */
    assert_int_equal(em_data_epoch_plan(&other, n, 9, epoch, 1, (rank + 1) % world, world, pad, 1), EM_OK);
    assert_int_equal(em_data_epoch_plan(&got, n, 9, epoch, 1, rank, world, pad, 1), EM_OK);
    assert_int_equal(data_epoch_plan_now(&want, n, 9, epoch, 1, rank, world, pad, 1), EM_OK);
    assert_int_equal(em_tensor_numel(got), em_tensor_numel(want));
    assert_memory_equal(em_tensor_data(got), em_tensor_data(want), (size_t)em_tensor_numel(want) * sizeof(int64_t));
    assert_memory_not_equal(em_tensor_data(got), em_tensor_data(other), 64 * sizeof(int64_t));
    em_tensor_release(got), em_tensor_release(want), em_tensor_release(other);
  }
}

static void test_epoch_plan(void **state) {
  (void)state;
  em_tensor *plan = NULL, *perm = NULL;
  assert_int_equal(em_data_epoch_plan(&plan, 10, 5, 2, 1, 0, 1, 0, 0), EM_OK);
  assert_int_equal(em_data_randperm(&perm, 10, 5, 2, 0), EM_OK);
  assert_memory_equal(em_tensor_data(plan), em_tensor_data(perm), 10 * sizeof(int64_t));
  em_tensor_release(plan);
  /* The order is part of every checkpoint's loader state (resume continues the same
   * permutation), so it is pinned: these are the values of the first implementation (one
   * Philox block per step), which the batched one must keep. 4097 crosses the batches of
   * 256 steps; h = h * 31 + p[i] mod 1e9+7 over the 1-based permutation. */
  static const int64_t first10[10] = {8, 0, 3, 2, 7, 9, 1, 5, 4, 6};
  assert_memory_equal(em_tensor_data(perm), first10, sizeof first10);
  const struct {
    int64_t n;
    uint64_t seed, stream;
    int64_t hash;
  } pinned[] = {{1025, 7, 9, 550149644}, {4097, 123456789, 1099511627779ull, 921951622}, {60000, 1, 3, 736760879}};
  for (int c = 0; c < 3; c++) {
    em_tensor *q = NULL;
    assert_int_equal(em_data_randperm(&q, pinned[c].n, pinned[c].seed, pinned[c].stream, 1), EM_OK);
    const int64_t *v = em_tensor_data(q);
    int64_t h = 0;
    for (int64_t i = 0; i < pinned[c].n; i++) h = (h * 31 + v[i]) % 1000000007;
    assert_int_equal(h, pinned[c].hash);
    em_tensor_release(q);
  }
  /* three ranks of 10: drop keeps 3 each (9 distinct), pad gives 4 each (all 10 covered) */
  int seen[10] = {0};
  for (int rank = 0; rank < 3; rank++) {
    plan = NULL;
    assert_int_equal(em_data_epoch_plan(&plan, 10, 5, 2, 1, rank, 3, 0, 0), EM_OK);
    assert_int_equal(em_tensor_size(plan, 0), 3);
    const int64_t *p = em_tensor_data(plan), *o = em_tensor_data(perm);
    for (int j = 0; j < 3; j++) {
      assert_int_equal(p[j], o[j * 3 + rank]);
      seen[p[j]]++;
    }
    em_tensor_release(plan);
  }
  int distinct = 0;
  for (int i = 0; i < 10; i++) distinct += seen[i] == 1, assert_true(seen[i] <= 1);
  assert_int_equal(distinct, 9);
  memset(seen, 0, sizeof seen);
  for (int rank = 0; rank < 3; rank++) {
    plan = NULL;
    assert_int_equal(em_data_epoch_plan(&plan, 10, 5, 2, 0, rank, 3, 1, 1), EM_OK);
    assert_int_equal(em_tensor_size(plan, 0), 4);
    const int64_t *p = em_tensor_data(plan);
    for (int j = 0; j < 4; j++) seen[p[j] - 1]++;
    assert_int_equal(p[0], rank + 1); /* not shuffled: rank, rank + 3, ... counted from 1 */
    em_tensor_release(plan);
  }
  for (int i = 0; i < 10; i++) assert_true(seen[i] >= 1);
  em_tensor_release(perm);
  plan = NULL;
  assert_int_equal(em_data_epoch_plan(&plan, 10, 0, 0, 0, 3, 3, 0, 0), EM_ERR_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "rank 3 of world size 3"));
}

static void test_sample_rng(void **state) {
  (void)state;
  em_sample_rng a = {1, 2, 3, 0}, b = {1, 2, 3, 0}, c = {1, 2, 4, 0};
  for (int i = 0; i < 8; i++) assert_true(em_sample_rng_u64(&a) == em_sample_rng_u64(&b));
  a.counter = 0;
  assert_true(em_sample_rng_u64(&a) != em_sample_rng_u64(&c));
  for (int i = 0; i < 1000; i++) {
    int64_t v = em_sample_rng_below(&a, 7);
    assert_true(v >= 0 && v < 7);
    double u = em_sample_rng_uniform(&a);
    assert_true(u >= 0 && u < 1);
  }
  uint64_t before = a.counter;
  assert_int_equal(em_sample_rng_below(&a, 1), 0);
  assert_true(a.counter == before + 1); /* a draw even when there is one choice */
}

static em_tensor *image5(void) {
  int64_t sizes[3] = {1, 5, 5};
  em_tensor *t = NULL;
  assert_int_equal(em_empty(&t, 3, sizes, EM_UINT8, CPU), EM_OK);
  uint8_t *p = em_tensor_data(t);
  for (int r = 0; r < 5; r++)
    for (int c = 0; c < 5; c++) p[r * 5 + c] = (uint8_t)(10 * r + c);
  return t;
}

static void test_augment(void **state) {
  (void)state;
  em_tensor *img = image5(), *out = NULL;
  em_augment aug;
  memset(&aug, 0, sizeof aug);
  aug.crop_h = aug.crop_w = 3;
  aug.pad = 1;
  aug.random_crop = 1;
  em_sample_rng rng = {7, 1, 9, 0}, draw = {7, 1, 9, 0};
  int64_t oy = em_sample_rng_below(&draw, 5), ox = em_sample_rng_below(&draw, 5);
  assert_int_equal(em_data_augment(&out, img, 0, &aug, &rng), EM_OK);
  const uint8_t *o = em_tensor_data(out);
  for (int r = 0; r < 3; r++)
    for (int c = 0; c < 3; c++) {
      int sr = r + (int)oy - 1, sc = c + (int)ox - 1;
      int want = sr < 0 || sr > 4 || sc < 0 || sc > 4 ? 0 : 10 * sr + sc;
      assert_int_equal(o[r * 3 + c], want);
    }
  em_tensor_release(out);
  /* flip always, normalise: float32 (x / 255 - 0.5) / 0.25 */
  memset(&aug, 0, sizeof aug);
  aug.flip_p = 1;
  aug.normalise = 1;
  aug.mean[0] = 0.5;
  aug.std[0] = 0.25;
  out = NULL;
  assert_int_equal(em_data_augment(&out, img, 0, &aug, &rng), EM_OK);
  assert_int_equal(em_tensor_dtype(out), EM_FLOAT32);
  const float *f = em_tensor_data(out);
  assert_float_equal(f[1 * 5 + 0], (14 / 255.0 - 0.5) / 0.25, 1e-5);
  em_tensor_release(out);
  /* errors: a crop larger than the padded image; random draws without an rng */
  memset(&aug, 0, sizeof aug);
  aug.crop_h = aug.crop_w = 8;
  out = NULL;
  assert_int_equal(em_data_augment(&out, img, 0, &aug, &rng), EM_ERR_SHAPE);
  assert_non_null(strstr(em_last_error(), "8x8 crop does not fit a 5x5 image padded by 0"));
  aug.crop_h = aug.crop_w = 2;
  aug.random_crop = 1;
  assert_int_equal(em_data_augment(&out, img, 0, &aug, NULL), EM_ERR_ARGUMENT);
  assert_null(out);
  em_tensor_release(img);
}

static void test_npy_errors(void **state) {
  (void)state;
  char path[] = "/tmp/ember-npy-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_true(write(fd, "not numpy at all", 16) == 16);
  close(fd);
  em_tensor *t = NULL;
  assert_int_equal(em_data_read_npy(&t, path), EM_ERR_FORMAT);
  assert_non_null(strstr(em_last_error(), "is not a .npy file"));
  int64_t n = 6;
  em_tensor *x = NULL;
  assert_int_equal(em_arange(&x, 0, 6, 1, EM_INT32, CPU), EM_OK);
  assert_int_equal(em_data_write_npy(path, x), EM_OK);
  assert_int_equal(em_data_read_npy(&t, path), EM_OK);
  assert_int_equal(em_tensor_size(t, 0), n);
  assert_memory_equal(em_tensor_data(t), em_tensor_data(x), 6 * sizeof(int32_t));
  em_tensor_release(t);
  em_tensor_release(x);
  unlink(path);
  t = NULL;
  assert_int_equal(em_data_read_npy(&t, path), EM_ERR_IO);
  assert_non_null(strstr(em_last_error(), path));
}

static em_loader_options options(void) {
  em_loader_options o;
  memset(&o, 0, sizeof o);
  o.endpoints = "tcp://127.0.0.1:*";
  o.prefetch = 4;
  o.worker_queue = 2;
  o.in_order = 1;
  o.heartbeat_s = 0.05;
  o.heartbeat_timeout_s = 2;
  o.dataset_size = 20;
  o.fingerprint = "ints";
  return o;
}

static void test_loader_options(void **state) {
  (void)state;
  em_loader *l = NULL;
  em_loader_options o = options();
  o.prefetch = 0;
  assert_int_equal(em_loader_create(&l, &o), EM_ERR_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "prefetch is 0"));
  o = options();
  o.heartbeat_timeout_s = 0.01;
  assert_int_equal(em_loader_create(&l, &o), EM_ERR_ARGUMENT);
  o = options();
  o.endpoints = "tcp://nowhere.invalid:1";
  assert_int_equal(em_loader_create(&l, &o), EM_ERR_RUNTIME);
  assert_non_null(strstr(em_last_error(), "cannot bind 'tcp://nowhere.invalid:1'"));
  o = options();
  o.curve_public_key = "short";
  assert_int_equal(em_loader_create(&l, &o), EM_ERR_ARGUMENT);
  assert_null(l);
  o = options();
  assert_int_equal(em_loader_create(&l, &o), EM_OK);
  em_loader_batch *b = NULL;
  assert_int_equal(em_loader_next(l, &b, 0.1), EM_ERR_ARGUMENT); /* before begin */
  int64_t ids[2] = {1, 2}, pos[1] = {1}, len[1] = {2};
  assert_int_equal(em_loader_begin(l, 1, 0, ids, 2, pos, len, 1), EM_ERR_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "covers positions 1..2 of a plan of 2 ids"));
  em_loader_free(l);
}

/* A reader thread: every lease becomes a batch holding its ids (int64 "v") doubled. */
typedef struct reader_arg {
  const char *endpoint, *fingerprint;
  int64_t size;
  int batches;
} reader_arg;

static void *reader_main(void *p) {
  reader_arg *a = p;
  em_reader_options o;
  memset(&o, 0, sizeof o);
  o.connect = a->endpoint;
  o.name = "test-reader";
  o.heartbeat_s = 0.05;
  o.heartbeat_timeout_s = 2;
  em_reader *r = NULL;
  if (em_reader_create(&r, &o)) return NULL;
  em_reader_ready(r, a->size, a->fingerprint);
  em_lease lease;
  for (double idle = 0; idle < 1.0;) {
    em_reader_next(r, &lease, 0.1);
    if (lease.status != 1) {
      idle += 0.1;
      continue;
    }
    idle = 0;
    em_tensor_desc d;
    memset(&d, 0, sizeof d);
    strcpy(d.name, "v");
    d.dtype = EM_INT64;
    d.ndim = 1;
    d.sizes[0] = lease.n;
    em_tensor *t = NULL;
    if (em_reader_alloc(r, &lease, 1, &d, &t)) break;
    int64_t *v = em_tensor_data(t);
    for (int64_t i = 0; i < lease.n; i++) v[i] = 2 * lease.ids[i];
    em_tensor_release(t);
    em_stage_times times = {0.001, 0, 0, 0};
    em_reader_send(r, &lease, lease.n, lease.ids, 0, &times);
    a->batches++;
  }
  em_reader_free(r);
  return NULL;
}

static void test_loader_round_trip(void **state) {
  (void)state;
  em_loader *l = NULL;
  em_loader_options o = options();
  assert_int_equal(em_loader_create(&l, &o), EM_OK);
  const char *ep = em_loader_endpoints(l);
  assert_non_null(strstr(ep, "tcp://127.0.0.1:"));
  /* a reader with other data is refused; the right one serves */
  reader_arg wrong = {ep, "other data", 20, 0}, right = {ep, "ints", 20, 0};
  pthread_t t1, t2;
  pthread_create(&t1, NULL, reader_main, &wrong);
  pthread_create(&t2, NULL, reader_main, &right);
  int64_t ids[20], pos[6], len[6];
  for (int i = 0; i < 20; i++) ids[i] = 20 - i;
  for (int k = 0; k < 6; k++) pos[k] = 4 * k, len[k] = k < 5 ? 4 : 0;
  assert_int_equal(em_loader_begin(l, 3, 9, ids, 20, pos, len, 5), EM_OK);
  int64_t next = 0;
  for (int k = 0;; k++) {
    em_loader_batch *b = NULL;
    assert_int_equal(em_loader_next(l, &b, 20), EM_OK);
    if (!b) break;
    assert_int_equal(em_loader_batch_item(b), k); /* the planned order */
    assert_int_equal(em_loader_batch_count(b), 1);
    assert_string_equal(em_loader_batch_name(b, 0), "v");
    em_tensor *v = NULL, *bid = NULL;
    assert_int_equal(em_loader_batch_tensor(&v, b, 0), EM_OK);
    assert_int_equal(em_loader_batch_ids(&bid, b), EM_OK);
    em_loader_batch_free(b); /* the tensors outlive the batch */
    const int64_t *pv = em_tensor_data(v), *pi = em_tensor_data(bid);
    for (int i = 0; i < 4; i++) {
      assert_int_equal(pi[i], ids[next]);
      assert_int_equal(pv[i], 2 * ids[next]);
      next++;
    }
    em_tensor_release(v);
    em_tensor_release(bid);
  }
  assert_int_equal(next, 20);
  em_loader_batch *none = NULL;
  assert_int_equal(em_loader_next(l, &none, 1), EM_OK); /* the end stays the end */
  assert_null(none);
  em_loader_stats s;
  for (int i = 0; i < 500; i++) { /* the other reader's hello may come after the epoch */
    em_loader_get_stats(l, &s);
    if (s.workers_rejected >= 1) break;
    usleep(10000);
  }
  assert_int_equal(s.batches, 5);
  assert_int_equal(s.samples, 20);
  assert_int_equal(s.workers, 1);
  assert_true(s.workers_rejected >= 1);
  assert_true(s.read_s > 0.004);
  assert_true(s.max_outstanding <= 4);
  /* an epoch nobody serves: the reader is stopped below, then the wait times out */
  em_loader_free(l);
  pthread_join(t1, NULL);
  pthread_join(t2, NULL);
  assert_int_equal(wrong.batches, 0);
  assert_int_equal(right.batches, 5);
  l = NULL;
  assert_int_equal(em_loader_create(&l, &o), EM_OK);
  assert_int_equal(em_loader_begin(l, 1, 0, ids, 20, pos, len, 5), EM_OK);
  em_loader_batch *b = NULL;
  assert_int_equal(em_loader_next(l, &b, 0.2), EM_ERR_RUNTIME);
  assert_non_null(strstr(em_last_error(), "no batch within 0.2 s (epoch 1, waiting for batch 1 of 5): 0 readers"));
  em_loader_free(l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_crc32c),           cmocka_unit_test(test_epoch_plan),
      cmocka_unit_test(test_epoch_plan_ahead), cmocka_unit_test(test_sample_rng),
      cmocka_unit_test(test_augment),          cmocka_unit_test(test_npy_errors),
      cmocka_unit_test(test_loader_options),   cmocka_unit_test(test_loader_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
