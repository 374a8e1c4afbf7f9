-- Creation: ember.tensor from Lua values, zeros/ones/empty/full, ranges, eye, random
-- tensors, *_like, fills, dtype conversion round trips.
local U = dofile(debug.getinfo(1, 'S').source:match('^@(.*[/\\])') .. 'tensor_testutil.lua')
local close, raises = U.close, U.raises

describe('ember.tensor', function()
  it('infers the shape of nested tables, float32 by default', function()
    local t = ember.tensor({{1, 2, 3}, {4, 5, 6}})
    assert.are.same({2, 3}, t.shape)
    assert.are.equal('float32', t.dtype)
    assert.are.equal('cpu', t.device)
    assert.are.same({{1, 2, 3}, {4, 5, 6}}, t:totable())
    assert.are.same({2, 1, 2}, ember.tensor({{{1, 2}}, {{3, 4}}}).shape)
  end)

  it('takes dtype and device options', function()
    local t = ember.tensor({1, 2, 3}, {dtype = 'int64', device = 'cpu'})
    assert.are.equal('int64', t.dtype)
    assert.are.same({1, 2, 3}, t:totable())
    assert.are.equal('float64', ember.tensor({1.5}, {dtype = 'double'}).dtype)
  end)

  it('makes bool tensors from Lua booleans', function()
    local t = ember.tensor({{true, false}, {false, true}})
    assert.are.equal('bool', t.dtype)
    assert.are.same({{true, false}, {false, true}}, t:totable())
    -- mixed with numbers, booleans count as 1 and 0
    local m = ember.tensor({true, 2, false})
    assert.are.equal('float32', m.dtype)
    assert.are.same({1, 2, 0}, m:totable())
    assert.are.same({1, 0}, ember.tensor({true, false}, {dtype = 'int32'}):totable())
  end)

  it('makes 0-d tensors from numbers and booleans', function()
    local t = ember.tensor(2.5)
    assert.are.same({}, t.shape)
    assert.are.equal(2.5, t:item())
    assert.are.equal(2.5, t:totable())
    assert.are.equal(true, ember.tensor(true):item())
    assert.are.equal('bool', ember.tensor(false).dtype)
  end)

  it('makes empty tensors from empty tables', function()
    assert.are.same({0}, ember.tensor({}).shape)
    assert.are.same({1, 0}, ember.tensor({{}}).shape)
    assert.are.same({}, ember.tensor({}):totable())
  end)

  it('copies a tensor (never shares its storage)', function()
    local a = ember.tensor({1, 2})
    local b = ember.tensor(a)
    assert.is_false(a:shares_storage(b))
    b:fill_(7)
    assert.are.same({1, 2}, a:totable())
    assert.are.equal('int32', ember.tensor(a, {dtype = 'int32'}).dtype)
  end)

  it('reports ragged tables with the position', function()
    raises(function() local _ = ember.tensor({{1, 2}, {3}}) end,
      'tensor: ragged nested table: [2] has 1 element(s), expected 2 (like [1])')
    raises(function() local _ = ember.tensor({{1, 2}, 3}) end,
      'tensor: ragged nested table: [2] is a number, expected a table of 2 elements (like [1])')
    raises(function() local _ = ember.tensor({{1, {2}}, {3, 4}}) end,
      'tensor: ragged nested table: [1][2] is a table, expected a number (like [1][1])')
    raises(function() local _ = ember.tensor({{{1}, {2}}, {{3}, {4, 5}}}) end,
      'tensor: ragged nested table: [2][2] has 2 element(s), expected 1 (like [2][1])')
  end)

  it('rejects leaves that are not numbers or booleans', function()
    raises(function() local _ = ember.tensor({{1, 2}, {'x', 4}}) end,
      'tensor: expected a number or boolean at [2][1], got string')
    raises(function() local _ = ember.tensor({ember.ones(2), ember.ones(2)}) end,
      'tensor: expected a number or boolean at [1], got tensor (ember.stack joins a list of tensors)')
    raises(function() local _ = ember.tensor('abc') end,
      'tensor: expected a number, boolean, nested table or tensor for argument 1, got string')
    raises(function() local _ = ember.tensor({1}, {dtype = 'float33'}) end, "tensor: unknown dtype 'float33'")
    raises(function() local _ = ember.tensor({1}, {dtpye = 'float64'}) end,
      "tensor: unknown option 'dtpye' (expected dtype, device, requires_grad)")
    raises(function() local _ = ember.tensor({1}, {device = 'tpu'}) end, "tensor: device: unknown device 'tpu'")
  end)
end)

