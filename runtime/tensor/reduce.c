/* reduce.c - reductions (sum, mean, prod, max/min, argmax/argmin, logsumexp, norm,
 * any/all, var/std) and ops along one dim (cumsum, cumprod, softmax, sort, topk):
 * argument checks, result dtypes and shapes, and the arrangement the backend expects.
 *
 * Reductions view the input with the kept dims first and the reduced dims last (each
 * group in its original order, so a position is the flat index over the reduced dims),
 * hand the backend a contiguous result over the kept dims, and return it with the
 * reduced dims as size 1 when keepdim is set: a view, never a copy. Dtypes follow
 * PyTorch: integer and bool sums and products give int64, mean/var/std/norm/logsumexp
 * need a float, max/min keep the dtype, argmax/argmin give int64, any/all give bool. */
#include <math.h>
#include <stdlib.h>
#include "backend.h"

static const char *const redop_names[EM_NUM_REDOPS] = {
    [EM_SUM] = "sum",   [EM_MEAN] = "mean",     [EM_PROD] = "prod",     [EM_MAX] = "max",
    [EM_MIN] = "min",   [EM_ARGMAX] = "argmax", [EM_ARGMIN] = "argmin", [EM_LOGSUMEXP] = "logsumexp",
    [EM_NORM] = "norm", [EM_ANY] = "any",       [EM_ALL] = "all",
};

/* float16/bfloat16 are storage types: compute ops reject them. */
static em_status check_compute_dtype(const char *op, const em_tensor *a) {
  if (a->dtype == EM_FLOAT16 || a->dtype == EM_BFLOAT16)
    return em_set_error(EM_ERR_DTYPE, "%s: dtype %s is storage-only (convert with to('float32') first)", op,
                        em_dtype_name(a->dtype));
  return EM_OK;
}

static em_status check_float(const char *op, const em_tensor *a) {
  if (!em_dtype_is_floating(a->dtype))
    return em_set_error(EM_ERR_DTYPE,
                        "%s: expected a float32 or float64 tensor, got %s (convert with to('float32') first)", op,
                        em_dtype_name(a->dtype));
  return EM_OK;
}

/* ---- the reduction plan ---- */

typedef struct reduce_plan {
  em_tensor *perm; /* a with kept dims first, reduced dims last */
  int nreduce;
  int nkeep;
  int64_t keep[EM_MAX_DIMS]; /* the result's shape without keepdim */
  int nout;
  int64_t out[EM_MAX_DIMS]; /* the result's shape as returned */
  int nrdims;
  int64_t rdims[EM_MAX_DIMS]; /* the reduced dims, for messages */
  int64_t count; /* elements reduced into each output */
} reduce_plan;

/* dims NULL or ndims 0: every dim. Negative dims count from the end; a dim given twice
 * is an error (as in PyTorch). A 0-d tensor accepts dim 0 / -1 and reduces nothing. */
static em_status plan_reduce(const char *op, const em_tensor *a, const int *dims, int ndims, int keepdim,
                             reduce_plan *p) {
  unsigned mask = 0;
  if (!dims || ndims == 0) {
    mask = (1u << a->ndim) - 1;
  } else {
    if (ndims < 0 || ndims > EM_MAX_DIMS)
      return em_set_error(EM_ERR_ARGUMENT, "%s: %d dims given, expected 0..%d", op, ndims, EM_MAX_DIMS);
    for (int i = 0; i < ndims; i++) {
      int d = dims[i];
      em_status st = tn_check_dim(op, &d, a->ndim);
      if (st) return st;
      if (mask & (1u << d))
        return em_set_error(EM_ERR_ARGUMENT, "%s: dim %d appears more than once in dims (shape %s)", op, dims[i],
                            EM_SHAPE(a));
      mask |= 1u << d;
    }
    if (a->ndim == 0) mask = 0;
  }
  int64_t sizes[EM_MAX_DIMS], strides[EM_MAX_DIMS];
  int n = 0;
  p->nkeep = p->nout = p->nrdims = 0;
  p->count = 1;
  for (int d = 0; d < a->ndim; d++) {
    if (mask & (1u << d)) {
      if (keepdim) p->out[p->nout++] = 1;
      continue;
    }
    sizes[n] = a->sizes[d], strides[n++] = a->strides[d];
    p->keep[p->nkeep++] = a->sizes[d];
    p->out[p->nout++] = a->sizes[d];
  }
  for (int d = 0; d < a->ndim; d++) {
    if (!(mask & (1u << d))) continue;
    sizes[n] = a->sizes[d], strides[n++] = a->strides[d];
    p->rdims[p->nrdims++] = d;
    p->count *= a->sizes[d];
  }
  p->nreduce = p->nrdims;
  p->perm = tn_tensor_wrap(a->storage, a->dtype, a->ndim, sizes, strides, a->offset);
  return p->perm ? EM_OK : em_last_status();
}

