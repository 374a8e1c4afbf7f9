/* test_cuda_allocator.c - the caching allocator's bookkeeping (runtime/cuda/caching_allocator.c)
 * against a fake device: segments come from the host heap, the device can be made to run
 * out of memory, and events complete when a test says so. No GPU needed. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "test_util.h"
#include "cuda/caching_allocator.h"
#include "plugins/plugin_api.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define S1 ((void *)0x1)
#define S2 ((void *)0x2)
#define S3 ((void *)0x3)
#define MAX_SEGMENTS 4096
#define MAX_EVENTS 4096

/* ---------------------------------------------------------------- the fake device */

typedef struct fake_event {
  void *stream;
  int done;
} fake_event;

typedef struct fake_device {
  int64_t capacity; /* bytes it holds; 0: unlimited */
  int64_t used;
  int refuse_next; /* raw_alloc calls to refuse regardless of capacity */
  int record_null; /* event_record says "already done" (returns NULL) */
  int raw_allocs, raw_frees, syncs, events_live;
  void *seg_ptr[MAX_SEGMENTS];
  size_t seg_size[MAX_SEGMENTS];
  fake_event *events[MAX_EVENTS];
} fake_device;

static int fake_raw_alloc(void *ctx, int device, size_t bytes, void **ptr) {
  fake_device *f = ctx;
  (void)device;
  if (f->refuse_next > 0) {
    f->refuse_next--;
    return 1;
  }
  if (f->capacity && f->used + (int64_t)bytes > f->capacity) return 1;
  void *p = aligned_alloc(512, bytes);
  if (!p) return 1;
  for (int i = 0; i < MAX_SEGMENTS; i++) {
    if (f->seg_ptr[i]) continue;
    f->seg_ptr[i] = p;
    f->seg_size[i] = bytes;
    f->used += (int64_t)bytes;
    f->raw_allocs++;
    *ptr = p;
    return 0;
  }
  free(p);
  return 1;
}

static void fake_raw_free(void *ctx, int device, void *ptr) {
  fake_device *f = ctx;
  (void)device;
  for (int i = 0; i < MAX_SEGMENTS; i++) {
    if (f->seg_ptr[i] != ptr) continue;
    f->used -= (int64_t)f->seg_size[i];
    f->seg_ptr[i] = NULL;
    f->raw_frees++;
    free(ptr);
    return;
  }
  fail_msg("raw_free of %p, which the fake device never gave out", ptr);
}

static void *fake_event_record(void *ctx, int device, void *stream) {
  fake_device *f = ctx;
  (void)device;
  if (f->record_null) return NULL;
  fake_event *e = calloc(1, sizeof *e);
  e->stream = stream;
  for (int i = 0; i < MAX_EVENTS; i++) {
    if (f->events[i]) continue;
    f->events[i] = e;
    f->events_live++;
    return e;
  }
  fail_msg("too many live fake events");
  return NULL;
}

static int fake_event_query(void *ctx, void *event) {
  (void)ctx;
  return ((fake_event *)event)->done;
}

static void fake_event_synchronize(void *ctx, void *event) {
  fake_device *f = ctx;
  f->syncs++;
  ((fake_event *)event)->done = 1;
}

static void fake_event_free(void *ctx, void *event) {
  fake_device *f = ctx;
  for (int i = 0; i < MAX_EVENTS; i++) {
    if (f->events[i] != event) continue;
    f->events[i] = NULL;
    f->events_live--;
    free(event);
    return;
  }
  fail_msg("event_free of an unknown event");
}

static int fake_mem_info(void *ctx, int device, int64_t *free_bytes, int64_t *total) {
  fake_device *f = ctx;
  (void)device;
  *total = f->capacity;
  *free_bytes = f->capacity - f->used;
  return 0;
}

/* The work queued so far on stream has completed. */
static void fake_complete(fake_device *f, void *stream) {
  for (int i = 0; i < MAX_EVENTS; i++)
    if (f->events[i] && f->events[i]->stream == stream) f->events[i]->done = 1;
}

typedef struct fixture {
  fake_device dev;
  em_device_cache *cache;
} fixture;

