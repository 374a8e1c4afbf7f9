/* test_linalg.c - matmul (numpy's rules) and its relatives against numpy's answers, for
 * every rank combination, dtype and operand layout (contiguous, transposed, strided). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "test_util.h"
#include "ember/tensor.h"

/* The inputs: logical element i of an operand made with `seed` is
 * ((i * 37 + seed * 11) % 17 - 8) / 4 (quarters: float products are exact), or the
 * integer before division for integer dtypes. numpy computed the expected products:
 *   f = lambda shape, seed: (((np.arange(prod(shape)) * 37 + seed * 11) % 17) - 8)
 *                            .reshape(shape) / 4.0
 *   np.matmul(f(sa, 1), f(sb, 2)) */
static double formula(int64_t i, int seed) { return (double)((i * 37 + seed * 11) % 17 - 8); }

typedef struct mm_case {
  int na;
  int64_t sa[4];
  int nb;
  int64_t sb[4];
  int nr;
  int64_t sr[4];
  double expected[36];
} mm_case;

static const mm_case cases[] = {
    /* [4] @ [4] -> [] */ {1, {4}, 1, {4}, 0, {0}, {-3.9375}},
    /* [3] @ [3, 5] -> [5] */ {1, {3}, 2, {3, 5}, 1, {5}, {1.0625, 1.25, 1.4375, 1.625, -1.375}},
    /* [3, 4] @ [4] -> [3] */ {2, {3, 4}, 1, {4}, 1, {3}, {-3.9375, 3.75, 1.875}},
    /* [3, 4] @ [4, 5] -> [3, 5] */
    {2,
     {3, 4},
     2,
     {4, 5},
     2,
     {3, 5},
     {-1.4375, 3.125, 2.375, 1.625, -2.3125, 1.8125, -3.75, -1.875, 0, 4, 4, 0, -1.875, -3.75, 1.8125}},
    /* [4] @ [2, 4, 3] -> [2, 3] */
    {1, {4}, 3, {2, 4, 3}, 2, {2, 3}, {0.5, -1.3125, -2.0625, 5.3125, -1.8125, -2.5625}},
    /* [2, 3, 4] @ [4] -> [2, 3] */ {3, {2, 3, 4}, 1, {4}, 2, {2, 3}, {-3.9375, 3.75, 1.875, -3.1875, -1.875, 2.625}},
    /* [2, 3, 4] @ [2, 4, 5] -> [2, 3, 5] */
    {3, {2, 3, 4}, 3, {2, 4, 5}, 3, {2, 3, 5}, {-1.4375, 3.125,   2.375,  1.625,  -2.3125, 1.8125, -3.75,   -1.875,
                                                0,       4,       4,      0,      -1.875,  -3.75,  1.8125,  3.125,
                                                -1.4375, -9.1875, 1.125,  1.875,  1.5,     1.6875, -1.3125, 1,
                                                1.1875,  -2.25,   2.6875, 4.4375, -1.25,   -1.625}},
    /* [3, 4] @ [2, 4, 5] -> [2, 3, 5] (a's batch broadcasts) */
    {2, {3, 4}, 3, {2, 4, 5}, 3, {2, 3, 5}, {-1.4375, 3.125,   2.375,  1.625,  -2.3125, 1.8125, -3.75,  -1.875,
                                             0,       4,       4,      0,      -1.875,  -3.75,  1.8125, 1.625,
                                             -2.3125, -9.4375, 3.625,  2.875,  0,       4,      4.8125, -5,
                                             -3.125,  -3.75,   1.8125, 4.1875, 1.25,    -0.625}},
    /* [2, 3, 4] @ [4, 5] -> [2, 3, 5] (b's batch broadcasts) */
    {3, {2, 3, 4}, 2, {4, 5}, 3, {2, 3, 5}, {-1.4375, 3.125, 2.375, 1.625,   -2.3125, 1.8125, -3.75,  -1.875,
                                             0,       4,     4,     0,       -1.875,  -3.75,  1.8125, -2.3125,
                                             1.625,   2.375, 3.125, -1.4375, -7.5625, 1.125,  1.3125, 1.5,
                                             1.6875,  3.125, -1.5,  -1.875,  -2.25,   2.6875}},
    /* [2, 1, 3, 4] @ [3, 4, 2] -> [2, 3, 3, 2] (both batches broadcast) */
    {4, {2, 1, 3, 4}, 3, {3, 4, 2}, 4, {2, 3, 3, 2}, {5.1875,  4.4375,  -2.3125, -0.4375, 0.8125,  -1.0625,
                                                      -2.9375, -3.6875, 1,       2.875,   0.6875,  -1.1875,
                                                      -2.5625, 5.1875,  0.0625,  -2.3125, 1.625,   0.8125,
                                                      3.9375,  4.6875,  -1.4375, -1.25,   -0.4375, -0.8125,
                                                      -2.8125, -2.0625, -4.1875, -4,      0.8125,  0.4375,
                                                      -3.1875, 3.9375,  4.75,    -1.4375, 1,       -0.4375}},
    /* [1, 3] @ [3, 1] -> [1, 1] (BLAS dot) */ {2, {1, 3}, 2, {3, 1}, 2, {1, 1}, {-2.0625}},
    /* [1, 4] @ [4, 5] -> [1, 5] (gemv on b^T) */
    {2, {1, 4}, 2, {4, 5}, 2, {1, 5}, {-1.4375, 3.125, 2.375, 1.625, -2.3125}},
    /* [5, 4] @ [4, 1] -> [5, 1] (gemv) */ {2, {5, 4}, 2, {4, 1}, 2, {5, 1}, {-3.9375, 3.75, 1.875, -3.1875, -1.875}},
};
#define NCASES ((int)(sizeof cases / sizeof *cases))

