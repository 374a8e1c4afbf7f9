/* rnn.c - one recurrent layer (RNN, LSTM, GRU) in one direction over a whole sequence,
 * recorded as one autograd node whose backward walks time in C (runtime/cpu/rnn.c).
 * Multi-layer and bidirectional stacks, batch_first and dropout between layers are the
 * Lua modules' (lua/ember/nn/recurrent.lua): each layer is one call here.
 *
 * Saved for the backward: x, w_ih, w_hh (contiguous), the states before and after every
 * step and each step's gate activations; the lengths and sizes sit in the node's context.
 * On another device the backend's rnn_layer entries run the layer (CUDA: cuDNN) and the
 * node saves x, h0, c0, y and what the backend kept (its copy of the weights and its
 * reserve space): rnn_device_forward below. */
#include <stdlib.h>
#include <string.h>
#include "cpu/cpu_seq.h"
#include "nn_impl.h"

static const char *const mode_names[] = {"rnn_tanh", "rnn_relu", "lstm", "gru"};

typedef struct rnn_ctx {
  cpu_rnn_dims d;
  int has_lengths;
  int64_t lengths[]; /* [B] */
} rnn_ctx;

static void free_ctx(em_node *n) { free(n->ctx); }

static em_status new_like(em_tensor **out, const em_tensor *like) {
  *out = NULL;
  return em_empty(out, like->ndim, like->sizes, like->dtype, like->storage->device);
}

static em_status rnn_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  rnn_ctx *c = n->ctx;
  cpu_rnn_dims d = c->d;
  d.lengths = c->has_lengths ? c->lengths : NULL;
  const em_tensor *x = n->saved[0], *w_ih = n->saved[1], *w_hh = n->saved[2];
  em_tensor *gy = NULL, *gs = NULL, *g[7] = {NULL};
  int64_t bh[2] = {d.B, d.H}, gh = cpu_rnn_gates(d.mode) * d.H;
  em_status st = EM_OK;
  if (go[0]) st = em_contiguous(&gy, go[0]);
  if (!st && go[1]) st = em_contiguous(&gs, go[1]);
  /* inputs: x, h0, c0, w_ih, w_hh, b_ih, b_hh */
  for (int i = 0; i < 7 && !st; i++) {
    if (!em_node_needs_input_grad(n, i)) continue;
    if (i == 0 || i == 3 || i == 4) st = new_like(&g[i], i == 0 ? x : i == 3 ? w_ih : w_hh);
    else if (i <= 2) st = em_empty(&g[i], 2, bh, x->dtype, x->storage->device);
    else st = em_empty(&g[i], 1, &gh, x->dtype, x->storage->device);
  }
  if (!st)
    st = cpu_rnn_backward(&d, g[0], g[1], g[2], g[3], g[4], g[5], g[6], gy, gs, x, w_ih, w_hh, n->saved[3], n->saved[4],
                          n->saved[5]);
  for (int i = 0; i < 7; i++) {
    if (!st) gi[i] = g[i];
    else em_tensor_release(g[i]);
  }
  em_tensor_release(gy);
  em_tensor_release(gs);
  return st;
}

/* saved: 0 x, 1 h0, 2 c0, 3 y, 4 the backend's */
static em_status rnn_device_backward(em_node *n, em_tensor *const *go, em_tensor **gi) {
  rnn_ctx *c = n->ctx;
  em_rnn_params d = c->d;
  d.lengths = c->has_lengths ? c->lengths : NULL;
  const em_tensor *x = n->saved[0];
  const em_backend *be = nn_backend(mode_names[d.mode], x);
  if (!be) return em_last_status();
  em_tensor *gy = NULL, *gs = NULL, *g[7] = {NULL};
  int64_t bh[2] = {d.B, d.H}, gh = cpu_rnn_gates(d.mode) * d.H, wih[2] = {gh, d.NI}, whh[2] = {gh, d.H};
  em_status st = EM_OK;
  if (go[0]) st = em_contiguous(&gy, go[0]);
  if (!st && go[1]) st = em_contiguous(&gs, go[1]);
  /* inputs: x, h0, c0, w_ih, w_hh, b_ih, b_hh */
  for (int i = 0; i < 7 && !st; i++) {
    if (!em_node_needs_input_grad(n, i)) continue;
    if (i == 0) st = new_like(&g[0], x);
    else if (i <= 2) st = em_empty(&g[i], 2, bh, x->dtype, x->storage->device);
    else if (i <= 4) st = em_empty(&g[i], 2, i == 3 ? wih : whh, x->dtype, x->storage->device);
    else st = em_empty(&g[i], 1, &gh, x->dtype, x->storage->device);
  }
  if (!st)
    st = be->rnn_layer_backward(&d, g[0], g[1], g[2], g[3], g[4], g[5], g[6], gy, gs, x, n->saved[1], n->saved[2],
                                n->saved[3], n->saved[4]);
  for (int i = 0; i < 7; i++) {
    if (!st) gi[i] = g[i];
    else em_tensor_release(g[i]);
  }
  em_tensor_release(gy);
  em_tensor_release(gs);
  return st;
}

