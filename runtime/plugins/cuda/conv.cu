/* conv.cu - 2-d convolution on the GPU through cuDNN: forward, and the input, weight and
 * bias gradients of the backward (the CPU reference is runtime/cpu/nn_conv.c).
 *
 * API: cuDNN's convolution functions (cudnnConvolutionForward / BackwardData /
 * BackwardFilter with tensor, filter and convolution descriptors). In cuDNN 9 they live
 * in libcudnn_cnn and are marked deprecated in favour of the graph API, but they are
 * present, supported through 9.x and exported by libcudnn.so; they cover groups, stride,
 * padding and dilation in one descriptor, pick among cuDNN's engines with their own
 * heuristics, and need a fraction of the code (and of the ways to get it wrong) of
 * assembling backend descriptors, engine configs and execution plans by hand.
 *
 * Algorithms are chosen once per (device, dtype, direction, shape, parameters) and kept in
 * a small table: by cuDNN's heuristics (cudnnGet*_v7: no benchmarking, no device memory,
 * no synchronisation), or, with EMBER_CUDNN_BENCHMARK=1, by timing them
 * (cudnnFind*AlgorithmEx: faster kernels, but the first call of each shape synchronises
 * and allocates). Only deterministic algorithms are taken (cuDNN reports which; some
 * weight-gradient algorithms add with atomics) unless cuDNN offers none for a shape.
 * float32 runs with CUDNN_FMA_MATH (no TF32: results match the CPU to float32 rounding)
 * unless EMBER_CUDA_TF32=1; float16/bfloat16 use tensor cores with float accumulation;
 * float64 computes in float64. Workspaces come from the caching allocator per call; when
 * the chosen algorithm's workspace cannot be had, or cuDNN refuses it at run time, the
 * best acceptable algorithm that needs no workspace runs instead.
 *
 * Batches whose tensors would exceed cuDNN's 32-bit element counts run in chunks of
 * images (the weight gradient accumulates over chunks with beta = 1, in order). The bias
 * is added by a kernel after the convolution; its gradient is a deterministic per-channel
 * sum (norm.cu's em_gpu_channel_sums). */
#include <cudnn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dnn_check.cuh"
#include "kernels.cuh"
#include "nn_gpu.h"

