-- ember.tensorboard: TensorBoard event files, written by scripts and by train pipelines.
--
--   local tb = ember.tensorboard
--   local w = tb.SummaryWriter('runs/exp1')            -- or {logdir =, flush_secs = 10}
--   w:add_scalar('loss/train', loss:item(), step)
--   w:add_histogram('weights/fc1', model.fc1.weight, step)   -- optional {bins = 30}
--   w:flush()                                           -- now readable by tensorboard
--   w:close()
--
-- `tensorboard --logdir runs` shows them. The file (logdir/events.out.tfevents.<time>.<host>.
-- <pid>.<n>) is a TFRecord file of Event protocol buffers, as TensorFlow and PyTorch write
-- them: each record is [length u64][masked CRC-32C of the length u32][data][masked CRC-32C
-- of the data u32] (little-endian); the first event holds file_version "brain.Event:2",
-- the others wall_time (seconds since 1970), step and a Summary with one Value: a tag and
-- a simple_value (float), or a histogram. The protobuf encoding is written out here (a few
-- fields of event.proto and summary.proto); the CRC is libember's (em_data_crc32c).
local ffi = require 'ffi'
local libc = require 'ember.util.libc'

local M = {}
local I  -- ember.internal, loaded with ember

local function throw(msg)
  I = I or require 'ember.internal'
  I.throw(msg)
end

