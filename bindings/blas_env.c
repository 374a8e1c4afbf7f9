/* blas_env.c - picks OpenBLAS's kernels before OpenBLAS loads.
 *
 * Debian 12's OpenBLAS (0.3.21, built with DYNAMIC_ARCH) does not recognise recent Xeons
 * and falls back to its SSE3 "Prescott" kernels, 4x slower on GEMM. It reads
 * OPENBLAS_CORETYPE once, when the library is loaded, which for this executable is before
 * main(). So when the variable is unset, main() sets it from the CPU's features and
 * re-executes itself once; a user's own OPENBLAS_CORETYPE always wins. */
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
  if (getenv("OPENBLAS_CORETYPE") || getenv("EMBER_NO_REEXEC")) return;
  const char *core = coretype_for_this_cpu();
  if (!core) return;
  setenv("OPENBLAS_CORETYPE", core, 1);
  setenv("EMBER_NO_REEXEC", "1", 1); /* never loop, even if exec fails half-way */
  execv("/proc/self/exe", argv);
  /* exec failed (no /proc): carry on with OpenBLAS's own choice */
}
