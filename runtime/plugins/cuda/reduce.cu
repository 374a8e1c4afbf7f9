/* reduce.cu - reductions on the GPU: sum, mean, prod, max/min (with positions),
 * argmax/argmin, logsumexp, norms, any/all and variance, with cpu/reduce.c's semantics;
 * and em_gpu_register_reduce, which installs the whole family (scan, softmax, sort too).
 *
 * Layout. The tensor core hands a view whose last nreduce dims are reduced and a contiguous
 * out over the leading (kept) dims. Both groups of dims are merged as far as their strides
 * allow (reduce_plan.c), then one kernel runs in one of two layouts (em_rp_plan_reduce):
 *  - rows: a slot of `lanes` consecutive threads per output (1 to 256 lanes, by the length
 *    of the reduction: a few lanes for rows of 7, a warp for rows of a few hundred, the
 *    whole block beyond). Contiguous rows are read in 16-byte packets, with vector loads
 *    when the row is aligned; the element-to-lane assignment is the same either way.
 *  - columns: when the outputs are contiguous and the reduced elements are not (sum over
 *    dim 0 of a matrix), neighbouring threads take neighbouring outputs, so every load is
 *    coalesced; the block's remaining threads split each output's reduction.
 * Few outputs over long reductions (one row of 10M) are cut into chunks across gridDim.y;
 * each chunk leaves a partial state and a second kernel combines them, in chunk order.
 *
 * Determinism: which lane accumulates which elements and the tree in which lanes and chunks
 * meet depend on the shape alone; there are no atomics. Accumulators are those of the CPU:
 * double for float32 and float64 sums, products, norms and deviations (float for float16 and
 * bfloat16), int64 with wrap-around for integers, the value itself for max/min. Max/min keep
 * the first position of the winner, NaN winning (a total order on (value, position), so the
 * tree gives the CPU's answer exactly). logsumexp and var run two passes as the CPU does
 * (max, then sum of exp(x - max); mean, then squared deviations), through one double per
 * output. */
#include <string.h>
#include "reduce_common.cuh"
#include "reduce_gpu.h"

