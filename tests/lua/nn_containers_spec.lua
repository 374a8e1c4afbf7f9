-- nn.ModuleList, nn.ModuleDict and forward hooks.
local U = dofile(debug.getinfo(1, 'S').source:match('^@(.*[/\\])') .. 'tensor_testutil.lua')
local raises = U.raises
local nn = ember.nn

local function keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return out
end

describe('ModuleList and ModuleDict', function()
  local Net = nn.Module:extend('ContainerNet')
  function Net:init()
    self.layers = nn.ModuleList{ nn.Linear(4, 8), nn.Linear(8, 2) }
    self.heads = nn.ModuleDict{ cls = nn.Linear(2, 3), reg = nn.Linear(2, 1) }
  end
  function Net:forward(x)
    for _, layer in self.layers:iter() do x = layer(x):relu() end
    return self.heads.cls(x), self.heads.reg(x)
  end

  it('register their modules with PyTorch state_dict names', function()
    local net = Net()
    -- torch: nn.ModuleList -> 'layers.0.weight', nn.ModuleDict -> 'heads.cls.weight'
    assert.are.same({ 'heads.cls.bias', 'heads.cls.weight', 'heads.reg.bias', 'heads.reg.weight',
      'layers.0.bias', 'layers.0.weight', 'layers.1.bias', 'layers.1.weight' }, keys(net:state_dict()))
    assert.are.equal(8, #net:parameters())
    local a, b = net(ember.ones(5, 4))
    assert.are.same({5, 3}, a.shape)
    assert.are.same({5, 1}, b.shape)
  end)

  it('ModuleList indexes, appends, inserts', function()
    local l = nn.ModuleList{ nn.Linear(1, 1) }
    local relu, tanh = nn.ReLU(), nn.Tanh()
    l:append(relu)
    l:insert(1, tanh)
    assert.are.equal(3, l:len())
    assert.are.equal(tanh, l[1])
    assert.are.equal(relu, l[-1])
    assert.are.same({ '1.weight', '1.bias' }, (function()
      local out = {}
      for _, p in ipairs(l:named_parameters()) do out[#out + 1] = p[1] end
      return out
    end)())
    raises(function() local _ = l[4] end, 'ModuleList: position 4 out of range for a list of 3 modules')
    raises(function() l:append(3) end, 'append: expected a module, got number')
    raises(function() l(ember.ones(1)) end, 'ModuleList: a ModuleList has no forward')
  end)

  it('ModuleDict keeps the order of a list of pairs', function()
    local d = nn.ModuleDict{ { 'z', nn.ReLU() }, { 'a', nn.Tanh() } }
    assert.are.same({ 'z', 'a' }, d:keys())
    assert.is_true(d:contains('a'))
    d:pop('z')
    assert.are.same({ 'a' }, d:keys())
    raises(function() d:pop('q') end, "pop: no module named 'q'")
  end)
end)

describe('forward hooks', function()
  it('run around forward and are removed by their handle', function()
    local lin = nn.Linear(2, 2)
    local seen = {}
    local pre = lin:register_forward_pre_hook(function(m, x)
      seen[#seen + 1] = 'pre'
      return x * 0       -- replaces the input
    end)
    local post = lin:register_forward_hook(function(m, inputs, out)
      seen[#seen + 1] = 'post ' .. inputs.n
      return out + 1     -- replaces the output
    end)
    local y = lin(ember.ones(1, 2))
    assert.are.same({ 'pre', 'post 1' }, seen)
    U.close(y, (lin.bias + 1):view(1, 2):totable())
    pre:remove(); post:remove(); post:remove()
    local z = lin(ember.ones(1, 2))
    assert.are.equal(2, #seen)
    U.close(z, (ember.ones(1, 2):matmul(lin.weight:t()) + lin.bias):detach():totable())
  end)
  it('fire for modules inside a Sequential', function()
    local relu = nn.ReLU()
    local model = nn.Sequential{ nn.Linear(3, 4), relu, nn.Linear(4, 1) }
    local shapes = {}
    relu:register_forward_hook(function(_, _, out) shapes[#shapes + 1] = out.shape end)
    model(ember.ones(2, 3))
    assert.are.same({ { 2, 4 } }, shapes)
    raises(function() relu:register_forward_hook('x') end, 'register_forward_hook: expected a function, got string')
  end)
end)

describe('Sequential intermediates', function()
  local F = ember.nn.functional
  local allocated = function() return tonumber(ember.C.em_memory_allocated()) end

  it('go back to the runtime once the next layer has used them, gradients unchanged', function()
    ember.manual_seed(3)
    local model = nn.Sequential{ nn.Flatten(), nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
      nn.Linear(256, 4) }
    local x = ember.randn(8, 1, 8, 8)
    collectgarbage('collect')
    local before = allocated()
    local out = model(x)
    -- held after the forward: the result (8 x 4) and what backward needs (the ReLUs' outputs,
    -- which the next Linear saves too: 2 x 8 x 256 floats); without the early release both
    -- Linear outputs before a ReLU (as many again) stay until the collector runs
    local held = allocated() - before
    assert.is_true(held <= 4 * 8 * (256 + 256 + 4) + 1024, 'held ' .. held .. ' bytes')
    -- the same model applied layer by layer by hand gives the same gradients
    local y = ember.randint(1, 5, { 8 })
    F.cross_entropy(out, y):backward()
    local g_seq = model[2].weight.grad:clone()
    model:zero_grad()
    local h = x:flatten(2)
    for i = 2, 6 do h = model[i]:forward(h) end
    F.cross_entropy(h, y):backward()
    assert.is_true(ember.allclose(g_seq, model[2].weight.grad))
    assert.are.same({ 8, 1, 8, 8 }, x.shape)   -- the caller's input is left alone
    assert.is_true(ember.allclose(out, h))
  end)

  it('run a Linear and the ReLU after it as one op, with the values and gradients of two', function()
    ember.manual_seed(5)
    local lin, relu = nn.Linear(784, 256), nn.ReLU()
    local model = nn.Sequential{ lin, relu }
    local x = ember.randn(128, 784)
    local y = model(x)
    assert.are.equal('LinearReluBackward', y.grad_fn)
    local gy = ember.randn(128, 256)
    y:backward(gy)
    local gw, gb = lin.weight.grad:clone(), lin.bias.grad:clone()
    model:zero_grad()
    local y2 = F.relu(F.linear(x, lin.weight, lin.bias))
    assert.are.equal('ReluBackward', y2.grad_fn)
    y2:backward(gy)
    assert.is_true(ember.allclose(y, y2, 1e-5, 1e-6))
    assert.is_true(ember.allclose(gw, lin.weight.grad, 1e-5, 1e-6))
    assert.is_true(ember.allclose(gb, lin.bias.grad, 1e-5, 1e-6))
    -- a hook on the ReLU must see the Linear's output: then they run apart
    relu:register_forward_hook(function() end)
    assert.are.equal('ReluBackward', model(x).grad_fn)
  end)

  it('are kept when a layer has a forward hook or is not a built-in layer', function()
    local kept = {}
    local relu = nn.ReLU()
    relu:register_forward_hook(function(_, input) kept[#kept + 1] = input[1] end)
    local Keep = nn.Module:extend('KeepInput')
    function Keep:forward(t) kept[#kept + 1] = t; return t * 2 end
    local model = nn.Sequential{ nn.Linear(3, 4), relu, nn.Linear(4, 4), Keep(), nn.Linear(4, 1) }
    local out = model(ember.ones(2, 3))
    collectgarbage('collect')
    assert.are.same({ 2, 4 }, kept[1].shape)   -- Linear's output, seen by the hook: still usable
    assert.are.same({ 2, 4 }, kept[2].shape)   -- the input of the Lua layer
    assert.is_true(kept[1]:sum():item() == kept[1]:sum():item())
    assert.is_true(kept[2]:sum():item() == kept[2]:sum():item())
    assert.are.same({ 2, 1 }, out.shape)
  end)
end)
