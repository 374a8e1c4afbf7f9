/* test_core.c - errors, dtypes, tensor lifetime, views and copies (the tensor core). */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "test_util.h"
#include "core/core_impl.h"
#include "ember/tensor.h"

static em_tensor *arange_f32(int ndim, const int64_t *sizes) {
  em_tensor *flat = NULL, *t = NULL;
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= sizes[i];
  assert_int_equal(em_arange(&flat, 0, (double)n, 1, EM_FLOAT32, CPU), EM_OK);
  assert_int_equal(em_view(&t, flat, ndim, sizes), EM_OK);
  em_tensor_release(flat);
  return t;
}

static double at(const em_tensor *t, int64_t i0, int64_t i1) {
  int64_t idx[2] = {i0, i1};
  double v;
  assert_int_equal(em_tensor_get(t, idx, &v), EM_OK);
  return v;
}

static void test_dtypes(void **state) {
  (void)state;
  em_dtype d;
  assert_int_equal(em_dtype_from_name("float64", &d), EM_OK);
  assert_int_equal(d, EM_FLOAT64);
  assert_int_equal(em_dtype_from_name("half", &d), EM_OK);
  assert_int_equal(d, EM_FLOAT16);
  assert_int_equal(em_dtype_from_name("complex", &d), EM_ERR_DTYPE);
  assert_non_null(strstr(em_last_error(), "unknown dtype 'complex'"));
  assert_int_equal(em_dtype_size(EM_BFLOAT16), 2);
  assert_int_equal(em_dtype_promote(EM_INT32, EM_FLOAT32), EM_FLOAT32);
  assert_int_equal(em_dtype_promote(EM_INT64, EM_INT32), EM_INT64);
  assert_int_equal(em_dtype_promote(EM_FLOAT16, EM_BFLOAT16), EM_FLOAT32);
  assert_int_equal(em_dtype_promote(EM_BOOL, EM_UINT8), EM_UINT8);
  assert_int_equal(em_dtype_promote(EM_FLOAT64, EM_FLOAT16), EM_FLOAT64);
}

static void test_devices(void **state) {
  (void)state;
  em_device dev;
  assert_int_equal(em_device_parse("cuda:1", &dev), EM_OK);
  assert_int_equal(dev.type, EM_CUDA);
  assert_int_equal(dev.index, 1);
  assert_int_equal(em_device_parse("tpu", &dev), EM_ERR_DEVICE);
  assert_non_null(strstr(em_last_error(), "unknown device 'tpu'"));
  assert_int_equal(em_device_parse("cuda:x", &dev), EM_ERR_DEVICE);
  /* No GPU here: a CUDA tensor is a clear error, not a crash. */
  em_tensor *t = NULL;
  int64_t n = 4;
  assert_int_equal(em_zeros(&t, 1, &n, EM_FLOAT32, (em_device){EM_CUDA, 0}), EM_ERR_DEVICE);
  assert_null(t);
  assert_non_null(strstr(em_last_error(), "cuda:0 is not available"));
}

static void test_half_conversion(void **state) {
  (void)state;
  const float values[] = {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.333251953125f};
  for (size_t i = 0; i < sizeof values / sizeof *values; i++)
    assert_float_equal(em_half_to_float(em_float_to_half(values[i])), values[i], 0);
  assert_true(isinf(em_half_to_float(em_float_to_half(1e6f))));
  assert_true(isnan(em_half_to_float(em_float_to_half(NAN))));
  assert_int_equal(em_float_to_half(1.0f), 0x3c00);
  assert_int_equal(em_float_to_bf16(1.0f), 0x3f80);
  assert_float_equal(em_bf16_to_float(em_float_to_bf16(3.140625f)), 3.140625f, 0);
  /* Round to nearest even: 1 + 2^-11 lies halfway between two halves. */
  assert_int_equal(em_float_to_half(1.0f + 1.0f / 2048), 0x3c00);
}

