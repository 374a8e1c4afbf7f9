/* generate.c - synthetic graphs, deterministic by seed.
 *
 * Every edge is a pure function of (seed, edge index), drawn from ember's Philox stream
 * (core/philox.h, counter word 3 naming the generator), so the CSR builder can generate
 * the edges twice (count pass, fill pass) instead of storing them, and any thread count
 * gives the same graph.
 *
 * Kronecker (Graph500): edge e descends `scale` levels of the 2x2 initiator
 * [A B; C D] = [0.57 0.19; 0.19 0.05], one 16-bit draw per level (so one Philox block
 * serves 8 levels), then both ends are relabelled by a seeded bijection of [0, 2^scale)
 * (odd multiplications, xor-shifts and additions modulo 2^scale), which scatters the
 * high-degree vertices as Graph500's random permutation does, without storing it. */
#include <stdlib.h>
#include "core/philox.h"
#include "graph_impl.h"
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#define STREAM_KRONECKER 0x4b524f4eu /* "KRON" */
#define STREAM_UNIFORM 0x554e4946u /* "UNIF" */
#define STREAM_PERMUTE 0x5045524du /* "PERM" */
#define GEN_CHUNK ((int64_t)1 << 18)
#define LANES 16

/* Initiator thresholds on 16-bit draws: A, A+B, A+B+C. */
#define T_A 37356u /* 0.57 * 65536 */
#define T_AB 49807u /* 0.76 * 65536 */
#define T_ABC 62259u /* 0.95 * 65536 */

typedef struct gen_ctx {
  uint64_t seed;
  int scale;
  int64_t n, m;
  uint64_t mask, mul[4], add[4];
  int shift;
} gen_ctx;

static inline uint64_t permute(const gen_ctx *c, uint64_t x) {
  for (int r = 0; r < 4; r++) {
    x = (x * c->mul[r]) & c->mask;
    x ^= x >> c->shift;
    x = (x + c->add[r]) & c->mask;
  }
  return x;
}

static void permute_init(gen_ctx *c, int bits) {
  c->mask = bits >= 64 ? ~0ULL : (1ULL << bits) - 1;
  c->shift = bits / 2 > 0 ? bits / 2 : 1;
  for (int r = 0; r < 4; r++) {
    em_philox4 ctr = {{(uint32_t)r, 0, 0, STREAM_PERMUTE}};
    em_philox4 x = em_philox4x32_10(ctr, (uint32_t)c->seed, (uint32_t)(c->seed >> 32));
    c->mul[r] = em_philox_u64(x.x[0], x.x[1]) | 1;
    c->add[r] = em_philox_u64(x.x[2], x.x[3]);
  }
}

static inline em_philox4 block_of(uint64_t seed, uint64_t e, uint32_t j, uint32_t stream) {
  em_philox4 ctr = {{(uint32_t)e, (uint32_t)(e >> 32), j, stream}};
  return em_philox4x32_10(ctr, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* Philox for 16 consecutive edges at once (block j of each), words out[w][lane]. The
 * AVX-512 path computes exactly what em_philox4x32_10 does, 16 lanes per instruction. */
static void blocks16(uint64_t seed, uint64_t e0, uint32_t j, uint32_t stream, uint32_t out[4][LANES]) {
#ifdef __AVX512F__
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512i x0 = _mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)e0), lane);
  /* the high word carries when the low word wraps within the 16 lanes */
  __mmask16 wrapped = _mm512_cmplt_epu32_mask(x0, _mm512_set1_epi32((int)(uint32_t)e0));
  __m512i x1 = _mm512_mask_add_epi32(_mm512_set1_epi32((int)(uint32_t)(e0 >> 32)), wrapped,
                                     _mm512_set1_epi32((int)(uint32_t)(e0 >> 32)), _mm512_set1_epi32(1));
  __m512i x2 = _mm512_set1_epi32((int)j), x3 = _mm512_set1_epi32((int)stream);
  const __m512i m0 = _mm512_set1_epi32((int)EM_PHILOX_M0), m1 = _mm512_set1_epi32((int)EM_PHILOX_M1);
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    if (r) k0 += EM_PHILOX_W0, k1 += EM_PHILOX_W1;
    /* 32x32 -> 64-bit products of even and odd lanes, split into hi and lo words */
    __m512i p0e = _mm512_mul_epu32(x0, m0), p0o = _mm512_mul_epu32(_mm512_srli_epi64(x0, 32), m0);
    __m512i p1e = _mm512_mul_epu32(x2, m1), p1o = _mm512_mul_epu32(_mm512_srli_epi64(x2, 32), m1);
    __m512i lo0 = _mm512_mask_blend_epi32(0xAAAA, p0e, _mm512_slli_epi64(p0o, 32));
    __m512i hi0 = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(p0e, 32), p0o);
    __m512i lo1 = _mm512_mask_blend_epi32(0xAAAA, p1e, _mm512_slli_epi64(p1o, 32));
    __m512i hi1 = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(p1e, 32), p1o);
    __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, x1), _mm512_set1_epi32((int)k0));
    __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, x3), _mm512_set1_epi32((int)k1));
    x0 = n0, x1 = lo1, x2 = n2, x3 = lo0;
  }
  _mm512_storeu_si512(out[0], x0);
  _mm512_storeu_si512(out[1], x1);
  _mm512_storeu_si512(out[2], x2);
  _mm512_storeu_si512(out[3], x3);
