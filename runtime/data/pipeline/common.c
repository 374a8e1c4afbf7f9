/* pipeline/common.c - what both ends of the data pipeline share: clocks, host identity, message
 * helpers, CurveZMQ key pairs and the small process calls the loader's tests and workers
 * use (alive, signal). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>
#include "wire.h"
#ifdef EMBER_HAVE_ZMQ
#include <zmq.h>
#endif

uint64_t dp_random64(void) {
  uint64_t v = 0;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t got = read(fd, &v, sizeof v);
    close(fd);
    if (got == (ssize_t)sizeof v && v) return v;
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40) ^ 0x9E3779B97F4A7C15ull;
}

/* The host name alone can repeat across containers; the kernel's boot id tells machines
 * (and containers sharing a kernel, which can share /dev/shm) apart. */
void dp_host_identity(char host[64], char boot_id[40]) {
  memset(host, 0, 64);
  memset(boot_id, 0, 40);
  if (gethostname(host, 63) != 0) strcpy(host, "unknown");
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(boot_id, 40, f)) boot_id[0] = 0;
    fclose(f);
    boot_id[strcspn(boot_id, "\n")] = 0;
  }
}

int64_t dp_desc_bytes(const em_tensor_desc *d) {
  if (d->ndim < 1 || d->ndim > 8 || d->dtype < 0 || d->dtype >= EM_NUM_DTYPES) return -1;
  int64_t n = 1, nonzero = 1; /* a zero beside huge sizes: no bytes, but overflowing strides */
  for (int i = 0; i < d->ndim; i++) {
    if (d->sizes[i] < 0 || (d->sizes[i] && nonzero > INT64_MAX / 16 / d->sizes[i])) return -1;
    if (d->sizes[i]) nonzero *= d->sizes[i];
    n *= d->sizes[i];
  }
  return n * (int64_t)em_dtype_size((em_dtype)d->dtype);
}

int dp_lengths_desc_valid(const em_tensor_desc *descs, int n, int j) {
  int64_t k = (int64_t)descs[j].lengths - 1; /* lengths is a wire value: INT32_MIN must not overflow */
  if (k < 0 || k >= n || k == j) return 0;
  const em_tensor_desc *L = &descs[k];
  return L->lengths == 0 && L->dtype == EM_INT64 && (L->ndim == 1 || L->ndim == 2);
}

int64_t dp_lengths_sum(const int64_t *data, int64_t rows, int64_t keys) {
  int64_t sum = 0;
  for (int64_t i = 0; i < rows * keys; i++) {
    if (data[i] < 0 || data[i] > INT64_MAX - sum) return -1;
    sum += data[i];
  }
  return sum;
}

void dp_text(char *dst, size_t cap, const void *src, size_t n) {
  if (n >= cap) n = cap - 1;
  memcpy(dst, src, n);
  dst[n] = 0;
}

/* ---------------------------------------------------------------- processes */
int em_process_alive(int64_t pid) {
  if (pid <= 0) return 0;
  return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

em_status em_process_signal(int64_t pid, int sig) {
  if (pid <= 0) return em_set_error(EM_ERR_ARGUMENT, "process_signal: pid %lld is not a process id", (long long)pid);
  if (kill((pid_t)pid, sig) != 0)
    return em_set_error(EM_ERR_RUNTIME, "process_signal: cannot send signal %d to %lld: %s", sig, (long long)pid,
                        strerror(errno));
  return EM_OK;
}

int64_t em_process_self(void) { return (int64_t)getpid(); }

/* ---------------------------------------------------------------- CurveZMQ */
em_status em_curve_keypair(char *public_key, char *secret_key) {
  if (!public_key || !secret_key) return em_set_error(EM_ERR_ARGUMENT, "curve_keypair: NULL key buffer");
#ifdef EMBER_HAVE_ZMQ
  if (zmq_curve_keypair(public_key, secret_key) != 0)
    return em_set_error(EM_ERR_UNSUPPORTED, "curve_keypair: %s (this libzmq was built without CurveZMQ)",
                        zmq_strerror(zmq_errno()));
  return EM_OK;
#else
  return em_set_error(EM_ERR_UNSUPPORTED, "curve_keypair: ember was built without ZeroMQ");
#endif
}