static em_cache_ops fake_ops(fake_device *f, int with_mem_info) {
  em_cache_ops ops = {
      .ctx = f,
      .raw_alloc = fake_raw_alloc,
      .raw_free = fake_raw_free,
      .event_record = fake_event_record,
      .event_query = fake_event_query,
      .event_synchronize = fake_event_synchronize,
      .event_free = fake_event_free,
      .mem_info = with_mem_info ? fake_mem_info : NULL,
  };
  return ops;
}

static int setup(void **state) {
  fixture *fx = calloc(1, sizeof *fx);
  em_cache_ops ops = fake_ops(&fx->dev, 0);
  fx->cache = emp_cache_new(0, &ops);
  *state = fx;
  return fx->cache ? 0 : -1;
}

/* Destroying the allocator hands every segment back and frees every event: the fake
 * device must end empty (and ASan sees no leak). */
static int teardown(void **state) {
  fixture *fx = *state;
  cuda_cache_destroy(fx->cache);
  assert_int_equal(fx->dev.used, 0);
  assert_int_equal(fx->dev.events_live, 0);
  free(fx);
  return 0;
}

static em_cuda_memory_stats stats_of(em_device_cache *c) {
  em_cuda_memory_stats s;
  emp_cache_stats(c, &s);
  return s;
}

static void *alloc_ok(em_device_cache *c, size_t n, void *stream) {
  void *p = NULL;
  assert_int_equal(emp_cache_malloc(c, n, stream, &p), EM_OK);
  assert_non_null(p);
  assert_int_equal((uintptr_t)p % 512, 0);
  return p;
}

/* ---------------------------------------------------------------- sizes */

static void test_rounding(void **state) {
  (void)state;
  assert_int_equal(cuda_cache_round_size(0), 512);
  assert_int_equal(cuda_cache_round_size(1), 512);
  assert_int_equal(cuda_cache_round_size(512), 512);
  assert_int_equal(cuda_cache_round_size(513), 1024);
  assert_int_equal(cuda_cache_round_size(MiB + 1), MiB + 512);
  /* small requests come from 2 MiB segments, medium ones from 20 MiB, big ones alone */
  assert_int_equal(cuda_cache_segment_size(512), 2 * MiB);
  assert_int_equal(cuda_cache_segment_size(MiB), 2 * MiB);
  assert_int_equal(cuda_cache_segment_size(MiB + 512), 20 * MiB);
  assert_int_equal(cuda_cache_segment_size(10 * MiB - 512), 20 * MiB);
  assert_int_equal(cuda_cache_segment_size(10 * MiB), 10 * MiB);
  assert_int_equal(cuda_cache_segment_size(11 * MiB + 512), 12 * MiB);
  char buf[32];
  assert_string_equal(cuda_cache_format_bytes(buf, sizeof buf, 512), "512 B");
  assert_string_equal(cuda_cache_format_bytes(buf, sizeof buf, 3 * (int64_t)MiB / 2), "1.50 MiB");
  assert_string_equal(cuda_cache_format_bytes(buf, sizeof buf, 2 * (int64_t)GiB), "2.00 GiB");
}

static void test_rounded_sizes_in_stats(void **state) {
  fixture *fx = *state;
  void *p = alloc_ok(fx->cache, 1, S1);
  void *q = alloc_ok(fx->cache, 0, S1); /* zero bytes still gets a distinct block */
  assert_ptr_not_equal(p, q);
  em_cuda_memory_stats s = stats_of(fx->cache);
  assert_int_equal(s.allocated, 1024);
  assert_int_equal(s.reserved, 2 * MiB);
  emp_cache_free(fx->cache, p);
  emp_cache_free(fx->cache, q);
}

/* ---------------------------------------------------------------- pools */

