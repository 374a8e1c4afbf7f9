/* rnn.cu - one recurrent layer (RNN tanh/relu, LSTM, GRU) in one direction on cuda,
 * through cuDNN 9's RNN API (cudnnRNNForward, cudnnRNNBackwardData_v8,
 * cudnnRNNBackwardWeights_v8): the backend's rnn_layer entries (tensor/backend.h).
 *
 * ember's recurrent modules (lua/ember/nn/recurrent.lua) call one layer and direction at a
 * time, on every device, so that stacking, bidirectional concatenation and the dropout
 * between layers are the same code (and the same random stream) as on the CPU. cuDNN runs
 * a one-layer unidirectional network here; the reverse direction runs it on the input
 * reversed within each sequence's length (seq_remap) and reverses its output back.
 *
 * Parameters: ember keeps PyTorch's layout (w_ih [G*H, NI], w_hh [G*H, H], gates i, f, g, o
 * for the LSTM and r, z, n for the GRU, which are cuDNN's linear-layer orders too), so each
 * gate's block is copied into the place cudnnGetRNNWeightParams gives for it in cuDNN's
 * weight space, and the weight gradient is copied out of the same places: state dicts are
 * unchanged. The biases are always cuDNN's double bias; a missing one is zeros.
 *
 * What the backward needs is one uint8 tensor ("saved"): the weight space, then cuDNN's
 * reserve space, each at a 256-byte boundary; the backward rebuilds the descriptors from
 * the same em_rnn_params, which give the same sizes.
 *
 * Variable lengths: the padded sequence-major layout (CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED)
 * with each sequence's length; cuDNN writes zeros past a length (the padding fill), and its
 * final states are those after each sequence's last step, as on the CPU. A length of 0 is
 * refused by runtime/nn/rnn.c before it gets here (cuDNN needs at least one step). */
#include <cudnn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ember/nn.h"
#include "dnn_check.cuh"
#include "kernels.cuh"
#include "nn_gpu.h"
#include "seq_plan.h"

namespace {

const char *const op_names[] = {"rnn_tanh", "rnn_relu", "lstm", "gru"};

size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

/* dst[t, b, :] = src[t', b, :] for t < len[b], t' = len[b] - 1 - t (reverse) or t; zeros
 * for t >= len[b]. F features per row. In place only when !reverse. */
template <typename T>
__global__ void seq_remap(T *dst, const T *src, const int32_t *__restrict__ lens, int64_t T_, int64_t B,
                          int64_t F, int reverse) {
  int64_t total = T_ * B * F;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)blockDim.x * gridDim.x) {
    int64_t f = i % F, b = (i / F) % B, t = i / (F * B), len = lens[b];
    if (t >= len) {
      dst[i] = (T)0;
    } else {
      int64_t ts = reverse ? len - 1 - t : t;
      dst[i] = src[(ts * B + b) * F + f];
    }
  }
}

/* Descriptors of one layer, made from em_rnn_params and destroyed with the object. */
struct rnn_descs {
  cudnnRNNDescriptor_t rnn = NULL;
  cudnnDropoutDescriptor_t drop = NULL;
  cudnnRNNDataDescriptor_t x = NULL, y = NULL;
  cudnnTensorDescriptor_t h = NULL, m = NULL, b = NULL;
  size_t weight_bytes = 0, work_bytes = 0, reserve_bytes = 0;
  ~rnn_descs() {
    if (rnn) cudnnDestroyRNNDescriptor(rnn);
    if (drop) cudnnDestroyDropoutDescriptor(drop);
    if (x) cudnnDestroyRNNDataDescriptor(x);
    if (y) cudnnDestroyRNNDataDescriptor(y);
    if (h) cudnnDestroyTensorDescriptor(h);
    if (m) cudnnDestroyTensorDescriptor(m);
    if (b) cudnnDestroyTensorDescriptor(b);
  }
};

