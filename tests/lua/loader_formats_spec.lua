-- loader_formats_spec.lua: the data pipeline's formats and augmentations: .npy (and NumPy
-- reading ember's files and the reverse), TFRecord shards of tf.train.Example records with
-- CRC-32C checks, JPEG files and folders, crops, flips, normalisation and channel
-- conversion against hand-computed answers, per-sample generators keyed by
-- (seed, epoch, id), and bad records named by file and offset or skipped and counted.
local F = dofile('tests/lua/loader_fixtures.lua')
F.finally = function(fn) return finally(fn) end
F.assert = assert
local data = ember.data

local PYTHON = '/usr/bin/python3'

local function loader(opts)
  local l = data.ReaderLoader(opts)
  F.defer(function() l:close() end)
  return l
end

-- A uint8 image [h, w] with pixel (r, c) = (base + 9 r + 5 c) % 256, smooth enough for JPEG.
local function image(h, w, base)
  local t = ember.empty({ h, w }, { dtype = 'uint8' })
  local p = t:data_ptr()
  for r = 0, h - 1 do for c = 0, w - 1 do p[r * w + c] = (base + 9 * r + 5 * c) % 256 end end
  return t
end

local function ffi_string(t) return require('ffi').string(t:contiguous():data_ptr(), t:numel()) end

local function max_diff(a, b) return (a:double() - b:double()):abs():max():item() end

