-- What a notebook shows (ember.display), what help says (ember.help, ?name in the REPL),
-- and the kernel's text handling (ember.kernel.cell, .message, .install): no sockets here,
-- tests/jupyter drives the real kernel.
local display = require 'ember.display'
local help = require 'ember.help'
local repl = require 'ember.repl'
local cell = require 'ember.kernel.cell'
local message = require 'ember.kernel.message'
local install = require 'ember.kernel.install'

local function count(s, pattern)
  local n = 0
  for _ in s:gmatch(pattern) do n = n + 1 end
  return n
end

describe('ember.display.bundle', function()
  it('shows a tensor as its printed text and an HTML table of the same numbers', function()
    local t = ember.tensor({ { 1.5, -2 }, { 3, 4 } })
    local b = display.bundle(t)
    assert.are.equal(tostring(t), b['text/plain'])
    local html = b['text/html']
    assert.truthy(html:find('tensor float32 [2, 2] cpu', 1, true))
    for _, v in ipairs { '1.5000', '-2.0000', '3.0000', '4.0000' } do
      assert.truthy(html:find('<td>' .. v .. '</td>', 1, true), v)
    end
    assert.are.equal(4, count(html, '<td>'))
    local ints = display.bundle(ember.tensor({ 7, 8 }, { dtype = 'int64' }))['text/html']
    assert.truthy(ints:find('<td>8</td>', 1, true))
    local bools = display.bundle(ember.tensor({ 1, 0 }, { dtype = 'bool' }))['text/html']
    assert.truthy(bools:find('<td>false</td>', 1, true))
  end)

  it('shortens big tensors as the printed form does: three rows and columns at each end', function()
    local html = display.tensor_html(ember.arange(10000):reshape(100, 100))
    assert.are.equal(6 * 6 + 6 + 6 + 1, count(html, '<td>'))   -- values, the two gap lines, their crossing
    assert.truthy(html:find('<td>9999.0000</td>', 1, true) or html:find('<td>9.9990e%+03</td>'))
    assert.is_nil(html:find('<td>50.0000</td>', 1, true))
    -- 3-d: a table per leading index, the middle ones left out
    html = display.tensor_html(ember.zeros(10, 20, 20))
    assert.are.equal(6, count(html, '<table'))
    assert.truthy(html:find('[10, :, :]', 1, true))
    -- a 0-d tensor and an empty one
    assert.truthy(display.tensor_html(ember.tensor(2.5)):find('<td>2.5000</td>', 1, true))
    assert.is_nil(display.tensor_html(ember.zeros(0, 3)):find('<table', 1, true))
  end)

  it('shows modules with their parameters, records as columns, escaped', function()
    local m = ember.nn.Sequential { ember.nn.Linear(3, 2), ember.nn.ReLU() }
    local html = display.bundle(m)['text/html']
    assert.truthy(html:find('<code>0.weight</code></td><td>[2, 3]', 1, true))
    assert.truthy(html:find('<th>8</th>', 1, true))   -- 6 + 2 elements in all
    html = display.bundle({ { name = '<b>', n = 1 }, { name = 'x', n = 2 } })['text/html']
    assert.truthy(html:find('<th>n</th>', 1, true))
    assert.truthy(html:find('<td>&lt;b&gt;</td>', 1, true))
    html = display.bundle({ a = 1, b = 'two' })['text/html']
    assert.truthy(html:find('<tr><td>b</td><td>two</td></tr>', 1, true))
    -- several values, strings, nil: text only, as the REPL prints them
    local b = display.bundle(1, 'x')
    assert.are.same({ ['text/plain'] = '1\tx' }, b)
    assert.is_nil(display.bundle('s')['text/html'])
    -- a plot gives its own picture
    b = display.bundle(ember.plot.line({ 1, 2 }))
    assert.truthy(b['image/png']:match('^iVBORw0KGgo'))   -- base64 of the PNG signature
  end)

  it('display() prints outside a notebook and publishes inside one', function()
    local shown = {}
    display.publisher = function(bundle) shown[#shown + 1] = bundle end
    display.display(ember.tensor({ 1 }), 'text')
    display.html('<i>x</i>')
    display.image(ember.zeros(2, 2))
    display.publisher = nil
    assert.are.equal(4, #shown)
    assert.truthy(shown[1]['text/html'])
    assert.are.equal('<i>x</i>', shown[3]['text/html'])
    assert.truthy(shown[4]['image/png'])
  end)
end)

describe('ember.help', function()
  it('gives a function its signature, its place and the comment above it', function()
    local text = help.describe('ember.arange')
    assert.truthy(text:match('^ember%.arange%(a, b, c, d%)\n'))
    assert.truthy(text:find('tensor/create.lua:', 1, true))
    assert.truthy(text:find('arange(end), arange(start, end [, step])', 1, true))
    -- a method drops self; a class is described by its init; built-ins say so
    rawset(_G, 'ember_help_t', ember.zeros(2))   -- help looks names up in _G
    assert.truthy(help.describe('ember_help_t:reshape'):match('^ember_help_t:reshape%('))
    assert.is_nil(help.describe('ember_help_t:reshape'):match('%(self'))
    rawset(_G, 'ember_help_t', nil)
    assert.truthy(help.describe('ember.nn.Linear'):find('ember.nn.Linear(in_features, out_features, opts)', 1, true))
    assert.truthy(help.describe('string.format'):find('built-in', 1, true))
    assert.is_nil(help.describe('no_such_global.x'))
    assert.is_nil(help.describe('1bad'))
  end)

  it('answers ?name and name? in the REPL', function()
    assert.truthy(repl.help('?ember.arange'):match('^ember%.arange%('))
    assert.truthy(repl.help('  ember.arange ? '):match('^ember%.arange%('))
    assert.are.equal('nosuch: nothing by that name', repl.help('?nosuch'))
    assert.is_nil(repl.help('x = a ? b'))
    assert.is_nil(repl.help('print(1)'))
  end)
end)

describe('ember.kernel.cell', function()
  it('returns the values of a last expression, whatever precedes it', function()
    local fn, shows = cell.compile('local a = 2\nlocal b = 3\na * b', '=t')
    assert.is_true(shows)
    assert.are.equal(6, select(2, pcall(fn, function(_, ...) return ... end)))
    assert.is_false(select(2, cell.compile('x_cell = {\n  1,\n  2 }', '=t')))   -- a statement over lines
    assert.is_false(select(2, cell.compile('for i = 1, 2 do\n  local y = i\nend', '=t')))
    assert.is_true(select(2, cell.compile('f(1,\n  2)', '=t')))   -- the whole call, not its last line
    fn, shows = cell.compile('1 + 1;', '=t')    -- a trailing ';' shows nothing (and is no error)
    assert.is_false(shows)
    assert.is_function(fn)
    assert.is_false(select(2, cell.compile('', '=t')))
    local err
    fn, err = cell.compile('x = = 1', '=In[1]')
    assert.is_nil(fn)
    assert.truthy(err:find("In[1]:1: unexpected symbol near '='", 1, true))
  end)

  it('says whether input is complete as the REPL does', function()
    assert.are.equal('incomplete', cell.is_complete('for i = 1, 2 do'))
    assert.are.equal('incomplete', cell.is_complete('t = {1,'))
    assert.are.equal('incomplete', cell.is_complete('s = "abc'))
    assert.are.equal('complete', cell.is_complete('t = {1}'))
    assert.are.equal('complete', cell.is_complete('1 + 1'))
    assert.are.equal('complete', cell.is_complete('   '))
    assert.are.equal('invalid', cell.is_complete('x = = 1'))
    assert.are.equal('invalid', cell.is_complete('end'))
  end)

  it('finds the name at a cursor counted in characters', function()
    assert.are.equal(5, cell.byte_offset('héllo world', 4))   -- é is two bytes
    assert.are.equal('ember.ra', (cell.word_at('x = ember.ra', 12)))
    assert.are.equal('t:resh', (cell.word_at('t:resh', 6)))
    assert.are.equal('ember.randn', cell.name_to_inspect('ember.randn', 3))
    assert.are.equal('ember.randn', cell.name_to_inspect('y = ember.randn(3, ', 19))
    assert.are.equal('f', cell.name_to_inspect('f(g(1), ', 8))
    assert.is_nil(cell.name_to_inspect('1 + ', 4))
    assert.are.equal('a.b', cell.help_request('?a.b'))
    assert.are.equal('a.b', cell.help_request('a.b?'))
    assert.is_nil(cell.help_request('a ? b'))
  end)
end)

describe('ember.kernel.message', function()
  it('writes arrays, objects and valid UTF-8 whatever the strings hold', function()
    assert.are.equal('{"a":[],"b":{},"c":[1,2]}', message.encode({ a = message.array(), b = {}, c = { 1, 2 } }))
    assert.are.equal('"ok \\u00e9"', message.encode('ok \195\169'):gsub('\195\169', '\\u00e9'))
    assert.are.equal('a\239\191\189b', message.utf8_clean('a\255b'))
    assert.are.equal('\239\191\189', message.utf8_clean('\237\160\128'):sub(1, 3))   -- a surrogate
    assert.are.equal('caf\195\169', message.utf8_clean('caf\195\169'))
    assert.are.equal('x\239\191\189', message.utf8_clean('x\195'))   -- cut short
  end)

  it('encodes base64 as RFC 4648 does', function()
    local cases = { [''] = '', f = 'Zg==', fo = 'Zm8=', foo = 'Zm9v', foob = 'Zm9vYg==', fooba = 'Zm9vYmE=',
      foobar = 'Zm9vYmFy', ['\0\255\128'] = 'AP+A' }
    for input, want in pairs(cases) do assert.are.equal(want, message.base64(input)) end
  end)
end)

describe('ember.kernel.install', function()
  it('writes a kernelspec that starts this ember', function()
    local spec = install.spec()
    assert.are.equal('kernel', spec.argv[2])
    assert.are.same({ '-f', '{connection_file}' }, { spec.argv[3], spec.argv[4] })
    assert.truthy(spec.argv[1]:match('/ember$'))
    assert.truthy(spec.display_name:match('^ember %(LuaJIT'))
    assert.are.equal('lua', spec.language)
    assert.are.equal('/p/share/jupyter/kernels', install.kernels_dir('prefix', '/p/'))
    assert.are.equal('/usr/local/share/jupyter/kernels', install.kernels_dir('system'))
    local dir = test_tmpdir()
    assert.are.equal(0, install.main { '--prefix', dir, '--name', 'ember-test' })
    local json = require('ember.util.json').decode(test_read(dir .. '/share/jupyter/kernels/ember-test/kernel.json'))
    assert.are.same(spec.argv, json.argv)
    assert.has_error(function() install.main { '--bogus' } end,
      "ember kernel install: unknown argument '--bogus' (expected --user, --prefix P, --name N, --display-name T)")
  end)
end)
