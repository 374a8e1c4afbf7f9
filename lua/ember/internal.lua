-- ember.internal: helpers shared by ember's own modules; not API (it may change between
-- releases without notice). It holds, once for the whole library:
--   errors      throw(msg [, level]), raise([level]), check(status [, level])
--   arguments   describe (kind), describe_value, a_type_name, arg_error, need_tensor/number/integer,
--               is_int, need_int, need_bool, need_choice
--   options     option_set(...), check_opts(op, opts, allowed [, n]), is_opts(x)
--   tensors     is_tensor, wrap(ptr), new(status), new_pair(status), into/done, box/box2,
--               alive(op, t)
--   dtypes and devices   parse_dtype, dtype_names, is_dtype_name, parse_device, device_name
-- Every message starts with the name of the call that failed ("op: ...") and says what
-- was given and what was expected.
if package.loaded['ember'] == nil then
  -- required before ember itself (a script's first line): ember's own loading requires
  -- this module, so let it do so, and hand back that one copy
  package.loaded['ember.internal'] = nil
  require 'ember'
  local loaded = package.loaded['ember.internal']
  if loaded then return loaded end
end
local ffi = require 'ffi'
local C = require('ember').C   -- init.lua loads libember before any module needs this

local I = { C = C, ffi = ffi }

-- ---------------------------------------------------------------- errors
-- Errors are raised at the first stack frame outside the ember library (C frames
-- skipped), so the position is the user's line however deep in ember the check sits:
-- in a method, an operator, a module-level alias, or a layer of ember.nn.
local lib_dir = (debug.getinfo(1, 'S').source or ''):match('^@(.*[/\\])')
local lib_source = lib_dir and ('@' .. lib_dir)

-- throw(msg): raised at the user's line. throw(msg, level): error's own level, counted
-- from the caller of throw (0: no position, for messages that travel to another process).
local function throw(msg, level)
  if level ~= nil then
    error(msg, level == 0 and 0 or level + 1)
  end
  level = 2
  while true do
    local info = debug.getinfo(level, 'S')
    if not info then level = 0; break end
    if info.what ~= 'C' and not (lib_source and info.source:sub(1, #lib_source) == lib_source) then break end
    level = level + 1
  end
  error(msg, level)
end
I.throw = throw

-- The runtime's message for the call that just failed.
local function last_error() return ffi.string(C.em_last_error()) end
I.last_error = last_error

local function raise(level)
  if level ~= nil then error(last_error(), level == 0 and 0 or level + 1) end
  throw(last_error())
end
I.raise = raise

-- Status of a C call (0 = success): any other value raises the runtime's message.
local function check(status, level)
  if status ~= 0 then
    if level ~= nil then error(last_error(), level == 0 and 0 or level + 1) end
    throw(last_error())
  end
  return status
end
I.check = check

-- ---------------------------------------------------------------- tensors
-- Tensors reach Lua as references (`struct em_tensor &`), not pointers: indexing a
-- pointer with a number is pointer arithmetic in LuaJIT and never reaches a metamethod,
-- whereas a struct reference sends t[i] to __index. So the opaque struct is completed
-- here with one placeholder field (Lua never reads it); references convert back to
-- em_tensor * wherever a C function takes one.
ffi.cdef('struct em_tensor { int32_t em_opaque_; };')
local tensor_struct = ffi.typeof('struct em_tensor')
local function is_tensor(x) return type(x) == 'cdata' and ffi.istype(tensor_struct, x) end
I.is_tensor = is_tensor

-- ---------------------------------------------------------------- describing values
-- The C type of a cdata value as LuaJIT spells it ('float [4]', 'int64_t *'), read from
-- tostring: ffi.typeof(x) would do, but test runners such as busted memoise ffi.typeof
-- by argument and so would keep every value passed to it alive.
local function ctype_name(x)
  local s = tostring(x)
  return s:match('^cdata<(.*)>: ') or (s:match('ULL$') and 'uint64_t') or (s:match('LL$') and 'int64_t') or '?'
end
I.ctype_name = ctype_name

-- What kind of value x is ('number', 'tensor', 'cdata<float *>'), for "expected ..., got
-- <kind>" messages about argument types.
local function type_name(x)
  local tx = type(x)
  if tx ~= 'cdata' then return tx end
  if is_tensor(x) then return 'tensor' end
  return 'cdata<' .. ctype_name(x) .. '>'
end
I.describe = type_name

-- The kind with an article ('a number', 'a tensor', "the string 'x'", 'nil').
function I.a_type_name(x)
  if x == nil then return 'nil' end
  if is_tensor(x) then return 'a tensor' end
  return type(x) == 'string' and string.format("the string '%s'", x) or ('a ' .. type(x))
end

-- A value as a message shows it: numbers and booleans as written, strings quoted, the
-- kind of anything else ('a tensor', 'table').
local function describe_value(x)
  if is_tensor(x) then return 'a tensor' end
  if type(x) == 'string' then return string.format("'%s'", x) end
  if type(x) == 'number' or type(x) == 'boolean' then return tostring(x) end
  return type(x)
end
I.describe_value = describe_value

-- ---------------------------------------------------------------- arguments
-- "op: expected <what> for argument n, got <kind>". Arguments count after self.
local function arg_error(op, n, what, x)
  throw(string.format('%s: expected %s for argument %d, got %s', op, what, n, type_name(x)))
end
I.arg_error = arg_error

function I.need_tensor(op, x, n)
  if not is_tensor(x) then arg_error(op, n, 'a tensor', x) end
  return x
end

function I.need_number(op, x, n, what)
  if type(x) ~= 'number' then arg_error(op, n, what or 'a number', x) end
  return x
end

-- An integer is a finite whole number: NaN and ±inf are not integers.
local function is_int(x)
  return type(x) == 'number' and x == math.floor(x) and x > -math.huge and x < math.huge
end
I.is_int = is_int

function I.need_integer(op, x, n, what)
  if not is_int(x) then arg_error(op, n, what or 'an integer', x) end
  return x
end

-- Named values (options, fields): "op: name must be an integer >= min, got <value>".
function I.need_int(op, name, x, min)
  if not is_int(x) or (min and x < min) then
    local bound = (min and min > -math.huge) and (' >= ' .. min) or ''
    throw(string.format('%s: %s must be an integer%s, got %s', op, name, bound, describe_value(x)))
  end
  return x
end

function I.need_bool(op, name, x)
  if type(x) ~= 'boolean' then
    throw(string.format('%s: %s must be true or false, got %s', op, name, describe_value(x)))
  end
  return x
end

-- choices maps each accepted string to what it stands for; returns that.
function I.need_choice(op, name, x, choices)
  local v = choices[x]
  if v == nil then
    local names = {}
    for k in pairs(choices) do names[#names + 1] = "'" .. k .. "'" end
    table.sort(names)
    throw(string.format('%s: %s must be one of %s, got %s', op, name, table.concat(names, ', '), describe_value(x)))
  end
  return v
end

-- ---------------------------------------------------------------- options
-- Option tables: unknown keys are errors, so a typo never goes unnoticed. allowed is an
-- option_set (its names listed in the order given) or any table whose keys are the names.
local function option_set(...)
  local set = { _list = table.concat({ ... }, ', ') }
  for i = 1, select('#', ...) do set[select(i, ...)] = true end
  return set
end
I.option_set = option_set

local function allowed_list(allowed)
  if allowed._list then return allowed._list end
  local names = {}
  for name in pairs(allowed) do names[#names + 1] = tostring(name) end
  table.sort(names)
  return table.concat(names, ', ')
end

-- opts may be nil (no options); n is its argument position, for the message. Returns
-- opts, or a shared read-only empty table when it is nil.
local NO_OPTS = setmetatable({},
  { __newindex = function() error('ember.internal: the empty options table is read-only', 2) end })
function I.check_opts(op, opts, allowed, n)
  if opts == nil then return NO_OPTS end
  if type(opts) ~= 'table' then arg_error(op, n or 1, 'an options table', opts) end
  for k in pairs(opts) do
    if k == '_list' or not allowed[k] then
      throw(string.format("%s: unknown option '%s' (expected %s)", op, tostring(k), allowed_list(allowed)))
    end
  end
  return opts
end

-- An options table is a table without list entries ({dtype = 'float64'}); a list such
-- as {2, 3} is sizes. An empty table counts as options unless it is the only argument.
function I.is_opts(x, only)
  return type(x) == 'table' and x[1] == nil and (next(x) ~= nil or not only)
end

-- ---------------------------------------------------------------- wrapping tensors
-- Reused out-parameters (Lua is single-threaded): box/box2 receive new tensors and are
-- always left NULL; obox carries an existing tensor for in-place (result-into) calls.
local box = ffi.new('em_tensor*[1]')
local box2 = ffi.new('em_tensor*[1]')
local obox = ffi.new('em_tensor*[1]')
I.box, I.box2 = box, box2

-- Bytes allocated since the last nudge: big allocations run Lua's GC, because Lua
-- only sees an 8-byte cdata and would otherwise let tensors pile up. Collecting often
-- matters for speed too: memory freed early is reused while it is still mapped and in
-- cache, where fresh memory costs page faults (a training step of the Fashion-MNIST MLP
-- ran 2.6x slower with a 256 MB step than with 16 MB). A full collection costs time in
-- proportion to the Lua heap, so the step grows with the heap: at most ~1/8 of the
-- work goes to collecting however large the program's own tables are.
local GC_NUDGE_MIN = 16 * 1024 * 1024
local last_allocated = 0
local function nudge_gc()
  local now = tonumber(C.em_memory_allocated())
  -- the heap's size is asked only past the minimum step: collectgarbage is a call compiled
  -- code cannot make, and asking on every tensor broke each caller's trace in two
  if now - last_allocated > GC_NUDGE_MIN and now - last_allocated > collectgarbage('count') * 1024 * 8 then
    collectgarbage('collect')
    last_allocated = tonumber(C.em_memory_allocated())
  elseif now < last_allocated then
    last_allocated = now
  end
end

-- Take ownership of a new reference (an em_tensor *) returned by the runtime.
local function wrap(ptr)
  nudge_gc()
  return ffi.gc(ptr[0], C.em_tensor_release)
end
I.wrap = wrap

-- release_temp(t, ...): hands back Lua's reference to a temporary tensor t now, instead of
-- when the collector runs: what the autograd graph keeps stays alive (the runtime counts
-- its own references) and the rest returns to the allocator while it is still in cache;
-- the collector then runs less often. Not when t is nil or is one of the following
-- arguments (values that escape: an input, a result, a pass-through such as dropout with
-- p = 0). The caller must not touch t afterwards; layers use it only for results of their
-- own ops that no hook has seen.
function I.release_temp(t, ...)
  if t == nil then return end
  for i = 1, select('#', ...) do
    if rawequal(t, (select(i, ...))) then return end
  end
  ffi.gc(t, nil)
  C.em_tensor_release(t)
end

-- The tensor a result-first call left in box, or the call's error.
function I.new(status)
  local t = box[0]
  box[0] = nil
  if status ~= 0 then raise() end
  return wrap(t)
end

-- Two results (values and indices) left in box and box2.
function I.new_pair(status)
  local a, b = box[0], box2[0]
  box[0], box2[0] = nil, nil
  if status ~= 0 then raise() end
  return wrap(a), wrap(b)
end

-- In-place calls: into(t) passes t as the result, done(status, t) returns it.
function I.into(t)
  obox[0] = t
  return obox
end
function I.done(status, t)
  obox[0] = nil
  if status ~= 0 then raise() end
  return t
end

function I.alive(op, t)
  if C.em_tensor_is_freed(t) ~= 0 then throw(op .. ': the tensor was freed with free()') end
end

-- ---------------------------------------------------------------- dtypes and devices
local dtype_out = ffi.new('em_dtype[1]')
local dtype_cache = {}
function I.parse_dtype(name, op)
  if name == nil then return C.EM_FLOAT32 end
  local d = dtype_cache[name]
  if d then return d end
  if type(name) ~= 'string' then
    throw(string.format("%s: dtype must be a string such as 'float32', got %s", op or 'dtype', type_name(name)))
  end
  if C.em_dtype_from_name(name, dtype_out) ~= 0 then throw((op or 'dtype') .. ': ' .. last_error()) end
  dtype_cache[name] = tonumber(dtype_out[0])
  return dtype_cache[name]
end

local dtype_names = {}
for i = 0, tonumber(C.EM_NUM_DTYPES) - 1 do dtype_names[i] = ffi.string(C.em_dtype_name(i)) end
I.dtype_names = dtype_names

function I.is_dtype_name(s) return dtype_cache[s] ~= nil or C.em_dtype_from_name(s, dtype_out) == 0 end

local device_cache = {}
function I.parse_device(name, op)
  if name == nil then name = 'cpu' end
  local d = device_cache[name]
  if d then return d end
  if type(name) ~= 'string' then
    throw(string.format("%s: device must be a string such as 'cpu' or 'cuda:0', got %s", op or 'device',
      type_name(name)))
  end
  local dev = ffi.new('em_device')
  if C.em_device_parse(name, dev) ~= 0 then throw((op or 'device') .. ': ' .. last_error()) end
  device_cache[name] = dev
  return dev
end

function I.device_name(dev)
  if dev.type == C.EM_CPU then return 'cpu' end
  return 'cuda:' .. tonumber(dev.index)
end

return I
