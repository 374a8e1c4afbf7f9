-- ember.data.yaml: the reader loader's keys in a pipeline file's `data:` section, and the
-- loader a train job gets from them.
--
--   data:
--     dataset: fashion-mnist        # or source: path/to/dataset.lua | {format: npy, x:, y:}
--     batch_size: 128
--     workers: 2                    # reader processes on this host (0: in this process)
--     prefetch: 8                   # batches leased or waiting at once
--     transforms:                   # in C, on every sample, keyed by (seed, epoch, id)
--       - random_crop: {size: 28, padding: 2}
--       - flip: 0.5
--     endpoint: tcp://127.0.0.1:5555   # readers started by hand connect here
--     on_bad_record: skip           # or error (default)
--
-- A file without workers, source, transforms or endpoint keeps the in-process DataLoader.
-- The same file starts readers on other hosts: `ember reader --connect tcp://HOST:5555
-- pipeline.yaml` reads the data: section with that host's paths.
local S = require 'ember.util.schema'

local M = {}

local function source_check(v)
  local ok, err = pcall(function()
    local source = require 'ember.data.source'
    if type(v) == 'string' then
      if not v:match('%.lua$') then
        error("expected a .lua dataset file or a {format: ...} mapping, got '" .. v .. "'", 0)
      end
    else
      source.normalise(v, nil, nil)
    end
  end)
  if not ok then return tostring(err):gsub('^[^:]*:%d+: ', '') end
  return nil
end

local function transforms_check(v)
  local ok, err = pcall(function() require('ember.data.source').augment(v) end)
  if not ok then return tostring(err):gsub('^[^:]*:%d+: ', '') end
  return nil
end

M.fields = {
  source = S.any { optional = true, check = source_check,
    doc = 'a dataset .lua file or a format mapping ({format: idx|npy|tfrecord|jpeg, ...}); default: dataset' },
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
  return d and ((d.workers or 0) > 0 or d.source ~= nil or d.transforms ~= nil or d.endpoint ~= nil)
end

local ROOTS = { ['fashion-mnist'] = '/usr/share/datasets/fashion-mnist' }

-- The dataset spec of a data section (the trainer's and the readers' agree by construction).
function M.spec_of(d, cfg)
  local source = require 'ember.data.source'
  d = d or {}
  local transforms = d.transforms and { unpack(d.transforms) } or {}
  local dataset, options = d.source, nil
  if dataset == nil then
    dataset = d.dataset or 'fashion-mnist'
    options = { root = d.root or ROOTS[dataset], limit = d.limit }
    local norm = d.normalise
    if norm ~= nil and norm ~= false then   -- the DataLoader's `normalise`, as a transform
      local has = false
      for _, t in ipairs(transforms) do has = has or (type(t) == 'table' and (t.normalise or t.normalize)) end
      if not has then
        transforms[#transforms + 1] = { normalise = norm == true and true or { mean = norm.mean, std = norm.std } }
      end
    end
  end
  return source.normalise(dataset, options, #transforms > 0 and transforms or nil)
end

local function read_keys(path) return require('ember.data.worker').read_keys(path) end

-- The train job's loader for a data section that wants the pipeline.
function M.train_loader(cfg, rank, world_size)
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
    shared_memory = d.shared_memory, curve = curve,
  }
  if d.endpoint and rank == 0 then   -- where `ember reader --connect` should point (ports resolved)
    io.stderr:write('data: readers connect to ', (loader:endpoint():gsub('^ipc://[^,]*,?', '')), '\n')
  end
  return loader
end

return M
