/* tcp_backend.c - the tcp backend's table, and the rendezvous that starts a torchrun-style
 * job without MPI:
 *
 *   RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 ember train.lua &
 *   RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 ember train.lua
 *
 * Rank 0 listens at MASTER_ADDR:MASTER_PORT (that address only) with a ROUTER socket; every
 * other rank connects with a DEALER socket and registers: its rank, world size, job id
 * (EMBER_DIST_JOB or TORCHELASTIC_RUN_ID), pid, host and the data endpoint it has bound (on
 * the address it reaches the master from). Once all WORLD_SIZE ranks are there, rank 0
 * answers each with every rank's endpoint; then the ranks connect to each other
 * (tcp_thread.c). Whatever is wrong (world sizes that differ, a rank claimed twice, ranks
 * that never come, a master nobody answers at) fails dist.init on every rank that got that
 * far, with the variables and values in the message. Rank 0 keeps listening for the job's
 * life and turns latecomers away with an explanation.
 *
 * Everything runs within the group's timeout (EMBER_DIST_TIMEOUT or dist.init{timeout}). */
#define _GNU_SOURCE
#include "distributed/dist_impl.h"
#ifdef EMBER_HAVE_ZMQ
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>
#include "distributed/tcp_impl.h"
#include "plugins/plugin_api.h"

#define ENDPOINT_CAP 160
#define RDV_MAGIC 0x454d4252u /* "EMBR" */
#define DEFAULT_PORT 29500
#define LATE_ANSWER_GRACE_S 3.0

typedef struct hello {
  uint32_t magic;
  int32_t rank, world, pid;
  char job[64], host[64], endpoint[ENDPOINT_CAP];
} hello;

typedef struct welcome {
  uint32_t magic;
  int32_t ok;
  char error[640];
  /* ok: followed by world endpoints of ENDPOINT_CAP bytes */
} welcome;

static int started_once;

/* ---------------------------------------------------------------- environment */

static em_status env_int(const char *name, int required, int fallback, long lo, long hi, int *out) {
  const char *v = getenv(name);
  if (!v || !*v) {
    if (required)
      return em_set_error(EM_ERR_ARGUMENT,
                          "dist.init: backend 'tcp' needs %s (torchrun-style: RANK, "
                          "WORLD_SIZE, MASTER_ADDR, MASTER_PORT); it is not set",
                          name);
    *out = fallback;
    return EM_OK;
  }
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (*end || errno || x < lo || x > hi)
    return em_set_error(EM_ERR_ARGUMENT, "dist.init: %s='%s' is not an integer in [%ld, %ld]", name, v, lo, hi);
  *out = (int)x;
  return EM_OK;
}

/* MASTER_ADDR as a dotted IPv4 address; local: the address this host reaches it from. */
static em_status resolve_master(const char *addr, int port, char *ip, size_t cap, char *local, size_t lcap) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  int rc = getaddrinfo(addr, NULL, &hints, &res);
  if (rc || !res)
    return em_set_error(EM_ERR_ARGUMENT, "dist.init: MASTER_ADDR='%s' does not resolve to an IPv4 address (%s)", addr,
                        rc ? gai_strerror(rc) : "no address");
  struct sockaddr_in sa = *(struct sockaddr_in *)res->ai_addr;
  freeaddrinfo(res);
  sa.sin_port = htons((uint16_t)port);
  inet_ntop(AF_INET, &sa.sin_addr, ip, (socklen_t)cap);
  /* a UDP "connection" sends nothing; it only asks the kernel for the route's source address */
  snprintf(local, lcap, "%s", ip);
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    struct sockaddr_in me;
    socklen_t len = sizeof me;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && getsockname(fd, (struct sockaddr *)&me, &len) == 0)
      inet_ntop(AF_INET, &me.sin_addr, local, (socklen_t)lcap);
    close(fd);
  }
  return EM_OK;
}

static void job_id(char *buf, size_t cap) {
  const char *j = getenv("EMBER_DIST_JOB");
  if (!j || !*j) j = getenv("TORCHELASTIC_RUN_ID");
  snprintf(buf, cap, "%s", j ? j : "");
}

/* ---------------------------------------------------------------- rank 0 */

static void reply(void *router, const void *id, size_t idlen, const void *data, size_t len) {
  zmq_send(router, id, idlen, ZMQ_SNDMORE | ZMQ_DONTWAIT);
  zmq_send(router, data, len, ZMQ_DONTWAIT);
}

