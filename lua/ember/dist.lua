-- ember.dist: process groups and collectives over runtime/distributed (ember/dist.h).
--
--   ember launch -n 4 train.lua            -- 4 local processes through mpirun
--
--   local dist = ember.dist
--   dist.init()                            -- {backend = 'auto', timeout = 600}
--   print(dist.rank(), dist.world_size())  -- 0-based ranks, as every launcher numbers them
--   local t = ember.ones(4) * (dist.rank() + 1)
--   dist.all_reduce(t, 'sum')              -- in place: every rank holds 1 + 2 + ... + n
--   dist.broadcast(t, 0)                   -- rank 0's values everywhere
--   local all = dist.all_gather(t)         -- [world_size, 4]
--   local h = dist.all_reduce(t, 'avg', {async = true}); ...; h:wait()
--   local evens = dist.new_group{0, 2}     -- a subgroup: evens:all_reduce(t), evens:rank()
--
-- Backends: 'auto' picks 'mpi' when a launcher (ember launch, mpirun, srun) started the
-- process, 'gloo' when it was started torchrun-style (the real torchrun, or RANK, WORLD_SIZE,
-- MASTER_ADDR, MASTER_PORT set by hand: rendezvous in PyTorch's c10d TCPStore, torchrun's own
-- or one rank 0 hosts, and collectives over Gloo's TCP transport, runtime/plugins/gloo), else
-- 'self' (a world of one process: scripts written for many ranks run on one unchanged);
-- collectives on CUDA tensors go to NCCL, connected on each group's first CUDA collective.
-- 'nccl' is 'auto' with NCCL required (an error without the CUDA plugin, NCCL or a GPU): it
-- makes GPU local_rank() mod the GPU count current and connects the world's communicator
-- during init. 'mpi' and 'gloo' named explicitly reduce CPU tensors only. NCCL takes one GPU
-- per rank:
-- put each rank's tensors on its own GPU ('cuda:' .. dist.local_rank() % GPU count; with
-- 'nccl' that GPU is also the current one). backend() names the CPU backend,
-- backend('cuda') the one for CUDA tensors.
--
-- CUDA tensors: a collective runs on a communication stream of the tensor's GPU that first
-- waits for the work already queued on the current stream; wait() returns once it is done
-- on the GPU. A timeout aborts the group's NCCL communicator and fails the collective with
-- an error naming it, the rank and the seconds (later CUDA collectives on that group fail).
-- send/recv of CUDA tensors match in posting order (tags are not used) and each holds the
-- stream until its peer's match runs: order them so that pairs meet (even ranks send first).
--
-- Functions: init(opts), is_initialized(), finalize(), backend(), rank([group]),
-- world_size([group]), local_rank(), env() (what the launcher said, without init),
-- world(), new_group(ranks), and the collectives all_reduce(t [, op] [, opts]),
-- broadcast(t [, root] [, opts]), all_gather(t [, opts]), reduce_scatter(t [, op] [, opts]),
-- barrier([opts]), send(t, dst [, opts]), recv(t, src [, opts]), all_to_all(out, in [, opts]),
-- all_to_all_v(out, out_counts, in, in_counts [, opts]), gather(out, in [, root] [, opts]),
-- scatter(out, in [, root] [, opts]), reduce(t [, op] [, root] [, opts]),
-- all_gather_v(out, counts, in [, opts]) (counts: elements per rank, a list or an integer
-- tensor; rooted calls ignore the root-only tensor elsewhere). op is 'sum' (default),
-- 'avg', 'max', 'min' or 'product'. opts: group (default the world), async (return a
-- handle instead of waiting: h:wait([timeout]) returns the result, h:test() says whether it
-- is done), tag (send/recv, default 0), out (all_gather/reduce_scatter: the result tensor).
-- Tensors must be contiguous; results are bit-identical on every rank.
--
-- Timeouts: a collective that does not complete within the timeout (init{timeout = s},
-- EMBER_DIST_TIMEOUT, default 600 s) prints which ranks did not take part and ends the whole
-- job (exit status 124): MPI and Gloo cannot cancel a collective, and a dead or stuck rank
-- must not hang the others. Over Gloo every rank also checks that all called the same
-- collective (kind, sizes, dtype, operation, root): a mismatch is an error on every rank. A
-- script that fails on one rank ends the job too (at exit, a non-zero status aborts every
-- rank instead of waiting for them in MPI_Finalize).
--
-- Multi-node: start ember under mpirun or srun directly, one process per device, e.g.
--   mpirun -np 16 --hostfile hosts --bind-to none -x EMBER_NUM_THREADS=8 ember train.lua
--   srun -N 4 --ntasks-per-node=4 --mpi=pmix ember train.lua
-- (ember launch is the single-machine shortcut: see `ember launch --help`.)
local ffi = require 'ffi'
local ember = require 'ember'

