-- ember.data.jagged: variable-length ("jagged") batch fields, as recommendation models read
-- sparse features (DLRM's indices + offsets, TorchRec's KeyedJaggedTensor).
--
-- In a dataset (lua/ember/data/source.lua):
--   get(i, rng) returns {dense = ..., label = ..., sparse = jagged.sample{ids1, ids2, ...}}
--     one part per key (feature): an int64 1-d tensor or a Lua list of integers, any length
--   get_batch(ids, rng_of) returns {sparse = jagged.batch(values, lengths), ...}
--     values int64 [total], sample after sample, key after key; lengths int64 [n, K]
-- The pipeline carries the field as two tensors: its values (jagged: em_tensor_desc.lengths)
-- and NAME.lengths [n, K]; readers, shared memory, skipped records and resume treat them as
-- any other (runtime/data/pipeline). The batch a loader delivers holds
--   batch.sparse = a Keyed table: sparse[k] = {indices_k, offsets_k} for k = 1..K, the
--                  1-based start of each sample's bag (nn.EmbeddingBag(indices, offsets),
--                  examples/dlrm.lua's input); sparse.values and sparse.lengths as carried.
local ffi = require 'ffi'
local ember = require 'ember'
local I = require 'ember.internal'
local C = I.C
local throw, describe = I.throw, I.describe_value

local M = {}

local Sample = { __name = 'jagged.sample' }
local Batch = { __name = 'jagged.batch' }
local Keyed = { __name = 'jagged.keyed' }
Keyed.__index = Keyed
M.Keyed = Keyed

-- sample(parts): one sample's field, K parts of integers.
function M.sample(parts)
  if type(parts) ~= 'table' or #parts == 0 then
    throw('jagged.sample: expected a list of parts (tensors or lists of integers), got ' .. describe(parts))
  end
  return setmetatable({ n = #parts, parts = parts }, Sample)
end
function M.is_sample(v) return getmetatable(v) == Sample end
function M.has_jagged(s)
  for _, v in pairs(s) do if getmetatable(v) == Sample then return true end end
  return false
end

-- batch(values, lengths): a whole batch's field (get_batch).
function M.batch(values, lengths)
  if not ember.is_tensor(values) or not ember.is_tensor(lengths) or lengths.dtype ~= 'int64' or lengths:dim() > 2 then
    throw('jagged.batch: expected values (a tensor) and lengths (int64 [n] or [n, keys])')
  end
  return setmetatable({ values = values, lengths = lengths }, Batch)
end
function M.is_batch(v) return getmetatable(v) == Batch end

-- The number of integers in a part, and a function writing them at ptr.
local function part_len(p)
  if ember.is_tensor(p) then return p:numel() end
  if type(p) == 'table' then return #p end
  throw('jagged.sample: a part must be a tensor or a list of integers, got ' .. describe(p))
end

-- fill(samples, name, keys, values_ptr, lengths_ptr): writes the kept samples' field.
function M.fill(samples, name, keys, vptr, lptr)
  local at = 0
  for i, s in ipairs(samples) do
    local f = s[name]
    if not M.is_sample(f) or f.n ~= keys then
      throw(string.format("sample field '%s': expected jagged.sample of %d parts, got %s", name, keys,
        M.is_sample(f) and (f.n .. ' parts') or describe(f)))
    end
    for k, p in ipairs(f.parts) do
      local len = part_len(p)
      lptr[(i - 1) * keys + k - 1] = len
      if ember.is_tensor(p) then
        local t = p:to('int64'):contiguous()
        ffi.copy(vptr + at, t:data_ptr(), len * 8)
      else
        for j = 1, len do vptr[at + j - 1] = p[j] end
      end
      at = at + len
    end
  end
  return at
end

-- Total values of a field over the samples.
function M.total(samples, name)
  local n = 0
  for _, s in ipairs(samples) do
    local f = s[name]
    if M.is_sample(f) then for _, p in ipairs(f.parts) do n = n + part_len(p) end end
  end
  return n
end

-- keyed(values, lengths): the field as a consumer reads it (see the top of this file).
function M.keyed(values, lengths)
  local keys = lengths:dim() == 2 and lengths.shape[2] or 1
  local vs, os = ffi.new('em_tensor *[?]', keys), ffi.new('em_tensor *[?]', keys)
  I.check(C.em_data_jagged_split(vs, os, values, lengths, 1))
  local self = setmetatable({ values = values, lengths = lengths }, Keyed)
  for k = 0, keys - 1 do self[k + 1] = { I.wrap(vs[k]), I.wrap(os[k]) } end
  return self
end
function M.is_keyed(v) return getmetatable(v) == Keyed end
function Keyed:num_keys() return #self end
function Keyed:num_samples() return self.lengths.shape[1] end

-- batch_fields(batch): replaces each jagged pair (NAME, NAME.lengths) of a delivered batch
-- by one Keyed field NAME; jagged = {[name] = true} names them.
function M.batch_fields(batch, jagged)
  for name in pairs(jagged) do
    local lname = name .. '.lengths'
    batch[name] = M.keyed(batch[name], batch[lname])
    batch[lname] = nil
  end
  return batch
end

return M
