/* store.c - the client of PyTorch's c10d TCPStore protocol (ember/dist.h: em_dist_store_*),
 * and the server it starts with is_server (store_server.c).
 *
 * The protocol, as torch 2.x speaks it (torch/csrc/distributed/c10d/TCPStore.cpp and
 * TCPStoreLibUvBackend.cpp): a TCP stream of requests, each one query-type byte followed by
 * its fields in host byte order (every rank of a job runs on one byte order, and so does
 * torch): strings and byte vectors are a uint64 length and the bytes, integers int64.
 * A new connection starts with VALIDATE (the magic number) and, from torch's client, a PING
 * whose nonce the server echoes. Replies: SET, APPEND, MULTI_SET none; GET and COMPARE_SET
 * a vector; ADD, GETNUMKEYS and DELETE_KEY an int64; CHECK one byte (0 ready, 1 not);
 * WAIT one byte (0 STOP_WAITING) sent once every key exists, which a timed-out client
 * withdraws with CANCEL_WAIT (answered 1, WAIT_CANCELED, after any STOP_WAITING already on
 * its way). torch's client puts '/' before every key; this one does too, so that both see
 * one namespace. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "distributed/store_impl.h"

struct em_dist_store {
  int fd;
  pthread_mutex_t lock; /* one request and its reply at a time */
  double timeout;
  int broken; /* a reply that never came left the stream out of step */
  char host[256];
  int port;
  store_server *server; /* is_server: the server this client talks to, stopped on close */
};

/* ---------------------------------------------------------------- sockets */

static em_status sys_error(const em_dist_store *s, const char *op, const char *what) {
  return em_set_error(EM_ERR_IO, "%s: %s the store at %s:%d: %s", op, what, s->host, s->port, strerror(errno));
}

static em_status send_all(em_dist_store *s, const char *op, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = send(s->fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      s->broken = 1;
      return sys_error(s, op, "writing to");
    }
    p += n, len -= (size_t)n;
  }
  return EM_OK;
}

/* len bytes by the deadline (em_clock_monotonic); 1 when the deadline passed first. */
static em_status recv_all(em_dist_store *s, const char *op, void *buf, size_t len, double deadline, int *timed_out) {
  char *p = buf;
  if (timed_out) *timed_out = 0;
  while (len > 0) {
    double left = deadline - em_clock_monotonic();
    if (left <= 0) {
      if (timed_out) {
        *timed_out = 1;
        return EM_OK;
      }
      s->broken = 1;
      return em_set_error(EM_ERR_RUNTIME, "%s: no answer from the store at %s:%d within %.3g s", op, s->host, s->port,
                          s->timeout);
    }
    struct pollfd pf = {s->fd, POLLIN, 0};
    int r = poll(&pf, 1, left > 1 ? 1000 : (int)(left * 1000) + 1);
    if (r < 0 && errno != EINTR) return sys_error(s, op, "waiting for");
    if (r <= 0) continue;
    ssize_t n = recv(s->fd, p, len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      s->broken = 1;
      if (n == 0)
        return em_set_error(EM_ERR_IO, "%s: the store at %s:%d closed the connection (has its host ended?)", op,
                            s->host, s->port);
      return sys_error(s, op, "reading from");
    }
    p += n, len -= (size_t)n;
  }
  return EM_OK;
}

/* One attempt: a connected socket, or -1 with errno set. */
static int connect_once(const struct addrinfo *ai, double deadline) {
  int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
  if (fd < 0) return -1;
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
    if (errno != EINPROGRESS) goto fail;
    double left = deadline - em_clock_monotonic();
    struct pollfd pf = {fd, POLLOUT, 0};
    int r = poll(&pf, 1, left > 1 ? 1000 : left > 0 ? (int)(left * 1000) + 1 : 1);
    int err = 0;
    socklen_t el = sizeof err;
    if (r <= 0) {
      errno = ETIMEDOUT;
      goto fail;
    }
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
    if (err) {
      errno = err;
      goto fail;
    }
  }
  /* blocking again: requests are written whole, replies read after poll */
  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0) goto fail;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
fail:;
  int e = errno;
  close(fd);
  errno = e;
  return -1;
}

