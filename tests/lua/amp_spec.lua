-- ember.amp: GradScaler on the CPU (skipped steps on inf/NaN, the growth/backoff schedule,
-- unscaling, misuse errors, state dicts), the autocast API (nesting, begin/end, errors,
-- CPU tensors untouched by cuda autocast) and, when a GPU is present, the autocast cast
-- policy on cuda tensors.
local U = dofile(debug.getinfo(1, 'S').source:match('^@(.*[/\\])') .. 'tensor_testutil.lua')
local close, raises = U.close, U.raises
local nn, F, optim = ember.nn, ember.nn.functional, ember.optim

local has_dnnl = false
for _, f in ipairs(ember.build_features()) do has_dnnl = has_dnnl or f == 'dnnl' end

local function cuda_available()
  local ok, yes = pcall(function() return ember.cuda ~= nil and ember.cuda.is_available() end)
  return ok and yes == true
end

describe('GradScaler', function()
  local function setup(opts)
    local p = nn.Parameter(ember.tensor({ 1, 2, 3 }))
    local opt = optim.SGD({ p }, { lr = 0.1 })
    return p, opt, ember.amp.GradScaler(opts)
  end

  it('scales the loss, and unscale_ gives the unscaled gradients', function()
    local p, opt, scaler = setup({ init_scale = 1024 })
    local x = ember.tensor({ 0.5, -1, 2 })
    local loss = (p * x):sum()
    local scaled = scaler:scale(loss)
    close(scaled, 1024 * (0.5 - 2 + 6), 1e-6)
    scaled:backward()
    close(p.grad, { 512, -1024, 2048 }, 0)
    scaler:unscale_(opt)
    close(p.grad, { 0.5, -1, 2 }, 0)
    -- step after unscale_ does not unscale again
    assert.is_nil(scaler:step(opt))
    close(p, { 1 - 0.05, 2 + 0.1, 3 - 0.2 }, 1e-6)
    scaler:update()
    assert.are.equal(1024, scaler:get_scale())
    -- a list of losses
    local both = scaler:scale({ loss, loss * 2 })
    close(both[2], 2048 * 4.5, 1e-6)
  end)

  it('skips the step when a gradient is inf or NaN, and backs off', function()
    local p, opt, scaler = setup({ init_scale = 8, growth_interval = 3 })
    local q = nn.Parameter(ember.tensor({ 1, 1 }, { dtype = 'float64' }))
    local opt2 = optim.SGD({ p, q }, { lr = 1 })
    p.grad = ember.tensor({ 8, 8, 8 })
    q.grad = ember.tensor({ 8, math.huge }, { dtype = 'float64' })
    scaler:step(opt2)
    close(p, { 1, 2, 3 }, 0)              -- skipped
    close(q, { 1, 1 }, 0)
    close(p.grad, { 1, 1, 1 }, 0)         -- but unscaled, as PyTorch does
    scaler:update()
    assert.are.equal(4, scaler:get_scale())
    -- NaN too
    p.grad = ember.tensor({ 0 / 0, 0, 0 })
    q.grad = nil
    scaler:step(opt2)
    close(p, { 1, 2, 3 }, 0)
    scaler:update()
    assert.are.equal(2, scaler:get_scale())
    -- a finite step goes through
    p.grad = ember.tensor({ 2, 2, 2 })
    scaler:step(opt2)
    close(p, { 0, 1, 2 }, 0)
    scaler:update()
    assert.are.equal(2, scaler:get_scale())
    local _ = opt
  end)

  it('follows the growth and backoff schedule', function()
    local p, opt, scaler = setup({ init_scale = 16, growth_factor = 4, backoff_factor = 0.25, growth_interval = 2 })
    local function iteration(bad)
      p.grad = ember.tensor({ bad and math.huge or 1, 1, 1 })
      scaler:step(opt)
      scaler:update()
      return scaler:get_scale()
    end
    assert.are.equal(16, iteration(false))    -- 1 clean step
    assert.are.equal(64, iteration(false))    -- 2 in a row: grow
    assert.are.equal(64, iteration(false))
    assert.are.equal(16, iteration(true))     -- backoff resets the count
    assert.are.equal(16, iteration(false))
    assert.are.equal(64, iteration(false))
    assert.are.equal(16, iteration(true))
    assert.are.equal(4, iteration(true))
    -- an explicit scale
    scaler:step(opt)
    scaler:update(100)
    assert.are.equal(100, scaler:get_scale())
    -- growth never reaches inf
    local big = ember.amp.GradScaler({ init_scale = 1e308, growth_interval = 1 })
    p.grad = ember.tensor({ 1, 1, 1 })
    big:step(opt)
    big:update()
    assert.are.equal(1e308, big:get_scale())
  end)

  it('trains with the usual loop, clipping unscaled gradients', function()
    ember.manual_seed(3)
    local model = nn.Sequential { nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3) }
    local opt = optim.Adam(model:parameters(), { lr = 0.05 })
    local scaler = ember.amp.GradScaler({ init_scale = 2 ^ 10 })
    local x, y = ember.randn(32, 4), ember.randint(1, 4, { 32 })
    local first, last
    for it = 1, 40 do
      opt:zero_grad()
      local loss = F.cross_entropy(model(x), y)
      if it == 1 then first = loss:item() end
      last = loss:item()
      scaler:scale(loss):backward()
      scaler:unscale_(opt)
      local norm = nn.utils.clip_grad_norm_(model:parameters(), 10)
      assert.is_true(norm < 100, 'the norm of unscaled gradients: ' .. norm)
      scaler:step(opt)
      scaler:update()
    end
    assert.is_true(last < first * 0.5, string.format('loss %g -> %g', first, last))
  end)

  it('refuses misuse with the reason', function()
    local p, opt, scaler = setup()
    p.grad = ember.tensor({ 1, 1, 1 })
    raises(function() scaler:update() end, 'GradScaler:update: no inf checks were recorded')
    scaler:unscale_(opt)
    raises(function() scaler:unscale_(opt) end, 'GradScaler:unscale_: already called on this optimizer')
    scaler:step(opt)
    raises(function() scaler:step(opt) end, 'GradScaler:step: already called')
    raises(function() scaler:unscale_(opt) end, 'GradScaler:unscale_: called after step()')
    scaler:update()
    raises(function() scaler:step({}) end, 'GradScaler:step: expected an optimizer')
    raises(function() scaler:scale(3) end, 'GradScaler:scale: expected a tensor')
    raises(function() ember.amp.GradScaler({ init_scale = 0 }) end, 'GradScaler: init_scale must be')
    raises(function() ember.amp.GradScaler({ growth_factor = 1 }) end, 'GradScaler: growth_factor must be')
    raises(function() ember.amp.GradScaler({ backoff_factor = 1 }) end, 'GradScaler: backoff_factor must be')
    raises(function() ember.amp.GradScaler({ growth_interval = 1.5 }) end, 'GradScaler: growth_interval must be')
    raises(function() ember.amp.GradScaler({ growth = 2 }) end, "GradScaler: unknown option 'growth'")
  end)

  it('is transparent when disabled, and saves its state', function()
    local p, opt, scaler = setup({ enabled = false })
    local loss = (p * 2):sum()
    assert.are.equal(loss, scaler:scale(loss))
    assert.are.equal(1, scaler:get_scale())
    p.grad = ember.tensor({ 1, 1, 1 })
    scaler:step(opt)
    close(p, { 0.9, 1.9, 2.9 }, 1e-6)
    scaler:update()
    local a = ember.amp.GradScaler({ init_scale = 32, growth_interval = 5 })
    p.grad = ember.tensor({ 1, 1, 1 })
    a:step(opt)
    a:update()
    local b = ember.amp.GradScaler()
    b:load_state_dict(a:state_dict())
    assert.are.equal(32, b:get_scale())
    assert.are.equal(5, b:get_growth_interval())
    assert.are.equal(1, b:state_dict()._growth_tracker)
  end)
