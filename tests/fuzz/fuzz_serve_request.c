/* fuzz_serve_request.c - the KServe v2 infer request parser of ember serve
 * (runtime/serve/request.c, sv_parse_infer) on any body, against a model with two inputs:
 * a float32 [-1, 4] and an int64 [2]. A parsed request is also written back as a response
 * (its inputs standing in for outputs), so the writer sees whatever the parser accepts.
 * An input starting with byte 0x01 is a binary tensor extension body: a 2-byte little-endian
 * JSON length (Inference-Header-Content-Length), then the JSON and the binary data.
 * Every body is also parsed by jansson alone (sv_parse_infer_jansson): the status, the error
 * message and every parsed value must be the same (lift.c's number arrays). The repository
 * API's load and index bodies (sv_parse_load, sv_parse_index) are parsed from the same bytes. */
#include "fuzz.h"
#include "serve/serve_impl.h"

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
  sv_request *r = NULL;
  char err[SV_ERR_MAX];
  size_t json_len = 0;
  /* the repository API's bodies (load, index) on the same bytes: 0, or 400 with a message (a
   * load's path "" meaning the model's own checkpoint) */
  char path[SV_PATH_MAX];
  int ready_only = 0;
  err[0] = 0;
  int lst = sv_parse_load((const char *)data, size, path, sizeof path, err, sizeof err);
  if ((lst && (lst != 400 || !err[0])) || strlen(path) >= sizeof path) abort();
  err[0] = 0;
  int ist = sv_parse_index((const char *)data, size, &ready_only, err, sizeof err);
  if ((ist && (ist != 400 || !err[0])) || (ready_only != 0 && ready_only != 1)) abort();
  if (size >= 3 && data[0] == 1) {
    json_len = (size_t)data[1] | (size_t)data[2] << 8;
    data += 3, size -= 3;
  }
  /* the parse with lift.c's number arrays answers as jansson's alone, value for value */
  sv_request *plain = NULL;
  char plain_err[SV_ERR_MAX];
  int st = sv_parse_infer(&spec, (const char *)data, size, json_len, &r, err, sizeof err);
  int plain_st = sv_parse_infer_jansson(&spec, (const char *)data, size, json_len, &plain, plain_err, sizeof plain_err);
  if (st != plain_st || (st != 200 && strcmp(err, plain_err))) {
    fprintf(stderr, "fuzz_serve_request: status %d '%s', jansson alone %d '%s'\n", st, st == 200 ? "" : err, plain_st,
            plain_st == 200 ? "" : plain_err);
    abort();
  }
  if (st == 200) {
    for (int i = 0; i < 2; i++) {
      int64_t n = r->rows;
      for (int d = 0; d < spec.inputs[i].ndim; d++) n *= r->inner[i][d];
      if (r->rows != plain->rows || memcmp(r->inner[i], plain->inner[i], sizeof r->inner[i]) ||
          (n && memcmp(r->data[i], plain->data[i], (size_t)n * em_dtype_size(spec.inputs[i].dtype)))) {
        fprintf(stderr, "fuzz_serve_request: input %d differs from jansson's parse\n", i);
        abort();
      }
    }
    sv_request_free(plain);
  }
  if (st == 200) {
    em_tensor *outs[2] = {NULL, NULL};
    em_device cpu = {EM_CPU, 0};
    for (int i = 0; i < 2; i++) {
      int64_t sizes[SV_MAX_DIMS + 1], n = r->rows;
      sizes[0] = r->rows;
      for (int d = 0; d < spec.inputs[i].ndim; d++) n *= (sizes[d + 1] = r->inner[i][d]);
      if (em_empty(&outs[i], spec.inputs[i].ndim + 1, sizes, spec.inputs[i].dtype, cpu) == EM_OK && n)
        memcpy(em_tensor_data(outs[i]), r->data[i], (size_t)n * em_dtype_size(spec.inputs[i].dtype));
    }
    if (outs[0] && outs[1]) {
      sv_buf b = {0};
      sv_write_infer_response(&b, &spec, r, outs, 0);
      free(b.data);
    }
    for (int i = 0; i < 2; i++)
      if (outs[i]) em_tensor_release(outs[i]);
    sv_request_free(r);
  }
  return 0;
}
