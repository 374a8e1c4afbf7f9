/* reduce_plan.c - shapes to launch plans for the reduction, scan, softmax and sort kernels
 * (reduce_plan.h says what each plan means). Plain C, unit-tested on the CPU. */
#include "reduce_plan.h"

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t round_up(int64_t a, int64_t q) { return ceil_div(a, q) * q; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static int64_t pow2_ceil(int64_t v, int64_t cap) {
  int64_t p = 1;
  while (p < v && p < cap) p <<= 1;
  return p;
}

int em_rp_merge(int nt, int n, const int64_t *sizes, const int64_t *const *strides, int64_t *osizes,
                int64_t (*ostrides)[EM_RP_DIMS]) {
  int m = 0;
  for (int d = 0; d < n; d++) {
    if (sizes[d] == 1) continue;
    int merge = m > 0;
    for (int k = 0; k < nt && merge; k++) merge = ostrides[k][m - 1] == strides[k][d] * sizes[d];
    if (merge) {
      osizes[m - 1] *= sizes[d];
      for (int k = 0; k < nt; k++) ostrides[k][m - 1] = strides[k][d];
    } else {
      osizes[m] = sizes[d];
      for (int k = 0; k < nt; k++) ostrides[k][m] = strides[k][d];
      m++;
    }
  }
  if (m == 0) {
    osizes[0] = 1;
    for (int k = 0; k < nt; k++) ostrides[k][0] = 1;
    m = 1;
  }
  return m;
}

int em_rp_simplify(int n, const int64_t *sizes, const int64_t *strides, int64_t *osizes, int64_t *ostrides) {
  int64_t st[1][EM_RP_DIMS];
  const int64_t *in[1] = {strides};
  int m = em_rp_merge(1, n, sizes, in, osizes, st);
  for (int d = 0; d < m; d++) ostrides[d] = st[0][d];
  return m;
}

uint32_t em_rp_blocks(int64_t n, int threads, uint32_t cap) {
  int64_t b = ceil_div(n > 0 ? n : 1, threads);
  return (uint32_t)(b > (int64_t)cap ? (int64_t)cap : b);
}

int em_rp_bits_for(uint64_t max_value) {
  int bits = 1;
  while (bits < 64 && (max_value >> bits) != 0) bits++;
  return bits;
}

/* Splits a reduction of n elements, done by `blocks` blocks, into chunks (multiples of
 * quantum, at least min_chunk) when there are too few blocks to fill the GPU. */
static void split(int64_t blocks, int64_t n, int64_t quantum, int64_t min_chunk, int64_t *chunk, int64_t *splits) {
  *chunk = n > 0 ? n : 1;
  *splits = 1;
  min_chunk = round_up(min_chunk > quantum ? min_chunk : quantum, quantum);
  if (blocks >= EM_RP_TARGET_BLOCKS || n <= min_chunk) return;
  int64_t want = min64(ceil_div(EM_RP_TARGET_BLOCKS, blocks), ceil_div(n, min_chunk));
  if (want > (int64_t)EM_RP_MAX_GRID_YZ) want = EM_RP_MAX_GRID_YZ;
  if (want <= 1) return;
  *chunk = round_up(ceil_div(n, want), quantum);
  *splits = ceil_div(n, *chunk);
}

void em_rp_plan_reduce(int64_t nout, int64_t nred, int red_contig, int outputs_contig, size_t elsize, size_t state_size,
                       em_rp_reduce *p) {
  int64_t quantum, min_chunk;
  if (!red_contig && outputs_contig && nout > 1) {
    int64_t slots = pow2_ceil(nout, 32);
    p->lanes_fast = 0;
    p->lanes = (int)(EM_RP_THREADS / slots);
    p->packet = 1;
    quantum = p->lanes;
    min_chunk = 8 * (int64_t)p->lanes;
  } else {
    p->lanes_fast = 1;
    p->packet = red_contig && elsize < 16 ? (int)(16 / elsize) : 1;
    p->lanes = (int)pow2_ceil(ceil_div(nred, p->packet), EM_RP_THREADS);
    quantum = EM_RP_ROW_QUANTUM;
    min_chunk = 8 * (int64_t)p->lanes * p->packet;
  }
  int64_t slots = EM_RP_THREADS / p->lanes, blocks = ceil_div(nout > 0 ? nout : 1, slots);
  split(blocks, nred, quantum, min_chunk, &p->chunk, &p->splits);
  p->grid_x = blocks > (int64_t)EM_RP_MAX_GRID_X ? EM_RP_MAX_GRID_X : (uint32_t)blocks;
  p->grid_y = (uint32_t)p->splits;
  p->partial_bytes = p->splits > 1 ? (size_t)nout * (size_t)p->splits * state_size : 0;
}

uint32_t em_rp_combine_grid(int64_t nout) { return em_rp_blocks(nout, EM_RP_THREADS / 32, EM_RP_MAX_GRID_X); }

void em_rp_plan_softmax(int64_t outer, int64_t n, int64_t inner, size_t state_size, em_rp_softmax *p) {
  p->rows = outer * inner;
  if (inner == 1) {
    p->lanes_fast = 1;
    p->lanes = (int)pow2_ceil(n, EM_RP_THREADS);
  } else {
    p->lanes_fast = 0;
    p->lanes = (int)(EM_RP_THREADS / pow2_ceil(p->rows, 32));
  }
  int64_t slots = EM_RP_THREADS / p->lanes, blocks = ceil_div(p->rows > 0 ? p->rows : 1, slots);
  split(blocks, n, p->lanes, 8 * (int64_t)p->lanes, &p->chunk, &p->splits);
  p->grid_x = blocks > (int64_t)EM_RP_MAX_GRID_X ? EM_RP_MAX_GRID_X : (uint32_t)blocks;
  p->grid_y = (uint32_t)p->splits;
  p->partial_bytes = p->splits > 1 ? (size_t)p->rows * (size_t)p->splits * state_size : 0;
  p->final_bytes = p->splits > 1 ? (size_t)p->rows * state_size : 0;
}

void em_rp_plan_scan(int64_t outer, int64_t n, int64_t inner, em_rp_scan *p) {
  p->rows_layout = inner == 1;
  if (p->rows_layout) {
    p->lines = outer;
    /* many rows: a warp per whole row is enough work; few long rows: chunks in parallel */
    p->chunk = p->lines >= 8 * EM_RP_TARGET_BLOCKS || n <= EM_RP_SCAN_CHUNK ? n : EM_RP_SCAN_CHUNK;
  } else {
    p->lines = outer * inner;
    int64_t target = (int64_t)EM_RP_TARGET_BLOCKS * EM_RP_THREADS, nchunks = 1;
    if (p->lines < target / 4) nchunks = min64(ceil_div(target, p->lines > 0 ? p->lines : 1), ceil_div(n, 64));
    p->chunk = ceil_div(n, nchunks > 1 ? nchunks : 1);
  }
  if (p->chunk < 1) p->chunk = 1;
  p->nchunks = ceil_div(n, p->chunk);
  p->work = p->lines * p->nchunks;
  p->grid_x = em_rp_blocks(p->rows_layout ? p->work * 32 : p->work, EM_RP_THREADS, EM_RP_MAX_GRID_X);
  p->carry_bytes = p->nchunks > 1 ? (size_t)p->work * 8 : 0;
}

void em_rp_plan_sort(int64_t rows, int64_t n, int key_bits, em_rp_sort *p) {
  p->key_bits = key_bits;
  p->padded = 0;
  p->rows_per_block = 0;
  p->batch_rows = 0;
  if (n <= EM_RP_SORT_TILE) {
    p->method = EM_RP_SORT_BITONIC;
    p->padded = (int)pow2_ceil(n, EM_RP_SORT_TILE);
    p->rows_per_block = EM_RP_SORT_TILE / p->padded;
    p->grid_x = em_rp_blocks(rows, p->rows_per_block, EM_RP_MAX_GRID_X);
    return;
  }
  p->grid_x = em_rp_blocks(rows * n, EM_RP_THREADS, EM_RP_MAX_GRID_X);
  if (rows == 1) p->method = EM_RP_SORT_RADIX_ONE;
  else if (n > INT32_MAX) p->method = EM_RP_SORT_RADIX_EACH;
  else {
    p->method = EM_RP_SORT_RADIX_SEGMENTED;
    p->batch_rows = min64(rows, INT32_MAX / n);
  }
}
