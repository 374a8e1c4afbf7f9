-- ember.serve: a client of `ember serve`'s ZeroMQ endpoint (ember/serve.h em_serve_client_*,
-- runtime/serve/client.c; the protocol: runtime/serve/wire.c). The server side is the
-- `serve` job (ember.serve.job) and its workers (ember.serve.worker).
--
--   local client = ember.serve.Client{endpoint = 'tcp://127.0.0.1:5556', timeout = 30}
--   local out = client:infer('fmnist_mlp', {input = x})   -- x: [n, 1, 28, 28] float32
--   print(out.logits:argmax(2))                           -- the outputs by name
--   client:version()                                      -- the model version that answered
--   client:load('fmnist_mlp', 'runs/fashion_mnist_mlp/checkpoints')   -- the next version
--   client:unload('fmnist_mlp')                           -- until the next load
--   client:close()
-- A server error (a wrong shape names the field, an unknown model, a full queue) is raised
-- as a Lua error with its status: "... answered 400: tensors[0] (input).shape[2]: ...".
local ffi = require 'ffi'
local I = require 'ember.internal'
local C = I.C
local throw, describe, check, check_opts, option_set = I.throw, I.describe, I.check, I.check_opts, I.option_set

local M = {}

local Client = {}
Client.__index = Client

local OPTS = option_set('endpoint', 'timeout')

function M.Client(opts)
  check_opts('Client', opts, OPTS, 1)
  opts = opts or {}
  if type(opts.endpoint) ~= 'string' then
    throw('Client: endpoint must be a ZeroMQ address such as tcp://127.0.0.1:5556, got ' .. describe(opts.endpoint))
  end
  local timeout = opts.timeout or 30
  if type(timeout) ~= 'number' or timeout <= 0 then
    throw('Client: timeout must be a number of seconds > 0, got ' .. describe(timeout))
  end
  local box = ffi.new('em_serve_client*[1]')
  check(C.em_serve_client_open(box, opts.endpoint, timeout))
  return setmetatable({ _ptr = ffi.gc(box[0], C.em_serve_client_close), endpoint = opts.endpoint }, Client)
end

local function ptr(c, op)
  if getmetatable(c) ~= Client or c._ptr == nil then throw('Client:' .. op .. ': the client is closed') end
  return c._ptr
end

-- infer(model, {name = tensor, ...}): the outputs, {name = tensor, ...}, on the CPU.
function Client:infer(model, inputs)
  local p = ptr(self, 'infer')
  if type(model) ~= 'string' then throw('Client:infer: model must be a name, got ' .. describe(model)) end
  if type(inputs) ~= 'table' then
    throw('Client:infer: inputs must be a table {name = tensor}, got ' .. describe(inputs))
  end
  local names = {} -- the tensors stay alive in inputs while the C call reads them
  for k in pairs(inputs) do
    if type(k) ~= 'string' then throw('Client:infer: input names must be strings, got ' .. describe(k)) end
    names[#names + 1] = k
  end
  table.sort(names)
  if #names == 0 then throw('Client:infer: inputs is empty (expected {name = tensor, ...})') end
  local cnames = ffi.new('const char *[?]', #names)
  local ctensors = ffi.new('em_tensor *[?]', #names)
  for i, k in ipairs(names) do
    local t = inputs[k]
    if not I.is_tensor(t) then throw("Client:infer: input '" .. k .. "' must be a tensor, got " .. describe(t)) end
    cnames[i - 1] = k
    ctensors[i - 1] = t
  end
  local n = ffi.new('int[1]')
  check(C.em_serve_client_infer(p, model, #names, cnames, ctensors, n))
  local out, box = {}, ffi.new('em_tensor *[1]')
  for i = 0, n[0] - 1 do
    check(C.em_serve_client_output(p, i, box))
    out[ffi.string(C.em_serve_client_output_name(p, i))] = I.wrap(box)
  end
  return out
end

function Client:version() return tonumber(C.em_serve_client_version(ptr(self, 'version'))) end

-- load(model[, checkpoint]): loads a checkpoint (a directory, whose latest is used, or a
-- safetensors file, on the server's machine; none: the one the model was started with, read
-- again) as the model's next version; returns that version once every worker serves it. A
-- checkpoint that fails raises the server's reason.
function Client:load(model, checkpoint)
  local p = ptr(self, 'load')
  if type(model) ~= 'string' then throw('Client:load: model must be a name, got ' .. describe(model)) end
  if checkpoint ~= nil and type(checkpoint) ~= 'string' then
    throw('Client:load: checkpoint must be a path, got ' .. describe(checkpoint))
  end
  local v = ffi.new('int64_t[1]')
  check(C.em_serve_client_load(p, model, checkpoint, v))
  return tonumber(v[0])
end

-- unload(model): the model stops serving (its queued requests are answered, new ones refused)
-- until a load; returns the version unloaded.
function Client:unload(model)
  local p = ptr(self, 'unload')
  if type(model) ~= 'string' then throw('Client:unload: model must be a name, got ' .. describe(model)) end
  local v = ffi.new('int64_t[1]')
  check(C.em_serve_client_unload(p, model, v))
  return tonumber(v[0])
end

function Client:close()
  if self._ptr ~= nil then
    C.em_serve_client_close(ffi.gc(self._ptr, nil))
    self._ptr = nil
  end
end

return M
