/* test_cuda_reduce_plan.c - the CUDA backend's planning of reductions, softmax, scans and
 * sorts (runtime/plugins/cuda/reduce_plan.c), checked on the CPU: merged dims address the same
 * elements as the original ones; every plan's lanes, chunks and grids cover each element
 * exactly once, within CUDA's grid limits, with 16-byte packets that stay aligned; the
 * three-step chunked scan gives the sequential prefix sums; and the bitonic network the
 * sort kernel runs sorts every row of a tile, stably, without crossing rows. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "test_util.h"
/* plain C, no CUDA: the library ember_cuda_plans, linked into this test as into the plugin */
#include "plugins/cuda/reduce_plan.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_random(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

/* Offset of linear (row-major) index i over (n, sizes, strides). */
static int64_t offset_of(int n, const int64_t *sizes, const int64_t *strides, int64_t i) {
  int64_t off = 0;
  for (int d = n - 1; d >= 0; d--) {
    off += (i % sizes[d]) * strides[d];
    i /= sizes[d];
  }
  return off;
}

static void test_merge_known(void **state) {
  (void)state;
  int64_t os[EM_RP_DIMS], ost[EM_RP_DIMS];
  int64_t s1[3] = {2, 3, 4}, t1[3] = {12, 4, 1};
  assert_int_equal(em_rp_simplify(3, s1, t1, os, ost), 1);
  assert_int_equal(os[0], 24), assert_int_equal(ost[0], 1);
  int64_t s2[3] = {2, 1, 3}, t2[3] = {3, 99, 1};
  assert_int_equal(em_rp_simplify(3, s2, t2, os, ost), 1);
  assert_int_equal(os[0], 6), assert_int_equal(ost[0], 1);
  int64_t s3[2] = {3, 2}, t3[2] = {1, 3}; /* a transpose does not merge */
  assert_int_equal(em_rp_simplify(2, s3, t3, os, ost), 2);
  int64_t s4[2] = {4, 5}, t4[2] = {0, 0}; /* broadcast */
  assert_int_equal(em_rp_simplify(2, s4, t4, os, ost), 1);
  assert_int_equal(os[0], 20), assert_int_equal(ost[0], 0);
  int64_t s5[2] = {1, 1}, t5[2] = {7, 9};
  assert_int_equal(em_rp_simplify(2, s5, t5, os, ost), 1);
  assert_int_equal(os[0], 1);
  assert_int_equal(em_rp_simplify(0, s5, t5, os, ost), 1);
  assert_int_equal(os[0], 1), assert_int_equal(ost[0], 1);
  /* two stride sets merge a dim only when both do */
  int64_t sizes[2] = {2, 3}, a[2] = {3, 1}, b[2] = {1, 2}, c[2] = {0, 1};
  const int64_t *ab[2] = {a, b}, *ac[2] = {a, c};
  int64_t ms[2][EM_RP_DIMS];
  assert_int_equal(em_rp_merge(2, 2, sizes, ab, os, ms), 2);
  assert_int_equal(em_rp_merge(2, 2, sizes, ac, os, ms), 2);
  const int64_t *aa[2] = {a, a};
  assert_int_equal(em_rp_merge(2, 2, sizes, aa, os, ms), 1);
}

/* Random shapes with strides that are permuted, padded or broadcast: merged dims must
 * address every linear index exactly as the original dims do, in every stride set. */