describe('zeros, ones, empty, full', function()
  it('take sizes as varargs or a table, and options', function()
    assert.are.same({{0, 0, 0}, {0, 0, 0}}, ember.zeros(2, 3):totable())
    assert.are.same({{1, 1}}, ember.ones({1, 2}):totable())
    assert.are.same({4, 5}, ember.empty(4, 5).shape)
    local z = ember.zeros(2, {dtype = 'int64'})
    assert.are.equal('int64', z.dtype)
    assert.are.same({}, ember.zeros({}).shape)
    assert.are.same({3}, ember.ones(ember.ones(3).shape).shape)
    assert.are.same({2, 3}, ember.zeros(2LL, ember.ffi.new('int64_t', 3)).shape)
  end)

  it('full takes the value after the sizes', function()
    assert.are.same({{7, 7}, {7, 7}}, ember.full(2, 2, 7):totable())
    assert.are.same({2.5, 2.5, 2.5}, ember.full({3}, 2.5):totable())
    local f = ember.full({2}, 3, {dtype = 'int32'})
    assert.are.equal('int32', f.dtype)
    assert.are.same({true, true}, ember.full({2}, true, {dtype = 'bool'}):totable())
  end)

  it('reject bad sizes with 1-based positions', function()
    raises(function() local _ = ember.zeros(2, -1) end, 'zeros: size 2 is -1, expected a non-negative integer')
    raises(function() local _ = ember.ones(2.5) end, 'ones: size 1 must be an integer, got 2.5')
    raises(function() local _ = ember.empty(2, 'x') end, 'empty: size 2 must be an integer, got string')
    raises(function() local _ = ember.zeros(1, 1, 1, 1, 1, 1, 1, 1, 1) end,
      'zeros: 9 dims requested, ember supports up to 8')
    raises(function() local _ = ember.full(2, 2, 'x') end,
      'full: expected a number or boolean (the fill value) for argument 3, got string')
    raises(function() local _ = ember.zeros({2}, 3) end,
      'zeros: expected sizes as numbers or as one table, got a table and more arguments')
  end)
end)

describe('ranges', function()
  it('arange excludes the end, as in PyTorch', function()
    assert.are.same({0, 1, 2, 3, 4}, ember.arange(5):totable())
    assert.are.same({1, 2, 3, 4}, ember.arange(1, 5):totable())
    assert.are.same({1, 3}, ember.arange(1, 5, 2):totable())
    assert.are.same({5, 4, 3, 2}, ember.arange(5, 1, -1):totable())
    close(ember.arange(0, 1, 0.25), {0, 0.25, 0.5, 0.75})
    assert.are.equal('float32', ember.arange(3).dtype)
    assert.are.equal('int64', ember.arange(3, {dtype = 'int64'}).dtype)
    assert.are.same({0, 1}, ember.arange(0, 2, {dtype = 'int32'}):totable())
  end)

  it('arange rejects bad arguments', function()
    raises(function() local _ = ember.arange('a') end, 'arange: expected a number (end) for argument 1, got string')
    raises(function() local _ = ember.arange(0, 5, 0) end, 'arange: got start=0 end=5 step=0')
    raises(function() local _ = ember.arange(0, 5, -1) end, 'arange: step -1 points away from end')
  end)

  it('linspace includes both ends', function()
    close(ember.linspace(0, 1, 5), {0, 0.25, 0.5, 0.75, 1})
    close(ember.linspace(-1, 1, 3, {dtype = 'float64'}), {-1, 0, 1})
    raises(function() local _ = ember.linspace(0, 1, 2.5) end,
      'linspace: expected an integer (steps) for argument 3, got number')
  end)

  it('eye makes identities, square or not', function()
    assert.are.same({{1, 0}, {0, 1}}, ember.eye(2):totable())
    assert.are.same({{1, 0, 0}, {0, 1, 0}}, ember.eye(2, 3):totable())
    assert.are.equal('int32', ember.eye(2, {dtype = 'int32'}).dtype)
    raises(function() local _ = ember.eye(-1) end, 'eye: got -1 x -1, expected non-negative sizes')
  end)
end)

