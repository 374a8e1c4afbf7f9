-- ember.nn pieces for recommendation models (DLRM): the feature interaction, as
-- F.dot_interaction / F.cat_interaction and the nn.Interaction module. Sparse embedding
-- gradients are options of nn.Embedding / nn.EmbeddingBag ({sparse = true}).
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
function F.dot_interaction(x, rest, opts)
  if is_tensor(rest) then throw('dot_interaction: expected a list of tensors for argument 2, got a tensor') end
  if type(x) == 'table' and not is_tensor(x) then opts, rest = rest, nil end
  I.check_opts('dot_interaction', opts, I.option_set('self_interaction'), 3)
  local list = feature_list('dot_interaction', x, rest)
  local arr = ffi.new('em_tensor *[?]', #list)
  for i, t in ipairs(list) do arr[i - 1] = t end
  return I.new(C.em_nn_dot_interaction(I.box, arr, #list, (opts and opts.self_interaction) and 1 or 0))
end

-- cat_interaction(x, {e1, ...}): [B, D * n], the features side by side ('cat').
function F.cat_interaction(x, rest)
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

return M