namespace {

enum direction { FORWARD, BACKWARD_DATA, BACKWARD_FILTER };
const char *const direction_names[] = {"forward", "backward data", "backward filter"};

/* ---- environment switches, read once */

int benchmark_mode;
pthread_once_t env_once = PTHREAD_ONCE_INIT;
void read_env(void) {
  const char *v = getenv("EMBER_CUDNN_BENCHMARK");
  benchmark_mode = v && strcmp(v, "1") == 0;
}
bool benchmark_enabled(void) {
  pthread_once(&env_once, read_env);
  return benchmark_mode != 0;
}

/* ---- one convolution as cuDNN sees it: a chunk of n images */

struct conv_shape {
  int64_t n, c, h, w, co, kh, kw, oh, ow;
  int stride[2], pad[2], dilation[2], groups;
};

struct conv_descs {
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
};

void destroy_descs(conv_descs *d) {
  if (d->x) cudnnDestroyTensorDescriptor(d->x);
  if (d->y) cudnnDestroyTensorDescriptor(d->y);
  if (d->w) cudnnDestroyFilterDescriptor(d->w);
  if (d->conv) cudnnDestroyConvolutionDescriptor(d->conv);
  memset(d, 0, sizeof *d);
}

cudnnDataType_t data_type(em_dtype dtype) {
  switch (dtype) {
    case EM_FLOAT64: return CUDNN_DATA_DOUBLE;
    case EM_FLOAT16: return CUDNN_DATA_HALF;
    case EM_BFLOAT16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
  }
}

/* float32 without TF32 is held to FMA kernels (CUDNN_DEFAULT_MATH would allow TF32 on
 * Ampere and later). */
bool strict_float(em_dtype dtype) { return dtype == EM_FLOAT32 && !em_gpu_tf32_enabled(); }

cudnnMathType_t base_math(em_dtype dtype) {
  if (strict_float(dtype)) return CUDNN_FMA_MATH;
  if (dtype == EM_FLOAT16 || dtype == EM_BFLOAT16) return CUDNN_TENSOR_OP_MATH;
  return CUDNN_DEFAULT_MATH;
}

em_status make_descs(const char *op, const conv_shape &s, em_dtype dtype, conv_descs *d) {
  memset(d, 0, sizeof *d);
  cudnnDataType_t dt = data_type(dtype);
  cudnnDataType_t compute = dtype == EM_FLOAT64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  em_status st = EM_OK;
  cudnnStatus_t e;
  const char *call = "";
#define TRY(c)                                    \
  if (!st && (e = (c)) != CUDNN_STATUS_SUCCESS) { \
    call = #c;                                    \
    st = em_gpu_dnn_error(op, call, e);           \
  }
  TRY(cudnnCreateTensorDescriptor(&d->x));
  TRY(cudnnCreateTensorDescriptor(&d->y));
  TRY(cudnnCreateFilterDescriptor(&d->w));
  TRY(cudnnCreateConvolutionDescriptor(&d->conv));
  TRY(cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NCHW, dt, (int)s.n, (int)s.c, (int)s.h, (int)s.w));
  TRY(cudnnSetTensor4dDescriptor(d->y, CUDNN_TENSOR_NCHW, dt, (int)s.n, (int)s.co, (int)s.oh, (int)s.ow));
  TRY(cudnnSetFilter4dDescriptor(d->w, dt, CUDNN_TENSOR_NCHW, (int)s.co, (int)(s.c / s.groups), (int)s.kh,
                                 (int)s.kw));
  TRY(cudnnSetConvolution2dDescriptor(d->conv, s.pad[0], s.pad[1], s.stride[0], s.stride[1], s.dilation[0],
                                      s.dilation[1], CUDNN_CROSS_CORRELATION, compute));
  TRY(cudnnSetConvolutionGroupCount(d->conv, s.groups));
  TRY(cudnnSetConvolutionMathType(d->conv, base_math(dtype)));
#undef TRY
  if (!st) { /* cuDNN must agree on the output size (runtime/nn computed it) */
    int n, c, h, w;
    e = cudnnGetConvolution2dForwardOutputDim(d->conv, d->x, d->w, &n, &c, &h, &w);
    if (e != CUDNN_STATUS_SUCCESS) st = em_gpu_dnn_error(op, "cudnnGetConvolution2dForwardOutputDim", e);
    else if (n != s.n || c != s.co || h != s.oh || w != s.ow)
      st = em_set_error(EM_ERR_RUNTIME, "%s: cuDNN computes an output of [%d, %d, %d, %d], expected [%lld, %lld, %lld, %lld]",
                        op, n, c, h, w, (long long)s.n, (long long)s.co, (long long)s.oh, (long long)s.ow);
  }
  if (st) destroy_descs(d);
  return st;
}

/* ---- algorithms: what cuDNN reports, in one form for the three directions */

#define MAX_ALGOS 8 /* >= CUDNN_CONVOLUTION_{FWD,BWD_DATA,BWD_FILTER}_ALGO_COUNT */
static_assert(CUDNN_CONVOLUTION_FWD_ALGO_COUNT <= MAX_ALGOS && CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT <= MAX_ALGOS &&
                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT <= MAX_ALGOS,
              "MAX_ALGOS");

struct algo_perf {
  int algo;
  cudnnStatus_t status;
  bool deterministic;
  cudnnMathType_t math;
};

template <typename P> void convert(const P *in, int n, algo_perf *out) {
  for (int i = 0; i < n; i++) {
    out[i].algo = (int)in[i].algo;
    out[i].status = in[i].status;
    out[i].deterministic = in[i].determinism == CUDNN_DETERMINISTIC;
    out[i].math = in[i].mathType;
  }
}

/* cuDNN's heuristic ranking (best first). */
em_status rank_algos(const char *op, direction dir, cudnnHandle_t h, const conv_descs &d, algo_perf *out, int *n) {
  *n = 0;
  if (dir == FORWARD) {
    cudnnConvolutionFwdAlgoPerf_t p[MAX_ALGOS];
    EM_DNN_CHECK(
        op, cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, n, p));
    convert(p, *n, out);
  } else if (dir == BACKWARD_DATA) {
    cudnnConvolutionBwdDataAlgoPerf_t p[MAX_ALGOS];
    EM_DNN_CHECK(op, cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x,
                                                                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, n, p));
    convert(p, *n, out);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t p[MAX_ALGOS];
    EM_DNN_CHECK(op, cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w,
                                                                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, n, p));
    convert(p, *n, out);
  }
  if (*n > MAX_ALGOS) *n = MAX_ALGOS;
  return EM_OK;
}

