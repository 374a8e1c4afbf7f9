/* test_cuda_elementwise_plan.c - the host-side choices of the CUDA elementwise kernels
 * (runtime/plugins/cuda/elementwise_plan.h), testable without a GPU: when the vector path
 * applies and how wide it is, and when 32-bit index arithmetic is safe. Also pins the
 * arithmetic the GPU's arange uses (one fma per element) against the CPU backend. */
#include <math.h>
#include <stdint.h>
#include "test_util.h"
#include "plugins/cuda/elementwise_plan.h"
#include "ember/tensor.h"

static em_ew_operand op(uintptr_t addr, int elsize, int64_t stride) {
  em_ew_operand o = {addr, elsize, stride, 0};
  return o;
}

static void test_vector_elems(void **state) {
  (void)state;
  assert_int_equal(em_ew_vector_elems(4), 4); /* float4 */
  assert_int_equal(em_ew_vector_elems(2), 8); /* 8 halves */
  assert_int_equal(em_ew_vector_elems(8), 2); /* double2 */
  assert_int_equal(em_ew_vector_elems(1), 16); /* bytes */
  assert_int_equal(em_ew_vector_elems(16), 1);
  assert_int_equal(em_ew_vector_elems(0), 1);
  assert_int_equal(em_ew_vector_elems(32), 1);
}

static void test_vector_when_aligned_and_contiguous(void **state) {
  (void)state;
  const uintptr_t base = 0x7f0000001000u;
  /* out = a + b, float32, all 16-byte aligned */
  em_ew_operand ops[3] = {op(base, 4, 1), op(base + 4096, 4, 1), op(base + 8192, 4, 1)};
  assert_true(em_ew_use_vector(3, ops, 1, 4));
  /* one dim left is required */
  assert_false(em_ew_use_vector(3, ops, 2, 4));
  /* an input starting one element in (a view a[1:]) is not 16-byte aligned */
  ops[1].addr = base + 4096 + 4;
  assert_false(em_ew_use_vector(3, ops, 1, 4));
  assert_true(em_ew_use_vector(3, ops, 1, 1)); /* but scalar steps would do */
  /* a broadcast input is read once: its alignment does not matter */
  ops[1].stride = 0;
  assert_true(em_ew_use_vector(3, ops, 1, 4));
  /* an immediate has no address at all */
  ops[1] = op(0, 4, 99);
  ops[1].immediate = 1;
  assert_true(em_ew_use_vector(3, ops, 1, 4));
  /* a strided input forces the strided path */
  ops[2].stride = 2;
  assert_false(em_ew_use_vector(3, ops, 1, 4));
  /* the output is never read as a broadcast: stride 0 there is not vectorisable */
  em_ew_operand bad_out[2] = {op(base, 4, 0), op(base, 4, 1)};
  assert_false(em_ew_use_vector(2, bad_out, 1, 4));
  /* an immediate flag on the output is ignored: it must still be contiguous and aligned */
  bad_out[0].stride = 1;
  bad_out[0].immediate = 1;
  bad_out[0].addr = base + 2;
  assert_false(em_ew_use_vector(2, bad_out, 1, 4));
}

static void test_vector_mixed_sizes(void **state) {
  (void)state;
  const uintptr_t base = 0x10000u;
  /* comparisons: bool out, float64 inputs: 2 elements per step, the bool output needs
   * 2-byte alignment, the inputs 16 */
  const int vec = em_ew_vector_elems(8);
  em_ew_operand ops[3] = {op(base + 2, 1, 1), op(base, 8, 1), op(base + 16, 8, 1)};
  assert_true(em_ew_use_vector(3, ops, 1, vec));
  ops[0].addr = base + 1;
  assert_false(em_ew_use_vector(3, ops, 1, vec));
  /* where: uint8 condition with float32 values, 4 per step: the condition needs 4 bytes */
  em_ew_operand w[4] = {op(base, 4, 1), op(base + 4, 1, 1), op(base + 32, 4, 1), op(base + 64, 4, 1)};
  assert_true(em_ew_use_vector(4, w, 1, em_ew_vector_elems(4)));
  w[1].addr = base + 6;
  assert_false(em_ew_use_vector(4, w, 1, em_ew_vector_elems(4)));
}

static void test_index_width(void **state) {
  (void)state;
  assert_true(em_ew_index_fits_32(0));
  assert_true(em_ew_index_fits_32(10000000));
  assert_true(em_ew_index_fits_32((int64_t)UINT32_MAX));
  assert_false(em_ew_index_fits_32((int64_t)UINT32_MAX + 1));
  assert_false(em_ew_index_fits_32(-1));
}

/* cuda/gpu/elementwise.cu computes arange's element i as fma(i, step, start); the CPU's
 * loop start + i * step must round the same way (gcc contracts it into that fma on FMA
 * hardware; a build without FMA would round twice and this test would say so). */
static void test_arange_is_one_fma(void **state) {
  (void)state;
  static const double cases[][2] = {{0.1, 0.3}, {-7.25, 1e-3}, {1e10, 0.7}, {0, 1}};
  const em_device cpu = {EM_CPU, 0};
  for (size_t k = 0; k < 4; k++) {
    em_tensor *t = NULL;
    const double start = cases[k][0], step = cases[k][1];
    assert_int_equal(em_arange(&t, start, start + 1000.5 * step, step, EM_FLOAT64, cpu), EM_OK);
    const double *v = em_tensor_data(t);
    for (int64_t i = 0; i < em_tensor_numel(t); i++)
      if (v[i] != fma((double)i, step, start))
        fail_msg("arange(%g, step %g)[%lld] = %a, fma gives %a", start, step, (long long)i, v[i],
                 fma((double)i, step, start));
    em_tensor_release(t);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vector_elems),       cmocka_unit_test(test_vector_when_aligned_and_contiguous),
      cmocka_unit_test(test_vector_mixed_sizes), cmocka_unit_test(test_index_width),
      cmocka_unit_test(test_arange_is_one_fma),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
