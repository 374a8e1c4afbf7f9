/* format.c - ember's binary graph format: a graph parsed once reloads in seconds.
 *
 * Layout (little-endian): a 512-byte header, then sections at 64-byte aligned offsets so
 * that a mapped file is used in place (no copy, no parse). The header holds a magic
 * number, a format version, the byte order, the sizes, a table of sections (id, element
 * size, offset, count, checksum) and its own checksum. Section checksums are gr_checksum
 * (XXH64 over 1 MiB blocks, computed in parallel), so a flipped bit anywhere, or a file
 * cut short, is an error that names the file and the section.
 *
 * Weighted graphs add a 'weights' section (float32 per arc, beside 'sources') and the
 * header flag EMG_WEIGHTED, and are written as version 2, so that an ember that predates
 * weights refuses them by version instead of dropping the weights; unweighted graphs are
 * still written as version 1, the same bytes as before. Both versions load. */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include "core/core_impl.h"
#include "graph_impl.h"

#define EMG_MAGIC "EMBRGRPH"
#define EMG_VERSION 1 /* unweighted graphs */
#define EMG_VERSION_WEIGHTED 2 /* graphs with a weights section */
#define EMG_BYTE_ORDER 0x01020304u
#define EMG_HEADER 512
#define EMG_MAX_SECTIONS 12
#define EMG_DIRECTED 1u
#define EMG_WEIGHTED 2u

enum {
  SEC_OFFSETS = 1,
  SEC_SOURCES,
  SEC_OUT_DEGREE,
  SEC_TO_DENSE,
  SEC_TO_INTERNAL,
  SEC_ORIGINAL,
  SEC_LABEL_OFFSETS,
  SEC_LABEL_DATA,
  SEC_WEIGHTS,
  SEC_COUNT
};

static const char *const section_names[SEC_COUNT] = {
    "?", "offsets", "sources", "out_degree", "to_dense", "to_internal", "original_ids", "label_offsets", "label_data", "weights"};
static const uint32_t section_elem[SEC_COUNT] = {0, 8, 4, 4, 4, 4, 8, 8, 1, 4};

typedef struct emg_section {
  uint32_t id, elem_bytes;
  uint64_t offset, count, checksum;
} emg_section;

typedef struct emg_header {
  char magic[8];
  uint32_t version, byte_order;
  uint64_t header_bytes, file_bytes;
  int64_t num_vertices, num_edges;
  uint32_t flags, num_sections;
  int64_t id_base;
  uint64_t reserved[3];
  emg_section sections[EMG_MAX_SECTIONS];
  unsigned char pad[EMG_HEADER - 88 - 32 * EMG_MAX_SECTIONS - 8];
  uint64_t header_checksum; /* XXH64 of the header with this field zero */
} emg_header;
_Static_assert(sizeof(emg_header) == EMG_HEADER, "the ember graph header is 512 bytes");

static uint64_t header_checksum(const emg_header *h) {
  emg_header copy = *h;
  copy.header_checksum = 0;
  return gr_xxh64(&copy, sizeof copy, EMG_VERSION); /* the same seed for every version */
}

/* ---- save */

typedef struct section_data {
  uint32_t id;
  const void *data;
  uint64_t count;
} section_data;

static int collect_sections(const em_graph *g, section_data *s) {
  int k = 0;
  s[k++] = (section_data){SEC_OFFSETS, g->offsets, (uint64_t)g->n + 1};
  s[k++] = (section_data){SEC_SOURCES, g->sources, (uint64_t)g->m};
  s[k++] = (section_data){SEC_OUT_DEGREE, g->out_degree, (uint64_t)g->n};
  if (g->weights) s[k++] = (section_data){SEC_WEIGHTS, g->weights, (uint64_t)g->m};
  if (g->to_dense) {
    s[k++] = (section_data){SEC_TO_DENSE, g->to_dense, (uint64_t)g->n};
    s[k++] = (section_data){SEC_TO_INTERNAL, g->to_internal, (uint64_t)g->n};
  }
  if (g->original) s[k++] = (section_data){SEC_ORIGINAL, g->original, (uint64_t)g->n};
  if (g->label_offsets) {
    s[k++] = (section_data){SEC_LABEL_OFFSETS, g->label_offsets, (uint64_t)g->n + 1};
    s[k++] = (section_data){SEC_LABEL_DATA, g->label_data, (uint64_t)g->label_offsets[g->n]};
  }
  return k;
}

