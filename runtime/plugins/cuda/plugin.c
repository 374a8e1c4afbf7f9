/* plugin.c - the entry point libember calls after dlopen (runtime/cuda/loader.c).
 * Builds the backend table from each file's entries. A file that is not built leaves its
 * entries NULL, which the tensor core reports as "not supported on device cuda". */
#include "gpu.h"

/* Weak: the table still builds while a file is being written. */
#define WEAK __attribute__((weak))
WEAK void em_gpu_register_memory(em_backend *be);
WEAK void em_gpu_register_elementwise(em_backend *be);
WEAK void em_gpu_register_random(em_backend *be);
WEAK void em_gpu_register_reduce(em_backend *be);
WEAK void em_gpu_register_index(em_backend *be);
WEAK void em_gpu_register_blas(em_backend *be);
WEAK void em_gpu_register_nn(em_backend *be);
WEAK void em_gpu_register_optim(em_backend *be);

/* The rest of the plugin table (device.c, allocator.c, copy, pagerank.cu). */
WEAK void em_gpu_fill_plugin(em_cuda_plugin *p);
WEAK void em_gpu_fill_plugin_pagerank(em_cuda_plugin *p);   /* pagerank.cu */
WEAK void em_gpu_fill_plugin_nccl(em_cuda_plugin *p);   /* nccl_backend.c */

static em_backend backend = {.name = "cuda"};
static em_cuda_plugin plugin = {.abi = EM_CUDA_PLUGIN_ABI, .backend = &backend};

static int no_devices(const char **why) {
  if (why) *why = "this CUDA plugin was built without its device layer";
  return 0;
}

const em_cuda_plugin *em_cuda_plugin_entry(void) {
  static int ready;
  if (ready) return &plugin;
  void (*regs[])(em_backend *) = {em_gpu_register_memory, em_gpu_register_elementwise, em_gpu_register_random,
                                  em_gpu_register_reduce, em_gpu_register_index,       em_gpu_register_blas,
                                  em_gpu_register_nn,     em_gpu_register_optim};
  for (size_t i = 0; i < sizeof regs / sizeof regs[0]; i++)
    if (regs[i]) regs[i](&backend);
  plugin.device_count = no_devices;
  if (em_gpu_fill_plugin) em_gpu_fill_plugin(&plugin);
  if (em_gpu_fill_plugin_pagerank) em_gpu_fill_plugin_pagerank(&plugin);
  if (em_gpu_fill_plugin_nccl) em_gpu_fill_plugin_nccl(&plugin);
  ready = 1;
  return &plugin;
}
