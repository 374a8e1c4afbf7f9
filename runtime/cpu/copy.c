/* copy.c - CPU copy with dtype conversion, fill and arange. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_impl.h"

/* Each dtype: enum, short name, storage type, kind (I: integer path through int64,
 * F: float path through double). */
#define EM_ALL_DTYPES(X)            \
  X(EM_FLOAT32, f32, float, F)      \
  X(EM_FLOAT64, f64, double, F)     \
  X(EM_FLOAT16, f16, uint16_t, F)   \
  X(EM_BFLOAT16, bf16, uint16_t, F) \
  X(EM_INT32, i32, int32_t, I)      \
  X(EM_INT64, i64, int64_t, I)      \
  X(EM_UINT8, u8, uint8_t, I)       \
  X(EM_BOOL, b8, uint8_t, I)

/* Loads as double (F) or int64 (I); stores from either. */
#define LOAD_f32(p) ((double)*(const float *)(p))
#define LOAD_f64(p) (*(const double *)(p))
#define LOAD_f16(p) ((double)em_half_to_float(*(const uint16_t *)(p)))
#define LOAD_bf16(p) ((double)em_bf16_to_float(*(const uint16_t *)(p)))
#define LOAD_i32(p) ((int64_t) * (const int32_t *)(p))
#define LOAD_i64(p) (*(const int64_t *)(p))
#define LOAD_u8(p) ((int64_t) * (const uint8_t *)(p))
#define LOAD_b8(p) ((int64_t)(*(const uint8_t *)(p) != 0))
#define STORE_f32(p, v) (*(float *)(p) = (float)(v))
#define STORE_f64(p, v) (*(double *)(p) = (double)(v))
#define STORE_f16(p, v) (*(uint16_t *)(p) = em_float_to_half((float)(v)))
#define STORE_bf16(p, v) (*(uint16_t *)(p) = em_float_to_bf16((float)(v)))
#define STORE_i32(p, v) (*(int32_t *)(p) = (int32_t)(v))
#define STORE_i64(p, v) (*(int64_t *)(p) = (int64_t)(v))
#define STORE_u8(p, v) (*(uint8_t *)(p) = (uint8_t)(int64_t)(v))
#define STORE_b8(p, v) (*(uint8_t *)(p) = (uint8_t)((v) != 0))

/* One conversion loop per (source, destination) pair. */
#define DEFINE_CONVERT(DE, DN, DT, DK, SE, SN, ST, SK)                                            \
  static void convert_##SN##_to_##DN(char **data, const int64_t *strides, int64_t n, void *ctx) { \
    char *dst = data[0];                                                                          \
    const char *src = data[1];                                                                    \
    int64_t ds = strides[0], ss = strides[1];                                                     \
    if (ds == sizeof(DT) && ss == sizeof(ST)) {                                                   \
      DT *restrict d = (DT *)dst;                                                                 \
      const ST *restrict s = (const ST *)src;                                                     \
      for (int64_t i = 0; i < n; i++) STORE_##DN(d + i, LOAD_##SN(s + i));                        \
    } else {                                                                                      \
      for (int64_t i = 0; i < n; i++) STORE_##DN(dst + i * ds, LOAD_##SN(src + i * ss));          \
    }                                                                                             \
  }
#define CONVERT_FROM(SE, SN, ST, SK) EM_ALL_DTYPES_WITH_SRC(SE, SN, ST, SK)
#define EM_ALL_DTYPES_WITH_SRC(SE, SN, ST, SK)                   \
  DEFINE_CONVERT(EM_FLOAT32, f32, float, F, SE, SN, ST, SK)      \
  DEFINE_CONVERT(EM_FLOAT64, f64, double, F, SE, SN, ST, SK)     \
  DEFINE_CONVERT(EM_FLOAT16, f16, uint16_t, F, SE, SN, ST, SK)   \
  DEFINE_CONVERT(EM_BFLOAT16, bf16, uint16_t, F, SE, SN, ST, SK) \
  DEFINE_CONVERT(EM_INT32, i32, int32_t, I, SE, SN, ST, SK)      \
  DEFINE_CONVERT(EM_INT64, i64, int64_t, I, SE, SN, ST, SK)      \
  DEFINE_CONVERT(EM_UINT8, u8, uint8_t, I, SE, SN, ST, SK)       \
  DEFINE_CONVERT(EM_BOOL, b8, uint8_t, I, SE, SN, ST, SK)
EM_ALL_DTYPES(CONVERT_FROM)

