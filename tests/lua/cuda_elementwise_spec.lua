-- The elementwise and random ops on 'cuda' against the CPU backend: every binary, scalar
-- and unary op on every dtype the CPU takes, for contiguous, transposed, misaligned
-- (offset by one element), broadcast, 0-d, empty and large (10M) operands; where, clamp,
-- add with alpha, ReLU's backward, fill, arange; and the random fills, which must equal
-- the CPU's bit for bit. Runs only where ember.cuda.is_available(); elsewhere it is pending.
--
-- Results must be equal (NaN equal to NaN) except for the transcendental functions and
-- float pow, where the two backends' libms may differ in the last bits: those are
-- compared within a few ulp.
local cuda_ok = ember.cuda ~= nil and type(ember.cuda.is_available) == 'function' and ember.cuda.is_available()

if not cuda_ok then
  describe('cuda elementwise and random ops', function()
    pending('no usable CUDA device (ember.cuda.is_available() is false)')
  end)
  return
end

local N = 1031           -- not a multiple of any vector width: the vector path's tail runs
local LARGE = 10000000   -- large enough for many blocks per SM, small enough for CI

-- ---------------------------------------------------------------- comparisons
local DC = dofile(debug.getinfo(1, 'S').source:match('^@(.*[/\\])') .. 'device_compare.lua')
local strip, check_equal, check_close = DC.strip, DC.check_equal, DC.check_close

-- Runs f on the CPU operands and on their cuda twins: the same error, or results that
-- agree (exactly, or within tol = {rtol, atol}).
local function agree(what, f, cpu_args, gpu_args, tol)
  local ok_c, rc = pcall(f, unpack(cpu_args))
  local ok_g, rg = pcall(f, unpack(gpu_args))
  if not ok_c then
    assert(not ok_g, what .. ': the cpu failed (' .. strip(rc) .. ') but cuda did not')
    assert.are.equal(strip(rc), strip(rg))
    return
  end
  assert(ok_g, what .. ': cuda failed: ' .. strip(rg))
  if tol then check_close(what, rc, rg, tol[1], tol[2]) else check_equal(what, rc, rg) end
end

local function cuda(t) return t:to('cuda') end

-- ---------------------------------------------------------------- operands
local DTYPES = { 'float32', 'float64', 'int32', 'int64', 'uint8', 'bool' }

-- n values of dtype on the CPU, with the awkward ones first: signed zeros, infinities,
-- NaN, halves (rounding), subnormals and huge values for floats; extremes for integers.
local SPECIAL = {
  float = { 0, -0.0, 1 / 0, -1 / 0, 0 / 0, 1, -1, 0.5, 1.5, 2.5, -2.5, 1e-40, -1e-40, 3e38, -3e38, 1e-7, 88.5, -88.5, 10.5 },
  int32 = { 0, 1, -1, 2147483647, -2147483648, 7, -7, 2 },
  int64 = { 0, 1, -1, 2 ^ 62, -2 ^ 62, -2 ^ 63, 7, -7, 2 },
  uint8 = { 0, 1, 255, 128, 2, 7 },
  bool = { 0, 1, 1, 0 },
}
local function values(dtype, n, seed, opts)
  opts = opts or {}
  ember.manual_seed(seed)
  local body
  if dtype == 'float32' or dtype == 'float64' then
    body = ember.randn(n, { dtype = 'float64' }):mul(opts.scale or 4)
  elseif dtype == 'int32' then
    body = ember.randint(opts.low or -1000, opts.high or 1000, { n }, { dtype = 'int64' })
  elseif dtype == 'int64' then
    body = ember.randint(opts.low or -2 ^ 40, opts.high or 2 ^ 40, { n }, { dtype = 'int64' })
  elseif dtype == 'uint8' then
    body = ember.randint(opts.low or 0, opts.high or 256, { n }, { dtype = 'int64' })
  else
    body = ember.randint(0, 2, { n }, { dtype = 'int64' })
  end
  local kind = (dtype == 'float32' or dtype == 'float64') and 'float' or dtype
  if opts.plain or n < 32 then return body:to(dtype) end
  local special = ember.tensor(SPECIAL[kind], { dtype = kind == 'float' and 'float64' or 'int64' })
  return ember.cat({ special, body:narrow(1, 1, n - special:numel()) }):to(dtype)
end

