-- bench/distributed/ddp_fmnist.lua - DDP step time for the Fashion-MNIST MLP or CNN (the models,
-- batch and optimizer of pipelines/fashion_mnist_*.yaml), run on every rank:
--   ember launch -n 2 bench/distributed/ddp_fmnist.lua mlp [steps] [warmup] [batch]
-- Each rank reads its shard through ember.data.DataLoader (reshuffled per epoch); the
-- timed loop is data + forward + backward (with the bucket allreduces) + optimizer step.
-- Rank 0 prints one JSON line: global samples/s, step ms, communication seconds, the share
-- of it hidden behind backward, buckets. With one process (no launcher) it runs without
-- DDP: the baseline of the scaling efficiency.
local model_name = arg[1] or 'mlp'
local steps = tonumber(arg[2] or 300)
local warmup = tonumber(arg[3] or 30)
local batch = tonumber(arg[4] or 128)
local nn, F, dist = ember.nn, ember.nn.functional, ember.dist
dist.init()
local rank, world = dist.rank(), dist.world_size()

local here = debug.getinfo(1, 'S').source:match('^@(.*)/') or '.'
local net = dofile(here .. '/fmnist_models.lua')(model_name)
-- arg 5 'ddp': wrap in DDP even on one process (the reducer's own cost, 'self' backend)
local wrap = world > 1 or arg[5] == 'ddp'
local model = wrap and nn.DistributedDataParallel(net) or net
local opt = ember.optim.SGD(model:parameters(), {lr = 0.05, momentum = 0.9})
local train = ember.data.datasets.FashionMNIST{train = true, normalise = {mean = 0.2860, std = 0.3530}}
local loader = ember.data.DataLoader{dataset = train, batch_size = batch, shuffle = true, seed = 0, drop_last = true,
  rank = rank, world_size = world}

local function now() return ember.C.em_clock_monotonic() end
local done, epoch, t0 = 0, 0, nil
while done < steps + warmup do
  epoch = epoch + 1
  for b in loader:epoch(epoch) do
    if done == warmup then
      if wrap then dist.barrier(); model:reset_stats() end
      t0 = now()
    end
    opt:zero_grad()
    F.cross_entropy(model(b.x), b.y):backward()
    opt:step()
    done = done + 1
    if done == steps + warmup then break end
  end
end
if world > 1 then dist.barrier() end
local dt = now() - t0
local s = wrap and model:stats() or {}
if rank == 0 then
  print(string.format('{"impl":"ember","model":"%s","ranks":%d,"threads":%d,"batch_per_rank":%d,"steps":%d,"seconds":%.4f,' ..
    '"step_ms":%.4f,"global_samples_per_s":%.1f,"comm_ms_per_step":%.4f,"exposed_ms_per_step":%.4f,' ..
    '"hidden_share":%.4f,"buckets":%d}',
    model_name, world, ember.C.em_get_num_threads(), batch, steps, dt, dt / steps * 1e3, steps * batch * world / dt,
    (s.comm_seconds or 0) / steps * 1e3, (s.exposed_seconds or 0) / steps * 1e3, s.hidden_share or 0,
    wrap and #model:buckets() or 0))
end
