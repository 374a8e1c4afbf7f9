/* test_pipeline_ring.c - the ring of batch notices between a reader and a trainer on one host
 * (runtime/data/pipeline/ring.c): nothing goes in until the trainer attaches, one trainer at a
 * time, notices come out whole and in order, a full ring or an oversized notice is refused
 * (the reader then uses ZeroMQ), and a reader's corrupt notice or runaway head is caught.
 * Both sides live in this process: the "trainer" maps the ring's memfd through /proc, as a
 * trainer on the host does. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "test_util.h"
#include "data/pipeline/loader_impl.h"
#include "data/pipeline/ring.h"

/* Where pipeline/ring.c keeps its counters (a 256-byte header of four 64-byte lines: the fixed
 * fields, attached, head, tail; then the entries): the tests write them as a misbehaving
 * reader would. */
enum { HEAD_AT = 128, TAIL_AT = 192, ENTRIES_AT = 256 };

typedef struct side {
  dp_ring *ring;
  struct dp_shm_map *map;
  void *base;
  uint64_t bytes;
} side;

static side open_both(void) {
  side s;
  s.ring = dp_ring_create();
  assert_non_null(s.ring);
  s.map = dp_shm_map_open(dp_ring_name(s.ring), getpid(), dp_ring_bytes(), dp_ring_id(s.ring));
  assert_non_null(s.map);
  s.base = (void *)dp_shm_map_data(s.map);
  s.bytes = dp_shm_map_bytes(s.map);
  return s;
}

static void close_both(side *s) {
  dp_shm_map_release(s->map);
  dp_ring_destroy(s->ring);
}

/* A notice of 4 frames whose bytes say which one it is. */
static int put(side *s, uint64_t session, int tag, size_t ids_bytes) {
  static char hdr[96], desc[40], ref[120];
  char *ids = malloc(ids_bytes ? ids_bytes : 1);
  memset(hdr, tag, sizeof hdr), memset(desc, tag + 1, sizeof desc), memset(ref, tag + 2, sizeof ref);
  memset(ids, tag + 3, ids_bytes);
  const void *data[4] = {hdr, desc, ids, ref};
  size_t size[4] = {sizeof hdr, sizeof desc, ids_bytes, sizeof ref};
  int r = dp_ring_put(s->ring, session, 4, data, size);
  free(ids);
  return r;
}

static void expect(side *s, int tag, size_t ids_bytes) {
  zmq_msg_t f[DP_RING_FRAMES];
  int n = 0;
  assert_int_equal(dp_ring_take(s->base, s->bytes, &n, f), 1);
  assert_int_equal(n, 4);
  size_t want[4] = {96, 40, ids_bytes, 120};
  for (int i = 0; i < 4; i++) {
    assert_int_equal(zmq_msg_size(&f[i]), want[i]);
    const unsigned char *p = zmq_msg_data(&f[i]);
    for (size_t k = 0; k < want[i]; k++)
      assert_int_equal(p[k], (unsigned char)(tag + (i == 0 ? 0 : i == 1 ? 1 : i == 2 ? 3 : 2)));
    zmq_msg_close(&f[i]);
  }
}

static void test_attach_put_take(void **state) {
  (void)state;
  side s = open_both();
  zmq_msg_t f[DP_RING_FRAMES];
  int n = 0;
  assert_int_equal(put(&s, 7, 10, 64), 0); /* nobody reads it yet */
  assert_int_equal(dp_ring_take(s.base, s.bytes, &n, f), 0);
  assert_int_equal(dp_ring_attach(s.base, s.bytes, 7), 1);
  assert_int_equal(dp_ring_attach(s.base, s.bytes, 7), 1); /* the same trainer again */
  assert_int_equal(dp_ring_attach(s.base, s.bytes, 8), 0); /* a second trainer keeps ZeroMQ */
  assert_int_equal(put(&s, 8, 10, 64), 0); /* a batch for that one stays out */
  assert_int_equal(put(&s, 7, 20, 8192), 1);
  assert_int_equal(put(&s, 7, 30, 0), 1); /* every record skipped: no ids */
  expect(&s, 20, 8192);
  expect(&s, 30, 0);
  assert_int_equal(dp_ring_take(s.base, s.bytes, &n, f), 0);
  /* too large for an entry: refused whole */
  assert_int_equal(put(&s, 7, 40, DP_RING_ENTRY_BYTES), 0);
  assert_int_equal(dp_ring_take(s.base, s.bytes, &n, f), 0);
  /* detached: the reader goes back to ZeroMQ, and another trainer may attach */
  dp_ring_detach(s.base, s.bytes, 8); /* not ours: nothing happens */
  assert_int_equal(put(&s, 7, 50, 8), 1);
  expect(&s, 50, 8);
  dp_ring_detach(s.base, s.bytes, 7);
  assert_int_equal(put(&s, 7, 60, 8), 0);
  assert_int_equal(dp_ring_attach(s.base, s.bytes, 8), 1);
  assert_int_equal(put(&s, 8, 70, 8), 1);
  expect(&s, 70, 8);
  /* the reader forgets a trainer that died attached: the next one can have the ring */
  dp_ring_forget(s.ring, 9); /* not the attached one */
  assert_int_equal(dp_ring_attach(s.base, s.bytes, 10), 0);
  dp_ring_forget(s.ring, 8);
  assert_int_equal(dp_ring_attach(s.base, s.bytes, 10), 1);
  close_both(&s);
}

