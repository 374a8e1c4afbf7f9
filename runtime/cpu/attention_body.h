/* attention_body.h - fused scaled-dot-product attention for one dtype, included by
 * attention.c with SCALAR, SFX, GEMM (cblas's gemm of that type), EXP and LOG defined.
 *
 * Forward (FlashAttention's schedule on a CPU): each task is one (batch*head, block of BR
 * query rows); it walks the keys in blocks of BC, computes the score tile with one GEMM,
 * masks it, and folds it into a running row maximum m, row sum l and output accumulator
 * (rescaled by exp(m_old - m_new) when the maximum grows), so only [BR, BC] scores exist
 * at a time. The output is acc / l and lse = m + log l is kept.
 * Backward (per batch*head, so that dK and dV have one writer): the tiles are recomputed
 * as P = exp(S - lse); with Drow = rowsum(dO * O): dV += P^T dO, dP = dO V^T,
 * dS = P * (dP - Drow), dQ += dS K * scale, dK += dS^T Q * scale (dropout multiplies P
 * by the kept mask / (1 - p) where the output used it). */

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(name) CAT(name, SFX)

/* The tiles' row loops, kept out of the OpenMP bodies that call them: inlined into an
 * outlined parallel region, GCC 12 leaves them scalar (EXP one call per element). Their
 * reductions run in ATTN_LANES independent lanes, combined at the end: a single running
 * max or sum is a dependency chain GCC will not reorder without -ffast-math, which kept
 * these loops scalar (half of a T = 64 forward). */
#ifndef ATTN_LANES
#define ATTN_LANES 16
/* Operand i's row stride and batch*head bh's first element (em_attn_params' layouts;
 * contiguous [BH, T, D] where they are not given) */
#define ATTN_RS(a, i, dflt) ((a)->row_stride[i] ? (a)->row_stride[i] : (dflt))
#define ATTN_OFF(a, i, bh, per_bh) ((a)->bh_offset[i] ? (a)->bh_offset[i][bh] : (bh) * (per_bh))
#endif
__attribute__((noinline)) static SCALAR FN(row_max)(int64_t n, const SCALAR *restrict row, SCALAR mx) {
  SCALAR lane[ATTN_LANES];
  for (int j = 0; j < ATTN_LANES; j++) lane[j] = mx;
  int64_t c = 0;
  for (; c + ATTN_LANES <= n; c += ATTN_LANES)
    for (int j = 0; j < ATTN_LANES; j++) lane[j] = row[c + j] > lane[j] ? row[c + j] : lane[j];
  for (int j = 0; c + j < n; j++) lane[j] = row[c + j] > lane[j] ? row[c + j] : lane[j];
  for (int j = 0; j < ATTN_LANES; j++) mx = lane[j] > mx ? lane[j] : mx;
  return mx;
}

/* row[c] = exp(row[c] - sub) (arguments <= 0 up to rounding: sub is the row's maximum or
 * log-sum-exp), returning the row's sum */
__attribute__((noinline)) static SCALAR FN(exp_row)(int64_t n, SCALAR *restrict row, SCALAR sub) {
  SCALAR lane[ATTN_LANES] = {0};
  int64_t c = 0;
  for (; c + ATTN_LANES <= n; c += ATTN_LANES)
    for (int j = 0; j < ATTN_LANES; j++) {
      SCALAR e = EXPNP(row[c + j] - sub);
      row[c + j] = e;
      lane[j] += e;
    }
  for (int j = 0; c + j < n; j++) {
    SCALAR e = EXPNP(row[c + j] - sub);
    row[c + j] = e;
    lane[j] += e;
  }
  for (int w = ATTN_LANES / 2; w; w /= 2)
    for (int j = 0; j < w; j++) lane[j] += lane[j + w];
  return lane[0];
}

__attribute__((noinline)) static void FN(scale_row)(int64_t n, SCALAR *restrict row, SCALAR f) {
  for (int64_t c = 0; c < n; c++) row[c] *= f;
}

/* dS = P * (dP - Drow) over a tile, in place in p */
__attribute__((noinline)) static void FN(ds_tile)(int64_t nr, int64_t nc, SCALAR *restrict p,
                                                  const SCALAR *restrict dp, const SCALAR *restrict drow) {
  for (int64_t r = 0; r < nr; r++)
    for (int64_t c = 0; c < nc; c++) p[r * nc + c] *= dp[r * nc + c] - drow[r];
}

