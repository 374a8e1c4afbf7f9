/* idx.c - the IDX reader (MNIST, Fashion-MNIST), plain or gzipped.
 *
 * zlib's gz* functions read gzipped and plain files alike, so there is one path. The
 * header is checked field by field before anything large is allocated, and the data is
 * read straight into the result tensor (uint8, the common case) or through one buffer
 * (wider types, which are big-endian on disk). Every error names the file and says what
 * the header promised and what the file holds. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>
#include "ember/data.h"

#define OP "read_idx"
#define READ_CHUNK (1 << 30) /* gzread takes an unsigned int length */

typedef struct idx_type {
  uint8_t code;
  int file_size; /* bytes per element on disk */
  em_dtype dtype; /* what it becomes */
  const char *name;
} idx_type;

static const idx_type idx_types[] = {
    {0x08, 1, EM_UINT8, "unsigned byte"}, {0x09, 1, EM_INT32, "signed byte"}, {0x0B, 2, EM_INT32, "int16"},
    {0x0C, 4, EM_INT32, "int32"},         {0x0D, 4, EM_FLOAT32, "float32"},   {0x0E, 8, EM_FLOAT64, "float64"},
};

static const idx_type *find_type(uint8_t code) {
  for (size_t i = 0; i < sizeof idx_types / sizeof idx_types[0]; i++)
    if (idx_types[i].code == code) return &idx_types[i];
  return NULL;
}

/* Reads up to n bytes; returns how many were read, or -1 with the error set. A gzip
 * stream that stops early or fails its check is an error, not a short read. */
static int64_t read_bytes(gzFile f, const char *path, void *buf, int64_t n) {
  int64_t done = 0;
  while (done < n) {
    int64_t want = n - done < READ_CHUNK ? n - done : READ_CHUNK;
    int got = gzread(f, (char *)buf + done, (unsigned)want);
    int errnum = Z_OK;
    const char *why = gzerror(f, &errnum);
    if (got < 0 || (errnum != Z_OK && errnum != Z_STREAM_END)) {
      if (errnum == Z_ERRNO) em_set_error(EM_ERR_IO, OP ": cannot read '%s': %s", path, strerror(errno));
      else if (errnum == Z_BUF_ERROR)
        em_set_error(EM_ERR_FORMAT, OP ": '%s': the gzip stream is truncated (%s)", path, why);
      else em_set_error(EM_ERR_FORMAT, OP ": '%s': corrupt gzip data (%s)", path, why);
      return -1;
    }
    if (got == 0) break;
    done += got;
  }
  return done;
}

/* Bytes left in the file after the data (read and dropped), or -1 on a read error. */
static int64_t count_rest(gzFile f, const char *path) {
  char buf[4096];
  int64_t total = 0, got;
  while ((got = read_bytes(f, path, buf, sizeof buf)) > 0) total += got;
  return got < 0 ? -1 : total;
}

/* Element conversion from big-endian disk bytes to the tensor's dtype. */
static void convert(const idx_type *t, const uint8_t *src, void *dst, int64_t n) {
  switch (t->code) {
    case 0x09: {
      int32_t *d = dst;
      for (int64_t i = 0; i < n; i++) d[i] = (int8_t)src[i];
      break;
    }
    case 0x0B: {
      int32_t *d = dst;
      for (int64_t i = 0; i < n; i++) d[i] = (int16_t)(uint16_t)((src[2 * i] << 8) | src[2 * i + 1]);
      break;
    }
    case 0x0C:
    case 0x0D: { /* int32 and float32 are both 4 bytes: swap into place */
      uint32_t *d = dst;
      for (int64_t i = 0; i < n; i++) {
        const uint8_t *s = src + 4 * i;
        d[i] = (uint32_t)s[0] << 24 | (uint32_t)s[1] << 16 | (uint32_t)s[2] << 8 | s[3];
      }
      break;
    }
    case 0x0E: {
      uint64_t *d = dst;
      for (int64_t i = 0; i < n; i++) {
        uint64_t v = 0;
        for (int b = 0; b < 8; b++) v = v << 8 | src[8 * i + b];
        d[i] = v;
      }
      break;
    }
  }
}

