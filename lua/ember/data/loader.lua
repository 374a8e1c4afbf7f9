-- ember.data.ReaderLoader: batches from reader processes over ZeroMQ (runtime/data/dp_*.c), with
-- the in-process DataLoader's interface (lua/ember/data.lua), so either fits a training loop:
--
--   local loader = ember.data.ReaderLoader{dataset = 'path/to/dataset.lua', batch_size = 128,
--                                    num_workers = 4, seed = 1, shuffle = true}
--   for e = 1, 10 do
--     for batch in loader:epoch(e) do ... end   -- batch.x, batch.y, batch.ids (1-based)
--   end
--   local s = loader:state()                   -- {seed, epoch, position, ...}: JSON-able
--   loader:load_state(s)                       -- the next epoch(s.epoch) delivers the rest
--   loader:close()
--
-- Options (unknown keys are errors):
--   dataset, dataset_options, transforms   what to read (lua/ember/data/source.lua)
--   batch_size = 1, shuffle = false, seed = 0, drop_last = false
--   rank = 0, world_size = 1, remainder = 'drop' | 'pad'   this rank's shard of each epoch
--   num_workers = 0       readers started on this host (ember reader processes); 0 with no
--                         endpoint reads in this process
--   endpoint = nil        also bind these ZeroMQ endpoints (a string or a list) for readers
--                         started by hand (`ember reader --connect ...`); loopback unless
--                         you name another interface
--   prefetch = 2 x worker_queue x workers (at least 8 x workers): batches leased or waiting
--                          at once (the memory bound)
--   worker_queue = 4..16  leases one reader holds at once (hides the round trip): about 4 MiB
--                          of batches, 4 when the sample size is unknown (Lua datasets)
--   order = 'planned'     or 'arrival' (batches as they come; ids tell which)
--   timeout = 60          seconds to wait for a batch before failing with the pipeline's state
--   heartbeat = 0.5, heartbeat_timeout = 5   seconds; a silent reader is lost, its leases
--                         go to the others
--   lease_timeout = 120   seconds after which an item is leased again to another reader
--                         (one that heartbeats but is stuck in its dataset code)
--   on_bad_record = 'error' | 'skip'         skipped records are counted in stats()
--   shared_memory = true  same-host readers hand batches over through shared memory; the
--                         batch tensors view the reader's memory (no copy) until Lua's
--                         collector frees them, copies once too many are held
--                         (runtime/data/pipeline/shm.c)
--   max_restarts          spawned readers replaced after they exit (default 3 x num_workers)
--   curve = {public_key =, secret_key =, clients = {...}}  CurveZMQ (ember.data.curve_keypair)
--   dataset_size          the sample count, when this host cannot open the dataset
--   subset                the dataset's samples this loader delivers: 1-based ids (an int64
--                         tensor or a list), e.g. one part of a train/val/test split. Epochs
--                         are planned over the subset; readers read the ids they are sent.
--
-- Each epoch's order is a function of (seed, epoch, rank, world_size) alone; a batch's
-- samples and augmentations do not depend on which reader made it or how many there are.
local ffi = require 'ffi'
local libc = require 'ember.util.libc'
local ember = require 'ember'
local json = require 'ember.util.json'
local progress = require 'ember.util.progress'
local source = require 'ember.data.source'

local C = ember.C
local I = require 'ember.internal'
local throw, box, new_tensor, wrap = I.throw, I.box, I.new, I.wrap
local describe, is_int = I.describe_value, I.is_int

local M = {}
local Loader = {}
Loader.__index = Loader
M.Loader_class = Loader

local OPTS = { dataset = true, dataset_options = true, transforms = true, batch_size = true, shuffle = true,
  seed = true, drop_last = true, rank = true, world_size = true, remainder = true, num_workers = true, endpoint = true,
  prefetch = true, worker_queue = true, order = true, timeout = true, heartbeat = true, heartbeat_timeout = true,
  on_bad_record = true, shared_memory = true, max_restarts = true, curve = true, dataset_size = true,
  lease_timeout = true, subset = true }

