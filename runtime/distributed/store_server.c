/* store_server.c - a c10d TCPStore server (the protocol: store.c), on one thread of its own.
 *
 * What rank 0 hosts when no launcher runs a store (torchrun's agent runs its own, which the
 * ranks join instead). One poll() loop over the listening socket, the connections and a
 * pipe that asks it to stop. Sockets are non-blocking: a request is handled once all its
 * bytes have arrived, replies wait in a per-connection buffer until the socket takes them,
 * so a slow or stopped client never holds up the others. Keys live in a hash table; a
 * client waiting for keys is answered when the last of them appears (set, add, append,
 * compare_set, multi_set, queue_push). Like torch's libuv server, a connection must
 * VALIDATE (the magic number) before anything else; one that does not is closed. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "distributed/store_impl.h"

#define NBUCKETS 1024
#define MAX_KEY (1 << 20)
#define MAX_VALUE ((uint64_t)1 << 30)
#define MAX_KEYS (1 << 20)

typedef struct item { /* a value, or one element of a queue */
  uint8_t *data;
  size_t len;
  struct item *next;
} item;

typedef struct entry {
  char *key;
  size_t klen;
  item value; /* data NULL with len 0: a key set to an empty value still exists (has) */
  int has; /* the key holds a value */
  item *queue, *queue_tail; /* QUEUE_PUSH/POP */
  int64_t queue_len;
  struct entry *next;
} entry;

typedef struct conn {
  int fd;
  int validated;
  uint8_t *in;
  size_t in_len, in_cap;
  uint8_t *out;
  size_t out_len, out_cap;
  char **wait_keys; /* a WAIT not yet answered */
  size_t *wait_lens;
  int n_wait;
  int dead;
  struct conn *next;
} conn;

struct store_server {
  int listen_fd, wake[2], port;
  pthread_t thread;
  entry *table[NBUCKETS];
  conn *conns;
};

/* ---------------------------------------------------------------- keys */

static size_t hash(const char *k, size_t n) {
  size_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)k[i]) * 1099511628211ull;
  return h % NBUCKETS;
}

static entry *find(store_server *s, const char *k, size_t n, int create) {
  entry **b = &s->table[hash(k, n)];
  for (entry *e = *b; e; e = e->next)
    if (e->klen == n && !memcmp(e->key, k, n)) return e;
  if (!create) return NULL;
  entry *e = calloc(1, sizeof *e);
  if (!e || !(e->key = malloc(n + 1))) {
    free(e);
    return NULL;
  }
  memcpy(e->key, k, n);
  e->key[n] = 0;
  e->klen = n;
  e->next = *b;
  *b = e;
  return e;
}

static int present(store_server *s, const char *k, size_t n) {
  entry *e = find(s, k, n, 0);
  return e && (e->has || e->queue_len > 0);
}

static int64_t num_keys(store_server *s) {
  int64_t n = 0;
  for (int b = 0; b < NBUCKETS; b++)
    for (entry *e = s->table[b]; e; e = e->next) n += e->has;
  return n;
}

static int assign(entry *e, const uint8_t *data, size_t len) {
  uint8_t *p = malloc(len ? len : 1);
  if (!p) return -1;
  if (len) memcpy(p, data, len);
  free(e->value.data);
  e->value.data = p;
  e->value.len = len;
  e->has = 1;
  return 0;
}

/* ---------------------------------------------------------------- replies */

static void put(conn *c, const void *data, size_t n) {
  if (c->dead || n == 0) return;
  if (c->out_len + n > c->out_cap) {
    size_t cap = (c->out_len + n) * 2 + 64;
    uint8_t *p = realloc(c->out, cap);
    if (!p) {
      c->dead = 1;
      return;
    }
    c->out = p, c->out_cap = cap;
  }
  memcpy(c->out + c->out_len, data, n);
  c->out_len += n;
}

