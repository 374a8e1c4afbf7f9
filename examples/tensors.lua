-- examples/tensors.lua: a tour of ember's tensors (run: build/ember examples/tensors.lua)
local ember = require 'ember'
ember.manual_seed(1)

print(('ember %s, %d threads'):format(ember._VERSION, ember.get_num_threads()))

-- Creation: float32 by default, from nested tables or from shapes.
local x = ember.tensor({{1, 2}, {3, 4}})
local y = ember.randn(2, 2, {dtype = 'float64'})
print('x =', x)
print('x.shape =', table.concat(x.shape, 'x'), 'dtype =', x.dtype, 'device =', x.device)

-- Arithmetic broadcasts and promotes like PyTorch; dims are 1-based.
local z = (x:to('float64') + y):matmul(y:t()):sum(2)
print('(x + y) @ y^T summed over dim 2 =', z)

-- Views share storage: a transpose of a narrowed slice, written through.
local a = ember.arange(0, 12):view(3, 4)
local col = a:narrow(2, 2, 1)          -- column 2 (1-based)
col:fill_(-1)
print('a after filling column 2 through a view:', a)

-- Reductions, with values and 1-based indices.
local values, indices = a:max(2)
print('row maxima', values, 'at', indices)

-- Linear algebra through OpenBLAS.
local m = ember.randn(256, 512)
local w = ember.randn(512, 128)
local t0 = os.clock()
local p = m:matmul(w)
print(('matmul [256x512] @ [512x128] -> %s in %.2f ms CPU'):format(table.concat(p.shape, 'x'), (os.clock() - t0) * 1e3))

-- Softmax rows sum to one.
local s = ember.randn(4, 10):softmax(-1)
print('softmax row sums', s:sum(2))

-- Indexing: gather with 1-based indices, masked_fill.
local g = ember.tensor({{10, 20, 30}, {40, 50, 60}})
print('gather', g:gather(2, ember.tensor({{3, 1}, {2, 2}}, {dtype = 'int64'})))
print('masked_fill', g:masked_fill(g:gt(35), 0))

-- Checkpoints in safetensors format, readable by PyTorch and Hugging Face tools.
local path = os.tmpname() .. '.safetensors'
ember.save(path, {weight = w, bias = ember.zeros(128)})
local back = ember.load(path)
print('reloaded', back.weight.shape[1] .. 'x' .. back.weight.shape[2], 'equal:', back.weight:eq(w):all():item())
os.remove(path)
