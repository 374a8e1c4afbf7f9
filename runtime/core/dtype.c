/* dtype.c - names, sizes and promotion of element types. */
#include <string.h>
#include "ember/core.h"

static const struct {
  const char *name;
  const char *alias;
  size_t size;
} dtype_info[EM_NUM_DTYPES] = {
    [EM_FLOAT32] = {"float32", "float", 4}, [EM_FLOAT64] = {"float64", "double", 8},
    [EM_FLOAT16] = {"float16", "half", 2},  [EM_BFLOAT16] = {"bfloat16", "bf16", 2},
    [EM_INT32] = {"int32", "int", 4},       [EM_INT64] = {"int64", "long", 8},
    [EM_UINT8] = {"uint8", "byte", 1},      [EM_BOOL] = {"bool", "bool", 1},
};

static int valid(em_dtype d) { return (int)d >= 0 && d < EM_NUM_DTYPES; }

const char *em_dtype_name(em_dtype d) { return valid(d) ? dtype_info[d].name : "invalid"; }
size_t em_dtype_size(em_dtype d) { return valid(d) ? dtype_info[d].size : 0; }

em_status em_dtype_from_name(const char *name, em_dtype *out) {
  for (int d = 0; name && d < EM_NUM_DTYPES; d++) {
    if (!strcmp(name, dtype_info[d].name) || !strcmp(name, dtype_info[d].alias)) {
      *out = (em_dtype)d;
      return EM_OK;
    }
  }
  return em_set_error(EM_ERR_DTYPE,
                      "unknown dtype '%s' (expected float32, float64, float16, bfloat16, "
                      "int32, int64, uint8 or bool)",
                      name ? name : "(null)");
}

int em_dtype_is_floating(em_dtype d) {
  return d == EM_FLOAT32 || d == EM_FLOAT64 || d == EM_FLOAT16 || d == EM_BFLOAT16;
}

/* Rank in the promotion lattice: bool < uint8 < int32 < int64 < float16/bfloat16 <
 * float32 < float64. float16 with bfloat16 gives float32, as in PyTorch. */
static int rank(em_dtype d) {
  switch (d) {
    case EM_BOOL: return 0;
    case EM_UINT8: return 1;
    case EM_INT32: return 2;
    case EM_INT64: return 3;
    case EM_FLOAT16:
    case EM_BFLOAT16: return 4;
    case EM_FLOAT32: return 5;
    case EM_FLOAT64: return 6;
    default: return -1;
  }
}

em_dtype em_dtype_promote(em_dtype a, em_dtype b) {
  if (a == b) return a;
  if ((a == EM_FLOAT16 && b == EM_BFLOAT16) || (a == EM_BFLOAT16 && b == EM_FLOAT16)) return EM_FLOAT32;
  return rank(a) >= rank(b) ? a : b;
}
