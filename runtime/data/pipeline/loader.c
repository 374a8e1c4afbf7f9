/* pipeline/loader.c - the trainer side's API: create and bind, spawn readers, begin an epoch,
 * take batches (the consumer's side of pipeline/loader_impl.h), close.
 *
 * Spawned readers are forked from the calling thread with PR_SET_PDEATHSIG, so the kernel
 * kills them when the trainer dies however it dies; they also stop when the trainer's
 * heartbeats stop or it says goodbye. A spawned reader that exits is replaced (while
 * restarts remain) the next time the consumer waits for a batch. */
#include "ember/data_pipeline.h"
#ifdef EMBER_HAVE_ZMQ
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "loader_impl.h"

extern char **environ;

#define OP "loader"

static char *dup_or_null(const char *s) { return s && *s ? strdup(s) : NULL; }

static int z85_key_ok(const char *k) { return k && strlen(k) == 40; }

static em_status check_options(const em_loader_options *o) {
  if (o->prefetch < 1) return em_set_error(EM_ERR_ARGUMENT, OP ": prefetch is %d, expected >= 1", o->prefetch);
  if (o->worker_queue < 1)
    return em_set_error(EM_ERR_ARGUMENT, OP ": worker_queue is %d, expected >= 1", o->worker_queue);
  if (!(o->heartbeat_s > 0) || !(o->heartbeat_timeout_s > o->heartbeat_s))
    return em_set_error(EM_ERR_ARGUMENT,
                        OP
                        ": heartbeat %g s and heartbeat timeout %g s: expected 0 < heartbeat < "
                        "timeout",
                        o->heartbeat_s, o->heartbeat_timeout_s);
  if (o->dataset_size < 0)
    return em_set_error(EM_ERR_ARGUMENT, OP ": dataset_size is %lld, expected >= 0", (long long)o->dataset_size);
  if (!o->local_ipc && !(o->endpoints && *o->endpoints))
    return em_set_error(EM_ERR_ARGUMENT, OP ": no endpoint to bind (expected local_ipc or endpoints)");
  if (!!o->curve_secret_key != !!o->curve_public_key)
    return em_set_error(EM_ERR_ARGUMENT, OP ": CurveZMQ needs both the public and the secret key");
  if (o->curve_secret_key && (!z85_key_ok(o->curve_secret_key) || !z85_key_ok(o->curve_public_key)))
    return em_set_error(EM_ERR_ARGUMENT, OP ": CurveZMQ keys are 40-character Z85 strings (em_curve_keypair)");
  return EM_OK;
}

static em_status zmq_fail(const char *what, const char *arg) {
  return em_set_error(EM_ERR_RUNTIME, OP ": %s%s%s%s: %s", what, arg ? " '" : "", arg ? arg : "", arg ? "'" : "",
                      zmq_strerror(zmq_errno()));
}

static void remove_dir(const char *dir) {
  if (!dir[0]) return;
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    char path[512];
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      unlink(path);
    }
    closedir(d);
  }
  rmdir(dir);
}

/* The private directories of trainers that died without closing (kill -9): their pid is
 * in the name, so the next loader on this host removes them. */
static void remove_stale_dirs(void) {
  DIR *d = opendir("/tmp");
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    int pid = 0, used = 0;
    if (sscanf(e->d_name, "ember-loader-%d-%n", &pid, &used) != 1 || used == 0 || pid <= 0) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;
    char path[300];
    snprintf(path, sizeof path, "/tmp/%s", e->d_name);
    remove_dir(path);
  }
  closedir(d);
}

/* Binds one endpoint and appends its resolved address to l->endpoints. */
static em_status bind_one(em_loader *l, const char *ep) {
  if (zmq_bind(l->c.router, ep) != 0) return zmq_fail("cannot bind", ep);
  char last[256];
  size_t n = sizeof last;
  if (zmq_getsockopt(l->c.router, ZMQ_LAST_ENDPOINT, last, &n) != 0) snprintf(last, sizeof last, "%s", ep);
  size_t used = strlen(l->endpoints);
  snprintf(l->endpoints + used, sizeof l->endpoints - used, "%s%s", used ? "," : "", last);
  return EM_OK;
}

