-- CUDA backend, recommendation models (issue 18): row-sparse EmbeddingBag / Embedding
-- gradients, their coalescing, SGD / Adagrad / row-wise Adagrad over sparse and dense rows,
-- DLRM's dot and cat interactions and a small DLRM trained a few steps, each on the GPU
-- against the CPU backend on the same inputs (the CPU is checked against PyTorch in
-- recsys_spec.lua). Runs only where a GPU is usable; elsewhere the file reports one pending
-- test (and fails when EMBER_TEST_DEVICE=cuda insists on a GPU that is not there).
--
-- Tolerances (absolute + relative, as U.close). The GPU kernels add the same terms in the
-- CPU's order and use no float atomics (embedding.cu, sparse_rows.cu, interaction.cu), so
-- the sparse rows match exactly and values differ only where nvcc fuses a multiply-add
-- into one FMA rounding: a few ulps per term. float64: 1e-12; float32: 1e-5 for sums of
-- up to ~40 terms of unit size (2^-24 ~ 6e-8 per term), 5e-5 for the interaction's dot
-- products over D = 128; training runs compound this over their steps (TRAIN_TOL).
local U = dofile(debug.getinfo(1, 'S').source:match('^@(.*[/\\])') .. 'tensor_testutil.lua')
local close = U.close
local nn, F, optim = ember.nn, ember.nn.functional, ember.optim
local SPEC_DIR = debug.getinfo(1, 'S').source:match('^@(.*[/\\])')

local function cuda_available()
  if ember.cuda and ember.cuda.is_available then return ember.cuda.is_available() end
  local ok, n = pcall(ember.device_count, 'cuda')
  return ok and n > 0
end

local requested = rawget(_G, 'test_device') or os.getenv('EMBER_TEST_DEVICE') or 'cpu'
if not cuda_available() then
  describe('cuda recsys', function()
    if requested:match('^cuda') then
      it('has a GPU when EMBER_TEST_DEVICE=cuda asks for one', function()
        error('EMBER_TEST_DEVICE=' .. requested .. ', but no CUDA device is available')
      end)
    else
      it('needs a GPU', function() pending('no usable CUDA device') end)
    end
  end)
  return
end

local DEV = requested:match('^cuda') and requested or 'cuda'
local TOL = { float32 = 1e-5, float64 = 1e-12 }
local TRAIN_TOL = { float32 = 1e-4, float64 = 1e-10 }
local I64, I32 = { dtype = 'int64' }, { dtype = 'int32' }

local function gpu(t) return t:to(DEV) end
-- a new leaf on dev holding t's values (a copy even on the CPU, so runs never share one)
local function leaf(t, dev) return t:clone():to(dev):requires_grad_() end
local function same(g, c, tol, what)
  assert.are.same(c.shape, g.shape, what)
  assert.is_truthy(tostring(g.device):match('^cuda'), (what or '') .. ': on ' .. tostring(g.device))
  local ok, err = pcall(close, g:to('cpu'), c:totable(), tol)
  assert(ok, (what or '') .. ': ' .. tostring(err))
end

-- A sparse gradient on the GPU equals the CPU's: the same rows, values within tol.
local function same_sparse(gg, cg, tol, what)
  assert.is_true(ember.is_sparse_grad(gg), what .. ': the GPU gradient is not sparse')
  assert.is_true(ember.is_sparse_grad(cg), what .. ': the CPU gradient is not sparse')
  assert.are.same(cg.shape, gg.shape, what)
  assert.are.equal(cg:nnz(), gg:nnz(), what .. ': nnz')
  same(gg:indices(), cg:indices(), 0, what .. ': rows')
  same(gg:values(), cg:values(), tol, what .. ': values')
end

-- Random bags over R rows: L indices (many repeats), B bags of which some are empty.
local function random_bags(R, L, B, seed)
  ember.manual_seed(seed)
  local idx = ember.empty(L, I64):random_(1, R + 1)
  local cuts = ember.empty(B - 1, I64):random_(1, L + 1):sort()
  local off = ember.cat({ ember.ones(1, I64), cuts }, 1)   -- 1-based, non-decreasing: empty bags too
  return idx, off
