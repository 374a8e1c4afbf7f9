-- ember.tensor.core: the Tensor method table and metatable, and the internals the
-- tensor files share (ember.tensor.create, .shape, .math, .index, .print): dims, sizes,
-- autograd guards. Not API. Its table falls back to ember.internal, so a tensor file reads
-- every shared helper from one place. Conventions (as PyTorch's): dims and positions are
-- 1-based and may be negative; the C API is 0-based and the Lua layer converts. Every
-- misuse becomes a Lua error whose message starts with the operation's name and whose
-- position is the user's line.
local ffi = require 'ffi'
local U = require 'ember.internal'

local I = setmetatable({}, { __index = U })
local C = U.C
local throw, describe, arg_error, check = U.throw, U.describe, U.arg_error, U.check
local is_tensor, need_tensor, alive = U.is_tensor, U.need_tensor, U.alive
local dtype_names, device_name = U.dtype_names, U.device_name

local Tensor = {}          -- methods
local mt = {}              -- metatable of em_tensor
I.Tensor, I.mt = Tensor, mt

-- ember.name(t, ...) for each Tensor method name: the same function, after checking that
-- t is a tensor (an FFI conversion error would not say which call was wrong). Returns the
-- table of these functions, which the caller's module returns for init.lua to merge.
function I.export(names, into)
  into = into or {}
  for _, name in ipairs(names) do
    local f = Tensor[name]
    into[name] = function(t, ...)
      if not is_tensor(t) then arg_error(name, 1, 'a tensor', t) end
      return f(t, ...)
    end
  end
  return into
end

-- Autograd (see autograd.lua): differentiable ops call the runtime's em_ag_* forms,
-- which record on the tape when grad mode is on and an input requires grad, and cost
-- nothing otherwise. recording(a, b) says whether an op on a (and b) would record.
local function recording(a, b)
  if C.em_grad_enabled() == 0 then return false end
  return (is_tensor(a) and C.em_requires_grad(a) ~= 0) or (is_tensor(b) and C.em_requires_grad(b) ~= 0)
end
I.recording = recording

-- In-place writes cannot be recorded: the runtime's rule (em_check_inplace), called here
-- with the name the user wrote (fill_, t[{...}] = v) before the C call checks it again under
-- its own name.
local function check_inplace(op, t, src)
  if C.em_check_inplace(op, t, is_tensor(src) and src or nil) ~= 0 then throw(U.last_error()) end
end
I.check_inplace = check_inplace

-- Ops without a recorded backward refuse inputs that need one, rather than silently
-- dropping their gradient.
function I.no_backward(op, t)
  if recording(t) then
    throw(op .. ': not differentiable in ember yet; call it on t:detach() or inside no_grad()')
  end
end

-- ---------------------------------------------------------------- shapes and dims
local sizes_buf = ffi.new('int64_t[8]')
I.sizes_buf = sizes_buf

local function put_size(op, i, s, allow_neg1)
  if type(s) == 'cdata' then s = tonumber(s) or s end   -- int64 sizes from C
  if type(s) ~= 'number' or s ~= math.floor(s) then
    throw(string.format('%s: size %d must be an integer, got %s', op, i,
      type(s) == 'number' and tostring(s) or describe(s)))
  end
  if s < 0 and not (allow_neg1 and s == -1) then
    throw(string.format('%s: size %d is %d, expected a non-negative integer%s', op, i, s,
      allow_neg1 and ' (or -1 to infer it)' or ''))
  end
  sizes_buf[i - 1] = s
end

-- Sizes from the first n arguments: f(2, 3), f({2, 3}) or f(t.shape). Returns ndim; the
-- sizes are in sizes_buf. No table is made for the varargs form.
local function parse_sizes_n(op, allow_neg1, n, ...)
  local first = ...
  if type(first) == 'table' then
    if n > 1 then
      throw(op .. ': expected sizes as numbers or as one table, got a table and more arguments')
    end
    local len = #first
    if len > 8 then throw(string.format('%s: %d dims requested, ember supports up to 8', op, len)) end
    for i = 1, len do put_size(op, i, first[i], allow_neg1) end
    return len
  end
  if n > 8 then throw(string.format('%s: %d dims requested, ember supports up to 8', op, n)) end
  for i = 1, n do put_size(op, i, (select(i, ...)), allow_neg1) end
  return n
end
I.parse_sizes_n = parse_sizes_n

-- Accepts f(2, 3), f({2, 3}) or f(t.shape); returns ndim and the filled sizes buffer.
local function parse_sizes(op, ...)
  return parse_sizes_n(op, false, select('#', ...), ...), sizes_buf
end
I.parse_sizes = parse_sizes

-- 1-based (negative from the end) dim to 0-based; extra widens the range (unsqueeze and
-- stack take a dim of the result, which has one more).
local function cdim(op, t, d, extra)
  alive(op, t)
  local n = C.em_tensor_ndim(t) + (extra or 0)
  if type(d) ~= 'number' or d ~= math.floor(d) then
    throw(string.format('%s: dim must be an integer, got %s', op,
      type(d) == 'number' and tostring(d) or describe(d)))
  end
  local m = n == 0 and 1 or n
  if d == 0 or d > m or d < -m then
    throw(string.format('%s: dim %d out of range for a %d-d tensor (expected 1..%d or -%d..-1)', op, d,
      n - (extra or 0), m, m))
  end
  return d > 0 and d - 1 or d + m
end
I.cdim = cdim

-- A 1-based position (negative from the end) along a dim of the given size, to 0-based.
local function cindex(op, i, size, dim)
  if type(i) ~= 'number' or i ~= math.floor(i) then
    throw(string.format('%s: index must be an integer, got %s', op,
      type(i) == 'number' and tostring(i) or describe(i)))
  end
  if i == 0 or i > size or i < -size then
    throw(string.format('%s: index %d out of range for dim %d of size %d (expected 1..%d or -%d..-1)', op, i,
      dim, size, size, size))
  end
  return i > 0 and i - 1 or i + size
end
I.cindex = cindex

local function shape_of(t)
  local n = C.em_tensor_ndim(t)
  local s = {}
  for i = 0, n - 1 do s[i + 1] = tonumber(C.em_tensor_size(t, i)) end
  return s
end
I.shape_of = shape_of

-- ---------------------------------------------------------------- metatype
local properties = {
  shape = shape_of,
  dtype = function(t) return dtype_names[tonumber(C.em_tensor_dtype(t))] end,
  device = function(t) return device_name(C.em_tensor_device(t)) end,
  ndim = function(t) return C.em_tensor_ndim(t) end,
}
-- Writable fields (t.name = v); other layers (autograd) add theirs here.
local setters = {}
I.properties, I.setters = properties, setters

mt.__index = function(t, k)
  local m = Tensor[k]
  if m ~= nil then return m end
  local p = properties[k]
  if p then return p(t) end
  local tk = type(k)
  if tk == 'number' then return I.index_get(t, { k }) end  -- t[i]: select along dim 1
  if tk == 'table' or U.is_tensor(k) then return I.index_get(t, k) end   -- see tensor/index.lua
  if tk == 'string' then
    throw(string.format("tensor: no method or field '%s'", k))
  end
  throw(string.format('t[key]: a tensor is indexed by a position, a table {i, {a, b}, ...}, a bool mask or ' ..
    'an int64 index tensor, got %s', describe(k)))
end

mt.__newindex = function(t, k, v)
  if type(k) == 'number' then return I.index_set(t, { k }, v) end
  if type(k) == 'table' or U.is_tensor(k) then return I.index_set(t, k, v) end
  local s = setters[k]
  if s then return s(t, v) end
  if type(k) ~= 'string' then
    throw(string.format('t[key] = v: a tensor is indexed by a position, a table {i, {a, b}, ...}, a bool mask ' ..
      'or an int64 index tensor, got %s', describe(k)))
  end
  throw(string.format("tensor: cannot set field '%s' (use t[i] = value or t[{i, j}] = value to assign elements)",
    tostring(k)))
end

mt.__len = function(t)
  alive('#', t)
  if C.em_tensor_ndim(t) == 0 then throw('#: a 0-d tensor has no length; use t:item()') end
  return tonumber(C.em_tensor_size(t, 0))
end


-- ---------------------------------------------------------------- inspection
function Tensor.size(t, d)
  if d == nil then return shape_of(t) end
  return tonumber(C.em_tensor_size(t, cdim('size', t, d)))
end
function Tensor.stride(t, d)
  if d == nil then
    local s = {}
    for i = 0, C.em_tensor_ndim(t) - 1 do s[i + 1] = tonumber(C.em_tensor_stride(t, i)) end
    return s
  end
  return tonumber(C.em_tensor_stride(t, cdim('stride', t, d)))
end
function Tensor.dim(t) return C.em_tensor_ndim(t) end
function Tensor.numel(t) return tonumber(C.em_tensor_numel(t)) end
Tensor.nelement = Tensor.numel
function Tensor.is_contiguous(t) return C.em_tensor_is_contiguous(t) ~= 0 end
function Tensor.storage_offset(t) return tonumber(C.em_tensor_offset(t)) end
function Tensor.element_size(t) return tonumber(C.em_dtype_size(C.em_tensor_dtype(t))) end
function Tensor.is_floating_point(t) return C.em_dtype_is_floating(C.em_tensor_dtype(t)) ~= 0 end
function Tensor.is_freed(t) return C.em_tensor_is_freed(t) ~= 0 end
-- True when both tensors view the same storage.
function Tensor.shares_storage(t, other)
  need_tensor('shares_storage', other, 1)
  return C.em_tensor_storage_id(t) == C.em_tensor_storage_id(other)
end

-- The address of the first element as a pointer of the element's C type (uint16_t *
-- for float16 and bfloat16; a device address for tensors that are not on the CPU).
-- The pointer does not keep the tensor alive, and nothing checks what is read through it.
local ptr_types = {
  [C.EM_FLOAT32] = ffi.typeof('float *'), [C.EM_FLOAT64] = ffi.typeof('double *'),
  [C.EM_FLOAT16] = ffi.typeof('uint16_t *'), [C.EM_BFLOAT16] = ffi.typeof('uint16_t *'),
  [C.EM_INT32] = ffi.typeof('int32_t *'), [C.EM_INT64] = ffi.typeof('int64_t *'),
  [C.EM_UINT8] = ffi.typeof('uint8_t *'), [C.EM_BOOL] = ffi.typeof('bool *'),
}
I.ptr_types = ptr_types
function Tensor.data_ptr(t)
  alive('data_ptr', t)
  return ffi.cast(ptr_types[tonumber(C.em_tensor_dtype(t))], C.em_tensor_data(t))
end

local item_out = ffi.new('double[1]')
local item_int = ffi.new('int64_t[1]')
-- A one-element tensor's value: a number, or a boolean for bool tensors (so that
-- `if t:any():item() then` means what it says: 0 would be true in Lua).
function Tensor.item(t)
  local dt = C.em_tensor_dtype(t)
  if dt == C.EM_INT64 then
    check(C.em_tensor_item_int64(t, item_int))
    return tonumber(item_int[0])
  end
  check(C.em_tensor_item(t, item_out))
  if dt == C.EM_BOOL then return item_out[0] ~= 0 end
  return item_out[0]
end

-- Releases the storage now (when no other view shares it); later use is an error.
function Tensor.free(t)
  check(C.em_tensor_free(t))
end


return I