/* Ops without an identity (max, min, ...) refuse to reduce zero elements. */
static em_status check_nonempty(const char *op, const em_tensor *a, const reduce_plan *p) {
  if (p->count > 0) return EM_OK;
  return em_set_error(EM_ERR_SHAPE,
                      "%s: cannot reduce over zero elements (input shape %s, reduced dims %s): %s has no identity", op,
                      EM_SHAPE(a), tn_shape_str(p->nrdims, p->rdims), op);
}

/* ---- results ----
 * The backend writes a contiguous tensor over the kept dims: a view of *out when *out is
 * contiguous (always so when allocated here), else a temporary copied into *out. */
typedef struct result {
  em_tensor **out;
  em_tensor *target;
  bool allocated, temporary;
} result;

static em_status begin_result(const char *op, result *r, em_tensor **out, int nout, const int64_t *out_sizes,
                              int ntarget, const int64_t *target_sizes, em_dtype dtype, em_device device) {
  r->out = out;
  r->target = NULL;
  r->temporary = false;
  em_status st = tn_prepare_out(op, out, nout, out_sizes, dtype, device, &r->allocated);
  if (st) return st;
  const em_tensor *o = *out;
  if (em_tensor_is_contiguous(o)) {
    r->target = tn_tensor_wrap(o->storage, dtype, ntarget, target_sizes, NULL, o->offset);
    st = r->target ? EM_OK : em_last_status();
  } else {
    r->temporary = true;
    st = em_empty(&r->target, ntarget, target_sizes, dtype, device);
  }
  if (st) tn_discard_out(out, r->allocated);
  return st;
}

/* Copies a temporary back (when the kernel succeeded) and releases it; on failure a
 * result allocated here is released and *out set back to NULL. */
static em_status end_result(result *r, em_status st) {
  if (!r->out) return st;
  if (!st && r->temporary) {
    em_tensor *shaped = NULL;
    const em_tensor *o = *r->out;
    st = em_view(&shaped, r->target, o->ndim, o->sizes);
    if (!st) st = em_copy_(*r->out, shaped);
    em_tensor_release(shaped);
  }
  em_tensor_release(r->target);
  r->target = NULL;
  if (st) tn_discard_out(r->out, r->allocated);
  return st;
}

/* ---- reductions ---- */

