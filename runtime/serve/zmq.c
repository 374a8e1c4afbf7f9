/* zmq.c - ember serve's ZeroMQ endpoint (a ROUTER socket speaking wire.c's protocol) and its
 * client (em_serve_client, a DEALER socket).
 *
 * One I/O thread owns the ROUTER socket (ZeroMQ sockets are not thread-safe). It reads a
 * message, checks it, and queues the request on its model like the HTTP endpoint does;
 * malformed messages and refusals get an ERROR message at once. Workers hand answers back
 * through a list under a mutex and a pipe that wakes the thread's zmq_poll; the thread sends
 * them. A ROUTER drops what it cannot deliver (a gone or slow peer past its high-water mark)
 * rather than blocking, so a slow client cannot stall the others. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ember/core.h"
#include "serve_impl.h"

#ifdef EMBER_HAVE_ZMQ
#include <zmq.h>

#define MAX_MESSAGE ((int64_t)64 << 20) /* bytes, as the HTTP body */
#define MAX_PARTS (2 + SV_MAX_FRAMES) /* routing id, delimiter, then the message's frames */

struct sv_zmq {
  em_serve *server;
  void *ctx, *sock;
  pthread_t thread;
  int started;
  int wake[2]; /* workers write a byte when they queue an answer */
  pthread_mutex_t lock;
  sv_request *out_head, *out_tail;
  int stop;
  char endpoint[256];
};

static void close_wake(struct sv_zmq *z) {
  for (int i = 0; i < 2; i++)
    if (z->wake[i] >= 0) close(z->wake[i]);
}

void sv_zmq_answer(struct sv_zmq *z, sv_request *r) {
  pthread_mutex_lock(&z->lock);
  if (z->stop) { /* the thread is gone: nobody will send it */
    pthread_mutex_unlock(&z->lock);
    atomic_fetch_sub(&z->server->in_flight, 1);
    return;
  }
  atomic_fetch_add(&r->refs, 1);
  r->out_next = NULL;
  if (z->out_tail) z->out_tail->out_next = r;
  else z->out_head = r;
  z->out_tail = r;
  pthread_mutex_unlock(&z->lock);
  ssize_t w = write(z->wake[1], "x", 1); /* a full pipe already wakes the thread */
  (void)w;
}