static em_status write_bytes(int fd, const void *p, size_t bytes, const char *path) {
  if (bytes && core_write_all(fd, p, bytes))
    return em_set_error(EM_ERR_IO, "graph save: writing '%s' failed: %s", path, strerror(errno));
  return EM_OK;
}

typedef struct emg_contents {
  const char *path;
  const emg_header *h;
  const section_data *sec;
  int ns;
} emg_contents;

static em_status write_emg(int fd, void *ctx) {
  const emg_contents *c = ctx;
  static const unsigned char zeros[64];
  em_status st = write_bytes(fd, c->h, sizeof *c->h, c->path);
  for (int i = 0; i < c->ns && !st; i++) {
    uint64_t bytes = c->h->sections[i].count * c->h->sections[i].elem_bytes;
    st = write_bytes(fd, c->sec[i].data, bytes, c->path);
    uint64_t end = c->h->sections[i].offset + bytes, next = (end + 63) & ~(uint64_t)63;
    if (!st) st = write_bytes(fd, zeros, next - end, c->path);
  }
  return st;
}

em_status em_graph_save(const em_graph *g, const char *path) {
  if (!g || !path) return em_set_error(EM_ERR_ARGUMENT, "graph save: graph or path is NULL");
  section_data sec[EMG_MAX_SECTIONS];
  int ns = collect_sections(g, sec);
  emg_header h;
  memset(&h, 0, sizeof h);
  memcpy(h.magic, EMG_MAGIC, 8);
  h.version = g->weights ? EMG_VERSION_WEIGHTED : EMG_VERSION;
  h.byte_order = EMG_BYTE_ORDER;
  h.header_bytes = EMG_HEADER;
  h.num_vertices = g->n;
  h.num_edges = g->m;
  h.flags = (g->directed ? EMG_DIRECTED : 0) | (g->weights ? EMG_WEIGHTED : 0);
  h.num_sections = (uint32_t)ns;
  h.id_base = g->id_base;
  uint64_t pos = EMG_HEADER;
  for (int i = 0; i < ns; i++) {
    emg_section *s = &h.sections[i];
    s->id = sec[i].id;
    s->elem_bytes = section_elem[sec[i].id];
    s->offset = pos;
    s->count = sec[i].count;
    em_status st = gr_checksum(sec[i].data, s->count * s->elem_bytes, s->id, &s->checksum);
    if (st) return st;
    pos = (pos + s->count * s->elem_bytes + 63) & ~(uint64_t)63;
  }
  h.file_bytes = pos;
  h.header_checksum = header_checksum(&h);

  emg_contents c = {path, &h, sec, ns};
  return core_replace_file("graph save", path, write_emg, &c);
}

/* ---- load */

static em_status bad_file(const char *path, const char *what) {
  return em_set_error(EM_ERR_FORMAT, "load_ember: %s: %s", path, what);
}

/* The first index in [0, count) where bad(i) holds, or -1: a parallel scan that reports
 * the smallest failing index, so the error does not depend on the thread count. */
/* clang-format off */
#define FIRST_BAD(count, i, bad, out)                                    \
  do {                                                                   \
    int64_t first_ = -1;                                                 \
    _Pragma("omp parallel for schedule(static) num_threads(gr_threads())") \
    for (int64_t i = 0; i < (count); i++)                                \
      if (bad) {                                                         \
        _Pragma("omp critical(gr_emg_check)")                            \
        if (first_ < 0 || i < first_) first_ = i;                        \
      }                                                                  \
    (out) = first_;                                                      \
  } while (0)
/* clang-format on */

static bool sources_sorted(const uint32_t *a, int64_t len) {
  for (int64_t i = 1; i < len; i++)
    if (a[i] < a[i - 1]) return false;
  return true;
}

/* out_degree[u] is the number of arcs whose source is u (PageRank divides by it). */
static em_status check_degrees(const em_graph *g, const char *path) {
  const int64_t n = g->n, m = g->m;
  uint32_t *count = gr_calloc((size_t)(n ? n : 1) * sizeof *count);
  if (!count) return gr_oom("load_ember", (size_t)n * 4);
  const uint32_t *src = g->sources;
#pragma omp parallel for schedule(static) num_threads(gr_threads())
  for (int64_t j = 0; j < m; j++) __atomic_fetch_add(&count[src[j]], 1, __ATOMIC_RELAXED);
  int64_t bad;
  FIRST_BAD(n, v, count[v] != g->out_degree[v], bad);
  em_status st = EM_OK;
  if (bad >= 0) {
    char msg[256];
    snprintf(msg, sizeof msg, "section 'out_degree' gives vertex %lld %u arcs, the sources list it %u times",
             (long long)bad, g->out_degree[bad], count[bad]);
    st = bad_file(path, msg);
  }
  gr_free(count);
  return st;
}

