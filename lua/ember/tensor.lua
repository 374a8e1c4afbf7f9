-- ember.tensor: the Tensor metatype over em_tensor* and the functions that make tensors.
-- Conventions (see DESIGN.md): dims and positions are 1-based and may be negative; the C
-- API is 0-based and this file converts. Every C error becomes a Lua error carrying the
-- runtime's message, which names the operation, what it got and what it expected.
local ffi = require 'ffi'

return function(ember)
  local C = ember.C

  -- ---------------------------------------------------------------- plumbing
  local Tensor = {}          -- methods
  local mt = {}              -- metatable of em_tensor
  ember.Tensor = Tensor

  local box = ffi.new('em_tensor*[1]')   -- reused out-parameter (Lua is single-threaded)
  local box2 = ffi.new('em_tensor*[1]')

  -- Raise the runtime's last error at the caller's caller.
  local function raise(level)
    error(ffi.string(C.em_last_error()), (level or 1) + 2)
  end
  ember._raise = raise

  local function check(status, level)
    if status ~= 0 then raise((level or 1) + 1) end
  end
  ember._check = check

  -- Bytes allocated since the last nudge: big allocations step Lua's GC, because Lua
  -- only sees an 8-byte cdata and would otherwise let tensors pile up.
  local GC_NUDGE_BYTES = 256 * 1024 * 1024
  local last_allocated = 0
  local function nudge_gc()
    local now = tonumber(C.em_memory_allocated())
    if now - last_allocated > GC_NUDGE_BYTES then
      collectgarbage('collect')
      last_allocated = tonumber(C.em_memory_allocated())
    elseif now < last_allocated then
      last_allocated = now
    end
  end

  -- Take ownership of a new reference returned by the runtime.
  local function wrap(ptr)
    nudge_gc()
    return ffi.gc(ptr, C.em_tensor_release)
  end
  ember._wrap = wrap

  -- Run fn(box, ...) and wrap the tensor it produced.
  local function new_tensor(status)
    if status ~= 0 then box[0] = nil; raise(1) end
    local t = box[0]
    box[0] = nil
    return wrap(t)
  end
  ember._new = new_tensor
  ember._box, ember._box2 = box, box2

  local function is_tensor(x) return type(x) == 'cdata' and ffi.istype('em_tensor*', x) end
  ember.is_tensor = is_tensor

  -- ---------------------------------------------------------------- dtypes and devices
  local dtype_out = ffi.new('em_dtype[1]')
  local dtype_cache = {}
  local function parse_dtype(name, op)
    if name == nil then return C.EM_FLOAT32 end
    local d = dtype_cache[name]
    if d then return d end
    if type(name) ~= 'string' then
      error(string.format("%s: dtype must be a string such as 'float32', got %s", op or 'dtype', type(name)), 3)
    end
    if C.em_dtype_from_name(name, dtype_out) ~= 0 then
      error((op and (op .. ': ') or '') .. ffi.string(C.em_last_error()), 3)
    end
    dtype_cache[name] = dtype_out[0]
    return dtype_out[0]
  end
  ember._parse_dtype = parse_dtype

  local dtype_names = {}
  for i = 0, tonumber(C.EM_NUM_DTYPES) - 1 do dtype_names[i] = ffi.string(C.em_dtype_name(i)) end
  ember._dtype_names = dtype_names

  local device_cache = {}
  local function parse_device(name, op)
    if name == nil then name = 'cpu' end
    local d = device_cache[name]
    if d then return d end
    if type(name) ~= 'string' then
      error(string.format("%s: device must be a string such as 'cpu' or 'cuda:0', got %s", op or 'device', type(name)), 3)
    end
    local dev = ffi.new('em_device')
    if C.em_device_parse(name, dev) ~= 0 then
      error((op and (op .. ': ') or '') .. ffi.string(C.em_last_error()), 3)
    end
    device_cache[name] = dev
    return dev
  end
  ember._parse_device = parse_device

  local function device_name(dev)
    if dev.type == C.EM_CPU then return 'cpu' end
    return 'cuda:' .. tonumber(dev.index)
  end
  ember._device_name = device_name

  -- ---------------------------------------------------------------- shapes and dims
  local sizes_buf = ffi.new('int64_t[8]')

  -- Accepts f(2, 3), f({2, 3}) or f(t.shape); returns ndim and a filled sizes buffer.
  local function parse_sizes(op, ...)
    local first = ...
    local list = type(first) == 'table' and first or { ... }
    local n = #list
    if n > 8 then error(string.format('%s: %d dims requested, ember supports up to 8', op, n), 3) end
    for i = 1, n do
      local s = list[i]
      if type(s) ~= 'number' or s ~= math.floor(s) then
        error(string.format('%s: size %d must be an integer, got %s', op, i, tostring(s)), 3)
      end
      sizes_buf[i - 1] = s
    end
    return n, sizes_buf
  end
  ember._parse_sizes = parse_sizes

  -- 1-based (negative from the end) dim to 0-based; errors name op.
  local function cdim(op, t, d, extra)
    local n = C.em_tensor_ndim(t) + (extra or 0)
    if type(d) ~= 'number' or d ~= math.floor(d) then
      error(string.format('%s: dim must be an integer, got %s', op, tostring(d)), 3)
    end
    local m = n == 0 and 1 or n
    if d == 0 or d > m or d < -m then
      error(string.format('%s: dim %d out of range for a %d-d tensor (expected 1..%d or -%d..-1)',
        op, d, n, m, m), 3)
    end
    return d > 0 and d - 1 or d + m
  end
  ember._cdim = cdim

  local function shape_of(t)
    local n = C.em_tensor_ndim(t)
    local s = {}
    for i = 0, n - 1 do s[i + 1] = tonumber(C.em_tensor_size(t, i)) end
    return s
  end
  ember._shape = shape_of

  -- ---------------------------------------------------------------- metatype
  local properties = {
    shape = shape_of,
    dtype = function(t) return dtype_names[tonumber(C.em_tensor_dtype(t))] end,
    device = function(t) return device_name(C.em_tensor_device(t)) end,
    ndim = function(t) return C.em_tensor_ndim(t) end,
  }
  ember._properties = properties

  mt.__index = function(t, k)
    local m = Tensor[k]
    if m ~= nil then return m end
    local p = properties[k]
    if p then return p(t) end
    if type(k) == 'number' then return Tensor.__index_number(t, k) end
    return nil
  end

  ember._mt = mt
  ffi.metatype('struct em_tensor', mt)

  function Tensor.__index_number(t, i)
    error('indexing with t[i] is defined once the tensor library is loaded', 2)
  end

  function Tensor.size(t, d)
    if d == nil then return shape_of(t) end
    return tonumber(C.em_tensor_size(t, cdim('size', t, d)))
  end
  function Tensor.dim(t) return C.em_tensor_ndim(t) end
  function Tensor.numel(t) return tonumber(C.em_tensor_numel(t)) end

  -- ---------------------------------------------------------------- creation
  local function opts_of(opts) return opts or {} end

  local function creator(name, cfn)
    return function(...)
      local args = { ... }
      local opts
      if type(args[#args]) == 'table' and (#args > 1 or type(args[1]) ~= 'table' or next(args[#args]) == nil
          or args[#args].dtype or args[#args].device) then
        if not (type(args[1]) == 'table' and #args == 1 and #args[1] > 0) then
          opts = table.remove(args)
        end
      end
      opts = opts_of(opts)
      local n, sizes = parse_sizes(name, unpack(args))
      return new_tensor(cfn(box, n, sizes, parse_dtype(opts.dtype, name), parse_device(opts.device, name)))
    end
  end
  ember.empty = creator('empty', C.em_empty)
  ember.zeros = creator('zeros', C.em_zeros)
  ember.ones = creator('ones', C.em_ones)

  return ember
end
