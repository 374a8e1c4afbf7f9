/* runtime.c - devices, threads, memory accounting and build information. */
#include <omp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "ember/core.h"
#include "ember/cuda.h"

#ifndef EMBER_VERSION
#define EMBER_VERSION "0.0.0"
#endif
#ifndef EMBER_FEATURES
#define EMBER_FEATURES ""
#endif

/* OpenBLAS, declared here so that this file does not depend on which cblas.h is found. */
void openblas_set_num_threads(int num_threads);
char *openblas_get_config(void);

const char *em_version(void) { return EMBER_VERSION; }
const char *em_build_features(void) { return EMBER_FEATURES; }
const char *em_blas_config(void) { return openblas_get_config(); }

/* ---- devices ---- */

em_status em_device_parse(const char *name, em_device *out) {
  if (!name) return em_set_error(EM_ERR_DEVICE, "device: expected a name such as 'cpu' or 'cuda:0', got nil");
  if (!strcmp(name, "cpu")) {
    *out = (em_device){EM_CPU, 0};
    return EM_OK;
  }
  if (!strncmp(name, "cuda", 4)) {
    int index = 0;
    if (name[4] == ':') {
      char *end;
      long v = strtol(name + 5, &end, 10);
      if (end == name + 5 || *end || v < 0 || v > 1024)
        return em_set_error(EM_ERR_DEVICE, "device: bad device index in '%s' (expected cuda:N)", name);
      index = (int)v;
    } else if (name[4]) {
      return em_set_error(EM_ERR_DEVICE, "device: unknown device '%s' (expected 'cpu', 'cuda' or 'cuda:N')", name);
    }
    *out = (em_device){EM_CUDA, index};
    return EM_OK;
  }
  return em_set_error(EM_ERR_DEVICE, "device: unknown device '%s' (expected 'cpu', 'cuda' or 'cuda:N')", name);
}

int em_device_count(em_device_type type) {
  if (type == EM_CPU) return 1;
  if (type == EM_CUDA) return em_cuda_device_count(); /* 0 without the plugin or a GPU */
  return 0;
}

int em_device_available(em_device device) {
  return device.type >= 0 && device.type < EM_NUM_DEVICE_TYPES && device.index >= 0 &&
         device.index < em_device_count((em_device_type)device.type);
}

/* ---- threads ---- */

static int num_threads; /* 0: not yet set */

static void init_threads_from_env(void) {
  const char *env = getenv("EMBER_NUM_THREADS");
  int n = env ? atoi(env) : 0;
  if (n <= 0) n = omp_get_num_procs();
  em_set_num_threads(n);
}

void em_set_num_threads(int n) {
  if (n < 1) n = 1;
  num_threads = n;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int em_get_num_threads(void) {
  if (!num_threads) init_threads_from_env();
  return num_threads;
}

__attribute__((constructor)) static void ember_init(void) { init_threads_from_env(); }

/* ---- memory accounting ---- */

static atomic_llong bytes_allocated;
static atomic_llong bytes_peak;

int64_t core_parallel_grain = 32768;

__attribute__((constructor)) static void choose_parallel_grain(void) {
  const char *v = getenv("EMBER_PARALLEL_GRAIN"), *wait = getenv("OMP_WAIT_POLICY");
  if (v && atoll(v) > 0) core_parallel_grain = atoll(v);
  else core_parallel_grain = wait && !strcasecmp(wait, "passive") ? 32768 : 8192;
}

void core_memory_count(int64_t delta) {
  long long now = atomic_fetch_add(&bytes_allocated, delta) + delta;
  long long peak = atomic_load(&bytes_peak);
  while (now > peak && !atomic_compare_exchange_weak(&bytes_peak, &peak, now)) {}
}

int64_t em_memory_allocated(void) { return atomic_load(&bytes_allocated); }
int64_t em_memory_peak(void) { return atomic_load(&bytes_peak); }
void em_memory_reset_peak(void) { atomic_store(&bytes_peak, atomic_load(&bytes_allocated)); }
