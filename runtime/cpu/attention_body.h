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
 * not be attended to). Returns the number of columns of the tile any row may see. */
static void FN(score_tile)(const cpu_attn_args *a, int64_t bh, const SCALAR *q, const SCALAR *k, int64_t i0, int64_t nr,
                           int64_t j0, int64_t nc, SCALAR *s) {
  GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nr, (int)nc, (int)a->D, (SCALAR)a->scale, q + i0 * a->D, (int)a->D,
       k + j0 * a->D, (int)a->D, 0, s, (int)nc);
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

static void FN(attn_forward_task)(const cpu_attn_args *a, int64_t bh, int64_t i0, int64_t nr, const SCALAR *q,
                                  const SCALAR *k, const SCALAR *v, SCALAR *out, SCALAR *lse, SCALAR *s, SCALAR *acc,
                                  SCALAR *m, SCALAR *l) {
  int64_t Tk = a->Tk, Dv = a->Dv;
  for (int64_t r = 0; r < nr; r++) m[r] = -INFINITY, l[r] = 0;
  memset(acc, 0, (size_t)(nr * Dv) * sizeof(SCALAR));
  int64_t jend = a->causal ? (i0 + nr < Tk ? i0 + nr : Tk) : Tk; /* keys past the last row's diagonal: unseen */
  for (int64_t j0 = 0; j0 < jend; j0 += ATTN_BC) {
    int64_t nc = jend - j0 < ATTN_BC ? jend - j0 : ATTN_BC;
    FN(score_tile)(a, bh, q, k, i0, nr, j0, nc, s);
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
    GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nr, (int)Dv, (int)nc, 1, s, (int)nc, v + j0 * Dv, (int)Dv, 1,
         acc, (int)Dv);
  }
  for (int64_t r = 0; r < nr; r++) {
    SCALAR inv = l[r] > 0 ? 1 / l[r] : 0;
    for (int64_t d = 0; d < Dv; d++) out[(i0 + r) * Dv + d] = acc[r * Dv + d] * inv;
    lse[i0 + r] = l[r] > 0 ? m[r] + LOG(l[r]) : -INFINITY;
  }
}

static int FN(attn_forward)(const cpu_attn_args *a, SCALAR *out, SCALAR *lse, const SCALAR *q, const SCALAR *k,
                            const SCALAR *v, int threads) {
  int64_t nqb = (a->Tq + ATTN_BR - 1) / ATTN_BR, tasks = a->BH * nqb;
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
      (a, bh, i0, nr, q + bh * a->Tq * a->D, k + bh * a->Tk * a->D, v + bh * a->Tk * a->Dv, out + bh * a->Tq * a->Dv,
       lse + bh * a->Tq, s, acc, m, l);
    }
    free(s);
  }
  return failed;
}

/* one batch*head: gq [Tq, D], gk [Tk, D], gv [Tk, Dv] (all overwritten) */
static void FN(attn_backward_bh)(const cpu_attn_args *a, int64_t bh, SCALAR *gq, SCALAR *gk, SCALAR *gv,
                                 const SCALAR *go, const SCALAR *q, const SCALAR *k, const SCALAR *v, const SCALAR *o,
                                 const SCALAR *lse, SCALAR *p, SCALAR *dp, SCALAR *drow) {
  int64_t Tq = a->Tq, Tk = a->Tk, D = a->D, Dv = a->Dv;
  SCALAR scale = (SCALAR)a->scale;
  for (int64_t i = 0; i < Tq; i++) drow[i] = FN(dot_row)(Dv, go + i * Dv, o + i * Dv);
  memset(gq, 0, (size_t)(Tq * D) * sizeof(SCALAR));
  memset(gk, 0, (size_t)(Tk * D) * sizeof(SCALAR));
  memset(gv, 0, (size_t)(Tk * Dv) * sizeof(SCALAR));
  for (int64_t j0 = 0; j0 < Tk; j0 += ATTN_BC) {
    int64_t nc = Tk - j0 < ATTN_BC ? Tk - j0 : ATTN_BC;
    for (int64_t i0 = a->causal ? j0 / ATTN_BR * ATTN_BR : 0; i0 < Tq; i0 += ATTN_BR) {
      int64_t nr = Tq - i0 < ATTN_BR ? Tq - i0 : ATTN_BR;
      FN(score_tile)(a, bh, q, k, i0, nr, j0, nc, p);
      for (int64_t r = 0; r < nr; r++) {
        SCALAR L = lse[i0 + r];
        if (L == -INFINITY) memset(p + r * nc, 0, (size_t)nc * sizeof(SCALAR)); /* a row that sees no key */
        else FN(exp_row)(nc, p + r * nc, L);
      }
      /* dp = dO V^T */
      GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nr, (int)nc, (int)Dv, 1, go + i0 * Dv, (int)Dv, v + j0 * Dv,
           (int)Dv, 0, dp, (int)nc);
      if (a->dropout_p > 0) { /* the kept mask / (1 - p) on both: dV uses the dropped P, dS the undropped */
        memcpy(dp + nr * nc, p, (size_t)(nr * nc) * sizeof(SCALAR)); /* spare room: the dropped P */
        FN(dropout_tile)(a, bh, i0, nr, j0, nc, dp + nr * nc);
        GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nc, (int)Dv, (int)nr, 1, dp + nr * nc, (int)nc, go + i0 * Dv,
             (int)Dv, 1, gv + j0 * Dv, (int)Dv);
        FN(dropout_tile)(a, bh, i0, nr, j0, nc, dp);
      } else {
        GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nc, (int)Dv, (int)nr, 1, p, (int)nc, go + i0 * Dv, (int)Dv,
             1, gv + j0 * Dv, (int)Dv);
      }
      FN(ds_tile)(nr, nc, p, dp, drow + i0); /* p becomes dS */
      GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nr, (int)D, (int)nc, scale, p, (int)nc, k + j0 * D, (int)D,
           1, gq + i0 * D, (int)D);
      GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nc, (int)D, (int)nr, scale, p, (int)nc, q + i0 * D, (int)D, 1,
           gk + j0 * D, (int)D);
    }
  }
}

static int FN(attn_backward)(const cpu_attn_args *a, SCALAR *gq, SCALAR *gk, SCALAR *gv, const SCALAR *go,
                             const SCALAR *q, const SCALAR *k, const SCALAR *v, const SCALAR *o, const SCALAR *lse,
                             int threads) {
  int failed = 0;
#pragma omp parallel num_threads(threads) if (threads > 1) reduction(| : failed)
  {
    SCALAR *p = malloc(sizeof(SCALAR) * (size_t)(3 * ATTN_BR * ATTN_BC + a->Tq));
    if (!p) failed = 1;
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < a->BH; bh++) {
      if (!p) continue;
      int64_t Tq = a->Tq, Tk = a->Tk, D = a->D, Dv = a->Dv;
      FN(attn_backward_bh)
      (a, bh, gq + bh * Tq * D, gk + bh * Tk * D, gv + bh * Tk * Dv, go + bh * Tq * Dv, q + bh * Tq * D,
       k + bh * Tk * D, v + bh * Tk * Dv, o + bh * Tq * Dv, lse + bh * Tq, p, p + ATTN_BR * ATTN_BC,
       p + 3 * ATTN_BR * ATTN_BC);
    }
    free(p);
  }
  return failed;
}

#undef FN
#undef CAT
#undef CAT_
