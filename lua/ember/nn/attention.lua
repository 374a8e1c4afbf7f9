-- ember.nn attention layers and the pieces transformers use, after torch.nn:
--   MultiheadAttention(embed_dim, num_heads [, {dropout = 0, bias = true, batch_first = false}])
--   TransformerEncoderLayer(d_model, nhead [, {dim_feedforward = 2048, dropout = 0.1,
--       activation = 'relu' | 'gelu' | function, layer_norm_eps = 1e-5, batch_first = false,
--       norm_first = false, bias = true}])
--   RMSNorm(normalized_shape [, {eps = machine epsilon, elementwise_affine = true}])
--   Conv1d(in_channels, out_channels, kernel_size [, {stride, padding, dilation, groups, bias}])
-- Parameter names and initialisation are PyTorch's (self_attn.in_proj_weight [3E, E],
-- in_proj_bias, out_proj.weight/bias; linear1, linear2, norm1, norm2), so state dicts load
-- both ways. Attention runs through F.scaled_dot_product_attention (fused, in C) unless
-- the attention weights are asked for (need_weights, PyTorch's default in
-- MultiheadAttention; TransformerEncoderLayer never asks).
local ember = require 'ember'
local nn = setmetatable({}, { __index = require 'ember.nn.module' })
local layers = require 'ember.nn.layers'
local I = require 'ember.internal'
local throw, describe, is_tensor, release_temp = I.throw, I.describe, I.is_tensor, I.release_temp
local Module, init = nn.Module, require 'ember.nn.initializers'
local F = require 'ember.nn.functional'

local function need_size(cls, what, v)
  if type(v) ~= 'number' or v ~= math.floor(v) or v < 1 then
    throw(string.format('%s: %s must be a positive integer, got %s', cls, what,
      type(v) == 'number' and tostring(v) or describe(v)))
  end
  return v
end

local function shape_text(t) return '[' .. table.concat(t.shape, ', ') .. ']' end

-- ---------------------------------------------------------------- MultiheadAttention
local MHA = Module:extend('MultiheadAttention')
nn.MultiheadAttention = MHA

function MHA:init(embed_dim, num_heads, opts)
  need_size('MultiheadAttention', 'embed_dim', embed_dim)
  need_size('MultiheadAttention', 'num_heads', num_heads)
  I.check_opts('MultiheadAttention', opts, I.option_set('dropout', 'bias', 'batch_first', 'dtype', 'device'), 3)
  opts = opts or {}
  if embed_dim % num_heads ~= 0 then
    throw(string.format('MultiheadAttention: embed_dim (%d) must be divisible by num_heads (%d)', embed_dim, num_heads))
  end
  self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, math.floor(embed_dim / num_heads)
  self.dropout = opts.dropout or 0
  self.batch_first = opts.batch_first == true
  local to = { dtype = opts.dtype, device = opts.device }
  self.in_proj_weight = nn.Parameter(ember.empty(3 * embed_dim, embed_dim, to))
  if opts.bias ~= false then self.in_proj_bias = nn.Parameter(ember.empty(3 * embed_dim, to)) end
  self.out_proj = layers.Linear(embed_dim, embed_dim, { bias = opts.bias ~= false, dtype = opts.dtype,
    device = opts.device })
  self:reset_parameters()
end

-- PyTorch's _reset_parameters: xavier_uniform_ in_proj_weight, zero biases.
function MHA:reset_parameters()
  init.xavier_uniform_(self.in_proj_weight)
  if self.in_proj_bias then init.zeros_(self.in_proj_bias) end
  if self.out_proj.bias then init.zeros_(self.out_proj.bias) end
end

function MHA:extra_repr()
  return string.format('embed_dim=%d, num_heads=%d, dropout=%g, batch_first=%s', self.embed_dim, self.num_heads,
    self.dropout, tostring(self.batch_first))
end