static void reply_error(void *router, const void *id, size_t idlen, const char *text) {
  welcome w;
  memset(&w, 0, sizeof w);
  w.magic = RDV_MAGIC;
  snprintf(w.error, sizeof w.error, "%s", text);
  reply(router, id, idlen, &w, sizeof w);
}

/* Receives one registration: 1 and *h, id filled; 0 nothing (or garbage, ignored). */
static int receive_hello(void *router, hello *h, unsigned char *id, size_t *idlen) {
  int n = zmq_recv(router, id, 255, ZMQ_DONTWAIT);
  if (n < 0) return 0;
  *idlen = (size_t)(n > 255 ? 255 : n);
  int more = 0;
  size_t ms = sizeof more;
  zmq_getsockopt(router, ZMQ_RCVMORE, &more, &ms);
  if (!more) return 0;
  int len = zmq_recv(router, h, sizeof *h, 0);
  for (;;) { /* drop anything further */
    zmq_getsockopt(router, ZMQ_RCVMORE, &more, &ms);
    if (!more) break;
    char junk[64];
    zmq_recv(router, junk, sizeof junk, 0);
  }
  if (len != (int)sizeof *h || h->magic != RDV_MAGIC) {
    reply_error(router, id, *idlen, "dist.init: not an ember rendezvous message (another program on MASTER_PORT?)");
    return 0;
  }
  h->job[sizeof h->job - 1] = h->host[sizeof h->host - 1] = h->endpoint[sizeof h->endpoint - 1] = 0;
  return 1;
}

/* Rank 0, after the start: any registration now comes too late. */
void dist_tcp_rendezvous_refuse(void *router, const char *master, int size) {
  hello h;
  unsigned char id[256];
  size_t idlen = 0;
  while (receive_hello(router, &h, id, &idlen)) {
    char text[640];
    snprintf(
        text, sizeof text,
        "dist.init: rank %d (pid %d on %s) came too late: the job at MASTER_ADDR:MASTER_PORT = %s has "
        "started already with all its WORLD_SIZE=%d ranks (is RANK=%d given to two processes, or is this a process "
        "of another job on the same port?)",
        h.rank, h.pid, h.host, master, size, h.rank);
    reply_error(router, id, idlen, text);
  }
}

typedef struct registrant {
  int present;
  hello h;
  unsigned char id[256];
  size_t idlen;
} registrant;

static em_status gather_ranks(void *router, const hello *mine, int world, double deadline, double timeout,
                              const char *master, char **endpoints) {
  registrant *reg = calloc(world, sizeof *reg);
  if (!reg) return em_set_error(EM_ERR_MEMORY, "dist.init: out of memory");
  reg[0].present = 1;
  reg[0].h = *mine;
  int count = 1;
  char err[640] = "";
  hello h;
  unsigned char id[256];
  size_t idlen = 0;
  while (count < world && !err[0]) {
    if (em_clock_monotonic() > deadline) {
      int len = snprintf(err, sizeof err,
                         "dist.init: rendezvous at MASTER_ADDR:MASTER_PORT = %s timed out after %.3g s: "
                         "%d of WORLD_SIZE=%d ranks came; missing rank",
                         master, timeout, count, world);
      int listed = 0;
      for (int r = 0; r < world && len < (int)sizeof err - 40; r++)
        if (!reg[r].present)
          len += snprintf(err + len, sizeof err - len, "%s %d", listed++ ? "," : (world - count > 1 ? "s" : ""), r);
      snprintf(err + len, sizeof err - len, " (not started, or started with another MASTER_ADDR/MASTER_PORT?)");
      break;
    }
    zmq_pollitem_t it = {router, 0, ZMQ_POLLIN, 0};
    zmq_poll(&it, 1, 100);
    while (!err[0] && receive_hello(router, &h, id, &idlen)) {
      char text[640];
      if (strcmp(h.job, mine->job)) {
        snprintf(text, sizeof text,
                 "dist.init: rank %d (pid %d on %s) belongs to another job: its job id "
                 "(EMBER_DIST_JOB or TORCHELASTIC_RUN_ID) is '%s', rank 0's at %s is '%s'",
                 h.rank, h.pid, h.host, h.job, master, mine->job);
        reply_error(router, id, idlen, text);
        continue;
      }
      if (h.world != world)
        snprintf(err, sizeof err,
                 "dist.init: WORLD_SIZE differs between ranks: rank 0 (pid %d on %s) has WORLD_SIZE=%d, "
                 "rank %d (pid %d on %s) has WORLD_SIZE=%d",
                 mine->pid, mine->host, world, h.rank, h.pid, h.host, h.world);
      else if (h.rank < 0 || h.rank >= world)
        snprintf(err, sizeof err, "dist.init: RANK=%d (pid %d on %s) is outside [0, WORLD_SIZE=%d)", h.rank, h.pid,
                 h.host, world);
      else if (reg[h.rank].present)
        snprintf(err, sizeof err,
                 "dist.init: RANK=%d is claimed by two processes: pid %d on %s and pid %d on %s (each "
                 "process needs its own RANK in [0, WORLD_SIZE=%d))",
                 h.rank, reg[h.rank].h.pid, reg[h.rank].h.host, h.pid, h.host, world);
      if (err[0]) {
        reply_error(router, id, idlen, err);
        break;
      }
      reg[h.rank].present = 1;
      reg[h.rank].h = h;
      memcpy(reg[h.rank].id, id, idlen);
      reg[h.rank].idlen = idlen;
      count++;
    }
  }
  if (err[0]) {
    for (int r = 1; r < world; r++)
      if (reg[r].present) reply_error(router, reg[r].id, reg[r].idlen, err);
    free(reg);
    return em_set_error(EM_ERR_RUNTIME, "%s", err);
  }
  size_t len = sizeof(welcome) + (size_t)world * ENDPOINT_CAP;
  welcome *w = calloc(1, len);
  if (!w) {
    free(reg);
    return em_set_error(EM_ERR_MEMORY, "dist.init: out of memory");
  }
  w->magic = RDV_MAGIC;
  w->ok = 1;
  for (int r = 0; r < world; r++) {
    memcpy((char *)(w + 1) + (size_t)r * ENDPOINT_CAP, reg[r].h.endpoint, ENDPOINT_CAP);
    snprintf(endpoints[r], ENDPOINT_CAP, "%s", reg[r].h.endpoint);
  }
  for (int r = 1; r < world; r++) reply(router, reg[r].id, reg[r].idlen, w, len);
  free(w);
  free(reg);
  return EM_OK;
}

