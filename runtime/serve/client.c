/* client.c - em_serve_client: a DEALER socket speaking ember serve's binary protocol
 * (wire.c) to its ZeroMQ endpoint. One request at a time: infer sends INFER with a new
 * request id and waits for the answer carrying that id (answers to requests that timed out
 * earlier are skipped). The Lua (ember.serve.Client) and Python (examples/serve_client.py)
 * clients speak the same protocol. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ember/core.h"
#include "serve_impl.h"

#ifdef EMBER_HAVE_ZMQ
#include <zmq.h>

struct em_serve_client {
  void *ctx, *sock;
  char endpoint[256];
  double timeout_s;
  uint64_t next_id;
  int n_out;
  int64_t version;
  char names[SV_MAX_IO][SV_NAME_MAX];
  em_tensor *outs[SV_MAX_IO];
};

static void clear_outputs(em_serve_client *c) {
  for (int i = 0; i < c->n_out; i++) em_tensor_release(c->outs[i]);
  c->n_out = 0;
}

em_status em_serve_client_open(em_serve_client **out, const char *endpoint, double timeout_s) {
  const char *op = "em_serve_client_open";
  if (!out || !endpoint) return em_set_error(EM_ERR_ARGUMENT, "%s: out or endpoint is NULL", op);
  *out = NULL;
  if (!(timeout_s > 0)) return em_set_error(EM_ERR_ARGUMENT, "%s: expected timeout_s > 0, got %g", op, timeout_s);
  em_serve_client *c = calloc(1, sizeof *c);
  if (!c) return em_set_error(EM_ERR_MEMORY, "%s: out of memory", op);
  int linger = 0;
  c->ctx = zmq_ctx_new();
  c->sock = c->ctx ? zmq_socket(c->ctx, ZMQ_DEALER) : NULL;
  if (!c->sock || zmq_setsockopt(c->sock, ZMQ_LINGER, &linger, sizeof linger) || zmq_connect(c->sock, endpoint)) {
    em_status st = em_set_error(EM_ERR_IO, "%s: cannot connect to '%s': %s (expected an address such as "
                                "tcp://127.0.0.1:5556)", op, endpoint, zmq_strerror(zmq_errno()));
    if (c->sock) zmq_close(c->sock);
    if (c->ctx) zmq_ctx_term(c->ctx);
    free(c);
    return st;
  }
  snprintf(c->endpoint, sizeof c->endpoint, "%s", endpoint);
  c->timeout_s = timeout_s;
  c->next_id = 1;
  *out = c;
  return EM_OK;
}

void em_serve_client_close(em_serve_client *c) {
  if (!c) return;
  clear_outputs(c);
  zmq_close(c->sock);
  zmq_ctx_term(c->ctx);
  free(c);
}

/* Reads one whole message into parts (at most cap; the rest dropped); returns the count. */
static int recv_message(void *sock, zmq_msg_t *parts, int cap) {
  int n = 0, more = 1;
  while (more) {
    zmq_msg_t part;
    zmq_msg_init(&part);
    if (zmq_msg_recv(&part, sock, 0) < 0) {
      zmq_msg_close(&part);
      break;
    }
    more = zmq_msg_more(&part);
    if (n < cap) parts[n++] = part;
    else zmq_msg_close(&part);
  }
  return n;
}

