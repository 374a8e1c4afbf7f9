-- loader_fixtures.lua: what the data pipeline's specs share (dofile'd, not a spec itself):
-- temporary folders, fixture datasets written at test time (small .npy arrays, Lua
-- dataset files), readers started by hand, waiting. A spec sets F.finally and F.assert
-- (busted's live in the spec file's environment, not in _G).
local ffi = require 'ffi'
local data = ember.data

local F = {}
F.EMBER = (os.getenv('EMBER_BUILD_DIR') or 'build') .. '/ember'

pcall(ffi.cdef, 'int usleep(unsigned int usec);')
function F.sleep(s) ffi.C.usleep(math.floor(s * 1e6)) end
function F.now() return require('ember.util.progress').now() end

function F.tmpdir()
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute('mkdir -p ' .. dir) == 0)
  F.defer(function() os.execute('rm -rf ' .. dir) end)
  return dir
end

function F.write(path, text)
  local f = assert(io.open(path, 'wb'))
  f:write(text)
  f:close()
  return path
end

function F.read(path)
  local f = io.open(path, 'rb')
  if not f then return nil end
  local s = f:read('*a')
  f:close()
  return s
end

-- x.npy: uint8 [n, h, w] with pixel (i, r, c) = (7 i + 3 r + c) % 256; y.npy: int64 i % 10.
function F.npy_images(dir, n, h, w)
  local x = ember.empty({ n, h, w }, { dtype = 'uint8' })
  local p = x:data_ptr()
  for i = 0, n - 1 do
    for r = 0, h - 1 do
      for c = 0, w - 1 do p[(i * h + r) * w + c] = (7 * i + 3 * r + c) % 256 end
    end
  end
  local y = ember.empty({ n }, { dtype = 'int64' })
  for i = 0, n - 1 do y:data_ptr()[i] = i % 10 end
  data.npy.write(dir .. '/x.npy', x)
  data.npy.write(dir .. '/y.npy', y)
  return { format = 'npy', x = dir .. '/x.npy', y = dir .. '/y.npy' }, x, y
end

-- A Lua dataset: sample i is {x = [2] float64 {i, a random number from the sample's rng},
-- y = i}; get() sleeps `delay` seconds; ids in `bad` raise an error.
F.LUA_DATASET = [[
local ffi = require 'ffi'
pcall(ffi.cdef, 'int usleep(unsigned int usec);')
return function(o)
  local n, delay, bad = o.n or 64, o.delay or 0, {}
  for _, i in ipairs(o.bad or {}) do bad[i] = true end
  return {
    size = function() return n end,
    get = function(self, i, rng)
      if delay > 0 then ffi.C.usleep(math.floor(delay * 1e6)) end
      if bad[i] then error('record ' .. i .. ' is unreadable') end
      return { x = ember.tensor({ i, rng:random() }, { dtype = 'float64' }), y = i }
    end,
  }
end
]]

function F.lua_dataset(dir)
  return F.write(dir .. '/dataset.lua', F.LUA_DATASET)
end

-- Every batch of an epoch: {ids = {...}, x = {...} sums per batch}, and all ids in order.
-- Online CPUs (sysconf's count, as runtime/data/pipeline/coordinator.c sees it).
function F.cpus()
  local pipe = io.popen('getconf _NPROCESSORS_ONLN')
  local n = tonumber(pipe:read('*l'))
  pipe:close()
  return n or 1
end

function F.collect(loader, e, limit)
  local batches, all = {}, {}
  for b in loader:epoch(e) do
    local ids = {}
    for i = 1, b.ids:numel() do
      ids[i] = b.ids[i]:item()
      all[#all + 1] = ids[i]
    end
    batches[#batches + 1] = { ids = ids, x = b.x:double():sum():item(), n = #ids }
    if limit and #batches >= limit then break end
  end
  return batches, all
end

-- Checks that ids holds every id of 1..n exactly once.
function F.exactly_once(ids, n)
  local seen = {}
  for _, id in ipairs(ids) do
    assert(not seen[id], 'sample ' .. tostring(id) .. ' was delivered twice')
    seen[id] = true
  end
  for i = 1, n do assert(seen[i], 'sample ' .. i .. ' was never delivered') end
  F.assert.equal(n, #ids)
end

function F.wait_for(cond, timeout)
  local t0 = F.now()
  while F.now() - t0 < timeout do
    if cond() then return true end
    F.sleep(0.02)
  end
  return cond()
end

-- Starts `ember reader ARGS` in the background; returns its pid (killed when the test ends).
-- busted keeps one finally per test (each call replaces the one before): F.defer(fn)
-- collects the test's clean-ups and registers one finally that runs them all, newest first.
F.deferred = {}
function F.defer(fn)
  F.deferred[#F.deferred + 1] = fn
  F.finally(function()
    local list = F.deferred
    F.deferred = {}
    for i = #list, 1, -1 do pcall(list[i]) end
  end)
end

function F.start_reader(args, log)
  local out = os.tmpname()
  local cmd = string.format("%s reader %s > %s 2>&1 & echo $! > %s", F.EMBER, args, log or '/dev/null', out)
  assert(os.execute(cmd) == 0)
  local pid = tonumber(F.read(out))
  os.remove(out)
  F.defer(function() os.execute('kill -9 ' .. pid .. ' 2>/dev/null') end)
  return pid
end

function F.alive(pid) return ember.C.em_process_alive(pid) ~= 0 end

function F.error_of(fn, ...)
  local ok, err = pcall(fn, ...)
  F.assert.is_false(ok, 'expected an error')
  return tostring(err)
end

function F.has(msg, text)
  assert(msg:find(text, 1, true), string.format('expected the message to contain %q, got %q', text, msg))
end

return F
