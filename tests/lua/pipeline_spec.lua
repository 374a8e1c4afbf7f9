-- pipeline_spec.lua: YAML pipelines (`ember run`): validation messages with file, line and
-- key path; command-line overrides; a short training run end to end; checkpoint/resume
-- equality; the learning-rate schedules; the JSON writer.
local pipeline = require 'ember.pipeline'
local json = require 'ember.util.json'
local train = require 'ember.pipeline.train'

local EMBER = (os.getenv('EMBER_BUILD_DIR') or 'build') .. '/ember'
local MLP = 'pipelines/fashion_mnist_mlp.yaml'

local tmpdir = test_tmpdir

local write = test_write

local read = test_read

local function load_error(path, overrides)
  local ok, err = pcall(pipeline.load, path, overrides)
  assert.is_false(ok, 'expected a validation error')
  assert.is_true(pipeline.schema.is_error(err), 'expected a validation error, got ' .. tostring(err))
  return err.message
end

local function has(msg, text)
  assert(msg:find(text, 1, true), string.format('expected the message to contain %q, got %q', text, msg))
end

-- Runs `ember run ARGS` with stdout and stderr in files: returns status, stdout, stderr.
local function ember_run(dir, args)
  local out, err = dir .. '/stdout', dir .. '/stderr'
  local cmd = string.format("EMBER_NUM_THREADS=2 '%s' run %s >'%s' 2>'%s'", EMBER, table.concat(args, ' '), out, err)
  local status = os.execute(cmd)
  return math.floor(status / 256), read(out), read(err)
end

