-- ember.tensor: the Tensor metatype over em_tensor* and the plumbing every tensor function
-- shares. Conventions (see DESIGN.md): dims and positions are 1-based and may be negative;
-- the C API is 0-based and the Lua layer converts. Every misuse becomes a Lua error whose
-- message starts with the operation's name and whose position is the user's line.
--
-- The library is split by area; each file returns function(ember, I), where I holds the
-- internal helpers defined here:
--   tensor_create.lua  ember.tensor, zeros/ones/full/arange/..., random, from_blob
--   tensor_shape.lua   views, copies and conversion, t[{i, j}], cat/stack/split/chunk
--   tensor_math.lua    elementwise ops, operators, reductions, linear algebra
--   tensor_index.lua   index_select/gather/scatter/masked_*/nonzero
--   tensor_print.lua   tostring and totable
local ffi = require 'ffi'

return function(ember)
  local C = ember.C

  -- ---------------------------------------------------------------- plumbing
  local Tensor = {}          -- methods
  local mt = {}              -- metatable of em_tensor
  local I = {}               -- internals shared with the tensor_*.lua files
  ember.Tensor = Tensor
  ember._I = I

  -- Reused out-parameters (Lua is single-threaded): box/box2 receive new tensors and are
  -- always left NULL; obox carries an existing tensor for in-place (result-into) calls.
  local box = ffi.new('em_tensor*[1]')
  local box2 = ffi.new('em_tensor*[1]')
  local obox = ffi.new('em_tensor*[1]')

  -- Errors are raised at the first stack frame outside the ember library (C frames
  -- skipped), so the position is the user's line however deep in ember the check sits:
  -- in a method, an operator, a module-level alias, or a layer of ember.nn.
  local lib_dir = (debug.getinfo(1, 'S').source or ''):match('^@(.*[/\\])')
  local lib_source = lib_dir and ('@' .. lib_dir)
  local function throw(msg)
    local level = 2
    while true do
      local info = debug.getinfo(level, 'S')
      if not info then level = 0; break end
      if info.what ~= 'C' and not (lib_source and info.source:sub(1, #lib_source) == lib_source) then break end
      level = level + 1
    end
    error(msg, level)
  end
  I.throw = throw
  ember._throw = throw

  local function raise() throw(ffi.string(C.em_last_error())) end
  I.raise = raise
  ember._raise = raise            -- kept for other modules: ember._raise(level) ignores level

  local function check(status)
    if status ~= 0 then raise() end
  end
  I.check = check
  ember._check = check

  -- Tensors reach Lua as references (`struct em_tensor &`), not pointers: indexing a
  -- pointer with a number is pointer arithmetic in LuaJIT and never reaches a metamethod,
  -- whereas a struct reference sends t[i] to __index. So the opaque struct is completed
  -- here with one placeholder field (Lua never reads it); references convert back to
  -- em_tensor * wherever a C function takes one.
  ffi.cdef('struct em_tensor { int32_t em_opaque_; };')
  local tensor_struct = ffi.typeof('struct em_tensor')
  local function is_tensor(x) return type(x) == 'cdata' and ffi.istype(tensor_struct, x) end
  ember.is_tensor = is_tensor
  I.is_tensor = is_tensor

  -- The C type of a cdata value as LuaJIT spells it ('float [4]', 'int64_t *'), read from
  -- tostring: ffi.typeof(x) would do, but test runners such as busted memoise ffi.typeof
  -- by argument and so would keep every value passed to it alive.
  local function ctype_name(x)
    local s = tostring(x)
    return s:match('^cdata<(.*)>: ') or (s:match('ULL$') and 'uint64_t') or (s:match('LL$') and 'int64_t') or '?'
  end
  I.ctype_name = ctype_name

  -- What a value is, for "expected ..., got <this>" messages.
  local function describe(x)
    local tx = type(x)
    if tx ~= 'cdata' then return tx end
    if is_tensor(x) then return 'tensor' end
    return 'cdata<' .. ctype_name(x) .. '>'
  end
  I.describe = describe

  -- "op: expected <what> for argument n, got <type>". Arguments count after self.
  local function arg_error(op, n, what, x)
    throw(string.format('%s: expected %s for argument %d, got %s', op, what, n, describe(x)))
  end
  I.arg_error = arg_error

  local function need_tensor(op, x, n)
    if not is_tensor(x) then arg_error(op, n, 'a tensor', x) end
    return x
  end
  I.need_tensor = need_tensor

  local function need_number(op, x, n, what)
    if type(x) ~= 'number' then arg_error(op, n, what or 'a number', x) end
    return x
  end
  I.need_number = need_number

  local function need_integer(op, x, n, what)
    if type(x) ~= 'number' or x ~= math.floor(x) or x ~= x then arg_error(op, n, what or 'an integer', x) end
    return x
  end
  I.need_integer = need_integer

  -- ember.name(t, ...) for each Tensor method name: the same function, after checking that
  -- t is a tensor (an FFI conversion error would not say which call was wrong).
  function I.export(names)
    for _, name in ipairs(names) do
      local f = Tensor[name]
      ember[name] = function(t, ...)
        if not is_tensor(t) then arg_error(name, 1, 'a tensor', t) end
        return f(t, ...)
      end
    end
  end

  local function alive(op, t)
    if C.em_tensor_is_freed(t) ~= 0 then throw(op .. ': the tensor was freed with free()') end
  end
  I.alive = alive

  -- Autograd (see autograd.lua): differentiable ops call the runtime's em_ag_* forms,
  -- which record on the tape when grad mode is on and an input requires grad, and cost
  -- nothing otherwise. recording(a, b) says whether an op on a (and b) would record.
  local function recording(a, b)
    if C.em_grad_enabled() == 0 then return false end
    return (is_tensor(a) and C.em_requires_grad(a) ~= 0) or (is_tensor(b) and C.em_requires_grad(b) ~= 0)
  end
  I.recording = recording

  -- In-place writes cannot be recorded: refused while recording when the target (or the
  -- value written into it) requires grad, as the runtime's ag_check_inplace does.
  local function check_inplace(op, t, src)
    if C.em_grad_enabled() == 0 then return end
    if C.em_requires_grad(t) ~= 0 then
      throw(string.format('%s: in-place operation on a tensor that requires grad%s; run it inside no_grad() or on a ' ..
        'detached copy', op, C.em_is_leaf(t) ~= 0 and ' (a leaf)' or ''))
    end
    if is_tensor(src) and C.em_requires_grad(src) ~= 0 then
      throw(string.format('%s: an in-place operation cannot record gradients for its operand that requires grad; ' ..
        'use the out-of-place form', op))
    end
  end
  I.check_inplace = check_inplace

  -- Ops without a recorded backward refuse inputs that need one, rather than silently
  -- dropping their gradient.
  function I.no_backward(op, t)
    if recording(t) then
      throw(op .. ': not differentiable in ember yet; call it on t:detach() or inside no_grad()')
    end
  end

  -- Option tables: unknown keys are errors, so a typo never goes unnoticed.
  local function option_set(...)
    local set = { _list = table.concat({ ... }, ', ') }
    for i = 1, select('#', ...) do set[select(i, ...)] = true end
    return set
  end
  I.option_set = option_set

  local function check_opts(op, opts, allowed, n)
    if opts == nil then return end
    if type(opts) ~= 'table' then arg_error(op, n or 1, 'an options table', opts) end
    for k in pairs(opts) do
      if not allowed[k] then
        throw(string.format("%s: unknown option '%s' (expected %s)", op, tostring(k), allowed._list))
      end
    end
  end
  I.check_opts = check_opts

  -- An options table is a table without list entries ({dtype = 'float64'}); a list such
  -- as {2, 3} is sizes. An empty table counts as options unless it is the only argument.
  local function is_opts(x, only)
    return type(x) == 'table' and x[1] == nil and (next(x) ~= nil or not only)
  end
  I.is_opts = is_opts

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
    local step = math.max(GC_NUDGE_MIN, collectgarbage('count') * 1024 * 8)
    if now - last_allocated > step then
      collectgarbage('collect')
      last_allocated = tonumber(C.em_memory_allocated())
    elseif now < last_allocated then
      last_allocated = now
    end
  end

  -- Take ownership of a new reference returned by the runtime.
  local function wrap(ptr)
    nudge_gc()
    return ffi.gc(ptr[0], C.em_tensor_release)
  end
  ember._wrap = wrap
  I.wrap = wrap

  -- The tensor a result-first call left in box, or the call's error.
  local function new_tensor(status)
    local t = box[0]
    box[0] = nil
    if status ~= 0 then raise() end
    return wrap(t)
  end
  ember._new = new_tensor
  I.new = new_tensor

  -- Two results (values and indices) left in box and box2.
  local function new_pair(status)
    local a, b = box[0], box2[0]
    box[0], box2[0] = nil, nil
    if status ~= 0 then raise() end
    return wrap(a), wrap(b)
  end
  I.new_pair = new_pair

  -- In-place calls: into(t) passes t as the result, done(status, t) returns it.
  local function into(t)
    obox[0] = t
    return obox
  end
  local function done(status, t)
    obox[0] = nil
    if status ~= 0 then raise() end
    return t
  end
  I.into, I.done = into, done
  ember._box, ember._box2 = box, box2
  I.box, I.box2 = box, box2

  -- ---------------------------------------------------------------- dtypes and devices
  local dtype_out = ffi.new('em_dtype[1]')
  local dtype_cache = {}
  local function parse_dtype(name, op)
    if name == nil then return C.EM_FLOAT32 end
    local d = dtype_cache[name]
    if d then return d end
    if type(name) ~= 'string' then
      throw(string.format("%s: dtype must be a string such as 'float32', got %s", op or 'dtype', describe(name)))
    end
    if C.em_dtype_from_name(name, dtype_out) ~= 0 then
      throw((op or 'dtype') .. ': ' .. ffi.string(C.em_last_error()))
    end
    dtype_cache[name] = tonumber(dtype_out[0])
    return dtype_cache[name]
  end
  ember._parse_dtype = parse_dtype
  I.parse_dtype = parse_dtype

  local dtype_names = {}
  for i = 0, tonumber(C.EM_NUM_DTYPES) - 1 do dtype_names[i] = ffi.string(C.em_dtype_name(i)) end
  ember._dtype_names = dtype_names
  I.dtype_names = dtype_names

  local function is_dtype_name(s) return dtype_cache[s] ~= nil or C.em_dtype_from_name(s, dtype_out) == 0 end
  I.is_dtype_name = is_dtype_name

  local device_cache = {}
  local function parse_device(name, op)
    if name == nil then name = 'cpu' end
    local d = device_cache[name]
    if d then return d end
    if type(name) ~= 'string' then
      throw(string.format("%s: device must be a string such as 'cpu' or 'cuda:0', got %s", op or 'device',
        describe(name)))
    end
    local dev = ffi.new('em_device')
    if C.em_device_parse(name, dev) ~= 0 then
      throw((op or 'device') .. ': ' .. ffi.string(C.em_last_error()))
    end
    device_cache[name] = dev
    return dev
  end
  ember._parse_device = parse_device
  I.parse_device = parse_device

  local function device_name(dev)
    if dev.type == C.EM_CPU then return 'cpu' end
    return 'cuda:' .. tonumber(dev.index)
  end
  ember._device_name = device_name
  I.device_name = device_name

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
  ember._parse_sizes = parse_sizes
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
  ember._cdim = cdim
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
  ember._shape = shape_of
  I.shape_of = shape_of

  -- ---------------------------------------------------------------- metatype
  local properties = {
    shape = shape_of,
    dtype = function(t) return dtype_names[tonumber(C.em_tensor_dtype(t))] end,
    device = function(t) return device_name(C.em_tensor_device(t)) end,
    ndim = function(t) return C.em_tensor_ndim(t) end,
  }
  ember._properties = properties
  -- Writable fields (t.name = v); other layers (autograd) add theirs here.
  local setters = {}
  ember._setters = setters

  mt.__index = function(t, k)
    local m = Tensor[k]
    if m ~= nil then return m end
    local p = properties[k]
    if p then return p(t) end
    if type(k) == 'number' then return I.index_get(t, { k }) end  -- t[i]: select along dim 1
    if type(k) == 'table' then return I.index_get(t, k) end   -- t[{i, j}]: see tensor_shape.lua
    return nil
  end

  mt.__newindex = function(t, k, v)
    if type(k) == 'number' then return I.index_set(t, { k }, v) end
    if type(k) == 'table' then return I.index_set(t, k, v) end
    local s = setters[k]
    if s then return s(t, v) end
    throw(string.format("tensor: cannot set field '%s' (use t[i] = value or t[{i, j}] = value to assign elements)", tostring(k)))
  end

  mt.__len = function(t)
    alive('#', t)
    if C.em_tensor_ndim(t) == 0 then throw('#: a 0-d tensor has no length; use t:item()') end
    return tonumber(C.em_tensor_size(t, 0))
  end

  ember._mt = mt
  I.mt = mt

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

  -- ---------------------------------------------------------------- the rest, by area
  require('ember.tensor_create')(ember, I)
  require('ember.tensor_shape')(ember, I)
  require('ember.tensor_math')(ember, I)
  require('ember.tensor_index')(ember, I)
  require('ember.tensor_print')(ember, I)

  ffi.metatype('struct em_tensor', mt)
  return ember
end
