-- internal_spec.lua: the checks ember's modules share (ember.internal), and the old names
-- that stay as deprecated aliases.
local I = require 'ember.internal'

local function error_of(f, ...)
  local ok, err = pcall(f, ...)
  assert(not ok, 'expected an error')
  return tostring(err)
end

describe('ember.internal', function()
  it('counts as an integer only a finite whole number', function()
    for _, x in ipairs { 0, 1, -3, 2 ^ 53, -2 ^ 53 } do assert.is_true(I.is_int(x), tostring(x)) end
    for _, x in ipairs { 0.5, -1.25, 0 / 0, math.huge, -math.huge } do assert.is_false(I.is_int(x), tostring(x)) end
    for _, x in ipairs { '1', true, {}, ember.ones(1) } do assert.is_false(I.is_int(x)) end
  end)

  it('refuses NaN and infinities where an integer is expected, saying what it got', function()
    assert.matches('f: n must be an integer >= 0, got nan', error_of(I.need_int, 'f', 'n', 0 / 0, 0), 1, true)
    assert.matches('f: n must be an integer >= 0, got inf', error_of(I.need_int, 'f', 'n', math.huge, 0), 1, true)
    assert.matches('f: n must be an integer, got %-inf', error_of(I.need_int, 'f', 'n', -math.huge))
    assert.matches('f: expected an integer for argument 2, got number',
      error_of(I.need_integer, 'f', math.huge, 2), 1, true)
    assert.equal(3, I.need_int('f', 'n', 3, 1))
  end)

  it('names unknown options and the ones it accepts', function()
    local set = I.option_set('dtype', 'device')
    assert.matches("f: unknown option 'dtpye' (expected dtype, device)",
      error_of(I.check_opts, 'f', { dtpye = 1 }, set), 1, true)
    assert.matches("f: unknown option 'c' (expected a, b)", error_of(I.check_opts, 'f', { c = 1 }, { b = true, a = true }),
      1, true)
    assert.matches('f: expected an options table for argument 2, got number', error_of(I.check_opts, 'f', 3, set, 2),
      1, true)
    local empty = I.check_opts('f', nil, set)
    assert.is_nil(next(empty))
    assert.has_error(function() empty.x = 1 end)
  end)

  it('raises the runtime message of a failed call, with or without a position', function()
    local C = ember.C
    local bad = C.em_dtype_from_name('float33', ember.ffi.new('em_dtype[1]'))
    assert.is_true(bad ~= 0)
    local err = error_of(I.check, bad)
    assert.matches('float33', err, 1, true)
    assert.matches('internal_spec.lua:%d+:', err)
    local bare = error_of(I.check, bad, 0)
    assert.is_nil(bare:match('^[^:]*%.lua:%d+:'))
    assert.equal(0, I.check(0))
  end)
end)

describe('deprecated names', function()
  it('data.Loader is data.ReaderLoader', function()
    assert.equal(ember.data.ReaderLoader, ember.data.Loader)
    assert.equal(ember.data.ReaderLoader_class, ember.data.Loader_class)
  end)
end)

describe('ember.util.cli', function()
  local cli = require 'ember.util.cli'
  local function args(...) local a = { ... }; a[0] = 'demo.lua'; return a end
  local defaults = { epochs = 10, lr = 0.05, dir = 'runs/x', resume = false, top_k = 0 }

  it('reads --key value by the type of each default, flags, dashes or underscores', function()
    local o = cli.options(args('--epochs', '3', '--lr', '1e-3', '--resume', '--dir', 'out', '--top-k', '5'), defaults)
    assert.are.same({ 3, 0.001, true, 'out', 5 }, { o.epochs, o.lr, o.resume, o.dir, o.top_k })
    local d = cli.options(args('--top_k', '2'), defaults)
    assert.are.same({ 10, false, 'runs/x', 2 }, { d.epochs, d.resume, d.dir, d.top_k })
  end)

  it('names the option or argument it cannot take', function()
    assert.matches('unknown option --epoch (options: see demo.lua)',
      error_of(cli.options, args('--epoch', '3'), defaults), 1, true)
    assert.matches('--epochs needs a number, got three', error_of(cli.options, args('--epochs', 'three'), defaults), 1,
      true)
    assert.matches('--dir needs a value', error_of(cli.options, args('--dir'), defaults), 1, true)
    assert.matches('unexpected argument extra', error_of(cli.options, args('extra'), defaults), 1, true)
  end)

  it('takes one positional argument when asked, and says the usage without it', function()
    local o = cli.options(args('ckpt', '--epochs', '2'), defaults, { positional = 'CHECKPOINT' })
    assert.are.same({ 'ckpt', 2 }, { o[1], o.epochs })
    assert.matches('usage: ember demo.lua CHECKPOINT', error_of(cli.options, args(), defaults,
      { positional = 'CHECKPOINT' }), 1, true)
    assert.matches('unexpected argument b', error_of(cli.options, args('a', 'b'), defaults,
      { positional = 'CHECKPOINT' }), 1, true)
  end)
end)
