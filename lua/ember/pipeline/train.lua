-- ember.pipeline.train: the `job: train` pipeline kind. Trains a model (a `model:` layer
-- list or a Lua model file, lua/ember/pipeline/model.lua) for a task (`task:`, its loss and
-- metrics, lua/ember/pipeline/task.lua) on the training set, evaluates it on the validation
-- and test sets after every epoch (`data:`, lua/ember/pipeline/datasets.lua), checkpoints
-- every epoch and can resume; see pipelines/fashion_mnist_mlp.yaml for a commented file and
-- M.schema below for every key and its default.
--
-- Logs (log.dir): metrics.jsonl, one JSON line per epoch (train_*, val_*, test_* metrics);
-- steps.jsonl, one line per log.every steps (step, epoch, loss, lr, samples_per_s); and
-- TensorBoard event files holding the same numbers (tags train/loss, train/lr,
-- train/samples_per_s per step, epoch/<metric> per epoch at the epoch's last step).
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
local task_spec = require 'ember.pipeline.task'
local datasets = require 'ember.pipeline.datasets'
local progress = require 'ember.util.progress'
local checkpoint = require 'ember.pipeline.checkpoint'

local M = { doc = 'train a model for a task, evaluate it each epoch on its own data, checkpoint, resume' }

M.schema = {
  model = model_spec.schema(),
  task = task_spec.schema,
  data = S.record({
    dataset = S.enum({ 'fashion-mnist', 'mnist' }, { default = 'fashion-mnist' }),
    root = S.path { exists = 'dir', relative = true, optional = true,
      doc = "the dataset's directory (default: Debian's)" },
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
    name = S.enum({ 'sgd', 'adam', 'adamw', 'adagrad', 'rmsprop' }, { default = 'sgd',
      doc = 'sgd (momentum 0) and adagrad also update sparse embedding tables row by row' }),
    lr = S.number { gt = 0, default = 0.01 },
    momentum = S.number { min = 0, default = 0 },
    dampening = S.number { min = 0, default = 0 },
    nesterov = S.boolean { default = false },
    weight_decay = S.number { min = 0, optional = true, doc = 'default 0 (sgd, adam) or 0.01 (adamw)' },
    betas = S.list(S.number { min = 0, lt = 1 }, { len = 2, default = { 0.9, 0.999 } }),
    eps = S.number { gt = 0, default = 1e-8 },
    alpha = S.number { min = 0, max = 1, default = 0.99, doc = 'rmsprop: the smoothing constant' },
    centered = S.boolean { default = false, doc = 'rmsprop: divide by the centred variance' },
    decay_groups = S.boolean { default = false,
      doc = "weight decay only on tensors of 2+ dims (nanoGPT's rule: not biases, not norms)" },
    clip_grad_norm = S.number { gt = 0, optional = true },
    clip_grad_value = S.number { gt = 0, optional = true, doc = 'clamp each gradient value to [-v, v]' },
  }, { default = {} }),
  schedule = S.record({
    name = S.enum({ 'constant', 'step', 'cosine' }, { default = 'constant' }),
    warmup_epochs = S.number { min = 0, default = 0, doc = 'linear warm-up, per step, over this many epochs' },
    warmup_steps = S.integer { min = 0, optional = true, doc = 'linear warm-up over this many steps (not epochs)' },
    step_size = S.integer { min = 1, default = 1, doc = 'step: epochs between decays' },
    gamma = S.number { gt = 0, default = 0.1, doc = 'step: the decay factor' },
    min_lr = S.number { min = 0, default = 0, doc = 'cosine: the final learning rate' },
  }, { default = {} }),
  loss = S.record({
    label_smoothing = S.number { min = 0, lt = 1, default = 0, doc = 'cross-entropy (or task.label_smoothing)' },
  }, { default = {} }),
  epochs = S.integer { min = 1, default = 10 },
  stop_after_epoch = S.integer { min = 1, optional = true,
    doc = 'end this run after that epoch, checkpoint written (a job split over several runs)' },
  evaluate = S.boolean { default = true },
  amp = S.enum({ 'off', 'bfloat16', 'float16' }, { default = 'off',
    doc = "mixed precision: the model's forward and loss under ember.autocast with this dtype (cpu: bfloat16, " ..
      'computed by oneDNN with float32 sums; cuda: either), its backward in the same precision' }),
  checkpoint = S.record({
    dir = S.path { optional = true, doc = 'null: no checkpoints' },
    keep = S.integer { min = 0, default = 0, doc = 'keep the newest N checkpoint files; 0 keeps all' },
  }, { default = {} }),
  log = S.record({
    dir = S.path { optional = true, doc = 'metrics.jsonl goes here; null: none' },
    progress = S.enum({ 'auto', 'bar', 'lines', 'none' }, { default = 'auto' }),
    interval = S.number { gt = 0, default = 30, doc = 'seconds between progress lines (lines mode)' },
    every = S.integer { min = 1, default = 1, doc = 'steps between lines of steps.jsonl and TensorBoard points' },
    tensorboard = S.boolean { default = true, doc = 'TensorBoard event files in log.dir' },
  }, { default = {} }),
  resume = S.union({ S.boolean(), S.path { exists = 'file' } }, { default = false,
    expect = 'true (the latest checkpoint of checkpoint.dir), false, or a checkpoint file' }),
}

-- The data section's reader keys (workers, source, transforms, endpoint, ...): lua/ember/data/yaml.lua.
require('ember.data.yaml').extend_schema(M.schema.data)

M.result_order = { 'job', 'test_accuracy', 'test_loss', 'train_loss', 'train_accuracy', 'train_samples_per_s',
  'peak_rss_mb', 'epochs', 'seconds' }

-- ---------------------------------------------------------------- pieces
-- The built-in training set in this process (the data: section asks for no reader loader).
local function builtin_train_set(cfg)
  local d = cfg.data
  local ctor = d.dataset == 'mnist' and 'MNIST' or 'FashionMNIST'
  return require('ember').data.datasets[ctor] { root = d.root, train = true, normalise = d.normalise, limit = d.limit }
end

local function make_optimizer(o, model)
  local optim = require('ember').optim
  local params = model:parameters()
  if o.decay_groups then
    params = optim.weight_decay_groups(model, o.weight_decay or (o.name == 'adamw' and 0.01 or 0))
  end
  if o.name == 'rmsprop' then
    return optim.RMSprop(params, { lr = o.lr, alpha = o.alpha, eps = o.eps, momentum = o.momentum,
      centered = o.centered, weight_decay = o.weight_decay or 0 })
  end
  if o.name == 'sgd' then
    return optim.SGD(params, { lr = o.lr, momentum = o.momentum, dampening = o.dampening, nesterov = o.nesterov,
      weight_decay = o.weight_decay or 0 })
  end
  if o.name == 'adagrad' then   -- dense and row-sparse gradients (sparse embedding tables) alike
    return optim.Adagrad(params, { lr = o.lr, eps = o.eps, weight_decay = o.weight_decay or 0 })
  end
  local ctor = o.name == 'adam' and optim.Adam or optim.AdamW
  return ctor(params, { lr = o.lr, betas = o.betas, eps = o.eps,
    weight_decay = o.weight_decay or (o.name == 'adamw' and 0.01 or 0) })
end

-- The tokenizer of a {format: text} training source (nil for other data).
function M.tokenizer_of(d)
  local src = d and d.source
  if type(src) ~= 'table' or src.format ~= 'text' then return nil end
  return require('ember').text.corpus(src).tokenizer
end

-- The one place loaders are made: a loader with another transport (reader processes)
-- replaces this, keeping the interface documented in lua/ember/data.lua (epoch, state,
-- load_state, num_batches, num_samples, close).
function M.make_loader(opts) return require('ember').data.DataLoader(opts) end

-- The learning rate at step (0-based, counted over the whole run).
function M.lr_at(sched, base, step, steps_per_epoch, epochs)
  local warm = sched.warmup_steps or sched.warmup_epochs * steps_per_epoch
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

local function forward_loss(task, model, batch)
  local o, t = task:forward(model, batch), task:target_of(batch)
  return o, t, task:loss(o, t, batch)
end

-- The task's loss and metrics of model over a loader, without recording gradients:
-- {loss =, accuracy =, ...}.
local function evaluate(ember, task, model, loader, amp)
  local acc = task:metrics()
  model:eval()
  ember.no_grad(function()
    for batch in loader:epoch(0) do
      local out, y, loss = amp(task, model, batch)
      acc:update(out, y, batch, loss:item())
    end
  end)
  model:train()
  return acc:result()
end

local function append_line(path, line)
  local f, err = io.open(path, 'a')
  if not f then error(string.format("cannot write metrics to '%s': %s", path, err), 0) end
  f:write(line, '\n')
  f:close()
end

-- Names the logs use for a set's metrics: train_loss, val_accuracy, test_roc_auc, ...
local function prefixed(m, prefix, r)
  for k, v in pairs(r) do m[prefix .. '_' .. k] = v end
end

local EPOCH_ORDER = { 'epoch', 'step', 'lr', 'train_loss', 'train_accuracy', 'val_loss', 'val_accuracy', 'test_loss',
  'test_accuracy' }

-- ---------------------------------------------------------------- the job
function M.run(cfg, ctx)
  local ember = require 'ember'
  -- runs fn() under autocast when cfg.amp asks for it (the device type of cfg.device)
  -- The task's output, target and loss for a batch, under autocast when cfg.amp asks
  -- (without it, no closure a step).
  local function amp(t, model, batch)
    if cfg.amp == 'off' then return forward_loss(t, model, batch) end
    return ember.autocast(cfg.device, { dtype = cfg.amp }, function() return forward_loss(t, model, batch) end)
  end
  local nn = ember.nn
  local t_start = progress.now()

  -- Set by a `distributed:` section's setup, when there is one: this process's rank (0-based)
  -- and the world size shard the data; wrap_model (e.g. DistributedDataParallel) wraps the
  -- model; only the main rank writes checkpoints, metrics and the result.
  local rank, world_size = ctx.rank or 0, ctx.world_size or 1
  local is_main = rank == 0

  local task = task_spec.new(cfg.task, { label_smoothing = cfg.loss.label_smoothing })
  local sets = datasets.plan(cfg, ctx)
  local data_yaml = require 'ember.data.yaml'   -- readers over ZeroMQ when data: asks for them
  local loader
  if data_yaml.wants_pipeline(cfg.data) then
    loader = data_yaml.train_loader(cfg, rank, world_size, datasets.train_subset(sets))
  else
    loader = M.make_loader { dataset = builtin_train_set(cfg), batch_size = cfg.data.batch_size,
      shuffle = cfg.data.shuffle, seed = cfg.data.seed or cfg.seed, drop_last = cfg.data.drop_last, rank = rank,
      world_size = world_size }
  end
  local eval_loaders = {}
  if cfg.evaluate then
    for _, which in ipairs { 'val', 'test' } do
      eval_loaders[which] = datasets.eval_loader(cfg, sets, which, M.make_loader)
    end
  end
  local steps_per_epoch = loader:num_batches()
  if steps_per_epoch == 0 then
    S.fail(ctx, 'data.batch_size', string.format('the batch size %d leaves no batch in the %d training samples ' ..
      '(with drop_last)', cfg.data.batch_size, loader:num_samples()))
  end

  -- A text corpus (data.source: {format: text}) brings a tokenizer: its vocabulary size is
  -- the model file's args.vocab_size unless given, and it is saved beside the checkpoints.
  local tokenizer = M.tokenizer_of(cfg.data)
  if tokenizer and cfg.model.file and cfg.model.args.vocab_size == nil then
    cfg.model.args.vocab_size = tokenizer:vocab_size()
  end
  -- distributed.embeddings: sharded: the model file builds model-parallel tables
  local sharded = ctx.embeddings == 'sharded'
  if sharded then
    if not cfg.model.file then
      S.fail(ctx, 'distributed.embeddings', 'sharded needs a model file that takes args.embeddings ' ..
        "(as examples/dlrm.lua), not a list of layers")
    end
    cfg.model.args.embeddings = 'sharded'
  end
  local model = model_spec.build(cfg.model)
  if sharded then
    local found = false
    for _, m in ipairs(model:modules()) do found = found or m.model_parallel == true end
    if not found then
      S.fail(ctx, 'distributed.embeddings', string.format("sharded: the model from '%s' has no model-parallel " ..
        "tables (it ignored args.embeddings = 'sharded')", cfg.model.file))
    end
  end
  -- a model file and its args, kept in checkpoints so that examples/sample.lua rebuilds it
  local model_ref = cfg.model.file and
    { file = require('ember.util.libc').realpath(cfg.model.file) or cfg.model.file, args = cfg.model.args } or nil
  if cfg.device ~= 'cpu' then model:to(cfg.device) end
  local opt = make_optimizer(cfg.optim, model)

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
    -- a sharded run's manifest: each rank reads its own file (the same world size only)
    local ck = checkpoint.load(resume_from, { rank = rank, world = world_size })
    if sharded ~= (ck.state.shard ~= nil) then
      S.fail(ctx, 'resume', string.format("'%s' %s model-parallel tables, this run %s", resume_from,
        ck.state.shard and 'holds' or 'has no', sharded and 'shards them (distributed.embeddings: sharded)' or
        'does not (distributed.embeddings: replicated)'))
    end
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

  local metrics_path, steps_path, tb
  if cfg.log.dir and is_main then
    checkpoint.mkdirs(cfg.log.dir)
    metrics_path = cfg.log.dir .. '/metrics.jsonl'
    steps_path = cfg.log.dir .. '/steps.jsonl'
    if cfg.log.tensorboard then tb = ember.tensorboard.SummaryWriter { logdir = cfg.log.dir, flush_secs = 30 } end
  end
  local steps_file
  if steps_path then
    steps_file = io.open(steps_path, 'a')
    if not steps_file then error(string.format("cannot write step logs to '%s'", steps_path), 0) end
  end

  -- Each step's batch, output and loss go back to the runtime as the step ends (Tensor.free),
  -- not when Lua's collector runs: the next batch is assembled in memory still in cache, and
  -- the collector (a full collection, ~1 ms, every ~40 steps of the Fashion-MNIST MLP for its
  -- 400 KB batches) hardly runs; the MLP's step took 10-25% less time. Only when nothing but
  -- ember's own code saw them, so nothing can hold them for later: a model from a list of
  -- layers, not wrapped, and the task's own loss and metrics.
  local release_steps = not cfg.model.file and not ctx.wrap_model and not task.custom_loss
  for _, spec in ipairs(task.metric_specs) do release_steps = release_steps and not spec.custom end
  local is_tensor = require('ember.internal').is_tensor
  local function release_step(batch, out, loss)
    for _, v in pairs(batch) do
      if is_tensor(v) then v:free() end
    end
    if is_tensor(out) then out:free() end
    if is_tensor(loss) then loss:free() end
  end

  local train_time, train_samples, epochs_run = 0, 0, 0
  local last_epoch = math.min(cfg.epochs, cfg.stop_after_epoch or cfg.epochs)
  local base_lr = cfg.optim.lr
  local clip, clip_value = cfg.optim.clip_grad_norm, cfg.optim.clip_grad_value
  local params = (clip or clip_value) and model:parameters()
  if tokenizer and is_main then
    for _, dir in pairs { ckpt_dir or false, cfg.log.dir or false } do
      if dir then
        checkpoint.mkdirs(dir)
        tokenizer:save(dir .. '/tokenizer.txt')
      end
    end
  end
  local every = cfg.log.every
  model:train()
  for epoch = first_epoch, last_epoch do
    local bar = progress.new { mode = is_main and cfg.log.progress or 'none', interval = cfg.log.interval,
      total = loader:num_samples(), label = string.format('epoch %d/%d', epoch, cfg.epochs) }
    local acc = task:metrics()
    local seen, loss_sum = 0, 0
    local lr
    local t0 = progress.now()
    local t_step = t0
    for batch in loader:epoch(epoch) do
      lr = M.lr_at(cfg.schedule, base_lr, step, steps_per_epoch, cfg.epochs)
      set_lr(opt, lr)
      local out, y, loss = amp(task, net, batch)
      opt:zero_grad()
      loss:backward()
      if net.after_backward then net:after_backward() end   -- DDP: sparse tables' rows exchanged
      if clip_value then nn.utils.clip_grad_value_(params, clip_value) end
      if clip then nn.utils.clip_grad_norm_(params, clip) end
      opt:step()
      local b = y.shape[1] or 1
      local l = loss:item()
      if l ~= l then error(string.format('the loss is NaN at epoch %d, step %d (lr %g)', epoch, step + 1, lr), 0) end
      acc:update(out, y, batch, l)
      loss_sum = loss_sum + l * b
      seen = seen + b
      step = step + 1
      local now = progress.now()
      if steps_file and step % every == 0 then
        local rec = { step = step, epoch = epoch, loss = l, lr = lr, samples_per_s = b / math.max(now - t_step, 1e-9) }
        steps_file:write(json.encode(rec, { order = { 'step', 'epoch', 'loss', 'lr', 'samples_per_s' } }), '\n')
        if tb then
          tb:add_scalar('train/loss', rec.loss, step)
          tb:add_scalar('train/lr', rec.lr, step)
          tb:add_scalar('train/samples_per_s', rec.samples_per_s, step)
        end
      end
      t_step = now
      bar:update(seen, { loss = loss_sum / seen, data = loader.progress_text and loader:progress_text() or nil,
        _order = { 'loss', 'data' } })
      if release_steps then release_step(batch, out, loss) end
    end
    local dt = progress.now() - t0
    train_time, train_samples, epochs_run = train_time + dt, train_samples + seen, epochs_run + 1

    local m = { epoch = epoch, step = step, lr = lr, train_samples_per_s = seen / dt, train_seconds = dt }
    prefixed(m, 'train', acc:result())
    m.data = loader.epoch_stats and loader:epoch_stats() or nil   -- per-stage seconds of the pipeline
    local te = progress.now()
    for _, which in ipairs { 'val', 'test' } do
      if eval_loaders[which] then prefixed(m, which, evaluate(ember, task, model, eval_loaders[which], amp)) end
    end
    if next(eval_loaders) then m.eval_seconds = progress.now() - te end
    local shown = {}
    for _, which in ipairs { 'val', 'test' } do
      for _, k in ipairs { 'accuracy', 'loss' } do
        local v = m[which .. '_' .. k]
        if v then shown[#shown + 1] = string.format('  %s_%s %.4f', which, k == 'accuracy' and 'acc' or k, v) end
      end
    end
    bar:finish(string.format('epoch %d/%d  loss %.4f%s%s  %.0f samples/s  %.1f s', epoch, cfg.epochs,
      m.train_loss, m.train_accuracy and string.format('  train_acc %.4f', m.train_accuracy) or '',
      table.concat(shown), m.train_samples_per_s, dt))
    if metrics_path then
      append_line(metrics_path, json.encode(m, { order = EPOCH_ORDER }))
    end
    if tb then
      local keys = {}
      for k, v in pairs(m) do
        if type(v) == 'number' and k ~= 'epoch' and k ~= 'step' then keys[#keys + 1] = k end
      end
      table.sort(keys)
      for _, k in ipairs(keys) do tb:add_scalar('epoch/' .. k, m[k], step) end
      tb:flush()
    end
    if steps_file then steps_file:flush() end
    -- one file when every rank holds the same model; with sharded tables, every rank its own
    -- (its tables, optimizer and loader state), then rank 0 the manifest once all are written
    if ckpt_dir and (is_main or sharded) then
      local rng = ember.get_rng_state()
      local opt_tensors, opt_meta = opt:state_dict()
      local parts = {
        model = model:state_dict(), optim = { tensors = opt_tensors, meta = opt_meta },
        state = { epoch = epoch, step = step, loader = loader:state(), metrics = m, model = model_ref,
          rng = { seed = u64_text(rng.seed), offset = u64_text(rng.offset) } },
      }
      if sharded then
        checkpoint.save_shard(ckpt_dir, epoch, rank, world_size, parts)
        ember.dist.barrier()
        if is_main then checkpoint.commit_shards(ckpt_dir, epoch, world_size, { keep = cfg.checkpoint.keep }) end
      else
        checkpoint.save(ckpt_dir, epoch, parts, { keep = cfg.checkpoint.keep })
      end
    end
    last = m
  end

  if metrics_path then require('ember.plot').after_training(metrics_path, ctx.log) end   -- curves.png beside it
  loader:close()
  for _, l in pairs(eval_loaders) do l:close() end
  if steps_file then steps_file:close() end
  if tb then tb:close() end
  if not is_main then return nil end
  last = last or {}
  local result = {
    job = 'train',
    train_samples_per_s = train_time > 0 and train_samples / train_time or nil,
    peak_rss_mb = progress.peak_rss_mb(),
    epochs = last.epoch or 0, epochs_this_run = epochs_run,
    seconds = progress.now() - t_start,
    threads = tonumber(ember.C.em_get_num_threads()),
    checkpoint = ckpt_dir and last.epoch and (ckpt_dir .. '/' .. (sharded and checkpoint.manifest_name(last.epoch) or
      checkpoint.file_name(last.epoch))) or nil,
  }
  for k, v in pairs(last) do   -- the last epoch's metrics
    if type(v) == 'number' and (k:match('^train_') or k:match('^val_') or k:match('^test_')) and
        k ~= 'train_samples_per_s' and k ~= 'train_seconds' then
      result[k] = v
    end
  end
  return result
end

return M
