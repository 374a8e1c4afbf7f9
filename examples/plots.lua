-- Pictures from a script: plots (line, scatter, hist, log axes) as PNG and SVG, a batch of
-- images as a grid, the training curves the train job writes beside metrics.jsonl, and the
-- PageRank job's rank-rank plot.
--   build/ember examples/plots.lua [OUTDIR]      (default: plots/)
-- In a notebook (`ember kernel`) the same calls show inline: examples/notebook.ipynb.
local ember = require 'ember'
local outdir = arg and arg[1] or 'plots'
os.execute("mkdir -p '" .. outdir .. "'")
local function out(name) return outdir .. '/' .. name end

-- 1. a line plot with two series on a log y axis, as PNG and SVG
local steps, a, b = {}, {}, {}
for i = 1, 200 do steps[i], a[i], b[i] = i, 2 / i, math.exp(-i / 40) end
local p = ember.plot.line(steps, a, { title = 'two decays', xlabel = 'step', ylabel = 'value', ylog = true,
  label = '2 / step' })
p:line(steps, b, { label = 'exp(-step / 40)' })
p:save(out('line.png'))
p:save(out('line.svg'))

-- 2. scatter and histogram of normal draws, side by side in one picture
local x, y = ember.randn(3000), ember.randn(3000)
ember.plot.figure({
  ember.plot.scatter(x, x * 0.6 + y * 0.8, { title = 'correlated normals', alpha = 0.4, width = 480, height = 400 }),
  ember.plot.hist(x, { title = 'histogram', bins = 40 }),
}):save(out('scatter_hist.png'))

-- 3. the first 16 Fashion-MNIST test images (Debian's dataset-fashion-mnist) as a grid
local images = '/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz'
local f = io.open(images)
if f then
  f:close()
  ember.display.image(ember.data.read_idx(images, { limit = 16 }):reshape(16, 1, 28, 28),
    { file = out('fashion_mnist.png'), zoom = 2 })
end

-- 4. training curves: a small classifier trained on random clusters, one metrics line per
--    epoch as the train job writes them, then the same picture the job draws (curves.png)
local n, classes = 600, 3
local centres = ember.randn(classes, 2) * 3
local labels = ember.randint(1, classes + 1, { n }, { dtype = 'int64' })
local points = centres:index_select(1, labels) + ember.randn(n, 2)
local model = ember.nn.Sequential { ember.nn.Linear(2, 16), ember.nn.ReLU(), ember.nn.Linear(16, classes) }
local opt = ember.optim.SGD(model:parameters(), { lr = 0.05 })
local metrics = io.open(out('metrics.jsonl'), 'w')
for epoch = 1, 15 do
  local logits = model(points)
  local loss = ember.nn.functional.cross_entropy(logits, labels)
  opt:zero_grad(); loss:backward(); opt:step()
  local accuracy = ember.nn.functional.count_correct(logits, labels) / n
  metrics:write(string.format('{"epoch":%d,"train_loss":%.6f,"train_accuracy":%.6f}\n', epoch, loss:item(), accuracy))
end
metrics:close()
ember.plot.training_curves(out('metrics.jsonl'), out('curves.png'))

-- 5. PageRank rank against in-degree rank on a Kronecker graph (the job: output.rank_plot)
local g = ember.graph.kronecker { scale = 14, edge_factor = 16, seed = 1 }
local scores = g:pagerank { tol = 1e-8 }
ember.plot.rank_rank(scores, (g:degrees()), out('rank_rank.png'))

for _, name in ipairs { 'line.png', 'line.svg', 'scatter_hist.png', 'fashion_mnist.png', 'curves.png',
  'rank_rank.png' } do
  local file = io.open(out(name), 'rb')
  if file then
    print(string.format('%-40s %7d bytes', out(name), #file:read('*a')))
    file:close()
  end
end
