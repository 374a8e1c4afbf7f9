-- ember.data.worker: the reader process, `ember reader`.
--
--   ember reader --connect tcp://HOST:PORT [--connect ...] PIPELINE.yaml [key.path=value ...]
--   ember reader --connect ipc://... --spec SPEC.json --parent PID     (started by a ReaderLoader)
--
-- A reader loads the dataset the pipeline's `data:` section names (paths are this host's),
-- connects to the trainers, and then serves leases until it is stopped: each lease is a
-- list of sample ids, read, decoded and augmented here and sent back as one batch. Its
-- random numbers are keyed by (seed, epoch, sample id), so the batch is the one any other
-- reader would have made. Options:
--   --connect EP         a trainer's endpoint (repeat, or comma-separate, to serve several)
--   --name NAME          shown in the trainers' messages (default: host:pid)
--   --curve-server KEY   the trainers' CurveZMQ public key (Z85)
--   --curve-keys FILE    this reader's key pair (public: / secret: lines; default: a new pair)
--   --no-shm             never hand batches over through shared memory
--   --heartbeat S        seconds between heartbeats before a trainer says (default 0.5)
local ffi = require 'ffi'
local libc = require 'ember.util.libc'
local ember = require 'ember'
local json = require 'ember.util.json'
local source = require 'ember.data.source'

local C = ember.C
local I = require 'ember.internal'
local M = {}

