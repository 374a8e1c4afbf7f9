/* safetensors.c - reading and writing safetensors checkpoints (see ember/io.h).
 *
 * Saving: validate every argument, lay the tensors out as the reference implementation
 * does (by descending dtype alignment, then by name, so that files match it byte for
 * byte), write PATH.tmp.<pid>, fsync, rename over PATH.
 * Loading: map the file copy-on-write, parse the JSON header with the pull reader of
 * json.c against the schema, then check that the tensors' byte ranges fit their dtype and
 * shape and tile the data section exactly, before any tensor is handed out. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core_impl.h"
#include "ember/io.h"
#include "json.h"
#include "tensor/tensor_impl.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c writes tensors as they lie in memory; the format is little endian"
#endif

/* The reference implementation refuses larger headers; real ones are kilobytes. */
#define MAX_HEADER_BYTES 100000000ull

/* Codes ember reads and writes, with the reference's dtype order (its alignment rank),
 * which decides the layout of saved files. */
static const struct {
  const char *code;
  em_dtype dtype;
  int rank;
} dtype_codes[] = {
    {"BOOL", EM_BOOL, 0}, {"U8", EM_UINT8, 1},     {"F16", EM_FLOAT16, 7},  {"BF16", EM_BFLOAT16, 8},
    {"I32", EM_INT32, 9}, {"F32", EM_FLOAT32, 11}, {"F64", EM_FLOAT64, 12}, {"I64", EM_INT64, 13},
};
#define NUM_CODES ((int)(sizeof dtype_codes / sizeof dtype_codes[0]))
#define EMBER_CODES "F64, F32, F16, BF16, I64, I32, U8 or BOOL"

