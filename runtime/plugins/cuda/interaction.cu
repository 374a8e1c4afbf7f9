/* interaction.cu - DLRM's dot interaction on the GPU, forward and backward (the backend
 * entries dot_interaction and dot_interaction_backward; cpu/interaction.c is the reference).
 *
 * features: n tensors [B, D] (contiguous, one dtype); out [B, W], W = D + P: features[0],
 * then the dot product of each pair (i, j), j < i (j <= i with self_interaction), i
 * ascending then j, P = n(n-1)/2 (or n(n+1)/2).
 *
 * One fused kernel each way, a block per sample: the sample's n x D features (and, going
 * back, its P pair gradients) are staged in shared memory when they fit, then each thread
 * computes one pair's dot product (forward) or one element of one feature's gradient
 * (backward). Neither the [B, n, D] stack nor the [B, n, n] products of a batched GEMM are
 * ever stored, and DLRM's n (27 for Criteo) and D (16 to 128) make the per-sample products
 * far too small for cuBLAS's batched GEMM to pay. No atomics: each output element is written
 * by one thread, which adds its terms in the CPU's order (d ascending for a dot product;
 * for a gradient, the pairs in the order the CPU visits them), so results differ from the
 * CPU's only where nvcc contracts a multiply-add into an FMA (a few ulps).
 *
 * The feature pointers travel in the kernel's arguments (no host-to-device copy, no wait),
 * which bounds n at MAX_FEATURES on cuda (the CPU takes 1024). */
#include "group_reduce.cuh"

namespace {

const char *const OP = "dot_interaction";

/* Two tables of pointers plus the scalars stay under the 4 KB of kernel arguments that
 * every CUDA version accepts. */
#define MAX_FEATURES 192
/* Shared memory a block may use without opting in. */
#define STAGE_BYTES (48 * 1024)

template <typename T> struct feature_table {
  const T *p[MAX_FEATURES];
};
template <typename T> struct grad_table {
  T *p[MAX_FEATURES];
};

/* The column of pair (i, j) among the P pair columns. */
__device__ __forceinline__ int64_t pair_at(int i, int j, int self) {
  return (self ? (int64_t)i * (i + 1) / 2 : (int64_t)i * (i - 1) / 2) + j;
}

template <typename T>
__global__ void dot_forward_kernel(T *__restrict__ out, feature_table<T> f, int n, int64_t B, int64_t D, int self,
                                   int staged) {
  extern __shared__ __align__(16) unsigned char stage_raw[];
  T *xs = reinterpret_cast<T *>(stage_raw); /* [n, D]: the sample's features */
  const int64_t W = D + (int64_t)n * (n - 1 + 2 * self) / 2, nd = (int64_t)n * D;
  for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
    if (staged) {
      for (int64_t e = threadIdx.x; e < nd; e += blockDim.x) xs[e] = f.p[e / D][b * D + e % D];
      __syncthreads();
    }
    T *o = out + b * W;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) o[d] = f.p[0][b * D + d];
    for (int q = threadIdx.x; q < n * n; q += blockDim.x) {
      int i = q / n, j = q % n;
      if (j >= i + self) continue;
      const T *xi = staged ? xs + i * D : f.p[i] + b * D, *xj = staged ? xs + j * D : f.p[j] + b * D;
      T s = 0;
      for (int64_t d = 0; d < D; d++) s += xi[d] * xj[d];
      o[D + pair_at(i, j, self)] = s;
    }
    if (staged) __syncthreads(); /* the next sample overwrites xs */
  }
}

/* g[t] = (t == 0 ? gout[:, :D] : 0) + the sum over pairs (t, m) and (m, t) of their gradient
 * times x_m: a self pair counts twice. Per element in the CPU's order: m < t, then (t, t)
 * twice, then m > t. */
template <typename T>
__global__ void dot_backward_kernel(grad_table<T> g, const T *__restrict__ gout, feature_table<T> f, int n, int64_t B,
                                    int64_t D, int self, int staged) {
  extern __shared__ __align__(16) unsigned char stage_raw[];
  const int64_t P = (int64_t)n * (n - 1 + 2 * self) / 2, W = D + P, nd = (int64_t)n * D;
  T *xs = reinterpret_cast<T *>(stage_raw); /* [n, D] */
  T *cs = xs + nd; /* [P]: the sample's pair gradients */
  for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
    const T *go = gout + b * W;
    if (staged) {
      for (int64_t e = threadIdx.x; e < nd; e += blockDim.x) xs[e] = f.p[e / D][b * D + e % D];
      for (int64_t p = threadIdx.x; p < P; p += blockDim.x) cs[p] = go[D + p];
      __syncthreads();
    }
    const T *c = staged ? cs : go + D;
    for (int64_t e = threadIdx.x; e < nd; e += blockDim.x) {
      int t = (int)(e / D);
      int64_t d = e % D;
      if (!g.p[t]) continue;
      T acc = t == 0 ? go[d] : (T)0;
      for (int m = 0; m < n; m++) {
        T x = staged ? xs[m * D + d] : f.p[m][b * D + d];
        if (m < t) {
          acc += c[pair_at(t, m, self)] * x;
        } else if (m > t) {
          acc += c[pair_at(m, t, self)] * x;
        } else if (self) {
          T cm = c[pair_at(t, t, self)];
          acc += cm * x;
          acc += cm * x;
        }
      }
      g.p[t][b * D + d] = acc;
    }
    if (staged) __syncthreads();
  }
}

