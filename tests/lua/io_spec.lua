-- io_spec.lua: ember.save / ember.load (safetensors checkpoints).
-- Tensors are built and read through the C API and raw bytes, so these tests check the
-- file format and nothing else of the tensor library.
local ffi = require 'ffi'
local C = ember.C
local I = require 'ember.internal'   -- tensors built through the C API
local CPU = ffi.new('em_device', {C.EM_CPU, 0})

local function make(dtype, sizes)
  local n = #sizes
  local buf = ffi.new('int64_t[?]', n + 1, sizes)
  return I.new(C.em_empty(I.box, n, buf, C['EM_' .. dtype:upper()], CPU))
end

local function nbytes(t)
  return tonumber(C.em_tensor_numel(t)) * tonumber(C.em_dtype_size(C.em_tensor_dtype(t)))
end

local function bytes_of(t) return ffi.string(C.em_tensor_data(t), nbytes(t)) end

-- Fills t with a byte pattern (0/1 for bool) and returns t.
local function fill(t, seed)
  local p = ffi.cast('uint8_t *', C.em_tensor_data(t))
  local bool = C.em_tensor_dtype(t) == C.EM_BOOL
  for i = 0, nbytes(t) - 1 do p[i] = bool and ((i + seed) % 3 == 0 and 1 or 0) or (i * 37 + seed) % 256 end
  return t
end

local function float_matrix(rows, cols)
  local t = make('float32', {rows, cols})
  local p = ffi.cast('float *', C.em_tensor_data(t))
  for i = 0, rows * cols - 1 do p[i] = i end
  return t
end

local function read_file(path)
  local f = assert(io.open(path, 'rb'))
  local s = f:read('*a')
  f:close()
  return s
end

local function tmp()
  local path = os.tmpname()
  finally(function() os.remove(path) end)
  return path
end

local function error_of(fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok)
  return tostring(err)
end

local dtypes = {'float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8', 'bool'}

