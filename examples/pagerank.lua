-- examples/pagerank.lua: PageRank from Lua on a follower graph, and the question the Twitter
-- study asked: does PageRank tell you more than counting followers (in-degree)?
-- (README "Graphs and PageRank"; pipelines/pagerank_file.yaml is the same job in YAML.)
--
--   build/ember examples/pagerank.lua                               # examples/data/follows.txt
--   build/ember examples/pagerank.lua --graph edges.txt --top 20    # a SNAP edge list of yours
--   build/ember examples/pagerank.lua --kronecker 16                # a generated graph, 2^16 vertices
--
-- Options: --graph PATH (snap, mtx, sg or .emg, by extension), --kronecker SCALE, --top K,
-- --damping D, --tol T.
local ember = require 'ember'
local graph = ember.graph

local defaults = { graph = arg[0]:gsub('[^/]*$', '') .. 'data/follows.txt', kronecker = 0, top = 10,
  damping = 0.85, tol = 1e-6 }
local opt = setmetatable({}, { __index = defaults })
for i = 1, #arg, 2 do
  local key = arg[i]:match('^%-%-([%w-]+)$')
  if key == nil or defaults[key] == nil or arg[i + 1] == nil then
    error('unknown option or missing value: ' .. arg[i] .. ' (options: see ' .. arg[0] .. ')', 0)
  end
  opt[key] = type(defaults[key]) == 'number' and assert(tonumber(arg[i + 1]), arg[i] .. ' needs a number') or
    arg[i + 1]
end

-- ---------------------------------------------------------------- the graph
local g, name
if opt.kronecker > 0 then
  g = graph.kronecker { scale = opt.kronecker, edge_factor = 16, seed = 1 }
  name = string.format('Kronecker scale %d', opt.kronecker)
else
  g = graph.load(opt.graph, { directed = true })   -- format by extension; SNAP for .txt
  name = opt.graph
end
local n = g:num_vertices()
print(string.format('%s: %d vertices, %d arcs', name, n, g:num_edges()))

-- ---------------------------------------------------------------- PageRank
local scores, info = g:pagerank { damping = opt.damping, tol = opt.tol, max_iter = 100 }
print(string.format('PageRank: %d iterations, residual %.2e, converged %s, %.2f ms', info.iterations, info.residual,
  tostring(info.converged), info.seconds * 1e3))

-- The scores are a float32 tensor over dense ids 1..n and sum to 1 (the mass of accounts that
-- follow no one is spread over everyone, as networkx and igraph do).
print(string.format('sum of scores: %.6f', scores:double():sum():item()))

-- One more iteration by hand, with tensors over the arc list, lands where PageRank stopped:
-- x(v) = d * sum over arcs u->v of x(u) / outdeg(u) + ((1 - d) + d * dangling) / n.
local src, dst = g:edges()                     -- 1-based dense ids
local in_degree, out_degree = g:degrees()
local x = scores:double()
local share = x / out_degree:double():clamp(1, math.huge)   -- x(u) / outdeg(u)
local dangling = x:masked_select(out_degree:eq(0)):sum():item()
local pulled = ember.zeros(n, { dtype = 'float64' }):index_add_(1, dst, share:index_select(1, src))
local again = pulled * opt.damping + ((1 - opt.damping) + opt.damping * dangling) / n
print(string.format('one more iteration by hand moves the scores by %.2e (L1)', (again - x):abs():sum():item()))

-- ---------------------------------------------------------------- the top accounts
-- Each vertex's rank by in-degree, to set beside its PageRank.
local by_degree = {}
local _, order = in_degree:double():sort(1, true)   -- descending
for position, id in ipairs(order:totable()) do by_degree[id] = position end
local degrees = in_degree:totable()

print(string.format('\n%4s  %12s  %10s  %9s  %14s', 'rank', 'vertex', 'score', 'in-degree', 'in-degree rank'))
for i, v in ipairs(graph.topk(scores, opt.top, g)) do
  print(string.format('%4d  %12d  %10.6f  %9d  %14d', i, v.vertex, v.score, degrees[v.id], by_degree[v.id]))
end

-- ---------------------------------------------------------------- PageRank against in-degree
-- overlap: accounts in both top-k lists; Kendall's tau: how alike the two orders are over
-- the union of those lists (1: the same order, 0: unrelated).
print()
for _, k in ipairs { opt.top, math.min(100, n) } do
  local c = graph.compare_indegree(g, scores, k)
  print(string.format('top %d by PageRank and by in-degree: %d in common, Kendall tau %.3f', k, c.overlap,
    c.kendall_tau))
end
