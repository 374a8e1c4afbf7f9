-- Shared helpers of seq_*_spec.lua (loaded with dofile, not a spec itself): PyTorch's
-- expected values (seq_fixtures.lua, written by gen_seq_fixtures.py) and a numerical
-- gradient check.
local dir = debug.getinfo(1, 'S').source:match('^@(.*[/\\])')
local S = { fixtures = dofile(dir .. 'seq_fixtures.lua') }
local F64 = { dtype = 'float64' }

-- A fixture entry {shape, data} or {shape, bool} as an ember tensor.
function S.T(e)
  if e.bool then return ember.tensor(e.bool, { dtype = 'bool' }):view(unpack(e.shape)) end
  return ember.tensor(e.data, F64):view(unpack(e.shape))
end

-- The largest absolute difference between a tensor and a fixture entry, after checking
-- that their shapes agree.
function S.max_diff(t, e, what)
  assert(ember.is_tensor(t), (what or 'value') .. ': expected a tensor, got ' .. tostring(t))
  assert(table.concat(t.shape, 'x') == table.concat(e.shape, 'x'), string.format('%s: shape [%s], PyTorch [%s]',
    what or 'value', table.concat(t.shape, ', '), table.concat(e.shape, ', ')))
  return (t:to('float64') - S.T(e)):abs():max():item()
end

function S.assert_close(t, e, what, tol)
  local d = S.max_diff(t, e, what)
  assert(d <= (tol or 1e-10), string.format('%s: differs from PyTorch by %g', what, d))
end

-- Inputs of a case as leaves that require grad (floats) or bool tensors.
function S.inputs(case)
  local out = {}
  for k, e in pairs(case.inputs) do out[k] = S.T(e):requires_grad_() end
  for k, e in pairs(case.bool_inputs) do out[k] = S.T(e) end
  return out
end

-- Loads a case's parameters into m through its state dict names (strict: every PyTorch
-- name must be one of m's and the other way round).
function S.load(m, case)
  local sd = {}
  for k, e in pairs(case.params) do sd[k] = S.T(e) end
  m:load_state_dict(sd)
  return m
end

-- Runs the case's loss over outs, backward, and compares outputs and every gradient
-- (of the inputs in `inputs` and the parameters of m) with PyTorch's.
function S.check_case(case, outs, inputs, m, tol)
  assert(#outs == #case.outputs, string.format('%d outputs, PyTorch %d', #outs, #case.outputs))
  local loss
  for i, o in ipairs(outs) do
    S.assert_close(o, case.outputs[i], 'output ' .. i, tol)
    local term = (o * S.T(case.weights[i])):sum()
    loss = loss and loss + term or term
  end
  loss:backward()
  local named = {}
  if m then for _, pair in ipairs(m:named_parameters()) do named[pair[1]] = pair[2] end end
  local n = 0
  for k, e in pairs(case.grads) do
    local t = inputs[k] or named[k]
    assert(t, 'no input or parameter named ' .. k)
    assert(t.grad, k .. ' got no gradient')
    S.assert_close(t.grad, e, 'gradient of ' .. k, tol)
    n = n + 1
  end
  return n
end

-- Central differences of f (a function of no arguments returning a 0-d tensor) with
-- respect to every element of each tensor in xs (float64 leaves), compared with the
-- gradients backward gives. Returns the largest difference.
function S.gradcheck(f, xs, eps)
  eps = eps or 1e-6
  for _, x in ipairs(xs) do x.grad = nil end
  f():backward()
  local worst = 0
  for _, x in ipairs(xs) do
    local analytic = x.grad:clone():view(-1)
    local flat = x:detach():view(-1)
    local n = flat.shape[1]
    for i = 1, n do
      local v = flat[i]:item()
      ember.no_grad(function() flat[i] = v + eps end)
      local up = ember.no_grad(function() return f():item() end)
      ember.no_grad(function() flat[i] = v - eps end)
      local down = ember.no_grad(function() return f():item() end)
      ember.no_grad(function() flat[i] = v end)
      local d = math.abs((up - down) / (2 * eps) - analytic[i]:item())
      if d > worst then worst = d end
    end
  end
  return worst
end

-- ---- GPU against CPU (the seq_*_spec.lua 'on cuda' blocks)
-- S.gpu(): the device to compare on ('cuda' or EMBER_TEST_DEVICE's cuda:N), whether
-- EMBER_TEST_DEVICE insisted on one, and how many GPUs there are. Without a GPU the blocks
-- report one pending test, unless a GPU was asked for: then they fail.
function S.gpu()
  local requested = rawget(_G, 'test_device') or os.getenv('EMBER_TEST_DEVICE') or 'cpu'
  local wanted = requested:match('^cuda') ~= nil
  local ok, n = pcall(ember.device_count, 'cuda')
  return wanted and requested or 'cuda', wanted, ok and n or 0
end

-- Same shape, on device, and |cpu - gpu| <= atol + rtol |cpu| everywhere.
function S.assert_device_close(what, cpu, gpu, device, tol)
  assert(ember.is_tensor(gpu), what .. ': expected a tensor, got ' .. tostring(gpu))
  assert(gpu.device:match('^cuda'), string.format('%s: on %s, expected %s', what, gpu.device, device))
  assert(table.concat(cpu.shape, 'x') == table.concat(gpu.shape, 'x'), string.format('%s: shape [%s] on cuda, [%s] on cpu',
    what, table.concat(gpu.shape, ', '), table.concat(cpu.shape, ', ')))
  if cpu:numel() == 0 then return end
  local c, g = cpu:detach():to('float64'), gpu:detach():to('cpu'):to('float64')
  local excess = ((c - g):abs() - c:abs() * tol - tol):max():item()
  assert(excess <= 0, string.format('%s: cuda differs from the cpu by more than %g (+ %g relative); worst excess %g',
    what, tol, tol, excess))
end

return S
