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
 *   samples/s passive, 128,000 spinning 20,000 rounds). So: when no other task that the
 *   scheduler ranks as high as ember is runnable as ember starts (least of a few looks), a
 *   short bounded spin (GOMP_SPINCOUNT=20000, well under a millisecond); otherwise
 *   OMP_WAIT_POLICY=passive. Tasks of lower priority do not count: a sleeping thread woken
 *   beside a `nice -n 19` process can wait out that process's time slice before it runs,
 *   once per parallel region (the MLP at 2 threads beside eight nice-19 compilers: 39,000-
 *   64,000 samples/s passive, 93,000-101,000 spinning), while a spinning one keeps its core.
 *   Lower priority means a higher nice value in ember's own autogroup, or an autogroup of a
 *   higher nice value when the kernel groups sessions (sched_autogroup_enabled): across
 *   autogroups, a task's own nice value does not weigh against ember at all.
 * - EMBER_DIST_SPIN_US, how long ranks waiting for each other in shared memory spin before
 *   they sleep: 20 ms when no task of ember's priority outside the job (its launcher and
 *   sibling ranks are the job) is runnable, for the same reason. */
#include <dirent.h>
#include <errno.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ember/core.h"
#include "host.h"

/* Why the kernels are the ones they are; kept in the environment across the re-exec. */
#define CHOICE_VAR "EMBER_BLAS_CHOICE"

/* A task's state and nice value from /proc/<pid>/task/<tid>/stat (the command name, field
 * 2, may hold spaces and parentheses: fields are counted from its last ')'). */
static int task_state(const char *path, char *state, long *ppid, long *nice) {
  char buf[1024];
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  if (!p || sscanf(p + 1, " %c %ld", state, ppid) != 2) return -1;
  for (int field = 3; field < 19; field++) { /* nice is field 19 */
    p = strchr(p + 1, ' ');
    if (!p) return -1;
  }
  *nice = strtol(p + 1, NULL, 10);
  return 0;
}

/* The autogroup of a process and its nice value ("/autogroup-N nice K"); -1 when the kernel
 * does not group sessions. */
