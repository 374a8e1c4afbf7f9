/* blas_env.c - settles OpenBLAS's kernels and OpenMP's wait policy before either loads.
 *
 * Both libraries read their environment once, when they are loaded, which for this
 * executable is before main(). So when a variable below is unset, main() sets it and
 * re-executes itself once; a user's own settings always win.
 *
 * - OPENBLAS_CORETYPE: Debian 12's OpenBLAS (0.3.21, DYNAMIC_ARCH) does not recognise
 *   recent Xeons and falls back to its SSE3 "Prescott" kernels, 4x slower on GEMM.
 * - How long OpenMP's idle threads spin before they sleep. libgomp's default (a long spin)
 *   collapses throughput when the cores are shared with other work (Fashion-MNIST MLP on
 *   2 busy cores: 1,300 samples/s spinning, 33,000 passive), while sleeping at once costs a
 *   wake-up per parallel region when they are not (the same MLP on 2 idle cores: 94,000
 *   samples/s passive, 128,000 spinning 20,000 rounds). So: when no other task is runnable
 *   as ember starts (/proc/loadavg's instantaneous count, least of a few looks), a short bounded spin
 *   (GOMP_SPINCOUNT=20000, well under a millisecond); otherwise OMP_WAIT_POLICY=passive. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "host.h"

/* Tasks runnable on the machine right now, this process included; -1 when unknown. */
static int runnable_tasks(void) {
  FILE *f = fopen("/proc/loadavg", "r");
  if (!f) return -1;
  double l1, l5, l15;
  int running = -1, total;
  if (fscanf(f, "%lf %lf %lf %d/%d", &l1, &l5, &l15, &running, &total) != 5) running = -1;
  fclose(f);
  return running;
}

static const char *coretype_for_this_cpu(void) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return NULL; /* let OpenBLAS decide */
}

void ember_select_blas_kernels(char **argv) {
  if (getenv("EMBER_NO_REEXEC")) return;
  int changed = 0;
  const char *core = coretype_for_this_cpu();
  if (core && !getenv("OPENBLAS_CORETYPE")) {
    setenv("OPENBLAS_CORETYPE", core, 1);
    changed = 1;
  }
  if (!getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT")) {
    /* the least of a few looks 1 ms apart: kernel threads flicker through the count */
    int running = runnable_tasks();
    for (int i = 0; i < 4 && running > 1; i++) {
      usleep(1000);
      int r = runnable_tasks();
      if (r >= 0 && r < running) running = r;
    }
    if (running == 1) setenv("GOMP_SPINCOUNT", "20000", 1); /* nothing else wants a core */
    else setenv("OMP_WAIT_POLICY", "passive", 1);
    changed = 1;
  }
  if (!changed) return;
  setenv("EMBER_NO_REEXEC", "1", 1); /* never loop, even if exec fails half-way */
  execv("/proc/self/exe", argv);
  /* exec failed (no /proc): carry on with the libraries' own choices */
}
