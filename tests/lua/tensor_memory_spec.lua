-- Memory: the GC nudge bounds what dead tensors hold, free() releases at once, from_blob
-- shares foreign memory, data_ptr gives typed pointers.
local U = dofile(debug.getinfo(1, 'S').source:match('^@(.*[/\\])') .. 'tensor_testutil.lua')
local raises = U.raises
local ffi = require 'ffi'
local C = ember.C

local MB = 1024 * 1024
local function allocated() return tonumber(C.em_memory_allocated()) end

describe('memory', function()
  it('keeps 200 dropped tensors of 64 MB from piling up (the GC nudge)', function()
    collectgarbage('collect')
    local base = allocated()
    local peak = 0
    for _ = 1, 200 do
      local t = ember.empty(16 * MB)   -- 64 MB of float32
      peak = math.max(peak, allocated() - base)
      assert.are.equal(16 * MB, t:numel())
    end
    assert.is_true(peak < 1024 * MB, string.format('peak %.0f MB above the baseline', peak / MB))
  end)

  it('free() releases the storage at once and later use is an error', function()
    collectgarbage('collect')
    local t = ember.empty(4 * MB)
    local before = allocated()
    t:free()
    assert.are.equal(before - 16 * MB, allocated())
    assert.is_true(t:is_freed())
    t:free()   -- a second free is harmless
    raises(function() local _ = t + 1 end, 'add: the input was freed with free()')
    raises(function() local _ = t:sum(1) end, 'sum: the tensor was freed with free()')
    raises(function() local _ = t:item() end, 'item: the tensor was freed with free()')
    raises(function() local _ = t:totable() end, 'totable: the tensor was freed with free()')
    raises(function() local _ = t:data_ptr() end, 'data_ptr: the tensor was freed with free()')
    raises(function() local _ = t[{1}] end, 't[{...}]: the tensor was freed with free()')
    raises(function() local _ = t:view(2) end, 'view: the tensor was freed with free()')
    raises(function() local _ = t:to('float64') end, 'to: the tensor was freed with free()')
    raises(function() local _ = ember.zeros_like(t) end, 'zeros_like: the tensor was freed with free()')
    raises(function() local _ = ember.cat({t}) end, 'cat: the tensor was freed with free()')
  end)

  it('free() on a view leaves the storage to the other views', function()
    local base = ember.arange(4)
    local v = base:view(2, 2)
    v:free()
    assert.are.same({0, 1, 2, 3}, base:totable())
  end)
end)

describe('data_ptr', function()
  it('is a pointer of the element type at the first element', function()
    local t = ember.tensor({{1, 2}, {3, 4}})
    local p = t:data_ptr()
    assert.is_true(ffi.istype('float *', p))
    assert.are.equal(3, p[2])
    p[3] = 40
    assert.are.equal(40, t[{2, 2}]:item())
    assert.are.equal(3, t[{2}]:data_ptr()[0])
    assert.is_true(ffi.istype('int64_t *', ember.zeros(1, {dtype = 'int64'}):data_ptr()))
    assert.is_true(ffi.istype('double *', ember.zeros(1, {dtype = 'float64'}):data_ptr()))
    assert.is_true(ffi.istype('int32_t *', ember.zeros(1, {dtype = 'int32'}):data_ptr()))
    assert.is_true(ffi.istype('uint8_t *', ember.zeros(1, {dtype = 'uint8'}):data_ptr()))
    assert.is_true(ffi.istype('uint16_t *', ember.zeros(1, {dtype = 'float16'}):data_ptr()))
    assert.is_true(ffi.istype('bool *', ember.zeros(1, {dtype = 'bool'}):data_ptr()))
  end)
end)

describe('from_blob', function()
  it('shares memory with the ffi array, both ways', function()
    local buf = ffi.new('float[6]', {1, 2, 3, 4, 5, 6})
    local t = ember.from_blob(buf, {2, 3}, {keep = buf})
    assert.are.equal('float32', t.dtype)
    assert.are.same({{1, 2, 3}, {4, 5, 6}}, t:totable())
    buf[0] = 10
    assert.are.equal(10, t[{1, 1}]:item())
    t:mul_(2)
    assert.are.equal(20, buf[0])
    assert.are.equal(12, buf[5])
  end)

  it('takes the dtype from the pointer type, or from opts, and strides in elements', function()
    local d = ffi.new('double[4]', {1, 2, 3, 4})
    assert.are.equal('float64', ember.from_blob(d, {4}).dtype)
    local i = ffi.new('int64_t[2]', {5, 6})
    assert.are.same({5, 6}, ember.from_blob(ffi.cast('int64_t *', i), 2):totable())
    local raw = ffi.new('uint8_t[8]')
    assert.are.equal('int32', ember.from_blob(raw, {2}, {dtype = 'int32'}).dtype)
    local s = ember.from_blob(d, {2, 2}, {strides = {1, 2}})
    assert.are.same({{1, 3}, {2, 4}}, s:totable())
  end)

  it('keeps the kept object alive while the tensor or its views live', function()
    local probe = setmetatable({}, {__mode = 'v'})
    local function adopt()
      local buf = ffi.new('float[?]', 4, {1, 2, 3, 4})
      probe[1] = buf
      return ember.from_blob(buf, {4}, {keep = buf})
    end
    local function row2(t) return t:view(2, 2)[{2}] end
    -- LuaJIT's GC sees dead temporaries left in stack slots of live frames; the nil locals
    -- overwrite the slots that calls from this test left behind.
    local function collect()
      local _1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16
      for _ = 1, 4 do collectgarbage('collect') end
    end
    local t = adopt()
    collect()
    assert(probe[1] ~= nil, 'the tensor keeps the array')
    local v = row2(t)
    t = nil
    collect()
    assert(probe[1] ~= nil, 'the view keeps the array')
    assert.are.same({3, 4}, v:totable())
    v = nil
    collect()
    assert(probe[1] == nil, 'the array is collected with the last view')
  end)

  it('rejects what it cannot adopt safely', function()
    local buf = ffi.new('float[4]')
    raises(function() local _ = ember.from_blob(buf, {2, 3}) end,
      'from_blob: shape {2, 3} of float32 needs 24 bytes, but the array holds 16')
    raises(function() local _ = ember.from_blob({1, 2}, {2}) end,
      'from_blob: expected a cdata pointer or array for argument 1, got table')
    raises(function() local _ = ember.from_blob(buf, {2, 2}, {strides = {1}}) end,
      'from_blob: strides must be a table of 2 integers (one per dim), got 1 entries')
    raises(function() local _ = ember.from_blob(buf, {2}, {kepe = buf}) end,
      "from_blob: unknown option 'kepe' (expected dtype, device, strides, keep)")
    raises(function() local _ = ember.from_blob(buf, {3}, {strides = {2}}) end,
      'from_blob: shape {3} of float32 needs 20 bytes, but the array holds 16')
  end)
end)
