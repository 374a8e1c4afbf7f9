/* pagerank.cu - PageRank on a GPU: the CPU's Jacobi iteration (runtime/graph/pagerank.c),
 * pulled over the in-arc CSR, with the same arithmetic:
 *
 *   x'(v) = (float)(d * s * sum_{u -> v} c(u) + t(v)),   c(u) = x(u) * (1 / outdeg(u))
 *   t(v)  = coef * p(v),  coef = (1 - d) + d * dangling   (GAPBS: 1 - d, the mass leaks)
 *
 * where s is the previous iteration's normalisation (1 / sum x, applied to what is gathered
 * rather than in a pass of its own), dangling the normalised score of vertices without
 * out-arcs and p the teleport vector (uniform 1/n by default). Scores and contributions are
 * float32; the per-vertex sums, the sum of the scores, the L1 residual and the dangling
 * mass accumulate in double, as on the CPU. Gauss-Seidel (an in-place, order-dependent
 * sweep) has no GPU form: it runs as Jacobi, and the stats say so (stats->method).
 *
 * One iteration is three kernels on the device's current stream:
 *   pr_chunks  one warp per chunk of a heavy vertex's arcs (pagerank_plan.h) -> chunk sums;
 *   pr_update  one thread per vertex (a warp per 32 consecutive vertices): the gather of a
 *              light vertex, the chunk sums of a heavy one, the new score, its contribution
 *              for the next iteration, and per-block sums of score, residual and dangling;
 *   pr_finish  one block: sums the per-block figures in order, and keeps the iteration's
 *              normalisation, teleport coefficient and residual in device memory, where
 *              the next iteration reads them: the host is never in the loop.
 * Every sum runs in an order fixed by the graph, so the scores are the same bits on every
 * run (not the CPU's bits: the orders differ; they agree to rounding).
 * The host checks convergence every PR_CHECK_EVERY iterations with one 48-byte copy. Once
 * an iteration's residual is below tol, pr_finish sets a flag that turns the kernels
 * already queued behind it into no-ops, so the result is exactly that of stopping there.
 *
 * EMBER_PAGERANK_GPU=cusparse replaces pr_chunks and the gather by cuSPARSE's SpMV (CSR,
 * float32, an all-ones matrix, CUSPARSE_SPMV_CSR_ALG2), which sums in float32 instead of
 * double; the update and the reductions are the same kernels. `custom` (the default) is
 * the code above. Which is faster has to be measured on the GPU (bench/gpu/pagerank.lua
 * runs both); cuSPARSE also needs 4 more bytes per arc (the matrix values).
 *
 * Memory on the device: 8 bytes per vertex of offsets, 4 per arc of sources, 24 per vertex
 * of scores, contributions and degrees (28 with a teleport vector) and the plan (8 bytes
 * per 32 vertices and per heavy vertex, 20 per chunk): Twitter (50M vertices, 1.9B arcs)
 * needs about 10 GB (cuSPARSE: 18 GB). What cannot be allocated is an EM_ERR_MEMORY error
 * saying how much the run needs, how much it holds and what the allocator reported. */
#include <cusparse.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kernels.cuh"
#include "pagerank_kernels.cuh"

#define OP "graph pagerank"
#define FULL_MASK 0xffffffffu
#define PR_FINISH_THREADS 1024   /* sums n / 256 block figures: wide, to keep it short */
#define PR_CHECK_EVERY 4

