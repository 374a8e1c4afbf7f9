/* pipeline/batch_message.c - a BATCH message becomes the consumer's batch, after every field is checked.
 *
 * Nothing a reader sends is trusted: the tensor descriptions must fit the bytes that came,
 * the ids must be the item's own (in order, some left out when records were skipped), and a
 * shared-memory slot must lie inside the arena of that very reader. Inline bytes are not
 * copied: the tensors borrow the message (aligned, as readers lay tensors out at multiples
 * of 64 bytes) and the last one released closes it. Bytes in shared memory are borrowed the
 * same way (the slot goes back when the last tensor is released, pipeline/shm.c), unless that
 * reader's free slots run low: then they are copied and the slot goes back at once. */
#ifdef EMBER_HAVE_ZMQ
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/core_impl.h"
#include "loader_impl.h"

/* The bytes of a received batch stay in their message: tensors borrow them, and the last
 * tensor released closes it. */
typedef struct dp_msg_hold {
  zmq_msg_t msg;
  atomic_int refs;
  int64_t counted;
} dp_msg_hold;

static void hold_release(void *data, void *ctx) {
  (void)data;
  dp_msg_hold *h = ctx;
  if (atomic_fetch_sub(&h->refs, 1) != 1) return;
  core_memory_count(-h->counted);
  zmq_msg_close(&h->msg);
  free(h);
}

/* Checks a BATCH's descriptions, ids and sizes and builds the consumer's batch; NULL when
 * anything does not add up (the message is dropped and the item leased again). */
