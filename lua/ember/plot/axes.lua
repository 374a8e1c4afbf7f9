-- ember.plot.axes: one panel of a plot drawn with cairo: the data ranges, ticks (linear:
-- 1-2-5 steps; log: decades, with 2 and 5 between when there are few), grid, axis labels,
-- title, the series (lines, points, bars) clipped to the frame, and the legend.
--   axes.draw(cr, plot, x, y, width, height)
local ffi = require 'ffi'
local cairo = require 'ember.plot.cairo'

local M = {}

M.palette = {
  { 0.12, 0.47, 0.71 }, { 1.00, 0.50, 0.05 }, { 0.17, 0.63, 0.17 }, { 0.84, 0.15, 0.16 }, { 0.58, 0.40, 0.74 },
  { 0.55, 0.34, 0.29 }, { 0.89, 0.47, 0.76 }, { 0.50, 0.50, 0.50 }, { 0.74, 0.74, 0.13 }, { 0.09, 0.75, 0.81 },
}

local FONT = 'DejaVu Sans'
local log10 = math.log10 or function(v) return math.log(v) / math.log(10) end

local function finite(v) return v == v and v > -math.huge and v < math.huge end

-- ------------------------------------------------------------------ ranges and ticks

-- The smallest and largest usable values of one coordinate over the series.
local function data_range(plot, key, log)
  local lo, hi = math.huge, -math.huge
  for _, s in ipairs(plot.series) do
    local p = s[key]
    local count = (s.kind == 'hist' and key == 'x') and s.n + 1 or s.n   -- a histogram's x: n + 1 bin edges
    for i = 0, count - 1 do
      local v = p[i]
      if finite(v) and (not log or v > 0) then
        if v < lo then lo = v end
        if v > hi then hi = v end
      end
    end
    if key == 'y' and s.kind == 'hist' and not log then lo = math.min(lo, 0) end
  end
  return lo, hi
end

local function nice_step(span, target)
  local raw = span / target
  local mag = 10 ^ math.floor(log10(raw))
  for _, m in ipairs { 1, 2, 2.5, 5, 10 } do
    if raw <= m * mag then return m * mag end
  end
  return 10 * mag
end

