/* dnnl.c - oneDNN (cpu_dnnl.h): convolution forward, backward data and backward weights,
 * and matrix products, through oneDNN's C API.
 *
 * ember's tensors stay as they are (NCHW, OIHW, strided matrices); a primitive is created
 * with the layouts it prefers ("any") and, where those differ, the operands are reordered
 * into them and the results back (a reorder also rounds float32 to bfloat16). A primitive,
 * its reorders and its scratchpad size make a plan, created once per shape and kept in a
 * small table for the life of the process (oneDNN's own cache would still pay for the
 * descriptor work on every call). A plan's primitives are immutable once made; each call
 * brings its own buffers and scratchpad (user-managed), and takes the plan's stream and
 * memory objects while no other call holds them (else it makes a set of its own), so
 * calls from several threads are safe.
 *
 * Threads: Debian's libdnnl runs on OpenMP (libgomp, the same runtime as OpenBLAS and
 * ember's loops), so its parallel regions use omp_get_max_threads() of the calling thread;
 * each call sets that to ember's thread count (em_set_num_threads) first. */
#include "cpu_dnnl.h"
#include <stdlib.h>
#include <string.h>
#include "ember/core.h"

#ifndef EMBER_HAVE_DNNL
/* Built without oneDNN: every query says no, every kernel declines (the callers fall back). */
#pragma GCC diagnostic ignored "-Wunused-parameter"

int cpu_dnnl_available(void) { return 0; }
int cpu_dnnl_conv_wanted(const cpu_conv_shape *s) { return 0; }
int cpu_dnnl_gemm_wanted(int64_t M, int64_t N, int64_t K) { return 0; }
int cpu_dnnl_linear_wanted(int64_t M, int64_t N, int64_t K) { return 0; }
void cpu_dnnl_force_(int mode) {}
int64_t cpu_dnnl_runs_(void) { return 0; }

const char *em_dnnl_config(void) { return "not built in (install libdnnl-dev and rebuild)"; }
int cpu_dnnl_conv2d(float *y, const float *x, const float *w, const float *b, const cpu_conv_shape *s, int bf16) {
  return 1;
}
int cpu_dnnl_conv2d_backward_data(float *gx, const float *gy, const float *w, const cpu_conv_shape *s, int bf16) {
  return 1;
}
int cpu_dnnl_conv2d_backward_weights(float *gw, float *gb, const float *gy, const float *x, const cpu_conv_shape *s,
                                     int bf16) {
  return 1;
}
int cpu_dnnl_matmul(cpu_dnnl_mat c, cpu_dnnl_mat a, cpu_dnnl_mat b, int64_t M, int64_t N, int64_t K, float alpha,
                    float beta, int bf16) {
  return 1;
}
int cpu_dnnl_linear(cpu_dnnl_mat y, cpu_dnnl_mat x, cpu_dnnl_mat wt, const float *b, int relu, int64_t M, int64_t N,
                    int64_t K) {
  return 1;
}
int cpu_dnnl_matmul_a16(cpu_dnnl_mat c, const uint16_t *a, int64_t a_rs, int64_t a_cs, cpu_dnnl_mat b, int64_t M,
                        int64_t N, int64_t K) {
  return 1;
}

#else

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif
#include "cpu_impl.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

/* ---- the engine and the mode ---- */

static dnnl_engine_t engine;
static int env_mode; /* EMBER_DNNL: 0 never, 1 always, 2 where measured faster (unset) */
static int forced = -1;
static pthread_once_t started = PTHREAD_ONCE_INIT;
static atomic_llong runs; /* primitives run to completion (cpu_dnnl_runs_) */

int64_t cpu_dnnl_runs_(void) { return atomic_load(&runs); }

static void start(void) {
  const char *e = getenv("EMBER_DNNL");
  env_mode = e && *e ? (atoi(e) != 0) : 2;
  if (env_mode && dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) env_mode = 0;
  /* a forced mode in a test still needs the engine */
  if (!env_mode && !engine) dnnl_engine_create(&engine, dnnl_cpu, 0);
}

static int mode(void) {
  pthread_once(&started, start);
  return forced >= 0 ? (engine ? forced : 0) : env_mode;
}

int cpu_dnnl_available(void) { return mode() != 0; }

void cpu_dnnl_force_(int m) {
  pthread_once(&started, start);
  forced = m < 0 ? -1 : m != 0;
}

/* Measured on the Fashion-MNIST CNN's shapes and others (bench/cpu/dnnl_kernels.c, the
 * README's "oneDNN"): oneDNN's blocked kernels win (0.4-0.85x the time) once the layer has
 * channels to block over; with one input channel (the first layer on an image) they took
 * 2-5x as long as im2col + OpenBLAS, and a 1x1 convolution with stride 1 and no padding,
 * which ember runs as one GEMM with no unrolling, was as fast or faster without the
 * reorders. */
