-- ember.pipeline.model: the `model:` section of pipelines, and the one loader of models
-- that training, scripts and serving share. A model is either a list of layer specs turned
-- into an nn.Sequential:
--
--   model:
--     - conv2d: {in: 1, out: 32, kernel: 3, padding: 1}
--     - relu:
--     - max_pool2d: 2
--     - flatten:
--     - linear: [1568, 10]          # [in, out], or {in: 1568, out: 10, bias: false}
--     - module: {class: Linear, args: [10, 10], opts: {bias: false}}   # any ember.nn class
--
-- or a Lua model file with arguments, found relative to the pipeline file:
--
--   model: {file: models/mlp.lua, args: {hidden: 64}}
--
-- where models/mlp.lua returns a function from the args table to an nn.Module:
--
--   local nn = require('ember').nn
--   return function(args) return nn.Sequential{ nn.Linear(4, args.hidden), nn.ReLU(), ... } end
--
-- From Lua: model.build(cfg.model) (a checked `model:` value), model.from_file(path, args).
--
-- Each layer kind is one entry of M.layers: its schema (checked like the rest of the file)
-- and a build function from the checked value to a module. Sizes follow PyTorch's layers
-- of the same names (conv2d weights [out, in / groups, kH, kW], NCHW images).
local S = require 'ember.util.schema'

local M = {}

local pos = S.integer { min = 1 }
-- An int or a pair [h, w]; opts adds default or optional.
local function pair(min, opts)
  local one = S.integer { min = min }
  local o = { expect = string.format('an integer >= %d or a list [h, w] of them', min) }
  for k, v in pairs(opts or {}) do o[k] = v end
  return S.union({ one, S.list(one, { len = 2 }) }, o)
end
local empty = S.record({}, { default = {} })

local function activation(class)
  return { schema = empty, build = function(_, nn) return nn[class]() end }
end

local function dim_layer(class)
  return {
    schema = S.union({ S.integer(), S.record { dim = S.integer { default = -1 } } },
      { default = -1, expect = 'a dim (an integer, 1-based; -1 the last) or {dim:}' }),
    build = function(v, nn) return nn[class](type(v) == 'table' and v.dim or v) end,
  }
end

local function pool(class)
  return {
    schema = S.union({
      pair(1),
      S.record { kernel = pair(1), stride = pair(1, { optional = true }), padding = pair(0, { default = 0 }),
        ceil_mode = S.boolean { default = false } },
    }, { expect = 'a kernel size (an integer or [h, w]) or {kernel:, stride:, padding:}' }),
    build = function(v, nn)
      if type(v) ~= 'table' or v.kernel == nil then v = { kernel = v, padding = 0, ceil_mode = false } end
      return nn[class](v.kernel, { stride = v.stride or v.kernel, padding = v.padding, ceil_mode = v.ceil_mode })
    end,
  }
end

-- batch_norm2d: 32 (the channel count) or {features: 32, eps:, momentum:}
local function batch_norm(class)
  return {
    schema = S.union({ pos, S.record { features = pos, eps = S.number { gt = 0, default = 1e-5 },
      momentum = S.number { min = 0, max = 1, default = 0.1 } } },
      { expect = 'a feature count or {features:, eps:, momentum:}' }),
    build = function(v, nn)
      if type(v) == 'number' then return nn[class](v) end
      return nn[class](v.features, { eps = v.eps, momentum = v.momentum })
    end,
  }
end