-- Layouts: each takes a base tensor of `need` elements (on either device) and gives the
-- operand view, so that the CPU and cuda operands have the same strides.
local LAYOUTS = {
  { name = 'contiguous', need = N, a = function(x) return x end, b = function(y) return y end },
  { name = 'transposed', need = 37 * 29,
    a = function(x) return x:view(37, 29):t() end, b = function(y) return y:view(29, 37) end },
  { name = 'offset by one element', need = N + 1,
    a = function(x) return x:narrow(1, 2, N) end, b = function(y) return y:narrow(1, 1, N) end },
  { name = 'broadcast column and row', need = 37 * 29,
    a = function(x) return x:narrow(1, 1, 37):view(37, 1) end, b = function(y) return y:narrow(1, 1, 29):view(1, 29) end },
  { name = 'broadcast row', need = 37 * 29,
    a = function(x) return x:view(37, 29) end, b = function(y) return y:narrow(1, 1, 29) end },
  { name = '0-d with 1-d', need = 16,
    a = function(x) return x end, b = function(y) return y:narrow(1, 3, 1):view() end },
  { name = '0-d', need = 16,
    a = function(x) return x:narrow(1, 5, 1):view() end, b = function(y) return y:narrow(1, 6, 1):view() end },
  { name = 'empty', need = 16,
    a = function(x) return x:narrow(1, 1, 0) end, b = function(y) return y:narrow(1, 2, 0) end },
}

-- ---------------------------------------------------------------- binary
local BINOPS = { 'add', 'sub', 'mul', 'div', 'pow', 'maximum', 'minimum', 'fmod', 'eq', 'ne', 'lt', 'le', 'gt', 'ge',
  'logical_and', 'logical_or', 'logical_xor' }
local INEXACT_BINARY = { pow = true }
-- {rtol, atol}: a few ulp of the result, and of the subnormal range (float32 1e-37).
-- float64 GELU is x/2 (1 + erf(x/sqrt2)) on the cpu: for x below -5, 1 + erf cancels, so
-- one ulp of erf is an absolute error of about |x| 1e-16 there.
local function tol_for(dtype, inexact, name)
  if not inexact then return nil end
  if dtype == 'float64' then return { 1e-13, name == 'gelu' and 1e-14 or 1e-300 } end
  return { 4e-6, 1e-37 }
end

-- Right-hand operands: integer pow takes small non-negative exponents and integer fmod
-- nonzero divisors (the refusals have their own test).
local function rhs_values(name, dtype, n, seed)
  local int = dtype ~= 'float32' and dtype ~= 'float64'
  if int and name == 'pow' then return values(dtype, n, seed, { low = 0, high = 9, plain = true }) end
  if int and name == 'fmod' then
    local v = values(dtype, n, seed, { plain = true, low = 1, high = 50 })
    return dtype == 'uint8' and v or v:mul(values(dtype, n, seed + 1, { plain = true, low = 0, high = 2 }):mul(2):sub(1))
  end
  return values(dtype, n, seed)
end