int cpu_dnnl_conv_wanted(const cpu_conv_shape *s) {
  int m = mode();
  if (m != 2) return m;
  int plain_gemm = s->kh == 1 && s->kw == 1 && s->sh == 1 && s->sw == 1 && s->ph == 0 && s->pw == 0;
  return s->C / s->groups >= 4 && s->Co / s->groups >= 4 && !plain_gemm;
}

/* Whether a float32 GEMM [M, K] @ [K, N] should go through oneDNN's matmul. Measured on
 * the character models' shapes (bench/seq/char_models.py; 1 thread, AVX-512): oneDNN took
 * 0.3-0.8x OpenBLAS's time from about a million multiply-adds up, OpenBLAS's packing of
 * both operands on every call being most of the cost of a [50, 128] @ [128, 512]; below,
 * the per-call set-up (stream, memory objects) loses to OpenBLAS ([64, 32] @ [32, 64]
 * took 1.7x as long). */
int cpu_dnnl_gemm_wanted(int64_t M, int64_t N, int64_t K) {
  if (!mode()) return 0;
  return M >= 8 && N >= 8 && K >= 8 && M * N * K >= ((int64_t)1 << 20);
}

/* Measured (bench/cpu/mlp_gemms, 2 threads, with the plans' memory objects kept): the
 * MLP's last layer [128, 128] @ [128, 10]^T took 3.9 us through oneDNN against 7.2 us
 * through OpenBLAS (before its bias pass); DLRM's [128, 64] @ [64, 16]^T was at parity and
 * its [128, 13] @ [13, 512]^T slower, so short K stays on OpenBLAS. */
int cpu_dnnl_linear_wanted(int64_t M, int64_t N, int64_t K) {
  if (cpu_dnnl_gemm_wanted(M, N, K)) return 1;
  return mode() != 0 && M >= 8 && N >= 8 && K >= 128 && M * N * K >= ((int64_t)1 << 17);
}

const char *em_dnnl_config(void) {
  static char line[160];
  const dnnl_version_t *v = dnnl_version();
  int m = mode();
  snprintf(line, sizeof line, "oneDNN %d.%d.%d (%s threads), %s", v->major, v->minor, v->patch,
           v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other",
           m == 0   ? "off (EMBER_DNNL=0)"
           : m == 1 ? "on for every convolution (EMBER_DNNL=1), float32 GEMMs from 1M multiply-adds"
                    : "convolutions where measured faster, float32 GEMMs from 1M multiply-adds, bfloat16 autocast");
  return line;
}

/* ---- plans ---- */

enum { OP_CONV_FWD, OP_CONV_BWD_DATA, OP_CONV_BWD_WEIGHTS, OP_MATMUL };
#define MAX_ARGS 5
#define MAX_PLANS 128

typedef struct plan_key {
  int op, bf16, has_bias;
  int64_t v[18];
  float alpha, beta;
} plan_key;

/* One operand: the layout ember has it in (user) and the one the primitive wants. */
typedef struct plan_arg {
  int arg; /* DNNL_ARG_* */
  int output;
  dnnl_memory_desc_t user, prim;
  dnnl_primitive_t reorder; /* NULL when user == prim */
  /* an input whose reorder only rounds float32 rows to bfloat16 in the same plain layout:
   * rows of `cols` elements, `ld` apart in both (plan_run converts it itself) */
  int convert;
  int64_t rows, cols, ld, prim_ld;
} plan_arg;

/* The stream and memory objects a run needs. oneDNN allocates each (aligned) and a
 * training step of the MLP made and freed ~50 of them; a plan keeps one set, used by one
 * call at a time, each run pointing them at its buffers. */
typedef struct plan_exec {
  dnnl_stream_t stream;
  dnnl_memory_t user[MAX_ARGS], prim[MAX_ARGS], scratch;
} plan_exec;

typedef struct plan {
  plan_key key;
  dnnl_primitive_desc_t pd;
  dnnl_primitive_t prim;
  int nargs;
  plan_arg args[MAX_ARGS];
  size_t scratch;
  atomic_int exec_busy; /* exec is in use by a call (another one makes its own set) */
  plan_exec exec;
} plan;

static pthread_mutex_t plans_lock = PTHREAD_MUTEX_INITIALIZER;
static plan *plans[MAX_PLANS];
static int nplans;
/* forward convolutions, kept as the hint their backward primitives are created with */
static dnnl_primitive_desc_t fwd_hints[MAX_PLANS];
static plan_key fwd_hint_keys[MAX_PLANS];
static int nhints;

static void exec_free(plan_exec *e) {
  for (int i = 0; i < MAX_ARGS; i++) {
    if (e->user[i]) dnnl_memory_destroy(e->user[i]);
    if (e->prim[i]) dnnl_memory_destroy(e->prim[i]);
  }
  if (e->scratch) dnnl_memory_destroy(e->scratch);
  if (e->stream) dnnl_stream_destroy(e->stream);
  memset(e, 0, sizeof *e);
}