/* Operand layouts: how the logical tensor lies in memory. */
enum { CONTIGUOUS, TRANSPOSED, STRIDED, NLAYOUTS };
static const char *layout_name[] = {"contiguous", "transposed", "strided"};

/* Writes the formula into t's logical elements (any strides). */
static void fill_formula(em_tensor *t, int seed, int integer) {
  int nd = em_tensor_ndim(t);
  int64_t n = em_tensor_numel(t), idx[8];
  for (int64_t i = 0; i < n; i++) {
    int64_t rest = i;
    for (int d = nd - 1; d >= 0; d--) idx[d] = rest % em_tensor_size(t, d), rest /= em_tensor_size(t, d);
    assert_int_equal(em_tensor_set(t, idx, integer ? formula(i, seed) : formula(i, seed) / 4), EM_OK);
  }
}

/* A tensor of logical shape (nd, sizes) in the given layout: TRANSPOSED swaps the last two
 * dims in memory (1-d: contiguous); STRIDED leaves gaps so that no dim has a unit stride. */
static em_tensor *make(int nd, const int64_t *sizes, em_dtype dtype, int layout, int seed) {
  em_tensor *store = NULL, *t = NULL;
  int64_t s[8];
  memcpy(s, sizes, sizeof(int64_t) * nd);
  if (layout == TRANSPOSED && nd >= 2) {
    s[nd - 2] = sizes[nd - 1], s[nd - 1] = sizes[nd - 2];
    assert_int_equal(em_empty(&store, nd, s, dtype, CPU), EM_OK);
    assert_int_equal(em_transpose(&t, store, -1, -2), EM_OK);
  } else if (layout == STRIDED) {
    s[nd] = 2;
    assert_int_equal(em_empty(&store, nd + 1, s, dtype, CPU), EM_OK);
    assert_int_equal(em_select(&t, store, nd, 1), EM_OK);
  } else {
    assert_int_equal(em_empty(&t, nd, sizes, dtype, CPU), EM_OK);
  }
  em_tensor_release(store);
  fill_formula(t, seed, dtype != EM_FLOAT32 && dtype != EM_FLOAT64);
  return t;
}

