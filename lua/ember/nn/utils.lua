-- ember.nn.utils: gradient clipping over whole parameter lists (one fused C call).
local ffi = require 'ffi'

local I = require 'ember.internal'
local C = I.C
local throw, describe, is_tensor = I.throw, I.describe, I.is_tensor

local utils = {}

-- A list of tensors from a tensor, a list of tensors or a module's parameters().
local function param_list(op, params)
  if is_tensor(params) then return { params } end
  if type(params) ~= 'table' then
    throw(string.format('%s: expected a tensor or a list of tensors (model:parameters()), got %s', op,
      describe(params)))
  end
  for i, p in ipairs(params) do
    if not is_tensor(p) then
      throw(string.format('%s: expected a tensor at position %d of the parameter list, got %s', op, i, describe(p)))
    end
  end
  return params
end

local total_out = ffi.new('double[1]')
-- clip_grad_norm_(params, max_norm [, norm_type = 2]): scales every gradient in place
-- so that their global norm is at most max_norm (PyTorch's formula: by
-- max_norm / (norm + 1e-6) when that is below 1); norm_type may be math.huge ('inf').
-- Returns the norm before clipping (a number). Parameters without .grad are skipped.
function utils.clip_grad_norm_(params, max_norm, norm_type)
  params = param_list('clip_grad_norm_', params)
  I.need_number('clip_grad_norm_', max_norm, 2, 'a number (max_norm)')
  if norm_type == 'inf' then norm_type = math.huge end
  norm_type = norm_type or 2
  I.need_number('clip_grad_norm_', norm_type, 3, "a number or 'inf' (norm_type)")
  local n = #params
  local grads = ffi.new('em_tensor *[?]', n + 1)
  for i = 1, n do grads[i - 1] = C.em_grad(params[i]) end   -- new references, released below
  local status = C.em_optim_clip_grad_norm(n, grads, max_norm, norm_type, total_out)
  for i = 0, n - 1 do
    if grads[i] ~= nil then C.em_tensor_release(grads[i]) end
  end
  I.check(status)
  return total_out[0]
end

-- clip_grad_value_(params, clip_value): clamps every gradient into [-clip_value,
-- clip_value] in place (one C call). Parameters without .grad are skipped.
function utils.clip_grad_value_(params, clip_value)
  params = param_list('clip_grad_value_', params)
  I.need_number('clip_grad_value_', clip_value, 2, 'a number (clip_value)')
  local n = #params
  local grads = ffi.new('em_tensor *[?]', n + 1)
  for i = 1, n do grads[i - 1] = C.em_grad(params[i]) end
  local status = C.em_optim_clip_grad_value(n, grads, clip_value)
  for i = 0, n - 1 do
    if grads[i] ~= nil then C.em_tensor_release(grads[i]) end
  end
  I.check(status)
end

return utils
