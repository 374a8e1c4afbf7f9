/* repl.c - the interactive loop of the ember executable.
 *
 * Reads statements (readline with history and completion on a terminal, plain getline
 * otherwise), runs each one, prints the values of expressions, and survives errors and
 * Ctrl-C. Pretty printing and completion candidates come from lua/ember/repl.lua: Lua is
 * the easier place to walk tables; the C side only edits lines and handles signals.
 *
 * Multi-line input follows lua.c: a chunk whose syntax error is at '<eof>' is incomplete and
 * the next line is appended. "return " .. chunk is tried first so that a bare expression
 * prints its values ("=expr" works too).
 *
 * Ctrl-C while a statement runs sets a count hook that raises "interrupted" (lua.c's
 * laction). LuaJIT never runs hooks inside compiled traces, so the chunks typed here run
 * with the JIT off for them and the functions they define (jit.off(chunk, true)); code
 * loaded from modules and scripts keeps the JIT. If the hook still cannot fire (a compiled
 * loop in a library, a long C call), a second Ctrl-C ends the process, as in lua.c. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <lua.h>
#include <luajit.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <unistd.h>
#include "ember/core.h"
#include "host.h"

#ifdef EMBER_HAVE_READLINE
#include <readline/history.h>
#include <readline/readline.h>
#endif

#define PROMPT "> "
#define PROMPT_MORE "... "
#define HISTORY_LINES 1000
#define CHUNK_NAME "=stdin"

typedef enum { LINE_OK, LINE_EOF, LINE_INTERRUPTED } line_status;

typedef struct repl {
  lua_State *L;
  int tty; /* stdin is a terminal: prompts, banner, line editing */
  int module_ref; /* ember.repl (format, complete), LUA_NOREF if it did not load */
  int jit_off_ref; /* jit.off, LUA_NOREF without the jit module */
  int failed; /* a statement raised an error (exit status 1 when not a terminal) */
} repl;

/* ---------------------------------------------------------------- signals */

static lua_State *volatile running; /* the state while a statement runs, else NULL */
static volatile sig_atomic_t got_sigint;
static volatile sig_atomic_t got_sigwinch;
static int wake_pipe[2] = {-1, -1}; /* handlers -> the wait for input (self-pipe) */

static void wake(void) {
  if (wake_pipe[1] >= 0) {
    ssize_t ignored = write(wake_pipe[1], "", 1);
    (void)ignored;
  }
}

static void interrupt_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  got_sigint = 0;
  luaL_error(L, "interrupted");
}

static void on_sigint(int sig) {
  (void)sig;
  got_sigint = 1;
  wake();
  lua_State *L = running;
  if (L) {
    lua_sethook(L, interrupt_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
    alarm(1); /* on_sigalrm says why nothing happened if the hook never fires */
  }
}

static void on_sigalrm(int sig) {
  (void)sig;
  static const char msg[] =
      "\n(still running: compiled code or a C call does not see the interrupt; "
      "Ctrl-C again ends ember)\n";
  if (running && got_sigint) {
    ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)ignored;
  }
}

static void on_sigwinch(int sig) {
  (void)sig;
  got_sigwinch = 1;
  wake();
}

/* No SA_RESTART: a signal must wake up the select/getline waiting for input. While a
 * statement runs the handler is one-shot, so that a second Ctrl-C ends the process. */
static void set_sigint(int reset_after_one) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = reset_after_one ? SA_RESETHAND : 0;
  sigaction(SIGINT, &sa, NULL);
}

/* SIGALRM and SIGWINCH: SA_RESTART, so that they never break a read in the user's code
 * (select() is interrupted all the same, which is what resizing needs). */
static void set_handler(int sig, void (*handler)(int)) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(sig, &sa, NULL);
}

/* ---------------------------------------------------------------- plain line reading */

static line_status read_line_plain(repl *r, const char *prompt, char **out) {
  if (r->tty) {
    fputs(prompt, stdout);
    fflush(stdout);
  }
  char *line = NULL;
  size_t cap = 0;
  got_sigint = 0;
  errno = 0;
  ssize_t n = getline(&line, &cap, stdin);
  if (n < 0) {
    free(line);
    if (got_sigint || errno == EINTR) {
      clearerr(stdin);
      got_sigint = 0;
      if (r->tty) fputc('\n', stdout);
      return LINE_INTERRUPTED;
    }
    if (r->tty) fputc('\n', stdout); /* Ctrl-D: the shell's prompt on a line of its own */
    return LINE_EOF;
  }
  if (n > 0 && line[n - 1] == '\n') line[--n] = 0;
  if (n > 0 && line[n - 1] == '\r') line[--n] = 0;
  *out = line;
  return LINE_OK;
}