/* Valid safetensors dtypes that ember has no counterpart for. */
static const char *const foreign_codes[] = {"I8",      "I16",     "U16",     "U32",     "U64", "F8_E5M2",
                                            "F8_E4M3", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",  "C64"};

static int code_index(em_dtype dtype) {
  for (int i = 0; i < NUM_CODES; i++)
    if (dtype_codes[i].dtype == dtype) return i;
  return -1;
}

static em_device cpu_device(void) { return (em_device){EM_CPU, 0}; }

/* ================================================================ saving */

typedef struct save_item {
  const char *name;
  em_tensor *tensor;
  int rank;
} save_item;

static int by_name(const void *a, const void *b) {
  return strcmp(((const save_item *)a)->name, ((const save_item *)b)->name);
}

/* Descending dtype rank, then name: the reference's layout. */
static int by_layout(const void *a, const void *b) {
  const save_item *x = a, *y = b;
  if (x->rank != y->rank) return y->rank - x->rank;
  return strcmp(x->name, y->name);
}

typedef struct meta_item {
  const char *key, *value;
} meta_item;

static int by_key(const void *a, const void *b) {
  return strcmp(((const meta_item *)a)->key, ((const meta_item *)b)->key);
}

/* Copies the current message first: em_set_error must not read the buffer it writes. */
static em_status save_error(const char *path, em_status code, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return em_set_error(code, "safetensors_save: %s: %s", path, msg);
}

static em_status check_save_args(const char *path, int n, const char *const *names, em_tensor *const *tensors,
                                 int nmeta, const char *const *keys, const char *const *values) {
  if (n < 0 || nmeta < 0)
    return save_error(path, EM_ERR_ARGUMENT, "negative count (%d tensors, %d metadata pairs)", n, nmeta);
  if ((n > 0 && (!names || !tensors)) || (nmeta > 0 && (!keys || !values)))
    return save_error(path, EM_ERR_ARGUMENT, "names, tensors, metadata keys and values must not be NULL");
  for (int i = 0; i < n; i++) {
    const char *name = names[i];
    if (!name) return save_error(path, EM_ERR_ARGUMENT, "tensor name %d is NULL", i);
    if (!io_utf8_valid(name, strlen(name)))
      return save_error(path, EM_ERR_ARGUMENT, "tensor name %d is not valid UTF-8", i);
    if (!strcmp(name, "__metadata__"))
      return save_error(path, EM_ERR_ARGUMENT, "'__metadata__' is reserved for metadata and cannot name a tensor");
    if (!tensors[i]) return save_error(path, EM_ERR_ARGUMENT, "tensor '%s' is NULL", name);
    if (em_tensor_is_freed(tensors[i]))
      return save_error(path, EM_ERR_ARGUMENT, "tensor '%s' was freed with free()", name);
    if (code_index(em_tensor_dtype(tensors[i])) < 0)
      return save_error(path, EM_ERR_DTYPE, "tensor '%s' has dtype %s, which safetensors cannot hold", name,
                        em_dtype_name(em_tensor_dtype(tensors[i])));
  }
  for (int i = 0; i < nmeta; i++) {
    if (!keys[i] || !values[i]) return save_error(path, EM_ERR_ARGUMENT, "metadata key or value %d is NULL", i);
    if (!io_utf8_valid(keys[i], strlen(keys[i])) || !io_utf8_valid(values[i], strlen(values[i])))
      return save_error(path, EM_ERR_ARGUMENT, "metadata pair %d is not valid UTF-8", i);
  }
  return EM_OK;
}

static int64_t tensor_nbytes(const em_tensor *t) {
  return em_tensor_numel(t) * (int64_t)em_dtype_size(em_tensor_dtype(t));
}

/* The header JSON, padded with spaces to a multiple of 8 so that the data section (and
 * every tensor, being laid out by descending alignment) starts aligned. */
static em_status build_header(const char *path, const save_item *items, int n, const meta_item *meta, int nmeta,
                              em_jsonbuf *b) {
  io_jsonbuf_raw(b, "{", 1);
  if (nmeta > 0) {
    io_jsonbuf_raw(b, "\"__metadata__\":{", 16);
    for (int i = 0; i < nmeta; i++) {
      if (i) io_jsonbuf_raw(b, ",", 1);
      io_jsonbuf_str(b, meta[i].key);
      io_jsonbuf_raw(b, ":", 1);
      io_jsonbuf_str(b, meta[i].value);
    }
    io_jsonbuf_raw(b, "}", 1);
  }
  int64_t offset = 0;
  for (int i = 0; i < n; i++) {
    const em_tensor *t = items[i].tensor;
    int64_t nbytes = tensor_nbytes(t);
    if (nbytes > INT64_MAX - offset)
      return save_error(path, EM_ERR_ARGUMENT, "the tensors hold more than 2^63 bytes together");
    if (nmeta > 0 || i) io_jsonbuf_raw(b, ",", 1);
    io_jsonbuf_str(b, items[i].name);
    io_jsonbuf_raw(b, ":{\"dtype\":", 10);
    io_jsonbuf_str(b, dtype_codes[code_index(em_tensor_dtype(t))].code);
    io_jsonbuf_raw(b, ",\"shape\":[", 10);
    for (int d = 0; d < em_tensor_ndim(t); d++) {
      if (d) io_jsonbuf_raw(b, ",", 1);
      io_jsonbuf_int(b, em_tensor_size(t, d));
    }
    io_jsonbuf_raw(b, "],\"data_offsets\":[", 18);
    io_jsonbuf_int(b, offset);
    io_jsonbuf_raw(b, ",", 1);
    io_jsonbuf_int(b, offset + nbytes);
    io_jsonbuf_raw(b, "]}", 2);
    offset += nbytes;
  }
  io_jsonbuf_raw(b, "}", 1);
  while (!b->failed && b->len % 8) io_jsonbuf_raw(b, " ", 1);
  if (b->failed) return save_error(path, EM_ERR_MEMORY, "out of memory building the header");
  return EM_OK;
}

/* Writes one tensor's bytes: a contiguous host copy when it is strided or on a device. */
static em_status write_tensor(int fd, const char *path, const save_item *item) {
  em_tensor *host = NULL, *flat = NULL;
  em_status st = em_to(&host, item->tensor, em_tensor_dtype(item->tensor), cpu_device());
  if (!st) st = em_contiguous(&flat, host);
  if (st) {
    char inner[512];
    snprintf(inner, sizeof inner, "%s", em_last_error());
    em_tensor_release(host);
    return save_error(path, st, "tensor '%s' %s: %s", item->name, EM_SHAPE(item->tensor), inner);
  }
  int64_t nbytes = tensor_nbytes(flat);
  if (nbytes > 0 && core_write_all(fd, em_tensor_data(flat), (size_t)nbytes))
    st = save_error(path, EM_ERR_IO, "writing tensor '%s' failed: %s", item->name, strerror(errno));
  em_tensor_release(flat);
  em_tensor_release(host);
  return st;
}

typedef struct file_contents {
  const char *path;
  const save_item *items;
  int n;
  const em_jsonbuf *header;
} file_contents;

static em_status write_contents(int fd, void *ctx) {
  const file_contents *c = ctx;
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)c->header->len >> (8 * i));
  if (core_write_all(fd, len8, 8) || core_write_all(fd, c->header->data, c->header->len))
    return save_error(c->path, EM_ERR_IO, "writing the header failed: %s", strerror(errno));
  em_status st = EM_OK;
  for (int i = 0; i < c->n && !st; i++) st = write_tensor(fd, c->path, &c->items[i]);
  return st;
}

