-- ember.pipeline.pagerank: the `job: pagerank` pipeline kind. Generates a graph or loads an
-- edge-list file (optionally through a cache in ember's binary format), ranks it with
-- PageRank, and reports the top vertices, how the ranking compares with in-degree, and the
-- full scores. See pipelines/pagerank_kron.yaml and pipelines/pagerank_file.yaml for
-- commented files and M.schema below for every key and its default.
--
-- Output: stdout carries exactly one line, the final JSON result (as for every job, so that
-- `ember run ... | tail -1` or `> result.json` gives clean JSON); the top-k table, the
-- in-degree comparison and the progress lines go to stderr, which is the screen unless
-- redirected. The top k and the comparison are also in the JSON (top_k, compare_indegree).
--
-- graph.cache: the graph is saved there in ember's format once built, with a small
-- sidecar (<cache>.json) recording what it was built from (the generator's parameters, or
-- the input file, its size and the build options). A later run reuses the cache when the
-- sidecar matches and the input file (and labels file) are older than the cache; otherwise
-- it rebuilds and rewrites both. A cache that no longer loads (another format version, a
-- damaged file) is rebuilt too, with a line saying why.
--
-- Scores file: by extension. `.npy`: float32 [n], position i holding dense vertex i+1 (the
-- order of the original ids); unless the original ids are exactly 0..n-1 (generated graphs,
-- files numbering their vertices from 0), the original ids are written beside it as int64
-- [n] in <stem>.ids.npy. Anything else: TSV, a header line `vertex<TAB>score`, then one
-- line per vertex in the same order, the original id and the score (%.9g: float32 exactly).
--
-- Weights: a Matrix Market real/integer file or a SNAP file with a third column gives a
-- weighted graph (the cache keeps the weights). pagerank.weighted: auto follows them when
-- the graph has them, true requires them (an unweighted graph is an error), false counts
-- every arc once; the JSON line's `weighted` says whether they were used.
local ffi = require 'ffi'
local libc = require 'ember.util.libc'
local S = require 'ember.util.schema'
local json = require 'ember.util.json'
local progress = require 'ember.util.progress'
local checkpoint = require 'ember.pipeline.checkpoint'

local M = { doc = 'generate or load a graph, rank it with PageRank, report the top vertices and scores' }

local function flags(o)
  o.directed = S.boolean { default = true, doc = 'false: each edge is undirected (two arcs)' }
  o.drop_self_loops = S.boolean { default = false }
  o.drop_duplicates = S.boolean { default = false, doc = 'keep one copy of repeated arcs' }
  return o
end

local AUTO = S.enum({ 'auto' })
AUTO.expect = 'auto, true or false' -- what a string other than auto is told

M.schema = {
  -- device: the common key (cpu, cuda, cuda:N or auto): where the iterations run; the
  -- graph is built on the CPU and copied to the GPU for the ranking
  graph = S.record({
    generate = S.record(flags {
      kind = S.enum({ 'kronecker', 'uniform' }, { default = 'kronecker' }),
      scale = S.integer { min = 1, max = 31, doc = '2^scale vertices' },
      edge_factor = S.integer { min = 1, max = 2 ^ 31 - 1, default = 16, doc = 'edge_factor * 2^scale edges' },
      seed = S.integer { min = 0, max = 2 ^ 53, default = 1, doc = 'the same seed gives the same graph' },
    }, { optional = true }),
    input = S.record(flags {
      path = S.path { exists = 'file', doc = 'the graph file' },
      format = S.enum({ 'auto', 'snap', 'mtx', 'sg', 'ember' }, { default = 'auto',
        doc = 'auto: by extension (.mtx, .sg, .emg), anything else is a SNAP edge list' }),
      reverse = S.boolean { default = false, doc = "true: 'u v' is the arc v -> u (twitter_rv.net)" },
      labels = S.path { exists = 'file', optional = true, doc = "vertex names: 'id name' per line" },
    }, { optional = true }),
    cache = S.path { optional = true, doc = "the graph in ember's format, reused while up to date" },
    reorder = S.enum({ 'degree', 'none' }, { default = 'degree', doc = "the CSR's internal vertex order" }),
  }, { check = function(g)
    if g.generate and g.input then
      return 'expected one of generate: or input:, got both (an override can clear one: graph.input=null)'
    end
    if not g.generate and not g.input then return 'expected one of generate: or input:, got neither' end
    if g.input and g.cache and g.cache == g.input.path then return 'cache is the input file itself' end
  end }),
  pagerank = S.record({
    damping = S.number { min = 0, lt = 1, default = 0.85 },
    tol = S.number { min = 0, default = 1e-6, doc = 'stop when the L1 change of the scores is below; 0: never' },
    max_iter = S.integer { min = 1, max = 2 ^ 31 - 1, default = 100 },
    method = S.enum({ 'jacobi', 'gauss-seidel', 'gapbs' }, { default = 'jacobi' }),
    blocking = S.enum({ 'auto', 'none', 'tiles', 'bins' }, { default = 'auto',
      doc = 'CPU reads of contributions beyond L2: plain pull, cache-blocked tiles, propagation blocking ' ..
        '(not over ranks)' }),
    weighted = S.union({ AUTO, S.boolean() }, { default = 'auto', expect = 'auto, true or false',
      doc = "follow the arcs' weights (Matrix Market values, a SNAP third column): auto when the graph has " ..
        'them, true requires them, false counts every arc once' }),
    personalization = S.path { exists = 'file', optional = true,
      doc = "teleport weights: 'id weight' lines (original ids), or a .npy of n weights by dense id" },
  }, { default = {} }),
  output = S.record({
    top_k = S.integer { min = 0, default = 10, doc = 'rows of the top-k table (stderr and JSON); 0: none' },
    scores = S.path { optional = true, doc = 'every score: .npy, or TSV for any other extension' },
    compare_indegree = S.integer { min = 1, optional = true,
      doc = 'overlap and Kendall tau of the PageRank and in-degree top k; also turns on the ranking study' },
    compare_at = S.list(S.integer { min = 1 }, { default = { 10, 100, 1000 },
      doc = 'the ranking study: overlap and Kendall tau of the two top-k lists at each of these k' }),
    rank_plot = S.path { optional = true,
      doc = 'a PNG of each vertex\'s PageRank rank against its in-degree rank (log-log, ember.plot.rank_rank); ' ..
        'default with compare_indegree and scores: <scores without extension>.rank_rank.png' },
  }, { default = {} }),
}

M.result_order = { 'job', 'vertices', 'edges', 'weighted', 'iterations', 'converged', 'residual', 'seconds',
  'ms_per_iteration', 'edges_per_second', 'build_seconds', 'graph_from', 'peak_rss_mb', 'threads', 'world_size',
  'bytes_per_iteration',
  'ranks', 'compare_indegree', 'ranking_study', 'top_k',
  'scores_file', 'rank_plot', 'residuals' }

-- ---------------------------------------------------------------- file times
local file_info = libc.file_info
M.file_info = file_info

-- The absolute path of an existing file (a cache built in another folder names its input so).
local function absolute(path) return libc.realpath(path) or path end

local function older(a, b) return a.sec < b.sec or (a.sec == b.sec and a.nsec < b.nsec) end

local function parent_dir(path) return path:match('^(.*)/[^/]*$') end

local function mkparent(path)
  local dir = parent_dir(path)
  if dir and dir ~= '' then checkpoint.mkdirs(dir) end
end

-- ---------------------------------------------------------------- building the graph
local function build_options(spec, reorder)
  return { directed = spec.directed, drop_self_loops = spec.drop_self_loops, drop_duplicates = spec.drop_duplicates,
    reorder = reorder }
end

local function describe_source(gcfg)
  local gen = gcfg.generate
  if gen then
    return string.format('%s scale %d, edge factor %d, seed %d', gen.kind, gen.scale, gen.edge_factor, gen.seed)
  end
  return gcfg.input.path
end

-- What a cache must have been built from to be reused (compared as JSON text).
local function cache_key(gcfg)
  -- /2: caches keep a file's weights (those of /1 dropped them)
  local key = { format = 'ember-graph-cache/2', reorder = gcfg.reorder }
  if gcfg.generate then
    key.generate = gcfg.generate
  else
    local inp = gcfg.input
    key.input = { path = absolute(inp.path), format = inp.format, directed = inp.directed, reverse = inp.reverse,
      drop_self_loops = inp.drop_self_loops, drop_duplicates = inp.drop_duplicates,
      labels = inp.labels and absolute(inp.labels), size = (file_info(inp.path) or {}).size }
  end
  return json.encode(key)
end

-- The graph graph.generate asks for, built with the options o (the single-process job's, or
-- the distributed job's with its group).
local function generate(graph, gen, o)
  o.seed = gen.seed
  if gen.kind == 'kronecker' then
    o.scale, o.edge_factor = gen.scale, gen.edge_factor
    return graph.kronecker(o)
  end
  o.vertices, o.edges = 2 ^ gen.scale, gen.edge_factor * 2 ^ gen.scale
  return graph.uniform(o)
end

local function build(graph, gcfg)
  local gen = gcfg.generate
  if gen then return generate(graph, gen, build_options(gen, gcfg.reorder)) end
  local inp = gcfg.input
  local o = build_options(inp, gcfg.reorder)
  o.format, o.reverse, o.labels = inp.format, inp.reverse, inp.labels
  return graph.load(inp.path, o)
end

-- Why the cache cannot be reused, or nil when it can.
local function cache_stale(gcfg, key)
  local info = file_info(gcfg.cache)
  if not info then return 'absent' end
  local f = io.open(gcfg.cache .. '.json', 'r')
  local stored = f and f:read('*a')
  if f then f:close() end
  if not stored then return 'no ' .. gcfg.cache .. '.json beside it' end
  if stored:gsub('%s+$', '') ~= key then return 'built from another source or with other options' end
  if gcfg.input then
    for _, p in ipairs { gcfg.input.path, gcfg.input.labels } do
      local src = file_info(p)
      if src and not older(src, info) then return p .. ' is newer' end
    end
  end
  return nil
end

-- The graph, how it was obtained ('generated', 'parsed', 'cache') and the seconds it took.
local function obtain_graph(ember, gcfg, log)
  local graph = ember.graph
  local t0 = progress.now()
  if gcfg.cache then
    local key = cache_key(gcfg)
    local why = cache_stale(gcfg, key)
    if not why then
      local ok, g = pcall(graph.load, gcfg.cache, { format = 'ember' })
      if ok then return g, 'cache', progress.now() - t0 end
      why = tostring(g)
    end
    log('graph cache %s: %s: building the graph', gcfg.cache, why)
    t0 = progress.now()
    local g = build(graph, gcfg)
    local dt = progress.now() - t0
    local ts = progress.now()
    mkparent(gcfg.cache)
    g:save(gcfg.cache)
    checkpoint.write_atomic(gcfg.cache .. '.json', key .. '\n')
    log('graph cache %s: written in %.2f s', gcfg.cache, progress.now() - ts)
    return g, gcfg.generate and 'generated' or 'parsed', dt
  end
  local g = build(graph, gcfg)
  return g, gcfg.generate and 'generated' or 'parsed', progress.now() - t0
end

-- ---------------------------------------------------------------- personalisation
-- A float64 [n] tensor of teleport weights by dense id, from 'id weight' lines (original
-- ids; vertices not listed weigh 0) or from a .npy file of n weights.
local function read_personalization(ember, path, g)
  local n = g:num_vertices()
  if path:match('%.npy$') then
    local t = ember.data.npy.read(path)
    if #t.shape ~= 1 or t.shape[1] ~= n then
      error(string.format('%s: expected %d weights (one per vertex, by dense id), got a tensor of shape [%s]', path,
        n, table.concat(t.shape, ', ')), 0)
    end
    return t:to('float64'):contiguous()
  end
  local w = ember.zeros(n, { dtype = 'float64' })
  local p = ffi.cast('double *', w:data_ptr())
  local seen, count, lineno = {}, 0, 0
  for line in io.lines(path) do
    lineno = lineno + 1
    if not line:match('^%s*$') and not line:match('^%s*[#%%]') then
      local id, weight = line:match('^%s*(%S+)%s+(%S+)%s*$')
      id, weight = tonumber(id), tonumber(weight)
      if not id or id ~= math.floor(id) or not weight then
        error(string.format("%s:%d: expected 'vertex weight' (an integer id and a number), got '%s'", path, lineno,
          line), 0)
      end
      if weight < 0 or weight ~= weight or weight == math.huge then
        error(string.format('%s:%d: the weight of vertex %d is %s, expected a finite number >= 0', path, lineno, id,
          tostring(weight)), 0)
      end
      local v = g:find(id)
      if not v then error(string.format('%s:%d: vertex %d is not in the graph', path, lineno, id), 0) end
      if seen[v] then
        error(string.format('%s:%d: vertex %d is listed twice (first on line %d)', path, lineno, id, seen[v]), 0)
      end
      seen[v] = lineno
      p[v - 1] = weight
      count = count + 1
    end
  end
  if count == 0 then error(string.format("%s: no 'vertex weight' lines (only comments or blank lines)", path), 0) end
  return w
end

-- ---------------------------------------------------------------- scores files
local function write_tsv(path, g, scores)
  local n = g:num_vertices()
  local ids = g:original_ids()
  local idp = ffi.cast('const int64_t *', ids:data_ptr())
  local sp = ffi.cast('const float *', scores:data_ptr())
  local tmp = path .. '.tmp'
  local f, err = io.open(tmp, 'wb')
  if not f then error(string.format("cannot write the scores to '%s': %s", path, err), 0) end
  f:write('vertex\tscore\n')
  -- ids past 2^53 do not survive tonumber: print those through int64's own text
  local exact = n == 0 or (idp[0] > -2 ^ 53 and idp[n - 1] < 2 ^ 53)
  local buf, fmt = {}, string.format
  local CHUNK = 8192
  for start = 0, n - 1, CHUNK do
    local stop = math.min(start + CHUNK, n) - 1
    for i = start, stop do
      local id = exact and fmt('%d', tonumber(idp[i])) or tostring(idp[i]):gsub('LL$', '')
      buf[i - start + 1] = fmt('%s\t%.9g\n', id, sp[i])
    end
    for i = stop - start + 2, #buf do buf[i] = nil end
    f:write(table.concat(buf))
  end
  local ok, werr = f:close()
  if not ok then error(string.format("cannot write the scores to '%s': %s", path, werr), 0) end
  assert(os.rename(tmp, path))
  return nil
end

-- Writes .npy (and the ids beside it when needed) or TSV; returns the ids file or nil.
local function write_scores(ember, path, g, scores)
  mkparent(path)
  if not path:match('%.npy$') then return write_tsv(path, g, scores) end
  ember.data.npy.write(path, scores)
  local ids = g:original_ids()
  local n = g:num_vertices()
  local idp = ffi.cast('const int64_t *', ids:data_ptr())
  -- original ids are increasing in dense order: 0..n-1 exactly when the ends are 0 and n-1
  if n > 0 and (idp[0] ~= 0 or idp[n - 1] ~= n - 1) then
    local ids_path = path:gsub('%.npy$', '') .. '.ids.npy'
    ember.data.npy.write(ids_path, ids)
    return ids_path
  end
  return nil
end

-- ---------------------------------------------------------------- reporting
local function top_table(list, indeg)
  local w = #'vertex'
  for _, r in ipairs(list) do w = math.max(w, #string.format('%d', r.vertex)) end
  local labelled = false
  for _, r in ipairs(list) do labelled = labelled or r.label ~= nil end
  local lines = { string.format('%5s  %' .. w .. 's  %14s  %10s%s', 'rank', 'vertex', 'score', 'in-degree',
    labelled and '  label' or '') }
  for i, r in ipairs(list) do
    lines[#lines + 1] = string.format('%5d  %' .. w .. 'd  %14.8g  %10d  %s', i, r.vertex, r.score, indeg[r.id],
      r.label or ''):gsub('%s+$', '')
  end
  return table.concat(lines, '\n') .. '\n'
end

-- The ranking study (is PageRank a better ranking than follower count?): Kendall's tau-b of
-- the two rankings over every vertex, the overlap and tau of their top-k lists at each k of
-- output.compare_at (capped at n), and the top k by in-degree beside the PageRank top k.
-- vertex_of(id) gives the original id of 1-based dense id id.
function M.ranking_study(ember, scores, indeg, out, n, vertex_of, log)
  local graph = ember.graph
  local study = { kendall_tau = graph.kendall_tau(scores, indeg), at = {} }
  log("ranking study: Kendall's tau-b of PageRank against in-degree over all %d vertices: %.4f", n,
    study.kendall_tau)
  local seen = {}
  for _, k in ipairs(out.compare_at) do
    k = math.min(k, n)
    if not seen[k] then
      seen[k] = true
      local c = graph.compare(scores, indeg, k)
      study.at[#study.at + 1] = c
      log("ranking study: top %d: %d in both (%d in either), Kendall's tau %.4f", k, c.overlap, c.union_size,
        c.kendall_tau)
    end
  end
  if out.top_k > 0 then
    local sp = ffi.cast('const float *', scores:data_ptr())
    study.top_indegree = {}
    for i, r in ipairs(graph.topk(indeg, out.top_k)) do
      study.top_indegree[i] = { vertex = vertex_of(r.id), in_degree = r.score, score = sp[r.id - 1] }
    end
  end
  return study
end

-- Where the rank plot goes: output.rank_plot, or beside the scores in a study.
function M.rank_plot_path(out)
  if out.rank_plot then return out.rank_plot end
  if out.compare_indegree and out.scores then return (out.scores:gsub('%.[^./]*$', '')) .. '.rank_rank.png' end
  return nil
end

-- ---------------------------------------------------------------- the job
function M.run(cfg, ctx)
  if cfg.distributed then
    return require('ember.pipeline.pagerank_dist').run(cfg, ctx, { describe_source = describe_source,
      generate = generate, cache_key = cache_key, top_table = top_table, write_scores = write_scores,
      mkparent = mkparent, ranking_study = M.ranking_study, rank_plot_path = M.rank_plot_path })
  end
  local ember = require 'ember'
  local log = ctx.log
  local gcfg = cfg.graph
  local source = describe_source(gcfg)

  local g, from, build_seconds = obtain_graph(ember, gcfg, log)
  local n, m = g:num_vertices(), g:num_edges()
  log('graph: %s: %d vertices, %d arcs, %s in %.2f s', source, n, m,
    from == 'cache' and ('loaded from ' .. gcfg.cache) or from, build_seconds)

  local pr = cfg.pagerank
  if pr.weighted == true and not g:is_weighted() then
    error(string.format('pagerank.weighted is true, but %s has no edge weights (expected a Matrix Market real or ' ..
      'integer file, or a SNAP file with a third column)', source), 0)
  end
  local personalization = pr.personalization and read_personalization(ember, pr.personalization, g) or nil
  local threads = tonumber(ember.C.em_get_num_threads())
  local scores, info = g:pagerank { damping = pr.damping, tol = pr.tol, max_iter = pr.max_iter, method = pr.method,
    personalization = personalization, device = cfg.device, blocking = pr.blocking, weighted = pr.weighted }
  scores = scores:contiguous()
  local ms = info.iterations > 0 and 1e3 * info.seconds / info.iterations or 0
  local where = cfg.device == 'cpu' and string.format('%d threads', threads) or
    string.format('%s (%s%s)', cfg.device, info.engine, info.method ~= pr.method and (', as ' .. info.method) or '')
  log('pagerank: %s%s, %s: %d iterations, %s (residual %.3g), %.3f s, %.2f ms/iteration, %.3f GE/s', pr.method,
    info.weighted and ', weighted' or '', where, info.iterations, info.converged and 'converged' or 'not converged',
    info.residual, info.seconds, ms,
    info.edges_per_second / 1e9)

  local out = cfg.output
  local top
  if out.top_k > 0 then
    local indeg_t = g:degrees()
    local ip = ffi.cast('const int64_t *', indeg_t:data_ptr())
    local list = ember.graph.topk(scores, out.top_k, g)
    local indeg = {}
    top = {}
    for i, r in ipairs(list) do
      indeg[r.id] = tonumber(ip[r.id - 1])
      top[i] = { vertex = r.vertex, score = r.score, in_degree = indeg[r.id], label = r.label }
    end
    ctx.stderr:write(string.format('top %d of %d vertices by PageRank:\n', #list, n), top_table(list, indeg))
    ctx.stderr:flush()
  end

  local comparison, study
  if out.compare_indegree then
    comparison = ember.graph.compare_indegree(g, scores, out.compare_indegree)
    log("PageRank against in-degree, top %d: %d in both (%d in either), Kendall's tau %.4f", comparison.k,
      comparison.overlap, comparison.union_size, comparison.kendall_tau)
    local ids = g:original_ids()
    local idp = ffi.cast('const int64_t *', ids:data_ptr())
    study = M.ranking_study(ember, scores, (g:degrees()), out, n, function(id) return tonumber(idp[id - 1]) end, log)
  end

  local rank_plot
  local plot_path = M.rank_plot_path(out)
  if plot_path then
    local t0 = progress.now()
    mkparent(plot_path)
    local ok, err = pcall(ember.plot.rank_rank, scores, (g:degrees()), plot_path)
    if ok then
      rank_plot = plot_path
      log('rank plot: %s in %.2f s', plot_path, progress.now() - t0)
    else
      log('rank plot: not written: %s', tostring(err))   -- a picture never fails the job
    end
  end

  local ids_file
  if out.scores then
    local t0 = progress.now()
    ids_file = write_scores(ember, out.scores, g, scores)
    log('scores: %s%s (%d vertices) in %.2f s', out.scores, ids_file and (', original ids in ' .. ids_file) or '', n,
      progress.now() - t0)
  end

  return {
    job = 'pagerank', source = source, vertices = n, edges = m, directed = g:is_directed(),
    weighted = info.weighted,
    iterations = info.iterations, converged = info.converged, residual = info.residual, residuals = info.residuals,
    seconds = info.seconds, setup_seconds = info.setup_seconds, ms_per_iteration = ms,
    edges_per_second = info.edges_per_second, build_seconds = build_seconds, graph_from = from,
    peak_rss_mb = progress.peak_rss_mb(), threads = threads, method = pr.method, damping = pr.damping,
    device = cfg.device, engine = info.engine, method_run = info.method,
    top_k = top, compare_indegree = comparison, ranking_study = study, scores_file = out.scores, ids_file = ids_file,
    rank_plot = rank_plot,
  }
end

return M