#define TABLE_ROW_ENTRY(DE, DN, DT, DK, SN) [DE] = convert_##SN##_to_##DN,
#define TABLE_ROW(SE, SN, ST, SK)                                                                                   \
  [SE] = {TABLE_ROW_ENTRY(EM_FLOAT32, f32, float, F, SN) TABLE_ROW_ENTRY(EM_FLOAT64, f64, double, F, SN)            \
              TABLE_ROW_ENTRY(EM_FLOAT16, f16, uint16_t, F, SN) TABLE_ROW_ENTRY(EM_BFLOAT16, bf16, uint16_t, F, SN) \
                  TABLE_ROW_ENTRY(EM_INT32, i32, int32_t, I, SN) TABLE_ROW_ENTRY(EM_INT64, i64, int64_t, I, SN)     \
                      TABLE_ROW_ENTRY(EM_UINT8, u8, uint8_t, I, SN) TABLE_ROW_ENTRY(EM_BOOL, b8, uint8_t, I, SN)},

static em_loop_fn const convert_table[EM_NUM_DTYPES][EM_NUM_DTYPES] = {EM_ALL_DTYPES(TABLE_ROW)};

/* Same-dtype copies move bytes. */
static void copy_bytes(char **data, const int64_t *strides, int64_t n, void *ctx) {
  size_t size = *(const size_t *)ctx;
  if (strides[0] == (int64_t)size && strides[1] == (int64_t)size) {
    memcpy(data[0], data[1], (size_t)n * size);
    return;
  }
  for (int64_t i = 0; i < n; i++) memcpy(data[0] + i * strides[0], data[1] + i * strides[1], size);
}

em_status cpu_copy(em_tensor *dst, const em_tensor *src) {
  if (src->storage->device.type != EM_CPU || dst->storage->device.type != EM_CPU)
    return em_set_error(EM_ERR_DEVICE, "copy_: the CPU backend copies between CPU tensors only");
  const em_tensor *ops[2] = {dst, src};
  em_iter it;
  cpu_iter_init(&it, 2, ops);
  if (dst->dtype == src->dtype) {
    size_t size = em_dtype_size(dst->dtype);
    cpu_iter_for_each(&it, copy_bytes, &size, 0);
  } else {
    cpu_iter_for_each(&it, convert_table[src->dtype][dst->dtype], NULL, 0);
  }
  return EM_OK;
}

/* ---- fill ---- */

typedef struct {
  char value[8];
  size_t size;
} fill_ctx;

static void fill_loop(char **data, const int64_t *strides, int64_t n, void *vctx) {
  const fill_ctx *c = vctx;
  char *p = data[0];
  int64_t s = strides[0];
  switch (c->size) { /* fixed-size memcpy lets the compiler emit plain vector stores */
    case 1: {
      uint8_t v;
      memcpy(&v, c->value, 1);
      if (s == 1) memset(p, v, (size_t)n);
      else
        for (int64_t i = 0; i < n; i++) p[i * s] = (char)v;
      break;
    }
    case 2: {
      uint16_t v;
      memcpy(&v, c->value, 2);
      for (int64_t i = 0; i < n; i++) memcpy(p + i * s, &v, 2);
      break;
    }
    case 4: {
      uint32_t v;
      memcpy(&v, c->value, 4);
      if (s == 4)
        for (int64_t i = 0; i < n; i++) ((uint32_t *)p)[i] = v;
      else
        for (int64_t i = 0; i < n; i++) memcpy(p + i * s, &v, 4);
      break;
    }
    default: {
      uint64_t v;
      memcpy(&v, c->value, 8);
      if (s == 8)
        for (int64_t i = 0; i < n; i++) ((uint64_t *)p)[i] = v;
      else
        for (int64_t i = 0; i < n; i++) memcpy(p + i * s, &v, 8);
      break;
    }
  }
}

/* Converts value to dtype's bit pattern. */
static void encode(em_dtype dtype, double v, char *out) {
  switch (dtype) {
    case EM_FLOAT32: STORE_f32(out, v); break;
    case EM_FLOAT64: STORE_f64(out, v); break;
    case EM_FLOAT16: STORE_f16(out, v); break;
    case EM_BFLOAT16: STORE_bf16(out, v); break;
    case EM_INT32: STORE_i32(out, v); break;
    case EM_INT64: STORE_i64(out, v); break;
    case EM_UINT8: STORE_u8(out, v); break;
    case EM_BOOL: STORE_b8(out, v); break;
    default: break;
  }
}

em_status cpu_fill(em_tensor *t, double value) {
  fill_ctx c = {.size = em_dtype_size(t->dtype)};
  encode(t->dtype, value, c.value);
  const em_tensor *ops[1] = {t};
  em_iter it;
  cpu_iter_init(&it, 1, ops);
  cpu_iter_for_each(&it, fill_loop, &c, 0);
  return EM_OK;
}

em_status cpu_arange(em_tensor *t, double start, double step) {
  int64_t n = em_tensor_numel(t);
  char *p = em_tensor_ptr(t);
  size_t size = em_dtype_size(t->dtype);
  int64_t s = t->ndim ? t->strides[0] * (int64_t)size : (int64_t)size;
  /* one rounding, written as the fma that gcc would contract it to on FMA hardware and
   * that the CUDA backend computes, so that no build or device differs */
  for (int64_t i = 0; i < n; i++) encode(t->dtype, fma((double)i, step, start), p + i * s);
  return EM_OK;
}
