-- ember.tensor.shape: views (share storage), copies and conversion, and joining/splitting
-- (cat, stack, split, chunk, unbind).
-- Dims and positions are 1-based (negative from the end); they are validated here, so the
-- runtime's 0-based messages never reach the user for them.
local ffi = require 'ffi'

local I = require 'ember.tensor.core'

local M = {}   -- module-level functions; init.lua puts them in ember
local C, Tensor = I.C, I.Tensor
local throw, describe, arg_error = I.throw, I.describe, I.arg_error
local new_tensor, check, box, sizes_buf = I.new, I.check, I.box, I.sizes_buf
local cdim, cindex, alive = I.cdim, I.cindex, I.alive
local need_tensor, need_integer, is_tensor = I.need_tensor, I.need_integer, I.is_tensor
local parse_sizes_n, parse_dtype, parse_device = I.parse_sizes_n, I.parse_dtype, I.parse_device
local check_opts, option_set, is_dtype_name = I.check_opts, I.option_set, I.is_dtype_name
local kept = I.kept
local recording, check_inplace, no_backward = I.recording, I.check_inplace, I.no_backward

-- A result that may share storage with src: it inherits src's from_blob keep-alive.
local function new_view(status, src)
  local v = new_tensor(status)
  if next(kept) ~= nil then
    local k = kept[src]
    if k ~= nil then kept[v] = k end
  end
  return v
end
I.new_view = new_view

local function ndim_of(t) return C.em_tensor_ndim(t) end
local function size_of(t, d) return tonumber(C.em_tensor_size(t, d)) end

-- ---------------------------------------------------------------- views
-- view(2, 3) / view({2, 3}); one size may be -1 (inferred).
function Tensor.view(t, ...)
  local n = parse_sizes_n('view', true, select('#', ...), ...)
  return new_view(C.em_ag_view(box, t, n, sizes_buf), t)
end
-- Like view, but copies when the strides do not allow a view.
function Tensor.reshape(t, ...)
  local n = parse_sizes_n('reshape', true, select('#', ...), ...)
  return new_view(C.em_ag_reshape(box, t, n, sizes_buf), t)
end
function Tensor.view_as(t, other)
  need_tensor('view_as', other, 1)
  return new_view(C.em_ag_view(box, t, ndim_of(other), C.em_tensor_sizes(other)), t)
end
function Tensor.reshape_as(t, other)
  need_tensor('reshape_as', other, 1)
  return new_view(C.em_ag_reshape(box, t, ndim_of(other), C.em_tensor_sizes(other)), t)
end

-- narrow(dim, start, length): positions start .. start + length - 1 of dim.
function Tensor.narrow(t, dim, start, length)
  local d = cdim('narrow', t, dim)
  need_integer('narrow', start, 2, 'an integer (start)')
  need_integer('narrow', length, 3, 'an integer (length)')
  if ndim_of(t) == 0 then throw('narrow: cannot narrow a 0-d tensor') end
  local size = size_of(t, d)
  local s0 = start < 0 and start + size or start - 1
  if start == 0 or s0 < 0 or length < 0 or s0 + length > size then
    throw(string.format('narrow: start %d and length %d out of range for dim %d of size %d ' ..
      '(expected 1 <= start and start + length - 1 <= %d)', start, length, d + 1, size, size))
  end
  return new_view(C.em_ag_narrow(box, t, d, s0, length), t)
end

-- select(dim, i): the slice at position i of dim, which goes away.
function Tensor.select(t, dim, i)
  local d = cdim('select', t, dim)
  if ndim_of(t) == 0 then throw('select: cannot select from a 0-d tensor') end
  return new_view(C.em_ag_select(box, t, d, cindex('select', i, size_of(t, d), d + 1)), t)
end

function Tensor.transpose(t, d1, d2)
  return new_view(C.em_ag_transpose(box, t, cdim('transpose', t, d1), cdim('transpose', t, d2)), t)
end
-- t(): the transpose of a matrix; 0-d and 1-d tensors come back as they are.
function Tensor.t(t)
  alive('t', t)
  local n = ndim_of(t)
  if n > 2 then
    throw(string.format('t: expected a tensor with at most 2 dims, got a %d-d tensor (use transpose(d1, d2))', n))
  end
  return new_view(C.em_ag_transpose(box, t, 0, n == 2 and 1 or 0), t)
end

