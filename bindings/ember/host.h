/* host.h - what the pieces of the ember executable share: running a chunk with a traceback,
 * reporting errors, and the REPL (repl.c). */
#ifndef EMBER_BINDINGS_HOST_H
#define EMBER_BINDINGS_HOST_H

#include <lua.h>
#include <stddef.h>

/* Message handler for lua_pcall: turns the error value into "message\nstack traceback:...". */
int em_host_traceback(lua_State *L);

/* Calls the function under nargs arguments on the stack top with em_host_traceback as
 * message handler; leaves nresults (or all with LUA_MULTRET) results, or the error message. */
int em_host_pcall(lua_State *L, int nargs, int nresults);

/* Prints the error message on the stack top to stderr, prefixed with "ember: ", and pops it. */
void em_host_report(lua_State *L);

/* Makes sure the global `ember` is the loaded library (the REPL preloads it eagerly);
 * returns 0, or 1 after reporting why it could not be loaded. */
int em_host_load_ember(lua_State *L);

/* A new Lua state set up as the host's (standard libraries, package paths, preloaded
 * modules); NULL when out of memory. */
lua_State *em_host_new_state(void);

/* bindings/ember/threads.c: `require 'ember_threads'`, Lua states on threads of their own. */
int luaopen_ember_threads(lua_State *L);

/* bindings/ember/blas_env.c: sets OPENBLAS_CORETYPE for this CPU and re-executes the program
 * once, before anything else runs (OpenBLAS reads it when it loads). */
void ember_select_blas_kernels(char **argv);
/* After the choice: the known-answer check of the kernels (cached per machine), falling back
 * to safer ones by re-executing; ember_blas_status says which ran and why (`ember info`). */
void ember_verify_blas_kernels(char **argv);
const char *ember_blas_status(void);

/* bindings/ember/cuda_info.c: the GPU lines of `ember info`, and the REPL banner's device list
 * ("cpu, cuda x1 (NVIDIA H200, 140 GiB)" or "cpu (cuda: none)"). */
void em_host_print_cuda(void);
void em_host_gpu_summary(char *buf, size_t n);

/* Runs the interactive loop on stdin: prompts, line editing, history and completion when
 * stdin is a terminal, plain statement-by-statement reading when it is not. Returns the
 * process exit status (0 on end of input). */
int em_repl_run(lua_State *L);

#endif
