-- ember.nn pieces for recommendation models (DLRM): the feature interaction, as
-- F.dot_interaction / F.cat_interaction and the nn.Interaction module. Sparse embedding
-- gradients are options of nn.Embedding / nn.EmbeddingBag ({sparse = true});
-- nn.TableBatchedEmbeddingBags holds many tables in one weight and looks them all up at once.
--
--   local inter = nn.Interaction{op = 'dot'}          -- DLRM's arch_interaction_op
--   local z = inter(bottom, {pooled1, pooled2, ...})  -- [B, D + n(n-1)/2], n = 1 + #pooled
local ffi = require 'ffi'
local ember = require 'ember'
local I = require 'ember.internal'
local C = I.C
local throw, describe, is_tensor = I.throw, I.describe, I.is_tensor
local F = require 'ember.nn.functional'
local Module = require('ember.nn.module').Module

local M = {}

-- The list {x, e1, e2, ...} from (x, {e1, e2, ...}) or ({x, e1, ...}).
local function feature_list(op, x, rest)
  local list = {}
  if is_tensor(x) then
    list[1] = x
    if rest ~= nil and type(rest) ~= 'table' then
      throw(string.format('%s: expected a list of tensors for argument 2, got %s', op, describe(rest)))
    end
    for i, t in ipairs(rest or {}) do list[i + 1] = t end
  elseif type(x) == 'table' then
    for i, t in ipairs(x) do list[i] = t end
  else
    throw(string.format('%s: expected a tensor and a list of tensors, got %s', op, describe(x)))
  end
  for i, t in ipairs(list) do
    if not is_tensor(t) then throw(string.format('%s: feature %d is %s, expected a tensor', op, i, describe(t))) end
  end
  if #list == 0 then throw(op .. ': expected at least one feature tensor') end
  return list
end

