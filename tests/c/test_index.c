/* test_index.c - index_select, gather, scatter_, index_add_, index_fill_, masked ops,
 * nonzero, cat and stack: values (examples from PyTorch's documentation where it has
 * them, hand-computed otherwise), positions from base 0 and 1, and every error. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "test_util.h"
#include "ember/tensor.h"

static em_tensor *tensor(int nd, const int64_t *sizes, em_dtype dtype, const double *values) {
  em_tensor *t = NULL;
  assert_int_equal(em_empty(&t, nd, sizes, dtype, CPU), EM_OK);
  int64_t n = em_tensor_numel(t), idx[8];
  for (int64_t i = 0; i < n; i++) {
    int64_t rest = i;
    for (int d = nd - 1; d >= 0; d--) idx[d] = rest % sizes[d], rest /= sizes[d];
    assert_int_equal(em_tensor_set(t, idx, values[i]), EM_OK);
  }
  return t;
}
#define T(dtype, values, ...) \
  tensor((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}, dtype, (double[])values)
#define V(...) \
  { __VA_ARGS__ }

static em_tensor *arange(int nd, const int64_t *sizes, em_dtype dtype) {
  em_tensor *flat = NULL, *t = NULL;
  int64_t n = 1;
  for (int d = 0; d < nd; d++) n *= sizes[d];
  assert_int_equal(em_arange(&flat, 0, (double)n, 1, dtype, CPU), EM_OK);
  assert_int_equal(em_view(&t, flat, nd, sizes), EM_OK);
  em_tensor_release(flat);
  return t;
}

/* Checks shape and logical values. */
static void expect(const em_tensor *t, int nd, const int64_t *sizes, const double *values) {
  assert_int_equal(em_tensor_ndim(t), nd);
  for (int d = 0; d < nd; d++) assert_int_equal(em_tensor_size(t, d), sizes[d]);
  int64_t n = em_tensor_numel(t), idx[8];
  for (int64_t i = 0; i < n; i++) {
    int64_t rest = i;
    for (int d = nd - 1; d >= 0; d--) idx[d] = rest % sizes[d], rest /= sizes[d];
    double v;
    assert_int_equal(em_tensor_get(t, idx, &v), EM_OK);
    if (!(v == values[i])) fail_msg("element %lld is %g, expected %g", (long long)i, v, values[i]);
  }
}
#define EXPECT(t, values, ...) \
  expect(t, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}, (double[])values)

/* Same shape, same values (NaN-free tensors). */
static void assert_same(const em_tensor *a, const em_tensor *b) {
  assert_int_equal(em_tensor_numel(a), em_tensor_numel(b));
  int nd = em_tensor_ndim(a);
  int64_t n = em_tensor_numel(a), idx[8];
  for (int64_t i = 0; i < n; i++) {
    int64_t rest = i;
    for (int d = nd - 1; d >= 0; d--) idx[d] = rest % em_tensor_size(a, d), rest /= em_tensor_size(a, d);
    double x, y;
    assert_int_equal(em_tensor_get(a, idx, &x), EM_OK);
    assert_int_equal(em_tensor_get(b, idx, &y), EM_OK);
    assert_true(x == y);
  }
}

static void release(em_tensor **ts, int n) {
  for (int i = 0; i < n; i++) em_tensor_release(ts[i]);
}

