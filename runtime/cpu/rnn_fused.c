/* rnn_fused.c - the float32 LSTM's time loop as one parallel region (cpu_seq.h,
 * cpu_lstm_fused_*), taken by rnn_body.h when the hidden size is a multiple of 16.
 *
 * Why: each step's recurrent product [B, H] @ [H, 4H] is small (6.5 M multiply-adds for
 * char-rnn's 50 x 128), so the general loop (one oneDNN matmul and one OpenMP loop for the
 * cell per step, the same again in the backward) spent as much on starting and joining
 * threads, and on repacking w_hh on every call, as on the arithmetic. Here w_hh is packed
 * once per layer (all four gates of a unit side by side) and the threads split the batch
 * rows: a row's recursion needs only its own previous state, so each thread walks all the
 * steps over its rows with no synchronisation at all, and per step computes its rows'
 * gates and runs their cell while the tile is still in L1. (Splitting the hidden units
 * instead needed a barrier per step and moved every step's states between the cores: two
 * threads ran slower than one.) The backward is the same: a thread turns its rows' gate
 * gradients of the step after into their state gradient (@ w_hh), runs their cell
 * backward and sums the biases' gradient over its rows. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
#pragma GCC target("prefer-vector-width=512")
#endif
#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_seq.h"
#include "ember/core.h"
#include "ember/nn.h"
#include "vmath.h"
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#define CH 16 /* units per chunk: one 16-float vector */
#define RB 6 /* batch rows per tile: 6 x 4 vectors of sums stay in registers */

/* -1: not read yet; EMBER_RNN_FUSED=0 turns the fused loop off (A/B measurements) */
static int env_fused = -1, fused_forced = -1;
static atomic_llong amx_runs; /* forward and backward loops run on AMX (tests) */
void cpu_rnn_fused_force_(int mode) { fused_forced = mode < 0 ? -1 : mode != 0; }

int cpu_lstm_fused_wanted(const cpu_rnn_dims *d) {
  if (env_fused < 0) {
    const char *e = getenv("EMBER_RNN_FUSED");
    env_fused = !(e && *e && atoi(e) == 0);
  }
  if (fused_forced >= 0 ? !fused_forced : !env_fused) return 0;
  /* a few rows in all (generation feeding one token at a time) would not pay for packing
   * w_hh: the general loop's product reads it as it lies */
  if (fused_forced < 0 && d->T * d->B < 32) return 0;
  return d->mode == EM_RNN_LSTM && d->H % CH == 0 && d->H <= (1 << 20) && d->B <= (1 << 24);
}

/* Buffers the threads share start on a cache line: a line straddling two threads' rows
 * would bounce between their cores. */
static void *alloc64(size_t n, int zero) {
  n = (n + 63) & ~(size_t)63;
  void *p = aligned_alloc(64, n ? n : 64);
  if (p && zero) memset(p, 0, n);
  return p;
}

/* ---- the product tile ----
 * c[r * ldc + m * cms + l] (= or +=) sum_k a[r * lda + k] * w[(k * M + m) * CH + l], for
 * r < R rows and m < M vectors of CH columns (w packed [K][M * CH]). */
static inline __attribute__((always_inline)) void tile(int R, int M, int64_t K, const float *restrict a, int64_t lda,
                                                       const float *restrict w, float *restrict c, int64_t ldc,
                                                       int64_t cms, int load) {
#if defined(__AVX512F__)
  __m512 acc[RB][4];
  for (int r = 0; r < R; r++)
    for (int m = 0; m < M; m++) acc[r][m] = load ? _mm512_loadu_ps(c + r * ldc + m * cms) : _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k++) {
    __m512 wv[4];
    for (int m = 0; m < M; m++) wv[m] = _mm512_loadu_ps(w + (k * M + m) * CH);
    for (int r = 0; r < R; r++) {
      __m512 av = _mm512_set1_ps(a[r * lda + k]);
      for (int m = 0; m < M; m++) acc[r][m] = _mm512_fmadd_ps(av, wv[m], acc[r][m]);
    }
  }
  for (int r = 0; r < R; r++)
    for (int m = 0; m < M; m++) _mm512_storeu_ps(c + r * ldc + m * cms, acc[r][m]);
