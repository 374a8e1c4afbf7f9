/* handles.c - cuBLAS, cuBLASLt, cuDNN and cuSPARSE handles, and the libraries' versions.
 *
 * A handle is bound to one stream at a time, so two threads must not share one: each
 * thread gets its own set per device, made on first use. When a thread ends its sets go
 * back to a per-device pool for the next thread (making handles costs milliseconds and
 * device memory, so they are never destroyed). Each getter binds the handle to the
 * calling thread's current stream before returning it. */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>
#include <cusparse.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#ifdef EMBER_HAVE_NCCL
#include <nccl.h>
#endif
#include "gpu_runtime.h"

typedef struct handle_set {
  cublasHandle_t cublas;
  cublasLtHandle_t cublaslt;
  cudnnHandle_t cudnn;
  cusparseHandle_t cusparse;
  struct handle_set *next_free;
} handle_set;

/* Per thread: an array of EM_GPU_MAX_DEVICES sets (NULL until used), kept as the value of
 * a pthread key whose destructor returns them to the pools. */
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t thread_key;
static int have_key;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static handle_set *pool[EM_GPU_MAX_DEVICES];

static void return_sets(void *value) {
  handle_set **sets = value;
  pthread_mutex_lock(&pool_lock);
  for (int d = 0; d < EM_GPU_MAX_DEVICES; d++) {
    if (!sets[d]) continue;
    sets[d]->next_free = pool[d];
    pool[d] = sets[d];
  }
  pthread_mutex_unlock(&pool_lock);
  free(sets);
}

static void make_key(void) { have_key = pthread_key_create(&thread_key, return_sets) == 0; }

/* The calling thread's set for device (made current), or NULL with the error set. */
static handle_set *set_for(const char *op, int device) {
  int prev;
  if (em_gpu_switch(op, device, &prev)) return NULL;
  pthread_once(&key_once, make_key);
  if (!have_key) {
    em_set_error(EM_ERR_RUNTIME, "%s: cannot make a thread key for library handles", op);
    return NULL;
  }
  handle_set **sets = pthread_getspecific(thread_key);
  if (!sets) {
    sets = calloc(EM_GPU_MAX_DEVICES, sizeof *sets);
    if (!sets || pthread_setspecific(thread_key, sets)) {
      free(sets);
      em_set_error(EM_ERR_MEMORY, "%s: out of host memory", op);
      return NULL;
    }
  }
  if (!sets[device]) {
    pthread_mutex_lock(&pool_lock);
    handle_set *h = pool[device];
    if (h) pool[device] = h->next_free;
    pthread_mutex_unlock(&pool_lock);
    if (!h && !(h = calloc(1, sizeof *h))) {
      em_set_error(EM_ERR_MEMORY, "%s: out of host memory", op);
      return NULL;
    }
    h->next_free = NULL;
    sets[device] = h;
  }
  return sets[device];
}

void *em_gpu_cublas(int device) {
  const char *op = "cublas";
  handle_set *h = set_for(op, device);
  if (!h) return NULL;
  cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
  if (!h->cublas && (s = cublasCreate(&h->cublas)) != CUBLAS_STATUS_SUCCESS) h->cublas = NULL;
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetStream(h->cublas, em_gpu_current_stream(device));
  if (s != CUBLAS_STATUS_SUCCESS) {
    em_set_error(EM_ERR_DEVICE, "%s: cannot set up a cuBLAS handle on cuda:%d: %s", op, device,
                 cublasGetStatusString(s));
    return NULL;
  }
  return h->cublas;
}

/* cuBLASLt takes the stream per call: nothing to bind. */
void *em_gpu_cublaslt(int device) {
  const char *op = "cublasLt";
  handle_set *h = set_for(op, device);
  if (!h) return NULL;
  cublasStatus_t s;
  if (!h->cublaslt && (s = cublasLtCreate(&h->cublaslt)) != CUBLAS_STATUS_SUCCESS) {
    h->cublaslt = NULL;
    em_set_error(EM_ERR_DEVICE, "%s: cannot create a cuBLASLt handle on cuda:%d: %s", op, device,
                 cublasGetStatusString(s));
    return NULL;
  }
  return h->cublaslt;
}

void *em_gpu_cudnn(int device) {
  const char *op = "cudnn";
  handle_set *h = set_for(op, device);
  if (!h) return NULL;
  cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
  if (!h->cudnn && (s = cudnnCreate(&h->cudnn)) != CUDNN_STATUS_SUCCESS) h->cudnn = NULL;
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetStream(h->cudnn, em_gpu_current_stream(device));
  if (s != CUDNN_STATUS_SUCCESS) {
    em_set_error(EM_ERR_DEVICE, "%s: cannot set up a cuDNN handle on cuda:%d: %s", op, device, cudnnGetErrorString(s));
    return NULL;
  }
  return h->cudnn;
}

void *em_gpu_cusparse(int device) {
  const char *op = "cusparse";
  handle_set *h = set_for(op, device);
  if (!h) return NULL;
  cusparseStatus_t s = CUSPARSE_STATUS_SUCCESS;
  if (!h->cusparse && (s = cusparseCreate(&h->cusparse)) != CUSPARSE_STATUS_SUCCESS) h->cusparse = NULL;
  if (s == CUSPARSE_STATUS_SUCCESS) s = cusparseSetStream(h->cusparse, em_gpu_current_stream(device));
  if (s != CUSPARSE_STATUS_SUCCESS) {
    em_set_error(EM_ERR_DEVICE, "%s: cannot set up a cuSPARSE handle on cuda:%d: %s", op, device,
                 cusparseGetErrorString(s));
    return NULL;
  }
  return h->cusparse;
}

/* Library versions answer without a GPU (and the driver's is 0 without a driver). Each is
 * major * 10000 + minor * 100 + patch, except driver and runtime: major * 1000 + minor * 10. */
em_status em_gpu_versions(em_cuda_versions *out) {
  memset(out, 0, sizeof *out);
  if (cudaDriverGetVersion(&out->driver) != cudaSuccess) out->driver = 0;
  if (cudaRuntimeGetVersion(&out->runtime) != cudaSuccess) out->runtime = 0;
  (void)cudaGetLastError();
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS)
    out->cublas = major * 10000 + minor * 100 + patch;
  out->cudnn = (int)cudnnGetVersion();
#ifdef EMBER_HAVE_NCCL
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) out->nccl = nccl;
#endif
  return EM_OK;
}
