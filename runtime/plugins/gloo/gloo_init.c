/* gloo_init.c - the Gloo backend's table: starting the world, groups, shutdown.
 *
 * Start (dist.init with backend 'gloo', or 'auto' under torchrun-style variables):
 *   1. RANK, WORLD_SIZE, LOCAL_RANK (or another launcher's), MASTER_ADDR, MASTER_PORT.
 *   2. The store: under torchrun (TORCHELASTIC_USE_AGENT_STORE=True) the agent's, which
 *      every rank joins as a client; otherwise rank 0 hosts one at MASTER_PORT (as PyTorch
 *      does) and the others connect, retrying until the timeout.
 *   3. Rendezvous checks in the store: each rank claims its RANK (a second claimant is an
 *      error naming both processes), compares WORLD_SIZE with rank 0's, and all wait until
 *      WORLD_SIZE ranks have come (else the error lists the missing ones). An error found by
 *      one rank is written to the store, and every rank fails dist.init with it.
 *   4. Gloo's TCP device on the address this host reaches MASTER_ADDR from (or the
 *      interface GLOO_SOCKET_IFNAME), and the world's context, connected through the store.
 *   5. The heartbeat monitor (gloo_health.c) and the communication threads (gloo_run.c).
 * Keys live under "ember/<restart count>/<init count>/", so a restarted torchrun attempt,
 * or a second dist.init in one process, never reads stale ones.
 *
 * End: a clean exit finishes the queued work, marks this rank finished and, on the rank
 * hosting the store, waits until every rank has finished (they may still need the store).
 * A non-zero exit status ends the job: the others read the notice and exit with it. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "gloo_impl.h"

#define DEFAULT_PORT 29500
#define ERROR_LINGER_S 2.0

gl_state G = {.groups_lock = PTHREAD_MUTEX_INITIALIZER};
static int init_count;

/* ---------------------------------------------------------------- environment */

static em_status env_int(const char *name, int fallback, long lo, long hi, int *out) {
  const char *v = getenv(name);
  *out = fallback;
  if (!v || !*v) return EM_OK;
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (*end || errno || x < lo || x > hi)
    return em_set_error(EM_ERR_ARGUMENT, "dist.init: %s='%s' is not an integer in [%ld, %ld]", name, v, lo, hi);
  *out = (int)x;
  return EM_OK;
}

/* The address of this host on the route to host (a UDP "connection" sends nothing). */
static void local_address(const char *host, char *ip, size_t cap) {
  snprintf(ip, cap, "127.0.0.1");
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  if (getaddrinfo(host, "9", &hints, &res) || !res) return;
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in me;
  socklen_t len = sizeof me;
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 && getsockname(fd, (struct sockaddr *)&me, &len) == 0)
    inet_ntop(AF_INET, &me.sin_addr, ip, (socklen_t)cap);
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
}

static int truthy(const char *v) { return v && (!strcmp(v, "True") || !strcmp(v, "true") || !strcmp(v, "1")); }

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------- rendezvous */

static int key_present(const char *key) {
  int ready = 0;
  return !em_dist_store_check(G.store, 1, &key, &ready) && ready;
}

/* The value of key as a string ("" when absent or unreadable). */
static void read_text(const char *key, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  if (!key_present(key) || em_dist_store_get(G.store, key, buf, cap - 1, &len)) return;
  buf[len < cap ? len : cap - 1] = 0;
}

/* A rendezvous error: written for every rank to read; the host waits until they have. */
static em_status fail_rendezvous(const char *msg, int publish) {
  char key[160];
  if (publish) {
    gl_key(key, sizeof key, "init/error");
    em_dist_store_set(G.store, key, msg, strlen(msg));
  }
  if (G.hosting) {
    char seen[160];
    gl_key(key, sizeof key, "init/arrived");
    gl_key(seen, sizeof seen, "init/error_seen");
    double until = em_clock_monotonic() + ERROR_LINGER_S;
    int64_t arrived = 0, n = 0;
    while (em_clock_monotonic() < until && !em_dist_store_add(G.store, key, 0, &arrived) &&
           !em_dist_store_add(G.store, seen, 0, &n) && n < arrived - 1)
      sleep_s(0.02);
  } else {
    gl_key(key, sizeof key, "init/error_seen");
    em_dist_store_add(G.store, key, 1, NULL);
  }
  return em_set_error(EM_ERR_RUNTIME, "%s", msg);
}

