/* tfrecord.c - TFRecord files and the tf.train.Example records they usually hold.
 *
 * A TFRecord file is a sequence of records:
 *   uint64 length, uint32 masked CRC-32C of those 8 bytes, data[length], uint32 masked CRC
 *   of the data
 * (little-endian; masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8). Opening a shard reads
 * only the 12-byte headers, checking each length's CRC, to index the records; a record's
 * data CRC is checked when it is read. A tf.train.Example is protobuf:
 *   Example { Features features = 1 }  Features { map<string, Feature> feature = 1 }
 *   Feature { oneof { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3 } }
 * and this file decodes just enough of it to find one bytes feature and one int64 feature. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "formats.h"
#ifdef __SSE4_2__
#include <nmmintrin.h>
#endif

#define OP "tfrecord"

/* ---------------------------------------------------------------- CRC-32C */
#ifndef __SSE4_2__
static uint32_t crc_table[8][256];
static int crc_ready;

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    crc_table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int t = 1; t < 8; t++) crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
  __atomic_store_n(&crc_ready, 1, __ATOMIC_RELEASE);
}
#endif

uint32_t em_data_crc32c(const void *data, size_t n, uint32_t crc) {
  const uint8_t *p = data;
  uint32_t c = ~crc;
#ifdef __SSE4_2__ /* the CPU's CRC32 instruction computes exactly CRC-32C */
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
    p += 8;
    n -= 8;
  }
  c = (uint32_t)c64;
  while (n--) c = _mm_crc32_u8(c, *p++);
#else
  if (!__atomic_load_n(&crc_ready, __ATOMIC_ACQUIRE)) crc_init();
  while (n >= 8) { /* slicing by 8 */
    uint32_t lo, hi;
    memcpy(&lo, p, 4);
    memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^ crc_table[5][(lo >> 16) & 0xff] ^
        crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
        crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
#endif
  return ~c;
}

uint32_t em_data_tfrecord_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

/* ---------------------------------------------------------------- records */
em_status dp_tfrecord_index(const char *path, int file, dp_record **recs, int64_t *n, int64_t *cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return em_set_error(EM_ERR_IO, OP ": cannot open '%s': %s", path, strerror(errno));
  off_t size = lseek(fd, 0, SEEK_END);
  int64_t off = 0, count = 0;
  em_status st = EM_OK;
  while (off < size) {
    uint8_t h[12];
    if (size - off < 12 || pread(fd, h, 12, off) != 12) {
      st = em_set_error(EM_ERR_FORMAT,
                        OP
                        ": '%s': record %lld at offset %lld is truncated (%lld bytes left, a header "
                        "takes 12)",
                        path, (long long)count, (long long)off, (long long)(size - off));
      break;
    }
    uint64_t len = le64(h);
    uint32_t want = le32(h + 8), got = em_data_tfrecord_mask(em_data_crc32c(h, 8, 0));
    if (want != got) {
      st = em_set_error(EM_ERR_FORMAT,
                        OP
                        ": '%s': record %lld at offset %lld: the length's CRC-32C does not match "
                        "(stored 0x%08x, computed 0x%08x): not a TFRecord file, or corrupt",
                        path, (long long)count, (long long)off, want, got);
      break;
    }
    if (len > (uint64_t)(size - off - 12) || (uint64_t)(size - off - 12) - len < 4) {
      st = em_set_error(EM_ERR_FORMAT,
                        OP
                        ": '%s': record %lld at offset %lld is truncated (%llu data bytes + 4 "
                        "promised, %lld in the file)",
                        path, (long long)count, (long long)off, (unsigned long long)len, (long long)(size - off - 12));
      break;
    }
    if (*n == *cap) {
      int64_t c = *cap ? 2 * *cap : 1024;
      dp_record *r = realloc(*recs, (size_t)c * sizeof *r);
      if (!r) {
        st = em_set_error(EM_ERR_MEMORY, OP ": out of memory indexing '%s'", path);
        break;
      }
      *recs = r;
      *cap = c;
    }
    (*recs)[(*n)++] = (dp_record){file, off, (int64_t)len};
    off += 12 + (int64_t)len + 4;
    count++;
  }
  close(fd);
  return st;
}

em_status dp_tfrecord_read(int fd, const char *path, const dp_record *r, int64_t index, uint8_t **buf, size_t *cap) {
  size_t need = (size_t)r->length + 4;
  if (need > *cap) {
    uint8_t *b = realloc(*buf, need);
    if (!b) return em_set_error(EM_ERR_MEMORY, OP ": out of memory for a record of %lld bytes", (long long)r->length);
    *buf = b;
    *cap = need;
  }
  ssize_t got = pread(fd, *buf, need, r->offset + 12);
  if (got != (ssize_t)need)
    return em_set_error(EM_ERR_IO, OP ": '%s': the record at offset %lld (sample %lld): cannot read its %lld bytes%s%s",
                        path, (long long)r->offset, (long long)index, (long long)r->length,
                        got < 0 ? ": " : " (short read)", got < 0 ? strerror(errno) : "");
  uint32_t want = le32(*buf + r->length), crc = em_data_tfrecord_mask(em_data_crc32c(*buf, (size_t)r->length, 0));
  if (want != crc)
    return em_set_error(EM_ERR_FORMAT,
                        OP
                        ": '%s': the record at offset %lld (sample %lld): data CRC-32C mismatch "
                        "(stored 0x%08x, computed 0x%08x)",
                        path, (long long)r->offset, (long long)index, want, crc);
  return EM_OK;
}

