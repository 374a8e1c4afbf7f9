/* bench_cli.h - the clock and the option parsing that the C reference benchmarks share
 * (blas_gemm.c, stream.c); each program includes it once, so the definitions are static. */
#ifndef EMBER_BENCH_CLI_H
#define EMBER_BENCH_CLI_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* "-t 2" style positive integer options; exits on a malformed value. */
static long opt(int argc, char **argv, const char *name, long fallback) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], name) != 0) continue;
    char *end = NULL;
    long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
    if (!end || *end != '\0' || v <= 0) {
      fprintf(stderr, "%s: option %s needs a positive integer\n", argv[0], name);
      exit(2);
    }
    return v;
  }
  return fallback;
}
#endif