static em_status rendezvous(double deadline) {
  char key[160], me[160], msg[EM_DIST_MSG], text[EM_DIST_MSG];
  int64_t v = 0;
  snprintf(me, sizeof me, "pid %d on %s", (int)getpid(), G.host);
  gl_key(key, sizeof key, "init/arrived");
  em_status st = em_dist_store_add(G.store, key, 1, NULL);
  gl_key(key, sizeof key, "init/claim/%d", G.rank);
  if (!st) st = em_dist_store_add(G.store, key, 1, &v);
  if (st) return em_set_error(st, "dist.init: rendezvous at %s: %s", G.master, em_last_error());
  if (v > 1) { /* somebody has this RANK already */
    gl_key(key, sizeof key, "init/who/%d", G.rank);
    for (int i = 0; i < 50 && !key_present(key); i++) sleep_s(0.02);
    read_text(key, text, sizeof text);
    snprintf(msg, sizeof msg,
             "dist.init: RANK=%d is claimed by two processes: %s and %s (each process needs its own RANK in [0, "
             "WORLD_SIZE=%d))",
             G.rank, text[0] ? text : "another process", me, G.size);
    return fail_rendezvous(msg, 1);
  }
  gl_key(key, sizeof key, "init/who/%d", G.rank);
  em_dist_store_set(G.store, key, me, strlen(me));
  snprintf(text, sizeof text, "%d %s", (int)getpid(), G.host);
  gl_key(key, sizeof key, "pid/%d", G.rank);
  em_dist_store_set(G.store, key, text, strlen(text));
  if (G.rank == 0) {
    snprintf(text, sizeof text, "%d %s", G.size, me);
    gl_key(key, sizeof key, "init/world");
    em_dist_store_set(G.store, key, text, strlen(text));
  }
  /* A rank counts itself only once it has checked its WORLD_SIZE against rank 0's, so that a
   * full count means every rank agreed: rank 0 cannot go on into Gloo's connection with a
   * rank that is about to refuse the world. */
  int world_checked = G.rank == 0, counted = 0;
  char count_key[160], error_key[160], world_key[160];
  gl_key(count_key, sizeof count_key, "init/count");
  gl_key(error_key, sizeof error_key, "init/error");
  gl_key(world_key, sizeof world_key, "init/world");
  for (;;) {
    if (key_present(error_key)) {
      read_text(error_key, msg, sizeof msg);
      return fail_rendezvous(msg, 0);
    }
    if (!world_checked && key_present(world_key)) {
      int w0 = 0;
      char who[160] = "";
      read_text(world_key, text, sizeof text);
      sscanf(text, "%d %159[^\n]", &w0, who);
      if (w0 != G.size) {
        snprintf(msg, sizeof msg,
                 "dist.init: WORLD_SIZE differs between ranks: rank 0 (%s) has WORLD_SIZE=%d, rank %d (%s) has "
                 "WORLD_SIZE=%d",
                 who, w0, G.rank, me, G.size);
        return fail_rendezvous(msg, 1);
      }
      world_checked = 1;
    }
    if (world_checked && !counted) {
      if ((st = em_dist_store_add(G.store, count_key, 1, NULL)))
        return em_set_error(st, "dist.init: %s", em_last_error());
      counted = 1;
    }
    if ((st = em_dist_store_add(G.store, count_key, 0, &v)))
      return em_set_error(st, "dist.init: rendezvous at %s: %s", G.master, em_last_error());
    if (v >= G.size && world_checked) return EM_OK;
    if (em_clock_monotonic() > deadline) {
      int n = snprintf(msg, sizeof msg,
                       "dist.init: rendezvous at MASTER_ADDR:MASTER_PORT = %s timed out after %.3g s: %lld of "
                       "WORLD_SIZE=%d ranks came; missing rank",
                       G.master, G.timeout, (long long)v, G.size);
      int listed = 0;
      for (int r = 0; r < G.size && n < (int)sizeof msg - 80; r++) {
        gl_key(key, sizeof key, "init/who/%d", r);
        if (!key_present(key))
          n += snprintf(msg + n, sizeof msg - n, "%s %d", listed++ ? "," : (G.size - v > 1 ? "s" : ""), r);
      }
      snprintf(msg + n, sizeof msg - n, " (not started, or started with another MASTER_ADDR/MASTER_PORT?)");
      return fail_rendezvous(msg, 1);
    }
    sleep_s(0.02);
  }
}

/* ---------------------------------------------------------------- groups */

static void register_group(gl_group *g) {
  pthread_mutex_lock(&G.groups_lock);
  g->next = G.groups;
  G.groups = g;
  pthread_mutex_unlock(&G.groups_lock);
}