-- Options with defaults, checked by the shared rules (ember.internal).
local function int_opt(op, opts, name, default, min)
  local v = opts[name]
  if v == nil then return default end
  return I.need_int(op, name, v, min)
end

local function num_opt(op, opts, name, default)
  local v = opts[name]
  if v == nil then return default end
  if type(v) ~= 'number' or not (v > 0) then
    throw(string.format('%s: %s must be a number > 0, got %s', op, name, describe(v)))
  end
  return v
end

local function bool_opt(op, opts, name, default)
  local v = opts[name]
  if v == nil then return default end
  return I.need_bool(op, name, v)
end

local function enum_opt(op, opts, name, values)
  local v = opts[name]
  if v == nil then return values[1] end
  for _, x in ipairs(values) do if v == x then return v end end
  throw(string.format("%s: %s must be one of %s, got %s", op, name, table.concat(values, ', '), describe(v)))
end

-- The ember executable that readers run (this one, when inside the ember host).
local function ember_exe()
  if os.getenv('EMBER_EXE') then return os.getenv('EMBER_EXE') end
  if rawget(_G, '_EMBER_HOST') then
    return libc.readlink('/proc/self/exe') or '/proc/self/exe'
  end
  throw('ReaderLoader: num_workers > 0 starts `ember reader` processes: run inside the ember host or set EMBER_EXE')
end

local function write_file(path, text)
  local f, err = io.open(path, 'w')
  if not f then throw(string.format("ReaderLoader: cannot write '%s': %s", path, err)) end
  f:write(text)
  f:close()
end

local function endpoint_list(op, v)
  if v == nil then return nil end
  if type(v) == 'string' then v = { v } end
  if type(v) ~= 'table' or #v == 0 then
    throw(op .. ': endpoint must be a string or a list of them, got ' .. describe(v))
  end
  for _, e in ipairs(v) do
    if type(e) ~= 'string' or not e:match('^%a+://') then
      throw(op .. ": endpoints look like 'tcp://127.0.0.1:5555' (or tcp://127.0.0.1:* for any port), got " ..
        describe(e))
    end
  end
  return table.concat(v, ',')
end

function M.new(opts)
  local op = 'ReaderLoader'
  if type(opts) ~= 'table' then throw('ReaderLoader: expected an options table, got ' .. describe(opts)) end
  I.check_opts(op, opts, OPTS)
  if opts.dataset == nil then
    throw('ReaderLoader: dataset is required (a built-in name, a .lua file or {format = ...})')
  end
  local self = setmetatable({
    batch_size = int_opt(op, opts, 'batch_size', 1, 1),
    shuffle = bool_opt(op, opts, 'shuffle', false),
    seed = int_opt(op, opts, 'seed', 0, 0),
    drop_last = bool_opt(op, opts, 'drop_last', false),
    rank = int_opt(op, opts, 'rank', 0, 0),
    world_size = int_opt(op, opts, 'world_size', 1, 1),
    pad = enum_opt(op, opts, 'remainder', { 'drop', 'pad' }) == 'pad',
    num_workers = int_opt(op, opts, 'num_workers', 0, 0),
    in_order = enum_opt(op, opts, 'order', { 'planned', 'arrival' }) == 'planned',
    timeout = num_opt(op, opts, 'timeout', 60),
    skip_bad = enum_opt(op, opts, 'on_bad_record', { 'error', 'skip' }) == 'skip',
    _epoch = 0, _position = 0,
  }, Loader)
  if self.rank >= self.world_size then
    throw(string.format('ReaderLoader: rank %d out of range for world_size %d (ranks count from 0)', self.rank,
      self.world_size))
  end
  local endpoints = endpoint_list(op, opts.endpoint)
  local in_process = self.num_workers == 0 and not endpoints
  local spec
  if type(opts.dataset) == 'table' and opts.dataset.format == nil then   -- a dataset object
    if not in_process then
      throw('ReaderLoader: readers load the dataset themselves: give a .lua file or a format spec, not a table')
    end
    spec = { dataset = opts.dataset, transforms = opts.transforms, kind = 'object' }
    source.augment(opts.transforms)
  else
    spec = source.normalise(opts.dataset, opts.dataset_options, opts.transforms)
  end
  self.spec = spec
  if in_process then
    self.producer = source.open(spec)
    self.size = self.producer:size()
  elseif opts.dataset_size then
    self.size = int_opt(op, opts, 'dataset_size', 0, 0)
  else
    local p = source.open(spec)
    self.size, self.sample_bytes = p:size(), p:sample_bytes()
  end
  if opts.subset ~= nil then self:_set_subset(opts.subset) end
  self.stats_local = { batches = 0, samples = 0, bytes = 0, skipped = 0, read_s = 0, decode_s = 0, transform_s = 0,
    send_s = 0, wait_s = 0 }
  if not in_process then self:_start(opts, endpoints) end
  return self
