/* scratch.c - tensor expressions for backward functions (see autograd_impl.h). */
#include "autograd_impl.h"

em_tensor *ag_sc_track(em_scratch *sc, em_tensor *t, em_status st) {
  if (st) {
    if (!sc->st) sc->st = st;
    em_tensor_release(t);
    return NULL;
  }
  if (sc->n == (int)(sizeof sc->tmp / sizeof *sc->tmp)) {
    em_tensor_release(t);
    sc->st = em_set_error(EM_ERR_RUNTIME, "autograd: backward expression too long");
    return NULL;
  }
  sc->tmp[sc->n++] = t;
  return t;
}

#define SC_CALL(call)              \
  do {                             \
    if (sc->st) return NULL;       \
    em_tensor *r = NULL;           \
    em_status st = (call);         \
    return ag_sc_track(sc, r, st); \
  } while (0)

em_tensor *ag_sc_binary(em_scratch *sc, em_binop op, const em_tensor *a, const em_tensor *b) {
  SC_CALL(em_binary(op, &r, a, b));
}
em_tensor *ag_sc_scalar(em_scratch *sc, em_binop op, const em_tensor *a, double s) {
  SC_CALL(em_binary_scalar(op, &r, a, s, 0));
}
em_tensor *ag_sc_rscalar(em_scratch *sc, em_binop op, double s, const em_tensor *a) {
  SC_CALL(em_binary_scalar(op, &r, a, s, 1));
}
em_tensor *ag_sc_unary(em_scratch *sc, em_unop op, const em_tensor *a) { SC_CALL(em_unary(op, &r, a)); }
em_tensor *ag_sc_sum(em_scratch *sc, const em_tensor *a, const int *dims, int ndims, int keepdim) {
  SC_CALL(em_reduce(EM_SUM, &r, NULL, a, dims, ndims, keepdim, 0));
}
em_tensor *ag_sc_matmul(em_scratch *sc, const em_tensor *a, const em_tensor *b) { SC_CALL(em_matmul(&r, a, b)); }
em_tensor *ag_sc_transpose(em_scratch *sc, const em_tensor *a, int d0, int d1) { SC_CALL(em_transpose(&r, a, d0, d1)); }
em_tensor *ag_sc_reshape(em_scratch *sc, const em_tensor *a, int ndim, const int64_t *sizes) {
  SC_CALL(em_reshape(&r, a, ndim, sizes));
}
em_tensor *ag_sc_expand(em_scratch *sc, const em_tensor *a, int ndim, const int64_t *sizes) {
  SC_CALL(em_expand(&r, a, ndim, sizes));
}
em_tensor *ag_sc_zeros(em_scratch *sc, int ndim, const int64_t *sizes, em_dtype dtype, em_device device) {
  SC_CALL(em_zeros(&r, ndim, sizes, dtype, device));
}
em_tensor *ag_sc_to(em_scratch *sc, const em_tensor *a, em_dtype dtype) {
  SC_CALL(em_to(&r, a, dtype, a->storage->device));
}

em_tensor *ag_sc_keep(em_scratch *sc, em_tensor *t) {
  if (sc->st || !t) return NULL;
  em_tensor_retain(t);
  return t;
}

em_status ag_sc_end(em_scratch *sc) {
  for (int i = 0; i < sc->n; i++) em_tensor_release(sc->tmp[i]);
  sc->n = 0;
  return sc->st;
}
