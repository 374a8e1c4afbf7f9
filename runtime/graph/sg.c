/* sg.c - reads the GAP benchmark suite's serialized graphs (.sg), little-endian and
 * packed: bool directed (1 byte), int64 arcs, int64 vertices, int64 out_offsets[n + 1],
 * int32 out_neighbors[arcs], then for directed graphs the in-edge CSR in the same layout.
 * The file has no magic number, so every size and every id is checked before use. The
 * out-edge CSR is read (the in-edge half is implied by it) and rebuilt through the CSR
 * builder, which applies the options and the vertex order. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "graph_impl.h"

#define SG_HEADER 17

static em_status read_all(FILE *f, void *dst, size_t bytes, const char *op, const char *path) {
  if (fread(dst, 1, bytes, f) != bytes)
    return em_set_error(EM_ERR_IO, "%s: %s: read failed%s%s", op, path, ferror(f) ? ": " : " (file shrank)",
                        ferror(f) ? strerror(errno) : "");
  return EM_OK;
}

em_status gr_load_sg(em_graph **out, const char *path, const em_graph_options *opts) {
  const char *op = "load_sg";
  FILE *f = fopen(path, "rb");
  if (!f) return em_set_error(EM_ERR_IO, "%s: cannot open '%s': %s", op, path, strerror(errno));
  int64_t *offsets = NULL;
  int32_t *neighbors = NULL;
  em_status st = EM_OK;
  struct stat sb;
  unsigned char header[SG_HEADER];
  if (fstat(fileno(f), &sb) < 0 || !S_ISREG(sb.st_mode)) {
    st = em_set_error(EM_ERR_IO, "%s: '%s' is not a regular file", op, path);
    goto done;
  }
  uint64_t size = (uint64_t)sb.st_size;
  if (size < SG_HEADER) {
    st = em_set_error(EM_ERR_FORMAT,
                      "%s: %s: %llu bytes, too short for the %d-byte header (truncated, or not a .sg file)", op, path,
                      (unsigned long long)size, SG_HEADER);
    goto done;
  }
  if ((st = read_all(f, header, SG_HEADER, op, path))) goto done;
  int64_t m, n;
  memcpy(&m, header + 1, 8);
  memcpy(&n, header + 9, 8);
  bool directed = header[0] == 1;
  if (header[0] > 1) {
    st = em_set_error(EM_ERR_FORMAT, "%s: %s: first byte is 0x%02x, expected 0 or 1 (directed); not a .sg file", op,
                      path, header[0]);
    goto done;
  }
  if (n < 0 || m < 0 || n > GR_MAX_VERTICES || m > (int64_t)1 << 45) {
    st = em_set_error(EM_ERR_FORMAT, "%s: %s: header says %lld vertices and %lld arcs; not a .sg file", op, path,
                      (long long)n, (long long)m);
    goto done;
  }
  uint64_t half = 8 * (uint64_t)(n + 1) + 4 * (uint64_t)m, expect = SG_HEADER + half * (directed ? 2 : 1);
  if (size != expect) {
    st = em_set_error(EM_ERR_FORMAT,
                      "%s: %s: the header (%s, %lld vertices, %lld arcs) implies %llu bytes, the file has %llu "
                      "(truncated, or not a .sg file)",
                      op, path, directed ? "directed" : "undirected", (long long)n, (long long)m,
                      (unsigned long long)expect, (unsigned long long)size);
    goto done;
  }
  offsets = gr_alloc((size_t)(n + 1) * sizeof *offsets);
  neighbors = gr_alloc((size_t)(m ? m : 1) * sizeof *neighbors);
  if (!offsets || !neighbors) {
    st = gr_oom(op, half);
    goto done;
  }
  if ((st = read_all(f, offsets, (size_t)(n + 1) * 8, op, path)) ||
      (st = read_all(f, neighbors, (size_t)m * 4, op, path)))
    goto done;
  if (offsets[0] != 0 || offsets[n] != m) {
    st = em_set_error(EM_ERR_FORMAT, "%s: %s: out_offsets run from %lld to %lld, expected 0 to %lld arcs", op, path,
                      (long long)offsets[0], (long long)offsets[n], (long long)m);
    goto done;
  }
  int64_t bad_offset = -1, bad_neighbor = -1;
#pragma omp parallel for schedule(static) num_threads(gr_threads())
  for (int64_t v = 0; v < n; v++) {
    if (offsets[v + 1] < offsets[v]) {
#pragma omp critical(gr_sg_check)
      if (bad_offset < 0 || v < bad_offset) bad_offset = v;
      continue;
    }
    if (offsets[v] < 0 || offsets[v + 1] > m) continue; /* reported through bad_offset below */
    for (int64_t j = offsets[v]; j < offsets[v + 1]; j++)
      if (neighbors[j] < 0 || neighbors[j] >= n) {
#pragma omp critical(gr_sg_check)
        if (bad_neighbor < 0 || j < bad_neighbor) bad_neighbor = j;
        break;
      }
  }
  if (bad_offset >= 0) {
    st =
        em_set_error(EM_ERR_FORMAT, "%s: %s: out_offsets decrease at vertex %lld (%lld then %lld); not a valid CSR", op,
                     path, (long long)bad_offset, (long long)offsets[bad_offset], (long long)offsets[bad_offset + 1]);
    goto done;
  }
  if (bad_neighbor >= 0) {
    st = em_set_error(EM_ERR_FORMAT, "%s: %s: out_neighbors[%lld] is %d, expected a vertex id in [0, %lld)", op, path,
                      (long long)bad_neighbor, neighbors[bad_neighbor], (long long)n);
    goto done;
  }
  fclose(f);
  f = NULL;
  /* An undirected .sg already lists both arcs of each edge: push them as they are. */
  em_graph_options o = *opts;
  if (!directed) o.directed = 1;
  gr_csr_view view = {.n = n, .offsets = offsets, .neighbors = neighbors, .in_arcs = false};
  gr_source src;
  gr_csr_source(&src, &view, op, path);
  if ((st = gr_build(out, &src, &o))) goto done;
  if (!directed) (*out)->directed = false;
done:
  if (f) fclose(f);
  gr_free(offsets);
  gr_free(neighbors);
  return st;
}
