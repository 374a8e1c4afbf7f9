-- Fused scaled-dot-product attention, MultiheadAttention, TransformerEncoderLayer, RMSNorm,
-- GELU's tanh form, Conv1d, weight tying, and the training pieces (RMSprop,
-- clip_grad_value_, weight-decay groups, WarmupCosineLR): against PyTorch's values
-- (seq_fixtures.lua, from gen_seq_fixtures.py), float64 gradient checks and errors.
local dir = debug.getinfo(1, 'S').source:match('^@(.*[/\\])')
local U = dofile(dir .. 'tensor_testutil.lua')
local S = dofile(dir .. 'seq_testutil.lua')
local raises = U.raises
local nn, F, optim = ember.nn, ember.nn.functional, ember.optim
local FX = S.fixtures
local F64 = { dtype = 'float64' }

-- softmax(q k^T * scale + mask) v, materialised: the reference for the fused kernel.
local function reference(q, k, v, opts)
  local nd = #q.shape
  local s = q:matmul(k:transpose(nd - 1, nd)) * (opts.scale or 1 / math.sqrt(q.shape[nd]))
  if opts.causal then
    local L, Sk = q.shape[nd - 1], k.shape[nd - 1]
    s = s:masked_fill(ember.arange(Sk):view(1, Sk):gt(ember.arange(L):view(L, 1)), -math.huge)
  end
  if opts.mask then s = opts.mask.dtype == 'bool' and s:masked_fill(opts.mask:logical_not(), -math.huge) or s + opts.mask end
  return s:softmax(nd):matmul(v)
end