static em_status setup_sockets(em_loader *l) {
  const em_loader_options *o = &l->o;
  int one = 1, linger = 100;
  if (l->curve_secret && l->curve_clients) { /* ZAP: the allowed client keys */
    l->c.zap = zmq_socket(l->zctx, ZMQ_REP);
    if (!l->c.zap || zmq_bind(l->c.zap, "inproc://zeromq.zap.01") != 0)
      return zmq_fail("cannot start the CurveZMQ authentication handler", NULL);
  }
  l->c.router = zmq_socket(l->zctx, ZMQ_ROUTER);
  if (!l->c.router) return zmq_fail("cannot create a socket", NULL);
  zmq_setsockopt(l->c.router, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
  zmq_setsockopt(l->c.router, ZMQ_ROUTER_HANDOVER, &one, sizeof one);
  zmq_setsockopt(l->c.router, ZMQ_LINGER, &linger, sizeof linger);
  if (l->curve_secret) {
    if (zmq_setsockopt(l->c.router, ZMQ_CURVE_SERVER, &one, sizeof one) ||
        zmq_setsockopt(l->c.router, ZMQ_CURVE_SECRETKEY, l->curve_secret, 40))
      return zmq_fail("cannot enable CurveZMQ", NULL);
  }
  if (o->local_ipc) {
    remove_stale_dirs();
    snprintf(l->dir, sizeof l->dir, "/tmp/ember-loader-%d-XXXXXX", (int)getpid());
    if (!mkdtemp(l->dir)) {
      l->dir[0] = 0;
      return em_set_error(EM_ERR_IO, OP ": cannot create a private directory in /tmp: %s", strerror(errno));
    }
    char ep[200];
    snprintf(ep, sizeof ep, "ipc://%s/socket", l->dir);
    em_status st = bind_one(l, ep);
    if (st) return st;
  }
  const char *p = l->endpoints_opt;
  while (p && *p) {
    size_t n = strcspn(p, ",");
    char ep[256];
    if (n == 0 || n >= sizeof ep) return em_set_error(EM_ERR_ARGUMENT, OP ": bad endpoint list '%s'", l->endpoints_opt);
    memcpy(ep, p, n);
    ep[n] = 0;
    em_status st = bind_one(l, ep);
    if (st) return st;
    p += n + (p[n] == ',');
  }
  return EM_OK;
}

em_status em_loader_create(em_loader **out, const em_loader_options *options) {
  if (!out || *out) return em_set_error(EM_ERR_ARGUMENT, OP ": out must point to NULL (the loader is new)");
  if (!options) return em_set_error(EM_ERR_ARGUMENT, OP ": options must not be NULL");
  em_status st = check_options(options);
  if (st) return st;
  em_loader *l = calloc(1, sizeof *l);
  if (!l) return em_set_error(EM_ERR_MEMORY, OP ": out of memory");
  l->o = *options;
  l->endpoints_opt = dup_or_null(options->endpoints);
  l->fingerprint = strdup(options->fingerprint ? options->fingerprint : "");
  l->curve_public = dup_or_null(options->curve_public_key);
  l->curve_secret = dup_or_null(options->curve_secret_key);
  l->curve_clients = dup_or_null(options->curve_clients);
  l->o.endpoints = l->endpoints_opt;
  l->o.fingerprint = l->fingerprint;
  l->o.curve_public_key = l->curve_public;
  l->o.curve_secret_key = l->curve_secret;
  l->o.curve_clients = l->curve_clients;
  l->efd = -1;
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  l->c.session = dp_random64();
  l->zctx = zmq_ctx_new();
  if (!l->zctx) {
    st = zmq_fail("cannot create a ZeroMQ context", NULL);
  } else {
    st = setup_sockets(l);
  }
  if (!st && !(l->lender = dp_lender_new())) st = em_set_error(EM_ERR_MEMORY, OP ": out of memory");
  if (!st) {
    l->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (l->efd < 0) st = em_set_error(EM_ERR_RUNTIME, OP ": eventfd: %s", strerror(errno));
  }
  if (!st) {
    if (pthread_create(&l->thread, NULL, dp_coordinator_main, l) != 0)
      st = em_set_error(EM_ERR_RUNTIME, OP ": cannot start the coordinator thread");
    else l->thread_started = 1;
  }
  if (st) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", em_last_error());
    em_loader_free(l);
    return em_set_error(st, "%s", msg);
  }
  *out = l;
  return EM_OK;
}

const char *em_loader_endpoints(const em_loader *l) { return l ? l->endpoints : ""; }
const char *em_loader_private_dir(const em_loader *l) { return l && l->dir[0] ? l->dir : NULL; }

