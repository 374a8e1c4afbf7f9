/* backend.h - the per-device dispatch table, in the manner of ggml's backend interface.
 *
 * The tensor core (runtime/tensor) checks arguments, promotes dtypes, broadcasts and
 * allocates the result once, then calls the backend of the inputs' device. Backends
 * receive tensors that already agree: same device, the shapes the op needs (broadcast
 * inputs arrive as expanded views with zero strides) and the dtype the op computes in.
 * A NULL entry means "not supported on this device" and the core reports it. */
#ifndef EMBER_BACKEND_H
#define EMBER_BACKEND_H

#include "tensor_impl.h"

typedef enum em_random_kind { EM_RANDOM_UNIFORM, EM_RANDOM_NORMAL, EM_RANDOM_INT, EM_RANDOM_BERNOULLI } em_random_kind;

typedef struct em_backend {
  const char *name;
  /* memory */
  void *(*alloc)(size_t nbytes, em_device device);   /* NULL when out of memory */
  void (*free)(void *ptr, size_t nbytes, em_device device);
  /* dst and src have the same shape; dtypes may differ (converts) */
  em_status (*copy)(em_tensor *dst, const em_tensor *src);
  em_status (*fill)(em_tensor *t, double value);
  /* t[i] = start + i * step over the flattened contiguous tensor */
  em_status (*arange)(em_tensor *t, double start, double step);
  /* elementwise: out, a, b share a shape; a and b share the compute dtype; out is that
   * dtype, or bool for comparisons and logical ops */
  em_status (*binary)(em_binop op, em_tensor *out, const em_tensor *a, const em_tensor *b);
  em_status (*binary_scalar)(em_binop op, em_tensor *out, const em_tensor *a, double s, int reversed);
  em_status (*unary)(em_unop op, em_tensor *out, const em_tensor *a);
  em_status (*where)(em_tensor *out, const em_tensor *cond, const em_tensor *a, const em_tensor *b);
  em_status (*clamp)(em_tensor *out, const em_tensor *a, double low, double high);
  em_status (*add_scaled)(em_tensor *out, const em_tensor *a, const em_tensor *b, double alpha);
  /* reductions: a's last nreduce dims are reduced; out (and indices) are contiguous with
   * a's leading dims. p is the norm order for EM_NORM. */
  em_status (*reduce)(em_redop op, em_tensor *out, em_tensor *indices, const em_tensor *a,
                      int nreduce, double p, int base);
  em_status (*var)(em_tensor *out, const em_tensor *a, int nreduce, double correction, int take_sqrt);
  em_status (*scan)(int prod, em_tensor *out, const em_tensor *a, int dim);
  em_status (*softmax)(em_tensor *out, const em_tensor *a, int dim, int log);
  em_status (*sort)(em_tensor *values, em_tensor *indices, const em_tensor *a, int dim,
                    int descending, int64_t k, int base);
  /* batched GEMM: out[B,M,N] = alpha * a[B,M,K] @ b[B,K,N] + beta * out; any strides */
  em_status (*gemm)(em_tensor *out, const em_tensor *a, const em_tensor *b, double alpha, double beta);
  /* indexing */
  em_status (*index_select)(em_tensor *out, const em_tensor *a, int dim, const em_tensor *index, int base);
  em_status (*gather)(em_tensor *out, const em_tensor *a, int dim, const em_tensor *index, int base);
  em_status (*scatter)(em_tensor *self, int dim, const em_tensor *index, const em_tensor *src,
                       double value, int accumulate, int base);
  em_status (*index_add)(em_tensor *self, int dim, const em_tensor *index, const em_tensor *src,
                         double alpha, int base);
  em_status (*index_fill)(em_tensor *self, int dim, const em_tensor *index, double value, int base);
  em_status (*masked_fill)(em_tensor *self, const em_tensor *mask, double value);
  em_status (*masked_select)(em_tensor *out, const em_tensor *a, const em_tensor *mask);
  em_status (*nonzero)(em_tensor *out, const em_tensor *a, int base);
  /* random: fills t from the Philox stream (seed, offset) */
  em_status (*random)(em_tensor *t, em_random_kind kind, double a, double b, uint64_t seed,
                      uint64_t offset);
} em_backend;

/* The backend for a device, or NULL with an error naming op when it is not available. */
const em_backend *em_backend_for(const char *op, em_device device);
/* Call a backend entry, reporting a NULL entry as unsupported. */
#define EM_BACKEND_CALL(op_name, be, entry, ...)                                            \
  ((be)->entry ? (be)->entry(__VA_ARGS__)                                                    \
               : em_set_error(EM_ERR_UNSUPPORTED, "%s: not supported on device %s",          \
                              (op_name), (be)->name))

#endif