static void test_index_select(void **state) {
  (void)state;
  em_tensor *a = arange(2, (int64_t[]){3, 4}, EM_FLOAT32), *r = NULL, *r2 = NULL, *r3 = NULL, *at = NULL, *h = NULL,
            *hr = NULL;
  em_tensor *i0 = T(EM_INT64, V(2, 0, 2), 3), *i1 = T(EM_INT32, V(4, 1), 2);
  assert_int_equal(em_index_select(&r, a, 0, i0, 0), EM_OK);
  EXPECT(r, V(8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11), 3, 4);
  /* From Lua: positions 1-based, int32 index, negative dim. */
  assert_int_equal(em_index_select(&r2, a, -1, i1, 1), EM_OK);
  EXPECT(r2, V(3, 0, 7, 4, 11, 8), 3, 2);
  /* A transposed (strided) source, a storage-only dtype (pure copies work). */
  assert_int_equal(em_transpose(&at, a, 0, 1), EM_OK);
  assert_int_equal(em_index_select(&r3, at, 1, i0, 0), EM_OK);
  EXPECT(r3, V(8, 0, 8, 9, 1, 9, 10, 2, 10, 11, 3, 11), 4, 3);
  assert_int_equal(em_to(&h, a, EM_FLOAT16, CPU), EM_OK);
  assert_int_equal(em_index_select(&hr, h, 0, i0, 0), EM_OK);
  EXPECT(hr, V(8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11), 3, 4);
  /* Errors: out of range (in the caller's base), negative, wrong dtype, wrong rank. */
  em_tensor *bad0 = T(EM_INT64, V(0, 3), 2), *bad1 = T(EM_INT64, V(1, 0), 2), *neg = T(EM_INT32, V(-1), 1);
  em_tensor *fidx = T(EM_FLOAT32, V(0), 1), *idx2 = T(EM_INT64, V(0, 1), 1, 2), *none = NULL;
  expect_error(em_index_select(&none, a, 0, bad0, 0), EM_ERR_INDEX,
               "index_select: index 3 is out of range for dim 0 of size 3 (expected 0..2)");
  expect_error(em_index_select(&none, a, 0, bad1, 1), EM_ERR_INDEX,
               "index_select: index 0 is out of range for dim 1 of size 3 (expected 1..3)");
  expect_error(em_index_select(&none, a, 1, neg, 0), EM_ERR_INDEX, "index -1 is out of range for dim 1 of size 4");
  expect_error(em_index_select(&none, a, 0, fidx, 0), EM_ERR_DTYPE,
               "the index must be an int64 or int32 tensor, got float32");
  expect_error(em_index_select(&none, a, 0, idx2, 0), EM_ERR_SHAPE, "the index must be 1-d, got shape [1, 2]");
  expect_error(em_index_select(&none, a, 2, i0, 0), EM_ERR_INDEX, "dim 2 out of range");
  assert_null(none);
  em_tensor *all[] = {a, r, r2, r3, at, h, hr, i0, i1, bad0, bad1, neg, fidx, idx2};
  release(all, 14);
}

static void test_gather(void **state) {
  (void)state;
  em_tensor *a = arange(2, (int64_t[]){3, 4}, EM_INT64), *r = NULL, *r2 = NULL, *r3 = NULL, *none = NULL;
  em_tensor *idx = T(EM_INT64, V(0, 0, 1, 0, 3, 2), 3, 2);
  /* out[i][j] = a[i][idx[i][j]] */
  assert_int_equal(em_gather(&r, a, 1, idx, 0), EM_OK);
  EXPECT(r, V(0, 0, 5, 4, 11, 10), 3, 2);
  /* dim 0, base 1: out[i][j] = a[idx[i][j] - 1][j]; the index may be smaller than a. */
  em_tensor *idx1 = T(EM_INT32, V(3, 1, 2), 1, 3);
  assert_int_equal(em_gather(&r2, a, 0, idx1, 1), EM_OK);
  EXPECT(r2, V(8, 1, 6), 1, 3);
  /* Along dim the index may be longer than a. */
  em_tensor *long_idx = T(EM_INT64, V(0, 0, 0, 0, 0), 1, 5);
  assert_int_equal(em_gather(&r3, a, 1, long_idx, 0), EM_OK);
  EXPECT(r3, V(0, 0, 0, 0, 0), 1, 5);
  em_tensor *too_wide = T(EM_INT64, V(0, 0, 0, 0, 0), 5, 1), *rank1 = T(EM_INT64, V(0), 1),
            *oob = T(EM_INT64, V(0, 4), 1, 2);
  expect_error(em_gather(&none, a, 1, too_wide, 0), EM_ERR_SHAPE,
               "gather: the index (shape [5, 1]) is larger than the tensor (shape [3, 4]) at dim 0 (5 > 3)");
  expect_error(em_gather(&none, a, 1, rank1, 0), EM_ERR_SHAPE, "must have as many dims as the tensor");
  expect_error(em_gather(&none, a, 1, oob, 0), EM_ERR_INDEX,
               "gather: index 4 is out of range for dim 1 of size 4 (expected 0..3)");
  expect_error(em_gather(&none, a, 1, oob, 1), EM_ERR_INDEX,
               "gather: index 0 is out of range for dim 2 of size 4 (expected 1..4)");
  assert_null(none);
  em_tensor *all[] = {a, r, r2, r3, idx, idx1, long_idx, too_wide, rank1, oob};
  release(all, 10);
}