/* ---------------------------------------------------------------- spawned readers */
static void free_argv(em_loader *l) {
  for (int i = 0; i < l->argc; i++) free(l->argv[i]);
  free(l->argv);
  l->argv = NULL;
  l->argc = 0;
}

/* The child's environment: the parent's, with one thread per reader (they run side by side
 * on the same cores as the trainer). */
static char **child_env(void) {
  size_t n = 0;
  while (environ[n]) n++;
  char **env = calloc(n + 2, sizeof *env);
  if (!env) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "EMBER_NUM_THREADS=", 18) && strncmp(environ[i], "OMP_NUM_THREADS=", 16))
      env[k++] = environ[i];
  env[k++] = "EMBER_NUM_THREADS=1";
  env[k] = NULL;
  return env;
}

static em_status spawn_one(em_loader *l) {
  pthread_mutex_lock(&l->mu);
  int full = l->nchildren >= DP_MAX_CHILDREN;
  pthread_mutex_unlock(&l->mu);
  if (full) return em_set_error(EM_ERR_ARGUMENT, OP ": more than %d spawned readers", DP_MAX_CHILDREN);
  char **env = child_env();
  if (!env) return em_set_error(EM_ERR_MEMORY, OP ": out of memory");
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) { /* the child: only async-signal-safe calls until exec */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1); /* the trainer died before prctl */
    execve(l->argv[0], l->argv, env);
    _exit(127);
  }
  free(env);
  if (pid < 0) return em_set_error(EM_ERR_RUNTIME, OP ": cannot start a reader: fork: %s", strerror(errno));
  pthread_mutex_lock(&l->mu);
  l->children[l->nchildren++] = pid;
  pthread_mutex_unlock(&l->mu);
  l->spawned_any = 1;
  return EM_OK;
}

em_status em_loader_spawn(em_loader *l, int n, int argc, const char *const *argv, int max_restarts) {
  if (!l) return em_set_error(EM_ERR_ARGUMENT, OP ": spawn on a NULL loader");
  if (n < 0 || argc < 1 || !argv || !argv[0] || max_restarts < 0)
    return em_set_error(EM_ERR_ARGUMENT, OP ": spawn expects n >= 0, a command line and max_restarts >= 0");
  free_argv(l);
  l->argv = calloc((size_t)argc + 1, sizeof *l->argv);
  if (!l->argv) return em_set_error(EM_ERR_MEMORY, OP ": out of memory");
  for (int i = 0; i < argc; i++)
    if (!(l->argv[i] = strdup(argv[i] ? argv[i] : ""))) return em_set_error(EM_ERR_MEMORY, OP ": out of memory");
  l->argc = argc;
  l->restarts_left = max_restarts;
  for (int i = 0; i < n; i++) {
    em_status st = spawn_one(l);
    if (st) return st;
  }
  return EM_OK;
}

int em_loader_worker_pids(em_loader *l, int64_t *pids, int max) {
  if (!l) return 0;
  pthread_mutex_lock(&l->mu);
  int n = l->nchildren < max ? l->nchildren : max;
  for (int i = 0; i < n; i++) pids[i] = l->children[i];
  int total = l->nchildren;
  pthread_mutex_unlock(&l->mu);
  return total < max ? total : max;
}

static void stop_children(em_loader *l) {
  pthread_mutex_lock(&l->mu);
  int n = l->nchildren;
  int64_t pids[DP_MAX_CHILDREN];
  memcpy(pids, l->children, (size_t)n * sizeof pids[0]);
  l->nchildren = 0;
  pthread_mutex_unlock(&l->mu);
  for (int i = 0; i < n; i++) kill((pid_t)pids[i], SIGTERM);
  double deadline = em_clock_monotonic() + 2.0;
  for (int i = 0; i < n; i++) {
    for (;;) {
      pid_t r = waitpid((pid_t)pids[i], NULL, WNOHANG);
      if (r != 0) break; /* reaped, or not ours any more */
      if (em_clock_monotonic() > deadline) {
        kill((pid_t)pids[i], SIGKILL);
        waitpid((pid_t)pids[i], NULL, 0);
        break;
      }
      usleep(2000);
    }
  }
}

/* ---------------------------------------------------------------- close */
static void free_out(dp_out *o) {
  if (o->batch) dp_batch_destroy(o->batch);
  free(o->message);
  free(o);
}

