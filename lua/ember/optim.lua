-- ember.optim: optimizers with fused C updates (ember/optim.h) and learning-rate
-- schedulers, after torch.optim.
--
--   local opt = ember.optim.SGD(model:parameters(), {lr = 0.05, momentum = 0.9})
--   local sched = ember.optim.lr_scheduler.CosineAnnealingLR(opt, {T_max = 10})
--   for epoch = 1, 10 do
--     for x, y in batches do
--       opt:zero_grad(); F.cross_entropy(model(x), y):backward(); opt:step()
--     end
--     sched:step()
--   end
--
-- Parameters come as a list of tensors or as parameter groups, each a table {params =
-- {...}, lr = ..., ...} whose missing options take the optimizer's. opt.param_groups[i]
-- holds each group's options (schedulers change .lr there). One step updates every
-- parameter that has a .grad with one C call per group, no per-parameter Lua work.
--
-- Checkpoints: local tensors, meta = opt:state_dict() gives the state as tensors named
-- "state.<i>.<name>" (i counts parameters from 0 across groups, as PyTorch's state dict
-- does) and the options and step counts as a table of strings, so that
-- ember.save(path, tensors, {metadata = meta}) writes it and
-- opt:load_state_dict(ember.load(path)) restores it.
local ffi = require 'ffi'
local ember = require 'ember'

local I = require 'ember.internal'
local C = I.C
local throw, describe, is_tensor = I.throw, I.describe, I.is_tensor

local optim = {}

-- ---------------------------------------------------------------- parameter groups
local function check_param(op, p, where)
  if not is_tensor(p) then throw(string.format('%s: expected a tensor at %s, got %s', op, where, describe(p))) end
  if not p:is_leaf() then
    throw(string.format("%s: the tensor at %s is not a leaf (it comes from %s); optimizers update leaves " ..
      "(model:parameters())", op, where, p.grad_fn))
  end
end

local function make_groups(op, params, defaults, allowed)
  if type(params) ~= 'table' then
    throw(string.format('%s: expected a list of tensors or of parameter groups for argument 1, got %s', op,
      describe(params)))
  end
  if ember.nn and ember.nn.is_module(params) then
    throw(op .. ': expected a list of tensors, got a module (pass model:parameters())')
  end
  if #params == 0 then throw(op .. ': got an empty parameter list') end
  local groups = {}
  local as_groups = type(params[1]) == 'table' and not is_tensor(params[1])
  local list = as_groups and params or { { params = params } }
  local seen = {}
  for gi, spec in ipairs(list) do
    if type(spec) ~= 'table' or type(spec.params) ~= 'table' then
      throw(string.format('%s: parameter group %d must be a table {params = {...}, ...}, got %s', op, gi,
        describe(spec)))
    end
    local g = { params = {} }
    for k, v in pairs(spec) do
      if k ~= 'params' then
        if not allowed[k] then
          throw(string.format("%s: unknown option '%s' in parameter group %d (expected %s)", op, tostring(k), gi,
            allowed._list))
        end
        g[k] = v
      end
    end
    for k, v in pairs(defaults) do
      if g[k] == nil then g[k] = v end
    end
    for i, p in ipairs(spec.params) do
      local where = as_groups and string.format('position %d of parameter group %d', i, gi) or
          string.format('position %d of the parameter list', i)
      check_param(op, p, where)
      if seen[p] then throw(string.format('%s: the tensor at %s appears more than once', op, where)) end
      seen[p] = true
      g.params[i] = p
    end
    g.initial_lr = nil
    groups[gi] = g
  end
  return groups
end

-- Hyper-parameters are the runtime's to judge (its update calls check them before
-- writing anything); an update of no parameters checks them alone, so an optimizer refuses
-- bad ones when it is made. Lua checks only that they are numbers, and names the optimizer
-- as the user wrote it (SGD, not sgd).
local function need_numbers(op, g, names)
  for _, name in ipairs(names) do
    if type(g[name]) ~= 'number' then
      throw(string.format('%s: %s must be a number, got %s', op, name, describe(g[name])))
    end
  end
end

local function check_hyper(op, status)
  if status ~= 0 then throw((I.last_error():gsub('^%w+: ', op .. ': '))) end
