-- bench/distributed/allreduce.lua - ember.dist.all_reduce (sum, float32, in place) over 4 KB ..
-- 256 MB, measured as bench/distributed/mpi_allreduce.c measures MPI_Allreduce (rounds of
-- back-to-back calls of ~30 ms each, the median round). Rank 0 prints one JSON line per
-- size. ember launch -n 2 bench/distributed/allreduce.lua [rounds] [max_bytes]
-- [all_reduce|broadcast|all_to_all] [label]; or under torchrun (Gloo). The label names the path
-- in the JSON ("impl"). Bus bandwidth as nccl-tests counts it: all_reduce algbw x 2(n-1)/n,
-- all_to_all algbw x (n-1)/n (the share of each rank's buffer that crosses), broadcast algbw.
local dist = ember.dist
dist.init()
local rank, size = dist.rank(), dist.world_size()
local rounds = tonumber(arg[1] or 7)
local max_bytes = tonumber(arg[2] or 256 * 1048576)
local op = arg[3] or 'all_reduce'
local label = arg[4] or 'ember'
local ops = {
  all_reduce = { function(t) dist.all_reduce(t) end, 2 * (size - 1) / size },
  broadcast = { function(t) dist.broadcast(t, 0) end, 1 },
  all_to_all = { function(t, o) dist.all_to_all(o, t) end, (size - 1) / size },
}
if not ops[op] then error('allreduce.lua: unknown collective ' .. op .. ' (all_reduce, broadcast or all_to_all)') end
local call0, factor = ops[op][1], ops[op][2]
local now = ember.C.em_clock_monotonic
local buf = ember.ones(max_bytes / 4)
local outbuf = op == 'all_to_all' and ember.zeros(max_bytes / 4) or nil
local bytes = 4096
while bytes <= max_bytes do
  local t = buf:narrow(1, 1, bytes / 4)
  local o = outbuf and outbuf:narrow(1, 1, bytes / 4)
  local function call(x) call0(x, o) end
  call(t)
  local t0 = now()
  call(t)
  local one = ember.tensor({ now() - t0 }, { dtype = 'float64' })
  dist.all_reduce(one, 'max')
  local calls = math.max(1, math.min(200, math.floor(0.03 / one:item())))
  local times = {}
  for r = 1, rounds do
    dist.barrier()
    t0 = now()
    for _ = 1, calls do call(t) end
    times[r] = (now() - t0) / calls
  end
  table.sort(times)
  local sec = times[math.floor(rounds / 2) + 1]
  local algbw = bytes / sec / 1e9
  if rank == 0 then
    print(string.format('{"impl":"%s","op":"%s","ranks":%d,"bytes":%d,"us":%.2f,"algbw":%.3f,"busbw":%.3f,"calls":%d}',
      label, op, size, bytes, sec * 1e6, algbw, algbw * factor, calls))
    io.stdout:flush()
  end
  bytes = bytes * 4
end
