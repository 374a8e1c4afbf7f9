/* attention.cu - fused scaled-dot-product attention on cuda (float32, float64): the
 * backend's attention entries (tensor/backend.h). runtime/cpu/attention_body.h is the
 * reference: the same schedule, masks, dropout stream and saved logsumexp.
 *
 * Forward (FlashAttention's): one block per (batch*head, tile of TILE query rows) walks the
 * keys in tiles of TILE, keeping Q, K, V, the score tile and the output accumulator in
 * shared memory; each row's running maximum m and sum l rescale the accumulator by
 * exp(m_old - m_new) when the maximum grows, so no [Tq, Tk] matrix exists. The output is
 * acc / l; lse = m + log l is kept ([BH, Tq]; -inf and a zero row where no key is seen).
 * Backward (FlashAttention-2's): Drow = rowsum(dO * O) first; then one block per
 * (batch*head, key tile) holds K, V and its dK, dV in shared memory and walks the query
 * tiles, recomputing P = exp(S - lse): dV += P^T dO, dP = dO V^T, dS = P * (dP - Drow),
 * dK += scale dS^T Q, and dQ += scale dS K added atomically (other key tiles add theirs).
 * With dropout, P is multiplied by the kept mask / (1 - p) where the output used it
 * (dV, dP), with the CPU's Philox words, so a GPU drops the very elements the CPU does.
 *
 * TILE is 32, or 16 where 32 would not fit the shared memory (large head dims, float64;
 * seq_plan.c chooses);
 * rows in shared memory are padded by one element so that threads reading along a row of
 * another thread's neighbour do not share a bank. Products are plain FMAs in T (no tensor
 * cores), so float32 results match the CPU's to float32 rounding. */
#include <math.h>
#include <stdint.h>
#include "kernels.cuh"
#include "nn_gpu.h"
#include "seq_plan.h"

