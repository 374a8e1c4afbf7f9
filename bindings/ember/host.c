/* host.c - the ember executable: LuaJIT with libember linked in.
 *
 * Handles the command line the way luajit does (options, then a script and its arguments,
 * the global `arg` with negative indices for the interpreter's own words), plus ember's
 * commands (info, run, launch) and the REPL (repl.c). Startup stays cheap: the ember
 * library is loaded the first time a script touches the global `ember` (a metatable on
 * _G), so scripts that never use it do not pay for it. */
#include <errno.h>
#include <limits.h>
#include <lauxlib.h>
#include <lua.h>
#include <luajit.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ember/core.h"
#include "host.h"

#define MAX_THREADS 4096

/* The YAML reader (bindings/ember/yaml.c) and the OpenBLAS kernel choice (bindings/ember/blas_env.c);
 * weak, so that a build without them still links. */
int luaopen_ember_yaml(lua_State *L) __attribute__((weak));
/* The Jupyter kernel's wire (bindings/ember/kernel_wire.c), absent without ZeroMQ or libcrypto. */
int luaopen_ember_kernel_wire(lua_State *L) __attribute__((weak));
void ember_select_blas_kernels(char **argv) __attribute__((weak));
void ember_verify_blas_kernels(char **argv) __attribute__((weak));
const char *ember_blas_status(void) __attribute__((weak));
/* `ember launch` (bindings/ember/launch.c): argv[0] is "launch"; returns the exit status. */
int em_host_launch(int argc, char **argv);

static const char *usage_text =
    "usage: ember [options] [script.lua [args...]]\n"
    "       ember COMMAND [args...]\n"
    "\n"
    "Commands:\n"
    "  ember                          start the REPL (statements are read from stdin, without\n"
    "                                 prompts, when stdin is not a terminal)\n"
    "  ember script.lua [args...]     run a script: arg[0] is the script, arg[1..] its\n"
    "                                 arguments, which the chunk also receives as ...\n"
    "  ember - [args...]              run a script read from stdin\n"
    "  ember info                     version, build features, BLAS, threads, devices, paths\n"
    "  ember run PIPELINE.yaml [key.path=value...]\n"
    "                                 run a YAML pipeline (ember run --help)\n"
    "  ember reader --connect tcp://HOST:PORT PIPELINE.yaml\n"
    "                                 serve a pipeline's data to trainers (ember reader --help)\n"
    "  ember kernel -f CONNECTION.json  a Jupyter kernel (ember kernel --help; install:\n"
    "                                 ember kernel install [--user|--prefix P])\n"
    "  ember serve PIPELINE.yaml [key.path=value...]\n"
    "                                 serve models over HTTP (KServe v2) with dynamic batching\n"
    "                                 (ember serve --help)\n"
    "  ember launch -n N script.lua [args...]\n"
    "  ember launch -n N run PIPELINE.yaml [key.path=value...]\n"
    "                                 start N processes through mpirun (ember launch --help)\n"
    "\n"
    "Options (before the script; -e, -l and -j run in the order given, then the script):\n"
    "  -e CODE         run the Lua code CODE (may be repeated)\n"
    "  -l NAME         require library NAME and store it in the global NAME\n"
    "  -i              enter the REPL after the script or -e code (even if they fail),\n"
    "                  with their globals\n"
    "  -j CMD          LuaJIT control: -j off, -j on, -j flush, -j v, -j dump, -j p\n"
    "  --threads N     threads for ember's loops and OpenBLAS (default: EMBER_NUM_THREADS,\n"
    "                  else all cores)\n"
    "  -v, --version   print the version and exit\n"
    "  -h, --help      print this help and exit\n"
    "  --              stop handling options (a script named like a command: ember -- info)\n"
    "\n"
    "Environment:\n"
    "  EMBER_NUM_THREADS   default thread count\n"
    "  EMBER_HISTORY       REPL history file (default ~/.ember_history; empty: no history)\n"
    "  LUA_PATH, LUA_CPATH searched after ember's own Lua folders\n"
    "\n"
    "In scripts, -e code and the REPL the global `ember` is the library (require 'ember').\n";

/* ---------------------------------------------------------------- running Lua */

int em_host_traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (!msg) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) msg = lua_tostring(L, -1);
    else msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

