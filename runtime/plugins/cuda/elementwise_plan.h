/* elementwise_plan.h - the host-side choices of the CUDA elementwise kernels, in plain C
 * so that tests/c/test_cuda_elementwise_plan.c checks them without a GPU.
 *
 * An elementwise call has operands of one shape (output first). After em_geom_many has
 * dropped size-1 dims and merged the dims that are contiguous in every operand, the call
 * takes the vector path when one dim is left, the output and every input are contiguous
 * along it (stride 1) or are a single broadcast value (stride 0, or an immediate scalar),
 * and every stride-1 operand is aligned to the vector: 16 bytes of the widest element, so
 * that each thread moves whole float4s / 8 halves / 16 bytes. Anything else takes the
 * strided path, which divides the linear index once per element and dim (none when one
 * dim is left: a misaligned contiguous view costs little there). */
#ifndef EMBER_GPU_ELEMENTWISE_PLAN_H
#define EMBER_GPU_ELEMENTWISE_PLAN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes one thread moves per operand and step on the vector path (at most). */
#define EM_EW_VECTOR_BYTES 16

/* Elements per vector step for operands whose widest element has max_elsize bytes. */
static inline int em_ew_vector_elems(int max_elsize) {
  if (max_elsize <= 0 || max_elsize > EM_EW_VECTOR_BYTES) return 1;
  return EM_EW_VECTOR_BYTES / max_elsize;
}

/* One operand as the planner sees it after merging: its address (of the first element),
 * element size, and its stride along the single merged dim (ignored when ndim > 1).
 * immediate: the value travels in the kernel's parameters (a binary_scalar's scalar). */
typedef struct em_ew_operand {
  uintptr_t addr;
  int elsize;
  int64_t stride;
  int immediate;
} em_ew_operand;

/* 1 when the vector path applies with vec elements per step (see the file comment);
 * operand 0 is the output, which must be contiguous. */
static inline int em_ew_use_vector(int nops, const em_ew_operand *ops, int ndim, int vec) {
  if (ndim != 1 || vec < 1) return 0;
  for (int k = 0; k < nops; k++) {
    const em_ew_operand *o = &ops[k];
    if (o->immediate && k > 0) continue;
    if (o->stride == 0 && k > 0) continue; /* one value, read once */
    if (o->stride != 1) return 0;
    if (o->addr % ((uintptr_t)vec * (uintptr_t)o->elsize) != 0) return 0;
  }
  return 1;
}

/* 1 when every linear index and size of the call fits 32 bits, so that the strided path
 * may divide in 32 bits (several times cheaper than 64-bit division on the GPU). */
static inline int em_ew_index_fits_32(int64_t numel) { return numel >= 0 && numel <= (int64_t)UINT32_MAX; }

#ifdef __cplusplus
}
#endif
#endif
