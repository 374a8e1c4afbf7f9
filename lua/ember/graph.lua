-- ember.graph: graphs and PageRank, over runtime/graph (ember/graph.h).
--
--   local graph = ember.graph
--   local g = graph.load('edges.txt', {format = 'snap', directed = true})
--   local g = graph.kronecker{scale = 22, edge_factor = 16, seed = 1}
--   local scores, info = g:pagerank{damping = 0.85, tol = 1e-6, max_iter = 100}
--   for i, v in ipairs(graph.topk(scores, 10, g)) do print(i, v.vertex, v.score, v.label) end
--   print(graph.compare_indegree(g, scores, 100).kendall_tau)
--   g:save('edges.emg')                      -- reloads in seconds: graph.load('edges.emg')
--
-- Vertices have dense ids 1..n (the order of the files' own ids; a file numbering its
-- vertices 0..n-1 keeps that order) and original ids (those of the file: SNAP's ids,
-- Matrix Market's indices, a generator's labels). Score, degree and edge tensors are
-- indexed by dense id; topk reports original ids. Edge tensors hold 1-based dense ids.
--
-- Options of load, kronecker, uniform and from_edges (unknown keys are errors):
--   format = 'auto' | 'snap' | 'mtx' | 'sg' | 'ember'   (load only; auto: by extension)
--   directed = true, reverse = false, drop_self_loops = false, drop_duplicates = false,
--   reorder = 'degree' | 'none', progress = nil (on a terminal) | true | false,
--   verify = true (ember files: check the checksums), labels = 'names.txt',
--   weights = true (false: ignore a file's weights; load only)
-- g:pagerank options: damping, tol, max_iter, method = 'jacobi' | 'gauss-seidel' | 'gapbs',
-- personalization = a tensor of n non-negative weights, device = 'cpu' | 'cuda' | 'cuda:N'
-- (the iterations run on that GPU; the scores come back as a CPU tensor; Gauss-Seidel runs
-- as Jacobi there), blocking = 'auto' | 'none' | 'tiles' | 'bins' (how the CPU reads the
-- contributions that outgrow L2: plain pull, cache-blocked tiles, or propagation blocking;
-- auto picks by the graph's size against the caches), weighted = 'auto' | true | false
-- (follow the arcs' weights: auto when the graph has them; true on an unweighted graph is
-- an error; weighted runs use the CPU's plain pull, engine 'cpu:weighted'). The second
-- result is a table: iterations, converged, residual, residuals (a list), seconds,
-- setup_seconds, edges_per_second, method (the one that ran), engine ('cpu', 'cpu:tiles',
-- 'cpu:bins', 'cpu:weighted', 'cuda:custom' or 'cuda:cusparse', see EMBER_PAGERANK_GPU
-- in runtime/plugins/cuda/pagerank.cu), device, weighted (whether weights were used).
-- Weighted graphs come from Matrix Market real/integer files and SNAP files with a third
-- column ('u v weight'): g:is_weighted(), g:edge_weights().
local ffi = require 'ffi'
local ember = require 'ember'

local C = ember.C
local graph = {}
local I = require 'ember.internal'
local box, new_tensor, throw, check, wrap = I.box, I.new, I.throw, I.check, I.wrap
local describe, check_options = I.describe_value, I.check_opts
local need_int, need_choice = I.need_int, I.need_choice

local function need_number(op, name, x)
  if type(x) ~= 'number' then throw(string.format('%s: %s must be a number, got %s', op, name, describe(x))) end
  return x
end

local function flag(op, name, x, default)
  if x == nil then return default end
  if type(x) ~= 'boolean' then throw(string.format('%s: %s must be true or false, got %s', op, name, describe(x))) end
  return x and 1 or 0
end

local FORMATS = { auto = C.EM_GRAPH_FORMAT_AUTO, snap = C.EM_GRAPH_FORMAT_SNAP, mtx = C.EM_GRAPH_FORMAT_MTX,
                  sg = C.EM_GRAPH_FORMAT_SG, ember = C.EM_GRAPH_FORMAT_EMBER }
local REORDERS = { degree = C.EM_GRAPH_REORDER_DEGREE, none = C.EM_GRAPH_REORDER_NONE }
local METHODS = { jacobi = C.EM_PAGERANK_JACOBI, ['gauss-seidel'] = C.EM_PAGERANK_GAUSS_SEIDEL,
                  gapbs = C.EM_PAGERANK_GAPBS }
local BLOCKINGS = { auto = C.EM_PAGERANK_BLOCKING_AUTO, none = C.EM_PAGERANK_BLOCKING_NONE,
                    tiles = C.EM_PAGERANK_BLOCKING_TILES, bins = C.EM_PAGERANK_BLOCKING_BINS }
local BUILD = { directed = true, reverse = true, drop_self_loops = true, drop_duplicates = true, reorder = true,
                progress = true }
-- load only: weights = false ignores a file's weights (Matrix Market values, a SNAP third column)

-- em_graph_options from a Lua table (keys checked by the caller).
local function graph_options(op, opts)
  local o = ffi.new('em_graph_options')
  C.em_graph_options_init(o)
  if opts.format ~= nil then o.format = need_choice(op, 'format', opts.format, FORMATS) end
  o.directed = flag(op, 'directed', opts.directed, 1)
  o.reverse = flag(op, 'reverse', opts.reverse, 0)
  o.drop_self_loops = flag(op, 'drop_self_loops', opts.drop_self_loops, 0)
  o.drop_duplicates = flag(op, 'drop_duplicates', opts.drop_duplicates, 0)
  if opts.reorder ~= nil then o.reorder = need_choice(op, 'reorder', opts.reorder, REORDERS) end
  o.progress = flag(op, 'progress', opts.progress, -1)
  o.verify = flag(op, 'verify', opts.verify, 1)
  o.weights = flag(op, 'weights', opts.weights, 1)
  return o
end

-- ---------------------------------------------------------------- the Graph class
local Graph = {}
Graph.__index = Graph
graph.Graph = Graph

local gbox = ffi.new('em_graph*[1]')
local group_of, new_part -- partitioned graphs, below

local function new_graph(status)
  local p = gbox[0]
  gbox[0] = nil
  check(status)
  return setmetatable({ _g = ffi.gc(p, C.em_graph_free) }, Graph)
end

local function handle(op, g)
  if getmetatable(g) ~= Graph then throw(string.format('%s: expected a graph, got %s', op, describe(g))) end
  if g._g == nil then throw(op .. ': the graph was freed with free()') end
  return g._g
end

function Graph:num_vertices() return tonumber(C.em_graph_num_vertices(handle('num_vertices', self))) end
function Graph:num_edges() return tonumber(C.em_graph_num_edges(handle('num_edges', self))) end
function Graph:is_directed() return C.em_graph_is_directed(handle('is_directed', self)) ~= 0 end
function Graph:is_weighted() return C.em_graph_is_weighted(handle('is_weighted', self)) ~= 0 end

function Graph:__tostring()
  if self._g == nil then return 'Graph(freed)' end
  return string.format('Graph(%d vertices, %d arcs, %s%s)', self:num_vertices(), self:num_edges(),
    self:is_directed() and 'directed' or 'undirected', self:is_weighted() and ', weighted' or '')
end

-- Releases the graph's memory now (later use is an error).
function Graph:free()
  local p = handle('free', self)
  self._g = nil
  C.em_graph_free(ffi.gc(p, nil))
end

local function need_vertex(op, g, v)
  need_int(op, 'vertex', v, 1)
  local n = tonumber(C.em_graph_num_vertices(g))
  if v > n then throw(string.format('%s: vertex %d is out of range (the graph has %d vertices)', op, v, n)) end
  return v - 1
end

-- The original id of dense vertex v (1-based).
function Graph:original_id(v)
  local g = handle('original_id', self)
  return tonumber(C.em_graph_original_id(g, need_vertex('original_id', g, v)))
end

-- The dense vertex (1-based) of an original id, or nil when the graph has no such vertex.
function Graph:find(original_id)
  local g = handle('find', self)
  need_int('find', 'original_id', original_id, -math.huge)
  local v = ffi.new('int64_t[1]')
  if C.em_graph_find_vertex(g, original_id, v) ~= 0 then return nil end
  return tonumber(v[0]) + 1
end

function Graph:label(v)
  local g = handle('label', self)
  local s = C.em_graph_label(g, need_vertex('label', g, v))
  return s ~= nil and ffi.string(s) or nil
end

function Graph:load_labels(path)
  local g = handle('load_labels', self)
  if type(path) ~= 'string' then throw('load_labels: expected a file path, got ' .. describe(path)) end
  check(C.em_graph_load_labels(g, path))
  return self
end

function Graph:save(path)
  local g = handle('save', self)
  if type(path) ~= 'string' then throw('save: expected a file path, got ' .. describe(path)) end
  check(C.em_graph_save(g, path))
  return self
end

-- in_degree, out_degree: int64 tensors by dense id.
function Graph:degrees()
  local g = handle('degrees', self)
  local a, b = ffi.new('em_tensor*[1]'), ffi.new('em_tensor*[1]')
  check(C.em_graph_degrees(g, a, b))
  return wrap(a[0]), wrap(b[0])
end

function Graph:original_ids()
  return new_tensor(C.em_graph_original_ids(handle('original_ids', self), box))
end

-- src, dst: int64 tensors of 1-based dense ids, sorted by (dst, src).
function Graph:edges()
  local g = handle('edges', self)
  local a, b = ffi.new('em_tensor*[1]'), ffi.new('em_tensor*[1]')
  check(C.em_graph_edges(g, a, b))
  return wrap(a[0]) + 1, wrap(b[0]) + 1
end

-- The arcs' weights, float32 in the order of edges() (all 1 for an unweighted graph).
function Graph:edge_weights()
  return new_tensor(C.em_graph_edge_weights(handle('edge_weights', self), box))
end

local PAGERANK = { damping = true, tol = true, max_iter = true, method = true, personalization = true, device = true,
                   blocking = true, weighted = true }
local WEIGHTS = { auto = C.EM_PAGERANK_WEIGHTS_AUTO, [true] = C.EM_PAGERANK_WEIGHTS_ON,
                  [false] = C.EM_PAGERANK_WEIGHTS_OFF }
local METHOD_NAMES = {}
for name, v in pairs(METHODS) do METHOD_NAMES[tonumber(v)] = name end

-- The iteration options both PageRank engines (one process, partitioned) take.
local function pagerank_options(opts, allowed)
  opts = check_options('pagerank', opts, allowed)
  local po = ffi.new('em_pagerank_options')
  C.em_pagerank_options_init(po)
  if opts.damping ~= nil then po.damping = need_number('pagerank', 'damping', opts.damping) end
  if opts.tol ~= nil then po.tol = need_number('pagerank', 'tol', opts.tol) end
  if opts.max_iter ~= nil then po.max_iter = need_int('pagerank', 'max_iter', opts.max_iter, 1) end
  if opts.method ~= nil then po.method = need_choice('pagerank', 'method', opts.method, METHODS) end
  if opts.blocking ~= nil then po.blocking = need_choice('pagerank', 'blocking', opts.blocking, BLOCKINGS) end
  if opts.weighted ~= nil then
    local w = WEIGHTS[opts.weighted]
    if w == nil then
      throw('pagerank: weighted must be \'auto\', true or false, got ' .. describe(opts.weighted))
    end
    po.weights = w
  end
  return opts, po
end

function Graph:pagerank(opts)
  local g = handle('pagerank', self)
  local po
  opts, po = pagerank_options(opts, PAGERANK)
  if opts.device ~= nil then po.device = I.parse_device(opts.device, 'pagerank') end
  local p = opts.personalization
  if p ~= nil then
    if type(p) == 'table' then p = ember.tensor(p, { dtype = 'float64' }) end
    if not ember.is_tensor(p) then
      throw('pagerank: personalization must be a tensor (or a list) of weights, got ' .. describe(p))
    end
    po.personalization = p
  end
  local res = ffi.new('em_tensor*[1]')
  local stats = ffi.new('em_pagerank_stats')
  local scores = new_tensor(C.em_graph_pagerank(box, res, stats, g, po))
  local residuals = wrap(res[0])
  local list = {}
  local r = ffi.cast('const double *', C.em_tensor_data(residuals))
  for i = 1, stats.iterations do list[i] = r[i - 1] end
  return scores, {
    iterations = stats.iterations, converged = stats.converged ~= 0, residual = stats.residual, residuals = list,
    seconds = stats.seconds, setup_seconds = stats.setup_seconds, edges_per_second = stats.edges_per_second,
    method = METHOD_NAMES[tonumber(stats.method)], engine = stats.engine ~= nil and ffi.string(stats.engine) or nil,
    device = I.device_name(po.device), weighted = stats.weighted ~= 0,
  }
end

-- ---------------------------------------------------------------- partitioned graphs
-- graph.load(path, {group = g}), graph.kronecker{..., group = g}, graph.uniform{..., group = g}
-- (g: a group from ember.dist, or true for the world) return a PartGraph: this rank's
-- range of dense vertices, their in-arcs and mirrors (ember/graph.h, em_graph_part_*).
-- Every method is collective: every rank of the group calls it.
local PartGraph = {}
PartGraph.__index = PartGraph
graph.PartGraph = PartGraph
local pbox = ffi.new('em_graph_part*[1]')

function group_of(op, grp)
  local dist = ember.dist
  if grp == true then
    local w = C.em_dist_world()
    if w == nil then throw(op .. ': group = true needs ember.dist.init() first') end
    return w
  end
  if getmetatable(grp) ~= dist.Group then
    throw(string.format('%s: group must be a group from ember.dist (or true: the world), got %s', op, describe(grp)))
  end
  if grp._world then return group_of(op, true) end
  return grp._ptr
end

function new_part(status)
  local p = pbox[0]
  pbox[0] = nil
  check(status)
  return setmetatable({ _p = ffi.gc(p, C.em_graph_part_free) }, PartGraph)
end

local function part_handle(op, g)
  if getmetatable(g) ~= PartGraph then
    throw(string.format('%s: expected a partitioned graph, got %s', op, describe(g)))
  end
  if g._p == nil then throw(op .. ': the graph was freed with free()') end
  return g._p
end

-- {num_vertices, num_edges, first, last (this rank's dense vertices, 1-based, inclusive;
-- last = first - 1 when none), local_edges, mirrors, values_sent, values_received, bytes,
-- rank, world_size}
function PartGraph:info()
  local i = ffi.new('em_graph_part_info')
  C.em_graph_part_get_info(part_handle('info', self), i)
  return { num_vertices = tonumber(i.num_vertices), num_edges = tonumber(i.num_edges), first = tonumber(i.begin) + 1,
    last = tonumber(i['end']), local_edges = tonumber(i.local_edges), mirrors = tonumber(i.mirrors),
    values_sent = tonumber(i.values_sent), values_received = tonumber(i.values_received), bytes = tonumber(i.bytes),
    rank = i.rank, world_size = i.world_size }
end
function PartGraph:num_vertices() return self:info().num_vertices end
function PartGraph:num_edges() return self:info().num_edges end
function PartGraph:__tostring()
  if self._p == nil then return 'PartGraph(freed)' end
  local i = self:info()
  local own = i.last >= i.first and string.format('vertices %d..%d', i.first, i.last) or 'no vertices'
  return string.format('PartGraph(%d vertices, %d arcs%s; rank %d of %d: %s, %d arcs, %d mirrors)',
    i.num_vertices, i.num_edges, self:is_weighted() and ', weighted' or '', i.rank, i.world_size, own, i.local_edges,
    i.mirrors)
end

function PartGraph:free()
  local p = part_handle('free', self)
  self._p = nil
  C.em_graph_part_free(ffi.gc(p, nil))
end

-- Writes the partitioned cache: path (the manifest) and path.RANK-of-N; reload it with
-- graph.load(path, {group = ...}) (path ending in .emp, or format = 'ember').
function PartGraph:save(path)
  if type(path) ~= 'string' then throw('save: expected a file path, got ' .. describe(path)) end
  check(C.em_graph_part_save(part_handle('save', self), path))
  return self
end

-- This rank's vertices: in_degree, out_degree (int64 tensors).
function PartGraph:degrees()
  local a, b = ffi.new('em_tensor*[1]'), ffi.new('em_tensor*[1]')
  check(C.em_graph_part_degrees(part_handle('degrees', self), a, b))
  return wrap(a[0]), wrap(b[0])
end

function PartGraph:original_ids()
  return new_tensor(C.em_graph_part_original_ids(part_handle('original_ids', self), box))
end

-- A tensor of this rank's vertices gathered into all n on rank `root` (0-based; nil: on
-- every rank); nil on the other ranks.
function PartGraph:gather(t, root)
  local p = part_handle('gather', self)
  if not ember.is_tensor(t) then throw('gather: expected a tensor, got ' .. describe(t)) end
  if root ~= nil then need_int('gather', 'root', root, 0) end
  local out = ffi.new('em_tensor*[1]')
  check(C.em_graph_part_gather(out, p, t:contiguous(), root or -1))
  return out[0] ~= nil and wrap(out[0]) or nil
end

local PART_PAGERANK = { damping = true, tol = true, max_iter = true, method = true, weighted = true, blocking = true,
                        device = true }

-- Whether the arcs carry weights (a weighted file loaded with weights, or its cache).
function PartGraph:is_weighted() return C.em_graph_part_is_weighted(part_handle('is_weighted', self)) ~= 0 end

-- scores of this rank's vertices (float32 [last - first + 1]) and a table as
-- Graph:pagerank's (weighted = 'auto' | true | false as there; the weighted scores are the
-- same bits as the single process's with reorder = 'none'; blocking = 'auto' | 'none' |
-- 'tiles': 'none' gives the single process's plain bits with reorder = 'none', 'tiles' the
-- same bits at every rank count, auto tiles large graphs where it pays; engine
-- 'cpu:partitioned:tiles' when tiled), plus compute_seconds,
-- exchange_seconds, bytes_sent, bytes_received (per iteration, this rank).
-- device = 'cuda' | 'cuda:N': this rank sweeps on that GPU and the ranks exchange through
-- NCCL (engine 'cuda:partitioned'; unweighted; the same bits at every rank count).
function PartGraph:pagerank(opts)
  local p = part_handle('pagerank', self)
  local _, po = pagerank_options(opts, PART_PAGERANK)
  if opts and opts.device ~= nil then po.device = I.parse_device(opts.device, 'pagerank') end
  local res = ffi.new('em_tensor*[1]')
  local stats, ds = ffi.new('em_pagerank_stats'), ffi.new('em_pagerank_dist_stats')
  local scores = new_tensor(C.em_graph_part_pagerank(box, res, stats, ds, p, po))
  local residuals = wrap(res[0])
  local list = {}
  local r = ffi.cast('const double *', C.em_tensor_data(residuals))
  for i = 1, stats.iterations do list[i] = r[i - 1] end
  return scores, {
    iterations = stats.iterations, converged = stats.converged ~= 0, residual = stats.residual, residuals = list,
    seconds = stats.seconds, setup_seconds = stats.setup_seconds, edges_per_second = stats.edges_per_second,
    method = METHOD_NAMES[tonumber(stats.method)], engine = ffi.string(stats.engine),
    device = I.device_name(po.device),
    weighted = stats.weighted ~= 0, compute_seconds = ds.compute_seconds, exchange_seconds = ds.exchange_seconds,
    bytes_sent = tonumber(ds.bytes_sent), bytes_received = tonumber(ds.bytes_received),
  }
end

-- ---------------------------------------------------------------- building

local LOAD = { format = true, verify = true, labels = true, group = true, weights = true }
for k in pairs(BUILD) do LOAD[k] = true end

function graph.load(path, opts)
  if type(path) ~= 'string' then throw('graph.load: expected a file path, got ' .. describe(path)) end
  opts = check_options('graph.load', opts, LOAD)
  if opts.group ~= nil then
    if opts.labels ~= nil then throw('graph.load: labels are not supported with group (a partitioned graph)') end
    return new_part(C.em_graph_part_load(pbox, group_of('graph.load', opts.group), path,
      graph_options('graph.load', opts)))
  end
  local g = new_graph(C.em_graph_load(gbox, path, graph_options('graph.load', opts)))
  if opts.labels ~= nil then g:load_labels(opts.labels) end
  return g
end

local KRONECKER = { scale = true, edge_factor = true, seed = true, group = true }
for k in pairs(BUILD) do KRONECKER[k] = true end

function graph.kronecker(opts)
  opts = check_options('graph.kronecker', opts, KRONECKER)
  local scale = need_int('graph.kronecker', 'scale', opts.scale, 1)
  local ef = need_int('graph.kronecker', 'edge_factor', opts.edge_factor or 16, 1)
  local seed = need_int('graph.kronecker', 'seed', opts.seed or 1, 0)
  if opts.group ~= nil then
    return new_part(C.em_graph_part_kronecker(pbox, group_of('graph.kronecker', opts.group), scale, ef, seed,
      graph_options('graph.kronecker', opts)))
  end
  return new_graph(C.em_graph_kronecker(gbox, scale, ef, seed, graph_options('graph.kronecker', opts)))
end

local UNIFORM = { vertices = true, edges = true, seed = true, group = true }
for k in pairs(BUILD) do UNIFORM[k] = true end

function graph.uniform(opts)
  opts = check_options('graph.uniform', opts, UNIFORM)
  local n = need_int('graph.uniform', 'vertices', opts.vertices, 1)
  local m = need_int('graph.uniform', 'edges', opts.edges, 0)
  local seed = need_int('graph.uniform', 'seed', opts.seed or 1, 0)
  if opts.group ~= nil then
    return new_part(C.em_graph_part_uniform(pbox, group_of('graph.uniform', opts.group), n, m, seed,
      graph_options('graph.uniform', opts)))
  end
  return new_graph(C.em_graph_uniform(gbox, n, m, seed, graph_options('graph.uniform', opts)))
end

-- 0-based ids as a C array (and the tensor holding them, to keep alive) from a list or an
-- integer tensor of 1-based ids.
local function ids_of(op, name, x)
  if type(x) == 'table' then
    local a = ffi.new('int64_t[?]', math.max(#x, 1))
    for i = 1, #x do a[i - 1] = need_int(op, name .. '[' .. i .. ']', x[i], -math.huge) - 1 end
    return a, #x, a
  end
  if not ember.is_tensor(x) then
    throw(string.format('%s: %s must be a list or a tensor of ids, got %s', op, name, describe(x)))
  end
  local t = x:to('int64'):contiguous() - 1
  return ffi.cast('const int64_t *', C.em_tensor_data(t)), tonumber(C.em_tensor_numel(t)), t
end

local FROM = { vertices = true }
for k in pairs(BUILD) do FROM[k] = true end

-- graph.from_edges(src, dst [, {vertices = n, ...}]): arcs src[i] -> dst[i] of 1-based
-- dense ids (lists or integer tensors); n defaults to the largest id.
function graph.from_edges(src, dst, opts)
  local op = 'graph.from_edges'
  opts = check_options(op, opts, FROM)
  local sp, ns, keep_s = ids_of(op, 'src', src)
  local dp, nd, keep_d = ids_of(op, 'dst', dst)
  if ns ~= nd then throw(string.format('%s: %d sources but %d destinations', op, ns, nd)) end
  local n = opts.vertices
  if n ~= nil then need_int(op, 'vertices', n, 0) end
  local largest = 0
  for i = 0, ns - 1 do
    local u, v = sp[i], dp[i]
    if u < 0 or v < 0 or (n and (u >= n or v >= n)) then
      throw(string.format('%s: edge %d is %d -> %d, expected ids in 1..%s', op, i + 1, tonumber(u) + 1,
        tonumber(v) + 1, n and tostring(n) or 'n'))
    end
    largest = math.max(largest, tonumber(u) + 1, tonumber(v) + 1)
  end
  local g = new_graph(C.em_graph_from_edges(gbox, n or largest, ns, sp, dp, graph_options(op, opts)))
  assert(keep_s and keep_d) -- the id arrays live until the call has returned
  return g
end

-- ---------------------------------------------------------------- analysis

-- The k best scores: a list of {vertex = original id, score =, label = name or nil,
-- id = dense id (1-based)}. g may be nil (original ids are then the dense ids, 1-based).
function graph.topk(scores, k, g)
  if not ember.is_tensor(scores) then throw('graph.topk: expected a tensor of scores, got ' .. describe(scores)) end
  need_int('graph.topk', 'k', k, 0)
  local gp = g ~= nil and handle('graph.topk', g) or nil
  local out = ffi.new('em_graph_ranked[?]', math.max(k, 1))
  local count = ffi.new('int64_t[1]')
  check(C.em_graph_topk(out, count, scores, k, gp))
  local list = {}
  for i = 0, tonumber(count[0]) - 1 do
    local r = out[i]
    list[i + 1] = { vertex = gp and tonumber(r.original_id) or tonumber(r.vertex) + 1, score = r.score,
                    label = r.label ~= nil and ffi.string(r.label) or nil, id = tonumber(r.vertex) + 1 }
  end
  return list
end

local function comparison(c)
  return { k = tonumber(c.k), overlap = tonumber(c.overlap), union_size = tonumber(c.union_size),
           kendall_tau = c.kendall_tau }
end

-- How two rankings agree over their top k: {k, overlap, union_size, kendall_tau}.
function graph.compare(a, b, k)
  if not ember.is_tensor(a) or not ember.is_tensor(b) then
    throw(string.format('graph.compare: expected two tensors of scores, got %s and %s', describe(a), describe(b)))
  end
  need_int('graph.compare', 'k', k, 1)
  local c = ffi.new('em_rank_comparison')
  check(C.em_graph_compare_rankings(c, a, b, k))
  return comparison(c)
end

-- Kendall's tau-b of two rankings over all their vertices (O(n log n); NaN when undefined).
function graph.kendall_tau(a, b)
  if not ember.is_tensor(a) or not ember.is_tensor(b) then
    throw(string.format('graph.kendall_tau: expected two tensors of scores, got %s and %s', describe(a), describe(b)))
  end
  local tau = ffi.new('double[1]')
  check(C.em_graph_kendall_tau(tau, a, b))
  return tau[0]
end

-- graph.compare(scores, in-degree, k): the question the Twitter study asked.
function graph.compare_indegree(g, scores, k)
  local gp = handle('graph.compare_indegree', g)
  if not ember.is_tensor(scores) then
    throw('graph.compare_indegree: expected a tensor of scores, got ' .. describe(scores))
  end
  need_int('graph.compare_indegree', 'k', k, 1)
  local c = ffi.new('em_rank_comparison')
  check(C.em_graph_compare_indegree(c, gp, scores, k))
  return comparison(c)
end

return graph
