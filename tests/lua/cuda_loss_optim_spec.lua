-- The CUDA backend's class losses, embedding bags and fused optimizers (runtime/plugins/cuda/
-- loss.cu, embedding.cu, optim.cu) against the CPU backend: forward and backward with
-- every option, index errors with the CPU's messages, determinism of the reductions, and
-- optimizer steps over long lists of parameters (several multi-tensor launches, strided
-- parameters, two dtypes). Runs only where ember.cuda.is_available(); elsewhere the
-- whole file is one pending test.
local U = dofile(debug.getinfo(1, 'S').source:match('^@(.*[/\\])') .. 'tensor_testutil.lua')
local close = U.close
local nn, F, optim = ember.nn, ember.nn.functional, ember.optim

local function cuda_available()
  local ok, yes = pcall(function() return ember.cuda ~= nil and ember.cuda.is_available() end)
  return ok and yes == true
end

-- EMBER_CUDA_SPEC_DEVICE=cpu runs the spec with the CPU standing in for the GPU: every
-- comparison is then trivial, but the spec's own code gets exercised on a machine
-- without a GPU.
local DEVICE = os.getenv('EMBER_CUDA_SPEC_DEVICE') or 'cuda'
if DEVICE == 'cuda' and not cuda_available() then
  pending('CUDA losses, embedding bags and optimizers (no CUDA device here)')
  return
end

local function gpu(t)
  local r = t:to(DEVICE)
  return DEVICE == 'cpu' and r:clone() or r   -- to() on the same device would alias
end
local function leaf(t) return t:detach():clone():requires_grad_() end

-- The largest |a - b| (a on any device, b on the CPU); NaNs must sit at the same places.
local function maxdiff(a, b)
  a = a:to('cpu'):to('float64')
  b = b:to('cpu'):to('float64')
  local an, bn = a:ne(a), b:ne(b)
  assert.is_true(an:eq(bn):all():item(), 'NaNs at different places')
  local d = (a - b):abs():masked_fill(an, 0)
  return d:numel() > 0 and d:max():item() or 0
end

local function same(a, b, tol, what)
  local d = maxdiff(a, b)
  assert.is_true(d <= tol, string.format('%s: max |cuda - cpu| = %g > %g', what or 'value', d, tol))
end

-- The error message of fn without its position.
local function error_of(fn)
  local ok, msg = pcall(fn)
  assert.is_false(ok, 'expected an error')
  return (tostring(msg):gsub('^.-:%d+: ', ''))
end

local function with_device(opts, dev)
  local out = {}
  for k, v in pairs(opts or {}) do out[k] = ember.is_tensor(v) and v:to(dev) or v end
  return out
end

