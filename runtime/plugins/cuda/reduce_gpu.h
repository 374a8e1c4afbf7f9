/* reduce_gpu.h - the backend entries of the reduction and indexing families of the CUDA
 * backend (backend.h says what each computes), shared between their files:
 *   reduce.cu  reduce, var, and em_gpu_register_reduce (which also installs the next three)
 *   scan.cu    cumsum / cumprod          softmax.cu  softmax / log_softmax
 *   sort.cu    sort and top-k
 *   index.cu   index_select, gather, masked ops, nonzero, count_nonzero, the index check
 *              and em_gpu_register_index
 *   index_write.cu  scatter, index_add, index_fill */
#ifndef EMBER_GPU_REDUCE_GPU_H
#define EMBER_GPU_REDUCE_GPU_H

#include "gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

em_status em_gpu_reduce(em_redop op, em_tensor *out, em_tensor *indices, const em_tensor *a, int nreduce, double p,
                        int base);
em_status em_gpu_var(em_tensor *out, const em_tensor *a, int nreduce, double correction, int take_sqrt);
em_status em_gpu_scan(int prod, em_tensor *out, const em_tensor *a, int dim);
em_status em_gpu_softmax(em_tensor *out, const em_tensor *a, int dim, int log_out);
em_status em_gpu_sort(em_tensor *values, em_tensor *indices, const em_tensor *a, int dim, int descending, int64_t k,
                      int base);

em_status em_gpu_index_select(em_tensor *out, const em_tensor *a, int dim, const em_tensor *index, int base);
em_status em_gpu_gather(em_tensor *out, const em_tensor *a, int dim, const em_tensor *index, int base);
em_status em_gpu_masked_fill(em_tensor *self, const em_tensor *mask, double value);
em_status em_gpu_masked_select(em_tensor *out, const em_tensor *a, const em_tensor *mask);
em_status em_gpu_nonzero(em_tensor *out, const em_tensor *a, int base);
em_status em_gpu_count_nonzero(const em_tensor *a, int64_t *count);
em_status em_gpu_index_fill(em_tensor *self, int dim, const em_tensor *index, double value, int base);
em_status em_gpu_scatter(em_tensor *self, int dim, const em_tensor *index, const em_tensor *src, double value,
                         int accumulate, int base);
em_status em_gpu_index_add(em_tensor *self, int dim, const em_tensor *index, const em_tensor *src, double alpha,
                           int base);

/* Index checks (index.cu): every value of index (any strides, numel n) must lie in
 * [base, base + size). Queues a check kernel, reads one flag back and waits for the stream
 * (the op's one synchronisation); a bad value is reported as the CPU does:
 * "op: index V is out of range for dim D of size S (expected ...)". */
em_status em_gpu_check_indices(const char *op, const em_tensor *index, int dim, int64_t size, int base,
                               cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
