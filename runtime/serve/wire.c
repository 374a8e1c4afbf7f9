/* wire.c - ember serve's binary ZeroMQ protocol (layouts in serve_impl.h): the decoder of
 * headers and tensor frames, the INFER parser, the RESULT and ERROR writers.
 *
 * Every field a peer sends is checked before it is used (sizes by division, so a huge count
 * cannot wrap), and every failure names the field: header.magic, tensors[1] (x).shape[2].
 * The client (zmq.c, em_serve_client) reads RESULT messages with the same functions. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "serve_impl.h"

_Static_assert(sizeof(sv_wire_hdr) == 32, "the wire header is 32 bytes");
_Static_assert(sizeof(sv_wire_desc) == 8, "a tensor desc starts with 8 bytes");

#define MAX_ELEMS ((int64_t)1 << 28)

static const em_dtype wire_dtypes[] = {EM_FLOAT32, EM_FLOAT64, EM_INT32, EM_INT64, EM_UINT8, EM_BOOL}; /* codes 1.. */

int sv_wire_dtype_code(em_dtype dtype) {
  for (size_t i = 0; i < sizeof wire_dtypes / sizeof *wire_dtypes; i++)
    if (wire_dtypes[i] == dtype) return (int)i + 1;
  return 0;
}

static int fail(char *err, size_t errcap, int status, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errcap, int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errcap, fmt, ap);
  va_end(ap);
  return status;
}

static int name_ok(const char *p, size_t n) {
  if (n == 0 || n >= SV_NAME_MAX) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = p[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
          c == '.'))
      return 0;
  }
  return 1;
}

int sv_wire_read_header(const void *data, size_t size, sv_wire_hdr *h, char name[SV_NAME_MAX], char *err,
                        size_t errcap) {
  name[0] = '\0';
  if (size < sizeof *h)
    return fail(err, errcap, 400, "header: %zu bytes, expected at least %zu (magic, version, kind, id, model version, "
                "status, name length, tensor count)", size, sizeof *h);
  memcpy(h, data, sizeof *h);
  if (h->magic != SV_WIRE_MAGIC)
    return fail(err, errcap, 400, "header.magic: 0x%08x, expected 0x%08x (\"EMSV\")", h->magic, SV_WIRE_MAGIC);
  if (h->version != SV_WIRE_VERSION)
    return fail(err, errcap, 400, "header.version: %u, expected %d", h->version, SV_WIRE_VERSION);
  if (h->kind < SV_WIRE_INFER || h->kind > SV_WIRE_UNLOAD)
    return fail(err, errcap, 400, "header.kind: %u, expected 1 (INFER), 2 (RESULT), 3 (ERROR), 4 (LOAD) or 5 (UNLOAD)",
                h->kind);
  if (size - sizeof *h != h->name_len)
    return fail(err, errcap, 400, "header.name_len: %u, but %zu bytes of name follow the header", h->name_len,
                size - sizeof *h);
  const char *p = (const char *)data + sizeof *h;
  if (!name_ok(p, h->name_len) && !(h->kind == SV_WIRE_ERROR && h->name_len == 0)) /* an unreadable request's error */
    return fail(err, errcap, 400, "header.model: expected 1 to %d of A-Z a-z 0-9 _ - ., got %u bytes", SV_NAME_MAX - 1,
                h->name_len);
  memcpy(name, p, h->name_len);
  name[h->name_len] = '\0';
  if (h->ntensors > SV_MAX_IO)
    return fail(err, errcap, 400, "header.ntensors: %u, at most %d", h->ntensors, SV_MAX_IO);
  return 0;
}

