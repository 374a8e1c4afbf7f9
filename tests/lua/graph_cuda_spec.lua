-- graph_cuda_spec.lua: PageRank with device = 'cuda' (runtime/plugins/cuda/pagerank.cu through
-- runtime/graph/pagerank_cuda.c). Without a GPU: a clear error. With one (or when
-- EMBER_TEST_DEVICE=cuda asks for one): the GPU's scores against the CPU's, on a hand-made
-- graph with dangling vertices and personalisation and on Kronecker graphs, for both GPU
-- engines (EMBER_PAGERANK_GPU=custom|cusparse). And a partitioned graph's PageRank with
-- device = 'cuda' (runtime/graph/pagerank_dist_cuda.c, runtime/plugins/cuda/pagerank_part.cu)
-- on a group of this one process: its refusals, and with a GPU the scores against the
-- CPU's partitioned and single-process ones (tests/distributed/pagerank_dist.lua runs it
-- over 2-4 ranks, NCCL between them, where there is a GPU per rank).
local ffi = require 'ffi'
local graph = ember.graph or require 'ember.graph'

pcall(ffi.cdef, [[
int setenv(const char *name, const char *value, int overwrite);
int unsetenv(const char *name);
]])

local gpus = ember.device_count('cuda')
-- EMBER_TEST_DEVICE=cuda or cuda:N (tests/lua/helper.lua's test_device) insists on a GPU
local requested = rawget(_G, 'test_device') or os.getenv('EMBER_TEST_DEVICE') or 'cpu'
local wanted = requested:match('^cuda') ~= nil
local DEVICE = wanted and requested or 'cuda'
local DEVICE_NAME = DEVICE == 'cuda' and 'cuda:0' or DEVICE

local function error_of(fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok, 'expected an error')
  return tostring(err)
end

-- Runs fn with EMBER_PAGERANK_GPU set to engine (nil: unset), restoring it afterwards.
local function with_engine(engine, fn)
  local before = os.getenv('EMBER_PAGERANK_GPU')
  if engine then ffi.C.setenv('EMBER_PAGERANK_GPU', engine, 1) else ffi.C.unsetenv('EMBER_PAGERANK_GPU') end
  local ok, a, b = pcall(fn)
  if before then ffi.C.setenv('EMBER_PAGERANK_GPU', before, 1) else ffi.C.unsetenv('EMBER_PAGERANK_GPU') end
  if not ok then error(a, 0) end
  return a, b
end

local function l1(a, b)
  return (a:to('float64') - b:to('float64')):abs():sum():item()
end

-- GPU against CPU for the same options: scores within `tol` in L1, the same iteration
-- count (give or take one: the last residual may round across tol), residuals alike.
local function agree(g, opts, tol, engine)
  local cpu, ci = g:pagerank(opts)
  local o = { device = DEVICE }
  for k, v in pairs(opts) do o[k] = v end
  local gpu, gi = with_engine(engine, function() return g:pagerank(o) end)
  assert.are.equal('float32', gpu.dtype)
  assert.are.equal('cpu', gpu.device)
  assert.are.same(cpu.shape, gpu.shape)
  assert.are.equal('cuda:' .. (engine or 'custom'), gi.engine)
  assert.are.equal(DEVICE_NAME, gi.device)
  local d = l1(cpu, gpu)
  assert.is_true(d <= tol, string.format('L1(cpu, gpu) = %g > %g (%s)', d, tol, engine or 'custom'))
  assert.is_true(math.abs(ci.iterations - gi.iterations) <= 1,
    string.format('%d iterations on the CPU, %d on the GPU', ci.iterations, gi.iterations))
  assert.are.equal(gi.iterations, #gi.residuals)
  for i = 1, math.min(#ci.residuals, #gi.residuals) do
    assert.is_true(math.abs(ci.residuals[i] - gi.residuals[i]) <= 1e-5 + 1e-3 * ci.residuals[i])
  end
  return gpu, gi, cpu, ci
end

describe('graph pagerank on cuda', function()
  it('is a clear error on a device it cannot use', function()
    local g = graph.from_edges({ 1, 2 }, { 2, 1 })
    if gpus == 0 then
      assert.matches('graph pagerank: device cuda:0 is not available: .', error_of(g.pagerank, g, { device = 'cuda' }))
      assert.matches('graph pagerank: device cuda:2 is not available', error_of(g.pagerank, g, { device = 'cuda:2' }))
    else
      assert.matches(string.format('graph pagerank: device cuda:%d does not exist %%(%d CUDA devices%%)', gpus, gpus),
        error_of(g.pagerank, g, { device = 'cuda:' .. gpus }))
    end
    assert.matches("pagerank: device: unknown device 'gpu'", error_of(g.pagerank, g, { device = 'gpu' }))
    assert.matches('pagerank: device must be a string', error_of(g.pagerank, g, { device = 0 }))
    -- the CPU path reports what ran
    local _, info = g:pagerank { method = 'gauss-seidel' }
    assert.are.equal('cpu', info.engine)
    assert.are.equal('cpu', info.device)
    assert.are.equal('gauss-seidel', info.method)
  end)

  if gpus == 0 and not wanted then
    pending('no CUDA device here: the GPU-against-CPU comparisons need one (EMBER_TEST_DEVICE=cuda insists)')
    return
  end

  it('has a GPU when EMBER_TEST_DEVICE=cuda asks for one', function()
    assert.is_true(gpus > 0, 'EMBER_TEST_DEVICE=cuda, but no CUDA device is available: ' ..
      ffi.string(ember.C.em_cuda_unavailable_reason()))
  end)

  it('matches the CPU on a hand-made graph with dangling vertices and personalisation', function()
    -- 1 -> 2, 1 -> 3, 2 -> 3, 4 -> 1, 4 -> 3; 3 and 5 dangling, 5 isolated; n = 5 (one
    -- partial warp of vertices)
    local g = graph.from_edges({ 1, 1, 2, 4, 4 }, { 2, 3, 3, 1, 3 }, { vertices = 5 })
    for _, engine in ipairs { 'custom', 'cusparse' } do
      local x = agree(g, { tol = 1e-9, max_iter = 300 }, 1e-6, engine)
      assert.is_true(math.abs(x:sum():item() - 1) < 1e-6)
      agree(g, { personalization = { 1, 0, 2, 0, 1 }, tol = 1e-9, max_iter = 300 }, 1e-6, engine)
      local gap = agree(g, { method = 'gapbs', tol = 1e-9, max_iter = 300 }, 1e-6, engine)
      assert.is_true(gap:sum():item() < 0.99) -- the dangling mass leaks
    end
    -- by hand: 1 -> 2, 2 dangling: x1 = 1/(2+d)
    local x = graph.from_edges({ 1 }, { 2 }):pagerank { device = DEVICE, tol = 1e-9, max_iter = 500 }
    assert.is_true(math.abs(x:totable()[1] - 1 / 2.85) < 1e-7)
    -- Gauss-Seidel runs as Jacobi on a GPU, and says so
    local gs, info = g:pagerank { device = DEVICE, method = 'gauss-seidel', tol = 1e-9, max_iter = 300 }
    assert.are.equal('jacobi', info.method)
    assert.is_true(l1(gs, g:pagerank { tol = 1e-9, max_iter = 300 }) < 1e-6)
  end)

  it('matches the CPU on Kronecker graphs, with heavy vertices cut into chunks', function()
    -- scale 14: in-degrees up to several thousand arcs, past one chunk (2048)
    local g = graph.kronecker { scale = 14, edge_factor = 16, seed = 5 }
    local n = g:num_vertices()
    local x, info = agree(g, { tol = 0, max_iter = 30 }, 1e-6)
    assert.are.equal(30, info.iterations)
    assert.is_false(info.converged)
    assert.is_true(info.edges_per_second > 0 and info.seconds > 0)
    -- the same bits on every run
    local again = g:pagerank { device = DEVICE, tol = 0, max_iter = 30 }
    assert.are.equal(0, (x - again):abs():max():item())
    -- to convergence, with a personalisation over a third of the vertices
    local w = ember.zeros(n, { dtype = 'float64' })
    for i = 1, n, 3 do w[i] = i % 7 end
    local _, ci = agree(g, { tol = 1e-7, max_iter = 200, personalization = w }, 1e-6)
    assert.is_true(ci.converged)
    -- cuSPARSE sums in float32: agreement to float rounding
    agree(g, { tol = 0, max_iter = 30 }, 2e-5, 'cusparse')
    -- no reordering, and an odd vertex count
    local h = graph.kronecker { scale = 11, edge_factor = 9, seed = 2, reorder = 'none' }
    agree(h, { tol = 1e-8, max_iter = 100 }, 1e-6)
    local u = graph.uniform { vertices = 1001, edges = 40000, seed = 3 }
    agree(u, { tol = 1e-8, max_iter = 100 }, 1e-6)
  end)

  it('names a bad EMBER_PAGERANK_GPU', function()
    local g = graph.from_edges({ 1 }, { 2 })
    assert.matches("EMBER_PAGERANK_GPU is 'fast', expected 'custom' or 'cusparse'",
      error_of(with_engine, 'fast', function() return g:pagerank { device = DEVICE } end))
  end)
end)

describe('partitioned graph pagerank on cuda', function()
  setup(function() ember.dist.init { timeout = 60 } end)

  local function kron(scale, ef, seed, extra)
    local o = { scale = scale, edge_factor = ef, seed = seed, group = true }
    for k, v in pairs(extra or {}) do o[k] = v end
    return graph.kronecker(o)
  end

  it('refuses what the GPU sweep does not do, and devices it cannot use', function()
    local g = kron(8, 4, 7)
    if gpus == 0 then
      assert.matches('graph part pagerank: device cuda:0 is not available: .', error_of(g.pagerank, g,
        { device = 'cuda' }))
    else
      assert.matches(string.format('graph part pagerank: device cuda:%d does not exist', gpus),
        error_of(g.pagerank, g, { device = 'cuda:' .. gpus }))
    end
    assert.matches("graph part pagerank: blocking 'tiles' is a CPU layout; the GPU %(cuda:0%) takes auto or none",
      error_of(g.pagerank, g, { device = 'cuda', blocking = 'tiles' }))
    assert.matches("pagerank: device: unknown device 'gpu'", error_of(g.pagerank, g, { device = 'gpu' }))
    local _, info = g:pagerank { tol = 0, max_iter = 3 }
    assert.are.equal('cpu', info.device)
    assert.are.equal('cpu:partitioned', info.engine)
  end)

  it('refuses weighted arcs on the GPU', function()
    local path = os.tmpname()
    local f = assert(io.open(path, 'w'))
    f:write('1 2 0.5\n2 3 2\n3 1 1\n')
    f:close()
    local g = graph.load(path, { format = 'snap', group = true })
    os.remove(path)
    assert.is_true(g:is_weighted())
    assert.matches('graph part pagerank: weighted arcs rank on the CPU only %(device cuda:0 asked',
      error_of(g.pagerank, g, { device = 'cuda' }))
  end)

  if gpus == 0 and not wanted then
    pending('no CUDA device here: the partitioned GPU sweep needs one (EMBER_TEST_DEVICE=cuda insists)')
    return
  end

  -- the GPU against the CPU's partitioned sweep (plain: the single process's bits) and
  -- the single process itself; the same bits from run to run
  local function agree_part(make, make_single, opts)
    local g = make()
    local cpu, ci = g:pagerank(opts)
    local o = { device = DEVICE }
    for k, v in pairs(opts) do o[k] = v end
    local gpu, gi = g:pagerank(o)
    assert.are.equal('cuda:partitioned', gi.engine)
    assert.are.equal(DEVICE_NAME, gi.device)
    assert.are.same(cpu.shape, gpu.shape)
    local d = l1(cpu, gpu)
    assert.is_true(d <= 1e-6, string.format('L1(cpu, gpu) = %g', d))
    assert.is_true(math.abs(ci.iterations - gi.iterations) <= 1)
    assert.are.equal(gi.iterations, #gi.residuals)
    assert.is_true(gi.compute_seconds >= 0 and gi.exchange_seconds >= 0)
    local again = g:pagerank(o)
    assert.are.equal(0, (gpu - again):abs():max():item())
    local single = make_single():pagerank(opts)
    assert.is_true(l1(single, g:gather(gpu)) <= 1e-6)
    return gpu, gi
  end

  it('matches the CPU on Kronecker graphs (heavy vertices in chunks, dangling and isolated vertices)', function()
    agree_part(function() return kron(14, 16, 5) end,
      function() return graph.kronecker { scale = 14, edge_factor = 16, seed = 5, reorder = 'none' } end,
      { tol = 0, max_iter = 30 })
    local _, info = agree_part(function() return kron(11, 9, 2) end,
      function() return graph.kronecker { scale = 11, edge_factor = 9, seed = 2, reorder = 'none' } end,
      { tol = 1e-8, max_iter = 200 })
    assert.is_true(info.converged)
    agree_part(function() return kron(10, 4, 3) end,
      function() return graph.kronecker { scale = 10, edge_factor = 4, seed = 3, reorder = 'none' } end,
      { method = 'gapbs', tol = 1e-9, max_iter = 100 })
  end)
end)