int em_host_pcall(lua_State *L, int nargs, int nresults) {
  int base = lua_gettop(L) - nargs; /* the function's slot */
  lua_pushcfunction(L, em_host_traceback);
  lua_insert(L, base);
  int status = lua_pcall(L, nargs, nresults, base);
  lua_remove(L, base);
  return status;
}

void em_host_report(lua_State *L) {
  const char *msg = lua_tostring(L, -1);
  fprintf(stderr, "ember: %s\n", msg ? msg : "(error object is not a string)");
  fflush(stderr);
  lua_pop(L, 1);
}

/* Runs a chunk just loaded (status from luaL_load*); returns the exit status, 0 or 1. */
static int run_loaded(lua_State *L, int status) {
  if (status == 0) status = em_host_pcall(L, 0, 0);
  if (status) em_host_report(L);
  return status ? 1 : 0;
}

/* Run once before any user code.
 * The lazy global `ember`: the first read of the global loads the library, stores it with
 * rawset (later reads never reach the metatable) and removes the metatable again.
 * os.exit closes the Lua state unless told otherwise (LuaJIT's second argument), so that
 * finalizers run: tensors are released, files flushed, and the sanitizer build sees no
 * memory still held by Lua at exit as a leak. */
static const char *startup_code =
    "local exit = os.exit\n"
    "os.exit = function(code, close)\n"
    "  if close == nil then close = true end\n"
    "  return exit(code, close)\n"
    "end\n"
    "local mt = {}\n"
    "mt.__index = function(g, k)\n"
    "  if k ~= 'ember' then return nil end\n"
    "  local ember = require 'ember'\n"
    "  rawset(g, 'ember', ember)\n"
    "  if getmetatable(g) == mt then setmetatable(g, nil) end\n"
    "  return ember\n"
    "end\n"
    "setmetatable(_G, mt)\n";

int em_host_load_ember(lua_State *L) {
  lua_getglobal(L, "require");
  lua_pushliteral(L, "ember");
  if (em_host_pcall(L, 1, 1)) {
    em_host_report(L);
    return 1;
  }
  lua_setglobal(L, "ember");
  return 0;
}

/* The folder this executable lives in (no trailing slash), from /proc/self/exe; 0 on success. */
static int exe_dir(char *out, size_t n) {
  ssize_t len = readlink("/proc/self/exe", out, n - 1);
  if (len <= 0) return -1;
  out[len] = '\0';
  char *slash = strrchr(out, '/');
  if (!slash || slash == out) return -1;
  *slash = '\0';
  return 0;
}

/* True when dir is the build folder this executable was built in (then the Lua library comes
 * from the source tree, and the generated cdefs and ember_yaml.so from the build folder). */
static int is_build_dir(const char *dir) {
  char a[PATH_MAX], b[PATH_MAX];
  return realpath(dir, a) && realpath(EMBER_BUILD_DIR, b) && strcmp(a, b) == 0;
}

/* package.path/cpath, searched before whatever LUA_PATH/LUA_CPATH gave.
 * In the build folder: the source lua folder (edits take effect without a rebuild), then the
 * build lua folder (generated cdefs) and the build folder (ember_yaml.so).
 * Installed: relative to this executable, PREFIX/bin/ember finding PREFIX/share/lua/5.1 and
 * PREFIX/lib/lua/5.1 (cmake --install, CMakeLists.txt), so a prefix can be moved and an
 * installed ember never reads the source tree it was built from. */