static void put_u8(conn *c, uint8_t v) { put(c, &v, 1); }
static void put_i64(conn *c, int64_t v) { put(c, &v, 8); }
static void put_vec(conn *c, const void *data, size_t n) {
  put_i64(c, (int64_t)n);
  put(c, data, n);
}

static void clear_wait(conn *c) {
  for (int i = 0; i < c->n_wait; i++) free(c->wait_keys[i]);
  free(c->wait_keys);
  free(c->wait_lens);
  c->wait_keys = NULL, c->wait_lens = NULL, c->n_wait = 0;
}

/* Answers the waits that key completes; only_one: the first (a queue element). */
static void wake(store_server *s, const char *k, size_t n, int only_one) {
  for (conn *c = s->conns; c; c = c->next) {
    if (!c->n_wait) continue;
    int mine = 0, all = 1;
    for (int i = 0; i < c->n_wait; i++) {
      if (c->wait_lens[i] == n && !memcmp(c->wait_keys[i], k, n)) mine = 1;
      else if (!present(s, c->wait_keys[i], c->wait_lens[i])) all = 0;
    }
    if (!mine || !all) continue;
    clear_wait(c);
    put_u8(c, STORE_STOP_WAITING);
    if (only_one) return;
  }
}

/* ---------------------------------------------------------------- parsing */

typedef struct cursor {
  const uint8_t *p;
  size_t n, off;
  int bad; /* a length beyond the limits: the connection is closed */
} cursor;

static int take(cursor *r, void *out, size_t n) {
  if (r->n - r->off < n) return 0;
  memcpy(out, r->p + r->off, n);
  r->off += n;
  return 1;
}

/* A length-prefixed field in place; 0 when it has not all arrived. */
static int field(cursor *r, const uint8_t **data, size_t *len, uint64_t max) {
  uint64_t n;
  if (!take(r, &n, 8)) return 0;
  if (n > max) {
    r->bad = 1;
    return 0;
  }
  if (r->n - r->off < n) return 0;
  *data = r->p + r->off;
  *len = (size_t)n;
  r->off += (size_t)n;
  return 1;
}

#define KEY(r, k, kl) field(r, (const uint8_t **)&(k), &(kl), MAX_KEY)
#define VALUE(r, v, vl) field(r, &(v), &(vl), MAX_VALUE)