static void plan_free(plan *p) {
  if (!p) return;
  exec_free(&p->exec);
  for (int i = 0; i < p->nargs; i++)
    if (p->args[i].reorder) dnnl_primitive_destroy(p->args[i].reorder);
  if (p->prim) dnnl_primitive_destroy(p->prim);
  if (p->pd) dnnl_primitive_desc_destroy(p->pd);
  free(p);
}

static plan *plan_find(const plan_key *k) {
  plan *found = NULL;
  pthread_mutex_lock(&plans_lock);
  for (int i = 0; i < nplans && !found; i++)
    if (!memcmp(&plans[i]->key, k, sizeof *k)) found = plans[i];
  pthread_mutex_unlock(&plans_lock);
  return found;
}

/* Keeps p (returns it), or returns the plan another thread kept first (freeing p). A full
 * table keeps nothing more: the caller frees p after its call (*owned = 1). */
static plan *plan_keep(plan *p, int *owned) {
  *owned = 0;
  pthread_mutex_lock(&plans_lock);
  for (int i = 0; i < nplans; i++)
    if (!memcmp(&plans[i]->key, &p->key, sizeof p->key)) {
      pthread_mutex_unlock(&plans_lock);
      plan_free(p);
      return plans[i];
    }
  if (nplans < MAX_PLANS) plans[nplans++] = p;
  else *owned = 1;
  pthread_mutex_unlock(&plans_lock);
  return p;
}

/* Marks a (an input) for plan_run's own conversion when its reorder would only round a
 * plain 2-D float32 operand to bfloat16 in the same layout (an activation under CPU
 * autocast). oneDNN 2.6's reorder took 3-4 times as long as the products it fed on the
 * char-GPT's [768, 128] and [768, 512] operands. */
static void plain_rounding(plan_arg *a) {
  const dnnl_memory_desc_t *u = &a->user, *q = &a->prim;
  if (a->output || u->ndims != 2 || q->ndims != 2 || u->data_type != dnnl_f32 || q->data_type != dnnl_bf16 ||
      u->format_kind != dnnl_blocked || q->format_kind != dnnl_blocked || u->offset0 || q->offset0 ||
      u->format_desc.blocking.inner_nblks || q->format_desc.blocking.inner_nblks)
    return;
  const dnnl_dim_t *us = u->format_desc.blocking.strides, *qs = q->format_desc.blocking.strides;
  for (int d = 0; d < 2; d++)
    if (u->dims[d] != q->dims[d] || u->padded_dims[d] != u->dims[d] || q->padded_dims[d] != q->dims[d]) return;
  /* rows along the same dim in both, each with unit stride inside (pitches may differ) */
  int inner = us[1] == 1 && qs[1] == 1 ? 1 : us[0] == 1 && qs[0] == 1 ? 0 : -1;
  if (inner < 0 || us[1 - inner] < u->dims[inner] || qs[1 - inner] < q->dims[inner]) return;
  a->rows = u->dims[1 - inner], a->cols = u->dims[inner], a->ld = us[1 - inner], a->prim_ld = qs[1 - inner];
  a->convert = 1;
}

/* dst = src rounded to bfloat16 (nearest even, as the reorder), rows ld (dst_ld) apart. */
static void round_rows(uint16_t *dst, int64_t dst_ld, const float *src, int64_t rows, int64_t cols, int64_t ld) {
  int par = rows * cols >= EM_PARALLEL_GRAIN && em_get_num_threads() > 1 && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (par) num_threads(em_get_num_threads())
  for (int64_t r = 0; r < rows; r++) {
    const float *s = src + r * ld;
    uint16_t *o = dst + r * dst_ld;
    int64_t c = 0;
#if defined(__AVX512BF16__) && defined(__AVX512F__)
    for (; c + 16 <= cols; c += 16) {
      __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(s + c));
      _mm256_storeu_si256((__m256i *)(o + c), (__m256i)h);
    }
#endif
    for (; c < cols; c++) o[c] = em_float_to_bf16(s[c]);
  }
}

/* Completes p from its primitive descriptor: the primitive, the reorders its operands need
 * (args[i].user and .arg filled by the caller) and the scratchpad size. */