describe('cuda binary ops', function()
  for _, layout in ipairs(LAYOUTS) do
    it('agree with the cpu on ' .. layout.name .. ' operands, every op and dtype', function()
      for _, dtype in ipairs(DTYPES) do
        for k, name in ipairs(BINOPS) do
          local x = values(dtype, layout.need, 100 + k)
          local y = rhs_values(name, dtype, layout.need, 200 + k)
          local xg, yg = cuda(x), cuda(y)
          agree(string.format('%s(%s, %s)', name, dtype, layout.name), function(a, b) return a[name](a, b) end,
            { layout.a(x), layout.b(y) }, { layout.a(xg), layout.b(yg) }, tol_for(dtype, INEXACT_BINARY[name]))
        end
      end
    end)
  end

  it('agree in place (out is the first input)', function()
    for _, dtype in ipairs({ 'float32', 'int64', 'uint8' }) do
      for _, name in ipairs({ 'add_', 'sub_', 'mul_', 'maximum_', 'minimum_' }) do
        local x, y = values(dtype, N, 1), values(dtype, N, 2)
        local xg = cuda(x)
        x[name](x, y)
        xg[name](xg, cuda(y))
        check_equal(name .. ' ' .. dtype, x, xg)
      end
    end
    -- a transposed input overlapping the output: the core copies it first
    local m = values('float32', 64 * 64, 3):view(64, 64)
    local mg = cuda(m)
    m:add_(m:t())
    mg:add_(mg:t())
    check_equal('add_(t())', m, mg)
  end)

  it('agree on large broadcast operands', function()
    local x = ember.randn(LARGE / 1000, 1000)
    local row = ember.randn(1000)
    local xg, rowg = cuda(x), cuda(row)
    for _, name in ipairs({ 'add', 'mul', 'div', 'maximum', 'gt' }) do
      check_equal(name .. ' large', x[name](x, row), xg[name](xg, rowg))
    end
    check_equal('sub large contiguous', x:sub(x:mul(0.5)), xg:sub(xg:mul(0.5)))
  end)

  it('refuse integer negative powers and zero divisors as the cpu does', function()
    for _, dtype in ipairs({ 'int32', 'int64', 'uint8' }) do
      local a = ember.tensor({ 2, 3, 4 }, { dtype = dtype })
      local exps = ember.tensor({ 1, dtype == 'uint8' and 2 or -1, 2 }, { dtype = dtype })
      local divs = ember.tensor({ 1, 0, 3 }, { dtype = dtype })
      agree('pow ' .. dtype, function(p, q) return p:pow(q) end, { a, exps }, { cuda(a), cuda(exps) })
      agree('fmod ' .. dtype, function(p, q) return p:fmod(q) end, { a, divs }, { cuda(a), cuda(divs) })
      agree('scalar fmod tensor ' .. dtype, function(q) return ember.fmod(5, q) end, { divs }, { cuda(divs) })
      agree('tensor fmod 0 ' .. dtype, function(p) return p:fmod(0) end, { a }, { cuda(a) })
    end
    local e = ember.tensor({ 1, -2 }, { dtype = 'int64' })
    agree('scalar pow tensor', function(q) return ember.pow(2, q) end, { e }, { cuda(e) })
    -- the error really comes: not just equal on both sides
    assert.has_error(function() local _ = cuda(ember.tensor({ 2 }, { dtype = 'int32' })):pow(cuda(ember.tensor({ -1 }, { dtype = 'int32' }))) end)
    assert.has_error(function() local _ = cuda(ember.tensor({ 2 }, { dtype = 'int64' })):fmod(cuda(ember.tensor({ 0 }, { dtype = 'int64' }))) end)
  end)
end)

-- ---------------------------------------------------------------- tensor op scalar
describe('cuda binary ops with a number', function()
  local SCALARS = { 2, 0.5, -1, 1, 3, 0, -2.5, 1e10 }
  it('agree with the cpu on both sides of every op, every dtype', function()
    for _, dtype in ipairs(DTYPES) do
      local x = values(dtype, N, 7)
      local views = { { 'contiguous', x }, { 'transposed', values(dtype, 37 * 29, 8):view(37, 29) } }
      for _, v in ipairs(views) do
        local c = v[2]
        local g = cuda(c)
        if v[1] == 'transposed' then c, g = c:t(), g:t() end
        for _, name in ipairs(BINOPS) do
          for _, s in ipairs(SCALARS) do
            local tol = tol_for(dtype, INEXACT_BINARY[name] and not (s == 2 or s == 0.5 or s == -1 or s == 1))
            local what = string.format('%s(%s %s, %g)', name, dtype, v[1], s)
            agree(what, function(a) return a[name](a, s) end, { c }, { g }, tol)
            agree('reversed ' .. what, function(a) return ember[name](s, a) end, { c }, { g },
              tol_for(dtype, INEXACT_BINARY[name]))
          end
        end
      end
    end
  end)

  it('agree on 0-d and empty tensors', function()
    for _, dtype in ipairs(DTYPES) do
      for _, t in ipairs({ values(dtype, 4, 9):narrow(1, 2, 1):view(), values(dtype, 4, 9):narrow(1, 1, 0) }) do
        for _, name in ipairs(BINOPS) do
          agree(name .. ' ' .. dtype .. ' small', function(a) return a[name](a, 3) end, { t }, { cuda(t) })
        end
      end
    end
  end)
end)

-- ---------------------------------------------------------------- unary
local UNOPS = { 'neg', 'abs', 'exp', 'log', 'sqrt', 'sin', 'cos', 'tanh', 'sigmoid', 'relu', 'sign', 'floor', 'ceil',
  'round', 'reciprocal', 'square', 'rsqrt', 'log1p', 'expm1', 'erf', 'gelu', 'silu', 'logical_not' }
-- Results of these come from each backend's own libm or polynomials.
local INEXACT_UNARY = { exp = true, log = true, sin = true, cos = true, tanh = true, sigmoid = true, log1p = true,
  expm1 = true, erf = true, gelu = true, silu = true }