end

-- Whether p has a row-sparse .grad (ember/sparse.h; the reference is dropped at once).
local function has_sparse_grad(p)
  local g = C.em_grad_sparse(p)
  if g == nil then return false end
  C.em_sparse_grad_release(g)
  return true
end

-- Whether p has a .grad, dense or sparse (em_grad hands out a reference, dropped at once).
local function has_grad(p)
  local g = C.em_grad(p)
  if g == nil then return has_sparse_grad(p) end
  C.em_tensor_release(g)
  return true
end

-- ---------------------------------------------------------------- the base class
local Optimizer = {}
Optimizer.__index = Optimizer
optim.Optimizer = Optimizer

local function new_optimizer(cls, op, params, opts, defaults)
  local allowed = I.option_set(unpack(cls.option_names))
  I.check_opts(op, opts, allowed, 2)
  local d = {}
  for k, v in pairs(defaults) do d[k] = v end
  for k, v in pairs(opts or {}) do d[k] = v end
  local self = setmetatable({ defaults = d, name = op }, cls)
  self.param_groups = make_groups(op, params, d, allowed)
  for _, g in ipairs(self.param_groups) do
    cls.check_group(op, g)
    g.state = {}       -- per-parameter state, parallel to g.params
  end
  return self
end

-- zero_grad([{set_to_none = true}]): clears every parameter's .grad (or zero-fills it).
local ZERO_GRAD_OPTS = I.option_set('set_to_none')
function Optimizer:zero_grad(opts)
  if opts ~= nil then I.check_opts('zero_grad', opts, ZERO_GRAD_OPTS, 1) end
  local to_none = not (opts and opts.set_to_none == false)
  for _, g in ipairs(self.param_groups) do
    for _, p in ipairs(g.params) do
      if to_none then
        -- one C call per parameter (no-op without a gradient; drops a sparse one too)
        I.check(C.em_set_grad(p, nil))
      elseif has_sparse_grad(p) then
        p.grad = nil   -- a zero sparse gradient names no rows
      else
        local grad = p.grad
        if grad then I.check(C.em_fill(grad, 0)) end
      end
    end
  end
end

-- Dropping a gradient may release a graph that holds a custom Function (a Lua callback):
-- not from JIT-compiled code (see autograd.lua).
jit.off(Optimizer.zero_grad)

-- Per-group C arrays, grown as needed; gradients are raw new references released after
-- the call (no Lua wrappers per step).
local function arrays(g, n, k)
  local a = g._arrays
  if not a or a.n < n then
    a = { n = n }
    for j = 1, k do a[j] = ffi.new('em_tensor *[?]', n + 1) end
    g._arrays = a
  end
  return a
end

local function release_grads(arr, n)
  for i = 0, n - 1 do
    if arr[i] ~= nil then C.em_tensor_release(arr[i]) end
    arr[i] = nil
  end
end

local function state_zeros(p) return ember.zeros_like(p) end


-- ---------------------------------------------------------------- SGD
-- SGD(params, {lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false,
-- maximize = false}): PyTorch's update (momentum buffer = grad on its first step).
local SGD = setmetatable({}, { __index = Optimizer })
SGD.__index = SGD
SGD.option_names = { 'lr', 'momentum', 'dampening', 'weight_decay', 'nesterov', 'maximize' }
SGD.state_names = { 'momentum_buffer' }
SGD.type_name = 'SGD'

function SGD.check_group(op, g)
  need_numbers(op, g, { 'lr', 'momentum', 'dampening', 'weight_decay' })
  check_hyper(op, C.em_optim_sgd(0, nil, nil, nil, g.lr, g.momentum, g.dampening, g.weight_decay,
    g.nesterov and 1 or 0, 1, g.maximize and 1 or 0))
end

function optim.SGD(params, opts)
  return new_optimizer(SGD, 'SGD', params, opts,
    { lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false, maximize = false })
end

