-- ember.util.schema: declarative checks for pipeline files.
--
-- A schema says what a value must be; validate() checks a value from a YAML file against
-- it, fills in defaults and returns the checked value. Every problem is reported, each on a
-- line that names where the value came from (file and line, or the command-line override),
-- the dotted key path and what was expected; validate() collects them (a wrong value does
-- not hide the next one) and raises one error holding them all, in file order:
--
--   pipelines/x.yaml:7: optim.lr: expected a number > 0, got 'fast'
--   pipelines/x.yaml:12: data.shufle: unknown key (expected one of: ...)
--
--   local S = require 'ember.util.schema'
--   local optim = S.record {
--     name = S.enum({'sgd', 'adam'}, {default = 'sgd'}),
--     lr = S.number {gt = 0, default = 0.01},
--     betas = S.list(S.number {min = 0, max = 1}, {len = 2, default = {0.9, 0.999}}),
--   }
--
-- Kinds: number, integer, string, boolean, enum, path (optionally one that must exist),
-- list, record (a mapping with known keys; anything else is an error), map (any keys, one
-- schema for the values), variant (a mapping with exactly one key that picks the schema:
-- `- linear: [784, 256]`), any, and union (the first of several schemas that accepts the
-- value). Every kind takes `default` (used when the key is absent or null), `optional`
-- (absent stays nil) and `doc`. A required value without a default is an error when absent.
-- `check(value, ctx, path)` returns a problem (text) or nil; `convert(value, ctx, path)`
-- returns the value the job sees. A path with `relative = true` is resolved against ctx.base_dir (the pipeline file's
-- folder) unless it is absolute or came from a command-line override.
local S = {}

-- The YAML reader's null sentinel; set by the pipeline loader (ember_yaml.null).
S.null = setmetatable({}, { __tostring = function() return 'null' end })

local Error = {}
Error.__index = Error
Error.__tostring = function(e) return e.message end
S.Error = Error

function S.is_error(e) return getmetatable(e) == Error end

-- ---------------------------------------------------------------- describing values
local function is_null(v) return v == nil or v == S.null end

local function is_list(v)
  if type(v) ~= 'table' or v == S.null then return false end
  local n = #v
  for k in pairs(v) do
    if type(k) ~= 'number' or k < 1 or k > n or k ~= math.floor(k) then return false end
  end
  return true
end
S.is_list = is_list

local function is_mapping(v)
  if type(v) ~= 'table' or v == S.null then return false end
  for k in pairs(v) do
    if type(k) ~= 'string' then return false end
  end
  return true
end
S.is_mapping = is_mapping

