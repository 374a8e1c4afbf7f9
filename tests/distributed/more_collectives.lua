-- tests/distributed/more_collectives.lua - all_to_all, all_to_all_v, gather, scatter, reduce
-- and all_gather_v, run on N ranks:
--   ember launch -n 3 tests/distributed/more_collectives.lua
-- Every dtype, blocks of 0, 1, an odd number and many elements (above the 256 KB of MPI's
-- blocking path for 4-byte dtypes), uneven and empty splits, every root, async handles
-- posted together, subgroups, and the errors: counts that do not match between ranks fail
-- on every rank alike (and the group goes on working), bad roots, bad counts. With
-- EMBER_DIST_MPI_P2P_ABOVE set low, MPI moves every count above it as point-to-point
-- messages: the path of counts above 2^31 - 1 elements.
local U = dofile(arg[0]:gsub('[^/]*$', '') .. 'util.lua')
local dist = ember.dist
dist.init { timeout = 60 }
local rank, W = dist.rank(), dist.world_size()
local check, equal, fails = U.check, U.equal, U.fails

local DTYPES = { 'float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8', 'bool' }
local LARGE = 131075
local SIZES = { 0, 1, 7, LARGE }

-- The block rank src sends rank dst: n pseudo-random values, the same on every rank that
-- makes it (so a receiver knows what it should get).
local function block(src, dst, n, dtype)
  ember.manual_seed(1000 + 97 * src + 13 * dst + n)
  local x = ember.rand(n) * 200
  if dtype == 'bool' then return x:gt(100) end
  return x:to(dtype)
end