end

describe('cuda sparse EmbeddingBag', function()
  it('makes offsets given as a table on the weight\'s device, and refuses index tensors on another device', function()
    local w = gpu(ember.randn(10, 3))
    local idx = ember.tensor({ 2, 5, 5, 9 }, I64)
    same(F.embedding_bag(gpu(idx), w, { offsets = { 1, 3 }, mode = 'sum' }),
      F.embedding_bag(idx, w:to('cpu'), { offsets = { 1, 3 }, mode = 'sum' }), 0, 'table offsets')
    U.raises(function() F.embedding_bag(idx, w, { offsets = gpu(ember.tensor({ 1, 3 }, I64)) }) end,
      'embedding_bag: the indices are on another device than the weight')
    U.raises(function() F.embedding_bag(gpu(idx), w, { offsets = ember.tensor({ 1, 3 }, I64) }) end,
      'embedding_bag: the offsets are on another device than the weight')
  end)

  for _, dtype in ipairs({ 'float32', 'float64' }) do
    for _, mode in ipairs({ 'sum', 'mean', 'max' }) do
      it(mode .. ' bags: output, sparse rows and values, per_sample_weights gradient as the CPU (' .. dtype .. ')',
        function()
          local R, D, L, B = 300, 37, 400, 64   -- D not a multiple of 32: partial warps
          local idx, off = random_bags(R, L, B, 11)
          local w0 = ember.randn(R, D, { dtype = dtype })
          local seed = ember.randn(B, D, { dtype = dtype })
          local psw0 = mode == 'sum' and ember.randn(L, { dtype = dtype }) or nil   -- sum bags only, as PyTorch
          for _, itype in ipairs({ I64, I32 }) do
            local function run(dev)
              local w = leaf(w0, dev)
              local p = psw0 and leaf(psw0, dev) or nil
              local y = F.embedding_bag(idx:to(dev, itype), w, { offsets = off:to(dev), mode = mode, sparse = true,
                per_sample_weights = p })
              ;(y * seed:to(dev)):sum():backward()
              return y, w.grad, p and p.grad
            end
            local yc, gc, pc = run('cpu')
            local yg, gg, pg = run(DEV)
            local what = mode .. ' ' .. dtype .. ' ' .. itype.dtype
            same(yg, yc, TOL[dtype], what .. ': output')
            same_sparse(gg, gc, TOL[dtype], what)
            if pc then same(pg, pc, TOL[dtype], what .. ': psw gradient') end
          end
        end)
    end
  end

  it('leaves padding_idx out (values, mean counts, gradient) and takes include_last_offset as the CPU', function()
    local R, D = 50, 8
    local idx, off = random_bags(R, 120, 20, 5)
    local w0 = ember.randn(R, D, { dtype = 'float64' })
    for _, opts in ipairs({ { mode = 'mean', padding_idx = 7 }, { mode = 'sum', padding_idx = 1 },
      { mode = 'max', padding_idx = 3 }, { mode = 'sum', include_last_offset = true } }) do
      local function run(dev)
        local w = leaf(w0, dev)
        local o = {}
        for k, v in pairs(opts) do o[k] = v end
        o.sparse = true
        o.offsets = opts.include_last_offset and ember.cat({ off, ember.tensor({ 121 }, I64) }, 1):to(dev)
          or off:to(dev)
        local y = F.embedding_bag(idx:to(dev), w, o)
        ;(y * ember.arange(1, y:numel() + 1, { dtype = 'float64' }):view(y.shape[1], D):to(dev)):sum():backward()
        return y, w.grad
      end
      local yc, gc = run('cpu')
      local yg, gg = run(DEV)
      local what = opts.mode .. (opts.padding_idx and ' padding_idx ' .. opts.padding_idx or ' include_last_offset')
      same(yg, yc, 1e-12, what .. ': output')
      same_sparse(gg, gc, 1e-12, what)
    end
  end)

  it('gives Embedding a sparse gradient without the padding row, on the GPU', function()
    local R, D = 40, 5
    ember.manual_seed(2)
    local idx = ember.empty(6, 7, I64):random_(1, R + 1)
    idx[1][1] = 9
    local w0 = ember.randn(R, D)
    local function run(dev)
      local w = leaf(w0, dev)
      local y = F.embedding(idx:to(dev), w, { padding_idx = 9, sparse = true })
      ;(y * y):sum():backward()
      return y, w.grad
    end
    local yc, gc = run('cpu')
    local yg, gg = run(DEV)
    same(yg, yc, 0, 'embedding output')
    same_sparse(gg, gc, TOL.float32, 'embedding')
    for _, r in ipairs(gg:indices():to('cpu'):totable()) do assert.are_not.equal(9, r) end
  end)

  it('accumulates a table used twice and over two backwards (coalescing on the GPU)', function()
    local R, D = 100, 6
    local w0 = ember.randn(R, D, { dtype = 'float64' })
    local function run(dev)
      local e = nn.EmbeddingBag(R, D, { mode = 'sum', sparse = true, dtype = 'float64' })
      e:to(dev)
      ember.no_grad(function() e.weight:copy_(w0:to(dev)) end)
      local i1, o1 = random_bags(R, 90, 10, 21)
      local i2, o2 = random_bags(R, 70, 10, 22)
      local a, b = e(i1:to(dev), o1:to(dev)), e(i2:to(dev), o2:to(dev))
      ;((a * 2 + b * b)):sum():backward()
      local first = e.weight.grad
      e(i2:to(dev), o2:to(dev)):sum():backward()
      return first, e.weight.grad
    end
    local c1, c2 = run('cpu')
    local g1, g2 = run(DEV)
    same_sparse(g1, c1, 1e-12, 'two lookups in one graph')
    same_sparse(g2, c2, 1e-12, 'a second backward')
    -- a SparseGrad made from GPU tensors is coalesced on the GPU
    local rows, vals = ember.tensor({ 9, 3, 9, 1, 3, 9 }, I64), ember.randn(6, 4, { dtype = 'float64' })
    same_sparse(ember.SparseGrad(12, gpu(rows), gpu(vals)), ember.SparseGrad(12, rows, vals), 1e-12, 'SparseGrad')
    same(ember.SparseGrad(12, gpu(rows), gpu(vals)):to_dense(), ember.SparseGrad(12, rows, vals):to_dense(), 1e-12,
      'to_dense')
  end)
end)