namespace {   /* kernels and helpers private to this file */

/* ---------------------------------------------------------------- reductions */
template <typename T>
__device__ __forceinline__ T warp_sum(T s) {
  for (int o = PR_GROUP / 2; o > 0; o >>= 1) s += __shfl_down_sync(FULL_MASK, s, o);
  return s;   /* lane 0 holds the sum of the warp, in a fixed order */
}

/* Sums three values over the block in a fixed order; thread 0 gets the totals. */
template <int THREADS>
__device__ __forceinline__ void block_sum3(double &a, double &b, double &c) {
  __shared__ double part[3][THREADS / PR_GROUP];
  int lane = threadIdx.x % PR_GROUP, warp = threadIdx.x / PR_GROUP;
  a = warp_sum(a);
  b = warp_sum(b);
  c = warp_sum(c);
  if (lane == 0) {
    part[0][warp] = a;
    part[1][warp] = b;
    part[2][warp] = c;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    a = b = c = 0;
    for (int w = 0; w < THREADS / PR_GROUP; w++) {
      a += part[0][w];
      b += part[1][w];
      c += part[2][w];
    }
  }
}

/* ---------------------------------------------------------------- kernels */
__global__ void pr_init(int64_t n, const uint32_t *__restrict__ out_degree, float *__restrict__ inv,
                        float *__restrict__ x, float *__restrict__ contrib, float x0) {
  for (int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; v < n; v += (int64_t)gridDim.x * blockDim.x) {
    uint32_t deg = out_degree[v];
    float i = deg ? 1.0f / (float)deg : 0.0f;   /* IEEE division, as the CPU's */
    inv[v] = i;
    x[v] = x0;
    contrib[v] = x0 * i;
  }
}

/* The exact sums of a block (integers: any order gives the same) added to fixed[0..2]. */
__device__ __forceinline__ void block_fixed3(unsigned long long *fixed, double a, double b, double c) {
  /* gr_fix (graph_impl.h): x * 2^60 is exact, so contracting it with the + 0.5 changes nothing */
  long long f[3] = {(long long)(a * 0x1p60 + 0.5), (long long)(b * 0x1p60 + 0.5), (long long)(c * 0x1p60 + 0.5)};
  __shared__ long long part[3][PR_THREADS / PR_GROUP];
  int lane = threadIdx.x % PR_GROUP, warp = threadIdx.x / PR_GROUP;
  for (int k = 0; k < 3; k++) f[k] = warp_sum(f[k]);
  if (lane == 0)
    for (int k = 0; k < 3; k++) part[k][warp] = f[k];
  __syncthreads();
  if (threadIdx.x < 3) {
    long long s = 0;
    for (int w = 0; w < PR_THREADS / PR_GROUP; w++) s += part[threadIdx.x][w];
    atomicAdd(fixed + threadIdx.x, (unsigned long long)s); /* two's complement: signed addition */
  }
}

}  // namespace

/* One warp per chunk: lane l sums arcs l, l + 32, ... of the chunk; then the warp's tree. */
__global__ void pr_chunks(const pr_state *__restrict__ st, int64_t nchunks, const int64_t *__restrict__ chunk_begin,
                          const uint32_t *__restrict__ chunk_len, const uint32_t *__restrict__ src,
                          const float *__restrict__ contrib, double *__restrict__ chunk_sum) {
  if (st && st->done) return;
  int64_t c = blockIdx.x * (int64_t)(blockDim.x / PR_GROUP) + threadIdx.x / PR_GROUP;
  if (c >= nchunks) return;   /* the whole warp leaves together */
  int lane = threadIdx.x % PR_GROUP;
  const uint32_t *s = src + chunk_begin[c];
  uint32_t len = chunk_len[c];
  double acc = 0;
#pragma unroll 4
  for (uint32_t j = lane; j < len; j += PR_GROUP) acc += (double)__ldg(contrib + __ldg(s + j));
  acc = warp_sum(acc);
  if (lane == 0) chunk_sum[c] = acc;
}


namespace {

/* The in-sum of the heavy vertices of this warp: each lane with one chunk reads its sum;
 * the warp sums, for each lane with several, its chunk sums in a fixed order. */
__device__ __forceinline__ double heavy_sum(const pr_update_args &a, bool heavy, unsigned heavy_lanes, int64_t v,
                                            int lane, double in) {
  int64_t k = a.group_first[v / PR_GROUP] + __popc(heavy_lanes & ((1u << lane) - 1u));
  long long first = 0, last = 0;
  if (heavy) {
    first = a.chunk_first[k];
    last = a.chunk_first[k + 1];
    if (last - first == 1) in = a.chunk_sum[first];
  }
  unsigned several = __ballot_sync(FULL_MASK, heavy && last - first > 1);
  while (several) {
    int owner = __ffs(several) - 1;
    several &= several - 1;
    long long f = __shfl_sync(FULL_MASK, first, owner), l = __shfl_sync(FULL_MASK, last, owner);
    double s = 0;
    for (long long c = f + lane; c < l; c += PR_GROUP) s += a.chunk_sum[c];
    s = __shfl_sync(FULL_MASK, warp_sum(s), 0);
    if (lane == owner) in = s;
  }
  return in;
}

}  // namespace

