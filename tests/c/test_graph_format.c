/* test_graph_format.c - binary graphs: ember's format (round trips, corrupted, truncated
 * and foreign files, options applied on load) and gapbs .sg files (directed, undirected,
 * every malformed case). */
#include <stdint.h>
#include "test_util.h"
#include "ember/graph.h"
#include "graph/graph_impl.h"
#include "test_graph_util.h"

static void *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  *len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  void *p = malloc(*len + 1);
  assert_int_equal(fread(p, 1, *len, f), *len);
  fclose(f);
  return p;
}

/* Same vertices, arcs, ids, labels, degrees and PageRank bits. */
static void expect_same_graph(const em_graph *a, const em_graph *b) {
  int64_t n = em_graph_num_vertices(a), m = em_graph_num_edges(a);
  assert_int_equal(em_graph_num_vertices(b), n);
  assert_int_equal(em_graph_num_edges(b), m);
  assert_int_equal(em_graph_is_directed(a), em_graph_is_directed(b));
  em_tensor *sa = NULL, *da = NULL, *sb = NULL, *db = NULL, *ia = NULL, *ib = NULL, *oa = NULL, *ob = NULL;
  assert_int_equal(em_graph_edges(a, &sa, &da), EM_OK);
  assert_int_equal(em_graph_edges(b, &sb, &db), EM_OK);
  assert_memory_equal(em_tensor_data(sa), em_tensor_data(sb), (size_t)m * 8);
  assert_memory_equal(em_tensor_data(da), em_tensor_data(db), (size_t)m * 8);
  assert_int_equal(em_graph_degrees(a, &ia, &oa), EM_OK);
  assert_int_equal(em_graph_degrees(b, &ib, &ob), EM_OK);
  assert_memory_equal(em_tensor_data(oa), em_tensor_data(ob), (size_t)n * 8);
  for (int64_t v = 0; v < n; v++) {
    assert_int_equal(em_graph_original_id(a, v), em_graph_original_id(b, v));
    const char *la = em_graph_label(a, v), *lb = em_graph_label(b, v);
    assert_true((la == NULL) == (lb == NULL));
    if (la) assert_string_equal(la, lb);
  }
  float *xa = tg_pagerank(a, NULL, NULL), *xb = tg_pagerank(b, NULL, NULL);
  assert_memory_equal(xa, xb, (size_t)n * 4);
  free(xa), free(xb);
  em_tensor_release(sa), em_tensor_release(da), em_tensor_release(sb), em_tensor_release(db);
  em_tensor_release(ia), em_tensor_release(ib), em_tensor_release(oa), em_tensor_release(ob);
}

static em_graph *small_labelled(int reorder) {
  em_graph_options o = tg_opts(reorder);
  em_graph *g = NULL;
  const char *p = tg_text("s.txt", "# sparse ids\n100 7\n7 100\n100 3000000000\n3000000000 100\n5 7\n");
  assert_int_equal(em_graph_load(&g, p, &o), EM_OK);
  assert_int_equal(em_graph_load_labels(g, tg_text("s_labels.txt", "7 seven\n3000000000 three billion\n")), EM_OK);
  return g;
}

static void test_round_trip(void **state) {
  (void)state;
  em_graph_options o = tg_opts(1);
  for (int reorder = 0; reorder <= 1; reorder++) {
    o = tg_opts(reorder);
    em_graph *a = small_labelled(reorder), *b = NULL;
    assert_int_equal(em_graph_save(a, tg_path("s.emg")), EM_OK);
    assert_int_equal(em_graph_load(&b, tg_path("s.emg"), &o), EM_OK);
    expect_same_graph(a, b);
    em_graph_free(a), em_graph_free(b);
  }
  /* undirected, 1-based Matrix Market ids; a generated graph; an explicit format */
  em_graph *a = NULL, *b = NULL;
  assert_int_equal(
      em_graph_load(&a, tg_text("u.mtx", "%%MatrixMarket matrix coordinate pattern symmetric\n3 3 2\n2 1\n3 2\n"), &o),
      EM_OK);
  assert_int_equal(em_graph_save(a, tg_path("u.emg")), EM_OK);
  assert_int_equal(em_graph_load(&b, tg_path("u.emg"), &o), EM_OK);
  assert_int_equal(em_graph_original_id(b, 0), 1);
  expect_same_graph(a, b);
  em_graph_free(a), em_graph_free(b);
  assert_int_equal(em_graph_kronecker(&a, 12, 8, 5, &o), EM_OK);
  assert_int_equal(em_graph_save(a, tg_path("k.bin")), EM_OK);
  o.format = EM_GRAPH_FORMAT_EMBER;
  assert_int_equal(em_graph_load(&b, tg_path("k.bin"), &o), EM_OK);
  expect_same_graph(a, b);
  em_graph_free(a), em_graph_free(b);
}