function SGD:step()
  for gi, g in ipairs(self.param_groups) do
    local n = #g.params
    local a = arrays(g, n, 3)
    local params, grads, bufs = a[1], a[2], a[3]
    local momentum = g.momentum ~= 0
    -- Two calls at most: parameters whose buffer exists, then those on their first step.
    for pass = 1, momentum and 2 or 1 do
      local k = 0
      for i, p in ipairs(g.params) do
        local st = g.state[i]
        local first = momentum and (st == nil or st.momentum_buffer == nil)
        if not momentum or (pass == 2) == first then
          local grad = C.em_grad(p)
          if grad ~= nil then
            if momentum then
              if first then
                st = st or {}
                st.momentum_buffer = state_zeros(p)
                g.state[i] = st
              end
              bufs[k] = st.momentum_buffer
            end
            params[k], grads[k] = p, grad
            k = k + 1
          end
        end
      end
      if k > 0 then
        local status = C.em_optim_sgd(k, params, grads, momentum and bufs or nil, g.lr, g.momentum, g.dampening,
          g.weight_decay, g.nesterov and 1 or 0, pass == 2 and 1 or 0, g.maximize and 1 or 0)
        release_grads(grads, k)
        for i = 0, k - 1 do params[i], bufs[i] = nil, nil end
        I.check(status)
      end
    end
    -- Row-sparse gradients (sparse embeddings): only the rows they name move.
    for i, p in ipairs(g.params) do
      local sg = C.em_grad_sparse(p)
      if sg ~= nil then
        sg = I.own_sparse_grad(sg)
        if momentum then
          throw(string.format('SGD: parameter %d of group %d has a sparse gradient, and momentum (%g) is not ' ..
            'supported with sparse gradients (as in PyTorch); use momentum = 0, Adagrad or RowWiseAdagrad', i,
            gi, g.momentum))
        end
        I.check(C.em_optim_rows(C.EM_ROWS_SGD, p, nil, sg, nil, g.lr, 0, g.weight_decay, g.maximize and 1 or 0))
      end
    end
  end
end

-- ---------------------------------------------------------------- Adam / AdamW
-- Adam(params, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0, maximize = false})
-- AdamW: the same with decoupled weight decay, weight_decay = 1e-2 by default.
local Adam = setmetatable({}, { __index = Optimizer })
Adam.__index = Adam
Adam.option_names = { 'lr', 'betas', 'eps', 'weight_decay', 'maximize', 'amsgrad' }
Adam.state_names = { 'exp_avg', 'exp_avg_sq' }
Adam.type_name = 'Adam'

function Adam.check_group(op, g)
  if type(g.betas) ~= 'table' or #g.betas ~= 2 or type(g.betas[1]) ~= 'number' or type(g.betas[2]) ~= 'number' then
    throw(op .. ': betas must be a pair {beta1, beta2}, got ' .. describe(g.betas))
  end
  need_numbers(op, g, { 'lr', 'eps', 'weight_decay' })
  if g.amsgrad then throw(op .. ': amsgrad is not supported') end
  check_hyper(op, C.em_optim_adam(0, nil, nil, nil, nil, g.lr, g.betas[1], g.betas[2], g.eps, g.weight_decay, 0, 1,
    g.maximize and 1 or 0))
end

local AdamW = setmetatable({}, { __index = Adam })
AdamW.__index = AdamW
AdamW.decoupled = true
AdamW.type_name = 'AdamW'

function optim.Adam(params, opts)
  return new_optimizer(Adam, 'Adam', params, opts,
    { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0, maximize = false, amsgrad = false })
end
function optim.AdamW(params, opts)
  return new_optimizer(AdamW, 'AdamW', params, opts,
    { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 1e-2, maximize = false, amsgrad = false })
end

