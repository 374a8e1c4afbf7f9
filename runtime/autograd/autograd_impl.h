/* autograd_impl.h - the tape: nodes, edges and the per-tensor autograd record, shared by
 * the engine (engine.c, meta.c) and the differentiable ops (ops_*.c). */
#ifndef EMBER_AUTOGRAD_IMPL_H
#define EMBER_AUTOGRAD_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include "ember/autograd.h"
#include "ember/sparse.h"
#include "tensor/tensor_impl.h"

#define EM_NODE_MAX_SAVED 6
#define EM_NODE_MAX_OUTPUTS 2

typedef struct em_node em_node;

/* Computes grad_in[i] (new references, NULL for none) from grad_out[j] (borrowed; NULL
 * when that output got no gradient). needs_input_grad(n, i) says which are wanted. */
typedef em_status (*em_backward_fn)(em_node *n, em_tensor *const *grad_out, em_tensor **grad_in);

typedef struct em_edge {
  em_node *node; /* producer of the input (its grad_fn or its leaf accumulator); NULL: no grad */
  int input_nr; /* which output of that node */
} em_edge;

struct em_node {
  atomic_int refcount;
  const char *name;
  em_backward_fn backward; /* NULL for a leaf accumulator */
  void (*release_ctx)(em_node *n);
  uint64_t seq; /* creation order: the engine runs newest first */
  int n_inputs;
  em_edge *next; /* n_inputs edges */
  int n_outputs;
  bool released; /* saved state dropped after a backward without retain_graph */
  bool cpu_bf16; /* recorded under CPU bfloat16 autocast: its backward computes in it too */
  /* Saved state for the backward function. Tensors are history-free aliases (no cycles). */
  em_tensor *saved[EM_NODE_MAX_SAVED];
  double d[4];
  int64_t i[8];
  /* Inputs' shapes and dtypes (ag_node_new fills them for the first two inputs), so
   * that gradients can be reduced and cast back without keeping the inputs alive. */
  int ndims[2];
  int64_t shapes[2][EM_MAX_DIMS];
  em_dtype dtypes[2];
  void *ctx;
  /* Leaf accumulator: the leaf it feeds (strong reference). */
  em_tensor *leaf;
  /* Non-leaf outputs that asked for retain_grad (weak; cleared when the tensor dies). */
  em_tensor *retain[EM_NODE_MAX_OUTPUTS];
  /* Engine scratch, valid during one backward. */
  int deps;
  uint64_t ready_order; /* leaf accumulators: the order they became ready in (FIFO) */
  em_tensor **buffer;
  em_sparse_grad *sparse_in; /* leaf accumulators: row-sparse gradients delivered (sparse_grad.c) */
};

typedef struct em_leaf_hook_entry {
  int64_t id;
  em_leaf_hook fn;
  void *ctx;
} em_leaf_hook_entry;

typedef struct em_autograd_meta {
  bool requires_grad;
  bool retains_grad;
  em_tensor *grad;
  em_node *grad_fn; /* strong */
  int output_nr;
  em_node *accumulator; /* weak: the leaf's accumulator while a graph uses it */
  em_leaf_hook_entry *hooks;
  int n_hooks, cap_hooks;
  em_tensor *self; /* the tensor this record belongs to (weak) */
  em_tensor *grad_dest; /* em_set_grad_destination (strong), or NULL */
  em_sparse_grad *sparse_grad; /* a row-sparse .grad (strong); never together with grad */
} em_autograd_meta;

/* ---- for differentiable ops ---- */

/* The record of t, created on demand (NULL when create is false and there is none). */
em_autograd_meta *ag_meta(em_tensor *t, bool create);
/* True when grad mode is on and any of the n inputs requires grad. */
bool ag_any_requires_grad(int n, const em_tensor *const *inputs);
/* A node with n_inputs edges wired to the inputs' producers (inputs may hold NULLs). */
em_node *ag_node_new(const char *name, em_backward_fn backward, int n_inputs, const em_tensor *const *inputs,
                     int n_outputs);
/* Saves a history-free alias of t in slot i (t may be NULL). */
em_status ag_node_save(em_node *n, int slot, const em_tensor *t);
/* Makes node the grad_fn of out (output number nr); takes over the caller's node reference
 * when nr is the last output. out then requires grad. */
