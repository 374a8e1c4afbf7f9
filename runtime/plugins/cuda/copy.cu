/* copy.cu - copies with a GPU on either side (the tensor core routes them here, see
 * runtime/tensor/copy.c), converting dtypes as the CPU backend does (runtime/cpu/copy.c:
 * floats through float or double, integers through int64, bool as != 0).
 *
 * - on one device: cudaMemcpyAsync when both sides are contiguous with one dtype, else one
 *   strided, converting kernel;
 * - host <-> device: one cudaMemcpyAsync of contiguous bytes on the current stream. A
 *   strided or differently typed side is staged: the host side through a contiguous host
 *   copy, the conversion on the device (the device tensor's own dtype crosses the bus);
 * - between two devices: a peer copy on the destination's current stream, ordered after
 *   the source's current stream with an event, and the source's stream then waits for the
 *   copy so that the source's memory is not reused under it.
 *
 * Synchronisation: a blocking copy between host and device returns when it is complete. A
 * non_blocking one whose host side is pinned (and needs no host staging) returns once
 * queued: as in PyTorch, the caller keeps the host tensor alive and untouched until the
 * stream reaches the copy (an event or a stream synchronize says when). Device-to-device
 * copies never wait. */
#include <stdint.h>
#include "gpu_runtime.h"
#include "kernels.cuh"