static em_status write_file(const char *path, const save_item *items, int n, const em_jsonbuf *header) {
  file_contents c = {path, items, n, header};
  return core_replace_file("safetensors save", path, write_contents, &c);
}

em_status em_safetensors_save(const char *path, int n, const char *const *names, em_tensor *const *tensors, int nmeta,
                              const char *const *meta_keys, const char *const *meta_values) {
  if (!path || !*path) return em_set_error(EM_ERR_ARGUMENT, "safetensors_save: path is NULL or empty");
  em_status st = check_save_args(path, n, names, tensors, nmeta, meta_keys, meta_values);
  if (st) return st;
  save_item *items = calloc((size_t)n + 1, sizeof *items);
  meta_item *meta = calloc((size_t)nmeta + 1, sizeof *meta);
  em_jsonbuf header = {0};
  if (!items || !meta) {
    st = save_error(path, EM_ERR_MEMORY, "out of memory");
    goto done;
  }
  for (int i = 0; i < n; i++)
    items[i] = (save_item){names[i], tensors[i], dtype_codes[code_index(em_tensor_dtype(tensors[i]))].rank};
  qsort(items, (size_t)n, sizeof *items, by_name);
  for (int i = 1; i < n; i++)
    if (!strcmp(items[i - 1].name, items[i].name)) {
      st = save_error(path, EM_ERR_ARGUMENT, "tensor name '%s' is given twice", items[i].name);
      goto done;
    }
  qsort(items, (size_t)n, sizeof *items, by_layout);
  for (int i = 0; i < nmeta; i++) meta[i] = (meta_item){meta_keys[i], meta_values[i]};
  qsort(meta, (size_t)nmeta, sizeof *meta, by_key);
  for (int i = 1; i < nmeta; i++)
    if (!strcmp(meta[i - 1].key, meta[i].key)) {
      st = save_error(path, EM_ERR_ARGUMENT, "metadata key '%s' is given twice", meta[i].key);
      goto done;
    }
  if (!(st = build_header(path, items, n, meta, nmeta, &header))) st = write_file(path, items, n, &header);
done:
  io_jsonbuf_free(&header);
  free(items);
  free(meta);
  return st;
}

/* ================================================================ loading */

/* The file's mapping, shared by the open handle and every tensor that adopts it. */
typedef struct mapping {
  atomic_int refs;
  void *addr;
  size_t len;
} mapping;

static void mapping_release(mapping *m) {
  if (!m || atomic_fetch_sub(&m->refs, 1) != 1) return;
  munmap(m->addr, m->len);
  free(m);
}

static void mapping_deleter(void *data, void *ctx) {
  (void)data;
  mapping_release(ctx);
}

typedef struct meta_pair {
  char *key, *value;
} meta_pair;

typedef struct entry {
  char *name;
  em_dtype dtype;
  int ndim;
  int64_t sizes[EM_MAX_DIMS];
  int64_t begin, end; /* relative to the data section */
} entry;

struct em_safetensors {
  char *path;
  mapping *map;
  const unsigned char *data; /* the data section */
  size_t data_len;
  size_t file_len;
  int n, cap;
  entry *entries; /* sorted by name */
  int nmeta, meta_cap;
  meta_pair *meta; /* sorted by key */
};

static em_status open_error(const char *path, em_status code, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return em_set_error(code, "safetensors_open: %s: %s", path, msg);
}

/* Turns a reader failure into an error; ctx names what was being read (may be empty). */
static em_status json_error(const em_safetensors *f, const em_json *j, int code, const char *ctx) {
  if (code == EM_JSON_MEMORY) return open_error(f->path, EM_ERR_MEMORY, "out of memory reading the header");
  if (code == EM_JSON_SYNTAX)
    return open_error(f->path, EM_ERR_FORMAT,
                      "header is not valid JSON at byte %zu of the header (file offset %zu): %s", j->err_pos,
                      j->err_pos + 8, j->msg);
  return open_error(f->path, EM_ERR_FORMAT, "%s%s", ctx, j->msg);
}

/* The value at j, which must be a non-negative integer; what names it in messages. */
static em_status read_count(em_safetensors *f, em_json *j, const char *name, const char *what, int64_t *out) {
  char ctx[256];
  snprintf(ctx, sizeof ctx, "tensor '%s': %s: ", name, what);
  em_json_kind k = io_json_peek(j);
  if (k != EM_JSON_NUMBER && k != EM_JSON_EOF && k != EM_JSON_INVALID)
    return open_error(f->path, EM_ERR_FORMAT, "%sexpected a non-negative integer, got %s", ctx, io_json_kind_name(k));
  int code = io_json_read_int64(j, out);
  if (code) return json_error(f, j, code, ctx);
  if (*out < 0)
    return open_error(f->path, EM_ERR_FORMAT, "%sexpected a non-negative integer, got %lld", ctx, (long long)*out);
  return EM_OK;
}

