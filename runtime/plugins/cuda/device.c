/* device.c - errors, the device count (and why it is 0), the current device, device
 * properties and synchronisation. Nothing here may fail loudly on a machine without a
 * driver or a GPU: the count is 0 and the reason is kept for messages. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "gpu_runtime.h"

em_status em_gpu_error(cudaError_t err, const char *op) {
  /* Clears the error when it is not sticky, so that the next call does not report it again. */
  (void)cudaGetLastError();
  em_status code = err == cudaErrorMemoryAllocation ? EM_ERR_MEMORY : EM_ERR_DEVICE;
  return em_set_error(code, "%s: CUDA error %s: %s", op, cudaGetErrorName(err), cudaGetErrorString(err));
}

em_status em_gpu_launch_check(const char *op) {
  cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? EM_OK : em_gpu_error(err, op);
}

/* ---- the device count, probed once */

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int device_count;
static int sm_counts[EM_GPU_MAX_DEVICES];
static char reason[512];

static void probe(void) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    int driver = 0;
    (void)cudaGetLastError();
    if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0)
      snprintf(reason, sizeof reason, "CUDA driver not found (cudaGetDeviceCount: %s)", cudaGetErrorString(err));
    else snprintf(reason, sizeof reason, "%s", cudaGetErrorString(err));
    (void)cudaGetLastError();
    n = 0;
  } else if (n == 0) {
    snprintf(reason, sizeof reason, "no CUDA-capable device is detected");
  }
  if (n > EM_GPU_MAX_DEVICES) n = EM_GPU_MAX_DEVICES;
  for (int d = 0; d < n; d++) {
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, d) != cudaSuccess) {
      (void)cudaGetLastError();
      sms = 1;
    }
    sm_counts[d] = sms > 0 ? sms : 1;
  }
  device_count = n;
}

int em_gpu_device_count(void) {
  pthread_once(&probe_once, probe);
  return device_count;
}

const char *em_gpu_unavailable_reason(void) {
  pthread_once(&probe_once, probe);
  return device_count > 0 ? "" : reason;
}

int em_gpu_plugin_device_count(const char **why) {
  int n = em_gpu_device_count();
  if (n == 0 && why) *why = reason;
  return n;
}

int em_gpu_sm_count(int device) {
  int n = em_gpu_device_count();
  return device >= 0 && device < n ? sm_counts[device] : 1;
}

em_status em_gpu_check_device(const char *op, int device) {
  int n = em_gpu_device_count();
  if (n == 0) return em_set_error(EM_ERR_DEVICE, "%s: no CUDA device is available (%s)", op, reason);
  if (device < 0 || device >= n)
    return em_set_error(EM_ERR_DEVICE, "%s: device cuda:%d does not exist (%d CUDA devices)", op, device, n);
  return EM_OK;
}

/* ---- the current device */

em_status em_gpu_switch(const char *op, int device, int *prev) {
  em_status st = em_gpu_check_device(op, device);
  if (st) return st;
  int cur = 0;
  EM_GPU_CHECK(op, cudaGetDevice(&cur));
  *prev = cur;
  if (cur != device) EM_GPU_CHECK(op, cudaSetDevice(device));
  return EM_OK;
}

void em_gpu_restore(int prev) {
  int cur = -1;
  if (prev >= 0 && (cudaGetDevice(&cur) != cudaSuccess || cur != prev)) {
    if (cudaSetDevice(prev) != cudaSuccess) (void)cudaGetLastError();
  }
}

em_status em_gpu_enter(const char *op, int device, cudaStream_t *stream) {
  int prev;
  em_status st = em_gpu_switch(op, device, &prev);
  if (st) return st;
  *stream = em_gpu_current_stream(device);
  return EM_OK;
}

em_status em_gpu_set_device(int device) {
  em_status st = em_gpu_check_device("cuda.set_device", device);
  if (st) return st;
  EM_GPU_CHECK("cuda.set_device", cudaSetDevice(device));
  return EM_OK;
}

int em_gpu_current_device(void) {
  int d = 0;
  if (cudaGetDevice(&d) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return d;
}

em_status em_gpu_synchronize(int device) {
  int prev;
  em_status st = em_gpu_switch("cuda.synchronize", device, &prev);
  if (st) return st;
  cudaError_t err = cudaDeviceSynchronize();
  em_gpu_restore(prev);
  return err == cudaSuccess ? EM_OK : em_gpu_error(err, "cuda.synchronize");
}

em_status em_gpu_device_props(int device, em_cuda_device_props *out) {
  memset(out, 0, sizeof *out);
  em_status st = em_gpu_check_device("cuda.get_device_properties", device);
  if (st) return st;
  struct cudaDeviceProp p;
  EM_GPU_CHECK("cuda.get_device_properties", cudaGetDeviceProperties(&p, device));
  snprintf(out->name, sizeof out->name, "%s", p.name);
  out->major = p.major;
  out->minor = p.minor;
  out->total_memory = (int64_t)p.totalGlobalMem;
  out->multiprocessors = p.multiProcessorCount;
  int prev;
  if ((st = em_gpu_switch("cuda.get_device_properties", device, &prev))) return st;
  size_t free_bytes = 0, total = 0;
  cudaError_t err = cudaMemGetInfo(&free_bytes, &total);
  em_gpu_restore(prev);
  if (err != cudaSuccess) return em_gpu_error(err, "cuda.get_device_properties");
  out->free_memory = (int64_t)free_bytes;
  return EM_OK;
}
