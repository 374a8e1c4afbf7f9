/* segments.cuh - grouping n (key, position) pairs by key on the GPU, without float atomics:
 * CUB's stable radix sort puts each key's positions together in ascending order (the order
 * in which the CPU adds them), run-length encoding gives the distinct keys and their run
 * lengths, and an exclusive scan where each run starts. Kernels then give one key's run to
 * a row of threads, which adds its contributions in order: the result is the same on every
 * run. Used by the embedding bags' dense and row-sparse backward (embedding.cu) and by the
 * coalescing of row-sparse gradients (sparse_rows.cu). C++ (CUDA) only. */
#ifndef EMBER_GPU_SEGMENTS_CUH
#define EMBER_GPU_SEGMENTS_CUH

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>
#include "group_reduce.cuh"

/* The number of low bits that hold every key up to max_key (the radix sort sorts only those). */
static inline int em_gpu_key_bits(unsigned long long max_key) {
  int bits = 1;
  while (bits < 64 && (max_key >> bits)) bits++;
  return bits;
}

/* keys_in/pos_in: filled by the caller; keys_out/pos_out: sorted by key (stable);
 * uniq/counts/starts: the runs; *num_runs: their number (on the device). */
struct em_gpu_segments {
  unsigned long long *keys_in, *keys_out, *uniq;
  int64_t *pos_in, *pos_out, *counts, *starts, *num_runs;
  void *cub_tmp;
  size_t cub_bytes;
};

/* Carves the arrays for n keys (n <= INT_MAX: CUB's run-length encoding counts in int)
 * out of cv: a first call with cv->base NULL measures, a second one hands out pointers. */
static inline em_status em_gpu_plan_segments(const char *op, em_gpu_carver *cv, em_gpu_segments *sg, int64_t n) {
  int ni = (int)n;
  size_t sort_b = 0, rle_b = 0, scan_b = 0;
  EM_GPU_CHECK(op, cub::DeviceRadixSort::SortPairs(nullptr, sort_b, (const unsigned long long *)nullptr,
                                                   (unsigned long long *)nullptr, (const int64_t *)nullptr,
                                                   (int64_t *)nullptr, n, 0, 64, (cudaStream_t)0));
  EM_GPU_CHECK(op, cub::DeviceRunLengthEncode::Encode(nullptr, rle_b, (const unsigned long long *)nullptr,
                                                      (unsigned long long *)nullptr, (int64_t *)nullptr,
                                                      (int64_t *)nullptr, ni, (cudaStream_t)0));
  EM_GPU_CHECK(op, cub::DeviceScan::ExclusiveSum(nullptr, scan_b, (const int64_t *)nullptr, (int64_t *)nullptr, ni,
                                                 (cudaStream_t)0));
  sg->cub_bytes = sort_b > rle_b ? sort_b : rle_b;
  if (scan_b > sg->cub_bytes) sg->cub_bytes = scan_b;
  sg->keys_in = cv->take<unsigned long long>(n);
  sg->keys_out = cv->take<unsigned long long>(n);
  sg->uniq = cv->take<unsigned long long>(n);
  sg->pos_in = cv->take<int64_t>(n);
  sg->pos_out = cv->take<int64_t>(n);
  sg->counts = cv->take<int64_t>(n);
  sg->starts = cv->take<int64_t>(n);
  sg->num_runs = cv->take<int64_t>(1);
  sg->cub_tmp = cv->take<char>(sg->cub_bytes);
  return EM_OK;
}

/* Sorts, encodes and scans the n pairs of sg (keys at most max_key). Queued on stream. */
static inline em_status em_gpu_run_segments(const char *op, em_gpu_segments *sg, int64_t n, unsigned long long max_key,
                                            cudaStream_t stream) {
  int ni = (int)n;
  size_t bytes = sg->cub_bytes;
  EM_GPU_CHECK(op, cudaMemsetAsync(sg->counts, 0, sizeof(int64_t) * n, stream)); /* the scan reads all n */
  EM_GPU_CHECK(op, cub::DeviceRadixSort::SortPairs(sg->cub_tmp, bytes, sg->keys_in, sg->keys_out, sg->pos_in,
                                                   sg->pos_out, n, 0, em_gpu_key_bits(max_key), stream));
  bytes = sg->cub_bytes;
  EM_GPU_CHECK(op, cub::DeviceRunLengthEncode::Encode(sg->cub_tmp, bytes, sg->keys_out, sg->uniq, sg->counts,
                                                      sg->num_runs, ni, stream));
  bytes = sg->cub_bytes;
  EM_GPU_CHECK(op, cub::DeviceScan::ExclusiveSum(sg->cub_tmp, bytes, sg->counts, sg->starts, ni, stream));
  return EM_OK;
}

/* Copies one int64 from the device to *value and waits for the stream: the row-sparse ops'
 * one synchronisation (their callers size the result by it, as PyTorch's coalesce does). */
static inline em_status em_gpu_read_count(const char *op, const int64_t *dvalue, int64_t *value, cudaStream_t stream) {
  EM_GPU_CHECK(op, cudaMemcpyAsync(value, dvalue, sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
  EM_GPU_CHECK(op, cudaStreamSynchronize(stream));
  return EM_OK;
}

#endif