static void set_paths(lua_State *L) {
  char dir[PATH_MAX];
  int have_dir = exe_dir(dir, sizeof dir) == 0;
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  if (have_dir && !is_build_dir(dir)) {
    lua_pushfstring(L, "%s/../share/lua/5.1/?.lua;%s/../share/lua/5.1/?/init.lua;%s", dir, dir, lua_tostring(L, -1));
  } else {
    lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s/?.lua;%s", EMBER_SOURCE_LUA_DIR, EMBER_SOURCE_LUA_DIR,
                    EMBER_BUILD_LUA_DIR, lua_tostring(L, -1));
  }
  lua_setfield(L, -3, "path");
  lua_pop(L, 1);
  lua_getfield(L, -1, "cpath");
  if (have_dir && !is_build_dir(dir)) lua_pushfstring(L, "%s/../lib/lua/5.1/?.so;%s", dir, lua_tostring(L, -1));
  else lua_pushfstring(L, "%s/?.so;%s", EMBER_BUILD_DIR, lua_tostring(L, -1));
  lua_setfield(L, -3, "cpath");
  lua_pop(L, 1);
  /* bindings/ember/yaml.c is linked in too when libyaml was found: require 'ember_yaml' then
   * needs no ember_yaml.so on the cpath. */
  if (luaopen_ember_yaml) {
    lua_getfield(L, -1, "preload");
    lua_pushcfunction(L, luaopen_ember_yaml);
    lua_setfield(L, -2, "ember_yaml");
    lua_pop(L, 1);
  }
  if (luaopen_ember_kernel_wire) {
    lua_getfield(L, -1, "preload");
    lua_pushcfunction(L, luaopen_ember_kernel_wire);
    lua_setfield(L, -2, "ember_kernel_wire");
    lua_pop(L, 1);
  }
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, luaopen_ember_threads);
  lua_setfield(L, -2, "ember_threads");
  lua_pop(L, 1);
  lua_pop(L, 1);
  /* libember is linked into this executable; ember/init.lua finds it through ffi.C. */
  lua_pushstring(L, em_version());
  lua_setglobal(L, "_EMBER_HOST");
}

/* arg as luajit builds it: arg[0] is the script (argv[script]), the interpreter and its
 * options get negative indices, the script's arguments positive ones. */
static void set_arg_table(lua_State *L, int argc, char **argv, int script) {
  lua_createtable(L, argc - script, script + 1);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - script);
  }
  lua_setglobal(L, "arg");
}

static int run_script(lua_State *L, int argc, char **argv, int script) {
  const char *name = argv[script];
  int status = luaL_loadfile(L, strcmp(name, "-") ? name : NULL);
  if (status) return run_loaded(L, status);
  int nargs = argc - script - 1;
  luaL_checkstack(L, nargs + 2, "too many arguments to the script");
  for (int i = script + 1; i < argc; i++) lua_pushstring(L, argv[i]);
  status = em_host_pcall(L, nargs, 0);
  if (status) em_host_report(L);
  return status ? 1 : 0;
}

/* -l NAME: require it and keep it in the global NAME. */
static int run_require(lua_State *L, const char *name) {
  lua_getglobal(L, "require");
  lua_pushstring(L, name);
  int status = em_host_pcall(L, 1, 1);
  if (status) {
    em_host_report(L);
    return 1;
  }
  lua_setglobal(L, name);
  return 0;
}

/* -j CMD[=ARG]: jit.on/off/flush, or the jit.* module CMD started with ARG (as luajit). */
static const char *jit_cmd_code =
    "local cmd = ...\n"
    "local name, opt = cmd:match('^([^=]*)=?(.*)$')\n"
    "if opt == '' then opt = nil end\n"
    "if name == 'on' or name == 'off' or name == 'flush' then return jit[name]() end\n"
    "local ok, m = pcall(require, 'jit.' .. name)\n"
    "if not ok or type(m) ~= 'table' or not m.start then\n"
    "  error(\"unknown -j command '\" .. name .. \"' (expected on, off, flush or a jit.* module \"\n"
    "        .. 'such as v, dump, p)', 0)\n"
    "end\n"
    "m.start(opt)\n";

static int run_jit_cmd(lua_State *L, const char *cmd) {
  int status = luaL_loadstring(L, jit_cmd_code);
  if (status == 0) {
    lua_pushstring(L, cmd);
    status = em_host_pcall(L, 1, 0);
  }
  if (status) em_host_report(L);
  return status ? 1 : 0;
}

/* ---------------------------------------------------------------- command line */

typedef struct options {
  int script; /* argv index of the script (or command), argc when there is none */
  int after_dashes; /* the script came after "--": never a command */
  int interactive; /* -i */
  int exec; /* -e or -l given */
  int threads; /* --threads N, 0 when not given */
  int other; /* -e, -l, -i or -j given (commands take none of them) */
} options;

static int usage_error(const char *fmt, const char *what) {
  fprintf(stderr, "ember: ");
  fprintf(stderr, fmt, what);
  fprintf(stderr, " (see ember --help)\n");
  return 2;
}

static int parse_threads(const char *s, int *out) {
  char *end;
  errno = 0;
  long n = strtol(s, &end, 10);
  if (!*s || *end || errno || n < 1 || n > MAX_THREADS) return 1;
  *out = (int)n;
  return 0;
}

