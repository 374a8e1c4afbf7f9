-- Hostile inputs through the Lua API: every class of malformed file that used to crash or
-- hang ember (graph caches, .npy sources, JPEG, YAML aliases, sizes taken on trust) is a
-- clean error that names the file and what was expected. The same classes are replayed
-- through the C entry points by the fuzz harnesses' regression corpora (tests/fuzz).
local ffi = require 'ffi'
local data = require 'ember.data'
local graph = require 'ember.graph'

-- XXH64, from xxHash's specification, in LuaJIT's wrapping uint64 arithmetic: what anyone
-- crafting a cache needs to make its checksums match (runtime/graph/checksum.c hashes a
-- section under 1 MiB, as every one here is, with XXH64 seeded by the section id).
local bit = require 'bit'
local u64 = ffi.typeof('uint64_t')
local P1, P2, P3 = 0x9E3779B185EBCA87ULL, 0xC2B2AE3D27D4EB4FULL, 0x165667B19E3779F9ULL
local P4, P5 = 0x85EBCA77C2B2AE63ULL, 0x27D4EB2F165667C5ULL
local rotl, bxor, rshift = bit.rol, bit.bxor, bit.rshift
local function round64(acc, lane) return rotl(acc + lane * P2, 31) * P1 end
local function merge64(acc, v) return bxor(acc, round64(0ULL, v)) * P1 + P4 end
local function xxh64(p, len, seed)
  p = ffi.cast('const uint8_t *', p)
  seed = u64(seed)
  local function r64(i) local v = ffi.new('uint64_t[1]'); ffi.copy(v, p + i, 8); return v[0] end
  local function r32(i) local v = ffi.new('uint32_t[1]'); ffi.copy(v, p + i, 4); return u64(v[0]) end
  local i, h = 0, nil
  if len >= 32 then
    local v1, v2, v3, v4 = seed + P1 + P2, seed + P2, seed, seed - P1
    repeat
      v1, v2, v3, v4 = round64(v1, r64(i)), round64(v2, r64(i + 8)), round64(v3, r64(i + 16)), round64(v4, r64(i + 24))
      i = i + 32
    until i > len - 32
    h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18)
    h = merge64(merge64(merge64(merge64(h, v1), v2), v3), v4)
  else
    h = seed + P5
  end
  h = h + len
  while i + 8 <= len do h = rotl(bxor(h, round64(0ULL, r64(i))), 27) * P1 + P4; i = i + 8 end
  if i + 4 <= len then h = rotl(bxor(h, r32(i) * P1), 23) * P2 + P3; i = i + 4 end
  while i < len do h = rotl(bxor(h, u64(p[i]) * P5), 11) * P1; i = i + 1 end
  h = bxor(h, rshift(h, 33)) * P2
  h = bxor(h, rshift(h, 29)) * P3
  return bxor(h, rshift(h, 32))
end

local function raises(fn, ...)
  local ok, err = pcall(fn)
  assert.is_false(ok, 'expected an error')
  err = tostring(err)
  for _, want in ipairs { ... } do
    assert.is_truthy(err:find(want, 1, true), string.format('expected the message to contain %q, got %q', want, err))
  end
end

