/* json.c - the strict JSON pull reader and the writer declared in json.h.
 *
 * Every read is bounded by j->len: the input is a slice of a mapped file and is not
 * NUL-terminated, so no function here may look at s[len]. */
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(em_json *j, int code, size_t pos, const char *fmt, const char *arg) {
  j->err_pos = pos;
  snprintf(j->msg, sizeof j->msg, fmt, arg);
  return code;
}

static int fail_byte(em_json *j, size_t pos, const char *what) {
  char buf[96];
  if (pos >= j->len) return fail(j, EM_JSON_SYNTAX, pos, "%s, found the end of the header", what);
  unsigned char c = j->s[pos];
  if (c >= 0x20 && c < 0x7f) snprintf(buf, sizeof buf, "%s, found '%c'", what, c);
  else snprintf(buf, sizeof buf, "%s, found byte 0x%02x", what, c);
  return fail(j, EM_JSON_SYNTAX, pos, "%s", buf);
}

void io_json_init(em_json *j, const void *text, size_t len) {
  memset(j, 0, sizeof *j);
  j->s = text;
  j->len = len;
}

static void skip_ws(em_json *j) {
  while (j->pos < j->len) {
    unsigned char c = j->s[j->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    j->pos++;
  }
}

em_json_kind io_json_peek(em_json *j) {
  skip_ws(j);
  if (j->pos >= j->len) return EM_JSON_EOF;
  unsigned char c = j->s[j->pos];
  switch (c) {
    case '{': return EM_JSON_OBJECT;
    case '[': return EM_JSON_ARRAY;
    case '"': return EM_JSON_STRING;
    case 't': return EM_JSON_TRUE;
    case 'f': return EM_JSON_FALSE;
    case 'n': return EM_JSON_NULL;
    default: return (c == '-' || (c >= '0' && c <= '9')) ? EM_JSON_NUMBER : EM_JSON_INVALID;
  }
}

const char *io_json_kind_name(em_json_kind kind) {
  static const char *names[] = {"an object", "an array", "a string", "a number",        "true",
                                "false",     "null",     "nothing",  "an invalid value"};
  return (unsigned)kind <= EM_JSON_INVALID ? names[kind] : "?";
}

/* Checks that the next token is a value of `want`; a non-value is a syntax error. */
static int expect_kind(em_json *j, em_json_kind want, const char *what) {
  em_json_kind k = io_json_peek(j);
  if (k == want) return EM_JSON_OK;
  if (k == EM_JSON_EOF || k == EM_JSON_INVALID) return fail_byte(j, j->pos, "expected a value");
  char buf[96];
  snprintf(buf, sizeof buf, "expected %s, got %s", what, io_json_kind_name(k));
  return fail(j, EM_JSON_TYPE, j->pos, "%s", buf);
}

/* ---- containers ---- */

static int open_container(em_json *j, em_json_kind kind) {
  int st = expect_kind(j, kind, io_json_kind_name(kind));
  if (st) return st;
  if (j->depth >= EM_JSON_MAX_DEPTH)
    return fail(j, EM_JSON_SYNTAX, j->pos, "values nested deeper than %s levels", "32");
  j->first[j->depth++] = 1;
  j->pos++;
  return EM_JSON_OK;
}

int io_json_begin_object(em_json *j) { return open_container(j, EM_JSON_OBJECT); }
int io_json_begin_array(em_json *j) { return open_container(j, EM_JSON_ARRAY); }

/* Shared by members and elements: consumes the closer (more = 0) or a separating comma. */
static int next_item(em_json *j, int *more, unsigned char closer) {
  skip_ws(j);
  int first = j->first[j->depth - 1];
  if (j->pos < j->len && j->s[j->pos] == closer) {
    j->pos++;
    j->depth--;
    *more = 0;
    return EM_JSON_OK;
  }
  if (!first) {
    if (j->pos >= j->len || j->s[j->pos] != ',')
      return fail_byte(j, j->pos, closer == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
    j->pos++;
  }
  j->first[j->depth - 1] = 0;
  *more = 1;
  return EM_JSON_OK;
}

int io_json_next_member(em_json *j, int *more, char **key, size_t *key_len) {
  *key = NULL;
  int st = next_item(j, more, '}');
  if (st || !*more) return st;
  if (io_json_peek(j) != EM_JSON_STRING) return fail_byte(j, j->pos, "expected a string key");
  if ((st = io_json_read_string(j, key, key_len))) return st;
  skip_ws(j);
  if (j->pos >= j->len || j->s[j->pos] != ':') {
    free(*key);
    *key = NULL;
    return fail_byte(j, j->pos, "expected ':' after a key");
  }
  j->pos++;
  return EM_JSON_OK;
}

int io_json_next_element(em_json *j, int *more) { return next_item(j, more, ']'); }

/* ---- strings ---- */

/* Length of the well-formed UTF-8 sequence at s (at most n bytes), 0 if malformed. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  if (c < 0x80) return 1;
  size_t len;
  unsigned lo = 0x80, hi = 0xbf; /* bounds of the second byte */
  if (c >= 0xc2 && c <= 0xdf) len = 2;
  else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0; /* overlong */
    if (c == 0xed) hi = 0x9f; /* UTF-16 surrogates */
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90; /* overlong */
    if (c == 0xf4) hi = 0x8f; /* above U+10FFFF */
  } else {
    return 0;
  }
  if (n < len || s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < len; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  return len;
}

int io_utf8_valid(const char *s, size_t len) {
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < len;) {
    size_t n = utf8_seq(u + i, len - i);
    if (!n) return 0;
    i += n;
  }
  return 1;
}

