-- Recommendation models (issue 18): row-sparse embedding gradients, the optimizers over
-- them, DLRM's interaction and model file, against PyTorch. The numbers in REF were printed
-- by tests/lua/recsys_reference.py (PyTorch 2.15, float64: F.embedding_bag / F.embedding
-- with sparse=True, torch.optim.SGD / Adagrad, dlrm_s_pytorch.py's interact_features);
-- rerun it to regenerate them. Indices there are 0-based, here 1-based.
--
-- With EMBER_TEST_DEVICE=cuda (tests/lua/helper.lua's test_device) the lookups, sparse
-- gradients, optimizers and interaction run on the GPU against the same references (float64,
-- where the GPU kernels differ from the CPU's by FMA contractions only: far below 1e-12);
-- max_norm, the checkpointed DLRM and the 10M-row memory check stay on the CPU.
-- cuda_recsys_spec.lua compares the GPU with the CPU on larger random inputs.
local U = dofile(debug.getinfo(1, 'S').source:match('^@(.*[/\\])') .. 'tensor_testutil.lua')
local close, raises = U.close, U.raises
local nn, F, optim = ember.nn, ember.nn.functional, ember.optim
local SPEC_DIR = debug.getinfo(1, 'S').source:match('^@(.*[/\\])')

local REF = {
  sum_out = {{0.6, -0.04999999999999993, -0.15}, {0.0, 0.0, 0.0}, {-0.05, 0.4750000000000001, -0.65}, {-0.04999999999999999, 0.1, 0.25000000000000006}},
  sum_rows = {1, 2, 3, 4, 6, 8},
  sum_values = {{-1.0, -0.875, -0.75}, {0.25, 0.125, 0.0}, {0.375, 0.3125, 0.25}, {0.5, 0.25, 0.0}, {2.0, 1.75, 1.5}, {2.25, 1.875, 1.5}},
  sum_psw_grad = {0.22499999999999998, 0.175, 0.175, -0.12499999999999994, 0.22499999999999995, -1.2000000000000002, -0.1499999999999999},
  mean_out = {{0.39999999999999997, -0.033333333333333326, -0.09999999999999999}, {0.0, 0.0, 0.0}, {-0.1, 0.2, -0.04999999999999999}, {-0.4, -0.1, 0.2}},
  mean_rows = {1, 2, 3, 4, 6, 8},
  mean_values = {{1.0, 0.875, 0.75}, {0.16666666666666666, 0.08333333333333333, 0.0}, {0.75, 0.625, 0.5}, {0.3333333333333333, 0.16666666666666666, 0.0}, {1.0, 0.875, 0.75}, {0.75, 0.625, 0.5}},
  max_out = {{0.5, 0.5, 0.0}, {0.0, 0.0, 0.0}, {0.0, 0.30000000000000004, 0.4}, {-0.3, 0.0, 0.30000000000000004}},
  max_dense = {{0.0, 0.0, 0.0}, {0.0, 0.25, 0.0}, {0.0, 0.0, 1.0}, {0.5, 0.0, 0.0}, {0.0, 0.0, 0.0}, {2.0, 1.75, 1.5}, {0.0, 0.0, 0.0}, {1.5, 1.25, 0.0}},
  pad_out = {{0.19999999999999996, 0.5, -0.3}, {0.0, 0.0, 0.0}, {-0.1, 0.2, -0.04999999999999999}, {-0.4, -0.1, 0.2}},
  pad_rows = {1, 2, 3, 6, 8},
  pad_values = {{1.0, 0.875, 0.75}, {0.5, 0.25, 0.0}, {0.75, 0.625, 0.5}, {1.0, 0.875, 0.75}, {0.75, 0.625, 0.5}},
  last_out = {{1.2, -0.09999999999999998, -0.3}, {-0.2, 0.4, -0.09999999999999998}, {-0.8, -0.2, 0.4}},
  last_rows = {1, 2, 3, 4, 6, 8},
  last_values = {{1.5, 1.25, 1.0}, {0.5, 0.25, 0.0}, {1.0, 0.75, 0.5}, {1.0, 0.5, 0.0}, {1.5, 1.25, 1.0}, {1.0, 0.75, 0.5}},
  twod_out = {{-2.7755575615628914e-17, 0.3, 0.05000000000000002}, {0.5, -0.3, 0.0}, {-0.25, 0.05000000000000002, -0.2}},
  twod_rows = {1, 2, 3, 4, 8},
  twod_values = {{0.75, 0.625, 0.5}, {0.25, 0.125, 0.0}, {0.25, 0.125, 0.0}, {1.0, 0.75, 0.5}, {0.75, 0.625, 0.5}},
  emb_rows = {2, 6},
  emb_values = {{1.0, 2.0, 3.0}, {10.0, 11.0, 12.0}},
  renorm_weight = {{-0.5, -0.2, 0.09999999999999998}, {0.09733283688898639, 0.24333209222246602, -0.1459992553334796}, {-0.2, 0.09999999999999998, 0.4}, {0.2572478335961238, -0.15434870015767427, 0.0}, {0.09999999999999998, 0.4, -0.4}, {-0.3, 0.0, 0.30000000000000004}, {0.4, -0.4, -0.09999999999999998}, {0.0, 0.30000000000000004, -0.5}},
  sgd_weight = {{-0.55, -0.225, 0.09999999999999998}, {0.14999999999999997, 0.475, -0.3}, {-0.30000000000000004, 0.024999999999999974, 0.35000000000000003}, {0.24999999999999997, -0.47500000000000003, -0.1}, {0.09999999999999998, 0.4, -0.4}, {-0.3, 0.0, 0.30000000000000004}, {0.30000000000000004, -0.47500000000000003, -0.14999999999999997}, {-0.2, 0.17500000000000004, -0.55}},
  adagrad_weight = {{-0.5836786390678871, -0.2614033339398214, 0.09999999999999998}, {0.11548457454143402, 0.4379826327207804, -0.3}, {-0.29347672442692974, 0.009662482829635345, 0.317141739746504}, {0.34805590145645554, -0.452937848093884, -0.1484260417243649}, {0.09999999999999998, 0.4, -0.4}, {-0.3, 0.0, 0.30000000000000004}, {0.30559776345003137, -0.49123194803343756, -0.18367863906788706}, {-0.1629997451208345, 0.1565396616494223, -0.5845154254585659}},
  adagrad_sum = {{0.35, 0.1625, 0.1}, {0.35, 0.1625, 0.1}, {1.1, 0.6625, 0.35}, {3.35, 1.6625, 0.6}, {0.1, 0.1, 0.1}, {0.1, 0.1, 0.1}, {1.1, 0.6625, 0.35}, {2.1, 0.9125, 0.35}},
  adagrad_dense_wd_weight = {{-0.4937948875669262, -0.19495396729265616, 3.882752726775306e-13}, {0.098077612647738, 0.3858522360877161, -0.10848201982319089}, {-0.15375448174995704, -0.09803703707678266, 0.1426714941860479}, {0.3440330898117422, -0.45711803586497657, -0.16847593194240656}, {3.882752726775306e-13, 0.1980841576452807, -0.1980841576452807}, {-0.10848201982319089, 0.0, 0.10848201982319094}, {0.20003877280659357, -0.3963143436070154, -0.0980344121422757}, {-0.16865561893478898, 0.14433148475041357, -0.5876556791401562}},
  inter_out = {{-0.7, -0.19999999999999996, 0.30000000000000004, -0.35500000000000004, -0.45499999999999996, -0.2425, 0.32, -0.4049999999999999, -0.25499999999999995}, {0.55, -0.7, -0.19999999999999996, -0.3925, -0.30499999999999994, -0.34249999999999997, -0.30500000000000005, 0.47, -0.505}},
  inter_grads = {{{0.2874999999999999, 0.03749999999999992, -0.6500000000000001}, {1.2375, 0.8625, 0.4875}}, {{-0.17500000000000016, 0.0124999999999999, -1.1125}, {0.5874999999999999, -0.22500000000000003, -0.16250000000000003}}, {{0.6124999999999998, -0.7625000000000002, -0.8250000000000003}, {0.8125, 0.18749999999999994, -0.43750000000000006}}, {{-0.5625000000000002, 0.1874999999999999, 0.4999999999999999}, {-0.2375000000000001, -0.4875000000000001, 0.1374999999999999}}},
  inter_self_out = {{-0.7, -0.19999999999999996, 0.30000000000000004, 0.6199999999999999, -0.35500000000000004, 0.7949999999999999, -0.45499999999999996, -0.2425, 0.8450000000000001, 0.32, -0.4049999999999999, -0.25499999999999995, 0.7700000000000001}, {0.55, -0.7, -0.19999999999999996, 0.8325, -0.3925, 0.5075000000000001, -0.30499999999999994, -0.34249999999999997, 0.9325000000000001, -0.30500000000000005, 0.47, -0.505, 0.6199999999999999}},
  inter_self_grads = {{{0.3749999999999998, -2.220446049250313e-16, -1.2500000000000002}, {2.0, 0.25, 0.24999999999999994}}, {{-0.32500000000000023, -0.7625000000000002, -0.7625000000000003}, {1.0499999999999998, -0.3250000000000001, -0.3875000000000001}}, {{-1.3125000000000004, 0.18749999999999978, -1.375}, {0.6874999999999998, -0.9375000000000002, 0.06249999999999972}}, {{0.3249999999999995, -1.2375000000000005, -3.2375000000000003}, {2.2624999999999997, 0.19999999999999962, -0.9875000000000005}}},
}

local F64 = { dtype = 'float64' }
local I64 = { dtype = 'int64' }
local R, D = 8, 3

local function W0()
  local rows = {}
  for i = 0, R - 1 do
    rows[i + 1] = {}
    for j = 0, D - 1 do rows[i + 1][j + 1] = ((i * 7 + j * 3) % 11) / 10 - 0.5 end
  end
  return on_device(ember.tensor(rows, F64))
end
local function cm(b, d)
  local rows = {}
  for i = 0, b - 1 do
    rows[i + 1] = {}
    for j = 0, d - 1 do rows[i + 1][j + 1] = (i + 1) * 0.5 - j * 0.25 end
  end
  return on_device(ember.tensor(rows, F64))
end
local IDX = { 2, 4, 4, 8, 3, 1, 6 }   -- PyTorch's [1, 3, 3, 7, 2, 0, 5] plus one
local OFF = { 1, 4, 4, 6 }            -- [0, 3, 3, 5] plus one: the third bag is empty
local PSW = { 0.5, -1, 2, 1.5, 0.25, -0.5, 1 }

-- One bag lookup with a sparse gradient; returns the output, the weight and psw.
local function bag_case(opts, idx, psw)
  local w = W0():requires_grad_()
  local p = psw and on_device(ember.tensor(psw, F64)):requires_grad_() or nil
  opts.per_sample_weights = p
  local y = F.embedding_bag(on_device(ember.tensor(idx or IDX, I64)), w, opts)   -- table offsets: on w's device
  ;(y * cm(y.shape[1], y.shape[2])):sum():backward()
  return y, w, p
end

local function check_sparse(w, name)
  local g = w.grad
  assert.is_true(ember.is_sparse_grad(g))
  assert.are.equal(test_device == 'cpu', g:values().device == 'cpu', 'the gradient lives on the test device')
  close(g:indices(), REF[name .. '_rows'], 0)
  close(g:values(), REF[name .. '_values'], 1e-12)
end

describe('sparse EmbeddingBag', function()
  it('matches PyTorch sum bags with per_sample_weights: output, sparse rows, psw gradient', function()
    local y, w, p = bag_case({ offsets = OFF, mode = 'sum', sparse = true }, nil, PSW)
    close(y, REF.sum_out, 1e-12)
    check_sparse(w, 'sum')
    close(p.grad, REF.sum_psw_grad, 1e-12)
    assert.are.equal(6, w.grad:nnz())
    assert.are.same({ R, D }, w.grad.shape)
  end)

  it('matches PyTorch mean bags, and max bags (dense reference: PyTorch has no sparse max)', function()
    local y, w = bag_case({ offsets = OFF, mode = 'mean', sparse = true })
    close(y, REF.mean_out, 1e-12)
    check_sparse(w, 'mean')
    y, w = bag_case({ offsets = OFF, mode = 'max', sparse = true })
    close(y, REF.max_out, 1e-12)
    assert.is_true(ember.is_sparse_grad(w.grad))
    close(w.grad:to_dense(), REF.max_dense, 1e-12)
  end)

  it('leaves padding_idx out of bags (values, mean counts, gradient) as PyTorch', function()
    local y, w = bag_case({ offsets = OFF, mode = 'mean', sparse = true, padding_idx = 4 })
    close(y, REF.pad_out, 1e-12)
    check_sparse(w, 'pad')
    -- the dense path agrees
    local y2, w2 = bag_case({ offsets = OFF, mode = 'mean', padding_idx = 4 })
    close(y2, REF.pad_out, 1e-12)
    close(w2.grad, w.grad:to_dense():totable(), 1e-12)
  end)

  it('takes include_last_offset and 2-d indices as PyTorch', function()
    local y, w = bag_case({ offsets = { 1, 4, 6, 8 }, mode = 'sum', sparse = true, include_last_offset = true })
    close(y, REF.last_out, 1e-12)
    check_sparse(w, 'last')
    y, w = bag_case({ mode = 'mean', sparse = true }, { { 2, 3 }, { 4, 4 }, { 1, 8 } })
    close(y, REF.twod_out, 1e-12)
    check_sparse(w, 'twod')
  end)

  it('gives Embedding a sparse gradient without the padding row, and renormalises with max_norm', function()
    local w = W0():requires_grad_()
    local y = F.embedding(on_device(ember.tensor({ { 2, 4 }, { 4, 6 } }, I64)), w, { padding_idx = 4, sparse = true })
    ;(y * on_device(ember.arange(1, 13, F64)):view(2, 2, 3)):sum():backward()
    check_sparse(w, 'emb')
    local w2 = W0():to('cpu')   -- max_norm is CPU-only
    ember.no_grad(function() F.embedding(ember.tensor({ 2, 4, 4 }, I64), w2, { max_norm = 0.3 }) end)
    close(w2, REF.renorm_weight, 1e-12)
    local e = nn.EmbeddingBag(R, D, { mode = 'sum', sparse = true, max_norm = 0.3, dtype = 'float64' })
    ember.no_grad(function() e.weight:copy_(W0():to('cpu')) end)
    e(ember.tensor({ 2, 4, 4 }, I64), { 1 })
    close(e.weight, REF.renorm_weight, 1e-12)
  end)

  it('accumulates a table used twice and over two backwards by concatenation + coalescing', function()
    local e = nn.EmbeddingBag(R, D, { mode = 'sum', sparse = true, dtype = 'float64' }):to(test_device)
    local a = e(on_device(ember.tensor({ 2, 5 }, I64)), { 1 })
    local b = e(on_device(ember.tensor({ 5, 7 }, I64)), { 1 })
    ;((a + b) * 2):sum():backward()
    local g = e.weight.grad
    close(g:indices(), { 2, 5, 7 }, 0)
    close(g:values(), { { 2, 2, 2 }, { 4, 4, 4 }, { 2, 2, 2 } }, 0)
    e(on_device(ember.tensor({ 1, 2 }, I64)), { 1 }):sum():backward()
    close(e.weight.grad:indices(), { 1, 2, 5, 7 }, 0)
    close(e.weight.grad:values(), { { 1, 1, 1 }, { 3, 3, 3 }, { 4, 4, 4 }, { 2, 2, 2 } }, 0)
    -- a dense contribution makes the sum dense
    ;((e.weight * 1):sum()):backward()
    assert.is_true(ember.is_tensor(e.weight.grad))
    close(e.weight.grad:sum(), (1 + 3 + 4 + 2) * 3 + R * D, 0)
    e.weight.grad = nil
    assert.is_nil(e.weight.grad)
  end)

  it('builds SparseGrads from Lua and refuses bad ones with clear errors', function()
    local g = ember.SparseGrad(5, { 4, 2, 4 }, on_device(ember.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 } })))
    close(g:indices(), { 2, 4 }, 0)
    close(g:values(), { { 3, 4 }, { 6, 8 } }, 0)
    close(g:to_dense(), { { 0, 0 }, { 3, 4 }, { 0, 0 }, { 6, 8 }, { 0, 0 } }, 0)
    raises(function() ember.SparseGrad(3, { 4 }, ember.zeros(1, 2)) end, 'sparse_grad: index 4 is out of range for 3 rows')
    local p = ember.zeros(4, 2):requires_grad_()
    raises(function() p.grad = g end, 'set_grad_sparse: a sparse gradient of [5, 2] for a tensor of shape [4, 2]')
  end)
end)

