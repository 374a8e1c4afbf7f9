/* lift.c - the infer request's flat number arrays, parsed before jansson sees the body.
 *
 * A request's "data" is mostly one long array of numbers (784 of them for one 28 x 28 image),
 * and jansson builds a json_t per number: with its allocations and its strtod it took most of
 * an HTTP thread's time per request. sv_lift_data scans the body's structure (strings,
 * nesting, keys) without building anything, and where an input object's "data" (in
 * {"inputs": [{..., "data": [...]}]}) is a flat array of JSON numbers, it parses the numbers
 * straight into doubles and hands jansson a copy of the body with that array written as [].
 * Anything else - nested arrays, booleans, a number JSON does not allow, escapes in a key - is
 * left in the body for jansson, and the request parser falls back to the whole body whenever
 * the lifted parse fails, so errors read exactly as before.
 *
 * Numbers: a decimal mantissa of at most 2^53 is exact in a double, and so is a power of ten
 * up to 1e22, so one IEEE multiply or divide of the two rounds the value correctly (Clinger's
 * fast path: the double strtod gives); other numbers go through strtod, as in jansson. An
 * integer literal keeps jansson's meaning: a json_int_t (long long) converted to double. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "serve_impl.h"

#define LIFT_MAX_DEPTH 64

static const double pow10_exact[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                       1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static const char *skip_ws(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  return p;
}

/* p at the opening quote: past the closing one, or NULL when the string does not end */
static const char *skip_string(const char *p, const char *end) {
  for (p++; p < end; p++) {
    if (*p == '\\') p++;
    else if (*p == '"') return p + 1;
  }
  return NULL;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* One JSON number at *pp into *v; *exact_int: an integer literal of magnitude <= 2^53. Returns
 * 0 for what JSON does not allow (or jansson would refuse: an integer beyond int64, a real that
 * overflows), so that jansson reports it. */
static int parse_number(const char **pp, const char *end, double *v, int *exact_int) {
  const char *p = *pp, *start = p;
  int neg = 0, frac = 0, many = 0, exp10 = 0, nd = 0;
  uint64_t m = 0;
  if (p < end && *p == '-') neg = 1, p++;
  if (p >= end || !is_digit(*p)) return 0;
  if (*p == '0') {
    p++;
  } else {
    for (; p < end && is_digit(*p); p++) {
      if (nd < 19) m = m * 10 + (uint64_t)(*p - '0'), nd++;
      else many = 1, exp10++;
    }
  }
  if (p < end && *p == '.') {
    frac = 1;
    p++;
    if (p >= end || !is_digit(*p)) return 0;
    for (; p < end && is_digit(*p); p++) {
      if (m == 0 && *p == '0') exp10--;
      else if (nd < 19) m = m * 10 + (uint64_t)(*p - '0'), nd++, exp10--;
      else many = 1;
    }
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    frac = 1;
    p++;
    int eneg = 0, e = 0;
    if (p < end && (*p == '+' || *p == '-')) eneg = *p == '-', p++;
    if (p >= end || !is_digit(*p)) return 0;
    for (; p < end && is_digit(*p); p++)
      if (e < 100000) e = e * 10 + (*p - '0');
    exp10 += eneg ? -e : e;
  }
  *pp = p;
  if (!frac) { /* jansson: a json_int_t (long long), else "too big integer" */
    if (many || m > (uint64_t)INT64_MAX + (uint64_t)neg) return 0;
    *v = m == 0 ? 0.0 : neg ? -(double)m : (double)m;
    *exact_int = m <= ((uint64_t)1 << 53);
    return 1;
  }
  *exact_int = 0;
  if (!many && m <= ((uint64_t)1 << 53) && exp10 >= -22 && exp10 <= 22) {
    double x = exp10 < 0 ? (double)m / pow10_exact[-exp10] : (double)m * pow10_exact[exp10];
    *v = neg ? -x : x;
    return 1;
  }
  char buf[128];
  size_t n = (size_t)(p - start);
  if (n >= sizeof buf) return 0;
  memcpy(buf, start, n);
  buf[n] = '\0';
  char *stop;
  errno = 0;
  double x = strtod(buf, &stop);
  if (stop != buf + n || (errno == ERANGE && isinf(x))) return 0; /* jansson: "real number overflow" */
  *v = x;
  return 1;
}

/* p at '[': the flat array of numbers into l (the end past ']' in *pp); 0 when it is not one */
static int lift_array(const char **pp, const char *end, sv_lifted *l) {
  const char *p = skip_ws(*pp + 1, end);
  size_t cap = 0;
  l->n = 0;
  l->exact_ints = 1;
  if (p < end && *p == ']') {
    *pp = p + 1;
    return 1;
  }
  for (;;) {
    if ((size_t)l->n == cap) {
      /* a value takes at least 2 bytes of the body ("1,"): no more than that many */
      cap = cap ? cap * 2 : 1024;
      if (cap > (size_t)(end - *pp) / 2 + 1) cap = (size_t)(end - *pp) / 2 + 1;
      if (cap <= (size_t)l->n) return 0;
      double *grown = realloc(l->values, cap * sizeof *grown);
      if (!grown) return 0;
      l->values = grown;
    }
    int exact;
    if (!parse_number(&p, end, &l->values[l->n], &exact)) return 0;
    l->n++;
    l->exact_ints &= exact;
    p = skip_ws(p, end);
    if (p < end && *p == ',') {
      p = skip_ws(p + 1, end);
      continue;
    }
    if (p < end && *p == ']') {
      *pp = p + 1;
      return 1;
    }
    return 0;
  }
}

static int key_is(const char *key, const char *after, const char *word) {
  size_t n = strlen(word);
  return (size_t)(after - key) == n + 2 && !memcmp(key + 1, word, n);
}

void sv_lift_free(sv_lift *l) {
  if (!l) return;
  free(l->json);
  for (int i = 0; i < SV_MAX_IO; i++) free(l->inputs[i].values);
  memset(l, 0, sizeof *l);
}

/* the scanner's stack: per open container, whether it is an object, the key of its current
 * value (0 other, 1 inputs, 2 data) and whether a key comes next */
typedef struct level {
  char object, key, want_key;
} level;

int sv_lift_data(const char *body, size_t len, sv_lift *out) {
  memset(out, 0, sizeof *out);
  const char *p = body, *end = body + len;
  level st[LIFT_MAX_DEPTH];
  int depth = 0, inputs = 0;
  const char *span[SV_MAX_IO][2]; /* each lifted array's bytes in the body */
  int nspan = 0;
  p = skip_ws(p, end);
  for (;;) {
    level *top = depth ? &st[depth - 1] : NULL;
    if (top && top->object && top->want_key) {
      if (p >= end) goto keep;
      if (*p == '}') goto close;
      if (*p != '"') goto keep;
      const char *key = p;
      if (!(p = skip_string(p, end))) goto keep;
      top->key = key_is(key, p, "inputs") ? 1 : key_is(key, p, "data") ? 2 : 0;
      p = skip_ws(p, end);
      if (p >= end || *p != ':') goto keep;
      p = skip_ws(p + 1, end);
      top->want_key = 0;
    }
    if (p >= end) goto keep;
    /* a value */
    if (top && !top->object && *p == ']') goto close; /* an empty array */
    if (*p == '[' && depth == 3 && st[0].object && st[0].key == 1 && !st[1].object && st[2].object && st[2].key == 2 &&
        inputs >= 1 && inputs <= SV_MAX_IO) {
      sv_lifted *l = &out->inputs[inputs - 1];
      const char *from = p;
      if (l->present || !lift_array(&p, end, l)) goto keep;
      l->present = 1;
      span[nspan][0] = from, span[nspan][1] = p, nspan++;
    } else if (*p == '{' || *p == '[') {
      if (depth == LIFT_MAX_DEPTH) goto keep;
      /* an input object: in the array that is the root object's "inputs" */
      if (*p == '{' && depth == 2 && !st[1].object && st[0].key == 1) inputs++;
      st[depth++] = (level){*p == '{', 0, *p == '{'};
      p = skip_ws(p + 1, end);
      continue;
    } else if (*p == '"') {
      if (!(p = skip_string(p, end))) goto keep;
    } else {
      while (p < end && *p != ',' && *p != ']' && *p != '}' && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') p++;
    }
    /* after a value: a comma or the end of its container */
    for (;;) {
      p = skip_ws(p, end);
      if (!depth) goto done;
      if (p >= end) goto keep;
      if (*p == ',') {
        st[depth - 1].want_key = st[depth - 1].object;
        st[depth - 1].key = 0;
        p = skip_ws(p + 1, end);
        break;
      }
    close:
      if (*p != (st[depth - 1].object ? '}' : ']')) goto keep;
      depth--;
      p++;
    }
  }
done:
  if (!nspan) goto keep;
  /* the body with every lifted array written as [] */
  out->json = malloc(len + 1);
  if (!out->json) goto keep;
  const char *from = body;
  for (int i = 0; i < nspan; i++) {
    memcpy(out->json + out->len, from, (size_t)(span[i][0] - from));
    out->len += (size_t)(span[i][0] - from);
    memcpy(out->json + out->len, "[]", 2);
    out->len += 2;
    from = span[i][1];
  }
  memcpy(out->json + out->len, from, (size_t)(end - from));
  out->len += (size_t)(end - from);
  out->json[out->len] = '\0';
  return 1;
keep:
  sv_lift_free(out);
  return 0;
}