/* The device buffers of one chunk: forward reads x, w and writes y; backward data reads
 * w, dy and writes dx; backward filter reads x, dy and writes dw. */
struct conv_ptrs {
  const void *x, *w, *dy;
  void *y, *dx, *dw;
};

/* cuDNN's timing of every algorithm (fastest first), on the real buffers. Writes the
 * direction's output. */
em_status time_algos(const char *op, direction dir, cudnnHandle_t h, const conv_descs &d, const conv_ptrs &b,
                     void *ws, size_t ws_size, algo_perf *out, int *n) {
  *n = 0;
  if (dir == FORWARD) {
    cudnnConvolutionFwdAlgoPerf_t p[MAX_ALGOS];
    EM_DNN_CHECK(op, cudnnFindConvolutionForwardAlgorithmEx(h, d.x, b.x, d.w, b.w, d.conv, d.y, b.y,
                                                            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, n, p, ws, ws_size));
    convert(p, *n, out);
  } else if (dir == BACKWARD_DATA) {
    cudnnConvolutionBwdDataAlgoPerf_t p[MAX_ALGOS];
    EM_DNN_CHECK(op, cudnnFindConvolutionBackwardDataAlgorithmEx(h, d.w, b.w, d.y, b.dy, d.conv, d.x, b.dx,
                                                                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, n, p, ws,
                                                                 ws_size));
    convert(p, *n, out);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t p[MAX_ALGOS];
    EM_DNN_CHECK(op, cudnnFindConvolutionBackwardFilterAlgorithmEx(h, d.x, b.x, d.y, b.dy, d.conv, d.w, b.dw,
                                                                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, n, p, ws,
                                                                   ws_size));
    convert(p, *n, out);
  }
  if (*n > MAX_ALGOS) *n = MAX_ALGOS;
  return EM_OK;
}

/* The workspace algo needs with the descriptor's current math type; not SUCCESS when
 * the pair cannot run. */
cudnnStatus_t workspace_bytes(direction dir, cudnnHandle_t h, const conv_descs &d, int algo, size_t *bytes) {
  *bytes = 0;
  if (dir == FORWARD)
    return cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, (cudnnConvolutionFwdAlgo_t)algo, bytes);
  if (dir == BACKWARD_DATA)
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.conv, d.x, (cudnnConvolutionBwdDataAlgo_t)algo,
                                                        bytes);
  return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv, d.w,
                                                        (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
}

/* ---- the algorithm table */

struct algo_choice {
  int algo;
  cudnnMathType_t math;
  size_t workspace;
  bool has_fallback; /* an algorithm that needs no workspace, for when memory is short */
  int fallback_algo;
  cudnnMathType_t fallback_math;
};

struct conv_key { /* compared with memcmp: always built from a zeroed struct */
  int device, dtype, dir, tf32, benchmark;
  int stride[2], pad[2], dilation[2], groups;
  int64_t n, c, h, w, co, kh, kw;
};

#define CACHE_SIZE 256
struct cache_entry {
  bool used;
  conv_key key;
  algo_choice choice;
};
cache_entry cache[CACHE_SIZE];
int cache_next; /* round-robin replacement once full */
pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

conv_key key_of(int device, em_dtype dtype, direction dir, const conv_shape &s) {
  conv_key k;
  memset(&k, 0, sizeof k);
  k.device = device, k.dtype = (int)dtype, k.dir = (int)dir;
  k.tf32 = em_gpu_tf32_enabled(), k.benchmark = benchmark_enabled();
  for (int i = 0; i < 2; i++) k.stride[i] = s.stride[i], k.pad[i] = s.pad[i], k.dilation[i] = s.dilation[i];
  k.groups = s.groups;
  k.n = s.n, k.c = s.c, k.h = s.h, k.w = s.w, k.co = s.co, k.kh = s.kh, k.kw = s.kw;
  return k;
}

bool cache_find(const conv_key &k, algo_choice *out) {
  bool found = false;
  pthread_mutex_lock(&cache_lock);
  for (int i = 0; i < CACHE_SIZE && !found; i++)
    if (cache[i].used && memcmp(&cache[i].key, &k, sizeof k) == 0) *out = cache[i].choice, found = true;
  pthread_mutex_unlock(&cache_lock);
  return found;
}