static em_status connect_group(gl_group *g, const char *op) {
  char prefix[160], err[EM_DIST_MSG] = "";
  gl_key(prefix, sizeof prefix, "gloo/%d/", g->id);
  if (glx_context_connect(G.dev, G.store, prefix, g->rank, g->size, G.timeout, &g->ctx, err, sizeof err))
    return em_set_error(EM_ERR_RUNTIME, "%s: connecting Gloo's %s (rank %d of %d) failed: %s", op,
                        g->id ? "subgroup" : "world", g->rank, g->size, err);
  return EM_OK;
}

static em_status gloo_new_group(void *parent_impl, int id, int n, const int *ranks, void **impl, int *rank) {
  gl_group *parent = parent_impl, *g = calloc(1, sizeof *g);
  if (!g || !(g->world_ranks = malloc(sizeof(int) * n))) {
    free(g);
    return em_set_error(EM_ERR_MEMORY, "new_group: out of memory");
  }
  g->id = id, g->size = n, g->rank = -1;
  int me = parent->world_ranks[parent->rank];
  for (int i = 0; i < n; i++) {
    g->world_ranks[i] = parent->world_ranks[ranks[i]];
    if (g->world_ranks[i] == me) g->rank = i;
  }
  em_status st = g->rank >= 0 ? connect_group(g, "new_group") : EM_OK;
  if (st) {
    free(g->world_ranks);
    free(g);
    return st;
  }
  register_group(g);
  *impl = g;
  *rank = g->rank;
  return EM_OK;
}

static void gloo_free_group(void *impl) {
  gl_group *g = impl;
  pthread_mutex_lock(&G.groups_lock);
  for (gl_group **p = &G.groups; *p; p = &(*p)->next)
    if (*p == g) {
      *p = g->next;
      break;
    }
  pthread_mutex_unlock(&G.groups_lock);
  glx_context_free(g->ctx);
  free(g->world_ranks);
  free(g);
}

/* ---------------------------------------------------------------- init */

static em_status open_store(const char *addr, int port, int agent, double timeout_s) {
  em_status st;
  if (agent) {
    if ((st = em_dist_store_open(&G.store, addr, port, 0, timeout_s)))
      return em_set_error(st, "dist.init: rank %d could not join torchrun's store at MASTER_ADDR:MASTER_PORT = %s: %s",
                          G.rank, G.master, em_last_error());
  } else if (G.rank == 0) {
    if ((st = em_dist_store_open(&G.store, NULL, port, 1, timeout_s)))
      return em_set_error(st,
                          "dist.init: rank 0 cannot host the store at MASTER_ADDR:MASTER_PORT = %s: %s (under torchrun, "
                          "TORCHELASTIC_USE_AGENT_STORE=True makes the ranks join the launcher's store instead)",
                          G.master, em_last_error());
    G.hosting = 1;
  } else if ((st = em_dist_store_open(&G.store, addr, port, 0, timeout_s))) {
    return em_set_error(st,
                        "dist.init: rank %d could not reach rank 0's store at MASTER_ADDR:MASTER_PORT = %s within "
                        "%.3g s (is rank 0 running? MASTER_ADDR and MASTER_PORT must be the same on every rank, and "
                        "rank 0's address reachable from here): %s",
                        G.rank, G.master, timeout_s, em_last_error());
  }
  return EM_OK;
}

static void release_all(void) {
  pthread_mutex_lock(&G.groups_lock);
  for (gl_group *g = G.groups; g; g = g->next) {
    glx_context_free(g->ctx);
    g->ctx = NULL;
  }
  pthread_mutex_unlock(&G.groups_lock);
  if (G.world) {
    gloo_free_group(G.world);
    G.world = NULL;
  }
  glx_device_free(G.dev);
  G.dev = NULL;
  em_dist_store_close(G.store);
  G.store = NULL;
  G.hosting = 0;
}

