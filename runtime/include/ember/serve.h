/* ember/serve.h - model serving (runtime/serve): request queues with dynamic batching, an
 * HTTP server speaking the KServe v2 inference protocol, Prometheus metrics.
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
 * Bad requests get 400 with {"error": "..."} naming the field; unknown models 404.
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
/* EM_FFI_END */

#ifdef __cplusplus
}
#endif

#endif
