-- bench/recsys/ember_dlrm.lua - ember's DLRM (examples/dlrm.lua) in the Kaggle configuration
-- on DLRM's random data (pipelines/data/dlrm_synthetic.lua draws as dlrm_data_pytorch.py),
-- sparse tables, SGD, BCE on logits (the sigmoid fused into the loss); one JSON line like torch_dlrm.py's. Under
-- `ember launch -n N`: nn.DistributedDataParallel, table rows exchanged (after_backward).
--   ember bench/recsys/ember_dlrm.lua STEPS BATCH ROWS [TABLES] [LOOKUPS] [EMBEDDINGS] [CONFIG]
-- EMBEDDINGS: 'batched' (default: the tables in one weight, nn.TableBatchedEmbeddingBags) or
-- 'local' (one nn.EmbeddingBag per table). CONFIG: 'kaggle' (default: DLRM's Criteo Kaggle
-- model, bottom 13-512-256-64-16, top 512-256-1, dimension 16, TABLES = 26, LOOKUPS = 1, every
-- bag LOOKUPS long) or 'benchmark' (DLRM's bench/dlrm_s_benchmark.sh model: 512 dense inputs,
-- bottom 512-512-64, top 1024-1024-1024-1, dimension 64, TABLES = 8, LOOKUPS = 100, bag sizes
-- drawn in [1, LOOKUPS] as DLRM's random data does without --num-indices-per-lookup-fixed).
local steps, batch, rows = tonumber(arg[1] or 50), tonumber(arg[2] or 128), tonumber(arg[3] or 100000)
for k = 1, 7 do if arg[k] == '' then arg[k] = nil end end   -- '' leaves a position at its default
local config = arg[7] or 'kaggle'
local arch = ({
  kaggle = { bot = '13-512-256-64-16', top = '512-256-1', dim = 16, dense = 13, tables = 26, lookups = 1, fixed = true },
  benchmark = { bot = '512-512-64', top = '1024-1024-1024-1', dim = 64, dense = 512, tables = 8, lookups = 100,
    fixed = false },
})[config]
if not arch then error("ember_dlrm: CONFIG must be 'kaggle' or 'benchmark', got " .. tostring(config), 0) end
local ntab = tonumber(arg[4]) or arch.tables
local lookups, embeddings = tonumber(arg[5]) or arch.lookups, arg[6] or 'batched'
local warmup = 5
local F = ember.nn.functional
local dist = ember.dist
local world, rank = 1, 0
if dist.env().world_size > 1 then
  dist.init()
  world, rank = dist.world_size(), dist.rank()
end
local tables = {}
for t = 1, ntab do tables[t] = rows end
ember.manual_seed(1)
local model = dofile('examples/dlrm.lua') { arch_mlp_bot = arch.bot, arch_mlp_top = arch.top,
  table_sizes = tables, arch_sparse_feature_size = arch.dim, logits = true, embeddings = embeddings }
local net = world > 1 and ember.nn.DistributedDataParallel(model) or model
local opt = ember.optim.SGD(net:parameters(), { lr = 0.1 })
local ds = dofile('pipelines/data/dlrm_synthetic.lua') { num_samples = 8 * batch * world, table_sizes = tables,
  num_indices_per_lookup = lookups, fixed = arch.fixed, seed = 1, num_dense = arch.dense }
local jagged = require 'ember.data.jagged'
local batches = {}
for k = 1, 8 do   -- this rank's batches, assembled once as the pipeline delivers them
  local dense, vals, lens, y = {}, {}, {}, {}
  for i = 1, batch do
    local s = ds:get(((k - 1) * world + rank) * batch + i)
    dense[i], y[i], lens[i] = s.dense, { s.label }, {}
    for t, p in ipairs(s.sparse.parts) do
      lens[i][t] = #p
      for _, v in ipairs(p) do vals[#vals + 1] = v end
    end
  end
  batches[k] = { ember.stack(dense), jagged.keyed(ember.tensor(vals, { dtype = 'int64' }),
    ember.tensor(lens, { dtype = 'int64' })), ember.tensor(y) }
end
local t0, c0
for step = 1, warmup + steps do
  if step == warmup + 1 then t0, c0 = require('ember.util.progress').now(), os.clock() end
  local b = batches[(step - 1) % #batches + 1]
  opt:zero_grad()
  local loss = F.binary_cross_entropy_with_logits(net(b[1], b[2]), b[3])
  loss:backward()
  if net.after_backward then net:after_backward() end
  opt:step()
end
local dt, cpu = require('ember.util.progress').now() - t0, os.clock() - c0
local f = io.open('/proc/self/status')
local peak = f:read('*a'):match('VmHWM:%s*(%d+)')
f:close()
if rank == 0 then
  print(string.format('{"peer": "ember", "config": "' .. config .. '", "ranks": %d, "samples_per_s": %.1f, "samples_per_cpu_s": %.1f, ' ..
    '"peak_rss_mb": %.1f}', world, steps * batch * world / dt, steps * batch / cpu, tonumber(peak) / 1024))
end
