/* request.c - KServe v2 JSON: the infer request parser (jansson; the inputs' number arrays
 * are parsed ahead of it by lift.c) and the response writer.
 *
 * A request is {"id"?, "parameters"?, "outputs"?, "inputs": [{"name", "shape", "datatype",
 * "data", "parameters"?}]}; every input the model declares must be present once, with shape
 * [n, ...instance shape] (n rows, the same n for every input), the declared datatype, and
 * data holding prod(shape) values, flat or nested row-major. Every failure names the field
 * (inputs[1].shape[2], ...) with what was given and what was expected. */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "serve_impl.h"

#define MAX_BODY_ELEMS ((int64_t)1 << 28)

/* ---------------------------------------------------------------- sv_buf */
static int buf_reserve(sv_buf *b, size_t extra) {
  if (b->failed) return -1;
  if (b->len + extra + 1 <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra + 1) cap *= 2;
  char *p = realloc(b->data, cap);
  if (!p) {
    b->failed = 1;
    return -1;
  }
  b->data = p;
  b->cap = cap;
  return 0;
}

void sv_buf_put(sv_buf *b, const char *s, size_t n) {
  if (buf_reserve(b, n)) return;
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = '\0';
}

void sv_buf_puts(sv_buf *b, const char *s) { sv_buf_put(b, s, strlen(s)); }

void sv_buf_printf(sv_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || buf_reserve(b, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

void sv_buf_json_string(sv_buf *b, const char *s) {
  sv_buf_put(b, "\"", 1);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') {
      char e[2] = {'\\', (char)*p};
      sv_buf_put(b, e, 2);
    } else if (*p < 0x20) {
      sv_buf_printf(b, "\\u%04x", *p);
    } else {
      sv_buf_put(b, (const char *)p, 1);
    }
  }
  sv_buf_put(b, "\"", 1);
}

/* ---------------------------------------------------------------- names */
static const struct {
  em_dtype dtype;
  const char *name;
} datatypes[] = {{EM_FLOAT32, "FP32"}, {EM_FLOAT64, "FP64"}, {EM_INT32, "INT32"},
                 {EM_INT64, "INT64"},  {EM_UINT8, "UINT8"},  {EM_BOOL, "BOOL"}};

const char *sv_datatype_name(em_dtype dtype) {
  for (size_t i = 0; i < sizeof datatypes / sizeof *datatypes; i++)
    if (datatypes[i].dtype == dtype) return datatypes[i].name;
  return NULL;
}

int sv_valid_name(const char *name) {
  if (!name || !*name || strlen(name) >= SV_NAME_MAX) return 0;
  for (const char *p = name; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' ||
          *p == '-' || *p == '.'))
      return 0;
  return 1;
}

void sv_request_free(sv_request *r) {
  if (!r) return;
  for (int i = 0; i < SV_MAX_IO; i++) free(r->data[i]);
  free(r->id);
  free(r->body);
  free(r);
}

void sv_request_release(sv_request *r) {
  if (r && atomic_fetch_sub(&r->refs, 1) == 1) sv_request_free(r);
}

/* ---------------------------------------------------------------- parsing */
typedef struct parse_ctx {
  char *err;
  size_t errcap;
  const char *bin; /* the binary tensor extension: the bytes after the JSON */
  size_t bin_len, bin_pos;
  const sv_lift *lift; /* data arrays parsed by lift.c (their JSON holds []), or NULL */
} parse_ctx;

static int fail(parse_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(parse_ctx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, c->errcap, fmt, ap);
  va_end(ap);
  return 400;
}

static const char *json_kind(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a number";
  case JSON_TRUE:
  case JSON_FALSE: return "a boolean";
  default: return "null";
  }
}

