-- ember.pipeline.checkpoint: training checkpoints in a directory.
--
--   checkpoint.save(dir, epoch, {model = sd, optim = osd, state = {...}}, {keep = 2})
--   local path = checkpoint.latest(dir)            -- nil when there is none
--   local parts = checkpoint.load(path)            -- {model =, optim =, state =}
--
-- One safetensors file per epoch (dir/epoch-0003.safetensors), readable by PyTorch and the
-- Hugging Face tools: tensors named model/<name> and optim/<path>, plus metadata entries
-- holding JSON: `state` (epoch, step, generator and loader state, metrics...) and
-- `optim` (the optimizer's state with its tensors replaced by {"tensor": name}). ember.save
-- writes a temporary file and renames it, so a checkpoint is whole or absent; then the file
-- `latest`, which names the newest checkpoint, is replaced the same way. Resuming reads
-- `latest`, never "the highest number in the directory", so files left by an older, longer
-- run in the same directory are never picked up by mistake.
--
-- Model-parallel runs (tables sharded over the ranks) keep one file per rank instead
-- (epoch-0003.rank1-of-2.safetensors: that rank's tables, the replicated layers, its
-- optimizer and loader state), written by every rank; once all are written, rank 0 writes
-- the manifest epoch-0003.shards (the files, their sizes) and points `latest` at it. A
-- manifest is loaded by a run with the same number of ranks, each rank reading its own
-- file; another number of ranks is refused with both numbers named.
--   checkpoint.save_shard(dir, epoch, rank, world, parts)   -- every rank
--   checkpoint.commit_shards(dir, epoch, world, {keep = 2}) -- rank 0, after a barrier
--   checkpoint.load(path, {rank = r, world = w})
local ffi = require 'ffi'
local libc = require 'ember.util.libc'
local json = require 'ember.util.json'

local M = {}

-- mkdir -p; raises with the path and the reason.
M.mkdirs = libc.mkdirs

-- Writes text to path atomically and durably (em_file_replace: a temporary file, fsync'ed
-- and renamed over it).
function M.write_atomic(path, text)
  local C = require('ember').C
  if C.em_file_replace(path, text, #text) ~= 0 then error(ffi.string(C.em_last_error()), 0) end
end

-- Splits a nested table into tensors (name -> tensor) and a JSON-able skeleton.
local function flatten(x, prefix, tensors, is_tensor)
  if is_tensor(x) then
    tensors[prefix] = x
    return { tensor = prefix }
  end
  if type(x) ~= 'table' then return x end
  local out = {}
  for k, v in pairs(x) do
    local key = type(k) == 'number' and ('#' .. k) or k   -- keep number keys apart from strings
    out[key] = flatten(v, prefix .. '/' .. tostring(k), tensors, is_tensor)
  end
  return out
end

local function unflatten(x, tensors)
  if type(x) ~= 'table' then return x end
  if x.tensor ~= nil and next(x, next(x)) == nil and type(x.tensor) == 'string' then
    local t = tensors[x.tensor]
    if not t then error('checkpoint: the tensor ' .. x.tensor .. ' is missing from the file', 0) end
    return t
  end
  local out = {}
  for k, v in pairs(x) do
    local n = type(k) == 'string' and k:match('^#(%-?%d+)$')
    out[n and tonumber(n) or k] = unflatten(v, tensors)
  end
  return out
end

function M.file_name(epoch) return string.format('epoch-%04d.safetensors', epoch) end
function M.shard_name(epoch, rank, world)
  return string.format('epoch-%04d.rank%d-of-%d.safetensors', epoch, rank, world)
end
function M.manifest_name(epoch) return string.format('epoch-%04d.shards', epoch) end

local function write_file(path, parts)
  local ember = require 'ember'
  local tensors = {}
  for name, t in pairs(parts.model or {}) do tensors['model/' .. name] = t end
  local optim_skeleton = flatten(parts.optim or {}, 'optim', tensors, ember.is_tensor)
  ember.save(path, tensors, { metadata = {
    format = 'ember-checkpoint/1',
    state = json.encode(parts.state or {}),
    optim = json.encode(optim_skeleton),
  } })
end

-- keep > 0: the newest `keep` epochs stay; older files (whole or sharded) go
local function prune(dir, epoch, keep, world)
  if not keep or keep <= 0 then return end
  for e = epoch - keep, 1, -1 do
    local gone = libc.unlink(dir .. '/' .. M.file_name(e))
    if world then
      gone = libc.unlink(dir .. '/' .. M.manifest_name(e)) or gone
      for r = 0, world - 1 do gone = libc.unlink(dir .. '/' .. M.shard_name(e, r, world)) or gone end
    end
    if not gone then break end   -- older ones were pruned before
  end
end

-- save(dir, epoch, parts, opts): parts.model (name -> tensor), parts.optim (nested table
-- with tensors), parts.state (JSON-able). opts.keep > 0 keeps only the newest `keep` files.
function M.save(dir, epoch, parts, opts)
  M.mkdirs(dir)
  local name = M.file_name(epoch)
  write_file(dir .. '/' .. name, parts)
  M.write_atomic(dir .. '/latest', name .. '\n')
  prune(dir, epoch, opts and opts.keep)
  return dir .. '/' .. name
end

-- save_shard(dir, epoch, rank, world, parts): this rank's file of a sharded checkpoint
-- (parts as for save; state gets the rank and the world size).
function M.save_shard(dir, epoch, rank, world, parts)
  M.mkdirs(dir)
  parts.state = parts.state or {}
  parts.state.shard = { rank = rank, world = world }
  local path = dir .. '/' .. M.shard_name(epoch, rank, world)
  write_file(path, parts)
  return path
end

-- commit_shards(dir, epoch, world, opts): rank 0, once every rank's save_shard returned:
-- the manifest (each file and its size, checked on load), then `latest`.
function M.commit_shards(dir, epoch, world, opts)
  local files = {}
  for r = 0, world - 1 do
    local name = M.shard_name(epoch, r, world)
    local info = libc.file_info(dir .. '/' .. name)
    local size = info and info.size
    if not size then error(string.format("checkpoint: rank %d's file '%s/%s' is missing", r, dir, name), 0) end
    files[r + 1] = { name = name, bytes = size }
  end
  local manifest = M.manifest_name(epoch)
  M.write_atomic(dir .. '/' .. manifest, json.encode({ format = 'ember-sharded-checkpoint/1', epoch = epoch,
    world = world, files = files }) .. '\n')
  M.write_atomic(dir .. '/latest', manifest .. '\n')
  prune(dir, epoch, opts and opts.keep, world)
  return dir .. '/' .. manifest
end

-- The newest checkpoint's path in dir (from `latest`), or nil when there is none.
function M.latest(dir)
  local f = io.open(dir .. '/latest', 'r')
  if not f then return nil end
  local name = (f:read('*l') or ''):match('^%s*(.-)%s*$')
  f:close()
  if name == '' or name:find('/') then
    error(string.format("checkpoint: '%s/latest' does not name a checkpoint file (it holds '%s')", dir, name), 0)
  end
  local path = dir .. '/' .. name
  local g = io.open(path, 'rb')
  if not g then error(string.format("checkpoint: '%s/latest' names '%s', which does not exist", dir, name), 0) end
  g:close()
  return path
end

-- load(path [, {rank =, world =}]): a checkpoint file, or for a manifest (.shards) the
-- file of this rank, which must belong to a run of the same world size.
function M.load(path, shard)
  local ember = require 'ember'
  if path:match('%.shards$') then
    local f = io.open(path, 'r')
    if not f then error(string.format("checkpoint: cannot read '%s'", path), 0) end
    local text = f:read('*a')
    f:close()
    local ok, m = pcall(json.decode, text)
    if not ok or type(m) ~= 'table' or m.format ~= 'ember-sharded-checkpoint/1' or type(m.files) ~= 'table' or
        type(m.world) ~= 'number' or #m.files ~= m.world then
      error(string.format("checkpoint: '%s' is not a manifest of a sharded checkpoint", path), 0)
    end
    local rank, world = shard and shard.rank or 0, shard and shard.world or 1
    if world ~= m.world then
      error(string.format("checkpoint: '%s' holds model-parallel tables sharded over %d ranks; this run has %d: " ..
        'resume it with %d ranks', path, m.world, world, m.world), 0)
    end
    local dir = path:match('^(.*)/[^/]*$') or '.'
    local entry = m.files[rank + 1]
    local file = dir .. '/' .. tostring(entry.name)
    local info = libc.file_info(file)
    local size = info and info.size
    if size ~= entry.bytes then
      error(string.format("checkpoint: rank %d's file '%s' %s (the manifest says %s bytes)", rank, file,
        size and ('has ' .. size .. ' bytes') or 'is missing', tostring(entry.bytes)), 0)
    end
    path = file
  end
  local tensors, meta = ember.load(path)
  if meta.format ~= 'ember-checkpoint/1' then
    error(string.format("checkpoint: '%s' is not an ember training checkpoint (format '%s')", path,
      tostring(meta.format)), 0)
  end
  local model = {}
  for name, t in pairs(tensors) do
    local m = name:match('^model/(.*)$')
    if m then model[m] = t end
  end
  return { model = model, optim = unflatten(json.decode(meta.optim or '{}'), tensors),
    state = json.decode(meta.state or '{}'), path = path }
end

return M
