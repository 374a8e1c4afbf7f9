/* part_io.c - the partitioned cache: one binary file per rank plus a text manifest.
 *
 *   PATH             the manifest: "ember-graph-parts 1", the rank count, vertices, arcs,
 *                    then "part R FILE CHECKSUM BYTES" per rank
 *   PATH.R-of-N      rank R's partition: a header, then its arrays (bounds, CSR, mirrors,
 *                    exchange plan, out-degrees, original ids), checksummed (XXH64 chained
 *                    over the arrays, the value kept in the header and the manifest)
 * A weighted graph's cache says "ember-graph-parts 2" and its rank files EMBPART2: the
 * same header, then the arrays with the arcs' weights and the out-weights W(u) after them
 * (so readers of version 1 refuse it at its first line, and version-1 caches still load).
 * Rank files are written to a temporary name and renamed; rank 0 writes the manifest last,
 * once every rank has reported its file, so a manifest always names complete files. A
 * cache is tied to its rank count: loading it with another one is a clear error on every
 * rank (the partition and the exchange plan depend on it). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ember/dist.h"
#include "graph_impl.h"

#define PART_MAGIC "EMBPART1"
#define PART_MAGIC_W "EMBPART2" /* weighted */

typedef struct part_header {
  char magic[8];
  int32_t rank, size;
  int64_t n, m, begin, end, nl, ml, nmirror, nsend, id_base;
  int32_t directed, has_original;
  uint64_t checksum;
} part_header;

typedef struct array_ref {
  void **ptr;
  size_t bytes;
  bool plain; /* malloc'd rather than gr_alloc'd */
} array_ref;

static int arrays(em_graph_part *p, array_ref *a) {
  int k = 0;
  a[k++] = (array_ref){(void **)&p->bounds, (size_t)(p->size + 1) * 8, true};
  a[k++] = (array_ref){(void **)&p->offsets, (size_t)(p->nl + 1) * 8, false};
  a[k++] = (array_ref){(void **)&p->sources, (size_t)p->ml * 4, false};
  a[k++] = (array_ref){(void **)&p->mirror, (size_t)p->nmirror * 4, false};
  a[k++] = (array_ref){(void **)&p->recv_count, (size_t)p->size * 8, true};
  a[k++] = (array_ref){(void **)&p->send_count, (size_t)p->size * 8, true};
  a[k++] = (array_ref){(void **)&p->send, (size_t)p->nsend * 4, false};
  a[k++] = (array_ref){(void **)&p->out_degree, (size_t)p->nl * 4, false};
  if (p->original) a[k++] = (array_ref){(void **)&p->original, (size_t)p->nl * 8, false};
  if (p->weights) {
    a[k++] = (array_ref){(void **)&p->weights, (size_t)p->ml * 4, false};
    a[k++] = (array_ref){(void **)&p->out_weight, (size_t)p->nl * 8, false};
  }
  return k;
}

static em_status checksum(const array_ref *a, int k, uint64_t *out) {
  uint64_t h = 0;
  for (int i = 0; i < k; i++) {
    em_status st = gr_checksum(*a[i].ptr, a[i].bytes, h, &h);
    if (st) return st;
  }
  *out = h;
  return EM_OK;
}

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

static em_status write_part(const em_graph_part *p, const char *file, uint64_t *sum, int64_t *bytes) {
  const char *op = "graph part save";
  array_ref a[11];
  int k = arrays((em_graph_part *)p, a);
  part_header h = {.rank = p->rank, .size = p->size, .n = p->n, .m = p->m, .begin = p->begin, .end = p->end,
                   .nl = p->nl, .ml = p->ml, .nmirror = p->nmirror, .nsend = p->nsend, .id_base = p->id_base,
                   .directed = p->directed, .has_original = p->original != NULL};
  memcpy(h.magic, p->weights ? PART_MAGIC_W : PART_MAGIC, 8);
  em_status st = checksum(a, k, &h.checksum);
  if (st) return st;
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", file);
  FILE *f = fopen(tmp, "wb");
  if (!f) return em_set_error(EM_ERR_IO, "%s: cannot write '%s': %s", op, tmp, strerror(errno));
  bool ok = fwrite(&h, sizeof h, 1, f) == 1;
  *bytes = (int64_t)sizeof h;
  for (int i = 0; i < k && ok; i++) {
    ok = a[i].bytes == 0 || fwrite(*a[i].ptr, a[i].bytes, 1, f) == 1;
    *bytes += (int64_t)a[i].bytes;
  }
  if (fclose(f) || !ok || rename(tmp, file)) {
    remove(tmp);
    return em_set_error(EM_ERR_IO, "%s: cannot write '%s': %s", op, file, strerror(errno));
  }
  *sum = h.checksum;
  return EM_OK;
}

