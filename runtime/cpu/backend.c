/* backend.c - the CPU backend's dispatch table and host allocator. */
#include <malloc.h>
#include <sys/mman.h>
#include <stdlib.h>
#include "cpu_impl.h"

/* Training allocates and frees the same large activations every step. glibc serves
 * blocks above its (adaptive) mmap threshold with fresh mmaps, and the page faults of
 * touching them again cost about a third of a CNN step. Keeping blocks up to 32 MiB in the
 * heap, and not trimming it eagerly, lets them be reused. EMBER_MALLOC_DEFAULTS=1 keeps
 * glibc's own settings. */
__attribute__((constructor)) static void tune_malloc(void) {
  const char *keep = getenv("EMBER_MALLOC_DEFAULTS");
  if (keep && *keep && *keep != '0') return;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_TOP_PAD, 64 << 20);
}

/* Large blocks are 2 MiB aligned and asked to be backed by transparent huge pages: a fresh
 * 64 MB result then costs 32 page faults instead of 16384, which is most of the time of an
 * out-of-place elementwise op on it. */
#define HUGE_PAGE ((size_t)2 << 20)
#define HUGE_FROM ((size_t)4 << 20)

void *em_cpu_alloc(size_t nbytes, em_device device) {
  (void)device;
  if (nbytes >= HUGE_FROM) {
    size_t rounded = (nbytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    void *p = aligned_alloc(HUGE_PAGE, rounded);
    if (p) madvise(p, rounded, MADV_HUGEPAGE); /* advice only: failure is harmless */
    return p;
  }
  size_t rounded = (nbytes + 63) & ~(size_t)63; /* aligned_alloc wants a multiple */
  return aligned_alloc(64, rounded);
}

void em_cpu_free(void *ptr, size_t nbytes, em_device device) {
  (void)nbytes, (void)device;
  free(ptr);
}

/* Entries left out (NULL) are reported as unsupported by the tensor core. Each kernel
 * group lives in its own file; the functions are declared in cpu_impl.h. */
const em_backend em_cpu_backend = {
    .name = "cpu",
    .alloc = em_cpu_alloc,
    .free = em_cpu_free,
    .copy = em_cpu_copy,
    .fill = em_cpu_fill,
    .arange = em_cpu_arange,
    .binary = em_cpu_binary,
    .binary_scalar = em_cpu_binary_scalar,
    .unary = em_cpu_unary,
    .where = em_cpu_where,
    .clamp = em_cpu_clamp,
    .add_scaled = em_cpu_add_scaled,
    .reduce = em_cpu_reduce,
    .var = em_cpu_var,
    .scan = em_cpu_scan,
    .softmax = em_cpu_softmax,
    .sort = em_cpu_sort,
    .gemm = em_cpu_gemm,
    .index_select = em_cpu_index_select,
    .gather = em_cpu_gather,
    .scatter = em_cpu_scatter,
    .index_add = em_cpu_index_add,
    .index_fill = em_cpu_index_fill,
    .masked_fill = em_cpu_masked_fill,
    .masked_select = em_cpu_masked_select,
    .nonzero = em_cpu_nonzero,
    .count_nonzero = em_cpu_count_nonzero,
    .random = em_cpu_random,
    .optim_sgd = em_cpu_optim_sgd,
    .optim_adam = em_cpu_optim_adam,
    .optim_grad_norm = em_cpu_optim_grad_norm,
    .amp_unscale = em_cpu_amp_unscale,
    .conv2d = em_cpu_conv2d,
    .conv2d_backward = em_cpu_conv2d_backward,
    .max_pool2d = em_cpu_max_pool2d,
    .max_pool2d_backward = em_cpu_max_pool2d_backward,
    .avg_pool2d = em_cpu_avg_pool2d,
    .avg_pool2d_backward = em_cpu_avg_pool2d_backward,
    .batch_norm_stats = em_cpu_batch_norm_stats,
    .batch_norm = em_cpu_batch_norm,
    .batch_norm_backward = em_cpu_batch_norm_backward,
    .layer_norm = em_cpu_layer_norm,
    .layer_norm_backward = em_cpu_layer_norm_backward,
    .class_loss = em_cpu_class_loss,
    .class_loss_backward = em_cpu_class_loss_backward,
    .embedding_bag = em_cpu_embedding_bag,
    .embedding_bag_backward = em_cpu_embedding_bag_backward,
    .relu_backward = em_cpu_relu_backward,
};
