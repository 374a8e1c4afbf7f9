/* sparse_grad.c - row-sparse gradients (ember/sparse.h): the object, coalescing, and how a
 * leaf accumulates them during backward.
 *
 * A backward function that makes a sparse gradient for a leaf hands it to the leaf's
 * accumulator node (ag_sparse_deliver) instead of the engine's dense buffer; the engine's
 * accumulator step (ag_sparse_accumulate) then merges it into the leaf. A gradient for a
 * non-leaf input is made dense there and then, so every other backward function keeps
 * seeing plain tensors. */
#include <stdlib.h>
#include <string.h>
#include "autograd_impl.h"
#include "tensor/backend.h"

struct em_sparse_grad {
  atomic_int refcount;
  int64_t num_rows;
  em_tensor *rows; /* int64 [nnz], from 0, ascending, distinct */
  em_tensor *values; /* [nnz, D] contiguous */
};

em_sparse_grad *ag_sparse_wrap(int64_t num_rows, em_tensor *rows, em_tensor *values) {
  em_sparse_grad *g = calloc(1, sizeof *g);
  if (!g) {
    em_tensor_release(rows);
    em_tensor_release(values);
    em_set_error(EM_ERR_MEMORY, "sparse gradient: out of memory");
    return NULL;
  }
  atomic_init(&g->refcount, 1);
  g->num_rows = num_rows;
  g->rows = rows;
  g->values = values;
  return g;
}

void em_sparse_grad_retain(em_sparse_grad *g) {
  if (g) atomic_fetch_add(&g->refcount, 1);
}

void em_sparse_grad_release(em_sparse_grad *g) {
  if (!g || atomic_fetch_sub(&g->refcount, 1) != 1) return;
  em_tensor_release(g->rows);
  em_tensor_release(g->values);
  free(g);
}

int64_t em_sparse_grad_num_rows(const em_sparse_grad *g) { return g ? g->num_rows : 0; }
int64_t em_sparse_grad_nnz(const em_sparse_grad *g) { return g ? g->rows->sizes[0] : 0; }

em_tensor *em_sparse_grad_indices(const em_sparse_grad *g) {
  if (!g) return NULL;
  em_tensor_retain(g->rows);
  return g->rows;
}

em_tensor *em_sparse_grad_values(const em_sparse_grad *g) {
  if (!g) return NULL;
  em_tensor_retain(g->values);
  return g->values;
}

const em_backend *ag_sparse_backend(const char *op, em_device device) {
  const em_backend *be = tn_backend_for(op, device);
  if (be && (!be->sparse_coalesce || !be->embedding_bag_sparse_backward || !be->optim_rows)) {
    em_set_error(EM_ERR_UNSUPPORTED, "%s: row-sparse gradients are not implemented on %s (only on the CPU and cuda)",
                 op, be->name);
    return NULL;
  }
  return be;
}

/* *out = the coalesced form of rows_in [K] (int64 from 0) and values_in [K, D]. */
static em_status coalesce(em_sparse_grad **out, int64_t num_rows, const em_tensor *rows_in,
                          const em_tensor *values_in) {
  const char *op = "sparse gradient";
  em_device dev = values_in->storage->device;
  const em_backend *be = ag_sparse_backend(op, dev);
  if (!be) return em_last_status();
  int64_t K = rows_in->sizes[0], D = values_in->sizes[1], vshape[2] = {K, D}, nnz = 0;
  em_tensor *rows = NULL, *values = NULL, *r = NULL, *v = NULL, *rc = NULL, *vc = NULL;
  em_status st;
  if (!(st = em_contiguous(&rc, rows_in)) && !(st = em_contiguous(&vc, values_in)) &&
      !(st = em_empty(&rows, 1, &K, EM_INT64, dev)) && !(st = em_empty(&values, 2, vshape, values_in->dtype, dev)) &&
      !(st = be->sparse_coalesce(rows, values, &nnz, rc, vc)) && !(st = em_narrow(&r, rows, 0, 0, nnz)))
    st = em_narrow(&v, values, 0, 0, nnz);
  em_tensor_release(rows);
  em_tensor_release(values);
  em_tensor_release(rc);
  em_tensor_release(vc);
  if (st) {
    em_tensor_release(r);
    em_tensor_release(v);
    return st;
  }
  *out = ag_sparse_wrap(num_rows, r, v);
  return *out ? EM_OK : em_last_status();
}

