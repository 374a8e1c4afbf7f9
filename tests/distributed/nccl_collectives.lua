-- tests/distributed/nccl_collectives.lua - NCCL collectives on CUDA tensors against MPI on the
-- same values on the CPU, on N ranks with one GPU each:
--   ember launch -n 2 tests/distributed/nccl_collectives.lua
-- Exits 77 (skipped) when there are fewer GPUs than ranks: NCCL refuses two ranks of one
-- communicator on the same GPU, so one H200 runs the 1-rank case (which still connects
-- through MPI, orders streams and completes work through events) and not the 2-rank one.
local env = ember.dist.env()
if ember.device_count('cuda') < env.world_size then
  if env.rank == 0 then
    io.stderr:write(string.format('nccl_collectives: skipped (%d CUDA devices for %d ranks; NCCL needs one GPU per ' ..
      'rank)\n', ember.device_count('cuda'), env.world_size))
  end
  os.exit(77)
end

local U = dofile(arg[0]:gsub('[^/]*$', '') .. 'util.lua')
local dist = ember.dist
dist.init { backend = 'nccl', timeout = 60 }
local rank, W = dist.rank(), dist.world_size()
local check, equal, near, fails = U.check, U.equal, U.near, U.fails
local dev = 'cuda:' .. (dist.local_rank() % ember.device_count('cuda'))

check(dist.backend() == 'mpi', 'CPU backend %s', tostring(dist.backend()))
check(dist.backend('cuda') == 'nccl', 'CUDA backend %s', tostring(dist.backend('cuda')))
dist.init { backend = 'nccl' }   -- again: harmless
fails(function() dist.init { backend = 'mpi' } end, "already initialised with backend 'nccl'", 'switch backend')

local function value(r, i) return (r + 1) * ((i - 1) % 5 + 1) end
local function filled(n, dtype, r)
  local t = ember.zeros(n, { dtype = 'float64' })
  for i = 1, n do t[i] = value(r, i) end
  return t:to(dtype)
end

-- the GPU result, brought back, against the CPU (MPI) result
local function same(gpu, cpu, tol, what)
  check(gpu.device == dev, '%s: the result is on %s, expected %s', what, gpu.device, dev)
  near(gpu:cpu(), cpu, tol, what)
end

-- ---------------------------------------------------------------- all_reduce
local sizes = { 0, 1, 7, 1000, 65537 }
for _, dtype in ipairs { 'float32', 'float64', 'int32', 'int64', 'float16', 'bfloat16', 'uint8' } do
  for _, op in ipairs { 'sum', 'avg', 'max', 'min', 'product' } do
    local floating = dtype:find('float') ~= nil
    local small = dtype == 'uint8'   -- sums and products overflow a byte
    for _, n in ipairs(sizes) do
      if op == 'avg' and not floating then
        fails(function() dist.all_reduce(filled(n, dtype, rank):to(dev), 'avg') end,
          { "'avg' needs a floating dtype", dtype }, 'avg on ' .. dtype)
      elseif not ((op == 'product' and W > 4) or (small and (op == 'sum' or op == 'product') and W > 2)) then
        local cpu = filled(n, dtype, rank)
        local gpu = cpu:to(dev)
        dist.all_reduce(cpu, op)
        local r = dist.all_reduce(gpu, op)
        check(r == gpu, 'all_reduce returns its tensor')
        -- NCCL's avg scales before or after summing, MPI's after: an ulp apart at most;
        -- half-precision products round at each step, in an order each library chooses
        local tol = 0
        if n > 0 and (op == 'avg' or (op == 'product' and dtype:find('16'))) then
          tol = cpu:to('float64'):abs():max():item() * (dtype:find('16') and 1 / 64 or 1e-6)
        end
        same(gpu, cpu, tol, string.format('all_reduce %s %s n=%d', op, dtype, n))
        U.same_everywhere(gpu:cpu(), string.format('all_reduce %s %s n=%d bits', op, dtype, n))
      end
    end
  end
end