static void check_values(const em_tensor *t, const double *expected, double scale, double tol, const char *what) {
  int nd = em_tensor_ndim(t);
  int64_t n = em_tensor_numel(t), idx[8];
  for (int64_t i = 0; i < n; i++) {
    int64_t rest = i;
    for (int d = nd - 1; d >= 0; d--) idx[d] = rest % em_tensor_size(t, d), rest /= em_tensor_size(t, d);
    double v;
    assert_int_equal(em_tensor_get(t, idx, &v), EM_OK);
    if (!(fabs(v - expected[i] * scale) <= tol))
      fail_msg("%s: element %lld is %g, expected %g", what, (long long)i, v, expected[i] * scale);
  }
}

/* Every rank combination, every dtype, contiguous operands. Integer operands are 4x the
 * float ones, so their products are 16x. */
static void test_matmul_ranks_and_dtypes(void **state) {
  (void)state;
  em_dtype dtypes[] = {EM_FLOAT32, EM_FLOAT64, EM_INT64, EM_INT32};
  for (int k = 0; k < NCASES; k++)
    for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++) {
      const mm_case *c = &cases[k];
      em_tensor *a = make(c->na, c->sa, dtypes[d], CONTIGUOUS, 1), *b = make(c->nb, c->sb, dtypes[d], CONTIGUOUS, 2);
      em_tensor *r = NULL;
      assert_int_equal(em_matmul(&r, a, b), EM_OK);
      assert_int_equal(em_tensor_dtype(r), dtypes[d]);
      check_shape(r, c->nr, c->sr);
      check_values(r, c->expected, d >= 2 ? 16 : 1, 1e-5, em_dtype_name(dtypes[d]));
      em_tensor_release(a), em_tensor_release(b), em_tensor_release(r);
    }
}

/* Every rank combination with each operand contiguous, transposed or strided. */
static void test_matmul_layouts(void **state) {
  (void)state;
  char what[96];
  for (int k = 0; k < NCASES; k++)
    for (int la = 0; la < NLAYOUTS; la++)
      for (int lb = 0; lb < NLAYOUTS; lb++) {
        const mm_case *c = &cases[k];
        em_tensor *a = make(c->na, c->sa, EM_FLOAT32, la, 1), *b = make(c->nb, c->sb, EM_FLOAT32, lb, 2), *r = NULL;
        assert_int_equal(em_matmul(&r, a, b), EM_OK);
        check_shape(r, c->nr, c->sr);
        snprintf(what, sizeof what, "case %d, a %s, b %s", k, layout_name[la], layout_name[lb]);
        check_values(r, c->expected, 1, 1e-5, what);
        em_tensor_release(a), em_tensor_release(b), em_tensor_release(r);
      }
}

/* The result written into a caller's tensor that is transposed (BLAS computes out^T) or
 * strided (computed aside, then copied back), through every BLAS path (gemm, gemv, dot). */
static void test_matmul_out_layouts(void **state) {
  (void)state;
  const int ks[] = {3, 6, 10, 11, 12};
  for (size_t i = 0; i < sizeof ks / sizeof *ks; i++)
    for (int lo = 0; lo < NLAYOUTS; lo++) {
      const mm_case *c = &cases[ks[i]];
      em_tensor *a = make(c->na, c->sa, EM_FLOAT64, TRANSPOSED, 1), *b = make(c->nb, c->sb, EM_FLOAT64, CONTIGUOUS, 2);
      em_tensor *out = make(c->nr, c->sr, EM_FLOAT64, lo, 3), *r = out;
      assert_int_equal(em_fill(out, NAN), EM_OK); /* old values must not leak in (beta = 0) */
      assert_int_equal(em_matmul(&r, a, b), EM_OK);
      assert_ptr_equal(r, out);
      check_values(out, c->expected, 1, 1e-12, layout_name[lo]);
      em_tensor_release(a), em_tensor_release(b), em_tensor_release(out);
    }
}

/* Bigger shapes against a plain loop: tiny GEMMs in a batch (parallel over batches), mid-
 * size ones cut into slabs of rows or of columns, one per thread (sizes that are not
 * multiples of the 16-row slab alignment, transposed operands), permuted batch dims. */
