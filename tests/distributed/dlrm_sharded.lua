-- tests/distributed/dlrm_sharded.lua - DLRM (examples/dlrm.lua) with model-parallel tables
-- (embeddings = 'sharded': nn.ShardedEmbeddingBags, whole tables on ranks, the pooled
-- vectors exchanged by all_to_all_v forward and backward) and the MLPs under
-- nn.DistributedDataParallel. On N ranks:
--   ember launch -n 4 tests/distributed/dlrm_sharded.lua
-- Every rank also trains the reference, the unsharded model on the whole global batch in
-- one process. Checked: the placement (whole tables, balanced by rows x dim, every table on
-- exactly one rank), the held tables and the MLPs equal the reference's at the start (the
-- same seed), and after every step the loss (the ranks' losses averaged) and every
-- parameter, with SGD and with row-wise Adagrad on the tables; the tables' gradients stay
-- row-sparse; bags of varying length in DLRM's offsets format and the [B, L] form;
-- evaluation under no_grad with batches of different sizes on the ranks.
local U = dofile(arg[0]:gsub('[^/]*$', '') .. 'util.lua')
local dist, F = ember.dist, ember.nn.functional
dist.init { timeout = 60 }
local rank, W = dist.rank(), dist.world_size()
local check, near = U.check, U.near
local STEPS = 5
local TABLES = { 50, 30, 200, 20, 80 }
local make_dlrm = dofile('examples/dlrm.lua')

-- the placement rule on its own
local owners = ember.nn.shard_plan(TABLES, 4, W)
do
  local load, count = {}, {}
  for r = 1, W do load[r], count[r] = 0, 0 end
  for t, o in ipairs(owners) do
    check(o >= 0 and o < W, 'table %d placed on rank %s', t, tostring(o))
    load[o + 1], count[o + 1] = load[o + 1] + TABLES[t], count[o + 1] + 1
  end
  -- longest-processing-time: no rank carries more than the best split plus the largest table
  local total, maxl = 0, 0
  for _, n in ipairs(TABLES) do total = total + n end
  for r = 1, W do maxl = math.max(maxl, load[r]) end
  check(maxl <= total / W + 200, 'the placement is unbalanced: max load %d of %d over %d ranks', maxl, total, W)
  if W == 2 then check(owners[3] == 0 and owners[5] == 1, 'at 2 ranks: the 200-row table on rank 0, the 80 on 1') end
end

local function make(embeddings)
  ember.manual_seed(7)
  return make_dlrm { arch_mlp_bot = '4-8-4', arch_mlp_top = '8-1', table_sizes = TABLES,
    arch_sparse_feature_size = 4, logits = true, embeddings = embeddings }
end

-- Training: 4 samples per rank (DDP's average is the global mean only for equal batches).
-- Evaluation: 2 + rank samples per rank, batches of different sizes.
local function sizes_for(f)
  local total, first = 0, 1
  for r = 0, W - 1 do
    if r == rank then first = total + 1 end
    total = total + f(r)
  end
  return total, first, f(rank)
end
local GB, first, B = sizes_for(function() return 4 end)

-- The global batch of a step (the same on every rank): dense [GB, 4]; tables 1, 3, 5 as
-- bags of 1-3 rows in the offsets format, tables 2 and 4 as [GB, 2] index tensors.
local function global_batch(step, GB)
  ember.manual_seed(100 + step)
  local dense = ember.rand(GB, 4)
  local sparse = {}
  for t, rows in ipairs(TABLES) do
    if t % 2 == 0 then
      sparse[t] = ember.randint(1, math.min(rows, 8) + 1, { GB, 2 })
    else
      local lens = ember.randint(1, 4, { GB }):totable()
      local off, n = {}, 0
      for i = 1, GB do off[i], n = n + 1, n + lens[i] end
      sparse[t] = { ember.randint(1, math.min(rows, 12) + 1, { n }), ember.tensor(off, { dtype = 'int64' }) }
    end
  end
  local y = ember.randint(0, 2, { GB, 1 }):to('float32')
  return dense, sparse, y
end

-- samples from..from+n-1 of a global batch
local function rows_of(dense, sparse, y, from, n)
  local s = {}
  for t, f in ipairs(sparse) do
    if ember.is_tensor(f) then
      s[t] = f:narrow(1, from, n):contiguous()
    else
      local idx, off = f[1], f[2]:totable()
      local lo = off[from]
      local hi = (from + n <= #off) and off[from + n] or idx:numel() + 1
      local o = {}
      for i = 1, n do o[i] = off[from + i - 1] - lo + 1 end
      s[t] = { idx:narrow(1, lo, hi - lo):contiguous(), ember.tensor(o, { dtype = 'int64' }) }
    end
  end
  return dense:narrow(1, from, n):contiguous(), s, y:narrow(1, from, n):contiguous()
end

-- the reference's parameter matching each of the sharded model's (by name)
local function pairs_by_name(model, ref)
  local by = {}
  for _, p in ipairs(ref:named_parameters()) do by[p[1]] = p[2] end
  local out = {}
  for _, p in ipairs(model:named_parameters()) do
    check(by[p[1]] ~= nil, 'parameter %s of the sharded model is not in the reference', p[1])
    out[#out + 1] = { p[1], p[2], by[p[1]] }
  end
  return out
end

for _, which in ipairs { 'sgd', 'rowwise_adagrad' } do
  local ref, model = make('local'), make('sharded')
  -- the tables this rank holds are those the plan gives it
  local held = 0
  for t = 1, #TABLES do
    local mine = model.emb:table(t) ~= nil
    check(mine == (owners[t] == rank), '%s: table %d held=%s, planned on rank %d', which, t, tostring(mine), owners[t])
    if mine then held = held + 1 end
  end
  local total_held = dist.all_reduce(ember.tensor({ held }), 'sum'):item()
  check(total_held == #TABLES, '%s: %d tables held over the ranks, expected %d', which, total_held, #TABLES)
  local matched = pairs_by_name(model, ref)
  for _, m in ipairs(matched) do near(m[2], m[3], 0, which .. ': initial ' .. m[1]) end
  local ddp = ember.nn.DistributedDataParallel(model)
  local opt_ref, opt
  if which == 'sgd' then
    opt_ref = ember.optim.SGD(ref:parameters(), { lr = 0.5 })
    opt = ember.optim.SGD(ddp:parameters(), { lr = 0.5 })
  else
    opt_ref = { ember.optim.Adagrad(ref:dense_parameters(), { lr = 0.1 }),
      ember.optim.RowWiseAdagrad(ref:sparse_parameters(), { lr = 0.1 }) }
    opt = { ember.optim.Adagrad(model:dense_parameters(), { lr = 0.1 }),
      ember.optim.RowWiseAdagrad(model:sparse_parameters(), { lr = 0.1 }) }
  end
  local function each(o, f)
    if o[1] then for _, x in ipairs(o) do x[f](x) end else o[f](o) end
  end
  for step = 1, STEPS do
    local dense, sparse, y = global_batch(step, GB)
    each(opt_ref, 'zero_grad')
    local ref_loss = F.binary_cross_entropy_with_logits(ref(dense, sparse), y)
    ref_loss:backward()
    each(opt_ref, 'step')
    local d, s, yl = rows_of(dense, sparse, y, first, B)
    each(opt, 'zero_grad')
    local loss = F.binary_cross_entropy_with_logits(ddp(d, s), yl)
    loss:backward()
    ddp:after_backward()
    for _, p in ipairs(model:sparse_parameters()) do
      check(p.grad ~= nil and not ember.is_tensor(p.grad), '%s step %d: a held table has no row-sparse gradient',
        which, step)
    end
    each(opt, 'step')
    -- the global loss: the local means weighted by the local batch sizes
    local sum = dist.all_reduce(ember.tensor({ loss:item() * B }, { dtype = 'float64' }), 'sum'):item()
    check(math.abs(sum / GB - ref_loss:item()) < 1e-5, '%s step %d: loss %.7f, one process on the global batch %.7f',
      which, step, sum / GB, ref_loss:item())
    for _, m in ipairs(matched) do near(m[2], m[3], 3e-5, string.format('%s step %d: %s', which, step, m[1])) end
  end
  -- evaluation: no graph, still the exchange; every rank's output equals the reference's
  local EB, efirst, eB = sizes_for(function(r) return 2 + r end)
  local dense, sparse = global_batch(99, EB)
  local d, s = rows_of(dense, sparse, dense, efirst, eB)
  local out = ember.no_grad(function() return model(d, s) end)
  local want = ember.no_grad(function() return ref(dense, sparse) end):narrow(1, efirst, eB)
  near(out, want, 3e-5, which .. ': evaluation under no_grad')
end

-- Graphs freed at different times on different ranks: rank 0 collects each step's graph
-- before the next forward, the others keep the previous step's loss (and so its graph)
-- alive, as a loss kept for logging does. The leaves' gradient accumulators are then made
-- anew on rank 0 and reused on the others; where DDP's bucket reductions fall against the
-- tables' all_to_all in backward must not depend on that, or the ranks wait in different
-- collectives until the timeout.
do
  local model = make('sharded')
  -- a bucket per parameter: the top MLP's reduce during backward, before the tables' turn
  local ddp = ember.nn.DistributedDataParallel(model, { first_bucket_mb = 1e-6, bucket_cap_mb = 1e-6 })
  local opt = ember.optim.SGD(ddp:parameters(), { lr = 0.1 })
  local kept, losses = nil, 0
  for step = 1, 6 do
    local dense, sparse, y = global_batch(200 + step, GB)
    local d, s, yl = rows_of(dense, sparse, y, first, B)
    if rank == 0 then
      kept = nil
      collectgarbage('collect')
    end
    opt:zero_grad()
    local loss = F.binary_cross_entropy_with_logits(ddp(d, s), yl)
    loss:backward()
    ddp:after_backward()
    opt:step()
    if rank ~= 0 then kept = loss end
    losses = losses + 1
  end
  check(losses == 6, 'graphs freed at different times: %d of 6 steps', losses)
end

-- a mistake is an error on the rank that makes it (before any exchange)
local m = make('sharded')
local ok, err = pcall(function() return m.emb({ ember.randint(1, 5, { 2, 2 }) }) end)
check(not ok and tostring(err):find('expected 5 features', 1, true), 'a wrong feature count: %s', tostring(err))

if rank == 0 then
  print(string.format('dlrm_sharded: %d ranks, %d steps x 2 optimizers match one process (%d checks)', W, STEPS, U.passed))
end
dist.barrier()
