/* gpu.h - what the files of the CUDA plugin share: errors, devices, the current stream,
 * device memory through the caching allocator, library handles, the backend entries and
 * the extras. Included by .c and .cu files alike (C linkage).
 *
 * Conventions for every backend entry (runtime/tensor/backend.h says what each computes):
 * - tensors arrive on one device; call em_gpu_enter(device) first (sets the device for
 *   this thread and returns its current stream);
 * - queue work on that stream and return: no cudaDeviceSynchronize, no cudaMalloc, no
 *   blocking copies on the hot path. Temporary device memory comes from em_gpu_malloc and
 *   goes back with em_gpu_free_ptr as soon as the work using it is queued: the allocator hands
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
#define EM_GPU_CHECK(op, call)                                              \
  do {                                                                      \
    cudaError_t em_gpu_err_ = (call);                                       \
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
 * cached. Free takes the pointer alone (the backend's free entry takes its size and device
 * too). */
void *em_gpu_malloc(size_t nbytes, int device);
void em_gpu_free_ptr(void *ptr);

/* ---- library handles (device.c): per device, bound to the current stream on return */
void *em_gpu_cublas(int device); /* cublasHandle_t */
void *em_gpu_cublaslt(int device); /* cublasLtHandle_t */
void *em_gpu_cudnn(int device); /* cudnnHandle_t */
void *em_gpu_cusparse(int device); /* cusparseHandle_t */

/* ---- the backend table (table.c): em_gpu_<entry> for every entry of tensor/backend.h.
 * alloc, free (allocator.c); copy (copy.cu); fill, arange, where, clamp, add_scaled,
 * relu_backward (elementwise.cu), binary* (binary.cu), unary (unary.cu); random
 * (random.cu); reduce, var, scan, softmax, sort, the indexing entries (reduce_gpu.h says
 * which file); gemm (blas.c); conv2d*, *_pool2d*, batch_norm*, layer_norm* (conv.cu,
 * pool.cu, norm.cu), class_loss* (loss.cu), embedding_bag* (embedding.cu); optim_*,
 * amp_unscale (optim.cu) but optim_rows and sparse_coalesce (sparse_rows.cu);
 * dot_interaction* (interaction.cu). count_correct is optional and left to its default. */
EM_BACKEND_PROTOTYPES(em_gpu)

/* ---- the plugin (table.c, plugin.c) */
extern const em_cuda_plugin em_gpu_plugin;
/* The extra called name (EM_CUDA_EXTRA_*), or NULL (plugin.c). */
em_cuda_proc em_gpu_get_proc(const char *name);
/* EM_CUDA_EXTRA_PAGERANK (pagerank.cu). */
em_status em_gpu_pagerank(em_cuda_pagerank_job *job);
/* EM_CUDA_EXTRA_PART_PAGERANK (pagerank_part.cu). */
const em_cuda_part_pagerank_ops *em_gpu_part_pagerank(void);
/* EM_CUDA_EXTRA_NCCL (nccl_backend.c; only in a build with NCCL). */
const struct em_dist_backend *em_gpu_nccl_backend(void);

#ifdef __cplusplus
}
#endif
#endif