static int plan_finish(plan *p) {
  if (dnnl_primitive_create(&p->prim, p->pd) != dnnl_success) return 1;
  for (int i = 0; i < p->nargs; i++) {
    plan_arg *a = &p->args[i];
    dnnl_query_t q;
    switch (a->arg) {
      case DNNL_ARG_SRC: q = dnnl_query_src_md; break;
      case DNNL_ARG_WEIGHTS: q = dnnl_query_weights_md; break;
      case DNNL_ARG_BIAS: q = dnnl_query_weights_md; break;
      case DNNL_ARG_DST: q = dnnl_query_dst_md; break;
      case DNNL_ARG_DIFF_SRC: q = dnnl_query_diff_src_md; break;
      case DNNL_ARG_DIFF_WEIGHTS: q = dnnl_query_diff_weights_md; break;
      case DNNL_ARG_DIFF_BIAS: q = dnnl_query_diff_weights_md; break;
      default: q = dnnl_query_diff_dst_md; break;
    }
    int index = a->arg == DNNL_ARG_BIAS || a->arg == DNNL_ARG_DIFF_BIAS;
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(p->pd, q, index);
    if (!md) return 1;
    a->prim = *md;
    a->reorder = NULL;
    a->convert = 0;
    if (dnnl_memory_desc_equal(&a->user, &a->prim)) continue;
    plain_rounding(a);
    dnnl_primitive_desc_t rpd;
    const dnnl_memory_desc_t *from = a->output ? &a->prim : &a->user, *to = a->output ? &a->user : &a->prim;
    if (dnnl_reorder_primitive_desc_create(&rpd, from, engine, to, engine, NULL) != dnnl_success) return 1;
    dnnl_status_t s = dnnl_primitive_create(&a->reorder, rpd);
    dnnl_primitive_desc_destroy(rpd);
    if (s != dnnl_success) return 1;
  }
  const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(p->pd, dnnl_query_scratchpad_md, 0);
  p->scratch = smd ? dnnl_memory_desc_get_size(smd) : 0;
  return 0;
}

/* A primitive attribute with a user-managed scratchpad (and alpha, beta for matmul, and a
 * ReLU applied last: relu(alpha * a @ b + bias + beta * c)). */
static dnnl_primitive_attr_t make_attr(float alpha, float beta, int relu) {
  dnnl_primitive_attr_t attr;
  if (dnnl_primitive_attr_create(&attr) != dnnl_success) return NULL;
  dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  if (alpha != 1) dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha);
  if (beta != 0 || relu) {
    dnnl_post_ops_t po = NULL;
    int bad = dnnl_post_ops_create(&po) != dnnl_success;
    if (!bad && beta != 0) bad = dnnl_post_ops_append_sum(po, beta) != dnnl_success;
    if (!bad && relu) bad = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f) != dnnl_success;
    if (!bad) bad = dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success;
    if (po) dnnl_post_ops_destroy(po);
    if (bad) { /* a plan without the post-op would compute something else */
      dnnl_primitive_attr_destroy(attr);
      return NULL;
    }
  }
  return attr;
}

/* ---- running a plan ---- */

/* *m describing md at ptr: made the first time, pointed at ptr after. */
static int memory(dnnl_memory_t *m, const dnnl_memory_desc_t *md, void *ptr) {
  if (*m) return dnnl_memory_set_data_handle(*m, ptr) != dnnl_success;
  return dnnl_memory_create(m, md, engine, ptr) != dnnl_success;
}

static int exec2(dnnl_primitive_t prim, dnnl_stream_t s, dnnl_memory_t from, dnnl_memory_t to) {
  dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
  return dnnl_primitive_execute(prim, s, 2, args) != dnnl_success;
}

/* Runs p on ptrs (one per args[i], in ember's layouts). */
static int plan_run(plan *p, void *const *ptrs) {
  int threads = em_get_num_threads();
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
  /* the plan's stream and memory objects, or (while another call holds them) a set of
   * this call's own, freed at its end */
  int own = atomic_exchange(&p->exec_busy, 1);
  plan_exec mine = {0}, *e = own ? &mine : &p->exec;
  if (!e->stream && dnnl_stream_create(&e->stream, engine, dnnl_stream_default_flags) != dnnl_success) {
    if (!own) atomic_store(&p->exec_busy, 0);
    return 1;
  }
  dnnl_stream_t s = e->stream;
  dnnl_memory_t *user = e->user, *prim = e->prim;
  /* buffers from the CPU backend's allocator: the same sizes come back every step, and its
   * cache hands back the block the last call freed (glibc's large-chunk bins cost more) */
  void *bufs[MAX_ARGS] = {0}, *scratch = NULL;
  size_t sizes[MAX_ARGS] = {0};
  const em_device host = {EM_CPU, 0};
  dnnl_exec_arg_t args[MAX_ARGS + 1];
  int err = 0;
  for (int i = 0; i < p->nargs && !err; i++) {
    const plan_arg *a = &p->args[i];
    err = memory(&user[i], &a->user, ptrs[i]);
    if (!err && a->reorder) {
      sizes[i] = dnnl_memory_desc_get_size(&a->prim);
      err = !(bufs[i] = cpu_alloc(sizes[i], host)) || memory(&prim[i], &a->prim, bufs[i]);
      if (!err && a->convert) round_rows(bufs[i], a->prim_ld, ptrs[i], a->rows, a->cols, a->ld);
      else if (!err && !a->output) err = exec2(a->reorder, s, user[i], prim[i]);
    }
    args[i].arg = a->arg;
    args[i].memory = a->reorder ? prim[i] : user[i];
  }
  int n = p->nargs;
  if (!err && p->scratch) {
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(p->pd, dnnl_query_scratchpad_md, 0);
    err = !(scratch = cpu_alloc(p->scratch, host)) || memory(&e->scratch, smd, scratch);
    args[n].arg = DNNL_ARG_SCRATCHPAD;
    args[n++].memory = e->scratch;
  }
  if (!err) err = dnnl_primitive_execute(p->prim, s, n, args) != dnnl_success;
  for (int i = 0; i < p->nargs && !err; i++)
    if (p->args[i].output && p->args[i].reorder) err = exec2(p->args[i].reorder, s, prim[i], user[i]);
  if (!err) err = dnnl_stream_wait(s) != dnnl_success;
  if (!err) atomic_fetch_add(&runs, 1);
  for (int i = 0; i < p->nargs; i++)
    if (bufs[i]) cpu_free(bufs[i], sizes[i], host);
  if (scratch) cpu_free(scratch, p->scratch, host);
  if (own) exec_free(&mine);
  else atomic_store(&p->exec_busy, 0);
  return err;
}

