-- ember.cuda: GPUs, their memory, streams and events (ember/cuda.h).
--
--   if ember.cuda.is_available() then
--     local x = ember.randn(1024, 1024):cuda()       -- or :to('cuda:1'), {device = 'cuda'}
--     local s = ember.cuda.Stream()                    -- a stream of the current device
--     ember.cuda.stream(s, function() y = x:matmul(x) end)   -- queued on s
--     ember.cuda.current_stream():wait_stream(s)
--     print(ember.cuda.memory_stats().allocated)
--   end
--
-- Devices are numbered from 0, as in 'cuda:0'; in device names 'cuda' alone is cuda:0, while
-- t:cuda() and model:cuda() without a number use the current device. Every GPU op is queued on the current
-- stream of its device and returns at once; reading values back (item, tostring, totable,
-- t:cpu()) waits for them. Each thread has its own current device and, per device, its own
-- current stream: the device's legacy default stream until set_stream changes it. Streams
-- made here never wait for the default stream, nor it for them: order them with events or
-- wait_stream, as in PyTorch.
--
-- Memory comes from a caching allocator per device (runtime/cuda/caching_allocator.h):
-- freed blocks are kept for reuse by the stream that allocated them; memory_stats() shows
-- its counters, empty_cache() hands cached blocks back to the driver, set_memory_limit caps
-- what it reserves. A tensor used on another stream than its own must be announced with
-- t:record_stream(s) before it is freed.
--
-- Asynchronous copies: t:pin_memory() gives a copy of a CPU tensor in pinned memory; a copy
-- between pinned memory and a GPU with {non_blocking = true} (t:to('cuda', {non_blocking =
-- true}), dst:copy_(src, {non_blocking = true})) returns once queued. The pinned tensor must
-- then stay alive and unchanged until the stream has reached the copy (record an Event
-- after it and synchronize on it). t:to('cpu', {non_blocking = true}) from a GPU returns a
-- pinned tensor whose values are valid once the stream has reached the copy.
--
-- Without a GPU (or without the CUDA plugin) is_available() is false, device_count() 0,
-- and everything else fails with a message that says why.
local ffi = require 'ffi'
local ember = require 'ember'

local I = require 'ember.internal'
local C = I.C
local throw, check = I.throw, I.check
local check_opts, option_set = I.check_opts, I.option_set
local Tensor = ember.Tensor

local cuda = {}

-- ---------------------------------------------------------------- devices
function cuda.is_built() return C.em_cuda_is_built() ~= 0 end
function cuda.is_available() return C.em_cuda_is_available() ~= 0 end
function cuda.device_count() return tonumber(C.em_cuda_device_count()) end
-- Why no GPU can be used, or nil when one can.
function cuda.unavailable_reason()
  local why = ffi.string(C.em_cuda_unavailable_reason())
  return why ~= '' and why or nil
end

local function need_available(op)
  if C.em_cuda_is_available() == 0 then
    throw(string.format('%s: no CUDA device is available (%s)', op, ffi.string(C.em_cuda_unavailable_reason())))
  end
end

local function device_arg(op, i, n)
  if i == nil then
    need_available(op)
    return tonumber(C.em_cuda_current_device())
  end
  if type(i) == 'string' then
    local dev = I.parse_device(i, op)
    if dev.type ~= C.EM_CUDA then throw(string.format("%s: expected a CUDA device, got '%s'", op, i)) end
    return tonumber(dev.index)
  end
  if type(i) ~= 'number' or i ~= math.floor(i) or i < 0 then
    I.arg_error(op, n or 1, 'a device number (0-based) or a name such as cuda:0', i)
  end
  return i
end

function cuda.current_device()
  need_available('cuda.current_device')
  return tonumber(C.em_cuda_current_device())
end

function cuda.set_device(i)
  check(C.em_cuda_set_device(device_arg('cuda.set_device', i)))
end

