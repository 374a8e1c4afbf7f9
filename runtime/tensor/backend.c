/* backend.c - finds the dispatch table of a device. */
#include "backend.h"
#include "cuda/cuda_plugin.h"

extern const em_backend cpu_tensor_backend;

const em_backend *tn_backend_for(const char *op, em_device device) {
  if (device.type == EM_CPU) return &cpu_tensor_backend;
  if (device.type == EM_CUDA) {
    const char *why = NULL;
    const em_cuda_plugin *p = cuda_plugin_get(&why);
    int count = p ? p->device_count(&why) : 0;
    if (p && device.index >= 0 && device.index < count) return p->backend;
    if (count > 0)
      em_set_error(EM_ERR_DEVICE, "%s: device cuda:%d does not exist (%d CUDA devices)", op, device.index, count);
    else
      em_set_error(EM_ERR_DEVICE, "%s: device cuda:%d is not available: %s", op, device.index,
                   why ? why : "no CUDA device found");
    return NULL;
  }
  em_set_error(EM_ERR_DEVICE, "%s: unknown device type %d", op, device.type);
  return NULL;
}