__global__ void __launch_bounds__(PR_THREADS) pr_update(const pr_update_args a) {
  if (a.st && a.st->done) return;   /* uniform: every thread reads the same flag */
  const double scale = a.st ? a.st->scale : a.scale, coef = a.st ? a.st->coef : a.coef;
  const double d = a.damping * scale, uniform = coef / a.total;
  int64_t v = blockIdx.x * (int64_t)PR_THREADS + threadIdx.x;
  int lane = threadIdx.x % PR_GROUP;
  bool live = v < a.n;
  double in = 0;
  if (a.gathered) {
    if (live) in = (double)a.gathered[v];
  } else {
    int64_t begin = 0, end = 0;
    if (live) {
      begin = a.off[v];
      end = a.off[v + 1];
    }
    bool heavy = end - begin >= PR_LIGHT;
    if (live && !heavy)
      for (int64_t j = begin; j < end; j++) in += (double)__ldg(a.contrib + __ldg(a.src + j));
    unsigned heavy_lanes = __ballot_sync(FULL_MASK, heavy);
    if (heavy_lanes) in = heavy_sum(a, heavy, heavy_lanes, v, lane, in);   /* uniform branch */
  }
  double sum = 0, res = 0, dang = 0;
  if (live) {
    double t = a.tele ? coef * (double)a.tele[v] : uniform;
    float nv = (float)(d * in + t);
    float inv = a.inv[v];
    a.y[v] = nv;
    a.next[a.own ? a.own[v] : v] = nv * inv;
    sum = nv;
    res = fabs((double)nv - scale * (double)a.x[v]);
    dang = inv == 0.0f ? (double)nv : 0.0;
  }
  if (a.fixed) {
    block_fixed3(a.fixed, sum, res, dang);
    return;
  }
  block_sum3<PR_THREADS>(sum, res, dang);
  if (threadIdx.x == 0) {
    a.partial[3 * (int64_t)blockIdx.x] = sum;
    a.partial[3 * (int64_t)blockIdx.x + 1] = res;
    a.partial[3 * (int64_t)blockIdx.x + 2] = dang;
  }
}

namespace {

__global__ void __launch_bounds__(PR_FINISH_THREADS)
    pr_finish(pr_state *st, const double *__restrict__ partial, int64_t nparts, double *residuals, int iteration,
              double damping, double tol, int gapbs) {
  /* every thread reads the flag before the barrier after which thread 0 may set it */
  if (st->done) return;
  double sum = 0, res = 0, dang = 0;
  for (int64_t i = threadIdx.x; i < nparts; i += PR_FINISH_THREADS) {
    sum += partial[3 * i];
    res += partial[3 * i + 1];
    dang += partial[3 * i + 2];
  }
  block_sum3<PR_FINISH_THREADS>(sum, res, dang);
  if (threadIdx.x == 0) {
    double scale = gapbs || !(sum > 0) ? 1.0 : 1.0 / sum;
    double dangling = scale * dang;
    st->scale = scale;
    st->coef = gapbs ? 1.0 - damping : (1.0 - damping) + damping * dangling;
    st->residual = res;
    st->iterations = iteration + 1;
    residuals[iteration] = res;
    if (res < tol) st->done = 1;
  }
}

__global__ void pr_scale_out(int64_t n, const float *__restrict__ x, const pr_state *__restrict__ st,
                             float *__restrict__ out) {
  double scale = st->scale;
  for (int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; v < n; v += (int64_t)gridDim.x * blockDim.x)
    out[v] = (float)(scale * (double)x[v]);
}

/* cuSPARSE's inputs: the all-ones matrix values and, for graphs that allow it, 32-bit
 * offsets; sources widened to 64 bits when ids or arcs outgrow int32. */
__global__ void pr_fill_ones(int64_t m, float *vals) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < m; i += (int64_t)gridDim.x * blockDim.x)
    vals[i] = 1.0f;
}
__global__ void pr_narrow(int64_t count, const int64_t *__restrict__ in, int32_t *__restrict__ out) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = (int32_t)in[i];
}
__global__ void pr_widen(int64_t count, const uint32_t *__restrict__ in, int64_t *__restrict__ out) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = (int64_t)in[i];
}

}  // namespace

