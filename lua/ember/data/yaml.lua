-- ember.data.yaml: the reader loader's keys in a pipeline file's `data:` section, and the
-- loader a train job gets from them.
--
--   data:
--     dataset: fashion-mnist        # or source: path/to/dataset.lua | {format: npy, x:, y:}
--     test: {format: npy, x: test_x.npy, y: test_y.npy}   # the same forms; val: too
--     split: {train: 0.8, val: 0.1, test: 0.1}   # or parts of one source, drawn by seed
--     batch_size: 128
--     workers: 2                    # reader processes on this host (0: in this process)
--     prefetch: 8                   # batches leased or waiting at once
--     transforms:                   # in C, on every sample, keyed by (seed, epoch, id)
--       - random_crop: {size: 28, padding: 2}
--       - flip: 0.5
--     endpoint: tcp://127.0.0.1:5555   # readers started by hand connect here
--     on_bad_record: skip           # or error (default)
--     source_options: {file: x.tsv} # what a Lua dataset file returning function(options) gets
--
-- A source is a built-in name (fashion-mnist, mnist: their training files for source, their
-- t10k files for val and test), a .lua dataset file, or a format mapping; relative paths
-- in it are found from the pipeline file's folder. The test set is data.test, else the
-- split's test part, else (only when no source is named) the built-in dataset's test files;
-- without one, nothing is evaluated on a test set. Evaluation reads in this process, with
-- the training transforms that are not random (random_crop becomes center_crop).
-- A file without workers, source, split, transforms or endpoint keeps the in-process
-- DataLoader.
-- The same file starts readers on other hosts: `ember reader --connect tcp://HOST:5555
-- pipeline.yaml` reads the data: section with that host's paths.
local S = require 'ember.util.schema'

local M = {}

local BUILTIN = { ['fashion-mnist'] = true, mnist = true }
M.BUILTIN = BUILTIN

-- Relative file paths of a source spec, as seen from the pipeline file's folder.
local PATH_KEYS = { x = true, y = true, images = true, labels = false, root = true, files = true }
local function resolve_source(v, ctx, path)
  if type(v) == 'string' then
    if BUILTIN[v] then return v end
    return S.resolve(ctx, path, v)
  end
  if type(v) ~= 'table' then return v end
  local out = {}
  for k, x in pairs(v) do
    -- jpeg's labels is a list of numbers, idx's a path
    if (PATH_KEYS[k] or (k == 'labels' and type(x) == 'string')) and type(x) == 'string' then
      out[k] = S.resolve(ctx, path, x)
    elseif k == 'files' and type(x) == 'table' then
      out[k] = {}
      for i, f in ipairs(x) do out[k][i] = type(f) == 'string' and S.resolve(ctx, path, f) or f end
    else
      out[k] = x
    end
  end
  return out
end

local function source_check(v)
  local ok, err = pcall(function()
    local source = require 'ember.data.source'
    if type(v) == 'string' then
      if not v:match('%.lua$') and not BUILTIN[v] then
        error("expected a .lua dataset file or a {format: ...} mapping (or fashion-mnist, mnist), got '" .. v .. "'", 0)
      end
    else
      source.normalise(v, nil, nil)
    end
  end)
  if not ok then return (tostring(err):gsub('^[^:]*:%d+: ', '')) end
  return nil
end

local function source_field(doc)
  return S.any { optional = true, check = source_check, convert = resolve_source, doc = doc }
end

local fraction = S.number { min = 0, max = 1, optional = true }

local function transforms_check(v)
  local ok, err = pcall(function() require('ember.data.source').augment(v) end)
  if not ok then return tostring(err):gsub('^[^:]*:%d+: ', '') end
  return nil
end