/* Checks the header; fills type, ndim and sizes. */
static em_status read_header(gzFile f, const char *path, const idx_type **type, int *ndim, int64_t *sizes) {
  uint8_t magic[4];
  int64_t got = read_bytes(f, path, magic, 4);
  if (got < 0) return em_last_status();
  if (got < 4)
    return em_set_error(EM_ERR_FORMAT, OP ": '%s' is too short for an IDX header (%lld bytes, expected at least 4)",
                        path, (long long)got);
  if (magic[0] || magic[1])
    return em_set_error(EM_ERR_FORMAT,
                        OP
                        ": '%s' is not an IDX file: it starts with 0x%02x%02x%02x%02x, expected two zero bytes, "
                        "a type code and the number of dims (e.g. 0x00000803)",
                        path, magic[0], magic[1], magic[2], magic[3]);
  if (!(*type = find_type(magic[2])))
    return em_set_error(EM_ERR_FORMAT,
                        OP
                        ": '%s': unknown type code 0x%02x in the header, expected 0x08 (unsigned byte), "
                        "0x09 (signed byte), 0x0B (int16), 0x0C (int32), 0x0D (float32) or 0x0E (float64)",
                        path, magic[2]);
  *ndim = magic[3];
  if (*ndim < 1 || *ndim > EM_MAX_DIMS)
    return em_set_error(EM_ERR_FORMAT, OP ": '%s': the header gives %d dims, expected 1 to %d", path, *ndim,
                        EM_MAX_DIMS);
  uint8_t dims[4 * EM_MAX_DIMS];
  got = read_bytes(f, path, dims, 4 * *ndim);
  if (got < 0) return em_last_status();
  if (got < 4 * *ndim)
    return em_set_error(EM_ERR_FORMAT,
                        OP ": '%s' ends inside the header: %d dims need %d header bytes, the file holds %lld", path,
                        *ndim, 4 + 4 * *ndim, (long long)(4 + got));
  for (int d = 0; d < *ndim; d++) {
    const uint8_t *s = dims + 4 * d;
    sizes[d] = (int64_t)((uint32_t)s[0] << 24 | (uint32_t)s[1] << 16 | (uint32_t)s[2] << 8 | s[3]);
  }
  return EM_OK;
}

/* "[60000, 28, 28]" for messages. */
static const char *dims_text(char *buf, size_t len, int ndim, const int64_t *sizes) {
  size_t used = (size_t)snprintf(buf, len, "[");
  for (int d = 0; d < ndim && used < len; d++)
    used += (size_t)snprintf(buf + used, len - used, "%s%lld", d ? ", " : "", (long long)sizes[d]);
  if (used < len) snprintf(buf + used, len - used, "]");
  return buf;
}

/* Deflate expands at most about 1032:1, so a gzipped file of `size` bytes holds at most
 * this much: the bound that keeps a header from asking for memory the file cannot fill. */
#define GZIP_MAX_RATIO 1032

