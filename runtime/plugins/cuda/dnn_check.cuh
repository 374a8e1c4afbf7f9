/* dnn_check.cuh - turning a failed cuDNN call into ember's error, for the files that call
 * cuDNN (conv.cu, rnn.cu): the call's text, cuDNN's status and its last error string, with
 * "not supported" as EM_ERR_UNSUPPORTED (the caller may fall back) and allocation failures
 * as EM_ERR_MEMORY. C++ (CUDA) only. */
#ifndef EMBER_GPU_DNN_CHECK_CUH
#define EMBER_GPU_DNN_CHECK_CUH

#include <cudnn.h>
#include "gpu.h"

static inline em_status em_gpu_dnn_error(const char *op, const char *call, cudnnStatus_t s) {
  char detail[512] = "";
  cudnnGetLastErrorString(detail, sizeof detail);
  em_status code = CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_NOT_SUPPORTED ? EM_ERR_UNSUPPORTED
                   : s == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED ||
                           s == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED
                       ? EM_ERR_MEMORY
                       : EM_ERR_RUNTIME;
  return em_set_error(code, "%s: %s failed: %s%s%s", op, call, cudnnGetErrorString(s), detail[0] ? ": " : "", detail);
}

/* Returns from the calling function with that error when call fails. */
#define EM_DNN_CHECK(op, call)                                                        \
  do {                                                                                \
    cudnnStatus_t dnn_s_ = (call);                                                    \
    if (dnn_s_ != CUDNN_STATUS_SUCCESS) return em_gpu_dnn_error((op), #call, dnn_s_); \
  } while (0)

#endif
