-- ember.help: what a name is, for `?name` in the REPL and Jupyter's inspect (Shift-Tab).
--
--   help.describe('ember.randn')   -->  ember.randn(...)
--                                       defined at lua/ember/tensor/create.lua:169
--                                       <the comment lines above the definition>
--   help.describe('t:reshape')     -- a method, found as ember.repl's completion finds it
--   help.lookup('a.b.c')           -- the value of a name (globals, fields, methods), or nil
--
-- A Lua function's signature comes from its parameter names (debug.getlocal on the
-- function); its doc is the block of comment lines right above its definition in the
-- source file (ember's code documents functions that way). A class (a table called as a
-- constructor, like nn.Linear) is described through its init. Tensors, tables and modules
-- get a summary and their printed form.
local M = {}

local function is_tensor(v)
  return type(v) == 'cdata' and package.loaded.ember ~= nil and package.loaded.ember.is_tensor(v)
end

local function index(v, k)
  if type(v) == 'table' then
    local r = rawget(v, k)
    if r ~= nil then return r end
  end
  local ok, r = pcall(function() return v[k] end)
  if ok then return r end
  return nil
end

-- The value a dotted name (a.b.c, or obj:method) refers to, or nil.
function M.lookup(name)
  if type(name) ~= 'string' or not name:match('^[%a_][%w_]*[%w_.:]*$') then return nil end
  local target = _G
  for part in name:gsub(':', '.'):gmatch('[^.]+') do
    if target == nil then return nil end
    target = index(target, part)
  end
  return target
end

-- ------------------------------------------------------------------ functions

local source_cache = {}

local function source_lines(path)
  local lines = source_cache[path]
  if lines == nil then
    lines = false
    local f = io.open(path, 'r')
    if f then
      lines = {}
      for line in f:lines() do lines[#lines + 1] = line end
      f:close()
    end
    source_cache[path] = lines
  end
  return lines or nil
end

-- The comment block ending right above line `at` (skipping up to `skip` code lines, for a
-- class whose comment sits above its `local X = Module:extend(...)`).
local function doc_above(lines, at, skip)
  local i = at - 1
  for _ = 1, skip do
    if i >= 1 and not lines[i]:match('^%s*%-%-') and lines[i]:match('%S') then i = i - 1 end
  end
  local doc = {}
  while i >= 1 and lines[i]:match('^%s*%-%-') do
    local text = lines[i]:gsub('^%s*%-%-+ ?', '')
    if text:match('^%-%-%-%-') or text:match('^%s*$') and #doc > 0 then break end   -- a rule or a gap
    table.insert(doc, 1, text)
    i = i - 1
  end
  while doc[1] and doc[1]:match('^%s*$') do table.remove(doc, 1) end
  return #doc > 0 and table.concat(doc, '\n') or nil
end

-- Parameter names of a Lua function: {'a', 'b', '...'}, or nil for a C function.
local function params(f)
  local info = debug.getinfo(f, 'Su')
  if not info or info.what == 'C' then return nil end
  local names = {}
  for i = 1, info.nparams or 0 do names[i] = debug.getlocal(f, i) or ('arg' .. i) end
  if info.isvararg then names[#names + 1] = '...' end
  return names, info
end

local function relative(path)
  local here = os.getenv('PWD')
  if here and path:sub(1, #here + 1) == here .. '/' then return path:sub(#here + 2) end
  return path
end

-- name(params) plus where it is defined and its doc; drop_self for methods and classes.
local function describe_function(name, f, opts)
  local names, info = params(f)
  if not names then return name .. '(...)\n(a built-in function)' end
  if opts.drop_self and names[1] == 'self' then table.remove(names, 1) end
  local out = { string.format('%s(%s)', name, table.concat(names, ', ')) }
  local src = info.source or ''
  if src:sub(1, 1) == '@' then
    local path = src:sub(2)
    out[#out + 1] = string.format('defined at %s:%d', relative(path), info.linedefined)
    local lines = source_lines(path)
    local doc = lines and doc_above(lines, info.linedefined, opts.skip or 0)
    if doc then out[#out + 1] = doc end
  elseif info.linedefined and info.linedefined > 0 then
    out[#out + 1] = string.format('defined in %s, line %d', src:sub(1, 1) == '=' and src:sub(2) or 'a chunk',
      info.linedefined)
  end
  return table.concat(out, '\n')
end

-- ------------------------------------------------------------------ other values

local function sorted_keys(t, limit)
  local keys = {}
  for k in pairs(t) do
    if type(k) == 'string' and not k:match('^_') then keys[#keys + 1] = k end
  end
  table.sort(keys)
  local n = #keys
  if n > limit then
    for i = limit + 1, n do keys[i] = nil end
    keys[#keys + 1] = string.format('... (%d more)', n - limit)
  end
  return keys
end

local function is_module(v)
  local nn = package.loaded['ember.nn']
  return type(v) == 'table' and nn and nn.Module and type(v.parameters) == 'function' and v.forward ~= nil
    and rawget(v, '__name') == nil
end

-- The text for a value found under `name`, or nil when there is nothing to say.
function M.describe_value(name, v)
  local repl = require 'ember.repl'
  local tv = type(v)
  if tv == 'function' then
    return describe_function(name, v, { drop_self = name:find(':', 1, true) ~= nil })
  end
  if is_tensor(v) then
    return string.format('%s: a tensor\n%s', name, repl.format(v))
  end
  if tv == 'table' then
    local mt = getmetatable(v)
    local init = rawget(v, 'init')
    if mt and type(mt) == 'table' and mt.__call and type(init) == 'function' then   -- a class
      local text = describe_function(name, init, { drop_self = true, skip = 3 })
      return text .. string.format('\n(a class: %s(...) makes one)', name)
    end
    if is_module(v) then
      return string.format('%s: an nn module\n%s', name, tostring(v))
    end
    if mt and type(mt) == 'table' and type(mt.__call) == 'function' then
      return describe_function(name, mt.__call, { drop_self = true })
    end
    local keys = sorted_keys(v, 40)
    local doc = type(rawget(v, 'doc')) == 'string' and ('\n' .. rawget(v, 'doc')) or ''
    return string.format('%s: a table with fields %s%s', name, #keys > 0 and table.concat(keys, ', ') or '(none)', doc)
  end
  if v == nil then return nil end
  return string.format('%s: %s\n%s', name, tv, repl.format(v))
end

-- Help for a name, or nil when the name means nothing.
function M.describe(name)
  local v = M.lookup(name)
  if v == nil then return nil end
  return M.describe_value(name, v)
end

return M