end)

describe('autocast', function()
  it('nests, restores after errors, and has begin/end tokens', function()
    assert.is_false(ember.is_autocast_enabled('cuda'))
    local seen = ember.autocast('cuda', { dtype = 'bfloat16' }, function(a, b)
      assert.is_true(ember.is_autocast_enabled('cuda'))
      assert.are.equal('bfloat16', ember.get_autocast_dtype('cuda'))
      ember.autocast('cuda', { enabled = false }, function()
        assert.is_false(ember.is_autocast_enabled('cuda'))
      end)
      assert.is_true(ember.is_autocast_enabled('cuda'))
      return a + b
    end, 2, 3)
    assert.are.equal(5, seen)
    assert.is_false(ember.is_autocast_enabled('cuda'))
    assert.has_error(function()
      ember.autocast('cuda', function() error('inside') end)
    end)
    assert.is_false(ember.is_autocast_enabled('cuda'))
    assert.are.equal('float16', ember.get_autocast_dtype('cuda'))    -- restored too
    local t1 = ember.autocast_begin('cuda')
    assert.are.equal('float16', ember.get_autocast_dtype('cuda'))
    local t2 = ember.autocast_begin('cuda', { dtype = 'bfloat16' })
    assert.are.equal('bfloat16', ember.get_autocast_dtype('cuda'))
    raises(function() ember.autocast_end(t1) end, 'autocast_end: expected the token of the innermost')
    ember.autocast_end(t2)
    assert.is_true(ember.is_autocast_enabled('cuda'))
    assert.are.equal('float16', ember.get_autocast_dtype('cuda'))
    ember.autocast_end(t1)
    assert.is_false(ember.is_autocast_enabled('cuda'))
    raises(function() ember.autocast_end(t1) end, 'autocast_end: expected the token of the innermost open')
  end)

  it('refuses float16 on the CPU, and bfloat16 there without oneDNN', function()
    raises(function() ember.autocast('cpu', { dtype = 'float16' }, function() end) end,
      'autocast: dtype float16 on cpu is not supported')
    if not has_dnnl then
      raises(function() ember.autocast('cpu', function() end) end, 'autocast: bfloat16 on cpu needs oneDNN')
    end
    assert.are.equal(7, ember.autocast('cpu', { enabled = false }, function() return 7 end))
    raises(function() ember.autocast('cuda', { dtype = 'float32' }, function() end) end,
      'autocast: dtype float32 is not a lower precision')
    raises(function() ember.autocast('tpu', function() end) end, "autocast: device_type must be 'cuda' or 'cpu'")
    raises(function() ember.autocast('cuda', { enable = true }, function() end) end, "autocast: unknown option 'enable'")
    raises(function() ember.autocast('cuda', {}) end, 'autocast: expected a function for argument 3')
  end)

  it('leaves CPU tensors alone under cuda autocast', function()
    local x, w = ember.randn(4, 3), ember.randn(5, 3)
    local y, m, s = ember.autocast('cuda', function()
      return F.linear(x, w), x:mm(w:t()), F.softmax(x, 2)
    end)
    assert.are.equal('float32', y.dtype)
    assert.are.equal('float32', m.dtype)
    assert.are.equal('float32', s.dtype)
    close(m, y:totable(), 1e-6)
  end)
end)

