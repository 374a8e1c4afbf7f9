-- ember.serve.worker: one serving worker, run in a Lua state of its own on its own thread
-- (ember_threads.spawn from lua/ember/serve/job.lua).
--
-- Builds the model (a training pipeline's model: or a model spec), loads the checkpoint,
-- switches to eval mode, tells the server it is ready, then loops: take a closed batch from
-- the C queue (em_serve_next_batch blocks), run one forward under no_grad, hand the outputs
-- back (the server splits them by rows and answers each request). A forward that raises
-- answers that batch's requests with 500 and the message; the worker goes on. The loop ends
-- when the server shuts down and the model's queue is empty.
--
-- Versions (runtime/serve/versions.c): between two batches the server may ask the worker to
-- load a new checkpoint beside the model it serves (load_version: build, load, a probe
-- forward whose outputs must have the serving version's shapes), then to swap it in once
-- every worker has it, or to drop it when one could not load it; after an unload, to drop
-- the model it serves (a later load then has no serving version to compare with).
local M = {}

-- The process's new allocations (every worker's) after which a worker collects between two
-- batches: under ember.internal's 16 MB nudge, which would collect within a forward.
local GC_AFTER_BYTES = 12 * 1024 * 1024

-- The model's state dict from a checkpoint directory (its `latest`), a training checkpoint
-- file (tensors model/<name>) or a plain safetensors state dict.
function M.load_checkpoint(path)
  local ember = require 'ember'
  local checkpoint = require 'ember.pipeline.checkpoint'
  local S = require 'ember.util.schema'
  local kind = S.path_kind(path)
  if kind == nil then error(string.format("checkpoint '%s': no such file or directory", path), 0) end
  if kind == 'dir' then
    local latest = checkpoint.latest(path)
    if not latest then
      error(string.format("checkpoint '%s': the directory holds no checkpoint yet (no 'latest')", path), 0)
    end
    path = latest
  end
  local tensors, meta = ember.load(path)
  if meta and meta.format == 'ember-checkpoint/1' then return checkpoint.load(path).model, path end
  return tensors, path
end

-- The model a serve job's model entry describes, with its checkpoint loaded, in eval mode.
function M.build(spec)
  local model_spec = require 'ember.pipeline.model'
  local model
  if spec.pipeline then
    local cfg = require('ember.pipeline').load(spec.pipeline, {})
    if cfg.job ~= 'train' then
      error(string.format("pipeline '%s' is a '%s' job; expected a train pipeline (its model: is served)",
        spec.pipeline, cfg.job), 0)
    end
    model = model_spec.build(cfg.model)
  else
    model = model_spec.build(spec.model)
  end
  if spec.checkpoint then
    local sd, path = M.load_checkpoint(spec.checkpoint)
    local ok, err = pcall(model.load_state_dict, model, sd)
    if not ok then error(string.format("checkpoint '%s': %s", path, tostring(err)), 0) end
  end
  model:eval()
  if spec.device and spec.device ~= 'cpu' then model:to(spec.device) end
  return model
end

-- A batch's input on the model's device (the server's tensors are on the CPU).
local function to_device(t, spec)
  if spec.device and spec.device ~= 'cpu' then return t:to(spec.device) end
  return t
end

-- An output as the server takes it: a contiguous CPU tensor.
local function to_host(t)
  if t.device ~= 'cpu' then return t:cpu() end
  return t
end

local function outputs_of(result, spec)
  local ember = require 'ember'
  local list = {}
  if ember.is_tensor(result) then
    list[1] = result
  elseif type(result) == 'table' then
    for i, o in ipairs(spec.outputs) do list[i] = result[o.name] or result[i] end
  end
  for i, o in ipairs(spec.outputs) do
    if not ember.is_tensor(list[i]) then
      error(string.format("the forward gave no tensor for output '%s' (it returned %s)", o.name,
        ember.is_tensor(result) and 'one tensor' or type(result)), 0)
    end
  end
  return list
end

-- One zero-filled row per input (a -1 size taken as 1): enough to see each output's shape.
local function probe_inputs(spec)
  local ember = require 'ember'
  local xs = {}
  for i, io in ipairs(spec.inputs) do
    local shape = { 1 }
    for _, d in ipairs(io.shape or {}) do shape[#shape + 1] = d < 0 and 1 or d end
    xs[i] = to_device(ember.zeros(shape, { dtype = io.dtype }), spec)
  end
  return xs
end

-- One forward of zeros per batch size the worker may see (every size up to 64 rows, then
-- doubling up to max_batch_size), before the worker reports ready: a kernel's plan for a
-- shape (oneDNN's convolutions and matrix products JIT-compile one per batch size, cuDNN picks
-- its algorithms) is then made at start, not inside the first request of each size, where it
-- cost milliseconds. Every worker of the process shares the plans; each warms its own
-- allocations too. A model that refuses zeros (an index input, say) is not warmed: the
-- first failure ends the warm-up, and the requests' own inputs decide what serving says.
-- Returns the batch sizes warmed.
function M.warm_up(model, spec)
  local ember = require 'ember'
  local max = (spec.batching and spec.batching.max_batch_size) or 1
  local sizes, n = {}, 1
  while n <= max do
    sizes[#sizes + 1] = n
    n = n < 64 and n + 1 or n * 2
  end
  if sizes[#sizes] ~= max then sizes[#sizes + 1] = max end
  local ok, one = pcall(probe_inputs, spec)
  if not ok then return 0 end
  local warmed = 0
  for _, rows in ipairs(sizes) do
    local xs = {}
    for i, x in ipairs(one) do
      local shape = { rows }
      for d = 2, #x.shape do shape[d] = x.shape[d] end
      xs[i] = to_device(ember.zeros(shape, { dtype = spec.inputs[i].dtype }), spec)
    end
    local ran = pcall(ember.no_grad, function() return model(unpack(xs, 1, #spec.inputs)) end)
    if not ran then break end
    warmed = warmed + 1
  end
  collectgarbage('collect')
  return warmed
end

local function shape_text(t) return '[' .. table.concat(t.shape, ', ') .. ']' end

-- Builds the model of spec with another checkpoint, and checks that its probe outputs have
-- the declared shapes (outputs[i].shape, one instance) and the serving model's shapes.
function M.load_version(spec, path, serving)
  local ember = require 'ember'
  local s2 = {}
  for k, v in pairs(spec) do s2[k] = v end
  s2.checkpoint = path
  local model = M.build(s2)
  local xs = probe_inputs(spec)
  local n = #spec.inputs
  local ok_new, new_out = pcall(function()
    return outputs_of(ember.no_grad(function() return model(unpack(xs, 1, n)) end), spec)
  end)
  local ok_old, old_out = false, nil
  if serving then
    ok_old, old_out = pcall(function()
      return outputs_of(ember.no_grad(function() return serving(unpack(xs, 1, n)) end), spec)
    end)
  end
  if not ok_new then
    if ok_old then error('its forward fails on an input the serving version takes: ' .. tostring(new_out), 0) end
    return model -- the probe suits neither version: nothing to compare
  end
  for i, o in ipairs(spec.outputs) do
    local got = new_out[i]
    if got.shape[1] ~= 1 then
      error(string.format("output '%s': %s for one input row (expected one output row)", o.name, shape_text(got)), 0)
    end
    if o.shape then
      local want = { 1 }
      for _, d in ipairs(o.shape) do want[#want + 1] = d end
      local same = #want == #got.shape
      for d = 1, #want do same = same and (want[d] < 0 or want[d] == got.shape[d]) end
      if not same then
        error(string.format("output '%s': shape %s, the declared one is [n, %s]", o.name, shape_text(got),
          table.concat(o.shape, ', ')), 0)
      end
    end
    if ok_old then
      local want = old_out[i]
      local same = #want.shape == #got.shape
      for d = 1, #want.shape do same = same and want.shape[d] == got.shape[d] end
      if not same then
        error(string.format("output '%s': shape %s where the serving version gives %s", o.name, shape_text(got),
          shape_text(want)), 0)
      end
    end
  end
  return model
end

function M.main(payload)
  local ffi = require 'ffi'
  local json = require 'ember.util.json'
  local ember = require 'ember'
  local I = require 'ember.internal'
  local C = ember.C
  rawset(_G, 'ember', ember) -- model files may use the global, as in the ember host
  local p = json.decode(payload)
  local server = ffi.cast('em_serve *', ffi.cast('uintptr_t', tonumber(p.server)))
  local spec, index = p.spec, p.model
  C.em_set_num_threads(spec.threads or 1)
  local ok, model = pcall(M.build, spec)
  if not ok then
    local msg = string.format("model '%s': %s", spec.name, tostring(model))
    C.em_serve_stop(server, msg)
    error(msg, 0)
  end
  if spec.warmup ~= false then M.warm_up(model, spec) end
  C.em_serve_model_ready(server, index)
  local bbox = ffi.new('em_serve_batch *[1]')
  local tbox = ffi.new('em_tensor *[1]')
  local state = ffi.new('int64_t[2]', 1, 0) -- the version served, the version prepared beside it
  local task, version = ffi.new('em_serve_task[1]'), ffi.new('int64_t[1]')
  local path = ffi.new('char[1024]')
  local prepared -- the next version's model, loaded and checked
  local n_in, n_out = #spec.inputs, #spec.outputs
  local out_arr = ffi.new('em_tensor *[?]', n_out)
  local batches = 0
  local collected_at = tonumber(C.em_memory_allocated())
  local function fail(st) if st ~= 0 then error(ffi.string(C.em_last_error()), 0) end end
  while true do
    fail(C.em_serve_next(server, index, state, state + 1, bbox, task, version))
    local t = task[0]
    if t == C.EM_SERVE_STOP then break end
    if t == C.EM_SERVE_LOAD then
      local v = version[0]
      local loaded, m2 = pcall(function()
        fail(C.em_serve_version_path(server, index, v, path, 1024))
        return M.load_version(spec, ffi.string(path), model)
      end)
      if loaded then
        prepared = m2
        state[1] = v -- before the report: the last report swaps the version in at once
        C.em_serve_version_prepared(server, index, v, 1, nil)
      else
        C.em_serve_version_prepared(server, index, v, 0, tostring(m2))
      end
    elseif t == C.EM_SERVE_SWAP then
      model, prepared = prepared, nil
      collectgarbage()
    elseif t == C.EM_SERVE_DISCARD then
      prepared = nil
      collectgarbage()
    elseif t == C.EM_SERVE_UNLOAD then -- until a load brings a version back (nothing to compare it with)
      model = nil
      collectgarbage()
    else
      local batch = bbox[0]
      local handed = false
      local run_ok, err = pcall(function()
        local inputs = {}
        for i = 1, n_in do
          fail(C.em_serve_batch_input(batch, i - 1, tbox))
          inputs[i] = to_device(I.wrap(tbox), spec)
        end
        local result = ember.no_grad(function() return model(unpack(inputs, 1, n_in)) end)
        local outs = outputs_of(result, spec)
        for i = 1, n_out do
          outs[i] = to_host(outs[i])
          out_arr[i - 1] = outs[i]
        end
        handed = true
        local st = C.em_serve_batch_complete(batch, n_out, out_arr)
        for i = 1, n_out do out_arr[i - 1] = nil end
        fail(st)
      end)
      if not run_ok and not handed then C.em_serve_batch_fail(batch, tostring(err)) end
      batches = batches + 1
      -- The batch's tensors are garbage now, their memory held until Lua collects them.
      -- ember.internal's allocation nudge would run a full collection inside some later
      -- forward (after 16 MB, every ~70 batch-1 forwards of the Fashion-MNIST CNN), adding its
      -- pause to that batch's requests: collect here instead, once the answers are out.
      local allocated = tonumber(C.em_memory_allocated())
      if allocated - collected_at > GC_AFTER_BYTES then
        collectgarbage('collect')
        collected_at = tonumber(C.em_memory_allocated())
      elseif allocated < collected_at then
        collected_at = allocated
      elseif batches % 16 == 0 then
        collectgarbage('step', 64)
      end
    end
  end
end

return M