describe('scaled_dot_product_attention', function()
  it('matches PyTorch with a float mask, a bool mask and scale, and causal on [B, T, D]', function()
    local case = FX.sdpa_float_mask
    local inp = S.inputs(case)
    local y = F.scaled_dot_product_attention(inp.q, inp.k, inp.v, { mask = inp.mask:detach() })
    assert.are.equal(3, S.check_case(case, { y }, { q = inp.q, k = inp.k, v = inp.v }))
    case = FX.sdpa_bool_mask_scale
    inp = S.inputs(case)
    y = F.scaled_dot_product_attention(inp.q, inp.k, inp.v, { attn_mask = inp.mask, scale = 0.3 })
    S.check_case(case, { y }, inp)
    case = FX.sdpa_causal_3d
    inp = S.inputs(case)
    y = F.scaled_dot_product_attention(inp.q, inp.k, inp.v, { causal = true })
    S.check_case(case, { y }, inp)
  end)

  it('matches the materialised softmax across tiles (T > 64), with causal and a mask together', function()
    ember.manual_seed(11)
    local q = ember.randn(2, 2, 150, 16, F64):requires_grad_()
    local k = ember.randn(2, 2, 150, 16, F64):requires_grad_()
    local v = ember.randn(2, 2, 150, 8, F64):requires_grad_()
    -- the diagonal stays visible: a row with nothing to attend to is NaN in the reference
    local mask = ember.rand(2, 1, 150, 150, F64):gt(0.2):logical_or(ember.eye(150, { dtype = 'bool' }))
    local w = ember.randn(2, 2, 150, 8, F64)
    local got = F.scaled_dot_product_attention(q, k, v, { mask = mask, causal = true })
    local want = reference(q, k, v, { mask = mask, causal = true })
    assert((got - want):abs():max():item() < 1e-12)
    ;(got * w):sum():backward()
    local g = { q.grad:clone(), k.grad:clone(), v.grad:clone() }
    q.grad, k.grad, v.grad = nil, nil, nil
    ;(want * w):sum():backward()
    for i, t in ipairs { q, k, v } do
      assert((g[i] - t.grad):abs():max():item() < 1e-11, 'gradient ' .. i .. ' differs')
    end
  end)

  it('float32 (the vectorised exp rows) matches the materialised softmax in float64, causal, T > 64', function()
    ember.manual_seed(12)
    local q64, k64, v64 = ember.randn(3, 2, 130, 32, F64), ember.randn(3, 2, 130, 32, F64), ember.randn(3, 2, 130, 16, F64)
    local w64 = ember.randn(3, 2, 130, 16, F64)
    local function grads(q, k, v, w, fused)
      q, k, v = q:detach():requires_grad_(), k:detach():requires_grad_(), v:detach():requires_grad_()
      local y = fused and F.scaled_dot_product_attention(q, k, v, { causal = true }) or
          reference(q, k, v, { causal = true })
      ;(y * w):sum():backward()
      return { y, q.grad, k.grad, v.grad }
    end
    local f32 = { dtype = 'float32' }
    local got = grads(q64:to(f32), k64:to(f32), v64:to(f32), w64:to(f32), true)
    local want = grads(q64, k64, v64, w64, false)
    for i = 1, 4 do
      local err = (got[i]:to(F64) - want[i]):abs():max():item() / want[i]:abs():max():item()
      assert(err < 2e-5, 'result ' .. i .. ': relative error ' .. err)
    end
  end)

  it('passes a numerical gradient check in float64', function()
    ember.manual_seed(12)
    local q = ember.randn(1, 2, 5, 3, F64):requires_grad_()
    local k = ember.randn(1, 2, 7, 3, F64):requires_grad_()
    local v = ember.randn(1, 2, 7, 2, F64):requires_grad_()
    local mask = ember.randn(5, 7, F64)
    local w = ember.randn(1, 2, 5, 2, F64)
    local worst = S.gradcheck(function()
      return (F.scaled_dot_product_attention(q, k, v, { mask = mask }) * w):sum()
    end, { q, k, v })
    assert(worst < 1e-8, 'numerical and analytic gradients differ by ' .. worst)
  end)

  it('gives zeros to a query row that may attend to nothing', function()
    local q, k, v = ember.randn(1, 3, 4), ember.randn(1, 5, 4), ember.randn(1, 5, 2)
    local mask = ember.ones(3, 5, { dtype = 'bool' })
    mask[2] = false
    local y = F.scaled_dot_product_attention(q, k, v, { mask = mask })
    assert.are.equal(0, y:select(2, 2):abs():sum():item())
    assert(y:select(2, 1):abs():sum():item() > 0)
  end)

  it('applies dropout to the probabilities, the same mask in the backward (float32)', function()
    ember.manual_seed(13)
    local q = ember.randn(2, 64, 8):requires_grad_()
    local k, v = ember.randn(2, 64, 8), ember.randn(2, 64, 8)
    local y0 = F.scaled_dot_product_attention(q, k, v)
    ember.manual_seed(99)
    local y1 = F.scaled_dot_product_attention(q, k, v, { dropout = 0.3 })
    ember.manual_seed(99)
    local y2 = F.scaled_dot_product_attention(q, k, v, { dropout = 0.3 })
    assert.are.equal(0, (y1 - y2):abs():max():item())
    assert((y1 - y0):abs():max():item() > 1e-3)
    -- on average dropout keeps the output's scale
    assert(math.abs(y1:mean():item() - y0:mean():item()) < 0.05)
    -- the backward regenerates the forward's mask: a finite-difference check on q
    local w = ember.randn(2, 64, 8)
    local function f()
      ember.manual_seed(99)
      return (F.scaled_dot_product_attention(q, k, v, { dropout = 0.3 }) * w):sum()
    end
    f():backward()
    local eps, i = 1e-2, 37
    local flat = q:detach():view(-1)
    local x0 = flat[i]:item()
    local up = ember.no_grad(function() flat[i] = x0 + eps; return f():item() end)
    local down = ember.no_grad(function() flat[i] = x0 - eps; return f():item() end)
    ember.no_grad(function() flat[i] = x0 end)
    local num, ana = (up - down) / (2 * eps), q.grad:view(-1)[i]:item()
    assert(math.abs(num - ana) < 2e-2 * (1 + math.abs(ana)), string.format('numerical %g, analytic %g', num, ana))
  end)

  it('reads head-split views where they lie: the same outputs and gradients as contiguous copies', function()
    -- q, k, v as MultiheadAttention makes them ([B, H, T, hd] over [B, T, H, hd]), against
    -- contiguous copies; with a bool and a float mask, causal, L ~= S, D ~= Dv, dropout, a
    -- key expanded over the heads (stride 0: copied), float64 and float32, 1 and 2 threads
    local threads = ember.get_num_threads()
    local B, H, L, S, D, Dv = 2, 3, 70, 67, 8, 5
    local function heads(t, T, d) return t:view(B, T, H, d):transpose(2, 3) end
    for _, dt in ipairs { 'float64', 'float32' } do
      local tol = dt == 'float64' and 1e-12 or 2e-5
      for _, th in ipairs { 1, 2 } do
        ember.set_num_threads(th)
        for _, case in ipairs {
          {}, { causal = true }, { mask = ember.rand(L, S):gt(0.3) },
          { mask = ember.randn(B, 1, L, S, { dtype = dt }), causal = true }, { dropout = 0.25 }, { expand_k = true },
        } do
          local qb = ember.randn({ B, L, H * D }, { dtype = dt })
          local kb = ember.randn({ B, S, H * D }, { dtype = dt })
          local vb = ember.randn({ B, S, H * Dv }, { dtype = dt })
          local q, k, v = heads(qb, L, D), heads(kb, S, D), heads(vb, S, Dv)
          if case.expand_k then k = ember.randn({ B, 1, S, D }, { dtype = dt }):expand(B, H, S, D) end
          local opts = { mask = case.mask, causal = case.causal, dropout = case.dropout }
          local function run(a, b, c)
            a, b, c = a:detach():requires_grad_(), b:detach():requires_grad_(), c:detach():requires_grad_()
            ember.manual_seed(5)
            local y = F.scaled_dot_product_attention(a, b, c, opts)
            local g = ember.randn(y.shape, { dtype = dt })
            y:backward(g)
            return y:detach(), a.grad, b.grad, c.grad
          end
          local want = { run(q:contiguous(), k:contiguous(), v:contiguous()) }
          local got = { run(q, k, v) }
          for i, name in ipairs { 'output', 'dq', 'dk', 'dv' } do
            assert(got[i], name .. ' missing')
            local err = (got[i] - want[i]):abs():max():item()
            assert(err <= tol, string.format('%s %s, %d thread(s), case %d: %s differs by %g', dt,
              case.expand_k and 'expanded k' or '', th, _, name, err))
          end
        end
      end
    end
    ember.set_num_threads(threads)
  end)

  it('refuses wrong shapes and options with clear messages', function()
    local q = ember.randn(2, 3, 4)
    raises(function() F.scaled_dot_product_attention(q, ember.randn(2, 5, 3), ember.randn(2, 5, 4)) end,
      "scaled_dot_product_attention: expected key [..., S, 4] (query's last dim)")
    raises(function() F.scaled_dot_product_attention(q, ember.randn(3, 5, 4), ember.randn(3, 5, 4)) end,
      'scaled_dot_product_attention: the leading (batch, head) dims differ')
    raises(function() F.scaled_dot_product_attention(q, q, q, { mask = ember.ones(4, 4) }) end,
      'scaled_dot_product_attention: a mask of shape [4, 4] does not broadcast to [2, 3, 3]')
    raises(function() F.scaled_dot_product_attention(q, q, q, { dropout = 1 }) end,
      'scaled_dot_product_attention: dropout_p must be in [0, 1)')
    raises(function() F.scaled_dot_product_attention(q, q, q, { mask = ember.ones(3, 3, { dtype = 'int64' }) }) end,
      'scaled_dot_product_attention: expected the mask to be bool or float32')
    raises(function() F.scaled_dot_product_attention(q, q:to('float64'), q) end,
      'scaled_dot_product_attention: the key is float64 but the input is float32')
  end)
end)

