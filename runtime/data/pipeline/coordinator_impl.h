/* pipeline/coordinator_impl.h - what the coordinator's two files share: pipeline/coordinator.c
 * (readers, rings, the epoch, the loop) and pipeline/coordinator_timers.c (CurveZMQ key checks,
 * heartbeats, lost readers, reaping). Internal to libember. */
#ifndef EMBER_DP_COORDINATOR_IMPL_H
#define EMBER_DP_COORDINATOR_IMPL_H
#include <zmq.h>
#include "loader_impl.h"

#define MAX_FRAMES 8
#define TICK_S 0.05

/* A received message: up to MAX_FRAMES frames, the routing id first. */
typedef struct frames {
  zmq_msg_t f[MAX_FRAMES];
  int n, more;
} frames;

/* coordinator.c */
int dp_recv_frames(void *sock, frames *m);
void dp_close_frames(frames *m);
int dp_send_to(dp_coord *c, const dp_worker *w, const uint8_t *rid, size_t rid_len, const dp_hdr *h,
                const void *extra, size_t extra_len);
dp_hdr dp_header(em_loader *l, int kind);
void dp_lose_worker(em_loader *l, dp_worker *w, const char *why);
/* coordinator_timers.c */
void dp_on_zap(em_loader *l);
void dp_tick(em_loader *l, double now);

#endif
