/* rnn_body.h - the recurrent layers' forward and backward for one dtype, included by
 * rnn.c once per dtype with SCALAR (the C type), SFX (the name suffix), GEMM (cblas's
 * gemm of that type, for the products over all steps), GEMM_STEP (the same, for each
 * step's recurrent product) and EXP, TANH (libm's functions of that type) defined.
 *
 * Forward: the input projection of every step is one GEMM, x [T*B, I] @ w_ih^T; each
 * step adds h_prev @ w_hh^T with one GEMM (written into the step's gate rows, except the
 * GRU, whose hidden projection n-part is gated by r and so is kept apart) and finishes in
 * one pass over [B, G*H] that applies the biases and nonlinearities and updates the state.
 * Backward walks the steps in reverse, turning each step's state gradient into its gate
 * gradients in one pass and carrying it to the previous state with one GEMM (@ w_hh);
 * the weight gradients and the input gradient are then three GEMMs over all steps. */

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(name) CAT(name, SFX)

static inline SCALAR FN(sigm)(SCALAR v) { return (SCALAR)1 / ((SCALAR)1 + EXP(-v)); }

/* The LSTM's and GRU's cell over one batch row (H units), kept out of the OpenMP loop
 * that calls them: inlined into its outlined body, GCC 12 leaves these loops scalar. */
__attribute__((noinline)) static void FN(lstm_row)(int64_t H, SCALAR *restrict a, const SCALAR *restrict bih,
                                                   const SCALAR *restrict bhh, const SCALAR *restrict cp,
                                                   SCALAR *restrict cn, SCALAR *restrict h, SCALAR *restrict y) {
  for (int64_t j = 0; j < H; j++) {
    SCALAR i = FN(sigm)(a[j] + bih[j] + bhh[j]);
    SCALAR f = FN(sigm)(a[H + j] + bih[H + j] + bhh[H + j]);
    SCALAR g = TANH(a[2 * H + j] + bih[2 * H + j] + bhh[2 * H + j]);
    SCALAR o = FN(sigm)(a[3 * H + j] + bih[3 * H + j] + bhh[3 * H + j]);
    SCALAR c = f * cp[j] + i * g;
    a[j] = i, a[H + j] = f, a[2 * H + j] = g, a[3 * H + j] = o;
    cn[j] = c;
    SCALAR hv = o * TANH(c);
    h[j] = hv;
    y[j] = hv;
  }
}

/* PyTorch's GRU: n = tanh(W_in x + b_in + r * (W_hn h + b_hn)); a keeps r, z, n, W_hn h + b_hn */
__attribute__((noinline)) static void FN(gru_row)(int64_t H, SCALAR *restrict a, const SCALAR *restrict p,
                                                  const SCALAR *restrict g, const SCALAR *restrict bih,
                                                  const SCALAR *restrict bhh, const SCALAR *restrict hp,
                                                  SCALAR *restrict h, SCALAR *restrict y) {
  for (int64_t j = 0; j < H; j++) {
    SCALAR r = FN(sigm)(p[j] + bih[j] + g[j] + bhh[j]);
    SCALAR z = FN(sigm)(p[H + j] + bih[H + j] + g[H + j] + bhh[H + j]);
    SCALAR hh = g[2 * H + j] + bhh[2 * H + j];
    SCALAR n = TANH(p[2 * H + j] + bih[2 * H + j] + r * hh);
    a[j] = r, a[H + j] = z, a[2 * H + j] = n, a[3 * H + j] = hh;
    SCALAR hv = (1 - z) * n + z * hp[j];
    h[j] = hv;
    y[j] = hv;
  }
}

