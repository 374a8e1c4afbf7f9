/* backend_self.c - a world of one process, without MPI: what `ember script.lua` gets from
 * dist.init{backend = 'auto'} when no launcher started it. Every collective is complete
 * at once (a reduction over one rank is the tensor itself); gathers copy, on the tensors'
 * device (it serves CUDA tensors too). Scripts and pipelines written for several ranks run
 * unchanged on one. */
#include <stdlib.h>
#include <string.h>
#include "distributed/dist_impl.h"
#include "tensor/tensor_impl.h"
#include "plugins/plugin_api.h"

static em_status self_init(double timeout_s, int *rank, int *size, int *local_rank, void **impl) {
  (void)timeout_s;
  *rank = 0;
  *size = 1;
  *local_rank = 0;
  *impl = NULL;
  return EM_OK;
}

static em_status self_new_group(void *parent, int id, int n, const int *ranks, void **impl, int *rank) {
  (void)parent, (void)id, (void)n, (void)ranks;
  *impl = NULL;
  *rank = 0;
  return EM_OK;
}

static void self_free_group(void *impl) { (void)impl; }

/* out = in, element for element (same count and dtype, maybe other shapes): flat views
 * and em_copy_, so that the device's own copy runs (CUDA tensors included). */
static em_status copy_flat(em_tensor *out, const em_tensor *in) {
  int64_t n = em_tensor_numel(out), one = 1;
  if (n == 0) return EM_OK;
  if (out->storage->device.type == EM_CPU && in->storage->device.type == EM_CPU) {
    memcpy(em_tensor_data(out), em_tensor_data(in), (size_t)n * em_dtype_size(out->dtype));
    return EM_OK;
  }
  em_tensor *a = NULL, *b = NULL;
  em_status st = em_as_strided(&a, out, 1, &n, &one, out->offset);
  if (!st) st = em_as_strided(&b, in, 1, &n, &one, in->offset);
  if (!st) st = em_copy_(a, b);
  em_tensor_release(a);
  em_tensor_release(b);
  return st;
}

static em_status self_post(void *impl, em_dist_work *w) {
  (void)impl;
  w->started_at = em_clock_monotonic();
  em_status st = EM_OK;
  switch (w->kind) {
    case EM_DIST_OP_ALL_TO_ALL_V:
      /* the one rank sends in_counts[0] elements to itself and expects out_counts[0] */
      if (w->in_counts[0] != w->out_counts[0]) {
        char desc[256];
        emp_dist_describe(w, desc, sizeof desc);
        st = em_set_error(EM_ERR_SHAPE, "%s: rank 0 sends %lld elements to rank 0, which expects %lld (in_counts[0] "
                          "must equal out_counts[0])", desc, (long long)w->in_counts[0], (long long)w->out_counts[0]);
        break;
      }
      /* fall through */
    case EM_DIST_OP_ALL_GATHER:
    case EM_DIST_OP_REDUCE_SCATTER:
    case EM_DIST_OP_ALL_TO_ALL:
    case EM_DIST_OP_GATHER: /* rank 0 is the root: both buffers are here */
    case EM_DIST_OP_SCATTER:
    case EM_DIST_OP_ALL_GATHER_V: st = copy_flat(w->out, w->in); break;
    default: break; /* a reduction over one rank (all_reduce, reduce: 'avg' included) is the tensor itself */
  }
  /* send/recv cannot reach here: a rank never addresses itself */
  emp_dist_work_done(w, st, st ? em_last_error() : NULL);
  return EM_OK;
}

static void self_shutdown(int exit_status) { (void)exit_status; }

static void self_abort(const char *message, int exit_status) {
  (void)message;
  exit(exit_status);
}

static const em_dist_backend self_backend = {
    .name = "self",
    .init = self_init,
    .new_group = self_new_group,
    .free_group = self_free_group,
    .post = self_post,
    .shutdown = self_shutdown,
    .abort_job = self_abort,
    .progress = NULL, /* every work completes inside post */
    .run_direct = NULL,
    .attach = NULL, /* also serves CUDA tensors in a world of one (its copies dispatch) */
    .note_seq = NULL, /* no other rank asks about this one's progress */
    .report_timeout = NULL,
};

const em_dist_backend *dist_self_backend(void) { return &self_backend; }