static void test_matmul_against_loop(void **state) {
  (void)state;
  const int64_t shapes[][4] = {{64, 8, 8, 8}, {1, 100, 200, 50}, {3, 33, 17, 65}, {1, 130, 70, 150}, {1, 150, 40, 131}};
  for (int s = 0; s < 5; s++) {
    int64_t B = shapes[s][0], M = shapes[s][1], K = shapes[s][2], N = shapes[s][3];
    int64_t sa[3] = {B, M, K}, sb[3] = {B, K, N};
    em_tensor *a = make(3, sa, EM_FLOAT64, s == 2 || s == 4 ? TRANSPOSED : CONTIGUOUS, 1);
    em_tensor *b = make(3, sb, EM_FLOAT64, s == 2 ? STRIDED : s == 3 ? TRANSPOSED : CONTIGUOUS, 2), *r = NULL;
    assert_int_equal(em_bmm(&r, a, b), EM_OK);
    double *expected = calloc((size_t)(B * M * N), sizeof(double));
    for (int64_t q = 0; q < B; q++)
      for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
          for (int64_t k = 0; k < K; k++)
            expected[(q * M + i) * N + j] += formula((q * M + i) * K + k, 1) / 4 * formula((q * K + k) * N + j, 2) / 4;
    check_values(r, expected, 1, 1e-9, "bmm");
    free(expected);
    em_tensor_release(a), em_tensor_release(b), em_tensor_release(r);
  }
}

/* One mid-size GEMM cut over threads each way gemm.c cuts (runtime/cpu/gemm.c,
 * choose_split): by output rows (the output is the largest matrix), by output columns (a
 * transposed b is), along K (a plain b is: partial products summed afterwards) and whole
 * (the shared operand is too large). out = 0.5 * out + 2 * a @ b, with out row-major and
 * column-major, on 2 and 3 threads; K not a multiple of the 16-element share alignment. */
static void test_matmul_split_with_beta(void **state) {
  (void)state;
  const struct {
    int64_t M, K, N;
    int a_layout, b_layout;
    const char *what;
  } shapes[] = {
      {150, 40, 131, CONTIGUOUS, CONTIGUOUS, "rows"},    {100, 200, 300, CONTIGUOUS, TRANSPOSED, "columns"},
      {36, 400, 40, CONTIGUOUS, CONTIGUOUS, "depth"},    {40, 400, 36, TRANSPOSED, CONTIGUOUS, "depth, a transposed"},
      {128, 2100, 130, CONTIGUOUS, TRANSPOSED, "whole"},
  };
  int saved = em_get_num_threads();
  for (int threads = 2; threads <= 3; threads++) {
    em_set_num_threads(threads);
    for (int s = 0; s < 5; s++)
      for (int dt = 0; dt < 2; dt++)
        for (int out_layout = CONTIGUOUS; out_layout <= TRANSPOSED; out_layout++) {
          int64_t M = shapes[s].M, K = shapes[s].K, N = shapes[s].N;
          em_dtype dtype = dt ? EM_FLOAT64 : EM_FLOAT32;
          em_tensor *a = make(2, (int64_t[]){M, K}, dtype, shapes[s].a_layout, 1);
          em_tensor *b = make(2, (int64_t[]){K, N}, dtype, shapes[s].b_layout, 2);
          em_tensor *out = make(2, (int64_t[]){M, N}, dtype, out_layout, 3), *r = out;
          double *expected = malloc((size_t)(M * N) * sizeof(double));
          for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
              double acc = 0;
              for (int64_t k = 0; k < K; k++) acc += formula(i * K + k, 1) / 4 * formula(k * N + j, 2) / 4;
              expected[i * N + j] = 0.5 * formula(i * N + j, 3) / 4 + 2 * acc;
            }
          assert_int_equal(em_addmm(&r, out, a, b, 0.5, 2), EM_OK);
          assert_ptr_equal(r, out);
          char what[96];
          snprintf(what, sizeof what, "%s, %d threads, %s, out %s", shapes[s].what, threads, dt ? "float64" : "float32",
                   layout_name[out_layout]);
          /* float32: sums of up to 2100 quarter products stay exact below 2^24 */
          check_values(out, expected, 1, dt ? 1e-9 : 1e-3, what);
          free(expected);
          em_tensor_release(a), em_tensor_release(b), em_tensor_release(out);
        }
  }
  em_set_num_threads(saved);
}

