-- ember.amp: mixed precision, after torch.amp: autocast regions and loss scaling.
--
--   local scaler = ember.amp.GradScaler()
--   for x, y in batches do
--     opt:zero_grad()
--     local loss = ember.autocast('cuda', {dtype = 'float16'}, function()
--       return F.cross_entropy(model(x), y)       -- linear/conv in float16, the loss in float32
--     end)
--     scaler:scale(loss):backward()
--     scaler:unscale_(opt)                        -- optional: before clip_grad_norm_
--     ember.nn.utils.clip_grad_norm_(model:parameters(), 1.0)
--     scaler:step(opt)                            -- skipped when a gradient is inf or NaN
--     scaler:update()
--   end
--
-- Autocast (the policy is runtime/include/ember/autograd.h's, applied in C where the ops
-- are dispatched): ember.autocast(device_type [, {dtype =, enabled = true}], fn, ...) runs
-- fn(...) with autocast set for device_type and restores the previous state after it
-- returns or raises (regions nest; enabled = false turns autocast off inside one);
-- ember.autocast_begin(device_type [, opts]) returns a token for ember.autocast_end(token),
-- for code that cannot be wrapped in a function. Inside, matmul/mm/bmm/addmm, F.linear and
-- F.conv2d on that device's tensors compute in the autocast dtype (float16 by default on
-- cuda, or bfloat16), and softmax, losses, norms and sums in float32. On 'cpu' the dtype is
-- bfloat16 (float16 is refused) and needs oneDNN (libdnnl-dev; `ember info` says): the
-- tensors stay float32, the GEMMs and convolutions round their operands to bfloat16 and sum
-- in float32 (AMX / AVX512-BF16 kernels), in the forward and in the backward of what was
-- recorded inside the region. enabled = false is accepted everywhere, so that one script
-- can run on both devices with enabled = on_gpu.
--
-- GradScaler{init_scale = 65536, growth_factor = 2, backoff_factor = 0.5,
-- growth_interval = 2000, enabled = true}: scale(loss) multiplies the loss (a tensor or a
-- list of them) by the scale; unscale_(opt) divides every gradient of opt's parameters by
-- it and looks for infs/NaNs in one fused pass (em_amp_unscale_: one host
-- synchronisation per optimizer and device on a GPU); step(opt, ...) unscales if that was
-- not done and runs opt:step(...) unless a gradient was not finite; update([new_scale])
-- halves the scale (backoff_factor) after a step with infs, or doubles it (growth_factor)
-- after growth_interval steps in a row without. The scale lives on the host, so scale()
-- and update() never synchronise. get_scale(), is_enabled(), state_dict(),
-- load_state_dict(state). Works on the CPU too (float32 gradients).
local ffi = require 'ffi'

local M = {}   -- init.lua puts these in ember
local I = require 'ember.internal'
local C = I.C
local throw, describe, is_tensor = I.throw, I.describe, I.is_tensor
local check_opts, option_set, arg_error = I.check_opts, I.option_set, I.arg_error
local unpack = unpack or table.unpack

local amp = {}
M.amp = amp

-- ---------------------------------------------------------------- autocast
local function device_type_of(op, name)
  if type(name) ~= 'string' then arg_error(op, 1, "a device type ('cuda' or 'cpu')", name) end
  local kind = name:match('^(%a+)')
  if kind == 'cuda' then return C.EM_CUDA end
  if kind == 'cpu' then return C.EM_CPU end
  throw(string.format("%s: device_type must be 'cuda' or 'cpu', got '%s'", op, name))
end

local AUTOCAST_OPTS = option_set('dtype', 'enabled')
local stack = {}   -- open autocast_begin tokens, innermost last

-- Sets the state for one region; returns what to restore.
local function enter(op, device_type, opts)
  local dt = device_type_of(op, device_type)
  check_opts(op, opts, AUTOCAST_OPTS, 2)
  opts = opts or {}
  if opts.enabled ~= nil and type(opts.enabled) ~= 'boolean' then
    throw(string.format('%s: enabled must be a boolean, got %s', op, describe(opts.enabled)))
  end
  local enabled = opts.enabled ~= false
  local dtype = opts.dtype and I.parse_dtype(opts.dtype, op) or C.em_autocast_get_dtype(dt)
  local prev = { dt = dt, on = C.em_autocast_is_enabled(dt), dtype = C.em_autocast_get_dtype(dt) }
  if C.em_autocast_set(dt, enabled and 1 or 0, dtype) ~= 0 then
    throw(op .. ': ' .. I.last_error():gsub('^autocast: ', ''))
  end
  return prev
end

local function leave(prev) C.em_autocast_set(prev.dt, prev.on, prev.dtype) end