namespace {

const char *const OP = "scaled_dot_product_attention";

/* What the kernels read of em_attn_params, by value. */
struct attn_k {
  int64_t BH, Tq, Tk, D, Dv;
  double scale;
  int causal, tile;
  const char *mask; /* NULL: none */
  int mask_is_bool, mask_lead_ndim;
  int64_t mask_rs, mask_cs;
  int64_t lead_sizes[EM_MAX_DIMS], lead_strides[EM_MAX_DIMS];
  int dropout;
  uint32_t threshold; /* keep when the Philox word >= threshold */
  double keep_scale; /* 1 / (1 - p) */
  uint64_t seed, offset;
};

__device__ __forceinline__ int64_t mask_offset(const attn_k &a, int64_t bh) {
  int64_t off = 0;
  for (int d = a.mask_lead_ndim - 1; d >= 0; d--) {
    off += (bh % a.lead_sizes[d]) * a.lead_strides[d];
    bh /= a.lead_sizes[d];
  }
  return off;
}

/* The dropout factor of (bh, i, j): keep / (1 - p) or 0. */
template <typename T> __device__ __forceinline__ T drop_factor(const attn_k &a, int64_t bh, int64_t i, int64_t j) {
  uint64_t e = (uint64_t)((bh * a.Tq + i) * a.Tk + j);
  em_philox4 w = em_philox_block(a.seed, a.offset + e / 4);
  return w.x[e % 4] >= a.threshold ? (T)a.keep_scale : (T)0;
}

/* scale * q_i . k_j (rows in shared memory) with the causal rule and the mask applied. */
template <typename T>
__device__ __forceinline__ T score(const attn_k &a, const T *qrow, const T *krow, int64_t i, int64_t j,
                                   int64_t moff) {
  if (a.causal && j > i) return -INFINITY;
  T s = 0;
  for (int64_t d = 0; d < a.D; d++) s += qrow[d] * krow[d];
  s *= (T)a.scale;
  if (a.mask) {
    int64_t at = moff + i * a.mask_rs + j * a.mask_cs;
    if (a.mask_is_bool) {
      if (!((const uint8_t *)a.mask)[at]) s = -INFINITY;
    } else {
      s += ((const T *)a.mask)[at];
    }
  }
  return s;
}

/* Loads rows r0 .. r0 + n of src [rows, F] into dst [tile, F + 1], zeros past n. */
template <typename T> __device__ void load_rows(T *dst, const T *src, int64_t r0, int64_t n, int64_t F, int tile) {
  int64_t F1 = F + 1;
  for (int64_t idx = threadIdx.x; idx < tile * F; idx += blockDim.x) {
    int64_t r = idx / F, f = idx % F;
    dst[r * F1 + f] = r < n ? src[(r0 + r) * F + f] : (T)0;
  }
}

template <typename T>
__global__ void attn_forward(attn_k a, T *__restrict__ out, T *__restrict__ lse, const T *__restrict__ q,
                             const T *__restrict__ k, const T *__restrict__ v) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T *smem = reinterpret_cast<T *>(smem_raw);
  const int TL = a.tile;
  const int64_t D1 = a.D + 1, V1 = a.Dv + 1, S1 = TL + 1;
  T *Qs = smem, *Ks = Qs + TL * D1, *Vs = Ks + TL * D1, *S = Vs + TL * V1, *O = S + TL * S1;
  T *m = O + TL * V1, *l = m + TL, *alpha = l + TL;
  int64_t nqb = (a.Tq + TL - 1) / TL, bh = blockIdx.x / nqb, i0 = (blockIdx.x % nqb) * TL;
  int64_t nr = a.Tq - i0 < TL ? a.Tq - i0 : TL;
  int64_t moff = a.mask ? mask_offset(a, bh) : 0;
  q += bh * a.Tq * a.D, k += bh * a.Tk * a.D, v += bh * a.Tk * a.Dv;
  load_rows(Qs, q, i0, nr, a.D, TL);
  for (int64_t idx = threadIdx.x; idx < TL * V1; idx += blockDim.x) O[idx] = 0;
  for (int r = threadIdx.x; r < TL; r += blockDim.x) m[r] = -INFINITY, l[r] = 0;
  /* causal: keys past the last row's diagonal are seen by none of the rows */
  int64_t jend = a.causal ? (i0 + nr < a.Tk ? i0 + nr : a.Tk) : a.Tk;
  for (int64_t j0 = 0; j0 < jend; j0 += TL) {
    int64_t nc = jend - j0 < TL ? jend - j0 : TL;
    __syncthreads(); /* the previous tile's readers are done */
    load_rows(Ks, k, j0, nc, a.D, TL);
    load_rows(Vs, v, j0, nc, a.Dv, TL);
    __syncthreads();
    for (int64_t idx = threadIdx.x; idx < TL * TL; idx += blockDim.x) {
      int64_t r = idx / TL, c = idx % TL;
      S[r * S1 + c] = r < nr && c < nc ? score(a, Qs + r * D1, Ks + c * D1, i0 + r, j0 + c, moff) : (T)-INFINITY;
    }
    __syncthreads();
    for (int64_t r = threadIdx.x; r < TL; r += blockDim.x) {
      T *row = S + r * S1, mx = m[r];
      for (int64_t c = 0; c < nc; c++) mx = row[c] > mx ? row[c] : mx;
      if (r >= nr || mx == (T)-INFINITY) { /* nothing visible yet in this row */
        for (int64_t c = 0; c < TL; c++) row[c] = 0;
        alpha[r] = 1;
        continue;
      }
      T al = exp(m[r] - mx), sum = 0;
      for (int64_t c = 0; c < nc; c++) {
        T p = exp(row[c] - mx);
        sum += p;
        row[c] = a.dropout ? p * drop_factor<T>(a, bh, i0 + r, j0 + c) : p;
      }
      for (int64_t c = nc; c < TL; c++) row[c] = 0;
      l[r] = l[r] * al + sum;
      m[r] = mx;
      alpha[r] = al;
    }
    __syncthreads();
    for (int64_t idx = threadIdx.x; idx < TL * a.Dv; idx += blockDim.x) {
      int64_t r = idx / a.Dv, d = idx % a.Dv;
      T acc = O[r * V1 + d] * alpha[r];
      for (int64_t c = 0; c < nc; c++) acc += S[r * S1 + c] * Vs[c * V1 + d];
      O[r * V1 + d] = acc;
    }
  }
  __syncthreads();
  out += bh * a.Tq * a.Dv, lse += bh * a.Tq;
  for (int64_t idx = threadIdx.x; idx < nr * a.Dv; idx += blockDim.x) {
    int64_t r = idx / a.Dv, d = idx % a.Dv;
    out[(i0 + r) * a.Dv + d] = l[r] > 0 ? O[r * V1 + d] / l[r] : (T)0;
  }
  for (int64_t r = threadIdx.x; r < nr; r += blockDim.x) lse[i0 + r] = l[r] > 0 ? m[r] + log(l[r]) : (T)-INFINITY;
}

