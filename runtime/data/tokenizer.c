/* tokenizer.c - the character vocabulary and the byte-level BPE of ember/text.h: training,
 * encoding, decoding and the text file they are kept in.
 *
 * Every id has a piece: the bytes it stands for, stored back to back (pieces + offsets),
 * so decoding is one copy per id. BPE training counts pairs in a dense table indexed by
 * left * vocab_size + right (hence trained vocabularies stop at 8192: 256 MiB of counts);
 * after each merge only the entries the sequence touched are cleared, so a round costs
 * O(length), not O(vocab^2). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ember/text.h"

enum { KIND_CHAR = 0, KIND_BPE = 1, BPE_MAX_VOCAB = 65536, BPE_DENSE_MAX = 8192 };

struct em_tokenizer {
  int kind;
  int64_t vocab;
  int16_t char_id[256]; /* char: byte -> id, -1 when absent */
  int64_t nmerges;
  int32_t *merges; /* bpe: 2 * nmerges ids */
  uint8_t *pieces; /* the bytes of every id, back to back */
  int64_t *offsets; /* vocab + 1 offsets into pieces */
  int64_t max_piece;
};

static em_tokenizer *alloc_tokenizer(int kind) {
  em_tokenizer *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->kind = kind;
  for (int b = 0; b < 256; b++) t->char_id[b] = -1;
  return t;
}

void em_tokenizer_free(em_tokenizer *t) {
  if (!t) return;
  free(t->merges);
  free(t->pieces);
  free(t->offsets);
  free(t);
}

/* Pieces of a char vocabulary (the bytes present, in increasing order). */
static em_status build_char_pieces(em_tokenizer *t, const uint8_t present[256], const char *op) {
  int64_t v = 0;
  for (int b = 0; b < 256; b++) v += present[b] != 0;
  t->vocab = v;
  t->pieces = malloc((size_t)(v ? v : 1));
  t->offsets = malloc(sizeof(int64_t) * (size_t)(v + 1));
  if (!t->pieces || !t->offsets) return em_set_error(EM_ERR_MEMORY, "%s: out of memory", op);
  int64_t id = 0;
  for (int b = 0; b < 256; b++) {
    if (!present[b]) continue;
    t->char_id[b] = (int16_t)id;
    t->pieces[id] = (uint8_t)b;
    t->offsets[id] = id;
    id++;
  }
  t->offsets[v] = v;
  t->max_piece = 1;
  return EM_OK;
}

/* Pieces of a BPE: the 256 bytes, then each merge's left piece followed by its right. */
static em_status build_bpe_pieces(em_tokenizer *t, const char *op) {
  int64_t v = 256 + t->nmerges;
  t->vocab = v;
  t->offsets = malloc(sizeof(int64_t) * (size_t)(v + 1));
  if (!t->offsets) return em_set_error(EM_ERR_MEMORY, "%s: out of memory", op);
  int64_t total = 256;
  t->max_piece = 1;
  for (int64_t i = 0; i < 256; i++) t->offsets[i] = i;
  int64_t *lens = malloc(sizeof(int64_t) * (size_t)v);
  if (!lens) return em_set_error(EM_ERR_MEMORY, "%s: out of memory", op);
  for (int64_t i = 0; i < 256; i++) lens[i] = 1;
  for (int64_t i = 0; i < t->nmerges; i++) {
    lens[256 + i] = lens[t->merges[2 * i]] + lens[t->merges[2 * i + 1]];
    total += lens[256 + i];
    if (lens[256 + i] > t->max_piece) t->max_piece = lens[256 + i];
  }
  t->pieces = malloc((size_t)total);
  if (!t->pieces) {
    free(lens);
    return em_set_error(EM_ERR_MEMORY, "%s: out of memory for %" PRId64 " bytes of pieces", op, total);
  }
  for (int b = 0; b < 256; b++) t->pieces[b] = (uint8_t)b;
  int64_t at = 256;
  for (int64_t i = 0; i < t->nmerges; i++) {
    int32_t l = t->merges[2 * i], r = t->merges[2 * i + 1];
    t->offsets[256 + i] = at;
    memcpy(t->pieces + at, t->pieces + t->offsets[l], (size_t)lens[l]);
    memcpy(t->pieces + at + lens[l], t->pieces + t->offsets[r], (size_t)lens[r]);
    at += lens[256 + i];
  }
  t->offsets[v] = at;
  free(lens);
  return EM_OK;
}

