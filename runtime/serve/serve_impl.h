/* serve_impl.h - internals of runtime/serve shared by its files (prefix sv_).
 *
 * queue.c    models, request queues, batching, batch input/complete, shutdown
 * request.c  the KServe v2 JSON request parser (jansson) and the response writer
 * http.c     libmicrohttpd: routing, suspend/resume of waiting connections
 * metrics.c  counters and histograms, Prometheus text */
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
  struct sv_conn *conn;
  atomic_int refs; /* the connection's, plus the queue's while queued or batched */
} sv_request;

void sv_request_free(sv_request *r);
void sv_request_release(sv_request *r); /* frees on the last reference */
/* Parses a KServe v2 infer request for spec. Returns the HTTP status: 200 with *out set, or
 * 400 (413 for too many rows) with the message in err. */
int sv_parse_infer(const sv_model_spec *spec, const char *body, size_t len, sv_request **out, char *err,
                   size_t errcap);
/* {"model_name":..., "outputs":[...]} for one request's slice of the outputs (rows from
 * row0), each output contiguous, of the declared dtype. */
int sv_write_infer_response(sv_buf *b, const sv_model_spec *spec, const sv_request *r, em_tensor *const *outputs,
                            int64_t row0);
const char *sv_datatype_name(em_dtype dtype); /* "FP32", ... */
/* Prometheus-safe and JSON-safe model names: [A-Za-z0-9_.-]+ */
int sv_valid_name(const char *name);

typedef struct sv_model {
  sv_model_spec spec;
  int64_t max_delay_us, max_queue;
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
/* the model's metadata as KServe JSON */
void sv_write_model_metadata(sv_buf *b, const sv_model *m);

#endif
