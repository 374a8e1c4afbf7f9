-- nn.RNN / LSTM / GRU and their cells: forward and backward against PyTorch's values
-- (seq_fixtures.lua, from gen_seq_fixtures.py), float64 gradient checks, lengths,
-- state dicts, float32, and the errors for wrong shapes.
local dir = debug.getinfo(1, 'S').source:match('^@(.*[/\\])')
local U = dofile(dir .. 'tensor_testutil.lua')
local S = dofile(dir .. 'seq_testutil.lua')
local raises = U.raises
local nn = ember.nn
local FX = S.fixtures
local F64 = { dtype = 'float64' }

describe('recurrent layers against PyTorch', function()
  it('LSTM, 2 layers, with h0 and c0', function()
    local case = FX.lstm_2layer
    local m = S.load(nn.LSTM(3, 4, { num_layers = 2, dtype = 'float64' }), case)
    local inp = S.inputs(case)
    local y, st = m(inp.x, { inp.h0, inp.c0 })
    assert.are.equal(11, S.check_case(case, { y, st[1], st[2] }, inp, m)) -- x, h0, c0 and 8 parameters
  end)

  it('LSTM, bidirectional, batch_first, with lengths (packed sequences)', function()
    local case = FX.lstm_bidir_lengths
    local m = S.load(nn.LSTM(3, 3, { bidirectional = true, batch_first = true, dtype = 'float64' }), case)
    local inp = S.inputs(case)
    local y, st = m(inp.x, nil, { 4, 2, 1 })
    S.check_case(case, { y, st[1], st[2] }, inp, m)
    -- outputs past a sequence's length are zero
    assert.are.equal(0, y:narrow(1, 3, 1):narrow(2, 2, 3):abs():sum():item())
  end)

  it('GRU, 2 layers, with h0 and lengths as an int64 tensor', function()
    local case = FX.gru_2layer_lengths
    local m = S.load(nn.GRU(3, 4, { num_layers = 2, dtype = 'float64' }), case)
    local inp = S.inputs(case)
    local y, h = m(inp.x, inp.h0, ember.tensor({ 3, 4 }, { dtype = 'int64' }))
    S.check_case(case, { y, h }, inp, m)
  end)

  it("RNN with nonlinearity = 'relu' and no bias", function()
    local case = FX.rnn_relu_nobias
    local m = S.load(nn.RNN(3, 4, { nonlinearity = 'relu', bias = false, dtype = 'float64' }), case)
    assert.is_nil(m.bias_ih_l0)
    local inp = S.inputs(case)
    local y, h = m(inp.x, inp.h0)
    S.check_case(case, { y, h }, inp, m)
  end)

  it('RNN (tanh), bidirectional, with h0', function()
    local case = FX.rnn_tanh_bidir
    local m = S.load(nn.RNN(2, 3, { bidirectional = true, dtype = 'float64' }), case)
    local inp = S.inputs(case)
    local y, h = m(inp.x, inp.h0)
    S.check_case(case, { y, h }, inp, m)
  end)

  it('LSTMCell, GRUCell and RNNCell', function()
    local case = FX.lstm_cell
    local m = S.load(nn.LSTMCell(3, 4, F64), case)
    local inp = S.inputs(case)
    local h, c = m(inp.x, { inp.h, inp.c })
    S.check_case(case, { h, c }, inp, m)
    for name, cls in pairs { gru_cell = nn.GRUCell, rnn_cell = nn.RNNCell } do
      case = FX[name]
      m = S.load(cls(3, 4, F64), case)
      inp = S.inputs(case)
      S.check_case(case, { m(inp.x, inp.h) }, inp, m)
    end
  end)
end)

