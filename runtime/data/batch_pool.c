/* batch_pool.c - the memory of an in-process loader's batch tensors, used again.
 *
 * A loader in the process makes three tensors per batch (x, y, ids) of the same few sizes,
 * and Lua's collector frees them about 160 at a time (every 16 MB, lua/ember/internal.lua).
 * Through malloc each batch cost a malloc and a free of ~100 KB (coalescing, trimming the
 * heap, then page faults to grow it again): 8% of a raw Fashion-MNIST batch of 128. Here a
 * released buffer waits in a stack of its size for the next batch instead.
 *
 * Buffers waiting in the pool are not counted as allocated memory (core_memory_count), so
 * Lua's collector is nudged exactly as before; at most DP_POOL_MAX_BYTES wait, the rest are
 * freed. The pool belongs to its source and to every buffer still out: tensors may outlive
 * the source, and are released on any thread. */
#include <pthread.h>
#include <stdlib.h>
#include "core/core_impl.h"
#include "data_impl.h"

#define DP_POOL_MAX_BYTES ((size_t)32 << 20)
#define DP_POOL_CLASSES 4
#define DP_POOL_HEAD 64 /* a buffer's header (its pool and size), keeping the data 64-byte aligned */

typedef struct {
  size_t bytes; /* 0: unused */
  void **free;
  int n, cap;
} dp_pool_class;

struct dp_pool {
  pthread_mutex_t lock;
  int refs; /* the owner's (until dp_pool_close) + one per buffer out */
  size_t waiting; /* bytes in the stacks */
  dp_pool_class cls[DP_POOL_CLASSES];
};

typedef struct {
  dp_pool *pool;
  size_t bytes;
  int out; /* 1 while a tensor holds it (a failed em_from_blob may or may not have run the deleter) */
} dp_pool_head;

dp_pool *dp_pool_new(void) {
  dp_pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  pthread_mutex_init(&p->lock, NULL);
  p->refs = 1;
  return p;
}

/* With the lock held: drops one reference; returns 1 when it was the last. */
static int unref(dp_pool *p) { return --p->refs == 0; }

static void destroy(dp_pool *p) {
  for (int c = 0; c < DP_POOL_CLASSES; c++) {
    for (int i = 0; i < p->cls[c].n; i++) free(p->cls[c].free[i]);
    free(p->cls[c].free);
  }
  pthread_mutex_destroy(&p->lock);
  free(p);
}

/* The deleter of a pooled tensor: its buffer goes back to its stack (or is freed). */
static void pool_return(void *data, void *ctx) {
  (void)ctx;
  dp_pool_head *h = (dp_pool_head *)((char *)data - DP_POOL_HEAD);
  dp_pool *p = h->pool;
  h->out = 0;
  core_memory_count(-(int64_t)h->bytes);
  pthread_mutex_lock(&p->lock);
  int kept = 0;
  if (p->waiting + h->bytes <= DP_POOL_MAX_BYTES) {
    for (int c = 0; c < DP_POOL_CLASSES && !kept; c++) {
      dp_pool_class *k = &p->cls[c];
      if (k->bytes != h->bytes) continue;
      if (k->n == k->cap) {
        int cap = k->cap ? 2 * k->cap : 64;
        void **nf = realloc(k->free, (size_t)cap * sizeof *nf);
        if (!nf) break;
        k->free = nf, k->cap = cap;
      }
      k->free[k->n++] = h;
      p->waiting += h->bytes;
      kept = 1;
    }
  }
  int last = unref(p);
  pthread_mutex_unlock(&p->lock);
  if (!kept) free(h);
  if (last) destroy(p);
}

/* A buffer of `bytes` from p's stack of that size (a new one when it is empty), or NULL. */
static dp_pool_head *take(dp_pool *p, size_t bytes) {
  dp_pool_head *h = NULL;
  pthread_mutex_lock(&p->lock);
  dp_pool_class *k = NULL;
  for (int c = 0; c < DP_POOL_CLASSES && !k; c++)
    if (p->cls[c].bytes == bytes) k = &p->cls[c];
  for (int c = 0; c < DP_POOL_CLASSES && !k; c++)
    if (!p->cls[c].bytes) k = &p->cls[c], k->bytes = bytes; /* a new size: the first free class */
  if (k && k->n) {
    h = k->free[--k->n];
    p->waiting -= bytes;
  }
  p->refs++; /* the buffer's, given back if none comes */
  pthread_mutex_unlock(&p->lock);
  if (!h) {
    h = aligned_alloc(64, DP_POOL_HEAD + ((bytes + 63) & ~(size_t)63));
    if (h) h->pool = p, h->bytes = bytes;
  }
  if (!h) {
    pthread_mutex_lock(&p->lock);
    int last = unref(p); /* cannot be the last: the caller holds the owner's reference */
    pthread_mutex_unlock(&p->lock);
    (void)last;
  }
  return h;
}

em_status dp_pool_empty(dp_pool *p, em_tensor **out, int ndim, const int64_t *sizes, em_dtype dtype) {
  em_device cpu = {EM_CPU, 0};
  int64_t numel = 1;
  for (int d = 0; d < ndim; d++) numel *= sizes[d];
  size_t bytes = (size_t)numel * em_dtype_size(dtype);
  dp_pool_head *h = p && bytes ? take(p, bytes) : NULL;
  if (!h) return em_empty(out, ndim, sizes, dtype, cpu); /* no pool, nothing to hold, or out of memory */
  void *data = (char *)h + DP_POOL_HEAD;
  core_memory_count((int64_t)bytes);
  h->out = 1;
  em_status st = em_from_blob(out, data, ndim, sizes, NULL, dtype, cpu, pool_return, p);
  if (st && h->out) pool_return(data, p);
  return st;
}

void dp_pool_close(dp_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->lock);
  int last = unref(p);
  pthread_mutex_unlock(&p->lock);
  if (last) destroy(p);
}

int64_t dp_pool_waiting(dp_pool *p) {
  if (!p) return 0;
  pthread_mutex_lock(&p->lock);
  int64_t w = (int64_t)p->waiting;
  pthread_mutex_unlock(&p->lock);
  return w;
}