/* Stores one JSON value as element i of data (dtype); 0 or the HTTP status. */
static int store_value(parse_ctx *c, const char *field, const json_t *v, em_dtype dtype, void *data, int64_t i) {
  if (dtype == EM_BOOL) {
    if (!json_is_boolean(v)) return fail(c, "%s: expected true or false (BOOL), got %s", field, json_kind(v));
    ((uint8_t *)data)[i] = json_is_true(v) ? 1 : 0;
    return 0;
  }
  if (dtype == EM_FLOAT32 || dtype == EM_FLOAT64) {
    if (!json_is_number(v)) return fail(c, "%s: expected numbers (%s), got %s", field, sv_datatype_name(dtype), json_kind(v));
    double x = json_number_value(v);
    if (dtype == EM_FLOAT32) ((float *)data)[i] = (float)x;
    else ((double *)data)[i] = x;
    return 0;
  }
  if (!json_is_integer(v))
    return fail(c, "%s: expected integers (%s), got %s", field, sv_datatype_name(dtype), json_kind(v));
  json_int_t x = json_integer_value(v);
  switch (dtype) {
  case EM_INT64: ((int64_t *)data)[i] = (int64_t)x; return 0;
  case EM_INT32:
    if (x < INT32_MIN || x > INT32_MAX) return fail(c, "%s: %lld does not fit INT32", field, (long long)x);
    ((int32_t *)data)[i] = (int32_t)x;
    return 0;
  case EM_UINT8:
    if (x < 0 || x > 255) return fail(c, "%s: %lld does not fit UINT8 (0 to 255)", field, (long long)x);
    ((uint8_t *)data)[i] = (uint8_t)x;
    return 0;
  default: return fail(c, "%s: datatype not supported", field);
  }
}

/* data: flat, or nested arrays following shape (row-major). *pos counts stored elements. */
static int store_data(parse_ctx *c, const char *field, const json_t *v, const int64_t *shape, int ndim, int depth,
                      em_dtype dtype, void *data, int64_t total, int64_t *pos) {
  size_t n = json_array_size(v);
  for (size_t k = 0; k < n; k++) {
    const json_t *e = json_array_get(v, k);
    if (json_is_array(e)) {
      if (depth + 1 >= ndim)
        return fail(c, "%s: nested deeper than the shape's %d dimensions", field, ndim);
      if ((int64_t)json_array_size(e) != shape[depth + 1])
        return fail(c, "%s: a nested array of %zu values where shape[%d] is %lld", field, json_array_size(e),
                    depth + 1, (long long)shape[depth + 1]);
      int st = store_data(c, field, e, shape, ndim, depth + 1, dtype, data, total, pos);
      if (st) return st;
      continue;
    }
    if (*pos >= total)
      return fail(c, "%s: more than the %lld values the shape holds", field, (long long)total);
    int st = store_value(c, field, e, dtype, data, *pos);
    if (st) return st;
    ++*pos;
  }
  return 0;
}

/* A lifted data array into data (total values of dtype). Any problem answers 400 without a
 * message: the caller then parses the whole body with jansson, which says what is wrong. */
static int store_lifted(const sv_lifted *l, em_dtype dtype, void *data, int64_t total) {
  if (l->n != total) return 400;
  const double *v = l->values;
  switch (dtype) {
  case EM_FLOAT32:
    for (int64_t i = 0; i < total; i++) ((float *)data)[i] = (float)v[i];
    return 0;
  case EM_FLOAT64:
    if (total) memcpy(data, v, (size_t)total * sizeof *v);
    return 0;
  case EM_INT64:
  case EM_INT32:
  case EM_UINT8:
    if (!l->exact_ints) return 400;
    for (int64_t i = 0; i < total; i++) {
      if (dtype == EM_INT64) ((int64_t *)data)[i] = (int64_t)v[i];
      else if (dtype == EM_INT32 && v[i] >= INT32_MIN && v[i] <= INT32_MAX) ((int32_t *)data)[i] = (int32_t)v[i];
      else if (dtype == EM_UINT8 && v[i] >= 0 && v[i] <= 255) ((uint8_t *)data)[i] = (uint8_t)v[i];
      else return 400;
    }
    return 0;
  default: return 400; /* BOOL takes true and false, never lifted */
  }
}