static void test_merge_random(void **state) {
  (void)state;
  for (int trial = 0; trial < 2000; trial++) {
    int n = 1 + (int)(next_random() % 5);
    int64_t sizes[EM_RP_DIMS], st[3][EM_RP_DIMS];
    for (int d = 0; d < n; d++) sizes[d] = 1 + (int64_t)(next_random() % 4);
    for (int k = 0; k < 3; k++) {
      int64_t step = 1;
      int mode = (int)(next_random() % 3);
      for (int d = n - 1; d >= 0; d--) {
        if (mode == 1 && next_random() % 3 == 0) {
          st[k][d] = 0;
          continue;
        } /* broadcast dim */
        st[k][d] = step;
        step *= sizes[d] + (mode == 2 ? (int64_t)(next_random() % 2) : 0); /* padding */
      }
      if (mode == 0 && n > 1 && next_random() % 2) { /* swap two strides: a transpose */
        int64_t t = st[k][0];
        st[k][0] = st[k][n - 1], st[k][n - 1] = t;
      }
    }
    const int64_t *sp[3] = {st[0], st[1], st[2]};
    int64_t ms[EM_RP_DIMS], mst[3][EM_RP_DIMS];
    int m = em_rp_merge(3, n, sizes, sp, ms, mst);
    assert_true(m >= 1 && m <= n);
    int64_t numel = 1;
    for (int d = 0; d < n; d++) numel *= sizes[d];
    for (int k = 0; k < 3; k++)
      for (int64_t i = 0; i < numel; i++) assert_int_equal(offset_of(m, ms, mst[k], i), offset_of(n, sizes, st[k], i));
  }
}

/* Each reduced element of an output is visited once over (split, lane), as the kernel's
 * loops visit them (packets of V contiguous elements, or single strided elements). */
static void check_reduce(int64_t nout, int64_t nred, int red_contig, int outputs_contig, size_t elsize) {
  em_rp_reduce p;
  em_rp_plan_reduce(nout, nred, red_contig, outputs_contig, elsize, 16, &p);
  assert_true(p.lanes >= 1 && p.lanes <= EM_RP_THREADS && (p.lanes & (p.lanes - 1)) == 0);
  assert_true(p.splits >= 1 && p.grid_y == (uint32_t)p.splits && p.grid_y <= EM_RP_MAX_GRID_YZ);
  assert_true(p.grid_x >= 1);
  int64_t slots = EM_RP_THREADS / p.lanes;
  assert_true((int64_t)p.grid_x * slots >= (nout < 1 ? 1 : nout) || p.grid_x == EM_RP_MAX_GRID_X);
  assert_true(p.chunk * p.splits >= nred && (p.chunk * (p.splits - 1) < nred || nred == 0));
  assert_int_equal(p.partial_bytes, p.splits > 1 ? (size_t)nout * (size_t)p.splits * 16 : 0);
  int contig = p.lanes_fast && red_contig;
  if (contig) {
    assert_int_equal(p.packet, (int)(16 / elsize));
    if (p.splits > 1) assert_int_equal((p.chunk * (int64_t)elsize) % 16, 0); /* packets stay aligned */
  } else {
    assert_int_equal(p.packet, 1);
  }
  if (!red_contig && outputs_contig && nout > 1) assert_int_equal(p.lanes_fast, 0);
  if (nred > 20000000) return;
  unsigned char *seen = calloc((size_t)(nred ? nred : 1), 1);
  for (int64_t s = 0; s < p.splits; s++) {
    int64_t begin = s * p.chunk, end = begin + p.chunk < nred ? begin + p.chunk : nred;
    for (int lane = 0; lane < p.lanes; lane++) {
      if (contig) {
        int64_t v = p.packet;
        for (int64_t p0 = begin + lane * v; p0 < end; p0 += p.lanes * v)
          for (int64_t k = 0; k < v && p0 + k < end; k++) seen[p0 + k]++;
      } else {
        for (int64_t r = begin + lane; r < end; r += p.lanes) seen[r]++;
      }
    }
  }
  for (int64_t r = 0; r < nred; r++) assert_int_equal(seen[r], 1);
  free(seen);
}