static void test_addmm(void **state) {
  (void)state;
  static const double expected[15] = {-1.875, 5.5,   4.375, 3.25,  -4.25,  4.625, -8.25, -4.125,
                                      0,      8.375, 9,     -0.75, -4.125, -7.5,  4};
  int64_t sa[2] = {3, 4}, sb[2] = {4, 5}, sc[1] = {5}, sr[2] = {3, 5};
  em_tensor *a = make(2, sa, EM_FLOAT32, CONTIGUOUS, 1), *b = make(2, sb, EM_FLOAT32, TRANSPOSED, 2);
  em_tensor *c = make(1, sc, EM_FLOAT32, CONTIGUOUS, 3), *r = NULL;
  /* numpy: 0.5 * f((5,), 3) + 2 * (f((3, 4), 1) @ f((4, 5), 2)); c broadcasts over rows. */
  assert_int_equal(em_addmm(&r, c, a, b, 0.5, 2), EM_OK);
  check_shape(r, 2, sr);
  check_values(r, expected, 1, 1e-5, "addmm");
  em_tensor_release(r);
  /* beta = 0 ignores c, NaNs included. */
  r = NULL;
  int64_t zero = 0;
  assert_int_equal(em_tensor_set(c, &zero, NAN), EM_OK);
  assert_int_equal(em_addmm(&r, c, a, b, 0, 1), EM_OK);
  check_values(r, cases[3].expected, 1, 1e-5, "addmm beta=0");
  /* In place: c2 = 0.5 * c2 + 2 * a @ b with c2 the full [3, 5] tensor. */
  em_tensor *c2 = NULL, *c1 = NULL;
  assert_int_equal(em_tensor_set(c, &zero, formula(0, 3) / 4), EM_OK);
  assert_int_equal(em_empty(&c2, 2, sr, EM_FLOAT32, CPU), EM_OK);
  assert_int_equal(em_copy_(c2, c), EM_OK);
  c1 = c2;
  assert_int_equal(em_addmm(&c1, c2, a, b, 0.5, 2), EM_OK);
  assert_ptr_equal(c1, c2);
  check_values(c2, expected, 1, 1e-5, "addmm in place");
  /* The output may be an operand: computed aside, then copied. */
  em_tensor *sq = make(2, (int64_t[]){3, 3}, EM_FLOAT64, CONTIGUOUS, 1), *sq_copy = NULL, *ref = NULL;
  assert_int_equal(em_clone(&sq_copy, sq), EM_OK);
  assert_int_equal(em_mm(&ref, sq_copy, sq_copy), EM_OK);
  em_tensor *alias = sq;
  assert_int_equal(em_mm(&alias, sq, sq), EM_OK);
  for (int64_t i = 0; i < 9; i++) {
    int64_t idx[2] = {i / 3, i % 3};
    double x, y;
    em_tensor_get(sq, idx, &x), em_tensor_get(ref, idx, &y);
    assert_true(x == y);
  }
  /* c must broadcast to the product's shape. */
  em_tensor *bad = make(1, (int64_t[]){4}, EM_FLOAT32, CONTIGUOUS, 3), *none = NULL;
  assert_int_equal(em_addmm(&none, bad, a, b, 1, 1), EM_ERR_SHAPE);
  assert_non_null(
      strstr(em_last_error(), "addmm: the added tensor of shape [4] does not broadcast to the product's shape [3, 5]"));
  assert_null(none);
  em_tensor_release(a), em_tensor_release(b), em_tensor_release(c), em_tensor_release(r), em_tensor_release(c2);
  em_tensor_release(sq), em_tensor_release(sq_copy), em_tensor_release(ref), em_tensor_release(bad);
}