/* Options that change the graph are applied to a loaded file by building it again. */
static void test_options_on_load(void **state) {
  (void)state;
  em_graph_options o = tg_opts(1);
  em_graph *a = NULL, *b = NULL;
  assert_int_equal(em_graph_load(&a, tg_text("d.txt", "1 2\n1 2\n2 2\n2 3\n"), &o), EM_OK);
  assert_int_equal(em_graph_load_labels(a, tg_text("d_l.txt", "3 three\n")), EM_OK);
  assert_int_equal(em_graph_save(a, tg_path("d.emg")), EM_OK);
  o.drop_duplicates = 1;
  o.drop_self_loops = 1;
  o.reverse = 1;
  o.reorder = 0;
  assert_int_equal(em_graph_load(&b, tg_path("d.emg"), &o), EM_OK);
  assert_int_equal(em_graph_num_edges(b), 2);
  em_tensor *s = NULL, *d = NULL;
  assert_int_equal(em_graph_edges(b, &s, &d), EM_OK); /* 2 -> 1, 3 -> 2 in dense ids 1 -> 0, 2 -> 1 */
  assert_int_equal(((int64_t *)em_tensor_data(s))[0], 1);
  assert_int_equal(((int64_t *)em_tensor_data(d))[0], 0);
  assert_int_equal(((int64_t *)em_tensor_data(s))[1], 2);
  assert_int_equal(((int64_t *)em_tensor_data(d))[1], 1);
  assert_string_equal(em_graph_label(b, 2), "three");
  assert_int_equal(em_graph_original_id(b, 2), 3);
  em_tensor_release(s), em_tensor_release(d);
  em_graph_free(a), em_graph_free(b);
}

static void load_error(const char *path, em_status code, const char *a, const char *b) {
  em_graph_options o = tg_opts(1);
  o.format = EM_GRAPH_FORMAT_EMBER;
  em_graph *g = NULL;
  tg_expect_error(em_graph_load(&g, path, &o), code, a, b, NULL);
  assert_null(g);
}

