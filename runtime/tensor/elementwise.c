/* elementwise.c - the tensor core of the elementwise ops: binary, binary_scalar, unary,
 * where, clamp and add_scaled.
 *
 * Each op checks its arguments, picks the compute dtype (PyTorch's promotion rules),
 * broadcasts, resolves the output, converts inputs whose dtype differs from the compute
 * dtype once (em_to) and calls the backend, which then only sees same-dtype operands of
 * one shape. An output whose dtype differs from the result dtype is filled through a
 * temporary when PyTorch would allow the cast. An input that shares memory with the
 * output in any way other than exact aliasing (out == a) is copied first, so that
 * a:add_(a:t()) is right. */
#include <math.h>
#include <stdio.h>
#include "backend.h"
#include "plugins/plugin_api.h"

static const char *const binop_names[EM_NUM_BINOPS] = {
    "add", "sub", "mul", "div", "pow", "maximum",     "minimum",    "fmod",       "atan2", "eq",
    "ne",  "lt",  "le",  "gt",  "ge",  "logical_and", "logical_or", "logical_xor"};

static const char *const unop_names[EM_NUM_UNOPS] = {"neg",   "abs",   "exp",        "log",    "sqrt",       "sin",
                                                     "cos",   "tanh",  "sigmoid",    "relu",   "sign",       "floor",
                                                     "ceil",  "round", "reciprocal", "square", "rsqrt",      "log1p",
                                                     "expm1", "erf",   "gelu",       "silu",   "log2",       "log10", "logical_not"};

/* ---- dtype rules ---- */

/* PyTorch's category of a dtype: bool < integer < floating. */
static int category(em_dtype d) { return d == EM_BOOL ? 0 : em_dtype_is_floating(d) ? 2 : 1; }
static int scalar_category(double s) { return isfinite(s) && s == floor(s) ? 1 : 2; }

/* The dtype of tensor op scalar: the scalar only promotes when its category is higher,
 * and then to the default dtype of that category (int64, float32). */
static em_dtype scalar_promote(em_dtype t, double s) {
  int cs = scalar_category(s);
  if (cs <= category(t)) return t;
  return cs == 2 ? EM_FLOAT32 : EM_INT64;
}

/* PyTorch's can_cast: no floating result into an integer tensor, nothing but bool into a
 * bool tensor. */
static bool can_cast(em_dtype from, em_dtype to) {
  if (em_dtype_is_floating(from) && !em_dtype_is_floating(to)) return false;
  if (from != EM_BOOL && to == EM_BOOL) return false;
  return true;
}

static bool is_bool_result(em_binop op) { return op >= EM_EQ; }

static bool is_float_unop(em_unop op) {
  switch (op) {
    case EM_EXP:
    case EM_LOG:
    case EM_SQRT:
    case EM_SIN:
    case EM_COS:
    case EM_TANH:
    case EM_SIGMOID:
    case EM_RECIPROCAL:
    case EM_RSQRT:
    case EM_LOG1P:
    case EM_EXPM1:
    case EM_ERF:
    case EM_LOG2:
    case EM_LOG10:
    case EM_GELU:
    case EM_SILU: return true;
    default: return false;
  }
}

/* float16/bfloat16 are storage types on the CPU: math on them is refused there with the fix
 * in the message. The CUDA backend computes them in float (autocast, ember.amp). */
static em_status check_math_dtype(const char *op, const em_tensor *t) {
  if ((int)t->dtype < 0 || t->dtype >= EM_NUM_DTYPES)
    return em_set_error(EM_ERR_DTYPE, "%s: invalid dtype %d", op, (int)t->dtype);
  if ((t->dtype == EM_FLOAT16 || t->dtype == EM_BFLOAT16) && t->storage->device.type == EM_CPU)
    return em_set_error(EM_ERR_DTYPE,
                        "%s: %s tensors are storage only and do not support math; convert with "
                        "to('float32') first",
                        op, em_dtype_name(t->dtype));
  return EM_OK;
}

/* A scalar used with an integer compute dtype must be an integer the dtype can hold
 * (uint8 also takes -255..-1, which wrap, as in PyTorch). */
