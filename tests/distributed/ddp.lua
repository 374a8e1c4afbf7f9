-- tests/distributed/ddp.lua - nn.DistributedDataParallel against single-process training, on N
-- ranks: ember launch -n 4 tests/distributed/ddp.lua
-- Every rank computes the reference itself (the same model trained on the whole global
-- batch), so the check runs everywhere: parameters after every step equal the reference.
local U = dofile(arg[0]:gsub('[^/]*$', '') .. 'util.lua')
local dist, nn, F = ember.dist, ember.nn, ember.nn.functional
dist.init { timeout = 30 }
local rank, W = dist.rank(), dist.world_size()
local check, near, fails = U.check, U.near, U.fails
local B = 6   -- samples per rank per step

local function make(seed, dtype, hidden)
  ember.manual_seed(seed)
  local m = nn.Sequential { nn.Linear(12, hidden or 16), nn.Tanh(), nn.Linear(hidden or 16, 8), nn.ReLU(),
    nn.Linear(8, 5) }
  return m:to(dtype or 'float64')
end

local function params_near(a, b, tol, what)
  local pa, pb = a:parameters(), b:parameters()
  check(#pa == #pb, '%s: parameter counts', what)
  for i = 1, #pa do near(pa[i], pb[i], tol, string.format('%s: parameter %d', what, i)) end
end

-- The global batch of a step: the same on every rank (the generator is seeded alike);
-- shuffled, then rank r takes rows r*B+1 .. (r+1)*B.
local function global_batch(step, dtype)
  ember.manual_seed(1000 + step)
  local X = ember.randn(B * W, 12):to(dtype or 'float64')
  local Y = ember.randint(1, 6, { B * W })
  local perm = ember.randperm(B * W)
  return X:index_select(1, perm), Y:index_select(1, perm)
end
local function shard(t) return t:narrow(1, rank * B + 1, B) end

-- Trains a DDP model and the reference for `steps` steps, comparing after each.
local function equivalence(what, opts, cfg)
  cfg = cfg or {}
  local net = make(10 + rank, cfg.dtype, cfg.hidden)   -- a different start on every rank
  local ddp = nn.DistributedDataParallel(net, opts)
  local ref = make(10, cfg.dtype, cfg.hidden)          -- rank 0's start
  params_near(net, ref, 0, what .. ': start-up broadcast')
  local opt = ember.optim.SGD(ddp:parameters(), { lr = 0.2, momentum = 0.9 })
  local ropt = ember.optim.SGD(ref:parameters(), { lr = 0.2, momentum = 0.9 })
  for step = 1, cfg.steps or 4 do
    local X, Y = global_batch(step, cfg.dtype)
    if cfg.set_to_none == false then opt:zero_grad { set_to_none = false } else opt:zero_grad() end
    F.cross_entropy(ddp(shard(X)), shard(Y)):backward()
    opt:step()
    ropt:zero_grad()
    F.cross_entropy(ref(X), Y):backward()
    ropt:step()
    params_near(net, ref, cfg.tol or 1e-12, string.format('%s: step %d', what, step))
    for i, p in ipairs(net:parameters()) do U.same_everywhere(p, what .. ': parameter ' .. i .. ' bits') end
  end
  return ddp, net
end

-- ---------------------------------------------------------------- equivalence
local ddp = equivalence('default buckets', nil, { steps = 5 })
local s = ddp:stats()
check(s.iterations == 5 and s.rebuilt and s.comm_seconds > 0 and s.buckets_launched == 5, 'stats %s %s %s %s',
  s.iterations, tostring(s.rebuilt), s.comm_seconds, s.buckets_launched)
check(#ddp:buckets() == 1, 'one bucket under the default cap')
-- every rank runs on this host: the bucket lives in shared memory, reduced in place
-- (unless EMBER_DIST_SHM=0 sends it through the backend, which the note then says)
local shm = os.getenv('EMBER_DIST_SHM') ~= '0'
-- EMBER_DIST_RANKS_PER_HOST=k: simulated hosts of k ranks; the buckets are shared within a
-- host (a host of one rank has nothing to share: the note says so)
local per = tonumber(os.getenv('EMBER_DIST_RANKS_PER_HOST') or '')
if per and math.min(per, W - math.floor(rank / per) * per) == 1 then
  shm = false
  check(s.shared_buckets == 0 and s.shared_memory_note == 'one rank', 'single-rank host: %s (%s)', s.shared_buckets,
    s.shared_memory_note)
end
check(shm and s.shared_buckets == 1 and s.shared_memory_note == '' or per and not shm or
  not shm and s.shared_buckets == 0 and s.shared_memory_note == 'EMBER_DIST_SHM=0',
  'shared buckets %s (%s)', s.shared_buckets, s.shared_memory_note)
local sd = ddp:state_dict()
check(sd['module.0.weight'] ~= nil and sd['module.4.bias'] ~= nil, 'state_dict names start with module.')

-- tiny caps: every parameter its own bucket, each larger than the cap
ddp = equivalence('tiny buckets', { bucket_cap_mb = 1e-6, first_bucket_mb = 1e-6 })
check(#ddp:buckets() == 6, 'tiny caps: %d buckets', #ddp:buckets())
-- after the rebuild the first bucket holds the first gradient to arrive: the last layer's
local first = ddp:buckets()[1][1]
check(first == '4.bias' or first == '4.weight', 'first bucket after rebuild: %s', first)
-- a parameter larger than the cap closes its bucket after smaller ones
ddp = equivalence('mixed buckets', { first_bucket_mb = 100 / 1048576, bucket_cap_mb = 300 / 1048576 })
check(#ddp:buckets() >= 2, 'mixed caps: %d buckets', #ddp:buckets())
equivalence('huge buckets', { bucket_cap_mb = 1000, first_bucket_mb = 1000 })
equivalence('no rebuild', { rebuild_buckets = false, bucket_cap_mb = 1e-6, first_bucket_mb = 1e-6 })
equivalence('gradients copied back', { gradient_as_bucket_view = false, bucket_cap_mb = 1e-6 })
equivalence('zero_grad keeps the views', nil, { set_to_none = false })
-- shared-memory buckets: float32; slices of a bucket not divisible by the ranks or by the
-- 16-float lines each rank's slice is rounded to; against the same buckets through MPI
equivalence('float32 in shared memory', { bucket_cap_mb = 1e-6 }, { dtype = 'float32', tol = 1e-5 })
ddp = equivalence('odd-sized shared bucket', nil, { hidden = 101, steps = 3 })
check(ddp:stats().shared_buckets == (shm and 1 or 0), 'odd-sized bucket shared')
ddp = equivalence('buckets through MPI', { shared_memory = false, bucket_cap_mb = 1e-6 })
s = ddp:stats()
check(s.shared_buckets == 0 and s.shared_memory_note == 'shared_memory = false', 'MPI buckets: %s (%s)',
  s.shared_buckets, s.shared_memory_note)
-- compression: float32 model, looser tolerance, still identical on every rank
equivalence('fp16 compression', { comm_hook = 'fp16', bucket_cap_mb = 1e-6 }, { dtype = 'float32', tol = 2e-3 })
equivalence('bf16 compression', { comm_hook = 'bf16' }, { dtype = 'float32', tol = 2e-2 })
do -- gradients are views into the buckets
  local net = make(3)
  local d = nn.DistributedDataParallel(net)
  local X, Y = global_batch(1)
  F.cross_entropy(d(shard(X)), shard(Y)):backward()
  local g1, g2 = net:parameters()[1].grad, net:parameters()[2].grad
  check(ember.C.em_tensor_storage_id(g1) == ember.C.em_tensor_storage_id(g2), 'grads of one bucket share its storage')
end

-- ---------------------------------------------------------------- no_sync
do
  local net, ref = make(20 + rank), make(20)
  local d = nn.DistributedDataParallel(net, { bucket_cap_mb = 1e-6 })
  local opt = ember.optim.SGD(d:parameters(), { lr = 0.1 })
  local ropt = ember.optim.SGD(ref:parameters(), { lr = 0.1 })
  for step = 1, 3 do
    local X1, Y1 = global_batch(10 * step)
    local X2, Y2 = global_batch(10 * step + 1)
    opt:zero_grad()
    d:no_sync(function() F.cross_entropy(d(shard(X1)), shard(Y1)):backward() end)
    -- inside no_sync the gradients are local: they differ across ranks
    F.cross_entropy(d(shard(X2)), shard(Y2)):backward()
    opt:step()
    ropt:zero_grad()
    local both = F.cross_entropy(ref(X1), Y1) + F.cross_entropy(ref(X2), Y2)
    both:backward()
    ropt:step()
    params_near(net, ref, 1e-12, 'no_sync accumulation, step ' .. step)
  end
  local r = { d:no_sync(function(a, b) return a + b, 'x' end, 1, 2) }
  check(r[1] == 3 and r[2] == 'x', 'no_sync returns its results')
  fails(function() d:no_sync(function() error('inside') end) end, 'inside', 'no_sync passes errors on')
  -- after an error inside no_sync, synchronisation is back on
  local X, Y = global_batch(99)
  opt:zero_grad(); F.cross_entropy(d(shard(X)), shard(Y)):backward()
  for _, p in ipairs(net:parameters()) do U.same_everywhere(p.grad, 'grads synchronised after no_sync error') end
end

-- ---------------------------------------------------------------- buffers
for _, bb in ipairs { true, false } do
  ember.manual_seed(5)
  local net = nn.Sequential { nn.Linear(12, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 5) }:double()
  local d = nn.DistributedDataParallel(net, { broadcast_buffers = bb })
  local bn = net[2] or net:children()[2]
  U.same_everywhere(bn.running_mean, 'buffers equal after construction')
  ember.manual_seed(50 + rank)   -- different data per rank: statistics diverge
  F.cross_entropy(d(ember.randn(B, 12):double()), ember.randint(1, 6, { B })):backward()
  ember.manual_seed(77)          -- the same data everywhere
  F.cross_entropy(d(ember.randn(B, 12):double()), ember.randint(1, 6, { B })):backward()
  local all = dist.all_gather(bn.running_mean)
  local same = true
  for r = 2, W do same = same and all[r]:eq(all[1]):all():item() end
  check(same == bb, 'broadcast_buffers = %s: buffers %s across ranks', tostring(bb), same and 'equal' or 'differ')
  local counts = dist.all_gather(bn.num_batches_tracked:view(1))
  check(counts:eq(2):all():item(), 'num_batches_tracked %s', tostring(counts))
  -- evaluation under no_grad on one rank only takes part in no collective
  if rank == 0 then ember.no_grad(function() d:eval(); d(ember.randn(2, 12):double()); d:train() end) end
  -- a forward without backward (gradients on) is dropped at the next forward
  d(ember.randn(B, 12):double())
  F.cross_entropy(d(ember.randn(B, 12):double()), ember.randint(1, 6, { B })):backward()
end

-- ---------------------------------------------------------------- mismatched models
do
  local err = fails(function() nn.DistributedDataParallel(make(1, 'float64', rank == W - 1 and 17 or 16)) end,
    { 'DistributedDataParallel', "rank " .. (W - 1) .. "'s model differs from rank 0's at parameter 1" }, 'mismatch')
  if rank == W - 1 then
    check(err:find("'0.weight' float64 [17, 12] here", 1, true) and err:find('[16, 12] on rank 0', 1, true),
      'the mismatching rank shows both shapes: %s', err)
  end
  fails(function()
    local m = make(1)
    if rank == 1 then m:add_module('extra', nn.Linear(2, 2):double()) end
    nn.DistributedDataParallel(m)
  end, { 'DistributedDataParallel', 'parameter 7' }, 'extra parameter on rank 1')
  fails(function() nn.DistributedDataParallel(make(1), { bucket_cap_mb = rank == 0 and 25 or 5 }) end,
    { 'options differ' }, 'options differ')
  fails(function() nn.DistributedDataParallel(make(1), { comm_hook = 'int8' }) end, "comm_hook must be 'fp16'",
    'bad hook')
  fails(function() nn.DistributedDataParallel(make(1), { bucket_cap_mb = 0 }) end, 'bucket_cap_mb must be a number > 0',
    'bad cap')
  fails(function() nn.DistributedDataParallel(make(1), { bogus = true }) end, "unknown option 'bogus'", 'bad option')
  fails(function() nn.DistributedDataParallel({}) end, 'expected a module', 'not a module')
  -- the world is still in step after all these failures
  equivalence('after the failures', nil, { steps = 1 })
end

-- ---------------------------------------------------------------- DDP inside subgroups
if W % 2 == 0 then
  local pairs_of = {}
  for r = 0, W - 1, 2 do pairs_of[#pairs_of + 1] = dist.new_group { r, r + 1 } end
  local mine = pairs_of[math.floor(rank / 2) + 1]
  local net = make(60 + rank)
  local d = nn.DistributedDataParallel(net, { group = mine })
  local opt = ember.optim.SGD(d:parameters(), { lr = 0.1 })
  for step = 1, 2 do
    local X, Y = global_batch(70 + step)
    opt:zero_grad(); F.cross_entropy(d(shard(X)), shard(Y)):backward(); opt:step()
  end
  local w = dist.all_gather(net:parameters()[1])
  local partner = rank % 2 == 0 and rank + 1 or rank - 1
  check(w[rank + 1]:eq(w[partner + 1]):all():item(), "the pair trains one model")
  if W >= 4 then check(not w[1]:eq(w[3]):all():item(), 'different pairs train different models') end
end

U.done('ddp')