static int hex4(em_json *j, size_t pos, unsigned *out) {
  if (pos + 4 > j->len) return fail(j, EM_JSON_SYNTAX, pos, "%s", "truncated \\u escape");
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    unsigned char c = j->s[pos + i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= c - '0';
    else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
    else return fail_byte(j, pos + i, "expected a hex digit in a \\u escape");
  }
  *out = v;
  return EM_JSON_OK;
}

static size_t put_utf8(char *o, unsigned cp) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xc0 | cp >> 6);
    o[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xe0 | cp >> 12);
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  o[0] = (char)(0xf0 | cp >> 18);
  o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
  o[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

/* Decodes the escape at s[*i] == '\\' into o; advances *i past it. */
static int unescape(em_json *j, size_t *i, char *o, size_t *olen) {
  size_t p = *i + 1;
  if (p >= j->len) return fail(j, EM_JSON_SYNTAX, *i, "%s", "unterminated escape");
  unsigned char c = j->s[p];
  static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
  const char *hit = c ? strchr(from, c) : NULL;
  if (hit) {
    o[(*olen)++] = to[hit - from];
    *i = p + 1;
    return EM_JSON_OK;
  }
  if (c != 'u') return fail_byte(j, p, "invalid escape");
  unsigned cp, lo;
  int st = hex4(j, p + 1, &cp);
  if (st) return st;
  p += 5;
  if (cp >= 0xdc00 && cp <= 0xdfff) return fail(j, EM_JSON_SYNTAX, *i, "%s", "unpaired low surrogate in a \\u escape");
  if (cp >= 0xd800 && cp <= 0xdbff) {
    if (p + 1 >= j->len || j->s[p] != '\\' || j->s[p + 1] != 'u')
      return fail(j, EM_JSON_SYNTAX, *i, "%s", "unpaired high surrogate in a \\u escape");
    if ((st = hex4(j, p + 2, &lo))) return st;
    if (lo < 0xdc00 || lo > 0xdfff)
      return fail(j, EM_JSON_SYNTAX, p, "%s", "a high surrogate must be followed by a low one");
    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    p += 6;
  }
  *olen += put_utf8(o + *olen, cp);
  *i = p;
  return EM_JSON_OK;
}

int io_json_read_string(em_json *j, char **out, size_t *len) {
  *out = NULL;
  int st = expect_kind(j, EM_JSON_STRING, "a string");
  if (st) return st;
  size_t start = j->pos + 1, end = start;
  /* Find the closing quote first: the decoded text is never longer than the raw one. */
  while (end < j->len && j->s[end] != '"') end += j->s[end] == '\\' ? 2 : 1;
  if (end >= j->len) return fail(j, EM_JSON_SYNTAX, j->pos, "%s", "unterminated string");
  char *o = malloc(end - start + 1);
  if (!o) return fail(j, EM_JSON_MEMORY, j->pos, "%s", "out of memory reading a string");
  size_t n = 0;
  for (size_t i = start; i < end;) {
    unsigned char c = j->s[i];
    if (c == '\\') {
      if ((st = unescape(j, &i, o, &n))) goto error;
    } else if (c < 0x20) {
      char buf[64];
      snprintf(buf, sizeof buf, "control character 0x%02x in a string (must be escaped)", c);
      st = fail(j, EM_JSON_SYNTAX, i, "%s", buf);
      goto error;
    } else {
      size_t k = utf8_seq(j->s + i, end - i);
      if (!k) {
        st = fail(j, EM_JSON_SYNTAX, i, "%s", "invalid UTF-8 in a string");
        goto error;
      }
      memcpy(o + n, j->s + i, k);
      n += k;
      i += k;
    }
  }
  o[n] = 0;
  *out = o;
  if (len) *len = n;
  j->pos = end + 1;
  return EM_JSON_OK;
error:
  free(o);
  return st;
}

/* ---- numbers and literals ---- */

static int is_digit(const em_json *j, size_t p) { return p < j->len && j->s[p] >= '0' && j->s[p] <= '9'; }

/* Checks the number grammar at j->pos; *end is one past it, *integral says no '.'/'e'. */
static int scan_number(em_json *j, size_t *end, int *integral) {
  size_t p = j->pos;
  if (p < j->len && j->s[p] == '-') p++;
  if (!is_digit(j, p)) return fail_byte(j, p, "expected a digit");
  if (j->s[p] == '0') {
    p++;
    if (is_digit(j, p)) return fail(j, EM_JSON_SYNTAX, p, "%s", "leading zeros are not allowed in numbers");
  } else {
    while (is_digit(j, p)) p++;
  }
  *integral = 1;
  if (p < j->len && j->s[p] == '.') {
    *integral = 0;
    if (!is_digit(j, ++p)) return fail_byte(j, p, "expected a digit after '.'");
    while (is_digit(j, p)) p++;
  }
  if (p < j->len && (j->s[p] == 'e' || j->s[p] == 'E')) {
    *integral = 0;
    p++;
    if (p < j->len && (j->s[p] == '+' || j->s[p] == '-')) p++;
    if (!is_digit(j, p)) return fail_byte(j, p, "expected a digit in an exponent");
    while (is_digit(j, p)) p++;
  }
  *end = p;
  return EM_JSON_OK;
}

int io_json_read_int64(em_json *j, int64_t *out) {
  int st = expect_kind(j, EM_JSON_NUMBER, "an integer");
  if (st) return st;
  size_t end;
  int integral;
  if ((st = scan_number(j, &end, &integral))) return st;
  char text[48];
  size_t n = end - j->pos < sizeof text - 1 ? end - j->pos : sizeof text - 1;
  memcpy(text, j->s + j->pos, n);
  text[n] = 0;
  if (!integral) return fail(j, EM_JSON_TYPE, j->pos, "expected an integer, got %s", text);
  size_t p = j->pos;
  int neg = j->s[p] == '-';
  if (neg) p++;
  uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  for (; p < end; p++) {
    unsigned d = j->s[p] - '0';
    if (v > (limit - d) / 10) return fail(j, EM_JSON_TYPE, j->pos, "integer %s is out of the 64-bit range", text);
    v = v * 10 + d;
  }
  *out = neg ? (int64_t)(0 - v) : (int64_t)v;
  j->pos = end;
  return EM_JSON_OK;
}

static int literal(em_json *j, const char *word) {
  size_t n = strlen(word);
  if (j->len - j->pos < n || memcmp(j->s + j->pos, word, n)) return fail_byte(j, j->pos, "expected a value");
  j->pos += n;
  return EM_JSON_OK;
}

int io_json_skip(em_json *j) {
  int st, more;
  size_t end;
  char *key;
  switch (io_json_peek(j)) {
    case EM_JSON_OBJECT:
      if ((st = io_json_begin_object(j))) return st;
      for (;;) {
        if ((st = io_json_next_member(j, &more, &key, NULL))) return st;
        free(key);
        if (!more) return EM_JSON_OK;
        if ((st = io_json_skip(j))) return st;
      }
    case EM_JSON_ARRAY:
      if ((st = io_json_begin_array(j))) return st;
      for (;;) {
        if ((st = io_json_next_element(j, &more)) || !more) return st;
        if ((st = io_json_skip(j))) return st;
      }
    case EM_JSON_STRING:
      if ((st = io_json_read_string(j, &key, NULL))) return st;
      free(key);
      return EM_JSON_OK;
    case EM_JSON_NUMBER:
      if ((st = scan_number(j, &end, &more))) return st;
      j->pos = end;
      return EM_JSON_OK;
    case EM_JSON_TRUE: return literal(j, "true");
    case EM_JSON_FALSE: return literal(j, "false");
    case EM_JSON_NULL: return literal(j, "null");
    default: return fail_byte(j, j->pos, "expected a value");
  }
}

int io_json_finish(em_json *j) {
  skip_ws(j);
  return j->pos == j->len ? EM_JSON_OK : fail_byte(j, j->pos, "expected the end of the header");
}

/* ---- writer ---- */

void io_jsonbuf_raw(em_jsonbuf *b, const char *s, size_t n) {
  if (b->failed) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) {
      b->failed = 1;
      return;
    }
    b->data = d;
    b->cap = cap;
  }
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = 0;
}

