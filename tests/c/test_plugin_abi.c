/* test_plugin_abi.c - the layout handshake between libember and its plugins
 * (runtime/core/plugin_abi.h): the comparison itself (an older handshake, a value that
 * differs, an item only one side knows, a report longer than its buffer), and both loaders
 * refusing a plugin built against another ember (tests/c/plugin_abi_fake.c) with an error
 * that names what differs, without reading the rest of its table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "core/plugin_abi.h"
#include "ember/cuda.h"
#include "ember/dist.h"

#define ABI(items) ((em_plugin_abi)EM_PLUGIN_ABI_OF(items))

static const em_plugin_abi_item ours[] = {{"EM_MAX_DIMS", 8}, {"sizeof(em_tensor)", 208}, {"EM_API", 2}};

static void test_same_layout(void **state) {
  (void)state;
  const em_plugin_abi_item reordered[] = {{"EM_API", 2}, {"EM_MAX_DIMS", 8}, {"sizeof(em_tensor)", 208}};
  em_plugin_abi a = ABI(ours), b = ABI(reordered);
  char why[256] = "";
  assert_int_equal(core_plugin_abi_check("/x/libp.so", &b, &a, why, sizeof why), 0);
}

static void test_older_handshake(void **state) {
  (void)state;
  em_plugin_abi a = ABI(ours), old = {1, 0, NULL}; /* where ABI-1 plugins kept "int abi = 1" */
  char why[256];
  assert_int_equal(core_plugin_abi_check("/x/libp.so", &old, &a, why, sizeof why), -1);
  assert_non_null(strstr(why, "/x/libp.so was built for another version of ember"));
  assert_non_null(strstr(why, "handshake is version 1, this libember's 2"));
  assert_int_equal(core_plugin_abi_check("/x/libp.so", NULL, &a, why, sizeof why), -1);
}

static void test_differences_named(void **state) {
  (void)state;
  const em_plugin_abi_item theirs[] = {{"EM_MAX_DIMS", 16}, {"sizeof(em_tensor)", 208}, {"sizeof(em_new)", 4}};
  em_plugin_abi a = ABI(ours), b = ABI(theirs);
  char why[512];
  assert_int_equal(core_plugin_abi_check("/x/libp.so", &b, &a, why, sizeof why), -1);
  assert_non_null(strstr(why, "/x/libp.so was built against a different ember ("));
  assert_non_null(strstr(why, "EM_MAX_DIMS is 16 there, 8 in this libember"));
  assert_null(strstr(why, "sizeof(em_tensor)"));
  assert_non_null(strstr(why, "it does not say what EM_API is (2 in this libember)"));
  assert_non_null(strstr(why, "it depends on sizeof(em_new) (4 there), which this libember does not know"));
  assert_non_null(strstr(why, "); rebuild it together with this libember"));
}

static void test_long_report_truncated(void **state) {
  (void)state;
  const em_plugin_abi_item theirs[] = {{"EM_MAX_DIMS", 16}, {"sizeof(em_tensor)", 1}, {"EM_API", 3}};
  em_plugin_abi a = ABI(ours), b = ABI(theirs);
  char why[48];
  memset(why, 'x', sizeof why);
  assert_int_equal(core_plugin_abi_check("/a/rather/long/path/to/libp.so", &b, &a, why, sizeof why), -1);
  assert_non_null(memchr(why, 0, sizeof why));
}

/* The fake plugin says EM_MAX_DIMS is 16 and em_tensor 128 bytes larger: CUDA is then
 * unavailable, with the reason, and nothing of its (empty) table is called. */
static void test_cuda_plugin_refused(void **state) {
  (void)state;
  assert_int_equal(em_cuda_is_built(), 0);
  assert_int_equal(em_cuda_device_count(), 0);
  const char *why = em_cuda_unavailable_reason();
  assert_non_null(strstr(why, "was built against a different ember"));
  assert_non_null(strstr(why, "EM_MAX_DIMS is 16 there, 8 in this libember"));
  assert_non_null(strstr(why, "sizeof(em_tensor) is "));
  em_cuda_versions v;
  assert_int_equal(em_cuda_get_versions(&v), EM_ERR_UNSUPPORTED);
  assert_non_null(strstr(em_last_error(), "EM_MAX_DIMS is 16 there"));
}

static void test_mpi_plugin_refused(void **state) {
  (void)state;
  assert_int_equal(em_dist_init("mpi", 10), EM_ERR_UNSUPPORTED);
  const char *why = em_last_error();
  assert_non_null(strstr(why, "dist.init: the MPI backend is not available: "));
  assert_non_null(strstr(why, "EM_DIST_BACKEND_API_VERSION is 2 there, 3 in this libember"));
  assert_null(strstr(why, "EM_MAX_DIMS"));
}

int main(void) {
  const struct CMUnitTest checks[] = {
      cmocka_unit_test(test_same_layout),
      cmocka_unit_test(test_older_handshake),
      cmocka_unit_test(test_differences_named),
      cmocka_unit_test(test_long_report_truncated),
  };
  int failed = cmocka_run_group_tests_name("handshake", checks, NULL, NULL);
#ifdef EMBER_FAKE_PLUGIN
  /* before anything asks about CUDA: the loader reads the variable once */
  setenv("EMBER_CUDA_PLUGIN", EMBER_FAKE_PLUGIN, 1);
  setenv("EMBER_MPI_PLUGIN", EMBER_FAKE_PLUGIN, 1);
  const struct CMUnitTest loaders[] = {
      cmocka_unit_test(test_cuda_plugin_refused),
      cmocka_unit_test(test_mpi_plugin_refused),
  };
  failed += cmocka_run_group_tests_name("loaders", loaders, NULL, NULL);
#endif
  return failed;
}