__attribute__((noinline)) static void FN(lstm_row_backward)(int64_t H, const SCALAR *restrict a,
                                                            const SCALAR *restrict dh, const SCALAR *restrict gy,
                                                            const SCALAR *restrict cp, const SCALAR *restrict cn,
                                                            SCALAR *restrict dc, SCALAR *restrict gi,
                                                            SCALAR *restrict dhn) {
  for (int64_t j = 0; j < H; j++) {
    SCALAR i = a[j], f = a[H + j], g = a[2 * H + j], o = a[3 * H + j], gh = dh[j] + gy[j];
    SCALAR tc = TANH(cn[j]);
    SCALAR dcc = dc[j] + gh * o * (1 - tc * tc);
    gi[j] = dcc * g * i * (1 - i);
    gi[H + j] = dcc * cp[j] * f * (1 - f);
    gi[2 * H + j] = dcc * i * (1 - g * g);
    gi[3 * H + j] = gh * tc * o * (1 - o);
    dc[j] = dcc * f;
    dhn[j] = 0;
  }
}

__attribute__((noinline)) static void FN(gru_row_backward)(int64_t H, const SCALAR *restrict a,
                                                           const SCALAR *restrict dh, const SCALAR *restrict gy,
                                                           const SCALAR *restrict hp, SCALAR *restrict gi,
                                                           SCALAR *restrict gg, SCALAR *restrict dhn) {
  for (int64_t j = 0; j < H; j++) {
    SCALAR r = a[j], z = a[H + j], n = a[2 * H + j], hh = a[3 * H + j], gh = dh[j] + gy[j];
    SCALAR dan = gh * (1 - z) * (1 - n * n);
    SCALAR dar = dan * hh * r * (1 - r), daz = gh * (hp[j] - n) * z * (1 - z);
    gi[j] = dar, gg[j] = dar;
    gi[H + j] = daz, gg[H + j] = daz;
    gi[2 * H + j] = dan;
    gg[2 * H + j] = dan * r;
    dhn[j] = gh * z;
  }
}

/* One step's cell over the batch rows: gates a (LSTM/RNN: pre-activations on entry, the
 * activations on exit), for the GRU the input projection p and hidden projection g. The
 * biases are arrays (zeros when the layer has none), so that the loops over the hidden
 * units have no branches and vectorise. */
static void FN(cell_forward)(const cpu_rnn_dims *d, int64_t t, SCALAR *a, const SCALAR *p, const SCALAR *g,
                             const SCALAR *hp, SCALAR *hn, const SCALAR *cp, SCALAR *cn, SCALAR *y, const SCALAR *bih,
                             const SCALAR *bhh, int par) {
  int64_t B = d->B, H = d->H, W = cpu_rnn_act_width(d->mode, H);
  int mode = d->mode;
#pragma omp parallel for schedule(static) if (par) num_threads(em_get_num_threads())
  for (int64_t b = 0; b < B; b++) {
    SCALAR *restrict ab = a + b * W, *restrict hb = hn + b * H, *restrict yb = y + b * H;
    const SCALAR *restrict hpb = hp + b * H;
    if (d->lengths && t >= d->lengths[b]) { /* past the end: the state stays, the output is zero */
      memcpy(hb, hpb, (size_t)H * sizeof(SCALAR));
      if (cn) memcpy(cn + b * H, cp + b * H, (size_t)H * sizeof(SCALAR));
      memset(yb, 0, (size_t)H * sizeof(SCALAR));
      memset(ab, 0, (size_t)W * sizeof(SCALAR));
      continue;
    }
    if (mode == EM_RNN_TANH || mode == EM_RNN_RELU) {
      for (int64_t j = 0; j < H; j++) {
        SCALAR v = ab[j] + bih[j] + bhh[j];
        v = mode == EM_RNN_TANH ? TANH(v) : (v > 0 ? v : 0);
        ab[j] = hb[j] = yb[j] = v;
      }
    } else if (mode == EM_RNN_LSTM) {
      FN(lstm_row)(H, ab, bih, bhh, cp + b * H, cn + b * H, hb, yb);
    } else {
      FN(gru_row)(H, ab, p + b * 3 * H, g + b * 3 * H, bih, bhh, hpb, hb, yb);
    }
  }
}

