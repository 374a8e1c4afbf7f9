-- loader_bench.lua: samples/s, batches/s and MB/s that ember's loaders deliver to a consumer
-- that only takes the batches (the cost of feeding data, nothing else).
--   build/ember bench/data/loader_bench.lua [raw|jpeg|all] [epochs] [batch]
-- raw:  Fashion-MNIST uint8 [batch, 1, 28, 28] + int64 labels, no transforms: the in-process
--       DataLoader, the Loader in process, and 1 and 2 reader processes (shared memory on
--       and off).
-- jpeg: the same images as JPEG records in a TFRecord shard (made here, in /tmp), decoded
--       and randomly cropped to 24x24 (padding 2) and flipped: in process, 1 and 2 readers.
-- "batches freed": the consumer hands each batch's tensors back as soon as it has taken it
-- (Tensor.free), as the training pipeline does with its steps' batches; the other lines leave
-- them to Lua's collector, so their memory (a shared-memory slot, a pooled buffer) comes back
-- cold, many batches later.
-- Prints one JSON line per configuration, with cpu_us_per_batch: the CPU time of the
-- trainer process (all its threads) and of its reader processes over the timed epochs,
-- per batch; on a shared machine it varies less than the wall-clock rates.
local ffi = require 'ffi'
local json = require 'ember.util.json'
local progress = require 'ember.util.progress'
local data = ember.data

local what = arg[1] or 'all'
local epochs = tonumber(arg[2] or 3)
local bs = tonumber(arg[3] or 128)
local ROOT = '/usr/share/datasets/fashion-mnist'

pcall(ffi.cdef, [[
struct bench_timeval { long tv_sec; long tv_usec; };
struct bench_rusage { struct bench_timeval ru_utime, ru_stime; long rest[14]; };
int getrusage(int who, struct bench_rusage *usage);
long sysconf(int name);
]])
local CLK_TCK = tonumber(ffi.C.sysconf(2)) -- _SC_CLK_TCK

