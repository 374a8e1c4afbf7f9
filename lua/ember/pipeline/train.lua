-- ember.pipeline.train: the `job: train` pipeline kind. Trains a model built from the
-- file's `model:` list on a dataset, evaluates it on the test set after every epoch,
-- checkpoints every epoch and can resume; see pipelines/fashion_mnist_mlp.yaml for a
-- commented file and M.schema below for every key and its default.
--
-- Reproducibility: the model is initialised right after ember.manual_seed(seed); the
-- loader's order depends on (data.seed, epoch) only; the learning rate is a function of
-- the step number. A checkpoint holds the model, the optimizer state, the generator state,
-- the loader state and the step, so a run resumed from the checkpoint of epoch k computes
-- exactly what the uninterrupted run computed after epoch k (same thread count: floating
-- point sums depend on how work is split).
local S = require 'ember.util.schema'
local json = require 'ember.util.json'
local model_spec = require 'ember.pipeline.model'
local progress = require 'ember.util.progress'
local checkpoint = require 'ember.pipeline.checkpoint'

local M = { doc = 'train a model on a dataset, evaluate it each epoch, checkpoint, resume' }

local DATASETS = {
  ['fashion-mnist'] = { ctor = 'FashionMNIST', root = '/usr/share/datasets/fashion-mnist' },
  mnist = { ctor = 'MNIST' },
}

M.schema = {
  model = model_spec.schema(),
  data = S.record({
    dataset = S.enum({ 'fashion-mnist', 'mnist' }, { default = 'fashion-mnist' }),
    root = S.path { exists = 'dir', optional = true, doc = "the dataset's directory (default: Debian's)" },
    batch_size = S.integer { min = 1, default = 128 },
    test_batch_size = S.integer { min = 1, default = 1000 },
    shuffle = S.boolean { default = true },
    seed = S.integer { min = 0, optional = true, doc = 'the order seed (default: the top-level seed)' },
    drop_last = S.boolean { default = false },
    normalise = S.union({ S.boolean(),
      S.record { mean = S.number { default = 0 }, std = S.number { gt = 0, default = 1 } } },
      { default = true, expect = 'true, false or {mean:, std:}' }),
    limit = S.integer { min = 1, optional = true, doc = 'use the first N training samples' },
    test_limit = S.integer { min = 1, optional = true, doc = 'use the first N test samples' },
  }, { default = {} }),
  optim = S.record({
    name = S.enum({ 'sgd', 'adam', 'adamw' }, { default = 'sgd' }),
    lr = S.number { gt = 0, default = 0.01 },
    momentum = S.number { min = 0, default = 0 },
    dampening = S.number { min = 0, default = 0 },
    nesterov = S.boolean { default = false },
    weight_decay = S.number { min = 0, optional = true, doc = 'default 0 (sgd, adam) or 0.01 (adamw)' },
    betas = S.list(S.number { min = 0, lt = 1 }, { len = 2, default = { 0.9, 0.999 } }),
    eps = S.number { gt = 0, default = 1e-8 },
    clip_grad_norm = S.number { gt = 0, optional = true },
  }, { default = {} }),
  schedule = S.record({
    name = S.enum({ 'constant', 'step', 'cosine' }, { default = 'constant' }),
    warmup_epochs = S.number { min = 0, default = 0, doc = 'linear warm-up, per step, over this many epochs' },
    step_size = S.integer { min = 1, default = 1, doc = 'step: epochs between decays' },
    gamma = S.number { gt = 0, default = 0.1, doc = 'step: the decay factor' },
    min_lr = S.number { min = 0, default = 0, doc = 'cosine: the final learning rate' },
  }, { default = {} }),
  loss = S.record({
    label_smoothing = S.number { min = 0, lt = 1, default = 0 },
  }, { default = {} }),
  epochs = S.integer { min = 1, default = 10 },
  stop_after_epoch = S.integer { min = 1, optional = true,
    doc = 'end this run after that epoch, checkpoint written (a job split over several runs)' },
  evaluate = S.boolean { default = true },
  checkpoint = S.record({
    dir = S.path { optional = true, doc = 'null: no checkpoints' },
    keep = S.integer { min = 0, default = 0, doc = 'keep the newest N checkpoint files; 0 keeps all' },
  }, { default = {} }),
  log = S.record({
    dir = S.path { optional = true, doc = 'metrics.jsonl goes here; null: none' },
    progress = S.enum({ 'auto', 'bar', 'lines', 'none' }, { default = 'auto' }),
    interval = S.number { gt = 0, default = 30, doc = 'seconds between progress lines (lines mode)' },
  }, { default = {} }),
  resume = S.union({ S.boolean(), S.path { exists = 'file' } }, { default = false,
    expect = 'true (the latest checkpoint of checkpoint.dir), false, or a checkpoint file' }),
}

