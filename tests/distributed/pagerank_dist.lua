-- tests/distributed/pagerank_dist.lua - partitioned graphs and their PageRank (run under
-- `ember launch -n N`, N = 2, 3, 4): every graph below is ranked by the partitioned engine
-- and by the single process (reorder = 'none', the order the partitioned engine sums in),
-- and the scores must be the same bits; against a float64 power iteration (the same
-- definition, in Lua) the L1 distance must be <= 1e-6. Also: the partitioned cache round
-- trip and its refusal with another rank count, degrees, original ids, bad files. Weighted
-- graphs (Matrix Market values, SNAP third columns) likewise against the single-process
-- weighted PageRank (bits) and the weighted float64 reference. blocking = 'none' keeps
-- those bits on any graph; the tiled sweep (blocking = 'tiles') is checked for the same
-- bits at N ranks as at one rank (at 1 and 2 threads) and within 1e-6 of the others.
-- device = 'cuda' (a GPU per rank, NCCL between them): the same bits as one rank's GPU run
-- and within 1e-6 of the CPU; without a GPU, a clear error on every rank.
local U = dofile(arg[0]:gsub('[^/]*$', '') .. 'util.lua')
local dist, graph = ember.dist, ember.graph
local ffi = require 'ffi'
dist.init()
local rank, size = dist.rank(), dist.world_size()
local here = arg[0]:gsub('[^/]*$', '')
local tmp = os.getenv('TMPDIR') or '/tmp'
-- one folder per run (rank 0's pid, broadcast): other checkouts may run this test at once
pcall(ffi.cdef, 'int getpid(void);')   -- another module may have declared it
local pid = ember.tensor({ rank == 0 and ffi.C.getpid() or 0 }, { dtype = 'int64' })
dist.broadcast(pid, 0)
local dir = string.format('%s/ember_prdist_%d_%d', tmp, ember.dist.env().world_size, pid[1]:item())
if rank == 0 then os.execute('mkdir -p ' .. dir) end
dist.barrier()

-- float64 PageRank of the same definition (dangling mass spread uniformly); weighted: u's
-- share w / W(u), W(u) the sum of its out-arc weights, dangling when W(u) = 0
local function reference(g, iters, damping, weighted)
  local n = g:num_vertices()
  local src, dst = g:edges()
  local sp, dp = ffi.cast('int64_t *', src:contiguous():data_ptr()), ffi.cast('int64_t *', dst:contiguous():data_ptr())
  local wt = ffi.cast('float *', g:edge_weights():contiguous():data_ptr())
  local od = {}
  for v = 1, n do od[v] = 0 end
  for e = 0, src:numel() - 1 do
    local u = tonumber(sp[e])
    od[u] = od[u] + (weighted and tonumber(wt[e]) or 1)
  end
  local x, y = {}, {}
  for v = 1, n do x[v] = 1 / n end
  for _ = 1, iters do
    local dang = 0
    for v = 1, n do
      y[v] = 0
      if od[v] == 0 then dang = dang + x[v] end
    end
    for e = 0, src:numel() - 1 do
      local u = tonumber(sp[e]) -- 1-based
      local w = weighted and tonumber(wt[e]) or 1
      if od[u] > 0 then y[tonumber(dp[e])] = y[tonumber(dp[e])] + x[u] * w / od[u] end
    end
    local t = ((1 - damping) + damping * dang) / n
    for v = 1, n do x[v] = damping * y[v] + t end
  end
  return ember.tensor(x, { dtype = 'float64' })
end

local function case(what, make_part, make_single, iters, weighted)
  iters = iters or 40
  local pg = make_part()
  local s, info = pg:pagerank { tol = 0, max_iter = iters, weighted = weighted }
  local i = pg:info()
  U.check(s:numel() == i.last - i.first + 1, '%s: %d scores for vertices %d..%d', what, s:numel(), i.first, i.last)
  local full = pg:gather(s)
  local g = make_single()
  U.check(g:num_vertices() == i.num_vertices and g:num_edges() == i.num_edges,
    '%s: %d vertices %d arcs, the single process has %d and %d', what, i.num_vertices, i.num_edges,
    g:num_vertices(), g:num_edges())
  local ref, rinfo = g:pagerank { tol = 0, max_iter = iters, weighted = weighted }
  U.check(pg:is_weighted() == g:is_weighted(), '%s: is_weighted %s, the single process says %s', what,
    tostring(pg:is_weighted()), tostring(g:is_weighted()))
  U.check(info.weighted == rinfo.weighted, '%s: weighted %s, the single process %s', what, tostring(info.weighted),
    tostring(rinfo.weighted))
  U.check(info.engine == (info.weighted and 'cpu:partitioned:weighted' or 'cpu:partitioned'), '%s: engine %s', what,
    info.engine)
  U.equal(full, ref, what .. ': partitioned against single-process scores (bits)')
  U.same_everywhere(full, what .. ': gathered scores')
  -- blocking = 'none' keeps the plain sweep on any graph: the same bits as the single
  -- process's plain sweep
  local sn, ninfo = pg:pagerank { tol = 0, max_iter = iters, weighted = weighted, blocking = 'none' }
  U.check(ninfo.engine == info.engine, '%s: blocking none: engine %s', what, ninfo.engine)
  U.equal(pg:gather(sn), (g:pagerank { tol = 0, max_iter = iters, weighted = weighted, blocking = 'none' }),
    what .. ': blocking none against the single process (bits)')
  if g:num_edges() < 20000 then
    local l1 = (full:to('float64') - reference(g, iters, 0.85, rinfo.weighted)):abs():sum():item()
    U.check(l1 <= 1e-6, '%s: L1 %g against float64', what, l1)
  end
  -- degrees and original ids of this rank's vertices
  local indeg, outdeg = pg:degrees()
  local gin, gout = g:degrees()
  local ids = pg:original_ids()
  if s:numel() > 0 then
    U.equal(indeg, gin:narrow(1, i.first, s:numel()), what .. ': in-degrees')
    U.equal(outdeg, gout:narrow(1, i.first, s:numel()), what .. ': out-degrees')
    U.equal(ids, g:original_ids():narrow(1, i.first, s:numel()), what .. ': original ids')
  end
  -- exactly the mirrors' values travel: what the others mirror of mine
  local sent = dist.all_gather(ember.tensor({ i.values_sent, i.values_received }, { dtype = 'int64' }))
  local total_sent, total_recv = 0, 0
  for r = 1, size do
    total_sent, total_recv = total_sent + sent[r][1]:item(), total_recv + sent[r][2]:item()
  end
  U.check(total_sent == total_recv, '%s: %d values sent, %d received', what, total_sent, total_recv)
  U.check(info.bytes_sent == 4 * i.values_sent, '%s: bytes_sent', what)
  return pg, g, full
end

-- generated: Kronecker (isolated vertices, duplicates, self loops), kept or dropped
case('kronecker 10', function() return graph.kronecker { scale = 10, edge_factor = 8, seed = 5, group = true } end,
  function() return graph.kronecker { scale = 10, edge_factor = 8, seed = 5, reorder = 'none' } end)
case('kronecker 9 undirected, no loops, no duplicates', function()
  return graph.kronecker { scale = 9, edge_factor = 6, seed = 2, directed = false, drop_self_loops = true,
    drop_duplicates = true, group = true }
end, function()
  return graph.kronecker { scale = 9, edge_factor = 6, seed = 2, directed = false, drop_self_loops = true,
    drop_duplicates = true, reorder = 'none' }
end)
-- large enough for several threads' worth of blocks (bits still equal: no cache blocking)
case('uniform 20000 x 100000', function()
  return graph.uniform { vertices = 20000, edges = 100000, seed = 9, group = true }
end, function() return graph.uniform { vertices = 20000, edges = 100000, seed = 9, reorder = 'none' } end, 15)

-- files: SNAP (sparse ids, CRLF, a duplicate, a self loop), Matrix Market
local snap, mtx = here .. '../graph/small.snap', here .. '../graph/small.mtx'
case('small.snap', function() return graph.load(snap, { group = true }) end,
  function() return graph.load(snap, { reorder = 'none' }) end)
case('small.snap reversed, no loops', function()
  return graph.load(snap, { group = true, reverse = true, drop_self_loops = true })
end, function() return graph.load(snap, { reorder = 'none', reverse = true, drop_self_loops = true }) end)
-- weighted files: small.mtx and trade.mtx are real matrices (trade.mtx has a dangling
-- vertex and one whose out-arcs all weigh 0), ranked with their weights, without them
-- (weighted = false), and loaded without them (weights = false)
local trade = here .. '../../examples/data/trade.mtx'
for _, f in ipairs { { 'small.mtx', mtx }, { 'trade.mtx', trade } } do
  local name, path = f[1], f[2]
  case(name .. ' weighted', function() return graph.load(path, { group = true }) end,
    function() return graph.load(path, { reorder = 'none' }) end)
  case(name .. ' weighted = false', function() return graph.load(path, { group = true }) end,
    function() return graph.load(path, { reorder = 'none' }) end, 40, false)
  case(name .. ' weighted = true, undirected, no duplicates', function()
    return graph.load(path, { group = true, directed = false, drop_duplicates = true })
  end, function() return graph.load(path, { reorder = 'none', directed = false, drop_duplicates = true }) end, 40, true)
  case(name .. ' weights ignored', function() return graph.load(path, { group = true, weights = false }) end,
    function() return graph.load(path, { reorder = 'none', weights = false }) end)
end
-- a weighted SNAP file: duplicate arcs of unequal weights (far apart in the file, so on
-- different ranks' byte ranges), a vertex whose out-arcs weigh 0, sinks, weights from
-- 1e-6 to 1e20 (W(u) must be summed in the single process's order to be the same bits)
local wsnap = dir .. '/weighted.txt'
if rank == 0 then
  local f = assert(io.open(wsnap, 'w'))
  f:write('# u v weight\n')
  for v = 0, 39 do
    if v % 10 ~= 9 then -- 9, 19, 29, 39: sinks
      local w = v == 5 and '0' or string.format('%g', (v % 7 + 1) / 4)
      f:write(string.format('%d %d %s\n%d\t%d  %s\n', v, (v + 1) % 40, w, v, (v * 7) % 40, v == 5 and '0.0' or '2'))
    end
  end
  for v = 0, 39, 3 do
    if v % 10 ~= 9 and v ~= 5 then
      f:write(string.format('%d %d %s\n', v, (v + 1) % 40, v % 2 == 0 and '1e20' or '1e-6'))
    end
  end
  f:write('12 13 0.1\n12 13 0.3\n12 13 0.1\n')
  f:close()
end
dist.barrier()
for _, o in ipairs {
  { 'weighted.txt', {} },
  { 'weighted.txt without duplicates', { drop_duplicates = true } },
  { 'weighted.txt undirected, without duplicates', { directed = false, drop_duplicates = true } },
  { 'weighted.txt reversed', { reverse = true } },
} do
  local function opts(extra)
    local t = {}
    for k, v in pairs(o[2]) do t[k] = v end
    for k, v in pairs(extra) do t[k] = v end
    return t
  end
  case(o[1], function() return graph.load(wsnap, opts { group = true }) end,
    function() return graph.load(wsnap, opts { reorder = 'none' }) end)
end
case('weighted.txt, weights ignored', function() return graph.load(wsnap, { group = true, weights = false }) end,
  function() return graph.load(wsnap, { reorder = 'none', weights = false }) end)
do
  -- weighted = true on an unweighted graph is refused on every rank
  local pg = graph.load(snap, { group = true })
  U.fails(function() pg:pagerank { weighted = true } end, { 'has no edge weights' }, 'weighted = true, unweighted')
  -- bad weights: the error names file:line (on the rank whose range holds the line; the
  -- others name that rank)
  local function bad_file(name, lines, needle, line)
    local path = dir .. '/' .. name
    if rank == 0 then
      local f = assert(io.open(path, 'w'))
      f:write(table.concat(lines, '\n'), '\n')
      f:close()
    end
    dist.barrier()
    local ok, err = pcall(graph.load, path, { group = true })
    err = tostring(err)
    U.check(not ok and err:find('graph part load', 1, true), '%s: expected an error, got %s', name, err)
    local at = name .. ':' .. line .. ':'
    local mine = err:find(at, 1, true) and err:find(needle, 1, true)
    -- worded as the single process words it
    local sok, serr = pcall(graph.load, path)
    serr = tostring(serr)
    U.check(not sok and serr:find(at, 1, true), '%s: the single process says %s', name, serr)
    if mine then
      local tail, stail = err:sub(err:find(at, 1, true)), serr:sub(serr:find(at, 1, true))
      U.check(tail == stail, '%s: %s, the single process says %s', name, tail, stail)
    end
    local t = ember.tensor({ mine and 1 or 0 }, { dtype = 'int32' })
    dist.all_reduce(t, 'sum')
    local any = t[1]:item()
    U.check(any >= 1, '%s: no rank named line %d (%s), this one says %s', name, line, needle, err)
  end
  local lines = {}
  for v = 0, 59 do lines[#lines + 1] = string.format('%d %d 1.5', v, (v + 1) % 60) end
  lines[45] = '44 45 -2'
  bad_file('negative.txt', lines, 'the third field is the edge', 45)
  lines[45] = '44 45'
  bad_file('mixed.txt', lines, 'every edge needs a weight', 45)
  local m = { '%%MatrixMarket matrix coordinate real general', '60 60 60' }
  for v = 1, 60 do m[#m + 1] = string.format('%d %d 0.5', v, v % 60 + 1) end
  m[50] = '48 49 nan'
  bad_file('nan.mtx', m, 'NaN', 50)
  m[50] = '48 49 0x1p3'
  bad_file('hex.mtx', m, 'expected a real value', 50)
  m[50] = '48 49 -0.5'
  bad_file('negative.mtx', m, 'is negative', 50)
  m[50] = '48 49 0.5 7'
  bad_file('extra.mtx', m, 'unexpected text after the entry', 50)
  m[50] = '48 49'
  bad_file('missing.mtx', m, "missing the entry's value", 50)
end

-- a star: every arc into vertex 0, so the ranks after the first hold no arcs at all; lines
-- long and short so that byte ranges split lines anywhere
local star = dir .. '/star.txt'
if rank == 0 then
  local f = assert(io.open(star, 'w'))
  f:write('# a star\n')
  for v = 1, 299 do f:write(string.format('%d 0%s\n', v, v % 7 == 0 and '   # trailing words' or '')) end
  f:close()
end
dist.barrier()
local pg = case('star', function() return graph.load(star, { group = true }) end,
  function() return graph.load(star, { reorder = 'none' }) end)
if size > 1 and rank == size - 1 then
  U.check(pg:info().local_edges == 0, 'star: the last rank holds %d arcs, expected none', pg:info().local_edges)
end

-- fewer vertices than ranks: the last ranks own none and send and receive nothing (MPI's
-- all_to_all_v once took their two empty buffers at one address for in-place and hung)
local tiny = case('2 vertices', function() return graph.uniform { vertices = 2, edges = 3, seed = 4, group = true } end,
  function() return graph.uniform { vertices = 2, edges = 3, seed = 4, reorder = 'none' } end)
if size > 2 and rank == size - 1 then
  U.check(tostring(tiny):find('no vertices', 1, true), 'tiny: rank %d should own no vertex: %s', rank, tostring(tiny))
end
do -- tiles forced where some ranks own nothing
  local st, sinfo = tiny:pagerank { tol = 0, max_iter = 20, blocking = 'tiles' }
  local sp = tiny:pagerank { tol = 0, max_iter = 20, blocking = 'none' }
  local l1 = (tiny:gather(st):to('float64') - tiny:gather(sp):to('float64')):abs():sum():item()
  U.check(l1 <= 1e-6, '2 vertices, tiles (%s): L1 %g against plain', sinfo.engine, l1)
end

-- the weighted partitioned cache: round trip (weights kept), and loaded without them
do
  local wcache = dir .. '/weighted.emp'
  local pw, _, wfull = case('weighted.txt for the cache', function() return graph.load(wsnap, { group = true }) end,
    function() return graph.load(wsnap, { reorder = 'none' }) end)
  pw:save(wcache)
  local wback = graph.load(wcache, { group = true })
  U.check(wback:is_weighted() and tostring(wback) == tostring(pw), 'weighted cache: %s, expected %s', tostring(wback),
    tostring(pw))
  local ws, wi = wback:pagerank { tol = 0, max_iter = 40 }
  U.check(wi.weighted, 'weighted cache: PageRank did not use the weights')
  U.equal(wback:gather(ws), wfull, 'weighted cache round trip: the same scores')
  local f = io.open(wcache, 'r')
  local first = f:read('*l')
  f:close()
  U.check(first == 'ember-graph-parts 2', 'weighted cache manifest starts %s', tostring(first))
  case('weighted cache, weights ignored', function() return graph.load(wcache, { group = true, weights = false }) end,
    function() return graph.load(wsnap, { reorder = 'none', weights = false }) end)
end

-- The tiled sweep (blocking = 'tiles' forces the tiles on small graphs too): the same bits
-- at every rank and thread count (here N ranks x 1 thread against one rank, a group of
-- rank 0 alone, at 1 and 2 threads), within rounding of the plain sweep and of the single
-- process (the order of additions differs), and within 1e-6 of float64 on a small graph.
local solo = dist.new_group { 0 }
local function tiled(what, make, iters, small)
  local pg = make(true)
  local s, info = pg:pagerank { tol = 0, max_iter = iters, blocking = 'tiles' }
  U.check(info.engine == 'cpu:partitioned:tiles', '%s: tiles: engine %s', what, info.engine)
  local full = pg:gather(s)
  U.same_everywhere(full, what .. ': tiled scores')
  local plain = pg:gather((pg:pagerank { tol = 0, max_iter = iters, blocking = 'none' }))
  local l1 = (full:to('float64') - plain:to('float64')):abs():sum():item()
  U.check(l1 <= 1e-6, '%s: tiled against plain: L1 %g', what, l1)
  local g = make(nil)
  local single = g:pagerank { tol = 0, max_iter = iters, blocking = 'tiles' }
  l1 = (full:to('float64') - single:to('float64')):abs():sum():item()
  U.check(l1 <= 1e-6, '%s: tiled against the single process: L1 %g', what, l1)
  if small then
    l1 = (full:to('float64') - reference(g, iters, 0.85, false)):abs():sum():item()
    U.check(l1 <= 1e-6, '%s: tiled against float64: L1 %g', what, l1)
  end
  if rank == 0 then
    local threads = ember.get_num_threads()
    for _, t in ipairs { 1, 2 } do
      ember.set_num_threads(t)
      local one = make(solo)
      local s1, i1 = one:pagerank { tol = 0, max_iter = iters, blocking = 'tiles' }
      U.check(i1.engine == 'cpu:partitioned:tiles', '%s: one rank: engine %s', what, i1.engine)
      U.equal(s1, full, string.format('%s: tiled, %d ranks against 1 rank x %d threads (bits)', what, size, t))
    end
    ember.set_num_threads(threads)
  end
  dist.barrier()
end
tiled('tiled kronecker 10', function(grp)
  return graph.kronecker { scale = 10, edge_factor = 8, seed = 5, group = grp, reorder = grp == nil and 'none' or nil }
end, 30, true)
-- large enough that one rank sweeps with several threads, many segments and blocks
tiled('tiled kronecker 15 undirected', function(grp)
  return graph.kronecker { scale = 15, edge_factor = 8, seed = 3, directed = false, drop_self_loops = true,
    drop_duplicates = true, group = grp }
end, 20, false)
-- device = 'cuda': each rank sweeps on its GPU, NCCL between them. With a GPU per rank the
-- scores are the same bits as one rank's (a group of rank 0 alone, on its GPU) and within
-- 1e-6 of the CPU's; without, every rank names the device it lacks (no rank waits).
local gpus = ember.device_count('cuda')
if gpus >= size then
  local dev = 'cuda:' .. dist.local_rank() % gpus
  local make = function(grp) return graph.kronecker { scale = 12, edge_factor = 8, seed = 4, group = grp } end
  local pg = make(true)
  local s, info = pg:pagerank { tol = 0, max_iter = 25, device = dev }
  U.check(info.engine == 'cuda:partitioned', 'cuda: engine %s', info.engine)
  U.check(info.bytes_sent > 0 or size == 1, 'cuda: %d bytes sent', info.bytes_sent)
  local full = pg:gather(s)
  U.same_everywhere(full, 'cuda: scores')
  local cpu = pg:gather((pg:pagerank { tol = 0, max_iter = 25, blocking = 'none' }))
  local l1 = (full:to('float64') - cpu:to('float64')):abs():sum():item()
  U.check(l1 <= 1e-6, 'cuda against the CPU: L1 %g', l1)
  if rank == 0 then
    local one = make(solo):pagerank { tol = 0, max_iter = 25, device = dev }
    U.equal(one, full, string.format('cuda: %d ranks against 1 rank (bits)', size))
  end
  dist.barrier()
elseif gpus == 0 then
  U.fails(function() graph.uniform { vertices = 50, edges = 200, seed = 1, group = true }:pagerank {
    device = 'cuda' } end, { 'graph part pagerank: device cuda:0 is not available' }, 'device cuda without a GPU')
elseif rank == 0 then
  io.stderr:write(string.format('pagerank_dist: the cuda case skipped (%d GPUs for %d ranks)\n', gpus, size))
end

-- propagation blocking does not partition: refused on every rank
U.fails(function() graph.uniform { vertices = 50, edges = 200, seed = 1, group = true }:pagerank {
  blocking = 'bins' } end, { 'propagation blocking does not partition' }, 'blocking bins')

-- the partitioned cache: round trip, then refused with another rank count
local cache = dir .. '/kron.emp'
local pk, _, full = case('kronecker 8', function()
  return graph.kronecker { scale = 8, edge_factor = 4, seed = 7, group = true }
end, function() return graph.kronecker { scale = 8, edge_factor = 4, seed = 7, reorder = 'none' } end)
pk:save(cache)
local back = graph.load(cache, { group = true })
U.check(tostring(back) == tostring(pk), 'cache: %s, expected %s', tostring(back), tostring(pk))
local s2 = back:pagerank { tol = 0, max_iter = 40 }
U.equal(back:gather(s2), full, 'cache round trip: the same scores')
if rank == 0 and size > 1 then
  U.fails(function() graph.load(cache, { group = solo }) end,
    { 'was built for ' .. size .. ' ranks, this group has 1' }, 'cache with another rank count')
end
dist.barrier()
-- a damaged part is refused on every rank
if rank == 0 then
  local f = assert(io.open(cache .. '.0-of-' .. size, 'r+b'))
  f:seek('set', 200)
  f:write('\255\255\255')
  f:close()
end
dist.barrier()
U.fails(function() graph.load(cache, { group = true }) end, { 'graph part load' }, 'damaged cache')

-- a bad line is an error on every rank, with its line number
local bad = dir .. '/bad.txt'
if rank == 0 then
  local f = assert(io.open(bad, 'w'))
  for v = 1, 200 do f:write(v == 150 and 'x y\n' or string.format('%d %d\n', v, v + 1)) end
  f:close()
end
dist.barrier()
U.fails(function() graph.load(bad, { group = true }) end, { 'graph part load' }, 'bad line')
if rank == 0 then os.execute('rm -rf ' .. dir) end
U.done('pagerank_dist')
