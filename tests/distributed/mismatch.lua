-- tests/distributed/mismatch.lua - collectives called differently on different ranks are an
-- error on every rank, never a hang or garbage, and the group goes on working afterwards
-- (tests/distributed/gloo_failures.py runs it on 2 and 3 ranks over Gloo). Handles (async)
-- keep the plain all_reduce out of shared memory, which checks its own calls.
local U = dofile(arg[0]:gsub('[^/]*$', '') .. 'util.lua')
local dist = ember.dist
dist.init { timeout = 20 }
local rank, W = dist.rank(), dist.world_size()
local fails, equal = U.fails, U.equal

local function wait(h) return h:wait() end
local function mismatch(what, fn, needles)
  fails(function() wait(fn()) end, needles, what)
  -- the same collective, called alike, still works
  local t = ember.ones(5) * (rank + 1)
  equal(wait(dist.all_reduce(t, 'sum', { async = true })), ember.ones(5) * (W * (W + 1) / 2), 'after ' .. what)
end

local diff = { 'the ranks called different collectives: rank 0 called ' }
mismatch('kinds', function()
  if rank == 0 then return dist.all_reduce(ember.ones(4), 'sum', { async = true }) end
  return dist.broadcast(ember.ones(4), 0, { async = true })
end, { diff[1] .. 'all_reduce', 'called broadcast', 'of 4 float32 elements (root 0)' })
mismatch('sizes', function()
  return dist.all_reduce(ember.ones(rank == W - 1 and 7 or 6), 'sum', { async = true })
end, { diff[1], 'of 6 float32 elements (sum)', string.format('rank %d called all_reduce', W - 1),
  'of 7 float32 elements (sum)' })
mismatch('dtypes of one byte size', function() -- 4 float32 and 2 float64: the same 16 bytes
  if rank == 0 then return dist.all_reduce(ember.ones(4), 'sum', { async = true }) end
  return dist.all_reduce(ember.ones(2, { dtype = 'float64' }), 'sum', { async = true })
end, { 'of 4 float32 elements', 'of 2 float64 elements' })
mismatch('operations', function()
  return dist.all_reduce(ember.ones(3), rank == 0 and 'sum' or 'max', { async = true })
end, { '(sum)', '(max)' })
mismatch('roots', function()
  return dist.broadcast(ember.ones(3), rank == 0 and 0 or 1, { async = true })
end, { '(root 0)', '(root 1)' })
mismatch('all_gather sizes', function()
  return dist.all_gather(ember.ones(rank + 1), { async = true })
end, { diff[1] .. 'all_gather' })

-- all_to_all_v whose counts disagree between ranks (the generic layer's em_dist_all_to_all_v:
-- skipped in a build that does not have it yet)
local ffi, C = require 'ffi', require('ember.internal').C
if pcall(function() return C.em_dist_all_to_all_v end) then
  local n = ffi.new('int64_t[?]', W)
  local m = ffi.new('int64_t[?]', W)
  for r = 0, W - 1 do n[r], m[r] = 1, 1 end
  if rank == 0 then m[W - 1] = 2 end -- rank 0 expects 2 elements from the last rank, which sends 1
  local out = ember.zeros(W + (rank == 0 and 1 or 0))
  fails(function() U.check_status(C.em_dist_all_to_all_v(C.em_dist_world(), out, m, ember.ones(W), n, nil)) end,
    { 'the counts do not match: rank ' .. (W - 1) .. ' sends 1 elements to rank 0, which expects 2 from it' },
    'all_to_all_v counts')
end
print('mismatch: ok')
U.done('mismatch')
