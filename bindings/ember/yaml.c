/* yaml.c - YAML files to Lua tables (libyaml's document API), for pipeline files.
 *
 *   local yaml = require 'ember_yaml'
 *   local doc, lines = yaml.load_file('pipelines/x.yaml')   -- or yaml.load(text, name)
 *
 * Mappings become tables with string keys, sequences become arrays, scalars become
 * numbers, booleans or strings by the YAML 1.2 core schema (quoted scalars stay
 * strings; null/~/empty becomes the sentinel yaml.null so a key that is present but empty
 * can be told from a missing one). `lines` maps each dotted key path ("optim.lr",
 * "model.layers.2") to its 1-based line, so validation errors can name the line. */
#include <errno.h>
#include <lauxlib.h>
#include <lua.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define MAX_DEPTH 64
/* An alias is a reference to an earlier node, and converting copies it, so a small file of
 * aliases of aliases expands exponentially ("billion laughs"). Pipeline files are a few
 * hundred nodes: the conversion stops past these bounds. */
#define MAX_NODES 100000
#define MAX_ALIAS_USES 10000

typedef struct {
  lua_State *L;
  yaml_document_t *doc;
  int lines_index; /* stack index of the lines table */
  int null_index; /* stack index of the null sentinel */
  unsigned char *seen; /* per node of doc: converted once already (a later visit is an alias) */
  long nodes, alias_uses;
  char path[1024];
} converter;

/* Pushes the Lua value of a plain (unquoted) scalar. */
static void push_plain_scalar(converter *c, const char *s, size_t len) {
  lua_State *L = c->L;
  if (len == 0 || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL")) {
    lua_pushvalue(L, c->null_index);
    return;
  }
  if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE")) {
    lua_pushboolean(L, 1);
    return;
  }
  if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE")) {
    lua_pushboolean(L, 0);
    return;
  }
  if (!strcmp(s, ".inf") || !strcmp(s, "+.inf")) {
    lua_pushnumber(L, HUGE_VAL);
    return;
  }
  if (!strcmp(s, "-.inf")) {
    lua_pushnumber(L, -HUGE_VAL);
    return;
  }
  if (!strcmp(s, ".nan")) {
    lua_pushnumber(L, NAN);
    return;
  }
  /* Numbers: decimal ints and floats (1e-3, 0.5, -2), hex and octal as in YAML 1.2. */
  char *end;
  errno = 0;
  if (s[0] == '0' && (s[1] == 'x' || s[1] == 'o')) {
    long long v = strtoll(s + 2, &end, s[1] == 'x' ? 16 : 8);
    if (*end == 0 && end != s + 2 && !errno) {
      lua_pushnumber(L, (double)v);
      return;
    }
  }
  const char *p = s;
  if (*p == '-' || *p == '+') p++;
  if ((*p >= '0' && *p <= '9') || (*p == '.' && p[1] >= '0' && p[1] <= '9')) {
    double v = strtod(s, &end);
    if (*end == 0) {
      lua_pushnumber(L, v);
      return;
    }
  }
  lua_pushlstring(L, s, len);
}

static void record_line(converter *c, yaml_node_t *node) {
  lua_pushinteger(c->L, (lua_Integer)node->start_mark.line + 1);
  lua_setfield(c->L, c->lines_index, c->path[0] ? c->path : "(root)");
}

static int push_node(converter *c, yaml_node_t *node, int depth);

static int push_child(converter *c, yaml_node_t *child, const char *key, int depth) {
  size_t saved = strlen(c->path);
  snprintf(c->path + saved, sizeof c->path - saved, "%s%s", saved ? "." : "", key);
  int ok = push_node(c, child, depth + 1);
  c->path[saved] = 0;
  return ok;
}