describe('cuda unary ops', function()
  it('agree with the cpu on every op and dtype, contiguous, strided, misaligned, 0-d and empty', function()
    for _, dtype in ipairs(DTYPES) do
      local base = values(dtype, 37 * 29 + 1, 11)
      local shapes = {
        { 'contiguous', function(t) return t end },
        { 'transposed', function(t) return t:narrow(1, 1, 37 * 29):view(37, 29):t() end },
        { 'offset by one element', function(t) return t:narrow(1, 2, 37 * 29) end },
        { '0-d', function(t) return t:narrow(1, 3, 1):view() end },
        { 'empty', function(t) return t:narrow(1, 1, 0) end },
      }
      local g = cuda(base)
      for _, s in ipairs(shapes) do
        for _, name in ipairs(UNOPS) do
          -- real functions of integers run in float32 (the core converts); tolerances follow
          local fdt = (dtype == 'float64') and 'float64' or 'float32'
          agree(string.format('%s(%s %s)', name, dtype, s[1]), function(a) return a[name](a) end, { s[2](base) },
            { s[2](g) }, tol_for(fdt, INEXACT_UNARY[name], name))
        end
      end
    end
  end)

  it('round halves to even and keep the sign rules of the cpu', function()
    local x = ember.tensor({ 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0 / 0, -0.0 })
    check_equal('round', x:round(), cuda(x):round())
    check_equal('sign', x:sign(), cuda(x):sign())
    check_equal('relu', x:relu(), cuda(x):relu())
    -- neg is 0 - x on the cpu: neg(-0) is +0; 1 / the result shows the sign of a zero
    local z = ember.tensor({ 0.0, -0.0 })
    check_equal('neg of zeros', z:neg():reciprocal(), cuda(z):neg():reciprocal())
  end)

  it('agree on a large tensor', function()
    local x = ember.randn(LARGE)
    local g = cuda(x)
    for _, name in ipairs({ 'exp', 'tanh', 'gelu', 'sigmoid' }) do
      check_close(name .. ' large', x[name](x), g[name](g), 4e-6, 1e-37)
    end
    check_equal('relu large', x:relu(), g:relu())
    check_equal('sqrt large', x:abs():sqrt(), g:abs():sqrt())
  end)
end)

