-- data_spec.lua: ember.data (IDX files, epoch plans, TensorDataset, FashionMNIST, DataLoader).
-- IDX files are written byte by byte here (big-endian header, then the elements), gzipped
-- with the gzip program, and broken in every way the reader checks.
local ffi = require 'ffi'
local data = ember.data

local tmpdir = test_tmpdir

local write = test_write

local function read(path)
  local f = assert(io.open(path, 'rb'))
  local s = f:read('*a')
  f:close()
  return s
end

local function gzip(path)
  assert(os.execute(string.format("gzip -c '%s' > '%s.gz'", path, path)) == 0)
  return path .. '.gz'
end

local function be32(n)
  return string.char(math.floor(n / 2 ^ 24) % 256, math.floor(n / 2 ^ 16) % 256, math.floor(n / 256) % 256, n % 256)
end

local function header(code, dims)
  local h = { string.char(0, 0, code, #dims) }
  for _, d in ipairs(dims) do h[#h + 1] = be32(d) end
  return table.concat(h)
end

-- Big-endian bytes of a C value of type ctype.
local function be_bytes(ctype, v)
  local box = ffi.new(ctype .. '[1]', v)
  local n = ffi.sizeof(ctype)
  local p = ffi.cast('uint8_t *', box)
  local out = {}
  for i = n - 1, 0, -1 do out[#out + 1] = string.char(p[i]) end
  return table.concat(out)
end

local function error_of(fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok, 'expected an error')
  return tostring(err)
end

local function has(msg, text)
  assert(msg:find(text, 1, true), string.format('expected the message to contain %q, got %q', text, msg))
end

describe('ember.data.read_idx', function()
  it('reads uint8 images, plain and gzipped, with the header dims', function()
    local dir = tmpdir()
    local bytes = {}
    for i = 0, 2 * 3 * 4 - 1 do bytes[#bytes + 1] = string.char((i * 7) % 256) end
    local path = write(dir .. '/img-idx3-ubyte', header(0x08, { 2, 3, 4 }) .. table.concat(bytes))
    for _, p in ipairs { path, gzip(path) } do
      local t = data.read_idx(p)
      assert.same({ 2, 3, 4 }, t.shape)
      assert.equal('uint8', t.dtype)
      assert.equal(0, t[{ 1, 1, 1 }]:item())
      assert.equal(7, t[{ 1, 1, 2 }]:item())
      assert.equal((23 * 7) % 256, t[{ 2, 3, 4 }]:item())
    end
  end)

  it('converts every other type code from big-endian', function()
    local dir = tmpdir()
    local cases = {
      { code = 0x09, ctype = 'int8_t', dtype = 'int32', values = { -128, -1, 0, 127 } },
      { code = 0x0B, ctype = 'int16_t', dtype = 'int32', values = { -32768, -2, 258, 32767 } },
      { code = 0x0C, ctype = 'int32_t', dtype = 'int32', values = { -2147483648, -3, 65536 + 2, 2147483647 } },
      { code = 0x0D, ctype = 'float', dtype = 'float32', values = { -1.5, 0.25, 3e38, -0.0 } },
      { code = 0x0E, ctype = 'double', dtype = 'float64', values = { -1.5, 1 / 3, 1e300, 2 ^ -1000 } },
    }
    for _, c in ipairs(cases) do
      local body = {}
      for _, v in ipairs(c.values) do body[#body + 1] = be_bytes(c.ctype, v) end
      local path = write(dir .. '/t' .. c.code, header(c.code, { 2, 2 }) .. table.concat(body))
      for _, p in ipairs { path, gzip(path) } do
        local t = data.read_idx(p)
        assert.equal(c.dtype, t.dtype)
        assert.same({ 2, 2 }, t.shape)
        local got = t:view(4):totable()
        for i, v in ipairs(c.values) do
          local want = c.ctype == 'float' and tonumber(ffi.new('float', v)) or v
          assert.equal(want, got[i], string.format('type 0x%02x element %d', c.code, i))
        end
      end
    end
  end)

  it('reads the first items only with limit', function()
    local dir = tmpdir()
    local path = write(dir .. '/l', header(0x08, { 5, 2 }) .. '0123456789')
    local t = data.read_idx(gzip(path), { limit = 2 })
    assert.same({ 2, 2 }, t.shape)
    assert.same({ { 48, 49 }, { 50, 51 } }, t:totable())
    assert.same({ 5, 2 }, data.read_idx(path, { limit = 9 }).shape)
    assert.same({ 0, 2 }, data.read_idx(path, { limit = 0 }).shape)
    -- a limit that reaches past the data still finds the file short
    write(path, header(0x08, { 5, 2 }) .. '01234')
    assert.same({ 2, 2 }, data.read_idx(path, { limit = 2 }).shape)
    has(error_of(data.read_idx, path, { limit = 3 }), 'is truncated: 6 data bytes expected (3 items')
  end)

  it('reads empty dims', function()
    local dir = tmpdir()
    assert.same({ 0, 28, 28 }, data.read_idx(write(dir .. '/e', header(0x08, { 0, 28, 28 }))).shape)
  end)

  it('names the file and the problem for every malformed file', function()
    local dir = tmpdir()
    local function err(name, bytes, ...)
      local path = write(dir .. '/' .. name, bytes)
      local msg = error_of(data.read_idx, path, ...)
      has(msg, "read_idx: '" .. path .. "'")
      return msg, path
    end
    has(err('short', '\0\0\8'), 'is too short for an IDX header (3 bytes, expected at least 4)')
    has(err('empty', ''), 'is too short for an IDX header (0 bytes')
    has(err('magic', 'PK\3\4rest of a zip'), 'is not an IDX file: it starts with 0x504b0304')
    has(err('code', header(0x07, { 1 }) .. 'x'), 'unknown type code 0x07 in the header, expected 0x08')
    has(err('dims0', string.char(0, 0, 8, 0)), 'the header gives 0 dims, expected 1 to 8')
    has(err('dims9', string.char(0, 0, 8, 9) .. string.rep(be32(1), 9) .. 'x'), 'the header gives 9 dims, expected 1 to 8')
    has(err('hdr', header(0x08, { 2, 3, 4 }):sub(1, 10)), 'ends inside the header: 3 dims need 16 header bytes, the file holds 10')
    has(err('trunc', header(0x08, { 2, 3 }) .. '12345'),
      'is truncated: 6 data bytes expected (2 items of the header\'s dims [2, 3]), the file holds 5')
    has(err('trunc32', header(0x0C, { 2 }) .. '1234567'), 'is truncated: 8 data bytes expected')
    has(err('trailing', header(0x08, { 2, 3 }) .. '1234567890'),
      'has 4 bytes after the 6 data bytes that the header\'s dims [2, 3] describe')
    has(err('huge', header(0x08, { 4294967295, 4294967295, 4294967295 }) .. 'x'), "the header's dims [4294967295, 4294967295, 4294967295] are too large")
    -- gzip damage: a stream cut short, and a stream whose check fails
    local plain = write(dir .. '/g', header(0x08, { 100, 100 }) .. string.rep('abcdefghij', 1000))
    local gz = read(gzip(plain))
    has(err('cut.gz', gz:sub(1, #gz - 20)), 'the gzip stream is truncated')
    local bad = gz:sub(1, #gz - 8) .. string.char((gz:byte(#gz - 7) + 1) % 256) .. gz:sub(#gz - 6)   -- CRC32
    has(err('crc.gz', bad), 'corrupt gzip data')
    -- the file system
    has(error_of(data.read_idx, dir .. '/nope'), "read_idx: cannot open '" .. dir .. "/nope': No such file")
    has(error_of(data.read_idx, dir), "read_idx: '" .. dir .. "' is a directory")
    has(error_of(data.read_idx, 42), 'read_idx: expected a file path (string), got 42')
    has(error_of(data.read_idx, plain, { limt = 2 }), "read_idx: unknown option 'limt'")
    has(error_of(data.read_idx, plain, { limit = -1 }), 'read_idx: limit must be an integer >= 0, got -1')
  end)
end)

describe('ember.data.randperm', function()
  local function sorted(t)
    local v = t:totable()
    table.sort(v)
    return v
  end

  it('is a permutation of 1..n keyed by seed and stream alone', function()
    local a = data.randperm(1000, 7, 3)
    ember.manual_seed(123)
    ember.rand(100)   -- the global generator moves; the plan must not
    local b = data.randperm(1000, 7, 3)
    assert.same(a:totable(), b:totable())
    assert.equal('int64', a.dtype)
    local want = {}
    for i = 1, 1000 do want[i] = i end
    assert.same(want, sorted(a))
    assert.are_not.same(a:totable(), data.randperm(1000, 7, 4):totable())
    assert.are_not.same(a:totable(), data.randperm(1000, 8, 3):totable())
    assert.are_not.same(want, a:totable())
    assert.same({}, data.randperm(0, 1, 1):totable())
    assert.same({ 1 }, data.randperm(1, 1, 1):totable())
  end)

  it('is uniform enough: every position takes every value about equally often', function()
    -- 3 elements, 6000 streams: each of the 9 (position, value) pairs ~2000 times.
    local counts = {}
    for s = 1, 6000 do
      local p = data.randperm(3, 99, s):totable()
      for pos, v in ipairs(p) do counts[pos * 10 + v] = (counts[pos * 10 + v] or 0) + 1 end
    end
    for pos = 1, 3 do
      for v = 1, 3 do
        local c = counts[pos * 10 + v] or 0
        assert(c > 1800 and c < 2200, string.format('position %d took %d %d times of 6000', pos, v, c))
      end
    end
  end)
end)

describe('ember.data.gather_normalize', function()
  it('gathers rows and converts them to float32 in one pass', function()
    local src = ember.tensor({ { 0, 10 }, { 20, 30 }, { 40, 255 } }, { dtype = 'uint8' })
    local ids = ember.tensor({ 3, 1, 3 }, { dtype = 'int64' })
    local out = data.gather_normalize(src, ids, 0.5, -1)
    assert.equal('float32', out.dtype)
    assert.same({ { 19, 126.5 }, { -1, 4 }, { 19, 126.5 } }, out:totable())
    for _, dtype in ipairs { 'int32', 'float32', 'float64' } do
      assert.same({ { 40, 255 } }, data.gather_normalize(src:to(dtype), ember.tensor({ 3 }, { dtype = 'int64' })):totable())
    end
    -- strided ids (every other one) and 4-d items
    local img = ember.arange(0, 5 * 2 * 2):view(5, 1, 2, 2):to('uint8')
    local strided = ember.tensor({ 5, 0, 2, 0 }, { dtype = 'int64' }):view(2, 2):select(2, 1)
    local got = data.gather_normalize(img, strided, 1, 0)
    assert.same({ 2, 1, 2, 2 }, got.shape)
    assert.same({ { { { 16, 17 }, { 18, 19 } } }, { { { 4, 5 }, { 6, 7 } } } }, got:totable())
  end)

  it('reports positions out of range in the 1-based numbering', function()
    local src = ember.zeros(3, 2):to('uint8')
    has(error_of(data.gather_normalize, src, ember.tensor({ 1, 4 }, { dtype = 'int64' })),
      'data_gather_normalize: index 4 at position 2 is out of range for 3 items (expected 1..3)')
    has(error_of(data.gather_normalize, src, ember.tensor({ 0 }, { dtype = 'int64' })), 'index 0 at position 1')
    has(error_of(data.gather_normalize, src, ember.tensor({ 1 }, { dtype = 'int32' })), 'expected a 1-d int64 index, got 1-d int32')
    has(error_of(data.gather_normalize, src:to('bool'), ember.tensor({ 1 }, { dtype = 'int64' })),
      'expected src of dtype uint8, int32, float32 or float64, got bool')
    has(error_of(data.gather_normalize, src:t(), ember.tensor({ 1 }, { dtype = 'int64' })), 'expected a contiguous src')
  end)
end)

describe('ember.data.TensorDataset and DataLoader', function()
  local function dataset(n)
    local x = ember.arange(0, n * 3):view(n, 3)           -- row i holds 3(i-1) .. 3(i-1)+2
    local y = ember.arange(1, n + 1, { dtype = 'int64' })
    return data.TensorDataset { x = x, y = y }
  end

  local function all_ids(loader, e)
    local ids, sizes = {}, {}
    for b in loader:epoch(e) do
      sizes[#sizes + 1] = b.ids.shape[1]
      for _, v in ipairs(b.ids:totable()) do ids[#ids + 1] = v end
    end
    return ids, sizes
  end

  it('delivers every sample exactly once per epoch, rows matching their ids', function()
    local ds = dataset(103)
    local loader = data.DataLoader { dataset = ds, batch_size = 10, shuffle = true, seed = 5 }
    assert.equal(11, loader:num_batches())
    for e = 1, 3 do
      local seen = {}
      for b in loader:epoch(e) do
        assert.same(b.ids:totable(), b.y:totable())   -- y holds the sample id
        local first = b.x:select(2, 1):totable()
        for i, id in ipairs(b.ids:totable()) do
          assert.equal(3 * (id - 1), first[i])
          assert.is_nil(seen[id], 'sample ' .. id .. ' delivered twice')
          seen[id] = true
        end
      end
      for id = 1, 103 do assert.is_true(seen[id], 'sample ' .. id .. ' missing') end
    end
  end)

  it('orders each epoch by (seed, epoch) alone', function()
    local ds = dataset(64)
    local a = data.DataLoader { dataset = ds, batch_size = 8, shuffle = true, seed = 1 }
    local b = data.DataLoader { dataset = ds, batch_size = 16, shuffle = true, seed = 1 }
    local c = data.DataLoader { dataset = ds, batch_size = 8, shuffle = true, seed = 2 }
    local a1 = all_ids(a, 1)
    ember.manual_seed(77)
    ember.randn(10)
    assert.same(a1, (all_ids(b, 1)))            -- batch size and global generator: no effect
    assert.same(a1, (all_ids(a, 1)))            -- the same epoch again
    assert.are_not.same(a1, (all_ids(a, 2)))    -- another epoch
    assert.are_not.same(a1, (all_ids(c, 1)))    -- another seed
    local plain = data.DataLoader { dataset = ds, batch_size = 8 }
    local want = {}
    for i = 1, 64 do want[i] = i end
    assert.same(want, (all_ids(plain, 1)))       -- shuffle = false keeps the dataset's order
  end)

  it('keeps or drops the last partial batch', function()
    local ds = dataset(25)
    local keep = data.DataLoader { dataset = ds, batch_size = 10 }
    local _, sizes = all_ids(keep, 1)
    assert.same({ 10, 10, 5 }, sizes)
    assert.equal(3, keep:num_batches())
    local drop = data.DataLoader { dataset = ds, batch_size = 10, drop_last = true, shuffle = true }
    local ids
    ids, sizes = all_ids(drop, 1)
    assert.same({ 10, 10 }, sizes)
    assert.equal(20, #ids)
    assert.equal(2, drop:num_batches())
    assert.same({ seed = 0, epoch = 2, position = 0, num_samples = 25 }, drop:state())
    local exact = data.DataLoader { dataset = dataset(20), batch_size = 10, drop_last = true }
    _, sizes = all_ids(exact, 1)
    assert.same({ 10, 10 }, sizes)
  end)

  it('saves and restores its position mid-epoch', function()
    local ds = dataset(50)
    local full = data.DataLoader { dataset = ds, batch_size = 7, shuffle = true, seed = 3 }
    local want = all_ids(full, 4)
    local first = data.DataLoader { dataset = ds, batch_size = 7, shuffle = true, seed = 3 }
    local got = {}
    local it = first:epoch(4)
    for _ = 1, 3 do
      for _, v in ipairs(it().ids:totable()) do got[#got + 1] = v end
    end
    local state = first:state()
    assert.same({ seed = 3, epoch = 4, position = 21, num_samples = 50 }, state)
    -- another loader (another process, after a restart) picks up the rest of the epoch
    local second = data.DataLoader { dataset = ds, batch_size = 7, shuffle = true, seed = 99 }
    second:load_state(state)
    for b in second:epoch(4) do
      for _, v in ipairs(b.ids:totable()) do got[#got + 1] = v end
    end
    assert.same(want, got)
    assert.same({ seed = 3, epoch = 5, position = 0, num_samples = 50 }, second:state())
    assert.same(want, (all_ids(second, 4)))   -- the restored position is used once
    assert.has_error(function() second:load_state { seed = 3, epoch = 1, position = 0, num_samples = 49 } end,
      nil)
    local msg = error_of(second.load_state, second, { seed = 3, epoch = 1, position = 0, num_samples = 49 })
    has(msg, 'the state was saved for 49 samples per epoch, this loader has 50')
    has(error_of(second.load_state, second, { seed = 3, epoch = 1, position = 51 }), 'position 51 is past the end')
  end)

  it('splits each epoch between ranks without overlap', function()
    local ds = dataset(103)
    local union = {}
    for rank = 0, 3 do
      local l = data.DataLoader { dataset = ds, batch_size = 5, shuffle = true, seed = 9, rank = rank, world_size = 4 }
      assert.equal(25, l:num_samples())
      local ids = all_ids(l, 2)
      assert.equal(25, #ids)
      for _, id in ipairs(ids) do
        assert.is_nil(union[id], 'sample ' .. id .. ' on two ranks')
        union[id] = rank
      end
    end
    local n = 0
    for _ in pairs(union) do n = n + 1 end
    assert.equal(100, n)   -- the remainder of 103 / 4 is dropped
  end)

  it('applies transform and falls back to get(i) for datasets without get_batch', function()
    local ds = dataset(10)
    local l = data.DataLoader { dataset = ds, batch_size = 4, transform = function(b)
      b.x = b.x * 2
      b.extra = true
    end }
    local b = l:epoch(1)()
    assert.same({ 0, 6, 12, 18 }, b.x:select(2, 1):totable())
    assert.is_true(b.extra)
    local per_sample = { size = function() return 5 end,
      get = function(_, i) return { v = ember.tensor({ i, -i }) } end }
    local l2 = data.DataLoader { dataset = per_sample, batch_size = 2, shuffle = true, seed = 1 }
    local total = 0
    for batch in l2:epoch(1) do
      assert.same(batch.ids:float():totable(), batch.v:select(2, 1):totable())
      total = total + batch.v.shape[1]
    end
    assert.equal(5, total)
  end)

  it('rejects bad options with messages naming them', function()
    local ds = dataset(4)
    has(error_of(data.DataLoader, { dataset = ds, batch_size = 0 }), 'DataLoader: batch_size must be an integer >= 1, got 0')
    has(error_of(data.DataLoader, { dataset = ds, batchsize = 2 }), "DataLoader: unknown option 'batchsize'")
    has(error_of(data.DataLoader, { dataset = {} }), 'DataLoader: dataset must be a table with size()')
    has(error_of(data.DataLoader, { dataset = ds, shuffle = 1 }), 'DataLoader: shuffle must be true or false, got 1')
    has(error_of(data.DataLoader, { dataset = ds, rank = 2, world_size = 2 }), 'DataLoader: rank 2 out of range for world_size 2')
    has(error_of(data.DataLoader, { dataset = ds, transform = 3 }), 'DataLoader: transform must be a function')
    local l = data.DataLoader { dataset = ds }
    has(error_of(l.epoch, l, 1.5), 'DataLoader:epoch: the epoch must be an integer >= 0, got 1.5')
    has(error_of(data.TensorDataset, { x = ember.zeros(3, 2), y = ember.zeros(4) }),
      "TensorDataset: 'y' has 4 samples but 'x' has 3 (sizes of dim 1 must agree)")
    has(error_of(data.TensorDataset, { ids = ember.zeros(3) }), "the name 'ids' is reserved")
  end)
end)

describe('ember.data.datasets.FashionMNIST', function()
  local root = '/usr/share/datasets/fashion-mnist'

  it('loads images [N, 1, 28, 28] and labels 1..10, normalised per batch', function()
    local train = data.datasets.FashionMNIST { train = true, limit = 300 }
    assert.equal(300, train:size())
    local raw = train:get_batch(ember.tensor({ 1, 2 }, { dtype = 'int64' }))
    assert.equal('uint8', raw.x.dtype)
    assert.same({ 2, 1, 28, 28 }, raw.x.shape)
    -- the first training labels of Fashion-MNIST are 9, 0, 0, 3 (0-based)
    assert.same({ 10, 1 }, raw.y:totable())
    local y = train.tensors.y
    assert.equal(1, y:min():item())
    assert.equal(10, y:max():item())
    local norm = data.datasets.FashionMNIST { train = false, limit = 50, normalise = true }
    local b = norm:get_batch(ember.arange(1, 51, { dtype = 'int64' }))
    assert.equal('float32', b.x.dtype)
    assert.is_true(b.x:max():item() <= 1 and b.x:min():item() >= 0)
    local same = norm.tensors.x:narrow(1, 1, 50):float() / 255
    assert.is_true((b.x - same):abs():max():item() < 1e-6)
    local std = data.datasets.FashionMNIST { train = false, limit = 5, normalise = { mean = 0.5, std = 0.25 } }
    local s = std:get_batch(ember.tensor({ 1 }, { dtype = 'int64' })).x
    local want = (std.tensors.x:narrow(1, 1, 1):float() / 255 - 0.5) / 0.25
    assert.is_true((s - want):abs():max():item() < 1e-5)
  end)

  it('says where it looked when the files are missing', function()
    local dir = tmpdir()
    has(error_of(data.datasets.FashionMNIST, { root = dir }),
      "FashionMNIST: cannot find train-images-idx3-ubyte.gz (or train-images-idx3-ubyte) in '" .. dir .. "'")
    has(error_of(data.datasets.FashionMNIST, { root = root, normalise = 'yes' }),
      "FashionMNIST: normalise must be true, false or {mean =, std =}, got 'yes'")
    has(error_of(data.datasets.FashionMNIST, { rooot = root }), "FashionMNIST: unknown option 'rooot'")
  end)

  it('checks that labels fit the images', function()
    local dir = tmpdir()
    write(dir .. '/train-images-idx3-ubyte', header(0x08, { 2, 2, 2 }) .. string.rep('\1', 8))
    write(dir .. '/train-labels-idx1-ubyte', header(0x08, { 3 }) .. '\1\2\3')
    has(error_of(data.datasets.FashionMNIST, { root = dir }), 'has 3 labels for the 2 images')
    write(dir .. '/train-labels-idx1-ubyte', header(0x08, { 2 }) .. '\1\12')
    has(error_of(data.datasets.FashionMNIST, { root = dir }), 'holds the label 12, expected 0 to 9')
    write(dir .. '/train-labels-idx1-ubyte', header(0x08, { 2 }) .. '\1\9')
    local ds = data.datasets.FashionMNIST { root = dir }
    assert.same({ 2, 10 }, ds.tensors.y:totable())
  end)
end)