/* Finds or makes the plan of key with make, runs it on ptrs. */
static int plan_call(const plan_key *key, int (*make)(plan *, const void *), const void *ctx, void *const *ptrs) {
  plan *p = plan_find(key);
  int owned = 0;
  if (!p) {
    if (!(p = calloc(1, sizeof *p))) return 1;
    p->key = *key;
    if (make(p, ctx) || plan_finish(p)) {
      plan_free(p);
      return 1;
    }
    p = plan_keep(p, &owned);
  }
  int err = plan_run(p, ptrs);
  if (owned) plan_free(p);
  return err;
}

/* ---- convolution ---- */

static int desc_tag(dnnl_memory_desc_t *md, int nd, const int64_t *dims, dnnl_data_type_t dt, dnnl_format_tag_t tag) {
  dnnl_dims_t d = {0}; /* the API reads DNNL_MAX_NDIMS entries */
  memcpy(d, dims, sizeof(int64_t) * nd);
  return dnnl_memory_desc_init_by_tag(md, nd, d, dt, tag) != dnnl_success;
}

typedef struct conv_descs {
  dnnl_memory_desc_t x, w, b, y; /* ember's layouts, float32 */
  dnnl_memory_desc_t px, pw, pb, py; /* what the primitive is asked for: "any", bfloat16 or float32 */
  dnnl_dims_t strides, dil, pl, pr;
} conv_descs;

static int conv_describe(conv_descs *d, const cpu_conv_shape *s, int bf16) {
  memset(d, 0, sizeof *d);
  int64_t xd[4] = {s->N, s->C, s->H, s->W}, yd[4] = {s->N, s->Co, s->OH, s->OW}, bd[1] = {s->Co};
  int64_t wd[5] = {s->groups, s->Co / s->groups, s->C / s->groups, s->kh, s->kw};
  int g = s->groups > 1;
  const int64_t *wdims = g ? wd : wd + 1;
  int wnd = g ? 5 : 4;
  dnnl_data_type_t lo = bf16 ? dnnl_bf16 : dnnl_f32;
  d->strides[0] = s->sh, d->strides[1] = s->sw;
  d->dil[0] = s->dh - 1, d->dil[1] = s->dw - 1;
  d->pl[0] = s->ph, d->pl[1] = s->pw;
  /* the right/bottom padding that makes the output size come out exactly */
  d->pr[0] = (s->OH - 1) * s->sh + (s->kh - 1) * s->dh + 1 - s->H - s->ph;
  d->pr[1] = (s->OW - 1) * s->sw + (s->kw - 1) * s->dw + 1 - s->W - s->pw;
  return desc_tag(&d->x, 4, xd, dnnl_f32, dnnl_nchw) || desc_tag(&d->y, 4, yd, dnnl_f32, dnnl_nchw) ||
         desc_tag(&d->w, wnd, wdims, dnnl_f32, g ? dnnl_goihw : dnnl_oihw) ||
         desc_tag(&d->b, 1, bd, dnnl_f32, dnnl_a) || desc_tag(&d->px, 4, xd, lo, dnnl_format_tag_any) ||
         desc_tag(&d->py, 4, yd, dnnl_f32, dnnl_format_tag_any) ||
         desc_tag(&d->pw, wnd, wdims, lo, dnnl_format_tag_any) || desc_tag(&d->pb, 1, bd, dnnl_f32, dnnl_a);
}

static void conv_key(plan_key *k, int op, const cpu_conv_shape *s, int bf16, int has_bias) {
  memset(k, 0, sizeof *k);
  k->op = op, k->bf16 = bf16, k->has_bias = has_bias;
  const int64_t v[] = {s->N,  s->C,  s->H,  s->W,  s->Co, s->kh, s->kw, s->OH,
                       s->OW, s->sh, s->sw, s->ph, s->pw, s->dh, s->dw, s->groups};
  memcpy(k->v, v, sizeof v);
}

