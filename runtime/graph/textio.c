/* textio.c - text files for the parsers: mapped read-only, cut into chunks that start at
 * line starts (one parse task each), with errors reported as file:line whichever chunk
 * found them. */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include "graph_impl.h"

em_status gr_text_open(gr_text *t, const char *op, const char *path) {
  memset(t, 0, sizeof *t);
  t->op = op;
  t->path = path;
  int fd = open(path, O_RDONLY);
  if (fd < 0) return em_set_error(EM_ERR_IO, "%s: cannot open '%s': %s", op, path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
    int err = errno;
    close(fd);
    return em_set_error(EM_ERR_IO, "%s: '%s' is not a regular file%s%s", op, path, err ? ": " : "",
                        err ? strerror(err) : "");
  }
  t->size = (size_t)sb.st_size;
  if (t->size > 0) {
    void *p = mmap(NULL, t->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      close(fd);
      return em_set_error(EM_ERR_IO, "%s: cannot map '%s': %s", op, path, strerror(err));
    }
    madvise(p, t->size, MADV_SEQUENTIAL);
    t->data = p;
  } else {
    t->data = "";
  }
  close(fd);
  return EM_OK;
}

em_status gr_text_chunk(gr_text *t, size_t body, int64_t first_line) {
  size_t len = t->size - body;
  size_t target = len / ((size_t)gr_threads() * 16);
  if (target < ((size_t)1 << 18)) target = (size_t)1 << 18;
  if (target > ((size_t)64 << 20)) target = (size_t)64 << 20;
  int64_t cap = (int64_t)(len / target) + 2;
  t->chunk_begin = malloc((size_t)(cap + 1) * sizeof *t->chunk_begin);
  t->chunk_lines = calloc((size_t)cap, sizeof *t->chunk_lines);
  if (!t->chunk_begin || !t->chunk_lines) return gr_oom(t->op, (size_t)cap * 16);
  t->first_line = first_line;
  int64_t k = 0;
  size_t pos = body;
  while (pos < t->size) {
    t->chunk_begin[k++] = pos;
    size_t next = pos + target;
    if (next >= t->size) break;
    const char *nl = memchr(t->data + next, '\n', t->size - next);
    if (!nl) break;
    pos = (size_t)(nl - t->data) + 1;
  }
  t->chunk_begin[k] = t->size;
  t->num_chunks = k;
  return EM_OK;
}

void gr_text_release(const gr_text *t, int64_t chunk) {
  if (!t->size) return;
  long page = sysconf(_SC_PAGESIZE);
  uintptr_t a = (uintptr_t)(t->data + t->chunk_begin[chunk]), b = (uintptr_t)(t->data + t->chunk_begin[chunk + 1]);
  a = (a + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
  b &= ~((uintptr_t)page - 1);
  if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

void gr_text_close(gr_text *t) {
  if (t->size) munmap((void *)t->data, t->size);
  free(t->chunk_begin);
  free(t->chunk_lines);
  memset(t, 0, sizeof *t);
}

em_status gr_text_report(const gr_text *t, const gr_chunk_error *errors) {
  int64_t line = t->first_line;
  for (int64_t c = 0; c < t->num_chunks; c++) {
    if (errors[c].status)
      return em_set_error(errors[c].status, "%s: %s:%lld: %s", t->op, t->path, (long long)(line + errors[c].line),
                          errors[c].msg);
    line += t->chunk_lines[c];
  }
  return EM_OK;
}

/* Weights: strtod on a bounded copy (the mapped text has no NUL to stop it), so that every
 * spelling C reads (1, 0.5, 2e-3, 0x1p-2) is a number, and inf or nan are recognised to be
 * refused by name rather than as "not a number". */
int gr_parse_weight(const char **p, const char *end, float *out, char *msg, size_t cap) {
  const char *s = *p, *e = s;
  while (e < end && !gr_is_blank(*e) && *e != '\n') e++;
  char buf[64], quoted[64];
  size_t len = (size_t)(e - s);
  gr_quote_line(quoted, sizeof quoted, s, e);
  if (len == 0 || len >= sizeof buf) {
    snprintf(msg, cap, "expected a weight (a number >= 0), got '%s'", quoted);
    return GR_WEIGHT_NOT_A_NUMBER;
  }
  memcpy(buf, s, len);
  buf[len] = 0;
  char *stop;
  double w = strtod(buf, &stop);
  int r = stop != buf + len ? GR_WEIGHT_NOT_A_NUMBER
          : isnan(w)        ? GR_WEIGHT_NAN
          : isinf(w) || fabs(w) > FLT_MAX ? GR_WEIGHT_INFINITE
          : w < 0                         ? GR_WEIGHT_NEGATIVE
                                          : 0;
  switch (r) {
    case 0:
      *out = w == 0 ? 0.0f : (float)w; /* -0 is 0 */
      *p = e;
      break;
    case GR_WEIGHT_NOT_A_NUMBER: snprintf(msg, cap, "expected a weight (a number >= 0), got '%s'", quoted); break;
    case GR_WEIGHT_NAN:
      snprintf(msg, cap, "the weight '%s' is not a number (NaN), expected a finite value >= 0", quoted);
      break;
    case GR_WEIGHT_INFINITE:
      snprintf(msg, cap, "the weight '%s' is infinite or beyond float32, expected a finite value >= 0", quoted);
      break;
    default: snprintf(msg, cap, "the weight '%s' is negative, expected a value >= 0", quoted);
  }
  return r;
}