static void test_reduce_plans(void **state) {
  (void)state;
  const int64_t nouts[] = {1, 2, 3, 7, 100, 5000, 100000};
  const int64_t nreds[] = {0, 1, 3, 7, 33, 1000, 4097, 100003, 3000000};
  const size_t sizes[] = {1, 2, 4, 8};
  for (size_t a = 0; a < sizeof nouts / sizeof *nouts; a++)
    for (size_t b = 0; b < sizeof nreds / sizeof *nreds; b++)
      for (size_t e = 0; e < 4; e++)
        for (int flags = 0; flags < 4; flags++) check_reduce(nouts[a], nreds[b], flags & 1, flags >> 1, sizes[e]);
  em_rp_reduce p;
  /* one row of 10M floats: the whole block per row, split across gridDim.y */
  check_reduce(1, 10000000, 1, 0, 4);
  em_rp_plan_reduce(1, 10000000, 1, 0, 4, 16, &p);
  assert_int_equal(p.lanes_fast, 1), assert_int_equal(p.lanes, 256), assert_int_equal(p.packet, 4);
  assert_true(p.splits > 100 && p.chunk % EM_RP_ROW_QUANTUM == 0);
  /* 100k rows of 7 floats: two lanes (two packets) per row, 128 rows per block, no split */
  em_rp_plan_reduce(100000, 7, 1, 0, 4, 16, &p);
  assert_int_equal(p.lanes, 2), assert_int_equal(p.splits, 1), assert_int_equal(p.grid_x, 782);
  /* sum over dim 0 of [10M, 2]: the column layout, split along the reduction */
  check_reduce(2, 10000000, 0, 1, 4);
  em_rp_plan_reduce(2, 10000000, 0, 1, 4, 16, &p);
  assert_int_equal(p.lanes_fast, 0), assert_int_equal(p.lanes, 128), assert_true(p.splits > 100);
  /* many outputs need no split */
  em_rp_plan_reduce(100000, 100000, 1, 0, 4, 16, &p);
  assert_int_equal(p.splits, 1), assert_int_equal(p.lanes, 256), assert_int_equal(p.grid_x, 100000);
  assert_int_equal(em_rp_combine_grid(1), 1), assert_int_equal(em_rp_combine_grid(17), 3);
}

static void check_softmax(int64_t outer, int64_t n, int64_t inner) {
  em_rp_softmax p;
  em_rp_plan_softmax(outer, n, inner, 16, &p);
  assert_int_equal(p.rows, outer * inner);
  assert_int_equal(p.lanes_fast, inner == 1);
  assert_true(p.lanes >= 1 && p.lanes <= EM_RP_THREADS && (p.lanes & (p.lanes - 1)) == 0);
  assert_true(p.splits >= 1 && p.grid_y == (uint32_t)p.splits && p.grid_y <= EM_RP_MAX_GRID_YZ);
  assert_true(p.chunk * p.splits >= n && (p.chunk * (p.splits - 1) < n || n == 0));
  assert_int_equal(p.final_bytes, p.splits > 1 ? (size_t)p.rows * 16 : 0);
  if (n > 20000000) return;
  unsigned char *seen = calloc((size_t)(n ? n : 1), 1);
  for (int64_t s = 0; s < p.splits; s++) {
    int64_t begin = s * p.chunk, end = begin + p.chunk < n ? begin + p.chunk : n;
    for (int lane = 0; lane < p.lanes; lane++)
      for (int64_t d = begin + lane; d < end; d += p.lanes) seen[d]++;
  }
  for (int64_t d = 0; d < n; d++) assert_int_equal(seen[d], 1);
  free(seen);
}

static void test_softmax_plans(void **state) {
  (void)state;
  const int64_t outers[] = {1, 3, 100000}, ns[] = {0, 1, 7, 300, 5000, 1000000}, inners[] = {1, 2, 50, 4096};
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 6; b++)
      for (int c = 0; c < 4; c++) check_softmax(outers[a], ns[b], inners[c]);
  em_rp_softmax p;
  em_rp_plan_softmax(1, 10000000, 1, 16, &p);
  assert_true(p.splits > 100), assert_int_equal(p.lanes, 256);
  em_rp_plan_softmax(100000, 7, 1, 16, &p);
  assert_int_equal(p.lanes, 8), assert_int_equal(p.splits, 1), assert_int_equal(p.grid_x, 3125);
  em_rp_plan_softmax(1, 1000, 50, 16, &p); /* softmax over dim 1 of [1000, 50] */
  assert_int_equal(p.lanes_fast, 0), assert_int_equal(p.rows, 50), assert_int_equal(p.lanes, 8);
}

