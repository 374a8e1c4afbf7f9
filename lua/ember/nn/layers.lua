-- ember.nn layers: the standard modules, each a small Lua class over nn.functional, with
-- PyTorch's parameter names, shapes and default initialisation (so results and
-- checkpoints are comparable):
--   Linear, Conv2d      weight kaiming_uniform(a = sqrt(5)), i.e. U(+-1/sqrt(fan_in));
--                       bias U(+-1/sqrt(fan_in))
--   Embedding(Bag)      weight N(0, 1) (the padding row zero)
--   BatchNorm, LayerNorm weight 1, bias 0; running_mean 0, running_var 1
-- Sizes, strides and dims follow nn.functional (dims 1-based; sizes a number or {h, w}).
local ember = require 'ember'
local ffi = require 'ffi'
local C = ember.C

-- The layers (Sequential, Linear, ...); nn/init.lua puts them in ember.nn. Reads of names
-- this file does not define (Module, Parameter, is_module) fall back to ember.nn.module.
local nn = setmetatable({}, { __index = require 'ember.nn.module' })
local I = require 'ember.internal'
local throw, describe = I.throw, I.describe
local Module, F, init = nn.Module, require 'ember.nn.functional', require 'ember.nn.initializers'

local function need_size(cls, what, v)
  if type(v) ~= 'number' or v ~= math.floor(v) or v < 0 then
    throw(string.format('%s: %s must be a non-negative integer, got %s', cls, what,
      type(v) == 'number' and tostring(v) or describe(v)))
  end
  return v
end