-- ---------------------------------------------------------------- protobuf encoding
local function varint(n)
  local bytes = {}
  repeat
    local b = n % 128
    n = math.floor(n / 128)
    bytes[#bytes + 1] = string.char(n > 0 and b + 128 or b)
  until n == 0
  return table.concat(bytes)
end

local dbuf, fbuf = ffi.new('double[1]'), ffi.new('float[1]')
local function f64(v) dbuf[0] = v; return ffi.string(dbuf, 8) end   -- little-endian hosts (x86-64, arm64)
local function f32(v) fbuf[0] = v; return ffi.string(fbuf, 4) end

-- field(number, wire type, payload)
local function key(field, wire) return varint(field * 8 + wire) end
local function len_field(field, bytes) return key(field, 2) .. varint(#bytes) .. bytes end
local function double_field(field, v) return key(field, 1) .. f64(v) end

local function event(wall_time, step, body)
  local parts = { double_field(1, wall_time) }
  if step and step ~= 0 then parts[#parts + 1] = key(2, 0) .. varint(step) end
  parts[#parts + 1] = body
  return table.concat(parts)
end

-- ---------------------------------------------------------------- TFRecord framing
local u64buf, u32buf = ffi.new('uint64_t[1]'), ffi.new('uint32_t[1]')
local function masked_crc(bytes, n)
  local C = require('ember').C
  return C.em_data_tfrecord_mask(C.em_data_crc32c(bytes, n, 0))
end
local function record(data)
  u64buf[0] = #data
  local len = ffi.string(u64buf, 8)
  u32buf[0] = masked_crc(len, 8)
  local len_crc = ffi.string(u32buf, 4)
  u32buf[0] = masked_crc(data, #data)
  return len .. len_crc .. data .. ffi.string(u32buf, 4)
end
M._record, M._varint = record, varint   -- for tests

-- ---------------------------------------------------------------- the writer
local Writer = {}
Writer.__index = Writer
local counter = 0

-- SummaryWriter(logdir | {logdir =, flush_secs = 10, filename_suffix = ''})
function M.SummaryWriter(opts)
  if type(opts) == 'string' then opts = { logdir = opts } end
  if type(opts) ~= 'table' or type(opts.logdir) ~= 'string' or opts.logdir == '' then
    throw('SummaryWriter: expected a log directory (a string) or {logdir =, flush_secs =}, got ' .. tostring(opts))
  end
  for k in pairs(opts) do
    if k ~= 'logdir' and k ~= 'flush_secs' and k ~= 'filename_suffix' then
      throw(string.format("SummaryWriter: unknown option '%s' (expected logdir, flush_secs, filename_suffix)",
        tostring(k)))
    end
  end
  local flush_secs = opts.flush_secs or 10
  if type(flush_secs) ~= 'number' or flush_secs < 0 then
    throw('SummaryWriter: flush_secs must be a number >= 0, got ' .. tostring(flush_secs))
  end
  libc.mkdirs(opts.logdir)
  counter = counter + 1
  local now = libc.time()
  local C = require('ember').C
  local path = string.format('%s/events.out.tfevents.%d.%s.%d.%d%s', opts.logdir, math.floor(now),
    libc.hostname() or 'localhost', tonumber(C.em_process_self()), counter, opts.filename_suffix or '')
  local f, err = io.open(path, 'wb')
  if not f then throw(string.format("SummaryWriter: cannot create '%s': %s", path, tostring(err))) end
  local self = setmetatable({ logdir = opts.logdir, path = path, file = f, flush_secs = flush_secs,
    last_flush = libc.now() }, Writer)
  f:write(record(event(now, 0, len_field(3, 'brain.Event:2'))))
  f:flush()
  return self
end

function Writer:_write(data)
  if not self.file then throw('SummaryWriter: the writer is closed (' .. self.path .. ')') end
  self.file:write(record(data))
  if libc.now() - self.last_flush >= self.flush_secs then self:flush() end
end

local function need_tag(op, tag)
  if type(tag) ~= 'string' or tag == '' then
    throw(op .. ': expected a tag (a non-empty string), got ' .. tostring(tag))
  end
end

local function need_step(op, step)
  if step == nil then return 0 end
  if type(step) ~= 'number' or step < 0 or step ~= math.floor(step) or step >= 2 ^ 53 then
    throw(op .. ': step must be an integer >= 0, got ' .. tostring(step))
  end
  return step
end

local function number_of(op, v)
  if type(v) == 'number' then return v end
  if type(v) == 'boolean' then return v and 1 or 0 end
  local ember = require 'ember'
  if ember.is_tensor(v) and v:numel() == 1 then return v:item() end
  throw(op .. ': expected a number (or a one-element tensor), got ' .. (ember.is_tensor(v) and
    ('a tensor of ' .. v:numel() .. ' elements') or type(v)))
end

-- add_scalar(tag, value, step [, wall_time]): value a number or a one-element tensor.
function Writer:add_scalar(tag, value, step, wall_time)
  need_tag('add_scalar', tag)
  value = number_of('add_scalar', value)
  step = need_step('add_scalar', step)
  local v = len_field(1, tag) .. key(2, 5) .. f32(value)
  self:_write(event(wall_time or libc.time(), step, len_field(5, len_field(1, v))))
end

-- add_histogram(tag, values, step [, {bins = 30}]): values a tensor or a list of numbers;
-- equal-width buckets between the smallest and the largest value.
function Writer:add_histogram(tag, values, step, opts)
  need_tag('add_histogram', tag)
  step = need_step('add_histogram', step)
  local ember = require 'ember'
  local list
  if ember.is_tensor(values) then
    list = values:detach():reshape(values:numel()):to('float64'):cpu():totable()
  elseif type(values) == 'table' then
    list = values
  else
    throw('add_histogram: expected a tensor or a list of numbers, got ' .. type(values))
  end
  if #list == 0 then throw('add_histogram: no values') end
  local bins = opts and opts.bins or 30
  if type(bins) ~= 'number' or bins < 1 or bins ~= math.floor(bins) then
    throw('add_histogram: bins must be an integer >= 1, got ' .. tostring(bins))
  end
  local lo, hi, sum, sq = math.huge, -math.huge, 0, 0
  for _, x in ipairs(list) do
    if type(x) ~= 'number' then throw('add_histogram: expected numbers, got a ' .. type(x)) end
    lo, hi = math.min(lo, x), math.max(hi, x)
    sum, sq = sum + x, sq + x * x
  end
  local counts = {}
  for b = 1, bins do counts[b] = 0 end
  local width = (hi - lo) / bins
  for _, x in ipairs(list) do
    local b = width > 0 and math.floor((x - lo) / width) + 1 or bins
    if b > bins then b = bins end
    counts[b] = counts[b] + 1
  end
  local limits, buckets = {}, {}
  for b = 1, bins do
    limits[b] = f64(b == bins and hi or lo + b * width)
    buckets[b] = f64(counts[b])
  end
  local histo = table.concat { double_field(1, lo), double_field(2, hi), double_field(3, #list),
    double_field(4, sum), double_field(5, sq), len_field(6, table.concat(limits)), len_field(7, table.concat(buckets)) }
  local v = len_field(1, tag) .. len_field(5, histo)
  self:_write(event(libc.time(), step, len_field(5, len_field(1, v))))
end

-- Makes everything added so far readable.
function Writer:flush()
  if self.file then
    self.file:flush()
    self.last_flush = libc.now()
  end
end

function Writer:close()
  if self.file then
    self.file:close()
    self.file = nil
  end
end

return M
