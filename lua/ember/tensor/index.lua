-- ember.tensor.index: selecting and scattering by index tensors and masks. Index tensors
-- hold 1-based positions (negative positions are not accepted); a Lua list of positions
-- works wherever an index tensor does. Out-of-place forms (scatter, index_add, ...) clone
-- self and apply the in-place form.
local I = require 'ember.tensor.core'
local create = require 'ember.tensor.create'

local M = {}   -- module-level functions; init.lua puts them in ember
local C, Tensor = I.C, I.Tensor
local arg_error, describe, throw = I.arg_error, I.describe, I.throw
local new_tensor, check, box = I.new, I.check, I.box
local cdim, is_tensor, need_tensor, need_number = I.cdim, I.is_tensor, I.need_tensor, I.need_number
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

I.export({ 'index_select', 'gather', 'scatter', 'scatter_add', 'index_add', 'index_fill', 'masked_fill',
  'masked_select', 'nonzero' }, M)

return M