describe('recurrent layers', function()
  it('pass numerical gradient checks in float64 (input, states, weights; lengths; reverse)', function()
    ember.manual_seed(7)
    for _, spec in ipairs {
      { cls = nn.LSTM, opts = { bidirectional = true }, states = 2 },
      { cls = nn.GRU, opts = { num_layers = 2 }, states = 1 },
      { cls = nn.RNN, opts = { nonlinearity = 'tanh' }, states = 1 },
    } do
      spec.opts.dtype = 'float64'
      local m = spec.cls(2, 3, spec.opts)
      local D = spec.opts.bidirectional and 2 or 1
      local L = (spec.opts.num_layers or 1) * D
      local x = ember.randn(4, 3, 2, F64):requires_grad_()
      local h0 = ember.randn(L, 3, 3, F64):requires_grad_()
      local c0 = ember.randn(L, 3, 3, F64):requires_grad_()
      local wy = ember.randn(4, 3, 3 * D, F64)
      local function f()
        local y, st = m(x, spec.states == 2 and { h0, c0 } or h0, { 4, 2, 3 })
        local hn = spec.states == 2 and st[1] + st[2] * 0.5 or st
        return (y * wy):sum() + hn:sum()
      end
      local xs = { x, h0, m.weight_ih_l0, m.weight_hh_l0, m.bias_hh_l0 }
      if spec.states == 2 then xs[#xs + 1] = c0 end
      local worst = S.gradcheck(f, xs)
      assert(worst < 1e-7, string.format('%s: numerical and analytic gradients differ by %g', m.__name, worst))
    end
  end)

  it('have PyTorch parameter names, shapes and U(-1/sqrt(H), 1/sqrt(H)) initialisation', function()
    local m = nn.GRU(5, 16, { num_layers = 2, bidirectional = true })
    local sd = m:state_dict()
    assert.are.same({ 48, 5 }, sd.weight_ih_l0.shape)
    assert.are.same({ 48, 32 }, sd.weight_ih_l1_reverse.shape)
    assert.are.same({ 48, 16 }, sd.weight_hh_l1.shape)
    assert.are.same({ 48 }, sd.bias_hh_l0_reverse.shape)
    assert.are.equal(16, #m:parameters())
    local w = nn.LSTM(3, 100).weight_hh_l0
    assert.are.same({ 400, 100 }, w.shape)
    local bound = w:abs():max():item()
    assert(bound <= 0.1 and bound > 0.09, 'expected values up to 1/sqrt(100), got a maximum of ' .. bound)
  end)

  it('run in float32 close to float64, unbatched inputs included', function()
    ember.manual_seed(3)
    local m64 = nn.LSTM(4, 5, { num_layers = 2, dtype = 'float64' })
    local m32 = nn.LSTM(4, 5, { num_layers = 2 })
    local sd = {}
    for k, v in pairs(m64:state_dict()) do sd[k] = v:to('float32') end
    m32:load_state_dict(sd)
    local x = ember.randn(6, 4, F64)
    local y64 = m64(x)
    local y32 = m32(x:to('float32'))
    assert.are.same({ 6, 5 }, y32.shape)
    assert((y32:to('float64') - y64):abs():max():item() < 1e-5)
  end)

  it('applies dropout between layers in training only', function()
    ember.manual_seed(5)
    local m = nn.GRU(3, 8, { num_layers = 2, dropout = 0.5 })
    local x = ember.randn(5, 2, 3)
    local a, b = m(x), m(x)
    assert((a - b):abs():max():item() > 0, 'dropout between layers should make two training runs differ')
    m:eval()
    assert.are.equal(0, (m(x) - m(x)):abs():max():item())
  end)

  it('record one autograd node per layer and direction', function()
    local m = nn.LSTM(3, 4)
    local y = m(ember.randn(50, 2, 3))
    assert.are.equal('LstmBackward', y.grad_fn)
  end)

  it('refuse wrong shapes with messages that say what was expected', function()
    local lstm = nn.LSTM(3, 4, { num_layers = 2 })
    raises(function() lstm(ember.randn(5, 2, 7)) end, "LSTM: expected the input's last dim to be input_size = 3")
    raises(function() lstm(ember.randn(5, 2, 2, 3)) end, 'LSTM: expected the input to be 3-d')
    raises(function() lstm(ember.randn(5, 2, 3), { ember.zeros(1, 2, 4), ember.zeros(2, 2, 4) }) end,
      'LSTM: expected h0 of shape [2, 2, 4]')
    raises(function() lstm(ember.randn(5, 2, 3), ember.zeros(2, 2, 4)) end, 'LSTM: the initial state must be a pair')
    raises(function() lstm(ember.randn(5, 2, 3), nil, { 5, 6 }) end, 'lstm: lengths[1] = 6 is outside 0..5')
    raises(function() lstm(ember.randn(5, 2, 3), nil, { 5 }) end, 'lstm: expected lengths of shape [2]')
    raises(function() nn.GRU(3, 0) end, 'GRU: hidden_size must be an integer >= 1')
    raises(function() nn.RNN(3, 4, { nonlinearity = 'gelu' }) end, "RNN: nonlinearity must be 'tanh' or 'relu'")
    raises(function() nn.GRUCell(3, 4)(ember.randn(2, 3), ember.randn(3, 4)) end,
      'GRUCell: expected h of shape [2, 4]')
    raises(function() nn.LSTM(3, 4, { dropout = 2 }) end, 'LSTM: dropout must be a probability')
    -- the C entry point checks the weights itself
    local I = require 'ember.internal'
    local st = I.C.em_nn_rnn(I.box, I.box2, I.C.EM_RNN_GRU, ember.randn(2, 1, 3), nil, nil, ember.randn(7, 3),
      ember.randn(7, 2), nil, nil, nil, 0)
    assert.are_not.equal(0, st)
    assert.truthy(I.last_error():find('gru: expected weight_ih of shape [3 * hidden_size, 3]', 1, true), I.last_error())
  end)
end)

-- On cuda (cuDNN's RNN, runtime/plugins/cuda/rnn.cu): the same modules and inputs as on
-- the CPU, outputs, final states and every gradient compared. Without a GPU: one pending
-- test (EMBER_TEST_DEVICE=cuda makes that a failure).
describe('recurrent layers on cuda against the CPU', function()
  local DEVICE, wanted, gpus = S.gpu()
  if gpus == 0 and not wanted then
    it('needs a GPU', function() pending('no CUDA device: the GPU-against-CPU comparisons need one') end)
    return
  end
  it('has a GPU when EMBER_TEST_DEVICE asks for one', function()
    assert.is_true(gpus > 0, 'EMBER_TEST_DEVICE=' .. DEVICE .. ' but no CUDA device is usable')
  end)
  local TOL = { float32 = 2e-4, float64 = 1e-9 }

  -- A module on the CPU and its copy (through the state dict) on the device.
  local function pair(cls, opts, ...)
    ember.manual_seed(7)
    local cm = nn[cls](...)
    local args = { ... }
    local gm = nn[cls](args[1], args[2], opts)
    gm:load_state_dict(cm:state_dict())
    return cm, gm:to(DEVICE)
  end

  -- Runs both modules on the same inputs, backward through the outputs and final states
  -- with the same random weights, and compares everything.
  local function compare(cls, opts, input_size, hidden, T, B, with_state, lengths, seed)
    local dt = opts.dtype
    local cm, gm = pair(cls, opts, input_size, hidden, opts)
    local L = (opts.num_layers or 1) * (opts.bidirectional and 2 or 1)
    local xc = ember.randn(T, B, input_size, { dtype = dt }):requires_grad_()
    local xg = xc:detach():to(DEVICE):requires_grad_()
    local hc, hg, cc, cg
    if with_state then
      hc = ember.randn(L, B, hidden, { dtype = dt }):requires_grad_()
      hg = hc:detach():to(DEVICE):requires_grad_()
      if cls == 'LSTM' then
        cc = ember.randn(L, B, hidden, { dtype = dt }):requires_grad_()
        cg = cc:detach():to(DEVICE):requires_grad_()
      end
    end
    if seed then ember.manual_seed(seed) end -- the same dropout masks between layers
    local yc, sc = cm(xc, cls == 'LSTM' and hc and { hc, cc } or hc, lengths)
    if seed then ember.manual_seed(seed) end
    local yg, sg = gm(xg, cls == 'LSTM' and hg and { hg, cg } or hg, lengths)
    local outs_c = cls == 'LSTM' and { yc, sc[1], sc[2] } or { yc, sc }
    local outs_g = cls == 'LSTM' and { yg, sg[1], sg[2] } or { yg, sg }
    local loss_c, loss_g
    for i, o in ipairs(outs_c) do
      S.assert_device_close(cls .. ' output ' .. i, o, outs_g[i], DEVICE, TOL[dt])
      local w = ember.randn(unpack(o.shape)):to(dt)
      local tc, tg = (o * w):sum(), (outs_g[i] * w:to(DEVICE)):sum()
      loss_c, loss_g = loss_c and loss_c + tc or tc, loss_g and loss_g + tg or tg
    end
    loss_c:backward()
    loss_g:backward()
    S.assert_device_close(cls .. ' grad x', xc.grad, xg.grad, DEVICE, TOL[dt])
    if hc then S.assert_device_close(cls .. ' grad h0', hc.grad, hg.grad, DEVICE, TOL[dt]) end
    if cc then S.assert_device_close(cls .. ' grad c0', cc.grad, cg.grad, DEVICE, TOL[dt]) end
    local gp = {}
    for _, pr in ipairs(gm:named_parameters()) do gp[pr[1]] = pr[2] end
    local n = 0
    for _, pr in ipairs(cm:named_parameters()) do
      S.assert_device_close(cls .. ' grad ' .. pr[1], pr[2].grad, gp[pr[1]].grad, DEVICE, TOL[dt])
      n = n + 1
    end
    return yg, n
  end

  it('LSTM, GRU, RNN tanh and relu: 2 layers, bidirectional, with initial states (float64)', function()
    for _, case in ipairs({ { 'LSTM' }, { 'GRU' }, { 'RNN' }, { 'RNN', 'relu' } }) do
      local opts = { num_layers = 2, bidirectional = true, dtype = 'float64', nonlinearity = case[2] }
      if case[1] ~= 'RNN' then opts.nonlinearity = nil end
      local _, n = compare(case[1], opts, 3, 5, 6, 4, true)
      assert.are.equal(16, n) -- 2 layers x 2 directions x 4 parameters
    end
  end)

  it('LSTM and GRU with lengths (unsorted, padded), float32, no initial state', function()
    for _, cls in ipairs({ 'LSTM', 'GRU' }) do
      local y = compare(cls, { num_layers = 2, bidirectional = true, dtype = 'float32' }, 4, 8, 7, 3, false,
        { 5, 7, 2 })
      -- outputs past a sequence's length are zero on the GPU too
      assert.are.equal(0, y:narrow(1, 3, 5):narrow(2, 3, 1):abs():sum():item())
    end
  end)

  it('an RNN without bias, one layer, float32; the state dict comes back unchanged', function()
    local _, n = compare('RNN', { bias = false, dtype = 'float32' }, 3, 6, 5, 2, true)
    assert.are.equal(2, n)
    local cm, gm = pair('GRU', { dtype = 'float32' }, 3, 4, { dtype = 'float32' })
    local csd, gsd = cm:state_dict(), gm:state_dict()
    for k, t in pairs(csd) do
      assert.are.equal(0, (gsd[k]:to('cpu') - t):abs():max():item(), k)
    end
  end)

  it('dropout between layers draws the same masks as on the CPU (the modules\' F.dropout)', function()
    local y = compare('GRU', { num_layers = 3, dropout = 0.5, dtype = 'float64' }, 3, 6, 5, 4, true, nil, 11)
    assert(y:abs():sum():item() > 0)
  end)

  it('refuses a sequence of length 0 on cuda with a clear message', function()
    local m = nn.GRU(3, 4):to(DEVICE)
    local ok, err = pcall(m, ember.randn(3, 2, 3):to(DEVICE), nil, { 3, 0 })
    assert.is_false(ok)
    assert.truthy(tostring(err):find('lengths[1] = 0', 1, true), tostring(err))
  end)
end)