/* ---------------------------------------------------------------- other ranks */

static em_status register_with_master(void *ctx, const char *url, const hello *mine, int world, double deadline,
                                      double timeout, const char *master, char **endpoints) {
  void *dealer = zmq_socket(ctx, ZMQ_DEALER), *mon = zmq_socket(ctx, ZMQ_PAIR);
  int zero = 0, connected = 0;
  em_status st = EM_OK;
  if (!dealer || !mon) return em_set_error(EM_ERR_RUNTIME, "dist.init: %s", zmq_strerror(zmq_errno()));
  zmq_setsockopt(dealer, ZMQ_LINGER, &zero, sizeof zero);
  zmq_setsockopt(mon, ZMQ_LINGER, &zero, sizeof zero);
  if (zmq_socket_monitor(dealer, "inproc://ember-tcp-rendezvous", ZMQ_EVENT_CONNECTED) ||
      zmq_connect(mon, "inproc://ember-tcp-rendezvous") || zmq_connect(dealer, url)) {
    st = em_set_error(EM_ERR_RUNTIME, "dist.init: connecting to MASTER_ADDR:MASTER_PORT = %s: %s", master,
                      zmq_strerror(zmq_errno()));
    goto done;
  }
  zmq_send(dealer, mine, sizeof *mine, ZMQ_DONTWAIT); /* queued until the connection is up */
  size_t len = sizeof(welcome) + (size_t)world * ENDPOINT_CAP;
  welcome *w = malloc(len);
  if (!w) {
    st = em_set_error(EM_ERR_MEMORY, "dist.init: out of memory");
    goto done;
  }
  for (;;) {
    double now = em_clock_monotonic();
    /* once connected, rank 0 is there: give its answer (maybe which ranks are missing) a
     * little longer than our own deadline */
    if (now > deadline + (connected ? LATE_ANSWER_GRACE_S : 0)) {
      if (connected)
        st = em_set_error(EM_ERR_RUNTIME,
                          "dist.init: rank %d reached rank 0 at MASTER_ADDR:MASTER_PORT = %s, but the "
                          "rendezvous did not complete within %.3g s (rank 0 still waits for other ranks)",
                          mine->rank, master, timeout);
      else
        st = em_set_error(EM_ERR_RUNTIME,
                          "dist.init: rank %d could not reach rank 0 at MASTER_ADDR:MASTER_PORT = %s "
                          "within %.3g s (is rank 0 running? MASTER_ADDR and MASTER_PORT must be the same on every "
                          "rank, and rank 0's address reachable from here)",
                          mine->rank, master, timeout);
      break;
    }
    zmq_pollitem_t it[2] = {{dealer, 0, ZMQ_POLLIN, 0}, {mon, 0, ZMQ_POLLIN, 0}};
    zmq_poll(it, 2, 100);
    if (it[1].revents & ZMQ_POLLIN) {
      zmq_msg_t m;
      zmq_msg_init(&m);
      while (zmq_msg_recv(&m, mon, ZMQ_DONTWAIT) >= 0) {
        uint16_t ev = 0;
        if (zmq_msg_size(&m) >= 2) memcpy(&ev, zmq_msg_data(&m), 2);
        if (ev == ZMQ_EVENT_CONNECTED) connected = 1;
        zmq_msg_close(&m);
        zmq_msg_init(&m);
      }
      zmq_msg_close(&m);
    }
    if (!(it[0].revents & ZMQ_POLLIN)) continue;
    int n = zmq_recv(dealer, w, len, 0);
    if (n < (int)sizeof(welcome) || w->magic != RDV_MAGIC) continue;
    if (!w->ok) {
      w->error[sizeof w->error - 1] = 0;
      st = em_set_error(EM_ERR_RUNTIME, "%s", w->error);
      break;
    }
    if (n != (int)len) {
      st = em_set_error(EM_ERR_RUNTIME,
                        "dist.init: rank 0's answer at %s has the wrong size (a different ember build?)", master);
      break;
    }
    for (int r = 0; r < world; r++) {
      memcpy(endpoints[r], (char *)(w + 1) + (size_t)r * ENDPOINT_CAP, ENDPOINT_CAP);
      endpoints[r][ENDPOINT_CAP - 1] = 0;
    }
    break;
  }
  free(w);
done:
  zmq_socket_monitor(dealer, NULL, 0);
  zmq_close(mon);
  zmq_close(dealer);
  return st;
}

