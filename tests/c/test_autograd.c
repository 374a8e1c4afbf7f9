/* test_autograd.c - the tape engine and a float64 finite-difference check of every
 * differentiable op in runtime/autograd. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "test_util.h"
#include "ember/autograd.h"

#include "gradcheck.h"

/* ---- the ops under test ---- */
#define BIN(opname, OP) \
  static em_status f_##opname(em_tensor **o, em_tensor **in) { return em_ag_binary(OP, o, in[0], in[1]); }
BIN(add, EM_ADD)
BIN(sub, EM_SUB)
BIN(mul, EM_MUL)
BIN(div, EM_DIV)
BIN(maximum, EM_MAXIMUM)
BIN(minimum, EM_MINIMUM)
static em_status f_pow(em_tensor **o, em_tensor **in) {
  em_tensor *pa = NULL;
  em_status st = em_ag_unary(EM_ABS, &pa, in[0]); /* positive base */
  if (!st) st = em_ag_binary(EM_POW, o, pa, in[1]);
  em_tensor_release(pa);
  return st;
}
#define UN(opname, OP) \
  static em_status f_##opname(em_tensor **o, em_tensor **in) { return em_ag_unary(OP, o, in[0]); }
UN(neg, EM_NEG)
UN(absv, EM_ABS)
UN(expv, EM_EXP)
UN(sinv, EM_SIN)
UN(cosv, EM_COS)
UN(tanhv, EM_TANH)
UN(sigmoid, EM_SIGMOID)
UN(relu, EM_RELU)
UN(square, EM_SQUARE)
UN(erfv, EM_ERF)
UN(gelu, EM_GELU)
UN(silu, EM_SILU)
UN(expm1v, EM_EXPM1)
#define UNPOS(opname, OP)                                             \
  static em_status f_##opname(em_tensor **o, em_tensor **in) {        \
    em_tensor *p = NULL;                                              \
    em_status st = em_ag_binary_scalar(EM_ADD, &p, in[0], 0.0, 0);    \
    em_tensor *q = NULL;                                              \
    if (!st) st = em_ag_unary(EM_SQUARE, &q, p);                      \
    em_tensor *r = NULL;                                              \
    if (!st) st = em_ag_binary_scalar(EM_ADD, &r, q, 0.5, 0);         \
    if (!st) st = em_ag_unary(OP, o, r);                              \
    em_tensor_release(p), em_tensor_release(q), em_tensor_release(r); \
    return st;                                                        \
  }
