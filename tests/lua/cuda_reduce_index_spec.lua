-- Reductions, scans, softmax, sort and indexing on 'cuda' against the CPU backend: every
-- op over every dtype the CPU takes, for contiguous, transposed (non-contiguous), 0-d and
-- empty operands, reductions over non-last dims, NaN / infinities / signed zeros, ties
-- (max/argmax positions, stable sort), large shapes (one row of 10M, 100k rows of 7,
-- [5M, 2] down its long dim), and out-of-range indices (the same error text as the CPU,
-- the target left unchanged). Runs only where ember.cuda.is_available(); elsewhere it is
-- pending.
--
-- Exact equality for everything that does not round (integers, max/min, positions, sort,
-- indexing, any/all, and scatter_add / index_add, which apply contributions in the CPU's
-- order); float sums, norms, variances, logsumexp, softmax and float scans within a few ulp.
local cuda_ok = ember.cuda ~= nil and type(ember.cuda.is_available) == 'function' and ember.cuda.is_available()

if not cuda_ok then
  describe('cuda reductions, scans, softmax, sort and indexing', function()
    pending('no usable CUDA device (ember.cuda.is_available() is false)')
  end)
  return
end

local LARGE = 10000000

-- ---------------------------------------------------------------- comparisons
local DC = dofile(debug.getinfo(1, 'S').source:match('^@(.*[/\\])') .. 'device_compare.lua')
local strip, check_equal, check_close = DC.strip, DC.check_equal, DC.check_close


local function tol_of(t)
  if t.dtype == 'float32' then return { 4e-6, 1e-6 } end
  if t.dtype == 'float64' then return { 1e-12, 1e-12 } end
  return nil -- exact
end

