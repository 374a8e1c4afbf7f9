-- ember.tensor.print: tostring(t) in PyTorch's layout and t:totable().
--
--   tensor([[1.0000, 2.0000],
--           [3.0000, 4.0000]], dtype=float32, shape={2, 2}, device=cpu)
--
-- One format per tensor: integers as they are, booleans as true/false, floats with 4
-- decimals, or in scientific notation when the nonzero magnitudes span more than 1000x,
-- exceed 1e8 or go below 1e-4. Above 1000 elements only the first and last 3 entries of
-- each dim are shown, with '...' between. Rows of a 1-d run wrap at 80 columns.
local ffi = require 'ffi'

local I = require 'ember.tensor.core'

local M = {}   -- module-level functions; init.lua puts them in ember
local C, Tensor, mt = I.C, I.Tensor, I.mt
local check, box, alive = I.check, I.box, I.alive

local THRESHOLD, EDGE, LINEWIDTH = 1000, 3, 80
local idx = ffi.new('int64_t[8]')
local val = ffi.new('double[1]')

-- A function reading the element at idx: exact for int64 (a typed pointer over strides
-- the runtime reports, with idx inside the sizes), through em_tensor_get otherwise
-- (which converts every dtype, float16 and bfloat16 included, and checks bounds).
local function reader(t, nd)
  if C.em_tensor_dtype(t) == C.EM_INT64 then
    local p = ffi.cast('int64_t *', C.em_tensor_data(t))
    local strides = C.em_tensor_strides(t)
    return function()
      local off = 0LL
      for d = 0, nd - 1 do off = off + idx[d] * strides[d] end
      return p[off]
    end
  end
  return function()
    check(C.em_tensor_get(t, idx, val))
    return val[0]
  end
end

