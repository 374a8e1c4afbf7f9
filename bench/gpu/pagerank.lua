-- bench/gpu/pagerank.lua: PageRank on a GPU over a Graph500 Kronecker graph of over a
-- billion arcs (scale 26, edge factor 16: 67M vertices, 1.07B arcs), in GE/s: arcs times
-- iterations over the seconds of the iterations (the copy of the graph to the device is
-- setup, reported apart). Fixed iterations (tol 0), each engine of the GPU PageRank in
-- turn (EMBER_PAGERANK_GPU=custom, cusparse; see runtime/plugins/cuda/pagerank.cu), `repeat`
-- runs each, the best kept; the L1 distance between the engines' scores checks that both
-- computed the same thing. The graph is built once, on the CPU (all cores). Engine
-- `partitioned` ranks the same graph partitioned over a group of this one process (the
-- GPU sweep of `ember launch -n N ... device=cuda`, runtime/plugins/cuda/pagerank_part.cu;
-- no NCCL with one rank), built after the others' graph is dropped; l1_custom_vs_partitioned
-- checks it against the custom engine (the CPU's in a dry run).
--
--   build-gpu/ember bench/gpu/pagerank.lua [--scale 26] [--edge-factor 16] [--iters 20]
--   build-gpu/ember bench/gpu/pagerank.lua --engines custom,partitioned --scale 24
--   build/ember bench/gpu/pagerank.lua --device cpu --small
local script_dir = debug.getinfo(1, 'S').source:match('^@(.*/)') or './'
local B = dofile(script_dir .. 'common.lua')

B.run('pagerank', function()
  local o = B.options('pagerank.lua', arg, { device = 'cuda', scale = 26, edge_factor = 16, iters = 20, ['repeat'] = 2,
    engines = 'custom,cusparse', seed = 1, small = false })
  if o.small then o.scale, o.iters = math.min(o.scale, 12), math.min(o.iters, 5) end
  B.check_device(o.device)
  local t0 = B.now()
  local g = ember.graph.kronecker { scale = o.scale, edge_factor = o.edge_factor, seed = o.seed, progress = false }
  local build_seconds = B.now() - t0
  local engines = B.split(o.engines)
  if o.device == 'cpu' then -- a dry run: the CPU engine, and the partitioned one when asked
    engines = { 'cpu', engines[#engines] == 'partitioned' and 'partitioned' or nil }
  end
  local runs, scores = {}, {}
  local vertices, arcs, partitioned = g:num_vertices(), g:num_edges(), false
  for _, engine in ipairs(engines) do
    local part = engine == 'partitioned'
    if part ~= partitioned then
      if not part then error('pagerank.lua: --engines: partitioned comes last', 0) end
      partitioned = true
      g = nil
      collectgarbage()
      if not ember.dist.is_initialized() then ember.dist.init() end
      t0 = B.now()
      g = ember.graph.kronecker { scale = o.scale, edge_factor = o.edge_factor, seed = o.seed, group = true }
      build_seconds = build_seconds + (B.now() - t0)
    elseif engine ~= 'cpu' and not part then
      B.setenv('EMBER_PAGERANK_GPU', engine)
    end
    local best
    for _ = 1, o['repeat'] do
      local x, info = g:pagerank { device = o.device, tol = 0, max_iter = o.iters }
      if part then x = g:gather(x) end
      if not best or info.edges_per_second > best.edges_per_second then best = info end
      if scores[engine] then B.drop(scores[engine]) end
      scores[engine] = x
    end
    runs[engine] = { ge_per_s = best.edges_per_second / 1e9, ms_per_iteration = 1e3 * best.seconds / best.iterations,
      seconds = best.seconds, setup_seconds = best.setup_seconds, iterations = best.iterations,
      engine = best.engine, score_sum = scores[engine]:to('float64'):sum():item() }
  end
  local function l1_of(a, b)
    if a and b then return (a:to('float64') - b:to('float64')):abs():sum():item() end
  end
  local best_engine
  for engine, r in pairs(runs) do
    if not best_engine or r.ge_per_s > runs[best_engine].ge_per_s then best_engine = engine end
  end
  return { device = o.device, gpu = B.device_name(o.device), scale = o.scale, edge_factor = o.edge_factor,
    vertices = vertices, arcs = arcs, iterations = o.iters, build_seconds = build_seconds,
    engines = runs, default_engine = o.device == 'cpu' and 'cpu' or 'custom', best_engine = best_engine,
    ge_per_s = runs[best_engine].ge_per_s,
    l1_custom_vs_cusparse = l1_of(scores.custom, scores.cusparse),
    l1_custom_vs_partitioned = l1_of(scores.custom or scores.cpu, scores.partitioned), small = o.small or nil }
end)
