/* test_serve_lift.c - the infer request's number arrays parsed ahead of jansson
 * (runtime/serve/lift.c): for numbers written every way JSON allows, sv_parse_infer gives the
 * values bit for bit as jansson's parse alone does (sv_parse_infer_jansson), and for bodies
 * it does not take (nested arrays, malformed numbers, wrong counts, integers beyond 2^53)
 * the same status and message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "test_util.h"
#include "serve/serve_impl.h"

static sv_model_spec spec_of(em_dtype dtype) {
  sv_model_spec s;
  memset(&s, 0, sizeof s);
  strcpy(s.name, "m");
  s.max_batch = 8;
  s.n_inputs = 1;
  strcpy(s.inputs[0].name, "x");
  s.inputs[0].dtype = dtype;
  s.inputs[0].ndim = 1;
  s.inputs[0].shape[0] = -1;
  s.n_outputs = 1;
  strcpy(s.outputs[0].name, "y");
  return s;
}

/* Both parses of body agree: status, message, rows and every byte of the data. Returns the
 * status. */
static int same_parse(const sv_model_spec *spec, const char *body) {
  sv_request *a = NULL, *b = NULL;
  char ea[SV_ERR_MAX] = "", eb[SV_ERR_MAX] = "";
  int sa = sv_parse_infer(spec, body, strlen(body), 0, &a, ea, sizeof ea);
  int sb = sv_parse_infer_jansson(spec, body, strlen(body), 0, &b, eb, sizeof eb);
  if (sa != sb) fail_msg("status %d ('%s') where jansson alone gives %d ('%s') for %.200s", sa, ea, sb, eb, body);
  if (sa != 200 && strcmp(ea, eb)) fail_msg("'%s' where jansson alone says '%s'", ea, eb);
  if (sa == 200) {
    assert_int_equal(a->rows, b->rows);
    int64_t n = a->rows * a->inner[0][0];
    assert_int_equal(a->inner[0][0], b->inner[0][0]);
    if (n && memcmp(a->data[0], b->data[0], (size_t)n * em_dtype_size(spec->inputs[0].dtype))) {
      for (int64_t i = 0; i < n; i++)
        if (spec->inputs[0].dtype == EM_FLOAT64 && memcmp((double *)a->data[0] + i, (double *)b->data[0] + i, 8))
          fail_msg("value %lld: %.17g where jansson gives %.17g in %.300s", (long long)i, ((double *)a->data[0])[i],
                   ((double *)b->data[0])[i], body);
      fail_msg("the data differs from jansson's in %.300s", body);
    }
  }
  sv_request_free(a);
  sv_request_free(b);
  return sa;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next_u64(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

/* A random number written one of the ways clients write them. */
static void random_number(char *buf, size_t cap) {
  uint64_t r = next_u64();
  double x;
  switch (r % 8) {
  case 0: memcpy(&x, &r, sizeof x); if (!isfinite(x)) x = 1.5; break; /* any bit pattern */
  case 1: x = ((double)(next_u64() >> 11) / 9007199254740992.0 - 0.5) * 8; break;
  case 2: x = ((double)(next_u64() % 256) / 255 - 0.2860) / 0.3530; break; /* a normalised pixel */
  default: x = ((double)(next_u64() >> 11) / 9007199254740992.0) * pow(10, (double)(next_u64() % 60) - 30); break;
  }
  if (r & 0x100) x = -x;
  static const char *formats[] = {"%.17g", "%.16g", "%.15g", "%.9g", "%g", "%.3e", "%.20e", "%.0f"};
  const char *f = formats[(r >> 16) % 8];
  if (!strcmp(f, "%.0f") && fabs(x) > 1e18) f = "%.17g";
  snprintf(buf, cap, f, x);
  if ((r >> 24) % 16 == 0) snprintf(buf, cap, "%lld", (long long)(next_u64() >> (next_u64() % 64)) * ((r & 2) ? -1 : 1));
  if ((r >> 28) % 32 == 0) for (char *p = buf; *p; p++) if (*p == 'e') *p = 'E';
}

static void test_random_numbers_match_jansson(void **state) {
  (void)state;
  static const em_dtype dtypes[] = {EM_FLOAT64, EM_FLOAT32, EM_INT64, EM_INT32, EM_UINT8};
  char *body = malloc(1 << 16);
  int ok = 0, lifted = 0;
  for (int round = 0; round < 600; round++) {
    sv_model_spec spec = spec_of(dtypes[round % 5]);
    int n = 1 + (int)(next_u64() % 64);
    size_t len = (size_t)snprintf(body, 1 << 16, "{\"inputs\": [{\"name\": \"x\", \"shape\": [1, %d], \"datatype\": \"%s\", \"data\": [",
                                  n, sv_datatype_name(spec.inputs[0].dtype));
    for (int i = 0; i < n; i++) {
      char num[64];
      random_number(num, sizeof num);
      if (spec.inputs[0].dtype != EM_FLOAT64 && spec.inputs[0].dtype != EM_FLOAT32)
        snprintf(num, sizeof num, "%lld", (long long)(next_u64() % 300) - (round % 3 ? 0 : 40));
      len += (size_t)snprintf(body + len, (1 << 16) - len, "%s%s", i ? (i % 3 ? "," : " ,\n ") : "", num);
    }
    snprintf(body + len, (1 << 16) - len, "]}]}");
    ok += same_parse(&spec, body) == 200;
    sv_lift lift;
    lifted += sv_lift_data(body, strlen(body), &lift);
    sv_lift_free(&lift);
  }
  free(body);
  assert_true(ok > 300); /* most bodies parse (the int8 ranges fail some) */
  assert_true(lifted > 500); /* and took lift.c's path (not integers beyond int64) */
}

static void test_exact_values(void **state) {
  (void)state;
  sv_model_spec f64 = spec_of(EM_FLOAT64), i64 = spec_of(EM_INT64);
  const char *body = "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,6],\"datatype\":\"FP64\",\"data\":"
                     "[0.1,-0.8101983002832861,-0,-0.0,4.9e-324,1e23]}]}";
  sv_request *r = NULL;
  char err[SV_ERR_MAX];
  assert_int_equal(sv_parse_infer(&f64, body, strlen(body), 0, &r, err, sizeof err), 200);
  const double *v = r->data[0];
  assert_true(v[0] == 0.1 && v[1] == -0.8101983002832861 && v[4] == 4.9e-324 && v[5] == 1e23);
  assert_false(signbit(v[2])); /* -0 is the integer 0 in JSON (jansson's json_int_t) */
  assert_true(signbit(v[3]) && v[3] == 0);
  sv_request_free(r);
  /* beyond 2^53 an integer is not exact in a double: jansson's integers decide */
  body = "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,2],\"datatype\":\"INT64\",\"data\":[9007199254740993,-9223372036854775808]}]}";
  assert_int_equal(sv_parse_infer(&i64, body, strlen(body), 0, &r, err, sizeof err), 200);
  assert_true(((int64_t *)r->data[0])[0] == 9007199254740993LL && ((int64_t *)r->data[0])[1] == INT64_MIN);
  sv_request_free(r);
}

static void test_bodies_left_to_jansson(void **state) {
  (void)state;
  sv_model_spec f32 = spec_of(EM_FLOAT32), b = spec_of(EM_BOOL);
  static const char *bodies[] = {
      "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,3],\"datatype\":\"FP32\",\"data\":[1,01,2]}]}",
      "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,3],\"datatype\":\"FP32\",\"data\":[1,2,.5]}]}",
      "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,3],\"datatype\":\"FP32\",\"data\":[1,2,1e400]}]}",
      "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,3],\"datatype\":\"FP32\",\"data\":[1,2,3,]}]}",
      "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,3],\"datatype\":\"FP32\",\"data\":[1,2]}]}",
      "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,3],\"datatype\":\"FP32\",\"data\":[1,2,3]}], \"bad\": 1}",
      "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,3],\"datatype\":\"FP32\",\"data\":[1,2,3],\"data\":[1,2,3]}]}",
      "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,3],\"datatype\":\"FP32\",\"data\":[1,2,3]}]",
      "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,3],\"datatype\":\"FP32\",\"data\":[1,2,\"3\"]}]}",
      "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,3],\"datatype\":\"FP32\",\"data\":[1,2,12345678901234567890]}]}",
      "{\"inputs\":{\"x\":{\"data\":[1,2,3]}}}",
      "[{\"inputs\":[{\"data\":[1]}]}]",
      "{\"inputs\":[5,{\"name\":\"x\",\"shape\":[1,1],\"datatype\":\"FP32\",\"data\":[1]}]}",
  };
  for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++)
    if (same_parse(&f32, bodies[i]) == 200) fail_msg("parsed: %s", bodies[i]);
  const char *bools = "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,2],\"datatype\":\"BOOL\",\"data\":[1,0]}]}";
  assert_int_equal(same_parse(&b, bools), 400);
  /* nested arrays stay with jansson, and parse */
  assert_int_equal(same_parse(&f32, "{\"inputs\":[{\"name\":\"x\",\"shape\":[2,2],\"datatype\":\"FP32\",\"data\":[[1,2],[3,4]]}]}"), 200);
  /* a body that parses both ways, with the data key first and odd spacing */
  assert_int_equal(same_parse(&f32, " { \"inputs\" : [ { \"data\" : [ 1 , -2.5e1 ,3 ] , \"name\":\"x\",\"shape\":[1,3],"
                                    "\"datatype\":\"FP32\", \"parameters\": {\"data\": [1]}} ] , \"id\": \"[\\\"data\\\"]\" } "),
                   200);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_numbers_match_jansson),
      cmocka_unit_test(test_exact_values),
      cmocka_unit_test(test_bodies_left_to_jansson),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
