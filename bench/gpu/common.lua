-- bench/gpu/common.lua: what the GPU benchmark scripts share (loaded with dofile by each):
-- options, a monotonic clock, device synchronisation, medians, the one JSON line.
--
-- Every script takes --device cuda|cuda:N|cpu and --small (tiny sizes: checks on a machine
-- without a GPU that the script runs end to end), prints exactly one JSON line on stdout
-- and exits 0; on an error it prints {"bench": ..., "error": "..."} and exits 1.
local ffi = require 'ffi'
local json = require 'ember.util.json'
local libc = require 'ember.util.libc'
local I = require 'ember.internal'

local M = {}

M.now = libc.now           -- seconds, monotonic clock
M.setenv = libc.setenv

-- Parses `--name value` and `--flag` arguments against defaults: numbers stay numbers,
-- booleans are flags. Unknown options are errors that list the known ones.
function M.options(script, argv, defaults)
  local o = {}
  for k, v in pairs(defaults) do o[k] = v end
  local i = 1
  while argv[i] do
    local name = argv[i]:match('^%-%-([%w_-]+)$')
    local key = name and name:gsub('-', '_')
    if not key or defaults[key] == nil then
      local known = {}
      for k in pairs(defaults) do known[#known + 1] = '--' .. k:gsub('_', '-') end
      table.sort(known)
      error(string.format('%s: unknown option %s (known: %s)', script, tostring(argv[i]), table.concat(known, ' ')), 0)
    end
    if type(defaults[key]) == 'boolean' then
      o[key] = true
      i = i + 1
    else
      local v = argv[i + 1]
      if v == nil then error(string.format('%s: --%s needs a value', script, name), 0) end
      if type(defaults[key]) == 'number' then
        v = tonumber(v)
        if not v then error(string.format('%s: --%s needs a number, got %s', script, name, argv[i + 1]), 0) end
      end
      o[key] = v
      i = i + 2
    end
  end
  return o
end

function M.split(s)
  local out = {}
  for item in tostring(s):gmatch('[^,]+') do out[#out + 1] = item end
  return out
end

-- Waits for everything queued on the device (a no-op on the CPU).
function M.synchronize(device)
  if device == 'cpu' then return end
  if ember.cuda and ember.cuda.synchronize then return ember.cuda.synchronize() end
  local index = tonumber(device:match(':(%d+)$') or -1)
  if ember.C.em_cuda_synchronize(index) ~= 0 then error(ffi.string(ember.C.em_last_error()), 0) end
end

-- Fails early, with the reason, when the device cannot be used.
function M.check_device(device)
  if device == 'cpu' then return end
  local ok, dev = pcall(I.parse_device, device, 'device')
  if not ok then error(dev, 0) end
  if ember.device_count('cuda') <= tonumber(dev.index) then
    error(string.format('device %s is not available: %s', device,
      ffi.string(ember.C.em_cuda_unavailable_reason())), 0)
  end
end

-- The GPU's name, or nil.
function M.device_name(device)
  if device == 'cpu' then return nil end
  local props = ffi.new('em_cuda_device_props')
  local index = tonumber(device:match(':(%d+)$') or 0)
  if ember.C.em_cuda_get_device_props(index, props) ~= 0 then return nil end
  return ffi.string(props.name)
end

function M.median(xs)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  local n = #s
  if n == 0 then return nil end
  if n % 2 == 1 then return s[(n + 1) / 2] end
  return 0.5 * (s[n / 2] + s[n / 2 + 1])
end

-- Times fn() `reps` times after `warmup` untimed calls, synchronising the device around
-- each call; `after(result)` (optional) runs outside the timing. Returns the times in ms.
function M.time(device, warmup, reps, fn, after)
  for _ = 1, warmup do
    local r = fn()
    if after then after(r) end
  end
  M.synchronize(device)
  local times = {}
  for i = 1, reps do
    local t0 = M.now()
    local r = fn()
    M.synchronize(device)
    times[i] = 1e3 * (M.now() - t0)
    if after then after(r) end
  end
  return times
end

-- Frees a tensor's memory now rather than at the next garbage collection (a 1 GiB result
-- per call would otherwise pile up).
function M.drop(t)
  if ember.is_tensor(t) and ember.Tensor.free then ember.Tensor.free(t) end
end

-- Runs main() and prints its table as the one JSON line; an error becomes {"error": ...}.
function M.run(bench, main)
  local ok, result = xpcall(main, function(e) return tostring(e) .. '\n' .. debug.traceback('', 2) end)
  if not ok then
    local msg = tostring(result)
    io.stderr:write(bench, ': ', msg, '\n')
    io.stdout:write(json.encode({ bench = bench, impl = 'ember', error = msg:match('^[^\n]*') }), '\n')
    io.stdout:flush()
    os.exit(1)
  end
  result.bench = bench
  result.impl = 'ember'
  io.stdout:write(json.encode(result, { order = { 'bench', 'impl', 'device' } }), '\n')
  io.stdout:flush()
end

return M