/* An answer's frames into the client's outputs, or the server's error. */
static em_status read_answer(em_serve_client *c, const char *model, const sv_wire_hdr *h, zmq_msg_t *parts, int n) {
  const char *op = "em_serve_client_infer";
  char err[SV_ERR_MAX];
  if (h->kind == SV_WIRE_ERROR) {
    size_t len = n > 1 ? zmq_msg_size(&parts[1]) : 0;
    return em_set_error(EM_ERR_RUNTIME, "%s: model '%s' at %s answered %u: %.*s", op, model, c->endpoint, h->status,
                        (int)(len > 1000 ? 1000 : len), n > 1 ? (const char *)zmq_msg_data(&parts[1]) : "");
  }
  if (h->kind != SV_WIRE_RESULT || n != 1 + 2 * (int)h->ntensors)
    return em_set_error(EM_ERR_RUNTIME, "%s: model '%s' at %s: a malformed answer (kind %u, %d frames for %u tensors)",
                        op, model, c->endpoint, h->kind, n, h->ntensors);
  for (int k = 0; k < (int)h->ntensors; k++) {
    sv_wire_tensor t;
    if (sv_wire_read_tensor(zmq_msg_data(&parts[1 + 2 * k]), zmq_msg_size(&parts[1 + 2 * k]),
                            zmq_msg_size(&parts[2 + 2 * k]), k, &t, err, sizeof err))
      return em_set_error(EM_ERR_RUNTIME, "%s: model '%s' at %s: a malformed answer: %s", op, model, c->endpoint, err);
    em_device cpu = {EM_CPU, 0};
    em_tensor *out = NULL;
    em_status st = em_empty(&out, t.ndim, t.shape, t.dtype, cpu);
    if (st) return st;
    if (t.nbytes) memcpy(em_tensor_data(out), zmq_msg_data(&parts[2 + 2 * k]), t.nbytes);
    strcpy(c->names[c->n_out], t.name);
    c->outs[c->n_out++] = out;
  }
  c->version = h->model_version;
  return EM_OK;
}

typedef em_status (*answer_fn)(em_serve_client *c, const char *model, const sv_wire_hdr *h, zmq_msg_t *parts, int n);

/* Sends the frames of b (consumed) and waits, at most the client's timeout, for the answer
 * to request id, which read takes; answers to requests given up on earlier are dropped. */
static em_status exchange(em_serve_client *c, const char *op, const char *model, sv_buf *b, const size_t *frame_len,
                          int nf, uint64_t id, answer_fn read) {
  em_status st = EM_OK;
  size_t off = 0;
  for (int i = 0; i < nf && !st; i++) {
    if (zmq_send(c->sock, b->data + off, frame_len[i], i + 1 < nf ? ZMQ_SNDMORE : 0) < 0)
      st = em_set_error(EM_ERR_IO, "%s: sending to %s failed: %s", op, c->endpoint, zmq_strerror(zmq_errno()));
    off += frame_len[i];
  }
  free(b->data);
  b->data = NULL;
  if (st) return st;
  double end = em_clock_monotonic() + c->timeout_s;
  for (;;) {
    double left = end - em_clock_monotonic();
    if (left <= 0)
      return em_set_error(EM_ERR_RUNTIME, "%s: model '%s' at %s: no answer within %g s", op, model, c->endpoint,
                          c->timeout_s);
    zmq_pollitem_t item = {c->sock, 0, ZMQ_POLLIN, 0};
    int rc = zmq_poll(&item, 1, (long)(left * 1000) + 1);
    if (rc < 0 && zmq_errno() != EINTR)
      return em_set_error(EM_ERR_IO, "%s: waiting for %s failed: %s", op, c->endpoint, zmq_strerror(zmq_errno()));
    if (rc <= 0 || !(item.revents & ZMQ_POLLIN)) continue;
    zmq_msg_t parts[SV_MAX_FRAMES];
    int np = recv_message(c->sock, parts, SV_MAX_FRAMES);
    sv_wire_hdr h;
    char name[SV_NAME_MAX], err[SV_ERR_MAX];
    int bad = np < 1 || sv_wire_read_header(zmq_msg_data(&parts[0]), zmq_msg_size(&parts[0]), &h, name, err, sizeof err);
    if (!bad && h.request_id == id) st = read(c, model, &h, parts, np);
    for (int i = 0; i < np; i++) zmq_msg_close(&parts[i]);
    if (!bad && h.request_id == id) return st;
  }
}

/* The answer to a LOAD or UNLOAD: a RESULT of no tensors naming the version, or an error. */
static em_status read_version_answer(em_serve_client *c, const char *model, const sv_wire_hdr *h, zmq_msg_t *parts,
                                     int n) {
  if (h->kind == SV_WIRE_ERROR) {
    size_t len = n > 1 ? zmq_msg_size(&parts[1]) : 0;
    return em_set_error(EM_ERR_RUNTIME, "model '%s' at %s answered %u: %.*s", model, c->endpoint, h->status,
                        (int)(len > 1000 ? 1000 : len), n > 1 ? (const char *)zmq_msg_data(&parts[1]) : "");
  }
  if (h->kind != SV_WIRE_RESULT || h->ntensors != 0 || n != 1)
    return em_set_error(EM_ERR_RUNTIME, "model '%s' at %s: a malformed answer (kind %u, %d frames)", model, c->endpoint,
                        h->kind, n);
  c->version = h->model_version;
  return EM_OK;
}

