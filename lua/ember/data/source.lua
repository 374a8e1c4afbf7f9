-- ember.data.source: what a loader's readers read, and how a batch of it is made.
--
-- A dataset spec is plain data (it travels to reader processes as JSON):
--   'fashion-mnist' | 'mnist'          built-in IDX datasets; options {train =, root =, limit =}
--   'path/to/dataset.lua'               a Lua file returning a dataset table, or a function
--                                       that takes `dataset_options` and returns one
--   {format = 'idx', images =, labels =}                 IDX files (plain or gzipped)
--   {format = 'npy', x =, y =, channels_last =}           .npy arrays (mapped, not read)
--   {format = 'tfrecord', files = {...}, image_key = 'image', label_key = 'label',
--    encoded = true (JPEG bytes) | false with shape = {H, W} or {C, H, W}}
--   {format = 'jpeg', root = dir (a folder per class) | files = {...}, labels = {...}}
--   {format = 'text', files = {...}, tokenizer = 'char' | 'bpe', block =, part = 'train' | 'val'}
--                                       token blocks of a text corpus (lua/ember/text.lua)
-- each format taking limit = N (the first N samples), label_offset (added to labels read
-- from files, default 1: ember's classes count from 1), channels = 1 | 3 (JPEG decoding).
--
-- A Lua dataset is a table with size() and get(index, rng), called as methods: index
-- counts from 1, rng is the sample's own generator (rng:random(), rng:random(n),
-- rng:random(m, n), rng:normal(), rng:bernoulli(p)), keyed by (seed, epoch, index), and
-- get returns a table of tensors (or numbers) of the same shapes for every sample. An
-- optional get_batch(ids, rng_of) returns the whole batch at once (ids an int64 tensor,
-- rng_of(id) a sample's generator).
--
-- transforms (a list, applied in this order whatever order it is written in):
--   {random_crop = {size = 24, padding = 2}}  {center_crop = 24}  {flip = 0.5}
--   {normalise = {mean = 0.286, std = 0.353}} (or true: x / 255)  'grayscale' | 'rgb'
-- They run in C on built-in formats, on the `x` of each sample for Lua datasets.
local ffi = require 'ffi'
local ember = require 'ember'
local json = require 'ember.util.json'
local progress = require 'ember.util.progress'

local C = ember.C
local M = {}
local I = require 'ember.internal'
local throw, box, new_tensor, wrap = I.throw, I.box, I.new, I.wrap
local describe = I.describe_value

-- Readers report errors to the trainer, which adds its own context: no position.
local function check(status) return I.check(status, 0) end

-- ---------------------------------------------------------------- per-sample generators
local Rng = {}
Rng.__index = Rng
-- random(): [0, 1); random(n): 1..n; random(m, n): m..n (as math.random).
function Rng:random(m, n)
  if m == nil then return C.em_sample_rng_uniform(self) end
  if n == nil then m, n = 1, m end
  if n < m then throw(string.format('rng:random: empty interval [%s, %s]', tostring(m), tostring(n))) end
  return m + tonumber(C.em_sample_rng_below(self, n - m + 1))
end
function Rng:uniform(a, b)
  local u = C.em_sample_rng_uniform(self)
  if a == nil then return u end
  return a + (b - a) * u
end
function Rng:normal(mean, std) return (mean or 0) + (std or 1) * C.em_sample_rng_normal(self) end
function Rng:bernoulli(p) return C.em_sample_rng_uniform(self) < (p or 0.5) end
ffi.metatype('em_sample_rng', Rng)

-- sample_rng(seed, epoch, id): the generator a dataset's get(id, rng) receives.
function M.sample_rng(seed, epoch, id) return ffi.new('em_sample_rng', seed, epoch, id, 0) end

-- ---------------------------------------------------------------- transforms
local function need_size(op, v)
  if type(v) == 'number' and v >= 1 and v == math.floor(v) then return v, v end
  if type(v) == 'table' and #v == 2 and type(v[1]) == 'number' and type(v[2]) == 'number' then return v[1], v[2] end
  throw(string.format('%s: size must be an integer >= 1 or {h, w}, got %s', op, describe(v)))
end

local function per_channel(op, name, v, dflt)
  if v == nil then v = dflt end
  if type(v) == 'number' then return { v, v, v, v } end
  if type(v) == 'table' and #v >= 1 and #v <= 4 then
    local out = {}
    for i = 1, 4 do
      out[i] = v[math.min(i, #v)]
      if type(out[i]) ~= 'number' then throw(string.format('%s: %s must hold numbers', op, name)) end
    end
    return out
  end
  throw(string.format('%s: %s must be a number or a list of 1 to 4 numbers, got %s', op, name, describe(v)))
end

-- augment(transforms): the em_augment struct for a list of transforms (nil when empty).
function M.augment(list)
  if list == nil then return nil end
  if type(list) ~= 'table' then throw('transforms: expected a list, got ' .. describe(list)) end
  if #list == 0 then return nil end
  local a = ffi.new('em_augment')
  for k = 0, 3 do a.std[k] = 1 end
  for i, t in ipairs(list) do
    local name, v
    if type(t) == 'string' then
      name, v = t, true
    elseif type(t) == 'table' then
      name, v = next(t)
      if next(t, name) ~= nil then
        throw(string.format('transforms[%d]: one transform per entry, got several keys', i))
      end
    end
    local op = string.format('transforms[%d] (%s)', i, tostring(name))
    if name == 'random_crop' or name == 'center_crop' then
      local size, pad = v, 0
      if type(v) == 'table' and v.size ~= nil then size, pad = v.size, v.padding or 0 end
      a.crop_h, a.crop_w = need_size(op, size)
      if type(pad) ~= 'number' or pad < 0 or pad ~= math.floor(pad) then
        throw(op .. ': padding must be an integer >= 0, got ' .. describe(pad))
      end
      a.pad, a.random_crop = pad, name == 'random_crop' and 1 or 0
    elseif name == 'flip' then
      local p = v == true and 0.5 or v
      if type(p) ~= 'number' or p < 0 or p > 1 then
        throw(op .. ': expected a probability in [0, 1] or true, got ' .. describe(v))
      end
      a.flip_p = p
    elseif name == 'normalise' or name == 'normalize' then
      a.normalise = 1
      if type(v) == 'table' then
        local mean, std = per_channel(op, 'mean', v.mean, 0), per_channel(op, 'std', v.std, 1)
        for k = 1, 4 do
          if not (std[k] > 0) then throw(op .. ': std must be > 0') end
          a.mean[k - 1], a.std[k - 1] = mean[k], std[k]
        end
      elseif v ~= true then
        throw(op .. ': expected true or {mean =, std =}, got ' .. describe(v))
      end
    elseif name == 'grayscale' then
      a.channels = 1
    elseif name == 'rgb' then
      a.channels = 3
    else
      throw(string.format('transforms[%d]: unknown transform %s (expected random_crop, center_crop, flip, ' ..
        'normalise, grayscale or rgb)', i, describe(name)))
    end
  end
  return a
end

-- ---------------------------------------------------------------- specs
local BUILTIN = { ['fashion-mnist'] = '/usr/share/datasets/fashion-mnist', mnist = false }
local FORMAT_KEYS = {
  idx = { images = true, labels = true },
  npy = { x = true, y = true, channels_last = true },
  tfrecord = { files = true, image_key = true, label_key = true, encoded = true, shape = true, channels_last = true },
  jpeg = { root = true, files = true, labels = true },
}
local COMMON_KEYS = { format = true, limit = true, label_offset = true, channels = true }

local function find_idx(root, stem)
  for _, name in ipairs { stem .. '.gz', stem } do
    local f = io.open(root .. '/' .. name, 'rb')
    if f then f:close(); return root .. '/' .. name end
  end
  return nil
end

-- The format spec of a built-in dataset name.
local function builtin(name, o)
  o = o or {}
  for k in pairs(o) do
    if k ~= 'train' and k ~= 'root' and k ~= 'limit' then
      throw(string.format("dataset '%s': unknown option '%s' (expected train, root, limit)", name, tostring(k)))
    end
  end
  local root = o.root or BUILTIN[name]
  if not root then throw(string.format("dataset '%s': expected dataset_options = {root = its directory}", name)) end
  local prefix = o.train == false and 't10k' or 'train'
  local images, labels = find_idx(root, prefix .. '-images-idx3-ubyte'), find_idx(root, prefix .. '-labels-idx1-ubyte')
  if not images or not labels then
    throw(string.format("dataset '%s': cannot find %s-images-idx3-ubyte(.gz) and %s-labels-idx1-ubyte(.gz) in '%s'",
      name, prefix, prefix, root))
  end
  return { format = 'idx', images = images, labels = labels, limit = o.limit }
end

-- normalise(dataset, dataset_options, transforms): the JSON-able spec, checked.
function M.normalise(dataset, options, transforms)
  local spec = { transforms = transforms }
  M.augment(transforms)   -- errors now, not in a reader
  if type(dataset) == 'string' and BUILTIN[dataset] ~= nil then
    spec.dataset = builtin(dataset, options)
    spec.kind = dataset
  elseif type(dataset) == 'string' then
    if not dataset:match('%.lua$') then
      throw(string.format("dataset: expected 'fashion-mnist', 'mnist', a Lua file (.lua) or {format = ...}, got '%s'",
        dataset))
    end
    local f = io.open(dataset, 'r')
    if not f then throw(string.format("dataset: cannot read '%s'", dataset)) end
    f:close()
    spec.dataset, spec.options = dataset, options
    spec.kind = 'lua:' .. dataset:match('([^/]+)$')
  elseif type(dataset) == 'table' and type(dataset.format) == 'string' then
    local keys = FORMAT_KEYS[dataset.format]
    if dataset.format == 'text' then   -- a token stream over a text corpus (lua/ember/text.lua)
      require('ember.text').check_source(dataset)
      keys = {}
    elseif not keys then
      throw(string.format("dataset: unknown format '%s' (expected idx, npy, tfrecord, jpeg, text)", dataset.format))
    end
    for k in pairs(dataset) do
      if dataset.format == 'text' then break end
      if not keys[k] and not COMMON_KEYS[k] then
        throw(string.format("dataset (%s): unknown key '%s'", dataset.format, tostring(k)))
      end
    end
    spec.dataset = dataset
    spec.kind = dataset.format
  else
    throw('dataset: expected a built-in name, a Lua file path or a {format = ...} table, got ' .. describe(dataset))
  end
  return spec
end

-- What readers and trainers must agree on (paths may differ from host to host).
function M.fingerprint(spec)
  return json.encode { kind = spec.kind, transforms = spec.transforms or {},
    label_offset = type(spec.dataset) == 'table' and spec.dataset.label_offset or nil }
end

-- ---------------------------------------------------------------- built-in sources
local Source = {}
Source.__index = Source
M.Source = Source

local function lines(list)
  if type(list) == 'string' then return list end
  return table.concat(list, '\n')
end

function M.open_source(d)
  local o = ffi.new('em_source_options')
  -- strings and arrays the options point to, alive until the call returns
  local keep = {}   -- luacheck: ignore 241
  o.format = d.format
  o.limit = d.limit or 0
  o.label_offset = d.label_offset or 1
  o.channels = d.channels or 0
  local paths
  if d.format == 'idx' then
    paths = { d.images, d.labels }
  elseif d.format == 'npy' then
    paths = { d.x, d.y }
    o.channels_last = d.channels_last and 1 or 0
  elseif d.format == 'tfrecord' then
    paths = type(d.files) == 'table' and d.files or { d.files }
    o.image_key, o.label_key = d.image_key, d.label_key
    o.encoded = d.encoded == false and 0 or 1
    o.channels_last = d.channels_last and 1 or 0
    if d.shape then
      o.ndim = #d.shape
      for i, v in ipairs(d.shape) do o.shape[i - 1] = v end
    end
  else
    paths = d.root and { d.root } or d.files
    if d.labels then
      if #d.labels ~= #paths then
        throw(string.format('dataset (jpeg): %d files but %d labels', #paths, #d.labels))
      end
      local arr = ffi.new('int64_t[?]', #d.labels)
      for i, v in ipairs(d.labels) do arr[i - 1] = v end
      o.labels, keep.labels = arr, arr
      o.label_offset = d.label_offset or 0
    end
  end
  if type(paths) ~= 'table' or #paths == 0 then throw('dataset (' .. d.format .. '): no files given') end
  for _, p in ipairs(paths) do
    if type(p) ~= 'string' then
      throw('dataset (' .. d.format .. '): file paths must be strings, got ' .. describe(p))
    end
  end
  local text = lines(paths)
  o.paths = text
  local pbox = ffi.new('em_source *[1]')
  if C.em_source_open(pbox, o) ~= 0 then I.raise() end
  local src = ffi.gc(pbox[0], C.em_source_free)
  keep = nil   -- luacheck: ignore 311
  return setmetatable({ src = src, n = tonumber(C.em_source_size(src)), format = d.format }, Source)
end

function Source:size() return self.n end

-- Tensors this source fills for a batch of `rows` (em_tensor_desc[2]) and their count.
function Source:describe(aug, rows)
  local descs = ffi.new('em_tensor_desc[2]')
  local nd = C.em_source_describe(self.src, aug, rows, descs)
  if nd < 0 then I.raise() end
  return descs, nd
end

-- get(i, rng): one sample {x =, y =} (as a Lua dataset's get would give it).
function Source:get(i, rng, aug)
  local xb, yb = ffi.new('em_tensor *[1]'), ffi.new('em_tensor *[1]')
  local st = C.em_source_get(self.src, i, 1, aug, rng, xb, yb)
  I.check(st)
  local s = { x = wrap(xb[0]) }
  if yb[0] ~= nil then s.y = wrap(yb[0]):item() end
  return s
end

-- ---------------------------------------------------------------- opening a spec
-- open(spec) -> a producer: {size = n, produce = function(job) ... end}
--   job = {ids = int64_t * (n ids), n =, seed =, epoch =, skip_bad =, alloc = function(nd, descs) -> em_tensor *[nd]}
--   returns kept, kept_ids (int64_t *), skipped, times (em_stage_times), bad_message
local Producer = {}
Producer.__index = Producer

local function load_lua_dataset(path, options)
  local chunk, err = loadfile(path)
  if not chunk then throw(string.format("dataset '%s': %s", path, err)) end
  local ok, ds = pcall(chunk)
  if not ok then throw(string.format("dataset '%s': %s", path, tostring(ds))) end
  if type(ds) == 'function' then
    ok, ds = pcall(ds, options or {})
    if not ok then throw(string.format("dataset '%s': %s", path, tostring(ds))) end
  end
  if type(ds) ~= 'table' or type(ds.size) ~= 'function' or
      (type(ds.get) ~= 'function' and type(ds.get_batch) ~= 'function') then
    throw(string.format("dataset '%s': expected a table with size() and get(index, rng), got %s", path, describe(ds)))
  end
  return ds
end

function M.open(spec)
  local self = setmetatable({ spec = spec, aug = M.augment(spec.transforms) }, Producer)
  if type(spec.dataset) == 'table' and spec.dataset.format == 'text' then
    self.ds = require('ember.text').open_source(spec.dataset)
    self.n = self.ds:size()
  elseif type(spec.dataset) == 'table' and spec.dataset.format then
    self.source = M.open_source(spec.dataset)
    self.n = self.source:size()
    self.source:describe(self.aug, 0)   -- transforms that do not fit the data fail now
  elseif type(spec.dataset) == 'string' then
    self.ds = load_lua_dataset(spec.dataset, spec.options)
    self.n = self.ds:size()
  elseif type(spec.dataset) == 'table' then   -- a dataset object (in-process loaders only)
    self.ds = spec.dataset
    self.n = self.ds:size()
  end
  if type(self.n) ~= 'number' or self.n < 0 or self.n ~= math.floor(self.n) then
    throw('dataset: size() must return an integer >= 0, got ' .. describe(self.n))
  end
  self.times = ffi.new('em_stage_times')
  self.kept = ffi.new('int64_t[1]')
  self.skipped = ffi.new('int64_t[1]')
  return self
end

function Producer:size() return self.n end

-- Bytes of one sample as batches carry it (all its tensors); nil for Lua datasets.
function Producer:sample_bytes()
  if not self.source then return nil end
  local descs, nd = self.source:describe(self.aug, 1)
  local bytes = 0
  for i = 0, nd - 1 do
    local n = tonumber(C.em_dtype_size(descs[i].dtype))
    for d = 1, descs[i].ndim - 1 do n = n * tonumber(descs[i].sizes[d]) end
    bytes = bytes + n
  end
  return bytes
end

local function dtype_name(dt) return ffi.string(C.em_dtype_name(dt)) end

-- A batch from a built-in source: one C call. The descriptions and the kept ids live in
-- buffers of the producer, valid until its next batch (the caller sends them first).
function Producer:produce_source(job)
  if not self.descs then self.descs = ffi.new('em_tensor_desc[2]') end
  local descs = self.descs
  local nd = C.em_source_describe(self.source.src, self.aug, job.n, descs)
  if nd < 0 then I.raise(0) end
  local t = job.alloc(nd, descs)
  if not self.kept_cap or self.kept_cap < job.n then
    self.kept_cap = job.n
    self.kept_buf = ffi.new('int64_t[?]', job.n)
  end
  local kept_ids = self.kept_buf
  ffi.fill(self.times, ffi.sizeof('em_stage_times'))
  self.skipped[0] = 0
  local st = C.em_source_fill(self.source.src, job.ids, job.n, 1, self.aug, job.seed, job.epoch, t[0],
    nd > 1 and t[1] or nil,
    job.skip_bad and 1 or 0, self.kept, kept_ids, self.skipped, self.times)
  if st ~= 0 then I.raise(0) end
  local bad = self.skipped[0] > 0 and I.last_error() or nil
  return tonumber(self.kept[0]), kept_ids, tonumber(self.skipped[0]), self.times, bad, t
end

local function desc_of(name, v, rows)
  local d = ffi.new('em_tensor_desc')
  if #name > 31 then throw(string.format("dataset: the name '%s' is longer than 31 characters", name)) end
  ffi.copy(d.name, name)
  d.sizes[0] = rows
  if type(v) == 'number' then
    d.ndim, d.dtype = 1, v == math.floor(v) and C.EM_INT64 or C.EM_FLOAT64
  elseif ember.is_tensor(v) then
    d.ndim = v:dim() + 1
    if d.ndim > 8 then throw(string.format("dataset: '%s' has %d dims, at most 7 fit a batch", name, v:dim())) end
    d.dtype = C.em_tensor_dtype(v)
    for k = 1, v:dim() do d.sizes[k] = v.shape[k] end
  else
    throw(string.format("dataset: sample field '%s' must be a tensor or a number, got %s", name, describe(v)))
  end
  return d
end

-- Names of a sample's fields, sorted (the batch's tensors in that order).
local function field_names(s)
  local names = {}
  for k in pairs(s) do
    if type(k) ~= 'string' then throw('dataset: sample fields must be named by strings, got ' .. describe(k)) end
    if k ~= 'ids' then names[#names + 1] = k end
  end
  table.sort(names)
  if #names == 0 then throw('dataset: get() returned an empty sample') end
  if #names > 16 then throw('dataset: a sample has more than 16 fields') end
  return names
end

-- The tensors of a batch whose fields include jagged ones (lua/ember/data/jagged.lua): each
-- jagged field NAME becomes its values (int64 [total], em_tensor_desc.lengths naming the
-- counts) and NAME.lengths (int64 [n, K]). fields: name -> {keys =, total =} for jagged
-- ones, a value (tensor or number) for the others. Returns descs, the ordered names.
local function jagged_descs(fields, n)
  local names = {}
  for name, f in pairs(fields) do
    names[#names + 1] = name
    if type(f) == 'table' and f.jagged then names[#names + 1] = name .. '.lengths' end
  end
  table.sort(names)
  if #names > 16 then throw('dataset: a batch holds more than 16 tensors (a jagged field counts twice)') end
  local at = {}
  for i, name in ipairs(names) do at[name] = i end
  local descs = ffi.new('em_tensor_desc[?]', #names)
  for i, name in ipairs(names) do
    local f = fields[name]
    local d = descs[i - 1]
    if f == nil then   -- a lengths tensor
      local j = fields[name:sub(1, -9)]
      if #name > 31 then throw(string.format("dataset: the name '%s' is longer than 31 characters", name)) end
      ffi.copy(d.name, name)
      d.dtype, d.ndim, d.sizes[0], d.sizes[1] = C.EM_INT64, 2, n, j.keys
    elseif type(f) == 'table' and f.jagged then
      if #name > 31 then throw(string.format("dataset: the name '%s' is longer than 31 characters", name)) end
      ffi.copy(d.name, name)
      d.dtype, d.ndim, d.sizes[0], d.lengths = C.EM_INT64, 1, f.total, at[name .. '.lengths']
    else
      descs[i - 1] = desc_of(name, f, n)
    end
  end
  return descs, names
end

-- Per-sample datasets with jagged fields: the samples are all read first (the values'
-- total sizes the batch), then written.
local function produce_jagged(job, samples, kept_ids, skipped, first_bad, times)
  local jagged = require 'ember.data.jagged'
  local first = samples[1]
  local fields = {}
  for name, v in pairs(first) do
    if name ~= 'ids' then
      if jagged.is_sample(v) then fields[name] = { jagged = true, keys = v.n, total = jagged.total(samples, name) }
      else fields[name] = v end
    end
  end
  local descs, names = jagged_descs(fields, job.n)
  local t = job.alloc(#names, descs, names)
  for k, name in ipairs(names) do
    local f = fields[name]
    if type(f) == 'table' and f.jagged then
      local lt = t[k]   -- NAME.lengths sorts right after NAME
      jagged.fill(samples, name, f.keys, ffi.cast('int64_t *', C.em_tensor_data(t[k - 1])),
        ffi.cast('int64_t *', C.em_tensor_data(lt)))
    elseif f ~= nil then
      for row, s in ipairs(samples) do
        local v = s[name]
        local st
        if type(v) == 'number' then st = C.em_data_put_row_number(t[k - 1], row - 1, v)
        elseif ember.is_tensor(v) then st = C.em_data_put_row(t[k - 1], row - 1, v)
        else error(string.format("sample %d: field '%s' is %s", tonumber(kept_ids[row - 1]), name, describe(v)), 0) end
        if st ~= 0 then error(string.format("sample %d: field '%s': %s", tonumber(kept_ids[row - 1]), name,
            I.last_error()), 0) end
      end
    end
  end
  return #samples, kept_ids, skipped, times, first_bad, t
end

-- A batch from a Lua dataset, sample by sample (get) or at once (get_batch).
function Producer:produce_lua(job)
  local ds, n, aug = self.ds, job.n, self.aug
  local seed, epoch = job.seed, job.epoch
  local times = self.times
  ffi.fill(times, ffi.sizeof('em_stage_times'))
  local t0 = progress.now()
  if ds.get_batch then
    local ids = ember.empty({ n }, { dtype = 'int64' })
    ffi.copy(ids:data_ptr(), job.ids, n * 8)
    local b = ds:get_batch(ids, function(id) return M.sample_rng(seed, epoch, id) end)
    if type(b) ~= 'table' then error('dataset: get_batch must return a table of tensors, got ' .. describe(b), 0) end
    local jagged = require 'ember.data.jagged'
    local jfields
    for name, v in pairs(b) do
      if jagged.is_batch(v) then
        jfields = jfields or {}
        local L = v.lengths:dim() == 1 and v.lengths:reshape(v.lengths.shape[1], 1) or v.lengths
        if L.shape[1] ~= n then
          error(string.format("dataset: get_batch's '%s' has lengths for %d samples, expected %d", name, L.shape[1], n),
            0)
        end
        jfields[name] = { jagged = true, keys = L.shape[2], total = v.values:numel(), values = v.values, lengths = L }
      end
    end
    if jfields then
      local fields = {}
      for name, v in pairs(b) do if name ~= 'ids' then fields[name] = jfields[name] or v end end
      local descs, names = jagged_descs(fields, n)
      local t = job.alloc(#names, descs, names)
      for k, name in ipairs(names) do
        local f = fields[name]
        if type(f) == 'table' and f.jagged then
          check(C.em_copy_(t[k - 1], f.values:reshape(f.total):to('int64')))
          check(C.em_copy_(t[k], f.lengths))
        elseif f ~= nil then
          if not ember.is_tensor(f) or f.shape[1] ~= n then
            error(string.format("dataset: get_batch's '%s' must be a tensor of %d rows, got %s", name, n, describe(f)),
              0)
          end
          check(C.em_copy_(t[k - 1], f))
        end
      end
      times.read = progress.now() - t0
      return n, job.ids, 0, times, nil, t
    end
    local names = field_names(b)
    local descs = ffi.new('em_tensor_desc[?]', #names)
    for i, name in ipairs(names) do
      local v = b[name]
      if #name > 31 then error(string.format("dataset: the name '%s' is longer than 31 characters", name), 0) end
      if not ember.is_tensor(v) or v:dim() < 1 or v.shape[1] ~= n then
        error(string.format("dataset: get_batch's '%s' must be a tensor of %d rows, got %s", name, n, describe(v)), 0)
      end
      local d = descs[i - 1]
      if v:dim() > 8 then error(string.format("dataset: '%s' has more than 8 dims", name), 0) end
      ffi.copy(d.name, name)
      d.ndim, d.dtype = v:dim(), C.em_tensor_dtype(v)
      for k = 1, v:dim() do d.sizes[k - 1] = v.shape[k] end
    end
    local t = job.alloc(#names, descs, names)
    for i, name in ipairs(names) do check(C.em_copy_(t[i - 1], b[name])) end
    times.read = progress.now() - t0
    return n, job.ids, 0, times, nil, t
  end
  local t, names, kept, skipped, first_bad = nil, nil, 0, 0, nil
  local kept_ids = ffi.new('int64_t[?]', n)
  local collected   -- the samples, when they carry jagged fields
  local t_tf = 0
  for i = 0, n - 1 do
    local id = tonumber(job.ids[i])
    local rng = M.sample_rng(seed, epoch, id)
    local ok, s = pcall(ds.get, ds, id, rng)
    if ok and type(s) ~= 'table' then ok, s = false, 'get() must return a table of tensors, got ' .. describe(s) end
    if ok and aug and s.x ~= nil then
      local ta = progress.now()
      ok, s.x = pcall(function()
        if not ember.is_tensor(s.x) then error('transforms apply to a tensor x, got ' .. describe(s.x), 0) end
        return new_tensor(C.em_data_augment(box, s.x, 0, aug, rng))
      end)
      if not ok then s = s.x end
      t_tf = t_tf + progress.now() - ta
    end
    if not ok then
      local msg = string.format('sample %d: %s', id, tostring(s))
      if not job.skip_bad then error(msg, 0) end
      skipped = skipped + 1
      first_bad = first_bad or msg
    elseif collected or (not t and require('ember.data.jagged').has_jagged(s)) then
      collected = collected or {}
      collected[#collected + 1] = s
      kept_ids[kept] = id
      kept = kept + 1
    else
      if not t then
        names = field_names(s)
        local descs = ffi.new('em_tensor_desc[?]', #names)
        for k, name in ipairs(names) do descs[k - 1] = desc_of(name, s[name], n) end
        t = job.alloc(#names, descs, names)
      end
      for k, name in ipairs(names) do
        local v = s[name]
        local st
        if type(v) == 'number' then
          st = C.em_data_put_row_number(t[k - 1], kept, v)
        elseif ember.is_tensor(v) then
          st = C.em_data_put_row(t[k - 1], kept, v)
        else
          error(string.format("sample %d: field '%s' is %s, the first sample's was a tensor or number", id, name,
            describe(v)), 0)
        end
        if st ~= 0 then error(string.format("sample %d: field '%s': %s", id, name, I.last_error()), 0) end
      end
      kept_ids[kept] = id
      kept = kept + 1
    end
  end
  times.transform = t_tf
  times.read = progress.now() - t0 - t_tf
  if collected then return produce_jagged(job, collected, kept_ids, skipped, first_bad, times) end
  return kept, kept_ids, skipped, times, first_bad, t
end

function Producer:produce(job)
  if self.source then return self:produce_source(job) end
  return self:produce_lua(job)
end

M.dtype_name = dtype_name
return M