static void test_ember_errors(void **state) {
  (void)state;
  em_graph *g = small_labelled(1);
  const char *good = tg_path("good.emg");
  assert_int_equal(em_graph_save(g, good), EM_OK);
  em_graph_free(g);
  size_t len;
  unsigned char *bytes = read_file(good, &len);
  /* one flipped bit in each section's first byte: the checksum names the section */
  const char *names[] = {"offsets",     "sources",      "out_degree",    "to_dense",
                         "to_internal", "original_ids", "label_offsets", "label_data"};
  for (int i = 0; i < 8; i++) {
    uint64_t off;
    memcpy(&off, bytes + 88 + 32 * i + 8, 8); /* the section table starts at byte 88 */
    bytes[off] ^= 0x10;
    char want[64];
    snprintf(want, sizeof want, "checksum mismatch in section '%s'", names[i]);
    load_error(tg_write("flip.emg", bytes, len), EM_ERR_FORMAT, "flip.emg", want);
    bytes[off] ^= 0x10;
  }
  bytes[40] ^= 1; /* a size in the header */
  load_error(tg_write("hdr.emg", bytes, len), EM_ERR_FORMAT, "hdr.emg", "checksum mismatch in the header");
  bytes[40] ^= 1;
  load_error(tg_write("cut.emg", bytes, len - 64), EM_ERR_FORMAT, "cut.emg", "the file has");
  load_error(tg_write("tiny.emg", bytes, 100), EM_ERR_FORMAT, "tiny.emg", "shorter than the 512-byte header");
  load_error(tg_text("text.emg", "# this is a SNAP file, not a graph cache\n1 2\n"), EM_ERR_FORMAT, "text.emg",
             "shorter than");
  unsigned char *fake = calloc(1, len);
  memcpy(fake, "NOTEMBER", 8);
  load_error(tg_write("magic.emg", fake, len), EM_ERR_FORMAT, "magic.emg", "not an ember graph file");
  free(fake);
  /* a newer version, with a valid header checksum */
  uint32_t version = 3;
  memcpy(bytes + 8, &version, 4);
  uint64_t zero = 0, sum;
  memcpy(bytes + 504, &zero, 8);
  sum = gr_xxh64(bytes, 512, 1);
  memcpy(bytes + 504, &sum, 8);
  load_error(tg_write("v2.emg", bytes, len), EM_ERR_FORMAT, "v2.emg", "format version 3");
  free(bytes);
  load_error(tg_path("absent.emg"), EM_ERR_IO, "cannot open", "absent.emg");
  /* saving into a folder that does not exist */
  g = small_labelled(0);
  tg_expect_error(em_graph_save(g, "/nonexistent-dir/x.emg"), EM_ERR_IO, "cannot create", NULL);
  em_graph_free(g);
}

/* A section of an ember file, by its place in the table (header byte 88, 32 bytes each). */
static unsigned char *section_at(unsigned char *bytes, int i, uint64_t *count) {
  uint64_t off;
  memcpy(&off, bytes + 88 + 32 * i + 8, 8);
  if (count) memcpy(count, bytes + 88 + 32 * i + 16, 8);
  return bytes + off;
}

/* Recomputes every checksum, as anyone crafting a file can. */
static void reseal(unsigned char *bytes, size_t len) {
  uint32_t ns;
  memcpy(&ns, bytes + 52, 4);
  for (uint32_t i = 0; i < ns; i++) {
    uint32_t id, elem;
    uint64_t off, count, sum;
    memcpy(&id, bytes + 88 + 32 * i, 4);
    memcpy(&elem, bytes + 88 + 32 * i + 4, 4);
    memcpy(&off, bytes + 88 + 32 * i + 8, 8);
    memcpy(&count, bytes + 88 + 32 * i + 16, 8);
    if (off < len && count * elem <= len - off && gr_checksum(bytes + off, count * elem, id, &sum) == EM_OK)
      memcpy(bytes + 88 + 32 * i + 24, &sum, 8);
  }
  uint64_t zero = 0, sum;
  memcpy(bytes + 504, &zero, 8);
  sum = gr_xxh64(bytes, 512, 1);
  memcpy(bytes + 504, &sum, 8);
}

/* Valid checksums over a broken structure: each invariant is checked, with and without
 * verification, and with and without the rebuild that reordering options cause. */
static void expect_structure_error(unsigned char *bytes, size_t len, const char *want) {
  reseal(bytes, len);
  const char *p = tg_write("crafted.emg", bytes, len);
  for (int verify = 0; verify <= 1; verify++)
    for (int reorder = 0; reorder <= 1; reorder++) {
      em_graph_options o = tg_opts(reorder);
      o.format = EM_GRAPH_FORMAT_EMBER;
      o.verify = verify;
      em_graph *g = NULL;
      tg_expect_error(em_graph_load(&g, p, &o), EM_ERR_FORMAT, "crafted.emg", want, NULL);
      assert_null(g);
    }
}