/* ---------------------------------------------------------------- readline */
#ifdef EMBER_HAVE_READLINE

static char history_path[4096];
static lua_State *completion_L;
static int completion_ref = LUA_NOREF;
static char **candidates;
static int candidate_count;

static char *line_read;
static int line_done;

static void on_line(char *line) {
  line_read = line;
  line_done = 1;
  rl_callback_handler_remove();
}

/* The callback interface lets a signal interrupt the wait for input cleanly: the partial
 * line is dropped and the caller prompts again. The handlers also write a byte to
 * wake_pipe, which select() watches beside stdin, so a signal that lands between the check
 * of the flags and the wait is not slept through. (Blocking the signals instead would let
 * the kernel hand them to an OpenMP worker thread, and keys typed after a Ctrl-C could be
 * read before the handler ran.) */
static line_status read_line_readline(const char *prompt, char **out) {
  line_done = 0;
  line_read = NULL;
  got_sigint = 0;
  rl_callback_handler_install(prompt, on_line);
  int in = fileno(rl_instream);
  while (!line_done) {
    if (got_sigwinch) {
      got_sigwinch = 0;
      rl_resize_terminal();
    }
    if (got_sigint) {
      got_sigint = 0;
      rl_free_line_state();
      rl_callback_sigcleanup();
      rl_callback_handler_remove();
      fputs("\n", rl_outstream);
      fflush(rl_outstream);
      return LINE_INTERRUPTED;
    }
    fd_set fds;
    FD_ZERO(&fds);
    FD_SET(in, &fds);
    if (wake_pipe[0] >= 0) FD_SET(wake_pipe[0], &fds);
    int n = select((in > wake_pipe[0] ? in : wake_pipe[0]) + 1, &fds, NULL, NULL, NULL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      rl_callback_handler_remove();
      return LINE_EOF;
    }
    if (wake_pipe[0] >= 0 && FD_ISSET(wake_pipe[0], &fds)) {
      char drain[64];
      while (read(wake_pipe[0], drain, sizeof drain) > 0) {}
    }
    /* select() reports ready input ahead of a signal that came with it; the handler has
     * run by now, and a Ctrl-C must clear the line before the keys after it are read. */
    if (got_sigint || got_sigwinch || !FD_ISSET(in, &fds)) continue;
    rl_callback_read_char();
  }
  if (!line_read) {
    fputs("\n", rl_outstream); /* Ctrl-D: leave the shell's prompt on a line of its own */
    return LINE_EOF;
  }
  *out = line_read;
  return LINE_OK;
}

/* History: every entered line, appended to the file as it is entered (a crashed session
 * keeps its history), the file cut back to HISTORY_LINES at start and end. */
static void history_open(void) {
  const char *env = getenv("EMBER_HISTORY");
  const char *home = getenv("HOME");
  if (env) snprintf(history_path, sizeof history_path, "%s", env);
  else if (home && *home) snprintf(history_path, sizeof history_path, "%s/.ember_history", home);
  else history_path[0] = 0;
  using_history();
  stifle_history(HISTORY_LINES);
  if (!history_path[0]) return;
  read_history(history_path);
  history_truncate_file(history_path, HISTORY_LINES);
}

static void history_add(const char *line) {
  if (!*line) return;
  HIST_ENTRY *last = history_length > 0 ? history_get(history_base + history_length - 1) : NULL;
  if (last && !strcmp(last->line, line)) return;
  add_history(line);
  if (!history_path[0]) return;
  if (access(history_path, F_OK) == 0) append_history(1, history_path);
  else write_history(history_path);
}

static void history_close(void) {
  if (history_path[0] && access(history_path, F_OK) == 0) history_truncate_file(history_path, HISTORY_LINES);
}

static void free_candidates(void) {
  for (int i = 0; i < candidate_count; i++) free(candidates[i]);
  free(candidates);
  candidates = NULL;
  candidate_count = 0;
}