static void test_create_and_release(void **state) {
  (void)state;
  int64_t before = em_memory_allocated();
  em_tensor *t = NULL;
  int64_t sizes[2] = {3, 4};
  assert_int_equal(em_full(&t, 2, sizes, 2.5, EM_FLOAT64, CPU), EM_OK);
  assert_int_equal(em_tensor_numel(t), 12);
  assert_int_equal(em_memory_allocated() - before, 12 * 8);
  assert_float_equal(at(t, 2, 3), 2.5, 0);
  assert_true(em_tensor_is_contiguous(t));
  em_tensor_release(t);
  assert_int_equal(em_memory_allocated(), before);

  int64_t bad[2] = {3, -1};
  t = NULL;
  assert_int_equal(em_empty(&t, 2, bad, EM_FLOAT32, CPU), EM_ERR_SHAPE);
  assert_non_null(strstr(em_last_error(), "size -1 at dim 1 is negative"));
  /* a zero beside huge sizes: no elements, but the strides would overflow */
  int64_t huge[4] = {0, (int64_t)1 << 32, (int64_t)1 << 32, 16};
  assert_int_equal(em_empty(&t, 4, huge, EM_FLOAT32, CPU), EM_ERR_SHAPE);
  assert_non_null(strstr(em_last_error(), "has too many elements"));
  int64_t zero = 0;
  em_tensor *e = NULL, *v = NULL;
  assert_int_equal(em_empty(&e, 1, &zero, EM_FLOAT32, CPU), EM_OK);
  assert_int_equal(em_reshape(&v, e, 4, huge), EM_ERR_SHAPE);
  assert_non_null(strstr(em_last_error(), "has too many elements"));
  assert_int_equal(em_view(&v, e, 4, huge), EM_ERR_SHAPE);
  int64_t wide[3] = {(int64_t)1 << 32, (int64_t)1 << 32, 0};
  assert_int_equal(em_expand(&v, e, 3, wide), EM_ERR_SHAPE);
  em_tensor_release(e);
  assert_int_equal(em_empty(&e, 1, (int64_t[]){1}, EM_FLOAT32, CPU), EM_OK);
  int64_t big3[3] = {(int64_t)1 << 32, (int64_t)1 << 32, 2};
  assert_int_equal(em_expand(&v, e, 3, big3), EM_ERR_SHAPE);
  assert_int_equal(em_as_strided(&v, e, 3, big3, (int64_t[]){0, 0, 0}, 0), EM_ERR_SHAPE);
  assert_null(v);
  em_tensor_release(e);
}

static void test_eye_linspace(void **state) {
  (void)state;
  em_tensor *e = NULL, *l = NULL;
  assert_int_equal(em_eye(&e, 3, 4, EM_INT32, CPU), EM_OK);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++) assert_float_equal(at(e, i, j), i == j, 0);
  assert_int_equal(em_linspace(&l, 0, 1, 5, EM_FLOAT64, CPU), EM_OK);
  int64_t idx = 3;
  double v;
  em_tensor_get(l, &idx, &v);
  assert_float_equal(v, 0.75, 1e-15);
  em_tensor_release(e);
  em_tensor_release(l);
  em_tensor *r = NULL;
  assert_int_equal(em_arange(&r, 0, 10, -1, EM_FLOAT32, CPU), EM_ERR_ARGUMENT);
}

static void test_views_share_storage(void **state) {
  (void)state;
  int64_t sizes[2] = {3, 4};
  em_tensor *a = arange_f32(2, sizes), *t = NULL, *n = NULL, *s = NULL;
  assert_int_equal(em_transpose(&t, a, 0, 1), EM_OK);
  assert_int_equal(em_tensor_size(t, 0), 4);
  assert_float_equal(at(t, 3, 1), 7, 0); /* a[1][3] */
  assert_false(em_tensor_is_contiguous(t));
  assert_ptr_equal(em_tensor_storage_id(t), em_tensor_storage_id(a));
  assert_int_equal(em_narrow(&n, a, 1, 1, 2), EM_OK);
  assert_float_equal(at(n, 2, 0), 9, 0);
  assert_int_equal(em_select(&s, a, 0, -1), EM_OK);
  assert_int_equal(em_tensor_ndim(s), 1);
  int64_t i = 2;
  double v;
  em_tensor_get(s, &i, &v);
  assert_float_equal(v, 10, 0);
  /* Writing through a view changes the base. */
  int64_t pos[2] = {0, 2};
  assert_int_equal(em_tensor_set(t, pos, 100), EM_OK);
  assert_float_equal(at(a, 2, 0), 100, 0);
  em_tensor_release(t);
  em_tensor_release(n);
  em_tensor_release(s);

  /* view of a non-contiguous tensor fails, reshape copies */
  em_tensor *tt = NULL, *v2 = NULL, *r = NULL;
  em_transpose(&tt, a, 0, 1);
  int64_t flat = 12;
  assert_int_equal(em_view(&v2, tt, 1, &flat), EM_ERR_SHAPE);
  assert_non_null(strstr(em_last_error(), "use reshape()"));
  assert_int_equal(em_reshape(&r, tt, 1, &flat), EM_OK);
  {
    int64_t k = 1;
    em_tensor_get(r, &k, &v);
    assert_float_equal(v, 4, 0); /* tt[0][1] = a[1][0] */
  }
  assert_ptr_not_equal(em_tensor_storage_id(r), em_tensor_storage_id(a));
  em_tensor_release(tt);
  em_tensor_release(r);

  /* -1 inference and errors */
  int64_t infer[2] = {-1, 6};
  assert_int_equal(em_view(&v2, a, 2, infer), EM_OK);
  assert_int_equal(em_tensor_size(v2, 0), 2);
  em_tensor_release(v2);
  int64_t bad[2] = {5, -1};
  assert_int_equal(em_view(&v2, a, 2, bad), EM_ERR_SHAPE);
  assert_non_null(strstr(em_last_error(), "12 elements"));
  em_tensor_release(a);
}

