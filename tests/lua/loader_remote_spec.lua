-- loader_remote_spec.lua: readers started by hand (`ember reader --connect tcp://... pipeline.yaml`)
-- over tcp on loopback, one reader serving several trainers and a trainer that restarts,
-- CurveZMQ (encrypted delivery, wrong keys, allowed client keys), and the data: section of
-- pipeline files (validation, `ember run` with readers, per-stage counters in metrics).
local F = dofile('tests/lua/loader_fixtures.lua')
F.finally = function(fn) return finally(fn) end
F.assert = assert
local pipeline = require 'ember.pipeline'
local json = require 'ember.pipeline.json'
local data = ember.data

local function loader(opts)
  local l = data.Loader(opts)
  finally(function() l:close() end)
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