em_status em_tokenizer_train_char(em_tokenizer **out, const uint8_t *text, int64_t n) {
  const char *op = "tokenizer_train_char";
  if (!out || *out) return em_set_error(EM_ERR_ARGUMENT, "%s: expected an empty output slot", op);
  if (!text || n < 1) return em_set_error(EM_ERR_ARGUMENT, "%s: expected at least 1 byte of text, got %" PRId64, op, n);
  uint8_t present[256] = {0};
  for (int64_t i = 0; i < n; i++) present[text[i]] = 1;
  em_tokenizer *t = alloc_tokenizer(KIND_CHAR);
  if (!t) return em_set_error(EM_ERR_MEMORY, "%s: out of memory", op);
  em_status st = build_char_pieces(t, present, op);
  if (st != EM_OK) {
    em_tokenizer_free(t);
    return st;
  }
  *out = t;
  return EM_OK;
}

/* Replaces every (a, b) in ids[0..n), left to right without overlaps, by c; returns the new length. */
static int64_t merge_pair(int32_t *ids, int64_t n, int32_t a, int32_t b, int32_t c) {
  int64_t w = 0, r = 0;
  while (r < n) {
    if (r + 1 < n && ids[r] == a && ids[r + 1] == b) {
      ids[w++] = c;
      r += 2;
    } else {
      ids[w++] = ids[r++];
    }
  }
  return w;
}

em_status em_tokenizer_train_bpe(em_tokenizer **out, const uint8_t *text, int64_t n, int64_t vocab_size) {
  const char *op = "tokenizer_train_bpe";
  if (!out || *out) return em_set_error(EM_ERR_ARGUMENT, "%s: expected an empty output slot", op);
  if (!text || n < 1) return em_set_error(EM_ERR_ARGUMENT, "%s: expected at least 1 byte of text, got %" PRId64, op, n);
  if (vocab_size < 256 || vocab_size > BPE_DENSE_MAX) {
    return em_set_error(EM_ERR_ARGUMENT, "%s: vocab_size must be in 256..%d (256 byte ids plus merges), got %" PRId64,
                        op, BPE_DENSE_MAX, vocab_size);
  }
  int64_t want = vocab_size - 256;
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
  int32_t *merges = malloc(sizeof(int32_t) * (size_t)(2 * (want ? want : 1)));
  /* counts[left * vocab_size + right]; calloc'ed pages stay untouched until used */
  uint32_t *counts = calloc((size_t)vocab_size * (size_t)vocab_size, sizeof(uint32_t));
  em_tokenizer *t = alloc_tokenizer(KIND_BPE);
  if (!ids || !merges || !counts || !t) {
    free(ids), free(merges), free(counts), em_tokenizer_free(t);
    return em_set_error(EM_ERR_MEMORY, "%s: out of memory (%" PRId64 " bytes of text, vocab %" PRId64 ")", op, n,
                        vocab_size);
  }
  for (int64_t i = 0; i < n; i++) ids[i] = text[i];
  int64_t len = n, done = 0;
  const size_t V = (size_t)vocab_size;
  while (done < want && len >= 2) {
    for (int64_t i = 0; i + 1 < len; i++) counts[(size_t)ids[i] * V + (size_t)ids[i + 1]]++;
    uint32_t best = 0;
    size_t best_key = 0;
    for (int64_t i = 0; i + 1 < len; i++) {
      size_t key = (size_t)ids[i] * V + (size_t)ids[i + 1];
      uint32_t c = counts[key];
      if (c > best || (c == best && key < best_key)) best = c, best_key = key;
    }
    for (int64_t i = 0; i + 1 < len; i++) counts[(size_t)ids[i] * V + (size_t)ids[i + 1]] = 0;
    int32_t a = (int32_t)(best_key / V), b = (int32_t)(best_key % V);
    merges[2 * done] = a;
    merges[2 * done + 1] = b;
    len = merge_pair(ids, len, a, b, (int32_t)(256 + done));
    done++;
  }
  free(ids);
  free(counts);
  t->merges = merges;
  t->nmerges = done;
  em_status st = build_bpe_pieces(t, op);
  if (st != EM_OK) {
    em_tokenizer_free(t);
    return st;
  }
  *out = t;
  return EM_OK;
}

const char *em_tokenizer_kind(const em_tokenizer *t) { return !t ? "" : t->kind == KIND_BPE ? "bpe" : "char"; }
int64_t em_tokenizer_vocab_size(const em_tokenizer *t) { return t ? t->vocab : 0; }
int64_t em_tokenizer_max_piece(const em_tokenizer *t) { return t ? t->max_piece : 0; }
int64_t em_tokenizer_num_merges(const em_tokenizer *t) { return t ? t->nmerges : 0; }

const uint8_t *em_tokenizer_piece(const em_tokenizer *t, int64_t id, int64_t *len) {
  if (!t || id < 0 || id >= t->vocab) {
    if (len) *len = 0;
    return NULL;
  }
  if (len) *len = t->offsets[id + 1] - t->offsets[id];
  return t->pieces + t->offsets[id];
}

