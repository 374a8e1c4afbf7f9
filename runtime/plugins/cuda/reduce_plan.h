/* reduce_plan.h - host-side planning of the reduction, scan, softmax, sort and indexing
 * kernels of the CUDA backend: dims merging, kernel choice by shape, grid sizes, workspace
 * sizes. Plain C with no CUDA in it, so that tests/c/test_cuda_reduce_plan.c checks it on
 * the CPU (it links ember_cuda_plans, as the plugin does).
 *
 * Every choice here depends on the shape alone (never on the GPU's size or on timing):
 * which lanes accumulate which elements, and in which tree their partial results meet, is
 * therefore fixed for a shape, and so are the floating-point results. */
#ifndef EMBER_GPU_REDUCE_PLAN_H
#define EMBER_GPU_REDUCE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EM_RP_DIMS 8 /* EM_MAX_DIMS */
#define EM_RP_THREADS 256 /* threads per block of the reduction/softmax kernels */
#define EM_RP_TARGET_BLOCKS 1024 /* enough blocks to fill a large GPU several times */
#define EM_RP_MAX_GRID_X 2147483647u /* gridDim.x */
#define EM_RP_MAX_GRID_YZ 65535u /* gridDim.y and gridDim.z */
#define EM_RP_ROW_QUANTUM 4096 /* row splits start at multiples of this (keeps 16-byte packets aligned) */
#define EM_RP_SCAN_CHUNK 4096 /* elements of a row scanned by one warp when rows are split */
#define EM_RP_SCAN_SEGMENT 128 /* elements a warp scans per step (4 per lane) */
#define EM_RP_SORT_TILE 2048 /* slots of the in-block bitonic sort (rows up to this length) */

/* Drops size-1 dims and merges a dim into its inner neighbour when, in every one of the nt
 * stride sets, stepping it equals a full sweep of that neighbour. The linear (row-major)
 * index over the merged dims equals the one over the original dims. Returns the number of
 * dims (at least 1: a lone dim of size 1 when nothing is left). Strides in elements. */
int em_rp_merge(int nt, int n, const int64_t *sizes, const int64_t *const *strides, int64_t *osizes,
                int64_t (*ostrides)[EM_RP_DIMS]);
/* One stride set. */
int em_rp_simplify(int n, const int64_t *sizes, const int64_t *strides, int64_t *osizes, int64_t *ostrides);

/* ---- reductions: nout outputs, each over nred elements ----
 * Row layout: a block's consecutive threads are `lanes` lanes of one output (lanes read
 * consecutive packets of contiguous elements). Column layout (the outputs are contiguous,
 * the reduced elements are not: sum over dim 0 of a matrix): consecutive threads are
 * consecutive outputs, and the block's threads with one output are its lanes. Long
 * reductions with few outputs are cut into `splits` chunks (gridDim.y), whose partial
 * states a second kernel combines in chunk order. */
typedef struct em_rp_reduce {
  int lanes; /* threads per output: a power of two, 1..EM_RP_THREADS */
  int lanes_fast; /* 1 row layout, 0 column layout */
  int packet; /* elements a lane reads at once (16 bytes in the contiguous row layout, else 1) */
  int64_t chunk; /* reduced elements per split */
  int64_t splits; /* >= 1 */
  uint32_t grid_x, grid_y;
  size_t partial_bytes; /* nout * splits states when splits > 1, else 0 */
} em_rp_reduce;

/* red_contig: the reduced elements of an output are contiguous; outputs_contig: the kept
 * dims' innermost stride is 1 (neighbouring outputs read neighbouring elements). */
void em_rp_plan_reduce(int64_t nout, int64_t nred, int red_contig, int outputs_contig, size_t elsize, size_t state_size,
                       em_rp_reduce *p);
/* The combining kernel: one warp per output, 8 outputs per block. */
uint32_t em_rp_combine_grid(int64_t nout);

/* ---- softmax along a dim of a contiguous [outer, n, inner] tensor ----
 * rows = outer * inner lines of n elements (stride inner). Same layouts as reductions: row
 * layout when inner == 1, column layout otherwise; splits > 1 for few long lines. */
typedef struct em_rp_softmax {
  int64_t rows;
  int lanes, lanes_fast;
  int64_t chunk, splits;
  uint32_t grid_x, grid_y;
  size_t partial_bytes; /* rows * splits states when splits > 1 */
  size_t final_bytes; /* rows states when splits > 1 */
} em_rp_softmax;
void em_rp_plan_softmax(int64_t outer, int64_t n, int64_t inner, size_t state_size, em_rp_softmax *p);

/* ---- cumsum / cumprod along a dim of a contiguous [outer, n, inner] tensor ----
 * inner == 1: a warp scans each (line, chunk) pair; inner > 1: a thread scans each
 * (column, chunk) pair, consecutive threads on consecutive columns. With nchunks > 1 the
 * scan runs in three steps: chunk totals, an exclusive scan of the totals per line, and
 * the chunks' scans started from those carries. */
typedef struct em_rp_scan {
  int rows_layout; /* 1: inner == 1 */
  int64_t lines; /* outer (rows layout) or outer * inner (columns) */
  int64_t chunk, nchunks;
  int64_t work; /* warps (rows layout) or threads (columns) of one pass */
  uint32_t grid_x; /* blocks of EM_RP_THREADS threads */
  size_t carry_bytes; /* lines * nchunks accumulators of 8 bytes when nchunks > 1 */
} em_rp_scan;
void em_rp_plan_scan(int64_t outer, int64_t n, int64_t inner, em_rp_scan *p);

/* ---- sort along a dim: rows of n elements, the first k kept ---- */
#ifdef __CUDACC__
#define EM_RP_HOST_DEVICE __host__ __device__
#else
#define EM_RP_HOST_DEVICE
#endif
/* The bitonic network on a tile of rows padded to `padded` slots (a power of two), as the
 * sort kernel runs it: for size = 2, 4, ..., padded and stride = size / 2, ..., 1, thread t
 * (of EM_RP_SORT_TILE / 2) compares slots i = em_rp_bitonic_low(t, stride) and i + stride,
 * and orders them ascending when em_rp_bitonic_up(i, padded, size), else descending. */
static inline EM_RP_HOST_DEVICE int em_rp_bitonic_low(int t, int stride) { return 2 * t - (t & (stride - 1)); }
static inline EM_RP_HOST_DEVICE int em_rp_bitonic_up(int i, int padded, int size) {
  return ((i & (padded - 1)) & size) == 0;
}

enum { EM_RP_SORT_BITONIC, EM_RP_SORT_RADIX_ONE, EM_RP_SORT_RADIX_SEGMENTED, EM_RP_SORT_RADIX_EACH };
typedef struct em_rp_sort {
  int method;
  int padded; /* bitonic: n rounded up to a power of two */
  int rows_per_block; /* bitonic: EM_RP_SORT_TILE / padded */
  uint32_t grid_x; /* bitonic: blocks; radix: blocks of the key/output kernels */
  int64_t batch_rows; /* segmented radix: rows per call (batch_rows * n <= INT32_MAX) */
  int key_bits; /* bits of the radix key */
} em_rp_sort;
void em_rp_plan_sort(int64_t rows, int64_t n, int key_bits, em_rp_sort *p);

/* Bits needed to hold every value in [0, max_value] (at least 1). */
int em_rp_bits_for(uint64_t max_value);
/* Blocks of `threads` threads for a grid-stride loop over n items, at most cap (>= 1). */
uint32_t em_rp_blocks(int64_t n, int threads, uint32_t cap);

#ifdef __cplusplus
}
#endif
#endif