em_status make_descs(const char *op, cudnnHandle_t handle, const em_rnn_params *p, em_dtype dtype,
                     const int32_t *lens, int training, rnn_descs &d) {
  if (p->T > INT32_MAX || p->B > INT32_MAX || p->NI > INT32_MAX || p->H > INT32_MAX || p->B * p->H > INT32_MAX)
    return em_set_error(EM_ERR_UNSUPPORTED, "%s: sizes beyond cuDNN's int32 (T %lld, B %lld, input %lld, hidden %lld)",
                        op, (long long)p->T, (long long)p->B, (long long)p->NI, (long long)p->H);
  cudnnDataType_t dt = dtype == EM_FLOAT64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  /* float32 without TF32 unless asked (EMBER_CUDA_TF32=1), so that results match the CPU's */
  cudnnMathType_t math = dtype == EM_FLOAT64        ? CUDNN_DEFAULT_MATH
                         : em_gpu_tf32_enabled() ? CUDNN_DEFAULT_MATH
                                                 : CUDNN_FMA_MATH;
  cudnnRNNMode_t cell = p->mode == EM_RNN_TANH   ? CUDNN_RNN_TANH
                        : p->mode == EM_RNN_RELU ? CUDNN_RNN_RELU
                        : p->mode == EM_RNN_LSTM ? CUDNN_LSTM
                                                 : CUDNN_GRU;
  EM_DNN_CHECK(op, cudnnCreateDropoutDescriptor(&d.drop));
  /* one layer: no dropout inside cuDNN (between layers it is the modules' F.dropout) */
  EM_DNN_CHECK(op, cudnnSetDropoutDescriptor(d.drop, handle, 0.0f, NULL, 0, 0));
  EM_DNN_CHECK(op, cudnnCreateRNNDescriptor(&d.rnn));
  EM_DNN_CHECK(op, cudnnSetRNNDescriptor_v8(d.rnn, CUDNN_RNN_ALGO_STANDARD, cell, CUDNN_RNN_DOUBLE_BIAS,
                                            CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, dt, dt, math, (int32_t)p->NI,
                                            (int32_t)p->H, (int32_t)p->H, 1, d.drop, CUDNN_RNN_PADDED_IO_ENABLED));
  double zero64 = 0;
  float zero32 = 0;
  void *fill = dtype == EM_FLOAT64 ? (void *)&zero64 : (void *)&zero32;
  EM_DNN_CHECK(op, cudnnCreateRNNDataDescriptor(&d.x));
  EM_DNN_CHECK(op, cudnnSetRNNDataDescriptor(d.x, dt, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, (int)p->T, (int)p->B,
                                             (int)p->NI, lens, fill));
  EM_DNN_CHECK(op, cudnnCreateRNNDataDescriptor(&d.y));
  EM_DNN_CHECK(op, cudnnSetRNNDataDescriptor(d.y, dt, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, (int)p->T, (int)p->B,
                                             (int)p->H, lens, fill));
  int dims[3] = {1, (int)p->B, (int)p->H}, strides[3] = {(int)(p->B * p->H), (int)p->H, 1};
  EM_DNN_CHECK(op, cudnnCreateTensorDescriptor(&d.h));
  EM_DNN_CHECK(op, cudnnSetTensorNdDescriptor(d.h, dt, 3, dims, strides));
  EM_DNN_CHECK(op, cudnnCreateTensorDescriptor(&d.m));
  EM_DNN_CHECK(op, cudnnCreateTensorDescriptor(&d.b));
  EM_DNN_CHECK(op, cudnnGetRNNWeightSpaceSize(handle, d.rnn, &d.weight_bytes));
  EM_DNN_CHECK(
      op, cudnnGetRNNTempSpaceSizes(handle, d.rnn, training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE, d.x,
                                    &d.work_bytes, &d.reserve_bytes));
  return EM_OK;
}

/* The element count of a descriptor cudnnGetRNNWeightParams filled. */
int64_t desc_numel(cudnnTensorDescriptor_t t) {
  cudnnDataType_t dt;
  int nd = 0, dims[8], strides[8];
  if (cudnnGetTensorNdDescriptor(t, 8, &dt, &nd, dims, strides) != CUDNN_STATUS_SUCCESS) return -1;
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= dims[i];
  return n;
}

/* Copies the layer's parameters between ember's tensors and a weight space ws (to_space:
 * into it; else out of it, into the tensors that are not NULL). A NULL bias copied in
 * leaves the place as it is (zeroed by the caller). */