em_status em_tokenizer_merge(const em_tokenizer *t, int64_t i, int64_t *left, int64_t *right) {
  if (!t || i < 0 || i >= t->nmerges) {
    return em_set_error(EM_ERR_INDEX, "tokenizer_merge: merge %" PRId64 " out of range (the tokenizer has %" PRId64 ")",
                        i, t ? t->nmerges : 0);
  }
  if (left) *left = t->merges[2 * i];
  if (right) *right = t->merges[2 * i + 1];
  return EM_OK;
}

em_status em_tokenizer_encode(em_tensor **out, const em_tokenizer *t, const uint8_t *text, int64_t n, int64_t base) {
  const char *op = "tokenizer_encode";
  if (!out || *out || !t) return em_set_error(EM_ERR_ARGUMENT, "%s: expected a tokenizer and an empty output slot", op);
  if (n < 0 || (n > 0 && !text)) return em_set_error(EM_ERR_ARGUMENT, "%s: expected text of n >= 0 bytes", op);
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
  if (!ids) return em_set_error(EM_ERR_MEMORY, "%s: out of memory for %" PRId64 " bytes", op, n);
  int64_t len = n;
  if (t->kind == KIND_CHAR) {
    for (int64_t i = 0; i < n; i++) {
      int id = t->char_id[text[i]];
      if (id < 0) {
        free(ids);
        return em_set_error(EM_ERR_ARGUMENT,
                            "%s: byte 0x%02x at position %" PRId64 " is not in the character vocabulary "
                            "(%" PRId64 " characters)",
                            op, text[i], i, t->vocab);
      }
      ids[i] = id;
    }
  } else {
    for (int64_t i = 0; i < n; i++) ids[i] = text[i];
    for (int64_t m = 0; m < t->nmerges && len >= 2; m++) {
      len = merge_pair(ids, len, t->merges[2 * m], t->merges[2 * m + 1], (int32_t)(256 + m));
    }
  }
  int64_t size = len;
  em_status st = em_empty(out, 1, &size, EM_INT64, (em_device){EM_CPU, 0});
  if (st == EM_OK) {
    int64_t *dst = em_tensor_data(*out);
    for (int64_t i = 0; i < len; i++) dst[i] = ids[i] + base;
  }
  free(ids);
  return st;
}

/* The i-th element of a contiguous integer tensor's data. */
static int64_t int_at(const void *data, em_dtype dt, int64_t i) {
  switch (dt) {
  case EM_INT64: return ((const int64_t *)data)[i];
  case EM_INT32: return ((const int32_t *)data)[i];
  default: return ((const uint8_t *)data)[i];
  }
}

em_status em_tokenizer_decode(const em_tokenizer *t, const em_tensor *ids, int64_t base, uint8_t *buf, int64_t cap,
                              int64_t *len) {
  const char *op = "tokenizer_decode";
  if (!t || !ids || !len) return em_set_error(EM_ERR_ARGUMENT, "%s: expected a tokenizer, ids and a length slot", op);
  em_dtype dt = em_tensor_dtype(ids);
  if (dt != EM_INT64 && dt != EM_INT32 && dt != EM_UINT8) {
    return em_set_error(EM_ERR_DTYPE, "%s: expected integer ids, got %s", op, em_dtype_name(dt));
  }
  if (em_tensor_device(ids).type != EM_CPU || !em_tensor_is_contiguous(ids)) {
    return em_set_error(EM_ERR_ARGUMENT, "%s: expected contiguous CPU ids", op);
  }
  const void *data = em_tensor_data(ids);
  int64_t n = em_tensor_numel(ids), need = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t id = int_at(data, dt, i) - base;
    if (id < 0 || id >= t->vocab) {
      return em_set_error(EM_ERR_INDEX, "%s: id %" PRId64 " at position %" PRId64 " is outside %" PRId64 "..%" PRId64,
                          op, id + base, i + base, base, t->vocab - 1 + base);
    }
    need += t->offsets[id + 1] - t->offsets[id];
  }
  *len = need;
  if (need > cap || (need > 0 && !buf)) {
    return em_set_error(EM_ERR_ARGUMENT, "%s: the text needs %" PRId64 " bytes, the buffer has %" PRId64, op, need, cap);
  }
  int64_t at = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t id = int_at(data, dt, i) - base, k = t->offsets[id + 1] - t->offsets[id];
    if (k > 0) memcpy(buf + at, t->pieces + t->offsets[id], (size_t)k);
    at += k;
  }
  return EM_OK;
}