#else
  for (int r = 0; r < R; r++)
    for (int m = 0; m < M; m++) {
      float s[CH];
      for (int l = 0; l < CH; l++) s[l] = load ? c[r * ldc + m * cms + l] : 0;
      for (int64_t k = 0; k < K; k++) {
        float av = a[r * lda + k];
        const float *wk = w + (k * M + m) * CH;
        for (int l = 0; l < CH; l++) s[l] += av * wk[l];
      }
      for (int l = 0; l < CH; l++) c[r * ldc + m * cms + l] = s[l];
    }
#endif
}

#define TILE_CASE(r, m)                          \
  case (r)*8 + (m):                              \
    tile(r, m, K, a, lda, w, c, ldc, cms, load); \
    break;
#define TILE_ROW(r) TILE_CASE(r, 1) TILE_CASE(r, 2) TILE_CASE(r, 3) TILE_CASE(r, 4)

/* tile with R in 1..RB and M in 1..4 known at compile time in each case */
static void tile_any(int R, int M, int64_t K, const float *a, int64_t lda, const float *w, float *c, int64_t ldc,
                     int64_t cms, int load) {
  switch (R * 8 + M) { TILE_ROW(1) TILE_ROW(2) TILE_ROW(3) TILE_ROW(4) TILE_ROW(5) TILE_ROW(6) default : break; }
}

/* ---- the cell over n units (a multiple of 16) of one batch row, gates H apart ----
 * With AVX-512 in vector code of its own: written as plain loops (rnn_body.h's), GCC
 * vectorises them but divides with vdivps, five per unit forward, which took longer than
 * the step's product on AMX; here 1/x is rcp14 with one Newton step (within 2 ulp), and
 * exp is vmath.h's em_vexpf in vector form (2^n by vscalefps). */

static inline float sigm(float v) { return 1.0f / (1.0f + em_vexpf(-v)); }
static inline float tanh_(float v) { return 1.0f - 2.0f / (1.0f + em_vexpf(2.0f * v)); }

#if defined(__AVX512F__)
static inline __m512 v_exp(__m512 x) {
  /* max/min return their second operand for NaN: NaN passes through. e^88 stays finite,
   * so that 1 + e^x never reaches inf (whose reciprocal step would give NaN) */
  x = _mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}
/* 1 / (1 + e) for e >= 0 finite */
static inline __m512 v_inv1p(__m512 e) {
  __m512 d = _mm512_add_ps(e, _mm512_set1_ps(1.0f)), y = _mm512_rcp14_ps(d);
  return _mm512_mul_ps(y, _mm512_fnmadd_ps(d, y, _mm512_set1_ps(2.0f)));
}
static inline __m512 v_sigm(__m512 v) { return v_inv1p(v_exp(_mm512_sub_ps(_mm512_setzero_ps(), v))); }
static inline __m512 v_tanh(__m512 v) {
  return _mm512_fnmadd_ps(_mm512_set1_ps(2.0f), v_inv1p(v_exp(_mm512_add_ps(v, v))), _mm512_set1_ps(1.0f));
}
#endif

/* r: the recurrent part kept apart (gate g at r[g * rs + j]; NULL: already in a); hb:
 * where h goes in bfloat16 too (NULL: nowhere) */