static dnnl_primitive_desc_t conv_forward_pd(const cpu_conv_shape *s, int bf16, int has_bias,
                                             dnnl_primitive_attr_t attr) {
  conv_descs d;
  dnnl_convolution_desc_t cd;
  dnnl_primitive_desc_t pd = NULL;
  if (conv_describe(&d, s, bf16) ||
      dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_training, dnnl_convolution_direct, &d.px, &d.pw,
                                                 has_bias ? &d.pb : NULL, &d.py, d.strides, d.dil, d.pl,
                                                 d.pr) != dnnl_success ||
      dnnl_primitive_desc_create(&pd, &cd, attr, engine, NULL) != dnnl_success)
    return NULL;
  return pd;
}

/* The forward primitive descriptor of s, kept for the backward ones to be created with. */
static const_dnnl_primitive_desc_t conv_hint(const cpu_conv_shape *s, int bf16) {
  plan_key k;
  conv_key(&k, OP_CONV_FWD, s, bf16, 0);
  const_dnnl_primitive_desc_t found = NULL;
  pthread_mutex_lock(&plans_lock);
  for (int i = 0; i < nhints && !found; i++)
    if (!memcmp(&fwd_hint_keys[i], &k, sizeof k)) found = fwd_hints[i];
  if (!found && nhints < MAX_PLANS) {
    dnnl_primitive_desc_t pd = conv_forward_pd(s, bf16, 0, NULL);
    if (pd) {
      fwd_hint_keys[nhints] = k;
      found = fwd_hints[nhints++] = pd;
    }
  }
  pthread_mutex_unlock(&plans_lock);
  return found;
}

typedef struct conv_ctx {
  const cpu_conv_shape *s;
} conv_ctx;

static int make_conv_fwd(plan *p, const void *vctx) {
  const cpu_conv_shape *s = ((const conv_ctx *)vctx)->s;
  conv_descs d;
  dnnl_primitive_attr_t attr = make_attr(1, 0, 0);
  if (!attr || conv_describe(&d, s, p->key.bf16)) return 1;
  p->pd = conv_forward_pd(s, p->key.bf16, p->key.has_bias, attr);
  dnnl_primitive_attr_destroy(attr);
  if (!p->pd) return 1;
  p->args[0] = (plan_arg){.arg = DNNL_ARG_SRC, .user = d.x};
  p->args[1] = (plan_arg){.arg = DNNL_ARG_WEIGHTS, .user = d.w};
  p->args[2] = (plan_arg){.arg = DNNL_ARG_DST, .output = 1, .user = d.y};
  p->nargs = 3;
  if (p->key.has_bias) p->args[p->nargs++] = (plan_arg){.arg = DNNL_ARG_BIAS, .user = d.b};
  return 0;
}

static int make_conv_bwd_data(plan *p, const void *vctx) {
  const cpu_conv_shape *s = ((const conv_ctx *)vctx)->s;
  conv_descs d;
  dnnl_convolution_desc_t cd;
  const_dnnl_primitive_desc_t hint = conv_hint(s, p->key.bf16);
  dnnl_primitive_attr_t attr = make_attr(1, 0, 0);
  int bad = !hint || !attr || conv_describe(&d, s, p->key.bf16);
  if (!bad) {
    dnnl_memory_desc_t gy = p->key.bf16 ? d.px : d.py; /* the gradient of y, as low as x */
    int64_t yd[4] = {s->N, s->Co, s->OH, s->OW};
    bad = desc_tag(&gy, 4, yd, p->key.bf16 ? dnnl_bf16 : dnnl_f32, dnnl_format_tag_any);
    dnnl_memory_desc_t gx = d.px;
    int64_t xd[4] = {s->N, s->C, s->H, s->W};
    bad = bad || desc_tag(&gx, 4, xd, dnnl_f32, dnnl_format_tag_any);
    bad = bad ||
          dnnl_dilated_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct, &gx, &d.pw, &gy, d.strides,
                                                           d.dil, d.pl, d.pr) != dnnl_success ||
          dnnl_primitive_desc_create(&p->pd, &cd, attr, engine, hint) != dnnl_success;
  }
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (bad) return 1;
  p->args[0] = (plan_arg){.arg = DNNL_ARG_DIFF_DST, .user = d.y};
  p->args[1] = (plan_arg){.arg = DNNL_ARG_WEIGHTS, .user = d.w};
  p->args[2] = (plan_arg){.arg = DNNL_ARG_DIFF_SRC, .output = 1, .user = d.x};
  p->nargs = 3;
  return 0;
}