UNPOS(logv, EM_LOG)
UNPOS(sqrtv, EM_SQRT)
UNPOS(rsqrtv, EM_RSQRT)
UNPOS(recip, EM_RECIPROCAL)
UNPOS(log1pv, EM_LOG1P)
static em_status f_scalar_ops(em_tensor **o, em_tensor **in) {
  em_tensor *a = NULL, *b = NULL, *c = NULL, *d = NULL;
  em_status st = em_ag_binary_scalar(EM_SUB, &a, in[0], 3.0, 1); /* 3 - x */
  if (!st) st = em_ag_binary_scalar(EM_MUL, &b, a, 1.5, 0); /* * 1.5 */
  if (!st) st = em_ag_binary_scalar(EM_DIV, &c, b, 2.0, 1); /* 2 / . */
  if (!st) st = em_ag_binary_scalar(EM_POW, &d, c, 2.0, 0); /* ^ 2 */
  if (!st) st = em_ag_binary_scalar(EM_MAXIMUM, o, d, 0.3, 0);
  em_tensor_release(a), em_tensor_release(b), em_tensor_release(c), em_tensor_release(d);
  return st;
}
static em_status f_where_clamp(em_tensor **o, em_tensor **in) {
  em_tensor *cond = NULL, *w = NULL;
  em_status st = em_binary_scalar(EM_GT, &cond, in[0], 0.0, 0);
  if (!st) st = em_ag_where(&w, cond, in[0], in[1]);
  if (!st) st = em_ag_clamp(o, w, -0.5, 0.7);
  em_tensor_release(cond), em_tensor_release(w);
  return st;
}
static em_status f_sum_dim(em_tensor **o, em_tensor **in) {
  int d = 1;
  return em_ag_reduce(EM_SUM, o, NULL, in[0], &d, 1, 0, 0);
}
static em_status f_mean_keep(em_tensor **o, em_tensor **in) {
  int d[2] = {0, 2};
  return em_ag_reduce(EM_MEAN, o, NULL, in[0], d, 2, 1, 0);
}
static em_status f_max_dim(em_tensor **o, em_tensor **in) {
  int d = -1;
  return em_ag_reduce(EM_MAX, o, NULL, in[0], &d, 1, 0, 0);
}
static em_status f_min_all(em_tensor **o, em_tensor **in) {
  return em_ag_reduce(EM_MIN, o, NULL, in[0], NULL, 0, 0, 0);
}
static em_status f_prod(em_tensor **o, em_tensor **in) {
  int d = 0;
  return em_ag_reduce(EM_PROD, o, NULL, in[0], &d, 1, 0, 0);
}
static em_status f_logsumexp(em_tensor **o, em_tensor **in) {
  int d = 1;
  return em_ag_reduce(EM_LOGSUMEXP, o, NULL, in[0], &d, 1, 0, 0);
}
static em_status f_norm2(em_tensor **o, em_tensor **in) {
  int d = 1;
  return em_ag_norm(o, in[0], 2, &d, 1, 0);
}
static em_status f_norm3(em_tensor **o, em_tensor **in) { return em_ag_norm(o, in[0], 3, NULL, 0, 0); }
static em_status f_var(em_tensor **o, em_tensor **in) {
  int d = 1;
  return em_ag_var(o, in[0], &d, 1, 1, 0, 0);
}
static em_status f_std(em_tensor **o, em_tensor **in) { return em_ag_var(o, in[0], NULL, 0, 1, 0, 1); }
static em_status f_cumsum(em_tensor **o, em_tensor **in) { return em_ag_cumsum(o, in[0], 1); }
static em_status f_softmax(em_tensor **o, em_tensor **in) { return em_ag_softmax(o, in[0], -1, 0); }
static em_status f_log_softmax(em_tensor **o, em_tensor **in) { return em_ag_softmax(o, in[0], 0, 1); }
static em_status f_matmul(em_tensor **o, em_tensor **in) { return em_ag_matmul(o, in[0], in[1]); }
static em_status f_addmm(em_tensor **o, em_tensor **in) { return em_ag_addmm(o, in[2], in[0], in[1], 0.5, 2.0); }
static em_status f_views(em_tensor **o, em_tensor **in) {
  em_tensor *t = NULL, *p = NULL, *v = NULL, *n = NULL, *s = NULL, *u = NULL, *e = NULL;
  em_status st = em_ag_transpose(&t, in[0], 0, 1); /* [3, 2, 4] -> [2, 3, 4] */
  int perm[3] = {2, 0, 1};
  if (!st) st = em_ag_permute(&p, t, 3, perm); /* [4, 2, 3] */
  if (!st) st = em_ag_reshape(&v, p, 2, (int64_t[]){8, 3});
  if (!st) st = em_ag_narrow(&n, v, 0, 2, 5); /* [5, 3] */
  if (!st) st = em_ag_select(&s, n, 1, -1); /* [5] */
  if (!st) st = em_ag_unsqueeze(&u, s, 0); /* [1, 5] */
  if (!st) st = em_ag_expand(&e, u, 2, (int64_t[]){3, 5});
  if (!st) st = em_ag_contiguous(o, e);
  em_tensor *all[] = {t, p, v, n, s, u, e};
  for (int i = 0; i < 7; i++) em_tensor_release(all[i]);
  return st;
}
static em_status f_cat_stack(em_tensor **o, em_tensor **in) {
  em_tensor *c = NULL, *parts[2] = {in[0], in[1]};
  em_status st = em_ag_cat(&c, parts, 2, 0);
  em_tensor *pair[2] = {c, c};
  if (!st) st = em_ag_stack(o, pair, 2, 1);
  em_tensor_release(c);
  return st;
}
/* An int64 tensor that owns a copy of values (backward outlives this stack frame). */
static em_tensor *int64_tensor(int ndim, const int64_t *sizes, const int64_t *values) {
  em_tensor *view = NULL, *owned = NULL;
  assert_int_equal(em_from_blob(&view, (void *)values, ndim, sizes, NULL, EM_INT64, CPU, NULL, NULL), EM_OK);
  assert_int_equal(em_clone(&owned, view), EM_OK);
  em_tensor_release(view);
  return owned;
}