local I = require 'ember.internal'
local C = I.C
local throw, describe, is_tensor, check = I.throw, I.describe, I.is_tensor, I.check
local check_opts, option_set = I.check_opts, I.option_set

local dist = {}

local REDOPS = { sum = C.EM_DIST_SUM, avg = C.EM_DIST_AVG, max = C.EM_DIST_MAX, min = C.EM_DIST_MIN,
  product = C.EM_DIST_PRODUCT }

local raise = I.raise

-- ---------------------------------------------------------------- the world
local INIT_OPTS = option_set('backend', 'timeout')
-- init([{backend = 'auto', timeout = seconds}]): joins the job's world. Calling it again
-- is harmless.
function dist.init(opts)
  check_opts('dist.init', opts, INIT_OPTS, 1)
  local backend = opts and opts.backend or 'auto'
  if type(backend) ~= 'string' then throw('dist.init: backend must be a string (auto, mpi, gloo, self, nccl), got ' ..
    describe(backend)) end
  local timeout = opts and opts.timeout or 0
  if type(timeout) ~= 'number' or timeout < 0 or timeout ~= timeout then
    throw('dist.init: timeout must be a number of seconds > 0, got ' .. tostring(timeout))
  end
  if C.em_dist_init(backend, timeout) ~= 0 then raise() end
  return dist
end

function dist.is_initialized() return C.em_dist_is_initialized() ~= 0 end

function dist.finalize() check(C.em_dist_finalize()) end

-- backend([device]): the backend of CPU tensors ('mpi', 'gloo', 'self'), or of device's tensors
-- ('cuda': 'nccl' or 'self'); nil before init or when that device has none.
function dist.backend(device)
  local name
  if device == nil or device == 'cpu' then
    name = C.em_dist_backend_name()
  elseif device == 'cuda' then
    name = C.em_dist_device_backend_name(C.EM_CUDA)
  else
    throw("dist.backend: expected 'cpu' or 'cuda', got " .. describe(device))
  end
  return name ~= nil and ffi.string(name) or nil
end

-- env(): what the launcher told this process, before (and without) init.
function dist.env()
  local e = ffi.new('em_dist_env')
  C.em_dist_env_detect(e)
  return { rank = e.rank, world_size = e.world_size, local_rank = e.local_rank, local_size = e.local_size,
    launcher = ffi.string(e.launcher) }
end

local function world_ptr(op)
  local w = C.em_dist_world()
  if w == nil then throw(op .. ': call ember.dist.init() first') end
  return w
end

-- ---------------------------------------------------------------- groups
local Group = {}
Group.__index = Group
dist.Group = Group

local function group_ptr(op, g)
  if g == nil then return world_ptr(op) end
  if getmetatable(g) ~= Group then throw(op .. ': expected a group from dist.new_group for option group, got ' ..
    describe(g)) end
  if g._world then return world_ptr(op) end
  return g._ptr
end

function dist.world()
  world_ptr('dist.world')
  return setmetatable({ _world = true }, Group)
end