/* The three-step scan on the plan's chunks equals the sequential prefix sums. */
static void check_scan(int64_t outer, int64_t n, int64_t inner) {
  em_rp_scan p;
  em_rp_plan_scan(outer, n, inner, &p);
  assert_int_equal(p.rows_layout, inner == 1);
  assert_int_equal(p.lines, inner == 1 ? outer : outer * inner);
  assert_true(p.chunk >= 1 && p.chunk * p.nchunks >= n && p.chunk * (p.nchunks - 1) < n);
  assert_int_equal(p.work, p.lines * p.nchunks);
  assert_int_equal(p.carry_bytes, p.nchunks > 1 ? (size_t)p.work * 8 : 0);
  if (p.rows_layout && p.nchunks > 1) assert_int_equal(p.chunk % EM_RP_SCAN_SEGMENT, 0);
  assert_true(p.grid_x >= 1);
  if (n > 200000) return;
  int64_t *x = malloc(sizeof *x * (size_t)n), *carry = malloc(sizeof *carry * (size_t)p.nchunks);
  for (int64_t i = 0; i < n; i++) x[i] = (int64_t)(next_random() % 1000) - 500;
  for (int64_t c = 0; c < p.nchunks; c++) { /* step 1: totals */
    carry[c] = 0;
    for (int64_t i = c * p.chunk; i < n && i < (c + 1) * p.chunk; i++) carry[c] += x[i];
  }
  int64_t run = 0;
  for (int64_t c = 0; c < p.nchunks; c++) { /* step 2: exclusive scan of the totals */
    int64_t t = carry[c];
    carry[c] = run, run += t;
  }
  int64_t expect = 0;
  for (int64_t c = 0; c < p.nchunks; c++) { /* step 3 against the sequential sums */
    int64_t acc = carry[c];
    for (int64_t i = c * p.chunk; i < n && i < (c + 1) * p.chunk; i++) {
      acc += x[i], expect += x[i];
      assert_int_equal(acc, expect);
    }
  }
  free(x), free(carry);
}

static void test_scan_plans(void **state) {
  (void)state;
  const int64_t outers[] = {1, 5, 100000}, ns[] = {1, 7, 128, 4096, 4097, 100000}, inners[] = {1, 2, 300, 100000};
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 6; b++)
      for (int c = 0; c < 4; c++) check_scan(outers[a], ns[b], inners[c]);
  em_rp_scan p;
  em_rp_plan_scan(1, 10000000, 1, &p); /* one row of 10M: chunks of 4096, a warp each */
  assert_int_equal(p.chunk, EM_RP_SCAN_CHUNK), assert_int_equal(p.nchunks, 2442);
  assert_int_equal(p.grid_x, (2442 * 32 + 255) / 256);
  em_rp_plan_scan(100000, 7, 1, &p); /* 100k rows of 7: one pass */
  assert_int_equal(p.nchunks, 1), assert_int_equal(p.work, 100000);
  em_rp_plan_scan(1, 10000000, 2, &p); /* cumsum over dim 0 of [10M, 2] */
  assert_int_equal(p.rows_layout, 0), assert_int_equal(p.lines, 2), assert_true(p.nchunks > 1000);
  em_rp_plan_scan(10, 100, 100000, &p); /* a million columns: one pass */
  assert_int_equal(p.nchunks, 1);
}

static void test_sort_plans(void **state) {
  (void)state;
  em_rp_sort p;
  em_rp_plan_sort(1, 7, 32, &p);
  assert_int_equal(p.method, EM_RP_SORT_BITONIC), assert_int_equal(p.padded, 8);
  assert_int_equal(p.rows_per_block, 256), assert_int_equal(p.grid_x, 1);
  em_rp_plan_sort(100000, 7, 32, &p);
  assert_int_equal(p.grid_x, 391);
  em_rp_plan_sort(3, 2048, 64, &p);
  assert_int_equal(p.method, EM_RP_SORT_BITONIC), assert_int_equal(p.rows_per_block, 1);
  assert_int_equal(p.grid_x, 3);
  em_rp_plan_sort(1, 1, 8, &p);
  assert_int_equal(p.padded, 1), assert_int_equal(p.rows_per_block, EM_RP_SORT_TILE);
  em_rp_plan_sort(1, 2049, 32, &p);
  assert_int_equal(p.method, EM_RP_SORT_RADIX_ONE), assert_int_equal(p.key_bits, 32);
  em_rp_plan_sort(5, 3000, 32, &p);
  assert_int_equal(p.method, EM_RP_SORT_RADIX_SEGMENTED), assert_int_equal(p.batch_rows, 5);
  em_rp_plan_sort(1000000, 3000, 32, &p);
  assert_int_equal(p.batch_rows, INT32_MAX / 3000);
  assert_true(p.batch_rows * 3000 <= INT32_MAX);
  em_rp_plan_sort(2, 3000000000ll, 64, &p);
  assert_int_equal(p.method, EM_RP_SORT_RADIX_EACH);
}

