-- Autograd from Lua: fields, backward through the Tensor methods (analytic gradients),
-- grad modes, in-place refusals, custom Functions with a Lua backward, leaf hooks.
local U = dofile(debug.getinfo(1, 'S').source:match('^@(.*[/\\])') .. 'tensor_testutil.lua')
local close, raises = U.close, U.raises

local F64 = { dtype = 'float64' }
local function leaf(values) return ember.tensor(values, F64):requires_grad_() end

describe('autograd fields', function()
  it('report requires_grad, grad, grad_fn and is_leaf', function()
    local x = ember.tensor({1, 2, 3})
    assert.is_false(x.requires_grad)
    assert.is_nil(x.grad)
    assert.is_nil(x.grad_fn)
    assert.is_true(x:is_leaf())
    assert.are.equal(x, x:requires_grad_())
    assert.is_true(x.requires_grad)
    local y = x * 2
    assert.is_true(y.requires_grad)
    assert.is_false(y:is_leaf())
    assert.are.equal('MulBackward', y.grad_fn)
    assert.are.equal('SumBackward', y:sum().grad_fn)
    x:requires_grad_(false)
    assert.is_false(x.requires_grad)
    x.requires_grad = true
    assert.is_true(x.requires_grad)
  end)

  it('assigns and clears .grad, checking shape and dtype', function()
    local x = leaf({1, 2})
    x.grad = ember.tensor({5, 6}, F64)
    close(x.grad, {5, 6})
    x.grad = nil
    assert.is_nil(x.grad)
    raises(function() x.grad = ember.zeros(3, F64) end, 'set_grad: gradient has shape [3], the tensor has [2]')
    raises(function() x.grad = ember.zeros(2) end, 'set_grad: gradient has dtype float32, the tensor has float64')
    raises(function() x.grad = 'g' end, 'grad: expected a tensor, a SparseGrad or nil to assign to .grad, got string')
  end)

  it('refuses requires_grad on integer tensors and on non-leaves', function()
    raises(function() ember.tensor({1, 2}, { dtype = 'int64' }):requires_grad_() end,
      'requires_grad_: only floating-point tensors can require grad, got int64')
    local y = leaf({1}) * 2
    raises(function() y:requires_grad_(false) end, 'requires_grad_: can only change the flag of leaf tensors')
  end)
end)