static em_status f_index(em_tensor **o, em_tensor **in) {
  em_tensor *sel = NULL, *mask = NULL, *g = NULL;
  static const int64_t ids[4] = {2, 0, 2, 1}, gi[8] = {0, 3, 1, 1, 2, 0, 3, 3};
  em_tensor *idx = int64_tensor(1, (int64_t[]){4}, ids);
  em_tensor *gidx = int64_tensor(2, (int64_t[]){4, 2}, gi);
  em_status st = em_ag_index_select(&sel, in[0], 0, idx, 0); /* [4, 4] */
  if (!st) st = em_ag_gather(&g, sel, 1, gidx, 0); /* [4, 2] */
  if (!st) st = em_binary_scalar(EM_GT, &mask, g, 0.5, 0);
  if (!st) st = em_ag_masked_fill(o, g, mask, 0.25);
  em_tensor *all[] = {idx, sel, gidx, mask, g};
  for (int i = 0; i < 5; i++) em_tensor_release(all[i]);
  return st;
}

typedef struct {
  const char *name;
  op_fn f;
  int n_in;
  int ndims[3];
  int64_t shapes[3][3];
} op_case;

static void test_gradcheck_all(void **state) {
  (void)state;
  em_manual_seed(7);
  const op_case cases[] = {
      {"add (broadcast)", f_add, 2, {2, 1}, {{3, 4}, {4}}},
      {"sub (broadcast)", f_sub, 2, {2, 2}, {{3, 1}, {1, 4}}},
      {"mul", f_mul, 2, {2, 2}, {{3, 4}, {3, 4}}},
      {"div", f_div, 2, {2, 0}, {{2, 3}}},
      {"maximum", f_maximum, 2, {2, 2}, {{2, 3}, {2, 3}}},
      {"minimum", f_minimum, 2, {1, 1}, {{5}, {5}}},
      {"pow", f_pow, 2, {1, 1}, {{4}, {4}}},
      {"neg", f_neg, 1, {2}, {{2, 3}}},
      {"abs", f_absv, 1, {1}, {{6}}},
      {"exp", f_expv, 1, {1}, {{6}}},
      {"sin", f_sinv, 1, {1}, {{6}}},
      {"cos", f_cosv, 1, {1}, {{6}}},
      {"tanh", f_tanhv, 1, {1}, {{6}}},
      {"sigmoid", f_sigmoid, 1, {1}, {{6}}},
      {"relu", f_relu, 1, {1}, {{6}}},
      {"square", f_square, 1, {1}, {{6}}},
      {"erf", f_erfv, 1, {1}, {{6}}},
      {"gelu", f_gelu, 1, {1}, {{6}}},
      {"silu", f_silu, 1, {1}, {{6}}},
      {"expm1", f_expm1v, 1, {1}, {{6}}},
      {"log", f_logv, 1, {1}, {{6}}},
      {"sqrt", f_sqrtv, 1, {1}, {{6}}},
      {"rsqrt", f_rsqrtv, 1, {1}, {{6}}},
      {"reciprocal", f_recip, 1, {1}, {{6}}},
      {"log1p", f_log1pv, 1, {1}, {{6}}},
      {"scalar ops", f_scalar_ops, 1, {1}, {{6}}},
      {"where+clamp", f_where_clamp, 2, {2, 1}, {{3, 4}, {4}}},
      {"sum(dim)", f_sum_dim, 1, {3}, {{2, 3, 4}}},
      {"mean(dims, keepdim)", f_mean_keep, 1, {3}, {{2, 3, 4}}},
      {"max(dim)", f_max_dim, 1, {2}, {{3, 4}}},
      {"min()", f_min_all, 1, {2}, {{3, 4}}},
      {"prod(dim)", f_prod, 1, {2}, {{3, 4}}},
      {"logsumexp", f_logsumexp, 1, {2}, {{3, 4}}},
      {"norm2", f_norm2, 1, {2}, {{3, 4}}},
      {"norm3", f_norm3, 1, {2}, {{3, 4}}},
      {"var", f_var, 1, {2}, {{3, 4}}},
      {"std", f_std, 1, {2}, {{3, 4}}},
      {"cumsum", f_cumsum, 1, {2}, {{3, 4}}},
      {"softmax", f_softmax, 1, {2}, {{3, 4}}},
      {"log_softmax", f_log_softmax, 1, {2}, {{3, 4}}},
      {"matmul 2d", f_matmul, 2, {2, 2}, {{3, 4}, {4, 2}}},
      {"matmul batched broadcast", f_matmul, 2, {3, 2}, {{2, 3, 4}, {4, 2}}},
      {"matmul vec-mat", f_matmul, 2, {1, 2}, {{4}, {4, 3}}},
      {"matmul mat-vec", f_matmul, 2, {3, 1}, {{2, 3, 4}, {4}}},
      {"matmul dot", f_matmul, 2, {1, 1}, {{4}, {4}}},
      {"addmm", f_addmm, 3, {2, 2, 1}, {{3, 4}, {4, 2}, {2}}},
      {"views", f_views, 1, {3}, {{3, 2, 4}}},
      {"cat+stack", f_cat_stack, 2, {2, 2}, {{2, 3}, {1, 3}}},
      {"index_select+gather+masked_fill", f_index, 1, {2}, {{3, 4}}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    em_tensor *in[3] = {NULL, NULL, NULL};
    for (int k = 0; k < cases[c].n_in; k++) {
      int nd = cases[c].ndims[k];
      const int64_t *shape = cases[c].shapes[k];
      if (nd == 0) { /* same as input 0 */
        nd = cases[c].ndims[0];
        shape = cases[c].shapes[0];
      }
      in[k] = randn64(nd, shape, 1);
    }
    gradcheck(cases[c].name, cases[c].f, cases[c].n_in, in);
    for (int k = 0; k < cases[c].n_in; k++) em_tensor_release(in[k]);
  }
}

/* ---- the engine ---- */

static int hook_calls[4];
static void count_hook(em_tensor *leaf, void *ctx) {
  (void)leaf;
  hook_calls[(int)(intptr_t)ctx]++;
}

static void test_accumulation_and_hooks(void **state) {
  (void)state;
  int64_t n = 3;
  em_tensor *x = randn64(1, &n, 1), *y = NULL, *z = NULL, *s = NULL;
  int64_t id = em_add_leaf_hook(x, count_hook, (void *)(intptr_t)1);
  assert_true(id > 0);
  /* x used three times: the hook must fire once, after all contributions. */
  assert_int_equal(em_ag_binary(EM_MUL, &y, x, x), EM_OK);
  assert_int_equal(em_ag_binary(EM_ADD, &z, y, x), EM_OK);
  assert_int_equal(em_ag_reduce(EM_SUM, &s, NULL, z, NULL, 0, 0, 0), EM_OK);
  assert_string_equal(em_grad_fn_name(s), "SumBackward");
  assert_int_equal(em_backward(s, NULL, 1), EM_OK);
  assert_int_equal(hook_calls[1], 1);
  em_tensor *g = em_grad(x);
  for (int i = 0; i < 3; i++) {
    double xi = ((double *)em_tensor_data(x))[i];
    assert_float_equal(((double *)em_tensor_data(g))[i], 2 * xi + 1, 1e-12);
  }
  /* a second backward (retained graph) accumulates into the same .grad, in place */
  const void *storage = em_tensor_storage_id(g);
  assert_int_equal(em_backward(s, NULL, 0), EM_OK);
  em_tensor *g2 = em_grad(x);
  assert_ptr_equal(em_tensor_storage_id(g2), storage);
  double x0 = ((double *)em_tensor_data(x))[0];
  assert_float_equal(((double *)em_tensor_data(g2))[0], 2 * (2 * x0 + 1), 1e-12);
  assert_int_equal(hook_calls[1], 2);
  /* the graph was freed: a third backward is a clear error */
  assert_int_equal(em_backward(s, NULL, 0), EM_ERR_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "second time"));
  assert_int_equal(em_remove_leaf_hook(x, id), EM_OK);
  assert_int_equal(em_remove_leaf_hook(x, id), EM_ERR_ARGUMENT);
  em_tensor *all[] = {x, y, z, s, g, g2};
  for (int i = 0; i < 6; i++) em_tensor_release(all[i]);
}