static em_status check_int_scalar(const char *op, const char *what, double s, em_dtype dtype) {
  double lo, hi;
  switch (dtype) {
    case EM_INT32: lo = INT32_MIN, hi = INT32_MAX; break;
    case EM_INT64: lo = -9223372036854775808.0, hi = 9223372036854775807.0; break;
    case EM_UINT8: lo = -255, hi = 255; break;
    default: lo = 0, hi = 1; break; /* bool */
  }
  if (!(s >= lo && s <= hi) || (dtype == EM_INT64 && s >= 9223372036854775808.0))
    return em_set_error(EM_ERR_ARGUMENT, "%s: %s %g is out of range for %s tensors", op, what, s, em_dtype_name(dtype));
  return EM_OK;
}

/* ---- devices ---- */

static const char *device_str(em_device d, char *buf, size_t n) {
  if (d.type == EM_CPU) snprintf(buf, n, "cpu");
  else snprintf(buf, n, "cuda:%d", d.index);
  return buf;
}

static em_status check_same_device(const char *op, const em_tensor *a, const em_tensor *b) {
  em_device da = a->storage->device, db = b->storage->device;
  if (da.type == db.type && da.index == db.index) return EM_OK;
  char x[24], y[24];
  return em_set_error(EM_ERR_DEVICE, "%s: tensors are on different devices (%s and %s); move one with to()", op,
                      device_str(da, x, sizeof x), device_str(db, y, sizeof y));
}

/* ---- memory overlap ---- */

/* The byte range [lo, hi) that t's elements span in its storage. */
static void byte_extent(const em_tensor *t, int64_t *lo, int64_t *hi) {
  int64_t first = t->offset, last = t->offset;
  for (int d = 0; d < t->ndim; d++) {
    int64_t span = (t->sizes[d] - 1) * t->strides[d];
    if (span < 0) first += span;
    else last += span;
  }
  int64_t size = (int64_t)em_dtype_size(t->dtype);
  *lo = first * size;
  *hi = (last + 1) * size;
}

/* True when input view v (already broadcast to out's shape) shares memory with out other
 * than element for element: then out's writes could change inputs not yet read. */
static bool unsafe_overlap(const em_tensor *v, const em_tensor *out) {
  if (v->storage != out->storage || em_tensor_numel(out) == 0) return false;
  bool same = v->dtype == out->dtype && v->offset == out->offset && v->ndim == out->ndim;
  for (int d = 0; same && d < out->ndim; d++)
    if (out->sizes[d] > 1 && v->strides[d] != out->strides[d]) same = false;
  if (same) return false;
  int64_t vlo, vhi, olo, ohi;
  byte_extent(v, &vlo, &vhi);
  byte_extent(out, &olo, &ohi);
  return vlo < ohi && olo < vhi;
}

/* ---- outputs ---- */

/* Where an op writes: *out itself, or a temporary of the result dtype that is copied
 * (converted) into *out at the end. */
typedef struct {
  em_tensor *result;
  bool allocated; /* *out was allocated here */
} out_plan;

/* Resolves *out for a result of (ndim, sizes, dtype) on device. */
static em_status begin_out(const char *op, em_tensor **out, int ndim, const int64_t *sizes, em_dtype dtype,
                           em_device device, out_plan *plan) {
  plan->result = NULL;
  plan->allocated = false;
  if (!out) return em_set_error(EM_ERR_ARGUMENT, "%s: out must not be NULL", op);
  em_tensor *given = *out;
  em_status st;
  if (given && (st = tn_check_tensor(op, given, "output"))) return st;
  /* tn_prepare_out checks shape and device; the dtype is checked here against can_cast. */
  if ((st = tn_prepare_out(op, out, ndim, sizes, given ? given->dtype : dtype, device, &plan->allocated))) return st;
  if (!given) {
    plan->result = *out;
    return EM_OK;
  }
  for (int d = 0; d < given->ndim; d++)
    if (given->sizes[d] > 1 && given->strides[d] == 0)
      return em_set_error(EM_ERR_ARGUMENT,
                          "%s: the output (shape %s, strides with a 0) has several elements in one "
                          "memory location; write into a contiguous tensor",
                          op, EM_SHAPE(given));
  if (given->dtype == dtype) {
    plan->result = given;
    return EM_OK;
  }
  if (!can_cast(dtype, given->dtype)) {
    const char *to = em_dtype_name(given->dtype);
    return em_set_error(EM_ERR_DTYPE, "%s: result dtype %s cannot be written to a%s %s tensor", op,
                        em_dtype_name(dtype), to[0] == 'i' ? "n" : "", to);
  }
  return em_empty(&plan->result, ndim, sizes, dtype, device);
}

/* Copies a temporary result into *out, releases what begin_out made, and on failure
 * drops an output allocated here. */
