-- The sequence-model part of ember.nn.functional (functional.lua adds these to F):
--   scaled_dot_product_attention(q, k, v [, {mask, causal, dropout, scale}])   fused, in C
--   rms_norm(x, normalized_shape [, weight [, eps]])                            PyTorch 2.4's
--   gelu(x [, {approximate = 'none' | 'tanh'}])
--   conv1d(x, weight [, bias] [, {stride, padding, dilation, groups}])          through conv2d
local I = require 'ember.internal'
local C = I.C
local throw, describe, is_tensor = I.throw, I.describe, I.is_tensor
local need_tensor, check_opts, option_set = I.need_tensor, I.check_opts, I.option_set
local new_tensor, box = I.new, I.box

return function(F)
  local SDPA = option_set('mask', 'attn_mask', 'causal', 'is_causal', 'dropout', 'dropout_p', 'scale')
  -- scaled_dot_product_attention(q, k, v [, {mask = nil, causal = false, dropout = 0,
  -- scale = 1/sqrt(D)}]): softmax(q k^T * scale + mask) v over q [..., L, D], k [..., S, D],
  -- v [..., S, Dv] ([B, H, T, D] or [B, T, D]). mask broadcasts to [..., L, S]: bool (true =
  -- may attend, as PyTorch's) or additive floats. Fused: no [L, S] matrix is made, in the
  -- forward or the backward. (attn_mask, is_causal and dropout_p are PyTorch's spellings.)
  function F.scaled_dot_product_attention(q, k, v, opts)
    local op = 'scaled_dot_product_attention'
    need_tensor(op, q, 1)
    need_tensor(op, k, 2)
    need_tensor(op, v, 3)
    check_opts(op, opts, SDPA, 4)
    opts = opts or {}
    local mask = opts.mask
    if mask == nil then mask = opts.attn_mask end
    if mask ~= nil and not is_tensor(mask) then throw(op .. ': mask must be a tensor, got ' .. describe(mask)) end
    local causal = opts.causal
    if causal == nil then causal = opts.is_causal end
    local p = opts.dropout
    if p == nil then p = opts.dropout_p end
    p = p or 0
    if type(p) ~= 'number' then throw(op .. ': dropout must be a number, got ' .. describe(p)) end
    local scale = opts.scale or 0
    if type(scale) ~= 'number' or (opts.scale ~= nil and scale <= 0) then
      throw(op .. ': scale must be a positive number, got ' .. describe(opts.scale))
    end
    return new_tensor(C.em_nn_scaled_dot_product_attention(box, q, k, v, mask, causal and 1 or 0, p, scale))
  end

  -- rms_norm(x, normalized_shape [, weight [, eps]]): x / sqrt(mean(x^2) + eps) * weight
  -- over the last #normalized_shape dims; eps nil means the dtype's machine epsilon
  -- (PyTorch 2.4's default).
  local EPS = { float32 = 1.1920928955078125e-07, float64 = 2.220446049250313e-16 }
  function F.rms_norm(x, shape, weight, eps)
    need_tensor('rms_norm', x, 1)
    if type(shape) == 'number' then shape = { shape } end
    if type(shape) ~= 'table' or #shape == 0 or #shape > #x.shape then
      throw('rms_norm: normalized_shape must be a size or a list of at most ' .. #x.shape .. ' sizes, got ' ..
        describe(shape))
    end
    local nd, dims = #x.shape, {}
    for i = 1, #shape do
      if x.shape[nd - #shape + i] ~= shape[i] then
        throw(string.format('rms_norm: normalized_shape [%s] does not match the input'.."'".."s last dims [%s]",
          table.concat(shape, ', '), table.concat(x.shape, ', ')))
      end
      dims[i] = nd - #shape + i
    end
    if weight ~= nil and not is_tensor(weight) then
      throw('rms_norm: weight must be a tensor, got ' .. describe(weight))
    end
    eps = eps or EPS[x.dtype] or EPS.float32
    local y = x * ((x * x):mean(dims, true) + eps):rsqrt()
    return weight and y * weight or y
  end

  -- gelu(x [, {approximate = 'none'}]): 'none' is the erf form; 'tanh' is
  -- 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
  local gelu_erf = F.gelu
  local GELU = option_set('approximate')
  local K = math.sqrt(2 / math.pi)
  function F.gelu(x, opts)
    need_tensor('gelu', x, 1)
    check_opts('gelu', opts, GELU, 2)
    local a = opts and opts.approximate or 'none'
    if a == 'none' then return gelu_erf(x) end
    if a ~= 'tanh' then throw("gelu: approximate must be 'none' or 'tanh', got " .. describe(a)) end
    return x * (((x + x * x * x * 0.044715) * K):tanh() + 1) * 0.5
  end

  local CONV1D = option_set('stride', 'padding', 'dilation', 'groups')
  -- conv1d(x, weight [, bias] [, {stride = 1, padding = 0, dilation = 1, groups = 1}]):
  -- x [N, C, L] or [C, L], weight [C_out, C / groups, k]; conv2d over a height of 1.
  function F.conv1d(x, w, b, opts)
    if type(b) == 'table' and not is_tensor(b) and opts == nil then b, opts = nil, b end
    need_tensor('conv1d', x, 1)
    need_tensor('conv1d', w, 2)
    check_opts('conv1d', opts, CONV1D, 4)
    opts = opts or {}
    if #x.shape ~= 2 and #x.shape ~= 3 then
      throw('conv1d: expected the input to be [N, C, L] or [C, L], got [' .. table.concat(x.shape, ', ') .. ']')
    end
    if #w.shape ~= 3 then
      throw('conv1d: expected the weight to be 3-d [C_out, C / groups, k], got [' .. table.concat(w.shape, ', ') .. ']')
    end
    local function one(name, v, default)
      v = v == nil and default or v
      if type(v) == 'table' and #v == 1 then v = v[1] end
      if type(v) ~= 'number' then throw('conv1d: ' .. name .. ' must be an integer, got ' .. describe(v)) end
      return v
    end
    local y = F.conv2d(x:unsqueeze(#x.shape), w:unsqueeze(3), b, {
      stride = { 1, one('stride', opts.stride, 1) }, padding = { 0, one('padding', opts.padding, 0) },
      dilation = { 1, one('dilation', opts.dilation, 1) }, groups = opts.groups })
    return y:squeeze(#y.shape - 1)
  end
  return F
end
