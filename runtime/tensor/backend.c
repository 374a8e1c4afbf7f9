/* backend.c - finds the dispatch table of a device. */
#include "backend.h"

extern const em_backend em_cpu_backend;
#ifdef EMBER_HAVE_CUDA
extern const em_backend em_cuda_backend;
#endif

const em_backend *em_backend_for(const char *op, em_device device) {
  if (device.type == EM_CPU) return &em_cpu_backend;
#ifdef EMBER_HAVE_CUDA
  if (device.type == EM_CUDA && em_device_available(device)) return &em_cuda_backend;
#endif
  if (device.type == EM_CUDA)
    em_set_error(EM_ERR_DEVICE, "%s: device cuda:%d is not available (%d CUDA devices found%s)", op, device.index,
                 em_device_count(EM_CUDA),
#ifdef EMBER_HAVE_CUDA
                 ""
#else
                 "; this ember was built without the CUDA backend"
#endif
    );
  else
    em_set_error(EM_ERR_DEVICE, "%s: unknown device type %d", op, device.type);
  return NULL;
}