static em_status reduce_impl(em_redop op, em_tensor **out, em_tensor **indices, const em_tensor *a, const int *dims,
                             int ndims, int keepdim, int base, double p) {
  if ((int)op < 0 || op >= EM_NUM_REDOPS) return em_set_error(EM_ERR_ARGUMENT, "reduce: unknown reduction %d", (int)op);
  const char *name = redop_names[op];
  em_status st = tn_check_tensor(name, a, "input");
  if (st || (st = check_compute_dtype(name, a))) return st;
  if (indices && op != EM_MAX && op != EM_MIN)
    return em_set_error(EM_ERR_ARGUMENT, "%s: indices are only returned by max and min", name);
  if ((op == EM_MEAN || op == EM_LOGSUMEXP || op == EM_NORM) && (st = check_float(name, a))) return st;
  if (op == EM_NORM && isnan(p)) return em_set_error(EM_ERR_ARGUMENT, "norm: the order p is NaN");
  em_dtype dtype = a->dtype;
  int integral = !em_dtype_is_floating(a->dtype);
  if ((op == EM_SUM || op == EM_PROD) && integral) dtype = EM_INT64;
  if (op == EM_ARGMAX || op == EM_ARGMIN) dtype = EM_INT64;
  if (op == EM_ANY || op == EM_ALL) dtype = EM_BOOL;

  reduce_plan plan;
  if ((st = plan_reduce(name, a, dims, ndims, keepdim, &plan))) return st;
  int needs_elements =
      op == EM_MAX || op == EM_MIN || op == EM_ARGMAX || op == EM_ARGMIN || (op == EM_NORM && isinf(p));
  const em_backend *be = tn_backend_for(name, a->storage->device);
  if ((needs_elements && (st = check_nonempty(name, a, &plan))) || (!be && (st = em_last_status()))) {
    em_tensor_release(plan.perm);
    return st;
  }
  result r = {0}, ri = {0};
  em_device dev = a->storage->device;
  st = begin_result(name, &r, out, plan.nout, plan.out, plan.nkeep, plan.keep, dtype, dev);
  if (!st && indices) st = begin_result(name, &ri, indices, plan.nout, plan.out, plan.nkeep, plan.keep, EM_INT64, dev);
  if (!st) st = be->reduce(op, r.target, ri.target, plan.perm, plan.nreduce, p, base);
  st = end_result(&r, st);
  st = end_result(&ri, st);
  if (st) { /* a failure in either result releases both when they were allocated here */
    tn_discard_out(out, r.allocated);
    if (indices) tn_discard_out(indices, ri.allocated);
  }
  em_tensor_release(plan.perm);
  return st;
}

em_status em_reduce(em_redop op, em_tensor **out, em_tensor **indices, const em_tensor *a, const int *dims, int ndims,
                    int keepdim, int base) {
  return reduce_impl(op, out, indices, a, dims, ndims, keepdim, base, 2.0); /* EM_NORM: the 2-norm */
}

em_status em_norm(em_tensor **out, const em_tensor *a, double p, const int *dims, int ndims, int keepdim) {
  return reduce_impl(EM_NORM, out, NULL, a, dims, ndims, keepdim, 0, p);
}

em_status em_var(em_tensor **out, const em_tensor *a, const int *dims, int ndims, double correction, int keepdim,
                 int take_sqrt) {
  const char *name = take_sqrt ? "std" : "var";
  em_status st = tn_check_tensor(name, a, "input");
  if (st || (st = check_compute_dtype(name, a)) || (st = check_float(name, a))) return st;
  if (isnan(correction)) return em_set_error(EM_ERR_ARGUMENT, "%s: correction is NaN", name);
  reduce_plan plan;
  if ((st = plan_reduce(name, a, dims, ndims, keepdim, &plan))) return st;
  const em_backend *be = tn_backend_for(name, a->storage->device);
  result r = {0};
  st = be ? begin_result(name, &r, out, plan.nout, plan.out, plan.nkeep, plan.keep, a->dtype, a->storage->device)
          : em_last_status();
  if (!st) st = be->var(r.target, plan.perm, plan.nreduce, correction, take_sqrt);
  st = end_result(&r, st);
  em_tensor_release(plan.perm);
  return st;
}

/* ---- ops along one dim: the backend gets contiguous tensors ---- */

typedef em_status (*dim_kernel)(const em_backend *be, em_tensor *out, const em_tensor *a, int dim, int flag);

static em_status scan_kernel(const em_backend *be, em_tensor *out, const em_tensor *a, int dim, int prod) {
  return be->scan(prod, out, a, dim);
}

static em_status softmax_kernel(const em_backend *be, em_tensor *out, const em_tensor *a, int dim, int log) {
  return be->softmax(out, a, dim, log);
}