void cache_add(const conv_key &k, const algo_choice &c) {
  pthread_mutex_lock(&cache_lock);
  bool present = false;
  for (int i = 0; i < CACHE_SIZE && !present; i++) present = cache[i].used && memcmp(&cache[i].key, &k, sizeof k) == 0;
  if (!present) {
    cache_entry &e = cache[cache_next];
    e.used = true, e.key = k, e.choice = c;
    cache_next = (cache_next + 1) % CACHE_SIZE;
  }
  pthread_mutex_unlock(&cache_lock);
}

/* The first acceptable algorithm of a ranking: it ran (or may run), it is deterministic
 * when deterministic_only, it does not use TF32 tensor cores where float32 must stay
 * exact, and cuDNN can size its workspace with the math type it will get. Also notes the
 * first acceptable one that needs no workspace. */
bool pick(direction dir, cudnnHandle_t h, const conv_descs &d, em_dtype dtype, const algo_perf *perf, int n,
          bool deterministic_only, algo_choice *out) {
  bool found = false;
  out->has_fallback = false;
  for (int i = 0; i < n && !(found && (out->workspace == 0 || out->has_fallback)); i++) {
    const algo_perf &p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS || (deterministic_only && !p.deterministic)) continue;
    bool tensor_op = p.math == CUDNN_TENSOR_OP_MATH || p.math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    if (strict_float(dtype) && tensor_op) continue;
    cudnnMathType_t math = strict_float(dtype) ? CUDNN_FMA_MATH : p.math;
    size_t bytes;
    if (cudnnSetConvolutionMathType(d.conv, math) != CUDNN_STATUS_SUCCESS ||
        workspace_bytes(dir, h, d, p.algo, &bytes) != CUDNN_STATUS_SUCCESS)
      continue;
    if (!found) {
      out->algo = p.algo, out->math = math, out->workspace = bytes;
      found = true;
    }
    if (bytes == 0 && !out->has_fallback) {
      out->has_fallback = true;
      out->fallback_algo = p.algo, out->fallback_math = math;
    }
  }
  return found;
}

/* The largest workspace among the algorithms cuDNN ranks, capped: what benchmarking
 * offers them. */
size_t largest_workspace(direction dir, cudnnHandle_t h, const conv_descs &d, em_dtype dtype, const algo_perf *perf,
                         int n) {
  size_t most = 0;
  for (int i = 0; i < n; i++) {
    size_t bytes;
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (cudnnSetConvolutionMathType(d.conv, strict_float(dtype) ? CUDNN_FMA_MATH : perf[i].math) !=
            CUDNN_STATUS_SUCCESS ||
        workspace_bytes(dir, h, d, perf[i].algo, &bytes) != CUDNN_STATUS_SUCCESS)
      continue;
    if (bytes > most) most = bytes;
  }
  const size_t cap = (size_t)1 << 30;
  return most < cap ? most : cap;
}

