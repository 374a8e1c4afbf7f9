-- ember.optim: update values against PyTorch's formulas (the same numpy references as
-- tests/c/test_optim.c), parameter groups, state dicts through ember.save/load,
-- schedulers against PyTorch's documented formulas, clip_grad_norm_, and a small MLP
-- trained to a loss threshold with SGD and with Adam.
local U = dofile(debug.getinfo(1, 'S').source:match('^@(.*[/\\])') .. 'tensor_testutil.lua')
local close, raises = U.close, U.raises
local nn, F, optim = ember.nn, ember.nn.functional, ember.optim

local F64 = { dtype = 'float64' }
local P0 = {0.5, -1.0, 2.0, 0.25}
local G = { {0.1, -0.2, 0.3, 0.4}, {-0.5, 0.25, 0.0, 1.0}, {0.3, 0.3, -0.7, -0.1} }

-- Three steps of opt over one parameter starting at P0 with the gradients G.
local function run(make, dtype)
  local p = nn.Parameter(ember.tensor(P0, { dtype = dtype or 'float64' }))
  local opt = make({ p })
  for s = 1, 3 do
    p.grad = ember.tensor(G[s], { dtype = dtype or 'float64' })
    opt:step()
  end
  return p, opt
end

describe('SGD', function()
  it('matches PyTorch with momentum, dampening and weight decay', function()
    local p, opt = run(function(ps) return optim.SGD(ps, { lr = 0.1, momentum = 0.9, dampening = 0.1,
      weight_decay = 0.01 }) end)
    close(p, {0.52873580649500007, -1.01028236299, 1.9711710340799999, -0.021511175102500071}, 1e-14)
    close(opt.param_groups[1].state[1].momentum_buffer,
      {-0.041263564949999998, 0.28563462989999999, -0.33742234079999994, 1.0484740010250002}, 1e-14)
    local p32 = run(function(ps) return optim.SGD(ps, { lr = 0.1, momentum = 0.9, dampening = 0.1,
      weight_decay = 0.01 }) end, 'float32')
    close(p32, {0.52873580649500007, -1.01028236299, 1.9711710340799999, -0.021511175102500071}, 2e-6)
  end)

  it('matches PyTorch with nesterov, and with maximize', function()
    local p = run(function(ps) return optim.SGD(ps, { lr = 0.1, momentum = 0.9, nesterov = true }) end)
    close(p, {0.54410999999999998, -1.0559699999999999, 2.02983, -0.13956000000000007}, 1e-14)
    p = run(function(ps) return optim.SGD(ps, { lr = 0.05, weight_decay = 0.1, maximize = true }) end)
    close(p, {0.48761256249999996, -0.96753762499999985, 1.9500001249999999, 0.31081921875000001}, 1e-14)
  end)

  it('uses per-group options and skips parameters without a gradient', function()
    local a, b, c = nn.Parameter(ember.ones(2, F64)), nn.Parameter(ember.ones(2, F64)), nn.Parameter(ember.ones(1, F64))
    local opt = optim.SGD({ { params = { a } }, { params = { b, c }, lr = 0.5 } }, { lr = 0.1 })
    assert.are.equal(0.1, opt.param_groups[1].lr)
    assert.are.equal(0.5, opt.param_groups[2].lr)
    a.grad, b.grad = ember.ones(2, F64), ember.ones(2, F64)
    opt:step()
    close(a, {0.9, 0.9}, 1e-15)
    close(b, {0.5, 0.5}, 1e-15)
    close(c, {1}, 0)
    opt:zero_grad({ set_to_none = false })
    close(a.grad, {0, 0}, 0)
    opt:zero_grad()
    assert.is_nil(a.grad)
    opt:step()   -- nothing to do
    close(a, {0.9, 0.9}, 1e-15)
  end)

  it('checks its arguments', function()
    local p = nn.Parameter(ember.ones(2))
    raises(function() optim.SGD({ p }, { lr = -1 }) end, 'SGD: lr is -1, expected a finite number >= 0')
    raises(function() optim.SGD({ p }, { lr = 0 / 0 }) end, 'SGD: lr is nan, expected a finite number >= 0')
    raises(function() optim.SGD({ p }, { lr = '1' }) end, 'SGD: lr must be a number, got string')
    raises(function() optim.SGD({ p }, { lr = 0.1, dampening = 2 }) end, 'SGD: dampening is 2, expected a number in [0, 1]')
    raises(function() optim.AdamW({ p }, { eps = -1 }) end, 'AdamW: eps is -1, expected a finite number >= 0')
    raises(function() optim.SGD({ p }, { lr = 0.1, nesterov = true }) end,
      'SGD: nesterov momentum requires momentum > 0 and dampening = 0')
    raises(function() optim.SGD({ p }, { lr = 0.1, betas = { 0.9, 0.9 } }) end, "SGD: unknown option 'betas'")
    raises(function() optim.SGD(nn.Linear(2, 2), { lr = 0.1 }) end,
      'SGD: expected a list of tensors, got a module (pass model:parameters())')
    raises(function() optim.SGD({ p * 2 }) end, 'SGD: the tensor at position 1 of the parameter list is not a leaf')
    raises(function() optim.SGD({ p, p }) end,
      'SGD: the tensor at position 2 of the parameter list appears more than once')
    raises(function() optim.SGD({}) end, 'SGD: got an empty parameter list')
    raises(function() optim.SGD({ { params = { p }, momentun = 0.9 } }) end,
      "SGD: unknown option 'momentun' in parameter group 1")
    local opt = optim.SGD({ p }, { lr = 0.1 })
    p.grad = ember.ones(2)
    opt.param_groups[1].lr = -5
    raises(function() opt:step() end, 'sgd: lr is -5, expected a finite number >= 0')
  end)
end)