/* to_dense must be a permutation of [0, n) and to_internal its inverse. */
static em_status check_permutation(const em_graph *g, const char *path) {
  const int64_t n = g->n;
  const uint32_t *td = g->to_dense, *ti = g->to_internal;
  char msg[256];
  int64_t bad;
  FIRST_BAD(n, v, td[v] >= (uint64_t)n || ti[v] >= (uint64_t)n, bad);
  if (bad >= 0) {
    snprintf(msg, sizeof msg, "vertex %lld maps to %u (to_dense) and %u (to_internal), expected ids below %lld",
             (long long)bad, td[bad], ti[bad], (long long)n);
    return bad_file(path, msg);
  }
  FIRST_BAD(n, v, ti[td[v]] != (uint32_t)v, bad); /* an inverse exists only for a permutation */
  if (bad >= 0) {
    snprintf(msg, sizeof msg,
             "sections 'to_dense' and 'to_internal' are not inverse permutations (internal %lld -> dense %u -> "
             "internal %u)",
             (long long)bad, td[bad], ti[td[bad]]);
    return bad_file(path, msg);
  }
  return EM_OK;
}

/* Label ranges ascend within the data, and each non-empty name ends with its NUL. */
static em_status check_labels(const em_graph *g, uint64_t label_bytes, const char *path) {
  const int64_t n = g->n, *lo = g->label_offsets;
  const char *d = g->label_data;
  char msg[256];
  if (lo[0] != 0 || (uint64_t)lo[n] != label_bytes) {
    snprintf(msg, sizeof msg, "section 'label_offsets' runs from %lld to %lld, expected 0 to %llu (the label bytes)",
             (long long)lo[0], (long long)lo[n], (unsigned long long)label_bytes);
    return bad_file(path, msg);
  }
  int64_t bad;
  FIRST_BAD(n, v,
            lo[v + 1] < lo[v] || (uint64_t)lo[v + 1] > label_bytes || (lo[v + 1] > lo[v] && d[lo[v + 1] - 1] != 0),
            bad);
  if (bad >= 0) {
    snprintf(msg, sizeof msg,
             "section 'label_offsets' at vertex %lld (%lld to %lld) is not a NUL-terminated range of the label data",
             (long long)bad, (long long)lo[bad], (long long)lo[bad + 1]);
    return bad_file(path, msg);
  }
  return EM_OK;
}

/* Checksums only say that the sections are what the writer wrote, and anyone can write
 * them: the graph's invariants (graph_impl.h) are checked before anything trusts them. */
static em_status check_structure(em_graph *g, uint64_t label_bytes, const char *path) {
  char msg[256];
  const int64_t n = g->n, m = g->m, *off = g->offsets;
  const uint32_t *src = g->sources;
  int64_t bad;
  if (off[0] != 0 || off[n] != m) {
    snprintf(msg, sizeof msg, "section 'offsets' runs from %lld to %lld, expected 0 to %lld (the arc count)",
             (long long)off[0], (long long)off[n], (long long)m);
    return bad_file(path, msg);
  }
  FIRST_BAD(n, v, off[v + 1] < off[v], bad);
  if (bad >= 0) {
    snprintf(msg, sizeof msg, "section 'offsets' decreases at vertex %lld (%lld then %lld), expected non-decreasing",
             (long long)bad, (long long)off[bad], (long long)off[bad + 1]);
    return bad_file(path, msg);
  }
  FIRST_BAD(m, j, src[j] >= (uint64_t)n, bad);
  if (bad >= 0) {
    snprintf(msg, sizeof msg, "section 'sources' element %lld is %u, expected a vertex id below %lld", (long long)bad,
             src[bad], (long long)n);
    return bad_file(path, msg);
  }
  FIRST_BAD(n, v, !sources_sorted(src + off[v], off[v + 1] - off[v]), bad);
  if (bad >= 0) {
    snprintf(msg, sizeof msg, "section 'sources' is not sorted within vertex %lld (arcs %lld to %lld)", (long long)bad,
             (long long)off[bad], (long long)off[bad + 1]);
    return bad_file(path, msg);
  }
  if (g->weights) {
    const float *w = g->weights;
    FIRST_BAD(m, j, !(w[j] >= 0 && w[j] <= FLT_MAX), bad);
    if (bad >= 0) {
      snprintf(msg, sizeof msg, "section 'weights' element %lld is %g, expected a finite weight >= 0", (long long)bad,
               (double)w[bad]);
      return bad_file(path, msg);
    }
  }
  em_status st = check_degrees(g, path);
  if (!st && g->to_dense) st = check_permutation(g, path);
  if (!st && g->original) {
    const int64_t *o = g->original;
    FIRST_BAD(n - 1, v, o[v + 1] <= o[v], bad);
    if (bad >= 0) {
      snprintf(msg, sizeof msg, "section 'original_ids' does not ascend at vertex %lld (%lld then %lld)",
               (long long)bad, (long long)o[bad], (long long)o[bad + 1]);
      return bad_file(path, msg);
    }
  } else if (!st && g->id_base != 0 && g->id_base != 1) {
    snprintf(msg, sizeof msg, "the header's id_base is %lld, expected 0 or 1", (long long)g->id_base);
    return bad_file(path, msg);
  }
  if (!st && g->label_offsets) st = check_labels(g, label_bytes, path);
  return st;
}

