/* backend_self.c - a world of one process, without MPI: what `ember script.lua` gets from
 * dist.init{backend = 'auto'} when no launcher started it. Every collective is complete
 * at once (a reduction over one rank is the tensor itself); gathers copy. Scripts and
 * pipelines written for several ranks run unchanged on one. */
#include <stdlib.h>
#include <string.h>
#include "dist/dist_impl.h"
#include "tensor/tensor_impl.h"

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

static em_status self_post(void *impl, em_dist_work *w) {
  (void)impl;
  w->started_at = em_dist_now();
  if (w->kind == EM_DIST_OP_ALL_GATHER || w->kind == EM_DIST_OP_REDUCE_SCATTER) {
    size_t bytes = (size_t)em_tensor_numel(w->out) * em_dtype_size(w->out->dtype);
    if (bytes) memcpy(em_tensor_data(w->out), em_tensor_data(w->in), bytes);
  }
  /* send/recv cannot reach here: a rank never addresses itself */
  em_dist_work_done(w, EM_OK, NULL);
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
};

const em_dist_backend *em_dist_self_backend(void) { return &self_backend; }
