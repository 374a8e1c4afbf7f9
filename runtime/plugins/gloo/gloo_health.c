/* gloo_health.c - knowing who is alive, saying why a collective failed, ending the job.
 *
 * Heartbeats. A monitor thread on every rank writes its record into the store every
 * HEARTBEAT_S ("hb/<rank>": a counter that grows, running or finished, and for each of its
 * groups the last collective started and finished) and reads two keys: "abort" (some rank
 * ended the job: this one exits too, with that status) and the record of the next rank
 * (rank + 1 mod size), so that every rank is watched by one other. A watched rank on this
 * host whose process is gone without finishing (killed, crashed) is lost at once; one whose
 * counter stops for EMBER_DIST_HEARTBEAT_TIMEOUT seconds (default 60) is lost too (stopped,
 * hung or unreachable): the watcher ends the job (exit status 124), even when nobody waits
 * in a collective that Gloo could see fail.
 *
 * Diagnosis. Gloo cannot cancel a collective: one that times out, or whose connection
 * fails, leaves its context unusable, and the job ends. Before that, the rank reads the
 * records of the ranks the collective waits for, twice, QUERY_GRACE_S apart: a counter that
 * did not move is a rank that does not answer (dead, stopped or hung; on this host its
 * process says which), one that moved tells how far that rank got on the group. The message
 * names the collective, the ranks missing and why, as the MPI backend's does; it goes to
 * stderr and to the store ("abort"), and the process exits with 124. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "gloo_impl.h"

#define HEARTBEAT_S 0.5
#define QUERY_GRACE_S 1.5
#define ABORT_LINGER_S 2.0

static struct {
  pthread_t thread;
  int running;
  atomic_int stop;
  em_dist_store *store; /* the monitor's own connection */
  int64_t beats;
  double hb_timeout;
} H;