/* The layer on a device whose backend has rnn_layer: c holds the contiguous inputs (x, h0,
 * c0, w_ih, w_hh, b_ih, b_hh), in the caller's; rc is taken over. */
static em_status rnn_device_forward(const char *op, const em_backend *be, rnn_ctx *rc, em_tensor **c,
                                    const em_tensor *const *in, em_tensor **out, em_tensor **state) {
  const em_rnn_params *d = &rc->d;
  em_tensor *y = NULL, *s = NULL, *saved = NULL;
  int grad = ag_any_requires_grad(7, in);
  em_device dev = c[0]->storage->device;
  em_status st = EM_OK;
  for (int64_t b = 0; d->lengths && b < d->B && !st; b++)
    if (d->lengths[b] == 0)
      st = em_set_error(EM_ERR_UNSUPPORTED,
                        "%s: lengths[%lld] = 0: an empty sequence is supported on the CPU only (cuDNN needs at least "
                        "one step)",
                        op, (long long)b);
  if (!st) st = em_empty(&y, 3, (int64_t[]){d->T, d->B, d->H}, c[0]->dtype, dev);
  if (!st) st = em_empty(&s, 3, (int64_t[]){d->mode == EM_RNN_LSTM ? 2 : 1, d->B, d->H}, c[0]->dtype, dev);
  if (!st) st = be->rnn_layer(d, y, s, grad ? &saved : NULL, c[0], c[1], c[2], c[3], c[4], c[5], c[6]);
  if (!st && grad) {
    em_node *n = ag_node_new(d->mode == EM_RNN_LSTM  ? "LstmBackward"
                             : d->mode == EM_RNN_GRU ? "GruBackward"
                                                     : "RnnBackward",
                             rnn_device_backward, 7, in, 2);
    if (n) { /* the node owns the context from here */
      n->ctx = rc;
      n->release_ctx = free_ctx;
      rc = NULL;
    }
    int save_ok = n && !ag_node_save(n, 0, c[0]) && !ag_node_save(n, 1, c[1]) && !ag_node_save(n, 2, c[2]) &&
                  !ag_node_save(n, 3, y) && !ag_node_save(n, 4, saved);
    if (n && !save_ok) {
      ag_node_release(n);
      n = NULL;
    }
    if (!n) st = em_last_status();
    else if (!(st = ag_set_history(y, n, 0))) st = ag_set_history(s, n, 1);
  }
  free(rc);
  em_tensor_release(saved);
  if (st) {
    em_tensor_release(y), em_tensor_release(s);
    return st;
  }
  *out = y, *state = s;
  return EM_OK;
}

static em_status check_state(const char *op, const em_tensor *t, const char *what, const em_tensor *x, int64_t B,
                             int64_t H) {
  em_status st = nn_check_like(op, t, what, x);
  if (st || !t) return st;
  if (t->ndim != 2 || t->sizes[0] != B || t->sizes[1] != H)
    return em_set_error(EM_ERR_SHAPE, "%s: expected %s of shape [%lld, %lld] (batch, hidden_size), got %s", op, what,
                        (long long)B, (long long)H, EM_SHAPE(t));
  return EM_OK;
}