namespace {

enum kind { K_SUM, K_PROD, K_MAXV, K_MINV, K_MAXI, K_MINI, K_ANY, K_ALL, K_NORM, K_SQDEV, K_SUMEXP };
enum norm_kind { N_TWO, N_ONE, N_INF, N_NEGINF, N_ZERO, N_POW };
/* how a finished state becomes the stored value */
enum finish_kind { F_PLAIN, F_MEAN, F_POS, F_BOOL, F_LSE, F_NORM, F_VAR, F_CENTER };

struct red_args {
  void *out;
  int out_dtype;
  int64_t *indices; /* max/min with positions, or NULL */
  int base;
  int finish;
  double p;         /* norm order */
  double correction;
  int take_sqrt;
  int64_t count;    /* elements per output */
  const double *center; /* per output, from a first pass (deviations, logsumexp) */
  double *center_out;   /* F_CENTER: the first pass writes f * center_scale here */
  double center_scale;
};

struct red_shape {
  em_geom kept, red; /* kept: offset of output j; red: offset of reduced element r */
  int64_t nout, nred, chunk, splits;
  int lanes, lanes_fast, contig;
};

template <typename A> struct rstate {
  A v;
  int64_t pos; /* max/min with positions: where v was found (first of equals) */
};

constexpr bool float_only(int k) { return k == K_NORM || k == K_SQDEV || k == K_SUMEXP; }

template <typename T, int K> struct red_op {
  typedef em_red_types<T> R;
  typedef typename R::val V;
  typedef typename R::wide W;
  static constexpr bool by_value = K == K_MAXV || K == K_MINV || K == K_MAXI || K == K_MINI;
  static constexpr bool boolean = K == K_ANY || K == K_ALL;
  typedef typename std::conditional<by_value, V, typename std::conditional<boolean, int64_t, W>::type>::type A;
  typedef rstate<A> state;

  int norm;
  A p;

  __device__ static A lowest() {
    if constexpr (R::is_float) return (A)-INFINITY;
    else return (A)INT64_MIN;
  }
  __device__ static A highest() {
    if constexpr (R::is_float) return (A)INFINITY;
    else return (A)INT64_MAX;
  }

  /* The state before any element; also the identity of combine. */
  __device__ state init() const {
    state s;
    s.pos = INT64_MAX;
    if constexpr (K == K_PROD || K == K_ALL) s.v = (A)1;
    else if constexpr (K == K_MAXV || K == K_MAXI) s.v = lowest();
    else if constexpr (K == K_MINV || K == K_MINI) s.v = highest();
    else if constexpr (K == K_NORM) s.v = norm == N_NEGINF ? (A)INFINITY : (A)0;
    else s.v = (A)0;
    return s;
  }

  /* b comes from later elements than a, or from elsewhere with its own positions. */
  __device__ state combine(state a, state b) const {
    if constexpr (K == K_MAXI || K == K_MINI) {
      bool a_nan = em_isnan(a.v), b_nan = em_isnan(b.v);
      bool better = K == K_MAXI ? b.v > a.v : b.v < a.v;
      bool tie = b.v == a.v || (a_nan && b_nan);
      return better || (b_nan && !a_nan) || (tie && b.pos < a.pos) ? b : a;
    } else {
      if constexpr (K == K_PROD) a.v = em_mul(a.v, b.v);
      else if constexpr (K == K_MAXV) a.v = b.v > a.v || em_isnan(b.v) ? b.v : a.v;
      else if constexpr (K == K_MINV) a.v = b.v < a.v || em_isnan(b.v) ? b.v : a.v;
      else if constexpr (K == K_ANY) a.v |= b.v;
      else if constexpr (K == K_ALL) a.v &= b.v;
      else if constexpr (K == K_NORM) {
        if (norm == N_INF) a.v = b.v > a.v || em_isnan(b.v) ? b.v : a.v;
        else if (norm == N_NEGINF) a.v = b.v < a.v || em_isnan(b.v) ? b.v : a.v;
        else a.v += b.v;
      } else a.v = em_add(a.v, b.v);
      return a;
    }
  }

  /* c: the output's center (deviations from the mean, exp relative to the max). */
  __device__ __forceinline__ void update(state &s, T raw, int64_t pos, double c) const {
    V x = em_val(raw);
    if constexpr (K == K_SUM) s.v = em_add(s.v, (A)x);
    else if constexpr (K == K_PROD) s.v = em_mul(s.v, (A)x);
    else if constexpr (K == K_MAXV) s.v = x > s.v || em_isnan(x) ? x : s.v;
    else if constexpr (K == K_MINV) s.v = x < s.v || em_isnan(x) ? x : s.v;
    else if constexpr (K == K_MAXI || K == K_MINI) {
      state t;
      t.v = x, t.pos = pos;
      s = combine(s, t);
    } else if constexpr (K == K_ANY) s.v |= (int64_t)(x != 0);
    else if constexpr (K == K_ALL) s.v &= (int64_t)(x != 0);
    else if constexpr (K == K_NORM) {
      A ax = fabs((A)x);
      switch (norm) {
        case N_TWO: s.v += ax * ax; break;
        case N_ONE: s.v += ax; break;
        case N_INF: s.v = ax > s.v || em_isnan(ax) ? ax : s.v; break;
        case N_NEGINF: s.v = ax < s.v || em_isnan(ax) ? ax : s.v; break;
        case N_ZERO: s.v += (A)(x != 0); break;
        default: s.v += pow(ax, p); break;
      }
    } else if constexpr (K == K_SQDEV) {
      A d = (A)x - (A)c;
      s.v += d * d;
    } else if constexpr (K == K_SUMEXP) {
      s.v += (A)em_exp((V)(x - (V)c)); /* in the input's precision, as the CPU */
    }
  }

  /* cpu/reduce.c's emit(). */
  __device__ void emit(const red_args &g, int64_t j, state s) const {
    double f = 0;
    int64_t i = 0;
    if constexpr (R::is_float && !boolean) f = (double)s.v;
    else i = (int64_t)s.v;
    switch (g.finish) {
      case F_CENTER: g.center_out[j] = f * g.center_scale; return;
      case F_VAR: {
        double v = f / fmax(0.0, (double)g.count - g.correction);
        em_store_result(g.out, g.out_dtype, j, g.take_sqrt ? sqrt(v) : v, 0, false);
        return;
      }
      case F_POS: em_store_result(g.out, g.out_dtype, j, 0, s.pos + g.base, true); return;
      case F_BOOL: em_store_result(g.out, g.out_dtype, j, 0, i, true); return;
      case F_MEAN: f /= (double)g.count; break;
      case F_LSE: { /* an infinite or NaN max is the result itself */
        double c = g.center[j];
        f = isfinite(c) ? c + log(f) : c;
        break;
      }
      case F_NORM:
        if (g.p == 2) f = sqrt(f);
        else if (g.p != 1 && g.p != 0 && !isinf(g.p)) f = pow(f, 1.0 / g.p);
        break;
      default: break;
    }
    em_store_result(g.out, g.out_dtype, j, f, i, !R::is_float);
    if (g.indices) g.indices[j] = s.pos + g.base;
  }
};

/* Lane `lane` of `lanes` takes packets of V = 16 bytes: elements [p, p + V) for p = begin +
 * V * (lane + lanes * t). Vector loads when the row is 16-byte aligned (begin is a multiple
 * of EM_RP_ROW_QUANTUM, so packets are then aligned too), element loads otherwise: the
 * assignment, hence the result, is the same. */
template <typename T, typename Op, typename S>
__device__ __forceinline__ void accumulate_packets(const Op &op, S &st, const T *row, int64_t begin, int64_t end,
                                                   int lane, int lanes, double c) {
  constexpr int V = 16 / sizeof(T);
  const bool aligned = ((uintptr_t)row & 15) == 0;
  for (int64_t p0 = begin + (int64_t)lane * V; p0 < end; p0 += (int64_t)lanes * V) {
    if (aligned && p0 + V <= end) {
      uint4 raw = *reinterpret_cast<const uint4 *>(row + p0);
      T v[V];
      memcpy(v, &raw, sizeof raw);
#pragma unroll
      for (int k = 0; k < V; k++) op.update(st, v[k], p0 + k, c);
    } else {
      for (int k = 0; k < V && p0 + k < end; k++) op.update(st, row[p0 + k], p0 + k, c);
    }
  }
}

/* Each slot reduces chunk blockIdx.y of outputs j = blockIdx.x * slots + slot (grid-stride),
 * and stores the result, or the partial state of the chunk when the reduction is split. */
template <typename T, int K>
__global__ void __launch_bounds__(EM_RP_THREADS)
    reduce_kernel(const T *__restrict__ x, red_shape sh, red_args g, red_op<T, K> op,
                  typename red_op<T, K>::state *partial) {
  typedef typename red_op<T, K>::state S;
  __shared__ S sm[EM_RP_THREADS];
  em_lane_map m(sh.lanes, sh.lanes_fast);
  const int64_t split = blockIdx.y, begin = split * sh.chunk;
  const int64_t end = begin + sh.chunk < sh.nred ? begin + sh.chunk : sh.nred;
  for (int64_t j0 = (int64_t)blockIdx.x * m.slots; j0 < sh.nout; j0 += (int64_t)gridDim.x * m.slots) {
    const int64_t j = j0 + m.slot;
    S st = op.init();
    if (j < sh.nout) {
      const T *row = x + sh.kept.offset(j);
      const double c = g.center ? g.center[j] : 0.0;
      if (sh.contig) accumulate_packets(op, st, row, begin, end, m.lane, sh.lanes, c);
      else
        for (int64_t r = begin + m.lane; r < end; r += sh.lanes) op.update(st, row[sh.red.offset(r)], r, c);
    }
    em_lane_tree(sm, st, m.slot, m.lane, sh.lanes, [&](S a, S b) { return op.combine(a, b); });
    if (m.lane == 0 && j < sh.nout) {
      if (partial) partial[j * sh.splits + split] = sm[m.slot * sh.lanes];
      else op.emit(g, j, sm[m.slot * sh.lanes]);
    }
  }
}

/* A warp per output folds its chunks' partial states (lane l takes chunks l, l + 32, ...
 * in order, then the lanes' tree). */
template <typename T, int K>
__global__ void __launch_bounds__(EM_RP_THREADS)
    combine_kernel(const typename red_op<T, K>::state *__restrict__ partial, int64_t nout, int64_t splits,
                   red_args g, red_op<T, K> op) {
  typedef typename red_op<T, K>::state S;
  __shared__ S sm[EM_RP_THREADS];
  em_lane_map m(32, 1);
  for (int64_t j0 = (int64_t)blockIdx.x * m.slots; j0 < nout; j0 += (int64_t)gridDim.x * m.slots) {
    const int64_t j = j0 + m.slot;
    S st = op.init();
    if (j < nout)
      for (int64_t s = m.lane; s < splits; s += 32) st = op.combine(st, partial[j * splits + s]);
    em_lane_tree(sm, st, m.slot, m.lane, 32, [&](S a, S b) { return op.combine(a, b); });
    if (m.lane == 0 && j < nout) op.emit(g, j, sm[m.slot * 32]);
  }
}

/* ---- host side ---- */

struct red_layout {
  int nk, nr;
  int64_t ksizes[EM_MAX_DIMS], kstrides[EM_MAX_DIMS], rsizes[EM_MAX_DIMS], rstrides[EM_MAX_DIMS];
  int64_t nout, nred;
  int red_contig, outputs_contig;
};

void make_layout(red_layout &L, const em_tensor *a, int nreduce) {
  int nkeep = a->ndim - nreduce;
  L.nk = em_rp_simplify(nkeep, a->sizes, a->strides, L.ksizes, L.kstrides);
  L.nr = em_rp_simplify(nreduce, a->sizes + nkeep, a->strides + nkeep, L.rsizes, L.rstrides);
  L.nout = emp_shape_numel(nkeep, a->sizes);
  L.nred = emp_shape_numel(nreduce, a->sizes + nkeep);
  L.red_contig = L.nr == 1 && L.rstrides[0] == 1;
  L.outputs_contig = L.kstrides[L.nk - 1] == 1;
}

struct red_call {
  const char *name;
  const em_tensor *a;
  const red_layout *L;
  int device;
  cudaStream_t stream;
};

template <typename T, int K> em_status launch(const red_call &c, const red_args &g, int norm) {
  typedef red_op<T, K> Op;
  typedef typename Op::state S;
  const red_layout &L = *c.L;
  em_rp_reduce plan;
  em_rp_plan_reduce(L.nout, L.nred, L.red_contig, L.outputs_contig, sizeof(T), sizeof(S), &plan);
  red_shape sh;
  sh.kept = em_geom_from(L.nk, L.ksizes, L.kstrides);
  sh.red = em_geom_from(L.nr, L.rsizes, L.rstrides);
  sh.nout = L.nout, sh.nred = L.nred, sh.chunk = plan.chunk, sh.splits = plan.splits;
  sh.lanes = plan.lanes, sh.lanes_fast = plan.lanes_fast, sh.contig = plan.lanes_fast && L.red_contig;
  Op op;
  op.norm = norm;
  op.p = 0;
  if constexpr (K == K_NORM) op.p = (typename Op::A)g.p;
  em_gpu_temp tmp(c.device);
  S *partial = nullptr;
  if (plan.splits > 1) EM_TEMP_OR_FAIL(partial = tmp.get<S>((size_t)L.nout * (size_t)plan.splits));
  reduce_kernel<T, K><<<dim3(plan.grid_x, plan.grid_y), EM_RP_THREADS, 0, c.stream>>>(
      (const T *)em_tensor_ptr(c.a), sh, g, op, partial);
  em_status st = em_gpu_launch_check(c.name);
  if (st || !partial) return st;
  combine_kernel<T, K><<<em_rp_combine_grid(L.nout), EM_RP_THREADS, 0, c.stream>>>(partial, L.nout, plan.splits, g, op);
  return em_gpu_launch_check(c.name);
}

template <int K> em_status run_kind(const red_call &c, const red_args &g, int norm) {
  switch (c.a->dtype) {
    case EM_FLOAT32: return launch<float, K>(c, g, norm);
    case EM_FLOAT64: return launch<double, K>(c, g, norm);
    case EM_FLOAT16: return launch<__half, K>(c, g, norm);
    case EM_BFLOAT16: return launch<__nv_bfloat16, K>(c, g, norm);
    default: break;
  }
  if constexpr (float_only(K)) {
    return em_set_error(EM_ERR_DTYPE, "%s: expected a floating tensor on cuda, got %s", c.name,
                        em_dtype_name(c.a->dtype));
  } else {
    switch (c.a->dtype) {
      case EM_INT32: return launch<int32_t, K>(c, g, norm);
      case EM_INT64: return launch<int64_t, K>(c, g, norm);
      case EM_UINT8: case EM_BOOL: return launch<uint8_t, K>(c, g, norm); /* bool is bytes 0/1 */
      default:
        return em_set_error(EM_ERR_DTYPE, "%s: dtype %s is not supported on cuda", c.name, em_dtype_name(c.a->dtype));
    }
  }
}

em_status run(int k, const red_call &c, const red_args &g, int norm) {
  switch (k) {
    case K_SUM: return run_kind<K_SUM>(c, g, norm);
    case K_PROD: return run_kind<K_PROD>(c, g, norm);
    case K_MAXV: return run_kind<K_MAXV>(c, g, norm);
    case K_MINV: return run_kind<K_MINV>(c, g, norm);
    case K_MAXI: return run_kind<K_MAXI>(c, g, norm);
    case K_MINI: return run_kind<K_MINI>(c, g, norm);
    case K_ANY: return run_kind<K_ANY>(c, g, norm);
    case K_ALL: return run_kind<K_ALL>(c, g, norm);
    case K_NORM: return run_kind<K_NORM>(c, g, norm);
    case K_SQDEV: return run_kind<K_SQDEV>(c, g, norm);
    default: return run_kind<K_SUMEXP>(c, g, norm);
  }
}

int kind_of(em_redop op, int with_indices) {
  switch (op) {
    case EM_PROD: return K_PROD;
    case EM_MAX: return with_indices ? K_MAXI : K_MAXV;
    case EM_MIN: return with_indices ? K_MINI : K_MINV;
    case EM_ARGMAX: return K_MAXI;
    case EM_ARGMIN: return K_MINI;
    case EM_ANY: return K_ANY;
    case EM_ALL: return K_ALL;
    case EM_NORM: return K_NORM;
    case EM_LOGSUMEXP: return K_SUMEXP;
    default: return K_SUM;
  }
}

int finish_of(em_redop op) {
  switch (op) {
    case EM_MEAN: return F_MEAN;
    case EM_ARGMAX: case EM_ARGMIN: return F_POS;
    case EM_ANY: case EM_ALL: return F_BOOL;
    case EM_LOGSUMEXP: return F_LSE;
    case EM_NORM: return F_NORM;
    default: return F_PLAIN;
  }
}

int norm_of(double p) {
  if (p == 2) return N_TWO;
  if (p == 1) return N_ONE;
  if (p == INFINITY) return N_INF;
  if (p == -INFINITY) return N_NEGINF;
  if (p == 0) return N_ZERO;
  return N_POW;
}

red_args args_for(em_tensor *out, const red_layout &L) {
  red_args g;
  memset(&g, 0, sizeof g);
  g.out = em_tensor_ptr(out);
  g.out_dtype = out->dtype;
  g.count = L.nred;
  g.center_scale = 1;
  return g;
}

} // namespace

