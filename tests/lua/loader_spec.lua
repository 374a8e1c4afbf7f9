-- loader_spec.lua: ember.data.ReaderLoader with readers on this host: the same batches whatever the
-- number of readers, exactly once per epoch when readers are killed or stall, bounded
-- memory with a slow consumer, resume mid-epoch with another number of readers, bad
-- records, timeouts instead of hangs, readers that die with their trainer, rank shards.
local F = dofile('tests/lua/loader_fixtures.lua')
F.finally = function(fn) return finally(fn) end   -- busted's, looked up when a test runs
F.assert = assert
local json = require 'ember.util.json'
local data = ember.data

local AUG = { { random_crop = { size = 6, padding = 1 } }, { flip = 0.5 }, { normalise = { mean = 0.5, std = 0.25 } } }

local function loader(opts)
  local l = data.ReaderLoader(opts)
  F.defer(function() l:close() end)
  return l
end

-- Alive and not a zombie (a reader whose trainer died is reparented and may wait to be reaped).
local function running(pid)
  local stat = F.read('/proc/' .. pid .. '/stat')
  return stat ~= nil and not stat:match('^%d+ %b() [ZX]')
end


-- Whether batch b holds the pixels (and, with labels, the labels) F.npy_images wrote for
-- each of its ids: memory lent by the ring must not change under a kept batch.
local function batch_intact(b, labels)
  local ffi = require 'ffi'
  local p, ids = ffi.cast('uint8_t *', b.x:data_ptr()), b.ids
  for k = 0, ids:numel() - 1 do
    local i = ids[k + 1]:item() - 1
    if labels and b.y[k + 1]:item() ~= i % 10 + 1 then return false end
    for r = 0, 7 do
      for c = 0, 7 do
        if p[(k * 8 + r) * 8 + c] ~= (7 * i + 3 * r + c) % 256 then return false end
      end
    end
  end
  return true
end