-- ---------------------------------------------------------------- where, clamp, add with alpha
describe('cuda where, clamp and add with alpha', function()
  it('where agrees on every dtype (float16 and bfloat16 too: it moves bytes)', function()
    for _, dtype in ipairs({ 'float32', 'float64', 'int32', 'int64', 'uint8', 'bool', 'float16', 'bfloat16' }) do
      local src = dtype:match('16') and 'float32' or dtype
      local a, b = values(src, 37 * 29, 21):to(dtype):view(37, 29), values(src, 37 * 29, 22):to(dtype):view(37, 29)
      local cond = ember.randn(37, 29):gt(0)
      local ag, bg, cg = cuda(a), cuda(b), cuda(cond)
      check_equal('where ' .. dtype, ember.where(cond, a, b), ember.where(cg, ag, bg))
      check_equal('where transposed ' .. dtype, ember.where(cond:t(), a:t(), b:t()), ember.where(cg:t(), ag:t(), bg:t()))
      local col, row = cond:narrow(2, 1, 1), b:narrow(1, 1, 1)
      check_equal('where broadcast ' .. dtype, ember.where(col, a, row), ember.where(cuda(col), ag, cuda(row)))
      check_equal('where 0-d ' .. dtype, ember.where(cond, a, b:narrow(1, 1, 1):narrow(2, 1, 1):view()),
        ember.where(cg, ag, cuda(b:narrow(1, 1, 1):narrow(2, 1, 1):view())))
    end
    local bytes = ember.randint(0, 4, { 100 }, { dtype = 'uint8' })
    local a, b = ember.randn(100), ember.randn(100)
    check_equal('where on a uint8 condition', ember.where(bytes, a, b), ember.where(cuda(bytes), cuda(a), cuda(b)))
    local big_c, big_a = ember.randn(LARGE):gt(0), ember.randn(LARGE)
    check_equal('where large', ember.where(big_c, big_a, 0), ember.where(cuda(big_c), cuda(big_a), 0))
  end)

  it('clamp agrees on every dtype and bound', function()
    local BOUNDS = { { nil, 0.5 }, { -3, 3 }, { 3, -3 }, { 0, nil }, { -1e300, 1e300 }, { 10, 200 }, { -5, 5 } }
    for _, dtype in ipairs(DTYPES) do
      local x = values(dtype, N, 31)
      local xt = values(dtype, 37 * 29, 32):view(37, 29)
      for _, bnd in ipairs(BOUNDS) do
        local lo, hi = bnd[1], bnd[2]
        local what = string.format('clamp(%s, %s, %s)', dtype, tostring(lo), tostring(hi))
        agree(what, function(a) return a:clamp(lo, hi) end, { x }, { cuda(x) })
        agree(what .. ' transposed', function(a) return a:t():clamp(lo, hi) end, { xt }, { cuda(xt) })
      end
    end
  end)

  it('add and sub with alpha agree (one rounding on floats, wrap-around on integers)', function()
    for _, dtype in ipairs(DTYPES) do
      for _, alpha in ipairs({ 2, -3, 0.25 }) do
        local x, y = values(dtype, N, 41), values(dtype, N, 42)
        local what = string.format('add(%s, alpha %g)', dtype, alpha)
        agree(what, function(a, b) return a:add(b, alpha) end, { x, y }, { cuda(x), cuda(y) })
        agree('sub ' .. what, function(a, b) return a:sub(b, alpha) end, { x, y }, { cuda(x), cuda(y) })
        local m, row = values(dtype, 37 * 29, 43):view(37, 29), values(dtype, 29, 44)
        agree('broadcast ' .. what, function(a, b) return a:t():add(b:view(29, 1), alpha) end, { m, row },
          { cuda(m), cuda(row) })
        local xi, xg = x:clone(), cuda(x)
        local ok = pcall(function() xi:add_(y, alpha) end)
        if ok then
          xg:add_(cuda(y), alpha)
          check_equal('add_ ' .. what, xi, xg)
        end
      end
    end
  end)

  it("ReLU's backward agrees", function()
    for _, dtype in ipairs({ 'float32', 'float64' }) do
      local x = values(dtype, N, 51)
      local gy = values(dtype, N, 52)
      local xc = x:clone():requires_grad_()
      local xg = cuda(x):requires_grad_()
      xc:relu():backward(gy)
      xg:relu():backward(cuda(gy))
      check_equal('relu backward ' .. dtype, xc.grad, xg.grad)
    end
  end)
end)

-- ---------------------------------------------------------------- fill, arange
describe('cuda fill and arange', function()
  it('fill agrees on every dtype, including strided views', function()
    for _, dtype in ipairs({ 'float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8', 'bool' }) do
      for _, v in ipairs({ 0, 1, -1, 2.5, 1e-8, 65504, 1e30, 0 / 0, -0.0, 300 }) do
        local int = not dtype:match('float')
        if not (int and (v ~= math.floor(v) or v ~= v or math.abs(v) > 1e18)) then
          local c = ember.full({ 37, 29 }, v, { dtype = dtype })
          local g = ember.full({ 37, 29 }, v, { dtype = dtype, device = 'cuda' })
          check_equal(string.format('full(%s, %g)', dtype, v), c, g)
          c:t():narrow(1, 3, 5):fill_(7)
          g:t():narrow(1, 3, 5):fill_(7)
          check_equal('fill_ of a strided view ' .. dtype, c, g)
        end
      end
    end
    check_equal('eye', ember.eye(37, 29), ember.eye(37, 29, { device = 'cuda' }))
    check_equal('zeros large', ember.zeros(LARGE), ember.zeros(LARGE, { device = 'cuda' }))
    check_equal('full empty', ember.full({ 0, 3 }, 1), ember.full({ 0, 3 }, 1, { device = 'cuda' }))
  end)

  it('arange agrees on every dtype', function()
    local RANGES = { { 0, 10, 1 }, { 0.1, 7.3, 0.3 }, { -5, 5, 0.001 }, { 1e6, 0, -7.5 }, { 0, 2, 1 } }
    for _, dtype in ipairs({ 'float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8' }) do
      for _, r in ipairs(RANGES) do
        local int = not dtype:match('float')
        if not (int and (r[2] > 255 or r[1] > 255 or r[3] ~= math.floor(r[3]))) then
          local what = string.format('arange(%g, %g, %g, %s)', r[1], r[2], r[3], dtype)
          check_equal(what, ember.arange(r[1], r[2], r[3], { dtype = dtype }),
            ember.arange(r[1], r[2], r[3], { dtype = dtype, device = 'cuda' }))
        end
      end
    end
    check_equal('arange large', ember.arange(LARGE, { dtype = 'float64' }),
      ember.arange(LARGE, { dtype = 'float64', device = 'cuda' }))
  end)
end)