static int push_node(converter *c, yaml_node_t *node, int depth) {
  lua_State *L = c->L;
  if (!node) {
    lua_pushvalue(L, c->null_index);
    return 1;
  }
  if (depth > MAX_DEPTH) {
    lua_pushfstring(L, "%d: nesting deeper than %d levels", (int)node->start_mark.line + 1, MAX_DEPTH);
    return 0;
  }
  if (++c->nodes > MAX_NODES) {
    lua_pushfstring(L, "%d: the document expands to more than %d nodes (aliases included), expected a smaller file",
                    (int)node->start_mark.line + 1, MAX_NODES);
    return 0;
  }
  unsigned char *seen = &c->seen[node - c->doc->nodes.start];
  if (*seen && ++c->alias_uses > MAX_ALIAS_USES) {
    lua_pushfstring(L, "%d: more than %d alias uses, expected at most that many", (int)node->start_mark.line + 1,
                    MAX_ALIAS_USES);
    return 0;
  }
  *seen = 1;
  if (!lua_checkstack(L, 8)) { /* not luaL_checkstack: raising here would leak the document */
    lua_pushfstring(L, "%d: nesting too deep for the Lua stack", (int)node->start_mark.line + 1);
    return 0;
  }
  record_line(c, node);
  switch (node->type) {
    case YAML_SCALAR_NODE: {
      const char *s = (const char *)node->data.scalar.value;
      size_t len = node->data.scalar.length;
      if (node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) push_plain_scalar(c, s, len);
      else lua_pushlstring(L, s, len);
      return 1;
    }
    case YAML_SEQUENCE_NODE: {
      lua_newtable(L);
      int i = 1;
      for (yaml_node_item_t *it = node->data.sequence.items.start; it < node->data.sequence.items.top; it++, i++) {
        char key[32];
        snprintf(key, sizeof key, "%d", i);
        if (!push_child(c, yaml_document_get_node(c->doc, *it), key, depth)) return 0;
        lua_rawseti(L, -2, i);
      }
      return 1;
    }
    case YAML_MAPPING_NODE: {
      lua_newtable(L);
      for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        if (!k || k->type != YAML_SCALAR_NODE) {
          lua_pushfstring(L, "%d: mapping keys must be plain strings", k ? (int)k->start_mark.line + 1 : 0);
          return 0;
        }
        const char *key = (const char *)k->data.scalar.value;
        lua_getfield(L, -1, key);
        int duplicate = !lua_isnil(L, -1);
        lua_pop(L, 1);
        if (duplicate) {
          lua_pushfstring(L, "%d: duplicate key '%s'", (int)k->start_mark.line + 1, key);
          return 0;
        }
        if (!push_child(c, yaml_document_get_node(c->doc, p->value), key, depth)) return 0;
        lua_setfield(L, -2, key);
      }
      return 1;
    }
    default: lua_pushvalue(L, c->null_index); return 1;
  }
}

/* Parses text; on success leaves (doc, lines) on the stack, else raises "name: line N: ...". */
static int load_text(lua_State *L, const char *text, size_t len, const char *name) {
  yaml_parser_t parser;
  yaml_document_t doc;
  if (!yaml_parser_initialize(&parser)) return luaL_error(L, "%s: cannot initialise the YAML parser", name);
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  if (!yaml_parser_load(&parser, &doc)) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s:%d:%d: YAML syntax error: %s%s%s", name, (int)parser.problem_mark.line + 1,
             (int)parser.problem_mark.column + 1, parser.problem ? parser.problem : "unknown problem",
             parser.context ? " " : "", parser.context ? parser.context : "");
    yaml_parser_delete(&parser);
    return luaL_error(L, "%s", msg);
  }
  converter c = {.L = L, .doc = &doc};
  size_t count = (size_t)(doc.nodes.top - doc.nodes.start);
  c.seen = calloc(count ? count : 1, 1);
  if (!c.seen) {
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return luaL_error(L, "%s: out of memory for %d YAML nodes", name, (int)count);
  }
  lua_newtable(L); /* lines */
  c.lines_index = lua_gettop(L);
  lua_getfield(L, lua_upvalueindex(1), "null");
  c.null_index = lua_gettop(L);
  yaml_node_t *root = yaml_document_get_root_node(&doc);
  int ok;
  if (!root) {
    lua_newtable(L); /* an empty file is an empty mapping */
    ok = 1;
  } else {
    ok = push_node(&c, root, 0);
  }
  free(c.seen);
  yaml_document_delete(&doc);
  yaml_parser_delete(&parser);
  if (!ok) {
    const char *why = lua_tostring(L, -1);
    return luaL_error(L, "%s:%s", name, why ? why : "conversion failed");
  }
  /* stack: lines, null, doc  ->  doc, lines */
  lua_remove(L, c.null_index);
  lua_insert(L, c.lines_index);
  return 2;
}

static int l_load(lua_State *L) {
  size_t len;
  const char *text = luaL_checklstring(L, 1, &len);
  const char *name = luaL_optstring(L, 2, "(string)");
  return load_text(L, text, len, name);
}

static int l_load_file(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  FILE *f = fopen(path, "rb");
  if (!f) return luaL_error(L, "%s: cannot open: %s", path, strerror(errno));
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  char chunk[8192];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) luaL_addlstring(&b, chunk, n);
  int failed = ferror(f);
  fclose(f);
  if (failed) return luaL_error(L, "%s: read error", path);
  luaL_pushresult(&b);
  size_t len;
  const char *text = lua_tolstring(L, -1, &len);
  return load_text(L, text, len, path);
}

static int null_tostring(lua_State *L) {
  lua_pushliteral(L, "null");
  return 1;
}

int luaopen_ember_yaml(lua_State *L) {
  lua_newtable(L);
  int module = lua_gettop(L);
  lua_newtable(L); /* the null sentinel; prints as "null" */
  lua_newtable(L);
  lua_pushcfunction(L, null_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_setmetatable(L, -2);
  lua_setfield(L, module, "null");
  lua_pushvalue(L, module);
  lua_pushcclosure(L, l_load, 1);
  lua_setfield(L, module, "load");
  lua_pushvalue(L, module);
  lua_pushcclosure(L, l_load_file, 1);
  lua_setfield(L, module, "load_file");
  return 1;
}
