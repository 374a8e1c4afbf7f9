-- ember.tensor.math: elementwise operations (with broadcasting and dtype promotion, done by
-- the runtime), the arithmetic operators, reductions and linear algebra. Positions that
-- reductions return (argmax, max(dim)'s indices, sort, topk) are 1-based.
--
-- Every binary operation takes a tensor or a number on either side; in-place forms end in
-- an underscore and return self. Operators: + - * / ^ and unary minus are elementwise
-- (* is not matmul); == compares identity as for any Lua value, so use eq() for values.
local I = require 'ember.tensor.core'

local M = {}   -- module-level functions; init.lua puts them in ember
local C, Tensor, mt = I.C, I.Tensor, I.mt
local throw, describe, arg_error = I.throw, I.describe, I.arg_error
local new_tensor, new_pair, into, done = I.new, I.new_pair, I.into, I.done
local box, box2 = I.box, I.box2
local cdim, alive, is_tensor = I.cdim, I.alive, I.is_tensor
local need_tensor, need_number, need_integer = I.need_tensor, I.need_number, I.need_integer
local check_opts, option_set, is_opts = I.check_opts, I.option_set, I.is_opts
local dims_buf = I.dims_buf
local recording, check_inplace, no_backward = I.recording, I.check_inplace, I.no_backward

local NAN = 0 / 0

-- ---------------------------------------------------------------- binary
-- a op b where either side may be a number (booleans count as 0 and 1).
local function binary(op, name, a, b)
  if type(b) == 'boolean' then b = b and 1 or 0 end
  if type(b) == 'number' then
    if is_tensor(a) then return new_tensor(C.em_ag_binary_scalar(op, box, a, b, 0)) end
  elseif is_tensor(b) then
    if is_tensor(a) then return new_tensor(C.em_ag_binary(op, box, a, b)) end
    if type(a) == 'boolean' then a = a and 1 or 0 end
    if type(a) == 'number' then return new_tensor(C.em_ag_binary_scalar(op, box, b, a, 1)) end
  else
    if not is_tensor(a) and type(a) ~= 'number' then
      throw(string.format('%s: expected a tensor as the first operand, got %s', name, describe(a)))
    end
    arg_error(name, 1, 'a tensor or number', b)
  end
  throw(string.format('%s: expected a tensor as the first operand, got %s', name, describe(a)))
end
I.binary = binary

-- In-place forms: the runtime refuses writes autograd cannot follow (em_check_inplace),
-- naming them as Lua does (add_, exp_, clamp_).
local function binary_(op, name, t, b)
  if type(b) == 'boolean' then b = b and 1 or 0 end
  if type(b) == 'number' then return done(C.em_binary_scalar(op, into(t), t, b, 0), t) end
  if is_tensor(b) then return done(C.em_binary(op, into(t), t, b), t) end
  arg_error(name, 1, 'a tensor or number', b)
end

local BINOPS = {
  add = C.EM_ADD, sub = C.EM_SUB, mul = C.EM_MUL, div = C.EM_DIV, pow = C.EM_POW,
  maximum = C.EM_MAXIMUM, minimum = C.EM_MINIMUM, fmod = C.EM_FMOD, atan2 = C.EM_ATAN2,
  eq = C.EM_EQ, ne = C.EM_NE, lt = C.EM_LT, le = C.EM_LE, gt = C.EM_GT, ge = C.EM_GE,
  logical_and = C.EM_LOGICAL_AND, logical_or = C.EM_LOGICAL_OR, logical_xor = C.EM_LOGICAL_XOR,
}
-- Comparisons and logical ops give bool, so they have no in-place form.
local NO_INPLACE = { eq = 1, ne = 1, lt = 1, le = 1, gt = 1, ge = 1, logical_and = 1, logical_or = 1,
  logical_xor = 1 }
for name, op in pairs(BINOPS) do
  Tensor[name] = function(a, b) return binary(op, name, a, b) end
  if not NO_INPLACE[name] then
    local iname = name .. '_'
    Tensor[iname] = function(t, b) return binary_(op, iname, t, b) end
  end
end
Tensor.greater, Tensor.less, Tensor.greater_equal, Tensor.less_equal = Tensor.gt, Tensor.lt, Tensor.ge, Tensor.le
Tensor.not_equal, Tensor.multiply, Tensor.divide, Tensor.subtract = Tensor.ne, Tensor.mul, Tensor.div, Tensor.sub

-- alpha as a number or {alpha = x}; the number form makes no table on hot paths.
local ALPHA = option_set('alpha')
local function alpha_of(op, x, n)
  if x == nil then return nil end
  if type(x) == 'number' then return x end
  check_opts(op, x, ALPHA, n)
  if x.alpha == nil then return nil end
  return need_number(op, x.alpha, n, 'a number (alpha)')
end

-- add(b [, alpha]): a + alpha * b; sub(b [, alpha]): a - alpha * b.
local function add_scaled(name, sign)
  local op = sign > 0 and C.EM_ADD or C.EM_SUB
  Tensor[name] = function(a, b, alpha)
    alpha = alpha_of(name, alpha, 2)
    if alpha == nil or alpha == 1 then return binary(op, name, a, b) end
    if is_tensor(a) and is_tensor(b) then
      if recording(a, b) then return binary(C.EM_ADD, name, a, binary(C.EM_MUL, name, b, sign * alpha)) end
      return new_tensor(C.em_add_scaled(box, a, b, sign * alpha))
    end
    if type(b) == 'number' then return binary(op, name, a, b * alpha) end
    return binary(op, name, a, binary(C.EM_MUL, name, b, alpha))
  end
  Tensor[name .. '_'] = function(t, b, alpha)
    alpha = alpha_of(name .. '_', alpha, 2)
    if alpha == nil or alpha == 1 then return binary_(op, name .. '_', t, b) end
    check_inplace(name .. '_', t, b)
    if is_tensor(b) then return done(C.em_add_scaled(into(t), t, b, sign * alpha), t) end
    if type(b) == 'number' then return binary_(op, name .. '_', t, b * alpha) end
    arg_error(name .. '_', 1, 'a tensor or number', b)
  end
end
add_scaled('add', 1)
add_scaled('sub', -1)

-- Operators. Lua only calls these when one side is a tensor.
mt.__add = function(a, b) return binary(C.EM_ADD, 'add', a, b) end
mt.__sub = function(a, b) return binary(C.EM_SUB, 'sub', a, b) end
mt.__mul = function(a, b) return binary(C.EM_MUL, 'mul', a, b) end
mt.__div = function(a, b) return binary(C.EM_DIV, 'div', a, b) end
mt.__pow = function(a, b) return binary(C.EM_POW, 'pow', a, b) end
mt.__unm = function(a) return new_tensor(C.em_ag_unary(C.EM_NEG, box, a)) end

-- ---------------------------------------------------------------- unary
local UNOPS = {
  neg = C.EM_NEG, abs = C.EM_ABS, exp = C.EM_EXP, log = C.EM_LOG, sqrt = C.EM_SQRT, sin = C.EM_SIN,
  cos = C.EM_COS, tanh = C.EM_TANH, sigmoid = C.EM_SIGMOID, relu = C.EM_RELU, sign = C.EM_SIGN,
  floor = C.EM_FLOOR, ceil = C.EM_CEIL, round = C.EM_ROUND, reciprocal = C.EM_RECIPROCAL,
  square = C.EM_SQUARE, rsqrt = C.EM_RSQRT, log1p = C.EM_LOG1P, expm1 = C.EM_EXPM1, erf = C.EM_ERF,
  gelu = C.EM_GELU, silu = C.EM_SILU, log2 = C.EM_LOG2, log10 = C.EM_LOG10, logical_not = C.EM_LOGICAL_NOT,
}
for name, op in pairs(UNOPS) do
  Tensor[name] = function(t) return new_tensor(C.em_ag_unary(op, box, t)) end
  if name ~= 'logical_not' then
    local iname = name .. '_'
    Tensor[iname] = function(t)
      return done(C.em_unary(op, into(t), t), t)
    end
  end
end
Tensor.negative = Tensor.neg

-- ---------------------------------------------------------------- where, clamp
-- A number operand of where becomes a 0-d tensor of the other operand's dtype.
local function as_operand(op, x, like, n)
  if is_tensor(x) then return x end
  if type(x) == 'boolean' then x = x and 1 or 0 end
  if type(x) ~= 'number' then arg_error(op, n, 'a tensor or number', x) end
  local dtype = like and C.em_tensor_dtype(like) or C.EM_FLOAT32
  local device = like and C.em_tensor_device(like) or I.parse_device('cpu')
  return new_tensor(C.em_full(box, 0, nil, x, dtype, device))
end

-- where(cond, a, b): a where cond is true, else b; a and b may be numbers.
function M.where(cond, a, b)
  need_tensor('where', cond, 1)
  local ta = is_tensor(a) and a or nil
  local tb = is_tensor(b) and b or nil
  a = as_operand('where', a, tb, 2)
  b = as_operand('where', b, ta, 3)
  return new_tensor(C.em_ag_where(box, cond, a, b))
end
-- t:where(cond, other) is where(cond, t, other), as in PyTorch.
function Tensor.where(t, cond, other)
  need_tensor('where', cond, 1)
  return M.where(cond, t, as_operand('where', other, t, 2))
end

local function bound(op, x, n)
  if x == nil then return NAN end
  return need_number(op, x, n, 'a number or nil')
end
-- clamp(min, max): either bound may be nil.
function Tensor.clamp(t, low, high)
  return new_tensor(C.em_ag_clamp(box, t, bound('clamp', low, 1), bound('clamp', high, 2)))
end
function Tensor.clamp_(t, low, high)
  return done(C.em_clamp(into(t), t, bound('clamp_', low, 1), bound('clamp_', high, 2)), t)
end
function Tensor.clamp_min(t, low) return new_tensor(C.em_ag_clamp(box, t, need_number('clamp_min', low, 1), NAN)) end
function Tensor.clamp_max(t, high) return new_tensor(C.em_ag_clamp(box, t, NAN, need_number('clamp_max', high, 1))) end
Tensor.clip, Tensor.clip_ = Tensor.clamp, Tensor.clamp_

-- ---------------------------------------------------------------- reductions
-- dims: nil (every dim), a dim, or a table of dims; returns how many (in dims_buf).
local function parse_dims(op, t, dims, n)
  if dims == nil then
    alive(op, t)
    return 0
  end
  if type(dims) == 'number' then
    dims_buf[0] = cdim(op, t, dims)
    return 1
  end
  if type(dims) ~= 'table' then arg_error(op, n or 1, 'a dim or a table of dims', dims) end
  local k = #dims
  if k > 8 then throw(string.format('%s: %d dims given, ember supports up to 8', op, k)) end
  for i = 1, k do
    dims_buf[i - 1] = cdim(op, t, dims[i])
    for j = 0, i - 2 do
      if dims_buf[j] == dims_buf[i - 1] then
        throw(string.format('%s: dim %d appears twice in the dims', op, dims_buf[j] + 1))
      end
    end
  end
  return k
end
I.parse_dims = parse_dims

-- sum([dims [, keepdim]]), and the same for the others: nil reduces every dim to a 0-d
-- tensor; keepdim keeps reduced dims with size 1.
local function reducer(name, op)
  Tensor[name] = function(t, dims, keepdim)
    local nd = parse_dims(name, t, dims)
    return new_tensor(C.em_ag_reduce(op, box, nil, t, dims_buf, nd, keepdim and 1 or 0, 1))
  end
end
reducer('sum', C.EM_SUM)
reducer('mean', C.EM_MEAN)
reducer('prod', C.EM_PROD)
reducer('logsumexp', C.EM_LOGSUMEXP)
reducer('any', C.EM_ANY)
reducer('all', C.EM_ALL)
reducer('amax', C.EM_MAX)   -- values only, over any dims
reducer('amin', C.EM_MIN)

-- argmax([dim [, keepdim]]): 1-based positions along dim; without dim, the 1-based
-- position in the flattened tensor.
local function arg_reducer(name, op)
  Tensor[name] = function(t, dim, keepdim)
    if dim ~= nil and type(dim) ~= 'number' then arg_error(name, 1, 'a dim (integer) or nil', dim) end
    local nd = parse_dims(name, t, dim)
    return new_tensor(C.em_ag_reduce(op, box, nil, t, dims_buf, nd, keepdim and 1 or 0, 1))
  end
end
arg_reducer('argmax', C.EM_ARGMAX)
arg_reducer('argmin', C.EM_ARGMIN)

-- max() is the largest value (0-d); max(dim [, keepdim]) gives values and 1-based
-- positions; max(other) is maximum(other).
local function extremum(name, op, elementwise)
  Tensor[name] = function(t, dim, keepdim)
    if dim == nil then return new_tensor(C.em_ag_reduce(op, box, nil, t, dims_buf, 0, 0, 1)) end
    if is_tensor(dim) then return binary(elementwise, name, t, dim) end
    if type(dim) ~= 'number' then arg_error(name, 1, 'a dim (integer) or a tensor', dim) end
    dims_buf[0] = cdim(name, t, dim)
    return new_pair(C.em_ag_reduce(op, box, box2, t, dims_buf, 1, keepdim and 1 or 0, 1))
  end
end
extremum('max', C.EM_MAX, C.EM_MAXIMUM)
extremum('min', C.EM_MIN, C.EM_MINIMUM)

-- var/std([dims [, keepdim [, {correction = 1} or {unbiased = false}]]])
local VAR_OPTS = option_set('correction', 'unbiased')
local function spread(name, take_sqrt)
  Tensor[name] = function(t, dims, keepdim, opts)
    if is_opts(keepdim) then opts, keepdim = keepdim, nil end
    if is_opts(dims) then opts, dims = dims, nil end
    check_opts(name, opts, VAR_OPTS, 3)
    local correction = 1
    if opts then
      if opts.correction ~= nil then correction = need_number(name, opts.correction, 3, 'a number (correction)') end
      if opts.unbiased ~= nil then correction = opts.unbiased and 1 or 0 end
    end
    local nd = parse_dims(name, t, dims)
    return new_tensor(C.em_ag_var(box, t, dims_buf, nd, correction, keepdim and 1 or 0, take_sqrt))
  end
end
spread('var', 0)
spread('std', 1)

-- norm([p = 2 [, dims [, keepdim]]]): p a number, 'fro' (2), 'inf' or math.huge (max |x|).
function Tensor.norm(t, p, dims, keepdim)
  if p == nil or p == 'fro' then p = 2
  elseif p == 'inf' then p = math.huge
  elseif p == '-inf' then p = -math.huge
  elseif type(p) ~= 'number' then arg_error('norm', 1, "a number, 'fro' or 'inf' (the order p)", p) end
  local nd = parse_dims('norm', t, dims, 2)
  return new_tensor(C.em_ag_norm(box, t, p, dims_buf, nd, keepdim and 1 or 0))
end

local function need_dim(op, t, dim)
  if dim == nil then arg_error(op, 1, 'a dim (integer)', dim) end
  return cdim(op, t, dim)
end
function Tensor.cumsum(t, dim) return new_tensor(C.em_ag_cumsum(box, t, need_dim('cumsum', t, dim))) end
function Tensor.cumprod(t, dim)
  no_backward('cumprod', t)
  return new_tensor(C.em_cumprod(box, t, need_dim('cumprod', t, dim)))
end
function Tensor.softmax(t, dim) return new_tensor(C.em_ag_softmax(box, t, need_dim('softmax', t, dim), 0)) end
function Tensor.log_softmax(t, dim) return new_tensor(C.em_ag_softmax(box, t, need_dim('log_softmax', t, dim), 1)) end

-- sort([dim = -1 [, descending = false]]): values and 1-based positions. The values carry
-- a gradient (back to the positions they came from), as do topk's.
function Tensor.sort(t, dim, descending)
  local d = cdim('sort', t, dim or -1)
  return new_pair(C.em_ag_sort(box, box2, t, d, descending and 1 or 0, 1))
end
-- topk(k [, dim = -1 [, largest = true]]): the k largest (or smallest) values, sorted,
-- and their 1-based positions.
function Tensor.topk(t, k, dim, largest)
  need_integer('topk', k, 1, 'an integer (k)')
  local d = cdim('topk', t, dim or -1)
  local size = tonumber(C.em_tensor_size(t, d))
  if k < 0 or k > size then
    throw(string.format('topk: k is %d, expected 0..%d (the size of dim %d)', k, size, d + 1))
  end
  return new_pair(C.em_ag_topk(box, box2, t, k, d, largest == false and 0 or 1, 1))
end

-- ---------------------------------------------------------------- linear algebra
-- The runtime's recorded forms: mm/bmm/mv/dot/outer check their operands' ranks and record
-- through em_ag_matmul while recording or under autocast (ember.amp).
local function linalg(name, fn)
  Tensor[name] = function(a, b)
    need_tensor(name, b, 1)
    return new_tensor(C[fn](box, a, b))
  end
end
linalg('matmul', 'em_ag_matmul')
linalg('mm', 'em_ag_mm')
linalg('bmm', 'em_ag_bmm')
linalg('mv', 'em_ag_mv')
linalg('dot', 'em_ag_dot')
linalg('outer', 'em_ag_outer')

-- c:addmm(a, b [, {beta = 1, alpha = 1}]) or c:addmm(a, b, beta, alpha):
-- beta * c + alpha * (a @ b).
local ADDMM = option_set('beta', 'alpha')
function Tensor.addmm(c, a, b, beta, alpha)
  need_tensor('addmm', a, 1)
  need_tensor('addmm', b, 2)
  if type(beta) == 'table' then
    check_opts('addmm', beta, ADDMM, 3)
    beta, alpha = beta.beta, beta.alpha
  end
  beta = beta == nil and 1 or need_number('addmm', beta, 3, 'a number (beta)')
  alpha = alpha == nil and 1 or need_number('addmm', alpha, 4, 'a number (alpha)')
  return new_tensor(C.em_ag_addmm(box, c, a, b, beta, alpha))
end

-- ---------------------------------------------------------------- whole-tensor tests
-- equal(other): same shape and every element equal.
function Tensor.equal(t, other)
  need_tensor('equal', other, 1)
  local n = C.em_tensor_ndim(t)
  if n ~= C.em_tensor_ndim(other) then return false end
  for d = 0, n - 1 do
    if C.em_tensor_size(t, d) ~= C.em_tensor_size(other, d) then return false end
  end
  return Tensor.item(Tensor.all(binary(C.EM_EQ, 'equal', t, other)))
end
-- allclose(other [, rtol = 1e-5 [, atol = 1e-8]]): |t - other| <= atol + rtol * |other|
-- everywhere (broadcasting).
function Tensor.allclose(t, other, rtol, atol)
  if type(other) ~= 'number' then need_tensor('allclose', other, 1) end
  rtol = rtol == nil and 1e-5 or need_number('allclose', rtol, 2, 'a number (rtol)')
  atol = atol == nil and 1e-8 or need_number('allclose', atol, 3, 'a number (atol)')
  local diff = Tensor.abs(binary(C.EM_SUB, 'allclose', t, other))
  local tol = type(other) == 'number' and atol + rtol * math.abs(other) or
      Tensor.add(Tensor.mul(Tensor.abs(other), rtol), atol)
  return Tensor.item(Tensor.all(binary(C.EM_LE, 'allclose', diff, tol)))
end

-- Module-level forms: ember.add(a, b), ember.sum(t, 1), ember.matmul(a, b), ...
for name in pairs(BINOPS) do M[name] = Tensor[name] end
M.add, M.sub = Tensor.add, Tensor.sub
local names = {}
for name in pairs(UNOPS) do names[#names + 1] = name end
I.export(names, M)
I.export({ 'sum', 'mean', 'prod', 'logsumexp', 'any', 'all', 'amax', 'amin', 'argmax', 'argmin', 'max', 'min',
  'var', 'std', 'norm', 'cumsum', 'cumprod', 'softmax', 'log_softmax', 'sort', 'topk', 'matmul', 'mm', 'bmm', 'mv',
  'dot', 'outer', 'addmm', 'clamp', 'equal', 'allclose' }, M)

return M
