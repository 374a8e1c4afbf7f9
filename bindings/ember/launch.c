/* launch.c - `ember launch -n N script.lua [args...]` and `ember launch -n N run PIPELINE.yaml
 * [key=value...]`: N local processes of this ember through mpirun.
 *
 * What it adds to a plain mpirun:
 *   - the flags a small machine or a container needs: --oversubscribe (more ranks than
 *     cores), --bind-to none (ranks share cores with the OS and other users; binding each
 *     to one core makes a rank stall whenever anything else runs there), --allow-run-as-root
 *     when run as root, and single-copy shared memory switched off when the container does
 *     not allow process_vm_readv (probed here);
 *   - EMBER_NUM_THREADS = cores / N (at least 1) unless set, so N ranks do not fight over
 *     the cores with OpenMP threads;
 *   - every output line prefixed with its rank, "[1] ...", on the stream it was written to
 *     (mpirun --tag-output, rewritten);
 *   - the exit status: mpirun stops every rank when one fails and returns that rank's
 *     status, which is returned here; a signal to the launcher goes to mpirun.
 * Multi-node jobs call mpirun or srun directly (see lua/ember/dist.lua). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "ember/core.h"

static const char *launch_usage =
    "usage: ember launch -n N [options] script.lua [args...]\n"
    "       ember launch -n N [options] run PIPELINE.yaml [key.path=value...]\n"
    "\n"
    "Starts N processes of ember on this machine through Open MPI's mpirun; each runs the\n"
    "script (or pipeline) with ember.dist ranks 0..N-1. Output lines are prefixed with their\n"
    "rank (\"[1] ...\"). When one rank fails, every rank is stopped and its exit status is\n"
    "returned.\n"
    "\n"
    "Options:\n"
    "  -n, --nproc N     number of processes (required)\n"
    "  --threads T       threads per process (EMBER_NUM_THREADS; default: cores / N, at\n"
    "                    least 1, unless EMBER_NUM_THREADS is set)\n"
    "  --timeout S       seconds a collective may take before the job is aborted\n"
    "                    (EMBER_DIST_TIMEOUT; default 600)\n"
    "  --no-prefix       leave output lines as the ranks wrote them\n"
    "  --mpi-arg ARG     pass ARG to mpirun (repeatable), e.g. --mpi-arg=--report-bindings\n"
    "  --dry-run         print the mpirun command instead of running it\n"
    "  -h, --help        this help\n"
    "\n"
    "Environment: EMBER_MPIRUN (the mpirun to use; default mpirun on PATH).\n"
    "Several machines: run mpirun or srun directly, e.g.\n"
    "  mpirun -np 16 --hostfile hosts --bind-to none ember train.lua\n"
    "  srun -N 4 --ntasks-per-node=4 ember train.lua\n";

static int usage_error(const char *fmt, const char *what) {
  fprintf(stderr, "ember launch: ");
  fprintf(stderr, fmt, what);
  fprintf(stderr, " (see ember launch --help)\n");
  return 2;
}

static int parse_count(const char *s, int max, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (!*s || *end || errno || v < 1 || v > max) return 1;
  *out = (int)v;
  return 0;
}

/* Whether this container lets a process read another's memory (Open MPI's CMA
 * single-copy path): probed on a child, which has the same address layout after fork. */
static int cma_works(void) {
  static volatile long probe = 0x5eed;
  int fds[2];
  if (pipe(fds)) return 0;
  pid_t child = fork();
  if (child < 0) return 0;
  if (child == 0) {
    char c;
    close(fds[1]);
    (void)!read(fds[0], &c, 1); /* wait until the parent is done */
    _exit(0);
  }
  close(fds[0]);
  long value = 0;
  struct iovec local = {&value, sizeof value}, remote = {(void *)&probe, sizeof probe};
  ssize_t n = process_vm_readv(child, &local, 1, &remote, 1, 0);
  close(fds[1]);
  waitpid(child, NULL, 0);
  return n == (ssize_t)sizeof value && value == probe;
}

/* ---------------------------------------------------------------- output prefixing */

