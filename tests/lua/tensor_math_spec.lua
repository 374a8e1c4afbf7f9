-- Elementwise operations and operators. Expected values of the unary functions come from
-- numpy (math.erf for erf and gelu), printed with 7 significant digits.
local U = dofile(debug.getinfo(1, 'S').source:match('^@(.*[/\\])') .. 'tensor_testutil.lua')
local close, raises = U.close, U.raises

local function m22() return ember.tensor({{1, 2}, {3, 4}}) end

describe('binary operations', function()
  it('take tensors or numbers and broadcast', function()
    local a, row = m22(), ember.tensor({10, 20})
    assert.are.same({{11, 22}, {13, 24}}, a:add(row):totable())
    assert.are.same({{-9, -18}, {-7, -16}}, a:sub(row):totable())
    assert.are.same({{10, 40}, {30, 80}}, a:mul(row):totable())
    close(a:div(row), {{0.1, 0.1}, {0.3, 0.2}})
    assert.are.same({{1, 4}, {9, 16}}, a:pow(2):totable())
    assert.are.same({{2, 2}, {3, 4}}, a:maximum(2):totable())
    assert.are.same({{1, 2}, {2, 2}}, a:minimum(2):totable())
    assert.are.same({{1, 0}, {1, 0}}, a:fmod(2):totable())
    assert.are.same({{-1, 0}, {-1, 0}}, ember.tensor({{-3, -2}, {-1, 2}}):fmod(2):totable())
  end)

  it('add and sub take alpha as a number or {alpha =}', function()
    local a, b = m22(), ember.tensor({1, 1})
    assert.are.same({{3, 4}, {5, 6}}, a:add(b, {alpha = 2}):totable())
    assert.are.same({{3, 4}, {5, 6}}, a:add(b, 2):totable())
    assert.are.same({{-1, 0}, {1, 2}}, a:sub(b, {alpha = 2}):totable())
    assert.are.same({{7, 8}, {9, 10}}, a:add(3, {alpha = 2}):totable())
    assert.are.same({{2.5, 3.5}, {4.5, 5.5}}, a:clone():add_(b, 1.5):totable())
    raises(function() local _ = a:add(b, {alhpa = 2}) end, "add: unknown option 'alhpa' (expected alpha)")
    raises(function() local _ = a:add(b, {alpha = 'x'}) end, 'add: expected a number (alpha) for argument 2, got string')
  end)

  it('comparisons and logical operations give bool', function()
    local a = m22()
    local gt = a:gt(2)
    assert.are.equal('bool', gt.dtype)
    assert.are.same({{false, false}, {true, true}}, gt:totable())
    assert.are.same({{false, true}, {false, false}}, a:eq(2):totable())
    assert.are.same({{true, false}, {true, true}}, a:ne(2):totable())
    assert.are.same({{true, true}, {false, false}}, a:lt(3):totable())
    assert.are.same({{true, true}, {true, false}}, a:le(3):totable())
    assert.are.same({{false, true}, {true, true}}, a:ge(2):totable())
    assert.are.same({{false, false}, {false, true}}, a:gt(2):logical_and(a:eq(4)):totable())
    assert.are.same({{true, false}, {true, true}}, a:gt(2):logical_or(a:eq(1)):totable())
    assert.are.same({{true, false}, {false, true}}, a:gt(2):logical_xor(a:fmod(2):eq(1)):totable())
    assert.are.same({{true, true}, {false, false}}, a:gt(2):logical_not():totable())
    assert.are.same({{false, true}, {false, true}}, a:eq(ember.tensor({{0, 2}, {0, 4}})):totable())
  end)

  it('follow PyTorch dtype promotion', function()
    local i = ember.tensor({1, 2}, {dtype = 'int64'})
    assert.are.equal('int64', (i + 1).dtype)
    assert.are.equal('float32', (i + 0.5).dtype)
    assert.are.equal('float64', (i + ember.tensor({1}, {dtype = 'float64'})).dtype)
    assert.are.equal('float32', (ember.ones(2) + i).dtype)
    assert.are.equal('int32', (ember.ones(2, {dtype = 'int32'}) + ember.ones(2, {dtype = 'uint8'})).dtype)
  end)

  it('in-place forms write into self and return it', function()
    local a = m22()
    assert.are.equal(a, a:add_(1))
    assert.are.same({{2, 3}, {4, 5}}, a:totable())
    a:mul_(ember.tensor({1, 10}))
    assert.are.same({{2, 30}, {4, 50}}, a:totable())
    a:sub_(2):div_(2)
    assert.are.same({{0, 14}, {1, 24}}, a:totable())
    a:pow_(2)
    assert.are.same({{0, 196}, {1, 576}}, a:totable())
    a:maximum_(100):minimum_(200)
    assert.are.same({{100, 196}, {100, 200}}, a:totable())
    raises(function() ember.tensor({1}, {dtype = 'int32'}):add_(0.5) end, 'add_: result dtype float32 cannot be written to an int32 tensor')
    raises(function() ember.zeros(2):add_(ember.zeros(3, 2)) end, 'add_: output has shape [2], expected [3, 2]')
  end)

  it('module-level forms accept a number first', function()
    local a = m22()
    assert.are.same({{3, 4}, {5, 6}}, ember.add(a, 2):totable())
    assert.are.same({{9, 8}, {7, 6}}, ember.sub(10, a):totable())
    assert.are.same({{2, 4}, {6, 8}}, ember.mul(2, a):totable())
    assert.are.same({{1, 4}, {27, 256}}, ember.pow(a, a):totable())
  end)
end)

