/* npy.c - NumPy's .npy files (https://numpy.org/neps/nep-0001-npy-format.html).
 *
 * "\x93NUMPY", a version (1.0: a 2-byte header length; 2.0 and 3.0: 4 bytes), then a
 * Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 28, 28), }
 * padded with spaces to an alignment of 64, then the elements. ember reads C-order arrays
 * of the dtypes it has (u1, b1, i4, i8, f2, f4, f8), little-endian. Datasets map the file
 * instead of reading it, so a large array costs no memory until its rows are touched. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/core_impl.h"
#include "formats.h"

#define OP "npy"

static const struct {
  const char *code;
  em_dtype dtype;
} npy_types[] = {{"u1", EM_UINT8},   {"b1", EM_BOOL},    {"i4", EM_INT32},  {"i8", EM_INT64},
                 {"f2", EM_FLOAT16}, {"f4", EM_FLOAT32}, {"f8", EM_FLOAT64}};

/* The value of 'key' in the header dict: a pointer just past "'key':" and spaces. */
static const char *dict_value(const char *h, const char *key) {
  char pat[32];
  snprintf(pat, sizeof pat, "'%s'", key);
  const char *p = strstr(h, pat);
  if (!p) return NULL;
  p += strlen(pat);
  while (*p == ' ') p++;
  if (*p != ':') return NULL;
  p++;
  while (*p == ' ') p++;
  return p;
}

static em_status parse_header(dp_npy *out, const char *h) {
  const char *d = dict_value(h, "descr"), *f = dict_value(h, "fortran_order"), *s = dict_value(h, "shape");
  if (!d || !f || !s || *d != '\'' || *s != '(')
    return em_set_error(EM_ERR_FORMAT, OP ": '%s': the header lacks descr, fortran_order or shape: %.200s", out->path,
                        h);
  char descr[16] = {0};
  size_t n = strcspn(d + 1, "'");
  if (n >= sizeof descr) return em_set_error(EM_ERR_FORMAT, OP ": '%s': unknown dtype %.40s", out->path, d);
  memcpy(descr, d + 1, n);
  if (!strncmp(f, "True", 4))
    return em_set_error(EM_ERR_FORMAT,
                        OP
                        ": '%s': Fortran-order arrays are not supported (save with "
                        "np.ascontiguousarray)",
                        out->path);
  char order = descr[0];
  const char *code = descr + 1;
  if (order != '<' && order != '|' && order != '=') code = descr, order = '?';
  int found = 0;
  for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
    if (!strcmp(code, npy_types[i].code)) {
      out->dtype = npy_types[i].dtype;
      found = 1;
    }
  if (!found || order == '?')
    return em_set_error(EM_ERR_FORMAT,
                        OP
                        ": '%s': dtype '%s' is not supported (expected little-endian u1, b1, i4, "
                        "i8, f2, f4 or f8)",
                        out->path, descr);
  out->ndim = 0;
  const char *p = s + 1;
  for (;;) {
    while (*p == ' ' || *p == ',') p++;
    if (*p == ')') break;
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p || v < 0 || out->ndim == 8)
      return em_set_error(EM_ERR_FORMAT, OP ": '%s': cannot read the shape %.60s", out->path, s);
    out->shape[out->ndim++] = v;
    p = end;
    while (*p == 'L') p++; /* Python 2 longs */
  }
  return EM_OK;
}

/* "(60000, 28, 28)" for messages. */
static const char *shape_text(char *buf, size_t cap, const dp_npy *a) {
  size_t used = (size_t)snprintf(buf, cap, "(");
  for (int d = 0; d < a->ndim && used < cap; d++)
    used += (size_t)snprintf(buf + used, cap - used, "%s%lld", d ? ", " : "", (long long)a->shape[d]);
  if (used < cap) snprintf(buf + used, cap - used, ")");
  return buf;
}

