/* http.c - the KServe v2 HTTP endpoint on libmicrohttpd.
 *
 * libmicrohttpd runs its own thread pool (epoll where available). An infer request is read
 * whole, parsed and checked in that thread; then its connection is suspended and the
 * request queued. A worker answers it (queue.c) and resumes the connection, and the pool
 * writes the answer. A waiting request therefore holds no thread, and a slow client only
 * holds its own connection (dropped after the connection timeout). */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "ember/core.h"
#include "serve_impl.h"

#define MAX_BODY ((size_t)64 << 20)
#define CONNECTION_TIMEOUT_S 60

struct sv_http {
  struct MHD_Daemon *daemon;
  em_serve *server;
  pthread_mutex_t lock; /* orders resumes against the daemon being stopped */
  int stopped, quiesced;
  int port;
};

typedef struct sv_conn {
  struct MHD_Connection *conn;
  struct sv_http *http;
  sv_buf body;
  int too_large;
  sv_request *req; /* queued: its answer is written when the connection resumes */
} sv_conn;

/* ---------------------------------------------------------------- responses */
static enum MHD_Result respond(struct MHD_Connection *c, unsigned status, const char *type, char *body, size_t len) {
  struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
  if (!resp) {
    free(body);
    return MHD_NO;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  enum MHD_Result ret = MHD_queue_response(c, status, resp);
  MHD_destroy_response(resp);
  return ret;
}

static enum MHD_Result respond_buf(struct MHD_Connection *c, unsigned status, const char *type, sv_buf *b) {
  if (b->failed || !b->data) {
    free(b->data);
    return MHD_NO;
  }
  return respond(c, status, type, b->data, b->len);
}

static enum MHD_Result respond_json(struct MHD_Connection *c, unsigned status, const char *text) {
  sv_buf b = {0};
  sv_buf_puts(&b, text);
  return respond_buf(c, status, "application/json", &b);
}

/* s NULL: counted by the model's metrics instead of the server's */
static enum MHD_Result respond_error(em_serve *s, struct MHD_Connection *c, unsigned status, const char *message) {
  if (s) sv_count_http_error(s, (int)status);
  sv_buf b = {0};
  sv_buf_puts(&b, "{\"error\":");
  sv_buf_json_string(&b, message);
  sv_buf_puts(&b, "}");
  return respond_buf(c, status, "application/json", &b);
}

/* ---------------------------------------------------------------- answers from workers */
void sv_http_answer(em_serve *s, sv_request *r) {
  struct sv_http *h = s->http;
  if (!h) return;
  pthread_mutex_lock(&h->lock);
  /* a stopped daemon has closed (and freed) the suspended connections */
  if (!h->stopped) MHD_resume_connection(r->conn->conn);
  pthread_mutex_unlock(&h->lock);
}

static void suspend_conn(void *arg) { MHD_suspend_connection((struct MHD_Connection *)arg); }

static void count_model_error(sv_model *m, int status) {
  pthread_mutex_lock(&m->metrics.lock);
  m->metrics.requests++;
  if (status >= 500) m->metrics.errors_5xx++;
  else m->metrics.errors_4xx++;
  pthread_mutex_unlock(&m->metrics.lock);
}

static enum MHD_Result handle_infer(struct sv_http *h, sv_conn *ctx, sv_model *m) {
  em_serve *s = h->server;
  char err[SV_ERR_MAX];
  if (ctx->too_large) {
    snprintf(err, sizeof err, "the request body is larger than %zu MiB", MAX_BODY >> 20);
    count_model_error(m, 413);
    return respond_error(NULL, ctx->conn, 413, err);
  }
  /* the binary tensor extension: the JSON's length, binary data after it */
  const char *hlen = MHD_lookup_connection_value(ctx->conn, MHD_HEADER_KIND, "Inference-Header-Content-Length");
  size_t json_len = 0;
  if (hlen) {
    char *end;
    unsigned long long v = strtoull(hlen, &end, 10);
    if (end == hlen || *end || v == 0 || hlen[0] == '-' || v > ctx->body.len) {
      snprintf(err, sizeof err, "model '%s': Inference-Header-Content-Length: '%.32s', expected the JSON's length in "
               "bytes (1 to the body's %zu)", m->spec.name, hlen, ctx->body.len);
      count_model_error(m, 400);
      free(ctx->body.data);
      ctx->body = (sv_buf){0};
      return respond_error(NULL, ctx->conn, 400, err);
    }
    json_len = (size_t)v;
  }
  sv_request *r = NULL;
  int status = sv_parse_infer(&m->spec, ctx->body.data ? ctx->body.data : "", ctx->body.len, json_len, &r, err,
                              sizeof err);
  free(ctx->body.data);
  ctx->body = (sv_buf){0};
  if (status != 200) {
    count_model_error(m, status);
    char msg[SV_ERR_MAX + 80];
    snprintf(msg, sizeof msg, "model '%s': %s", m->spec.name, err);
    return respond_error(NULL, ctx->conn, (unsigned)status, msg);
  }
  r->conn = ctx;
  ctx->req = r;
  status = sv_enqueue(s, m, r, err, sizeof err, suspend_conn, ctx->conn);
  if (status != 200) {
    ctx->req = NULL;
    sv_request_release(r);
    return respond_error(s, ctx->conn, (unsigned)status, err);
  }
  return MHD_YES;
}

/* POST /v2/repository/models/NAME/load {"parameters": {"checkpoint": PATH}}: answered when
 * every worker has the new version (200) or one could not load it (400, the old one serves). */
static enum MHD_Result handle_load(struct sv_http *h, sv_conn *ctx, sv_model *m) {
  em_serve *s = h->server;
  char err[SV_ERR_MAX], path[SV_PATH_MAX];
  int status = ctx->too_large ? 413 : sv_parse_load(ctx->body.data ? ctx->body.data : "", ctx->body.len, path,
                                                    sizeof path, err, sizeof err);
  if (ctx->too_large) snprintf(err, sizeof err, "the request body is larger than %zu MiB", MAX_BODY >> 20);
  free(ctx->body.data);
  ctx->body = (sv_buf){0};
  if (status) {
    char msg[SV_ERR_MAX + 80];
    snprintf(msg, sizeof msg, "model '%s': load: %s", m->spec.name, err);
    return respond_error(s, ctx->conn, (unsigned)status, msg);
  }
  sv_request *r = calloc(1, sizeof *r);
  if (!r) return MHD_NO;
  atomic_init(&r->refs, 1);
  r->conn = ctx;
  ctx->req = r;
  status = sv_version_load(s, m, path, r, suspend_conn, ctx->conn, err, sizeof err);
  if (status) {
    ctx->req = NULL;
    sv_request_release(r);
    return respond_error(s, ctx->conn, (unsigned)status, err);
  }
  return MHD_YES;
}

/* POST /v2/repository/models/NAME/unload: answered at once (200 naming the version); the
 * queued requests are still answered, new ones get 503 until a load. */
static enum MHD_Result handle_unload(struct sv_http *h, sv_conn *ctx, sv_model *m) {
  em_serve *s = h->server;
  char err[SV_ERR_MAX];
  int64_t version = 0;
  free(ctx->body.data); /* KServe's parameters (unload_dependents) mean nothing here */
  ctx->body = (sv_buf){0};
  int status = sv_version_unload(s, m, &version, err, sizeof err);
  if (status) return respond_error(s, ctx->conn, (unsigned)status, err);
  sv_buf b = {0};
  sv_buf_puts(&b, "{\"model_name\":");
  sv_buf_json_string(&b, m->spec.name);
  sv_buf_printf(&b, ",\"unloaded\":\"%lld\"}", (long long)version);
  return respond_buf(ctx->conn, 200, "application/json", &b);
}

/* POST /v2/repository/index [{"ready": true}]: every served model, each with its serving
 * version and state (READY, UNAVAILABLE with a reason), as Triton's repository extension
 * answers; {"ready": true} lists the ready ones only. */
static enum MHD_Result handle_index(struct sv_http *h, sv_conn *ctx) {
  em_serve *s = h->server;
  char err[SV_ERR_MAX];
  int ready_only = 0;
  int status = ctx->too_large ? 413 : sv_parse_index(ctx->body.data ? ctx->body.data : "", ctx->body.len, &ready_only,
                                                     err, sizeof err);
  if (ctx->too_large) snprintf(err, sizeof err, "the request body is larger than %zu MiB", MAX_BODY >> 20);
  free(ctx->body.data);
  ctx->body = (sv_buf){0};
  if (status) {
    char msg[SV_ERR_MAX + 40];
    snprintf(msg, sizeof msg, "repository index: %s", err);
    return respond_error(s, ctx->conn, (unsigned)status, msg);
  }
  sv_buf b = {0};
  sv_write_repository_index(&b, s, ready_only);
  return respond_buf(ctx->conn, 200, "application/json", &b);
}

/* The path after "/v2/models/": NAME, NAME/ready or NAME/infer, each also as
 * NAME/versions/V/... (V: the serving version). */
static enum MHD_Result handle_model(struct sv_http *h, sv_conn *ctx, const char *method, const char *rest) {
  em_serve *s = h->server;
  const char *slash = strchr(rest, '/');
  size_t name_len = slash ? (size_t)(slash - rest) : strlen(rest);
  const char *action = slash ? slash + 1 : "";
  sv_model *m = sv_find_model(s, rest, name_len);
  char msg[SV_ERR_MAX];
  if (!m) {
    snprintf(msg, sizeof msg, "no model named '%.*s' is served", (int)(name_len > 64 ? 64 : name_len), rest);
    return respond_error(s, ctx->conn, 404, msg);
  }
  if (!strncmp(action, "versions/", 9)) { /* NAME/versions/V[/infer|/ready]: V must be the serving one */
    char *end;
    long long v = strtoll(action + 9, &end, 10);
    pthread_mutex_lock(&m->lock);
    long long serving = (long long)m->serving;
    pthread_mutex_unlock(&m->lock);
    if (end == action + 9 || (*end && *end != '/') || v != serving) {
      snprintf(msg, sizeof msg, "model '%s': version '%.*s' is not served (version %lld is)", m->spec.name,
               (int)(end == action + 9 ? 16 : end - (action + 9)), action + 9, serving);
      return respond_error(s, ctx->conn, 404, msg);
    }
    action = *end ? end + 1 : "";
  }
  int is_get = !strcmp(method, "GET"), is_post = !strcmp(method, "POST");
  if (!strcmp(action, "infer")) {
    if (!is_post) return respond_error(s, ctx->conn, 405, "infer: use POST");
    return handle_infer(h, ctx, m);
  }
  if (!strcmp(action, "ready") && is_get) {
    pthread_mutex_lock(&m->lock);
    int ready = m->ready_workers > 0 && !m->unloaded && !atomic_load(&s->stopping);
    pthread_mutex_unlock(&m->lock);
    return respond_json(ctx->conn, ready ? 200 : 503, ready ? "{\"ready\":true}" : "{\"ready\":false}");
  }
  if (!*action && is_get) {
    sv_buf b = {0};
    sv_write_model_metadata(&b, m);
    return respond_buf(ctx->conn, 200, "application/json", &b);
  }
  snprintf(msg, sizeof msg, "no such endpoint: %s /v2/models/%.64s/%.32s", method, m->spec.name, action);
  return respond_error(s, ctx->conn, 404, msg);
}

static enum MHD_Result route(struct sv_http *h, sv_conn *ctx, const char *url, const char *method) {
  em_serve *s = h->server;
  int is_get = !strcmp(method, "GET");
  if (is_get && !strcmp(url, "/v2/health/live")) return respond_json(ctx->conn, 200, "{\"live\":true}");
  if (is_get && !strcmp(url, "/v2/health/ready")) {
    int ready = sv_all_ready(s);
    return respond_json(ctx->conn, ready ? 200 : 503, ready ? "{\"ready\":true}" : "{\"ready\":false}");
  }
  if (is_get && !strcmp(url, "/metrics")) {
    char *text = em_serve_metrics_text(s);
    if (!text) return MHD_NO;
    return respond(ctx->conn, 200, "text/plain; version=0.0.4", text, strlen(text));
  }
  if (is_get && (!strcmp(url, "/v2") || !strcmp(url, "/v2/"))) {
    sv_buf b = {0};
    sv_buf_printf(&b, "{\"name\":\"ember\",\"version\":\"%s\",\"extensions\":[\"binary_tensor_data\",\"model_repository\"]}", em_version());
    return respond_buf(ctx->conn, 200, "application/json", &b);
  }
  if (!strncmp(url, "/v2/models/", 11)) return handle_model(h, ctx, method, url + 11);
  if (!strcmp(url, "/v2/repository/index")) {
    if (strcmp(method, "POST")) return respond_error(s, ctx->conn, 405, "repository index: use POST");
    return handle_index(h, ctx);
  }
  if (!strncmp(url, "/v2/repository/models/", 22)) {
    const char *name = url + 22, *slash = strchr(name, '/');
    if (slash && (!strcmp(slash, "/load") || !strcmp(slash, "/unload"))) {
      sv_model *m = sv_find_model(s, name, (size_t)(slash - name));
      char msg[SV_ERR_MAX];
      if (!m) {
        snprintf(msg, sizeof msg, "no model named '%.*s' is served", (int)((slash - name) > 64 ? 64 : slash - name), name);
        return respond_error(s, ctx->conn, 404, msg);
      }
      int load = !strcmp(slash, "/load");
      if (strcmp(method, "POST")) return respond_error(s, ctx->conn, 405, load ? "load: use POST" : "unload: use POST");
      return load ? handle_load(h, ctx, m) : handle_unload(h, ctx, m);
    }
  }
  char msg[SV_ERR_MAX];
  snprintf(msg, sizeof msg, "no such endpoint: %s %.128s (see /v2/models/NAME/infer)", method, url);
  return respond_error(s, ctx->conn, 404, msg);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
  (void)version;
  struct sv_http *h = cls;
  sv_conn *ctx = *con_cls;
  if (!ctx) {
    ctx = calloc(1, sizeof *ctx);
    if (!ctx) return MHD_NO;
    ctx->conn = conn;
    ctx->http = h;
    *con_cls = ctx;
    return MHD_YES;
  }
  if (*upload_data_size) {
    if (!ctx->too_large) {
      if (ctx->body.len + *upload_data_size > MAX_BODY) {
        ctx->too_large = 1;
        free(ctx->body.data);
        ctx->body = (sv_buf){0};
      } else {
        sv_buf_put(&ctx->body, upload_data, *upload_data_size);
        if (ctx->body.failed) ctx->too_large = 1;
      }
    }
    *upload_data_size = 0;
    return MHD_YES;
  }
  if (ctx->req) { /* resumed: the worker has answered */
    sv_request *r = ctx->req;
    char *body = r->body;
    r->body = NULL;
    if (r->json_len && r->status == 200) { /* JSON, then the outputs' binary data */
      struct MHD_Response *resp = MHD_create_response_from_buffer(r->body_len, body, MHD_RESPMEM_MUST_FREE);
      if (!resp) {
        free(body);
        return MHD_NO;
      }
      char len[32];
      snprintf(len, sizeof len, "%zu", r->json_len);
      MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
      MHD_add_response_header(resp, "Inference-Header-Content-Length", len);
      enum MHD_Result ret = MHD_queue_response(conn, (unsigned)r->status, resp);
      MHD_destroy_response(resp);
      return ret;
    }
    return respond(conn, (unsigned)r->status, "application/json", body ? body : strdup("{}"), body ? r->body_len : 2);
  }
  return route(h, ctx, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
  (void)conn;
  (void)toe;
  struct sv_http *h = cls;
  sv_conn *ctx = *con_cls;
  if (!ctx) return;
  if (ctx->req) {
    atomic_fetch_sub(&h->server->in_flight, 1);
    sv_request_release(ctx->req);
  }
  free(ctx->body.data);
  free(ctx);
  *con_cls = NULL;
}

/* ---------------------------------------------------------------- lifetime */
em_status em_serve_listen_http(em_serve *s, const char *host, int port, int threads) {
  const char *op = "em_serve_listen_http";
  if (!s) return em_set_error(EM_ERR_ARGUMENT, "%s: the server is NULL", op);
  if (s->http) return em_set_error(EM_ERR_ARGUMENT, "%s: the server already listens", op);
  if (port < 0 || port > 65535 || threads < 1 || threads > 1024)
    return em_set_error(EM_ERR_ARGUMENT, "%s: expected a port 0..65535 and 1..1024 threads, got %d and %d", op, port,
                        threads);
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t)port);
  if (!host || inet_pton(AF_INET, host, &addr.sin_addr) != 1)
    return em_set_error(EM_ERR_ARGUMENT, "%s: host '%s': expected a numeric IPv4 address such as 127.0.0.1", op,
                        host ? host : "(null)");
  struct sv_http *h = calloc(1, sizeof *h);
  if (!h) return em_set_error(EM_ERR_MEMORY, "%s: out of memory", op);
  h->server = s;
  pthread_mutex_init(&h->lock, NULL);
  unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME;
  h->daemon = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR, &addr,
                               MHD_OPTION_THREAD_POOL_SIZE, (unsigned)threads, MHD_OPTION_NOTIFY_COMPLETED,
                               on_completed, h, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONNECTION_TIMEOUT_S,
                               MHD_OPTION_LISTENING_ADDRESS_REUSE, 1, MHD_OPTION_END);
  if (!h->daemon) {
    pthread_mutex_destroy(&h->lock);
    free(h);
    return em_set_error(EM_ERR_IO, "%s: cannot listen on %s:%d (in use, or not an address of this host)", op, host,
                        port);
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
  h->port = info ? info->port : port;
  s->http = h;
  return EM_OK;
}

int em_serve_http_port(const em_serve *s) { return s && s->http ? s->http->port : -1; }

void sv_http_quiesce(struct sv_http *h) {
  pthread_mutex_lock(&h->lock);
  if (!h->stopped && !h->quiesced) {
    MHD_socket fd = MHD_quiesce_daemon(h->daemon);
    if (fd != MHD_INVALID_SOCKET) close(fd);
    h->quiesced = 1;
  }
  pthread_mutex_unlock(&h->lock);
}

void sv_http_stop(struct sv_http *h) {
  pthread_mutex_lock(&h->lock);
  int was = h->stopped;
  h->stopped = 1;
  pthread_mutex_unlock(&h->lock);
  if (!was) MHD_stop_daemon(h->daemon);
}

void sv_http_free(struct sv_http *h) {
  pthread_mutex_destroy(&h->lock);
  free(h);
}
