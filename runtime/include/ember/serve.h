/* ember/serve.h - model serving (runtime/serve): request queues with dynamic batching, an
 * HTTP server speaking the KServe v2 inference protocol, a ZeroMQ endpoint with a binary
 * protocol and its client, model versions swapped live, Prometheus metrics.
 *
 * A server holds models. Each model declares its inputs (name, dtype, the shape of one
 * instance, -1 for a size that may vary) and its outputs (name, dtype). A request carries
 * every input with a leading batch dimension n (rows); it is parsed and checked in the HTTP
 * thread, then queued on its model (at most max_queue requests wait; a full queue answers
 * 503 at once). Workers (any threads; `ember serve` runs one Lua state per worker) call
 * em_serve_next_batch, which closes a batch when the requests of one shape add up to
 * max_batch rows or when the oldest has waited max_delay_us, whichever comes first;
 * requests of different shapes never share a batch. The worker runs one forward over the
 * batch's inputs (em_serve_batch_input: [rows, ...] tensors, the requests' rows in order)
 * and hands the outputs back (em_serve_batch_complete), which splits them by rows and
 * answers each request. A batch must be completed or failed exactly once.
 *
 * HTTP (libmicrohttpd, its own thread pool; connections wait suspended while their request
 * is queued, so a slow client or a long queue holds no thread):
 *   POST /v2/models/NAME/infer   {"inputs":[{"name","shape","datatype","data"}]}
 *                                -> {"model_name","outputs":[{"name","shape","datatype","data"}]}
 *   GET  /v2/models/NAME         model metadata; GET /v2/models/NAME/ready
 *   GET  /v2/health/live, /v2/health/ready (every model has a worker that loaded it)
 *   GET  /metrics                Prometheus text format
 *   POST /v2/repository/models/NAME/load {"parameters": {"checkpoint": PATH}}  a new version
 *                                (em_serve_next below), answered once it serves or failed
 *   POST /v2/repository/models/NAME/unload  stops serving the model (new requests get 503, the
 *                                queued ones are answered, workers drop it) until a load
 * Inputs and outputs may travel as raw bytes after the JSON (the binary tensor extension,
 * Inference-Header-Content-Length). Bad requests get 400 with {"error": "..."} naming the
 * field; unknown models 404. em_serve_listen_zmq adds a ZeroMQ endpoint on the same queues.
 *
 * Shutdown: em_serve_wait returns on SIGTERM/SIGINT (or em_serve_stop); em_serve_shutdown
 * then stops taking requests (new ones get 503), lets the workers finish every accepted
 * request, waits for the answers to be sent and closes the listening socket. Workers see
 * em_serve_next_batch return no batch once the queues are drained.
 *
 * Built when libmicrohttpd and jansson are found; otherwise every call fails with
 * EM_ERR_UNSUPPORTED. */
#ifndef EMBER_SERVE_H
#define EMBER_SERVE_H

#include "ember/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* EM_FFI_BEGIN */
typedef struct em_serve em_serve; /* a server: its models, queues, HTTP endpoint, metrics */
typedef struct em_serve_batch em_serve_batch; /* one closed batch, owned by a worker */

EM_API em_status em_serve_create(em_serve **out);
/* Stops everything still running (without draining) and frees the server. */
EM_API void em_serve_destroy(em_serve *s);

/* Adds a model; *index receives its number (0, 1, ...). max_batch >= 1 rows; max_delay_us >= 0;
 * max_queue >= 1 requests. */
EM_API em_status em_serve_add_model(em_serve *s, const char *name, int64_t max_batch, int64_t max_delay_us,
                                    int64_t max_queue, int *index);
/* One instance's shape (without the batch dimension), -1 for a size that may vary. */
EM_API em_status em_serve_add_input(em_serve *s, int model, const char *name, em_dtype dtype, int ndim,
                                    const int64_t *shape);