static void test_full_ring_and_wrap(void **state) {
  (void)state;
  side s = open_both();
  assert_int_equal(dp_ring_attach(s.base, s.bytes, 3), 1);
  /* three times around: full after DP_RING_ENTRIES, room again after one is taken */
  int next_put = 0, next_take = 0;
  for (int round = 0; round < 3; round++) {
    while (put(&s, 3, next_put % 50, 16)) next_put++;
    assert_int_equal(next_put - next_take, DP_RING_ENTRIES);
    expect(&s, next_take++ % 50, 16);
    assert_int_equal(put(&s, 3, next_put % 50, 16), 1);
    next_put++;
    assert_int_equal(put(&s, 3, 99, 16), 0);
    while (next_take < next_put) expect(&s, next_take++ % 50, 16);
  }
  close_both(&s);
}

static void test_misbehaving_reader(void **state) {
  (void)state;
  side s = open_both();
  zmq_msg_t f[DP_RING_FRAMES];
  int n = 0;
  assert_int_equal(dp_ring_attach(s.base, s.bytes, 5), 1);
  /* a notice claiming 99 frames: dropped, and the next one still comes */
  assert_int_equal(put(&s, 5, 1, 8), 1);
  assert_int_equal(put(&s, 5, 2, 8), 1);
  uint32_t *nframes = (uint32_t *)((char *)s.base + ENTRIES_AT);
  *nframes = 99;
  assert_int_equal(dp_ring_take(s.base, s.bytes, &n, f), -1);
  expect(&s, 2, 8);
  /* a frame size past the entry: dropped */
  assert_int_equal(put(&s, 5, 3, 8), 1);
  uint32_t *sizes = (uint32_t *)((char *)s.base + ENTRIES_AT + 2 * DP_RING_ENTRY_BYTES) + 1;
  sizes[2] = DP_RING_ENTRY_BYTES;
  assert_int_equal(dp_ring_take(s.base, s.bytes, &n, f), -1);
  assert_int_equal(dp_ring_take(s.base, s.bytes, &n, f), 0);
  /* a head far past the tail: the ring is given up */
  uint64_t *head = (uint64_t *)((char *)s.base + HEAD_AT), *tail = (uint64_t *)((char *)s.base + TAIL_AT);
  *head = *tail + DP_RING_ENTRIES + 5;
  assert_int_equal(dp_ring_take(s.base, s.bytes, &n, f), -2);
  /* a mapping of the wrong size is not a ring */
  assert_int_equal(dp_ring_attach(s.base, s.bytes - 4096, 6), 0);
  assert_int_equal(dp_ring_take(s.base, s.bytes - 4096, &n, f), -2);
  close_both(&s);
}

/* The checks both ends apply to a peer's LEASE, SLOTS, HELLO and WELCOME (pipeline/wire.h). */
static void test_message_checks(void **state) {
  (void)state;
  dp_hdr h;
  dp_hdr_init(&h, DP_LEASE);
  h.n = 3;
  assert_true(dp_lease_valid(&h, 2, 24));
  assert_true(dp_lease_valid(&h, 3, 24));
  assert_false(dp_lease_valid(&h, 2, 23));
  assert_false(dp_lease_valid(&h, 4, 24));
  h.n = (int64_t)1 << 61; /* n x 8 wraps to 0: an empty frame must not pass for 2^61 ids */
  assert_false(dp_lease_valid(&h, 2, 0));
  h.n = 0;
  assert_false(dp_lease_valid(&h, 2, 0));
  h.n = -1;
  assert_false(dp_slots_valid(&h, 2, 0));
  h.n = 0;
  assert_true(dp_slots_valid(&h, 2, 0));
  h.n = (int64_t)1 << 62;
  assert_false(dp_slots_valid(&h, 2, 0));
  dp_hello in, out;
  memset(&in, 'x', sizeof in);
  in.pid = 42;
  in.dataset_size = 10;
  assert_true(dp_hello_read(&out, &in, sizeof in));
  assert_int_equal(strlen(out.host), sizeof out.host - 1); /* terminated however it came */
  assert_int_equal(strlen(out.ring), sizeof out.ring - 1);
  assert_false(dp_hello_read(&out, &in, sizeof in - 1));
  in.dataset_size = -5;
  assert_false(dp_hello_read(&out, &in, sizeof in));
  assert_true(dp_seconds_valid(0.5));
  assert_false(dp_seconds_valid(0.0 / 0.0));
  assert_false(dp_seconds_valid(1.0 / 0.0));
  assert_false(dp_seconds_valid(-1));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_attach_put_take),
      cmocka_unit_test(test_full_ring_and_wrap),
      cmocka_unit_test(test_misbehaving_reader),
      cmocka_unit_test(test_message_checks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
