/* unsupported.c - the serve API in a build without libmicrohttpd or jansson: every call
 * says what to install (compiled instead of the other files of runtime/serve). */
#include <stddef.h>
#include "ember/core.h"
#include "ember/serve.h"

static em_status missing(const char *op) {
  return em_set_error(EM_ERR_UNSUPPORTED, "%s: this ember was built without serving: install libmicrohttpd-dev and "
                      "libjansson-dev and rebuild", op);
}

em_status em_serve_create(em_serve **out) {
  if (out) *out = NULL;
  return missing("em_serve_create");
}
void em_serve_destroy(em_serve *s) { (void)s; }
em_status em_serve_add_model(em_serve *s, const char *name, int64_t max_batch, int64_t max_delay_us,
                             int64_t max_queue, int *index) {
  (void)s, (void)name, (void)max_batch, (void)max_delay_us, (void)max_queue, (void)index;
  return missing("em_serve_add_model");
}
em_status em_serve_add_input(em_serve *s, int model, const char *name, em_dtype dtype, int ndim, const int64_t *shape) {
  (void)s, (void)model, (void)name, (void)dtype, (void)ndim, (void)shape;
  return missing("em_serve_add_input");
}
em_status em_serve_add_output(em_serve *s, int model, const char *name, em_dtype dtype) {
  (void)s, (void)model, (void)name, (void)dtype;
  return missing("em_serve_add_output");
}
em_status em_serve_model_policy(em_serve *s, int model, em_serve_policy policy) {
  (void)s, (void)model, (void)policy;
  return missing("em_serve_model_policy");
}
em_status em_serve_model_ready(em_serve *s, int model) {
  (void)s, (void)model;
  return missing("em_serve_model_ready");
}
em_status em_serve_listen_http(em_serve *s, const char *host, int port, int threads) {
  (void)s, (void)host, (void)port, (void)threads;
  return missing("em_serve_listen_http");
}
int em_serve_http_port(const em_serve *s) {
  (void)s;
  return -1;
}
em_status em_serve_wait(em_serve *s, int catch_signals) {
  (void)s, (void)catch_signals;
  return missing("em_serve_wait");
}
void em_serve_stop(em_serve *s, const char *failure) { (void)s, (void)failure; }
const char *em_serve_failure(const em_serve *s) {
  (void)s;
  return NULL;
}
em_status em_serve_shutdown(em_serve *s, double timeout_s) {
  (void)s, (void)timeout_s;
  return missing("em_serve_shutdown");
}
em_status em_serve_next_batch(em_serve *s, int model, em_serve_batch **out) {
  (void)s, (void)model;
  if (out) *out = NULL;
  return missing("em_serve_next_batch");
}
int64_t em_serve_batch_rows(const em_serve_batch *b) {
  (void)b;
  return 0;
}
int em_serve_batch_requests(const em_serve_batch *b) {
  (void)b;
  return 0;
}
em_status em_serve_batch_input(em_serve_batch *b, int input, em_tensor **out) {
  (void)b, (void)input, (void)out;
  return missing("em_serve_batch_input");
}
em_status em_serve_batch_complete(em_serve_batch *b, int n, em_tensor *const *outputs) {
  (void)b, (void)n, (void)outputs;
  return missing("em_serve_batch_complete");
}
void em_serve_batch_fail(em_serve_batch *b, const char *message) { (void)b, (void)message; }
char *em_serve_metrics_text(em_serve *s) {
  (void)s;
  return NULL;
}
void em_serve_free_string(char *text) { (void)text; }
em_status em_serve_next(em_serve *s, int model, int64_t *serving, int64_t *prepared, em_serve_batch **batch,
                        em_serve_task *task, int64_t *version) {
  (void)s, (void)model, (void)serving, (void)prepared, (void)version;
  if (batch) *batch = NULL;
  if (task) *task = EM_SERVE_STOP;
  return missing("em_serve_next");
}
em_status em_serve_model_source(em_serve *s, int model, int workers, const char *checkpoint) {
  (void)s, (void)model, (void)workers, (void)checkpoint;
  return missing("em_serve_model_source");
}
em_status em_serve_version_path(em_serve *s, int model, int64_t version, char *buf, size_t cap) {
  (void)s, (void)model, (void)version, (void)buf, (void)cap;
  return missing("em_serve_version_path");
}
em_status em_serve_version_prepared(em_serve *s, int model, int64_t version, int ok, const char *message) {
  (void)s, (void)model, (void)version, (void)ok, (void)message;
  return missing("em_serve_version_prepared");
}
em_status em_serve_listen_zmq(em_serve *s, const char *endpoint) {
  (void)s, (void)endpoint;
  return missing("em_serve_listen_zmq");
}
const char *em_serve_zmq_endpoint(const em_serve *s) {
  (void)s;
  return NULL;
}
em_status em_serve_client_open(em_serve_client **out, const char *endpoint, double timeout_s) {
  (void)endpoint, (void)timeout_s;
  if (out) *out = NULL;
  return missing("em_serve_client_open");
}
void em_serve_client_close(em_serve_client *c) { (void)c; }
em_status em_serve_client_infer(em_serve_client *c, const char *model, int n, const char *const *names,
                                em_tensor *const *inputs, int *n_outputs) {
  (void)c, (void)model, (void)n, (void)names, (void)inputs, (void)n_outputs;
  return missing("em_serve_client_infer");
}
const char *em_serve_client_output_name(const em_serve_client *c, int i) {
  (void)c, (void)i;
  return NULL;
}
em_status em_serve_client_output(em_serve_client *c, int i, em_tensor **out) {
  (void)c, (void)i, (void)out;
  return missing("em_serve_client_output");
}
int64_t em_serve_client_version(const em_serve_client *c) {
  (void)c;
  return 0;
}
em_status em_serve_client_load(em_serve_client *c, const char *model, const char *checkpoint, int64_t *version) {
  (void)c, (void)model, (void)checkpoint, (void)version;
  return missing("em_serve_client_load");
}
em_status em_serve_client_unload(em_serve_client *c, const char *model, int64_t *version) {
  (void)c, (void)model, (void)version;
  return missing("em_serve_client_unload");
}