static em_status finish_out(em_tensor **out, out_plan *plan, em_status st) {
  if (plan->result && plan->result != *out) {
    if (!st) st = em_copy_(*out, plan->result);
    em_tensor_release(plan->result);
  }
  plan->result = NULL;
  if (st) tn_discard_out(out, plan->allocated);
  return st;
}

/* ---- inputs ---- */

/* A view of x in dtype, broadcast to (ndim, sizes), safe to read while `result` is
 * written. Converts (em_to) and copies only when needed. */
static em_status prepare_input(const char *op, const em_tensor *x, em_dtype dtype, const em_tensor *result, int ndim,
                               const int64_t *sizes, em_tensor **view) {
  em_tensor *src = NULL, *v = NULL;
  em_status st = em_to(&src, x, dtype, x->storage->device);
  if (st) return st;
  if ((st = emp_broadcast_to(op, &v, src, ndim, sizes))) goto done;
  if (unsafe_overlap(v, result)) {
    em_tensor *copy = NULL;
    em_tensor_release(v);
    v = NULL;
    if ((st = em_clone(&copy, src))) goto done;
    em_tensor_release(src);
    src = copy;
    if ((st = emp_broadcast_to(op, &v, src, ndim, sizes))) goto done;
  }
  *view = v;
  v = NULL;
done:
  em_tensor_release(v);
  em_tensor_release(src);
  return st;
}

/* A result written into a given tensor is an in-place write: refused where autograd
 * could not follow it (em_check_inplace). The inputs other than *out are what is written. */
static em_status check_given_out(const char *op, em_tensor **out, const em_tensor *a, const em_tensor *b) {
  if (!out || !*out) return EM_OK;
  em_status st = tn_check_inplace(op, *out, a != *out ? a : NULL);
  return st ? st : tn_check_inplace(op, *out, b != *out ? b : NULL);
}

/* "add", or "add_" when writing into the first input (the in-place form). */
static const char *op_name(char *buf, size_t n, const char *base, em_tensor **out, const em_tensor *a) {
  snprintf(buf, n, "%s%s", base, out && *out && *out == a ? "_" : "");
  return buf;
}

static em_status check_inputs(const char *op, const em_tensor *a, const char *what_a, const em_tensor *b,
                              const char *what_b) {
  em_status st;
  if ((st = tn_check_tensor(op, a, what_a)) || (st = tn_check_tensor(op, b, what_b))) return st;
  return check_same_device(op, a, b);
}

/* ---- binary ---- */

em_status em_binary(em_binop op, em_tensor **out, const em_tensor *a, const em_tensor *b) {
  if ((int)op < 0 || op >= EM_NUM_BINOPS) return em_set_error(EM_ERR_ARGUMENT, "binary: unknown op %d", (int)op);
  char name[32];
  op_name(name, sizeof name, binop_names[op], out, a);
  em_status st;
  if ((st = check_inputs(name, a, "first input", b, "second input")) || (st = check_math_dtype(name, a)) ||
      (st = check_math_dtype(name, b)) || (st = check_given_out(name, out, a, b)))
    return st;
  em_dtype compute = em_dtype_promote(a->dtype, b->dtype);
  if ((op == EM_DIV || op == EM_ATAN2) && !em_dtype_is_floating(compute)) compute = EM_FLOAT32; /* true division */
  if (op == EM_SUB && compute == EM_BOOL)
    return em_set_error(EM_ERR_DTYPE,
                        "%s: subtracting bool tensors is not supported; use logical_xor, or "
                        "logical_not to invert a mask",
                        name);
  int ndim;
  int64_t sizes[EM_MAX_DIMS];
  if ((st = tn_broadcast_shapes(name, a->ndim, a->sizes, b->ndim, b->sizes, &ndim, sizes))) return st;
  em_device device = a->storage->device;
  const em_backend *be = tn_backend_for(name, device);
  if (!be) return em_last_status();
  out_plan plan;
  if ((st = begin_out(name, out, ndim, sizes, is_bool_result(op) ? EM_BOOL : compute, device, &plan)))
    return finish_out(out, &plan, st);
  em_tensor *va = NULL, *vb = NULL;
  if (!(st = prepare_input(name, a, compute, plan.result, ndim, sizes, &va)) &&
      !(st = prepare_input(name, b, compute, plan.result, ndim, sizes, &vb)))
    st = be->binary(op, plan.result, va, vb);
  em_tensor_release(va);
  em_tensor_release(vb);
  return finish_out(out, &plan, st);
}