local function got(v)
  if is_null(v) then return 'null' end
  if type(v) == 'string' then return string.format("'%s'", v) end
  if type(v) == 'number' then
    if v ~= v then return '.nan' end
    if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return string.format('%d', v) end
    return string.format('%.10g', v)
  end
  if type(v) == 'boolean' then return tostring(v) end
  if type(v) == 'table' then
    if next(v) == nil then return 'an empty mapping' end
    return is_list(v) and string.format('a list of %d', #v) or 'a mapping'
  end
  return 'a ' .. type(v)
end
S.got = got

-- ---------------------------------------------------------------- where and failing
-- ctx: {file =, lines = {path -> line}, origins = {path -> text}}. origins wins: a value
-- given on the command line is reported as such, with the override's text.
local function where(ctx, path)
  local p = path
  while true do
    if ctx.origins and ctx.origins[p] then return ctx.origins[p] end
    if p == '' then break end
    p = p:match('^(.*)%.[^.]*$') or ''
  end
  p = path
  while true do
    local line = ctx.lines and ctx.lines[p ~= '' and p or '(root)']
    if line then return string.format('%s:%d', ctx.file or '(pipeline)', line) end
    if p == '' then break end
    p = p:match('^(.*)%.[^.]*$') or ''
  end
  return ctx.file or '(pipeline)'
end
S.where = where

-- The line of path in the file (that of its nearest parent with one), or nil.
local function line_of(ctx, path)
  local p = path
  while ctx.lines do
    local line = ctx.lines[p ~= '' and p or '(root)']
    if line then return line end
    if p == '' then break end
    p = p:match('^(.*)%.[^.]*$') or ''
  end
  return nil
end

-- Raises the error for path: "<where>: <path>: <message>".
function S.fail(ctx, path, message)
  error(setmetatable({ message = string.format('%s: %s: %s', where(ctx, path), path ~= '' and path or '(top level)',
    message), line = line_of(ctx, path) }, Error), 0)
end
local fail = S.fail

-- Runs fn(...) for one part of a value (a record field, a list item): while validate()
-- collects (ctx.errors), a schema error is kept and the part yields nil, so its siblings
-- are still checked; otherwise errors pass through.
local function guarded(ctx, fn, ...)
  if not ctx.errors then return fn(...) end
  local ok, r = pcall(fn, ...)
  if ok then return r end
  if not S.is_error(r) then error(r, 0) end
  if r.errors then   -- already several (a nested validate)
    for _, e in ipairs(r.errors) do ctx.errors[#ctx.errors + 1] = e end
  else
    ctx.errors[#ctx.errors + 1] = r
  end
  return nil
end

-- ctx without collecting: union tries its alternatives with it (a failed alternative is
-- not an error of the file).
local function quiet(ctx)
  if not ctx.errors then return ctx end
  return setmetatable({ errors = false }, { __index = ctx })
end

local function expected(ctx, path, schema, v)
  fail(ctx, path, string.format('expected %s, got %s', schema.expect, got(v)))
end

local function join(path, key)
  if path == '' then return tostring(key) end
  return path .. '.' .. tostring(key)
end
S.join = join

-- ---------------------------------------------------------------- constructors
local function make(kind, opts, fields)
  local s = { kind = kind }
  for k, v in pairs(opts or {}) do s[k] = v end
  for k, v in pairs(fields or {}) do s[k] = v end
  return s
end

local function bounds_text(o)
  local t = {}
  if o.gt then t[#t + 1] = '> ' .. got(o.gt) end
  if o.min then t[#t + 1] = '>= ' .. got(o.min) end
  if o.lt then t[#t + 1] = '< ' .. got(o.lt) end
  if o.max then t[#t + 1] = '<= ' .. got(o.max) end
  return #t > 0 and (' ' .. table.concat(t, ' and ')) or ''
end

-- number{gt =, min =, lt =, max =}; integer{...} accepts whole numbers only.
function S.number(o)
  o = o or {}
  return make('number', o, { expect = o.expect or ('a number' .. bounds_text(o)) })
end
function S.integer(o)
  o = o or {}
  return make('number', o, { integer = true, expect = o.expect or ('an integer' .. bounds_text(o)) })
end
function S.string(o)
  o = o or {}
  return make('string', o, { expect = o.expect or 'a string' })
end
function S.boolean(o)
  return make('boolean', o, { expect = 'true or false' })
end
-- enum({'a', 'b'}): one of the listed strings.
function S.enum(values, o)
  local quoted = {}
  for i, v in ipairs(values) do quoted[i] = v end
  return make('enum', o, { values = values, expect = 'one of ' .. table.concat(quoted, ', ') })
end
-- path{exists = 'file' | 'dir' | nil}: a string; with exists, it must name one.
function S.path(o)
  o = o or {}
  local what = o.exists == 'file' and 'the path of an existing file' or o.exists == 'dir' and
    'the path of an existing directory' or 'a path'
  return make('path', o, { expect = o.expect or what })
end
-- list(item [, {len =, min_len =}])
function S.list(item, o)
  o = o or {}
  local n = o.len and string.format(' of %d', o.len) or ''
  return make('list', o, { item = item, expect = o.expect or ('a list' .. n .. ' (' .. item.expect .. ' each)') })
end
-- record{key = schema, ...} [, opts]: a mapping whose keys are all known.
function S.record(fields, o)
  return make('record', o, { fields = fields, expect = (o and o.expect) or 'a mapping' })
end
-- map(value_schema): a mapping with any string keys.
function S.map(value, o)
  return make('map', o, { value = value, expect = (o and o.expect) or 'a mapping' })
end
-- variant{name = schema, ...}: a mapping with exactly one key, which picks the schema of
-- its value. The result is {name, value} as {kind = name, value = checked}.
function S.variant(choices, o)
  local names = {}
  for k in pairs(choices) do names[#names + 1] = k end
  table.sort(names)
  return make('variant', o, { choices = choices, names = names,
    expect = (o and o.expect) or ('a mapping with one key, one of ' .. table.concat(names, ', ')) })
end
-- union{schema, ...}: the first schema that accepts the value.
function S.union(schemas, o)
  local t = {}
  for i, s in ipairs(schemas) do t[i] = s.expect end
  return make('union', o, { schemas = schemas, expect = (o and o.expect) or table.concat(t, ' or ') })
end
function S.any(o) return make('any', o, { expect = 'a value' }) end

-- Adds fields to a record schema (sections and jobs extend each other this way).
function S.extend(record, fields)
  for k, v in pairs(fields) do record.fields[k] = v end
  return record
end

-- ---------------------------------------------------------------- validation
local function copy_default(v)
  if type(v) ~= 'table' then return v end
  local c = {}
  for k, x in pairs(v) do c[k] = copy_default(x) end
  return c
end

local check

-- The Lua types each kind accepts (for union's messages).
local takes = {
  number = { number = true }, string = { string = true }, path = { string = true }, enum = { string = true },
  boolean = { boolean = true }, list = { table = true }, record = { table = true }, map = { table = true },
  variant = { table = true },
}

local function check_number(schema, v, ctx, path)
  if type(v) ~= 'number' or v ~= v then expected(ctx, path, schema, v) end
  if schema.integer and (v ~= math.floor(v) or v == math.huge or v == -math.huge) then
    expected(ctx, path, schema, v)
  end
  if (schema.gt and not (v > schema.gt)) or (schema.min and v < schema.min) or (schema.lt and not (v < schema.lt)) or
    (schema.max and v > schema.max) then
    expected(ctx, path, schema, v)
  end
  return v
end

local function check_record(schema, v, ctx, path)
  if not is_mapping(v) then expected(ctx, path, schema, v) end
  local names = {}
  for k in pairs(schema.fields) do names[#names + 1] = k end
  table.sort(names)   -- the same key is reported first on every run
  local unknown = {}
  for k in pairs(v) do
    if not schema.fields[k] then unknown[#unknown + 1] = k end
  end
  table.sort(unknown)
  for _, k in ipairs(unknown) do
    guarded(ctx, fail, ctx, join(path, k), 'unknown key (expected one of: ' .. table.concat(names, ', ') .. ')')
  end
  local out = {}
  for _, k in ipairs(names) do out[k] = guarded(ctx, check, schema.fields[k], v[k], ctx, join(path, k)) end
  return out
end

function check(schema, v, ctx, path)
  if is_null(v) then
    if schema.default ~= nil and type(schema.default) ~= 'table' then return schema.default end
    -- a table default goes through the checks too, which fills in its nested defaults
    if schema.default ~= nil then return check(schema, copy_default(schema.default), ctx, path) end
    if schema.optional or schema.kind == 'any' then return nil end
    if v == nil then fail(ctx, path, 'missing (expected ' .. schema.expect .. ')') end
    expected(ctx, path, schema, v)
  end
  local kind = schema.kind
  local out
  local errors_before = ctx.errors and #ctx.errors
  if kind == 'number' then
    out = check_number(schema, v, ctx, path)
  elseif kind == 'string' then
    if type(v) ~= 'string' then expected(ctx, path, schema, v) end
    if schema.pattern and not v:match(schema.pattern) then expected(ctx, path, schema, v) end
    out = v
  elseif kind == 'boolean' then
    if type(v) ~= 'boolean' then expected(ctx, path, schema, v) end
    out = v
  elseif kind == 'enum' then
    local ok = false
    for _, x in ipairs(schema.values) do ok = ok or x == v end
    if not ok then expected(ctx, path, schema, v) end
    out = v
  elseif kind == 'path' then
    if type(v) ~= 'string' or v == '' then expected(ctx, path, schema, v) end
    if schema.relative then v = S.resolve(ctx, path, v) end
    if schema.exists then
      local kind_of = S.path_kind(v)
      if kind_of ~= schema.exists then
        fail(ctx, path, string.format("expected %s, got '%s' (%s)", schema.expect, v,
          kind_of == nil and 'no such file or directory' or ('a ' .. kind_of)))
      end
    end
    out = v
  elseif kind == 'list' then
    if not is_list(v) then expected(ctx, path, schema, v) end
    if (schema.len and #v ~= schema.len) or (schema.min_len and #v < schema.min_len) then
      fail(ctx, path, string.format('expected %s, got a list of %d', schema.expect, #v))
    end
    out = {}
    for i = 1, #v do out[i] = guarded(ctx, check, schema.item, v[i], ctx, join(path, i)) end
  elseif kind == 'record' then
    out = check_record(schema, v, ctx, path)
  elseif kind == 'map' then
    if not is_mapping(v) then expected(ctx, path, schema, v) end
    out = {}
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do out[k] = guarded(ctx, check, schema.value, v[k], ctx, join(path, k)) end
  elseif kind == 'variant' then
    if not is_mapping(v) or next(v) == nil then expected(ctx, path, schema, v) end
    local keys = {}
    for k in pairs(v) do
      if not schema.choices[k] then
        fail(ctx, join(path, k), 'unknown kind (expected one of: ' .. table.concat(schema.names, ', ') .. ')')
      end
      keys[#keys + 1] = k
    end
    if #keys > 1 then
      table.sort(keys)
      fail(ctx, path, string.format('expected %s, got a mapping with the keys %s', schema.expect,
        table.concat(keys, ', ')))
    end
    local name = keys[1]
    local choice = schema.choices[name]
    out = { kind = name, value = check(choice, v[name], ctx, join(path, name)) }
  elseif kind == 'union' then
    -- When exactly one alternative takes values of v's Lua type, its own message says
    -- more than the union's ("no such file", "a list of 3").
    local fitting, fitting_schema, count = nil, nil, 0
    local qctx = quiet(ctx)
    for _, s in ipairs(schema.schemas) do
      local ok, r = pcall(check, s, v, qctx, path)
      if ok then return r end
      if not S.is_error(r) then error(r, 0) end
      if takes[s.kind] and takes[s.kind][type(v)] and (type(v) ~= 'table' or (s.kind == 'list') == is_list(v)) then
        fitting, fitting_schema, count = r, s, count + 1
      end
    end
    if count == 1 then
      -- checked again while collecting, so every problem inside it is reported
      if ctx.errors then return check(fitting_schema, v, ctx, path) end
      error(fitting, 0)
    end
    expected(ctx, path, schema, v)
  elseif kind == 'any' then
    out = v
  else
    error('schema: unknown kind ' .. tostring(kind))
  end
  -- a value with a wrong part is not checked as a whole (its parts are reported already)
  if schema.check and not (errors_before and #ctx.errors > errors_before) then
    local problem = schema.check(out, ctx, path)
    if problem then fail(ctx, path, problem) end
  end
  -- convert(value, ctx, path) -> the value the job sees (e.g. paths resolved)
  if schema.convert then out = schema.convert(out, ctx, path) end
  return out
end

-- A path as the file means it: relative ones against ctx.base_dir (the pipeline file's
-- folder), unless the value came from a command-line override (then the working folder).
function S.resolve(ctx, path, v)
  if type(v) ~= 'string' or v:sub(1, 1) == '/' or not ctx.base_dir or ctx.base_dir == '' or
      ctx.base_dir == '.' then
    return v
  end
  local p = path
  while true do
    if ctx.origins and ctx.origins[p] then return v end
    if p == '' then break end
    p = p:match('^(.*)%.[^.]*$') or ''
  end
  return ctx.base_dir .. '/' .. v
end

-- The folder of a file path ('.' for a bare name).
function S.dirname(file)
  return file:match('^(.*)/[^/]*$') or '.'
end

-- Raises one error for several: their lines in file order (overrides, which have no line,
-- first), each "where: key: message".
function S.raise_all(errors)
  if #errors == 1 then error(errors[1], 0) end
  local order = {}
  for i, e in ipairs(errors) do order[i] = { e = e, i = i } end
  table.sort(order, function(a, b)
    local la, lb = a.e.line or -1, b.e.line or -1
    if la ~= lb then return la < lb end
    return a.i < b.i
  end)
  local msgs, list = {}, {}
  for i, o in ipairs(order) do msgs[i], list[i] = o.e.message, o.e end
  error(setmetatable({ message = table.concat(msgs, '\n'), errors = list, line = list[1].line }, Error), 0)
end

-- validate(schema, value, ctx) -> the checked value with defaults, or raises an S.Error
-- whose message holds every problem found, one per line (e.errors lists them).
function S.validate(schema, value, ctx) return S.validate_at(schema, value, ctx, '') end
-- validate_at: the same for a value that sits at `path` of a file.
function S.validate_at(schema, value, ctx, path)
  ctx = ctx or {}
  local outer = ctx.errors
  ctx.errors = {}
  local ok, r = pcall(check, schema, value, ctx, path or '')
  local errors = ctx.errors
  ctx.errors = outer
  if not ok then
    if not S.is_error(r) then error(r, 0) end
    errors[#errors + 1] = r
  end
  if #errors > 0 then S.raise_all(errors) end
  return r
end

-- 'file', 'dir', 'other' or nil (absent).
function S.path_kind(path)
  local f = io.open(path, 'rb')
  if not f then
    -- a directory cannot be opened for reading on every system, but can be listed as path/.
    local d = io.open(path .. '/.', 'rb')
    if d then d:close(); return 'dir' end
    return nil
  end
  local ok, _, code = f:read(1)
  f:close()
  if ok == nil and code == 21 then return 'dir' end   -- EISDIR
  return 'file'
end

return S