/* Runs the kernel's network (one step at a time: a step's pairs are disjoint, so order
 * within a step does not matter) on tiles of rows with repeated keys. */
static void test_bitonic_network(void **state) {
  (void)state;
  uint64_t key[EM_RP_SORT_TILE];
  int32_t pos[EM_RP_SORT_TILE];
  for (int padded = 1; padded <= EM_RP_SORT_TILE; padded *= 2) {
    for (int trial = 0; trial < 3; trial++) {
      int n = padded == 1 ? 1 : padded / 2 + 1 + (int)(next_random() % (uint64_t)(padded / 2));
      for (int s = 0; s < EM_RP_SORT_TILE; s++) {
        int e = s % padded;
        key[s] = e < n ? next_random() % 5 : ~0ull;
        pos[s] = e < n ? e : INT32_MAX;
      }
      for (int size = 2; size <= padded; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
          unsigned char touched[EM_RP_SORT_TILE] = {0};
          for (int t = 0; t < EM_RP_SORT_TILE / 2; t++) {
            int i = em_rp_bitonic_low(t, stride), j = i + stride;
            assert_true(j < EM_RP_SORT_TILE && i / padded == j / padded); /* within one row */
            assert_false(touched[i] || touched[j]);
            touched[i] = touched[j] = 1;
            int up = em_rp_bitonic_up(i, padded, size);
            int greater = key[i] > key[j] || (key[i] == key[j] && pos[i] > pos[j]);
            if (greater == up) {
              uint64_t k = key[i];
              int32_t q = pos[i];
              key[i] = key[j], pos[i] = pos[j], key[j] = k, pos[j] = q;
            }
          }
        }
      for (int r = 0; r < EM_RP_SORT_TILE / padded; r++) {
        int seen[EM_RP_SORT_TILE] = {0};
        for (int e = 0; e < n; e++) {
          int s = r * padded + e;
          assert_true(pos[s] >= 0 && pos[s] < n);
          seen[pos[s]]++;
          if (e > 0) { /* ascending keys, equal keys in their original order: stable */
            assert_true(key[s - 1] <= key[s]);
            if (key[s - 1] == key[s]) assert_true(pos[s - 1] < pos[s]);
          }
        }
        for (int e = 0; e < n; e++) assert_int_equal(seen[e], 1);
      }
    }
  }
}

static void test_helpers(void **state) {
  (void)state;
  assert_int_equal(em_rp_bits_for(0), 1), assert_int_equal(em_rp_bits_for(1), 1);
  assert_int_equal(em_rp_bits_for(2), 2), assert_int_equal(em_rp_bits_for(255), 8);
  assert_int_equal(em_rp_bits_for(256), 9), assert_int_equal(em_rp_bits_for(UINT64_MAX), 64);
  assert_int_equal(em_rp_blocks(0, 256, 100), 1), assert_int_equal(em_rp_blocks(257, 256, 100), 2);
  assert_int_equal(em_rp_blocks(1000000, 256, 100), 100);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_merge_known),     cmocka_unit_test(test_merge_random), cmocka_unit_test(test_reduce_plans),
      cmocka_unit_test(test_softmax_plans),   cmocka_unit_test(test_scan_plans),   cmocka_unit_test(test_sort_plans),
      cmocka_unit_test(test_bitonic_network), cmocka_unit_test(test_helpers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