int sv_wire_read_tensor(const void *desc, size_t desc_size, size_t data_size, int k, sv_wire_tensor *t, char *err,
                        size_t errcap) {
  sv_wire_desc d;
  memset(t, 0, sizeof *t);
  if (desc_size < sizeof d)
    return fail(err, errcap, 400, "tensors[%d].desc: %zu bytes, expected at least %zu", k, desc_size, sizeof d);
  memcpy(&d, desc, sizeof d);
  if (d.dtype < 1 || d.dtype > sizeof wire_dtypes / sizeof *wire_dtypes)
    return fail(err, errcap, 400, "tensors[%d].dtype: code %u, expected 1 to 6 (FP32 FP64 INT32 INT64 UINT8 BOOL)", k,
                d.dtype);
  if (d.ndim > SV_MAX_DIMS + 1)
    return fail(err, errcap, 400, "tensors[%d].ndim: %u, at most %d", k, d.ndim, SV_MAX_DIMS + 1);
  size_t want = sizeof d + (size_t)d.ndim * sizeof(int64_t) + d.name_len;
  if (desc_size != want)
    return fail(err, errcap, 400, "tensors[%d].desc: %zu bytes, expected %zu for %u dimensions and a %u-byte name", k,
                desc_size, want, d.ndim, d.name_len);
  const char *p = (const char *)desc + sizeof d;
  const char *name = p + (size_t)d.ndim * sizeof(int64_t);
  if (!name_ok(name, d.name_len))
    return fail(err, errcap, 400, "tensors[%d].name: expected 1 to %d of A-Z a-z 0-9 _ - ., got %u bytes", k,
                SV_NAME_MAX - 1, d.name_len);
  memcpy(t->name, name, d.name_len);
  t->name[d.name_len] = '\0';
  t->dtype = wire_dtypes[d.dtype - 1];
  t->ndim = d.ndim;
  int64_t total = 1;
  for (int i = 0; i < d.ndim; i++) {
    memcpy(&t->shape[i], p + (size_t)i * sizeof(int64_t), sizeof(int64_t));
    if (t->shape[i] < 0 || t->shape[i] > MAX_ELEMS)
      return fail(err, errcap, 400, "tensors[%d] (%s).shape[%d]: %lld, expected 0 to %lld", k, t->name, i,
                  (long long)t->shape[i], (long long)MAX_ELEMS);
    total *= t->shape[i];
    if (total > MAX_ELEMS)
      return fail(err, errcap, 400, "tensors[%d] (%s).shape: more than %lld elements", k, t->name, (long long)MAX_ELEMS);
  }
  t->nbytes = (size_t)total * em_dtype_size(t->dtype);
  if (data_size != t->nbytes)
    return fail(err, errcap, 400, "tensors[%d] (%s).data: %zu bytes, expected %zu (%lld %s elements)", k, t->name,
                data_size, t->nbytes, (long long)total, sv_datatype_name(t->dtype));
  return 0;
}

int sv_wire_parse_infer(const sv_model_spec *spec, const sv_wire_hdr *h, int nframes, const void *const *frames,
                        const size_t *sizes, sv_request **out, char *err, size_t errcap) {
  *out = NULL;
  if (h->kind != SV_WIRE_INFER) return fail(err, errcap, 400, "header.kind: %u, expected 1 (INFER)", h->kind);
  if (nframes != 2 * (int)h->ntensors)
    return fail(err, errcap, 400, "header.ntensors: %u tensors need %u frames after the header, got %d", h->ntensors,
                2 * h->ntensors, nframes);
  sv_request *r = calloc(1, sizeof *r);
  if (!r) return fail(err, errcap, 500, "out of memory");
  int seen[SV_MAX_IO] = {0}, status = 0;
  for (int k = 0; k < (int)h->ntensors && !status; k++) {
    sv_wire_tensor t;
    status = sv_wire_read_tensor(frames[2 * k], sizes[2 * k], sizes[2 * k + 1], k, &t, err, errcap);
    if (status) break;
    int idx = -1;
    for (int i = 0; i < spec->n_inputs; i++)
      if (!strcmp(spec->inputs[i].name, t.name)) idx = i;
    if (idx < 0) {
      status = fail(err, errcap, 400, "tensors[%d].name: model '%s' has no input '%s'", k, spec->name, t.name);
      break;
    }
    const sv_io *io = &spec->inputs[idx];
    if (seen[idx]) {
      status = fail(err, errcap, 400, "tensors[%d] (%s).name: the input is given twice", k, t.name);
      break;
    }
    seen[idx] = 1;
    if (t.dtype != io->dtype) {
      status = fail(err, errcap, 400, "tensors[%d] (%s).dtype: expected %s, got %s", k, t.name,
                    sv_datatype_name(io->dtype), sv_datatype_name(t.dtype));
      break;
    }
    if (t.ndim != io->ndim + 1) {
      status = fail(err, errcap, 400, "tensors[%d] (%s).shape: expected %d dimensions (a batch size, then %d), got %d",
                    k, t.name, io->ndim + 1, io->ndim, t.ndim);
      break;
    }
    for (int d = 1; d < t.ndim && !status; d++)
      if (io->shape[d - 1] >= 0 && t.shape[d] != io->shape[d - 1])
        status = fail(err, errcap, 400, "tensors[%d] (%s).shape[%d]: expected %lld, got %lld", k, t.name, d,
                      (long long)io->shape[d - 1], (long long)t.shape[d]);
    if (status) break;
    if (t.shape[0] < 1) {
      status = fail(err, errcap, 400, "tensors[%d] (%s).shape[0]: expected a batch size >= 1, got 0", k, t.name);
      break;
    }
    if (t.shape[0] > spec->max_batch) {
      status = fail(err, errcap, 413, "tensors[%d] (%s).shape[0]: %lld rows are more than the model's max_batch_size "
                    "%lld", k, t.name, (long long)t.shape[0], (long long)spec->max_batch);
      break;
    }
    if (r->rows && t.shape[0] != r->rows) {
      status = fail(err, errcap, 400, "tensors[%d] (%s).shape[0]: %lld rows, but another input has %lld", k, t.name,
                    (long long)t.shape[0], (long long)r->rows);
      break;
    }
    r->rows = t.shape[0];
    for (int d = 1; d < t.ndim; d++) r->inner[idx][d - 1] = t.shape[d];
    r->data[idx] = malloc(t.nbytes ? t.nbytes : 1);
    if (!r->data[idx]) {
      status = fail(err, errcap, 500, "tensors[%d] (%s): out of memory", k, t.name);
      break;
    }
    if (t.nbytes) memcpy(r->data[idx], frames[2 * k + 1], t.nbytes);
  }
  for (int i = 0; i < spec->n_inputs && !status; i++)
    if (!seen[i]) status = fail(err, errcap, 400, "tensors: the input '%s' is missing", spec->inputs[i].name);
  if (status) {
    sv_request_free(r);
    return status;
  }
  r->proto = SV_ZMQ;
  r->wire_id = h->request_id;
  atomic_init(&r->refs, 1);
  *out = r;
  return 200;
}

