/* test_safetensors.c - safetensors checkpoints: byte-exact output, round trips of every
 * dtype and layout, atomic saves, and a clean error for each kind of malformed file. */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "test_util.h"
#include "ember/io.h"
#include "ember/tensor.h"

static char dir[64];

static const char *in_dir(const char *name) {
  static char buf[4][256];
  static int next;
  char *b = buf[next++ & 3];
  int n = snprintf(b, 256, "%s/%s", dir, name);
  assert_true(n > 0 && n < 256);
  return b;
}

#define assert_ok(call)                                                  \
  do {                                                                   \
    em_status st_ = (call);                                              \
    if (st_ != EM_OK) fail_msg("%s failed: %s", #call, em_last_error()); \
  } while (0)

/* The call fails with code and a message that contains text. */
#define assert_error(call, code, text)                                                                      \
  do {                                                                                                      \
    em_status st_ = (call);                                                                                 \
    if (st_ != (code) || !strstr(em_last_error(), (text)))                                                  \
      fail_msg("%s: got status %d '%s', wanted %d with '%s'", #call, st_, em_last_error(), (code), (text)); \
  } while (0)

/* ---------------------------------------------------------------- helpers */

static void write_bytes(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, n, f), n);
  fclose(f);
}

static unsigned char *read_bytes(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = malloc((size_t)len + 1);
  assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return buf;
}

/* A file with the given header (unpadded) and ndata data bytes 0, 1, 2, ... */
static const char *make_file(const char *name, const char *header, size_t ndata) {
  const char *path = in_dir(name);
  size_t hlen = strlen(header);
  unsigned char *buf = malloc(8 + hlen + ndata + 1);
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
  memcpy(buf + 8, header, hlen);
  for (size_t i = 0; i < ndata; i++) buf[8 + hlen + i] = (unsigned char)i;
  write_bytes(path, buf, 8 + hlen + ndata);
  free(buf);
  return path;
}

/* Opening the file fails with code, the path and text in the message. */
static void expect_bad(const char *path, em_status code, const char *text) {
  em_safetensors *f = (em_safetensors *)1;
  assert_error(em_safetensors_open(&f, path), code, text);
  assert_null(f);
  assert_non_null(strstr(em_last_error(), path));
}

static em_tensor *pattern(int ndim, const int64_t *sizes, em_dtype dtype, int seed) {
  em_tensor *t = NULL;
  assert_ok(em_empty(&t, ndim, sizes, dtype, CPU));
  unsigned char *p = em_tensor_data(t);
  size_t n = (size_t)em_tensor_numel(t) * em_dtype_size(dtype);
  for (size_t i = 0; i < n; i++)
    p[i] = dtype == EM_BOOL ? (unsigned char)((i + seed) % 3 == 0) : (unsigned char)(i * 37 + seed);
  return t;
}

static em_tensor *arange_f32(int64_t rows, int64_t cols) {
  em_tensor *flat = NULL, *t = NULL;
  int64_t sizes[2] = {rows, cols};
  assert_ok(em_arange(&flat, 0, (double)(rows * cols), 1, EM_FLOAT32, CPU));
  assert_ok(em_view(&t, flat, 2, sizes));
  em_tensor_release(flat);
  return t;
}

static double at2(const em_tensor *t, int64_t i, int64_t j) {
  int64_t idx[2] = {i, j};
  double v;
  assert_ok(em_tensor_get(t, idx, &v));
  return v;
}

static int count_dir_entries(void) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