-- Three steps over the indices of STEPS, from W0; returns the weight and the optimizer.
local STEPS = { { { 2, 4, 4, 8 }, { 1, 3 } }, { { 1, 4, 7 }, { 1, 2 } }, { { 8, 8, 3 }, { 1, 3 } } }
local function train(make, sparse, dtype)
  local e = nn.EmbeddingBag(R, D, { mode = 'sum', sparse = sparse, dtype = dtype or 'float64' }):to(test_device)
  ember.no_grad(function() e.weight:copy_(W0()) end)
  local opt = make({ e.weight })
  for _, s in ipairs(STEPS) do
    opt:zero_grad()
    local y = e(on_device(ember.tensor(s[1], I64)), on_device(ember.tensor(s[2], I64)))
    ;(y * cm(y.shape[1], y.shape[2]):to(y.dtype)):sum():backward()
    opt:step()
  end
  return e.weight, opt
end

describe('optimizers over sparse rows', function()
  it('SGD matches PyTorch over sparse gradients, and refuses momentum with them', function()
    close(train(function(p) return optim.SGD(p, { lr = 0.1 }) end, true), REF.sgd_weight, 1e-12)
    close(train(function(p) return optim.SGD(p, { lr = 0.1 }) end, true, 'float32'), REF.sgd_weight, 1e-6)
    raises(function() train(function(p) return optim.SGD(p, { lr = 0.1, momentum = 0.9 }) end, true) end,
      'SGD: parameter 1 of group 1 has a sparse gradient, and momentum (0.9) is not supported')
  end)

  it('Adagrad matches PyTorch, sparse (lr_decay, initial_accumulator_value) and dense (weight_decay)', function()
    local make = function(p) return optim.Adagrad(p, { lr = 0.1, lr_decay = 0.01, initial_accumulator_value = 0.1 }) end
    local w, opt = train(make, true)
    close(w, REF.adagrad_weight, 1e-12)
    close(opt.param_groups[1].state[1].sum, REF.adagrad_sum, 1e-12)
    close(train(make, true, 'float32'), REF.adagrad_weight, 1e-6)
    local dense = function(p) return optim.Adagrad(p, { lr = 0.1, lr_decay = 0.01, weight_decay = 0.05 }) end
    close(train(dense, false), REF.adagrad_dense_wd_weight, 1e-12)
    raises(function() train(dense, true) end, 'Adagrad: parameter 1 of group 1: adagrad: weight_decay is 0.05 but the gradient is sparse')
    raises(function() optim.Adagrad({ ember.zeros(2):requires_grad_() }, { lr = -1 }) end, 'Adagrad: lr is -1')
  end)

  it('row-wise Adagrad follows its rule (one accumulator per row) and touches only the rows looked up', function()
    local w, opt = train(function(p) return optim.RowWiseAdagrad(p, { lr = 0.1, eps = 1e-8 }) end, true)
    -- the rule, step by step in plain Lua: s[r] += mean(g[r]^2); w[r] -= lr * g[r] / (sqrt(s[r]) + eps)
    local ref, state = W0():totable(), {}
    for r = 1, R do state[r] = 0 end
    for _, s in ipairs(STEPS) do
      local e = nn.EmbeddingBag(R, D, { mode = 'sum', dtype = 'float64' })
      ember.no_grad(function() e.weight:copy_(ember.tensor(ref, F64)) end)
      local y = e(ember.tensor(s[1], I64), ember.tensor(s[2], I64))
      ;(y * cm(y.shape[1], y.shape[2]):to('cpu')):sum():backward()   -- the reference runs on the CPU
      local g = e.weight.grad:totable()
      local looked = {}
      for _, r in ipairs(s[1]) do looked[r] = true end
      for r = 1, R do
        if looked[r] then
          local m = 0
          for j = 1, D do m = m + g[r][j] ^ 2 / D end
          state[r] = state[r] + m
          for j = 1, D do ref[r][j] = ref[r][j] - 0.1 * g[r][j] / (math.sqrt(state[r]) + 1e-8) end
        end
      end
    end
    close(w, ref, 1e-12)
    close(opt.param_groups[1].state[1].sum, state, 1e-12)
    assert.are.same({ R }, opt.param_groups[1].state[1].sum.shape)
    close(w[5], W0()[5]:totable(), 0)   -- row 5 (and 6) never looked up: unchanged
  end)

  it('sparse and dense training give the same parameters, with a dense and a sparse group in one optimizer', function()
    local function run(sparse, cls, opts)
      ember.manual_seed(7)
      local model = dofile(SPEC_DIR .. '../../examples/dlrm.lua'){
        arch_mlp_bot = '4-8-3', arch_mlp_top = '6-1', table_sizes = { 20, 10 }, sparse = sparse }
      local opt = cls({ { params = model:sparse_parameters() }, { params = model:dense_parameters(), lr = 0.05 } }, opts)
      local dense = ember.rand(6, 4)
      local y = ember.rand(6, 1)
      for step = 1, 4 do
        local sp = { { ember.tensor({ 1, 5, 5, 9, 20, 3 }, I64), ember.tensor({ 1, 2, 3, 4, 5, 6 }, I64) },
          ember.tensor({ { 2, 3 }, { 3, 4 }, { 10, 1 }, { step, 2 }, { 7, 7 }, { 8, 9 } }, I64) }
        opt:zero_grad()
        ;((model(dense, sp) - y) ^ 2):mean():backward()
        opt:step()
      end
      return model, opt
    end
    for _, case in ipairs({ { optim.SGD, { lr = 0.3 } }, { optim.Adagrad, { lr = 0.3 } }, { optim.RowWiseAdagrad, { lr = 0.3 } } }) do
      local ms, opt = run(true, case[1], case[2])
      local md = run(false, case[1], case[2])
      assert.is_true(ember.is_sparse_grad(ms.emb[1].weight.grad))
      assert.is_true(ember.is_tensor(md.emb[1].weight.grad))
      local ps, pd = ms:parameters(), md:parameters()
      for i = 1, #ps do close(ps[i], pd[i]:totable(), 1e-6) end
      -- the state round-trips through a checkpoint
      local tensors, meta = opt:state_dict()
      local path = os.tmpname()
      ember.save(path, tensors, { metadata = meta })
      local t2, m2 = ember.load(path)
      os.remove(path)
      local fresh = case[1]({ { params = ms:sparse_parameters() }, { params = ms:dense_parameters(), lr = 0.05 } }, case[2])
      fresh:load_state_dict(t2, m2)
      for k, v in pairs(tensors) do
        local i, name = k:match('^state%.(%d+)%.(%w+)$')
        local st, n = nil, tonumber(i)
        for _, g in ipairs(fresh.param_groups) do
          if n < #g.params then st = g.state[n + 1]; break end
          n = n - #g.params
        end
        close(st[name], v:totable(), 0)
      end
    end
  end)

  it('refuses sparse gradients in Adam', function()
    local e = nn.Embedding(4, 2, { sparse = true })
    e(ember.tensor({ 1 }, I64)):sum():backward()
    raises(function() optim.Adam(e:parameters()):step() end, 'Adam: parameter 1 has a sparse gradient')
  end)
end)