static em_status connect_store(em_dist_store *s, double deadline) {
  char port[16];
  snprintf(port, sizeof port, "%d", s->port);
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(s->host, port, &hints, &res);
  if (rc || !res)
    return em_set_error(EM_ERR_ARGUMENT, "store: the host '%s' does not resolve (%s)", s->host,
                        rc ? gai_strerror(rc) : "no address");
  int last = ECONNREFUSED;
  for (;;) {
    for (struct addrinfo *ai = res; ai && s->fd < 0; ai = ai->ai_next) {
      s->fd = connect_once(ai, deadline);
      if (s->fd < 0) last = errno;
    }
    if (s->fd >= 0 || em_clock_monotonic() >= deadline) break;
    struct timespec ts = {0, 100 * 1000000L}; /* not there yet: its host may still be starting */
    nanosleep(&ts, NULL);
  }
  freeaddrinfo(res);
  if (s->fd < 0)
    return em_set_error(EM_ERR_RUNTIME, "store: could not reach a store at %s:%d within %.3g s (%s)", s->host,
                        s->port, s->timeout, strerror(last));
  /* VALIDATE with the magic number, then a PING: its echo says a TCPStore is there */
  uint8_t hello[10];
  uint32_t magic = STORE_VALIDATION_MAGIC, nonce = (uint32_t)getpid() ^ 0x9e3779b9u, echo = 0;
  hello[0] = STORE_VALIDATE;
  memcpy(hello + 1, &magic, 4);
  hello[5] = STORE_PING;
  memcpy(hello + 6, &nonce, 4);
  em_status st = send_all(s, "store", hello, sizeof hello);
  if (!st) st = recv_all(s, "store", &echo, 4, em_clock_monotonic() + s->timeout, NULL);
  if (!st && echo != nonce) st = EM_ERR_RUNTIME;
  if (st)
    return em_set_error(EM_ERR_RUNTIME,
                        "store: %s:%d does not answer as a c10d TCPStore (another program on that port?)", s->host,
                        s->port);
  return EM_OK;
}

/* ---------------------------------------------------------------- requests */

typedef struct msg {
  uint8_t small[512];
  uint8_t *p;
  size_t len, cap;
  int failed;
} msg;

static void msg_init(msg *m, uint8_t type) {
  m->p = m->small, m->cap = sizeof m->small, m->len = 0, m->failed = 0;
  m->p[m->len++] = type;
}

static void msg_put(msg *m, const void *data, size_t n) {
  if (m->failed || n == 0) return;
  if (m->len + n > m->cap) {
    size_t cap = (m->len + n) * 2;
    uint8_t *p = m->p == m->small ? malloc(cap) : realloc(m->p, cap);
    if (!p) {
      m->failed = 1;
      return;
    }
    if (m->p == m->small) memcpy(p, m->small, m->len);
    m->p = p, m->cap = cap;
  }
  memcpy(m->p + m->len, data, n);
  m->len += n;
}

static void msg_u64(msg *m, uint64_t v) { msg_put(m, &v, 8); }
static void msg_bytes(msg *m, const void *data, size_t n) {
  msg_u64(m, n);
  msg_put(m, data, n);
}
static void msg_key(msg *m, const char *key) {
  size_t n = strlen(key);
  msg_u64(m, n + 1);
  msg_put(m, "/", 1);
  msg_put(m, key, n);
}

static em_status msg_send(em_dist_store *s, const char *op, msg *m) {
  em_status st = m->failed ? em_set_error(EM_ERR_MEMORY, "%s: out of memory", op) : send_all(s, op, m->p, m->len);
  if (m->p != m->small) free(m->p);
  return st;
}

static em_status begin(em_dist_store *s, const char *op, const char *key) {
  if (!s) return em_set_error(EM_ERR_ARGUMENT, "%s: no store", op);
  if (key && !*key) return em_set_error(EM_ERR_ARGUMENT, "%s: empty key", op);
  pthread_mutex_lock(&s->lock);
  if (s->broken) {
    pthread_mutex_unlock(&s->lock);
    return em_set_error(EM_ERR_RUNTIME, "%s: the connection to the store at %s:%d failed earlier", op, s->host,
                        s->port);
  }
  return EM_OK;
}

static em_status end(em_dist_store *s, em_status st) {
  pthread_mutex_unlock(&s->lock);
  return st;
}