em_status copy_params(const char *op, cudnnHandle_t handle, const rnn_descs &d, const em_rnn_params *p, void *ws,
                      int to_space, em_tensor *w_ih, em_tensor *w_hh, em_tensor *b_ih, em_tensor *b_hh,
                      cudaStream_t stream) {
  int G = em_rnn_plan_gates(p->mode);
  size_t es = em_dtype_size(w_ih ? w_ih->dtype : w_hh ? w_hh->dtype : b_ih ? b_ih->dtype : b_hh->dtype);
  for (int id = 0; id < 2 * G; id++) {
    em_rnn_param_place pl = em_rnn_plan_place(p->mode, p->NI, p->H, id);
    em_tensor *w = pl.recurrent ? w_hh : w_ih, *b = pl.recurrent ? b_hh : b_ih;
    if (!w && !b) continue;
    void *maddr = NULL, *baddr = NULL;
    EM_DNN_CHECK(op, cudnnGetRNNWeightParams(handle, d.rnn, 0, d.weight_bytes, ws, id, d.m, &maddr, d.b, &baddr));
    if (desc_numel(d.m) != pl.w_count || desc_numel(d.b) != pl.b_count)
      return em_set_error(EM_ERR_RUNTIME,
                          "%s: cuDNN's weight space does not have the expected layout (linear layer %d: %lld and %lld "
                          "elements, expected %lld and %lld)",
                          op, id, (long long)desc_numel(d.m), (long long)desc_numel(d.b), (long long)pl.w_count,
                          (long long)pl.b_count);
    if (w) {
      char *mine = (char *)em_tensor_ptr(w) + (size_t)pl.w_offset * es;
      EM_GPU_CHECK(op, cudaMemcpyAsync(to_space ? maddr : mine, to_space ? mine : maddr, (size_t)pl.w_count * es,
                                       cudaMemcpyDeviceToDevice, stream));
    }
    if (b) {
      char *mine = (char *)em_tensor_ptr(b) + (size_t)pl.b_offset * es;
      EM_GPU_CHECK(op, cudaMemcpyAsync(to_space ? baddr : mine, to_space ? mine : baddr, (size_t)pl.b_count * es,
                                       cudaMemcpyDeviceToDevice, stream));
    }
  }
  return EM_OK;
}

/* Temporary device memory freed (stream-ordered) when the object goes. */
struct scratch {
  void *ptr = NULL;
  ~scratch() {
    if (ptr) em_gpu_free_ptr(ptr);
  }
  em_status get(size_t n, int device) {
    ptr = em_gpu_malloc(n ? n : 1, device);
    return ptr ? EM_OK : em_last_status();
  }
};