describe('DLRM interaction', function()
  local function feats()
    local out = {}
    for f = 0, 3 do
      local rows = {}
      for b = 0, 1 do
        rows[b + 1] = {}
        for j = 0, 2 do rows[b + 1][j + 1] = ((b * 5 + j * 2 + f * 3) % 7) / 4 - 0.7 end
      end
      out[f + 1] = on_device(ember.tensor(rows, F64)):requires_grad_()
    end
    return out
  end

  it('matches interact_features (dot) forward and backward, with and without the diagonal', function()
    for _, itself in ipairs({ false, true }) do
      local fs = feats()
      local r = F.dot_interaction(fs[1], { fs[2], fs[3], fs[4] }, { self_interaction = itself })
      local tag = itself and 'inter_self' or 'inter'
      close(r, REF[tag .. '_out'], 1e-12)
      assert.are.same({ 2, 3 + (itself and 10 or 6) }, r.shape)
      ;(r * cm(r.shape[1], r.shape[2])):sum():backward()
      for i = 1, 4 do close(fs[i].grad, REF[tag .. '_grads'][i], 1e-12) end
    end
  end)

  it('has the cat variant, and checks its features', function()
    local fs = feats()
    local inter = nn.Interaction { op = 'cat' }
    local r = inter(fs[1], { fs[2] })
    close(r, ember.cat({ fs[1], fs[2] }, 2):totable(), 0)
    raises(function() F.dot_interaction(fs[1], { on_device(ember.zeros(2, 4, F64)) }) end,
      'dot_interaction: feature 2 has shape [2, 4], expected feature 1\'s [2, 3]')
    raises(function() nn.Interaction { op = 'sum' } end, "Interaction: op must be 'dot' or 'cat'")
  end)
end)