static void test_small_pool_carves_one_segment(void **state) {
  fixture *fx = *state;
  char *a = alloc_ok(fx->cache, 1000, S1);
  char *b = alloc_ok(fx->cache, 1000, S1);
  char *c = alloc_ok(fx->cache, MiB, S1);
  assert_int_equal(fx->dev.raw_allocs, 1);
  assert_ptr_equal(b, a + 1024); /* split from the same segment, in address order */
  assert_ptr_equal(c, b + 1024);
  em_cuda_memory_stats s = stats_of(fx->cache);
  assert_int_equal(s.reserved, 2 * MiB);
  assert_int_equal(s.allocated, 2048 + MiB);
  assert_int_equal(s.cached_blocks, 1); /* the rest of the segment */
  /* the next MiB does not fit in the remaining 1 MiB - 2 KiB: a second segment */
  void *d = alloc_ok(fx->cache, MiB, S1);
  assert_int_equal(fx->dev.raw_allocs, 2);
  emp_cache_free(fx->cache, a);
  emp_cache_free(fx->cache, b);
  emp_cache_free(fx->cache, c);
  emp_cache_free(fx->cache, d);
}

static void test_large_pool_segments(void **state) {
  fixture *fx = *state;
  void *a = alloc_ok(fx->cache, 3 * MiB, S1); /* a 20 MiB segment, split */
  em_cuda_memory_stats s = stats_of(fx->cache);
  assert_int_equal(s.reserved, 20 * MiB);
  assert_int_equal(s.allocated, 3 * MiB);
  char *b = alloc_ok(fx->cache, 5 * MiB, S1); /* from the same segment */
  assert_ptr_equal(b, (char *)a + 3 * MiB);
  assert_int_equal(fx->dev.raw_allocs, 1);
  void *c = alloc_ok(fx->cache, 12 * MiB + 1, S1); /* big: its own 14 MiB segment */
  s = stats_of(fx->cache);
  assert_int_equal(s.reserved, 34 * MiB);
  assert_int_equal(s.allocated, 3 * MiB + 5 * MiB + 12 * MiB + 512);
  assert_int_equal(s.cached_blocks, 2); /* the 20 MiB segment's tail and the 14 MiB one's */
  /* a small request never takes a large block: a 2 MiB segment of its own */
  emp_cache_free(fx->cache, a);
  void *d = alloc_ok(fx->cache, 4096, S1);
  assert_int_equal(fx->dev.raw_allocs, 3);
  assert_int_equal(stats_of(fx->cache).reserved, 36 * MiB);
  emp_cache_free(fx->cache, b);
  emp_cache_free(fx->cache, c);
  emp_cache_free(fx->cache, d);
}

static void test_large_remainder_not_split_below_1mib(void **state) {
  fixture *fx = *state;
  void *a = alloc_ok(fx->cache, 19 * MiB + 512 * KiB, S1); /* a 20 MiB segment; rest 512 KiB */
  em_cuda_memory_stats s = stats_of(fx->cache);
  assert_int_equal(s.allocated, 20 * MiB);
  assert_int_equal(s.cached_blocks, 0);
  emp_cache_free(fx->cache, a);
  /* 18.5 MiB leaves 1.5 MiB: split */
  void *b = alloc_ok(fx->cache, 18 * MiB + 512 * KiB, S1);
  assert_ptr_equal(a, b);
  s = stats_of(fx->cache);
  assert_int_equal(s.allocated, 18 * MiB + 512 * KiB);
  assert_int_equal(s.cached_blocks, 1);
  assert_int_equal(fx->dev.raw_allocs, 1);
  emp_cache_free(fx->cache, b);
}

/* ---------------------------------------------------------------- split and merge */

static void test_split_and_merge(void **state) {
  fixture *fx = *state;
  char *a = alloc_ok(fx->cache, 64 * KiB, S1);
  char *b = alloc_ok(fx->cache, 64 * KiB, S1);
  char *c = alloc_ok(fx->cache, 64 * KiB, S1);
  assert_int_equal(stats_of(fx->cache).cached_blocks, 1); /* the tail */
  emp_cache_free(fx->cache, b); /* a hole between a and c */
  assert_int_equal(stats_of(fx->cache).cached_blocks, 2);
  emp_cache_free(fx->cache, a); /* merges with b's hole */
  assert_int_equal(stats_of(fx->cache).cached_blocks, 2);
  /* a 128 KiB request fits exactly in the merged a+b */
  char *ab = alloc_ok(fx->cache, 128 * KiB, S1);
  assert_ptr_equal(ab, a);
  assert_int_equal(stats_of(fx->cache).cached_blocks, 1);
  emp_cache_free(fx->cache, ab);
  emp_cache_free(fx->cache, c); /* merges both ways: one block */
  em_cuda_memory_stats s = stats_of(fx->cache);
  assert_int_equal(s.cached_blocks, 1);
  assert_int_equal(s.allocated, 0);
  /* the whole segment is one block again: a 1 MiB request starts at its base */
  char *big = alloc_ok(fx->cache, MiB, S1);
  assert_ptr_equal(big, a);
  assert_int_equal(fx->dev.raw_allocs, 1);
  emp_cache_free(fx->cache, big);
}