__attribute__((noinline)) static void lstm_units(int64_t n, int64_t H, float *restrict a, const float *restrict r,
                                                 int64_t rs, const float *restrict bih, const float *restrict bhh,
                                                 const float *restrict cp, float *restrict cn, float *restrict h,
                                                 float *restrict y, uint16_t *restrict hb) {
  (void)hb; /* written only where there is AVX512-BF16 (the AMX loops' CPUs) */
#if defined(__AVX512F__)
  for (int64_t j = 0; j < n; j += 16) {
    __m512 z[4];
    for (int g = 0; g < 4; g++) {
      z[g] = _mm512_add_ps(_mm512_loadu_ps(a + g * H + j),
                           _mm512_add_ps(_mm512_loadu_ps(bih + g * H + j), _mm512_loadu_ps(bhh + g * H + j)));
      if (r) z[g] = _mm512_add_ps(z[g], _mm512_loadu_ps(r + g * rs + j));
    }
    __m512 i = v_sigm(z[0]), f = v_sigm(z[1]), g = v_tanh(z[2]), o = v_sigm(z[3]);
    __m512 c = _mm512_fmadd_ps(f, _mm512_loadu_ps(cp + j), _mm512_mul_ps(i, g));
    __m512 hv = _mm512_mul_ps(o, v_tanh(c));
    _mm512_storeu_ps(a + j, i), _mm512_storeu_ps(a + H + j, f);
    _mm512_storeu_ps(a + 2 * H + j, g), _mm512_storeu_ps(a + 3 * H + j, o);
    _mm512_storeu_ps(cn + j, c), _mm512_storeu_ps(h + j, hv), _mm512_storeu_ps(y + j, hv);
#if defined(__AVX512BF16__)
    if (hb) _mm256_storeu_si256((__m256i *)(hb + j), (__m256i)_mm512_cvtneps_pbh(hv));
#endif
  }
#else
  for (int64_t j = 0; j < n; j++) {
    float rr[4] = {0, 0, 0, 0};
    if (r) rr[0] = r[j], rr[1] = r[rs + j], rr[2] = r[2 * rs + j], rr[3] = r[3 * rs + j];
    float i = sigm(a[j] + rr[0] + bih[j] + bhh[j]);
    float f = sigm(a[H + j] + rr[1] + bih[H + j] + bhh[H + j]);
    float g = tanh_(a[2 * H + j] + rr[2] + bih[2 * H + j] + bhh[2 * H + j]);
    float o = sigm(a[3 * H + j] + rr[3] + bih[3 * H + j] + bhh[3 * H + j]);
    float c = f * cp[j] + i * g;
    a[j] = i, a[H + j] = f, a[2 * H + j] = g, a[3 * H + j] = o;
    cn[j] = c;
    float hv = o * tanh_(c);
    h[j] = hv;
    y[j] = hv;
  }
#endif
}

/* dh: the state's gradient after the step (output gradient not yet added), zeroed on exit
 * (the part of the previous state's gradient that does not go through w_hh); bs: the gate
 * gradients' running sums (the biases' gradient), gate k at bs[k * H]; gb, gb2: where the
 * gate gradients go in bfloat16 too (NULL: nowhere) */
__attribute__((noinline)) static void lstm_units_backward(int64_t n, int64_t H, const float *restrict a,
                                                          float *restrict dh, const float *restrict gy,
                                                          const float *restrict cp, const float *restrict cn,
                                                          float *restrict dc, float *restrict gi, float *restrict bs,
                                                          uint16_t *restrict gb, uint16_t *restrict gb2) {
  (void)gb, (void)gb2; /* written only where there is AVX512-BF16 */
#if defined(__AVX512F__)
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t j = 0; j < n; j += 16) {
    __m512 i = _mm512_loadu_ps(a + j), f = _mm512_loadu_ps(a + H + j), g = _mm512_loadu_ps(a + 2 * H + j);
    __m512 o = _mm512_loadu_ps(a + 3 * H + j), gh = _mm512_add_ps(_mm512_loadu_ps(dh + j), _mm512_loadu_ps(gy + j));
    __m512 tc = v_tanh(_mm512_loadu_ps(cn + j));
    __m512 dcc = _mm512_fmadd_ps(_mm512_mul_ps(gh, o), _mm512_fnmadd_ps(tc, tc, one), _mm512_loadu_ps(dc + j));
    __m512 v[4];
    v[0] = _mm512_mul_ps(_mm512_mul_ps(dcc, g), _mm512_mul_ps(i, _mm512_sub_ps(one, i)));
    v[1] = _mm512_mul_ps(_mm512_mul_ps(dcc, _mm512_loadu_ps(cp + j)), _mm512_mul_ps(f, _mm512_sub_ps(one, f)));
    v[2] = _mm512_mul_ps(_mm512_mul_ps(dcc, i), _mm512_fnmadd_ps(g, g, one));
    v[3] = _mm512_mul_ps(_mm512_mul_ps(gh, tc), _mm512_mul_ps(o, _mm512_sub_ps(one, o)));
    for (int k = 0; k < 4; k++) {
      if (gi) _mm512_storeu_ps(gi + k * H + j, v[k]);
      _mm512_storeu_ps(bs + k * H + j, _mm512_add_ps(_mm512_loadu_ps(bs + k * H + j), v[k]));
#if defined(__AVX512BF16__)
      if (gb) {
        __m256i r16 = (__m256i)_mm512_cvtneps_pbh(v[k]);
        _mm256_storeu_si256((__m256i *)(gb + k * H + j), r16);
        if (gb2) _mm256_storeu_si256((__m256i *)(gb2 + k * H + j), r16);
      }
#endif
    }
    _mm512_storeu_ps(dc + j, _mm512_mul_ps(dcc, f));
    _mm512_storeu_ps(dh + j, _mm512_setzero_ps());
  }
