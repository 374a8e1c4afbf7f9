/* test_cuda_gemm_plan.c - the CUDA backend's GEMM layout (runtime/plugins/cuda/blas_plan.c),
 * checked on the CPU: for operands in every layout (row-major, column-major, padded
 * leading dims, single rows and columns with odd strides, unreadable strided ones), the
 * plan, executed by a loop that reads memory exactly as cuBLAS's column-major gemm does,
 * must give the row-major product; cuBLAS's own argument rules (ld >= rows of the stored
 * matrix) must hold; and batch dims must split where their strides stop being uniform. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "test_util.h"
/* plain C, no CUDA: the library ember_cuda_plans, linked into this test as into the plugin */
#include "plugins/cuda/blas_plan.h"

enum { ROW_MAJOR, COL_MAJOR, ROW_PADDED, COL_PADDED, ODD_VECTOR, STRIDED, NMODES };

/* A matrix's strides in a mode; *readable says whether cuBLAS can take it as it lies. */
static em_gemm_matrix layout(int64_t rows, int64_t cols, int mode, int *readable) {
  em_gemm_matrix m = {rows, cols, cols, 1};
  *readable = 1;
  switch (mode) {
    case ROW_MAJOR: break;
    case COL_MAJOR: m.rs = 1, m.cs = rows; break;
    case ROW_PADDED: m.rs = cols + 3; break;
    case COL_PADDED: m.rs = 1, m.cs = rows + 2; break;
    case ODD_VECTOR: /* a unit dim gets a stride that means nothing */
      if (rows == 1) m.rs = 1000, m.cs = cols == 1 ? 77 : 1;
      else if (cols == 1) m.cs = 999, m.rs = 1;
      else m.rs = 1, m.cs = rows; /* (a column-major matrix) */
      break;
    case STRIDED: /* two non-unit strides */
      m.rs = 2 * cols + 1, m.cs = 2;
      *readable = rows == 1 || cols == 1 ? 1 : 0;
      if (rows == 1) m.rs = 5;
      if (cols == 1) m.cs = 7;
      break;
  }
  return m;
}

static int64_t extent(em_gemm_matrix m) { return (m.rows - 1) * m.rs + (m.cols - 1) * m.cs + 1; }

static double value(int64_t i, int64_t j, int seed) { return (double)(((i * 7 + j * 13 + seed * 5) % 11) - 5); }

static void fill(double *buf, em_gemm_matrix m, int seed) {
  for (int64_t i = 0; i < m.rows; i++)
    for (int64_t j = 0; j < m.cols; j++) buf[i * m.rs + j * m.cs] = value(i, j, seed);
}

/* What cuBLAS's column-major gemm computes with these arguments (beta = 0). */
static void cublas_like(const em_gemm_layout *p, const double *A, const double *B, double *C) {
  for (int64_t i = 0; i < p->m; i++)
    for (int64_t j = 0; j < p->n; j++) {
      double s = 0;
      for (int64_t l = 0; l < p->k; l++) {
        double x = p->trans[0] ? A[l + i * p->ld[0]] : A[i + l * p->ld[0]];
        double y = p->trans[1] ? B[j + l * p->ld[1]] : B[l + j * p->ld[1]];
        s += x * y;
      }
      C[i + j * p->ld[2]] = s;
    }
}

static int64_t max1(int64_t v) { return v > 1 ? v : 1; }