__attribute__((noinline)) static SCALAR FN(dot_row)(int64_t n, const SCALAR *restrict a, const SCALAR *restrict b) {
  SCALAR lane[ATTN_LANES] = {0};
  int64_t d = 0;
  for (; d + ATTN_LANES <= n; d += ATTN_LANES)
    for (int j = 0; j < ATTN_LANES; j++) lane[j] += a[d + j] * b[d + j];
  for (int j = 0; d + j < n; j++) lane[j] += a[d + j] * b[d + j];
  for (int w = ATTN_LANES / 2; w; w /= 2)
    for (int j = 0; j < w; j++) lane[j] += lane[j + w];
  return lane[0];
}

/* s [nr, nc] = scale * q[i0.., :] k[j0.., :]^T with the mask applied (-inf where a key may
 * not be attended to); q and k are batch*head bh's rows, qrs and krs apart. */
static void FN(score_tile)(const cpu_attn_args *a, int64_t bh, const SCALAR *q, int64_t qrs, const SCALAR *k,
                           int64_t krs, int64_t i0, int64_t nr, int64_t j0, int64_t nc, SCALAR *s) {
  GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nr, (int)nc, (int)a->D, (SCALAR)a->scale, q + i0 * qrs, (int)qrs,
       k + j0 * krs, (int)krs, 0, s, (int)nc);
  if (!a->causal && !a->mask_ptr) return;
  for (int64_t r = 0; r < nr; r++) {
    SCALAR *row = s + r * nc;
    int64_t i = i0 + r;
    if (a->causal)
      for (int64_t c = (i + 1 - j0 > 0 ? i + 1 - j0 : 0); c < nc; c++) row[c] = -INFINITY;
    if (a->mask_ptr) {
      int64_t base = a->mask_bh_offset[bh] + i * a->mask_rs + j0 * a->mask_cs;
      if (a->mask_is_bool) {
        const uint8_t *m = (const uint8_t *)a->mask_ptr + base;
        for (int64_t c = 0; c < nc; c++)
          if (!m[c * a->mask_cs]) row[c] = -INFINITY;
      } else {
        const SCALAR *m = (const SCALAR *)a->mask_ptr + base;
        for (int64_t c = 0; c < nc; c++) row[c] += m[c * a->mask_cs];
      }
    }
  }
}

/* p[r, c] *= keep / (1 - p) for the tile's dropout mask */
static void FN(dropout_tile)(const cpu_attn_args *a, int64_t bh, int64_t i0, int64_t nr, int64_t j0, int64_t nc,
                             SCALAR *p) {
  uint32_t threshold =
      (uint32_t)(a->dropout_p * 4294967296.0 > 4294967295.0 ? 4294967295.0 : a->dropout_p * 4294967296.0);
  SCALAR keep = (SCALAR)(1 / (1 - a->dropout_p));
  for (int64_t r = 0; r < nr; r++)
    for (int64_t c = 0; c < nc; c++) {
      uint64_t e = (uint64_t)((bh * a->Tq + i0 + r) * a->Tk + j0 + c);
      em_philox4 w = em_philox_block(a->seed, a->offset + e / 4);
      p[r * nc + c] *= w.x[e % 4] >= threshold ? keep : 0;
    }
}

/* One task: query rows [i0, i0 + nr) of batch*head bh, whose q, k, v and out rows are
 * qrs, krs, vrs and ors elements apart. */
static void FN(attn_forward_task)(const cpu_attn_args *a, int64_t bh, int64_t i0, int64_t nr, const SCALAR *q,
                                  int64_t qrs, const SCALAR *k, int64_t krs, const SCALAR *v, int64_t vrs, SCALAR *out,
                                  int64_t ors, SCALAR *lse, SCALAR *s, SCALAR *acc, SCALAR *m, SCALAR *l) {
  int64_t Tk = a->Tk, Dv = a->Dv;
  for (int64_t r = 0; r < nr; r++) m[r] = -INFINITY, l[r] = 0;
  memset(acc, 0, (size_t)(nr * Dv) * sizeof(SCALAR));
  int64_t jend = a->causal ? (i0 + nr < Tk ? i0 + nr : Tk) : Tk; /* keys past the last row's diagonal: unseen */
  for (int64_t j0 = 0; j0 < jend; j0 += ATTN_BC) {
    int64_t nc = jend - j0 < ATTN_BC ? jend - j0 : ATTN_BC;
    FN(score_tile)(a, bh, q, qrs, k, krs, i0, nr, j0, nc, s);
    for (int64_t r = 0; r < nr; r++) {
      SCALAR *row = s + r * nc, mx = FN(row_max)(nc, row, m[r]);
      if (mx == -INFINITY) { /* nothing visible yet in this row */
        memset(row, 0, (size_t)nc * sizeof(SCALAR));
        continue;
      }
      SCALAR alpha = EXP(m[r] - mx), sum = FN(exp_row)(nc, row, mx);
      l[r] = l[r] * alpha + sum;
      m[r] = mx;
      if (alpha != 1) FN(scale_row)(Dv, acc + r * Dv, alpha);
    }
    if (a->dropout_p > 0) FN(dropout_tile)(a, bh, i0, nr, j0, nc, s);
    GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nr, (int)Dv, (int)nc, 1, s, (int)nc, v + j0 * vrs, (int)vrs, 1,
         acc, (int)Dv);
  }
  for (int64_t r = 0; r < nr; r++) {
    SCALAR inv = l[r] > 0 ? 1 / l[r] : 0;
    for (int64_t d = 0; d < Dv; d++) out[(i0 + r) * ors + d] = acc[r * Dv + d] * inv;
    lse[i0 + r] = l[r] > 0 ? m[r] + LOG(l[r]) : -INFINITY;
  }
}