#else
  for (int64_t j = 0; j < n; j++) {
    float i = a[j], f = a[H + j], g = a[2 * H + j], o = a[3 * H + j], gh = dh[j] + gy[j];
    float tc = tanh_(cn[j]);
    float dcc = dc[j] + gh * o * (1 - tc * tc);
    gi[j] = dcc * g * i * (1 - i);
    gi[H + j] = dcc * cp[j] * f * (1 - f);
    gi[2 * H + j] = dcc * i * (1 - g * g);
    gi[3 * H + j] = gh * tc * o * (1 - o);
    for (int k = 0; k < 4; k++) bs[k * H + j] += gi[k * H + j];
    dc[j] = dcc * f;
    dh[j] = 0;
  }
#endif
}

/* the step's sums of this thread's units (fs, float, 4 gates H apart from j0) into the
 * running total (double: T * B rows), fs zeroed for the next step */
static void flush_sums(double *restrict total, float *restrict fs, int64_t H, int64_t j0, int64_t n) {
  for (int g = 0; g < 4; g++)
    for (int64_t j = j0; j < j0 + n; j++) total[g * H + j] += fs[g * H + j], fs[g * H + j] = 0;
}

/* ---- splitting the rows ---- */

/* at least 8 rows a thread (AMX's tiles are 16 rows; below, the packing is most of it) */
static int team_size(const cpu_rnn_dims *d) {
  int64_t nt = em_get_num_threads();
  if (nt > d->B / 8) nt = d->B / 8;
  if (nt < 1 || omp_in_parallel() || d->B * 4 * d->H * d->H < ((int64_t)1 << 18)) nt = 1;
  return (int)nt;
}

/* this thread's rows [*r0, *r1) of B, and its share [*c0, *c1) of n items (packing) */
static void my_share(int64_t B, int64_t n, int64_t *r0, int64_t *r1, int64_t *c0, int64_t *c1) {
  int nt = omp_get_num_threads(), me = omp_get_thread_num();
  *r0 = B * me / nt, *r1 = B * (me + 1) / nt;
  *c0 = n * me / nt, *c1 = n * (me + 1) / nt;
}

/* ---- bfloat16 under CPU autocast: the recurrent products on AMX ----
 * A thread's product is [Mp, K] @ [K, N] with its batch rows padded to Mp (a multiple of
 * 32) in bfloat16 and float32 sums: 2 x 2 tiles of 16 x 16 sums per pass over K in steps
 * of 32, the weights packed once per layer by tiles of AMX's pair layout. The states
 * (forward) and gate gradients (backward) the next step multiplies are written in
 * bfloat16 by the cell that makes them, into the thread's own buffer. */
#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__) && defined(__x86_64__)
#define HAVE_AMX 1
#include <sys/syscall.h>
#include <unistd.h>

/* Linux hands out AMX's tile state only on request (ARCH_REQ_XCOMP_PERM, XTILEDATA); the
 * request fails where the CPU or kernel has none, and the float32 loop runs instead */
static int amx_ready(void) {
  static atomic_int state = -1;
  int s = atomic_load(&state);
  if (s < 0) {
    s = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
    atomic_store(&state, s);
  }
  return s;
}

static void amx_config(void) {
  struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
  } cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int i = 0; i < 8; i++) cfg.rows[i] = 16, cfg.colsb[i] = 64;
  _tile_loadconfig(&cfg);
}

static inline uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* n (a multiple of 16) floats to bfloat16, rounded to nearest even */
static inline void row_to_bf16(uint16_t *restrict dst, const float *restrict src, int64_t n) {
  for (int64_t i = 0; i < n; i += 16)
    _mm256_storeu_si256((__m256i *)(dst + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i)));
}