describe('examples/dlrm.lua', function()
  it('builds DLRM from its arguments and learns a planted signal', function()
    ember.manual_seed(3)
    local model = dofile(SPEC_DIR .. '../../examples/dlrm.lua'){
      arch_mlp_bot = '13-16-8', arch_mlp_top = '16-1', table_sizes = '50-40-30', arch_sparse_feature_size = 8 }
    -- top input: 8 + 4 * 3 / 2 pairs
    assert.are.equal(14, model.top[1].weight.shape[2])
    local B = 32
    local dense = ember.rand(B, 13)
    local sp, label = {}, {}
    for t, rows in ipairs({ 50, 40, 30 }) do
      sp[t] = { ember.empty(B * 2, I64):random_(1, rows + 1), ember.arange(1, B * 2 + 1, 2, I64) }
    end
    local first_idx = sp[1][1]:totable()
    for b = 1, B do label[b] = { first_idx[2 * b - 1] <= 25 and 1 or 0 } end
    local y = ember.tensor(label)
    local opt_s = optim.RowWiseAdagrad(model:sparse_parameters(), { lr = 0.1 })
    local opt_d = optim.Adagrad(model:dense_parameters(), { lr = 0.05 })
    local first, last
    for step = 1, 60 do
      local loss = ((model(dense, sp) - y) ^ 2):mean()
      opt_s:zero_grad(); opt_d:zero_grad()
      loss:backward()
      opt_s:step(); opt_d:step()
      first = first or loss:item()
      last = loss:item()
    end
    assert.is_true(last < first * 0.5, string.format('loss %g -> %g', first, last))
  end)
end)