-- Steps of EmbeddingBag training from the same weight on dev; returns the weight and the
-- optimizer's state (its 'sum', or nil for SGD).
local function train(dev, make, sparse, dtype, mode)
  local R, D = 200, 24
  ember.manual_seed(31)
  local w0 = ember.randn(R, D, { dtype = dtype })
  local e = nn.EmbeddingBag(R, D, { mode = mode or 'sum', sparse = sparse, dtype = dtype })
  e:to(dev)
  ember.no_grad(function() e.weight:copy_(w0:to(dev)) end)
  local opt = make({ e.weight })
  for step = 1, 4 do
    local idx, off = random_bags(R, 150, 30, 100 + step)
    opt:zero_grad()
    local y = e(idx:to(dev), off:to(dev))
    ;(y * y):sum():backward()
    opt:step()
  end
  local st = opt.param_groups[1].state[1]
  return e.weight, st and st.sum
end

describe('cuda optimizers over sparse rows', function()
  local cases = {
    { 'SGD', function(p) return optim.SGD(p, { lr = 0.05 }) end, true },
    { 'SGD maximize (dense)', function(p) return optim.SGD(p, { lr = 0.05, maximize = true }) end, false },
    { 'Adagrad', function(p)
      return optim.Adagrad(p, { lr = 0.1, lr_decay = 0.01, initial_accumulator_value = 0.1 })
    end, true },
    { 'Adagrad dense, weight_decay', function(p) return optim.Adagrad(p, { lr = 0.1, weight_decay = 0.05 }) end,
      false },
    { 'RowWiseAdagrad', function(p) return optim.RowWiseAdagrad(p, { lr = 0.1, eps = 1e-8 }) end, true },
    { 'RowWiseAdagrad dense, maximize', function(p) return optim.RowWiseAdagrad(p, { lr = 0.1, maximize = true }) end,
      false },
  }
  for _, dtype in ipairs({ 'float32', 'float64' }) do
    for _, c in ipairs(cases) do
      it(c[1] .. ' updates the same rows to the same values as the CPU (' .. dtype .. ')', function()
        local wc, sc = train('cpu', c[2], c[3], dtype)
        local wg, sg = train(DEV, c[2], c[3], dtype)
        same(wg, wc, TRAIN_TOL[dtype], c[1] .. ': weight')
        if sc then same(sg, sc, TRAIN_TOL[dtype], c[1] .. ': state') end
      end)
    end
  end

  it('leaves the rows no index named untouched, state included (row-wise Adagrad, max bags)', function()
    local w, s = train(DEV, function(p) return optim.RowWiseAdagrad(p, { lr = 0.1 }) end, true, 'float32', 'max')
    local wc, sc = train('cpu', function(p) return optim.RowWiseAdagrad(p, { lr = 0.1 }) end, true, 'float32', 'max')
    same(w, wc, TRAIN_TOL.float32, 'max bags: weight')
    same(s, sc, TRAIN_TOL.float32, 'max bags: state')
  end)
end)

