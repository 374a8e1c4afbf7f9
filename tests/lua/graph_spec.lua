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
