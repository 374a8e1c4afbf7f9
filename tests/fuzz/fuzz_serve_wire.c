/* fuzz_serve_wire.c - ember serve's binary ZeroMQ protocol (runtime/serve/wire.c): the
 * frames of a message (fuzz_wire.h's cutting: 2-byte lengths, the last frame takes the rest)
 * read as the endpoint reads them, the header, then INFER's tensors for a model with a
 * float32 [-1, 4] and an int64 [2] input (fuzz_serve_request.c's). A request that parses is
 * answered (its inputs standing in for outputs) and the answer read back as a client reads
 * it: a writer whose output the reader refuses is a finding (abort), as is any crash. */
#include "fuzz.h"
#include "serve/serve_impl.h"

#define MAX_FRAMES 40

static int cut(const uint8_t *data, size_t size, const void **f, size_t *len) {
  int n = 0;
  while (n < MAX_FRAMES && size) {
    size_t l = size;
    if (n < MAX_FRAMES - 1) {
      if (size < 2) break;
      l = (size_t)data[0] | (size_t)data[1] << 8;
      data += 2, size -= 2;
      if (l > size) l = size;
    }
    f[n] = data, len[n] = l;
    data += l, size -= l;
    n++;
  }
  return n;
}

static void read_back(const sv_buf *b, const size_t *frame_len, int nf, int kind) {
  const void *f[SV_MAX_FRAMES];
  size_t off = 0;
  for (int i = 0; i < nf; i++) f[i] = b->data + off, off += frame_len[i];
  sv_wire_hdr h;
  char name[SV_NAME_MAX], err[SV_ERR_MAX];
  if (sv_wire_read_header(f[0], frame_len[0], &h, name, err, sizeof err) || h.kind != kind) abort();
  for (int k = 0; kind == SV_WIRE_RESULT && k < (int)h.ntensors; k++) {
    sv_wire_tensor t;
    if (sv_wire_read_tensor(f[1 + 2 * k], frame_len[1 + 2 * k], frame_len[2 + 2 * k], k, &t, err, sizeof err)) abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static sv_model_spec spec;
  if (!spec.n_inputs) {
    strcpy(spec.name, "m");
    spec.max_batch = 8;
    spec.n_inputs = 2;
    strcpy(spec.inputs[0].name, "x");
    spec.inputs[0].dtype = EM_FLOAT32;
    spec.inputs[0].ndim = 2;
    spec.inputs[0].shape[0] = -1;
    spec.inputs[0].shape[1] = 4;
    strcpy(spec.inputs[1].name, "ids");
    spec.inputs[1].dtype = EM_INT64;
    spec.inputs[1].ndim = 1;
    spec.inputs[1].shape[0] = 2;
    spec.n_outputs = 2;
    strcpy(spec.outputs[0].name, "x");
    strcpy(spec.outputs[1].name, "ids");
  }
  const void *f[MAX_FRAMES];
  size_t len[MAX_FRAMES];
  int n = cut(data, size, f, len);
  if (n < 1) return 0;
  sv_wire_hdr h;
  char name[SV_NAME_MAX], err[SV_ERR_MAX];
  sv_request *r = NULL;
  int status = sv_wire_read_header(f[0], len[0], &h, name, err, sizeof err);
  if (!status) status = sv_wire_parse_infer(&spec, &h, n - 1, f + 1, len + 1, &r, err, sizeof err);
  if (status != 200) { /* the error answer, as the endpoint sends it */
    sv_buf b = {0};
    size_t fl[SV_MAX_FRAMES];
    int nf = sv_wire_write_error(&b, fl, h.request_id, status ? status : 400, name, err);
    if (nf > 0) read_back(&b, fl, nf, SV_WIRE_ERROR);
    free(b.data);
    return 0;
  }
  em_tensor *outs[2] = {NULL, NULL};
  em_device cpu = {EM_CPU, 0};
  for (int i = 0; i < 2; i++) {
    int64_t sizes[SV_MAX_DIMS + 1], count = r->rows;
    sizes[0] = r->rows;
    for (int d = 0; d < spec.inputs[i].ndim; d++) count *= (sizes[d + 1] = r->inner[i][d]);
    if (em_empty(&outs[i], spec.inputs[i].ndim + 1, sizes, spec.inputs[i].dtype, cpu) == EM_OK && count)
      memcpy(em_tensor_data(outs[i]), r->data[i], (size_t)count * em_dtype_size(spec.inputs[i].dtype));
  }
  if (outs[0] && outs[1] && sv_wire_answer_result(r, &spec, outs, 0) == 0) {
    sv_buf b = {r->body, r->body_len, r->body_len, 0};
    read_back(&b, r->frame_len, r->nframes, SV_WIRE_RESULT);
  }
  for (int i = 0; i < 2; i++)
    if (outs[i]) em_tensor_release(outs[i]);
  sv_request_free(r);
  return 0;
}