void em_loader_free(em_loader *l) {
  if (!l) return;
  if (l->thread_started) {
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_mutex_unlock(&l->mu);
    dp_wake(l->efd);
    pthread_join(l->thread, NULL);
  }
  if (l->c.router) zmq_close(l->c.router);
  if (l->c.zap) zmq_close(l->c.zap);
  if (l->zctx) zmq_ctx_term(l->zctx);
  stop_children(l);
  if (l->efd >= 0) close(l->efd);
  remove_dir(l->dir);
  while (l->head) {
    dp_out *o = l->head;
    l->head = o->next;
    free_out(o);
  }
  if (l->pending) {
    dp_plan_free(l->pending);
    free(l->pending);
  }
  dp_lender_close(l->lender); /* tensors still lent keep their mapping; their slots go nowhere */
  free_argv(l);
  free(l->endpoints_opt);
  free(l->fingerprint);
  free(l->curve_public);
  free(l->curve_secret);
  free(l->curve_clients);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
  free(l);
}

/* ---------------------------------------------------------------- epochs */
em_status em_loader_begin(em_loader *l, uint64_t epoch, uint64_t seed, const int64_t *ids, int64_t n_ids,
                          const int64_t *item_pos, const int64_t *item_len, int64_t n_items) {
  if (!l) return em_set_error(EM_ERR_ARGUMENT, OP ": begin on a NULL loader");
  if (n_ids < 0 || n_items < 0 || (n_ids && !ids) || (n_items && (!item_pos || !item_len)))
    return em_set_error(EM_ERR_ARGUMENT, OP ": begin expects %lld ids and %lld items, got NULL arrays",
                        (long long)n_ids, (long long)n_items);
  for (int64_t i = 0; i < n_items; i++)
    if (item_pos[i] < 0 || item_len[i] < 1 || item_pos[i] > n_ids - item_len[i])
      return em_set_error(EM_ERR_ARGUMENT, OP ": item %lld covers positions %lld..%lld of a plan of %lld ids",
                          (long long)i, (long long)item_pos[i], (long long)(item_pos[i] + item_len[i] - 1),
                          (long long)n_ids);
  dp_plan *p = calloc(1, sizeof *p);
  if (!p) return em_set_error(EM_ERR_MEMORY, OP ": out of memory");
  p->epoch = epoch;
  p->seed = seed;
  p->n_ids = n_ids;
  p->n_items = n_items;
  p->ids = malloc((size_t)n_ids * sizeof(int64_t) + 1);
  p->item_pos = malloc((size_t)n_items * sizeof(int64_t) + 1);
  p->item_len = malloc((size_t)n_items * sizeof(int64_t) + 1);
  if (!p->ids || !p->item_pos || !p->item_len) {
    dp_plan_free(p);
    free(p);
    return em_set_error(EM_ERR_MEMORY, OP ": out of memory for a plan of %lld ids", (long long)n_ids);
  }
  if (n_ids) memcpy(p->ids, ids, (size_t)n_ids * sizeof(int64_t));
  if (n_items) {
    memcpy(p->item_pos, item_pos, (size_t)n_items * sizeof(int64_t));
    memcpy(p->item_len, item_len, (size_t)n_items * sizeof(int64_t));
  }
  pthread_mutex_lock(&l->mu);
  while (l->head) { /* what the previous epoch left is dropped */
    dp_out *o = l->head;
    l->head = o->next;
    free_out(o);
  }
  l->tail = NULL;
  l->queued = 0;
  p->id = ++l->generation;
  l->ended = 0;
  if (l->pending) {
    dp_plan_free(l->pending);
    free(l->pending);
  }
  l->pending = p;
  l->waiting_item = 0;
  l->n_items = n_items;
  l->cur_epoch = epoch;
  pthread_mutex_unlock(&l->mu);
  dp_wake(l->efd);
  return EM_OK;
}