em_status choose(const char *op, direction dir, cudnnHandle_t h, const conv_descs &d, em_dtype dtype,
                 const conv_shape &s, const conv_ptrs &b, int device, algo_choice *out) {
  conv_key key = key_of(device, dtype, dir, s);
  if (cache_find(key, out)) return EM_OK;
  algo_perf perf[MAX_ALGOS];
  int n = 0;
  em_status st = rank_algos(op, dir, h, d, perf, &n);
  if (st) return st;
  if (benchmark_enabled()) {
    size_t size = largest_workspace(dir, h, d, dtype, perf, n);
    void *ws = NULL;
    while (size > 0 && !(ws = em_gpu_malloc(size, device))) size /= 2; /* take what memory allows */
    em_clear_error();
    /* benchmarking writes the direction's output: the weight gradient of chunked batches
     * accumulates over chunks, so it is timed on a scratch buffer */
    conv_ptrs bufs = b;
    void *scratch = NULL;
    if (dir == BACKWARD_FILTER) {
      size_t wbytes = (size_t)(s.co * (s.c / s.groups) * s.kh * s.kw) * em_dtype_size(dtype);
      if (!(scratch = em_gpu_malloc(wbytes, device))) {
        if (ws) em_gpu_free_ptr(ws);
        return em_last_status();
      }
      bufs.dw = scratch;
    }
    cudnnSetConvolutionMathType(d.conv, base_math(dtype));
    algo_perf timed[MAX_ALGOS];
    int nt = 0;
    st = time_algos(op, dir, h, d, bufs, ws, size, timed, &nt);
    if (ws) em_gpu_free_ptr(ws);
    if (scratch) em_gpu_free_ptr(scratch);
    if (st) return st;
    if (nt > 0) {
      memcpy(perf, timed, sizeof(algo_perf) * (size_t)nt);
      n = nt;
    }
  }
  if (!pick(dir, h, d, dtype, perf, n, true, out) && !pick(dir, h, d, dtype, perf, n, false, out))
    return em_set_error(EM_ERR_UNSUPPORTED,
                        "%s: cuDNN offers no %s algorithm for input [%lld, %lld, %lld, %lld], weight [%lld, %lld, %lld, "
                        "%lld], stride (%d, %d), padding (%d, %d), dilation (%d, %d), groups %d, dtype %s",
                        op, direction_names[dir], (long long)s.n, (long long)s.c, (long long)s.h, (long long)s.w,
                        (long long)s.co, (long long)(s.c / s.groups), (long long)s.kh, (long long)s.kw, s.stride[0],
                        s.stride[1], s.pad[0], s.pad[1], s.dilation[0], s.dilation[1], s.groups,
                        em_dtype_name(dtype));
  cache_add(key, *out);
  return EM_OK;
}

/* ---- running one direction on one chunk */

/* One cuDNN call of dir with algo and math type. */
cudnnStatus_t execute(direction dir, cudnnHandle_t h, const conv_descs &d, int algo, cudnnMathType_t math,
                      const conv_ptrs &b, const void *alpha, const void *beta, void *ws, size_t ws_size,
                      const char **call) {
  *call = "cudnnSetConvolutionMathType";
  cudnnStatus_t e = cudnnSetConvolutionMathType(d.conv, math);
  if (e != CUDNN_STATUS_SUCCESS) return e;
  if (dir == FORWARD) {
    *call = "cudnnConvolutionForward";
    return cudnnConvolutionForward(h, alpha, d.x, b.x, d.w, b.w, d.conv, (cudnnConvolutionFwdAlgo_t)algo, ws, ws_size,
                                   beta, d.y, b.y);
  }
  if (dir == BACKWARD_DATA) {
    *call = "cudnnConvolutionBackwardData";
    return cudnnConvolutionBackwardData(h, alpha, d.w, b.w, d.y, b.dy, d.conv, (cudnnConvolutionBwdDataAlgo_t)algo,
                                        ws, ws_size, beta, d.x, b.dx);
  }
  *call = "cudnnConvolutionBackwardFilter";
  return cudnnConvolutionBackwardFilter(h, alpha, d.x, b.x, d.y, b.dy, d.conv, (cudnnConvolutionBwdFilterAlgo_t)algo,
                                        ws, ws_size, beta, d.w, b.dw);
}

/* Runs the chosen algorithm; falls back to the one that needs no workspace when the
 * workspace cannot be had, or when cuDNN refuses the chosen one at run time (the
 * heuristics do not see the buffers, e.g. their alignment). */
em_status run(const char *op, direction dir, cudnnHandle_t h, const conv_descs &d, const algo_choice &c,
              const conv_ptrs &b, double alpha, double beta, em_dtype dtype, int device) {
  float falpha = (float)alpha, fbeta = (float)beta;
  const void *pa = dtype == EM_FLOAT64 ? (const void *)&alpha : (const void *)&falpha;
  const void *pb = dtype == EM_FLOAT64 ? (const void *)&beta : (const void *)&fbeta;
  bool can_fall_back = c.has_fallback && !(c.fallback_algo == c.algo && c.fallback_math == c.math);
  const char *call = "";
  cudnnStatus_t e = CUDNN_STATUS_NOT_SUPPORTED;
  void *ws = NULL;
  if (c.workspace > 0 && !(ws = em_gpu_malloc(c.workspace, device))) {
    if (!can_fall_back) return em_last_status();
    em_clear_error(); /* memory is short */
  } else {
    e = execute(dir, h, d, c.algo, c.math, b, pa, pb, ws, c.workspace, &call);
    if (ws) em_gpu_free_ptr(ws); /* stream-ordered: reused only by work queued after this */
    if (e == CUDNN_STATUS_SUCCESS) return EM_OK;
    if (CUDNN_STATUS_CATEGORY(e) != CUDNN_STATUS_NOT_SUPPORTED || !can_fall_back) return em_gpu_dnn_error(op, call, e);
  }
  e = execute(dir, h, d, c.fallback_algo, c.fallback_math, b, pa, pb, NULL, 0, &call);
  return e == CUDNN_STATUS_SUCCESS ? EM_OK : em_gpu_dnn_error(op, call, e);
}