/* pre: the input projections [T*B, G*H] (the act buffer itself unless GRU); gh: [B, 3H]
 * scratch for the GRU's hidden projection. */
static void FN(rnn_forward)(const cpu_rnn_dims *d, SCALAR *y, SCALAR *sh, SCALAR *sc, SCALAR *act, SCALAR *pre,
                            SCALAR *gh, const SCALAR *x, const SCALAR *h0, const SCALAR *c0, const SCALAR *wih,
                            const SCALAR *whh, const SCALAR *bih, const SCALAR *bhh) {
  int64_t T = d->T, B = d->B, NI = d->NI, H = d->H, GH = cpu_rnn_gates(d->mode) * H, BH = B * H;
  int64_t W = cpu_rnn_act_width(d->mode, H);
  int gru = d->mode == EM_RNN_GRU;
  int par = em_get_num_threads() > 1 && B > 1 && B * GH >= 16384 && !omp_in_parallel();
  GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(T * B), (int)GH, (int)NI, 1, x, (int)NI, wih, (int)NI, 0, pre,
       (int)GH);
  int64_t first = d->reverse ? T : 0;
  if (h0) memcpy(sh + first * BH, h0, (size_t)BH * sizeof(SCALAR));
  else memset(sh + first * BH, 0, (size_t)BH * sizeof(SCALAR));
  if (sc) {
    if (c0) memcpy(sc + first * BH, c0, (size_t)BH * sizeof(SCALAR));
    else memset(sc + first * BH, 0, (size_t)BH * sizeof(SCALAR));
  }
#ifdef FUSED_FORWARD
  if (cpu_lstm_fused_wanted(d) && !FUSED_FORWARD(d, y, sh, sc, act, whh, bih, bhh, ag_autocast_cpu_bf16())) return;
#endif
  for (int64_t s = 0; s < T; s++) {
    int64_t t = d->reverse ? T - 1 - s : s, prev = d->reverse ? t + 1 : t, next = d->reverse ? t : t + 1;
    const SCALAR *hp = sh + prev * BH;
    SCALAR *a = act + t * B * W;
    if (gru) /* kept apart: its n-part is multiplied by r */
      GEMM_STEP(CblasRowMajor, CblasNoTrans, CblasTrans, (int)B, (int)GH, (int)H, 1, hp, (int)H, whh, (int)H, 0, gh,
           (int)GH);
    else /* added to the step's input projection in place */
      GEMM_STEP(CblasRowMajor, CblasNoTrans, CblasTrans, (int)B, (int)GH, (int)H, 1, hp, (int)H, whh, (int)H, 1, a, (int)GH);
    FN(cell_forward)
    (d, t, a, gru ? pre + t * B * GH : NULL, gh, hp, sh + next * BH, sc ? sc + prev * BH : NULL,
     sc ? sc + next * BH : NULL, y + t * BH, bih, bhh, par);
  }
}

/* One step's cell backward: from dh (the state's gradient after the step, output gradient
 * not yet added) and dc (LSTM, updated in place to the previous cell state's gradient),
 * the gate gradients dgi (input side) and dgh (hidden side; the same rows except for the
 * GRU) and dhn, the part of the previous state's gradient that does not go through w_hh. */