describe('cuda DLRM interaction', function()
  local function feats(n, B, D, dtype, grads)
    ember.manual_seed(n * 1000 + D)
    local cpu, dev = {}, {}
    for i = 1, n do
      local t = ember.randn(B, D, { dtype = dtype })
      local want = grads == nil or grads[i]
      cpu[i] = want and t:clone():requires_grad_() or t:clone()
      dev[i] = want and leaf(t, DEV) or t:to(DEV)
    end
    return cpu, dev
  end

  -- n features [B, D]: forward and every gradient as the CPU's
  local function check(n, B, D, dtype, itself, grads, tol)
    local fc, fg = feats(n, B, D, dtype, grads)
    local rest_c, rest_g = {}, {}
    for i = 2, n do rest_c[i - 1], rest_g[i - 1] = fc[i], fg[i] end
    local rc = F.dot_interaction(fc[1], rest_c, { self_interaction = itself })
    local rg = F.dot_interaction(fg[1], rest_g, { self_interaction = itself })
    local what = string.format('n=%d B=%d D=%d %s%s', n, B, D, dtype, itself and ' self' or '')
    same(rg, rc, tol, what .. ': output')
    local seed = ember.randn(rc.shape[1], rc.shape[2], { dtype = dtype })
    ;(rc * seed):sum():backward()
    ;(rg * gpu(seed)):sum():backward()
    for i = 1, n do
      if fc[i].grad then same(fg[i].grad, fc[i].grad, tol, what .. ': gradient of feature ' .. i)
      else assert.is_nil(fg[i].grad, what .. ': feature ' .. i .. ' needs no gradient') end
    end
  end

  for _, dtype in ipairs({ 'float32', 'float64' }) do
    it('matches the CPU forward and backward, with and without the diagonal (' .. dtype .. ')', function()
      for _, itself in ipairs({ false, true }) do
        check(27, 33, 16, dtype, itself, nil, TOL[dtype])   -- Criteo's 26 tables + the bottom MLP
        check(4, 5, 3, dtype, itself, nil, TOL[dtype])
        check(1, 3, 7, dtype, itself, nil, TOL[dtype])       -- no pairs (or only the diagonal)
      end
    end)
  end

  it('matches the CPU when a sample does not fit in shared memory, and when some features need no gradient', function()
    check(100, 6, 128, 'float64', false, nil, 1e-12)   -- 100 x 128 doubles: read from global memory
    check(100, 6, 128, 'float32', true, nil, 5e-5)
    local grads = {}
    for i = 1, 9 do grads[i] = i % 3 ~= 0 end
    check(9, 17, 10, 'float32', false, grads, TOL.float32)
  end)

  it('has the cat variant on the GPU', function()
    local fc, fg = feats(3, 4, 5, 'float32')
    local ic = nn.Interaction { op = 'cat' }
    same(ic(fg[1], { fg[2], fg[3] }), ic(fc[1], { fc[2], fc[3] }), 0, 'cat')
  end)
end)