/* ---- the whole batch, in chunks of images */

conv_shape shape_of(const em_tensor *x, const em_tensor *w, const em_tensor *y, const em_conv2d_params *p) {
  conv_shape s;
  s.n = x->sizes[0], s.c = x->sizes[1], s.h = x->sizes[2], s.w = x->sizes[3];
  s.co = w->sizes[0], s.kh = w->sizes[2], s.kw = w->sizes[3], s.oh = y->sizes[2], s.ow = y->sizes[3];
  for (int i = 0; i < 2; i++) s.stride[i] = p->stride[i], s.pad[i] = p->pad[i], s.dilation[i] = p->dilation[i];
  s.groups = p->groups;
  return s;
}

/* Images per chunk: cuDNN's descriptors count elements in int. 0 when even one image (or
 * the weight) is too large, with the error set. */
int64_t images_per_chunk(const char *op, const conv_shape &s) {
  int64_t in = s.c * s.h * s.w, out = s.co * s.oh * s.ow, most = in > out ? in : out;
  int64_t weight = s.co * (s.c / s.groups) * s.kh * s.kw;
  if (most > INT_MAX || weight > INT_MAX) {
    em_set_error(EM_ERR_UNSUPPORTED,
                 "%s: an image of [%lld, %lld, %lld] (output [%lld, %lld, %lld]) or the weight (%lld elements) exceeds "
                 "cuDNN's 2^31 elements",
                 op, (long long)s.c, (long long)s.h, (long long)s.w, (long long)s.co, (long long)s.oh, (long long)s.ow,
                 (long long)weight);
    return 0;
  }
  int64_t n = INT_MAX / (most > 0 ? most : 1);
  return n < s.n ? n : s.n;
}

/* Runs dir over the whole batch: base holds the buffers of image 0; each chunk of images
 * gets its own descriptors (and algorithm) and offsets into them. */
em_status run_batch(const char *op, direction dir, const conv_shape &whole, em_dtype dtype, int device,
                    const conv_ptrs &base) {
  int64_t per = images_per_chunk(op, whole);
  if (per == 0) return em_last_status();
  cudnnHandle_t h = (cudnnHandle_t)em_gpu_cudnn(device);
  if (!h) {
    char why[256];
    snprintf(why, sizeof why, "%s", em_last_error());
    return em_set_error(EM_ERR_DEVICE, "%s: no cuDNN handle for cuda:%d (%s)", op, device, why);
  }
  size_t el = em_dtype_size(dtype);
  int64_t in_image = whole.c * whole.h * whole.w, out_image = whole.co * whole.oh * whole.ow;
  for (int64_t n0 = 0; n0 < whole.n; n0 += per) {
    conv_shape s = whole;
    s.n = whole.n - n0 < per ? whole.n - n0 : per;
    conv_ptrs b = base;
    size_t in_off = (size_t)(n0 * in_image) * el, out_off = (size_t)(n0 * out_image) * el;
    if (b.x) b.x = (const char *)b.x + in_off;
    if (b.dx) b.dx = (char *)b.dx + in_off;
    if (b.y) b.y = (char *)b.y + out_off;
    if (b.dy) b.dy = (const char *)b.dy + out_off;
    conv_descs d;
    em_status st = make_descs(op, s, dtype, &d);
    if (st) return st;
    algo_choice c;
    if (!(st = choose(op, dir, h, d, dtype, s, b, device, &c)))
      st = run(op, dir, h, d, c, b, 1.0, dir == BACKWARD_FILTER && n0 > 0 ? 1.0 : 0.0, dtype, device);
    destroy_descs(&d);
    if (st) return st;
  }
  return EM_OK;
}