-- "a, b, c": the sorted keys of a record schema, as unknown-key messages list them.
local function keys_of(record)
  local keys = {}
  for k in pairs(record.fields) do keys[#keys + 1] = k end
  table.sort(keys)
  return table.concat(keys, ', ')
end

local function top_keys()
  local keys = keys_of(pipeline.file_schema('train'))
  for _, k in ipairs { 'checkpoint', 'data', 'device', 'epochs', 'job', 'model', 'optim', 'resume', 'seed' } do
    assert(keys:find(k, 1, true), k)
  end
  return keys
end

local SMALL = 'data.limit=512 data.test_limit=500 data.batch_size=64 log.progress=lines'

describe('pipeline files', function()
  local base = [[
job: train
model:
  - flatten:
  - linear: [784, 10]
optim:
  name: sgd
  lr: 0.1
data:
  batch_size: 32
]]

  it('accept a minimal file and fill in the defaults', function()
    local dir = tmpdir()
    local cfg = pipeline.load(write(dir .. '/ok.yaml', base))
    assert.equal('train', cfg.job)
    assert.equal(10, cfg.epochs)
    assert.equal(0.1, cfg.optim.lr)
    assert.equal(0, cfg.optim.momentum)
    assert.equal(32, cfg.data.batch_size)
    assert.equal('fashion-mnist', cfg.data.dataset)
    assert.same({ kind = 'linear', value = { 784, 10 } }, cfg.model[2])
    assert.same({ kind = 'flatten', value = { start_dim = 2, end_dim = -1 } }, cfg.model[1])
    assert.equal('cpu', cfg.device)
    assert.is_false(cfg.resume)
  end)

  it('name the file, the line, the key and what was expected', function()
    local dir = tmpdir()
    local function err_of(name, text) return load_error(write(dir .. '/' .. name, text)) end
    local p = dir .. '/'
    assert.equal(p .. "lr.yaml:7: optim.lr: expected a number > 0, got 'fast'",
      err_of('lr.yaml', base:gsub('lr: 0.1', 'lr: fast')))
    assert.equal(p .. 'neg.yaml:7: optim.lr: expected a number > 0, got -1', err_of('neg.yaml', base:gsub('lr: 0.1', 'lr: -1')))
    -- key lists come from the schemas: jobs and sections registered later extend them
    local data_keys = keys_of(train.schema.data)
    for _, k in ipairs { 'batch_size', 'dataset', 'drop_last', 'limit', 'normalise', 'root', 'shuffle' } do
      assert.is_truthy(data_keys:find(k, 1, true), k)
    end
    assert.equal(p .. 'unk.yaml:10: data.colour: unknown key (expected one of: ' .. data_keys .. ')',
      err_of('unk.yaml', base .. '  colour: red\n'))
    assert.equal(p .. "top.yaml:10: epoch: unknown key (expected one of: " .. top_keys() .. ")",
      err_of('top.yaml', base .. 'epoch: 3\n'))
    assert.equal(p .. "int.yaml:10: epochs: expected an integer >= 1, got 2.5", err_of('int.yaml', base .. 'epochs: 2.5\n'))
    assert.equal(p .. "enum.yaml:6: optim.name: expected one of sgd, adam, adamw, adagrad, rmsprop, got 'lbfgs'",
      err_of('enum.yaml', base:gsub('name: sgd', 'name: lbfgs')))
    assert.equal(p .. "bool.yaml:10: data.shuffle: expected true or false, got 'sometimes'",
      err_of('bool.yaml', base .. '  shuffle: sometimes\n'))
    assert.equal(p .. "layer.yaml:4: model.2.linear: expected a list of 2 (an integer >= 1 each), got a list of 3",
      err_of('layer.yaml', base:gsub('%[784, 10%]', '[784, 10, 3]')))
    assert.equal(p .. "kind.yaml:4: model.2.lineer: unknown kind (expected one of: adaptive_avg_pool2d, avg_pool2d, " ..
      "batch_norm1d, batch_norm2d, conv2d, dropout, embedding, embedding_bag, flatten, gelu, identity, layer_norm, " ..
      "linear, log_softmax, max_pool2d, module, relu, sigmoid, silu, softmax, tanh)", err_of('kind.yaml', base:gsub('linear:', 'lineer:')))
    assert.equal(p .. "conv.yaml:3: model.1.conv2d.out: missing (expected an integer >= 1)",
      err_of('conv.yaml', base:gsub('  %- flatten:', '  - conv2d: {in: 1, kernel: 3}')))
    assert.equal(p .. "root.yaml:10: data.root: expected the path of an existing directory, got '/no/such/dir' " ..
      "(no such file or directory)", err_of('root.yaml', base .. '  root: /no/such/dir\n'))
    assert.equal(p .. "resume.yaml:10: resume: expected the path of an existing file, got '/no/ckpt.safetensors' " ..
      "(no such file or directory)", err_of('resume.yaml', base .. 'resume: /no/ckpt.safetensors\n'))
    assert.equal(p .. "dev.yaml:10: device: expected cpu, cuda, cuda:N or auto, got 'tpu'",
      err_of('dev.yaml', base .. 'device: tpu\n'))
    assert.equal(p .. 'nomodel.yaml:1: model: missing (expected a list of layers (e.g. - linear: [784, 10]) ' ..
      'or {file: model.lua, args: {...}})',
      err_of('nomodel.yaml', 'job: train\n'))
    assert.equal(p .. "nojob.yaml:1: job: missing (expected one of pagerank, serve, train)", err_of('nojob.yaml', 'epochs: 1\n'))
    assert.equal(p .. "badjob.yaml:1: job: expected one of pagerank, serve, train, got 'dance'", err_of('badjob.yaml', 'job: dance\n'))
    assert.equal(p .. 'list.yaml:1: the top level must be a mapping of keys (job:, model:, ...), got a list of 2',
      err_of('list.yaml', '- 1\n- 2\n'))
    has(err_of('syntax.yaml', 'job: train\nmodel: [1, 2\n'), p .. 'syntax.yaml:3:1: YAML syntax error')
    has(err_of('dup.yaml', 'job: train\njob: train\n'), p .. "dup.yaml:2: duplicate key 'job'")
    assert.equal("ember run: cannot read the pipeline '" .. p .. "none.yaml': no such file", load_error(p .. 'none.yaml'))
  end)

  it('build every layer kind into an nn.Sequential', function()
    local dir = tmpdir()
    local cfg = pipeline.load(write(dir .. '/all.yaml', [[
job: train
model:
  - conv2d: {in: 1, out: 4, kernel: [3, 3], padding: 1, bias: false}
  - batch_norm2d: 4
  - gelu:
  - max_pool2d: {kernel: 2, stride: 2}
  - conv2d: {in: 4, out: 4, kernel: 3, padding: [1, 1], groups: 2}
  - silu:
  - avg_pool2d: 2
  - adaptive_avg_pool2d: [3, 3]
  - flatten:
  - layer_norm: 36
  - dropout: 0.1
  - linear: {in: 36, out: 16, bias: true}
  - batch_norm1d: {features: 16, momentum: 0.2}
  - tanh:
  - sigmoid:
  - relu:
  - linear: [16, 10]
]]))
    local model = require('ember.pipeline.model').build(cfg.model)
    local text = tostring(model)
    local pos = 1
    for _, name in ipairs { 'Conv2d', 'BatchNorm2d', 'GELU', 'MaxPool2d', 'Conv2d', 'SiLU', 'AvgPool2d',
      'AdaptiveAvgPool2d', 'Flatten', 'LayerNorm', 'Dropout', 'Linear', 'BatchNorm1d', 'Tanh', 'Sigmoid', 'ReLU',
      'Linear' } do
      local at = text:find(name .. '(', pos, true)
      assert(at, name .. ' missing or out of order in ' .. text)
      pos = at + 1
    end
    has(text, 'Conv2d(4, 4, kernel_size=(3, 3), stride=1, padding=(1, 1), groups=2)')
    has(text, 'BatchNorm1d(16, eps=1e-05, momentum=0.2')
    assert.same({ 2, 10 }, model(ember.randn(2, 1, 28, 28)).shape)
  end)

  it('take key.path=value overrides read as YAML scalars', function()
    local dir = tmpdir()
    local path = write(dir .. '/o.yaml', base)
    local cfg = pipeline.load(path, {
      'optim.lr=1e-3',                    -- a number
      'optim.name=adam',                  -- a string
      'data.shuffle=false',               -- a boolean
      'optim.betas=[0.8, 0.9]',           -- a list
      'schedule={name: cosine}',          -- a mapping
      'data.batch_size=',                 -- empty: back to the default
      'model.2.linear.2=20',              -- a list item by position
      'model.3.relu=',                    -- a new item at the end
      'checkpoint.dir=/tmp/ck',           -- a key the file does not have
      'device=auto',
    })
    assert.equal(1e-3, cfg.optim.lr)
    assert.equal('adam', cfg.optim.name)
    assert.is_false(cfg.data.shuffle)
    assert.same({ 0.8, 0.9 }, cfg.optim.betas)
    assert.equal('cosine', cfg.schedule.name)
    assert.equal(0, cfg.schedule.warmup_epochs)
    assert.equal(128, cfg.data.batch_size)
    assert.same({ 784, 20 }, cfg.model[2].value)
    assert.equal('relu', cfg.model[3].kind)
    assert.equal('/tmp/ck', cfg.checkpoint.dir)
    assert.equal('auto', cfg.device)
  end)

  it('check overrides like the file and name them in errors', function()
    local dir = tmpdir()
    local path = write(dir .. '/o.yaml', base)
    local function err(...) return load_error(path, { ... }) end
    assert.equal(path .. ": override optim.lr=fast: optim.lr: expected a number > 0, got 'fast'", err('optim.lr=fast'))
    assert.equal(path .. ': override optim.lrate=0.1: optim.lrate: unknown key (expected one of: alpha, betas, ' ..
      'centered, clip_grad_norm, clip_grad_value, dampening, decay_groups, eps, lr, momentum, name, nesterov, ' ..
      'weight_decay)', err('optim.lrate=0.1'))
    assert.equal(path .. ': override nope.deeper=1: nope: unknown key (expected one of: ' .. top_keys() .. ')',
      err('nope.deeper=1'))
    assert.equal(path .. ": 'epochs' is not an override: expected key.path=value (e.g. optim.lr=0.1)", err('epochs'))
    assert.equal(path .. ": override 'optim..lr=1': 'optim..lr' is not a key path such as optim.lr", err('optim..lr=1'))
    has(err('optim.lr=[1'), path .. ": override 'optim.lr=[1': cannot read the value: value:2:1: YAML syntax error")
    assert.equal(path .. ': override model.x=1: model is a list: address its items by position (model.1, model.2, ...)',
      err('model.x=1'))
    assert.equal(path .. ': override model.9.relu=: model.9: there is no item 9 in the list (it has 2)', err('model.9.relu='))
    assert.equal(path .. ': override epochs.max=1: epochs is 10, not a mapping or list, so it has no key max',
      err('epochs=10', 'epochs.max=1'))
    assert.equal(path .. ': override data.batch_size=0: data.batch_size: expected an integer >= 1, got 0',
      err('data.batch_size=0'))
  end)
end)

describe('ember run', function()
  it('trains for an epoch on a subset: one JSON line on stdout, metrics, a checkpoint', function()
    local dir = tmpdir()
    local status, out, err = ember_run(dir, { MLP, 'epochs=1', SMALL, 'checkpoint.dir=' .. dir .. '/ck',
      'log.dir=' .. dir .. '/log' })
    assert.equal(0, status, err)
    local lines = {}
    for line in out:gmatch('[^\n]+') do lines[#lines + 1] = line end
    assert.equal(1, #lines, 'stdout: ' .. out)
    local r = json.decode(lines[1])
    assert.equal('train', r.job)
    assert.equal(1, r.epochs)
    for _, k in ipairs { 'test_accuracy', 'test_loss', 'train_loss', 'train_samples_per_s', 'peak_rss_mb', 'seconds' } do
      assert.equal('number', type(r[k]), k)
    end
    assert.is_true(r.test_accuracy > 0.3 and r.test_accuracy <= 1, 'accuracy ' .. r.test_accuracy)
    assert.is_true(r.peak_rss_mb > 10 and r.peak_rss_mb < 4096)
    has(err, 'epoch 1/1  loss ')   -- a plain line: stderr is not a terminal here
    local metrics = json.decode(read(dir .. '/log/metrics.jsonl'))
    assert.equal(1, metrics.epoch)
    assert.equal(8, metrics.step)  -- 512 samples / 64
    assert.equal(r.test_accuracy, metrics.test_accuracy)
    assert.equal('epoch-0001.safetensors\n', read(dir .. '/ck/latest'))
    local tensors, meta = ember.load(dir .. '/ck/epoch-0001.safetensors')
    assert.same({ 256, 784 }, tensors['model/1.weight'].shape)   -- PyTorch's names: items count from 0
    assert.equal('ember-checkpoint/1', meta.format)
    assert.equal(1, json.decode(meta.state).epoch)
  end)

  it('resumes an interrupted run to the same final numbers and weights', function()
    local dir = tmpdir()
    local args = { MLP, 'epochs=3', SMALL, 'optim.momentum=0.9', 'schedule.name=cosine', 'schedule.warmup_epochs=0.5' }
    local function run(name, ...)
      local a = { unpack(args) }
      for _, x in ipairs { 'checkpoint.dir=' .. dir .. '/' .. name, ... } do a[#a + 1] = x end
      local status, out, err = ember_run(dir, a)
      assert.equal(0, status, err)
      return json.decode(out), err
    end
    local whole = run('whole')
    local first = run('split', 'stop_after_epoch=1')
    assert.equal(1, first.epochs)
    local rest, err = run('split', 'resume=true')
    has(err, 'resumed from ' .. dir .. '/split/epoch-0001.safetensors (epoch 1 done)')
    assert.equal(3, rest.epochs)
    assert.equal(2, rest.epochs_this_run)
    for _, k in ipairs { 'test_accuracy', 'test_loss', 'train_loss', 'train_accuracy' } do
      assert.equal(whole[k], rest[k], k)
    end
    local a = ember.load(dir .. '/whole/epoch-0003.safetensors')
    local b = ember.load(dir .. '/split/epoch-0003.safetensors')
    for name, t in pairs(a) do
      assert.is_true(t:equal(b[name]), name .. ' differs after resuming')
    end
  end)

  it('exits 2 on a bad pipeline and 1 when the job fails, with the reason on stderr', function()
    local dir = tmpdir()
    local status, out, err = ember_run(dir, { MLP, 'optim.lr=fast' })
    assert.equal(2, status)
    assert.equal('', out)
    assert.equal(MLP .. ": override optim.lr=fast: optim.lr: expected a number > 0, got 'fast'\n", err)
    status, out, err = ember_run(dir, { MLP, 'epochs=1', SMALL, 'model.2.linear=[100,256]', 'checkpoint.dir=null',
      'log.dir=null' })
    assert.equal(1, status)
    assert.equal('', out)
    has(err, 'ember run: ' .. MLP .. ': ')
    has(err, 'linear')
    status, out = ember_run(dir, { MLP, '--check', 'epochs=4' })
    assert.equal(0, status)
    assert.equal(4, json.decode(out).epochs)
  end)
end)

describe('learning-rate schedules', function()
  local function lr(s, step)
    local sched = { name = s.name or 'constant', warmup_epochs = s.warmup or 0, step_size = s.step_size or 1,
      gamma = s.gamma or 0.1, min_lr = s.min_lr or 0 }
    return train.lr_at(sched, 1.0, step, 10, 4)   -- 10 steps per epoch, 4 epochs
  end
  it('warm up linearly, then hold, step or follow a cosine', function()
    assert.equal(1, lr({}, 0))
    assert.equal(1, lr({}, 39))
    assert.equal(0.2, lr({ warmup = 0.5 }, 0))
    assert.equal(1.0, lr({ warmup = 0.5 }, 4))
    assert.equal(1.0, lr({ warmup = 0.5 }, 5))
    assert.equal(1, lr({ name = 'step', step_size = 2 }, 19))
    assert.near(0.1, lr({ name = 'step', step_size = 2 }, 20), 1e-15)
    assert.near(0.1, lr({ name = 'step', step_size = 2 }, 39), 1e-15)
    assert.near(0.001, lr({ name = 'step', gamma = 0.1 }, 39), 1e-15)
    assert.equal(1, lr({ name = 'cosine' }, 0))
    assert.near(0.5, lr({ name = 'cosine' }, 20), 1e-12)
    assert.near(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 30 / 40)), lr({ name = 'cosine', min_lr = 0.1 }, 30), 1e-12)
    assert.near(0.5, lr({ name = 'cosine', warmup = 1 }, 10 + 15), 1e-12)   -- half way through the 30 steps after warm-up
  end)
end)

describe('ember.util.json', function()
  it('writes sorted objects and numbers that read back exactly', function()
    assert.equal('{"a":[1,2.5,null],"b":"x\\"y\\n","c":true}', json.encode({ b = 'x"y\n', a = { 1, 2.5, 0 / 0 }, c = true }))
    assert.equal('{"z":1,"a":2}', json.encode({ a = 2, z = 1 }, { order = { 'z' } }))
    for _, x in ipairs { 0.1, 1 / 3, 1e-300, 123456789.125, -2 ^ 60, 0.8846 } do
      assert.equal(x, json.decode(json.encode(x)))
    end
    assert.equal('0.8846', json.encode(0.8846))
    assert.same({ a = { 1, { b = 'é\t' } }, c = false }, json.decode(' {"a": [1, {"b": "\\u00e9\\t"}], "c": false} '))
    assert.has_error(function() json.decode('{"a": 1,}') end)
    assert.has_error(function() json.decode('[1] x') end)
  end)
end)