/* Sends [route][delimiter?][frames...]; a peer that is gone or full loses its answer. */
static void send_frames(struct sv_zmq *z, const unsigned char *route, size_t route_len, int delimiter,
                        const char *body, const size_t *frame_len, int nframes) {
  if (zmq_send(z->sock, route, route_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) return;
  if (delimiter) zmq_send(z->sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
  size_t off = 0;
  for (int i = 0; i < nframes; i++) {
    zmq_send(z->sock, body + off, frame_len[i], (i + 1 < nframes ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT);
    off += frame_len[i];
  }
}

static void send_error(struct sv_zmq *z, const unsigned char *route, size_t route_len, int delimiter, uint64_t id,
                       int status, const char *model, const char *message) {
  sv_buf b = {0};
  size_t frame_len[SV_MAX_FRAMES];
  int nf = sv_wire_write_error(&b, frame_len, id, status, model, message);
  if (nf > 0) send_frames(z, route, route_len, delimiter, b.data, frame_len, nf);
  free(b.data);
}

static void send_answers(struct sv_zmq *z) {
  char drain[64];
  while (read(z->wake[0], drain, sizeof drain) > 0) {
  }
  pthread_mutex_lock(&z->lock);
  sv_request *r = z->out_head;
  z->out_head = z->out_tail = NULL;
  pthread_mutex_unlock(&z->lock);
  while (r) {
    sv_request *next = r->out_next;
    if (r->nframes > 0) send_frames(z, r->route, r->route_len, r->delimiter, r->body, r->frame_len, r->nframes);
    atomic_fetch_sub(&z->server->in_flight, 1);
    sv_request_release(r);
    r = next;
  }
}

static void count_model_error(sv_model *m, int status) {
  pthread_mutex_lock(&m->metrics.lock);
  m->metrics.requests++;
  if (status >= 500) m->metrics.errors_5xx++;
  else m->metrics.errors_4xx++;
  pthread_mutex_unlock(&m->metrics.lock);
}

/* LOAD [path] and UNLOAD: the HTTP repository API's requests (LOAD without a path reloads the
 * checkpoint the model was started with). An unload is answered at once;
 * a load when every worker has the version or one failed (versions.c answers it). */
static void handle_version(struct sv_zmq *z, sv_model *m, const sv_wire_hdr *h, const unsigned char *route,
                           size_t route_len, int delimiter, int nframes, const void *const *frames, const size_t *sizes) {
  em_serve *s = z->server;
  char err[SV_ERR_MAX], msg[SV_ERR_MAX + 128];
  int status;
  if (h->kind == SV_WIRE_UNLOAD) {
    int64_t version = 0;
    status = nframes ? 400 : sv_version_unload(s, m, &version, err, sizeof err);
    if (nframes) snprintf(err, sizeof err, "UNLOAD: %d frames after the header, expected none", nframes);
    if (status) {
      snprintf(msg, sizeof msg, "model '%s': unload: %s", m->spec.name, err);
      send_error(z, route, route_len, delimiter, h->request_id, status, m->spec.name, msg);
      return;
    }
    sv_buf b = {0};
    size_t frame_len[1];
    int nf = sv_wire_write_tensor_frames(&b, frame_len, SV_WIRE_RESULT, h->request_id, version, 200, m->spec.name, 0,
                                         NULL, NULL, 0, -1);
    if (nf > 0) send_frames(z, route, route_len, delimiter, b.data, frame_len, nf);
    free(b.data);
    return;
  }
  char path[SV_PATH_MAX];
  if (nframes > 1 || (nframes == 1 && (sizes[0] == 0 || sizes[0] >= sizeof path || memchr(frames[0], 0, sizes[0])))) {
    snprintf(msg, sizeof msg, "model '%s': load: expected at most one frame after the header, the checkpoint path (1 "
             "to %d bytes, no NUL), got %d frames%s", m->spec.name, SV_PATH_MAX - 1, nframes,
             nframes == 1 ? " of another size" : "");
    send_error(z, route, route_len, delimiter, h->request_id, 400, m->spec.name, msg);
    return;
  }
  path[0] = '\0';
  if (nframes == 1) {
    memcpy(path, frames[0], sizes[0]);
    path[sizes[0]] = '\0';
  }
  sv_request *r = calloc(1, sizeof *r);
  if (!r) return;
  atomic_init(&r->refs, 1);
  r->proto = SV_ZMQ;
  memcpy(r->route, route, route_len);
  r->route_len = route_len;
  r->delimiter = delimiter;
  r->wire_id = h->request_id;
  status = sv_version_load(s, m, path, r, NULL, NULL, err, sizeof err);
  if (status) {
    snprintf(msg, sizeof msg, "model '%s': load: %s", m->spec.name, err);
    send_error(z, route, route_len, delimiter, h->request_id, status, m->spec.name, msg);
  }
  sv_request_release(r); /* versions.c holds its own reference while the load runs */
}

/* One message: parts[0] the routing id, then the peer's frames. */
static void handle_message(struct sv_zmq *z, zmq_msg_t *parts, int nparts, int truncated) {
  em_serve *s = z->server;
  const unsigned char *route = zmq_msg_data(&parts[0]);
  size_t route_len = zmq_msg_size(&parts[0]);
  if (route_len >= SV_ROUTE_MAX) return;
  int first = 1, delimiter = 0;
  if (nparts > 1 && zmq_msg_size(&parts[1]) == 0) { /* a REQ peer's empty delimiter */
    delimiter = 1;
    first = 2;
  }
  char err[SV_ERR_MAX], name[SV_NAME_MAX];
  sv_wire_hdr h;
  memset(&h, 0, sizeof h);
  if (nparts <= first) {
    send_error(z, route, route_len, delimiter, 0, 400, "", "header: missing (an empty message)");
    return;
  }
  int status = sv_wire_read_header(zmq_msg_data(&parts[first]), zmq_msg_size(&parts[first]), &h, name, err, sizeof err);
  if (status) {
    send_error(z, route, route_len, delimiter, h.magic == SV_WIRE_MAGIC ? h.request_id : 0, status, name, err);
    return;
  }
  sv_model *m = sv_find_model(s, name, strlen(name));
  if (!m) {
    snprintf(err, sizeof err, "header.model: no model named '%s' is served", name);
    send_error(z, route, route_len, delimiter, h.request_id, 404, name, err);
    return;
  }
  const void *frames[SV_MAX_FRAMES];
  size_t sizes[SV_MAX_FRAMES];
  int nframes = nparts - first - 1;
  for (int i = 0; i < nframes; i++) {
    frames[i] = zmq_msg_data(&parts[first + 1 + i]);
    sizes[i] = zmq_msg_size(&parts[first + 1 + i]);
  }
  if (h.kind == SV_WIRE_LOAD || h.kind == SV_WIRE_UNLOAD) {
    handle_version(z, m, &h, route, route_len, delimiter, nframes, frames, sizes);
    return;
  }
  sv_request *r = NULL;
  if (truncated) {
    snprintf(err, sizeof err, "header.ntensors: %u, but the message has more than %d frames", h.ntensors,
             SV_MAX_FRAMES);
    status = 400;
  } else {
    status = sv_wire_parse_infer(&m->spec, &h, nframes, frames, sizes, &r, err, sizeof err);
  }
  if (status != 200) {
    count_model_error(m, status);
    char msg[SV_ERR_MAX + 80];
    snprintf(msg, sizeof msg, "model '%s': %s", m->spec.name, err);
    send_error(z, route, route_len, delimiter, h.request_id, status, name, msg);
    return;
  }
  memcpy(r->route, route, route_len);
  r->route_len = route_len;
  r->delimiter = delimiter;
  status = sv_enqueue(s, m, r, err, sizeof err, NULL, NULL);
  if (status != 200) /* a full queue is counted by sv_enqueue */
    send_error(z, route, route_len, delimiter, h.request_id, status, name, err);
  sv_request_release(r); /* the queue holds its own reference */
}

static void receive_message(struct sv_zmq *z) {
  zmq_msg_t parts[MAX_PARTS];
  int n = 0, more = 1, truncated = 0;
  while (more) {
    zmq_msg_t part;
    zmq_msg_init(&part);
    if (zmq_msg_recv(&part, z->sock, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&part);
      break; /* EAGAIN before the first part: nothing; a message's parts arrive together */
    }
    more = zmq_msg_more(&part);
    if (n < MAX_PARTS) parts[n++] = part;
    else {
      truncated = 1; /* too many frames: read them all, answer an error */
      zmq_msg_close(&part);
    }
  }
  if (n > 0) handle_message(z, parts, n, truncated);
  for (int i = 0; i < n; i++) zmq_msg_close(&parts[i]);
}

static void *zmq_thread(void *arg) {
  struct sv_zmq *z = arg;
  for (;;) {
    pthread_mutex_lock(&z->lock);
    int stop = z->stop;
    pthread_mutex_unlock(&z->lock);
    if (stop) break;
    zmq_pollitem_t items[2] = {{z->sock, 0, ZMQ_POLLIN, 0}, {NULL, z->wake[0], ZMQ_POLLIN, 0}};
    if (zmq_poll(items, 2, 100) < 0 && zmq_errno() != EINTR) break;
    if (items[1].revents & ZMQ_POLLIN) send_answers(z);
    if (items[0].revents & ZMQ_POLLIN)
      for (int i = 0; i < 64; i++) { /* a bounded run, so answers are not starved */
        int events = 0;
        size_t len = sizeof events;
        if (zmq_getsockopt(z->sock, ZMQ_EVENTS, &events, &len) || !(events & ZMQ_POLLIN)) break;
        receive_message(z);
      }
  }
  send_answers(z); /* answered before the stop: sent, not lost */
  return NULL;
}

em_status em_serve_listen_zmq(em_serve *s, const char *endpoint) {
  const char *op = "em_serve_listen_zmq";
  if (!s || !endpoint) return em_set_error(EM_ERR_ARGUMENT, "%s: the server or endpoint is NULL", op);
  if (s->zmq) return em_set_error(EM_ERR_ARGUMENT, "%s: the server already listens on ZeroMQ", op);
  struct sv_zmq *z = calloc(1, sizeof *z);
  if (!z) return em_set_error(EM_ERR_MEMORY, "%s: out of memory", op);
  z->server = s;
  z->wake[0] = z->wake[1] = -1;
  pthread_mutex_init(&z->lock, NULL);
  em_status st = EM_OK;
  int64_t maxmsg = MAX_MESSAGE;
  int linger = 0;
  if (pipe(z->wake) || fcntl(z->wake[0], F_SETFL, O_NONBLOCK) || fcntl(z->wake[1], F_SETFL, O_NONBLOCK)) {
    st = em_set_error(EM_ERR_RUNTIME, "%s: pipe failed: %s", op, strerror(errno));
  } else if (!(z->ctx = zmq_ctx_new()) || !(z->sock = zmq_socket(z->ctx, ZMQ_ROUTER))) {
    st = em_set_error(EM_ERR_RUNTIME, "%s: cannot make a ZeroMQ socket: %s", op, zmq_strerror(zmq_errno()));
  } else if (zmq_setsockopt(z->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) ||
             zmq_setsockopt(z->sock, ZMQ_LINGER, &linger, sizeof linger) || zmq_bind(z->sock, endpoint)) {
    st = em_set_error(EM_ERR_IO, "%s: cannot bind '%s': %s (expected an address such as tcp://127.0.0.1:5556)", op,
                      endpoint, zmq_strerror(zmq_errno()));
  } else {
    size_t len = sizeof z->endpoint;
    if (zmq_getsockopt(z->sock, ZMQ_LAST_ENDPOINT, z->endpoint, &len)) snprintf(z->endpoint, sizeof z->endpoint, "%s", endpoint);
    int rc = pthread_create(&z->thread, NULL, zmq_thread, z);
    if (rc) st = em_set_error(EM_ERR_RUNTIME, "%s: pthread_create failed: %s", op, strerror(rc));
    else z->started = 1;
  }
  if (st) {
    if (z->sock) zmq_close(z->sock);
    if (z->ctx) zmq_ctx_term(z->ctx);
    close_wake(z);
    pthread_mutex_destroy(&z->lock);
    free(z);
    return st;
  }
  s->zmq = z;
  return EM_OK;
}

const char *em_serve_zmq_endpoint(const em_serve *s) { return s && s->zmq ? s->zmq->endpoint : NULL; }

void sv_zmq_stop(struct sv_zmq *z) {
  pthread_mutex_lock(&z->lock);
  int was = z->stop;
  z->stop = 1;
  pthread_mutex_unlock(&z->lock);
  if (was) return;
  ssize_t w = write(z->wake[1], "x", 1);
  (void)w;
  if (z->started) pthread_join(z->thread, NULL);
  send_answers(z); /* queued between the thread's last look and the stop: released */
  zmq_close(z->sock);
  zmq_ctx_term(z->ctx);
  z->sock = z->ctx = NULL;
}

void sv_zmq_free(struct sv_zmq *z) {
  close_wake(z);
  pthread_mutex_destroy(&z->lock);
  free(z);
}

#else /* no ZeroMQ */

void sv_zmq_answer(struct sv_zmq *z, sv_request *r) { (void)z, (void)r; }
void sv_zmq_stop(struct sv_zmq *z) { (void)z; }
void sv_zmq_free(struct sv_zmq *z) { (void)z; }
em_status em_serve_listen_zmq(em_serve *s, const char *endpoint) {
  (void)s, (void)endpoint;
  return em_set_error(EM_ERR_UNSUPPORTED, "em_serve_listen_zmq: this ember was built without ZeroMQ (libzmq3-dev)");
}
const char *em_serve_zmq_endpoint(const em_serve *s) {
  (void)s;
  return NULL;
}

#endif