static em_status parse_dtype(em_safetensors *f, em_json *j, entry *e) {
  em_json_kind k = io_json_peek(j);
  if (k != EM_JSON_STRING && k != EM_JSON_EOF && k != EM_JSON_INVALID)
    return open_error(f->path, EM_ERR_FORMAT, "tensor '%s': 'dtype' must be a string such as \"F32\", got %s", e->name,
                      io_json_kind_name(k));
  char *code;
  int jst = io_json_read_string(j, &code, NULL);
  if (jst) return json_error(f, j, jst, "");
  em_status st = EM_OK;
  int i = 0;
  while (i < NUM_CODES && strcmp(code, dtype_codes[i].code)) i++;
  if (i < NUM_CODES) {
    e->dtype = dtype_codes[i].dtype;
  } else {
    int foreign = 0;
    for (size_t c = 0; c < sizeof foreign_codes / sizeof *foreign_codes; c++)
      foreign |= !strcmp(code, foreign_codes[c]);
    st = foreign
             ? open_error(f->path, EM_ERR_UNSUPPORTED,
                          "tensor '%s': dtype %s has no ember counterpart (ember reads " EMBER_CODES ")", e->name, code)
             : open_error(f->path, EM_ERR_FORMAT, "tensor '%s': unknown dtype '%.64s' (expected " EMBER_CODES ")",
                          e->name, code);
  }
  free(code);
  return st;
}

static em_status parse_shape(em_safetensors *f, em_json *j, entry *e) {
  em_json_kind k = io_json_peek(j);
  if (k != EM_JSON_ARRAY && k != EM_JSON_EOF && k != EM_JSON_INVALID)
    return open_error(f->path, EM_ERR_FORMAT, "tensor '%s': 'shape' must be an array of integers, got %s", e->name,
                      io_json_kind_name(k));
  int jst = io_json_begin_array(j), more;
  if (jst) return json_error(f, j, jst, "");
  for (e->ndim = 0;; e->ndim++) {
    if ((jst = io_json_next_element(j, &more))) return json_error(f, j, jst, "");
    if (!more) return EM_OK;
    if (e->ndim == EM_MAX_DIMS)
      return open_error(f->path, EM_ERR_UNSUPPORTED,
                        "tensor '%s': shape has more than %d dims, ember supports up to %d", e->name, EM_MAX_DIMS,
                        EM_MAX_DIMS);
    char what[32];
    snprintf(what, sizeof what, "shape[%d]", e->ndim);
    em_status st = read_count(f, j, e->name, what, &e->sizes[e->ndim]);
    if (st) return st;
  }
}

static em_status parse_offsets(em_safetensors *f, em_json *j, entry *e) {
  em_json_kind k = io_json_peek(j);
  if (k != EM_JSON_ARRAY && k != EM_JSON_EOF && k != EM_JSON_INVALID)
    return open_error(f->path, EM_ERR_FORMAT, "tensor '%s': 'data_offsets' must be an array [begin, end], got %s",
                      e->name, io_json_kind_name(k));
  int jst = io_json_begin_array(j), more, count = 0;
  if (jst) return json_error(f, j, jst, "");
  for (;; count++) {
    if ((jst = io_json_next_element(j, &more))) return json_error(f, j, jst, "");
    if (!more) break;
    if (count == 2)
      return open_error(f->path, EM_ERR_FORMAT, "tensor '%s': 'data_offsets' has more than 2 values", e->name);
    em_status st =
        read_count(f, j, e->name, count ? "data_offsets[1]" : "data_offsets[0]", count ? &e->end : &e->begin);
    if (st) return st;
  }
  if (count != 2)
    return open_error(f->path, EM_ERR_FORMAT, "tensor '%s': 'data_offsets' has %d values, expected 2", e->name, count);
  return EM_OK;
}

/* One tensor's object: dtype, shape, data_offsets (unknown fields are skipped, as the
 * reference reader does). */