/* LOAD (path) or UNLOAD (path NULL); *version: the version loaded or unloaded. */
/* LOAD (path: a checkpoint, or NULL for the one the model was started with) or UNLOAD. */
static em_status version_request(em_serve_client *c, const char *op, const char *model, int load, const char *path,
                                 int64_t *version) {
  if (!c || !model || !version) return em_set_error(EM_ERR_ARGUMENT, "%s: the client, model or version is NULL", op);
  if (!sv_valid_name(model))
    return em_set_error(EM_ERR_ARGUMENT, "%s: model name '%s': expected 1 to %d of A-Z a-z 0-9 _ - .", op, model,
                        SV_NAME_MAX - 1);
  if (path && (!*path || strlen(path) >= SV_PATH_MAX))
    return em_set_error(EM_ERR_ARGUMENT, "%s: checkpoint path: expected 1 to %d bytes, got %zu", op, SV_PATH_MAX - 1,
                        strlen(path));
  *version = 0;
  clear_outputs(c);
  sv_buf b = {0};
  size_t frame_len[2];
  uint64_t id = c->next_id++;
  int nf = sv_wire_write_tensor_frames(&b, frame_len, load ? SV_WIRE_LOAD : SV_WIRE_UNLOAD, id, 0, 0, model, 0, NULL,
                                       NULL, 0, -1);
  if (nf > 0 && path) {
    size_t start = b.len;
    sv_buf_puts(&b, path);
    frame_len[nf++] = b.len - start;
  }
  if (nf < 0 || b.failed) {
    free(b.data);
    return em_set_error(EM_ERR_MEMORY, "%s: out of memory writing the request", op);
  }
  em_status st = exchange(c, op, model, &b, frame_len, nf, id, read_version_answer);
  if (st) {
    char why[SV_ERR_MAX + 256];
    snprintf(why, sizeof why, "%s", em_last_error());
    return strncmp(why, op, strlen(op)) ? em_set_error(st, "%s: %s", op, why) : st;
  }
  *version = c->version;
  return EM_OK;
}

em_status em_serve_client_load(em_serve_client *c, const char *model, const char *checkpoint, int64_t *version) {
  return version_request(c, "em_serve_client_load", model, 1, checkpoint, version);
}

em_status em_serve_client_unload(em_serve_client *c, const char *model, int64_t *version) {
  return version_request(c, "em_serve_client_unload", model, 0, NULL, version);
}