local usage = [[
usage: ember reader --connect ENDPOINT [--connect ENDPOINT ...] PIPELINE.yaml [key.path=value ...]
       ember reader --connect ENDPOINT --spec SPEC.json [--parent PID]

Serves batches of the dataset in PIPELINE.yaml's data: section to the trainers at ENDPOINT
(tcp://HOST:PORT, as the trainer prints it), until stopped.
Options: --name NAME, --curve-server KEY, --curve-keys FILE, --no-shm, --heartbeat SECONDS
]]

local function fail(msg)
  io.stderr:write('ember reader: ', msg, '\n')
  return 2
end

local function read_file(path)
  local f, err = io.open(path, 'r')
  if not f then error(string.format("cannot read '%s': %s", path, err), 0) end
  local s = f:read('*a')
  f:close()
  return s
end

-- A key file: lines "public: <z85>" and "secret: <z85>" (ember.data.curve_keygen writes it).
function M.read_keys(path)
  local text = read_file(path)
  local pub, sec = text:match('public:%s*(%S+)'), text:match('secret:%s*(%S+)')
  if not pub or not sec or #pub ~= 40 or #sec ~= 40 then
    error(string.format("'%s' is not a key file (expected lines 'public: <40 Z85 characters>' and 'secret: ...')",
      path), 0)
  end
  return pub, sec
end

local function parse_args(argv)
  local a = { connect = {}, overrides = {}, shm = true }
  local i = 1
  local function value(name)
    i = i + 1
    if argv[i] == nil then error(name .. ' needs a value', 0) end
    return argv[i]
  end
  while i <= #argv do
    local w = argv[i]
    if w == '-h' or w == '--help' then
      a.help = true
    elseif w == '--connect' then
      for ep in value(w):gmatch('[^,]+') do a.connect[#a.connect + 1] = ep end
    elseif w == '--spec' then
      a.spec = value(w)
    elseif w == '--parent' then
      a.parent = tonumber(value(w))
    elseif w == '--name' then
      a.name = value(w)
    elseif w == '--curve-server' then
      a.curve_server = value(w)
    elseif w == '--curve-keys' then
      a.curve_keys = value(w)
    elseif w == '--heartbeat' then
      a.heartbeat = tonumber(value(w))
    elseif w == '--no-shm' then
      a.shm = false
    elseif w:sub(1, 1) == '-' then
      error(string.format("unknown option '%s' (see ember reader --help)", w), 0)
    elseif not a.pipeline and not w:find('=') then
      a.pipeline = w
    else
      a.overrides[#a.overrides + 1] = w
    end
    i = i + 1
  end
  return a
end

-- What to read and how, from a ReaderLoader's spec file or a pipeline's data: section.
-- Pipeline files belong to the job layer, which passes load_pipeline(path, overrides) ->
-- the file's config (lua/ember/pipeline/reader.lua); the library never requires it.
local function load_config(a, load_pipeline)
  if a.spec then
    local cfg = json.decode(read_file(a.spec))
    return cfg.spec, cfg
  end
  if not a.pipeline then error('expected a pipeline file (or --spec)', 0) end
  if not load_pipeline then error('reading a pipeline file needs the job layer (ember.pipeline.reader)', 0) end
  local ok, cfg = pcall(load_pipeline, a.pipeline, a.overrides)
  if not ok then error(type(cfg) == 'table' and cfg.message or tostring(cfg), 0) end
  local yaml = require 'ember.data.yaml'
  local spec = yaml.spec_of(cfg.data, cfg)
  local d = cfg.data or {}
  local curve
  if d.curve then   -- the trainers' public key, given or read from their key file; our own pair
    local server = d.curve.server_key or (d.curve.server_keys and (M.read_keys(d.curve.server_keys)))
    local pub, sec
    if d.curve.reader_keys then pub, sec = M.read_keys(d.curve.reader_keys) end
    curve = { server_key = server, public_key = pub, secret_key = sec }
  end
  return spec, { heartbeat = d.heartbeat, heartbeat_timeout = d.heartbeat_timeout, curve = curve,
    shared_memory = d.shared_memory }
end

-- The loop: a lease in, a batch (or the error of a bad record) out. Nothing is allocated
-- per batch here: the tensors live in the outgoing message (em_reader_alloc), and the
-- references this loop holds are dropped as soon as the batch is sent.
local function serve(reader, producer, name)
  local lease = ffi.new('em_lease')
  local tensors, held = ffi.new('em_tensor *[16]'), 0
  local function release()
    for i = 0, held - 1 do C.em_tensor_release(tensors[i]) end
    held = 0
  end
  local job = {
    alloc = function(nd, descs)
      if C.em_reader_alloc(reader, lease, nd, descs, tensors) ~= 0 then I.raise(0) end
      held = nd
      return tensors
    end,
  }
  while true do
    C.em_reader_next(reader, lease, 1.0)
    if lease.status == 2 then return I.last_error() end
    if lease.status == 1 then
      job.ids, job.n, job.seed, job.epoch, job.skip_bad = lease.ids, tonumber(lease.n), lease.seed, lease.epoch,
        lease.skip_bad ~= 0
      local ok, kept, kept_ids, skipped, times = pcall(producer.produce, producer, job)
      release()
      local st
      if ok then
        st = C.em_reader_send(reader, lease, kept, kept_ids, skipped, times)
      else
        st = C.em_reader_send_error(reader, lease, string.format('%s: %s', name, tostring(kept)))
      end
      if st ~= 0 then io.stderr:write('ember reader: ', I.last_error(), '\n') end
    end
  end
end

function M.main(argv, load_pipeline)
  local ok, a = pcall(parse_args, argv or {})
  if not ok then return fail(a) end
  if a.help then
    io.stdout:write(usage)
    return 0
  end
  if #a.connect == 0 then return fail('expected --connect ENDPOINT (see ember reader --help)') end
  local spec, cfg
  ok, spec, cfg = pcall(load_config, a, load_pipeline)
  if not ok then return fail(tostring(spec)) end
  local host = libc.hostname() or 'host'
  local name = a.name or string.format('%s:%d', host, tonumber(C.em_process_self()))
  local o = ffi.new('em_reader_options')
  local connect = table.concat(a.connect, ',')
  o.connect, o.name = connect, name
  o.parent_pid = a.parent or 0
  o.heartbeat_s = a.heartbeat or cfg.heartbeat or 0.5
  o.heartbeat_timeout_s = cfg.heartbeat_timeout or 10 * o.heartbeat_s
  o.shared_memory = (a.shm and cfg.shared_memory ~= false) and 1 or 0
  local server_key = a.curve_server or (cfg.curve and cfg.curve.server_key)
  local pub, sec = cfg.curve and cfg.curve.public_key, cfg.curve and cfg.curve.secret_key
  if a.curve_keys then
    ok, pub, sec = pcall(M.read_keys, a.curve_keys)
    if not ok then return fail(pub) end
  end
  o.curve_server_key, o.curve_public_key, o.curve_secret_key = server_key, pub, sec
  rawset(_G, 'ember', rawget(_G, 'ember') or ember)   -- dataset files may use the global, as scripts do
  local rbox = ffi.new('em_reader *[1]')
  if C.em_reader_create(rbox, o) ~= 0 then return fail(I.last_error()) end
  local reader = rbox[0]
  local producer
  ok, producer = pcall(source.open, spec)
  if not ok then   -- tell the trainers why, then stop
    local msg = string.format('%s: %s', name, tostring(producer))
    C.em_reader_fatal(reader, msg)
    C.em_reader_free(reader)
    return fail(tostring(producer))
  end
  local fp = cfg.fingerprint or source.fingerprint(spec)
  C.em_reader_ready(reader, producer:size(), fp)
  local why
  ok, why = pcall(serve, reader, producer, name)
  C.em_reader_free(reader)
  if not ok then return fail(tostring(why)) end
  if a.parent and not why:find('closed') then io.stderr:write('ember reader: stopping: ', why, '\n') end
  return 0
end

return M