static em_status parse_entry(em_safetensors *f, em_json *j, entry *e) {
  em_json_kind k = io_json_peek(j);
  if (k != EM_JSON_OBJECT && k != EM_JSON_EOF && k != EM_JSON_INVALID)
    return open_error(f->path, EM_ERR_FORMAT,
                      "tensor '%s': expected an object with dtype, shape and data_offsets, got %s", e->name,
                      io_json_kind_name(k));
  int jst = io_json_begin_object(j), more, seen[3] = {0};
  if (jst) return json_error(f, j, jst, "");
  static const char *const fields[3] = {"dtype", "shape", "data_offsets"};
  for (;;) {
    char *key;
    if ((jst = io_json_next_member(j, &more, &key, NULL))) return json_error(f, j, jst, "");
    if (!more) break;
    int which = 0;
    while (which < 3 && strcmp(key, fields[which])) which++;
    free(key);
    em_status st = EM_OK;
    if (which < 3 && seen[which]++)
      return open_error(f->path, EM_ERR_FORMAT, "tensor '%s': field '%s' appears twice", e->name, fields[which]);
    if (which == 0) st = parse_dtype(f, j, e);
    else if (which == 1) st = parse_shape(f, j, e);
    else if (which == 2) st = parse_offsets(f, j, e);
    else if ((jst = io_json_skip(j))) st = json_error(f, j, jst, "");
    if (st) return st;
  }
  for (int i = 0; i < 3; i++)
    if (!seen[i]) return open_error(f->path, EM_ERR_FORMAT, "tensor '%s': missing field '%s'", e->name, fields[i]);
  return EM_OK;
}

static em_status parse_metadata(em_safetensors *f, em_json *j) {
  em_json_kind k = io_json_peek(j);
  if (k != EM_JSON_OBJECT && k != EM_JSON_EOF && k != EM_JSON_INVALID)
    return open_error(f->path, EM_ERR_FORMAT, "'__metadata__' must be an object of strings, got %s",
                      io_json_kind_name(k));
  int jst = io_json_begin_object(j), more;
  if (jst) return json_error(f, j, jst, "");
  for (;;) {
    char *key, *value;
    size_t key_len, value_len;
    if ((jst = io_json_next_member(j, &more, &key, &key_len))) return json_error(f, j, jst, "");
    if (!more) return EM_OK;
    if (f->nmeta == f->meta_cap) {
      int cap = f->meta_cap ? 2 * f->meta_cap : 8;
      meta_pair *grown = cap < INT_MAX / 2 ? realloc(f->meta, sizeof *grown * (size_t)cap) : NULL;
      if (!grown) {
        free(key);
        return open_error(f->path, EM_ERR_MEMORY, "out of memory reading the metadata");
      }
      f->meta = grown;
      f->meta_cap = cap;
    }
    k = io_json_peek(j);
    if (k != EM_JSON_STRING && k != EM_JSON_EOF && k != EM_JSON_INVALID) {
      em_status st =
          open_error(f->path, EM_ERR_FORMAT, "'__metadata__' value for key '%.200s' must be a string, got %s", key,
                     io_json_kind_name(k));
      free(key);
      return st;
    }
    if ((jst = io_json_read_string(j, &value, &value_len))) {
      free(key);
      return json_error(f, j, jst, "");
    }
    f->meta[f->nmeta++] = (meta_pair){key, value};
    /* C callers see NUL-terminated strings: an embedded NUL would silently cut them. */
    if (strlen(key) != key_len || strlen(value) != value_len)
      return open_error(f->path, EM_ERR_FORMAT, "'__metadata__' key or value '%.200s' contains a NUL character", key);
  }
}

static em_status parse_header(em_safetensors *f, const unsigned char *text, size_t len) {
  if (len == 0) return open_error(f->path, EM_ERR_FORMAT, "the header is empty (length 0); expected a JSON object");
  if (text[0] != '{')
    return open_error(f->path, EM_ERR_FORMAT,
                      "the header must be a JSON object starting with '{', found byte 0x%02x "
                      "at file offset 8 (not a safetensors file?)",
                      text[0]);
  em_json j;
  io_json_init(&j, text, len);
  int jst = io_json_begin_object(&j), more, seen_meta = 0;
  if (jst) return json_error(f, &j, jst, "");
  for (;;) {
    char *key;
    size_t key_len;
    if ((jst = io_json_next_member(&j, &more, &key, &key_len))) return json_error(f, &j, jst, "");
    if (!more) break;
    em_status st;
    if (!strcmp(key, "__metadata__")) {
      free(key);
      if (seen_meta++) return open_error(f->path, EM_ERR_FORMAT, "'__metadata__' appears twice in the header");
      if ((st = parse_metadata(f, &j))) return st;
      continue;
    }
    if (f->n == f->cap) {
      int cap = f->cap ? 2 * f->cap : 16;
      entry *grown = cap < INT_MAX / 2 ? realloc(f->entries, sizeof *grown * (size_t)cap) : NULL;
      if (!grown) {
        free(key);
        return open_error(f->path, EM_ERR_MEMORY, "out of memory reading the header");
      }
      f->entries = grown;
      f->cap = cap;
    }
    entry *e = &f->entries[f->n++];
    memset(e, 0, sizeof *e);
    e->name = key;
    if (strlen(key) != key_len)
      return open_error(f->path, EM_ERR_FORMAT, "tensor name '%.200s' contains a NUL character", key);
    if ((st = parse_entry(f, &j, e))) return st;
  }
  if ((jst = io_json_finish(&j))) return json_error(f, &j, jst, "");
  return EM_OK;
}

