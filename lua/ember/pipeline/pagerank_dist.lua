-- ember.pipeline.pagerank_dist: the PageRank job over several processes (`ember launch -n N
-- run pipelines/pagerank_kron.yaml`, or mpirun/srun/torchrun; the `distributed:` section,
-- present by default when a launcher started several processes).
--
-- Each rank generates its slice of the graph or parses its byte range of the input file,
-- and keeps a partition (ember.graph.PartGraph: its range of vertices, their in-arcs and
-- mirrors); PageRank exchanges only the mirrors' contributions each iteration. The scores
-- are the same bits as a single process ranking the graph in dense order (reorder: none).
-- graph.cache names a partitioned cache (a manifest plus one file per rank), reused by
-- later runs with the same rank count and refused with another. Rank 0 gathers the scores
-- and reports as the single-process job does, plus `ranks`: per rank, its vertices, arcs,
-- mirrors, the partition's memory and the peak RSS, bytes sent and received per
-- iteration, and the seconds of compute and of exchange. Other ranks print nothing.
-- Weights travel with the arcs (a Matrix Market real/integer file, a SNAP third column;
-- the cache keeps them): pagerank.weighted auto / true / false as in the single-process
-- job, and the weighted scores are the same bits as its weighted ones.
-- device: cuda (or auto on GPU nodes) gives each rank the GPU of its local rank; the sweeps
-- run there and the mirrors' values travel between GPUs through NCCL (unweighted graphs).
local ffi = require 'ffi'
local progress = require 'ember.util.progress'
local checkpoint = require 'ember.pipeline.checkpoint'

local M = {}

local function build(graph, gcfg, H)
  local gen, o = gcfg.generate, { group = true }
  local spec = gen or gcfg.input
  o.directed, o.drop_self_loops, o.drop_duplicates = spec.directed, spec.drop_self_loops, spec.drop_duplicates
  if gen then return H.generate(graph, gen, o) end
  if gcfg.input.labels then error('graph.input.labels: not supported by the distributed job', 0) end
  o.format, o.reverse = gcfg.input.format, gcfg.input.reverse
  local ok, g = pcall(graph.load, gcfg.input.path, o)
  if not ok then error(g, 0) end
  return g
end

-- The partition, how it was obtained and the seconds it took (the cache: a manifest, its
-- rank files and a sidecar <cache>.json with what it was built from).
local function obtain(ember, gcfg, key, log, rank, H)
  local graph, dist = ember.graph, ember.dist
  local t0 = progress.now()
  if gcfg.cache then
    local f = io.open(gcfg.cache .. '.json', 'r')
    local stored = f and f:read('*a')
    if f then f:close() end
    local fresh = stored and stored:gsub('%s+$', '') == key
    -- every rank must take the same path: rank 0's view decides
    local flag = dist.broadcast(ember.tensor({ fresh and 1 or 0 }, { dtype = 'int32' }), 0)
    if flag[1]:item() == 1 then
      local ok, g = pcall(graph.load, gcfg.cache, { group = true })
      if ok then return g, 'cache', progress.now() - t0 end
      if tostring(g):find('was built for', 1, true) then error(g, 0) end
      log('graph cache %s: %s: building the graph', gcfg.cache, tostring(g))
    else
      log('graph cache %s: %s: building the graph', gcfg.cache, stored and 'built from another source' or 'absent')
    end
    t0 = progress.now()
    local g = build(graph, gcfg, H)
    local dt = progress.now() - t0
    if rank == 0 then
      local dir = gcfg.cache:match('^(.*)/[^/]*$')
      if dir and dir ~= '' then checkpoint.mkdirs(dir) end
    end
    dist.barrier()
    g:save(gcfg.cache)
    if rank == 0 then checkpoint.write_atomic(gcfg.cache .. '.json', key .. '\n') end
    return g, 'generated or parsed', dt
  end
  local g = build(graph, gcfg, H)
  return g, gcfg.generate and 'generated' or 'parsed', progress.now() - t0
end