static em_status read_idx(gzFile f, const char *path, int64_t size, int64_t limit, em_tensor **out) {
  const idx_type *type = NULL;
  int ndim = 0;
  int64_t sizes[EM_MAX_DIMS];
  em_status st = read_header(f, path, &type, &ndim, sizes);
  if (st) return st;
  char dtext[160];
  dims_text(dtext, sizeof dtext, ndim, sizes);
  /* Element count of one item (dims 1..) and of the whole file, checked for overflow. */
  int64_t item = 1, total, nonzero = 1;
  for (int d = 1; d < ndim; d++)
    if (__builtin_mul_overflow(item, sizes[d], &item))
      return em_set_error(EM_ERR_FORMAT, OP ": '%s': the header's dims %s are too large", path, dtext);
  /* A zero dim makes no elements, but the tensor's strides still multiply the others. */
  for (int d = 0; d < ndim; d++)
    if (sizes[d] && (__builtin_mul_overflow(nonzero, sizes[d], &nonzero) || nonzero > INT64_MAX / 16))
      return em_set_error(EM_ERR_FORMAT,
                          OP
                          ": '%s': the header's dims %s are too large (the product of the "
                          "non-zero ones must stay below 2^59)",
                          path, dtext);
  int64_t total_bytes;
  if (__builtin_mul_overflow(item, sizes[0], &total) ||
      __builtin_mul_overflow(total, (int64_t)type->file_size, &total_bytes) || total_bytes > INT64_MAX / 4)
    return em_set_error(EM_ERR_FORMAT, OP ": '%s': the header's dims %s are too large", path, dtext);

  int64_t items = limit >= 0 && limit < sizes[0] ? limit : sizes[0];
  int64_t out_sizes[EM_MAX_DIMS];
  memcpy(out_sizes, sizes, sizeof out_sizes);
  out_sizes[0] = items;
  int64_t n = items * item, want = n * type->file_size;
  int64_t header = 4 + 4 * (int64_t)ndim, avail;
  const int plain = gzdirect(f);
  if (plain) avail = size > header ? size - header : 0;
  else if (__builtin_mul_overflow(size, (int64_t)GZIP_MAX_RATIO, &avail)) avail = INT64_MAX;
  if (want > avail)
    return em_set_error(EM_ERR_FORMAT,
                        OP
                        ": '%s' is truncated: %lld data bytes expected (%lld items of the header's dims %s), "
                        "the file %s %lld",
                        path, (long long)want, (long long)items, dtext,
                        plain ? "holds" : "is gzipped and can hold at most", (long long)avail);
  if ((st = em_empty(out, ndim, out_sizes, type->dtype, (em_device){EM_CPU, 0}))) return st;

  void *raw = type->code == 0x08 ? em_tensor_data(*out) : malloc(want ? (size_t)want : 1);
  if (!raw) {
    em_tensor_release(*out);
    *out = NULL;
    return em_set_error(EM_ERR_MEMORY, OP ": '%s': out of memory for %lld bytes", path, (long long)want);
  }
  int64_t got = read_bytes(f, path, raw, want);
  if (got >= 0 && got < want)
    em_set_error(EM_ERR_FORMAT,
                 OP
                 ": '%s' is truncated: %lld data bytes expected (%lld items of the header's dims %s), "
                 "the file holds %lld",
                 path, (long long)want, (long long)items, dtext, (long long)got);
  int64_t rest = 0;
  if (got == want && limit < 0) {
    rest = count_rest(f, path);
    if (rest > 0)
      em_set_error(EM_ERR_FORMAT,
                   OP
                   ": '%s' has %lld bytes after the %lld data bytes that the header's dims %s describe "
                   "(expected the file to end there)",
                   path, (long long)rest, (long long)total_bytes, dtext);
  }
  if (got == want && rest == 0 && type->code != 0x08) convert(type, raw, em_tensor_data(*out), n);
  if (raw != em_tensor_data(*out)) free(raw);
  if (got != want || rest != 0) {
    em_tensor_release(*out);
    *out = NULL;
    return em_last_status();
  }
  return EM_OK;
}

em_status em_data_read_idx(em_tensor **out, const char *path, int64_t limit) {
  if (!out || *out) return em_set_error(EM_ERR_ARGUMENT, OP ": out must point to NULL (the result is new)");
  if (!path) return em_set_error(EM_ERR_ARGUMENT, OP ": path is NULL");
  struct stat sb;
  if (stat(path, &sb) != 0) return em_set_error(EM_ERR_IO, OP ": cannot open '%s': %s", path, strerror(errno));
  if (S_ISDIR(sb.st_mode)) return em_set_error(EM_ERR_IO, OP ": '%s' is a directory, expected an IDX file", path);
  gzFile f = gzopen(path, "rb");
  if (!f) return em_set_error(EM_ERR_IO, OP ": cannot open '%s': %s", path, errno ? strerror(errno) : "zlib error");
  gzbuffer(f, 1 << 17);
  em_status st = read_idx(f, path, (int64_t)sb.st_size, limit, out);
  gzclose(f);
  return st;
}
