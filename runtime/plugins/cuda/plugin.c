/* plugin.c - the entry point libember calls after dlopen (runtime/cuda/loader.c), and the
 * extras this plugin offers by name (cuda_plugin.h), in the manner of ggml's
 * get_proc_address: what is not devices, streams or memory is looked up when a caller
 * needs it, so the core table never grows for it. */
#include <string.h>
#include "gpu.h"

static const struct {
  const char *name;
  em_cuda_proc fn;
} extras[] = {
    {EM_CUDA_EXTRA_PAGERANK, (em_cuda_proc)em_gpu_pagerank},
    {EM_CUDA_EXTRA_PART_PAGERANK, (em_cuda_proc)em_gpu_part_pagerank},
#ifdef EMBER_HAVE_NCCL
    {EM_CUDA_EXTRA_NCCL, (em_cuda_proc)em_gpu_nccl_backend},
#endif
};

em_cuda_proc em_gpu_get_proc(const char *name) {
  for (size_t i = 0; name && i < sizeof extras / sizeof extras[0]; i++)
    if (strcmp(extras[i].name, name) == 0) return extras[i].fn;
  return NULL;
}

const em_cuda_plugin *em_cuda_plugin_entry(void) { return &em_gpu_plugin; }