/* c [Mp, N] (ldc) = a [Mp, K] (lda, bfloat16) @ b, b packed by tiles: the 16 columns
 * from n and the k-pairs from kp at bp + ((n / 16) * (K / 2) + kp) * 32, pairs along k
 * ([K/2][16][2] per column tile: each tile load reads 1 KB in a row). Mp % 32 == 0,
 * N % 16 == 0, K % 32 == 0; tiles configured by amx_config. */
static void amx_gemm(int64_t Mp, int64_t N, int64_t K, const uint16_t *a, int64_t lda, const uint16_t *bp, float *c,
                     int64_t ldc) {
  for (int64_t m = 0; m < Mp; m += 32)
    for (int64_t n = 0; n < N; n += 32) {
      const uint16_t *a0 = a + m * lda, *a1 = a0 + 16 * lda, *b0 = bp + (n / 16) * (K / 2) * 32, *b1 = b0 + K * 16;
      float *c0 = c + m * ldc + n, *c1 = c0 + 16 * ldc;
      if (n + 32 <= N) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int64_t k = 0; k < K; k += 32) {
          _tile_loadd(4, a0 + k, lda * 2);
          _tile_loadd(5, a1 + k, lda * 2);
          _tile_loadd(6, b0 + k * 16, 64);
          _tile_loadd(7, b1 + k * 16, 64);
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 4, 7);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
        _tile_stored(0, c0, ldc * 4);
        _tile_stored(1, c0 + 16, ldc * 4);
        _tile_stored(2, c1, ldc * 4);
        _tile_stored(3, c1 + 16, ldc * 4);
      } else {
        _tile_zero(0);
        _tile_zero(2);
        for (int64_t k = 0; k < K; k += 32) {
          _tile_loadd(4, a0 + k, lda * 2);
          _tile_loadd(5, a1 + k, lda * 2);
          _tile_loadd(6, b0 + k * 16, 64);
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(2, 5, 6);
        }
        _tile_stored(0, c0, ldc * 4);
        _tile_stored(2, c1, ldc * 4);
      }
    }
}

static int amx_forward(const cpu_rnn_dims *d, float *y, float *sh, float *sc, float *act, const float *whh,
                       const float *bih, const float *bhh) {
  int64_t T = d->T, B = d->B, H = d->H, G4 = 4 * H, BH = B * H;
  uint16_t *wp = alloc64((size_t)(G4 * H) * 2, 0);
  if (!wp) return 1;
  int64_t first = d->reverse ? T : 0;
  int failed = 0;
#pragma omp parallel num_threads(team_size(d))
  {
    int64_t r0, r1, c0, c1;
    my_share(B, G4 / 16, &r0, &r1, &c0, &c1);
    int64_t nr = r1 - r0, Mp = (nr + 31) / 32 * 32;
    /* the thread's states in bfloat16 (rows past nr stay zero) and its product */
    uint16_t *hb = alloc64((size_t)(Mp * H) * 2, 1);
    float *cs = alloc64((size_t)(Mp * G4) * sizeof(float), 0);
    if (!hb || !cs) {
#pragma omp atomic write
      failed = 1;
    }
    /* w_hh^T by column tiles (amx_gemm): column n is w_hh's row n */
    for (int64_t ct = c0; ct < c1; ct++)
      for (int l = 0; l < 16; l++) {
        const float *row = whh + (ct * 16 + l) * H;
        uint16_t *q = wp + ct * (H / 2) * 32 + l * 2;
        for (int64_t k = 0; k < H; k++) q[(k / 2) * 32 + (k & 1)] = to_bf16(row[k]);
      }
#pragma omp barrier
    int ok;
#pragma omp atomic read
    ok = failed;
    ok = !ok;
    if (ok) {
      for (int64_t b = r0; b < r1; b++) row_to_bf16(hb + (b - r0) * H, sh + first * BH + b * H, H);
      amx_config();
    }
    for (int64_t s = 0; s < T && ok && nr; s++) {
      int64_t t = d->reverse ? T - 1 - s : s, prev = d->reverse ? t + 1 : t, next = d->reverse ? t : t + 1;
      const float *hp = sh + prev * BH, *cp = sc + prev * BH;
      float *a = act + t * B * G4, *hn = sh + next * BH, *cn = sc + next * BH, *yt = y + t * BH;
      amx_gemm(Mp, G4, H, hb, H, wp, cs, G4);
      for (int64_t b = r0; b < r1; b++) {
        uint16_t *hbb = hb + (b - r0) * H;
        if (d->lengths && t >= d->lengths[b]) { /* past the end: the state stays, the output is zero */
          memcpy(hn + b * H, hp + b * H, (size_t)H * sizeof(float));
          memcpy(cn + b * H, cp + b * H, (size_t)H * sizeof(float));
          memset(yt + b * H, 0, (size_t)H * sizeof(float));
          memset(a + b * G4, 0, (size_t)G4 * sizeof(float));
          row_to_bf16(hbb, hn + b * H, H);
          continue;
        }
        lstm_units(H, H, a + b * G4, cs + (b - r0) * G4, H, bih, bhh, cp + b * H, cn + b * H, hn + b * H, yt + b * H,
                   hbb);
      }
    }
    if (ok) _tile_release();
    free(hb), free(cs);
  }
  free(wp);
  return failed; /* then nothing was written: the caller runs the float32 loop */
}

