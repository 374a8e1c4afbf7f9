/* cuda_info.c - what `ember info` and the REPL banner say about GPUs: each device with its
 * memory and compute capability, the driver, runtime and library versions, or why no GPU
 * can be used. Asking loads the CUDA plugin (when built), which costs a few hundred ms. */
#include <stdio.h>
#include "ember/cuda.h"
#include "host.h"

static void cuda_version(char *buf, size_t n, int v) {
  if (v > 0) snprintf(buf, n, "%d.%d", v / 1000, (v % 1000) / 10);
  else snprintf(buf, n, "none");
}

static void lib_version(char *buf, size_t n, int v) {
  if (v > 0) snprintf(buf, n, "%d.%d.%d", v / 10000, (v / 100) % 100, v % 100);
  else snprintf(buf, n, "none");
}

void em_host_print_cuda(void) {
  int n = em_cuda_device_count();
  if (n > 0) {
    printf("  cuda:    %d device%s\n", n, n == 1 ? "" : "s");
    for (int i = 0; i < n; i++) {
      em_cuda_device_props p;
      if (em_cuda_get_device_props(i, &p)) {
        printf("    cuda:%d  (properties unavailable: %s)\n", i, em_last_error());
        continue;
      }
      printf("    cuda:%d  %s, %.1f GiB (%.1f GiB free), compute capability %d.%d, %d SMs\n", i, p.name,
             (double)p.total_memory / (1 << 30), (double)p.free_memory / (1 << 30), p.major, p.minor,
             p.multiprocessors);
    }
  } else {
    printf("  cuda:    none (%s)\n", em_cuda_unavailable_reason());
  }
  em_cuda_versions v;
  if (em_cuda_get_versions(&v)) return; /* no plugin: the reason above says so */
  char driver[16], runtime[16], cublas[16], cudnn[16], nccl[16];
  cuda_version(driver, sizeof driver, v.driver);
  cuda_version(runtime, sizeof runtime, v.runtime);
  lib_version(cublas, sizeof cublas, v.cublas);
  lib_version(cudnn, sizeof cudnn, v.cudnn);
  lib_version(nccl, sizeof nccl, v.nccl);
  printf("  cuda versions: driver %s, runtime %s, cuBLAS %s, cuDNN %s, NCCL %s\n", driver, runtime, cublas, cudnn,
         nccl);
}

void em_host_gpu_summary(char *buf, size_t n) {
  int count = em_cuda_device_count();
  em_cuda_device_props p;
  if (count <= 0) {
    snprintf(buf, n, "cpu (cuda: none)");
  } else if (em_cuda_get_device_props(0, &p)) {
    snprintf(buf, n, "cpu, cuda x%d", count);
  } else {
    snprintf(buf, n, "cpu, cuda x%d (%s, %.0f GiB)", count, p.name, (double)p.total_memory / (1 << 30));
  }
}
