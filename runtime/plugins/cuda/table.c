/* table.c - the plugin's tables, filled statically: the tensor backend, generated from the
 * list of runtime/tensor/backend.h (a kernel missing from the plugin is an undefined
 * reference when libember_cuda.so links), and the core interface of cuda_plugin.h
 * (devices, memory, streams, events, copies). The extras are plugin.c's. */
#include "distributed/dist_impl.h"
#include "gpu_runtime.h"

/* Optional entries this backend leaves to their default (backend.h says what it is). */
#define em_gpu_optional_count_correct EM_BACKEND_DEFAULT
/* Row-sparse embedding gradients (embedding.cu), their coalescing and the row-wise
 * optimizers (sparse_rows.cu), DLRM's dot interaction (interaction.cu). */
#define em_gpu_optional_embedding_bag_sparse_backward em_gpu_embedding_bag_sparse_backward
#define em_gpu_optional_sparse_coalesce em_gpu_sparse_coalesce
#define em_gpu_optional_optim_rows em_gpu_optim_rows
#define em_gpu_optional_dot_interaction em_gpu_dot_interaction
#define em_gpu_optional_dot_interaction_backward em_gpu_dot_interaction_backward

/* The sequence layers (issue 17): rnn.cu (cuDNN), attention.cu. */
#define em_gpu_optional_rnn_layer em_gpu_rnn_layer
#define em_gpu_optional_rnn_layer_backward em_gpu_rnn_layer_backward
#define em_gpu_optional_attention em_gpu_attention
#define em_gpu_optional_attention_backward em_gpu_attention_backward

/* The exact GELU's backward in one pass: the CPU's own; composed from elementwise ops on the GPU. */
#define em_gpu_optional_gelu_backward EM_BACKEND_DEFAULT
#define em_gpu_optional_gelu_with_grad EM_BACKEND_DEFAULT

static const em_backend backend = {.name = "cuda", EM_BACKEND_TABLE(em_gpu)};

/* The layout this plugin was built with, checked by libember before it reads the rest. */
static const em_plugin_abi_item abi_items[] = {EM_CUDA_PLUGIN_ABI(EM_PLUGIN_ABI_ITEM)};

const em_cuda_plugin em_gpu_plugin = {
    .abi = EM_PLUGIN_ABI_OF(abi_items),
    .backend = &backend,
    .device_count = em_gpu_plugin_device_count,
    .device_props = em_gpu_device_props,
    .versions = em_gpu_versions,
    .set_device = em_gpu_set_device,
    .current_device = em_gpu_current_device,
    .synchronize = em_gpu_synchronize,
    .memory_stats = em_gpu_memory_stats,
    .reset_peak = em_gpu_reset_peak,
    .empty_cache = em_gpu_empty_cache,
    .set_memory_limit = em_gpu_set_memory_limit,
    .record_stream = em_gpu_record_stream,
    .host_alloc_pinned = em_gpu_host_alloc_pinned,
    .host_free_pinned = em_gpu_host_free_pinned,
    .stream_new = em_gpu_stream_new,
    .stream_free = em_gpu_stream_free,
    .stream_synchronize = em_gpu_stream_synchronize,
    .stream_query = em_gpu_stream_query,
    .stream_wait_event = em_gpu_stream_wait_event,
    .stream_device = em_gpu_stream_device,
    .set_stream = em_gpu_set_stream,
    .current_stream = em_gpu_get_stream,
    .event_new = em_gpu_event_new,
    .event_free = em_gpu_event_free,
    .event_record = em_gpu_event_record,
    .event_synchronize = em_gpu_event_synchronize,
    .event_query = em_gpu_event_query,
    .event_elapsed_ms = em_gpu_event_elapsed_ms,
    .copy_async = em_gpu_copy_async,
    .get_proc = em_gpu_get_proc,
};
