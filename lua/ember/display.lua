-- ember.display: values as a notebook shows them, and pictures.
--
--   display.display(v, ...)     shows values: in a notebook (`ember kernel`) as display_data
--                               messages; elsewhere printed as the REPL prints them
--   display.image(t [, opts])   a 2-d [H, W], 3-d [C, H, W] (or [H, W, C], C = 1, 3, 4) or 4-d
--                               [N, C, H, W] (a grid) uint8 or float tensor as a PNG: shown in a
--                               notebook; written to opts.file when given (from a script, with
--                               no notebook and no file, to a temporary file whose name is printed)
--                               opts: file, min, max (the float range mapped to 0..255;
--                               default 0..1), normalize (min..max of the tensor), zoom (pixels
--                               per element; default: small images grow to about 128 pixels),
--                               pad (pixels between grid cells, 2), nrow (grid columns)
--   display.png(t [, opts])     the PNG bytes of display.image
--   display.html(text)          raw HTML, shown in a notebook
--   display.bundle(...)         the mime bundle of values ({['text/plain'] = ..., ['text/html'] = ...}):
--                               tensors, nn modules and tables also as HTML tables, shortened as the
--                               printed form is; values with a __display metamethod (plots,
--                               images) give their own bundle
--   display.publisher           set by the kernel while a cell runs: function(bundle, metadata)
local repl = require 'ember.repl'

local M = {}
M.publisher = nil

local EDGE, THRESHOLD = 3, 1000            -- as ember.tensor.print: corners of big tensors
local MAX_ROWS = 50                        -- rows of a table's HTML

local function ember_lib() return package.loaded.ember end

local function is_tensor(v)
  local e = ember_lib()
  return type(v) == 'cdata' and e ~= nil and e.is_tensor(v)
end

local function escape(s)
  return (tostring(s):gsub('[&<>"]', { ['&'] = '&amp;', ['<'] = '&lt;', ['>'] = '&gt;', ['"'] = '&quot;' }))
end
M.escape = escape

-- ------------------------------------------------------------------ tensors as HTML

