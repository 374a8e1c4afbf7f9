/* backend.c - the CPU backend's dispatch table and host allocator. */
#include <malloc.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <stdlib.h>
#include "cpu_impl.h"
#include "cpu_seq.h"

/* Training allocates and frees the same large activations every step. glibc serves
 * blocks above its (adaptive) mmap threshold with fresh mmaps, and the page faults of
 * touching them again cost about a third of a CNN step. Keeping blocks up to 32 MiB in the
 * heap, and not trimming it eagerly, lets them be reused. EMBER_MALLOC_DEFAULTS=1 keeps
 * glibc's own settings. */
__attribute__((constructor)) static void tune_malloc(void) {
  const char *keep = getenv("EMBER_MALLOC_DEFAULTS");
  if (keep && *keep && *keep != '0') return;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_TOP_PAD, 64 << 20);
}

/* Large blocks are 2 MiB aligned and asked to be backed by transparent huge pages: a fresh
 * 64 MB result then costs 32 page faults instead of 16384, which is most of the time of an
 * out-of-place elementwise op on it.
 *
 * Freed large blocks are kept for reuse, by size (a training step frees and asks again for
 * the same activation sizes every step): glibc's heap, fragmented by 2 MiB-aligned blocks,
 * otherwise kept growing into fresh pages, and the kernel zeroing those pages took 3.5% of
 * a Fashion-MNIST CNN step. The cache holds at most EMBER_CPU_CACHE_MB (256) MiB, the
 * oldest blocks going first; EMBER_CPU_CACHE_MB=0 turns it off.
 *
 * Blocks from CACHE_FROM (64 KiB) up, an MLP's activations and weight gradients, are kept
 * the same way, in 4 KiB steps: glibc's large-chunk bins (sorting, splitting, merging, and
 * consolidating its small bins whenever one is freed) took 4-5% of a Fashion-MNIST MLP step,
 * where an exact-size match is a short search and the block the step freed last. */
#define HUGE_PAGE ((size_t)2 << 20)
#define HUGE_FROM ((size_t)4 << 20)
#define CACHE_FROM ((size_t)64 << 10)
#define CACHE_STEP ((size_t)4 << 10)
#define CACHE_SLOTS 64

static struct {
  pthread_mutex_t lock;
  size_t size[CACHE_SLOTS]; /* rounded sizes, oldest first */
  void *ptr[CACHE_SLOTS];
  int n;
  size_t bytes, cap; /* set once, by the constructor below */
} cache = {.lock = PTHREAD_MUTEX_INITIALIZER, .cap = (size_t)256 << 20};

__attribute__((constructor)) static void read_cache_cap(void) {
  const char *v = getenv("EMBER_CPU_CACHE_MB");
  if (v && *v) cache.cap = atol(v) > 0 ? (size_t)atol(v) << 20 : 0;
}

static void cache_drop(int i) { /* under the lock; the caller frees the block */
  cache.bytes -= cache.size[i];
  memmove(&cache.size[i], &cache.size[i + 1], sizeof cache.size[0] * (cache.n - i - 1));
  memmove(&cache.ptr[i], &cache.ptr[i + 1], sizeof cache.ptr[0] * (cache.n - i - 1));
  cache.n--;
}

/* A cached block of exactly `rounded` bytes (the most recently freed: warmest), or NULL. */
static void *cache_take(size_t rounded) {
  void *p = NULL;
  pthread_mutex_lock(&cache.lock);
  for (int i = cache.n - 1; i >= 0; i--)
    if (cache.size[i] == rounded) {
      p = cache.ptr[i];
      cache_drop(i);
      break;
    }
  pthread_mutex_unlock(&cache.lock);
  return p;
}

/* Keeps p for reuse; returns 0 when it does not fit (the caller frees it). Blocks pushed
 * out to make room are freed here. */
