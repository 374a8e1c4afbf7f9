-- pipeline_tasks_spec.lua: train pipelines beyond Fashion-MNIST: a Lua model file, custom
-- sources with their own test set or a split (evaluation reads them, never Fashion-MNIST),
-- each task kind's loss and metrics, custom loss and metric files, exact ROC AUC, every
-- schema error of a file at once, and the TensorBoard writer's records.
local pipeline = require 'ember.pipeline'
local json = require 'ember.util.json'
local task_spec = require 'ember.pipeline.task'

local tmpdir, write, read = test_tmpdir, test_write, test_read

local function has(msg, text)
  assert(msg:find(text, 1, true), string.format('expected the message to contain %q, got %q', text, msg))
end

-- A Lua dataset file: n samples from `offset` on, features a deterministic function of the
-- sample's number (so train and test files with different offsets hold different samples).
-- kind: 'classes' (x [4], y a class 1..2 from the sign of x1 + x2 - x3), 'binary' (y 0/1
-- float), 'regression' (y = 2 x1 - x2 + 0.5 x3 + 0.25), 'tokens' (x [T] tokens 1..V, y the
-- next tokens: t + 1 mod V).
local function dataset_file(path, kind, n, offset)
  return write(path, string.format([[
local ember = require 'ember'
local kind, n, offset = %q, %d, %d
local function u(i, j)
  local v = math.sin((i + offset) * 12.9898 + j * 78.233) * 43758.5453
  return 2 * (v - math.floor(v)) - 1
end
local ds = {}
function ds:size() return n end
function ds:get_batch(ids)
  local xs, ys = {}, {}
  for k = 1, ids:numel() do
    local i = ids[k]:item()
    if kind == 'tokens' then
      local row, nxt = {}, {}
      local t0 = math.floor((u(i, 1) + 1) * 4) %% 8
      for t = 1, 6 do row[t] = (t0 + t - 1) %% 8 + 1; nxt[t] = (t0 + t) %% 8 + 1 end
      xs[k], ys[k] = row, nxt
    else
      local x = { u(i, 1), u(i, 2), u(i, 3), u(i, 4) }
      xs[k] = x
      local s = x[1] + x[2] - x[3]
      if kind == 'classes' then ys[k] = s > 0 and 2 or 1
      elseif kind == 'binary' then ys[k] = s > 0 and 1 or 0
      else ys[k] = 2 * x[1] - x[2] + 0.5 * x[3] + 0.25 end
    end
  end
  if kind == 'tokens' then
    return { x = ember.tensor(xs, { dtype = 'int64' }), y = ember.tensor(ys, { dtype = 'int64' }) }
  end
  local ydt = kind == 'classes' and 'int64' or 'float32'
  return { x = ember.tensor(xs), y = ember.tensor(ys, { dtype = ydt }) }
end
return ds
]], kind, n, offset))
end

-- Loads and runs a pipeline file in this process; returns the result and the config.
local function run_file(path, overrides)
  local cfg, ctx = pipeline.load(path, overrides)
  ctx.stderr = io.open('/dev/null', 'w')
  local result = pipeline.run(cfg, ctx)
  ctx.stderr:close()
  return result, cfg
end

