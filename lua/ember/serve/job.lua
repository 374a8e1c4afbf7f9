-- ember.serve.job: the `serve` pipeline job, `ember serve pipelines/NAME.yaml key=value ...`.
--
--   job: serve
--   models:
--     - name: fmnist_mlp
--       pipeline: fashion_mnist_mlp.yaml      # a training pipeline's model: ...
--       # model: {file: models/mlp.lua, args: {hidden: 64}}   # ... or a model file
--       checkpoint: runs/fashion_mnist_mlp/checkpoints   # a checkpoint directory (its `latest`)
--                                                        # or a .safetensors file
--       inputs:  [{name: input, dtype: float32, shape: [1, 28, 28]}]   # one instance, -1: any size
--       outputs: [{name: logits, dtype: float32}]
--       batching: {max_batch_size: 64, max_delay_us: 500, max_queue: 1024, policy: spare}
--                           # spare: a batch also closes at once while 2+ workers are idle;
--                           # deadline: only when full or when its oldest request waited the delay
--       workers: 2          # Lua states on threads of their own, one forward at a time each
--       threads: 1          # ember/OpenBLAS threads per worker
--       warmup: true        # a forward per batch size before ready: kernel plans made at start
--       device: cpu         # or cuda / cuda:N: the model's weights and each batch on that GPU
--   http: {host: 127.0.0.1, port: 8000, threads: 2}
--   zmq: tcp://127.0.0.1:5556   # optional: the binary ZeroMQ endpoint (or a port: loopback)
--
-- A new checkpoint is swapped in live with POST /v2/repository/models/NAME/load
-- {"parameters": {"checkpoint": PATH}} (runtime/serve/versions.c, worker.lua's load_version).
--
-- The C server (runtime/serve, ember/serve.h) parses and queues requests and closes the
-- batches; each worker (lua/ember/serve/worker.lua) builds the model in its own Lua state,
-- loads the checkpoint, and runs one forward per batch in eval mode under no_grad. The
-- main state waits for SIGTERM/SIGINT, then shuts down after answering every accepted
-- request. The job's result line gives the requests served.
local S = require 'ember.util.schema'
local json = require 'ember.util.json'
local model_spec = require 'ember.pipeline.model'

local M = { doc = 'serve models over HTTP (KServe v2) and ZeroMQ with dynamic batching' }

local dtypes = { 'float32', 'float64', 'int32', 'int64', 'uint8', 'bool' }

local function optional_model_schema()
  local s = model_spec.schema()
  s.optional = true
  return s
end

local io_schema = S.record {
  name = S.string { pattern = '^[%w_.%-]+$' },
  dtype = S.enum(dtypes, { default = 'float32' }),
  shape = S.list(S.integer { min = -1 }, { optional = true, doc = 'one instance, without the batch dimension' }),
}

M.schema = {
  models = S.list(S.record {
    name = S.string { pattern = '^[%w_.%-]+$', doc = 'the model name in /v2/models/NAME' },
    pipeline = S.path { exists = 'file', relative = true, optional = true,
      doc = 'a training pipeline whose model: is served' },
    model = optional_model_schema(),
    checkpoint = S.path { optional = true,
      doc = 'a checkpoint directory (its latest) or a .safetensors file; relative to the working folder, ' ..
        'as training writes it' },
    inputs = S.list(io_schema, { min_len = 1 }),
    outputs = S.list(io_schema, { min_len = 1 }),
    batching = S.record({
      max_batch_size = S.integer { min = 1, default = 32 },
      max_delay_us = S.integer { min = 0, default = 500 },
      max_queue = S.integer { min = 1, default = 1024, doc = 'requests waiting; more get 503 at once' },
      policy = S.enum({ 'spare', 'deadline' }, { default = 'spare',
        doc = 'spare: a batch that is not full closes when its oldest request has waited max_delay_us, or at ' ..
          'once while more than one worker of the model is idle; deadline: only when it has waited' }),
    }, { default = {} }),
    workers = S.integer { min = 1, max = 256, default = 1 },
    threads = S.integer { min = 1, default = 1, doc = 'ember threads per worker' },
    warmup = S.boolean { default = true,
      doc = 'one forward of zeros per batch size before the worker is ready (kernel plans made at start)' },
    device = S.string { default = 'cpu', doc = "cpu, cuda or cuda:N: where the model's forward runs" },
  }, { min_len = 1 }),
  http = S.record({
    host = S.string { default = '127.0.0.1', doc = 'loopback unless an interface is named (0.0.0.0: all)' },
    port = S.integer { min = 0, max = 65535, default = 8000, doc = '0 picks a free port' },
    threads = S.integer { min = 1, max = 1024, default = 2 },
  }, { default = {} }),
  zmq = S.union({ S.integer { min = 0, max = 65535 }, S.string { pattern = '^%a[%w+.-]*://.+' } }, { optional = true,
    doc = 'the binary ZeroMQ endpoint: an address (tcp://127.0.0.1:5556; tcp://0.0.0.0:5556 or tcp://*:5556 ' ..
      'for every interface) or a port on loopback (0 picks a free one)' }),
  shutdown_timeout_s = S.number { gt = 0, default = 30 },
}
M.result_order = { 'served', 'models' }

-- The code each worker thread runs in its own Lua state.
local worker_code = "return require('ember.serve.worker').main(...)"

local function check(ember, status)
  if status ~= 0 then error(require('ffi').string(ember.C.em_last_error()), 0) end
end

function M.run(cfg, ctx)
  local ffi = require 'ffi'
  local ember = require 'ember'
  local C = ember.C
  local threads = require 'ember_threads'
  for i, m in ipairs(cfg.models) do
    local where = 'models.' .. i
    if (m.pipeline ~= nil) == (m.model ~= nil) then
      S.fail(ctx, where, 'expected exactly one of pipeline: (a training pipeline) or model: (layers or {file:, args:})')
    end
    local index = m.device == 'cuda' and 0 or tonumber(m.device:match('^cuda:(%d+)$'))
    if m.device ~= 'cpu' and not index then
      S.fail(ctx, where .. '.device', string.format("expected cpu, cuda or cuda:N, got '%s'", m.device))
    elseif index then
      local count = ember.cuda.device_count()
      if index >= count then
        S.fail(ctx, where .. '.device', string.format('%s is not available: %s', m.device, count == 0 and
          'no CUDA device found (`ember info` lists the devices)' or count .. ' CUDA device(s)'))
      end
    end
    for k, io in ipairs(m.inputs) do
      if not io.shape then
        S.fail(ctx, where .. '.inputs.' .. k .. '.shape', "missing (one instance's shape, e.g. [784])")
      end
    end
  end
  local box = ffi.new('em_serve *[1]')
  check(ember, C.em_serve_create(box))
  local server = ffi.gc(box[0], C.em_serve_destroy)
  local index = ffi.new('int[1]')
  local dtype = ffi.new('em_dtype[1]')
  for _, m in ipairs(cfg.models) do
    local b = m.batching
    check(ember, C.em_serve_add_model(server, m.name, b.max_batch_size, b.max_delay_us, b.max_queue, index))
    local policy = b.policy == 'spare' and C.EM_SERVE_SPARE or C.EM_SERVE_DEADLINE
    check(ember, C.em_serve_model_policy(server, index[0], policy))
    for _, io in ipairs(m.inputs) do
      check(ember, C.em_dtype_from_name(io.dtype, dtype))
      local shape = ffi.new('int64_t[?]', math.max(#io.shape, 1), io.shape)
      check(ember, C.em_serve_add_input(server, index[0], io.name, dtype[0], #io.shape, shape))
    end
    for _, io in ipairs(m.outputs) do
      check(ember, C.em_dtype_from_name(io.dtype, dtype))
      check(ember, C.em_serve_add_output(server, index[0], io.name, dtype[0]))
    end
    check(ember, C.em_serve_model_source(server, index[0], m.workers, m.checkpoint or ''))
  end
  check(ember, C.em_serve_listen_http(server, cfg.http.host, cfg.http.port, cfg.http.threads))
  local zmq_endpoint
  if cfg.zmq ~= nil then
    local ep = cfg.zmq
    if type(ep) == 'number' then ep = 'tcp://127.0.0.1:' .. (ep == 0 and '*' or tostring(ep)) end
    check(ember, C.em_serve_listen_zmq(server, ep))
    zmq_endpoint = ffi.string(C.em_serve_zmq_endpoint(server))
  end
  -- the address as exact decimal digits: tostring would round a double to 14 significant
  -- digits, and x86-64 addresses (< 2^47) are exact in a double
  local address = string.format('%.0f', tonumber(ffi.cast('uintptr_t', server)))
  local workers = {}
  for i, m in ipairs(cfg.models) do
    for w = 1, m.workers do
      local payload = json.encode { server = address, model = i - 1, worker = w, spec = m,
        base_dir = ctx.base_dir or '.' }
      workers[#workers + 1] = { thread = threads.spawn(worker_code, payload), model = m.name }
    end
  end
  ctx.log('ember serve: listening on http://%s:%d%s (%s)', cfg.http.host, C.em_serve_http_port(server),
    zmq_endpoint and ' and ' .. zmq_endpoint or '',
    table.concat((function()
      local names = {}
      for _, m in ipairs(cfg.models) do names[#names + 1] = m.name .. ' x' .. m.workers end
      return names
    end)(), ', '))
  check(ember, C.em_serve_wait(server, 1))
  local failure = C.em_serve_failure(server)
  failure = failure ~= nil and ffi.string(failure) or nil
  ctx.log('ember serve: %s', failure and 'stopping: ' .. failure or 'shutting down after the accepted requests')
  local drained = C.em_serve_shutdown(server, cfg.shutdown_timeout_s)
  local drain_error = drained ~= 0 and ffi.string(C.em_last_error()) or nil
  local worker_errors = {}
  for _, w in ipairs(workers) do
    local ok, err = w.thread:join()
    if not ok then worker_errors[#worker_errors + 1] = w.model .. ': ' .. tostring(err) end
  end
  local text = C.em_serve_metrics_text(server)
  local served = 0
  if text ~= nil then
    for n in ffi.string(text):gmatch('ember_serve_requests_total{[^}]*} (%d+)') do served = served + tonumber(n) end
    C.em_serve_free_string(text)
  end
  C.em_serve_destroy(ffi.gc(server, nil))
  if failure then error(failure, 0) end
  if #worker_errors > 0 then error('worker failed: ' .. table.concat(worker_errors, '; '), 0) end
  if drain_error then error(drain_error, 0) end
  local names = {}
  for _, m in ipairs(cfg.models) do names[#names + 1] = m.name end
  return { served = served, models = names }
end

local usage = [[
usage: ember serve PIPELINE.yaml [key.path=value ...] [--check]

Serves the models of a `job: serve` pipeline over HTTP (the KServe v2 protocol):
  POST /v2/models/NAME/infer   {"inputs": [{"name", "shape", "datatype", "data"}]}
  GET  /v2/models/NAME, /v2/models/NAME/ready, /v2/health/live, /v2/health/ready, /metrics
  POST /v2/repository/models/NAME/load {"parameters": {"checkpoint": PATH}}  swaps a version in
  POST /v2/repository/models/NAME/unload, POST /v2/repository/index [{"ready": true}]
and, with zmq: ADDRESS, over ZeroMQ (ember.serve.Client, examples/serve_client.py).
Requests are batched per model (batching.max_batch_size rows, batching.max_delay_us).
SIGTERM or Ctrl-C stops it after answering every accepted request. Every key: lua/ember/serve/job.lua.
]]

function M.main(argv)
  for _, a in ipairs(argv or {}) do
    if a == '-h' or a == '--help' then
      io.stdout:write(usage)
      return 0
    end
  end
  return require('ember.pipeline').main(argv, { job = 'serve', command = 'ember serve' })
end

return M
