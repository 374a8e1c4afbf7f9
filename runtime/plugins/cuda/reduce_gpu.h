/* reduce_gpu.h - what the reduction and indexing families of the CUDA backend share. Their
 * backend entries (declared in gpu.h, from the list of backend.h) live in:
 *   reduce.cu  reduce, var
 *   scan.cu    cumsum / cumprod          softmax.cu  softmax / log_softmax
 *   sort.cu    sort and top-k
 *   index.cu   index_select, gather, masked ops, nonzero, count_nonzero, the index check
 *   index_write.cu  scatter, index_add, index_fill */
#ifndef EMBER_GPU_REDUCE_GPU_H
#define EMBER_GPU_REDUCE_GPU_H

#include "gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

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