namespace {

/* Load and store per dtype, mirroring runtime/cpu/copy.c's LOAD_* / STORE_* macros. */
template <int D> struct conv;
template <> struct conv<EM_FLOAT32> {
  typedef float T;
  static __device__ __forceinline__ float load(const T *p) { return *p; }
  template <typename V> static __device__ __forceinline__ void store(T *p, V v) { *p = (float)v; }
};
template <> struct conv<EM_FLOAT64> {
  typedef double T;
  static __device__ __forceinline__ double load(const T *p) { return *p; }
  template <typename V> static __device__ __forceinline__ void store(T *p, V v) { *p = (double)v; }
};
template <> struct conv<EM_FLOAT16> {
  typedef __half T;
  static __device__ __forceinline__ float load(const T *p) { return __half2float(*p); }
  template <typename V> static __device__ __forceinline__ void store(T *p, V v) { *p = __float2half_rn((float)v); }
};
template <> struct conv<EM_BFLOAT16> {
  typedef __nv_bfloat16 T;
  static __device__ __forceinline__ float load(const T *p) { return __bfloat162float(*p); }
  template <typename V> static __device__ __forceinline__ void store(T *p, V v) { *p = __float2bfloat16_rn((float)v); }
};
template <> struct conv<EM_INT32> {
  typedef int32_t T;
  static __device__ __forceinline__ int64_t load(const T *p) { return *p; }
  template <typename V> static __device__ __forceinline__ void store(T *p, V v) { *p = (int32_t)v; }
};
template <> struct conv<EM_INT64> {
  typedef int64_t T;
  static __device__ __forceinline__ int64_t load(const T *p) { return *p; }
  template <typename V> static __device__ __forceinline__ void store(T *p, V v) { *p = (int64_t)v; }
};
template <> struct conv<EM_UINT8> {
  typedef uint8_t T;
  static __device__ __forceinline__ int64_t load(const T *p) { return *p; }
  template <typename V> static __device__ __forceinline__ void store(T *p, V v) { *p = (uint8_t)(int64_t)v; }
};
template <> struct conv<EM_BOOL> {
  typedef uint8_t T;
  static __device__ __forceinline__ int64_t load(const T *p) { return *p != 0; }
  template <typename V> static __device__ __forceinline__ void store(T *p, V v) { *p = (uint8_t)(v != 0); }
};

template <int DD, int SD>
__global__ void convert_kernel(typename conv<DD>::T *dst, em_geom gd, const typename conv<SD>::T *src, em_geom gs,
                               int64_t n, bool contiguous) {
  int64_t step = (int64_t)gridDim.x * blockDim.x;
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (contiguous) {
    for (; i < n; i += step) conv<DD>::store(dst + i, conv<SD>::load(src + i));
  } else {
    for (; i < n; i += step) conv<DD>::store(dst + gd.offset(i), conv<SD>::load(src + gs.offset(i)));
  }
}

/* Same dtype, some side strided: elements moved as raw words of their size. */
template <typename W>
__global__ void move_kernel(W *dst, em_geom gd, const W *src, em_geom gs, int64_t n) {
  int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
    dst[gd.offset(i)] = src[gs.offset(i)];
}

struct launch_args {
  void *dst;
  const void *src;
  em_geom gd, gs;
  int64_t n;
  bool contiguous;
  unsigned blocks;
  cudaStream_t stream;
};

template <int DD, int SD> void launch_convert(const launch_args &a) {
  convert_kernel<DD, SD><<<a.blocks, EM_GPU_THREADS, 0, a.stream>>>(
      (typename conv<DD>::T *)a.dst, a.gd, (const typename conv<SD>::T *)a.src, a.gs, a.n, a.contiguous);
}

template <int DD> em_status launch_from(int sd, const launch_args &a) {
  switch (sd) {
    case EM_FLOAT32: launch_convert<DD, EM_FLOAT32>(a); break;
    case EM_FLOAT64: launch_convert<DD, EM_FLOAT64>(a); break;
    case EM_FLOAT16: launch_convert<DD, EM_FLOAT16>(a); break;
    case EM_BFLOAT16: launch_convert<DD, EM_BFLOAT16>(a); break;
    case EM_INT32: launch_convert<DD, EM_INT32>(a); break;
    case EM_INT64: launch_convert<DD, EM_INT64>(a); break;
    case EM_UINT8: launch_convert<DD, EM_UINT8>(a); break;
    case EM_BOOL: launch_convert<DD, EM_BOOL>(a); break;
    default: return em_set_error(EM_ERR_DTYPE, "copy_: dtype %d is not supported on cuda", sd);
  }
  return EM_OK;
}

em_status launch_any(int dd, int sd, const launch_args &a) {
  switch (dd) {
    case EM_FLOAT32: return launch_from<EM_FLOAT32>(sd, a);
    case EM_FLOAT64: return launch_from<EM_FLOAT64>(sd, a);
    case EM_FLOAT16: return launch_from<EM_FLOAT16>(sd, a);
    case EM_BFLOAT16: return launch_from<EM_BFLOAT16>(sd, a);
    case EM_INT32: return launch_from<EM_INT32>(sd, a);
    case EM_INT64: return launch_from<EM_INT64>(sd, a);
    case EM_UINT8: return launch_from<EM_UINT8>(sd, a);
    case EM_BOOL: return launch_from<EM_BOOL>(sd, a);
    default: return em_set_error(EM_ERR_DTYPE, "copy_: dtype %d is not supported on cuda", dd);
  }
}

size_t nbytes_of(const em_tensor *t) { return (size_t)em_tensor_numel(t) * em_dtype_size(t->dtype); }

bool plain(const em_tensor *t) { return em_tensor_is_contiguous(t) != 0; }

/* dst = src on one device (the current one), on stream: bytes or a kernel. */
em_status copy_on_device(em_tensor *dst, const em_tensor *src, int device, cudaStream_t stream) {
  const char *op = "copy_";
  int64_t n = em_tensor_numel(dst);
  if (n == 0) return EM_OK;
  if (dst->dtype == src->dtype && plain(dst) && plain(src)) {
    EM_GPU_CHECK(op, cudaMemcpyAsync(em_tensor_ptr(dst), em_tensor_ptr(src), nbytes_of(dst),
                                     cudaMemcpyDeviceToDevice, stream));
    return EM_OK;
  }
  const em_tensor *ts[2] = {dst, src};
  em_geom g[2];
  em_geom_many(2, ts, g);
  unsigned blocks = em_gpu_blocks(n, device);
  if (dst->dtype == src->dtype) {
    void *d = em_tensor_ptr(dst);
    const void *s = em_tensor_ptr(src);
    switch (em_dtype_size(dst->dtype)) {
      case 1: move_kernel<uint8_t><<<blocks, EM_GPU_THREADS, 0, stream>>>((uint8_t *)d, g[0], (const uint8_t *)s, g[1], n); break;
      case 2: move_kernel<uint16_t><<<blocks, EM_GPU_THREADS, 0, stream>>>((uint16_t *)d, g[0], (const uint16_t *)s, g[1], n); break;
      case 4: move_kernel<uint32_t><<<blocks, EM_GPU_THREADS, 0, stream>>>((uint32_t *)d, g[0], (const uint32_t *)s, g[1], n); break;
      case 8: move_kernel<uint64_t><<<blocks, EM_GPU_THREADS, 0, stream>>>((uint64_t *)d, g[0], (const uint64_t *)s, g[1], n); break;
      default: return em_set_error(EM_ERR_DTYPE, "%s: dtype %s is not supported on cuda", op, em_dtype_name(dst->dtype));
    }
    return em_gpu_launch_check(op);
  }
  launch_args a;
  a.dst = em_tensor_ptr(dst);
  a.src = em_tensor_ptr(src);
  a.gd = g[0];
  a.gs = g[1];
  a.n = n;
  a.contiguous = em_geom_is_contiguous(g[0]) && em_geom_is_contiguous(g[1]);
  a.blocks = blocks;
  a.stream = stream;
  em_status st = launch_any(dst->dtype, src->dtype, a);
  return st ? st : em_gpu_launch_check(op);
}

/* A contiguous tensor shaped like like, of dtype, on device. */
em_status empty_like_on(em_tensor **out, const em_tensor *like, em_dtype dtype, em_device device) {
  return em_empty(out, like->ndim, like->sizes, dtype, device);
}

em_status wait_sync(const char *op, cudaStream_t stream, bool wait) {
  if (wait) EM_GPU_CHECK(op, cudaStreamSynchronize(stream));
  return EM_OK;
}

/* host -> device */
em_status copy_to_device(em_tensor *dst, const em_tensor *src, bool non_blocking) {
  const char *op = "copy_ (to cuda)";
  int device = dst->storage->device.index;
  cudaStream_t stream;
  em_tensor *host_tmp = NULL, *dev_tmp = NULL;
  const em_tensor *host = src;
  em_tensor *target = dst;
  bool pinned = em_tensor_is_pinned(src) != 0;
  em_status st = em_gpu_enter(op, device, &stream);
  if (st) return st;
  if (!plain(src)) {
    if ((st = em_contiguous(&host_tmp, src))) return st;
    host = host_tmp;
    pinned = false;
  }
  if (!plain(dst) || dst->dtype != host->dtype) {
    if ((st = empty_like_on(&dev_tmp, dst, host->dtype, dst->storage->device))) goto done;
    target = dev_tmp;
  }
  {
    cudaError_t err = cudaMemcpyAsync(em_tensor_ptr(target), em_tensor_ptr(host), nbytes_of(host),
                                      cudaMemcpyHostToDevice, stream);
    if (err != cudaSuccess) {
      st = em_gpu_error(err, op);
      goto done;
    }
  }
  if (dev_tmp && (st = copy_on_device(dst, dev_tmp, device, stream))) goto done;
  st = wait_sync(op, stream, !non_blocking || !pinned);
done:
  em_tensor_release(dev_tmp);   /* stream-ordered: reused only by later work on stream */
  em_tensor_release(host_tmp);  /* pageable: the copy above has already waited */
  return st;
}

/* device -> host */
em_status copy_to_host(em_tensor *dst, const em_tensor *src, bool non_blocking) {
  const char *op = "copy_ (to cpu)";
  int device = src->storage->device.index;
  cudaStream_t stream;
  em_tensor *host_tmp = NULL, *dev_tmp = NULL;
  const em_tensor *dev = src;
  em_tensor *host = dst;
  bool pinned = em_tensor_is_pinned(dst) != 0;
  em_status st = em_gpu_enter(op, device, &stream);
  if (st) return st;
  if (!plain(src) || src->dtype != dst->dtype) {
    if ((st = empty_like_on(&dev_tmp, dst, dst->dtype, src->storage->device))) return st;
    if ((st = copy_on_device(dev_tmp, src, device, stream))) goto done;
    dev = dev_tmp;
  }
  if (!plain(dst)) {
    if ((st = empty_like_on(&host_tmp, dst, dst->dtype, dst->storage->device))) goto done;
    host = host_tmp;
    pinned = false;
  }
  {
    cudaError_t err = cudaMemcpyAsync(em_tensor_ptr(host), em_tensor_ptr(dev), nbytes_of(dev),
                                      cudaMemcpyDeviceToHost, stream);
    if (err != cudaSuccess) {
      st = em_gpu_error(err, op);
      goto done;
    }
  }
  if ((st = wait_sync(op, stream, !non_blocking || !pinned))) goto done;
  if (host_tmp) st = em_copy_(dst, host_tmp);   /* host to host, strided */
done:
  em_tensor_release(dev_tmp);
  em_tensor_release(host_tmp);
  return st;
}

/* Records an event on the current stream of device (made current) and makes `waiter`
 * (on its own device) wait for it. */
em_status order_after(const char *op, int device, cudaStream_t stream, cudaStream_t waiter) {
  cudaEvent_t ev;
  EM_GPU_CHECK(op, cudaSetDevice(device));
  EM_GPU_CHECK(op, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  cudaError_t err = cudaEventRecord(ev, stream);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(waiter, ev, 0);
  cudaError_t destroyed = cudaEventDestroy(ev);   /* released once it completes */
  if (err == cudaSuccess) err = destroyed;
  return err == cudaSuccess ? EM_OK : em_gpu_error(err, op);
}

/* device a -> device b */
em_status copy_between_devices(em_tensor *dst, const em_tensor *src) {
  const char *op = "copy_ (between devices)";
  int sdev = src->storage->device.index, ddev = dst->storage->device.index;
  cudaStream_t ss, ds;
  em_tensor *src_tmp = NULL, *dst_tmp = NULL;
  const em_tensor *from = src;
  em_tensor *to = dst;
  em_status st = em_gpu_enter(op, sdev, &ss);
  if (st) return st;
  if (!plain(src)) {
    if ((st = empty_like_on(&src_tmp, src, src->dtype, src->storage->device))) return st;
    if ((st = copy_on_device(src_tmp, src, sdev, ss))) goto done;
    from = src_tmp;
  }
  if ((st = em_gpu_enter(op, ddev, &ds))) goto done;
  if (!plain(dst) || dst->dtype != src->dtype) {
    if ((st = empty_like_on(&dst_tmp, dst, src->dtype, dst->storage->device))) goto done;
    to = dst_tmp;
  }
  if ((st = order_after(op, sdev, ss, ds))) goto done;
  {
    cudaError_t err = cudaSetDevice(ddev);
    if (err == cudaSuccess)
      err = cudaMemcpyPeerAsync(em_tensor_ptr(to), ddev, em_tensor_ptr(from), sdev, nbytes_of(from), ds);
    if (err != cudaSuccess) {
      st = em_gpu_error(err, op);
      goto done;
    }
  }
  if (dst_tmp && (st = copy_on_device(dst, dst_tmp, ddev, ds))) goto done;
  /* the source side must not reuse (or overwrite) what the copy still reads */
  st = order_after(op, ddev, ds, ss);   /* leaves the destination's device current */
done:
  em_tensor_release(dst_tmp);
  em_tensor_release(src_tmp);
  return st;
}

em_status copy_any(em_tensor *dst, const em_tensor *src, bool non_blocking) {
  if (em_tensor_numel(dst) == 0) return EM_OK;
  em_device d = dst->storage->device, s = src->storage->device;
  if (d.type == EM_CUDA && s.type == EM_CUDA) {
    if (d.index == s.index) {
      cudaStream_t stream;
      em_status st = em_gpu_enter("copy_", d.index, &stream);
      return st ? st : copy_on_device(dst, src, d.index, stream);
    }
    return copy_between_devices(dst, src);
  }
  if (d.type == EM_CUDA) return copy_to_device(dst, src, non_blocking);
  if (s.type == EM_CUDA) return copy_to_host(dst, src, non_blocking);
  return em_copy_(dst, src);
}

}  // namespace

/* The backend's copy entry: blocking (em_copy_ and everything built on it). */
extern "C" em_status em_gpu_copy(em_tensor *dst, const em_tensor *src) { return copy_any(dst, src, false); }

/* em_copy_async: broadcasts src like copy_, then copies, waiting only when it must. */
extern "C" em_status em_gpu_copy_async(em_tensor *dst, const em_tensor *src, int non_blocking) {
  em_tensor *expanded = NULL;
  em_status st = emp_broadcast_to("copy_", &expanded, src, dst->ndim, dst->sizes);
  if (st) return st;
  st = copy_any(dst, expanded, non_blocking != 0);
  em_tensor_release(expanded);
  return st;
}