/* dg (float32) is written only when need32; *dg16 gets the gate gradients in bfloat16,
 * [T*B, 4H] (the caller frees it) */
static int amx_backward(const cpu_rnn_dims *d, float *dg, float *dh, float *dc, const float *gy, const float *whh,
                        const float *sc, const float *act, const float *zeros, uint16_t **dg16, double *bsum,
                        int need32) {
  int64_t T = d->T, B = d->B, H = d->H, G4 = 4 * H, BH = B * H;
  uint16_t *wp = alloc64((size_t)(G4 * H) * 2, 0), *gall = alloc64((size_t)(T * B * G4) * 2, 0);
  if (!wp || !gall) {
    free(wp), free(gall);
    return 1;
  }
  int failed = 0;
#pragma omp parallel num_threads(team_size(d))
  {
    int64_t r0, r1, c0, c1;
    my_share(B, H / 16, &r0, &r1, &c0, &c1);
    int64_t nr = r1 - r0, Mp = (nr + 31) / 32 * 32;
    /* the thread's gate gradients in bfloat16 (rows past nr stay zero), its product, and
     * its rows' bias sums: float per step, double over the steps */
    uint16_t *gb = alloc64((size_t)(Mp * G4) * 2, 1);
    float *cs = alloc64((size_t)(Mp * H) * sizeof(float), 0), *fs = alloc64((size_t)G4 * sizeof(float), 1);
    double *sums = alloc64((size_t)G4 * sizeof(double), 1);
    if (!gb || !cs || !fs || !sums) {
#pragma omp atomic write
      failed = 1;
    }
    /* w_hh by column tiles (amx_gemm), K = 4H */
    for (int64_t ct = c0; ct < c1; ct++)
      for (int64_t k = 0; k < G4; k++) {
        const float *src = whh + k * H + ct * 16;
        uint16_t *q = wp + (ct * (G4 / 2) + k / 2) * 32 + (k & 1);
        for (int l = 0; l < 16; l++) q[l * 2] = to_bf16(src[l]);
      }
#pragma omp barrier
    int ok;
#pragma omp atomic read
    ok = failed;
    ok = !ok;
    if (ok) amx_config();
    for (int64_t s = T; s >= 0 && ok && nr; s--) {
      if (s < T) { /* dh += the gate gradients of step s @ w_hh */
        amx_gemm(Mp, H, G4, gb, G4, wp, cs, H);
        for (int64_t b = r0; b < r1; b++)
          for (int64_t j = 0; j < H; j++) dh[b * H + j] += cs[(b - r0) * H + j];
      }
      if (s == 0) break;
      int64_t t = d->reverse ? T - s : s - 1, prev = d->reverse ? t + 1 : t, next = d->reverse ? t : t + 1;
      const float *a = act + t * B * G4, *cp = sc + prev * BH, *cn = sc + next * BH;
      float *gi = dg + t * B * G4;
      for (int64_t b = r0; b < r1; b++) {
        uint16_t *gbb = gb + (b - r0) * G4, *gab = gall + (t * B + b) * G4;
        if (d->lengths && t >= d->lengths[b]) { /* the state passed through unchanged */
          if (need32) memset(gi + b * G4, 0, (size_t)G4 * sizeof(float));
          memset(gbb, 0, (size_t)G4 * 2);
          memset(gab, 0, (size_t)G4 * 2);
          continue;
        }
        const float *gyb = gy ? gy + t * BH + b * H : zeros;
        lstm_units_backward(H, H, a + b * G4, dh + b * H, gyb, cp + b * H, cn + b * H, dc + b * H,
                            need32 ? gi + b * G4 : NULL, fs, gbb, gab);
      }
      flush_sums(sums, fs, H, 0, H);
    }
    if (ok) {
      _tile_release();
#pragma omp critical(rnn_fused_sums)
      for (int64_t j = 0; j < G4; j++) bsum[j] += sums[j];
    }
    free(gb), free(cs), free(fs), free(sums);
  }
  free(wp);
  if (failed) free(gall);
  else *dg16 = gall;
  return failed;
}
#endif