static void check_one(int64_t M, int64_t N, int64_t K, int mo, int ma, int mb) {
  int ro, ra, rb;
  em_gemm_matrix o = layout(M, N, mo, &ro), a = layout(M, K, ma, &ra), b = layout(K, N, mb, &rb);
  int t;
  int64_t ld;
  assert_int_equal(em_gemm_matrix_layout(o, &t, &ld), ro);
  assert_int_equal(em_gemm_matrix_layout(a, &t, &ld), ra);
  assert_int_equal(em_gemm_matrix_layout(b, &t, &ld), rb);
  em_gemm_layout p;
  int ok = em_gemm_plan(o, a, b, &p);
  assert_int_equal(ok, ro && ra && rb);
  if (!ok) return;
  /* cuBLAS's argument rules */
  assert_int_equal(p.m, p.swap ? N : M);
  assert_int_equal(p.n, p.swap ? M : N);
  assert_int_equal(p.k, K);
  assert_true(p.ld[0] >= max1(p.trans[0] ? p.k : p.m));
  assert_true(p.ld[1] >= max1(p.trans[1] ? p.n : p.k));
  assert_true(p.ld[2] >= max1(p.m));
  static double abuf[4096], bbuf[4096], obuf[4096];
  assert_true(extent(a) <= 4096 && extent(b) <= 4096 && extent(o) <= 4096);
  memset(abuf, 0, sizeof abuf), memset(bbuf, 0, sizeof bbuf);
  for (int i = 0; i < 4096; i++) obuf[i] = 12345; /* untouched outside out's elements */
  fill(abuf, a, 1), fill(bbuf, b, 2);
  cublas_like(&p, p.swap ? bbuf : abuf, p.swap ? abuf : bbuf, obuf);
  static char mine[4096];
  memset(mine, 0, sizeof mine);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) mine[i * o.rs + j * o.cs] = 1;
  for (int i = 0; i < 4096; i++)
    if (!mine[i] && obuf[i] != 12345) fail_msg("modes %d %d %d: wrote outside out at %d", mo, ma, mb, i);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double s = 0;
      for (int64_t l = 0; l < K; l++) s += value(i, l, 1) * value(l, j, 2);
      if (obuf[i * o.rs + j * o.cs] != s)
        fail_msg("M %lld N %lld K %lld modes %d %d %d: out[%lld, %lld] = %g, expected %g", (long long)M, (long long)N,
                 (long long)K, mo, ma, mb, (long long)i, (long long)j, obuf[i * o.rs + j * o.cs], s);
    }
}

static void test_every_layout(void **state) {
  (void)state;
  const int64_t dims[][3] = {{3, 5, 4}, {1, 5, 4}, {3, 1, 4}, {1, 1, 4}, {3, 5, 1}, {1, 6, 1}, {4, 4, 4}, {2, 7, 3}};
  for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
    for (int mo = 0; mo < NMODES; mo++)
      for (int ma = 0; ma < NMODES; ma++)
        for (int mb = 0; mb < NMODES; mb++) check_one(dims[d][0], dims[d][1], dims[d][2], mo, ma, mb);
}

/* The usual cases, spelled out: what the call looks like. */
static void test_known_plans(void **state) {
  (void)state;
  em_gemm_layout p;
  /* contiguous row-major everything: out^T = b^T a^T with no transposes */
  em_gemm_matrix o = {3, 5, 5, 1}, a = {3, 4, 4, 1}, b = {4, 5, 5, 1};
  assert_true(em_gemm_plan(o, a, b, &p));
  assert_int_equal(p.swap, 1);
  assert_int_equal(p.trans[0], 0), assert_int_equal(p.trans[1], 0);
  assert_int_equal(p.m, 5), assert_int_equal(p.n, 3), assert_int_equal(p.k, 4);
  assert_int_equal(p.ld[0], 5), assert_int_equal(p.ld[1], 4), assert_int_equal(p.ld[2], 5);
  /* a = x.t() of a contiguous [4, 3]: passed as a transpose, not copied */
  em_gemm_matrix at = {3, 4, 1, 3};
  assert_true(em_gemm_plan(o, at, b, &p));
  assert_int_equal(p.trans[0], 0), assert_int_equal(p.trans[1], 1);
  assert_int_equal(p.ld[1], 3);
  /* a column-major output: computed directly, no swap */
  em_gemm_matrix oc = {3, 5, 1, 3};
  assert_true(em_gemm_plan(oc, a, b, &p));
  assert_int_equal(p.swap, 0);
  assert_int_equal(p.m, 3), assert_int_equal(p.n, 5);
  assert_int_equal(p.trans[0], 1), assert_int_equal(p.trans[1], 1);
  assert_int_equal(p.ld[0], 4), assert_int_equal(p.ld[1], 5), assert_int_equal(p.ld[2], 3);
  /* a zero stride in a dim of size > 1 (an expanded matrix) cannot be read */
  int t;
  int64_t ld;
  em_gemm_matrix expanded = {3, 4, 0, 1};
  assert_false(em_gemm_matrix_layout(expanded, &t, &ld));
  em_gemm_matrix expanded_col = {3, 4, 1, 0};
  assert_false(em_gemm_matrix_layout(expanded_col, &t, &ld));
  /* a leading dim shorter than the matrix (overlapping rows) cannot be read */
  em_gemm_matrix overlap = {3, 4, 2, 1};
  assert_false(em_gemm_matrix_layout(overlap, &t, &ld));
}