/* Reads a vector reply: at most cap bytes into buf, the rest dropped; *len the full size. */
static em_status recv_vector(em_dist_store *s, const char *op, void *buf, size_t cap, size_t *len) {
  uint64_t n = 0;
  double deadline = em_clock_monotonic() + s->timeout;
  em_status st = recv_all(s, op, &n, 8, deadline, NULL);
  if (st) return st;
  if (len) *len = (size_t)n;
  size_t take = n < cap ? (size_t)n : cap;
  if (take && (st = recv_all(s, op, buf, take, deadline, NULL))) return st;
  char junk[256];
  for (uint64_t left = n - take; left > 0 && !st;) {
    size_t k = left < sizeof junk ? (size_t)left : sizeof junk;
    st = recv_all(s, op, junk, k, deadline, NULL);
    left -= k;
  }
  return st;
}

static em_status wait_locked(em_dist_store *s, const char *op, int n, const char *const *keys, double timeout_s) {
  msg m;
  msg_init(&m, STORE_WAIT);
  msg_u64(&m, (uint64_t)n);
  for (int i = 0; i < n; i++) msg_key(&m, keys[i]);
  em_status st = msg_send(s, op, &m);
  if (st) return st;
  uint8_t r = 0xff;
  int timed_out = 0;
  if ((st = recv_all(s, op, &r, 1, em_clock_monotonic() + timeout_s, &timed_out))) return st;
  if (!timed_out) {
    if (r == STORE_STOP_WAITING) return EM_OK;
    s->broken = 1;
    return em_set_error(EM_ERR_RUNTIME, "%s: unexpected reply %d from the store at %s:%d", op, r, s->host, s->port);
  }
  /* withdraw the wait; a STOP_WAITING may already be on its way ahead of the answer */
  uint8_t cancel = STORE_CANCEL_WAIT;
  if ((st = send_all(s, op, &cancel, 1))) return st;
  double deadline = em_clock_monotonic() + (s->timeout > 5 ? s->timeout : 5);
  if ((st = recv_all(s, op, &r, 1, deadline, NULL))) return st;
  if (r == STORE_STOP_WAITING && (st = recv_all(s, op, &r, 1, deadline, NULL))) return st;
  char list[300];
  int len = 0;
  for (int i = 0; i < n && len < (int)sizeof list - 40; i++)
    len += snprintf(list + len, sizeof list - len, "%s'%s'", i ? ", " : "", keys[i]);
  if (n > 0 && len >= (int)sizeof list - 40) snprintf(list + len, sizeof list - len, ", ...");
  return em_set_error(EM_ERR_RUNTIME, "%s: timed out after %.3g s waiting for %s at the store at %s:%d", op, timeout_s,
                      list, s->host, s->port);
}

/* ---------------------------------------------------------------- the API */

em_status em_dist_store_open(em_dist_store **out, const char *host, int port, int is_server, double timeout_s) {
  if (!out) return em_set_error(EM_ERR_ARGUMENT, "store: out is NULL");
  *out = NULL;
  if (port < 0 || port > 65535 || (!is_server && port == 0))
    return em_set_error(EM_ERR_ARGUMENT, "store: port %d is not in [%d, 65535]", port, is_server ? 0 : 1);
  if (!(timeout_s > 0)) return em_set_error(EM_ERR_ARGUMENT, "store: expected a timeout > 0 seconds, got %g", timeout_s);
  if (!is_server && (!host || !*host)) return em_set_error(EM_ERR_ARGUMENT, "store: no host to connect to");
  em_dist_store *s = calloc(1, sizeof *s);
  if (!s) return em_set_error(EM_ERR_MEMORY, "store: out of memory");
  s->fd = -1;
  s->timeout = timeout_s;
  pthread_mutex_init(&s->lock, NULL);
  em_status st = EM_OK;
  if (is_server) {
    st = store_server_start(port, &s->server);
    if (!st) port = store_server_port(s->server);
    host = "127.0.0.1"; /* the server listens on every address; its own client takes loopback */
  }
  snprintf(s->host, sizeof s->host, "%s", host);
  s->port = port;
  if (!st) st = connect_store(s, em_clock_monotonic() + timeout_s);
  if (st) {
    em_dist_store_close(s);
    return st;
  }
  *out = s;
  return EM_OK;
}

em_status em_dist_store_clone(em_dist_store **out, const em_dist_store *s) {
  if (!out || !s) return em_set_error(EM_ERR_ARGUMENT, "store.clone: no store");
  return em_dist_store_open(out, s->host, s->port, 0, s->timeout);
}

