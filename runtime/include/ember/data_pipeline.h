/* ember/data_pipeline.h - the ZeroMQ data pipeline (runtime/data/pipeline): reader workers
 * deliver whole batches to trainers, exactly once per epoch, with backpressure.
 *
 * Trainer side (em_loader, runtime/data/pipeline/loader.c and pipeline/coordinator.c). A coordinator
 * thread binds a ROUTER socket; readers connect DEALER sockets. For each epoch the caller
 * gives the plan (the rank's sample ids in order) cut into numbered work items; the
 * coordinator leases items to readers only while fewer than `prefetch` items are leased or
 * waiting to be consumed (credits), and at most `worker_queue` to one reader. A reader
 * sends each batch back as one multipart message: a header, the tensor descriptions, the
 * kept sample ids and the raw tensor bytes (or, for a reader on the same host, a slot of
 * its shared-memory arena). Batches are handed to the consumer in the planned order (or as
 * they come), duplicates (an item re-issued after its reader was lost, then finished twice)
 * are dropped, and taking a batch frees its credit. Readers and the coordinator exchange
 * heartbeats; a reader silent for heartbeat_timeout_s, or a spawned one that exited, is
 * lost and its leases go to the others. A consumer waiting longer than its timeout gets an
 * error that says what the pipeline is doing, never a hang.
 *
 * Reader side (em_reader, runtime/data/pipeline/reader.c). An I/O thread owns the DEALER sockets
 * (one per trainer served), answers heartbeats while the dataset code runs, and forwards
 * leases to the caller and batches to the trainers. The caller (the Lua worker loop,
 * lua/ember/data/worker.lua) asks for a lease, gets tensors that live in the outgoing
 * message (em_reader_alloc: no copy on send), fills them and sends them.
 *
 * Wire format: runtime/data/pipeline/wire.h. All hosts must be little-endian (x86-64, ARM64).
 *
 * Datasets, formats, augmentation and epoch plans, which readers and in-process loaders
 * share: ember/data.h.
 *
 * Without ZeroMQ at build time the em_loader and em_reader calls fail with
 * EM_ERR_UNSUPPORTED. */
#ifndef EMBER_DATA_PIPELINE_H
#define EMBER_DATA_PIPELINE_H

#include "core.h"
#include "data.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* EM_FFI_BEGIN */
typedef struct em_tensor em_tensor;
typedef struct em_loader em_loader;
typedef struct em_loader_batch em_loader_batch;
typedef struct em_reader em_reader;

/* ---------------------------------------------------------------- trainer side */
typedef struct em_loader_options {
  const char *endpoints; /* comma-separated ZeroMQ bind addresses for remote readers
                                   ("tcp://127.0.0.1:5555", "tcp://127.0.0.1:*"); NULL or "": none */
  int32_t local_ipc; /* 1: also bind a private ipc endpoint (spawned readers) */
  int32_t prefetch; /* credits: items leased or waiting to be consumed, >= 1 */
  int32_t worker_queue; /* items leased to one reader at once, >= 1 */
  int32_t in_order; /* 1: the planned order; 0: as batches come */
  int32_t shared_memory; /* 1: same-host readers may send through shared memory */
  int32_t skip_bad; /* told to readers: skip bad records (count them) instead of failing */
  double heartbeat_s; /* heartbeat interval, > 0 */
  double heartbeat_timeout_s; /* silence after which a reader is lost, > heartbeat_s */
  double lease_timeout_s; /* an item leased this long is leased again to another reader
                                   (a reader that heartbeats but is stuck); 0: never */
  int64_t dataset_size; /* readers must report this size */
  const char *fingerprint; /* ... and this description of the data (transforms, format) */
  const char *curve_public_key; /* Z85, 40 characters; both NULL: no CurveZMQ */
  const char *curve_secret_key;
  const char *curve_clients; /* comma-separated Z85 public keys allowed; NULL or "": any
                                   reader that knows the server's public key */
} em_loader_options;

typedef struct em_loader_stats {
  int64_t batches, samples, bytes; /* delivered to the consumer */
  int64_t received, duplicates, reissued, skipped, shm_batches;
  int64_t shm_lent; /* of shm_batches, those whose tensors view the reader's slot (no copy) */
  int64_t ring_batches; /* of shm_batches, those announced through the reader's ring, not ZeroMQ */
  int64_t ring_leases; /* leases (of all ever sent) written into a reader's ring, not sent through ZeroMQ */
  int64_t slots_lent; /* now: shared-memory slots held by batch tensors (freed by Lua's collector) */
  int64_t workers, workers_seen, workers_lost, workers_rejected, respawned;
  int64_t leased, buffered, max_outstanding; /* now, and the most ever leased + buffered */
  double read_s, decode_s, transform_s, send_s; /* summed over readers */
  double wait_s; /* the consumer, blocked in em_loader_next */
} em_loader_stats;

EM_API em_status em_loader_create(em_loader **out, const em_loader_options *options);
/* Closes: tells readers goodbye, stops spawned readers (SIGTERM, then SIGKILL), joins. */
EM_API void em_loader_free(em_loader *l);
/* The bound endpoints, comma-separated, ports resolved ("ipc://..." first when local_ipc). */
EM_API const char *em_loader_endpoints(const em_loader *l);
/* A directory only this user can enter, removed by em_loader_free (NULL without local_ipc):
 * the ipc socket lives there, and the loader's files for its spawned readers. */