/* Copies lengths (int32/int64 [B], each in 0..T) into dst. */
static em_status read_lengths(const char *op, int64_t *dst, const em_tensor *lengths, int64_t B, int64_t T) {
  em_status st = nn_check_index(op, lengths, "lengths");
  if (st) return st;
  if (lengths->storage->device.type != EM_CPU)
    return em_set_error(EM_ERR_DEVICE, "%s: expected the lengths on the CPU (as PyTorch's pack_padded_sequence)", op);
  if (lengths->ndim != 1 || lengths->sizes[0] != B)
    return em_set_error(EM_ERR_SHAPE, "%s: expected lengths of shape [%lld] (one per sequence), got %s", op,
                        (long long)B, EM_SHAPE(lengths));
  const char *p = em_tensor_ptr(lengths);
  for (int64_t b = 0; b < B; b++) {
    int64_t off = b * lengths->strides[0];
    int64_t v = lengths->dtype == EM_INT64 ? ((const int64_t *)p)[off] : ((const int32_t *)p)[off];
    if (v < 0 || v > T)
      return em_set_error(EM_ERR_INDEX, "%s: lengths[%lld] = %lld is outside 0..%lld (the sequence length)", op,
                          (long long)b, (long long)v, (long long)T);
    dst[b] = v;
  }
  return EM_OK;
}