describe('backward', function()
  it('gives analytic gradients of elementwise ops with broadcasting', function()
    local x, w = leaf({0.5, -1, 2}), leaf({1, 2, 3})
    local loss = (x * x * w + x:sin()):sum()
    loss:backward()
    close(x.grad, {2 * 0.5 * 1 + math.cos(0.5), 2 * -1 * 2 + math.cos(-1), 2 * 2 * 3 + math.cos(2)}, 1e-12)
    close(w.grad, {0.25, 1, 4}, 1e-12)
    -- a [2, 3] + b [3]: b's gradient sums over the broadcast rows
    local a, b = leaf({{1, 2, 3}, {4, 5, 6}}), leaf({1, 0, -1})
    local loss = ((a + b) ^ 2):sum()
    loss:backward()
    close(a.grad, {{4, 4, 4}, {10, 10, 10}}, 1e-12)
    close(b.grad, {14, 14, 14}, 1e-12)
    -- scalars on either side, sub/div, unary minus, add with alpha
    local t = leaf({1, 2})
    local loss = ((1 - t) / 2 - (-t) + (3 / t) + t:add(t, 2)):sum()
    loss:backward()
    close(t.grad, {-0.5 + 1 - 3 + 3, -0.5 + 1 - 0.75 + 3}, 1e-12)
  end)

  it('gives analytic gradients of matmul, mm, mv, dot and outer', function()
    local A = leaf({{1, 2, 3}, {4, 5, 6}})
    local B = leaf({{1, -1}, {0, 2}, {3, 1}})
    local W = ember.tensor({{1, 2}, {3, 4}}, F64)
    local loss = (A:matmul(B) * W):sum()
    loss:backward()
    close(A.grad, W:matmul(B:t()):totable(), 1e-12)     -- dA = W B^T
    close(B.grad, A:t():matmul(W):totable(), 1e-12)     -- dB = A^T W
    A.grad, B.grad = nil, nil
    A:mm(B):sum():backward()
    close(A.grad, {{0, 2, 4}, {0, 2, 4}}, 1e-12)
    local v, u = leaf({1, 2}), leaf({3, 4, 5})
    v:dot(v):backward()
    close(v.grad, {2, 4}, 1e-12)
    v.grad = nil
    v:outer(u):sum():backward()
    close(v.grad, {12, 12}, 1e-12)
    close(u.grad, {3, 3, 3}, 1e-12)
    A.grad = nil
    A:mv(u):sum():backward()
    close(A.grad, {{3, 4, 5}, {3, 4, 5}}, 1e-12)
    raises(function() A:mm(u) end, 'mm: expected the second operand to be 2-d, got shape [3]')
  end)

  it('gives analytic gradients of reductions, softmax and log_softmax', function()
    local x = leaf({{1, 2}, {3, 5}})
    x:mean(2):sum():backward()
    close(x.grad, {{0.5, 0.5}, {0.5, 0.5}}, 1e-12)
    local z, w = leaf({0.1, 0.7, -0.3}), {1, 2, 3}
    local s = ember.no_grad(function() return z:softmax(1):totable() end)
    local loss = (z:softmax(1) * ember.tensor(w, F64)):sum()
    loss:backward()
    local sw = s[1] * w[1] + s[2] * w[2] + s[3] * w[3]
    close(z.grad, {s[1] * (w[1] - sw), s[2] * (w[2] - sw), s[3] * (w[3] - sw)}, 1e-12)
    z.grad = nil
    local loss = (z:log_softmax(1) * ember.tensor(w, F64)):sum()
    loss:backward()
    close(z.grad, {w[1] - 6 * s[1], w[2] - 6 * s[2], w[3] - 6 * s[3]}, 1e-12)
    local m = leaf({1, 7, 3})
    m:max():backward()
    close(m.grad, {0, 1, 0})
  end)

  it('flows through views, indexing, joins and conversions', function()
    local x = leaf({{1, 2, 3}, {4, 5, 6}})
    local parts = ember.cat({ x:narrow(2, 1, 2):t():reshape(-1), x:select(1, 2):view(3, 1):squeeze(),
      x[{1, 3}]:unsqueeze(1) })
    -- {x11, x21, x12, x22} .. {x21, x22, x23} .. {x13}, weighted 1..8
    local loss = (parts * ember.arange(1, 9, 1, F64)):sum()
    loss:backward()
    close(x.grad, {{1, 3, 8}, {2 + 5, 4 + 6, 7}}, 1e-12)
    local y = leaf({1, 2, 3, 4})
    ember.stack({ y:index_select(1, {4, 1}), y:gather(1, {2, 2}) }):sum():backward()
    close(y.grad, {1, 2, 0, 1}, 1e-12)
    local f = leaf({1, 2})
    local loss = (f:float() * 3):sum()
    loss:backward()
    close(f.grad, {3, 3})
    assert.are.equal('float64', f.grad.dtype)
    local c = leaf({-2, 0.5, 3})
    local loss = (c:clamp(-1, 1) + ember.where(c:gt(0), c, c * 10) + c:clone() + c:masked_fill(c:lt(0), 0)):sum()
    loss:backward()
    close(c.grad, {0 + 10 + 1 + 0, 1 + 1 + 1 + 1, 0 + 1 + 1 + 1}, 1e-12)
    local d = leaf({1, 2, 3, 4})
    local loss = (d:masked_select(ember.tensor({true, false, true, false})) * 5):sum()
    loss:backward()
    close(d.grad, {5, 0, 5, 0}, 1e-12)
  end)

  it('accumulates over backward calls and honours retain_graph', function()
    local x = leaf({1, 2})
    local y = (x * x):sum()
    y:backward({ retain_graph = true })
    y:backward()
    close(x.grad, {4, 8}, 1e-12)
    raises(function() y:backward() end, 'backward: trying to run backward through the graph a second time')
  end)

  it('takes an explicit gradient for non-scalar outputs', function()
    local x = leaf({1, 2, 3})
    local y = x * 2
    raises(function() y:backward() end, 'backward: the tensor has shape [3]; a gradient can be implied only for ' ..
      'one-element outputs')
    y:backward(ember.tensor({1, 10, 100}, F64))
    close(x.grad, {2, 20, 200}, 1e-12)
    raises(function() (x * 2):backward(ember.ones(2, F64)) end, 'backward: gradient has shape [2], the tensor has [3]')
    raises(function() ember.ones(1):backward() end, 'backward: the tensor does not require grad')
    raises(function() y:backward({ retain = true }) end, "backward: unknown option 'retain' (expected retain_graph)")
  end)

  it('keeps gradients of non-leaves with retain_grad, and detach stops them', function()
    local x = leaf({1, 2})
    local h = (x * 3):retain_grad()
    local loss = (h * h):sum()
    loss:backward()
    close(h.grad, {6, 12}, 1e-12)
    close(x.grad, {18, 36}, 1e-12)
    local d = (x * 3):detach()
    assert.is_false(d.requires_grad)
    assert.is_true(d:is_leaf())
    assert.is_true(x:detach():shares_storage(x))
    x.grad = nil
    local loss = ((x * 3):detach() * x):sum()
    loss:backward()
    close(x.grad, {3, 6}, 1e-12)
  end)
end)