-- f on the CPU operands and on their cuda twins: the same error, or results that agree.
-- f returns a tensor or a list of tensors; inexact: compare floats within tol_of's
-- tolerance, or within {rtol, atol} for float32 when it is a table.
local function agree(what, f, cpu_args, gpu_args, inexact)
  local ok_c, rc = pcall(function() return { f(unpack(cpu_args)) } end)
  local ok_g, rg = pcall(function() return { f(unpack(gpu_args)) } end)
  if not ok_c then
    assert(not ok_g, what .. ': the cpu failed (' .. strip(rc) .. ') but cuda did not')
    assert.are.equal(strip(rc), strip(rg))
    return
  end
  assert(ok_g, what .. ': cuda failed: ' .. strip(rg))
  assert.are.equal(#rc, #rg)
  for i = 1, #rc do
    local tol = inexact and tol_of(rc[i])
    if type(inexact) == 'table' and rc[i].dtype == 'float32' then tol = inexact end
    if tol then check_close(what, rc[i], rg[i], tol[1], tol[2]) else check_equal(what, rc[i], rg[i]) end
  end
end

local function cuda(t) return t:to('cuda') end
local function on_gpu(list)
  local out = {}
  for i, t in ipairs(list) do out[i] = ember.is_tensor(t) and cuda(t) or t end
  return out
end

-- ---------------------------------------------------------------- operands
local DTYPES = { 'float32', 'float64', 'int32', 'int64', 'uint8', 'bool' }
local SPECIAL = { 0, -0.0, 1 / 0, -1 / 0, 0 / 0, 1, -1, 0.5, 3e38, -3e38, 1e-40 }

-- n values of dtype: floats are randn * 4 (specials first unless plain), integers are
-- drawn from [low, high) (ties are common with a small range).
local function values(dtype, n, seed, opts)
  opts = opts or {}
  ember.manual_seed(seed)
  local body
  if dtype == 'float32' or dtype == 'float64' or dtype == 'float16' then
    body = ember.randn(n, { dtype = 'float64' }):mul(opts.scale or 4)
    if opts.ties then body = body:mul(0.25):floor() end
  elseif dtype == 'bool' then
    body = ember.randint(0, 2, { n }, { dtype = 'int64' })
  else
    local lo = opts.low or (dtype == 'uint8' and 0 or -1000)
    body = ember.randint(lo, opts.high or (dtype == 'uint8' and 256 or 1000), { n }, { dtype = 'int64' })
  end
  local float = dtype == 'float32' or dtype == 'float64'
  if float and not opts.plain and n >= 2 * #SPECIAL then
    body = ember.cat({ ember.tensor(SPECIAL, { dtype = 'float64' }), body:narrow(1, 1, n - #SPECIAL) })
  end
  return body:to(dtype)
end

-- Layouts of a [37, 29] operand (and its cuda twin with the same strides).
local LAYOUTS = {
  { name = 'contiguous [37, 29]', make = function(x) return x:view(37, 29) end },
  { name = 'transposed [29, 37]', make = function(x) return x:view(37, 29):t() end },
  { name = 'offset by one, [36, 29]', make = function(x) return x:view(37, 29):narrow(1, 2, 36) end },
}

-- ---------------------------------------------------------------- reductions
local REDUCERS = {
  { 'sum', function(t, d, k) return t:sum(d, k) end, true },
  { 'mean', function(t, d, k) return t:mean(d, k) end, true },
  { 'prod', function(t, d, k) return t:prod(d, k) end, true },
  { 'amax', function(t, d, k) return t:amax(d, k) end },
  { 'amin', function(t, d, k) return t:amin(d, k) end },
  { 'logsumexp', function(t, d, k) return t:logsumexp(d, k) end, true },
  { 'any', function(t, d, k) return t:any(d, k) end },
  { 'all', function(t, d, k) return t:all(d, k) end },
  { 'norm 2', function(t, d, k) return t:norm(2, d, k) end, true },
  { 'norm 1', function(t, d, k) return t:norm(1, d, k) end, true },
  { 'norm inf', function(t, d, k) return t:norm('inf', d, k) end, true },
  { 'norm -inf', function(t, d, k) return t:norm('-inf', d, k) end, true },
  { 'norm 0', function(t, d, k) return t:norm(0, d, k) end, true },
  { 'norm 3', function(t, d, k) return t:norm(3, d, k) end, true },
  { 'var', function(t, d, k) return t:var(d, k) end, true },
  { 'std correction 0', function(t, d, k) return t:std(d, k, { correction = 0 }) end, true },
  { 'var correction 2', function(t, d, k) return t:var(d, k, { correction = 2 }) end, true },
}
local DIMS = { { 'all dims', nil }, { 'dim 1', 1 }, { 'dim 2', 2 }, { 'dims {1, 2}', { 1, 2 } } }

describe('cuda reductions', function()
  for _, layout in ipairs(LAYOUTS) do
    it('agree with the cpu on ' .. layout.name .. ' operands, every op, dtype and dim', function()
      for di, dtype in ipairs(DTYPES) do
        local x = values(dtype, 37 * 29, 10 + di, { scale = dtype == 'float32' and 1 or 4 })
        local a, ag = layout.make(x), layout.make(cuda(x))
        for _, r in ipairs(REDUCERS) do
          for _, d in ipairs(DIMS) do
            local f = function(t) return r[2](t, d[2], true) end -- d[2] may be nil: not in an argument list
            agree(string.format('%s %s %s %s', r[1], dtype, layout.name, d[1]), f, { a }, { ag }, r[3])
          end
        end
        for _, dim in ipairs({ 1, 2 }) do
          agree('max with positions ' .. dtype, function(t) return t:max(dim) end, { a }, { ag })
          agree('min with positions ' .. dtype, function(t) return t:min(dim, true) end, { a }, { ag })
          agree('argmax ' .. dtype, function(t) return t:argmax(dim) end, { a }, { ag })
          agree('argmin ' .. dtype, function(t) return t:argmin(dim) end, { a }, { ag })
        end
        agree('argmax over all ' .. dtype, function(t) return t:argmax() end, { a }, { ag })
        agree('argmin over all ' .. dtype, function(t) return t:argmin() end, { a }, { ag })
      end
    end)
  end

  it('agree over non-last dims of a 3-d tensor, 0-d and empty operands', function()
    for di, dtype in ipairs(DTYPES) do
      local x = values(dtype, 4 * 5 * 6, 30 + di)
      local a = x:view(4, 5, 6)
      local ag = cuda(a)
      for _, dims in ipairs({ { 1, 3 }, { 2 }, { 1 }, { 3, 1 } }) do
        for _, r in ipairs(REDUCERS) do
          agree(r[1] .. ' ' .. dtype .. ' over dims', r[2], { a, dims, false }, { ag, dims, false }, r[3])
        end
      end
      local s, sg = x:narrow(1, 7, 1):view(), cuda(x):narrow(1, 7, 1):view() -- 0-d
      local e, eg = x:narrow(1, 1, 0):view(0, 5), cuda(x):narrow(1, 1, 0):view(0, 5)
      for _, r in ipairs(REDUCERS) do
        agree(r[1] .. ' 0-d ' .. dtype, r[2], { s }, { sg }, r[3])
        agree(r[1] .. ' 0-d dim 1 ' .. dtype, r[2], { s, 1 }, { sg, 1 }, r[3])
        agree(r[1] .. ' empty dim 1 ' .. dtype, r[2], { e, 1 }, { eg, 1 }, r[3]) -- over zero elements
        agree(r[1] .. ' empty dim 2 ' .. dtype, r[2], { e, 2 }, { eg, 2 }, r[3]) -- zero outputs
        agree(r[1] .. ' empty all ' .. dtype, r[2], { e }, { eg }, r[3])
      end
      agree('argmax 0-d ' .. dtype, function(t) return t:argmax() end, { s }, { sg })
      agree('max of empty ' .. dtype, function(t) return t:max(1) end, { e }, { eg }) -- the same error
    end
    local h = values('float32', 64, 1):to('float16')
    agree('sum float16 (refused alike)', function(t) return t:sum() end, { h }, { cuda(h) })
  end)

  it('keep the first position of ties and of NaN', function()
    for _, dtype in ipairs({ 'float32', 'float64', 'int32', 'uint8' }) do
      local x = values(dtype, 4000, 5, { ties = true, low = 0, high = 4, plain = true }):view(40, 100)
      local xg = cuda(x)
      agree('argmax ties ' .. dtype, function(t) return t:argmax(2) end, { x }, { xg })
      agree('argmin ties ' .. dtype, function(t) return t:argmin(1) end, { x }, { xg })
      agree('max ties ' .. dtype, function(t) return t:max(2) end, { x }, { xg })
    end
    local n = ember.tensor({ { 1, 0 / 0, 3, 0 / 0 }, { -1 / 0, -1 / 0, -1 / 0, -1 / 0 }, { 0, -0.0, -0.0, 0 } })
    for _, dtype in ipairs({ 'float32', 'float64' }) do
      local a = n:to(dtype)
      agree('NaN and -inf rows ' .. dtype, function(t) return t:max(2), t:argmin(2), t:logsumexp(2) end, { a },
        { cuda(a) }, true)
    end
  end)

  it('agree on large shapes: one row of 10M, 100k rows of 7, [5M, 2] down its long dim', function()
    for _, dtype in ipairs({ 'float32', 'float64', 'int64' }) do
      local x = values(dtype, LARGE, 7, { scale = 1, plain = true })
      local xg = cuda(x)
      -- the cpu adds contiguous float32 in groups of four in float first (cpu/reduce.c):
      -- an absolute error of about 1e-7 * sqrt(n), whatever the sum
      agree('sum 10M ' .. dtype, function(t) return t:sum() end, { x }, { xg }, { 4e-6, 1e-2 })
      agree('max 10M ' .. dtype, function(t) return t:max(1) end, { x }, { xg })
      agree('argmin 10M ' .. dtype, function(t) return t:argmin() end, { x }, { xg })
      agree('100k rows of 7 ' .. dtype, function(t) return t:view(-1, 7):sum(2), t:view(-1, 7):argmax(2) end,
        { x:narrow(1, 1, 700000) }, { xg:narrow(1, 1, 700000) }, true)
      agree('[5M, 2] dim 1 ' .. dtype, function(t) return t:view(-1, 2):sum(1), t:view(-1, 2):amin(1) end, { x },
        { xg }, true)
      agree('column sums of a transposed view ' .. dtype, function(t) return t:view(1000, -1):t():sum(2) end, { x },
        { xg }, true)
      if dtype ~= 'int64' then
        agree('norms 10M ' .. dtype, function(t) return t:norm(), t:norm(1), t:norm('inf'), t:norm(0.5) end, { x },
          { xg }, true)
        agree('logsumexp, mean, var 10M ' .. dtype, function(t) return t:logsumexp(), t:mean(), t:var(), t:std(1) end,
          { x }, { xg }, true)
        agree('var over dim 1 of [5M, 2] ' .. dtype, function(t) return t:view(-1, 2):var(1) end, { x }, { xg }, true)
      end
    end
  end)

  it('give the same result every time (no atomics in float sums)', function()
    local xg = cuda(values('float32', LARGE, 9, { plain = true }))
    local first = xg:sum():item()
    for _ = 1, 3 do assert.are.equal(first, xg:sum():item()) end
    local cols = xg:view(-1, 2):sum(1):totable()
    assert.are.same(cols, xg:view(-1, 2):sum(1):totable())
  end)
end)

-- ---------------------------------------------------------------- scans and softmax
describe('cuda cumsum and cumprod', function()
  it('agree on every dtype, dim and layout, 0-d and empty operands', function()
    for di, dtype in ipairs(DTYPES) do
      local x = values(dtype, 37 * 29, 50 + di, { scale = 0.05, low = -3, high = 4 })
      if dtype == 'float32' or dtype == 'float64' then x = x:add(1) end -- products near 1
      local xg = cuda(x)
      for _, layout in ipairs(LAYOUTS) do
        local a, ag = layout.make(x), layout.make(xg)
        for _, dim in ipairs({ 1, 2, -1 }) do
          agree('cumsum ' .. dtype .. ' ' .. layout.name, function(t) return t:cumsum(dim) end, { a }, { ag }, true)
          agree('cumprod ' .. dtype .. ' ' .. layout.name, function(t) return t:cumprod(dim) end, { a }, { ag }, true)
        end
      end
      local s, sg = x:narrow(1, 3, 1):view(), xg:narrow(1, 3, 1):view()
      agree('cumsum 0-d ' .. dtype, function(t) return t:cumsum(1) end, { s }, { sg }, true)
      local e, eg = x:narrow(1, 1, 0):view(0, 3), xg:narrow(1, 1, 0):view(0, 3)
      agree('cumsum empty ' .. dtype, function(t) return t:cumsum(2) end, { e }, { eg }, true)
    end
  end)

  it('agree on one row of 10M, 100k rows of 7 and down [5M, 2]', function()
    for _, dtype in ipairs({ 'float32', 'float64', 'int32' }) do
      local x = values(dtype, LARGE, 3, { plain = true, scale = 1, low = -5, high = 6 })
      local xg = cuda(x)
      agree('cumsum 10M ' .. dtype, function(t) return t:cumsum(1) end, { x }, { xg }, true)
      agree('cumsum rows of 7 ' .. dtype, function(t) return t:narrow(1, 1, 700000):view(-1, 7):cumsum(2) end, { x },
        { xg }, true)
      agree('cumsum down [5M, 2] ' .. dtype, function(t) return t:view(-1, 2):cumsum(1) end, { x }, { xg }, true)
    end
    local p = values('float64', 100000, 4, { plain = true, scale = 1e-4 }):add(1)
    agree('cumprod 100k', function(t) return t:cumprod(1) end, { p }, { cuda(p) }, true)
  end)
end)

-- Probabilities are compared relative to themselves (float32: the cpu sums exp in float
-- lanes); log-probabilities within an absolute tolerance too (log(sum) near 0).
local PROB = { 2e-5, 1e-30 }
local function both_softmax(name, t_cpu, t_gpu, dim, prepare)
  prepare = prepare or function(t) return t end
  agree('softmax ' .. name, function(t) return prepare(t):softmax(dim) end, { t_cpu }, { t_gpu }, PROB)
  agree('log_softmax ' .. name, function(t) return prepare(t):log_softmax(dim) end, { t_cpu }, { t_gpu }, true)
end

describe('cuda softmax and log_softmax', function()
  it('agree along every dim, with NaN, infinities and rows of -inf', function()
    for _, dtype in ipairs({ 'float32', 'float64' }) do
      local x = values(dtype, 4 * 5 * 6, 70)
      local a, ag = x:view(4, 5, 6), cuda(x):view(4, 5, 6)
      for _, dim in ipairs({ 1, 2, 3 }) do
        both_softmax(dtype .. ' dim ' .. dim, a, ag, dim)
        both_softmax(dtype .. ' transposed, dim ' .. dim, a, ag, dim, function(t) return t:transpose(1, 3) end)
      end
      local special = ember.tensor({ { 1, 2, 3, 4 }, { 1, 0 / 0, 3, 4 }, { -1 / 0, -1 / 0, -1 / 0, -1 / 0 },
        { -1 / 0, 0, -1 / 0, 1 }, { 1 / 0, 0, 1, 2 }, { 1e30, -1e30, 0, 1 } }, { dtype = dtype })
      both_softmax('special rows ' .. dtype, special, cuda(special), 2)
      both_softmax('special columns ' .. dtype, special, cuda(special), 1, function(t) return t:t() end)
      local s = x:narrow(1, 1, 1):view()
      both_softmax('0-d ' .. dtype, s, cuda(s), 1)
      local e = x:narrow(1, 1, 0):view(0, 4)
      both_softmax('empty ' .. dtype, e, cuda(e), 2)
    end
    local i = ember.tensor({ 1, 2, 3 })
    agree('softmax of int64 (refused alike)', function(t) return t:softmax(1) end, { i }, { cuda(i) })
  end)

  it('agree on one row of 10M, 100k rows of 7, [1000, 50] over dim 1 and [5M, 2] over dim 1', function()
    for _, dtype in ipairs({ 'float32', 'float64' }) do
      local x = values(dtype, LARGE, 11, { scale = 3, plain = true })
      local xg = cuda(x)
      both_softmax('10M ' .. dtype, x, xg, 1)
      both_softmax('rows of 7 ' .. dtype, x, xg, 2, function(t) return t:narrow(1, 1, 700000):view(-1, 7) end)
      both_softmax('[1000, 50] dim 1 ' .. dtype, x, xg, 1, function(t) return t:narrow(1, 1, 50000):view(1000, 50) end)
      both_softmax('[5M, 2] dim 1 ' .. dtype, x, xg, 1, function(t) return t:view(-1, 2) end)
    end
  end)
end)

-- ---------------------------------------------------------------- sort and topk
describe('cuda sort and topk', function()
  it('agree on every dtype, dim, direction and layout, with ties, NaN and signed zeros', function()
    for di, dtype in ipairs(DTYPES) do
      local x = values(dtype, 37 * 29, 90 + di, { ties = true, low = 0, high = 5 })
      local xg = cuda(x)
      for _, layout in ipairs(LAYOUTS) do
        local a, ag = layout.make(x), layout.make(xg)
        for _, dim in ipairs({ 1, 2 }) do
          for _, desc in ipairs({ false, true }) do
            agree(string.format('sort %s %s dim %d desc %s', dtype, layout.name, dim, tostring(desc)),
              function(t) return t:sort(dim, desc) end, { a }, { ag })
          end
          for _, k in ipairs({ 0, 1, 5, a:size(dim) }) do
            agree('topk ' .. dtype .. ' k ' .. k, function(t) return t:topk(k, dim) end, { a }, { ag })
            agree('topk smallest ' .. dtype, function(t) return t:topk(k, dim, false) end, { a }, { ag })
          end
        end
      end
      local s = x:narrow(1, 2, 1):view()
      agree('sort 0-d ' .. dtype, function(t) return t:sort(1) end, { s }, { cuda(s) })
      local e = x:narrow(1, 1, 0):view(0, 3)
      agree('sort empty ' .. dtype, function(t) return t:sort(1), t:sort(2) end, { e }, { cuda(e) })
    end
  end)

  it('agree on long rows (radix sort) and many short rows (bitonic)', function()
    for _, dtype in ipairs({ 'float32', 'float64', 'int64', 'uint8' }) do
      local x = values(dtype, LARGE, 13, { ties = true, low = 0, high = 200 })
      local xg = cuda(x)
      agree('sort 10M ' .. dtype, function(t) return t:sort(1, true) end, { x }, { xg })
      agree('topk 10M ' .. dtype, function(t) return t:topk(10) end, { x }, { xg })
      agree('sort rows of 7 ' .. dtype, function(t) return t:narrow(1, 1, 700000):view(-1, 7):sort(2) end, { x }, { xg })
      agree('sort [50, 3000] ' .. dtype, function(t) return t:narrow(1, 1, 150000):view(50, 3000):sort(2) end, { x },
        { xg })
      agree('sort columns of 2048 ' .. dtype, function(t) return t:narrow(1, 1, 2048 * 30):view(2048, 30):sort(1, true) end,
        { x }, { xg })
    end
  end)
end)

-- ---------------------------------------------------------------- indexing
local COPY_DTYPES = { 'float32', 'float64', 'float16', 'int32', 'int64', 'uint8', 'bool' }

local function positions(n, count, seed, index_dtype)
  ember.manual_seed(seed)
  return ember.randint(1, n + 1, { count }, { dtype = index_dtype })
end

describe('cuda indexing', function()
  it('index_select and gather agree on every dtype, dim, layout and index dtype', function()
    for di, dtype in ipairs(COPY_DTYPES) do
      local x = values(dtype, 37 * 29, 110 + di)
      for _, layout in ipairs(LAYOUTS) do
        local a, ag = layout.make(x), layout.make(cuda(x))
        for _, idt in ipairs({ 'int64', 'int32' }) do
          for dim = 1, 2 do
            local i = positions(a:size(dim), 50, di + dim, idt)
            agree('index_select ' .. dtype, function(t, ix) return t:index_select(dim, ix) end, { a, i }, { ag, cuda(i) })
            local gi = positions(a:size(dim), 20 * 17, di, idt):view(20, 17)
            agree('gather ' .. dtype, function(t, ix) return t:gather(dim, ix) end, { a, gi }, { ag, cuda(gi) })
            local gt = gi:t() -- a transposed index
            agree('gather, transposed index ' .. dtype, function(t, ix) return t:gather(dim, ix) end, { a, gt },
              { ag, cuda(gt) })
          end
        end
        local none = ember.tensor({}, { dtype = 'int64' })
        agree('index_select empty index ' .. dtype, function(t, ix) return t:index_select(2, ix) end, { a, none },
          { ag, cuda(none) })
      end
      local s = x:narrow(1, 4, 1):view()
      local one = ember.tensor({ 1 })
      agree('index_select 0-d ' .. dtype, function(t, ix) return t:index_select(1, ix) end, { s, one },
        { cuda(s), cuda(one) })
    end
  end)

  it('scatter, scatter_add, index_add and index_fill agree, repeated indices included', function()
    for di, dtype in ipairs(DTYPES) do
      local base = values(dtype, 37 * 29, 130 + di, { low = -50, high = 50 }):view(37, 29)
      local src = values(dtype, 37 * 29, 140 + di, { low = -50, high = 50 }):view(37, 29)
      for _, idt in ipairs({ 'int64', 'int32' }) do
        for dim = 1, 2 do
          local size = base:size(dim)
          local idx = positions(size, 20 * 17, di + dim, idt):view(20, 17) -- many repeats
          local run = function(name, f)
            local t, tg = base:clone(), cuda(base)
            agree(name .. ' ' .. dtype .. ' ' .. idt .. ' dim ' .. dim, f, { t, idx, src }, { tg, cuda(idx), cuda(src) })
          end
          run('scatter_', function(t, ix, s) return t:scatter_(dim, ix, s) end) -- the last write wins
          run('scatter_ value', function(t, ix) return t:scatter_(dim, ix, 3) end)
          run('scatter_add_', function(t, ix, s) return t:scatter_add_(dim, ix, s) end)
          run('scatter_ transposed source', function(t, ix, s) return t:scatter_(dim, ix, s:t():contiguous():t()) end)
          local i1 = positions(size, 40, 7 + dim, idt)
          local other = dim == 1 and 29 or 37
          local s1 = values(dtype, 40 * other, 150 + di, { low = -50, high = 50 })
          s1 = dim == 1 and s1:view(40, other) or s1:view(other, 40)
          local t, tg = base:clone(), cuda(base)
          agree('index_add_ ' .. dtype, function(x, ix, s) return x:index_add_(dim, ix, s, 3) end, { t, i1, s1 },
            { tg, cuda(i1), cuda(s1) })
          t, tg = base:clone(), cuda(base)
          agree('index_fill_ ' .. dtype, function(x, ix) return x:index_fill_(dim, ix, -2) end, { t, i1 },
            { tg, cuda(i1) })
        end
      end
    end
    -- a transposed target [29, 37] and a transposed source [29, 10]
    local b = values('float32', 37 * 29, 3)
    local ix = positions(37, 10, 1, 'int64')
    local src = values('float32', 10 * 29, 4)
    agree('index_add_ into a transposed target', function(t, i, s) return t:view(37, 29):t():index_add_(2, i, s) end,
      { b, ix, src:view(10, 29):t() }, { cuda(b), cuda(ix), cuda(src):view(10, 29):t() })
  end)

  it('sums through an index equal the cpu bit for bit, however many repeats', function()
    for _, dtype in ipairs({ 'float32', 'float64' }) do
      local target = ember.zeros(1000, 3, { dtype = dtype })
      local src = values(dtype, 1000000 * 3, 17, { plain = true }):view(1000000, 3)
      local ix = positions(1000, 1000000, 18, 'int64')
      agree('index_add_ 1M into 1000 ' .. dtype, function(t, i, s) return t:index_add_(1, i, s, 0.1) end,
        { target:clone(), ix, src }, { cuda(target), cuda(ix), cuda(src) })
      local few = positions(3, 90000, 19, 'int64'):view(3, 30000):t() -- a transposed index
      local s2 = src:narrow(1, 1, 30000)
      local nine = ember.zeros(3, 3, { dtype = dtype })
      agree('scatter_add_ 90000 into 9 ' .. dtype, function(t, i, s) return t:scatter_add_(1, i, s) end,
        { nine:clone(), few, s2 }, { cuda(nine), cuda(few), cuda(s2) })
    end
  end)

  it('masked_fill, masked_select, nonzero agree (broadcast masks, NaN and -0 count as they do)', function()
    for di, dtype in ipairs(COPY_DTYPES) do
      local x = values(dtype, 37 * 29, 160 + di)
      for _, layout in ipairs(LAYOUTS) do
        local a, ag = layout.make(x), layout.make(cuda(x))
        local m = values('bool', a:numel(), di):view(a.shape)
        local row = values('bool', a:size(2), di + 1):view(1, a:size(2))
        agree('masked_fill_ ' .. dtype, function(t, mk) return t:clone():masked_fill_(mk, 7) end, { a, m }, { ag, cuda(m) })
        agree('masked_fill_ row mask ' .. dtype, function(t, mk) return t:clone():masked_fill_(mk, 0) end, { a, row },
          { ag, cuda(row) })
        agree('masked_select ' .. dtype, function(t, mk) return t:masked_select(mk) end, { a, m }, { ag, cuda(m) })
        agree('masked_select row mask ' .. dtype, function(t, mk) return t:masked_select(mk) end, { a, row },
          { ag, cuda(row) })
        agree('nonzero ' .. dtype, function(t) return t:nonzero() end, { a }, { ag })
      end
      local s = x:narrow(1, 2, 1):view()
      agree('nonzero 0-d ' .. dtype, function(t) return t:nonzero() end, { s }, { cuda(s) })
      local e = x:narrow(1, 1, 0):view(0, 2)
      agree('nonzero empty ' .. dtype, function(t) return t:nonzero() end, { e }, { cuda(e) })
    end
    local big = values('float32', LARGE, 19, { plain = true }):gt(1)
    agree('nonzero 10M', function(t) return t:nonzero() end, { big }, { cuda(big) })
    local v = values('float32', LARGE, 20)
    agree('masked_select 10M', function(t, mk) return t:masked_select(mk) end, { v, big }, { cuda(v), cuda(big) })
  end)

  it('report an index out of range as the cpu does, and leave the target unchanged', function()
    local a = values('float32', 37 * 29, 200):view(37, 29)
    local ag = cuda(a)
    local function bad(list, dtype) return ember.tensor(list, { dtype = dtype or 'int64' }) end
    for _, idt in ipairs({ 'int64', 'int32' }) do
      for _, list in ipairs({ { 1, 30, 2, 31 }, { 0 }, { -3, 5 } }) do
        local i = bad(list, idt)
        agree('index_select bad', function(t, ix) return t:index_select(2, ix) end, { a, i }, { ag, cuda(i) })
        local gi = i:view(1, -1)
        agree('gather bad', function(t, ix) return t:gather(2, ix) end, { a, gi }, { ag, cuda(gi) })
        local function unchanged(name, f, ...)
          local t, tg = a:clone(), ag:clone()
          agree(name .. ' bad', f, { t, ... }, { tg, unpack(on_gpu({ ... })) })
          check_equal(name .. ' left unchanged', a, tg)
        end
        local src = values('float32', 37 * 4, 1):view(37, 4):narrow(2, 1, #list)
        unchanged('scatter_', function(t, ix, s) return t:scatter_(2, ix, s) end, gi, src)
        unchanged('scatter_add_', function(t, ix, s) return t:scatter_add_(2, ix, s) end, gi, src)
        unchanged('scatter_ value', function(t, ix) return t:scatter_(2, ix, 1) end, gi)
        unchanged('index_add_', function(t, ix, s) return t:index_add_(2, ix, s) end, i, src)
        unchanged('index_fill_', function(t, ix) return t:index_fill_(2, ix, 5) end, i)
      end
    end
    local empty = ember.zeros(3, 0)
    local i = bad({ 1 })
    agree('index_select from an empty dim', function(t, ix) return t:index_select(2, ix) end, { empty, i },
      { cuda(empty), cuda(i) })
  end)
end)