describe('MultiheadAttention and TransformerEncoderLayer', function()
  it('MultiheadAttention matches PyTorch: self-attention with key padding and weights', function()
    local case = FX.mha_self_kpm_weights
    local m = S.load(nn.MultiheadAttention(8, 2, F64), case)
    local inp = S.inputs(case)
    local y, w = m(inp.x, inp.x, inp.x, { key_padding_mask = inp.kpm })
    S.check_case(case, { y, w }, inp, m)
    -- the fused path gives the same output
    local y2 = m(inp.x, inp.x, inp.x, { key_padding_mask = inp.kpm, need_weights = false })
    assert((y2 - y):abs():max():item() < 1e-12)
  end)

  it('MultiheadAttention matches PyTorch: cross-attention, batch_first, 4 heads', function()
    local case = FX.mha_cross_batch_first
    local m = S.load(nn.MultiheadAttention(8, 4, { batch_first = true, dtype = 'float64' }), case)
    local inp = S.inputs(case)
    local y = m(inp.q, inp.kv, inp.kv, { need_weights = false })
    S.check_case(case, { y }, inp, m)
  end)

  it('TransformerEncoderLayer matches PyTorch: post-norm relu with a causal mask, pre-norm gelu', function()
    local case = FX.encoder_post_relu
    local m = S.load(nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 16, dropout = 0, dtype = 'float64' }), case)
    local inp = S.inputs(case)
    S.check_case(case, { m(inp.x, { src_mask = inp.mask:detach() }) }, { x = inp.x }, m)
    case = FX.encoder_pre_gelu
    m = S.load(nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 16, dropout = 0, activation = 'gelu',
      norm_first = true, batch_first = true, dtype = 'float64' }), case)
    inp = S.inputs(case)
    S.check_case(case, { m(inp.x, { src_key_padding_mask = inp.kpm }) }, inp, m)
  end)

  it('TransformerEncoderLayer hands back its intermediates early, but not where a hook may keep them', function()
    -- the same values and gradients on both paths; hooks anywhere in the layer turn the early
    -- release off (a hook may keep a result), and so does a caller's activation function
    for _, norm_first in ipairs { true, false } do
      ember.manual_seed(3)
      local layer = nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 16, dropout = 0, activation = 'gelu',
        batch_first = true, norm_first = norm_first })
      assert(not layer:_hooked_within(), 'no hooks yet')
      local x = ember.randn(2, 5, 8):requires_grad_()
      local y0 = layer(x)
      y0:sum():backward()
      local g0 = x.grad:clone()
      x.grad = nil
      local kept
      layer.linear1:register_forward_hook(function(_, _, out) kept = out end)
      assert(layer:_hooked_within(), 'a hook on linear1 is seen')
      local y1 = layer(x)
      y1:sum():backward()
      assert((y1 - y0):abs():max():item() == 0 and (x.grad - g0):abs():max():item() == 0,
        'the same values and gradients with and without the early release')
      assert(kept and kept.shape[3] == 16 and kept:abs():sum():item() > 0, 'the hook kept linear1 output')
      local other = nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 16, dropout = 0, batch_first = true })
      other.self_attn.out_proj:register_forward_pre_hook(function() end)
      assert(other:_hooked_within(), 'a hook on the attention output projection is seen')
    end
  end)

  it('refuse wrong shapes with clear messages', function()
    local m = nn.MultiheadAttention(8, 2)
    raises(function() nn.MultiheadAttention(8, 3) end, 'MultiheadAttention: embed_dim (8) must be divisible by num_heads (3)')
    raises(function() m(ember.randn(5, 2, 6)) end, 'MultiheadAttention: expected query, key and value of shape [L, B, 8]')
    raises(function() m(ember.randn(5, 2, 8), nil, nil, { key_padding_mask = ember.zeros(2, 4, { dtype = 'bool' }) }) end,
      'MultiheadAttention: expected key_padding_mask of shape [2, 5]')
    raises(function() m(ember.randn(5, 2, 8), nil, nil, { attn_mask = ember.zeros(4, 4) }) end,
      'MultiheadAttention: expected attn_mask of shape [5, 5] or [4, 5, 5]')
    raises(function() nn.TransformerEncoderLayer(8, 2, { activation = 'swish' }) end,
      "TransformerEncoderLayer: activation must be 'relu', 'gelu' or a function")
  end)