describe('a table of 10M rows', function()
  it('trains a step with no dense gradient (memory far below rows * dim * 4 bytes)', function()
    local rows, dim = 10000000, 4
    local e = nn.EmbeddingBag(rows, dim, { mode = 'sum', sparse = true })
    local opt = optim.RowWiseAdagrad({ e.weight }, { lr = 0.1 })
    collectgarbage(); collectgarbage()
    local idx = ember.tensor({ 1, 77, 9999999, 10000000, 77 }, I64)
    local off = ember.tensor({ 1, 3 }, I64)
    local before = e.weight[77]:clone()
    local function step()
      local base = ember.C.em_memory_allocated()
      ember.C.em_memory_reset_peak()
      opt:zero_grad()
      e(idx, off):sum():backward()
      assert.is_true(ember.is_sparse_grad(e.weight.grad))
      assert.are.equal(4, e.weight.grad:nnz())
      opt:step()
      return tonumber(ember.C.em_memory_peak() - base)
    end
    -- the first step also makes the optimizer's state: one float per row, 1/dim of the table
    local first = step()
    assert.is_true(first < rows * 4 + 2 ^ 20, string.format('first step: peak growth %d bytes', first))
    local second = step()
    assert.is_true(second < 2 ^ 20, string.format('second step: peak growth %d bytes', second))
    assert.is_true(second < rows * dim * 4 / 100)
    assert.is_false(e.weight[77]:equal(before))
    close(e.weight[2], e.weight[2]:totable(), 0)
  end)

  -- The process's resident memory, not only ember's allocator: whatever a step touches
  -- (kernel scratch, the optimizer, Lua) counts. VmHWM is reset through clear_refs (Linux 4.0).
  local function status_kb(key)
    local f = assert(io.open('/proc/self/status'))
    local v = f:read('*a'):match(key .. ':%s*(%d+)')
    f:close()
    return tonumber(v)
  end
  local function reset_peak()
    local f = io.open('/proc/self/clear_refs', 'w')
    if not f then return false end
    local ok = f:write('5')
    f:close()
    return ok ~= nil
  end
  it('trains DLRM-like steps within a resident-memory bound far below a dense gradient', function()
    local rows, dim, B = 10000000, 8, 128
    local e = nn.EmbeddingBag(rows, dim, { mode = 'sum', sparse = true })   -- 320 MB, every page touched
    local head = nn.Linear(dim, 1)
    local opt = optim.RowWiseAdagrad({ e.weight }, { lr = 0.1 })
    local dense_opt = optim.Adagrad(head:parameters(), { lr = 0.1 })
    collectgarbage(); collectgarbage()
    if not reset_peak() then pending('/proc/self/clear_refs cannot reset the peak here'); return end
    local base_kb = status_kb('VmRSS')
    ember.manual_seed(3)
    local idx = ember.randint(1, rows + 1, { 4 * B })   -- 4 rows a bag, spread over the table
    local off = ember.arange(1, 4 * B, 4, I64)
    local y = ember.randint(0, 2, { B, 1 }):to('float32')
    local used = {}
    for _, r in ipairs(idx:totable()) do used[r] = true end
    local probe, other = idx:totable()[1], 12345
    while used[other] do other = other + 1 end
    local before, untouched = e.weight[probe]:clone(), e.weight[other]:clone()
    local function step()
      opt:zero_grad(); dense_opt:zero_grad()
      F.binary_cross_entropy_with_logits(head(e(idx, off)), y):backward()
      assert.is_true(ember.is_sparse_grad(e.weight.grad))
      opt:step(); dense_opt:step()
    end
    step()   -- also makes the row-wise state: one float per row (1/dim of the table)
    local first_kb = status_kb('VmHWM') - base_kb
    local dense_grad_kb = rows * dim * 4 / 1024
    assert.is_true(first_kb < rows * 4 / 1024 + 32 * 1024,
      string.format('first step: resident peak grew %d KB (a dense gradient is %d KB)', first_kb, dense_grad_kb))
    collectgarbage(); collectgarbage()
    reset_peak()
    local mid_kb = status_kb('VmRSS')
    for _ = 1, 5 do step() end
    local more_kb = status_kb('VmHWM') - mid_kb
    assert.is_true(more_kb < dense_grad_kb / 20,
      string.format('5 more steps: resident peak grew %d KB (a dense gradient is %d KB)', more_kb, dense_grad_kb))
    assert.is_false(e.weight[probe]:equal(before))
    assert.is_true(e.weight[other]:equal(untouched))
  end)
end)