-- The axis limits and ticks: {lo, hi, log, ticks = {values}}.
function M.scale(lo, hi, log, limits)
  if limits then lo, hi = limits[1], limits[2] end
  if lo > hi then lo, hi = log and 1 or 0, log and 10 or 1 end          -- no data
  if log then
    local a, b = log10(lo), log10(hi)
    if b - a < 1e-9 then a, b = a - 0.5, b + 0.5 end
    if not limits then
      local pad = 0.04 * (b - a)
      a, b = a - pad, b + pad
    end
    local ticks = {}
    local decades = math.ceil(b) - math.floor(a)
    local step = math.max(1, math.ceil(decades / 8))
    for k = math.floor(a), math.ceil(b), step do
      for _, m in ipairs(decades <= 2 and { 1, 2, 5 } or { 1 }) do
        local v = m * 10 ^ k
        local lv = log10(v)
        if lv >= a - 1e-9 and lv <= b + 1e-9 then ticks[#ticks + 1] = v end
      end
    end
    return { lo = 10 ^ a, hi = 10 ^ b, log = true, ticks = ticks, a = a, b = b }
  end
  if hi - lo < 1e-300 * math.max(1, math.abs(lo)) then
    local d = lo ~= 0 and math.abs(lo) * 0.1 or 1
    lo, hi = lo - d, hi + d
  end
  if not limits then
    local pad = 0.04 * (hi - lo)
    lo, hi = lo - pad, hi + pad
  end
  local step = nice_step(hi - lo, 5)
  local ticks = {}
  local first = math.ceil(lo / step - 1e-9) * step
  for i = 0, 50 do
    local v = first + i * step
    if v > hi + step * 1e-9 then break end
    ticks[#ticks + 1] = math.abs(v) < step * 1e-9 and 0 or v
  end
  return { lo = lo, hi = hi, log = false, ticks = ticks, a = lo, b = hi, step = step }
end

function M.tick_label(v, sc)
  if sc.log then
    local k = log10(v)
    if math.abs(k - math.floor(k + 0.5)) < 1e-9 then
      k = math.floor(k + 0.5)
      if k >= -3 and k <= 4 then return string.format('%g', 10 ^ k) end
      return string.format('1e%d', k)
    end
    return string.format('%g', v)
  end
  local decimals = math.max(0, -math.floor(log10(sc.step) + 1e-9))
  if math.abs(v) >= 1e6 or (math.abs(v) > 0 and math.abs(v) < 1e-4) then return string.format('%.3g', v) end
  return string.format(string.format('%%.%df', decimals), v)
end

-- Position of a data value along [p0, p1] of the screen, or nil when it cannot be shown.
local function mapper(sc, p0, p1)
  local a, b = sc.a, sc.b
  local k = (p1 - p0) / (b - a)
  if sc.log then
    return function(v)
      if not (v > 0) or v == math.huge then return nil end
      return p0 + (log10(v) - a) * k
    end
  end
  return function(v)
    if not finite(v) then return nil end
    return p0 + (v - a) * k
  end
end
M.mapper = mapper

-- ------------------------------------------------------------------ drawing

local ext = ffi.new('cairo_text_extents_t')

local function text(C, cr, s, x, y, ax, ay, size, bold)
  C.cairo_select_font_face(cr, FONT, cairo.FONT_SLANT_NORMAL, bold and cairo.FONT_WEIGHT_BOLD or
    cairo.FONT_WEIGHT_NORMAL)
  C.cairo_set_font_size(cr, size)
  C.cairo_text_extents(cr, s, ext)
  C.cairo_move_to(cr, x - ax * ext.width - ext.x_bearing, y - ay * ext.height - ext.y_bearing)
  C.cairo_show_text(cr, s)
  return ext.width
end

local function draw_series(C, cr, s, color, mx, my, y0)
  C.cairo_set_source_rgba(cr, color[1], color[2], color[3], s.alpha or 1)
  local x, y = s.x, s.y
  if s.kind == 'line' then
    C.cairo_set_line_width(cr, s.width or 1.8)
    C.cairo_set_line_join(cr, cairo.LINE_JOIN_ROUND)
    C.cairo_set_line_cap(cr, cairo.LINE_CAP_ROUND)
    local pen = false
    for i = 0, s.n - 1 do
      local px, py = mx(x[i]), my(y[i])
      if px and py then
        if pen then C.cairo_line_to(cr, px, py) else C.cairo_move_to(cr, px, py) end
        pen = true
      else
        pen = false                                                   -- a gap: NaN, or <= 0 on a log axis
      end
    end
    C.cairo_stroke(cr)
  elseif s.kind == 'scatter' then
    local r = s.size or 2
    local batch = 0
    for i = 0, s.n - 1 do
      local px, py = mx(x[i]), my(y[i])
      if px and py then
        C.cairo_rectangle(cr, px - r, py - r, 2 * r, 2 * r)
        batch = batch + 1
        if batch == 20000 then C.cairo_fill(cr); batch = 0 end
      end
    end
    C.cairo_fill(cr)
  elseif s.kind == 'hist' then
    -- bars: x holds the n + 1 bin edges, y the n counts
    for i = 0, s.n - 1 do
      local left, right, top = mx(x[i]), mx(x[i + 1]), my(y[i])
      if left and right and top and y[i] > 0 then
        C.cairo_rectangle(cr, left, top, right - left, y0 - top)
      end
    end
    C.cairo_fill_preserve(cr)
    C.cairo_set_source_rgba(cr, 1, 1, 1, 0.8)
    C.cairo_set_line_width(cr, 0.6)
    C.cairo_stroke(cr)
  end
end

-- The points of the series inside a box (a sample of at most 4000 per series).
local function points_in(plot, mx, my, x0, y0, x1, y1)
  local count = 0
  for _, s in ipairs(plot.series) do
    local step = math.max(1, math.floor(s.n / 4000))
    for i = 0, s.n - 1, step do
      local px, py = mx(s.x[i]), my(s.y[i])
      if px and py and px >= x0 and px <= x1 and py >= y0 and py <= y1 then count = count + 1 end
    end
  end
  return count
end

-- The legend, in the corner of the frame that hides the fewest points.
local function draw_legend(C, cr, plot, frame, mx, my)
  local labelled = {}
  for i, s in ipairs(plot.series) do
    if s.label then labelled[#labelled + 1] = { s = s, color = s.color or M.palette[(i - 1) % #M.palette + 1] } end
  end
  if #labelled == 0 then return end
  local width = 0
  C.cairo_select_font_face(cr, FONT, cairo.FONT_SLANT_NORMAL, cairo.FONT_WEIGHT_NORMAL)
  C.cairo_set_font_size(cr, 11)
  for _, l in ipairs(labelled) do
    C.cairo_text_extents(cr, l.s.label, ext)
    width = math.max(width, ext.x_advance)
  end
  local w, h = width + 36, #labelled * 16 + 8
  local best
  for _, corner in ipairs { { 1, 0 }, { 0, 0 }, { 1, 1 }, { 0, 1 } } do   -- top right first
    local cx = corner[1] == 1 and frame.right - w - 8 or frame.left + 8
    local cy = corner[2] == 0 and frame.top + 8 or frame.bottom - h - 8
    local hidden = points_in(plot, mx, my, cx, cy, cx + w, cy + h)
    if not best or hidden < best.hidden then best = { x = cx, y = cy, hidden = hidden } end
  end
  local x0, y0 = best.x, best.y
  C.cairo_set_source_rgba(cr, 1, 1, 1, 0.85)
  C.cairo_rectangle(cr, x0, y0, w, h)
  C.cairo_fill(cr)
  for i, l in ipairs(labelled) do
    local cy = y0 + 4 + (i - 0.5) * 16
    C.cairo_set_source_rgb(cr, l.color[1], l.color[2], l.color[3])
    if l.s.kind == 'line' then
      C.cairo_set_line_width(cr, 2)
      C.cairo_move_to(cr, x0 + 6, cy)
      C.cairo_line_to(cr, x0 + 24, cy)
      C.cairo_stroke(cr)
    else
      C.cairo_rectangle(cr, x0 + 11, cy - 4, 8, 8)
      C.cairo_fill(cr)
    end
    C.cairo_set_source_rgb(cr, 0.15, 0.15, 0.15)
    text(C, cr, l.s.label, x0 + 30, cy, 0, 0.5, 11)
  end
end

-- Draws the plot into the rectangle (x, y, width, height) of cr.
function M.draw(cr, plot, x, y, width, height)
  local C = cairo.lib()
  local xlo, xhi = data_range(plot, 'x', plot.xlog)
  local ylo, yhi = data_range(plot, 'y', plot.ylog)
  local sx = M.scale(xlo, xhi, plot.xlog, plot.xlim)
  local sy = M.scale(ylo, yhi, plot.ylog, plot.ylim)
  local left, right = x + 62, x + width - 16
  local top, bottom = y + (plot.title and 34 or 14), y + height - (plot.xlabel and 46 or 30)
  if plot.ylabel then left = left + 16 end
  local mx, my = mapper(sx, left, right), mapper(sy, bottom, top)

  C.cairo_set_source_rgb(cr, 1, 1, 1)
  C.cairo_rectangle(cr, x, y, width, height)
  C.cairo_fill(cr)
  -- grid and tick labels
  C.cairo_set_line_width(cr, 1)
  for _, v in ipairs(sx.ticks) do
    local px = mx(v)
    C.cairo_set_source_rgb(cr, 0.9, 0.9, 0.9)
    C.cairo_move_to(cr, math.floor(px) + 0.5, top)
    C.cairo_line_to(cr, math.floor(px) + 0.5, bottom)
    C.cairo_stroke(cr)
    C.cairo_set_source_rgb(cr, 0.25, 0.25, 0.25)
    text(C, cr, M.tick_label(v, sx), px, bottom + 6, 0.5, 0, 10)
  end
  for _, v in ipairs(sy.ticks) do
    local py = my(v)
    C.cairo_set_source_rgb(cr, 0.9, 0.9, 0.9)
    C.cairo_move_to(cr, left, math.floor(py) + 0.5)
    C.cairo_line_to(cr, right, math.floor(py) + 0.5)
    C.cairo_stroke(cr)
    C.cairo_set_source_rgb(cr, 0.25, 0.25, 0.25)
    text(C, cr, M.tick_label(v, sy), left - 6, py, 1, 0.5, 10)
  end
  -- the series, clipped to the frame
  C.cairo_save(cr)
  C.cairo_rectangle(cr, left, top, right - left, bottom - top)
  C.cairo_clip(cr)
  local y0 = my(plot.ylog and sy.lo or math.max(sy.lo, math.min(0, sy.hi))) or bottom
  for i, s in ipairs(plot.series) do
    draw_series(C, cr, s, s.color or M.palette[(i - 1) % #M.palette + 1], mx, my, y0)
  end
  C.cairo_restore(cr)
  -- frame, labels, title, legend
  C.cairo_set_source_rgb(cr, 0.3, 0.3, 0.3)
  C.cairo_set_line_width(cr, 1)
  C.cairo_rectangle(cr, left + 0.5, top + 0.5, right - left - 1, bottom - top - 1)
  C.cairo_stroke(cr)
  C.cairo_set_source_rgb(cr, 0.1, 0.1, 0.1)
  if plot.title then text(C, cr, plot.title, (left + right) / 2, y + 10, 0.5, 0, 14, true) end
  if plot.xlabel then text(C, cr, plot.xlabel, (left + right) / 2, bottom + 24, 0.5, 0, 12) end
  if plot.ylabel then
    C.cairo_save(cr)
    C.cairo_translate(cr, x + 14, (top + bottom) / 2)
    C.cairo_rotate(cr, -math.pi / 2)
    text(C, cr, plot.ylabel, 0, 0, 0.5, 0.5, 12)
    C.cairo_restore(cr)
  end
  draw_legend(C, cr, plot, { left = left, right = right, top = top, bottom = bottom }, mx, my)
  cairo.check(cr, 'ember.plot')
end

return M
