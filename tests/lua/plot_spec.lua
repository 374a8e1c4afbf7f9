-- ember.plot and ember.display.image: pictures through cairo, read back and checked.
local cairo = require 'ember.plot.cairo'
local axes = require 'ember.plot.axes'

local function png_size(bytes)
  local function u32(i) local a, b, c, d = bytes:byte(i, i + 3); return ((a * 256 + b) * 256 + c) * 256 + d end
  assert.are.equal('\137PNG\r\n\26\n', bytes:sub(1, 8))
  return u32(17), u32(21)
end

-- Pixels close to colour c (0..1 components; antialiasing blends a line's edges), counted
-- over the whole picture.
local function count_colour(img, c)
  local want = { c[1] * 255, c[2] * 255, c[3] * 255 }
  local n = 0
  for y = 0, img.height - 1 do
    for x = 0, img.width - 1 do
      local r, g, b = img.at(x, y)
      if math.abs(r - want[1]) + math.abs(g - want[2]) + math.abs(b - want[3]) < 60 then n = n + 1 end
    end
  end
  return n
end

describe('ember.plot', function()
  it('writes PNG and SVG files of the size asked for, a series in its colour', function()
    local dir = test_tmpdir()
    local p = ember.plot.line({ 5, 5, 5, 5 }, { width = 300, height = 200, title = 'flat' })
    assert.are.equal(dir .. '/a.png', p:save(dir .. '/a.png'))
    local w, h = png_size(test_read(dir .. '/a.png'))
    assert.are.same({ 300, 200 }, { w, h })
    local img = cairo.read_png(dir .. '/a.png')
    -- a horizontal line across most of the frame, about 2 pixels thick
    assert.is_true(count_colour(img, axes.palette[1]) > 300)
    p:save(dir .. '/a.svg')
    local svg = test_read(dir .. '/a.svg')
    assert.truthy(svg:find('<svg', 1, true))
    assert.truthy(svg:find('width="300', 1, true))
  end)

  it('gives each series the next colour, and a line its markers in its own', function()
    local p = ember.plot.line({ 1, 2 }, { markers = true }):line({ 2, 1 })
    assert.are.same(axes.palette[1], p.series[1].color)
    assert.are.same(axes.palette[1], p.series[2].color)   -- the markers
    assert.are.same(axes.palette[2], p.series[3].color)
  end)

  it('ticks linear axes in 1-2-5 steps and log axes in decades', function()
    local s = axes.scale(0, 10, false, { 0, 10 })
    assert.are.same({ 0, 2, 4, 6, 8, 10 }, s.ticks)
    s = axes.scale(1, 1000, true, { 1, 1000 })
    assert.are.same({ 1, 10, 100, 1000 }, s.ticks)
    assert.are.equal('1e6', axes.tick_label(1e6, s))
    assert.are.equal('0.01', axes.tick_label(0.01, s))
    -- few decades: 1, 2, 5 between
    s = axes.scale(1, 50, true, { 1, 50 })
    assert.are.same({ 1, 2, 5, 10, 20, 50 }, s.ticks)
  end)

  it('leaves values <= 0 off a log axis instead of failing', function()
    local p = ember.plot.line({ -1, 0, 1, 10, 100 }, { ylog = true })
    local s = axes.scale(1, 100, true)   -- the range of the positive values, padded
    assert.is_true(s.lo < 1 and s.hi > 100)
    assert.are.same({ 1, 10, 100 }, s.ticks)
    assert.is_true(#p:png() > 100)
  end)

  it('draws histograms (counts in bins) and scatter plots of tensors', function()
    local p = ember.plot.hist({ 1, 1, 1, 2, 3, 3 }, { bins = 2, range = { 1, 3 } })
    local s = p.series[1]
    assert.are.same({ 3, 3 }, { s.y[0], s.y[1] })        -- [1, 2) holds 1, 1, 1; [2, 3] holds 2, 3, 3
    assert.are.same({ 1, 2, 3 }, { s.x[0], s.x[1], s.x[2] })
    p = ember.plot.hist(ember.tensor({ 1, 10, 100, 1000 }), { bins = 3, xlog = true })
    s = p.series[1]
    assert.are.same({ 1, 1, 2 }, { s.y[0], s.y[1], s.y[2] })   -- log-spaced: 1 | 10 | 100, 1000
    p = ember.plot.scatter(ember.randn(100), ember.randn(100))
    assert.are.equal(100, p.series[1].n)
    assert.is_true(#p:png() > 100)
  end)

  it('puts plots side by side in a figure', function()
    local dir = test_tmpdir()
    local f = ember.plot.figure({ ember.plot.line({ 1, 2 }, { width = 200, height = 150 }), ember.plot.line({ 2, 1 }) })
    f:save(dir .. '/f.png')
    assert.are.same({ 400, 150 }, { png_size(test_read(dir .. '/f.png')) })
  end)

  it('refuses bad input with messages that say what was expected', function()
    assert.has_error(function() ember.plot.line('abc') end,
      "ember.plot.line: y: expected a Lua array of numbers or a tensor, got a string")
    assert.has_error(function() ember.plot.scatter({ 1, 2 }, { 1 }) end,
      'ember.plot.scatter: x has 2 values and y 1: expected as many')
    assert.has_error(function() ember.plot.line({ 1, 'x' }) end,
      'ember.plot.line: y[2]: expected a number, got a string')
    local ok, err = pcall(ember.plot.line, { 1 }, { colour = 1 })
    assert.is_false(ok)
    assert.truthy(err:find("unknown option 'colour'", 1, true))
    ok, err = pcall(function() ember.plot.line({ 1 }):save('x.jpg') end)
    assert.is_false(ok)
    assert.truthy(err:find('expected a file name ending in .png or .svg', 1, true))
    ok, err = pcall(ember.plot.hist, { 1 }, { bins = 0 })
    assert.is_false(ok)
    assert.truthy(err:find('bins: expected a whole number', 1, true))
  end)

  it('draws the training curves of a metrics.jsonl: one panel per kind', function()
    local dir = test_tmpdir()
    local m = test_write(dir .. '/metrics.jsonl', '{"epoch":1,"train_loss":1.0,"test_loss":1.2,"train_accuracy":0.5}\n'
      .. '{"epoch":2,"train_loss":0.5,"test_loss":0.7,"train_accuracy":0.8}\n')
    local fig = ember.plot.training_curves(m, dir .. '/curves.png')
    assert.are.equal(2, #fig.plots)
    assert.are.same({ 1040, 360 }, { png_size(test_read(dir .. '/curves.png')) })
    test_write(m, '{"epoch":1,"train_loss":1.0}\n')
    assert.are.equal(1, #ember.plot.training_curves(m).plots)
    test_write(m, '{"epoch":1,"train_loss":1.0}\nnot json\n')
    local ok, err = pcall(ember.plot.training_curves, m)
    assert.is_false(ok)
    assert.truthy(err:find('metrics.jsonl:2: not a JSON object', 1, true))
    -- the train job's hook logs instead of failing
    local logged
    assert.is_nil(ember.plot.after_training(m, function(fmt, ...) logged = string.format(fmt, ...) end))
    assert.truthy(logged:find('curves: not written', 1, true))
  end)

  it('is drawn by the train job beside its metrics.jsonl', function()
    local dir = test_tmpdir()
    local ember_exe = (os.getenv('EMBER_BUILD_DIR') or 'build') .. '/ember'
    local cmd = string.format("EMBER_NUM_THREADS=2 '%s' run pipelines/fashion_mnist_mlp.yaml epochs=2 " ..
      "data.limit=600 log.dir='%s' checkpoint.dir=null log.progress=none >'%s/out' 2>'%s/err'", ember_exe, dir, dir,
      dir)
    assert.are.equal(0, os.execute(cmd), test_read(dir .. '/err'))
    assert.truthy(test_read(dir .. '/err'):find('curves: ' .. dir .. '/curves.png', 1, true))
    assert.are.same({ 1040, 360 }, { png_size(test_read(dir .. '/curves.png')) })
  end)

  it('ranks like a competition (ties share the best rank) and draws the rank-rank plot', function()
    assert.are.same({ 1, 4, 1, 3 }, ember.plot.ranks(ember.tensor({ 3, 1, 3, 2 })))
    local dir = test_tmpdir()
    local g = ember.graph.kronecker { scale = 8, edge_factor = 8, seed = 3 }
    local scores = g:pagerank {}
    local indeg = g:degrees()
    local p = ember.plot.rank_rank(scores, indeg, dir .. '/ranks.png', { max_points = 100 })
    assert.is_true(p.xlog and p.ylog)
    assert.are.same({ 640, 560 }, { png_size(test_read(dir .. '/ranks.png')) })
    -- above max_points: the top of the ranking and an even sample of the rest
    local drawn = p.series[2].n
    assert.is_true(drawn <= 101 and drawn > 50, 'drawn ' .. drawn)
    assert.has_error(function() ember.plot.rank_rank(scores, ember.zeros(3)) end,
      'plot.rank_rank: 256 scores and 3 in-degrees: expected one of each per vertex')
  end)
end)

describe('ember.display.image', function()
  it('maps uint8 levels and float ranges to grey pixels, one per element at zoom 1', function()
    local dir = test_tmpdir()
    local t = ember.tensor({ { 0, 255 }, { 128, 64 } }, { dtype = 'uint8' })
    ember.display.image(t, { file = dir .. '/g.png', zoom = 1 })
    local img = cairo.read_png(dir .. '/g.png')
    assert.are.same({ 2, 2 }, { img.width, img.height })
    assert.are.same({ 0, 0, 0, 255 }, { img.at(0, 0) })
    assert.are.same({ 255, 255, 255, 255 }, { img.at(1, 0) })
    assert.are.same({ 128, 128, 128, 255 }, { img.at(0, 1) })
    -- floats: 0..1 by default, min/max, normalize
    local f = ember.tensor({ { 0, 0.5 }, { 1, 2 } })
    local png = ember.display.png(f, { zoom = 1 })
    local path = test_write(dir .. '/f.png', png)
    img = cairo.read_png(path)
    assert.are.same({ 0, 128, 255, 255 }, { (img.at(0, 0)), (img.at(1, 0)), (img.at(0, 1)), (img.at(1, 1)) })
    test_write(path, ember.display.png(f, { zoom = 1, normalize = true }))
    img = cairo.read_png(path)
    assert.are.same({ 0, 64, 128, 255 }, { (img.at(0, 0)), (img.at(1, 0)), (img.at(0, 1)), (img.at(1, 1)) })
  end)

  it('reads channels first or last, and a batch as a grid', function()
    local dir = test_tmpdir()
    local red = ember.cat({ ember.ones(1, 6, 5), ember.zeros(2, 6, 5) }, 1)
    local img = cairo.read_png(test_write(dir .. '/r.png', ember.display.png(red, { zoom = 1 })))
    assert.are.same({ 5, 6 }, { img.width, img.height })
    assert.are.same({ 255, 0, 0, 255 }, { img.at(2, 2) })
    img = cairo.read_png(test_write(dir .. '/r2.png', ember.display.png(red:permute(2, 3, 1), { zoom = 1 })))
    assert.are.same({ 5, 6 }, { img.width, img.height })
    assert.are.same({ 255, 0, 0, 255 }, { img.at(2, 2) })
    -- both ends could be channels ([4, 5, 3]): channels first, as Torch's images are
    img = cairo.read_png(test_write(dir .. '/r3.png', ember.display.png(ember.zeros(4, 5, 3), { zoom = 1 })))
    assert.are.same({ 3, 5 }, { img.width, img.height })
    -- 5 images of 4 x 4 in 3 columns, 2 pixels apart: 16 x 10
    local batch = ember.ones(5, 1, 4, 4)
    img = cairo.read_png(test_write(dir .. '/b.png', ember.display.png(batch, { zoom = 1, nrow = 3 })))
    assert.are.same({ 3 * 4 + 2 * 2, 2 * 4 + 2 }, { img.width, img.height })
    assert.are.same({ 255, 255, 255, 255 }, { img.at(0, 0) })
    assert.are.equal(0, select(4, img.at(4, 0)))          -- the gap is transparent
    -- small pictures grow to about 128 pixels by default
    img = cairo.read_png(test_write(dir .. '/z.png', ember.display.png(ember.zeros(8, 8))))
    assert.are.equal(128, img.width)
  end)

  it('refuses what is not a picture', function()
    assert.has_error(function() ember.display.png(ember.zeros(2, 2, 2, 2, 2)) end,
      'display.image: expected a 2-d, 3-d or 4-d tensor, got 5-d (shape [2, 2, 2, 2, 2])')
    assert.has_error(function() ember.display.png(ember.zeros(5, 6, 7)) end,
      'display.image: a 3-d tensor needs 1, 3 or 4 channels first or last, got shape [5, 6, 7]')
    assert.has_error(function() ember.display.png({ 1, 2 }) end, 'display.image: expected a tensor, got a table')
  end)
end)