/* Handles one request at r; 1 done, 0 incomplete (or bad: r->bad). */
static int handle(store_server *s, conn *c, cursor *r) {
  uint8_t type;
  const char *k;
  const uint8_t *v, *v2;
  size_t kl, vl, vl2;
  uint64_t count;
  if (!take(r, &type, 1)) return 0;
  if (!c->validated) {
    uint32_t magic;
    if (type != STORE_VALIDATE) return r->bad = 1, 0;
    if (!take(r, &magic, 4)) return 0;
    if (magic != STORE_VALIDATION_MAGIC) return r->bad = 1, 0;
    c->validated = 1;
    return 1;
  }
  switch (type) {
    case STORE_VALIDATE: {
      uint32_t magic;
      return take(r, &magic, 4);
    }
    case STORE_PING: {
      uint32_t nonce;
      if (!take(r, &nonce, 4)) return 0;
      put(c, &nonce, 4);
      return 1;
    }
    case STORE_SET:
    case STORE_APPEND:
    case STORE_QUEUE_PUSH: {
      if (!KEY(r, k, kl) || !VALUE(r, v, vl)) return 0;
      entry *e = find(s, k, kl, 1);
      if (!e) return c->dead = 1, 1;
      if (type == STORE_SET || (type == STORE_APPEND && !e->has)) {
        if (assign(e, v, vl)) c->dead = 1;
      } else if (type == STORE_APPEND) {
        uint8_t *p = realloc(e->value.data, e->value.len + vl + 1);
        if (!p) return c->dead = 1, 1;
        memcpy(p + e->value.len, v, vl);
        e->value.data = p, e->value.len += vl;
      } else {
        item *it = calloc(1, sizeof *it);
        if (!it || !(it->data = malloc(vl ? vl : 1))) return free(it), c->dead = 1, 1;
        memcpy(it->data, v, vl);
        it->len = vl;
        if (e->queue_tail) e->queue_tail->next = it;
        else e->queue = it;
        e->queue_tail = it;
        e->queue_len++;
      }
      wake(s, k, kl, type == STORE_QUEUE_PUSH);
      return 1;
    }
    case STORE_COMPARE_SET: {
      if (!KEY(r, k, kl) || !VALUE(r, v, vl) || !VALUE(r, v2, vl2)) return 0;
      entry *e = find(s, k, kl, 0);
      if (!e || !e->has) {
        if (vl == 0) { /* expected "nothing": set it */
          e = find(s, k, kl, 1);
          if (!e || assign(e, v2, vl2)) return c->dead = 1, 1;
          put_vec(c, v2, vl2);
        } else {
          put_vec(c, v, vl); /* as torch: the expected value comes back */
        }
      } else {
        if (e->value.len == vl && !memcmp(e->value.data, v, vl) && assign(e, v2, vl2)) return c->dead = 1, 1;
        put_vec(c, e->value.data, e->value.len);
      }
      wake(s, k, kl, 0);
      return 1;
    }
    case STORE_GET: {
      if (!KEY(r, k, kl)) return 0;
      entry *e = find(s, k, kl, 0);
      if (e && e->has) put_vec(c, e->value.data, e->value.len);
      else put_vec(c, NULL, 0);
      return 1;
    }
    case STORE_ADD: {
      int64_t delta;
      if (!KEY(r, k, kl) || !take(r, &delta, 8)) return 0;
      entry *e = find(s, k, kl, 1);
      if (!e) return c->dead = 1, 1;
      if (e->has) {
        char text[32];
        size_t n = e->value.len < sizeof text - 1 ? e->value.len : sizeof text - 1;
        if (n) memcpy(text, e->value.data, n);
        text[n] = 0;
        delta += strtoll(text, NULL, 10);
      }
      char text[32];
      int n = snprintf(text, sizeof text, "%lld", (long long)delta);
      if (assign(e, (const uint8_t *)text, (size_t)n)) return c->dead = 1, 1;
      put_i64(c, delta);
      wake(s, k, kl, 0);
      return 1;
    }
    case STORE_CHECK:
    case STORE_WAIT:
    case STORE_MULTI_GET: {
      if (!take(r, &count, 8)) return 0;
      if (count > MAX_KEYS) return r->bad = 1, 0;
      size_t start = r->off; /* first pass: every key has arrived */
      for (uint64_t i = 0; i < count; i++)
        if (!KEY(r, k, kl)) return 0;
      r->off = start;
      int all = 1;
      if (type == STORE_WAIT) {
        clear_wait(c);
        c->wait_keys = calloc(count ? count : 1, sizeof(char *));
        c->wait_lens = calloc(count ? count : 1, sizeof(size_t));
        if (!c->wait_keys || !c->wait_lens) return c->dead = 1, 1;
      }
      for (uint64_t i = 0; i < count; i++) {
        KEY(r, k, kl);
        if (type == STORE_MULTI_GET) {
          entry *e = find(s, k, kl, 0);
          if (e && e->has) put_vec(c, e->value.data, e->value.len);
          else put_vec(c, NULL, 0);
          continue;
        }
        if (present(s, k, kl)) continue;
        all = 0;
        if (type == STORE_WAIT) {
          char *copy = malloc(kl + 1);
          if (!copy) return c->dead = 1, 1;
          memcpy(copy, k, kl);
          c->wait_keys[c->n_wait] = copy;
          c->wait_lens[c->n_wait++] = kl;
        }
      }
      if (type == STORE_CHECK) put_u8(c, all ? STORE_READY : STORE_NOT_READY);
      if (type == STORE_WAIT && all) {
        clear_wait(c);
        put_u8(c, STORE_STOP_WAITING);
      }
      return 1;
    }
    case STORE_MULTI_SET: {
      if (!take(r, &count, 8)) return 0;
      if (count > MAX_KEYS) return r->bad = 1, 0;
      size_t start = r->off;
      for (uint64_t i = 0; i < count; i++)
        if (!KEY(r, k, kl) || !VALUE(r, v, vl)) return 0;
      r->off = start;
      for (uint64_t i = 0; i < count; i++) {
        KEY(r, k, kl);
        VALUE(r, v, vl);
        entry *e = find(s, k, kl, 1);
        if (!e || assign(e, v, vl)) return c->dead = 1, 1;
        wake(s, k, kl, 0);
      }
      return 1;
    }
    case STORE_GETNUMKEYS: put_i64(c, num_keys(s)); return 1;
    case STORE_DELETE_KEY: {
      if (!KEY(r, k, kl)) return 0;
      entry *e = find(s, k, kl, 0);
      int had = e && e->has;
      if (had) {
        free(e->value.data);
        e->value.data = NULL, e->value.len = 0, e->has = 0;
      }
      put_i64(c, had);
      return 1;
    }
    case STORE_CANCEL_WAIT:
      clear_wait(c);
      put_u8(c, STORE_WAIT_CANCELED);
      return 1;
    case STORE_QUEUE_POP:
    case STORE_QUEUE_LEN: {
      if (!KEY(r, k, kl)) return 0;
      entry *e = find(s, k, kl, 0);
      int64_t n = e ? e->queue_len : 0;
      put_i64(c, n);
      if (type == STORE_QUEUE_POP && n > 0) {
        item *it = e->queue;
        put_vec(c, it->data, it->len);
        e->queue = it->next;
        if (!e->queue) e->queue_tail = NULL;
        e->queue_len--;
        free(it->data);
        free(it);
      }
      return 1;
    }
    default: r->bad = 1; return 0;
  }
}

