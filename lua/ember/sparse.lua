-- ember.SparseGrad: row-sparse gradients (ember/sparse.h).
--
--   local bag = ember.nn.EmbeddingBag(1e6, 16, {mode = 'sum', sparse = true})
--   bag(idx, offsets):sum():backward()
--   local g = bag.weight.grad          -- a SparseGrad: no [1e6, 16] tensor anywhere
--   g:indices()                        -- the rows looked up, 1-based, ascending, distinct
--   g:values()                         -- their gradients [nnz, 16] (shares g's memory)
--   g:to_dense()                       -- [1e6, 16], when you do want it
--
-- ember.SparseGrad(num_rows, indices, values) makes one (1-based indices in any order,
-- repeats summed); t.grad = g sets it on a leaf [num_rows, D]. Optimizers read it through
-- the runtime (SGD, Adagrad, RowWiseAdagrad update only the rows it names).
local ffi = require 'ffi'
local ember = require 'ember'
local I = require 'ember.internal'
local C = I.C
local throw, describe, is_tensor = I.throw, I.describe, I.is_tensor

-- Completed with a placeholder field, as tensors are (internal.lua), so that a metatable
-- can be attached; Lua never reads the field.
ffi.cdef('struct em_sparse_grad { int32_t em_opaque_; };')

local M = {}
local SparseGrad = {}
local ptr_type = ffi.typeof('em_sparse_grad *')

local function is_sparse_grad(x) return type(x) == 'cdata' and ffi.istype(ptr_type, x) end
M.is_sparse_grad = is_sparse_grad
I.is_sparse_grad = is_sparse_grad

-- Takes over a new reference from the runtime.
local function own(p)
  if p == nil then return nil end
  return ffi.gc(p, C.em_sparse_grad_release)
end
I.own_sparse_grad = own

-- indices(): the rows (int64 [nnz], 1-based, ascending, distinct).
function SparseGrad.indices(g) return ember.no_grad(function() return I.wrap(C.em_sparse_grad_indices(g)) + 1 end) end
-- values(): the rows' gradients [nnz, D]; writing into them changes g.
function SparseGrad.values(g) return I.wrap(C.em_sparse_grad_values(g)) end
-- to_dense(): the [num_rows, D] tensor g stands for.
function SparseGrad.to_dense(g)
  local box = I.box
  return I.new(C.em_sparse_grad_to_dense(box, g))
end
function SparseGrad.nnz(g) return tonumber(C.em_sparse_grad_nnz(g)) end
function SparseGrad.num_rows(g) return tonumber(C.em_sparse_grad_num_rows(g)) end
-- shape: the dense shape {num_rows, D}, as a table like a tensor's.
function SparseGrad.size(g)
  local v = SparseGrad.values(g)
  return { SparseGrad.num_rows(g), v.shape[2] }
end
SparseGrad.is_sparse = function() return true end

ffi.metatype('struct em_sparse_grad', {
  __index = function(g, k)
    if k == 'shape' then return SparseGrad.size(g) end
    if k == 'dtype' then return SparseGrad.values(g).dtype end
    return SparseGrad[k]
  end,
  __tostring = function(g)
    return string.format('SparseGrad(%d rows of [%s], %d stored)', SparseGrad.num_rows(g),
      table.concat(SparseGrad.size(g), ', '), SparseGrad.nnz(g))
  end,
})

-- SparseGrad(num_rows, indices, values): indices 1-based [K] (tensor or table), values [K, D].
function M.SparseGrad(num_rows, indices, values)
  local op = 'SparseGrad'
  if type(num_rows) ~= 'number' or num_rows < 0 or num_rows ~= math.floor(num_rows) then
    throw(op .. ': num_rows must be an integer >= 0, got ' .. describe(num_rows))
  end
  if type(indices) == 'table' then indices = ember.tensor(indices, { dtype = 'int64' }) end
  if not is_tensor(indices) then
    throw(op .. ': expected an index tensor or table for argument 2, got ' .. describe(indices))
  end
  if not is_tensor(values) then
    throw(op .. ': expected a tensor of values for argument 3, got ' .. describe(values))
  end
  local out = ffi.new('em_sparse_grad *[1]')
  I.check(C.em_sparse_grad_new(out, num_rows, indices, values, 1))
  return own(out[0])
end

return M