/* Escapes as serde_json does (the reference writer), so that headers match byte for byte:
 * quote, backslash and control characters; everything else, UTF-8 included, stays raw. */
void io_jsonbuf_str(em_jsonbuf *b, const char *s) {
  io_jsonbuf_raw(b, "\"", 1);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    char esc[8] = {0};
    switch (*p) {
      case '"': strcpy(esc, "\\\""); break;
      case '\\': strcpy(esc, "\\\\"); break;
      case '\b': strcpy(esc, "\\b"); break;
      case '\f': strcpy(esc, "\\f"); break;
      case '\n': strcpy(esc, "\\n"); break;
      case '\r': strcpy(esc, "\\r"); break;
      case '\t': strcpy(esc, "\\t"); break;
      default:
        if (*p < 0x20) snprintf(esc, sizeof esc, "\\u%04x", *p);
    }
    if (esc[0]) io_jsonbuf_raw(b, esc, strlen(esc));
    else io_jsonbuf_raw(b, (const char *)p, 1);
  }
  io_jsonbuf_raw(b, "\"", 1);
}

void io_jsonbuf_int(em_jsonbuf *b, int64_t v) {
  char buf[24];
  int n = snprintf(buf, sizeof buf, "%lld", (long long)v);
  io_jsonbuf_raw(b, buf, (size_t)n);
}

void io_jsonbuf_free(em_jsonbuf *b) {
  free(b->data);
  memset(b, 0, sizeof *b);
}