static int parse_input(parse_ctx *c, const sv_model_spec *spec, const json_t *in, int k, sv_request *r,
                       int *seen) {
  char field[96];
  snprintf(field, sizeof field, "inputs[%d]", k);
  if (!json_is_object(in)) return fail(c, "%s: expected an object {name, shape, datatype, data}, got %s", field, json_kind(in));
  const char *key;
  json_t *val;
  json_object_foreach((json_t *)in, key, val) {
    if (strcmp(key, "name") && strcmp(key, "shape") && strcmp(key, "datatype") && strcmp(key, "data") &&
        strcmp(key, "parameters"))
      return fail(c, "%s: unknown field '%.64s' (expected name, shape, datatype, data, parameters)", field, key);
  }
  const json_t *name = json_object_get(in, "name");
  if (!name) return fail(c, "%s.name: missing", field);
  if (!json_is_string(name)) return fail(c, "%s.name: expected a string, got %s", field, json_kind(name));
  int idx = -1;
  for (int i = 0; i < spec->n_inputs; i++)
    if (!strcmp(spec->inputs[i].name, json_string_value(name))) idx = i;
  if (idx < 0) {
    char names[256] = "";
    for (int i = 0; i < spec->n_inputs; i++) {
      strncat(names, i ? ", " : "", sizeof names - strlen(names) - 1);
      strncat(names, spec->inputs[i].name, sizeof names - strlen(names) - 1);
    }
    return fail(c, "%s.name: model '%s' has no input '%.64s' (its inputs: %s)", field, spec->name,
                json_string_value(name), names);
  }
  const sv_io *io = &spec->inputs[idx];
  snprintf(field, sizeof field, "inputs[%d] (%s)", k, io->name);
  if (seen[idx]) return fail(c, "%s.name: the input is given twice", field);
  seen[idx] = 1;

  const json_t *dt = json_object_get(in, "datatype");
  if (!dt) return fail(c, "%s.datatype: missing (expected %s)", field, sv_datatype_name(io->dtype));
  if (!json_is_string(dt) || strcmp(json_string_value(dt), sv_datatype_name(io->dtype)))
    return fail(c, "%s.datatype: expected %s, got %s%.32s%s", field, sv_datatype_name(io->dtype),
                json_is_string(dt) ? "'" : "", json_is_string(dt) ? json_string_value(dt) : json_kind(dt),
                json_is_string(dt) ? "'" : "");

  const json_t *shape = json_object_get(in, "shape");
  if (!shape) return fail(c, "%s.shape: missing", field);
  if (!json_is_array(shape)) return fail(c, "%s.shape: expected an array of sizes, got %s", field, json_kind(shape));
  int ndim = (int)json_array_size(shape);
  if (ndim != io->ndim + 1)
    return fail(c, "%s.shape: expected %d dimensions (a batch size, then %d), got %d", field, io->ndim + 1, io->ndim,
                ndim);
  int64_t dims[SV_MAX_DIMS + 1], total = 1;
  for (int d = 0; d < ndim; d++) {
    const json_t *e = json_array_get(shape, (size_t)d);
    if (!json_is_integer(e))
      return fail(c, "%s.shape[%d]: expected a size >= 0, got %s", field, d, json_kind(e));
    if (json_integer_value(e) < 0)
      return fail(c, "%s.shape[%d]: expected a size >= 0, got %lld", field, d, (long long)json_integer_value(e));
    dims[d] = json_integer_value(e);
    if (d > 0 && io->shape[d - 1] >= 0 && dims[d] != io->shape[d - 1])
      return fail(c, "%s.shape[%d]: expected %lld, got %lld", field, d, (long long)io->shape[d - 1], (long long)dims[d]);
    /* both factors are at most MAX_BODY_ELEMS (2^28): the product cannot overflow */
    if (dims[d] > MAX_BODY_ELEMS || (total *= dims[d]) > MAX_BODY_ELEMS)
      return fail(c, "%s.shape[%d]: %lld makes more than the %lld elements a request may carry", field, d,
                  (long long)dims[d], (long long)MAX_BODY_ELEMS);
  }
  if (dims[0] < 1) return fail(c, "%s.shape[0]: expected a batch size >= 1, got 0", field);
  if (dims[0] > spec->max_batch) {
    fail(c, "%s.shape[0]: %lld rows are more than the model's max_batch_size %lld", field, (long long)dims[0],
         (long long)spec->max_batch);
    return 413;
  }
  if (r->rows && dims[0] != r->rows)
    return fail(c, "%s.shape[0]: %lld rows, but another input has %lld", field, (long long)dims[0], (long long)r->rows);
  r->rows = dims[0];
  for (int d = 1; d < ndim; d++) r->inner[idx][d - 1] = dims[d];

  const json_t *params = json_object_get(in, "parameters");
  const json_t *bsize = json_is_object(params) ? json_object_get(params, "binary_data_size") : NULL;
  if (params && !json_is_object(params)) return fail(c, "%s.parameters: expected an object, got %s", field, json_kind(params));
  if (bsize) { /* the binary tensor extension: the values are the next bytes after the JSON */
    size_t want = (size_t)total * em_dtype_size(io->dtype);
    if (json_object_get(in, "data")) return fail(c, "%s: both data and parameters.binary_data_size are given", field);
    if (!json_is_integer(bsize) || json_integer_value(bsize) < 0)
      return fail(c, "%s.parameters.binary_data_size: expected a size in bytes, got %s", field, json_kind(bsize));
    if ((uint64_t)json_integer_value(bsize) != want)
      return fail(c, "%s.parameters.binary_data_size: %lld bytes, expected %zu (%lld %s values)", field,
                  (long long)json_integer_value(bsize), want, (long long)total, sv_datatype_name(io->dtype));
    if (c->bin_len - c->bin_pos < want)
      return fail(c, "%s.parameters.binary_data_size: %zu bytes, but only %zu of binary data are left after the JSON "
                  "(Inference-Header-Content-Length)", field, want, c->bin_len - c->bin_pos);
    r->data[idx] = malloc(want ? want : 1);
    if (!r->data[idx]) return fail(c, "%s: out of memory", field);
    if (want) memcpy(r->data[idx], c->bin + c->bin_pos, want);
    c->bin_pos += want;
    if (io->dtype == EM_BOOL)
      for (size_t i = 0; i < want; i++) ((uint8_t *)r->data[idx])[i] = ((uint8_t *)r->data[idx])[i] != 0;
    return 0;
  }
  const json_t *data = json_object_get(in, "data");
  if (!data) return fail(c, "%s.data: missing (or parameters.binary_data_size with binary data)", field);
  if (!json_is_array(data)) return fail(c, "%s.data: expected an array of values, got %s", field, json_kind(data));
  snprintf(field, sizeof field, "inputs[%d] (%s).data", k, io->name);
  const sv_lifted *lifted = c->lift && k < SV_MAX_IO && c->lift->inputs[k].present ? &c->lift->inputs[k] : NULL;
  size_t count = lifted ? (size_t)lifted->n : json_array_size(data);
  if (count != (size_t)total && count != (size_t)dims[0])
    return fail(c, "%s: %zu values where the shape holds %lld", field, count, (long long)total);
  r->data[idx] = malloc((size_t)(total ? total : 1) * em_dtype_size(io->dtype));
  if (!r->data[idx]) return fail(c, "%s: out of memory", field);
  if (lifted) return store_lifted(lifted, io->dtype, r->data[idx], total);
  int64_t pos = 0;
  int st = store_data(c, field, data, dims, ndim, 0, io->dtype, r->data[idx], total, &pos);
  if (st) return st;
  if (pos != total) return fail(c, "%s: %lld values where the shape holds %lld", field, (long long)pos, (long long)total);
  return 0;
}