-- H: the single-process job's helpers (describe_source, generate, cache_key, top_table, write_scores, ...)
function M.run(cfg, ctx, H)
  local ember = require 'ember'
  local dist = ember.dist
  local rank, size = dist.rank(), dist.world_size()
  local log = rank == 0 and ctx.log or function() end
  local gcfg, pr, out = cfg.graph, cfg.pagerank, cfg.output
  if pr.personalization then error('pagerank.personalization: not supported by the distributed job', 0) end
  if pr.method == 'gauss-seidel' then error('pagerank.method: gauss-seidel does not partition: use jacobi', 0) end
  local source = H.describe_source(gcfg)
  -- not the rank count (another is refused); /2: the cache keeps a file's weights (those
  -- of before dropped them or refused the file)
  local key = H.cache_key(gcfg):gsub('^{', '{"partitioned":2,')
  local g, from, build_seconds = obtain(ember, gcfg, key, log, rank, H)
  if pr.weighted == true and not g:is_weighted() then
    error(string.format('pagerank.weighted is true, but %s has no edge weights (expected a Matrix Market real or ' ..
      'integer file, or a SNAP file with a third column)', source), 0)
  end
  local gi = g:info()
  local n, m = gi.num_vertices, gi.num_edges
  log('graph: %s: %d vertices, %d arcs over %d ranks (vertices in dense order), %s in %.2f s', source, n, m, size,
    from == 'cache' and ('loaded from ' .. gcfg.cache) or from, build_seconds)

  local threads = tonumber(ember.C.em_get_num_threads())
  local scores, info = g:pagerank { damping = pr.damping, tol = pr.tol, max_iter = pr.max_iter, method = pr.method,
    weighted = pr.weighted, blocking = pr.blocking, device = cfg.device }
  local ms = info.iterations > 0 and 1e3 * info.seconds / info.iterations or 0
  log('pagerank: %s, %d ranks x %s: %d iterations, %s (residual %.3g), %.3f s, %.2f ms/iteration, %.3f GE/s',
    pr.method, size, cfg.device == 'cpu' and (threads .. ' threads') or ('a GPU each, ' .. info.engine),
    info.iterations, info.converged and 'converged' or 'not converged', info.residual,
    info.seconds, ms, info.edges_per_second / 1e9)

  -- per-rank figures, gathered everywhere (one small all_gather)
  local mine = ember.tensor({ gi.first, gi.last, gi.local_edges, gi.mirrors, gi.bytes, progress.peak_rss_mb() or 0,
    info.bytes_sent, info.bytes_received, info.compute_seconds, info.exchange_seconds }, { dtype = 'float64' })
  local all = dist.all_gather(mine)
  local indeg_local = g:degrees()
  local full = g:gather(scores, 0)
  local indeg = g:gather(indeg_local, 0)
  local ids = g:gather(g:original_ids(), 0)
  if rank ~= 0 then return nil end

  local ranks = {}
  for r = 1, size do
    local a = all[r]
    ranks[r] = { rank = r - 1, vertices = a[2]:item() - a[1]:item() + 1, local_edges = a[3]:item(),
      mirrors = a[4]:item(), partition_mb = a[5]:item() / 2 ^ 20, peak_rss_mb = a[6]:item(),
      bytes_sent_per_iteration = a[7]:item(), bytes_received_per_iteration = a[8]:item(),
      compute_seconds = a[9]:item(), exchange_seconds = a[10]:item() }
  end
  local ip = ffi.cast('const int64_t *', indeg:data_ptr())
  local idp = ffi.cast('const int64_t *', ids:data_ptr())
  local top
  if out.top_k > 0 then
    local list = ember.graph.topk(full, out.top_k)
    local degs = {}
    top = {}
    for i, r in ipairs(list) do
      r.vertex = tonumber(idp[r.id - 1])
      degs[r.id] = tonumber(ip[r.id - 1])
      top[i] = { vertex = r.vertex, score = r.score, in_degree = degs[r.id] }
    end
    ctx.stderr:write(string.format('top %d of %d vertices by PageRank:\n', #list, n), H.top_table(list, degs))
    ctx.stderr:flush()
  end
  local comparison, study
  if out.compare_indegree then
    comparison = ember.graph.compare(full, indeg, out.compare_indegree)
    log("PageRank against in-degree, top %d: %d in both (%d in either), Kendall's tau %.4f", comparison.k,
      comparison.overlap, comparison.union_size, comparison.kendall_tau)
    study = H.ranking_study(ember, full, indeg, out, n, function(id) return tonumber(idp[id - 1]) end, log)
  end
  local rank_plot
  local plot_path = H.rank_plot_path(out)
  if plot_path then
    H.mkparent(plot_path)
    local ok, err = pcall(ember.plot.rank_rank, full, indeg, plot_path)
    if ok then rank_plot = plot_path else log('rank plot: not written: %s', tostring(err)) end
  end
  local ids_file
  if out.scores then
    local view = { num_vertices = function() return n end, original_ids = function() return ids end }
    ids_file = H.write_scores(ember, out.scores, view, full)
    log('scores: %s%s (%d vertices)', out.scores, ids_file and (', original ids in ' .. ids_file) or '', n)
  end
  local sent = 0
  for _, r in ipairs(ranks) do sent = sent + r.bytes_sent_per_iteration end
  log('exchange: %d bytes per iteration in all (the mirrors\' contributions, float32)', sent)
  return {
    job = 'pagerank', source = source, vertices = n, edges = m, weighted = info.weighted, iterations = info.iterations,
    converged = info.converged, residual = info.residual, residuals = info.residuals, seconds = info.seconds,
    setup_seconds = info.setup_seconds, ms_per_iteration = ms, edges_per_second = info.edges_per_second,
    build_seconds = build_seconds, graph_from = from, peak_rss_mb = progress.peak_rss_mb(), threads = threads,
    world_size = size, method = pr.method, damping = pr.damping, device = cfg.device, engine = info.engine,
    bytes_per_iteration = sent, ranks = ranks, top_k = top, compare_indegree = comparison, ranking_study = study,
    scores_file = out.scores,
    ids_file = ids_file, rank_plot = rank_plot,
  }
end

return M
