-- tests/distributed/ddp_join.lua - uneven inputs: rank r has r + 1 batches; inside ddp:join no
-- rank hangs, and every rank ends with the model the last training rank computed. On N
-- ranks: ember launch -n 4 tests/distributed/ddp_join.lua
-- Reference: at step s the ranks still training average their gradients with zeros from
-- the ranks that have joined (the sum divided by the world size, as PyTorch's join).
local U = dofile(arg[0]:gsub('[^/]*$', '') .. 'util.lua')
local dist, nn, F = ember.dist, ember.nn, ember.nn.functional
dist.init { timeout = 30 }
local rank, W = dist.rank(), dist.world_size()
local check, near = U.check, U.near
local B = 4

local function make(seed, bn)
  ember.manual_seed(seed)
  local layers = { nn.Linear(6, 8) }
  if bn then layers[#layers + 1] = nn.BatchNorm1d(8) end
  layers[#layers + 1] = nn.Tanh()
  layers[#layers + 1] = nn.Linear(8, 3)
  return nn.Sequential(layers):double()
end
local function batch(step, r)
  ember.manual_seed(900 + 10 * step + r)
  return ember.randn(B, 6):double(), ember.randint(1, 4, { B })
end
local function batches_of(r) return r + 1 end

for _, case in ipairs {
  { name = 'plain' },
  { name = 'tiny buckets, rebuilt while rank 0 has joined', opts = { bucket_cap_mb = 1e-6, first_bucket_mb = 1e-6 } },
  { name = 'find_unused_parameters', opts = { find_unused_parameters = true } },
  { name = 'fp16 compression', opts = { comm_hook = 'fp16' }, tol = 1e-2 },
  { name = 'batch norm buffers', bn = true, no_ref = true },
} do
  local net = make(30 + rank, case.bn)
  local ddp = nn.DistributedDataParallel(net, case.opts)
  local opt = ember.optim.SGD(ddp:parameters(), { lr = 0.1, momentum = 0.9 })
  local mine = batches_of(rank)
  local r1, r2 = ddp:join(function()
    for step = 1, mine do
      opt:zero_grad()
      local x, y = batch(step, rank)
      F.cross_entropy(ddp(x), y):backward()
      opt:step()
    end
    return 'done', mine
  end)
  check(r1 == 'done' and r2 == mine, 'join returns the loop results')
  for i, p in ipairs(net:parameters()) do U.same_everywhere(p, case.name .. ': parameter ' .. i) end
  if case.bn then U.same_everywhere(net[2].running_mean, case.name .. ': running_mean') end
  if not case.no_ref then
    local ref = make(30)
    local ropt = ember.optim.SGD(ref:parameters(), { lr = 0.1, momentum = 0.9 })
    for step = 1, batches_of(W - 1) do
      ropt:zero_grad()
      local total
      for r = 0, W - 1 do
        if step <= batches_of(r) then
          local x, y = batch(step, r)
          local l = F.cross_entropy(ref(x), y) / W
          total = total and total + l or l
        end
      end
      total:backward()
      ropt:step()
    end
    for i, p in ipairs(net:parameters()) do
      near(p, ref:parameters()[i], case.tol or 1e-12, case.name .. ': parameter ' .. i .. ' against the reference')
    end
  end
  -- after join, ordinary synchronised training goes on
  opt:zero_grad()
  local x, y = batch(50, rank)
  F.cross_entropy(ddp(x), y):backward()
  for i, p in ipairs(net:parameters()) do U.same_everywhere(p.grad, case.name .. ': gradient after join ' .. i) end
end

U.done('ddp_join')
