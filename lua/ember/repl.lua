-- ember.repl: what the REPL (bindings/ember/repl.c) asks Lua for.
--   format(...)    the values of an expression as one string, separated by tabs: tables
--                  pretty-printed (nested, sorted keys, depth and size limits, cycles
--                  marked), tensors with tostring, top-level strings as they are (as print).
--   complete(word) completion candidates for a word such as "pri", "string.fo", "t:resh"
--                  or "a.b.c": globals, table fields, methods after ':' (tensor methods
--                  from ember.Tensor, string methods for strings).
--   help(line)     for a line '?name' or 'name?': what the name is (ember.help: a function's
--                  signature, where it is defined and its doc comment), else nil
-- This module does not load ember: it only looks at it when something else has.
local M = {}

M.max_depth = 4      -- tables nested deeper print as {...}
M.max_items = 50     -- entries shown per table
M.max_total = 1000   -- entries shown in one result
M.width = 80         -- a table that fits in this many columns stays on one line

local keywords = {}
for w in ([[and break do else elseif end false for function goto if in local nil not or
            repeat return then true until while]]):gmatch('%a+') do keywords[w] = true end

local function is_identifier(s)
  return type(s) == 'string' and s:match('^[%a_][%w_]*$') ~= nil and not keywords[s]
end

-- ------------------------------------------------------------------ tensors

local function is_tensor(v)
  if type(v) ~= 'cdata' or not package.loaded.ember then return false end
  return package.loaded.ember.is_tensor(v)
end

-- A one-line description, for tensors inside tables (and when tostring says nothing).
local function tensor_summary(t)
  local ok, s = pcall(function()
    return string.format('<tensor %s [%s] %s>', t.dtype, table.concat(t.shape, ', '), t.device)
  end)
  return ok and s or '<tensor>'
end

local function tensor_string(t)
  local ok, s = pcall(tostring, t)
  if not ok or s:match('^cdata<') then return tensor_summary(t) end
  return s
end

-- ------------------------------------------------------------------ formatting

local escapes = { ['\n'] = '\\n', ['\r'] = '\\r', ['\t'] = '\\t', ['"'] = '\\"', ['\\'] = '\\\\' }

local function quote(s)
  local long = #s > 200
  if long then s = s:sub(1, 200) end
  s = s:gsub('[%c"\\]', function(c) return escapes[c] or string.format('\\%03d', c:byte()) end)
  return '"' .. s .. (long and '..."' or '"')
end

local type_rank = { number = 1, string = 2, boolean = 3 }