-- new_group(ranks): ranks of the world (0-based), numbered in the new group in the order
-- listed. Every rank must call it, members or not; on non-members g:rank() is -1.
function dist.new_group(ranks, opts)
  check_opts('new_group', opts, option_set('group'), 2)
  if type(ranks) ~= 'table' or #ranks == 0 then
    throw('new_group: expected a list of ranks, got ' .. describe(ranks))
  end
  local arr = ffi.new('int[?]', #ranks)
  for i, r in ipairs(ranks) do
    if type(r) ~= 'number' or r ~= math.floor(r) then
      throw(string.format('new_group: rank at position %d is %s, expected an integer', i, describe(r)))
    end
    arr[i - 1] = r
  end
  local out = ffi.new('em_dist_group*[1]')
  if C.em_dist_new_group(out, group_ptr('new_group', opts and opts.group), #ranks, arr) ~= 0 then raise() end
  local g = setmetatable({ _ptr = ffi.gc(out[0], C.em_dist_group_release), ranks = ranks }, Group)
  return g
end

function dist.rank(g) return C.em_dist_rank(group_ptr('rank', g)) end
function dist.world_size(g) return C.em_dist_size(group_ptr('world_size', g)) end
function dist.local_rank() return C.em_dist_local_rank() end
function Group:rank() return C.em_dist_rank(group_ptr('rank', self)) end
function Group:size() return C.em_dist_size(group_ptr('size', self)) end

-- ---------------------------------------------------------------- handles
local Work = {}
Work.__index = Work
dist.Work = Work

local work_box = ffi.new('em_dist_work*[1]')

-- The work out-parameter for a call: the box with opts.async, else NULL (the C call waits).
local function wb(opts) return opts and opts.async and work_box or nil end

-- The end of a collective: raises its error; returns the result tensor, or with
-- opts.async a handle that keeps the result.
local function finish(op, opts, result, status)
  local w = work_box[0]
  work_box[0] = nil
  if status ~= 0 then raise() end
  if opts and opts.async then
    return setmetatable({ _ptr = ffi.gc(w, C.em_dist_work_release), result = result, op = op }, Work)
  end
  return result
end

-- wait([timeout]): blocks until done (a timeout shortens the deadline; expiry ends the
-- job); returns the result tensor (nil for barrier and send).
function Work:wait(timeout)
  if timeout ~= nil and (type(timeout) ~= 'number' or timeout <= 0) then
    throw('wait: timeout must be a number of seconds > 0, got ' .. describe(timeout))
  end
  if C.em_dist_work_wait(self._ptr, timeout or 0) ~= 0 then raise() end
  return self.result
end

-- test(): true when done, false while pending; raises the error of a failed operation.
function Work:test()
  local r = C.em_dist_work_test(self._ptr)
  if r < 0 then raise() end
  return r == 1
end
Work.is_completed = Work.test

-- ---------------------------------------------------------------- collectives
local function redop(op, name)
  if name == nil then return C.EM_DIST_SUM end
  local r = REDOPS[name]
  if not r then
    throw(string.format("%s: unknown reduction %s (expected 'sum', 'avg', 'max', 'min' or 'product')", op,
      type(name) == 'string' and ("'" .. name .. "'") or describe(name)))
  end
  return r
end

local function need_tensor(op, t)
  if not is_tensor(t) then throw(string.format('%s: expected a tensor, got %s', op, describe(t))) end
end

local OPTS = option_set('group', 'async')
local P2P_OPTS = option_set('group', 'async', 'tag')
local OUT_OPTS = option_set('group', 'async', 'out')

-- Lets op's optional middle argument be skipped: f(t, opts) as f(t, nil, opts).
local function shift(a, b)
  if type(a) == 'table' and b == nil then return nil, a end
  return a, b
end

function dist.all_reduce(t, op, opts)
  op, opts = shift(op, opts)
  need_tensor('all_reduce', t)
  check_opts('all_reduce', opts, OPTS, 3)
  local g = group_ptr('all_reduce', opts and opts.group)
  return finish('all_reduce', opts, t, C.em_dist_all_reduce(g, t, redop('all_reduce', op), wb(opts)))
end

function dist.broadcast(t, root, opts)
  root, opts = shift(root, opts)
  need_tensor('broadcast', t)
  check_opts('broadcast', opts, OPTS, 3)
  root = root or 0
  if type(root) ~= 'number' or root ~= math.floor(root) then
    throw('broadcast: root must be a rank (0-based integer), got ' .. describe(root))
  end
  local g = group_ptr('broadcast', opts and opts.group)
  return finish('broadcast', opts, t, C.em_dist_broadcast(g, t, root, wb(opts)))
end

local function new_result(op, dims, like)
  local sizes = ffi.new('int64_t[?]', #dims)
  for i, d in ipairs(dims) do sizes[i - 1] = d end
  return I.new(C.em_empty(I.box, #dims, sizes, C.em_tensor_dtype(like), C.em_tensor_device(like)))
end

-- all_gather(t [, {out =}]): [world_size, t.shape...], rank 0's tensor first.
function dist.all_gather(t, opts)
  need_tensor('all_gather', t)
  check_opts('all_gather', opts, OUT_OPTS, 2)
  local g = group_ptr('all_gather', opts and opts.group)
  local out = opts and opts.out
  if out == nil then
    local dims = { C.em_dist_size(g) }
    for _, d in ipairs(t.shape) do dims[#dims + 1] = d end
    out = new_result('all_gather', dims, t)
  else
    need_tensor('all_gather', out)
  end
  return finish('all_gather', opts, out, C.em_dist_all_gather(g, out, t, wb(opts)))
end

-- reduce_scatter(t [, op] [, {out =}]): rank r receives the reduction of the r-th of
-- world_size equal blocks of t (its first dim split, or t flattened).
function dist.reduce_scatter(t, op, opts)
  op, opts = shift(op, opts)
  need_tensor('reduce_scatter', t)
  check_opts('reduce_scatter', opts, OUT_OPTS, 3)
  local g = group_ptr('reduce_scatter', opts and opts.group)
  local r = redop('reduce_scatter', op)
  local out = opts and opts.out
  if out == nil then
    local n, shape = C.em_dist_size(g), t.shape
    local dims
    if #shape >= 1 and shape[1] % n == 0 then
      dims = { shape[1] / n }
      for i = 2, #shape do dims[i] = shape[i] end
    elseif t:numel() % n == 0 then
      dims = { t:numel() / n }
    else
      -- the C call reports the problem
      dims = { 0 }
    end
    out = new_result('reduce_scatter', dims, t)
  else
    need_tensor('reduce_scatter', out)
  end
  return finish('reduce_scatter', opts, out, C.em_dist_reduce_scatter(g, out, t, r, wb(opts)))
end

function dist.barrier(opts)
  check_opts('barrier', opts, OPTS, 1)
  return finish('barrier', opts, nil, C.em_dist_barrier(group_ptr('barrier', opts and opts.group), wb(opts)))
end

local function p2p(op, fn, t, peer, opts)
  need_tensor(op, t)
  check_opts(op, opts, P2P_OPTS, 3)
  if type(peer) ~= 'number' or peer ~= math.floor(peer) then
    throw(string.format('%s: expected a rank (0-based integer) for argument 2, got %s', op, describe(peer)))
  end
  local tag = opts and opts.tag or 0
  if type(tag) ~= 'number' or tag ~= math.floor(tag) then
    throw(op .. ': tag must be an integer, got ' .. describe(tag))
  end
  return finish(op, opts, op == 'recv' and t or nil, fn(group_ptr(op, opts and opts.group), t, peer, tag, wb(opts)))
end

function dist.send(t, dst, opts) return p2p('send', C.em_dist_send, t, dst, opts) end
function dist.recv(t, src, opts) return p2p('recv', C.em_dist_recv, t, src, opts) end

-- ---------------------------------------------------------------- all_to_all, gather, scatter, reduce, *_v
-- Counts are elements, one per rank of the group (rank 0's first): a Lua list or an
-- integer tensor (read on the CPU as int64). Returns an int64_t array.
local function counts_arg(op, name, c, n)
  local arr = ffi.new('int64_t[?]', n)
  if is_tensor(c) then
    if c:numel() ~= n then
      throw(string.format('%s: %s has %d elements, expected %d (one per rank)', op, name, c:numel(), n))
    end
    if c:is_floating_point() or c.dtype == 'bool' then
      throw(string.format('%s: %s must be an integer tensor, got %s', op, name, c.dtype))
    end
    local h = c:to('int64'):to('cpu'):contiguous()
    ffi.copy(arr, ffi.cast('int64_t*', C.em_tensor_data(h)), 8 * n)
    return arr
  end
  if type(c) ~= 'table' then
    throw(string.format('%s: %s must be a list of counts or an integer tensor, got %s', op, name, describe(c)))
  end
  if #c ~= n then
    throw(string.format('%s: %s has %d entries, expected %d (one per rank)', op, name, #c, n))
  end
  for i = 1, n do
    local v = c[i]
    if type(v) ~= 'number' or v ~= math.floor(v) then
      throw(string.format('%s: %s[%d] is %s, expected a count of elements (an integer)', op, name, i, describe(v)))
    end
    arr[i - 1] = v
  end
  return arr
end

local function need_root(op, root)
  if type(root) ~= 'number' or root ~= math.floor(root) then
    throw(op .. ': root must be a rank (0-based integer), got ' .. describe(root))
  end
  return root
end

-- all_to_all(out, in [, opts]): block r of in (numel / world_size elements) goes to rank
-- r; block r of out comes from rank r. Returns out.
function dist.all_to_all(out, input, opts)
  need_tensor('all_to_all', out)
  need_tensor('all_to_all', input)
  check_opts('all_to_all', opts, OPTS, 3)
  local g = group_ptr('all_to_all', opts and opts.group)
  return finish('all_to_all', opts, out, C.em_dist_all_to_all(g, out, input, wb(opts)))
end

-- all_to_all_v(out, out_counts, in, in_counts [, opts]): in_counts[r] elements of in (in
-- rank order) go to rank r, out_counts[r] elements of out come from rank r (lists are
-- 1-based: out_counts[1] is rank 0's). Zero counts are fine; counts that do not match
-- between ranks are an error on every rank (MPI) or a timeout (NCCL). Returns out.
function dist.all_to_all_v(out, out_counts, input, in_counts, opts)
  need_tensor('all_to_all_v', out)
  need_tensor('all_to_all_v', input)
  check_opts('all_to_all_v', opts, OPTS, 5)
  local g = group_ptr('all_to_all_v', opts and opts.group)
  local n = C.em_dist_size(g)
  local oc, ic = counts_arg('all_to_all_v', 'out_counts', out_counts, n), counts_arg('all_to_all_v', 'in_counts',
    in_counts, n)
  return finish('all_to_all_v', opts, out, C.em_dist_all_to_all_v(g, out, oc, input, ic, wb(opts)))
end

-- gather(out, in, root [, opts]): the root's out receives world_size blocks of numel(in),
-- rank 0's first; out is ignored elsewhere (nil is fine). out nil on the root: a new
-- [world_size, in.shape...] tensor. Returns out on the root, nil elsewhere.
function dist.gather(out, input, root, opts)
  need_tensor('gather', input)
  if type(root) == 'table' and opts == nil then root, opts = nil, root end
  check_opts('gather', opts, OPTS, 4)
  root = need_root('gather', root == nil and 0 or root)
  local g = group_ptr('gather', opts and opts.group)
  local me = C.em_dist_rank(g)
  if me ~= root then out = nil
  elseif out == nil then
    local dims = { C.em_dist_size(g) }
    for _, d in ipairs(input.shape) do dims[#dims + 1] = d end
    out = new_result('gather', dims, input)
  else
    need_tensor('gather', out)
  end
  return finish('gather', opts, out, C.em_dist_gather(g, out, input, root, wb(opts)))
end

-- scatter(out, in, root [, opts]): rank r's out receives block r of the root's in
-- (world_size blocks of numel(out)); in is ignored (nil is fine) elsewhere. Returns out.
function dist.scatter(out, input, root, opts)
  need_tensor('scatter', out)
  if type(root) == 'table' and opts == nil then root, opts = nil, root end
  check_opts('scatter', opts, OPTS, 4)
  root = need_root('scatter', root == nil and 0 or root)
  local g = group_ptr('scatter', opts and opts.group)
  if C.em_dist_rank(g) ~= root then input = nil
  elseif input ~= nil then need_tensor('scatter', input) end
  return finish('scatter', opts, out, C.em_dist_scatter(g, out, input, root, wb(opts)))
end

-- reduce(t [, op] [, root] [, opts]): in place; the reduction (default 'sum') lands in
-- the root's t (default root 0); other ranks' t may hold partial results. Returns t.
function dist.reduce(t, op, root, opts)
  if type(op) == 'table' and root == nil and opts == nil then op, opts = nil, op
  elseif type(root) == 'table' and opts == nil then root, opts = nil, root end
  need_tensor('reduce', t)
  check_opts('reduce', opts, OPTS, 4)
  root = need_root('reduce', root == nil and 0 or root)
  local g = group_ptr('reduce', opts and opts.group)
  return finish('reduce', opts, t, C.em_dist_reduce(g, t, redop('reduce', op), root, wb(opts)))
end

-- all_gather_v(out, counts, in [, opts]): out receives counts[r] elements from each rank r
-- in rank order (every rank passes the same counts; in holds this rank's count). out nil:
-- a new 1-D tensor of sum(counts) elements. Returns out.
function dist.all_gather_v(out, counts, input, opts)
  need_tensor('all_gather_v', input)
  check_opts('all_gather_v', opts, OPTS, 4)
  local g = group_ptr('all_gather_v', opts and opts.group)
  local c = counts_arg('all_gather_v', 'counts', counts, C.em_dist_size(g))
  if out == nil then
    local total = 0
    for i = 0, C.em_dist_size(g) - 1 do total = total + tonumber(c[i]) end
    out = new_result('all_gather_v', { total }, input)
  else
    need_tensor('all_gather_v', out)
  end
  return finish('all_gather_v', opts, out, C.em_dist_all_gather_v(g, out, c, input, wb(opts)))
end

-- Group methods: the same collectives on that group.
for _, name in ipairs { 'all_reduce', 'broadcast', 'all_gather', 'reduce_scatter', 'send', 'recv' } do
  local f = dist[name]
  Group[name] = function(self, t, a, b)
    local x, o = a, b
    if type(a) == 'table' and b == nil then x, o = nil, a end
    local opts = {}
    for k, v in pairs(o or {}) do opts[k] = v end
    opts.group = self
    if name == 'all_gather' then return f(t, opts) end
    return f(t, x, opts)
  end
end
-- g:all_to_all(out, in [, opts]) and the others with opts at a fixed position (arity + 1)
local function with_group(opts, g)
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  o.group = g
  return o
end
for name, arity in pairs { all_to_all = 2, all_to_all_v = 4, gather = 3, scatter = 3, all_gather_v = 3 } do
  local f = dist[name]
  Group[name] = function(self, ...)
    local a = { ... }
    a[arity + 1] = with_group(a[arity + 1], self)
    return f(unpack(a, 1, arity + 1))
  end
end
function Group:reduce(t, op, root, opts)
  if type(op) == 'table' and root == nil and opts == nil then op, opts = nil, op
  elseif type(root) == 'table' and opts == nil then root, opts = nil, root end
  return dist.reduce(t, op, root, with_group(opts, self))
end
function Group:barrier(opts)
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  o.group = self
  return dist.barrier(o)
end

-- Store{host, port, server, timeout}: a c10d TCPStore client or server (ember/store.lua).
dist.Store = require('ember.store').new

-- nn.DistributedDataParallel lives with the rest of nn but is registered here, so that the
-- nn library itself does not depend on dist.
if ember.nn then ember.nn.DistributedDataParallel = require 'ember.nn.ddp' end

return dist
