-- tests/distributed/stuck.lua MODE - a rank that stops taking part in the middle of training
-- (run by tests/distributed/timeout.py under `ember launch -n 2 --timeout 3`):
--   stop  rank 1 stops itself (SIGSTOP) between forward and backward
--   kill  rank 1 kills itself (SIGKILL) between forward and backward
--   busy  rank 1 computes for a long while without taking part in collectives
--   late  every step runs; then rank 1 lingers (30 s) instead of finishing
--   a2av  rank 1 computes instead of joining an all_to_all_v (first collective, async)
--   roots the ranks gather to different roots (async: no rank can finish)
--   pagerank-kill, pagerank-stop  rank 1 is killed (SIGKILL) or stopped (SIGSTOP) by a
--         timer while both ranks iterate PageRank on a partitioned graph
-- Rank 0 must end the job with a timeout error that names rank 1; it never hangs.
local mode = arg[1]
local dist, nn, F = ember.dist, ember.nn, ember.nn.functional
local ffi = require 'ffi'
ffi.cdef 'int raise(int sig);'
dist.init()
local rank = dist.rank()
if mode == 'pagerank-kill' or mode == 'pagerank-stop' then
  ffi.cdef 'int getpid(void);'
  local g = ember.graph.kronecker { scale = 14, edge_factor = 8, seed = 3, group = true }
  g:pagerank { tol = 0, max_iter = 20 }   -- both ranks are in step, and iterating works
  dist.barrier()
  if rank == 1 then
    -- a timer outside this process, so that the signal lands in the middle of the iterations
    os.execute(string.format('(sleep 1; kill -%s %d) &', mode == 'pagerank-kill' and 'KILL' or 'STOP',
      ffi.C.getpid()))
    io.stdout:write('rank 1 goes away in 1 s: ', mode, '\n')
    io.stdout:flush()
  end
  g:pagerank { tol = 0, max_iter = 1000000000 }   -- minutes: only the timeout ends it
  print('rank ' .. rank .. ' finished: that is wrong')
  return
end
if mode == 'a2av' or mode == 'roots' then
  local h
  if mode == 'a2av' then
    if rank == 1 then
      io.stdout:write('rank 1 goes away: busy\n')
      io.stdout:flush()
      local t0 = os.time()
      while os.time() - t0 < 30 do end
    end
    h = dist.all_to_all_v(ember.zeros(2), { 1, 1 }, ember.ones(2), { 1, 1 }, { async = true })
  else
    h = dist.gather(ember.zeros(2), ember.ones(1), rank, { async = true })
  end
  h:wait()
  print('rank ' .. rank .. ' finished: that is wrong')
  return
end
local net = nn.DistributedDataParallel(nn.Sequential { nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2) },
  { bucket_cap_mb = 1e-6 })
local opt = ember.optim.SGD(net:parameters(), { lr = 0.1 })
for step = 1, 5 do
  opt:zero_grad()
  local loss = F.cross_entropy(net(ember.randn(4, 8)), ember.randint(1, 3, { 4 }))
  if step == 3 and rank == 1 and mode ~= 'late' then
    io.stdout:write('rank 1 goes away: ', mode, '\n')
    io.stdout:flush()
    if mode == 'stop' then ffi.C.raise(19)
    elseif mode == 'kill' then ffi.C.raise(9)
    else
      local t0 = os.time()
      while os.time() - t0 < 30 do end
    end
  end
  loss:backward()
  opt:step()
end
if mode == 'late' then
  if rank == 1 then os.execute('sleep 30') end
  return
end
print('rank ' .. rank .. ' finished: that is wrong')
