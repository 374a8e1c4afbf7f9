/* fuzz_yaml.c - the YAML loader (bindings/ember/yaml.c, compiled in) on the input as text,
 * then the input as a pipeline file through ember.pipeline.load: the same YAML reading
 * followed by the Lua schema of every job (lua/ember/pipeline/schema.lua and the job
 * modules), in LuaJIT with libember in the process, as `ember run --check` does. */
#include "fuzz.h"
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

int luaopen_ember_yaml(lua_State *L);

static const char driver[] =
    "local yaml = require 'ember_yaml'\n"
    "local ok, pipeline = pcall(require, 'ember.pipeline')\n"
    "if not ok then io.stderr:write('fuzz_yaml: the pipeline schema is not covered: ', tostring(pipeline), '\\n') end\n"
    "return function(text, path)\n"
    "  pcall(yaml.load, text, 'fuzz.yaml')\n"
    "  if ok then pcall(pipeline.load, path) end\n"
    "end\n";

static lua_State *L;
static int check_ref;

static void setup(void) {
  fz_once();
  L = luaL_newstate();
  if (!L) abort();
  luaL_openlibs(L);
  lua_getglobal(L, "package");
  lua_pushstring(L, EMBER_SOURCE_DIR "/lua/?.lua;" EMBER_SOURCE_DIR "/lua/?/init.lua;" EMBER_BUILD_DIR "/lua/?.lua");
  lua_setfield(L, -2, "path");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, luaopen_ember_yaml);
  lua_setfield(L, -2, "ember_yaml");
  lua_pop(L, 2);
  if (luaL_loadbuffer(L, driver, sizeof driver - 1, "fuzz_yaml") || lua_pcall(L, 0, 1, 0)) {
    fprintf(stderr, "fuzz_yaml: %s\n", lua_tostring(L, -1));
    abort();
  }
  check_ref = luaL_ref(L, LUA_REGISTRYINDEX);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!L) setup();
  lua_rawgeti(L, LUA_REGISTRYINDEX, check_ref);
  lua_pushlstring(L, (const char *)data, size);
  lua_pushstring(L, fz_file(0, data, size));
  if (lua_pcall(L, 2, 0, 0)) lua_pop(L, 1);
  return 0;
}