-- ---------------------------------------------------------------- random
-- The same fill on both devices from the same generator state.
local function both(seed, make)
  ember.manual_seed(seed)
  local c = make('cpu')
  local after_cpu = ember.get_rng_state().offset
  ember.manual_seed(seed)
  local g = make('cuda')
  assert.are.equal(tostring(after_cpu), tostring(ember.get_rng_state().offset))
  return c, g
end

describe('cuda random fills', function()
  it('uniform equals the cpu bit for bit (float32 and float64, odd and large sizes, any bounds)', function()
    for _, dtype in ipairs({ 'float32', 'float64' }) do
      for _, n in ipairs({ 1, 2, 3, N, LARGE + 1 }) do
        for _, r in ipairs({ { 0, 1 }, { -3, 7.5 }, { 0.1, 0.1 + 1e-12 }, { 2, 2 } }) do
          local c, g = both(n, function(dev)
            return ember.empty(n, { dtype = dtype, device = dev }):uniform_(r[1], r[2])
          end)
          check_equal(string.format('uniform(%g, %g) %s n=%d', r[1], r[2], dtype, n), c, g)
        end
      end
    end
    local c, g = both(5, function(dev) return ember.rand(1000, { device = dev }) end)
    check_equal('rand', c, g)
  end)

  it('fills strided views in logical order like the cpu', function()
    local c, g = both(6, function(dev)
      local t = ember.empty(37, 29, { device = dev })
      t:t():uniform_()
      return t
    end)
    check_equal('uniform into a transposed view', c, g)
    c, g = both(7, function(dev)
      local t = ember.zeros(10, 20, { dtype = 'int64', device = dev })
      t:narrow(2, 3, 7):random_(-50, 50)
      return t
    end)
    check_equal('randint into a narrowed view', c, g)
  end)

  it('randint equals the cpu over every dtype and the whole int64 range', function()
    local CASES = { { 'int64', -2 ^ 63, 2 ^ 62 }, { 'int64', -5, 3 }, { 'int32', -2 ^ 31, 2 ^ 31 - 1 },
      { 'uint8', 0, 256 }, { 'bool', 0, 2 }, { 'float32', -2 ^ 24, 2 ^ 24 }, { 'float64', -100, 100 } }
    for k, cs in ipairs(CASES) do
      local c, g = both(10 + k, function(dev)
        return ember.randint(cs[2], cs[3], { N }, { dtype = cs[1], device = dev })
      end)
      check_equal(string.format('randint(%g, %g) %s', cs[2], cs[3], cs[1]), c, g)
    end
    local c, g = both(20, function(dev) return ember.randint(-2 ^ 62, 2 ^ 62, { LARGE }, { device = dev }) end)
    check_equal('randint large', c, g)
  end)

  it('bernoulli equals the cpu', function()
    for _, dtype in ipairs({ 'float32', 'float64', 'int32', 'uint8', 'bool' }) do
      for _, p in ipairs({ 0, 0.3, 1 }) do
        local c, g = both(30, function(dev) return ember.empty(N, { dtype = dtype, device = dev }):bernoulli_(p) end)
        check_equal(string.format('bernoulli(%g) %s', p, dtype), c, g)
      end
    end
  end)

  it('randperm equals the cpu', function()
    for _, dtype in ipairs({ 'int64', 'int32', 'float32', 'float64' }) do
      for _, n in ipairs({ 0, 1, 2, 1001, 100000 }) do
        local c, g = both(40 + n, function(dev) return ember.randperm(n, { dtype = dtype, device = dev }) end)
        check_equal(string.format('randperm(%d) %s', n, dtype), c, g)
      end
    end
  end)

  it('normal equals the cpu bit for bit (float32 and float64, odd sizes)', function()
    for _, dtype in ipairs({ 'float32', 'float64' }) do
      for _, n in ipairs({ 1, 3, N, LARGE + 1 }) do
        local c, g = both(50 + n, function(dev) return ember.empty(n, { dtype = dtype, device = dev }):normal_(3, 2) end)
        check_equal(string.format('normal %s n=%d', dtype, n), c, g)
      end
    end
  end)

end)