local dims_buf = ffi.new('int[8]')
I.dims_buf = dims_buf
-- permute(2, 1, 3) or permute({2, 1, 3})
function Tensor.permute(t, ...)
  local first = ...
  local list = type(first) == 'table' and first or { ... }
  local n = #list
  alive('permute', t)
  if n ~= ndim_of(t) then
    throw(string.format('permute: got %d dims for a %d-d tensor (expected a permutation of 1..%d)', n, ndim_of(t),
      ndim_of(t)))
  end
  for i = 1, n do dims_buf[i - 1] = cdim('permute', t, list[i]) end
  return new_view(C.em_ag_permute(box, t, n, dims_buf), t)
end

-- expand(4, -1, 3): broadcast size-1 dims without copying; -1 keeps a size.
function Tensor.expand(t, ...)
  local n = parse_sizes_n('expand', true, select('#', ...), ...)
  return new_view(C.em_ag_expand(box, t, n, sizes_buf), t)
end
function Tensor.expand_as(t, other)
  need_tensor('expand_as', other, 1)
  return new_view(C.em_ag_expand(box, t, ndim_of(other), C.em_tensor_sizes(other)), t)
end

-- squeeze() drops every size-1 dim; squeeze(dim) drops dim if its size is 1.
function Tensor.squeeze(t, dim)
  if dim == nil then return new_view(C.em_ag_squeeze(box, t, 0, 1), t) end
  return new_view(C.em_ag_squeeze(box, t, cdim('squeeze', t, dim), 0), t)
end
-- unsqueeze(dim): a size-1 dim at position dim of the result (1..ndim + 1, or negative).
function Tensor.unsqueeze(t, dim)
  return new_view(C.em_ag_unsqueeze(box, t, cdim('unsqueeze', t, dim, 1)), t)
end
-- flatten([start_dim = 1 [, end_dim = -1]])
function Tensor.flatten(t, start_dim, end_dim)
  local s = cdim('flatten', t, start_dim or 1)
  local e = cdim('flatten', t, end_dim or -1)
  if s > e then
    throw(string.format('flatten: start_dim %d comes after end_dim %d', s + 1, e + 1))
  end
  return new_view(C.em_ag_flatten(box, t, s, e), t)
end