end)

describe('RMSNorm, GELU tanh, Conv1d', function()
  it('match PyTorch', function()
    local case = FX.rms_norm
    local m = S.load(nn.RMSNorm(4, F64), case)
    local inp = S.inputs(case)
    S.check_case(case, { m(inp.x) }, inp, m)
    case = FX.gelu_tanh
    inp = S.inputs(case)
    S.check_case(case, { nn.GELU({ approximate = 'tanh' })(inp.x) }, inp)
    case = FX.conv1d
    m = S.load(nn.Conv1d(3, 4, 3, { stride = 2, padding = 1, dtype = 'float64' }), case)
    inp = S.inputs(case)
    S.check_case(case, { m(inp.x) }, inp, m)
  end)

  it("GELU's fused backward matches its composed formula Phi(x) + x phi(x) (float32 and float64)", function()
    local x64 = ember.linspace(-12, 12, 4001, F64)
    local want = (x64 * (1 / math.sqrt(2))):erf():add(1):mul(0.5) +
        x64 * (x64:square() * -0.5):exp() * (1 / math.sqrt(2 * math.pi))
    for _, dt in ipairs { 'float64', 'float32' } do
      local x = x64:to({ dtype = dt }):detach():requires_grad_()
      local g = ember.full({ 1 }, 3, { dtype = dt }):expand(4001)   -- a broadcast upstream gradient
      F.gelu(x):backward(g)
      local err = (x.grad:to(F64) - want * 3):abs():max():item()
      assert(err < (dt == 'float64' and 1e-13 or 3e-6), dt .. ': max error ' .. err)
    end
  end)

  it('GELU under autograd (which keeps its derivative from the forward) gives the same values as without', function()
    for _, dt in ipairs { 'float64', 'float32' } do
      local x = ember.linspace(-12, 12, 4001, { dtype = dt })
      local plain = F.gelu(x)
      local xg = x:detach():requires_grad_()
      local y = F.gelu(xg)
      assert(y.requires_grad, dt .. ': the output is recorded')
      assert((y:detach() - plain):abs():max():item() == 0, dt .. ': the recorded forward differs from the plain one')
      -- and through a non-contiguous input
      local xt = ember.linspace(-3, 3, 12, { dtype = dt }):view(3, 4):t():detach():requires_grad_()
      local yt = F.gelu(xt)
      yt:sum():backward()
      local want = F.gelu(xt:detach():contiguous())
      assert((yt:detach() - want):abs():max():item() == 0, dt .. ': a transposed input')
      assert(xt.grad and xt.grad:size(1) == 4 and xt.grad:size(2) == 3, dt .. ': its gradient has its shape')
    end
  end)

  it("RMSNorm's default eps is the dtype's machine epsilon", function()
    local x = ember.zeros(2, 3)
    x[1][1] = 1e-4
    -- x / sqrt(mean(x^2) + eps): with eps = 1.19e-7 the first element is 1e-4 / sqrt(3.33e-9 + 1.19e-7)
    local y = nn.RMSNorm(3)(x)
    local want = 1e-4 / math.sqrt(1e-8 / 3 + 1.1920928955078125e-07)
    assert(math.abs(y[1][1]:item() - want) < 1e-4 * want)
    raises(function() nn.RMSNorm(4)(ember.randn(2, 3)) end, 'rms_norm: normalized_shape [4] does not match')
  end)
end)

