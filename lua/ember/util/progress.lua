-- ember.util.progress: what a running job shows, and the process facts it reports.
--
--   local progress = require 'ember.util.progress'
--   local p = progress.new{mode = 'auto', label = 'epoch 3/10', total = 60000}
--   p:update(done, {loss = 0.41})    -- a bar redrawn at most 10 times a second on a terminal
--   p:finish('epoch 3/10 ...')       -- clears the bar, prints the summary line
--
-- mode: 'auto' (a bar when stderr is a terminal, else plain lines), 'bar', 'lines' (one
-- line per epoch and one every `interval` seconds, default 30), 'none'. Everything goes to
-- stderr: stdout carries only the job's final JSON line.
local libc = require 'ember.util.libc'

local M = {}

-- Seconds on the monotonic clock.
M.now = libc.now

function M.stderr_is_terminal() return libc.isatty(2) end

-- Peak resident set size of this process in MiB (VmHWM), nil where /proc is absent.
function M.peak_rss_mb()
  local f = io.open('/proc/self/status', 'r')
  if not f then return nil end
  local text = f:read('*a')
  f:close()
  local kb = text:match('VmHWM:%s*(%d+)%s*kB')
  return kb and tonumber(kb) / 1024 or nil
end

local function clock_text(s)
  if s ~= s or s == math.huge or s < 0 then return '--:--' end
  s = math.floor(s + 0.5)
  if s >= 3600 then return string.format('%d:%02d:%02d', s / 3600, s % 3600 / 60, s % 60) end
  return string.format('%d:%02d', s / 60, s % 60)
end
M.clock_text = clock_text

local Bar = {}
Bar.__index = Bar

-- new{mode =, label =, total =, stream = io.stderr, interval = 30, width = 30}
function M.new(o)
  local mode = o.mode or 'auto'
  if mode == 'auto' then mode = M.stderr_is_terminal() and 'bar' or 'lines' end
  local now = M.now()
  return setmetatable({ mode = mode, label = o.label or '', total = o.total or 0, stream = o.stream or io.stderr,
    interval = o.interval or 30, width = o.width or 30, start = now, last_draw = 0, last_line = now,
    done = 0 }, Bar)
end

local function stats_text(stats)
  if not stats then return '' end
  local parts = {}
  for _, k in ipairs(stats._order or {}) do
    local v = stats[k]
    if v ~= nil then parts[#parts + 1] = string.format(type(v) == 'number' and '%s %.4f' or '%s %s', k, v) end
  end
  return table.concat(parts, '  ')
end

-- done: samples processed so far in this epoch; stats: {loss = x, _order = {'loss'}}.
function Bar:update(done, stats)
  self.done = done
  local now = M.now()
  if self.mode == 'bar' then
    if now - self.last_draw < 0.1 and done < self.total then return end
    self.last_draw = now
    local elapsed = now - self.start
    local rate = elapsed > 0 and done / elapsed or 0
    local frac = self.total > 0 and math.min(done / self.total, 1) or 0
    local filled = math.floor(frac * self.width)
    local bar = string.rep('=', filled) .. (filled < self.width and '>' or '') ..
      string.rep(' ', math.max(self.width - filled - 1, 0))
    local eta = rate > 0 and (self.total - done) / rate or math.huge
    self.stream:write(string.format('\r%s [%s] %d/%d  %.0f samples/s  %s  ETA %s\27[K', self.label, bar, done,
      self.total, rate, stats_text(stats), clock_text(eta)))
    self.stream:flush()
  elseif self.mode == 'lines' and now - self.last_line >= self.interval then
    self.last_line = now
    local elapsed = now - self.start
    self.stream:write(string.format('%s %d/%d  %.0f samples/s  %s\n', self.label, done, self.total,
      elapsed > 0 and done / elapsed or 0, stats_text(stats)))
    self.stream:flush()
  end
end

-- Ends the bar (cleared) and prints the summary line (unless mode is 'none').
function Bar:finish(line)
  if self.mode == 'bar' then self.stream:write('\r\27[K') end
  if self.mode ~= 'none' and line then self.stream:write(line, '\n') end
  self.stream:flush()
end

return M