describe('Adam and AdamW', function()
  it('match PyTorch', function()
    local p, opt = run(function(ps) return optim.Adam(ps, { lr = 0.01, weight_decay = 0.1 }) end)
    close(p, {0.494242581482429, -0.98889966828037235, 1.9803079291094772, 0.22372133455927798}, 1e-12)
    local st = opt.param_groups[1].state[1]
    assert.are.equal(3, st.step)
    close(st.exp_avg, {0.0065094769055328225, 0.009416376458504655, 0.0082202188902383774, 0.1188905910939992}, 1e-12)
    p = run(function(ps) return optim.AdamW(ps, { lr = 0.01, weight_decay = 0.1 }) end)
    close(p, {0.49524439264790915, -0.99393588977228464, 1.9811660325799849, 0.22324115842096612}, 1e-12)
    p = run(function(ps) return optim.Adam(ps, { lr = 0.1, betas = { 0.8, 0.99 }, eps = 1e-6, maximize = true }) end)
    close(p, {0.53111909482529462, -1.0178177155647026, 2.1158255174319285, 0.50889620889047193}, 1e-12)
    p = run(function(ps) return optim.AdamW(ps, { lr = 0.01, weight_decay = 0.1 }) end, 'float32')
    close(p, {0.49524439264790915, -0.99393588977228464, 1.9811660325799849, 0.22324115842096612}, 2e-5)
  end)

  it('have PyTorch defaults and check betas', function()
    local p = nn.Parameter(ember.ones(1))
    local g = optim.AdamW({ p }).param_groups[1]
    assert.are.same({ 1e-3, 0.9, 0.999, 1e-8, 1e-2 }, { g.lr, g.betas[1], g.betas[2], g.eps, g.weight_decay })
    assert.are.equal(0, optim.Adam({ p }).param_groups[1].weight_decay)
    raises(function() optim.Adam({ p }, { betas = { 1, 0.9 } }) end, 'Adam: beta1 is 1, expected a number in [0, 1)')
    raises(function() optim.Adam({ p }, { betas = 0.9 }) end, 'Adam: betas must be a pair {beta1, beta2}, got number')
  end)

  it('count steps per parameter', function()
    local a, b = nn.Parameter(ember.tensor(P0, F64)), nn.Parameter(ember.tensor(P0, F64))
    local opt = optim.Adam({ a, b }, { lr = 0.01, weight_decay = 0.1 })
    for s = 1, 3 do
      a.grad = ember.tensor(G[s], F64)
      if s > 1 then b.grad = ember.tensor(G[s - 1], F64) end   -- b starts a step later
      opt:step()
    end
    assert.are.equal(3, opt.param_groups[1].state[1].step)
    assert.are.equal(2, opt.param_groups[1].state[2].step)
    close(a, {0.494242581482429, -0.98889966828037235, 1.9803079291094772, 0.22372133455927798}, 1e-12)
  end)
end)