describe('cuda DLRM', function()
  it('trains a few steps on the GPU to the CPU\'s parameters (float64; sparse tables, row-wise Adagrad)', function()
    local function run(dev)
      ember.manual_seed(7)
      local model = dofile(SPEC_DIR .. '../../examples/dlrm.lua'){
        arch_mlp_bot = '13-16-8', arch_mlp_top = '16-1', table_sizes = '50-40-30', arch_sparse_feature_size = 8 }
      model:to('float64'):to(dev)   -- float64: Adagrad's first steps (g / |g|) would magnify float32's rounding
      local opt_s = optim.RowWiseAdagrad(model:sparse_parameters(), { lr = 0.1 })
      local opt_d = optim.Adagrad(model:dense_parameters(), { lr = 0.05 })
      ember.manual_seed(8)
      local B = 32
      local dense = ember.rand(B, 13, { dtype = 'float64' }):to(dev)
      local y = ember.rand(B, 1, { dtype = 'float64' }):to(dev)
      for step = 1, 5 do
        local sp = {}
        for t, rows in ipairs({ 50, 40, 30 }) do
          sp[t] = { ember.empty(B * 2, I64):random_(1, rows + 1):to(dev), ember.arange(1, B * 2 + 1, 2, I64):to(dev) }
        end
        local loss = ((model(dense, sp) - y) ^ 2):mean()
        opt_s:zero_grad(); opt_d:zero_grad()
        loss:backward()
        assert.is_true(ember.is_sparse_grad(model.emb[1].weight.grad))
        opt_s:step(); opt_d:step()
      end
      return model:parameters()
    end
    local pc, pg = run('cpu'), run(DEV)
    for i = 1, #pc do same(pg[i], pc[i], TRAIN_TOL.float64, 'parameter ' .. i) end
  end)

  it('keeps a 10M-row table\'s gradient sparse on the GPU (memory far below rows * dim * 4 bytes)', function()
    local rows, dim = 10000000, 4
    local e = nn.EmbeddingBag(rows, dim, { mode = 'sum', sparse = true })
    e:to(DEV)
    local opt = optim.RowWiseAdagrad({ e.weight }, { lr = 0.1 })
    local idx = ember.tensor({ 1, 77, 9999999, 10000000, 77 }, I64):to(DEV)
    local off = ember.tensor({ 1, 3 }, I64):to(DEV)
    local before = e.weight[77]:to('cpu')
    local function step()
      ember.cuda.synchronize()
      local base = ember.cuda.memory_allocated()
      ember.cuda.reset_peak_memory_stats()
      opt:zero_grad()
      e(idx, off):sum():backward()
      assert.is_true(ember.is_sparse_grad(e.weight.grad))
      assert.are.equal(4, e.weight.grad:nnz())
      opt:step()
      ember.cuda.synchronize()
      return ember.cuda.max_memory_allocated() - base
    end
    local first = step()   -- also makes the optimizer's state: one float per row
    assert.is_true(first < rows * 4 + 2 ^ 22, string.format('first step: peak growth %d bytes', first))
    local second = step()
    assert.is_true(second < 2 ^ 22, string.format('second step: peak growth %d bytes', second))
    assert.is_false(e.weight[77]:to('cpu'):equal(before))
  end)
end)