-- CPU autocast: the tensors stay float32; matmul/linear/conv2d round their operands to
-- bfloat16 inside oneDNN and sum in float32, forward and backward.
local function round_bf16(t) return t:to('bfloat16'):to('float32') end
local with_dnnl = has_dnnl and describe or pending
with_dnnl('autocast on the cpu (bfloat16, oneDNN)', function()
  it('computes linear and conv2d on bfloat16-rounded operands with float32 results', function()
    ember.manual_seed(3)
    local x, w, b = ember.randn(16, 64), ember.randn(32, 64), ember.randn(32)
    local y = ember.autocast('cpu', function() return F.linear(x, w, b) end)
    assert.are.equal('float32', y.dtype)
    -- what the rounding gives (float32 sums of exact products): close; plain float32: not equal
    local want = F.linear(round_bf16(x), round_bf16(w), b)
    close(y, want:totable(), 1e-4)
    local exact = F.linear(x, w, b)
    assert.is_true((y - exact):abs():max():item() > 1e-4)
    local img, k = ember.randn(2, 8, 9, 9), ember.randn(16, 8, 3, 3)
    local c = ember.autocast('cpu', function() return F.conv2d(img, k, nil, { padding = 1 }) end)
    assert.are.equal('float32', c.dtype)
    close(c, F.conv2d(round_bf16(img), round_bf16(k), nil, { padding = 1 }):totable(), 1e-4)
  end)

  it('runs the backward of nodes recorded under it in bfloat16 too, after the region ends', function()
    ember.manual_seed(4)
    local x = ember.randn(8, 32)
    local lin = nn.Linear(32, 16)
    local g = ember.randn(8, 16)
    local y = ember.autocast('cpu', function() return lin(x) end)
    assert.is_false(ember.is_autocast_enabled('cpu'))
    y:backward(g)
    -- the weight's gradient is g^T @ x on rounded operands
    local want = round_bf16(g):t():mm(round_bf16(x))
    close(lin.weight.grad, want:totable(), 1e-4)
    assert.is_true((lin.weight.grad - g:t():mm(x)):abs():max():item() > 1e-4)
  end)

  it('trains a small classifier to the same loss as float32, give or take rounding', function()
    local function train(amp)
      ember.manual_seed(5)
      local net = nn.Sequential { nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 3) }
      local opt = optim.SGD(net:parameters(), { lr = 0.1 })
      local x = ember.randn(64, 20)
      local t = ember.tensor(x:narrow(2, 1, 3):argmax(2):totable(), { dtype = 'int64' }):view(64)
      local loss
      for _ = 1, 30 do
        opt:zero_grad()
        loss = ember.autocast('cpu', { enabled = amp }, function() return F.cross_entropy(net(x), t) end)
        loss:backward()
        opt:step()
      end
      return loss:item()
    end
    local l32, l16 = train(false), train(true)
    assert.is_true(l32 < 0.9) -- it learns at all
    assert.is_true(math.abs(l16 - l32) < 0.05, string.format('float32 loss %g, bfloat16 %g', l32, l16))
  end)
