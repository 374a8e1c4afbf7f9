/* caching_allocator.c - a GPU's caching allocator, device-independent (see the header for
 * the policy). Data structures:
 * - a block is a run of bytes inside a segment; the blocks of a segment form a list in
 *   address order (prev/next), and the segments form a list through their first blocks,
 *   which stay first for the segment's life (merges absorb into the lower block);
 * - each pool keeps its free blocks in one array sorted by (stream, size, address): the
 *   best fit for (stream, size) is one binary search away. Caches hold hundreds of free
 *   blocks, not millions, so moving pointers on insert and removal costs little;
 * - live blocks are found by address in an open-addressing hash map;
 * - pending events pair an event with the freed block waiting for it. */
#include "caching_allocator.h"
#include "plugins/plugin_api.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SMALL_POOL, LARGE_POOL, NUM_POOLS };

typedef struct block block;
struct block {
  char *ptr;
  size_t size;
  void *stream; /* the stream it was allocated on */
  int pool;
  bool allocated; /* held by a caller */
  bool in_free_list;
  int pending; /* events still to complete before it is free */
  block *prev, *next; /* neighbours in the segment */
  block *seg_prev, *seg_next; /* the segment list (first blocks only) */
  void **uses; /* other streams using it (record_stream) */
  int nuses, uses_cap;
};

typedef struct {
  block **items;
  size_t n, cap;
} free_list;

typedef struct {
  void **keys; /* NULL: empty slot */
  block **vals;
  size_t cap, count; /* cap is a power of two */
} ptr_map;

typedef struct {
  void *event;
  block *b;
} pending_event;

struct em_device_cache {
  pthread_mutex_t lock;
  int device;
  em_cache_ops ops;
  free_list pools[NUM_POOLS];
  ptr_map live;
  pending_event *pending;
  size_t npending, pending_cap;
  block *segments;
  int64_t limit;
  em_cuda_memory_stats stats; /* cached_blocks is computed when asked */
};

/* ---------------------------------------------------------------- sizes */

size_t cuda_cache_round_size(size_t nbytes) {
  if (nbytes < EM_CACHE_ROUND) return EM_CACHE_ROUND;
  return (nbytes + EM_CACHE_ROUND - 1) / EM_CACHE_ROUND * EM_CACHE_ROUND;
}

size_t cuda_cache_segment_size(size_t rounded) {
  if (rounded <= EM_CACHE_SMALL_REQUEST) return EM_CACHE_SMALL_SEGMENT;
  if (rounded < EM_CACHE_BIG_REQUEST) return EM_CACHE_LARGE_SEGMENT;
  return (rounded + EM_CACHE_SEGMENT_ROUND - 1) / EM_CACHE_SEGMENT_ROUND * EM_CACHE_SEGMENT_ROUND;
}

static int pool_of(size_t rounded) { return rounded <= EM_CACHE_SMALL_REQUEST ? SMALL_POOL : LARGE_POOL; }

/* A remainder is kept as a block of its own when it can serve a request of its pool: any
 * small one, or a large one (a large remainder under 1 MiB would only ever be wasted). */
static bool worth_splitting(const block *b, size_t size) {
  size_t rest = b->size - size;
  return b->pool == SMALL_POOL ? rest >= EM_CACHE_ROUND : rest > EM_CACHE_SMALL_REQUEST;
}

const char *cuda_cache_format_bytes(char *buf, size_t n, int64_t bytes) {
  static const char *units[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) {
    snprintf(buf, n, "%lld B", (long long)bytes);
    return buf;
  }
  double v = (double)bytes / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) v /= 1024, u++;
  snprintf(buf, n, "%.2f %s", v, units[u]);
  return buf;
}

/* ---------------------------------------------------------------- free lists */

static int key_cmp(const block *b, void *stream, size_t size, const char *ptr) {
  uintptr_t bs = (uintptr_t)b->stream, s = (uintptr_t)stream;
  if (bs != s) return bs < s ? -1 : 1;
  if (b->size != size) return b->size < size ? -1 : 1;
  if (b->ptr != ptr) return (uintptr_t)b->ptr < (uintptr_t)ptr ? -1 : 1;
  return 0;
}

