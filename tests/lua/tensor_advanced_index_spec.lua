-- t[mask], t[index], t[{..., index}], range steps and the gradients of sort/topk/max/min:
-- the idioms that once gave silently wrong answers. Expected values come from PyTorch
-- (torch 2.x, the expression in each comment); positions and index values in ember are
-- 1-based, so PyTorch's 0-based ones appear here plus 1.
local U = dofile(debug.getinfo(1, 'S').source:match('^@(.*[/\\])') .. 'tensor_testutil.lua')
local raises, close = U.raises, U.close

local function t34() return ember.arange(1, 13):float():view(3, 4) end   -- torch.arange(1., 13.).view(3, 4)
local function long(x) return ember.tensor(x, {dtype = 'int64'}) end
local function bool(x) return ember.tensor(x, {dtype = 'bool'}) end

describe('t[mask]', function()
  it('selects the elements where a same-shape mask is true (1-d result)', function()
    local t = t34()
    close(t[t:gt(6)], {7, 8, 9, 10, 11, 12})          -- t[t > 6]
  end)
  it('selects slices with a mask over the leading dims', function()
    close(t34()[bool({true, false, true})], {{1, 2, 3, 4}, {9, 10, 11, 12}})  -- t[tensor([True, False, True])]
  end)
  it('works as an entry of a table', function()
    close(t34()[{{}, bool({true, false, false, true})}], {{1, 4}, {5, 8}, {9, 12}})  -- t[:, mask]
  end)
  it('assigns a number or a tensor', function()
    local t = t34()
    t[t:gt(6)] = 0                                   -- u[u > 6] = 0
    close(t, {{1, 2, 3, 4}, {5, 6, 0, 0}, {0, 0, 0, 0}})
    t = t34()
    t[t:gt(10)] = ember.tensor({100, 200})          -- u[t > 10] = tensor([100., 200.])
    close(t, {{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 100, 200}})
  end)
  it('assigns through a mask over non-contiguous dims', function()
    local t = t34():t()                              -- a transposed view: the write goes back into it
    t[t:gt(10)] = -1
    close(t, {{1, 5, 9}, {2, 6, 10}, {3, 7, -1}, {4, 8, -1}})
  end)
  it('passes gradients to the selected elements', function()
    local x = ember.tensor({1, 2, 3, 4}):requires_grad_()
    local _ = (x[x:gt(2)] * ember.tensor({10, 100})):sum():backward()   -- x.grad: [0, 0, 10, 100]
    close(x.grad, {0, 0, 10, 100})
  end)
  it('refuses a mask of another shape', function()
    raises(function() local _ = t34()[bool({true, false})] end,
      "t[mask]: the mask of shape [2] does not match the indexed dims: size 2 at the mask's dim 1 against 3 at " ..
      "the tensor's dim 1")
    raises(function() t34()[bool({{true}})] = 1 end, 't[mask] = v: the mask of shape [1, 1] does not match')
    raises(function() local t = t34(); t[t:gt(6)] = ember.tensor({1, 2}) end,
      "t[mask] = v: the value of shape [2] does not broadcast to the selection's shape [6]")
  end)
end)

describe('t[index]', function()
  it('selects along dim 1 with 1-based positions', function()
    close(t34()[long({3, 1})], {{9, 10, 11, 12}, {1, 2, 3, 4}})    -- t[tensor([2, 0])]
    close(ember.arange(1, 7):float()[long({{1, 3}, {6, 6}})], {{1, 3}, {6, 6}})  -- arange(1., 7.)[tensor([[0, 2], [5, 5]])]
    close(t34()[ember.tensor({2}, {dtype = 'int32'})], {{5, 6, 7, 8}})
  end)
  it('selects along another dim as a table entry', function()
    close(t34()[{{}, long({4, 1})}], {{4, 1}, {8, 5}, {12, 9}})     -- t[:, tensor([3, 0])]
    close(t34()[{2, long({4, 1})}], {8, 5})                          -- t[1, tensor([3, 0])]
  end)
  it('assigns', function()
    local t = t34()
    t[long({3, 1})] = ember.tensor({-1, -2, -3, -4})   -- u[tensor([2, 0])] = tensor([-1., -2., -3., -4.])
    close(t, {{-1, -2, -3, -4}, {5, 6, 7, 8}, {-1, -2, -3, -4}})
    t = t34()
    t[{{}, long({2})}] = ember.tensor({{7}, {8}, {9}})  -- u[:, tensor([1])] = tensor([[7.], [8.], [9.]])
    close(t, {{1, 7, 3, 4}, {5, 8, 7, 8}, {9, 9, 11, 12}})
    t = t34()
    t[long({2})] = 0
    close(t, {{1, 2, 3, 4}, {0, 0, 0, 0}, {9, 10, 11, 12}})
  end)
  it('accumulates the gradient of repeated positions', function()
    local x = ember.tensor({1, 2, 3, 4}):requires_grad_()
    x[long({4, 1, 4})]:sum():backward()              -- x[tensor([3, 0, 3])].sum(): grad [1, 0, 0, 2]
    close(x.grad, {1, 0, 0, 2})
  end)
  it('refuses positions out of range, float indices and two index tensors', function()
    raises(function() local _ = t34()[long({4})] end,
      't[index]: index 4 out of range for dim 1 of size 3 (index tensors hold 1-based positions, 1..3)')
    raises(function() local _ = t34()[long({0, 1})] end, 't[index]: index 0 out of range for dim 1 of size 3')
    raises(function() t34()[long({5})] = 1 end, 't[index] = v: index 5 out of range')
    raises(function() local _ = t34()[ember.tensor({1})] end,
      't[index]: an index tensor must hold int64 or int32 positions, or be a bool mask; got a float32 tensor')
    raises(function() local _ = t34()[{long({1}), long({1})}] end,
      't[{...}]: entries 1 and 2 are both mask or index tensors; one per t[{...}] is supported')
  end)
end)