static void test_batch_split(void **state) {
  (void)state;
  int64_t inner[3], count;
  /* contiguous [2, 3] batches of 4x5 (out), 4x6 (a), 6x5 (b): one strided call of 6 */
  int64_t sizes[2] = {2, 3};
  int64_t so[2] = {60, 20}, sa[2] = {72, 24}, sb[2] = {90, 30};
  const int64_t *st[3] = {so, sa, sb};
  assert_int_equal(em_gemm_batch_split(2, sizes, st, inner, &count), 0);
  assert_int_equal(count, 6);
  assert_int_equal(inner[0], 20), assert_int_equal(inner[1], 24), assert_int_equal(inner[2], 30);
  /* b broadcast over both batch dims (stride 0): still one call */
  int64_t sb0[2] = {0, 0};
  const int64_t *st0[3] = {so, sa, sb0};
  assert_int_equal(em_gemm_batch_split(2, sizes, st0, inner, &count), 0);
  assert_int_equal(count, 6), assert_int_equal(inner[2], 0);
  /* b broadcast over the outer dim only: the host loops over it */
  int64_t sb1[2] = {0, 30};
  const int64_t *st1[3] = {so, sa, sb1};
  assert_int_equal(em_gemm_batch_split(2, sizes, st1, inner, &count), 1);
  assert_int_equal(count, 3), assert_int_equal(inner[2], 30);
  /* a permuted batch (outer stride smaller than inner) */
  int64_t sap[2] = {24, 48};
  const int64_t *st2[3] = {so, sap, sb};
  assert_int_equal(em_gemm_batch_split(2, sizes, st2, inner, &count), 1);
  assert_int_equal(count, 3);
  /* unit dims never split, whatever their strides */
  int64_t sizes1[3] = {2, 1, 3};
  int64_t o1[3] = {60, 999, 20}, a1[3] = {72, 5, 24}, b1[3] = {90, 0, 30};
  const int64_t *st3[3] = {o1, a1, b1};
  assert_int_equal(em_gemm_batch_split(3, sizes1, st3, inner, &count), 0);
  assert_int_equal(count, 6);
  /* no batch dims at all */
  assert_int_equal(em_gemm_batch_split(0, sizes, st, inner, &count), 0);
  assert_int_equal(count, 1);
}

/* Batched products as blas.c issues them: the plan, the batch split, a host loop over the
 * outer batches and strided-batched calls over the inner ones, for operands whose batch
 * dims are contiguous, permuted or broadcast, against a plain loop. */
enum { B_CONTIGUOUS, B_PERMUTED, B_BROADCAST_OUTER, B_BROADCAST_ALL, B_NMODES };

static void batch_strides(int mode, int64_t extent_, int64_t *st) {
  switch (mode) {
    case B_CONTIGUOUS: st[0] = 3 * extent_, st[1] = extent_; break;
    case B_PERMUTED: st[0] = extent_, st[1] = 2 * extent_; break;
    case B_BROADCAST_OUTER: st[0] = 0, st[1] = extent_; break;
    default: st[0] = 0, st[1] = 0; break;
  }
}

static double bvalue(int64_t b0, int64_t b1, int64_t i, int64_t j, int seed) {
  return value(i + 3 * b0, j + 5 * b1, seed);
}