void em_dist_store_close(em_dist_store *s) {
  if (!s) return;
  if (s->fd >= 0) close(s->fd);
  store_server_stop(s->server);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

int em_dist_store_port(const em_dist_store *s) { return s ? s->port : 0; }

em_status em_dist_store_set(em_dist_store *s, const char *key, const void *value, size_t len) {
  em_status st = begin(s, "store.set", key);
  if (st) return st;
  msg m;
  msg_init(&m, STORE_SET);
  msg_key(&m, key);
  msg_bytes(&m, value, len);
  return end(s, msg_send(s, "store.set", &m));
}

em_status em_dist_store_get(em_dist_store *s, const char *key, void *buf, size_t cap, size_t *len) {
  em_status st = begin(s, "store.get", key);
  if (st) return st;
  if (!(st = wait_locked(s, "store.get", 1, &key, s->timeout))) {
    msg m;
    msg_init(&m, STORE_GET);
    msg_key(&m, key);
    if (!(st = msg_send(s, "store.get", &m))) st = recv_vector(s, "store.get", buf, cap, len);
  }
  return end(s, st);
}

em_status em_dist_store_add(em_dist_store *s, const char *key, int64_t delta, int64_t *value) {
  em_status st = begin(s, "store.add", key);
  if (st) return st;
  msg m;
  msg_init(&m, STORE_ADD);
  msg_key(&m, key);
  msg_u64(&m, (uint64_t)delta);
  int64_t v = 0;
  if (!(st = msg_send(s, "store.add", &m))) st = recv_all(s, "store.add", &v, 8, em_clock_monotonic() + s->timeout, NULL);
  if (!st && value) *value = v;
  return end(s, st);
}

static em_status check_keys(const char *op, int n, const char *const *keys) {
  if (n < 1 || !keys) return em_set_error(EM_ERR_ARGUMENT, "%s: expected at least one key, got %d", op, n);
  for (int i = 0; i < n; i++)
    if (!keys[i] || !*keys[i]) return em_set_error(EM_ERR_ARGUMENT, "%s: key %d is empty", op, i + 1);
  return EM_OK;
}

em_status em_dist_store_wait(em_dist_store *s, int n, const char *const *keys, double timeout_s) {
  em_status st = check_keys("store.wait", n, keys);
  if (st || (st = begin(s, "store.wait", NULL))) return st;
  return end(s, wait_locked(s, "store.wait", n, keys, timeout_s > 0 ? timeout_s : s->timeout));
}

em_status em_dist_store_check(em_dist_store *s, int n, const char *const *keys, int *ready) {
  em_status st = check_keys("store.check", n, keys);
  if (st || (st = begin(s, "store.check", NULL))) return st;
  msg m;
  msg_init(&m, STORE_CHECK);
  msg_u64(&m, (uint64_t)n);
  for (int i = 0; i < n; i++) msg_key(&m, keys[i]);
  uint8_t r = 1;
  if (!(st = msg_send(s, "store.check", &m)))
    st = recv_all(s, "store.check", &r, 1, em_clock_monotonic() + s->timeout, NULL);
  if (!st && ready) *ready = r == STORE_READY;
  return end(s, st);
}

em_status em_dist_store_delete(em_dist_store *s, const char *key, int *deleted) {
  em_status st = begin(s, "store.delete", key);
  if (st) return st;
  msg m;
  msg_init(&m, STORE_DELETE_KEY);
  msg_key(&m, key);
  int64_t v = 0;
  if (!(st = msg_send(s, "store.delete", &m)))
    st = recv_all(s, "store.delete", &v, 8, em_clock_monotonic() + s->timeout, NULL);
  if (!st && deleted) *deleted = v > 0;
  return end(s, st);
}

em_status em_dist_store_num_keys(em_dist_store *s, int64_t *n) {
  em_status st = begin(s, "store.num_keys", NULL);
  if (st) return st;
  uint8_t q = STORE_GETNUMKEYS;
  int64_t v = 0;
  if (!(st = send_all(s, "store.num_keys", &q, 1)))
    st = recv_all(s, "store.num_keys", &v, 8, em_clock_monotonic() + s->timeout, NULL);
  if (!st && n) *n = v;
  return end(s, st);
}