static void FN(cell_backward)(const cpu_rnn_dims *d, int64_t t, const SCALAR *a, const SCALAR *gy, const SCALAR *dh,
                              SCALAR *dc, SCALAR *dhn, SCALAR *dgi, SCALAR *dgh, const SCALAR *hp, const SCALAR *cp,
                              const SCALAR *cn, int par) {
  int64_t B = d->B, H = d->H, G = cpu_rnn_gates(d->mode), W = cpu_rnn_act_width(d->mode, H);
  int mode = d->mode;
#pragma omp parallel for schedule(static) if (par) num_threads(em_get_num_threads())
  for (int64_t b = 0; b < B; b++) {
    /* gy is never NULL here: zeros when the output got no gradient */
    const SCALAR *restrict ab = a + b * W, *restrict dhb = dh + b * H, *restrict gyb = gy + b * H;
    SCALAR *restrict gi = dgi + b * G * H, *gg = dgh + b * G * H, *restrict dnb = dhn + b * H;
    if (d->lengths && t >= d->lengths[b]) { /* the state passed through unchanged */
      memset(gi, 0, (size_t)(G * H) * sizeof(SCALAR));
      if (gg != gi) memset(gg, 0, (size_t)(G * H) * sizeof(SCALAR));
      memcpy(dnb, dhb, (size_t)H * sizeof(SCALAR));
      continue;
    }
    if (mode == EM_RNN_TANH) {
      for (int64_t j = 0; j < H; j++) gi[j] = (dhb[j] + gyb[j]) * (1 - ab[j] * ab[j]), dnb[j] = 0;
    } else if (mode == EM_RNN_RELU) {
      for (int64_t j = 0; j < H; j++) gi[j] = ab[j] > 0 ? dhb[j] + gyb[j] : 0, dnb[j] = 0;
    } else if (mode == EM_RNN_LSTM) {
      FN(lstm_row_backward)(H, ab, dhb, gyb, cp + b * H, cn + b * H, dc + b * H, gi, dnb);
    } else {
      FN(gru_row_backward)(H, ab, dhb, gyb, hp + b * H, gi, gg, dnb);
    }
  }
}

/* column sums of m [rows, cols] into out [cols], accumulated in double (acc: cols
 * doubles of scratch), row by row so that the inner loop runs along memory; 8 rows are
 * summed in SCALAR before each widening (converting every element cost as much as the
 * rest of the backward's elementwise work) */
static void FN(col_sum)(SCALAR *restrict out, const SCALAR *restrict m, int64_t rows, int64_t cols,
                        double *restrict acc) {
  for (int64_t j = 0; j < cols; j++) acc[j] = 0;
  int64_t r = 0;
  for (; r + 8 <= rows; r += 8) {
    const SCALAR *restrict p = m + r * cols;
    for (int64_t j = 0; j < cols; j++)
      acc[j] += (double)(((p[j] + p[cols + j]) + (p[2 * cols + j] + p[3 * cols + j])) +
                         ((p[4 * cols + j] + p[5 * cols + j]) + (p[6 * cols + j] + p[7 * cols + j])));
  }
  for (; r < rows; r++)
    for (int64_t j = 0; j < cols; j++) acc[j] += m[r * cols + j];
  for (int64_t j = 0; j < cols; j++) out[j] = (SCALAR)acc[j];
}

/* scratch: dgi, dgh [T*B, G*H] (dgh == dgi unless GRU), dh, dhn, dc [B, H], acc [G*H],
 * zeros [B, H] (the output gradient when there is none) */