-- CPU seconds of this process (every thread) and of the given reader processes
-- (/proc/PID/stat, utime + stime: clock ticks, 10 ms; a timed run is many of them).
local function cpu_seconds(pids)
  local r = ffi.new('struct bench_rusage')
  ffi.C.getrusage(0, r)
  local s = tonumber(r.ru_utime.tv_sec) + tonumber(r.ru_utime.tv_usec) * 1e-6 + tonumber(r.ru_stime.tv_sec) +
    tonumber(r.ru_stime.tv_usec) * 1e-6
  for _, pid in ipairs(pids) do
    local f = io.open('/proc/' .. pid .. '/stat')
    if f then
      local fields = {}
      for w in f:read('*a'):match('%) (.*)$'):gmatch('%S+') do fields[#fields + 1] = w end
      f:close()
      s = s + (tonumber(fields[12]) + tonumber(fields[13])) / CLK_TCK
    end
  end
  return s
end

local function run(name, loader, extra, free_each)
  -- epoch 0 warms up (reader start, page faults); the rest are timed
  local bytes, samples, batches = 0, 0, 0
  for b in loader:epoch(0) do end
  local pids = loader.workers and loader:workers() or {}
  local cpu0 = cpu_seconds(pids)
  local t0 = progress.now()
  for e = 1, epochs do
    for b in loader:epoch(e) do
      batches = batches + 1
      local n = b.ids:numel()
      samples = samples + n
      bytes = bytes + b.x:numel() * (b.x.dtype == 'float32' and 4 or 1) + n * 8
      if free_each then
        b.x:free()
        b.y:free()
        b.ids:free()
      end
    end
  end
  local dt = progress.now() - t0
  local cpu = cpu_seconds(pids) - cpu0
  local line = { bench = name, samples_per_s = samples / dt, batches_per_s = batches / dt, mb_per_s = bytes / dt / 1e6,
    bytes_per_sample = bytes / samples, seconds = dt, batch = bs, cpu_us_per_batch = cpu / batches * 1e6 }
  for k, v in pairs(extra or {}) do line[k] = v end
  if loader.stats then
    local s = loader:stats()
    line.shm_batches, line.shm_lent, line.ring_batches, line.reissued = s.shm_batches, s.shm_lent, s.ring_batches, s.reissued
    line.ring_leases = s.ring_leases
  end
  print(json.encode(line, { order = { 'bench', 'samples_per_s', 'batches_per_s', 'mb_per_s' } }))
  io.stdout:flush()
  if loader.close then loader:close() end
end

if what == 'raw' or what == 'all' then
  local ds = data.datasets.FashionMNIST { normalise = false }
  run('raw/DataLoader in process', data.DataLoader { dataset = ds, batch_size = bs, shuffle = true, seed = 1 })
  ds = nil
  collectgarbage()
  local base = { dataset = 'fashion-mnist', batch_size = bs, shuffle = true, seed = 1, timeout = 120 }
  local function with(t) local o = {} for k, v in pairs(base) do o[k] = v end for k, v in pairs(t) do o[k] = v end return o end
  run('raw/ReaderLoader in process', data.ReaderLoader(with {}))
  run('raw/ReaderLoader in process, batches freed', data.ReaderLoader(with {}), nil, true)
  run('raw/ReaderLoader 1 reader, shared memory, batches freed', data.ReaderLoader(with { num_workers = 1 }),
    { workers = 1 }, true)
  for _, nw in ipairs { 1, 2 } do
    run(string.format('raw/ReaderLoader %d reader%s, shared memory', nw, nw > 1 and 's' or ''), data.ReaderLoader(with { num_workers = nw }),
      { workers = nw })
    run(string.format('raw/ReaderLoader %d reader%s, socket', nw, nw > 1 and 's' or ''),
      data.ReaderLoader(with { num_workers = nw, shared_memory = false }), { workers = nw })
  end
end

if what == 'jpeg' or what == 'all' then
  local shard = os.getenv('JPEG_SHARD') or '/tmp/ember-bench-fmnist-jpeg.tfrecord'
  local f = io.open(shard, 'rb')
  if f then
    f:close()
  else   -- 60,000 JPEGs (quality 90) of the training images, one TFRecord shard
    local images = data.read_idx(ROOT .. '/train-images-idx3-ubyte.gz')
    local labels = data.read_idx(ROOT .. '/train-labels-idx1-ubyte.gz')
    local records = {}
    for i = 1, images.shape[1] do
      records[i] = data.tfrecord.example { image = data.jpeg.encode(images[i], 90), label = labels[i]:item() }
    end
    data.tfrecord.write(shard, records)
  end
  -- the decode rate of one core (read + CRC + protobuf + JPEG decode, no loader): the
  -- ceiling for this workload is cores x this rate
  do
    local source = require 'ember.data.source'
    local p = source.open(source.normalise({ format = 'tfrecord', files = { shard } }, nil, nil))
    local n = 20000
    local ids = ffi.new('int64_t[?]', bs)
    local x = ember.empty({ bs, 1, 28, 28 }, { dtype = 'uint8' })
    local y = ember.empty({ bs }, { dtype = 'int64' })
    local kept, skipped, times = ffi.new('int64_t[1]'), ffi.new('int64_t[1]'), ffi.new('em_stage_times')
    local t0 = progress.now()
    for k = 0, n / bs - 1 do
      for i = 0, bs - 1 do ids[i] = (k * bs * 7919 + i * 104729) % 60000 + 1 end
      ember.C.em_source_fill(p.source.src, ids, bs, 1, nil, 0, 0, x, y, 0, kept, nil, skipped, times)
    end
    local dt = progress.now() - t0
    print(json.encode({ bench = 'jpeg decode, one core', samples_per_s = math.floor(n / bs) * bs / dt,
      read_s = times.read, decode_s = times.decode }))
  end
  local aug = { { random_crop = { size = 24, padding = 2 } }, { flip = 0.5 } }
  local base = { dataset = { format = 'tfrecord', files = { shard } }, transforms = aug, batch_size = bs,
    shuffle = true, seed = 1, timeout = 120 }
  local function with(t) local o = {} for k, v in pairs(base) do o[k] = v end for k, v in pairs(t) do o[k] = v end return o end
  run('jpeg/ReaderLoader in process', data.ReaderLoader(with {}))
  for _, nw in ipairs { 1, 2 } do
    run(string.format('jpeg/ReaderLoader %d reader%s', nw, nw > 1 and 's' or ''), data.ReaderLoader(with { num_workers = nw }),
      { workers = nw })
  end
end
