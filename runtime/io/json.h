/* json.h - a small, strict JSON pull reader and a string-buffer writer, enough for the
 * headers of checkpoint files (runtime/io). Internal to the runtime.
 *
 * Reader: the caller drives it by the schema it expects (begin an object, read a key,
 * read an integer ...), so memory stays proportional to what the caller keeps, never to
 * the input. It reads a bounded buffer (no NUL needed), never past its end, checks the
 * full JSON grammar (RFC 8259) and UTF-8, and limits nesting depth. Every function
 * returns EM_JSON_OK, EM_JSON_SYNTAX (the text is not JSON) or EM_JSON_TYPE (valid JSON,
 * but not what was asked: a float where an integer was expected, an integer out of
 * range); j->msg and j->err_pos (byte offset into the buffer) then say what and where. */
#ifndef EMBER_IO_JSON_H
#define EMBER_IO_JSON_H

#include <stddef.h>
#include <stdint.h>

#define EM_JSON_MAX_DEPTH 32

enum { EM_JSON_OK = 0, EM_JSON_SYNTAX = -1, EM_JSON_TYPE = -2, EM_JSON_MEMORY = -3 };

typedef enum em_json_kind {
  EM_JSON_OBJECT,
  EM_JSON_ARRAY,
  EM_JSON_STRING,
  EM_JSON_NUMBER,
  EM_JSON_TRUE,
  EM_JSON_FALSE,
  EM_JSON_NULL,
  EM_JSON_EOF, /* nothing but whitespace left */
  EM_JSON_INVALID /* a byte that cannot start a value */
} em_json_kind;

typedef struct em_json {
  const unsigned char *s;
  size_t len, pos;
  int depth;
  unsigned char first[EM_JSON_MAX_DEPTH]; /* per open container: no member read yet */
  size_t err_pos;
  char msg[192];
} em_json;

void io_json_init(em_json *j, const void *text, size_t len);
/* Kind of the next value (skips whitespace, consumes nothing else). */
em_json_kind io_json_peek(em_json *j);
/* "an object", "a string", ... for messages. */
const char *io_json_kind_name(em_json_kind kind);

int io_json_begin_object(em_json *j);
/* *more = 1 and the key (malloc'd, NUL-terminated, caller frees; key_len excludes the
 * NUL and may count embedded NULs) with its ':' consumed; or *more = 0 and the '}'. */
int io_json_next_member(em_json *j, int *more, char **key, size_t *key_len);
int io_json_begin_array(em_json *j);
/* *more = 1: an element follows (read it next); *more = 0: the ']' was consumed. */
int io_json_next_element(em_json *j, int *more);
int io_json_read_string(em_json *j, char **out, size_t *len);
/* An integer with no fraction or exponent in [INT64_MIN, INT64_MAX]. */
int io_json_read_int64(em_json *j, int64_t *out);
/* Reads and discards any value. */
int io_json_skip(em_json *j);
/* Only whitespace remains. */
int io_json_finish(em_json *j);

/* 1 when s[0..len) is well-formed UTF-8 (no overlongs, surrogates or > U+10FFFF). */
int io_utf8_valid(const char *s, size_t len);

/* Writer: a growing byte buffer. On allocation failure `failed` is set and later
 * appends do nothing, so callers check once at the end. */
typedef struct em_jsonbuf {
  char *data;
  size_t len, cap;
  int failed;
} em_jsonbuf;

void io_jsonbuf_raw(em_jsonbuf *b, const char *s, size_t n);
void io_jsonbuf_str(em_jsonbuf *b, const char *s); /* a quoted, escaped string */
void io_jsonbuf_int(em_jsonbuf *b, int64_t v);
void io_jsonbuf_free(em_jsonbuf *b);

#endif
