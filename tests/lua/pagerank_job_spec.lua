-- pagerank_job_spec.lua: the `job: pagerank` pipeline kind (lua/ember/pipeline/pagerank.lua)
-- through `ember run`: both shipped pipelines on small inputs, the JSON line's fields, the
-- top-k table and scores files (TSV, .npy) on a hand-checked graph, the graph cache,
-- personalisation, and validation errors that name the file, line (or override) and key.
local pipeline = require 'ember.pipeline'
local json = require 'ember.util.json'
local ffi = require 'ffi'

local EMBER = (os.getenv('EMBER_BUILD_DIR') or 'build') .. '/ember'
local KRON = 'pipelines/pagerank_kron.yaml'
local FILE = 'pipelines/pagerank_file.yaml'
local D = 0.85

local tmpdir = test_tmpdir

local write = test_write

local read = test_read

local function has(msg, text)
  assert(msg:find(text, 1, true), string.format('expected the text to contain %q, got %q', text, msg))
end

-- `ember run ARGS`: status, stdout, stderr.
local function ember_run(dir, args)
  local out, err = dir .. '/stdout', dir .. '/stderr'
  local cmd = string.format("EMBER_NUM_THREADS=2 '%s' run %s >'%s' 2>'%s'", EMBER, table.concat(args, ' '), out, err)
  local status = os.execute(cmd)
  return math.floor(status / 256), read(out), read(err)
end

