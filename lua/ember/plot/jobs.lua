-- ember.plot.jobs: the pictures the jobs write (added to ember.plot by plot/init.lua).
--   plot.training_curves(metrics_jsonl [, png])
--                                             loss and accuracy by epoch, from the train job's
--                                             metrics.jsonl (train_* and test_* keys): a figure,
--                                             saved to png when given
--   plot.after_training(metrics_jsonl, log)   the train job's hook: curves.png beside the
--                                             metrics; a picture that cannot be drawn is
--                                             logged, never fails the job
--   plot.rank_rank(scores, in_degree [, png [, opts]])
--                                             PageRank rank against in-degree rank, log-log: a
--                                             plot, saved to png when given
--                                             (1 = the highest); opts.max_points (200000):
--                                             above it, every vertex of the top 10000 and an
--                                             even sample of the rest are drawn
--   plot.ranks(t)                             competition ranks of a 1-d tensor (ties share
--                                             the best), largest value first
local ffi = require 'ffi'
local json = require 'ember.util.json'

return function(plot)
  local function read_metrics(path)
    local f, err = io.open(path, 'r')
    if not f then error(string.format("plot.training_curves: cannot read '%s': %s", path, err), 3) end
    local rows, lineno = {}, 0
    for line in f:lines() do
      lineno = lineno + 1
      if line:match('%S') then
        local ok, row = pcall(json.decode, line)
        if not ok or type(row) ~= 'table' then
          f:close()
          error(string.format('plot.training_curves: %s:%d: not a JSON object: %s', path, lineno, tostring(row)), 3)
        end
        rows[#rows + 1] = row
      end
    end
    f:close()
    return rows
  end

  local function series(rows, key)
    local x, y = {}, {}
    for i, r in ipairs(rows) do
      if type(r[key]) == 'number' then
        x[#x + 1] = type(r.epoch) == 'number' and r.epoch or i
        y[#y + 1] = r[key]
      end
    end
    return #y > 0 and x or nil, y
  end

  function plot.training_curves(metrics_path, png_path)
    local rows = read_metrics(metrics_path)
    if #rows == 0 then error(string.format('plot.training_curves: %s has no metrics lines', metrics_path), 2) end
    local panels = {}
    local kinds = { { 'loss', 'train_loss', 'test_loss' }, { 'accuracy', 'train_accuracy', 'test_accuracy' } }
    for _, panel in ipairs(kinds) do
      local p
      for i = 2, 3 do
        local x, y = series(rows, panel[i])
        if x then
          p = p or plot.new { title = panel[1], xlabel = 'epoch', ylabel = panel[1], width = 520, height = 360 }
          p:line(x, y, { label = panel[i]:gsub('_', ' '), markers = #y <= 60 })
        end
      end
      panels[#panels + 1] = p
    end
    if #panels == 0 then
      error(string.format('plot.training_curves: %s has no train_loss, test_loss, train_accuracy or test_accuracy',
        metrics_path), 2)
    end
    local fig = plot.figure(panels, { columns = #panels })
    if png_path then fig:save(png_path) end
    return fig
  end

  function plot.after_training(metrics_path, log)
    local png = metrics_path:gsub('[^/]*$', '') .. 'curves.png'
    local ok, err = pcall(plot.training_curves, metrics_path, png)
    if log then
      if ok then log('curves: %s', png) else log('curves: not written: %s', tostring(err)) end
    end
    return ok and png or nil
  end

  -- Competition ranks (ties share the best) of a tensor's values, largest first: an int64
  -- array, position i for element i + 1.
  local function ranks(t, n)
    local values, order = t:to('float64'):sort(1, true)
    values, order = values:contiguous(), order:contiguous()
    local vp = ffi.cast('const double *', values:data_ptr())
    local op = ffi.cast('const int64_t *', order:data_ptr())
    local r = ffi.new('int64_t[?]', n)
    local current = 1
    for i = 0, n - 1 do
      if i > 0 and vp[i] ~= vp[i - 1] then current = i + 1 end
      r[op[i] - 1] = current
    end
    return r, op
  end

  -- ranks(t): the competition ranks of a 1-d tensor's values, largest first, as a Lua array.
  function plot.ranks(t)
    local n = t:numel()
    local r = ranks(t:reshape(n), n)
    local out = {}
    for i = 0, n - 1 do out[i + 1] = tonumber(r[i]) end
    return out
  end

  function plot.rank_rank(scores, in_degree, png_path, opts)
    local ember = require 'ember'
    opts = opts or {}
    if not (ember.is_tensor(scores) and ember.is_tensor(in_degree)) then
      error('plot.rank_rank: expected two tensors (the scores and the in-degrees)', 2)
    end
    local n = scores:numel()
    if in_degree:numel() ~= n then
      error(string.format('plot.rank_rank: %d scores and %d in-degrees: expected one of each per vertex', n,
        in_degree:numel()), 2)
    end
    if n == 0 then error('plot.rank_rank: the graph has no vertices', 2) end
    local pr, pr_order = ranks(scores:reshape(n), n)
    local deg = ranks(in_degree:reshape(n), n)
    local cap = opts.max_points or 200000
    if type(cap) ~= 'number' or cap < 2 then error('plot.rank_rank: max_points: expected a number >= 2', 2) end
    local top = n > cap and math.min(10000, math.floor(cap / 2)) or n
    local stride = n > cap and math.ceil((n - top) / (cap - top)) or 1
    local size = math.min(n, cap)
    local x, y = ffi.new('double[?]', size), ffi.new('double[?]', size)
    local m = 0
    for i = 0, n - 1 do   -- in PageRank order: the top all, then every stride-th
      if m < size and (i < top or (i - top) % stride == 0) then
        local v = pr_order[i] - 1
        x[m], y[m] = tonumber(pr[v]), tonumber(deg[v])
        m = m + 1
      end
    end
    local xs, ys = {}, {}
    for i = 0, m - 1 do xs[i + 1], ys[i + 1] = x[i], y[i] end
    local p = plot.new { title = string.format('PageRank rank against in-degree rank (%d vertices%s)', n,
      m < n and string.format(', %d drawn', m) or ''), xlabel = 'PageRank rank', ylabel = 'in-degree rank',
      xlog = true, ylog = true, width = opts.width or 640, height = opts.height or 560 }
    p:line({ 1, n }, { 1, n }, { color = { 0.6, 0.6, 0.6 }, linewidth = 1, label = 'same rank' })
    p:scatter(xs, ys, { size = n > 20000 and 0.8 or 1.6, alpha = 0.5, label = 'vertices' })
    if png_path then p:save(png_path) end
    return p
  end
end