/* drow[row] = dO[row, :] . O[row, :] over BH * Tq rows */
template <typename T>
__global__ void attn_drow(T *__restrict__ drow, const T *__restrict__ go, const T *__restrict__ o, int64_t rows,
                          int64_t Dv) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows; i += (int64_t)blockDim.x * gridDim.x) {
    T acc = 0;
    for (int64_t d = 0; d < Dv; d++) acc += go[i * Dv + d] * o[i * Dv + d];
    drow[i] = acc;
  }
}

template <typename T>
__global__ void attn_backward(attn_k a, T *__restrict__ gq, T *__restrict__ gk, T *__restrict__ gv,
                              const T *__restrict__ go, const T *__restrict__ q, const T *__restrict__ k,
                              const T *__restrict__ v, const T *__restrict__ lse, const T *__restrict__ drow) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T *smem = reinterpret_cast<T *>(smem_raw);
  const int TL = a.tile;
  const int64_t D1 = a.D + 1, V1 = a.Dv + 1, S1 = TL + 1;
  T *Ks = smem, *Vs = Ks + TL * D1, *dK = Vs + TL * V1, *dV = dK + TL * D1, *Qs = dV + TL * V1, *dO = Qs + TL * D1;
  T *P = dO + TL * V1, *dS = P + TL * S1, *L = dS + TL * S1, *R = L + TL;
  int64_t nkb = (a.Tk + TL - 1) / TL, bh = blockIdx.x / nkb, j0 = (blockIdx.x % nkb) * TL;
  int64_t nc = a.Tk - j0 < TL ? a.Tk - j0 : TL;
  int64_t moff = a.mask ? mask_offset(a, bh) : 0;
  T scale = (T)a.scale;
  q += bh * a.Tq * a.D, k += bh * a.Tk * a.D, v += bh * a.Tk * a.Dv, go += bh * a.Tq * a.Dv;
  gq += bh * a.Tq * a.D, lse += bh * a.Tq, drow += bh * a.Tq;
  load_rows(Ks, k, j0, nc, a.D, TL);
  load_rows(Vs, v, j0, nc, a.Dv, TL);
  for (int64_t idx = threadIdx.x; idx < TL * D1; idx += blockDim.x) dK[idx] = 0;
  for (int64_t idx = threadIdx.x; idx < TL * V1; idx += blockDim.x) dV[idx] = 0;
  /* causal: rows before this key tile see none of its keys (TL rows per query tile too) */
  for (int64_t i0 = a.causal ? j0 : 0; i0 < a.Tq; i0 += TL) {
    int64_t nr = a.Tq - i0 < TL ? a.Tq - i0 : TL;
    __syncthreads(); /* the previous query tile's readers are done */
    load_rows(Qs, q, i0, nr, a.D, TL);
    load_rows(dO, go, i0, nr, a.Dv, TL);
    for (int64_t r = threadIdx.x; r < TL; r += blockDim.x) {
      L[r] = r < nr ? lse[i0 + r] : (T)-INFINITY;
      R[r] = r < nr ? drow[i0 + r] : (T)0;
    }
    __syncthreads();
    for (int64_t idx = threadIdx.x; idx < TL * TL; idx += blockDim.x) {
      int64_t r = idx / TL, c = idx % TL;
      T p = 0, ds = 0;
      if (r < nr && c < nc && L[r] != (T)-INFINITY) {
        T s = score(a, Qs + r * D1, Ks + c * D1, i0 + r, j0 + c, moff);
        p = s == (T)-INFINITY ? (T)0 : exp(s - L[r]);
        T dp = 0;
        for (int64_t d = 0; d < a.Dv; d++) dp += dO[r * V1 + d] * Vs[c * V1 + d];
        if (a.dropout) { /* dV takes the dropped P; dS = P * (dP * z - Drow) */
          T z = drop_factor<T>(a, bh, i0 + r, j0 + c);
          ds = p * (dp * z - R[r]);
          p *= z;
        } else {
          ds = p * (dp - R[r]);
        }
      }
      P[r * S1 + c] = p;
      dS[r * S1 + c] = ds;
    }
    __syncthreads();
    for (int64_t idx = threadIdx.x; idx < TL * a.Dv; idx += blockDim.x) {
      int64_t c = idx / a.Dv, d = idx % a.Dv;
      T acc = 0;
      for (int64_t r = 0; r < nr; r++) acc += P[r * S1 + c] * dO[r * V1 + d];
      dV[c * V1 + d] += acc;
    }
    for (int64_t idx = threadIdx.x; idx < TL * a.D; idx += blockDim.x) {
      int64_t c = idx / a.D, d = idx % a.D;
      T acc = 0;
      for (int64_t r = 0; r < nr; r++) acc += dS[r * S1 + c] * Qs[r * D1 + d];
      dK[c * D1 + d] += scale * acc;
    }
    for (int64_t idx = threadIdx.x; idx < nr * a.D; idx += blockDim.x) {
      int64_t r = idx / a.D, d = idx % a.D;
      T acc = 0;
      for (int64_t c = 0; c < nc; c++) acc += dS[r * S1 + c] * Ks[c * D1 + d];
      atomicAdd(gq + (i0 + r) * a.D + d, scale * acc);
    }
  }
  __syncthreads();
  gk += bh * a.Tk * a.D, gv += bh * a.Tk * a.Dv;
  for (int64_t idx = threadIdx.x; idx < nc * a.D; idx += blockDim.x) {
    int64_t c = idx / a.D, d = idx % a.D;
    gk[(j0 + c) * a.D + d] = dK[c * D1 + d];
  }
  for (int64_t idx = threadIdx.x; idx < nc * a.Dv; idx += blockDim.x) {
    int64_t c = idx / a.Dv, d = idx % a.Dv;
    gv[(j0 + c) * a.Dv + d] = dV[c * V1 + d];
  }
}

