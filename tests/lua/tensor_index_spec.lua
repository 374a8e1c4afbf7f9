-- Indexing by index tensors and masks; every position is 1-based.
local U = dofile(debug.getinfo(1, 'S').source:match('^@(.*[/\\])') .. 'tensor_testutil.lua')
local raises = U.raises

local function m23() return ember.tensor({{1, 2, 3}, {4, 5, 6}}) end
local function long(x) return ember.tensor(x, {dtype = 'int64'}) end

describe('index_select and gather', function()
  it('index_select takes an index tensor or a list', function()
    local m = m23()
    assert.are.same({{4, 5, 6}, {1, 2, 3}, {4, 5, 6}}, m:index_select(1, {2, 1, 2}):totable())
    assert.are.same({{3, 1}, {6, 4}}, m:index_select(2, long({3, 1})):totable())
    assert.are.same({{3, 1}, {6, 4}}, m:index_select(-1, ember.tensor({3, 1}, {dtype = 'int32'})):totable())
    assert.are.same({{2}, {5}}, ember.index_select(m, 2, 2):totable())
  end)

  it('gather picks along a dim', function()
    local m = m23()
    assert.are.same({{3, 1}, {5, 5}}, m:gather(2, long({{3, 1}, {2, 2}})):totable())
    assert.are.same({{4, 2, 6}}, m:gather(1, {{2, 1, 2}}):totable())
  end)

  it('report out-of-range positions in 1-based terms', function()
    local m = m23()
    raises(function() local _ = m:index_select(1, {3}) end,
      'index_select: index 3 is out of range for dim 1 of size 2 (expected 1..2)')
    raises(function() local _ = m:index_select(1, {0}) end, 'index_select: index 0 is out of range for dim 1')
    raises(function() local _ = m:gather(2, long({{4}, {1}})) end, 'gather: index 4 is out of range for dim 2 of size 3')
    raises(function() local _ = m:index_select(3, {1}) end, 'index_select: dim 3 out of range for a 2-d tensor')
    raises(function() local _ = m:index_select(1, 'x') end,
      'index_select: expected an index tensor or a list of positions for argument 2, got string')
    raises(function() local _ = m:index_select(1, {1, 'x'}) end,
      'index_select: expected a position (integer) at [2] of the index list, got string')
    raises(function() local _ = m:index_select(1, ember.tensor({1})) end,
      'index_select: the index must be an int64 or int32 tensor, got float32')
  end)
end)