local function npy_header(descr, shape)
  local text = string.format("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, shape)
  local pad = 64 - (10 + #text + 1) % 64
  local hl = #text + pad + 1
  return '\147NUMPY\1\0' .. string.char(hl % 256, math.floor(hl / 256)) .. text .. string.rep(' ', pad) .. '\n'
end

-- Little-endian integers in and out of a Lua string, for patching an .emg file.
local function get(s, at, bytes)
  local buf = ffi.new('uint8_t[8]')
  ffi.copy(buf, s:sub(at + 1, at + bytes), bytes)
  return tonumber(bytes == 8 and ffi.cast('uint64_t *', buf)[0] or ffi.cast('uint32_t *', buf)[0])
end
local function set(s, at, bytes, v)
  local buf = ffi.new('uint8_t[8]')
  if bytes == 8 then ffi.cast('uint64_t *', buf)[0] = v else ffi.cast('uint32_t *', buf)[0] = v end
  return s:sub(1, at) .. ffi.string(buf, bytes) .. s:sub(at + bytes + 1)
end

-- Recomputes an .emg file's checksums, as anyone crafting one can (format.c's layout).
local function reseal(s)
  local b = ffi.new('uint8_t[?]', #s)
  ffi.copy(b, s, #s)
  for i = 0, get(s, 52, 4) - 1 do
    local e = 88 + 32 * i
    local id, elem, off, count = get(s, e, 4), get(s, e + 4, 4), get(s, e + 8, 8), get(s, e + 16, 8)
    if off + count * elem <= #s then
      assert(count * elem < 2 ^ 20, 'a section of 1 MiB or more is hashed in blocks')
      ffi.cast('uint64_t *', b + e + 24)[0] = xxh64(b + off, count * elem, id)
    end
  end
  ffi.cast('uint64_t *', b + 504)[0] = 0
  ffi.cast('uint64_t *', b + 504)[0] = xxh64(b, 512, 1)
  return ffi.string(b, #s)
end

describe('hostile inputs', function()
  it('.emg: structure behind valid checksums is checked (offsets, ids, permutation, labels, sizes)', function()
    local dir = test_tmpdir()
    local g = graph.load(test_write(dir .. '/s.txt', '100 7\n7 100\n100 30\n5 7\n'), { progress = false })
    g:load_labels(test_write(dir .. '/l.txt', '7 seven\n100 hundred\n'))
    g:save(dir .. '/good.emg')
    local good = test_read(dir .. '/good.emg')
    -- the oracle: resealing an untouched file reproduces the checksums ember wrote
    assert.are.equal(good, reseal(good))
    local function section(i) return get(good, 88 + 32 * i + 8, 8) end
    local cases = {
      { set(good, section(0) + 8, 8, 5), 'decreases at vertex' },
      { set(good, section(1) + 4, 4, 1000), "section 'sources' element 1 is 1000, expected a vertex id below 4" },
      { set(good, section(3), 4, get(good, section(3) + 4, 4)), 'are not inverse permutations' },
      { set(good, section(6) + 8, 8, 2 ^ 40), "section 'label_offsets' at vertex 0" },
      { set(set(good, 40, 8, 2 ^ 62), 88 + 32 + 16, 8, 2 ^ 62), "section 'sources' does not fit the header" },
    }
    for _, c in ipairs(cases) do
      local path = test_write(dir .. '/bad.emg', reseal(c[1]))
      for _, reorder in ipairs { 'degree', 'none' } do
        raises(function() graph.load(path, { reorder = reorder, progress = false }) end, 'bad.emg', c[2])
      end
    end
  end)

  it('.npy sources: zero-sized image dims and overflowing shapes', function()
    local dir = test_tmpdir()
    local zero = test_write(dir .. '/zero.npy', npy_header('|u1', '4, 0, 28, 28'))
    raises(function() data.source { format = 'npy', x = zero } end, 'zero.npy', 'images of 0 x 28 x 28',
      'expected each at least 1')
    local big = test_write(dir .. '/big.npy', npy_header('|u1', '4294967296, 4294967296, 1, 1'))
    raises(function() data.source { format = 'npy', x = big } end, 'big.npy', 'is too large')
    raises(function() data.npy.read(big) end, 'big.npy', 'is too large')
    local empty = test_write(dir .. '/empty.npy', npy_header('<f4', '1099511627776, 0'))
    raises(function() data.source { format = 'npy', x = empty } end, 'empty.npy', 'samples of 0 bytes')
  end)

  it('JPEG: tables-only, empty and truncated streams', function()
    raises(function() data.jpeg.decode('\255\216\255\217') end, 'without an image', 'tables-only')
    local img = data.jpeg.encode(ember.arange(0, 48):reshape(4, 4, 3):to('uint8'), 80)
    local sos = img:find('\255\218', 1, true)
    raises(function() data.jpeg.decode(img:sub(1, sos + 20)) end, 'cannot decode the 4x4 image', 'Premature end')
    local sof = img:find('\255\192', 1, true)
    local huge = img:sub(1, sof + 4) .. '\78\32\78\32' .. img:sub(sof + 9, sos + 20) -- 20000 x 20000
    raises(function() data.jpeg.decode(huge) end, 'the header says 20000x20000 pixels', 'truncated or crafted')
  end)

  it('TFRecord records carrying such JPEGs', function()
    local dir = test_tmpdir()
    local path = dir .. '/t.tfrecord'
    data.tfrecord.write(path, { data.tfrecord.example { image = '\255\216\255\217', label = 1 } })
    raises(function() data.source { format = 'tfrecord', files = { path } } end, 't.tfrecord', 'without an image')
  end)

  it('YAML: alias expansion is bounded', function()
    local yaml = require 'ember_yaml'
    local text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    local prev = 'a'
    for k in ('bcdefghi'):gmatch('.') do
      text = text .. string.format('%s: &%s [%s]\n', k, k, ('*' .. prev .. ','):rep(8) .. '*' .. prev)
      prev = k
    end
    local t0 = os.clock()
    raises(function() yaml.load(text, 'laughs.yaml') end, 'laughs.yaml', 'alias uses')
    assert.is_true(os.clock() - t0 < 5)
    raises(function() yaml.load('a: &a [*a, *a]\n', 'self.yaml') end, 'self.yaml')
  end)

  it('sizes taken on trust: Matrix Market size lines, IDX headers, tensor shapes', function()
    local dir = test_tmpdir()
    local mtx = test_write(dir .. '/m.mtx', '%%MatrixMarket matrix coordinate pattern general\n4000000000 4000000000 1\n1 2\n')
    raises(function() graph.load(mtx, { progress = false }) end, 'm.mtx:2:', 'declares 4000000000 vertices')
    local nnz = test_write(dir .. '/n.mtx', '%%MatrixMarket matrix coordinate pattern general\n3 3 99999999999\n1 2\n')
    raises(function() graph.load(nnz, { progress = false }) end, 'n.mtx:2:', 'announces 99999999999 entries')
    local idx = test_write(dir .. '/i.idx', '\0\0\8\3\127\255\255\255\0\0\16\0\0\0\16\0')
    raises(function() data.read_idx(idx) end, 'i.idx', 'is truncated', 'the file holds 0')
    local zero = test_write(dir .. '/z.idx', '\0\0\8\3\0\0\0\0\128\0\0\0\128\0\0\0')
    raises(function() data.read_idx(zero) end, 'z.idx', 'are too large')
    raises(function() ember.empty(0, 2 ^ 32, 2 ^ 32, 16) end, 'too many elements')
    raises(function() ember.empty(0):reshape(2 ^ 32, 2 ^ 32, 0) end, 'too many elements')
  end)
end)
