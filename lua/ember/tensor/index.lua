-- ember.tensor.index: element access t[...] (positions, ranges with steps, masks, index
-- tensors) and selecting and scattering by index tensors and masks. Index tensors hold
-- 1-based positions (negative positions are not accepted); a Lua list of positions works
-- wherever an index tensor does. Out-of-place forms (scatter, index_add, ...) clone self
-- and apply the in-place form.
local I = require 'ember.tensor.core'
local create = require 'ember.tensor.create'

local M = {}   -- module-level functions; init.lua puts them in ember
local C, Tensor = I.C, I.Tensor
local arg_error, describe, throw = I.arg_error, I.describe, I.throw
local new_tensor, check, box = I.new, I.check, I.box
local cdim, cindex, alive = I.cdim, I.cindex, I.alive
local is_tensor, need_tensor, need_number = I.is_tensor, I.need_tensor, I.need_number
local recording, check_inplace = I.recording, I.check_inplace

local INT64 = { dtype = 'int64' }
-- An index tensor from a tensor, a list of positions or a single position.
local function index_arg(op, idx, n)
  if is_tensor(idx) then return idx end
  if type(idx) == 'number' then idx = { idx } end
  if type(idx) ~= 'table' then arg_error(op, n, 'an index tensor or a list of positions', idx) end
  for i = 1, #idx do
    local v = idx[i]
    if type(v) ~= 'number' and type(v) ~= 'table' then
      throw(string.format('%s: expected a position (integer) at [%d] of the index list, got %s', op, i, describe(v)))
    end
  end
  return create.tensor(idx, INT64)
end

local function fill_value(op, v, n)
  if type(v) == 'boolean' then return v and 1 or 0 end
  return need_number(op, v, n, 'a number (the fill value)')
end

-- index_select(dim, index): the slices of dim at the given positions.
function Tensor.index_select(t, dim, index)
  local d = cdim('index_select', t, dim)
  return new_tensor(C.em_ag_index_select(box, t, d, index_arg('index_select', index, 2), 1))
end

-- gather(dim, index): out[i][j] = t[index[i][j]][j] (dim 1), index shaped like out.
function Tensor.gather(t, dim, index)
  local d = cdim('gather', t, dim)
  return new_tensor(C.em_ag_gather(box, t, d, index_arg('gather', index, 2), 1))
end

-- scatter_(dim, index, src_or_value): t[index[i][j]][j] = src[i][j] (dim 1).
local function scatter(op, t, dim, index, src)
  check_inplace(op, t, src)
  local d = cdim(op, t, dim)
  index = index_arg(op, index, 2)
  if is_tensor(src) then
    check(C.em_scatter_(t, d, index, src, 0, 1))
  else
    check(C.em_scatter_value_(t, d, index, fill_value(op, src, 3), 1))
  end
  return t
end
-- scatter_add_(dim, index, src): t[index[i][j]][j] += src[i][j] (dim 1).
local function scatter_add(op, t, dim, index, src)
  check_inplace(op, t, src)
  local d = cdim(op, t, dim)
  need_tensor(op, src, 3)
  check(C.em_scatter_(t, d, index_arg(op, index, 2), src, 1, 1))
  return t
end

-- index_add_(dim, index, src [, alpha or {alpha =}]): t's slice index[i] += alpha * src's slice i.
local ALPHA = I.option_set('alpha')
local function index_add(op, t, dim, index, src, alpha)
  check_inplace(op, t, src)
  local d = cdim(op, t, dim)
  need_tensor(op, src, 3)
  if type(alpha) == 'table' then
    I.check_opts(op, alpha, ALPHA, 4)
    alpha = alpha.alpha
  end
  alpha = alpha == nil and 1 or need_number(op, alpha, 4, 'a number (alpha)')
  check(C.em_index_add_(t, d, index_arg(op, index, 2), src, alpha, 1))
  return t
end
-- index_fill_(dim, index, value): the slices of dim at index become value.
local function index_fill(op, t, dim, index, value)
  check_inplace(op, t)
  local d = cdim(op, t, dim)
  check(C.em_index_fill_(t, d, index_arg(op, index, 2), fill_value(op, value, 3), 1))
  return t
end