static void test_ember_structure(void **state) {
  (void)state;
  em_graph *g = small_labelled(1); /* 4 vertices, 5 arcs, reordered, with ids and labels */
  const char *good = tg_path("good.emg");
  assert_int_equal(em_graph_save(g, good), EM_OK);
  em_graph_free(g);
  size_t len;
  unsigned char *orig = read_file(good, &len), *b = malloc(len);
  int64_t v64;
  uint32_t v32;
#define FRESH() memcpy(b, orig, len)
  FRESH(); /* offsets that decrease */
  v64 = 5;
  memcpy(section_at(b, 0, NULL) + 8, &v64, 8);
  expect_structure_error(b, len, "section 'offsets' decreases at vertex 1 (5 then 2)");
  FRESH(); /* a source id past the vertices */
  v32 = 4;
  memcpy(section_at(b, 1, NULL) + 4, &v32, 4);
  expect_structure_error(b, len, "section 'sources' element 1 is 4, expected a vertex id below 4");
  FRESH(); /* an out-degree that disagrees with the sources */
  memcpy(&v32, section_at(b, 2, NULL), 4);
  v32 += 1;
  memcpy(section_at(b, 2, NULL), &v32, 4);
  expect_structure_error(b, len, "section 'out_degree' gives vertex 0");
  FRESH(); /* to_dense not a permutation */
  memcpy(section_at(b, 3, NULL), section_at(b, 3, NULL) + 4, 4);
  expect_structure_error(b, len, "are not inverse permutations");
  FRESH();
  v32 = 99;
  memcpy(section_at(b, 4, NULL) + 8, &v32, 4);
  expect_structure_error(b, len, "(to_internal), expected ids below 4");
  FRESH(); /* original ids that do not ascend */
  memcpy(section_at(b, 5, NULL), section_at(b, 5, NULL) + 8, 8);
  expect_structure_error(b, len, "section 'original_ids' does not ascend at vertex 0");
  FRESH(); /* a label range past the data, and one without its NUL */
  uint64_t ndata;
  section_at(b, 7, &ndata);
  v64 = (int64_t)ndata + 100;
  memcpy(section_at(b, 6, NULL) + 8, &v64, 8);
  expect_structure_error(b, len, "section 'label_offsets' at vertex 0");
  FRESH();
  memset(section_at(b, 7, NULL), 'x', ndata);
  expect_structure_error(b, len, "is not a NUL-terminated range of the label data");
  FRESH(); /* count x element size wraps: 2^62 arcs of 4 bytes "fit" in 0 bytes */
  uint64_t huge = (uint64_t)1 << 62;
  memcpy(b + 40, &huge, 8); /* num_edges */
  memcpy(b + 88 + 32 * 1 + 16, &huge, 8); /* the sources' count */
  expect_structure_error(b, len, "section 'sources' does not fit the header");
#undef FRESH
  free(b), free(orig);
}

/* gapbs .sg: bool directed, int64 arcs, int64 vertices, int64 offsets[n+1], int32 ids[m]
 * (and the in-edge CSR when directed), packed. */
static size_t sg_bytes(unsigned char *buf, unsigned char directed, int64_t n, const int64_t *off, const int32_t *nb,
                       const int64_t *in_off, const int32_t *in_nb) {
  size_t k = 0;
  int64_t m = off[n];
  buf[k++] = directed;
  memcpy(buf + k, &m, 8), k += 8;
  memcpy(buf + k, &n, 8), k += 8;
  memcpy(buf + k, off, (size_t)(n + 1) * 8), k += (size_t)(n + 1) * 8;
  memcpy(buf + k, nb, (size_t)m * 4), k += (size_t)m * 4;
  if (directed) {
    memcpy(buf + k, in_off, (size_t)(n + 1) * 8), k += (size_t)(n + 1) * 8;
    memcpy(buf + k, in_nb, (size_t)m * 4), k += (size_t)m * 4;
  }
  return k;
}