static char *next_candidate(const char *text, int state) {
  static int index;
  (void)text;
  if (state == 0) index = 0;
  if (index >= candidate_count) return NULL;
  return strdup(candidates[index++]);
}

/* Asks ember.repl.complete(word) for the candidates; the word spans a.b.c or obj:meth,
 * since '.' and ':' are not word breaks. */
static char **complete(const char *text, int start, int end) {
  (void)start;
  (void)end;
  rl_attempted_completion_over = 1; /* never fall back to file names */
  rl_completion_append_character = '\0';
  lua_State *L = completion_L;
  if (!L || completion_ref == LUA_NOREF) return NULL;
  int top = lua_gettop(L);
  free_candidates();
  lua_rawgeti(L, LUA_REGISTRYINDEX, completion_ref);
  lua_getfield(L, -1, "complete");
  lua_pushstring(L, text);
  if (lua_pcall(L, 1, 1, 0) == 0 && lua_istable(L, -1)) {
    int n = (int)lua_objlen(L, -1);
    candidates = calloc(n > 0 ? (size_t)n : 1, sizeof *candidates);
    for (int i = 1; candidates && i <= n; i++) {
      lua_rawgeti(L, -1, i);
      const char *s = lua_tostring(L, -1);
      if (s) candidates[candidate_count++] = strdup(s);
      lua_pop(L, 1);
    }
  }
  lua_settop(L, top);
  if (candidate_count == 0) return NULL;
  return rl_completion_matches(text, next_candidate);
}

static void readline_open(repl *r) {
  rl_readline_name = "ember";
  rl_catch_signals = 0; /* SIGINT and SIGWINCH are handled here */
  rl_catch_sigwinch = 0;
  rl_attempted_completion_function = complete;
  rl_basic_word_break_characters = " \t\n\"\\'`@$><=;|&{(+-*/%^~#,)}[]";
  rl_completer_word_break_characters = rl_basic_word_break_characters;
  completion_L = r->L;
  completion_ref = r->module_ref;
  history_open();
}

static void readline_close(void) {
  history_close();
  free_candidates();
  completion_L = NULL;
}
#endif /* EMBER_HAVE_READLINE */

static line_status read_line(repl *r, const char *prompt, char **out) {
#ifdef EMBER_HAVE_READLINE
  if (r->tty) return read_line_readline(prompt, out);
#endif
  return read_line_plain(r, prompt, out);
}

static void remember_line(repl *r, const char *line) {
#ifdef EMBER_HAVE_READLINE
  if (r->tty) history_add(line);
#else
  (void)r;
  (void)line;
#endif
}

/* ---------------------------------------------------------------- parsing */

/* lua.c's test for an incomplete chunk: the syntax error sits at the end of the input. */
static int is_incomplete(lua_State *L) {
  size_t len;
  const char *msg = lua_tolstring(L, -1, &len);
  static const char eof_mark[] = "'<eof>'";
  size_t mark = sizeof eof_mark - 1;
  return msg && len >= mark && !strcmp(msg + len - mark, eof_mark);
}

typedef enum { PARSE_OK, PARSE_MORE, PARSE_ERROR } parse_status;

static int load_text(lua_State *L, const char *fmt, const char *chunk) {
  lua_pushfstring(L, fmt, chunk);
  int status = luaL_loadbuffer(L, lua_tostring(L, -1), lua_objlen(L, -1), CHUNK_NAME);
  lua_remove(L, -2);
  return status;
}

/* Compiles the chunk: first as "return chunk" (an expression whose values get printed),
 * then as a statement. Leaves the function, or the statement's error message.
 * An expression runs as "return (...)(1, chunk)", called with pass_values (select(1, ...)):
 * in a plain "return f(x)" the call is a tail call, and an error raised in f would lose
 * the frame and the position of the line typed. */
