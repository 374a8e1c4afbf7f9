-- CUDA backend: matrix products (cuBLAS), conv2d (cuDNN), pooling, batch and layer norm,
-- forward and backward, each checked against the CPU backend on the same inputs. Runs
-- only where a GPU is usable; elsewhere the file reports one pending test.
local U = dofile(debug.getinfo(1, 'S').source:match('^@(.*[/\\])') .. 'tensor_testutil.lua')
local close = U.close
local F = ember.nn.functional

local function cuda_available()
  if ember.cuda and ember.cuda.is_available then return ember.cuda.is_available() end
  local ok, n = pcall(ember.device_count, 'cuda')
  return ok and n > 0
end

if not cuda_available() then
  describe('cuda nn', function()
    it('needs a GPU', function() pending('no usable CUDA device') end)
  end)
  return
end

local unpack = unpack or table.unpack

local function randn(shape, dtype)
  local args = { unpack(shape) }
  args[#args + 1] = { dtype = dtype or 'float32' }
  return ember.randn(unpack(args))
end

-- Tolerances (absolute + relative, as U.close): cuBLAS/cuDNN sum in other orders than
-- OpenBLAS, so float32 agrees to a few ulps times sqrt(K).
local TOL = { float32 = 2e-4, float64 = 1e-10 }

local function gpu(t) return t:to('cuda') end

-- a leaf on the GPU holding the same values as the CPU tensor t
local function gpu_leaf(t) return t:detach():to('cuda'):requires_grad_() end
local function cpu_leaf(t) return t:detach():clone():requires_grad_() end

-- the gradient of sum(y * seed) flows into y's leaves
local function backprop(y, seed)
  local loss = (y * seed):sum()
  loss:backward()
end

local function same(g, c, tol, what)
  assert.are.same(c.shape, g.shape, what)
  assert.are.equal('cuda:0', g.device, what)
  local ok, err = pcall(close, g:to('cpu'), c:totable(), tol)
  assert(ok, (what or '') .. ': ' .. tostring(err))
end

describe('cuda matmul', function()
  for _, dtype in ipairs({ 'float32', 'float64' }) do
    local tol = TOL[dtype]
    it('matches the CPU for every operand layout (' .. dtype .. ')', function()
      local a, b = randn({ 33, 47 }, dtype), randn({ 47, 29 }, dtype)
      local cases = {
        { 'contiguous', a, b },
        { 'a transposed', randn({ 47, 33 }, dtype):t(), b },
        { 'b transposed', a, randn({ 29, 47 }, dtype):t() },
        { 'both transposed', randn({ 47, 33 }, dtype):t(), randn({ 29, 47 }, dtype):t() },
        { 'padded rows', randn({ 33, 60 }, dtype):narrow(2, 5, 47), b },
        { 'two non-unit strides (copied)', randn({ 33, 47, 2 }, dtype):select(3, 2), b },
        { 'an expanded row (copied)', randn({ 1, 47 }, dtype):expand(33, 47), b },
        { 'row vector', randn({ 1, 47 }, dtype), b },
        { 'column vector result', a, randn({ 47, 1 }, dtype) },
      }
      for _, c in ipairs(cases) do
        same(gpu(c[2]):matmul(gpu(c[3])), c[2]:matmul(c[3]), tol, c[1])
      end
      local v = randn({ 47 }, dtype)
      same(gpu(a):mv(gpu(v)), a:mv(v), tol, 'mv')
      same(gpu(v):dot(gpu(v)), v:dot(v), tol, 'dot')
      same(gpu(v):outer(gpu(v)), v:outer(v), tol, 'outer')
      local c = randn({ 33, 29 }, dtype)
      same(gpu(c):addmm(gpu(a), gpu(b), { beta = 0.5, alpha = -2 }), c:addmm(a, b, { beta = 0.5, alpha = -2 }), tol,
        'addmm')
    end)

    it('matches the CPU for batched and broadcast operands (' .. dtype .. ')', function()
      local cases = {
        { 'bmm', randn({ 6, 9, 11 }, dtype), randn({ 6, 11, 7 }, dtype) },
        { 'bmm, transposed batches', randn({ 6, 11, 9 }, dtype):transpose(2, 3), randn({ 6, 7, 11 }, dtype):transpose(2, 3) },
        { 'batch-major permuted', randn({ 9, 6, 11 }, dtype):permute(2, 1, 3), randn({ 6, 11, 7 }, dtype) },
        { 'shared right operand', randn({ 4, 5, 9, 11 }, dtype), randn({ 11, 7 }, dtype) },
        { 'shared left operand', randn({ 9, 11 }, dtype), randn({ 4, 11, 7 }, dtype) },
        { 'broadcast on both sides', randn({ 2, 1, 9, 11 }, dtype), randn({ 3, 11, 7 }, dtype) },
        { 'vector @ batch', randn({ 11 }, dtype), randn({ 3, 11, 7 }, dtype) },
      }
      for _, c in ipairs(cases) do
        same(gpu(c[2]):matmul(gpu(c[3])), c[2]:matmul(c[3]), tol, c[1])
      end
      local a, b = randn({ 6, 9, 11 }, dtype), randn({ 6, 11, 7 }, dtype)
      same(gpu(a):bmm(gpu(b)), a:bmm(b), tol, 'bmm entry')
    end)

    it('differentiates through matmul on the GPU (' .. dtype .. ')', function()
      local a, b = randn({ 3, 8, 5 }, dtype), randn({ 5, 4 }, dtype)
      local ca, cb, ga, gb = cpu_leaf(a), cpu_leaf(b), gpu_leaf(a), gpu_leaf(b)
      local w = randn({ 3, 8, 4 }, dtype)
      backprop(ca:matmul(cb), w)
      backprop(ga:matmul(gb), gpu(w))
      same(ga.grad, ca.grad, tol, 'grad a')
      same(gb.grad, cb.grad, tol, 'grad b')
    end)
  end

  it('computes float16 and bfloat16 products with float accumulation', function()
    for _, dtype in ipairs({ 'float16', 'bfloat16' }) do
      local a, b = randn({ 4, 24, 40 }):to(dtype), randn({ 40, 16 }):to(dtype)
      local ok, r = pcall(function() return gpu(a):matmul(gpu(b)) end)
      if not ok and tostring(r):find('storage%-only') then
        pending('matmul on ' .. dtype .. ' is refused by the tensor core (storage-only dtype)')
        return
      end
      assert(ok, tostring(r))
      assert.are.equal(dtype, r.dtype)
      -- the exact product of the rounded inputs, rounded once: within a few units of the
      -- output dtype's last place
      local want = a:float():matmul(b:float())
      local ok2, err = pcall(close, r:float():to('cpu'), want:totable(), dtype == 'float16' and 4e-3 or 2e-2)
      assert(ok2, dtype .. ': ' .. tostring(err))
    end
  end)

  it('refuses integer products with a dtype error', function()
    local a = ember.ones(3, 3, { dtype = 'int32' })
    local ok, err = pcall(function() return gpu(a):matmul(gpu(a)) end)
    assert.is_false(ok)
    assert.is_truthy(tostring(err):find('matmul: dtype int32 is not supported on cuda', 1, true), tostring(err))
  end)
end)

-- conv2d through F.conv2d: the output and every gradient, against the CPU.
local CONVS = {
  { name = '3x3, padding 1', x = { 2, 4, 9, 8 }, w = { 6, 4, 3, 3 }, opts = { padding = 1 } },
  { name = 'stride 2, no bias', x = { 3, 3, 11, 10 }, w = { 5, 3, 3, 3 }, opts = { stride = 2 }, nobias = true },
  { name = 'dilation 2', x = { 2, 3, 12, 12 }, w = { 4, 3, 3, 3 }, opts = { dilation = 2, padding = 2 } },
  { name = 'groups 2', x = { 2, 4, 7, 9 }, w = { 6, 2, 3, 3 }, opts = { groups = 2, padding = 1 } },
  { name = 'depthwise', x = { 2, 4, 8, 8 }, w = { 8, 1, 3, 3 }, opts = { groups = 4, stride = 2, padding = 1 } },
  { name = '1x1', x = { 4, 8, 5, 5 }, w = { 3, 8, 1, 1 }, opts = {} },
  { name = 'rectangular, mixed strides', x = { 2, 3, 10, 13 }, w = { 4, 3, 3, 2 },
    opts = { stride = { 2, 1 }, padding = { 1, 0 }, dilation = { 1, 2 } } },
  { name = 'unbatched', x = { 3, 6, 6 }, w = { 2, 3, 3, 3 }, opts = { padding = 1 } },
}

describe('cuda conv2d', function()
  for _, dtype in ipairs({ 'float32', 'float64' }) do
    local tol = TOL[dtype]
    for _, case in ipairs(CONVS) do
      it(case.name .. ' (' .. dtype .. ')', function()
        local x, w = randn(case.x, dtype), randn(case.w, dtype)
        local b = not case.nobias and randn({ case.w[1] }, dtype) or nil
        local cx, cw, gx, gw = cpu_leaf(x), cpu_leaf(w), gpu_leaf(x), gpu_leaf(w)
        local cb, gb = b and cpu_leaf(b), b and gpu_leaf(b)
        local cy = F.conv2d(cx, cw, cb, case.opts)
        local gy = F.conv2d(gx, gw, gb, case.opts)
        same(gy, cy, tol, 'output')
        local seed = randn(cy.shape, dtype)
        backprop(cy, seed)
        backprop(gy, gpu(seed))
        same(gx.grad, cx.grad, tol, 'input gradient')
        same(gw.grad, cw.grad, tol, 'weight gradient')
        if b then same(gb.grad, cb.grad, tol, 'bias gradient') end
      end)
    end
  end

  it('gives the same weight gradient on every run (deterministic algorithms)', function()
    local x, w = randn({ 8, 16, 14, 14 }), randn({ 32, 16, 3, 3 })
    local seed = randn({ 8, 32, 14, 14 })
    local grads = {}
    for run = 1, 2 do
      local gw = gpu_leaf(w)
      backprop(F.conv2d(gpu(x), gw, nil, { padding = 1 }), gpu(seed))
      grads[run] = gw.grad:to('cpu')
    end
    close(grads[2], grads[1]:totable(), 0)
  end)
end)

-- float16/bfloat16 convolution (cuDNN on tensor cores, float accumulation), reached
-- through autocast; compared with the CPU's float32 convolution of the same rounded inputs.
describe('cuda conv2d under autocast', function()
  for _, dt in ipairs({ 'float16', 'bfloat16' }) do
    it('computes in ' .. dt, function()
      if not ember.autocast then pending('ember.autocast is not available') return end
      local x, w, b = randn({ 2, 4, 9, 8 }), randn({ 6, 2, 3, 3 }), randn({ 6 })
      local opts = { padding = 1, stride = { 1, 2 }, groups = 2 }
      local gx, gw, gb = gpu_leaf(x), gpu_leaf(w), gpu_leaf(b)
      local ok, y = pcall(ember.autocast, 'cuda', { dtype = dt }, function() return F.conv2d(gx, gw, gb, opts) end)
      if not ok and (tostring(y):find('storage%-only') or tostring(y):find('float32 or float64')) then
        pending('conv2d in ' .. dt .. ' is not accepted yet: ' .. tostring(y))
        return
      end
      assert(ok, tostring(y))
      assert.are.equal(dt, y.dtype)
      local rx, rw, rb = cpu_leaf(x:to(dt):float()), cpu_leaf(w:to(dt):float()), cpu_leaf(b:to(dt):float())
      local want = F.conv2d(rx, rw, rb, opts)
      local tol = dt == 'float16' and 1e-2 or 6e-2
      same(y:float(), want, tol, 'output')
      local seed = randn(want.shape)
      backprop(y:float(), gpu(seed))
      backprop(want, seed)
      same(gx.grad, rx.grad, tol, 'input gradient')
      same(gw.grad, rw.grad, tol, 'weight gradient')
      same(gb.grad, rb.grad, tol, 'bias gradient')
    end)
  end
end)

describe('cuda pooling', function()
  for _, dtype in ipairs({ 'float32', 'float64' }) do
    -- pooling sums and compares in the CPU's order: the results are the CPU's exactly
    local tol = 0
    local MAX = {
      { 'kernel 2', 2, nil },
      { 'overlapping windows', 3, { stride = 1 } },
      { 'padding, dilation, ceil_mode', 3, { stride = 2, padding = 1, dilation = 2, ceil_mode = true } },
      { 'rectangular', { 3, 2 }, { stride = { 2, 1 }, padding = { 1, 0 } } },
    }
    for _, case in ipairs(MAX) do
      it('max_pool2d, ' .. case[1] .. ' (' .. dtype .. ')', function()
        -- rounded values make ties, which must resolve to the CPU's first maximum
        local x = (randn({ 2, 3, 11, 9 }, dtype) * 2):round()
        local cx, gx = cpu_leaf(x), gpu_leaf(x)
        local cy, gy = F.max_pool2d(cx, case[2], case[3]), F.max_pool2d(gx, case[2], case[3])
        same(gy, cy, tol, 'output')
        local seed = randn(cy.shape, dtype)
        backprop(cy, seed)
        backprop(gy, gpu(seed))
        same(gx.grad, cx.grad, tol, 'gradient')
      end)
    end

    local AVG = {
      { 'kernel 2', 2, nil },
      { 'padding, counting it', 3, { stride = 2, padding = 1 } },
      { 'padding, not counting it, ceil_mode', 3, { stride = 2, padding = 1, count_include_pad = false, ceil_mode = true } },
      { 'overlapping windows', { 3, 2 }, { stride = 1 } },
    }
    for _, case in ipairs(AVG) do
      it('avg_pool2d, ' .. case[1] .. ' (' .. dtype .. ')', function()
        local x = randn({ 2, 3, 10, 9 }, dtype)
        local cx, gx = cpu_leaf(x), gpu_leaf(x)
        local cy, gy = F.avg_pool2d(cx, case[2], case[3]), F.avg_pool2d(gx, case[2], case[3])
        same(gy, cy, tol, 'output')
        local seed = randn(cy.shape, dtype)
        backprop(cy, seed)
        backprop(gy, gpu(seed))
        same(gx.grad, cx.grad, tol, 'gradient')
      end)
    end

    it('adaptive_avg_pool2d, shrinking and growing (' .. dtype .. ')', function()
      for _, size in ipairs({ { 4, 3 }, 1, { 13, 11 } }) do
        local x = randn({ 2, 3, 9, 7 }, dtype)
        local cx, gx = cpu_leaf(x), gpu_leaf(x)
        local cy, gy = F.adaptive_avg_pool2d(cx, size), F.adaptive_avg_pool2d(gx, size)
        same(gy, cy, tol, 'output')
        local seed = randn(cy.shape, dtype)
        backprop(cy, seed)
        backprop(gy, gpu(seed))
        same(gx.grad, cx.grad, tol, 'gradient')
      end
    end)
  end
end)

describe('cuda batch_norm', function()
  for _, dtype in ipairs({ 'float32', 'float64' }) do
    local tol = TOL[dtype]
    for _, shape in ipairs({ { 8, 3, 5, 4 }, { 16, 5 } }) do
      local label = table.concat(shape, 'x') .. ' ' .. dtype
      it('trains and evaluates like the CPU, ' .. label, function()
        -- a large mean against a small spread: the shifted sums must not cancel
        local x = randn(shape, dtype) * 0.5 + 100
        local C = shape[2]
        local w, b = randn({ C }, dtype), randn({ C }, dtype)
        local rm, rv = randn({ C }, dtype), randn({ C }, dtype):abs() + 0.5
        local crm, crv, grm, grv = rm:clone(), rv:clone(), gpu(rm), gpu(rv)
        local cx, cw, cb = cpu_leaf(x), cpu_leaf(w), cpu_leaf(b)
        local gx, gw, gb = gpu_leaf(x), gpu_leaf(w), gpu_leaf(b)
        local opts_c = { weight = cw, bias = cb, training = true, momentum = 0.3 }
        local opts_g = { weight = gw, bias = gb, training = true, momentum = 0.3 }
        local cy, gy = F.batch_norm(cx, crm, crv, opts_c), F.batch_norm(gx, grm, grv, opts_g)
        same(gy, cy, tol, 'training output')
        same(grm, crm, tol, 'running mean')
        same(grv, crv, tol, 'running var')
        local seed = randn(shape, dtype)
        backprop(cy, seed)
        backprop(gy, gpu(seed))
        same(gx.grad, cx.grad, tol, 'input gradient')
        same(gw.grad, cw.grad, tol, 'weight gradient')
        same(gb.grad, cb.grad, tol, 'bias gradient')
        -- evaluation: the running statistics are constants
        local ex, gex = cpu_leaf(x), gpu_leaf(x)
        local ey = F.batch_norm(ex, crm, crv, { weight = cw:detach(), bias = cb:detach() })
        local gey = F.batch_norm(gex, grm, grv, { weight = gw:detach(), bias = gb:detach() })
        same(gey, ey, tol, 'evaluation output')
        backprop(ey, seed)
        backprop(gey, gpu(seed))
        same(gex.grad, ex.grad, tol, 'evaluation input gradient')
      end)
    end
  end

  it('gives the same gradients on every run', function()
    local x, seed = randn({ 32, 4, 16, 16 }), randn({ 32, 4, 16, 16 })
    local out = {}
    for run = 1, 2 do
      local gx, gw = gpu_leaf(x), gpu_leaf(ember.ones(4))
      backprop(F.batch_norm(gx, nil, nil, { weight = gw, training = true }), gpu(seed))
      out[run] = { gx.grad:to('cpu'), gw.grad:to('cpu') }
    end
    close(out[2][1], out[1][1]:totable(), 0)
    close(out[2][2], out[1][2]:totable(), 0)
  end)
end)

describe('cuda layer_norm', function()
  for _, dtype in ipairs({ 'float32', 'float64' }) do
    local tol = TOL[dtype]
    local CASES = {
      { 'last dim, weight and bias', { 6, 5, 16 }, { 16 }, true, true },
      { 'last two dims, weight only', { 4, 3, 10 }, { 3, 10 }, true, false },
      { 'no affine', { 7, 33 }, { 33 }, false, false },
      { 'long rows', { 3, 3000 }, { 3000 }, true, true },
      { 'many short rows', { 700, 8 }, { 8 }, true, true },
    }
    for _, case in ipairs(CASES) do
      it(case[1] .. ' (' .. dtype .. ')', function()
        local x = randn(case[2], dtype) * 3 + 1
        local w = case[4] and randn(case[3], dtype) or nil
        local b = case[5] and randn(case[3], dtype) or nil
        local cx, gx = cpu_leaf(x), gpu_leaf(x)
        local cw, gw = w and cpu_leaf(w), w and gpu_leaf(w)
        local cb, gb = b and cpu_leaf(b), b and gpu_leaf(b)
        local cy = F.layer_norm(cx, case[3], { weight = cw, bias = cb })
        local gy = F.layer_norm(gx, case[3], { weight = gw, bias = gb })
        same(gy, cy, tol, 'output')
        local seed = randn(case[2], dtype)
        backprop(cy, seed)
        backprop(gy, gpu(seed))
        same(gx.grad, cx.grad, tol, 'input gradient')
        if w then same(gw.grad, cw.grad, tol, 'weight gradient') end
        if b then same(gb.grad, cb.grad, tol, 'bias gradient') end
      end)
    end
  end
end)
