-- tests/distributed/new_collectives.lua - all_to_all, all_to_all_v (uneven and empty splits),
-- gather, scatter, reduce and all_gather_v through the C API (ember/dist.h), on sizes 0, 1,
-- odd and large, every rank checking exact values; async handles. Run on 2, 3 and 4 ranks
-- over Gloo (tests/extra.cmake). Exits 77 (skipped) in a build whose libember lacks them.
local U = dofile(arg[0]:gsub('[^/]*$', '') .. 'util.lua')
local ffi = require 'ffi'
local C = require('ember.internal').C
local dist = ember.dist
for _, f in ipairs { 'em_dist_all_to_all', 'em_dist_all_to_all_v', 'em_dist_gather', 'em_dist_scatter',
  'em_dist_reduce', 'em_dist_all_gather_v' } do
  if not pcall(function() return C[f] end) then
    print('new_collectives: ' .. f .. ' is not in this libember: skipped')
    os.exit(77)
  end
end
dist.init { timeout = 60 }
local rank, W = dist.rank(), dist.world_size()
local g = C.em_dist_world()
local ok, equal, check = U.check_status, U.equal, U.check

-- rank r's k-th element destined to rank d: distinct everywhere, exact in every dtype used
local function val(r, d, k) return (r * 7 + d * 3 + k) % 113 end
local work = ffi.new('em_dist_work*[1]')
local function counts(t)
  local a = ffi.new('int64_t[?]', W)
  for i = 0, W - 1 do a[i] = t[i] end
  return a
end
-- f(g, ..., work): waits at once, or (async) through a handle; arguments may be nil
local function call(async, f, ...)
  local n, args = select('#', ...), { ... }
  args[n + 1] = async and work or nil
  ok(f(g, unpack(args, 1, n + 1)))
  if async then
    ok(C.em_dist_work_wait(work[0], 0))
    C.em_dist_work_release(work[0])
  end
end

for _, dtype in ipairs { 'float32', 'float64', 'int64', 'uint8', 'bfloat16' } do
  for _, k in ipairs { 0, 1, 5, 40001 } do
    local async = k == 5
    local kk = dtype == 'uint8' and math.min(k, 5) or k
    -- all_to_all: block d of this rank's input goes to rank d
    local inp, want = ember.zeros(W * kk, { dtype = 'float64' }), ember.zeros(W * kk, { dtype = 'float64' })
    for d = 0, W - 1 do
      for i = 1, kk do
        inp[d * kk + i] = val(rank, d, i)
        want[d * kk + i] = val(d, rank, i)
      end
    end
    local out = ember.zeros(W * kk, { dtype = dtype })
    call(async, C.em_dist_all_to_all, out, inp:to(dtype))
    equal(out, want:to(dtype), string.format('all_to_all %s k=%d', dtype, kk))
    -- all_to_all_v: rank r sends (r + d) % 3 * kk' elements to rank d (some splits empty)
    local function split(r, d) return ((r + d) % 3) * math.min(kk, 7) end
    local ic, oc, nin, nout = {}, {}, 0, 0
    for d = 0, W - 1 do
      ic[d], oc[d] = split(rank, d), split(d, rank)
      nin, nout = nin + ic[d], nout + oc[d]
    end
    local vin, vwant = ember.zeros(nin, { dtype = 'float64' }), ember.zeros(nout, { dtype = 'float64' })
    local a, b = 0, 0
    for d = 0, W - 1 do
      for i = 1, ic[d] do vin[a + i] = val(rank, d, i) end
      for i = 1, oc[d] do vwant[b + i] = val(d, rank, i) end
      a, b = a + ic[d], b + oc[d]
    end
    local vout = ember.zeros(nout, { dtype = dtype })
    call(async, C.em_dist_all_to_all_v, vout, counts(oc), vin:to(dtype), counts(ic))
    equal(vout, vwant:to(dtype), string.format('all_to_all_v %s k=%d', dtype, kk))
    -- gather to the last rank, scatter from rank 0
    local root = W - 1
    local mine = ember.zeros(kk, { dtype = 'float64' })
    for i = 1, kk do mine[i] = val(rank, 0, i) end
    local gout = rank == root and ember.zeros(W * kk, { dtype = dtype }) or nil
    call(async, C.em_dist_gather, gout, mine:to(dtype), root)
    if rank == root then
      local gw = ember.zeros(W * kk, { dtype = 'float64' })
      for r = 0, W - 1 do for i = 1, kk do gw[r * kk + i] = val(r, 0, i) end end
      equal(gout, gw:to(dtype), string.format('gather %s k=%d', dtype, kk))
    end
    local sin = nil
    if rank == 0 then
      local s = ember.zeros(W * kk, { dtype = 'float64' })
      for r = 0, W - 1 do for i = 1, kk do s[r * kk + i] = val(0, r, i) end end
      sin = s:to(dtype)
    end
    local sout = ember.zeros(kk, { dtype = dtype })
    call(async, C.em_dist_scatter, sout, sin, 0)
    local sw = ember.zeros(kk, { dtype = 'float64' })
    for i = 1, kk do sw[i] = val(0, rank, i) end
    equal(sout, sw:to(dtype), string.format('scatter %s k=%d', dtype, kk))
    -- reduce (sum) to rank 1 % W
    local t = ember.ones(kk, { dtype = 'float64' }):mul(rank + 1):to(dtype)
    call(async, C.em_dist_reduce, t, C.EM_DIST_SUM, 1 % W)
    if rank == 1 % W then
      equal(t, ember.ones(kk, { dtype = 'float64' }):mul(W * (W + 1) / 2):to(dtype), 'reduce ' .. dtype)
    end
    -- all_gather_v: rank r contributes (r % 2 == 0 and kk or 0) + r elements
    local gc, total = {}, 0
    for r = 0, W - 1 do
      gc[r] = (r % 2 == 0 and math.min(kk, 9) or 0) + (kk > 0 and r or 0)
      total = total + gc[r]
    end
    local part = ember.zeros(gc[rank], { dtype = 'float64' })
    for i = 1, gc[rank] do part[i] = val(rank, 1, i) end
    local gvout = ember.zeros(total, { dtype = dtype })
    call(async, C.em_dist_all_gather_v, gvout, counts(gc), part:to(dtype))
    local gvw, at = ember.zeros(total, { dtype = 'float64' }), 0
    for r = 0, W - 1 do
      for i = 1, gc[r] do gvw[at + i] = val(r, 1, i) end
      at = at + gc[r]
    end
    equal(gvout, gvw:to(dtype), string.format('all_gather_v %s k=%d', dtype, kk))
  end
end
-- every split empty
local none = {}
for d = 0, W - 1 do none[d] = 0 end
call(false, C.em_dist_all_to_all_v, ember.zeros(0), counts(none), ember.zeros(0), counts(none))
check(true, 'all_to_all_v with every split empty')
U.done('new_collectives')