em_status em_serve_client_infer(em_serve_client *c, const char *model, int n, const char *const *names,
                                em_tensor *const *inputs, int *n_outputs) {
  const char *op = "em_serve_client_infer";
  if (!c || !model || (n && (!names || !inputs)) || !n_outputs)
    return em_set_error(EM_ERR_ARGUMENT, "%s: the client, model, names, inputs or n_outputs is NULL", op);
  *n_outputs = 0;
  clear_outputs(c);
  if (n < 1 || n > SV_MAX_IO) return em_set_error(EM_ERR_ARGUMENT, "%s: expected 1 to %d inputs, got %d", op, SV_MAX_IO, n);
  if (!sv_valid_name(model))
    return em_set_error(EM_ERR_ARGUMENT, "%s: model name '%s': expected 1 to %d of A-Z a-z 0-9 _ - .", op, model,
                        SV_NAME_MAX - 1);
  em_tensor *cont[SV_MAX_IO] = {0};
  em_status st = EM_OK;
  for (int i = 0; i < n && !st; i++) {
    if (!names[i] || !sv_valid_name(names[i])) {
      st = em_set_error(EM_ERR_ARGUMENT, "%s: input %d: name '%s': expected 1 to %d of A-Z a-z 0-9 _ - .", op, i,
                        names[i] ? names[i] : "(null)", SV_NAME_MAX - 1);
    } else if (!inputs[i] || !sv_wire_dtype_code(em_tensor_dtype(inputs[i])) || em_tensor_ndim(inputs[i]) < 1) {
      st = em_set_error(EM_ERR_ARGUMENT, "%s: input '%s': expected a tensor [rows, ...] of float32, float64, int32, "
                        "int64, uint8 or bool", op, names[i]);
    } else {
      em_device cpu = {EM_CPU, 0};
      em_tensor *onhost = NULL;
      st = em_to(&onhost, inputs[i], em_tensor_dtype(inputs[i]), cpu);
      if (!st) {
        st = em_contiguous(&cont[i], onhost);
        em_tensor_release(onhost);
      }
    }
  }
  sv_buf b = {0};
  size_t frame_len[SV_MAX_FRAMES];
  uint64_t id = c->next_id++;
  int nf = st ? -1 : sv_wire_write_tensor_frames(&b, frame_len, SV_WIRE_INFER, id, 0, 0, model, n, names, cont, 0, -1);
  for (int i = 0; i < n; i++)
    if (cont[i]) em_tensor_release(cont[i]);
  if (st) {
    free(b.data);
    return st;
  }
  if (nf < 0) {
    free(b.data);
    return em_set_error(EM_ERR_MEMORY, "%s: out of memory writing the request", op);
  }
  st = exchange(c, op, model, &b, frame_len, nf, id, read_answer);
  if (st) clear_outputs(c);
  *n_outputs = c->n_out;
  return st;
}

const char *em_serve_client_output_name(const em_serve_client *c, int i) {
  return c && i >= 0 && i < c->n_out ? c->names[i] : NULL;
}

em_status em_serve_client_output(em_serve_client *c, int i, em_tensor **out) {
  if (!c || !out) return em_set_error(EM_ERR_ARGUMENT, "em_serve_client_output: the client or out is NULL");
  if (i < 0 || i >= c->n_out)
    return em_set_error(EM_ERR_INDEX, "em_serve_client_output: output %d of %d", i, c->n_out);
  em_tensor_retain(c->outs[i]);
  *out = c->outs[i];
  return EM_OK;
}

int64_t em_serve_client_version(const em_serve_client *c) { return c ? c->version : 0; }

#else

em_status em_serve_client_open(em_serve_client **out, const char *endpoint, double timeout_s) {
  (void)endpoint, (void)timeout_s;
  if (out) *out = NULL;
  return em_set_error(EM_ERR_UNSUPPORTED, "em_serve_client_open: this ember was built without ZeroMQ (libzmq3-dev)");
}
void em_serve_client_close(em_serve_client *c) { (void)c; }
em_status em_serve_client_infer(em_serve_client *c, const char *model, int n, const char *const *names,
                                em_tensor *const *inputs, int *n_outputs) {
  (void)c, (void)model, (void)n, (void)names, (void)inputs, (void)n_outputs;
  return em_set_error(EM_ERR_UNSUPPORTED, "em_serve_client_infer: this ember was built without ZeroMQ (libzmq3-dev)");
}
const char *em_serve_client_output_name(const em_serve_client *c, int i) {
  (void)c, (void)i;
  return NULL;
}
em_status em_serve_client_output(em_serve_client *c, int i, em_tensor **out) {
  (void)c, (void)i, (void)out;
  return em_set_error(EM_ERR_UNSUPPORTED, "em_serve_client_output: this ember was built without ZeroMQ");
}
int64_t em_serve_client_version(const em_serve_client *c) {
  (void)c;
  return 0;
}
em_status em_serve_client_load(em_serve_client *c, const char *model, const char *checkpoint, int64_t *version) {
  (void)c, (void)model, (void)checkpoint, (void)version;
  return em_set_error(EM_ERR_UNSUPPORTED, "em_serve_client_load: this ember was built without ZeroMQ (libzmq3-dev)");
}
em_status em_serve_client_unload(em_serve_client *c, const char *model, int64_t *version) {
  (void)c, (void)model, (void)version;
  return em_set_error(EM_ERR_UNSUPPORTED, "em_serve_client_unload: this ember was built without ZeroMQ (libzmq3-dev)");
}

#endif