static void test_permute_expand_squeeze(void **state) {
  (void)state;
  int64_t sizes[3] = {2, 1, 3};
  em_tensor *a = arange_f32(3, sizes), *p = NULL, *e = NULL, *sq = NULL, *un = NULL, *f = NULL;
  int perm[3] = {2, 0, 1};
  assert_int_equal(em_permute(&p, a, 3, perm), EM_OK);
  assert_int_equal(em_tensor_size(p, 0), 3);
  assert_int_equal(em_tensor_size(p, 1), 2);
  int dup[3] = {0, 0, 1};
  em_tensor *bad = NULL;
  assert_int_equal(em_permute(&bad, a, 3, dup), EM_ERR_ARGUMENT);
  int64_t target[3] = {2, 4, 3};
  assert_int_equal(em_expand(&e, a, 3, target), EM_OK);
  assert_int_equal(em_tensor_stride(e, 1), 0);
  int64_t wrong[3] = {3, 4, 3};
  assert_int_equal(em_expand(&bad, a, 3, wrong), EM_ERR_SHAPE);
  assert_int_equal(em_squeeze(&sq, a, 0, 1), EM_OK);
  assert_int_equal(em_tensor_ndim(sq), 2);
  assert_int_equal(em_unsqueeze(&un, sq, -1), EM_OK);
  assert_int_equal(em_tensor_size(un, 2), 1);
  assert_int_equal(em_flatten(&f, a, 0, -1), EM_OK);
  assert_int_equal(em_tensor_numel(f), 6);
  assert_int_equal(em_tensor_ndim(f), 1);
  em_tensor *ts[] = {p, e, sq, un, f, a};
  for (int i = 0; i < 6; i++) em_tensor_release(ts[i]);
}

static void test_copy_convert(void **state) {
  (void)state;
  int64_t sizes[2] = {2, 3};
  em_tensor *a = arange_f32(2, sizes), *t = NULL, *c = NULL, *h = NULL, *back = NULL, *i64 = NULL;
  em_transpose(&t, a, 0, 1);
  assert_int_equal(em_clone(&c, t), EM_OK);
  assert_true(em_tensor_is_contiguous(c));
  assert_float_equal(at(c, 2, 1), 5, 0);
  assert_int_equal(em_to(&h, c, EM_FLOAT16, CPU), EM_OK);
  assert_int_equal(em_to(&back, h, EM_FLOAT64, CPU), EM_OK);
  assert_float_equal(at(back, 2, 1), 5, 0);
  assert_int_equal(em_to(&i64, back, EM_INT64, CPU), EM_OK);
  assert_float_equal(at(i64, 1, 1), 4, 0);
  /* copy_ broadcasts a row into every row */
  em_tensor *row = NULL, *dst = NULL;
  em_select(&row, a, 0, 1); /* 3 4 5 */
  em_zeros(&dst, 2, (int64_t[]){4, 3}, EM_INT32, CPU);
  assert_int_equal(em_copy_(dst, row), EM_OK);
  assert_float_equal(at(dst, 3, 2), 5, 0);
  em_tensor *wrong = NULL;
  em_zeros(&wrong, 1, (int64_t[]){4}, EM_FLOAT32, CPU);
  assert_int_equal(em_copy_(wrong, row), EM_ERR_SHAPE);
  assert_non_null(strstr(em_last_error(), "[3] to [4]"));
  /* int64 precision survives int64 -> int64 via the integer path */
  em_tensor *big = NULL, *big2 = NULL;
  em_full(&big, 1, (int64_t[]){1}, 0, EM_INT64, CPU);
  *(int64_t *)em_tensor_data(big) = ((int64_t)1 << 62) + 1;
  em_to(&big2, big, EM_INT32, CPU);
  em_tensor *big3 = NULL;
  em_clone(&big3, big);
  assert_true(*(int64_t *)em_tensor_data(big3) == ((int64_t)1 << 62) + 1);
  em_tensor *ts[] = {a, t, c, h, back, i64, row, dst, wrong, big, big2, big3};
  for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) em_tensor_release(ts[i]);
}