static parse_status parse(lua_State *L, const char *chunk, int *expression) {
  if (chunk[0] == '=') chunk++; /* "=expr" is the old spelling of "return expr" */
  *expression = 0;
  int status = load_text(L, "return %s", chunk);
  if (status == 0) {
    lua_pop(L, 1);
    *expression = load_text(L, "return (...)(1, %s\n)", chunk) == 0;
    if (*expression) return PARSE_OK;
    lua_pop(L, 1);
    load_text(L, "return %s", chunk); /* e.g. "1;": fine after return, not in a call */
    return PARSE_OK;
  }
  int expr_incomplete = status == LUA_ERRSYNTAX && is_incomplete(L);
  lua_pop(L, 1);
  status = luaL_loadbuffer(L, chunk, strlen(chunk), CHUNK_NAME);
  if (status == 0) return PARSE_OK;
  if (status == LUA_ERRSYNTAX && (expr_incomplete || is_incomplete(L))) return PARSE_MORE;
  return PARSE_ERROR;
}

/* "?name" or "name?": prints ember.repl.help's text and returns 1; 0 for any other line. */
static int show_help(repl *r, const char *line) {
  lua_State *L = r->L;
  if (r->module_ref == LUA_NOREF || !strchr(line, '?')) return 0;
  lua_rawgeti(L, LUA_REGISTRYINDEX, r->module_ref);
  lua_getfield(L, -1, "help");
  lua_remove(L, -2);
  lua_pushstring(L, line);
  if (lua_pcall(L, 1, 1, 0) != 0 || !lua_isstring(L, -1)) {
    lua_pop(L, 1);
    return 0;
  }
  printf("%s\n", lua_tostring(L, -1));
  fflush(stdout);
  lua_pop(L, 1);
  return 1;
}

/* Reads lines until they make a complete chunk; leaves the compiled function on the stack.
 * Returns LINE_OK (function pushed, or an error already reported), LINE_EOF, or
 * LINE_INTERRUPTED (nothing pushed). *compiled: 0 nothing pushed, 1 a statement, 2 an
 * expression to be called with pass_values (see parse). */
static line_status read_chunk(repl *r, int *compiled) {
  lua_State *L = r->L;
  char *line;
  int expression;
  *compiled = 0;
  line_status ls;
  do {
    ls = read_line(r, PROMPT, &line);
    if (ls != LINE_OK) return ls;
    if (strspn(line, " \t") == strlen(line)) free(line), line = NULL;
  } while (!line);
  remember_line(r, line);
  if (show_help(r, line)) {
    free(line);
    return LINE_OK;
  }
  lua_pushstring(L, line); /* the chunk so far */
  free(line);
  for (;;) {
    parse_status ps = parse(L, lua_tostring(L, -1), &expression);
    if (ps == PARSE_OK) {
      lua_remove(L, -2);
      *compiled = expression ? 2 : 1;
      return LINE_OK;
    }
    if (ps == PARSE_ERROR) break;
    lua_pop(L, 1); /* the incomplete-chunk message */
    ls = read_line(r, PROMPT_MORE, &line);
    if (ls == LINE_INTERRUPTED) {
      lua_pop(L, 1);
      return ls;
    }
    if (ls == LINE_EOF) { /* the chunk never got complete: show why */
      parse(L, lua_tostring(L, -1), &expression);
      break;
    }
    remember_line(r, line);
    lua_pushfstring(L, "%s\n%s", lua_tostring(L, -1), line);
    free(line);
    lua_remove(L, -2);
  }
  fflush(stdout);
  fprintf(stderr, "%s\n", lua_tostring(L, -1));
  fflush(stderr);
  lua_pop(L, 2);
  r->failed = 1;
  return LINE_OK;
}

/* ---------------------------------------------------------------- running and printing */

/* Prints the values between base+1 and the top: ember.repl.format(...) joins them with
 * tabs, pretty-printing tables and tensors. */
static void print_values(repl *r, int base) {
  lua_State *L = r->L;
  int n = lua_gettop(L) - base;
  if (n <= 0) return;
  if (r->module_ref != LUA_NOREF) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, r->module_ref);
    lua_getfield(L, -1, "format");
    lua_remove(L, -2);
  } else {
    lua_getglobal(L, "print"); /* fallback: print separates with tabs too */
  }
  lua_insert(L, base + 1);
  if (em_host_pcall(L, n, 1) == 0) {
    if (lua_isstring(L, -1)) printf("%s\n", lua_tostring(L, -1));
    fflush(stdout);
  } else {
    fprintf(stderr, "error while printing the result: %s\n", lua_tostring(L, -1));
    fflush(stderr);
  }
  lua_settop(L, base);
}