local function pack(...) return { n = select('#', ...), ... } end

-- autocast(device_type [, opts], fn, ...): fn's results.
function M.autocast(device_type, opts, fn, ...)
  local args
  if type(opts) == 'function' then
    args = pack(fn, ...)
    fn, opts = opts, nil
  else
    args = pack(...)
  end
  if type(fn) ~= 'function' then arg_error('autocast', 3, 'a function', fn) end
  local prev = enter('autocast', device_type, opts)
  local r = pack(pcall(fn, unpack(args, 1, args.n)))
  leave(prev)
  if not r[1] then error(r[2], 0) end
  return unpack(r, 2, r.n)
end

function M.autocast_begin(device_type, opts)
  local token = enter('autocast_begin', device_type, opts)
  stack[#stack + 1] = token
  return token
end

function M.autocast_end(token)
  if token == nil or stack[#stack] ~= token then
    throw('autocast_end: expected the token of the innermost open autocast_begin' ..
      (#stack == 0 and ' (none is open)' or ''))
  end
  stack[#stack] = nil
  leave(token)
end

function M.is_autocast_enabled(device_type)
  return C.em_autocast_is_enabled(device_type_of('is_autocast_enabled', device_type or 'cuda')) ~= 0
end

function M.get_autocast_dtype(device_type)
  return I.dtype_names[tonumber(C.em_autocast_get_dtype(device_type_of('get_autocast_dtype', device_type or 'cuda')))]
end

amp.autocast, amp.autocast_begin, amp.autocast_end = M.autocast, M.autocast_begin, M.autocast_end

-- ---------------------------------------------------------------- loss scaling
local GradScaler = {}
GradScaler.__index = GradScaler

local SCALER_OPTS = option_set('init_scale', 'growth_factor', 'backoff_factor', 'growth_interval', 'enabled')

local function need(op, name, v, ok, expected)
  if type(v) ~= 'number' or v ~= v or not ok(v) then
    throw(string.format('%s: %s must be %s, got %s', op, name, expected, describe(v)))
  end
end

local function finite(v) return v > -math.huge and v < math.huge end

function amp.GradScaler(opts)
  local op = 'GradScaler'
  check_opts(op, opts, SCALER_OPTS, 1)
  opts = opts or {}
  local s = setmetatable({
    _scale = opts.init_scale or 65536.0,
    _growth_factor = opts.growth_factor or 2.0,
    _backoff_factor = opts.backoff_factor or 0.5,
    _growth_interval = opts.growth_interval or 2000,
    _growth_tracker = 0,
    _enabled = opts.enabled ~= false,
    _per_optimizer = setmetatable({}, { __mode = 'k' }),   -- this iteration's stage and found_inf
  }, GradScaler)
  need(op, 'init_scale', s._scale, function(v) return v > 0 and finite(v) end, 'a finite number > 0')
  need(op, 'growth_factor', s._growth_factor, function(v) return v > 1 and finite(v) end, 'a finite number > 1')
  need(op, 'backoff_factor', s._backoff_factor, function(v) return v > 0 and v < 1 end, 'a number in (0, 1)')
  need(op, 'growth_interval', s._growth_interval, function(v) return v >= 1 and v % 1 == 0 end,
    'an integer >= 1')
  if opts.enabled ~= nil and type(opts.enabled) ~= 'boolean' then
    throw(op .. ': enabled must be a boolean, got ' .. describe(opts.enabled))
  end
  return s
end

function GradScaler:is_enabled() return self._enabled end
function GradScaler:get_scale() return self._enabled and self._scale or 1.0 end
function GradScaler:get_growth_factor() return self._growth_factor end
function GradScaler:get_backoff_factor() return self._backoff_factor end
function GradScaler:get_growth_interval() return self._growth_interval end

-- scale(outputs): outputs * scale, for a tensor or a (nested) list of tensors.
function GradScaler:scale(outputs)
  if not self._enabled then return outputs end
  if is_tensor(outputs) then return outputs * self._scale end
  if type(outputs) == 'table' then
    local out = {}
    for k, v in pairs(outputs) do out[k] = self:scale(v) end
    return out
  end
  throw('GradScaler:scale: expected a tensor or a list of tensors, got ' .. describe(outputs))
end

local function optimizer_state(self, op, optimizer)
  if type(optimizer) ~= 'table' or type(optimizer.param_groups) ~= 'table' then
    throw(string.format('GradScaler:%s: expected an optimizer (with param_groups), got %s', op, describe(optimizer)))
  end
  local st = self._per_optimizer[optimizer]
  if not st then
    st = { stage = 'ready', found_inf = false }
    self._per_optimizer[optimizer] = st
  end
  return st
end

-- Divides every gradient of the optimizer's parameters by the scale; true when one held
-- an inf or NaN. One call per device holding gradients.
local found_out = ffi.new('int[1]')
local function unscale_grads(optimizer, inv_scale)
  local by_device, order = {}, {}
  for _, g in ipairs(optimizer.param_groups) do
    for _, p in ipairs(g.params) do
      local grad = C.em_grad(p)   -- a new reference, released below
      if grad ~= nil then
        local dev = C.em_tensor_device(grad)
        local key = tonumber(dev.type) .. ':' .. tonumber(dev.index)
        local list = by_device[key]
        if not list then
          list = {}
          by_device[key] = list
          order[#order + 1] = key
        end
        list[#list + 1] = grad
      end
    end
  end
  local found, err = false, nil
  for _, key in ipairs(order) do
    local list = by_device[key]
    if not err then
      local arr = ffi.new('em_tensor *[?]', #list)
      for i, grad in ipairs(list) do arr[i - 1] = grad end
      if C.em_amp_unscale_(#list, arr, inv_scale, found_out) ~= 0 then
        err = I.last_error()
      elseif found_out[0] ~= 0 then
        found = true
      end
    end
    for _, grad in ipairs(list) do C.em_tensor_release(grad) end
  end
  if err then throw(err) end
  return found
end

-- unscale_(optimizer): once per optimizer between two update() calls, before step().
function GradScaler:unscale_(optimizer)
  if not self._enabled then return end
  local st = optimizer_state(self, 'unscale_', optimizer)
  if st.stage == 'unscaled' then
    throw('GradScaler:unscale_: already called on this optimizer since the last update()')
  elseif st.stage == 'stepped' then
    throw('GradScaler:unscale_: called after step(); call it before step(), once per update()')
  end
  st.found_inf = unscale_grads(optimizer, 1.0 / self._scale)
  st.stage = 'unscaled'
end

-- step(optimizer, ...): optimizer:step(...)'s results, or nothing when it was skipped.
function GradScaler:step(optimizer, ...)
  if not self._enabled then return optimizer:step(...) end
  local st = optimizer_state(self, 'step', optimizer)
  if st.stage == 'stepped' then
    throw('GradScaler:step: already called on this optimizer since the last update()')
  end
  if st.stage == 'ready' then self:unscale_(optimizer) end
  st.stage = 'stepped'
  if st.found_inf then return end
  return optimizer:step(...)
end

-- update([new_scale]): the next iteration's scale (see the top of this file).
function GradScaler:update(new_scale)
  if not self._enabled then return end
  if new_scale ~= nil then
    if is_tensor(new_scale) then new_scale = new_scale:item() end
    need('GradScaler:update', 'new_scale', new_scale, function(v) return v > 0 and finite(v) end,
      'a finite number > 0 (or a one-element tensor)')
    self._scale = new_scale
  else
    local any_checked, found = false, false
    for _, st in pairs(self._per_optimizer) do
      if st.stage ~= 'ready' then
        any_checked = true
        found = found or st.found_inf
      end
    end
    if not any_checked then
      throw('GradScaler:update: no inf checks were recorded before update(); call step() (or unscale_()) first')
    end
    if found then
      self._scale = self._scale * self._backoff_factor
      self._growth_tracker = 0
    else
      local successful = self._growth_tracker + 1
      if successful == self._growth_interval then
        local grown = self._scale * self._growth_factor
        if finite(grown) then self._scale = grown end
        self._growth_tracker = 0
      else
        self._growth_tracker = successful
      end
    end
  end
  self._per_optimizer = setmetatable({}, { __mode = 'k' })
end

function GradScaler:state_dict()
  if not self._enabled then return {} end
  return { scale = self._scale, growth_factor = self._growth_factor, backoff_factor = self._backoff_factor,
    growth_interval = self._growth_interval, _growth_tracker = self._growth_tracker }
end

function GradScaler:load_state_dict(state)
  if type(state) ~= 'table' then throw('GradScaler:load_state_dict: expected a table, got ' .. describe(state)) end
  if not self._enabled then return end
  if state.scale == nil then
    throw('GradScaler:load_state_dict: the state is empty (it came from a disabled scaler)')
  end
  need('GradScaler:load_state_dict', 'scale', state.scale, function(v) return v > 0 and finite(v) end,
    'a finite number > 0')
  self._scale = state.scale
  self._growth_factor = state.growth_factor or self._growth_factor
  self._backoff_factor = state.backoff_factor or self._backoff_factor
  self._growth_interval = state.growth_interval or self._growth_interval
  self._growth_tracker = state._growth_tracker or 0
end

return M