/* ---------------------------------------------------------------- init */

static em_status tcp_init(double timeout_s, int *rank, int *size, int *local_rank, void **impl) {
  int r = 0, world = 1, local = 0, port = DEFAULT_PORT;
  em_status st;
  if ((st = env_int("WORLD_SIZE", 1, 1, 1, 1 << 20, &world)) || (st = env_int("RANK", 1, 0, 0, 1 << 20, &r)) ||
      (st = env_int("LOCAL_RANK", 0, 0, 0, 1 << 20, &local)) ||
      (st = env_int("MASTER_PORT", 0, DEFAULT_PORT, 1, 65535, &port)))
    return st;
  if (r >= world) return em_set_error(EM_ERR_ARGUMENT, "dist.init: RANK=%d is outside [0, WORLD_SIZE=%d)", r, world);
  if (started_once) return em_set_error(EM_ERR_RUNTIME, "dist.init: the tcp backend cannot start twice in one process");
  const char *addr = getenv("MASTER_ADDR");
  if (!addr || !*addr) addr = "127.0.0.1";
  char ip[64], local_ip[64], master[160], url[200], ep[ENDPOINT_CAP];
  if ((st = resolve_master(addr, port, ip, sizeof ip, local_ip, sizeof local_ip))) return st;
  snprintf(master, sizeof master, strcmp(addr, ip) ? "%s:%d (%s)" : "%s:%d", addr, port, ip);
  snprintf(url, sizeof url, "tcp://%s:%d", ip, port);
  double deadline = em_clock_monotonic() + timeout_s;

  void *ctx = zmq_ctx_new(), *pull = ctx ? zmq_socket(ctx, ZMQ_PULL) : NULL, *router = NULL;
  char bind_ep[100];
  size_t eplen = sizeof ep;
  int zero = 0;
  snprintf(bind_ep, sizeof bind_ep, "tcp://%s:*", r == 0 ? ip : local_ip);
  if (!pull || zmq_setsockopt(pull, ZMQ_RCVHWM, &zero, sizeof zero) || zmq_bind(pull, bind_ep) ||
      zmq_getsockopt(pull, ZMQ_LAST_ENDPOINT, ep, &eplen)) {
    st = em_set_error(EM_ERR_RUNTIME, "dist.init: rank %d cannot open its data socket at %s: %s", r, bind_ep,
                      zmq_strerror(zmq_errno()));
    goto fail;
  }
  char **endpoints = calloc(world, sizeof(char *));
  char *store = calloc(world, ENDPOINT_CAP);
  if (!endpoints || !store) {
    free(endpoints), free(store);
    st = em_set_error(EM_ERR_MEMORY, "dist.init: out of memory");
    goto fail;
  }
  for (int i = 0; i < world; i++) endpoints[i] = store + (size_t)i * ENDPOINT_CAP;
  snprintf(endpoints[r], ENDPOINT_CAP, "%s", ep);
  hello me;
  memset(&me, 0, sizeof me);
  me.magic = RDV_MAGIC;
  me.rank = r, me.world = world, me.pid = (int)getpid();
  job_id(me.job, sizeof me.job);
  if (gethostname(me.host, sizeof me.host - 1)) snprintf(me.host, sizeof me.host, "?");
  snprintf(me.endpoint, sizeof me.endpoint, "%s", ep);
  if (world > 1 && r == 0) {
    router = zmq_socket(ctx, ZMQ_ROUTER);
    if (!router || zmq_setsockopt(router, ZMQ_LINGER, &zero, sizeof zero) || zmq_bind(router, url)) {
      st = em_set_error(EM_ERR_RUNTIME,
                        "dist.init: rank 0 cannot listen at MASTER_ADDR:MASTER_PORT = %s: %s (another "
                        "job on that port, or two processes with RANK=0?)",
                        master, zmq_strerror(zmq_errno()));
    } else {
      st = gather_ranks(router, &me, world, deadline, timeout_s, master, endpoints);
    }
  } else if (world > 1) {
    st = register_with_master(ctx, url, &me, world, deadline, timeout_s, master, endpoints);
  }
  tcp_group *g = NULL;
  if (!st) {
    tcp_start s = {.ctx = ctx,
                   .pull = pull,
                   .rendezvous = router,
                   .endpoints = endpoints,
                   .rank = r,
                   .size = world,
                   .timeout = timeout_s};
    snprintf(s.master, sizeof s.master, "%s", master);
    started_once = 1;
    st = dist_tcp_thread_start(&s, deadline, &g); /* owns the sockets from here, even on failure */
    ctx = pull = router = NULL;
  }
  free(store);
  free(endpoints);
  if (st) goto fail;
  *rank = r;
  *size = world;
  *local_rank = local;
  *impl = g;
  return EM_OK;
fail:
  if (router) zmq_close(router);
  if (pull) zmq_setsockopt(pull, ZMQ_LINGER, &zero, sizeof zero), zmq_close(pull);
  if (ctx) zmq_ctx_term(ctx);
  return st;
}