describe('scatter and friends', function()
  it('scatter_ writes src or a value at the positions', function()
    local t = ember.zeros(2, 3)
    t:scatter_(2, long({{3}, {1}}), ember.tensor({{7}, {8}}))
    assert.are.same({{0, 0, 7}, {8, 0, 0}}, t:totable())
    t:scatter_(1, long({{2, 2, 1}}), -1)
    assert.are.same({{0, 0, -1}, {-1, -1, 0}}, t:totable())
    local z = ember.zeros(2, 2)
    local s = z:scatter(2, long({{2}, {1}}), 5)
    assert.are.same({{0, 5}, {5, 0}}, s:totable())
    assert.are.same({{0, 0}, {0, 0}}, z:totable())
  end)

  it('scatter_add accumulates', function()
    local t = ember.zeros(3)
    t:scatter_add_(1, long({1, 3, 1, 1}), ember.tensor({1, 2, 3, 4}))
    assert.are.same({8, 0, 2}, t:totable())
    assert.are.same({9, 1, 3}, ember.ones(3):scatter_add(1, {1, 3, 1, 1}, ember.tensor({1, 2, 3, 4})):totable())
  end)

  it('index_add_ and index_fill_ work on slices', function()
    local t = ember.zeros(3, 2)
    t:index_add_(1, {3, 1}, ember.tensor({{1, 2}, {3, 4}}))
    assert.are.same({{3, 4}, {0, 0}, {1, 2}}, t:totable())
    t:index_add_(1, {3}, ember.tensor({{1, 1}}), {alpha = 10})
    assert.are.same({{3, 4}, {0, 0}, {11, 12}}, t:totable())
    t:index_add_(1, {2}, ember.tensor({{1, 1}}), -1)
    assert.are.same({{3, 4}, {-1, -1}, {11, 12}}, t:totable())
    t:index_fill_(2, {1}, 9)
    assert.are.same({{9, 4}, {9, -1}, {9, 12}}, t:totable())
    assert.are.same({{0, 0}, {7, 7}}, ember.zeros(2, 2):index_fill(1, 2, 7):totable())
    raises(function() t:index_add_(1, {3}, 5) end, 'index_add_: expected a tensor for argument 3, got number')
    raises(function() t:index_fill_(3, {1}, 0) end, 'index_fill_: dim 3 out of range for a 2-d tensor')
  end)

  it('index_add_ of whole rows (split between threads by columns) matches adding them one by one', function()
    -- 300 rows of [5, 41] (205 values, not a multiple of the 64-column blocks) into 7 rows,
    -- indices repeating, on 1 and 2 threads; a transposed target takes the element-wise path
    local threads = ember.get_num_threads()
    for _, dt in ipairs { 'float32', 'float64' } do
      for _, th in ipairs { 1, 2 } do
        ember.set_num_threads(th)
        local src = ember.randn({ 300, 5, 41 }, { dtype = dt })
        local idx = ember.tensor((function() local t = {} for i = 1, 300 do t[i] = (i * 5) % 7 + 1 end return t end)(), { dtype = 'int64' })
        local got = ember.zeros({ 7, 5, 41 }, { dtype = dt }):index_add_(1, idx, src, { alpha = 0.5 })
        local want = ember.zeros({ 7, 5, 41 }, { dtype = 'float64' })
        local s64 = src:to({ dtype = 'float64' })
        for i = 1, 300 do
          local r = idx[i]:item()
          want[r]:add_(s64[i] * 0.5)
        end
        local err = (got:to({ dtype = 'float64' }) - want):abs():max():item()
        assert(err < (dt == 'float64' and 1e-12 or 1e-4), dt .. ' on ' .. th .. ' thread(s): max error ' .. err)
        local strided = ember.zeros({ 41, 5, 7 }, { dtype = dt }):permute(3, 2, 1):index_add_(1, idx, src, { alpha = 0.5 })
        assert((strided - got):abs():max():item() < (dt == 'float64' and 1e-12 or 1e-4), dt .. ': strided target differs')
      end
    end
    ember.set_num_threads(threads)
  end)
end)

describe('masks', function()
  it('masked_fill, masked_select and nonzero', function()
    local m = m23()
    local mask = m:gt(3)
    assert.are.same({{1, 2, 3}, {0, 0, 0}}, m:masked_fill(mask, 0):totable())
    assert.are.same({{1, 2, 3}, {4, 5, 6}}, m:totable())
    m:masked_fill_(ember.tensor({true, false, true}), -1)
    assert.are.same({{-1, 2, -1}, {-1, 5, -1}}, m:totable())
    assert.are.same({4, 5, 6}, m23():masked_select(m23():gt(3)):totable())
    local nz = ember.tensor({{0, 3}, {4, 0}}):nonzero()
    assert.are.equal('int64', nz.dtype)
    assert.are.same({{1, 2}, {2, 1}}, nz:totable())
    assert.are.same({{2}, {3}}, ember.tensor({0, 1, 1}):nonzero():totable())
    raises(function() m:masked_fill_(ember.ones(2, 3), 0) end, 'masked_fill_: the mask must be bool or uint8, got float32')
    raises(function() m:masked_fill_(mask, 'x') end,
      'masked_fill_: expected a number (the fill value) for argument 2, got string')
    raises(function() local _ = m:masked_select(5) end, 'masked_select: expected a tensor for argument 1, got number')
  end)
end)