/* ---------------------------------------------------------------- shared host side */
static double gib(size_t bytes) { return (double)bytes / (double)(1ull << 30); }

em_status pr_alloc_bytes(pr_memory *m, void **out, size_t bytes, const char *what) {
  *out = em_gpu_malloc(bytes, m->device);
  if (!*out) {
    char why[768];
    snprintf(why, sizeof why, "%s", em_last_error());
    return em_set_error(EM_ERR_MEMORY,
                        "%s: out of memory on cuda:%d for %s (%.3f GiB; %.3f GiB already taken by this run, which "
                        "needs %.3f GiB in all): %s",
                        m->op, m->device, what, gib(bytes), gib(m->held), gib(m->need), why);
  }
  m->held += bytes;
  return EM_OK;
}

em_status pr_plan_upload(pr_memory *m, const pr_plan *p, pr_plan_device *d, cudaStream_t s) {
  em_status st;
  if ((st = pr_alloc(m, &d->group_first, p->groups + 1, "the work plan")) ||
      (st = pr_alloc(m, &d->chunk_first, p->heavy + 1, "the work plan")) ||
      (st = pr_alloc(m, &d->chunk_begin, p->nchunks, "the work plan")) ||
      (st = pr_alloc(m, &d->chunk_len, p->nchunks, "the work plan")) ||
      (st = pr_alloc(m, &d->chunk_sum, p->nchunks, "the chunk sums")))
    return st;
  EM_GPU_CHECK(m->op, cudaMemcpyAsync(d->group_first, p->group_first, (size_t)(p->groups + 1) * sizeof(int64_t),
                                      cudaMemcpyHostToDevice, s));
  EM_GPU_CHECK(m->op, cudaMemcpyAsync(d->chunk_first, p->chunk_first, (size_t)(p->heavy + 1) * sizeof(int64_t),
                                      cudaMemcpyHostToDevice, s));
  if (p->nchunks > 0) {
    EM_GPU_CHECK(m->op, cudaMemcpyAsync(d->chunk_begin, p->chunk_begin, (size_t)p->nchunks * sizeof(int64_t),
                                        cudaMemcpyHostToDevice, s));
    EM_GPU_CHECK(m->op, cudaMemcpyAsync(d->chunk_len, p->chunk_len, (size_t)p->nchunks * sizeof(uint32_t),
                                        cudaMemcpyHostToDevice, s));
  }
  return EM_OK;
}

void pr_plan_device_free(pr_plan_device *d) {
  void *ptrs[] = {d->group_first, d->chunk_first, d->chunk_begin, d->chunk_len, d->chunk_sum};
  for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++)
    if (ptrs[i]) em_gpu_free_ptr(ptrs[i]);
  memset(d, 0, sizeof *d);
}

pr_update_args pr_update_base(int64_t n, double total, const int64_t *off, const uint32_t *src, float *const x[2],
                              float *const contrib[2], int cur, const float *inv, const pr_plan_device *d,
                              double damping) {
  pr_update_args a;
  memset(&a, 0, sizeof a);
  a.n = n;
  a.total = total;
  a.off = off;
  a.src = src;
  a.contrib = contrib[cur];
  a.x = x[cur];
  a.y = x[cur ^ 1];
  a.next = contrib[cur ^ 1];
  a.inv = inv;
  a.group_first = d->group_first;
  a.chunk_first = d->chunk_first;
  a.chunk_sum = d->chunk_sum;
  a.damping = damping;
  return a;
}

em_status pr_chunks_queue(const pr_state *st, const pr_plan *p, const pr_plan_device *d, const uint32_t *src,
                          const float *contrib, cudaStream_t s) {
  const int64_t nchunks = p->nchunks, warps = PR_THREADS / PR_GROUP;
  if (nchunks == 0) return EM_OK;
  pr_chunks<<<(unsigned)((nchunks + warps - 1) / warps), PR_THREADS, 0, s>>>(st, nchunks, d->chunk_begin,
                                                                              d->chunk_len, src, contrib, d->chunk_sum);
  return em_gpu_launch_check(OP);
}