end)

local on_gpu = cuda_available() and describe or pending
on_gpu('autocast on cuda', function()
  it('runs matmul/linear/conv2d in the autocast dtype and precision ops in float32', function()
    ember.manual_seed(1)
    local x = ember.randn(8, 16):to('cuda')
    local lin = nn.Linear(16, 4)
    lin:to('cuda')
    local conv_w = ember.randn(3, 2, 3, 3):to('cuda')
    local img = ember.randn(2, 2, 8, 8):to('cuda')
    local target = ember.tensor({ 1, 2, 3, 4, 1, 2, 3, 4 }, { dtype = 'int64' }):to('cuda')
    local out = ember.autocast('cuda', { dtype = 'float16' }, function()
      local h = lin(x)
      assert.are.equal('float16', h.dtype)
      assert.are.equal('float16', x:matmul(x:t()).dtype)
      assert.are.equal('float16', x:mm(x:t()).dtype)
      assert.are.equal('float16', F.conv2d(img, conv_w).dtype)
      assert.are.equal('float32', F.softmax(h, 2).dtype)
      assert.are.equal('float32', h:sum().dtype)
      local loss = F.cross_entropy(h, target)
      assert.are.equal('float32', loss.dtype)
      return loss
    end)
    out:backward()
    assert.are.equal('float32', lin.weight.grad.dtype)
    -- against float32 on the CPU, to float16 rounding
    local ref = F.cross_entropy(F.linear(x:to('cpu'), lin.weight:detach():to('cpu'), lin.bias:detach():to('cpu')),
      target:to('cpu'))
    close(out:to('cpu'):item(), ref:item(), 2e-2)
  end)

  it('scales, unscales and steps on the GPU', function()
    local p = nn.Parameter(ember.tensor({ 1, 2, 3 }):to('cuda'))
    local opt = optim.SGD({ p }, { lr = 0.1 })
    local scaler = ember.amp.GradScaler({ init_scale = 4 })
    p.grad = ember.tensor({ 4, math.huge, 4 }):to('cuda')
    scaler:step(opt)
    close(p:to('cpu'), { 1, 2, 3 }, 0)
    scaler:update()
    assert.are.equal(2, scaler:get_scale())
    p.grad = ember.tensor({ 2, 2, 2 }):to('cuda')
    scaler:step(opt)
    close(p:to('cpu'), { 0.9, 1.9, 2.9 }, 1e-6)
  end)
end)
