/* loadgen.c - an open-loop HTTP load generator: Poisson arrivals at a given rate, POSTing one
 * body to one URL path, latency measured from each request's scheduled arrival (so a slow
 * server cannot slow the arrivals down and hide its queueing: no coordinated omission).
 *
 *   cc -O2 -pthread bench/serve/loadgen.c -o loadgen -lm
 *   ./loadgen HOST PORT PATH BODY_FILE RATE_PER_S SECONDS [CONNECTIONS=64] [SEED=1]
 *
 * The arrival times are drawn up front (exponential gaps, a fixed seed); CONNECTIONS threads,
 * each with one keep-alive connection, take the next arrival, sleep until it and send.
 * Prints one JSON line: offered and achieved rate, ok/error counts, p50/p90/p99/p99.9 and
 * max latency in ms. Enough connections make it open-loop: if all are busy, an arrival waits
 * and that wait is counted in its latency. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char *host, *path;
static int port;
static char *body;
static size_t body_len;
static double *arrivals, *latency, t0;
static int *status_ok;
static long n_req;
static atomic_long next_req;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int connect_server(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, host, &a.sin_addr);
  if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

/* Sends one request and reads one response (Content-Length framed); returns the status or -1. */
static int roundtrip(int fd) {
  char head[512];
  int n = snprintf(head, sizeof head,
                   "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n", path,
                   host, body_len);
  if (write(fd, head, (size_t)n) != n || write(fd, body, body_len) != (ssize_t)body_len) return -1;
  static __thread char buf[1 << 20];
  size_t got = 0;
  long need = -1;
  char *hdr_end = NULL;
  for (;;) {
    ssize_t r = read(fd, buf + got, sizeof buf - 1 - got);
    if (r <= 0) return -1;
    got += (size_t)r;
    buf[got] = 0;
    if (!hdr_end && (hdr_end = strstr(buf, "\r\n\r\n"))) {
      char *cl = strcasestr(buf, "Content-Length:");
      need = (long)(hdr_end + 4 - buf) + (cl ? atol(cl + 15) : 0);
    }
    if (hdr_end && (long)got >= need) break;
    if (got >= sizeof buf - 1) return -1;
  }
  return atoi(buf + 9);
}

static void *client(void *arg) {
  (void)arg;
  int fd = connect_server();
  for (;;) {
    long i = atomic_fetch_add(&next_req, 1);
    if (i >= n_req) break;
    double due = t0 + arrivals[i], wait = due - now();
    if (wait > 0) {
      struct timespec ts = {(time_t)wait, (long)((wait - (time_t)wait) * 1e9)};
      nanosleep(&ts, NULL);
    }
    int st = fd >= 0 ? roundtrip(fd) : -1;
    if (st < 0) { /* reconnect once */
      if (fd >= 0) close(fd);
      fd = connect_server();
      st = fd >= 0 ? roundtrip(fd) : -1;
    }
    latency[i] = now() - due;
    status_ok[i] = st == 200;
  }
  if (fd >= 0) close(fd);
  return NULL;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc < 7) {
    fprintf(stderr, "usage: %s HOST PORT PATH BODY_FILE RATE_PER_S SECONDS [CONNECTIONS] [SEED]\n", argv[0]);
    return 2;
  }
  host = argv[1], port = atoi(argv[2]), path = argv[3];
  double rate = atof(argv[5]), seconds = atof(argv[6]);
  int conns = argc > 7 ? atoi(argv[7]) : 64;
  unsigned seed = argc > 8 ? (unsigned)atoi(argv[8]) : 1;
  FILE *f = fopen(argv[4], "rb");
  if (!f || rate <= 0 || seconds <= 0 || conns < 1) {
    fprintf(stderr, "loadgen: cannot read %s, or a bad rate/seconds/connections\n", argv[4]);
    return 2;
  }
  fseek(f, 0, SEEK_END);
  body_len = (size_t)ftell(f);
  rewind(f);
  body = malloc(body_len);
  if (fread(body, 1, body_len, f) != body_len) return 2;
  fclose(f);
  n_req = (long)(rate * seconds);
  arrivals = malloc(sizeof(double) * (size_t)n_req);
  latency = calloc((size_t)n_req, sizeof(double));
  status_ok = calloc((size_t)n_req, sizeof(int));
  srand48(seed);
  double t = 0;
  for (long i = 0; i < n_req; i++) {
    t += -log(1.0 - drand48()) / rate;
    arrivals[i] = t;
  }
  pthread_t *th = malloc(sizeof(pthread_t) * (size_t)conns);
  t0 = now() + 0.05;
  for (int i = 0; i < conns; i++) pthread_create(&th[i], NULL, client, NULL);
  for (int i = 0; i < conns; i++) pthread_join(th[i], NULL);
  double elapsed = now() - t0;
  long ok = 0;
  for (long i = 0; i < n_req; i++) ok += status_ok[i];
  qsort(latency, (size_t)n_req, sizeof(double), cmp);
#define PCT(p) (1e3 * latency[(long)((p) * (n_req - 1))])
  printf("{\"offered_per_s\":%.1f,\"achieved_per_s\":%.1f,\"requests\":%ld,\"ok\":%ld,\"errors\":%ld,"
         "\"p50_ms\":%.3f,\"p90_ms\":%.3f,\"p99_ms\":%.3f,\"p999_ms\":%.3f,\"max_ms\":%.3f}\n",
         rate, n_req / elapsed, n_req, ok, n_req - ok, PCT(0.5), PCT(0.9), PCT(0.99), PCT(0.999),
         1e3 * latency[n_req - 1]);
  return ok == n_req ? 0 : 1;
}
