-- ember.pipeline.model: the `model:` section of training pipelines, a list of layer specs
-- turned into an nn.Sequential.
--
--   model:
--     - conv2d: {in: 1, out: 32, kernel: 3, padding: 1}
--     - relu:
--     - max_pool2d: 2
--     - flatten:
--     - linear: [1568, 10]          # [in, out], or {in: 1568, out: 10, bias: false}
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
}

-- The schema of `model:`: a non-empty list of one-key layer mappings.
function M.schema()
  local choices = {}
  for name, layer in pairs(M.layers) do choices[name] = layer.schema end
  return S.list(S.variant(choices), { min_len = 1, expect = 'a list of layers (e.g. - linear: [784, 10])' })
end

-- build(specs) -> nn.Sequential; specs as checked by M.schema().
function M.build(specs)
  local nn = require('ember').nn
  local mods = {}
  for i, spec in ipairs(specs) do mods[i] = M.layers[spec.kind].build(spec.value, nn) end
  return nn.Sequential(mods)
end

return M