-- get_device_properties([i]): name, capability ('9.0'), major, minor, total_memory,
-- free_memory (bytes, now) and multiprocessors.
function cuda.get_device_properties(i)
  local p = ffi.new('em_cuda_device_props')
  check(C.em_cuda_get_device_props(device_arg('cuda.get_device_properties', i), p))
  return {
    name = ffi.string(p.name), major = p.major, minor = p.minor,
    capability = string.format('%d.%d', p.major, p.minor),
    total_memory = tonumber(p.total_memory), free_memory = tonumber(p.free_memory),
    multiprocessors = p.multiprocessors,
  }
end
function cuda.get_device_name(i) return cuda.get_device_properties(i).name end

-- versions(): {driver = '13.0', runtime = '13.0', cublas = '13.1.0', cudnn = '9.19.0',
-- nccl = '2.28.9'}; a field is nil when unknown (no driver, library not linked). Works
-- without a GPU; {} without the CUDA plugin.
local function cuda_version(v) return v > 0 and string.format('%d.%d', math.floor(v / 1000), (v % 1000) / 10) or nil end
local function lib_version(v)
  return v > 0 and string.format('%d.%d.%d', math.floor(v / 10000), math.floor(v / 100) % 100, v % 100) or nil
end
function cuda.versions()
  local v = ffi.new('em_cuda_versions')
  if C.em_cuda_get_versions(v) ~= 0 then return {} end
  return { driver = cuda_version(v.driver), runtime = cuda_version(v.runtime), cublas = lib_version(v.cublas),
    cudnn = lib_version(v.cudnn), nccl = lib_version(v.nccl) }
end

-- synchronize([i]): waits for all work queued on device i (default: the current one).
function cuda.synchronize(i)
  check(C.em_cuda_synchronize(i == nil and -1 or device_arg('cuda.synchronize', i)))
end

-- ---------------------------------------------------------------- memory
local STAT_FIELDS = { 'allocated', 'reserved', 'peak_allocated', 'peak_reserved', 'cached_blocks', 'num_allocs',
  'num_frees', 'num_device_allocs', 'num_device_frees', 'num_ooms', 'num_flushes' }

-- memory_stats([i]): the allocator's counters for device i (bytes, or counts): allocated
-- (in live tensors), reserved (held from the driver), peak_allocated, peak_reserved,
-- cached_blocks, num_allocs, num_frees, num_device_allocs, num_device_frees (cudaMalloc /
-- cudaFree calls), num_ooms, num_flushes (times the cache was emptied to make room).
function cuda.memory_stats(i)
  local s = ffi.new('em_cuda_memory_stats')
  check(C.em_cuda_get_memory_stats(i == nil and -1 or device_arg('cuda.memory_stats', i), s))
  local out = {}
  for _, k in ipairs(STAT_FIELDS) do out[k] = tonumber(s[k]) end
  return out
end
function cuda.memory_allocated(i) return cuda.memory_stats(i).allocated end
function cuda.memory_reserved(i) return cuda.memory_stats(i).reserved end
function cuda.max_memory_allocated(i) return cuda.memory_stats(i).peak_allocated end
function cuda.max_memory_reserved(i) return cuda.memory_stats(i).peak_reserved end
function cuda.reset_peak_memory_stats(i)
  check(C.em_cuda_reset_peak_memory_stats(i == nil and -1 or device_arg('cuda.reset_peak_memory_stats', i)))
end
-- Cached blocks go back to the driver; memory in live tensors stays. Tensors only Lua's
-- garbage collector still holds are freed first.
function cuda.empty_cache()
  collectgarbage('collect')
  check(C.em_cuda_empty_cache())
end
-- set_memory_limit(i, bytes): the allocator of device i reserves at most bytes (0: no
-- limit); a request past it fails like an out-of-memory, after emptying the cache.
function cuda.set_memory_limit(i, bytes)
  local d = device_arg('cuda.set_memory_limit', i)
  if type(bytes) ~= 'number' or bytes < 0 or bytes ~= math.floor(bytes) then
    I.arg_error('cuda.set_memory_limit', 2, 'a number of bytes >= 0', bytes)
  end
  check(C.em_cuda_set_memory_limit(d, bytes))
