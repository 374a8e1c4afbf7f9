-- cuda_spec.lua: ember.cuda (devices, memory, streams, events, pinned memory) and moving
-- tensors between the host and GPUs. Without a GPU: everything says so clearly and nothing
-- crashes. With one (or when EMBER_TEST_DEVICE=cuda insists on one): copies of every dtype
-- and layout both ways, asynchronous copies from pinned memory, stream and event ordering,
-- the allocator's counters, empty_cache and the out-of-memory message under a limit.
-- The GPU part uses copies and allocations only, so that it tests this layer alone.
local cuda = ember.cuda
local available = cuda.is_available()
local wants_gpu = test_device:match('^cuda') ~= nil

local function error_of(fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok, 'expected an error')
  return tostring(err)
end

local function contains(haystack, needle)
  assert.is_truthy(haystack:find(needle, 1, true), string.format('expected %q in %q', needle, haystack))
end

local function ember_info()
  local exe = (os.getenv('EMBER_BUILD_DIR') or 'build') .. '/ember'
  local f = assert(io.popen(exe .. ' info 2>&1'))
  local out = f:read('*a')
  f:close()
  return out
end

describe('test_device', function()
  it('is a device name, cpu unless EMBER_TEST_DEVICE says otherwise', function()
    local env = os.getenv('EMBER_TEST_DEVICE')
    assert.are.equal((env == nil or env == '') and 'cpu' or env, test_device)
    local t = on_device(ember.ones(2))
    assert.are.equal(test_device == 'cuda' and 'cuda:0' or test_device, t.device)
  end)

  it('finds a GPU when it asks for one', function()
    if wants_gpu then assert.is_true(available, 'EMBER_TEST_DEVICE=' .. test_device .. ' but ' ..
      tostring(cuda.unavailable_reason())) end
  end)
end)

describe('ember.cuda on every machine', function()
  it('answers the questions that need no GPU', function()
    assert.are.equal(type(cuda.is_built()), 'boolean')
    assert.are.equal(cuda.device_count(), ember.device_count('cuda'))
    assert.are.equal(available, cuda.device_count() > 0)
    local v = cuda.versions()
    assert.are.equal('table', type(v))
    if cuda.is_built() then
      assert.matches('^%d+%.%d+$', v.runtime)
      assert.matches('^%d+%.%d+%.%d+$', v.cublas)
      assert.matches('^%d+%.%d+%.%d+$', v.cudnn)
    end
  end)

  it('checks the options of to and copy_', function()
    local t = ember.ones(2)
    contains(error_of(t.to, t, { device = 'cpu', bogus = 1 }), "to: unknown option 'bogus'")
    contains(error_of(t.copy_, t, t, { blocking = true }), "copy_: unknown option 'blocking'")
    -- on the CPU non_blocking changes nothing
    local u = ember.zeros(2)
    u:copy_(ember.tensor({ 3, 4 }), { non_blocking = true })
    assert.are.same({ 3, 4 }, u:totable())
    assert.are.same({ 1, 1 }, t:to('cpu', { non_blocking = true }):totable())
    assert.is_false(t:is_cuda())
    assert.is_false(t:is_pinned())
  end)

  it('ember info has a cuda line', function()
    local out = ember_info()
    contains(out, '  cuda:    ')
    if available then
      contains(out, 'cuda:0  ' .. cuda.get_device_name(0))
      contains(out, 'compute capability')
    else
      contains(out, 'cuda:    none (' .. cuda.unavailable_reason() .. ')')
    end
    if cuda.is_built() then contains(out, 'cuda versions: driver ') end
  end)
end)