static int FN(attn_forward)(const cpu_attn_args *a, SCALAR *out, SCALAR *lse, const SCALAR *q, const SCALAR *k,
                            const SCALAR *v, int threads) {
  int64_t nqb = (a->Tq + ATTN_BR - 1) / ATTN_BR, tasks = a->BH * nqb;
  int64_t qrs = ATTN_RS(a, EM_ATTN_Q, a->D), krs = ATTN_RS(a, EM_ATTN_K, a->D), vrs = ATTN_RS(a, EM_ATTN_V, a->Dv),
          ors = ATTN_RS(a, EM_ATTN_OUT, a->Dv);
  int failed = 0;
#pragma omp parallel num_threads(threads) if (threads > 1) reduction(| : failed)
  {
    SCALAR *s = malloc(sizeof(SCALAR) * (size_t)(ATTN_BR * ATTN_BC + ATTN_BR * a->Dv + 2 * ATTN_BR));
    if (!s) failed = 1;
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; task++) {
      if (!s) continue;
      int64_t bh = task / nqb, i0 = (task % nqb) * ATTN_BR;
      int64_t nr = a->Tq - i0 < ATTN_BR ? a->Tq - i0 : ATTN_BR;
      SCALAR *acc = s + ATTN_BR * ATTN_BC, *m = acc + ATTN_BR * a->Dv, *l = m + ATTN_BR;
      FN(attn_forward_task)
      (a, bh, i0, nr, q + ATTN_OFF(a, EM_ATTN_Q, bh, a->Tq * a->D), qrs, k + ATTN_OFF(a, EM_ATTN_K, bh, a->Tk * a->D),
       krs, v + ATTN_OFF(a, EM_ATTN_V, bh, a->Tk * a->Dv), vrs, out + ATTN_OFF(a, EM_ATTN_OUT, bh, a->Tq * a->Dv), ors,
       lse + bh * a->Tq, s, acc, m, l);
    }
    free(s);
  }
  return failed;
}

/* one batch*head: gq [Tq, D], gk [Tk, D], gv [Tk, Dv] (all overwritten), each laid out as
 * q, k and v; rows of the operands L[i] apart */