describe('grad modes', function()
  it('no_grad records nothing and restores the mode, even after an error', function()
    local x = leaf({1, 2})
    assert.is_true(ember.is_grad_enabled())
    local y, extra = ember.no_grad(function(a) return a * 2, 'second' end, x)
    assert.is_false(y.requires_grad)
    assert.are.equal('second', extra)
    assert.is_true(ember.is_grad_enabled())
    local ok, err = pcall(ember.no_grad, function() error('inside') end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find('inside', 1, true))
    assert.is_true(ember.is_grad_enabled())
    ember.no_grad(function()
      assert.is_false(ember.is_grad_enabled())
      local z = ember.enable_grad(function() return x * 2 end)
      assert.is_true(z.requires_grad)
      assert.is_false(ember.is_grad_enabled())
    end)
    ember.set_grad_enabled(false)
    assert.is_false((x * 2).requires_grad)
    ember.set_grad_enabled(true)
    raises(function() ember.no_grad(42) end, 'no_grad: expected a function for argument 1, got number')
  end)

  it('refuses in-place ops on tensors that require grad while recording', function()
    local x = leaf({1, 2})
    raises(function() x:add_(1) end, 'add_: in-place operation on a tensor that requires grad (a leaf); run it ' ..
      'inside no_grad() or on a detached copy')
    raises(function() (x * 2):mul_(2) end, 'mul_: in-place operation on a tensor that requires grad;')
    raises(function() x:fill_(0) end, 'fill_: in-place operation on a tensor that requires grad')
    raises(function() x:exp_() end, 'exp_: in-place operation')
    raises(function() x[{1}] = 5 end, 't[{...}] = v: in-place operation')
    raises(function() x:copy_(ember.zeros(2, F64)) end, 'copy_: in-place operation')
    raises(function() ember.zeros(2, F64):add_(x) end,
      'add_: an in-place operation cannot record gradients for its operand that requires grad')
    raises(function() x:cumprod(1) end, 'cumprod: not differentiable in ember yet')
    ember.no_grad(function() x:add_(1) end)
    close(x, {2, 3})
    x:detach():mul_(2)   -- a detached alias writes the same storage
    close(x, {4, 6})
  end)
end)