function Adam:step()
  for _, g in ipairs(self.param_groups) do
    local n = #g.params
    local a = arrays(g, n, 4)
    local params, grads, ms, vs = a[1], a[2], a[3], a[4]
    -- Parameters are updated together when their step counts agree (always, unless some
    -- got gradients on fewer steps than others): one call per distinct count.
    local pending = {}
    for i, p in ipairs(g.params) do
      if has_sparse_grad(p) then
        throw(string.format('%s: parameter %d has a sparse gradient, which %s does not support (as in PyTorch); ' ..
          'use SGD, Adagrad or RowWiseAdagrad for sparse embeddings (a parameter group each)', self.name, i, self.name))
      end
      if has_grad(p) then
        local st = g.state[i]
        if not st then
          st = { step = 0, exp_avg = state_zeros(p), exp_avg_sq = state_zeros(p) }
          g.state[i] = st
        end
        st.step = st.step + 1
        local list = pending[st.step]
        if not list then list = {}; pending[st.step] = list end
        list[#list + 1] = i
      end
    end
    local steps = {}
    for s in pairs(pending) do steps[#steps + 1] = s end
    table.sort(steps)
    for _, s in ipairs(steps) do
      local k = 0
      for _, i in ipairs(pending[s]) do
        local st = g.state[i]
        params[k], grads[k], ms[k], vs[k] = g.params[i], C.em_grad(g.params[i]), st.exp_avg, st.exp_avg_sq
        k = k + 1
      end
      local status = C.em_optim_adam(k, params, grads, ms, vs, g.lr, g.betas[1], g.betas[2], g.eps, g.weight_decay,
        self.decoupled and 1 or 0, s, g.maximize and 1 or 0)
      release_grads(grads, k)
      for i = 0, k - 1 do params[i], ms[i], vs[i] = nil, nil, nil end
      I.check(status)
    end
  end
end

-- ---------------------------------------------------------------- state dicts
local function num_text(v) return string.format('%.17g', v) end

local function encode_option(v)
  if type(v) == 'number' then return num_text(v) end
  if type(v) == 'boolean' then return tostring(v) end
  if type(v) == 'table' then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = num_text(x) end
    return '{' .. table.concat(parts, ',') .. '}'
  end
  return nil   -- other values (strings, functions) are not saved
end

local function decode_option(s)
  if s == 'true' then return true end
  if s == 'false' then return false end
  local list = s:match('^{(.*)}$')
  if list then
    local out = {}
    for x in list:gmatch('[^,]+') do out[#out + 1] = tonumber(x) end
    return out
  end
  return tonumber(s)
end

-- state_dict(): tensors {["state.<i>.<name>"] = tensor} and metadata {key = string}.
function Optimizer:state_dict()
  local tensors, meta = {}, { ['optimizer.type'] = self.type_name, ['optimizer.groups'] = tostring(#self.param_groups) }
  local index = 0
  for gi, g in ipairs(self.param_groups) do
    local prefix = 'param_groups.' .. (gi - 1) .. '.'
    meta[prefix .. 'size'] = tostring(#g.params)
    for k, v in pairs(g) do
      if k ~= 'params' and k ~= 'state' and type(k) == 'string' and k:sub(1, 1) ~= '_' then
        local text = encode_option(v)
        if text then meta[prefix .. k] = text end
      end
    end
    for i = 1, #g.params do
      local st = g.state[i]
      if st then
        for _, name in ipairs(self.state_names) do
          if st[name] then tensors['state.' .. index .. '.' .. name] = st[name]:detach() end
        end
        if st.step then meta['state.' .. index .. '.step'] = tostring(st.step) end
      end
      index = index + 1
    end
  end
  return tensors, meta
end

-- load_state_dict(tensors, metadata): restores what state_dict() gave (for an optimizer
-- over the same parameters). Checks the type, the groups and every shape first.
function Optimizer:load_state_dict(tensors, meta)
  local op = 'load_state_dict'
  if type(tensors) ~= 'table' then throw(op .. ': expected the tensors of state_dict(), got ' .. describe(tensors)) end
  if type(meta) ~= 'table' then throw(op .. ': expected the metadata of state_dict(), got ' .. describe(meta)) end
  if meta['optimizer.type'] ~= self.type_name then
    throw(string.format("%s: the state is for %s, this optimizer is %s", op, tostring(meta['optimizer.type']),
      self.type_name))
  end
  if tonumber(meta['optimizer.groups']) ~= #self.param_groups then
    throw(string.format('%s: the state has %s parameter groups, this optimizer has %d', op,
      tostring(meta['optimizer.groups']), #self.param_groups))
  end
  local index, new_states = 0, {}
  for gi, g in ipairs(self.param_groups) do
    local prefix = 'param_groups.' .. (gi - 1) .. '.'
    if tonumber(meta[prefix .. 'size']) ~= #g.params then
      throw(string.format('%s: parameter group %d has %s parameters in the state, %d here', op, gi,
        tostring(meta[prefix .. 'size']), #g.params))
    end
    local states = {}
    for i, p in ipairs(g.params) do
      local st
      for _, name in ipairs(self.state_names) do
        local key = 'state.' .. index .. '.' .. name
        local t = tensors[key]
        if t ~= nil then
          if not is_tensor(t) then throw(string.format("%s: '%s' is %s, expected a tensor", op, key, describe(t))) end
          local a, b = t.shape, self.state_shape and self:state_shape(name, p) or p.shape
          local same = #a == #b
          for d = 1, #a do same = same and a[d] == b[d] end
          if not same then
            throw(string.format("%s: '%s' has shape [%s], the parameter has [%s]", op, key, table.concat(a, ', '),
              table.concat(b, ', ')))
          end
          st = st or {}
          st[name] = t:to(p.dtype):clone():contiguous()
        end
      end
      local step = meta['state.' .. index .. '.step']
      if step then
        st = st or {}
        st.step = tonumber(step)
      end
      states[i] = st
      index = index + 1
    end
    new_states[gi] = states
  end
  for gi, g in ipairs(self.param_groups) do
    g.state = new_states[gi]
    local prefix = 'param_groups.' .. (gi - 1) .. '.'
    for k, v in pairs(meta) do
      if k:sub(1, #prefix) == prefix then
        local name = k:sub(#prefix + 1)
        if name ~= 'size' then g[name] = decode_option(v) end
      end
    end
  end
end

-- Adagrad and RowWiseAdagrad (lua/ember/optim/adagrad.lua) build on the pieces above.
require('ember.optim.adagrad')(optim, {
  Optimizer = Optimizer, new_optimizer = new_optimizer, need_numbers = need_numbers, check_hyper = check_hyper,
  has_grad = has_grad, state_zeros = state_zeros,
})
-- ---------------------------------------------------------------- RMSprop
-- RMSprop(params, {lr = 1e-2, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0,
-- centered = false, maximize = false}): PyTorch's update (em_optim_rmsprop).
local RMSprop = setmetatable({}, { __index = Optimizer })
RMSprop.__index = RMSprop
RMSprop.option_names = { 'lr', 'alpha', 'eps', 'weight_decay', 'momentum', 'centered', 'maximize' }
RMSprop.state_names = { 'square_avg', 'momentum_buffer', 'grad_avg' }
RMSprop.type_name = 'RMSprop'

function RMSprop.check_group(op, g)
  need_numbers(op, g, { 'lr', 'alpha', 'eps', 'weight_decay', 'momentum' })
  check_hyper(op, C.em_optim_rmsprop(0, nil, nil, nil, nil, nil, g.lr, g.alpha, g.eps, g.weight_decay, g.momentum,
    g.centered and 1 or 0, g.maximize and 1 or 0))
end

function optim.RMSprop(params, opts)
  return new_optimizer(RMSprop, 'RMSprop', params, opts,
    { lr = 1e-2, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0, centered = false, maximize = false })
end

function RMSprop:step()
  for _, g in ipairs(self.param_groups) do
    local n = #g.params
    local a = arrays(g, n, 5)
    local params, grads, sq, bufs, gavg = a[1], a[2], a[3], a[4], a[5]
    local k = 0
    for i, p in ipairs(g.params) do
      local grad = C.em_grad(p)
      if grad ~= nil then
        local st = g.state[i]
        if st == nil then
          st = { square_avg = state_zeros(p) }
          g.state[i] = st
        end
        if g.momentum > 0 and st.momentum_buffer == nil then st.momentum_buffer = state_zeros(p) end
        if g.centered and st.grad_avg == nil then st.grad_avg = state_zeros(p) end
        params[k], grads[k], sq[k] = p, grad, st.square_avg
        bufs[k], gavg[k] = st.momentum_buffer, st.grad_avg
        k = k + 1
      end
    end
    if k > 0 then
      local status = C.em_optim_rmsprop(k, params, grads, sq, bufs, gavg, g.lr, g.alpha, g.eps, g.weight_decay,
        g.momentum, g.centered and 1 or 0, g.maximize and 1 or 0)
      release_grads(grads, k)
      for i = 0, k - 1 do params[i], sq[i], bufs[i], gavg[i] = nil, nil, nil, nil end
      I.check(status)
    end
  end
end

-- weight_decay_groups(model, weight_decay [, {no_decay_modules = {}}]): two parameter
-- groups for AdamW, nanoGPT's rule: tensors of 2 or more dims (matmul weights, embeddings)
-- decay, the others (biases, norm weights) do not. Parameters of modules whose class name
-- is listed in no_decay_modules (e.g. {'Embedding'}, minGPT's rule) never decay.
--   optim.AdamW(optim.weight_decay_groups(model, 0.1), {lr = 1e-3})
function optim.weight_decay_groups(model, weight_decay, opts)
  if not (ember.nn and ember.nn.is_module(model)) then
    throw('weight_decay_groups: expected a module for argument 1, got ' .. describe(model))
  end
  if type(weight_decay) ~= 'number' then
    throw('weight_decay_groups: weight_decay must be a number, got ' .. describe(weight_decay))
  end
  I.check_opts('weight_decay_groups', opts, I.option_set('no_decay_modules'), 3)
  local skip_class = {}
  for _, name in ipairs(opts and opts.no_decay_modules or {}) do skip_class[name] = true end
  local no_decay_param = {}
  for _, m in ipairs(model:modules()) do
    if skip_class[m.__name] then
      for _, pair in ipairs(m:named_parameters()) do no_decay_param[pair[2]] = true end
    end
  end
  local decay, no_decay = {}, {}
  for _, p in ipairs(model:parameters()) do
    if #p.shape >= 2 and not no_decay_param[p] then decay[#decay + 1] = p else no_decay[#no_decay + 1] = p end
  end
  local groups = {}
  if #decay > 0 then groups[#groups + 1] = { params = decay, weight_decay = weight_decay } end
  if #no_decay > 0 then groups[#groups + 1] = { params = no_decay, weight_decay = 0 } end
  return groups
end

-- ---------------------------------------------------------------- schedulers
-- Each scheduler sets every group's lr from its initial lr (group.initial_lr, recorded by
-- the first scheduler attached) and the epoch count, in closed form; step() advances the
-- count. Construction applies epoch 0, as PyTorch's schedulers do.
local lr_scheduler = {}
optim.lr_scheduler = lr_scheduler

local Scheduler = {}
Scheduler.__index = Scheduler
lr_scheduler.LRScheduler = Scheduler

local function new_scheduler(cls, op, optimizer, opts, allowed)
  if type(optimizer) ~= 'table' or type(optimizer.param_groups) ~= 'table' then
    throw(string.format('%s: expected an optimizer for argument 1, got %s', op, describe(optimizer)))
  end
  I.check_opts(op, opts, I.option_set(unpack(allowed)), 2)
  local self = setmetatable({ optimizer = optimizer, name = op, last_epoch = 0 }, cls)
  self.base_lrs = {}
  for i, g in ipairs(optimizer.param_groups) do
    if g.initial_lr == nil then g.initial_lr = g.lr end
    self.base_lrs[i] = g.initial_lr
  end
  return self, opts or {}
end

-- Sets the lrs for epoch e.
function Scheduler:_apply(e)
  self.last_epoch = e
  self._last_lr = {}
  for i, g in ipairs(self.optimizer.param_groups) do
    g.lr = self:lr_at(self.base_lrs[i], e)
    self._last_lr[i] = g.lr
  end
end

-- step(): one epoch (or iteration, as the schedule is used) forward.
function Scheduler:step() self:_apply(self.last_epoch + 1) end
-- get_last_lr(): the lr of each group set by the last step.
function Scheduler:get_last_lr()
  local out = {}
  for i, v in ipairs(self._last_lr) do out[i] = v end
  return out
end
function Scheduler:state_dict() return { last_epoch = self.last_epoch, base_lrs = self:get_base_lrs() } end
function Scheduler:get_base_lrs()
  local out = {}
  for i, v in ipairs(self.base_lrs) do out[i] = v end
  return out
end
function Scheduler:load_state_dict(sd)
  if type(sd) ~= 'table' or type(sd.last_epoch) ~= 'number' then
    throw('load_state_dict: expected a scheduler state {last_epoch = n, ...}, got ' .. describe(sd))
  end
  if sd.base_lrs then self.base_lrs = sd.base_lrs end
  self:_apply(sd.last_epoch)
end

local function positive_int(op, name, v)
  if type(v) ~= 'number' or v ~= math.floor(v) or v < 1 then
    throw(string.format('%s: %s must be a positive integer, got %s', op, name, tostring(v)))
  end
  return v
end

-- StepLR(opt, {step_size, gamma = 0.1}): lr = base * gamma^floor(epoch / step_size)
local StepLR = setmetatable({}, { __index = Scheduler })
StepLR.__index = StepLR
function lr_scheduler.StepLR(optimizer, opts)
  local self
  self, opts = new_scheduler(StepLR, 'StepLR', optimizer, opts, { 'step_size', 'gamma' })
  self.step_size = positive_int('StepLR', 'step_size', opts.step_size)
  self.gamma = opts.gamma or 0.1
  self:_apply(0)
  return self
end
function StepLR:lr_at(base, e) return base * self.gamma ^ math.floor(e / self.step_size) end

-- MultiStepLR(opt, {milestones = {...}, gamma = 0.1}): lr = base * gamma^(milestones <= epoch)
local MultiStepLR = setmetatable({}, { __index = Scheduler })
MultiStepLR.__index = MultiStepLR
function lr_scheduler.MultiStepLR(optimizer, opts)
  local self
  self, opts = new_scheduler(MultiStepLR, 'MultiStepLR', optimizer, opts, { 'milestones', 'gamma' })
  if type(opts.milestones) ~= 'table' then throw('MultiStepLR: milestones must be a list of epochs') end
  self.milestones, self.gamma = opts.milestones, opts.gamma or 0.1
  self:_apply(0)
  return self
end
function MultiStepLR:lr_at(base, e)
  local k = 0
  for _, m in ipairs(self.milestones) do if m <= e then k = k + 1 end end
  return base * self.gamma ^ k
end

-- CosineAnnealingLR(opt, {T_max, eta_min = 0}):
-- lr = eta_min + (base - eta_min) * (1 + cos(pi * epoch / T_max)) / 2
local Cosine = setmetatable({}, { __index = Scheduler })
Cosine.__index = Cosine
function lr_scheduler.CosineAnnealingLR(optimizer, opts)
  local self
  self, opts = new_scheduler(Cosine, 'CosineAnnealingLR', optimizer, opts, { 'T_max', 'eta_min' })
  self.T_max = positive_int('CosineAnnealingLR', 'T_max', opts.T_max)
  self.eta_min = opts.eta_min or 0
  self:_apply(0)
  return self
end
function Cosine:lr_at(base, e)
  return self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * e / self.T_max)) / 2
end

-- LinearLR(opt, {start_factor = 1/3, end_factor = 1, total_iters = 5}): a linear warm-up
-- (or decay): lr = base * (start + (end - start) * min(epoch, total_iters) / total_iters)
-- Schedulers live only here (no runtime counterpart), so their ranges are checked here.
local function check_range(op, name, v, lo, hi, lo_open, hi_open)
  if type(v) ~= 'number' or v ~= v or (lo_open and v <= lo) or (not lo_open and v < lo) or
      (hi and ((hi_open and v >= hi) or (not hi_open and v > hi))) then
    throw(string.format('%s: %s must be a number in %s%g, %s%s, got %s', op, name, lo_open and '(' or '[', lo,
      hi and string.format('%g', hi) or 'inf', (hi_open or not hi) and ')' or ']', tostring(v)))
  end
end

local LinearLR = setmetatable({}, { __index = Scheduler })
LinearLR.__index = LinearLR
function lr_scheduler.LinearLR(optimizer, opts)
  local self
  self, opts = new_scheduler(LinearLR, 'LinearLR', optimizer, opts, { 'start_factor', 'end_factor', 'total_iters' })
  self.start_factor = opts.start_factor or 1 / 3
  self.end_factor = opts.end_factor or 1
  check_range('LinearLR', 'start_factor', self.start_factor, 0, 1, true, false)
  check_range('LinearLR', 'end_factor', self.end_factor, 0, 1)
  self.total_iters = positive_int('LinearLR', 'total_iters', opts.total_iters or 5)
  self:_apply(0)
  return self
end
function LinearLR:lr_at(base, e)
  local t = math.min(e, self.total_iters) / self.total_iters
  return base * (self.start_factor + (self.end_factor - self.start_factor) * t)
end

-- SequentialLR(opt, {schedulers = {s1, s2, ...}, milestones = {m1, ...}}): s1 until epoch
-- m1, then s2 counting again from 0, ... (e.g. LinearLR warm-up, then cosine decay).
local SequentialLR = setmetatable({}, { __index = Scheduler })
SequentialLR.__index = SequentialLR
function lr_scheduler.SequentialLR(optimizer, opts)
  local self
  self, opts = new_scheduler(SequentialLR, 'SequentialLR', optimizer, opts, { 'schedulers', 'milestones' })
  local s, m = opts.schedulers, opts.milestones
  if type(s) ~= 'table' or #s == 0 then throw('SequentialLR: schedulers must be a non-empty list') end
  if type(m) ~= 'table' or #m ~= #s - 1 then
    throw(string.format('SequentialLR: expected %d milestones for %d schedulers, got %s', #s - 1, #s,
      type(m) == 'table' and tostring(#m) or describe(m)))
  end
  for i, sub in ipairs(s) do
    if getmetatable(sub) == nil or sub.optimizer ~= optimizer then
      throw(string.format('SequentialLR: scheduler %d must be a scheduler of the same optimizer', i))
    end
  end
  self.schedulers, self.milestones = s, m
  self:_apply(0)
  return self
end
-- The active scheduler and its own epoch count at epoch e.
function SequentialLR:_locate(e)
  local idx, start = 1, 0
  for i, milestone in ipairs(self.milestones) do
    if e >= milestone then idx, start = i + 1, milestone end
  end
  return self.schedulers[idx], e - start
end
function SequentialLR:_apply(e)
  local sub, local_e = self:_locate(e)
  sub:_apply(local_e)
  self.last_epoch = e
  self._last_lr = sub:get_last_lr()
end

-- WarmupCosineLR(opt, {warmup_steps, total_steps, min_lr = 0}): nanoGPT's schedule, stepped
-- per iteration: lr = base * (e + 1) / (warmup_steps + 1) during the warm-up, then a cosine
-- from base down to min_lr at total_steps, and min_lr after.
local WarmupCosine = setmetatable({}, { __index = Scheduler })
WarmupCosine.__index = WarmupCosine
function lr_scheduler.WarmupCosineLR(optimizer, opts)
  local self
  self, opts = new_scheduler(WarmupCosine, 'WarmupCosineLR', optimizer, opts,
    { 'warmup_steps', 'total_steps', 'min_lr' })
  local w, t = opts.warmup_steps or 0, opts.total_steps
  if type(w) ~= 'number' or w < 0 or w ~= math.floor(w) then
    throw('WarmupCosineLR: warmup_steps must be an integer >= 0, got ' .. tostring(w))
  end
  positive_int('WarmupCosineLR', 'total_steps', t)
  if t <= w then
    throw(string.format('WarmupCosineLR: total_steps (%d) must exceed warmup_steps (%d)', t, w))
  end
  self.warmup_steps, self.total_steps, self.min_lr = w, t, opts.min_lr or 0
  check_range('WarmupCosineLR', 'min_lr', self.min_lr, 0)
  self:_apply(0)
  return self
end
function WarmupCosine:lr_at(base, e)
  if e < self.warmup_steps then return base * (e + 1) / (self.warmup_steps + 1) end
  if e > self.total_steps then return self.min_lr end
  local ratio = (e - self.warmup_steps) / (self.total_steps - self.warmup_steps)
  return self.min_lr + 0.5 * (1 + math.cos(math.pi * ratio)) * (base - self.min_lr)
end

return optim
