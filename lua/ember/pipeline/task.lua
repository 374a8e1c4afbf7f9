-- ember.pipeline.task: what a training pipeline optimises and reports. `task:` picks the
-- loss and the metrics, and names the batch fields the model reads and the target:
--
--   task: classification                  # cross-entropy; accuracy (top_k: 5 adds top-5)
--   task: {kind: binary, inputs: [dense, sparse], target: label}
--                                         # BCE with logits; accuracy, roc_auc, log_loss
--   task: {kind: regression, loss: huber, huber_delta: 1.0}
--                                         # mse (default), l1 or huber; rmse, mae
--   task: {kind: language_model}          # token cross-entropy over [B, T, V]; perplexity
--   task:
--     kind: classification
--     loss: {file: losses/focal.lua, args: {gamma: 2}}
--     metrics: [accuracy, top5_accuracy, {file: metrics/f1.lua, name: f1}]
--
-- inputs (default [x]) are passed to the model in order; target (default y) is compared
-- with its output. A loss file returns function(output, target, batch, args) -> a scalar
-- loss tensor (the batch mean). A metric file returns either function(output, target,
-- batch, args) -> a number (the batch mean; batches are weighted by their size) or a table
-- {init = function() -> state, update = function(state, output, target, batch, args),
-- result = function(state) -> number}. Files are found relative to the pipeline file.
--
-- From Lua: local t = task.new(cfg.task); t:loss(out, target); local m = t:metrics();
-- m:update(out, target, batch, loss_sum); m:result() -> {loss =, accuracy =, ...}.
local S = require 'ember.util.schema'

local M = {}

M.kinds = {
  classification = { loss = 'cross_entropy', losses = { cross_entropy = true }, metrics = { 'accuracy' },
    allowed = 'accuracy, topK_accuracy (top5_accuracy, ...)' },
  binary = { loss = 'bce_with_logits', losses = { bce_with_logits = true },
    metrics = { 'accuracy', 'roc_auc', 'log_loss' }, allowed = 'accuracy, roc_auc, log_loss' },
  regression = { loss = 'mse', losses = { mse = true, l1 = true, huber = true }, metrics = { 'rmse', 'mae' },
    allowed = 'rmse, mae, mse' },
  language_model = { loss = 'cross_entropy', losses = { cross_entropy = true }, metrics = { 'perplexity' },
    allowed = 'perplexity, accuracy' },
}
local KIND_NAMES = { 'binary', 'classification', 'language_model', 'regression' }

local function file_ref(what)
  return S.record {
    file = S.path { exists = 'file', relative = true, doc = 'a Lua file: ' .. what },
    args = S.map(S.any(), { default = {} }),
    name = S.string { optional = true, pattern = '^[%a_][%w_]*$', doc = 'the name metrics.jsonl shows' },
  }
end

local metric_schema = S.union({
  S.string { pattern = '^[%a_][%w_]*$', expect = 'a metric name' },
  S.record { top_k = S.integer { min = 1 } },
  file_ref('function(output, target, batch, args) -> number, or {init, update, result}'),
}, { expect = 'a metric name (accuracy, roc_auc, rmse, ...), {top_k: K} or {file: metric.lua}' })