static void test_large_copy_parallel(void **state) {
  (void)state;
  int64_t sizes[2] = {512, 1000};
  em_tensor *a = arange_f32(2, sizes), *t = NULL, *c = NULL;
  em_transpose(&t, a, 0, 1);
  em_set_num_threads(2);
  assert_int_equal(em_clone(&c, t), EM_OK);
  const float *p = em_tensor_data(c);
  for (int64_t i = 0; i < 1000; i++)
    for (int64_t j = 0; j < 512; j++)
      if (p[i * 512 + j] != (float)(j * 1000 + i)) fail_msg("mismatch at %lld,%lld", (long long)i, (long long)j);
  em_tensor_release(a);
  em_tensor_release(t);
  em_tensor_release(c);
}

static int deleted;
static void count_delete(void *data, void *ctx) {
  (void)data;
  deleted += *(int *)ctx;
}

static void test_from_blob_and_free(void **state) {
  (void)state;
  float buf[6] = {1, 2, 3, 4, 5, 6};
  int one = 1;
  em_tensor *t = NULL, *v = NULL;
  int64_t sizes[2] = {2, 3};
  assert_int_equal(em_from_blob(&t, buf, 2, sizes, NULL, EM_FLOAT32, CPU, count_delete, &one), EM_OK);
  assert_float_equal(at(t, 1, 2), 6, 0);
  em_fill(t, 7);
  assert_float_equal(buf[4], 7, 0); /* no copy was made */
  em_transpose(&v, t, 0, 1);
  em_tensor_release(t);
  assert_int_equal(deleted, 0); /* the view keeps the memory alive */
  em_tensor_release(v);
  assert_int_equal(deleted, 1);

  em_tensor *f = NULL, *g = NULL;
  em_zeros(&f, 1, (int64_t[]){1000}, EM_FLOAT32, CPU);
  int64_t before = em_memory_allocated();
  assert_int_equal(em_tensor_free(f), EM_OK);
  assert_true(em_memory_allocated() < before);
  assert_true(em_tensor_is_freed(f));
  assert_int_equal(em_clone(&g, f), EM_ERR_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "freed"));
  em_tensor_release(f);
}

/* Large CPU blocks are cached by size (runtime/cpu/backend.c): a freed one comes back for
 * the next request of the same rounded size, and a request of another size gets other
 * memory; a reused block holds what its new owner writes. */
static void test_large_block_reuse(void **state) {
  (void)state;
  int64_t n = (int64_t)3 << 20, m = (int64_t)5 << 20; /* 12 MB and 20 MB of float32 */
  em_tensor *a = NULL, *b = NULL, *c = NULL;
  assert_int_equal(em_full(&a, 1, &n, 1.5, EM_FLOAT32, CPU), EM_OK);
  void *pa = em_tensor_data(a);
  em_tensor_release(a);
  assert_int_equal(em_empty(&b, 1, &m, EM_FLOAT32, CPU), EM_OK);
  assert_ptr_not_equal(em_tensor_data(b), pa);
  assert_int_equal(em_full(&c, 1, &n, 2.5, EM_FLOAT32, CPU), EM_OK);
  assert_ptr_equal(em_tensor_data(c), pa);
  const float *v = em_tensor_data(c);
  assert_true(v[0] == 2.5f && v[n - 1] == 2.5f);
  em_tensor_release(b);
  em_tensor_release(c);
}

