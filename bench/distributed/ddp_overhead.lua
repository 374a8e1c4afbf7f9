-- bench/distributed/ddp_overhead.lua - what DDP's synchronisation costs per step, measured so that
-- the load of a shared machine cancels out: on every rank, blocks of synchronised steps
-- alternate with blocks of no_sync steps (the same forward, backward and optimizer step,
-- without the bucket copies and allreduces); the medians of their block times give
--   sync_overhead = step_sync / step_nosync - 1,  paired_efficiency = step_nosync / step_sync
-- which is the scaling efficiency the ranks would reach if each had its core to itself.
--   ember launch -n 2 bench/distributed/ddp_overhead.lua mlp|cnn [blocks] [steps per block]
local model_name = arg[1] or 'mlp'
local blocks = tonumber(arg[2] or 20)
local per = tonumber(arg[3] or 25)
local nn, F, dist = ember.nn, ember.nn.functional, ember.dist
dist.init()
local rank, world = dist.rank(), dist.world_size()
local here = debug.getinfo(1, 'S').source:match('^@(.*)/') or '.'
local net = dofile(here .. '/fmnist_models.lua')(model_name)
local model = nn.DistributedDataParallel(net)
local opt = ember.optim.SGD(model:parameters(), {lr = 0.05, momentum = 0.9})
local train = ember.data.datasets.FashionMNIST{train = true, normalise = {mean = 0.2860, std = 0.3530}}
local loader = ember.data.DataLoader{dataset = train, batch_size = 128, shuffle = true, seed = 0, drop_last = true,
  rank = rank, world_size = world}
local now = ember.C.em_clock_monotonic
local epoch, it = 0, nil
local function next_batch()
  local b = it and it()
  if not b then epoch = epoch + 1; it = loader:epoch(epoch); b = it() end
  return b
end
local function step(sync)
  local b = next_batch()
  opt:zero_grad()
  if sync then F.cross_entropy(model(b.x), b.y):backward()
  else model:no_sync(function() F.cross_entropy(model(b.x), b.y):backward() end) end
  opt:step()
end
for _ = 1, 10 do step(true) end
local times = { [true] = {}, [false] = {} }
for k = 1, 2 * blocks do
  local sync = k % 2 == 1
  dist.barrier()
  local t0 = now()
  for _ = 1, per do step(sync) end
  if sync then dist.barrier() end   -- a synchronised block ends when every rank is done
  local t = (now() - t0) / per
  table.insert(times[sync], t)
end
local function median(xs) table.sort(xs); return xs[math.floor(#xs / 2) + 1] end
local ts, tn = median(times[true]), median(times[false])
if rank == 0 then
  print(string.format('{"impl":"ember","bench":"ddp_overhead","model":"%s","ranks":%d,"step_sync_ms":%.4f,' ..
    '"step_nosync_ms":%.4f,"sync_overhead":%.4f,"paired_efficiency":%.4f}', model_name, world, ts * 1e3, tn * 1e3,
    ts / tn - 1, tn / ts))
end