/* Option letters that take a value, attached (-eCODE) or as the next word (-e CODE). */
static const char *option_value(int argc, char **argv, int *i) {
  if (argv[*i][2]) return argv[*i] + 2;
  if (*i + 1 >= argc) return NULL;
  return argv[++*i];
}

/* First pass: validate everything before running anything. Returns -1 to go on, else the
 * exit status (0 after --help/--version, 2 on a usage error). */
static int collect_options(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->script = argc;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (a[0] != '-' || !strcmp(a, "-")) {
      o->script = i;
      return -1;
    }
    if (!strcmp(a, "--")) {
      if (i + 1 < argc) o->script = i + 1, o->after_dashes = 1;
      return -1;
    }
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(usage_text, stdout);
      return 0;
    }
    if (!strcmp(a, "-v") || !strcmp(a, "--version")) {
      printf("ember %s (%s)\n", em_version(), LUAJIT_VERSION);
      return 0;
    }
    if (!strcmp(a, "-i")) {
      o->interactive = o->other = 1;
    } else if (!strncmp(a, "--threads", 9) && (a[9] == 0 || a[9] == '=')) {
      const char *v = a[9] == '=' ? a + 10 : (i + 1 < argc ? argv[++i] : NULL);
      if (!v) return usage_error("option '%s' needs a thread count", "--threads");
      if (parse_threads(v, &o->threads))
        return usage_error("--threads: expected a whole number from 1 to 4096, got '%s'", v);
    } else if (a[1] == 'e' || a[1] == 'l' || a[1] == 'j') {
      char opt[3] = {'-', a[1], 0};
      if (!option_value(argc, argv, &i))
        return usage_error(a[1] == 'e'   ? "option '%s' needs Lua code to run"
                           : a[1] == 'l' ? "option '%s' needs a library name"
                                         : "option '%s' needs a command (on, off, flush, v, dump, p)",
                           opt);
      if (a[1] != 'j') o->exec = 1;
      o->other = 1;
    } else {
      return usage_error("unknown option '%s'", a);
    }
  }
  return -1;
}

/* Second pass: run -e, -l and -j in the order they were given. */
static int run_options(lua_State *L, int argc, char **argv, const options *o) {
  for (int i = 1; i < o->script && i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--")) break;
    if (!strncmp(a, "--threads", 9)) {
      if (!a[9]) i++;
      continue;
    }
    if (a[1] != 'e' && a[1] != 'l' && a[1] != 'j') continue;
    const char *v = option_value(argc, argv, &i);
    int status;
    if (a[1] == 'e') status = run_loaded(L, luaL_loadbuffer(L, v, strlen(v), "=(command line)"));
    else if (a[1] == 'l') status = run_require(L, v);
    else status = run_jit_cmd(L, v);
    if (status) return status;
  }
  return 0;
}

/* EMBER_NUM_THREADS is read by the runtime; a malformed value is only worth a warning. */
static void check_thread_env(void) {
  const char *env = getenv("EMBER_NUM_THREADS");
  int n;
  if (env && *env && parse_threads(env, &n))
    fprintf(stderr, "ember: ignoring EMBER_NUM_THREADS='%s' (expected a whole number from 1 to 4096)\n", env);
}

/* ---------------------------------------------------------------- commands */

lua_State *em_host_new_state(void) {
  lua_State *L = luaL_newstate();
  if (!L) {
    fprintf(stderr, "ember: cannot create the Lua state (out of memory)\n");
    return NULL;
  }
  luaL_openlibs(L);
  set_paths(L);
  return L;
}

static void print_field(lua_State *L, const char *label, const char *table, const char *field) {
  lua_getglobal(L, table);
  lua_getfield(L, -1, field);
  printf("%-10s %s\n", label, lua_isstring(L, -1) ? lua_tostring(L, -1) : "?");
  lua_pop(L, 2);
}

