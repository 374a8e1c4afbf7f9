-- ember.pipeline.datasets: the train, validation and test sets of a train pipeline, and
-- their loaders, from the `data:` section (keys: lua/ember/data/yaml.lua).
--
--   data: {source: data/all.lua, split: {train: 0.8, val: 0.1, test: 0.1}, seed: 3}
--   data: {source: {format: npy, x: x.npy, y: y.npy}, test: {format: npy, x: tx.npy, y: ty.npy}}
--   data: {dataset: fashion-mnist}          # its training files, and its t10k files as test
--
-- A split draws one permutation of the source's samples from its seed (split.seed, else
-- data.seed, else the top-level seed): the first part trains, the next validates, the next
-- tests; a missing train fraction takes the rest. The built-in datasets are opened only when
-- a set names them (or no source is named at all).
local S = require 'ember.util.schema'
local data_yaml = require 'ember.data.yaml'

local M = {}

-- Stream of data.randperm for splits (epoch plans use their own streams).
local SPLIT_STREAM = 0x5917

-- split_ids(n, {train =, val =, test =}, seed) -> {train = ids, val = ids|nil, test = ids|nil},
-- each an int64 tensor of 1-based sample ids (disjoint; together at most n).
function M.split_ids(n, split, seed)
  local ember = require 'ember'
  local n_val = math.floor(n * (split.val or 0))
  local n_test = math.floor(n * (split.test or 0))
  local sum = (split.train or 0) + (split.val or 0) + (split.test or 0)
  local n_train = n - n_val - n_test
  if split.train and math.abs(sum - 1) > 1e-9 then n_train = math.min(n_train, math.floor(n * split.train)) end
  local perm = ember.data.randperm(n, seed, SPLIT_STREAM)
  local out = {}
  local at = 1
  for _, part in ipairs { { 'train', n_train }, { 'val', n_val }, { 'test', n_test } } do
    if part[2] > 0 then out[part[1]] = perm:narrow(1, at, part[2]):contiguous() end
    at = at + part[2]
  end
  return out
end

-- Whether the training data is a built-in dataset (then its t10k files are the default test set).
local function builtin_source(d)
  return d.source == nil or (type(d.source) == 'string' and data_yaml.BUILTIN[d.source] ~= nil)
end

-- plan(cfg, ctx) -> {split = {train =, val =, test =} | nil, val = 'own' | 'split' | nil,
-- test = 'own' | 'split' | 'builtin' | nil}: where each set comes from.
function M.plan(cfg, ctx)
  local d = cfg.data
  local p = {}
  if d.split then
    local source = require 'ember.data.source'
    local spec = data_yaml.spec_of(d, cfg, 'train')
    local n = source.open(spec):size()
    p.split = M.split_ids(n, d.split, d.split.seed or d.seed or cfg.seed)
    if not p.split.train then
      S.fail(ctx, 'data.split', string.format('the training part of the %d samples is empty', n))
    end
  end
  p.val = d.val ~= nil and 'own' or (p.split and p.split.val and 'split') or nil
  p.test = d.test ~= nil and 'own' or (p.split and p.split.test and 'split') or
    (not d.split and builtin_source(d) and 'builtin') or nil
  return p
end

-- The in-process loader of the built-in dataset's test files, as the train job always had
-- (the same numbers as before val/test sets existed).
local function builtin_test_loader(cfg, make_loader)
  local d = cfg.data
  local name = d.dataset or 'fashion-mnist'
  local ctor = name == 'mnist' and 'MNIST' or 'FashionMNIST'
  local ds = require('ember').data.datasets[ctor] { root = d.root, train = false, normalise = d.normalise,
    limit = d.test_limit }
  return make_loader { dataset = ds, batch_size = d.test_batch_size }
end

-- eval_loader(cfg, plan, which, make_loader) -> a loader over the val or test set, or nil.
function M.eval_loader(cfg, plan, which, make_loader)
  local from = plan[which]
  if from == nil then return nil end
  local d = cfg.data
  if from == 'builtin' and d.source == nil and d.transforms == nil then
    return builtin_test_loader(cfg, make_loader)
  end
  return data_yaml.eval_loader(cfg, which, from == 'split' and plan.split[which] or nil)
end

-- The size of a split's training part (nil without a split).
function M.train_subset(plan) return plan.split and plan.split.train end

return M