static int make_conv_bwd_weights(plan *p, const void *vctx) {
  const cpu_conv_shape *s = ((const conv_ctx *)vctx)->s;
  conv_descs d;
  dnnl_convolution_desc_t cd;
  const_dnnl_primitive_desc_t hint = conv_hint(s, p->key.bf16);
  dnnl_primitive_attr_t attr = make_attr(1, 0, 0);
  int bad = !hint || !attr || conv_describe(&d, s, p->key.bf16);
  if (!bad) {
    int64_t yd[4] = {s->N, s->Co, s->OH, s->OW};
    int64_t wd[5] = {s->groups, s->Co / s->groups, s->C / s->groups, s->kh, s->kw};
    int g = s->groups > 1;
    dnnl_memory_desc_t gy, gw;
    bad = desc_tag(&gy, 4, yd, p->key.bf16 ? dnnl_bf16 : dnnl_f32, dnnl_format_tag_any) ||
          desc_tag(&gw, g ? 5 : 4, g ? wd : wd + 1, dnnl_f32, dnnl_format_tag_any) ||
          dnnl_dilated_convolution_backward_weights_desc_init(&cd, dnnl_convolution_direct, &d.px, &gw,
                                                              p->key.has_bias ? &d.pb : NULL, &gy, d.strides, d.dil,
                                                              d.pl, d.pr) != dnnl_success ||
          dnnl_primitive_desc_create(&p->pd, &cd, attr, engine, hint) != dnnl_success;
  }
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (bad) return 1;
  p->args[0] = (plan_arg){.arg = DNNL_ARG_SRC, .user = d.x};
  p->args[1] = (plan_arg){.arg = DNNL_ARG_DIFF_DST, .user = d.y};
  p->args[2] = (plan_arg){.arg = DNNL_ARG_DIFF_WEIGHTS, .output = 1, .user = d.w};
  p->nargs = 3;
  if (p->key.has_bias) p->args[p->nargs++] = (plan_arg){.arg = DNNL_ARG_DIFF_BIAS, .output = 1, .user = d.b};
  return 0;
}

/* oneDNN's sizes are int64 but its kernels index with int: leave huge shapes to ember. */
static int conv_ok(const cpu_conv_shape *s) {
  const int64_t lim = (int64_t)1 << 30;
  return mode() && s->N > 0 && s->C > 0 && s->Co > 0 && s->OH > 0 && s->OW > 0 && s->N * s->C * s->H * s->W < lim &&
         s->N * s->Co * s->OH * s->OW < lim;
}

int cpu_dnnl_conv2d(float *y, const float *x, const float *w, const float *b, const cpu_conv_shape *s, int bf16) {
  if (!conv_ok(s)) return 1;
  plan_key k;
  conv_key(&k, OP_CONV_FWD, s, bf16, b != NULL);
  conv_ctx c = {s};
  void *ptrs[4] = {(void *)x, (void *)w, y, (void *)b};
  return plan_call(&k, make_conv_fwd, &c, ptrs);
}

int cpu_dnnl_conv2d_backward_data(float *gx, const float *gy, const float *w, const cpu_conv_shape *s, int bf16) {
  if (!conv_ok(s)) return 1;
  plan_key k;
  conv_key(&k, OP_CONV_BWD_DATA, s, bf16, 0);
  conv_ctx c = {s};
  void *ptrs[3] = {(void *)gy, (void *)w, gx};
  return plan_call(&k, make_conv_bwd_data, &c, ptrs);
}

int cpu_dnnl_conv2d_backward_weights(float *gw, float *gb, const float *gy, const float *x, const cpu_conv_shape *s,
                                     int bf16) {
  if (!conv_ok(s)) return 1;
  plan_key k;
  conv_key(&k, OP_CONV_BWD_WEIGHTS, s, bf16, gb != NULL);
  conv_ctx c = {s};
  void *ptrs[4] = {(void *)x, (void *)gy, gw, gb};
  return plan_call(&k, make_conv_bwd_weights, &c, ptrs);
}

/* ---- matrix products ---- */

typedef struct mm_ctx {
  int64_t M, N, K;
  cpu_dnnl_mat c, a, b;
  int has_bias, relu, a_bf16;
} mm_ctx;