describe('cuda class losses', function()
  -- One loss on both devices: values, and the input gradient for a random output gradient.
  local function check(fn, x, target, opts, tol)
    local xc, xg = leaf(x), leaf(gpu(x))
    local lc = fn(xc, target, opts)
    local lg = fn(xg, gpu(target), with_device(opts, DEVICE))
    assert.are.equal(lc.dtype, lg.dtype)
    same(lg, lc, tol, 'loss')
    local g = ember.randn(lc.shape, { dtype = x.dtype })
    if lc:dim() == 0 then g = ember.tensor(1.5, { dtype = x.dtype }) end
    lc:backward(g)
    lg:backward(gpu(g))
    same(xg.grad, xc.grad, tol, 'input gradient')
  end

  local function targets(n, C, ignore, dtype)
    local t = ember.randint(1, C + 1, n, { dtype = dtype })
    if ignore then t[1] = ignore end
    return t
  end

  it('matches the CPU for every option of cross_entropy', function()
    ember.manual_seed(11)
    for _, red in ipairs({ 'none', 'mean', 'sum' }) do
      local x = ember.randn(6, 5) * 3
      local w = ember.rand(5) + 0.5
      check(F.cross_entropy, x, targets({ 6 }, 5), { reduction = red }, 1e-5)
      check(F.cross_entropy, x, targets({ 6 }, 5, 2), { reduction = red, weight = w, ignore_index = 2 }, 1e-5)
      check(F.cross_entropy, x, targets({ 6 }, 5, 3), { reduction = red, weight = w, ignore_index = 3,
        label_smoothing = 0.2 }, 1e-5)
      check(F.cross_entropy, x, targets({ 6 }, 5), { reduction = red, label_smoothing = 0.1 }, 1e-5)
      -- spatial: [N, C, H, W] (a thread per sample on the GPU)
      local xs = ember.randn(3, 4, 5, 2)
      check(F.cross_entropy, xs, targets({ 3, 5, 2 }, 4, 1), { reduction = red, weight = ember.rand(4) + 0.1,
        ignore_index = 1, label_smoothing = 0.3 }, 1e-5)
      -- many classes (a block per row on the GPU)
      local xl = ember.randn(4, 3000) * 4
      check(F.cross_entropy, xl, targets({ 4 }, 3000), { reduction = red, weight = ember.rand(3000),
        label_smoothing = 0.05 }, 1e-4)
      -- float64 with int32 targets
      local xd = ember.randn(7, 6, { dtype = 'float64' })
      check(F.cross_entropy, xd, targets({ 7 }, 6, 4, 'int32'), { reduction = red, ignore_index = 4,
        weight = ember.rand(6, { dtype = 'float64' }), label_smoothing = 0.15 }, 1e-12)
    end
    -- a single sample [C] with a 0-d target
    check(F.cross_entropy, ember.randn(5), ember.tensor(3, { dtype = 'int64' }), nil, 1e-6)
  end)

  it('matches the CPU for nll_loss on log-probabilities', function()
    ember.manual_seed(12)
    for _, red in ipairs({ 'none', 'mean', 'sum' }) do
      local lp = ember.randn(8, 5):log_softmax(2)
      check(F.nll_loss, lp, targets({ 8 }, 5, 2), { reduction = red, weight = ember.rand(5), ignore_index = 2 }, 1e-6)
      check(F.nll_loss, ember.randn(2, 5, 3):log_softmax(2), targets({ 2, 3 }, 5), { reduction = red }, 1e-6)
    end
  end)

  it('gives NaN for a mean over ignored samples, as the CPU', function()
    local x, t = ember.randn(3, 4), ember.tensor({ 2, 2, 2 }, { dtype = 'int64' })
    local lc = F.cross_entropy(x, t, { ignore_index = 2 })
    local lg = F.cross_entropy(gpu(x), gpu(t), { ignore_index = 2 })
    assert.is_true(lc:item() ~= lc:item())
    assert.is_true(lg:item() ~= lg:item())
  end)

  it('handles infinite logits as the CPU does', function()
    local x = ember.tensor({ { -math.huge, 0, 1 }, { -math.huge, -math.huge, -math.huge }, { 1, 2, 3 } })
    local t = ember.tensor({ 2, 1, 3 }, { dtype = 'int64' })
    same(F.cross_entropy(gpu(x), gpu(t), { reduction = 'none' }), F.cross_entropy(x, t, { reduction = 'none' }),
      1e-6, 'loss')
  end)

  it('reports a target out of range with its value, like the CPU', function()
    local x, t = ember.randn(4, 5), ember.tensor({ 1, 2, 9, 6 }, { dtype = 'int64' })
    local ec = error_of(function() F.cross_entropy(x, t) end)
    local eg = error_of(function() F.cross_entropy(gpu(x), gpu(t)) end)
    assert.are.equal(ec, eg)
    assert.is_truthy(eg:find('target 9', 1, true))
    local t32 = ember.tensor({ 0, 1, 1, 1 }, { dtype = 'int32' })
    assert.are.equal(error_of(function() F.nll_loss(x, t32, { ignore_index = 3 }) end),
      error_of(function() F.nll_loss(gpu(x), gpu(t32), { ignore_index = 3 }) end))
  end)

  it('is deterministic', function()
    local x, t = gpu(ember.randn(5000, 37)), gpu(ember.randint(1, 38, { 5000 }))
    local a, b = F.cross_entropy(x, t), F.cross_entropy(x, t)
    assert.are.equal(a:item(), b:item())
  end)
end)

