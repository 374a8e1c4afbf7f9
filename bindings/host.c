/* host.c - the ember executable: LuaJIT with libember linked in.
 * (Minimal start: runs a script or -e code; the full host adds the REPL, info, run.) */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ember/core.h"

static void set_paths(lua_State *L) {
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s/?.lua;%s", EMBER_SOURCE_LUA_DIR, EMBER_SOURCE_LUA_DIR,
                  EMBER_BUILD_LUA_DIR, lua_tostring(L, -1));
  lua_setfield(L, -3, "path");
  lua_pop(L, 1);
  lua_getfield(L, -1, "cpath");
  lua_pushfstring(L, "%s/?.so;%s", EMBER_BUILD_DIR, lua_tostring(L, -1));
  lua_setfield(L, -3, "cpath");
  lua_pop(L, 2);
  /* libember is linked into this executable; ember/init.lua finds it through ffi.C. */
  lua_pushstring(L, em_version());
  lua_setglobal(L, "_EMBER_HOST");
}

static int traceback(lua_State *L) {
  luaL_traceback(L, L, lua_tostring(L, 1), 1);
  return 1;
}

static int run_chunk(lua_State *L, int status) {
  if (status == 0) {
    lua_pushcfunction(L, traceback);
    lua_insert(L, -2);
    status = lua_pcall(L, 0, 0, -2);
  }
  if (status) {
    fprintf(stderr, "ember: %s\n", lua_tostring(L, -1));
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  set_paths(L);
  if (argc >= 3 && !strcmp(argv[1], "-e")) return run_chunk(L, luaL_loadstring(L, argv[2]));
  if (argc >= 2) {
    lua_newtable(L);
    for (int i = 0; i < argc; i++) {
      lua_pushstring(L, argv[i]);
      lua_rawseti(L, -2, i - 1);
    }
    lua_setglobal(L, "arg");
    return run_chunk(L, luaL_loadfile(L, argv[1]));
  }
  fprintf(stderr, "usage: ember script.lua | ember -e code\n");
  return 2;
}
