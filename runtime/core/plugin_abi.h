/* plugin_abi.h - the handshake between libember and a plugin it opens (the CUDA plugin,
 * runtime/cuda/cuda_plugin.h; the MPI plugin, runtime/distributed/dist_impl.h).
 *
 * Plugin and libember exchange structs (tensors, storages, tables of function pointers,
 * work items) whose layout each side took from its own copy of the headers. A plugin
 * built against another ember would read those structs at the wrong offsets, so before
 * libember reads anything else it compares the plugin's description of what it depends
 * on with its own: each item is an expression as written in the headers ("EM_MAX_DIMS",
 * "sizeof(em_tensor)", "EM_BACKEND_API_VERSION") and its value in that build. Each table
 * lists its items (EM_TENSOR_ABI in tensor_impl.h, EM_BACKEND_ABI in backend.h,
 * EM_DIST_ABI in dist_impl.h, the plugins' lists beside their tables); both sides expand
 * the same list, so a difference can only be a difference between the two builds. */
#ifndef EMBER_PLUGIN_ABI_H
#define EMBER_PLUGIN_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of em_plugin_abi itself. It sits where plugins of the first ABI kept their
 * version number (1), so that an older plugin is recognised without reading further. */
#define EM_PLUGIN_HANDSHAKE 2

typedef struct em_plugin_abi_item {
  const char *what; /* the expression as written, e.g. "sizeof(em_tensor)" */
  uint64_t value; /* its value in the build that made this item */
} em_plugin_abi_item;

typedef struct em_plugin_abi {
  uint32_t handshake; /* EM_PLUGIN_HANDSHAKE; nothing else is read unless it matches */
  uint32_t count;
  const em_plugin_abi_item *items; /* [count] */
} em_plugin_abi;

/* For a list macro L(X) of expressions: static const em_plugin_abi_item items[] = {L(EM_PLUGIN_ABI_ITEM)}; */
#define EM_PLUGIN_ABI_ITEM(expr) {#expr, (uint64_t)(expr)},
#define EM_PLUGIN_ABI_OF(items) \
  { EM_PLUGIN_HANDSHAKE, (uint32_t)(sizeof(items) / sizeof((items)[0])), (items) }

/* 0 when the plugin at path describes the same layout as ours (libember's own items for
 * that plugin); -1 otherwise, with why (cap bytes) naming every item that differs, e.g.
 * ".../libember_cuda.so was built against a different ember (sizeof(em_tensor) is 216
 * there, 208 in this libember); rebuild it together with this libember". */
int core_plugin_abi_check(const char *path, const em_plugin_abi *theirs, const em_plugin_abi *ours, char *why,
                          size_t cap);

#ifdef __cplusplus
}
#endif
#endif