-- Runs a job that must succeed; returns the decoded JSON line (the only line on stdout) and stderr.
local function run_ok(dir, args)
  local status, out, err = ember_run(dir, args)
  assert.are.equal(0, status, err)
  local lines = {}
  for line in out:gmatch('[^\n]+') do lines[#lines + 1] = line end
  assert.are.equal(1, #lines, 'stdout: ' .. out)
  assert.are.equal('\n', out:sub(-1))
  return json.decode(lines[1]), err
end

local function load_error(path, overrides)
  local ok, err = pcall(pipeline.load, path, overrides)
  assert.is_false(ok, 'expected a validation error')
  assert.is_true(pipeline.schema.is_error(err), 'expected a validation error, got ' .. tostring(err))
  return err.message
end

-- 100 -> 400, 200 -> 400, 300 -> 400, 400 -> 100, with sparse ids and comments. By hand:
-- x200 = x300 = (1-d)/4; x100 = (1-d)/4 + d x400; x400 = (1-d)/4 + d (x100 + x200 + x300),
-- so x400 = (1-d)/4 (1 + 2d + d) / (1 - d^2) and x100 = (1-d)/4 + d x400.
local HAND = [[
# Directed graph: a hand-checked star
# FromNodeId	ToNodeId
100	400
200	400

# a blank line and a comment in the middle
300	400
400	100
]]
local X200 = (1 - D) / 4
local X400 = (1 - D) / 4 * (1 + 3 * D) / (1 - D * D)
local X100 = (1 - D) / 4 + D * X400

local function hand_graph(dir)
  write(dir .. '/names.txt', '# id name\n100 alice\n400 dora\n')
  return write(dir .. '/star.txt', HAND)
end

describe('ember run pipelines/pagerank_kron.yaml', function()
  it('generates, ranks and reports in one JSON line', function()
    local dir = tmpdir()
    local r, err = run_ok(dir, { KRON, 'graph.generate.scale=10' })
    assert.are.equal('pagerank', r.job)
    assert.are.equal(1024, r.vertices)
    assert.are.equal(16 * 1024, r.edges)
    assert.are.equal('generated', r.graph_from)
    assert.is_true(r.converged)
    assert.is_true(r.iterations > 3 and r.iterations < 100, 'iterations ' .. r.iterations)
    assert.are.equal(r.iterations, #r.residuals)
    assert.are.equal(r.residual, r.residuals[#r.residuals])
    assert.is_true(r.residual < 1e-6 and r.residuals[#r.residuals - 1] >= 1e-6)
    assert.is_true(r.residuals[1] > r.residuals[#r.residuals])
    for _, k in ipairs { 'seconds', 'build_seconds', 'edges_per_second', 'ms_per_iteration', 'peak_rss_mb' } do
      assert.are.equal('number', type(r[k]), k)
      assert.is_true(r[k] > 0, k)
    end
    assert.is_true(math.abs(r.edges_per_second * r.seconds / (r.edges * r.iterations) - 1) < 1e-6)
    assert.is_true(math.abs(r.ms_per_iteration * r.iterations / 1e3 / r.seconds - 1) < 1e-9)
    assert.is_true(r.peak_rss_mb > 5 and r.peak_rss_mb < 2048)
    assert.are.equal(2, r.threads)
    -- the same graph and scores through the Lua API: the job adds nothing of its own
    local g = ember.graph.kronecker { scale = 10, edge_factor = 16, seed = 1 }
    local x = g:pagerank { tol = 1e-6 }
    local top = ember.graph.topk(x, 10, g)
    assert.are.equal(10, #r.top_k)
    local indeg = g:degrees():totable()
    for i, t in ipairs(top) do
      assert.are.equal(t.vertex, r.top_k[i].vertex)
      assert.are.equal(t.score, r.top_k[i].score)
      assert.are.equal(indeg[t.id], r.top_k[i].in_degree)
    end
    local c = ember.graph.compare_indegree(g, x, 100)
    assert.are.same({ k = 100, overlap = c.overlap, union_size = c.union_size, kendall_tau = c.kendall_tau },
      r.compare_indegree)
    assert.is_true(c.overlap > 50 and c.overlap <= 100)
    -- the table and the comparison on stderr
    has(err, 'graph: kronecker scale 10, edge factor 16, seed 1: 1024 vertices, 16384 arcs, generated in ')
    has(err, 'top 10 of 1024 vertices by PageRank:\n rank  vertex           score   in-degree\n')
    has(err, string.format('    1  %6d  %14.8g  %10d\n', top[1].vertex, top[1].score, indeg[top[1].id]))
    has(err, string.format("PageRank against in-degree, top 100: %d in both (%d in either), Kendall's tau %.4f",
      c.overlap, c.union_size, c.kendall_tau))
  end)

  it('runs a fixed number of iterations, uniform graphs, no table', function()
    local dir = tmpdir()
    local r, err = run_ok(dir, { KRON, 'graph.generate.scale=8', 'graph.generate.kind=uniform', 'pagerank.tol=0',
      'pagerank.max_iter=20', 'output.top_k=0', 'output.compare_indegree=null', 'threads=1' })
    assert.are.equal(256, r.vertices)
    assert.are.equal(16 * 256, r.edges)
    assert.are.equal(20, r.iterations)
    assert.is_false(r.converged)
    assert.are.equal(1, r.threads)
    assert.is_nil(r.top_k)
    assert.is_nil(r.compare_indegree)
    assert.is_nil(err:find('by PageRank', 1, true))
    has(err, 'graph: uniform scale 8')
  end)

  it('draws the rank-rank plot (PageRank rank against in-degree rank) when asked', function()
    local dir = tmpdir()
    local png = dir .. '/plots/ranks.png'   -- the folder is made
    local r, err = run_ok(dir, { KRON, 'graph.generate.scale=9', 'output.rank_plot=' .. png })
    assert.are.equal(png, r.rank_plot)
    has(err, 'rank plot: ' .. png)
    assert.are.equal('\137PNG', read(png):sub(1, 4))
  end)

  it('runs the ranking study: tau over every vertex, top-k overlaps at several k, the plot beside the scores',
    function()
    local dir = tmpdir()
    local scores = dir .. '/out/scores.npy'
    local r, err = run_ok(dir, { KRON, 'graph.generate.scale=10', 'output.compare_indegree=100',
      'output.compare_at=[10,100,5000]', 'output.scores=' .. scores, 'output.top_k=5' })
    local g = ember.graph.kronecker { scale = 10, edge_factor = 16, seed = 1 }
    local x = g:pagerank { tol = 1e-6 }
    local indeg = g:degrees()
    local s = r.ranking_study
    assert.are.equal(ember.graph.kendall_tau(x, indeg), s.kendall_tau)
    assert.is_true(s.kendall_tau > 0 and s.kendall_tau < 1)
    -- k above n is capped at n, where both lists hold every vertex
    assert.are.equal(3, #s.at)
    for i, k in ipairs { 10, 100, 1024 } do
      local c = ember.graph.compare(x, indeg, k)
      assert.are.same(c, s.at[i])
      has(err, string.format("ranking study: top %d: %d in both (%d in either), Kendall's tau %.4f", k, c.overlap,
        c.union_size, c.kendall_tau))
    end
    assert.are.same({ k = 1024, overlap = 1024, union_size = 1024, kendall_tau = s.kendall_tau }, s.at[3])
    -- the top 5 by in-degree, with their PageRank scores
    local by_degree = ember.graph.topk(indeg, 5)
    assert.are.equal(5, #s.top_indegree)
    for i, t in ipairs(by_degree) do
      assert.are.equal(t.id - 1, s.top_indegree[i].vertex)   -- generated: original id = dense id - 1
      assert.are.equal(t.score, s.top_indegree[i].in_degree)
      assert.are.equal(x[t.id]:item(), s.top_indegree[i].score)
    end
    -- the rank-rank plot beside the scores, by default
    assert.are.equal(dir .. '/out/scores.rank_rank.png', r.rank_plot)
    assert.are.equal('\137PNG', read(r.rank_plot):sub(1, 4))
  end)
end)

describe('ember run pipelines/pagerank_file.yaml', function()
  it('ranks the shipped example edge list', function()
    local dir = tmpdir()
    local r = run_ok(dir, { FILE })
    assert.are.equal('examples/data/follows.txt', r.source)
    assert.are.equal(120, r.vertices)
    assert.are.equal(460, r.edges)
    assert.are.equal('parsed', r.graph_from)
    assert.is_true(r.converged)
    assert.are.equal(10, #r.top_k)
    assert.are.equal(10, r.compare_indegree.k)
  end)

  it('ranks a hand-checked graph given by an override: top k, labels, TSV scores', function()
    local dir = tmpdir()
    local star = hand_graph(dir)
    local r, err = run_ok(dir, { FILE, 'graph.input.path=' .. star, 'graph.input.labels=' .. dir .. '/names.txt',
      'pagerank.tol=1e-7', 'pagerank.max_iter=200', 'output.top_k=3', 'output.compare_indegree=2',
      'output.scores=' .. dir .. '/out/scores.tsv' })
    assert.are.equal(star, r.source)
    assert.are.equal(4, r.vertices)
    assert.are.equal(4, r.edges)
    local want = { { 400, X400, 3, 'dora' }, { 100, X100, 1, 'alice' }, { 200, X200, 0 } }  -- 200 before 300: tie
    assert.are.equal(3, #r.top_k)
    for i, w in ipairs(want) do
      local t = r.top_k[i]
      assert.are.equal(w[1], t.vertex)
      assert.is_true(math.abs(t.score - w[2]) < 1e-6, string.format('%d: %.9g, expected %.9g', w[1], t.score, w[2]))
      assert.are.equal(w[3], t.in_degree)
      assert.are.equal(w[4], t.label)
    end
    -- in-degree ranks 400, 100 too: the same two, in the same order
    assert.are.same({ k = 2, overlap = 2, union_size = 2, kendall_tau = 1 }, r.compare_indegree)
    has(err, ' rank  vertex           score   in-degree  label\n')
    has(err, string.format('    1     400  %14.8g           3  dora\n', r.top_k[1].score))
    has(err, string.format('    3     200  %14.8g           0\n', r.top_k[3].score))
    -- the TSV: a header, then every vertex in original-id order
    assert.are.equal(dir .. '/out/scores.tsv', r.scores_file)
    local tsv = read(dir .. '/out/scores.tsv')
    local rows = {}
    for line in tsv:gmatch('[^\n]+') do rows[#rows + 1] = line end
    assert.are.equal('vertex\tscore', rows[1])
    assert.are.equal(5, #rows)
    local exact = { X100, X200, X200, X400 }
    for i, id in ipairs { 100, 200, 300, 400 } do
      local v, s = rows[i + 1]:match('^(%d+)\t(%S+)$')
      assert.are.equal(id, tonumber(v))
      assert.is_true(math.abs(tonumber(s) - exact[i]) < 1e-6, rows[i + 1])
    end
    assert.is_nil(read(dir .. '/out/scores.tsv.tmp'))
  end)

  it('writes .npy scores with the original ids beside them', function()
    local dir = tmpdir()
    local star = hand_graph(dir)
    local r = run_ok(dir, { FILE, 'graph.input.path=' .. star, 'pagerank.tol=1e-7', 'pagerank.max_iter=200',
      'output.scores=' .. dir .. '/s.npy' })
    assert.are.equal(dir .. '/s.ids.npy', r.ids_file)
    local function header(path)
      local b = read(path)
      assert.are.equal('\147NUMPY', b:sub(1, 6))
      local len = b:byte(9) + 256 * b:byte(10)
      assert.are.equal(0, (10 + len) % 64)   -- the data starts aligned, as numpy writes it
      return b:sub(11, 10 + len), b:sub(11 + len)
    end
    local h, data = header(dir .. '/s.npy')
    has(h, "'descr': '<f4'")
    has(h, "'fortran_order': False")
    assert(h:match("'shape': %(4, ?%)"), h)
    assert.are.equal(16, #data)
    local f = ffi.new('float[4]')
    ffi.copy(f, data, 16)
    for i, x in ipairs { X100, X200, X200, X400 } do assert.is_true(math.abs(f[i - 1] - x) < 1e-6) end
    h, data = header(dir .. '/s.ids.npy')
    has(h, "'descr': '<i8'")
    assert(h:match("'shape': %(4, ?%)"), h)
    local ids = ffi.new('int64_t[4]')
    ffi.copy(ids, data, 32)
    for i, id in ipairs { 100, 200, 300, 400 } do assert.are.equal(id, tonumber(ids[i - 1])) end
    -- a generated graph's ids are 0..n-1: no ids file
    r = run_ok(dir, { KRON, 'graph.generate.scale=6', 'output.scores=' .. dir .. '/k.npy' })
    assert.is_nil(r.ids_file)
    assert.is_nil(read(dir .. '/k.ids.npy'))
    assert(header(dir .. '/k.npy'):match("'shape': %(64, ?%)"))
  end)

  it('personalises the teleport vector from a file of vertex weights', function()
    local dir = tmpdir()
    local star = hand_graph(dir)
    -- teleporting to 200 only: x200 = 1-d, x300 = 0, x400 = d (1-d) / (1 - d^2), x100 = d x400
    write(dir .. '/p.txt', '# vertex weight\n200 2.5\n')
    local r = run_ok(dir, { FILE, 'graph.input.path=' .. star, 'pagerank.personalization=' .. dir .. '/p.txt',
      'pagerank.tol=1e-7', 'pagerank.max_iter=200', 'output.top_k=4' })
    local x400 = D * (1 - D) / (1 - D * D)
    local want = { [400] = x400, [100] = D * x400, [200] = 1 - D, [300] = 0 }
    for _, t in ipairs(r.top_k) do
      assert.is_true(math.abs(t.score - want[t.vertex]) < 1e-6, t.vertex .. ': ' .. t.score)
    end
    -- a bad weights file is an error naming the file and line; exit status 1
    for text, msg in pairs {
      ['200 1\n999 1\n'] = 'p.txt:2: vertex 999 is not in the graph',
      ['# w\n200 heavy\n'] = "p.txt:2: expected 'vertex weight' (an integer id and a number), got '200 heavy'",
      ['200 -1\n'] = 'p.txt:1: the weight of vertex 200 is -1, expected a finite number >= 0',
      ['200 1\n100 1\n200 2\n'] = 'p.txt:3: vertex 200 is listed twice (first on line 1)',
      ['# nothing\n'] = "p.txt: no 'vertex weight' lines",
    } do
      write(dir .. '/p.txt', text)
      local status, out, err = ember_run(dir, { FILE, 'graph.input.path=' .. star,
        'pagerank.personalization=' .. dir .. '/p.txt' })
      assert.are.equal(1, status, err)
      assert.are.equal('', out)
      has(err, 'ember run: ' .. FILE .. ': ' .. dir .. '/' .. msg)
    end
  end)

  it('caches the parsed graph and rebuilds it when the input changes', function()
    local dir = tmpdir()
    local star = hand_graph(dir)
    local args = { FILE, 'graph.input.path=' .. star, 'graph.cache=' .. dir .. '/cache/star.emg', 'output.top_k=4' }
    local first, err = run_ok(dir, args)
    assert.are.equal('parsed', first.graph_from)
    has(err, 'graph cache ' .. dir .. '/cache/star.emg: absent: building the graph')
    has(read(dir .. '/cache/star.emg.json'), '"reverse":false')
    local again, err2 = run_ok(dir, args)
    assert.are.equal('cache', again.graph_from)
    has(err2, 'loaded from ' .. dir .. '/cache/star.emg')
    assert.are.same(first.top_k, again.top_k)
    -- other options: rebuilt, not reused
    local rev = { unpack(args) }
    rev[#rev + 1] = 'graph.input.reverse=true'
    local r, err3 = run_ok(dir, rev)
    assert.are.equal('parsed', r.graph_from)
    has(err3, 'built from another source or with other options')
    local g = ember.graph.load(star, { reverse = true })
    local top = ember.graph.topk(g:pagerank { tol = 1e-6 }, 4, g)
    for i, t in ipairs(top) do assert.are.same({ t.vertex, t.score }, { r.top_k[i].vertex, r.top_k[i].score }) end
    assert.are_not.equal(first.top_k[1].score, r.top_k[1].score)
    r = run_ok(dir, args)
    assert.are.equal('parsed', r.graph_from)
    assert.are.equal('cache', run_ok(dir, args).graph_from)
    -- the same input written again, so newer than the cache: rebuilt
    os.execute('sleep 0.02')
    write(star, HAND)
    r, err3 = run_ok(dir, args)
    assert.are.equal('parsed', r.graph_from)
    has(err3, 'graph cache ' .. dir .. '/cache/star.emg: ' .. star .. ' is newer: building the graph')
    -- another input (its size changed): rebuilt
    write(star, HAND .. '300\t200\n')
    r, err3 = run_ok(dir, args)
    assert.are.equal('parsed', r.graph_from)
    assert.are.equal(5, r.edges)
    -- a damaged cache: rebuilt, with the reason
    write(dir .. '/cache/star.emg', 'EMBRGRPH but not really')
    r, err3 = run_ok(dir, args)
    assert.are.equal('parsed', r.graph_from)
    assert.are.equal(5, r.edges)
    has(err3, 'graph cache ' .. dir .. '/cache/star.emg: ')
    r = run_ok(dir, args)
    assert.are.equal('cache', r.graph_from)
  end)
end)

describe('weighted PageRank jobs', function()
  -- the README's example: examples/data/trade.mtx, a real matrix (weights), against a
  -- float64 power iteration over the file's entries computed here
  it('ranks the shipped weighted example as the float64 reference does, and says so', function()
    local dir = tmpdir()
    local entries, n = {}, nil
    for line in io.lines('examples/data/trade.mtx') do
      if not line:match('^%%') then
        local a, b, c = line:match('^(%S+)%s+(%S+)%s+(%S+)$')
        if n == nil then n = tonumber(a) else entries[#entries + 1] = { tonumber(a), tonumber(b), tonumber(c) } end
      end
    end
    local outw, x = {}, {}
    for v = 1, n do outw[v], x[v] = 0, 1 / n end
    for _, e in ipairs(entries) do outw[e[1]] = outw[e[1]] + e[3] end
    for _ = 1, 5000 do
      local y, dangling = {}, 0
      for v = 1, n do y[v], dangling = 0, dangling + (outw[v] == 0 and x[v] or 0) end
      for _, e in ipairs(entries) do
        if outw[e[1]] > 0 then y[e[2]] = y[e[2]] + x[e[1]] * e[3] / outw[e[1]] end
      end
      for v = 1, n do y[v] = D * y[v] + ((1 - D) + D * dangling) / n end
      x = y
    end
    local r, err = run_ok(dir, { FILE, 'graph.input.path=examples/data/trade.mtx', 'pagerank.weighted=true',
      'pagerank.tol=1e-9', 'pagerank.max_iter=500', 'output.scores=' .. dir .. '/s.tsv' })
    assert.is_true(r.weighted)
    assert.are.equal('cpu:weighted', r.engine)
    has(err, 'pagerank: jacobi, weighted, ')
    local l1, i = 0, 0
    for line in read(dir .. '/s.tsv'):gmatch('[^\n]+') do
      local v, sc = line:match('^(%d+)\t(%S+)$')
      if v then
        i = i + 1
        l1 = l1 + math.abs(tonumber(sc) - x[tonumber(v)])
      end
    end
    assert.are.equal(n, i)
    assert.is_true(l1 <= 1e-6, 'L1 ' .. l1)
    -- auto: the same run; false: every arc once (different scores)
    local auto = run_ok(dir, { FILE, 'graph.input.path=examples/data/trade.mtx', 'pagerank.tol=1e-9',
      'pagerank.max_iter=500' })
    assert.is_true(auto.weighted)
    assert.are.same(r.top_k, auto.top_k)
    local plain = run_ok(dir, { FILE, 'graph.input.path=examples/data/trade.mtx', 'pagerank.weighted=false' })
    assert.is_false(plain.weighted)
    assert.are.equal('cpu', plain.engine)
    assert.are_not.equal(r.top_k[1].score, plain.top_k[1].score)
  end)

  it('keeps the weights in the cache, and refuses weighted: true on an unweighted file', function()
    local dir = tmpdir()
    local args = { FILE, 'graph.input.path=examples/data/trade.mtx', 'graph.cache=' .. dir .. '/t.emg' }
    local first = run_ok(dir, args)
    local again = run_ok(dir, args)
    assert.are.equal('cache', again.graph_from)
    assert.is_true(again.weighted)
    assert.are.same(first.top_k, again.top_k)
    local star = hand_graph(dir)
    local status, out, err = ember_run(dir, { FILE, 'graph.input.path=' .. star, 'pagerank.weighted=true' })
    assert.are.equal(1, status)
    assert.are.equal('', out)
    has(err, 'pagerank.weighted is true, but ' .. star .. ' has no edge weights')
    assert.is_false(run_ok(dir, { FILE, 'graph.input.path=' .. star }).weighted)
    -- a bad weight names the file and line; a bad setting names the key
    write(dir .. '/bad.txt', '1 2 0.5\n2 3 -1\n')
    status, out, err = ember_run(dir, { FILE, 'graph.input.path=' .. dir .. '/bad.txt' })
    assert.are.equal(1, status)
    has(err, dir .. '/bad.txt:2: ')
    has(err, 'negative')
    has(load_error(FILE, { 'pagerank.weighted=yes' }), 'pagerank.weighted: expected auto, true or false')
  end)
end)

describe('pagerank pipeline validation', function()
  it('names the file, line and key of a bad value', function()
    local dir = tmpdir()
    local p = write(dir .. '/p.yaml', [[
job: pagerank
graph:
  input:
    path: examples/data/follows.txt
    format: snap
    directed: true
pagerank:
  damping: 0.85
output:
  top_k: 5
]])
    local cfg = pipeline.load(p)
    assert.are.equal(0.85, cfg.pagerank.damping)
    assert.are.equal(1e-6, cfg.pagerank.tol)
    assert.are.equal('jacobi', cfg.pagerank.method)
    assert.are.equal(100, cfg.pagerank.max_iter)
    assert.are.equal('degree', cfg.graph.reorder)
    assert.is_false(cfg.graph.input.reverse)
    assert.are.equal('cpu', cfg.device)

    local function edit(from, to)
      local text = read(p):gsub(from, to, 1)
      return write(dir .. '/q.yaml', text)
    end
    local q = edit('    directed: true', '    directed: true\n    revers: true')
    assert.are.equal(q .. ':7: graph.input.revers: unknown key (expected one of: directed, drop_duplicates, ' ..
      'drop_self_loops, format, labels, path, reverse)', load_error(q))
    q = edit('damping: 0.85', 'damping: high')
    assert.are.equal(q .. ":8: pagerank.damping: expected a number >= 0 and < 1, got 'high'", load_error(q))
    q = edit('top_k: 5', 'top_k: [5]')
    assert.are.equal(q .. ':10: output.top_k: expected an integer >= 0, got a list of 1', load_error(q))
    q = edit('format: snap', 'format: csv')
    assert.are.equal(q .. ":5: graph.input.format: expected one of auto, snap, mtx, sg, ember, got 'csv'",
      load_error(q))
    q = edit('follows.txt', 'nowhere.txt')
    assert.are.equal(q .. ":4: graph.input.path: expected the path of an existing file, got " ..
      "'examples/data/nowhere.txt' (no such file or directory)", load_error(q))
    q = edit('  input:', '  generate: {scale: 4}\n  input:')
    assert.are.equal(q .. ':3: graph: expected one of generate: or input:, got both (an override can clear one: ' ..
      'graph.input=null)', load_error(q))
    -- PageRank runs on GPUs too: any device name loads; whether it exists is checked by run
    q = edit('pagerank:', 'device: cuda:1\npagerank:')
    assert.are.equal('cuda:1', pipeline.load(q).device)
    q = edit('pagerank:', 'device: gpu\npagerank:')
    assert.are.equal(q .. ":7: device: expected cpu, cuda, cuda:N or auto, got 'gpu'", load_error(q))
    assert.are.equal(p .. ': override graph.generate.kind=uniform: graph.generate.scale: missing (expected an ' ..
      'integer >= 1 and <= 31)', load_error(p, { 'graph.input=null', 'graph.generate.kind=uniform' }))
  end)

  it('names the override that gave a bad value', function()
    assert.are.equal(FILE .. ': override graph.input.path=nope.txt: graph.input.path: expected the path of an ' ..
      "existing file, got 'nope.txt' (no such file or directory)", load_error(FILE, { 'graph.input.path=nope.txt' }))
    assert.are.equal(KRON .. ': override graph.generate.scale=40: graph.generate.scale: expected an integer >= 1 ' ..
      'and <= 31, got 40', load_error(KRON, { 'graph.generate.scale=40' }))
    assert.are.equal(KRON .. ': override pagerank.method=power: pagerank.method: expected one of jacobi, ' ..
      "gauss-seidel, gapbs, got 'power'", load_error(KRON, { 'pagerank.method=power' }))
    assert.are.equal(KRON .. ': override output.colour=red: output.colour: unknown key (expected one of: ' ..
      'compare_at, compare_indegree, rank_plot, scores, top_k)', load_error(KRON, { 'output.colour=red' }))
    local cfg = pipeline.load(KRON, { 'graph.generate.scale=22' })
    assert.are.equal(22, cfg.graph.generate.scale)
    assert.are.equal(20, pipeline.load(KRON).graph.generate.scale)
    cfg = pipeline.load(FILE, { 'graph.input=null', 'graph.generate.scale=5' })
    assert.are.equal(5, cfg.graph.generate.scale)
  end)

  it('ranks on the device asked for: auto picks a GPU when there is one', function()
    local dir = tmpdir()
    local gpus = ember.device_count('cuda')
    local r = run_ok(dir, { FILE, 'device=auto', 'output.top_k=3' })
    assert.are.equal(gpus > 0 and 'cuda' or 'cpu', r.device)
    assert.are.equal(gpus > 0 and 'cuda:custom' or 'cpu', r.engine)
    assert.is_true(r.converged)
    if gpus == 0 then
      local status, out, err = ember_run(dir, { FILE, 'device=cuda' })
      assert.are.equal(2, status)
      assert.are.equal('', out)
      has(err, "device: 'cuda' requested, but no CUDA device is available (use cpu or auto)")
    else
      local cpu = run_ok(dir, { FILE, 'device=cpu', 'output.top_k=3' })
      assert.are.equal(cpu.iterations, r.iterations)
      for i = 1, 3 do assert.are.equal(cpu.top_k[i].vertex, r.top_k[i].vertex) end
    end
  end)

  it('exits 2 with the message on stderr and nothing on stdout', function()
    local dir = tmpdir()
    local status, out, err = ember_run(dir, { FILE, 'graph.input.path=' .. dir .. '/none.txt' })
    assert.are.equal(2, status)
    assert.are.equal('', out)
    assert.are.equal(FILE .. ': override graph.input.path=' .. dir .. '/none.txt: graph.input.path: expected the ' ..
      "path of an existing file, got '" .. dir .. "/none.txt' (no such file or directory)\n", err)
    -- a malformed edge list fails the job (status 1), naming the file and line
    write(dir .. '/bad.txt', '# edges\n1 2\n2 three\n')
    status, out, err = ember_run(dir, { FILE, 'graph.input.path=' .. dir .. '/bad.txt' })
    assert.are.equal(1, status)
    assert.are.equal('', out)
    has(err, dir .. '/bad.txt:3: ')
  end)
end)