/* mpirun --tag-output marks every chunk a rank writes with "[job,rank]<stdout>:" (chunks
 * need not end at a newline). Text is collected per rank and written a line at a time as
 * "[rank] line"; mpirun's own untagged messages pass through. */
typedef struct line_buf {
  char *data;
  size_t len, cap;
} line_buf;

typedef struct stream {
  int fd;
  FILE *out;
  char pending[8192]; /* bytes not parsed yet (at most a partial tag) */
  size_t n_pending;
  int rank; /* rank of the text being read; -1: mpirun itself */
  line_buf *lines; /* per rank, [0] for mpirun at index nproc */
  int nproc;
  int prefix;
} stream;

static void emit(stream *s, int rank, const char *text, size_t len) {
  line_buf *b = &s->lines[rank < 0 ? s->nproc : rank];
  for (size_t i = 0; i < len; i++) {
    if (b->len + 1 >= b->cap) {
      size_t cap = b->cap ? b->cap * 2 : 256;
      char *grown = realloc(b->data, cap);
      if (!grown) return;
      b->data = grown;
      b->cap = cap;
    }
    b->data[b->len++] = text[i];
    if (text[i] == '\n') {
      if (rank >= 0 && s->prefix) fprintf(s->out, "[%d] ", rank);
      fwrite(b->data, 1, b->len, s->out);
      fflush(s->out);
      b->len = 0;
    }
  }
}

/* Text that followed a tag: it is the rank's up to the end of the line (a rank's chunk
 * ends with its line, or continues after the next tag); what comes after that newline
 * without a tag is mpirun's own. */
static void emit_run(stream *s, const char *text, size_t len) {
  if (s->rank >= 0) {
    const char *nl = memchr(text, '\n', len);
    if (!nl) {
      emit(s, s->rank, text, len);
      return;
    }
    size_t head = (size_t)(nl - text) + 1;
    emit(s, s->rank, text, head);
    s->rank = -1;
    text += head;
    len -= head;
  }
  emit(s, -1, text, len);
}

/* Parses a tag at p (n bytes available): returns its length and sets *rank, 0 when p
 * does not start a tag, -1 when more bytes are needed to tell. */
static int parse_tag(const char *p, size_t n, int *rank) {
  size_t i = 1;
  if (n < 1 || p[0] != '[') return 0;
  while (i < n && p[i] >= '0' && p[i] <= '9') i++;
  if (i == n) return -1;
  if (i == 1 || p[i] != ',') return 0;
  size_t r0 = ++i;
  while (i < n && p[i] >= '0' && p[i] <= '9') i++;
  if (i == n) return -1;
  if (i == r0 || p[i] != ']') return 0;
  int r = atoi(p + r0);
  static const char *kinds[] = {"<stdout>:", "<stderr>:", "<stddiag>:"};
  i++;
  for (int k = 0; k < 3; k++) {
    size_t kl = strlen(kinds[k]), have = n - i < kl ? n - i : kl;
    if (strncmp(p + i, kinds[k], have)) continue;
    if (have < kl) return -1;
    *rank = r;
    return (int)(i + kl);
  }
  return 0;
}

static void consume(stream *s, const char *data, size_t n) {
  char buf[sizeof s->pending + 65536];
  memcpy(buf, s->pending, s->n_pending);
  memcpy(buf + s->n_pending, data, n);
  size_t len = s->n_pending + n, pos = 0, start = 0;
  s->n_pending = 0;
  while (pos < len) {
    if (buf[pos] != '[') {
      pos++;
      continue;
    }
    int rank = -1, t = parse_tag(buf + pos, len - pos, &rank);
    if (t == 0) {
      pos++;
      continue;
    }
    emit_run(s, buf + start, pos - start);
    if (t < 0) { /* a tag cut by the read: keep it for the next one */
      s->n_pending = len - pos < sizeof s->pending ? len - pos : 0;
      memcpy(s->pending, buf + pos, s->n_pending);
      return;
    }
    s->rank = rank >= 0 && rank < s->nproc ? rank : -1;
    pos += t;
    start = pos;
  }
  emit_run(s, buf + start, len - start);
}