#else
  for (int i = 0; i < LANES; i++) {
    em_philox4 x = block_of(seed, e0 + (uint64_t)i, j, stream);
    for (int w = 0; w < 4; w++) out[w][i] = x.x[w];
  }
#endif
}

static inline void descend(uint32_t draw, int level, uint64_t *u, uint64_t *v) {
  uint64_t row = draw >= T_AB, col = (draw >= T_A && draw < T_AB) || draw >= T_ABC;
  *u |= row << level;
  *v |= col << level;
}

/* One Kronecker edge, scalar: the reference the batched path must match. */
static void kronecker_edge(const gen_ctx *c, uint64_t e, uint32_t *u, uint32_t *v) {
  uint64_t a = 0, b = 0;
  for (int l = 0; l < c->scale; l += 8) {
    em_philox4 x = block_of(c->seed, e, (uint32_t)(l / 8), STREAM_KRONECKER);
    for (int i = 0; i < 8 && l + i < c->scale; i++) descend((x.x[i / 2] >> (16 * (i % 2))) & 0xffff, l + i, &a, &b);
  }
  *u = (uint32_t)permute(c, a);
  *v = (uint32_t)permute(c, b);
}

static em_status scan_kronecker(void *ctx, int64_t chunk, gr_sink *sink) {
  const gen_ctx *c = ctx;
  int64_t begin = chunk * GEN_CHUNK, end = begin + GEN_CHUNK < c->m ? begin + GEN_CHUNK : c->m;
  int64_t e = begin;
  uint32_t words[4][LANES];
  for (; e + LANES <= end; e += LANES) {
    uint64_t a[LANES] = {0}, b[LANES] = {0};
    for (int l = 0; l < c->scale; l += 8) {
      blocks16(c->seed, (uint64_t)e, (uint32_t)(l / 8), STREAM_KRONECKER, words);
      for (int i = 0; i < 8 && l + i < c->scale; i++)
        for (int k = 0; k < LANES; k++) descend((words[i / 2][k] >> (16 * (i % 2))) & 0xffff, l + i, &a[k], &b[k]);
    }
    uint32_t pu[LANES], pv[LANES]; /* a loop of its own, so that it vectorises */
    for (int k = 0; k < LANES; k++) {
      pu[k] = (uint32_t)permute(c, a[k]);
      pv[k] = (uint32_t)permute(c, b[k]);
    }
    for (int k = 0; k < LANES; k++) gr_sink_push(sink, pu[k], pv[k]);
  }
  for (; e < end; e++) {
    uint32_t u, v;
    kronecker_edge(c, (uint64_t)e, &u, &v);
    gr_sink_push(sink, u, v);
  }
  return EM_OK;
}

static em_status scan_uniform(void *ctx, int64_t chunk, gr_sink *sink) {
  const gen_ctx *c = ctx;
  int64_t begin = chunk * GEN_CHUNK, end = begin + GEN_CHUNK < c->m ? begin + GEN_CHUNK : c->m;
  for (int64_t e = begin; e < end; e++) {
    em_philox4 x = block_of(c->seed, (uint64_t)e, 0, STREAM_UNIFORM);
    gr_sink_push(sink, (uint32_t)em_philox_below(em_philox_u64(x.x[0], x.x[1]), (uint64_t)c->n),
                 (uint32_t)em_philox_below(em_philox_u64(x.x[2], x.x[3]), (uint64_t)c->n));
  }
  return EM_OK;
}