/* Threads: one per work item of a sample, a multiple of 32, at most 256. */
unsigned block_for(int64_t items) {
  int64_t t = (items + 31) / 32 * 32;
  return (unsigned)(t < 32 ? 32 : t > 256 ? 256 : t);
}

unsigned grid_for(int64_t B, int device) {
  int64_t g = B, cap = (int64_t)em_gpu_sm_count(device) * 16;
  return (unsigned)(g > cap ? cap : g > 0 ? g : 1);
}

template <typename T>
em_status forward(em_tensor *out, em_tensor *const *features, int n, int self, int device, cudaStream_t stream) {
  int64_t B = features[0]->sizes[0], D = features[0]->sizes[1];
  if (B == 0) return EM_OK;
  feature_table<T> f;
  for (int i = 0; i < n; i++) f.p[i] = (const T *)em_tensor_ptr(features[i]);
  size_t bytes = sizeof(T) * (size_t)(n * D);
  int staged = bytes <= STAGE_BYTES;
  dot_forward_kernel<T><<<grid_for(B, device), block_for((int64_t)n * n > D ? (int64_t)n * n : D), staged ? bytes : 0,
                          stream>>>((T *)em_tensor_ptr(out), f, n, B, D, self, staged);
  return em_gpu_launch_check(OP);
}

template <typename T>
em_status backward(em_tensor *const *grads, const em_tensor *gout, em_tensor *const *features, int n, int self,
                   int device, cudaStream_t stream) {
  int64_t B = features[0]->sizes[0], D = features[0]->sizes[1], P = (int64_t)n * (n - 1 + 2 * self) / 2;
  if (B == 0 || D == 0) return EM_OK;
  feature_table<T> f;
  grad_table<T> g;
  for (int i = 0; i < n; i++) {
    f.p[i] = (const T *)em_tensor_ptr(features[i]);
    g.p[i] = grads[i] ? (T *)em_tensor_ptr(grads[i]) : nullptr;
  }
  size_t bytes = sizeof(T) * (size_t)(n * D + P);
  int staged = bytes <= STAGE_BYTES;
  dot_backward_kernel<T><<<grid_for(B, device), block_for((int64_t)n * D), staged ? bytes : 0, stream>>>(
      g, (const T *)em_tensor_ptr(gout), f, n, B, D, self, staged);
  return em_gpu_launch_check(OP);
}

em_status check_count(int n) {
  if (n > MAX_FEATURES)
    return em_set_error(EM_ERR_UNSUPPORTED, "%s: %d features, expected at most %d on cuda", OP, n, MAX_FEATURES);
  return EM_OK;
}

}  // namespace

/* The backend table's entries (table.c; backend.h says what each computes). */
em_status em_gpu_dot_interaction(em_tensor *out, em_tensor *const *features, int n, int self_interaction) {
  int device = out->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter(OP, device, &stream);
  if (st || (st = check_count(n))) return st;
  int self = self_interaction != 0;
  switch (out->dtype) {
    case EM_FLOAT32: return forward<float>(out, features, n, self, device, stream);
    case EM_FLOAT64: return forward<double>(out, features, n, self, device, stream);
    default:
      return em_set_error(EM_ERR_DTYPE, "%s: features are %s, expected float32 or float64 on cuda", OP,
                          em_dtype_name(out->dtype));
  }
}

em_status em_gpu_dot_interaction_backward(em_tensor *const *grads, const em_tensor *gout, em_tensor *const *features,
                                          int n, int self_interaction) {
  int device = gout->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter(OP, device, &stream);
  if (st || (st = check_count(n))) return st;
  int self = self_interaction != 0;
  switch (gout->dtype) {
    case EM_FLOAT32: return backward<float>(grads, gout, features, n, self, device, stream);
    case EM_FLOAT64: return backward<double>(grads, gout, features, n, self, device, stream);
    default:
      return em_set_error(EM_ERR_DTYPE, "%s: features are %s, expected float32 or float64 on cuda", OP,
                          em_dtype_name(gout->dtype));
  }
}