/* ---------------------------------------------------------------- the file */
em_status em_tokenizer_save(const em_tokenizer *t, const char *path) {
  const char *op = "tokenizer_save";
  if (!t || !path) return em_set_error(EM_ERR_ARGUMENT, "%s: expected a tokenizer and a path", op);
  size_t cap = 64 + (size_t)(t->kind == KIND_CHAR ? t->vocab * 4 : t->nmerges * 24);
  char *text = malloc(cap), *p = text;
  if (!text) return em_set_error(EM_ERR_MEMORY, "%s: out of memory", op);
  p += sprintf(p, "ember-tokenizer 1\nkind %s\n", em_tokenizer_kind(t));
  if (t->kind == KIND_CHAR) {
    p += sprintf(p, "chars %" PRId64 "\n", t->vocab);
    for (int64_t i = 0; i < t->vocab; i++) p += sprintf(p, "%d%c", t->pieces[i], i + 1 < t->vocab ? ' ' : '\n');
  } else {
    p += sprintf(p, "merges %" PRId64 "\n", t->nmerges);
    for (int64_t i = 0; i < t->nmerges; i++) p += sprintf(p, "%d %d\n", t->merges[2 * i], t->merges[2 * i + 1]);
  }
  em_status st = em_file_replace(path, text, (size_t)(p - text));
  free(text);
  return st;
}

static em_status bad_file(const char *path, const char *what) {
  return em_set_error(EM_ERR_FORMAT, "tokenizer_load '%s': %s", path, what);
}

em_status em_tokenizer_load(em_tokenizer **out, const char *path) {
  if (!out || *out || !path) return em_set_error(EM_ERR_ARGUMENT, "tokenizer_load: expected a path and an empty slot");
  FILE *f = fopen(path, "r");
  if (!f) return em_set_error(EM_ERR_IO, "tokenizer_load: cannot open '%s'", path);
  char kind[16] = {0};
  int version = 0;
  int64_t count = -1;
  em_status st = EM_OK;
  em_tokenizer *t = NULL;
  if (fscanf(f, "ember-tokenizer %d kind %15s", &version, kind) != 2 || version != 1) {
    st = bad_file(path, "expected 'ember-tokenizer 1' and 'kind char|bpe' first");
  } else if (strcmp(kind, "char") == 0) {
    uint8_t present[256] = {0};
    if (fscanf(f, " chars %" SCNd64, &count) != 1 || count < 1 || count > 256) {
      st = bad_file(path, "expected 'chars N' with N in 1..256");
    }
    int prev = -1;
    for (int64_t i = 0; st == EM_OK && i < count; i++) {
      int b;
      if (fscanf(f, "%d", &b) != 1 || b <= prev || b > 255) {
        st = bad_file(path, "expected increasing byte values in 0..255 after 'chars N'");
      } else {
        present[b] = 1;
        prev = b;
      }
    }
    if (st == EM_OK) {
      t = alloc_tokenizer(KIND_CHAR);
      st = t ? build_char_pieces(t, present, "tokenizer_load") : em_set_error(EM_ERR_MEMORY, "tokenizer_load: out of memory");
    }
  } else if (strcmp(kind, "bpe") == 0) {
    if (fscanf(f, " merges %" SCNd64, &count) != 1 || count < 0 || count > BPE_MAX_VOCAB - 256) {
      st = bad_file(path, "expected 'merges N' with N in 0..65280");
    }
    t = st == EM_OK ? alloc_tokenizer(KIND_BPE) : NULL;
    if (st == EM_OK && t) t->merges = malloc(sizeof(int32_t) * (size_t)(2 * (count ? count : 1)));
    if (st == EM_OK && (!t || !t->merges)) st = em_set_error(EM_ERR_MEMORY, "tokenizer_load: out of memory");
    for (int64_t i = 0; st == EM_OK && i < count; i++) {
      int64_t l, r;
      if (fscanf(f, "%" SCNd64 " %" SCNd64, &l, &r) != 2 || l < 0 || r < 0 || l >= 256 + i || r >= 256 + i) {
        st = em_set_error(EM_ERR_FORMAT, "tokenizer_load '%s': merge %" PRId64 " must join two ids below %" PRId64, path,
                          i, 256 + i);
      } else {
        t->merges[2 * i] = (int32_t)l;
        t->merges[2 * i + 1] = (int32_t)r;
        t->nmerges = i + 1;
      }
    }
    if (st == EM_OK) st = build_bpe_pieces(t, "tokenizer_load");
  } else {
    st = bad_file(path, "expected kind char or bpe");
  }
  fclose(f);
  if (st != EM_OK) {
    em_tokenizer_free(t);
    return st;
  }
  *out = t;
  return EM_OK;
}