describe('optimizer state_dict', function()
  local tmp = os.tmpname()
  after_each(function() os.remove(tmp) end)

  local function train(opt, ps, steps)
    for s = 1, steps do
      for i, p in ipairs(ps) do p.grad = ember.tensor(G[(s + i) % 3 + 1], F64):narrow(1, 1, p:numel()) end
      opt:step()
    end
  end

  for _, name in ipairs { 'SGD', 'Adam' } do
    it('round-trips ' .. name .. ' through ember.save and ember.load', function()
      local make = function(ps)
        return optim[name]({ { params = { ps[1] } }, { params = { ps[2] }, lr = 0.05 } }, { lr = 0.1, momentum =
          name == 'SGD' and 0.9 or nil })
      end
      local a = { nn.Parameter(ember.tensor(P0, F64)), nn.Parameter(ember.tensor({1, 2}, F64)) }
      local opt_a = make(a)
      train(opt_a, a, 2)
      opt_a.param_groups[2].lr = 0.025   -- changed options are saved too
      local tensors, meta = opt_a:state_dict()
      assert.is_true(ember.is_tensor(tensors[name == 'SGD' and 'state.1.momentum_buffer' or 'state.1.exp_avg_sq']))
      ember.save(tmp, tensors, { metadata = meta })
      local b = { nn.Parameter(a[1]:detach():clone()), nn.Parameter(a[2]:detach():clone()) }
      local opt_b = make(b)
      opt_b:load_state_dict(ember.load(tmp))
      assert.are.equal(0.025, opt_b.param_groups[2].lr)
      train(opt_a, a, 2)
      train(opt_b, b, 2)
      close(b[1], a[1]:detach():totable(), 0)
      close(b[2], a[2]:detach():totable(), 0)
    end)
  end

  it('refuses a state that does not fit', function()
    local p = nn.Parameter(ember.ones(2, F64))
    local sgd = optim.SGD({ p }, { lr = 0.1, momentum = 0.9 })
    p.grad = ember.ones(2, F64)
    sgd:step()
    local tensors, meta = sgd:state_dict()
    raises(function() optim.Adam({ p }):load_state_dict(tensors, meta) end,
      'load_state_dict: the state is for SGD, this optimizer is Adam')
    local q = nn.Parameter(ember.ones(3, F64))
    raises(function() optim.SGD({ q }, { lr = 0.1 }):load_state_dict(tensors, meta) end,
      "load_state_dict: 'state.0.momentum_buffer' has shape [2], the parameter has [3]")
    raises(function() optim.SGD({ p, q }, { lr = 0.1 }):load_state_dict(tensors, meta) end,
      'load_state_dict: parameter group 1 has 1 parameters in the state, 2 here')
  end)
end)

