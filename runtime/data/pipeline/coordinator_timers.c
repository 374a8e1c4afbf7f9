/* pipeline/coordinator_timers.c - the coordinator's CurveZMQ key checks (ZAP) and its timers:
 * heartbeats, readers declared lost when silent, spawned readers reaped when they exit (the loop
 * itself is pipeline/coordinator.c). */
#ifdef EMBER_HAVE_ZMQ
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "core/core_impl.h"
#include "coordinator_impl.h"

/* ---------------------------------------------------------------- ZAP (CurveZMQ keys) */
static int allowed_key(em_loader *l, const uint8_t *key32) {
  if (!l->curve_clients || !*l->curve_clients) return 1;
  char z85[41];
  if (!zmq_z85_encode(z85, key32, 32)) return 0;
  const char *p = l->curve_clients;
  while (*p) {
    size_t n = strcspn(p, ",");
    if (n == 40 && !memcmp(p, z85, 40)) return 1;
    p += n + (p[n] == ',');
  }
  return 0;
}

void dp_on_zap(em_loader *l) {
  frames m;
  if (!dp_recv_frames(l->c.zap, &m)) return;
  int ok = m.n >= 7 && zmq_msg_size(&m.f[6]) == 32 && allowed_key(l, zmq_msg_data(&m.f[6]));
  const char *code = ok ? "200" : "400", *text = ok ? "OK" : "client key not allowed";
  zmq_send(l->c.zap, "1.0", 3, ZMQ_SNDMORE);
  if (m.n >= 2) zmq_send(l->c.zap, zmq_msg_data(&m.f[1]), zmq_msg_size(&m.f[1]), ZMQ_SNDMORE);
  else zmq_send(l->c.zap, "", 0, ZMQ_SNDMORE);
  zmq_send(l->c.zap, code, 3, ZMQ_SNDMORE);
  zmq_send(l->c.zap, text, strlen(text), ZMQ_SNDMORE);
  zmq_send(l->c.zap, "", 0, ZMQ_SNDMORE);
  zmq_send(l->c.zap, "", 0, 0);
  if (!ok) {
    pthread_mutex_lock(&l->mu);
    l->stats.workers_rejected++;
    snprintf(l->last_reject, sizeof l->last_reject, "a reader's CurveZMQ key is not in the allowed list");
    pthread_mutex_unlock(&l->mu);
  }
  dp_close_frames(&m);
}

/* ---------------------------------------------------------------- timers */
/* Spawned readers that exited: only our own pids are waited for (waiting for any child
 * would steal the exit status of the caller's other children, os.execute's say). */
static void reap_children(em_loader *l) {
  int64_t pids[DP_MAX_CHILDREN];
  pthread_mutex_lock(&l->mu);
  int n = l->nchildren;
  memcpy(pids, l->children, (size_t)n * sizeof pids[0]);
  pthread_mutex_unlock(&l->mu);
  for (int k = 0; k < n; k++) {
    int status;
    if (waitpid((pid_t)pids[k], &status, WNOHANG) != (pid_t)pids[k]) continue;
    char text[128];
    if (WIFSIGNALED(status)) snprintf(text, sizeof text, "killed by signal %d", WTERMSIG(status));
    else snprintf(text, sizeof text, "exited with status %d", WEXITSTATUS(status));
    pthread_mutex_lock(&l->mu);
    for (int i = 0; i < l->nchildren; i++)
      if (l->children[i] == pids[k]) {
        l->children[i] = l->children[--l->nchildren];
        break;
      }
    snprintf(l->last_exit, sizeof l->last_exit, "reader pid %lld %s", (long long)pids[k], text);
    l->respawn_wanted++;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    for (dp_worker *w = l->c.workers; w; w = w->next)
      if (w->same_host && w->pid == pids[k]) {
        dp_lose_worker(l, w, text);
        break;
      }
  }
}

/* Items leased longer than lease_timeout_s go to PENDING again (the old lease stays
 * counted until its reader answers or is lost; a late answer is a duplicate). */
static void expire_leases(em_loader *l, double now) {
  dp_coord *c = &l->c;
  if (!(l->o.lease_timeout_s > 0) || !c->items || now - c->last_lease_check < 0.25) return;
  c->last_lease_check = now;
  while (c->scan_from < c->plan.n_items && c->items[c->scan_from].state >= IT_QUEUED) c->scan_from++;
  int64_t expired = 0;
  for (int64_t k = c->scan_from; k < c->plan.n_items && k < c->next_pending + 4096; k++) {
    dp_item *it = &c->items[k];
    if (it->state == IT_LEASED && now - it->leased_at > l->o.lease_timeout_s) {
      it->state = IT_PENDING;
      if (k < c->next_pending) c->next_pending = k;
      expired++;
    }
  }
  if (!expired) return;
  pthread_mutex_lock(&l->mu);
  l->stats.reissued += expired;
  snprintf(l->last_loss, sizeof l->last_loss, "%lld item(s) leased more than %.1f s ago were leased again",
           (long long)expired, l->o.lease_timeout_s);
  pthread_mutex_unlock(&l->mu);
}

void dp_tick(em_loader *l, double now) {
  dp_coord *c = &l->c;
  reap_children(l);
  expire_leases(l, now);
  for (dp_worker *w = c->workers, *next; w; w = next) {
    next = w->next;
    if (now - w->last_seen > l->o.heartbeat_timeout_s) {
      char why[96];
      snprintf(why, sizeof why, "no message for %.1f s (heartbeat timeout)", now - w->last_seen);
      dp_lose_worker(l, w, why);
    }
  }
  if (now - c->last_heartbeat >= l->o.heartbeat_s) {
    c->last_heartbeat = now;
    dp_hdr h = dp_header(l, DP_HEARTBEAT);
    for (dp_worker *w = c->workers, *next; w; w = next) {
      next = w->next;
      if (dp_send_to(c, w, NULL, 0, &h, NULL, 0) && errno == EHOSTUNREACH) dp_lose_worker(l, w, "its connection closed");
    }
  }
  pthread_mutex_lock(&l->mu);
  l->last_message = c->last_message;
  pthread_mutex_unlock(&l->mu);
}

#endif