em_loader_batch *dp_build_batch(em_loader *l, zmq_msg_t *f, const dp_hdr *h, dp_worker *w, int *slot_lent, char *why,
                                size_t why_cap) {
  dp_coord *c = &l->c;
  *slot_lent = 0;
  int nt = h->ntensors;
  int64_t n = h->n;
  int64_t pos = c->plan.item_pos[h->item], len = c->plan.item_len[h->item];
  if (nt < (n ? 1 : 0) || nt > DP_MAX_TENSORS || zmq_msg_size(&f[2]) != (size_t)nt * sizeof(dp_tdesc)) {
    snprintf(why, why_cap, "bad tensor descriptions");
    return NULL;
  }
  if (n < 0 || n > len || h->skipped < 0 || h->skipped > len - n || !dp_count_fits(n, zmq_msg_size(&f[3]), 8)) {
    snprintf(why, why_cap, "%lld rows for an item of %lld samples", (long long)n, (long long)len);
    return NULL;
  }
  /* Frames need not be aligned (zmq packs small ones into its receive buffer): the ids
   * and descriptions are copied out before they are read. The kept ids are the item's
   * ids, in order, some left out. */
  em_tensor *ids = NULL;
  int64_t sz = n;
  if (em_empty(&ids, 1, &sz, EM_INT64, (em_device){EM_CPU, 0})) {
    snprintf(why, why_cap, "out of memory");
    return NULL;
  }
  memcpy(em_tensor_data(ids), zmq_msg_data(&f[3]), (size_t)n * sizeof(int64_t));
  const int64_t *kept = em_tensor_data(ids), *want = c->plan.ids + pos;
  int64_t j = 0;
  for (int64_t i = 0; i < n; i++) {
    while (j < len && want[j] != kept[i]) j++;
    if (j == len) {
      snprintf(why, why_cap, "sample id %lld was not leased in this item", (long long)kept[i]);
      em_tensor_release(ids);
      return NULL;
    }
    j++;
  }
  dp_tdesc d[DP_MAX_TENSORS];
  memcpy(d, zmq_msg_data(&f[2]), (size_t)nt * sizeof(dp_tdesc));
  em_tensor_desc plain[DP_MAX_TENSORS];
  for (int i = 0; i < nt; i++) plain[i] = d[i].d;
  for (int i = 0; i < nt; i++)
    if (d[i].d.lengths && !dp_lengths_desc_valid(plain, nt, i)) {
      snprintf(why, why_cap, "tensor %d is jagged, but its lengths (%d) name no int64 row tensor", i, d[i].d.lengths);
      em_tensor_release(ids);
      return NULL;
    }
  const uint8_t *base;
  uint64_t avail;
  dp_msg_hold *hold = NULL;
  dp_loan *loan = NULL;
  int shm = zmq_msg_size(&f[4]) == sizeof(dp_shm_ref) && h->flags & DP_FLAG_SHM;
  dp_shm_ref ref;
  if (shm) {
    memcpy(&ref, zmq_msg_data(&f[4]), sizeof ref);
    ref.name[63] = 0;
    if (!w || !w->same_host) {
      snprintf(why, why_cap, "shared memory from a reader on another host");
      em_tensor_release(ids);
      return NULL;
    }
    if (!w->shm || strcmp(dp_shm_map_name(w->shm), ref.name) || dp_shm_map_bytes(w->shm) != ref.arena_bytes ||
        dp_shm_map_id(w->shm) != ref.arena_id) {
      if (w->shm) dp_shm_map_release(w->shm); /* tensors still viewing it keep it mapped */
      w->lent = 0;
      w->nfree = 0; /* slots of the old arena */
      w->shm = dp_shm_map_open(ref.name, w->pid, ref.arena_bytes, ref.arena_id);
      if (!w->shm) {
        snprintf(why, why_cap, "cannot map its shared memory '%s': %s", ref.name, em_last_error());
        em_tensor_release(ids);
        return NULL;
      }
    }
    if (ref.offset > ref.arena_bytes || ref.nbytes > ref.arena_bytes - ref.offset) {
      snprintf(why, why_cap, "a shared-memory slot outside the arena");
      em_tensor_release(ids);
      return NULL;
    }
    base = (const uint8_t *)dp_shm_map_data(w->shm) + ref.offset;
    avail = ref.nbytes;
    /* Lend the slot while the reader keeps enough free ones for the leases it holds (and
     * one being filled); past that, copy: a batch kept long, or a collector that runs
     * late, then costs a copy rather than the reader's shared memory. */
    if (l->lender && w->lent < ref.nslots - l->o.worker_queue - 2) {
      loan = dp_loan_new(l->lender, w->shm, ref.slot, (int64_t)ref.nbytes);
      if (loan) {
        w->lent++;
        *slot_lent = 1;
      }
    }
  } else { /* the tensors will borrow the message: move it to the heap first (small
              messages keep their bytes inside zmq_msg_t, so the address moves with it) */
    hold = calloc(1, sizeof *hold);
    if (!hold) {
      snprintf(why, why_cap, "out of memory");
      em_tensor_release(ids);
      return NULL;
    }
    zmq_msg_init(&hold->msg);
    zmq_msg_move(&hold->msg, &f[4]);
    atomic_init(&hold->refs, 1); /* this function's own reference, dropped below */
    base = zmq_msg_data(&hold->msg);
    avail = zmq_msg_size(&hold->msg);
    hold->counted = (int64_t)avail;
    core_memory_count(hold->counted);
  }
  em_loader_batch *b = calloc(1, sizeof *b);
  if (!b) {
    if (hold) hold_release(NULL, hold);
    if (loan) dp_loan_release(NULL, loan);
    em_tensor_release(ids);
    snprintf(why, why_cap, "out of memory");
    return NULL;
  }
  b->item = h->item;
  b->samples = n;
  int ok = 1;
  for (int i = 0; i < nt && ok; i++) {
    em_tensor_desc dd = d[i].d;
    dd.name[31] = 0;
    int64_t bytes = dp_desc_bytes(&dd);
    int jagged = dd.lengths != 0;
    ok = bytes >= 0 && (jagged || dd.sizes[0] == n) && d[i].offset >= 0 && d[i].nbytes == bytes && (uint64_t)d[i].offset <= avail &&
         (uint64_t)bytes <= avail - (uint64_t)d[i].offset;
    if (!ok) {
      snprintf(why, why_cap, "tensor %d ('%s') does not fit the %llu bytes sent", i, dd.name,
               (unsigned long long)avail);
      break;
    }
    memcpy(b->names[i], dd.name, 32);
    b->lengths[i] = dd.lengths;
    const uint8_t *src = base + d[i].offset;
    size_t esize = em_dtype_size((em_dtype)dd.dtype);
    em_status st;
    if (hold && ((uintptr_t)src % esize) == 0) { /* zero copy: the tensor borrows the message */
      atomic_fetch_add(&hold->refs, 1);
      st = em_from_blob(&b->tensors[i], (void *)src, dd.ndim, dd.sizes, NULL, (em_dtype)dd.dtype,
                        (em_device){EM_CPU, 0}, hold_release, hold);
      if (st) atomic_fetch_sub(&hold->refs, 1);
    } else if (loan && ((uintptr_t)src % esize) == 0) { /* zero copy: the tensor borrows the slot */
      dp_loan_retain(loan);
      st = em_from_blob(&b->tensors[i], (void *)src, dd.ndim, dd.sizes, NULL, (em_dtype)dd.dtype,
                        (em_device){EM_CPU, 0}, dp_loan_release, loan);
      if (st) dp_loan_release(NULL, loan);
    } else { /* shared memory past the lending limit, or a misaligned frame: copy */
      st = em_empty(&b->tensors[i], dd.ndim, dd.sizes, (em_dtype)dd.dtype, (em_device){EM_CPU, 0});
      if (!st) memcpy(em_tensor_data(b->tensors[i]), src, (size_t)bytes);
    }
    if (st) {
      snprintf(why, why_cap, "%s", em_last_error());
      ok = 0;
      break;
    }
    b->ntensors = i + 1;
    b->bytes += bytes;
  }
  b->ids = ids;
  /* a jagged tensor's values must be exactly what its lengths count */
  for (int i = 0; i < b->ntensors && ok; i++) {
    if (!b->lengths[i]) continue;
    const em_tensor *L = b->tensors[b->lengths[i] - 1];
    int64_t keys = em_tensor_ndim(L) == 2 ? em_tensor_size(L, 1) : 1;
    int64_t sum = dp_lengths_sum(em_tensor_data(L), n, keys);
    if (sum != em_tensor_size(b->tensors[i], 0)) {
      snprintf(why, why_cap, "jagged tensor %d ('%s'): %lld values sent, its lengths count %lld", i, b->names[i],
               (long long)em_tensor_size(b->tensors[i], 0), (long long)sum);
      ok = 0;
    }
  }
  if (hold) hold_release(NULL, hold);
  if (loan) dp_loan_release(NULL, loan); /* this function's reference: the tensors hold theirs */
  if (!ok) {
    dp_batch_destroy(b);
    return NULL;
  }
  return b;
}
#endif
