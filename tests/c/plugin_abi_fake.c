/* plugin_abi_fake.c - a plugin built "against another ember", for tests/c/test_plugin_abi.c:
 * both entry points (the CUDA plugin's and the MPI plugin's) return tables whose handshake
 * describes layouts that differ from this build's (EM_MAX_DIMS 16 and a larger em_tensor;
 * an older process-group API). Nothing past the handshake is filled: libember must refuse
 * the plugin without reading it. Registered by tests/extra.cmake as ember_fake_plugin. */
#include <string.h>
#include "cuda/cuda_plugin.h"
#include "distributed/dist_impl.h"

static em_plugin_abi_item cuda_items[] = {EM_CUDA_PLUGIN_ABI(EM_PLUGIN_ABI_ITEM)};
static em_plugin_abi_item dist_items[] = {EM_DIST_PLUGIN_ABI(EM_PLUGIN_ABI_ITEM)};
static em_cuda_plugin cuda_plugin;
static em_dist_plugin dist_plugin;

static void change(em_plugin_abi_item *items, size_t n, const char *what, uint64_t value) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(items[i].what, what) == 0) items[i].value = value;
}

__attribute__((visibility("default"))) const em_cuda_plugin *em_cuda_plugin_entry(void) {
  size_t n = sizeof cuda_items / sizeof cuda_items[0];
  change(cuda_items, n, "EM_MAX_DIMS", 16);
  change(cuda_items, n, "sizeof(em_tensor)", sizeof(em_tensor) + 128);
  cuda_plugin.abi = (em_plugin_abi){EM_PLUGIN_HANDSHAKE, (uint32_t)n, cuda_items};
  return &cuda_plugin;
}

__attribute__((visibility("default"))) const em_dist_plugin *em_dist_mpi_backend(void) {
  size_t n = sizeof dist_items / sizeof dist_items[0];
  change(dist_items, n, "EM_DIST_BACKEND_API_VERSION", EM_DIST_BACKEND_API_VERSION - 1);
  dist_plugin.abi = (em_plugin_abi){EM_PLUGIN_HANDSHAKE, (uint32_t)n, dist_items};
  return &dist_plugin;
}