static int cache_put(void *p, size_t rounded) {
  size_t cap = cache.cap;
  if (rounded > cap / 2) return 0;
  void *evicted[CACHE_SLOTS];
  int ne = 0;
  pthread_mutex_lock(&cache.lock);
  while (cache.n > 0 && (cache.n == CACHE_SLOTS || cache.bytes + rounded > cap)) {
    evicted[ne++] = cache.ptr[0];
    cache_drop(0);
  }
  cache.size[cache.n] = rounded;
  cache.ptr[cache.n++] = p;
  cache.bytes += rounded;
  pthread_mutex_unlock(&cache.lock);
  for (int i = 0; i < ne; i++) free(evicted[i]);
  return 1;
}

/* Frees every cached block (before giving up on an allocation). */
static void cache_flush(void) {
  pthread_mutex_lock(&cache.lock);
  int n = cache.n;
  void *ptrs[CACHE_SLOTS];
  memcpy(ptrs, cache.ptr, sizeof ptrs[0] * n);
  cache.n = 0;
  cache.bytes = 0;
  pthread_mutex_unlock(&cache.lock);
  for (int i = 0; i < n; i++) free(ptrs[i]);
}

void *cpu_alloc(size_t nbytes, em_device device) {
  (void)device;
  if (nbytes >= HUGE_FROM) {
    size_t rounded = (nbytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    void *p = cache_take(rounded);
    if (p) return p;
    p = aligned_alloc(HUGE_PAGE, rounded);
    if (!p) { /* out of memory: give back what the cache holds, and try once more */
      cache_flush();
      p = aligned_alloc(HUGE_PAGE, rounded);
    }
    if (p) madvise(p, rounded, MADV_HUGEPAGE); /* advice only: failure is harmless */
    return p;
  }
  if (nbytes >= CACHE_FROM) {
    size_t rounded = (nbytes + CACHE_STEP - 1) & ~(CACHE_STEP - 1);
    void *p = cache_take(rounded);
    if (p) return p;
    p = aligned_alloc(64, rounded);
    if (!p) {
      cache_flush();
      p = aligned_alloc(64, rounded);
    }
    return p;
  }
  size_t rounded = (nbytes + 63) & ~(size_t)63; /* aligned_alloc wants a multiple */
  return aligned_alloc(64, rounded);
}

void cpu_free(void *ptr, size_t nbytes, em_device device) {
  (void)device;
  if (ptr && nbytes >= HUGE_FROM && cache_put(ptr, (nbytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1))) return;
  if (ptr && nbytes >= CACHE_FROM && nbytes < HUGE_FROM && cache_put(ptr, (nbytes + CACHE_STEP - 1) & ~(CACHE_STEP - 1)))
    return;
  free(ptr);
}

/* Every entry of runtime/tensor/backend.h, from its list: cpu_<entry>, declared in
 * cpu_impl.h (attention's in cpu_seq.h). The CPU has the kernel of each optional entry but
 * the recurrent layer's. */
#define cpu_optional_count_correct cpu_count_correct
#define cpu_optional_embedding_bag_sparse_backward cpu_embedding_bag_sparse_backward
#define cpu_optional_sparse_coalesce cpu_sparse_coalesce
#define cpu_optional_optim_rows cpu_optim_rows
#define cpu_optional_dot_interaction cpu_dot_interaction
#define cpu_optional_dot_interaction_backward cpu_dot_interaction_backward
#define cpu_optional_attention cpu_attention_forward
#define cpu_optional_attention_backward cpu_attention_backward
/* The recurrent layers call their CPU kernels directly (runtime/nn/rnn.c, cpu_seq.h). */
#define cpu_optional_rnn_layer EM_BACKEND_DEFAULT
#define cpu_optional_rnn_layer_backward EM_BACKEND_DEFAULT
#define cpu_optional_gelu_backward cpu_gelu_backward
#define cpu_optional_gelu_with_grad cpu_gelu_with_grad

const em_backend cpu_tensor_backend = {.name = "cpu", EM_BACKEND_TABLE(cpu)};