describe('lr schedulers', function()
  local function lrs(sched, n)
    local out = { sched:get_last_lr()[1] }
    for _ = 1, n do
      sched:step()
      out[#out + 1] = sched:get_last_lr()[1]
    end
    return out
  end
  local function opt_with(lr) return optim.SGD({ nn.Parameter(ember.ones(1)) }, { lr = lr }) end

  it('StepLR: base * gamma^floor(epoch / step_size)', function()
    local opt = opt_with(1)
    close(lrs(optim.lr_scheduler.StepLR(opt, { step_size = 2, gamma = 0.5 }), 5), {1, 1, 0.5, 0.5, 0.25, 0.25}, 1e-15)
    assert.are.equal(0.25, opt.param_groups[1].lr)
    close(lrs(optim.lr_scheduler.MultiStepLR(opt_with(1), { milestones = { 1, 3 }, gamma = 0.1 }), 4),
      {1, 0.1, 0.1, 0.01, 0.01}, 1e-15)
  end)

  it('CosineAnnealingLR: eta_min + (base - eta_min) * (1 + cos(pi * epoch / T_max)) / 2', function()
    local want = {}
    for e = 0, 6 do want[e + 1] = 0.01 + (0.1 - 0.01) * (1 + math.cos(math.pi * e / 4)) / 2 end
    close(lrs(optim.lr_scheduler.CosineAnnealingLR(opt_with(0.1), { T_max = 4, eta_min = 0.01 }), 6), want, 1e-14)
  end)

  it('LinearLR warm-up, and SequentialLR into cosine', function()
    close(lrs(optim.lr_scheduler.LinearLR(opt_with(0.1), { start_factor = 0.25, total_iters = 3 }), 4),
      {0.025, 0.05, 0.075, 0.1, 0.1}, 1e-14)
    local opt = opt_with(0.1)
    local warm = optim.lr_scheduler.LinearLR(opt, { start_factor = 0.5, total_iters = 2 })
    local cos = optim.lr_scheduler.CosineAnnealingLR(opt, { T_max = 2 })
    local seq = optim.lr_scheduler.SequentialLR(opt, { schedulers = { warm, cos }, milestones = { 2 } })
    close(lrs(seq, 4), {0.05, 0.075, 0.1, 0.05, 0}, 1e-14)
    raises(function() optim.lr_scheduler.SequentialLR(opt, { schedulers = { warm, cos }, milestones = {} }) end,
      'SequentialLR: expected 1 milestones for 2 schedulers, got 0')
  end)

  it('save and restore their position', function()
    local opt = opt_with(1)
    local s = optim.lr_scheduler.StepLR(opt, { step_size = 1, gamma = 0.5 })
    s:step(); s:step()
    local sd = s:state_dict()
    assert.are.equal(2, sd.last_epoch)
    local opt2 = opt_with(1)
    local s2 = optim.lr_scheduler.StepLR(opt2, { step_size = 1, gamma = 0.5 })
    s2:load_state_dict(sd)
    assert.are.equal(0.25, opt2.param_groups[1].lr)
    s2:step()
    assert.are.equal(0.125, s2:get_last_lr()[1])
    raises(function() optim.lr_scheduler.StepLR(opt, { step_size = 0 }) end,
      'StepLR: step_size must be a positive integer, got 0')
  end)
end)

describe('clip_grad_norm_', function()
  it('scales gradients to the global norm and returns the norm before clipping', function()
    local a, b, c = nn.Parameter(ember.zeros(2, F64)), nn.Parameter(ember.zeros(1, F64)), nn.Parameter(ember.zeros(1))
    a.grad, b.grad = ember.tensor({3, 4}, F64), ember.tensor({12}, F64)
    local norm = nn.utils.clip_grad_norm_({ a, b, c }, 5)
    assert.are.equal(13, norm)
    local k = 5 / (13 + 1e-6)
    close(a.grad, {3 * k, 4 * k}, 1e-14)
    close(b.grad, {12 * k}, 1e-14)
    assert.is_true(math.abs(nn.utils.clip_grad_norm_({ a, b }, 100) - 5) < 1e-5)   -- below: untouched
    close(a.grad, {3 * k, 4 * k}, 1e-14)
    a.grad, b.grad = ember.tensor({3, 4}, F64), ember.tensor({12}, F64)
    assert.are.equal(12, nn.utils.clip_grad_norm_({ a, b }, 6, 'inf'))
    close(b.grad, {12 * 6 / (12 + 1e-6)}, 1e-14)
    raises(function() nn.utils.clip_grad_norm_({ a }, -1) end, 'clip_grad_norm: max_norm is -1, expected a number >= 0')
    raises(function() nn.utils.clip_grad_norm_({ a, 5 }, 1) end,
      'clip_grad_norm_: expected a tensor at position 2 of the parameter list, got number')
  end)
end)

describe('training a 2-layer MLP', function()
  -- Two interleaved classes on a noisy circle (not linearly separable); 256 samples.
  local function problem()
    ember.manual_seed(42)
    local x = ember.randn(256, 2)
    local r = (x * x):sum(2)
    local y = r:gt(1.2):long() + 1   -- class 1 inside, class 2 outside
    return x, y
  end

  local function train(make_opt, steps)
    local x, y = problem()
    local model = nn.Sequential{ nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 2) }
    local opt = make_opt(model:parameters())
    local first, loss
    for _ = 1, steps do
      opt:zero_grad()
      loss = F.cross_entropy(model(x), y)
      loss:backward()
      opt:step()
      first = first or loss:item()
    end
    local acc = ember.no_grad(function() return model(x):argmax(2):eq(y):float():mean():item() end)
    return first, loss:item(), acc
  end

  it('reaches a low loss with SGD and momentum', function()
    local first, last, acc = train(function(ps) return optim.SGD(ps, { lr = 0.1, momentum = 0.9 }) end, 300)
    assert.is_true(first > 0.5, 'first loss ' .. first)
    assert.is_true(last < 0.1, 'final loss ' .. last)
    assert.is_true(acc > 0.95, 'accuracy ' .. acc)
  end)

  it('reaches a low loss with Adam', function()
    local first, last, acc = train(function(ps) return optim.Adam(ps, { lr = 0.01 }) end, 300)
    assert.is_true(first > 0.5, 'first loss ' .. first)
    assert.is_true(last < 0.1, 'final loss ' .. last)
    assert.is_true(acc > 0.95, 'accuracy ' .. acc)
  end)
end)
