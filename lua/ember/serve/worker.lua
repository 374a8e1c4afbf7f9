-- ember.serve.worker: one serving worker, run in a Lua state of its own on its own thread
-- (ember_threads.spawn from lua/ember/serve/job.lua).
--
-- Builds the model (a training pipeline's model: or a model spec), loads the checkpoint,
-- switches to eval mode, tells the server it is ready, then loops: take a closed batch from
-- the C queue (em_serve_next_batch blocks), run one forward under no_grad, hand the outputs
-- back (the server splits them by rows and answers each request). A forward that raises
-- answers that batch's requests with 500 and the message; the worker goes on. The loop ends
-- when the server shuts down and the model's queue is empty.
local M = {}

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
  return model
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
  C.em_serve_model_ready(server, index)
  local bbox = ffi.new('em_serve_batch *[1]')
  local tbox = ffi.new('em_tensor *[1]')
  local n_in, n_out = #spec.inputs, #spec.outputs
  local out_arr = ffi.new('em_tensor *[?]', n_out)
  local batches = 0
  while true do
    if C.em_serve_next_batch(server, index, bbox) ~= 0 then error(ffi.string(C.em_last_error()), 0) end
    local batch = bbox[0]
    if batch == nil then break end
    local handed = false
    local run_ok, err = pcall(function()
      local inputs = {}
      for i = 1, n_in do
        if C.em_serve_batch_input(batch, i - 1, tbox) ~= 0 then error(ffi.string(C.em_last_error()), 0) end
        inputs[i] = I.wrap(tbox)
      end
      local result = ember.no_grad(function() return model(unpack(inputs, 1, n_in)) end)
      local outs = outputs_of(result, spec)
      for i = 1, n_out do out_arr[i - 1] = outs[i] end
      handed = true
      local st = C.em_serve_batch_complete(batch, n_out, out_arr)
      for i = 1, n_out do out_arr[i - 1] = nil end
      if st ~= 0 then error(ffi.string(C.em_last_error()), 0) end
    end)
    if not run_ok and not handed then C.em_serve_batch_fail(batch, tostring(err)) end
    batches = batches + 1
    -- the batch's tensors are garbage now; collect them in small steps, not in one pause
    if batches % 16 == 0 then collectgarbage('step', 64) end
  end
end

return M