namespace {

/* ---------------------------------------------------------------- host side */
enum { PR_CUSTOM, PR_CUSPARSE };

/* Everything one run holds on the device; release() frees what was allocated. */
struct pr_run {
  int device;
  cudaStream_t stream;
  int engine;
  pr_memory mem;
  pr_plan plan;
  pr_plan_device dplan;
  int64_t *off;
  uint32_t *src, *out_degree;
  float *inv, *x[2], *contrib[2], *tele;
  double *partial, *residuals;
  pr_state *st;
  /* cuSPARSE */
  float *gathered, *ones;
  int32_t *off32;
  int64_t *src64;
  void *sp_buffer;
  cusparseHandle_t sp;
  cusparseConstSpMatDescr_t sp_mat;
  cusparseConstDnVecDescr_t sp_x[2];
  cusparseDnVecDescr_t sp_y;
};

template <typename T>
static em_status device_alloc(pr_run *r, T **out, int64_t count, const char *what) {
  return pr_alloc(&r->mem, out, count, what);
}

static em_status sparse_error(cusparseStatus_t s, const char *call) {
  em_status code = s == CUSPARSE_STATUS_ALLOC_FAILED || s == CUSPARSE_STATUS_INSUFFICIENT_RESOURCES ? EM_ERR_MEMORY
                                                                                                   : EM_ERR_RUNTIME;
  return em_set_error(code, "%s: cuSPARSE %s failed: %s (%s)", OP, call, cusparseGetErrorName(s),
                      cusparseGetErrorString(s));
}
#define PR_SPARSE(name, call)                                   \
  do {                                                          \
    cusparseStatus_t pr_s_ = (call);                            \
    if (pr_s_ != CUSPARSE_STATUS_SUCCESS) return sparse_error(pr_s_, (name)); \
  } while (0)

static void release(pr_run *r) {
  if (r->sp_mat) cusparseDestroySpMat(r->sp_mat);
  for (int i = 0; i < 2; i++)
    if (r->sp_x[i]) cusparseDestroyDnVec(r->sp_x[i]);
  if (r->sp_y) cusparseDestroyDnVec(r->sp_y);
  void *ptrs[] = {r->off,     r->src,       r->out_degree, r->inv,  r->x[0],  r->x[1],   r->contrib[0], r->contrib[1],
                  r->tele,    r->partial,   r->residuals,  r->st,   r->gathered, r->ones, r->off32,   r->src64,
                  r->sp_buffer};
  for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++)
    if (ptrs[i]) em_gpu_free_ptr(ptrs[i]);
  pr_plan_device_free(&r->dplan);
  pr_plan_free(&r->plan);
}

static em_status engine_from_env(int *engine) {
  const char *e = getenv("EMBER_PAGERANK_GPU");
  if (!e || !*e || !strcmp(e, "custom")) {
    *engine = PR_CUSTOM;
    return EM_OK;
  }
  if (!strcmp(e, "cusparse")) {
    *engine = PR_CUSPARSE;
    return EM_OK;
  }
  return em_set_error(EM_ERR_ARGUMENT, "%s: EMBER_PAGERANK_GPU is '%s', expected 'custom' or 'cusparse'", OP, e);
}

static int64_t update_blocks(int64_t n) { return (n + PR_THREADS - 1) / PR_THREADS; }

/* What the run will allocate, for the error message should it not fit. */
static size_t bytes_needed(const pr_run *r, const em_cuda_pagerank_job *job) {
  size_t n = (size_t)job->n, m = (size_t)job->m;
  size_t b = 8 * (n + 1) + 4 * m + 4 * n /* out-degrees, during setup */ + 20 * n + (job->teleport ? 4 * n : 0) +
             24 * (size_t)update_blocks(job->n) + 8 * (size_t)job->max_iter + sizeof(pr_state);
  if (r->engine == PR_CUSTOM) return b + pr_plan_device_bytes(&r->plan);
  bool narrow = job->n <= INT32_MAX && job->m <= INT32_MAX;
  return b + 4 * n + 4 * m + (narrow ? 4 * (n + 1) : 8 * m);
}

static em_status launched(void) { return em_gpu_launch_check(OP); }

