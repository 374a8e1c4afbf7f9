-- tests/distributed/nccl_ddp.lua - nn.DistributedDataParallel on CUDA parameters (buckets on the
-- GPU, reduced by NCCL) against the same model on the CPU (reduced by MPI), step by step,
-- on N ranks with one GPU each:
--   ember launch -n 2 tests/distributed/nccl_ddp.lua
-- Exits 77 (skipped) with fewer GPUs than ranks (NCCL needs one GPU per rank).
local env = ember.dist.env()
if ember.device_count('cuda') < env.world_size then
  if env.rank == 0 then
    io.stderr:write(string.format('nccl_ddp: skipped (%d CUDA devices for %d ranks; NCCL needs one GPU per rank)\n',
      ember.device_count('cuda'), env.world_size))
  end
  os.exit(77)
end

local U = dofile(arg[0]:gsub('[^/]*$', '') .. 'util.lua')
local dist, nn, F = ember.dist, ember.nn, ember.nn.functional
dist.init { backend = 'nccl', timeout = 60 }
local rank, W = dist.rank(), dist.world_size()
local check, near = U.check, U.near
local dev = 'cuda:' .. (dist.local_rank() % ember.device_count('cuda'))
local B = 6   -- samples per rank per step

-- float64 on both devices: the GPU's matmuls sum in another order than the CPU's, so the
-- two runs agree to rounding, not bit for bit
local Net = nn.Module:extend('NcclNet')
function Net:init(unused_branch)
  self.fc1 = nn.Linear(12, 16)
  self.fc2 = nn.Linear(16, 8)
  if unused_branch then self.spare = nn.Linear(5, 5) end   -- never called: no gradient
  self.fc3 = nn.Linear(8, 5)
end
function Net:forward(x) return self.fc3(self.fc2(self.fc1(x):tanh()):relu()) end

local function make(seed, unused_branch)
  ember.manual_seed(seed)
  return Net(unused_branch):to('float64')
end

local function params_close(gpu_net, cpu_net, tol, what)
  local pg, pc = gpu_net:parameters(), cpu_net:parameters()
  check(#pg == #pc, '%s: parameter counts %d %d', what, #pg, #pc)
  for i = 1, #pg do
    check(pg[i].device == dev, '%s: parameter %d is on %s', what, i, pg[i].device)
    near(pg[i]:cpu(), pc[i], tol, string.format('%s: parameter %d', what, i))
  end
end

local function global_batch(step)
  ember.manual_seed(1000 + step)
  local X = ember.randn(B * W, 12):to('float64')
  local Y = ember.randint(1, 6, { B * W })
  local perm = ember.randperm(B * W)
  return X:index_select(1, perm), Y:index_select(1, perm)
end
local function shard(t) return t:narrow(1, rank * B + 1, B) end

-- One DDP on the CPU (MPI) and one on the GPU (NCCL), trained alike; cfg.accumulate runs
-- that many no_sync micro-steps before each synchronised one.
local function compare(what, opts, cfg)
  cfg = cfg or {}
  local cpu_net = make(10 + rank, cfg.unused)          -- a different start on every rank
  local gpu_net = make(10 + rank, cfg.unused):to(dev)
  local cpu_ddp = nn.DistributedDataParallel(cpu_net, opts)
  local gpu_ddp = nn.DistributedDataParallel(gpu_net, opts)
  params_close(gpu_net, cpu_net, 0, what .. ': start-up broadcast (rank 0 values)')
  local copt = ember.optim.SGD(cpu_ddp:parameters(), { lr = 0.2, momentum = 0.9 })
  local gopt = ember.optim.SGD(gpu_ddp:parameters(), { lr = 0.2, momentum = 0.9 })
  local function step_both(X, Y)
    F.cross_entropy(cpu_ddp(X), Y):backward()
    F.cross_entropy(gpu_ddp(X:to(dev)), Y:to(dev)):backward()
  end
  for step = 1, cfg.steps or 3 do
    copt:zero_grad()
    gopt:zero_grad()
    for micro = 1, cfg.accumulate or 0 do
      local X, Y = global_batch(100 * step + micro)
      cpu_ddp:no_sync(function() F.cross_entropy(cpu_ddp(shard(X)), shard(Y)):backward() end)
      gpu_ddp:no_sync(function() F.cross_entropy(gpu_ddp(shard(X):to(dev)), shard(Y):to(dev)):backward() end)
    end
    local X, Y = global_batch(step)
    step_both(shard(X), shard(Y))
    copt:step()
    gopt:step()
    params_close(gpu_net, cpu_net, cfg.tol or 1e-9, string.format('%s: step %d', what, step))
    for i, p in ipairs(gpu_net:parameters()) do
      U.same_everywhere(p:cpu(), string.format('%s: parameter %d bits', what, i))
    end
  end
  return gpu_ddp
end

local ddp = compare('default buckets', nil, { steps = 4 })
local s = ddp:stats()
check(s.iterations == 4 and s.rebuilt and s.buckets_launched == 4, 'stats %s %s %s', s.iterations,
  tostring(s.rebuilt), s.buckets_launched)
ddp = compare('tiny buckets', { bucket_cap_mb = 1e-6, first_bucket_mb = 1e-6 })
check(#ddp:buckets() == 6, 'tiny caps: %d buckets', #ddp:buckets())
compare('gradients copied back', { gradient_as_bucket_view = false, bucket_cap_mb = 1e-6 })
compare('no_sync accumulation', nil, { accumulate = 2 })
compare('unused parameters', { find_unused_parameters = true }, { unused = true })
-- compressed buckets: both sides round the same sums to float16 / bfloat16
compare('fp16 hook', { comm_hook = 'fp16' }, { tol = 2e-3 })
compare('bf16 hook', { comm_hook = 'bf16' }, { tol = 2e-2 })

U.done('nccl_ddp')