/* Checks the header and points g's arrays at the sections of the mapping. */
static em_status attach_sections(em_graph *g, const emg_header *h, const char *path, bool verify) {
  char msg[256];
  int64_t n = h->num_vertices, m = h->num_edges;
  void *where[SEC_COUNT] = {0};
  uint64_t counts[SEC_COUNT] = {0};
  for (uint32_t i = 0; i < h->num_sections; i++) {
    const emg_section *s = &h->sections[i];
    if (s->id == 0 || s->id >= SEC_COUNT || where[s->id]) {
      snprintf(msg, sizeof msg, "section %u has an unknown or repeated id %u", i, s->id);
      return bad_file(path, msg);
    }
    const char *name = section_names[s->id];
    uint64_t expect = s->id == SEC_SOURCES || s->id == SEC_WEIGHTS             ? (uint64_t)m
                      : (s->id == SEC_OFFSETS || s->id == SEC_LABEL_OFFSETS) ? (uint64_t)n + 1
                      : s->id == SEC_LABEL_DATA                              ? s->count
                                                                             : (uint64_t)n;
    uint64_t bytes;
    if (s->elem_bytes != section_elem[s->id] || s->count != expect || s->offset % 64 || s->offset < EMG_HEADER ||
        s->offset > h->file_bytes || __builtin_mul_overflow(s->count, (uint64_t)s->elem_bytes, &bytes) ||
        bytes > h->file_bytes - s->offset) {
      snprintf(msg, sizeof msg, "section '%s' does not fit the header (offset %llu, %llu elements of %u bytes)", name,
               (unsigned long long)s->offset, (unsigned long long)s->count, s->elem_bytes);
      return bad_file(path, msg);
    }
    where[s->id] = (char *)g->map + s->offset;
    counts[s->id] = s->count;
    if (verify) {
      uint64_t sum;
      em_status st = gr_checksum(where[s->id], bytes, s->id, &sum);
      if (st) return st;
      if (sum != s->checksum) {
        snprintf(msg, sizeof msg, "checksum mismatch in section '%s' (the file is corrupt)", name);
        return bad_file(path, msg);
      }
    }
  }
  if (!where[SEC_OFFSETS] || !where[SEC_SOURCES] || !where[SEC_OUT_DEGREE] ||
      !where[SEC_TO_DENSE] != !where[SEC_TO_INTERNAL] || !where[SEC_LABEL_OFFSETS] != !where[SEC_LABEL_DATA])
    return bad_file(path, "required sections are missing");
  if (!(h->flags & EMG_WEIGHTED) != !where[SEC_WEIGHTS] || (h->version == EMG_VERSION) != !where[SEC_WEIGHTS])
    return bad_file(path, "the header's weighted flag, its version and the weights section disagree");
  g->n = n;
  g->m = m;
  g->directed = h->flags & EMG_DIRECTED;
  g->id_base = h->id_base;
  g->offsets = where[SEC_OFFSETS];
  g->sources = where[SEC_SOURCES];
  g->weights = where[SEC_WEIGHTS];
  g->out_degree = where[SEC_OUT_DEGREE];
  g->to_dense = where[SEC_TO_DENSE];
  g->to_internal = where[SEC_TO_INTERNAL];
  g->original = where[SEC_ORIGINAL];
  g->label_offsets = where[SEC_LABEL_OFFSETS];
  g->label_data = where[SEC_LABEL_DATA];
  return check_structure(g, counts[SEC_LABEL_DATA], path);
}