/* Copies the graph and queues the first state; fills the cuSPARSE descriptors. */
static em_status setup(pr_run *r, const em_cuda_pagerank_job *job) {
  const int64_t n = job->n, m = job->m;
  cudaStream_t s = r->stream;
  em_status st;
  if (r->engine == PR_CUSTOM && (st = pr_plan_build(&r->plan, n, job->offsets))) return st;
  r->mem.need = bytes_needed(r, job);
  if ((st = device_alloc(r, &r->off, n + 1, "the offsets")) || (st = device_alloc(r, &r->src, m, "the sources")) ||
      (st = device_alloc(r, &r->out_degree, n, "the out-degrees")) ||
      (st = device_alloc(r, &r->inv, n, "the inverse out-degrees")) ||
      (st = device_alloc(r, &r->x[0], n, "the scores")) || (st = device_alloc(r, &r->x[1], n, "the scores")) ||
      (st = device_alloc(r, &r->contrib[0], n, "the contributions")) ||
      (st = device_alloc(r, &r->contrib[1], n, "the contributions")) ||
      (job->teleport && (st = device_alloc(r, &r->tele, n, "the teleport vector"))) ||
      (st = device_alloc(r, &r->partial, 3 * update_blocks(n), "the block sums")) ||
      (st = device_alloc(r, &r->residuals, job->max_iter, "the residuals")) ||
      (st = device_alloc(r, &r->st, 1, "the iteration state")))
    return st;
  EM_GPU_CHECK(OP, cudaMemcpyAsync(r->off, job->offsets, (size_t)(n + 1) * sizeof(int64_t), cudaMemcpyHostToDevice, s));
  if (m > 0)
    EM_GPU_CHECK(OP, cudaMemcpyAsync(r->src, job->sources, (size_t)m * sizeof(uint32_t), cudaMemcpyHostToDevice, s));
  EM_GPU_CHECK(OP, cudaMemcpyAsync(r->out_degree, job->out_degree, (size_t)n * sizeof(uint32_t),
                                   cudaMemcpyHostToDevice, s));
  if (job->teleport)
    EM_GPU_CHECK(OP, cudaMemcpyAsync(r->tele, job->teleport, (size_t)n * sizeof(float), cudaMemcpyHostToDevice, s));

  /* the CPU's start: x = 1/n, and the dangling mass of that (a sum of equal floats: exact) */
  const float x0 = (float)(1.0 / (double)n);
  int64_t dangling_vertices = 0;
  for (int64_t v = 0; v < n; v++) dangling_vertices += job->out_degree[v] == 0;
  double dangling = (double)dangling_vertices * (double)x0;
  pr_state first = {1.0, 0, 0, 0, 0};
  first.coef = job->method == EM_PAGERANK_GAPBS ? 1 - job->damping : (1 - job->damping) + job->damping * dangling;
  EM_GPU_CHECK(OP, cudaMemcpyAsync(r->st, &first, sizeof first, cudaMemcpyHostToDevice, s));
  pr_init<<<em_gpu_blocks(n, r->device), EM_GPU_THREADS, 0, s>>>(n, r->out_degree, r->inv, r->x[0], r->contrib[0], x0);
  if ((st = launched())) return st;
  em_gpu_free_ptr(r->out_degree);   /* stream-ordered: reused only by work queued after pr_init */
  r->mem.held -= (size_t)n * sizeof(uint32_t);
  r->out_degree = NULL;

  if (r->engine == PR_CUSTOM) return pr_plan_upload(&r->mem, &r->plan, &r->dplan, s);

  /* cuSPARSE: y = A c with A[v][u] = 1 for each arc u -> v (the in-arc CSR as it is) */
  bool narrow = n <= INT32_MAX && m <= INT32_MAX;
  if ((st = device_alloc(r, &r->gathered, n, "the SpMV output")) || (st = device_alloc(r, &r->ones, m, "the matrix values")))
    return st;
  pr_fill_ones<<<em_gpu_blocks(m, r->device), EM_GPU_THREADS, 0, s>>>(m, r->ones);
  if ((st = launched())) return st;
  if (narrow) {
    if ((st = device_alloc(r, &r->off32, n + 1, "32-bit offsets"))) return st;
    pr_narrow<<<em_gpu_blocks(n + 1, r->device), EM_GPU_THREADS, 0, s>>>(n + 1, r->off, r->off32);
  } else {
    if ((st = device_alloc(r, &r->src64, m, "64-bit sources"))) return st;
    pr_widen<<<em_gpu_blocks(m, r->device), EM_GPU_THREADS, 0, s>>>(m, r->src, r->src64);
  }
  if ((st = launched())) return st;
  r->sp = (cusparseHandle_t)em_gpu_cusparse(r->device);
  if (!r->sp) return em_last_status() ? em_last_status() : em_set_error(EM_ERR_RUNTIME, "%s: no cuSPARSE handle", OP);
  PR_SPARSE("cusparseSetPointerMode", cusparseSetPointerMode(r->sp, CUSPARSE_POINTER_MODE_HOST));
  PR_SPARSE("cusparseCreateConstCsr",
            cusparseCreateConstCsr(&r->sp_mat, n, n, m, narrow ? (const void *)r->off32 : (const void *)r->off,
                                   narrow ? (const void *)r->src : (const void *)r->src64, r->ones,
                                   narrow ? CUSPARSE_INDEX_32I : CUSPARSE_INDEX_64I,
                                   narrow ? CUSPARSE_INDEX_32I : CUSPARSE_INDEX_64I, CUSPARSE_INDEX_BASE_ZERO,
                                   CUDA_R_32F));
  for (int i = 0; i < 2; i++)
    PR_SPARSE("cusparseCreateConstDnVec", cusparseCreateConstDnVec(&r->sp_x[i], n, r->contrib[i], CUDA_R_32F));
  PR_SPARSE("cusparseCreateDnVec", cusparseCreateDnVec(&r->sp_y, n, r->gathered, CUDA_R_32F));
  const float one = 1.0f, zero = 0.0f;
  size_t bytes = 0;
  PR_SPARSE("cusparseSpMV_bufferSize",
            cusparseSpMV_bufferSize(r->sp, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, r->sp_mat, r->sp_x[0], &zero,
                                    r->sp_y, CUDA_R_32F, CUSPARSE_SPMV_CSR_ALG2, &bytes));
  r->mem.need += bytes;
  char *workspace;
  if ((st = device_alloc(r, &workspace, (int64_t)bytes, "the cuSPARSE workspace"))) return st;
  r->sp_buffer = workspace;
  PR_SPARSE("cusparseSpMV_preprocess",
            cusparseSpMV_preprocess(r->sp, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, r->sp_mat, r->sp_x[0], &zero,
                                    r->sp_y, CUDA_R_32F, CUSPARSE_SPMV_CSR_ALG2, r->sp_buffer));
  return EM_OK;
}