describe('table-batched embeddings', function()
  local SIZES = { 40, 7, 300, 25 }
  local function inputs(seed, B)
    ember.manual_seed(seed)
    return { ember.randint(1, 41, { B, 2 }),
      { ember.randint(1, 8, { 2 * B }), ember.tensor({ 1, 1, 3, 6, 6, 9 }, I64):narrow(1, 1, B) },   -- empty bags too
      ember.randint(1, 301, { B, 3 }),
      { ember.randint(1, 26, { B }), ember.arange(1, B + 1, I64) } }
  end
  it('equals one EmbeddingBag per table: init, output, sparse gradient, SGD and row-wise Adagrad steps', function()
    for _, mode in ipairs { 'sum', 'mean' } do
      ember.manual_seed(5)
      local bags = {}
      for t, n in ipairs(SIZES) do bags[t] = nn.EmbeddingBag(n, 4, { mode = mode, sparse = true }) end
      ember.manual_seed(5)
      local tbe = nn.TableBatchedEmbeddingBags(SIZES, 4, { mode = mode })
      for t = 1, #SIZES do assert.is_true(tbe:table(t):equal(bags[t].weight), 'initial table ' .. t) end
      local ps = {}
      for t = 1, #SIZES do ps[t] = bags[t].weight end
      local o1 = { optim.RowWiseAdagrad(ps, { lr = 0.3 }), optim.SGD(ps, { lr = 0.2 }) }
      local o2 = { optim.RowWiseAdagrad({ tbe.weight }, { lr = 0.3 }), optim.SGD({ tbe.weight }, { lr = 0.2 }) }
      for step = 1, 4 do
        local sp = inputs(step, 6)
        local E = tbe(sp)
        assert.are.same({ 4, 6, 4 }, E.shape)
        local loss2 = (E * E):sum() + E:sum()
        local loss1 = 0
        for t = 1, #SIZES do
          local f = sp[t]
          local e = ember.is_tensor(f) and bags[t](f) or bags[t](f[1], f[2])
          close(E[t], e:totable(), 1e-6)
          loss1 = loss1 + (e * e):sum() + e:sum()
        end
        local o = step % 2 + 1
        o1[o]:zero_grad(); o2[o]:zero_grad()
        loss1:backward(); loss2:backward()
        assert.is_true(ember.is_sparse_grad(tbe.weight.grad))
        o1[o]:step(); o2[o]:step()
        for t = 1, #SIZES do close(tbe:table(t), bags[t].weight:totable(), 1e-5) end
      end
    end
  end)
  it('checks every index against its own table, and the bag counts', function()
    local tbe = nn.TableBatchedEmbeddingBags({ 5, 5 }, 2)
    raises(function() tbe({ ember.tensor({ { 6 } }, I64), ember.tensor({ { 1 } }, I64) }) end,
      'embedding_bags_batched: table 1: index 6 is out of range for 5 rows (expected 1..5)')
    raises(function() tbe({ ember.tensor({ { 1 } }, I64), ember.tensor({ { 1 }, { 2 } }, I64) }) end,
      'embedding_bags_batched: table 2 has 2 bags, table 1 has 1 (one bag per sample)')
    raises(function() tbe({ ember.tensor({ { 1 } }, I64) }) end, 'TableBatchedEmbeddingBags: expected 2 features')
    raises(function() tbe({ { ember.tensor({ 1, 2 }, I64), ember.tensor({ 2 }, I64) }, ember.tensor({ { 1 } }, I64) }) end,
      'embedding_bags_batched: table 1: offsets[1] = 2')
  end)
  it('feeds dot_interaction as a [T, B, D] tensor: the same values and gradients as the list', function()
    for _, self_i in ipairs { false, true } do
      ember.manual_seed(9)
      local x = ember.randn(5, 8, F64):requires_grad_()
      local E = ember.randn(3, 5, 8, F64):requires_grad_()
      local y = F.dot_interaction(x, E, { self_interaction = self_i })
      local x2, parts = x:detach():requires_grad_(), {}
      for t = 1, 3 do parts[t] = E[t]:detach():requires_grad_() end
      local y2 = F.dot_interaction(x2, parts, { self_interaction = self_i })
      close(y, y2:totable(), 1e-12)
      local g = ember.randn(y.shape[1], y.shape[2], F64)
      y:backward(g); y2:backward(g)
      close(x.grad, x2.grad:totable(), 1e-12)
      for t = 1, 3 do close(E.grad[t], parts[t].grad:totable(), 1e-12) end
    end
    raises(function() F.dot_interaction(ember.randn(5, 8), ember.randn(3, 4, 8)) end,
      "dot_interaction: feature 2 has shape [3, 4, 8], expected feature 1's [5, 8] (or [T, 5, 8]")
    raises(function() F.dot_interaction(ember.randn(5, 8), ember.randn(5, 8)) end,
      'dot_interaction: argument 2 must be a list of [B, D] tensors or one [T, B, D] tensor')
  end)
  it('matches a plain Gram-matrix reference at the Kaggle shape and with a ragged dimension', function()
    -- 27 features (the blocks of four rows end part-way), D = 16 (whole vector blocks) and
    -- D = 20 (a ragged tail); float64 against sums written out here
    for _, case in ipairs { { 27, 16, false }, { 27, 20, true }, { 6, 20, false } } do
      local n, D, self_i = case[1], case[2], case[3]
      ember.manual_seed(n + D)
      local B = 3
      local x = ember.randn(B, D, F64):requires_grad_()
      local E = ember.randn(n - 1, B, D, F64):requires_grad_()
      local y = F.dot_interaction(x, E, { self_interaction = self_i })
      local g = ember.randn(y.shape[1], y.shape[2], F64)
      y:backward(g)
      local X, Et, G, Y = x:totable(), E:detach():totable(), g:totable(), y:detach():totable()
      local function feat(i, b) return i == 1 and X[b] or Et[i - 1][b] end
      for b = 1, B do
        local k = D
        local dX = {}
        for i = 1, n do dX[i] = {} for d = 1, D do dX[i][d] = i == 1 and G[b][d] or 0 end end
        for i = 1, n do
          for j = 1, self_i and i or i - 1 do
            k = k + 1
            local dot = 0
            for d = 1, D do dot = dot + feat(i, b)[d] * feat(j, b)[d] end
            assert.is_true(math.abs(Y[b][k] - dot) < 1e-10, string.format('out[%d][%d]', b, k))
            for d = 1, D do
              dX[i][d] = dX[i][d] + G[b][k] * feat(j, b)[d]
              dX[j][d] = dX[j][d] + G[b][k] * feat(i, b)[d]
            end
          end
        end
        assert.are.equal(k, y.shape[2])
        local gx, gE = x.grad:totable(), E.grad:totable()
        for i = 1, n do
          local got = i == 1 and gx[b] or gE[i - 1][b]
          for d = 1, D do
            assert.is_true(math.abs(got[d] - dX[i][d]) < 1e-10,
              string.format('n %d D %d: grad of feature %d, sample %d, column %d: %g vs %g', n, D, i, b, d, got[d], dX[i][d]))
          end
        end
      end
    end
  end)
  it('coalesces many rows of a big table in ascending order, repeats summed (radix sort)', function()
    local rows = 3000000   -- 22 bits: two radix passes, and rows near both ends
    local e = nn.EmbeddingBag(rows, 1, { mode = 'sum', sparse = true })
    ember.manual_seed(4)
    local idx = ember.randint(1, rows + 1, { 300 })
    local list = idx:totable()
    for k = 1, 60 do list[#list + 1] = list[k] end   -- repeats
    list[#list + 1], list[#list + 2] = 1, rows
    local t = ember.tensor(list, I64)
    e(t:view(#list, 1)):sum():backward()
    local want = {}
    for _, r in ipairs(list) do want[r] = (want[r] or 0) + 1 end
    local got, vals = e.weight.grad:indices():totable(), e.weight.grad:values():totable()
    local n = 0
    for _ in pairs(want) do n = n + 1 end
    assert.are.equal(n, #got)
    for k = 1, #got do
      if k > 1 then assert.is_true(got[k] > got[k - 1]) end
      assert.are.equal(want[got[k]], vals[k][1])
    end
  end)
  it('skip_rng moves the generator as a fill would; shard_plan balances whole tables', function()
    ember.manual_seed(2)
    ember.empty(1001):uniform_()
    local a = ember.rand(4)
    ember.manual_seed(2)
    ember.skip_rng(1001)
    assert.is_true(ember.rand(4):equal(a))
    raises(function() ember.skip_rng(-1) end, 'skip_rng: got -1, expected a non-negative integer')
    assert.are.same({ 0, 1, 1, 1 }, nn.shard_plan({ 100, 10, 50, 40 }, 8, 2))
    assert.are.same({ 0, 1, 2, 2 }, nn.shard_plan({ 9, 8, 7, 1 }, 4, 3))   -- the 1 joins the lightest (7)
    assert.are.same({ 0, 0 }, nn.shard_plan({ 3, 4 }, { 2, 2 }, 1))
    raises(function() nn.shard_plan({}, 4, 2) end, 'shard_plan: expected a non-empty list of table sizes')
    raises(function() nn.shard_plan({ 3, 0 }, 4, 2) end, 'shard_plan: table 2 has 0 rows')
  end)
end)
