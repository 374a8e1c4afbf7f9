-- train_step.lua: where the time of a Fashion-MNIST MLP training step goes, phase by phase
-- (data, forward, loss, zero_grad, backward, optimizer step, loss:item(), accuracy), as the
-- training pipeline runs them. For comparing two builds of the library on the same step:
-- run each a few times, alternating, and compare medians (see bench/README.md).
--   EMBER_NUM_THREADS=2 build/ember bench/train/train_step.lua [epochs]
-- Prints one line per epoch: the mean microseconds of each phase and the total per step.
local nn, F, optim = ember.nn, ember.nn.functional, ember.optim
local now = require('ember.util.progress').now
local epochs = tonumber(arg and arg[1] or 3)

ember.manual_seed(0)
local model = nn.Sequential { nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
  nn.Linear(128, 10) }
local opt = optim.SGD(model:parameters(), { lr = 0.05, momentum = 0.9 })
local ds = ember.data.datasets.FashionMNIST { train = true, normalise = { mean = 0.2860, std = 0.3530 } }
local loader = ember.data.DataLoader { dataset = ds, batch_size = 128, shuffle = true, drop_last = true, seed = 0 }

local phases = { 'data', 'fwd', 'loss', 'zero', 'bwd', 'step', 'item', 'acc' }
for e = 1, epochs do
  local T, n = {}, 0
  for _, k in ipairs(phases) do T[k] = 0 end
  local start = now()
  local t_data = now()
  for batch in loader:epoch(e) do
    local t0 = now()
    local out = model(batch.x)
    local t1 = now()
    local loss = F.cross_entropy(out, batch.y)
    local t2 = now()
    opt:zero_grad()
    local t3 = now()
    loss:backward()
    local t4 = now()
    opt:step()
    local t5 = now()
    local _ = loss:item()
    local t6 = now()
    local _ = F.count_correct(out, batch.y)
    local t7 = now()
    T.data, T.fwd, T.loss, T.zero = T.data + t0 - t_data, T.fwd + t1 - t0, T.loss + t2 - t1, T.zero + t3 - t2
    T.bwd, T.step, T.item, T.acc = T.bwd + t4 - t3, T.step + t5 - t4, T.item + t6 - t5, T.acc + t7 - t6
    n = n + 1
    -- as the training pipeline does (lua/ember/pipeline/train.lua, release_step)
    for _, t in pairs(batch) do t:free() end
    out:free(); loss:free()
    t_data = now()
  end
  local parts = {}
  for _, k in ipairs(phases) do parts[#parts + 1] = string.format('%s %.1f', k, T[k] / n * 1e6) end
  print(string.format('epoch %d: %s  total %.1f us/step (%d steps)', e, table.concat(parts, '  '),
    (now() - start) / n * 1e6, n))
end