describe('weight tying', function()
  it('shares one parameter between an embedding and the output layer; its gradient sums both uses', function()
    ember.manual_seed(4)
    local Tied = nn.Module:extend('Tied')
    function Tied:init()
      self.emb = nn.Embedding(6, 4, F64)
      self.head = nn.Linear(4, 6, { bias = false, dtype = 'float64' })
      self.head.weight = self.emb.weight -- the idiom: assign the parameter itself
    end
    function Tied:forward(idx) return self.head(self.emb(idx)) end
    local m = Tied()
    assert.are.equal(1, #m:parameters())
    local idx = ember.tensor({ 1, 3, 3, 6 }, { dtype = 'int64' })
    local loss = F.cross_entropy(m(idx), ember.tensor({ 2, 2, 5, 1 }, { dtype = 'int64' }))
    loss:backward()
    local g = m.emb.weight.grad:clone()
    -- the same sum, with two separate copies of the weight
    local w1 = m.emb.weight:detach():clone():requires_grad_()
    local w2 = m.emb.weight:detach():clone():requires_grad_()
    F.cross_entropy(F.linear(F.embedding(idx, w1), w2), ember.tensor({ 2, 2, 5, 1 }, { dtype = 'int64' })):backward()
    assert((g - (w1.grad + w2.grad)):abs():max():item() < 1e-12)
    assert(w1.grad:abs():sum():item() > 0 and w2.grad:abs():sum():item() > 0)
  end)
end)

describe('training pieces', function()
  it('RMSprop follows PyTorch (plain; centered with momentum and weight decay)', function()
    for name, opts in pairs { rmsprop_plain = { lr = 0.01 }, rmsprop_centered_momentum_wd = { lr = 0.01, alpha = 0.9,
      eps = 1e-6, weight_decay = 0.1, momentum = 0.8, centered = true } } do
      local case = FX[name]
      local p = S.T(case.start):requires_grad_()
      local opt = optim.RMSprop({ p }, opts)
      for t = 1, 4 do
        p.grad = S.T(case.grads[t])
        opt:step()
        S.assert_close(p, case.params[t], name .. ' step ' .. t, 1e-14)
      end
    end
    raises(function() optim.RMSprop({ ember.zeros(2):requires_grad_() }, { alpha = 1.5 }) end,
      'RMSprop: alpha is 1.5, expected a number in [0, 1]')
    raises(function() optim.RMSprop({ ember.zeros(2):requires_grad_() }, { momentum = -1 }) end,
      'RMSprop: momentum is -1, expected a number >= 0')
  end)

  it('clip_grad_value_ clamps every gradient in place', function()
    local a, b = ember.zeros(3):requires_grad_(), ember.zeros(2, 2):requires_grad_()
    a.grad = ember.tensor({ -3, 0.5, 2 })
    b.grad = ember.tensor({ { 1, -1 }, { 0.2, -0.1 } })
    nn.utils.clip_grad_value_({ a, b }, 0.5)
    U.close(a.grad, { -0.5, 0.5, 0.5 })
    U.close(b.grad, { { 0.5, -0.5 }, { 0.2, -0.1 } })
    raises(function() nn.utils.clip_grad_value_({ a }, -1) end, 'clip_grad_value: clip_value is -1')
  end)

  it('weight_decay_groups exempts biases and norms (nanoGPT), and listed modules', function()
    local m = nn.Sequential { nn.Embedding(10, 4), nn.Linear(4, 4), nn.LayerNorm(4), nn.Linear(4, 2) }
    local g = optim.weight_decay_groups(m, 0.1)
    assert.are.equal(3, #g[1].params) -- embedding, two linear weights
    assert.are.equal(4, #g[2].params) -- two biases, the norm's weight and bias
    assert.are.equal(0.1, g[1].weight_decay)
    assert.are.equal(0, g[2].weight_decay)
    g = optim.weight_decay_groups(m, 0.1, { no_decay_modules = { 'Embedding' } })
    assert.are.equal(2, #g[1].params)
    local opt = optim.AdamW(g, { lr = 1e-3 })
    assert.are.equal(0, opt.param_groups[2].weight_decay)
  end)

  it("WarmupCosineLR follows nanoGPT's schedule", function()
    local p = ember.zeros(1):requires_grad_()
    local opt = optim.AdamW({ p }, { lr = 1e-3 })
    local s = optim.lr_scheduler.WarmupCosineLR(opt, { warmup_steps = 10, total_steps = 100, min_lr = 1e-4 })
    local function nanogpt(it)
      if it < 10 then return 1e-3 * (it + 1) / 11 end
      if it > 100 then return 1e-4 end
      local ratio = (it - 10) / 90
      return 1e-4 + 0.5 * (1 + math.cos(math.pi * ratio)) * (1e-3 - 1e-4)
    end
    for it = 0, 110 do
      assert(math.abs(opt.param_groups[1].lr - nanogpt(it)) < 1e-15, 'step ' .. it)
      s:step()
    end
    raises(function() optim.lr_scheduler.WarmupCosineLR(opt, { warmup_steps = 10, total_steps = 5 }) end,
      'WarmupCosineLR: total_steps (5) must exceed warmup_steps (10)')
  end)
end)

-- On cuda (the fused kernels of runtime/plugins/cuda/attention.cu): the same inputs as on
-- the CPU, whose kernel is the reference; outputs and the gradients of q, k and v compared.
-- Without a GPU: one pending test (EMBER_TEST_DEVICE=cuda makes that a failure).
describe('scaled_dot_product_attention on cuda against the CPU', function()
  local DEVICE, wanted, gpus = S.gpu()
  if gpus == 0 and not wanted then
    it('needs a GPU', function() pending('no CUDA device: the GPU-against-CPU comparisons need one') end)
    return
  end
  it('has a GPU when EMBER_TEST_DEVICE asks for one', function()
    assert.is_true(gpus > 0, 'EMBER_TEST_DEVICE=' .. DEVICE .. ' but no CUDA device is usable')
  end)
  local TOL = { float32 = 2e-4, float64 = 1e-9 }

  -- q [lead..., L, D], k [lead..., S, D], v [lead..., S, Dv]; opts as F's (a mask on the
  -- CPU is moved to the device). Runs forward and backward on both and compares.
  local function compare(dt, lead, L, Sk, D, Dv, opts, seed)
    local function shape(a, b)
      local s = {}
      for i, n in ipairs(lead) do s[i] = n end
      s[#s + 1], s[#s + 2] = a, b
      return s
    end
    local qc = ember.randn(unpack(shape(L, D))):to(dt):requires_grad_()
    local kc = ember.randn(unpack(shape(Sk, D))):to(dt):requires_grad_()
    local vc = ember.randn(unpack(shape(Sk, Dv))):to(dt):requires_grad_()
    local w = ember.randn(unpack(shape(L, Dv))):to(dt)
    local qg, kg, vg = qc:detach():to(DEVICE):requires_grad_(), kc:detach():to(DEVICE):requires_grad_(),
      vc:detach():to(DEVICE):requires_grad_()
    local gopts = {}
    for k, v in pairs(opts or {}) do gopts[k] = ember.is_tensor(v) and v:to(DEVICE) or v end
    if seed then ember.manual_seed(seed) end
    local yc = F.scaled_dot_product_attention(qc, kc, vc, opts)
    if seed then ember.manual_seed(seed) end
    local yg = F.scaled_dot_product_attention(qg, kg, vg, gopts)
    S.assert_device_close('output', yc, yg, DEVICE, TOL[dt])
    ;(yc * w):sum():backward()
    ;(yg * w:to(DEVICE)):sum():backward()
    S.assert_device_close('grad q', qc.grad, qg.grad, DEVICE, TOL[dt])
    S.assert_device_close('grad k', kc.grad, kg.grad, DEVICE, TOL[dt])
    S.assert_device_close('grad v', vc.grad, vg.grad, DEVICE, TOL[dt])
    return yg, qg
  end

  it('matches across several tiles, L ~= S, D ~= Dv, with and without causal (float64 and float32)', function()
    ember.manual_seed(3)
    for _, dt in ipairs({ 'float64', 'float32' }) do
      compare(dt, { 2, 3 }, 70, 45, 16, 8)
      compare(dt, { 2, 3 }, 70, 45, 16, 8, { causal = true })
      compare(dt, { 5 }, 33, 97, 8, 24, { causal = true, scale = 0.2 })
    end
  end)

  it('applies broadcast masks, bool and float, combined with causal', function()
    ember.manual_seed(4)
    local bool = ember.rand(40, 50):gt(0.3) -- [L, S] over every batch and head
    compare('float64', { 2, 2 }, 40, 50, 8, 8, { mask = bool, causal = true })
    local add = ember.randn(1, 2, 1, 50, { dtype = 'float32' }) -- per head, per key
    compare('float32', { 3, 2 }, 40, 50, 8, 8, { mask = add })
  end)

  it('gives zeros (and zero gradients) to a query row that may attend to nothing', function()
    local mask = ember.ones(3, 5, { dtype = 'bool' })
    mask[2] = false
    local y, q = compare('float32', { 1 }, 3, 5, 4, 2, { mask = mask })
    assert.are.equal(0, y:select(2, 2):abs():sum():item())
    assert.are.equal(0, q.grad:select(2, 2):abs():sum():item())
  end)

  it('large head dims take the smaller tiles (D = 128 in float32 and float64)', function()
    ember.manual_seed(5)
    compare('float32', { 2 }, 48, 40, 128, 128, { causal = true })
    compare('float64', { 1 }, 20, 36, 128, 96)
  end)

  it('drops the very elements the CPU drops (the same Philox stream), forward and backward', function()
    ember.manual_seed(6)
    compare('float32', { 2, 2 }, 64, 64, 8, 8, { dropout = 0.3 }, 99)
    compare('float64', { 1 }, 17, 33, 4, 4, { dropout = 0.5, causal = true }, 123)
  end)
end)