local function cat(list, dtype)
  local nonempty = {}
  for _, t in ipairs(list) do if t:numel() > 0 then nonempty[#nonempty + 1] = t end end
  if #nonempty == 0 then return ember.zeros(0, { dtype = dtype }) end
  return ember.cat(nonempty)
end

local function zeros(n, dtype) return ember.zeros(n, { dtype = dtype }) end

local function sum(list)
  local s = 0
  for _, v in ipairs(list) do s = s + v end
  return s
end

-- ---------------------------------------------------------------- all_to_all
for _, dtype in ipairs(DTYPES) do
  for _, k in ipairs(SIZES) do
    local parts = {}
    for d = 0, W - 1 do parts[d + 1] = block(rank, d, k, dtype) end
    local input = cat(parts, dtype)
    for _, async in ipairs { false, true } do
      local out = zeros(W * k, dtype)
      local r = dist.all_to_all(out, input, async and { async = true } or nil)
      if async then r = r:wait() end
      check(r == out, 'all_to_all returns out')
      for s = 0, W - 1 do
        equal(out:narrow(1, s * k + 1, k), block(s, rank, k, dtype),
          string.format('all_to_all %s k=%d block from %d%s', dtype, k, s, async and ' async' or ''))
      end
    end
  end
end

-- ---------------------------------------------------------------- all_to_all_v
-- count(s, d): elements rank s sends rank d; zero for about a third of the pairs, and with
-- `lonely` rank W - 1 sends and receives nothing at all.
local function count(s, d, base, lonely)
  if lonely and (s == W - 1 or d == W - 1) then return 0 end
  return base * ((s + 2 * d) % 3)
end

local function a2av(dtype, base, lonely, opts, as_tensor)
  local ic, oc, parts = {}, {}, {}
  for d = 0, W - 1 do
    ic[d + 1] = count(rank, d, base, lonely)
    oc[d + 1] = count(d, rank, base, lonely)
    parts[d + 1] = block(rank, d, ic[d + 1], dtype)
  end
  local out = zeros(sum(oc), dtype)
  local ics, ocs = ic, oc
  if as_tensor then ics, ocs = ember.tensor(ic, { dtype = 'int64' }), ember.tensor(oc, { dtype = 'int32' }) end
  local r = dist.all_to_all_v(out, ocs, cat(parts, dtype), ics, opts)
  return r, out, oc
end

local function check_a2av(out, oc, base, dtype, what)
  local off = 0
  for s = 0, W - 1 do
    equal(out:narrow(1, off + 1, oc[s + 1]), block(s, rank, oc[s + 1], dtype),
      string.format('all_to_all_v %s base=%d from %d%s', dtype, base, s, what))
    off = off + oc[s + 1]
  end
  check(off == out:numel(), 'all_to_all_v output size')
end

for _, dtype in ipairs(DTYPES) do
  for i, base in ipairs(SIZES) do
    for _, lonely in ipairs { false, true } do
      local r, out, oc = a2av(dtype, base, lonely, nil, i % 2 == 0)
      check(r == out, 'all_to_all_v returns out')
      check_a2av(out, oc, base, dtype, lonely and ' (last rank idle)' or '')
    end
  end
end
do -- async, and every count zero
  local h, out, oc = a2av('float32', 5, false, { async = true })
  check(h:wait() == out, 'all_to_all_v handle returns out')
  check_a2av(out, oc, 5, 'float32', ' async')
  local _, empty = a2av('float64', 0, false)
  check(empty:numel() == 0, 'all_to_all_v of nothing')
end

-- ---------------------------------------------------------------- gather
for _, dtype in ipairs(DTYPES) do
  for _, k in ipairs(SIZES) do
    local roots = dtype == 'float32' and W or 1
    for root = W - roots, W - 1 do
      local mine = block(rank, root, k, dtype)
      local out = dist.gather(rank == root and zeros(W * k, dtype) or nil, mine, root)
      if rank == root then
        for s = 0, W - 1 do
          equal(out:narrow(1, s * k + 1, k), block(s, root, k, dtype),
            string.format('gather %s k=%d root %d block %d', dtype, k, root, s))
        end
      else
        check(out == nil, 'gather returns nil off the root')
      end
    end
  end
end
do -- the root's output made for it: [W, shape...]; async; an output ignored off the root
  local g = dist.gather(nil, ember.ones(2, 3) * rank, 0)
  if rank == 0 then
    check(g.shape[1] == W and g.shape[2] == 2 and g.shape[3] == 3, 'gather makes [W, 2, 3]')
    for s = 0, W - 1 do equal(g[s + 1], ember.ones(2, 3) * s, 'gather 2-D block ' .. s) end
  end
  local spare = ember.full({ rank == W - 1 and 4 * W or 4 }, -1)
  local h = dist.gather(spare, ember.ones(4) * rank, W - 1, { async = true })
  local got = h:wait()
  if rank == W - 1 then
    check(got == spare, 'async gather returns out')
    for s = 0, W - 1 do equal(spare:narrow(1, 4 * s + 1, 4), ember.ones(4) * s, 'async gather block ' .. s) end
  else
    equal(spare, ember.full({ 4 }, -1), 'gather leaves a non-root output alone')
  end
end

-- ---------------------------------------------------------------- scatter
for _, dtype in ipairs(DTYPES) do
  for _, k in ipairs(SIZES) do
    local roots = dtype == 'float32' and W or 1
    for root = 0, roots - 1 do
      local input
      if rank == root then
        local parts = {}
        for d = 0, W - 1 do parts[d + 1] = block(root, d, k, dtype) end
        input = cat(parts, dtype)
      end
      local out = zeros(k, dtype)
      check(dist.scatter(out, input, root) == out, 'scatter returns out')
      equal(out, block(root, rank, k, dtype), string.format('scatter %s k=%d root %d', dtype, k, root))
    end
  end
end
do -- async, with an input passed (and ignored) off the root
  local out = zeros(3, 'int64')
  local h = dist.scatter(out, ember.arange(3 * W, { dtype = 'int64' }) + 10 * rank, 1 % W, { async = true })
  equal(h:wait(), ember.arange(3 * rank, 3 * rank + 3, { dtype = 'int64' }) + 10 * (1 % W), 'async scatter')
end

-- ---------------------------------------------------------------- reduce
local function fact(n) return n <= 1 and 1 or n * fact(n - 1) end
for _, dtype in ipairs(DTYPES) do
  local floating = dtype:find('float') ~= nil
  for _, op in ipairs { 'sum', 'avg', 'max', 'min', 'product' } do
    for _, n in ipairs(SIZES) do
      local root = (n + #op) % W
      if op == 'avg' and not floating then
        fails(function() dist.reduce(zeros(n, dtype), 'avg', root) end, { 'reduce', "'avg' needs a floating dtype" },
          'reduce avg on ' .. dtype)
      elseif dtype == 'bool' then
        local t = (ember.ones(n) * (rank == 0 and 1 or 0)):to('bool')
        dist.reduce(t, op, root)
        -- sum and max are 'or', min and product 'and'
        local any = (op == 'sum' or op == 'max') and 1 or 0
        if rank == root then equal(t, ember.ones(n) * any, string.format('reduce bool %s n=%d', op, n)) end
      else
        local t = (ember.ones(n) * (rank + 1)):to(dtype)
        dist.reduce(t, op, root)
        local want = op == 'sum' and W * (W + 1) / 2 or op == 'avg' and (W + 1) / 2 or op == 'max' and W or
            op == 'min' and 1 or fact(W)
        if rank == root then
          equal(t, ember.ones(n) * want, string.format('reduce %s %s n=%d root %d', op, dtype, n, root))
        end
      end
    end
  end
end
do -- default op and root, async, the group method
  local t = ember.arange(5) * (rank + 1)
  dist.reduce(t)
  if rank == 0 then equal(t, ember.arange(5) * (W * (W + 1) / 2), 'reduce defaults: sum to rank 0') end
  local a = ember.ones(3) * rank
  local h = dist.reduce(a, 'max', W - 1, { async = true })
  check(h:wait() == a, 'reduce handle returns t')
  if rank == W - 1 then equal(a, ember.ones(3) * (W - 1), 'async reduce max') end
  local b = ember.ones(2)
  dist.world():reduce(b, { async = true }):wait()
  if rank == 0 then equal(b, ember.ones(2) * W, 'Group:reduce') end
end

-- ---------------------------------------------------------------- all_gather_v
for _, dtype in ipairs(DTYPES) do
  for i, k in ipairs(SIZES) do
    local counts = {}
    for d = 0, W - 1 do counts[d + 1] = k * (d % 3) end -- rank 0 (and 3) send nothing
    local out = zeros(sum(counts), dtype)
    local c = i % 2 == 0 and ember.tensor(counts, { dtype = 'int64' }) or counts
    local r = dist.all_gather_v(out, c, block(rank, 0, counts[rank + 1], dtype))
    check(r == out, 'all_gather_v returns out')
    local off = 0
    for s = 0, W - 1 do
      equal(out:narrow(1, off + 1, counts[s + 1]), block(s, 0, counts[s + 1], dtype),
        string.format('all_gather_v %s k=%d from %d', dtype, k, s))
      off = off + counts[s + 1]
    end
  end
end
do -- output made for it; async
  local counts = {}
  for d = 0, W - 1 do counts[d + 1] = d + 1 end
  local h = dist.all_gather_v(nil, counts, ember.ones(rank + 1) * rank, { async = true })
  local out = h:wait()
  check(out.shape[1] == W * (W + 1) / 2, 'all_gather_v makes sum(counts) elements')
  local off = 0
  for s = 0, W - 1 do
    equal(out:narrow(1, off + 1, s + 1), ember.ones(s + 1) * s, 'async all_gather_v from ' .. s)
    off = off + s + 1
  end
end

-- ---------------------------------------------------------------- many in flight
-- Handles posted together and waited for in another order: an all_to_all_v (which checks
-- its counts with the other ranks before its data) amid collectives posted after it.
do
  local h1, out1, oc1 = a2av('float32', 3, false, { async = true })
  local t2 = ember.ones(1000) * rank
  local h2 = dist.all_reduce(t2, 'sum', { async = true })
  local h3, out3, oc3 = a2av('int64', 2, true, { async = true })
  local counts = {}
  for d = 0, W - 1 do counts[d + 1] = 2 end
  local h4 = dist.all_gather_v(nil, counts, ember.ones(2) * rank, { async = true })
  local h5 = dist.gather(nil, ember.ones(300000) * rank, 0, { async = true })
  local g4 = h4:wait()
  local g5 = h5:wait()
  h3:wait(); h2:wait(); h1:wait()
  check_a2av(out1, oc1, 3, 'float32', ' (many in flight)')
  check_a2av(out3, oc3, 2, 'int64', ' (many in flight)')
  equal(t2, ember.ones(1000) * (W * (W - 1) / 2), 'all_reduce amid them')
  for s = 0, W - 1 do equal(g4:narrow(1, 2 * s + 1, 2), ember.ones(2) * s, 'all_gather_v amid them') end
  if rank == 0 then
    for s = 0, W - 1 do equal(g5[s + 1], ember.ones(300000) * s, 'large gather amid them') end
  end
end

-- ---------------------------------------------------------------- subgroups
do
  local rev = {}
  for r = W - 1, 0, -1 do rev[#rev + 1] = r end
  local g = dist.new_group(rev) -- group rank = W - 1 - world rank
  local gr = g:rank()
  local out = zeros(W * 2, 'int32')
  g:all_to_all(out, (ember.ones(W * 2) * gr):to('int32'))
  for s = 0, W - 1 do equal(out:narrow(1, 2 * s + 1, 2), ember.full({ 2 }, s, { dtype = 'int32' }), 'group all_to_all') end
  local ic = {}
  for d = 0, W - 1 do ic[d + 1] = 1 end
  local v = g:all_to_all_v(zeros(W, 'float32'), ic, ember.ones(W) * gr, ic, { async = true }):wait()
  equal(v, ember.arange(W), 'group all_to_all_v')
  local got = g:gather(nil, ember.ones(1) * gr, 0)
  if gr == 0 then equal(got:view(W), ember.arange(W), 'group gather at world rank ' .. (W - 1)) end
  local sc = g:scatter(zeros(1, 'float32'), gr == 0 and ember.arange(W) or nil, 0)
  equal(sc, ember.ones(1) * gr, 'group scatter')
  local agv = g:all_gather_v(nil, ic, ember.ones(1) * gr)
  equal(agv, ember.arange(W), 'group all_gather_v')
end

-- ---------------------------------------------------------------- errors
do
  -- all_to_all_v counts that do not match between ranks: rank 1 expects one element more
  -- from rank 0 than rank 0 sends. Every rank fails with the same message; nothing hangs.
  local ic, oc = {}, {}
  for d = 0, W - 1 do ic[d + 1], oc[d + 1] = 1, 1 end
  if rank == 1 then oc[1] = 2 end
  local err = fails(function() dist.all_to_all_v(zeros(sum(oc), 'float32'), oc, ember.ones(W), ic) end,
    { 'all_to_all_v', 'rank 0 sends 1 elements to rank 1, which expects 2', 'no data moved, on any rank' },
    'mismatched all_to_all_v counts')
  U.same_everywhere(ember.tensor({ #err }), 'the same error everywhere')
  -- async: the handle fails
  local h = dist.all_to_all_v(zeros(sum(oc), 'float32'), oc, ember.ones(W), ic, { async = true })
  fails(function() h:wait() end, 'which expects 2', 'mismatched all_to_all_v, async')
  -- all_gather_v with other counts on one rank
  local counts = {}
  for d = 0, W - 1 do counts[d + 1] = 1 end
  if rank == W - 1 then counts[1] = 0 end
  fails(function() dist.all_gather_v(nil, counts, ember.ones(counts[rank + 1])) end,
    { 'all_gather_v', 'no data moved, on any rank' }, 'mismatched all_gather_v counts')
  -- the group still works
  local out = zeros(W, 'float32')
  dist.all_to_all(out, ember.ones(W) * rank)
  equal(out, ember.arange(W), 'all_to_all after the failed ones')

  local x = ember.ones(W)
  for _, root in ipairs { W, -1 } do
    fails(function() dist.gather(nil, x, root) end, { 'gather', 'root ' .. root, 'out of range' }, 'gather bad root')
    fails(function() dist.scatter(x, x, root) end, { 'scatter', 'root ' .. root, 'out of range' }, 'scatter bad root')
    fails(function() dist.reduce(x, 'sum', root) end, { 'reduce', 'root ' .. root, 'out of range' }, 'reduce bad root')
  end
  fails(function() dist.gather(nil, x, 0.5) end, 'root must be a rank', 'fractional root')
  fails(function() dist.all_to_all(zeros(W + 1, 'float32'), ember.ones(W + 1)) end,
    { 'all_to_all', 'not a multiple of the ' .. W }, 'all_to_all not divisible')
  fails(function() dist.all_to_all(zeros(W, 'float32'), ember.ones(2 * W)) end,
    { 'all_to_all', 'expected ' .. 2 * W }, 'all_to_all output size')
  fails(function() dist.all_to_all(zeros(W, 'float64'), ember.ones(W)) end, 'output dtype float64, input dtype float32',
    'all_to_all dtypes')
  local ones = {}
  for d = 0, W - 1 do ones[d + 1] = 1 end
  fails(function() dist.all_to_all_v(zeros(W, 'float32'), ones, ember.ones(W), { 1 }) end,
    { 'in_counts has 1 entries', 'expected ' .. W }, 'a2av counts length')
  local neg = {}
  for d = 0, W - 1 do neg[d + 1] = d == 0 and -1 or 1 end
  fails(function() dist.all_to_all_v(zeros(W, 'float32'), ones, ember.ones(W), neg) end,
    { 'in_counts for rank 0 is -1' }, 'a2av negative count')
  fails(function() dist.all_to_all_v(zeros(W + 1, 'float32'), ones, ember.ones(W), ones) end,
    { 'out_counts add up to ' .. W, 'the output has ' .. (W + 1) }, 'a2av counts and output disagree')
  fails(function() dist.all_to_all_v(zeros(W, 'float32'), ones, ember.ones(W), ember.ones(W)) end,
    'in_counts must be an integer tensor', 'float counts')
  fails(function() dist.all_to_all_v(zeros(W, 'float32'), ones, ember.ones(W), { 1.5 }) end, 'in_counts',
    'fractional count')
  fails(function() dist.all_gather_v(nil, ones, ember.ones(2)) end,
    { 'all_gather_v', 'counts for rank ' .. rank .. ' (this rank) is 1', 'the input has 2' }, 'all_gather_v input size')
  if rank == 0 then
    fails(function() dist.gather(zeros(W + 1, 'float32'), x, 0) end, { 'gather', "root's output has", 'expected' },
      'gather output size')
    fails(function() dist.scatter(x, nil, 0) end, { 'scatter', 'rank 0 is the root and needs an input' },
      'scatter without input on the root')
    fails(function() dist.scatter(zeros(1, 'float32'), ember.ones(W + 1), 0) end, { 'scatter', "root's input has" },
      'scatter input size')
  end
  fails(function() dist.all_to_all(zeros(4, 'float32'), ember.ones(4, 4):t()) end, 'not contiguous',
    'non-contiguous')
  fails(function() dist.reduce(ember.ones(2), 'median') end, "unknown reduction 'median'", 'bad op')
end

U.done('more_collectives')