describe('ember.save and ember.load', function()
  it('round-trips every dtype with 0-d, empty and 3-d shapes', function()
    local path = tmp()
    local tensors, shapes = {}, { scalar = {}, empty = {0, 3}, cube = {2, 3, 4} }
    local seed = 0
    for _, dt in ipairs(dtypes) do
      for kind, shape in pairs(shapes) do
        seed = seed + 1
        tensors[dt .. '.' .. kind] = fill(make(dt, shape), seed)
      end
    end
    ember.save(path, tensors)
    local loaded, meta = ember.load(path)
    assert.are.same({}, meta)
    local count = 0
    for name, t in pairs(tensors) do
      local got = loaded[name]
      assert.is_true(ember.is_tensor(got), name)
      assert.are.equal(t.dtype, got.dtype, name)
      assert.are.same(t.shape, got.shape, name)
      assert.are.equal(bytes_of(t), bytes_of(got), name)
      count = count + 1
    end
    for _ in pairs(loaded) do count = count - 1 end
    assert.are.equal(0, count)
  end)

  it('writes the header the reference implementation writes', function()
    local path = tmp()
    local t = float_matrix(1, 6)
    local v = I.new(C.em_view(I.box, t, 3, ffi.new('int64_t[3]', {1, 2, 3})))
    ember.save(path, {['attn.0'] = v})
    local bytes = read_file(path)
    local header = '{"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}}'
    assert.are.equal('\64\0\0\0\0\0\0\0' .. header, bytes:sub(1, 8 + #header))
    assert.are.equal(8 + 64 + 24, #bytes)
  end)

  it('writes strided, transposed and broadcast views as contiguous values', function()
    local path = tmp()
    local a = float_matrix(3, 4)
    local at = I.new(C.em_transpose(I.box, a, 0, 1))
    local col = I.new(C.em_narrow(I.box, a, 1, 2, 1))                  -- [3, 1]: column 2
    local wide = I.new(C.em_expand(I.box, col, 2, ffi.new('int64_t[2]', {3, 5})))
    assert.are.equal(0, C.em_tensor_is_contiguous(at))
    ember.save(path, {at = at, wide = wide})
    local loaded = ember.load(path)
    assert.are.same({4, 3}, loaded.at.shape)
    local p = ffi.cast('float *', C.em_tensor_data(loaded.at))
    for i = 0, 3 do
      for j = 0, 2 do assert.are.equal(4 * j + i, p[i * 3 + j]) end
    end
    local w = ffi.cast('float *', C.em_tensor_data(loaded.wide))
    for i = 0, 2 do
      for j = 0, 4 do assert.are.equal(4 * i + 2, w[i * 5 + j]) end
    end
  end)

  it('keeps metadata, unicode and escaped characters', function()
    local path = tmp()
    local name = 'layer "1"\\weight\n caf\195\169'
    ember.save(path, {[name] = float_matrix(2, 2)}, {metadata = {epoch = '3', note = 'tab\there \240\159\148\165'}})
    local loaded, meta = ember.load(path)
    assert.is_true(ember.is_tensor(loaded[name]))
    assert.are.same({epoch = '3', note = 'tab\there \240\159\148\165'}, meta)
  end)

  it('gives tensors that outlive the file and can be written without changing it', function()
    local path = tmp()
    ember.save(path, {w = float_matrix(2, 2)})
    local before = read_file(path)
    local w = ember.load(path).w
    collectgarbage('collect')                         -- the handle is gone; w holds the mapping
    local p = ffi.cast('float *', C.em_tensor_data(w))
    assert.are.equal(3, p[3])
    p[3] = 42
    assert.are.equal(42, p[3])
    assert.are.equal(before, read_file(path))
    ember.save(path, {w = w})                         -- saving over the mapped file is safe
    assert.are.equal(42, ffi.cast('float *', C.em_tensor_data(ember.load(path).w))[3])
  end)

  it('reads a file saved with no tensors', function()
    local path = tmp()
    ember.save(path, {})
    local loaded, meta = ember.load(path)
    assert.are.same({}, loaded)
    assert.are.same({}, meta)
    assert.are.equal('\8\0\0\0\0\0\0\0{}      ', read_file(path))
  end)
end)

describe('ember.save errors', function()
  it('rejects keys that are not strings, naming the key', function()
    local err = error_of(ember.save, tmp(), {float_matrix(1, 1)})
    assert.matches('save: tensor names must be strings, got the key 1 (number)', err, 1, true)
  end)

  it('rejects values that are not tensors, naming the key', function()
    local err = error_of(ember.save, tmp(), {w = float_matrix(1, 1), b = 3})
    assert.matches("save: the value for 'b' must be a tensor, got a number", err, 1, true)
    err = error_of(ember.save, tmp(), {w = {1, 2}})
    assert.matches("save: the value for 'w' must be a tensor, got a table", err, 1, true)
  end)

  it('rejects bad metadata, options and arguments', function()
    local t = {w = float_matrix(1, 1)}
    assert.matches("metadata value for 'epoch' must be a string", error_of(ember.save, tmp(), t, {metadata = {epoch = 3}}), 1, true)
    assert.matches('metadata keys must be strings, got the key 1 (number)', error_of(ember.save, tmp(), t, {metadata = {'x'}}), 1, true)
    assert.matches("save: unknown option 'meta' (expected metadata)", error_of(ember.save, tmp(), t, {meta = {}}), 1, true)
    assert.matches('save: expected a file path (string) for argument 1, got a number', error_of(ember.save, 1, t), 1, true)
    assert.matches('save: expected a table of name = tensor for argument 2, got a tensor',
      error_of(ember.save, tmp(), t.w), 1, true)
    assert.matches('contains a NUL character', error_of(ember.save, tmp(), {['a\0b'] = t.w}), 1, true)
    assert.matches("'__metadata__' is reserved", error_of(ember.save, tmp(), {__metadata__ = t.w}), 1, true)
  end)

  it('leaves an existing file untouched when a save fails', function()
    local path = tmp()
    ember.save(path, {w = float_matrix(2, 3)})
    local before = read_file(path)
    local gone = float_matrix(1, 1)
    assert.are.equal(0, C.em_tensor_free(gone))
    local err = error_of(ember.save, path, {w = float_matrix(1, 1), z = gone})
    assert.matches("tensor 'z' was freed with free()", err, 1, true)
    assert.matches(path, err, 1, true)
    assert.are.equal(before, read_file(path))
    pcall(ffi.cdef, 'int getpid(void);')
    assert.is_nil(io.open(path .. '.tmp.' .. ffi.C.getpid()))   -- the temporary is gone
  end)

  it('reports a save into a folder that does not exist', function()
    local path = tmp() .. '.absent/missing/model.safetensors'
    local err = error_of(ember.save, path, {w = float_matrix(1, 1)})
    assert.matches('cannot create the temporary file', err, 1, true)
    assert.matches('No such file or directory', err, 1, true)
  end)

  it('reports errors at the caller\'s line', function()
    local err = error_of(function() ember.save(tmp(), {w = 1}) end)
    assert.matches('io_spec.lua:%d+: save:', err)
  end)
end)

describe('ember.load errors', function()
  it('names the file and the problem', function()
    local path = tmp()
    local err = error_of(ember.load, path)             -- os.tmpname made it empty
    assert.matches('safetensors_open: ' .. path .. ': the file is 0 bytes', err, 1, true)
    local f = assert(io.open(path, 'wb'))
    local header = '{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}}'
    f:write(string.char(#header, 0, 0, 0, 0, 0, 0, 0), header, string.rep('\0', 12))
    f:close()
    err = error_of(ember.load, path)
    assert.matches("tensor 'w': data_offsets [0, 12] hold 12 bytes, but dtype float32 and shape [2, 2] need 16", err, 1, true)
    err = error_of(ember.load, path .. '.absent')
    assert.matches('cannot open: No such file or directory', err, 1, true)
    assert.matches('load: expected a file path (string) for argument 1, got nil', error_of(ember.load), 1, true)
  end)
end)
