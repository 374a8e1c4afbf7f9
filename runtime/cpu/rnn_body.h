/* rnn_body.h - the recurrent layers' forward and backward for one dtype, included by
 * rnn.c once per dtype with SCALAR (the C type), SFX (the name suffix), GEMM (cblas's
 * gemm of that type) and EXP, TANH (libm's functions of that type) defined.
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
#define BIAS(b, j) ((b) ? (b)[j] : (SCALAR)0)

static inline SCALAR FN(sigm)(SCALAR v) { return (SCALAR)1 / ((SCALAR)1 + EXP(-v)); }

/* One step's cell over the batch rows: gates a (LSTM/RNN: pre-activations on entry, the
 * activations on exit), for the GRU the input projection p and hidden projection g. */
static void FN(cell_forward)(const cpu_rnn_dims *d, int64_t t, SCALAR *a, const SCALAR *p, const SCALAR *g,
                             const SCALAR *hp, SCALAR *hn, const SCALAR *cp, SCALAR *cn, SCALAR *y, const SCALAR *bih,
                             const SCALAR *bhh, int par) {
  int64_t B = d->B, H = d->H, W = cpu_rnn_act_width(d->mode, H);
  int mode = d->mode;
#pragma omp parallel for schedule(static) if (par) num_threads(em_get_num_threads())
  for (int64_t b = 0; b < B; b++) {
    SCALAR *ab = a + b * W, *hb = hn + b * H, *yb = y + b * H;
    const SCALAR *hpb = hp + b * H;
    if (d->lengths && t >= d->lengths[b]) { /* past the end: the state stays, the output is zero */
      memcpy(hb, hpb, (size_t)H * sizeof(SCALAR));
      if (cn) memcpy(cn + b * H, cp + b * H, (size_t)H * sizeof(SCALAR));
      memset(yb, 0, (size_t)H * sizeof(SCALAR));
      memset(ab, 0, (size_t)W * sizeof(SCALAR));
      continue;
    }
    if (mode == EM_RNN_TANH || mode == EM_RNN_RELU) {
      for (int64_t j = 0; j < H; j++) {
        SCALAR v = ab[j] + BIAS(bih, j) + BIAS(bhh, j);
        v = mode == EM_RNN_TANH ? TANH(v) : (v > 0 ? v : 0);
        ab[j] = hb[j] = yb[j] = v;
      }
    } else if (mode == EM_RNN_LSTM) {
      const SCALAR *cpb = cp + b * H;
      SCALAR *cnb = cn + b * H;
      for (int64_t j = 0; j < H; j++) {
        SCALAR i = FN(sigm)(ab[j] + BIAS(bih, j) + BIAS(bhh, j));
        SCALAR f = FN(sigm)(ab[H + j] + BIAS(bih, H + j) + BIAS(bhh, H + j));
        SCALAR gg = TANH(ab[2 * H + j] + BIAS(bih, 2 * H + j) + BIAS(bhh, 2 * H + j));
        SCALAR o = FN(sigm)(ab[3 * H + j] + BIAS(bih, 3 * H + j) + BIAS(bhh, 3 * H + j));
        SCALAR c = f * cpb[j] + i * gg;
        ab[j] = i, ab[H + j] = f, ab[2 * H + j] = gg, ab[3 * H + j] = o;
        cnb[j] = c;
        hb[j] = yb[j] = o * TANH(c);
      }
    } else { /* GRU, PyTorch's form: n = tanh(W_in x + b_in + r * (W_hn h + b_hn)) */
      const SCALAR *pb = p + b * 3 * H, *gb = g + b * 3 * H;
      for (int64_t j = 0; j < H; j++) {
        SCALAR r = FN(sigm)(pb[j] + BIAS(bih, j) + gb[j] + BIAS(bhh, j));
        SCALAR z = FN(sigm)(pb[H + j] + BIAS(bih, H + j) + gb[H + j] + BIAS(bhh, H + j));
        SCALAR hh = gb[2 * H + j] + BIAS(bhh, 2 * H + j);
        SCALAR n = TANH(pb[2 * H + j] + BIAS(bih, 2 * H + j) + r * hh);
        ab[j] = r, ab[H + j] = z, ab[2 * H + j] = n, ab[3 * H + j] = hh;
        hb[j] = yb[j] = (1 - z) * n + z * hpb[j];
      }
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
  for (int64_t s = 0; s < T; s++) {
    int64_t t = d->reverse ? T - 1 - s : s, prev = d->reverse ? t + 1 : t, next = d->reverse ? t : t + 1;
    const SCALAR *hp = sh + prev * BH;
    SCALAR *a = act + t * B * W;
    if (gru) /* kept apart: its n-part is multiplied by r */
      GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)B, (int)GH, (int)H, 1, hp, (int)H, whh, (int)H, 0, gh,
           (int)GH);
    else /* added to the step's input projection in place */
      GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)B, (int)GH, (int)H, 1, hp, (int)H, whh, (int)H, 1, a, (int)GH);
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
    const SCALAR *ab = a + b * W, *dhb = dh + b * H, *gyb = gy ? gy + b * H : NULL;
    SCALAR *gi = dgi + b * G * H, *gg = dgh + b * G * H, *dnb = dhn + b * H;
    if (d->lengths && t >= d->lengths[b]) { /* the state passed through unchanged */
      memset(gi, 0, (size_t)(G * H) * sizeof(SCALAR));
      if (gg != gi) memset(gg, 0, (size_t)(G * H) * sizeof(SCALAR));
      memcpy(dnb, dhb, (size_t)H * sizeof(SCALAR));
      continue;
    }
    for (int64_t j = 0; j < H; j++) {
      SCALAR g_h = dhb[j] + (gyb ? gyb[j] : 0);
      if (mode == EM_RNN_TANH) {
        gi[j] = g_h * (1 - ab[j] * ab[j]);
        dnb[j] = 0;
      } else if (mode == EM_RNN_RELU) {
        gi[j] = ab[j] > 0 ? g_h : 0;
        dnb[j] = 0;
      } else if (mode == EM_RNN_LSTM) {
        SCALAR i = ab[j], f = ab[H + j], g = ab[2 * H + j], o = ab[3 * H + j];
        SCALAR tc = TANH(cn[b * H + j]), cprev = cp[b * H + j];
        SCALAR dcc = dc[b * H + j] + g_h * o * (1 - tc * tc);
        gi[j] = dcc * g * i * (1 - i);
        gi[H + j] = dcc * cprev * f * (1 - f);
        gi[2 * H + j] = dcc * i * (1 - g * g);
        gi[3 * H + j] = g_h * tc * o * (1 - o);
        dc[b * H + j] = dcc * f;
        dnb[j] = 0;
      } else {
        SCALAR r = ab[j], z = ab[H + j], n = ab[2 * H + j], hh = ab[3 * H + j];
        SCALAR dan = g_h * (1 - z) * (1 - n * n);
        SCALAR dar = dan * hh * r * (1 - r), daz = g_h * (hp[b * H + j] - n) * z * (1 - z);
        gi[j] = gg[j] = dar;
        gi[H + j] = gg[H + j] = daz;
        gi[2 * H + j] = dan;
        gg[2 * H + j] = dan * r;
        dnb[j] = g_h * z;
      }
    }
  }
}

