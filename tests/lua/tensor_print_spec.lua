-- tostring(t) in PyTorch's layout, with dtype, shape and device; and totable.
local function str(t) return tostring(t) end

describe('printing', function()
  it('aligns nested brackets, floats with 4 decimals', function()
    assert.are.equal('tensor([[1.0000, 2.0000],\n' ..
                     '        [3.0000, 4.0000]], dtype=float32, shape={2, 2}, device=cpu)',
      str(ember.tensor({{1, 2}, {3, 4}})))
    assert.are.equal('tensor([ 0.5000, -1.2500], dtype=float64, shape={2}, device=cpu)',
      str(ember.tensor({0.5, -1.25}, {dtype = 'float64'})))
  end)

  it('prints integers without decimals and booleans as words, right-aligned', function()
    assert.are.equal('tensor([  1,  -2, 300], dtype=int64, shape={3}, device=cpu)',
      str(ember.tensor({1, -2, 300}, {dtype = 'int64'})))
    assert.are.equal('tensor([[ true, false]], dtype=bool, shape={1, 2}, device=cpu)',
      str(ember.tensor({{true, false}})))
    assert.are.equal('tensor([[1099511627777]], dtype=int64, shape={1, 1}, device=cpu)',
      str(ember.tensor({{2 ^ 40 + 1}}, {dtype = 'int64'})))
    assert.are.equal('tensor([  0, 255], dtype=uint8, shape={2}, device=cpu)',
      str(ember.tensor({0, 255}, {dtype = 'uint8'})))
  end)

  it('switches to scientific notation when the range needs it', function()
    assert.are.equal('tensor([ 1.0000e-03,  1.0000e+03, -5.0000e+00], dtype=float32, shape={3}, device=cpu)',
      str(ember.tensor({0.001, 1000, -5})))
    assert.are.equal('tensor([1.0000e+09, 2.0000e+00], dtype=float32, shape={2}, device=cpu)',
      str(ember.tensor({1e9, 2})))
    assert.are.equal('tensor([5.0000e-05, 0.0000e+00], dtype=float32, shape={2}, device=cpu)',
      str(ember.tensor({0.00005, 0})))
    assert.are.equal('tensor([   nan,    inf,   -inf, 1.5000], dtype=float32, shape={4}, device=cpu)',
      str(ember.tensor({0 / 0, 1 / 0, -1 / 0, 1.5})))
  end)

  it('prints 0-d, empty, 3-d, float16 and strided tensors', function()
    assert.are.equal('tensor(3, dtype=int32, shape={}, device=cpu)', str(ember.tensor(3, {dtype = 'int32'})))
    assert.are.equal('tensor(-0.5000, dtype=float32, shape={}, device=cpu)', str(ember.tensor(-0.5)))
    assert.are.equal('tensor([], dtype=float32, shape={0}, device=cpu)', str(ember.zeros(0)))
    assert.are.equal('tensor([], dtype=int64, shape={2, 0}, device=cpu)', str(ember.zeros(2, 0, {dtype = 'int64'})))
    assert.are.equal(
      'tensor([[[0, 1],\n' ..
      '         [2, 3]],\n' ..
      '\n' ..
      '        [[4, 5],\n' ..
      '         [6, 7]]], dtype=int64, shape={2, 2, 2}, device=cpu)',
      str(ember.arange(8, {dtype = 'int64'}):view(2, 2, 2)))
    assert.are.equal('tensor([1.5000, 2.2500], dtype=float16, shape={2}, device=cpu)',
      str(ember.tensor({1.5, 2.25}, {dtype = 'float16'})))
    assert.are.equal('tensor([[1, 3],\n        [2, 4]], dtype=int32, shape={2, 2}, device=cpu)',
      str(ember.tensor({{1, 2}, {3, 4}}, {dtype = 'int32'}):t()))
  end)

  it('wraps long rows at 80 columns', function()
    assert.are.equal(
      'tensor([ 0.0000,  1.0000,  2.0000,  3.0000,  4.0000,  5.0000,  6.0000,  7.0000,\n' ..
      '         8.0000,  9.0000, 10.0000, 11.0000], dtype=float32, shape={12}, device=cpu)',
      str(ember.arange(12)))
  end)

  it('shortens tensors above 1000 elements to 3 entries at each end', function()
    assert.are.equal('tensor([   0,    1,    2,  ...,  998,  999, 1000], dtype=int64, shape={1001}, device=cpu)',
      str(ember.arange(1001, {dtype = 'int64'})))
    -- 1000 elements are all shown, 14 to a line
    local full = str(ember.arange(1000, {dtype = 'int64'}))
    assert.are.equal('tensor([  0,   1,   2,   3,   4,   5,   6,   7,   8,   9,  10,  11,  12,  13,\n' ..
      '         14,  15,', full:sub(1, 95))
    assert.are.equal(' 994, 995, 996, 997, 998, 999], dtype=int64, shape={1000}, device=cpu)', full:sub(-70))
    assert.are.equal(
      'tensor([[   0,    1,    2,  ...,   47,   48,   49],\n' ..
      '        [  50,   51,   52,  ...,   97,   98,   99],\n' ..
      '        [ 100,  101,  102,  ...,  147,  148,  149],\n' ..
      '        ...,\n' ..
      '        [1850, 1851, 1852,  ..., 1897, 1898, 1899],\n' ..
      '        [1900, 1901, 1902,  ..., 1947, 1948, 1949],\n' ..
      '        [1950, 1951, 1952,  ..., 1997, 1998, 1999]], dtype=int64, shape={40, 50}, device=cpu)',
      str(ember.arange(2000, {dtype = 'int64'}):view(40, 50)))
  end)

  it('prints freed tensors without touching their data, and concatenates with strings', function()
    local t = ember.ones(2)
    t:free()
    assert.are.equal('tensor(<freed>, dtype=float32, device=cpu)', str(t))
    assert.are.equal('x = tensor([1], dtype=int32, shape={1}, device=cpu)',
      'x = ' .. ember.tensor({1}, {dtype = 'int32'}))
  end)
end)

describe('totable', function()
  it('nests like the shape, follows views and gives numbers for 0-d tensors', function()
    local t = ember.arange(6):view(2, 3)
    assert.are.same({{0, 3}, {1, 4}, {2, 5}}, t:t():totable())
    assert.are.same({1, 4}, t:select(2, 2):totable())
    assert.are.equal(4, t[{2, 2}]:totable())
    assert.are.same({{}, {}}, ember.zeros(2, 0):totable())
  end)
end)
