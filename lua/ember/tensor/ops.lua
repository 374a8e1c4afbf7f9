-- ember.tensor.ops: the common ops users reach for first, made of the runtime's recorded
-- ops (where, cat, index_select, narrow, ...), so that their gradients come from those:
--   tril/triu, repeat (Lua keyword: t['repeat'](t, ...) or t:repeat_tensor(...)), tile,
--   flip, roll, isnan/isinf/isfinite/isposinf/isneginf, nan_to_num, addcmul/addcdiv, lerp,
--   unique, bincount, searchsorted; and for ember.nn.functional: pad, one_hot.
-- Positions and class values are 1-based, as everywhere in ember's Lua API: one_hot and
-- bincount count classes 1..C (as cross_entropy's targets), searchsorted answers 1..n+1.
local I = require 'ember.tensor.core'
local create = require 'ember.tensor.create'
local emath = require 'ember.tensor.math'

local M = {}   -- module-level functions; init.lua puts them in ember
local C, Tensor = I.C, I.Tensor
local throw, describe, arg_error = I.throw, I.describe, I.arg_error
local new_tensor, box = I.new, I.box
local cdim, is_tensor, need_tensor, need_number, need_integer = I.cdim, I.is_tensor, I.need_tensor, I.need_number,
    I.need_integer
local check_opts, option_set, no_backward = I.check_opts, I.option_set, I.no_backward

local function dtype_of(t) return I.dtype_names[tonumber(C.em_tensor_dtype(t))] end
local function like(t, dtype) return { dtype = dtype or dtype_of(t), device = t.device } end
local function is_float(t) return C.em_dtype_is_floating(C.em_tensor_dtype(t)) ~= 0 end
local function is_int(t)
  local d = C.em_tensor_dtype(t)
  return d == C.EM_INT64 or d == C.EM_INT32
end
-- A list of dims from nil, a dim or a table of dims (1-based, negative from the end), 0-based.
local function dim_list(op, t, dims)
  if type(dims) == 'number' then dims = { dims } end
  if type(dims) ~= 'table' then arg_error(op, 1, 'a dim or a table of dims', dims) end
  local out = {}
  for i = 1, #dims do out[i] = cdim(op, t, dims[i]) end
  return out
end
-- 1-based positions as an int64 tensor on t's device.
local function positions(list, t) return create.tensor(list, like(t, 'int64')) end

-- ---------------------------------------------------------------- tril, triu
-- tril([diagonal = 0]): the elements on and below the diagonal of the last two dims (above
-- it when diagonal > 0, below when < 0); zeros elsewhere. triu: on and above.
local function triangle(op, lower)
  return function(t, diagonal)
    if diagonal == nil then diagonal = 0 end
    need_integer(op, diagonal, 1, 'an integer (diagonal)')
    I.alive(op, t)
    local n = C.em_tensor_ndim(t)
    if n < 2 then throw(string.format('%s: expected a tensor with at least 2 dims, got a %d-d tensor', op, n)) end
    local s = t.shape
    local rows = create.arange(0, s[n - 1], like(t, 'int64')):view(s[n - 1], 1)
    local cols = create.arange(0, s[n], like(t, 'int64')):view(1, s[n])
    local offset = cols - rows
    local keep = lower and offset:le(diagonal) or offset:ge(diagonal)
    return emath.where(keep, t, 0)
  end
end
Tensor.tril, Tensor.triu = triangle('tril', true), triangle('triu', false)

-- ---------------------------------------------------------------- repeat, tile
local function sizes_arg(op, ...)
  local first = ...
  local list = type(first) == 'table' and first or { ... }
  for i = 1, #list do need_integer(op, list[i], i, 'integer repeat counts') end
  for i = 1, #list do
    if list[i] < 0 then throw(string.format('%s: repeat count %d is %d, expected >= 0', op, i, list[i])) end
  end
  return list
end

-- Copies of t along each dim, as PyTorch's t.repeat(2, 3): one count per dim (more counts
-- than dims add leading dims).
local function repeat_tensor(op, t, reps)
  local n = C.em_tensor_ndim(t)
  if #reps < n then
    throw(string.format('%s: %d repeat counts for a %d-d tensor; give at least one per dim', op, #reps, n))
  end
  local shape = t.shape
  local full = {}
  for i = 1, #reps - n do full[i] = 1 end
  for i = 1, n do full[#full + 1] = shape[i] end
  local x = #reps > n and t:reshape(full) or t
  for d = 1, #reps do
    local r = reps[d]
    if r == 0 then
      x = new_tensor(C.em_ag_narrow(box, x, d - 1, 0, 0))
    elseif r > 1 then
      local parts = {}
      for k = 1, r do parts[k] = x end
      x = I.ember_cat(parts, d)
    end
  end
  if x == t then x = t:clone() end   -- always a new tensor, as in PyTorch
  return x
end
Tensor['repeat'] = function(t, ...) return repeat_tensor('repeat', t, sizes_arg('repeat', ...)) end
Tensor.repeat_tensor = Tensor['repeat']
-- tile(reps): numpy's rule: fewer counts than dims repeat the last dims only.
function Tensor.tile(t, ...)
  local reps = sizes_arg('tile', ...)
  local n = C.em_tensor_ndim(t)
  local full = {}
  for i = 1, n - #reps do full[i] = 1 end
  for i = 1, #reps do full[#full + 1] = reps[i] end
  return repeat_tensor('tile', t, full)
end

-- ---------------------------------------------------------------- flip, roll
-- flip(dims): the order of the positions along each of dims reversed (a copy).
function Tensor.flip(t, dims)
  if dims == nil then arg_error('flip', 1, 'a dim or a table of dims', dims) end
  local x = t
  for _, d in ipairs(dim_list('flip', t, dims)) do
    local n = t.shape[d + 1]
    if n > 1 then x = x:index_select(d + 1, create.arange(n, 0, -1, like(t, 'int64'))) end
  end
  if x == t then x = t:clone() end
  return x
end
Tensor.fliplr = function(t) return Tensor.flip(t, 2) end
Tensor.flipud = function(t) return Tensor.flip(t, 1) end

-- roll(shifts [, dims]): positions shifted along dims, wrapping around; without dims the
-- flattened tensor is rolled and given its shape back.
function Tensor.roll(t, shifts, dims)
  if dims == nil then
    need_integer('roll', shifts, 1, 'an integer shift (without dims)')
    return Tensor.roll(t:reshape(-1), shifts, 1):reshape(t.shape)
  end
  local ds = dim_list('roll', t, dims)
  if type(shifts) == 'number' then shifts = { shifts } end
  if type(shifts) ~= 'table' or #shifts ~= #ds then
    throw(string.format('roll: expected as many shifts as dims (%d), got %s', #ds, describe(shifts)))
  end
  local x = t
  for i, d in ipairs(ds) do
    need_integer('roll', shifts[i], 1, 'integer shifts')
    local n = t.shape[d + 1]
    local s = n > 0 and shifts[i] % n or 0   -- Lua's % is non-negative for n > 0
    if s ~= 0 then
      local idx = {}
      for j = 1, n do idx[j] = (j - 1 - s) % n + 1 end
      x = x:index_select(d + 1, positions(idx, t))
    end
  end
  if x == t then x = t:clone() end
  return x
end

-- ---------------------------------------------------------------- NaN and infinity
local INF = math.huge
function Tensor.isnan(t)
  if is_float(t) then return t:ne(t) end
  return create.zeros(t.shape, like(t, 'bool'))
end
function Tensor.isinf(t)
  if is_float(t) then return t:abs():eq(INF) end
  return create.zeros(t.shape, like(t, 'bool'))
end
function Tensor.isposinf(t) return is_float(t) and t:eq(INF) or create.zeros(t.shape, like(t, 'bool')) end
function Tensor.isneginf(t) return is_float(t) and t:eq(-INF) or create.zeros(t.shape, like(t, 'bool')) end
-- finite: x - x is 0, where inf - inf and NaN - NaN are NaN.
function Tensor.isfinite(t)
  if is_float(t) then return (t - t):eq(0) end
  return create.ones(t.shape, like(t, 'bool'))
end

local FLOAT_MAX = { float32 = 3.4028234663852886e38, float64 = 1.7976931348623157e308,
  float16 = 65504, bfloat16 = 3.3895313892515355e38 }
local NAN_OPTS = option_set('nan', 'posinf', 'neginf')
-- nan_to_num([{nan = 0, posinf = largest finite, neginf = lowest finite}]) or
-- nan_to_num(nan, posinf, neginf): NaN and infinities replaced (a new tensor; the gradient
-- goes to the elements kept).
function Tensor.nan_to_num(t, nan, posinf, neginf)
  if type(nan) == 'table' then
    check_opts('nan_to_num', nan, NAN_OPTS, 1)
    nan, posinf, neginf = nan.nan, nan.posinf, nan.neginf
  end
  if not is_float(t) then return t:clone() end
  local big = FLOAT_MAX[dtype_of(t)]
  nan = nan == nil and 0 or need_number('nan_to_num', nan, 1, 'a number (nan)')
  posinf = posinf == nil and big or need_number('nan_to_num', posinf, 2, 'a number (posinf)')
  neginf = neginf == nil and -big or need_number('nan_to_num', neginf, 3, 'a number (neginf)')
  local r = emath.where(t:ne(t), nan, t)
  r = emath.where(t:eq(INF), posinf, r)
  return emath.where(t:eq(-INF), neginf, r)
end

-- ---------------------------------------------------------------- addcmul, addcdiv, lerp
local VALUE = option_set('value')
local function value_arg(op, v, n)
  if v == nil then return 1 end
  if type(v) == 'table' then
    check_opts(op, v, VALUE, n)
    return v.value == nil and 1 or need_number(op, v.value, n, 'a number (value)')
  end
  return need_number(op, v, n, 'a number (value)')
end
-- addcmul(t1, t2 [, value = 1]): t + value * t1 * t2; addcdiv: t + value * t1 / t2.
function Tensor.addcmul(t, t1, t2, value)
  need_tensor('addcmul', t1, 1)
  need_tensor('addcmul', t2, 2)
  return t + t1 * t2 * value_arg('addcmul', value, 3)
end
function Tensor.addcdiv(t, t1, t2, value)
  need_tensor('addcdiv', t1, 1)
  need_tensor('addcdiv', t2, 2)
  return t + t1 / t2 * value_arg('addcdiv', value, 3)
end
-- lerp(finish, weight): t + weight * (finish - t); weight a number or a tensor.
function Tensor.lerp(t, finish, weight)
  need_tensor('lerp', finish, 1)
  if not is_tensor(weight) then need_number('lerp', weight, 2, 'a number or tensor (weight)') end
  return t + (finish - t) * weight
end

-- ---------------------------------------------------------------- unique, bincount, searchsorted
local UNIQUE_OPTS = option_set('sorted', 'return_inverse', 'return_counts', 'dim')
-- unique([{sorted = true, return_inverse = false, return_counts = false}]): the distinct
-- values of the flattened tensor in ascending order, then (as asked, in this order, as
-- PyTorch returns them) the 1-based position of each element's value among them (t's
-- shape) and how often each value occurs. Not differentiable (nor is PyTorch's).
function Tensor.unique(t, opts)
  check_opts('unique', opts, UNIQUE_OPTS, 1)
  opts = opts or {}
  if opts.dim ~= nil then throw('unique: the dim option is not supported; unique works on the flattened tensor') end
  no_backward('unique', t)
  local flat = t:reshape(-1)
  local n = flat:numel()
  local values, perm = flat:sort(1)
  local new
  if n == 0 then
    new = create.zeros(0, like(t, 'bool'))
  else
    local first = create.ones(1, like(t, 'bool'))
    new = n > 1 and I.ember_cat({ first, values:narrow(1, 2, n - 1):ne(values:narrow(1, 1, n - 1)) }, 1) or first
  end
  local out = { values[new] }
  if opts.return_inverse or opts.return_counts then
    local group = new:long():cumsum(1)   -- the 1-based number of each sorted value's group
    if opts.return_inverse then
      local inverse = create.zeros(n, like(t, 'int64'))
      if n > 0 then inverse:scatter_(1, perm, group) end
      out[#out + 1] = inverse:reshape(t.shape)
    end
    if opts.return_counts then
      local counts = create.zeros(out[1]:numel(), like(t, 'int64'))
      if n > 0 then counts:index_add_(1, group, create.ones(n, like(t, 'int64'))) end
      out[#out + 1] = counts
    end
  end
  return unpack(out)
end

local BINCOUNT_OPTS = option_set('weights', 'minlength')
-- bincount([{weights =, minlength = 0}]): for a 1-d tensor of class values 1..C, how
-- often each class occurs (int64), or the sum of the weights of its elements; the result
-- has max(C, minlength) entries. Class values are 1-based, as cross_entropy's targets.
function Tensor.bincount(t, opts)
  check_opts('bincount', opts, BINCOUNT_OPTS, 1)
  opts = opts or {}
  if not is_int(t) then
    throw(string.format('bincount: expected an int64 or int32 tensor of class values, got %s', dtype_of(t)))
  end
  if C.em_tensor_ndim(t) ~= 1 then
    throw(string.format('bincount: expected a 1-d tensor, got shape [%s]', table.concat(t.shape, ', ')))
  end
  local minlength = opts.minlength == nil and 0 or need_integer('bincount', opts.minlength, 1, 'an integer (minlength)')
  local w = opts.weights
  if w ~= nil then
    need_tensor('bincount', w, 1)
    no_backward('bincount', w)
    if w.shape[1] ~= t.shape[1] or C.em_tensor_ndim(w) ~= 1 then
      throw(string.format('bincount: weights of shape [%s] for %d values; expected one weight per value',
        table.concat(w.shape, ', '), t.shape[1]))
    end
  end
  local n, len = t:numel(), minlength
  if n > 0 then
    local lo, hi = t:min():item(), t:max():item()
    if lo < 1 then
      throw(string.format('bincount: class values are 1-based (1..C), got %d', lo))
    end
    len = math.max(len, hi)
  end
  local out = create.zeros(len, w and like(w) or like(t, 'int64'))
  if n > 0 then out:index_add_(1, t, w or create.ones(n, like(t, 'int64'))) end
  return out
end

local SEARCH_OPTS = option_set('right')
-- searchsorted(sorted_sequence, values [, {right = false}]): for each value, the 1-based
-- position at which inserting it keeps the sequence sorted (1..n+1): the first with
-- sequence[i] >= value, or with sequence[i] > value when right. A 1-d sequence serves every
-- value; an N-d one [..., n] pairs with values [..., m] row by row. Compares every value
-- with every element of its row (memory m x n).
function M.searchsorted(seq, values, opts)
  need_tensor('searchsorted', seq, 1)
  check_opts('searchsorted', opts, SEARCH_OPTS, 3)
  if type(values) == 'number' then values = create.tensor(values, like(seq)) end
  need_tensor('searchsorted', values, 2)
  local nd = C.em_tensor_ndim(seq)
  if nd == 0 then throw('searchsorted: the sorted sequence must have at least 1 dim, got a 0-d tensor') end
  local s = seq
  if nd > 1 then
    local vs, ss = values.shape, seq.shape
    local ok = #vs == nd
    for i = 1, nd - 1 do ok = ok and vs[i] == ss[i] end
    if not ok then
      throw(string.format('searchsorted: values of shape [%s] for a sequence of shape [%s]; expected the ' ..
        "sequence's leading sizes", table.concat(vs, ', '), table.concat(ss, ', ')))
    end
    s = seq:unsqueeze(-2)
  end
  local v = values:unsqueeze(-1)
  local below = (opts and opts.right) and s:le(v) or s:lt(v)
  return below:sum(-1):long() + 1
end
Tensor.searchsorted = M.searchsorted

-- ---------------------------------------------------------------- pad, one_hot (nn.functional)
-- pad(x, pads [, mode = 'constant' [, value = 0]]): pads = {left, right} for the last dim,
-- then {left, right} for the one before, ... (PyTorch's order). mode 'constant' (negative
-- pads crop), 'reflect' (mirrored without repeating the edge; pads < the dim's size),
-- 'replicate' (the edge repeated) or 'circular' (wrapped around).
local MODES = { constant = true, reflect = true, replicate = true, circular = true }
local function mirror(i, n, mode)   -- 0-based position i in -l .. n-1+r, to 0..n-1
  if mode == 'reflect' then
    if i < 0 then return -i end
    if i >= n then return 2 * (n - 1) - i end
  elseif mode == 'replicate' then
    return math.min(math.max(i, 0), n - 1)
  else
    return i % n
  end
  return i
end
function I.pad(x, pads, mode, value)
  need_tensor('pad', x, 1)
  if type(pads) ~= 'table' then arg_error('pad', 2, 'a table of pads {left, right, ...}', pads) end
  mode = mode or 'constant'
  if not MODES[mode] then
    throw(string.format("pad: unknown mode %s (expected 'constant', 'reflect', 'replicate' or 'circular')",
      describe(mode)))
  end
  value = value == nil and 0 or need_number('pad', value, 4, 'a number (value)')
  local nd = C.em_tensor_ndim(x)
  if #pads % 2 ~= 0 or #pads / 2 > nd then
    throw(string.format('pad: %d pads for a %d-d tensor; expected pairs {left, right}, at most one per dim',
      #pads, nd))
  end
  for i = 1, #pads do need_integer('pad', pads[i], 2, 'integer pads') end
  local r = x
  for k = 1, #pads / 2 do
    local d = nd - k + 1            -- 1-based dim: the last first
    local l, rt = pads[2 * k - 1], pads[2 * k]
    local n = r.shape[d]
    if mode == 'constant' then
      if l < 0 then r, n, l = r:narrow(d, 1 - l, n + l), n + l, 0 end
      if rt < 0 then r, rt = r:narrow(d, 1, n + rt), 0 end
      local parts = {}
      local shape = r.shape
      if l > 0 then shape[d] = l; parts[#parts + 1] = create.full(shape, value, like(r)) end
      parts[#parts + 1] = r
      if rt > 0 then
        shape = r.shape
        shape[d] = rt
        parts[#parts + 1] = create.full(shape, value, like(r))
      end
      if #parts > 1 then r = I.ember_cat(parts, d) end
    else
      if l < 0 or rt < 0 then throw(string.format("pad: negative pads are only for mode 'constant'")) end
      if mode == 'reflect' and (l >= n or rt >= n) then
        throw(string.format("pad: reflect pads (%d, %d) of dim %d must be smaller than its size %d", l, rt, d, n))
      end
      if n == 0 and l + rt > 0 then throw(string.format('pad: cannot pad the empty dim %d in mode %s', d, mode)) end
      if l + rt > 0 then
        local idx = {}
        for i = -l, n - 1 + rt do idx[#idx + 1] = mirror(i, n, mode) + 1 end
        r = r:index_select(d, positions(idx, r))
      end
    end
  end
  if r == x then r = x:clone() end
  return r
end

-- one_hot(t [, num_classes]): class values 1..C (int64, 1-based as cross_entropy's
-- targets) to an int64 tensor of t's shape with C more at the end, 1 at each class.
-- num_classes defaults to the largest value.
function I.one_hot(t, num_classes)
  need_tensor('one_hot', t, 1)
  if C.em_tensor_dtype(t) ~= C.EM_INT64 then
    throw(string.format('one_hot: expected an int64 tensor of class values, got %s', dtype_of(t)))
  end
  local n = t:numel()
  local lo, hi = 1, 0
  if n > 0 then lo, hi = t:min():item(), t:max():item() end
  if num_classes == nil or num_classes == -1 then
    if n == 0 then throw('one_hot: cannot infer the number of classes of an empty tensor; give num_classes') end
    num_classes = hi
  end
  need_integer('one_hot', num_classes, 2, 'an integer (num_classes)')
  if n > 0 and (lo < 1 or hi > num_classes) then
    throw(string.format('one_hot: class value %d out of range 1..%d (class values are 1-based)',
      lo < 1 and lo or hi, num_classes))
  end
  local shape = t.shape
  shape[#shape + 1] = num_classes
  local out = create.zeros(shape, like(t, 'int64'))
  if n > 0 then out:scatter_(-1, t:unsqueeze(-1), 1) end
  return out
end

I.export({ 'tril', 'triu', 'repeat', 'repeat_tensor', 'tile', 'flip', 'fliplr', 'flipud', 'roll', 'isnan', 'isinf',
  'isposinf', 'isneginf', 'isfinite', 'nan_to_num', 'addcmul', 'addcdiv', 'lerp', 'unique', 'bincount' }, M)

return M