-- The indices of one dim that are shown: all, or EDGE at each end with a gap (false) between.
local function shown(size, cut)
  local out = {}
  if cut and size > 2 * EDGE then
    for i = 1, EDGE do out[#out + 1] = i end
    out[#out + 1] = false
    for i = size - EDGE + 1, size do out[#out + 1] = i end
  else
    for i = 1, size do out[#out + 1] = i end
  end
  return out
end

local function value_formatter(t, values)
  local e = ember_lib()
  local dtype = t.dtype
  if dtype == 'bool' then return function(v) return v ~= 0 and 'true' or 'false' end end
  if e.C.em_dtype_is_floating(e.C.em_tensor_dtype(t)) == 0 then return function(v) return string.format('%d', v) end end
  local lo, hi = math.huge, 0
  for _, v in ipairs(values) do
    local a = math.abs(v)
    if a ~= 0 and a < math.huge then lo, hi = math.min(lo, a), math.max(hi, a) end
  end
  local fmt = (hi > 0 and (hi / lo > 1000 or hi > 1e8 or lo < 1e-4)) and '%.4e' or '%.4f'
  return function(v)
    if v ~= v then return 'nan' end
    if v == math.huge then return 'inf' elseif v == -math.huge then return '-inf' end
    return string.format(fmt, v)
  end
end

-- Reads t[idx] (idx 1-based, a Lua table) as a double.
local function reader(t)
  local e = ember_lib()
  local ffi = require 'ffi'
  local idx, val = ffi.new('int64_t[8]'), ffi.new('double[1]')
  return function(pos)
    for d = 1, #pos do idx[d - 1] = pos[d] - 1 end
    if e.C.em_tensor_get(t, idx, val) ~= 0 then return 0 / 0 end
    return val[0]
  end
end

local function tensor_caption(t)
  return string.format('tensor %s [%s] %s', t.dtype, table.concat(t.shape, ', '), t.device)
end

-- One 2-d slice (the last two dims at the leading positions `lead`) as a <table>.
local function slice_table(t, lead, rows, cols, read, fmt)
  local out = { '<table class="ember-tensor">' }
  local head = { '<tr><th></th>' }
  for _, j in ipairs(cols) do head[#head + 1] = '<th>' .. (j and j or '&hellip;') .. '</th>' end
  out[#out + 1] = table.concat(head) .. '</tr>'
  for _, i in ipairs(rows) do
    local row = { '<tr><th>' .. (i and i or '&vellip;') .. '</th>' }
    for _, j in ipairs(cols) do
      local cell
      if not i then cell = j and '&vellip;' or '&dtdot;'
      elseif not j then cell = '&hellip;'
      else
        local pos = { unpack(lead) }
        if #t.shape >= 2 then pos[#pos + 1] = i end
        pos[#pos + 1] = j
        cell = escape(fmt(read(pos)))
      end
      row[#row + 1] = '<td>' .. cell .. '</td>'
    end
    out[#out + 1] = table.concat(row) .. '</tr>'
  end
  out[#out + 1] = '</table>'
  return table.concat(out, '\n')
end

function M.tensor_html(t)
  if t.device ~= 'cpu' then t = t:to('cpu') end
  local shape = t.shape
  local nd = #shape
  local numel = 1
  for _, s in ipairs(shape) do numel = numel * s end
  local caption = '<div class="ember-caption"><code>' .. escape(tensor_caption(t)) .. '</code></div>'
  if numel == 0 then return caption end
  local read = reader(t)
  if nd == 0 then
    local v = read({})
    return caption .. '<table class="ember-tensor"><tr><td>' .. escape(value_formatter(t, { v })(v))
      .. '</td></tr></table>'
  end
  local cut = numel > THRESHOLD
  local rows = nd >= 2 and shown(shape[nd - 1], cut) or { 1 }
  local cols = shown(shape[nd], cut)
  -- leading positions: each shown combination of the dims before the last two
  local leads = { {} }
  for d = 1, nd - 2 do
    local next_leads = {}
    for _, l in ipairs(leads) do
      for _, i in ipairs(shown(shape[d], cut)) do
        if i then next_leads[#next_leads + 1] = { unpack(l) }; next_leads[#next_leads][d] = i
        elseif #next_leads > 0 and next_leads[#next_leads] ~= false then next_leads[#next_leads + 1] = false end
      end
    end
    leads = next_leads
  end
  -- one format for every shown value, as the printed form has
  local values = {}
  for _, l in ipairs(leads) do
    if l then
      for _, i in ipairs(rows) do
        for _, j in ipairs(cols) do
          if i and j then
            local pos = { unpack(l) }
            if nd >= 2 then pos[#pos + 1] = i end
            pos[#pos + 1] = j
            values[#values + 1] = read(pos)
          end
        end
      end
    end
  end
  local fmt = value_formatter(t, values)
  local parts = { caption }
  for _, l in ipairs(leads) do
    if not l then
      parts[#parts + 1] = '<div>&vellip;</div>'
    else
      if nd > 2 then
        local label = {}
        for d = 1, nd - 2 do label[d] = tostring(l[d]) end
        parts[#parts + 1] = '<div><code>[' .. table.concat(label, ', ') .. ', :, :]</code></div>'
      end
      parts[#parts + 1] = slice_table(t, l, rows, cols, read, fmt)
    end
  end
  return table.concat(parts, '\n')
end

-- ------------------------------------------------------------------ modules and tables

local function is_module(v)
  return type(v) == 'table' and type(v.named_parameters) == 'function' and type(v.forward) == 'function'
    and rawget(v, '__name') == nil
end

function M.module_html(m)
  local rows, total = {}, 0
  local ok = pcall(function()   -- in registration order, as the module prints them
    for _, pair in ipairs(m:named_parameters()) do rows[#rows + 1] = { name = pair[1], p = pair[2] } end
  end)
  if not ok then rows = {} end
  local out = { '<pre>' .. escape(tostring(m)) .. '</pre>', '<table class="ember-module">',
    '<tr><th>parameter</th><th>shape</th><th>dtype</th><th>elements</th></tr>' }
  for _, r in ipairs(rows) do
    local n = 1
    for _, size in ipairs(r.p.shape) do n = n * size end
    total = total + n
    out[#out + 1] = string.format('<tr><td><code>%s</code></td><td>[%s]</td><td>%s</td><td>%d</td></tr>',
      escape(r.name), table.concat(r.p.shape, ', '), escape(r.p.dtype), n)
  end
  out[#out + 1] = string.format('<tr><th colspan="3">total</th><th>%d</th></tr></table>', total)
  return table.concat(out, '\n')
end

local function cell_text(v)
  if type(v) == 'string' then return v end
  return repl.format(v):gsub('\n%s*', ' ')
end

-- A list of records ({{a=1, b=2}, ...}) as columns; anything else as key | value rows.
function M.table_html(t)
  local n = #t
  local records = n > 0
  local columns, seen = {}, {}
  for i = 1, math.min(n, MAX_ROWS) do
    local r = t[i]
    if type(r) ~= 'table' or is_module(r) or getmetatable(r) then records = false; break end
    for k in pairs(r) do
      if not seen[k] then seen[k] = true; columns[#columns + 1] = k end
    end
  end
  local out = { '<table class="ember-table">' }
  if records and #columns > 0 then
    table.sort(columns, function(a, b) return tostring(a) < tostring(b) end)
    local head = { '<tr><th></th>' }
    for _, c in ipairs(columns) do head[#head + 1] = '<th>' .. escape(c) .. '</th>' end
    out[#out + 1] = table.concat(head) .. '</tr>'
    for i = 1, math.min(n, MAX_ROWS) do
      local row = { '<tr><th>' .. i .. '</th>' }
      for _, c in ipairs(columns) do
        local v = t[i][c]
        row[#row + 1] = '<td>' .. (v == nil and '' or escape(cell_text(v))) .. '</td>'
      end
      out[#out + 1] = table.concat(row) .. '</tr>'
    end
    if n > MAX_ROWS then out[#out + 1] = string.format('<tr><td colspan="%d">... (%d more)</td></tr>', #columns + 1,
      n - MAX_ROWS) end
  else
    local keys = {}
    for k in pairs(t) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b)
      if type(a) == type(b) and (type(a) == 'number' or type(a) == 'string') then return a < b end
      return type(a) < type(b)
    end)
    out[#out + 1] = '<tr><th>key</th><th>value</th></tr>'
    for i = 1, math.min(#keys, MAX_ROWS) do
      local k = keys[i]
      out[#out + 1] = '<tr><td>' .. escape(cell_text(k)) .. '</td><td>' .. escape(cell_text(t[k])) .. '</td></tr>'
    end
    if #keys > MAX_ROWS then out[#out + 1] = string.format('<tr><td colspan="2">... (%d more)</td></tr>',
      #keys - MAX_ROWS) end
  end
  out[#out + 1] = '</table>'
  return table.concat(out, '\n')
end

-- ------------------------------------------------------------------ bundles

local function own_display(v)
  local mt = getmetatable(v)
  if type(mt) == 'table' and type(mt.__display) == 'function' then return mt.__display end
  return nil
end

-- The mime bundle of the values (the result of a cell, or what display() shows).
function M.bundle(...)
  local n = select('#', ...)
  local v = ...
  if n == 1 then
    local f = own_display(v)
    if f then return f(v) end
  end
  local bundle = { ['text/plain'] = repl.format(...) }
  if n ~= 1 then return bundle end
  local ok, html = pcall(function()
    if is_tensor(v) then return M.tensor_html(v) end
    if is_module(v) then return M.module_html(v) end
    if type(v) == 'table' and not getmetatable(v) and next(v) ~= nil then return M.table_html(v) end
    return nil
  end)
  if ok and html then bundle['text/html'] = html end
  return bundle
end

-- Shows one bundle: through the kernel, else its text on stdout. Returns true when shown.
local function publish(bundle, metadata)
  if M.publisher then
    M.publisher(bundle, metadata or {})
    return true
  end
  return false
end

function M.display(...)
  for i = 1, select('#', ...) do
    local v = select(i, ...)
    if not publish(M.bundle(v)) then print(repl.format(v)) end
  end
end

function M.html(text)
  if type(text) ~= 'string' then error('display.html: expected HTML text (a string), got a ' .. type(text), 2) end
  if not publish({ ['text/html'] = text, ['text/plain'] = '<HTML>' }) then print(text) end
end

-- ------------------------------------------------------------------ images

function M.png(t, opts)
  return require('ember.plot.image').png(t, opts)
end

-- Shows or writes PNG bytes (also for plots): the notebook, opts.file, or a temporary file.
function M.show_png(png, opts, what)
  local message = require 'ember.kernel.message'
  if opts and opts.file then
    local f, err = io.open(opts.file, 'wb')
    if not f then error(string.format("%s: cannot write '%s': %s", what, opts.file, err), 3) end
    f:write(png)
    f:close()
  end
  if publish({ ['image/png'] = message.base64(png), ['text/plain'] = '<' .. what .. '>' }) then return end
  if not (opts and opts.file) then
    local path = os.tmpname() .. '.png'
    local f = assert(io.open(path, 'wb'))
    f:write(png)
    f:close()
    print(string.format('%s: no notebook to show it in: written to %s', what, path))
  end
end

function M.image(t, opts)
  M.show_png(M.png(t, opts), opts, 'image')
end

return M