describe('random tensors', function()
  it('rand is uniform in [0, 1) and follows manual_seed', function()
    ember.manual_seed(42)
    local a = ember.rand(1000)
    ember.manual_seed(42)
    local b = ember.rand(1000)
    assert.is_true(a:equal(b))
    assert.is_true(a:ge(0):all():item() and a:lt(1):all():item())
    assert.is_true(math.abs(a:mean():item() - 0.5) < 0.05)
    assert.are.equal('float64', ember.rand(2, 2, {dtype = 'float64'}).dtype)
    assert.is_false(ember.rand(1000):equal(a))
  end)

  it('randn has mean 0 and std 1', function()
    ember.manual_seed(7)
    local x = ember.randn(20000)
    assert.is_true(math.abs(x:mean():item()) < 0.03)
    assert.is_true(math.abs(x:std():item() - 1) < 0.03)
    assert.are.same({2, 3}, ember.randn(2, 3).shape)
  end)

  it('rng state can be saved and restored', function()
    local state = ember.get_rng_state()
    local a = ember.rand(5)
    ember.set_rng_state(state)
    assert.is_true(a:equal(ember.rand(5)))
    raises(function() ember.set_rng_state(5) end,
      'set_rng_state: expected a table {seed =, offset =} from get_rng_state() for argument 1, got number')
    raises(function() ember.manual_seed(-1) end, 'manual_seed: got -1, expected a non-negative integer')
  end)

  it('randint gives int64 values in [low, high)', function()
    local r = ember.randint(3, 7, {1000})
    assert.are.equal('int64', r.dtype)
    assert.are.equal(3, r:min():item())
    assert.are.equal(6, r:max():item())
    local h = ember.randint(2, {10, 10})
    assert.are.same({10, 10}, h.shape)
    assert.is_true(h:ge(0):all():item() and h:lt(2):all():item())
    assert.are.equal('int32', ember.randint(0, 5, 3, {dtype = 'int32'}).dtype)
    raises(function() local _ = ember.randint(0, 5) end, 'randint: expected a table of sizes for argument 3, got nil')
    raises(function() local _ = ember.randint(5, 5, {2}) end, 'randint_: got low=5 high=5, expected low < high')
  end)

  it('randperm is a permutation of 1..n', function()
    local p = ember.randperm(50)
    assert.are.equal('int64', p.dtype)
    local seen = {}
    for _, v in ipairs(p:totable()) do seen[v] = (seen[v] or 0) + 1 end
    for i = 1, 50 do assert.are.equal(1, seen[i]) end
    assert.are.same({}, ember.randperm(0):totable())
  end)

  it('*_like copy shape, dtype and device unless told otherwise', function()
    local t = ember.ones(2, 3, {dtype = 'float64'})
    local z = ember.zeros_like(t)
    assert.are.same({2, 3}, z.shape)
    assert.are.equal('float64', z.dtype)
    assert.are.same({{0, 0, 0}, {0, 0, 0}}, z:totable())
    assert.are.same({{1, 1, 1}, {1, 1, 1}}, ember.ones_like(t, {dtype = 'int32'}):totable())
    assert.are.same({{5, 5, 5}, {5, 5, 5}}, ember.full_like(t, 5):totable())
    assert.are.same({2, 3}, ember.empty_like(t).shape)
    local r = ember.rand_like(t)
    assert.is_true(r:ge(0):all():item() and r:lt(1):all():item())
    assert.are.same({2, 3}, ember.randn_like(t).shape)
    raises(function() local _ = ember.zeros_like({1}) end, 'zeros_like: expected a tensor for argument 1, got table')
  end)
end)