static void flush_all(stream *s) {
  for (int r = 0; r <= s->nproc; r++)
    if (s->lines[r].len) emit(s, r == s->nproc ? -1 : r, "\n", 1);
}

/* ---------------------------------------------------------------- running mpirun */

static volatile pid_t mpirun_pid;

static void forward_signal(int sig) {
  if (mpirun_pid > 0) kill(mpirun_pid, sig);
}

static int run_prefixed(char **cmd, int nproc, int prefix) {
  int out[2], err[2];
  if (pipe(out) || pipe(err)) {
    perror("ember launch: pipe");
    return 1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    perror("ember launch: fork");
    return 1;
  }
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(err[1], 2);
    close(out[0]), close(out[1]), close(err[0]), close(err[1]);
    execvp(cmd[0], cmd);
    fprintf(stderr, "ember launch: cannot run %s: %s (install openmpi-bin, or set EMBER_MPIRUN)\n", cmd[0],
            strerror(errno));
    _exit(127);
  }
  mpirun_pid = pid;
  struct sigaction sa = {0};
  sa.sa_handler = forward_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  close(out[1]), close(err[1]);
  stream s[2] = {{.fd = out[0], .out = stdout}, {.fd = err[0], .out = stderr}};
  for (int k = 0; k < 2; k++) {
    s[k].rank = -1;
    s[k].nproc = nproc;
    s[k].prefix = prefix;
    s[k].lines = calloc(nproc + 1, sizeof(line_buf));
    if (!s[k].lines) {
      fprintf(stderr, "ember launch: out of memory\n");
      kill(pid, SIGTERM);
      return 1;
    }
  }
  /* Read until both pipes close, or until mpirun has exited and the pipes have been quiet
   * for a moment: a process a rank started in the background may hold them open for long. */
  int open_fds = 2, status = 0, exited = 0;
  double quiet_since = 0;
  while (open_fds > 0) {
    struct pollfd p[2] = {{s[0].fd, POLLIN, 0}, {s[1].fd, POLLIN, 0}};
    int ready = poll(p, 2, 100);
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (!exited && waitpid(pid, &status, WNOHANG) == pid) exited = 1;
    if (ready == 0) {
      double t = em_clock_monotonic();
      if (!exited) continue;
      if (!quiet_since) quiet_since = t;
      if (t - quiet_since > 0.5) break;
      continue;
    }
    quiet_since = 0;
    for (int k = 0; k < 2; k++) {
      if (s[k].fd < 0 || !(p[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char chunk[65536];
      ssize_t n = read(s[k].fd, chunk, sizeof chunk);
      if (n > 0) {
        consume(&s[k], chunk, (size_t)n);
      } else if (n == 0 || errno != EINTR) {
        close(s[k].fd);
        s[k].fd = -1;
        open_fds--;
      }
    }
  }
  for (int k = 0; k < 2; k++) {
    if (s[k].fd >= 0) close(s[k].fd);
    flush_all(&s[k]);
    for (int r = 0; r <= nproc; r++) free(s[k].lines[r].data);
    free(s[k].lines);
  }
  while (!exited && waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

/* argv[0] is "launch". Returns the exit status. */
int em_host_launch(int argc, char **argv) {
  int nproc = 0, threads = 0, prefix = 1, dry = 0, i = 1;
  const char *timeout = NULL;
  char **mpi_args = calloc(argc + 1, sizeof(char *));
  int n_mpi_args = 0;
  if (!mpi_args) return 1;
  for (; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    if (a[0] != '-') break;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(launch_usage, stdout);
      free(mpi_args);
      return 0;
    }
    if (!strcmp(a, "--")) {
      i++;
      break;
    }
    if (!strcmp(a, "--no-prefix")) {
      prefix = 0;
      continue;
    }
    if (!strcmp(a, "--dry-run")) {
      dry = 1;
      continue;
    }
    /* options with a value: -n N, -nN, --nproc N, --nproc=N, ... */
    const char *names[] = {"-n", "--nproc", "--threads", "--timeout", "--mpi-arg"};
    int which = -1;
    for (int k = 0; k < 5; k++) {
      size_t l = strlen(names[k]);
      if (!strncmp(a, names[k], l) && (a[l] == 0 || a[l] == '=' || (k == 0 && a[l] >= '0' && a[l] <= '9'))) {
        which = k;
        v = a[l] == '=' ? a + l + 1 : a[l] ? a + l : (i + 1 < argc ? argv[++i] : NULL);
        break;
      }
    }
    if (which < 0) {
      free(mpi_args);
      return usage_error("unknown option '%s'", a);
    }
    if (!v) {
      free(mpi_args);
      return usage_error("option '%s' needs a value", names[which]);
    }
    if (which <= 1 && parse_count(v, 4096, &nproc)) {
      free(mpi_args);
      return usage_error("-n: expected a number of processes from 1 to 4096, got '%s'", v);
    }
    if (which == 2 && parse_count(v, 4096, &threads)) {
      free(mpi_args);
      return usage_error("--threads: expected a whole number from 1 to 4096, got '%s'", v);
    }
    if (which == 3) {
      char *end;
      double t = strtod(v, &end);
      if (*end || !(t > 0)) {
        free(mpi_args);
        return usage_error("--timeout: expected a number of seconds > 0, got '%s'", v);
      }
      timeout = v;
    }
    if (which == 4) mpi_args[n_mpi_args++] = (char *)v;
  }
  if (!nproc) {
    free(mpi_args);
    return usage_error("%s", "-n N is required (the number of processes to start)");
  }
  if (i >= argc) {
    free(mpi_args);
    return usage_error("%s", "expected a script (or run PIPELINE.yaml) after the options");
  }

  /* what every rank inherits */
  char value[64];
  if (threads) {
    snprintf(value, sizeof value, "%d", threads);
    setenv("EMBER_NUM_THREADS", value, 1);
  } else if (!getenv("EMBER_NUM_THREADS")) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(value, sizeof value, "%ld", cpus / nproc > 1 ? cpus / nproc : 1);
    setenv("EMBER_NUM_THREADS", value, 1);
  }
  if (timeout) setenv("EMBER_DIST_TIMEOUT", timeout, 1);
  if (!getenv("OMPI_MCA_btl_vader_single_copy_mechanism") && !cma_works())
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);

  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) {
    free(mpi_args);
    fprintf(stderr, "ember launch: cannot find the ember executable (/proc/self/exe)\n");
    return 1;
  }
  self[len] = 0;
  char np[16];
  snprintf(np, sizeof np, "%d", nproc);
  const char *mpirun = getenv("EMBER_MPIRUN");
  char **cmd = calloc(argc + n_mpi_args + 32, sizeof(char *));
  if (!cmd) {
    free(mpi_args);
    return 1;
  }
  int c = 0;
  cmd[c++] = (char *)(mpirun && *mpirun ? mpirun : "mpirun");
  cmd[c++] = "-np";
  cmd[c++] = np;
  cmd[c++] = "--oversubscribe";
  cmd[c++] = "--bind-to";
  cmd[c++] = "none";
  if (geteuid() == 0) cmd[c++] = "--allow-run-as-root";
  if (prefix) cmd[c++] = "--tag-output";
  const char *exported[] = {"EMBER_NUM_THREADS", "EMBER_DIST_TIMEOUT", "OMPI_MCA_btl_vader_single_copy_mechanism"};
  for (int k = 0; k < 3; k++)
    if (getenv(exported[k])) cmd[c++] = "-x", cmd[c++] = (char *)exported[k];
  for (int k = 0; k < n_mpi_args; k++) cmd[c++] = mpi_args[k];
  cmd[c++] = self;
  for (; i < argc; i++) cmd[c++] = argv[i];
  cmd[c] = NULL;

  int status;
  if (dry) {
    printf("EMBER_NUM_THREADS=%s", getenv("EMBER_NUM_THREADS"));
    for (int k = 0; cmd[k]; k++) printf(" %s", cmd[k]);
    printf("\n");
    status = 0;
  } else {
    fflush(stdout);
    fflush(stderr);
    status = run_prefixed(cmd, nproc, prefix);
  }
  free(cmd);
  free(mpi_args);
  return status;
}
