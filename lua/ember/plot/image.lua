-- ember.plot.image: a tensor as a PNG picture (ember.display.image and display.png).
--   png(t, opts) -> bytes, width, height
-- Layouts: [H, W] (grey), [C, H, W] or [H, W, C] with C = 1 (grey), 3 (RGB), 4 (RGBA) (when
-- both ends could be C, channels first, as Torch's images are), and
-- [N, C, H, W] (a batch, drawn as a grid). uint8 and integer values are levels 0..255;
-- floating values map opts.min..opts.max (default 0..1, or the tensor's own range with
-- normalize = true) to 0..255; out-of-range values are clamped, NaN is black.
local ffi = require 'ffi'
local cairo = require 'ember.plot.cairo'

local M = {}

local function fail(msg) error('display.image: ' .. msg, 4) end

-- The tensor as {n, c, h, w} and a function reading element (n, c, y, x), all 0-based.
local function layout(t)
  local shape = t.shape
  local nd = #shape
  local n, c, h, w, order
  if nd == 2 then
    n, c, h, w, order = 1, 1, shape[1], shape[2], 'chw'
  elseif nd == 3 then
    local first_is_c = shape[1] == 1 or shape[1] == 3 or shape[1] == 4
    local last_is_c = shape[3] == 1 or shape[3] == 3 or shape[3] == 4
    if first_is_c then
      n, c, h, w, order = 1, shape[1], shape[2], shape[3], 'chw'
    elseif last_is_c then
      n, c, h, w, order = 1, shape[3], shape[1], shape[2], 'hwc'
    else
      fail(string.format('a 3-d tensor needs 1, 3 or 4 channels first or last, got shape [%s]',
        table.concat(shape, ', ')))
    end
  elseif nd == 4 then
    if not (shape[2] == 1 or shape[2] == 3 or shape[2] == 4) then
      fail(string.format('a 4-d tensor is a batch [N, C, H, W] with C = 1, 3 or 4, got shape [%s]',
        table.concat(shape, ', ')))
    end
    n, c, h, w, order = shape[1], shape[2], shape[3], shape[4], 'chw'
  else
    fail(string.format('expected a 2-d, 3-d or 4-d tensor, got %d-d (shape [%s])', nd, table.concat(shape, ', ')))
  end
  if n * c * h * w == 0 then fail(string.format('the tensor is empty (shape [%s])', table.concat(shape, ', '))) end
  local flat = t:to('cpu'):to('float64'):contiguous()
  local p = ffi.cast('const double *', flat:data_ptr())
  local read
  if order == 'chw' then
    read = function(i, ch, y, x) return p[((i * c + ch) * h + y) * w + x] end
  else
    read = function(_, ch, y, x) return p[(y * w + x) * c + ch] end
  end
  return { n = n, c = c, h = h, w = w, read = read, keep = flat }
end

local function value_range(t, L, opts)
  local ember = require 'ember'
  local floating = ember.C.em_dtype_is_floating(ember.C.em_tensor_dtype(t)) ~= 0
  if not floating then return 0, 255 end
  if opts.normalize then
    local lo, hi = math.huge, -math.huge
    for i = 0, L.n - 1 do
      for ch = 0, L.c - 1 do
        for y = 0, L.h - 1 do
          for x = 0, L.w - 1 do
            local v = L.read(i, ch, y, x)
            if v == v and v > -math.huge and v < math.huge then
              if v < lo then lo = v end
              if v > hi then hi = v end
            end
          end
        end
      end
    end
    if lo > hi then return 0, 1 end
    return lo, hi > lo and hi or lo + 1
  end
  local lo, hi = opts.min or 0, opts.max or 1
  if not (type(lo) == 'number' and type(hi) == 'number' and hi > lo) then
    fail(string.format('expected min < max (numbers), got min = %s, max = %s', tostring(lo), tostring(hi)))
  end
  return lo, hi
end

function M.png(t, opts)
  local ember = require 'ember'
  if not ember.is_tensor(t) then fail('expected a tensor, got a ' .. type(t)) end
  opts = opts or {}
  if type(opts) ~= 'table' then fail('expected an options table, got a ' .. type(opts)) end
  local L = layout(t)
  local lo, hi = value_range(t, L, opts)
  local scale = 255 / (hi - lo)
  local pad = opts.pad or 2
  local cols = opts.nrow or math.ceil(math.sqrt(L.n))
  if type(cols) ~= 'number' or cols < 1 or cols % 1 ~= 0 then fail('nrow: expected a whole number >= 1') end
  local rows = math.ceil(L.n / cols)
  local W = L.n == 1 and L.w or cols * L.w + (cols - 1) * pad
  local H = L.n == 1 and L.h or rows * L.h + (rows - 1) * pad
  if W > 32767 or H > 32767 then fail(string.format('the picture would be %d x %d pixels (cairo draws at most 32767)',
    W, H)) end

  local C = cairo.lib()
  local stride = C.cairo_format_stride_for_width(cairo.FORMAT_ARGB32, W)
  local pixels = ffi.new('uint8_t[?]', stride * H)          -- zero: transparent between grid cells
  local row32 = stride / 4
  local px = ffi.cast('uint32_t *', pixels)
  local function level(v)
    v = (v - lo) * scale
    if not (v > 0) then return 0 end
    if v > 255 then return 255 end
    return math.floor(v + 0.5)
  end
  for i = 0, L.n - 1 do
    local ox, oy = (i % cols) * (L.w + pad), math.floor(i / cols) * (L.h + pad)
    for y = 0, L.h - 1 do
      for x = 0, L.w - 1 do
        local r = level(L.read(i, 0, y, x))
        local g, b, a = r, r, 255
        if L.c >= 3 then g, b = level(L.read(i, 1, y, x)), level(L.read(i, 2, y, x)) end
        if L.c == 4 then   -- cairo wants premultiplied alpha
          a = level(L.read(i, 3, y, x))
          r, g, b = math.floor(r * a / 255 + 0.5), math.floor(g * a / 255 + 0.5), math.floor(b * a / 255 + 0.5)
        end
        px[(oy + y) * row32 + ox + x] = a * 16777216 + r * 65536 + g * 256 + b
      end
    end
  end

  local zoom = opts.zoom or math.max(1, math.floor(128 / math.max(W, H)))
  if type(zoom) ~= 'number' or zoom <= 0 then fail('zoom: expected a number > 0, got ' .. tostring(zoom)) end
  local ow, oh = math.max(1, math.floor(W * zoom + 0.5)), math.max(1, math.floor(H * zoom + 0.5))
  local bytes = cairo.render('png', ow, oh, function(cr)
    local src = C.cairo_image_surface_create_for_data(pixels, cairo.FORMAT_ARGB32, W, H, stride)
    C.cairo_scale(cr, ow / W, oh / H)
    C.cairo_set_source_surface(cr, src, 0, 0)
    C.cairo_pattern_set_filter(C.cairo_get_source(cr), cairo.FILTER_NEAREST)
    C.cairo_paint(cr)
    C.cairo_surface_destroy(src)
    cairo.check(cr, 'display.image')
  end)
  return bytes, ow, oh
end

return M
