-- ember.tensor.create: tensors from nothing, from Lua tables and from foreign memory, and
-- the fills (fill_, zero_, uniform_, ...). Every creation function returns float32 unless
-- given {dtype = ...}, except randint and randperm (int64: they make positions and labels).
-- Ranges follow PyTorch: arange's end and randint's high are exclusive.
local ffi = require 'ffi'

local I = require 'ember.tensor.core'

local M = {}   -- module-level functions; init.lua puts them in ember
local C, Tensor = I.C, I.Tensor
local throw, describe, arg_error = I.throw, I.describe, I.arg_error
local new_tensor, check, into, done = I.new, I.check, I.into, I.done
local box, sizes_buf = I.box, I.sizes_buf
local parse_dtype, parse_device, parse_sizes_n = I.parse_dtype, I.parse_device, I.parse_sizes_n
local is_opts, check_opts, option_set = I.is_opts, I.check_opts, I.option_set
local need_number, need_integer, need_tensor, is_tensor = I.need_number, I.need_integer, I.need_tensor, I.is_tensor

local OPTS = option_set('dtype', 'device', 'requires_grad')

-- opts.requires_grad (every creator's option, as torch.tensor(data, requires_grad=True)):
-- the new tensor is a leaf that records gradients.
local function leaf(t, opts)
  local flag = opts and opts.requires_grad
  if flag == nil then return t end
  if type(flag) ~= 'boolean' then throw('requires_grad: expected a boolean, got ' .. type(flag)) end
  if flag then check(C.em_requires_grad_(t, 1)) end
  return t
end

-- ---------------------------------------------------------------- sizes..., opts
-- f(2, 3), f({2, 3}), f(2, 3, {dtype = 'float64'}): returns ndim, dtype, device and
-- the number of arguments before the options. `fixed` arguments after the sizes (full's
-- value) are left to the caller.
local function sizes_and_opts(op, fixed, ...)
  local n = select('#', ...)
  local opts
  if n > 0 then
    local last = select(n, ...)
    if is_opts(last, n == 1) then opts, n = last, n - 1 end
  end
  check_opts(op, opts, OPTS, n + 1)
  local ndim = parse_sizes_n(op, false, n - fixed, ...)
  local dtype = opts and opts.dtype
  local device = opts and opts.device
  return ndim, parse_dtype(dtype, op), parse_device(device, op), n, opts
end

local function creator(name, fname)
  return function(...)
    local ndim, dtype, device, _, opts = sizes_and_opts(name, 0, ...)
    return leaf(new_tensor(C[fname](box, ndim, sizes_buf, dtype, device)), opts)
  end
end
M.empty = creator('empty', 'em_empty')
M.zeros = creator('zeros', 'em_zeros')
M.ones = creator('ones', 'em_ones')

local function as_fill_value(op, v, n)
  if type(v) == 'boolean' then return v and 1 or 0 end
  if type(v) ~= 'number' then arg_error(op, n, 'a number or boolean (the fill value)', v) end
  return v
end

-- full(2, 3, value [, opts]) or full({2, 3}, value [, opts]).
function M.full(...)
  local ndim, dtype, device, n, opts = sizes_and_opts('full', 1, ...)
  if n < 1 then throw('full: expected sizes and a fill value, got no arguments') end
  local value = as_fill_value('full', (select(n, ...)), n)
  return leaf(new_tensor(C.em_full(box, ndim, sizes_buf, value, dtype, device)), opts)
end

-- arange(end), arange(start, end [, step]) [, opts]: start, start + step, ... < end.
function M.arange(a, b, c, d)
  local opts
  if is_opts(b) then opts, b = b, nil
  elseif is_opts(c) then opts, c = c, nil
  elseif is_opts(d) then opts = d end
  check_opts('arange', opts, OPTS)
  local start, stop, step
  if b == nil then
    start, stop, step = 0, need_number('arange', a, 1, 'a number (end)'), 1
  else
    start = need_number('arange', a, 1, 'a number (start)')
    stop = need_number('arange', b, 2, 'a number (end)')
    step = c == nil and 1 or need_number('arange', c, 3, 'a number (step)')
  end
  return leaf(new_tensor(C.em_arange(box, start, stop, step, parse_dtype(opts and opts.dtype, 'arange'),
    parse_device(opts and opts.device, 'arange'))), opts)
end

-- linspace(start, end, steps [, opts]): steps values from start to end inclusive.
function M.linspace(start, stop, steps, opts)
  need_number('linspace', start, 1, 'a number (start)')
  need_number('linspace', stop, 2, 'a number (end)')
  need_integer('linspace', steps, 3, 'an integer (steps)')
  check_opts('linspace', opts, OPTS, 4)
  return leaf(new_tensor(C.em_linspace(box, start, stop, steps, parse_dtype(opts and opts.dtype, 'linspace'),
    parse_device(opts and opts.device, 'linspace'))), opts)
end

-- eye(n [, m] [, opts]): ones on the diagonal.
function M.eye(n, m, opts)
  if is_opts(m) then opts, m = m, nil end
  need_integer('eye', n, 1, 'a non-negative integer (rows)')
  if m ~= nil then need_integer('eye', m, 2, 'a non-negative integer (columns)') end
  if n < 0 or (m or 0) < 0 then throw(string.format('eye: got %d x %d, expected non-negative sizes', n, m or n)) end
  check_opts('eye', opts, OPTS)
  return leaf(new_tensor(C.em_eye(box, n, m or -1, parse_dtype(opts and opts.dtype, 'eye'),
    parse_device(opts and opts.device, 'eye'))), opts)
end

-- ---------------------------------------------------------------- fills (in place)
function Tensor.fill_(t, value)
  I.check_inplace('fill_', t)
  check(C.em_fill(t, as_fill_value('fill_', value, 1)))
  return t
end
function Tensor.zero_(t)
  I.check_inplace('zero_', t)
  check(C.em_fill(t, 0))
  return t
end
-- uniform_([low = 0, high = 1]): values in [low, high).
function Tensor.uniform_(t, low, high)
  low = low == nil and 0 or need_number('uniform_', low, 1)
  high = high == nil and 1 or need_number('uniform_', high, 2)
  I.check_inplace('uniform_', t)
  check(C.em_uniform_(t, low, high))
  return t
end
function Tensor.normal_(t, mean, std)
  mean = mean == nil and 0 or need_number('normal_', mean, 1)
  std = std == nil and 1 or need_number('normal_', std, 2)
  I.check_inplace('normal_', t)
  check(C.em_normal_(t, mean, std))
  return t
end
-- random_(high) or random_(low, high): integers in [low, high), low defaulting to 0.
function Tensor.random_(t, low, high)
  need_integer('random_', low, 1)
  if high == nil then low, high = 0, low else need_integer('random_', high, 2) end
  I.check_inplace('random_', t)
  check(C.em_randint_(t, low, high))
  return t
end
function Tensor.bernoulli_(t, p)
  p = p == nil and 0.5 or need_number('bernoulli_', p, 1, 'a probability')
  I.check_inplace('bernoulli_', t)
  check(C.em_bernoulli_(t, p))
  return t
end

-- ---------------------------------------------------------------- random tensors
function M.manual_seed(seed)
  need_integer('manual_seed', seed, 1, 'a non-negative integer')
  if seed < 0 then throw(string.format('manual_seed: got %d, expected a non-negative integer', seed)) end
  C.em_manual_seed(seed)
end

local state_seed, state_offset = ffi.new('uint64_t[1]'), ffi.new('uint64_t[1]')
-- The generator's state as {seed = uint64, offset = uint64}, for set_rng_state.
function M.get_rng_state()
  C.em_generator_get_state(state_seed, state_offset)
  return { seed = state_seed[0], offset = state_offset[0] }
end
function M.set_rng_state(state)
  if type(state) ~= 'table' or state.seed == nil or state.offset == nil then
    arg_error('set_rng_state', 1, 'a table {seed =, offset =} from get_rng_state()', state)
  end
  C.em_generator_set_state(state.seed, state.offset)
end
-- skip_rng(numel): the generator moves on as a random fill of numel elements would, drawing
-- nothing (a rank skips the model-parallel tables it does not hold).
function M.skip_rng(numel)
  need_integer('skip_rng', numel, 1, 'a non-negative integer')
  if numel < 0 then throw(string.format('skip_rng: got %d, expected a non-negative integer', numel)) end
  C.em_generator_skip(numel)
end

function M.rand(...)
  local ndim, dtype, device, _, opts = sizes_and_opts('rand', 0, ...)
  local t = new_tensor(C.em_empty(box, ndim, sizes_buf, dtype, device))
  check(C.em_uniform_(t, 0, 1))
  return leaf(t, opts)
end
function M.randn(...)
  local ndim, dtype, device, _, opts = sizes_and_opts('randn', 0, ...)
  local t = new_tensor(C.em_empty(box, ndim, sizes_buf, dtype, device))
  check(C.em_normal_(t, 0, 1))
  return leaf(t, opts)
end

-- randint(high, sizes [, opts]) or randint(low, high, sizes [, opts]): integers in
-- [low, high), int64 unless opts.dtype says otherwise. sizes is a table or a number.
function M.randint(a, b, c, d)
  local low, high, sizes, opts
  if type(b) == 'table' then
    low, high, sizes, opts = 0, a, b, c
  else
    low, high, sizes, opts = a, b, c, d
  end
  need_integer('randint', low, 1, 'an integer (low)')
  need_integer('randint', high, 2, 'an integer (high)')
  if type(sizes) == 'number' then sizes = { sizes } end
  if type(sizes) ~= 'table' or is_opts(sizes, true) then arg_error('randint', 3, 'a table of sizes', sizes) end
  check_opts('randint', opts, OPTS)
  local ndim = parse_sizes_n('randint', false, 1, sizes)
  local t = new_tensor(C.em_empty(box, ndim, sizes_buf, parse_dtype(opts and opts.dtype or 'int64', 'randint'),
    parse_device(opts and opts.device, 'randint')))
  check(C.em_randint_(t, low, high))
  return t
end

-- randperm(n [, opts]): a random permutation of 1..n (1-based like every Lua index).
function M.randperm(n, opts)
  need_integer('randperm', n, 1, 'a non-negative integer')
  check_opts('randperm', opts, OPTS, 2)
  local t = new_tensor(C.em_randperm(box, n, parse_dtype(opts and opts.dtype or 'int64', 'randperm'),
    parse_device(opts and opts.device, 'randperm')))
  return done(C.em_binary_scalar(C.EM_ADD, into(t), t, 1, 0), t)
end

-- ---------------------------------------------------------------- *_like
local function like_args(op, t, opts, n)
  need_tensor(op, t, 1)
  check_opts(op, opts, OPTS, n)
  I.alive(op, t)
  local dtype = opts and opts.dtype and parse_dtype(opts.dtype, op) or C.em_tensor_dtype(t)
  local device = opts and opts.device and parse_device(opts.device, op) or C.em_tensor_device(t)
  return C.em_tensor_ndim(t), C.em_tensor_sizes(t), dtype, device
end
function M.empty_like(t, opts) return leaf(new_tensor(C.em_empty(box, like_args('empty_like', t, opts, 2))), opts) end
function M.zeros_like(t, opts) return leaf(new_tensor(C.em_zeros(box, like_args('zeros_like', t, opts, 2))), opts) end
function M.ones_like(t, opts) return leaf(new_tensor(C.em_ones(box, like_args('ones_like', t, opts, 2))), opts) end
function M.full_like(t, value, opts)
  local ndim, sizes, dtype, device = like_args('full_like', t, opts, 3)
  return leaf(new_tensor(C.em_full(box, ndim, sizes, as_fill_value('full_like', value, 2), dtype, device)), opts)
end
function M.rand_like(t, opts)
  local r = new_tensor(C.em_empty(box, like_args('rand_like', t, opts, 2)))
  check(C.em_uniform_(r, 0, 1))
  return leaf(r, opts)
end
function M.randn_like(t, opts)
  local r = new_tensor(C.em_empty(box, like_args('randn_like', t, opts, 2)))
  check(C.em_normal_(r, 0, 1))
  return leaf(r, opts)
end

-- ---------------------------------------------------------------- ember.tensor
-- Walks a nested table: checks it is rectangular with number or boolean leaves and
-- reports the first offending position as [i][j]... Returns whether every leaf is a
-- boolean. `path` holds the current position (only read to build an error message).
local function where(path, depth, last)
  local parts = {}
  for i = 1, depth - 1 do parts[i] = '[' .. path[i] .. ']' end
  if last then parts[#parts + 1] = '[' .. last .. ']' end
  return table.concat(parts)
end

local function validate(x, sizes, ndim, depth, path, all_bool)
  local n = sizes[depth]
  if depth == ndim then
    for i = 1, n do
      local v = x[i]
      local tv = type(v)
      if tv == 'number' then
        all_bool = false
      elseif tv == 'table' then
        throw(string.format('tensor: ragged nested table: %s is a table, expected a number (like %s)',
          where(path, depth, i), where(path, depth, 1)))
      elseif tv ~= 'boolean' then
        throw(string.format('tensor: expected a number or boolean at %s, got %s%s', where(path, depth, i), describe(v),
          is_tensor(v) and ' (ember.stack joins a list of tensors)' or ''))
      end
    end
    return all_bool
  end
  for i = 1, n do
    local v = x[i]
    path[depth] = i
    if type(v) ~= 'table' then
      if v == nil or type(v) == 'number' or type(v) == 'boolean' then
        throw(string.format('tensor: ragged nested table: %s is %s, expected a table of %d elements (like %s)',
          where(path, depth + 1), v == nil and 'missing' or ('a ' .. type(v)), sizes[depth + 1],
          where(path, depth, 1)))
      end
      throw(string.format('tensor: expected a number or boolean at %s, got %s', where(path, depth + 1), describe(v)))
    end
    if #v ~= sizes[depth + 1] then
      throw(string.format('tensor: ragged nested table: %s has %d element(s), expected %d (like %s)',
        where(path, depth + 1), #v, sizes[depth + 1], where(path, depth, 1)))
    end
    all_bool = validate(v, sizes, ndim, depth + 1, path, all_bool)
  end
  return all_bool
end

-- Writes the leaves in row-major order through p (a typed pointer); returns the next slot.
local function fill(x, p, k, depth, ndim, as_bool)
  if depth == ndim then
    for i = 1, #x do
      local v = x[i]
      if type(v) == 'boolean' then v = v and 1 or 0 end
      if as_bool then v = v ~= 0 end
      p[k] = v
      k = k + 1
    end
    return k
  end
  for i = 1, #x do k = fill(x[i], p, k, depth + 1, ndim, as_bool) end
  return k
end

local function from_tensor(t, opts)
  local dtype = opts and opts.dtype and parse_dtype(opts.dtype, 'tensor') or C.em_tensor_dtype(t)
  local device = opts and opts.device and parse_device(opts.device, 'tensor') or C.em_tensor_device(t)
  local r = new_tensor(C.em_to(box, t, dtype, device))
  if r == t or C.em_tensor_storage_id(r) == C.em_tensor_storage_id(t) then r = new_tensor(C.em_clone(box, r)) end
  return r
end

-- ember.tensor(data [, opts]): a new tensor holding a copy of data, a number, a boolean,
-- a nested table of them (shape inferred) or a tensor. float32 by default; bool when
-- every leaf is a boolean.
function M.tensor(data, opts)
  check_opts('tensor', opts, OPTS, 2)
  local td = type(data)
  if td == 'cdata' and is_tensor(data) then return leaf(from_tensor(data, opts), opts) end
  if td ~= 'table' and td ~= 'number' and td ~= 'boolean' then
    arg_error('tensor', 1, 'a number, boolean, nested table or tensor', data)
  end
  local sizes, ndim, x = {}, 0, data
  while type(x) == 'table' do
    ndim = ndim + 1
    if ndim > 8 then throw('tensor: the nested table is more than 8 levels deep (ember supports up to 8 dims)') end
    sizes[ndim] = #x
    if #x == 0 then break end
    x = x[1]
  end
  local all_bool
  if ndim == 0 then
    all_bool = td == 'boolean'
    data = { data }
  else
    all_bool = validate(data, sizes, ndim, 1, {}, true)
    if sizes[ndim] == 0 then all_bool = false end
  end
  local dtype = opts and opts.dtype and parse_dtype(opts.dtype, 'tensor') or
      (all_bool and C.EM_BOOL or C.EM_FLOAT32)
  local device = parse_device(opts and opts.device, 'tensor')
  -- Fill a CPU tensor of a dtype Lua can write, then convert if needed.
  local host_dtype = dtype
  if dtype == C.EM_FLOAT16 or dtype == C.EM_BFLOAT16 then host_dtype = C.EM_FLOAT32 end
  for i = 1, ndim do sizes_buf[i - 1] = sizes[i] end
  local cpu = parse_device('cpu')
  local t = new_tensor(C.em_empty(box, ndim, sizes_buf, host_dtype, cpu))
  fill(data, Tensor.data_ptr(t), 0, 1, ndim == 0 and 1 or ndim, host_dtype == C.EM_BOOL)
  if host_dtype ~= dtype or device.type ~= C.EM_CPU then t = new_tensor(C.em_to(box, t, dtype, device)) end
  return leaf(t, opts)
end

-- ---------------------------------------------------------------- from_blob
-- Tensors adopted by from_blob with {keep = obj} hold obj here; views made through the
-- Lua API inherit the entry (tensor/shape.lua), so obj lives while any of them does.
local kept = setmetatable({}, { __mode = 'k' })
I.kept = kept

local elem_dtypes = {
  float = C.EM_FLOAT32, double = C.EM_FLOAT64, int = C.EM_INT32, int32_t = C.EM_INT32,
  int64_t = C.EM_INT64, ['unsigned char'] = C.EM_UINT8, uint8_t = C.EM_UINT8, bool = C.EM_BOOL,
}
local BLOB_OPTS = option_set('dtype', 'device', 'strides', 'keep')
local strides_buf = ffi.new('int64_t[8]')

-- from_blob(ptr, sizes [, {dtype =, strides =, device =, keep =}]): a tensor over memory
-- that ember does not own; nothing is copied. The memory must outlive the tensor and its
-- views: pass keep = the owning Lua object (an ffi array, a string...) to tie them. The
-- dtype defaults to the pointer's element type (float * gives float32), else float32.
-- Strides are in elements. For ffi arrays the extent is checked against their size.
function M.from_blob(ptr, sizes, opts)
  if type(ptr) ~= 'cdata' or is_tensor(ptr) then arg_error('from_blob', 1, 'a cdata pointer or array', ptr) end
  if type(sizes) == 'number' then sizes = { sizes } end
  if type(sizes) ~= 'table' then arg_error('from_blob', 2, 'a table of sizes', sizes) end
  check_opts('from_blob', opts, BLOB_OPTS, 3)
  local elem, kind = I.ctype_name(ptr):match('^(.-)%s*([%*%[])')
  if not elem then arg_error('from_blob', 1, 'a cdata pointer or array', ptr) end
  elem = elem:gsub('^const ', '')
  local dtype = opts and opts.dtype and parse_dtype(opts.dtype, 'from_blob') or elem_dtypes[elem] or C.EM_FLOAT32
  local ndim = parse_sizes_n('from_blob', false, 1, sizes)
  local strides = opts and opts.strides
  local extent = 1
  if strides ~= nil then
    if type(strides) ~= 'table' or #strides ~= ndim then
      throw(string.format('from_blob: strides must be a table of %d integers (one per dim), got %s', ndim,
        type(strides) == 'table' and (#strides .. ' entries') or describe(strides)))
    end
    for i = 1, ndim do
      local s = strides[i]
      if type(s) ~= 'number' or s ~= math.floor(s) or s < 0 then
        throw(string.format('from_blob: stride %d must be a non-negative integer, got %s', i, tostring(s)))
      end
      strides_buf[i - 1] = s
      if sizes_buf[i - 1] == 0 then extent = 0 end
      if extent > 0 then extent = extent + (tonumber(sizes_buf[i - 1]) - 1) * s end
    end
  else
    for i = 1, ndim do extent = extent * tonumber(sizes_buf[i - 1]) end
  end
  if kind == '[' then
    local need = extent * tonumber(C.em_dtype_size(dtype))
    local have = ffi.sizeof(ptr)
    if have and need > have then
      throw(string.format('from_blob: shape {%s} of %s needs %d bytes, but the array holds %d', table.concat(sizes,
        ', '), I.dtype_names[tonumber(dtype)], need, have))
    end
  end
  local t = new_tensor(C.em_from_blob(box, ffi.cast('void *', ptr), ndim, sizes_buf, strides and strides_buf or nil,
    dtype, parse_device(opts and opts.device, 'from_blob'), nil, nil))
  if opts and opts.keep ~= nil then kept[t] = opts.keep end
  return t
end

return M