void gl_key(char *buf, size_t cap, const char *fmt, ...) {
  int n = snprintf(buf, cap, "%s", G.prefix);
  va_list ap;
  va_start(ap, fmt);
  if (n >= 0 && (size_t)n < cap) vsnprintf(buf + n, cap - n, fmt, ap);
  va_end(ap);
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------- records */

/* "<beats> <r|f> <gid>:<posted>:<completed> ..." */
static void record_text(char *buf, size_t cap, int finished) {
  int n = snprintf(buf, cap, "%lld %c", (long long)H.beats, finished ? 'f' : 'r');
  pthread_mutex_lock(&G.groups_lock);
  for (gl_group *g = G.groups; g && n < (int)cap - 64; g = g->next)
    if (g->rank >= 0)
      n += snprintf(buf + n, cap - n, " %d:%lld:%lld", g->id, (long long)atomic_load(&g->posted),
                    (long long)atomic_load(&g->completed));
  pthread_mutex_unlock(&G.groups_lock);
}

static em_status publish(em_dist_store *s, int finished) {
  char key[160], rec[1024];
  gl_key(key, sizeof key, "hb/%d", G.rank);
  H.beats++;
  record_text(rec, sizeof rec, finished);
  return em_dist_store_set(s, key, rec, strlen(rec));
}

typedef struct peer_view {
  int ok; /* a record was read */
  int64_t beats, posted, completed;
  int finished;
  int pid;
  char host[64];
} peer_view;

/* World rank wr's record, its progress on group gid and its process. */
static void read_peer(em_dist_store *s, int wr, int gid, peer_view *v) {
  char key[160], rec[1024] = "";
  size_t len = 0;
  memset(v, 0, sizeof *v);
  v->posted = v->completed = -1;
  gl_key(key, sizeof key, "hb/%d", wr);
  const char *k = key;
  int ready = 0;
  if (em_dist_store_check(s, 1, &k, &ready) || !ready || em_dist_store_get(s, key, rec, sizeof rec - 1, &len)) return;
  rec[len < sizeof rec ? len : sizeof rec - 1] = 0;
  char state = 0;
  long long beats = 0;
  int at = 0;
  if (sscanf(rec, "%lld %c%n", &beats, &state, &at) < 2) return;
  v->ok = 1, v->beats = beats, v->finished = state == 'f';
  for (const char *p = rec + at; *p;) {
    int id, used = 0;
    long long po, co;
    if (sscanf(p, " %d:%lld:%lld%n", &id, &po, &co, &used) < 3 || !used) break;
    if (id == gid) v->posted = po, v->completed = co;
    p += used;
  }
  char info[128] = "";
  gl_key(key, sizeof key, "pid/%d", wr);
  if (!em_dist_store_get(s, key, info, sizeof info - 1, &len)) {
    info[len < sizeof info ? len : sizeof info - 1] = 0;
    sscanf(info, "%d %63s", &v->pid, v->host);
  }
}

/* What the process of a rank on this host is doing: "" when it runs (or is elsewhere). */
static const char *process_state(const peer_view *v, char *buf, size_t cap) {
  buf[0] = 0;
  if (v->pid <= 0 || strcmp(v->host, G.host)) return buf;
  char path[64], stat[512];
  snprintf(path, sizeof path, "/proc/%d/stat", v->pid);
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(stat, 1, sizeof stat - 1, f) : 0;
  if (f) fclose(f);
  stat[n] = 0;
  const char *paren = strrchr(stat, ')');
  char st = paren && paren[1] ? paren[2] : 0;
  if (!f || (kill(v->pid, 0) && errno == ESRCH) || st == 'Z' || st == 'X')
    snprintf(buf, cap, "its process %d on this host is gone: killed or crashed", v->pid);
  else if (st == 'T' || st == 't')
    snprintf(buf, cap, "its process %d on this host is stopped (SIGSTOP or a debugger)", v->pid);
  return buf;
}

/* ---------------------------------------------------------------- ending the job */

void gl_abort_job(const char *message, int exit_status) {
  atomic_store(&G.aborting, 1); /* this rank's monitor must not read its own notice */
  if (message && *message) {
    fprintf(stderr, "%s\n", message);
    fflush(stderr);
  }
  if (G.store) {
    char key[160], val[EM_DIST_MSG + 32];
    gl_key(key, sizeof key, "abort");
    int n = snprintf(val, sizeof val, "%d %d\n%s", exit_status, G.rank, message ? message : "");
    em_dist_store_set(G.store, key, val, (size_t)(n < (int)sizeof val ? n : (int)sizeof val - 1));
    /* the other ranks read the notice from this process's server: wait until they have */
    if (G.hosting && G.size > 1) {
      gl_key(key, sizeof key, "abort_seen");
      double until = em_clock_monotonic() + ABORT_LINGER_S;
      int64_t seen = 0;
      while (em_clock_monotonic() < until && !em_dist_store_add(G.store, key, 0, &seen) && seen < G.size - 1)
        sleep_s(0.02);
    }
  }
  _exit(exit_status);
}

static void rank_text(char *buf, size_t cap, const gl_group *g, int r) {
  if (g->id == 0) snprintf(buf, cap, "rank %d", r);
  else snprintf(buf, cap, "rank %d (world rank %d)", r, g->world_ranks[r]);
}

static void follow_notice(em_dist_store *s, int claimed);
#define check_abort(s) follow_notice(s, 0)

void gl_fail_job(gl_group *g, em_dist_work *w, const char *what_given, int code, const char *why) {
  check_abort(G.store); /* a rank that failed first (its connections closed as it left) said why */
  if (atomic_exchange(&G.aborting, 1))
    for (;;) sleep_s(1); /* another thread ends the job */
  double now = em_clock_monotonic();
  char what[320];
  if (w) emp_dist_describe(w, what, sizeof what);
  else snprintf(what, sizeof what, "%s", what_given ? what_given : "?");
  int p2p = w && (w->kind == EM_DIST_OP_SEND || w->kind == EM_DIST_OP_RECV);
  int64_t seq = w ? w->seq : 0;
  int n = 0, *peers = malloc(sizeof(int) * g->size);
  peer_view *first = calloc(g->size, sizeof *first), *second = calloc(g->size, sizeof *second);
  if (peers && first && second) {
    for (int r = 0; r < g->size; r++)
      if (r != g->rank && (!p2p || r == w->peer)) peers[n++] = r;
    for (int i = 0; i < n; i++) read_peer(G.store, g->world_ranks[peers[i]], g->id, &first[i]);
    sleep_s(QUERY_GRACE_S);
    follow_notice(G.store, 1);
    for (int i = 0; i < n; i++) read_peer(G.store, g->world_ranks[peers[i]], g->id, &second[i]);
  }
  char msg[2048];
  int len;
  if (code == GLX_TIMEOUT)
    len = snprintf(msg, sizeof msg, "ember.dist: %s: timed out after %.3g s on rank %d", what,
                   now - (w ? w->posted_at : now), g->rank);
  else
    len = snprintf(msg, sizeof msg, "ember.dist: %s: on rank %d, a connection to another rank failed (gloo: %s)",
                   what, g->rank, why);
  int listed = 0;
  for (int i = 0; i < n && len < (int)sizeof msg - 400; i++) {
    peer_view *a = &first[i], *b = &second[i];
    int alive = b->ok && (!a->ok || b->beats != a->beats);
    if (alive && !b->finished && !p2p && b->posted >= seq) continue; /* it has reached it */
    char who[64], state[300], proc[200];
    rank_text(who, sizeof who, g, peers[i]);
    process_state(b->ok ? b : a, proc, sizeof proc);
    if (b->finished) snprintf(state, sizeof state, " (it has finished the script and is leaving)");
    else if (!alive)
      snprintf(state, sizeof state, " (no answer: dead, stopped or hung%s%s)", proc[0] ? "; " : "", proc);
    else if (p2p)
      snprintf(state, sizeof state, " (alive, its last collective on this group is #%lld, but no matching %s)",
               (long long)b->posted, w->kind == EM_DIST_OP_RECV ? "send arrived" : "receive was posted");
    else
      snprintf(state, sizeof state, " (alive, but has not reached it: its last collective on this group is #%lld)",
               (long long)b->posted);
    len += snprintf(msg + len, sizeof msg - len, "%s%s%s", listed++ ? "; " : ", waiting for ", who, state);
  }
  if (!listed && n > 0 && code == GLX_TIMEOUT && len < (int)sizeof msg - 300)
    len += snprintf(msg + len, sizeof msg - len,
                    ": every rank has reached it, so the ranks called collectives that do not match (a different "
                    "order, or other sizes or dtypes on some rank)");
  if (len < (int)sizeof msg) snprintf(msg + len, sizeof msg - len, "; aborting the job");
  free(peers);
  free(first);
  free(second);
  gl_abort_job(msg, EM_DIST_EXIT_TIMEOUT);
}

void gl_report_timeout(void *group_impl, em_dist_work *w) { gl_fail_job(group_impl, w, NULL, GLX_TIMEOUT, ""); }

/* ---------------------------------------------------------------- the monitor */

/* Another rank ended the job: exit as it said. claimed: this thread is already the one
 * ending the job (G.aborting is its). */
static void follow_notice(em_dist_store *s, int claimed) {
  char key[160], val[EM_DIST_MSG + 32];
  gl_key(key, sizeof key, "abort");
  const char *k = key;
  int ready = 0;
  size_t len = 0;
  if (em_dist_store_check(s, 1, &k, &ready) || !ready) return;
  if (em_dist_store_get(s, key, val, sizeof val - 1, &len)) return;
  val[len < sizeof val ? len : sizeof val - 1] = 0;
  int status = 1, src = -1;
  sscanf(val, "%d %d", &status, &src);
  if (src == G.rank || (!claimed && atomic_exchange(&G.aborting, 1))) return;
  char *why = strchr(val, '\n');
  why = why ? why + 1 : "";
  if (!strncmp(why, "ember.dist: ", 12)) why += 12;
  char *nl = strchr(why, '\n');
  if (nl) *nl = 0;
  fprintf(stderr, "ember.dist: rank %d ended the job (exit status %d)%s%.600s; rank %d exits too\n", src, status,
          *why ? ": " : "", why, G.rank);
  fflush(stderr);
  gl_key(key, sizeof key, "abort_seen");
  em_dist_store_add(s, key, 1, NULL);
  _exit(status ? status : 1);
}

/* A rank found lost outside any collective: which collective was in progress, if any. */
static void lost(int wr, const char *why) {
  if (atomic_exchange(&G.aborting, 1)) return;
  char busy[200] = "";
  pthread_mutex_lock(&G.groups_lock);
  for (gl_group *g = G.groups; g && !busy[0]; g = g->next)
    if (g->rank >= 0 && atomic_load(&g->posted) > atomic_load(&g->completed))
      snprintf(busy, sizeof busy, " while collective #%lld on %s is in progress", (long long)atomic_load(&g->posted),
               g->id ? "a subgroup" : "the world group");
  pthread_mutex_unlock(&G.groups_lock);
  char msg[800];
  snprintf(msg, sizeof msg, "ember.dist: rank %d lost rank %d (%s)%s; the job cannot go on; aborting the job", G.rank,
           wr, why, busy);
  gl_abort_job(msg, EM_DIST_EXIT_TIMEOUT);
}

static void *monitor_main(void *arg) {
  (void)arg;
  int watched = (G.rank + 1) % G.size;
  int64_t last_beats = -1;
  double last_change = em_clock_monotonic();
  while (!atomic_load(&H.stop)) {
    em_status st = publish(H.store, 0);
    if (!st) check_abort(H.store);
    if (!st && watched != G.rank) {
      peer_view v;
      read_peer(H.store, watched, 0, &v);
      double now = em_clock_monotonic();
      char proc[200];
      if (v.ok && v.beats != last_beats) last_beats = v.beats, last_change = now;
      if (v.ok && v.finished) {
        watched = G.rank; /* it has left cleanly: nothing more to watch */
      } else if (*process_state(&v, proc, sizeof proc) && !strstr(proc, "stopped")) {
        sleep_s(HEARTBEAT_S); /* a clean exit publishes 'finished' first: look once more */
        check_abort(H.store);
        read_peer(H.store, watched, 0, &v);
        if (!v.finished && *process_state(&v, proc, sizeof proc) && !strstr(proc, "stopped")) lost(watched, proc);
      } else if (now - last_change > H.hb_timeout) {
        char why[160];
        snprintf(why, sizeof why, "no heartbeat in the store for %.3g s: stopped, hung or unreachable",
                 now - last_change);
        lost(watched, why);
      }
    }
    if (st && !atomic_load(&H.stop) && !atomic_load(&G.aborting)) {
      char msg[EM_DIST_MSG + 200];
      snprintf(msg, sizeof msg,
               "ember.dist: rank %d lost the store at %s (%s); the job cannot go on (has the rank hosting it "
               "ended?); aborting the job",
               G.rank, G.master, em_last_error());
      fprintf(stderr, "%s\n", msg);
      fflush(stderr);
      _exit(EM_DIST_EXIT_TIMEOUT);
    }
    sleep_s(HEARTBEAT_S);
  }
  return NULL;
}

em_status gl_health_start(void) {
  const char *hb = getenv("EMBER_DIST_HEARTBEAT_TIMEOUT");
  H.hb_timeout = hb && atof(hb) > 0 ? atof(hb) : 60.0;
  em_status st = em_dist_store_clone(&H.store, G.store);
  if (st) return st;
  if ((st = publish(H.store, 0))) return st;
  atomic_store(&H.stop, 0);
  if (pthread_create(&H.thread, NULL, monitor_main, NULL))
    return em_set_error(EM_ERR_RUNTIME, "dist.init: cannot start the monitor thread");
  H.running = 1;
  return EM_OK;
}

void gl_health_stop(int finished) {
  if (H.running) {
    atomic_store(&H.stop, 1);
    pthread_join(H.thread, NULL);
    H.running = 0;
  }
  if (finished && H.store) publish(H.store, 1);
  em_dist_store_close(H.store);
  H.store = NULL;
}

void gl_wait_for_ranks(void) {
  char key[160];
  gl_key(key, sizeof key, "finished");
  em_dist_store_add(G.store, key, 1, NULL);
  if (!G.hosting || G.size == 1) return;
  double start = em_clock_monotonic();
  int64_t done = 0;
  while (!em_dist_store_add(G.store, key, 0, &done) && done < G.size) {
    check_abort(G.store);
    if (em_clock_monotonic() - start > G.timeout) {
      char msg[1200];
      int n = snprintf(msg, sizeof msg,
                       "ember.dist: the end of the job: rank %d hosts the store and waited %.3g s for the other ranks "
                       "to finish; still running:",
                       G.rank, em_clock_monotonic() - start);
      for (int r = 0; r < G.size && n < (int)sizeof msg - 40; r++) {
        peer_view v;
        read_peer(G.store, r, 0, &v);
        if (r != G.rank && !v.finished) n += snprintf(msg + n, sizeof msg - n, " rank %d", r);
      }
      snprintf(msg + n, sizeof msg - n, "; aborting the job");
      gl_abort_job(msg, EM_DIST_EXIT_TIMEOUT);
    }
    sleep_s(0.02);
  }
}