/* ---------------------------------------------------------------- connections */

static void close_conn(store_server *s, conn *c) {
  for (conn **p = &s->conns; *p; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      break;
    }
  close(c->fd);
  clear_wait(c);
  free(c->in);
  free(c->out);
  free(c);
}

static void read_conn(store_server *s, conn *c) {
  for (;;) {
    if (c->in_cap - c->in_len < 4096) {
      size_t cap = c->in_cap * 2 + 8192;
      uint8_t *p = realloc(c->in, cap);
      if (!p) {
        c->dead = 1;
        return;
      }
      c->in = p, c->in_cap = cap;
    }
    ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      c->dead = 1;
      return;
    }
    c->in_len += (size_t)n;
  }
  cursor r = {c->in, c->in_len, 0, 0};
  while (!c->dead) {
    size_t at = r.off;
    if (!handle(s, c, &r)) {
      r.off = at;
      break;
    }
  }
  if (r.bad) c->dead = 1;
  memmove(c->in, c->in + r.off, c->in_len - r.off);
  c->in_len -= r.off;
}

static void write_conn(conn *c) {
  size_t done = 0;
  while (done < c->out_len) {
    ssize_t n = send(c->fd, c->out + done, c->out_len - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      c->dead = 1;
      return;
    }
    done += (size_t)n;
  }
  memmove(c->out, c->out + done, c->out_len - done);
  c->out_len -= done;
}

