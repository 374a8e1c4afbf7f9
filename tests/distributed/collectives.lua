-- tests/distributed/collectives.lua - process groups and collectives, run on N ranks:
--   ember launch -n 4 tests/distributed/collectives.lua
-- Every collective on several dtypes and on sizes 0, 1 and not divisible by the world
-- size; async handles; subgroups; send/recv; results bit-identical on every rank; errors.
local U = dofile(arg[0]:gsub('[^/]*$', '') .. 'util.lua')
local dist = ember.dist
dist.init { timeout = 30 }
local rank, W = dist.rank(), dist.world_size()
local check, equal, fails = U.check, U.equal, U.fails

-- under mpirun (ember launch) 'auto' picks MPI; started torchrun-style (RANK, WORLD_SIZE,
-- MASTER_ADDR, MASTER_PORT: the real torchrun, or tests/distributed/torchrun.py) it picks 'gloo'
local env = dist.env()
local B = env.launcher == 'torchrun' and 'gloo' or 'mpi'
check(dist.backend() == B, 'backend %s, expected %s', tostring(dist.backend()), B)
check(dist.backend('cuda') == 'nccl', 'auto: CUDA tensors go to NCCL (attached on first use), got %s',
  tostring(dist.backend('cuda')))
check(W >= 2, 'run me on 2 or more ranks')
check(env.rank == rank and env.world_size == W and env.launcher == (B == 'mpi' and 'openmpi' or 'torchrun'),
  'env() %d %d %s', env.rank, env.world_size, env.launcher)
check(dist.local_rank() == rank, 'local rank %d', dist.local_rank())
dist.init()   -- a second init is harmless

-- rank r's value at position i (1-based), small integers so that every sum is exact
local function value(r, i) return (r + 1) * ((i - 1) % 5 + 1) end
local function filled(n, dtype, r)
  local t = ember.zeros(n, { dtype = 'float64' })
  for i = 1, n do t[i] = value(r, i) end
  return t:to(dtype)
end
local function expected(n, dtype, op)
  local t = ember.zeros(n, { dtype = 'float64' })
  for i = 1, n do
    local acc
    for r = 0, W - 1 do
      local v = value(r, i)
      if acc == nil then acc = v
      elseif op == 'sum' or op == 'avg' then acc = acc + v
      elseif op == 'max' then acc = math.max(acc, v)
      elseif op == 'min' then acc = math.min(acc, v)
      else acc = acc * v end
    end
    t[i] = op == 'avg' and acc / W or acc
  end
  return t:to(dtype)
end

-- ---------------------------------------------------------------- all_reduce
local sizes = { 0, 1, 7, 1000 }
for _, dtype in ipairs { 'float32', 'float64', 'int32', 'int64', 'float16', 'bfloat16' } do
  for _, op in ipairs { 'sum', 'avg', 'max', 'min', 'product' } do
    local floating = dtype:find('float') ~= nil
    for _, n in ipairs(sizes) do
      if op == 'avg' and not floating then
        fails(function() dist.all_reduce(filled(n, dtype, rank), 'avg') end, { "'avg' needs a floating dtype",
          dtype }, 'avg on ' .. dtype)
      elseif not (op == 'product' and W > 4) then
        local t = filled(n, dtype, rank)
        local r = dist.all_reduce(t, op)
        check(r == t, 'all_reduce returns its tensor')
        local want = expected(n, dtype, op)
        -- half-precision products round at every step of the reduction: one ulp of slack
        local tol = (op == 'product' and dtype:find('16') and n > 0) and want:to('float64'):abs():max():item() / 64 or 0
        U.near(t, want, tol, string.format('all_reduce %s %s n=%d', op, dtype, n))
      end
    end
  end
end
do -- uint8 and bool
  local u = ember.tensor({ rank, 1, 2 }, { dtype = 'uint8' })
  dist.all_reduce(u, 'max')
  equal(u, ember.tensor({ W - 1, 1, 2 }, { dtype = 'uint8' }), 'uint8 max')
  local b = ember.tensor({ rank == 0 and 1 or 0, 1, 0 }, { dtype = 'bool' })
  dist.all_reduce(b, 'max')
  equal(b:to('int32'), ember.tensor({ 1, 1, 0 }, { dtype = 'int32' }), 'bool max (or)')
  b = ember.tensor({ rank == 0 and 1 or 0, 1, 0 }, { dtype = 'bool' })
  dist.all_reduce(b, 'min')
  equal(b:to('int32'), ember.tensor({ 0, 1, 0 }, { dtype = 'int32' }), 'bool min (and)')
