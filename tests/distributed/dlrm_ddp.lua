-- tests/distributed/dlrm_ddp.lua - DLRM (examples/dlrm.lua) data-parallel with row-sparse
-- embedding gradients: nn.DistributedDataParallel keeps the sparse tables out of its
-- buckets and exchanges their rows (after_backward). On N ranks:
--   ember launch -n 4 tests/distributed/dlrm_ddp.lua
-- Every rank also trains the reference, the same model on the whole global batch in one
-- process: the loss curve (the ranks' losses averaged) and every parameter after every
-- step must match it; the tables' gradients must stay sparse (no [rows, D] tensor).
local U = dofile(arg[0]:gsub('[^/]*$', '') .. 'util.lua')
local dist, F = ember.dist, ember.nn.functional
dist.init { timeout = 60 }
local rank, W = dist.rank(), dist.world_size()
local check, near = U.check, U.near
local B, STEPS = 4, 6   -- samples per rank per step
local TABLES = { 50, 30, 20 }
local make_dlrm = dofile('examples/dlrm.lua')

local function make(embeddings)
  ember.manual_seed(7)
  return make_dlrm { arch_mlp_bot = '4-8-4', arch_mlp_top = '8-1', table_sizes = TABLES,
    arch_sparse_feature_size = 4, logits = true, embeddings = embeddings }
end

-- The global batch of a step (the same on every rank): dense [B*W, 4], per table a bag of
-- 2 rows per sample ([B*W, 2], 1-based), labels 0/1.
local function global_batch(step)
  ember.manual_seed(100 + step)
  local dense = ember.rand(B * W, 4)
  local sparse = {}
  for t, rows in ipairs(TABLES) do sparse[t] = ember.randint(1, math.min(rows, 8) + 1, { B * W, 2 }) end
  local y = ember.randint(0, 2, { B * W, 1 }):to('float32')
  return dense, sparse, y
end

local function rows_of(dense, sparse, y, from, n)
  local s = {}
  for t, idx in ipairs(sparse) do s[t] = idx:narrow(1, from, n):contiguous() end
  return dense:narrow(1, from, n):contiguous(), s, y:narrow(1, from, n):contiguous()
end

-- one nn.EmbeddingBag per table, then all tables in one weight (TableBatchedEmbeddingBags)
for _, embeddings in ipairs { 'local', 'batched' } do
  local ref, model = make(embeddings), make(embeddings)
  local ddp = ember.nn.DistributedDataParallel(model)
  local opt_ref = ember.optim.SGD(ref:parameters(), { lr = 0.5 })
  local opt = ember.optim.SGD(ddp:parameters(), { lr = 0.5 })
  for step = 1, STEPS do
    local dense, sparse, y = global_batch(step)
    -- reference: one process, the global batch
    opt_ref:zero_grad()
    local ref_loss = F.binary_cross_entropy_with_logits(ref(dense, sparse), y)
    ref_loss:backward()
    opt_ref:step()
    -- this rank's part
    local d, s, yl = rows_of(dense, sparse, y, rank * B + 1, B)
    opt:zero_grad()
    local loss = F.binary_cross_entropy_with_logits(ddp(d, s), yl)
    loss:backward()
    ddp:after_backward()
    local g = model:sparse_parameters()[1].grad
    check(g ~= nil and not ember.is_tensor(g), 'step %d: the table gradient is no longer row-sparse', step)
    local most = 2 * B * W * (embeddings == 'batched' and #TABLES or 1)
    check(g:indices():numel() <= most, 'step %d: %d rows in the exchanged gradient', step, g:indices():numel())
    opt:step()
    local avg = dist.all_reduce(ember.tensor({ loss:item() }), 'avg'):item()
    check(math.abs(avg - ref_loss:item()) < 1e-5, 'step %d: loss %.7f, one process on the global batch %.7f', step, avg,
      ref_loss:item())
    local pa, pb = model:parameters(), ref:parameters()
    for i = 1, #pa do near(pa[i], pb[i], 2e-5, string.format('step %d: parameter %d', step, i)) end
  end
end
if rank == 0 then print(string.format('dlrm_ddp: %d ranks, %d steps match one process (%d checks)', W, STEPS, U.passed)) end
dist.barrier()