static em_status gloo_init(double timeout_s, int *rank, int *size, int *local_rank, void **world_impl) {
  em_dist_env env;
  em_dist_env_detect(&env);
  G.rank = env.rank, G.size = env.world_size, G.local_rank = env.local_rank;
  G.timeout = timeout_s;
  atomic_store(&G.aborting, 0);
  if (gethostname(G.host, sizeof G.host - 1)) snprintf(G.host, sizeof G.host, "?");
  if (G.rank >= G.size)
    return em_set_error(EM_ERR_ARGUMENT, "dist.init: RANK=%d is outside [0, WORLD_SIZE=%d)", G.rank, G.size);
  const char *addr = getenv("MASTER_ADDR");
  int port = 0;
  em_status st = env_int("MASTER_PORT", G.size > 1 ? DEFAULT_PORT : 0, 1, 65535, &port);
  if (st) return st;
  if (G.size > 1 && (!addr || !*addr || !getenv("MASTER_PORT")))
    return em_set_error(EM_ERR_ARGUMENT,
                        "dist.init: backend 'gloo' needs MASTER_ADDR and MASTER_PORT for %d ranks (torchrun sets them; "
                        "set them to the address and a free port of the host running rank 0)",
                        G.size);
  if (!addr || !*addr) addr = "127.0.0.1";
  snprintf(G.master, sizeof G.master, "%s:%d", addr, port);
  int agent = truthy(getenv("TORCHELASTIC_USE_AGENT_STORE"));
  const char *attempt = getenv("TORCHELASTIC_RESTART_COUNT");
  snprintf(G.prefix, sizeof G.prefix, "ember/%s/%d/", attempt && *attempt ? attempt : "0", init_count++);
  double deadline = em_clock_monotonic() + timeout_s;
  if ((st = open_store(addr, port, agent, timeout_s))) return st;
  if (G.hosting) snprintf(G.master, sizeof G.master, "%s:%d", addr, em_dist_store_port(G.store));
  if ((st = rendezvous(deadline))) {
    release_all();
    return st;
  }
  char ip[64], err[EM_DIST_MSG] = "";
  const char *iface = getenv("GLOO_SOCKET_IFNAME");
  local_address(addr, ip, sizeof ip);
  if (glx_device_new(ip, iface, &G.dev, err, sizeof err)) {
    st = em_set_error(EM_ERR_RUNTIME, "dist.init: Gloo's TCP device on %s%s failed: %s", iface && *iface ? "interface " : "",
                      iface && *iface ? iface : ip, err);
    release_all();
    return st;
  }
  gl_group *w = calloc(1, sizeof *w);
  if (!w || !(w->world_ranks = malloc(sizeof(int) * G.size))) {
    free(w);
    release_all();
    return em_set_error(EM_ERR_MEMORY, "dist.init: out of memory");
  }
  w->id = 0, w->rank = G.rank, w->size = G.size;
  for (int i = 0; i < G.size; i++) w->world_ranks[i] = i;
  if ((st = connect_group(w, "dist.init"))) {
    free(w->world_ranks);
    free(w);
    release_all();
    return st;
  }
  register_group(w);
  G.world = w;
  if ((st = gl_health_start()) || (st = gl_run_start())) {
    gl_health_stop(0);
    release_all();
    return st;
  }
  *rank = G.rank, *size = G.size, *local_rank = G.local_rank;
  *world_impl = w;
  return EM_OK;
}

/* ---------------------------------------------------------------- the end */

static void gloo_shutdown(int exit_status) {
  if (!G.store) return;
  if (exit_status) gl_abort_job(NULL, exit_status);
  gl_run_stop();
  gl_health_stop(1);
  gl_wait_for_ranks();
  release_all();
}

static void gloo_abort_job(const char *message, int exit_status) { gl_abort_job(message, exit_status); }

static void gloo_note_seq(void *group_impl, int64_t seq, int completed) {
  gl_group *g = group_impl;
  if (completed) atomic_store(&g->completed, seq);
  else atomic_store(&g->posted, seq);
}

static const em_dist_backend gloo_backend = {
    .name = "gloo",
    .init = gloo_init,
    .new_group = gloo_new_group,
    .free_group = gloo_free_group,
    .post = gl_post,
    .shutdown = gloo_shutdown,
    .abort_job = gloo_abort_job,
    .progress = NULL, /* the communication thread completes works; waiters sleep */
    .run_direct = gl_run_direct,
    .attach = NULL, /* a CPU backend: init and new_group number the ranks */
    .note_seq = gloo_note_seq,
    .report_timeout = gl_report_timeout,
};

/* The layout this plugin was built with, checked by libember before it uses the table. */
static const em_plugin_abi_item abi_items[] = {EM_DIST_PLUGIN_ABI(EM_PLUGIN_ABI_ITEM)};
static const em_dist_plugin plugin = {.abi = EM_PLUGIN_ABI_OF(abi_items), .backend = &gloo_backend};

__attribute__((visibility("default"))) const em_dist_plugin *em_dist_gloo_backend(void) { return &plugin; }
