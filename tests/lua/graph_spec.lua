-- graph_spec.lua: ember.graph (load, generators, from_edges, pagerank, topk, compare,
-- save/load) through the Lua API: 1-based ids, options checked, errors as Lua errors.
local graph = ember.graph or require 'ember.graph'

local D = 0.85
local fixtures = debug.getinfo(1, 'S').source:match('^@(.*/)lua/') .. 'graph/'

local function error_of(fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok, 'expected an error')
  return tostring(err)
end

local tmpdir = test_tmpdir

local write = test_write

describe('ember.graph', function()
  it('ranks a hand-checked graph with 1-based ids', function()
    -- 1 -> 2, 2 dangling: x1 = 1/(2+d)
    local g = graph.from_edges({ 1 }, { 2 })
    assert.are.equal(2, g:num_vertices())
    assert.are.equal(1, g:num_edges())
    assert.is_true(g:is_directed())
    local x, info = g:pagerank { tol = 1e-9, max_iter = 500 }
    assert.are.equal('float32', x.dtype)
    assert.are.same({ 2 }, x.shape)
    local v = x:totable()
    assert.is_true(math.abs(v[1] - 1 / (2 + D)) < 1e-7)
    assert.is_true(math.abs(v[2] - (1 + D) / (2 + D)) < 1e-7)
    assert.is_false(info.converged) -- float32 scores cannot change by less than 1e-9 in L1
    assert.are.equal(500, info.iterations)
    x, info = g:pagerank { tol = 1e-6 }
    assert.is_true(info.converged and info.residual < 1e-6 and info.iterations < 100)
    assert.are.equal(info.iterations, #info.residuals)
    assert.are.equal(info.residual, info.residuals[#info.residuals])
    -- personalisation as a list: 1 <-> 2 teleporting to 1 only gives x1 = 1/(1+d)
    g = graph.from_edges({ 1, 2 }, { 2, 1 })
    x = g:pagerank { personalization = { 1, 0 }, tol = 1e-9, max_iter = 500 }
    assert.is_true(math.abs(x:totable()[1] - 1 / (1 + D)) < 1e-7)
    -- the GAP benchmark's variant leaks the dangling mass
    g = graph.from_edges({ 1 }, { 2 })
    x = g:pagerank { method = 'gapbs', tol = 1e-9 }
    assert.is_true(math.abs(x:totable()[1] - (1 - D) / 2) < 1e-7)
  end)

  it('generates deterministic Kronecker graphs and ranks them', function()
    local a = graph.kronecker { scale = 10, edge_factor = 8, seed = 3 }
    local b = graph.kronecker { scale = 10, edge_factor = 8, seed = 3, reorder = 'none' }
    assert.are.equal(1024, a:num_vertices())
    assert.are.equal(8192, a:num_edges())
    local sa, da = a:edges()
    local sb, db = b:edges()
    assert.are.same(sa:totable(), sb:totable())
    assert.are.same(da:totable(), db:totable())
    -- edge ids are 1-based, as the degree tensors' positions: they must agree
    local count, indeg = {}, a:degrees()
    for _, v in ipairs(da:totable()) do count[v] = (count[v] or 0) + 1 end
    for i, d in ipairs(indeg:totable()) do assert.are.equal(d, count[i] or 0) end
    local x, info = a:pagerank { max_iter = 20, tol = 0 }
    assert.are.equal(20, info.iterations)
    assert.is_false(info.converged)
    assert.is_true(math.abs(x:sum():item() - 1) < 1e-5)
    local y = b:pagerank { max_iter = 20, tol = 0 }
    assert.is_true((x - y):abs():max():item() < 1e-6)
    local top = graph.topk(x, 5, a)
    assert.are.equal(5, #top)
    assert.is_true(top[1].score >= top[2].score)
    assert.are.equal(top[1].id - 1, top[1].vertex) -- generated graphs: original id = dense id - 1
    local c = graph.compare_indegree(a, x, 20)
    assert.are.equal(20, c.k)
    assert.is_true(c.overlap > 10 and c.kendall_tau > 0)
    assert.are.same(c, graph.compare(x, indeg, 20))
    local u = graph.uniform { vertices = 100, edges = 1000, seed = 1, drop_self_loops = true }
    assert.are.equal(100, u:num_vertices())
    assert.is_true(u:num_edges() <= 1000)
  end)

  it('reads far contributions by plain pull, tiles or bins, all to the same scores', function()
    -- big enough for several threads (2^18 arcs + vertices), forced blockings
    local g = graph.kronecker { scale = 14, edge_factor = 16, seed = 4 }
    local plain, pi = g:pagerank { max_iter = 30, tol = 0, blocking = 'none' }
    assert.are.equal('cpu', pi.engine)
    for _, b in ipairs { 'tiles', 'bins', 'auto' } do
      local x, info = g:pagerank { max_iter = 30, tol = 0, blocking = b }
      if b ~= 'auto' then assert.are.equal('cpu:' .. b, info.engine) end
      local d = (x - plain):abs():sum():item()
      assert.is_true(d < 1e-6, string.format('blocking %s: L1 %g from the plain pull', b, d))
    end
    assert.matches("pagerank: blocking must be one of", error_of(g.pagerank, g, { blocking = 'blocks' }))
  end)

  it('loads SNAP files with labels, original ids and options', function()
    local g = graph.load(fixtures .. 'small.snap', { labels = fixtures .. 'small_labels.txt' })
    assert.are.equal(5, g:num_vertices())
    assert.are.equal(8, g:num_edges())
    assert.are.equal(10, g:original_id(1))
    assert.are.equal(4, g:find(40))
    assert.is_nil(g:find(41))
    assert.are.equal('bob the builder', g:label(2))
    assert.is_nil(g:label(4))
    local x = g:pagerank()
    local top = graph.topk(x, 2, g)
    assert.are.equal(10, top[1].vertex)
    assert.are.equal('alice', top[1].label)
    local ids = g:original_ids()
    assert.are.same({ 10, 20, 30, 40, 50 }, ids:totable())
    local clean = graph.load(fixtures .. 'small.snap', { drop_self_loops = true, drop_duplicates = true })
    assert.are.equal(6, clean:num_edges())
    local undirected = graph.load(fixtures .. 'small.snap', { directed = false, format = 'snap' })
    assert.is_false(undirected:is_directed())
    local m = graph.load(fixtures .. 'small.mtx')
    assert.are.equal(1, m:original_id(1))
    assert.matches('Graph%(4 vertices, 5 arcs, directed, weighted%)', tostring(m))
    assert.is_true(m:is_weighted())
    assert.is_false(graph.load(fixtures .. 'small.mtx', { weights = false }):is_weighted())
  end)

  it('saves and reloads the binary format', function()
    local dir = tmpdir()
    local g = graph.load(fixtures .. 'small.snap', { labels = fixtures .. 'small_labels.txt' })
    g:save(dir .. '/small.emg')
    local h = graph.load(dir .. '/small.emg')
    assert.are.same(g:pagerank():totable(), h:pagerank():totable())
    assert.are.equal('alice', h:label(1))
    h:free()
    assert.matches('the graph was freed', error_of(function() return h:num_vertices() end))
    assert.are.equal('Graph(freed)', tostring(h))
  end)

  it('reports misuse as errors that name the call', function()
    local dir = tmpdir()
    assert.matches("unknown option 'damp'", error_of(function() graph.from_edges({ 1 }, { 2 }):pagerank { damp = 1 } end))
    assert.matches("method must be one of 'gapbs', 'gauss%-seidel', 'jacobi'",
      error_of(function() graph.from_edges({ 1 }, { 2 }):pagerank { method = 'power' } end))
    assert.matches('damping is 2', error_of(function() graph.from_edges({ 1 }, { 2 }):pagerank { damping = 2 } end))
    assert.matches('scale must be an integer >= 1', error_of(graph.kronecker, { scale = 0 }))
    assert.matches("reorder must be one of 'degree', 'none'", error_of(graph.kronecker, { scale = 4, reorder = 'x' }))
    assert.matches('directed must be true or false', error_of(graph.load, fixtures .. 'small.snap', { directed = 1 }))
    assert.matches('edge 2 is 2 %-> 5, expected ids in 1..3',
      error_of(graph.from_edges, { 1, 2 }, { 2, 5 }, { vertices = 3 }))
    assert.matches('2 sources but 1 destinations', error_of(graph.from_edges, { 1, 2 }, { 2 }))
    local bad = write(dir .. '/bad.txt', '1 2\n3 x\n')
    assert.matches('load_snap: .*bad.txt:2: expected two non%-negative integer vertex ids', error_of(graph.load, bad))
    local empty = write(dir .. '/empty.txt', '# nothing\n')
    assert.matches('no edges found', error_of(graph.load, empty))
    assert.matches('vertex 3 is out of range', error_of(function() graph.from_edges({ 1 }, { 2 }):label(3) end))
    assert.matches('personalization', error_of(function()
      graph.from_edges({ 1 }, { 2 }):pagerank { personalization = { 1, 2, 3 } }
    end))
    assert.matches('expected a graph', error_of(graph.compare_indegree, {}, ember.zeros(2), 1))
  end)
end)

-- The weighted PageRank of ember/graph.h in float64, from an edge list ({u, v, w}, dense
-- ids 1..n), computed here without the library: sources of out-weight 0 are dangling.
local function weighted_reference(n, edges, undirected)
  local outw, x = {}, {}
  for v = 1, n do outw[v], x[v] = 0, 1 / n end
  local arcs = {}
  for _, e in ipairs(edges) do
    arcs[#arcs + 1] = e
    if undirected and e[1] ~= e[2] then arcs[#arcs + 1] = { e[2], e[1], e[3] } end
  end
  for _, a in ipairs(arcs) do outw[a[1]] = outw[a[1]] + a[3] end
  for _ = 1, 10000 do
    local y, dangling, diff = {}, 0, 0
    for v = 1, n do
      y[v] = 0
      if outw[v] == 0 then dangling = dangling + x[v] end
    end
    for _, a in ipairs(arcs) do
      if outw[a[1]] > 0 then y[a[2]] = y[a[2]] + x[a[1]] * a[3] / outw[a[1]] end
    end
    for v = 1, n do
      y[v] = D * y[v] + ((1 - D) + D * dangling) / n
      diff = diff + math.abs(y[v] - x[v])
    end
    x = y
    if diff < 1e-15 then break end
  end
  return x
end

local function l1(t, ref)
  local s, v = 0, t:totable()
  for i = 1, #ref do s = s + math.abs(v[i] - ref[i]) end
  return s
end

describe('ember.graph weighted', function()
  -- 1-based ids; 1 -> 2 twice, a self-loop on 3, 5 has only weight-0 out-arcs, 6 none, 7
  -- isolated (Matrix Market only: the size line declares it)
  local EDGES = { { 1, 2, 1.5 }, { 1, 3, 0.5 }, { 1, 2, 2.5 }, { 2, 3, 3 }, { 3, 1, 1 }, { 3, 3, 0.25 },
    { 3, 4, 2 }, { 4, 5, 1e-3 }, { 4, 1, 1 }, { 5, 1, 0 }, { 5, 4, 0 }, { 2, 6, 4 } }

  local function write_files(dir)
    local snap, mtx = { '# u v weight\n' }, { '%%MatrixMarket matrix coordinate real general\n7 7 12\n' }
    for _, e in ipairs(EDGES) do
      snap[#snap + 1] = string.format('%d\t%d\t%.17g\n', e[1] - 1, e[2] - 1, e[3])
      mtx[#mtx + 1] = string.format('%d %d %.17g\n', e[1], e[2], e[3])
    end
    return write(dir .. '/w.txt', table.concat(snap)), write(dir .. '/w.mtx', table.concat(mtx))
  end

  it('ranks weighted SNAP and Matrix Market files as the float64 reference does', function()
    local snap, mtx = write_files(tmpdir())
    for _, case in ipairs { { snap, 6 }, { mtx, 7 } } do
      local ref = weighted_reference(case[2], EDGES)
      for _, opts in ipairs { {}, { reorder = 'none' }, { drop_duplicates = true } } do
        local g = graph.load(case[1], opts)
        assert.is_true(g:is_weighted())
        assert.matches(', weighted%)$', tostring(g))
        local x, info = g:pagerank { tol = 1e-10, max_iter = 1000 }
        assert.is_true(info.weighted)
        assert.are.equal('cpu:weighted', info.engine)
        assert.is_true(l1(x, ref) <= 1e-6, case[1] .. ': L1 ' .. l1(x, ref))
        -- 'auto' and true are the same run; false counts each arc once
        assert.are.same(x:totable(), g:pagerank { tol = 1e-10, max_iter = 1000, weighted = true }:totable())
        local y, plain = g:pagerank { tol = 1e-10, max_iter = 1000, weighted = false }
        assert.is_false(plain.weighted)
        local unit, seen = {}, {}
        for _, e in ipairs(EDGES) do -- each arc once when duplicates were dropped
          local key = e[1] .. ' ' .. e[2]
          if not (opts.drop_duplicates and seen[key]) then unit[#unit + 1] = { e[1], e[2], 1 } end
          seen[key] = true
        end
        assert.is_true(l1(y, weighted_reference(case[2], unit)) <= 1e-6)
      end
    end
    -- undirected: each edge's weight on both arcs
    local g = graph.load(snap, { directed = false })
    assert.is_true(l1(g:pagerank { tol = 1e-10, max_iter = 1000 }, weighted_reference(6, EDGES, true)) <= 1e-6)
  end)

  it('keeps the weights beside the arcs, adds duplicates, and saves them', function()
    local dir = tmpdir()
    local snap = write_files(dir)
    local g = graph.load(snap, { drop_duplicates = true })
    local src, dst = g:edges()
    local w = g:edge_weights()
    assert.are.equal('float32', w.dtype)
    local s, d, wt = src:totable(), dst:totable(), w:totable()
    for i = 1, #s do
      local want = 0
      for _, e in ipairs(EDGES) do
        if e[1] == s[i] and e[2] == d[i] then want = want + e[3] end
      end
      assert.is_true(math.abs(wt[i] - want) <= 1e-6 * want, string.format('%d -> %d: %g, expected %g', s[i], d[i],
        wt[i], want))
    end
    assert.are.equal(#EDGES - 1, #s) -- 1 -> 2 once, weighing 4
    g:save(dir .. '/w.emg')
    local h = graph.load(dir .. '/w.emg')
    assert.is_true(h:is_weighted())
    assert.are.same(g:pagerank():totable(), h:pagerank():totable())
    assert.is_false(graph.load(dir .. '/w.emg', { weights = false }):is_weighted())
    assert.is_false(graph.load(snap, { weights = false }):is_weighted())
    assert.are.same({ 1, 1 }, graph.from_edges({ 1, 2 }, { 2, 1 }):edge_weights():totable())
  end)

  it('names the file and line of a bad weight, and refuses misuse', function()
    local dir = tmpdir()
    assert.matches('n%.txt:2: .*negative', error_of(graph.load, write(dir .. '/n.txt', '0 1 1\n1 2 -1\n')))
    assert.matches('nan%.txt:1: .*NaN', error_of(graph.load, write(dir .. '/nan.txt', '0 1 nan\n')))
    assert.matches('inf%.txt:1: .*infinite', error_of(graph.load, write(dir .. '/inf.txt', '0 1 inf\n')))
    assert.matches("x%.txt:1: expected a weight %(a number >= 0%), got 'x'",
      error_of(graph.load, write(dir .. '/x.txt', '0 1 x\n')))
    assert.matches('m%.txt:2: the edge has no weight',
      error_of(graph.load, write(dir .. '/m.txt', '0 1 2\n1 2\n')))
    assert.matches('n%.mtx:3: .*negative', error_of(graph.load,
      write(dir .. '/n.mtx', '%%MatrixMarket matrix coordinate integer general\n2 2 1\n1 2 -4\n')))
    local plain = graph.from_edges({ 1 }, { 2 })
    assert.is_false(plain:is_weighted())
    assert.matches('weights = on, but the graph has no edge weights',
      error_of(function() return plain:pagerank { weighted = true } end))
    assert.matches("weighted must be 'auto', true or false, got",
      error_of(function() return plain:pagerank { weighted = 'yes' } end))
    assert.matches('weights must be true or false', error_of(graph.load, dir .. '/n.txt', { weights = 1 }))
  end)
end)