describe('ember.data.ReaderLoader', function()
  it('delivers the same batches in process and with 1, 2 and 4 readers', function()
    local dir = F.tmpdir()
    local spec = F.npy_images(dir, 90, 8, 8)
    local function opts(nw)
      return { dataset = spec, transforms = AUG, batch_size = 10, shuffle = true, seed = 7, num_workers = nw, timeout = 30 }
    end
    local ref = F.collect(loader(opts(0)), 3)
    assert.equal(9, #ref)
    for _, nw in ipairs { 1, 2, 4 } do
      local got = F.collect(loader(opts(nw)), 3)
      assert.equal(#ref, #got)
      for i = 1, #ref do
        assert.same(ref[i].ids, got[i].ids)
        assert.equal(ref[i].x, got[i].x)
      end
    end
    -- a Lua dataset drawing from each sample's generator
    local lua = F.lua_dataset(dir)
    local a = F.collect(loader { dataset = lua, dataset_options = { n = 30 }, batch_size = 4, shuffle = true, seed = 3 }, 2)
    local b = F.collect(loader { dataset = lua, dataset_options = { n = 30 }, batch_size = 4, shuffle = true, seed = 3,
      num_workers = 2, timeout = 30 }, 2)
    assert.same(a, b)
  end)

  it("keeps the in-process DataLoader's order and batch contents", function()
    local dir = F.tmpdir()
    local spec, x, y = F.npy_images(dir, 50, 4, 4)
    local dl = data.DataLoader { dataset = data.TensorDataset { x = x, y = y }, batch_size = 8, shuffle = true, seed = 5 }
    local l = loader { dataset = spec, batch_size = 8, shuffle = true, seed = 5, num_workers = 1, timeout = 30 }
    local it = l:epoch(2)
    for want in dl:epoch(2) do
      local got = it()
      assert.same(want.ids:totable(), got.ids:totable())
      assert.same(want.x:totable(), got.x:view(-1, 4, 4):totable())
      assert.same(want.y:add(1):totable(), got.y:totable())   -- labels from files count from 1
    end
    assert.is_nil(it())
  end)

  it('delivers every sample exactly once when a reader is killed mid-epoch', function()
    local dir = F.tmpdir()
    local l = loader { dataset = F.lua_dataset(dir), dataset_options = { n = 120, delay = 0.002 }, batch_size = 4,
      shuffle = true, seed = 1, num_workers = 2, max_restarts = 0, heartbeat = 0.05, heartbeat_timeout = 2, timeout = 30 }
    assert.is_true(F.wait_for(function() return l:stats().workers == 2 end, 20))   -- both hold leases once it starts
    local all, killed = {}, nil
    for b in l:epoch(1) do
      for i = 1, b.ids:numel() do all[#all + 1] = b.ids[i]:item() end
      if not killed and #all >= 20 then
        killed = l:workers()[1]
        assert(os.execute('kill -9 ' .. killed) == 0)
      end
    end
    F.exactly_once(all, 120)
    local s = l:stats()
    assert.equal(1, s.workers_lost)
    assert.equal(1, s.workers)
    assert.same({}, (function() local w = l:workers(); for i = #w, 1, -1 do if w[i] ~= killed then table.remove(w, i) end end return w end)())
    -- the survivor serves the next epoch alone
    local _, again = F.collect(l, 2)
    F.exactly_once(again, 120)
  end)

  it('replaces a reader that exits, and survives every reader being killed', function()
    local dir = F.tmpdir()
    local l = loader { dataset = F.lua_dataset(dir), dataset_options = { n = 80, delay = 0.002 }, batch_size = 4,
      num_workers = 2, max_restarts = 4, heartbeat = 0.05, heartbeat_timeout = 2, timeout = 30 }
    assert.is_true(F.wait_for(function() return l:stats().workers == 2 end, 20))
    local all, done = {}, false
    for b in l:epoch(1) do
      for i = 1, b.ids:numel() do all[#all + 1] = b.ids[i]:item() end
      if not done and #all >= 12 then
        done = true
        for _, pid in ipairs(l:workers()) do os.execute('kill -9 ' .. pid) end
      end
    end
    F.exactly_once(all, 80)
    local s = l:stats()
    assert.equal(2, s.workers_lost)
    assert.is_true(s.respawned >= 2)
    assert.equal(2, #l:workers())
  end)

  it('delivers exactly once when the one reader, announcing batches in its ring, is killed', function()
    -- one reader on 2+ cores: its notices go through the shared-memory ring, and those it
    -- published but the trainer had not taken die with it (the items are leased again); a
    -- reader always at work (2 ms a sample) gets its leases through the ring too, and those
    -- it had not taken die with it as well
    local dir = F.tmpdir()
    local l = loader { dataset = F.lua_dataset(dir), dataset_options = { n = 120, delay = 0.002 }, batch_size = 4,
      shuffle = true, seed = 2, num_workers = 1, max_restarts = 2, heartbeat = 0.05, heartbeat_timeout = 2,
      timeout = 30 }
    local all, ring_before, leases_before = {}, nil, nil
    for b in l:epoch(1) do
      for i = 1, b.ids:numel() do all[#all + 1] = b.ids[i]:item() end
      if not ring_before and #all >= 40 then
        ring_before, leases_before = l:stats().ring_batches, l:stats().ring_leases
        os.execute('kill -9 ' .. l:workers()[1])
      end
    end
    F.exactly_once(all, 120)
    local s = l:stats()
    assert.equal(1, s.workers_lost)
    assert.is_true(s.respawned >= 1)
    local cpus = F.cpus()
    if cpus >= 2 then
      assert.is_true(ring_before >= 5, 'ring batches before the kill: ' .. ring_before)
      assert.is_true(leases_before >= 3, 'ring leases before the kill: ' .. leases_before)
    end
    local _, again = F.collect(l, 2)   -- the new reader serves the next epoch, through its own ring
    F.exactly_once(again, 120)
  end)

  it('re-issues the leases of a stalled reader and drops what it sends late', function()
    local dir = F.tmpdir()
    local l = loader { dataset = F.lua_dataset(dir), dataset_options = { n = 60, delay = 0.01 }, batch_size = 3,
      num_workers = 2, max_restarts = 0, heartbeat = 0.05, heartbeat_timeout = 0.4, timeout = 30 }
    assert.is_true(F.wait_for(function() return l:stats().workers == 2 end, 20))
    local all, stopped = {}, nil
    for b in l:epoch(1) do
      for i = 1, b.ids:numel() do all[#all + 1] = b.ids[i]:item() end
      if not stopped and #all >= 9 then
        stopped = l:workers()[1]
        os.execute('kill -STOP ' .. stopped)
      end
      if stopped and l:stats().reissued > 0 then os.execute('kill -CONT ' .. stopped .. ' 2>/dev/null') end
    end
    os.execute('kill -CONT ' .. stopped .. ' 2>/dev/null')
    F.exactly_once(all, 60)
    local s = l:stats()
    assert.is_true(s.reissued >= 1)
    assert.is_true(s.workers_lost >= 1)
    assert.equal(s.batches, 20)
  end)

  it('leases again an item a reader is stuck on while it still heartbeats', function()
    local dir = F.tmpdir()
    -- the first reader to meet sample 3 blocks in it for a minute (mkdir decides who is first)
    local ds = F.write(dir .. '/stuck.lua', string.format([[
      local ffi = require 'ffi'
      pcall(ffi.cdef, 'int mkdir(const char *path, unsigned int mode); unsigned int sleep(unsigned int s);')
      return { size = function() return 12 end,
        get = function(self, i)
          if i == 3 and ffi.C.mkdir('%s/first', 448) == 0 then ffi.C.sleep(60) end
          return { x = ember.tensor({ i }) }
        end }
    ]], dir))
    local l = loader { dataset = ds, batch_size = 2, num_workers = 2, heartbeat = 0.05, heartbeat_timeout = 5,
      lease_timeout = 0.5, timeout = 30 }
    local t0 = F.now()
    local _, all = F.collect(l, 1)
    F.exactly_once(all, 12)
    assert.is_true(F.now() - t0 < 20)
    local s = l:stats()
    assert.is_true(s.reissued >= 1)
    assert.equal(0, s.workers_lost)   -- it was never silent
  end)

  it('holds at most `prefetch` batches for a slow consumer', function()
    local dir = F.tmpdir()
    local spec = F.npy_images(dir, 64, 8, 8)
    local l = loader { dataset = spec, batch_size = 4, num_workers = 2, prefetch = 3, worker_queue = 1, timeout = 30 }
    local n = 0
    for _ in l:epoch(1) do
      n = n + 1
      F.sleep(0.01)
      local s = l:stats()
      assert.is_true(s.received - s.batches <= 3, 'received ' .. s.received .. ', consumed ' .. s.batches)
      assert.is_true(s.leased + s.buffered <= 3)
    end
    assert.equal(16, n)
    assert.is_true(l:stats().max_outstanding <= 3)
  end)

  it('resumes mid-epoch with another number of readers', function()
    local dir = F.tmpdir()
    local spec = F.npy_images(dir, 96, 8, 8)
    local function opts(nw)
      return { dataset = spec, transforms = AUG, batch_size = 8, shuffle = true, seed = 11, num_workers = nw, timeout = 30 }
    end
    local ref = F.collect(loader(opts(0)), 4)
    local first = loader(opts(2))
    local head = F.collect(first, 4, 5)
    local state = json.decode(json.encode(first:state()))   -- as a checkpoint keeps it
    assert.same({ seed = 11, epoch = 4, position = 40, num_samples = 96 }, state)
    first:close()
    local second = loader(opts(3))
    second:load_state(state)
    local tail = F.collect(second, 4)
    assert.equal(7, #tail)
    local all = {}
    for i, b in ipairs(head) do
      assert.same(ref[i].ids, b.ids)
      for _, id in ipairs(b.ids) do all[#all + 1] = id end
    end
    for i, b in ipairs(tail) do
      assert.same(ref[5 + i].ids, b.ids)
      assert.equal(ref[5 + i].x, b.x)
      for _, id in ipairs(b.ids) do all[#all + 1] = id end
    end
    F.exactly_once(all, 96)
    assert.same({ seed = 11, epoch = 5, position = 0, num_samples = 96 }, second:state())
  end)

  it('takes batches as they come with order = arrival, and resumes that too', function()
    local dir = F.tmpdir()
    local l = loader { dataset = F.lua_dataset(dir), dataset_options = { n = 40 }, batch_size = 4, num_workers = 2,
      order = 'arrival', timeout = 30 }
    local _, all = F.collect(l, 1)
    F.exactly_once(all, 40)
    -- a state with items done out of order: the rest is exactly what is missing
    local r = loader { dataset = F.lua_dataset(dir), dataset_options = { n = 40 }, batch_size = 4 }
    r:load_state { seed = 0, epoch = 1, position = 8, done = { { 16, 4 }, { 28, 8 } } }
    local _, rest = F.collect(r, 1)
    local want = {}
    for i = 9, 40 do if not (i >= 17 and i <= 20) and not (i >= 29 and i <= 36) then want[#want + 1] = i end end
    assert.same(want, rest)
  end)

  it('fails with a timeout, never a hang, when no reader serves it', function()
    local dir = F.tmpdir()
    local spec = F.npy_images(dir, 16, 4, 4)
    local l = loader { dataset = spec, batch_size = 4, endpoint = 'tcp://127.0.0.1:*', timeout = 0.3 }
    local t0 = F.now()
    local msg = F.error_of(function() for _ in l:epoch(1) do end end)
    assert.is_true(F.now() - t0 < 3)
    F.has(msg, 'no batch within 0.3 s')
    F.has(msg, 'waiting for batch 1 of 4')
    F.has(msg, '0 readers connected')
    F.has(msg, 'tcp://127.0.0.1:')
  end)

  it("reports a reader's failure to load its dataset at once", function()
    local dir = F.tmpdir()
    local bad = F.write(dir .. '/broken.lua', 'return {size = function() return 4 end, get = nil} +')
    local l = loader { dataset = bad, dataset_size = 4, batch_size = 2, num_workers = 1, timeout = 20 }
    local t0 = F.now()
    local msg = F.error_of(function() for _ in l:epoch(1) do end end)
    assert.is_true(F.now() - t0 < 10)
    F.has(msg, 'a reader failed')
    F.has(msg, 'broken.lua')
  end)

  it('raises a bad record naming the sample, or skips and counts it', function()
    local dir = F.tmpdir()
    local ds = F.lua_dataset(dir)
    local l = loader { dataset = ds, dataset_options = { n = 12, bad = { 6 } }, batch_size = 4, num_workers = 1, timeout = 20 }
    local msg = F.error_of(function() for _ in l:epoch(1) do end end)
    F.has(msg, 'sample 6: ')
    F.has(msg, 'record 6 is unreadable')
    local s = loader { dataset = ds, dataset_options = { n = 12, bad = { 6, 7 } }, batch_size = 4, num_workers = 1,
      on_bad_record = 'skip', timeout = 20 }
    local batches, all = F.collect(s, 1)
    assert.same({ 1, 2, 3, 4, 5, 8, 9, 10, 11, 12 }, all)
    assert.same({ 4, 2, 4 }, { batches[1].n, batches[2].n, batches[3].n })
    assert.equal(2, s:stats().skipped)
    assert.same({ seed = 0, epoch = 2, position = 0, num_samples = 12 }, s:state())
  end)

  it('stops its readers when the trainer dies', function()
    local dir = F.tmpdir()
    F.npy_images(dir, 16, 4, 4)
    local script = F.write(dir .. '/trainer.lua', string.format([[
      local l = ember.data.ReaderLoader{dataset = {format = 'npy', x = '%s/x.npy'}, batch_size = 4, num_workers = 2, timeout = 30}
      for _ in l:epoch(1) do end
      local f = io.open('%s/pids', 'w'); f:write(table.concat(l:workers(), ' ')); f:close()
      while true do os.execute('sleep 1') end
    ]], dir, dir))
    local out = dir .. '/trainer.pid'
    assert(os.execute(string.format('%s %s > /dev/null 2>&1 & echo $! > %s', F.EMBER, script, out)) == 0)
    local trainer = tonumber(F.read(out))
    F.defer(function() os.execute('kill -9 ' .. trainer .. ' 2>/dev/null') end)
    assert.is_true(F.wait_for(function() return F.read(dir .. '/pids') ~= nil end, 20))
    local pids = {}
    for p in F.read(dir .. '/pids'):gmatch('%d+') do pids[#pids + 1] = tonumber(p) end
    assert.equal(2, #pids)
    for _, p in ipairs(pids) do assert.is_true(running(p)) end
    os.execute('kill -9 ' .. trainer)
    assert.is_true(F.wait_for(function() return not running(pids[1]) and not running(pids[2]) end, 5))
  end)

  it('cuts each epoch into rank shards, dropping or padding the remainder', function()
    local dir = F.tmpdir()
    local spec, x, y = F.npy_images(dir, 10, 2, 2)
    local seen = {}
    for rank = 0, 2 do
      local l = loader { dataset = spec, batch_size = 2, shuffle = true, seed = 4, rank = rank, world_size = 3 }
      assert.equal(3, l:num_samples())
      local _, ids = F.collect(l, 1)
      local dl = data.DataLoader { dataset = data.TensorDataset { x = x, y = y }, batch_size = 2, shuffle = true, seed = 4,
        rank = rank, world_size = 3 }
      assert.same(dl:plan(1):totable(), ids)
      for _, id in ipairs(ids) do
        assert.is_nil(seen[id])
        seen[id] = true
      end
    end
    local count = {}
    local total = 0
    for rank = 0, 2 do
      local l = loader { dataset = spec, batch_size = 3, shuffle = true, seed = 4, rank = rank, world_size = 3,
        remainder = 'pad' }
      assert.equal(4, l:num_samples())
      local _, ids = F.collect(l, 1)
      assert.equal(4, #ids)
      for _, id in ipairs(ids) do count[id] = (count[id] or 0) + 1; total = total + 1 end
    end
    assert.equal(12, total)
    for i = 1, 10 do assert.is_true(count[i] >= 1) end
  end)

  it('lends shared-memory slots to batch tensors: kept batches stay intact, the rest come back', function()
    local ffi = require 'ffi'
    local dir = F.tmpdir()
    local spec = F.npy_images(dir, 64, 8, 8)
    local l = loader { dataset = spec, batch_size = 4, shuffle = true, seed = 5, num_workers = 1, timeout = 30 }
    local function intact(b) return batch_intact(b, false) end
    -- 1: every batch of 20 epochs kept (320, more than the arena's slots): past the lending
    -- limit the trainer copies, and the reader never stalls
    local kept = {}
    for e = 1, 20 do
      for b in l:epoch(e) do
        assert.is_true(intact(b))
        kept[#kept + 1] = b
      end
    end
    local s = l:stats()
    assert.equal(320, s.batches)
    assert.equal(320, s.shm_batches)
    -- every notice came through the reader's ring (it holds more than the reader's leases),
    -- when the reader leaves a core to the trainer (pipeline/coordinator.c, take_ring)
    local cpus = F.cpus()
    assert.equal(cpus >= 2 and 320 or 0, s.ring_batches)
    -- and leases the other way, only while the reader is at work (how many depends on how
    -- often it ran dry: ZeroMQ wakes a sleeping reader; pipeline/ring.c)
    assert.is_true(s.ring_leases >= 0 and s.ring_leases < 320, 'ring leases ' .. s.ring_leases)
    if cpus < 2 then assert.equal(0, s.ring_leases) end
    assert.is_true(s.shm_lent > 100 and s.shm_lent < 320, 'lent ' .. s.shm_lent)
    assert.equal(s.shm_lent, s.slots_lent)
    for _, b in ipairs(kept) do assert.is_true(intact(b)) end
    -- 2: keep one batch in ten; the others go to the collector, their slots back to the
    -- reader, which fills them again many times over while the kept ones must not change
    local few = {}
    for i = 1, #kept, 10 do few[#few + 1] = kept[i] end
    kept = nil
    collectgarbage()
    collectgarbage()
    local lent_kept = l:stats().slots_lent
    assert.is_true(lent_kept <= #few)
    for e = 21, 60 do
      for b in l:epoch(e) do assert.is_true(intact(b)) end
      collectgarbage()
      for _, b in ipairs(few) do assert.is_true(intact(b)) end
    end
    s = l:stats()
    assert.equal(960, s.shm_batches)   -- slots came back: the reader never had to send inline
    assert.is_true(s.shm_lent >= 640 + 100, 'lent ' .. s.shm_lent)   -- lending resumed
    assert.equal(lent_kept, s.slots_lent)   -- only the kept batches hold slots
    -- 3: lent tensors outlive the loader and its reader, and are the trainer's to write
    l:close()
    collectgarbage()
    for _, b in ipairs(few) do assert.is_true(intact(b)) end
    local p = ffi.cast('uint8_t *', few[1].x:data_ptr())
    p[0] = p[0] + 1
    assert.is_false(intact(few[1]))
  end)

  it('in process, uses the memory of dropped batches again, never that of kept ones', function()
    local ffi = require 'ffi'
    local dir = F.tmpdir()
    local spec = F.npy_images(dir, 64, 8, 8)
    local l = loader { dataset = spec, batch_size = 4, shuffle = true, seed = 5 }
    local function intact(b) return batch_intact(b, true) end
    -- keep one batch in ten; the others are collected and their memory filled again many
    -- times over while the kept ones must not change
    local few, seen, addr = {}, {}, {}
    local reused = 0
    for e = 1, 40 do
      local k = 0
      for b in l:epoch(e) do
        assert.is_true(intact(b))
        k = k + 1
        local a = tonumber(ffi.cast('uintptr_t', b.x:data_ptr()))
        if seen[a] then reused = reused + 1 end
        seen[a] = true
        if k == 1 and e % 10 == 1 then few[#few + 1] = b addr[#addr + 1] = a end
      end
      collectgarbage()
      for _, b in ipairs(few) do assert.is_true(intact(b)) end
    end
    assert.equal(40 * 16, l:stats().batches)
    assert.is_true(reused > 500, 'batches in memory used before: ' .. reused)
    -- the kept batches' memory was never handed out again while they lived
    for i, b in ipairs(few) do assert.equal(addr[i], tonumber(ffi.cast('uintptr_t', b.x:data_ptr()))) end
    -- and they outlive the loader
    l:close()
    l = nil
    collectgarbage()
    for _, b in ipairs(few) do assert.is_true(intact(b)) end
  end)

  it('sends everything through ZeroMQ when shared memory is off, exactly once', function()
    local dir = F.tmpdir()
    local spec = F.npy_images(dir, 64, 8, 8)
    local l = loader { dataset = spec, batch_size = 4, shuffle = true, seed = 5, num_workers = 1, timeout = 30,
      shared_memory = false }
    local _, all = F.collect(l, 1)
    F.exactly_once(all, 64)
    local s = l:stats()
    assert.equal(16, s.batches)
    assert.equal(0, s.shm_batches)
    assert.equal(0, s.ring_batches)
    assert.equal(0, s.ring_leases)
  end)

  it('checks its options', function()
    local dir = F.tmpdir()
    local spec = F.npy_images(dir, 4, 2, 2)
    F.has(F.error_of(data.ReaderLoader, { dataset = spec, batch = 3 }), "unknown option 'batch'")
    F.has(F.error_of(data.ReaderLoader, { batch_size = 3 }), 'dataset is required')
    F.has(F.error_of(data.ReaderLoader, { dataset = spec, batch_size = 0 }), 'batch_size must be an integer >= 1, got 0')
    F.has(F.error_of(data.ReaderLoader, { dataset = spec, order = 'random' }), "order must be one of planned, arrival, got 'random'")
    F.has(F.error_of(data.ReaderLoader, { dataset = spec, rank = 2, world_size = 2 }), 'rank 2 out of range for world_size 2')
    F.has(F.error_of(data.ReaderLoader, { dataset = spec, endpoint = 'localhost:5' }), "endpoints look like 'tcp://127.0.0.1:5555'")
    F.has(F.error_of(data.ReaderLoader, { dataset = 'nope.txt' }), "a Lua file (.lua) or {format = ...}, got 'nope.txt'")
    F.has(F.error_of(data.ReaderLoader, { dataset = { format = 'csv' } }), "unknown format 'csv'")
    F.has(F.error_of(data.ReaderLoader, { dataset = spec, transforms = { { blur = 1 } } }), "unknown transform 'blur'")
    F.has(F.error_of(data.ReaderLoader, { dataset = data.TensorDataset { x = ember.zeros(2) }, num_workers = 1 }),
      'readers load the dataset themselves')
    F.has(F.error_of(data.ReaderLoader, { dataset = spec, endpoint = 'tcp://256.0.0.1:1' }), "cannot bind 'tcp://256.0.0.1:1'")
    local l = loader { dataset = spec }
    F.has(F.error_of(l.load_state, l, { seed = 0, epoch = 1, position = 9 }), 'position 9 is past the end of the epoch (4 samples)')
    F.has(F.error_of(l.load_state, l, { seed = 0, epoch = 1, position = 0, num_samples = 5 }), 'saved for 5 samples')
  end)
end)
