/* clock.c - the one monotonic clock every timer in ember reads (timeouts, heartbeats,
 * progress, benchmarks): wall-clock jumps (NTP, a user's date) must never fire a timeout
 * or turn a rate negative. */
#include <time.h>
#include "ember/core.h"

double em_clock_monotonic(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
