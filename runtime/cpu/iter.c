/* iter.c - the strided iterator under every CPU elementwise kernel. */
#include <omp.h>
#include "cpu_impl.h"

void cpu_iter_init(em_iter *it, int nops, const em_tensor *const *ops) {
  const em_tensor *ref = ops[0];
  it->nops = nops;
  it->numel = em_tensor_numel(ref);
  for (int i = 0; i < nops; i++) it->data[i] = em_tensor_ptr(ops[i]);
  /* Keep dims of size > 1, outermost first. */
  int n = 0;
  for (int d = 0; d < ref->ndim; d++) {
    if (ref->sizes[d] == 1) continue;
    it->sizes[n] = ref->sizes[d];
    for (int i = 0; i < nops; i++) it->strides[i][n] = ops[i]->strides[d] * (int64_t)em_dtype_size(ops[i]->dtype);
    n++;
  }
  if (n == 0) { /* a scalar, or all dims of size 1 */
    it->sizes[0] = 1;
    for (int i = 0; i < nops; i++) it->strides[i][0] = (int64_t)em_dtype_size(ops[i]->dtype);
    n = 1;
  }
  /* Merge dim d into d+1 when, for every operand, stepping d equals a full sweep of d+1. */
  int m = 0;
  for (int d = 1; d < n; d++) {
    int mergeable = 1;
    for (int i = 0; i < nops; i++)
      if (it->strides[i][m] != it->strides[i][d] * it->sizes[d]) mergeable = 0;
    if (mergeable) {
      it->sizes[m] *= it->sizes[d];
      for (int i = 0; i < nops; i++) it->strides[i][m] = it->strides[i][d];
    } else {
      m++;
      it->sizes[m] = it->sizes[d];
      for (int i = 0; i < nops; i++) it->strides[i][m] = it->strides[i][d];
    }
  }
  it->ndim = m + 1;
}

/* Runs fn over the flat element range [begin, end). */
static void run_range(const em_iter *it, int64_t begin, int64_t end, em_loop_fn fn, void *ctx) {
  int nd = it->ndim, nops = it->nops;
  int64_t inner = it->sizes[nd - 1];
  int64_t idx[EM_MAX_DIMS];
  int64_t rest = begin;
  for (int d = nd - 1; d >= 0; d--) {
    idx[d] = rest % it->sizes[d];
    rest /= it->sizes[d];
  }
  char *ptr[EM_ITER_MAX_OPS];
  int64_t inner_strides[EM_ITER_MAX_OPS];
  for (int i = 0; i < nops; i++) {
    ptr[i] = it->data[i];
    for (int d = 0; d < nd; d++) ptr[i] += idx[d] * it->strides[i][d];
    inner_strides[i] = it->strides[i][nd - 1];
  }
  int64_t pos = begin;
  while (pos < end) {
    int64_t n = inner - idx[nd - 1];
    if (n > end - pos) n = end - pos;
    fn(ptr, inner_strides, n, ctx);
    pos += n;
    if (pos >= end) break;
    /* Advance to the start of the next inner row. */
    for (int i = 0; i < nops; i++) ptr[i] += (inner - idx[nd - 1]) * inner_strides[i];
    idx[nd - 1] = 0;
    for (int i = 0; i < nops; i++) ptr[i] -= inner * inner_strides[i];
    for (int d = nd - 2; d >= 0; d--) {
      idx[d]++;
      for (int i = 0; i < nops; i++) ptr[i] += it->strides[i][d];
      if (idx[d] < it->sizes[d]) break;
      for (int i = 0; i < nops; i++) ptr[i] -= it->sizes[d] * it->strides[i][d];
      idx[d] = 0;
    }
  }
}

void cpu_iter_for_each(const em_iter *it, em_loop_fn fn, void *ctx, int64_t grain) {
  if (it->numel == 0) return;
  if (grain <= 0) grain = EM_PARALLEL_GRAIN;
  int threads = em_get_num_threads();
  if (it->numel < grain || threads <= 1 || omp_in_parallel()) {
    run_range(it, 0, it->numel, fn, ctx);
    return;
  }
  int64_t chunks = it->numel / grain;
  if (chunks > threads) chunks = threads;
#pragma omp parallel num_threads((int)chunks)
  {
    int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    /* Chunk edges rounded to 16 elements keep vector loops aligned within a row. */
    int64_t begin = (it->numel * t / nt) & ~(int64_t)15,
            end = t == nt - 1 ? it->numel : (it->numel * (t + 1) / nt) & ~(int64_t)15;
    if (end > begin) run_range(it, begin, end, fn, ctx);
  }
}