static void test_mm_mv_dot_outer(void **state) {
  (void)state;
  em_tensor *m34 = make(2, cases[3].sa, EM_FLOAT32, CONTIGUOUS, 1),
            *m45 = make(2, cases[3].sb, EM_FLOAT32, CONTIGUOUS, 2);
  em_tensor *v4a = make(1, (int64_t[]){4}, EM_FLOAT32, STRIDED, 1),
            *v4b = make(1, (int64_t[]){4}, EM_FLOAT32, STRIDED, 2);
  em_tensor *r = NULL;
  assert_int_equal(em_mm(&r, m34, m45), EM_OK);
  check_values(r, cases[3].expected, 1, 1e-5, "mm");
  em_tensor_release(r), r = NULL;
  assert_int_equal(em_mv(&r, m34, v4b), EM_OK);
  check_values(r, cases[2].expected, 1, 1e-5, "mv");
  em_tensor_release(r), r = NULL;
  assert_int_equal(em_dot(&r, v4a, v4b), EM_OK);
  assert_int_equal(em_tensor_ndim(r), 0);
  check_values(r, cases[0].expected, 1, 1e-5, "dot");
  em_tensor_release(r), r = NULL;
  /* outer: r[i][j] = a[i] * b[j] */
  em_tensor *v3 = make(1, (int64_t[]){3}, EM_INT64, TRANSPOSED, 1),
            *v5 = make(1, (int64_t[]){5}, EM_FLOAT64, STRIDED, 2);
  assert_int_equal(em_outer(&r, v3, v5), EM_OK);
  assert_int_equal(em_tensor_dtype(r), EM_FLOAT64); /* int64 with float64 promotes */
  double expected[15];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 5; j++) expected[i * 5 + j] = formula(i, 1) * formula(j, 2) / 4;
  check_values(r, expected, 1, 0, "outer");
  em_tensor_release(r), r = NULL;
  /* Rank rules of the fixed-rank forms. */
  assert_int_equal(em_mm(&r, m34, v4b), EM_ERR_SHAPE);
  assert_non_null(strstr(em_last_error(), "mm: expected the second operand to be 2-d, got shape [4]"));
  assert_int_equal(em_mv(&r, m34, m45), EM_ERR_SHAPE);
  assert_non_null(strstr(em_last_error(), "mv: expected the vector to be 1-d, got shape [4, 5]"));
  assert_int_equal(em_dot(&r, v4a, v5), EM_ERR_SHAPE);
  assert_non_null(strstr(em_last_error(), "dot: the vectors have different lengths: shapes [4] and [5]"));
  assert_int_equal(em_outer(&r, m34, v5), EM_ERR_SHAPE);
  em_tensor *b1 = make(3, (int64_t[]){2, 3, 4}, EM_FLOAT32, CONTIGUOUS, 1),
            *b2 = make(3, (int64_t[]){3, 4, 5}, EM_FLOAT32, CONTIGUOUS, 2);
  assert_int_equal(em_bmm(&r, b1, b2), EM_ERR_SHAPE);
  assert_non_null(strstr(em_last_error(), "bmm: batch sizes differ: shapes [2, 3, 4] and [3, 4, 5]"));
  assert_null(r);
  em_tensor_release(m34), em_tensor_release(m45), em_tensor_release(v4a), em_tensor_release(v4b);
  em_tensor_release(v3), em_tensor_release(v5), em_tensor_release(b1), em_tensor_release(b2);
}

static void test_empty_dims(void **state) {
  (void)state;
  em_tensor *a = NULL, *b = NULL, *r = NULL;
  /* K = 0: a sum over nothing is 0. */
  assert_int_equal(em_empty(&a, 2, (int64_t[]){3, 0}, EM_FLOAT32, CPU), EM_OK);
  assert_int_equal(em_empty(&b, 2, (int64_t[]){0, 4}, EM_FLOAT32, CPU), EM_OK);
  assert_int_equal(em_matmul(&r, a, b), EM_OK);
  static const double zeros[12] = {0};
  check_shape(r, 2, (int64_t[]){3, 4});
  check_values(r, zeros, 1, 0, "K = 0");
  em_tensor_release(a), em_tensor_release(b), em_tensor_release(r);
  a = b = r = NULL;
  /* M = 0 and an empty batch give empty results. */
  assert_int_equal(em_empty(&a, 3, (int64_t[]){0, 2, 3}, EM_FLOAT64, CPU), EM_OK);
  assert_int_equal(em_empty(&b, 2, (int64_t[]){3, 4}, EM_FLOAT64, CPU), EM_OK);
  assert_int_equal(em_matmul(&r, a, b), EM_OK);
  check_shape(r, 3, (int64_t[]){0, 2, 4});
  em_tensor_release(a), em_tensor_release(b), em_tensor_release(r);
}

