-- examples/ddp.lua: data-parallel training of the Fashion-MNIST MLP on several processes
-- (README "Distributed training"). Every rank holds the whole model and trains on its own share
-- of each epoch; nn.DistributedDataParallel averages the gradients during backward, so the
-- ranks take the same steps and keep the same weights. The evaluation is split over the ranks
-- too and summed with all_reduce; rank 0 writes the checkpoint.
--
--   build/ember launch -n 2 examples/ddp.lua                          # 2 ranks, 5 epochs
--   build/ember launch -n 2 examples/ddp.lua --epochs 1 --limit 4000  # a quick look
--   build/ember examples/ddp.lua                                      # one process: the same script
--
-- Options: --epochs N, --limit N (training images), --test-limit N, --batch-size N (per rank),
-- --lr X, --seed N, --dir DIR (rank 0's checkpoint).
local ember = require 'ember'
local nn, F, data, dist = ember.nn, ember.nn.functional, ember.data, ember.dist

local defaults = { epochs = 5, limit = 0, test_limit = 0, batch_size = 64, lr = 0.05, seed = 0,
  dir = 'runs/examples/ddp' }
local opt = setmetatable({}, { __index = defaults })
for i = 1, #arg, 2 do
  local key = arg[i]:match('^%-%-([%w-]+)$')
  key = key and key:gsub('-', '_')
  if key == nil or defaults[key] == nil or arg[i + 1] == nil then
    error('unknown option or missing value: ' .. arg[i] .. ' (options: see ' .. arg[0] .. ')', 0)
  end
  opt[key] = type(defaults[key]) == 'number' and assert(tonumber(arg[i + 1]), arg[i] .. ' needs a number') or
    arg[i + 1]
end

dist.init()   -- MPI under `ember launch` / mpirun, TCP under torchrun-style variables, else one process
local rank, world = dist.rank(), dist.world_size()
local function say(fmt, ...) if rank == 0 then print(string.format(fmt, ...)) end end

-- Each rank takes every world-th sample of the epoch's (seed, epoch)-keyed order: shares that
-- never overlap, with the same number of batches on every rank.
local norm = { mean = 0.2860, std = 0.3530 }
local train_set = data.datasets.FashionMNIST { train = true, normalise = norm,
  limit = opt.limit > 0 and opt.limit or nil }
local test_set = data.datasets.FashionMNIST { train = false, normalise = norm,
  limit = opt.test_limit > 0 and opt.test_limit or nil }
local train = data.DataLoader { dataset = train_set, batch_size = opt.batch_size, shuffle = true, seed = opt.seed,
  drop_last = true, rank = rank, world_size = world }
local test = data.DataLoader { dataset = test_set, batch_size = 500, rank = rank, world_size = world }

-- Any start will do: DDP copies rank 0's parameters to every rank when it wraps the model.
ember.manual_seed(opt.seed + rank)
local net = nn.Sequential { nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
  nn.Linear(128, 10) }
local model = nn.DistributedDataParallel(net)
local sgd = ember.optim.SGD(model:parameters(), { lr = opt.lr, momentum = 0.9 })
local schedule = ember.optim.lr_scheduler.CosineAnnealingLR(sgd, { T_max = opt.epochs * train:num_batches() })

-- Accuracy over the whole test set: each rank counts its share, all_reduce sums the counts.
local function evaluate()
  local correct, seen = 0, 0
  net:eval()
  ember.no_grad(function()   -- the plain module: a forward without gradients needs no other rank
    for batch in test:epoch(1) do
      correct = correct + F.count_correct(net(batch.x), batch.y)
      seen = seen + batch.y.shape[1]
    end
  end)
  net:train()
  local counts = ember.tensor({ correct, seen }, { dtype = 'float64' })
  dist.all_reduce(counts, 'sum')
  local total = counts:totable()
  return total[1] / total[2], total[2]
end

-- The sum of every parameter, in float64: equal on all ranks when they kept the same weights.
local function checksum()
  local s = 0
  for _, p in ipairs(net:parameters()) do s = s + p:double():sum():item() end
  return s
end

say('Fashion-MNIST MLP on %d ranks (backend %s): %d training images, %d batches of %d per rank per epoch',
  world, dist.backend(), train_set:size(), train:num_batches(), opt.batch_size)
local now = function() return ember.C.em_clock_monotonic() end
local accuracy, seen
for epoch = 1, opt.epochs do
  local t0, loss_sum, batches = now(), 0, 0
  for batch in train:epoch(epoch) do
    local loss = F.cross_entropy(model(batch.x), batch.y)
    sgd:zero_grad()
    loss:backward()   -- the gradients are averaged over the ranks as backward produces them
    sgd:step()
    schedule:step()
    loss_sum, batches = loss_sum + loss:item(), batches + 1
  end
  local rate = batches * opt.batch_size * world / (now() - t0)
  accuracy, seen = evaluate()
  say('epoch %d  loss %.4f (rank 0)  test accuracy %.4f  %.0f samples/s over all ranks', epoch, loss_sum / batches,
    accuracy, rate)
end

-- Same weights everywhere? Compare each rank's checksum with the largest and smallest of all.
local c = ember.tensor({ checksum() }, { dtype = 'float64' })
local hi, lo = c:clone(), c:clone()
dist.all_reduce(hi, 'max')
dist.all_reduce(lo, 'min')
say('parameters identical on all %d ranks: %s', world, tostring(hi:item() == lo:item()))

if rank == 0 then
  os.execute('mkdir -p ' .. opt.dir)
  local path = opt.dir .. '/model.safetensors'
  ember.save(path, net:state_dict(), { metadata = { model = 'mlp', epoch = tostring(opt.epochs),
    test_accuracy = string.format('%.17g', accuracy), test_limit = tostring(opt.test_limit),
    normalise_mean = tostring(norm.mean), normalise_std = tostring(norm.std) } })
  print(string.format('saved %s', path))
end
say('test accuracy: %.4f on %d images', accuracy, seen)
dist.barrier()