/* The first position whose block is not below (stream, size, ptr). */
static size_t lower_bound(const free_list *l, void *stream, size_t size, const char *ptr) {
  size_t lo = 0, hi = l->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (key_cmp(l->items[mid], stream, size, ptr) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static bool free_list_insert(free_list *l, block *b) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 64;
    block **items = realloc(l->items, cap * sizeof *items);
    if (!items) return false;
    l->items = items;
    l->cap = cap;
  }
  size_t i = lower_bound(l, b->stream, b->size, b->ptr);
  memmove(l->items + i + 1, l->items + i, (l->n - i) * sizeof *l->items);
  l->items[i] = b;
  l->n++;
  b->in_free_list = true;
  return true;
}

static void free_list_remove(free_list *l, block *b) {
  size_t i = lower_bound(l, b->stream, b->size, b->ptr);
  if (i < l->n && l->items[i] == b) {
    memmove(l->items + i, l->items + i + 1, (l->n - i - 1) * sizeof *l->items);
    l->n--;
  }
  b->in_free_list = false;
}

/* The smallest free block of stream holding at least size bytes, removed from the list. */
static block *take_best_fit(free_list *l, void *stream, size_t size) {
  size_t i = lower_bound(l, stream, size, NULL);
  if (i == l->n || l->items[i]->stream != stream) return NULL;
  block *b = l->items[i];
  memmove(l->items + i, l->items + i + 1, (l->n - i - 1) * sizeof *l->items);
  l->n--;
  b->in_free_list = false;
  return b;
}

/* ---------------------------------------------------------------- live blocks by address */

static size_t slot_of(const ptr_map *m, const void *key) {
  uint64_t h = (uint64_t)(uintptr_t)key >> 9; /* blocks are 512-byte aligned */
  h *= 0x9E3779B97F4A7C15ull;
  return (size_t)(h >> 20) & (m->cap - 1);
}

static bool map_grow(ptr_map *m) {
  size_t cap = m->cap ? 2 * m->cap : 256;
  void **keys = calloc(cap, sizeof *keys);
  block **vals = calloc(cap, sizeof *vals);
  if (!keys || !vals) {
    free(keys);
    free(vals);
    return false;
  }
  ptr_map bigger = {keys, vals, cap, 0};
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->keys[i]) continue;
    size_t j = slot_of(&bigger, m->keys[i]);
    while (bigger.keys[j]) j = (j + 1) & (cap - 1);
    bigger.keys[j] = m->keys[i];
    bigger.vals[j] = m->vals[i];
    bigger.count++;
  }
  free(m->keys);
  free(m->vals);
  *m = bigger;
  return true;
}

static bool map_put(ptr_map *m, block *b) {
  if (2 * (m->count + 1) > m->cap && !map_grow(m)) return false;
  size_t j = slot_of(m, b->ptr);
  while (m->keys[j]) j = (j + 1) & (m->cap - 1);
  m->keys[j] = b->ptr;
  m->vals[j] = b;
  m->count++;
  return true;
}

static size_t map_find(const ptr_map *m, const void *key) {
  if (!m->cap || !key) return (size_t)-1;
  for (size_t j = slot_of(m, key); m->keys[j]; j = (j + 1) & (m->cap - 1))
    if (m->keys[j] == key) return j;
  return (size_t)-1;
}

/* Removes slot j, moving later entries of its probe run back so that lookups still find
 * them (no tombstones). */
static void map_remove_at(ptr_map *m, size_t j) {
  size_t mask = m->cap - 1;
  m->keys[j] = NULL;
  m->vals[j] = NULL;
  m->count--;
  for (size_t k = (j + 1) & mask; m->keys[k]; k = (k + 1) & mask) {
    size_t home = slot_of(m, m->keys[k]);
    /* the entry at k may fill the hole at j when its home is not in (j, k] cyclically */
    bool stays = j <= k ? (home > j && home <= k) : (home > j || home <= k);
    if (stays) continue;
    m->keys[j] = m->keys[k];
    m->vals[j] = m->vals[k];
    m->keys[k] = NULL;
    m->vals[k] = NULL;
    j = k;
  }
}