static int setup(void **state) {
  (void)state;
  strcpy(dir, "/tmp/ember_st_XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));)
    if (e->d_name[0] != '.') unlink(in_dir(e->d_name));
  if (d) closedir(d);
  return rmdir(dir);
}

/* ---------------------------------------------------------------- writing */

/* The reference implementation's own serialization tests, byte for byte. */
static void test_matches_reference_bytes(void **state) {
  (void)state;
  static const unsigned char attn[] = {
      64,  0,  0,   0,  0,   0,  0,   0,   123, 34,  97,  116, 116, 110, 46,  48, 34, 58, 123, 34, 100, 116, 121, 112,
      101, 34, 58,  34, 70,  51, 50,  34,  44,  34,  115, 104, 97,  112, 101, 34, 58, 91, 49,  44, 50,  44,  51,  93,
      44,  34, 100, 97, 116, 97, 95,  111, 102, 102, 115, 101, 116, 115, 34,  58, 91, 48, 44,  50, 52,  93,  125, 125,
      0,   0,  0,   0,  0,   0,  128, 63,  0,   0,   0,   64,  0,   0,   64,  64, 0,  0,  128, 64, 0,   0,   160, 64};
  static const unsigned char empty[] = {8, 0, 0, 0, 0, 0, 0, 0, 123, 125, 32, 32, 32, 32, 32, 32};
  static const unsigned char meta[] = {40,  0,   0,   0,  0,  0,  0,   0,   123, 34,  95,  95,  109, 101, 116, 97,
                                       100, 97,  116, 97, 95, 95, 34,  58,  123, 34,  102, 114, 97,  109, 101, 119,
                                       111, 114, 107, 34, 58, 34, 112, 116, 34,  125, 125, 32,  32,  32,  32,  32};
  em_tensor *flat = NULL, *t = NULL;
  int64_t shape[3] = {1, 2, 3};
  assert_ok(em_arange(&flat, 0, 6, 1, EM_FLOAT32, CPU));
  assert_ok(em_view(&t, flat, 3, shape));
  const char *names[] = {"attn.0"}, *keys[] = {"framework"}, *values[] = {"pt"};
  size_t n;
  unsigned char *bytes;

  assert_ok(em_safetensors_save(in_dir("attn.st"), 1, names, &t, 0, NULL, NULL));
  bytes = read_bytes(in_dir("attn.st"), &n);
  assert_int_equal(n, sizeof attn);
  assert_memory_equal(bytes, attn, n);
  free(bytes);

  assert_ok(em_safetensors_save(in_dir("empty.st"), 0, NULL, NULL, 0, NULL, NULL));
  bytes = read_bytes(in_dir("empty.st"), &n);
  assert_int_equal(n, sizeof empty);
  assert_memory_equal(bytes, empty, n);
  free(bytes);

  assert_ok(em_safetensors_save(in_dir("meta.st"), 0, NULL, NULL, 1, keys, values));
  bytes = read_bytes(in_dir("meta.st"), &n);
  assert_int_equal(n, sizeof meta);
  assert_memory_equal(bytes, meta, n);
  free(bytes);
  em_tensor_release(t);
  em_tensor_release(flat);
}

/* Larger alignments first, then names: I64 before F32 before BOOL; z before a only by dtype. */
static void test_layout_order(void **state) {
  (void)state;
  int64_t two = 2;
  em_tensor *ts[3] = {pattern(1, &two, EM_BOOL, 0), pattern(1, &two, EM_FLOAT32, 0), pattern(1, &two, EM_INT64, 0)};
  const char *names[3] = {"a", "b", "z"};
  assert_ok(em_safetensors_save(in_dir("order.st"), 3, names, ts, 0, NULL, NULL));
  size_t n;
  unsigned char *bytes = read_bytes(in_dir("order.st"), &n);
  const char *want =
      "{\"z\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
      "\"a\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[24,26]}}";
  assert_true(n > 8 + strlen(want));
  assert_memory_equal(bytes + 8, want, strlen(want));
  assert_int_equal(bytes[0] % 8, 0);
  free(bytes);
  for (int i = 0; i < 3; i++) em_tensor_release(ts[i]);
}

/* Every dtype, with a 0-d, an empty and a 3-d shape, survives a round trip bit for bit. */
static void test_roundtrip_every_dtype(void **state) {
  (void)state;
  static const int64_t s3[3] = {2, 3, 4}, s0[2] = {0, 3};
  enum { N = EM_NUM_DTYPES * 3 };
  em_tensor *ts[N];
  char namebuf[N][32];
  const char *names[N];
  for (int d = 0; d < EM_NUM_DTYPES; d++) {
    for (int k = 0; k < 3; k++) {
      int i = d * 3 + k;
      int ndim = k == 0 ? 0 : k == 1 ? 2 : 3;
      ts[i] = pattern(ndim, k == 1 ? s0 : s3, (em_dtype)d, i);
      snprintf(namebuf[i], sizeof namebuf[i], "%s/%s", em_dtype_name((em_dtype)d),
               k == 0   ? "scalar"
               : k == 1 ? "empty"
                        : "cube");
      names[i] = namebuf[i];
    }
  }
  assert_ok(em_safetensors_save(in_dir("all.st"), N, names, ts, 0, NULL, NULL));
  em_safetensors *f = NULL;
  assert_ok(em_safetensors_open(&f, in_dir("all.st")));
  assert_int_equal(em_safetensors_count(f), N);
  for (int i = 1; i < N; i++) assert_true(strcmp(em_safetensors_name(f, i - 1), em_safetensors_name(f, i)) < 0);
  for (int i = 0; i < N; i++) {
    int at = em_safetensors_find(f, names[i]);
    assert_true(at >= 0);
    assert_string_equal(em_safetensors_name(f, at), names[i]);
    em_dtype dtype;
    int ndim;
    int64_t sizes[EM_MAX_DIMS];
    assert_ok(em_safetensors_info(f, at, &dtype, &ndim, sizes));
    assert_int_equal(dtype, em_tensor_dtype(ts[i]));
    assert_int_equal(ndim, em_tensor_ndim(ts[i]));
    em_tensor *got = NULL;
    assert_ok(em_safetensors_get(f, at, &got));
    assert_int_equal(em_tensor_dtype(got), em_tensor_dtype(ts[i]));
    assert_int_equal(em_tensor_ndim(got), em_tensor_ndim(ts[i]));
    for (int d = 0; d < ndim; d++) assert_int_equal(em_tensor_size(got, d), em_tensor_size(ts[i], d));
    size_t nbytes = (size_t)em_tensor_numel(got) * em_dtype_size(dtype);
    assert_true(em_tensor_is_contiguous(got));
    if (nbytes) {
      assert_memory_equal(em_tensor_data(got), em_tensor_data(ts[i]), nbytes);
      assert_int_equal((uintptr_t)em_tensor_data(got) % em_dtype_size(dtype), 0);
    }
    em_tensor_release(got);
  }
  em_safetensors_close(f);
  for (int i = 0; i < N; i++) em_tensor_release(ts[i]);
}

/* Strided, offset and broadcast (stride 0) views are written as contiguous values. */
static void test_roundtrip_noncontiguous(void **state) {
  (void)state;
  em_tensor *a = arange_f32(3, 4), *t = NULL, *n = NULL, *e = NULL, *row = NULL;
  assert_ok(em_transpose(&t, a, 0, 1)); /* [4, 3] */
  assert_ok(em_narrow(&n, a, 1, 1, 2)); /* columns 1..2 */
  assert_ok(em_narrow(&row, a, 0, 2, 1)); /* [1, 4]: row 2 */
  int64_t big[2] = {3, 4};
  assert_ok(em_expand(&e, row, 2, big)); /* row 2, three times */
  assert_false(em_tensor_is_contiguous(t));
  assert_false(em_tensor_is_contiguous(n));
  em_tensor *ts[3] = {t, n, e};
  const char *names[3] = {"t", "n", "e"};
  assert_ok(em_safetensors_save(in_dir("views.st"), 3, names, ts, 0, NULL, NULL));
  em_safetensors *f = NULL;
  assert_ok(em_safetensors_open(&f, in_dir("views.st")));
  em_tensor *gt = NULL, *gn = NULL, *ge = NULL;
  assert_ok(em_safetensors_get_by_name(f, "t", &gt));
  assert_ok(em_safetensors_get_by_name(f, "n", &gn));
  assert_ok(em_safetensors_get_by_name(f, "e", &ge));
  em_safetensors_close(f);
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 3; j++) assert_true(at2(gt, i, j) == 4.0 * j + i);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 2; j++) assert_true(at2(gn, i, j) == 4.0 * i + j + 1);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++) assert_true(at2(ge, i, j) == 8.0 + j);
  em_tensor *all[] = {a, t, n, e, row, gt, gn, ge};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) em_tensor_release(all[i]);
}