describe('formats', function()
  it('computes CRC-32C and the TFRecord mask', function()
    assert.equal(0xE3069283, data.crc32c('123456789'))
    assert.equal(0, data.crc32c(''))
    assert.equal(0x8A9136AA, data.crc32c(string.rep('\0', 32)))
  end)

  it('reads and writes .npy files, NumPy reading ours and we reading NumPy\'s', function()
    local dir = F.tmpdir()
    for _, dt in ipairs { 'uint8', 'int32', 'int64', 'float32', 'float64', 'bool', 'float16' } do
      local t = ember.arange(0, 12):view(3, 4):to(dt)
      data.npy.write(dir .. '/a.npy', t)
      local back = data.npy.read(dir .. '/a.npy')
      assert.equal(dt, back.dtype)
      assert.same(t:totable(), back:totable())
    end
    data.npy.write(dir .. '/b.npy', ember.arange(0, 6, { dtype = 'float64' }):view(2, 3))
    local ok = os.execute(string.format([[%s -c "
import numpy as np
a = np.load('%s/b.npy'); assert a.dtype == np.float64 and a.shape == (2, 3) and a[1, 2] == 5.0, a
np.save('%s/c.npy', (np.arange(24, dtype=np.int64) * 3).reshape(2, 3, 4))
np.save('%s/f.npy', np.asfortranarray(np.ones((2, 3), np.float32)))
np.save('%s/i2.npy', np.zeros(3, np.int16))
np.save('%s/be.npy', np.zeros(3, '>f4'))"]], PYTHON, dir, dir, dir, dir, dir))
    if ok ~= 0 then return pending('NumPy is not available') end
    local c = data.npy.read(dir .. '/c.npy')
    assert.same({ 2, 3, 4 }, c.shape)
    assert.equal('int64', c.dtype)
    assert.equal(69, c[{ 2, 3, 4 }]:item())
    F.has(F.error_of(data.npy.read, dir .. '/f.npy'), 'Fortran-order arrays are not supported')
    F.has(F.error_of(data.npy.read, dir .. '/i2.npy'), "dtype '<i2' is not supported")
    F.has(F.error_of(data.npy.read, dir .. '/be.npy'), "dtype '>f4' is not supported")
    local bytes = F.read(dir .. '/c.npy')
    F.write(dir .. '/short.npy', bytes:sub(1, #bytes - 8))
    F.has(F.error_of(data.npy.read, dir .. '/short.npy'), 'holds 184 data bytes, its header (shape of 24 elements of int64) promises 192')
    F.write(dir .. '/text.npy', 'hello, world')
    F.has(F.error_of(data.npy.read, dir .. '/text.npy'), "is not a .npy file")
    F.has(F.error_of(data.npy.read, dir .. '/none.npy'), "cannot open '" .. dir .. "/none.npy'")
  end)

  it('serves .npy images and raw rows, labels counted from 1', function()
    local dir = F.tmpdir()
    local spec, x = F.npy_images(dir, 6, 3, 4)
    local b = loader { dataset = spec, batch_size = 6 }:epoch(1)()
    assert.same({ 6, 1, 3, 4 }, b.x.shape)
    assert.same(x:view(6, 1, 3, 4):totable(), b.x:totable())
    assert.same({ 1, 2, 3, 4, 5, 6 }, b.y:totable())
    data.npy.write(dir .. '/f.npy', ember.arange(0, 10, { dtype = 'float32' }):view(5, 2))
    local raw = loader { dataset = { format = 'npy', x = dir .. '/f.npy' }, batch_size = 5 }:epoch(1)()
    assert.same({ { 0, 1 }, { 2, 3 }, { 4, 5 }, { 6, 7 }, { 8, 9 } }, raw.x:totable())
    assert.is_nil(raw.y)
    F.has(F.error_of(data.ReaderLoader, { dataset = { format = 'npy', x = dir .. '/f.npy' }, transforms = { 'grayscale' } }),
      'crop, flip and normalise take uint8 images; this source holds float32 rows')
  end)

  it('reads TFRecord shards of JPEG examples, checking every CRC', function()
    local dir = F.tmpdir()
    local imgs, records = {}, { {}, {} }
    for i = 1, 6 do
      imgs[i] = image(8, 8, 20 * i)
      local shard = records[i <= 3 and 1 or 2]
      shard[#shard + 1] = data.tfrecord.example { image = data.jpeg.encode(imgs[i], 95), label = i % 3 }
    end
    data.tfrecord.write(dir .. '/a.tfrecord', records[1])
    data.tfrecord.write(dir .. '/b.tfrecord', records[2])
    local spec = { format = 'tfrecord', files = { dir .. '/a.tfrecord', dir .. '/b.tfrecord' } }
    local b = loader { dataset = spec, batch_size = 6, num_workers = 1, timeout = 30 }:epoch(1)()
    assert.same({ 6, 1, 8, 8 }, b.x.shape)
    assert.same({ 2, 3, 1, 2, 3, 1 }, b.y:totable())
    for i = 1, 6 do assert.is_true(max_diff(b.x[i][1], imgs[i]) <= 6) end
    -- raw pixels with a shape, and the keys a record lacks
    data.tfrecord.write(dir .. '/raw.tfrecord', { data.tfrecord.example { pixels = ffi_string(imgs[1]), class = 7 } })
    local raw = loader { dataset = { format = 'tfrecord', files = dir .. '/raw.tfrecord', encoded = false,
      shape = { 8, 8 }, image_key = 'pixels', label_key = 'class' }, batch_size = 1 }:epoch(1)()
    assert.same(imgs[1]:view(1, 1, 8, 8):totable(), raw.x:totable())
    assert.same({ 8 }, raw.y:totable())
    F.has(F.error_of(function() loader { dataset = { format = 'tfrecord', files = dir .. '/raw.tfrecord' } }:epoch(1)() end),
      "no bytes feature 'image' (the record has: class, pixels)")
    -- a flipped byte in the second record's data: named by file and offset, or skipped
    local bytes = F.read(dir .. '/a.tfrecord')
    local len0 = bytes:byte(1) + 256 * bytes:byte(2)
    local off = 16 + len0
    local bad = dir .. '/bad.tfrecord'
    F.write(bad, bytes:sub(1, off + 20) .. string.char((bytes:byte(off + 21) + 1) % 256) .. bytes:sub(off + 22))
    local msg = F.error_of(function()
      for _ in loader { dataset = { format = 'tfrecord', files = bad }, batch_size = 2, num_workers = 1, timeout = 30 }:epoch(1) do end
    end)
    F.has(msg, string.format("'%s': the record at offset %d (sample 2): data CRC-32C mismatch", bad, off))
    local s = loader { dataset = { format = 'tfrecord', files = bad }, batch_size = 3, on_bad_record = 'skip' }
    local _, ids = F.collect(s, 1)
    assert.same({ 1, 3 }, ids)
    assert.equal(1, s:stats().skipped)
    -- a damaged length, a truncated shard: opening fails with the offset
    F.write(bad, bytes:sub(1, off + 3) .. 'X' .. bytes:sub(off + 5))
    F.has(F.error_of(data.ReaderLoader, { dataset = { format = 'tfrecord', files = bad } }),
      string.format("record 1 at offset %d: the length's CRC-32C does not match", off))
    F.write(bad, bytes:sub(1, #bytes - 3))
    F.has(F.error_of(data.ReaderLoader, { dataset = { format = 'tfrecord', files = bad } }), 'is truncated')
  end)

  it('reads JPEG files and class folders, naming a file that does not decode', function()
    local dir = F.tmpdir()
    for k, cls in ipairs { 'cat', 'dog' } do
      os.execute('mkdir -p ' .. dir .. '/' .. cls)
      for i = 1, 2 do F.write(string.format('%s/%s/%d.jpg', dir, cls, i), data.jpeg.encode(image(6, 6, 40 * k + i), 95)) end
    end
    local l = loader { dataset = { format = 'jpeg', root = dir }, batch_size = 4 }
    local b = l:epoch(1)()
    assert.same({ 1, 1, 2, 2 }, b.y:totable())
    assert.is_true(max_diff(b.x[3][1], image(6, 6, 81)) <= 6)
    local rgb = loader { dataset = { format = 'jpeg', root = dir, channels = 3 }, batch_size = 4 }:epoch(1)()
    assert.same({ 4, 3, 6, 6 }, rgb.x.shape)
    F.write(dir .. '/dog/3.jpg', 'not a jpeg at all')
    local msg = F.error_of(function() for _ in loader { dataset = { format = 'jpeg', root = dir }, batch_size = 5 }:epoch(1) do end end)
    F.has(msg, "jpeg: '" .. dir .. "/dog/3.jpg': not a JPEG image")
    local s = loader { dataset = { format = 'jpeg', root = dir }, batch_size = 5, on_bad_record = 'skip' }
    local _, ids = F.collect(s, 1)
    assert.same({ 1, 2, 3, 4 }, ids)
    F.write(dir .. '/dog/3.jpg', data.jpeg.encode(image(7, 6, 0), 95))
    F.has(F.error_of(function() for _ in loader { dataset = { format = 'jpeg', root = dir }, batch_size = 5 }:epoch(1) do end end),
      'a 7x6 image where the first was 6x6 (crop them to one size)')
    local cropped = loader { dataset = { format = 'jpeg', root = dir }, batch_size = 5, transforms = { { center_crop = 5 } } }
    assert.same({ 5, 1, 5, 5 }, cropped:epoch(1)().x.shape)
  end)
end)

describe('augmentation', function()
  local img = ember.empty({ 1, 5, 5 }, { dtype = 'uint8' })
  for r = 0, 4 do for c = 0, 4 do img:data_ptr()[r * 5 + c] = 10 * r + c end end
  local function at(r, c) -- the image padded with zeros
    if r < 0 or r > 4 or c < 0 or c > 4 then return 0 end
    return 10 * r + c
  end

  it('crops at the offsets the sample\'s generator draws, padding with zeros', function()
    for id = 1, 20 do
      local draw = data.sample_rng(1, 2, id)
      local oy, ox = draw:random(0, 4), draw:random(0, 4)
      local out = data.transforms.random_crop(img, 3, 1, data.sample_rng(1, 2, id))
      local want = {}
      for r = 1, 3 do
        want[r] = {}
        for c = 1, 3 do want[r][c] = at(r - 1 + oy - 1, c - 1 + ox - 1) end
      end
      assert.same({ want }, out:totable())
    end
    assert.same({ { { 11, 12, 13 }, { 21, 22, 23 }, { 31, 32, 33 } } }, data.transforms.center_crop(img, 3):totable())
    F.has(F.error_of(data.transforms.center_crop, img, 6), 'a 6x6 crop does not fit a 5x5 image padded by 0')
  end)

  it('flips, normalises and converts channels', function()
    local flipped = data.transforms.flip(img, data.sample_rng(0, 0, 1), 1)
    assert.same({ 4, 3, 2, 1, 0 }, flipped[1][1]:totable())
    assert.same(img:totable(), data.transforms.flip(img, data.sample_rng(0, 0, 1), 0):totable())
    local n = data.transforms.normalise(img, 0.5, 0.25)
    assert.equal('float32', n.dtype)
    assert.is_true(math.abs(n[{ 1, 3, 4 }]:item() - (23 / 255 - 0.5) / 0.25) < 1e-5)
    local rgb = ember.tensor({ { { 255 } }, { { 0 } }, { { 0 } } }, { dtype = 'uint8' })
    assert.equal(76, data.transforms.apply(rgb, { 'grayscale' })[{ 1, 1, 1 }]:item())
    local gray3 = data.transforms.apply(img, { 'rgb' })
    assert.same({ 3, 5, 5 }, gray3.shape)
    assert.equal(44, gray3[{ 3, 5, 5 }]:item())
    F.has(F.error_of(data.transforms.random_crop, img, 3, 0, nil), 'a random crop or flip needs the sample\'s rng')
  end)

  it('draws per sample from (seed, epoch, id) alone', function()
    local a, b = data.sample_rng(3, 1, 42), data.sample_rng(3, 1, 42)
    local x = { a:random(), a:random(10), a:random(5, 6), a:normal() }
    assert.same(x, { b:random(), b:random(10), b:random(5, 6), b:normal() })
    assert.is_true(x[2] >= 1 and x[2] <= 10 and (x[3] == 5 or x[3] == 6))
    assert.are_not.equal(x[1], data.sample_rng(3, 1, 43):random())
    assert.are_not.equal(x[1], data.sample_rng(3, 2, 42):random())
    assert.are_not.equal(x[1], data.sample_rng(4, 1, 42):random())
    -- plans: world size 1 is the DataLoader's permutation
    assert.same(data.randperm(10, 5, 2):totable(), data.epoch_plan(10, { seed = 5, epoch = 2, shuffle = true }):totable())
  end)
end)
