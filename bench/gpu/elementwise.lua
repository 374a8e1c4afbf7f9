-- bench/gpu/elementwise.lua: elementwise add and mul over 256M float32 (1 GiB per tensor)
-- on a GPU, in GB/s of memory traffic (two reads and a write: 12 bytes per element), set
-- against the device's bandwidth ceiling, measured here as a device-to-device copy
-- (dst:copy_(src): a read and a write, 8 bytes per element). PyTorch's side is
-- bench/gpu/torch_bench.py elementwise. `warmup` untimed calls, then `reps` timed ones with
-- the device synchronised around each; results of a + b are freed outside the timing.
--
--   build-gpu/ember bench/gpu/elementwise.lua [--numel 268435456] [--reps 20]
--   build/ember bench/gpu/elementwise.lua --device cpu --small
local script_dir = debug.getinfo(1, 'S').source:match('^@(.*/)') or './'
local B = dofile(script_dir .. 'common.lua')

B.run('elementwise', function()
  local o = B.options('elementwise.lua', arg, { device = 'cuda', numel = 256 * 1024 * 1024, reps = 20, warmup = 3,
    small = false })
  if o.small then o.numel, o.reps, o.warmup = 1024 * 1024, math.min(o.reps, 5), 1 end
  B.check_device(o.device)
  local n = o.numel
  local a = ember.rand(n, { device = o.device })
  local b = ember.rand(n, { device = o.device })
  local c = ember.empty(n, { device = o.device })
  local cases = {
    { op = 'copy', bytes = 8 * n, fn = function() c:copy_(a) end },
    { op = 'add', bytes = 12 * n, fn = function() return a + b end, after = B.drop },
    { op = 'mul', bytes = 12 * n, fn = function() return a * b end, after = B.drop },
  }
  local results = {}
  for _, case in ipairs(cases) do
    local times = B.time(o.device, o.warmup, o.reps, case.fn, case.after)
    local ms = B.median(times)
    results[case.op] = { median_ms = ms, min_ms = math.min(unpack(times)), gb_per_s = case.bytes / (ms / 1e3) / 1e9 }
  end
  -- the copy must be right, not only fast
  local s = (c - a):abs():max():item()
  if s ~= 0 then error('elementwise.lua: the copy differs from its source by up to ' .. s, 0) end
  for _, op in ipairs { 'add', 'mul' } do
    results[op].of_copy = results[op].gb_per_s / results.copy.gb_per_s
  end
  return { device = o.device, gpu = B.device_name(o.device), numel = n, dtype = 'float32', reps = o.reps,
    results = results, small = o.small or nil }
end)
