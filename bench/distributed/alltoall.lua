-- bench/distributed/alltoall.lua - ember.dist.all_to_all and all_to_all_v (float32) over
-- 4 KB .. 256 MB per rank, timed as bench/distributed/allreduce.lua times all_reduce (rounds of
-- back-to-back calls of ~30 ms each, the median round). bytes is each rank's input (and
-- output); all_to_all_v sends rank d a share of it proportional to (rank + d) % n + 1 (uneven,
-- the same pattern as bench/distributed/torch_alltoall.py). Rank 0 prints one JSON line per size
-- and kind; busbw = bytes / time x (n - 1) / n (what crosses between ranks).
--   ember launch -n 2 bench/distributed/alltoall.lua [rounds] [max_bytes] [min_bytes]
local dist = ember.dist
dist.init()
local rank, n = dist.rank(), dist.world_size()
local rounds = tonumber(arg[1] or 7)
local max_bytes = tonumber(arg[2] or 256 * 1048576)
local min_bytes = tonumber(arg[3] or 4096)
local now = ember.C.em_clock_monotonic

-- elements rank s sends rank d out of `total` per rank (each rank's row and column both sum
-- to about total: weights (s + d) % n + 1 form a Latin square)
local function split(s, d, total)
  local wsum = n * (n + 1) / 2
  return math.floor(total * ((s + d) % n + 1) / wsum)
end

local inbuf, outbuf = ember.ones(max_bytes / 4), ember.zeros(max_bytes / 4)

local function measure(kind, bytes)
  local elems = bytes / 4
  local call
  if kind == 'all_to_all' then
    local k = math.floor(elems / n)
    local i, o = inbuf:narrow(1, 1, k * n), outbuf:narrow(1, 1, k * n)
    call = function() dist.all_to_all(o, i) end
  else
    local ic, oc, si, so = {}, {}, 0, 0
    for d = 0, n - 1 do
      ic[d + 1], oc[d + 1] = split(rank, d, elems), split(d, rank, elems)
      si, so = si + ic[d + 1], so + oc[d + 1]
    end
    local i, o = inbuf:narrow(1, 1, si), outbuf:narrow(1, 1, so)
    call = function() dist.all_to_all_v(o, oc, i, ic) end
  end
  call()
  local t0 = now()
  call()
  local one = ember.tensor({ now() - t0 }, { dtype = 'float64' })
  dist.all_reduce(one, 'max')
  local calls = math.max(1, math.min(200, math.floor(0.03 / one:item())))
  local times = {}
  for r = 1, rounds do
    dist.barrier()
    t0 = now()
    for _ = 1, calls do call() end
    times[r] = (now() - t0) / calls
  end
  table.sort(times)
  local sec = times[math.floor(rounds / 2) + 1]
  local algbw = bytes / sec / 1e9
  if rank == 0 then
    print(string.format('{"impl":"ember","op":"%s","ranks":%d,"bytes":%d,"us":%.2f,"algbw":%.3f,"busbw":%.3f,'
      .. '"calls":%d}', kind, n, bytes, sec * 1e6, algbw, algbw * (n - 1) / n, calls))
    io.stdout:flush()
  end
end

local bytes = min_bytes
while bytes <= max_bytes do
  measure('all_to_all', bytes)
  measure('all_to_all_v', bytes)
  bytes = bytes * 4
end