if not available then
  describe('ember.cuda without a GPU', function()
    local reason = cuda.unavailable_reason()

    it('is unavailable and says why', function()
      assert.is_false(cuda.is_available())
      assert.are.equal(0, cuda.device_count())
      assert.are.equal('string', type(reason))
      assert.is_true(#reason > 10, reason)
      if cuda.is_built() then
        -- the driver is missing, or present without a device
        assert.is_truthy(reason:find('CUDA driver not found', 1, true) or reason:find('no CUDA-capable device', 1, true)
          or reason:find('cudaGetDeviceCount', 1, true), reason)
      else
        contains(reason, 'the CUDA backend is not built')
      end
    end)

    it('fails moves to a GPU cleanly, naming the reason', function()
      local t = ember.ones(2, 3)
      local expect = 'no CUDA device is available (' .. reason .. ')'
      contains(error_of(t.cuda, t), 'cuda: ' .. expect)
      contains(error_of(t.cuda, t, 1), 'cuda: ' .. expect)
      contains(error_of(t.to, t, 'cuda'), 'to: ' .. expect)
      contains(error_of(t.to, t, 'cuda:0', { non_blocking = true }), 'to: ' .. expect)
      contains(error_of(t.to, t, { device = 'cuda', dtype = 'float64' }), 'to: ' .. expect)
      local m = ember.nn.Linear(2, 2)
      contains(error_of(m.cuda, m), expect)
      contains(error_of(ember.zeros, 2, { device = 'cuda' }), reason)
      -- the error points at the caller's line, not into the library
      assert.matches('cuda_spec%.lua:%d+: ', error_of(t.cuda, t))
    end)

    it('fails memory, stream, event and pinned-memory calls cleanly', function()
      if not cuda.is_built() then
        contains(error_of(cuda.memory_stats), 'the CUDA backend is not built')
        return
      end
      local expect = 'no CUDA device is available (' .. reason .. ')'
      contains(error_of(cuda.memory_stats), 'cuda.memory_stats: ' .. expect)
      contains(error_of(cuda.memory_stats, 0), 'cuda.memory_stats: ' .. expect)
      contains(error_of(cuda.memory_allocated), 'cuda.memory_stats: ' .. expect)
      contains(error_of(cuda.reset_peak_memory_stats), 'cuda.reset_peak_memory_stats: ' .. expect)
      contains(error_of(cuda.set_memory_limit, 0, 1024), 'cuda.set_memory_limit: ' .. expect)
      contains(error_of(cuda.synchronize), 'cuda.synchronize: ' .. expect)
      contains(error_of(cuda.current_device), 'cuda.current_device: ' .. expect)
      contains(error_of(cuda.set_device, 0), 'cuda.set_device: ' .. expect)
      contains(error_of(cuda.get_device_properties, 0), 'cuda.get_device_properties: ' .. expect)
      contains(error_of(cuda.Stream), 'cuda.Stream: ' .. expect)
      contains(error_of(cuda.Event, { timing = true }), 'cuda.Event: ' .. expect)
      contains(error_of(cuda.current_stream), 'cuda.current_stream: ' .. expect)
      local t = ember.ones(3)
      contains(error_of(t.pin_memory, t), 'pin_memory: ' .. expect)
      cuda.empty_cache()   -- nothing cached: not an error
    end)
  end)
  return
end

-- ---------------------------------------------------------------- with a GPU
local DEV = wants_gpu and test_device or 'cuda:0'
if DEV == 'cuda' then DEV = 'cuda:0' end
local DEV_INDEX = tonumber(DEV:match('%d+$'))
local DTYPES = { 'float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8', 'bool' }
local MiB = 1024 * 1024

-- Both on the host: equal dtype, shape and values (big ones compared on the host by equal).
local function same(expected, got, what)
  assert.are.equal('cpu', got.device, what)
  assert.are.equal(expected.dtype, got.dtype, what)
  assert.are.same(expected.shape, got.shape, what)
  if expected:numel() > 10000 then
    assert.is_true(expected:equal(got), what)
  else
    assert.are.same(expected:totable(), got:totable(), what)
  end
end

describe('ember.cuda devices', function()
  it('describes the device', function()
    local p = cuda.get_device_properties(DEV_INDEX)
    assert.is_true(#p.name > 0)
    assert.is_true(p.total_memory > 0 and p.free_memory > 0 and p.free_memory <= p.total_memory)
    assert.is_true(p.multiprocessors > 0)
    assert.are.equal(string.format('%d.%d', p.major, p.minor), p.capability)
    assert.is_truthy(cuda.versions().driver)
    assert.are.equal('number', type(cuda.current_device()))
    cuda.set_device(DEV_INDEX)
    assert.are.equal(DEV_INDEX, cuda.current_device())
    contains(error_of(cuda.set_device, cuda.device_count()), 'does not exist')
  end)
end)

describe('copies between the host and a GPU', function()
  local values = { -3.75, -1, 0, 0.5, 1.5, 2.5, 100, 255, 300 }

  it('round-trips every dtype', function()
    for _, dt in ipairs(DTYPES) do
      local host = ember.tensor(values, { dtype = 'float64' }):to(dt)
      local g = host:to(DEV)
      assert.are.equal(DEV, g.device)
      assert.is_true(g:is_cuda())
      same(host, g:cpu(), dt)
      -- reads of a GPU tensor copy back by themselves
      assert.are.same(host:totable(), g:totable(), dt)
      assert.are.equal(host[4]:item(), g[4]:item(), dt)
      assert.is_truthy(tostring(g):find('device=' .. DEV, 1, true))
      -- 0-d and empty tensors
      same(host[2], host[2]:to(DEV):cpu(), dt .. ' 0-d')
      local empty = ember.empty(0, 3, { dtype = dt })
      same(empty, empty:to(DEV):cpu(), dt .. ' empty')
    end
  end)

  it('converts dtypes on the way as the CPU does', function()
    local src = ember.tensor(values, { dtype = 'float64' })
    for _, from in ipairs(DTYPES) do
      for _, to in ipairs(DTYPES) do
        local s = src:to(from)
        local want = s:to(to)
        local what = from .. ' -> ' .. to
        same(want, s:to(DEV):to(to):cpu(), what .. ' on the GPU')
        same(want, s:to(to, DEV):cpu(), what .. ' host to GPU')
        same(want, s:to(DEV):to(to, 'cpu'), what .. ' GPU to host')
      end
    end
  end)

  it('copies strided and broadcast tensors both ways', function()
    local base = ember.arange(0, 120):view(2, 3, 4, 5)
    local strided = base:permute(4, 2, 1, 3)                  -- non-contiguous on the host
    same(strided:contiguous(), strided:to(DEV):cpu(), 'host strided -> GPU')
    local g = base:to(DEV):permute(4, 2, 1, 3)               -- non-contiguous on the GPU
    same(strided:contiguous(), g:cpu(), 'GPU strided -> host')
    same(strided:contiguous():double(), g:to('float64', 'cpu'), 'GPU strided -> host float64')
    -- into a strided destination on either side
    local dst = ember.empty(5, 4, { device = DEV })
    dst:t():copy_(ember.arange(0, 20):view(4, 5))
    same(ember.arange(0, 20):view(4, 5):t():contiguous(), dst:cpu(), 'into a transposed GPU tensor')
    local hdst = ember.zeros(5, 4)
    hdst:t():copy_(ember.arange(0, 20):view(4, 5):to(DEV))
    same(ember.arange(0, 20):view(4, 5):t():contiguous(), hdst, 'into a transposed host tensor')
    -- a narrowed (offset) view, and a broadcast row
    local rows = ember.arange(0, 12):view(3, 4):to(DEV):narrow(1, 2, 2)
    same(ember.arange(0, 12):view(3, 4):narrow(1, 2, 2):contiguous(), rows:cpu(), 'narrowed')
    local b = ember.empty(3, 4, { device = DEV, dtype = 'int64' })
    b:copy_(ember.tensor({ 1, 2, 3, 4 }))
    same(ember.tensor({ 1, 2, 3, 4 }, { dtype = 'int64' }):expand(3, 4):contiguous(), b:cpu(), 'broadcast')
    -- on the GPU, between layouts and dtypes
    local c = ember.empty(5, 3, 2, 4, { device = DEV, dtype = 'float16' })
    c:copy_(g)
    same(strided:contiguous():half(), c:cpu(), 'GPU strided -> GPU float16')
  end)

  it('reads and writes single elements of GPU tensors', function()
    local g = ember.arange(0, 6, { dtype = 'int64' }):view(2, 3):to(DEV)
    assert.are.equal(5, g[{ 2, 3 }]:item())
    assert.are.equal(4, g:t()[{ 2, 2 }]:item())
    local big = ember.tensor({ 2 ^ 53 + 1 }, { dtype = 'int64' })
    assert.are.equal(big:item(), big:to(DEV):item())
    local l = ember.linspace(0, 1, 7, { device = DEV })
    assert.are.equal(1, l[7]:item())
  end)

  it('copies asynchronously from and to pinned memory', function()
    local n = 4 * MiB
    local host = ember.arange(0, n, { dtype = 'float32' })
    local pinned = host:pin_memory()
    assert.is_true(pinned:is_pinned())
    assert.is_false(host:is_pinned())
    same(host, pinned, 'pin_memory copies')
    assert.are.equal(pinned, pinned:pin_memory())
    local g = pinned:to(DEV, { non_blocking = true })
    local done = cuda.Event()
    done:record()
    done:synchronize()
    assert.is_true(done:query())
    same(host, g:cpu(), 'host -> GPU')
    local back = g:to('cpu', { non_blocking = true })
    assert.is_true(back:is_pinned())
    cuda.current_stream():synchronize()
    same(host, back, 'GPU -> pinned host')
    local dst = ember.zeros(n):pin_memory()
    dst:copy_(g, { non_blocking = true })
    cuda.synchronize()
    same(host, dst, 'copy_ into pinned')
    -- with a conversion on the device side
    local half = ember.zeros(n, { dtype = 'float16' }):pin_memory()
    half:copy_(g, { non_blocking = true })
    cuda.synchronize()
    same(host:half(), half, 'copy_ converting into pinned')
  end)

  it('copies between GPUs', function()
    if cuda.device_count() < 2 then return end
    local a = ember.arange(0, 1000):to('cuda:0')
    local b = a:to('cuda:1')
    assert.are.equal('cuda:1', b.device)
    same(ember.arange(0, 1000), b:cpu(), 'peer copy')
    same(ember.arange(0, 1000):view(10, 100):t():contiguous():double(),
      a:view(10, 100):t():to('float64', 'cuda:1'):cpu(), 'peer copy, strided and converting')
  end)
end)

describe('streams and events', function()
  it('has a default stream per device and makes new ones', function()
    local default = cuda.current_stream(DEV_INDEX)
    assert.are.equal(default, cuda.default_stream(DEV_INDEX))
    assert.is_true(tostring(default):find('default', 1, true) ~= nil)
    local s = cuda.Stream { device = DEV_INDEX }
    local hi = cuda.Stream { device = DEV_INDEX, priority = -1 }
    assert.are_not.equal(default, s)
    assert.are.equal(DEV_INDEX, s.device)
    assert.are.equal(-1, hi.priority)
    contains(error_of(cuda.Stream, { priority = 3 }), 'priority must be 0 (normal) or -1 (high)')
    contains(error_of(cuda.Stream, { prio = 1 }), "unknown option 'prio'")
  end)

  it('runs work on the current stream and restores the previous one', function()
    local s = cuda.Stream { device = DEV_INDEX }
    local default = cuda.current_stream(DEV_INDEX)
    local seen = cuda.stream(s, function() return cuda.current_stream(DEV_INDEX) end)
    assert.are.equal(s, seen)
    assert.are.equal(default, cuda.current_stream(DEV_INDEX))
    contains(error_of(cuda.stream, s, function() error('inside') end), 'inside')
    assert.are.equal(default, cuda.current_stream(DEV_INDEX))
    cuda.set_stream(s)
    assert.are.equal(s, cuda.current_stream(DEV_INDEX))
    cuda.set_stream(default)
    assert.are.equal(default, cuda.current_stream(DEV_INDEX))
  end)

  it('orders copies on a side stream with events', function()
    local n = 16 * MiB
    local pinned = ember.arange(0, n, { dtype = 'float32' }):pin_memory()
    local s = cuda.Stream { device = DEV_INDEX }
    local start, stop = cuda.Event { timing = true }, cuda.Event { timing = true }
    local g
    cuda.stream(s, function()
      start:record()
      g = pinned:to(DEV, { non_blocking = true })
      stop:record()
    end)
    -- g was allocated on s; the default stream waits for s before reading it
    local main = cuda.current_stream(DEV_INDEX)
    main:wait_event(stop)
    local back = ember.zeros(n):pin_memory()
    back:copy_(g, { non_blocking = true })
    g:record_stream(main)   -- read on the main stream: not reused by s until that is done
    main:synchronize()
    assert.is_true(stop:query())
    assert.is_true(s:query())
    same(pinned, back, 'side stream -> main stream')
    local ms = start:elapsed_time(stop)
    assert.is_true(ms >= 0, 'elapsed ' .. ms)
    contains(error_of(cuda.Event().elapsed_time, cuda.Event(), stop), 'timing = true')
    -- wait_stream: record and wait in one step
    local s2 = cuda.Stream { device = DEV_INDEX }
    s2:wait_stream(s)
    s2:synchronize()
    local e = s:record_event()
    e:synchronize()
    assert.is_true(e:query())
  end)
end)

describe('the caching allocator', function()
  local function settle()
    collectgarbage('collect')
    cuda.synchronize(DEV_INDEX)
  end

  it('counts allocations and frees, and empty_cache lowers reserved', function()
    settle()
    cuda.empty_cache()
    local before = cuda.memory_stats(DEV_INDEX)
    -- 64 MiB of float32: a segment of its own (nothing cached is that large after emptying)
    local t = ember.empty(16 * MiB, { device = DEV })
    local mid = cuda.memory_stats(DEV_INDEX)
    assert.are.equal(before.allocated + 64 * MiB, mid.allocated)
    assert.are.equal(before.num_allocs + 1, mid.num_allocs)
    assert.are.equal(before.num_device_allocs + 1, mid.num_device_allocs)
    assert.are.equal(before.reserved + 64 * MiB, mid.reserved)
    assert.is_true(mid.peak_allocated >= mid.allocated)
    assert.are.equal(mid.allocated, cuda.memory_allocated(DEV_INDEX))
    assert.are.equal(mid.reserved, cuda.memory_reserved(DEV_INDEX))
    t = nil
    settle()
    local after = cuda.memory_stats(DEV_INDEX)
    assert.are.equal(before.allocated, after.allocated)
    assert.are.equal(before.num_frees + 1, after.num_frees)
    assert.are.equal(mid.reserved, after.reserved)              -- kept in the cache
    assert.is_true(after.cached_blocks >= 1)
    -- the same size again comes from the cache: no new device allocation
    local again = ember.empty(16 * MiB, { device = DEV })
    assert.are.equal(after.num_device_allocs, cuda.memory_stats(DEV_INDEX).num_device_allocs)
    again = nil
    settle()
    cuda.empty_cache()
    local emptied = cuda.memory_stats(DEV_INDEX)
    assert.are.equal(mid.reserved - 64 * MiB, emptied.reserved)
    assert.is_true(emptied.num_device_frees > after.num_device_frees)
    cuda.reset_peak_memory_stats(DEV_INDEX)
    assert.are.equal(emptied.allocated, cuda.max_memory_allocated(DEV_INDEX))
  end)

  it('fails past the memory limit with a message that says what and why', function()
    settle()
    cuda.empty_cache()
    local s = cuda.memory_stats(DEV_INDEX)
    cuda.set_memory_limit(DEV_INDEX, s.reserved + 64 * MiB)
    local ok, err = pcall(ember.empty, 256 * MiB, { device = DEV, dtype = 'uint8' })
    cuda.set_memory_limit(DEV_INDEX, 0)
    assert.is_false(ok)
    assert.matches(string.format('cuda:%d: out of memory allocating 256%%.00 MiB %%(in use by tensors .+, cached .+, ' ..
      'limit .+%%)', DEV_INDEX), tostring(err))
    local after = cuda.memory_stats(DEV_INDEX)
    assert.are.equal(s.num_ooms + 1, after.num_ooms)
    assert.is_true(after.num_flushes > s.num_flushes)
    -- without the limit the same request succeeds
    local t = ember.empty(256 * MiB, { device = DEV, dtype = 'uint8' })
    assert.are.equal(256 * MiB, t:numel())
    contains(error_of(cuda.set_memory_limit, DEV_INDEX, -1), 'a number of bytes >= 0')
  end)

  it('keeps a block used on another stream until that stream is done', function()
    local s = cuda.Stream { device = DEV_INDEX }
    local t = ember.empty(MiB, { device = DEV })
    t:record_stream(s)
    t = nil
    settle()
    cuda.empty_cache()
    contains(error_of(ember.ones(2).record_stream, ember.ones(2), s), 'record_stream: the tensor is on the CPU')
  end)
end)