/* ---------------------------------------------------------------- writers */
static void put_header(sv_buf *b, size_t *frame_len, int *nf, int kind, uint64_t id, int64_t model_version,
                       int status, const char *model, uint32_t ntensors) {
  sv_wire_hdr h = {SV_WIRE_MAGIC, SV_WIRE_VERSION, (uint16_t)kind, id, model_version, (uint16_t)status, 0, ntensors};
  size_t name_len = model ? strlen(model) : 0;
  if (name_len >= SV_NAME_MAX) name_len = SV_NAME_MAX - 1;
  h.name_len = (uint16_t)name_len;
  size_t start = b->len;
  sv_buf_put(b, (const char *)&h, sizeof h);
  if (name_len) sv_buf_put(b, model, name_len);
  frame_len[(*nf)++] = b->len - start;
}

int sv_wire_write_tensor_frames(sv_buf *b, size_t *frame_len, int kind, uint64_t id, int64_t model_version,
                                int status, const char *model, int n, const char *const *names, em_tensor *const *tensors, int64_t row0,
                                int64_t rows) {
  int nf = 0;
  if (n < 0 || n > SV_MAX_IO) return -1;
  put_header(b, frame_len, &nf, kind, id, model_version, status, model, (uint32_t)n);
  for (int i = 0; i < n; i++) {
    const em_tensor *t = tensors[i];
    int nd = em_tensor_ndim(t);
    size_t name_len = strlen(names[i]);
    sv_wire_desc d = {(uint8_t)sv_wire_dtype_code(em_tensor_dtype(t)), (uint8_t)nd, (uint16_t)name_len, 0};
    size_t start = b->len;
    sv_buf_put(b, (const char *)&d, sizeof d);
    int64_t per_row = 1, t_rows = rows < 0 ? em_tensor_size(t, 0) : rows;
    for (int k = 0; k < nd; k++) {
      int64_t size = k == 0 ? t_rows : em_tensor_size(t, k);
      if (k) per_row *= size;
      sv_buf_put(b, (const char *)&size, sizeof size);
    }
    sv_buf_put(b, names[i], name_len);
    frame_len[nf++] = b->len - start;
    size_t esize = em_dtype_size(em_tensor_dtype(t));
    size_t nbytes = nd ? (size_t)(t_rows * per_row) * esize : esize;
    start = b->len;
    if (nbytes) sv_buf_put(b, (const char *)em_tensor_data(t) + (size_t)(row0 * per_row) * esize, nbytes);
    frame_len[nf++] = b->len - start;
  }
  return b->failed ? -1 : nf;
}

int sv_wire_write_error(sv_buf *b, size_t *frame_len, uint64_t id, int status, const char *model, const char *message) {
  int nf = 0;
  put_header(b, frame_len, &nf, SV_WIRE_ERROR, id, 0, status, model, 0);
  size_t start = b->len;
  sv_buf_puts(b, message);
  frame_len[nf++] = b->len - start;
  return b->failed ? -1 : nf;
}

int sv_wire_answer_result(sv_request *r, const sv_model_spec *spec, em_tensor *const *outputs, int64_t row0) {
  const char *names[SV_MAX_IO];
  for (int i = 0; i < spec->n_outputs; i++) names[i] = spec->outputs[i].name;
  sv_buf b = {0};
  int nf = sv_wire_write_tensor_frames(&b, r->frame_len, SV_WIRE_RESULT, r->wire_id, r->version, 200, spec->name, spec->n_outputs,
                                       names, outputs, row0, r->rows);
  if (nf < 0) {
    free(b.data);
    return -1;
  }
  free(r->body);
  r->body = b.data;
  r->body_len = b.len;
  r->nframes = nf;
  r->status = 200;
  return 0;
}

int sv_wire_answer_error(sv_request *r, const char *model, int status, const char *message) {
  sv_buf b = {0};
  int nf = sv_wire_write_error(&b, r->frame_len, r->wire_id, status, model, message);
  if (nf < 0) {
    free(b.data);
    r->nframes = 0;
    return -1;
  }
  free(r->body);
  r->body = b.data;
  r->body_len = b.len;
  r->nframes = nf;
  r->status = status;
  return 0;
}