static void test_errors(void **state) {
  (void)state;
  em_tensor *a = make(2, (int64_t[]){3, 4}, EM_FLOAT32, CONTIGUOUS, 1),
            *b = make(2, (int64_t[]){5, 6}, EM_FLOAT32, CONTIGUOUS, 2);
  em_tensor *r = NULL;
  assert_int_equal(em_matmul(&r, a, b), EM_ERR_SHAPE);
  assert_non_null(strstr(em_last_error(), "matmul: shapes [3, 4] and [5, 6] cannot be multiplied"));
  assert_non_null(strstr(em_last_error(), "last dim 4 must equal the second's second-to-last dim 5"));
  em_tensor *v = make(1, (int64_t[]){5}, EM_FLOAT32, CONTIGUOUS, 1);
  assert_int_equal(em_matmul(&r, a, v), EM_ERR_SHAPE);
  assert_non_null(strstr(em_last_error(), "matmul: shapes [3, 4] and [5] cannot be multiplied"));
  em_tensor *x = make(3, (int64_t[]){2, 3, 4}, EM_FLOAT32, CONTIGUOUS, 1),
            *y = make(3, (int64_t[]){3, 4, 2}, EM_FLOAT32, CONTIGUOUS, 1);
  assert_int_equal(em_matmul(&r, x, y), EM_ERR_SHAPE);
  assert_non_null(
      strstr(em_last_error(), "batch dims [2] of shape [2, 3, 4] and [3] of shape [3, 4, 2] cannot be broadcast"));
  em_tensor *s = NULL, *h = NULL, *bo = NULL, *o = NULL;
  assert_int_equal(em_full(&s, 0, NULL, 2, EM_FLOAT32, CPU), EM_OK);
  assert_int_equal(em_matmul(&r, s, a), EM_ERR_SHAPE);
  assert_non_null(strstr(em_last_error(), "need at least 1 dim, got shapes [] and [3, 4]"));
  assert_int_equal(em_zeros(&h, 2, (int64_t[]){4, 4}, EM_FLOAT16, CPU), EM_OK);
  assert_int_equal(em_matmul(&r, h, h), EM_ERR_DTYPE);
  assert_non_null(strstr(em_last_error(), "float16 is storage-only"));
  assert_int_equal(em_zeros(&bo, 2, (int64_t[]){4, 4}, EM_BOOL, CPU), EM_OK);
  assert_int_equal(em_matmul(&r, bo, bo), EM_ERR_DTYPE);
  assert_non_null(strstr(em_last_error(), "bool operands"));
  assert_int_equal(em_matmul(&r, a, NULL), EM_ERR_ARGUMENT);
  /* A caller's output must have the result's shape and dtype. */
  assert_int_equal(em_zeros(&o, 2, (int64_t[]){3, 3}, EM_FLOAT32, CPU), EM_OK);
  em_tensor *w = make(2, (int64_t[]){4, 5}, EM_FLOAT32, CONTIGUOUS, 1), *o2 = o;
  assert_int_equal(em_matmul(&o2, a, w), EM_ERR_SHAPE);
  assert_non_null(strstr(em_last_error(), "matmul: output has shape [3, 3], expected [3, 5]"));
  assert_null(r);
  em_tensor_release(a), em_tensor_release(b), em_tensor_release(v), em_tensor_release(x), em_tensor_release(y);
  em_tensor_release(s), em_tensor_release(h), em_tensor_release(bo), em_tensor_release(o), em_tensor_release(w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matmul_ranks_and_dtypes),
      cmocka_unit_test(test_matmul_layouts),
      cmocka_unit_test(test_matmul_out_layouts),
      cmocka_unit_test(test_matmul_against_loop),
      cmocka_unit_test(test_matmul_split_with_beta),
      cmocka_unit_test(test_addmm),
      cmocka_unit_test(test_mm_mv_dot_outer),
      cmocka_unit_test(test_empty_dims),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