em_status em_binary_scalar(em_binop op, em_tensor **out, const em_tensor *a, double s, int reversed) {
  if ((int)op < 0 || op >= EM_NUM_BINOPS) return em_set_error(EM_ERR_ARGUMENT, "binary_scalar: unknown op %d", (int)op);
  char name[32];
  op_name(name, sizeof name, binop_names[op], out, a);
  em_status st;
  if ((st = tn_check_tensor(name, a, "input")) || (st = check_math_dtype(name, a)) ||
      (st = check_given_out(name, out, a, NULL)))
    return st;
  em_dtype compute = scalar_promote(a->dtype, s);
  if ((op == EM_DIV || op == EM_ATAN2) && !em_dtype_is_floating(compute)) compute = EM_FLOAT32;
  if (!em_dtype_is_floating(compute)) {
    if ((st = check_int_scalar(name, "scalar", s, compute))) return st;
    if (op == EM_POW && !reversed && s < 0)
      return em_set_error(EM_ERR_ARGUMENT,
                          "%s: integers to negative integer powers are not allowed (%s tensor, "
                          "exponent %g; convert to float32 first)",
                          name, em_dtype_name(compute), s);
    if (op == EM_FMOD && !reversed && s == 0)
      return em_set_error(EM_ERR_ARGUMENT, "%s: integer division by zero (%s tensor, divisor 0)", name,
                          em_dtype_name(compute));
  }
  em_device device = a->storage->device;
  const em_backend *be = tn_backend_for(name, device);
  if (!be) return em_last_status();
  out_plan plan;
  if ((st = begin_out(name, out, a->ndim, a->sizes, is_bool_result(op) ? EM_BOOL : compute, device, &plan)))
    return finish_out(out, &plan, st);
  em_tensor *va = NULL;
  if (!(st = prepare_input(name, a, compute, plan.result, a->ndim, a->sizes, &va)))
    st = be->binary_scalar(op, plan.result, va, s, reversed);
  em_tensor_release(va);
  return finish_out(out, &plan, st);
}

/* ---- unary ---- */

em_status em_unary(em_unop op, em_tensor **out, const em_tensor *a) {
  if ((int)op < 0 || op >= EM_NUM_UNOPS) return em_set_error(EM_ERR_ARGUMENT, "unary: unknown op %d", (int)op);
  char name[32];
  op_name(name, sizeof name, unop_names[op], out, a);
  em_status st;
  if ((st = tn_check_tensor(name, a, "input")) || (st = check_math_dtype(name, a)) ||
      (st = check_given_out(name, out, a, NULL)))
    return st;
  if (op == EM_NEG && a->dtype == EM_BOOL)
    return em_set_error(EM_ERR_DTYPE, "%s: negating a bool tensor is not supported; use logical_not", name);
  /* Functions of reals give float32 for integer and bool inputs, as in PyTorch. */
  em_dtype compute = is_float_unop(op) && !em_dtype_is_floating(a->dtype) ? EM_FLOAT32 : a->dtype;
  em_device device = a->storage->device;
  const em_backend *be = tn_backend_for(name, device);
  if (!be) return em_last_status();
  out_plan plan;
  if ((st = begin_out(name, out, a->ndim, a->sizes, op == EM_LOGICAL_NOT ? EM_BOOL : compute, device, &plan)))
    return finish_out(out, &plan, st);
  em_tensor *va = NULL;
  if (!(st = prepare_input(name, a, compute, plan.result, a->ndim, a->sizes, &va))) st = be->unary(op, plan.result, va);
  em_tensor_release(va);
  return finish_out(out, &plan, st);
}

/* ---- where, clamp, add_scaled ---- */