-- The attention mask of F.scaled_dot_product_attention from PyTorch's two MHA masks
-- (bool: true = may NOT attend; float: added): attn_mask [L, S] or [B*H, L, S],
-- key_padding_mask [B, S]. Returns nil, a bool "may attend" mask or an additive float one.
local function merge_masks(self, attn_mask, kpm, B, L, S, dtype)
  local H = self.num_heads
  if attn_mask ~= nil then
    if not is_tensor(attn_mask) then
      throw('MultiheadAttention: attn_mask must be a tensor, got ' .. describe(attn_mask))
    end
    local s = attn_mask.shape
    if #s == 2 and s[1] == L and s[2] == S then
      attn_mask = attn_mask:view(1, 1, L, S)
    elseif #s == 3 and s[1] == B * H and s[2] == L and s[3] == S then
      attn_mask = attn_mask:view(B, H, L, S)
    else
      throw(string.format('MultiheadAttention: expected attn_mask of shape [%d, %d] or [%d, %d, %d], got %s', L, S,
        B * H, L, S, shape_text(attn_mask)))
    end
  end
  if kpm ~= nil then
    if not is_tensor(kpm) then throw('MultiheadAttention: key_padding_mask must be a tensor, got ' .. describe(kpm)) end
    if #kpm.shape ~= 2 or kpm.shape[1] ~= B or kpm.shape[2] ~= S then
      throw(string.format('MultiheadAttention: expected key_padding_mask of shape [%d, %d] (batch, source length), ' ..
        'got %s', B, S, shape_text(kpm)))
    end
    kpm = kpm:view(B, 1, 1, S)
  end
  local function as_float(m)
    if m.dtype ~= 'bool' then return m end
    return ember.zeros(m.shape, { dtype = dtype }):masked_fill(m, -math.huge)
  end
  if attn_mask == nil and kpm == nil then return nil end
  local any_float = (attn_mask and attn_mask.dtype ~= 'bool') or (kpm and kpm.dtype ~= 'bool')
  if any_float then
    local m = attn_mask and as_float(attn_mask)
    if kpm then m = m and m + as_float(kpm) or as_float(kpm) end
    return m
  end
  local blocked = attn_mask and kpm and attn_mask:logical_or(kpm) or attn_mask or kpm
  return blocked:logical_not()
end

