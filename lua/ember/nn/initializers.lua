-- ember.nn.init: in-place initialisers, as torch.nn.init. Each fills t without recording
-- (parameters are leaves that require grad) and returns t. Random ones draw from ember's
-- Philox generator (ember.manual_seed).
--
-- fan_in and fan_out follow PyTorch: for a [out, in, k...] weight, fan_in = in * prod(k)
-- and fan_out = out * prod(k).
local ember = require 'ember'
local I = require 'ember.internal'
local throw, describe, is_tensor = I.throw, I.describe, I.is_tensor

local init = {}

local function need(op, t)
  if not is_tensor(t) then throw(string.format('%s: expected a tensor, got %s', op, describe(t))) end
  return t
end

local function fill(op, t, fn)
  need(op, t)
  ember.no_grad(fn)
  return t
end

-- fans(t): fan_in, fan_out of a weight with at least 2 dims.
function init.calculate_fans(t)
  need('calculate_fans', t)
  local s = t.shape
  if #s < 2 then
    throw(string.format('calculate_fans: fan in and fan out need a tensor with at least 2 dims, got [%s]',
      table.concat(s, ', ')))
  end
  local field = 1
  for i = 3, #s do field = field * s[i] end
  return s[2] * field, s[1] * field
end

-- calculate_gain(nonlinearity [, param]): the recommended gain, as PyTorch's table.
function init.calculate_gain(nonlinearity, param)
  if nonlinearity == 'linear' or nonlinearity == 'sigmoid' or nonlinearity:match('^conv') then return 1 end
  if nonlinearity == 'tanh' then return 5 / 3 end
  if nonlinearity == 'relu' then return math.sqrt(2) end
  if nonlinearity == 'leaky_relu' then
    local slope = param or 0.01
    return math.sqrt(2 / (1 + slope * slope))
  end
  if nonlinearity == 'selu' then return 3 / 4 end
  throw(string.format("calculate_gain: unknown nonlinearity '%s'", tostring(nonlinearity)))
end

local function fan_of(op, t, mode)
  local fan_in, fan_out = init.calculate_fans(t)
  if mode == nil or mode == 'fan_in' then return fan_in end
  if mode == 'fan_out' then return fan_out end
  throw(string.format("%s: mode must be 'fan_in' or 'fan_out', got %s", op, describe(mode)))
end

function init.uniform_(t, a, b)
  return fill('uniform_', t, function() t:uniform_(a or 0, b or 1) end)
end
function init.normal_(t, mean, std)
  return fill('normal_', t, function() t:normal_(mean or 0, std or 1) end)
end
function init.constant_(t, v)
  return fill('constant_', t, function() t:fill_(v) end)
end
function init.zeros_(t) return init.constant_(t, 0) end
function init.ones_(t) return init.constant_(t, 1) end

-- kaiming_uniform_(t [, {a = 0, mode = 'fan_in', nonlinearity = 'leaky_relu'}]):
-- U(-bound, bound) with bound = gain * sqrt(3 / fan). PyTorch's Linear and Conv2d use
-- a = sqrt(5), which gives bound = 1 / sqrt(fan_in).
function init.kaiming_uniform_(t, opts)
  need('kaiming_uniform_', t)
  I.check_opts('kaiming_uniform_', opts, I.option_set('a', 'mode', 'nonlinearity'), 2)
  opts = opts or {}
  local fan = fan_of('kaiming_uniform_', t, opts.mode)
  local gain = init.calculate_gain(opts.nonlinearity or 'leaky_relu', opts.a or 0)
  local bound = fan > 0 and gain * math.sqrt(3 / fan) or 0
  return init.uniform_(t, -bound, bound)
end

-- kaiming_normal_(t [, {a = 0, mode = 'fan_in', nonlinearity = 'leaky_relu'}])
function init.kaiming_normal_(t, opts)
  need('kaiming_normal_', t)
  I.check_opts('kaiming_normal_', opts, I.option_set('a', 'mode', 'nonlinearity'), 2)
  opts = opts or {}
  local fan = fan_of('kaiming_normal_', t, opts.mode)
  local gain = init.calculate_gain(opts.nonlinearity or 'leaky_relu', opts.a or 0)
  return init.normal_(t, 0, fan > 0 and gain / math.sqrt(fan) or 0)
end

-- xavier_uniform_(t [, gain = 1]): U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)).
function init.xavier_uniform_(t, gain)
  local fan_in, fan_out = init.calculate_fans(need('xavier_uniform_', t))
  local a = (gain or 1) * math.sqrt(6 / (fan_in + fan_out))
  return init.uniform_(t, -a, a)
end

-- xavier_normal_(t [, gain = 1]): N(0, gain * sqrt(2 / (fan_in + fan_out))).
function init.xavier_normal_(t, gain)
  local fan_in, fan_out = init.calculate_fans(need('xavier_normal_', t))
  return init.normal_(t, 0, (gain or 1) * math.sqrt(2 / (fan_in + fan_out)))
end

return init
