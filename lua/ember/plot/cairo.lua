-- ember.plot.cairo: the part of cairo (Debian's libcairo2) that ember's pictures use,
-- through LuaJIT's FFI, plus two helpers:
--   cairo.render(kind, width, height, draw)  runs draw(cr) on a PNG ('png') or SVG ('svg')
--                                            surface and returns the file's bytes
--   cairo.check(cr, what)                    raises cairo's error, naming what was drawn
-- Surfaces are written through a temporary file (cairo's own writers): no callbacks from C
-- into Lua, which LuaJIT's compiled code does not like.
local ffi = require 'ffi'

pcall(ffi.cdef, [[
typedef struct _cairo cairo_t;
typedef struct _cairo_surface cairo_surface_t;
typedef struct _cairo_pattern cairo_pattern_t;
typedef struct { double x_bearing, y_bearing, width, height, x_advance, y_advance; } cairo_text_extents_t;
cairo_surface_t *cairo_image_surface_create(int format, int width, int height);
cairo_surface_t *cairo_image_surface_create_for_data(unsigned char *data, int format, int width, int height,
                                                     int stride);
int cairo_format_stride_for_width(int format, int width);
cairo_surface_t *cairo_image_surface_create_from_png(const char *filename);
unsigned char *cairo_image_surface_get_data(cairo_surface_t *surface);
int cairo_image_surface_get_width(cairo_surface_t *surface);
int cairo_image_surface_get_height(cairo_surface_t *surface);
int cairo_image_surface_get_stride(cairo_surface_t *surface);
cairo_surface_t *cairo_svg_surface_create(const char *filename, double width, double height);
int cairo_surface_write_to_png(cairo_surface_t *surface, const char *filename);
void cairo_surface_flush(cairo_surface_t *surface);
void cairo_surface_mark_dirty(cairo_surface_t *surface);
void cairo_surface_finish(cairo_surface_t *surface);
void cairo_surface_destroy(cairo_surface_t *surface);
int cairo_surface_status(cairo_surface_t *surface);
cairo_t *cairo_create(cairo_surface_t *target);
void cairo_destroy(cairo_t *cr);
int cairo_status(cairo_t *cr);
const char *cairo_status_to_string(int status);
void cairo_save(cairo_t *cr);
void cairo_restore(cairo_t *cr);
void cairo_set_source_rgb(cairo_t *cr, double r, double g, double b);
void cairo_set_source_rgba(cairo_t *cr, double r, double g, double b, double a);
void cairo_set_source_surface(cairo_t *cr, cairo_surface_t *surface, double x, double y);
cairo_pattern_t *cairo_get_source(cairo_t *cr);
void cairo_pattern_set_filter(cairo_pattern_t *pattern, int filter);
void cairo_paint(cairo_t *cr);
void cairo_translate(cairo_t *cr, double tx, double ty);
void cairo_scale(cairo_t *cr, double sx, double sy);
void cairo_rotate(cairo_t *cr, double angle);
void cairo_set_line_width(cairo_t *cr, double width);
void cairo_set_line_cap(cairo_t *cr, int cap);
void cairo_set_line_join(cairo_t *cr, int join);
void cairo_set_dash(cairo_t *cr, const double *dashes, int n, double offset);
void cairo_new_path(cairo_t *cr);
void cairo_move_to(cairo_t *cr, double x, double y);
void cairo_line_to(cairo_t *cr, double x, double y);
void cairo_rectangle(cairo_t *cr, double x, double y, double w, double h);
void cairo_arc(cairo_t *cr, double xc, double yc, double radius, double angle1, double angle2);
void cairo_close_path(cairo_t *cr);
void cairo_stroke(cairo_t *cr);
void cairo_fill(cairo_t *cr);
void cairo_fill_preserve(cairo_t *cr);
void cairo_clip(cairo_t *cr);
void cairo_reset_clip(cairo_t *cr);
void cairo_select_font_face(cairo_t *cr, const char *family, int slant, int weight);
void cairo_set_font_size(cairo_t *cr, double size);
void cairo_text_extents(cairo_t *cr, const char *utf8, cairo_text_extents_t *extents);
void cairo_show_text(cairo_t *cr, const char *utf8);
void cairo_debug_reset_static_data(void);
void FcFini(void);
]])

local M = {
  FORMAT_ARGB32 = 0, FORMAT_RGB24 = 1,
  FILTER_NEAREST = 3,
  LINE_CAP_BUTT = 0, LINE_CAP_ROUND = 1, LINE_JOIN_ROUND = 1,
  FONT_SLANT_NORMAL = 0, FONT_WEIGHT_NORMAL = 0, FONT_WEIGHT_BOLD = 1,
}

local lib, fontconfig

-- At exit (lua_close finalizes cdata before it unloads libraries), cairo's caches and
-- fontconfig's configuration are freed: what they hold would otherwise be reported as
-- leaks by the sanitizer build, from libraries already unloaded.
local function release_caches()
  lib.cairo_debug_reset_static_data()
  if fontconfig then fontconfig.FcFini() end
end

-- The library, loaded on first use (a script that never draws never loads it).
function M.lib()
  if lib then return lib end
  for _, name in ipairs { 'libcairo.so.2', 'cairo' } do
    local ok, l = pcall(ffi.load, name)
    if ok then
      lib = l
      local fok, fc = pcall(ffi.load, 'libfontconfig.so.1')
      fontconfig = fok and fc or nil
      M.exit_sentinel = ffi.gc(ffi.new('char[1]'), release_caches)
      return lib
    end
  end
  error('ember.plot: cannot load cairo (libcairo.so.2); install it: apt-get install libcairo2', 3)
end

function M.check(cr, what)
  local C = M.lib()
  local status = C.cairo_status(cr)
  if status ~= 0 then
    error(string.format('%s: cairo failed: %s', what, ffi.string(C.cairo_status_to_string(status))), 3)
  end
end

local function read_file(path)
  local f = io.open(path, 'rb')
  if not f then return nil end
  local bytes = f:read('*a')
  f:close()
  return bytes
end

local function temp_path(ext)
  local base = os.tmpname()
  os.remove(base)
  return base .. ext
end

-- A PNG file's pixels: {width =, height =, at = function(x, y) -> r, g, b, a (0..255, x and
-- y 0-based, alpha not premultiplied)}; for checking what was drawn.
function M.read_png(path)
  local C = M.lib()
  local s = C.cairo_image_surface_create_from_png(path)
  if C.cairo_surface_status(s) ~= 0 then
    local msg = ffi.string(C.cairo_status_to_string(C.cairo_surface_status(s)))
    C.cairo_surface_destroy(s)
    error(string.format("ember.plot: cannot read the PNG '%s': %s", path, msg), 2)
  end
  C.cairo_surface_flush(s)
  local w, h = C.cairo_image_surface_get_width(s), C.cairo_image_surface_get_height(s)
  local stride = C.cairo_image_surface_get_stride(s)
  local data = C.cairo_image_surface_get_data(s)
  local copy = ffi.new('uint8_t[?]', stride * h)
  ffi.copy(copy, data, stride * h)
  C.cairo_surface_destroy(s)
  local px = ffi.cast('uint32_t *', copy)
  return { width = w, height = h, keep = copy, at = function(x, y)
    local v = px[y * (stride / 4) + x]
    local a = math.floor(v / 16777216) % 256
    local function un(c) return a > 0 and math.floor(c * 255 / a + 0.5) or 0 end
    return un(math.floor(v / 65536) % 256), un(math.floor(v / 256) % 256), un(v % 256), a
  end }
end

-- Draws into a new surface of width x height and returns the PNG or SVG bytes.
function M.render(kind, width, height, draw)
  local C = M.lib()
  local path = temp_path(kind == 'svg' and '.svg' or '.png')
  local surface = kind == 'svg' and C.cairo_svg_surface_create(path, width, height)
    or C.cairo_image_surface_create(M.FORMAT_ARGB32, width, height)
  local cr = C.cairo_create(surface)
  local ok, err = pcall(draw, cr, surface)
  local status = C.cairo_status(cr)
  C.cairo_destroy(cr)
  if ok and status == 0 and kind ~= 'svg' then status = C.cairo_surface_write_to_png(surface, path) end
  C.cairo_surface_finish(surface)
  if ok and status == 0 then status = C.cairo_surface_status(surface) end
  C.cairo_surface_destroy(surface)
  local bytes = ok and status == 0 and read_file(path) or nil
  os.remove(path)
  if not ok then error(err, 0) end
  if status ~= 0 then
    error(string.format('ember.plot: cairo could not write the %s: %s', kind, ffi.string(C.cairo_status_to_string(
      status))), 2)
  end
  return bytes
end

return M
