-- ember.nn.functional: the stateless neural-network operations (ember/nn.h), as
-- torch.nn.functional. Every function records gradients when an input requires grad.
--
-- Lua conventions: class targets, embedding indices, padding_idx and ignore_index are
-- 1-based class values (the runtime is told base = 1); dims are 1-based. Optional
-- arguments come in an options table, e.g.
--   F.conv2d(x, w, b, {stride = 2, padding = 1})
--   F.cross_entropy(logits, target, {label_smoothing = 0.1, reduction = 'sum'})
-- A size or stride may be a number or a pair {h, w}.

local ember = require 'ember'
local I = require 'ember.internal'
local C = I.C
local throw, describe, is_tensor = I.throw, I.describe, I.is_tensor
local need_tensor, check_opts, option_set = I.need_tensor, I.check_opts, I.option_set
local new_tensor, box = I.new, I.box

local F = {}

local function opt_tensor(op, x, what)
  if x ~= nil and not is_tensor(x) then
    throw(string.format('%s: %s must be a tensor or nil, got %s', op, what, describe(x)))
  end
  return x
end

-- A number or {h, w} as two integers.
local function pair(op, what, v, default)
  if v == nil then v = default end
  if type(v) == 'number' then v = { v, v } end
  if type(v) ~= 'table' or #v ~= 2 or type(v[1]) ~= 'number' or type(v[2]) ~= 'number'
      or v[1] ~= math.floor(v[1]) or v[2] ~= math.floor(v[2]) then
    throw(string.format('%s: %s must be an integer or a pair {h, w} of integers, got %s', op, what,
      type(v) == 'table' and '{' .. table.concat(v, ', ') .. '}' or describe(v)))
  end
  return v[1], v[2]
end

local REDUCTIONS = { none = C.EM_REDUCTION_NONE, mean = C.EM_REDUCTION_MEAN, sum = C.EM_REDUCTION_SUM }
local function reduction_of(op, r)
  if r == nil then return C.EM_REDUCTION_MEAN end
  local v = REDUCTIONS[r]
  if v == nil then
    throw(string.format("%s: reduction must be 'mean', 'sum' or 'none', got %s", op,
      type(r) == 'string' and ("'" .. r .. "'") or describe(r)))
  end
  return v
end

-- ---------------------------------------------------------------- linear, conv, pooling
-- linear(x, weight [, bias]): x @ weight^T + bias; weight [out, in].
function F.linear(x, w, b)
  need_tensor('linear', x, 1)
  need_tensor('linear', w, 2)
  return new_tensor(C.em_nn_linear(box, x, w, opt_tensor('linear', b, 'bias')))
end

-- linear_relu(x, weight [, bias]): relu(x @ weight^T + bias) as one op (what nn.Sequential
-- runs for a Linear followed by a ReLU): on the CPU in float32, one oneDNN matmul that adds
-- the bias and applies the ReLU as it writes, where oneDNN is faster for the size.
function F.linear_relu(x, w, b)
  need_tensor('linear_relu', x, 1)
  need_tensor('linear_relu', w, 2)
  return new_tensor(C.em_nn_linear_relu(box, x, w, opt_tensor('linear_relu', b, 'bias')))
end

local CONV = option_set('stride', 'padding', 'dilation', 'groups')
-- conv2d(x, weight [, bias] [, {stride = 1, padding = 0, dilation = 1, groups = 1}]):
-- x [N, C, H, W] or [C, H, W]; weight [C_out, C / groups, kH, kW].
function F.conv2d(x, w, b, opts)
  if type(b) == 'table' and opts == nil then b, opts = nil, b end
  need_tensor('conv2d', x, 1)
  need_tensor('conv2d', w, 2)
  check_opts('conv2d', opts, CONV, 4)
  opts = opts or {}
  local sh, sw = pair('conv2d', 'stride', opts.stride, 1)
  local ph, pw = pair('conv2d', 'padding', opts.padding, 0)
  local dh, dw = pair('conv2d', 'dilation', opts.dilation, 1)
  local groups = opts.groups or 1
  I.need_integer('conv2d', groups, 4, 'an integer (groups)')
  return new_tensor(C.em_nn_conv2d(box, x, w, opt_tensor('conv2d', b, 'bias'), sh, sw, ph, pw, dh, dw, groups))
end

