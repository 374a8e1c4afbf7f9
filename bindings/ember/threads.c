/* threads.c - Lua states on threads of their own (`require 'ember_threads'`, preloaded by
 * the ember host), for `ember serve`'s workers: each worker is a separate Lua state running
 * on its own thread, so a model's forward runs in parallel with the others and with the
 * main state, with nothing shared on the Lua side (C objects are shared by address).
 *
 *   local threads = require 'ember_threads'
 *   local t = threads.spawn("local payload = ...; return run(payload)", payload_string)
 *   local ok, err = t:join()   -- false and the error (with traceback) when the chunk raised
 *
 * The new state is set up as the host's own (libraries, package paths, ember_yaml). */
#include <lauxlib.h>
#include <lua.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "host.h"

#define THREAD_MT "ember.thread"

typedef struct lthread {
  pthread_t tid;
  int started, joined;
  char *code, *payload;
  size_t code_len, payload_len;
  char *error; /* set by the thread when the chunk raised */
} lthread;

static void *thread_main(void *arg) {
  lthread *t = arg;
  lua_State *L = em_host_new_state();
  if (!L) {
    t->error = strdup("cannot create a Lua state (out of memory)");
    return NULL;
  }
  int status = luaL_loadbuffer(L, t->code, t->code_len, "=(thread)");
  if (!status) {
    lua_pushlstring(L, t->payload, t->payload_len);
    status = em_host_pcall(L, 1, 0);
  }
  if (status) {
    const char *msg = lua_tostring(L, -1);
    t->error = strdup(msg ? msg : "(error object is not a string)");
  }
  lua_close(L);
  return NULL;
}

static int l_spawn(lua_State *L) {
  size_t code_len, payload_len;
  const char *code = luaL_checklstring(L, 1, &code_len);
  const char *payload = luaL_optlstring(L, 2, "", &payload_len);
  lthread *t = lua_newuserdata(L, sizeof *t);
  memset(t, 0, sizeof *t);
  luaL_getmetatable(L, THREAD_MT);
  lua_setmetatable(L, -2);
  t->code = malloc(code_len + 1);
  t->payload = malloc(payload_len + 1);
  if (!t->code || !t->payload) return luaL_error(L, "ember_threads.spawn: out of memory");
  memcpy(t->code, code, code_len);
  memcpy(t->payload, payload, payload_len);
  t->code_len = code_len;
  t->payload_len = payload_len;
  int rc = pthread_create(&t->tid, NULL, thread_main, t);
  if (rc) return luaL_error(L, "ember_threads.spawn: pthread_create failed (%s)", strerror(rc));
  t->started = 1;
  return 1;
}

static void join_thread(lthread *t) {
  if (t->started && !t->joined) {
    pthread_join(t->tid, NULL);
    t->joined = 1;
  }
}

static int l_join(lua_State *L) {
  lthread *t = luaL_checkudata(L, 1, THREAD_MT);
  join_thread(t);
  if (t->error) {
    lua_pushboolean(L, 0);
    lua_pushstring(L, t->error);
    return 2;
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* A thread never joined is joined when its handle is collected (its state must not outlive
 * the process's own). */
static int l_gc(lua_State *L) {
  lthread *t = luaL_checkudata(L, 1, THREAD_MT);
  join_thread(t);
  free(t->code);
  free(t->payload);
  free(t->error);
  t->code = t->payload = t->error = NULL;
  return 0;
}

int luaopen_ember_threads(lua_State *L) {
  if (luaL_newmetatable(L, THREAD_MT)) {
    lua_newtable(L);
    lua_pushcfunction(L, l_join);
    lua_setfield(L, -2, "join");
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, l_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  lua_newtable(L);
  lua_pushcfunction(L, l_spawn);
  lua_setfield(L, -2, "spawn");
  return 1;
}