/* The output's per-instance shape is what the model produces; its dtype is converted to dtype. */
EM_API em_status em_serve_add_output(em_serve *s, int model, const char *name, em_dtype dtype);
/* When a batch that is neither full nor due closes. DEADLINE: only when its oldest request has
 * waited max_delay_us. SPARE (work-conserving): also at once while more than one worker of the
 * model waits for work, so a lone request at light load does not wait the whole delay while
 * another worker sits idle; with one worker free the delay bounds the wait as under DEADLINE.
 * A full batch always closes at once. The default is DEADLINE. */
typedef enum em_serve_policy { EM_SERVE_DEADLINE = 0, EM_SERVE_SPARE = 1 } em_serve_policy;
EM_API em_status em_serve_model_policy(em_serve *s, int model, em_serve_policy policy);
/* Declares that a worker has loaded the model (readiness counts them). */
EM_API em_status em_serve_model_ready(em_serve *s, int model);

/* Starts the HTTP server on host:port (port 0 picks a free one, see em_serve_http_port) with
 * `threads` threads. host is a numeric IPv4 address ("127.0.0.1", "0.0.0.0"). */
EM_API em_status em_serve_listen_http(em_serve *s, const char *host, int port, int threads);
EM_API int em_serve_http_port(const em_serve *s);

/* Blocks until SIGTERM or SIGINT arrives (when catch_signals) or em_serve_stop is called. */
EM_API em_status em_serve_wait(em_serve *s, int catch_signals);
/* Makes em_serve_wait return; a message (may be NULL) says why the server stops (a worker that
 * failed to load its model); em_serve_failure returns it afterwards (NULL when none). */
EM_API void em_serve_stop(em_serve *s, const char *failure);
EM_API const char *em_serve_failure(const em_serve *s);
/* Stops taking requests, waits until every accepted one has been answered (at most
 * timeout_s seconds), then stops the HTTP server. Workers must keep running meanwhile. */
EM_API em_status em_serve_shutdown(em_serve *s, double timeout_s);

/* Worker side. Blocks until a batch of the model closes; *out is NULL once the server shuts
 * down and the model's queue is empty (the worker should then return). */
EM_API em_status em_serve_next_batch(em_serve *s, int model, em_serve_batch **out);
EM_API int64_t em_serve_batch_rows(const em_serve_batch *b);
EM_API int em_serve_batch_requests(const em_serve_batch *b);
/* A new reference to input i of the batch: [rows, ...instance shape], the model's dtype. */
EM_API em_status em_serve_batch_input(em_serve_batch *b, int input, em_tensor **out);
/* Splits outputs (one per declared output, in order, each [rows, ...]) back to the requests
 * and answers them; consumes the batch. A wrong output (count, rows, dtype that cannot be
 * converted) answers every request with 500 and returns the error. */
EM_API em_status em_serve_batch_complete(em_serve_batch *b, int n, em_tensor *const *outputs);
/* Answers every request of the batch with 500 and the message; consumes the batch. */
EM_API void em_serve_batch_fail(em_serve_batch *b, const char *message);

/* The metrics in Prometheus text format (a new string; free it with em_serve_free_string). */
EM_API char *em_serve_metrics_text(em_serve *s);
EM_API void em_serve_free_string(char *text);
/* ---- model versions: a checkpoint loaded beside the serving one, swapped in between batches.
 * Workers call em_serve_next instead of em_serve_next_batch and act on its task:
 *   EM_SERVE_BATCH    run *batch (with the version *serving names)
 *   EM_SERVE_LOAD     load version *version (em_serve_version_path) beside the serving model,
 *                     check it, report with em_serve_version_prepared; on success set
 *                     *prepared = *version. Keep serving the old one meanwhile.
 *   EM_SERVE_SWAP     every worker has it: serve the prepared model from now on (the server
 *                     has set *serving = *version and *prepared = 0)
 *   EM_SERVE_DISCARD  the load failed elsewhere: drop the prepared model (*prepared = 0)
 *   EM_SERVE_UNLOAD   the model was unloaded (POST /v2/repository/models/NAME/unload) and its
 *                     queue is empty: drop the model (the server has set *serving = 0); a
 *                     later EM_SERVE_LOAD brings one back (there is no serving one to compare)
 *   EM_SERVE_STOP     the server shut down and the queue is empty: return
 * serving starts at 1 (the checkpoint the worker was started with), prepared at 0. */