describe('custom Function', function()
  local Square = ember.autograd.Function{
    name = 'SquareBackward',
    forward = function(ctx, x) ctx:save_for_backward(x); return x * x end,
    backward = function(ctx, g) return g * 2 * ctx.saved_tensors[1] end,
  }

  it('runs forward without recording and backward in Lua', function()
    local x = leaf({1, 2, 3})
    local y = Square(x)
    assert.are.equal('SquareBackward', y.grad_fn)
    close(y, {1, 4, 9})
    local loss = (y * ember.tensor({1, 10, 100}, F64)):sum()
    loss:backward()
    close(x.grad, {2, 40, 600}, 1e-12)
    -- no input requires grad: a plain result
    local z = Square:apply(ember.tensor({2}, F64))
    assert.is_false(z.requires_grad)
  end)

  it('takes several inputs, non-tensor arguments and several outputs', function()
    local ScaleBoth = ember.autograd.Function{
      forward = function(ctx, a, k, b)
        ctx.k = k
        ctx:save_for_backward(a, b)
        return a * k, a * b
      end,
      backward = function(ctx, ga, gab)
        local a, b = ctx.saved_tensors[1], ctx.saved_tensors[2]
        return ga * ctx.k + gab * b, nil, gab * a
      end,
    }
    local a, b = leaf({1, 2}), leaf({3, 4})
    local p, q = ScaleBoth(a, 5, b)
    assert.are.equal('CustomFunctionBackward', p.grad_fn)
    local loss = (p:sum() + (q * 2):sum())
    loss:backward()
    close(a.grad, {5 + 6, 5 + 8}, 1e-12)
    close(b.grad, {2, 4}, 1e-12)
    -- an output that got no gradient arrives as zeros
    a.grad, b.grad = nil, nil
    local p2 = ScaleBoth(a, 5, b)
    p2:sum():backward()
    close(a.grad, {5, 5}, 1e-12)
    close(b.grad, {0, 0}, 1e-12)
  end)

  it('keeps an input returned as it is a leaf', function()
    local Same = ember.autograd.Function{
      forward = function(_, x) return x end,
      backward = function(_, g) return g * 3 end,
    }
    local x = leaf({1, 2})
    local y = Same(x)
    assert.is_true(x:is_leaf())
    assert.is_false(y:is_leaf())
    y:sum():backward()
    close(x.grad, {3, 3}, 1e-12)
  end)

  it('reports an error raised in backward as an error from backward()', function()
    local Bad = ember.autograd.Function{
      name = 'BadBackward',
      forward = function(_, x) return x * 1 end,
      backward = function() error('broken gradient') end,
    }
    local x = leaf({1, 2})
    local loss = Bad(x):sum()
    local msg = raises(function() loss:backward() end, 'backward of BadBackward: ', true)
    assert.truthy(msg:find('broken gradient', 1, true), msg)
    assert.is_nil(x.grad)
    -- the process and the tape still work afterwards
    Square(x):sum():backward()
    close(x.grad, {2, 4}, 1e-12)
  end)

  it('checks what backward returns', function()
    local WrongShape = ember.autograd.Function{
      forward = function(_, x) return x * 1 end,
      backward = function() return ember.ones(5, F64) end,
    }
    local NotTensor = ember.autograd.Function{
      forward = function(_, x) return x * 1 end,
      backward = function() return 'g' end,
    }
    local x = leaf({1, 2})
    raises(function() WrongShape(x):sum():backward() end,
      'CustomFunctionBackward: backward returned a gradient of shape [5] for input 1 of shape [2]')
    raises(function() NotTensor(x):sum():backward() end,
      'backward of CustomFunctionBackward: backward returned string for argument 1, expected a tensor or nil')
    raises(function() ember.autograd.Function{ forward = 1 } end, 'Function: forward must be a function(ctx, ...)')
    raises(function() ember.autograd.Function{ forward = print, backward = print, bogus = 1 } end,
      "Function: unknown option 'bogus'")
    local Empty = ember.autograd.Function{ forward = function() end, backward = print }
    raises(function() Empty(x) end, 'CustomFunctionBackward: forward returned nothing')
  end)

  it('frees its Lua state when the node is released', function()
    collectgarbage(); collectgarbage()
    local base = ember.autograd._live_functions()
    local x = leaf({1, 2})
    local y = Square(x)
    assert.are.equal(base + 1, ember.autograd._live_functions())
    y:sum():backward()   -- backward without retain_graph drops the saved state
    assert.are.equal(base, ember.autograd._live_functions())
    local z = Square(x) * 2
    assert.are.equal(base + 1, ember.autograd._live_functions())
    z = nil   -- never backpropagated: released with the graph
    collectgarbage(); collectgarbage()
    assert.are.equal(base, ember.autograd._live_functions())
    local r = Square(x):sum()
    r:backward({ retain_graph = true })
    r:backward()
    close(x.grad, {2 + 4, 4 + 8}, 1e-12)
  end)

  it('survives many calls under the JIT', function()
    local x = ember.randn(8, F64):requires_grad_()
    for i = 1, 3000 do
      local l = Square(x):sum()
      if i % 2 == 0 then l:backward() end
    end
    collectgarbage(); collectgarbage()
    close(x.grad, (x * 2 * 1500):detach():totable(), 1e-9)
  end)
end)

describe('leaf hooks', function()
  it('fire once per backward after the gradient is complete, until removed', function()
    local x = leaf({1, 2})
    local seen = {}
    local h = ember.autograd.add_leaf_hook(x, function(t) seen[#seen + 1] = t.grad:totable() end)
    local loss = (x * 2 + x * x):sum()   -- two uses of x: the hook sees their sum
    loss:backward()
    assert.are.same({{4, 6}}, seen)
    h:remove()
    local loss = (x * 2):sum()
    loss:backward()
    assert.are.equal(1, #seen)
    h:remove()   -- removing twice is harmless
  end)

  it('report errors raised in a hook from backward()', function()
    local x = leaf({1})
    local h = x:register_post_accumulate_grad_hook(function() error('hook failed') end)
    local msg = raises(function() (x * 2):sum():backward() end, 'leaf hook: ', true)
    assert.truthy(msg:find('hook failed', 1, true))
    close(x.grad, {2})
    h:remove()
    raises(function() ember.autograd.add_leaf_hook(x * 2, print) end, 'add_leaf_hook: the tensor is not a leaf')
    raises(function() ember.autograd.add_leaf_hook(x, 5) end, 'add_leaf_hook: expected a function for argument 2')
  end)
end)