static int hook_order[4], hook_pos;
static void order_hook(em_tensor *leaf, void *ctx) {
  (void)leaf;
  hook_order[hook_pos++] = (int)(intptr_t)ctx;
}

static void test_hook_order_is_reverse_of_use(void **state) {
  (void)state;
  /* Parameters used first in forward get their gradients last (DDP's buckets assume it). */
  int64_t n = 2;
  em_tensor *w1 = randn64(1, &n, 1), *w2 = randn64(1, &n, 1), *w3 = randn64(1, &n, 1), *x = randn64(1, &n, 0);
  em_tensor *h1 = NULL, *h2 = NULL, *o = NULL, *s = NULL;
  em_add_leaf_hook(w1, order_hook, (void *)(intptr_t)1);
  em_add_leaf_hook(w2, order_hook, (void *)(intptr_t)2);
  em_add_leaf_hook(w3, order_hook, (void *)(intptr_t)3);
  hook_pos = 0;
  assert_int_equal(em_ag_binary(EM_MUL, &h1, x, w1), EM_OK);
  assert_int_equal(em_ag_binary(EM_MUL, &h2, h1, w2), EM_OK);
  assert_int_equal(em_ag_binary(EM_MUL, &o, h2, w3), EM_OK);
  assert_int_equal(em_ag_reduce(EM_SUM, &s, NULL, o, NULL, 0, 0, 0), EM_OK);
  assert_int_equal(em_backward(s, NULL, 0), EM_OK);
  assert_int_equal(hook_pos, 3);
  assert_int_equal(hook_order[0], 3);
  assert_int_equal(hook_order[1], 2);
  assert_int_equal(hook_order[2], 1);
  em_tensor *all[] = {w1, w2, w3, x, h1, h2, o, s};
  for (int i = 0; i < 8; i++) em_tensor_release(all[i]);
}

