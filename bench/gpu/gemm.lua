-- bench/gpu/gemm.lua: square matrix products through ember.matmul on a GPU, in TFLOP/s
-- (2 n^3 flops per product), to set against cuBLAS's own rate measured by PyTorch
-- (bench/gpu/torch_bench.py gemm: torch.matmul is a cuBLAS call). For each size and dtype:
-- `warmup` untimed products, then `reps` timed ones with the device synchronised around
-- each; the median time gives the rate. Operands are random normal, made once; each result
-- is freed outside the timing.
--
--   build-gpu/ember bench/gpu/gemm.lua [--sizes 4096,8192] [--dtypes float32,float16] [--reps 10]
--   build/ember bench/gpu/gemm.lua --device cpu --small
local script_dir = debug.getinfo(1, 'S').source:match('^@(.*/)') or './'
local B = dofile(script_dir .. 'common.lua')

B.run('gemm', function()
  local o = B.options('gemm.lua', arg, { device = 'cuda', sizes = '4096,8192', dtypes = 'float32,float16', reps = 10,
    warmup = 3, small = false })
  if o.small then o.sizes, o.reps, o.warmup = '128,256', math.min(o.reps, 3), 1 end
  B.check_device(o.device)
  local results = {}
  for _, dtype in ipairs(B.split(o.dtypes)) do
    for _, size in ipairs(B.split(o.sizes)) do
      local n = tonumber(size)
      if not n or n < 1 or n ~= math.floor(n) then error('gemm.lua: bad size ' .. size, 0) end
      -- one case failing (a dtype the backend lacks) is reported in its entry, not fatal
      local ok, err = pcall(function()
        local a = ember.randn(n, n, { device = o.device }):to(dtype)
        local b = ember.randn(n, n, { device = o.device }):to(dtype)
        local times = B.time(o.device, o.warmup, o.reps, function() return ember.matmul(a, b) end, B.drop)
        local ms = B.median(times)
        results[#results + 1] = { n = n, dtype = dtype, median_ms = ms, min_ms = math.min(unpack(times)),
          tflops = 2 * n ^ 3 / (ms / 1e3) / 1e12 }
        B.drop(a)
        B.drop(b)
      end)
      if not ok then results[#results + 1] = { n = n, dtype = dtype, error = tostring(err) } end
    end
  end
  return { device = o.device, gpu = B.device_name(o.device), reps = o.reps, results = results, small = o.small or nil }
end)