end

-- Restricts the loader to a subset of the dataset's samples (1-based ids).
function Loader:_set_subset(sub)
  local op = 'ReaderLoader'
  if type(sub) == 'table' and not ember.is_tensor(sub) then sub = ember.tensor(sub, { dtype = 'int64' }) end
  if not ember.is_tensor(sub) or sub:dim() ~= 1 or sub.dtype ~= 'int64' then
    throw(op .. ': subset must be a 1-d int64 tensor (or a list) of 1-based sample ids, got ' .. describe(sub))
  end
  sub = sub:cpu():contiguous()
  if sub:numel() > 0 then
    local lo, hi = sub:min():item(), sub:max():item()
    if lo < 1 or hi > self.size then
      throw(string.format('%s: subset ids must be in 1..%d (the dataset size), got %d..%d', op, self.size, lo, hi))
    end
  end
  self.full_size, self.subset, self.size = self.size, sub, sub:numel()
end

-- Binds, spawns the readers.
function Loader:_start(opts, endpoints)
  local op = 'ReaderLoader'
  local nw = self.num_workers
  local o = ffi.new('em_loader_options')
  o.endpoints = endpoints
  o.local_ipc = nw > 0 and 1 or 0
  -- Batches in flight per reader: small batches need more of them to hide each one's round
  -- trip (Fashion-MNIST at batch 128, 1 reader: 2.2 M samples/s with 4 leases, 4.7 M with
  -- 16), large ones fewer to bound memory: about 4 MiB a reader, 4 to 16 leases, unless the
  -- samples' size is unknown (Lua datasets: 4). The credits are twice that (at least 8).
  local batch_bytes = self.sample_bytes and self.sample_bytes * self.batch_size
  local wq = batch_bytes and math.max(4, math.min(16, math.floor(4 * 2 ^ 20 / batch_bytes))) or 4
  o.worker_queue = int_opt(op, opts, 'worker_queue', wq, 1)
  o.prefetch = int_opt(op, opts, 'prefetch', math.max(8, 2 * o.worker_queue) * math.max(nw, 1), 1)
  o.in_order = self.in_order and 1 or 0
  o.shared_memory = bool_opt(op, opts, 'shared_memory', true) and 1 or 0
  o.skip_bad = self.skip_bad and 1 or 0
  o.heartbeat_s = num_opt(op, opts, 'heartbeat', 0.5)
  o.heartbeat_timeout_s = num_opt(op, opts, 'heartbeat_timeout', math.max(5, 4 * o.heartbeat_s))
  o.lease_timeout_s = num_opt(op, opts, 'lease_timeout', 120)
  o.dataset_size = self.full_size or self.size
  local fp = source.fingerprint(self.spec)
  o.fingerprint = fp
  local curve = opts.curve
  local local_keys
  if curve ~= nil then
    if type(curve) ~= 'table' or type(curve.public_key) ~= 'string' or type(curve.secret_key) ~= 'string' then
      throw('ReaderLoader: curve must be {public_key =, secret_key =, clients = {...}} (see ember.data.curve_keypair)')
    end
    o.curve_public_key, o.curve_secret_key = curve.public_key, curve.secret_key
    local clients = curve.clients and { unpack(curve.clients) } or nil
    if clients and nw > 0 then   -- the readers this loader starts get a key pair of their own
      local pub, sec = M.curve_keypair()
      local_keys = { public_key = pub, secret_key = sec }
      clients[#clients + 1] = pub
    end
    if clients then o.curve_clients = table.concat(clients, ',') end
  end
  local lbox = ffi.new('em_loader *[1]')
  if C.em_loader_create(lbox, o) ~= 0 then I.raise() end
  self.handle = ffi.gc(lbox[0], C.em_loader_free)
  self.prefetch, self.heartbeat, self.heartbeat_timeout = o.prefetch, o.heartbeat_s, o.heartbeat_timeout_s
  self.endpoints = ffi.string(C.em_loader_endpoints(self.handle))
  if nw == 0 then return end
  local dir = ffi.string(C.em_loader_private_dir(self.handle))
  local spec_path = dir .. '/spec.json'
  write_file(spec_path, json.encode {
    spec = self.spec, fingerprint = fp, heartbeat = o.heartbeat_s, heartbeat_timeout = o.heartbeat_timeout_s,
    shared_memory = o.shared_memory == 1,
    curve = curve and { server_key = curve.public_key, public_key = local_keys and local_keys.public_key,
      secret_key = local_keys and local_keys.secret_key } or nil })
  local ipc = self.endpoints:match('^([^,]+)')
  local argv = { ember_exe(), 'reader', '--connect', ipc, '--spec', spec_path, '--parent',
    tostring(tonumber(C.em_process_self())) }
  local cargv = ffi.new('const char *[?]', #argv + 1)
  for i, a in ipairs(argv) do cargv[i - 1] = a end
  local restarts = int_opt(op, opts, 'max_restarts', 3 * nw, 0)
  if C.em_loader_spawn(self.handle, nw, #argv, cargv, restarts) ~= 0 then I.raise() end
end

-- A CurveZMQ key pair as two 40-character Z85 strings: public, secret.
function M.curve_keypair()
  local pub, sec = ffi.new('char[41]'), ffi.new('char[41]')
  if C.em_curve_keypair(pub, sec) ~= 0 then I.raise() end
  return ffi.string(pub), ffi.string(sec)
end

-- ---------------------------------------------------------------- plans
function Loader:num_samples()
  if self.pad then return math.ceil(self.size / self.world_size) end
  return math.floor(self.size / self.world_size)
end

function Loader:num_batches()
  local m = self:num_samples()
  return self.drop_last and math.floor(m / self.batch_size) or math.ceil(m / self.batch_size)
end

-- The sample ids (1-based int64) of epoch e for this rank, in the planned order.
function Loader:plan(e)
  local p = new_tensor(C.em_data_epoch_plan(box, self.size, self.seed, e, self.shuffle and 1 or 0, self.rank,
    self.world_size, self.pad and 1 or 0, 1))
  if self.subset then p = self.subset:index_select(1, p) end   -- positions in the subset -> sample ids
  return p
end

-- Work items of epoch e: positions not yet delivered, cut into batches.
function Loader:_items(e)
  local m = self:num_samples()
  local limit = self.drop_last and math.floor(m / self.batch_size) * self.batch_size or m
  local start, done = 0, {}
  if self._resume and self._resume.epoch == e then
    start = self._resume.position
    for _, run in ipairs(self._resume.done or {}) do done[#done + 1] = run end
  end
  table.sort(done, function(a, b) return a[1] < b[1] end)
  local items, pos, k = {}, start, 1
  while pos < limit do
    while done[k] and done[k][1] + done[k][2] <= pos do k = k + 1 end
    if done[k] and done[k][1] <= pos then
      pos = done[k][1] + done[k][2]
    else
      local stop = math.min(pos + self.batch_size, limit)
      if done[k] and done[k][1] < stop then stop = done[k][1] end
      items[#items + 1] = { pos, stop - pos }
      pos = stop
    end
  end
  return items, start
end

-- ---------------------------------------------------------------- delivery bookkeeping
-- Which items of the current epoch were delivered. O(1) per batch; state() turns it into
-- position (the first position not delivered) and done ({position, count} runs delivered
-- after it, which only the arrival order leaves).
-- The loop runs only when items came out of turn (order = 'arrival'): in the planned order
-- the next item is never done yet, and a loop taken once per batch kept LuaJIT from
-- compiling the consumer's loop around it.
local function past_done(done, nu, last)
  while nu <= last and done[nu] do nu = nu + 1 end
  return nu
end

function Loader:_mark(k)
  local it = self._items_list
  if not it then return end
  local done = self._done_items
  done[k] = true
  local nu = self._next_undone
  if k ~= nu then return end
  nu = nu + 1
  if done[nu] then nu = past_done(done, nu, #it) end
  self._next_undone = nu
  if nu > #it then
    self._epoch, self._position, self._done = self._cur_epoch + 1, 0, nil
    self._items_list = nil
  end
end

-- Position and done runs of the epoch in progress (from the items delivered so far).
function Loader:_progress()
  local it = self._items_list
  if not it then return self._epoch, self._position, self._done end
  local pos = it[self._next_undone][1]
  local done = {}
  for j = self._next_undone + 1, #it do
    if self._done_items[j] then done[#done + 1] = { it[j][1], it[j][2] } end
  end
  for _, run in ipairs(self._resumed_done or {}) do
    if run[1] >= pos then done[#done + 1] = run end
  end
  table.sort(done, function(a, b) return a[1] < b[1] end)
  return self._cur_epoch, pos, #done > 0 and done or nil
end

-- A batch as a table of tensors (they outlive the C batch, which the caller frees).
-- Jagged fields (lua/ember/data/jagged.lua) become one keyed field each.
local function batch_table(b)
  local batch, jagged = {}, nil
  for i = 0, C.em_loader_batch_count(b) - 1 do
    local name = ffi.string(C.em_loader_batch_name(b, i))
    batch[name] = new_tensor(C.em_loader_batch_tensor(box, b, i))
    if C.em_loader_batch_lengths(b, i) ~= 0 then
      jagged = jagged or {}
      jagged[name] = true
    end
  end
  batch.ids = new_tensor(C.em_loader_batch_ids(box, b))
  if jagged then require('ember.data.jagged').batch_fields(batch, jagged) end
  return batch
end

function Loader:epoch(e)
  if not is_int(e) or e < 0 then throw('ReaderLoader:epoch: the epoch must be an integer >= 0, got ' .. describe(e)) end
  if self.closed then throw('ReaderLoader:epoch: the loader is closed') end
  local items, start = self:_items(e)
  local resumed_done = self._resume and self._resume.epoch == e and self._resume.done or nil
  self._resume = nil
  self._cur_epoch, self._items_list, self._done_items, self._next_undone = e, items, {}, 1
  self._resumed_done = resumed_done
  self._epoch, self._position, self._done = e, start, resumed_done
  if #items == 0 then
    self._epoch, self._position, self._done = e + 1, 0, nil
    self._items_list = nil
  end
  self._epoch_stats = self:stats()
  local plan = self:plan(e)
  local iter = self.producer and self:_local_epoch(e, plan, items) or self:_remote_epoch(e, plan, items)
  -- Once the first batch is out, the next epoch's plan is made on a thread of its own
  -- (runtime/data/plan_ahead.c): it was half of the pause between epochs, and made at the
  -- very start it took turns with the readers' first batches.
  local ahead = false
  return function()
    local b = iter()
    if not ahead then
      ahead = true
      C.em_data_epoch_plan_ahead(self.size, self.seed, e + 1, self.shuffle and 1 or 0, self.rank, self.world_size,
        self.pad and 1 or 0, 1)
    end
    return b
  end
end

-- The batches of epoch e from the readers, in the coordinator's order.
function Loader:_remote_epoch(e, plan, items)
  local n = #items
  local pos, len = ffi.new('int64_t[?]', n + 1), ffi.new('int64_t[?]', n + 1)
  for i, it in ipairs(items) do pos[i - 1], len[i - 1] = it[1], it[2] end
  if C.em_loader_begin(self.handle, e, self.seed, plan:data_ptr(), plan:numel(), pos, len, n) ~= 0 then
    I.raise()
  end
  local bbox = ffi.new('em_loader_batch *[1]')
  local handle, generation = self.handle, {}
  self._generation = generation
  return function()
    if self._generation ~= generation then return nil end   -- a later epoch() replaced this one
    local st = C.em_loader_next(handle, bbox, self.timeout)
    I.check(st)
    local b = bbox[0]
    if b == nil then   -- every item is delivered (or was all bad records, skipped)
      if self._generation == generation then
        self._epoch, self._position, self._done = e + 1, 0, nil
        self._items_list = nil
      end
      return nil
    end
    local batch = batch_table(b)   -- fails only out of memory (then the batch is lost with the run)
    local item = tonumber(C.em_loader_batch_item(b))
    C.em_loader_batch_free(b)
    self:_mark(item + 1)
    return batch
  end
end

-- A new CPU tensor of the given shape (a C array of ndim sizes) and dtype.
local CPU = ffi.new('em_device', 0, 0)
local function cpu_empty(ndim, sizes, dtype)
  if C.em_empty(box, ndim, sizes, dtype, CPU) ~= 0 then I.raise() end
  local t = wrap(box[0])
  box[0] = nil
  return t
end

-- A built-in source in this process: one C call per batch (em_source_batch) makes the
-- batch's tensors, fills them and writes the kept ids, with no job table, closure or copy.
-- Nothing in this loop stops LuaJIT from compiling it (em_empty takes its device by value,
-- which compiled code cannot pass: making the tensors here kept the whole loop in the
-- interpreter, a third of a raw 128-sample batch's time).
function Loader:_local_source_epoch(e, plan, items, generation)
  local producer, src = self.producer, self.producer.source.src
  local aug, times, skipped = producer.aug, producer.times, producer.skipped
  local ids = plan:data_ptr()
  local st = self.stats_local
  local out = ffi.new('em_tensor *[3]')
  local x_name, y_name
  do
    local descs = ffi.new('em_tensor_desc[2]')
    local nd = C.em_source_describe(src, aug, 0, descs)
    if nd < 0 then I.raise() end
    x_name = ffi.string(descs[0].name)
    y_name = nd > 1 and ffi.string(descs[1].name) or nil
  end
  local skip_bad = self.skip_bad and 1 or 0
  local gc, release = ffi.gc, C.em_tensor_release
  local k = 0
  -- One item per call, no loop: a loop left after one turn kept LuaJIT from compiling the
  -- consumer's own loop; an item whose records were all skipped goes on to the next by a
  -- tail call.
  local step
  step = function()
    local _ = plan   -- the ids pointer above points into it: keep it alive with the iterator
    if self._generation ~= generation then return nil end
    k = k + 1
    local it = items[k]
    if not it then return nil end
    ffi.fill(times, ffi.sizeof('em_stage_times'))
    skipped[0] = 0
    local t0 = progress.now()
    local status = C.em_source_batch(out, src, ids + it[1], it[2], 1, aug, self.seed, e, skip_bad, skipped, times)
    st.wait_s = st.wait_s + progress.now() - t0
    if status ~= 0 then I.raise() end
    -- one collector nudge for the batch (wrap), the other two tensors owned directly (as
    -- wrap does: a tensor is the struct a pointer refers to, which numbers index as a tensor)
    local x = wrap(out[0])
    local y = out[1] ~= nil and gc(out[1][0], release) or nil
    local idt = gc(out[2][0], release)
    out[0], out[1], out[2] = nil, nil, nil
    st.read_s, st.decode_s = st.read_s + times.read, st.decode_s + times.decode
    st.transform_s = st.transform_s + times.transform
    st.skipped = st.skipped + skipped[0]
    self:_mark(k)
    local nk = idt:numel()
    if nk == 0 then return step() end
    local batch = { [x_name] = x, ids = idt }
    if y_name then batch[y_name] = y end
    st.batches, st.samples = st.batches + 1, st.samples + nk
    return batch
  end
  return step
end

-- In this process: the same producer a reader runs, one batch per call.
function Loader:_local_epoch(e, plan, items)
  local k, generation = 0, {}
  self._generation = generation
  if self.producer.source then return self:_local_source_epoch(e, plan, items, generation) end
  local ids = plan:data_ptr()
  local st = self.stats_local
  local function alloc(nd, descs)
    local t = ffi.new('em_tensor *[?]', nd)
    local keep = {}
    for i = 0, nd - 1 do
      local d = descs[i]
      keep[i] = cpu_empty(d.ndim, d.sizes, d.dtype)
      t[i] = keep[i]
    end
    return t, keep
  end
  return function()
    local _ = plan   -- the ids pointer above points into it: keep it alive with the iterator
    while true do
      if self._generation ~= generation then return nil end
      k = k + 1
      local it = items[k]
      if not it then return nil end
      local names, keep, count, lengths_of = {}, nil, 0, {}
      local job = { ids = ids + it[1], n = it[2], seed = self.seed, epoch = e, skip_bad = self.skip_bad,
        alloc = function(nd, descs)
          local t
          t, keep = alloc(nd, descs)
          count = nd
          for i = 0, nd - 1 do
            names[i] = ffi.string(descs[i].name)
            lengths_of[i] = descs[i].lengths
          end
          return t
        end }
      local t0 = progress.now()
      local kept, kept_ids, skipped, times = self.producer:produce(job)
      st.read_s, st.decode_s = st.read_s + times.read, st.decode_s + times.decode
      st.transform_s = st.transform_s + times.transform
      st.skipped = st.skipped + skipped
      st.wait_s = st.wait_s + progress.now() - t0
      self:_mark(k)
      if kept > 0 then
        local batch, jagged = {}, nil
        for i = 0, count - 1 do
          local x = keep[i]
          local rows = kept
          if lengths_of[i] ~= 0 then   -- a jagged field: the values its kept lengths count
            local L = keep[lengths_of[i] - 1]
            rows = kept > 0 and L:narrow(1, 1, kept):sum():item() or 0
            jagged = jagged or {}
            jagged[names[i]] = true
          end
          batch[names[i]] = rows < x.shape[1] and x:narrow(1, 1, rows):contiguous() or x
        end
        local idt = ember.empty({ kept }, { dtype = 'int64' })
        ffi.copy(idt:data_ptr(), kept_ids, kept * 8)
        batch.ids = idt
        if jagged then require('ember.data.jagged').batch_fields(batch, jagged) end
        st.batches, st.samples = st.batches + 1, st.samples + kept
        return batch
      end
    end
  end
end

-- ---------------------------------------------------------------- state and statistics
function Loader:state()
  local epoch, position, done = self:_progress()
  local s = { seed = self.seed, epoch = epoch, position = position, num_samples = self:num_samples() }
  if done then
    s.done = {}
    for i, run in ipairs(done) do s.done[i] = { run[1], run[2] } end
  end
  return s
end

function Loader:load_state(s)
  local op = 'ReaderLoader:load_state'
  if type(s) ~= 'table' then throw(op .. ': expected a table from state(), got ' .. describe(s)) end
  for _, k in ipairs { 'seed', 'epoch', 'position' } do
    if not is_int(s[k]) or s[k] < 0 then
      throw(string.format('%s: %s must be an integer >= 0, got %s', op, k, describe(s[k])))
    end
  end
  if s.num_samples ~= nil and s.num_samples ~= self:num_samples() then
    throw(string.format('%s: the state was saved for %d samples per epoch, this loader has %d', op, s.num_samples,
      self:num_samples()))
  end
  if s.position > self:num_samples() then
    throw(string.format('%s: position %d is past the end of the epoch (%d samples)', op, s.position,
      self:num_samples()))
  end
  if s.done ~= nil and type(s.done) ~= 'table' then throw(op .. ': done must be a list of {position, count}') end
  self.seed = s.seed
  self._epoch, self._position, self._done = s.epoch, s.position, s.done
  self._items_list = nil
  self._resume = { epoch = s.epoch, position = s.position, done = s.done }
end

local STAT_FIELDS = { 'batches', 'samples', 'bytes', 'received', 'duplicates', 'reissued', 'skipped', 'shm_batches',
  'ring_batches', 'ring_leases',
  'shm_lent', 'slots_lent',
  'workers', 'workers_seen', 'workers_lost', 'workers_rejected', 'respawned', 'leased', 'buffered', 'max_outstanding',
  'read_s', 'decode_s', 'transform_s', 'send_s', 'wait_s' }

-- Counters since the loader started (seconds summed over readers for the reader stages).
function Loader:stats()
  if not self.handle then
    local s = {}
    for k, v in pairs(self.stats_local) do s[k] = v end
    return s
  end
  local st = ffi.new('em_loader_stats')
  C.em_loader_get_stats(self.handle, st)
  local s = {}
  for _, k in ipairs(STAT_FIELDS) do s[k] = tonumber(st[k]) end
  return s
end

-- The current epoch's stage seconds, for progress lines and metrics files.
function Loader:epoch_stats()
  local now, base = self:stats(), self._epoch_stats or {}
  local out = {}
  for _, k in ipairs { 'batches', 'samples', 'skipped', 'read_s', 'decode_s', 'transform_s', 'send_s', 'wait_s',
    'reissued', 'duplicates', 'workers_lost' } do
    if now[k] then out[k] = now[k] - (base[k] or 0) end
  end
  out.workers = now.workers
  return out
end

-- "read 1.2s decode 0.0s transform 0.4s send 0.1s wait 0.3s": this epoch's stage seconds
-- (readers summed), recomputed at most 4 times a second (it is asked once per batch).
function Loader:progress_text()
  local now = progress.now()
  if self._text and now - self._text_at < 0.25 then return self._text end
  local s = self:epoch_stats()
  self._text_at = now
  self._text = string.format('read %.1fs decode %.1fs transform %.1fs send %.1fs wait %.1fs', s.read_s or 0,
    s.decode_s or 0, s.transform_s or 0, s.send_s or 0, s.wait_s or 0)
  return self._text
end

-- Pids of the readers this loader started and that are running.
function Loader:workers()
  if not self.handle then return {} end
  local pids = ffi.new('int64_t[256]')
  local n = C.em_loader_worker_pids(self.handle, pids, 256)
  local out = {}
  for i = 0, n - 1 do out[#out + 1] = tonumber(pids[i]) end
  return out
end

function Loader:endpoint() return self.endpoints end

function Loader:close()
  if self.handle then
    C.em_loader_free(ffi.gc(self.handle, nil))
    self.handle = nil
  end
  self.closed = true
end

return M