static em_status along_dim(const char *name, em_tensor **out, const em_tensor *a, int dim, em_dtype dtype,
                           dim_kernel kernel, int flag) {
  em_status st = tn_check_dim(name, &dim, a->ndim);
  if (st) return st;
  const em_backend *be = tn_backend_for(name, a->storage->device);
  if (!be) return em_last_status();
  em_tensor *input = NULL;
  if ((st = em_contiguous(&input, a))) return st;
  result r = {0};
  st = begin_result(name, &r, out, a->ndim, a->sizes, a->ndim, a->sizes, dtype, a->storage->device);
  if (!st) st = kernel(be, r.target, input, dim, flag);
  st = end_result(&r, st);
  em_tensor_release(input);
  return st;
}

static em_status scan(const char *name, em_tensor **out, const em_tensor *a, int dim, int prod) {
  em_status st = tn_check_tensor(name, a, "input");
  if (st || (st = check_compute_dtype(name, a))) return st;
  em_dtype dtype = em_dtype_is_floating(a->dtype) ? a->dtype : EM_INT64;
  return along_dim(name, out, a, dim, dtype, scan_kernel, prod);
}

em_status em_cumsum(em_tensor **out, const em_tensor *a, int dim) { return scan("cumsum", out, a, dim, 0); }
em_status em_cumprod(em_tensor **out, const em_tensor *a, int dim) { return scan("cumprod", out, a, dim, 1); }

em_status em_softmax(em_tensor **out, const em_tensor *a, int dim, int log) {
  const char *name = log ? "log_softmax" : "softmax";
  em_status st = tn_check_tensor(name, a, "input");
  if (st || (st = check_compute_dtype(name, a)) || (st = check_float(name, a))) return st;
  return along_dim(name, out, a, dim, a->dtype, softmax_kernel, log);
}

/* ---- sort and top-k ---- */

static em_status sort_impl(const char *name, em_tensor **values, em_tensor **indices, const em_tensor *a, int64_t k,
                           int k_given, int dim, int descending, int base) {
  em_status st = tn_check_tensor(name, a, "input");
  if (st || (st = check_compute_dtype(name, a)) || (st = tn_check_dim(name, &dim, a->ndim))) return st;
  if (!values) return em_set_error(EM_ERR_ARGUMENT, "%s: values must not be NULL", name);
  int64_t size = a->ndim ? a->sizes[dim] : 1;
  if (!k_given) k = size;
  if (k < 0 || k > size)
    return em_set_error(EM_ERR_INDEX,
                        "%s: k = %lld is out of range for dim %d of size %lld (shape %s, expected 0..%lld)", name,
                        (long long)k, dim, (long long)size, EM_SHAPE(a), (long long)size);
  const em_backend *be = tn_backend_for(name, a->storage->device);
  if (!be) return em_last_status();
  int64_t sizes[EM_MAX_DIMS];
  for (int d = 0; d < a->ndim; d++) sizes[d] = d == dim ? k : a->sizes[d];
  bool valloc = false, ialloc = false;
  em_device dev = a->storage->device;
  st = tn_prepare_out(name, values, a->ndim, sizes, a->dtype, dev, &valloc);
  if (!st && indices) st = tn_prepare_out(name, indices, a->ndim, sizes, EM_INT64, dev, &ialloc);
  if (!st) st = be->sort(*values, indices ? *indices : NULL, a, dim, descending, k, base);
  if (st) {
    tn_discard_out(values, valloc);
    if (indices) tn_discard_out(indices, ialloc);
  }
  return st;
}

em_status em_sort(em_tensor **values, em_tensor **indices, const em_tensor *a, int dim, int descending, int base) {
  return sort_impl("sort", values, indices, a, 0, 0, dim, descending, base);
}

em_status em_topk(em_tensor **values, em_tensor **indices, const em_tensor *a, int64_t k, int dim, int largest,
                  int base) {
  return sort_impl("topk", values, indices, a, k, 1, dim, largest, base);
}