static void test_metadata_and_escapes(void **state) {
  (void)state;
  int64_t two = 2;
  em_tensor *t = pattern(1, &two, EM_FLOAT32, 1);
  const char *names[] = {"quote\" back\\slash\nnew\tline \x01 caf\xc3\xa9 \xe6\x97\xa5"};
  const char *keys[] = {"zeta", "alpha", "caf\xc3\xa9"}, *values[] = {"last", "first \"quoted\"\n", "\xf0\x9f\x94\xa5"};
  assert_ok(em_safetensors_save(in_dir("meta2.st"), 1, names, &t, 3, keys, values));
  em_safetensors *f = NULL;
  assert_ok(em_safetensors_open(&f, in_dir("meta2.st")));
  assert_string_equal(em_safetensors_name(f, 0), names[0]);
  assert_int_equal(em_safetensors_metadata_count(f), 3);
  assert_string_equal(em_safetensors_metadata_key(f, 0), "alpha");
  assert_string_equal(em_safetensors_metadata_value(f, 0), "first \"quoted\"\n");
  assert_string_equal(em_safetensors_metadata_key(f, 2), "zeta");
  assert_string_equal(em_safetensors_metadata_get(f, "caf\xc3\xa9"), "\xf0\x9f\x94\xa5");
  assert_null(em_safetensors_metadata_get(f, "missing"));
  assert_null(em_safetensors_metadata_key(f, 3));
  em_safetensors_close(f);
  em_tensor_release(t);
}

/* ---------------------------------------------------------------- loading */

/* Loaded tensors outlive the handle; writing them never reaches the file. */
static void test_tensors_outlive_handle_and_stay_private(void **state) {
  (void)state;
  em_tensor *a = arange_f32(2, 3);
  const char *names[] = {"a"};
  assert_ok(em_safetensors_save(in_dir("live.st"), 1, names, &a, 0, NULL, NULL));
  em_safetensors *f = NULL;
  em_tensor *got = NULL, *again = NULL;
  assert_ok(em_safetensors_open(&f, in_dir("live.st")));
  assert_ok(em_safetensors_get(f, 0, &got));
  em_safetensors_close(f);
  assert_true(at2(got, 1, 2) == 5.0);
  int64_t idx[2] = {1, 2};
  assert_ok(em_tensor_set(got, idx, -7.0));
  assert_true(at2(got, 1, 2) == -7.0);
  assert_ok(em_safetensors_open(&f, in_dir("live.st")));
  assert_ok(em_safetensors_get(f, 0, &again));
  assert_true(at2(again, 1, 2) == 5.0);
  em_safetensors_close(f);
  /* Saving over a loaded file is safe: the rename leaves the mapped inode intact. */
  assert_ok(em_safetensors_save(in_dir("live.st"), 1, names, &got, 0, NULL, NULL));
  assert_true(at2(again, 1, 2) == 5.0);
  em_tensor_release(got);
  em_tensor_release(again);
  em_tensor_release(a);
}