/* The lengths as int32 on the host (lens) and the device (dev). */
em_status lengths_of(const char *op, const em_rnn_params *p, int32_t *lens, scratch &dev, int device,
                     cudaStream_t stream) {
  for (int64_t b = 0; b < p->B; b++) lens[b] = (int32_t)(p->lengths ? p->lengths[b] : p->T);
  em_status st = dev.get((size_t)p->B * sizeof(int32_t), device);
  if (st) return st;
  /* from pageable memory: the call returns once lens is staged, so it may go afterwards */
  EM_GPU_CHECK(op, cudaMemcpyAsync(dev.ptr, lens, (size_t)p->B * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  return EM_OK;
}

em_status remap(const char *op, void *dst, const void *src, const int32_t *lens, const em_rnn_params *p, int64_t F,
                int reverse, em_dtype dtype, int device, cudaStream_t stream) {
  unsigned blocks = em_gpu_blocks(p->T * p->B * F, device);
  if (dtype == EM_FLOAT64)
    seq_remap<double><<<blocks, EM_GPU_THREADS, 0, stream>>>((double *)dst, (const double *)src, lens, p->T, p->B, F,
                                                             reverse);
  else
    seq_remap<float><<<blocks, EM_GPU_THREADS, 0, stream>>>((float *)dst, (const float *)src, lens, p->T, p->B, F,
                                                            reverse);
  return em_gpu_launch_check(op);
}

cudnnHandle_t handle_for(const char *op, int device) {
  cudnnHandle_t h = (cudnnHandle_t)em_gpu_cudnn(device);
  if (!h) {
    char why[256];
    snprintf(why, sizeof why, "%s", em_last_error());
    em_set_error(EM_ERR_DEVICE, "%s: no cuDNN handle for cuda:%d (%s)", op, device, why);
  }
  return h;
}

} // namespace

extern "C" em_status em_gpu_rnn_layer(const em_rnn_params *p, em_tensor *y, em_tensor *state, em_tensor **saved,
                                      const em_tensor *x, const em_tensor *h0, const em_tensor *c0,
                                      const em_tensor *w_ih, const em_tensor *w_hh, const em_tensor *b_ih,
                                      const em_tensor *b_hh) {
  const char *op = op_names[p->mode];
  int device = x->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter(op, device, &stream);
  if (st) return st;
  if (saved) *saved = NULL;
  cudnnHandle_t handle = handle_for(op, device);
  if (!handle) return em_last_status();
  em_dtype dtype = x->dtype;
  size_t es = em_dtype_size(dtype);
  int32_t *lens = (int32_t *)malloc((size_t)p->B * sizeof(int32_t));
  if (!lens) return em_set_error(EM_ERR_MEMORY, "%s: out of memory", op);
  scratch dlens, ws_own, work, xr, yr;
  rnn_descs d;
  em_tensor *blob = NULL;
  st = lengths_of(op, p, lens, dlens, device, stream);
  if (!st) st = make_descs(op, handle, p, dtype, lens, saved != NULL, d);
  free(lens);
  if (st) return st;
  size_t wsz = align256(d.weight_bytes), total = wsz + align256(d.reserve_bytes);
  char *ws = NULL, *reserve = NULL;
  if (saved) { /* the weight space and reserve live on in the node */
    int64_t n = (int64_t)total;
    if ((st = em_empty(&blob, 1, &n, EM_UINT8, x->storage->device))) return st;
    ws = (char *)em_tensor_ptr(blob), reserve = ws + wsz;
  } else {
    if ((st = ws_own.get(total, device))) return st;
    ws = (char *)ws_own.ptr, reserve = ws + wsz;
  }
  if (!st && d.work_bytes) st = work.get(d.work_bytes, device);
  if (!st && (!b_ih || !b_hh)) {
    cudaError_t ce = cudaMemsetAsync(ws, 0, d.weight_bytes, stream);
    if (ce != cudaSuccess) st = em_gpu_error(ce, op);
  }
  if (!st)
    st = copy_params(op, handle, d, p, ws, 1, (em_tensor *)w_ih, (em_tensor *)w_hh, (em_tensor *)b_ih,
                     (em_tensor *)b_hh, stream);
  const void *xin = em_tensor_ptr(x);
  void *yout = em_tensor_ptr(y);
  if (!st && p->reverse) { /* each sequence reversed within its length, and the output back */
    if (!(st = xr.get((size_t)(p->T * p->B * p->NI) * es, device)) &&
        !(st = yr.get((size_t)(p->T * p->B * p->H) * es, device)) &&
        !(st = remap(op, xr.ptr, xin, (const int32_t *)dlens.ptr, p, p->NI, 1, dtype, device, stream)))
      xin = xr.ptr, yout = yr.ptr;
  }
  if (!st) {
    char *hy = (char *)em_tensor_ptr(state), *cy = p->mode == EM_RNN_LSTM ? hy + (size_t)(p->B * p->H) * es : NULL;
    cudnnStatus_t e = cudnnRNNForward(handle, d.rnn, saved ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
                                      (const int32_t *)dlens.ptr, d.x, xin, d.y, yout, d.h, h0 ? em_tensor_ptr(h0) : NULL,
                                      hy, d.h, c0 ? em_tensor_ptr(c0) : NULL, cy, d.weight_bytes, ws, d.work_bytes,
                                      work.ptr, saved ? d.reserve_bytes : 0, saved ? reserve : NULL);
    if (e != CUDNN_STATUS_SUCCESS) st = em_gpu_dnn_error(op, "cudnnRNNForward", e);
  }
  if (!st && p->reverse)
    st = remap(op, em_tensor_ptr(y), yr.ptr, (const int32_t *)dlens.ptr, p, p->H, 1, dtype, device, stream);
  if (st) {
    em_tensor_release(blob);
    return st;
  }
  if (saved) *saved = blob;
  return EM_OK;
}

extern "C" em_status em_gpu_rnn_layer_backward(const em_rnn_params *p, em_tensor *gx, em_tensor *gh0, em_tensor *gc0,
                                               em_tensor *gw_ih, em_tensor *gw_hh, em_tensor *gb_ih, em_tensor *gb_hh,
                                               const em_tensor *gy, const em_tensor *gstate, const em_tensor *x,
                                               const em_tensor *h0, const em_tensor *c0, const em_tensor *y,
                                               const em_tensor *saved) {
  const char *op = op_names[p->mode];
  int device = x->storage->device.index;
  cudaStream_t stream;
  em_status st = em_gpu_enter(op, device, &stream);
  if (st) return st;
  cudnnHandle_t handle = handle_for(op, device);
  if (!handle) return em_last_status();
  em_dtype dtype = x->dtype;
  size_t es = em_dtype_size(dtype), xbytes = (size_t)(p->T * p->B * p->NI) * es,
         ybytes = (size_t)(p->T * p->B * p->H) * es, sbytes = (size_t)(p->B * p->H) * es;
  int32_t *lens = (int32_t *)malloc((size_t)p->B * sizeof(int32_t));
  if (!lens) return em_set_error(EM_ERR_MEMORY, "%s: out of memory", op);
  scratch dlens, work, dws, xr, yr, dyr, dxr, dy0;
  rnn_descs d;
  st = lengths_of(op, p, lens, dlens, device, stream);
  if (!st) st = make_descs(op, handle, p, dtype, lens, 1, d);
  free(lens);
  if (st) return st;
  size_t wsz = align256(d.weight_bytes);
  if ((size_t)em_tensor_numel(saved) < wsz + align256(d.reserve_bytes))
    return em_set_error(EM_ERR_RUNTIME, "%s: the saved cuDNN state is smaller than the layer needs", op);
  char *ws = (char *)em_tensor_ptr(saved), *reserve = ws + wsz;
  const int32_t *dl = (const int32_t *)dlens.ptr;
  if (d.work_bytes && (st = work.get(d.work_bytes, device))) return st;

  /* the forward's view: reversed within each length for the reverse direction */
  const void *xin = em_tensor_ptr(x), *yin = em_tensor_ptr(y), *dyin = NULL;
  if (!gy) {
    if ((st = dy0.get(ybytes, device))) return st;
    EM_GPU_CHECK(op, cudaMemsetAsync(dy0.ptr, 0, ybytes, stream));
    dyin = dy0.ptr;
  } else {
    dyin = em_tensor_ptr(gy);
  }
  if (p->reverse) {
    if ((st = xr.get(xbytes, device)) || (st = yr.get(ybytes, device)) || (st = dyr.get(ybytes, device)) ||
        (st = remap(op, xr.ptr, xin, dl, p, p->NI, 1, dtype, device, stream)) ||
        (st = remap(op, yr.ptr, yin, dl, p, p->H, 1, dtype, device, stream)) ||
        (st = remap(op, dyr.ptr, dyin, dl, p, p->H, 1, dtype, device, stream)))
      return st;
    xin = xr.ptr, yin = yr.ptr, dyin = dyr.ptr;
  }
  /* dx is always written: into gx, or scratch (reversed: scratch, then reversed into gx) */
  void *dx = gx && !p->reverse ? em_tensor_ptr(gx) : NULL;
  if (!dx) {
    if ((st = dxr.get(xbytes, device))) return st;
    dx = dxr.ptr;
  }
  const char *gs = gstate ? (const char *)em_tensor_ptr(gstate) : NULL;
  cudnnStatus_t e = cudnnRNNBackwardData_v8(
      handle, d.rnn, dl, d.y, yin, dyin, d.x, dx, d.h, h0 ? em_tensor_ptr(h0) : NULL, gs,
      gh0 ? em_tensor_ptr(gh0) : NULL, d.h, c0 ? em_tensor_ptr(c0) : NULL,
      gs && p->mode == EM_RNN_LSTM ? gs + sbytes : NULL, gc0 ? em_tensor_ptr(gc0) : NULL, d.weight_bytes, ws,
      d.work_bytes, work.ptr, d.reserve_bytes, reserve);
  if (e != CUDNN_STATUS_SUCCESS) return em_gpu_dnn_error(op, "cudnnRNNBackwardData_v8", e);
  if (gc0 && p->mode != EM_RNN_LSTM) EM_GPU_CHECK(op, cudaMemsetAsync(em_tensor_ptr(gc0), 0, sbytes, stream));
  /* past a length the input has no gradient: zeros there (and the reverse order undone) */
  if (gx && (p->reverse || p->lengths) &&
      (st = remap(op, em_tensor_ptr(gx), dx, dl, p, p->NI, p->reverse, dtype, device, stream)))
    return st;
  if (gw_ih || gw_hh || gb_ih || gb_hh) {
    if ((st = dws.get(d.weight_bytes, device))) return st;
    EM_GPU_CHECK(op, cudaMemsetAsync(dws.ptr, 0, d.weight_bytes, stream));
    e = cudnnRNNBackwardWeights_v8(handle, d.rnn, CUDNN_WGRAD_MODE_ADD, dl, d.x, xin, d.h,
                                   h0 ? em_tensor_ptr(h0) : NULL, d.y, yin, d.weight_bytes, dws.ptr, d.work_bytes,
                                   work.ptr, d.reserve_bytes, reserve);
    if (e != CUDNN_STATUS_SUCCESS) return em_gpu_dnn_error(op, "cudnnRNNBackwardWeights_v8", e);
    if ((st = copy_params(op, handle, d, p, dws.ptr, 0, gw_ih, gw_hh, gb_ih, gb_hh, stream))) return st;
  }
  return EM_OK;
}