local function opts_of(cls, opts, allowed)
  I.check_opts(cls, opts, I.option_set(unpack(allowed)), #allowed)
  return opts or {}
end

local function dtype_opts(o) return { dtype = o.dtype, device = o.device } end

local function pair_text(v)
  if type(v) == 'table' then return '(' .. v[1] .. ', ' .. v[2] .. ')' end
  return tostring(v)
end

-- ---------------------------------------------------------------- Sequential
-- Sequential{m1, m2, ...} (children named '0', '1', ... as in PyTorch) or
-- Sequential{{'name', m}, ...}; seq[i] is the i-th child (1-based, negative from the end);
-- seq:len() counts them; seq:add([name,] m) appends one.
local Sequential = Module:extend('Sequential')
nn.Sequential = Sequential
local module_index = Sequential.__index
Sequential.__index = function(self, k)
  if type(k) == 'number' then
    local names = rawget(self, '_modules').names
    local n = names[k > 0 and k or #names + k + 1]
    return n and rawget(self, '_modules').map[n]
  end
  return module_index(self, k)
end
-- The number of children (LuaJIT's # ignores __len on tables).
function Sequential:len() return #rawget(self, '_modules').names end

function Sequential:init(list)
  if list == nil then return end
  if type(list) ~= 'table' then throw('Sequential: expected a list of modules, got ' .. describe(list)) end
  for i, entry in ipairs(list) do
    if nn.is_module(entry) then
      self:add(entry)
    elseif type(entry) == 'table' and type(entry[1]) == 'string' and nn.is_module(entry[2]) then
      self:add(entry[1], entry[2])
    else
      throw(string.format("Sequential: entry %d must be a module or a pair {'name', module}, got %s", i,
        describe(entry)))
    end
  end
end

function Sequential:add(name, m)
  if m == nil then name, m = tostring(#self._modules.names), name end
  if self._modules.map[name] ~= nil then
    throw(string.format("Sequential: a child named '%s' already exists", name))
  end
  self:add_module(name, m)
  return self
end

-- ReLU followed by MaxPool2d runs as MaxPool2d then ReLU: max commutes with a monotone
-- function, so values and gradients are the same, and the ReLU (forward and backward)
-- touches a quarter of the elements (about 8% of a Fashion-MNIST CNN step).
local function relu_then_pool(a, b)
  return getmetatable(a) == nn.ReLU and getmetatable(b) == nn.MaxPool2d and not nn.has_forward_hooks(a) and
      not nn.has_forward_hooks(b)
end
-- Forward functions of the built-in layers that keep no reference to their input or output
-- in Lua (the C ops keep what backward needs, counted), filled in below as they are defined.
local keeps_nothing = setmetatable({}, { __mode = 'k' })
local function pure(m) return keeps_nothing[m.forward] and not nn.has_forward_hooks(m) end

-- An intermediate result that only Sequential's loop holds goes back to the runtime as soon
-- as the next layer has used it, instead of when Lua's collector runs: its memory (what
-- backward does not need) is reused while still in cache, and the collector, which would
-- otherwise run a full collection every ~20 steps of the Fashion-MNIST MLP to free them
-- (about 1 ms each), runs far less often. Only between two layers that keep nothing
-- (`pure`), and never the caller's input or the result.
local function release(t)
  ffi.gc(t, nil)
  C.em_tensor_release(t)
end

-- A Linear followed by a ReLU runs as one op, F.linear_relu (the bias and the ReLU fused into
-- the GEMM where oneDNN runs it): the same values and gradients, one pass less over the
-- output forward and backward, one result fewer.
local function linear_then_relu(a, b)
  return getmetatable(a) == nn.Linear and getmetatable(b) == nn.ReLU and pure(a) and pure(b)
end

function Sequential:forward(x, ...)
  local names, map = self._modules.names, self._modules.map
  local i, n = 1, #names
  local input, own = x, false   -- own: x was made by a pure layer in this loop
  while i <= n do
    local m = map[names[i]]
    local y, last
    if i < n and relu_then_pool(m, map[names[i + 1]]) then
      last = map[names[i + 1]]
      y = m(last(x, ...), ...)
      i = i + 2
    elseif i < n and linear_then_relu(m, map[names[i + 1]]) then
      last = map[names[i + 1]]
      y = F.linear_relu(x, m.weight, m.bias)
      i = i + 2
    else
      last = m
      y = m(x, ...)
      i = i + 1
    end
    if own and pure(m) and pure(last) and not rawequal(y, x) and not rawequal(x, input) and I.is_tensor(x) then
      release(x)
    end
    own = pure(last) and pure(m)
    x = y
  end
  return x
end

-- ---------------------------------------------------------------- Linear
-- Linear(in_features, out_features [, {bias = true, dtype, device}])
local Linear = Module:extend('Linear')
nn.Linear = Linear
function Linear:init(in_features, out_features, opts)
  need_size('Linear', 'in_features', in_features)
  need_size('Linear', 'out_features', out_features)
  opts = opts_of('Linear', opts, { 'bias', 'dtype', 'device' })
  self.in_features, self.out_features = in_features, out_features
  self.weight = nn.Parameter(ember.empty(out_features, in_features, dtype_opts(opts)))
  if opts.bias ~= false then self.bias = nn.Parameter(ember.empty(out_features, dtype_opts(opts))) end
  self:reset_parameters()
end
function Linear:reset_parameters()
  init.kaiming_uniform_(self.weight, { a = math.sqrt(5) })
  if self.bias then
    local bound = self.in_features > 0 and 1 / math.sqrt(self.in_features) or 0
    init.uniform_(self.bias, -bound, bound)
  end
end
function Linear:forward(x) return F.linear(x, self.weight, self.bias) end
keeps_nothing[Linear.forward] = true
function Linear:extra_repr()
  return string.format('in_features=%d, out_features=%d, bias=%s', self.in_features, self.out_features,
    tostring(self.bias ~= nil))
end

-- ---------------------------------------------------------------- Conv2d
-- Conv2d(in_channels, out_channels, kernel_size [, {stride = 1, padding = 0,
-- dilation = 1, groups = 1, bias = true, dtype, device}])
local Conv2d = Module:extend('Conv2d')
nn.Conv2d = Conv2d
function Conv2d:init(in_channels, out_channels, kernel_size, opts)
  need_size('Conv2d', 'in_channels', in_channels)
  need_size('Conv2d', 'out_channels', out_channels)
  opts = opts_of('Conv2d', opts, { 'stride', 'padding', 'dilation', 'groups', 'bias', 'dtype', 'device' })
  local groups = opts.groups or 1
  if type(groups) ~= 'number' or groups < 1 or in_channels % groups ~= 0 or out_channels % groups ~= 0 then
    throw(string.format('Conv2d: groups must be a positive integer dividing in_channels (%d) and out_channels ' ..
      '(%d), got %s', in_channels, out_channels, tostring(groups)))
  end
  local kh, kw = kernel_size, kernel_size
  if type(kernel_size) == 'table' then kh, kw = kernel_size[1], kernel_size[2] end
  need_size('Conv2d', 'kernel_size', kh)
  need_size('Conv2d', 'kernel_size', kw)
  self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
  self.kernel_size = { kh, kw }
  self.stride, self.padding, self.dilation = opts.stride or 1, opts.padding or 0, opts.dilation or 1
  self.weight = nn.Parameter(ember.empty(out_channels, in_channels / groups, kh, kw, dtype_opts(opts)))
  if opts.bias ~= false then self.bias = nn.Parameter(ember.empty(out_channels, dtype_opts(opts))) end
  self:reset_parameters()
end
function Conv2d:reset_parameters()
  init.kaiming_uniform_(self.weight, { a = math.sqrt(5) })
  if self.bias then
    local fan_in = init.calculate_fans(self.weight)
    local bound = fan_in > 0 and 1 / math.sqrt(fan_in) or 0
    init.uniform_(self.bias, -bound, bound)
  end
end
function Conv2d:forward(x)
  return F.conv2d(x, self.weight, self.bias, { stride = self.stride, padding = self.padding,
    dilation = self.dilation, groups = self.groups })
end
keeps_nothing[Conv2d.forward] = true
function Conv2d:extra_repr()
  local s = string.format('%d, %d, kernel_size=%s, stride=%s', self.in_channels, self.out_channels,
    pair_text(self.kernel_size), pair_text(self.stride))
  if self.padding ~= 0 then s = s .. ', padding=' .. pair_text(self.padding) end
  if self.dilation ~= 1 then s = s .. ', dilation=' .. pair_text(self.dilation) end
  if self.groups ~= 1 then s = s .. ', groups=' .. self.groups end
  if self.bias == nil then s = s .. ', bias=false' end
  return s
end

-- ---------------------------------------------------------------- batch norm
-- BatchNorm1d / BatchNorm2d(num_features [, {eps = 1e-5, momentum = 0.1, affine = true,
-- track_running_stats = true, dtype, device}]). momentum = false averages cumulatively
-- (PyTorch's momentum=None). In training, batch statistics normalise and the running
-- ones are updated; in evaluation the running ones normalise.
local function batch_norm_class(name, dims)
  local BN = Module:extend(name)
  function BN:init(num_features, opts)
    need_size(name, 'num_features', num_features)
    opts = opts_of(name, opts, { 'eps', 'momentum', 'affine', 'track_running_stats', 'dtype', 'device' })
    self.num_features, self.eps = num_features, opts.eps or 1e-5
    if opts.momentum == nil then self.momentum = 0.1 else self.momentum = opts.momentum end
    self.affine = opts.affine ~= false
    self.track_running_stats = opts.track_running_stats ~= false
    local o = dtype_opts(opts)
    if self.affine then
      self.weight = nn.Parameter(ember.ones(num_features, o))
      self.bias = nn.Parameter(ember.zeros(num_features, o))
    end
    if self.track_running_stats then
      self:register_buffer('running_mean', ember.zeros(num_features, o))
      self:register_buffer('running_var', ember.ones(num_features, o))
      self:register_buffer('num_batches_tracked', ember.zeros({}, { dtype = 'int64', device = opts.device }))
    end
  end
  function BN:forward(x)
    local nd = x:dim()
    if nd ~= dims[1] and nd ~= dims[2] then
      throw(string.format('%s: expected a %s input, got a %d-d tensor of shape [%s]', name,
        dims[1] == dims[2] and (dims[1] .. '-d') or (dims[1] .. '-d or ' .. dims[2] .. '-d'), nd,
        table.concat(x.shape, ', ')))
    end
    local use_batch = self.training or not self.track_running_stats
    local momentum = self.momentum
    if self.training and self.track_running_stats then
      local n = ember.no_grad(function() return self.num_batches_tracked:add_(1):item() end)
      if momentum == false then momentum = 1 / n end
    end
    return F.batch_norm(x, self.running_mean, self.running_var, { weight = self.weight, bias = self.bias,
      training = use_batch, momentum = momentum or 0.1, eps = self.eps })
  end
  function BN:extra_repr()
    return string.format('%d, eps=%g, momentum=%s, affine=%s, track_running_stats=%s', self.num_features, self.eps,
      tostring(self.momentum), tostring(self.affine), tostring(self.track_running_stats))
  end
  return BN
end
nn.BatchNorm1d = batch_norm_class('BatchNorm1d', { 2, 3 })
nn.BatchNorm2d = batch_norm_class('BatchNorm2d', { 4, 4 })

-- LayerNorm(normalized_shape [, {eps = 1e-5, elementwise_affine = true, bias = true, dtype, device}])
local LayerNorm = Module:extend('LayerNorm')
nn.LayerNorm = LayerNorm
function LayerNorm:init(shape, opts)
  if type(shape) == 'number' then shape = { shape } end
  if type(shape) ~= 'table' or #shape == 0 then
    throw('LayerNorm: normalized_shape must be a size or a table of sizes, got ' .. describe(shape))
  end
  for _, s in ipairs(shape) do need_size('LayerNorm', 'normalized_shape', s) end
  opts = opts_of('LayerNorm', opts, { 'eps', 'elementwise_affine', 'bias', 'dtype', 'device' })
  self.normalized_shape, self.eps = shape, opts.eps or 1e-5
  self.elementwise_affine = opts.elementwise_affine ~= false
  if self.elementwise_affine then
    self.weight = nn.Parameter(ember.ones(shape, dtype_opts(opts)))
    if opts.bias ~= false then self.bias = nn.Parameter(ember.zeros(shape, dtype_opts(opts))) end
  end
end
function LayerNorm:forward(x)
  return F.layer_norm(x, self.normalized_shape, { weight = self.weight, bias = self.bias, eps = self.eps })
end
function LayerNorm:extra_repr()
  return string.format('(%s), eps=%g, elementwise_affine=%s', table.concat(self.normalized_shape, ', '), self.eps,
    tostring(self.elementwise_affine))
end

-- ---------------------------------------------------------------- activations and friends
local function simple(name, fn, repr)
  local cls = Module:extend(name)
  cls.forward = fn
  keeps_nothing[fn] = true   -- each below is one nn.functional call on its input
  if repr then cls.extra_repr = repr end
  nn[name] = cls
  return cls
end
simple('ReLU', function(_, x) return F.relu(x) end)
simple('SiLU', function(_, x) return F.silu(x) end)
simple('Tanh', function(_, x) return F.tanh(x) end)
simple('Sigmoid', function(_, x) return F.sigmoid(x) end)
simple('Identity', function(_, x) return x end)

-- GELU([{approximate = 'none'}]): the exact (erf) form, or 'tanh' (its tanh approximation).
local GELU = simple('GELU', function(self, x) return F.gelu(x, { approximate = self.approximate }) end,
  function(self) return "approximate='" .. self.approximate .. "'" end)
function GELU:init(opts)
  opts = opts_of('GELU', opts, { 'approximate' })
  self.approximate = opts.approximate or 'none'
  if self.approximate ~= 'none' and self.approximate ~= 'tanh' then
    throw(string.format("GELU: approximate must be 'none' (the erf form) or 'tanh', got %s",
      describe(opts.approximate)))
  end
end

-- Softmax(dim) / LogSoftmax(dim)
for _, name in ipairs { 'Softmax', 'LogSoftmax' } do
  local fn = name == 'Softmax' and F.softmax or F.log_softmax
  local cls = simple(name, function(self, x) return fn(x, self.dim) end,
    function(self) return 'dim=' .. self.dim end)
  function cls:init(dim)
    if type(dim) ~= 'number' then throw(name .. ': expected a dim (integer), got ' .. describe(dim)) end
    self.dim = dim
  end
end

-- Dropout([p = 0.5]): active in training mode only.
local Dropout = simple('Dropout', function(self, x) return F.dropout(x, self.p, self.training) end,
  function(self) return string.format('p=%g', self.p) end)
function Dropout:init(p)
  if p == nil then p = 0.5 end
  if type(p) ~= 'number' or p < 0 or p > 1 then
    throw('Dropout: p must be a probability in [0, 1], got ' .. (type(p) == 'number' and tostring(p) or describe(p)))
  end
  self.p = p
end

-- Flatten([start_dim = 2 [, end_dim = -1]]): keeps the batch dim, as PyTorch's default.
local Flatten = simple('Flatten', function(self, x) return x:flatten(self.start_dim, self.end_dim) end,
  function(self) return string.format('start_dim=%d, end_dim=%d', self.start_dim, self.end_dim) end)
function Flatten:init(start_dim, end_dim)
  self.start_dim, self.end_dim = start_dim or 2, end_dim or -1
end

-- ---------------------------------------------------------------- pooling
-- MaxPool2d(kernel_size [, {stride = kernel_size, padding = 0, dilation = 1, ceil_mode = false}])
local MaxPool2d = simple('MaxPool2d', function(self, x) return F.max_pool2d(x, self.kernel_size, self.opts) end,
  function(self)
    return string.format('kernel_size=%s, stride=%s, padding=%s', pair_text(self.kernel_size),
      pair_text(self.opts.stride or self.kernel_size), pair_text(self.opts.padding or 0))
  end)
function MaxPool2d:init(kernel_size, opts)
  self.kernel_size = kernel_size
  self.opts = opts_of('MaxPool2d', opts, { 'stride', 'padding', 'dilation', 'ceil_mode' })
end

-- AvgPool2d(kernel_size [, {stride = kernel_size, padding = 0, ceil_mode = false, count_include_pad = true}])
local AvgPool2d = simple('AvgPool2d', function(self, x) return F.avg_pool2d(x, self.kernel_size, self.opts) end,
  function(self)
    return string.format('kernel_size=%s, stride=%s, padding=%s', pair_text(self.kernel_size),
      pair_text(self.opts.stride or self.kernel_size), pair_text(self.opts.padding or 0))
  end)
function AvgPool2d:init(kernel_size, opts)
  self.kernel_size = kernel_size
  self.opts = opts_of('AvgPool2d', opts, { 'stride', 'padding', 'ceil_mode', 'count_include_pad' })
end

-- AdaptiveAvgPool2d(output_size): output_size a number or {h, w}.
local Adaptive = simple('AdaptiveAvgPool2d', function(self, x) return F.adaptive_avg_pool2d(x, self.output_size) end,
  function(self) return 'output_size=' .. pair_text(self.output_size) end)
function Adaptive:init(output_size) self.output_size = output_size end

-- ---------------------------------------------------------------- embeddings
-- Embedding(num_embeddings, embedding_dim [, {padding_idx, sparse, max_norm, norm_type, dtype,
-- device}]): padding_idx is a 1-based row (negative from the end) kept at zero and given no
-- gradient; sparse = true gives weight a row-sparse gradient (ember.SparseGrad); max_norm
-- renormalises the rows looked up (F.embedding).
local Embedding = Module:extend('Embedding')
nn.Embedding = Embedding
function Embedding:init(num, dim, opts)
  need_size('Embedding', 'num_embeddings', num)
  need_size('Embedding', 'embedding_dim', dim)
  opts = opts_of('Embedding', opts, { 'padding_idx', 'dtype', 'device', 'sparse', 'max_norm', 'norm_type' })
  self.sparse, self.max_norm, self.norm_type = opts.sparse or false, opts.max_norm, opts.norm_type
  local pad = opts.padding_idx
  if pad ~= nil then
    if type(pad) ~= 'number' or pad == 0 or pad > num or pad < -num then
      throw(string.format('Embedding: padding_idx must be a row in 1..%d (or -%d..-1), got %s', num, num,
        tostring(pad)))
    end
    if pad < 0 then pad = pad + num + 1 end
  end
  self.num_embeddings, self.embedding_dim, self.padding_idx = num, dim, pad
  self.weight = nn.Parameter(ember.empty(num, dim, dtype_opts(opts)))
  self:reset_parameters()
end
function Embedding:reset_parameters()
  init.normal_(self.weight, 0, 1)
  if self.padding_idx then
    ember.no_grad(function() self.weight[{ self.padding_idx }] = 0 end)
  end
end
function Embedding:forward(indices)
  return F.embedding(indices, self.weight, { padding_idx = self.padding_idx, sparse = self.sparse,
    max_norm = self.max_norm, norm_type = self.norm_type })
end
function Embedding:extra_repr()
  local s = string.format('%d, %d', self.num_embeddings, self.embedding_dim)
  if self.padding_idx then s = s .. ', padding_idx=' .. self.padding_idx end
  return s
end

-- EmbeddingBag(num_embeddings, embedding_dim [, {mode = 'mean', sparse, padding_idx, max_norm,
-- norm_type, include_last_offset, dtype, device}]); forward(indices [, offsets [,
-- per_sample_weights]]), see F.embedding_bag (the padding row starts at zero).
local EmbeddingBag = Module:extend('EmbeddingBag')
nn.EmbeddingBag = EmbeddingBag
function EmbeddingBag:init(num, dim, opts)
  need_size('EmbeddingBag', 'num_embeddings', num)
  need_size('EmbeddingBag', 'embedding_dim', dim)
  opts = opts_of('EmbeddingBag', opts, { 'mode', 'dtype', 'device', 'sparse', 'padding_idx', 'max_norm', 'norm_type',
    'include_last_offset' })
  self.num_embeddings, self.embedding_dim, self.mode = num, dim, opts.mode or 'mean'
  self.sparse, self.max_norm, self.norm_type = opts.sparse or false, opts.max_norm, opts.norm_type
  self.include_last_offset = opts.include_last_offset or false
  local pad = opts.padding_idx
  if pad ~= nil then
    if type(pad) ~= 'number' or pad == 0 or pad > num or pad < -num then
      throw(string.format('EmbeddingBag: padding_idx must be a row in 1..%d (or -%d..-1), got %s', num, num,
        tostring(pad)))
    end
    if pad < 0 then pad = pad + num + 1 end
  end
  self.padding_idx = pad
  self.weight = nn.Parameter(ember.empty(num, dim, dtype_opts(opts)))
  init.normal_(self.weight, 0, 1)
  if pad then ember.no_grad(function() self.weight[{ pad }] = 0 end) end
end
function EmbeddingBag:forward(indices, offsets, per_sample_weights)
  return F.embedding_bag(indices, self.weight, { offsets = offsets, mode = self.mode,
    per_sample_weights = per_sample_weights, padding_idx = self.padding_idx, sparse = self.sparse,
    max_norm = self.max_norm, norm_type = self.norm_type, include_last_offset = self.include_last_offset })
end
function EmbeddingBag:extra_repr()
  local s = string.format("%d, %d, mode='%s'", self.num_embeddings, self.embedding_dim, self.mode)
  if self.padding_idx then s = s .. ', padding_idx=' .. self.padding_idx end
  if self.sparse then s = s .. ', sparse=true' end
  return s
end

return nn