static void test_modes_and_errors(void **state) {
  (void)state;
  int64_t n = 4;
  em_tensor *x = randn64(1, &n, 1), *y = NULL, *d = NULL, *s = NULL;
  /* no_grad: nothing recorded */
  em_set_grad_enabled(0);
  assert_int_equal(em_ag_unary(EM_EXP, &y, x), EM_OK);
  assert_false(em_requires_grad(y));
  em_set_grad_enabled(1);
  em_tensor_release(y);
  y = NULL;
  /* backward of a non-scalar needs a gradient */
  assert_int_equal(em_ag_unary(EM_EXP, &y, x), EM_OK);
  assert_int_equal(em_backward(y, NULL, 0), EM_ERR_SHAPE);
  assert_non_null(strstr(em_last_error(), "one-element"));
  /* detach cuts the history but shares memory */
  assert_int_equal(em_detach(&d, y), EM_OK);
  assert_false(em_requires_grad(d));
  assert_ptr_equal(em_tensor_storage_id(d), em_tensor_storage_id(y));
  assert_int_equal(em_backward(d, NULL, 0), EM_ERR_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "does not require grad"));
  /* integer tensors cannot require grad */
  em_tensor *i = NULL;
  em_zeros(&i, 1, &n, EM_INT64, CPU);
  assert_int_equal(em_requires_grad_(i, 1), EM_ERR_DTYPE);
  /* non-leaf flags cannot be cleared */
  assert_int_equal(em_requires_grad_(y, 0), EM_ERR_ARGUMENT);
  /* retain_grad keeps a non-leaf gradient */
  assert_int_equal(em_retain_grad(y), EM_OK);
  assert_int_equal(em_ag_reduce(EM_SUM, &s, NULL, y, NULL, 0, 0, 0), EM_OK);
  assert_int_equal(em_backward(s, NULL, 0), EM_OK);
  em_tensor *gy = em_grad(y);
  assert_non_null(gy);
  assert_float_equal(((double *)em_tensor_data(gy))[2], 1.0, 0);
  em_tensor *all[] = {x, y, d, s, i, gy};
  for (int k = 0; k < 6; k++) em_tensor_release(all[k]);
}