static void test_best_fit(void **state) {
  fixture *fx = *state;
  /* one 20 MiB segment: a 4 MiB | s1 2 MiB | b 2 MiB | s2 2 MiB | tail 10 MiB */
  char *a = alloc_ok(fx->cache, 4 * MiB, S1);
  char *s1 = alloc_ok(fx->cache, 2 * MiB, S1);
  char *b = alloc_ok(fx->cache, 2 * MiB, S1);
  char *s2 = alloc_ok(fx->cache, 2 * MiB, S1);
  assert_ptr_equal(b, a + 6 * MiB);
  emp_cache_free(fx->cache, a);
  emp_cache_free(fx->cache, b);
  assert_int_equal(stats_of(fx->cache).cached_blocks, 3);
  /* 1.5 MiB: the 2 MiB hole is the best fit; its 512 KiB rest is not worth a block */
  char *x = alloc_ok(fx->cache, MiB + 512 * KiB, S1);
  assert_ptr_equal(x, b);
  assert_int_equal(stats_of(fx->cache).allocated, 6 * MiB);
  /* 3 MiB: the 4 MiB hole (not the 10 MiB tail); 1 MiB rest is not split either */
  char *y = alloc_ok(fx->cache, 3 * MiB, S1);
  assert_ptr_equal(y, a);
  assert_int_equal(fx->dev.raw_allocs, 1);
  emp_cache_free(fx->cache, x);
  emp_cache_free(fx->cache, y);
  emp_cache_free(fx->cache, s1);
  emp_cache_free(fx->cache, s2);
  assert_int_equal(stats_of(fx->cache).cached_blocks, 1);
}

/* ---------------------------------------------------------------- streams */

static void test_blocks_reused_on_their_stream_only(void **state) {
  fixture *fx = *state;
  void *a = alloc_ok(fx->cache, 4096, S1);
  emp_cache_free(fx->cache, a);
  void *b = alloc_ok(fx->cache, 4096, S2); /* S1's cached block is not S2's */
  assert_ptr_not_equal(a, b);
  assert_int_equal(fx->dev.raw_allocs, 2);
  void *c = alloc_ok(fx->cache, 4096, S1); /* S1 gets its own back */
  assert_ptr_equal(a, c);
  void *d = alloc_ok(fx->cache, 4096, NULL); /* the default stream is a stream too */
  assert_int_equal(fx->dev.raw_allocs, 3);
  emp_cache_free(fx->cache, b);
  emp_cache_free(fx->cache, c);
  emp_cache_free(fx->cache, d);
  assert_int_equal(fx->dev.events_live, 0); /* stream order alone: no events */
}

static void test_record_stream_defers_reuse(void **state) {
  fixture *fx = *state;
  void *a = alloc_ok(fx->cache, 4096, S1);
  assert_int_equal(emp_cache_record_stream(fx->cache, a, S2), EM_OK);
  assert_int_equal(emp_cache_record_stream(fx->cache, a, S2), EM_OK); /* once per stream */
  assert_int_equal(emp_cache_record_stream(fx->cache, a, S3), EM_OK);
  assert_int_equal(emp_cache_record_stream(fx->cache, a, S1), EM_OK); /* its own: nothing */
  emp_cache_free(fx->cache, a);
  assert_int_equal(fx->dev.events_live, 2); /* on S2 and S3 */
  em_cuda_memory_stats s = stats_of(fx->cache);
  assert_int_equal(s.allocated, 0);
  assert_int_equal(s.num_frees, 1);
  /* while S2 and S3 may still use it, S1 gets other memory */
  void *b = alloc_ok(fx->cache, 4096, S1);
  assert_ptr_not_equal(a, b);
  fake_complete(&fx->dev, S2);
  void *c = alloc_ok(fx->cache, 4096, S1); /* S3 has not finished */
  assert_ptr_not_equal(a, c);
  assert_int_equal(fx->dev.events_live, 1); /* S2's event was collected */
  fake_complete(&fx->dev, S3);
  void *d = alloc_ok(fx->cache, 4096, S1); /* now it is free again */
  assert_ptr_equal(a, d);
  assert_int_equal(fx->dev.events_live, 0);
  assert_int_equal(fx->dev.syncs, 0); /* never waited */
  emp_cache_free(fx->cache, b);
  emp_cache_free(fx->cache, c);
  emp_cache_free(fx->cache, d);
}