local function key_less(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then
    local ra, rb = type_rank[ta] or 4, type_rank[tb] or 4
    if ra ~= rb then return ra < rb end
    return ta < tb
  end
  if ta == 'number' or ta == 'string' then return a < b end
  return tostring(a) < tostring(b)
end

local function with_tostring(v)
  local mt = getmetatable(v)
  if type(mt) == 'table' and mt.__tostring then
    local ok, s = pcall(tostring, v)
    if ok and type(s) == 'string' then return s end
  end
  return nil
end

local render

local function render_key(k, state, indent)
  if is_identifier(k) then return k end
  return '[' .. render(k, state, indent, M.max_depth) .. ']'
end

local function render_table(t, state, indent, depth)
  if state.ancestors[t] then return '<cycle>' end
  local custom = with_tostring(t)
  if custom then return custom end
  if next(t) == nil then return '{}' end
  if depth >= M.max_depth then return '{...}' end
  state.ancestors[t] = true

  local n = 0
  while rawget(t, n + 1) ~= nil do n = n + 1 end
  local keys = {}
  for k in pairs(t) do
    if not (type(k) == 'number' and k >= 1 and k <= n and k % 1 == 0) then keys[#keys + 1] = k end
  end
  table.sort(keys, key_less)

  local items, shown, total = {}, 0, n + #keys
  local child_indent = indent + 2
  local function add(s)
    if shown >= M.max_items or state.total >= M.max_total then return false end
    shown, state.total = shown + 1, state.total + 1
    items[#items + 1] = s
    return true
  end
  for i = 1, n do
    if not add(render(rawget(t, i), state, child_indent, depth + 1)) then break end
  end
  for _, k in ipairs(keys) do
    if shown >= M.max_items or state.total >= M.max_total then break end
    add(render_key(k, state, child_indent) .. ' = ' .. render(rawget(t, k), state, child_indent, depth + 1))
  end
  if shown < total then items[#items + 1] = string.format('... (%d more)', total - shown) end
  state.ancestors[t] = nil

  local one_line = '{' .. table.concat(items, ', ') .. '}'
  if indent + #one_line <= M.width and not one_line:find('\n', 1, true) then return one_line end
  local pad = string.rep(' ', child_indent)
  return '{\n' .. pad .. table.concat(items, ',\n' .. pad) .. '\n' .. string.rep(' ', indent) .. '}'
end

-- v as it reads inside a table; indent is the column its continuation lines start at.
render = function(v, state, indent, depth)
  local tv = type(v)
  if tv == 'string' then return quote(v) end
  if tv == 'table' then return render_table(v, state, indent, depth) end
  if is_tensor(v) then return tensor_summary(v) end
  return with_tostring(v) or tostring(v)
end

function M.format(...)
  local parts = {}
  for i = 1, select('#', ...) do
    local v = select(i, ...)
    if type(v) == 'string' then
      parts[i] = v
    elseif is_tensor(v) then
      parts[i] = tensor_string(v)
    else
      parts[i] = render(v, { ancestors = {}, total = 0 }, 0, 0)
    end
  end
  return table.concat(parts, '\t')
end

-- ------------------------------------------------------------------ completion

local function index(v, k)
  if type(v) == 'table' then
    local r = rawget(v, k)
    if r ~= nil then return r end
  end
  local ok, r = pcall(function() return v[k] end)
  if ok then return r end
  return nil
end

-- The tables whose keys v answers to: v itself and the __index chain of its metatables.
local function field_sources(v, methods_only)
  local sources = {}
  if is_tensor(v) then
    local core = require 'ember.tensor.core'
    sources[1] = core.Tensor
    if not methods_only then sources[2] = core.properties end
    return sources
  end
  local getmt = debug and debug.getmetatable or getmetatable
  for _ = 1, 16 do  -- bounded: __index chains may loop
    if type(v) == 'table' then sources[#sources + 1] = v end
    local mt = getmt(v)
    if type(mt) ~= 'table' or type(rawget(mt, '__index')) ~= 'table' then break end
    v = rawget(mt, '__index')
  end
  return sources
end

local function is_callable(f)
  if type(f) == 'function' then return true end
  local mt = getmetatable(f)
  return type(mt) == 'table' and mt.__call ~= nil
end

function M.complete(word)
  local prefix, sep, frag = word:match('^(.-)([.:])([%w_]*)$')
  local target
  if not prefix then
    if not word:match('^[%w_]*$') then return {} end
    prefix, sep, frag, target = '', '', word, _G
  else
    if not (prefix:match('^[%a_][%w_]*$') or prefix:match('^[%a_][%w_.]*[%w_]$')) then return {} end
    target = _G
    for name in prefix:gmatch('[^.]+') do
      target = index(target, name)
      if target == nil then return {} end
    end
  end

  local seen, out = {}, {}
  local methods_only = sep == ':'
  local is_t = is_tensor(target)
  for _, source in ipairs(field_sources(target, methods_only)) do
    for k, v in pairs(source) do
      if type(k) == 'string' and not seen[k] and k:sub(1, #frag) == frag and k:match('^[%a_][%w_]*$')
          and not (methods_only and (k:match('^__') or not is_callable(v)))
          and not (is_t and k:match('^__')) then
        seen[k] = true
        out[#out + 1] = prefix .. sep .. k
      end
    end
  end
  if sep == '' then
    for k in pairs(keywords) do
      if k:sub(1, #frag) == frag and not seen[k] then out[#out + 1] = k end
    end
  end
  table.sort(out)
  return out
end

-- ------------------------------------------------------------------ help

function M.help(line)
  local name = line:match('^%s*%?%s*([%a_][%w_.:]*)%s*$') or line:match('^%s*([%a_][%w_.:]*)%s*%?%s*$')
  if not name then return nil end
  return require('ember.help').describe(name) or (name .. ': nothing by that name')
end

return M