em_status em_graph_part_save(const em_graph_part *p, const char *path) {
  const char *op = "graph part save";
  if (!p || !path) return em_set_error(EM_ERR_ARGUMENT, "%s: graph or path is NULL", op);
  if (strlen(path) > 4000) return em_set_error(EM_ERR_ARGUMENT, "%s: the path is too long", op);
  char file[4100];
  snprintf(file, sizeof file, "%s.%d-of-%d", path, p->rank, p->size);
  int64_t mine[2] = {0, 0};
  uint64_t sum = 0;
  em_status st = write_part(p, file, &sum, &mine[1]);
  mine[0] = (int64_t)sum;
  if ((st = gr_agree(p->group, op, st))) return st;
  int64_t *all = malloc((size_t)p->size * 2 * sizeof *all);
  if (!all) st = gr_oom(op, 64);
  if ((st = gr_agree(p->group, op, st))) return st;
  if ((st = gr_allgather(p->group, all, mine, 2, EM_INT64))) {
    free(all);
    return st;
  }
  if (p->rank == 0) {
    size_t cap = 256 + (size_t)p->size * (strlen(path) + 80);
    char *text = malloc(cap);
    if (!text) st = gr_oom(op, cap);
    else {
      size_t len = (size_t)snprintf(text, cap, "ember-graph-parts %d\nranks %d\nvertices %" PRId64 "\nedges %" PRId64
                                    "\n", p->weights ? 2 : 1, p->size, p->n, p->m);
      for (int r = 0; r < p->size; r++)
        len += (size_t)snprintf(text + len, cap - len, "part %d %s.%d-of-%d %016" PRIx64 " %" PRId64 "\n", r,
                                base_name(path), r, p->size, (uint64_t)all[2 * r], all[2 * r + 1]);
      st = em_file_replace(path, text, len);
      free(text);
    }
  }
  free(all);
  return gr_agree(p->group, op, st);
}

/* Reads the manifest's rank count and this rank's line. */
static em_status read_manifest(const char *path, int rank, int size, char *file, size_t cap, uint64_t *sum,
                               int64_t *bytes) {
  const char *op = "graph part load";
  FILE *f = fopen(path, "r");
  if (!f) return em_set_error(EM_ERR_IO, "%s: cannot open the partitioned cache '%s': %s", op, path, strerror(errno));
  char line[4400];
  int ranks = -1, found = 0;
  em_status st = EM_OK;
  if (!fgets(line, sizeof line, f) || (strncmp(line, "ember-graph-parts 1", 19) && strncmp(line, "ember-graph-parts 2", 19))) {
    st = em_set_error(EM_ERR_FORMAT,
                      "%s: '%s' is not a partitioned graph cache (expected 'ember-graph-parts 1' or 2 first: a later "
                      "version of ember may have written it)",
                      op, path);
    goto done;
  }
  while (fgets(line, sizeof line, f)) {
    int r;
    char name[4096];
    unsigned long long c;
    long long b;
    if (sscanf(line, "ranks %d", &r) == 1) ranks = r;
    else if (sscanf(line, "part %d %4095s %llx %lld", &r, name, &c, &b) == 4 && r == rank) {
      const char *slash = strrchr(path, '/');
      snprintf(file, cap, "%.*s%s", slash ? (int)(slash - path + 1) : 0, path, name);
      *sum = c;
      *bytes = b;
      found = 1;
    }
  }
  if (ranks != size)
    st = em_set_error(EM_ERR_ARGUMENT,
                      "%s: the partitioned cache '%s' was built for %d ranks, this group has %d: run with %d ranks, "
                      "or rebuild the cache (delete it) with %d",
                      op, path, ranks, size, ranks, size);
  else if (!found)
    st = em_set_error(EM_ERR_FORMAT, "%s: the partitioned cache '%s' names no file for rank %d", op, path, rank);
done:
  fclose(f);
  return st;
}