em_status em_nn_rnn(em_tensor **out, em_tensor **state, em_rnn_mode mode, const em_tensor *x, const em_tensor *h0,
                    const em_tensor *c0, const em_tensor *w_ih, const em_tensor *w_hh, const em_tensor *b_ih,
                    const em_tensor *b_hh, const em_tensor *lengths, int reverse) {
  em_status st;
  if ((int)mode < EM_RNN_TANH || mode > EM_RNN_GRU)
    return em_set_error(EM_ERR_ARGUMENT, "rnn: unknown mode %d (expected rnn_tanh, rnn_relu, lstm or gru)", (int)mode);
  const char *op = mode_names[mode];
  if ((st = nn_check_out(op, out)) || (st = nn_check_out(op, state)) || (st = nn_check_float(op, x, "input")))
    return st;
  if (x->ndim != 3)
    return em_set_error(EM_ERR_SHAPE, "%s: expected the input to be 3-d [seq_len, batch, input_size], got %s", op,
                        EM_SHAPE(x));
  if (x->dtype != EM_FLOAT32 && x->dtype != EM_FLOAT64)
    return em_set_error(EM_ERR_UNSUPPORTED, "%s: only float32/float64 tensors are supported so far, got %s", op,
                        em_dtype_name(x->dtype));
  const em_backend *be = NULL;
  if (x->storage->device.type != EM_CPU) {
    if (!(be = nn_backend(op, x))) return em_last_status();
    if (!be->rnn_layer || !be->rnn_layer_backward)
      return em_set_error(EM_ERR_UNSUPPORTED, "%s: not supported on %s tensors (the %s backend has no kernel for it)",
                          op, be->name, be->name);
  }
  int64_t T = x->sizes[0], B = x->sizes[1], NI = x->sizes[2], G = cpu_rnn_gates(mode);
  if (T < 1 || B < 1 || NI < 1)
    return em_set_error(EM_ERR_SHAPE, "%s: expected a non-empty input [seq_len, batch, input_size], got %s", op,
                        EM_SHAPE(x));
  if (!w_ih || !w_hh) return em_set_error(EM_ERR_ARGUMENT, "%s: expected the weights w_ih and w_hh, got nil", op);
  if ((st = nn_check_like(op, w_ih, "weight_ih", x)) || (st = nn_check_like(op, w_hh, "weight_hh", x))) return st;
  if (w_ih->ndim != 2 || w_ih->sizes[0] % G || w_ih->sizes[0] == 0 || w_ih->sizes[1] != NI)
    return em_set_error(EM_ERR_SHAPE,
                        "%s: expected weight_ih of shape [%lld * hidden_size, %lld] for an input of shape %s, got %s",
                        op, (long long)G, (long long)NI, EM_SHAPE(x), EM_SHAPE(w_ih));
  int64_t H = w_ih->sizes[0] / G;
  if (w_hh->ndim != 2 || w_hh->sizes[0] != G * H || w_hh->sizes[1] != H)
    return em_set_error(EM_ERR_SHAPE, "%s: expected weight_hh of shape [%lld, %lld], got %s", op, (long long)(G * H),
                        (long long)H, EM_SHAPE(w_hh));
  if ((st = nn_check_vector(op, b_ih, "bias_ih", G * H, x)) || (st = nn_check_vector(op, b_hh, "bias_hh", G * H, x)) ||
      (st = check_state(op, h0, "h0", x, B, H)) || (st = check_state(op, c0, "c0", x, B, H)))
    return st;
  if (c0 && mode != EM_RNN_LSTM)
    return em_set_error(EM_ERR_ARGUMENT, "%s: only the LSTM takes an initial cell state c0", op);

  rnn_ctx *rc = calloc(1, sizeof(rnn_ctx) + (size_t)B * sizeof(int64_t));
  if (!rc) return em_set_error(EM_ERR_MEMORY, "%s: out of memory", op);
  if (lengths && (st = read_lengths(op, rc->lengths, lengths, B, T))) {
    free(rc);
    return st;
  }
  rc->has_lengths = lengths != NULL;
  rc->d = (cpu_rnn_dims){
      .mode = mode, .reverse = reverse != 0, .T = T, .B = B, .NI = NI, .H = H, .lengths = lengths ? rc->lengths : NULL};

  /* c: contiguous inputs x, h0, c0, w_ih, w_hh, b_ih, b_hh; r: y, sh, sc, act, state */
  const em_tensor *in[7] = {x, h0, c0, w_ih, w_hh, b_ih, b_hh};
  em_tensor *c[7] = {NULL}, *r[5] = {NULL};
  st = EM_OK;
  for (int i = 0; i < 7 && !st; i++) st = nn_contiguous(&c[i], in[i]);
  if (be) {
    if (!st) st = rnn_device_forward(op, be, rc, c, in, out, state);
    else free(rc);
    nn_release(7, c);
    return st;
  }
  int64_t W = cpu_rnn_act_width(mode, H), S = mode == EM_RNN_LSTM ? 2 : 1;
  em_device dev = x->storage->device;
  if (!st) st = em_empty(&r[0], 3, (int64_t[]){T, B, H}, x->dtype, dev);
  if (!st) st = em_empty(&r[1], 3, (int64_t[]){T + 1, B, H}, x->dtype, dev);
  if (!st && mode == EM_RNN_LSTM) st = em_empty(&r[2], 3, (int64_t[]){T + 1, B, H}, x->dtype, dev);
  if (!st) st = em_empty(&r[3], 3, (int64_t[]){T, B, W}, x->dtype, dev);
  if (!st) st = em_empty(&r[4], 3, (int64_t[]){S, B, H}, x->dtype, dev);
  if (!st) st = cpu_rnn_forward(&rc->d, r[0], r[1], r[2], r[3], c[0], c[1], c[2], c[3], c[4], c[5], c[6]);
  if (!st) { /* the final states: the slot walked to last */
    size_t es = em_dtype_size(x->dtype), bytes = (size_t)(B * H) * es;
    int64_t last = reverse ? 0 : T;
    memcpy(em_tensor_ptr(r[4]), em_tensor_ptr(r[1]) + (size_t)last * bytes, bytes);
    if (r[2]) memcpy(em_tensor_ptr(r[4]) + bytes, em_tensor_ptr(r[2]) + (size_t)last * bytes, bytes);
  }
  if (!st) {
    *out = r[0], *state = r[4];
    r[0] = r[4] = NULL;
  }
  if (!st && ag_any_requires_grad(7, in)) {
    em_node *n = ag_node_new(mode == EM_RNN_LSTM  ? "LstmBackward"
                             : mode == EM_RNN_GRU ? "GruBackward"
                                                  : "RnnBackward",
                             rnn_backward, 7, in, 2);
    if (n) { /* the node owns the context from here */
      n->ctx = rc;
      n->release_ctx = free_ctx;
      rc = NULL;
    }
    int save_ok = n && !ag_node_save(n, 0, c[0]) && !ag_node_save(n, 1, c[3]) && !ag_node_save(n, 2, c[4]) &&
                  !ag_node_save(n, 3, r[1]) && !ag_node_save(n, 4, r[2]) && !ag_node_save(n, 5, r[3]);
    if (n && !save_ok) {
      ag_node_release(n);
      n = NULL;
    }
    if (!n) {
      em_tensor_release(*out), em_tensor_release(*state);
      *out = *state = NULL;
      st = em_last_status();
    } else if (!(st = ag_set_history(*out, n, 0))) {
      st = ag_set_history(*state, n, 1);
    }
  }
  free(rc);
  nn_release(7, c);
  nn_release(5, r);
  return st;
}