extern "C" em_status em_gpu_reduce(em_redop op, em_tensor *out, em_tensor *indices, const em_tensor *a, int nreduce,
                                   double p, int base) {
  cudaStream_t stream;
  int device = a->storage->device.index;
  em_status st = em_gpu_enter("reduce", device, &stream);
  if (st) return st;
  red_layout L;
  make_layout(L, a, nreduce);
  if (L.nout == 0) return EM_OK;
  red_call c = {"reduce", a, &L, device, stream};
  red_args g = args_for(out, L);
  g.indices = indices ? (int64_t *)em_tensor_ptr(indices) : nullptr;
  g.base = base;
  g.p = p;
  g.finish = finish_of(op);
  if (op != EM_LOGSUMEXP) return run(kind_of(op, indices != nullptr), c, g, norm_of(p));
  em_gpu_temp tmp(device);
  double *center;
  EM_TEMP_OR_FAIL(center = tmp.get<double>((size_t)L.nout));
  red_args max_pass = g;
  max_pass.finish = F_CENTER, max_pass.center_out = center, max_pass.indices = nullptr;
  if ((st = run(K_MAXV, c, max_pass, N_TWO))) return st;
  g.center = center;
  return run(K_SUMEXP, c, g, N_TWO);
}

extern "C" em_status em_gpu_var(em_tensor *out, const em_tensor *a, int nreduce, double correction, int take_sqrt) {
  cudaStream_t stream;
  int device = a->storage->device.index;
  em_status st = em_gpu_enter("var", device, &stream);
  if (st) return st;
  red_layout L;
  make_layout(L, a, nreduce);
  if (L.nout == 0) return EM_OK;
  red_call c = {"var", a, &L, device, stream};
  em_gpu_temp tmp(device);
  double *center;
  EM_TEMP_OR_FAIL(center = tmp.get<double>((size_t)L.nout));
  red_args mean = args_for(out, L);
  mean.finish = F_CENTER, mean.center_out = center, mean.center_scale = 1.0 / (double)L.nred;
  if ((st = run(K_SUM, c, mean, N_TWO))) return st;
  red_args dev = args_for(out, L);
  dev.finish = F_VAR, dev.center = center, dev.correction = correction, dev.take_sqrt = take_sqrt;
  return run(K_SQDEV, c, dev, N_TWO);
}

extern "C" void em_gpu_register_reduce(em_backend *be) {
  be->reduce = em_gpu_reduce;
  be->var = em_gpu_var;
  be->scan = em_gpu_scan;
  be->softmax = em_gpu_softmax;
  be->sort = em_gpu_sort;
}