end

-- ---------------------------------------------------------------- streams
local Stream = {}
Stream.__index = Stream
-- Lua objects of the streams made here, by address, so that current_stream() returns the
-- object that was set.
local streams_by_ptr = setmetatable({}, { __mode = 'v' })
local default_streams = {}
-- Per device, the stream set current by this (single-threaded) Lua state: kept alive
-- while current (written only: holding is its job).
local current_refs = {}   -- luacheck: ignore 241

local function ptr_key(p) return tostring(ffi.cast('uintptr_t', p)) end

local function is_stream(x) return getmetatable(x) == Stream end
cuda.is_stream = is_stream

local function default_stream(device)
  local s = default_streams[device]
  if not s then
    s = setmetatable({ ptr = nil, device = device, priority = 0 }, Stream)
    default_streams[device] = s
  end
  return s
end

local STREAM_OPTS = option_set('device', 'priority')
-- Stream{device = 0, priority = 0}: a new stream (priority -1 is high, 0 normal).
function cuda.Stream(opts)
  check_opts('cuda.Stream', opts, STREAM_OPTS)
  opts = opts or {}
  local device = device_arg('cuda.Stream', opts.device)
  local priority = opts.priority or 0
  if priority ~= 0 and priority ~= -1 then
    throw(string.format('cuda.Stream: priority must be 0 (normal) or -1 (high), got %s', tostring(priority)))
  end
  local box = ffi.new('em_cuda_stream*[1]')
  check(C.em_cuda_stream_new(box, device, priority))
  local s = setmetatable({ ptr = ffi.gc(box[0], C.em_cuda_stream_free), device = device, priority = priority }, Stream)
  streams_by_ptr[ptr_key(box[0])] = s
  return s
end

-- Runs fn with device current (operations on a default stream act on the current device).
local function on_device(device, fn, ...)
  local prev = tonumber(C.em_cuda_current_device())
  if prev == device then return fn(...) end
  check(C.em_cuda_set_device(device))
  local ok, a, b = pcall(fn, ...)
  C.em_cuda_set_device(prev)
  if not ok then error(a, 0) end
  return a, b
end

local function need_stream(op, s, n)
  if not is_stream(s) then I.arg_error(op, n or 1, 'a cuda.Stream', s) end
  return s
end

function Stream:synchronize()
  on_device(self.device, function() check(C.em_cuda_stream_synchronize(self.ptr)) end)
end

-- query(): true when all work queued on the stream has completed.
function Stream:query()
  local r = on_device(self.device, function() return C.em_cuda_stream_query(self.ptr) end)
  if r < 0 then I.raise() end
  return r == 1
end

-- wait_event(e): work queued on self from now on waits for e.
function Stream:wait_event(e)
  if not cuda.is_event(e) then I.arg_error('cuda.Stream:wait_event', 1, 'a cuda.Event', e) end
  on_device(self.device, function() check(C.em_cuda_stream_wait_event(self.ptr, e.ptr)) end)
end

-- wait_stream(s): work queued on self from now on waits for the work queued on s so far.
function Stream:wait_stream(s)
  need_stream('cuda.Stream:wait_stream', s)
  self:wait_event(s:record_event())
end

-- record_event([e]): records e (a new event when nil) on self and returns it.
function Stream:record_event(e)
  e = e or cuda.Event()
  e:record(self)
  return e
end

function Stream:__tostring()
  if not self.ptr then return string.format('cuda.Stream(default, cuda:%d)', self.device) end
  return string.format('cuda.Stream(cuda:%d, priority %d, %s)', self.device, self.priority, ptr_key(self.ptr))
end

function Stream.__eq(a, b)
  return a.device == b.device and ptr_key(a.ptr) == ptr_key(b.ptr)
end

