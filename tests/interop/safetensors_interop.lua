-- safetensors_interop.lua: ember's half of the interop test (driven by
-- safetensors_interop.py, which holds the other half in NumPy).
--   ember safetensors_interop.lua write FILE   saves the tensors the Python side expects
--   ember safetensors_interop.lua check FILE   loads a file NumPy wrote and checks it
-- Values follow formulas both sides share (see value() here and in the Python file).
-- Tensors are made and read through the C API so that only the file format is tested.
local ffi = require 'ffi'
local ember = require 'ember'
local C = ember.C
local I = require 'ember.internal'   -- tensors built through the C API
local CPU = ffi.new('em_device', {C.EM_CPU, 0})

local mode, path = arg[1], arg[2]
assert(mode == 'write' or mode == 'check', 'usage: safetensors_interop.lua write|check FILE')

-- Element i (0-based, C order) of a tensor of this dtype.
local function value(dtype, i)
  if dtype == 'int32' then return i * 1000003 - 7 end
  if dtype == 'int64' then return (i - 2) * 3000000000 end
  if dtype == 'uint8' then return (i * 7) % 256 end
  if dtype == 'bool' then return i % 3 == 0 and 1 or 0 end
  return (i - 3) * 0.25     -- floats: exact in float16 and bfloat16 for these sizes
end

local ctypes = { float32 = 'float *', float64 = 'double *', int32 = 'int32_t *', int64 = 'int64_t *',
                 uint8 = 'uint8_t *', bool = 'uint8_t *' }

local function numel(t) return tonumber(C.em_tensor_numel(t)) end

local function make(dtype, shape)
  local n = #shape
  local store = (dtype == 'float16' or dtype == 'bfloat16') and 'float32' or dtype
  local t = I.new(C.em_empty(I.box, n, ffi.new('int64_t[?]', n + 1, shape), C['EM_' .. store:upper()], CPU))
  local p = ffi.cast(ctypes[store], C.em_tensor_data(t))
  for i = 0, numel(t) - 1 do p[i] = value(dtype, i) end
  if store ~= dtype then   -- ember's own conversion makes the half-precision tensors
    t = I.new(C.em_to(I.box, t, C['EM_' .. dtype:upper()], CPU))
  end
  return t
end

if mode == 'write' then
  local tensors = {
    ['f32'] = make('float32', {2, 3}),
    ['f64.scalar'] = make('float64', {}),
    ['f16'] = make('float16', {4}),
    ['bf16'] = make('bfloat16', {2, 2}),
    ['i32'] = make('int32', {3}),
    ['i64'] = make('int64', {2, 2}),
    ['u8'] = make('uint8', {5}),
    ['mask'] = make('bool', {2, 3}),
    ['empty'] = make('float32', {0, 4}),
    ['caf\195\169 "q"'] = make('float32', {1}),
  }
  -- A transposed (non-contiguous) view: Python must see it contiguous.
  tensors['transposed'] = I.new(C.em_transpose(I.box, make('float32', {2, 3}), 0, 1))
  ember.save(path, tensors, { metadata = { framework = 'ember', note = 'caf\195\169 "quoted"\n' } })
  return
end

-- check: what safetensors_interop.py writes.
local expected = {
  f32 = {'float32', {2, 3}}, f64 = {'float64', {}}, f16 = {'float16', {5}}, bf16 = {'bfloat16', {3, 2}},
  i32 = {'int32', {4}}, i64 = {'int64', {3}}, u8 = {'uint8', {2, 2}}, mask = {'bool', {7}},
  empty = {'int64', {3, 0}}, ['\195\169t\195\169 \226\130\172'] = {'float32', {2}},
}
local tensors, meta = ember.load(path)
local failures = {}
local function expect(ok, fmt, ...)
  if not ok then failures[#failures + 1] = string.format(fmt, ...) end
end
for name, want in pairs(expected) do
  local t = tensors[name]
  expect(t ~= nil, 'tensor %q missing', name)
  if t then
    local dtype, shape = want[1], want[2]
    expect(t.dtype == dtype, '%s: dtype %s, expected %s', name, t.dtype, dtype)
    expect(table.concat(t.shape, ',') == table.concat(shape, ','), '%s: shape {%s}, expected {%s}', name,
      table.concat(t.shape, ','), table.concat(shape, ','))
    local read = t
    if dtype == 'float16' or dtype == 'bfloat16' then read = I.new(C.em_to(I.box, t, C.EM_FLOAT32, CPU)) end
    local p = ffi.cast(ctypes[read.dtype], C.em_tensor_data(read))
    for i = 0, numel(t) - 1 do
      local got = tonumber(p[i])
      expect(got == value(dtype, i), '%s[%d] = %s, expected %s', name, i, tostring(got), tostring(value(dtype, i)))
    end
  end
end
for name in pairs(tensors) do expect(expected[name], 'unexpected tensor %q', name) end
expect(meta.source == 'numpy', 'metadata source = %s', tostring(meta.source))
expect(meta.text == 'tab\there \226\156\147 "q" \\', 'metadata text = %q', tostring(meta.text))
if #failures > 0 then
  io.stderr:write(table.concat(failures, '\n'), '\n')
  os.exit(1)
end
local count = 0
for _ in pairs(tensors) do count = count + 1 end
print(string.format('ember read the %d tensors NumPy wrote', count))
