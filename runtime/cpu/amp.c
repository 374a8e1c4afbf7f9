/* amp.c - loss scaling on the CPU: unscaling the gradients of a scaled loss and finding
 * infs and NaNs in them, in one pass (the backend's amp_unscale; GradScaler of
 * lua/ember/amp.lua calls it through em_amp_unscale_). The value is checked before the
 * multiplication, as PyTorch does. */
#include <math.h>
#include <stdatomic.h>
#include "cpu_impl.h"

typedef struct {
  double inv_scale;
  atomic_int found;
} unscale_ctx;

#define DEFINE_UNSCALE(SUF, T, LOAD, STORE)                                          \
  static void unscale_##SUF(char **data, const int64_t *st, int64_t n, void *vctx) { \
    unscale_ctx *c = vctx;                                                           \
    int found = 0;                                                                   \
    for (int64_t i = 0; i < n; i++) {                                                \
      T *p = (T *)(data[0] + i * st[0]);                                             \
      double v = LOAD(*p);                                                           \
      found |= !isfinite(v);                                                         \
      *p = STORE(v * c->inv_scale);                                                  \
    }                                                                                \
    if (found) atomic_store_explicit(&c->found, 1, memory_order_relaxed);            \
  }

#define AS_IS(v) (v)
#define LOAD_F16(h) ((double)em_half_to_float(h))
#define STORE_F16(v) em_float_to_half((float)(v))
#define LOAD_BF16(h) ((double)em_bf16_to_float(h))
#define STORE_BF16(v) em_float_to_bf16((float)(v))

/* float32 multiplies in float, as the GPU and PyTorch do (inv_scale rounded to float) */
static void unscale_f32(char **data, const int64_t *st, int64_t n, void *vctx) {
  unscale_ctx *c = vctx;
  const float k = (float)c->inv_scale;
  int found = 0;
  if (st[0] == sizeof(float)) {
    float *restrict p = (float *)data[0];
    for (int64_t i = 0; i < n; i++) {
      found |= !isfinite(p[i]);
      p[i] *= k;
    }
  } else {
    for (int64_t i = 0; i < n; i++) {
      float *p = (float *)(data[0] + i * st[0]);
      found |= !isfinite(*p);
      *p *= k;
    }
  }
  if (found) atomic_store_explicit(&c->found, 1, memory_order_relaxed);
}
DEFINE_UNSCALE(f64, double, AS_IS, AS_IS)
DEFINE_UNSCALE(f16, uint16_t, LOAD_F16, STORE_F16)
DEFINE_UNSCALE(bf16, uint16_t, LOAD_BF16, STORE_BF16)

em_status cpu_amp_unscale(int n, em_tensor *const *grads, double inv_scale, int *found_inf) {
  unscale_ctx c = {.inv_scale = inv_scale};
  atomic_init(&c.found, 0);
  for (int i = 0; i < n; i++) {
    em_tensor *g = grads[i];
    if (!g) continue;
    em_loop_fn fn;
    switch (g->dtype) {
      case EM_FLOAT32: fn = unscale_f32; break;
      case EM_FLOAT64: fn = unscale_f64; break;
      case EM_FLOAT16: fn = unscale_f16; break;
      case EM_BFLOAT16: fn = unscale_bf16; break;
      default:
        return em_set_error(EM_ERR_DTYPE, "amp_unscale: gradient %d of %d is %s, expected a floating dtype", i + 1, n,
                            em_dtype_name(g->dtype));
    }
    const em_tensor *ops[1] = {g};
    em_iter it;
    cpu_iter_init(&it, 1, ops);
    cpu_iter_for_each(&it, fn, &c, 0);
  }
  *found_inf = atomic_load(&c.found);
  return EM_OK;
}