em_status em_sparse_grad_new(em_sparse_grad **out, int64_t num_rows, const em_tensor *indices,
                             const em_tensor *values, int base) {
  const char *op = "sparse_grad";
  em_status st;
  if (!out || *out) return em_set_error(EM_ERR_ARGUMENT, "%s: out must point to NULL", op);
  if ((st = tn_check_tensor(op, indices, "indices")) || (st = tn_check_tensor(op, values, "values"))) return st;
  if (indices->dtype != EM_INT64 && indices->dtype != EM_INT32)
    return em_set_error(EM_ERR_DTYPE, "%s: indices are %s, expected int32 or int64", op, em_dtype_name(indices->dtype));
  if (values->dtype != EM_FLOAT32 && values->dtype != EM_FLOAT64)
    return em_set_error(EM_ERR_DTYPE, "%s: values are %s, expected float32 or float64", op,
                        em_dtype_name(values->dtype));
  if (indices->ndim != 1 || values->ndim != 2 || values->sizes[0] != indices->sizes[0])
    return em_set_error(EM_ERR_SHAPE, "%s: expected indices [K] and values [K, D], got %s and %s", op,
                        EM_SHAPE(indices), EM_SHAPE(values));
  if (num_rows < 0) return em_set_error(EM_ERR_ARGUMENT, "%s: num_rows is %lld, expected >= 0", op, (long long)num_rows);
  em_tensor *rows = NULL, *host = NULL, *hc = NULL;
  if ((st = em_to(&rows, indices, EM_INT64, values->storage->device))) return st;
  if (base != 0) {
    em_tensor *shifted = NULL;
    st = em_binary_scalar(EM_SUB, &shifted, rows, base, 0);
    em_tensor_release(rows);
    rows = shifted;
    if (st) return st;
  }
  if (!(st = em_to(&host, rows, EM_INT64, (em_device){EM_CPU, 0})) && !(st = em_contiguous(&hc, host))) {
    const int64_t *r = (const int64_t *)em_tensor_ptr(hc);
    for (int64_t k = 0; k < hc->sizes[0] && !st; k++)
      if (r[k] < 0 || r[k] >= num_rows)
        st = em_set_error(EM_ERR_INDEX, "%s: index %lld is out of range for %lld rows (expected %d..%lld)", op,
                          (long long)(r[k] + base), (long long)num_rows, base, (long long)(num_rows - 1 + base));
  }
  em_tensor_release(host);
  em_tensor_release(hc);
  if (!st) st = coalesce(out, num_rows, rows, values);
  em_tensor_release(rows);
  return st;
}

em_status em_sparse_grad_to_dense(em_tensor **out, const em_sparse_grad *g) {
  if (!g) return em_set_error(EM_ERR_ARGUMENT, "sparse_grad to_dense: the gradient is NULL");
  int64_t shape[2] = {g->num_rows, g->values->sizes[1]};
  em_status st = em_zeros(out, 2, shape, g->values->dtype, g->values->storage->device);
  if (!st && g->rows->sizes[0] > 0) st = em_index_add_(*out, 0, g->rows, g->values, 1.0, 0);
  return st;
}

/* The concatenation of a and b, coalesced. */
static em_status merge(em_sparse_grad **out, const em_sparse_grad *a, const em_sparse_grad *b) {
  if (a->values->sizes[1] != b->values->sizes[1] || a->values->dtype != b->values->dtype)
    return em_set_error(EM_ERR_SHAPE, "sparse gradient: cannot add values %s (%s) and %s (%s)", EM_SHAPE(a->values),
                        em_dtype_name(a->values->dtype), EM_SHAPE(b->values), em_dtype_name(b->values->dtype));
  em_tensor *rows = NULL, *values = NULL;
  em_tensor *r[2] = {a->rows, b->rows}, *v[2] = {a->values, b->values};
  em_status st = em_cat(&rows, r, 2, 0);
  if (!st) st = em_cat(&values, v, 2, 0);
  if (!st) st = coalesce(out, a->num_rows, rows, values);
  em_tensor_release(rows);
  em_tensor_release(values);
  return st;
}

