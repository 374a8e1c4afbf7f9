-- ember.data: datasets and the in-process data loader.
--
--   local data = ember.data
--   local train = data.datasets.FashionMNIST{train = true, normalise = true}
--   local loader = data.DataLoader{dataset = train, batch_size = 128, shuffle = true, seed = 1}
--   for e = 1, 10 do
--     for batch in loader:epoch(e) do   -- batch.x [128, 1, 28, 28] float32, batch.y [128]
--       ...                             -- int64 classes 1..10, batch.ids [128] sample ids
--     end
--   end
--
-- The loader's interface is what a training loop may rely on, whichever loader sits behind
-- it (this in-process one, or data.ReaderLoader, which gets batches from reader processes):
--   loader:epoch(e)          iterator over the batches of epoch e (an integer >= 0); each
--                            batch is a table of tensors named by the dataset plus `ids`,
--                            the 1-based sample ids, in the epoch's planned order
--   loader:state()           {seed =, epoch =, position =, num_samples =}: where the next
--                            batch comes from (position counts samples of this epoch already
--                            delivered); plain numbers, so it goes into a checkpoint as JSON
--   loader:load_state(s)     the next loader:epoch(s.epoch) starts at s.position
--   loader:num_batches()     batches per epoch; loader:num_samples(): samples per epoch
--   loader:close()           releases workers (nothing to release here)
-- The order of epoch e is a function of (seed, e) alone (its own Philox stream, see
-- runtime/data/plan.c), never of the global generator, the thread count or the
-- batch size. With world_size > 1 each rank (0-based) takes every world_size-th sample of the
-- plan, after dropping the remainder so every rank sees the same number of samples.
--
-- A dataset is a table with size() and either get_batch(ids, rng_of) (a table of tensors
-- whose first dim follows the 1-based int64 tensor ids; no per-sample work in Lua) or
-- get(i, rng) (one sample as a table of tensors; the loader stacks them, which is slower).
-- rng / rng_of(id) is a sample's own generator, keyed by (seed, epoch, id), the same one
-- data.ReaderLoader's readers pass (ember.data.source).
local ember = require 'ember'

local C = ember.C
local data = { datasets = {} }
local I = require 'ember.internal'
local box, new_tensor = I.box, I.new   -- result-first calls: C.em_x(box, ...)
local throw, describe, check_options = I.throw, I.describe_value, I.check_opts
local need_int, need_bool = I.need_int, I.need_bool

-- ---------------------------------------------------------------- files and plans

-- read_idx(path [, {limit = n}]): an IDX file (plain or gzipped) as a tensor with the
-- file's dims (uint8 for MNIST's images and labels). limit reads the first n items only.
function data.read_idx(path, opts)
  if type(path) ~= 'string' then throw('read_idx: expected a file path (string), got ' .. describe(path)) end
  local limit = -1
  if opts ~= nil then
    check_options('read_idx', opts, { limit = true })
    if opts.limit ~= nil then limit = need_int('read_idx', 'limit', opts.limit, 0) end
  end
  return new_tensor(C.em_data_read_idx(box, path, limit))
end

-- randperm(n, seed, stream): a permutation of 1..n (int64) keyed by (seed, stream) alone.
function data.randperm(n, seed, stream)
  need_int('data.randperm', 'n', n, 0)
  need_int('data.randperm', 'seed', seed, 0)
  need_int('data.randperm', 'stream', stream or 0, 0)
  return new_tensor(C.em_data_randperm(box, n, seed, stream or 0, 1))
end

-- ---------------------------------------------------------------- TensorDataset
local TensorDataset = {}
TensorDataset.__index = TensorDataset
data.TensorDataset_class = TensorDataset