static void fill_batched(double *buf, em_gemm_matrix m, const int64_t *st, int mode, int seed) {
  for (int64_t b0 = 0; b0 < 2; b0++)
    for (int64_t b1 = 0; b1 < 3; b1++) {
      int64_t e0 = mode == B_BROADCAST_OUTER || mode == B_BROADCAST_ALL ? 0 : b0, e1 = mode == B_BROADCAST_ALL ? 0 : b1;
      for (int64_t i = 0; i < m.rows; i++)
        for (int64_t j = 0; j < m.cols; j++)
          buf[b0 * st[0] + b1 * st[1] + i * m.rs + j * m.cs] = bvalue(e0, e1, i, j, seed);
    }
}

static void test_batched_calls(void **state) {
  (void)state;
  const int64_t M = 3, N = 4, K = 5, sizes[2] = {2, 3};
  static double abuf[8192], bbuf[8192], obuf[8192];
  const int readable[] = {ROW_MAJOR, COL_MAJOR, ROW_PADDED, COL_PADDED};
  int calls_total = 0;
  for (int ma = 0; ma < 4; ma++)
    for (int mb = 0; mb < 4; mb++)
      for (int mo = 0; mo < 4; mo++)
        for (int ba = 0; ba < B_NMODES; ba++)
          for (int bb = 0; bb < B_NMODES; bb++)
            for (int bo = 0; bo < 2; bo++) { /* the output is never broadcast */
              int r;
              em_gemm_matrix a = layout(M, K, readable[ma], &r), b = layout(K, N, readable[mb], &r),
                             o = layout(M, N, readable[mo], &r);
              int64_t sa[2], sb[2], so[2];
              batch_strides(ba, extent(a), sa), batch_strides(bb, extent(b), sb), batch_strides(bo, extent(o), so);
              memset(abuf, 0, sizeof abuf), memset(bbuf, 0, sizeof bbuf), memset(obuf, 0, sizeof obuf);
              fill_batched(abuf, a, sa, ba, 1), fill_batched(bbuf, b, sb, bb, 2);
              em_gemm_layout p;
              assert_true(em_gemm_plan(o, a, b, &p));
              const double *first = p.swap ? bbuf : abuf, *second = p.swap ? abuf : bbuf;
              const int64_t *strides[3] = {p.swap ? sb : sa, p.swap ? sa : sb, so};
              int64_t inner[3], count;
              int split = em_gemm_batch_split(2, sizes, strides, inner, &count);
              int64_t outer = 1;
              for (int d = 0; d < split; d++) outer *= sizes[d];
              assert_int_equal(outer * count, 6);
              for (int64_t q = 0; q < outer; q++) {
                const double *f = first + em_gemm_outer_offset(split, sizes, strides[0], q);
                const double *g = second + em_gemm_outer_offset(split, sizes, strides[1], q);
                double *c = obuf + em_gemm_outer_offset(split, sizes, strides[2], q);
                for (int64_t k = 0; k < count; k++)
                  cublas_like(&p, f + k * inner[0], g + k * inner[1], c + k * inner[2]);
                calls_total++;
              }
              for (int64_t b0 = 0; b0 < 2; b0++)
                for (int64_t b1 = 0; b1 < 3; b1++) {
                  int64_t a0 = ba >= B_BROADCAST_OUTER ? 0 : b0, a1 = ba == B_BROADCAST_ALL ? 0 : b1;
                  int64_t c0 = bb >= B_BROADCAST_OUTER ? 0 : b0, c1 = bb == B_BROADCAST_ALL ? 0 : b1;
                  for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                      double want = 0;
                      for (int64_t l = 0; l < K; l++) want += bvalue(a0, a1, i, l, 1) * bvalue(c0, c1, l, j, 2);
                      double got = obuf[b0 * so[0] + b1 * so[1] + i * o.rs + j * o.cs];
                      if (got != want)
                        fail_msg("modes a %d/%d b %d/%d out %d/%d: out[%lld, %lld, %lld, %lld] = %g, expected %g", ma,
                                 ba, mb, bb, mo, bo, (long long)b0, (long long)b1, (long long)i, (long long)j, got,
                                 want);
                    }
                }
            }
  assert_true(calls_total > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_layout),
      cmocka_unit_test(test_known_plans),
      cmocka_unit_test(test_batch_split),
      cmocka_unit_test(test_batched_calls),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