static void test_scatter(void **state) {
  (void)state;
  /* PyTorch's documentation: src = arange(1, 11).reshape(2, 5). */
  em_tensor *src = T(EM_INT64, V(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 2, 5), *s0 = NULL, *s1 = NULL;
  em_tensor *i0 = T(EM_INT64, V(0, 1, 2, 0), 1, 4), *i1 = T(EM_INT64, V(0, 1, 2, 0, 1, 4), 2, 3);
  assert_int_equal(em_zeros(&s0, 2, (int64_t[]){3, 5}, EM_INT64, CPU), EM_OK);
  assert_int_equal(em_scatter_(s0, 0, i0, src, 0, 0), EM_OK);
  EXPECT(s0, V(1, 0, 0, 4, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0), 3, 5);
  assert_int_equal(em_zeros(&s1, 2, (int64_t[]){3, 5}, EM_INT64, CPU), EM_OK);
  assert_int_equal(em_scatter_(s1, 1, i1, src, 0, 0), EM_OK);
  EXPECT(s1, V(1, 2, 3, 0, 0, 6, 7, 0, 0, 8, 0, 0, 0, 0, 0), 3, 5);
  /* scatter_add_ (PyTorch's example), from base 1, src of another dtype (converted). */
  em_tensor *ones = NULL, *acc = NULL, *ia = T(EM_INT32, V(1, 2, 3, 1, 1, 1, 2, 3, 3, 1), 2, 5);
  assert_int_equal(em_ones(&ones, 2, (int64_t[]){2, 5}, EM_FLOAT64, CPU), EM_OK);
  assert_int_equal(em_zeros(&acc, 2, (int64_t[]){3, 5}, EM_FLOAT32, CPU), EM_OK);
  assert_int_equal(em_scatter_(acc, 0, ia, ones, 1, 1), EM_OK);
  EXPECT(acc, V(2, 0, 0, 1, 2, 0, 2, 0, 0, 0, 0, 0, 2, 1, 0), 3, 5);
  /* scatter_value_ */
  assert_int_equal(em_scatter_value_(s1, 1, i1, -7, 0), EM_OK);
  EXPECT(s1, V(-7, -7, -7, 0, 0, -7, -7, 0, 0, -7, 0, 0, 0, 0, 0), 3, 5);
  /* A bad index anywhere (here the last one) fails before anything is written. */
  em_tensor *bad = T(EM_INT64, V(0, 1, 2, 0, 1, 5), 2, 3), *before = NULL, *none = NULL;
  assert_int_equal(em_clone(&before, s1), EM_OK);
  expect_error(em_scatter_(s1, 1, bad, src, 0, 0), EM_ERR_INDEX,
               "scatter_: index 5 is out of range for dim 1 of size 5 (expected 0..4)");
  expect_error(em_scatter_(s1, 1, bad, src, 1, 0), EM_ERR_INDEX, "scatter_add_: index 5 is out of range");
  expect_error(em_scatter_value_(s1, 1, bad, 3, 1), EM_ERR_INDEX,
               "scatter_value_: index 0 is out of range for dim 2 of size 5 (expected 1..5)");
  em_tensor *negative = T(EM_INT32, V(0, -1), 1, 2);
  expect_error(em_scatter_value_(s1, 0, negative, 3, 0), EM_ERR_INDEX, "index -1 is out of range for dim 0 of size 3");
  assert_same(s1, before);
  /* Shape rules. */
  em_tensor *wide = T(EM_INT64, V(0, 0, 0, 0, 0, 0), 1, 6), *small_src = T(EM_INT64, V(1, 2), 1, 2);
  expect_error(em_scatter_(s0, 0, wide, src, 0, 0), EM_ERR_SHAPE,
               "scatter_: the index (shape [1, 6]) is larger than the tensor (shape [3, 5]) at dim 1 (6 > 5)");
  expect_error(em_scatter_(s0, 0, i0, small_src, 0, 0), EM_ERR_SHAPE,
               "scatter_: the index (shape [1, 4]) is larger than the source (shape [1, 2]) at dim 1 (4 > 2)");
  expect_error(em_scatter_(s0, 0, i0, NULL, 0, 0), EM_ERR_ARGUMENT, "expected a tensor for source");
  em_tensor *h = NULL;
  assert_int_equal(em_zeros(&h, 2, (int64_t[]){3, 5}, EM_FLOAT16, CPU), EM_OK);
  expect_error(em_scatter_(h, 0, i0, src, 1, 0), EM_ERR_DTYPE, "float16 is storage-only");
  (void)none;
  em_tensor *all[] = {src, s0, s1, i0, i1, ones, acc, ia, bad, before, negative, wide, small_src, h};
  release(all, 14);
}

static void test_index_add_and_fill(void **state) {
  (void)state;
  /* PyTorch's documentation: x = ones(5, 3); x.index_add_(0, [0, 4, 2], t). */
  em_tensor *x = NULL, *t = T(EM_FLOAT32, V(1, 2, 3, 4, 5, 6, 7, 8, 9), 3, 3), *idx = T(EM_INT64, V(0, 4, 2), 3);
  assert_int_equal(em_ones(&x, 2, (int64_t[]){5, 3}, EM_FLOAT32, CPU), EM_OK);
  assert_int_equal(em_index_add_(x, 0, idx, t, 1, 0), EM_OK);
  EXPECT(x, V(2, 3, 4, 1, 1, 1, 8, 9, 10, 1, 1, 1, 5, 6, 7), 5, 3);
  /* alpha = -1 undoes it; from base 1 with repeated positions they accumulate. */
  assert_int_equal(em_index_add_(x, 0, idx, t, -1, 0), EM_OK);
  EXPECT(x, V(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1), 5, 3);
  em_tensor *dup = T(EM_INT32, V(2, 2, 2), 3), *t5 = arange(2, (int64_t[]){5, 3}, EM_FLOAT32);
  assert_int_equal(em_index_add_(x, 1, dup, t5, 2, 1), EM_OK); /* column 1 += 2 * row sums of t5 */
  EXPECT(x, V(1, 7, 1, 1, 25, 1, 1, 43, 1, 1, 61, 1, 1, 79, 1), 5, 3);
  /* Errors leave x unchanged. */
  em_tensor *bad = T(EM_INT64, V(0, 1, 5), 3), *before = NULL;
  assert_int_equal(em_clone(&before, x), EM_OK);
  expect_error(em_index_add_(x, 0, bad, t, 1, 0), EM_ERR_INDEX,
               "index_add_: index 5 is out of range for dim 0 of size 5 (expected 0..4)");
  em_tensor *short_idx = T(EM_INT64, V(0, 1), 2);
  expect_error(em_index_add_(x, 0, short_idx, t, 1, 0), EM_ERR_SHAPE,
               "index_add_: the source has shape [3, 3]; expected the tensor's shape [5, 3] with 2 (the index's "
               "length) along dim 0");
  assert_same(x, before);
  /* index_fill_: columns 1 and 3 (base 1) of a 3x3. */
  em_tensor *y = arange(2, (int64_t[]){3, 3}, EM_INT32), *cols = T(EM_INT64, V(1, 3), 2);
  assert_int_equal(em_index_fill_(y, 1, cols, -1, 1), EM_OK);
  EXPECT(y, V(-1, 1, -1, -1, 4, -1, -1, 7, -1), 3, 3);
  expect_error(em_index_fill_(y, 1, cols, 0, 0), EM_ERR_INDEX,
               "index_fill_: index 3 is out of range for dim 1 of size 3 (expected 0..2)");
  em_tensor *all[] = {x, t, idx, dup, t5, bad, before, short_idx, y, cols};
  release(all, 10);
}

static void test_masks(void **state) {
  (void)state;
  em_tensor *x = arange(2, (int64_t[]){2, 3}, EM_FLOAT64), *m = T(EM_BOOL, V(1, 0, 1), 3), *r = NULL, *r2 = NULL,
            *r3 = NULL;
  /* masked_select: the mask broadcasts; the result is 1-d in logical order. */
  assert_int_equal(em_masked_select(&r, x, m), EM_OK);
  EXPECT(r, V(0, 2, 3, 5), 4);
  em_tensor *m2 = T(EM_UINT8, V(0, 0, 0, 0, 1, 0), 2, 3), *zero = T(EM_BOOL, V(0), 1);
  assert_int_equal(em_masked_select(&r2, x, m2), EM_OK);
  EXPECT(r2, V(4), 1);
  assert_int_equal(em_masked_select(&r3, x, zero), EM_OK);
  assert_int_equal(em_tensor_numel(r3), 0);
  /* masked_fill_ with a broadcast mask, on a transposed view. */
  em_tensor *xt = NULL;
  assert_int_equal(em_transpose(&xt, x, 0, 1), EM_OK); /* [3, 2] */
  em_tensor *mcol = T(EM_BOOL, V(0, 1), 2);
  assert_int_equal(em_masked_fill_(xt, mcol, 9.5), EM_OK);
  EXPECT(x, V(0, 1, 2, 9.5, 9.5, 9.5), 2, 3);
  em_tensor *fm = T(EM_FLOAT32, V(1), 1), *m4 = T(EM_BOOL, V(1, 0, 1, 0), 4), *none = NULL;
  expect_error(em_masked_fill_(x, fm, 0), EM_ERR_DTYPE, "masked_fill_: the mask must be bool or uint8, got float32");
  expect_error(em_masked_fill_(x, m4, 0), EM_ERR_SHAPE,
               "masked_fill_: the mask of shape [4] does not broadcast to the tensor's shape [2, 3]");
  expect_error(em_masked_select(&none, x, m4), EM_ERR_SHAPE,
               "the tensor of shape [2, 3] and the mask of shape [4] cannot be broadcast");
  assert_null(none);
  em_tensor *all[] = {x, m, r, r2, r3, m2, zero, xt, mcol, fm, m4};
  release(all, 11);
}

static void test_nonzero(void **state) {
  (void)state;
  em_tensor *a = T(EM_FLOAT32, V(0, 1, 2, 0, -0.0, NAN), 2, 3), *r = NULL, *r1 = NULL, *rt = NULL, *at = NULL;
  assert_int_equal(em_nonzero(&r, a, 0), EM_OK);
  EXPECT(r, V(0, 1, 0, 2, 1, 2), 3, 2); /* -0 is zero, NaN is not */
  assert_int_equal(em_nonzero(&r1, a, 1), EM_OK);
  EXPECT(r1, V(1, 2, 1, 3, 2, 3), 3, 2);
  assert_int_equal(em_transpose(&at, a, 0, 1), EM_OK);
  assert_int_equal(em_nonzero(&rt, at, 0), EM_OK);
  EXPECT(rt, V(1, 0, 2, 0, 2, 1), 3, 2);
  em_tensor *s = NULL, *rs = NULL, *z = NULL, *rz = NULL;
  assert_int_equal(em_full(&s, 0, NULL, 3, EM_INT32, CPU), EM_OK);
  assert_int_equal(em_nonzero(&rs, s, 0), EM_OK); /* a 0-d nonzero: one row of no columns */
  assert_int_equal(em_tensor_size(rs, 0), 1);
  assert_int_equal(em_tensor_size(rs, 1), 0);
  assert_int_equal(em_zeros(&z, 1, (int64_t[]){5}, EM_UINT8, CPU), EM_OK);
  assert_int_equal(em_nonzero(&rz, z, 0), EM_OK);
  assert_int_equal(em_tensor_size(rz, 0), 0);
  assert_int_equal(em_tensor_dtype(rz), EM_INT64);
  em_tensor *all[] = {a, r, r1, rt, at, s, rs, z, rz};
  release(all, 9);
}

static void test_cat(void **state) {
  (void)state;
  em_tensor *a = arange(2, (int64_t[]){2, 3}, EM_FLOAT32), *b = T(EM_INT64, V(7, 8, 9), 1, 3), *e = NULL, *r = NULL;
  assert_int_equal(em_empty(&e, 1, (int64_t[]){0}, EM_FLOAT64, CPU), EM_OK);
  /* dtype promotion (float32, int64 -> float32), an empty 1-d tensor skipped. */
  em_tensor *list[] = {e, a, b};
  assert_int_equal(em_cat(&r, list + 1, 2, 0), EM_OK);
  assert_int_equal(em_tensor_dtype(r), EM_FLOAT32);
  EXPECT(r, V(0, 1, 2, 3, 4, 5, 7, 8, 9), 3, 3);
  em_tensor_release(r), r = NULL;
  assert_int_equal(em_cat(&r, list, 3, 0), EM_OK); /* the empty one takes part in promotion only */
  assert_int_equal(em_tensor_dtype(r), EM_FLOAT64);
  EXPECT(r, V(0, 1, 2, 3, 4, 5, 7, 8, 9), 3, 3);
  em_tensor_release(r), r = NULL;
  /* dim 1, a transposed input, a negative dim. */
  em_tensor *c = arange(2, (int64_t[]){2, 2}, EM_FLOAT32), *ct = NULL;
  assert_int_equal(em_transpose(&ct, c, 0, 1), EM_OK);
  em_tensor *list2[] = {a, ct};
  assert_int_equal(em_cat(&r, list2, 2, -1), EM_OK);
  EXPECT(r, V(0, 1, 2, 0, 2, 3, 4, 5, 1, 3), 2, 5);
  em_tensor_release(r), r = NULL;
  /* Only empty tensors: an empty 1-d result. */
  em_tensor *list3[] = {e, e};
  assert_int_equal(em_cat(&r, list3, 2, 0), EM_OK);
  assert_int_equal(em_tensor_numel(r), 0);
  em_tensor_release(r), r = NULL;
  /* Errors name the offending tensor's position and shape. */
  em_tensor *w = arange(2, (int64_t[]){2, 4}, EM_FLOAT32), *v = arange(1, (int64_t[]){3}, EM_FLOAT32), *s = NULL;
  em_tensor *bad1[] = {a, b, w};
  expect_error(em_cat(&r, bad1, 3, 0), EM_ERR_SHAPE,
               "cat: the 3rd tensor has shape [2, 4], which does not match the 1st tensor's shape [2, 3] outside the "
               "concatenated dim");
  em_tensor *bad2[] = {e, a, v};
  expect_error(em_cat(&r, bad2, 3, 0), EM_ERR_SHAPE,
               "cat: the 3rd tensor has shape [3], which does not match the 2nd tensor's shape [2, 3]");
  assert_int_equal(em_full(&s, 0, NULL, 1, EM_FLOAT32, CPU), EM_OK);
  em_tensor *bad3[] = {s, s};
  expect_error(em_cat(&r, bad3, 2, 0), EM_ERR_SHAPE, "cat: the 1st tensor is 0-d");
  em_tensor *bad4[] = {a, NULL};
  expect_error(em_cat(&r, bad4, 2, 0), EM_ERR_ARGUMENT, "cat: the 2nd tensor is nil");
  expect_error(em_cat(&r, list, 0, 0), EM_ERR_ARGUMENT, "cat: expected a non-empty list of tensors");
  expect_error(em_cat(&r, list2, 2, 2), EM_ERR_INDEX, "cat: dim 2 out of range");
  assert_null(r);
  em_tensor *all[] = {a, b, e, c, ct, w, v, s};
  release(all, 8);
}

static void test_stack(void **state) {
  (void)state;
  em_tensor *a = arange(2, (int64_t[]){2, 3}, EM_INT32), *b = NULL, *r = NULL;
  assert_int_equal(em_full(&b, 2, (int64_t[]){2, 3}, 0.5, EM_FLOAT32, CPU), EM_OK);
  em_tensor *list[] = {a, b};
  assert_int_equal(em_stack(&r, list, 2, 0), EM_OK);
  assert_int_equal(em_tensor_dtype(r), EM_FLOAT32);
  EXPECT(r, V(0, 1, 2, 3, 4, 5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5), 2, 2, 3);
  em_tensor_release(r), r = NULL;
  assert_int_equal(em_stack(&r, list, 2, -1), EM_OK);
  EXPECT(r, V(0, 0.5, 1, 0.5, 2, 0.5, 3, 0.5, 4, 0.5, 5, 0.5), 2, 3, 2);
  em_tensor_release(r), r = NULL;
  em_tensor *c = arange(2, (int64_t[]){3, 2}, EM_INT32);
  em_tensor *bad[] = {a, a, c};
  expect_error(em_stack(&r, bad, 3, 0), EM_ERR_SHAPE,
               "stack: the 3rd tensor has shape [3, 2], expected the 1st tensor's shape [2, 3]");
  expect_error(em_stack(&r, list, 2, 3), EM_ERR_INDEX, "stack: dim 3 out of range");
  assert_null(r);
  em_tensor *all[] = {a, b, c};
  release(all, 3);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_index_select), cmocka_unit_test(test_gather),
      cmocka_unit_test(test_scatter),      cmocka_unit_test(test_index_add_and_fill),
      cmocka_unit_test(test_masks),        cmocka_unit_test(test_nonzero),
      cmocka_unit_test(test_cat),          cmocka_unit_test(test_stack),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