/* ---- bias */

template <typename T> struct acc_of { typedef float type; };
template <> struct acc_of<double> { typedef double type; };

template <typename T, typename I>
__global__ void add_bias(T *__restrict__ y, const T *__restrict__ b, int64_t C_, int64_t P_, int64_t total_) {
  typedef typename acc_of<T>::type A;
  const I total = (I)total_, C = (I)C_, P = (I)P_;
  for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < total; i += (I)blockDim.x * (I)gridDim.x)
    y[i] = em_cast<T>(em_cast<A>(y[i]) + em_cast<A>(b[i / P % C]));
}

em_status check_dtype(const char *op, em_dtype dtype) {
  if (dtype == EM_FLOAT32 || dtype == EM_FLOAT64 || dtype == EM_FLOAT16 || dtype == EM_BFLOAT16) return EM_OK;
  return em_set_error(EM_ERR_DTYPE, "%s: expected a floating dtype on cuda, got %s", op, em_dtype_name(dtype));
}

em_status zero(const char *op, em_tensor *t, cudaStream_t stream) {
  if (!t || em_tensor_numel(t) == 0) return EM_OK;
  EM_GPU_CHECK(op, cudaMemsetAsync(em_tensor_ptr(t), 0, (size_t)em_tensor_numel(t) * em_dtype_size(t->dtype), stream));
  return EM_OK;
}

} // namespace

extern "C" em_status em_gpu_conv2d(em_tensor *out, const em_tensor *x, const em_tensor *w, const em_tensor *b,
                                   const em_conv2d_params *p) {
  const char *op = "conv2d";
  em_status st = check_dtype(op, x->dtype);
  if (st || em_tensor_numel(out) == 0) return st;
  int device = x->storage->device.index;
  cudaStream_t stream;
  if ((st = em_gpu_enter(op, device, &stream))) return st;
  conv_shape s = shape_of(x, w, out, p);
  conv_ptrs ptrs = {em_tensor_ptr(x), em_tensor_ptr(w), NULL, em_tensor_ptr(out), NULL, NULL};
  if ((st = run_batch(op, FORWARD, s, x->dtype, device, ptrs)) || !b) return st;
  int64_t total = em_tensor_numel(out), P = s.oh * s.ow;
  unsigned blocks = em_gpu_blocks(total, device);
  EM_DISPATCH_FLOAT(op, x->dtype, T, {
    if (total < ((int64_t)1 << 30))
      add_bias<T, int32_t><<<blocks, EM_GPU_THREADS, 0, stream>>>((T *)em_tensor_ptr(out),
                                                                   (const T *)em_tensor_ptr(b), s.co, P, total);
    else
      add_bias<T, int64_t><<<blocks, EM_GPU_THREADS, 0, stream>>>((T *)em_tensor_ptr(out),
                                                                   (const T *)em_tensor_ptr(b), s.co, P, total);
  });
  return em_gpu_launch_check(op);
}

extern "C" em_status em_gpu_conv2d_backward(em_tensor *gx, em_tensor *gw, em_tensor *gb, const em_tensor *gy,
                                            const em_tensor *x, const em_tensor *w, const em_conv2d_params *p) {
  const char *op = "conv2d backward";
  em_status st = check_dtype(op, x->dtype);
  if (st || !(gx || gw || gb)) return st;
  int device = x->storage->device.index;
  cudaStream_t stream;
  if ((st = em_gpu_enter(op, device, &stream))) return st;
  conv_shape s = shape_of(x, w, gy, p);
  if (em_tensor_numel(gy) == 0) { /* no product to form: every gradient is zero */
    if ((st = zero(op, gx, stream)) || (st = zero(op, gw, stream))) return st;
    return zero(op, gb, stream);
  }
  conv_ptrs ptrs = {em_tensor_ptr(x), em_tensor_ptr(w), em_tensor_ptr(gy), NULL, gx ? em_tensor_ptr(gx) : NULL,
                    gw ? em_tensor_ptr(gw) : NULL};
  if (gx && (st = run_batch(op, BACKWARD_DATA, s, x->dtype, device, ptrs))) return st;
  if (gw && (st = run_batch(op, BACKWARD_FILTER, s, x->dtype, device, ptrs))) return st;
  if (gb) st = em_gpu_channel_sums(op, gb, gy, stream);
  return st;
}