static int cmd_info(lua_State *L) {
  printf("ember %s\n", em_version());
  printf("%-10s %s\n", "version:", em_version());
  printf("%-10s %s\n", "features:", em_build_features());
  const char *blas = em_blas_config();
  printf("%-10s %s\n", "blas:", blas ? blas : "unknown");
  if (ember_blas_status) printf("%-10s %s\n", "kernels:", ember_blas_status());
  printf("%-10s %s\n", "onednn:", em_dnnl_config());
  printf("%-10s %d\n", "threads:", em_get_num_threads());
  printf("devices:\n");
  printf("  cpu:     1 (%d threads)\n", em_get_num_threads());
  em_host_print_cuda();
  lua_getglobal(L, "jit");
  lua_getfield(L, -1, "version");
  lua_getfield(L, -2, "arch");
  printf("%-10s %s (%s)\n", "luajit:", lua_tostring(L, -2), lua_tostring(L, -1));
  lua_pop(L, 3);
  print_field(L, "lua path:", "package", "path");
  print_field(L, "lua cpath:", "package", "cpath");
  return 0;
}

/* `ember run PIPELINE.yaml [key.path=value...]`: the pipeline runner is Lua
 * (lua/ember/pipeline); `ember reader --connect ENDPOINT PIPELINE.yaml`: a data reader
 * (lua/ember/pipeline/reader.lua over lua/ember/data/worker.lua). The module's main(args) returns the exit status. */
static int cmd_lua_main(lua_State *L, const char *module, int argc, char **argv, int first) {
  lua_getglobal(L, "require");
  lua_pushstring(L, module);
  if (em_host_pcall(L, 1, 1)) {
    em_host_report(L);
    return 1;
  }
  lua_getfield(L, -1, "main");
  lua_createtable(L, argc - first, 0);
  for (int i = first; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - first + 1);
  }
  if (em_host_pcall(L, 1, 1)) {
    em_host_report(L);
    return 1;
  }
  int status = lua_isnumber(L, -1) ? (int)lua_tointeger(L, -1) : 1;
  lua_pop(L, 2);
  return status;
}

/* `ember info|run|reader|launch ...`: returns -1 when argv[o->script] is not a command. */
static int run_command(lua_State *L, int argc, char **argv, const options *o) {
  if (o->script >= argc || o->after_dashes) return -1;
  const char *name = argv[o->script];
  int is_info = !strcmp(name, "info"), is_run = !strcmp(name, "run");
  int is_launch = !strcmp(name, "launch"), is_reader = !strcmp(name, "reader");
  int is_kernel = !strcmp(name, "kernel");
  int is_serve = !strcmp(name, "serve");
  if (!is_info && !is_run && !is_launch && !is_reader && !is_kernel && !is_serve) return -1;
  if (o->other) {
    fprintf(stderr, "ember %s: -e, -l, -i and -j do not apply to commands (see ember --help)\n", name);
    return 2;
  }
  if (is_run) return cmd_lua_main(L, "ember.pipeline", argc, argv, o->script + 1);
  if (is_serve) return cmd_lua_main(L, "ember.serve.job", argc, argv, o->script + 1);
  if (is_reader) return cmd_lua_main(L, "ember.pipeline.reader", argc, argv, o->script + 1);
  if (is_kernel) return cmd_lua_main(L, "ember.kernel", argc, argv, o->script + 1);
  if (is_launch) return em_host_launch(argc - o->script, argv + o->script);
  if (o->script + 1 < argc) {
    fprintf(stderr, "ember info: unexpected argument '%s' (info takes none)\n", argv[o->script + 1]);
    return 2;
  }
  return cmd_info(L);
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv) {
  if (ember_select_blas_kernels) ember_select_blas_kernels(argv); /* may re-exec, once */
  if (ember_verify_blas_kernels) ember_verify_blas_kernels(argv); /* may re-exec with safer kernels */
  options o;
  int status = collect_options(argc, argv, &o);
  if (status >= 0) return status;
  check_thread_env();
  if (o.threads) em_set_num_threads(o.threads);

  lua_State *L = em_host_new_state();
  if (!L) return 1;
  status = run_command(L, argc, argv, &o);
  if (status >= 0) {
    lua_close(L);
    return status;
  }

  if (luaL_dostring(L, startup_code)) {
    em_host_report(L);
    lua_close(L);
    return 1;
  }
  set_arg_table(L, argc, argv, o.script < argc ? o.script : argc);
  status = run_options(L, argc, argv, &o);
  if (!status && o.script < argc) status = run_script(L, argc, argv, o.script);
  if (o.interactive || (!status && o.script >= argc && !o.exec)) {
    /* -i runs the REPL after a failed script too, to look at what it left behind */
    int repl_status = em_repl_run(L);
    if (!status) status = repl_status;
  }
  lua_close(L); /* runs finalizers: tensors still held by Lua are released */
  return status;
}