static void test_get_into_existing_tensor(void **state) {
  (void)state;
  em_tensor *a = arange_f32(2, 3), *dst = NULL, *wrong = NULL;
  const char *names[] = {"a"};
  assert_ok(em_safetensors_save(in_dir("into.st"), 1, names, &a, 0, NULL, NULL));
  int64_t sizes[2] = {2, 3}, other[2] = {3, 2};
  assert_ok(em_zeros(&dst, 2, sizes, EM_FLOAT64, CPU));
  assert_ok(em_zeros(&wrong, 2, other, EM_FLOAT32, CPU));
  em_tensor *keep = dst;
  em_safetensors *f = NULL;
  assert_ok(em_safetensors_open(&f, in_dir("into.st")));
  assert_ok(em_safetensors_get_by_name(f, "a", &dst));
  assert_ptr_equal(dst, keep);
  assert_true(at2(dst, 1, 1) == 4.0);
  assert_error(em_safetensors_get(f, 0, &wrong), EM_ERR_SHAPE,
               "tensor 'a' has shape [2, 3] in the file, the destination has shape [3, 2]");
  em_tensor *none = NULL;
  assert_error(em_safetensors_get_by_name(f, "b", &none), EM_ERR_INDEX, "no tensor named 'b'");
  assert_error(em_safetensors_get(f, 1, &none), EM_ERR_INDEX, "tensor index 1 out of range");
  assert_error(em_safetensors_info(f, -1, NULL, NULL, NULL), EM_ERR_INDEX, "out of range");
  assert_null(none);
  assert_int_equal(em_safetensors_find(f, "b"), -1);
  em_safetensors_close(f);
  em_tensor_release(dst);
  em_tensor_release(wrong);
  em_tensor_release(a);
}

/* Files from other writers: whitespace, escapes in names, unknown fields, any key order,
 * a header length that leaves the data unaligned (then tensors are copied). */