int cpu_rnn_amx_available_(void) {
#ifdef HAVE_AMX
  return amx_ready();
#else
  return 0;
#endif
}
int64_t cpu_rnn_amx_runs_(void) { return atomic_load(&amx_runs); }

/* ---- forward ---- */

int cpu_lstm_fused_forward(const cpu_rnn_dims *d, float *y, float *sh, float *sc, float *act, const float *whh,
                           const float *bih, const float *bhh, int bf16) {
  int64_t T = d->T, B = d->B, H = d->H, G4 = 4 * H, BH = B * H;
#ifdef HAVE_AMX
  if (bf16 && H % 32 == 0 && amx_ready() && !amx_forward(d, y, sh, sc, act, whh, bih, bhh)) {
    atomic_fetch_add(&amx_runs, 1);
    return 0;
  }
#else
  (void)bf16;
#endif
  float *wp = alloc64((size_t)(G4 * H) * sizeof(float), 0);
  if (!wp) return 1;
#pragma omp parallel num_threads(team_size(d))
  {
    int64_t r0, r1, c0, c1;
    my_share(B, H / CH, &r0, &r1, &c0, &c1);
    /* chunk u's panel [H][4 gates][CH]: w_hh rows g * H + u * CH + l, transposed */
    for (int64_t u = c0; u < c1; u++) {
      float *p = wp + u * H * 4 * CH;
      for (int g = 0; g < 4; g++)
        for (int l = 0; l < CH; l++) {
          const float *row = whh + (g * H + u * CH + l) * H;
          for (int64_t k = 0; k < H; k++) p[(k * 4 + g) * CH + l] = row[k];
        }
    }
#pragma omp barrier
    for (int64_t s = 0; s < T; s++) {
      int64_t t = d->reverse ? T - 1 - s : s, prev = d->reverse ? t + 1 : t, next = d->reverse ? t : t + 1;
      const float *hp = sh + prev * BH, *cp = sc + prev * BH;
      float *a = act + t * B * G4, *hn = sh + next * BH, *cn = sc + next * BH, *yt = y + t * BH;
      for (int64_t u = 0; u < H / CH; u++) {
        const float *p = wp + u * H * 4 * CH;
        int64_t j = u * CH;
        for (int64_t q = r0; q < r1; q += RB) {
          int R = r1 - q < RB ? (int)(r1 - q) : RB;
          /* the gates' pre-activations: the input projection there plus h_prev @ w_hh^T */
          tile_any(R, 4, H, hp + q * H, H, p, a + q * G4 + j, G4, H, 1);
          for (int64_t b = q; b < q + R; b++) {
            if (d->lengths && t >= d->lengths[b]) { /* past the end: the state stays, the output is zero */
              for (int64_t l = 0; l < CH; l++) {
                hn[b * H + j + l] = hp[b * H + j + l], cn[b * H + j + l] = cp[b * H + j + l];
                yt[b * H + j + l] = 0;
                for (int g = 0; g < 4; g++) a[b * G4 + g * H + j + l] = 0;
              }
              continue;
            }
            lstm_units(CH, H, a + b * G4 + j, NULL, 0, bih + j, bhh + j, cp + b * H + j, cn + b * H + j, hn + b * H + j,
                       yt + b * H + j, NULL);
          }
        }
      }
    }
  }
  free(wp);
  return 0;
}

/* ---- backward ---- */

/* dh [B, H]: in, the final state's gradient; out, the initial state's (gh0). dc [B, H] the
 * same for the cell state. dg [T*B, 4H]: out, the gate gradients (pre-activation). gy: the
 * outputs' gradient [T, B, H] (NULL: zeros). bsum [4H]: out, dg's column sums. */
