-- ember.data.readers: what the reader processes (ZeroMQ) add to ember.data (lua/ember/data.lua
-- looks keys up here on first use):
--
--   data.ReaderLoader{...}                 batches from reader processes (data/loader.lua)
--   data.source(spec)                      a built-in format as a dataset: size(), get(i, rng)
--   data.sample_rng(seed, epoch, id)       a sample's generator, as datasets receive it
--   data.transforms.apply(img, list, rng)  random_crop, center_crop, flip, normalise in C
--   data.transforms.random_crop(img, size, padding, rng) / center_crop(img, size) /
--   data.transforms.flip(img, rng [, p]) / normalise(img, mean, std)
--   data.epoch_plan(n, {seed =, epoch =, shuffle =, rank =, world_size =, remainder =})
--   data.npy.read(path) / data.npy.write(path, t)
--   data.jpeg.encode(img [, quality]) -> string / data.jpeg.decode(bytes [, channels])
--   data.tfrecord.write(path, records) / data.tfrecord.example{image = bytes, label = n}
--   data.crc32c(bytes)
--   data.curve_keypair() -> public, secret / data.curve_keygen(path) writes a key file
local ffi = require 'ffi'
local ember = require 'ember'
local source = require 'ember.data.source'
local loader = require 'ember.data.loader'

local C = ember.C
local I = require 'ember.internal'
local throw, box, new_tensor = I.throw, I.box, I.new
local describe = I.describe_value

local P = {}

P.ReaderLoader = loader.new
P.ReaderLoader_class = loader.Loader_class
P.sample_rng = source.sample_rng
P.curve_keypair = loader.curve_keypair

function P.curve_keygen(path)
  local pub, sec = loader.curve_keypair()
  local f, err = io.open(path, 'w')
  if not f then throw(string.format("curve_keygen: cannot write '%s': %s", path, err)) end
  f:write('# CurveZMQ key pair for ember data readers and trainers (keep the secret one private)\n')
  f:write('public: ', pub, '\nsecret: ', sec, '\n')
  f:close()
  os.execute("chmod 600 '" .. path:gsub("'", "'\\''") .. "'")
  return pub, sec
end

-- source(spec [, transforms]): a dataset over a built-in format (or a built-in name).
function P.source(spec, transforms)
  local s = source.normalise(spec, nil, transforms)
  if type(s.dataset) ~= 'table' then
    throw('source: expected a built-in format spec or name, got ' .. describe(spec))
  end
  local src = source.open_source(s.dataset)
  local aug = source.augment(transforms)
  return { size = function() return src:size() end, get = function(_, i, rng) return src:get(i, rng, aug) end,
    _source = src }
end

function P.epoch_plan(n, o)
  o = o or {}
  return new_tensor(C.em_data_epoch_plan(box, n, o.seed or 0, o.epoch or 0, o.shuffle and 1 or 0, o.rank or 0,
    o.world_size or 1, o.remainder == 'pad' and 1 or 0, 1))
end

-- ---------------------------------------------------------------- transforms
local T = {}
P.transforms = T

function T.apply(img, list, rng)
  if not ember.is_tensor(img) then throw('transforms.apply: expected an image tensor, got ' .. describe(img)) end
  local aug = source.augment(list)
  if not aug then return img end
  return new_tensor(C.em_data_augment(box, img, 0, aug, rng))
end

function T.random_crop(img, size, padding, rng)
  return T.apply(img, { { random_crop = { size = size, padding = padding or 0 } } }, rng)
end
function T.center_crop(img, size) return T.apply(img, { { center_crop = size } }, nil) end
function T.flip(img, rng, p) return T.apply(img, { { flip = p or 0.5 } }, rng) end
function T.normalise(img, mean, std) return T.apply(img, { { normalise = { mean = mean, std = std } } }, nil) end
T.normalize = T.normalise

-- ---------------------------------------------------------------- formats
P.npy = {
  read = function(path) return new_tensor(C.em_data_read_npy(box, path)) end,
  write = function(path, t)
    if C.em_data_write_npy(path, t) ~= 0 then I.raise() end
  end,
}

local function bytes_of(x)
  if type(x) == 'string' then return x, #x end
  if ember.is_tensor(x) and x.dtype == 'uint8' then
    x = x:contiguous()
    return ffi.cast('const char *', x:data_ptr()), x:numel(), x
  end
  throw('expected bytes (a string or a uint8 tensor), got ' .. describe(x))
end

P.jpeg = {
  encode = function(img, quality)
    local t = new_tensor(C.em_data_jpeg_encode(box, img, quality or 90))
    return ffi.string(t:data_ptr(), t:numel())
  end,
  decode = function(bytes, channels)
    -- keep holds what p points into until the call returns
    local p, n, keep = bytes_of(bytes)   -- luacheck: ignore 231
    local t = new_tensor(C.em_data_jpeg_decode(box, p, n, channels or 0, 'jpeg.decode'))
    keep = nil
    return t
  end,
}

function P.crc32c(bytes)
  local p, n = bytes_of(bytes)
  return tonumber(C.em_data_crc32c(p, n, 0))
end

-- Protobuf, just what a tf.train.Example needs.
local function varint(v)
  local out = {}
  v = ffi.cast('uint64_t', v)
  repeat
    local byte = tonumber(v % 128)
    v = v / 128
    out[#out + 1] = string.char(v ~= 0 and byte + 128 or byte)
  until v == 0
  return table.concat(out)
end
local function field(num, wire, payload)
  if wire == 2 then return varint(num * 8 + 2) .. varint(#payload) .. payload end
  return varint(num * 8) .. payload
end

local function u32le(v)
  v = tonumber(v)
  return string.char(v % 256, math.floor(v / 256) % 256, math.floor(v / 65536) % 256, math.floor(v / 16777216) % 256)
end

P.tfrecord = {
  -- example{name = value}: a serialised tf.train.Example; strings become bytes features,
  -- integers int64 features, lists of integers int64 lists.
  example = function(features)
    local names = {}
    for k in pairs(features) do names[#names + 1] = k end
    table.sort(names)
    local entries = {}
    for _, k in ipairs(names) do
      local v, feature = features[k]
      if type(v) == 'string' then
        feature = field(1, 2, field(1, 2, v))
      else
        local list = type(v) == 'table' and v or { v }
        local packed = {}
        for i, x in ipairs(list) do
          if type(x) ~= 'number' or x ~= math.floor(x) then
            throw(string.format("tfrecord.example: '%s' must be bytes (a string) or integers", k))
          end
          packed[i] = varint(ffi.cast('int64_t', x))
        end
        feature = field(3, 2, field(1, 2, table.concat(packed)))
      end
      entries[#entries + 1] = field(1, 2, field(1, 2, k) .. field(2, 2, feature))
    end
    return field(1, 2, table.concat(entries))
  end,
  -- write(path, records): a TFRecord file of the given byte strings.
  write = function(path, records)
    local f, err = io.open(path, 'wb')
    if not f then throw(string.format("tfrecord.write: cannot write '%s': %s", path, err)) end
    for _, r in ipairs(records) do
      local n = #r
      local len = u32le(n % 4294967296) .. u32le(math.floor(n / 4294967296))
      f:write(len, u32le(C.em_data_tfrecord_mask(C.em_data_crc32c(len, 8, 0))), r,
        u32le(C.em_data_tfrecord_mask(C.em_data_crc32c(r, n, 0))))
    end
    f:close()
  end,
}

return P