EM_API const char *em_loader_private_dir(const em_loader *l);
/* Starts n readers on this host: argv (argc words, argv[0] the executable) with
 * die-with-parent set; a spawned reader that exits is replaced while restarts remain. */
EM_API em_status em_loader_spawn(em_loader *l, int n, int argc, const char *const *argv, int max_restarts);
/* Pids of the live spawned readers; returns how many (at most max written). */
EM_API int em_loader_worker_pids(em_loader *l, int64_t *pids, int max);
/* Starts epoch `epoch`: ids (n_ids sample ids, plan order) and n_items work items, item i
 * being the item_len[i] ids from position item_pos[i]. Batches of a previous epoch not yet
 * taken are dropped. The arrays are copied. */
EM_API em_status em_loader_begin(em_loader *l, uint64_t epoch, uint64_t seed, const int64_t *ids, int64_t n_ids,
                                 const int64_t *item_pos, const int64_t *item_len, int64_t n_items);
/* The next batch of the epoch (*out NULL when every item was delivered). Waits at most
 * timeout_s for it, then fails with a description of the pipeline's state. */
EM_API em_status em_loader_next(em_loader *l, em_loader_batch **out, double timeout_s);
EM_API void em_loader_get_stats(em_loader *l, em_loader_stats *out);

EM_API int64_t em_loader_batch_item(const em_loader_batch *b);
EM_API int64_t em_loader_batch_samples(const em_loader_batch *b);
EM_API int em_loader_batch_count(const em_loader_batch *b);
EM_API const char *em_loader_batch_name(const em_loader_batch *b, int i);
/* Tensor i's em_tensor_desc.lengths: 0 for a row tensor; k > 0 when it is jagged, its
 * values counted by tensor k - 1 (checked on receipt: they sum to its rows). */
EM_API int em_loader_batch_lengths(const em_loader_batch *b, int i);
/* Tensor i (a new reference over the received bytes; valid after the batch is freed). */
EM_API em_status em_loader_batch_tensor(em_tensor **out, const em_loader_batch *b, int i);
/* The sample ids actually delivered (int64, as planned; bad records skipped are absent). */
EM_API em_status em_loader_batch_ids(em_tensor **out, const em_loader_batch *b);
EM_API void em_loader_batch_free(em_loader_batch *b);

/* ---------------------------------------------------------------- reader side */
typedef struct em_reader_options {
  const char *connect; /* comma-separated trainer endpoints */
  const char *name; /* shown in the trainers' messages */
  int64_t parent_pid; /* > 0: a spawned reader; it stops when that process is gone
                                   or its trainer says goodbye or falls silent */
  double heartbeat_s, heartbeat_timeout_s;
  int32_t shared_memory; /* 1: offer shared memory to trainers on this host */
  const char *curve_server_key; /* the trainers' Z85 public key; NULL: no CurveZMQ */
  const char *curve_public_key; /* this reader's keys (NULL: a fresh pair) */
  const char *curve_secret_key;
} em_reader_options;

typedef struct em_lease {
  int32_t status; /* 0: nothing within the timeout, 1: a lease, 2: stop */
  int32_t trainer; /* which connection it came from */
  int32_t skip_bad; /* the trainer's bad-record policy */
  int32_t pad_;
  uint64_t session, plan, epoch, seed;
  int64_t item, n;
  const int64_t *ids; /* n sample ids, valid until the next em_reader_next */
} em_lease;

EM_API em_status em_reader_create(em_reader **out, const em_reader_options *options);
/* Starts saying hello (the dataset is loaded): trainers check size and fingerprint. */
EM_API em_status em_reader_ready(em_reader *r, int64_t dataset_size, const char *fingerprint);
/* Waits up to timeout_s for a lease (or a reason to stop). */
EM_API em_status em_reader_next(em_reader *r, em_lease *lease, double timeout_s);
/* Tensors for lease's batch, in its outgoing message: descs[i].sizes[0] rows each. They are
 * freed (em_tensor_free) when the batch is sent. tensors receives n new references. */
EM_API em_status em_reader_alloc(em_reader *r, const em_lease *lease, int n, const em_tensor_desc *descs,
                                 em_tensor **tensors);
/* Sends the allocated batch: its first `kept` rows, for the samples kept_ids. */
EM_API em_status em_reader_send(em_reader *r, const em_lease *lease, int64_t kept, const int64_t *kept_ids,
                                int64_t skipped, const em_stage_times *times);
/* Reports that lease's item failed (a bad record): the trainer raises message. */
EM_API em_status em_reader_send_error(em_reader *r, const em_lease *lease, const char *message);
/* Tells every trainer this reader cannot work (its dataset failed to load, say). */
EM_API em_status em_reader_fatal(em_reader *r, const char *message);
EM_API void em_reader_free(em_reader *r);

/* A CurveZMQ key pair, 40-character Z85 strings (41 bytes with the terminator). */
EM_API em_status em_curve_keypair(char *public_key, char *secret_key);

/* ---------------------------------------------------------------- processes */
EM_API int em_process_alive(int64_t pid);
EM_API em_status em_process_signal(int64_t pid, int sig);
EM_API int64_t em_process_self(void);

/* EM_FFI_END */

#ifdef __cplusplus
}
#endif
#endif