int cpu_lstm_fused_backward(const cpu_rnn_dims *d, float *dg, float *dh, float *dc, const float *gy, const float *whh,
                            const float *sc, const float *act, int bf16, uint16_t **dg16, double *bsum, int need32) {
  int64_t T = d->T, B = d->B, H = d->H, G4 = 4 * H, BH = B * H;
  *dg16 = NULL;
  float *zeros = gy ? NULL : calloc((size_t)H, sizeof(float));
  if (!gy && !zeros) return 1;
  for (int64_t j = 0; j < G4; j++) bsum[j] = 0;
#ifdef HAVE_AMX
  if (bf16 && H % 32 == 0 && amx_ready() && !amx_backward(d, dg, dh, dc, gy, whh, sc, act, zeros, dg16, bsum, need32)) {
    atomic_fetch_add(&amx_runs, 1);
    free(zeros);
    return 0;
  }
#else
  (void)bf16, (void)need32;
#endif
  float *wp = alloc64((size_t)(G4 * H) * sizeof(float), 0);
  if (!wp) {
    free(zeros);
    return 1;
  }
  int failed = 0;
#pragma omp parallel num_threads(team_size(d))
  {
    int64_t r0, r1, c0, c1;
    my_share(B, (H / CH + 3) / 4, &r0, &r1, &c0, &c1);
    float *fs = alloc64((size_t)G4 * sizeof(float), 1);
    double *sums = alloc64((size_t)G4 * sizeof(double), 1);
    if (!fs || !sums) {
#pragma omp atomic write
      failed = 1;
    }
    /* groups of up to 4 chunks; group at chunk u with m chunks: w_hh's columns u * CH ..
     * (u + m) * CH - 1 as they lie, [4H][m * CH], at wp + u * CH * 4H */
    for (int64_t q = c0; q < c1; q++) {
      int64_t u = 4 * q, m = H / CH - u < 4 ? H / CH - u : 4;
      float *p = wp + u * CH * G4;
      for (int64_t k = 0; k < G4; k++) memcpy(p + k * m * CH, whh + k * H + u * CH, (size_t)(m * CH) * sizeof(float));
    }
#pragma omp barrier
    int ok;
#pragma omp atomic read
    ok = failed;
    ok = !ok;
    for (int64_t s = T; s >= 0 && ok; s--) {
      /* the state's gradient after step s - 1 (before step s): what the cell left plus the
       * gate gradients of step s @ w_hh */
      if (s < T) {
        int64_t t = d->reverse ? T - 1 - s : s;
        const float *g = dg + t * B * G4;
        for (int64_t u = 0; u < H / CH; u += 4) {
          int m = H / CH - u < 4 ? (int)(H / CH - u) : 4;
          const float *p = wp + u * CH * G4;
          for (int64_t q = r0; q < r1; q += RB) {
            int R = r1 - q < RB ? (int)(r1 - q) : RB;
            tile_any(R, m, G4, g + q * G4, G4, p, dh + q * H + u * CH, H, CH, 1);
          }
        }
      }
      if (s == 0) break;
      int64_t t = d->reverse ? T - s : s - 1, prev = d->reverse ? t + 1 : t, next = d->reverse ? t : t + 1;
      const float *a = act + t * B * G4, *cp = sc + prev * BH, *cn = sc + next * BH;
      float *gi = dg + t * B * G4;
      for (int64_t b = r0; b < r1; b++) {
        if (d->lengths && t >= d->lengths[b]) { /* the state passed through unchanged */
          memset(gi + b * G4, 0, (size_t)G4 * sizeof(float));
          continue;
        }
        const float *gyb = gy ? gy + t * BH + b * H : zeros;
        lstm_units_backward(H, H, a + b * G4, dh + b * H, gyb, cp + b * H, cn + b * H, dc + b * H, gi + b * G4, fs,
                            NULL, NULL);
      }
      flush_sums(sums, fs, H, 0, H);
    }
    if (ok) {
#pragma omp critical(rnn_fused_sums)
      for (int64_t j = 0; j < G4; j++) bsum[j] += sums[j];
    }
    free(fs), free(sums);
  }
  free(wp);
  free(zeros);
  return failed; /* then dh, dc and dg are as they came: the caller runs the general loop */
}
