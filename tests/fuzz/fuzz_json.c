/* fuzz_json.c - the JSON pull reader (runtime/io/json.c) driven over any value: objects,
 * arrays, strings, integers (and numbers that are not), literals, then the end. */
#include "fuzz.h"
#include "io/json.h"

static int value(em_json *j) {
  int more, r;
  switch (io_json_peek(j)) {
    case EM_JSON_OBJECT:
      if ((r = io_json_begin_object(j))) return r;
      for (;;) {
        char *key = NULL;
        size_t len;
        if ((r = io_json_next_member(j, &more, &key, &len))) return r;
        free(key);
        if (!more) return 0;
        if ((r = value(j))) return r;
      }
    case EM_JSON_ARRAY:
      if ((r = io_json_begin_array(j))) return r;
      for (;;) {
        if ((r = io_json_next_element(j, &more))) return r;
        if (!more) return 0;
        if ((r = value(j))) return r;
      }
    case EM_JSON_STRING: {
      char *s = NULL;
      size_t len;
      r = io_json_read_string(j, &s, &len);
      free(s);
      return r;
    }
    case EM_JSON_NUMBER: {
      em_json saved = *j;
      int64_t v;
      if (io_json_read_int64(j, &v) == EM_JSON_OK) return 0;
      *j = saved; /* not an int64: read it as any value */
      return io_json_skip(j);
    }
    default: return io_json_skip(j);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  em_json j;
  io_json_init(&j, data, size);
  if (value(&j) == EM_JSON_OK) io_json_finish(&j);
  io_json_init(&j, data, size);
  io_json_skip(&j);
  io_utf8_valid((const char *)data, size);
  return 0;
}