typedef enum em_serve_task {
  EM_SERVE_STOP = 0,
  EM_SERVE_BATCH = 1,
  EM_SERVE_LOAD = 2,
  EM_SERVE_SWAP = 3,
  EM_SERVE_DISCARD = 4,
  EM_SERVE_UNLOAD = 5
} em_serve_task;
EM_API em_status em_serve_next(em_serve *s, int model, int64_t *serving, int64_t *prepared, em_serve_batch **batch,
                               em_serve_task *task, int64_t *version);
/* How many workers serve the model (a new version swaps in once all of them loaded it) and
 * the checkpoint of version 1 (reported in the metadata). */
EM_API em_status em_serve_model_source(em_serve *s, int model, int workers, const char *checkpoint);
/* The checkpoint path of a version (into buf). */
EM_API em_status em_serve_version_path(em_serve *s, int model, int64_t version, char *buf, size_t cap);
/* A worker's report on loading a version: ok, or the reason it failed (which drops the
 * version on every worker and answers the load request with it). */
EM_API em_status em_serve_version_prepared(em_serve *s, int model, int64_t version, int ok, const char *message);

/* ---- ZeroMQ: a ROUTER endpoint with ember's binary protocol (runtime/serve/wire.c), served
 * by the same queues and batches. endpoint: a ZeroMQ address ("tcp://127.0.0.1:5556"; port
 * "*" picks a free one, see em_serve_zmq_endpoint). Built when ZeroMQ is found. */
EM_API em_status em_serve_listen_zmq(em_serve *s, const char *endpoint);
EM_API const char *em_serve_zmq_endpoint(const em_serve *s); /* the bound address, or NULL */

/* A client of that endpoint (a DEALER socket; one thread at a time). infer sends the named
 * input tensors (each [rows, ...], any device, made contiguous on the CPU) and waits at most
 * timeout_s for the answer; the outputs stay in the client until the next infer. A server
 * error (400 naming the field, 404, 413, 503, 500) is returned as the error message. */
typedef struct em_serve_client em_serve_client;
EM_API em_status em_serve_client_open(em_serve_client **out, const char *endpoint, double timeout_s);
EM_API void em_serve_client_close(em_serve_client *c);
EM_API em_status em_serve_client_infer(em_serve_client *c, const char *model, int n, const char *const *names,
                                       em_tensor *const *inputs, int *n_outputs);
EM_API const char *em_serve_client_output_name(const em_serve_client *c, int i);
/* A new reference to output i of the last answer. */
EM_API em_status em_serve_client_output(em_serve_client *c, int i, em_tensor **out);
EM_API int64_t em_serve_client_version(const em_serve_client *c); /* the version that answered */
/* The repository API over ZeroMQ: loads a checkpoint (a directory, whose latest is used, or a
 * safetensors file, a path on the server's machine; NULL: the one the model was started with,
 * read again, e.g. a training run's newest) as the model's next version, waiting at
 * most the timeout for every worker to have it (*version: the new version); or unloads the
 * model (*version: the version unloaded). The server's refusal is the error message. */
EM_API em_status em_serve_client_load(em_serve_client *c, const char *model, const char *checkpoint, int64_t *version);
EM_API em_status em_serve_client_unload(em_serve_client *c, const char *model, int64_t *version);
/* EM_FFI_END */

#ifdef __cplusplus
}
#endif

#endif