static em_status double_backward(void *ctx, int n_out, em_tensor *const *go, int n_in, em_tensor **gi) {
  (void)ctx, (void)n_out, (void)n_in;
  return em_binary_scalar(EM_MUL, &gi[0], go[0], 2.0, 0);
}

static void test_custom_function(void **state) {
  (void)state;
  int64_t n = 3;
  em_tensor *x = randn64(1, &n, 1), *y = NULL, *s = NULL;
  em_set_grad_enabled(0);
  em_binary_scalar(EM_MUL, &y, x, 2.0, 0); /* forward computed by the caller */
  em_set_grad_enabled(1);
  assert_int_equal(em_ag_custom(1, &x, 1, &y, double_backward, NULL, NULL, "DoubleBackward"), EM_OK);
  assert_string_equal(em_grad_fn_name(y), "DoubleBackward");
  assert_int_equal(em_ag_reduce(EM_SUM, &s, NULL, y, NULL, 0, 0, 0), EM_OK);
  assert_int_equal(em_backward(s, NULL, 0), EM_OK);
  em_tensor *g = em_grad(x);
  assert_float_equal(((double *)em_tensor_data(g))[1], 2.0, 0);
  em_tensor *all[] = {x, y, s, g};
  for (int k = 0; k < 4; k++) em_tensor_release(all[k]);
}

static void test_long_chain_no_stack_overflow(void **state) {
  (void)state;
  int64_t n = 1;
  em_tensor *x = randn64(1, &n, 1), *cur = x;
  em_tensor_retain(cur);
  for (int i = 0; i < 100000; i++) {
    em_tensor *next = NULL;
    assert_int_equal(em_ag_binary_scalar(EM_ADD, &next, cur, 1.0, 0), EM_OK);
    em_tensor_release(cur);
    cur = next;
  }
  assert_int_equal(em_backward(cur, NULL, 0), EM_OK);
  em_tensor *g = em_grad(x);
  assert_float_equal(((double *)em_tensor_data(g))[0], 1.0, 0);
  em_tensor_release(g);
  em_tensor_release(cur); /* frees a 100k-node chain iteratively */
  em_tensor_release(x);
}

int main(void) {
  em_set_num_threads(1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_accumulation_and_hooks),
      cmocka_unit_test(test_hook_order_is_reverse_of_use),
      cmocka_unit_test(test_modes_and_errors),
      cmocka_unit_test(test_custom_function),
      cmocka_unit_test(test_long_chain_no_stack_overflow),
      cmocka_unit_test(test_gradcheck_all),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
