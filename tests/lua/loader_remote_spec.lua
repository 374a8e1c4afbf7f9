-- loader_remote_spec.lua: readers started by hand (`ember reader --connect tcp://... pipeline.yaml`)
-- over tcp on loopback, one reader serving several trainers and a trainer that restarts,
-- CurveZMQ (encrypted delivery, wrong keys, allowed client keys), and the data: section of
-- pipeline files (validation, `ember run` with readers, per-stage counters in metrics).
local F = dofile('tests/lua/loader_fixtures.lua')
F.finally = function(fn) return finally(fn) end
F.assert = assert
local pipeline = require 'ember.pipeline'
local json = require 'ember.util.json'
local data = ember.data

local function loader(opts)
  local l = data.ReaderLoader(opts)
  F.defer(function() l:close() end)
  return l
end

-- A train pipeline whose data: section reads the npy fixture in dir.
local function pipeline_file(dir, extra)
  return F.write(dir .. '/pipeline.yaml', string.format([[
job: train
epochs: 1
evaluate: false
model:
  - flatten:
  - linear: [16, 10]
data:
  source: {format: npy, x: %s/x.npy, y: %s/y.npy}
  batch_size: 4
%s
log: {progress: none}
]], dir, dir, extra or ''))
end

describe('ember reader', function()
  it('serves a trainer over tcp on loopback from a pipeline file', function()
    local dir = F.tmpdir()
    local spec = F.npy_images(dir, 40, 4, 4)
    local l = loader { dataset = spec, batch_size = 4, shuffle = true, seed = 2, endpoint = 'tcp://127.0.0.1:*', timeout = 30 }
    local ep = l:endpoint()
    assert.truthy(ep:match('^tcp://127%.0%.0%.1:%d+$'))
    local log = dir .. '/reader.log'
    local pid = F.start_reader(string.format('--connect %s --name far-away %s', ep, pipeline_file(dir)), log)
    local batches, all = F.collect(l, 1)
    F.exactly_once(all, 40)
    assert.equal(10, #batches)
    assert.equal(1, l:stats().workers)
    assert.equal(10, l:stats().shm_batches)   -- a reader on the same host hands batches over in shared memory
    assert.is_true(F.alive(pid))
    l:close()   -- a reader started by hand outlives its trainers
    F.sleep(0.2)
    assert.is_true(F.alive(pid))
  end)

  it('serves several trainers at once, and a trainer that comes back', function()
    local dir = F.tmpdir()
    local spec = F.npy_images(dir, 24, 4, 4)
    local a = loader { dataset = spec, batch_size = 4, endpoint = 'tcp://127.0.0.1:*', timeout = 30 }
    local b = loader { dataset = spec, batch_size = 3, shuffle = true, endpoint = 'tcp://127.0.0.1:*', timeout = 30 }
    F.start_reader(string.format('--connect %s --connect %s %s', a:endpoint(), b:endpoint(), pipeline_file(dir)))
    local ia, ib = a:epoch(1), b:epoch(1)
    local got_a, got_b = {}, {}
    for _ = 1, 8 do   -- interleaved
      local x, y = ia(), ib()
      if x then for i = 1, x.ids:numel() do got_a[#got_a + 1] = x.ids[i]:item() end end
      if y then for i = 1, y.ids:numel() do got_b[#got_b + 1] = y.ids[i]:item() end end
    end
    assert.is_nil(ia())
    assert.is_nil(ib())
    F.exactly_once(got_a, 24)
    F.exactly_once(got_b, 24)
    -- trainer a stops, and a new trainer binds its endpoint: the reader says hello again
    local ep = a:endpoint()
    a:close()
    local c = loader { dataset = spec, batch_size = 4, endpoint = ep, timeout = 30 }
    local _, all = F.collect(c, 3)
    F.exactly_once(all, 24)
  end)

  it('refuses a reader whose data differs from the trainer\'s', function()
    local dir = F.tmpdir()
    local spec = F.npy_images(dir, 20, 4, 4)
    local l = loader { dataset = spec, batch_size = 4, transforms = { { flip = 1 } }, endpoint = 'tcp://127.0.0.1:*',
      timeout = 1 }
    F.start_reader(string.format('--connect %s %s', l:endpoint(), pipeline_file(dir)))
    local msg = F.error_of(function() for _ in l:epoch(1) do end end)
    F.has(msg, 'no batch within')
    F.has(msg, 'reads different data')
    assert.is_true(l:stats().workers_rejected >= 1)
  end)

  it('delivers through CurveZMQ, and refuses readers without the right keys', function()
    local dir = F.tmpdir()
    local spec = F.npy_images(dir, 20, 4, 4)
    local pub, sec = data.curve_keypair()
    assert.equal(40, #pub)
    local allowed = dir .. '/reader.keys'
    local rpub = data.curve_keygen(allowed)
    local l = loader { dataset = spec, batch_size = 4, endpoint = 'tcp://127.0.0.1:*', timeout = 1.5,
      curve = { public_key = pub, secret_key = sec, clients = { rpub } } }
    local file = pipeline_file(dir)
    -- no keys at all, the wrong server key, keys not in the list: nothing is delivered
    local other = data.curve_keypair()
    F.start_reader(string.format('--connect %s %s', l:endpoint(), file))
    F.start_reader(string.format("--connect %s --curve-server '%s' %s", l:endpoint(), other, file))
    F.start_reader(string.format("--connect %s --curve-server '%s' %s", l:endpoint(), pub, file))
    local msg = F.error_of(function() for _ in l:epoch(1) do end end)
    F.has(msg, '0 readers connected')
    assert.is_true(l:stats().workers_rejected >= 1)   -- the allowed-keys check said no
    -- the allowed key pair: encrypted delivery
    F.start_reader(string.format("--connect %s --curve-server '%s' --curve-keys %s %s", l:endpoint(), pub, allowed, file))
    l.timeout = 30
    local _, all = F.collect(l, 1)
    F.exactly_once(all, 20)
    assert.equal(1, l:stats().workers)
  end)

  it('starts with a clear message when its command line is wrong', function()
    local out = io.popen(F.EMBER .. ' reader 2>&1; echo "status $?"'):read('*a')
    F.has(out, 'expected --connect ENDPOINT')
    F.has(out, 'status 2')
    out = io.popen(F.EMBER .. ' reader --connect tcp://127.0.0.1:1 /nonexistent.yaml 2>&1; echo "status $?"'):read('*a')
    F.has(out, "cannot read the pipeline '/nonexistent.yaml'")
    F.has(out, 'status 2')
    out = io.popen(F.EMBER .. ' reader --help'):read('*a')
    F.has(out, 'usage: ember reader --connect ENDPOINT')
  end)
end)

describe('the data: section of a pipeline file', function()
  it('checks the pipeline keys', function()
    local dir = F.tmpdir()
    F.npy_images(dir, 8, 4, 4)
    local file = pipeline_file(dir, '  workers: 2\n  prefetch: 6\n  transforms:\n    - flip: 0.5\n')
    local cfg = pipeline.load(file)
    assert.equal(2, cfg.data.workers)
    assert.equal(6, cfg.data.prefetch)
    assert.equal('error', cfg.data.on_bad_record)
    local function err(over)
      local ok, e = pcall(pipeline.load, file, { over })
      assert.is_false(ok)
      return e.message
    end
    F.has(err('data.workers=-1'), 'data.workers: expected an integer >= 0, got -1')
    F.has(err('data.order=random'), "data.order: expected one of planned, arrival, got 'random'")
    F.has(err('data.transforms=[{blur: 1}]'), "data.transforms: transforms[1]: unknown transform 'blur'")
    F.has(err('data.source=data.csv'), 'data.source: expected a .lua dataset file or a {format: ...} mapping')
    F.has(err('data.endpoint=localhost:5555'), 'data.endpoint: expected an endpoint (tcp://127.0.0.1:5555)')
  end)

  it('trains with readers and writes per-stage counters to the metrics file', function()
    local dir = F.tmpdir()
    F.npy_images(dir, 64, 4, 4)
    local file = pipeline_file(dir, '  workers: 2\n  transforms:\n    - normalise: {mean: 0.5, std: 0.5}\n')
    local out = io.popen(string.format('%s run %s log.dir=%s/run log.progress=lines log.interval=0.001 2>%s/err',
      F.EMBER, file, dir, dir)):read('*a')
    local result = json.decode(out)
    assert.equal(1, result.epochs)
    local err = F.read(dir .. '/err')
    F.has(err, 'data read ')
    F.has(err, ' wait ')
    local m = json.decode(F.read(dir .. '/run/metrics.jsonl'))
    assert.equal(16, m.data.batches)
    assert.equal(64, m.data.samples)
    assert.is_true(m.data.workers >= 1)
    for _, k in ipairs { 'read_s', 'decode_s', 'transform_s', 'send_s', 'wait_s' } do
      assert.is_true(m.data[k] >= 0, k)
    end
    assert.is_true(m.data.transform_s > 0)
  end)
end)

describe('the trainer', function()
  -- libzmq straight through the FFI: a peer that sends what no reader would.
  local ffi = require 'ffi'
  pcall(ffi.cdef, [[
    void *zmq_ctx_new(void); int zmq_ctx_term(void *ctx); void *zmq_socket(void *ctx, int type);
    int zmq_connect(void *s, const char *endpoint); int zmq_close(void *s);
    int zmq_setsockopt(void *s, int option, const void *value, size_t len);
    int zmq_send(void *s, const void *buf, size_t len, int flags);
    int zmq_recv(void *s, void *buf, size_t len, int flags);
    typedef struct test_dp_hdr {
      uint32_t magic; uint16_t version, kind; uint32_t flags; int32_t ntensors;
      uint64_t session, plan, epoch; int64_t item, n; uint64_t seed; int64_t skipped;
      double times[4]; double heartbeat_s, heartbeat_timeout_s;
    } test_dp_hdr;
    typedef struct test_dp_hello {
      int64_t pid, dataset_size; uint64_t nonce; char host[64], boot_id[40], name[64], ring[64];
      uint64_t ring_id, ring_bytes;
    } test_dp_hello;
  ]])
  local DEALER, SNDMORE, LINGER, RCVTIMEO = 5, 2, 17, 27
  local zmq

  local function frames(sock, list)
    for i, f in ipairs(list) do
      local n = type(f) == 'string' and #f or ffi.sizeof(f)
      local data = f
      zmq.zmq_send(sock, data, n, i < #list and SNDMORE or 0)
    end
  end

  it('drops malformed messages and serves its readers on', function()
    local ok, lib = pcall(ffi.load, 'libzmq.so.5')
    if not ok then return pending('libzmq.so.5 not found') end
    zmq = lib
    local dir = F.tmpdir()
    local spec = F.npy_images(dir, 16, 4, 4)
    local l = loader { dataset = spec, batch_size = 4, endpoint = 'tcp://127.0.0.1:*', timeout = 30,
      heartbeat = 0.05, heartbeat_timeout = 0.5 }
    local ctx = zmq.zmq_ctx_new()
    local s = zmq.zmq_socket(ctx, DEALER)
    local zero, wait = ffi.new('int[1]', 0), ffi.new('int[1]', 2000)
    zmq.zmq_setsockopt(s, LINGER, zero, 4)
    zmq.zmq_setsockopt(s, RCVTIMEO, wait, 4)
    F.defer(function() zmq.zmq_close(s); zmq.zmq_ctx_term(ctx) end)
    assert.equal(0, zmq.zmq_connect(s, l:endpoint()))
    local h = ffi.new('test_dp_hdr')
    h.magic, h.version = 0x50444d45, 5   -- DP_MAGIC, DP_VERSION (runtime/data/pipeline/wire.h)
    -- noise: a short frame, a wrong magic, too many frames, a hello of the wrong size
    frames(s, { 'hello' })
    local bad = ffi.new('test_dp_hdr', h)
    bad.magic = 1
    frames(s, { bad })
    local many = {}
    for i = 1, 12 do many[i] = 'x' end
    frames(s, many)
    h.kind = 1
    frames(s, { h, 'short', 'fp' })
    -- a FATAL and an ERROR from a peer that has not said hello: ignored, not the end of the run
    local fatal = ffi.new('test_dp_hdr', h)
    fatal.kind = 8   -- DP_FATAL
    frames(s, { fatal, 'forged: the dataset cannot be read' })
    local forged_error = ffi.new('test_dp_hdr', h)
    forged_error.kind = 7   -- DP_ERROR
    frames(s, { forged_error, 'forged: a bad record' })
    -- a proper hello, then a lease answered with a batch that claims more than it holds
    local hello = ffi.new('test_dp_hello')
    hello.pid, hello.dataset_size, hello.nonce = 999999, 16, 12345
    ffi.copy(hello.name, 'impostor')
    frames(s, { h, hello, require('ember.data.source').fingerprint(l.spec) })
    local it = l:epoch(1)
    local buf = ffi.new('char[4096]')
    local lease = ffi.new('test_dp_hdr')
    local got
    repeat   -- the welcome, then a lease
      got = zmq.zmq_recv(s, buf, 4096, 0)
      assert.is_true(got >= 0, 'no message from the trainer')
      ffi.copy(lease, buf, ffi.sizeof(lease))
      if lease.kind == 5 then zmq.zmq_recv(s, buf, 4096, 0) end
    until lease.kind == 5
    local reply = ffi.new('test_dp_hdr', lease)
    reply.kind, reply.ntensors, reply.n = 6, 1, 4
    local desc = ffi.new('struct { em_tensor_desc d; int64_t offset, nbytes; }')
    desc.d.dtype, desc.d.ndim, desc.d.sizes[0], desc.d.sizes[1] = ember.C.EM_UINT8, 2, 4, 1000000
    desc.nbytes = 4000000
    local ids = ffi.new('int64_t[4]', 1, 2, 3, 4)
    frames(s, { reply, desc, ffi.string(ids, 32), 'tiny' })
    -- then it goes silent: its lease comes back when it is lost, and a real reader serves all
    F.start_reader(string.format('--connect %s %s', l:endpoint(), pipeline_file(dir)))
    local all = {}
    for b in it do for i = 1, b.ids:numel() do all[#all + 1] = b.ids[i]:item() end end
    F.exactly_once(all, 16)
    local st = l:stats()
    assert.equal(4, st.batches)
    assert.equal(2, st.workers_seen)
    assert.equal(1, st.workers_lost)
  end)
end)