static int make_matmul(plan *p, const void *vctx) {
  const mm_ctx *m = vctx;
  dnnl_dims_t ad = {m->M, m->K}, bd = {m->K, m->N}, cd = {m->M, m->N}, biasd = {1, m->N};
  dnnl_dims_t as = {m->a.rs, m->a.cs}, bs = {m->b.rs, m->b.cs}, cs = {m->c.rs, m->c.cs}, biass = {m->N, 1};
  dnnl_memory_desc_t a, b, c, bias, pa, pb;
  dnnl_matmul_desc_t md;
  dnnl_data_type_t lo = p->key.bf16 ? dnnl_bf16 : dnnl_f32;
  dnnl_primitive_attr_t attr = make_attr(p->key.alpha, p->key.beta, m->relu);
  int bad = !attr ||
            dnnl_memory_desc_init_by_strides(&a, 2, ad, m->a_bf16 ? dnnl_bf16 : dnnl_f32, as) != dnnl_success ||
            dnnl_memory_desc_init_by_strides(&b, 2, bd, dnnl_f32, bs) != dnnl_success ||
            dnnl_memory_desc_init_by_strides(&c, 2, cd, dnnl_f32, cs) != dnnl_success ||
            (m->has_bias && dnnl_memory_desc_init_by_strides(&bias, 2, biasd, dnnl_f32, biass) != dnnl_success);
  /* float32: the operands as they lie; bfloat16: rounded into the layout the kernel wants */
  if (!bad) {
    pa = a, pb = b;
    /* a stored transposed (a weight gradient's dY^T) is rounded in the order it lies:
     * into row-major bfloat16 the reorder is a transpose, and it took 4x the product */
    dnnl_format_tag_t at = m->a.rs == 1 && m->a.cs != 1 ? dnnl_ba : dnnl_ab;
    /* b too is rounded in the order it lies, not into the blocked layout oneDNN would pick:
     * the kernel packs a plain b itself, in its threads, for less than the reorder into
     * blocks cost (char-GPT: the reorders of its [768, 512] activations took twice the
     * products; tokens/s +6-11%, the bfloat16 MLP +17-22%) */
    dnnl_format_tag_t bt = m->b.rs == 1 && m->b.cs != 1 ? dnnl_ba : dnnl_ab;
    if (p->key.bf16) bad = desc_tag(&pa, 2, ad, lo, at) || desc_tag(&pb, 2, bd, lo, bt);
  }
  bad = bad || dnnl_matmul_desc_init(&md, &pa, &pb, m->has_bias ? &bias : NULL, &c) != dnnl_success ||
        dnnl_primitive_desc_create(&p->pd, &md, attr, engine, NULL) != dnnl_success;
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (bad) return 1;
  int n = 0;
  p->args[n++] = (plan_arg){.arg = DNNL_ARG_SRC, .user = a};
  p->args[n++] = (plan_arg){.arg = DNNL_ARG_WEIGHTS, .user = b};
  if (m->has_bias) p->args[n++] = (plan_arg){.arg = DNNL_ARG_BIAS, .user = bias};
  p->args[n++] = (plan_arg){.arg = DNNL_ARG_DST, .output = 1, .user = c};
  p->nargs = n;
  return 0;
}

/* c = [relu](alpha * a @ b [+ bias] + beta * c) through a plan; 0 when computed. */
static int matmul_call(cpu_dnnl_mat c, cpu_dnnl_mat a, cpu_dnnl_mat b, const float *bias, int relu, int64_t M,
                       int64_t N, int64_t K, float alpha, float beta, int bf16, int a_bf16) {
  if (!mode() || M <= 0 || N <= 0 || K <= 0) return 1;
  plan_key k;
  memset(&k, 0, sizeof k);
  k.op = OP_MATMUL, k.bf16 = bf16, k.has_bias = bias != NULL, k.alpha = alpha, k.beta = beta;
  const int64_t v[] = {M, N, K, a.rs, a.cs, b.rs, b.cs, c.rs, c.cs, relu, a_bf16};
  memcpy(k.v, v, sizeof v);
  /* float32 has OpenBLAS to fall back on: with the table full, a new shape would create
   * (JIT) its primitive on every call, so it is declined instead */
  if (!bf16 && !plan_find(&k)) {
    pthread_mutex_lock(&plans_lock);
    int full = nplans >= MAX_PLANS;
    pthread_mutex_unlock(&plans_lock);
    if (full) return 1;
  }
  mm_ctx m = {M, N, K, c, a, b, bias != NULL, relu, a_bf16};
  /* with the sum post-op the output is read too: it must go in as well as come out */
  void *ptrs[4] = {a.ptr, b.ptr, bias ? (void *)bias : c.ptr, c.ptr};
  return plan_call(&k, make_matmul, &m, ptrs);
}

int cpu_dnnl_matmul(cpu_dnnl_mat c, cpu_dnnl_mat a, cpu_dnnl_mat b, int64_t M, int64_t N, int64_t K, float alpha,
                    float beta, int bf16) {
  return matmul_call(c, a, b, NULL, 0, M, N, K, alpha, beta, bf16, 0);
}

int cpu_dnnl_matmul_a16(cpu_dnnl_mat c, const uint16_t *a, int64_t a_rs, int64_t a_cs, cpu_dnnl_mat b, int64_t M,
                        int64_t N, int64_t K) {
  cpu_dnnl_mat am = {(float *)(uintptr_t)a, a_rs, a_cs};
  return matmul_call(c, am, b, NULL, 0, M, N, K, 1, 0, 1, 1);
}

int cpu_dnnl_linear(cpu_dnnl_mat y, cpu_dnnl_mat x, cpu_dnnl_mat wt, const float *b, int relu, int64_t M, int64_t N,
                    int64_t K) {
  return matmul_call(y, x, wt, b, relu != 0, M, N, K, 1, 0, 0, 0);
}

#endif