/* Queues iteration i. */
static em_status iterate_once(pr_run *r, const em_cuda_pagerank_job *job, int i) {
  const int64_t n = job->n;
  const int cur = i & 1;
  cudaStream_t s = r->stream;
  em_status st;
  if (r->engine == PR_CUSTOM) {
    if ((st = pr_chunks_queue(r->st, &r->plan, &r->dplan, r->src, r->contrib[cur], s))) return st;
  } else {
    /* no early exit here once converged: the product lands in scratch that nothing reads */
    const float one = 1.0f, zero = 0.0f;
    PR_SPARSE("cusparseSpMV", cusparseSpMV(r->sp, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, r->sp_mat, r->sp_x[cur],
                                           &zero, r->sp_y, CUDA_R_32F, CUSPARSE_SPMV_CSR_ALG2, r->sp_buffer));
  }
  pr_update_args a =
      pr_update_base(n, (double)n, r->off, r->src, r->x, r->contrib, cur, r->inv, &r->dplan, job->damping);
  a.tele = r->tele;
  a.gathered = r->engine == PR_CUSPARSE ? r->gathered : NULL;
  a.st = r->st;
  a.partial = r->partial;
  const int64_t blocks = update_blocks(n);
  pr_update<<<(unsigned)blocks, PR_THREADS, 0, s>>>(a);
  if ((st = launched())) return st;
  pr_finish<<<1, PR_FINISH_THREADS, 0, s>>>(r->st, r->partial, blocks, r->residuals, i, job->damping, job->tol,
                                            job->method == EM_PAGERANK_GAPBS);
  return launched();
}