static void test_record_stream_errors_and_done_streams(void **state) {
  fixture *fx = *state;
  char *a = alloc_ok(fx->cache, 4096, S1);
  assert_int_equal(emp_cache_record_stream(fx->cache, a + 512, S2), EM_ERR_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "is not memory in use on cuda:0"));
  assert_int_equal(cuda_cache_owns(fx->cache, a), 1);
  assert_int_equal(cuda_cache_owns(fx->cache, a + 512), 0);
  assert_int_equal(emp_cache_free(fx->cache, a + 512), 0); /* not ours: untouched */
  /* a stream whose work is already done (no event to wait for): freed at once */
  fx->dev.record_null = 1;
  assert_int_equal(emp_cache_record_stream(fx->cache, a, S2), EM_OK);
  assert_int_equal(emp_cache_free(fx->cache, a), 1);
  assert_int_equal(cuda_cache_owns(fx->cache, a), 0);
  void *b = alloc_ok(fx->cache, 4096, S1);
  assert_ptr_equal(a, b);
  assert_int_equal(emp_cache_free(fx->cache, a), 1);
  assert_int_equal(emp_cache_free(fx->cache, a), 0); /* a double free is refused */
  assert_int_equal(emp_cache_record_stream(fx->cache, a, S2), EM_ERR_ARGUMENT);
}

/* ---------------------------------------------------------------- out of memory */

static void test_flush_and_retry(void **state) {
  fixture *fx = *state;
  fx->dev.capacity = 22 * MiB;
  void *a = alloc_ok(fx->cache, MiB, S1);
  void *b = alloc_ok(fx->cache, MiB, S2);
  assert_int_equal(emp_cache_record_stream(fx->cache, b, S3), EM_OK);
  emp_cache_free(fx->cache, a);
  emp_cache_free(fx->cache, b); /* pending on S3 */
  assert_int_equal(fx->dev.used, 4 * MiB);
  /* 3 MiB needs a 20 MiB segment: 24 > 22 MiB, so the cache is flushed (S3's event is
   * waited for) and both 2 MiB segments go back before the retry succeeds */
  void *c = alloc_ok(fx->cache, 3 * MiB, S1);
  em_cuda_memory_stats s = stats_of(fx->cache);
  assert_int_equal(s.num_flushes, 1);
  assert_int_equal(s.num_ooms, 0);
  assert_int_equal(s.num_device_frees, 2);
  assert_int_equal(s.num_device_allocs, 3);
  assert_int_equal(s.reserved, 20 * MiB);
  assert_int_equal(fx->dev.syncs, 1);
  assert_int_equal(fx->dev.events_live, 0);
  emp_cache_free(fx->cache, c);
}

static void test_flush_finds_a_pending_block(void **state) {
  fixture *fx = *state;
  void *a = alloc_ok(fx->cache, MiB, S1);
  void *filler = alloc_ok(fx->cache, MiB, S1); /* the rest of the segment */
  assert_int_equal(fx->dev.raw_allocs, 1);
  assert_int_equal(emp_cache_record_stream(fx->cache, a, S2), EM_OK);
  emp_cache_free(fx->cache, a);
  /* the device refuses a new segment; after waiting for S2, a's block serves the request */
  fx->dev.refuse_next = 1;
  void *b = alloc_ok(fx->cache, MiB, S1);
  assert_ptr_equal(a, b);
  em_cuda_memory_stats s = stats_of(fx->cache);
  assert_int_equal(s.num_flushes, 1);
  assert_int_equal(s.num_device_allocs, 1);
  assert_int_equal(s.num_device_frees, 0);
  emp_cache_free(fx->cache, b);
  emp_cache_free(fx->cache, filler);
}

