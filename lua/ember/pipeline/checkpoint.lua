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

-- save(dir, epoch, parts, opts): parts.model (name -> tensor), parts.optim (nested table
-- with tensors), parts.state (JSON-able). opts.keep > 0 keeps only the newest `keep` files.
function M.save(dir, epoch, parts, opts)
  local ember = require 'ember'
  M.mkdirs(dir)
  local tensors = {}
  for name, t in pairs(parts.model or {}) do tensors['model/' .. name] = t end
  local optim_skeleton = flatten(parts.optim or {}, 'optim', tensors, ember.is_tensor)
  local name = M.file_name(epoch)
  ember.save(dir .. '/' .. name, tensors, { metadata = {
    format = 'ember-checkpoint/1',
    state = json.encode(parts.state or {}),
    optim = json.encode(optim_skeleton),
  } })
  M.write_atomic(dir .. '/latest', name .. '\n')
  local keep = opts and opts.keep or 0
  if keep > 0 then
    for e = epoch - keep, 1, -1 do
      local old = dir .. '/' .. M.file_name(e)
      if not libc.unlink(old) then break end   -- older ones were pruned before
    end
  end
  return dir .. '/' .. name
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

function M.load(path)
  local ember = require 'ember'
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