local MAXPOOL = option_set('stride', 'padding', 'dilation', 'ceil_mode')
-- max_pool2d(x, kernel_size [, {stride = kernel_size, padding = 0, dilation = 1, ceil_mode = false}])
function F.max_pool2d(x, kernel, opts)
  need_tensor('max_pool2d', x, 1)
  check_opts('max_pool2d', opts, MAXPOOL, 3)
  opts = opts or {}
  local kh, kw = pair('max_pool2d', 'kernel_size', kernel)
  local sh, sw = pair('max_pool2d', 'stride', opts.stride, { kh, kw })
  local ph, pw = pair('max_pool2d', 'padding', opts.padding, 0)
  local dh, dw = pair('max_pool2d', 'dilation', opts.dilation, 1)
  return new_tensor(C.em_nn_max_pool2d(box, x, kh, kw, sh, sw, ph, pw, dh, dw, opts.ceil_mode and 1 or 0))
end

local AVGPOOL = option_set('stride', 'padding', 'ceil_mode', 'count_include_pad')
-- avg_pool2d(x, kernel_size [, {stride = kernel_size, padding = 0, ceil_mode = false,
-- count_include_pad = true}])
function F.avg_pool2d(x, kernel, opts)
  need_tensor('avg_pool2d', x, 1)
  check_opts('avg_pool2d', opts, AVGPOOL, 3)
  opts = opts or {}
  local kh, kw = pair('avg_pool2d', 'kernel_size', kernel)
  local sh, sw = pair('avg_pool2d', 'stride', opts.stride, { kh, kw })
  local ph, pw = pair('avg_pool2d', 'padding', opts.padding, 0)
  return new_tensor(C.em_nn_avg_pool2d(box, x, kh, kw, sh, sw, ph, pw, opts.ceil_mode and 1 or 0,
    opts.count_include_pad == false and 0 or 1))
end

-- adaptive_avg_pool2d(x, output_size): output_size a number or {h, w}.
function F.adaptive_avg_pool2d(x, size)
  need_tensor('adaptive_avg_pool2d', x, 1)
  local oh, ow = pair('adaptive_avg_pool2d', 'output_size', size)
  return new_tensor(C.em_nn_adaptive_avg_pool2d(box, x, oh, ow))
end

-- ---------------------------------------------------------------- normalisation, dropout
local BN = option_set('weight', 'bias', 'training', 'momentum', 'eps')
-- batch_norm(x, running_mean, running_var [, {weight, bias, training = false,
-- momentum = 0.1, eps = 1e-5}]): running statistics may be nil (then training must be
-- true); in training they are updated in place.
function F.batch_norm(x, running_mean, running_var, opts)
  need_tensor('batch_norm', x, 1)
  opt_tensor('batch_norm', running_mean, 'running_mean')
  opt_tensor('batch_norm', running_var, 'running_var')
  check_opts('batch_norm', opts, BN, 4)
  opts = opts or {}
  return new_tensor(C.em_nn_batch_norm(box, x, opt_tensor('batch_norm', opts.weight, 'weight'),
    opt_tensor('batch_norm', opts.bias, 'bias'), running_mean, running_var, opts.training and 1 or 0,
    opts.momentum or 0.1, opts.eps or 1e-5))
end

local LN = option_set('weight', 'bias', 'eps')
-- layer_norm(x, normalized_shape [, {weight, bias, eps = 1e-5}]): normalises over the
-- last #normalized_shape dims (normalized_shape a number or a table of sizes).
function F.layer_norm(x, shape, opts)
  need_tensor('layer_norm', x, 1)
  if type(shape) == 'number' then shape = { shape } end
  if type(shape) ~= 'table' or #shape == 0 then
    throw('layer_norm: normalized_shape must be a size or a table of sizes, got ' .. describe(shape))
  end
  local xs = x.shape
  local ok = #shape <= #xs
  for i = 1, #shape do ok = ok and xs[#xs - #shape + i] == shape[i] end
  if not ok then
    throw(string.format('layer_norm: normalized_shape [%s] does not match the last dims of the input [%s]',
      table.concat(shape, ', '), table.concat(xs, ', ')))
  end
  check_opts('layer_norm', opts, LN, 3)
  opts = opts or {}
  return new_tensor(C.em_nn_layer_norm(box, x, #shape, opt_tensor('layer_norm', opts.weight, 'weight'),
    opt_tensor('layer_norm', opts.bias, 'bias'), opts.eps or 1e-5))
end

local DROPOUT = option_set('p', 'training')
-- dropout(x [, p = 0.5 [, training = true]]) or dropout(x, {p =, training =})
function F.dropout(x, p, training)
  need_tensor('dropout', x, 1)
  if type(p) == 'table' then
    check_opts('dropout', p, DROPOUT, 2)
    p, training = p.p, p.training
  end
  if p == nil then p = 0.5 end
  I.need_number('dropout', p, 2, 'a number (p)')
  if training == nil then training = true end
  return new_tensor(C.em_nn_dropout(box, x, p, training and 1 or 0))