/* Checks g against the leaf t: [num_rows, D] of t's dtype. */
static em_status check_fits(const char *op, const em_tensor *t, const em_sparse_grad *g) {
  if (t->ndim != 2 || t->sizes[0] != g->num_rows || t->sizes[1] != g->values->sizes[1])
    return em_set_error(EM_ERR_SHAPE, "%s: a sparse gradient of [%lld, %lld] for a tensor of shape %s", op,
                        (long long)g->num_rows, (long long)g->values->sizes[1], EM_SHAPE(t));
  if (t->dtype != g->values->dtype)
    return em_set_error(EM_ERR_DTYPE, "%s: a sparse gradient of %s for a tensor of %s", op,
                        em_dtype_name(g->values->dtype), em_dtype_name(t->dtype));
  return EM_OK;
}

em_sparse_grad *em_grad_sparse(const em_tensor *t) {
  const em_autograd_meta *m = t ? t->autograd : NULL;
  if (!m || !m->sparse_grad) return NULL;
  em_sparse_grad_retain(m->sparse_grad);
  return m->sparse_grad;
}

em_status em_set_grad_sparse(em_tensor *t, em_sparse_grad *g) {
  em_status st = tn_check_tensor("set_grad_sparse", t, "tensor");
  if (st) return st;
  if (g && (st = check_fits("set_grad_sparse", t, g))) return st;
  em_autograd_meta *m = ag_meta(t, g != NULL);
  if (!m) return g ? em_set_error(EM_ERR_MEMORY, "set_grad_sparse: out of memory") : EM_OK;
  em_sparse_grad_retain(g);
  em_sparse_grad_release(m->sparse_grad);
  m->sparse_grad = g;
  if (g) {
    em_tensor_release(m->grad);
    m->grad = NULL;
  }
  return EM_OK;
}

em_status ag_sparse_deliver(em_node *n, int i, em_sparse_grad *g, em_tensor **grad_in) {
  em_node *next = n->next[i].node;
  if (!next) {
    em_sparse_grad_release(g);
    return EM_OK;
  }
  if (!next->leaf) { /* a weight computed by other ops: they get a dense gradient */
    em_status st = em_sparse_grad_to_dense(grad_in, g);
    em_sparse_grad_release(g);
    return st;
  }
  if (!next->sparse_in) {
    next->sparse_in = g;
    return EM_OK;
  }
  em_sparse_grad *merged = NULL;
  em_status st = merge(&merged, next->sparse_in, g);
  em_sparse_grad_release(g);
  if (st) return st;
  em_sparse_grad_release(next->sparse_in);
  next->sparse_in = merged;
  return EM_OK;
}

em_status ag_sparse_accumulate(em_node *acc, em_tensor **dense, int *done) {
  em_autograd_meta *m = acc->leaf->autograd;
  em_sparse_grad *in = acc->sparse_in;
  em_status st = EM_OK;
  *done = 0;
  acc->sparse_in = NULL;
  if (in && (st = check_fits("backward", acc->leaf, in))) goto out;
  if (in && !*dense && !m->grad) { /* sparse stays sparse */
    *done = 1;
    if (!m->sparse_grad) {
      m->sparse_grad = in;
      in = NULL;
    } else {
      em_sparse_grad *merged = NULL;
      if ((st = merge(&merged, m->sparse_grad, in))) goto out;
      em_sparse_grad_release(m->sparse_grad);
      m->sparse_grad = merged;
    }
    goto out;
  }
  /* A dense gradient is involved: the leaf's gradient becomes dense. */
  if (m->sparse_grad) {
    em_tensor *d = NULL;
    if ((st = em_sparse_grad_to_dense(&d, m->sparse_grad))) goto out;
    em_tensor_release(m->grad);
    m->grad = d;
    em_sparse_grad_release(m->sparse_grad);
    m->sparse_grad = NULL;
  }
  if (in) {
    em_tensor *d = NULL, *sum = NULL;
    if ((st = em_sparse_grad_to_dense(&d, in))) goto out;
    if (!*dense) {
      *dense = d;
    } else {
      st = em_binary(EM_ADD, &sum, *dense, d);
      em_tensor_release(d);
      if (st) goto out;
      em_tensor_release(*dense);
      *dense = sum;
    }
  }
out:
  em_sparse_grad_release(in);
  return st;
}