/* ---------------------------------------------------------------- blocks and segments */

static void note_allocated(em_device_cache *c, int64_t delta) {
  c->stats.allocated += delta;
  if (c->stats.allocated > c->stats.peak_allocated) c->stats.peak_allocated = c->stats.allocated;
}

static void note_reserved(em_device_cache *c, int64_t delta) {
  c->stats.reserved += delta;
  if (c->stats.reserved > c->stats.peak_reserved) c->stats.peak_reserved = c->stats.reserved;
}

static void destroy_block(block *b) {
  free(b->uses);
  free(b);
}

/* A block back in its pool, merged with free neighbours. */
static void release_block(em_device_cache *c, block *b) {
  free_list *l = &c->pools[b->pool];
  b->nuses = 0;
  block *p = b->prev;
  if (p && p->in_free_list) {
    free_list_remove(l, p);
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    destroy_block(b);
    b = p;
  }
  block *n = b->next;
  if (n && n->in_free_list) {
    free_list_remove(l, n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    destroy_block(n);
  }
  if (!free_list_insert(l, b)) {
    /* No host memory to list it: the block stays out of the cache (its bytes idle until the
     * segment is destroyed) rather than corrupting the lists. */
    b->in_free_list = false;
  }
}

/* Collects the events that have completed; with wait, waits for all of them first. */
static void collect_events(em_device_cache *c, bool wait) {
  size_t kept = 0;
  for (size_t i = 0; i < c->npending; i++) {
    pending_event pe = c->pending[i];
    if (wait) c->ops.event_synchronize(c->ops.ctx, pe.event);
    if (!wait && !c->ops.event_query(c->ops.ctx, pe.event)) {
      c->pending[kept++] = pe;
      continue;
    }
    c->ops.event_free(c->ops.ctx, pe.event);
    if (--pe.b->pending == 0) release_block(c, pe.b);
  }
  c->npending = kept;
}

static void unlink_segment(em_device_cache *c, block *head) {
  if (head->seg_prev) head->seg_prev->seg_next = head->seg_next;
  else c->segments = head->seg_next;
  if (head->seg_next) head->seg_next->seg_prev = head->seg_prev;
}

/* Returns every wholly free segment to the device. */
static void release_free_segments(em_device_cache *c) {
  for (int p = 0; p < NUM_POOLS; p++) {
    free_list *l = &c->pools[p];
    size_t kept = 0;
    for (size_t i = 0; i < l->n; i++) {
      block *b = l->items[i];
      if (b->prev || b->next) {
        l->items[kept++] = b;
        continue;
      }
      c->ops.raw_free(c->ops.ctx, c->device, b->ptr);
      c->stats.num_device_frees++;
      note_reserved(c, -(int64_t)b->size);
      unlink_segment(c, b);
      destroy_block(b);
    }
    l->n = kept;
  }
}

/* A new segment from the device within the limit, or false. */
static bool new_segment(em_device_cache *c, size_t size, void *stream, int pool, block **out) {
  if (c->limit > 0 && c->stats.reserved + (int64_t)size > c->limit) return false;
  block *b = calloc(1, sizeof *b);
  if (!b) return false;
  void *ptr = NULL;
  if (c->ops.raw_alloc(c->ops.ctx, c->device, size, &ptr) || !ptr) {
    free(b);
    return false;
  }
  c->stats.num_device_allocs++;
  note_reserved(c, (int64_t)size);
  b->ptr = ptr;
  b->size = size;
  b->stream = stream;
  b->pool = pool;
  b->seg_next = c->segments;
  if (c->segments) c->segments->seg_prev = b;
  c->segments = b;
  *out = b;
  return true;
}

static em_status out_of_memory(em_device_cache *c, size_t nbytes) {
  char asked[32], used[32], cached[32], extra[96] = "";
  cuda_cache_format_bytes(asked, sizeof asked, (int64_t)nbytes);
  cuda_cache_format_bytes(used, sizeof used, c->stats.allocated);
  cuda_cache_format_bytes(cached, sizeof cached, c->stats.reserved - c->stats.allocated);
  int64_t free_bytes = 0, total = 0;
  if (c->limit > 0) {
    char lim[32];
    snprintf(extra, sizeof extra, ", limit %s", cuda_cache_format_bytes(lim, sizeof lim, c->limit));
  } else if (c->ops.mem_info && !c->ops.mem_info(c->ops.ctx, c->device, &free_bytes, &total)) {
    char f[32], t[32];
    snprintf(extra, sizeof extra, ", device free %s of %s", cuda_cache_format_bytes(f, sizeof f, free_bytes),
             cuda_cache_format_bytes(t, sizeof t, total));
  }
  c->stats.num_ooms++;
  return em_set_error(EM_ERR_MEMORY, "cuda:%d: out of memory allocating %s (in use by tensors %s, cached %s%s)",
                      c->device, asked, used, cached, extra);
}

/* Splits b to size when the rest is worth keeping; the rest goes to the free list. */
static void split(em_device_cache *c, block *b, size_t size) {
  if (!worth_splitting(b, size)) return;
  block *rest = calloc(1, sizeof *rest);
  if (!rest) return; /* no host memory: hand out the whole block */
  rest->ptr = b->ptr + size;
  rest->size = b->size - size;
  rest->stream = b->stream;
  rest->pool = b->pool;
  rest->prev = b;
  rest->next = b->next;
  if (b->next) b->next->prev = rest;
  b->next = rest;
  b->size = size;
  if (!free_list_insert(&c->pools[b->pool], rest)) {
    /* cannot list the rest: undo the split */
    b->next = rest->next;
    if (rest->next) rest->next->prev = b;
    b->size += rest->size;
    free(rest);
  }
}

/* ---------------------------------------------------------------- the API */

em_device_cache *emp_cache_new(int device, const em_cache_ops *ops) {
  em_device_cache *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  if (pthread_mutex_init(&c->lock, NULL)) {
    free(c);
    return NULL;
  }
  c->device = device;
  c->ops = *ops;
  return c;
}

void cuda_cache_destroy(em_device_cache *c) {
  if (!c) return;
  for (size_t i = 0; i < c->npending; i++) c->ops.event_free(c->ops.ctx, c->pending[i].event);
  for (block *head = c->segments, *next_seg; head; head = next_seg) {
    next_seg = head->seg_next;
    c->ops.raw_free(c->ops.ctx, c->device, head->ptr);
    for (block *b = head, *n; b; b = n) {
      n = b->next;
      destroy_block(b);
    }
  }
  for (int p = 0; p < NUM_POOLS; p++) free(c->pools[p].items);
  free(c->live.keys);
  free(c->live.vals);
  free(c->pending);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

em_status emp_cache_malloc(em_device_cache *c, size_t nbytes, void *stream, void **ptr) {
  *ptr = NULL;
  if (nbytes > ((size_t)1 << 60))
    return em_set_error(EM_ERR_MEMORY, "cuda:%d: out of memory allocating %zu bytes (more than any device holds)",
                        c->device, nbytes);
  size_t size = cuda_cache_round_size(nbytes);
  int pool = pool_of(size);
  em_status st = EM_OK;
  pthread_mutex_lock(&c->lock);
  if (c->npending) collect_events(c, false);
  block *b = take_best_fit(&c->pools[pool], stream, size);
  if (!b && !new_segment(c, cuda_cache_segment_size(size), stream, pool, &b)) {
    /* Flush: wait for pending frees, hand back what is wholly free, try once more. */
    c->stats.num_flushes++;
    collect_events(c, true);
    b = take_best_fit(&c->pools[pool], stream, size);
    if (!b) {
      release_free_segments(c);
      if (!new_segment(c, cuda_cache_segment_size(size), stream, pool, &b)) b = NULL;
    }
    if (!b) st = out_of_memory(c, nbytes);
  }
  if (b) {
    split(c, b, size);
    if (!map_put(&c->live, b)) {
      release_block(c, b);
      st = em_set_error(EM_ERR_MEMORY, "cuda:%d: out of host memory for the allocator's bookkeeping", c->device);
    } else {
      b->allocated = true;
      c->stats.num_allocs++;
      note_allocated(c, (int64_t)b->size);
      *ptr = b->ptr;
    }
  }
  pthread_mutex_unlock(&c->lock);
  return st;
}

int emp_cache_free(em_device_cache *c, void *ptr) {
  pthread_mutex_lock(&c->lock);
  size_t j = map_find(&c->live, ptr);
  if (j == (size_t)-1) {
    pthread_mutex_unlock(&c->lock);
    return 0;
  }
  block *b = c->live.vals[j];
  map_remove_at(&c->live, j);
  b->allocated = false;
  c->stats.num_frees++;
  note_allocated(c, -(int64_t)b->size);
  for (int i = 0; i < b->nuses; i++) {
    void *ev = c->ops.event_record(c->ops.ctx, c->device, b->uses[i]);
    if (!ev) continue; /* that stream's work has already completed */
    if (c->npending == c->pending_cap) {
      size_t cap = c->pending_cap ? 2 * c->pending_cap : 64;
      pending_event *grown = realloc(c->pending, cap * sizeof *grown);
      if (!grown) {
        /* cannot remember the event: wait for it now instead */
        c->ops.event_synchronize(c->ops.ctx, ev);
        c->ops.event_free(c->ops.ctx, ev);
        continue;
      }
      c->pending = grown;
      c->pending_cap = cap;
    }
    c->pending[c->npending++] = (pending_event){ev, b};
    b->pending++;
  }
  b->nuses = 0;
  if (b->pending == 0) release_block(c, b);
  pthread_mutex_unlock(&c->lock);
  return 1;
}

int cuda_cache_owns(em_device_cache *c, void *ptr) {
  pthread_mutex_lock(&c->lock);
  int found = map_find(&c->live, ptr) != (size_t)-1;
  pthread_mutex_unlock(&c->lock);
  return found;
}

em_status emp_cache_record_stream(em_device_cache *c, void *ptr, void *stream) {
  em_status st = EM_OK;
  pthread_mutex_lock(&c->lock);
  size_t j = map_find(&c->live, ptr);
  if (j == (size_t)-1) {
    st = em_set_error(EM_ERR_ARGUMENT, "record_stream: %p is not memory in use on cuda:%d", ptr, c->device);
    goto done;
  }
  block *b = c->live.vals[j];
  if (stream == b->stream) goto done;
  for (int i = 0; i < b->nuses; i++)
    if (b->uses[i] == stream) goto done;
  if (b->nuses == b->uses_cap) {
    int cap = b->uses_cap ? 2 * b->uses_cap : 4;
    void **uses = realloc(b->uses, (size_t)cap * sizeof *uses);
    if (!uses) {
      st = em_set_error(EM_ERR_MEMORY, "record_stream: out of host memory");
      goto done;
    }
    b->uses = uses;
    b->uses_cap = cap;
  }
  b->uses[b->nuses++] = stream;
done:
  pthread_mutex_unlock(&c->lock);
  return st;
}

void emp_cache_empty(em_device_cache *c) {
  pthread_mutex_lock(&c->lock);
  collect_events(c, true);
  release_free_segments(c);
  pthread_mutex_unlock(&c->lock);
}

void emp_cache_set_limit(em_device_cache *c, int64_t bytes) {
  pthread_mutex_lock(&c->lock);
  c->limit = bytes > 0 ? bytes : 0;
  pthread_mutex_unlock(&c->lock);
}

int64_t cuda_cache_limit(em_device_cache *c) {
  pthread_mutex_lock(&c->lock);
  int64_t limit = c->limit;
  pthread_mutex_unlock(&c->lock);
  return limit;
}

void emp_cache_stats(em_device_cache *c, em_cuda_memory_stats *out) {
  pthread_mutex_lock(&c->lock);
  *out = c->stats;
  out->cached_blocks = (int64_t)(c->pools[SMALL_POOL].n + c->pools[LARGE_POOL].n);
  pthread_mutex_unlock(&c->lock);
}

void emp_cache_reset_peak(em_device_cache *c) {
  pthread_mutex_lock(&c->lock);
  c->stats.peak_allocated = c->stats.allocated;
  c->stats.peak_reserved = c->stats.reserved;
  pthread_mutex_unlock(&c->lock);
}