static void *serve(void *arg) {
  store_server *s = arg;
  struct pollfd *pf = NULL;
  conn **who = NULL;
  size_t cap = 0;
  for (;;) {
    size_t n = 2;
    for (conn *c = s->conns; c; c = c->next) n++;
    if (n > cap) {
      cap = n * 2;
      struct pollfd *p = realloc(pf, cap * sizeof *pf);
      conn **w = realloc(who, cap * sizeof *who);
      if (p) pf = p;
      if (w) who = w;
      if (!p || !w) break;
    }
    pf[0] = (struct pollfd){s->wake[0], POLLIN, 0};
    pf[1] = (struct pollfd){s->listen_fd, POLLIN, 0};
    n = 2;
    for (conn *c = s->conns; c; c = c->next) {
      who[n] = c;
      pf[n++] = (struct pollfd){c->fd, (short)(POLLIN | (c->out_len ? POLLOUT : 0)), 0};
    }
    if (poll(pf, n, -1) < 0 && errno != EINTR) break;
    if (pf[0].revents) break; /* stop */
    for (size_t i = 2; i < n; i++) {
      conn *c = who[i];
      if (pf[i].revents & (POLLIN | POLLHUP | POLLERR)) read_conn(s, c);
      if (c->out_len && !c->dead) write_conn(c);
    }
    /* replies that other connections' requests produced (wake) go out now */
    for (conn *c = s->conns, *next; c; c = next) {
      next = c->next;
      if (c->out_len && !c->dead) write_conn(c);
      if (c->dead) close_conn(s, c);
    }
    if (pf[1].revents & POLLIN) {
      int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
      conn *c = fd >= 0 ? calloc(1, sizeof *c) : NULL;
      if (c) {
        c->fd = fd;
        c->next = s->conns;
        s->conns = c;
      } else if (fd >= 0) {
        close(fd);
      }
    }
  }
  free(pf);
  free(who);
  return NULL;
}

/* ---------------------------------------------------------------- start, stop */

static int listen_on(int family, int port, int *out_port) {
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  int one = 1, zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  socklen_t len;
  if (family == AF_INET6) {
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero); /* IPv4 clients too */
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_any;
    a->sin6_port = htons((uint16_t)port);
    len = sizeof *a;
  } else {
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_ANY);
    a->sin_port = htons((uint16_t)port);
    len = sizeof *a;
  }
  if (bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 1024) < 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  len = sizeof ss;
  getsockname(fd, (struct sockaddr *)&ss, &len);
  *out_port = ntohs(family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port : ((struct sockaddr_in *)&ss)->sin_port);
  return fd;
}

em_status store_server_start(int port, store_server **out) {
  *out = NULL;
  store_server *s = calloc(1, sizeof *s);
  if (!s) return em_set_error(EM_ERR_MEMORY, "store: out of memory");
  s->wake[0] = s->wake[1] = -1;
  s->listen_fd = listen_on(AF_INET6, port, &s->port);
  if (s->listen_fd < 0 && errno != EADDRINUSE) s->listen_fd = listen_on(AF_INET, port, &s->port);
  if (s->listen_fd < 0) {
    int e = errno;
    free(s);
    return em_set_error(EM_ERR_IO, "store: cannot listen at port %d: %s%s", port, strerror(e),
                        e == EADDRINUSE ? " (another job, or a launcher's own store, on that port?)" : "");
  }
  if (pipe2(s->wake, O_CLOEXEC) || pthread_create(&s->thread, NULL, serve, s)) {
    int e = errno;
    close(s->listen_fd);
    if (s->wake[0] >= 0) close(s->wake[0]), close(s->wake[1]);
    free(s);
    return em_set_error(EM_ERR_RUNTIME, "store: cannot start the server thread: %s", strerror(e));
  }
  *out = s;
  return EM_OK;
}

int store_server_port(const store_server *s) { return s ? s->port : 0; }

void store_server_stop(store_server *s) {
  if (!s) return;
  char b = 1;
  if (write(s->wake[1], &b, 1) < 0) { /* the thread then never wakes: leave it */
  }
  pthread_join(s->thread, NULL);
  while (s->conns) close_conn(s, s->conns);
  for (int b2 = 0; b2 < NBUCKETS; b2++)
    for (entry *e = s->table[b2], *next; e; e = next) {
      next = e->next;
      for (item *it = e->queue, *n2; it; it = n2) {
        n2 = it->next;
        free(it->data);
        free(it);
      }
      free(e->value.data);
      free(e->key);
      free(e);
    }
  close(s->listen_fd);
  close(s->wake[0]);
  close(s->wake[1]);
  free(s);
}
