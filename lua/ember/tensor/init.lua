-- ember.tensor: the Tensor type and the tensor functions of the ember table (init.lua
-- merges this module's table into ember: ember.zeros, ember.cat, ember.matmul, ...).
-- Split by area; each file returns its module-level functions and adds methods to the
-- shared Tensor table (ember.tensor.core, which also holds their shared internals):
--   tensor/create.lua  ember.tensor, zeros/ones/full/arange/..., random, from_blob
--   tensor/shape.lua   views, copies and conversion, t[{i, j}], cat/stack/split/chunk
--   tensor/math.lua    elementwise ops, operators, reductions, linear algebra
--   tensor/index.lua   t[...] (positions, ranges, masks, index tensors), index_select/gather/
--                      scatter/masked_*/nonzero
--   tensor/ops.lua     tril/triu, repeat/tile, flip, roll, isnan..., unique, bincount, pad, ...
--   tensor/print.lua   tostring and totable
local ffi = require 'ffi'
local I = require 'ember.tensor.core'

local M = { Tensor = I.Tensor, is_tensor = I.is_tensor }
for _, area in ipairs { 'create', 'shape', 'math', 'index', 'ops', 'print' } do
  for k, v in pairs(require('ember.tensor.' .. area)) do
    assert(M[k] == nil, 'ember.tensor: ' .. k .. ' is defined twice')
    M[k] = v
  end
end

ffi.metatype('struct em_tensor', I.mt)
return M