/* "outputs": [{"name", "parameters": {"binary_data": bool}}]: which outputs to return, and
 * which as binary data; the request's parameters.binary_data_output makes every one binary. */
static int parse_outputs(parse_ctx *c, const sv_model_spec *spec, const json_t *root, sv_request *r) {
  const json_t *params = json_object_get(root, "parameters");
  if (params && !json_is_object(params)) return fail(c, "parameters: expected an object, got %s", json_kind(params));
  const json_t *all_bin = params ? json_object_get(params, "binary_data_output") : NULL;
  if (all_bin && !json_is_boolean(all_bin))
    return fail(c, "parameters.binary_data_output: expected true or false, got %s", json_kind(all_bin));
  uint32_t every = (1u << spec->n_outputs) - 1;
  r->out_mask = every;
  r->bin_mask = json_is_true(all_bin) ? every : 0;
  const json_t *outs = json_object_get(root, "outputs");
  if (!outs) return 0;
  if (!json_is_array(outs)) return fail(c, "outputs: expected an array of {name, parameters}, got %s", json_kind(outs));
  if (json_array_size(outs) == 0) return 0;
  r->out_mask = 0;
  for (size_t k = 0; k < json_array_size(outs); k++) {
    const json_t *o = json_array_get(outs, k), *name = json_is_object(o) ? json_object_get(o, "name") : NULL;
    if (!json_is_string(name)) return fail(c, "outputs[%zu].name: expected a string", k);
    int idx = -1;
    for (int i = 0; i < spec->n_outputs; i++)
      if (!strcmp(spec->outputs[i].name, json_string_value(name))) idx = i;
    if (idx < 0) return fail(c, "outputs[%zu].name: model '%s' has no output '%.64s'", k, spec->name, json_string_value(name));
    r->out_mask |= 1u << idx;
    const json_t *op = json_object_get(o, "parameters"), *bin = json_is_object(op) ? json_object_get(op, "binary_data") : NULL;
    if (bin && !json_is_boolean(bin)) return fail(c, "outputs[%zu].parameters.binary_data: expected true or false", k);
    if (bin) r->bin_mask = json_is_true(bin) ? r->bin_mask | 1u << idx : r->bin_mask & ~(1u << idx);
  }
  return 0;
}