const int THREADS = 128;

/* The kernel arguments, the tile and the shared memory; refuses head dims too large. */
em_status prepare(const em_attn_params *p, em_dtype dtype, int device, int backward, attn_k *a, size_t *smem) {
  *a = attn_k();
  a->BH = p->BH, a->Tq = p->Tq, a->Tk = p->Tk, a->D = p->D, a->Dv = p->Dv;
  a->scale = p->scale, a->causal = p->causal;
  a->mask = p->mask_ptr, a->mask_is_bool = p->mask_is_bool, a->mask_lead_ndim = p->mask_lead_ndim;
  a->mask_rs = p->mask_rs, a->mask_cs = p->mask_cs;
  for (int d = 0; d < p->mask_lead_ndim; d++) a->lead_sizes[d] = p->mask_lead_sizes[d], a->lead_strides[d] = p->mask_lead_strides[d];
  a->dropout = p->dropout_p > 0;
  double t = p->dropout_p * 4294967296.0; /* the CPU's threshold (attention_body.h) */
  a->threshold = (uint32_t)(t > 4294967295.0 ? 4294967295.0 : t);
  a->keep_scale = p->dropout_p > 0 ? 1 / (1 - p->dropout_p) : 1;
  a->seed = p->seed, a->offset = p->offset;
  int optin = 0;
  EM_GPU_CHECK(OP, cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  a->tile = em_attn_plan_tile(backward, p->D, p->Dv, em_dtype_size(dtype), (size_t)optin, smem);
  if (a->tile) return EM_OK;
  return em_set_error(EM_ERR_UNSUPPORTED,
                      "%s: head dims D = %lld, Dv = %lld need more shared memory than cuda:%d has per block (%d bytes) "
                      "for %s",
                      OP, (long long)p->D, (long long)p->Dv, device, optin, em_dtype_name(dtype));
}

template <typename K> em_status allow_smem(K kernel, size_t smem) {
  if (smem > 48 * 1024)
    EM_GPU_CHECK(OP, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  return EM_OK;
}

template <typename T>
em_status forward_t(const attn_k &a, size_t smem, em_tensor *out, em_tensor *lse, const em_tensor *q,
                    const em_tensor *k, const em_tensor *v, cudaStream_t stream) {
  em_status st = allow_smem(attn_forward<T>, smem);
  if (st) return st;
  int64_t blocks = a.BH * ((a.Tq + a.tile - 1) / a.tile);
  if (blocks > INT32_MAX) return em_set_error(EM_ERR_UNSUPPORTED, "%s: too many query tiles (%lld)", OP, (long long)blocks);
  attn_forward<T><<<(unsigned)blocks, THREADS, smem, stream>>>(a, (T *)em_tensor_ptr(out), (T *)em_tensor_ptr(lse),
                                                               (const T *)em_tensor_ptr(q), (const T *)em_tensor_ptr(k),
                                                               (const T *)em_tensor_ptr(v));
  return em_gpu_launch_check(OP);
}

template <typename T>
em_status backward_t(const attn_k &a, size_t smem, em_tensor *gq, em_tensor *gk, em_tensor *gv, const em_tensor *gout,
                     const em_tensor *q, const em_tensor *k, const em_tensor *v, const em_tensor *out,
                     const em_tensor *lse, int device, cudaStream_t stream) {
  em_status st = allow_smem(attn_backward<T>, smem);
  if (st) return st;
  int64_t blocks = a.BH * ((a.Tk + a.tile - 1) / a.tile), rows = a.BH * a.Tq;
  if (blocks > INT32_MAX) return em_set_error(EM_ERR_UNSUPPORTED, "%s: too many key tiles (%lld)", OP, (long long)blocks);
  T *drow = (T *)em_gpu_malloc((size_t)(rows > 0 ? rows : 1) * sizeof(T), device);
  if (!drow) return em_last_status();
  attn_drow<T><<<em_gpu_blocks(rows, device), EM_GPU_THREADS, 0, stream>>>(drow, (const T *)em_tensor_ptr(gout),
                                                                          (const T *)em_tensor_ptr(out), rows, a.Dv);
  st = em_gpu_launch_check(OP);
  cudaError_t e = cudaSuccess;
  if (!st) e = cudaMemsetAsync(em_tensor_ptr(gq), 0, (size_t)(rows * a.D) * sizeof(T), stream);
  if (!st && e != cudaSuccess) st = em_gpu_error(e, OP);
  if (!st) {
    attn_backward<T><<<(unsigned)blocks, THREADS, smem, stream>>>(
        a, (T *)em_tensor_ptr(gq), (T *)em_tensor_ptr(gk), (T *)em_tensor_ptr(gv), (const T *)em_tensor_ptr(gout),
        (const T *)em_tensor_ptr(q), (const T *)em_tensor_ptr(k), (const T *)em_tensor_ptr(v),
        (const T *)em_tensor_ptr(lse), drow);
    st = em_gpu_launch_check(OP);
  }
  em_gpu_free_ptr(drow); /* stream-ordered: reused only by work queued after this */
  return st;
}

em_status check_dtype(em_dtype dtype) {
  if (dtype == EM_FLOAT32 || dtype == EM_FLOAT64) return EM_OK;
  return em_set_error(EM_ERR_DTYPE, "%s: expected float32 or float64 on cuda, got %s", OP, em_dtype_name(dtype));
}

} // namespace

extern "C" em_status em_gpu_attention(const em_attn_params *p, em_tensor *out, em_tensor *lse, const em_tensor *q,
                                      const em_tensor *k, const em_tensor *v) {
  int device = q->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter(OP, device, &stream);
  if (st || (st = check_dtype(q->dtype))) return st;
  if (p->BH == 0 || p->Tq == 0) return EM_OK;
  attn_k a;
  size_t smem;
  if ((st = prepare(p, q->dtype, device, 0, &a, &smem))) return st;
  if (q->dtype == EM_FLOAT64) return forward_t<double>(a, smem, out, lse, q, k, v, stream);
  return forward_t<float>(a, smem, out, lse, q, k, v, stream);
}

extern "C" em_status em_gpu_attention_backward(const em_attn_params *p, em_tensor *gq, em_tensor *gk, em_tensor *gv,
                                               const em_tensor *gout, const em_tensor *q, const em_tensor *k,
                                               const em_tensor *v, const em_tensor *out, const em_tensor *lse) {
  int device = q->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter(OP, device, &stream);
  if (st || (st = check_dtype(q->dtype))) return st;
  size_t es = em_dtype_size(q->dtype);
  if (p->BH == 0 || p->Tk == 0 || p->Tq == 0) { /* nothing flows: zero gradients */
    em_tensor *gs[3] = {gq, gk, gv};
    for (int i = 0; i < 3; i++) {
      cudaError_t e = cudaMemsetAsync(em_tensor_ptr(gs[i]), 0, (size_t)em_tensor_numel(gs[i]) * es, stream);
      if (e != cudaSuccess) return em_gpu_error(e, OP);
    }
    return EM_OK;
  }
  attn_k a;
  size_t smem;
  if ((st = prepare(p, q->dtype, device, 1, &a, &smem))) return st;
  if (q->dtype == EM_FLOAT64) return backward_t<double>(a, smem, gq, gk, gv, gout, q, k, v, out, lse, device, stream);
  return backward_t<float>(a, smem, gq, gk, gv, gout, q, k, v, out, lse, device, stream);
}