describe('operators', function()
  it('+ - * / ^ take tensors or numbers on either side', function()
    local a = m22()
    assert.are.same({{2, 4}, {6, 8}}, (a + a):totable())
    assert.are.same({{3, 4}, {5, 6}}, (a + 2):totable())
    assert.are.same({{3, 4}, {5, 6}}, (2 + a):totable())
    assert.are.same({{0, 1}, {2, 3}}, (a - 1):totable())
    assert.are.same({{9, 8}, {7, 6}}, (10 - a):totable())
    assert.are.same({{1, 4}, {9, 16}}, (a * a):totable())
    assert.are.same({{3, 6}, {9, 12}}, (3 * a):totable())
    assert.are.same({{0.5, 1}, {1.5, 2}}, (a / 2):totable())
    close(12 / a, {{12, 6}, {4, 3}})
    assert.are.same({{1, 4}, {9, 16}}, (a ^ 2):totable())
    assert.are.same({{2, 4}, {8, 16}}, (2 ^ a):totable())
    assert.are.same({{-1, -2}, {-3, -4}}, (-a):totable())
    assert.are.same({{1, 2}, {3, 4}}, a:totable())
  end)

  it('== compares identity, not values (use eq or equal)', function()
    local a = m22()
    local b = a:clone()
    assert.is_true(a == a)
    assert.is_false(a == b)
    assert.is_true(a:equal(b))
    assert.is_false(a:equal(b + 1))
    assert.is_false(a:equal(ember.zeros(4)))
    assert.is_true(a:allclose(b + 1e-7))
    assert.is_false(a:allclose(b + 1e-3))
    assert.is_true(a:allclose(b + 1e-3, 0, 1e-2))
  end)

  it('name the operation and the bad operand', function()
    local a = m22()
    raises(function() local _ = a:add('x') end, 'add: expected a tensor or number for argument 1, got string')
    raises(function() local _ = a:mul({}) end, 'mul: expected a tensor or number for argument 1, got table')
    raises(function() local _ = a:sub(nil) end, 'sub: expected a tensor or number for argument 1, got nil')
    raises(function() local _ = a + 'x' end, 'add: expected a tensor or number for argument 1, got string')
    raises(function() local _ = {} * a end, 'mul: expected a tensor as the first operand, got table')
    raises(function() local _ = a:div_('x') end, 'div_: expected a tensor or number for argument 1, got string')
    raises(function() local _ = a + ember.ones(3) end, 'add: shapes [2, 2] and [3] cannot be broadcast together')
    raises(function() local _ = ember.exp('x') end, 'exp: expected a tensor for argument 1, got string')
    raises(function() local _ = a:half():exp() end, 'exp: float16 tensors are storage only')
    raises(function() local _ = a:eq(ember.ffi.new('int[1]')) end,
      'eq: expected a tensor or number for argument 1, got cdata<int [1]>')
  end)
end)