static long autogroup_of(const char *pid, long *nice) {
  char path[300], line[128];
  snprintf(path, sizeof path, "/proc/%s/autogroup", pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long id = -1;
  if (!fgets(line, sizeof line, f) || sscanf(line, "/autogroup-%ld nice %ld", &id, nice) != 2) id = -1;
  fclose(f);
  return id;
}

static int autogroups_enabled(void) {
  FILE *f = fopen("/proc/sys/kernel/sched_autogroup_enabled", "r");
  int on = 0;
  if (f) {
    if (fscanf(f, "%d", &on) != 1) on = 0;
    fclose(f);
  }
  return on;
}

/* Runnable threads of other processes that the scheduler weighs at least as ember (see the
 * top of the file); -1 when /proc cannot be read. *strangers: those of them outside this job,
 * i.e. neither ember's parent (a launcher) nor its siblings (the other ranks it started). */
static int runnable_peers(int *strangers) {
  DIR *procs = opendir("/proc");
  if (!procs) return -1;
  char self[32];
  snprintf(self, sizeof self, "%ld", (long)getpid());
  long my_nice = 0, my_ppid = -1, my_group_nice = 0,
       my_group = autogroups_enabled() ? autogroup_of("self", &my_group_nice) : -1;
  char state;
  if (task_state("/proc/self/stat", &state, &my_ppid, &my_nice)) my_nice = 0;
  int count = 0;
  *strangers = 0;
  struct dirent *e;
  while ((e = readdir(procs))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9' || !strcmp(e->d_name, self)) continue;
    char path[600];
    snprintf(path, sizeof path, "/proc/%s/task", e->d_name);
    DIR *tasks = opendir(path);
    if (!tasks) continue; /* gone meanwhile */
    long group = -2, group_nice = 0;
    struct dirent *t;
    while ((t = readdir(tasks))) {
      if (t->d_name[0] < '0' || t->d_name[0] > '9') continue;
      long nice, ppid;
      snprintf(path, sizeof path, "/proc/%s/task/%s/stat", e->d_name, t->d_name);
      if (task_state(path, &state, &ppid, &nice) || state != 'R') continue;
      if (my_group >= 0 && group == -2) group = autogroup_of(e->d_name, &group_nice);
      int weighs = my_group >= 0 && group >= 0 && group != my_group ? group_nice <= my_group_nice : nice <= my_nice;
      count += weighs;
      *strangers += weighs && ppid != my_ppid && strtol(e->d_name, NULL, 10) != my_ppid;
    }
    closedir(tasks);
  }
  closedir(procs);
  return count;
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
    setenv(CHOICE_VAR,
           !strcmp(core, "SkylakeX") ? "chosen by ember for this CPU (AVX-512 F, BW, VL)"
                                     : "chosen by ember for this CPU (AVX2, FMA)",
           1);
    changed = 1;
  } else if (!getenv(CHOICE_VAR)) {
    setenv(CHOICE_VAR, getenv("OPENBLAS_CORETYPE") ? "set by OPENBLAS_CORETYPE" : "OpenBLAS's own detection", 1);
  }
  int omp = !getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT"), dist = !getenv("EMBER_DIST_SPIN_US");
  if (omp || dist) {
    /* the least of a few looks 1 ms apart: kernel threads flicker through the count */
    int strangers, others = runnable_peers(&strangers);
    for (int i = 0; i < 4 && others != 0; i++) {
      usleep(1000);
      int s, r = runnable_peers(&s);
      if (r >= 0 && (others < 0 || r < others)) others = r;
      if (r >= 0 && s < strangers) strangers = s;
    }
    if (omp) {
      if (others == 0) setenv("GOMP_SPINCOUNT", "20000", 1); /* nothing of ember's rank wants a core */
      else setenv("OMP_WAIT_POLICY", "passive", 1);
      changed = 1;
    }
    /* ranks of one job wait for each other in symmetric memory (runtime/distributed/symmetric.c):
     * a long spin when nobody of their rank but themselves wants the cores (read at run time:
     * no re-exec needed for it) */
    if (dist && others >= 0 && strangers == 0) setenv("EMBER_DIST_SPIN_US", "20000", 1);
  }
  if (!changed) return;
  setenv("EMBER_NO_REEXEC", "1", 1); /* never loop, even if exec fails half-way */
  execv("/proc/self/exe", argv);
  /* exec failed (no /proc): carry on with the libraries' own choices */
}

/* ---------------------------------------------------------------- verification
 *
 * The kernels are used only once they have given right answers on this machine: the
 * known-answer check (runtime/cpu/blas_check.c) runs on the first start with a given CPU,
 * OpenBLAS build and kernel name, and its success is remembered in
 * $XDG_CACHE_HOME/ember/blas-verified (else ~/.cache/ember/). When it fails, ember re-executes
 * itself with the next safer kernels (SkylakeX, Haswell, Sandybridge, Nehalem, Prescott) and
 * says so in one line; a user's own OPENBLAS_CORETYPE is checked the same way.
 * EMBER_BLAS_VERIFY=0 skips the check. EMBER_BLAS_TEST_FAULT=NAME makes the check fail for
 * the kernels called NAME (and skips the cache), so that tests can see the fallback work on
 * a machine whose kernels are right. */

static char blas_status[600];

const char *ember_blas_status(void) { return blas_status; }

static const char *const SAFER[] = {"SkylakeX", "Haswell", "Sandybridge", "Nehalem", "Prescott", NULL};

static const char *safer_than(const char *core) {
  for (int i = 0; SAFER[i]; i++)
    if (!strcasecmp(SAFER[i], core)) return SAFER[i + 1];
  return "Haswell"; /* a kernel outside the list: fall back to the usual AVX2 one */
}