-- masked_fill_(mask, value): value where the bool mask (broadcast to t) is true.
local function masked_fill(op, t, mask, value)
  check_inplace(op, t)
  need_tensor(op, mask, 1)
  check(C.em_masked_fill_(t, mask, fill_value(op, value, 2)))
  return t
end
-- masked_select(mask): a 1-d tensor of the elements where mask is true.
-- The shape a and b broadcast to.
local function broadcast_shape(op, a, b)
  local out = {}
  for i = 1, math.max(#a, #b) do
    local x, y = a[#a - i + 1] or 1, b[#b - i + 1] or 1
    if x ~= y and x ~= 1 and y ~= 1 then
      throw(string.format('%s: shapes [%s] and [%s] cannot be broadcast', op, table.concat(a, ', '),
        table.concat(b, ', ')))
    end
    table.insert(out, 1, x == 1 and y or x)
  end
  return out
end

-- While recording it is index_select over the flattened, broadcast t (which records).
function Tensor.masked_select(t, mask)
  need_tensor('masked_select', mask, 1)
  if recording(t) then
    local shape = broadcast_shape('masked_select', t.shape, mask.shape)
    local flat_mask = mask:expand(shape):reshape(-1)
    local idx = flat_mask:nonzero():reshape(-1)
    return t:expand(shape):reshape(-1):index_select(1, idx)
  end
  return new_tensor(C.em_masked_select(box, t, mask))
end
-- nonzero(): an [n, ndim] int64 tensor of the 1-based positions of nonzero elements.
function Tensor.nonzero(t) return new_tensor(C.em_nonzero(box, t, 1)) end

-- x_(...) works on t; x(...) on a copy of t.
for name, impl in pairs { scatter = scatter, scatter_add = scatter_add, index_add = index_add,
  index_fill = index_fill, masked_fill = masked_fill } do
  local iname = name .. '_'
  Tensor[iname] = function(t, ...) return impl(iname, t, ...) end
  Tensor[name] = function(t, ...) return impl(name, Tensor.clone(t), ...) end
end
-- masked_fill (out of place) records: the runtime has a differentiable form.
function Tensor.masked_fill(t, mask, value)
  need_tensor('masked_fill', mask, 1)
  return new_tensor(C.em_ag_masked_fill(box, t, mask, fill_value('masked_fill', value, 2)))
end

-- ---------------------------------------------------------------- t[...]
-- Element access, after Torch7 and PyTorch:
--   t[i]             selects position i along dim 1 (a view; the dim goes away)
--   t[{i, j, ...}]   one entry per dim: a position selects; {a, b} keeps positions a..b,
--                    {a, b, s} every s-th of them (PyTorch's t[a-1:b:s]; s > 0), {a} keeps
--                    position a as a dim of size 1, {} the whole dim (views, all of them)
--   t[mask]          a bool (or uint8) tensor shaped as t's first k dims: the elements
--                    (k = t:dim(): a 1-d result) or slices [n, ...] where mask is true
--   t[index]         an int64/int32 tensor of 1-based positions along dim 1: the result
--                    has the index's shape followed by t's other dims
--   t[{{}, index}]   one mask or index tensor among the entries of a table, for its dims
-- Masks and index tensors copy (recorded as index_select, so gradients flow). Every form
-- may be assigned: t[...] = v writes a number, boolean or tensor (broadcast to the
-- selection) in place. Any other key is an error.
local function ndim_of(t) return C.em_tensor_ndim(t) end
local function size_of(t, d) return tonumber(C.em_tensor_size(t, d)) end
local function shape_str(s) return '[' .. table.concat(s, ', ') .. ']' end
local function new_view(status, src) return I.new_view(status, src) end

-- A range entry {a, b [, s]} of the table key, for dim d (0-based) of r.
local function range_entry(op, r, d, x, k)
  if next(x) == nil then return r end   -- {}: the whole dim, even an empty one
  for key, v in pairs(x) do
    if type(key) ~= 'number' or key < 1 or key > 3 or key ~= math.floor(key) then
      throw(string.format('%s: entry %d: a range is {first, last [, step]}, got the key %s', op, k, describe(key)))
    end
    if type(v) ~= 'number' or v ~= math.floor(v) then
      throw(string.format('%s: entry %d: range bounds and steps must be integers, got %s', op, k,
        type(v) == 'number' and tostring(v) or describe(v)))
    end
  end
  local step = x[3] or 1
  if step <= 0 then
    throw(string.format('%s: entry %d has step %d: %s', op, k, step, step == 0 and 'a step must be positive' or
      'negative steps are not supported (PyTorch refuses them too); use flip() to reverse'))
  end
  local size = size_of(r, d)
  local a, b = x[1] or 1, x[2]
  if b == nil then b = (x[3] == nil and x[1]) or -1 end
  local a0, b0 = cindex(op, a, size, k), cindex(op, b, size, k)
  if b0 < a0 then
    throw(string.format('%s: range {%d, %d} is backwards for dim %d of size %d', op, a, b, k, size))
  end
  if step == 1 then return new_view(C.em_ag_narrow(box, r, d, a0, b0 - a0 + 1), r) end
  return new_view(C.em_ag_slice(box, r, d, a0, b0 + 1, step), r)
end

-- What a tensor used as an index is: 'mask' over its ndim dims, or 'index' over one dim.
local function tensor_entry(op, x)
  alive(op, x)
  local dt = C.em_tensor_dtype(x)
  if dt == C.EM_BOOL or dt == C.EM_UINT8 then
    if ndim_of(x) == 0 then
      throw(op .. ': a 0-d mask is not supported; use a mask shaped as the dims it selects')
    end
    return 'mask', ndim_of(x)
  end
  if dt == C.EM_INT64 or dt == C.EM_INT32 then return 'index', 1 end
  throw(string.format('%s: an index tensor must hold int64 or int32 positions, or be a bool mask; got a %s tensor',
    op, I.dtype_names[tonumber(dt)]))
end

-- Applies the key's positions and ranges to t (views). A mask or index tensor among them
-- is left for later: its dims are kept whole, and adv says where they landed in r.
local function basic_pass(op, t, key)
  alive(op, t)
  local n = #key
  if n == 0 then
    throw(op .. ': expected at least one position, as in t[{2}] or t[{2, 3}], got an empty table')
  end
  local r, d, adv = t, 0, nil
  for k = 1, n do
    local x = key[k]
    if is_tensor(x) then
      local kind, span = tensor_entry(op, x)
      if adv then
        throw(string.format('%s: entries %d and %d are both mask or index tensors; one per t[{...}] is supported',
          op, adv.entry, k))
      end
      if d + span > ndim_of(r) then
        throw(string.format('%s: entry %d (a %d-d %s) goes past the last of the tensor\'s %d dims', op, k, span,
          kind, ndim_of(t)))
      end
      adv = { x = x, kind = kind, span = span, p = d, entry = k }
      d = d + span
    else
      if d >= ndim_of(r) then throw(string.format('%s: %d indices for a %d-d tensor', op, n, ndim_of(t))) end
      if type(x) == 'number' then
        r = new_view(C.em_ag_select(box, r, d, cindex(op, x, size_of(r, d), k)), r)
      elseif type(x) == 'table' then
        r = range_entry(op, r, d, x, k)
        d = d + 1
      else
        throw(string.format('%s: entry %d must be a position or a range table (or a mask or index tensor), got %s',
          op, k, describe(x)))
      end
    end
  end
  return r, adv
end

-- The 1-based positions along r's dim adv.p (over its adv.span dims flattened, for a
-- mask) as a 1-d int tensor, and the shape that takes those dims' place in the result.
local function positions(op, r, adv)
  local x, p = adv.x, adv.p
  if adv.kind == 'mask' then
    for i = 0, adv.span - 1 do
      if size_of(x, i) ~= size_of(r, p + i) then
        throw(string.format('%s: the mask of shape %s does not match the indexed dims: size %d at the mask\'s dim ' ..
          '%d against %d at the tensor\'s dim %d (tensor shape %s); a mask has the exact sizes of the dims it ' ..
          'selects, as in PyTorch', op, shape_str(x.shape), size_of(x, i), i + 1, size_of(r, p + i), p + i + 1,
          shape_str(r.shape)))
      end
    end
    local idx = Tensor.reshape(Tensor.nonzero(Tensor.reshape(x, -1)), -1)
    return idx, { Tensor.numel(idx) }
  end
  local size = size_of(r, p)
  if Tensor.numel(x) > 0 then
    local lo, hi = Tensor.item(Tensor.min(x)), Tensor.item(Tensor.max(x))
    if lo < 1 or hi > size then
      throw(string.format('%s: index %d out of range for dim %d of size %d (index tensors hold 1-based ' ..
        'positions, 1..%d)', op, lo < 1 and lo or hi, p + 1, size, size))
    end
  end
  return Tensor.reshape(x, -1), x.shape
end

-- sizes with dims p+1 .. p+span (1-based) replaced by the list `by`.
local function splice(sizes, p, span, by)
  local out = {}
  for i = 1, p do out[#out + 1] = sizes[i] end
  for i = 1, #by do out[#out + 1] = by[i] end
  for i = p + span + 1, #sizes do out[#out + 1] = sizes[i] end
  return out
end

local function advanced_get(op, r, adv)
  local idx, shape = positions(op, r, adv)
  local p, span = adv.p, adv.span
  local src = span > 1 and Tensor.flatten(r, p + 1, p + span) or r
  local out = Tensor.index_select(src, p + 1, idx)
  if #shape ~= 1 then out = Tensor.reshape(out, splice(out.shape, p, 1, shape)) end
  return out
end

local function advanced_set(op, r, adv, v)
  local idx, shape = positions(op, r, adv)
  local p, span = adv.p, adv.span
  local w, copied = r, false
  if span > 1 then   -- the mask's dims as one: a view when the strides allow, else a copy written back
    local flat = splice(r.shape, p, span, { -1 })
    local ok, view = pcall(Tensor.view, r, flat)
    if ok then w = view else w, copied = Tensor.view(Tensor.contiguous(Tensor.clone(r)), flat), true end
  end
  local n = Tensor.numel(idx)
  if type(v) == 'number' or type(v) == 'boolean' then
    if n > 0 then check(C.em_index_fill_(w, p, idx, fill_value(op, v, 1), 1)) end
  elseif is_tensor(v) then
    local sel = splice(w.shape, p, 1, shape)   -- the selection's shape, which v broadcasts to
    local vs = v.shape
    local fits = #vs <= #sel
    for i = 1, #vs do
      local a, b = vs[#vs - i + 1], sel[#sel - i + 1]
      if a ~= b and a ~= 1 then fits = false end
    end
    if not fits then
      throw(string.format('%s: the value of shape %s does not broadcast to the selection\'s shape %s', op,
        shape_str(vs), shape_str(sel)))
    end
    if n > 0 then
      local flat = splice(w.shape, p, 1, { n })
      local src = Tensor.reshape(Tensor.expand(v, sel), flat)
      local ishape = {}
      for i = 1, #flat do ishape[i] = 1 end
      ishape[p + 1] = n
      check(C.em_scatter_(w, p, Tensor.expand(Tensor.view(idx, ishape), flat), src, 0, 1))
    end
  else
    throw(string.format('%s: expected a number, boolean or tensor to assign, got %s', op, describe(v)))
  end
  if copied then check(C.em_copy_(r, Tensor.view(w, r.shape))) end
end

-- t[key]: key is a table (t[{...}]) or a tensor (t[mask], t[index]).
function I.index_get(t, key)
  local op = 't[{...}]'
  if is_tensor(key) then
    op = tensor_entry('t[index]', key) == 'mask' and 't[mask]' or 't[index]'
    key = { key }
  end
  local r, adv = basic_pass(op, t, key)
  if adv then return advanced_get(op, r, adv) end
  return r
end

-- t[key] = v: fills the selection with a number (or boolean) or copies a tensor into it.
function I.index_set(t, key, v)
  local op = 't[{...}] = v'
  if is_tensor(key) then
    op = tensor_entry('t[index] = v', key) == 'mask' and 't[mask] = v' or 't[index] = v'
    key = { key }
  end
  check_inplace(op, t, v)
  local target, adv = basic_pass(op, t, key)
  if adv then return advanced_set(op, target, adv, v) end
  if type(v) == 'number' or type(v) == 'boolean' then
    check(C.em_fill(target, type(v) == 'boolean' and (v and 1 or 0) or v))
  elseif is_tensor(v) then
    check(C.em_copy_(target, v))
  else
    throw(string.format('%s: expected a number, boolean or tensor to assign, got %s', op, describe(v)))
  end
end

I.export({ 'index_select', 'gather', 'scatter', 'scatter_add', 'index_add', 'index_fill', 'masked_fill',
  'masked_select', 'nonzero' }, M)

return M