end
do -- a 2-D tensor, and the default op
  local t = ember.ones(3, 4) * (rank + 1)
  dist.all_reduce(t)
  equal(t, ember.ones(3, 4) * (W * (W + 1) / 2), '2-D sum')
end

do -- larger than one 8 MiB chunk of the shared-memory path: float64 sum, int64 max
  local n = 3 * 1048576 + 5
  local t = ember.arange(n, { dtype = 'float64' }) * (rank + 1)
  dist.all_reduce(t, 'sum')
  equal(t, ember.arange(n, { dtype = 'float64' }) * (W * (W + 1) / 2), 'chunked float64 sum')
  local m = ember.arange(n, { dtype = 'int64' }) + rank
  dist.all_reduce(m, 'max')
  equal(m, ember.arange(n, { dtype = 'int64' }) + (W - 1), 'chunked int64 max')
end
if os.getenv('EMBER_DIST_SHM') ~= '0' and not os.getenv('EMBER_DIST_RANKS_PER_HOST') then
  -- through shared memory a mismatched call is an error on every rank, not garbage (MPI
  -- itself has no such check), and the group goes on working afterwards. (Across simulated
  -- hosts the leaders' step goes through MPI, which has no such check.)
  fails(function() dist.all_reduce(ember.ones(10 + rank)) end, 'every rank must pass the same shape',
    'mismatched sizes')
  local t = ember.ones(4)
  dist.all_reduce(t)
  equal(t, ember.ones(4) * W, 'all_reduce after a mismatched one')
end
if os.getenv('EMBER_DIST_SHM') ~= '0' and not os.getenv('EMBER_DIST_RANKS_PER_HOST') and B ~= 'mpi' then
  -- outside MPI a plain broadcast reads the root's copy from its shared memory: every rank
  -- must name the same root (an error on every rank, not garbage), and the group goes on
  -- (a rank may meet a peer that has already moved on to the next call: that names the shapes)
  fails(function() dist.broadcast(ember.ones(4), rank) end, 'every rank must', 'mismatched roots')
  local b = ember.full(5, rank, { dtype = 'int64' })
  dist.broadcast(b, W - 1)
  equal(b, ember.full(5, W - 1, { dtype = 'int64' }), 'broadcast after mismatched roots')
end

-- ---------------------------------------------------------------- broadcast
for root = 0, W - 1 do
  for _, n in ipairs(sizes) do
    local t = filled(n, 'float32', rank)
    dist.broadcast(t, root)
    equal(t, filled(n, 'float32', root), string.format('broadcast from %d, n=%d', root, n))
  end
end
do
  local t = ember.tensor({ rank, rank }, { dtype = 'int64' })
  dist.broadcast(t)  -- root 0 by default
  equal(t, ember.tensor({ 0, 0 }, { dtype = 'int64' }), 'broadcast default root')
end

-- ---------------------------------------------------------------- all_gather
for _, n in ipairs(sizes) do
  local g = dist.all_gather(filled(n, 'float64', rank))
  check(g.shape[1] == W and (n == 0 and true or g.shape[2] == n), 'all_gather shape')
  for r = 0, W - 1 do
    if n > 0 then equal(g[r + 1], filled(n, 'float64', r), string.format('all_gather block %d n=%d', r, n)) end
  end
end
do
  local out = ember.zeros(W * 3, { dtype = 'int32' })
  dist.all_gather(ember.tensor({ rank, rank, rank }, { dtype = 'int32' }), { out = out })
  for r = 0, W - 1 do equal(out:narrow(1, 3 * r + 1, 3), ember.full({ 3 }, r, { dtype = 'int32' }), 'all_gather out') end
  fails(function() dist.all_gather(ember.ones(3), { out = ember.zeros(W * 3 + 1) }) end,
    { 'all_gather', 'expected ' .. (W * 3) }, 'all_gather wrong output size')
end

-- ---------------------------------------------------------------- reduce_scatter
do
  local t = filled(W * 3, 'float32', rank)
  local out = dist.reduce_scatter(t, 'sum')
  check(out.shape[1] == 3, 'reduce_scatter shape')
  equal(out, expected(W * 3, 'float32', 'sum'):narrow(1, 3 * rank + 1, 3), 'reduce_scatter sum')
  local m = dist.reduce_scatter(ember.ones(W * 2, 5) * (rank + 1), 'max')
  check(m.shape[1] == 2 and m.shape[2] == 5, 'reduce_scatter 2-D shape')
  equal(m, ember.ones(2, 5) * W, 'reduce_scatter max 2-D')
  local a = dist.reduce_scatter(filled(W, 'float64', rank), 'avg')
  equal(a, expected(W, 'float64', 'avg'):narrow(1, rank + 1, 1), 'reduce_scatter avg, one element each')
  fails(function() dist.reduce_scatter(ember.ones(W * 3 + 1)) end, { 'reduce_scatter', 'not a multiple of the ' .. W },
    'reduce_scatter not divisible')
end

-- ---------------------------------------------------------------- send / recv
do
  local nxt, prev = (rank + 1) % W, (rank - 1 + W) % W
  local inbox = ember.zeros(5)
  local h = dist.recv(inbox, prev, { async = true, tag = 7 })
  dist.send(ember.ones(5) * rank, nxt, { tag = 7 })
  check(h:wait() == inbox, 'recv handle returns the tensor')
  equal(inbox, ember.ones(5) * prev, 'ring send/recv')
  -- a large message (rendezvous protocol), sent asynchronously both ways
  local big_in = ember.zeros(300000)
  local hr = dist.recv(big_in, prev, { async = true })
  local hs = dist.send(ember.ones(300000) * (rank + 10), nxt, { async = true })
  hs:wait(); hr:wait()
  equal(big_in, ember.ones(300000) * (prev + 10), 'large send/recv')
  -- the sender sends fewer elements than the receiver expects
  if rank == 0 then
    dist.send(ember.ones(5), 1, { tag = 3 })
  elseif rank == 1 then
    fails(function() dist.recv(ember.zeros(6), 0, { tag = 3 }) end, { 'recv from rank 0', 'expected 6 elements',
      'sent 5' }, 'short message')
  end
  fails(function() dist.send(ember.ones(2), rank) end, 'cannot send to itself', 'send to self')
  fails(function() dist.recv(ember.ones(2), W) end, { 'out of range', 'ranks count from 0' }, 'recv rank out of range')
  fails(function() dist.send(ember.ones(2), nxt, { tag = -1 }) end, 'tag -1 out of range', 'bad tag')
end

-- ---------------------------------------------------------------- async handles
do
  local a, b = ember.ones(100) * rank, ember.ones(10) * (rank + 1)
  local ha = dist.all_reduce(a, 'sum', { async = true })
  local hb = dist.all_reduce(b, 'max', { async = true })
  local hg = dist.all_gather(ember.tensor({ rank }), { async = true })
  local hbar = dist.barrier { async = true }
  equal(hb:wait(), ember.ones(10) * W, 'async max')
  equal(ha:wait(5), ember.ones(100) * (W * (W - 1) / 2), 'async sum')
  local g = hg:wait()
  equal(g:view(W), ember.arange(0, W), 'async all_gather')
  check(hbar:wait() == nil, 'barrier handle')
  check(ha:test() == true and ha:is_completed(), 'test() after wait')
  local hc = dist.all_reduce(ember.ones(3), { async = true })
  while not hc:test() do end
  equal(hc.result, ember.ones(3) * W, 'test() polling')
  fails(function() ha:wait(-1) end, 'timeout must be a number of seconds > 0', 'bad wait timeout')
end

-- ---------------------------------------------------------------- bit-identical results
-- Random data, different on every rank, at sizes that take different MPI algorithms.
ember.manual_seed(100 + rank)
for _, n in ipairs { 3, 1000, 65539, 1048576 + 5 } do
  for _, dtype in ipairs { 'float32', 'float64', 'bfloat16' } do
    local t = ember.randn(n):to(dtype)
    dist.all_reduce(t, 'sum')
    U.same_everywhere(dtype:find('16') and t:to('float32') or t, string.format('all_reduce %s n=%d bits', dtype, n))
  end
  local a = ember.randn(n)
  dist.all_reduce(a, 'avg')
  U.same_everywhere(a, 'avg bits n=' .. n)
end

-- ---------------------------------------------------------------- subgroups
do
  local rev = {}
  for r = W - 1, 0, -1 do rev[#rev + 1] = r end
  local g = dist.new_group(rev)           -- every rank, numbered backwards
  check(g:rank() == W - 1 - rank and g:size() == W, 'reversed group rank %d', g:rank())
  local t = ember.tensor({ g:rank() })
  g:broadcast(t, 0)                        -- group rank 0 is world rank W - 1
  equal(t, ember.tensor({ 0 }), 'broadcast in a reversed group')
  local w = ember.tensor({ rank })
  dist.broadcast(w, 0, { group = g })
  equal(w, ember.tensor({ W - 1 }), 'group rank 0 is world rank W - 1')

  local evens, odds = {}, {}
  for r = 0, W - 1 do
    if r % 2 == 0 then evens[#evens + 1] = r else odds[#odds + 1] = r end
  end
  local ge, go = dist.new_group(evens), dist.new_group(odds)
  local mine, other = rank % 2 == 0 and ge or go, rank % 2 == 0 and go or ge
  check(mine:rank() == math.floor(rank / 2) and other:rank() == -1, 'subgroup ranks %d %d', mine:rank(), other:rank())
  local s = ember.tensor({ rank })
  mine:all_reduce(s)
  local want = 0
  for r = rank % 2, W - 1, 2 do want = want + r end
  equal(s, ember.tensor({ want }), 'subgroup all_reduce')
  local ag = mine:all_gather(ember.tensor({ rank }))
  check(ag.shape[1] == mine:size(), 'subgroup all_gather size')
  fails(function() other:all_reduce(ember.ones(1)) end, 'not a member', 'collective on a group without this rank')
  mine:barrier()
  fails(function() dist.new_group { 0, 0 } end, 'listed twice', 'duplicate rank')
  fails(function() dist.new_group { W } end, 'out of range', 'rank out of range')
end

-- ---------------------------------------------------------------- errors
do
  local t = ember.ones(4, 4):t()
  fails(function() dist.all_reduce(t) end, { 'all_reduce', 'not contiguous' }, 'non-contiguous')
  fails(function() dist.all_reduce(ember.ones(2), 'median') end, "unknown reduction 'median'", 'bad op')
  fails(function() dist.broadcast(ember.ones(2), W) end, { 'broadcast', 'root ' .. W, 'out of range' }, 'bad root')
  fails(function() dist.all_reduce({}) end, 'expected a tensor', 'not a tensor')
  fails(function() dist.all_reduce(ember.ones(2), 'sum', { bogus = 1 }) end, "unknown option 'bogus'", 'bad option')
  if ember.device_count('cuda') == 0 then
    fails(function() dist.init { backend = 'nccl' } end, { "'nccl' is not available", 'CUDA' }, 'nccl without a GPU')
  else
    fails(function() dist.init { backend = 'nccl' } end, "already initialised with backend '" .. B ..
      "', cannot switch to 'nccl'", 'nccl after ' .. B)
  end
  fails(function() dist.init { backend = 'tcp' } end, { "backend 'tcp' is gone", "'gloo'" }, 'tcp')
  fails(function() dist.init { backend = 'zmq' } end, { "backend 'zmq' is gone", "'gloo'" }, 'zmq')
  fails(function() dist.init { backend = 'self' } end, "'self' runs a world of one process", 'self under a launcher')
  local other = B == 'mpi' and 'gloo' or 'mpi'
  fails(function() dist.init { backend = other } end, "already initialised with backend '" .. B ..
    "', cannot switch to '" .. other .. "'", 'another backend')
  -- all_to_all and the other newer collectives: tests/distributed/more_collectives.lua
  local out = ember.zeros(W)
  dist.all_to_all(out, ember.ones(W) * rank)
  equal(out, ember.arange(W), 'all_to_all on ' .. B)
  local freed = ember.ones(3)
  freed:free()
  fails(function() dist.all_reduce(freed) end, 'freed', 'freed tensor')
end

U.done('collectives')