describe('other keys', function()
  it('are errors, never nil', function()
    raises(function() local _ = t34()[true] end,
      't[key]: a tensor is indexed by a position, a table {i, {a, b}, ...}, a bool mask or an int64 index tensor, ' ..
      'got boolean')
    raises(function() local _ = t34().no_such_method end, "tensor: no method or field 'no_such_method'")
    raises(function() t34()[print] = 1 end, 't[key] = v: a tensor is indexed by a position')
  end)
end)

describe('range steps', function()
  it('take every s-th position as a view', function()
    local x = ember.arange(1, 11):float()
    local v = x[{{1, 10, 2}}]                          -- x[0:10:2]
    close(v, {1, 3, 5, 7, 9})
    assert.is_true(v:shares_storage(x))
    close(x[{{2, 10, 3}}], {2, 5, 8})                  -- x[1:10:3]
    close(x[{{2, nil, 3}}], {2, 5, 8})                 -- an absent last position means the end
    close(t34()[{{}, {1, 4, 2}}], {{1, 3}, {5, 7}, {9, 11}})   -- t[:, 0:4:2]
  end)
  it('assign through the view', function()
    local x = ember.zeros(6)
    x[{{1, 6, 2}}] = 1
    close(x, {1, 0, 1, 0, 1, 0})
  end)
  it('pass gradients to the positions taken', function()
    local x = ember.arange(1, 11):float():requires_grad_()
    local _ = (x[{{1, 10, 2}}] * ember.arange(1, 6):float()):sum():backward()   -- (x[0:10:2] * arange(1., 6.)).sum()
    close(x.grad, {1, 0, 2, 0, 3, 0, 4, 0, 5, 0})
  end)
  it('refuse negative and zero steps', function()
    raises(function() local _ = t34()[{{3, 1, -1}}] end,
      't[{...}]: entry 1 has step -1: negative steps are not supported (PyTorch refuses them too); use flip() to reverse')
    raises(function() local _ = t34()[{{1, 3, 0}}] end, 't[{...}]: entry 1 has step 0: a step must be positive')
    raises(function() local _ = t34()[{{1, 3, 1.5}}] end,
      't[{...}]: entry 1: range bounds and steps must be integers, got 1.5')
  end)
end)

describe('gradients of values chosen by position', function()
  it('topk', function()
    local x = ember.tensor({1, 5, 3}):requires_grad_()
    local v = x:topk(2)
    local _ = (v * ember.tensor({10, 1})):sum():backward()       -- x.topk(2) values * [10, 1]: grad [0, 10, 1]
    close(x.grad, {0, 10, 1})
  end)
  it('sort', function()
    local x = ember.tensor({3, 1, 2}):requires_grad_()
    local v = x:sort()
    local _ = (v * ember.tensor({1, 10, 1})):sum():backward()    -- x.sort() values * [1, 10, 1]: grad [1, 1, 10]
    close(x.grad, {1, 1, 10})
  end)
  it('sort and topk together: the [11, 1, 11] case', function()
    local x = ember.tensor({3, 1, 2}):requires_grad_()
    local s = x:sort()
    local k = x:topk(2);
    local _ = (s:sum() + k:sum() * 10):backward()                -- x.sort()[0].sum() + 10 * x.topk(2)[0].sum()
    close(x.grad, {11, 1, 11})
  end)
  it('max and min along a dim send the gradient to the position returned', function()
    local x = ember.tensor({{1, 9, 9}, {4, 2, 4}}):requires_grad_()
    local v, i = x:max(2)                              -- x.max(1): indices [1, 0]
    close(i, {2, 1})
    local _ = (v * ember.tensor({2, 3})):sum():backward()
    close(x.grad, {{0, 2, 0}, {3, 0, 0}})
    x.grad = nil
    local w = x:min(1, true)                           -- x.min(0, keepdim=True)
    w:sum():backward()
    close(x.grad, {{1, 0, 0}, {0, 1, 1}})
    x.grad = nil
    x:amax(2):sum():backward()                         -- x.amax(1): ties share
    close(x.grad, {{0, 0.5, 0.5}, {0.5, 0, 0.5}})
  end)
end)