describe('fills', function()
  it('fill_, zero_ and the random fills work in place and return self', function()
    local t = ember.empty(2, 2)
    assert.are.equal(t, t:fill_(3))
    assert.are.same({{3, 3}, {3, 3}}, t:totable())
    t:zero_()
    assert.are.same({{0, 0}, {0, 0}}, t:totable())
    local u = ember.empty(1000):uniform_(-2, -1)
    assert.is_true(u:ge(-2):all():item() and u:lt(-1):all():item())
    local n = ember.empty(5000):normal_(10, 0.5)
    assert.is_true(math.abs(n:mean():item() - 10) < 0.05)
    local r = ember.empty(100, {dtype = 'int64'}):random_(1, 4)
    assert.is_true(r:ge(1):all():item() and r:lt(4):all():item())
    local b = ember.empty(1000):bernoulli_(0.25)
    assert.is_true(math.abs(b:mean():item() - 0.25) < 0.06)
    raises(function() ember.empty(2):fill_('x') end,
      'fill_: expected a number or boolean (the fill value) for argument 1, got string')
    raises(function() ember.empty(2, {dtype = 'int32'}):uniform_() end, 'uniform_: expected a float32 or float64 tensor')
  end)
end)

describe('dtype conversion', function()
  local values = {
    float32 = {{1, -2.5}, {0.125, 3e5}},
    float64 = {{1, -2.5}, {0.1, 1e300}},
    float16 = {{1, -2.5}, {0.125, 65504}},
    bfloat16 = {{1, -2.5}, {0.125, 3.3895313892515355e38}},
    int32 = {{1, -2}, {2147483647, -2147483648}},
    int64 = {{1, -2}, {2 ^ 40 + 1, -(2 ^ 52)}},
    uint8 = {{0, 1}, {128, 255}},
    bool = {{true, false}, {false, true}},
  }
  for dtype, v in pairs(values) do
    it('round-trips ' .. dtype .. ' through totable', function()
      local t = ember.tensor(v, {dtype = dtype})
      assert.are.equal(dtype, t.dtype)
      assert.are.same(v, t:totable())
      assert.are.same(v, t:to('float64'):to(dtype):totable())
    end)
  end

  it('rounds to the nearest float16 and bfloat16', function()
    local third = ember.tensor({1 / 3})
    assert.are.equal(0.333251953125, third:half():totable()[1])
    assert.are.equal(0.333984375, third:bfloat16():totable()[1])
    assert.are.equal(0.333251953125, third:half():float():item())
    -- float16 overflows to inf; bfloat16 keeps float32's range
    assert.are.equal(math.huge, ember.tensor({1e5}):half():float():item())
    assert.are.equal(99840, ember.tensor({1e5}):bfloat16():float():item())
  end)

  it('converts with float(), double(), int(), long(), byte(), bool() and type()', function()
    local t = ember.tensor({2.7, -2.7, 0})
    assert.are.same({2, -2, 0}, t:int():totable())
    assert.are.equal('int64', t:long().dtype)
    assert.are.same({true, true, false}, t:bool():totable())
    assert.are.equal('float64', t:double().dtype)
    assert.are.equal('uint8', ember.tensor({3}):byte().dtype)
    assert.are.equal('float32', t:int():float().dtype)
    assert.are.equal('float32', t:type())
    assert.are.equal('int32', t:type('int32'):type())
  end)

  it('takes requires_grad in every creator\'s options, as PyTorch does', function()
    local x = ember.tensor({ 1, 5, 2 }, { requires_grad = true })
    assert.is_true(x.requires_grad)
    assert.is_true(x:is_leaf())
    assert.is_false(ember.tensor({ 1, 5, 2 }).requires_grad)
    local z = ember.zeros(2, 3, { requires_grad = true, dtype = 'float64' })
    assert.is_true(z.requires_grad)
    assert.are.equal('float64', z.dtype)
    assert.are.same({ 2, 3 }, z.shape)
    assert.is_true(ember.randn({ 2, 2 }, { requires_grad = true }).requires_grad)
    assert.is_false(ember.ones_like(z).requires_grad)
    local y = (x * x):sum()
    y:backward()
    assert.are.same({ 2, 10, 4 }, x.grad:totable())
    assert.has_error(function() ember.ones(2, { requires_grad = 1 }) end, 'requires_grad: expected a boolean, got number')
  end)
end)