M.layers = {
  linear = {
    schema = S.union({
      S.list(pos, { len = 2 }),
      S.record { ['in'] = pos, out = pos, bias = S.boolean { default = true } },
    }, { expect = 'a list [in, out] or {in:, out:, bias:}' }),
    build = function(v, nn)
      if v[1] then return nn.Linear(v[1], v[2]) end
      return nn.Linear(v['in'], v.out, { bias = v.bias })
    end,
  },
  conv2d = {
    schema = S.record {
      ['in'] = pos, out = pos, kernel = pair(1), stride = pair(1, { default = 1 }),
      padding = pair(0, { default = 0 }), dilation = pair(1, { default = 1 }),
      groups = S.integer { min = 1, default = 1 }, bias = S.boolean { default = true },
    },
    build = function(v, nn)
      return nn.Conv2d(v['in'], v.out, v.kernel, { stride = v.stride, padding = v.padding, dilation = v.dilation,
        groups = v.groups, bias = v.bias })
    end,
  },
  max_pool2d = pool('MaxPool2d'),
  avg_pool2d = pool('AvgPool2d'),
  adaptive_avg_pool2d = {
    schema = pair(1),
    build = function(v, nn) return nn.AdaptiveAvgPool2d(v) end,
  },
  batch_norm1d = batch_norm('BatchNorm1d'),
  batch_norm2d = batch_norm('BatchNorm2d'),
  layer_norm = {
    schema = S.union({ pos, S.list(pos, { min_len = 1 }) },
      { expect = 'a size or a list of sizes (the normalised shape)' }),
    build = function(v, nn) return nn.LayerNorm(v) end,
  },
  dropout = {
    schema = S.union({ S.number { min = 0, lt = 1 }, S.record { p = S.number { min = 0, lt = 1, default = 0.5 } } },
      { default = 0.5, expect = 'a probability in [0, 1) or {p:}' }),
    build = function(v, nn) return nn.Dropout(type(v) == 'table' and v.p or v) end,
  },
  flatten = {
    schema = S.record({ start_dim = S.integer { default = 2 }, end_dim = S.integer { default = -1 } },
      { default = {} }),
    build = function(v, nn) return nn.Flatten(v.start_dim, v.end_dim) end,
  },
  relu = activation('ReLU'),
  gelu = activation('GELU'),
  silu = activation('SiLU'),
  tanh = activation('Tanh'),
  sigmoid = activation('Sigmoid'),
  identity = activation('Identity'),
  -- softmax: 2 (the dim, 1-based), default -1
  softmax = dim_layer('Softmax'),
  log_softmax = dim_layer('LogSoftmax'),
  -- embedding: [num, dim] or {num:, dim:, padding_idx:} (a 1-based row kept at zero)
  embedding = {
    schema = S.union({
      S.list(pos, { len = 2 }),
      S.record { num = pos, dim = pos, padding_idx = S.integer { optional = true } },
    }, { expect = 'a list [num, dim] or {num:, dim:, padding_idx:}' }),
    build = function(v, nn)
      if v[1] then return nn.Embedding(v[1], v[2]) end
      return nn.Embedding(v.num, v.dim, { padding_idx = v.padding_idx })
    end,
  },
  -- embedding_bag: [num, dim] or {num:, dim:, mode: mean | sum | max}; input [B, L] indices
  embedding_bag = {
    schema = S.union({
      S.list(pos, { len = 2 }),
      S.record { num = pos, dim = pos, mode = S.enum({ 'mean', 'sum', 'max' }, { default = 'mean' }) },
    }, { expect = 'a list [num, dim] or {num:, dim:, mode:}' }),
    build = function(v, nn)
      if v[1] then return nn.EmbeddingBag(v[1], v[2]) end
      return nn.EmbeddingBag(v.num, v.dim, { mode = v.mode })
    end,
  },
  -- module: {class: Conv2d, args: [1, 8, 3], opts: {padding: 1}}: any class of ember.nn,
  -- called as nn[class](args..., opts)
  module = {
    schema = S.record {
      class = S.string { check = function(v)
        local nn = require('ember').nn
        if not nn.is_module or type(nn[v]) ~= 'table' or not v:match('^%u') then
          return string.format("expected the name of an ember.nn module class (Linear, Conv2d, ...), got '%s'", v)
        end
      end },
      args = S.list(S.any(), { default = {} }),
      opts = S.map(S.any(), { optional = true }),
    },
    build = function(v, nn)
      local args = { unpack(v.args) }
      if v.opts then args[#args + 1] = v.opts end
      return nn[v.class](unpack(args, 1, #v.args + (v.opts and 1 or 0)))
    end,
  },
}

-- The schema of `model:`: a non-empty list of one-key layer mappings, or {file:, args:}.
function M.schema()
  local choices = {}
  for name, layer in pairs(M.layers) do choices[name] = layer.schema end
  local layers = S.list(S.variant(choices), { min_len = 1, expect = 'a list of layers (e.g. - linear: [784, 10])' })
  local file = S.record {
    file = S.path { exists = 'file', relative = true, doc = 'a Lua file returning a function(args) -> nn.Module' },
    args = S.map(S.any(), { default = {} }),
  }
  return S.union({ layers, file },
    { expect = 'a list of layers (e.g. - linear: [784, 10]) or {file: model.lua, args: {...}}' })
end

local function fail(msg) error(msg, 0) end

-- from_file(path [, args]) -> the nn.Module the file's function returns for args.
function M.from_file(path, args)
  local nn = require('ember').nn
  local chunk, err = loadfile(path)
  if not chunk then fail(string.format("model file '%s': %s", path, err)) end
  local ok, fn = pcall(chunk)
  if not ok then fail(string.format("model file '%s': %s", path, tostring(fn))) end
  if type(fn) ~= 'function' then
    fail(string.format("model file '%s': expected it to return a function(args) -> nn.Module, got a %s", path,
      type(fn)))
  end
  local model
  ok, model = pcall(fn, args or {})
  if not ok then fail(string.format("model file '%s': building the model: %s", path, tostring(model))) end
  if not nn.is_module(model) then
    fail(string.format("model file '%s': the function returned a %s, expected an nn.Module", path, type(model)))
  end
  return model
end

-- build(spec) -> nn.Module; spec as checked by M.schema(): a layer list or {file =, args =}.
function M.build(spec)
  if spec.file then return M.from_file(spec.file, spec.args) end
  local nn = require('ember').nn
  local mods = {}
  for i, layer in ipairs(spec) do mods[i] = M.layers[layer.kind].build(layer.value, nn) end
  return nn.Sequential(mods)
end
M.load = M.build

return M