static int entry_by_name(const void *a, const void *b) {
  return strcmp(((const entry *)a)->name, ((const entry *)b)->name);
}

static int entry_by_offsets(const void *a, const void *b) {
  const entry *x = *(const entry *const *)a, *y = *(const entry *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return (x->end > y->end) - (x->end < y->end);
}

static int meta_by_key(const void *a, const void *b) {
  return strcmp(((const meta_pair *)a)->key, ((const meta_pair *)b)->key);
}

/* Each tensor's bytes match its dtype and shape and lie in the file; together they tile
 * the data section with no gap, overlap or trailing bytes, as the format requires. */
static em_status validate(em_safetensors *f) {
  const char *path = f->path;
  for (int i = 0; i < f->n; i++) {
    const entry *e = &f->entries[i];
    int64_t numel = 1, esize = (int64_t)em_dtype_size(e->dtype);
    for (int d = 0; d < e->ndim; d++) {
      if (e->sizes[d] && numel > INT64_MAX / e->sizes[d])
        return open_error(path, EM_ERR_FORMAT, "tensor '%s': shape %s has more elements than fit in 64 bits", e->name,
                          tn_shape_str(e->ndim, e->sizes));
      numel *= e->sizes[d];
    }
    if (numel > INT64_MAX / esize)
      return open_error(path, EM_ERR_FORMAT, "tensor '%s': shape %s of %s is more bytes than fit in 64 bits", e->name,
                        tn_shape_str(e->ndim, e->sizes), em_dtype_name(e->dtype));
    if (e->end < e->begin)
      return open_error(path, EM_ERR_FORMAT, "tensor '%s': data_offsets [%lld, %lld] end before they begin", e->name,
                        (long long)e->begin, (long long)e->end);
    if (e->end - e->begin != numel * esize)
      return open_error(path, EM_ERR_FORMAT,
                        "tensor '%s': data_offsets [%lld, %lld] hold %lld bytes, but dtype %s and shape %s need %lld",
                        e->name, (long long)e->begin, (long long)e->end, (long long)(e->end - e->begin),
                        em_dtype_name(e->dtype), tn_shape_str(e->ndim, e->sizes), (long long)(numel * esize));
    if ((uint64_t)e->end > f->data_len)
      return open_error(path, EM_ERR_FORMAT,
                        "tensor '%s': data_offsets [%lld, %lld] run past the end of the data section (%zu bytes, "
                        "file %zu bytes): the file is truncated or the offsets are wrong",
                        e->name, (long long)e->begin, (long long)e->end, f->data_len, f->file_len);
  }
  if (f->n) qsort(f->entries, (size_t)f->n, sizeof *f->entries, entry_by_name);
  for (int i = 1; i < f->n; i++)
    if (!strcmp(f->entries[i - 1].name, f->entries[i].name))
      return open_error(path, EM_ERR_FORMAT, "tensor '%s' appears twice in the header", f->entries[i].name);
  if (f->nmeta) qsort(f->meta, (size_t)f->nmeta, sizeof *f->meta, meta_by_key);
  for (int i = 1; i < f->nmeta; i++)
    if (!strcmp(f->meta[i - 1].key, f->meta[i].key))
      return open_error(path, EM_ERR_FORMAT, "'__metadata__' key '%s' appears twice", f->meta[i].key);

  const entry **order = malloc(sizeof *order * ((size_t)f->n + 1));
  if (!order) return open_error(path, EM_ERR_MEMORY, "out of memory");
  for (int i = 0; i < f->n; i++) order[i] = &f->entries[i];
  qsort(order, (size_t)f->n, sizeof *order, entry_by_offsets);
  em_status st = EM_OK;
  int64_t covered = 0;
  for (int i = 0; i < f->n && !st; i++) {
    const entry *e = order[i];
    if (e->begin > covered)
      st = open_error(path, EM_ERR_FORMAT,
                      "data section bytes [%lld, %lld) before tensor '%s' belong to no tensor "
                      "(tensors must be packed with no gaps)",
                      (long long)covered, (long long)e->begin, e->name);
    else if (e->begin < covered)
      st = open_error(path, EM_ERR_FORMAT,
                      "tensor '%s' (data_offsets [%lld, %lld]) overlaps tensor '%s' (data_offsets "
                      "[%lld, %lld])",
                      e->name, (long long)e->begin, (long long)e->end, order[i - 1]->name,
                      (long long)order[i - 1]->begin, (long long)order[i - 1]->end);
    covered = e->end;
  }
  if (!st && (uint64_t)covered != f->data_len)
    st = open_error(path, EM_ERR_FORMAT,
                    "the data section is %zu bytes but the tensors cover only %lld: %zu bytes at "
                    "the end belong to no tensor",
                    f->data_len, (long long)covered, f->data_len - (size_t)covered);
  free(order);
  return st;
}

static em_status map_file(em_safetensors *f) {
  /* O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below. */
  int fd = open(f->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return open_error(f->path, EM_ERR_IO, "cannot open: %s", strerror(errno));
  struct stat sb;
  em_status st = EM_OK;
  if (fstat(fd, &sb)) st = open_error(f->path, EM_ERR_IO, "cannot stat: %s", strerror(errno));
  else if (!S_ISREG(sb.st_mode)) st = open_error(f->path, EM_ERR_IO, "not a regular file");
  else if (sb.st_size < 8)
    st = open_error(f->path, EM_ERR_FORMAT,
                    "the file is %lld bytes, shorter than the 8-byte header length that "
                    "starts a safetensors file",
                    (long long)sb.st_size);
  if (st) {
    close(fd);
    return st;
  }
  f->file_len = (size_t)sb.st_size;
  f->map = calloc(1, sizeof *f->map);
  /* Private and writable: tensors adopting the pages may be written; the file never is. */
  void *addr = f->map ? mmap(NULL, f->file_len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  int err = errno;
  close(fd);
  if (addr == MAP_FAILED) {
    free(f->map);
    f->map = NULL;
    return open_error(f->path, EM_ERR_IO, "cannot map %zu bytes: %s", f->file_len, strerror(err));
  }
  atomic_init(&f->map->refs, 1);
  f->map->addr = addr;
  f->map->len = f->file_len;
  return EM_OK;
}

em_status em_safetensors_open(em_safetensors **out, const char *path) {
  if (!out) return em_set_error(EM_ERR_ARGUMENT, "safetensors_open: out is NULL");
  *out = NULL;
  if (!path || !*path) return em_set_error(EM_ERR_ARGUMENT, "safetensors_open: path is NULL or empty");
  em_safetensors *f = calloc(1, sizeof *f);
  if (!f || !(f->path = strdup(path))) {
    free(f);
    return em_set_error(EM_ERR_MEMORY, "safetensors_open: %s: out of memory", path);
  }
  em_status st = map_file(f);
  if (!st) {
    const unsigned char *bytes = f->map->addr;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | bytes[i];
    if (hlen > MAX_HEADER_BYTES)
      st = open_error(path, EM_ERR_FORMAT,
                      "header length %llu is larger than the %llu-byte limit (not a safetensors "
                      "file?)",
                      (unsigned long long)hlen, MAX_HEADER_BYTES);
    else if (hlen > f->file_len - 8)
      st = open_error(path, EM_ERR_FORMAT,
                      "header length %llu runs past the end of the file (%zu bytes): the file is "
                      "truncated or not a safetensors file",
                      (unsigned long long)hlen, f->file_len);
    else {
      f->data = bytes + 8 + hlen;
      f->data_len = f->file_len - 8 - (size_t)hlen;
      if (!(st = parse_header(f, bytes + 8, (size_t)hlen))) st = validate(f);
    }
  }
  if (st) {
    em_safetensors_close(f);
    return st;
  }
  *out = f;
  return EM_OK;
}

void em_safetensors_close(em_safetensors *f) {
  if (!f) return;
  for (int i = 0; i < f->n; i++) free(f->entries[i].name);
  for (int i = 0; i < f->nmeta; i++) {
    free(f->meta[i].key);
    free(f->meta[i].value);
  }
  free(f->entries);
  free(f->meta);
  mapping_release(f->map);
  free(f->path);
  free(f);
}

int em_safetensors_count(const em_safetensors *f) { return f ? f->n : 0; }

const char *em_safetensors_name(const em_safetensors *f, int i) {
  return f && i >= 0 && i < f->n ? f->entries[i].name : NULL;
}

int em_safetensors_find(const em_safetensors *f, const char *name) {
  if (!f || !name) return -1;
  entry key = {.name = (char *)name};
  const entry *hit = bsearch(&key, f->entries, (size_t)f->n, sizeof *f->entries, entry_by_name);
  return hit ? (int)(hit - f->entries) : -1;
}

static em_status check_index(const char *op, const em_safetensors *f, int i) {
  if (!f) return em_set_error(EM_ERR_ARGUMENT, "%s: the file handle is NULL", op);
  if (i < 0 || i >= f->n)
    return em_set_error(EM_ERR_INDEX, "%s: %s: tensor index %d out of range (the file holds %d tensors: 0..%d)", op,
                        f->path, i, f->n, f->n - 1);
  return EM_OK;
}

em_status em_safetensors_info(const em_safetensors *f, int i, em_dtype *dtype, int *ndim, int64_t *sizes) {
  em_status st = check_index("safetensors_info", f, i);
  if (st) return st;
  const entry *e = &f->entries[i];
  if (dtype) *dtype = e->dtype;
  if (ndim) *ndim = e->ndim;
  if (sizes) memcpy(sizes, e->sizes, sizeof(int64_t) * (size_t)e->ndim);
  return EM_OK;
}

/* A tensor over the mapped bytes (holding a reference to the mapping), or a copy when
 * the bytes are not aligned to the element size: kernels load whole elements. */
static em_status entry_tensor(const em_safetensors *f, const entry *e, em_tensor **out) {
  void *ptr = (void *)(f->data + e->begin);
  size_t esize = em_dtype_size(e->dtype), nbytes = (size_t)(e->end - e->begin);
  if ((uintptr_t)ptr % esize) {
    em_status st = em_empty(out, e->ndim, e->sizes, e->dtype, cpu_device());
    if (!st && nbytes) memcpy(em_tensor_data(*out), ptr, nbytes);
    return st;
  }
  /* The storage is built here rather than by em_from_blob so that the mapping's
   * reference has exactly one owner on every path, failures included. */
  em_storage *s = calloc(1, sizeof *s);
  if (!s) return em_set_error(EM_ERR_MEMORY, "safetensors_get: out of host memory");
  atomic_fetch_add(&f->map->refs, 1);
  atomic_init(&s->refcount, 1);
  s->device = cpu_device();
  s->data = ptr;
  s->nbytes = nbytes;
  s->deleter = mapping_deleter;
  s->deleter_ctx = f->map;
  *out = tn_tensor_wrap(s, e->dtype, e->ndim, e->sizes, NULL, 0);
  tn_storage_release(s); /* the tensor holds it now; on failure this unmaps if last */
  return *out ? EM_OK : em_last_status();
}

em_status em_safetensors_get(const em_safetensors *f, int i, em_tensor **out) {
  em_status st = check_index("safetensors_get", f, i);
  if (st) return st;
  if (!out) return em_set_error(EM_ERR_ARGUMENT, "safetensors_get: out is NULL");
  const entry *e = &f->entries[i];
  if (!*out) return entry_tensor(f, e, out);
  em_tensor *dst = *out;
  if ((st = tn_check_tensor("safetensors_get", dst, "destination"))) return st;
  int same = em_tensor_ndim(dst) == e->ndim;
  for (int d = 0; same && d < e->ndim; d++) same = em_tensor_size(dst, d) == e->sizes[d];
  if (!same)
    return em_set_error(EM_ERR_SHAPE,
                        "safetensors_get: %s: tensor '%s' has shape %s in the file, the destination "
                        "has shape %s",
                        f->path, e->name, tn_shape_str(e->ndim, e->sizes), EM_SHAPE(dst));
  em_tensor *src = NULL;
  if ((st = entry_tensor(f, e, &src))) return st;
  st = em_copy_(dst, src);
  em_tensor_release(src);
  return st;
}

em_status em_safetensors_get_by_name(const em_safetensors *f, const char *name, em_tensor **out) {
  if (!f) return em_set_error(EM_ERR_ARGUMENT, "safetensors_get: the file handle is NULL");
  int i = em_safetensors_find(f, name);
  if (i < 0)
    return em_set_error(EM_ERR_INDEX, "safetensors_get: %s: no tensor named '%s' (the file holds %d tensors)", f->path,
                        name ? name : "(null)", f->n);
  return em_safetensors_get(f, i, out);
}

int em_safetensors_metadata_count(const em_safetensors *f) { return f ? f->nmeta : 0; }

const char *em_safetensors_metadata_key(const em_safetensors *f, int i) {
  return f && i >= 0 && i < f->nmeta ? f->meta[i].key : NULL;
}

const char *em_safetensors_metadata_value(const em_safetensors *f, int i) {
  return f && i >= 0 && i < f->nmeta ? f->meta[i].value : NULL;
}

const char *em_safetensors_metadata_get(const em_safetensors *f, const char *key) {
  for (int i = 0; f && key && i < f->nmeta; i++)
    if (!strcmp(f->meta[i].key, key)) return f->meta[i].value;
  return NULL;
}
