-- ember.nn.DistributedDataParallel: data-parallel training over ember.dist, after PyTorch's
-- DDP; the work happens in the C reducer (runtime/distributed, ember/dist.h).
--
--   ember.dist.init()
--   local model = nn.DistributedDataParallel(net, {bucket_cap_mb = 25})
--   local opt = optim.SGD(model:parameters(), {lr = 0.05})
--   for x, y in my_shard_of_the_data do
--     opt:zero_grad(); F.cross_entropy(model(x), y):backward(); opt:step()
--   end
--
-- At construction every rank must hold the same model (else an error naming the first
-- difference, on every rank); rank 0's parameters and buffers are copied to all. During
-- backward, gradients are averaged over the ranks in buckets (reverse parameter order,
-- the first 1 MiB, then up to bucket_cap_mb), each bucket's allreduce starting while
-- backward goes on; when backward returns, every .grad holds the average.
--
-- Options: bucket_cap_mb (25), first_bucket_mb (1), find_unused_parameters (false: a
-- parameter that gets no gradient is an error naming it, at the next forward; true: the
-- graph is walked after each forward and parameters it does not reach count as ready),
-- broadcast_buffers (true: rank 0's buffers, e.g. batch-norm statistics, are copied to all
-- ranks before each training forward), gradient_as_bucket_view (true: .grad is a view of
-- the bucket, no copy back), comm_hook ('fp16' or 'bf16': buckets travel compressed),
-- rebuild_buckets (true: after the first iteration, buckets follow the order in which
-- gradients really arrived, rank 0's order), group (a dist.new_group; default the world),
-- shared_memory (true: when every rank runs on one host, CPU buckets of a floating dtype live
-- in memory all ranks map, and each rank sums its slice of every bucket straight from the
-- others' memory while backward runs; no MPI copies. EMBER_DIST_SHM=0 turns it off too).
--
-- Methods: model(...) / forward(...), no_sync(fn, ...) (backward inside fn accumulates
-- locally; the next synchronised backward reduces the sum), join(fn) (uneven inputs: fn
-- runs this rank's loop; a rank that finishes early shadows the others' collectives with
-- zero gradients until every rank is done, then all ranks take the same model),
-- stats() and buckets() (introspection). Parameters, state_dict (names prefixed with
-- "module.", as PyTorch's) and train/eval come from nn.Module; ddp.module is the model.
--
-- Model-parallel modules (model_parallel = true: nn.ShardedEmbeddingBags) are left out:
-- their parameters differ between ranks and they exchange their own gradients.
--
-- Evaluate under ember.no_grad (or on a model that is not wrapped): a forward with
-- gradients on takes part in collectives, so every rank must run it.
local ffi = require 'ffi'

local ember = require 'ember'
local nn = require 'ember.nn.module'
local I = require 'ember.internal'
local C = I.C
local throw, describe, check = I.throw, I.describe, I.check
local unpack = unpack or table.unpack

local DDP = nn.Module:extend('DistributedDataParallel')

local OPTS = I.option_set('bucket_cap_mb', 'first_bucket_mb', 'find_unused_parameters', 'broadcast_buffers',
  'gradient_as_bucket_view', 'comm_hook', 'rebuild_buckets', 'group', 'shared_memory')
local HOOKS = { fp16 = C.EM_DDP_HOOK_FP16, bf16 = C.EM_DDP_HOOK_BF16 }

local function option(opts, key, default, kind)
  local v = opts and opts[key]
  if v == nil then return default end
  if type(v) ~= kind or (kind == 'number' and not (v > 0)) then
    throw(string.format('DistributedDataParallel: %s must be a %s, got %s', key,
      kind == 'number' and 'number > 0' or kind, type(v) == 'number' and tostring(v) or describe(v)))
  end
  return v
end

local function tensor_array(list)
  local arr = ffi.new('em_tensor*[?]', math.max(#list, 1))
  for i, t in ipairs(list) do arr[i - 1] = t end
  return arr, #list
end

function DDP:init(module, opts)
  if not nn.is_module(module) then
    throw('DistributedDataParallel: expected a module to wrap, got ' .. describe(module))
  end
  I.check_opts('DistributedDataParallel', opts, OPTS, 2)
  local hook = opts and opts.comm_hook
  if hook ~= nil and not HOOKS[hook] then
    throw(string.format("DistributedDataParallel: comm_hook must be 'fp16', 'bf16' or nil, got %s",
      type(hook) == 'string' and ("'" .. hook .. "'") or describe(hook)))
  end
  local o = ffi.new('em_ddp_options')
  o.bucket_bytes = math.max(1, math.floor(option(opts, 'bucket_cap_mb', 25, 'number') * 1048576))
  o.first_bucket_bytes = math.max(1, math.floor(option(opts, 'first_bucket_mb', 1, 'number') * 1048576))
  o.find_unused_parameters = option(opts, 'find_unused_parameters', false, 'boolean') and 1 or 0
  o.gradient_as_bucket_view = option(opts, 'gradient_as_bucket_view', true, 'boolean') and 1 or 0
  o.rebuild_buckets = option(opts, 'rebuild_buckets', true, 'boolean') and 1 or 0
  o.shared_memory = option(opts, 'shared_memory', true, 'boolean') and 1 or 0
  o.comm_hook = hook and HOOKS[hook] or C.EM_DDP_HOOK_NONE
  local dist = ember.dist
  if not dist.is_initialized() then dist.init() end
  local group = opts and opts.group
  local gptr = nil
  if group ~= nil then
    if getmetatable(group) ~= dist.Group then
      throw('DistributedDataParallel: group must come from ember.dist.new_group, got ' .. describe(group))
    end
    gptr = not group._world and group._ptr or nil
  end
  self.module = module
  -- Tables with row-sparse gradients (nn.Embedding / nn.EmbeddingBag with sparse = true)
  -- stay out of the buckets: allreducing them would send whole [rows, D] tables. Their
  -- rows are exchanged instead (after_backward).
  -- A model-parallel module (model_parallel = true, e.g. nn.ShardedEmbeddingBags) holds
  -- different parameters on each rank and exchanges its own gradients: DDP leaves its
  -- parameters alone.
  local sparse_set, local_set = {}, {}
  for _, m in ipairs(module:modules()) do
    if m.model_parallel == true then
      for _, p in ipairs(m:parameters()) do local_set[p] = true end
    elseif m.sparse == true and I.is_tensor(m.weight) then
      sparse_set[m.weight] = true
    end
  end
  local named, sparse = {}, {}
  for _, pair in ipairs(module:named_parameters()) do
    local p = pair[2]
    if not local_set[p] then
      if sparse_set[p] then sparse[#sparse + 1] = pair else named[#named + 1] = pair end
    end
  end
  if #named + #sparse == 0 then throw('DistributedDataParallel: the model has no parameters') end
  for _, pair in ipairs(sparse) do ember.no_grad(function() dist.broadcast(pair[2], 0, { group = group }) end) end
  rawset(self, '_sparse', sparse)
  if #named == 0 then
    rawset(self, '_names', named)
    rawset(self, '_group', group)
    rawset(self, '_dense_free', true)
    return
  end
  local params, names = {}, ffi.new('const char*[?]', #named)
  for i, pair in ipairs(named) do
    params[i] = pair[2]
    names[i - 1] = pair[1]   -- the strings stay alive in `named` for the call
  end
  local parr, n = tensor_array(params)
  local barr, nb = tensor_array(module:buffers())
  local out = ffi.new('em_ddp*[1]')
  check(C.em_ddp_new(out, gptr, n, parr, names, nb, barr, o))
  rawset(self, '_reducer', ffi.gc(out[0], C.em_ddp_release))
  rawset(self, '_names', named)
  rawset(self, '_group', group)
  rawset(self, 'broadcast_buffers', option(opts, 'broadcast_buffers', true, 'boolean'))
  rawset(self, '_require_sync', true)
  rawset(self, '_joining', false)
  rawset(self, '_has_buffers', nb > 0)
end

-- The tensors in a forward's result (a tensor, or tables of them, nested).
local function collect(v, out, seen)
  if I.is_tensor(v) then
    out[#out + 1] = v
  elseif type(v) == 'table' and not seen[v] then
    seen[v] = true
    for _, x in pairs(v) do collect(x, out, seen) end
  end
  return out
end

local function buffer_args(self)
  if not self._has_buffers then return nil, 0 end
  local list = self.module:buffers()
  if #list == 0 then return nil, 0 end
  return tensor_array(list)
end

function DDP:forward(...)
  if self._dense_free then return self.module(...) end
  local r = self._reducer
  local grad_on = C.em_grad_enabled() ~= 0
  local sync = grad_on and self._require_sync
  local bufs, nb = nil, 0
  if self.broadcast_buffers and grad_on and self.training then bufs, nb = buffer_args(self) end
  check(C.em_ddp_pre_forward(r, sync and 1 or 0, self._joining and 1 or 0, nb, bufs))
  local out = self.module(...)
  if sync then
    local outs = collect(out, {}, {})
    local arr, n = tensor_array(outs)
    check(C.em_ddp_pre_backward(r, n, arr))
  end
  return out
end

-- after_backward(): the row-sparse gradients of the embedding tables, averaged over the
-- ranks by exchanging rows: each rank's (row ids, values) gathered by all_gather_v, then
-- coalesced (repeated rows summed) and divided by the world size. No [rows, D] tensor is
-- sent or made. The train job calls it after backward; in a loop of your own call it
-- between backward and the optimizer's step. A table without a gradient on some rank
-- contributes no rows there.
function DDP:after_backward()
  local sparse = self._sparse
  if #sparse == 0 then return end
  local dist = ember.dist
  local gopts = { group = self._group }
  ember.no_grad(function()
    for _, pair in ipairs(sparse) do
      local p = pair[2]
      local rows, d = p.shape[1], p:numel() / p.shape[1]
      local g = p.grad
      local idx, vals
      if g ~= nil and not I.is_tensor(g) then
        idx, vals = g:indices(), g:values():contiguous()
      elseif I.is_tensor(g) then   -- dense (a sparse gradient met a dense one): every row
        idx, vals = ember.arange(1, rows + 1, { dtype = 'int64' }), g:reshape(rows, d)
      else
        idx, vals = ember.empty({ 0 }, { dtype = 'int64' }), ember.empty({ 0, d }, { dtype = p.dtype })
      end
      local counts = dist.all_gather(ember.tensor({ idx:numel() }, { dtype = 'int64' }), gopts)
      counts = counts:reshape(counts:numel()):totable()
      local total, world = 0, #counts
      for _, c in ipairs(counts) do total = total + c end
      local all_idx = dist.all_gather_v(nil, counts, idx, gopts)
      local vcounts = {}
      for r, c in ipairs(counts) do vcounts[r] = c * d end
      local all_vals = dist.all_gather_v(nil, vcounts, vals:reshape(vals:numel()), gopts)
      p.grad = ember.SparseGrad(rows, all_idx, (all_vals / world):reshape(total, d))
    end
  end)
end

local function pack(...) return { n = select('#', ...), ... } end

-- no_sync(fn, ...): runs fn(...) with gradient synchronisation off; returns its results.
function DDP:no_sync(fn, ...)
  if type(fn) ~= 'function' then throw('no_sync: expected a function, got ' .. describe(fn)) end
  local prev = self._require_sync
  rawset(self, '_require_sync', false)
  local r = pack(pcall(fn, ...))
  rawset(self, '_require_sync', prev)
  if not r[1] then error(r[2], 0) end
  return unpack(r, 2, r.n)
end

-- join(fn, ...): runs fn(...), this rank's training loop over its (possibly shorter)
-- data; then shadows the other ranks until they are done too. Returns fn's results.
function DDP:join(fn, ...)
  if type(fn) ~= 'function' then throw('join: expected a function, got ' .. describe(fn)) end
  rawset(self, '_joining', true)
  local r = pack(pcall(fn, ...))
  if not r[1] then
    rawset(self, '_joining', false)
    error(r[2], 0)
  end
  local active = ffi.new('int[1]', 1)
  local ok, err = pcall(function()
    while active[0] ~= 0 do
      local bufs, nb = buffer_args(self)
      check(C.em_ddp_join_round(self._reducer, nb, bufs, active))
    end
  end)
  rawset(self, '_joining', false)
  if not ok then error(err, 0) end
  return unpack(r, 2, r.n)
end

-- stats(): {iterations, comm_seconds, exposed_seconds, hidden_share, buckets_launched,
-- bytes_reduced, rebuilt, shared_buckets, shared_memory_note}. hidden_share: the part of
-- communication time that backward did not wait for (0 for buckets in shared memory:
-- backward's own thread reduces them). shared_memory_note: why some bucket is not in
-- shared memory ('' when all are). reset_stats() starts again.
function DDP:stats()
  local v = ffi.new('double[7]')
  C.em_ddp_stats(self._reducer, v, 7)
  local comm, exposed = v[1], v[2]
  return { iterations = v[0], comm_seconds = comm, exposed_seconds = exposed,
    hidden_share = comm > 0 and math.max(0, 1 - exposed / comm) or 0, buckets_launched = v[3],
    bytes_reduced = v[4], rebuilt = v[5] ~= 0, shared_buckets = v[6],
    shared_memory_note = ffi.string(C.em_ddp_shared_memory_note(self._reducer)) }
end
function DDP:reset_stats() C.em_ddp_reset_stats(self._reducer) end

-- buckets(): the current layout, a list of buckets, each a list of parameter names.
function DDP:buckets()
  local out, r = {}, self._reducer
  local idx = ffi.new('int[?]', #self._names)
  for b = 0, C.em_ddp_num_buckets(r) - 1 do
    local n = C.em_ddp_bucket_params(r, b, idx, #self._names)
    local names = {}
    for i = 0, n - 1 do names[i + 1] = self._names[idx[i] + 1][1] end
    out[b + 1] = names
  end
  return out
end

-- The reducer holds the parameters it was built with: converting them afterwards would
-- leave it reducing the old tensors.
function DDP:to()
  throw('DistributedDataParallel: move or convert the model (model:to(...)) before wrapping it')
end

function DDP:extra_repr() return '' end

return DDP