/* column sums of m [rows, cols] into out [cols], accumulated in double */
static void FN(col_sum)(SCALAR *out, const SCALAR *m, int64_t rows, int64_t cols) {
  for (int64_t j = 0; j < cols; j++) {
    double acc = 0;
    for (int64_t r = 0; r < rows; r++) acc += m[r * cols + j];
    out[j] = (SCALAR)acc;
  }
}

/* scratch: dgi, dgh [T*B, G*H] (dgh == dgi unless GRU), dh, dhn, dc [B, H] */
static void FN(rnn_backward)(const cpu_rnn_dims *d, SCALAR *gx, SCALAR *gh0, SCALAR *gc0, SCALAR *gwih, SCALAR *gwhh,
                             SCALAR *gbih, SCALAR *gbhh, const SCALAR *gy, const SCALAR *gstate, const SCALAR *x,
                             const SCALAR *wih, const SCALAR *whh, const SCALAR *sh, const SCALAR *sc,
                             const SCALAR *act, SCALAR *dgi, SCALAR *dgh, SCALAR *dh, SCALAR *dhn, SCALAR *dc) {
  int64_t T = d->T, B = d->B, NI = d->NI, H = d->H, GH = cpu_rnn_gates(d->mode) * H, BH = B * H, TB = T * B;
  int64_t W = cpu_rnn_act_width(d->mode, H);
  int par = em_get_num_threads() > 1 && B > 1 && B * GH >= 16384 && !omp_in_parallel();
  if (gstate) memcpy(dh, gstate, (size_t)BH * sizeof(SCALAR));
  else memset(dh, 0, (size_t)BH * sizeof(SCALAR));
  if (sc) {
    if (gstate) memcpy(dc, gstate + BH, (size_t)BH * sizeof(SCALAR));
    else memset(dc, 0, (size_t)BH * sizeof(SCALAR));
  }
  for (int64_t s = T - 1; s >= 0; s--) {
    int64_t t = d->reverse ? T - 1 - s : s, prev = d->reverse ? t + 1 : t, next = d->reverse ? t : t + 1;
    SCALAR *gi = dgi + t * B * GH, *gg = dgh + t * B * GH;
    FN(cell_backward)
    (d, t, act + t * B * W, gy ? gy + t * BH : NULL, dh, dc, dhn, gi, gg, sh + prev * BH, sc ? sc + prev * BH : NULL,
     sc ? sc + next * BH : NULL, par);
    /* the previous state's gradient: dhn + dgh_t @ w_hh */
    GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)B, (int)H, (int)GH, 1, gg, (int)GH, whh, (int)H, 1, dhn,
         (int)H);
    SCALAR *tmp = dh;
    dh = dhn, dhn = tmp;
  }
  if (gh0) memcpy(gh0, dh, (size_t)BH * sizeof(SCALAR));
  if (gc0) {
    if (sc) memcpy(gc0, dc, (size_t)BH * sizeof(SCALAR));
    else memset(gc0, 0, (size_t)BH * sizeof(SCALAR));
  }
  if (gx)
    GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)TB, (int)NI, (int)GH, 1, dgi, (int)GH, wih, (int)NI, 0, gx,
         (int)NI);
  if (gwih)
    GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)GH, (int)NI, (int)TB, 1, dgi, (int)GH, x, (int)NI, 0, gwih,
         (int)NI);
  if (gwhh) /* the states each step started from: rows t * B + b of sh, shifted one slot in reverse */
    GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)GH, (int)H, (int)TB, 1, dgh, (int)GH, sh + (d->reverse ? BH : 0),
         (int)H, 0, gwhh, (int)H);
  if (gbih) FN(col_sum)(gbih, dgi, TB, GH);
  if (gbhh) FN(col_sum)(gbhh, dgh, TB, GH);
}

#undef BIAS
#undef FN
#undef CAT
#undef CAT_