-- booleans: sum is or, product is and (as MPI's LOR / LAND)
do
  local b = ember.tensor({ rank == 0 and 1 or 0, 1, 0 }):to('bool')
  local cb, gb = b:clone(), b:to(dev)
  dist.all_reduce(cb, 'sum')
  dist.all_reduce(gb, 'sum')
  same(gb:to('float64'), cb:to('float64'), 0, 'bool sum')
  cb, gb = b:clone(), b:to(dev)
  dist.all_reduce(cb, 'product')
  dist.all_reduce(gb, 'product')
  same(gb:to('float64'), cb:to('float64'), 0, 'bool product')
end

-- ---------------------------------------------------------------- broadcast
for root = 0, W - 1 do
  for _, n in ipairs { 0, 1, 1000 } do
    local cpu = filled(n, 'float32', rank)
    local gpu = cpu:to(dev)
    dist.broadcast(cpu, root)
    dist.broadcast(gpu, root)
    same(gpu, cpu, 0, string.format('broadcast root %d n=%d', root, n))
    equal(gpu:cpu(), filled(n, 'float32', root), 'broadcast value')
  end
end

-- ---------------------------------------------------------------- all_gather, reduce_scatter
for _, n in ipairs { 0, 1, 13 } do
  local cpu = filled(n, 'float64', rank)
  local gpu = cpu:to(dev)
  local ca, ga = dist.all_gather(cpu), dist.all_gather(gpu)
  check(ga.shape[1] == W, 'all_gather: %d rows', ga.shape[1])
  same(ga, ca, 0, 'all_gather n=' .. n)
  -- into a given output
  local out = ember.zeros(W * n, { dtype = 'float64' }):to(dev)
  dist.all_gather(gpu, { out = out })
  same(out, ca:reshape(W * n), 0, 'all_gather out= n=' .. n)
end
for _, per in ipairs { 0, 1, 5 } do
  for _, op in ipairs { 'sum', 'avg', 'max' } do
    local cpu = filled(per * W, 'float32', rank)
    local gpu = cpu:to(dev)
    local cr, gr = dist.reduce_scatter(cpu, op), dist.reduce_scatter(gpu, op)
    same(gr, cr, op == 'avg' and 1e-6 * (5 * W) or 0, string.format('reduce_scatter %s per=%d', op, per))
  end
end
if W >= 2 then
  fails(function() dist.reduce_scatter(ember.ones(W + 1):to(dev)) end, 'not a multiple', 'reduce_scatter size')
end

-- ---------------------------------------------------------------- send / recv, async
if W >= 2 then
  local nxt, prv = (rank + 1) % W, (rank - 1 + W) % W
  local out = filled(100, 'float32', rank):to(dev)
  local into = ember.zeros(100):to(dev)
  -- NCCL pairs sends and receives in order, and each holds its stream until its peer's
  -- match runs: even ranks send first, odd ranks receive first, so every pair meets
  local hs, hr
  if rank % 2 == 0 then
    hs = dist.send(out, nxt, { async = true })
    hr = dist.recv(into, prv, { async = true })
  else
    hr = dist.recv(into, prv, { async = true })
    hs = dist.send(out, nxt, { async = true })
  end
  hs:wait()
  hr:wait()
  equal(into:cpu(), filled(100, 'float32', prv), 'ring send/recv')
end
do
  local gpu = filled(1048576, 'float32', rank):to(dev)
  local h = dist.all_reduce(gpu, 'sum', { async = true })
  local deadline = os.clock() + 30
  while not h:test() and os.clock() < deadline do end
  check(h:test(), 'async all_reduce completes without a wait (the completion thread)')
  local cpu = filled(1048576, 'float32', rank)
  dist.all_reduce(cpu, 'sum')
  same(h:wait(), cpu, 0, 'async all_reduce')
end

-- ---------------------------------------------------------------- subgroups
do
  local ranks = {}
  for r = W - 1, 0, -1 do ranks[#ranks + 1] = r end   -- reversed: group rank 0 is world rank W-1
  local g = dist.new_group(ranks)
  local gpu = filled(10, 'float64', rank):to(dev)
  local cpu = filled(10, 'float64', rank)
  g:all_reduce(gpu, 'max')
  g:all_reduce(cpu, 'max')
  same(gpu, cpu, 0, 'subgroup all_reduce (its own communicator)')
  local b = filled(10, 'float64', rank):to(dev)
  g:broadcast(b, 0)
  equal(b:cpu(), filled(10, 'float64', W - 1), 'subgroup broadcast from group rank 0 (world rank W-1)')
  if W >= 2 then
    local evens = {}
    for r = 0, W - 1, 2 do evens[#evens + 1] = r end
    local e = dist.new_group(evens)
    if e:rank() >= 0 then
      local t = ember.ones(3):to(dev)
      e:all_reduce(t)
      equal(t:cpu(), ember.ones(3) * #evens, 'evens')
    else
      fails(function() e:all_reduce(ember.ones(3):to(dev)) end, 'not a member', 'non-member')
    end
  end
end

-- ---------------------------------------------------------------- all_to_all(_v), gather, scatter, reduce, all_gather_v
-- NCCL (send/recv pairs in one group, ncclReduce) against the same call through MPI
for _, dtype in ipairs { 'float32', 'float64', 'int64', 'bfloat16', 'uint8' } do
  for _, k in ipairs { 0, 1, 7, 65537 } do
    local what = string.format(' %s k=%d', dtype, k)
    local input = filled(W * k, dtype, rank)
    local cpu = ember.zeros(W * k, { dtype = dtype })
    dist.all_to_all(cpu, input)
    local gpu = ember.zeros(W * k, { dtype = dtype }):to(dev)
    check(dist.all_to_all(gpu, input:to(dev)) == gpu, 'all_to_all returns out')
    same(gpu, cpu, 0, 'all_to_all' .. what)
    -- uneven, with empty splits: rank s sends k * ((s + d) % 3) elements to rank d
    local ic, oc, ni, no = {}, {}, 0, 0
    for d = 0, W - 1 do
      ic[d + 1], oc[d + 1] = k * ((rank + d) % 3), k * ((d + rank) % 3)
      ni, no = ni + ic[d + 1], no + oc[d + 1]
    end
    local vin = filled(ni, dtype, rank)
    local vcpu = dist.all_to_all_v(ember.zeros(no, { dtype = dtype }), oc, vin, ic)
    local h = dist.all_to_all_v(ember.zeros(no, { dtype = dtype }):to(dev), oc, vin:to(dev), ic, { async = true })
    same(h:wait(), vcpu, 0, 'all_to_all_v' .. what)
    local root = k % W
    local gcpu = dist.gather(nil, filled(k, dtype, rank), root)
    local ggpu = dist.gather(nil, filled(k, dtype, rank):to(dev), root)
    if rank == root then same(ggpu, gcpu, 0, 'gather' .. what) else check(ggpu == nil, 'gather off the root') end
    local sin = rank == root and filled(W * k, dtype, 7) or nil
    local scpu = dist.scatter(ember.zeros(k, { dtype = dtype }), sin, root)
    local sgpu = dist.scatter(ember.zeros(k, { dtype = dtype }):to(dev), sin and sin:to(dev), root)
    same(sgpu, scpu, 0, 'scatter' .. what)
    local rcpu = dist.reduce(filled(k, dtype, rank), 'max', root)
    local rgpu = dist.reduce(filled(k, dtype, rank):to(dev), 'max', root)
    if rank == root then same(rgpu, rcpu, 0, 'reduce max' .. what) end
    local counts = {}
    for d = 0, W - 1 do counts[d + 1] = k * (d % 3) end
    local acpu = dist.all_gather_v(nil, counts, filled(counts[rank + 1], dtype, rank))
    local agpu = dist.all_gather_v(nil, counts, filled(counts[rank + 1], dtype, rank):to(dev))
    same(agpu, acpu, 0, 'all_gather_v' .. what)
  end
end
if W > 1 then -- counts that disagree: an error on every rank, checked over MPI before NCCL sees them
  local ic, oc = {}, {}
  for d = 0, W - 1 do ic[d + 1], oc[d + 1] = 1, 1 end
  if rank == 1 then oc[1] = 2 end
  local n = 0
  for d = 1, W do n = n + oc[d] end
  fails(function() dist.all_to_all_v(ember.zeros(n):to(dev), oc, ember.ones(W):to(dev), ic) end,
    { 'all_to_all_v', 'rank 0 sends 1 elements to rank 1, which expects 2', 'no data moved' }, 'NCCL a2av mismatch')
end

-- ---------------------------------------------------------------- errors
do
  fails(function() dist.all_reduce(ember.ones(4, 4):to(dev):t()) end, { 'all_reduce', 'not contiguous' },
    'non-contiguous')
  if ember.device_count('cuda') >= 2 then
    local other = 'cuda:' .. ((dist.local_rank() + 1) % ember.device_count('cuda'))
    fails(function() dist.all_reduce(ember.ones(2):to(other)) end, { 'NCCL communicator', 'one GPU per rank' },
      'another GPU of this rank')
  end
end

U.done('nccl_collectives')
