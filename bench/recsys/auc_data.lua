-- bench/recsys/auc_data.lua - writes the batches pipelines/dlrm_synthetic.yaml trains and
-- tests on, in the order `ember run` delivers them (the pipeline's own loaders, its split
-- and its shuffling), to one safetensors file that bench/recsys/auc_torch.py reads: DLRM's
-- own model code then trains on exactly the same data in the same order.
--   ember bench/recsys/auc_data.lua OUT.safetensors [key.path=value ...]   (the pipeline's overrides)
-- Tensors: {train,test}.dense [N, 13] float32, .label [N] float32, .batch [batches] int64
-- (samples per batch), .t<j>.lengths [N] int64 and .t<j>.values [sum of lengths] int64
-- (0-based rows, DLRM's convention) for each table j (1-based).
local out = assert(arg[1], 'usage: ember bench/recsys/auc_data.lua OUT.safetensors [key=value ...]')
local overrides = { unpack(arg, 2) }
local pipeline = require 'ember.pipeline'
local cfg, ctx = pipeline.load('pipelines/dlrm_synthetic.yaml', overrides)
ctx.log = ctx.log or function() end
local datasets = require 'ember.pipeline.datasets'
local data_yaml = require 'ember.data.yaml'
local sets = datasets.plan(cfg, ctx)
local train = data_yaml.train_loader(cfg, 0, 1, datasets.train_subset(sets))
local test = datasets.eval_loader(cfg, sets, 'test', require('ember.pipeline.train').make_loader)

local tensors = {}
local function dump(prefix, batches)
  local dense, label, sizes, lens, vals = {}, {}, {}, {}, {}
  for _, b in ipairs(batches) do
    dense[#dense + 1], label[#label + 1] = b.dense, b.label:reshape(b.label:numel()):to('float32')
    sizes[#sizes + 1] = b.dense.shape[1]
    for j, f in ipairs(b.sparse) do
      local idx, off = f[1], f[2]
      local n, B = idx:numel(), off:numel()
      local ends = ember.cat({ off:narrow(1, 2, B - 1), ember.tensor({ n + 1 }, { dtype = 'int64' }) }, 1)
      lens[j] = lens[j] or {}
      vals[j] = vals[j] or {}
      lens[j][#lens[j] + 1] = ends - off
      vals[j][#vals[j] + 1] = idx - 1
    end
  end
  tensors[prefix .. '.dense'] = ember.cat(dense, 1)
  tensors[prefix .. '.label'] = ember.cat(label, 1)
  tensors[prefix .. '.batch'] = ember.tensor(sizes, { dtype = 'int64' })
  for j = 1, #lens do
    tensors[string.format('%s.t%d.lengths', prefix, j)] = ember.cat(lens[j], 1)
    tensors[string.format('%s.t%d.values', prefix, j)] = ember.cat(vals[j], 1)
  end
end
local tb = {}
for epoch = 1, cfg.epochs do
  for b in train:epoch(epoch) do tb[#tb + 1] = b end
end
dump('train', tb)
local eb = {}
for b in test:epoch(0) do eb[#eb + 1] = b end
dump('test', eb)
train:close(); test:close()
ember.save(out, tensors)
io.stderr:write(string.format('auc_data: %d train batches over %d epochs, %d test samples -> %s\n', #tb, cfg.epochs,
  tensors['test.label']:numel(), out))
