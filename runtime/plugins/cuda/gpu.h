/* gpu.h - what the files of the CUDA plugin share: errors, devices, the current stream,
 * device memory through the caching allocator, library handles, and the registration of
 * each file's backend entries. Included by .c and .cu files alike (C linkage).
 *
 * Conventions for every backend entry (runtime/tensor/backend.h says what each computes):
 * - tensors arrive on one device; call em_gpu_enter(device) first (sets the device for
 *   this thread and returns its current stream);
 * - queue work on that stream and return: no cudaDeviceSynchronize, no cudaMalloc, no
 *   blocking copies on the hot path. Temporary device memory comes from em_gpu_malloc and
 *   goes back with em_gpu_free as soon as the work using it is queued: the allocator hands
 *   a block only to work queued later on the same stream (or after record_stream events);
 * - launch errors are checked with EM_GPU_CHECK / em_gpu_launch_check, which name the op. */
#ifndef EMBER_GPU_H
#define EMBER_GPU_H

#include <cuda_runtime.h>
#include "plugins/plugin_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors: set ember's error ("op: CUDA error <name>: <text>") and return its status */
em_status em_gpu_error(cudaError_t err, const char *op);
#define EM_GPU_CHECK(op, call)                        \
  do {                                                \
    cudaError_t em_gpu_err_ = (call);                 \
    if (em_gpu_err_ != cudaSuccess) return em_gpu_error(em_gpu_err_, (op)); \
  } while (0)
/* After a kernel launch: reports a bad launch configuration (not asynchronous faults). */
em_status em_gpu_launch_check(const char *op);

/* ---- devices and streams (device.c) */
int em_gpu_device_count(void);
/* Makes device current for this thread; *stream receives its current stream. */
em_status em_gpu_enter(const char *op, int device, cudaStream_t *stream);
cudaStream_t em_gpu_current_stream(int device);
int em_gpu_sm_count(int device);

/* ---- device memory (allocator.c): the caching allocator of runtime/cuda, on the current
 * stream of device. NULL with an EM_ERR_MEMORY error that says what was asked, in use and
 * cached. Free takes the pointer alone. */
void *em_gpu_malloc(size_t nbytes, int device);
void em_gpu_free(void *ptr);

/* ---- library handles (device.c): per device, bound to the current stream on return */
void *em_gpu_cublas(int device);      /* cublasHandle_t */
void *em_gpu_cublaslt(int device);    /* cublasLtHandle_t */
void *em_gpu_cudnn(int device);       /* cudnnHandle_t */
void *em_gpu_cusparse(int device);    /* cusparseHandle_t */

/* ---- the backend table: each file fills its own entries (plugin.c calls these) */
void em_gpu_register_memory(em_backend *be);      /* alloc, free, copy (device.c/copy) */
void em_gpu_register_elementwise(em_backend *be); /* fill, arange, binary*, unary, where, clamp, add_scaled, relu_backward */
void em_gpu_register_random(em_backend *be);      /* random */
void em_gpu_register_reduce(em_backend *be);      /* reduce, var, scan, softmax, sort */
void em_gpu_register_index(em_backend *be);       /* index_select ... count_nonzero */
void em_gpu_register_blas(em_backend *be);        /* gemm */
void em_gpu_register_nn(em_backend *be);          /* conv, pool, norms, losses, embedding_bag */
void em_gpu_register_optim(em_backend *be);       /* optim_sgd, optim_adam, optim_grad_norm */
/* The plugin table's PageRank entry (pagerank.cu); em_gpu_fill_plugin may call it too. */
void em_gpu_fill_plugin_pagerank(em_cuda_plugin *p);
/* The plugin table's NCCL process-group slot (nccl_backend.c; NULL without NCCL). */
void em_gpu_fill_plugin_nccl(em_cuda_plugin *p);

#ifdef __cplusplus
}
#endif
#endif