-- Visits the shown elements in order (all of them, or EDGE at each end of each dim).
local function walk(d, nd, sizes, summarize, read, out)
  if d == nd then
    out[#out + 1] = read()
    return
  end
  local size = sizes[d + 1]
  if summarize and size > 2 * EDGE then
    for i = 0, EDGE - 1 do idx[d] = i; walk(d + 1, nd, sizes, summarize, read, out) end
    for i = size - EDGE, size - 1 do idx[d] = i; walk(d + 1, nd, sizes, summarize, read, out) end
  else
    for i = 0, size - 1 do idx[d] = i; walk(d + 1, nd, sizes, summarize, read, out) end
  end
end

local function format_float(v, fmt)
  if v ~= v then return 'nan' end
  if v == math.huge then return 'inf' end
  if v == -math.huge then return '-inf' end
  return string.format(fmt, v)
end

-- The values as strings in one common format; returns them and the widest length.
local function format_values(values, dtype)
  local strs, width = {}, 0
  if dtype == C.EM_BOOL then
    for i = 1, #values do strs[i] = values[i] ~= 0 and 'true' or 'false' end
  elseif C.em_dtype_is_floating(dtype) == 0 then
    for i = 1, #values do strs[i] = string.format('%d', values[i]) end
  else
    local lo, hi = math.huge, 0
    for i = 1, #values do
      local a = math.abs(values[i])
      if a ~= 0 and a < math.huge then
        if a < lo then lo = a end
        if a > hi then hi = a end
      end
    end
    local sci = hi > 0 and (hi / lo > 1000 or hi > 1e8 or lo < 1e-4)
    local fmt = sci and '%.4e' or '%.4f'
    for i = 1, #values do strs[i] = format_float(values[i], fmt) end
  end
  for i = 1, #strs do
    if #strs[i] > width then width = #strs[i] end
  end
  return strs, width
end

-- Builds the bracketed text of dims d.. (PyTorch's _tensor_str_with_formatter).
local function build(d, nd, sizes, summarize, indent, st)
  local size = sizes[d + 1]
  local cut = summarize and size > 2 * EDGE
  if d == nd - 1 then
    local elems = {}
    local function take()
      local s = st.strs[st.k]
      st.k = st.k + 1
      elems[#elems + 1] = string.rep(' ', st.width - #s) .. s
    end
    if cut then
      for _ = 1, EDGE do take() end
      elems[#elems + 1] = ' ...'
      for _ = 1, EDGE do take() end
    else
      for _ = 1, size do take() end
    end
    local per_line = math.max(1, math.floor((LINEWIDTH - indent) / (st.width + 2)))
    local lines = {}
    for i = 1, #elems, per_line do
      lines[#lines + 1] = table.concat(elems, ', ', i, math.min(i + per_line - 1, #elems))
    end
    return '[' .. table.concat(lines, ',\n' .. string.rep(' ', indent + 1)) .. ']'
  end
  local slices = {}
  if cut then
    for _ = 1, EDGE do slices[#slices + 1] = build(d + 1, nd, sizes, summarize, indent + 1, st) end
    slices[#slices + 1] = '...'
    for _ = 1, EDGE do slices[#slices + 1] = build(d + 1, nd, sizes, summarize, indent + 1, st) end
  else
    for _ = 1, size do slices[#slices + 1] = build(d + 1, nd, sizes, summarize, indent + 1, st) end
  end
  local sep = ',' .. string.rep('\n', nd - d - 1) .. string.rep(' ', indent + 1)
  return '[' .. table.concat(slices, sep) .. ']'
end

local cpu
local function on_cpu(t)
  if C.em_tensor_device(t).type == C.EM_CPU then return t end
  cpu = cpu or I.parse_device('cpu')
  return I.new(C.em_to(box, t, C.em_tensor_dtype(t), cpu))
end

local function tensor_string(t)
  local dtype = C.em_tensor_dtype(t)
  local dname = I.dtype_names[tonumber(dtype)]
  local device = I.device_name(C.em_tensor_device(t))
  if C.em_tensor_is_freed(t) ~= 0 then
    return string.format('tensor(<freed>, dtype=%s, device=%s)', dname, device)
  end
  local sizes = I.shape_of(t)
  local suffix = string.format(', dtype=%s, shape={%s}, device=%s)', dname, table.concat(sizes, ', '), device)
  local numel = tonumber(C.em_tensor_numel(t))
  if numel == 0 then return 'tensor([]' .. suffix end
  local src = on_cpu(t)
  local nd = #sizes
  local summarize = numel > THRESHOLD
  local values = {}
  walk(0, nd, sizes, summarize, reader(src, nd), values)
  local strs, width = format_values(values, dtype)
  if nd == 0 then return 'tensor(' .. strs[1] .. suffix end
  local body = build(0, nd, sizes, summarize, 7, { strs = strs, width = width, k = 1 })
  return 'tensor(' .. body .. suffix
end
Tensor.tostring = tensor_string
mt.__tostring = tensor_string
mt.__concat = function(a, b) return tostring(a) .. tostring(b) end

-- ---------------------------------------------------------------- totable
local function to_lua(p, k, kind)
  local v = p[k]
  if kind == 'int64' then return tonumber(v) end
  return v
end

local function nest(p, sizes, d, k, kind)
  local out, n = {}, sizes[d]
  if d == #sizes then
    for i = 1, n do out[i] = to_lua(p, k + i - 1, kind) end
    return out, k + n
  end
  for i = 1, n do out[i], k = nest(p, sizes, d + 1, k, kind) end
  return out, k
end

-- totable(): nested Lua tables of numbers (booleans for bool tensors); a 0-d tensor
-- gives its value. int64 values above 2^53 round to the nearest double.
function Tensor.totable(t)
  alive('totable', t)
  local src = on_cpu(t)
  local dtype = C.em_tensor_dtype(src)
  if dtype == C.EM_FLOAT16 or dtype == C.EM_BFLOAT16 then
    src = I.new(C.em_to(box, src, C.EM_FLOAT32, C.em_tensor_device(src)))
    dtype = C.EM_FLOAT32
  end
  src = I.new(C.em_contiguous(box, src))
  local p = Tensor.data_ptr(src)
  local kind = dtype == C.EM_INT64 and 'int64' or 'number'
  local sizes = I.shape_of(src)
  if #sizes == 0 then return to_lua(p, 0, kind) end
  local out = nest(p, sizes, 1, 0, kind)
  return out
end

return M