local function lines_of(text)
  local out = {}
  for line in text:gmatch('[^\n]+') do out[#out + 1] = json.decode(line) end
  return out
end

describe('a train pipeline on its own data', function()
  it('trains a Lua model file on a custom source and evaluates on its own test set', function()
    local dir = tmpdir()
    os.execute('mkdir -p ' .. dir .. '/models ' .. dir .. '/data')
    write(dir .. '/models/mlp.lua', [[
local nn = require('ember').nn
return function(args)
  return nn.Sequential{ nn.Linear(4, args.hidden), nn.Tanh(), nn.Linear(args.hidden, 2) }
end
]])
    dataset_file(dir .. '/data/train.lua', 'classes', 256, 0)
    dataset_file(dir .. '/data/test.lua', 'classes', 100, 100000)
    -- paths relative to the pipeline file, run from another folder
    local path = write(dir .. '/p.yaml', [[
job: train
epochs: 6
model: {file: models/mlp.lua, args: {hidden: 16}}
task: {kind: classification, inputs: [x], target: y}
data:
  source: data/train.lua
  test: data/test.lua
  batch_size: 16
optim: {name: adam, lr: 0.05}
log: {progress: none}
]])
    local r, cfg = run_file(path, { 'log.dir=' .. dir .. '/log' })
    assert.equal(dir .. '/models/mlp.lua', cfg.model.file)
    assert.equal(dir .. '/data/train.lua', cfg.data.source)
    assert.equal(6, r.epochs)
    assert.is_true(r.test_accuracy > 0.9, 'test accuracy ' .. tostring(r.test_accuracy))
    assert.is_true(r.train_accuracy > 0.9)
    local m = lines_of(read(dir .. '/log/metrics.jsonl'))
    assert.equal(6, #m)
    assert.equal(r.test_accuracy, m[6].test_accuracy)
    assert.is_nil(m[6].val_accuracy)   -- no validation set named
    assert.equal(16 * 6, m[6].step)    -- 256 / 16 steps per epoch
  end)

  it('splits one source into train, val and test parts and evaluates each', function()
    local dir = tmpdir()
    dataset_file(dir .. '/all.lua', 'classes', 400, 7)
    local path = write(dir .. '/p.yaml', [[
job: train
epochs: 4
model: [{linear: [4, 16]}, {relu: }, {linear: [16, 2]}]
data:
  source: all.lua
  split: {train: 0.5, val: 0.25, test: 0.25}
  seed: 3
  batch_size: 20
  test_batch_size: 33
optim: {name: adam, lr: 0.05}
log: {progress: none}
]])
    local r = run_file(path, { 'log.dir=' .. dir .. '/log' })
    assert.is_true(r.test_accuracy > 0.85, 'test accuracy ' .. tostring(r.test_accuracy))
    assert.is_true(r.val_accuracy > 0.85, 'val accuracy ' .. tostring(r.val_accuracy))
    -- reader processes get the training part's ids from the trainer: the same run
    local out = io.popen(string.format("EMBER_NUM_THREADS=2 '%s/ember' run %s data.workers=2 log.progress=none " ..
      '2>/dev/null', os.getenv('EMBER_BUILD_DIR') or 'build', path)):read('*a')
    local r2 = json.decode(out)
    for _, k in ipairs { 'train_loss', 'val_loss', 'test_loss', 'test_accuracy' } do assert.equal(r[k], r2[k], k) end
    local m = lines_of(read(dir .. '/log/metrics.jsonl'))
    assert.equal(10 * 4, m[4].step)   -- 200 training samples / 20
    -- the parts are disjoint and cover the source
    local parts = require('ember.pipeline.datasets').split_ids(400, { train = 0.5, val = 0.25, test = 0.25 }, 3)
    local seen = {}
    for _, name in ipairs { 'train', 'val', 'test' } do
      for _, id in ipairs(parts[name]:totable()) do
        assert.is_nil(seen[id], 'sample ' .. id .. ' is in two parts')
        seen[id] = name
      end
    end
    assert.equal(200, parts.train:numel())
    assert.equal(100, parts.val:numel())
    assert.equal(100, parts.test:numel())
    for i = 1, 400 do assert.is_not_nil(seen[i]) end
  end)

  it('trains on a custom source without a test set and never reads Fashion-MNIST', function()
    local dir = tmpdir()
    dataset_file(dir .. '/d.lua', 'classes', 64, 0)
    local path = write(dir .. '/p.yaml', [[
job: train
epochs: 1
model: [{linear: [4, 2]}]
data: {source: d.lua, batch_size: 16, root: /nonexistent-but-unused-dir-is-checked}
log: {progress: none}
]])
    -- root names a folder that does not exist: the file is refused before anything loads
    local ok, e = pcall(pipeline.load, path)
    assert.is_false(ok)
    has(e.message, 'data.root')
    write(path, (read(path):gsub(', root: [^}]*', '')))
    local r = run_file(path)
    assert.equal(1, r.epochs)
    assert.is_nil(r.test_accuracy)   -- nothing to evaluate on: no test set was named
    assert.is_number(r.train_accuracy)
  end)
end)

describe('pipelines/spirals.yaml', function()
  it('runs from any folder (its model and data files are found beside it)', function()
    local dir = tmpdir()
    local root = io.popen('pwd'):read('*l')
    local build = os.getenv('EMBER_BUILD_DIR') or 'build'
    if build:sub(1, 1) ~= '/' then build = root .. '/' .. build end
    local cmd = string.format("cd '%s' && EMBER_NUM_THREADS=2 '%s/ember' run '%s/pipelines/spirals.yaml' epochs=3 " ..
      "checkpoint.dir=null log.dir=%s/log log.progress=none 2>%s/err", dir, build, root, dir, dir)
    local out = io.popen(cmd):read('*a')
    local ok, r = pcall(json.decode, out)
    assert(ok, 'stdout: ' .. out .. ' stderr: ' .. tostring(read(dir .. '/err')))
    assert.equal(3, r.epochs)
    assert.is_true(r.test_accuracy > 0.8 and r.val_accuracy > 0.8, out)
    assert.is_number(r.test_top2_accuracy)
    local files = io.popen('ls ' .. dir .. '/log'):read('*a')
    has(files, 'events.out.tfevents.')
    has(files, 'metrics.jsonl')
    has(files, 'steps.jsonl')
  end)
end)

describe('tasks', function()
  local function task_file(dir, kind_block, model, data_kind, extra)
    dataset_file(dir .. '/train.lua', data_kind, 256, 0)
    dataset_file(dir .. '/test.lua', data_kind, 128, 5000)
    return write(dir .. '/p.yaml', string.format([[
job: train
epochs: %d
model: %s
task: %s
data: {source: train.lua, test: test.lua, batch_size: 16, test_batch_size: 50}
optim: {name: adam, lr: 0.03}
log: {progress: none}
%s]], extra and extra.epochs or 8, model, kind_block, extra and extra.text or ''))
  end

  it('binary: BCE with logits, accuracy, ROC AUC and log loss', function()
    local dir = tmpdir()
    local r = run_file(task_file(dir, 'binary', '[{linear: [4, 1]}]', 'binary'))
    assert.is_true(r.test_accuracy > 0.9, tostring(r.test_accuracy))
    assert.is_true(r.test_roc_auc > 0.95 and r.test_roc_auc <= 1, tostring(r.test_roc_auc))
    assert.near(r.test_loss, r.test_log_loss, 1e-5)   -- the mean BCE is the log loss
  end)

  it('regression: mse, l1 and huber losses; rmse and mae', function()
    local dir = tmpdir()
    local model = '[{linear: [4, 1]}, {flatten: {start_dim: 1}}]'
    local r = run_file(task_file(dir, 'regression', model, 'regression', { epochs = 20 }))
    assert.is_true(r.test_rmse < 0.1, tostring(r.test_rmse))
    assert.near(r.test_loss, r.test_rmse ^ 2, 1e-6 + 1e-4 * r.test_loss)   -- mse loss = rmse^2
    assert.is_true(r.test_mae <= r.test_rmse + 1e-12)
    for _, loss in ipairs { 'l1', 'huber' } do
      local r2 = run_file(task_file(tmpdir(), '{kind: regression, loss: ' .. loss .. '}', model, 'regression',
        { epochs = 20 }))
      assert.is_true(r2.test_mae < 0.15, loss .. ': ' .. tostring(r2.test_mae))
      if loss == 'l1' then assert.near(r2.test_loss, r2.test_mae, 1e-5) end
    end
    -- the losses' values, against their definitions
    local out = ember.tensor({ 0.0, 1.0, -3.0, 0.5 })
    local y = ember.tensor({ 0.5, 3.0, -3.0, 0.5 })
    local t = task_spec.new({ kind = 'regression', loss = 'huber', huber_delta = 1 })
    -- |d| = 0.5, 2, 0, 0: 0.5 * 0.25, 1 * (2 - 0.5), 0, 0
    assert.near((0.125 + 1.5) / 4, t:loss(out, y):item(), 1e-7)
    assert.near((0.5 + 2) / 4, task_spec.new({ kind = 'regression', loss = 'l1' }):loss(out, y):item(), 1e-7)
    assert.near((0.25 + 4) / 4, task_spec.new('regression'):loss(out, y):item(), 1e-7)
  end)

  it('language_model: token cross-entropy over [B, T, V] and perplexity', function()
    local dir = tmpdir()
    local r = run_file(task_file(dir, 'language_model', '[{embedding: [8, 16]}, {linear: [16, 8]}]', 'tokens',
      { epochs = 10 }))
    assert.near(math.exp(r.test_loss), r.test_perplexity, 1e-9 * r.test_perplexity)
    assert.is_true(r.test_perplexity < 1.5, tostring(r.test_perplexity))   -- the next token is determined
    assert.is_true(r.train_perplexity >= 1)
  end)

  it('classification: top-k accuracy, and a custom loss and metric from files', function()
    local dir = tmpdir()
    write(dir .. '/loss.lua', [[
local F = require('ember').nn.functional
return function(out, y, batch, args) return F.cross_entropy(out, y) * args.scale end
]])
    write(dir .. '/wrong.lua', [[
local F = require('ember').nn.functional
return function(out, y) return 1 - F.count_correct(out, y) / y.shape[1] end
]])
    write(dir .. '/count.lua', [[
return { name = 'samples', init = function() return { n = 0 } end,
  update = function(s, out, y) s.n = s.n + y.shape[1] end, result = function(s) return s.n end }
]])
    local block = '{kind: classification, loss: {file: loss.lua, args: {scale: 2}}, ' ..
      'metrics: [accuracy, {top_k: 2}, top1_accuracy, {file: wrong.lua, name: error_rate}, {file: count.lua}]}'
    local r = run_file(task_file(dir, block, '[{linear: [4, 2]}]', 'classes', { epochs = 6 }))
    assert.equal(1, r.test_top2_accuracy)              -- two classes: always in the top 2
    assert.equal(r.test_accuracy, r.test_top1_accuracy)
    assert.near(1 - r.test_accuracy, r.test_error_rate, 1e-12)
    assert.equal(128, r.test_samples)
    assert.is_true(r.test_accuracy > 0.85)
    -- the custom loss is 2 x cross-entropy
    local t = task_spec.new({ kind = 'classification', loss = { file = dir .. '/loss.lua', args = { scale = 2 } },
      inputs = { 'x' }, target = 'y' })
    local out, y = ember.tensor({ { 1, 2 }, { 3, -1 } }), ember.tensor({ 2, 1 }, { dtype = 'int64' })
    assert.near(2 * ember.nn.functional.cross_entropy(out, y):item(), t:loss(out, y):item(), 1e-6)
  end)

  it('leaves each batch and output alone when a custom metric may keep them', function()
    -- (with only its own model, loss and metrics the job hands them back as each step ends)
    local dir = tmpdir()
    write(dir .. '/keep.lua', [[
return { name = 'kept_readable', init = function() return { kept = {} } end,
  update = function(s, out, y, batch) s.kept[#s.kept + 1] = batch.x; s.kept[#s.kept + 1] = out end,
  result = function(s)
    local ok = 0
    for _, t in ipairs(s.kept) do if pcall(function() return t:sum():item() end) then ok = ok + 1 end end
    return ok / #s.kept
  end }
]])
    local r = run_file(task_file(dir, '{kind: classification, metrics: [accuracy, {file: keep.lua}]}',
      '[{linear: [4, 2]}, {relu: }, {linear: [2, 2]}]', 'classes', { epochs = 2 }))
    assert.equal(1, r.train_kept_readable)
    assert.equal(1, r.test_kept_readable)
  end)

  it('reads the batch fields the task names', function()
    local dir = tmpdir()
    write(dir .. '/two.lua', [[
local ember = require 'ember'
local ds = {}
function ds:size() return 32 end
function ds:get(i) return { a = ember.tensor({ i % 2, 1 }), label = i % 2 + 1 } end
return ds
]])
    write(dir .. '/m.lua', [[
local nn = require('ember').nn
return function() return nn.Linear(2, 2) end
]])
    local path = write(dir .. '/p.yaml', [[
job: train
epochs: 30
model: {file: m.lua}
task: {inputs: [a], target: label}
data: {source: two.lua, test: two.lua, batch_size: 8}
optim: {name: adam, lr: 0.1}
log: {progress: none}
]])
    local r = run_file(path)
    assert.equal(1, r.test_accuracy)
    local ok, e = pcall(run_file, path, { 'task.inputs=[x]', 'epochs=1' })
    assert.is_false(ok)
    has(tostring(e), "task.inputs: the batch has no field 'x' (it has a, ids, label)")
  end)

  it('refuses losses and metrics that do not fit the task', function()
    local dir = tmpdir()
    local path = task_file(dir, '{kind: binary, loss: mse, metrics: [rmse]}', '[{linear: [4, 1]}]', 'binary')
    local ok, e = pcall(pipeline.load, path)
    assert.is_false(ok)
    has(e.message, "task: loss 'mse' does not fit the task binary (expected bce_with_logits or a file)")
  end)
end)

describe('ROC AUC', function()
  -- pairs (positive, negative) where the positive scores higher, ties counting one half
  local function pairwise(s, l)
    local num, den = 0, 0
    for i = 1, #s do
      if l[i] == 1 then
        for j = 1, #s do
          if l[j] == 0 then
            den = den + 1
            if s[i] > s[j] then num = num + 1 elseif s[i] == s[j] then num = num + 0.5 end
          end
        end
      end
    end
    return num / den
  end

  it('is exact, with ties averaged', function()
    -- by hand: sklearn's documented example, all ties, and a positive tied with a negative
    assert.equal(0.75, task_spec.roc_auc({ 0.1, 0.4, 0.35, 0.8 }, { 0, 0, 1, 1 }))
    assert.equal(0.5, task_spec.roc_auc({ 0.5, 0.5, 0.5, 0.5 }, { 0, 1, 0, 1 }))
    assert.equal(0.875, task_spec.roc_auc({ 1, 2, 2, 3 }, { 0, 0, 1, 1 }))
    assert.equal(0, task_spec.roc_auc({ 3, 2, 1 }, { 0, 1, 1 }))
    assert.is_nil(task_spec.roc_auc({ 1, 2 }, { 1, 1 }))   -- one class only: undefined
    -- many ties, against the pairwise definition
    local s, l = {}, {}
    for i = 1, 500 do
      s[i] = math.floor((math.sin(i * 3.7) + 1) * 5) / 10   -- 11 distinct values
      l[i] = math.sin(i * 1.3) + s[i] > 0.4 and 1 or 0
    end
    assert.near(pairwise(s, l), task_spec.roc_auc(s, l), 1e-12)
  end)
end)

describe('schema errors', function()
  it('are all reported, one file:line: key: message line each, in file order', function()
    local dir = tmpdir()
    local path = write(dir .. '/three.yaml', [[
job: train
model:
  - flatten:
  - linear: [784, 10, 3]
optim:
  name: sgd
  lr: fast
data:
  batch_size: 32
  shufle: true
]])
    local ok, e = pcall(pipeline.load, path)
    assert.is_false(ok)
    local lines = {}
    for line in e.message:gmatch('[^\n]+') do lines[#lines + 1] = line end
    assert.same({
      path .. ':4: model.2.linear: expected a list of 2 (an integer >= 1 each), got a list of 3',
      path .. ":7: optim.lr: expected a number > 0, got 'fast'",
      path .. ':10: data.shufle: unknown key (expected one of: ' .. (function()
        local keys = {}
        for k in pairs(require('ember.pipeline.train').schema.data.fields) do keys[#keys + 1] = k end
        table.sort(keys)
        return table.concat(keys, ', ')
      end)() .. ')',
    }, lines)
    assert.equal(3, #e.errors)
    -- `ember run` prints them all and exits 2
    local out = dir .. '/err'
    local status = os.execute(string.format("'%s/ember' run %s 2>%s", os.getenv('EMBER_BUILD_DIR') or 'build', path,
      out))
    assert.equal(2, math.floor(status / 256))
    assert.equal(e.message .. '\n', read(out))
  end)
end)

describe('model: layers', function()
  it('builds embeddings, softmax and any nn class by name', function()
    local dir = tmpdir()
    local cfg = pipeline.load(write(dir .. '/m.yaml', [[
job: train
model:
  - embedding: {num: 10, dim: 4, padding_idx: 1}
  - module: {class: Linear, args: [4, 3], opts: {bias: false}}
  - identity:
  - log_softmax: -1
]]))
    local model = require('ember.pipeline.model').build(cfg.model)
    local text = tostring(model)
    has(text, 'Embedding(10, 4, padding_idx=1)')
    has(text, 'Linear(in_features=4, out_features=3, bias=false)')
    has(text, 'LogSoftmax(dim=-1)')
    local out = model(ember.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = 'int64' }))
    assert.same({ 2, 2, 3 }, out.shape)
    assert.near(1, out[1][1]:exp():sum():item(), 1e-6)
    local bag = require('ember.pipeline.model').build(pipeline.load(write(dir .. '/b.yaml',
      'job: train\nmodel: [{embedding_bag: {num: 5, dim: 3, mode: sum}}]\n')).model)
    assert.same({ 2, 3 }, bag(ember.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = 'int64' })).shape)
    local ok, e = pcall(pipeline.load, write(dir .. '/x.yaml', 'job: train\nmodel: [{module: {class: Nope}}]\n'))
    assert.is_false(ok)
    has(e.message, "model.1.module.class: expected the name of an ember.nn module class (Linear, Conv2d, ...), " ..
      "got 'Nope'")
    ok, e = pcall(pipeline.load, write(dir .. '/f.yaml', 'job: train\nmodel: {file: nope.lua}\n'))
    assert.is_false(ok)
    has(e.message, "model.file: expected the path of an existing file, got '" .. dir .. "/nope.lua'")
  end)

  it('loads a model file from Lua and says what is wrong with a bad one', function()
    local dir = tmpdir()
    local M = require 'ember.pipeline.model'
    write(dir .. '/ok.lua', 'local nn = require("ember").nn\nreturn function(a) return nn.Linear(a.n, 2) end\n')
    assert.same({ 2, 3 }, M.from_file(dir .. '/ok.lua', { n = 3 }).weight.shape)
    write(dir .. '/bad.lua', 'return 42\n')
    local ok, e = pcall(M.from_file, dir .. '/bad.lua')
    assert.is_false(ok)
    has(e, 'expected it to return a function(args) -> nn.Module, got a number')
    write(dir .. '/notmod.lua', 'return function() return {} end\n')
    ok, e = pcall(M.from_file, dir .. '/notmod.lua')
    assert.is_false(ok)
    has(e, 'the function returned a table, expected an nn.Module')
  end)
end)