static void FN(attn_backward_bh)(const cpu_attn_args *a, int64_t bh, const int64_t *L, SCALAR *gq, SCALAR *gk,
                                 SCALAR *gv, const SCALAR *go, const SCALAR *q, const SCALAR *k, const SCALAR *v,
                                 const SCALAR *o, const SCALAR *lse, SCALAR *p, SCALAR *dp, SCALAR *drow) {
  int64_t Tq = a->Tq, Tk = a->Tk, D = a->D, Dv = a->Dv;
  int64_t qrs = L[EM_ATTN_Q], krs = L[EM_ATTN_K], vrs = L[EM_ATTN_V], ors = L[EM_ATTN_OUT], grs = L[EM_ATTN_GOUT];
  SCALAR scale = (SCALAR)a->scale;
  for (int64_t i = 0; i < Tq; i++) drow[i] = FN(dot_row)(Dv, go + i * grs, o + i * ors);
  for (int64_t i = 0; i < Tq; i++) memset(gq + i * qrs, 0, (size_t)D * sizeof(SCALAR));
  for (int64_t j = 0; j < Tk; j++) memset(gk + j * krs, 0, (size_t)D * sizeof(SCALAR));
  for (int64_t j = 0; j < Tk; j++) memset(gv + j * vrs, 0, (size_t)Dv * sizeof(SCALAR));
  for (int64_t j0 = 0; j0 < Tk; j0 += ATTN_BC) {
    int64_t nc = Tk - j0 < ATTN_BC ? Tk - j0 : ATTN_BC;
    for (int64_t i0 = a->causal ? j0 / ATTN_BR * ATTN_BR : 0; i0 < Tq; i0 += ATTN_BR) {
      int64_t nr = Tq - i0 < ATTN_BR ? Tq - i0 : ATTN_BR;
      FN(score_tile)(a, bh, q, qrs, k, krs, i0, nr, j0, nc, p);
      for (int64_t r = 0; r < nr; r++) {
        SCALAR Lr = lse[i0 + r];
        if (Lr == -INFINITY) memset(p + r * nc, 0, (size_t)nc * sizeof(SCALAR)); /* a row that sees no key */
        else FN(exp_row)(nc, p + r * nc, Lr);
      }
      /* dp = dO V^T */
      GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nr, (int)nc, (int)Dv, 1, go + i0 * grs, (int)grs, v + j0 * vrs,
           (int)vrs, 0, dp, (int)nc);
      if (a->dropout_p > 0) { /* the kept mask / (1 - p) on both: dV uses the dropped P, dS the undropped */
        memcpy(dp + nr * nc, p, (size_t)(nr * nc) * sizeof(SCALAR)); /* spare room: the dropped P */
        FN(dropout_tile)(a, bh, i0, nr, j0, nc, dp + nr * nc);
        GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nc, (int)Dv, (int)nr, 1, dp + nr * nc, (int)nc,
             go + i0 * grs, (int)grs, 1, gv + j0 * vrs, (int)vrs);
        FN(dropout_tile)(a, bh, i0, nr, j0, nc, dp);
      } else {
        GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nc, (int)Dv, (int)nr, 1, p, (int)nc, go + i0 * grs,
             (int)grs, 1, gv + j0 * vrs, (int)vrs);
      }
      FN(ds_tile)(nr, nc, p, dp, drow + i0); /* p becomes dS */
      GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nr, (int)D, (int)nc, scale, p, (int)nc, k + j0 * krs,
           (int)krs, 1, gq + i0 * qrs, (int)qrs);
      GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nc, (int)D, (int)nr, scale, p, (int)nc, q + i0 * qrs, (int)qrs,
           1, gk + j0 * krs, (int)krs);
    }
  }
}

static int FN(attn_backward)(const cpu_attn_args *a, SCALAR *gq, SCALAR *gk, SCALAR *gv, const SCALAR *go,
                             const SCALAR *q, const SCALAR *k, const SCALAR *v, const SCALAR *o, const SCALAR *lse,
                             int threads) {
  int64_t Tq = a->Tq, Tk = a->Tk, D = a->D, Dv = a->Dv;
  const int64_t L[5] = {ATTN_RS(a, EM_ATTN_Q, D), ATTN_RS(a, EM_ATTN_K, D), ATTN_RS(a, EM_ATTN_V, Dv),
                        ATTN_RS(a, EM_ATTN_OUT, Dv), ATTN_RS(a, EM_ATTN_GOUT, Dv)};
  int failed = 0;
#pragma omp parallel num_threads(threads) if (threads > 1) reduction(| : failed)
  {
    SCALAR *p = malloc(sizeof(SCALAR) * (size_t)(3 * ATTN_BR * ATTN_BC + a->Tq));
    if (!p) failed = 1;
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < a->BH; bh++) {
      if (!p) continue;
      int64_t oq = ATTN_OFF(a, EM_ATTN_Q, bh, Tq * D), ok = ATTN_OFF(a, EM_ATTN_K, bh, Tk * D),
              ov = ATTN_OFF(a, EM_ATTN_V, bh, Tk * Dv);
      FN(attn_backward_bh)
      (a, bh, L, gq + oq, gk + ok, gv + ov, go + ATTN_OFF(a, EM_ATTN_GOUT, bh, Tq * Dv), q + oq, k + ok, v + ov,
       o + ATTN_OFF(a, EM_ATTN_OUT, bh, Tq * Dv), lse + bh * Tq, p, p + ATTN_BR * ATTN_BC, p + 3 * ATTN_BR * ATTN_BC);
    }
    free(p);
  }
  return failed;
}

#undef FN
#undef CAT
#undef CAT_