M.fields = {
  source = source_field('a dataset .lua file or a format mapping ({format: idx|npy|tfrecord|jpeg, ...}); ' ..
    'default: dataset'),
  val = source_field('the validation set (the same forms as source); evaluated every epoch'),
  test = source_field('the test set (the same forms as source); default: the split\'s test part, or the ' ..
    'built-in test files when no source is named'),
  source_options = S.map(S.any(), { optional = true,
    doc = 'the options a Lua dataset file that returns a function(options) receives (val/test sets too)' }),
  split = S.record({
    train = fraction, val = fraction, test = fraction,
    seed = S.integer { min = 0, optional = true, doc = 'default: data.seed, else the top-level seed' },
  }, { optional = true, doc = 'train/val/test fractions of the one source (the training part: the rest)',
    check = function(v)
      local sum = (v.train or 0) + (v.val or 0) + (v.test or 0)
      if sum > 1 + 1e-9 then return string.format('the fractions add up to %g, expected at most 1', sum) end
      if v.train == 0 then return 'train: 0 leaves nothing to train on' end
    end }),
  transforms = S.list(S.any(), { optional = true, check = transforms_check,
    doc = 'random_crop, center_crop, flip, normalise, grayscale, rgb (ember.data.source)' }),
  workers = S.integer { min = 0, default = 0, doc = 'reader processes started on this host' },
  prefetch = S.integer { min = 1, optional = true,
    doc = 'batches leased or waiting at once (default 2 x worker_queue x workers, at least 8 x workers)' },
  worker_queue = S.integer { min = 1, optional = true,
    doc = 'leases one reader holds at once (default: about 4 MiB of batches, 4 to 16)' },
  order = S.enum({ 'planned', 'arrival' }, { default = 'planned' }),
  timeout = S.number { gt = 0, default = 60, doc = 'seconds to wait for a batch before failing' },
  heartbeat = S.number { gt = 0, default = 0.5 },
  heartbeat_timeout = S.number { gt = 0, default = 5 },
  lease_timeout = S.number { gt = 0, default = 120, doc = 'seconds before an item is leased again elsewhere' },
  on_bad_record = S.enum({ 'error', 'skip' }, { default = 'error' }),
  shared_memory = S.boolean { default = true },
  remainder = S.enum({ 'drop', 'pad' }, { default = 'drop', doc = 'ranks: drop or pad the samples left over' }),
  endpoint = S.union({ S.string { pattern = '^%a+://', expect = 'an endpoint (tcp://127.0.0.1:5555)' },
    S.list(S.string { pattern = '^%a+://', expect = 'an endpoint (tcp://127.0.0.1:5555)' }) },
    { optional = true, expect = 'an endpoint (tcp://127.0.0.1:5555) or a list of them' }),
  curve = S.record({
    server_keys = S.path { optional = true, doc = "the trainer's key file (ember.data.curve_keygen)" },
    server_key = S.string { optional = true, doc = "readers: the trainer's public key (Z85)" },
    reader_keys = S.path { optional = true, doc = "readers: their own key file (default: a new pair)" },
    clients = S.list(S.string(), { optional = true, doc = 'public keys of the readers allowed (default: any)' }),
  }, { optional = true }),
}