/* Under mu: why the consumer has waited too long. */
static em_status timeout_error(em_loader *l, double waited) {
  char where[128] = "";
  if (l->waiting_item >= 0)
    snprintf(where, sizeof where, ", waiting for batch %lld of %lld", (long long)l->waiting_item + 1,
             (long long)l->n_items);
  double since = l->last_message > 0 ? em_clock_monotonic() - l->last_message : -1;
  char seen[64];
  if (since >= 0) snprintf(seen, sizeof seen, "%.1f s ago", since);
  else snprintf(seen, sizeof seen, "never");
  return em_set_error(EM_ERR_RUNTIME,
                      OP
                      ": no batch within %.1f s (epoch %llu%s): %lld readers connected (%lld lost, %lld refused), "
                      "%lld items leased, %lld waiting; last message from a reader %s%s%s%s%s%s%s%s%s",
                      waited, (unsigned long long)l->cur_epoch, where, (long long)l->stats.workers,
                      (long long)l->stats.workers_lost, (long long)l->stats.workers_rejected,
                      (long long)l->stats.leased, (long long)l->stats.buffered, seen, l->last_loss[0] ? "; " : "",
                      l->last_loss, l->last_exit[0] ? "; " : "", l->last_exit, l->last_reject[0] ? "; " : "",
                      l->last_reject, l->o.endpoints ? "; readers connect to " : "",
                      l->o.endpoints ? l->endpoints : "");
}

em_status em_loader_next(em_loader *l, em_loader_batch **out, double timeout_s) {
  if (!out) return em_set_error(EM_ERR_ARGUMENT, OP ": next: out must not be NULL");
  *out = NULL;
  if (!l) return em_set_error(EM_ERR_ARGUMENT, OP ": next on a NULL loader");
  double t0 = em_clock_monotonic(), deadline = t0 + (timeout_s > 0 ? timeout_s : 0);
  em_status st = EM_OK;
  pthread_mutex_lock(&l->mu);
  if (!l->generation) {
    pthread_mutex_unlock(&l->mu);
    return em_set_error(EM_ERR_ARGUMENT, OP ": next before begin (start an epoch first)");
  }
  for (;;) {
    if (l->fatal[0]) {
      st = em_set_error(EM_ERR_RUNTIME, OP ": %s", l->fatal);
      break;
    }
    dp_out *o = l->head;
    if (o) {
      l->head = o->next;
      if (!l->head) l->tail = NULL;
      if (o->kind == DP_OUT_BATCH) l->queued--;
      if (o->generation != l->generation) {
        free_out(o);
        continue;
      }
      if (o->kind == DP_OUT_BATCH) {
        l->stats.batches++;
        l->stats.samples += o->batch->samples;
        l->stats.bytes += o->batch->bytes;
        *out = o->batch;
        o->batch = NULL;
      } else if (o->kind == DP_OUT_ERROR) {
        st = em_set_error(EM_ERR_FORMAT, OP ": %s", o->message);
      } else {
        l->ended = 1;
      }
      free_out(o);
      break;
    }
    if (l->ended) break;
    if (l->respawn_wanted > 0) {
      l->respawn_wanted--;
      if (l->restarts_left > 0 && l->argv) {
        l->restarts_left--;
        l->stats.respawned++;
        pthread_mutex_unlock(&l->mu);
        st = spawn_one(l);
        pthread_mutex_lock(&l->mu);
        if (st) break;
      }
      continue;
    }
    if (l->spawned_any && l->nchildren == 0 && l->stats.workers == 0 && !l->o.endpoints) {
      st = em_set_error(EM_ERR_RUNTIME, OP ": every reader has exited and no restarts are left (%s)%s%s",
                        l->last_exit[0] ? l->last_exit : "no exit status", l->last_reject[0] ? "; " : "",
                        l->last_reject);
      break;
    }
    double now = em_clock_monotonic();
    if (now >= deadline) {
      st = timeout_error(l, now - t0);
      break;
    }
    double until = now + 0.25 < deadline ? now + 0.25 : deadline;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double wait = until - now;
    ts.tv_sec += (time_t)wait;
    ts.tv_nsec += (long)((wait - (double)(time_t)wait) * 1e9);
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&l->cv, &l->mu, &ts);
  }
  l->stats.wait_s += em_clock_monotonic() - t0;
  /* A credit came back. While more leases are out than readers, the next batch to arrive
   * wakes the coordinator anyway and it leases then (every turn does): a wake-up per batch
   * would only cost switches. With a lease or less per reader, one may be about to idle. */
  int wake = l->stats.leased <= (l->stats.workers > 0 ? l->stats.workers : 1) || st;
  pthread_mutex_unlock(&l->mu);
  if (wake) dp_wake(l->efd);
  return st;
}

void em_loader_get_stats(em_loader *l, em_loader_stats *out) {
  if (!l || !out) return;
  pthread_mutex_lock(&l->mu);
  *out = l->stats;
  pthread_mutex_unlock(&l->mu);
  out->slots_lent = dp_lender_lent(l->lender);
}