/* The JSON part (len bytes; bin_len bytes of binary data follow at bin) with lift's arrays. */
static int parse_infer(const sv_model_spec *spec, const char *body, size_t len, const char *bin, size_t bin_len,
                       const sv_lift *lift, sv_request **out, char *err, size_t errcap) {
  parse_ctx c = {err, errcap, bin, bin_len, 0, lift};
  *out = NULL;
  json_error_t jerr;
  json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root) return fail(&c, "malformed JSON at line %d, column %d: %s", jerr.line, jerr.column, jerr.text);
  int status = 0;
  sv_request *r = calloc(1, sizeof *r);
  if (!r) {
    json_decref(root);
    return fail(&c, "out of memory");
  }
  if (!json_is_object(root)) {
    status = fail(&c, "the request: expected an object {\"inputs\": [...]}, got %s", json_kind(root));
    goto done;
  }
  const char *key;
  json_t *val;
  json_object_foreach(root, key, val) {
    if (strcmp(key, "inputs") && strcmp(key, "id") && strcmp(key, "parameters") && strcmp(key, "outputs")) {
      status = fail(&c, "unknown field '%.64s' (expected inputs, id, parameters, outputs)", key);
      goto done;
    }
  }
  const json_t *id = json_object_get(root, "id");
  if (id) {
    if (!json_is_string(id)) {
      status = fail(&c, "id: expected a string, got %s", json_kind(id));
      goto done;
    }
    r->id = strdup(json_string_value(id));
  }
  const json_t *inputs = json_object_get(root, "inputs");
  if (!inputs) {
    status = fail(&c, "inputs: missing");
    goto done;
  }
  if (!json_is_array(inputs)) {
    status = fail(&c, "inputs: expected an array, got %s", json_kind(inputs));
    goto done;
  }
  int seen[SV_MAX_IO] = {0};
  for (size_t k = 0; k < json_array_size(inputs); k++) {
    status = parse_input(&c, spec, json_array_get(inputs, k), (int)k, r, seen);
    if (status) goto done;
  }
  for (int i = 0; i < spec->n_inputs; i++) {
    if (!seen[i]) {
      status = fail(&c, "inputs: the input '%s' is missing", spec->inputs[i].name);
      goto done;
    }
  }
  if (c.bin_pos != c.bin_len) {
    status = fail(&c, "binary data: %zu bytes after the JSON, the inputs' binary_data_size add up to %zu",
                  c.bin_len, c.bin_pos);
    goto done;
  }
  status = parse_outputs(&c, spec, root, r);