-- Adds the keys above to a `data:` record schema (the train job's).
function M.extend_schema(record)
  return S.extend(record, M.fields)
end

-- Whether a data section asks for the pipeline (else the in-process DataLoader serves).
function M.wants_pipeline(d)
  return d and ((d.workers or 0) > 0 or d.source ~= nil or d.transforms ~= nil or d.endpoint ~= nil or
    d.split ~= nil)
end

local ROOTS = { ['fashion-mnist'] = '/usr/share/datasets/fashion-mnist' }

-- Transforms for evaluation: the deterministic ones (random_crop becomes center_crop of the
-- same size; flip is dropped).
function M.eval_transforms(list)
  if not list then return nil end
  local out = {}
  for _, t in ipairs(list) do
    local name, v = t, nil
    if type(t) == 'table' then name, v = next(t) end
    if name == 'random_crop' then
      out[#out + 1] = { center_crop = type(v) == 'table' and v.size or v }
    elseif name ~= 'flip' then
      out[#out + 1] = t
    end
  end
  return #out > 0 and out or nil
end

-- The dataset spec of a data section (the trainer's and the readers' agree by construction).
-- which: 'train' (default: the source, or the built-in training files), 'val' or 'test'
-- (data.val / data.test, or the built-in test files; for a split part, the source itself);
-- evaluation specs get M.eval_transforms.
function M.spec_of(d, cfg, which)
  local source = require 'ember.data.source'
  d = d or {}
  which = which or 'train'
  local transforms = d.transforms and { unpack(d.transforms) } or {}
  if which ~= 'train' then transforms = M.eval_transforms(transforms) or {} end
  local dataset, options = d.source, nil
  local own = which ~= 'train' and d[which] ~= nil   -- data.val / data.test named
  if own then dataset = d[which] end
  local builtin_name = dataset == nil and (d.dataset or 'fashion-mnist') or
    (type(dataset) == 'string' and BUILTIN[dataset] and dataset)
  if builtin_name then
    -- the training files, unless a val/test set that is not a part of the split
    local train_files = which == 'train' or (not own and d.split ~= nil)
    dataset = builtin_name
    options = { root = builtin_name == (d.dataset or 'fashion-mnist') and d.root or ROOTS[builtin_name],
      limit = train_files and d.limit or d.test_limit, train = train_files }
    local norm = d.normalise
    if norm ~= nil and norm ~= false then   -- the DataLoader's `normalise`, as a transform
      local has = false
      for _, t in ipairs(transforms) do has = has or (type(t) == 'table' and (t.normalise or t.normalize)) end
      if not has then
        transforms[#transforms + 1] = { normalise = norm == true and true or { mean = norm.mean, std = norm.std } }
      end
    end
  end
  if type(dataset) == 'string' and not builtin_name then options = d.source_options end
  return source.normalise(dataset, options, #transforms > 0 and transforms or nil)
end

local function read_keys(path) return require('ember.data.worker').read_keys(path) end

-- The train job's loader for a data section that wants the pipeline; subset: the sample
-- ids of the training part of a split (ReaderLoader's subset).
function M.train_loader(cfg, rank, world_size, subset)
  local d = cfg.data
  local spec = M.spec_of(d, cfg)
  local curve
  if d.curve and d.curve.server_keys then
    local pub, sec = read_keys(d.curve.server_keys)
    curve = { public_key = pub, secret_key = sec, clients = d.curve.clients }
  end
  local data = require('ember').data
  local loader = data.ReaderLoader {
    dataset = spec.dataset, dataset_options = spec.options, transforms = spec.transforms,
    batch_size = d.batch_size, shuffle = d.shuffle, seed = d.seed or cfg.seed, drop_last = d.drop_last,
    rank = rank, world_size = world_size, remainder = d.remainder, num_workers = d.workers, endpoint = d.endpoint,
    prefetch = d.prefetch, worker_queue = d.worker_queue, order = d.order, timeout = d.timeout,
    heartbeat = d.heartbeat, heartbeat_timeout = d.heartbeat_timeout, lease_timeout = d.lease_timeout,
    on_bad_record = d.on_bad_record,
    shared_memory = d.shared_memory, curve = curve, subset = subset,
  }
  if d.endpoint and rank == 0 then   -- where `ember reader --connect` should point (ports resolved)
    io.stderr:write('data: readers connect to ', (loader:endpoint():gsub('^ipc://[^,]*,?', '')), '\n')
  end
  return loader
end

-- A loader over the val or test set (which), read in this process in a fixed order.
function M.eval_loader(cfg, which, subset)
  local d = cfg.data
  local spec = M.spec_of(d, cfg, which)
  return require('ember').data.ReaderLoader {
    dataset = spec.dataset, dataset_options = spec.options, transforms = spec.transforms,
    batch_size = d.test_batch_size, num_workers = 0, on_bad_record = d.on_bad_record, subset = subset,
  }
end

return M