end

-- ---------------------------------------------------------------- embeddings
-- Indices given as a Lua table or number are made on the weight's device.
local function index_tensor(op, idx, weight)
  if is_tensor(idx) then return idx end
  if type(idx) == 'table' or type(idx) == 'number' then
    return ember.tensor(idx, { dtype = 'int64', device = weight.device })
  end
  throw(string.format('%s: expected an index tensor or a table of indices, got %s', op, describe(idx)))
end

-- padding_idx: 1-based, negative from the end; nil -> -1 (none).
local function padding_row(op, weight, pad)
  if pad == nil then return -1 end
  I.need_integer(op, pad, 3, 'an integer (padding_idx)')
  if pad < 0 then pad = pad + weight.shape[1] + 1 end
  return pad
end

-- max_norm: rows looked up are renormalised in place first (outside autograd), as PyTorch.
local function renorm(op, weight, idx, opts)
  if opts.max_norm == nil then return end
  I.need_number(op, opts.max_norm, 3, 'a number (max_norm)')
  local p = opts.norm_type or 2
  I.need_number(op, p, 3, 'a number (norm_type)')
  I.check(C.em_nn_embedding_renorm_(weight, idx, opts.max_norm, p, 1))
end

local EMB = option_set('padding_idx', 'sparse', 'max_norm', 'norm_type')
-- embedding(indices, weight [, {padding_idx, sparse = false, max_norm, norm_type = 2}]):
-- rows of weight [num, dim] at the 1-based indices (any shape) -> [..., dim]; the
-- padding_idx row gets no gradient. sparse: weight.grad becomes a row-sparse
-- ember.SparseGrad (no [num, dim] gradient is made). max_norm: each row looked up whose
-- norm exceeds it is scaled down to it in place first.
function F.embedding(indices, weight, opts)
  need_tensor('embedding', weight, 2)
  check_opts('embedding', opts, EMB, 3)
  opts = opts or {}
  local pad = padding_row('embedding', weight, opts.padding_idx)
  local idx = index_tensor('embedding', indices, weight)
  renorm('embedding', weight, idx, opts)
  return new_tensor(C.em_nn_embedding_ex(box, weight, idx, pad, opts.sparse and 1 or 0, 1))
end

local BAG_MODES = { sum = C.EM_BAG_SUM, mean = C.EM_BAG_MEAN, max = C.EM_BAG_MAX }
local BAG = option_set('offsets', 'mode', 'per_sample_weights', 'padding_idx', 'sparse', 'max_norm', 'norm_type',
  'include_last_offset')
