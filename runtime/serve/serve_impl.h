/* serve_impl.h - internals of runtime/serve shared by its files (prefix sv_).
 *
 * queue.c    models, request queues, batching, batch input/complete, shutdown
 * request.c  the KServe v2 JSON request parser (jansson) and the response writer
 * http.c     libmicrohttpd: routing, suspend/resume of waiting connections
 * metrics.c  counters and histograms, Prometheus text
 * wire.c     the binary ZeroMQ protocol: frame layouts, the decoder and the writers
 * zmq.c      the ZeroMQ ROUTER endpoint (one I/O thread) and em_serve_client
 * versions.c model versions: loading a checkpoint beside the serving one, swapping */
#ifndef EMBER_SERVE_IMPL_H
#define EMBER_SERVE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "ember/serve.h"

#define SV_MAX_DIMS 8
#define SV_MAX_IO 16
#define SV_NAME_MAX 64
#define SV_ERR_MAX 512

/* ---------------------------------------------------------------- growable text */
typedef struct sv_buf {
  char *data;
  size_t len, cap;
  int failed; /* an allocation failed: the text is incomplete */
} sv_buf;
void sv_buf_put(sv_buf *b, const char *s, size_t n);
void sv_buf_puts(sv_buf *b, const char *s);
void sv_buf_printf(sv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sv_buf_json_string(sv_buf *b, const char *s); /* with quotes and escapes */

/* ---------------------------------------------------------------- metrics */
#define SV_TIME_BUCKETS 16
#define SV_SIZE_BUCKETS 12
typedef struct sv_hist {
  uint64_t counts[SV_TIME_BUCKETS + 1]; /* the last one: above every bound (+Inf) */
  double sum;
  uint64_t n;
} sv_hist;

typedef struct sv_metrics {
  pthread_mutex_t lock;
  uint64_t requests; /* answered, any status */
  uint64_t errors_4xx, errors_5xx, rejected_full;
  sv_hist queue_s, compute_s, latency_s, batch_rows;
} sv_metrics;
void sv_metrics_init(sv_metrics *m);
void sv_hist_time(sv_hist *h, double seconds);
void sv_hist_size(sv_hist *h, double rows);

/* ---------------------------------------------------------------- models and requests */
typedef struct sv_io {
  char name[SV_NAME_MAX];
  em_dtype dtype;
  int ndim; /* per instance */
  int64_t shape[SV_MAX_DIMS]; /* -1: any size */
} sv_io;

typedef struct sv_model_spec {
  char name[SV_NAME_MAX];
  int n_inputs, n_outputs;
  sv_io inputs[SV_MAX_IO];
  sv_io outputs[SV_MAX_IO]; /* ndim unused: the model decides */
  int64_t max_batch;
} sv_model_spec;

struct sv_conn;

/* How a request came and must be answered. */
enum { SV_HTTP = 0, SV_ZMQ = 1 };
#define SV_ROUTE_MAX 256 /* a ZeroMQ routing id is at most 255 bytes */
#define SV_MAX_FRAMES (1 + 2 * SV_MAX_IO)

/* One inference request: parsed, checked, its inputs in the model's dtypes. */
typedef struct sv_request {
  struct sv_request *next; /* in the model's queue */
  int64_t rows;
  int64_t inner[SV_MAX_IO][SV_MAX_DIMS]; /* each input's per-instance shape */
  void *data[SV_MAX_IO]; /* rows * prod(inner) elements of the input's dtype */
  char *id; /* the request's "id", echoed */
  double t_arrived, t_started; /* clock: queued, taken into a batch */
  /* the answer, set by the worker before the connection is resumed */
  int status;
  char *body;
  size_t body_len;
  struct sv_conn *conn; /* HTTP */
  /* ZeroMQ: the peer's routing id (and whether it sent an empty delimiter, as REQ does),
   * the client's request id; the answer's frames are body split at frame_len */
  int proto;
  unsigned char route[SV_ROUTE_MAX];
  size_t route_len;
  int delimiter;
  uint64_t wire_id;
  int nframes;
  size_t frame_len[SV_MAX_FRAMES];
  struct sv_request *out_next; /* in the ZeroMQ thread's list of answers to send */
  int64_t version; /* the model version that computed the answer */
  uint32_t out_mask, bin_mask; /* HTTP: the outputs asked for (0: all), those sent as binary data */
  size_t json_len; /* HTTP: the answer's JSON part when binary data follows (else 0) */
  atomic_int refs; /* the connection's, plus the queue's while queued or batched */
} sv_request;

void sv_request_free(sv_request *r);
void sv_request_release(sv_request *r); /* frees on the last reference */
/* lift.c: the flat number arrays of the inputs' "data", parsed ahead of jansson. */
typedef struct sv_lifted {
  int present; /* this input object's data was a flat array of numbers, lifted here */
  int exact_ints; /* every value an integer literal of magnitude <= 2^53 (exact in a double) */
  int64_t n;
  double *values;
} sv_lifted;
typedef struct sv_lift {
  char *json; /* the body with each lifted array written as [] */
  size_t len;
  sv_lifted inputs[SV_MAX_IO]; /* by the input object's position in "inputs" */
} sv_lift;
/* 1 when something was lifted (out holds it; free with sv_lift_free), 0 when the body is
 * left to jansson as it is (out then holds nothing). */
int sv_lift_data(const char *body, size_t len, sv_lift *out);
void sv_lift_free(sv_lift *l);
/* Parses a KServe v2 infer request for spec; json_len > 0 (Inference-Header-Content-Length):
 * the JSON is the body's first json_len bytes and the binary tensor extension's data follows.
 * Returns the HTTP status: 200 with *out set, or 400 (413 for too many rows) with the message
 * in err. */
int sv_parse_infer(const sv_model_spec *spec, const char *body, size_t len, size_t json_len, sv_request **out,
                   char *err, size_t errcap);
/* The same with jansson alone (no lift.c): what the tests compare sv_parse_infer with. */
int sv_parse_infer_jansson(const sv_model_spec *spec, const char *body, size_t len, size_t json_len, sv_request **out,
                           char *err, size_t errcap);
/* {"model_name":..., "outputs":[...]} for one request's slice of the outputs (rows from
 * row0), each output contiguous, of the declared dtype; the outputs the request asked as
 * binary data follow the JSON (r->json_len set to its length, else 0). */
int sv_write_infer_response(sv_buf *b, const sv_model_spec *spec, sv_request *r, em_tensor *const *outputs,
                            int64_t row0);
const char *sv_datatype_name(em_dtype dtype); /* "FP32", ... */
/* Prometheus-safe and JSON-safe model names: [A-Za-z0-9_.-]+ */
int sv_valid_name(const char *name);

/* ---------------------------------------------------------------- versions (versions.c) */
#define SV_VERSIONS_KEPT 16
#define SV_PATH_MAX 1024
typedef struct sv_version {
  int64_t number;
  char path[SV_PATH_MAX];
  char state[16]; /* "serving", "retired", "loading", "failed" */
  char reason[SV_ERR_MAX]; /* failed: why */
} sv_version;

typedef struct sv_model {
  sv_model_spec spec;
  /* versions, under lock: serving is what workers run (swapped between batches); pending is
   * being loaded beside it by every worker, each reporting to versions.c */
  int64_t serving, pending, last_version;
  int prepared; /* workers that loaded pending */
  int unloaded; /* POST .../unload: no new requests until a load succeeds; workers drop the model */
  int workers; /* declared by em_serve_model_source; 0: unknown (the ready ones count) */
  char source[SV_PATH_MAX]; /* the checkpoint it was started with: what a load naming none reloads */
  sv_request *load_waiters; /* HTTP load requests waiting for the outcome (out_next list) */
  int n_history;
  sv_version history[SV_VERSIONS_KEPT];
  int64_t max_delay_us, max_queue;
  em_serve_policy policy; /* when a batch that is neither full nor due closes (queue.c) */
  int idle; /* workers waiting in em_serve_next / em_serve_next_batch, under lock */
  pthread_mutex_t lock;
  pthread_cond_t cond; /* a request arrived, or shutdown */
  sv_request *head, *tail;
  int64_t queued;
  int ready_workers;
  sv_metrics metrics;
} sv_model;

#define SV_MAX_MODELS 64

struct em_serve {
  int n_models;
  sv_model *models[SV_MAX_MODELS];
  atomic_int stopping; /* no new requests */
  atomic_long in_flight; /* accepted, not yet answered on the wire */
  pthread_mutex_t wait_lock;
  pthread_cond_t wait_cond;
  int stop_requested;
  char *failure;
  struct sv_http *http;
  struct sv_zmq *zmq;
  uint64_t http_errors_404, http_errors_400, http_errors_503;
  pthread_mutex_t metrics_lock;
};

struct em_serve_batch {
  em_serve *server;
  sv_model *model;
  int n;
  sv_request **reqs;
  int64_t rows;
  double t_closed;
  int64_t version; /* the model version the worker runs this batch with */
};

/* queue.c, called by http.c. Returns 200 when queued (the request is then owned by the
 * queue, which takes a reference; before_push(arg) runs under the queue's lock just before), 503 when the queue is full or the server is stopping (err says which). */
int sv_enqueue(em_serve *s, sv_model *m, sv_request *r, char *err, size_t errcap, void (*before_push)(void *),
               void *arg);
sv_model *sv_find_model(em_serve *s, const char *name, size_t len);
int sv_all_ready(em_serve *s);
/* http.c, called by queue.c: the request's answer is set; resume its connection. */
void sv_http_answer(em_serve *s, sv_request *r);
void sv_http_stop(struct sv_http *h);
void sv_http_quiesce(struct sv_http *h);
void sv_http_free(struct sv_http *h);
void sv_count_http_error(em_serve *s, int status);
/* answers a request: its connection resumes (HTTP) or the ZeroMQ thread sends it */
void sv_deliver(em_serve *s, sv_request *r);
/* zmq.c */
void sv_zmq_answer(struct sv_zmq *z, sv_request *r);
void sv_zmq_stop(struct sv_zmq *z);
void sv_zmq_free(struct sv_zmq *z);
/* versions.c: a load request from HTTP (path already checked non-empty). Returns 0 when r
 * waits for the outcome (its answer set and delivered later), else the HTTP status with
 * err set. */
/* path NULL or "": the checkpoint the model was started with (a directory's latest again). */
int sv_version_load(em_serve *s, sv_model *m, const char *path, sv_request *r, void (*before_wait)(void *),
                    void *arg, char *err, size_t errcap);
/* With m->lock held: the version task for a worker in that state (EM_SERVE_LOAD, SWAP,
 * DISCARD), or 0 when none. */
int sv_version_task(sv_model *m, int64_t *serving, int64_t *prepared, int64_t *version);
void sv_versions_abort_all(em_serve *s, const char *why);
/* Unloads the model: 0 with *version the version unloaded (an unloaded model answers so
 * again), else the HTTP status with err set (503 stopping, 409 a load in progress). */
int sv_version_unload(em_serve *s, sv_model *m, int64_t *version, char *err, size_t errcap);
void sv_write_versions(sv_buf *b, sv_model *m);
/* the model's metadata as KServe JSON */
/* POST /v2/repository/index: parses the optional body ({"ready": BOOL}); 0 or 400 with err. */
int sv_parse_index(const char *body, size_t len, int *ready_only, char *err, size_t errcap);
/* [{"name", "version", "state": READY|UNAVAILABLE, "reason"}] for every model (the ready ones). */
void sv_write_repository_index(sv_buf *b, em_serve *s, int ready_only);
void sv_write_model_metadata(sv_buf *b, sv_model *m);
/* request.c: the load request's checkpoint path; 0, or 400 with err naming the field */
int sv_parse_load(const char *body, size_t len, char *path, size_t cap, char *err, size_t errcap);


/* ---------------------------------------------------------------- the binary protocol (wire.c)
 * A message (after the ROUTER's routing id, and an empty delimiter when the peer sent one):
 *   INFER   [hdr + model name][tensor desc][tensor data] ... (ntensors pairs)
 *   RESULT  [hdr + model name][tensor desc][tensor data] ... one pair per output
 *   ERROR   [hdr + model name][message, UTF-8]             status: 400, 404, 409, 413, 503, 500
 *   LOAD    [hdr + model name][checkpoint path, UTF-8]      a new version, as the HTTP load
 *   UNLOAD  [hdr + model name]                              as the HTTP unload
 *           both answered by a RESULT of no tensors (model version: the new / the unloaded
 *           one) or an ERROR
 * hdr: magic "EMSV", version, kind, the client's request id (echoed), the model version
 * that answered, status, the name's
 * length, ntensors; a desc: dtype code, ndim, the name's length, then int64 shape[ndim] and
 * the name. Little-endian, no padding; data is the tensor's bytes, row-major. */
#define SV_WIRE_MAGIC 0x56534d45u /* the bytes "EMSV" */
#define SV_WIRE_VERSION 1
enum { SV_WIRE_INFER = 1, SV_WIRE_RESULT = 2, SV_WIRE_ERROR = 3, SV_WIRE_LOAD = 4, SV_WIRE_UNLOAD = 5 };
typedef struct sv_wire_hdr {
  uint32_t magic;
  uint16_t version, kind;
  uint64_t request_id;
  int64_t model_version; /* RESULT: the version that answered; INFER: 0 */
  uint16_t status, name_len;
  uint32_t ntensors;
} sv_wire_hdr; /* 32 bytes */
typedef struct sv_wire_desc {
  uint8_t dtype, ndim;
  uint16_t name_len;
  uint32_t reserved;
} sv_wire_desc; /* 8 bytes, then int64 shape[ndim], then the name */
typedef struct sv_wire_tensor {
  em_dtype dtype;
  int ndim;
  int64_t shape[SV_MAX_DIMS + 1];
  char name[SV_NAME_MAX];
  size_t nbytes;
} sv_wire_tensor;

int sv_wire_dtype_code(em_dtype dtype); /* 0: not served */
/* 0, or 400 with err naming the field. name receives the model name (NUL-terminated). */
int sv_wire_read_header(const void *data, size_t size, sv_wire_hdr *h, char name[SV_NAME_MAX], char *err, size_t errcap);
/* A tensor's desc frame against its data frame's size; k numbers it in messages. */
int sv_wire_read_tensor(const void *desc, size_t desc_size, size_t data_size, int k, sv_wire_tensor *t, char *err,
                        size_t errcap);
/* The tensor frames of an INFER message (2 per tensor) into a request for spec: 200, else
 * 400 (413: more rows than max_batch) with err naming the field. */
int sv_wire_parse_infer(const sv_model_spec *spec, const sv_wire_hdr *h, int nframes, const void *const *frames,
                        const size_t *sizes, sv_request **out, char *err, size_t errcap);
/* Frames into b, their lengths into frame_len (at most SV_MAX_FRAMES): rows rows of each
 * tensor from row0 (rows < 0: each tensor whole); returns the count, or -1 when out of memory. */
int sv_wire_write_tensor_frames(sv_buf *b, size_t *frame_len, int kind, uint64_t id, int64_t model_version,
                                int status, const char *model,
                                int n, const char *const *names, em_tensor *const *tensors, int64_t row0, int64_t rows);
int sv_wire_write_error(sv_buf *b, size_t *frame_len, uint64_t id, int status, const char *model, const char *message);
/* The ZeroMQ answer of r (RESULT with r's rows of outputs from row0, or ERROR) into r->body. */
int sv_wire_answer_result(sv_request *r, const sv_model_spec *spec, em_tensor *const *outputs, int64_t row0);
int sv_wire_answer_error(sv_request *r, const char *model, int status, const char *message);

#endif