static em_status generate(em_graph **out, gen_ctx *c, em_status (*scan)(void *, int64_t, gr_sink *), const char *op,
                          const char *what, const em_graph_options *opts) {
  em_graph_options defaults;
  if (!opts) em_graph_options_init(&defaults), opts = &defaults;
  gr_source src = {.op = op,
                   .what = what,
                   .n = c->n,
                   .max_edges = c->m,
                   .num_chunks = (c->m + GEN_CHUNK - 1) / GEN_CHUNK,
                   .scan = scan,
                   .ctx = c};
  return gr_build(out, &src, opts);
}

em_status em_graph_kronecker(em_graph **out, int32_t scale, int32_t edge_factor, uint64_t seed,
                             const em_graph_options *opts) {
  if (!out) return em_set_error(EM_ERR_ARGUMENT, "graph kronecker: out is NULL");
  *out = NULL;
  if (scale < 1 || scale > 31)
    return em_set_error(EM_ERR_ARGUMENT, "graph kronecker: scale is %d, expected 1..31 (2^scale vertices)", scale);
  if (edge_factor < 1 || ((int64_t)edge_factor << scale) > ((int64_t)1 << 40))
    return em_set_error(EM_ERR_ARGUMENT,
                        "graph kronecker: edge_factor is %d, expected 1.. with edge_factor * 2^scale <= 2^40",
                        edge_factor);
  gen_ctx c = {.seed = seed, .scale = scale, .n = (int64_t)1 << scale, .m = (int64_t)edge_factor << scale};
  permute_init(&c, scale);
  return generate(out, &c, scan_kronecker, "graph kronecker", "Kronecker edges", opts);
}

em_status em_graph_uniform(em_graph **out, int64_t num_vertices, int64_t num_edges, uint64_t seed,
                           const em_graph_options *opts) {
  if (!out) return em_set_error(EM_ERR_ARGUMENT, "graph uniform: out is NULL");
  *out = NULL;
  if (num_vertices < 1 || num_vertices > GR_MAX_VERTICES)
    return em_set_error(EM_ERR_ARGUMENT, "graph uniform: num_vertices is %lld, expected 1..%lld",
                        (long long)num_vertices, (long long)GR_MAX_VERTICES);
  if (num_edges < 0 || num_edges > ((int64_t)1 << 40))
    return em_set_error(EM_ERR_ARGUMENT, "graph uniform: num_edges is %lld, expected 0..2^40", (long long)num_edges);
  gen_ctx c = {.seed = seed, .n = num_vertices, .m = num_edges};
  return generate(out, &c, scan_uniform, "graph uniform", "uniform edges", opts);
}

/* For the tests: the scalar reference of one Kronecker edge. */
void gr_kronecker_edge_ref(int32_t scale, uint64_t seed, uint64_t e, uint32_t *u, uint32_t *v) {
  gen_ctx c = {.seed = seed, .scale = scale, .n = (int64_t)1 << scale};
  permute_init(&c, scale);
  kronecker_edge(&c, e, u, v);
}

/* Edges [e0, e1) of either generator (each rank of a partitioned build makes its slice). */
void gr_generate_slice(int kind, int32_t scale, int64_t n, uint64_t seed, int64_t e0, int64_t e1, uint32_t *u,
                       uint32_t *v) {
  gen_ctx c = {.seed = seed, .scale = scale, .n = n};
  if (kind == 0) permute_init(&c, scale);
#pragma omp parallel for schedule(static) num_threads(gr_threads())
  for (int64_t e = e0; e < e1; e++) {
    if (kind == 0) {
      kronecker_edge(&c, (uint64_t)e, &u[e - e0], &v[e - e0]);
    } else {
      em_philox4 x = block_of(seed, (uint64_t)e, 0, STREAM_UNIFORM);
      u[e - e0] = (uint32_t)em_philox_below(em_philox_u64(x.x[0], x.x[1]), (uint64_t)n);
      v[e - e0] = (uint32_t)em_philox_below(em_philox_u64(x.x[2], x.x[3]), (uint64_t)n);
    }
  }
}
