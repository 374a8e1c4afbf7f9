-- tests/distributed/nccl_timeout.lua - a CUDA collective that another rank never makes: NCCL's
-- communicator is aborted and the collective fails with an error naming it, the rank and
-- the seconds (no hang, no job abort); the group's later CUDA collectives fail at once;
-- the CPU backend still works. Two ranks with a GPU each:
--   ember launch -n 2 tests/distributed/nccl_timeout.lua
local env = ember.dist.env()
if env.world_size < 2 or ember.device_count('cuda') < env.world_size then
  if env.rank == 0 then
    io.stderr:write(string.format('nccl_timeout: skipped (%d ranks, %d CUDA devices; needs 2 ranks with a GPU each)\n',
      env.world_size, ember.device_count('cuda')))
  end
  os.exit(77)
end

local U = dofile(arg[0]:gsub('[^/]*$', '') .. 'util.lua')
local dist = ember.dist
dist.init { backend = 'nccl', timeout = 60 }
local rank, W = dist.rank(), dist.world_size()
local check, equal, fails = U.check, U.equal, U.fails
local dev = 'cuda:' .. (dist.local_rank() % ember.device_count('cuda'))

local t = ember.ones(4):to(dev)
dist.all_reduce(t)
equal(t:cpu(), ember.ones(4) * W, 'a collective every rank makes')

if rank == 0 then
  -- the other ranks never make this one
  local h = dist.all_reduce(ember.ones(1000):to(dev), 'sum', { async = true })
  local t0 = os.time()
  fails(function() h:wait(3) end, { 'all_reduce #', 'did not finish within', 'on rank 0', dev, 'aborted' },
    'timeout error')
  check(os.time() - t0 < 30, 'the timeout came after %d s', os.time() - t0)
  fails(function() dist.all_reduce(ember.ones(2):to(dev)) end, { 'all_reduce', 'aborted' },
    'later CUDA collectives on the aborted group')
end
-- the CPU backend is untouched: every rank meets there
local c = ember.ones(3)
dist.all_reduce(c)
equal(c, ember.ones(3) * W, 'MPI after the NCCL abort')
U.done('nccl_timeout')