local record = S.record({
  kind = S.enum(KIND_NAMES, { default = 'classification' }),
  inputs = S.list(S.string(), { min_len = 1, default = { 'x' }, doc = 'batch fields given to the model, in order' }),
  target = S.string { default = 'y', doc = 'the batch field the output is compared with' },
  loss = S.union({ S.enum({ 'cross_entropy', 'bce_with_logits', 'mse', 'l1', 'huber' }),
    file_ref('function(output, target, batch, args) -> scalar loss tensor') },
    { optional = true, expect = 'cross_entropy, bce_with_logits, mse, l1, huber or {file: loss.lua, args: {...}}' }),
  metrics = S.list(metric_schema, { optional = true, doc = "default: the kind's metrics" }),
  top_k = S.integer { min = 1, optional = true, doc = 'classification: also report topK_accuracy' },
  label_smoothing = S.number { min = 0, lt = 1, optional = true,
    doc = 'cross-entropy (default: loss.label_smoothing)' },
  huber_delta = S.number { gt = 0, default = 1 },
  ignore_index = S.integer { optional = true, doc = 'cross-entropy: a target class that counts for nothing' },
}, {
  check = function(t)
    local k = M.kinds[t.kind]
    if type(t.loss) == 'string' and not k.losses[t.loss] then
      local names = {}
      for n in pairs(k.losses) do names[#names + 1] = n end
      table.sort(names)
      return string.format("loss '%s' does not fit the task %s (expected %s or a file)", t.loss, t.kind,
        table.concat(names, ', '))
    end
    for _, m in ipairs(t.metrics or {}) do
      if type(m) == 'string' and not M.metric_known(t.kind, m) then
        return string.format("metric '%s' does not fit the task %s (expected %s or a file)", m, t.kind, k.allowed)
      end
    end
  end,
})

-- `task:` is a kind name or the mapping above.
M.schema = S.union({ S.enum(KIND_NAMES), record }, { default = { kind = 'classification' },
  expect = 'a task kind (' .. table.concat(KIND_NAMES, ', ') .. ') or {kind:, inputs:, target:, loss:, metrics:}' })
M.record = record

-- Fills in a plain kind name ('binary' -> the record with defaults).
function M.normalise(t)
  if type(t) == 'string' then return S.validate(record, { kind = t }) end
  return t
end

function M.metric_known(kind, name)
  if kind == 'classification' then return name == 'accuracy' or name:match('^top%d+_accuracy$') ~= nil end
  if kind == 'binary' then return name == 'accuracy' or name == 'roc_auc' or name == 'log_loss' end
  if kind == 'regression' then return name == 'rmse' or name == 'mae' or name == 'mse' end
  return name == 'perplexity' or name == 'accuracy'
end

-- ---------------------------------------------------------------- exact ROC AUC
-- roc_auc(scores, labels) -> the area under the ROC curve, exactly: the Mann-Whitney U
-- statistic over the positives' ranks among all scores, tied scores sharing their average
-- rank (so a tie between a positive and a negative counts one half). labels are truthy
-- for positives (numbers: > 0.5). nil when one class is absent (the area is undefined).
function M.roc_auc(scores, labels)
  local n = #scores
  local order = {}
  for i = 1, n do order[i] = i end
  table.sort(order, function(a, b) return scores[a] < scores[b] end)
  local rank_sum, pos = 0, 0
  local i = 1
  while i <= n do
    local j = i
    while j < n and scores[order[j + 1]] == scores[order[i]] do j = j + 1 end
    local avg = (i + j) / 2   -- the average of the ranks i..j
    for k = i, j do
      local l = labels[order[k]]
      if l == true or (type(l) == 'number' and l > 0.5) then
        rank_sum, pos = rank_sum + avg, pos + 1
      end
    end
    i = j + 1
  end
  local neg = n - pos
  if pos == 0 or neg == 0 then return nil end
  return (rank_sum - pos * (pos + 1) / 2) / (pos * neg)
end

-- ---------------------------------------------------------------- files
local function load_file(path, what)
  local chunk, err = loadfile(path)
  if not chunk then error(string.format("%s file '%s': %s", what, path, err), 0) end
  local ok, v = pcall(chunk)
  if not ok then error(string.format("%s file '%s': %s", what, path, tostring(v)), 0) end
  return v
end

local function base_name(path) return (path:match('([^/]+)$') or path):gsub('%.lua$', '') end

-- ---------------------------------------------------------------- the task object
local Task = {}
Task.__index = Task

-- new(cfg_task [, {label_smoothing =}]) -> a task: t.inputs, t.target, t:loss(out, y, batch),
-- t:metrics() (a fresh accumulator).
function M.new(cfg, defaults)
  cfg = M.normalise(cfg)
  local self = setmetatable({ cfg = cfg, kind = cfg.kind, inputs = cfg.inputs, target = cfg.target }, Task)
  self.smoothing = cfg.label_smoothing or (defaults and defaults.label_smoothing) or 0
  self.ignore_index = cfg.ignore_index
  local loss = cfg.loss or M.kinds[cfg.kind].loss
  if type(loss) == 'table' then
    local fn = load_file(loss.file, 'loss')
    if type(fn) ~= 'function' then
      error(string.format("loss file '%s': expected it to return function(output, target, batch, args), got a %s",
        loss.file, type(fn)), 0)
    end
    self.loss_name, self.custom_loss, self.loss_args = base_name(loss.file), fn, loss.args
  else
    self.loss_name = loss
  end
  self.metric_specs = {}
  local names = cfg.metrics
  if not names then
    names = { unpack(M.kinds[cfg.kind].metrics) }
    if cfg.top_k then names[#names + 1] = 'top' .. cfg.top_k .. '_accuracy' end
  end
  for _, m in ipairs(names) do
    local spec
    if type(m) == 'string' then
      spec = { name = m }
    elseif m.top_k then
      spec = { name = 'top' .. m.top_k .. '_accuracy' }
    else
      local v = load_file(m.file, 'metric')
      if type(v) ~= 'function' and not (type(v) == 'table' and type(v.update) == 'function' and
          type(v.result) == 'function') then
        error(string.format("metric file '%s': expected it to return function(output, target, batch, args) -> " ..
          'number or {init =, update =, result =}, got a %s', m.file, type(v)), 0)
      end
      spec = { name = m.name or (type(v) == 'table' and v.name) or base_name(m.file), custom = v, args = m.args }
    end
    self.metric_specs[#self.metric_specs + 1] = spec
  end
  return self
end

-- The model's output for a batch (the inputs named by the task, in order).
function Task:forward(model, batch)
  local args = {}
  for i, name in ipairs(self.inputs) do
    local v = batch[name]
    if v == nil then
      local have = {}
      for k in pairs(batch) do have[#have + 1] = tostring(k) end
      table.sort(have)
      error(string.format("task.inputs: the batch has no field '%s' (it has %s)", name, table.concat(have, ', ')), 0)
    end
    args[i] = v
  end
  return model(unpack(args, 1, #self.inputs))
end

function Task:target_of(batch)
  local y = batch[self.target]
  if y == nil then
    local have = {}
    for k in pairs(batch) do have[#have + 1] = tostring(k) end
    table.sort(have)
    error(string.format("task.target: the batch has no field '%s' (it has %s)", self.target, table.concat(have, ', ')),
      0)
  end
  return y
end

-- Output and target as the built-in losses take them: binary and regression targets in
-- the output's dtype and shape ([B] against [B, 1]); language models flattened to tokens.
function Task:prepare(out, y)
  local kind = self.kind
  if kind == 'binary' or kind == 'regression' then
    if y.dtype ~= out.dtype then y = y:to(out.dtype) end
    if y:numel() == out:numel() and #y.shape ~= #out.shape then y = y:reshape(out.shape) end
  elseif kind == 'language_model' then
    if out:dim() == 3 then
      out = out:reshape(out.shape[1] * out.shape[2], out.shape[3])
      y = y:reshape(y:numel())
    end
  end
  return out, y
end

local function ce_opts(self, reduction)
  return { label_smoothing = self.smoothing, reduction = reduction, ignore_index = self.ignore_index }
end

-- The batch's loss (a scalar tensor, the mean over samples or tokens).
function Task:loss(out, y, batch)
  if self.custom_loss then return self.custom_loss(out, y, batch, self.loss_args) end
  local F = require('ember').nn.functional
  local o, t = self:prepare(out, y)
  local name = self.loss_name
  if name == 'cross_entropy' then return F.cross_entropy(o, t, ce_opts(self)) end
  if name == 'bce_with_logits' then return F.binary_cross_entropy_with_logits(o, t) end
  if name == 'mse' then return F.mse_loss(o, t) end
  local a = (o - t):abs()
  if name == 'l1' then return a:mean() end
  -- huber: 0.5 d^2 below delta, delta (|d| - delta / 2) above; q = min(|d|, delta) gives both
  local delta = self.cfg.huber_delta
  local q = a:clamp_max(delta)
  return (q * q * 0.5 + (a - q) * delta):mean()
end

-- ---------------------------------------------------------------- metrics
local Acc = {}
Acc.__index = Acc

function Task:metrics()
  local acc = setmetatable({ task = self, n = 0, loss_sum = 0, sums = {}, states = {}, scores = nil, labels = nil,
    tokens = 0, values = 0 }, Acc)
  local specs = self.metric_specs
  acc.plain = self.kind == 'classification' and #specs == 1 and specs[1].name == 'accuracy' and not specs[1].custom
  for _, spec in ipairs(specs) do
    acc.sums[spec.name] = 0
    if type(spec.custom) == 'table' then acc.states[spec.name] = spec.custom.init and spec.custom.init() or {} end
    if spec.name == 'roc_auc' then acc.scores, acc.labels = {}, {} end
  end
  return acc
end

local function flat_numbers(t) return t:reshape(t:numel()):to('float64'):totable() end

-- update(out, y, batch, loss): adds a batch (out: the model's output, y: the target, loss:
-- the batch's mean loss as a number). Runs without recording gradients.
function Acc:update(out, y, batch, loss)
  local ember = require 'ember'
  local F = ember.nn.functional
  local task = self.task
  if self.plain and y:dim() == 1 then -- a classifier's own accuracy: one count, no closure or detached copy
    local b = y:size(1)
    self.n, self.values, self.tokens = self.n + b, self.values + b, self.tokens + b
    self.loss_sum = self.loss_sum + loss * b
    self.sums.accuracy = self.sums.accuracy + F.count_correct(out, y)
    return
  end
  ember.no_grad(function()
    out = out:detach()
    local o, t = task:prepare(out, y)
    local b = y.shape[1] or 1
    local count = b   -- samples (tokens for a language model): what the loss is a mean over
    if task.kind == 'language_model' then
      count = t:numel()
      if task.ignore_index then count = count - t:eq(task.ignore_index):sum():item() end
    end
    self.n = self.n + b
    self.values = self.values + t:numel()
    self.tokens = self.tokens + count
    self.loss_sum = self.loss_sum + loss * count
    for _, spec in ipairs(task.metric_specs) do
      local name = spec.name
      if spec.custom then
        if type(spec.custom) == 'function' then
          self.sums[name] = self.sums[name] + spec.custom(out, y, batch, spec.args) * b
        else
          spec.custom.update(self.states[name], out, y, batch, spec.args)
        end
      elseif name == 'accuracy' then
        if task.kind == 'binary' then
          local pred = o:gt(0):to(t.dtype)
          self.sums[name] = self.sums[name] + pred:eq(t:gt(0.5):to(t.dtype)):sum():item()
        elseif task.kind == 'language_model' and task.ignore_index then
          local keep = t:ne(task.ignore_index)
          self.sums[name] = self.sums[name] + o:argmax(2):eq(t):logical_and(keep):sum():item()
        else
          self.sums[name] = self.sums[name] + F.count_correct(o, t)
        end
      elseif name:match('^top%d+_accuracy$') then
        local k = math.min(tonumber(name:match('^top(%d+)')), o.shape[#o.shape])
        local _, idx = o:topk(k, -1)
        local hit = idx:eq(t:reshape(t:numel(), 1)):sum():item()
        self.sums[name] = self.sums[name] + hit
      elseif name == 'roc_auc' then
        local s, l = flat_numbers(o), flat_numbers(t)
        local ns = #self.scores
        for i = 1, #s do self.scores[ns + i], self.labels[ns + i] = s[i], l[i] end
      elseif name == 'log_loss' then
        self.sums[name] = self.sums[name] + F.binary_cross_entropy_with_logits(o, t, { reduction = 'sum' }):item()
      elseif name == 'rmse' or name == 'mse' then
        local d = o:to('float64') - t:to('float64')
        self.sums[name] = self.sums[name] + (d * d):sum():item()
      elseif name == 'mae' then
        self.sums[name] = self.sums[name] + (o:to('float64') - t:to('float64')):abs():sum():item()
      end
    end
  end)
end

-- result() -> {loss =, <metric> = number, ...} over everything added.
function Acc:result()
  local task = self.task
  local r = { loss = self.tokens > 0 and self.loss_sum / self.tokens or nil }
  local n, values = math.max(self.n, 1), math.max(self.values, 1)
  for _, spec in ipairs(task.metric_specs) do
    local name, v = spec.name, self.sums[spec.name]
    if type(spec.custom) == 'table' then
      v = spec.custom.result(self.states[name])
    elseif spec.custom then
      v = v / n
    elseif name == 'roc_auc' then
      v = M.roc_auc(self.scores, self.labels)
    elseif name == 'perplexity' then
      v = r.loss and math.exp(r.loss)
    elseif name == 'accuracy' and task.kind == 'language_model' then
      v = v / math.max(self.tokens, 1)
    elseif name == 'rmse' or name == 'mse' or name == 'mae' or name == 'log_loss' or name == 'accuracy' and
        task.kind == 'binary' then
      v = v / values   -- per value: a target may hold several per sample
      if name == 'rmse' then v = math.sqrt(v) end
    else
      v = v / n
    end
    r[name] = v
  end
  return r
end

return M