done:
  json_decref(root);
  if (status) {
    sv_request_free(r);
    return status;
  }
  atomic_init(&r->refs, 1);
  *out = r;
  return 200;
}

int sv_parse_infer(const sv_model_spec *spec, const char *body, size_t len, size_t json_len, sv_request **out,
                   char *err, size_t errcap) {
  *out = NULL;
  if (json_len > len) {
    parse_ctx c = {err, errcap, NULL, 0, 0, NULL};
    return fail(&c, "Inference-Header-Content-Length: %zu, but the body has %zu bytes", json_len, len);
  }
  size_t jlen = json_len ? json_len : len;
  const char *bin = json_len ? body + json_len : NULL;
  size_t bin_len = json_len ? len - json_len : 0;
  /* the numbers first (lift.c); whatever that path does not accept is parsed again from the
   * body as it came, so that the error names the field as jansson's parse does */
  sv_lift lift;
  if (sv_lift_data(body, jlen, &lift)) {
    int status = parse_infer(spec, lift.json, lift.len, bin, bin_len, &lift, out, err, errcap);
    sv_lift_free(&lift);
    if (status == 200) return status;
  }
  return parse_infer(spec, body, jlen, bin, bin_len, NULL, out, err, errcap);
}

int sv_parse_infer_jansson(const sv_model_spec *spec, const char *body, size_t len, size_t json_len, sv_request **out,
                           char *err, size_t errcap) {
  *out = NULL;
  if (json_len > len) return sv_parse_infer(spec, body, len, json_len, out, err, errcap);
  return parse_infer(spec, body, json_len ? json_len : len, json_len ? body + json_len : NULL,
                     json_len ? len - json_len : 0, NULL, out, err, errcap);
}

/* ---------------------------------------------------------------- response */
static void write_values(sv_buf *b, const em_tensor *t, int64_t start, int64_t count) {
  const void *p = em_tensor_data(t);
  em_dtype dt = em_tensor_dtype(t);
  char num[40];
  sv_buf_put(b, "[", 1);
  for (int64_t i = 0; i < count; i++) {
    int64_t k = start + i;
    int n;
    switch (dt) {
    case EM_FLOAT32: {
      float x = ((const float *)p)[k];
      n = isfinite(x) ? snprintf(num, sizeof num, "%.9g", (double)x) : snprintf(num, sizeof num, "null");
      break;
    }
    case EM_FLOAT64: {
      double x = ((const double *)p)[k];
      n = isfinite(x) ? snprintf(num, sizeof num, "%.17g", x) : snprintf(num, sizeof num, "null");
      break;
    }
    case EM_INT32: n = snprintf(num, sizeof num, "%d", ((const int32_t *)p)[k]); break;
    case EM_INT64: n = snprintf(num, sizeof num, "%lld", (long long)((const int64_t *)p)[k]); break;
    case EM_UINT8: n = snprintf(num, sizeof num, "%u", ((const uint8_t *)p)[k]); break;
    default: n = snprintf(num, sizeof num, "%s", ((const uint8_t *)p)[k] ? "true" : "false"); break;
    }
    if (i) sv_buf_put(b, ",", 1);
    sv_buf_put(b, num, (size_t)n);
  }
  sv_buf_put(b, "]", 1);
}