-- current_stream([i]): this thread's current stream of device i (default the current device).
function cuda.current_stream(i)
  local device = device_arg('cuda.current_stream', i)
  local p = C.em_cuda_current_stream(device)
  if p == nil then return default_stream(device) end
  local s = streams_by_ptr[ptr_key(p)]
  if not s then   -- set by C code of this thread: a wrapper that does not own it
    s = setmetatable({ ptr = p, device = device, priority = 0 }, Stream)
    streams_by_ptr[ptr_key(p)] = s
  end
  return s
end
function cuda.default_stream(i) return default_stream(device_arg('cuda.default_stream', i)) end

-- set_stream(s): s becomes the current stream of its device (for this thread).
function cuda.set_stream(s)
  need_stream('cuda.set_stream', s)
  check(C.em_cuda_set_stream(s.device, s.ptr))
  current_refs[s.device] = s.ptr and s or nil
end

local function pack(...) return { n = select('#', ...), ... } end

-- stream(s, fn, ...): runs fn with s current on its device, then restores the previous
-- stream (also when fn raises). Returns fn's results.
function cuda.stream(s, fn, ...)
  need_stream('cuda.stream', s)
  if type(fn) ~= 'function' then I.arg_error('cuda.stream', 2, 'a function', fn) end
  local prev = cuda.current_stream(s.device)
  cuda.set_stream(s)
  local res = pack(pcall(fn, ...))
  cuda.set_stream(prev)
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2, res.n)
end

-- ---------------------------------------------------------------- events
local Event = {}
Event.__index = Event
local function is_event(x) return getmetatable(x) == Event end
cuda.is_event = is_event

local EVENT_OPTS = option_set('timing')
-- Event{timing = false}: an event; timing = true to measure elapsed_time between two.
function cuda.Event(opts)
  check_opts('cuda.Event', opts, EVENT_OPTS)
  local timing = opts and opts.timing and 1 or 0
  need_available('cuda.Event')
  local box = ffi.new('em_cuda_event*[1]')
  check(C.em_cuda_event_new(box, timing))
  return setmetatable({ ptr = ffi.gc(box[0], C.em_cuda_event_free), timing = timing == 1 }, Event)
end

-- record([s]): marks the work queued so far on s (default: the current stream).
function Event:record(s)
  if s == nil then s = cuda.current_stream() end
  need_stream('cuda.Event:record', s)
  on_device(s.device, function() check(C.em_cuda_event_record(self.ptr, s.ptr)) end)
  return self
end
function Event:synchronize() check(C.em_cuda_event_synchronize(self.ptr)) end
function Event:query()
  local r = C.em_cuda_event_query(self.ptr)
  if r < 0 then I.raise() end
  return r == 1
end
-- wait([s]): the stream s (default current) waits for this event.
function Event:wait(s)
  (s or cuda.current_stream()):wait_event(self)
end
-- elapsed_time(e2): milliseconds from self to e2 (both recorded, made with timing = true).
function Event:elapsed_time(e2)
  if not is_event(e2) then I.arg_error('cuda.Event:elapsed_time', 1, 'a cuda.Event', e2) end
  local ms = ffi.new('double[1]')
  check(C.em_cuda_event_elapsed_ms(self.ptr, e2.ptr, ms))
  return ms[0]
end
function Event:__tostring() return string.format('cuda.Event(timing = %s)', tostring(self.timing)) end

-- ---------------------------------------------------------------- tensor methods
-- pin_memory(): a copy in pinned (page-locked) host memory; is_pinned(); is_cuda().
function Tensor.pin_memory(t)
  I.alive('pin_memory', t)
  if C.em_tensor_is_pinned(t) ~= 0 then return t end
  return I.new(C.em_pin_memory(I.box, t))
end
function Tensor.is_pinned(t) return C.em_tensor_is_pinned(t) ~= 0 end
function Tensor.is_cuda(t) return C.em_tensor_device(t).type == C.EM_CUDA end
-- record_stream(s): t's memory is in use by work queued on s (see the header).
function Tensor.record_stream(t, s)
  need_stream('record_stream', s)
  check(C.em_cuda_record_stream(t, s.ptr))
  return t
end

return cuda
