-- tests/distributed/launch_probe.lua MODE - what tests/distributed/launch.py runs under `ember launch`:
--   print  lines on stdout and stderr, a line written in two pieces, the thread count
--   exit3  rank 1 exits with status 3 after init; rank 0 would sleep 30 s
--   error  rank 1 raises a Lua error after init; rank 0 waits in a collective
local mode = arg[1]
local dist = ember.dist
dist.init()
local rank = dist.rank()
if mode == 'print' then
  io.write('rank ', rank, ' of ', dist.world_size(), ' starts')
  io.flush()
  dist.barrier()
  io.write(' and ends its line; threads ', ember.C.em_get_num_threads(), '; launcher ', dist.env().launcher, '\n')
  io.stderr:write('stderr of rank ', rank, '\n')
elseif mode == 'exit3' then
  if rank == 1 then os.exit(3) end
  os.execute('sleep 30')
elseif mode == 'error' then
  if rank == 1 then error('boom on rank 1') end
  dist.all_reduce(ember.ones(3))
  os.execute('sleep 30')
end