static void test_oom_message(void **state) {
  fixture *fx = *state;
  fx->dev.capacity = 8 * MiB;
  void *a = alloc_ok(fx->cache, MiB, S1); /* 1 MiB used by tensors, 1 MiB cached */
  void *p = (void *)0x1234;
  assert_int_equal(emp_cache_malloc(fx->cache, 2 * GiB, S1, &p), EM_ERR_MEMORY);
  assert_null(p);
  assert_string_equal(em_last_error(),
                      "cuda:0: out of memory allocating 2.00 GiB (in use by tensors 1.00 MiB, cached 1.00 MiB)");
  em_cuda_memory_stats s = stats_of(fx->cache);
  assert_int_equal(s.num_ooms, 1);
  assert_int_equal(s.num_flushes, 1);
  assert_int_equal(s.allocated, MiB); /* the failure changed nothing else */
  assert_int_equal(s.num_allocs, 1);
  emp_cache_free(fx->cache, a);
  /* absurd sizes fail before rounding can overflow */
  assert_int_equal(emp_cache_malloc(fx->cache, SIZE_MAX - 3, S1, &p), EM_ERR_MEMORY);
  assert_non_null(strstr(em_last_error(), "cuda:0: out of memory allocating"));
}

static void test_oom_message_names_device_memory(void **state) {
  (void)state;
  fake_device *f = calloc(1, sizeof *f);
  f->capacity = 16 * MiB;
  em_cache_ops ops = fake_ops(f, 1);
  em_device_cache *c = emp_cache_new(3, &ops);
  void *p;
  assert_int_equal(emp_cache_malloc(c, 100 * MiB, NULL, &p), EM_ERR_MEMORY);
  assert_string_equal(em_last_error(),
                      "cuda:3: out of memory allocating 100.00 MiB (in use by tensors 0 B, "
                      "cached 0 B, device free 16.00 MiB of 16.00 MiB)");
  cuda_cache_destroy(c);
  free(f);
}

static void test_memory_limit(void **state) {
  fixture *fx = *state;
  emp_cache_set_limit(fx->cache, 3 * MiB);
  assert_int_equal(cuda_cache_limit(fx->cache), 3 * MiB);
  void *a = alloc_ok(fx->cache, MiB, S1);
  void *p;
  /* S2 needs a segment of its own: 4 MiB reserved would pass the 3 MiB limit */
  assert_int_equal(emp_cache_malloc(fx->cache, 4096, S2, &p), EM_ERR_MEMORY);
  assert_string_equal(em_last_error(),
                      "cuda:0: out of memory allocating 4.00 KiB (in use by tensors 1.00 MiB, "
                      "cached 1.00 MiB, limit 3.00 MiB)");
  assert_int_equal(fx->dev.raw_allocs, 1); /* the device was never asked */
  /* once S1's block is free, the flush hands its segment back and S2 fits */
  emp_cache_free(fx->cache, a);
  void *b = alloc_ok(fx->cache, 4096, S2);
  em_cuda_memory_stats s = stats_of(fx->cache);
  assert_int_equal(s.reserved, 2 * MiB);
  assert_int_equal(s.num_ooms, 1);
  assert_int_equal(s.num_flushes, 2);
  /* a request larger than the limit itself */
  assert_int_equal(emp_cache_malloc(fx->cache, 4 * MiB, S2, &p), EM_ERR_MEMORY);
  emp_cache_free(fx->cache, b);
  /* no limit again: anything the device holds */
  emp_cache_set_limit(fx->cache, 0);
  void *c = alloc_ok(fx->cache, 64 * MiB, S1);
  emp_cache_free(fx->cache, c);
}

/* ---------------------------------------------------------------- counters and emptying */