/* ---------------------------------------------------------------- tf.train.Example */
typedef struct pb {
  const uint8_t *p, *end;
} pb;

static int pb_varint(pb *b, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64 && b->p < b->end; shift += 7) {
    uint8_t byte = *b->p++;
    *v |= (uint64_t)(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return 1;
  }
  return 0;
}

/* Next field: its number, wire type, and for length-delimited fields the bytes. */
static int pb_field(pb *b, uint32_t *num, int *wt, pb *sub, uint64_t *val) {
  uint64_t key;
  if (!pb_varint(b, &key)) return 0;
  *num = (uint32_t)(key >> 3);
  *wt = (int)(key & 7);
  switch (*wt) {
    case 0: return pb_varint(b, val);
    case 1:
      if (b->end - b->p < 8) return 0;
      b->p += 8;
      return 1;
    case 5:
      if (b->end - b->p < 4) return 0;
      b->p += 4;
      return 1;
    case 2: {
      uint64_t len;
      if (!pb_varint(b, &len) || len > (uint64_t)(b->end - b->p)) return 0;
      sub->p = b->p;
      sub->end = b->p + len;
      b->p += len;
      return 1;
    }
    default: return 0;
  }
}

/* In a Feature: the first value of its bytes_list (kind 1) or int64_list (kind 3). */
static int feature_value(pb f, int kind, const uint8_t **bytes, size_t *len, int64_t *ival, int *found) {
  uint32_t num;
  int wt;
  pb sub = {NULL, NULL};
  uint64_t v;
  while (f.p < f.end) {
    if (!pb_field(&f, &num, &wt, &sub, &v)) return 0;
    if (wt != 2 || (int)num != kind) continue;
    pb list = sub;
    while (list.p < list.end) {
      pb item = {NULL, NULL};
      if (!pb_field(&list, &num, &wt, &item, &v)) return 0;
      if (num != 1) continue;
      if (kind == 1 && wt == 2) {
        *bytes = item.p;
        *len = (size_t)(item.end - item.p);
        *found = 1;
        return 1;
      }
      if (kind == 3 && wt == 0) { /* unpacked */
        *ival = (int64_t)v;
        *found = 1;
        return 1;
      }
      if (kind == 3 && wt == 2 && item.p < item.end) { /* packed */
        if (!pb_varint(&item, &v)) return 0;
        *ival = (int64_t)v;
        *found = 1;
        return 1;
      }
    }
  }
  return 1;
}

em_status dp_example_find(const uint8_t *p, size_t n, const char *image_key, const char *label_key,
                          const uint8_t **image, size_t *image_len, int64_t *label, const char *what) {
  pb ex = {p, p + n}, sub = {NULL, NULL}, feats = {NULL, NULL};
  uint32_t num;
  int wt, got_image = 0, got_label = 0;
  uint64_t v;
  char keys[256] = "";
  while (ex.p < ex.end) {
    if (!pb_field(&ex, &num, &wt, &sub, &v)) goto bad;
    if (num == 1 && wt == 2) feats = sub;
  }
  while (feats.p && feats.p < feats.end) {
    pb entry = {NULL, NULL};
    if (!pb_field(&feats, &num, &wt, &entry, &v)) goto bad;
    if (num != 1 || wt != 2) continue;
    pb key = {NULL, NULL}, value = {NULL, NULL};
    while (entry.p < entry.end) {
      pb x = {NULL, NULL};
      if (!pb_field(&entry, &num, &wt, &x, &v)) goto bad;
      if (num == 1 && wt == 2) key = x;
      if (num == 2 && wt == 2) value = x;
    }
    if (!key.p || !value.p) continue;
    size_t klen = (size_t)(key.end - key.p), used = strlen(keys);
    if (used + klen + 3 < sizeof keys)
      snprintf(keys + used, sizeof keys - used, "%s%.*s", used ? ", " : "", (int)klen, (const char *)key.p);
    if (klen == strlen(image_key) && !memcmp(key.p, image_key, klen)) {
      if (!feature_value(value, 1, image, image_len, NULL, &got_image)) goto bad;
    } else if (label_key && klen == strlen(label_key) && !memcmp(key.p, label_key, klen)) {
      if (!feature_value(value, 3, NULL, NULL, label, &got_label)) goto bad;
    }
  }
  if (!got_image)
    return em_set_error(EM_ERR_FORMAT, OP ": %s: no bytes feature '%s' (the record has: %s)", what, image_key,
                        keys[0] ? keys : "no features");
  if (label_key && !got_label)
    return em_set_error(EM_ERR_FORMAT, OP ": %s: no int64 feature '%s' (the record has: %s)", what, label_key,
                        keys[0] ? keys : "no features");
  return EM_OK;
bad:
  return em_set_error(EM_ERR_FORMAT, OP ": %s: not a tf.train.Example (malformed protobuf)", what);
}