/* Applies transforming options to a loaded graph by building it again. */
static em_status rebuild(em_graph **out, em_graph *g, const em_graph_options *opts, const char *path) {
  em_graph_options o = *opts;
  o.directed = opts->directed && g->directed;
  gr_csr_view view = {
      .n = g->n,
      .offsets = g->offsets,
      .neighbors = g->sources,
      .in_arcs = true,
      .relabel = g->to_dense,
      .weights = g->weights};
  gr_source src;
  gr_csr_source(&src, &view, "load_ember", path); /* walks internal ids, pushes dense ones */
  em_graph *ng = NULL;
  em_status st = gr_build(&ng, &src, &o);
  if (st) return st;
  if (!g->directed) ng->directed = false;
  ng->id_base = g->id_base;
  size_t n = (size_t)g->n;
  if (g->original) {
    ng->original = gr_alloc(n * sizeof *ng->original);
    if (!ng->original) st = gr_oom("load_ember", n * 8);
    else memcpy(ng->original, g->original, n * sizeof *ng->original);
  }
  if (!st && g->label_offsets) {
    size_t bytes = (size_t)g->label_offsets[n];
    ng->label_offsets = gr_alloc((n + 1) * sizeof *ng->label_offsets);
    ng->label_data = gr_alloc(bytes ? bytes : 1);
    if (!ng->label_offsets || !ng->label_data) st = gr_oom("load_ember", bytes);
    else {
      memcpy(ng->label_offsets, g->label_offsets, (n + 1) * sizeof *ng->label_offsets);
      memcpy(ng->label_data, g->label_data, bytes);
    }
  }
  if (st) {
    em_graph_free(ng);
    return st;
  }
  *out = ng;
  return EM_OK;
}

em_status gr_load_ember(em_graph **out, const char *path, const em_graph_options *opts) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return em_set_error(EM_ERR_IO, "load_ember: cannot open '%s': %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return em_set_error(EM_ERR_IO, "load_ember: '%s' is not a regular file", path);
  }
  uint64_t size = (uint64_t)sb.st_size;
  char msg[256];
  if (size < EMG_HEADER) {
    close(fd);
    snprintf(msg, sizeof msg, "%llu bytes, shorter than the %d-byte header (truncated, or not an ember graph)",
             (unsigned long long)size, EMG_HEADER);
    return bad_file(path, msg);
  }
  void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  close(fd);
  if (map == MAP_FAILED) return em_set_error(EM_ERR_IO, "load_ember: cannot map '%s': %s", path, strerror(err));
  em_graph *g = gr_graph_new();
  if (!g) {
    munmap(map, (size_t)size);
    return gr_oom("load_ember", sizeof *g);
  }
  g->map = map;
  g->map_bytes = (size_t)size;
  emg_header h;
  memcpy(&h, map, sizeof h);
  em_status st = EM_OK;
  if (memcmp(h.magic, EMG_MAGIC, 8)) {
    st = bad_file(path, "not an ember graph file (wrong magic number)");
  } else if (h.byte_order != EMG_BYTE_ORDER) {
    st = bad_file(path, "written on a machine of the other byte order");
  } else if (h.version != EMG_VERSION && h.version != EMG_VERSION_WEIGHTED) {
    snprintf(msg, sizeof msg, "format version %u, this ember reads versions %d and %d", h.version, EMG_VERSION,
             EMG_VERSION_WEIGHTED);
    st = bad_file(path, msg);
  } else if (h.header_checksum != header_checksum(&h)) {
    st = bad_file(path, "checksum mismatch in the header (the file is corrupt)");
  } else if (h.file_bytes != size) {
    snprintf(msg, sizeof msg, "the header announces %llu bytes, the file has %llu (truncated or padded)",
             (unsigned long long)h.file_bytes, (unsigned long long)size);
    st = bad_file(path, msg);
  } else if (h.num_vertices < 0 || h.num_vertices > GR_MAX_VERTICES || h.num_edges < 0 ||
             h.num_sections > EMG_MAX_SECTIONS) {
    st = bad_file(path, "the header's sizes are out of range");
  } else {
    st = attach_sections(g, &h, path, opts->verify != 0);
  }
  if (!st && !opts->weights) g->weights = NULL; /* they lie in the mapping: nothing to free */
  if (!st && (opts->reverse || opts->drop_self_loops || opts->drop_duplicates || (!opts->directed && g->directed) ||
              (opts->reorder == EM_GRAPH_REORDER_DEGREE) != (g->to_dense != NULL))) {
    em_graph *ng = NULL;
    st = rebuild(&ng, g, opts, path);
    if (!st) {
      em_graph_free(g);
      g = ng;
    }
  }
  if (st) {
    em_graph_free(g);
    return st;
  }
  *out = g;
  return EM_OK;
}