static void FN(rnn_backward)(const cpu_rnn_dims *d, SCALAR *gx, SCALAR *gh0, SCALAR *gc0, SCALAR *gwih, SCALAR *gwhh,
                             SCALAR *gbih, SCALAR *gbhh, const SCALAR *gy, const SCALAR *gstate, const SCALAR *x,
                             const SCALAR *wih, const SCALAR *whh, const SCALAR *sh, const SCALAR *sc,
                             const SCALAR *act, SCALAR *dgi, SCALAR *dgh, SCALAR *dh, SCALAR *dhn, SCALAR *dc,
                             double *acc, const SCALAR *zeros) {
  int64_t T = d->T, B = d->B, NI = d->NI, H = d->H, GH = cpu_rnn_gates(d->mode) * H, BH = B * H, TB = T * B;
  int64_t W = cpu_rnn_act_width(d->mode, H);
  int par = em_get_num_threads() > 1 && B > 1 && B * GH >= 16384 && !omp_in_parallel();
  if (gstate) memcpy(dh, gstate, (size_t)BH * sizeof(SCALAR));
  else memset(dh, 0, (size_t)BH * sizeof(SCALAR));
  if (sc) {
    if (gstate) memcpy(dc, gstate + BH, (size_t)BH * sizeof(SCALAR));
    else memset(dc, 0, (size_t)BH * sizeof(SCALAR));
  }
  int fused = 0;
  uint16_t *dg16 = NULL; /* the gate gradients in bfloat16 when the fused loop made them (float32 only) */
#ifdef FUSED_BACKWARD
  fused = cpu_lstm_fused_wanted(d) &&
          !FUSED_BACKWARD(d, dgi, dh, dc, gy, whh, sc, act, ag_autocast_cpu_bf16(), &dg16, acc, !cpu_dnnl_available());
#endif
  for (int64_t s = T - 1; s >= 0 && !fused; s--) {
    int64_t t = d->reverse ? T - 1 - s : s, prev = d->reverse ? t + 1 : t, next = d->reverse ? t : t + 1;
    SCALAR *gi = dgi + t * B * GH, *gg = dgh + t * B * GH;
    FN(cell_backward)
    (d, t, act + t * B * W, gy ? gy + t * BH : zeros, dh, dc, dhn, gi, gg, sh + prev * BH, sc ? sc + prev * BH : NULL,
     sc ? sc + next * BH : NULL, par);
    /* the previous state's gradient: dhn + dgh_t @ w_hh */
    GEMM_STEP(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)B, (int)H, (int)GH, 1, gg, (int)GH, whh, (int)H, 1, dhn,
         (int)H);
    SCALAR *tmp = dh;
    dh = dhn, dhn = tmp;
  }
  if (gh0) memcpy(gh0, dh, (size_t)BH * sizeof(SCALAR));
  if (gc0) {
    if (sc) memcpy(gc0, dc, (size_t)BH * sizeof(SCALAR));
    else memset(gc0, 0, (size_t)BH * sizeof(SCALAR));
  }
  /* with dg16, dgi holds nothing unless oneDNN is missing (then the fused loop wrote it)
   * or refused a product (then rnn_a16_gemm widens dg16 into it first) */
  int wide = 0;
  if (gx && (!dg16 || rnn_a16_gemm(gx, NI, dg16, GH, 1, wih, NI, 1, TB, NI, GH, dgi, TB * GH, &wide)))
    GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)TB, (int)NI, (int)GH, 1, dgi, (int)GH, wih, (int)NI, 0, gx,
         (int)NI);
  if (gwih && (!dg16 || rnn_a16_gemm(gwih, NI, dg16, 1, GH, x, NI, 1, GH, NI, TB, dgi, TB * GH, &wide)))
    GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)GH, (int)NI, (int)TB, 1, dgi, (int)GH, x, (int)NI, 0, gwih,
         (int)NI);
  /* the states each step started from: rows t * B + b of sh, shifted one slot in reverse */
  if (gwhh &&
      (!dg16 || rnn_a16_gemm(gwhh, H, dg16, 1, GH, sh + (d->reverse ? BH : 0), H, 1, GH, H, TB, dgi, TB * GH, &wide)))
    GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)GH, (int)H, (int)TB, 1, dgh, (int)GH, sh + (d->reverse ? BH : 0),
         (int)H, 0, gwhh, (int)H);
  if (fused) { /* acc holds the gate gradients' column sums, made in the loop */
    for (int64_t j = 0; j < GH; j++) {
      if (gbih) gbih[j] = (SCALAR)acc[j];
      if (gbhh) gbhh[j] = (SCALAR)acc[j];
    }
  } else {
    if (gbih) FN(col_sum)(gbih, dgi, TB, GH, acc);
    if (gbhh) FN(col_sum)(gbhh, dgh, TB, GH, acc);
  }
  free(dg16);
}

#undef FN
#undef CAT
#undef CAT_