static void test_reads_foreign_layouts(void **state) {
  (void)state;
  const char *path =
      make_file("foreign.st",
                "{ \"b\\u00e9\" : {\"data_offsets\": [0, 8], \"extra\": {\"x\": [1, 2.5e3, true, null]},\n"
                "  \"shape\": [2], \"dtype\": \"F32\"},\n \"a\": {\"dtype\": \"U8\", \"shape\": [3], "
                "\"data_offsets\": [8, 11]}, \"__metadata__\": {}}\t\r\n  ",
                11);
  em_safetensors *f = NULL;
  assert_ok(em_safetensors_open(&f, path));
  assert_int_equal(em_safetensors_count(f), 2);
  assert_string_equal(em_safetensors_name(f, 0), "a");
  assert_string_equal(em_safetensors_name(f, 1), "b\xc3\xa9");
  em_tensor *b = NULL, *a = NULL;
  assert_ok(em_safetensors_get(f, 1, &b));
  assert_ok(em_safetensors_get(f, 0, &a));
  em_safetensors_close(f);
  assert_int_equal((uintptr_t)em_tensor_data(b) % 4, 0);
  unsigned char want[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  assert_memory_equal(em_tensor_data(b), want, 8);
  unsigned char want_a[3] = {8, 9, 10};
  assert_memory_equal(em_tensor_data(a), want_a, 3);
  em_tensor_release(a);
  em_tensor_release(b);
}

/* ---------------------------------------------------------------- saving errors */

static void test_save_errors_leave_existing_file(void **state) {
  (void)state;
  em_tensor *a = arange_f32(2, 2), *gone = arange_f32(1, 1);
  const char *path = in_dir("keep.st");
  const char *one[] = {"a"};
  assert_ok(em_safetensors_save(path, 1, one, &a, 0, NULL, NULL));
  size_t n0, n1;
  unsigned char *before = read_bytes(path, &n0);
  int files = count_dir_entries();

  assert_ok(em_tensor_free(gone));
  em_tensor *with_freed[2] = {a, gone};
  const char *two[] = {"a", "b"};
  assert_error(em_safetensors_save(path, 2, two, with_freed, 0, NULL, NULL), EM_ERR_ARGUMENT, "tensor 'b' was freed");
  em_tensor *with_null[2] = {a, NULL};
  assert_error(em_safetensors_save(path, 2, two, with_null, 0, NULL, NULL), EM_ERR_ARGUMENT, "tensor 'b' is NULL");
  em_tensor *twice[2] = {a, a};
  const char *dup[] = {"x", "x"};
  assert_error(em_safetensors_save(path, 2, dup, twice, 0, NULL, NULL), EM_ERR_ARGUMENT,
               "tensor name 'x' is given twice");
  const char *reserved[] = {"__metadata__"};
  assert_error(em_safetensors_save(path, 1, reserved, &a, 0, NULL, NULL), EM_ERR_ARGUMENT,
               "'__metadata__' is reserved");
  const char *bad_utf8[] = {"caf\xe9"};
  assert_error(em_safetensors_save(path, 1, bad_utf8, &a, 0, NULL, NULL), EM_ERR_ARGUMENT, "not valid UTF-8");
  const char *keys[] = {"k", "k"}, *values[] = {"1", "2"};
  assert_error(em_safetensors_save(path, 1, one, &a, 2, keys, values), EM_ERR_ARGUMENT,
               "metadata key 'k' is given twice");
  assert_error(em_safetensors_save(path, -1, one, &a, 0, NULL, NULL), EM_ERR_ARGUMENT, "negative count");
  assert_error(em_safetensors_save(NULL, 1, one, &a, 0, NULL, NULL), EM_ERR_ARGUMENT, "path is NULL");
  /* The path is a folder: writing succeeds, the rename fails and the temporary goes. */
  assert_error(em_safetensors_save(dir, 1, one, &a, 0, NULL, NULL), EM_ERR_IO, "cannot rename");

  unsigned char *after = read_bytes(path, &n1);
  assert_int_equal(n0, n1);
  assert_memory_equal(before, after, n0);
  assert_int_equal(count_dir_entries(), files); /* no temporary left behind */
  free(before);
  free(after);
  em_tensor_release(a);
  em_tensor_release(gone);
}

static void test_save_into_missing_folder(void **state) {
  (void)state;
  em_tensor *a = arange_f32(1, 2);
  const char *one[] = {"a"};
  const char *path = in_dir("no/such/folder/x.st");
  assert_error(em_safetensors_save(path, 1, one, &a, 0, NULL, NULL), EM_ERR_IO, "cannot create the temporary file");
  assert_non_null(strstr(em_last_error(), "No such file or directory"));
  assert_non_null(strstr(em_last_error(), path));
  em_tensor_release(a);
}

static void test_save_replaces_atomically(void **state) {
  (void)state;
  em_tensor *a = arange_f32(2, 2), *b = arange_f32(3, 1);
  const char *path = in_dir("replace.st"), *na[] = {"a"}, *nb[] = {"b"};
  int files = count_dir_entries();
  assert_ok(em_safetensors_save(path, 1, na, &a, 0, NULL, NULL));
  assert_ok(em_safetensors_save(path, 1, nb, &b, 0, NULL, NULL));
  assert_int_equal(count_dir_entries(), files + 1);
  em_safetensors *f = NULL;
  assert_ok(em_safetensors_open(&f, path));
  assert_int_equal(em_safetensors_count(f), 1);
  assert_string_equal(em_safetensors_name(f, 0), "b");
  em_safetensors_close(f);
  em_tensor_release(a);
  em_tensor_release(b);
}

/* ---------------------------------------------------------------- malformed files */

#define T1(extra) "{\"t\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]" extra "}}"

static void test_bad_short_file(void **state) {
  (void)state;
  write_bytes(in_dir("short.st"), "\x08\x00\x00\x00\x00", 5);
  expect_bad(in_dir("short.st"), EM_ERR_FORMAT, "the file is 5 bytes, shorter than the 8-byte header length");
  write_bytes(in_dir("zero.st"), "", 0);
  expect_bad(in_dir("zero.st"), EM_ERR_FORMAT, "the file is 0 bytes");
}

static void test_bad_missing_file(void **state) {
  (void)state;
  expect_bad(in_dir("absent.st"), EM_ERR_IO, "cannot open: No such file or directory");
  expect_bad(dir, EM_ERR_IO, "not a regular file");
  assert_int_equal(mkfifo(in_dir("fifo.st"), 0600), 0);
  expect_bad(in_dir("fifo.st"), EM_ERR_IO, "not a regular file"); /* and no wait for a writer */
}

static void test_bad_header_length_absurd(void **state) {
  (void)state;
  unsigned char buf[16] = {0x00, 0xe1, 0xf5, 0x05, 0x01, 0, 0, 0, '{', '}'}; /* 0x105f5e100 */
  write_bytes(in_dir("huge.st"), buf, sizeof buf);
  expect_bad(in_dir("huge.st"), EM_ERR_FORMAT, "header length 4394967296 is larger than the 100000000-byte limit");
  unsigned char max[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  write_bytes(in_dir("max.st"), max, sizeof max);
  expect_bad(in_dir("max.st"), EM_ERR_FORMAT, "is larger than the 100000000-byte limit");
}

static void test_bad_header_length_past_end(void **state) {
  (void)state;
  unsigned char buf[12] = {40, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' '};
  write_bytes(in_dir("past.st"), buf, sizeof buf);
  expect_bad(in_dir("past.st"), EM_ERR_FORMAT, "header length 40 runs past the end of the file (12 bytes)");
}

static void test_bad_json_syntax(void **state) {
  (void)state;
  expect_bad(make_file("syntax.st", "{\"t\":{\"dtype\":\"F32\",,\"shape\":[2,3],\"data_offsets\":[0,24]}}", 24),
             EM_ERR_FORMAT,
             "header is not valid JSON at byte 20 of the header (file offset 28): expected a string key, found ','");
  expect_bad(make_file("comma.st", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2,3,],\"data_offsets\":[0,24]}}", 24),
             EM_ERR_FORMAT, "not valid JSON at byte 33 of the header (file offset 41): expected a value, found ']'");
  expect_bad(make_file("unterminated.st", "{\"t\":{\"dtype\":\"F32", 0), EM_ERR_FORMAT,
             "at byte 14 of the header (file offset 22): unterminated string");
  expect_bad(make_file("cut.st", "{\"t\":{\"dtype\":\"F32\"", 0), EM_ERR_FORMAT,
             "expected ',' or '}', found the end of the header");
  expect_bad(make_file("trailing.st", "{} x", 0), EM_ERR_FORMAT,
             "at byte 3 of the header (file offset 11): expected the end of the header, found 'x'");
  expect_bad(make_file("zeros.st", T1(",\"x\":007"), 24), EM_ERR_FORMAT, "leading zeros");
  expect_bad(make_file("ctrl.st", "{\"a\tb\":{}}", 0), EM_ERR_FORMAT, "control character 0x09 in a string");
  expect_bad(make_file("escape.st", "{\"a\\qb\":{}}", 0), EM_ERR_FORMAT, "invalid escape, found 'q'");
  expect_bad(make_file("word.st", T1(",\"x\":nul"), 24), EM_ERR_FORMAT, "expected a value, found 'n'");
}

static void test_bad_header_start(void **state) {
  (void)state;
  expect_bad(make_file("array.st", "[]", 0), EM_ERR_FORMAT, "must be a JSON object starting with '{', found byte 0x5b");
  expect_bad(make_file("space.st", " {}", 0), EM_ERR_FORMAT, "found byte 0x20");
  expect_bad(make_file("nohdr.st", "", 0), EM_ERR_FORMAT, "the header is empty");
}

static void test_bad_utf8(void **state) {
  (void)state;
  expect_bad(make_file("utf8.st", "{\"caf\xe9\":{}}", 0), EM_ERR_FORMAT,
             "at byte 5 of the header (file offset 13): invalid UTF-8 in a string");
  expect_bad(make_file("overlong.st", "{\"\xc0\xaf\":{}}", 0), EM_ERR_FORMAT, "invalid UTF-8");
  expect_bad(make_file("surrogate.st", "{\"\xed\xa0\x80\":{}}", 0), EM_ERR_FORMAT, "invalid UTF-8");
  expect_bad(make_file("lone.st", "{\"\\ud800x\":{}}", 0), EM_ERR_FORMAT, "unpaired high surrogate");
  expect_bad(make_file("low.st", "{\"\\udc00\":{}}", 0), EM_ERR_FORMAT, "unpaired low surrogate");
  expect_bad(make_file("nul.st", "{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}", 1),
             EM_ERR_FORMAT, "contains a NUL character");
}

static void test_bad_nesting(void **state) {
  (void)state;
  char header[256];
  /* Deep arrays hidden in an unknown field, which the reader skips recursively. */
  snprintf(header, sizeof header, T1(",\"x\":%s"),
           "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]");
  expect_bad(make_file("deep.st", header, 24), EM_ERR_FORMAT, "nested deeper than 32 levels");
}

static void test_bad_missing_field(void **state) {
  (void)state;
  expect_bad(make_file("nodtype.st", "{\"t\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8), EM_ERR_FORMAT,
             "tensor 't': missing field 'dtype'");
  expect_bad(make_file("noshape.st", "{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8), EM_ERR_FORMAT,
             "tensor 't': missing field 'shape'");
  expect_bad(make_file("nooffs.st", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8), EM_ERR_FORMAT,
             "tensor 't': missing field 'data_offsets'");
  expect_bad(make_file("twice.st", T1(",\"shape\":[6]"), 24), EM_ERR_FORMAT, "tensor 't': field 'shape' appears twice");
}

static void test_bad_field_types(void **state) {
  (void)state;
  expect_bad(make_file("entry.st", "{\"t\":[1]}", 0), EM_ERR_FORMAT,
             "tensor 't': expected an object with dtype, shape and data_offsets, got an array");
  expect_bad(make_file("dtnum.st", "{\"t\":{\"dtype\":32,\"shape\":[2],\"data_offsets\":[0,8]}}", 8), EM_ERR_FORMAT,
             "tensor 't': 'dtype' must be a string such as \"F32\", got a number");
  expect_bad(make_file("shstr.st", "{\"t\":{\"dtype\":\"F32\",\"shape\":\"2\",\"data_offsets\":[0,8]}}", 8),
             EM_ERR_FORMAT, "tensor 't': 'shape' must be an array of integers, got a string");
  expect_bad(make_file("shfloat.st", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8),
             EM_ERR_FORMAT, "tensor 't': shape[0]: expected an integer, got 2.5");
  expect_bad(make_file("shnull.st", "{\"t\":{\"dtype\":\"F32\",\"shape\":[null],\"data_offsets\":[0,8]}}", 8),
             EM_ERR_FORMAT, "tensor 't': shape[0]: expected a non-negative integer, got null");
  expect_bad(make_file("offobj.st", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":{}}}", 8), EM_ERR_FORMAT,
             "'data_offsets' must be an array [begin, end], got an object");
  expect_bad(make_file("off3.st", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}", 8),
             EM_ERR_FORMAT, "'data_offsets' has more than 2 values");
  expect_bad(make_file("off1.st", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8), EM_ERR_FORMAT,
             "'data_offsets' has 1 values, expected 2");
  expect_bad(make_file("offneg.st", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8),
             EM_ERR_FORMAT, "data_offsets[0]: expected a non-negative integer, got -8");
  expect_bad(
      make_file("offbig.st", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,99999999999999999999]}}", 8),
      EM_ERR_FORMAT, "data_offsets[1]: integer 99999999999999999999 is out of the 64-bit range");
  expect_bad(make_file("metastr.st", "{\"__metadata__\":\"x\"}", 0), EM_ERR_FORMAT,
             "'__metadata__' must be an object of strings, got a string");
  expect_bad(make_file("metaval.st", "{\"__metadata__\":{\"epoch\":3}}", 0), EM_ERR_FORMAT,
             "'__metadata__' value for key 'epoch' must be a string, got a number");
  expect_bad(make_file("meta2x.st", "{\"__metadata__\":{},\"__metadata__\":{}}", 0), EM_ERR_FORMAT,
             "'__metadata__' appears twice");
  expect_bad(make_file("metadup.st", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0), EM_ERR_FORMAT,
             "'__metadata__' key 'k' appears twice");
}

static void test_bad_dtype(void **state) {
  (void)state;
  expect_bad(make_file("f128.st", "{\"t\":{\"dtype\":\"F128\",\"shape\":[1],\"data_offsets\":[0,16]}}", 16),
             EM_ERR_FORMAT, "tensor 't': unknown dtype 'F128' (expected F64, F32");
  expect_bad(make_file("i16.st", "{\"t\":{\"dtype\":\"I16\",\"shape\":[1],\"data_offsets\":[0,2]}}", 2),
             EM_ERR_UNSUPPORTED, "tensor 't': dtype I16 has no ember counterpart");
}

static void test_bad_shape_dims(void **state) {
  (void)state;
  expect_bad(make_file("negdim.st", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2,-3],\"data_offsets\":[0,24]}}", 24),
             EM_ERR_FORMAT, "tensor 't': shape[1]: expected a non-negative integer, got -3");
  expect_bad(make_file("overflow.st",
                       "{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}", 0),
             EM_ERR_FORMAT, "tensor 't': shape [4294967296, 4294967296] has more elements than fit in 64 bits");
  expect_bad(
      make_file("bytesovf.st", "{\"t\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}}", 0),
      EM_ERR_FORMAT, "is more bytes than fit in 64 bits");
  expect_bad(
      make_file("ninedims.st", "{\"t\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1),
      EM_ERR_UNSUPPORTED, "tensor 't': shape has more than 8 dims");
}

static void test_bad_offsets_size(void **state) {
  (void)state;
  expect_bad(make_file("size.st", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 20),
             EM_ERR_FORMAT,
             "tensor 't': data_offsets [0, 20] hold 20 bytes, but dtype float32 and shape [2, 3] need 24");
  expect_bad(make_file("backwards.st", "{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8),
             EM_ERR_FORMAT, "data_offsets [8, 0] end before they begin");
}

static void test_bad_offsets_out_of_range(void **state) {
  (void)state;
  expect_bad(
      make_file("range.st",
                "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4000000000000000000,4000000000000000008]}}",
                8),
      EM_ERR_FORMAT,
      "tensor 't': data_offsets [4000000000000000000, 4000000000000000008] run past the end of the data section (8 "
      "bytes");
}

static void test_bad_truncated(void **state) {
  (void)state;
  em_tensor *a = arange_f32(4, 4);
  const char *names[] = {"a"};
  const char *path = in_dir("trunc.st");
  assert_ok(em_safetensors_save(path, 1, names, &a, 0, NULL, NULL));
  size_t n;
  unsigned char *bytes = read_bytes(path, &n);
  write_bytes(path, bytes, n - 10);
  expect_bad(path, EM_ERR_FORMAT, "run past the end of the data section (54 bytes, file");
  assert_non_null(strstr(em_last_error(), "the file is truncated"));
  free(bytes);
  em_tensor_release(a);
}

static void test_bad_overlap(void **state) {
  (void)state;
  expect_bad(make_file("overlap.st",
                       "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                       "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}",
                       6),
             EM_ERR_FORMAT, "tensor 'b' (data_offsets [2, 6]) overlaps tensor 'a' (data_offsets [0, 4])");
  expect_bad(make_file("same.st",
                       "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                       "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
                       4),
             EM_ERR_FORMAT, "overlaps tensor");
  /* An empty tensor inside another one is an overlap too, as the reference rules. */
  expect_bad(make_file("inside.st",
                       "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                       "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,2]}}",
                       4),
             EM_ERR_FORMAT, "tensor 'e' (data_offsets [2, 2]) overlaps tensor 'a'");
}