em_status dp_npy_open(dp_npy *out, const char *path, int map) {
  memset(out, 0, sizeof *out);
  snprintf(out->path, sizeof out->path, "%s", path);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return em_set_error(EM_ERR_IO, OP ": cannot open '%s': %s", path, strerror(errno));
  struct stat sb;
  uint8_t pre[12];
  em_status st = EM_OK;
  char *header = NULL;
  if (fstat(fd, &sb) != 0 || pread(fd, pre, sizeof pre, 0) != (ssize_t)sizeof pre) {
    st = em_set_error(EM_ERR_FORMAT, OP ": '%s' is too short for a .npy file", path);
    goto done;
  }
  if (memcmp(pre, "\x93NUMPY", 6)) {
    st = em_set_error(EM_ERR_FORMAT, OP ": '%s' is not a .npy file (it does not start with \\x93NUMPY)", path);
    goto done;
  }
  int64_t hlen, hstart;
  if (pre[6] == 1) {
    hlen = pre[8] | (pre[9] << 8);
    hstart = 10;
  } else if (pre[6] == 2 || pre[6] == 3) {
    hlen = (int64_t)pre[8] | ((int64_t)pre[9] << 8) | ((int64_t)pre[10] << 16) | ((int64_t)pre[11] << 24);
    hstart = 12;
  } else {
    st = em_set_error(EM_ERR_FORMAT, OP ": '%s': unknown format version %d.%d", path, pre[6], pre[7]);
    goto done;
  }
  if (hstart + hlen > sb.st_size || hlen > (1 << 20)) {
    st = em_set_error(EM_ERR_FORMAT, OP ": '%s' is truncated: its header of %lld bytes does not fit the file", path,
                      (long long)hlen);
    goto done;
  }
  header = malloc((size_t)hlen + 1);
  if (!header || pread(fd, header, (size_t)hlen, hstart) != (ssize_t)hlen) {
    st = em_set_error(EM_ERR_IO, OP ": cannot read the header of '%s'", path);
    goto done;
  }
  header[hlen] = 0;
  if ((st = parse_header(out, header))) goto done;
  out->data_offset = hstart + hlen;
  /* As NumPy does: the product of the non-zero dims must not overflow either, since a
   * zero dim beside huge ones still yields huge strides and row sizes. */
  int64_t count = 1, nonzero = (int64_t)em_dtype_size(out->dtype), want;
  for (int i = 0; i < out->ndim; i++) {
    if (out->shape[i] && __builtin_mul_overflow(nonzero, out->shape[i], &nonzero)) {
      char text[200];
      st = em_set_error(EM_ERR_FORMAT,
                        OP
                        ": '%s': the header's shape %s of %s is too large (its bytes overflow 64 "
                        "bits)",
                        path, shape_text(text, sizeof text, out), em_dtype_name(out->dtype));
      goto done;
    }
    count *= out->shape[i]; /* at most nonzero: cannot overflow */
  }
  want = count * (int64_t)em_dtype_size(out->dtype);
  if (sb.st_size - out->data_offset != want) {
    st = em_set_error(EM_ERR_FORMAT,
                      OP
                      ": '%s' holds %lld data bytes, its header (shape of %lld elements of %s) "
                      "promises %lld",
                      path, (long long)(sb.st_size - out->data_offset), (long long)count, em_dtype_name(out->dtype),
                      (long long)want);
    goto done;
  }
  if (map && sb.st_size > 0) {
    void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      st = em_set_error(EM_ERR_IO, OP ": cannot map '%s': %s", path, strerror(errno));
      goto done;
    }
    out->map = m;
    out->map_bytes = (size_t)sb.st_size;
  }
done:
  free(header);
  close(fd);
  return st;
}

void dp_npy_close(dp_npy *n) {
  if (n->map) munmap((void *)n->map, n->map_bytes);
  n->map = NULL;
}

em_status em_data_read_npy(em_tensor **out, const char *path) {
  if (!out || *out) return em_set_error(EM_ERR_ARGUMENT, OP ": out must point to NULL (the result is new)");
  if (!path) return em_set_error(EM_ERR_ARGUMENT, OP ": path must not be NULL");
  dp_npy n;
  em_status st = dp_npy_open(&n, path, 1);
  if (st) return st;
  st = em_empty(out, n.ndim, n.shape, n.dtype, (em_device){EM_CPU, 0});
  if (!st) {
    size_t bytes = n.map_bytes ? n.map_bytes - (size_t)n.data_offset : 0;
    if (bytes) memcpy(em_tensor_data(*out), n.map + n.data_offset, bytes);
  }
  dp_npy_close(&n);
  return st;
}

typedef struct npy_contents {
  const char *path;
  const unsigned char *pre;
  const char *header;
  int header_len, padded;
  const em_tensor *data;
} npy_contents;

static em_status write_npy_contents(int fd, void *ctx) {
  const npy_contents *w = ctx;
  char pad[64];
  int npad = w->padded - 10 - w->header_len; /* spaces, then the newline that ends the header */
  memset(pad, ' ', sizeof pad);
  pad[npad - 1] = '\n';
  size_t bytes = (size_t)em_tensor_numel(w->data) * em_dtype_size(em_tensor_dtype(w->data));
  if (core_write_all(fd, w->pre, 10) || core_write_all(fd, w->header, (size_t)w->header_len) ||
      core_write_all(fd, pad, (size_t)npad) || (bytes && core_write_all(fd, em_tensor_data(w->data), bytes)))
    return em_set_error(EM_ERR_IO, OP ": cannot write '%s': %s", w->path, strerror(errno));
  return EM_OK;
}

em_status em_data_write_npy(const char *path, const em_tensor *t) {
  if (!path || !t) return em_set_error(EM_ERR_ARGUMENT, OP ": write expects a path and a tensor");
  em_dtype dt = em_tensor_dtype(t);
  const char *code = NULL;
  for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
    if (npy_types[i].dtype == dt) code = npy_types[i].code;
  if (!code)
    return em_set_error(EM_ERR_DTYPE, OP ": cannot write %s tensors (NumPy has no such dtype)", em_dtype_name(dt));
  if (em_tensor_device(t).type != EM_CPU) return em_set_error(EM_ERR_DEVICE, OP ": write expects a CPU tensor");
  char shape[256] = "";
  int nd = em_tensor_ndim(t);
  for (int i = 0; i < nd; i++) {
    size_t used = strlen(shape);
    snprintf(shape + used, sizeof shape - used, "%lld%s", (long long)em_tensor_size(t, i),
             nd == 1 || i + 1 < nd ? ", " : "");
  }
  char header[400];
  int len = snprintf(header, sizeof header, "{'descr': '%c%s', 'fortran_order': False, 'shape': (%s), }",
                     dt == EM_UINT8 || dt == EM_BOOL ? '|' : '<', code, shape);
  int total = 10 + len + 1;
  int padded = (total + 63) / 64 * 64;
  em_tensor *c = NULL;
  em_status st = em_contiguous(&c, t);
  if (st) return st;
  int hl = padded - 10;
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hl & 0xff), (unsigned char)(hl >> 8)};
  npy_contents w = {path, pre, header, len, padded, c};
  st = core_replace_file(OP ": write", path, write_npy_contents, &w);
  em_tensor_release(c);
  return st;
}