em_status ag_set_history(em_tensor *out, em_node *node, int nr);
void ag_node_retain(em_node *n);
void ag_node_release(em_node *n);
/* Frees saved tensors and custom state (after a backward without retain_graph). */
void ag_node_drop_saved(em_node *n);
static inline bool em_node_needs_input_grad(const em_node *n, int i) { return n->next[i].node != NULL; }
/* The tensor input i's gradient may be written into (a new reference), or NULL: its
 * leaf's grad destination, when input i is a leaf that has no .grad, no gradient from
 * elsewhere in this backward yet, and a destination of shape `shape` and dtype `dtype`.
 * A backward function that fills it returns it as the input's gradient. */
em_tensor *ag_node_grad_destination(const em_node *n, int i, int ndim, const int64_t *shape, em_dtype dtype);
/* Sums grad over broadcast dims so that it has the given shape (new reference). */
em_status ag_sum_to(em_tensor **out, const em_tensor *grad, int ndim, const int64_t *shape);
/* Takes over g and stores in *slot its sum over broadcast dims cast to input i's dtype. */
em_status ag_finish_input_grad(em_node *n, int i, em_tensor *g, em_tensor **slot);
/* Makes n the history of *out; when n is NULL (recording failed) releases *out and
 * returns the error, so a failed op never hands back a half-recorded result. */
em_status ag_finish_record(em_tensor **out, em_node *n);
/* Differentiable ops always allocate: a given output is an error while recording. */
em_status ag_check_out_free(const char *op, em_tensor **out);
/* Refuses an in-place write to t while recording, when t needs grad. */
em_status ag_check_inplace(const char *op, const em_tensor *t);

/* ---- row-sparse gradients (sparse_grad.c) ---- */
/* A sparse gradient over rows (int64 [nnz], from 0, ascending, distinct) and values [nnz, D]
 * (contiguous); takes over both references. NULL when out of memory. */
em_sparse_grad *ag_sparse_wrap(int64_t num_rows, em_tensor *rows, em_tensor *values);
/* The device's backend when it has the sparse kernels, else NULL with an error naming op. */
const struct em_backend *ag_sparse_backend(const char *op, em_device device);
/* For backward functions: hands g (taken over) to input i's leaf accumulator; an input
 * that is not a leaf gets it as a dense tensor in *grad_in. */
em_status ag_sparse_deliver(em_node *n, int i, em_sparse_grad *g, em_tensor **grad_in);
/* For the engine: merges the accumulator's delivered sparse gradient into its leaf. When it
 * stays sparse, *done is set (the leaf's gradient is complete); otherwise *dense (the
 * buffer's dense gradient, may be NULL) holds the sum to accumulate densely, and the leaf's
 * own sparse gradient has been made dense. */
em_status ag_sparse_accumulate(em_node *acc, em_tensor **dense, int *done);

#endif

/* ---- scratch: tensor expressions in backward functions without error plumbing ----
 * Each call returns a new tensor tracked by the scratch (released by ag_sc_end), or NULL
 * once any call has failed; the first error is kept. ag_sc_keep hands one tensor out. */
typedef struct em_scratch {
  em_status st;
  int n;
  em_tensor *tmp[48];
} em_scratch;

em_tensor *ag_sc_track(em_scratch *sc, em_tensor *t, em_status st);
em_tensor *ag_sc_binary(em_scratch *sc, em_binop op, const em_tensor *a, const em_tensor *b);
em_tensor *ag_sc_scalar(em_scratch *sc, em_binop op, const em_tensor *a, double s);
em_tensor *ag_sc_rscalar(em_scratch *sc, em_binop op, double s, const em_tensor *a);
em_tensor *ag_sc_unary(em_scratch *sc, em_unop op, const em_tensor *a);
em_tensor *ag_sc_sum(em_scratch *sc, const em_tensor *a, const int *dims, int ndims, int keepdim);
em_tensor *ag_sc_matmul(em_scratch *sc, const em_tensor *a, const em_tensor *b);
em_tensor *ag_sc_transpose(em_scratch *sc, const em_tensor *a, int d0, int d1);
em_tensor *ag_sc_reshape(em_scratch *sc, const em_tensor *a, int ndim, const int64_t *sizes);
em_tensor *ag_sc_expand(em_scratch *sc, const em_tensor *a, int ndim, const int64_t *sizes);
em_tensor *ag_sc_zeros(em_scratch *sc, int ndim, const int64_t *sizes, em_dtype dtype, em_device device);
em_tensor *ag_sc_to(em_scratch *sc, const em_tensor *a, em_dtype dtype);
/* A new reference to t for the caller (NULL if the scratch failed). */
em_tensor *ag_sc_keep(em_scratch *sc, em_tensor *t);
/* Releases every tracked tensor; returns the first error. */
em_status ag_sc_end(em_scratch *sc);
