-- The Lua half of the REPL (lua/ember/repl.lua): value formatting and completion
-- candidates. The terminal behaviour is tested by tests/repl/test_tty.py, the command line
-- by tests/repl/test_cli.py.
local repl = require 'ember.repl'

describe('ember.repl.format', function()
  local format = repl.format

  it('joins several values with tabs, nil included', function()
    assert.are.equal('', format())
    assert.are.equal('nil', format(nil))
    assert.are.equal('1\ta b\tnil\ttrue', format(1, 'a b', nil, true))
    assert.are.equal('nil\tnil', format(nil, nil))
  end)

  it('prints top-level strings as print does, quoted ones inside tables', function()
    assert.are.equal('say "hi"', format('say "hi"'))
    assert.are.equal('{"a\\n\\"b\\\\", "\\001"}', format({ 'a\n"b\\', '\1' }))
  end)

  it('prints arrays in order and other keys sorted: numbers, strings, then the rest', function()
    assert.are.equal('{}', format({}))
    assert.are.equal('{1, 2, 3}', format({ 1, 2, 3 }))
    assert.are.equal('{10, 20, [4] = 40, x = 1}', format({ 10, 20, [4] = 40, x = 1 }))
    assert.are.equal('{[1.5] = 2, a = 2, b = 1, [true] = 1}', format({ b = 1, a = 2, [1.5] = 2, [true] = 1 }))
    assert.are.equal('{["a b"] = 1, ["end"] = 2, ok_1 = 3}', format({ ['a b'] = 1, ['end'] = 2, ok_1 = 3 }))
  end)

  it('nests tables and stops at the depth limit', function()
    assert.are.equal('{a = {b = {1, {c = true}}}}', format({ a = { b = { 1, { c = true } } } }))
    assert.are.equal('{a = {b = {c = {d = {...}}}}}', format({ a = { b = { c = { d = { e = 1 } } } } }))
  end)

  it('marks cycles and prints shared (acyclic) tables in full', function()
    local t = {}
    t.self, t.list = t, { t }
    assert.are.equal('{list = {<cycle>}, self = <cycle>}', format(t))
    local s = { 1 }
    assert.are.equal('{{1}, {1}}', format({ s, s }))
  end)

  it('limits the entries shown per table and says how many were left out', function()
    local big = {}
    for i = 1, 60 do big[i] = i end
    local out = format(big)
    assert.truthy(out:find('50,\n  ... (10 more)\n}', 1, true), out)
    assert.falsy(out:find('51', 1, true))
  end)

  it('limits the entries shown in one result', function()
    local wide = {}
    for i = 1, 40 do
      wide[i] = {}
      for j = 1, 40 do wide[i][j] = j end
    end
    local out = format(wide)
    local count = select(2, out:gsub('%d+', ''))
    assert.is_true(count <= repl.max_total + 40 * 2, 'printed ' .. count .. ' numbers')
    assert.truthy(out:find('more)', 1, true))
  end)

  it('breaks a long table over lines, indented two spaces per level', function()
    local t = { name = 'a fairly long string value', list = { 'first item here', 'second item here', 'third' } }
    assert.are.equal(
      '{\n  list = {"first item here", "second item here", "third"},\n  name = "a fairly long string value"\n}',
      format(t))
    local nested = { inner = {} }
    for i = 1, 12 do nested.inner[i] = 'item' .. i end
    local out = format(nested)
    assert.truthy(out:find('^{\n  inner = {\n    "item1",\n    "item2",'), out)
    assert.truthy(out:find('"item12"\n  }\n}$'), out)
  end)

  it('uses __tostring where a table has one', function()
    local obj = setmetatable({}, { __tostring = function() return 'OBJ' end })
    assert.are.equal('OBJ', format(obj))
    assert.are.equal('{OBJ, k = OBJ}', format({ obj, k = obj }))
  end)

  it('prints tensors with tostring, and as a one-line summary inside tables', function()
    local t = ember.zeros(2, 3)
    local s = tostring(t)
    local expected = s:match('^cdata<') and '<tensor float32 [2, 3] cpu>' or s
    assert.are.equal(expected, format(t))
    assert.are.equal('{x = <tensor float32 [2, 3] cpu>}', format({ x = t }))
  end)
end)

describe('ember.repl.complete', function()
  local complete = repl.complete

  before_each(function()
    _G.__tc = { alpha = { beta = { gamma = 1, gammb = 2 } }, [1] = 5, ['not ident'] = 1 }
    _G.__tc_s = 'abc'
    _G.__tc_obj = setmetatable({ field = 1 },
      { __index = setmetatable({ method = function() end, other = 2 },
        { __index = { inherited = function() end } }) })
    local loop = {}
    _G.__tc_loop = setmetatable(loop, { __index = loop })
  end)

  after_each(function()
    _G.__tc, _G.__tc_s, _G.__tc_obj, _G.__tc_loop, _G.__tc_t = nil, nil, nil, nil, nil
  end)

  it('completes globals and keywords', function()
    assert.are.same({ 'string' }, complete('strin'))
    assert.are.same({ '__tc_s' }, complete('__tc_s'))
    assert.are.same({ '__tc_loop', '__tc_obj', '__tc_s' }, complete('__tc_'))
    local wh = complete('wh')
    assert.truthy(#wh > 0 and wh[#wh] == 'while')
  end)

  it('completes library and nested table fields, identifier keys only', function()
    assert.are.same({ 'string.format' }, complete('string.fo'))
    assert.are.same({ '__tc.alpha.beta.gamma', '__tc.alpha.beta.gammb' }, complete('__tc.alpha.beta.gam'))
    assert.are.same({ '__tc.alpha' }, complete('__tc.'))
  end)

  it('completes methods after a colon, through the __index chain', function()
    assert.are.same({ '__tc_obj:inherited', '__tc_obj:method' }, complete('__tc_obj:'))
    assert.are.same({ '__tc_obj.field', '__tc_obj.inherited', '__tc_obj.method', '__tc_obj.other' },
      complete('__tc_obj.'))
    assert.are.same({ '__tc_s:upper' }, complete('__tc_s:up'))
  end)

  it('completes tensor methods from ember.Tensor and properties after a dot', function()
    _G.__tc_t = ember.zeros(2)
    assert.are.same({ '__tc_t:numel' }, complete('__tc_t:nume'))
    local all = complete('__tc_t:')
    assert.truthy(#all > 2)
    for _, c in ipairs(all) do
      assert.falsy(c:find('__tc_t:__', 1, true), c)
      assert.are.equal('function', type(ember.Tensor[c:sub(8)]), c)
    end
    local dotted = table.concat(complete('__tc_t.'), ' ')
    assert.truthy(dotted:find('__tc_t.shape', 1, true), dotted)
    assert.truthy(dotted:find('__tc_t.dtype', 1, true), dotted)
  end)

  it('gives nothing for unknown paths and words it cannot walk', function()
    assert.are.same({}, complete('__nope_xyz.a'))
    assert.are.same({}, complete('__tc.alpha.nope.x'))
    assert.are.same({}, complete('a[1].b'))
    assert.are.same({}, complete('__tc..x'))
    assert.are.same({}, complete('__tc_loop.zz'))   -- a looping __index chain ends
  end)
end)