-- The data section's reader keys (workers, source, transforms, endpoint, ...): lua/ember/data/yaml.lua.
require('ember.data.yaml').extend_schema(M.schema.data)

M.result_order = { 'job', 'test_accuracy', 'test_loss', 'train_loss', 'train_accuracy', 'train_samples_per_s',
  'peak_rss_mb', 'epochs', 'seconds' }

-- ---------------------------------------------------------------- pieces
local function make_datasets(cfg, ctx)
  local data = require('ember').data
  local d = cfg.data
  local spec = DATASETS[d.dataset]
  local root = d.root or spec.root
  if not root then S.fail(ctx, 'data.root', 'missing (the ' .. d.dataset .. ' dataset has no default directory)') end
  local norm = d.normalise
  local train = data.datasets[spec.ctor] { root = root, train = true, normalise = norm, limit = d.limit }
  local test = data.datasets[spec.ctor] { root = root, train = false, normalise = norm, limit = d.test_limit }
  return train, test
end

local function make_optimizer(o, params)
  local optim = require('ember').optim
  if o.name == 'sgd' then
    return optim.SGD(params, { lr = o.lr, momentum = o.momentum, dampening = o.dampening, nesterov = o.nesterov,
      weight_decay = o.weight_decay or 0 })
  end
  local ctor = o.name == 'adam' and optim.Adam or optim.AdamW
  return ctor(params, { lr = o.lr, betas = o.betas, eps = o.eps,
    weight_decay = o.weight_decay or (o.name == 'adamw' and 0.01 or 0) })
end

-- The one place loaders are made: a loader with another transport (reader processes)
-- replaces this, keeping the interface documented in lua/ember/data.lua (epoch, state,
-- load_state, num_batches, num_samples, close).
function M.make_loader(opts) return require('ember').data.DataLoader(opts) end

-- The learning rate at step (0-based, counted over the whole run).
function M.lr_at(sched, base, step, steps_per_epoch, epochs)
  local warm = sched.warmup_epochs * steps_per_epoch
  if step < warm then return base * (step + 1) / warm end
  if sched.name == 'step' then
    local epoch = math.floor(step / steps_per_epoch)
    return base * sched.gamma ^ math.floor(epoch / sched.step_size)
  elseif sched.name == 'cosine' then
    local total = epochs * steps_per_epoch - warm
    local t = total > 0 and (step - warm) / total or 1
    return sched.min_lr + (base - sched.min_lr) * 0.5 * (1 + math.cos(math.pi * math.min(t, 1)))
  end
  return base
end

local function set_lr(opt, lr)
  for _, g in ipairs(opt.param_groups) do g.lr = lr end
end

-- uint64 generator state <-> decimal strings (JSON numbers would lose bits past 2^53).
local function u64_text(x) return (tostring(x):gsub('U?LL$', '')) end
local function u64_parse(s)
  local ffi = require 'ffi'
  local v = ffi.new('uint64_t', 0)
  for c in s:gmatch('%d') do v = v * 10 + tonumber(c) end
  return v
end

