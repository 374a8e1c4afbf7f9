/* zmq_ceiling.c - the ceilings the data pipeline is held against, on this machine:
 *   memcpy  GB/s copying blocks of the batch's size (a batch is copied at least once)
 *   pushpull  messages/s and GB/s of ZeroMQ PUSH -> PULL over ipc, one sender thread and
 *             one receiver, messages of the batch's size (zero-copy sends)
 * Usage: zmq_ceiling BYTES [SECONDS]   (BYTES: a batch, e.g. 101376 for 128 Fashion-MNIST
 * samples: 128 x 784 uint8 + 128 x 8 labels). Prints one JSON line per measurement.
 * Build: cc -O2 bench/data/zmq_ceiling.c -o zmq_ceiling -lzmq -lpthread */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static size_t bytes;
static double seconds;
static char endpoint[128];

static void free_nothing(void *data, void *hint) { (void)data, (void)hint; }

static void *sender(void *ctx) {
  void *s = zmq_socket(ctx, ZMQ_PUSH);
  zmq_connect(s, endpoint);
  char *buf = malloc(bytes);
  memset(buf, 1, bytes);
  double end = now() + seconds + 0.5;
  while (now() < end) {
    for (int i = 0; i < 64; i++) {
      zmq_msg_t m;
      zmq_msg_init_data(&m, buf, bytes, free_nothing, NULL); /* as the readers send: no copy */
      if (zmq_msg_send(&m, s, 0) < 0) break;
    }
  }
  zmq_msg_t stop;
  zmq_msg_init_size(&stop, 0);
  zmq_msg_send(&stop, s, 0);
  zmq_close(s);
  free(buf);
  return NULL;
}

int main(int argc, char **argv) {
  bytes = argc > 1 ? (size_t)atoll(argv[1]) : 101376;
  seconds = argc > 2 ? atof(argv[2]) : 2.0;
  /* memcpy: a 256 MiB source walked in batch-sized blocks, so the cache does not help */
  size_t span = (size_t)256 << 20;
  char *src = malloc(span), *dst = malloc(bytes);
  memset(src, 3, span);
  memset(dst, 0, bytes);
  size_t done = 0, off = 0;
  double t0 = now();
  while (now() - t0 < seconds) {
    for (int i = 0; i < 256; i++) {
      if (off + bytes > span) off = 0;
      memcpy(dst, src + off, bytes);
      off += bytes;
      done += bytes;
    }
  }
  double dt = now() - t0;
  printf("{\"bench\":\"memcpy\",\"bytes\":%zu,\"gb_per_s\":%.3f,\"check\":%d}\n", bytes, done / dt / 1e9, dst[bytes / 2]);
  free(src);
  free(dst);

  snprintf(endpoint, sizeof endpoint, "ipc:///tmp/zmq-ceiling-%d", (int)getpid());
  void *ctx = zmq_ctx_new();
  void *pull = zmq_socket(ctx, ZMQ_PULL);
  zmq_bind(pull, endpoint);
  pthread_t t;
  pthread_create(&t, NULL, sender, ctx);
  zmq_msg_t m;
  zmq_msg_init(&m);
  zmq_msg_recv(&m, pull, 0); /* the first message starts the clock */
  long n = 0;
  t0 = now();
  while (now() - t0 < seconds) {
    if (zmq_msg_recv(&m, pull, 0) < 0 || zmq_msg_size(&m) == 0) break;
    n++;
  }
  dt = now() - t0;
  printf("{\"bench\":\"zmq push/pull ipc\",\"bytes\":%zu,\"messages_per_s\":%.0f,\"gb_per_s\":%.3f}\n", bytes, n / dt,
         n * (double)bytes / dt / 1e9);
  fflush(stdout);
  while (zmq_msg_size(&m) != 0 && zmq_msg_recv(&m, pull, 0) >= 0) { /* drain until the sender stops */
  }
  zmq_msg_close(&m);
  pthread_join(t, NULL);
  zmq_close(pull);
  zmq_ctx_term(ctx);
  return 0;
}