describe('unary operations', function()
  local x = {-2, -0.5, 0, 0.5, 2}
  local p = {0.5, 1, 2, 4}
  local cases = {
    {'neg', x, {2, 0.5, 0, -0.5, -2}},
    {'abs', x, {2, 0.5, 0, 0.5, 2}},
    {'sign', x, {-1, -1, 0, 1, 1}},
    {'relu', x, {0, 0, 0, 0.5, 2}},
    {'square', x, {4, 0.25, 0, 0.25, 4}},
    {'floor', {-1.5, -0.5, 0.5, 1.5}, {-2, -1, 0, 1}},
    {'ceil', {-1.5, -0.5, 0.5, 1.5}, {-1, -0, 1, 2}},
    {'round', {-1.7, -0.2, 0.2, 1.7}, {-2, 0, 0, 2}},
    {'reciprocal', p, {2, 1, 0.5, 0.25}},
    {'exp', x, {0.1353353, 0.6065307, 1, 1.648721, 7.389056}},
    {'expm1', x, {-0.8646647, -0.3934693, 0, 0.6487213, 6.389056}},
    {'log', p, {-0.6931472, 0, 0.6931472, 1.386294}},
    {'log1p', p, {0.4054651, 0.6931472, 1.098612, 1.609438}},
    {'sqrt', p, {0.7071068, 1, 1.414214, 2}},
    {'rsqrt', p, {1.414214, 1, 0.7071068, 0.5}},
    {'sin', x, {-0.9092974, -0.4794255, 0, 0.4794255, 0.9092974}},
    {'cos', x, {-0.4161468, 0.8775826, 1, 0.8775826, -0.4161468}},
    {'tanh', x, {-0.9640276, -0.4621172, 0, 0.4621172, 0.9640276}},
    {'sigmoid', x, {0.1192029, 0.3775407, 0.5, 0.6224593, 0.8807971}},
    {'erf', x, {-0.9953223, -0.5204999, 0, 0.5204999, 0.9953223}},
    {'gelu', x, {-0.04550026, -0.1542688, 0, 0.3457312, 1.9545}},
    {'silu', x, {-0.2384058, -0.1887703, 0, 0.3112297, 1.761594}},
  }
  for _, c in ipairs(cases) do
    local name, input, expected = c[1], c[2], c[3]
    it(name .. ' matches numpy, out of place and in place', function()
      local t = ember.tensor(input)
      close(t[name](t), expected, 1e-5)
      close(ember[name](t), expected, 1e-5)
      close(t, input)
      local d = ember.tensor(input, {dtype = 'float64'})
      assert.are.equal(d, d[name .. '_'](d))
      close(d, expected, 1e-6)
    end)
  end

  it('math functions of integers give float32', function()
    assert.are.equal('float32', ember.tensor({1, 2}, {dtype = 'int64'}):exp().dtype)
    assert.are.equal('int64', ember.tensor({1, -2}, {dtype = 'int64'}):abs().dtype)
  end)
end)

describe('where and clamp', function()
  it('where picks per element, numbers allowed', function()
    local a = m22()
    local cond = a:gt(2)
    assert.are.same({{0, 0}, {3, 4}}, ember.where(cond, a, 0):totable())
    assert.are.same({{1, 2}, {-1, -1}}, ember.where(cond, -1, a):totable())
    assert.are.same({{1, 2}, {10, 10}}, a:where(cond:logical_not(), 10):totable())
    assert.are.same({{5, 5}, {7, 7}}, ember.where(cond, 7, 5):totable())
    raises(function() local _ = ember.where(a, a, 'x') end, 'where: expected a tensor or number for argument 3, got string')
    raises(function() local _ = ember.where(5, a, a) end, 'where: expected a tensor for argument 1, got number')
  end)

  it('clamp takes either bound as nil', function()
    local a = ember.tensor({-2, 0, 2, 4})
    assert.are.same({0, 0, 2, 3}, a:clamp(0, 3):totable())
    assert.are.same({0, 0, 2, 4}, a:clamp(0):totable())
    assert.are.same({-2, 0, 1, 1}, a:clamp(nil, 1):totable())
    assert.are.same({-1, 0, 2, 4}, a:clamp_min(-1):totable())
    assert.are.same({-2, 0, 2, 2}, a:clamp_max(2):totable())
    a:clamp_(-1, 1)
    assert.are.same({-1, 0, 1, 1}, a:totable())
    raises(function() local _ = a:clamp('a') end, 'clamp: expected a number or nil for argument 1, got string')
  end)
end)