static em_status run(pr_run *r, em_cuda_pagerank_job *job, double t0) {
  em_status st = setup(r, job);
  if (st) return st;
  EM_GPU_CHECK(OP, cudaStreamSynchronize(r->stream));   /* setup time apart from the iterations */
  double t1 = em_clock_monotonic();
  pr_state state = {1.0, 0, 0, 0, 0};
  for (int i = 0; i < job->max_iter; i++) {
    if ((st = iterate_once(r, job, i))) return st;
    if ((i + 1) % PR_CHECK_EVERY == 0 || i + 1 == job->max_iter) {
      EM_GPU_CHECK(OP, cudaMemcpyAsync(&state, r->st, sizeof state, cudaMemcpyDeviceToHost, r->stream));
      EM_GPU_CHECK(OP, cudaStreamSynchronize(r->stream));
      if (state.done) break;
    }
  }
  double t2 = em_clock_monotonic();
  const int iters = state.iterations;
  if (iters < 1 || iters > job->max_iter)
    return em_set_error(EM_ERR_RUNTIME, "%s: the GPU reports %d iterations after a run of at most %d", OP, iters,
                        job->max_iter);
  /* iteration i writes x[(i & 1) ^ 1]: the last one left the scores in x[iters & 1] */
  float *scores = r->x[iters & 1], *scaled = r->x[(iters & 1) ^ 1];
  pr_scale_out<<<em_gpu_blocks(job->n, r->device), EM_GPU_THREADS, 0, r->stream>>>(job->n, scores, r->st, scaled);
  if ((st = launched())) return st;
  EM_GPU_CHECK(OP, cudaMemcpyAsync(job->scores, scaled, (size_t)job->n * sizeof(float), cudaMemcpyDeviceToHost,
                                   r->stream));
  if (job->residuals)
    EM_GPU_CHECK(OP, cudaMemcpyAsync(job->residuals, r->residuals, (size_t)iters * sizeof(double),
                                     cudaMemcpyDeviceToHost, r->stream));
  EM_GPU_CHECK(OP, cudaStreamSynchronize(r->stream));
  if (job->stats) {
    em_pagerank_stats *s = job->stats;
    s->iterations = iters;
    s->converged = state.done;
    s->residual = state.residual;
    s->seconds = t2 - t1;
    s->setup_seconds = t1 - t0;
    s->edges_per_second = t2 > t1 ? (double)job->m * iters / (t2 - t1) : 0;
    s->method = job->method == EM_PAGERANK_GAPBS ? EM_PAGERANK_GAPBS : EM_PAGERANK_JACOBI;
    s->engine = r->engine == PR_CUSPARSE ? "cuda:cusparse" : "cuda:custom";
  }
  return EM_OK;
}

}  // namespace

extern "C" em_status em_gpu_pagerank(em_cuda_pagerank_job *job) {
  if (!job || !job->offsets || (!job->sources && job->m > 0) || !job->out_degree || !job->scores)
    return em_set_error(EM_ERR_ARGUMENT, "%s: incomplete GPU job (a NULL array)", OP);
  if (job->n < 1 || job->m < 0 || job->max_iter < 1)
    return em_set_error(EM_ERR_ARGUMENT, "%s: GPU job of %lld vertices, %lld arcs, max_iter %d", OP,
                        (long long)job->n, (long long)job->m, job->max_iter);
  if (job->n > (int64_t)UINT32_MAX)
    return em_set_error(EM_ERR_ARGUMENT, "%s: %lld vertices, more than 32-bit ids hold", OP, (long long)job->n);
  double t0 = em_clock_monotonic();
  pr_run r;
  memset(&r, 0, sizeof r);
  r.device = r.mem.device = job->device;
  r.mem.op = OP;
  em_status st = engine_from_env(&r.engine);
  if (st) return st;
  if (r.engine == PR_CUSPARSE && job->m == 0) r.engine = PR_CUSTOM;   /* nothing to multiply */
  if ((st = em_gpu_enter(OP, job->device, &r.stream))) return st;
  st = run(&r, job, t0);
  if (st) {
    /* the queue may still be using what release() hands back: drain it (error path only) */
    cudaStreamSynchronize(r.stream);
  }
  release(&r);
  return st;
}