-- as_strided(sizes, strides [, offset]): a raw view; offset counts elements of the
-- storage from 0 (as storage_offset() does). The runtime refuses views past the storage.
local strides_buf = ffi.new('int64_t[8]')
function Tensor.as_strided(t, sizes, strides, offset)
  if type(sizes) ~= 'table' then arg_error('as_strided', 1, 'a table of sizes', sizes) end
  if type(strides) ~= 'table' then arg_error('as_strided', 2, 'a table of strides', strides) end
  local n = parse_sizes_n('as_strided', false, 1, sizes)
  if #strides ~= n then
    throw(string.format('as_strided: got %d sizes and %d strides, expected as many of each', n, #strides))
  end
  for i = 1, n do
    need_integer('as_strided', strides[i], 2, 'a table of integer strides')
    strides_buf[i - 1] = strides[i]
  end
  if offset == nil then offset = tonumber(C.em_tensor_offset(t)) end
  no_backward('as_strided', t)
  need_integer('as_strided', offset, 3, 'an integer (storage offset)')
  return new_view(C.em_as_strided(box, t, n, sizes_buf, strides_buf, offset), t)
end

-- unbind([dim = 1]): a Lua list of the slices along dim.
function Tensor.unbind(t, dim)
  local d = cdim('unbind', t, dim or 1)
  if ndim_of(t) == 0 then throw('unbind: cannot unbind a 0-d tensor') end
  local out = {}
  for i = 1, size_of(t, d) do out[i] = new_view(C.em_ag_select(box, t, d, i - 1), t) end
  return out
end

-- ---------------------------------------------------------------- copies and conversion
-- contiguous(): t itself (a new handle) when already contiguous, else a packed copy.
function Tensor.contiguous(t) return new_view(C.em_ag_contiguous(box, t), t) end
-- While recording, a clone is t * 1 (exact), so that it carries t's gradient.
function Tensor.clone(t)
  if recording(t) then return new_tensor(C.em_ag_binary_scalar(C.EM_MUL, box, t, 1, 0)) end
  return new_tensor(C.em_clone(box, t))
end

-- copy_(src [, {non_blocking = true}]): copies src into t (broadcasting, converting
-- dtype); a number fills. non_blocking: a copy between pinned host memory and a GPU
-- returns once queued (see ember.cuda).
local COPY_OPTS = option_set('non_blocking')
function Tensor.copy_(t, src, opts)
  if type(src) == 'number' or type(src) == 'boolean' then return Tensor.fill_(t, src) end
  need_tensor('copy_', src, 1)
  check_opts('copy_', opts, COPY_OPTS, 2)
  check_inplace('copy_', t, src)
  if opts and opts.non_blocking then
    check(C.em_copy_async(t, src, 1))
  else
    check(C.em_copy_(t, src))
  end
  return t
end

local TO_OPTS = option_set('dtype', 'device', 'non_blocking')
-- to('float64'), to('cuda:0'), to('float64', 'cpu'), to(other), to{dtype =, device =},
-- to('cuda', {non_blocking = true}): t itself (a new handle) when nothing changes, else a
-- converted copy. non_blocking applies to a move between a GPU and the host (not while
-- recording gradients): from pinned memory it returns once queued, and to the host it
-- gives a pinned tensor, valid once the stream has reached the copy.
local function to_arg(op, x, n, dtype, device, non_blocking)
  local tx = type(x)
  if x == nil then return dtype, device, non_blocking end
  if tx == 'string' then
    if is_dtype_name(x) then return parse_dtype(x, op), device, non_blocking end
    if C.em_device_parse(x, ffi.new('em_device')) ~= 0 then
      throw(string.format("%s: unknown dtype or device '%s' (expected a dtype such as 'float32' or a device " ..
        "such as 'cpu' or 'cuda:0')", op, x))
    end
    return dtype, parse_device(x, op), non_blocking
  end
  if tx == 'cdata' and is_tensor(x) then return C.em_tensor_dtype(x), C.em_tensor_device(x), non_blocking end
  if tx == 'table' then
    check_opts(op, x, TO_OPTS, n)
    return x.dtype and parse_dtype(x.dtype, op) or dtype, x.device and parse_device(x.device, op) or device,
      non_blocking or x.non_blocking == true
  end
  arg_error(op, n, 'a dtype, a device, a tensor or {dtype =, device =}', x)
end

-- Without a GPU, a move to one fails here with the reason rather than deep in an allocation.
local function check_target(op, device)
  if device.type == C.EM_CUDA and C.em_cuda_is_available() == 0 then
    throw(string.format('%s: no CUDA device is available (%s)', op, ffi.string(C.em_cuda_unavailable_reason())))
  end
end

local function convert_to(op, t, a, b, c)
  alive(op, t)
  local dtype, device, nb = to_arg(op, a, 1, C.em_tensor_dtype(t), C.em_tensor_device(t), false)
  dtype, device, nb = to_arg(op, b, 2, dtype, device, nb)
  dtype, device, nb = to_arg(op, c, 3, dtype, device, nb)
  check_target(op, device)
  local from = C.em_tensor_device(t)
  if nb and (from.type ~= device.type or from.index ~= device.index) and not recording(t) then
    local ndim, sizes = C.em_tensor_ndim(t), C.em_tensor_sizes(t)
    local out
    if device.type == C.EM_CPU then
      out = new_tensor(C.em_empty_pinned(box, ndim, sizes, dtype))
    else
      out = new_tensor(C.em_empty(box, ndim, sizes, dtype, device))
    end
    check(C.em_copy_async(out, t, 1))
    return out
  end
  return new_view(C.em_ag_to(box, t, dtype, device), t)
end
function Tensor.to(t, a, b, c) return convert_to('to', t, a, b, c) end

local function converter(name)
  local dtype = parse_dtype(name)
  return function(t) return new_view(C.em_ag_to(box, t, dtype, C.em_tensor_device(t)), t) end
end
Tensor.float, Tensor.double = converter('float32'), converter('float64')
Tensor.half, Tensor.bfloat16 = converter('float16'), converter('bfloat16')
Tensor.int, Tensor.long = converter('int32'), converter('int64')
Tensor.byte, Tensor.bool = converter('uint8'), converter('bool')
function Tensor.cpu(t, opts) return convert_to('cpu', t, 'cpu', opts) end
-- cuda([i] [, {non_blocking = true}]): to GPU i, by default the current device.
function Tensor.cuda(t, index, opts)
  if type(index) == 'table' then index, opts = nil, index end
  local name = 'cuda'
  if index ~= nil then
    name = 'cuda:' .. need_integer('cuda', index, 1)
  elseif C.em_cuda_is_available() ~= 0 then
    name = 'cuda:' .. tonumber(C.em_cuda_current_device())
  end
  return convert_to('cuda', t, name, opts)
end
-- type() is the dtype's name; type(dtype) converts, as to(dtype) does.
function Tensor.type(t, dtype)
  if dtype == nil then return I.dtype_names[tonumber(C.em_tensor_dtype(t))] end
  if type(dtype) ~= 'string' or not is_dtype_name(dtype) then arg_error('type', 1, 'a dtype name', dtype) end
  return Tensor.to(t, dtype)
end
function Tensor.type_as(t, other)
  need_tensor('type_as', other, 1)
  return new_view(C.em_ag_to(box, t, C.em_tensor_dtype(other), C.em_tensor_device(t)), t)
end

-- t[...] (element access, slices, masks, index tensors) lives in tensor/index.lua.

-- ---------------------------------------------------------------- joining and splitting
local list_buf, list_cap = nil, 0
local function tensor_list(op, list)
  if type(list) ~= 'table' then arg_error(op, 1, 'a list of tensors', list) end
  local n = #list
  if n == 0 then throw(op .. ': expected a non-empty list of tensors, got an empty one') end
  if n > list_cap then
    list_cap = math.max(n, 2 * list_cap, 16)
    list_buf = ffi.new('em_tensor*[?]', list_cap)
  end
  for i = 1, n do
    local x = list[i]
    if not is_tensor(x) then
      throw(string.format('%s: expected a tensor at position %d of the list, got %s', op, i, describe(x)))
    end
    list_buf[i - 1] = x
  end
  return n
end

local function release_list(n)
  for i = 0, n - 1 do list_buf[i] = nil end
end

-- cat(list [, dim = 1]): joins along an existing dim.
function M.cat(list, dim)
  local n = tensor_list('cat', list)
  local d = cdim('cat', list[1], dim or 1)
  local st = C.em_ag_cat(box, list_buf, n, d)
  release_list(n)
  return new_tensor(st)
end
I.ember_cat = M.cat   -- for tensor/ops.lua
-- stack(list [, dim = 1]): joins along a new dim (1..ndim + 1 of the result).
function M.stack(list, dim)
  local n = tensor_list('stack', list)
  local d = cdim('stack', list[1], dim or 1, 1)
  local st = C.em_ag_stack(box, list_buf, n, d)
  release_list(n)
  return new_tensor(st)
end

-- split(size [, dim = 1]): views of `size` positions (the last may be shorter);
-- split({s1, s2, ...} [, dim]): views of those sizes, which must add up to the dim's.
function Tensor.split(t, sizes, dim)
  local d = cdim('split', t, dim or 1)
  if ndim_of(t) == 0 then throw('split: cannot split a 0-d tensor') end
  local total, out = size_of(t, d), {}
  if type(sizes) == 'number' then
    if sizes ~= math.floor(sizes) or sizes <= 0 then
      throw(string.format('split: size must be a positive integer, got %s', tostring(sizes)))
    end
    local start = 0
    repeat
      local len = math.min(sizes, total - start)
      out[#out + 1] = new_view(C.em_ag_narrow(box, t, d, start, len), t)
      start = start + len
    until start >= total
    return out
  end
  if type(sizes) ~= 'table' then arg_error('split', 1, 'a size or a table of sizes', sizes) end
  local sum = 0
  for i = 1, #sizes do
    local s = sizes[i]
    if type(s) ~= 'number' or s ~= math.floor(s) or s < 0 then
      throw(string.format('split: size %d must be a non-negative integer, got %s', i, tostring(s)))
    end
    sum = sum + s
  end
  if sum ~= total then
    throw(string.format('split: sizes {%s} add up to %d, but dim %d has size %d', table.concat(sizes, ', '), sum,
      d + 1, total))
  end
  local start = 0
  for i = 1, #sizes do
    out[i] = new_view(C.em_ag_narrow(box, t, d, start, sizes[i]), t)
    start = start + sizes[i]
  end
  return out
end

-- chunk(n [, dim = 1]): at most n views of equal size (the last may be shorter), as in
-- PyTorch.
function Tensor.chunk(t, n, dim)
  need_integer('chunk', n, 1, 'a positive integer (the number of chunks)')
  if n <= 0 then throw(string.format('chunk: expected a positive number of chunks, got %d', n)) end
  local d = cdim('chunk', t, dim or 1)
  if ndim_of(t) == 0 then throw('chunk: cannot chunk a 0-d tensor') end
  local size = size_of(t, d)
  return Tensor.split(t, math.max(1, math.ceil(size / n)), d + 1)
end

-- Module-level forms: ember.reshape(t, ...), ember.transpose(t, 1, 2), ...
I.export({ 'view', 'reshape', 'narrow', 'select', 'transpose', 't', 'permute', 'expand', 'squeeze', 'unsqueeze',
  'flatten', 'as_strided', 'unbind', 'contiguous', 'clone', 'split', 'chunk' }, M)

return M
