-- ember.nn.ShardedEmbeddingBags: model-parallel embedding tables, as in the DLRM paper
-- (Naumov et al. 2019, section 4) and dlrm_s_pytorch.py's --dist-backend mode: whole
-- tables are placed on ranks (shard_plan: balanced by rows x dim), each rank looks up its
-- own tables for the global batch, and an all_to_all hands every rank the pooled vectors
-- of every table for its own samples; in backward the gradients travel back the same way.
-- The MLPs around it stay data-parallel (nn.DistributedDataParallel leaves a module with
-- model_parallel = true out of its buckets and its row exchange).
--
--   local emb = nn.ShardedEmbeddingBags({1000000, 5000, 300}, 16, {mode = 'sum'})
--   local pooled = emb({{idx1, off1}, {idx2, off2}, {idx3, off3}})   -- 3 x [B, 16], this rank's B
--
-- Input, per table and for this rank's B samples, as nn.EmbeddingBag takes it: {indices,
-- offsets} (1-based rows and bag starts) or a 2-d [B, L] index tensor. Every rank must call
-- forward the same number of times (the exchanges are collectives); ranks may hold batches
-- of different sizes. Per step: a fixed-size all_to_all of counts, an all_to_all_v of the
-- indices (each rank sends each table's bags to the table's owner), the owners' lookups on
-- the global batch (samples in rank order, as one process would see the concatenated
-- batch), an all_to_all_v of the pooled vectors, and one in backward. The gradient that
-- reaches a table is that of the mean of the ranks' losses (scaled by 1 / world size, as
-- DDP averages), so training follows one process on the global batch.
--
-- Options: mode ('sum'), sparse (true: row-sparse gradients), group (a dist.new_group;
-- default the world), init (function(weight, t) run under no_grad on each held table t),
-- init_fills (1: random fills init makes), grad_scale (1 / world size).
-- Random numbers: for a table it does not hold, a rank skips the draws that making it
-- (nn.EmbeddingBag's normal fill) and init would take, so held tables and everything drawn
-- afterwards equal one process's.
-- Children are named by the 0-based table number, so state_dict keys ('3.weight') match
-- nn.Sequential's of all the tables; each rank's state_dict holds its own tables.
local ember = require 'ember'
local I = require 'ember.internal'
local throw, describe = I.throw, I.describe
local Module = require('ember.nn.module').Module

local M = {}

-- shard_plan(sizes, dim, world) -> owners: the 0-based rank of each table. Tables go,
-- largest (rows x dim) first, to the rank with the least load so far (the lowest rank on
-- ties): the longest-processing-time rule, deterministic on every rank. dim: a number or
-- one per table.
function M.shard_plan(sizes, dim, world)
  if type(sizes) ~= 'table' or #sizes == 0 then
    throw('shard_plan: expected a non-empty list of table sizes, got ' .. describe(sizes))
  end
  if type(world) ~= 'number' or world < 1 or world ~= math.floor(world) then
    throw('shard_plan: world size must be a positive integer, got ' .. describe(world))
  end
  local cost, order = {}, {}
  for t, rows in ipairs(sizes) do
    local d = type(dim) == 'table' and dim[t] or dim
    if type(rows) ~= 'number' or rows < 1 or type(d) ~= 'number' or d < 1 then
      local function show(v) return type(v) == 'number' and tostring(v) or describe(v) end
      throw(string.format('shard_plan: table %d has %s rows of dimension %s, expected positive integers', t,
        show(rows), show(d)))
    end
    cost[t], order[t] = rows * d, t
  end
  table.sort(order, function(a, b)
    if cost[a] ~= cost[b] then return cost[a] > cost[b] end
    return a < b
  end)
  local load, owners = {}, {}
  for r = 1, world do load[r] = 0 end
  for _, t in ipairs(order) do
    local best = 1
    for r = 2, world do
      if load[r] < load[best] then best = r end
    end
    owners[t] = best - 1
    load[best] = load[best] + cost[t]
  end
  return owners
end

local INT64 = { dtype = 'int64' }

-- lengths [B] and values [nnz] (int64) of one table's bags.
local function lengths_values(t, f)
  if ember.is_tensor(f) then
    if f:dim() ~= 2 then
      throw(string.format('ShardedEmbeddingBags: table %d: expected {indices, offsets} or a 2-d [B, L] tensor, ' ..
        'got a %d-d tensor', t, f:dim()))
    end
    local B, L = f.shape[1], f.shape[2]
    return ember.full({ B }, L, INT64), f:to('int64'):reshape(B * L)
  end
  if type(f) ~= 'table' or not ember.is_tensor(f[1]) or not ember.is_tensor(f[2]) then
    throw(string.format('ShardedEmbeddingBags: table %d: expected {indices, offsets} or a [B, L] tensor, got %s', t,
      describe(f)))
  end
  local idx, off = f[1]:to('int64'):contiguous(), f[2]:to('int64'):contiguous()
  if idx:dim() ~= 1 or off:dim() ~= 1 then
    throw(string.format('ShardedEmbeddingBags: table %d: indices and offsets must be 1-d, got %d-d and %d-d', t,
      idx:dim(), off:dim()))
  end
  local B, nnz = off:numel(), idx:numel()
  if B == 0 then return ember.empty({ 0 }, INT64), idx end
  local ends = ember.tensor({ nnz + 1 }, INT64)
  if B > 1 then ends = ember.cat({ off:narrow(1, 2, B - 1), ends }, 1) end
  return ends - off, idx
end

local function cat_nonempty(parts, empty_shape, like_dtype)
  local keep = {}
  for _, p in ipairs(parts) do
    if p:numel() > 0 then keep[#keep + 1] = p end
  end
  if #keep == 0 then return ember.empty(empty_shape, { dtype = like_dtype }) end
  if #keep == 1 then return keep[1]:contiguous() end
  return ember.cat(keep, 1)
end

-- The pooled vectors' exchange: inputs (anchor, pooled of each held table [B_global, D]);
-- output [sum over owners s of T_s x B, D], owner-major, then the owner's tables, then the
-- samples. The anchor (a fresh leaf) makes every rank record the function, also one that
-- holds no table, so that every rank takes part in backward's all_to_all.
local Exchange = ember.autograd.Function {
  name = 'ShardedEmbeddingBagsBackward',
  forward = function(ctx, plan, _, ...)
    local pooled, parts = { ... }, {}
    for r = 1, plan.world do
      for k = 1, #pooled do parts[#parts + 1] = pooled[k]:narrow(1, plan.start[r] + 1, plan.B[r]) end
    end
    local send = cat_nonempty(parts, { 0, plan.dim }, plan.dtype)
    local recv = ember.empty({ plan.recv_rows, plan.dim }, { dtype = plan.dtype })
    ember.dist.all_to_all_v(recv, plan.recv_counts, send, plan.send_counts, { group = plan.group })
    ctx.plan = plan
    return recv
  end,
  backward = function(ctx, grad)
    local plan = ctx.plan
    local back = ember.empty({ plan.send_rows, plan.dim }, { dtype = plan.dtype })
    ember.dist.all_to_all_v(back, plan.send_counts, grad:contiguous(), plan.recv_counts, { group = plan.group })
    local T, out = plan.held, { nil, nil }
    for k = 1, T do
      local parts, pos = {}, 0
      for r = 1, plan.world do
        parts[r] = back:narrow(1, pos + (k - 1) * plan.B[r] + 1, plan.B[r])
        pos = pos + T * plan.B[r]
      end
      out[k + 2] = cat_nonempty(parts, { 0, plan.dim }, plan.dtype) * plan.scale
    end
    return unpack(out, 1, T + 2)
  end,
}

local Sharded = Module:extend('ShardedEmbeddingBags')
M.ShardedEmbeddingBags = Sharded

local OPTS = I.option_set('mode', 'sparse', 'group', 'init', 'init_fills', 'grad_scale', 'dtype')

function Sharded:init(sizes, dim, opts)
  I.check_opts('ShardedEmbeddingBags', opts, OPTS, 3)
  opts = opts or {}
  if type(dim) ~= 'number' or dim < 1 or dim ~= math.floor(dim) then
    throw('ShardedEmbeddingBags: embedding_dim must be a positive integer, got ' .. describe(dim))
  end
  if opts.init ~= nil and type(opts.init) ~= 'function' then
    throw('ShardedEmbeddingBags: init must be a function(weight, t), got ' .. describe(opts.init))
  end
  local dist = ember.dist
  if not dist.is_initialized() then dist.init() end
  local group = opts.group
  local W, rank = dist.world_size(group), dist.rank(group)
  local owners = M.shard_plan(sizes, dim, W)
  local nn_layers = require 'ember.nn.layers'
  local held, tables_of = {}, {}
  for r = 1, W do tables_of[r] = {} end
  local fills = opts.init_fills or 1
  for t, rows in ipairs(sizes) do
    local o = owners[t]
    tables_of[o + 1][#tables_of[o + 1] + 1] = t
    if o == rank then
      local bag = nn_layers.EmbeddingBag(rows, dim, { mode = opts.mode or 'sum', sparse = opts.sparse ~= false,
        dtype = opts.dtype })
      if opts.init then ember.no_grad(function() opts.init(bag.weight, t) end) end
      self:add_module(tostring(t - 1), bag)
      held[#held + 1] = t
    else
      for _ = 1, 1 + fills do ember.skip_rng(rows * dim) end
    end
  end
  self.num_tables, self.embedding_dim, self.world_size, self.rank = #sizes, dim, W, rank
  self.mode, self.model_parallel = opts.mode or 'sum', true
  self.owners, self.held, self.tables_of, self.group = owners, held, tables_of, group
  self.grad_scale = opts.grad_scale or 1 / W
  self.dtype = opts.dtype or 'float32'
end

-- The table t's module on this rank (nil when another rank holds it).
function Sharded:table(t) return self[tostring(t - 1)] end

function Sharded:forward(sparse)
  local T, W = self.num_tables, self.world_size
  if type(sparse) ~= 'table' or #sparse ~= T then
    throw(string.format('ShardedEmbeddingBags: expected %d features (one {indices, offsets} per table), got %s', T,
      type(sparse) == 'table' and tostring(#sparse) or describe(sparse)))
  end
  local dist, gopts = ember.dist, { group = self.group }
  local lens, vals, B = {}, {}, nil
  for t = 1, T do
    lens[t], vals[t] = lengths_values(t, sparse[t])
    if B == nil then B = lens[t]:numel() end
    if lens[t]:numel() ~= B then
      throw(string.format('ShardedEmbeddingBags: table %d has %d bags, table 1 has %d (one bag per sample)', t,
        lens[t]:numel(), B))
    end
  end
  -- 1. counts: to each rank r, [B, nnz of each table r holds]
  local maxT = 0
  for r = 1, W do maxT = math.max(maxT, #self.tables_of[r]) end
  local hdr, parts, send_counts = {}, {}, {}
  for r = 1, W do
    local row, n = { B }, 0
    for k, t in ipairs(self.tables_of[r]) do
      row[k + 1] = vals[t]:numel()
      parts[#parts + 1], parts[#parts + 2] = lens[t], vals[t]
      n = n + B + vals[t]:numel()
    end
    for k = #row + 1, maxT + 1 do row[k] = 0 end
    hdr[r], send_counts[r] = row, n
  end
  local got = dist.all_to_all(ember.empty({ W, maxT + 1 }, INT64), ember.tensor(hdr, INT64), gopts):totable()
  -- 2. the indices: this rank's tables' bags from every rank
  local Bs, recv_counts, start, total = {}, {}, {}, 0
  local Tme = #self.held
  for r = 1, W do
    Bs[r], start[r] = got[r][1], total
    total = total + Bs[r]
    local n = 0
    for k = 1, Tme do n = n + Bs[r] + got[r][k + 1] end
    recv_counts[r] = n
  end
  local recv_n = 0
  for r = 1, W do recv_n = recv_n + recv_counts[r] end
  local recv = dist.all_to_all_v(ember.empty({ recv_n }, INT64), recv_counts,
    cat_nonempty(parts, { 0 }, 'int64'), send_counts, gopts)
  -- 3. the lookups on the global batch
  local pooled, pos = {}, {}
  for r = 1, W do pos[r] = 0 end
  do
    local base = 0
    for r = 1, W do pos[r], base = base, base + recv_counts[r] end
  end
  for k, t in ipairs(self.held) do
    local lp, vp = {}, {}
    for r = 1, W do
      local nnz = got[r][k + 1]
      lp[r] = recv:narrow(1, pos[r] + 1, Bs[r])
      vp[r] = recv:narrow(1, pos[r] + Bs[r] + 1, nnz)
      pos[r] = pos[r] + Bs[r] + nnz
    end
    local L, V = cat_nonempty(lp, { 0 }, 'int64'), cat_nonempty(vp, { 0 }, 'int64')
    local offsets = L:cumsum(1) - L + 1
    pooled[k] = self:table(t)(V, offsets)
  end
  -- 4. the pooled vectors: this rank's samples of every table
  local D = self.embedding_dim
  local plan = { world = W, B = Bs, start = start, dim = D, dtype = self.dtype, group = self.group, held = Tme,
    scale = self.grad_scale, send_counts = {}, recv_counts = {}, send_rows = Tme * total, recv_rows = T * B }
  for r = 1, W do
    plan.send_counts[r] = Tme * Bs[r] * D
    plan.recv_counts[r] = #self.tables_of[r] * B * D
  end
  local anchor = ember.zeros({ 1 }):requires_grad_()
  local out = Exchange(plan, anchor, unpack(pooled, 1, Tme))
  -- table t: rows of its owner's block
  local result, at = {}, {}
  local row = 0
  for r = 1, W do
    for k, t in ipairs(self.tables_of[r]) do
      at[t] = row + (k - 1) * B
    end
    row = row + #self.tables_of[r] * B
  end
  for t = 1, T do result[t] = out:narrow(1, at[t] + 1, B) end
  return result
end

function Sharded:extra_repr()
  return string.format("%d tables, dim %d, mode='%s', rank %d of %d holds %d", self.num_tables, self.embedding_dim,
    self.mode, self.rank, self.world_size, #self.held)
end

return M