em_status em_where(em_tensor **out, const em_tensor *cond, const em_tensor *a, const em_tensor *b) {
  char name[32];
  op_name(name, sizeof name, "where", out, a);
  em_status st;
  if ((st = tn_check_tensor(name, cond, "condition")) ||
      (st = check_inputs(name, a, "first input", b, "second input")) || (st = check_same_device(name, cond, a)))
    return st;
  if (cond->dtype != EM_BOOL && cond->dtype != EM_UINT8)
    return em_set_error(EM_ERR_DTYPE, "%s: the condition must be a bool (or uint8) tensor, got %s", name,
                        em_dtype_name(cond->dtype));
  /* A select moves bytes, so float16/bfloat16 are fine here. */
  em_dtype dtype = em_dtype_promote(a->dtype, b->dtype);
  int nab, ndim;
  int64_t ab[EM_MAX_DIMS], sizes[EM_MAX_DIMS];
  if (tn_broadcast_shapes(name, a->ndim, a->sizes, b->ndim, b->sizes, &nab, ab) ||
      tn_broadcast_shapes(name, cond->ndim, cond->sizes, nab, ab, &ndim, sizes))
    return em_set_error(EM_ERR_SHAPE, "%s: shapes %s (condition), %s and %s cannot be broadcast together", name,
                        EM_SHAPE(cond), EM_SHAPE(a), EM_SHAPE(b));
  em_device device = a->storage->device;
  const em_backend *be = tn_backend_for(name, device);
  if (!be) return em_last_status();
  out_plan plan;
  if ((st = begin_out(name, out, ndim, sizes, dtype, device, &plan))) return finish_out(out, &plan, st);
  em_tensor *vc = NULL, *va = NULL, *vb = NULL;
  if (!(st = prepare_input(name, cond, cond->dtype, plan.result, ndim, sizes, &vc)) &&
      !(st = prepare_input(name, a, dtype, plan.result, ndim, sizes, &va)) &&
      !(st = prepare_input(name, b, dtype, plan.result, ndim, sizes, &vb)))
    st = be->where(plan.result, vc, va, vb);
  em_tensor_release(vc);
  em_tensor_release(va);
  em_tensor_release(vb);
  return finish_out(out, &plan, st);
}

em_status em_clamp(em_tensor **out, const em_tensor *a, double low, double high) {
  char name[32];
  op_name(name, sizeof name, "clamp", out, a);
  em_status st;
  if ((st = tn_check_tensor(name, a, "input")) || (st = check_math_dtype(name, a)) ||
      (st = check_given_out(name, out, a, NULL)))
    return st;
  /* Bounds promote like scalars (an int tensor clamped to 0.5 gives float32); NaN is no bound. */
  em_dtype compute = a->dtype;
  if (!isnan(low)) compute = scalar_promote(compute, low);
  if (!isnan(high)) compute = scalar_promote(compute, high);
  em_device device = a->storage->device;
  const em_backend *be = tn_backend_for(name, device);
  if (!be) return em_last_status();
  out_plan plan;
  if ((st = begin_out(name, out, a->ndim, a->sizes, compute, device, &plan))) return finish_out(out, &plan, st);
  em_tensor *va = NULL;
  if (!(st = prepare_input(name, a, compute, plan.result, a->ndim, a->sizes, &va)))
    st = be->clamp(plan.result, va, low, high);
  em_tensor_release(va);
  return finish_out(out, &plan, st);
}

em_status em_add_scaled(em_tensor **out, const em_tensor *a, const em_tensor *b, double alpha) {
  char name[32];
  op_name(name, sizeof name, "add_scaled", out, a);
  em_status st;
  if ((st = check_inputs(name, a, "first input", b, "second input")) || (st = check_math_dtype(name, a)) ||
      (st = check_math_dtype(name, b)) || (st = check_given_out(name, out, a, b)))
    return st;
  em_dtype compute = em_dtype_promote(a->dtype, b->dtype);
  if (!em_dtype_is_floating(compute)) {
    if (scalar_category(alpha) == 2)
      return em_set_error(EM_ERR_ARGUMENT, "%s: alpha %g must be an integer for %s tensors", name, alpha,
                          em_dtype_name(compute));
    if ((st = check_int_scalar(name, "alpha", alpha, compute))) return st;
  }
  int ndim;
  int64_t sizes[EM_MAX_DIMS];
  if ((st = tn_broadcast_shapes(name, a->ndim, a->sizes, b->ndim, b->sizes, &ndim, sizes))) return st;
  em_device device = a->storage->device;
  const em_backend *be = tn_backend_for(name, device);
  if (!be) return em_last_status();
  out_plan plan;
  if ((st = begin_out(name, out, ndim, sizes, compute, device, &plan))) return finish_out(out, &plan, st);
  em_tensor *va = NULL, *vb = NULL;
  if (!(st = prepare_input(name, a, compute, plan.result, ndim, sizes, &va)) &&
      !(st = prepare_input(name, b, compute, plan.result, ndim, sizes, &vb)))
    st = be->add_scaled(plan.result, va, vb, alpha);
  em_tensor_release(va);
  em_tensor_release(vb);
  return finish_out(out, &plan, st);
}