-- forward(query, key, value [, {key_padding_mask, need_weights = true, attn_mask,
-- average_attn_weights = true, is_causal = false}]): query [L, B, E] ([B, L, E] with
-- batch_first, or unbatched [L, E]); returns the output (query's layout) and the attention
-- weights [B, L, S] (averaged over heads; [B, H, L, S] otherwise) or nil.
function MHA:forward(query, key, value, opts)
  local cls = 'MultiheadAttention'
  I.check_opts(cls, opts, I.option_set('key_padding_mask', 'need_weights', 'attn_mask', 'average_attn_weights',
    'is_causal'), 4)
  opts = opts or {}
  key, value = key or query, value or key or query
  for i, t in ipairs { query, key, value } do
    if not is_tensor(t) then throw(string.format('%s: argument %d must be a tensor, got %s', cls, i, describe(t))) end
  end
  local E, H, hd = self.embed_dim, self.num_heads, self.head_dim
  local nd = #query.shape
  if (nd ~= 2 and nd ~= 3) or query.shape[nd] ~= E or #key.shape ~= nd or #value.shape ~= nd or
      key.shape[nd] ~= E or value.shape[nd] ~= E then
    throw(string.format('%s: expected query, key and value of shape [L, B, %d]%s or [L, %d], got %s, %s, %s', cls, E,
      self.batch_first and ' (batch_first: [B, L, E])' or '', E, shape_text(query), shape_text(key), shape_text(value)))
  end
  local batched = nd == 3
  local function to_bfirst(t)
    if not batched then return t:unsqueeze(1) end
    return self.batch_first and t or t:transpose(1, 2)
  end
  local q, k, v = to_bfirst(query), to_bfirst(key), to_bfirst(value)
  local B, L, S = q.shape[1], q.shape[2], k.shape[2]
  if k.shape[1] ~= B or v.shape[1] ~= B or v.shape[2] ~= S then
    throw(string.format('%s: key %s and value %s must share batch and length with each other and the query %s', cls,
      shape_text(key), shape_text(value), shape_text(query)))
  end
  local w, b = self.in_proj_weight, self.in_proj_bias
  -- Three products from slices of the weight, also for self-attention: one [.., 3E] product
  -- sliced into q, k and v costs each slice's backward a zero-filled [.., 3E] gradient and
  -- their sum (about 1.8 M element passes a layer in char_gpt against 0.25 M for the
  -- weight's slices), and the [E, E] products are as fast a multiply-add.
  local function part(i) return w:narrow(1, i * E + 1, E), b and b:narrow(1, i * E + 1, E) end
  local w1, b1 = part(0)
  local w2, b2 = part(1)
  local w3, b3 = part(2)
  local pq, pk, pv = F.linear(q, w1, b1), F.linear(k, w2, b2), F.linear(v, w3, b3)
  local function heads(t, T) return t:reshape(B, T, H, hd):transpose(2, 3) end
  q, k, v = heads(pq, L), heads(pk, S), heads(pv, S)
  -- the projections and the views below are this call's own: handed back as soon as used
  -- (I.release_temp), so that what backward does not keep returns to the allocator at once
  release_temp(pq, q)
  release_temp(pk, k)
  release_temp(pv, v)
  local mask = merge_masks(self, opts.attn_mask, opts.key_padding_mask, B, L, S, q.dtype)
  local p = self.training and self.dropout or 0
  local out, weights
  if opts.need_weights == false then
    out = F.scaled_dot_product_attention(q, k, v, { mask = mask, causal = opts.is_causal, dropout = p })
    release_temp(q, out)
    release_temp(k, out)
    release_temp(v, out)
  else -- the explicit path: the [B, H, L, S] weights are a result
    local scores = q:matmul(k:transpose(3, 4)) * (1 / math.sqrt(hd))
    if opts.is_causal then
      local above = ember.arange(S):view(1, S):gt(ember.arange(L):view(L, 1)) -- key j > query i
      scores = scores:masked_fill(above, -math.huge)
    end
    if mask then
      scores = mask.dtype == 'bool' and scores:masked_fill(mask:logical_not(), -math.huge) or scores + mask
    end
    weights = scores:softmax(4)
    out = F.dropout(weights, p, p > 0):matmul(v)
    if opts.average_attn_weights ~= false then weights = weights:mean(2) end
    if not batched then weights = weights:squeeze(1) end
  end
  local merged = out:transpose(2, 3):reshape(B, L, E)
  release_temp(out, merged)
  out = self.out_proj(merged)
  if not nn.has_forward_hooks(self.out_proj) then release_temp(merged, out) end
  if not batched then out = out:squeeze(1)
  elseif not self.batch_first then out = out:transpose(1, 2) end
  return out, weights
end

-- ---------------------------------------------------------------- TransformerEncoderLayer
local TEL = Module:extend('TransformerEncoderLayer')
nn.TransformerEncoderLayer = TEL

function TEL:init(d_model, nhead, opts)
  local cls = 'TransformerEncoderLayer'
  need_size(cls, 'd_model', d_model)
  need_size(cls, 'nhead', nhead)
  I.check_opts(cls, opts, I.option_set('dim_feedforward', 'dropout', 'activation', 'layer_norm_eps', 'batch_first',
    'norm_first', 'bias', 'dtype', 'device'), 3)
  opts = opts or {}
  local ff, p = opts.dim_feedforward or 2048, opts.dropout or 0.1
  local bias, to = opts.bias ~= false, { dtype = opts.dtype, device = opts.device }
  local act = opts.activation or 'relu'
  if act == 'relu' then self.activation = F.relu
  elseif act == 'gelu' then self.activation = F.gelu
  elseif type(act) == 'function' then self.activation = act
  else throw(cls .. ": activation must be 'relu', 'gelu' or a function, got " .. describe(act)) end
  self.activation_name = type(act) == 'string' and act or 'function'
  self.norm_first = opts.norm_first == true
  self.self_attn = MHA(d_model, nhead, { dropout = p, bias = bias, batch_first = opts.batch_first, dtype = to.dtype,
    device = to.device })
  self.linear1 = layers.Linear(d_model, ff, { bias = bias, dtype = to.dtype, device = to.device })
  self.dropout = layers.Dropout(p)
  self.linear2 = layers.Linear(ff, d_model, { bias = bias, dtype = to.dtype, device = to.device })
  local eps = opts.layer_norm_eps or 1e-5
  self.norm1 = layers.LayerNorm(d_model, { eps = eps, bias = bias, dtype = to.dtype, device = to.device })
  self.norm2 = layers.LayerNorm(d_model, { eps = eps, bias = bias, dtype = to.dtype, device = to.device })
  self.dropout1 = layers.Dropout(p)
  self.dropout2 = layers.Dropout(p)
end

-- forward(src [, {src_mask, src_key_padding_mask, is_causal = false}])
function TEL:forward(src, opts)
  I.check_opts('TransformerEncoderLayer', opts, I.option_set('src_mask', 'src_key_padding_mask', 'is_causal'), 2)
  opts = opts or {}
  -- Intermediates go back to the runtime once used (I.release_temp), unless a hook may have
  -- kept one or the activation is the caller's function: with a char-GPT's many
  -- intermediates the collector otherwise ran several full collections a step, and the
  -- memory they freed came back cold.
  local own = not self:_hooked_within() and self.activation_name ~= 'function'
  local rel = own and release_temp or function() end
  local function sa(x)
    local y = self.self_attn(x, x, x, { attn_mask = opts.src_mask, key_padding_mask = opts.src_key_padding_mask,
      need_weights = false, is_causal = opts.is_causal })
    local r = self.dropout1(y)
    rel(y, r)
    return r
  end
  local function ff(x)
    local h = self.linear1(x)
    local a = self.activation(h)
    rel(h, a)
    local d = self.dropout(a)
    rel(a, d)
    local o = self.linear2(d)
    rel(d, o)
    local r = self.dropout2(o)
    rel(o, r)
    return r
  end
  local x = src
  if self.norm_first then
    local n1 = self.norm1(x)
    local a = sa(n1)
    rel(n1, a, x)
    local x1 = x + a
    rel(a, x1, x)
    local n2 = self.norm2(x1)
    local f = ff(n2)
    rel(n2, f, x1)
    local out = x1 + f
    rel(f, out, x1)
    rel(x1, out, x)
    return out
  end
  local a = sa(x)
  local s1 = x + a
  rel(a, s1, x)
  local x1 = self.norm1(s1)
  rel(s1, x1, x)
  local f = ff(x1)
  local s2 = x1 + f
  rel(f, s2, x1)
  rel(x1, s2, x)
  local out = self.norm2(s2)
  rel(s2, out)
  return out
end

-- True when this layer or one of its parts has forward hooks (they may keep results).
local TEL_PARTS = { 'self_attn', 'linear1', 'linear2', 'norm1', 'norm2', 'dropout', 'dropout1', 'dropout2' }
function TEL:_hooked_within()
  if nn.has_forward_hooks(self) or nn.has_forward_hooks(self.self_attn.out_proj) then return true end
  for _, name in ipairs(TEL_PARTS) do
    local m = self[name]
    if m == nil or nn.has_forward_hooks(m) then return true end
  end
  return false
end

-- ---------------------------------------------------------------- RMSNorm
local RMSNorm = Module:extend('RMSNorm')
nn.RMSNorm = RMSNorm
function RMSNorm:init(shape, opts)
  if type(shape) == 'number' then shape = { shape } end
  if type(shape) ~= 'table' or #shape == 0 then
    throw('RMSNorm: normalized_shape must be a size or a list of sizes, got ' .. describe(shape))
  end
  I.check_opts('RMSNorm', opts, I.option_set('eps', 'elementwise_affine', 'dtype', 'device'), 2)
  opts = opts or {}
  self.normalized_shape, self.eps = shape, opts.eps
  if opts.elementwise_affine ~= false then
    self.weight = nn.Parameter(ember.ones(shape, { dtype = opts.dtype, device = opts.device }))
  end
end
function RMSNorm:forward(x) return F.rms_norm(x, self.normalized_shape, self.weight, self.eps) end
function RMSNorm:extra_repr()
  return string.format('(%s), eps=%s, elementwise_affine=%s', table.concat(self.normalized_shape, ', '),
    tostring(self.eps), tostring(self.weight ~= nil))
end

-- ---------------------------------------------------------------- Conv1d
local Conv1d = Module:extend('Conv1d')
nn.Conv1d = Conv1d
function Conv1d:init(in_channels, out_channels, kernel_size, opts)
  local cls = 'Conv1d'
  need_size(cls, 'in_channels', in_channels)
  need_size(cls, 'out_channels', out_channels)
  need_size(cls, 'kernel_size', kernel_size)
  I.check_opts(cls, opts, I.option_set('stride', 'padding', 'dilation', 'groups', 'bias', 'dtype', 'device'), 4)
  opts = opts or {}
  local groups = opts.groups or 1
  if type(groups) ~= 'number' or groups < 1 or in_channels % groups ~= 0 or out_channels % groups ~= 0 then
    throw(string.format('Conv1d: groups must be a positive integer dividing in_channels (%d) and out_channels (%d), ' ..
      'got %s', in_channels, out_channels, tostring(groups)))
  end
  self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, kernel_size
  self.stride, self.padding = opts.stride or 1, opts.padding or 0
  self.dilation, self.groups = opts.dilation or 1, groups
  local to = { dtype = opts.dtype, device = opts.device }
  self.weight = nn.Parameter(ember.empty(out_channels, in_channels / groups, kernel_size, to))
  if opts.bias ~= false then self.bias = nn.Parameter(ember.empty(out_channels, to)) end
  init.kaiming_uniform_(self.weight, { a = math.sqrt(5) })
  if self.bias then
    local bound = 1 / math.sqrt(in_channels / groups * kernel_size)
    init.uniform_(self.bias, -bound, bound)
  end
end
function Conv1d:forward(x)
  return F.conv1d(x, self.weight, self.bias, { stride = self.stride, padding = self.padding, dilation = self.dilation,
    groups = self.groups })
end
function Conv1d:extra_repr()
  return string.format('%d, %d, kernel_size=(%d,), stride=(%d,)', self.in_channels, self.out_channels,
    self.kernel_size, self.stride)
end

return nn
