-- ember.pipeline.distributed: the `distributed:` section of a pipeline file.
--
--   distributed:
--     backend: auto          # auto (nccl when device is cuda, else mpi, or gloo when started
--                            # torchrun-style), mpi, gloo, self (one process) or nccl
--     bucket_cap_mb: 25
--     find_unused_parameters: false
--     broadcast_buffers: true
--     comm_hook: none        # none, fp16 or bf16: gradients travel compressed
--     shared_memory: true    # ranks on one host sum CPU buckets in memory they all map
--     timeout: 600           # seconds a collective may take before the job is aborted
--     embeddings: replicated # or sharded: model-parallel tables (a model file that takes
--                            # args.embeddings = 'sharded', as examples/dlrm.lua), the MLPs
--                            # data-parallel; no checkpoints yet in that mode
--
--   ember launch -n 2 run pipelines/fashion_mnist_mlp.yaml
--
-- Its setup joins the world (ember.dist.init), tells the job this process's rank and the
-- world size (a train job then reads its own shard of the data, reshuffled each epoch from
-- the seed and the epoch, and only rank 0 writes checkpoints, metrics and the result) and
-- wraps the model in nn.DistributedDataParallel. data.batch_size is per rank: the global
-- batch is batch_size x world size.
--
-- A file without the section gets it anyway, with these defaults, when a launcher started
-- several processes (ember launch, mpirun, srun); a single process runs without it.
local S = require 'ember.util.schema'

local M = { doc = 'data-parallel training over several processes (ember launch -n N run ...)' }

local launched = false
do
  local ok, ember = pcall(require, 'ember')
  if ok and ember.dist then launched = ember.dist.env().world_size > 1 end
end

M.jobs = { train = true, pagerank = true }
M.schema = S.record({
  backend = S.enum({ 'auto', 'mpi', 'gloo', 'self', 'nccl' }, { default = 'auto' }),
  bucket_cap_mb = S.number { gt = 0, default = 25, doc = 'gradient bucket size (the first bucket is 1 MB)' },
  find_unused_parameters = S.boolean { default = false },
  broadcast_buffers = S.boolean { default = true, doc = "rank 0's buffers (batch-norm statistics) each step" },
  gradient_as_bucket_view = S.boolean { default = true },
  comm_hook = S.enum({ 'none', 'fp16', 'bf16' }, { default = 'none' }),
  shared_memory = S.boolean { default = true, doc = 'ranks on one host reduce CPU buckets in shared memory' },
  timeout = S.number { gt = 0, optional = true, doc = 'seconds a collective may take (default 600)' },
  embeddings = S.enum({ 'replicated', 'sharded' }, { default = 'replicated',
    doc = "sharded: embedding tables placed whole on ranks, lookups exchanged by all_to_all (DLRM's model " ..
      'parallelism)' }),
}, launched and { default = {} } or { optional = true })

-- The backend for a job on `device` (cfg.device, already resolved: 'cpu', 'cuda', 'cuda:N'):
-- auto means NCCL on a GPU, which also gives each local rank its own GPU.
function M.backend_for(backend, device)
  if backend == 'auto' and type(device) == 'string' and device:match('^cuda') then return 'nccl' end
  return backend
end

function M.setup(sec, cfg, ctx)
  local ember = require 'ember'
  local dist = ember.dist
  local backend = M.backend_for(sec.backend, cfg.device)
  dist.init { backend = backend, timeout = sec.timeout }
  ctx.rank, ctx.world_size = dist.rank(), dist.world_size()
  ctx.embeddings = sec.embeddings
  if backend == 'nccl' and cfg.device == 'cuda' then
    -- one GPU per local rank (NCCL refuses two ranks on one GPU); init made it current
    cfg.device = 'cuda:' .. (dist.local_rank() % ember.device_count('cuda'))
  end
  ctx.wrap_model = function(model)
    return ember.nn.DistributedDataParallel(model, { bucket_cap_mb = sec.bucket_cap_mb,
      find_unused_parameters = sec.find_unused_parameters, broadcast_buffers = sec.broadcast_buffers,
      gradient_as_bucket_view = sec.gradient_as_bucket_view,
      comm_hook = sec.comm_hook ~= 'none' and sec.comm_hook or nil, shared_memory = sec.shared_memory })
  end
  if ctx.rank == 0 and ctx.world_size > 1 and cfg.job == 'pagerank' then
    ctx.log('distributed: %d ranks (%s), the graph partitioned', ctx.world_size, dist.backend())
  elseif ctx.rank == 0 and ctx.world_size > 1 then
    local gpu = cfg.device ~= 'cpu' and dist.backend('cuda')
    ctx.log('distributed: %d ranks (%s%s), %d samples per step', ctx.world_size, dist.backend(),
      gpu and (', ' .. gpu .. ' for CUDA tensors') or '', (cfg.data and cfg.data.batch_size or 0) * ctx.world_size)
  end
end

return M
