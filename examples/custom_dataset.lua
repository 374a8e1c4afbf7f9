-- examples/custom_dataset.lua: your own dataset, written in Lua (examples/spirals_dataset.lua),
-- read by reader processes that ember starts and delivered to this trainer over ZeroMQ
-- (ember.data.ReaderLoader; README "Data loading"). A small MLP learns to tell the spirals apart.
--
--   build/ember examples/custom_dataset.lua                       # 2 readers, 20 epochs
--   build/ember examples/custom_dataset.lua --epochs 5 --workers 3
--
-- Options: --epochs N, --samples N (per epoch), --workers N (reader processes), --batch-size N,
-- --lr X, --seed N.
local ember = require 'ember'
local ffi = require 'ffi'
pcall(ffi.cdef, 'int getpid(void);')
local nn, F, data = ember.nn, ember.nn.functional, ember.data

local defaults = { epochs = 20, samples = 3000, workers = 2, batch_size = 64, lr = 0.01, seed = 1 }
local opt = setmetatable({}, { __index = defaults })
for i = 1, #arg, 2 do
  local key = arg[i]:match('^%-%-([%w-]+)$')
  key = key and key:gsub('-', '_')
  if key == nil or defaults[key] == nil or tonumber(arg[i + 1]) == nil then
    error('usage: ember examples/custom_dataset.lua [--epochs N] [--samples N] [--workers N] [--batch-size N] ' ..
      '[--lr X] [--seed N]', 0)
  end
  opt[key] = tonumber(arg[i + 1])
end
ember.manual_seed(opt.seed)

-- The dataset is named by its file: each reader process loads it and calls it with
-- dataset_options. The path is taken next to this script, so it runs from any folder.
local dataset = arg[0]:gsub('[^/]*$', '') .. 'spirals_dataset.lua'
local train = data.ReaderLoader { dataset = dataset, dataset_options = { n = opt.samples },
  batch_size = opt.batch_size, shuffle = true, seed = opt.seed, num_workers = opt.workers }
-- Held-out points: the same spirals drawn under another seed (the samples' generators are keyed
-- by the seed), read in order.
local test = data.ReaderLoader { dataset = dataset, dataset_options = { n = 1500 }, batch_size = 500,
  seed = opt.seed + 1000, num_workers = opt.workers }

local model = nn.Sequential { nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 3) }
local adam = ember.optim.Adam(model:parameters(), { lr = opt.lr })

local function evaluate()
  local correct, seen = 0, 0
  ember.no_grad(function()
    for batch in test:epoch(1) do
      correct = correct + F.count_correct(model(batch.x), batch.y)
      seen = seen + batch.y.shape[1]
    end
  end)
  return correct / seen
end

local readers = {}   -- pid -> samples it made
print(string.format('spirals: %d samples per epoch from %d reader processes (this trainer is pid %d)',
  train:num_samples(), opt.workers, ffi.C.getpid()))
local accuracy
for epoch = 1, opt.epochs do
  local loss_sum, batches = 0, 0
  for batch in train:epoch(epoch) do
    -- batch.x: float32 [B, 2]; batch.y: int64 [B] (classes 1..3); batch.reader: the pids
    local loss = F.cross_entropy(model(batch.x), batch.y)
    adam:zero_grad()
    loss:backward()
    adam:step()
    loss_sum, batches = loss_sum + loss:item(), batches + 1
    for _, pid in ipairs(batch.reader:totable()) do readers[pid] = (readers[pid] or 0) + 1 end
  end
  accuracy = evaluate()
  if epoch == 1 or epoch % 5 == 0 or epoch == opt.epochs then
    print(string.format('epoch %d  loss %.4f  held-out accuracy %.4f', epoch, loss_sum / batches, accuracy))
  end
end

local pids = {}
for pid, count in pairs(readers) do pids[#pids + 1] = string.format('%d (%d samples)', pid, count) end
table.sort(pids)
local stats = train:stats()
print(string.format('made by readers %s; %d batches through shared memory', table.concat(pids, ', '),
  stats.shm_batches))
print(string.format('held-out accuracy: %.4f', accuracy))
train:close()
test:close()
