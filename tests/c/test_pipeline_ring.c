/* test_pipeline_ring.c - the ring of batch notices between a reader and a trainer on one host
 * (runtime/data/pipeline/ring.c): nothing goes in until the trainer attaches, one trainer at a
 * time, notices come out whole and in order, a full ring or an oversized notice is refused
 * (the reader then uses ZeroMQ), and a reader's corrupt notice or runaway head is caught;
 * leases the other way likewise.
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

/* The leases' ring, after the notices' (pipeline/ring.c): a lease header's three 64-byte
 * lines (head, the trainer's; tail and waiting, the reader's), then the entries. */
static char *lease_hdr_at(side *s) {
  return (char *)s->base + s->bytes - (uint64_t)DP_RING_LEASES * DP_RING_LEASE_BYTES - 192;
}

/* A LEASE of n ids (id k = tag * 1000 + k) from the trainer side. */
static int put_lease(side *s, uint64_t session, int tag, int64_t n) {
  dp_hdr h;
  dp_hdr_init(&h, DP_LEASE);
  h.session = session;
  h.item = tag;
  h.n = n;
  int64_t *ids = malloc((size_t)n * sizeof *ids);
  for (int64_t k = 0; k < n; k++) ids[k] = tag * 1000 + k;
  int64_t slots[2] = {tag, tag + 1};
  const void *data[3] = {&h, ids, slots};
  size_t size[3] = {sizeof h, (size_t)n * sizeof *ids, sizeof slots};
  int r = dp_ring_put_lease(s->base, s->bytes, session, 3, data, size);
  free(ids);
  return r;
}

static void expect_lease(side *s, int tag, int64_t n) {
  zmq_msg_t f[DP_RING_FRAMES];
  int nf = 0;
  assert_int_equal(dp_ring_take_lease(s->ring, &nf, f), 1);
  assert_int_equal(nf, 3);
  dp_hdr h;
  assert_true(dp_hdr_valid(zmq_msg_data(&f[0]), zmq_msg_size(&f[0])));
  memcpy(&h, zmq_msg_data(&f[0]), sizeof h);
  assert_int_equal(h.kind, DP_LEASE);
  assert_int_equal(h.item, tag);
  assert_true(dp_lease_valid(&h, nf, zmq_msg_size(&f[1])));
  assert_int_equal(h.n, n);
  const int64_t *ids = zmq_msg_data(&f[1]);
  for (int64_t k = 0; k < n; k++) assert_int_equal(ids[k], tag * 1000 + k);
  int64_t slots[2];
  assert_int_equal(zmq_msg_size(&f[2]), sizeof slots);
  memcpy(slots, zmq_msg_data(&f[2]), sizeof slots);
  assert_int_equal(slots[0], tag);
  assert_int_equal(slots[1], tag + 1);
  for (int i = 0; i < nf; i++) zmq_msg_close(&f[i]);
}

/* Leases from the trainer to the reader: only the attached trainer writes them, they come
 * out whole and in order across wrap-arounds, a full ring or an oversized lease is refused
 * (ZeroMQ carries it), and a trainer's corrupt entry or runaway head is dropped without
 * losing the ring. */
static void test_leases(void **state) {
  (void)state;
  side s = open_both();
  zmq_msg_t f[DP_RING_FRAMES];
  int nf = 0;
  assert_int_equal(dp_ring_session(s.ring), 0);
  assert_int_equal(put_lease(&s, 4, 1, 8), 0); /* not attached */
  assert_int_equal(dp_ring_take_lease(s.ring, &nf, f), 0);
  assert_int_equal(dp_ring_attach(s.base, s.bytes, 4), 1);
  assert_int_equal(dp_ring_session(s.ring), 4);
  assert_int_equal(put_lease(&s, 5, 1, 8), 0); /* another trainer's session */
  assert_int_equal(put_lease(&s, 4, 1, 128), 1);
  assert_int_equal(put_lease(&s, 4, 2, 3), 1);
  expect_lease(&s, 1, 128);
  expect_lease(&s, 2, 3);
  assert_int_equal(dp_ring_take_lease(s.ring, &nf, f), 0);
  /* oversized: more ids than an entry holds */
  assert_int_equal(put_lease(&s, 4, 3, DP_RING_LEASE_BYTES / 8), 0);
  /* full after DP_RING_LEASES, in order three times around */
  int next_put = 0, next_take = 0;
  for (int round = 0; round < 3; round++) {
    while (put_lease(&s, 4, next_put % 50, 16)) next_put++;
    assert_int_equal(next_put - next_take, DP_RING_LEASES);
    while (next_take < next_put) expect_lease(&s, next_take++ % 50, 16);
  }
  /* a corrupt frame count, then a frame size past the entry: each dropped, the next comes */
  assert_int_equal(put_lease(&s, 4, 7, 4), 1);
  assert_int_equal(put_lease(&s, 4, 8, 4), 1);
  uint64_t *tail = (uint64_t *)(lease_hdr_at(&s) + 64), *head = (uint64_t *)lease_hdr_at(&s);
  char *entries = lease_hdr_at(&s) + 192;
  uint32_t *e = (uint32_t *)(entries + (*tail % DP_RING_LEASES) * DP_RING_LEASE_BYTES);
  e[0] = 99;
  assert_int_equal(dp_ring_take_lease(s.ring, &nf, f), -1);
  e = (uint32_t *)(entries + (*tail % DP_RING_LEASES) * DP_RING_LEASE_BYTES);
  e[2] = DP_RING_LEASE_BYTES;
  assert_int_equal(dp_ring_take_lease(s.ring, &nf, f), -1);
  assert_int_equal(dp_ring_take_lease(s.ring, &nf, f), 0);
  /* a head far past the tail: what is there is dropped, and leases flow again */
  *head = *tail + DP_RING_LEASES + 3;
  assert_int_equal(dp_ring_take_lease(s.ring, &nf, f), -1);
  assert_int_equal(dp_ring_take_lease(s.ring, &nf, f), 0);
  assert_int_equal(put_lease(&s, 4, 9, 5), 1);
  expect_lease(&s, 9, 5);
  /* a reader about to sleep: told when a lease is already there, and the trainer sees it
   * waiting (so it sends through ZeroMQ, or wakes it after writing) */
  assert_int_equal(dp_ring_reader_waiting(s.base, s.bytes), 0);
  assert_int_equal(dp_ring_set_waiting(s.ring, 1), 0);
  assert_int_equal(dp_ring_reader_waiting(s.base, s.bytes), 1);
  assert_int_equal(put_lease(&s, 4, 11, 5), 1);
  assert_int_equal(dp_ring_set_waiting(s.ring, 1), 1); /* a lease came: do not sleep */
  assert_int_equal(dp_ring_set_waiting(s.ring, 0), 0);
  assert_int_equal(dp_ring_reader_waiting(s.base, s.bytes), 0);
  expect_lease(&s, 11, 5);
  /* the trainer lets go: no more leases through the ring */
  dp_ring_detach(s.base, s.bytes, 4);
  assert_int_equal(dp_ring_session(s.ring), 0);
  assert_int_equal(put_lease(&s, 4, 10, 5), 0);
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
      cmocka_unit_test(test_leases),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
