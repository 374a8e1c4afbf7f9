-- tests/distributed/ddp_unused.lua - parameters that get no gradient, on N ranks:
--   ember launch -n 2 tests/distributed/ddp_unused.lua
local U = dofile(arg[0]:gsub('[^/]*$', '') .. 'util.lua')
local dist, nn, F = ember.dist, ember.nn, ember.nn.functional
dist.init { timeout = 30 }
local rank, W = dist.rank(), dist.world_size()
local check, near, fails = U.check, U.near, U.fails
local B = 4

-- fc1 -> (extra, when asked) -> fc2; `spare` is never used.
local Net = nn.Module:extend('Net')
function Net:init()
  self.fc1 = nn.Linear(6, 8)
  self.extra = nn.Linear(8, 8)
  self.spare = nn.Linear(3, 3)
  self.fc2 = nn.Linear(8, 4)
end
function Net:forward(x, use_extra)
  local h = self.fc1(x):tanh()
  if use_extra then h = h + self.extra(h):relu() end
  return self.fc2(h)
end
local function make(seed)
  ember.manual_seed(seed)
  return Net():double()
end

local function batch(step, r)
  ember.manual_seed(500 + step * 10 + r)
  return ember.randn(B, 6):double(), ember.randint(1, 5, { B })
end

local function params_near(a, b, what)
  local na, nb = a:named_parameters(), b:named_parameters()
  for i = 1, #na do
    local pa, pb = na[i][2], nb[i][2]
    near(pa, pb, 1e-12, what .. ': ' .. na[i][1])
  end
end

-- find_unused_parameters: `extra` is used on some steps, by some ranks; `spare` never.
-- Reference: the mean over ranks of each rank's own loss (its shard, its choice).
do
  local net, ref = make(1 + rank), make(1)
  local ddp = nn.DistributedDataParallel(net, { find_unused_parameters = true, bucket_cap_mb = 1e-6 })
  local opt = ember.optim.SGD(ddp:parameters(), { lr = 0.1, momentum = 0.9 })
  local ropt = ember.optim.SGD(ref:parameters(), { lr = 0.1, momentum = 0.9 })
  -- who uses `extra` at each step: everyone, nobody, only rank 0, only the others
  local plans = { function() return true end, function() return false end, function(r) return r == 0 end,
    function(r) return r ~= 0 end, function() return true end }
  for step, uses in ipairs(plans) do
    opt:zero_grad()
    local x, y = batch(step, rank)
    F.cross_entropy(ddp(x, uses(rank)), y):backward()
    check(net.spare.weight.grad == nil, 'step %d: spare has no gradient', step)
    local anyone = false
    for r = 0, W - 1 do anyone = anyone or uses(r) end
    check((net.extra.weight.grad ~= nil) == anyone, 'step %d: extra has a gradient iff some rank used it', step)
    opt:step()
    ropt:zero_grad()
    local total
    for r = 0, W - 1 do
      local xr, yr = batch(step, r)
      local l = F.cross_entropy(ref(xr, uses(r)), yr) / W
      total = total and total + l or l
    end
    total:backward()
    ropt:step()
    params_near(net, ref, 'find_unused step ' .. step)
  end
  -- a gradient reaching a parameter the walk did not find (used outside forward)
  opt:zero_grad()
  local x, y = batch(9, rank)
  local loss = F.cross_entropy(ddp(x, false), y) + net.spare.weight:sum() * 0
  loss:backward()
  fails(function() ddp(x, false) end, { "'spare.weight'", 'find_unused_parameters found no path' }, 'used outside forward')
end

-- Without find_unused_parameters: an unused parameter is an error naming it, never a hang.
do
  local net = make(3)
  local ddp = nn.DistributedDataParallel(net, { bucket_cap_mb = 1e-6 })
  local opt = ember.optim.SGD(ddp:parameters(), { lr = 0.1 })
  local x, y = batch(1, rank)
  opt:zero_grad()
  F.cross_entropy(ddp(x, true), y):backward()   -- spare unused
  opt:step()
  local err = fails(function() ddp(x, true) end, { "'spare.weight'", "'spare.bias'", 'find_unused_parameters = true',
    'rank ' .. rank }, 'unused parameter error')
  check(not err:find("'fc1", 1, true), 'only unused parameters are named: %s', err)
  -- the reducer recovers: the next iteration runs (and fails the same way, naming them again)
  F.cross_entropy(ddp(x, true), y):backward()
  fails(function() ddp(x, true) end, "'spare.weight'", 'unused parameter error again')
end

U.done('ddp_unused')
