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

/* Philox for 16 consecutive edges at once (block j of each): word w of edge e0 + k in
 * lane k of out[w], exactly what em_philox4x32_10 computes. Edges e0..e0+7 and
 * e0+8..e0+15 run in two vectors of 64-bit lanes, a word in each lane's low half: one
 * multiply then gives a 32x32 product's both halves, and the garbage above a low word
 * never reaches a result (multiplies read low halves only; the outputs take low halves). */
#ifdef __AVX512F__
static void blocks16(uint64_t seed, uint64_t e0, uint32_t j, uint32_t stream, __m512i out[4]) {
  const __m512i lane = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
  const __m512i m0 = _mm512_set1_epi64(EM_PHILOX_M0), m1 = _mm512_set1_epi64(EM_PHILOX_M1);
  __m512i x[2][4];
  for (int h = 0; h < 2; h++) {
    __m512i e = _mm512_add_epi64(_mm512_set1_epi64((long long)(e0 + 8 * (uint64_t)h)), lane);
    x[h][0] = e, x[h][1] = _mm512_srli_epi64(e, 32);
    x[h][2] = _mm512_set1_epi64(j), x[h][3] = _mm512_set1_epi64(stream);
  }
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    if (r) k0 += EM_PHILOX_W0, k1 += EM_PHILOX_W1;
    const __m512i key0 = _mm512_set1_epi32((int)k0), key1 = _mm512_set1_epi32((int)k1);
    for (int h = 0; h < 2; h++) {
      __m512i p0 = _mm512_mul_epu32(x[h][0], m0), p1 = _mm512_mul_epu32(x[h][2], m1);
      x[h][0] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), x[h][1], key0, 0x96); /* a ^ b ^ c */
      x[h][2] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), x[h][3], key1, 0x96);
      x[h][1] = p1, x[h][3] = p0;
    }
  }
  const __m512i low_halves = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  for (int w = 0; w < 4; w++) out[w] = _mm512_permutex2var_epi32(x[0][w], low_halves, x[1][w]);
}
#endif

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

/* Edges e0 .. e0+15 into u[], v[]. The AVX-512 path keeps every step in 32-bit lanes:
 * ids have at most 31 bits, and modulo 2^scale (scale <= 31) the relabelling's products
 * and sums depend only on the low 32 bits of its constants, so the result is the scalar
 * path's bit for bit (tests/c/test_graph_generate.c checks every scale). */
static void kronecker16(const gen_ctx *c, uint64_t e0, uint32_t *u, uint32_t *v) {
#ifdef __AVX512F__
  __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512(), w[4];
  const __m512i t_a = _mm512_set1_epi32(T_A), t_ab = _mm512_set1_epi32(T_AB), t_abc = _mm512_set1_epi32(T_ABC);
  const __m512i low16 = _mm512_set1_epi32(0xffff);
  for (int l = 0; l < c->scale; l += 8) {
    blocks16(c->seed, e0, (uint32_t)(l / 8), STREAM_KRONECKER, w);
    for (int i = 0; i < 8 && l + i < c->scale; i++) {
      __m512i d = i % 2 ? _mm512_srli_epi32(w[i / 2], 16) : _mm512_and_si512(w[i / 2], low16);
      __mmask16 ge_a = _mm512_cmpge_epu32_mask(d, t_a), ge_ab = _mm512_cmpge_epu32_mask(d, t_ab);
      __mmask16 ge_abc = _mm512_cmpge_epu32_mask(d, t_abc);
      const __m512i bit = _mm512_set1_epi32((int)(1u << (l + i)));
      a = _mm512_mask_or_epi32(a, ge_ab, a, bit);
      b = _mm512_mask_or_epi32(b, (__mmask16)((ge_a & ~ge_ab) | ge_abc), b, bit);
    }
  }
  const __m512i mask = _mm512_set1_epi32((int)(uint32_t)c->mask);
  for (int r = 0; r < 4; r++) {
    const __m512i mul = _mm512_set1_epi32((int)(uint32_t)c->mul[r]), add = _mm512_set1_epi32((int)(uint32_t)c->add[r]);
    a = _mm512_and_si512(_mm512_mullo_epi32(a, mul), mask);
    b = _mm512_and_si512(_mm512_mullo_epi32(b, mul), mask);
    a = _mm512_xor_si512(a, _mm512_srli_epi32(a, (unsigned)c->shift));
    b = _mm512_xor_si512(b, _mm512_srli_epi32(b, (unsigned)c->shift));
    a = _mm512_and_si512(_mm512_add_epi32(a, add), mask);
    b = _mm512_and_si512(_mm512_add_epi32(b, add), mask);
  }
  _mm512_storeu_si512(u, a);
  _mm512_storeu_si512(v, b);
#else
  for (int k = 0; k < LANES; k++) kronecker_edge(c, e0 + (uint64_t)k, &u[k], &v[k]);
#endif
}

static em_status scan_kronecker(void *ctx, int64_t chunk, gr_sink *sink) {
  const gen_ctx *c = ctx;
  int64_t begin = chunk * GEN_CHUNK, end = begin + GEN_CHUNK < c->m ? begin + GEN_CHUNK : c->m;
  int64_t e = begin;
  for (; e + LANES <= end; e += LANES) {
    if (sink->len + LANES > sink->cap) gr_sink_flush(sink);
    kronecker16(c, (uint64_t)e, sink->src + sink->len, sink->dst + sink->len);
    sink->len += LANES;
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
  if (kind == 0) {
    permute_init(&c, scale);
    int64_t batches = (e1 - e0) / LANES;
#pragma omp parallel for schedule(static) num_threads(gr_threads())
    for (int64_t i = 0; i < batches; i++) kronecker16(&c, (uint64_t)(e0 + i * LANES), &u[i * LANES], &v[i * LANES]);
    for (int64_t e = e0 + batches * LANES; e < e1; e++) kronecker_edge(&c, (uint64_t)e, &u[e - e0], &v[e - e0]);
    return;
  }
#pragma omp parallel for schedule(static) num_threads(gr_threads())
  for (int64_t e = e0; e < e1; e++) {
    em_philox4 x = block_of(seed, (uint64_t)e, 0, STREAM_UNIFORM);
    u[e - e0] = (uint32_t)em_philox_below(em_philox_u64(x.x[0], x.x[1]), (uint64_t)n);
    v[e - e0] = (uint32_t)em_philox_below(em_philox_u64(x.x[2], x.x[3]), (uint64_t)n);
  }
}