-- dot_interaction(x, {e1, ..., ek} [, {self_interaction = false}]) or
-- dot_interaction({x, e1, ..., ek} [, opts]): x and each e [B, D] -> [B, D + P]: x, then
-- the dot products of every pair (i, j), j < i, of the n = k + 1 features (i ascending,
-- then j), P = n(n-1)/2; with self_interaction also j = i. As dlrm_s_pytorch.py's
-- interact_features with arch_interaction_op = 'dot'; one fused kernel each way.
-- rest may also be one [T, B, D] tensor (T features stacked, e.g. TableBatchedEmbeddingBags'
-- output): read in place, no [B, D] slices made, its gradient one [T, B, D] tensor.
function F.dot_interaction(x, rest, opts)
  if is_tensor(rest) then
    if rest:dim() ~= 3 then
      throw(string.format('dot_interaction: argument 2 must be a list of [B, D] tensors or one [T, B, D] tensor, ' ..
        'got a %d-d tensor', rest:dim()))
    end
    rest = { rest }
  end
  if type(x) == 'table' and not is_tensor(x) then opts, rest = rest, nil end
  I.check_opts('dot_interaction', opts, I.option_set('self_interaction'), 3)
  local list = feature_list('dot_interaction', x, rest)
  local arr = ffi.new('em_tensor *[?]', #list)
  for i, t in ipairs(list) do arr[i - 1] = t end
  return I.new(C.em_nn_dot_interaction(I.box, arr, #list, (opts and opts.self_interaction) and 1 or 0))
end

-- cat_interaction(x, {e1, ...}): [B, D * n], the features side by side ('cat').
function F.cat_interaction(x, rest)
  if is_tensor(rest) and rest:dim() == 3 then   -- [T, B, D]: its T slices
    local parts = {}
    for t = 1, rest.shape[1] do parts[t] = rest[t] end
    rest = parts
  end
  local list = feature_list('cat_interaction', x, rest)
  return ember.cat(list, 2)
end

-- Interaction{op = 'dot' | 'cat', self_interaction = false}; forward(x, {e1, ...}).
local Interaction = Module:extend('Interaction')
M.Interaction = Interaction
function Interaction:init(opts)
  I.check_opts('Interaction', opts, I.option_set('op', 'self_interaction'), 1)
  opts = opts or {}
  self.op = opts.op or 'dot'
  if self.op ~= 'dot' and self.op ~= 'cat' then
    throw(string.format("Interaction: op must be 'dot' or 'cat', got %s", describe(self.op)))
  end
  self.self_interaction = opts.self_interaction or false
end
function Interaction:forward(x, rest)
  if self.op == 'cat' then return F.cat_interaction(x, rest) end
  return F.dot_interaction(x, rest, { self_interaction = self.self_interaction })
end
function Interaction:extra_repr()
  return string.format("op='%s'%s", self.op, self.self_interaction and ', self_interaction=true' or '')
end

-- TableBatchedEmbeddingBags(table_sizes, dim [, {mode = 'sum', sparse = true, init, init_fills}]):
-- the tables one after another in one weight [sum of rows, dim] (FBGEMM's table-batched
-- layout), looked up in one call: forward(sparse), one {indices, offsets} or [B, L] per
-- table as nn.EmbeddingBag takes them, returns [T, B, dim] (table t's pooled bags at [t]),
-- which F.dot_interaction reads as it is. One graph node, one row-sparse gradient and one
-- optimizer update per step instead of T of each; the same numbers as T nn.EmbeddingBag
-- (the per-row optimizers see the same rows). Initialisation draws as T nn.EmbeddingBag
-- would (a normal fill of each table, then init(view, t) under no_grad on each table's view),
-- so the same seed gives the same tables. table(t): the view of table t's rows.
local TBE = Module:extend('TableBatchedEmbeddingBags')
M.TableBatchedEmbeddingBags = TBE
local TBE_OPTS = I.option_set('mode', 'sparse', 'init', 'dtype')
local BAG_MODES = { sum = C.EM_BAG_SUM, mean = C.EM_BAG_MEAN, max = C.EM_BAG_MAX }
function TBE:init(sizes, dim, opts)
  I.check_opts('TableBatchedEmbeddingBags', opts, TBE_OPTS, 3)
  opts = opts or {}
  if type(sizes) ~= 'table' or #sizes == 0 then
    throw('TableBatchedEmbeddingBags: expected a non-empty list of table sizes, got ' .. describe(sizes))
  end
  if type(dim) ~= 'number' or dim < 1 or dim ~= math.floor(dim) then
    throw('TableBatchedEmbeddingBags: dim must be a positive integer, got ' .. describe(dim))
  end
  local mode = opts.mode or 'sum'
  if not BAG_MODES[mode] then
    throw(string.format("TableBatchedEmbeddingBags: mode must be 'sum', 'mean' or 'max', got %s", describe(mode)))
  end
  local rows, base, total = ffi.new('int64_t[?]', #sizes), {}, 0
  for t, n in ipairs(sizes) do
    if type(n) ~= 'number' or n < 1 or n ~= math.floor(n) then
      throw(string.format('TableBatchedEmbeddingBags: table %d has %s rows, expected a positive integer', t,
        type(n) == 'number' and tostring(n) or describe(n)))
    end
    rows[t - 1], base[t], total = n, total, total + n
  end
  self.num_tables, self.embedding_dim, self.mode, self.sparse = #sizes, dim, mode, opts.sparse ~= false
  self.sizes, self._rows, self._base = sizes, rows, base
  local w = ember.empty(total, dim, { dtype = opts.dtype })
  ember.no_grad(function()
    for t = 1, #sizes do
      local v = w:narrow(1, base[t] + 1, sizes[t])
      v:normal_(0, 1)   -- as nn.EmbeddingBag's own initialisation draws
      if opts.init then opts.init(v, t) end
    end
  end)
  self.weight = require('ember.nn.module').Parameter(w)
end
function TBE:table(t) return self.weight:narrow(1, self._base[t] + 1, self.sizes[t]) end
function TBE:forward(sparse)
  local T = self.num_tables
  if type(sparse) ~= 'table' or #sparse ~= T then
    throw(string.format('TableBatchedEmbeddingBags: expected %d features (one {indices, offsets} per table), got %s',
      T, type(sparse) == 'table' and tostring(#sparse) or describe(sparse)))
  end
  local idx, off = ffi.new('em_tensor *[?]', T), ffi.new('em_tensor *[?]', T)
  for t = 1, T do
    local f = sparse[t]
    if is_tensor(f) then idx[t - 1] = f
    elseif type(f) == 'table' and is_tensor(f[1]) and is_tensor(f[2]) then idx[t - 1], off[t - 1] = f[1], f[2]
    else
      throw(string.format('TableBatchedEmbeddingBags: table %d: expected {indices, offsets} or a [B, L] tensor, got %s',
        t, describe(f)))
    end
  end
  local out = I.new(C.em_nn_embedding_bags_batched(I.box, self.weight, T, idx, off, self._rows, BAG_MODES[self.mode],
    self.sparse and 1 or 0, 1))
  return out:view(T, out.shape[1] / T, self.embedding_dim)
end
function TBE:extra_repr()
  return string.format("%d tables, %d rows, dim %d, mode='%s'%s", self.num_tables, self.weight.shape[1],
    self.embedding_dim, self.mode, self.sparse and ', sparse=true' or '')
end

return M
