-- ember.plot: line, scatter and histogram plots drawn with cairo (Debian's libcairo2), as
-- PNG or SVG files from scripts and jobs, and inline in notebooks (`ember kernel`).
--
--   local p = ember.plot.line(y [, opts])            y against 1..n
--   local p = ember.plot.line(x, y [, opts])         x, y: Lua arrays of numbers or 1-d tensors
--   ember.plot.scatter(x, y [, opts]), ember.plot.hist(values [, opts])
--   p:line(x, y, opts), p:scatter(...), p:hist(...)  more series on the same axes
--   p:save('loss.png') or p:save('loss.svg')         by extension; p:png(), p:svg() give the bytes
--   p:show()                                         in a notebook: shown (display_data); a plot
--                                                    as a cell's value is shown too
--   ember.plot.figure({p1, p2} [, {columns = 2}])    plots side by side (save, png, svg, show)
--
-- opts of the axes (the first call): title, xlabel, ylabel, xlog, ylog (log axes: values
-- <= 0 are left out), xlim = {lo, hi}, ylim, width, height (pixels, default 640 x 420).
-- opts of a series: label (legend), color = {r, g, b} (0..1), alpha, linewidth (lines),
-- size (scatter: half the side of a point, pixels), markers (lines: points too), bins
-- (hist, default 30; log-spaced on a log x axis), range = {lo, hi} (hist).
--
-- For the jobs: training_curves(metrics_jsonl, png) draws loss and accuracy by epoch;
-- rank_rank(scores, in_degree, png) PageRank rank against in-degree rank, log-log.
local ffi = require 'ffi'
local axes = require 'ember.plot.axes'
local cairo = require 'ember.plot.cairo'

local plot = {}

local Plot, Figure = { __name = 'Plot' }, { __name = 'Figure' }
Plot.__index, Figure.__index = Plot, Figure

local function fail(what, msg, level) error(string.format('ember.plot.%s: %s', what, msg), level or 3) end

local function is_tensor(v)
  local e = package.loaded.ember
  return type(v) == 'cdata' and e ~= nil and e.is_tensor(v)
end

-- Numbers as a double array (kept alive by the series): from a Lua array or a tensor.
local function numbers(what, name, v)
  if is_tensor(v) then
    local t = v:to('cpu'):to('float64'):contiguous()
    local n = t:numel()
    return ffi.cast('const double *', t:data_ptr()), n, t
  end
  if type(v) ~= 'table' then fail(what, string.format('%s: expected a Lua array of numbers or a tensor, got a %s',
    name, type(v)), 4) end
  local n = #v
  local p = ffi.new('double[?]', math.max(n, 1))
  for i = 1, n do
    local x = v[i]
    if type(x) ~= 'number' then
      fail(what, string.format('%s[%d]: expected a number, got a %s', name, i, type(x)), 4)
    end
    p[i - 1] = x
  end
  return p, n, p
end

local function is_options(v)
  return type(v) == 'table' and not is_tensor(v) and v[1] == nil and next(v) ~= nil
end

local AXES_KEYS = { 'title', 'xlabel', 'ylabel', 'xlog', 'ylog', 'xlim', 'ylim', 'width', 'height' }
local SERIES_KEYS = { label = true, color = true, alpha = true, linewidth = true, size = true, markers = true,
  bins = true, range = true }

local function check_options(what, opts)
  if opts == nil then return {} end
  if type(opts) ~= 'table' then fail(what, 'expected an options table, got a ' .. type(opts), 4) end
  local known = {}
  for _, k in ipairs(AXES_KEYS) do known[k] = true end
  for k in pairs(opts) do
    if not known[k] and not SERIES_KEYS[k] then
      fail(what, string.format("unknown option '%s' (expected title, xlabel, ylabel, xlog, ylog, xlim, ylim, width, " ..
        'height, label, color, alpha, linewidth, size, markers, bins, range)', tostring(k)), 4)
    end
  end
  for _, k in ipairs { 'xlim', 'ylim', 'range' } do
    local l = opts[k]
    if l ~= nil and not (type(l) == 'table' and type(l[1]) == 'number' and type(l[2]) == 'number' and l[2] > l[1]) then
      fail(what, string.format('%s: expected {lo, hi} with lo < hi, got %s', k, tostring(l)), 4)
    end
  end
  return opts
end

function plot.new(opts)
  opts = check_options('new', opts)
  local p = setmetatable({ series = {}, width = opts.width or 640, height = opts.height or 420 }, Plot)
  for _, k in ipairs(AXES_KEYS) do
    if opts[k] ~= nil and k ~= 'width' and k ~= 'height' then p[k] = opts[k] end
  end
  if not (p.width >= 16 and p.width <= 8192 and p.height >= 16 and p.height <= 8192) then
    fail('new', string.format('width and height: expected 16..8192 pixels, got %s x %s', tostring(p.width),
      tostring(p.height)))
  end
  return p
end

-- Each series gets the next palette colour unless it names one (a line's markers share its colour).
local function add(p, s, opts)
  s.label, s.color, s.alpha = opts.label, opts.color, opts.alpha
  if not s.color then
    p.colors_used = (p.colors_used or 0) + 1
    s.color = axes.palette[(p.colors_used - 1) % #axes.palette + 1]
  end
  if s.label ~= nil then s.label = tostring(s.label) end
  p.series[#p.series + 1] = s
  return p
end

-- line(y [, opts]) or line(x, y [, opts])
function Plot:line(x, y, opts)
  if y == nil or is_options(y) then x, y, opts = nil, x, y end
  opts = check_options('line', opts)
  local yp, n, ykeep = numbers('line', 'y', y)
  local xp, xkeep
  if x == nil then
    xp = ffi.new('double[?]', math.max(n, 1))
    for i = 0, n - 1 do xp[i] = i + 1 end
    xkeep = xp
  else
    local nx
    xp, nx, xkeep = numbers('line', 'x', x)
    if nx ~= n then fail('line', string.format('x has %d values and y %d: expected as many', nx, n)) end
  end
  add(self, { kind = 'line', x = xp, y = yp, n = n, keep = { xkeep, ykeep }, width = opts.linewidth }, opts)
  if opts.markers then
    add(self, { kind = 'scatter', x = xp, y = yp, n = n, keep = { xkeep, ykeep }, size = opts.size or 2.5 },
      { color = self.series[#self.series].color })
  end
  return self
end

function Plot:scatter(x, y, opts)
  opts = check_options('scatter', opts)
  local xp, nx, xkeep = numbers('scatter', 'x', x)
  local yp, ny, ykeep = numbers('scatter', 'y', y)
  if nx ~= ny then fail('scatter', string.format('x has %d values and y %d: expected as many', nx, ny)) end
  return add(self, { kind = 'scatter', x = xp, y = yp, n = nx, keep = { xkeep, ykeep }, size = opts.size }, opts)
end

function Plot:hist(values, opts)
  opts = check_options('hist', opts)
  local vp, n, keep = numbers('hist', 'values', values)
  local bins = opts.bins or 30
  if type(bins) ~= 'number' or bins < 1 or bins % 1 ~= 0 or bins > 100000 then
    fail('hist', 'bins: expected a whole number from 1 to 100000, got ' .. tostring(bins))
  end
  local log = self.xlog
  local lo, hi = math.huge, -math.huge
  if opts.range then
    lo, hi = opts.range[1], opts.range[2]
  else
    for i = 0, n - 1 do
      local v = vp[i]
      if v == v and v > -math.huge and v < math.huge and (not log or v > 0) then
        lo, hi = math.min(lo, v), math.max(hi, v)
      end
    end
    if lo > hi then lo, hi = log and 1 or 0, log and 10 or 1 end
    if hi == lo then lo, hi = lo - 0.5, hi + 0.5 end
  end
  if log and lo <= 0 then fail('hist', 'range: a log x axis needs lo > 0') end
  local f = log and math.log or function(v) return v end
  local a, b = f(lo), f(hi)
  local edges, counts = ffi.new('double[?]', bins + 1), ffi.new('double[?]', bins)
  for i = 0, bins do edges[i] = log and math.exp(a + (b - a) * i / bins) or a + (b - a) * i / bins end
  for i = 0, n - 1 do
    local v = vp[i]
    if v >= lo and v <= hi and (not log or v > 0) then
      local k = math.floor((f(v) - a) / (b - a) * bins)
      if k >= bins then k = bins - 1 end
      counts[k] = counts[k] + 1
    end
  end
  add(self, { kind = 'hist', x = edges, y = counts, n = bins, keep = { keep, edges, counts } }, opts)
  self.series[#self.series].alpha = opts.alpha or 0.85
  return self
end

-- ------------------------------------------------------------------ rendering

local function draw_all(cr, plots, columns, cell_w, cell_h)
  for i, p in ipairs(plots) do
    local col, row = (i - 1) % columns, math.floor((i - 1) / columns)
    axes.draw(cr, p, col * cell_w, row * cell_h, cell_w, cell_h)
  end
end

local function render(kind, plots, columns, cell_w, cell_h)
  local rows = math.ceil(#plots / columns)
  return cairo.render(kind, columns * cell_w, rows * cell_h, function(cr)
    draw_all(cr, plots, columns, cell_w, cell_h)
  end)
end

function Plot:png() return render('png', { self }, 1, self.width, self.height) end
function Plot:svg() return render('svg', { self }, 1, self.width, self.height) end
function Figure:png() return render('png', self.plots, self.columns, self.cell_w, self.cell_h) end
function Figure:svg() return render('svg', self.plots, self.columns, self.cell_w, self.cell_h) end

local function save(self, path)
  if type(path) ~= 'string' then fail('save', 'expected a file name ending in .png or .svg, got a ' .. type(path)) end
  local ext = path:lower():match('%.(%w+)$')
  if ext ~= 'png' and ext ~= 'svg' then
    fail('save', string.format("'%s': expected a file name ending in .png or .svg", path))
  end
  local bytes = ext == 'png' and self:png() or self:svg()
  local f, err = io.open(path, 'wb')
  if not f then fail('save', string.format("cannot write '%s': %s", path, err)) end
  f:write(bytes)
  f:close()
  return path
end
Plot.save, Figure.save = save, save

local function show(self, opts)
  require('ember.display').show_png(self:png(), opts, 'plot')
end
Plot.show, Figure.show = show, show

local function display_bundle(self)
  local message = require 'ember.kernel.message'
  return { ['image/png'] = message.base64(self:png()), ['text/plain'] = tostring(self) }
end
Plot.__display, Figure.__display = display_bundle, display_bundle

function Plot:__tostring()
  return string.format('<plot%s: %d series, %d x %d>', self.title and (' "' .. self.title .. '"') or '', #self.series,
    self.width, self.height)
end
function Figure:__tostring() return string.format('<figure: %d plots>', #self.plots) end

-- ------------------------------------------------------------------ module functions

function plot.line(x, y, opts)
  if y == nil or is_options(y) then return plot.new(y):line(x, y) end
  return plot.new(opts):line(x, y, opts)
end
function plot.scatter(x, y, opts) return plot.new(opts):scatter(x, y, opts) end
function plot.hist(values, opts) return plot.new(opts):hist(values, opts) end

function plot.figure(plots, opts)
  opts = opts or {}
  if type(plots) ~= 'table' or #plots == 0 then fail('figure', 'expected a list of plots') end
  for i, p in ipairs(plots) do
    if getmetatable(p) ~= Plot then
      fail('figure', string.format('plots[%d]: expected a plot, got %s', i, tostring(p)))
    end
  end
  local columns = opts.columns or #plots
  local cell_w, cell_h = plots[1].width, plots[1].height
  return setmetatable({ plots = plots, columns = columns, cell_w = cell_w, cell_h = cell_h }, Figure)
end

plot.Plot, plot.Figure = Plot, Figure
require('ember.plot.jobs')(plot)
return plot