-- Loss and accuracy of model over a loader, without recording gradients.
local function evaluate(ember, model, loader, label_smoothing)
  local F = ember.nn.functional
  local loss_sum, correct, n = 0, 0, 0
  model:eval()
  ember.no_grad(function()
    for batch in loader:epoch(0) do
      local out = model(batch.x)
      local b = batch.y.shape[1]
      local loss = F.cross_entropy(out, batch.y, { reduction = 'sum', label_smoothing = label_smoothing })
      loss_sum = loss_sum + loss:item()
      correct = correct + F.count_correct(out, batch.y)
      n = n + b
    end
  end)
  model:train()
  return loss_sum / math.max(n, 1), correct / math.max(n, 1)
end

local function append_line(path, line)
  local f, err = io.open(path, 'a')
  if not f then error(string.format("cannot write metrics to '%s': %s", path, err), 0) end
  f:write(line, '\n')
  f:close()
end

-- ---------------------------------------------------------------- the job
function M.run(cfg, ctx)
  local ember = require 'ember'
  local nn = ember.nn
  local F = nn.functional
  local t_start = progress.now()

  -- Set by a `distributed:` section's setup, when there is one: this process's rank (0-based)
  -- and the world size shard the data; wrap_model (e.g. DistributedDataParallel) wraps the
  -- model; only the main rank writes checkpoints, metrics and the result.
  local rank, world_size = ctx.rank or 0, ctx.world_size or 1
  local is_main = rank == 0

  local train_set, test_set = make_datasets(cfg, ctx)
  local data_yaml = require 'ember.data.yaml'   -- readers over ZeroMQ when data: asks for them
  local loader = data_yaml.wants_pipeline(cfg.data) and data_yaml.train_loader(cfg, rank, world_size) or
    M.make_loader { dataset = train_set, batch_size = cfg.data.batch_size, shuffle = cfg.data.shuffle,
      seed = cfg.data.seed or cfg.seed, drop_last = cfg.data.drop_last, rank = rank, world_size = world_size }
  local test_loader = M.make_loader { dataset = test_set, batch_size = cfg.data.test_batch_size }
  local steps_per_epoch = loader:num_batches()
  if steps_per_epoch == 0 then
    S.fail(ctx, 'data.batch_size', string.format('the batch size %d leaves no batch in the %d training samples ' ..
      '(with drop_last)', cfg.data.batch_size, train_set:size()))
  end

  local model = model_spec.build(cfg.model)
  if cfg.device ~= 'cpu' then model:to(cfg.device) end
  local opt = make_optimizer(cfg.optim, model:parameters())

  -- resume
  local first_epoch, step, last = 1, 0, nil
  local ckpt_dir = cfg.checkpoint.dir
  local resume_from = cfg.resume
  if resume_from == true then
    if not ckpt_dir then S.fail(ctx, 'resume', 'true needs checkpoint.dir (where to find the latest checkpoint)') end
    resume_from = checkpoint.latest(ckpt_dir)
    if not resume_from then ctx.log('resume: no checkpoint in %s yet, starting from epoch 1', ckpt_dir) end
  end
  if resume_from then
    local ck = checkpoint.load(resume_from)
    model:load_state_dict(ck.model)
    opt:load_state_dict(ck.optim.tensors or {}, ck.optim.meta or {})
    local st = ck.state
    ember.set_rng_state { seed = u64_parse(st.rng.seed), offset = u64_parse(st.rng.offset) }
    loader:load_state(st.loader)
    first_epoch, step, last = st.epoch + 1, st.step, st.metrics
    ctx.log('resumed from %s (epoch %d done)', resume_from, st.epoch)
  end
  -- wrapped after loading: a checkpoint holds the plain model's names
  local net = ctx.wrap_model and ctx.wrap_model(model) or model

  local metrics_path
  if cfg.log.dir and is_main then
    checkpoint.mkdirs(cfg.log.dir)
    metrics_path = cfg.log.dir .. '/metrics.jsonl'
  end

  local train_time, train_samples, epochs_run = 0, 0, 0
  local last_epoch = math.min(cfg.epochs, cfg.stop_after_epoch or cfg.epochs)
  local base_lr, smoothing = cfg.optim.lr, cfg.loss.label_smoothing
  local clip = cfg.optim.clip_grad_norm
  local params = clip and model:parameters()
  model:train()
  for epoch = first_epoch, last_epoch do
    local bar = progress.new { mode = is_main and cfg.log.progress or 'none', interval = cfg.log.interval,
      total = loader:num_samples(), label = string.format('epoch %d/%d', epoch, cfg.epochs) }
    local loss_sum, correct, seen = 0, 0, 0
    local lr
    local t0 = progress.now()
    for batch in loader:epoch(epoch) do
      lr = M.lr_at(cfg.schedule, base_lr, step, steps_per_epoch, cfg.epochs)
      set_lr(opt, lr)
      local out = net(batch.x)
      local loss = F.cross_entropy(out, batch.y, { label_smoothing = smoothing })
      opt:zero_grad()
      loss:backward()
      if clip then nn.utils.clip_grad_norm_(params, clip) end
      opt:step()
      local b = batch.y.shape[1]
      local l = loss:item()
      if l ~= l then error(string.format('the loss is NaN at epoch %d, step %d (lr %g)', epoch, step + 1, lr), 0) end
      loss_sum = loss_sum + l * b
      correct = correct + F.count_correct(out, batch.y)
      seen = seen + b
      step = step + 1
      bar:update(seen, { loss = loss_sum / seen, data = loader.progress_text and loader:progress_text() or nil,
        _order = { 'loss', 'data' } })
    end
    local dt = progress.now() - t0
    train_time, train_samples, epochs_run = train_time + dt, train_samples + seen, epochs_run + 1

    local m = { epoch = epoch, step = step, lr = lr, train_loss = loss_sum / math.max(seen, 1),
      train_accuracy = correct / math.max(seen, 1), train_samples_per_s = seen / dt, train_seconds = dt }
    m.data = loader.epoch_stats and loader:epoch_stats() or nil   -- per-stage seconds of the pipeline
    if cfg.evaluate then
      local te = progress.now()
      m.test_loss, m.test_accuracy = evaluate(ember, model, test_loader, smoothing)
      m.eval_seconds = progress.now() - te
    end
    bar:finish(string.format('epoch %d/%d  loss %.4f  train_acc %.4f%s  %.0f samples/s  %.1f s', epoch, cfg.epochs,
      m.train_loss, m.train_accuracy, m.test_accuracy and string.format('  test_acc %.4f  test_loss %.4f',
        m.test_accuracy, m.test_loss) or '', m.train_samples_per_s, dt))
    if metrics_path then
      append_line(metrics_path, json.encode(m, { order = { 'epoch', 'step', 'lr', 'train_loss', 'train_accuracy',
        'test_loss', 'test_accuracy' } }))
    end
    if ckpt_dir and is_main then
      local rng = ember.get_rng_state()
      local opt_tensors, opt_meta = opt:state_dict()
      checkpoint.save(ckpt_dir, epoch, {
        model = model:state_dict(), optim = { tensors = opt_tensors, meta = opt_meta },
        state = { epoch = epoch, step = step, loader = loader:state(), metrics = m,
          rng = { seed = u64_text(rng.seed), offset = u64_text(rng.offset) } },
      }, { keep = cfg.checkpoint.keep })
    end
    last = m
  end

  if metrics_path then require('ember.plot').after_training(metrics_path, ctx.log) end   -- curves.png beside it
  loader:close()
  test_loader:close()
  if not is_main then return nil end
  last = last or {}
  return {
    job = 'train',
    test_accuracy = last.test_accuracy, test_loss = last.test_loss,
    train_loss = last.train_loss, train_accuracy = last.train_accuracy,
    train_samples_per_s = train_time > 0 and train_samples / train_time or nil,
    peak_rss_mb = progress.peak_rss_mb(),
    epochs = last.epoch or 0, epochs_this_run = epochs_run,
    seconds = progress.now() - t_start,
    threads = tonumber(ember.C.em_get_num_threads()),
    checkpoint = ckpt_dir and last.epoch and (ckpt_dir .. '/' .. checkpoint.file_name(last.epoch)) or nil,
  }
end

return M