int sv_write_infer_response(sv_buf *b, const sv_model_spec *spec, sv_request *r, em_tensor *const *outputs,
                            int64_t row0) {
  sv_buf_puts(b, "{\"model_name\":");
  sv_buf_json_string(b, spec->name);
  if (r->version > 0) sv_buf_printf(b, ",\"model_version\":\"%lld\"", (long long)r->version);
  if (r->id) {
    sv_buf_puts(b, ",\"id\":");
    sv_buf_json_string(b, r->id);
  }
  sv_buf_puts(b, ",\"outputs\":[");
  int first = 1;
  for (int i = 0; i < spec->n_outputs; i++) {
    if (r->out_mask && !(r->out_mask & 1u << i)) continue;
    const em_tensor *t = outputs[i];
    int nd = em_tensor_ndim(t);
    int64_t per_row = 1;
    for (int d = 1; d < nd; d++) per_row *= em_tensor_size(t, d);
    if (!first) sv_buf_put(b, ",", 1);
    first = 0;
    sv_buf_puts(b, "{\"name\":");
    sv_buf_json_string(b, spec->outputs[i].name);
    sv_buf_printf(b, ",\"datatype\":\"%s\",\"shape\":[%lld", sv_datatype_name(em_tensor_dtype(t)), (long long)r->rows);
    for (int d = 1; d < nd; d++) sv_buf_printf(b, ",%lld", (long long)em_tensor_size(t, d));
    if (r->bin_mask & 1u << i) {
      sv_buf_printf(b, "],\"parameters\":{\"binary_data_size\":%zu}}",
                    (size_t)(r->rows * per_row) * em_dtype_size(em_tensor_dtype(t)));
      continue;
    }
    sv_buf_puts(b, "],\"data\":");
    write_values(b, t, row0 * per_row, r->rows * per_row);
    sv_buf_put(b, "}", 1);
  }
  sv_buf_puts(b, "]}");
  r->json_len = 0;
  if (r->bin_mask) { /* the binary tensor extension: raw bytes after the JSON, in output order */
    r->json_len = b->len;
    for (int i = 0; i < spec->n_outputs; i++) {
      if (!((!r->out_mask || r->out_mask & 1u << i) && r->bin_mask & 1u << i)) continue;
      const em_tensor *t = outputs[i];
      int64_t per_row = 1;
      for (int d = 1; d < em_tensor_ndim(t); d++) per_row *= em_tensor_size(t, d);
      size_t esize = em_dtype_size(em_tensor_dtype(t)), n = (size_t)(r->rows * per_row) * esize;
      if (n) sv_buf_put(b, (const char *)em_tensor_data(t) + (size_t)(row0 * per_row) * esize, n);
    }
  }
  return b->failed ? -1 : 0;
}

void sv_write_model_metadata(sv_buf *b, sv_model *m) {
  const sv_model_spec *s = &m->spec;
  sv_buf_puts(b, "{\"name\":");
  sv_buf_json_string(b, s->name);
  sv_buf_puts(b, ",");
  sv_write_versions(b, m);
  sv_buf_printf(b, ",\"platform\":\"ember\",\"max_batch_size\":%lld,\"inputs\":[", (long long)s->max_batch);
  for (int i = 0; i < s->n_inputs; i++) {
    const sv_io *io = &s->inputs[i];
    sv_buf_puts(b, i ? ",{\"name\":" : "{\"name\":");
    sv_buf_json_string(b, io->name);
    sv_buf_printf(b, ",\"datatype\":\"%s\",\"shape\":[-1", sv_datatype_name(io->dtype));
    for (int d = 0; d < io->ndim; d++) sv_buf_printf(b, ",%lld", (long long)io->shape[d]);
    sv_buf_puts(b, "]}");
  }
  sv_buf_puts(b, "],\"outputs\":[");
  for (int i = 0; i < s->n_outputs; i++) {
    sv_buf_puts(b, i ? ",{\"name\":" : "{\"name\":");
    sv_buf_json_string(b, s->outputs[i].name);
    sv_buf_printf(b, ",\"datatype\":\"%s\"}", sv_datatype_name(s->outputs[i].dtype));
  }
  sv_buf_puts(b, "]}");
}