/* ---------------------------------------------------------------- groups, table */

static em_status tcp_new_group(void *parent_impl, int id, int n, const int *ranks, void **impl, int *rank) {
  tcp_group *parent = parent_impl, *g = calloc(1, sizeof *g);
  int world = emp_dist_world_group() ? emp_dist_world_group()->size : parent->size;
  if (!g || !(g->world_ranks = malloc(sizeof(int) * n)) || !(g->group_rank = malloc(sizeof(int) * world))) {
    if (g) free(g->world_ranks);
    free(g);
    return em_set_error(EM_ERR_MEMORY, "new_group: out of memory");
  }
  g->id = id, g->size = n, g->rank = -1;
  for (int i = 0; i < world; i++) g->group_rank[i] = -1;
  /* no messages: every rank knows the members, and the id is the same everywhere */
  int me = parent->world_ranks[parent->rank];
  for (int i = 0; i < n; i++) {
    g->world_ranks[i] = parent->world_ranks[ranks[i]];
    g->group_rank[g->world_ranks[i]] = i;
    if (g->world_ranks[i] == me) g->rank = i;
  }
  dist_tcp_register_group(g);
  *impl = g;
  *rank = g->rank;
  return EM_OK;
}

static void tcp_free_group(void *impl) {
  tcp_group *g = impl;
  dist_tcp_unregister_group(g);
  free(g->world_ranks);
  free(g->group_rank);
  free(g);
}

static em_status tcp_post(void *impl, em_dist_work *w) {
  /* refused alike on every rank (the kind alone decides), so nobody waits for a peer */
  if (w->kind >= EM_DIST_OP_ALL_TO_ALL)
    return em_set_error(EM_ERR_UNSUPPORTED, "%s: not supported by backend tcp (use mpi: ember launch or mpirun)",
                        emp_dist_op_name(w->kind));
  return dist_tcp_submit(impl, w);
}

static const em_dist_backend tcp_backend = {
    .name = "tcp",
    .init = tcp_init,
    .new_group = tcp_new_group,
    .free_group = tcp_free_group,
    .post = tcp_post,
    .shutdown = dist_tcp_thread_stop,
    .abort_job = dist_tcp_abort_job,
    .note_seq = dist_tcp_note_seq,
    .report_timeout = dist_tcp_report_timeout,
};

const em_dist_backend *dist_tcp_backend(void) { return &tcp_backend; }
#else
const em_dist_backend *dist_tcp_backend(void) { return NULL; }
#endif
