/* rmsprop.c - the fused RMSprop update and clipping by value (ember/optim.h).
 *
 * RMSprop runs on the CPU in one pass per parameter (parallel over elements), reading
 * the gradient and writing the parameter and its state; every tensor and hyper-parameter
 * is checked before anything is written. A CUDA kernel would join the backend table. */
#include <math.h>
#include <omp.h>
#include <string.h>
#include "cpu/cpu_impl.h"
#include "optim_impl.h"

static const char *const OP = "rmsprop";

static em_status check_like(int i, int n, const em_tensor *p, const em_tensor *t, const char *what) {
  if (!t)
    return em_set_error(EM_ERR_ARGUMENT, "%s: parameter %d of %d has a gradient but no %s (NULL)", OP, i + 1, n, what);
  em_status st = tn_check_tensor(OP, t, what);
  if (st) return st;
  if (t->ndim != p->ndim || memcmp(t->sizes, p->sizes, sizeof(int64_t) * (size_t)p->ndim) || t->dtype != p->dtype)
    return em_set_error(EM_ERR_SHAPE, "%s: parameter %d of %d is %s %s but its %s is %s %s", OP, i + 1, n,
                        em_dtype_name(p->dtype), EM_SHAPE(p), what, em_dtype_name(t->dtype), EM_SHAPE(t));
  if (t->storage->device.type != EM_CPU)
    return em_set_error(EM_ERR_UNSUPPORTED, "%s: only CPU tensors are supported so far (parameter %d's %s)", OP, i + 1,
                        what);
  if (!em_tensor_is_contiguous(t))
    return em_set_error(EM_ERR_ARGUMENT, "%s: parameter %d of %d: its %s is not contiguous", OP, i + 1, n, what);
  return EM_OK;
}

static em_status check_hyper(const char *name, double v) {
  if (!(v >= 0) || isinf(v)) return em_set_error(EM_ERR_ARGUMENT, "%s: %s is %g, expected a number >= 0", OP, name, v);
  return EM_OK;
}

/* One pass per parameter. The pointers are restrict and sqrt has the element's type, so
 * that GCC vectorises the loop (unswitched on the optional state; with a double sqrt on
 * float data and possibly aliased pointers it stayed scalar). In char-rnn's step the pass
 * is bound by memory either way: its state has left the caches by the time it runs. */
#define RMSPROP_BODY(T, SQRT)                                                                                      \
  do {                                                                                                             \
    T *restrict pp = (T *)em_tensor_ptr(p), *restrict sq = (T *)em_tensor_ptr(sa);                                 \
    const T *restrict gg = (const T *)em_tensor_ptr(g);                                                            \
    T *restrict bb = buf ? (T *)em_tensor_ptr(buf) : NULL;                                                         \
    T *restrict ga = gavg ? (T *)em_tensor_ptr(gavg) : NULL;                                                       \
    const T sgn = maximize ? (T)-1 : (T)1, wd = (T)weight_decay, a = (T)alpha, oma = (T)(1 - alpha),               \
            ep = (T)eps, mom = (T)momentum, rate = (T)lr;                                                          \
    _Pragma("omp parallel for schedule(static) if (par) num_threads(em_get_num_threads())") for (int64_t e = 0;    \
                                                                                                 e < numel; e++) { \
      T gr = sgn * gg[e];                                                                                          \
      if (wd != 0) gr += wd * pp[e];                                                                               \
      T s = a * sq[e] + oma * gr * gr;                                                                             \
      sq[e] = s;                                                                                                   \
      T avg;                                                                                                       \
      if (ga) {                                                                                                    \
        T m = ga[e] + oma * (gr - ga[e]);                                                                          \
        ga[e] = m;                                                                                                 \
        avg = SQRT(s - m * m) + ep;                                                                                \
      } else {                                                                                                     \
        avg = SQRT(s) + ep;                                                                                        \
      }                                                                                                            \
      if (bb) {                                                                                                    \
        T b = mom * bb[e] + gr / avg;                                                                              \
        bb[e] = b;                                                                                                 \
        pp[e] -= rate * b;                                                                                         \
      } else {                                                                                                     \
        pp[e] -= rate * gr / avg;                                                                                  \
      }                                                                                                            \
    }                                                                                                              \
  } while (0)