/* ---------------------------------------------------------------- batches */
int64_t em_loader_batch_item(const em_loader_batch *b) { return b ? b->item : -1; }
int64_t em_loader_batch_samples(const em_loader_batch *b) { return b ? b->samples : 0; }
int em_loader_batch_count(const em_loader_batch *b) { return b ? b->ntensors : 0; }
const char *em_loader_batch_name(const em_loader_batch *b, int i) {
  return b && i >= 0 && i < b->ntensors ? b->names[i] : NULL;
}

int em_loader_batch_lengths(const em_loader_batch *b, int i) {
  return b && i >= 0 && i < b->ntensors ? b->lengths[i] : 0;
}

em_status em_loader_batch_tensor(em_tensor **out, const em_loader_batch *b, int i) {
  if (!out || *out) return em_set_error(EM_ERR_ARGUMENT, OP ": batch_tensor: out must point to NULL");
  if (!b || i < 0 || i >= b->ntensors)
    return em_set_error(EM_ERR_INDEX, OP ": batch_tensor: tensor %d of a batch of %d", i, b ? b->ntensors : 0);
  em_tensor_retain(b->tensors[i]);
  *out = b->tensors[i];
  return EM_OK;
}

em_status em_loader_batch_ids(em_tensor **out, const em_loader_batch *b) {
  if (!out || *out) return em_set_error(EM_ERR_ARGUMENT, OP ": batch_ids: out must point to NULL");
  if (!b) return em_set_error(EM_ERR_ARGUMENT, OP ": batch_ids of a NULL batch");
  em_tensor_retain(b->ids);
  *out = b->ids;
  return EM_OK;
}

void em_loader_batch_free(em_loader_batch *b) { dp_batch_destroy(b); }

#else /* without ZeroMQ */
static em_status no_zmq(void) {
  return em_set_error(EM_ERR_UNSUPPORTED, "loader: ember was built without ZeroMQ (install libzmq3-dev and rebuild)");
}
em_status em_loader_create(em_loader **out, const em_loader_options *options) {
  (void)out, (void)options;
  return no_zmq();
}
void em_loader_free(em_loader *l) { (void)l; }
const char *em_loader_endpoints(const em_loader *l) {
  (void)l;
  return "";
}
const char *em_loader_private_dir(const em_loader *l) {
  (void)l;
  return NULL;
}
em_status em_loader_spawn(em_loader *l, int n, int argc, const char *const *argv, int max_restarts) {
  (void)l, (void)n, (void)argc, (void)argv, (void)max_restarts;
  return no_zmq();
}
int em_loader_worker_pids(em_loader *l, int64_t *pids, int max) {
  (void)l, (void)pids, (void)max;
  return 0;
}
em_status em_loader_begin(em_loader *l, uint64_t epoch, uint64_t seed, const int64_t *ids, int64_t n_ids,
                          const int64_t *item_pos, const int64_t *item_len, int64_t n_items) {
  (void)l, (void)epoch, (void)seed, (void)ids, (void)n_ids, (void)item_pos, (void)item_len, (void)n_items;
  return no_zmq();
}
em_status em_loader_next(em_loader *l, em_loader_batch **out, double timeout_s) {
  (void)l, (void)out, (void)timeout_s;
  return no_zmq();
}
void em_loader_get_stats(em_loader *l, em_loader_stats *out) { (void)l, (void)out; }
int64_t em_loader_batch_item(const em_loader_batch *b) {
  (void)b;
  return -1;
}
int64_t em_loader_batch_samples(const em_loader_batch *b) {
  (void)b;
  return 0;
}
int em_loader_batch_count(const em_loader_batch *b) {
  (void)b;
  return 0;
}
const char *em_loader_batch_name(const em_loader_batch *b, int i) {
  (void)b, (void)i;
  return NULL;
}
int em_loader_batch_lengths(const em_loader_batch *b, int i) {
  (void)b, (void)i;
  return 0;
}
em_status em_loader_batch_tensor(em_tensor **out, const em_loader_batch *b, int i) {
  (void)out, (void)b, (void)i;
  return no_zmq();
}
em_status em_loader_batch_ids(em_tensor **out, const em_loader_batch *b) {
  (void)out, (void)b;
  return no_zmq();
}
void em_loader_batch_free(em_loader_batch *b) { (void)b; }
#endif