static em_status load_part(em_graph_part *p, const char *file, uint64_t want, int64_t bytes, bool verify) {
  const char *op = "graph part load";
  FILE *f = fopen(file, "rb");
  if (!f) return em_set_error(EM_ERR_IO, "%s: cannot open '%s': %s", op, file, strerror(errno));
  part_header h;
  em_status st = EM_OK;
  bool ok = fread(&h, sizeof h, 1, f) == 1, weighted = ok && !memcmp(h.magic, PART_MAGIC_W, 8);
  if (!ok || (memcmp(h.magic, PART_MAGIC, 8) && !weighted) || h.rank != p->rank || h.size != p->size ||
      h.checksum != want) {
    st = em_set_error(EM_ERR_FORMAT, "%s: '%s' is not rank %d of %d's part of this cache (header or checksum differs "
                      "from the manifest)", op, file, p->rank, p->size);
    goto done;
  }
  p->n = h.n, p->m = h.m, p->begin = h.begin, p->end = h.end, p->nl = h.nl, p->ml = h.ml;
  p->nmirror = h.nmirror, p->nsend = h.nsend, p->id_base = h.id_base, p->directed = h.directed;
  array_ref a[11];
  p->original = h.has_original ? (int64_t *)1 : NULL; /* counted by arrays(), allocated below */
  p->weights = weighted ? (float *)1 : NULL;
  int k = arrays(p, a);
  int64_t expect = (int64_t)sizeof h;
  for (int i = 0; i < k; i++) expect += (int64_t)a[i].bytes;
  if (expect != bytes) {
    p->original = NULL;
    p->weights = NULL;
    st = em_set_error(EM_ERR_FORMAT, "%s: '%s' holds %lld bytes by its header, the manifest says %lld", op, file,
                      (long long)expect, (long long)bytes);
    goto done;
  }
  for (int i = 0; i < k; i++) *a[i].ptr = NULL;
  for (int i = 0; i < k; i++) {
    size_t nb = a[i].bytes ? a[i].bytes : 8;
    *a[i].ptr = a[i].plain ? malloc(nb) : gr_alloc(nb);
    if (!*a[i].ptr) {
      st = gr_oom(op, nb);
      goto done;
    }
    if (a[i].bytes && fread(*a[i].ptr, a[i].bytes, 1, f) != 1) {
      st = em_set_error(EM_ERR_FORMAT, "%s: '%s' is truncated", op, file);
      goto done;
    }
  }
  uint64_t sum;
  if (verify && !(st = checksum(a, k, &sum)) && sum != want)
    st = em_set_error(EM_ERR_FORMAT, "%s: '%s' is damaged: checksum %016llx, the manifest says %016llx", op, file,
                      (unsigned long long)sum, (unsigned long long)want);
done:
  fclose(f);
  return st;
}

em_status gr_part_load_cache(em_graph_part **out, em_dist_group *g, const char *path, bool verify,
                             bool keep_weights) {
  const char *op = "graph part load";
  em_graph_part *p = calloc(1, sizeof *p);
  if (!p) return gr_agree(g, op, gr_oom(op, sizeof *p));
  em_dist_group_retain(g);
  p->group = g;
  p->rank = em_dist_rank(g);
  p->size = em_dist_size(g);
  char file[4400];
  uint64_t sum = 0;
  int64_t bytes = 0;
  em_status st = read_manifest(path, p->rank, p->size, file, sizeof file, &sum, &bytes);
  if (!st) st = load_part(p, file, sum, bytes, verify);
  if ((st = gr_agree(g, op, st))) {
    em_graph_part_free(p);
    return st;
  }
  if (!keep_weights) { /* weights = 0: the arcs as they are, each counted once */
    gr_free(p->weights);
    gr_free(p->out_weight);
    p->weights = NULL;
    p->out_weight = NULL;
  }
  *out = p;
  return EM_OK;
}
