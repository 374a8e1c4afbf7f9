/* blas_env.c - settles OpenBLAS's kernels and OpenMP's wait policy before either loads.
 *
 * Both libraries read their environment once, when they are loaded, which for this
 * executable is before main(). So when a variable below is unset, main() sets it and
 * re-executes itself once; a user's own settings always win.
 *
 * - OPENBLAS_CORETYPE: Debian 12's OpenBLAS (0.3.21, DYNAMIC_ARCH) does not recognise
 *   recent Xeons and falls back to its SSE3 "Prescott" kernels, 4x slower on GEMM.
 * - OMP_WAIT_POLICY=passive: libgomp's threads otherwise spin for a long while between
 *   parallel regions. On a machine whose cores are shared with other work that collapses
 *   throughput (Fashion-MNIST MLP training on 2 busy cores: 1,300 samples/s spinning,
 *   33,000 passive); idle threads sleeping costs a few microseconds per region. */
#include <stdlib.h>
#include <unistd.h>
#include "host.h"

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
    setenv("OMP_WAIT_POLICY", "passive", 1);
    changed = 1;
  }
  if (!changed) return;
  setenv("EMBER_NO_REEXEC", "1", 1); /* never loop, even if exec fails half-way */
  execv("/proc/self/exe", argv);
  /* exec failed (no /proc): carry on with the libraries' own choices */
}