/* The repository index's request: no body, {} or {"ready": BOOL}. */
int sv_parse_index(const char *body, size_t len, int *ready_only, char *err, size_t errcap) {
  parse_ctx c = {err, errcap, NULL, 0, 0, NULL};
  *ready_only = 0;
  size_t i = 0;
  while (i < len && (body[i] == ' ' || body[i] == '\t' || body[i] == '\r' || body[i] == '\n')) i++;
  if (i == len) return 0;
  json_error_t jerr;
  json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root) return fail(&c, "malformed JSON at line %d, column %d: %s", jerr.line, jerr.column, jerr.text);
  int status = 0;
  if (!json_is_object(root)) {
    status = fail(&c, "the request: expected an object {\"ready\": BOOL}, got %s", json_kind(root));
  } else {
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
      if (strcmp(key, "ready")) {
        status = fail(&c, "unknown field '%.64s' (expected ready)", key);
        break;
      }
      if (!json_is_boolean(v)) {
        status = fail(&c, "ready: expected true or false, got %s", json_kind(v));
        break;
      }
      *ready_only = json_is_true(v);
    }
  }
  json_decref(root);
  return status;
}

/* {"parameters": {"checkpoint": "PATH"}}: the repository API's load request (as Triton's,
 * whose parameters carry what to load). No body, {} or {"parameters": {}}: path "" (reload
 * what the model was started with, as Triton reloads from its repository). */
int sv_parse_load(const char *body, size_t len, char *path, size_t cap, char *err, size_t errcap) {
  parse_ctx c = {err, errcap, NULL, 0, 0, NULL};
  path[0] = 0;
  size_t i = 0;
  while (i < len && (body[i] == ' ' || body[i] == '\t' || body[i] == '\r' || body[i] == '\n')) i++;
  if (i == len) return 0; /* no body: reload */
  json_error_t jerr;
  json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root) return fail(&c, "malformed JSON at line %d, column %d: %s", jerr.line, jerr.column, jerr.text);
  int status = 0;
  const json_t *params = json_is_object(root) ? json_object_get(root, "parameters") : NULL;
  const json_t *ckpt = params && json_is_object(params) ? json_object_get(params, "checkpoint") : NULL;
  const char *key;
  json_t *v;
  if (!json_is_object(root)) {
    status = fail(&c, "the request: expected an object {\"parameters\": {\"checkpoint\": PATH}}, got %s", json_kind(root));
  } else if (params && !json_is_object(params)) {
    status = fail(&c, "parameters: expected an object, got %s", json_kind(params));
  } else {
    json_object_foreach((json_t *)root, key, v) if (strcmp(key, "parameters")) {
      status = fail(&c, "unknown field '%.64s' (expected parameters)", key);
      break;
    }
    if (!status && params) json_object_foreach((json_t *)params, key, v) if (strcmp(key, "checkpoint")) {
      status = fail(&c, "parameters.%.64s: not taken (ember's models are configured in the job file; "
                    "parameters.checkpoint names a checkpoint)", key);
      break;
    }
  }
  if (!status && ckpt) {
    if (!json_is_string(ckpt) || !*json_string_value(ckpt))
      status = fail(&c, "parameters.checkpoint: expected a non-empty path, got %s", json_kind(ckpt));
    else if (strlen(json_string_value(ckpt)) >= cap)
      status = fail(&c, "parameters.checkpoint: a path of %zu bytes, at most %zu", strlen(json_string_value(ckpt)),
                    cap - 1);
    else
      snprintf(path, cap, "%s", json_string_value(ckpt));
  }
  json_decref(root);
  return status;
}