-- TensorDataset{x = images, y = labels, ...}: samples are the slices along dim 1 of every
-- tensor, which must agree on that size. Batches carry the same names.
function data.TensorDataset(tensors)
  if type(tensors) ~= 'table' then
    throw('TensorDataset: expected a table of name = tensor, got ' .. describe(tensors))
  end
  local n, first
  local names = {}
  for name in pairs(tensors) do
    if type(name) ~= 'string' then throw('TensorDataset: names must be strings, got ' .. describe(name)) end
    names[#names + 1] = name
  end
  table.sort(names)   -- the same tensor is named first in messages on every run
  for _, name in ipairs(names) do
    local t = tensors[name]
    if name == 'ids' then throw("TensorDataset: the name 'ids' is reserved for the sample ids of a batch") end
    if not ember.is_tensor(t) then
      throw(string.format("TensorDataset: '%s' must be a tensor, got %s", name, describe(t)))
    end
    if t:dim() == 0 then throw(string.format("TensorDataset: '%s' is 0-d; samples are slices along dim 1", name)) end
    local size = t.shape[1]
    if n and size ~= n then
      throw(string.format("TensorDataset: '%s' has %d samples but '%s' has %d (sizes of dim 1 must agree)", name,
        size, first, n))
    end
    n, first = size, first or name
  end
  if not n then throw('TensorDataset: expected at least one tensor') end
  return setmetatable({ tensors = tensors, names = names, n = n }, TensorDataset)
end

function TensorDataset:size() return self.n end

-- A batch: each tensor's slices at ids (1-based int64), gathered with one index_select.
function TensorDataset:get_batch(ids)
  local batch = {}
  for _, name in ipairs(self.names) do batch[name] = self.tensors[name]:index_select(1, ids) end
  return batch
end

-- One sample (views, no copy).
function TensorDataset:get(i)
  local sample = {}
  for _, name in ipairs(self.names) do sample[name] = self.tensors[name][i] end
  return sample
end

-- ---------------------------------------------------------------- IDX image datasets
-- Images as uint8 [N, 1, H, W] and labels as int64 classes 1..C (1-based, like every class
-- target in ember), from a pair of IDX files. normalise: false keeps uint8; true gives
-- float32 in [0, 1]; {mean =, std =} gives (x / 255 - mean) / std. Conversion happens per
-- batch, so the dataset stays at one byte per pixel in memory.
local ImageDataset = setmetatable({}, { __index = TensorDataset })
ImageDataset.__index = ImageDataset

local function find_file(op, root, stem)
  for _, name in ipairs { stem .. '.gz', stem } do
    local path = root .. '/' .. name
    local f = io.open(path, 'rb')
    if f then
      f:close()
      return path
    end
  end
  return nil
end

local function normaliser(op, v)
  if v == nil or v == false then return nil end
  if v == true then return { scale = 1 / 255, shift = 0 } end
  if type(v) == 'table' then
    check_options(op .. ': normalise', v, { mean = true, std = true })
    local mean, std = v.mean or 0, v.std or 1
    if type(mean) ~= 'number' or type(std) ~= 'number' or not (std > 0) then
      throw(string.format('%s: normalise expects {mean = number, std = number > 0}, got mean=%s std=%s', op,
        describe(mean), describe(std)))
    end
    return { scale = 1 / (255 * std), shift = -mean / std, mean = mean, std = std }
  end
  throw(string.format('%s: normalise must be true, false or {mean =, std =}, got %s', op, describe(v)))
end

local IMAGE_OPTS = { root = true, train = true, normalise = true, limit = true, classes = true }

local function image_dataset(op, default_root, opts)
  opts = opts or {}
  check_options(op, opts, IMAGE_OPTS)
  local root = opts.root or default_root
  if type(root) ~= 'string' then throw(op .. ': root must be a directory path (string), got ' .. describe(root)) end
  root = root:gsub('/+$', '')
  local train = true
  if opts.train ~= nil then train = need_bool(op, 'train', opts.train) end
  local limit = -1
  if opts.limit ~= nil then limit = need_int(op, 'limit', opts.limit, 1) end
  local classes = opts.classes and need_int(op, 'classes', opts.classes, 1) or 10
  local prefix = train and 'train' or 't10k'
  local paths = {}
  for _, f in ipairs { { 'images', prefix .. '-images-idx3-ubyte' }, { 'labels', prefix .. '-labels-idx1-ubyte' } } do
    local key, stem = f[1], f[2]
    paths[key] = find_file(op, root, stem)
    if not paths[key] then
      throw(string.format("%s: cannot find %s.gz (or %s) in '%s'%s", op, stem, stem, root,
        default_root and root == default_root and
        ' (Debian\'s dataset package installs them there: run scripts/setup.sh)' or ''))
    end
  end
  local images = data.read_idx(paths.images, { limit = limit >= 0 and limit or nil })
  local labels = data.read_idx(paths.labels, { limit = limit >= 0 and limit or nil })
  if images:dim() ~= 3 or images.dtype ~= 'uint8' then
    throw(string.format("%s: '%s' holds %s %s, expected uint8 images [N, H, W]", op, paths.images, images.dtype,
      table.concat(images.shape, 'x')))
  end
  if labels:dim() ~= 1 or labels.dtype ~= 'uint8' then
    throw(string.format("%s: '%s' holds %s %s, expected uint8 labels [N]", op, paths.labels, labels.dtype,
      table.concat(labels.shape, 'x')))
  end
  if labels.shape[1] ~= images.shape[1] then
    throw(string.format("%s: '%s' has %d labels for the %d images of '%s'", op, paths.labels, labels.shape[1],
      images.shape[1], paths.images))
  end
  if labels.shape[1] > 0 and labels:max():item() >= classes then
    throw(string.format("%s: '%s' holds the label %d, expected 0 to %d", op, paths.labels, labels:max():item(),
      classes - 1))
  end
  local n, h, w = images.shape[1], images.shape[2], images.shape[3]
  local self = data.TensorDataset { x = images:view(n, 1, h, w), y = labels:long():add_(1) }
  self.norm = normaliser(op, opts.normalise)
  self.paths, self.classes, self.root, self.train = paths, classes, root, train
  return setmetatable(self, ImageDataset)
end

-- Images gathered and normalised in one pass (runtime/data/gather.c); labels by index_select.
function ImageDataset:get_batch(ids)
  local norm = self.norm
  if not norm then return TensorDataset.get_batch(self, ids) end
  if ids.dtype ~= 'int64' then ids = ids:long() end
  return { x = new_tensor(C.em_data_gather_normalize(box, self.tensors.x, ids, 1, norm.scale, norm.shift)),
    y = self.tensors.y:index_select(1, ids) }
end

function ImageDataset:get(i)
  local s = TensorDataset.get(self, i)
  if self.norm then s.x = s.x:float():mul_(self.norm.scale):add_(self.norm.shift) end
  return s
end

-- gather_normalize(src, ids, scale, shift): float32 src[ids] * scale + shift in one pass;
-- src a contiguous CPU tensor (uint8, int32, float32, float64), ids 1-based int64.
function data.gather_normalize(src, ids, scale, shift)
  if not ember.is_tensor(src) then throw('gather_normalize: expected a tensor for src, got ' .. describe(src)) end
  if not ember.is_tensor(ids) then throw('gather_normalize: expected an int64 tensor of ids, got ' .. describe(ids)) end
  return new_tensor(C.em_data_gather_normalize(box, src, ids, 1, scale or 1, shift or 0))
end

-- FashionMNIST{root = '/usr/share/datasets/fashion-mnist', train = true, normalise = false,
-- limit = nil}: 60,000 training or 10,000 test images of 28x28, 10 classes. limit keeps the
-- first n samples (quick runs, tests).
function data.datasets.FashionMNIST(opts)
  return image_dataset('FashionMNIST', '/usr/share/datasets/fashion-mnist', opts)
end

-- MNIST{root = ..., ...}: the same files and options (root is required: Debian ships none).
function data.datasets.MNIST(opts)
  if not (opts and opts.root) then throw('MNIST: expected {root = directory holding the IDX files}') end
  return image_dataset('MNIST', nil, opts)
end

-- ---------------------------------------------------------------- DataLoader
local DataLoader = {}
DataLoader.__index = DataLoader
data.DataLoader_class = DataLoader

local LOADER_OPTS = { dataset = true, batch_size = true, shuffle = true, seed = true, drop_last = true,
  transform = true, rank = true, world_size = true }

-- DataLoader{dataset =, batch_size = 1, shuffle = false, seed = 0, drop_last = false,
-- transform = nil, rank = 0, world_size = 1}. transform(batch) may change the batch table
-- in place or return a new one.
function data.DataLoader(opts)
  local op = 'DataLoader'
  check_options(op, opts, LOADER_OPTS)
  local ds = opts.dataset
  if type(ds) ~= 'table' or type(ds.size) ~= 'function' or
    (type(ds.get_batch) ~= 'function' and type(ds.get) ~= 'function') then
    throw('DataLoader: dataset must be a table with size() and get_batch(ids) or get(i), got ' .. describe(ds))
  end
  local self = setmetatable({
    dataset = ds,
    batch_size = need_int(op, 'batch_size', opts.batch_size or 1, 1),
    shuffle = opts.shuffle ~= nil and need_bool(op, 'shuffle', opts.shuffle) or false,
    seed = need_int(op, 'seed', opts.seed or 0, 0),
    drop_last = opts.drop_last ~= nil and need_bool(op, 'drop_last', opts.drop_last) or false,
    rank = need_int(op, 'rank', opts.rank or 0, 0),
    world_size = need_int(op, 'world_size', opts.world_size or 1, 1),
    transform = opts.transform,
    _epoch = 0, _position = 0,
  }, DataLoader)
  if self.transform ~= nil and type(self.transform) ~= 'function' then
    throw('DataLoader: transform must be a function(batch), got ' .. describe(self.transform))
  end
  if self.rank >= self.world_size then
    throw(string.format('DataLoader: rank %d out of range for world_size %d (ranks count from 0)', self.rank,
      self.world_size))
  end
  return self
end

-- Samples this rank delivers per epoch.
function DataLoader:num_samples()
  return math.floor(self.dataset:size() / self.world_size)
end

function DataLoader:num_batches()
  local m = self:num_samples()
  return self.drop_last and math.floor(m / self.batch_size) or math.ceil(m / self.batch_size)
end

-- The sample ids (1-based int64) of epoch e for this rank, in delivery order: the runtime's
-- epoch plan (em_data_epoch_plan), the one rule every ember loader follows.
function DataLoader:plan(e)
  return new_tensor(C.em_data_epoch_plan(box, self.dataset:size(), self.seed, e, self.shuffle and 1 or 0, self.rank,
    self.world_size, 0, 1))
end

-- Epoch e + 1's plan is made on a runtime thread while epoch e is delivered.
function DataLoader:plan_ahead(e)
  I.check(C.em_data_epoch_plan_ahead(self.dataset:size(), self.seed, e, self.shuffle and 1 or 0, self.rank,
    self.world_size, 0, 1))
end

local function stack_samples(ds, ids, rng_of)
  local samples, names = {}, nil
  for i = 1, ids.shape[1] do
    local id = ids[i]:item()
    samples[i] = ds:get(id, rng_of(id))
    names = names or samples[i]
  end
  local batch = {}
  for name in pairs(names or {}) do
    local list = {}
    for i = 1, #samples do list[i] = samples[i][name] end
    batch[name] = ember.stack(list, 1)
  end
  return batch
end

function DataLoader:epoch(e)
  need_int('DataLoader:epoch', 'the epoch', e, 0)
  local ids = self:plan(e)
  self:plan_ahead(e + 1)
  local m = ids.shape[1]
  local pos = 0
  if self._resume and self._resume.epoch == e then pos = self._resume.position end
  self._resume = nil
  self._epoch, self._position = e, pos
  local bs, ds = self.batch_size, self.dataset
  -- each sample's generator, keyed by (seed, e, id) as in the reader loader's processes
  local sample_rng = require('ember.data.source').sample_rng
  local seed = self.seed
  local function rng_of(id) return sample_rng(seed, e, id) end
  return function()
    local take = math.min(bs, m - pos)
    if take <= 0 or (take < bs and self.drop_last) then
      if self._epoch == e then self._epoch, self._position = e + 1, 0 end
      return nil
    end
    local bids = ids:narrow(1, pos + 1, take)
    local batch = ds.get_batch and ds:get_batch(bids, rng_of) or stack_samples(ds, bids, rng_of)
    batch.ids = bids
    if self.transform then batch = self.transform(batch) or batch end
    pos = pos + take
    if pos >= m or (self.drop_last and m - pos < bs) then
      self._epoch, self._position = e + 1, 0   -- the epoch is complete
    else
      self._position = pos
    end
    return batch
  end
end

function DataLoader:state()
  return { seed = self.seed, epoch = self._epoch, position = self._position, num_samples = self:num_samples() }
end

function DataLoader:load_state(s)
  if type(s) ~= 'table' then throw('DataLoader:load_state: expected a table from state(), got ' .. describe(s)) end
  need_int('DataLoader:load_state', 'seed', s.seed, 0)
  need_int('DataLoader:load_state', 'epoch', s.epoch, 0)
  need_int('DataLoader:load_state', 'position', s.position, 0)
  if s.num_samples ~= nil and s.num_samples ~= self:num_samples() then
    throw(string.format('DataLoader:load_state: the state was saved for %d samples per epoch, this loader has %d',
      s.num_samples, self:num_samples()))
  end
  if s.position > self:num_samples() then
    throw(string.format('DataLoader:load_state: position %d is past the end of the epoch (%d samples)', s.position,
      self:num_samples()))
  end
  self.seed = s.seed
  self._epoch, self._position = s.epoch, s.position
  self._resume = { epoch = s.epoch, position = s.position }
end

function DataLoader:close() end

-- Old names, kept working: each warns once on stderr, then stands for its new name.
local DEPRECATED = { Loader = 'ReaderLoader', Loader_class = 'ReaderLoader_class' }
local warned = {}

-- The reader processes (lua/ember/data/readers.lua): data.ReaderLoader, data.transforms,
-- data.source, the file formats (data.npy, data.jpeg, data.tfrecord), loaded on first use.
setmetatable(data, { __index = function(_, k)
  local new = DEPRECATED[k]
  if new then
    if not warned[k] then
      warned[k] = true
      io.stderr:write(string.format('ember: data.%s is deprecated; use data.%s\n', k, new))
    end
    k = new
  end
  return require('ember.data.readers')[k]
end })

return data