/* So are blocks from 64 KiB (an MLP's activations, in 4 KiB steps): a freed one comes back
 * for the next request that rounds to its size, even after a request of another size; blocks
 * under 64 KiB stay with malloc. */
static void test_mid_block_reuse(void **state) {
  (void)state;
  int64_t n = 32768, near = 32700, other = 50000; /* 128 KiB, the same 4 KiB step, 195 KiB */
  em_tensor *a = NULL, *b = NULL, *c = NULL;
  assert_int_equal(em_full(&a, 1, &n, 1.5, EM_FLOAT32, CPU), EM_OK);
  void *pa = em_tensor_data(a);
  em_tensor_release(a);
  assert_int_equal(em_empty(&b, 1, &other, EM_FLOAT32, CPU), EM_OK);
  assert_ptr_not_equal(em_tensor_data(b), pa);
  assert_int_equal(em_full(&c, 1, &near, 2.5, EM_FLOAT32, CPU), EM_OK);
  assert_ptr_equal(em_tensor_data(c), pa);
  const float *v = em_tensor_data(c);
  assert_true(v[0] == 2.5f && v[near - 1] == 2.5f);
  em_tensor_release(b);
  em_tensor_release(c);
}

static void test_as_strided_bounds(void **state) {
  (void)state;
  em_tensor *a = NULL, *v = NULL;
  em_zeros(&a, 1, (int64_t[]){10}, EM_FLOAT32, CPU);
  assert_int_equal(em_as_strided(&v, a, 2, (int64_t[]){3, 3}, (int64_t[]){3, 1}, 1), EM_OK);
  em_tensor_release(v);
  assert_int_equal(em_as_strided(&v, a, 2, (int64_t[]){3, 3}, (int64_t[]){4, 1}, 1), EM_ERR_INDEX);
  em_tensor_release(a);
}

/* The file holds the old bytes or the new ones, and no temporary file is left beside it;
 * a folder that does not exist is an error naming the path. */
static void test_file_replace(void **state) {
  (void)state;
  char dir[] = "/tmp/ember_test_replaceXXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[128];
  snprintf(path, sizeof path, "%s/f.bin", dir);
  assert_int_equal(em_file_replace(path, "first", 5), EM_OK);
  assert_int_equal(em_file_replace(path, "second!", 7), EM_OK);
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  char buf[16] = {0};
  assert_int_equal(fread(buf, 1, sizeof buf, f), 7);
  fclose(f);
  assert_string_equal(buf, "second!");
  assert_int_equal(em_file_replace(path, NULL, 0), EM_OK); /* empty is a valid file */
  int entries = 0;
  DIR *d = opendir(dir);
  for (struct dirent *e; (e = readdir(d));) entries += e->d_name[0] != '.';
  closedir(d);
  assert_int_equal(entries, 1);
  char missing[160];
  snprintf(missing, sizeof missing, "%s/no/such/folder/x", dir);
  expect_error(em_file_replace(missing, "x", 1), EM_ERR_IO, missing);
  expect_error(em_file_replace("", "x", 1), EM_ERR_ARGUMENT, "path is empty");
  unlink(path);
  rmdir(dir);
}

static void test_clock_is_monotonic(void **state) {
  (void)state;
  double a = em_clock_monotonic();
  usleep(2000);
  double b = em_clock_monotonic();
  assert_true(b - a >= 0.0015 && b - a < 5);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dtypes),
      cmocka_unit_test(test_devices),
      cmocka_unit_test(test_half_conversion),
      cmocka_unit_test(test_create_and_release),
      cmocka_unit_test(test_eye_linspace),
      cmocka_unit_test(test_views_share_storage),
      cmocka_unit_test(test_permute_expand_squeeze),
      cmocka_unit_test(test_copy_convert),
      cmocka_unit_test(test_large_copy_parallel),
      cmocka_unit_test(test_from_blob_and_free),
      cmocka_unit_test(test_as_strided_bounds),
      cmocka_unit_test(test_large_block_reuse),
      cmocka_unit_test(test_mid_block_reuse),
      cmocka_unit_test(test_file_replace),
      cmocka_unit_test(test_clock_is_monotonic),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
