/* pagerank_part.cu - one rank's share of PageRank over a partitioned graph, on its GPU
 * (EM_CUDA_EXTRA_PART_PAGERANK; cuda_plugin.h says what each step does, and
 * runtime/graph/pagerank_dist_cuda.c drives the steps and the exchange between them).
 *
 * A sweep is pagerank.cu's two kernels over the rank's own vertices, their in-arc lists
 * naming places in one contributions array (own vertices and mirrors), then a pack of the
 * values other ranks mirror into the send buffer. The update kernel writes each vertex's
 * contribution to its place (own[]) and reduces the iteration's three sums into exact
 * fixed-point totals, so their value is the same whatever the number of blocks, and,
 * summed over the ranks by libember, whatever the number of ranks. Each vertex's gather
 * follows an order fixed by its own list (the plan's chunks and warp trees), and a vertex
 * has the same list at any rank count: the scores are the same bits at every rank count.
 *
 * Device memory: pagerank.cu's figures for the rank's vertices and arcs, plus 8 bytes per
 * mirror (two contribution arrays) and 4 per value sent or received (its places). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels.cuh"
#include "pagerank_kernels.cuh"

#define OP "graph part pagerank"

namespace {

__global__ void part_init(int64_t nl, const uint32_t *__restrict__ own, const float *__restrict__ inv,
                          float *__restrict__ x, float *__restrict__ contrib, float x0) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nl; i += (int64_t)gridDim.x * blockDim.x) {
    x[i] = x0;
    contrib[own[i]] = x0 * inv[i];
  }
}

/* out[j] = in[at[j]] (pack) or, with scatter, out[at[j]] = in[j] (unpack). */
__global__ void part_move(int64_t count, const uint32_t *__restrict__ at, const float *__restrict__ in,
                          float *__restrict__ out, int scatter) {
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < count; j += (int64_t)gridDim.x * blockDim.x) {
    if (scatter) out[at[j]] = in[j];
    else out[j] = in[at[j]];
  }
}

__global__ void part_scale_out(int64_t nl, const float *__restrict__ x, double scale, float *__restrict__ out) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nl; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = (float)(scale * (double)x[i]);
}

struct part_run {
  em_cuda_part_pagerank_job job; /* the host arrays in it are not kept past open */
  pr_memory mem;
  pr_plan plan;
  pr_plan_device dplan;
  int cur; /* the sweep reads x[cur], contrib[cur] and writes the other pair */
  int64_t *off;
  uint32_t *src, *own, *send, *mirror;
  float *inv, *x[2], *contrib[2];
};

em_status enter(const part_run *r, cudaStream_t *s) { return em_gpu_enter(OP, r->job.device, s); }

em_status launched(void) { return em_gpu_launch_check(OP); }

unsigned blocks_for(int64_t count, int device) { return em_gpu_blocks(count > 0 ? count : 1, device); }

/* out[j] = in[at[j]] for j < count, or out[at[j]] = in[j] with scatter. */
em_status move(const part_run *r, cudaStream_t s, int64_t count, const uint32_t *at, const float *in, float *out,
               int scatter) {
  if (count == 0) return EM_OK;
  part_move<<<blocks_for(count, r->job.device), EM_GPU_THREADS, 0, s>>>(count, at, in, out, scatter);
  return launched();
}

template <typename T>
em_status upload(pr_memory *m, T **out, const T *host, int64_t count, const char *what, cudaStream_t s) {
  em_status st = pr_alloc(m, out, count, what);
  if (st || count == 0) return st;
  EM_GPU_CHECK(OP, cudaMemcpyAsync(*out, host, (size_t)count * sizeof(T), cudaMemcpyHostToDevice, s));
  return EM_OK;
}

void close_run(void *run) {
  part_run *r = (part_run *)run;
  if (!r) return;
  cudaStream_t s;
  if (!enter(r, &s)) cudaStreamSynchronize(s); /* nothing queued may still read what is freed */
  void *ptrs[] = {r->off, r->src, r->own, r->send, r->mirror, r->inv, r->x[0], r->x[1], r->contrib[0], r->contrib[1]};
  for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++)
    if (ptrs[i]) em_gpu_free_ptr(ptrs[i]);
  pr_plan_device_free(&r->dplan);
  pr_plan_free(&r->plan);
  free(r);
}