-- embedding_bag(indices, weight [, {offsets, mode = 'mean', per_sample_weights,
-- padding_idx, sparse = false, max_norm, norm_type = 2, include_last_offset = false}]):
-- indices 2-d [B, L] (one bag per row), or 1-d with offsets (the 1-based start of each
-- bag in indices, as a tensor or table). mode 'sum', 'mean' or 'max'. padding_idx
-- entries are left out of their bags (no value, no count, no gradient); with
-- include_last_offset, offsets has B + 1 entries, the last one past the last bag's end
-- (1-based, so #indices + 1 for all of them). sparse and max_norm as for embedding.
function F.embedding_bag(indices, weight, opts)
  need_tensor('embedding_bag', weight, 2)
  check_opts('embedding_bag', opts, BAG, 3)
  opts = opts or {}
  local mode = BAG_MODES[opts.mode or 'mean']
  if mode == nil then
    throw(string.format("embedding_bag: mode must be 'sum', 'mean' or 'max', got %s", describe(opts.mode)))
  end
  local offsets = opts.offsets
  if offsets ~= nil then
    -- The runtime counts offsets from 0 in any base; Lua gives 1-based starts.
    offsets = index_tensor('embedding_bag', offsets, weight)
    offsets = ember.no_grad(function() return offsets:to('int64') - 1 end)
  end
  local pad = padding_row('embedding_bag', weight, opts.padding_idx)
  local idx = index_tensor('embedding_bag', indices, weight)
  renorm('embedding_bag', weight, idx, opts)
  return new_tensor(C.em_nn_embedding_bag_ex(box, weight, idx, offsets, mode,
    opt_tensor('embedding_bag', opts.per_sample_weights, 'per_sample_weights'), pad,
    opts.include_last_offset and 1 or 0, opts.sparse and 1 or 0, 1))
end

-- ---------------------------------------------------------------- activations
local function unop(name)
  return function(x)
    need_tensor(name, x, 1)
    return x[name](x)
  end
end
F.relu, F.gelu, F.silu, F.tanh, F.sigmoid = unop('relu'), unop('gelu'), unop('silu'), unop('tanh'), unop('sigmoid')
-- softmax(x, dim) / log_softmax(x, dim): dim is required (1-based, negative from the end).
function F.softmax(x, dim)
  need_tensor('softmax', x, 1)
  return x:softmax(dim)
end
function F.log_softmax(x, dim)
  need_tensor('log_softmax', x, 1)
  return x:log_softmax(dim)
end

-- ---------------------------------------------------------------- losses
local CE = option_set('weight', 'ignore_index', 'reduction', 'label_smoothing')
-- cross_entropy(logits, target [, {weight, ignore_index = -100, reduction = 'mean',
-- label_smoothing = 0}]): logits [N, C] (or [N, C, d...]); target 1-based class indices
-- [N] (int64) or class probabilities shaped like logits.
function F.cross_entropy(logits, target, opts)
  need_tensor('cross_entropy', logits, 1)
  need_tensor('cross_entropy', target, 2)
  check_opts('cross_entropy', opts, CE, 3)
  opts = opts or {}
  local ls = opts.label_smoothing or 0
  I.need_number('cross_entropy', ls, 3, 'a number (label_smoothing)')
  return new_tensor(C.em_nn_cross_entropy(box, logits, target, opt_tensor('cross_entropy', opts.weight, 'weight'),
    opts.ignore_index or -100, ls, reduction_of('cross_entropy', opts.reduction), 1))
end

local NLL = option_set('weight', 'ignore_index', 'reduction')
-- nll_loss(log_probs, target [, {weight, ignore_index = -100, reduction = 'mean'}])
function F.nll_loss(log_probs, target, opts)
  need_tensor('nll_loss', log_probs, 1)
  need_tensor('nll_loss', target, 2)
  check_opts('nll_loss', opts, NLL, 3)
  opts = opts or {}
  return new_tensor(C.em_nn_nll_loss(box, log_probs, target, opt_tensor('nll_loss', opts.weight, 'weight'),
    opts.ignore_index or -100, reduction_of('nll_loss', opts.reduction), 1))
end

-- count_correct(logits, target): how many rows of logits [N, C] have their largest value
-- at the target class (1-based [N], int64 or int32), as argmax(2):eq(target):sum() counts
-- them (the first largest wins; NaN counts as largest), in one pass: a number.
local counted = require('ffi').new('int64_t[1]')
function F.count_correct(logits, target)
  need_tensor('count_correct', logits, 1)
  need_tensor('count_correct', target, 2)
  I.check(C.em_nn_count_correct(counted, logits, target, 1))
  return tonumber(counted[0])
end

local RED = option_set('reduction')
-- mse_loss(input, target [, {reduction = 'mean'}])
function F.mse_loss(input, target, opts)
  need_tensor('mse_loss', input, 1)
  need_tensor('mse_loss', target, 2)
  check_opts('mse_loss', opts, RED, 3)
  return new_tensor(C.em_nn_mse_loss(box, input, target, reduction_of('mse_loss', opts and opts.reduction)))
end

local BCE = option_set('weight', 'pos_weight', 'reduction')
-- binary_cross_entropy_with_logits(logits, target [, {weight, pos_weight, reduction = 'mean'}])
function F.binary_cross_entropy_with_logits(logits, target, opts)
  local op = 'binary_cross_entropy_with_logits'
  need_tensor(op, logits, 1)
  need_tensor(op, target, 2)
  check_opts(op, opts, BCE, 3)
  opts = opts or {}
  return new_tensor(C.em_nn_binary_cross_entropy_with_logits(box, logits, target,
    opt_tensor(op, opts.weight, 'weight'), opt_tensor(op, opts.pos_weight, 'pos_weight'),
    reduction_of(op, opts.reduction)))
end

-- pad(x, pads [, mode = 'constant' [, value = 0]]): pads {left, right} for the last dim,
-- then the one before, ... as PyTorch orders them; modes constant, reflect, replicate,
-- circular. one_hot(target [, num_classes]): 1-based class values (as cross_entropy's
-- targets) to int64 one-hot rows. Both live in ember.tensor.ops.
local ops = require 'ember.tensor.core'
F.pad, F.one_hot = ops.pad, ops.one_hot
-- attention, rms_norm, gelu's tanh form, conv1d (functional_seq.lua)
require('ember.nn.functional_seq')(F)

return F