static void test_stats_and_peaks(void **state) {
  fixture *fx = *state;
  void *a = alloc_ok(fx->cache, 3 * MiB, S1);
  void *b = alloc_ok(fx->cache, 2 * MiB, S1);
  emp_cache_free(fx->cache, a);
  em_cuda_memory_stats s = stats_of(fx->cache);
  assert_int_equal(s.allocated, 2 * MiB);
  assert_int_equal(s.peak_allocated, 5 * MiB);
  assert_int_equal(s.reserved, 20 * MiB);
  assert_int_equal(s.peak_reserved, 20 * MiB);
  assert_int_equal(s.num_allocs, 2);
  assert_int_equal(s.num_frees, 1);
  assert_int_equal(s.num_device_allocs, 1);
  assert_int_equal(s.num_device_frees, 0);
  assert_int_equal(s.num_ooms, 0);
  assert_int_equal(s.num_flushes, 0);
  emp_cache_reset_peak(fx->cache);
  s = stats_of(fx->cache);
  assert_int_equal(s.peak_allocated, 2 * MiB);
  assert_int_equal(s.peak_reserved, 20 * MiB);
  emp_cache_free(fx->cache, b);
  emp_cache_empty(fx->cache);
  emp_cache_reset_peak(fx->cache);
  s = stats_of(fx->cache);
  assert_int_equal(s.peak_allocated, 0);
  assert_int_equal(s.peak_reserved, 0);
  assert_int_equal(s.num_device_frees, 1);
}

static void test_empty_cache(void **state) {
  fixture *fx = *state;
  void *keep = alloc_ok(fx->cache, 4096, S1); /* its segment stays */
  void *a = alloc_ok(fx->cache, 4096, S2);
  void *b = alloc_ok(fx->cache, 5 * MiB, S1);
  void *c = alloc_ok(fx->cache, 12 * MiB, S2);
  assert_int_equal(emp_cache_record_stream(fx->cache, c, S3), EM_OK);
  emp_cache_free(fx->cache, a);
  emp_cache_free(fx->cache, b);
  emp_cache_free(fx->cache, c); /* pending on S3: waited for */
  em_cuda_memory_stats s = stats_of(fx->cache);
  assert_int_equal(s.reserved, 2 * MiB + 2 * MiB + 20 * MiB + 12 * MiB);
  emp_cache_empty(fx->cache);
  s = stats_of(fx->cache);
  assert_int_equal(s.reserved, 2 * MiB);
  assert_int_equal(s.allocated, 4096);
  assert_int_equal(s.cached_blocks, 1); /* the rest of keep's segment */
  assert_int_equal(s.num_device_frees, 3);
  assert_int_equal(fx->dev.used, 2 * MiB);
  assert_int_equal(fx->dev.events_live, 0);
  emp_cache_free(fx->cache, keep);
  emp_cache_empty(fx->cache);
  s = stats_of(fx->cache);
  assert_int_equal(s.reserved, 0);
  assert_int_equal(s.cached_blocks, 0);
  assert_int_equal(fx->dev.used, 0);
}

static void test_destroy_with_live_and_pending_blocks(void **state) {
  fixture *fx = *state;
  /* teardown destroys with these still in use and pending: nothing may leak */
  alloc_ok(fx->cache, 4096, S1);
  alloc_ok(fx->cache, 30 * MiB, S1);
  void *p = alloc_ok(fx->cache, 4096, S1);
  assert_int_equal(emp_cache_record_stream(fx->cache, p, S2), EM_OK);
  emp_cache_free(fx->cache, p);
  assert_int_equal(fx->dev.events_live, 1);
}

/* ---------------------------------------------------------------- random use */

typedef struct live_alloc {
  unsigned char *p;
  size_t n;
  unsigned char tag;
} live_alloc;