em_status em_optim_rmsprop(int n, em_tensor *const *params, em_tensor *const *grads, em_tensor *const *square_avgs,
                           em_tensor *const *momentum_bufs, em_tensor *const *grad_avgs, double lr, double alpha,
                           double eps, double weight_decay, double momentum, int centered, int maximize) {
  em_status st;
  if ((st = check_hyper("lr", lr)) || (st = check_hyper("eps", eps)) ||
      (st = check_hyper("weight_decay", weight_decay)) || (st = check_hyper("momentum", momentum)))
    return st;
  if (!(alpha >= 0 && alpha <= 1))
    return em_set_error(EM_ERR_ARGUMENT, "%s: alpha is %g, expected a number in [0, 1]", OP, alpha);
  if (n < 0 || (n > 0 && (!params || !grads || !square_avgs)))
    return em_set_error(EM_ERR_ARGUMENT, "%s: expected n >= 0 and arrays of parameters, gradients and square_avgs", OP);
  if (n > 0 && ((centered && !grad_avgs) || (momentum > 0 && !momentum_bufs)))
    return em_set_error(EM_ERR_ARGUMENT, "%s: %s needs its state array (got NULL)", OP,
                        centered && !grad_avgs ? "centered" : "momentum");
  for (int i = 0; i < n; i++) {
    const em_tensor *p = params[i];
    if (!grads[i]) continue;
    if (!p) return em_set_error(EM_ERR_ARGUMENT, "%s: parameter %d of %d is NULL", OP, i + 1, n);
    if ((st = tn_check_tensor(OP, p, "parameter"))) return st;
    if (p->dtype != EM_FLOAT32 && p->dtype != EM_FLOAT64)
      return em_set_error(EM_ERR_DTYPE, "%s: parameter %d of %d is %s, expected float32 or float64", OP, i + 1, n,
                          em_dtype_name(p->dtype));
    if ((st = check_like(i, n, p, p, "parameter")) || (st = check_like(i, n, p, grads[i], "gradient")) ||
        (st = check_like(i, n, p, square_avgs[i], "square_avg")) ||
        (centered && (st = check_like(i, n, p, grad_avgs[i], "grad_avg"))) ||
        (momentum > 0 && (st = check_like(i, n, p, momentum_bufs[i], "momentum_buffer"))))
      return st;
  }
  for (int i = 0; i < n; i++) {
    const em_tensor *g = grads[i];
    if (!g) continue;
    em_tensor *p = params[i], *sa = square_avgs[i];
    em_tensor *buf = momentum > 0 ? momentum_bufs[i] : NULL, *gavg = centered ? grad_avgs[i] : NULL;
    int64_t numel = em_tensor_numel(p);
    int par = numel >= EM_PARALLEL_GRAIN && em_get_num_threads() > 1 && !omp_in_parallel();
    if (p->dtype == EM_FLOAT32) RMSPROP_BODY(float, sqrtf);
    else RMSPROP_BODY(double, sqrt);
  }
  return EM_OK;
}

em_status em_optim_clip_grad_value(int n, em_tensor *const *grads, double clip_value) {
  if (!(clip_value >= 0) || isinf(clip_value))
    return em_set_error(EM_ERR_ARGUMENT, "clip_grad_value: clip_value is %g, expected a finite number >= 0",
                        clip_value);
  const em_backend *be = NULL;
  em_status st = optim_check_grads("clip_grad_value", n, grads, false, &be);
  for (int i = 0; i < n && !st && be; i++)
    if (grads[i]) st = be->clamp(grads[i], grads[i], -clip_value, clip_value);
  return st;
}