/* The machine, the library and the kernels: a check's answer holds for exactly these. */
static void cache_key(char *key, size_t cap, const char *core) {
  char model[256] = "?", line[4096];
  unsigned long long flags = 1469598103934665603ull;
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    while (fgets(line, sizeof line, f)) {
      if (!strncmp(line, "model name", 10) && model[0] == '?') {
        char *c = strchr(line, ':');
        if (c) snprintf(model, sizeof model, "%s", c + 2);
        model[strcspn(model, "\n")] = 0;
      } else if (!strncmp(line, "flags", 5)) {
        for (char *p = line; *p; p++) flags = (flags ^ (unsigned char)*p) * 1099511628211ull;
        break;
      }
    }
    fclose(f);
  }
  const char *config = em_blas_config();
  snprintf(key, cap, "%s|%s|%s|%016llx", core, config ? config : "?", model, flags);
}

static int cache_path(char *path, size_t cap, int make_dir) {
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  char dir[3000];
  if (xdg && *xdg) snprintf(dir, sizeof dir, "%s/ember", xdg);
  else if (home && *home) snprintf(dir, sizeof dir, "%s/.cache/ember", home);
  else return 0;
  if (make_dir) {
    char parent[3000];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash) *slash = 0;
    mkdir(parent, 0755);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return 0;
  }
  snprintf(path, cap, "%s/blas-verified", dir);
  return 1;
}

static int cached(const char *key) {
  char path[3100], line[4096];
  if (!cache_path(path, sizeof path, 0)) return 0;
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  int found = 0;
  while (!found && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    found = !strcmp(line, key);
  }
  fclose(f);
  return found;
}

static void remember(const char *key) {
  char path[3100];
  if (!cache_path(path, sizeof path, 1)) return;
  FILE *f = fopen(path, "a"); /* best effort: a read-only home only costs the check again */
  if (!f) return;
  fprintf(f, "%s\n", key);
  fclose(f);
}

void ember_verify_blas_kernels(char **argv) {
  const char *core = em_blas_corename();
  const char *choice = getenv(CHOICE_VAR);
  if (!core) core = "unknown";
  if (!choice) choice = getenv("OPENBLAS_CORETYPE") ? "set by OPENBLAS_CORETYPE" : "OpenBLAS's own detection";
  const char *skip = getenv("EMBER_BLAS_VERIFY");
  if (skip && !strcmp(skip, "0")) {
    snprintf(blas_status, sizeof blas_status, "%s kernels, %s; not verified (EMBER_BLAS_VERIFY=0)", core, choice);
    return;
  }
  char key[4600], why[400];
  cache_key(key, sizeof key, core);
  const char *fault = getenv("EMBER_BLAS_TEST_FAULT");
  int faulty = fault && !strcasecmp(fault, core);
  if (!faulty && cached(key)) {
    snprintf(blas_status, sizeof blas_status, "%s kernels, %s; verified (known-answer check passed, cached)", core,
             choice);
    return;
  }
  if (faulty) snprintf(why, sizeof why, "a fault simulated by EMBER_BLAS_TEST_FAULT");
  else if (em_blas_verify(why, sizeof why)) {
    remember(key);
    snprintf(blas_status, sizeof blas_status, "%s kernels, %s; verified (known-answer check passed)", core, choice);
    return;
  }
  const char *next = safer_than(core);
  if (!next || getenv("EMBER_BLAS_NO_FALLBACK")) {
    fprintf(stderr, "ember: warning: OpenBLAS's %s kernels failed a known-answer check (%s) and no safer kernels are "
            "left to try; results of matrix products may be wrong\n", core, why);
    snprintf(blas_status, sizeof blas_status, "%s kernels, %s; FAILED the known-answer check: %s", core, choice, why);
    return;
  }
  fprintf(stderr, "ember: OpenBLAS's %s kernels failed a known-answer check (%s); using the %s kernels instead\n", core,
          why, next);
  char reason[700];
  snprintf(reason, sizeof reason, "fallen back from %s, which failed the known-answer check", core);
  setenv("OPENBLAS_CORETYPE", next, 1);
  setenv(CHOICE_VAR, reason, 1);
  execv("/proc/self/exe", argv);
  snprintf(blas_status, sizeof blas_status, "%s kernels, %s; FAILED the known-answer check: %s (re-exec failed)", core,
           choice, why);
}
