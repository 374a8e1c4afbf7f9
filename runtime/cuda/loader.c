/* loader.c - opens the CUDA plugin (libember_cuda.so) on the first CUDA question.
 *
 * The plugin is looked for next to libember.so, or where EMBER_CUDA_PLUGIN points. A
 * missing plugin, a missing driver and a machine without a GPU are all ordinary: CUDA is
 * then "unavailable" with a reason that says which, and CPU work is unaffected. */
#define _GNU_SOURCE 1 /* dladdr */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda_plugin.h"
#include "distributed/dist_impl.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const em_cuda_plugin *plugin;
static char path[4096];
static char reason[2048];

/* What this libember expects of the plugin, item by item (core/plugin_abi.h). */
static const em_plugin_abi_item abi_items[] = {EM_CUDA_PLUGIN_ABI(EM_PLUGIN_ABI_ITEM)};
static const em_plugin_abi abi = EM_PLUGIN_ABI_OF(abi_items);

static void load(void) {
  const char *env = getenv("EMBER_CUDA_PLUGIN");
  if (env && *env) {
    snprintf(path, sizeof path, "%s", env);
  } else {
    Dl_info info;
    path[0] = 0;
    if (dladdr((void *)cuda_plugin_get, &info) && info.dli_fname) {
      const char *slash = strrchr(info.dli_fname, '/');
      if (slash) snprintf(path, sizeof path, "%.*s/libember_cuda.so", (int)(slash - info.dli_fname), info.dli_fname);
    }
    if (!path[0]) snprintf(path, sizeof path, "libember_cuda.so");
  }
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h && !strchr(path, '/')) h = dlopen("libember_cuda.so", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    snprintf(reason, sizeof reason,
             "the CUDA backend is not built or cannot be loaded (%s: %s); build ember on a machine with the CUDA "
             "toolkit and cuDNN, or set EMBER_CUDA_PLUGIN",
             path, why ? why : "unknown error");
    return;
  }
  em_cuda_plugin_entry_fn entry = (em_cuda_plugin_entry_fn)dlsym(h, "em_cuda_plugin_entry");
  const em_cuda_plugin *p = entry ? entry() : NULL;
  if (!p) {
    snprintf(reason, sizeof reason, "%s is not a CUDA plugin of ember (no em_cuda_plugin_entry, or it returned NULL)",
             path);
    return;
  }
  /* The handshake is the table's first member in every version, so reading it is safe
   * whatever else the plugin's table holds; nothing else is read unless it matches. */
  if (core_plugin_abi_check(path, &p->abi, &abi, reason, sizeof reason)) return;
  plugin = p;
}

const em_cuda_plugin *cuda_plugin_get(const char **why) {
  pthread_once(&once, load);
  if (!plugin && why) *why = reason;
  return plugin;
}

em_cuda_proc cuda_plugin_extra(const char *op, const char *name) {
  const char *why = NULL;
  const em_cuda_plugin *p = cuda_plugin_get(&why);
  if (!p) {
    em_set_error(EM_ERR_UNSUPPORTED, "%s: %s", op, why);
    return NULL;
  }
  em_cuda_proc f = p->get_proc(name);
  if (!f)
    em_set_error(EM_ERR_UNSUPPORTED, "%s: the CUDA plugin %s has no extra '%s' (it was built without it)", op, path,
                 name);
  return f;
}