/* select(1, ...) without depending on the global select: returns all but the first. */
static int pass_values(lua_State *L) { return lua_gettop(L) - 1; }

static void run_chunk(repl *r, int expression) {
  lua_State *L = r->L;
  int base = lua_gettop(L) - 1; /* below the function */
  if (r->jit_off_ref != LUA_NOREF) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, r->jit_off_ref);
    lua_pushvalue(L, -2);
    lua_pushboolean(L, 1);
    if (lua_pcall(L, 2, 0, 0)) lua_pop(L, 1);
  }
  got_sigint = 0;
  set_sigint(1);
  running = L;
  if (expression) lua_pushcfunction(L, pass_values);
  int status = em_host_pcall(L, expression ? 1 : 0, LUA_MULTRET);
  running = NULL;
  alarm(0);
  set_sigint(0);
  if (got_sigint) { /* a Ctrl-C that came too late for the hook */
    lua_sethook(L, NULL, 0, 0);
    got_sigint = 0;
  }
  if (status) {
    fflush(stdout);
    fprintf(stderr, "%s\n", lua_tostring(L, -1) ? lua_tostring(L, -1) : "(error)");
    fflush(stderr);
    lua_settop(L, base);
    r->failed = 1;
    return;
  }
  print_values(r, base);
}

/* ---------------------------------------------------------------- setup */

static int ref_field(lua_State *L, const char *module, const char *field) {
  lua_getglobal(L, "require");
  lua_pushstring(L, module);
  if (lua_pcall(L, 1, 1, 0)) {
    if (strcmp(module, "jit")) fprintf(stderr, "ember: %s\n", lua_tostring(L, -1));
    lua_pop(L, 1);
    return LUA_NOREF;
  }
  if (field) {
    lua_getfield(L, -1, field);
    lua_remove(L, -2);
  }
  return luaL_ref(L, LUA_REGISTRYINDEX);
}

static void print_banner(lua_State *L) {
  char devices[384];
  em_host_gpu_summary(devices, sizeof devices);
  lua_getglobal(L, "jit");
  lua_getfield(L, -1, "version");
  const char *jit = lua_isstring(L, -1) ? lua_tostring(L, -1) : LUAJIT_VERSION;
  printf("ember %s | %s | threads: %d | devices: %s\n", em_version(), jit, em_get_num_threads(), devices);
  lua_pop(L, 2);
#ifdef EMBER_HAVE_READLINE
  printf("The library is the global `ember`. Tab completes, Ctrl-C interrupts, Ctrl-D exits.\n");
#else
  printf("The library is the global `ember`. Ctrl-C interrupts, Ctrl-D exits.\n");
#endif
  fflush(stdout);
}

int em_repl_run(lua_State *L) {
  repl r = {.L = L, .tty = isatty(STDIN_FILENO), .failed = 0};
  em_host_load_ember(L); /* reported if it fails; plain Lua still works */
  r.module_ref = ref_field(L, "ember.repl", NULL);
  r.jit_off_ref = ref_field(L, "jit", "off");
  if (r.tty) print_banner(L);
#ifdef EMBER_HAVE_READLINE
  if (r.tty) readline_open(&r);
#endif
  if (r.tty && pipe2(wake_pipe, O_NONBLOCK | O_CLOEXEC) != 0) wake_pipe[0] = wake_pipe[1] = -1;
  set_sigint(0);
  set_handler(SIGALRM, on_sigalrm);
  if (r.tty) set_handler(SIGWINCH, on_sigwinch);
  for (;;) {
    int compiled;
    line_status ls = read_chunk(&r, &compiled);
    if (ls == LINE_EOF) break;
    if (ls == LINE_OK && compiled) run_chunk(&r, compiled == 2);
  }
#ifdef EMBER_HAVE_READLINE
  if (r.tty) readline_close();
#endif
  signal(SIGINT, SIG_DFL);
  signal(SIGWINCH, SIG_DFL);
  signal(SIGALRM, SIG_DFL);
  for (int i = 0; i < 2; i++) {
    if (wake_pipe[i] >= 0) close(wake_pipe[i]);
    wake_pipe[i] = -1;
  }
  luaL_unref(L, LUA_REGISTRYINDEX, r.module_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, r.jit_off_ref);
  return r.tty ? 0 : r.failed;
}