describe('cuda embedding_bag', function()
  -- Bag 1 is empty, bag 3 repeats rows; indices are 1-based, offsets 1-based starts.
  local IDX = { 3, 3, 7, 1, 10, 3, 3, 2, 10, 5, 3, 8 }
  local OFF = { 1, 1, 4, 9, 13 }   -- bags: [], [3 3 7], [1 10 3 3 2], [10 5 3 8], []

  local function check(D, mode, with_psw, dtype, tol)
    local w = ember.randn(10, D, { dtype = dtype })
    local idx, off = ember.tensor(IDX, { dtype = 'int64' }), ember.tensor(OFF, { dtype = 'int64' })
    local psw = with_psw and ember.randn(#IDX, { dtype = dtype }) or nil
    local wc, wg = leaf(w), leaf(gpu(w))
    local pc, pg = psw and leaf(psw), psw and leaf(gpu(psw))
    local oc = F.embedding_bag(idx, wc, { offsets = off, mode = mode, per_sample_weights = pc })
    local og = F.embedding_bag(gpu(idx), wg, { offsets = gpu(off), mode = mode, per_sample_weights = pg })
    same(og, oc, tol, mode .. ' forward')
    local g = ember.randn(oc.shape, { dtype = dtype })
    oc:backward(g)
    og:backward(gpu(g))
    same(wg.grad, wc.grad, tol, mode .. ' weight gradient')
    if psw then same(pg.grad, pc.grad, tol, 'per_sample_weights gradient') end
    -- the weight gradient is the same on every run (no float atomics)
    local wg2 = leaf(gpu(w))
    F.embedding_bag(gpu(idx), wg2, { offsets = gpu(off), mode = mode, per_sample_weights = pg and pg:detach() })
        :backward(gpu(g))
    assert.are.equal(0, maxdiff(wg2.grad, wg.grad:to('cpu')))
  end

  it('matches the CPU in every mode, forward and backward', function()
    ember.manual_seed(21)
    for _, D in ipairs({ 7, 300 }) do
      check(D, 'sum', false, 'float32', 1e-5)
      check(D, 'sum', true, 'float32', 1e-5)
      check(D, 'mean', false, 'float32', 1e-5)
      check(D, 'max', false, 'float32', 0)
      check(D, 'mean', false, 'float64', 1e-12)
    end
  end)

  it('takes 2-d indices and int32 indices', function()
    local w = ember.randn(6, 4)
    local idx = ember.tensor({ { 1, 2, 2 }, { 6, 1, 3 } }, { dtype = 'int32' })
    for _, mode in ipairs({ 'sum', 'mean', 'max' }) do
      local wc, wg = leaf(w), leaf(gpu(w))
      local oc, og = F.embedding_bag(idx, wc, { mode = mode }), F.embedding_bag(gpu(idx), wg, { mode = mode })
      same(og, oc, 1e-6, mode)
      oc:sum():backward()
      og:sum():backward()
      same(wg.grad, wc.grad, 1e-6, mode .. ' gradient')
    end
  end)

  it('reports bad indices and offsets like the CPU', function()
    local w = ember.randn(10, 3)
    local idx, off = ember.tensor({ 1, 11, 2 }, { dtype = 'int64' }), ember.tensor({ 1, 2 }, { dtype = 'int64' })
    local ec = error_of(function() F.embedding_bag(idx, w, { offsets = off }) end)
    assert.are.equal(ec, error_of(function() F.embedding_bag(gpu(idx), gpu(w), { offsets = gpu(off) }) end))
    assert.is_truthy(ec:find('index 11', 1, true))
    local bad_off = ember.tensor({ 1, 3, 2 }, { dtype = 'int64' })
    local ok_idx = ember.tensor({ 1, 2, 3 }, { dtype = 'int64' })
    assert.are.equal(error_of(function() F.embedding_bag(ok_idx, w, { offsets = bad_off }) end),
      error_of(function() F.embedding_bag(gpu(ok_idx), gpu(w), { offsets = gpu(bad_off) }) end))
  end)
end)

describe('cuda fused optimizers', function()
  -- 150 parameters: small ones (more than one launch's table), big ones (more than one
  -- launch's blocks), transposed and sliced ones (the strided path) and float64 ones.
  local function make_params()
    ember.manual_seed(31)
    local ps = {}
    for i = 1, 140 do ps[#ps + 1] = ember.randn(i % 7 + 1, 13) end
    ps[#ps + 1] = ember.randn(6, 1000, 1000)                  -- 92 chunks of 65536
    ps[#ps + 1] = ember.randn(4100, 4100)                     -- 257 chunks
    ps[#ps + 1] = ember.randn(40, 30):t()                     -- strided
    ps[#ps + 1] = ember.randn(9, 20):narrow(2, 3, 10)         -- strided
    for _ = 1, 4 do ps[#ps + 1] = ember.randn(33, 5, { dtype = 'float64' }) end
    ps[#ps + 1] = ember.randn(5, 8, { dtype = 'float64' }):t()
    ps[#ps + 1] = ember.zeros(0, 3)                           -- empty
    return ps
  end

  local function run(make_opt, steps)
    local base = make_params()
    local cpu_ps, gpu_ps = {}, {}
    for i, p in ipairs(base) do
      cpu_ps[i] = nn.Parameter(p)
      -- the same strides on the GPU: copy the storage's layout, not a contiguous copy
      if p:is_contiguous() then gpu_ps[i] = nn.Parameter(gpu(p))
      elseif p:dim() == 2 and p:stride(1) == 1 then   -- t() of a contiguous matrix
        gpu_ps[i] = nn.Parameter(gpu(p:t():contiguous()):t())
      else
        gpu_ps[i] = nn.Parameter(gpu(p:contiguous()))   -- sliced: strided grads cover the path below
      end
    end
    local oc, og = make_opt(cpu_ps), make_opt(gpu_ps)
    for s = 1, steps do
      for i, p in ipairs(cpu_ps) do
        local g = ember.randn(p.shape, { dtype = p.dtype })
        p.grad = g
        -- a transposed gradient for some parameters: strided grads with contiguous params
        gpu_ps[i].grad = (i % 5 == 0 and g:dim() == 2) and gpu(g:t():contiguous()):t() or gpu(g)
        if i == 3 and s == 2 then p.grad, gpu_ps[i].grad = nil, nil end   -- skipped this step
      end
      oc:step()
      og:step()
    end
    for i = 1, #cpu_ps do
      local tol = cpu_ps[i].dtype == 'float64' and 1e-12 or 2e-5
      same(gpu_ps[i], cpu_ps[i], tol, 'parameter ' .. i)
    end
    return oc, og
  end

  it('SGD with momentum, nesterov and weight decay matches the CPU', function()
    run(function(ps) return optim.SGD(ps, { lr = 0.05, momentum = 0.9, nesterov = true, weight_decay = 0.01 }) end, 3)
    run(function(ps) return optim.SGD(ps, { lr = 0.1, momentum = 0.5, dampening = 0.3, maximize = true }) end, 3)
    run(function(ps) return optim.SGD(ps, { lr = 0.1 }) end, 2)
  end)

  it('Adam and AdamW match the CPU, state included', function()
    local oc, og = run(function(ps) return optim.Adam(ps, { lr = 0.01, weight_decay = 0.1 }) end, 3)
    local sc, sg = oc.param_groups[1].state, og.param_groups[1].state
    for _, i in ipairs({ 1, 141, 143, 150 }) do
      same(sg[i].exp_avg, sc[i].exp_avg, 1e-5, 'exp_avg ' .. i)
      same(sg[i].exp_avg_sq, sc[i].exp_avg_sq, 1e-5, 'exp_avg_sq ' .. i)
    end
    run(function(ps) return optim.AdamW(ps, { lr = 0.01, betas = { 0.8, 0.99 }, maximize = true }) end, 3)
  end)

  it('clip_grad_norm_ matches the CPU for every norm and is deterministic', function()
    for _, norm_type in ipairs({ 2, 1, 3, math.huge }) do
      local ps = make_params()
      local cg, gg = {}, {}
      for i, p in ipairs(ps) do
        cg[i] = nn.Parameter(ember.zeros(p.shape, { dtype = p.dtype }))
        cg[i].grad = p:contiguous()
        gg[i] = nn.Parameter(gpu(cg[i]:detach()))
        gg[i].grad = (i % 4 == 0 and p:dim() == 2) and gpu(p:t():contiguous()):t() or gpu(p:contiguous())
      end
      local nc = nn.utils.clip_grad_norm_(cg, 5, norm_type)
      local ng = nn.utils.clip_grad_norm_(gg, 5, norm_type)
      assert.is_true(math.abs(nc - ng) <= 1e-9 * nc, string.format('norm %s: cpu %.17g, cuda %.17g', norm_type, nc, ng))
      for i = 1, #cg, 17 do same(gg[i].grad, cg[i].grad, 1e-6, 'clipped gradient ' .. i) end
      -- the same norm, bit for bit, on a second run
      local again = {}
      for i, p in ipairs(gg) do
        again[i] = nn.Parameter(p:detach():clone())
        again[i].grad = gpu(cg[i].grad:contiguous())
      end
      local n1 = nn.utils.clip_grad_norm_(again, 1e30, norm_type)
      local n2 = nn.utils.clip_grad_norm_(again, 1e30, norm_type)
      assert.are.equal(n1, n2)
    end
    -- NaN propagates, also through the max
    local p = nn.Parameter(gpu(ember.zeros(3)))
    p.grad = gpu(ember.tensor({ 1, 0 / 0, 2 }))
    local n = nn.utils.clip_grad_norm_({ p }, 1, math.huge)
    assert.is_true(n ~= n)
  end)
end)