static void test_sg(void **state) {
  (void)state;
  unsigned char buf[512];
  int64_t off[] = {0, 2, 3, 3}, in_off[] = {0, 0, 1, 3};
  int32_t nb[] = {1, 2, 2}, in_nb[] = {0, 0, 1};
  size_t len = sg_bytes(buf, 1, 3, off, nb, in_off, in_nb);
  em_graph_options o = tg_opts(1);
  em_graph *g = NULL;
  assert_int_equal(em_graph_load(&g, tg_write("d.sg", buf, len), &o), EM_OK);
  assert_true(em_graph_is_directed(g));
  assert_int_equal(em_graph_num_edges(g), 3);
  em_tensor *in = NULL;
  assert_int_equal(em_graph_degrees(g, &in, NULL), EM_OK);
  assert_int_equal(((int64_t *)em_tensor_data(in))[2], 2);
  em_tensor_release(in);
  em_graph_free(g);
  /* undirected: both arcs are in the file already, and stay two */
  int64_t uoff[] = {0, 1, 3, 4};
  int32_t unb[] = {1, 0, 2, 1};
  len = sg_bytes(buf, 0, 3, uoff, unb, NULL, NULL);
  assert_int_equal(em_graph_load(&g, tg_write("u.sg", buf, len), &o), EM_OK);
  assert_false(em_graph_is_directed(g));
  assert_int_equal(em_graph_num_edges(g), 4);
  em_graph_free(g);
  /* a directed file loaded as undirected gains the reverse arcs */
  o.directed = 0;
  len = sg_bytes(buf, 1, 3, off, nb, in_off, in_nb);
  assert_int_equal(em_graph_load(&g, tg_write("d.sg", buf, len), &o), EM_OK);
  assert_int_equal(em_graph_num_edges(g), 6);
  em_graph_free(g);
}

static void sg_error(const char *name, const unsigned char *buf, size_t len, const char *a, const char *b) {
  em_graph_options o = tg_opts(1);
  em_graph *g = NULL;
  tg_expect_error(em_graph_load(&g, tg_write(name, buf, len), &o), EM_ERR_FORMAT, a, b, NULL);
  assert_null(g);
}

static void test_sg_errors(void **state) {
  (void)state;
  unsigned char buf[512];
  int64_t off[] = {0, 2, 3, 3}, in_off[] = {0, 0, 1, 3};
  int32_t nb[] = {1, 2, 2}, in_nb[] = {0, 0, 1};
  size_t len = sg_bytes(buf, 1, 3, off, nb, in_off, in_nb);
  sg_error("cut.sg", buf, len - 1, "cut.sg", "implies 105 bytes, the file has 104");
  sg_error("short.sg", buf, 10, "short.sg", "too short for the 17-byte header");
  buf[0] = 7;
  sg_error("byte.sg", buf, len, "byte.sg", "first byte is 0x07");
  buf[0] = 1;
  int64_t bad_n = -3;
  memcpy(buf + 9, &bad_n, 8);
  sg_error("neg.sg", buf, len, "neg.sg", "-3 vertices");
  int64_t dec[] = {0, 2, 1, 3};
  len = sg_bytes(buf, 1, 3, dec, nb, in_off, in_nb);
  sg_error("dec.sg", buf, len, "dec.sg", "out_offsets decrease at vertex 1");
  int64_t start[] = {1, 2, 3, 3};
  len = sg_bytes(buf, 1, 3, start, nb, in_off, in_nb);
  sg_error("start.sg", buf, len, "start.sg", "out_offsets run from 1 to 3, expected 0 to 3");
  int32_t far[] = {1, 5, 2};
  len = sg_bytes(buf, 1, 3, off, far, in_off, in_nb);
  sg_error("far.sg", buf, len, "far.sg", "out_neighbors[1] is 5, expected a vertex id in [0, 3)");
  int32_t neg[] = {1, 2, -1};
  len = sg_bytes(buf, 1, 3, off, neg, in_off, in_nb);
  sg_error("negid.sg", buf, len, "negid.sg", "out_neighbors[2] is -1");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),   cmocka_unit_test(test_options_on_load),
      cmocka_unit_test(test_ember_errors), cmocka_unit_test(test_ember_structure),
      cmocka_unit_test(test_sg),           cmocka_unit_test(test_sg_errors),
  };
  return cmocka_run_group_tests(tests, tg_setup, tg_cleanup);
}