em_status setup(part_run *r, cudaStream_t s) {
  const em_cuda_part_pagerank_job *j = &r->job;
  pr_memory *m = &r->mem;
  em_status st = pr_plan_build(&r->plan, j->nl, j->offsets);
  if (st) return st;
  m->need = 8 * (size_t)(j->nl + 1) + 4 * (size_t)j->ml + 16 * (size_t)j->nl + 8 * (size_t)j->nslots +
            4 * (size_t)(j->nsend + j->nmirror) + pr_plan_device_bytes(&r->plan);
  if ((st = upload(m, &r->off, j->offsets, j->nl + 1, "the offsets", s)) ||
      (st = upload(m, &r->src, j->sources, j->ml, "the sources", s)) ||
      (st = upload(m, &r->own, j->own, j->nl, "the own vertices' places", s)) ||
      (st = upload(m, &r->inv, j->inv, j->nl, "the inverse out-degrees", s)) ||
      (st = upload(m, &r->send, j->send, j->nsend, "the places sent", s)) ||
      (st = upload(m, &r->mirror, j->mirror, j->nmirror, "the mirrors' places", s)) ||
      (st = pr_alloc(m, &r->x[0], j->nl, "the scores")) || (st = pr_alloc(m, &r->x[1], j->nl, "the scores")) ||
      (st = pr_alloc(m, &r->contrib[0], j->nslots, "the contributions")) ||
      (st = pr_alloc(m, &r->contrib[1], j->nslots, "the contributions")) ||
      (st = pr_plan_upload(m, &r->plan, &r->dplan, s)))
    return st;
  /* the CPU's start (pagerank_dist.c): every score 1/n, into the pair the first receive hands over */
  r->cur = 0;
  const float x0 = (float)(1.0 / (double)j->n);
  if (j->nl > 0) {
    part_init<<<blocks_for(j->nl, j->device), EM_GPU_THREADS, 0, s>>>(j->nl, r->own, r->inv, r->x[1], r->contrib[1],
                                                                      x0);
    if ((st = launched())) return st;
  }
  return move(r, s, j->nsend, r->send, r->contrib[1], j->send_buf, 0);
}

em_status open_run(const em_cuda_part_pagerank_job *job, void **run) {
  *run = NULL;
  if (!job || (!job->offsets) || (job->ml > 0 && !job->sources) || (job->nl > 0 && (!job->own || !job->inv)) ||
      (job->nsend > 0 && (!job->send || !job->send_buf)) || (job->nmirror > 0 && (!job->mirror || !job->recv_buf)) ||
      !job->sums)
    return em_set_error(EM_ERR_ARGUMENT, "%s: incomplete GPU job (a NULL array)", OP);
  if (job->n < 1 || job->nl < 0 || job->ml < 0 || job->nslots < job->nl + job->nmirror || job->nsend < 0 ||
      job->nmirror < 0)
    return em_set_error(EM_ERR_ARGUMENT, "%s: GPU job of %lld vertices (%lld own, %lld places), %lld arcs", OP,
                        (long long)job->n, (long long)job->nl, (long long)job->nslots, (long long)job->ml);
  part_run *r = (part_run *)calloc(1, sizeof *r);
  if (!r) return em_set_error(EM_ERR_MEMORY, "%s: out of host memory", OP);
  r->job = *job;
  r->mem.op = OP;
  r->mem.device = job->device;
  cudaStream_t s;
  em_status st = enter(r, &s);
  if (!st) st = setup(r, s);
  /* the host arrays are the caller's: nothing past open reads them */
  r->job.offsets = NULL;
  r->job.sources = r->job.own = r->job.send = r->job.mirror = NULL;
  r->job.inv = NULL;
  if (st) {
    close_run(r);
    return st;
  }
  *run = r;
  return EM_OK;
}

em_status sweep(void *run, double scale, double coef) {
  part_run *r = (part_run *)run;
  const em_cuda_part_pagerank_job *j = &r->job;
  cudaStream_t s;
  em_status st = enter(r, &s);
  if (st) return st;
  const int cur = r->cur;
  EM_GPU_CHECK(OP, cudaMemsetAsync(j->sums, 0, 3 * sizeof(int64_t), s));
  if ((st = pr_chunks_queue(NULL, &r->plan, &r->dplan, r->src, r->contrib[cur], s))) return st;
  if (j->nl > 0) {
    pr_update_args a =
        pr_update_base(j->nl, (double)j->n, r->off, r->src, r->x, r->contrib, cur, r->inv, &r->dplan, j->damping);
    a.own = r->own;
    a.scale = scale;
    a.coef = coef;
    a.fixed = (unsigned long long *)j->sums;
    pr_update<<<(unsigned)((j->nl + PR_THREADS - 1) / PR_THREADS), PR_THREADS, 0, s>>>(a);
    if ((st = launched())) return st;
  }
  return move(r, s, j->nsend, r->send, r->contrib[cur ^ 1], j->send_buf, 0);
}

em_status receive(void *run) {
  part_run *r = (part_run *)run;
  cudaStream_t s;
  em_status st = enter(r, &s);
  if (st) return st;
  if ((st = move(r, s, r->job.nmirror, r->mirror, r->job.recv_buf, r->contrib[r->cur ^ 1], 1))) return st;
  r->cur ^= 1;
  return EM_OK;
}

em_status scores(void *run, double scale, float *out) {
  part_run *r = (part_run *)run;
  const int64_t nl = r->job.nl;
  cudaStream_t s;
  em_status st = enter(r, &s);
  if (st || nl == 0) return st;
  float *scaled = r->x[r->cur ^ 1]; /* free: the next sweep would write it */
  part_scale_out<<<blocks_for(nl, r->job.device), EM_GPU_THREADS, 0, s>>>(nl, r->x[r->cur], scale, scaled);
  if ((st = launched())) return st;
  EM_GPU_CHECK(OP, cudaMemcpyAsync(out, scaled, (size_t)nl * sizeof(float), cudaMemcpyDeviceToHost, s));
  EM_GPU_CHECK(OP, cudaStreamSynchronize(s));
  return EM_OK;
}

const em_cuda_part_pagerank_ops ops = {open_run, sweep, receive, scores, close_run};

}  // namespace

extern "C" const em_cuda_part_pagerank_ops *em_gpu_part_pagerank(void) { return &ops; }