static void test_bad_gap(void **state) {
  (void)state;
  expect_bad(make_file("gap.st",
                       "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                       "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[6,10]}}",
                       10),
             EM_ERR_FORMAT, "data section bytes [4, 6) before tensor 'b' belong to no tensor");
  expect_bad(make_file("start.st", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", 6), EM_ERR_FORMAT,
             "data section bytes [0, 2) before tensor 'a' belong to no tensor");
}

static void test_bad_trailing_bytes(void **state) {
  (void)state;
  expect_bad(make_file("tail.st", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 7), EM_ERR_FORMAT,
             "the data section is 7 bytes but the tensors cover only 4: 3 bytes at the end belong to no tensor");
}

static void test_bad_duplicate_name(void **state) {
  (void)state;
  expect_bad(make_file("dupname.st",
                       "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                       "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}",
                       8),
             EM_ERR_FORMAT, "tensor 'a' appears twice in the header");
}

/* Random corruption of a valid file never crashes or reads out of bounds (the sanitizer
 * build runs this): each variant opens cleanly or fails with a message. */
static void test_corruption_never_crashes(void **state) {
  (void)state;
  int64_t sizes[2] = {3, 5};
  em_tensor *ts[3] = {pattern(2, sizes, EM_FLOAT64, 1), pattern(2, sizes, EM_BFLOAT16, 2),
                      pattern(0, NULL, EM_BOOL, 3)};
  const char *names[3] = {"w", "b", "flag"}, *keys[] = {"k"}, *values[] = {"v\xc3\xa9"};
  const char *path = in_dir("fuzz.st"), *bad = in_dir("fuzzed.st");
  assert_ok(em_safetensors_save(path, 3, names, ts, 1, keys, values));
  size_t n;
  unsigned char *bytes = read_bytes(path, &n);
  unsigned char *copy = malloc(n);
  uint32_t rng = 12345;
  int opened = 0;
  for (int iter = 0; iter < 600; iter++) {
    memcpy(copy, bytes, n);
    size_t len = n;
    int flips = 1 + iter % 3;
    for (int k = 0; k < flips; k++) {
      rng = rng * 1664525u + 1013904223u;
      size_t pos = (rng >> 8) % (iter % 2 ? 8 + 200 : n); /* favour the header */
      rng = rng * 1664525u + 1013904223u;
      if (pos < n) copy[pos] = (unsigned char)(rng >> 24);
    }
    if (iter % 7 == 0) len = (rng >> 4) % n; /* truncations */
    write_bytes(bad, copy, len);
    em_safetensors *f = NULL;
    if (em_safetensors_open(&f, bad) == EM_OK) {
      opened++;
      for (int i = 0; i < em_safetensors_count(f); i++) {
        em_tensor *t = NULL;
        assert_ok(em_safetensors_get(f, i, &t));
        em_tensor_release(t);
      }
      em_safetensors_close(f);
    } else {
      assert_non_null(strstr(em_last_error(), bad));
      assert_null(f);
    }
  }
  assert_true(opened > 0);
  free(copy);
  free(bytes);
  for (int i = 0; i < 3; i++) em_tensor_release(ts[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matches_reference_bytes),
      cmocka_unit_test(test_layout_order),
      cmocka_unit_test(test_roundtrip_every_dtype),
      cmocka_unit_test(test_roundtrip_noncontiguous),
      cmocka_unit_test(test_metadata_and_escapes),
      cmocka_unit_test(test_tensors_outlive_handle_and_stay_private),
      cmocka_unit_test(test_get_into_existing_tensor),
      cmocka_unit_test(test_reads_foreign_layouts),
      cmocka_unit_test(test_save_errors_leave_existing_file),
      cmocka_unit_test(test_save_into_missing_folder),
      cmocka_unit_test(test_save_replaces_atomically),
      cmocka_unit_test(test_bad_short_file),
      cmocka_unit_test(test_bad_missing_file),
      cmocka_unit_test(test_bad_header_length_absurd),
      cmocka_unit_test(test_bad_header_length_past_end),
      cmocka_unit_test(test_bad_json_syntax),
      cmocka_unit_test(test_bad_header_start),
      cmocka_unit_test(test_bad_utf8),
      cmocka_unit_test(test_bad_nesting),
      cmocka_unit_test(test_bad_missing_field),
      cmocka_unit_test(test_bad_field_types),
      cmocka_unit_test(test_bad_dtype),
      cmocka_unit_test(test_bad_shape_dims),
      cmocka_unit_test(test_bad_offsets_size),
      cmocka_unit_test(test_bad_offsets_out_of_range),
      cmocka_unit_test(test_bad_truncated),
      cmocka_unit_test(test_bad_overlap),
      cmocka_unit_test(test_bad_gap),
      cmocka_unit_test(test_bad_trailing_bytes),
      cmocka_unit_test(test_bad_duplicate_name),
      cmocka_unit_test(test_corruption_never_crashes),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