static uint64_t next_random(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* Random sizes over three streams with record_stream and completions: every live block is
 * filled with its own byte, so any overlap between blocks shows as a changed byte. */
static void test_random_use_never_overlaps(void **state) {
  fixture *fx = *state;
  enum { SLOTS = 64 };
  live_alloc live[SLOTS] = {{0}};
  void *streams[3] = {S1, S2, S3};
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  for (int step = 0; step < 4000; step++) {
    int i = (int)(next_random(&rng) % SLOTS);
    if (live[i].p) {
      for (size_t k = 0; k < live[i].n; k += 97) assert_int_equal(live[i].p[k], live[i].tag);
      assert_int_equal(live[i].p[live[i].n - 1], live[i].tag);
      if (next_random(&rng) % 4 == 0)
        assert_int_equal(emp_cache_record_stream(fx->cache, live[i].p, streams[next_random(&rng) % 3]), EM_OK);
      assert_int_equal(emp_cache_free(fx->cache, live[i].p), 1);
      live[i].p = NULL;
    } else {
      uint64_t r = next_random(&rng);
      size_t n = r % 8 == 0 ? (size_t)(r >> 8) % (12 * MiB) + 1 : (size_t)(r >> 8) % (256 * KiB) + 1;
      live[i].p = alloc_ok(fx->cache, n, streams[r % 3]);
      live[i].n = n;
      live[i].tag = (unsigned char)(step & 0xff);
      memset(live[i].p, live[i].tag, n);
    }
    if (step % 50 == 0) fake_complete(&fx->dev, streams[next_random(&rng) % 3]);
  }
  int64_t expect = 0;
  for (int i = 0; i < SLOTS; i++)
    if (live[i].p) expect += (int64_t)cuda_cache_round_size(live[i].n);
  em_cuda_memory_stats s = stats_of(fx->cache);
  assert_true(s.allocated >= expect); /* blocks whose rest was not split are larger */
  for (int i = 0; i < SLOTS; i++)
    if (live[i].p) emp_cache_free(fx->cache, live[i].p);
  emp_cache_empty(fx->cache);
  s = stats_of(fx->cache);
  assert_int_equal(s.allocated, 0);
  assert_int_equal(s.reserved, 0);
  assert_int_equal(s.cached_blocks, 0);
  assert_int_equal(s.num_allocs, s.num_frees);
  assert_int_equal(s.num_device_allocs, s.num_device_frees);
  assert_int_equal(fx->dev.used, 0);
}

/* ---------------------------------------------------------------- threads */

typedef struct thread_arg {
  em_device_cache *cache;
  void *stream;
  int failures;
} thread_arg;

static void *hammer(void *vp) {
  thread_arg *a = vp;
  void *held[16] = {0};
  uint64_t rng = (uintptr_t)a->stream * 0x2545F4914F6CDD1Dull + 1;
  for (int step = 0; step < 20000; step++) {
    int i = (int)(next_random(&rng) % 16);
    if (held[i]) {
      if (!emp_cache_free(a->cache, held[i])) a->failures++;
      held[i] = NULL;
    } else if (emp_cache_malloc(a->cache, (size_t)(next_random(&rng) % (2 * MiB)) + 1, a->stream, &held[i])) {
      a->failures++;
    }
  }
  for (int i = 0; i < 16; i++)
    if (held[i] && !emp_cache_free(a->cache, held[i])) a->failures++;
  return NULL;
}

/* The fake device is not thread-safe by itself: the allocator's lock must serialise it. */
static void test_threads(void **state) {
  fixture *fx = *state;
  pthread_t th[4];
  thread_arg args[4];
  for (int i = 0; i < 4; i++) {
    args[i] = (thread_arg){fx->cache, (void *)(uintptr_t)(i % 2 + 1), 0};
    assert_int_equal(pthread_create(&th[i], NULL, hammer, &args[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(args[i].failures, 0);
  }
  em_cuda_memory_stats s = stats_of(fx->cache);
  assert_int_equal(s.allocated, 0);
  assert_int_equal(s.num_allocs, s.num_frees);
  emp_cache_empty(fx->cache);
  assert_int_equal(fx->dev.used, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rounding),
      cmocka_unit_test(test_oom_message_names_device_memory),
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
      T(test_rounded_sizes_in_stats),
      T(test_small_pool_carves_one_segment),
      T(test_large_pool_segments),
      T(test_large_remainder_not_split_below_1mib),
      T(test_split_and_merge),
      T(test_best_fit),
      T(test_blocks_reused_on_their_stream_only),
      T(test_record_stream_defers_reuse),
      T(test_record_stream_errors_and_done_streams),
      T(test_flush_and_retry),
      T(test_flush_finds_a_pending_block),
      T(test_oom_message),
      T(test_memory_limit),
      T(test_stats_and_peaks),
      T(test_empty_cache),
      T(test_destroy_with_live_and_pending_blocks),
      T(test_random_use_never_overlaps),
      T(test_threads),
#undef T
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
